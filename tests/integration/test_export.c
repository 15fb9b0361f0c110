/* test_export — psc_export_safetensors against real ps_server processes.
 *
 * Two PS hold a model with global_step, a kernel partitioned along axis 0
 * over both PS (1001 rows: parts of 501 and 500, each two wire chunks), an
 * unpartitioned bias and 300 small variables (more calls than one round
 * takes), trained two SGD steps. The export is read back with a
 * parser written here (jansson for the JSON header, nothing from export.c):
 * names, dtypes, shapes, contiguous offsets, 8-byte aligned buffer, metadata,
 * and the bytes equal a ps_client_pull of the same model. Then the refusals,
 * each naming the PS and leaving the earlier file untouched and no .tmp: a PS
 * with no model, a PS of another job; and a dead address (nothing listening,
 * and a listener that never answers) fails within the deadline. Sparse
 * tables: a small one is written dense (untouched rows at their initial
 * values), a 2^40-row one as ids + values in id order.
 */
#include "export.h"
#include "it_util.h"
#include "placement.h"
#include "ps_client.h"
#include "psc.h"
#include "rng.h"
#include "table.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cmocka.h>

#define ROWS 1001
#define COLS 1099
#define NSMALL 300 /* small variables: the pulls take several rounds of calls */
#define NVARS (3 + NSMALL)
#define MAX_SEEN 512
#define JOB "00000000000e4b07"
#define OTHER_JOB "00000000000000ff"
#define TIMEOUT_MS 20000

static it_proc_t g_ps[3]; /* the daemons of the round trip, for the teardown */
static int failed_flag;

/* ---- an independent reader ---- */

typedef struct file_buf {
    uint8_t *p;
    size_t len;
} file_buf_t;

static int read_file(const char *path, file_buf_t *out)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    out->p = malloc((size_t)n + 1);
    out->len = fread(out->p, 1, (size_t)n, f);
    fclose(f);
    return out->len == (size_t)n ? 0 : -1;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

typedef struct seen_tensor {
    const char *name;
    const char *dtype;
    int rank;
    int64_t shape[4];
    uint64_t begin, end;
} seen_tensor_t;

static int by_begin(const void *a, const void *b)
{
    const seen_tensor_t *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

/* Parses and checks the file's structure against the safetensors rules; *root
 * keeps the header (the names point into it). Returns the data buffer. */
static const uint8_t *parse_safetensors(const file_buf_t *f, json_t **root, seen_tensor_t *t, int *nt, int max)
{
    assert_true(f->len >= 8);
    uint64_t n = le64(f->p);
    assert_true(n <= f->len - 8);
    assert_int_equal((8 + n) % 8, 0); /* the buffer is 8-aligned */
    const char *hdr = (const char *)f->p + 8;
    assert_int_equal(hdr[0], '{');
    json_error_t je;
    *root = json_loadb(hdr, (size_t)n, 0, &je);
    if (!*root) fail_msg("header does not parse: %s (line %d col %d)", je.text, je.line, je.column);
    assert_true(json_is_object(*root));
    const char *key;
    json_t *val;
    *nt = 0;
    json_object_foreach(*root, key, val)
    {
        if (strcmp(key, "__metadata__") == 0) {
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) assert_true(json_is_string(mv)); /* text to text */
            continue;
        }
        assert_true(*nt < max);
        seen_tensor_t *s = &t[(*nt)++];
        memset(s, 0, sizeof *s);
        s->name = key;
        assert_int_equal(json_object_size(val), 3);
        s->dtype = json_string_value(json_object_get(val, "dtype"));
        assert_non_null(s->dtype);
        json_t *shape = json_object_get(val, "shape"), *off = json_object_get(val, "data_offsets");
        assert_true(json_is_array(shape) && json_is_array(off) && json_array_size(off) == 2);
        s->rank = (int)json_array_size(shape);
        assert_true(s->rank <= 4);
        int64_t numel = 1;
        for (int d = 0; d < s->rank; d++) {
            assert_true(json_is_integer(json_array_get(shape, (size_t)d)));
            s->shape[d] = json_integer_value(json_array_get(shape, (size_t)d));
            numel *= s->shape[d];
        }
        s->begin = (uint64_t)json_integer_value(json_array_get(off, 0));
        s->end = (uint64_t)json_integer_value(json_array_get(off, 1));
        size_t esize = strcmp(s->dtype, "F32") == 0 ? 4 : strcmp(s->dtype, "I64") == 0 ? 8 : 0;
        assert_true(esize > 0);
        assert_true(s->end >= s->begin);
        assert_int_equal(s->end - s->begin, (uint64_t)numel * esize);
        assert_int_equal(s->begin % esize, 0); /* aligned to its element */
    }
    /* offsets: from 0, contiguous, no overlap, the last one ends the file */
    static seen_tensor_t sorted[MAX_SEEN];
    memcpy(sorted, t, (size_t)*nt * sizeof *t);
    qsort(sorted, (size_t)*nt, sizeof *sorted, by_begin);
    uint64_t at = 0;
    for (int i = 0; i < *nt; i++) {
        assert_int_equal(sorted[i].begin, at);
        at = sorted[i].end;
    }
    assert_int_equal(8 + n + at, f->len);
    return f->p + 8 + n;
}

