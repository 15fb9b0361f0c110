/* bench_scaling — how a step's parameter traffic scales with the model: one
 * real ps_server on 127.0.0.1 and this process as its worker (ps_client, as
 * bench_wire), for models of 1, 16, 64 and 256 MiB of float32 variables (4
 * variables of a quarter each, Adam: 2 slots), timing per step
 *   push-pull  the fused round a worker does every step (ps_client_push_pull),
 *   push+pull  a push, then a pull (ps_client_push, ps_client_pull),
 * and fitting time = a + b * bytes by least squares over the sizes, on
 * relative residuals (a: the fixed cost of a step, b: the time per byte of
 * model; 2/b: the marginal MB/s counting both directions, as the table). Prints a, b, R²
 * and the worst relative residual; a point more than 25 % off its line is
 * flagged as a "size cliff". A fresh ps_server per size (a PS holds one job).
 *
 * Memory: after each size's steps, the ps_server's VmRSS and VmHWM from
 * /proc/PID/status against its tensors, values + Adam's 2 slots = 3 x model
 * bytes, and the target 1.2 x (values + slots) + 64 MiB; this process's own
 * VmRSS/VmHWM against its parameter and gradient slabs (2 x model bytes).
 *
 * Each point: 1 warm-up step, then at least 3 steps and at least the given
 * seconds; the fastest step counts (fit, MB/s; other processes on a 2-core VM
 * only ever add time), the median is shown beside it. A measurement, not a test: it never fails
 * on speed or memory (exit 1 only when a ps_server or an RPC fails).
 *
 * usage: bench_scaling [seconds-per-point]   (default 1; PSC_BIN = the build directory)
 */
#include "../integration/it_util.h"
#include "placement.h"
#include "ps_client.h"
#include "psc.h"
#include "rng.h"
#include "wire.h"

#include <math.h>

enum { NSIZES = 4, NVARS = 4, MAX_ITERS = 1000 };
static const size_t sizes_mib[NSIZES] = {1, 16, 64, 256};

typedef struct scaling_point {
    double bytes;
    double push_pull, push_then_pull;         /* s, the fastest step */
    double push_pull_med, push_then_pull_med; /* s, the median step */
    int steps_pp, steps_sep;
    long ps_created_kb;  /* ps_server VmRSS once the model is created and initialized */
    long ps_rss_kb, ps_hwm_kb, self_rss_kb, self_hwm_kb; /* after the steps */
} scaling_point_t;

/* The value of "Key:" (kB) in /proc/PID/status, or -1. */
static long proc_status_kb(pid_t pid, const char *key)
{
    char path[64], line[256];
    if (pid > 0)
        snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    else
        snprintf(path, sizeof path, "/proc/self/status");
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kb = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            kb = atol(line + klen + 1);
            break;
        }
    fclose(f);
    return kb;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what, const char *err, it_proc_t *ps)
{
    fprintf(stderr, "bench_scaling: %s: %s\n", what, err);
    if (ps) it_dump_log(ps);
    exit(1);
}

/* Seconds of the fastest step of `kind` (0: push-pull, 1: push then pull);
 * *median gets the median. */
static double time_steps(ps_client_t *pc, const float *g, float *w, int kind, double secs, int *steps, double *median,
                         it_proc_t *ps)
{
    static double lat[MAX_ITERS];
    char err[512];
    int n = 0;
    double t0 = psc_now();
    for (int i = -1; i < MAX_ITERS; i++) { /* i = -1: warm-up */
        double s = psc_now();
        int rc = kind == 0 ? ps_client_push_pull(pc, g, w, 0, NULL, err, sizeof err)
                           : ps_client_push(pc, g, 0, NULL, err, sizeof err) ||
                                 ps_client_pull(pc, w, NULL, err, sizeof err);
        if (rc) die(kind == 0 ? "push-pull" : "push, pull", err, ps);
        if (i < 0) {
            t0 = psc_now();
            continue;
        }
        lat[n++] = psc_now() - s;
        if (n >= 3 && psc_now() - t0 >= secs) break;
    }
    qsort(lat, (size_t)n, sizeof lat[0], cmp_double);
    *steps = n;
    *median = n % 2 ? lat[n / 2] : (lat[n / 2 - 1] + lat[n / 2]) / 2;
    return lat[0];
}

