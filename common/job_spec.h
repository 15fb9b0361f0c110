/* job_spec.h — the Keras-like JSON job specification (docs/job-spec.md, psc-job(5)).
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

enum psc_layer_type {
    PSC_LAYER_DENSE = 0,
    PSC_LAYER_FLATTEN,
    PSC_LAYER_CONV2D,
    PSC_LAYER_MAX_POOL2D,
    PSC_LAYER_DROPOUT,
    /* recommendation (CTR) models, loss sigmoid_cross_entropy (docs/recommendation.md) */
    PSC_LAYER_EMBEDDING,   /* categorical features -> one pooled row of a table each */
    PSC_LAYER_INTERACTION, /* DLRM's pairwise dot products of the bottom output and the pooled rows */
    PSC_LAYER_CONCAT,      /* the bottom output (or the dense features) and the pooled rows side by side */
    PSC_LAYER_WIDE         /* Wide & Deep's linear part: a dim-1 table's rows summed into the logit */
};
enum psc_loss { PSC_LOSS_SOFTMAX_XENT = 0, PSC_LOSS_SIGMOID_XENT };
enum psc_combiner { PSC_COMBINER_SUM = 0, PSC_COMBINER_MEAN, PSC_COMBINER_SQRTN };
/* data.format */
enum psc_data_format { PSC_DATA_IDX = 0, PSC_DATA_CRITEO, PSC_DATA_LIBSVM, PSC_DATA_TFRECORD };
/* data.shard: how the training replicas split the files (tf.data's auto-shard policy) */
enum psc_data_shard { PSC_SHARD_AUTO = 0, PSC_SHARD_FILE, PSC_SHARD_RECORD };
enum psc_feature_role { PSC_FEATURE_LABEL = 0, PSC_FEATURE_DENSE, PSC_FEATURE_CATEGORICAL };
/* a tf.Example feature's list type (tfrecord); criteo and libsvm fill it in */
enum psc_feature_kind { PSC_FEATURE_INT64 = 0, PSC_FEATURE_FLOAT, PSC_FEATURE_BYTES };
enum psc_dense_transform { PSC_TRANSFORM_NONE = 0, PSC_TRANSFORM_LOG1P /* log(1 + max(x, 0)), DLRM's */ };

/* Most input features a job may declare, and most features one embedding or wide layer may take. */
#define PSC_MAX_FEATURES 128

/* One input feature of a criteo / libsvm / tfrecord data set (data.features;
 * for criteo and libsvm the parser fills the list in: see docs/recommendation.md). */
typedef struct psc_feature_spec {
    char name[64];              /* criteo: label, I1..I13, C1..C26; libsvm: label, features */
    enum psc_feature_role role;
    enum psc_feature_kind kind;
    int length;                 /* values per example: > 0 fixed; 0 variable (categorical only) */
    enum psc_dense_transform transform; /* dense: default none (criteo's I*: log1p) */
    int dense_offset;           /* dense: its first column in a batch's dense (n, num_dense) */
    int cat_index;              /* categorical: its index among the categorical features (0..num_cat-1) */
} psc_feature_spec_t;
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
    /* embedding, wide: the table (index into psc_job_spec_t.tables) and the
     * categorical features (cat_index values, in the layer's order) it looks up */
    int table;
    int features[PSC_MAX_FEATURES];
    int num_features;
    enum psc_combiner combiner; /* embedding, wide: how a multi-valued feature's rows pool (default sum) */
    int hash_ids;               /* 1 (default): id = psc_feature_id_hash(...) % rows; 0: the value itself, < rows */
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
    /* "eviction" and "admission" (docs/sparse-tables.md): a row's life; not in the job id */
    int64_t ttl_steps;    /* 0: off */
    double ttl_secs;      /* 0: off */
    int64_t max_rows;     /* the whole table's cap, spread over its parts (0: none) */
    int min_count;        /* 0: every id gets a row at once */
    int64_t filter_bytes; /* the admission filter's bytes per part (0: the default, 4 MiB) */
} psc_table_spec_t;

/* "warm_start" (TF's WarmStartSettings): the new job's model starts from
 * another's values (worker/job/warm_start.h). */
