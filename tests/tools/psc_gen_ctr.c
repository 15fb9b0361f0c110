/* psc_gen_ctr — writes synthetic click logs in Criteo's TSV format from a
 * planted logistic model, and prints that model's AUC on the test file: the
 * best AUC any model can expect there, since the planted model is the true
 * P(click | row). The data are synthetic; real Criteo files read the same way.
 *
 * Rows: label TAB I1..I13 TAB C1..C26, one a line; I integers (decimal, I2 may
 * be negative), C 8 lowercase hex digits; a missing value is an empty field.
 * Files: DIR/train-0000i-of-0000K.tsv (the training rows split into K
 * contiguous shards) and DIR/test.tsv; ".gz" added with --gzip (zlib level 1,
 * one gzip member per block of rows, compressed on the generating threads).
 * Each file is written as NAME.tmp and renamed when complete.
 *
 * The planted model (constants below; the README's part: readme_gen.md):
 *   logit = B0 + sum_j a_j (log1p(max(I_j, 0)) - c_j)
 *              + sum_f w_f(r_f) + sum_{(f,g) in PAIRS} <v_f(r_f), v_g(r_g)>
 * over the fields present in the row (a missing field adds nothing), r_f the
 * Zipf rank of feature f's value; label ~ Bernoulli(sigmoid(logit)), so the
 * planted model is the true P(click | row) and nothing a model could learn is
 * hidden from the file.
 *   Feature f (0-based) has card_f = round(10 (C / 10)^(f / 25)) values
 * (card_25 = C); r_f ~ Zipf(a) on 1..card_f, drawn by rejection-inversion
 * (Hormann and Derflinger 1996: O(1), no tables); its hex is a keyed bijection
 * of r_f - 1 on 32 bits, so the file shows the value, not the rank.
 *   w and v are pure functions of (seed, feature, rank) through psc_mix64,
 * nothing stored per id: raw w = d(r) U, raw v_i = d(r) U_i with U uniform on
 * [-sqrt 3, sqrt 3] and d(r) = K0 / (K0 + r - 1); then centred and scaled per
 * feature (feature_moments) so that over the feature's Zipf distribution w has
 * mean 0 and variance (SIGMA_W g_f)^2 E[d^2], g_f = 2 / (1 + log10(card_f) /
 * 2), and v mean 0 and element variance SIGMA_V^2 E[d^2]. So frequent ids
 * and small features carry the signal (an id of rank 10^6 almost none), and
 * the logit's mean and spread (the positive rate, the AUC) vary little with
 * the seed. PAIRS join the five smallest features.
 *   I_j = floor(exp(mu_j + sd_j N(0, 1))) - off_j (I2 reaches -3); c_j and
 * s_j are the mean and standard deviation of log1p(max(I_j, 0)) (computed by
 * quadrature) and a_j = SIGMA_A U / s_j.
 *
 * Drift (--drift L, off by default): ids appear, are popular for a while and
 * fade, as in real click logs. Each rank r of feature f is held by a sequence
 * of ids, each for L examples of the stream: at example t the id of rank r is
 * generation g = floor((t + phase_r) / L), phase_r a hash of (seed, f, r) in
 * [0, L) so that the ranks turn over at different times; during the first
 * DRIFT_FADE L examples of its turn a new id shares the rank with the one it
 * replaces (the old one with probability falling linearly from 1 to 0). The
 * id's hex is the keyed bijection of (g card_f + r - 1) mod 2^32 (generation
 * 0 is the undrifted id), so the live ids are a window of the id space that
 * moves forward with t, and an id comes back only after 2^32 / card_f
 * generations. A new id takes over its rank's popularity and latent values
 * (w and v are functions of the rank): the file's ids drift while the planted
 * logits' distribution (positive rate, planted AUC) stays the undrifted one,
 * and each id's weight is only learnable from the rows in which it is live.
 * Training row i is example start + i (--start), test row j example start +
 * train_rows + j: the test rows continue the stream.
 *
 * Determinism: training row i draws from psc_rng seeded by (seed, 0, start +
 * i), test row j by (seed, 1, j), so the output is a function of the flags
 * other than --threads, the training rows are the same whatever --files is
 * (only the cuts move), and --start N --train_rows M writes rows N..N+M-1 of
 * the stream that --train_rows N+M writes whole.
 * Threads: blocks of BLOCK_ROWS rows are drawn and formatted on --threads
 * threads, then written in order by the main thread.
 */
#include "ctr_eval.h"
#include "psc.h"
#include "rng.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define NUM_DENSE 13
#define NUM_CAT 26
#define DIM 4 /* the interaction vectors' length */
#define MAX_FILES 99999
#define MAX_THREADS 64
#define TRAIN_EVAL_ROWS 10000000 /* the summary's AUC on the training set: its first rows */
#define MAX_ROWS ((int64_t)1 << 40)  /* --train_rows, --start, --drift */
#define DRIFT_FADE 0.25              /* the part of an id's turn it shares with the id it replaces */

