/* evaluator.h — evaluating a job's model on its test set from outside the
 * training loop: the evaluator task (TF_CONFIG type "evaluator"), which
 * evaluates every new committed checkpoint, and `psctl eval` on the chief,
 * which evaluates the current weights. Either kind of model (model_job.h):
 * a dense one evaluates a checkpoint's saved values, a recommendation one
 * the live model (its tables' rows are read from the PS as they are).
 */
#ifndef PSC_EVALUATOR_H
#define PSC_EVALUATOR_H

#include "trainer.h"

#include <stdint.h>

typedef struct evaluator_ctx evaluator_ctx_t;

/* The model's job for evaluation (model_job.h: its test data and towers,
 * o->devices) and a PS client. */
int evaluator_ctx_create(const trainer_opts_t *o, evaluator_ctx_t **out, char *err, size_t errlen);
/* Evaluates the live model (ckpt 0; *step = global_step) or committed
 * checkpoint ckpt: its dense values and table rows as saved, read on the PS
 * without a restore while training goes on (step non-NULL: first checks that
 * ckpt is one of the job's committed checkpoints, *step = its step). Fills
 * res->test_*. */
int evaluator_ctx_run(evaluator_ctx_t *e, uint64_t ckpt, trainer_result_t *res, int64_t *step, char *err,
                      size_t errlen);
void evaluator_ctx_destroy(evaluator_ctx_t *e); /* NULL ok */

/* The evaluator task: waits for the model, then every 0.5 s lists the job's
 * checkpoints and evaluates each new committed one in id order, logging
 * "evaluator: checkpoint ID (step S): test accuracy A loss L" and, with
 * o->logdir, writing eval/accuracy and eval/loss to <logdir>/eval. Ends when
 * every training replica reported done and the checkpoint at the final
 * global_step was evaluated (or did not come within o->retry_secs), when the
 * PS stay unreachable for o->retry_secs after that, or on
 * *o->stop. res: the last evaluation. */
int evaluator_run(const trainer_opts_t *o, trainer_result_t *res, char *err, size_t errlen);

#endif
