/* predict_cmd.c — `psctl predict FILE -o OUT [--checkpoint ID]` (see predict_cmd.h).
 *
 * Every training replica scores its shard of FILE (examples r, r + R, ...:
 * psc.Worker/Predict, one session each, predict_service.h); psctl asks the
 * shards for their pages, all at once, and writes the lines in input order:
 * example g is the next unwritten one of shard g mod R. A shard's page is
 * asked for only when its last one is written, so memory stays at one page a
 * shard, and the workers score their next page while psctl writes.
 *
 * The merge checks the shards against each other: the file ends where the
 * shard whose turn it is has no more examples, and every shard must then be
 * done. Anything else (workers that read different files) fails the command.
 */
#include "predict_cmd.h"

#include "predict_out.h"
#include "psc.h"
#include "psc.pb-c.h"
#include "rpc.h"
#include "wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PSCTL_PREDICT_PAGE 8192 /* examples a page asks for (the worker may send fewer) */

typedef struct shard {
    const char *addr;
    psc_rpc_channel_t *ch;
    uint64_t session;
    Psc__PredictReply *page; /* the current page (NULL before the first) */
    size_t pos;              /* its next example */
    int done;                /* the worker said this shard has no more examples */
} shard_t;

typedef struct predict_run {
    const psctl_cli_t *c;
    const char *file;
    int n;
    shard_t *shards;
    psc_rpc_op_t *ops;
    int timeout_ms;
    char job_id[17];
    int64_t global_step;
    int sigmoid, outputs;
    int failed_code; /* psctl's exit code of the first failure */
} predict_run_t;

static int exit_code_of(int code)
{
    int e = psc_rpc_code_errno(code);
    if (e == PSC_EPERM) return PSC_EXIT_NOPERM;
    return e == PSC_EUNAVAILABLE || e == PSC_ETIMEOUT ? PSC_EXIT_UNAVAILABLE : 1;
}

/* A page for every shard in want[] (the open call when its session is 0),
 * all at once; each reply checked against the first. 0 or psctl's exit code
 * (printed). */
static int fetch(predict_run_t *r, const int *want)
{
    int k = 0, rc = 0;
    int *which = psc_xcalloc((size_t)r->n, sizeof *which);
    uint8_t **bufs = psc_xcalloc((size_t)r->n, sizeof *bufs);
    for (int s = 0; s < r->n; s++) {
        if (!want[s]) continue;
        shard_t *sh = &r->shards[s];
        Psc__PredictRequest req = PSC__PREDICT_REQUEST__INIT;
        req.session = sh->session;
        req.file = (char *)r->file;
        req.checkpoint = r->c->checkpoint;
        req.shard = (uint32_t)s;
        req.num_shards = (uint32_t)r->n;
        req.max_examples = PSCTL_PREDICT_PAGE;
        size_t len = psc__predict_request__get_packed_size(&req);
        bufs[k] = psc_xmalloc(len + 1);
        psc__predict_request__pack(&req, bufs[k]);
        r->ops[k] = (psc_rpc_op_t){.ch = sh->ch, .method = PSC_M_WORKER_PREDICT, .hdr = bufs[k], .hdr_len = len};
        which[k++] = s;
    }
    psc_rpc_run(r->ops, (size_t)k, (size_t)k, r->timeout_ms);
    for (int i = 0; i < k; i++) {
        shard_t *sh = &r->shards[which[i]];
        psc_rpc_op_t *op = &r->ops[i];
        Psc__PredictReply *p = op->code == PSC_RPC_OK ? psc__predict_reply__unpack(NULL, op->reply_len, op->reply)
                                                      : NULL;
        if (p) sh->session = p->done ? 0 : p->session; /* a done session is closed on the worker */
        if (rc == 0 && op->code != PSC_RPC_OK) {
            fprintf(stderr, "psctl: Predict on %s (shard %d of %d) failed: %s: %s\n", sh->addr, which[i], r->n,
                    psc_rpc_code_name(op->code), op->msg);
            rc = exit_code_of(op->code);
        } else if (rc == 0 && !p) {
            fprintf(stderr, "psctl: the Predict reply of %s does not parse\n", sh->addr);
            rc = 1;
        } else if (rc == 0 && (p->outputs < 1 || p->n_labels * p->outputs != p->n_probs)) {
            fprintf(stderr, "psctl: the Predict reply of %s holds %zu labels and %zu probabilities\n", sh->addr,
                    p->n_labels, p->n_probs);
            rc = 1;
        } else if (rc == 0 && r->job_id[0] && (strcmp(p->job_id, r->job_id) || (int)p->outputs != r->outputs)) {
            fprintf(stderr,
                    "psctl: %s scores with job %s, %s with job %s (%u and %d outputs): the replicas ran different "
                    "jobs; train again (psctl train) so that all hold one\n",
                    sh->addr, p->job_id, r->shards[0].addr, r->job_id, p->outputs, r->outputs);
            rc = 1;
        } else if (rc == 0 && !r->job_id[0]) {
            snprintf(r->job_id, sizeof r->job_id, "%s", p->job_id);
            r->global_step = p->global_step;
            r->sigmoid = p->sigmoid;
            r->outputs = (int)p->outputs;
        }
        if (rc == 0) {
            if (sh->page) psc__predict_reply__free_unpacked(sh->page, NULL);
            sh->page = p;
            sh->pos = 0;
            sh->done = p->done;
        } else if (p) {
            psc__predict_reply__free_unpacked(p, NULL);
        }
        psc_rpc_op_clear(op);
        free(bufs[i]);
    }
    free(which);
    free(bufs);
    return rc;
}