static const seen_tensor_t *find(const seen_tensor_t *t, int nt, const char *name)
{
    for (int i = 0; i < nt; i++)
        if (strcmp(t[i].name, name) == 0) return &t[i];
    fail_msg("tensor %s not in the file", name);
    return NULL;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static psc_cluster_t cluster_of(char **addrs, int n)
{
    psc_cluster_t cl;
    memset(&cl, 0, sizeof cl);
    cl.n[PSC_JOB_PS] = n;
    cl.addr[PSC_JOB_PS] = addrs;
    return cl;
}

/* An export that must fail: the message names `needle` (and needle2), no
 * file is left at path.tmp, and path keeps `before` (or stays absent). */
static void expect_export_fails(char **addrs, int n, const char *path, const file_buf_t *before, const char *needle,
                                const char *needle2)
{
    psc_cluster_t cl = cluster_of(addrs, n);
    char err[1024] = "";
    psc_export_info_t info;
    int rc = psc_export_safetensors(&cl, path, 0, TIMEOUT_MS, &info, err, sizeof err);
    fprintf(stderr, "  refused as expected: %s\n", err);
    assert_true(rc < 0);
    if (!strstr(err, needle) || (needle2 && !strstr(err, needle2)))
        fail_msg("message \"%s\" does not name \"%s\" / \"%s\"", err, needle, needle2 ? needle2 : "");
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_false(file_exists(tmp));
    if (before) {
        file_buf_t now;
        assert_int_equal(read_file(path, &now), 0);
        assert_int_equal(now.len, before->len);
        assert_memory_equal(now.p, before->p, now.len);
        free(now.p);
    } else {
        assert_false(file_exists(path));
    }
}

static void test_export_round_trip(void **state)
{
    (void)state;
    it_proc_t *ps = g_ps;
    memset(g_ps, 0, sizeof g_ps);
    char *addrs[3];
    failed_flag = 1; /* cleared at the end: the teardown shows the logs otherwise */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(it_start_ps(&ps[i]), 0);
        addrs[i] = ps[i].addr;
    }

    /* the model: global_step, dense/kernel (partitioned over both PS), dense/bias,
     * and NSMALL small biases */
    psc_var_desc_t *vars = calloc(NVARS, sizeof *vars);
    snprintf(vars[0].name, sizeof vars[0].name, "global_step");
    vars[0].numel = 1;
    vars[0].is_step = 1;
    vars[0].layer = -1;
    snprintf(vars[1].name, sizeof vars[1].name, "dense/kernel");
    vars[1].rank = 2;
    vars[1].shape[0] = ROWS;
    vars[1].shape[1] = COLS;
    vars[1].numel = (int64_t)ROWS * COLS;
    snprintf(vars[2].name, sizeof vars[2].name, "dense/bias");
    vars[2].rank = 1;
    vars[2].shape[0] = COLS;
    vars[2].numel = COLS;
    size_t n = (size_t)(vars[1].numel + vars[2].numel);
    for (int v = 3; v < NVARS; v++) {
        snprintf(vars[v].name, sizeof vars[v].name, "layer_%03d/bias", v - 3);
        vars[v].rank = 1;
        vars[v].shape[0] = 7;
        vars[v].numel = 7;
        n += 7;
    }
    psc_placed_var_t *placed;
    int nplaced;
    char err[1024];
    assert_int_equal(psc_place(vars, NVARS, 2, PSC_PLACE_ROUND_ROBIN, (uint64_t)2 << 20, &placed, &nplaced, err,
                               sizeof err),
                     0);
    assert_int_equal(nplaced, NVARS + 1);
    int part_ps[2] = {-1, -1};
    for (int p = 0; p < nplaced; p++)
        if (placed[p].var_index == 1) part_ps[placed[p].part] = placed[p].ps;
    assert_true(part_ps[0] >= 0 && part_ps[1] >= 0 && part_ps[0] != part_ps[1]); /* parts on different PS */

    float *init = malloc(n * 4), *g = malloc(n * 4), *got = malloc(n * 4), *pulled = malloc(n * 4);
    psc_rng_t rng;
    psc_rng_seed(&rng, 11);
    for (size_t i = 0; i < n; i++) init[i] = (float)(psc_rng_uniform(&rng) * 2 - 1);
    psc_cluster_t cl = cluster_of(addrs, 2);
    ps_client_t *pc = ps_client_create(&cl, vars, NVARS, placed, nplaced, 0, TIMEOUT_MS);
    psc_optim_config_t sgd = {.kind = PSC_OPT_SGD, .learning_rate = 0.25f};
    ps_model_origin_t origin;
    if (ps_client_create_model(pc, JOB, &sgd, init, &origin, err, sizeof err)) fail_msg("create_model: %s", err);
    int64_t step = -1;
    for (int s = 0; s < 2; s++) {
        for (size_t i = 0; i < n; i++) g[i] = (float)(psc_rng_uniform(&rng) * 2 - 1);
        if (ps_client_push_pull(pc, g, got, 1, &step, err, sizeof err)) fail_msg("push_pull: %s", err);
    }
    assert_int_equal(step, 2);

    /* export, then what the PS hold now (nothing trains: the same values) */
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "/tmp/psc-it-export-%d", (int)getpid());
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    psc_export_info_t info;
    double t0 = psc_now();
    if (psc_export_safetensors(&cl, path, 0, TIMEOUT_MS, &info, err, sizeof err)) fail_msg("export: %s", err);
    fprintf(stderr, "  exported %d tensors (%d pieces), %llu bytes in %.3f s\n", info.tensors, info.pieces,
            (unsigned long long)info.bytes, psc_now() - t0);
    int64_t pulled_step = -1;
    if (ps_client_pull(pc, pulled, &pulled_step, err, sizeof err)) fail_msg("pull: %s", err);
    assert_int_equal(pulled_step, 2);

    assert_int_equal(info.tensors, NVARS);
    assert_int_equal(info.pieces, NVARS + 1);
    assert_true(info.has_global_step);
    assert_int_equal(info.global_step, 2);
    assert_string_equal(info.job_id, JOB);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_false(file_exists(tmp));

    file_buf_t f;
    assert_int_equal(read_file(path, &f), 0);
    assert_int_equal(f.len, info.bytes);
    json_t *root;
    seen_tensor_t *t = calloc(MAX_SEEN, sizeof *t);
    int nt;
    const uint8_t *data = parse_safetensors(&f, &root, t, &nt, MAX_SEEN);
    assert_int_equal(nt, NVARS);
    assert_int_equal(json_object_size(root), NVARS + 1); /* + __metadata__ */
    /* header order: global_step (I64) first, then by name */
    assert_string_equal(t[0].name, "global_step");
    for (int i = 2; i < nt; i++) assert_true(strcmp(t[i - 1].name, t[i].name) < 0);
    json_t *md = json_object_get(root, "__metadata__");
    assert_string_equal(json_string_value(json_object_get(md, "job_id")), JOB);
    assert_string_equal(json_string_value(json_object_get(md, "global_step")), "2");

    const seen_tensor_t *gs = find(t, nt, "global_step"), *k = find(t, nt, "dense/kernel"),
                        *b = find(t, nt, "dense/bias");
    assert_string_equal(gs->dtype, "I64");
    assert_int_equal(gs->rank, 0);
    assert_int_equal((int64_t)le64(data + gs->begin), pulled_step);
    assert_string_equal(k->dtype, "F32");
    assert_int_equal(k->rank, 2);
    assert_int_equal(k->shape[0], ROWS);
    assert_int_equal(k->shape[1], COLS);
    assert_string_equal(b->dtype, "F32");
    assert_int_equal(b->rank, 1);
    assert_int_equal(b->shape[0], COLS);
    /* the slab: kernel then bias (global_step takes no room) */
    assert_memory_equal(data + k->begin, pulled, (size_t)vars[1].numel * 4);
    assert_memory_equal(data + b->begin, pulled + vars[1].numel, (size_t)vars[2].numel * 4);
    size_t at = (size_t)(vars[1].numel + vars[2].numel);
    for (int v = 3; v < NVARS; v++) {
        const seen_tensor_t *s = find(t, nt, vars[v].name);
        assert_string_equal(s->dtype, "F32");
        assert_int_equal(s->rank, 1);
        assert_int_equal(s->shape[0], 7);
        assert_memory_equal(data + s->begin, pulled + at, 7 * 4);
        at += 7;
    }
    assert_int_equal(at, n);
    assert_memory_equal(pulled, got, n * 4); /* and they are the trained values */
    assert_true(memcmp(pulled, init, n * 4) != 0);
    json_decref(root);

    /* refusals over the same path: the file stays as it was */
    char dead[64];
    snprintf(dead, sizeof dead, "127.0.0.1:%d", it_free_port());
    char *with_empty[3] = {addrs[0], addrs[1], addrs[2]};
    expect_export_fails(with_empty, 3, path, &f, "ps 2", ps[2].addr); /* holds no model */
    expect_export_fails(with_empty, 3, path, &f, "holds no model", NULL);
    char *with_dead[3] = {addrs[0], dead, addrs[1]};
    expect_export_fails(with_dead, 3, path, &f, "ps 1", dead);

    /* ps 2 gets a model of another job */
    psc_var_desc_t small[1];
    memcpy(small, &vars[2], sizeof small);
    psc_placed_var_t *sp;
    int nsp;
    assert_int_equal(psc_place(small, 1, 1, PSC_PLACE_ROUND_ROBIN, 0, &sp, &nsp, err, sizeof err), 0);
    psc_cluster_t cl2 = cluster_of(&addrs[2], 1);
    ps_client_t *pc2 = ps_client_create(&cl2, small, 1, sp, nsp, 0, TIMEOUT_MS);
    if (ps_client_create_model(pc2, OTHER_JOB, &sgd, init, &origin, err, sizeof err))
        fail_msg("create_model (other job): %s", err);
    expect_export_fails(with_empty, 3, path, &f, "ps 2 (", OTHER_JOB);
    expect_export_fails(with_empty, 3, path, &f, ps[2].addr, JOB);
    /* and alone, that job exports fine to another file */
    char path2[512];
    snprintf(path2, sizeof path2, "%s/other.safetensors", dir);
    if (psc_export_safetensors(&cl2, path2, 0, TIMEOUT_MS, &info, err, sizeof err)) fail_msg("export other: %s", err);
    assert_int_equal(info.tensors, 1);
    assert_false(info.has_global_step);
    assert_string_equal(info.job_id, OTHER_JOB);
    unlink(path2);
    ps_client_destroy(pc2);
    free(sp);

    free(f.p);
    unlink(path);
    rmdir(dir);
    ps_client_destroy(pc);
    failed_flag = 0;
    for (int i = 0; i < 3; i++) {
        int st = it_stop(&ps[i]);
        if (st != 0) {
            it_dump_log(&ps[i]);
            fail_msg("ps %d exited with %d", i, st);
        }
    }
    free(placed);
    free(vars);
    free(t);
    free(init);
    free(g);
    free(got);
    free(pulled);
}

