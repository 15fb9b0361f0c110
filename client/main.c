/* psctl — drives a running psc cluster from anywhere that can reach it
 * (standalone-client mode, DESIGN.md): the daemons run without a job and wait;
 * psctl submits one to the chief, follows it, stops it, checkpoints, exports.
 *
 *   psctl train JOB.json [--detach]   submit a job; follow it to the end (Ctrl-C cancels it)
 *   psctl attach                      follow the running (or last) job
 *   psctl status                      members and health, the job, variables per PS
 *   psctl stop                        cancel the running job (the cluster stays up)
 *   psctl checkpoint [--reason TEXT]  a checkpoint now, once committed on every PS
 *   psctl export --format safetensors -o FILE   the current variables
 *   psctl eval                        test-set accuracy of the current weights
 *
 * The cluster: --cluster FILE|JSON (a cluster object or a TF_CONFIG document),
 * else TF_CONFIG's cluster; --chief HOST:PORT alone is enough for train,
 * attach, stop and checkpoint.
 * Exit codes: 0 done, 1 the job failed or the cluster refused, 64 usage,
 * 69 unreachable, 77 credentials refused (token or certificate), 78 bad
 * cluster configuration, 130 cancelled with Ctrl-C.
 */
#include "export.h"
#include "log.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "security.h"
#include "tf_config.h"
#include "wire.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    OPT_CHIEF = 1000,
    OPT_CLUSTER,
    OPT_REASON,
    OPT_TIMEOUT,
    OPT_DETACH,
    OPT_FORMAT,
    OPT_OUT,
    OPT_LOG_LEVEL,
    OPT_HELP,
    OPT_VERSION
};

typedef struct cli {
    const char *chief;      /* the chief's address */
    psc_cluster_t cluster;  /* when known (--cluster or TF_CONFIG) */
    int have_cluster;
    int timeout_ms;         /* per call */
    int timeout_set;        /* --timeout_secs given: it bounds checkpoint and eval too */
    const char *reason, *format, *out;
    int detach;
} cli_t;

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: psctl COMMAND [options]\n"
            "Drives a running psc cluster (standalone-client mode).\n\n"
            "commands:\n"
            "  train JOB.json [--detach]  submit a job to the chief and follow it (Ctrl-C cancels the job)\n"
            "  attach                     follow the running or last job\n"
            "  status                     cluster members and health, the job, the variables of every PS\n"
            "  stop                       cancel the running job; the daemons stay up\n"
            "  checkpoint [--reason TEXT] take a checkpoint now; waits until every PS committed it\n"
            "  export --format safetensors -o FILE   write the current variables\n"
            "  eval                       test-set accuracy of the current weights (the chief evaluates)\n"
            "options:\n"
            "  --cluster FILE|JSON   the cluster (a cluster object or a TF_CONFIG document); default TF_CONFIG\n"
            "  --chief HOST:PORT     the chief's address (default: from the cluster)\n"
            "  --timeout_secs S      deadline of each call to the cluster (default 30; checkpoint and eval 300)\n"
            "  --tls_ca FILE, --tls_cert FILE, --tls_key FILE, --tls_server_name NAME, --auth_token_file FILE\n"
            "                        TLS and the shared token, as for the daemons (see the README, Security)\n"
            "  --log_level LEVEL     debug shows gRPC's own log lines (default info: psc's messages only)\n"
            "  --help, --version\n"
            "Exit codes: 0 done, 1 job failed or refused, 64 usage, 69 unreachable, 77 token or certificate refused,\n"
            "78 bad cluster or TLS/token files, 130 cancelled.\n");
}

/* psctl's exit code for a call that failed with gRPC status `code`: 69 when a
 * member is unreachable (or slow), 77 when it refused the credentials, 1 for
 * any other refusal (the message says which). */
static int exit_code_of(int code)
{
    int e = psc_rpc_code_errno(code);
    if (e == PSC_EPERM) return PSC_EXIT_NOPERM;
    return e == PSC_EUNAVAILABLE || e == PSC_ETIMEOUT ? PSC_EXIT_UNAVAILABLE : 1;
}

