/* fuzz_ps_service — libFuzzer target: the ps_server's request handlers
 * (ps_server/service/service.c, service_batch.c, service_ckpt.c,
 * service_stage.c) with their validation, the store and a real checkpoint
 * store (RocksDB in a temporary directory) behind them, driven by a sequence
 * of requests as the network would deliver them. The RPC layer is replaced by the fake below (this file defines the
 * rpc.h functions the handlers use, so common/rpc.c is not linked): a call
 * records its status and frees its reply. Every input runs on a fresh store
 * and service; at the end the service drains (parked sync replies are failed)
 * and every call must have been completed exactly once.
 *
 * Input: repeated [method byte][length, 2 bytes little-endian][request bytes].
 * The method byte picks a registered method (modulo their number).
 *
 * PSC_FUZZ_VERBOSE=1 prints each call's status code.
 * PSC_FUZZ_WRITE_SEEDS=DIR: instead of fuzzing, writes the seed inputs (a
 * model created, assigned, made ready, then pushed (float32 and bfloat16),
 * pulled, stepped, batched; a sync model; a bad request between good ones; an
 * async model fenced for a checkpoint while pushes of every kind arrive, then
 * released, and fenced again with pushes left parked for the drain; sparse
 * tables: a Create with a table, Batches of sparse pushes and pulls, good and
 * bad; a shard staged as a checkpoint, committed and restored) to DIR and
 * exits. The reaper thread replays a released fence's parked pushes while the
 * next requests run, as on a server. */
#include "ckpt.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "service.h"
#include "store.h"
#include "wire.h"

#define _XOPEN_SOURCE 700 /* nftw */
#include <ftw.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the fake RPC layer ---- */
#define MAX_METHODS 32

struct psc_rpc_server {
    const char *path[MAX_METHODS];
    psc_rpc_handler_fn fn[MAX_METHODS];
    psc_rpc_handler_iov_fn fn_iov[MAX_METHODS]; /* _iov methods: the request in segments */
    void *arg[MAX_METHODS];
    int n;
};

struct psc_rpc_call {
    int completed;
    int code;
    uint8_t *reply;
    size_t reply_len;
};

void psc_rpc_server_add_method(psc_rpc_server_t *s, const char *path, psc_rpc_handler_fn fn, void *arg)
{
    if (s->n == MAX_METHODS) abort();
    s->path[s->n] = path;
    s->fn[s->n] = fn;
    s->arg[s->n++] = arg;
}
void psc_rpc_server_add_method_iov(psc_rpc_server_t *s, const char *path, psc_rpc_handler_iov_fn fn, void *arg)
{
    if (s->n == MAX_METHODS) abort();
    s->path[s->n] = path;
    s->fn_iov[s->n] = fn;
    s->arg[s->n++] = arg;
}
void psc_rpc_server_add_service(psc_rpc_server_t *s, const char *service) { (void)s, (void)service; }
int psc_rpc_server_observe(psc_rpc_server_t *s, const char *path, psc_rpc_observer_fn fn, void *arg)
{
    (void)s, (void)path, (void)fn, (void)arg;
    return 0;
}

static void complete(psc_rpc_call_t *c, int code)
{
    if (c->completed) abort(); /* a handler answered twice */
    c->completed = 1;
    c->code = code;
}
void *psc_rpc_reply_alloc(psc_rpc_call_t *c, size_t len)
{
    if (c->reply) abort();
    c->reply = malloc(len ? len : 1);
    c->reply_len = len;
    return c->reply;
}
void psc_rpc_reply_send(psc_rpc_call_t *c) { complete(c, 0); }
void psc_rpc_reply_send_range(psc_rpc_call_t *c, size_t offset, size_t len)
{
    if (offset + len > c->reply_len) abort(); /* outside the buffer the handler asked for */
    complete(c, 0);
}
void psc_rpc_reply_send_shared(psc_rpc_call_t *c, psc_rpc_call_t *from, size_t offset, size_t len)
{
    /* a reply shares another call's allocated buffer, before that one is sent */
    if (c->reply || !from->reply || from->completed || offset + len > from->reply_len) abort();
    complete(c, 0);
}
void psc_rpc_reply_drop(psc_rpc_call_t *c)
{
    if (c->completed) abort(); /* only a call still to be answered parks */
    free(c->reply);
    c->reply = NULL;
    c->reply_len = 0;
}
void psc_rpc_reply(psc_rpc_call_t *c, const void *msg, size_t len)
{
    memcpy(psc_rpc_reply_alloc(c, len), msg, len);
    complete(c, 0);
}
void psc_rpc_fail(psc_rpc_call_t *c, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (code == 0) abort(); /* a failure must carry a status */
    complete(c, code);
}
const char *psc_rpc_call_peer(psc_rpc_call_t *c)
{
    (void)c;
    return "ipv4:127.0.0.1:1";
}

