/* warm_start.h — a job's model starts from another's values (the job spec's
 * "warm_start", TF's WarmStartSettings / init_from_checkpoint): the chief,
 * when it initializes the model (no checkpoint of the job itself to restore),
 * reads the source
 *   - a committed checkpoint of another job on these PS ("from": its job id;
 *     "checkpoint": latest or an id): exported, tables as rows, through the
 *     checkpoint's own description (Describe), to a temporary safetensors file
 *     that is mapped and unlinked at once; or
 *   - a safetensors file (psctl export's, or any with F32 tensors of the same
 *     names),
 * and puts its values in place of the initial ones:
 *   - each dense variable (but global_step) whose whole name matches
 *     "variables" and that the source holds, by name: the shape must be the
 *     same (else PSC_ECONFIG naming both);
 *   - each selected table's rows the source holds ("<name>/ids" +
 *     "<name>/values", or a dense "<name>" [rows, dim]): the dim must be the
 *     same and every id below the new table's rows (else PSC_ECONFIG); the rows
 *     are assigned on the PS that hold their parts in the new placement
 *     (AssignRows), so the number of PS and the partition strategy may differ.
 * What the source lacks starts from its initializer, named in one log line.
 * Optimizer slots start as a new model's and global_step at 0, unless asked
 * ("slots", from a job's checkpoint: the variables and tables taken come with
 * their slots and update counts, read whole and re-split; "global_step": the
 * job starts at the source's step, kept as its base_step); either way the job
 * trains its own full schedule. A restarted chief of the job restores the job's own
 * checkpoints and never warm-starts again; a chief that dies before the model
 * is ready warm-starts again from scratch (the model was never ready).
 */
#ifndef PSC_WARM_START_H
#define PSC_WARM_START_H

#include "job_spec.h"
#include "model_spec.h"
#include "ps_client.h"
#include "tf_config.h"

#include <regex.h>
#include <stddef.h>

typedef struct warm_start {
    const psc_job_spec_t *spec; /* spec->warm_start.on */
    const psc_var_desc_t *vars;
    int nvars;
    float *params; /* the slab ps_client_create_model assigns */
    ps_client_t *pc;
    const psc_cluster_t *cluster;
    /* between the two hooks */
    uint64_t src_ckpt; /* the source checkpoint warm_start_apply read (0: none) */
    int64_t file_step; /* a file's global_step (carried over) */
    regex_t re;        /* warm_start_stage's "variables" */
} warm_start_t;

/* The ps_client init hook (ps_client_set_init_hook, arg a warm_start_t):
 * reads the source, fills ws->params, assigns the tables' rows on the PS not
 * ready[p]. 0, or PSC_ECONFIG (a source that does not exist or does not fit
 * the model: err names both sides), or the PS's or the file's error. */
int warm_start_apply(void *ws, const int *ready, char *err, size_t errlen);

/* The ps_client stage hook (ps_client_set_stage_hook, after the initial
 * values, when no PS was ready): with "slots" or "global_step", stages the
 * job's first checkpoint (ps_client_warm_stage): the variables and tables
 * taken, with their optimizer slots and update counts (slots; values too),
 * global_step carried over (global_step), the rest as assigned. *ckpt 0
 * when neither is asked. */
int warm_start_stage(void *ws, uint64_t *ckpt, int64_t *step, char *err, size_t errlen);

#endif
