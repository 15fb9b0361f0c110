/* job_spec.h — the Keras-like JSON job specification (see README "Job spec").
 *
 * Parsing is strict: unknown keys and wrong types are errors naming the key
 * ("job spec: model.layers[2].units: expected a positive integer"). Defaults are
 * filled in, so a parsed spec is complete. The model's variables and shapes
 * (psc_model_*) are model_spec.h's.
 * Thread-safety: plain data.
 */
#ifndef PSC_JOB_SPEC_H
#define PSC_JOB_SPEC_H

#include "table.h"
#include "tf_config.h"

#include <stddef.h>
#include <stdint.h>

enum psc_layer_type { PSC_LAYER_DENSE = 0, PSC_LAYER_FLATTEN, PSC_LAYER_CONV2D, PSC_LAYER_MAX_POOL2D, PSC_LAYER_DROPOUT };
enum psc_activation { PSC_ACT_NONE = 0, PSC_ACT_RELU, PSC_ACT_TANH, PSC_ACT_SIGMOID };
enum psc_padding { PSC_PAD_VALID = 0, PSC_PAD_SAME };
enum psc_optim_kind {
    PSC_OPT_SGD = 0,
    PSC_OPT_MOMENTUM,
    PSC_OPT_ADAGRAD,
    PSC_OPT_ADAM,
    PSC_OPT_RMSPROP,
    PSC_OPT_FTRL /* the last: loops over the kinds end here */
};
enum psc_placement_strategy { PSC_PLACE_ROUND_ROBIN = 0, PSC_PLACE_GREEDY_BYTES };

typedef struct psc_layer_spec {
    enum psc_layer_type type;
    char name[64];                  /* Keras-style unique name: dense, dense_1, conv2d, ... */
    enum psc_activation activation; /* dense, conv2d ("linear"/absent = none) */
    int units;                      /* dense */
    int use_bias;                   /* dense, conv2d; default 1 */
    int filters;                    /* conv2d */
    int kernel_size[2];             /* conv2d (h, w); an int k means (k, k) */
    int strides[2];                 /* conv2d, max_pool2d; default (1,1) conv, pool_size for pool */
    int pool_size[2];               /* max_pool2d; default (2, 2) */
    enum psc_padding padding;       /* conv2d, max_pool2d; default valid */
    float rate;                     /* dropout, in [0, 1) */
} psc_layer_spec_t;

/* Optimizer hyper-parameters, all resolved (defaults filled in). The formulas are
 * TensorFlow's tf.compat.v1.train ones; see ps_server/optim.h. */
typedef struct psc_optim_config {
    enum psc_optim_kind kind;
    float learning_rate;
    float momentum;     /* momentum: default 0.9; rmsprop: default 0 */
    int use_nesterov;   /* momentum */
    float beta1, beta2; /* adam: 0.9, 0.999 */
    float epsilon;      /* adam 1e-8, adagrad unused, rmsprop 1e-10 */
    float initial_accumulator_value; /* adagrad 0.1, ftrl 0.1 */
    float decay;        /* rmsprop rho 0.9 */
    float learning_rate_power; /* ftrl: <= 0, default -0.5 */
    float l1, l2;       /* ftrl: l1_regularization_strength, l2_regularization_strength >= 0, default 0 */
    psc_lr_schedule_t schedule; /* optimizer.schedule: learning_rate as a function of global_step (table.h) */
} psc_optim_config_t;

/* Most tables a job spec may declare. */
#define PSC_MAX_TABLES 64

/* A sparse embedding table (top-level "tables"; table.h). */
typedef struct psc_table_spec {
    char name[64];          /* unique among tables and the model's variables */
    int64_t rows;           /* 1..PSC_TABLE_MAX_ROWS */
    int dim;                /* 1..PSC_TABLE_MAX_DIM */
    psc_initializer_t init; /* default uniform(-0.05, 0.05), Keras Embedding's */
    enum psc_partition partition; /* default mod */
    psc_optim_config_t optimizer; /* the table's "optimizer", else a copy of the job's */
    int own_optimizer;      /* 1 when the table declared its own */
} psc_table_spec_t;