/* Best effort: the workers drop the sessions still open (a failed run). */
static void close_sessions(predict_run_t *r)
{
    int k = 0;
    uint8_t bufs[64][32];
    for (int s = 0; s < r->n && k < 64; s++) {
        if (!r->shards[s].session) continue;
        Psc__PredictRequest req = PSC__PREDICT_REQUEST__INIT;
        req.session = r->shards[s].session;
        req.close = 1;
        req.file = (char *)"";
        size_t len = psc__predict_request__pack(&req, bufs[k]);
        r->ops[k] = (psc_rpc_op_t){
            .ch = r->shards[s].ch, .method = PSC_M_WORKER_PREDICT, .hdr = bufs[k], .hdr_len = len};
        k++;
    }
    psc_rpc_run(r->ops, (size_t)k, (size_t)k, 5000);
    for (int i = 0; i < k; i++) psc_rpc_op_clear(&r->ops[i]);
}

static int left(const shard_t *sh) { return sh->page && sh->pos < sh->page->n_labels; }

/* Writes every example in input order; *examples the lines. 0 or psctl's exit code (printed). */
static int merge(predict_run_t *r, FILE *f, int64_t *examples)
{
    int *want = psc_xcalloc((size_t)r->n, sizeof *want);
    int rc = 0;
    int64_t g = 0;
    psc_predict_header(f, r->sigmoid, r->outputs);
    for (;;) {
        shard_t *sh = &r->shards[g % r->n];
        if (left(sh)) {
            const Psc__PredictReply *p = sh->page;
            psc_predict_line(f, g, p->labels[sh->pos], r->sigmoid, p->probs + sh->pos * (size_t)r->outputs, r->outputs);
            sh->pos++;
            g++;
            continue;
        }
        if (sh->done) break; /* the file ends here: every shard must be done too */
        for (int s = 0; s < r->n; s++) want[s] = !left(&r->shards[s]) && !r->shards[s].done;
        if ((rc = fetch(r, want))) break;
    }
    while (rc == 0) { /* every other shard: nothing left */
        int open = 0;
        for (int s = 0; s < r->n; s++) {
            shard_t *sh = &r->shards[s];
            if (left(sh)) {
                fprintf(stderr,
                        "psctl: the file ended at example %lld (shard %lld's turn), but %s (shard %d) has more: do "
                        "the workers read the same file?\n",
                        (long long)g, (long long)(g % r->n), sh->addr, s);
                rc = 1;
                break;
            }
            open += want[s] = !sh->done;
        }
        if (rc || !open) break;
        rc = fetch(r, want);
    }
    free(want);
    *examples = g;
    return rc;
}

