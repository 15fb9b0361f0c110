/* warm_start.c — see warm_start.h. */
#include "warm_start.h"

#include "bytes.h"
#include "export.h"
#include "log.h"
#include "psc.h"
#include "safetensors.h"
#include "tower.h"

#include <inttypes.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WS_EXPORT_TIMEOUT_MS 120000 /* each call of the source checkpoint's export */
#define WS_ROWS_PER_ASSIGN ((size_t)1 << 20)

/* Opens the source as a safetensors image; what: how the log names it. */
static int open_source(warm_start_t *ws, psc_st_file_t *f, char *what, size_t wlen, char *err, size_t errlen)
{
    const psc_warm_start_t *w = &ws->spec->warm_start;
    if (!w->from_job) {
        snprintf(what, wlen, "file %s", w->from);
        char why[768];
        int rc = psc_st_load(w->from, f, why, sizeof why);
        return rc ? psc_seterr(err, errlen, PSC_ECONFIG, "warm start: %s", why) : 0;
    }
    uint64_t id = 0;
    int64_t step = 0;
    char why[768];
    int rc = ps_client_ckpt_find(ws->pc, w->from, w->checkpoint, &id, &step, why, sizeof why);
    if (rc) return psc_seterr(err, errlen, rc == PSC_ENOTFOUND ? PSC_ECONFIG : rc, "warm start: %s", why);
    ws->src_ckpt = id; /* the one a stage that carries global_step reads too */
    snprintf(what, wlen, "checkpoint %llu of job %s (step %lld)", (unsigned long long)id, w->from, (long long)step);
    const char *dir = getenv("TMPDIR");
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s/psc-warm-start-XXXXXX", dir && dir[0] ? dir : "/tmp");
    int fd = mkstemp(tmp);
    if (fd < 0) return psc_seterr(err, errlen, PSC_EIO, "warm start: cannot create a file in %s", dir ? dir : "/tmp");
    close(fd);
    rc = psc_export_safetensors_ex(ws->cluster, tmp, id, PSC_EXPORT_TABLE_ROWS | PSC_EXPORT_DESCRIBED,
                                   WS_EXPORT_TIMEOUT_MS, NULL, why, sizeof why);
    if (rc == 0) rc = psc_st_load(tmp, f, why, sizeof why);
    unlink(tmp); /* mapped: the image lives until psc_st_free */
    if (rc == PSC_ENOTFOUND || rc == PSC_EMISMATCH || rc == PSC_ECORRUPT) rc = PSC_ECONFIG;
    return rc ? psc_seterr(err, errlen, rc, "warm start from %s: %s", what, why) : 0;
}

/* The dense variables: into ws->params. *used / absent as the log says. */
static int dense(const warm_start_t *ws, const psc_st_file_t *f, const char *what, int *used, char *absent, size_t alen,
                 char *err, size_t errlen)
{
    const psc_warm_start_t *w = &ws->spec->warm_start;
    char pat[300];
    snprintf(pat, sizeof pat, "^(%s)$", w->variables); /* the whole name */
    regex_t re;
    if (regcomp(&re, pat, REG_EXTENDED | REG_NOSUB))
        return psc_seterr(err, errlen, PSC_ECONFIG, "warm_start.variables: \"%s\" does not compile", w->variables);
    int64_t *off = psc_xmalloc((size_t)ws->nvars * sizeof *off);
    tower_layout(ws->vars, ws->nvars, off);
    int rc = 0;
    for (int i = 0; i < ws->nvars && !rc; i++) {
        const psc_var_desc_t *v = &ws->vars[i];
        if (v->is_step || regexec(&re, v->name, 0, NULL, 0) != 0) continue;
        const psc_st_tensor_t *t = psc_st_find(f, v->name);
        if (!t) {
            psc_note_name(absent, alen, v->name);
            continue;
        }
        int same = t->dtype == PSC_ST_F32 && t->rank == v->rank;
        for (int d = 0; same && d < v->rank; d++) same = t->shape[d] == v->shape[d];
        if (!same) {
            char a[96], b[96];
            psc_export_fmt_shape(a, sizeof a, v->shape, v->rank);
            psc_export_fmt_shape(b, sizeof b, t->shape, t->rank);
            rc = psc_seterr(err, errlen, PSC_ECONFIG,
                            "warm start: variable %s is F32 %s in this job's model but %s %s in %s", v->name, a,
                            psc_st_dtype_name(t->dtype), b, what);
            break;
        }
        memcpy(ws->params + off[i], t->data, (size_t)v->numel * 4); /* little-endian, as the host */
        (*used)++;
    }
    free(off);
    regfree(&re);
    return rc;
}