/* ---- the planted model's constants ---- */
#define B0 (-1.45)
#define SIGMA_W 0.36
#define SIGMA_V 0.25
#define SIGMA_A 0.15
#define K0 64.0
#define SQRT3 1.7320508075688772
#define TWO_PI 6.283185307179586

/* feature pairs of the interaction term (0-based: C1 is 0) */
static const int PAIRS[][2] = {{0, 1}, {0, 2}, {1, 2}, {0, 3}, {1, 3}, {2, 3}, {2, 4}, {3, 4}};
#define NUM_PAIRS ((int)(sizeof PAIRS / sizeof PAIRS[0]))

/* the integer features' log-normal location, scale and offset (I2 may be negative) */
static const double DENSE_MU[NUM_DENSE] = {0.5, 1.0, 1.5, 1.0, 7.0, 3.0, 1.5, 2.0, 3.5, 0.0, 0.8, 0.2, 1.5};
static const double DENSE_SD[NUM_DENSE] = {1.2, 1.5, 1.2, 1.0, 2.0, 1.5, 1.2, 1.0, 1.3, 0.8, 1.0, 1.2, 1.2};
static const int DENSE_OFF[NUM_DENSE] = {0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

typedef struct gen_opts {
    const char *out;
    int64_t train_rows, test_rows;
    int64_t start; /* the example index of the first training row */
    int64_t drift; /* an id's turn in examples; 0: no drift */
    int64_t files;
    int gzip;
    int threads;
    uint64_t seed;
    uint64_t max_card;
    double zipf, missing;
} gen_opts_t;

/* ---- Zipf by rejection-inversion (Hormann & Derflinger, "Rejection-inversion
 * to generate variates from monotone discrete distributions", 1996) ----
 * P(k) proportional to k^-a on 1..n. With h(x) = x^-a and H an integral of h
 * (written so that a = 1 is no special case), u is uniform on (H(1.5) - h(1),
 * H(n + 0.5)], x = H^-1(u), k = round(x); k is accepted when u >= H(k + 0.5)
 * - h(k), i.e. when u fell in the part of k's cell of length h(k), so each k
 * comes out with probability proportional to h(k); within s of k acceptance is
 * certain, so most draws cost one log1p and one exp. */
typedef struct zipf {
    double a;
    double n;
    double h_x1, h_n, s;
} zipf_t;

static double helper_log1p_x(double x) /* log1p(x) / x */
{
    return fabs(x) > 1e-8 ? log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}

static double helper_expm1_x(double x) /* expm1(x) / x */
{
    return fabs(x) > 1e-8 ? expm1(x) / x : 1 + x * 0.5 * (1 + x / 3 * (1 + 0.25 * x));
}

static double zipf_h(const zipf_t *z, double x) { return exp(-z->a * log(x)); }

static double zipf_hint(const zipf_t *z, double x) /* H(x) = (x^(1-a) - 1) / (1 - a) */
{
    double lx = log(x);
    return helper_expm1_x((1 - z->a) * lx) * lx;
}

static double zipf_hint_inv(const zipf_t *z, double y)
{
    double t = y * (1 - z->a);
    if (t < -1) t = -1; /* rounding at the edge */
    return exp(helper_log1p_x(t) * y);
}

static void zipf_init(zipf_t *z, double a, uint64_t n)
{
    z->a = a;
    z->n = (double)n;
    z->h_x1 = zipf_hint(z, 1.5) - 1;
    z->h_n = zipf_hint(z, z->n + 0.5);
    z->s = 2 - zipf_hint_inv(z, zipf_hint(z, 2.5) - zipf_h(z, 2));
}

static uint64_t zipf_sample(const zipf_t *z, psc_rng_t *rng)
{
    for (;;) {
        double u = z->h_n + psc_rng_uniform(rng) * (z->h_x1 - z->h_n);
        double x = zipf_hint_inv(z, u);
        double k = floor(x + 0.5);
        if (k < 1) k = 1;
        if (k > z->n) k = z->n;
        if (k - x <= z->s || u >= zipf_hint(z, k + 0.5) - zipf_h(z, k)) return (uint64_t)k;
    }
}

/* ---- the planted model ---- */

typedef struct model {
    uint64_t seed;
    uint64_t card[NUM_CAT];
    zipf_t zipf[NUM_CAT];
    double g[NUM_CAT];      /* w's per-feature scale */
    uint64_t wkey[NUM_CAT]; /* hash keys of w and v */
    uint32_t hexkey[NUM_CAT][2];
    int in_pair[NUM_CAT];                          /* feature takes part in an interaction */
    double w_mean[NUM_CAT], w_scale[NUM_CAT];      /* w = w_scale (raw - w_mean) */
    double v_mean[NUM_CAT][DIM], v_scale[NUM_CAT]; /* v = v_scale (raw - v_mean) */
    double a[NUM_DENSE], centre[NUM_DENSE];        /* a_j (log1p(max(I_j, 0)) - centre_j) */
    uint32_t miss_threshold;                       /* a field is missing when 32 random bits are below it */
    int miss_all;                                  /* --missing 1 */
    int64_t drift;                                 /* an id's turn in examples; 0: no drift */
    int64_t test_t0;                               /* the example index of test row 0 */
    uint64_t phase_key[NUM_CAT];                   /* drift: hash keys of the ranks' phases */
} model_t;

static double unit_sym(uint64_t h) /* 53 bits -> uniform on [-sqrt 3, sqrt 3) */
{
    return SQRT3 * (2.0 * (double)(h >> 11) * 0x1.0p-53 - 1.0);
}

/* A keyed bijection of 32 bits (xor, then the "lowbias32" xorshift-multiply
 * mixer, then add) of an id's index (rank - 1 without drift): distinct
 * indexes get distinct hex values. */
static uint32_t value_of_index(const model_t *m, int f, uint32_t index)
{
    uint32_t x = index ^ m->hexkey[f][0];
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x + m->hexkey[f][1];
}

/* Drift: the index of the id that holds rank `rank` of feature f at example
 * t (see the top of the file). Draws from rng only in the fade-over. */
static uint32_t drift_index(const model_t *m, int f, uint64_t rank, int64_t t, psc_rng_t *rng)
{
    uint64_t life = (uint64_t)m->drift;
    uint64_t pos = (uint64_t)t + psc_mix64(m->phase_key[f] ^ psc_mix64(rank)) % life;
    uint64_t gen = pos / life;
    double into = (double)(pos % life), fade = DRIFT_FADE * (double)life;
    if (gen > 0 && into < fade && psc_rng_uniform(rng) * fade >= into) gen--; /* P(old) = 1 - into / fade */
    return (uint32_t)(gen * m->card[f] + rank - 1); /* mod 2^32: unsigned wrap-around is meant */
}

static double rank_decay(uint64_t rank) { return K0 / (K0 + (double)(rank - 1)); }

/* The raw weight d(r) U and vector d(r) (U_0..U_3) of rank r: hashes of
 * (seed, feature, rank), U uniform on [-sqrt 3, sqrt 3]. */
static double raw_weight(const model_t *m, int f, uint64_t rank)
{
    return rank_decay(rank) * unit_sym(psc_mix64(m->wkey[f] ^ psc_mix64(rank)));
}

static void raw_vector(const model_t *m, int f, uint64_t rank, double x[DIM])
{
    uint64_t h = psc_mix64(psc_mix64(m->wkey[f] ^ psc_mix64(rank)) ^ 0x9e3779b97f4a7c15ull);
    double d = rank_decay(rank);
    for (int i = 0; i < DIM; i++) /* 16 bits each */
        x[i] = d * SQRT3 * (2.0 * ((double)((h >> (16 * i)) & 0xffff) + 0.5) / 65536.0 - 1.0);
}

static double weight_of(const model_t *m, int f, uint64_t rank)
{
    return m->w_scale[f] * (raw_weight(m, f, rank) - m->w_mean[f]);
}

static void vector_of(const model_t *m, int f, uint64_t rank, double v[DIM])
{
    raw_vector(m, f, rank, v);
    for (int i = 0; i < DIM; i++) v[i] = m->v_scale[f] * (v[i] - m->v_mean[f][i]);
}

#define MOMENT_RANKS 131072

/* Centres and scales feature f's weights and vectors so that over its Zipf
 * distribution w has mean 0 and variance (SIGMA_W g_f)^2 E[d^2], and v mean 0
 * and per-element variance SIGMA_V^2 E[d^2] (on average over the elements):
 * the model's scale does not hang on which ids the seed made large. Sums over
 * the first MOMENT_RANKS ranks; later ranks have d(r) < K0 / 2^17 and are left
 * out of the sums (not of the normalizer, their probability mass is the
 * integral of x^-a from MOMENT_RANKS + 0.5 to card + 0.5). */
static void feature_moments(model_t *m, int f)
{
    const zipf_t *z = &m->zipf[f];
    uint64_t ranks = m->card[f] < MOMENT_RANKS ? m->card[f] : MOMENT_RANKS;
    double norm = 0, d2 = 0, sw = 0, sww = 0, sv[DIM] = {0}, svv[DIM] = {0};
    for (uint64_t r = 1; r <= ranks; r++) {
        double p = zipf_h(z, (double)r), d = rank_decay(r), x = raw_weight(m, f, r);
        norm += p;
        d2 += p * d * d;
        sw += p * x;
        sww += p * x * x;
        if (!m->in_pair[f]) continue;
        double xv[DIM];
        raw_vector(m, f, r, xv);
        for (int i = 0; i < DIM; i++) sv[i] += p * xv[i], svv[i] += p * xv[i] * xv[i];
    }
    if (m->card[f] > ranks) norm += zipf_hint(z, (double)m->card[f] + 0.5) - zipf_hint(z, (double)ranks + 0.5);
    d2 /= norm;
    m->w_mean[f] = sw / norm;
    double var = sww / norm - m->w_mean[f] * m->w_mean[f];
    m->w_scale[f] = var > 0 ? SIGMA_W * m->g[f] * sqrt(d2 / var) : 0;
    double var_sum = 0;
    for (int i = 0; i < DIM; i++) {
        m->v_mean[f][i] = sv[i] / norm;
        var_sum += svv[i] / norm - m->v_mean[f][i] * m->v_mean[f][i];
    }
    m->v_scale[f] = var_sum > 0 ? SIGMA_V * sqrt(DIM * d2 / var_sum) : 0;
}

/* Mean and standard deviation of log1p(max(I_j, 0)), I_j = floor(exp(mu +
 * sd Z)) - off, Z ~ N(0, 1): the midpoint rule on z in [-8, 8]. */
static void dense_moments(int j, double *mean, double *sd)
{
    enum { STEPS = 16000 };
    double s = 0, ss = 0, wsum = 0;
    for (int k = 0; k < STEPS; k++) {
        double zv = -8.0 + (k + 0.5) * (16.0 / STEPS), w = exp(-0.5 * zv * zv);
        double x = floor(exp(DENSE_MU[j] + DENSE_SD[j] * zv)) - DENSE_OFF[j];
        double y = log1p(x > 0 ? x : 0);
        s += w * y;
        ss += w * y * y;
        wsum += w;
    }
    *mean = s / wsum;
    double var = ss / wsum - *mean * *mean;
    *sd = var > 0 ? sqrt(var) : 1;
}

static void model_init(model_t *m, const gen_opts_t *o)
{
    memset(m, 0, sizeof *m);
    m->seed = o->seed;
    for (int p = 0; p < NUM_PAIRS; p++) m->in_pair[PAIRS[p][0]] = m->in_pair[PAIRS[p][1]] = 1;
    for (int f = 0; f < NUM_CAT; f++) {
        double c = floor(10.0 * pow((double)o->max_card / 10.0, f / (double)(NUM_CAT - 1)) + 0.5);
        m->card[f] = f == NUM_CAT - 1 ? o->max_card : (uint64_t)c;
        zipf_init(&m->zipf[f], o->zipf, m->card[f]);
        m->g[f] = 2.0 / (1.0 + log10((double)m->card[f]) / 2.0);
        m->wkey[f] = psc_seed_mix(psc_seed_mix(o->seed, 0x77656967u /* "weig" */), (uint64_t)f);
        uint64_t hk = psc_seed_mix(psc_seed_mix(o->seed, 0x68657821u /* "hex!" */), (uint64_t)f);
        m->hexkey[f][0] = (uint32_t)hk;
        m->hexkey[f][1] = (uint32_t)(hk >> 32);
        m->phase_key[f] = psc_seed_mix(psc_seed_mix(o->seed, 0x64726966u /* "drif" */), (uint64_t)f);
        feature_moments(m, f);
    }
    for (int j = 0; j < NUM_DENSE; j++) {
        uint64_t h = psc_mix64(psc_seed_mix(psc_seed_mix(o->seed, 0x64656e73u /* "dens" */), (uint64_t)j));
        double sd;
        dense_moments(j, &m->centre[j], &sd);
        m->a[j] = SIGMA_A * unit_sym(h) / sd;
    }
    double t = o->missing * 4294967296.0;
    m->miss_threshold = t >= 4294967295.0 ? UINT32_MAX : (uint32_t)t;
    m->miss_all = o->missing >= 1.0;
    m->drift = o->drift;
    m->test_t0 = o->start + o->train_rows;
}

/* ---- one row ---- */

typedef struct row {
    int label;
    unsigned char has_dense[NUM_DENSE], has_cat[NUM_CAT];
    int64_t dense[NUM_DENSE];
    uint32_t value[NUM_CAT];
    double logit;
} row_t;

static int field_missing(const model_t *m, psc_rng_t *rng)
{
    if (m->miss_all) return 1;
    return (uint32_t)(psc_rng_next(rng) >> 32) < m->miss_threshold;
}

static double normal_draw(psc_rng_t *rng, double *spare, int *have_spare)
{
    if (*have_spare) {
        *have_spare = 0;
        return *spare;
    }
    double u1 = 1.0 - psc_rng_uniform(rng), u2 = psc_rng_uniform(rng); /* u1 in (0, 1] */
    double r = sqrt(-2.0 * log(u1));
    *spare = r * sin(TWO_PI * u2);
    *have_spare = 1;
    return r * cos(TWO_PI * u2);
}

static double row_dense(const model_t *m, psc_rng_t *rng, row_t *r)
{
    double logit = 0, spare = 0;
    int have_spare = 0;
    for (int j = 0; j < NUM_DENSE; j++) {
        r->has_dense[j] = !field_missing(m, rng);
        if (!r->has_dense[j]) continue;
        double x = floor(exp(DENSE_MU[j] + DENSE_SD[j] * normal_draw(rng, &spare, &have_spare)));
        if (x > 1e15) x = 1e15;
        r->dense[j] = (int64_t)x - DENSE_OFF[j];
        logit += m->a[j] * (log1p(r->dense[j] > 0 ? (double)r->dense[j] : 0.0) - m->centre[j]);
    }
    return logit;
}

/* Draws row `index` of split `split` (0 train: example `index` of the stream;
 * 1 test: example test_t0 + index) and its planted logit and label. */
static void row_draw(const model_t *m, int split, int64_t index, row_t *r)
{
    psc_rng_t rng;
    psc_rng_seed(&rng, psc_seed_mix(psc_seed_mix(m->seed, (uint64_t)split + 1), (uint64_t)index));
    int64_t t = split ? m->test_t0 + index : index;
    double logit = B0 + row_dense(m, &rng, r);
    uint64_t rank[NUM_CAT];
    for (int f = 0; f < NUM_CAT; f++) {
        r->has_cat[f] = !field_missing(m, &rng);
        if (!r->has_cat[f]) continue;
        rank[f] = zipf_sample(&m->zipf[f], &rng);
        uint32_t id = m->drift ? drift_index(m, f, rank[f], t, &rng) : (uint32_t)(rank[f] - 1);
        r->value[f] = value_of_index(m, f, id);
        logit += weight_of(m, f, rank[f]);
    }
    double v[NUM_CAT][DIM];
    for (int f = 0; f < NUM_CAT; f++)
        if (m->in_pair[f] && r->has_cat[f]) vector_of(m, f, rank[f], v[f]);
    for (int p = 0; p < NUM_PAIRS; p++) {
        int f = PAIRS[p][0], g = PAIRS[p][1];
        if (!r->has_cat[f] || !r->has_cat[g]) continue;
        for (int i = 0; i < DIM; i++) logit += v[f][i] * v[g][i];
    }
    r->logit = logit;
    r->label = psc_rng_uniform(&rng) < 1.0 / (1.0 + exp(-logit));
}

/* ---- formatting ---- */

#define ROW_MAX (2 + NUM_DENSE * 21 + NUM_CAT * 9 + 1) /* label, tabs, digits, newline */

static char *put_int(char *p, int64_t v)
{
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    if (v < 0) *p++ = '-';
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (n) *p++ = tmp[--n];
    return p;
}

static char *put_hex8(char *p, uint32_t v)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 7; i >= 0; i--) {
        p[i] = digits[v & 15];
        v >>= 4;
    }
    return p + 8;
}