/* ---- the harness ---- */
#define MAX_CALLS 256

static void noop(void *arg) { (void)arg; }

/* Calls an _iov method as gRPC would: the request split into segments of 1 to
 * 29 bytes (a float straddles most boundaries), each its own allocation of
 * exactly its size, so a read past a segment is caught. */
static void call_in_segments(struct psc_rpc_server *server, int m, psc_rpc_call_t *c, const uint8_t *req, size_t len)
{
    psc_iov_t iov[4096];
    int n = 0;
    size_t at = 0;
    while (at < len && n < 4095) {
        size_t k = 1 + (size_t)(n * 7 + len) % 29;
        if (k > len - at || n == 4094) k = len - at;
        uint8_t *seg = malloc(k);
        memcpy(seg, req + at, k);
        iov[n].base = seg;
        iov[n++].len = k;
        at += k;
    }
    const void *owned[4096];
    for (int i = 0; i < n; i++) owned[i] = iov[i].base; /* the handler may trim the entries */
    server->fn_iov[m](c, iov, n, len, server->arg[m]);
    for (int i = 0; i < n; i++) free((void *)owned[i]);
}

/* The checkpoint store every input's service writes to (Save, Commit,
 * Restore, Stage go to disk for real): one RocksDB in a temporary directory,
 * opened once before the first input (RocksDB's threads register thread-local
 * destructors, which LeakSanitizer would count against the input that opened
 * it) and removed at exit. Inputs rarely get as far as writing a checkpoint:
 * a 30 s run leaves a few MiB. */
