/* data_batch.c — building a data_batch_t example by example (the record
 * parsers' side of reader_internal.h) and freeing it (reader.h).
 *
 * Its own file, not reader.c's: the reader uses the formats' tables and
 * the formats use these helpers, and one folder's files must not call each
 * other in a cycle (tests/tools/check_layout.sh).
 *
 * data_batch_pair and data_batch_close_bag are inline in the header (the
 * parsers' hot path). Invariants between calls: off[n * num_cat] = nnz (the committed examples'
 * pairs); while example n is built, `bags` of its bags are closed and
 * off[n * num_cat + 1 .. + bags] are their ends. The arrays only grow
 * (doubling), so a reader reusing one batch allocates nothing once warm.
 */
#include "reader_internal.h"

#include "psc.h"

#include <stdlib.h>
#include <string.h>

void data_batch_free(data_batch_t *b)
{
    if (!b) return;
    free(b->dense);
    free(b->label);
    free(b->off);
    free(b->keys);
    free(b->weights);
    memset(b, 0, sizeof *b);
}

/* Room for `need` examples. */
static void grow_examples(data_batch_t *b, int need)
{
    if (need <= b->cap_n) return;
    PSC_ASSERT(need > 0 && need <= INT32_MAX / 2);
    /* the first allocation holds 64 examples, or fewer wide ones (at most
     * 1 Mi floats unless one example is wider): a file's header may declare
     * the width (idx), and only examples read grow it further */
    int first = b->num_dense > (1 << 14) ? PSC_MAX(1, (1 << 20) / b->num_dense) : 64;
    int cap = b->cap_n > 0 ? b->cap_n : first;
    while (cap < need) cap *= 2;
    b->dense = psc_xrealloc(b->dense, (size_t)cap * (size_t)b->num_dense * sizeof *b->dense);
    b->label = psc_xrealloc(b->label, (size_t)cap * sizeof *b->label);
    b->off = psc_xrealloc(b->off, ((size_t)cap * (size_t)b->num_cat + 1) * sizeof *b->off);
    b->cap_n = cap;
}

void data_batch_reset(data_batch_t *b, int num_dense, int num_cat)
{
    PSC_ASSERT(num_dense >= 0 && num_cat >= 0);
    if (b->num_dense != num_dense || b->num_cat != num_cat) {
        /* other widths: the arrays' sizes no longer follow from cap_n */
        data_batch_free(b);
        b->num_dense = num_dense;
        b->num_cat = num_cat;
    }
    grow_examples(b, 1);
    b->n = 0;
    b->nnz = 0;
    b->bags = 0;
    b->off[0] = 0;
}

void data_batch_begin(data_batch_t *b)
{
    grow_examples(b, b->n + 1);
    float *row = b->dense + (size_t)b->n * (size_t)b->num_dense;
    if (b->num_dense) memset(row, 0, (size_t)b->num_dense * sizeof *row);
    b->label[b->n] = 0.0f;
    b->off[(size_t)b->n * (size_t)b->num_cat] = b->nnz;
    b->bags = 0;
}

void data_batch_grow_pairs(data_batch_t *b)
{
    int64_t cap = b->cap_nnz > 0 ? b->cap_nnz * 2 : 1024;
    b->keys = psc_xrealloc(b->keys, (size_t)cap * sizeof *b->keys);
    b->weights = psc_xrealloc(b->weights, (size_t)cap * sizeof *b->weights);
    b->cap_nnz = cap;
}

void data_batch_commit(data_batch_t *b)
{
    PSC_ASSERT(b->bags == b->num_cat);
    b->n++;
    b->bags = 0;
}

void data_batch_rollback(data_batch_t *b)
{
    if (b->off) b->nnz = b->off[(size_t)b->n * (size_t)b->num_cat];
    b->bags = 0;
}