static char *row_format(const row_t *r, char *p)
{
    *p++ = (char)('0' + r->label);
    for (int j = 0; j < NUM_DENSE; j++) {
        *p++ = '\t';
        if (r->has_dense[j]) p = put_int(p, r->dense[j]);
    }
    for (int f = 0; f < NUM_CAT; f++) {
        *p++ = '\t';
        if (r->has_cat[f]) p = put_hex8(p, r->value[f]);
    }
    *p++ = '\n';
    return p;
}

/* ---- output files: NAME.tmp renamed when complete ---- */

typedef struct out_file {
    char path[4096], tmp[4200];
    FILE *f;
} out_file_t;

static int out_open(out_file_t *o, const char *dir, const char *name, int gzip)
{
    snprintf(o->path, sizeof o->path, "%s/%s%s", dir, name, gzip ? ".gz" : "");
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp", o->path);
    o->f = fopen(o->tmp, "wb");
    if (!o->f) {
        fprintf(stderr, "psc_gen_ctr: cannot create %s: %s\n", o->tmp, strerror(errno));
        return -1;
    }
    return 0;
}

static int out_write(out_file_t *o, const void *data, size_t len)
{
    if (fwrite(data, 1, len, o->f) != len) {
        fprintf(stderr, "psc_gen_ctr: cannot write %s: %s\n", o->tmp, strerror(errno));
        return -1;
    }
    return 0;
}