/* The output: OUT.tmp, renamed to OUT at the end; "-" is stdout. */
static FILE *open_out(const char *out, char *tmp, size_t tmplen)
{
    if (strcmp(out, "-") == 0) return stdout;
    snprintf(tmp, tmplen, "%s.tmp", out);
    FILE *f = fopen(tmp, "w");
    if (!f) fprintf(stderr, "psctl: cannot write %s: %s\n", tmp, strerror(errno));
    return f;
}

static int finish_out(FILE *f, const char *out, const char *tmp, int rc)
{
    if (f == stdout) return fflush(stdout) != 0 && rc == 0 ? 1 : rc;
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    if (rc == 0 && bad) {
        fprintf(stderr, "psctl: cannot write %s: %s\n", tmp, strerror(errno ? errno : EIO));
        rc = 1;
    }
    if (rc == 0 && rename(tmp, out) != 0) {
        fprintf(stderr, "psctl: cannot rename %s to %s: %s\n", tmp, out, strerror(errno));
        rc = 1;
    }
    if (rc) unlink(tmp);
    return rc;
}

int psctl_cmd_predict(const psctl_cli_t *c, const char *file)
{
    if (!c->out) {
        fprintf(stderr, "psctl: predict needs -o OUT (a file on this machine, or - for stdout)\n");
        return PSC_EXIT_USAGE;
    }
    if (c->format) {
        fprintf(stderr, "psctl: predict reads FILE in the job's data format; --format is export's\n");
        return PSC_EXIT_USAGE;
    }
    predict_run_t r = {.c = c, .file = file, .timeout_ms = c->timeout_set ? c->timeout_ms : 300000};
    r.n = psc_cluster_num_replicas(&c->cluster);
    if (r.n < 1) {
        fprintf(stderr, "psctl: the cluster has no training replica to score with\n");
        return PSC_EXIT_USAGE;
    }
    r.shards = psc_xcalloc((size_t)r.n, sizeof *r.shards);
    r.ops = psc_xcalloc((size_t)r.n + 64, sizeof *r.ops);
    for (int s = 0; s < r.n; s++) {
        r.shards[s].addr = psc_cluster_replica_addr(&c->cluster, s);
        r.shards[s].ch = psc_rpc_channel_create(r.shards[s].addr);
    }
    double t0 = psc_now();
    int *all = psc_xcalloc((size_t)r.n, sizeof *all);
    for (int s = 0; s < r.n; s++) all[s] = 1;
    int rc = fetch(&r, all); /* open every session: a bad file or checkpoint fails here, before OUT exists */
    free(all);
    char tmp[4200];
    FILE *f = rc ? NULL : open_out(c->out, tmp, sizeof tmp);
    if (!rc && !f) rc = 1;
    int64_t examples = 0;
    if (f) rc = finish_out(f, c->out, tmp, merge(&r, f, &examples));
    if (rc) close_sessions(&r);
    double secs = psc_now() - t0;
    if (rc == 0) {
        char which[64] = "the live model";
        if (c->checkpoint) snprintf(which, sizeof which, "checkpoint %llu", (unsigned long long)c->checkpoint);
        fprintf(stderr,
                "psctl: scored %lld examples of %s with %s of job %s (global_step %lld) on %d worker%s in %.2f s "
                "(%.0f examples/s)\n",
                (long long)examples, file, which, r.job_id, (long long)r.global_step, r.n, r.n == 1 ? "" : "s", secs,
                (double)examples / (secs > 0 ? secs : 1e-9));
        if (strcmp(c->out, "-") != 0) printf("predicted %lld examples into %s\n", (long long)examples, c->out);
    }
    for (int s = 0; s < r.n; s++) {
        if (r.shards[s].page) psc__predict_reply__free_unpacked(r.shards[s].page, NULL);
        psc_rpc_channel_destroy(r.shards[s].ch);
    }
    free(r.shards);
    free(r.ops);
    return rc;
}
