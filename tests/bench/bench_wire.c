/* bench_wire — push / pull / push-pull throughput between this process (a
 * worker's ps_client) and one real ps_server on loopback, for 4 KiB, 1 MiB,
 * 16 MiB and 64 MiB tensors, against raw TCP measured by this program in the
 * same run (a plain socket sender/receiver, 1 MiB writes). Prints MB/s and the
 * ratio to raw TCP; also the p50 latency of a 4 KiB push against a raw TCP
 * 16-byte round trip; 4 KiB pushes per second from 16 clients at once; and 2
 * workers <-> 2 ps_servers (a variable partitioned over both) against two raw
 * TCP streams at once. A measurement, not a test: it never fails on speed.
 *
 * usage: bench_wire [seconds-per-point]   (PSC_BIN = the build directory)
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
typedef struct bench_model {
    psc_cluster_t cl;
    psc_var_desc_t var;
    psc_placed_var_t *placed;
    int nplaced;
    ps_client_t *pc;
    float *w, *g;
    size_t bytes;
} bench_model_t;

/* A one-variable model of `bytes` over nps PS (partitioned in nps parts when
 * nps > 1). create: this client creates the model (the first); else it joins. */
static void model_open_on(bench_model_t *m, char *const *addrs, int nps, size_t bytes, int id, int create, int rank)
{
    memset(m, 0, sizeof *m);
    m->bytes = bytes;
    m->cl.n[PSC_JOB_PS] = nps;
    m->cl.addr[PSC_JOB_PS] = malloc((size_t)nps * sizeof(char *));
    for (int i = 0; i < nps; i++) m->cl.addr[PSC_JOB_PS][i] = addrs[i];
    snprintf(m->var.name, sizeof m->var.name, "bench%d/kernel", id);
    m->var.rank = 1;
    m->var.shape[0] = (int64_t)(bytes / 4);
    m->var.numel = m->var.shape[0];
    char err[512];
    PSC_ASSERT(psc_place(&m->var, 1, nps, PSC_PLACE_ROUND_ROBIN, nps > 1 ? bytes / (size_t)nps : 0, &m->placed,
                         &m->nplaced, err, sizeof err) == 0);
    m->pc = ps_client_create(&m->cl, &m->var, 1, m->placed, m->nplaced, rank, 60000);
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

enum op_kind { OP_PUSH, OP_PULL, OP_PUSH_PULL };

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

int main(int argc, char **argv)
{
    if (argc > 1) secs_per_point = atof(argv[1]);
    if (secs_per_point <= 0) secs_per_point = 1.0;
    static const size_t sizes[] = {4 << 10, 1 << 20, 16 << 20, 64 << 20};
    double raw_before = raw_tcp_mbps();
    double rtt = raw_tcp_rtt_p50_us();
    double res[4][3], p50_push_4k = 0;
    for (int i = 0; i < 4; i++) {
        /* a ps_server holds one job's model, so each size gets a fresh one */
        it_proc_t ps;
        start_ps_or_die(&ps);
        bench_model_t m;
        model_open(&m, ps.addr, sizes[i], i + 1);
        res[i][0] = psc_mbps(&m, OP_PUSH, i == 0 ? &p50_push_4k : NULL);
        res[i][1] = psc_mbps(&m, OP_PULL, NULL);
        res[i][2] = psc_mbps(&m, OP_PUSH_PULL, NULL);
        model_close(&m);
        it_stop(&ps);
    }
    /* small ops with requests in flight: 16 clients pushing one 4 KiB variable */
    enum { NSMALL = 16 };
    double small_ops;
    {
        it_proc_t ps;
        start_ps_or_die(&ps);
        static bench_model_t ms[NSMALL];
        char *a = ps.addr;
        for (int i = 0; i < NSMALL; i++) model_open_on(&ms[i], &a, 1, 4 << 10, 10, i == 0, i);
        small_ops = psc_mbps_n(ms, NSMALL, OP_PUSH) * 1e6 / (4 << 10);
        for (int i = 0; i < NSMALL; i++) model_close(&ms[i]);
        it_stop(&ps);
    }
    /* 2 workers <-> 2 PS: a variable partitioned over both, each worker moving all of it */
    static const size_t sizes2[] = {16 << 20, 64 << 20};
    double res2[2][3];
    for (int i = 0; i < 2; i++) {
        it_proc_t ps[2];
        start_ps_or_die(&ps[0]);
        start_ps_or_die(&ps[1]);
        char *addrs[2] = {ps[0].addr, ps[1].addr};
        bench_model_t mw[2];
        for (int w = 0; w < 2; w++) model_open_on(&mw[w], addrs, 2, sizes2[i], 20 + i, w == 0, w);
        res2[i][0] = psc_mbps_n(mw, 2, OP_PUSH);
        res2[i][1] = psc_mbps_n(mw, 2, OP_PULL);
        res2[i][2] = psc_mbps_n(mw, 2, OP_PUSH_PULL);
        for (int w = 0; w < 2; w++) model_close(&mw[w]);
        it_stop(&ps[0]);
        it_stop(&ps[1]);
    }
    double raw2 = raw_tcp_mbps_2();
    double raw_after = raw_tcp_mbps();
    double raw = (raw_before + raw_after) / 2;

    printf("bench_wire: 1 worker <-> 1 ps_server on 127.0.0.1, %.1f s per point, chunks of %zu bytes\n",
           secs_per_point, PSC_CHUNK_BYTES);
    printf("raw TCP (1 MiB writes): %.0f MB/s (before %.0f, after %.0f)\n", raw, raw_before, raw_after);
    printf("MB/s of tensor bytes, (ratio to raw TCP); push+pull = a push then a pull of the tensor,\n"
           "counting the bytes of both; push-pull = one fused round, also counting the bytes of both directions\n");
    printf("%-8s %14s %14s %14s %14s\n", "tensor", "push", "pull", "push+pull", "push-pull");
    static const char *names[] = {"4 KiB", "1 MiB", "16 MiB", "64 MiB"};
    for (int i = 0; i < 4; i++) {
        double both = 2.0 / (1.0 / res[i][0] + 1.0 / res[i][1]); /* 2 tensors in t_push + t_pull */
        double fused = 2.0 * res[i][2];
        printf("%-8s %7.0f (%.2f) %7.0f (%.2f) %7.0f (%.2f) %7.0f (%.2f)\n", names[i], res[i][0], res[i][0] / raw,
               res[i][1], res[i][1] / raw, both, both / raw, fused, fused / raw);
    }
    printf("4 KiB push p50 %.0f us = %.2f x raw TCP 16-byte round trip (%.0f us)\n", p50_push_4k, p50_push_4k / rtt,
           rtt);
    printf("4 KiB pushes, %d clients in flight: %.0f ops/s\n", NSMALL, small_ops);
    printf("2 workers <-> 2 ps_servers (the variable partitioned over both; sum over the workers),\n"
           "against 2 raw TCP streams at once: %.0f MB/s\n", raw2);
    printf("%-8s %14s %14s %14s %14s\n", "tensor", "push", "pull", "push+pull", "push-pull");
    static const char *names2[] = {"16 MiB", "64 MiB"};
    for (int i = 0; i < 2; i++) {
        double both = 2.0 / (1.0 / res2[i][0] + 1.0 / res2[i][1]);
        double fused = 2.0 * res2[i][2];
        printf("%-8s %7.0f (%.2f) %7.0f (%.2f) %7.0f (%.2f) %7.0f (%.2f)\n", names2[i], res2[i][0], res2[i][0] / raw2,
               res2[i][1], res2[i][1] / raw2, both, both / raw2, fused, fused / raw2);
    }
    return 0;
}