/* Closes and (ok and every write good) renames into place; else removes the
 * temporary file. */
static int out_close(out_file_t *o, int ok)
{
    if (fclose(o->f) != 0) {
        if (ok) fprintf(stderr, "psc_gen_ctr: cannot write %s: %s\n", o->tmp, strerror(errno));
        ok = 0;
    }
    if (ok && rename(o->tmp, o->path) != 0) {
        fprintf(stderr, "psc_gen_ctr: cannot rename %s to %s: %s\n", o->tmp, o->path, strerror(errno));
        ok = 0;
    }
    if (!ok) remove(o->tmp);
    return ok ? 0 : -1;
}

/* ---- generating blocks of rows on --threads threads, written in order ---- */

#define BLOCK_ROWS 8192
#define BLOCK_TEXT ((size_t)BLOCK_ROWS * ROW_MAX)

typedef struct block {
    const model_t *m;
    int split;
    int gzip;
    int64_t first, n; /* rows [first, first + n) of the split */
    char *text;       /* (BLOCK_TEXT) the formatted rows */
    size_t len;
    unsigned char *gz; /* (gz_cap) with --gzip: the rows as one gzip member */
    size_t gz_len, gz_cap;
    int gz_rc;     /* zlib's error, 0 when fine */
    float *logits; /* (BLOCK_ROWS) planted logits */
    float *labels; /* (BLOCK_ROWS) */
    int64_t positives;
} block_t;