/* Nothing listening, and a listener that accepts TCP but never speaks HTTP/2:
 * both fail within the deadline, naming the address; no file. */
static void test_export_dead_address(void **state)
{
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "/tmp/psc-it-export-dead-%d.safetensors", (int)getpid());
    char closed[64], silent[64];
    snprintf(closed, sizeof closed, "127.0.0.1:%d", it_free_port());

    struct sockaddr_in a = {0};
    socklen_t alen = sizeof a;
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    assert_int_equal(listen(fd, 16), 0);
    snprintf(silent, sizeof silent, "127.0.0.1:%d", ntohs(a.sin_port));

    const int timeout_ms = 1500;
    const char *addrs[2] = {closed, silent};
    for (int i = 0; i < 2; i++) {
        char *one[1] = {(char *)addrs[i]};
        psc_cluster_t cl = cluster_of(one, 1);
        char err[1024] = "";
        double t0 = psc_now();
        int rc = psc_export_safetensors(&cl, path, 0, timeout_ms, NULL, err, sizeof err);
        double took = psc_now() - t0;
        fprintf(stderr, "  %s: %.3f s: %s\n", addrs[i], took, err);
        assert_true(rc < 0);
        assert_true(took < timeout_ms / 1000.0 + 1.0);
        if (!strstr(err, addrs[i]) || !strstr(err, "ps 0")) fail_msg("message \"%s\" does not name %s", err, addrs[i]);
        if (i == 1) assert_int_equal(rc, PSC_ETIMEOUT);
        assert_false(file_exists(path));
    }
    close(fd);
}