typedef struct psc_job_spec {
    int input_shape[3]; /* (h, w, c) for images; rank 1 specs use input_shape[0] */
    int input_rank;     /* 1 or 3 */
    psc_layer_spec_t *layers; /* owned */
    int num_layers;
    char loss[48]; /* "sparse_softmax_cross_entropy" */
    psc_table_spec_t *tables; /* owned; "tables" in spec order (NULL when none) */
    int num_tables;

    psc_optim_config_t optimizer;

    char train_path[512];  /* IDX prefix: <prefix>-images-idx3-ubyte[.gz] + -labels-idx1-ubyte[.gz] */
    char test_path[512];
    int64_t train_examples; /* data.train_examples: use the first N (0 = all) */
    int64_t test_examples;  /* data.test_examples */
    int shuffle;            /* data.shuffle: reshuffle each epoch (default 1); 0 keeps file order */

    int batch_size; /* per replica */
    int epochs;     /* default 1 */
    int64_t steps;  /* max steps per worker (0 = no limit) */

    int sync;                  /* 1 when "sync" is present */
    int replicas_to_aggregate; /* R */
    int total_num_replicas;    /* N */
    double sync_timeout_secs;  /* sync.timeout_secs, default 30 */
    int overlap_push_pull;     /* async only: step s's push-pull runs while step s+1 computes (default 0) */
    int gradient_dtype;        /* PSC_ENC_FLOAT32 (default) or PSC_ENC_BFLOAT16: how pushes carry gradients */
    int error_feedback;        /* bfloat16 only: carry each rounding error into the next step (default 1) */

    enum psc_placement_strategy placement;
    uint64_t min_shard_bytes; /* 0 = never partition */

    int64_t ckpt_every_steps; /* 0 = off */
    double ckpt_every_secs;   /* 0 = off */
    int ckpt_keep;            /* default 5 */

    uint64_t seed; /* default 42 */
    char job_id[17]; /* 16 hex digits: FNV-1a of the canonical model+optimizer(+schedule)+placement+seed+tables
                        (same spec => same id; job_spec.c) */
} psc_job_spec_t;

/* Parses JSON text into *out. Besides keys, types and ranges it checks everything
 * that does not depend on the cluster: the layers against model.input_shape
 * (psc_model_check: conv2d/max_pool2d need an image, a valid window must fit its
 * feature map, dense needs a flatten after an image, the output must be >= 2
 * logits), and each table's name against the model's variables (neither equal
 * nor a "/"-prefix of the other, job_spec_optim.c). Returns 0, or PSC_ECONFIG
 * with `err` naming the key ("job spec: tables[1].dim: expected an integer
 * 1..4096, got 0"); *out then owns nothing. psc_job_spec_deinit frees layers
 * and tables. */
int psc_job_spec_parse(const char *json, psc_job_spec_t *out, char *err, size_t errlen);
/* Reads and parses a file ("job spec FILE: cannot read: ..." on I/O errors). */
int psc_job_spec_load(const char *path, psc_job_spec_t *out, char *err, size_t errlen);
void psc_job_spec_deinit(psc_job_spec_t *s);

/* Checks a parsed spec against the cluster it is to run on, as every task does at
 * start (ps_server and worker with --job_spec; the chief's Submit): the model
 * (psc_model_check, again: a hand-built spec is not parsed), at least one ps task
 * and one training replica, and with "sync" sync.total_num_replicas = the number of
 * training replicas (chief + workers, psc_cluster_num_replicas). replicas_to_aggregate
 * may be any R >= 1: R < N gives backup workers, R > N several batches per replica.
 * Returns 0, or PSC_ECONFIG with "job spec: <key>: ..." (or "cluster: ...") in err.
 * Reads the file system not at all. Thread-safe (reads only its arguments). */
int psc_job_spec_check(const psc_job_spec_t *s, const psc_cluster_t *cluster, char *err, size_t errlen);

/* Checks that the IDX files of data.train (train != 0) and of data.test (test != 0)
 * can be read: PREFIX-images-idx3-ubyte and PREFIX-labels-idx1-ubyte, each as
 * itself or with .gz (what the worker's reader tries). access(2) only: a corrupt
 * file is found when the worker loads it. Returns 0, or PSC_ECONFIG with
 * "job spec: data.train: cannot read PATH[.gz]: <reason>" in err. */
int psc_job_spec_check_data(const psc_job_spec_t *s, int train, int test, char *err, size_t errlen);

/* What a program started with --job_spec FILE does: psc_job_spec_load, then
 * psc_job_spec_check against `cluster`, then psc_job_spec_check_data(train, test),
 * every message starting "job spec FILE: ". On error *out holds nothing to free. */
int psc_job_spec_load_checked(const char *path, const psc_cluster_t *cluster, int train, int test,
                              psc_job_spec_t *out, char *err, size_t errlen);

const char *psc_optim_name(enum psc_optim_kind k);
const char *psc_activation_name(enum psc_activation a);


#endif