/* Compresses the block's text into one gzip member (zlib level 1): members
 * compressed on their threads and concatenated make a valid gzip file, read
 * through by gzread, zcat and Python's gzip. */
static void block_deflate(block_t *b)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    b->gz_rc = deflateInit2(&z, 1, Z_DEFLATED, 15 + 16 /* gzip wrapper */, 8, Z_DEFAULT_STRATEGY);
    if (b->gz_rc != Z_OK) return;
    z.next_in = (unsigned char *)b->text;
    z.avail_in = (uInt)b->len;
    z.next_out = b->gz;
    z.avail_out = (uInt)b->gz_cap;
    int rc = deflate(&z, Z_FINISH);
    b->gz_len = z.total_out;
    b->gz_rc = rc == Z_STREAM_END ? 0 : rc == Z_OK ? Z_BUF_ERROR : rc;
    deflateEnd(&z);
}

static void *block_run(void *arg)
{
    block_t *b = arg;
    char *p = b->text;
    b->positives = 0;
    for (int64_t k = 0; k < b->n; k++) {
        row_t r;
        row_draw(b->m, b->split, b->first + k, &r);
        p = row_format(&r, p);
        b->logits[k] = (float)r.logit;
        b->labels[k] = (float)r.label;
        b->positives += r.label;
    }
    b->len = (size_t)(p - b->text);
    if (b->gzip) block_deflate(b);
    return NULL;
}