/* Table k's rows from the source: ids and values (n x dim), or a dense
 * [rows, dim] (ids NULL). 0 with *n 0 when the source has none. */
static int table_source(const warm_start_t *ws, const psc_st_file_t *f, int k, const char *what,
                        const psc_st_tensor_t **ids, const psc_st_tensor_t **vals, char *err, size_t errlen)
{
    const psc_table_spec_t *T = &ws->spec->tables[k];
    char name[PSC_EXPORT_NAME_MAX + 16];
    snprintf(name, sizeof name, "%s/ids", T->name);
    *ids = psc_st_find(f, name);
    snprintf(name, sizeof name, "%s/values", T->name);
    *vals = psc_st_find(f, name);
    if (!*ids && !*vals) *vals = psc_st_find(f, T->name); /* the dense form */
    if (!*vals) {
        if (*ids) return psc_seterr(err, errlen, PSC_ECONFIG, "warm start: %s has %s/ids but no values", what, T->name);
        return 0;
    }
    const psc_st_tensor_t *v = *vals;
    int64_t n = v->rank == 2 ? v->shape[0] : -1;
    if (v->dtype != PSC_ST_F32 || v->rank != 2 || v->shape[1] != T->dim)
        return psc_seterr(
            err, errlen, PSC_ECONFIG,
            "warm start: table %s has dim %d in this job but its rows in %s are %s of rank %d (dim %" PRId64 ")",
            T->name, T->dim, what, psc_st_dtype_name(v->dtype), v->rank, v->rank == 2 ? v->shape[1] : 0);
    if (*ids && ((*ids)->dtype != PSC_ST_I64 || (*ids)->rank != 1 || (*ids)->shape[0] != n))
        return psc_seterr(err, errlen, PSC_ECONFIG, "warm start: table %s in %s: %s/ids is not I64 [%" PRId64 "]",
                          T->name, what, T->name, n);
    if (!*ids && n > T->rows)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "warm start: table %s has %" PRId64 " rows in this job but %" PRId64 " in %s", T->name,
                          T->rows, n, what);
    return 0;
}

/* Assigns table k's rows, a batch at a time (aligned copies of the mapped
 * file's bytes, every id checked: ascending, below the table's rows). */
static int table_rows(const warm_start_t *ws, int k, const psc_st_tensor_t *ids, const psc_st_tensor_t *vals,
                      const int *ready, const char *what, uint64_t *rows, char *err, size_t errlen)
{
    const psc_table_spec_t *T = &ws->spec->tables[k];
    size_t n = (size_t)vals->shape[0], d = (size_t)T->dim, per = PSC_MIN(WS_ROWS_PER_ASSIGN, n ? n : 1);
    int64_t *bid = psc_xmalloc(per * sizeof *bid);
    float *bval = psc_xmalloc(per * d * sizeof *bval);
    int64_t prev = -1;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i += per) {
        size_t m = PSC_MIN(per, n - i);
        for (size_t j = 0; j < m; j++) {
            bid[j] = ids ? (int64_t)psc_le_get64(ids->data + 8 * (i + j)) : (int64_t)(i + j);
            if (bid[j] <= prev || bid[j] >= T->rows) {
                rc = psc_seterr(
                    err, errlen, PSC_ECONFIG,
                    "warm start: table %s in %s: row id %" PRId64 " is %s (this job's table has %" PRId64 " rows)",
                    T->name, what, bid[j], bid[j] <= prev ? "not above the one before" : "out of range", T->rows);
                break;
            }
            prev = bid[j];
        }
        memcpy(bval, vals->data + 4 * d * i, 4 * d * m);
        if (!rc) rc = ps_client_table_assign(ws->pc, k, bid, bval, m, ready, err, errlen);
    }
    free(bid);
    free(bval);
    if (!rc) *rows += n;
    return rc;
}

static int selected(const psc_warm_start_t *w, const char *table)
{
    if (w->all_tables) return 1;
    for (int i = 0; i < w->ntables; i++)
        if (strcmp(w->tables[i], table) == 0) return 1;
    return 0;
}

/* A file's global_step, to carry over: *step. */
static int file_step(const psc_st_file_t *f, const char *what, int64_t *step, char *err, size_t errlen)
{
    const psc_st_tensor_t *t = psc_st_find(f, "global_step");
    if (!t || t->dtype != PSC_ST_I64 || t->numel != 1 || (int64_t)psc_le_get64(t->data) < 0)
        return psc_seterr(
            err, errlen, PSC_ECONFIG,
            "warm start: %s has no global_step (an I64 scalar >= 0) to carry over (warm_start.global_step)", what);
    *step = (int64_t)psc_le_get64(t->data);
    return 0;
}

