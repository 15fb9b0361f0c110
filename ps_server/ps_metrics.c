/* ps_metrics.c — the ps_server's Prometheus metrics (see ps_metrics.h).
 *
 * The per-method series are registered up front, one slot per method in a
 * fixed table, and each slot is the argument of that method's RPC observer, so
 * counting a call is two counter increments and one histogram observation, no
 * lookup. Store figures are not mirrored: the collector reads them from the
 * store on every scrape. Its rate state (steps per second) is touched only by
 * the collector, which the registry runs under its mutex, one render at a time.
 */
#include "ps_metrics.h"

#include "psc.h"
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>

static const struct {
    const char *path, *name;
} ps_methods[] = {
    {PSC_M_CREATE, "Create"},       {PSC_M_ASSIGN, "Assign"},
    {PSC_M_READY, "Ready"},         {PSC_M_PULL, "Pull"},
    {PSC_M_PUSH, "Push"},           {PSC_M_PUSH_PULL, "PushPull"},
    {PSC_M_STEP, "Step"},           {PSC_M_BATCH, "Batch"},
    {PSC_M_WORKER_DONE, "WorkerDone"},
    {PSC_M_STATUS, "Status"},       {PSC_M_SHUTDOWN, "Shutdown"},
    {PSC_M_SAVE, "Save"},           {PSC_M_COMMIT, "Commit"},
    {PSC_M_RESTORE, "Restore"},     {PSC_M_LIST_CKPT, "ListCheckpoints"},
    {PSC_M_RELEASE, "Release"},     {PSC_M_FENCE, "Fence"},
    {PSC_M_UNFENCE, "Unfence"},     {PSC_M_TABLE_ROWS, "TableRows"},
    {PSC_M_DESCRIBE, "Describe"},   {PSC_M_ASSIGN_ROWS, "AssignRows"},
    {PSC_M_STAGE, "Stage"},
};
#define PS_NMETHODS PSC_ARRAY_LEN(ps_methods)

typedef struct ps_rpc_series {
    psc_counter_t *requests, *errors;
    psc_histogram_t *latency;
} ps_rpc_series_t;

struct ps_metrics {
    psc_metrics_t *m;
    store_t *store;
    ps_rpc_series_t rpc[PS_NMETHODS];
    psc_counter_t *push_bytes, *pull_bytes;
    /* steps per second: collector only */
    int have_ref;
    double ref_t;
    int64_t ref_step;
    double rate;
};

static void on_call(void *arg, int code, double secs)
{
    ps_rpc_series_t *s = arg;
    psc_counter_inc(s->requests);
    if (code != PSC_RPC_OK) psc_counter_inc(s->errors);
    psc_histogram_observe(s->latency, secs);
}

/* Per sparse table part: rows touched, bytes, rows pulled and pushed. */
static void collect_tables(psc_metrics_emit_t *e, store_t *store)
{
    store_table_info_t *t = NULL;
    int n = 0;
    store_list_tables(store, &t, &n);
    for (int i = 0; i < n; i++) {
        char part[16];
        snprintf(part, sizeof part, "%d", t[i].cfg.part);
        const char *labels[] = {"table", t[i].cfg.name, "part", part, NULL};
        psc_metrics_emit_gauge(e, "psc_ps_table_rows", "Rows of this sparse table part that exist (were touched).",
                               labels, (double)t[i].stats.rows);
        psc_metrics_emit_gauge(e, "psc_ps_table_bytes",
                               "Bytes this sparse table part holds (row records with their slots, index, slabs).",
                               labels, (double)t[i].stats.bytes);
        psc_metrics_emit_counter(e, "psc_ps_table_rows_pulled_total", "Rows served by sparse pulls.", labels,
                                 (double)t[i].stats.rows_pulled);
        psc_metrics_emit_counter(e, "psc_ps_table_rows_pushed_total", "Rows updated by sparse pushes.", labels,
                                 (double)t[i].stats.rows_pushed);
        psc_metrics_emit_gauge(e, "psc_ps_table_rows_pulled_per_second",
                               "Rows pulled per second between the previous scrape or Status at least 1 s older "
                               "and the latest one.",
                               labels, t[i].rows_pulled_per_sec);
        psc_metrics_emit_gauge(e, "psc_ps_table_rows_pushed_per_second",
                               "Rows pushed per second, measured as psc_ps_table_rows_pulled_per_second.", labels,
                               t[i].rows_pushed_per_sec);
        psc_metrics_emit_counter(e, "psc_ps_table_rows_evicted_total",
                                 "Rows removed by the table's eviction (TTL or row cap).", labels,
                                 (double)t[i].stats.rows_evicted);
        psc_metrics_emit_gauge(e, "psc_ps_table_rows_evicted_per_second",
                               "Rows evicted per second, measured as psc_ps_table_rows_pulled_per_second.", labels,
                               t[i].rows_evicted_per_sec);
        psc_metrics_emit_counter(e, "psc_ps_table_rows_dropped_total",
                                 "Gradient rows dropped because their id was not admitted yet (admission).", labels,
                                 (double)t[i].stats.rows_dropped);
        psc_metrics_emit_gauge(e, "psc_ps_table_admission_waiting",
                               "Ids counted by the admission filter and not admitted (an estimate).", labels,
                               (double)t[i].stats.waiting);
        psc_metrics_emit_gauge(e, "psc_ps_table_admission_filter_bytes",
                               "Bytes of the admission filter (count-min sketch), included in psc_ps_table_bytes.",
                               labels, (double)t[i].stats.filter_bytes);
        psc_metrics_emit_gauge(e, "psc_ps_table_evict_pause_max_seconds",
                               "The longest one shard of rows was held by one eviction pass.", labels,
                               (double)t[i].stats.pause_max_ns / 1e9);
    }
    free(t);
}

