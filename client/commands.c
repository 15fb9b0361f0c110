/* commands.c — psctl's commands (predict: predict_cmd.c) and their table (see commands.h).
 *
 * Each command talks to the chief (c->chief) or to every member of the
 * cluster with one blocking call at a time, prints what it got and returns
 * psctl's exit status; no call is retried except the job status while a
 * followed job's chief restarts.
 */
#include "commands.h"

#include "export.h"
#include "predict_cmd.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "wire.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The largest job spec psctl submits (the chief's job_spec.c reads as much). */
#define PSCTL_SPEC_MAX ((size_t)16 << 20)

volatile sig_atomic_t psctl_interrupted;

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
static int call(const psctl_cli_t *c, const char *addr, const char *method, const void *req, size_t len, int timeout_ms,
                psc_rpc_op_t *op)
{
    psc_rpc_channel_t *ch = psc_rpc_channel_create(addr);
    int rc = psc_rpc_call(ch, method, req, len, timeout_ms > 0 ? timeout_ms : c->timeout_ms, 0, op);
    psc_rpc_channel_destroy(ch);
    if (rc == 0) return 0;
    const char *m = strrchr(method, '/');
    fprintf(stderr, "psctl: %s on %s failed: %s: %s\n", m ? m + 1 : method, addr, psc_rpc_code_name(op->code), op->msg);
    int code = exit_code_of(op->code);
    if (code == PSC_EXIT_NOPERM)
        fprintf(stderr,
                "psctl: %s refused psctl's credentials: give the cluster's token (--auth_token_file) and, "
                "with mutual TLS, a certificate it trusts (--tls_cert, --tls_key)\n",
                addr);
    psc_rpc_op_clear(op);
    return code;
}

static int job_status(const psctl_cli_t *c, Psc__JobStatusReply **out)
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