typedef struct psc_warm_start {
    int on;
    char from[512];       /* a job id (16 lowercase hex digits): its committed checkpoint on these PS; else a
                             safetensors file (psctl export) on the chief's file system */
    int from_job;         /* from is a job id */
    uint64_t checkpoint;  /* from a job: 0 = its latest committed checkpoint, else this id */
    char variables[256];  /* POSIX extended regex a dense variable's whole name must match (default ".*") */
    int all_tables;       /* "tables" absent: every table of the new job */
    int ntables;          /* else the tables named (0: none) */
    char tables[PSC_MAX_TABLES][64];
    int slots;      /* "slots": the optimizer slots and update counts too (from a job only; default false) */
    int carry_step; /* "global_step": the job starts at the source's global_step (default false: at 0) */
} psc_warm_start_t;

typedef struct psc_job_spec {
    int input_shape[3]; /* (h, w, c) for images; rank 1 specs use input_shape[0] */
    int input_rank;     /* 1 or 3 */
    psc_layer_spec_t *layers; /* owned */
    int num_layers;
    char loss[48]; /* "sparse_softmax_cross_entropy" or "sigmoid_cross_entropy" */
    enum psc_loss loss_kind; /* PSC_LOSS_SIGMOID_XENT: a recommendation (CTR) model */
    psc_table_spec_t *tables; /* owned; "tables" in spec order (NULL when none) */
    int num_tables;

    psc_optim_config_t optimizer;

    enum psc_data_format data_format; /* data.format, default idx */
    char train_path[512];  /* idx: IDX prefix: <prefix>-images-idx3-ubyte[.gz] + -labels-idx1-ubyte[.gz] */
    char test_path[512];
    /* criteo, libsvm, tfrecord: data.train / data.test as file names or glob(3)
     * patterns (owned; a string is a list of one); each file plain or gzip */
    char **train_files;
    int num_train_files;
    char **test_files;
    int num_test_files;
    enum psc_data_shard shard;  /* data.shard, default auto */
    int64_t bad_record_limit;   /* data.bad_record_limit: malformed records skipped (and counted) before the
                                   job stops; 0 (default): the first one stops it */
    psc_feature_spec_t *features; /* owned; data.features (tfrecord) or filled in (criteo, libsvm); NULL for idx */
    int num_features;
    int num_dense;              /* dense floats per example (the sum of the dense features' lengths) */
    int num_cat;                /* categorical features */
    int64_t train_examples; /* data.train_examples: use the first N (0 = all) */
    int64_t test_examples;  /* data.test_examples */
    int shuffle;            /* data.shuffle: reshuffle each epoch (default 1); 0 keeps file order */
    /* data.follow (online training, docs/online-training.md): data.train_files[0] is a directory (or a
     * pattern whose wildcards are in its last component) followed as files are renamed into it */
    int follow;              /* data.follow present (then shuffle 0, epochs 1, shard by file) */
    double follow_idle_secs; /* data.follow.idle_secs: the job ends after this long without a new file (600) */
    double follow_poll_secs; /* data.follow.poll_secs: how often the directory is listed (1) */
    int test_window;         /* data.test_files: with follow, a data.test directory's newest files read (1) */

    int batch_size; /* per replica */
    int epochs;     /* default 1 */
    int64_t steps;  /* max steps per worker (0 = no limit) */

    int sync;                  /* 1 when "sync" is present */
    int replicas_to_aggregate; /* R */
    int total_num_replicas;    /* N */
    double sync_timeout_secs;  /* sync.timeout_secs, default 30 */
    int overlap_push_pull;     /* async only: step s's push-pull runs while step s+1 computes (default 0) */
    int prefetch_rows; /* async recommendation models: rows pulled a batch ahead, 0 or 1; -1 (absent): 1 unless a
                          PS shares the worker's host (ctr_job.c, ctr_prefetch.h) */
    int gradient_dtype;        /* PSC_ENC_FLOAT32 (default) or PSC_ENC_BFLOAT16: how pushes carry gradients */
    int error_feedback;        /* bfloat16 only: carry each rounding error into the next step (default 1) */

    enum psc_placement_strategy placement;
    uint64_t min_shard_bytes; /* 0 = never partition */

    int64_t ckpt_every_steps; /* 0 = off */
    double ckpt_every_secs;   /* 0 = off */
    int ckpt_keep;            /* default 5 */
    int ckpt_on_failure;      /* checkpoint.on_failure: a failed job's chief checkpoints the model as it is (default 0) */
    int allow_partial;        /* a replica that never finishes does not fail the job (default 0) */

    psc_warm_start_t warm_start; /* "warm_start" (absent: off) */

    uint64_t seed; /* default 42 */
    char job_id[17];        /* 16 hex digits: FNV-1a of the canonical model+optimizer(+schedule)+seed+tables
                        (same spec => same id; job_spec.c), not of the placement */
    char legacy_job_id[17]; /* the id psc gave it before 2026-11-29 (with the placement and the tables'
                               partition strategies): its checkpoints of then are found under it */
} psc_job_spec_t;