/* Sparse tables: a small one (1000 x 4: written dense, untouched rows at
 * their initial values) and a 2^40-row one (written as ids + values of the
 * rows that exist, ascending), across 2 PS, after a push. */
static void test_export_tables(void **state)
{
    (void)state;
    it_proc_t *ps = g_ps;
    memset(g_ps, 0, sizeof g_ps);
    failed_flag = 1;
    char *addrs[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(it_start_ps(&ps[i]), 0);
        addrs[i] = ps[i].addr;
    }
    psc_cluster_t cl = cluster_of(addrs, 2);
    psc_var_desc_t v = {.name = "global_step", .numel = 1, .is_step = 1, .layer = -1};
    psc_placed_var_t *placed = NULL;
    int nplaced = 0;
    char err[1024];
    assert_int_equal(psc_place(&v, 1, 2, PSC_PLACE_ROUND_ROBIN, 0, &placed, &nplaced, err, sizeof err), 0);
    ps_client_t *pc = ps_client_create(&cl, &v, 1, placed, nplaced, 0, TIMEOUT_MS);
    psc_optim_config_t sgd = {.kind = PSC_OPT_SGD, .learning_rate = 1.0f};
    psc_table_spec_t t[2] = {{.name = "small", .rows = 1000, .dim = 4, .partition = PSC_PART_DIV,
                              .init = {PSC_INIT_NORMAL, 0, 0.05f}, .optimizer = sgd},
                             {.name = "big", .rows = (int64_t)1 << 40, .dim = 4,
                              .init = {PSC_INIT_UNIFORM, -0.05f, 0.05f}, .optimizer = sgd}};
    int part_ps[4] = {0, 1, 1, 0};
    ps_client_set_tables(pc, t, 2, part_ps, 77);
    ps_model_origin_t origin;
    float none = 0;
    assert_int_equal(ps_client_create_model(pc, JOB, &sgd, &none, &origin, err, sizeof err), 0);
    int64_t ids[6] = {999, 5, (int64_t)1 << 39, 12, 500, ((int64_t)1 << 40) - 1};
    float g[24], rows[2][24];
    for (int i = 0; i < 24; i++) g[i] = 0.25f * (float)(i % 5);
    for (int k = 0; k < 2; k++) { /* "small" gets ids below 1000 only */
        size_t n = k ? 6 : 2;
        const int64_t *id = k ? ids : (const int64_t[]){999, 5};
        ps_sparse_op_t op = {.table = k, .push_ids = id, .push_grads = g, .npush = n, .pull_ids = id,
                             .pull_rows = rows[k], .npull = n};
        assert_int_equal(ps_client_sparse(pc, &op, 1, err, sizeof err), 0);
    }
    const char *path = "/tmp/psc-test-export-tables.safetensors";
    psc_export_info_t info;
    int rc = psc_export_safetensors(&cl, path, 0, TIMEOUT_MS, &info, err, sizeof err);
    if (rc) fail_msg("export: %s", err);
    assert_int_equal(info.tables, 2);
    assert_int_equal(info.tensors, 4); /* global_step, small, big/ids, big/values */
    file_buf_t f;
    assert_int_equal(read_file(path, &f), 0);
    json_t *root;
    static seen_tensor_t seen[MAX_SEEN];
    int nseen = 0;
    const uint8_t *buf = parse_safetensors(&f, &root, seen, &nseen, MAX_SEEN);
    const seen_tensor_t *sm = find(seen, nseen, "small"), *bi = find(seen, nseen, "big/ids"),
                        *bv = find(seen, nseen, "big/values");
    assert_string_equal(sm->dtype, "F32");
    assert_int_equal(sm->shape[0], 1000);
    assert_int_equal(sm->shape[1], 4);
    assert_string_equal(bi->dtype, "I64");
    assert_int_equal(bi->shape[0], 6);
    assert_int_equal(bv->shape[0], 6);
    assert_int_equal(bv->shape[1], 4);
    const int64_t sorted[6] = {5, 12, 500, 999, (int64_t)1 << 39, ((int64_t)1 << 40) - 1};
    const int at_of[6] = {1, 3, 4, 0, 2, 5}; /* sorted[i] is ids[at_of[i]] */
    for (int i = 0; i < 6; i++) {
        assert_int_equal((int64_t)le64(buf + bi->begin + 8 * (uint64_t)i), sorted[i]);
        assert_memory_equal(buf + bv->begin + 16 * (uint64_t)i, &rows[1][4 * at_of[i]], 16);
    }
    uint32_t h = psc_table_hash("small");
    for (int64_t r = 0; r < 1000; r++) { /* dense: the pushed rows, every other one its initial value */
        float want[4];
        if (r == 999 || r == 5)
            memcpy(want, &rows[0][r == 999 ? 0 : 4], sizeof want);
        else
            psc_table_row_init(&t[0].init, 77, h, r, want, 4);
        assert_memory_equal(buf + sm->begin + 16 * (uint64_t)r, want, 16);
    }
    json_decref(root);
    free(f.p);
    unlink(path);
    ps_client_destroy(pc);
    free(placed);
    failed_flag = 0;
}

/* After a failed assertion: the daemons' logs, then stop them. */
static int show_logs_on_failure(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        if (g_ps[i].pid <= 0) continue;
        if (failed_flag) it_dump_log(&g_ps[i]);
        it_stop(&g_ps[i]);
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_export_round_trip, show_logs_on_failure),
        cmocka_unit_test(test_export_dead_address),
        cmocka_unit_test_teardown(test_export_tables, show_logs_on_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