static int cancel_job(const psctl_cli_t *c)
{
    Psc__CancelRequest req = PSC__CANCEL_REQUEST__INIT;
    uint8_t buf[8];
    psc_rpc_op_t op;
    int rc = call(c, c->chief, PSC_M_WORKER_CANCEL, buf, psc__cancel_request__pack(&req, buf), 0, &op);
    if (rc) return rc;
    Psc__CancelReply *r = psc__cancel_reply__unpack(NULL, op.reply_len, op.reply);
    psc_rpc_op_clear(&op);
    if (r && r->job_id[0] && r->finishing)
        fprintf(stderr,
                "psctl: finishing job %s: a followed directory's job ends with its final checkpoint and evaluation "
                "(stop it again to cancel it)\n",
                r->job_id);
    else if (r && r->job_id[0])
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

/* "loss L accuracy A" ("auc A" for a recommendation model), or "loss -
 * accuracy -" before the first progress period. */
static void fmt_loss(char *buf, size_t len, const Psc__JobStatusReply *s)
{
    const char *metric = s->has_auc ? "auc" : "accuracy";
    if (s->has_loss)
        snprintf(buf, len, "loss %.4f %s %.4f", s->loss, metric, s->has_auc ? s->auc : s->accuracy);
    else
        snprintf(buf, len, "loss - %s -", metric);
}

/* The evaluation's lines on stdout: "test accuracy: A" and "test loss: L",
 * or for a recommendation model "test AUC: A" and "test log loss: L". */
static void print_test(int has_auc, double auc, double accuracy, double loss)
{
    if (has_auc)
        printf("test AUC: %.4f\ntest log loss: %.4f\n", auc, loss);
    else
        printf("test accuracy: %.4f\ntest loss: %.4f\n", accuracy, loss);
}

/* The job's checkpoint failures, when there were any (stderr). */
static void show_checkpoint_failures(const Psc__JobStatusReply *s)
{
    if (s->evaluator_error[0])
        fprintf(stderr, "psctl: job %s: the evaluator failed (training went on): %s\n", s->job_id, s->evaluator_error);
    if (s->checkpoint_failures)
        fprintf(stderr, "psctl: job %s: %u checkpoint%s committed, %u failed; the last failure: %s\n", s->job_id,
                s->checkpoints, s->checkpoints == 1 ? "" : "s", s->checkpoint_failures, s->checkpoint_error);
}

/* One progress line: a bar on a terminal, plain text otherwise. */
static void show_progress(const Psc__JobStatusReply *s, int tty)
{
    double frac = s->max_steps > 0 ? (double)s->step / (double)s->max_steps : 0;
    double rate = s->elapsed_secs > 0 ? (double)s->step / s->elapsed_secs : 0;
    char eta[32], el[32], of[32] = "";
    /* streamed data (recommendation models) have no known length: no total, no ETA */
    fmt_secs(eta, sizeof eta, rate > 0 && s->max_steps > 0 ? (double)(s->max_steps - s->step) / rate : -1);
    fmt_secs(el, sizeof el, s->elapsed_secs);
    if (s->max_steps > 0) snprintf(of, sizeof of, "/%lld", (long long)s->max_steps);
    char line[256], la[64];
    fmt_loss(la, sizeof la, s);
    snprintf(line, sizeof line, "epoch %d/%d step %lld%s global_step %lld %s examples/s %.0f elapsed %s ETA %s",
             s->epoch, s->epochs, (long long)s->step, of, (long long)s->global_step, la, s->examples_per_sec, el, eta);
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
static int follow(const psctl_cli_t *c)
{
    int tty = isatty(STDERR_FILENO);
    double last_line = 0;
    int cancel_sent = 0, unreachable = 0, seen = 0;
    for (;;) {
        if (psctl_interrupted && !cancel_sent) {
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
                if (s->evaluated) print_test(s->has_auc, s->test_auc, s->test_accuracy, s->test_loss);
            } else if (!strcmp(s->state, "cancelled")) {
                fprintf(stderr, "psctl: job %s cancelled at step %lld\n", s->job_id, (long long)s->step);
                code = psctl_interrupted ? 130 : 1;
            } else if (!strcmp(s->state, "idle")) {
                fprintf(stderr, "psctl: the chief %s has no job\n", c->chief);
                code = 1;
            } else {
                fprintf(stderr, "psctl: job %s failed after %lld steps of this replica, global_step %lld\n", s->job_id,
                        (long long)s->step, (long long)s->global_step);
                fprintf(stderr, "training failed: %s\n", s->error);
                if (s->evaluated) print_test(s->has_auc, s->test_auc, s->test_accuracy, s->test_loss);
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

/* train --warm_start: the spec's "warm_start" with from (and checkpoint)
 * set, its other keys kept. The new text, or NULL (printed why). */
static char *with_warm_start(const psctl_cli_t *c, const char *path, char *json)
{
    json_error_t je;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &je);
    free(json);
    if (!json_is_object(root)) {
        fprintf(stderr, "psctl: job spec %s: not a JSON object (line %d: %s)\n", path, je.line, je.text);
        json_decref(root);
        return NULL;
    }
    json_t *w = json_object_get(root, "warm_start");
    if (!json_is_object(w)) json_object_set_new(root, "warm_start", w = json_object());
    json_object_set_new(w, "from", json_string(c->warm_start));
    if (c->checkpoint) json_object_set_new(w, "checkpoint", json_integer((json_int_t)c->checkpoint));
    char *out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return out;
}

static int cmd_train(const psctl_cli_t *c, const char *path)
{
    char *json = psc_read_file(path, PSCTL_SPEC_MAX, NULL);
    if (!json) {
        fprintf(stderr, "psctl: cannot read job spec %s\n", path);
        return PSC_EXIT_USAGE;
    }
    if (c->warm_start && !(json = with_warm_start(c, path, json))) return PSC_EXIT_USAGE;
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

static int cmd_stop(const psctl_cli_t *c, const char *arg)
{
    (void)arg;
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

static int cmd_checkpoint(const psctl_cli_t *c, const char *arg)
{
    (void)arg;
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

static int cmd_eval(const psctl_cli_t *c, const char *arg)
{
    (void)arg;
    Psc__EvalRequest req = PSC__EVAL_REQUEST__INIT;
    req.checkpoint = c->checkpoint;
    uint8_t buf[16];
    psc_rpc_op_t op;
    int rc = call(c, c->chief, PSC_M_WORKER_EVAL, buf, psc__eval_request__pack(&req, buf),
                  c->timeout_set ? c->timeout_ms : 300000, &op);
    if (rc) return rc;
    Psc__EvalReply *r = psc__eval_reply__unpack(NULL, op.reply_len, op.reply);
    psc_rpc_op_clear(&op);
    if (!r) return 1;
    if (c->checkpoint)
        fprintf(stderr, "psctl: evaluated checkpoint %llu (global_step %lld) on %lld test examples\n",
                (unsigned long long)c->checkpoint, (long long)r->global_step, (long long)r->examples);
    else
        fprintf(stderr, "psctl: evaluated the current weights on %lld test examples at global_step %lld\n",
                (long long)r->examples, (long long)r->global_step);
    print_test(r->has_auc, r->test_auc, r->test_accuracy, r->test_loss);
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

static int cmd_status(const psctl_cli_t *c, const char *arg)
{
    (void)arg;
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
            char of[32] = "";
            if (s->max_steps > 0) snprintf(of, sizeof of, "/%lld", (long long)s->max_steps);
            printf(" (epoch %d/%d, step %lld%s, global_step %lld, %s)", s->epoch, s->epochs, (long long)s->step, of,
                   (long long)s->global_step, la);
        }
        if (s->evaluated && s->has_auc) printf(" test AUC %.4f", s->test_auc);
        if (s->evaluated && !s->has_auc) printf(" test accuracy %.4f", s->test_accuracy);
        if (s->error[0]) printf(": %s", s->error);
        printf("\n");
        if (s->evaluator_error[0]) printf("evaluator: failed (training went on): %s\n", s->evaluator_error);
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
        for (size_t t = 0; t < r->n_tables; t++) {
            const Psc__TableStatus *ts = r->tables[t];
            printf("    table %-26s part %u of %u, %lld x %u: %llu rows touched (%.1f MiB), %llu rows pulled "
                   "(%.0f/s), %llu pushed (%.0f/s)\n",
                   ts->name, ts->part, ts->num_parts, (long long)ts->rows, ts->dim,
                   (unsigned long long)ts->rows_touched, (double)ts->bytes / 1048576.0,
                   (unsigned long long)ts->rows_pulled, ts->rows_pulled_per_sec, (unsigned long long)ts->rows_pushed,
                   ts->rows_pushed_per_sec);
            if (ts->ttl_steps > 0 || ts->ttl_secs > 0 || ts->max_rows > 0)
                printf("      eviction: %llu rows evicted (%.0f/s), longest pause %llu us\n",
                       (unsigned long long)ts->rows_evicted, ts->rows_evicted_per_sec,
                       (unsigned long long)ts->evict_pause_max_us);
            if (ts->min_count > 1)
                printf(
                    "      admission (min_count %u): %llu ids waiting, %llu gradient rows dropped, filter %.1f MiB\n",
                    ts->min_count, (unsigned long long)ts->waiting, (unsigned long long)ts->rows_dropped,
                    (double)ts->filter_bytes / 1048576.0);
        }
        psc__status_reply__free_unpacked(r, NULL);
    }
    return worst;
}

static int cmd_export(const psctl_cli_t *c, const char *arg)
{
    (void)arg;
    if (!c->format || strcmp(c->format, "safetensors") != 0 || !c->out) {
        fprintf(stderr, "psctl: export needs --format safetensors -o FILE\n");
        return PSC_EXIT_USAGE;
    }
    char err[1024];
    psc_export_info_t info;
    if (psc_export_safetensors(&c->cluster, c->out, c->checkpoint, c->timeout_ms, &info, err, sizeof err)) {
        fprintf(stderr, "psctl: export failed: %s\n", err);
        return 1;
    }
    char which[48] = "";
    if (c->checkpoint) snprintf(which, sizeof which, " checkpoint %llu", (unsigned long long)c->checkpoint);
    printf("exported %d tensors (%llu bytes) of job %s%s at global_step %lld to %s\n", info.tensors,
           (unsigned long long)info.bytes, info.job_id, which, (long long)info.global_step, c->out);
    return 0;
}

static int cmd_attach(const psctl_cli_t *c, const char *arg)
{
    (void)arg;
    return follow(c);
}

/* The order is --help's and the "expected a command" message's. */
const psctl_command_t psctl_commands[] = {
    {"train", cmd_train, 1, 0, "JOB.json"},
    {"attach", cmd_attach, 0, 0, NULL},
    {"status", cmd_status, 0, 1, NULL},
    {"stop", cmd_stop, 0, 0, NULL},
    {"checkpoint", cmd_checkpoint, 0, 0, NULL},
    {"export", cmd_export, 0, 1, NULL},
    {"eval", cmd_eval, 0, 0, NULL},
    {"predict", psctl_cmd_predict, 1, 1, "FILE"},
    {NULL, NULL, 0, 0, NULL},
};

const psctl_command_t *psctl_command_find(const char *name)
{
    for (const psctl_command_t *cmd = psctl_commands; cmd->name; cmd++)
        if (!strcmp(cmd->name, name)) return cmd;
    return NULL;
}
