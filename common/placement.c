/* placement.c — which ps task holds each variable, or each axis-0 part of one
 * (see placement.h).
 *
 * Design: two passes over the variables in creation order. The first cuts each
 * variable into pieces (MinSizePartitioner: n = clamp(B / min_shard_bytes, 1,
 * min(num_ps, dim0)), the first dim0 % n parts one row longer); the second gives
 * every piece its own placement turn (round_robin counter, or the least loaded
 * ps by bytes with ties to the lowest index).
 *
 * Sparse tables take turns after the pieces (psc_place_tables): one part per PS,
 * round-robin whatever the strategy, since a table's bytes are not known.
 *
 * Invariants: the output is a pure function of the inputs; pieces of a variable are
 * consecutive, ordered by part, and cover its rows exactly once; global_step is
 * never cut and counts 8 bytes; each PS holds exactly one part of each table.
 */
#include "placement.h"

#include "psc.h"
#include "table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t psc_var_bytes(const psc_var_desc_t *v)
{
    if (v->is_step) return 8;
    return (uint64_t)v->numel * 4u;
}

/* Number of axis-0 parts for `v`. */
static int64_t num_parts(const psc_var_desc_t *v, int num_ps, uint64_t min_shard_bytes)
{
    if (v->is_step || min_shard_bytes == 0 || v->rank < 1 || v->shape[0] < 2) return 1;
    uint64_t n = psc_var_bytes(v) / min_shard_bytes;
    uint64_t cap = (uint64_t)PSC_MIN((int64_t)num_ps, v->shape[0]);
    if (n > cap) n = cap;
    if (n < 1) n = 1;
    return (int64_t)n;
}

int psc_place(const psc_var_desc_t *vars, int nvars, int num_ps, enum psc_placement_strategy strategy,
              uint64_t min_shard_bytes, psc_placed_var_t **out, int *nout, char *err, size_t errlen)
{
    *out = NULL;
    *nout = 0;
    if (num_ps < 1) return psc_seterr(err, errlen, PSC_EINVAL, "placement: need at least one ps task (got %d)", num_ps);
    if (nvars < 0 || (nvars > 0 && !vars))
        return psc_seterr(err, errlen, PSC_EINVAL, "placement: bad variable list (%d variables)", nvars);
    if (strategy != PSC_PLACE_ROUND_ROBIN && strategy != PSC_PLACE_GREEDY_BYTES)
        return psc_seterr(err, errlen, PSC_EINVAL, "placement: unknown strategy %d", (int)strategy);

    /* Pass 1: cut the variables into pieces. */
    int64_t total = 0;
    for (int i = 0; i < nvars; i++) total += num_parts(&vars[i], num_ps, min_shard_bytes);
    PSC_ASSERT(total <= INT32_MAX);
    psc_placed_var_t *p = psc_xcalloc((size_t)(total ? total : 1), sizeof *p);
    int k = 0;
    for (int i = 0; i < nvars; i++) {
        const psc_var_desc_t *v = &vars[i];
        int64_t n = num_parts(v, num_ps, min_shard_bytes);
        int64_t dim0 = v->rank >= 1 ? v->shape[0] : 1;
        int64_t row_elems = v->rank >= 1 && dim0 > 0 ? v->numel / dim0 : v->numel;
        int64_t base = dim0 / n, extra = dim0 % n, row = 0;
        for (int64_t part = 0; part < n; part++, k++) {
            psc_placed_var_t *q = &p[k];
            if (n > 1) {
                int len = snprintf(q->name, sizeof q->name, "%s/part_%d", v->name, (int)part);
                PSC_ASSERT(len > 0 && (size_t)len < sizeof q->name);
            } else {
                snprintf(q->name, sizeof q->name, "%s", v->name);
            }
            q->var_index = i;
            q->part = (int)part;
            q->num_parts = (int)n;
            q->rank = v->rank;
            q->is_step = v->is_step;
            memcpy(q->shape, v->shape, sizeof q->shape);
            if (v->rank >= 1) {
                q->row_begin = row;
                q->rows = base + (part < extra ? 1 : 0);
                q->shape[0] = q->rows;
                q->numel = q->rows * row_elems;
                q->elem_offset = q->row_begin * row_elems;
                row += q->rows;
            } else {
                q->row_begin = 0;
                q->rows = 1;
                q->numel = v->numel;
                q->elem_offset = 0;
            }
        }
        PSC_ASSERT(v->rank < 1 || row == dim0);
    }

    /* Pass 2: one placement turn per piece. */
    uint64_t *load = psc_xcalloc((size_t)num_ps, sizeof *load);
    for (int j = 0; j < k; j++) {
        int ps = 0;
        if (strategy == PSC_PLACE_ROUND_ROBIN) {
            ps = j % num_ps;
        } else {
            for (int s = 1; s < num_ps; s++)
                if (load[s] < load[ps]) ps = s;
        }
        p[j].ps = ps;
        load[ps] += p[j].is_step ? 8u : (uint64_t)p[j].numel * 4u;
    }
    free(load);
    *out = p;
    *nout = k;
    return 0;
}

int psc_place_tables(const psc_table_spec_t *tables, int n, int num_ps, int first_turn, psc_placed_table_t **out,
                     int *nout, char *err, size_t errlen)
{
    *out = NULL;
    *nout = 0;
    if (num_ps < 1) return psc_seterr(err, errlen, PSC_EINVAL, "placement: need at least one ps task (got %d)", num_ps);
    if (n < 0 || (n > 0 && !tables))
        return psc_seterr(err, errlen, PSC_EINVAL, "placement: bad table list (%d tables)", n);
    if (first_turn < 0) return psc_seterr(err, errlen, PSC_EINVAL, "placement: bad first turn %d", first_turn);
    int64_t total = (int64_t)n * num_ps;
    PSC_ASSERT(total <= INT32_MAX);
    psc_placed_table_t *p = psc_xcalloc((size_t)(total ? total : 1), sizeof *p);
    int k = 0;
    for (int t = 0; t < n; t++)
        for (int part = 0; part < num_ps; part++, k++) {
            p[k].table = t;
            p[k].part = part;
            p[k].nparts = num_ps;
            /* turn first_turn + t*num_ps + part, taken modulo num_ps without overflow */
            p[k].ps = (int)(((int64_t)first_turn % num_ps + part) % num_ps);
            p[k].rows = psc_part_rows(tables[t].partition, tables[t].rows, num_ps, part);
        }
    *out = p;
    *nout = k;
    return 0;
}