/* One call to addr; fills *op (caller clears). Returns 0 or an exit code after printing why. */
static int call(const cli_t *c, const char *addr, const char *method, const void *req, size_t len, int timeout_ms,
                psc_rpc_op_t *op)
{
    psc_rpc_channel_t *ch = psc_rpc_channel_create(addr);
    int rc = psc_rpc_call(ch, method, req, len, timeout_ms > 0 ? timeout_ms : c->timeout_ms, 0, op);
    psc_rpc_channel_destroy(ch);
    if (rc == 0) return 0;
    const char *m = strrchr(method, '/');
    fprintf(stderr, "psctl: %s on %s failed: %s: %s\n", m ? m + 1 : method, addr, psc_rpc_code_name(op->code),
            op->msg);
    int code = exit_code_of(op->code);
    if (code == PSC_EXIT_NOPERM)
        fprintf(stderr, "psctl: %s refused psctl's credentials: give the cluster's token (--auth_token_file) and, "
                        "with mutual TLS, a certificate it trusts (--tls_cert, --tls_key)\n", addr);
    psc_rpc_op_clear(op);
    return code;
}

static int job_status(const cli_t *c, Psc__JobStatusReply **out)
{
    Psc__JobStatusRequest req = PSC__JOB_STATUS_REQUEST__INIT;
    uint8_t buf[8];
    psc_rpc_op_t op;
    int rc = call(c, c->chief, PSC_M_WORKER_JOB_STATUS, buf, psc__job_status_request__pack(&req, buf), 0, &op);
    if (rc) return rc;
    *out = psc__job_status_reply__unpack(NULL, op.reply_len, op.reply);
    psc_rpc_op_clear(&op);
    if (!*out) {
        fprintf(stderr, "psctl: the job status from %s does not parse\n", c->chief);
        return 1;
    }
    return 0;
}

static int cancel_job(const cli_t *c)
{
    Psc__CancelRequest req = PSC__CANCEL_REQUEST__INIT;
    uint8_t buf[8];
    psc_rpc_op_t op;
    int rc = call(c, c->chief, PSC_M_WORKER_CANCEL, buf, psc__cancel_request__pack(&req, buf), 0, &op);
    if (rc) return rc;
    Psc__CancelReply *r = psc__cancel_reply__unpack(NULL, op.reply_len, op.reply);
    psc_rpc_op_clear(&op);
    if (r && r->job_id[0])
        fprintf(stderr, "psctl: cancelling job %s\n", r->job_id);
    else
        fprintf(stderr, "psctl: no job is running\n");
    if (r) psc__cancel_reply__free_unpacked(r, NULL);
    return 0;
}