typedef struct split_stats {
    int64_t rows, positives;
    uint64_t bytes, file_bytes; /* uncompressed; on disk */
    ctr_eval_t eval;            /* the planted logits against the drawn labels */
    int64_t eval_limit;         /* of the split's first eval_limit rows (memory: 4 bytes a row) */
} split_stats_t;

typedef struct writer {
    const model_t *m;
    const gen_opts_t *o;
    block_t *blocks; /* (o->threads) */
} writer_t;

/* Runs blocks[0..nb) on threads (the first on this one; inline where a
 * thread cannot start). */
static void blocks_run(block_t *blocks, int nb)
{
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int t = 1; t < nb; t++) started[t] = pthread_create(&tid[t], NULL, block_run, &blocks[t]) == 0;
    block_run(&blocks[0]);
    for (int t = 1; t < nb; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            block_run(&blocks[t]);
    }
}

/* Writes a finished block and counts it. */
static int block_put(const block_t *b, out_file_t *out, split_stats_t *st)
{
    if (b->gzip && b->gz_rc != 0) {
        fprintf(stderr, "psc_gen_ctr: cannot compress %s: zlib error %d\n", out->tmp, b->gz_rc);
        return -1;
    }
    if (out_write(out, b->gzip ? (const void *)b->gz : b->text, b->gzip ? b->gz_len : b->len) != 0) return -1;
    int64_t room = st->eval_limit - st->eval.n;
    ctr_eval_add(&st->eval, b->logits, b->labels, b->n < room ? b->n : room);
    st->positives += b->positives;
    st->bytes += b->len;
    return 0;
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Writes rows [first, first + n) of split `split` to DIR/name. */
static int write_rows(writer_t *w, const char *name, int split, int64_t first, int64_t n, split_stats_t *st)
{
    out_file_t out;
    if (out_open(&out, w->o->out, name, w->o->gzip) != 0) return -1;
    int ok = 1;
    for (int64_t i = 0; i < n && ok;) {
        int nb = 0;
        for (; nb < w->o->threads && i < n; nb++, i += BLOCK_ROWS) {
            block_t *b = &w->blocks[nb];
            b->m = w->m;
            b->split = split;
            b->first = first + i;
            b->n = n - i < BLOCK_ROWS ? n - i : BLOCK_ROWS;
        }
        blocks_run(w->blocks, nb);
        for (int k = 0; k < nb && ok; k++) ok = block_put(&w->blocks[k], &out, st) == 0;
    }
    if (out_close(&out, ok) != 0) return -1;
    st->rows += n;
    uint64_t size = file_size(out.path);
    st->file_bytes += size;
    printf("wrote %s: %" PRId64 " rows, %" PRIu64 " bytes\n", out.path, n, size);
    return 0;
}

static int write_all(const model_t *m, const gen_opts_t *o, split_stats_t *train, split_stats_t *test)
{
    writer_t w = {.m = m, .o = o, .blocks = psc_xcalloc((size_t)o->threads, sizeof(block_t))};
    for (int t = 0; t < o->threads; t++) {
        block_t *b = &w.blocks[t];
        b->text = psc_xmalloc(BLOCK_TEXT);
        b->logits = psc_xmalloc(BLOCK_ROWS * sizeof(float));
        b->labels = psc_xmalloc(BLOCK_ROWS * sizeof(float));
        b->gzip = o->gzip;
        if (o->gzip) {
            b->gz_cap = compressBound((uLong)BLOCK_TEXT) + 64; /* + the gzip wrapper's 18 bytes */
            b->gz = psc_xmalloc(b->gz_cap);
        }
    }
    int rc = 0;
    for (int64_t k = 0; k < o->files && rc == 0; k++) {
        /* shard k: rows [k n / K, (k + 1) n / K) */
        int64_t lo = o->train_rows * k / o->files; /* < 2^40 * 2^17: no overflow */
        int64_t hi = o->train_rows * (k + 1) / o->files;
        char name[64];
        snprintf(name, sizeof name, "train-%05" PRId64 "-of-%05" PRId64 ".tsv", k, o->files);
        rc = write_rows(&w, name, 0, o->start + lo, hi - lo, train);
    }
    if (rc == 0) rc = write_rows(&w, "test.tsv", 1, 0, o->test_rows, test);
    for (int t = 0; t < o->threads; t++) {
        free(w.blocks[t].text);
        free(w.blocks[t].gz);
        free(w.blocks[t].logits);
        free(w.blocks[t].labels);
    }
    free(w.blocks);
    return rc;
}

/* ---- flags ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: psc_gen_ctr --out DIR [flags]\n"
               "Writes SYNTHETIC click logs in Criteo's TSV format (label, I1..I13, C1..C26; categorical\n"
               "values as 8 lowercase hex digits; empty fields missing) drawn from a planted logistic model\n"
               "with pairwise embedding interactions, and prints that model's AUC on the test file (the best\n"
               "a model can expect) on the line \"planted model AUC on the test set: A\".\n"
               "Files: DIR/train-00000-of-0000K.tsv ... (K shards of the training rows) and DIR/test.tsv.\n"
               "flags (also as --flag=value):\n"
               "  --out DIR             output directory, created if missing (required)\n"
               "  --train_rows N        training rows (default 2000000)\n"
               "  --test_rows N         test rows (default 200000)\n"
               "  --files K             training shards, 1..99999 (default 2)\n"
               "  --gzip                write .tsv.gz (zlib level 1; one gzip member per 8192 rows)\n"
               "  --threads N           generating threads, 1..64 (default: online CPUs, at most 8); the output\n"
               "                        does not depend on it\n"
               "  --seed S              the model's and the rows' seed, 0..2^64-1 (default 1); the output is a\n"
               "                        function of the flags\n"
               "  --max_cardinality C   distinct values of the largest feature, C26 (10..4294967296, default\n"
               "                        100000000); C1..C26 have round(10 (C/10)^(f/25)) values, f = 0..25\n"
               "  --zipf A              Zipf exponent of each feature's values, 0 < A <= 10 (default 1.1)\n"
               "  --missing P           probability that a field is empty, 0..1 (default 0.02)\n"
               "  --drift L             ids that drift: each rank of a feature is held by a new id every L\n"
               "                        examples (1..2^40; phases per rank, the new id fading in over L/4);\n"
               "                        the test rows follow the training rows in the stream (default 0: off)\n"
               "  --start N             the stream's example index of the first training row (0..2^40,\n"
               "                        default 0): --start N --train_rows M writes rows N..N+M-1 of the\n"
               "                        stream that --train_rows N+M writes whole\n"
               "  --help                this text\n"
               "exit: 0, 1 on an error writing the files, 64 on bad flags\n");
}

static int bad_flag(const char *flag, const char *value, const char *want)
{
    fprintf(stderr, "psc_gen_ctr: %s: '%s' is not %s (see --help)\n", flag, value, want);
    return -1;
}

static int parse_u64(const char *flag, const char *v, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (*v < '0' || *v > '9' || *end || errno || x < lo || x > hi) {
        char want[96];
        snprintf(want, sizeof want, "an integer in %" PRIu64 "..%" PRIu64, lo, hi);
        return bad_flag(flag, v, want);
    }
    *out = x;
    return 0;
}

static int parse_real(const char *flag, const char *v, double lo, int lo_open, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || !(lo_open ? x > lo : x >= lo) || !(x <= hi)) {
        char want[96];
        snprintf(want, sizeof want, "a number in %s%g, %g]", lo_open ? "(" : "[", lo, hi);
        return bad_flag(flag, v, want);
    }
    *out = x;
    return 0;
}

static int parse_value(gen_opts_t *o, const char *flag, const char *v)
{
    uint64_t u;
    int rc;
    if (!strcmp(flag, "--out")) {
        if (!*v) return bad_flag(flag, v, "a directory");
        o->out = v;
        return 0;
    }
    if (!strcmp(flag, "--train_rows")) {
        rc = parse_u64(flag, v, 1, (uint64_t)MAX_ROWS, &u);
        o->train_rows = (int64_t)u;
    } else if (!strcmp(flag, "--start")) {
        rc = parse_u64(flag, v, 0, (uint64_t)MAX_ROWS, &u);
        o->start = (int64_t)u;
    } else if (!strcmp(flag, "--drift")) {
        rc = parse_u64(flag, v, 0, (uint64_t)MAX_ROWS, &u);
        o->drift = (int64_t)u;
    } else if (!strcmp(flag, "--test_rows")) {
        rc = parse_u64(flag, v, 1, (uint64_t)1 << 31, &u);
        o->test_rows = (int64_t)u;
    } else if (!strcmp(flag, "--files")) {
        rc = parse_u64(flag, v, 1, MAX_FILES, &u);
        o->files = (int64_t)u;
    } else if (!strcmp(flag, "--threads")) {
        rc = parse_u64(flag, v, 1, MAX_THREADS, &u);
        o->threads = (int)u;
    } else if (!strcmp(flag, "--seed")) {
        rc = parse_u64(flag, v, 0, UINT64_MAX, &o->seed);
    } else if (!strcmp(flag, "--max_cardinality")) {
        rc = parse_u64(flag, v, 10, (uint64_t)1 << 32, &o->max_card);
    } else if (!strcmp(flag, "--zipf")) {
        rc = parse_real(flag, v, 0, 1, 10, &o->zipf);
    } else if (!strcmp(flag, "--missing")) {
        rc = parse_real(flag, v, 0, 0, 1, &o->missing);
    } else {
        fprintf(stderr, "psc_gen_ctr: unknown flag %s (see --help)\n", flag);
        return -1;
    }
    return rc;
}

/* 0: run; 1: --help printed; -1: bad flags (message printed). */
static int parse_flags(int argc, char **argv, gen_opts_t *o)
{
    *o = (gen_opts_t){.train_rows = 2000000,
                      .test_rows = 200000,
                      .files = 2,
                      .seed = 1,
                      .max_card = 100000000,
                      .zipf = 1.1,
                      .missing = 0.02};
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = cpus < 1 ? 1 : cpus > 8 ? 8 : (int)cpus;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--gzip")) {
            o->gzip = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "psc_gen_ctr: unexpected argument '%s' (flags start with --; see --help)\n", a);
            return -1;
        }
        char flag[64];
        const char *eq = strchr(a, '='), *v;
        size_t flen = eq ? (size_t)(eq - a) : strlen(a);
        if (flen >= sizeof flag) flen = sizeof flag - 1;
        memcpy(flag, a, flen);
        flag[flen] = 0;
        if (eq) {
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            fprintf(stderr, "psc_gen_ctr: %s needs a value (see --help)\n", flag);
            return -1;
        }
        if (parse_value(o, flag, v) != 0) return -1;
    }
    if (!o->out) {
        fprintf(stderr, "psc_gen_ctr: --out DIR is required (see --help)\n");
        return -1;
    }
    return 0;
}