static ckpt_db_t *db;
static char db_dir[64];
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}
static void db_drop(void)
{
    ckpt_close(db);
    db = NULL;
    if (db_dir[0]) nftw(db_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
static ckpt_db_t *checkpoints(void)
{
    if (db) return db;
    snprintf(db_dir, sizeof db_dir, "/tmp/fuzz_ps_service.XXXXXX");
    char err[256];
    if (!mkdtemp(db_dir) || ckpt_open(db_dir, &db, err, sizeof err)) abort();
    atexit(db_drop);
    return db;
}

static void run(const uint8_t *data, size_t size)
{
    store_t *store = store_create();
    ps_service_t *svc = ps_service_create(store, 0, noop, NULL, NULL, 0);
    ps_service_set_checkpoints(svc, checkpoints(), 0);
    ps_service_set_num_ps(svc, 1);
    struct psc_rpc_server server = {.n = 0};
    ps_service_register(svc, &server);
    psc_rpc_call_t *calls[MAX_CALLS];
    int ncalls = 0;
    size_t p = 0;
    while (p + 3 <= size && ncalls < MAX_CALLS) {
        int m = data[p] % server.n;
        size_t len = (size_t)(data[p + 1] | data[p + 2] << 8);
        p += 3;
        if (len > size - p) len = size - p;
        uint8_t *req = malloc(len ? len : 1); /* exactly len bytes: reads past it are caught */
        memcpy(req, data + p, len);
        p += len;
        psc_rpc_call_t *c = calloc(1, sizeof *c);
        calls[ncalls++] = c;
        if (server.fn_iov[m])
            call_in_segments(&server, m, c, req, len);
        else
            server.fn[m](c, req, len, server.arg[m]);
        free(req);
    }
    ps_service_drain(svc);
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("PSC_FUZZ_VERBOSE") != NULL;
    for (int i = 0; i < ncalls && verbose; i++) fprintf(stderr, "call %d: status %d\n", i, calls[i]->code);
    for (int i = 0; i < ncalls; i++) {
        if (!calls[i]->completed) abort(); /* a call left unanswered */
        free(calls[i]->reply);
        free(calls[i]);
    }
    ps_service_destroy(svc);
    store_destroy(store);
}

/* ---- seeds ---- */
static uint8_t seed[1 << 16];
static size_t seed_len;
static struct psc_rpc_server seed_server;

static void seed_add(const char *path, const void *msg_pack_fn_out, size_t n)
{
    int m = -1;
    for (int i = 0; i < seed_server.n; i++)
        if (!strcmp(seed_server.path[i], path)) m = i;
    if (m < 0 || seed_len + 3 + n > sizeof seed) abort();
    seed[seed_len] = (uint8_t)m;
    seed[seed_len + 1] = (uint8_t)n;
    seed[seed_len + 2] = (uint8_t)(n >> 8);
    memcpy(seed + seed_len + 3, msg_pack_fn_out, n);
    seed_len += 3 + n;
}

#define SEED(path, type, msg)                      \
    do {                                           \
        uint8_t b_[8192];                          \
        size_t n_ = type##__get_packed_size(msg);  \
        if (n_ > sizeof b_) abort();               \
        seed_add(path, b_, type##__pack(msg, b_)); \
    } while (0)

static void seed_chunk(const char *path, const char *name, uint64_t offset, uint64_t total, const void *d, size_t n,
                       int64_t local_step)
{
    Psc__Chunk c = PSC__CHUNK__INIT;
    c.name = (char *)name;
    c.offset = offset;
    c.total = total;
    c.local_step = local_step;
    c.data.data = (uint8_t *)d;
    c.data.len = n;
    SEED(path, psc__chunk, &c);
}

/* A push of the same gradient as bfloat16 (Chunk.encoding 1: half the bytes). */
static void seed_chunk_bf16(const char *path, const char *name, const float *g, size_t n, int64_t local_step)
{
    uint16_t h[64];
    if (n > 64) abort();
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &g[i], 4);
        h[i] = (uint16_t)(u >> 16);
    }
    Psc__Chunk c = PSC__CHUNK__INIT;
    c.name = (char *)name;
    c.total = n * 4;
    c.local_step = local_step;
    c.encoding = PSC_ENC_BFLOAT16;
    c.data.data = (uint8_t *)h;
    c.data.len = n * 2;
    SEED(path, psc__chunk, &c);
}

/* The Create of job `job`: "dense/kernel" [4, 16] and global_step, Adam (sync: R = N = 1). */
static void seed_create(const char *job, int sync)
{
    Psc__OptimizerSpec o = PSC__OPTIMIZER_SPEC__INIT;
    o.name = (char *)"adam";
    o.learning_rate = 0.01f;
    o.beta1 = 0.9f;
    o.beta2 = 0.999f;
    o.epsilon = 1e-7f;
    Psc__VarSpec v = PSC__VAR_SPEC__INIT, gs = PSC__VAR_SPEC__INIT;
    int64_t shape[2] = {4, 16};
    v.name = (char *)"dense/kernel";
    v.n_shape = 2;
    v.shape = shape;
    gs.name = (char *)"global_step";
    gs.is_step = 1;
    Psc__VarSpec *vars[2] = {&v, &gs};
    Psc__SyncSpec s = PSC__SYNC_SPEC__INIT;
    s.replicas_to_aggregate = 1;
    s.total_num_replicas = 1;
    s.timeout_secs = 5;
    Psc__CreateRequest cr = PSC__CREATE_REQUEST__INIT;
    cr.job_id = (char *)job;
    cr.optimizer = &o;
    cr.n_vars = 2;
    cr.vars = vars;
    if (sync) cr.sync = &s;
    SEED(PSC_M_CREATE, psc__create_request, &cr);
}

static void seed_model(int sync)
{
    seed_create("00000000000000f1", sync);
    float w[64], g[64];
    for (int i = 0; i < 64; i++) w[i] = 0.01f * (float)i, g[i] = 0.5f - 0.01f * (float)i;
    int64_t zero = 0;
    seed_chunk(PSC_M_ASSIGN, "dense/kernel", 0, sizeof w, w, sizeof w, 0);
    seed_chunk(PSC_M_ASSIGN, "global_step", 0, 8, &zero, 8, 0);
    Psc__ReadyRequest rr = PSC__READY_REQUEST__INIT;
    rr.job_id = (char *)"00000000000000f1";
    SEED(PSC_M_READY, psc__ready_request, &rr);
    seed_chunk(PSC_M_PUSH, "dense/kernel", 0, sizeof g, g, sizeof g, 0);
    seed_chunk(PSC_M_PUSH_PULL, "dense/kernel", 0, sizeof g, g, sizeof g, 1);
    seed_chunk_bf16(PSC_M_PUSH_PULL, "dense/kernel", g, 64, 2);
    Psc__PullRequest pr = PSC__PULL_REQUEST__INIT;
    pr.name = (char *)"dense/kernel";
    pr.length = 128;
    pr.offset = 64;
    SEED(PSC_M_PULL, psc__pull_request, &pr);
    Psc__StepRequest st = PSC__STEP_REQUEST__INIT;
    st.increment = sync ? 0 : 1;
    st.local_step = 1;
    SEED(PSC_M_STEP, psc__step_request, &st);
    /* a Batch: a push (async only), a pull and the step, as a worker sends them */
    Psc__Chunk bc = PSC__CHUNK__INIT;
    bc.name = (char *)"dense/kernel";
    bc.total = sizeof g;
    bc.data.data = (uint8_t *)g;
    bc.data.len = sizeof g;
    Psc__Chunk bc16 = bc, *bcs[2] = {&bc, &bc16};
    uint16_t h16[64];
    for (int i = 0; i < 64; i++) h16[i] = 0x3f80; /* 1.0 */
    bc16.encoding = PSC_ENC_BFLOAT16;
    bc16.data.data = (uint8_t *)h16;
    bc16.data.len = sizeof h16;
    Psc__PullRequest bp = PSC__PULL_REQUEST__INIT, *bps[1] = {&bp};
    bp.name = (char *)"dense/kernel";
    bp.length = sizeof g;
    Psc__StepRequest bst = PSC__STEP_REQUEST__INIT;
    bst.increment = sync ? 0 : 1;
    Psc__BatchRequest br = PSC__BATCH_REQUEST__INIT;
    br.n_push = sync ? 0 : 2;
    br.push = bcs;
    br.n_pull = 1;
    br.pull = bps;
    br.step = &bst;
    SEED(PSC_M_BATCH, psc__batch_request, &br);
    Psc__StatusRequest sr = PSC__STATUS_REQUEST__INIT;
    SEED(PSC_M_STATUS, psc__status_request, &sr);
    Psc__WorkerDoneRequest wd = PSC__WORKER_DONE_REQUEST__INIT;
    SEED(PSC_M_WORKER_DONE, psc__worker_done_request, &wd);
}

/* Sparse tables: a Create with a table (its own FTRL optimizer with a
 * schedule) beside the dense model, then Batches of sparse pushes and pulls,
 * good and bad (an id of the other part, a duplicate, a NaN, a short row, a
 * dense name), and the Status that lists the table. */
static void seed_sparse(void)
{
    Psc__OptimizerSpec o = PSC__OPTIMIZER_SPEC__INIT, fo = PSC__OPTIMIZER_SPEC__INIT;
    o.name = (char *)"gradient_descent";
    o.learning_rate = 0.1f;
    fo.name = (char *)"ftrl";
    fo.learning_rate = 0.05f;
    fo.learning_rate_power = -0.5f;
    fo.initial_accumulator_value = 0.1f;
    fo.l1 = 0.01f;
    Psc__LrSchedule ls = PSC__LR_SCHEDULE__INIT;
    int64_t bounds[1] = {3};
    float vals[2] = {0.05f, 0.01f};
    ls.kind = 2;
    ls.n_boundaries = 1;
    ls.boundaries = bounds;
    ls.n_values = 2;
    ls.values = vals;
    fo.schedule = &ls;
    Psc__VarSpec v = PSC__VAR_SPEC__INIT, gs = PSC__VAR_SPEC__INIT;
    int64_t shape[1] = {8};
    v.name = (char *)"dense/bias";
    v.n_shape = 1;
    v.shape = shape;
    gs.name = (char *)"global_step";
    gs.is_step = 1;
    Psc__VarSpec *vars[2] = {&v, &gs};
    Psc__TableSpec t = PSC__TABLE_SPEC__INIT, *ts[1] = {&t};
    t.name = (char *)"emb";
    t.rows = (int64_t)1 << 40;
    t.dim = 4;
    t.num_parts = 2;
    t.part = 0;
    t.init_a = -0.05f;
    t.init_b = 0.05f;
    t.seed = 42;
    t.optimizer = &fo;
    Psc__CreateRequest cr = PSC__CREATE_REQUEST__INIT;
    cr.job_id = (char *)"00000000000000f1";
    cr.optimizer = &o;
    cr.n_vars = 2;
    cr.vars = vars;
    cr.n_tables = 1;
    cr.tables = ts;
    SEED(PSC_M_CREATE, psc__create_request, &cr);
    float w[8] = {0};
    int64_t zero = 0;
    seed_chunk(PSC_M_ASSIGN, "dense/bias", 0, sizeof w, w, sizeof w, 0);
    seed_chunk(PSC_M_ASSIGN, "global_step", 0, 8, &zero, 8, 0);
    Psc__ReadyRequest rr = PSC__READY_REQUEST__INIT;
    rr.job_id = cr.job_id;
    SEED(PSC_M_READY, psc__ready_request, &rr);
    int64_t ids[4] = {0, 2, 1000000, (int64_t)1 << 39}, bad[3][2] = {{2, 3}, {4, 4}, {-2, 6}};
    float g[16];
    for (int i = 0; i < 16; i++) g[i] = 0.1f * (float)(i - 8);
    Psc__SparsePush sp = PSC__SPARSE_PUSH__INIT, *sps[1] = {&sp};
    Psc__SparsePull sl = PSC__SPARSE_PULL__INIT, *sls[1] = {&sl};
    sp.table = sl.table = (char *)"emb";
    sp.ids.data = sl.ids.data = (uint8_t *)ids;
    sp.ids.len = sl.ids.len = sizeof ids;
    sp.values.data = (uint8_t *)g;
    sp.values.len = sizeof g;
    Psc__BatchRequest br = PSC__BATCH_REQUEST__INIT;
    br.n_sparse_push = 1;
    br.sparse_push = sps;
    br.n_sparse_pull = 1;
    br.sparse_pull = sls;
    br.global_step = 4;
    SEED(PSC_M_BATCH, psc__batch_request, &br);
    for (int k = 0; k < 3; k++) { /* another part's id, a duplicate, a negative id */
        sp.ids.data = (uint8_t *)bad[k];
        sp.ids.len = sizeof bad[k];
        sp.values.len = 8 * 4;
        SEED(PSC_M_BATCH, psc__batch_request, &br);
    }
    sp.ids.data = (uint8_t *)ids;
    sp.ids.len = sizeof ids;
    sp.values.len = sizeof g - 4; /* a short row */
    SEED(PSC_M_BATCH, psc__batch_request, &br);
    memset(&g[5], 0xff, 4); /* NaN */
    sp.values.len = sizeof g;
    SEED(PSC_M_BATCH, psc__batch_request, &br);
    br.n_sparse_push = 0;
    sl.read_only = 1; /* an evaluation's pull: rows read, none created */
    SEED(PSC_M_BATCH, psc__batch_request, &br);
    sl.read_only = 0;
    sl.table = (char *)"dense/bias"; /* a sparse pull of a dense variable */
    SEED(PSC_M_BATCH, psc__batch_request, &br);
    Psc__StatusRequest sr = PSC__STATUS_REQUEST__INIT;
    SEED(PSC_M_STATUS, psc__status_request, &sr);
}

static void seed_release(void)
{
    Psc__ReleaseRequest rel = PSC__RELEASE_REQUEST__INIT;
    rel.job_id = (char *)"00000000000000f1";
    SEED(PSC_M_RELEASE, psc__release_request, &rel);
}

/* The checkpoint fence (async): pushes of every kind park behind a Fence, a
 * Save under it (written to the fuzzer's checkpoint store), an Unfence releases them;
 * a second Fence is left held, its pushes parked until the drain. */
static void seed_fence(void)
{
    Psc__FenceRequest fr = PSC__FENCE_REQUEST__INIT;
    fr.job_id = (char *)"00000000000000f1";
    fr.id = 1;
    fr.lease_ms = 5000;
    SEED(PSC_M_FENCE, psc__fence_request, &fr);
    float g[64];
    for (int i = 0; i < 64; i++) g[i] = 0.25f - 0.01f * (float)i;
    seed_chunk(PSC_M_PUSH, "dense/kernel", 0, sizeof g, g, sizeof g, 0);
    seed_chunk(PSC_M_PUSH_PULL, "dense/kernel", 0, sizeof g, g, sizeof g, 0);
    seed_chunk(PSC_M_ASSIGN, "dense/kernel", 0, sizeof g, g, sizeof g, 0);
    Psc__StepRequest st = PSC__STEP_REQUEST__INIT;
    st.increment = 1;
    SEED(PSC_M_STEP, psc__step_request, &st);
    Psc__PullRequest pr = PSC__PULL_REQUEST__INIT;
    pr.name = (char *)"dense/kernel";
    pr.length = 64;
    SEED(PSC_M_PULL, psc__pull_request, &pr);
    Psc__SaveRequest sv = PSC__SAVE_REQUEST__INIT;
    sv.job_id = fr.job_id;
    sv.id = 1;
    sv.fence = 1;
    SEED(PSC_M_SAVE, psc__save_request, &sv);
    Psc__UnfenceRequest ur = PSC__UNFENCE_REQUEST__INIT;
    ur.id = 1;
    SEED(PSC_M_UNFENCE, psc__unfence_request, &ur);
    seed_chunk(PSC_M_PUSH, "dense/kernel", 0, sizeof g, g, sizeof g, 0);
    fr.id = 2;
    fr.lease_ms = 1;
    SEED(PSC_M_FENCE, psc__fence_request, &fr);
    seed_chunk(PSC_M_PUSH, "dense/kernel", 0, sizeof g, g, sizeof g, 0);
    SEED(PSC_M_STEP, psc__step_request, &st);
}

/* A model created but not ready, its shard staged as checkpoint 7 (a restore
 * onto another number of PS: the value in two pieces, the Adam slots, the
 * update counts, global_step), prepared, committed and restored; then a
 * refused piece (a size the shard does not have); then, released and created
 * again, a warm start's: global_step staged, the rest filled, base_step. */
static void seed_stage(void)
{
    const char *job = "00000000000000f3";
    seed_create(job, 0);
    float w[64];
    for (int i = 0; i < 64; i++) w[i] = 0.01f * (float)i;
    int64_t t = 5, step = 40;
    struct {
        const char *name;
        const void *data;
        size_t len, total, off;
    } pieces[] = {
        {"dense/kernel", w, 128, 256, 0},      {"dense/kernel", w + 32, 128, 256, 128},
        {"dense/kernel/Adam", w, 256, 256, 0}, {"dense/kernel/Adam_1", w, 256, 256, 0},
        {"dense/kernel/.t", &t, 8, 8, 0},      {"global_step", &step, 8, 8, 0},
    };
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        Psc__StageRequest q = PSC__STAGE_REQUEST__INIT;
        q.job_id = (char *)job;
        q.id = 7;
        q.step = step;
        q.tensor = (char *)pieces[i].name;
        q.offset = pieces[i].off;
        q.total = pieces[i].total;
        q.data.data = (uint8_t *)pieces[i].data;
        q.data.len = pieces[i].len;
        SEED(PSC_M_STAGE, psc__stage_request, &q);
    }
    Psc__StageRequest pq = PSC__STAGE_REQUEST__INIT;
    pq.job_id = (char *)job;
    pq.id = 7;
    pq.step = step;
    pq.prepare = 1;
    SEED(PSC_M_STAGE, psc__stage_request, &pq);
    Psc__CommitRequest cm = PSC__COMMIT_REQUEST__INIT;
    cm.id = 7;
    cm.keep = 2;
    SEED(PSC_M_COMMIT, psc__commit_request, &cm);
    Psc__RestoreRequest rr = PSC__RESTORE_REQUEST__INIT;
    rr.job_id = (char *)job;
    rr.id = 7;
    rr.step = step;
    SEED(PSC_M_RESTORE, psc__restore_request, &rr);
    Psc__StageRequest bad = PSC__STAGE_REQUEST__INIT;
    bad.job_id = (char *)job;
    bad.id = 8;
    bad.tensor = (char *)"dense/kernel";
    bad.total = 300;
    bad.data.data = (uint8_t *)w;
    bad.data.len = 16;
    SEED(PSC_M_STAGE, psc__stage_request, &bad);
    /* a warm start's stage: released, created again, only global_step staged,
     * the rest filled from the model as created, base_step kept */
    Psc__ReleaseRequest rel = PSC__RELEASE_REQUEST__INIT;
    rel.job_id = (char *)job;
    SEED(PSC_M_RELEASE, psc__release_request, &rel);
    seed_create(job, 0);
    Psc__StageRequest ws = PSC__STAGE_REQUEST__INIT;
    ws.job_id = (char *)job;
    ws.id = 9;
    ws.step = step;
    ws.tensor = (char *)"global_step";
    ws.total = 8;
    ws.data.data = (uint8_t *)&step;
    ws.data.len = 8;
    SEED(PSC_M_STAGE, psc__stage_request, &ws);
    pq.id = 9;
    pq.fill = 1;
    pq.base_step = step;
    SEED(PSC_M_STAGE, psc__stage_request, &pq);
    cm.id = 9;
    SEED(PSC_M_COMMIT, psc__commit_request, &cm);
    rr.id = 9;
    SEED(PSC_M_RESTORE, psc__restore_request, &rr);
}