static void fmt_secs(char *buf, size_t len, double s)
{
    if (!(s >= 0) || s > 359999) {
        snprintf(buf, len, "--:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

/* "loss L accuracy A", or "loss - accuracy -" before the first progress period. */
static void fmt_loss(char *buf, size_t len, const Psc__JobStatusReply *s)
{
    if (s->has_loss)
        snprintf(buf, len, "loss %.4f accuracy %.4f", s->loss, s->accuracy);
    else
        snprintf(buf, len, "loss - accuracy -");
}

/* The job's checkpoint failures, when there were any (stderr). */
static void show_checkpoint_failures(const Psc__JobStatusReply *s)
{
    if (s->checkpoint_failures)
        fprintf(stderr, "psctl: job %s: %u checkpoint%s committed, %u failed; the last failure: %s\n", s->job_id,
                s->checkpoints, s->checkpoints == 1 ? "" : "s", s->checkpoint_failures, s->checkpoint_error);
}

/* One progress line: a bar on a terminal, plain text otherwise. */
static void show_progress(const Psc__JobStatusReply *s, int tty)
{
    double frac = s->max_steps > 0 ? (double)s->step / (double)s->max_steps : 0;
    double rate = s->elapsed_secs > 0 ? (double)s->step / s->elapsed_secs : 0;
    char eta[32], el[32];
    fmt_secs(eta, sizeof eta, rate > 0 ? (double)(s->max_steps - s->step) / rate : -1);
    fmt_secs(el, sizeof el, s->elapsed_secs);
    char line[256], la[64];
    fmt_loss(la, sizeof la, s);
    snprintf(line, sizeof line, "epoch %d/%d step %lld/%lld global_step %lld %s examples/s %.0f elapsed %s ETA %s",
             s->epoch, s->epochs, (long long)s->step, (long long)s->max_steps, (long long)s->global_step, la,
             s->examples_per_sec, el, eta);
    if (tty) {
        char bar[21];
        int fill = (int)(frac * 20 + 0.5);
        for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
        bar[20] = '\0';
        fprintf(stderr, "\r[%s] %3.0f%% %s \033[K", bar, frac * 100, line);
    } else {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
}

/* Follows the job until it ends; Ctrl-C cancels it. Prints the evaluation. */
static int follow(const cli_t *c)
{
    int tty = isatty(STDERR_FILENO);
    double last_line = 0;
    int cancel_sent = 0, unreachable = 0, seen = 0;
    for (;;) {
        if (interrupted && !cancel_sent) {
            if (tty) fprintf(stderr, "\n");
            cancel_job(c);
            cancel_sent = 1;
        }
        Psc__JobStatusReply *s;
        int rc = job_status(c, &s);
        if (rc) { /* once followed, the chief may be restarting: a few tries before giving up */
            if (!seen || ++unreachable >= 10) return rc;
            sleep(1);
            continue;
        }
        unreachable = 0;
        seen = 1;
        int done = strcmp(s->state, "running") != 0;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double t = (double)now.tv_sec + now.tv_nsec * 1e-9;
        if (!done && strcmp(s->phase, "starting") != 0 && (tty || t - last_line >= 5)) {
            show_progress(s, tty);
            last_line = t;
        }
        if (done) {
            if (tty && last_line > 0) fprintf(stderr, "\n");
            int code = 0;
            show_checkpoint_failures(s);
            if (!strcmp(s->state, "succeeded")) {
                fprintf(stderr, "psctl: job %s succeeded: %lld steps, global_step %lld, %.1f s\n", s->job_id,
                        (long long)s->step, (long long)s->global_step, s->elapsed_secs);
                if (s->evaluated) printf("test accuracy: %.4f\ntest loss: %.4f\n", s->test_accuracy, s->test_loss);
            } else if (!strcmp(s->state, "cancelled")) {
                fprintf(stderr, "psctl: job %s cancelled at step %lld\n", s->job_id, (long long)s->step);
                code = interrupted ? 130 : 1;
            } else if (!strcmp(s->state, "idle")) {
                fprintf(stderr, "psctl: the chief %s has no job\n", c->chief);
                code = 1;
            } else {
                fprintf(stderr, "psctl: job %s failed: %s\n", s->job_id, s->error);
                if (s->evaluated) printf("test accuracy: %.4f\ntest loss: %.4f\n", s->test_accuracy, s->test_loss);
                code = 1;
            }
            psc__job_status_reply__free_unpacked(s, NULL);
            return code;
        }
        psc__job_status_reply__free_unpacked(s, NULL);
        struct timespec ts = {0, 500 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = psc_xmalloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) buf = psc_xrealloc(buf, cap *= 2);
    }
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static int cmd_train(const cli_t *c, const char *path)
{
    char *json = read_file(path);
    if (!json) {
        fprintf(stderr, "psctl: cannot read job spec %s\n", path);
        return PSC_EXIT_USAGE;
    }
    Psc__SubmitRequest req = PSC__SUBMIT_REQUEST__INIT;
    req.spec_json = json;
    size_t len = psc__submit_request__get_packed_size(&req);
    uint8_t *buf = psc_xmalloc(len + 1);
    psc__submit_request__pack(&req, buf);
    psc_rpc_op_t op;
    int rc = call(c, c->chief, PSC_M_WORKER_SUBMIT, buf, len, 0, &op);
    free(buf);
    free(json);
    if (rc) return rc;
    Psc__SubmitReply *r = psc__submit_reply__unpack(NULL, op.reply_len, op.reply);
    psc_rpc_op_clear(&op);
    if (!r) return 1;
    fprintf(stderr, "psctl: job %s submitted to %s\n", r->job_id, c->chief);
    psc__submit_reply__free_unpacked(r, NULL);
    if (c->detach) {
        fprintf(stderr, "psctl: detached; `psctl attach` follows it, `psctl stop` cancels it\n");
        return 0;
    }
    return follow(c);
}

static int cmd_stop(const cli_t *c)
{
    int rc = cancel_job(c);
    if (rc) return rc;
    for (int i = 0; i < 600; i++) { /* wait until the job ended */
        Psc__JobStatusReply *s;
        if ((rc = job_status(c, &s))) return rc;
        int running = !strcmp(s->state, "running");
        if (!running) fprintf(stderr, "psctl: job %s is %s\n", s->job_id[0] ? s->job_id : "-", s->state);
        psc__job_status_reply__free_unpacked(s, NULL);
        if (!running) return 0;
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "psctl: the job did not stop within 120 s\n");
    return 1;
}

static int cmd_checkpoint(const cli_t *c)
{
    Psc__CheckpointRequest req = PSC__CHECKPOINT_REQUEST__INIT;
    req.reason = (char *)(c->reason ? c->reason : "psctl");
    size_t len = psc__checkpoint_request__get_packed_size(&req);
    uint8_t *buf = psc_xmalloc(len + 1);
    psc__checkpoint_request__pack(&req, buf);
    psc_rpc_op_t op;
    int rc = call(c, c->chief, PSC_M_WORKER_CHECKPOINT, buf, len, c->timeout_set ? c->timeout_ms : 300000, &op);
    free(buf);
    if (rc) return rc;
    Psc__CheckpointReply *r = psc__checkpoint_reply__unpack(NULL, op.reply_len, op.reply);
    psc_rpc_op_clear(&op);
    if (!r) return 1;
    printf("checkpoint %llu committed at step %lld\n", (unsigned long long)r->id, (long long)r->step);
    psc__checkpoint_reply__free_unpacked(r, NULL);
    return 0;
}

static int cmd_eval(const cli_t *c)
{
    Psc__EvalRequest req = PSC__EVAL_REQUEST__INIT;
    uint8_t buf[8];
    psc_rpc_op_t op;
    int rc = call(c, c->chief, PSC_M_WORKER_EVAL, buf, psc__eval_request__pack(&req, buf),
                  c->timeout_set ? c->timeout_ms : 300000, &op);
    if (rc) return rc;
    Psc__EvalReply *r = psc__eval_reply__unpack(NULL, op.reply_len, op.reply);
    psc_rpc_op_clear(&op);
    if (!r) return 1;
    fprintf(stderr, "psctl: evaluated the current weights on %lld test examples at global_step %lld\n",
            (long long)r->examples, (long long)r->global_step);
    printf("test accuracy: %.4f\ntest loss: %.4f\n", r->test_accuracy, r->test_loss);
    psc__eval_reply__free_unpacked(r, NULL);
    return 0;
}

/* The more telling of two exit codes: 77 over 69 over 1 over 0. */
static int worse(int a, int b)
{
    static const int order[] = {0, 1, PSC_EXIT_UNAVAILABLE, PSC_EXIT_NOPERM};
    int ra = 0, rb = 0;
    for (int i = 0; i < (int)PSC_ARRAY_LEN(order); i++) {
        if (order[i] == a) ra = i;
        if (order[i] == b) rb = i;
    }
    return rb > ra ? b : a;
}

static int cmd_status(const cli_t *c)
{
    if (!c->have_cluster) {
        fprintf(stderr, "psctl: status needs the cluster (--cluster or TF_CONFIG)\n");
        return PSC_EXIT_USAGE;
    }
    int bad = 0;
    printf("cluster:\n");
    for (int t = 0; t < PSC_JOB__COUNT; t++)
        for (int i = 0; i < c->cluster.n[t]; i++) {
            const char *addr = c->cluster.addr[t][i];
            if (!addr) continue;
            psc_rpc_channel_t *ch = psc_rpc_channel_create(addr);
            int ok = psc_rpc_health_check(ch, PSC_MIN(c->timeout_ms, 3000));
            psc_rpc_channel_destroy(ch);
            bad += !ok;
            printf("  %-9s %d  %-22s %s\n", psc_job_type_name((enum psc_job_type)t), i, addr,
                   ok ? "SERVING" : "UNREACHABLE");
        }
    /* the exit code: 77 when a member refused psctl's credentials, else 69
     * when one is unreachable, else 1 when one refused, else 0 */
    int worst = bad ? PSC_EXIT_UNAVAILABLE : 0;
    Psc__JobStatusReply *s;
    int rc = job_status(c, &s);
    if (rc == 0) {
        printf("job: %s %s", s->job_id[0] ? s->job_id : "-", s->state);
        if (strcmp(s->state, "idle") != 0) {
            char la[64];
            fmt_loss(la, sizeof la, s);
            printf(" (epoch %d/%d, step %lld/%lld, global_step %lld, %s)", s->epoch, s->epochs, (long long)s->step,
                   (long long)s->max_steps, (long long)s->global_step, la);
        }
        if (s->evaluated) printf(" test accuracy %.4f", s->test_accuracy);
        if (s->error[0]) printf(": %s", s->error);
        printf("\n");
        if (s->checkpoints || s->checkpoint_failures) {
            printf("checkpoints: %u committed, %u failed", s->checkpoints, s->checkpoint_failures);
            if (s->checkpoint_failures) printf(" (last failure: %s)", s->checkpoint_error);
            printf("\n");
        }
        psc__job_status_reply__free_unpacked(s, NULL);
    } else if (rc == 1) { /* a refusal: in-cluster mode answers FAILED_PRECONDITION (see above) */
        printf("job: - (the chief %s has no standalone job; see above)\n", c->chief ? c->chief : "-");
    } else {
        printf("job: unknown (the chief %s did not answer; see above)\n", c->chief ? c->chief : "-");
        worst = worse(worst, rc);
    }
    for (int i = 0; i < c->cluster.n[PSC_JOB_PS]; i++) {
        const char *addr = c->cluster.addr[PSC_JOB_PS][i];
        Psc__StatusRequest req = PSC__STATUS_REQUEST__INIT;
        uint8_t buf[8];
        psc_rpc_op_t op;
        if (!addr) continue;
        if ((rc = call(c, addr, PSC_M_STATUS, buf, psc__status_request__pack(&req, buf), 0, &op))) {
            printf("ps %d %s: unknown (see above)\n", i, addr);
            worst = worse(worst, rc);
            continue;
        }
        Psc__StatusReply *r = psc__status_reply__unpack(NULL, op.reply_len, op.reply);
        psc_rpc_op_clear(&op);
        if (!r) {
            printf("ps %d %s: the status does not parse\n", i, addr);
            worst = worse(worst, 1);
            continue;
        }
        printf("ps %d %s: job %s%s%s", i, addr, r->job_id[0] ? r->job_id : "-", r->ready ? " ready" : "",
               r->sync ? " sync" : "");
        if (r->has_global_step) printf(" global_step %lld", (long long)r->global_step);
        printf(", %zu variables, checkpoints %s\n", r->n_vars, r->checkpoints ? "on" : "off");
        for (size_t v = 0; v < r->n_vars; v++) {
            char shape[128] = "";
            size_t at = 0;
            for (size_t d = 0; d < r->vars[v]->n_shape && at < sizeof shape; d++)
                at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%lld", d ? ", " : "",
                                       (long long)r->vars[v]->shape[d]);
            printf("    %-32s [%s] %llu bytes\n", r->vars[v]->name, shape, (unsigned long long)r->vars[v]->bytes);
        }
        psc__status_reply__free_unpacked(r, NULL);
    }
    return worst;
}

static int cmd_export(const cli_t *c)
{
    if (!c->have_cluster) {
        fprintf(stderr, "psctl: export needs the cluster (--cluster or TF_CONFIG)\n");
        return PSC_EXIT_USAGE;
    }
    if (!c->format || strcmp(c->format, "safetensors") != 0 || !c->out) {
        fprintf(stderr, "psctl: export needs --format safetensors -o FILE\n");
        return PSC_EXIT_USAGE;
    }
    char err[1024];
    psc_export_info_t info;
    if (psc_export_safetensors(&c->cluster, c->out, c->timeout_ms, &info, err, sizeof err)) {
        fprintf(stderr, "psctl: export failed: %s\n", err);
        return 1;
    }
    printf("exported %d tensors (%llu bytes) of job %s at global_step %lld to %s\n", info.tensors,
           (unsigned long long)info.bytes, info.job_id, (long long)info.global_step, c->out);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"chief", required_argument, NULL, OPT_CHIEF},
        {"cluster", required_argument, NULL, OPT_CLUSTER},
        {"reason", required_argument, NULL, OPT_REASON},
        {"timeout_secs", required_argument, NULL, OPT_TIMEOUT},
        {"detach", no_argument, NULL, OPT_DETACH},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"out", required_argument, NULL, OPT_OUT},
        {"log_level", required_argument, NULL, OPT_LOG_LEVEL},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        PSC_SECURITY_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    cli_t c = {.timeout_ms = 30000};
    const char *cluster_flag = NULL;
    psc_security_flags_t secf = {0};
    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
        switch (ch) {
        case OPT_CHIEF: c.chief = optarg; break;
        case OPT_CLUSTER: cluster_flag = optarg; break;
        case OPT_REASON: c.reason = optarg; break;
        case OPT_TIMEOUT: {
            char *end;
            double t = strtod(optarg, &end);
            if (*end || !(t > 0 && t <= 86400)) {
                fprintf(stderr, "psctl: --timeout_secs: expected seconds in (0, 86400], got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            c.timeout_ms = (int)(t * 1000);
            c.timeout_set = 1;
            break;
        }
        case OPT_DETACH: c.detach = 1; break;
        case OPT_FORMAT: c.format = optarg; break;
        case 'o':
        case OPT_OUT: c.out = optarg; break;
        case OPT_LOG_LEVEL: {
            enum psc_log_level lv;
            if (psc_log_parse_level(optarg, &lv)) {
                fprintf(stderr, "psctl: --log_level: expected debug|info|warn|error, got \"%s\"\n", optarg);
                return PSC_EXIT_USAGE;
            }
            psc_log_set_level(lv);
            break;
        }
        case OPT_HELP: usage(stdout); return 0;
        case OPT_VERSION: printf("psctl (psc) %s\n", PSC_VERSION); return 0;
        default:
            if (psc_security_flag(ch, optarg, &secf)) break;
            fprintf(stderr, "psctl: unknown or incomplete option \"%s\" (see --help)\n", argv[optind - 1]);
            return PSC_EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "psctl: expected a command: train, attach, status, stop, checkpoint, export, eval (see --help)\n");
        return PSC_EXIT_USAGE;
    }
    const char *cmd = argv[optind++];
    const char *arg = optind < argc ? argv[optind++] : NULL;
    int want_arg = !strcmp(cmd, "train");
    if ((want_arg && !arg) || (!want_arg && arg) || optind < argc) {
        fprintf(stderr, "psctl: %s %s\n", cmd, want_arg ? "needs JOB.json" : "takes no argument (see --help)");
        return PSC_EXIT_USAGE;
    }
    static const char *const known[] = {"train", "attach", "status", "stop", "checkpoint", "export", "eval"};
    int ok = 0;
    for (size_t i = 0; i < PSC_ARRAY_LEN(known); i++) ok |= !strcmp(cmd, known[i]);
    if (!ok) {
        fprintf(stderr, "psctl: unknown command \"%s\" (see --help)\n", cmd);
        return PSC_EXIT_USAGE;
    }
    char err[1024];
    if (psc_security_apply(&secf, PSC_SEC_CLIENT, err, sizeof err)) {
        fprintf(stderr, "psctl: %s\n", err);
        return PSC_EXIT_CONFIG;
    }
    psc_rpc_hold_for_process(); /* exit without gRPC's full shutdown (rpc.h) */
    psc_tf_config_t cfg;
    psc_task_flags_t flags = {.cluster = cluster_flag, .task_index = -1, .port = -1};
    if (cluster_flag || getenv("TF_CONFIG")) {
        if (psc_config_resolve(getenv("TF_CONFIG"), &flags, 0, &cfg, err, sizeof err)) {
            fprintf(stderr, "psctl: %s\n", err);
            return PSC_EXIT_CONFIG;
        }
        c.cluster = cfg.cluster;
        c.have_cluster = 1;
        if (!c.chief) c.chief = psc_cluster_addr(&c.cluster, psc_cluster_chief(&c.cluster));
    }
    if (!c.chief && strcmp(cmd, "status") != 0 && strcmp(cmd, "export") != 0) {
        fprintf(stderr, "psctl: %s needs --chief HOST:PORT or the cluster (--cluster, TF_CONFIG)\n", cmd);
        return PSC_EXIT_USAGE;
    }
    psc_tune_malloc();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    int rc;
    if (!strcmp(cmd, "train"))
        rc = cmd_train(&c, arg);
    else if (!strcmp(cmd, "attach"))
        rc = follow(&c);
    else if (!strcmp(cmd, "status"))
        rc = cmd_status(&c);
    else if (!strcmp(cmd, "stop"))
        rc = cmd_stop(&c);
    else if (!strcmp(cmd, "checkpoint"))
        rc = cmd_checkpoint(&c);
    else if (!strcmp(cmd, "eval"))
        rc = cmd_eval(&c);
    else
        rc = cmd_export(&c);
    if (c.have_cluster) psc_tf_config_deinit(&cfg);
    return rc;
}
