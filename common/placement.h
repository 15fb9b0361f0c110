/* placement.h — where each variable lives: a pure function of (ordered variables,
 * number of PS, strategy, min_shard_bytes), computed identically by every task.
 *
 * round_robin: in creation order, ps = counter++ % num_ps (TF replica_device_setter),
 *   so global_step (first) lands on ps 0.
 * greedy_bytes: the PS with the fewest bytes so far, ties to the lowest index (TF's
 *   GreedyLoadBalancingStrategy with byte_size_load_fn).
 * partitioning: when min_shard_bytes > 0, a variable of B bytes with dim0 rows is cut
 *   along axis 0 into n = clamp(floor(B / min_shard_bytes), 1, min(num_ps, dim0))
 *   parts (TF's MinSizePartitioner: every part at least min_shard_bytes, at most one
 *   per PS); part i has dim0/n + (i < dim0%n) rows and is named "name/part_i". Each
 *   part takes a placement turn of its own. global_step is never partitioned and
 *   counts 8 bytes. Optimizer slots live with their variable and take no turn.
 * sparse tables (psc_place_tables): a table has one part per PS (nparts =
 *   num_ps, split by its partition_strategy, table.h); the parts take round-robin
 *   turns after the model's pieces: part k of the t-th table (spec order) goes
 *   to ps (first_turn + t*num_ps + k) % num_ps, first_turn = the number of
 *   pieces psc_place gave out, so every PS holds exactly one part of every table.
 *   greedy_bytes places tables the same way: a table's size grows with the rows
 *   touched and is not known in advance.
 * Thread-safety: pure functions of their arguments.
 */
#ifndef PSC_PLACEMENT_H
#define PSC_PLACEMENT_H

#include "model_spec.h"
#include "psc.h"

#include <stddef.h>
#include <stdint.h>

typedef struct psc_placed_var {
    char name[PSC_NAME_MAX + 1]; /* "dense/kernel" or "dense/kernel/part_1" */
    int var_index;      /* index into the model's variable list */
    int part, num_parts;
    int64_t row_begin;  /* first axis-0 row of the full variable */
    int64_t rows;       /* rows in this piece (1 for rank 0) */
    int rank;
    int64_t shape[PSC_MAX_RANK]; /* shape of this piece */
    int64_t numel;      /* elements in this piece */
    int64_t elem_offset;/* offset of the piece inside the full variable, in elements */
    int ps;             /* index of the ps task that holds it */
    int is_step;
} psc_placed_var_t;

/* Places `vars`. *out is heap-allocated (free()). Returns 0 or PSC_EINVAL
 * (num_ps < 1) with err set. */
int psc_place(const psc_var_desc_t *vars, int nvars, int num_ps, enum psc_placement_strategy strategy,
              uint64_t min_shard_bytes, psc_placed_var_t **out, int *nout, char *err, size_t errlen);

/* One part of a sparse table. */
typedef struct psc_placed_table {
    int table;  /* index into the spec's tables */
    int part;   /* 0..nparts-1 */
    int nparts; /* = num_ps */
    int ps;     /* index of the ps task that holds it */
    int64_t rows; /* rows of this part (psc_part_rows; 0 for the parts past `rows` when rows < num_ps with div) */
} psc_placed_table_t;

/* Places the parts of tables[0..n): *out gets n * num_ps entries, table by
 * table in spec order, each table's parts by part; *out is heap-allocated
 * (free(); non-NULL even when n = 0). first_turn: the pieces the model's
 * variables took (psc_place's *nout). Returns 0, or PSC_EINVAL with err set
 * (num_ps < 1, n < 0, first_turn < 0, tables NULL with n > 0). */
int psc_place_tables(const psc_table_spec_t *tables, int n, int num_ps, int first_turn, psc_placed_table_t **out,
                     int *nout, char *err, size_t errlen);

/* Bytes of one variable as placement counts them (float32 values; global_step 8). */
uint64_t psc_var_bytes(const psc_var_desc_t *v);

#endif