static void write_seed(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(seed, 1, seed_len, f) != seed_len) abort();
    fclose(f);
    seed_len = 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *dir = getenv("PSC_FUZZ_WRITE_SEEDS");
    if (!dir) {
        checkpoints();
        return 0;
    }
    store_t *store = store_create();
    ps_service_t *svc = ps_service_create(store, 0, noop, NULL, NULL, 0);
    ps_service_register(svc, &seed_server);
    seed_model(0);
    seed_release();
    write_seed(dir, "async_model");
    seed_model(1);
    seed_release();
    write_seed(dir, "sync_model");
    float nan[4] = {0, 0, 0, 0};
    memset(&nan[2], 0xff, 4);
    seed_model(0);
    seed_chunk(PSC_M_PUSH, "dense/kernel", 0, 256, nan, sizeof nan, 0);
    seed_chunk(PSC_M_PUSH, "dense/kernel", 250, 256, nan, sizeof nan, 0);
    seed_chunk(PSC_M_PUSH, "nope", 0, 16, nan, sizeof nan, 0);
    seed_release();
    write_seed(dir, "bad_pushes");
    seed_model(0);
    seed_fence();
    write_seed(dir, "async_fence");
    seed_sparse();
    seed_release();
    write_seed(dir, "sparse_tables");
    seed_stage();
    seed_release();
    write_seed(dir, "stage");
    ps_service_destroy(svc);
    store_destroy(store);
    exit(0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run(data, size);
    return 0;
}