static void run_size(size_t mib, double secs, scaling_point_t *pt)
{
    size_t bytes = mib << 20, per_var = bytes / NVARS;
    it_proc_t ps;
    memset(&ps, 0, sizeof ps);
    if (it_start_ps(&ps) != 0) {
        it_dump_log(&ps);
        fprintf(stderr, "bench_scaling: cannot start ps_server from PSC_BIN=%s\n", it_bin());
        exit(1);
    }
    psc_cluster_t cl;
    memset(&cl, 0, sizeof cl);
    char *addr = ps.addr;
    cl.n[PSC_JOB_PS] = 1;
    cl.addr[PSC_JOB_PS] = &addr;
    psc_var_desc_t vars[NVARS];
    memset(vars, 0, sizeof vars);
    for (int i = 0; i < NVARS; i++) {
        snprintf(vars[i].name, sizeof vars[i].name, "dense_%d/kernel", i);
        vars[i].rank = 2;
        vars[i].shape[0] = (int64_t)(per_var / 4 / 256);
        vars[i].shape[1] = 256;
        vars[i].numel = (int64_t)(per_var / 4);
    }
    char err[512];
    psc_placed_var_t *placed = NULL;
    int nplaced = 0;
    if (psc_place(vars, NVARS, 1, PSC_PLACE_ROUND_ROBIN, 0, &placed, &nplaced, err, sizeof err))
        die("placement", err, &ps);
    ps_client_t *pc = ps_client_create(&cl, vars, NVARS, placed, nplaced, 0, 120000);
    float *w = psc_xaligned(bytes), *g = psc_xaligned(bytes);
    psc_rng_t r;
    psc_rng_seed(&r, mib);
    for (size_t i = 0; i < bytes / 4; i++) {
        w[i] = (float)(psc_rng_uniform(&r) - 0.5) * 0.1f;
        g[i] = (float)(psc_rng_uniform(&r) - 0.5) * 0.01f;
    }
    psc_optim_config_t adam = {
        .kind = PSC_OPT_ADAM, .learning_rate = 0.001f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f};
    ps_model_origin_t origin;
    char job[17];
    snprintf(job, sizeof job, "%016zx", mib);
    if (ps_client_create_model(pc, job, &adam, w, &origin, err, sizeof err)) die("create model", err, &ps);

    pt->bytes = (double)bytes;
    pt->ps_created_kb = proc_status_kb(ps.pid, "VmRSS");
    pt->push_pull = time_steps(pc, g, w, 0, secs, &pt->steps_pp, &pt->push_pull_med, &ps);
    pt->push_then_pull = time_steps(pc, g, w, 1, secs, &pt->steps_sep, &pt->push_then_pull_med, &ps);
    pt->ps_rss_kb = proc_status_kb(ps.pid, "VmRSS");
    pt->ps_hwm_kb = proc_status_kb(ps.pid, "VmHWM");
    pt->self_rss_kb = proc_status_kb(0, "VmRSS");
    pt->self_hwm_kb = proc_status_kb(0, "VmHWM");

    ps_client_destroy(pc);
    free(placed);
    free(w);
    free(g);
    it_stop(&ps);
}

typedef struct fit {
    double a, b, r2, worst; /* worst: largest |t - fit| / t */
    int worst_at;
} fit_t;

/* Least squares t = a + b x over n points, each residual relative to its t
 * (weights 1/t^2): the sizes span 2.5 decades, and with plain residuals the
 * biggest model's noise alone would decide a, and with it the small models'
 * relative residuals. R² is the ordinary one of that line. */
static fit_t fit_line(const double *x, const double *t, int n)
{
    double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0;
    for (int i = 0; i < n; i++) {
        double w = 1 / (t[i] * t[i]);
        sw += w;
        sx += w * x[i];
        st += w * t[i];
        sxx += w * x[i] * x[i];
        sxt += w * x[i] * t[i];
    }
    fit_t f = {0};
    f.b = (sw * sxt - sx * st) / (sw * sxx - sx * sx);
    f.a = (st - f.b * sx) / sw;
    double mt = 0, ss_res = 0, ss_tot = 0;
    for (int i = 0; i < n; i++) mt += t[i] / n;
    for (int i = 0; i < n; i++) {
        double e = t[i] - (f.a + f.b * x[i]);
        ss_res += e * e;
        ss_tot += (t[i] - mt) * (t[i] - mt);
        if (fabs(e) / t[i] > f.worst) {
            f.worst = fabs(e) / t[i];
            f.worst_at = i;
        }
    }
    f.r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 1;
    return f;
}

