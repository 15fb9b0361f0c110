/* service_describe.c — the shard as a StatusReply's description part: what
 * Status answers about the variables and table parts, and what every
 * checkpoint keeps as its tensor SVC_CKPT_MODEL (service_ckpt.c; Describe).
 * Below the handlers: it reads only the store. */
#include "service_internal.h"

#include "ckpt.h"
#include "optim.h"
#include "psc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SVC_SLOTS_MAX 32 /* "rms,momentum" */

/* Status's tables; *mem is what to free() after packing. */
static void status_tables(ps_service_t *svc, Psc__StatusReply *rep, void **mem)
{
    store_table_info_t *info = NULL;
    int n = 0;
    store_list_tables(svc->store, &info, &n);
    size_t sz = (size_t)(n ? n : 1);
    char *block = psc_xcalloc(
        1, sz * (sizeof(Psc__TableStatus) + sizeof(Psc__TableStatus *) + sizeof info->cfg.name + SVC_SLOTS_MAX));
    Psc__TableStatus *ts = (Psc__TableStatus *)(void *)block;
    Psc__TableStatus **tp = (Psc__TableStatus **)(void *)(ts + sz);
    char(*names)[sizeof info->cfg.name] = (void *)(tp + sz);
    char(*slots)[SVC_SLOTS_MAX] = (void *)(names + sz);
    for (int i = 0; i < n; i++) {
        psc__table_status__init(&ts[i]);
        memcpy(names[i], info[i].cfg.name, sizeof names[i]);
        ts[i].name = names[i];
        ts[i].part = (uint32_t)info[i].cfg.part;
        ts[i].num_parts = (uint32_t)info[i].cfg.nparts;
        ts[i].rows = info[i].cfg.rows;
        ts[i].dim = (uint32_t)info[i].cfg.dim;
        ts[i].rows_touched = info[i].stats.rows;
        ts[i].bytes = info[i].stats.bytes;
        ts[i].rows_pulled = info[i].stats.rows_pulled;
        ts[i].rows_pushed = info[i].stats.rows_pushed;
        ts[i].version = (int64_t)info[i].stats.version;
        ts[i].partition = (uint32_t)info[i].cfg.partition;
        ts[i].init = (uint32_t)info[i].cfg.init.kind;
        ts[i].init_a = info[i].cfg.init.a;
        ts[i].init_b = info[i].cfg.init.b;
        ts[i].seed = info[i].cfg.seed;
        for (int k = 0; k < optim_slot_count(&info[i].cfg.opt); k++) {
            size_t l = strlen(slots[i]);
            snprintf(slots[i] + l, SVC_SLOTS_MAX - l, "%s%s", k ? "," : "", optim_slot_name(&info[i].cfg.opt, k));
        }
        ts[i].slots = slots[i];
        ts[i].rows_pulled_per_sec = info[i].rows_pulled_per_sec;
        ts[i].rows_pushed_per_sec = info[i].rows_pushed_per_sec;
        ts[i].rows_evicted = info[i].stats.rows_evicted;
        ts[i].rows_dropped = info[i].stats.rows_dropped;
        ts[i].waiting = info[i].stats.waiting;
        ts[i].filter_bytes = info[i].stats.filter_bytes;
        ts[i].rows_evicted_per_sec = info[i].rows_evicted_per_sec;
        ts[i].evict_pause_max_us = info[i].stats.pause_max_ns / 1000;
        ts[i].ttl_steps = info[i].cfg.ttl_steps;
        ts[i].ttl_secs = info[i].cfg.ttl_secs;
        ts[i].max_rows = info[i].cfg.max_rows;
        ts[i].min_count = info[i].cfg.min_count;
        tp[i] = &ts[i];
    }
    free(info);
    rep->n_tables = (size_t)n;
    rep->tables = tp;
    *mem = block;
}

void svc_describe(ps_service_t *svc, Psc__StatusReply *rep, svc_desc_mem_t *m)
{
    memset(m, 0, sizeof *m);
    rep->ready = store_is_ready(svc->store, m->job_id);
    rep->job_id = m->job_id;
    int64_t step = 0;
    rep->has_global_step = store_step_get(svc->store, &step);
    rep->global_step = step;
    rep->optimizer = (char *)"";
    rep->ps_index = (uint32_t)svc->task_index;
    rep->num_ps = (uint32_t)svc->num_ps;
    int n = 0;
    store_list(svc->store, &m->vars, &n);
    m->vs = psc_xcalloc((size_t)(n ? n : 1), sizeof *m->vs);
    m->vp = psc_xcalloc((size_t)(n ? n : 1), sizeof *m->vp);
    m->shapes = psc_xcalloc((size_t)(n ? n : 1), sizeof *m->shapes);
    for (int i = 0; i < n; i++) {
        Psc__VarStatus *v = &m->vs[i];
        psc__var_status__init(v);
        v->name = m->vars[i].name;
        for (int d = 0; d < m->vars[i].rank; d++) m->shapes[i][d] = m->vars[i].shape[d];
        v->n_shape = (size_t)m->vars[i].rank;
        v->shape = m->shapes[i];
        v->bytes = m->vars[i].bytes;
        v->version = m->vars[i].version;
        m->vp[i] = v;
    }
    rep->n_vars = (size_t)n;
    rep->vars = m->vp;
    status_tables(svc, rep, &m->tables);
}

void svc_describe_free(svc_desc_mem_t *m)
{
    free(m->tables);
    free(m->shapes);
    free(m->vp);
    free(m->vs);
    free(m->vars);
}

void svc_add_description(ps_service_t *svc, ckpt_writer_t *w, int64_t base_step, const int64_t *replica_steps,
                         size_t nsteps)
{
    Psc__StatusReply d = PSC__STATUS_REPLY__INIT;
    svc_desc_mem_t m;
    svc_describe(svc, &d, &m);
    d.base_step = base_step;
    d.n_replica_steps = nsteps; /* a restarted job's replicas resume after them (service_ckpt.c's restore) */
    d.replica_steps = (int64_t *)replica_steps;
    size_t n = psc__status_reply__get_packed_size(&d);
    uint8_t *buf = psc_xmalloc(n ? n : 1);
    psc__status_reply__pack(&d, buf);
    ckpt_add(w, SVC_CKPT_MODEL, buf, n); /* a failure is remembered by the writer */
    free(buf);
    svc_describe_free(&m);
}