/* Parses JSON text into *out. Besides keys, types and ranges it checks everything
 * that does not depend on the cluster: the layers against model.input_shape
 * (psc_model_check: conv2d/max_pool2d need an image, a valid window must fit its
 * feature map, dense needs a flatten after an image, the output must be >= 2
 * logits), and each table's name against the model's variables (neither equal
 * nor a "/"-prefix of the other, job_spec_optim.c). A recommendation model
 * (model.loss sigmoid_cross_entropy, which data.format criteo, libsvm or
 * tfrecord requires and idx refuses) also gets its data.features (criteo's and
 * libsvm's filled in, job_spec_data.c), its embedding and wide layers resolved
 * against "tables" and the features (job_spec_ctr.c), model.input_shape set to
 * (num_dense), and psc_model_check's structure rules (model_spec_ctr.c).
 * Returns 0, or PSC_ECONFIG with `err` naming the key ("job spec: tables[1].dim:
 * expected an integer 1..4096, got 0"); *out then owns nothing.
 * psc_job_spec_deinit frees layers, tables, train_files, test_files and
 * features. */
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

/* Checks that the files of data.train (train != 0) and of data.test (test != 0)
 * can be read. idx: PREFIX-images-idx3-ubyte and PREFIX-labels-idx1-ubyte, each
 * as itself or with .gz (what the worker's reader tries). criteo, libsvm,
 * tfrecord: each name of the list is the file itself when it has no glob(3)
 * characters, else a pattern that must match at least one file; every file must
 * be readable and not a directory (an absent data.test checks nothing); with
 * data.follow the followed directory must exist (its files may come later)
 * and data.test may be a directory (the rolling window). stat(2),
 * access(2) and glob(3) only: a corrupt file is found when the worker reads it.
 * Returns 0, or PSC_ECONFIG with "job spec: data.train: cannot read PATH[.gz]:
 * <reason>", "job spec: data.train: no file matches PATTERN" or "job spec:
 * data.test: cannot read FILE: <reason>" in err. */
int psc_job_spec_check_data(const psc_job_spec_t *s, int train, int test, char *err, size_t errlen);

/* What a program started with --job_spec FILE does: psc_job_spec_load, then
 * psc_job_spec_check against `cluster`, then psc_job_spec_check_data(train, test),
 * every message starting "job spec FILE: ". On error *out holds nothing to free. */
int psc_job_spec_load_checked(const char *path, const psc_cluster_t *cluster, int train, int test,
                              psc_job_spec_t *out, char *err, size_t errlen);

/* A followed data.train (data.follow) as the directory to list and the
 * pattern its names must match: "/logs/train" or "/logs/train/" is the
 * directory, every name (*pattern NULL); "/logs/train/part-*.tsv" is
 * "/logs/train" and "part-*.tsv" (*pattern points into train). Wildcards
 * (* ? [) only in the last component. 0, or PSC_EINVAL (a wildcard in a
 * directory's name, or dir too small). Thread-safe. */
int psc_job_spec_follow_dir(const char *train, char *dir, size_t dirlen, const char **pattern);

const char *psc_optim_name(enum psc_optim_kind k);
const char *psc_activation_name(enum psc_activation a);


#endif
