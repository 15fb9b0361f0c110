/* ctr_eval.h — the click-through models' test metrics: exact ROC AUC and
 * log loss, one-shot over arrays and streamed over a test set's batches.
 *
 * AUC is the probability that a random positive scores above a random
 * negative, a tie counting one half: the Mann-Whitney U statistic over P * N,
 *   AUC = (sum of the positives' ranks - P(P+1)/2) / (P N),
 * ranks 1..n in ascending score order, tied scores sharing their average
 * rank. It is computed as U = sum over distinct scores s of
 * pos(s) * (neg(< s) + neg(s) / 2), the same number, in exact 64-bit integer
 * arithmetic (2U fits for n < 2^31), after radix-sorting the scores: O(n),
 * about 10 bytes of scratch per example. It is exact: no bins, no
 * thresholds (unlike tf.keras.metrics.AUC's 200 thresholds). A label counts as
 * positive when it is > 0.5 (labels are 0/1). Scores are compared as floats:
 * -0 and +0 tie; AUC is NAN when a score is NaN or when P or N is 0.
 * AUC is invariant under any increasing map of the scores, so logits and
 * sigmoid(logits) give the same value (up to ties that float rounding of the
 * sigmoid creates near 0 and 1: pass logits).
 *
 * Log loss: the mean of sigmoid cross-entropy on logits,
 *   max(z, 0) - z y + log1p(exp(-|z|)),
 * summed in double in input order (stable for any |z|; labels may be soft).
 *
 * Thread-safety: the functions are pure over their arguments; a ctr_eval_t is
 * owned by one thread at a time.
 */
#ifndef PSC_CTR_EVAL_H
#define PSC_CTR_EVAL_H

#include <stdint.h>

/* Exact ROC AUC of scores against 0/1 labels (n >= 0); the inputs are not
 * modified (the sort works on a copy). NAN when either class is empty or a
 * score is NaN. */
double ctr_auc(const float *scores, const float *labels, int64_t n);

/* Mean sigmoid cross-entropy of logits against labels; NAN when n is 0. */
double ctr_log_loss(const float *logits, const float *labels, int64_t n);

/* Streaming evaluation: keeps every example's score (4 bytes each, split by
 * class) and the running loss sum, so AUC stays exact over many batches.
 * Caller storage; ctr_eval_init before use, ctr_eval_free after. */
typedef struct ctr_eval {
    uint32_t *pos;      /* (npos) sortable keys of the positives' logits */
    uint32_t *neg;      /* (nneg) sortable keys of the negatives' logits */
    int64_t npos, nneg; /* examples kept per class */
    int64_t cap_pos, cap_neg;
    int64_t n;          /* examples added */
    int64_t nan_scores; /* NaN logits seen (AUC is then NAN) */
    double loss_sum;    /* sum of the examples' cross-entropy, in order */
} ctr_eval_t;

void ctr_eval_init(ctr_eval_t *e);
/* Adds n examples (logits and their labels); grows the arrays (aborts on OOM). */
void ctr_eval_add(ctr_eval_t *e, const float *logits, const float *labels, int64_t n);
/* AUC over every example added so far: equals ctr_auc over their
 * concatenation. Sorts the kept scores in place (more may be added after). */
double ctr_eval_auc(ctr_eval_t *e);
/* Log loss over every example added so far: equals ctr_log_loss over their
 * concatenation, bit for bit. */
double ctr_eval_log_loss(const ctr_eval_t *e);
/* Forgets the examples, keeps the memory. */
void ctr_eval_reset(ctr_eval_t *e);
/* Frees the arrays; the struct may be initialized again. NULL ok. */
void ctr_eval_free(ctr_eval_t *e);

#endif
