/* bench_wire — push / pull / push-pull throughput between this process (a
 * worker's ps_client) and one real ps_server on loopback, for 4 KiB, 1 MiB,
 * 16 MiB and 64 MiB tensors, against raw TCP (a plain socket sender/receiver,
 * 1 MiB writes). These VMs move a single number by 25-50 % from one second to
 * the next, so every point runs in ROUNDS interleaved rounds: raw TCP, then
 * push, pull and push-pull, each ratio taken against the raw TCP of its own
 * round; the table shows the median MB/s and the median ratio. Also: the p50
 * latency of a 4 KiB push against a raw TCP 16-byte round trip (median of the
 * per-round ratios); small pushes with 16 clients in flight, one 4 KiB tensor
 * a call and 64 of them a call (a Batch, as a worker sends a model's small
 * tensors), in tensors applied per second; and 2 workers <-> 2 ps_servers (a
 * variable partitioned over both) against two raw TCP streams at once, with
 * the CPU seconds per GB moved of each (every process of the run: there both
 * are bound by the cores) and, for comparison only, two raw streams over
 * tensor-sized buffers. A measurement, not a test: it never fails on speed.
 *
 * usage: bench_wire [seconds-per-point] [parts]   (PSC_BIN = the build directory)
 * parts: a comma list of single (1 <-> 1, every size), small (16 clients of
 * small tensors), many (2 <-> 2); all three by default.
 */
#include "../integration/it_util.h"
#include "placement.h"
#include "ps_client.h"
#include "psc.h"
#include "wire.h"

#include <netinet/tcp.h>
#include <pthread.h>

static double secs_per_point = 1.0;

/* ---- raw TCP ---- */
static int listen_any(int *port)
{
    struct sockaddr_in a = {0};
    socklen_t len = sizeof a;
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    PSC_ASSERT(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0);
    getsockname(fd, (struct sockaddr *)&a, &len);
    *port = ntohs(a.sin_port);
    return fd;
}

