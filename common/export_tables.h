/* export_tables.h — the sparse embedding tables of a running cluster for
 * psctl export (export.h): their parts found in the PS's Status replies,
 * their rows read with TableRows pages, joined in id order.
 *
 * A table becomes one or two tensors of the safetensors file:
 *   - declared small (rows * dim * 4 < PSC_EXPORT_DENSE_TABLE_BYTES): "<name>",
 *     F32 [rows, dim], every row: the touched ones as the PS holds them, the
 *     others their initial values (table.h: what a pull would create);
 *   - otherwise: "<name>/ids", I64 [n], the ids of the n rows that exist, in
 *     ascending order, and "<name>/values", F32 [n, dim], their rows.
 * The rows are held in memory until the file is written (n * (8 + 4 * dim)
 * bytes; the dense form rows * dim * 4). Pages of a table being trained are
 * not one cut: each row is one consistent read (a checkpoint is the cut).
 * Not thread-safe: one export at a time per export_tables_t.
 */
#ifndef PSC_EXPORT_TABLES_H
#define PSC_EXPORT_TABLES_H

#include "export.h"
#include "psc.pb-c.h"
#include "rpc.h"

#include <stddef.h>
#include <stdint.h>

#define PSC_EXPORT_DENSE_TABLE_BYTES ((uint64_t)256 << 20)

typedef struct export_table export_table_t;

typedef struct export_tables {
    export_table_t *t;
    int n;
    uint64_t ckpt; /* > 0: read the rows committed checkpoint ckpt holds (set before export_tables_fetch) */
    int rows_only; /* every table as "<name>/ids" + "<name>/values", however small */
} export_tables_t;

/* Notes the table parts of PS ps's Status reply. PSC_EMISMATCH when a part
 * disagrees with the others of its table (rows, dim, parts, initializer),
 * PSC_ECORRUPT for a name too long. */
int export_tables_add(export_tables_t *x, const Psc__StatusReply *r, int ps, char *err, size_t errlen);
/* Checks that every table has each of its parts once (PSC_EMISMATCH), then
 * reads every part's rows (TableRows, pages of at most ~4 MiB) through the
 * channels ch[ps] and joins them in id order. */
int export_tables_fetch(export_tables_t *x, psc_rpc_channel_t **ch, int timeout_ms, char *err, size_t errlen);
/* Appends the tables' tensors (export.h's psc_export_tensor_t with mem set,
 * npieces 0) to *tensors (realloc'd), *nt updated; offsets are left to the
 * caller (psc_export_layout). */
void export_tables_tensors(const export_tables_t *x, psc_export_tensor_t **tensors, int *nt);
void export_tables_free(export_tables_t *x);

#endif