int warm_start_apply(void *arg, const int *ready, char *err, size_t errlen)
{
    warm_start_t *ws = arg;
    const psc_warm_start_t *w = &ws->spec->warm_start;
    int none_ready = 1;
    for (int p = 0; p < ps_client_num_ps(ws->pc); p++) none_ready &= !ready[p];
    ws->src_ckpt = 0;
    if (w->slots && none_ready) return 0; /* it all comes staged, slots with values (warm_start_stage) */
    psc_st_file_t f;
    char what[640], absent[512] = "", tabsent[512] = "";
    double t0 = psc_now();
    int rc = open_source(ws, &f, what, sizeof what, err, errlen);
    if (rc) return rc;
    int used = 0, tables = 0;
    uint64_t rows = 0;
    if (w->carry_step && !w->from_job) rc = file_step(&f, what, &ws->file_step, err, errlen);
    if (!rc) rc = dense(ws, &f, what, &used, absent, sizeof absent, err, errlen);
    for (int k = 0; k < ws->spec->num_tables && !rc; k++) {
        const psc_st_tensor_t *ids = NULL, *vals = NULL;
        if (!selected(w, ws->spec->tables[k].name)) continue;
        rc = table_source(ws, &f, k, what, &ids, &vals, err, errlen);
        if (!rc && !vals) psc_note_name(tabsent, sizeof tabsent, ws->spec->tables[k].name);
        if (!rc && vals && (rc = table_rows(ws, k, ids, vals, ready, what, &rows, err, errlen)) == 0) tables++;
    }
    psc_st_free(&f);
    if (rc) return rc;
    PSC_INFO("warm start from %s: %d variables and %d tables (%llu rows) in %.2f s", what, used, tables,
             (unsigned long long)rows, psc_now() - t0);
    if (absent[0]) PSC_INFO("warm start: %s has no %s: they start from their initializers", what, absent);
    if (tabsent[0]) PSC_INFO("warm start: %s has no rows of table %s: it starts from its initializer", what, tabsent);
    return 0;
}

/* warm_start.variables: does the whole name match? */
static int take_var(void *arg, const char *name)
{
    const warm_start_t *ws = arg;
    return regexec(&ws->re, name, 0, NULL, 0) == 0;
}

static int take_table(void *arg, const char *name)
{
    return selected(&((const warm_start_t *)arg)->spec->warm_start, name);
}

int warm_start_stage(void *arg, uint64_t *ckpt, int64_t *step, char *err, size_t errlen)
{
    warm_start_t *ws = arg;
    const psc_warm_start_t *w = &ws->spec->warm_start;
    *ckpt = 0;
    if (!w->slots && !w->carry_step) return 0;
    char pat[300];
    snprintf(pat, sizeof pat, "^(%s)$", w->variables);
    if (regcomp(&ws->re, pat, REG_EXTENDED | REG_NOSUB))
        return psc_seterr(err, errlen, PSC_ECONFIG, "warm_start.variables: \"%s\" does not compile", w->variables);
    ps_warm_stage_t s = {.from_job = w->from_job ? w->from : NULL,
                         .checkpoint = ws->src_ckpt ? ws->src_ckpt : w->checkpoint,
                         .slots = w->slots,
                         .carry_step = w->carry_step,
                         .step = ws->file_step,
                         .opt = &ws->spec->optimizer,
                         .take_var = take_var,
                         .take_table = take_table,
                         .arg = ws};
    double t0 = psc_now();
    int rc = ps_client_warm_stage(ws->pc, ws->spec->job_id, &s, ckpt, step, err, errlen);
    regfree(&ws->re);
    if (rc) return rc;
    char what[640];
    if (w->from_job)
        snprintf(what, sizeof what, "checkpoint %llu of job %s", (unsigned long long)s.checkpoint, w->from);
    else
        snprintf(what, sizeof what, "file %s", w->from);
    if (w->slots)
        PSC_INFO("warm start from %s: %d variables and %d tables (%llu rows) with their optimizer slots, global_step "
                 "%lld%s, as checkpoint %llu of this job in %.2f s",
                 what, s.vars, s.tables, (unsigned long long)s.rows, (long long)*step,
                 w->carry_step ? " (carried over)" : "", (unsigned long long)*ckpt, psc_now() - t0);
    else
        PSC_INFO("warm start: global_step %lld carried over from %s, as checkpoint %llu of this job", (long long)*step,
                 what, (unsigned long long)*ckpt);
    if (s.absent[0]) PSC_INFO("warm start: %s has no %s: they start from their initializers", what, s.absent);
    if (s.tabsent[0])
        PSC_INFO("warm start: %s has no rows of table %s: it starts from its initializer", what, s.tabsent);
    return 0;
}