static void collect(psc_metrics_emit_t *e, void *arg)
{
    ps_metrics_t *pm = arg;
    store_stats_t st;
    store_get_stats(pm->store, &st);
    psc_metrics_emit_counter(e, "psc_ps_gradients_applied_total",
                             "Gradient chunks applied to variables (sync mode: chunk steps applied).", NULL,
                             (double)st.applied);
    psc_metrics_emit_counter(e, "psc_ps_gradients_stale_total",
                             "Sync-mode gradient contributions (chunks and steps) dropped as stale.", NULL,
                             (double)st.stale);
    psc_metrics_emit_counter(e, "psc_ps_requests_rejected_total", "Requests refused for bad input.", NULL,
                             (double)st.rejected);
    psc_metrics_emit_counter(e, "psc_ps_sync_timeout_applies_total",
                             "Sync-mode steps applied by the timeout or lag rule with fewer gradients than needed.",
                             NULL, (double)st.timeout_applies);

    store_var_info_t *vars = NULL;
    int n = 0;
    store_list(pm->store, &vars, &n);
    double bytes = 0;
    for (int i = 0; i < n; i++) bytes += (double)vars[i].bytes;
    free(vars);
    psc_metrics_emit_gauge(e, "psc_ps_variables", "Variables held by this shard (global_step included).", NULL,
                           (double)n);
    psc_metrics_emit_gauge(e, "psc_ps_variable_bytes",
                           "Bytes of the values of this shard's variables (optimizer slots not counted).", NULL,
                           bytes);
    psc_metrics_emit_gauge(e, "psc_ps_ready", "1 once the chief marked the model ready, else 0.", NULL,
                           store_is_ready(pm->store, NULL) ? 1 : 0);
    collect_tables(e, pm->store);

    int64_t step = 0;
    if (!store_step_get(pm->store, &step)) {
        pm->have_ref = 0; /* no job, or global_step lives on another PS */
        return;
    }
    double now = psc_now();
    if (!pm->have_ref || step < pm->ref_step) { /* first scrape, or a restore/new job set it back */
        pm->have_ref = 1;
        pm->ref_t = now;
        pm->ref_step = step;
        pm->rate = 0;
    } else if (now - pm->ref_t >= 1.0) { /* sooner: too short an interval to mean much, keep the last rate */
        pm->rate = (double)(step - pm->ref_step) / (now - pm->ref_t);
        pm->ref_t = now;
        pm->ref_step = step;
    }
    psc_metrics_emit_gauge(e, "psc_ps_global_step", "global_step (only on the PS that holds it).", NULL,
                           (double)step);
    psc_metrics_emit_gauge(e, "psc_ps_steps_per_second",
                           "global_step increase per second between the previous scrape at least 1 s older and "
                           "this one (only on the PS that holds global_step).",
                           NULL, pm->rate);
}

ps_metrics_t *ps_metrics_create(psc_metrics_t *m, store_t *store)
{
    PSC_ASSERT(m && store);
    ps_metrics_t *pm = psc_xcalloc(1, sizeof *pm);
    pm->m = m;
    pm->store = store;
    for (size_t i = 0; i < PS_NMETHODS; i++) {
        const char *const labels[] = {"method", ps_methods[i].name, NULL};
        pm->rpc[i].requests = psc_metrics_counter(m, "psc_ps_rpc_requests_total",
                                                  "psc.ParameterServer calls answered, by method.", labels);
        pm->rpc[i].errors = psc_metrics_counter(
            m, "psc_ps_rpc_errors_total", "psc.ParameterServer calls answered with a status other than OK.", labels);
        pm->rpc[i].latency = psc_metrics_histogram(
            m, "psc_ps_rpc_latency_seconds",
            "Time from a call's arrival to its reply (a parked sync reply includes its wait for the step).", labels,
            psc_metrics_latency_buckets, PSC_METRICS_LATENCY_NBUCKETS);
    }
    pm->push_bytes = psc_metrics_counter(m, "psc_ps_push_bytes_total",
                                         "Gradient payload bytes of Push and PushPull requests that decoded.", NULL);
    pm->pull_bytes = psc_metrics_counter(m, "psc_ps_pull_bytes_total",
                                         "Tensor payload bytes sent in Pull and PushPull replies.", NULL);
    psc_metrics_add_collector(m, collect, pm);
    return pm;
}

void ps_metrics_destroy(ps_metrics_t *pm)
{
    if (!pm) return;
    psc_metrics_remove_collector(pm->m, collect, pm);
    free(pm);
}

void ps_metrics_observe_server(ps_metrics_t *pm, psc_rpc_server_t *server)
{
    if (!pm) return;
    for (size_t i = 0; i < PS_NMETHODS; i++)
        psc_rpc_server_observe(server, ps_methods[i].path, on_call, &pm->rpc[i]); /* PSC_ENOTFOUND: not served */
}

void ps_metrics_add_push_bytes(ps_metrics_t *pm, size_t n)
{
    if (pm) psc_counter_add(pm->push_bytes, n);
}

void ps_metrics_add_pull_bytes(ps_metrics_t *pm, size_t n)
{
    if (pm) psc_counter_add(pm->pull_bytes, n);
}