static int connect_to(int port)
{
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    PSC_ASSERT(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void *sink_thread(void *arg)
{
    int lfd = *(int *)arg;
    int fd = accept(lfd, NULL, NULL);
    char *buf = malloc(1 << 20);
    while (read(fd, buf, 1 << 20) > 0) {
    }
    free(buf);
    close(fd);
    return NULL;
}

static double raw_tcp_mbps(void)
{
    int port, lfd = listen_any(&port);
    pthread_t th;
    pthread_create(&th, NULL, sink_thread, &lfd);
    int fd = connect_to(port);
    size_t chunk = (size_t)1 << 20;
    char *buf = malloc(chunk);
    memset(buf, 1, chunk);
    double t0 = psc_now(), t;
    size_t total = 0;
    do {
        for (int i = 0; i < 64; i++) {
            size_t off = 0;
            while (off < chunk) {
                ssize_t w = write(fd, buf + off, chunk - off);
                PSC_ASSERT(w > 0);
                off += (size_t)w;
            }
            total += chunk;
        }
        t = psc_now() - t0;
    } while (t < secs_per_point);
    close(fd);
    pthread_join(th, NULL);
    close(lfd);
    free(buf);
    return (double)total / t / 1e6;
}

static void *raw_sender(void *arg)
{
    double *mbps = arg;
    *mbps = raw_tcp_mbps();
    return NULL;
}

/* Two raw TCP streams at once (the 2 workers <-> 2 PS reference): the sum. */
static double raw_tcp_mbps_2(void)
{
    pthread_t th[2];
    double r[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, raw_sender, &r[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    return r[0] + r[1];
}

/* The same two streams, each moving a tensor-sized buffer (not part of any
 * ratio; printed beside the 2 <-> 2 table): the sender walks its own `bytes`
 * buffer in 1 MiB writes, the receiver reads into a `bytes` buffer, so the
 * copies touch as much memory as a worker's tensor does, where the reference's
 * 1 MiB buffers stay in the cache. */
typedef struct raw_big {
    int lfd;
    size_t bytes;
    char *rbuf;
    double mbps;
} raw_big_t;

static void *sink_big(void *arg)
{
    raw_big_t *r = arg;
    int fd = accept(r->lfd, NULL, NULL);
    size_t off = 0;
    ssize_t got;
    while ((got = read(fd, r->rbuf + off, PSC_MIN((size_t)1 << 20, r->bytes - off))) > 0)
        off = (off + (size_t)got) % r->bytes;
    close(fd);
    return NULL;
}

static void *raw_big_sender(void *arg)
{
    raw_big_t *r = arg;
    int port;
    r->lfd = listen_any(&port);
    r->rbuf = malloc(r->bytes);
    char *buf = malloc(r->bytes);
    memset(r->rbuf, 0, r->bytes);
    memset(buf, 1, r->bytes);
    pthread_t th;
    pthread_create(&th, NULL, sink_big, r);
    int fd = connect_to(port);
    double t0 = psc_now(), t;
    size_t total = 0, off = 0;
    do {
        for (int i = 0; i < 64; i++) {
            ssize_t w = write(fd, buf + off, PSC_MIN((size_t)1 << 20, r->bytes - off));
            PSC_ASSERT(w > 0);
            off = (off + (size_t)w) % r->bytes;
            total += (size_t)w;
        }
        t = psc_now() - t0;
    } while (t < secs_per_point);
    close(fd);
    pthread_join(th, NULL);
    close(r->lfd);
    free(buf);
    free(r->rbuf);
    r->mbps = (double)total / t / 1e6;
    return NULL;
}

static double raw_tcp_mbps_2_big(size_t bytes)
{
    pthread_t th[2];
    raw_big_t r[2] = {{.bytes = bytes}, {.bytes = bytes}};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, raw_big_sender, &r[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    return r[0].mbps + r[1].mbps;
}

/* CPU seconds (user + system) that process pid (0: this one) has used so far. */
static double cpu_secs(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, pid ? "/proc/%d/stat" : "/proc/self/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *q = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (!q || sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static void *echo_thread(void *arg)
{
    int lfd = *(int *)arg;
    int fd = accept(lfd, NULL, NULL);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[16];
    for (;;) {
        size_t got = 0;
        while (got < 16) {
            ssize_t r = read(fd, buf + got, 16 - got);
            if (r <= 0) goto done;
            got += (size_t)r;
        }
        if (write(fd, buf, 16) != 16) break;
    }
done:
    close(fd);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double raw_tcp_rtt_p50_us(void)
{
    int port, lfd = listen_any(&port);
    pthread_t th;
    pthread_create(&th, NULL, echo_thread, &lfd);
    int fd = connect_to(port);
    enum { N = 2000 };
    static double lat[N];
    char buf[16] = {0};
    for (int i = 0; i < N; i++) {
        double t0 = psc_now();
        PSC_ASSERT(write(fd, buf, 16) == 16);
        size_t got = 0;
        while (got < 16) {
            ssize_t r = read(fd, buf + got, 16 - got);
            PSC_ASSERT(r > 0);
            got += (size_t)r;
        }
        lat[i] = (psc_now() - t0) * 1e6;
    }
    close(fd);
    pthread_join(th, NULL);
    close(lfd);
    qsort(lat, N, sizeof lat[0], cmp_double);
    return lat[N / 2];
}

/* ---- psc ---- */
#define BENCH_MAX_VARS 64
typedef struct bench_model {
    psc_cluster_t cl;
    psc_var_desc_t var[BENCH_MAX_VARS];
    psc_placed_var_t *placed;
    int nplaced;
    ps_client_t *pc;
    float *w, *g;
    size_t bytes;
} bench_model_t;

/* A model of nvars variables of `bytes` each over nps PS (one variable
 * partitioned in nps parts when nps > 1). create: this client creates the
 * model (the first); else it joins. */
static void model_open_vars(bench_model_t *m, char *const *addrs, int nps, size_t bytes, int nvars, int id,
                            int create, int rank)
{
    memset(m, 0, sizeof *m);
    m->bytes = bytes * (size_t)nvars;
    m->cl.n[PSC_JOB_PS] = nps;
    m->cl.addr[PSC_JOB_PS] = malloc((size_t)nps * sizeof(char *));
    for (int i = 0; i < nps; i++) m->cl.addr[PSC_JOB_PS][i] = addrs[i];
    PSC_ASSERT(nvars >= 1 && nvars <= BENCH_MAX_VARS);
    for (int v = 0; v < nvars; v++) {
        snprintf(m->var[v].name, sizeof m->var[v].name, "bench%d/v%d", id, v);
        m->var[v].rank = 1;
        m->var[v].shape[0] = (int64_t)(bytes / 4);
        m->var[v].numel = m->var[v].shape[0];
        m->var[v].layer = v;
    }
    bytes = m->bytes;
    char err[512];
    PSC_ASSERT(psc_place(m->var, nvars, nps, PSC_PLACE_ROUND_ROBIN, nps > 1 ? bytes / (size_t)nps : 0, &m->placed,
                         &m->nplaced, err, sizeof err) == 0);
    m->pc = ps_client_create(&m->cl, m->var, nvars, m->placed, m->nplaced, rank, 60000);
    m->w = psc_xaligned(bytes);
    m->g = psc_xaligned(bytes);
    memset(m->w, 0, bytes);
    memset(m->g, 0, bytes); /* zero gradients keep the values fixed; the PS still does the whole apply */
    psc_optim_config_t sgd = {.kind = PSC_OPT_SGD, .learning_rate = 0.01f};
    ps_model_origin_t origin;
    char job[17];
    snprintf(job, sizeof job, "%016x", id);
    if (create && ps_client_create_model(m->pc, job, &sgd, m->w, &origin, err, sizeof err)) {
        fprintf(stderr, "bench_wire: %s\n", err);
        exit(1);
    }
}

static void model_open_on(bench_model_t *m, char *const *addrs, int nps, size_t bytes, int id, int create, int rank)
{
    model_open_vars(m, addrs, nps, bytes, 1, id, create, rank);
}

static void model_open(bench_model_t *m, const char *addr, size_t bytes, int id)
{
    char *a = (char *)addr;
    model_open_on(m, &a, 1, bytes, id, 1, 0);
}

static void model_close(bench_model_t *m)
{
    ps_client_destroy(m->pc);
    free(m->placed);
    free(m->w);
    free(m->g);
    free(m->cl.addr[PSC_JOB_PS]);
}

enum op_kind {
    OP_PUSH,
    OP_PULL,
    OP_PUSH_PULL,
    OP_RAW_2,        /* (run_many only) the two raw streams of the reference */
    OP_RAW_2_TENSOR, /* (run_many only) two raw streams over tensor-sized buffers */
};

static double psc_mbps(bench_model_t *m, enum op_kind k, double *p50_us)
{
    char err[512];
    double t0 = psc_now(), t;
    size_t iters = 0, cap = 100000;
    double *lat = p50_us ? malloc(cap * sizeof *lat) : NULL;
    do {
        double s = psc_now();
        int rc = k == OP_PUSH   ? ps_client_push(m->pc, m->g, 0, NULL, err, sizeof err)
                 : k == OP_PULL ? ps_client_pull(m->pc, m->w, NULL, err, sizeof err)
                                : ps_client_push_pull(m->pc, m->g, m->w, 0, NULL, err, sizeof err);
        if (rc) {
            fprintf(stderr, "bench_wire: %s\n", err);
            exit(1);
        }
        if (lat && iters < cap) lat[iters] = (psc_now() - s) * 1e6;
        iters++;
        t = psc_now() - t0;
    } while (t < secs_per_point || iters < 3);
    if (lat) {
        size_t n = PSC_MIN(iters, cap);
        qsort(lat, n, sizeof *lat, cmp_double);
        *p50_us = lat[n / 2];
        free(lat);
    }
    return (double)m->bytes * (double)iters / t / 1e6;
}

typedef struct runner {
    bench_model_t *m;
    enum op_kind k;
    double mbps;
    pthread_t th;
} runner_t;

static void *run_one(void *arg)
{
    runner_t *r = arg;
    r->mbps = psc_mbps(r->m, r->k, NULL);
    return NULL;
}

/* n clients, each its own connections, doing op k at once: the sum of their MB/s. */
static double psc_mbps_n(bench_model_t *ms, int n, enum op_kind k)
{
    runner_t r[16];
    PSC_ASSERT(n <= 16);
    for (int i = 0; i < n; i++) {
        r[i] = (runner_t){.m = &ms[i], .k = k};
        pthread_create(&r[i].th, NULL, run_one, &r[i]);
    }
    double sum = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(r[i].th, NULL);
        sum += r[i].mbps;
    }
    return sum;
}

static int start_ps_or_die(it_proc_t *ps)
{
    memset(ps, 0, sizeof *ps);
    if (it_start_ps(ps) != 0) {
        it_dump_log(ps);
        fprintf(stderr, "bench_wire: cannot start ps_server from PSC_BIN=%s\n", it_bin());
        exit(1);
    }
    return 0;
}

#define ROUNDS 3

static double median3(double *v)
{
    qsort(v, ROUNDS, sizeof *v, cmp_double);
    return v[ROUNDS / 2];
}

/* A table row: per round, the raw TCP MB/s and each op's MB/s. */
typedef struct row {
    double raw[ROUNDS], op[3][ROUNDS];
} row_t;

/* Prints median MB/s (median ratio) of each op, then push+pull (a push then a
 * pull: 2 tensors in t_push + t_pull) and the fused push-pull (both directions). */
static void print_row(const char *name, const row_t *r)
{
    double mb[4][ROUNDS], ra[4][ROUNDS];
    for (int k = 0; k < ROUNDS; k++) {
        double v[4] = {r->op[0][k], r->op[1][k], 2.0 / (1.0 / r->op[0][k] + 1.0 / r->op[1][k]), 2.0 * r->op[2][k]};
        for (int j = 0; j < 4; j++) {
            mb[j][k] = v[j];
            ra[j][k] = v[j] / r->raw[k];
        }
    }
    printf("%-8s", name);
    for (int j = 0; j < 4; j++) printf(" %7.0f (%.2f)", median3(mb[j]), median3(ra[j]));
    printf("\n");
}

/* ---- the three parts of the run ---- */
static const size_t sizes[] = {4 << 10, 1 << 20, 16 << 20, 64 << 20};
static const char *names[] = {"4 KiB", "1 MiB", "16 MiB", "64 MiB"};

typedef struct single_result {
    row_t rows[4];
    double lat_ratio[ROUNDS], lat_us[ROUNDS], rtt_us[ROUNDS];
    double push16[4][ROUNDS]; /* pushes of bfloat16 gradients: ratio of float32 tensor bytes to raw TCP */
} single_result_t;

/* 1 worker <-> 1 ps_server, every size. */
static void run_single(single_result_t *r)
{
    for (int i = 0; i < 4; i++) {
        /* a ps_server holds one job's model, so each size gets a fresh one */
        it_proc_t ps;
        start_ps_or_die(&ps);
        bench_model_t m;
        model_open(&m, ps.addr, sizes[i], i + 1);
        for (int k = 0; k < ROUNDS; k++) {
            r->rows[i].raw[k] = raw_tcp_mbps();
            if (i == 0) r->rtt_us[k] = raw_tcp_rtt_p50_us();
            r->rows[i].op[0][k] = psc_mbps(&m, OP_PUSH, i == 0 ? &r->lat_us[k] : NULL);
            r->rows[i].op[1][k] = psc_mbps(&m, OP_PULL, NULL);
            r->rows[i].op[2][k] = psc_mbps(&m, OP_PUSH_PULL, NULL);
            ps_client_set_gradient_dtype(m.pc, PSC_ENC_BFLOAT16, 1);
            r->push16[i][k] = psc_mbps(&m, OP_PUSH, NULL) / r->rows[i].raw[k];
            ps_client_set_gradient_dtype(m.pc, PSC_ENC_FLOAT32, 0);
            if (i == 0) r->lat_ratio[k] = r->lat_us[k] / r->rtt_us[k];
        }
        model_close(&m);
        it_stop(&ps);
    }
}

static void print_single(single_result_t *r)
{
    double raw_all[ROUNDS];
    for (int k = 0; k < ROUNDS; k++) raw_all[k] = r->rows[2].raw[k];
    printf("bench_wire: 1 worker <-> 1 ps_server on 127.0.0.1, %d interleaved rounds of %.2f s per point, chunks "
           "of %zu bytes\n", ROUNDS, secs_per_point, PSC_CHUNK_BYTES);
    double rmin = r->rows[0].raw[0], rmax = rmin;
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < ROUNDS; k++) {
            rmin = PSC_MIN(rmin, r->rows[i].raw[k]);
            rmax = PSC_MAX(rmax, r->rows[i].raw[k]);
        }
    printf("raw TCP (1 MiB writes): median %.0f MB/s in the 16 MiB rounds (every round: %.0f..%.0f)\n",
           median3(raw_all), rmin, rmax);
    printf("median MB/s of tensor bytes (median ratio to the raw TCP of the same round); push+pull = a push then\n"
           "a pull of the tensor, counting the bytes of both; push-pull = one fused round, both directions\n");
    printf("%-8s %14s %14s %14s %14s\n", "tensor", "push", "pull", "push+pull", "push-pull");
    for (int i = 0; i < 4; i++) print_row(names[i], &r->rows[i]);
    printf("push of bfloat16 gradients (gradient_dtype), float32 tensor bytes a second against raw TCP:");
    for (int i = 0; i < 4; i++) printf(" %s %.2f%s", names[i], median3(r->push16[i]), i < 3 ? "," : "\n");
    printf("4 KiB push p50 = %.2f x a raw TCP 16-byte round trip (median of rounds: %.0f us against %.0f us)\n",
           median3(r->lat_ratio), median3(r->lat_us), median3(r->rtt_us));
}

/* Small ops with requests in flight: 16 clients, each one call at a time:
 * (a) one 4 KiB tensor a call; (b) 64 tensors of 4 KiB a call (one Batch). */
static void run_small(void)
{
    enum { NSMALL = 16, NBATCH = 64 };
    double small_single[ROUNDS], small_batched[ROUNDS];
    int batch_calls = 0;
    it_proc_t ps;
    start_ps_or_die(&ps);
    static bench_model_t ms[NSMALL];
    char *a = ps.addr;
    for (int i = 0; i < NSMALL; i++) model_open_on(&ms[i], &a, 1, 4 << 10, 10, i == 0, i);
    for (int k = 0; k < ROUNDS; k++) small_single[k] = psc_mbps_n(ms, NSMALL, OP_PUSH) * 1e6 / (4 << 10);
    for (int i = 0; i < NSMALL; i++) model_close(&ms[i]);
    it_stop(&ps);
    start_ps_or_die(&ps);
    a = ps.addr;
    for (int i = 0; i < NSMALL; i++) model_open_vars(&ms[i], &a, 1, 4 << 10, NBATCH, 11, i == 0, i);
    batch_calls = ps_client_batch_calls(ms[0].pc, NULL);
    for (int k = 0; k < ROUNDS; k++) small_batched[k] = psc_mbps_n(ms, NSMALL, OP_PUSH) * 1e6 / (4 << 10);
    for (int i = 0; i < NSMALL; i++) model_close(&ms[i]);
    it_stop(&ps);
    printf("4 KiB tensors pushed per second, %d clients with a call in flight each: one tensor a call %.0f/s; "
           "%d tensors a call (%d Batch call a step) %.0f/s\n",
           NSMALL, median3(small_single), NBATCH, batch_calls, median3(small_batched));
}

/* What one measurement of the 2 <-> 2 table cost: CPU seconds of every
 * process taking part (this one and both ps_servers) per GB moved, and the
 * cores they kept busy. */
typedef struct cpu_cost {
    double per_gb[ROUNDS], cores[ROUNDS];
} cpu_cost_t;

static double cpu_of(const it_proc_t *ps, int nps)
{
    double c = cpu_secs(0);
    for (int i = 0; i < nps; i++) c += cpu_secs(ps[i].pid);
    return c;
}

/* Runs op k and notes its cost in round `round`; returns MB/s. */
static double measured(bench_model_t *mw, enum op_kind k, size_t bytes, const it_proc_t *ps, cpu_cost_t *cost,
                       int round)
{
    double c0 = cpu_of(ps, 2), t0 = psc_now();
    double mbps = k == OP_RAW_2          ? raw_tcp_mbps_2()
                  : k == OP_RAW_2_TENSOR ? raw_tcp_mbps_2_big(bytes)
                                         : psc_mbps_n(mw, 2, k);
    double cpu = cpu_of(ps, 2) - c0, t = psc_now() - t0;
    double moved_gb = mbps * (k == OP_PUSH_PULL ? 2 : 1) * t / 1e3; /* a push-pull moves the tensor both ways */
    cost->per_gb[round] = cpu / moved_gb;
    cost->cores[round] = cpu / t;
    return mbps;
}

/* 2 workers <-> 2 PS: a variable partitioned over both, each worker moving all of it. */
static void run_many(void)
{
    static const size_t sizes2[] = {16 << 20, 64 << 20};
    static const char *names2[] = {"16 MiB", "64 MiB"};
    row_t rows2[2];
    double big[2][ROUNDS];
    cpu_cost_t cost[2][5]; /* raw, raw over tensor buffers, push, pull, push-pull */
    for (int i = 0; i < 2; i++) {
        it_proc_t ps[2];
        start_ps_or_die(&ps[0]);
        start_ps_or_die(&ps[1]);
        char *addrs[2] = {ps[0].addr, ps[1].addr};
        bench_model_t mw[2];
        for (int w = 0; w < 2; w++) model_open_on(&mw[w], addrs, 2, sizes2[i], 20 + i, w == 0, w);
        for (int k = 0; k < ROUNDS; k++) {
            rows2[i].raw[k] = measured(mw, OP_RAW_2, sizes2[i], ps, &cost[i][0], k);
            big[i][k] = measured(mw, OP_RAW_2_TENSOR, sizes2[i], ps, &cost[i][1], k);
            rows2[i].op[0][k] = measured(mw, OP_PUSH, sizes2[i], ps, &cost[i][2], k);
            rows2[i].op[1][k] = measured(mw, OP_PULL, sizes2[i], ps, &cost[i][3], k);
            rows2[i].op[2][k] = measured(mw, OP_PUSH_PULL, sizes2[i], ps, &cost[i][4], k);
        }
        for (int w = 0; w < 2; w++) model_close(&mw[w]);
        it_stop(&ps[0]);
        it_stop(&ps[1]);
    }
    printf("2 workers <-> 2 ps_servers (the variable partitioned over both; sum over the workers),\n"
           "against 2 raw TCP streams at once (median %.0f MB/s in the 16 MiB rounds)\n",
           median3((double[]){rows2[0].raw[0], rows2[0].raw[1], rows2[0].raw[2]}));
    printf("%-8s %14s %14s %14s %14s\n", "tensor", "push", "pull", "push+pull", "push-pull");
    for (int i = 0; i < 2; i++) print_row(names2[i], &rows2[i]);
    printf("CPU seconds per GB moved, all processes (cores busy): the bound where every process shares the cores;\n"
           "raw/tensor = the 2 raw streams over tensor-sized buffers (MB/s against the reference in brackets)\n");
    printf("%-8s %12s %18s %12s %12s %12s\n", "tensor", "raw", "raw/tensor", "push", "pull", "push-pull");
    for (int i = 0; i < 2; i++) {
        printf("%-8s", names2[i]);
        for (int j = 0; j < 5; j++) {
            printf(" %5.3f (%.2f)", median3(cost[i][j].per_gb), median3(cost[i][j].cores));
            if (j == 1) {
                double r[ROUNDS];
                for (int k = 0; k < ROUNDS; k++) r[k] = big[i][k] / rows2[i].raw[k];
                printf(" [%.2f]", median3(r));
            }
        }
        printf("\n");
    }
    printf("the same ops against the 2 raw streams over tensor-sized buffers (median of the per-round ratios):");
    for (int i = 0; i < 2; i++) {
        double r[3][ROUNDS];
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < ROUNDS; k++) r[j][k] = rows2[i].op[j][k] * (j == 2 ? 2 : 1) / big[i][k];
        printf("%s %s push %.2f, pull %.2f, push-pull %.2f", i ? ";" : "", names2[i], median3(r[0]), median3(r[1]),
               median3(r[2]));
    }
    printf("\n");
}

int main(int argc, char **argv)
{
    if (argc > 1) secs_per_point = atof(argv[1]);
    if (secs_per_point <= 0) secs_per_point = 1.0;
    secs_per_point /= ROUNDS; /* each round gets its share of the point */
    int want[3] = {argc <= 2, argc <= 2, argc <= 2}; /* single, small, many */
    static const char *part_names[3] = {"single", "small", "many"};
    char parts[128];
    snprintf(parts, sizeof parts, "%s", argc > 2 ? argv[2] : "");
    for (char *save = NULL, *tok = strtok_r(parts, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int j = 0;
        while (j < 3 && strcmp(tok, part_names[j]) != 0) j++;
        if (j == 3) {
            fprintf(stderr, "bench_wire: unknown part \"%s\"\nusage: bench_wire [seconds-per-point] "
                            "[single,small,many]\n", tok);
            return 64;
        }
        want[j] = 1;
    }
    static single_result_t single;
    if (want[0]) {
        run_single(&single);
        print_single(&single);
    }
    if (want[1]) run_small();
    if (want[2]) run_many();
    return 0;
}