static void print_fit(const char *name, const scaling_point_t *pts, int which)
{
    double x[NSIZES], t[NSIZES];
    for (int i = 0; i < NSIZES; i++) {
        x[i] = pts[i].bytes;
        t[i] = which == 0 ? pts[i].push_pull : pts[i].push_then_pull;
    }
    fit_t f = fit_line(x, t, NSIZES);
    printf("%-10s a = %6.2f ms  b = %.3f ms/MiB (2/b = %4.0f MB/s both ways)  R² = %.4f  worst residual %4.1f %% at "
           "%zu MiB%s\n",
           name, f.a * 1e3, f.b * 1e3 * (1 << 20), 2e-6 / f.b, f.r2, 100 * f.worst, sizes_mib[f.worst_at],
           f.worst > 0.25 ? "  SIZE CLIFF (> 25 % off the line)" : "");
}

int main(int argc, char **argv)
{
    double secs = 1.0;
    if (argc > 2 || (argc == 2 && (secs = atof(argv[1])) <= 0)) {
        fprintf(stderr, "usage: bench_scaling [seconds-per-point]   (default 1)\n");
        return PSC_EXIT_USAGE;
    }
    scaling_point_t pts[NSIZES];
    memset(pts, 0, sizeof pts);
    for (int i = 0; i < NSIZES; i++) run_size(sizes_mib[i], secs, &pts[i]);

    printf("bench_scaling: 1 worker (ps_client) <-> 1 ps_server on 127.0.0.1, models of %d float32 variables,\n"
           "Adam; >= 3 steps and >= %.1f s per point\n",
           NVARS, secs);
    printf("%-8s %21s %8s %21s %8s %10s\n", "model", "push-pull ms best/med", "MB/s", "push+pull ms best/med", "MB/s",
           "steps");
    for (int i = 0; i < NSIZES; i++) {
        const scaling_point_t *p = &pts[i];
        printf("%4zu MiB %10.2f / %8.2f %8.0f %10.2f / %8.2f %8.0f %6d/%d\n", sizes_mib[i], p->push_pull * 1e3,
               p->push_pull_med * 1e3, 2 * p->bytes / p->push_pull / 1e6, p->push_then_pull * 1e3,
               p->push_then_pull_med * 1e3, 2 * p->bytes / p->push_then_pull / 1e6, p->steps_pp, p->steps_sep);
    }
    printf("(MB/s: of the best step, counting the model's bytes both ways: 2 x model / step time)\n");
    printf("fit of the best steps, time = a + b * model bytes:\n");
    print_fit("push-pull", pts, 0);
    print_fit("push+pull", pts, 1);

    printf("memory: ps_server VmRSS once the model is created, VmRSS / VmHWM after the steps, against values +\n"
           "Adam slots (3 x model) and the target 1.2 x (values + slots) + 64 MiB; this worker process's VmRSS\n"
           "against its 2 slabs (params + grads)\n");
    printf("%-8s %9s %9s %9s %10s %9s %12s %11s %11s %8s\n", "model", "created", "ps RSS", "ps HWM", "tensors",
           "target", "HWM/tensors", "HWM/target", "worker RSS", "slabs");
    for (int i = 0; i < NSIZES; i++) {
        const scaling_point_t *p = &pts[i];
        double tensors = 3.0 * (double)sizes_mib[i], target = 1.2 * tensors + 64;
        double rss = p->ps_rss_kb / 1024.0, hwm = p->ps_hwm_kb / 1024.0;
        printf("%4zu MiB %5.0f MiB %5.0f MiB %5.0f MiB %6.0f MiB %5.0f MiB %12.2f %11.2f %7.0f MiB %4zu MiB\n",
               sizes_mib[i], p->ps_created_kb / 1024.0, rss, hwm, tensors, target, hwm / tensors, hwm / target,
               p->self_rss_kb / 1024.0, 2 * sizes_mib[i]);
    }
    return 0;
}