/* mkdir -p */
static int make_dirs(const char *dir)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) {
        fprintf(stderr, "psc_gen_ctr: --out: path too long\n");
        return -1;
    }
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "psc_gen_ctr: cannot create directory %s: %s\n", p, strerror(errno));
            return -1;
        }
        *s = c;
        if (!c) break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "psc_gen_ctr: --out %s is not a directory\n", dir);
        return -1;
    }
    return 0;
}

/* ---- main ---- */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void print_summary(const model_t *m, const gen_opts_t *o, split_stats_t *train, split_stats_t *test, double secs)
{
    printf("categorical cardinalities C1..C26:");
    for (int f = 0; f < NUM_CAT; f++) printf(" %" PRIu64, m->card[f]);
    printf("\n");
    split_stats_t *sp[2] = {train, test};
    const char *names[2] = {"train", "test"};
    for (int s = 0; s < 2; s++) {
        split_stats_t *t = sp[s];
        printf("%s: %" PRId64 " rows in %" PRId64 " file%s, %" PRIu64 " bytes (%" PRIu64 " on disk), positives %.4f; "
               "generating model's AUC %.4f, log loss %.4f",
               names[s], t->rows, s ? (int64_t)1 : o->files, (!s && o->files > 1) ? "s" : "", t->bytes, t->file_bytes,
               (double)t->positives / (double)t->rows, ctr_eval_auc(&t->eval), ctr_eval_log_loss(&t->eval));
        printf(t->eval.n < t->rows ? " (first %" PRId64 " rows)\n" : "\n", t->eval.n);
    }
    if (o->drift || o->start) {
        printf("stream: training rows are examples %" PRId64 "..%" PRId64 ", test rows %" PRId64 "..%" PRId64, o->start,
               o->start + o->train_rows - 1, m->test_t0, m->test_t0 + o->test_rows - 1);
        if (o->drift)
            printf("; each id live %" PRId64 " examples\n", o->drift);
        else
            printf("; no drift\n");
    }
    double rows = (double)(train->rows + test->rows), bytes = (double)(train->bytes + test->bytes);
    printf("generated %.0f rows, %.1f MB in %.2f s: %.0f rows/s, %.1f MB/s (seed %" PRIu64 ")\n", rows, bytes / 1e6,
           secs, rows / secs, bytes / 1e6 / secs, o->seed);
    printf("planted model AUC on the test set: %.4f\n", ctr_eval_auc(&test->eval));
}

int main(int argc, char **argv)
{
    gen_opts_t o;
    int rc = parse_flags(argc, argv, &o);
    if (rc != 0) return rc > 0 ? 0 : 64;
    if (make_dirs(o.out) != 0) return 1;
    model_t m;
    model_init(&m, &o);
    split_stats_t train = {.eval_limit = TRAIN_EVAL_ROWS}, test = {.eval_limit = INT64_MAX};
    ctr_eval_init(&train.eval);
    ctr_eval_init(&test.eval);
    double t0 = now_s();
    rc = write_all(&m, &o, &train, &test);
    if (rc == 0) print_summary(&m, &o, &train, &test, now_s() - t0);
    ctr_eval_free(&train.eval);
    ctr_eval_free(&test.eval);
    return rc == 0 ? 0 : 1;
}
