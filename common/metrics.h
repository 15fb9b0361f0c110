/* metrics.h — Prometheus metrics for the daemons: a registry of counters, gauges
 * and histograms, scrape-time collectors, and a tiny HTTP server for /metrics.
 *
 * One psc_metrics_t per process, created in main() and passed to the modules
 * that count things; nothing here is global. Metrics are registered at start-up
 * and live until psc_metrics_destroy(). Names follow psc_<subsystem>_<name>_<unit>
 * in base units (seconds, bytes), counters ending in _total:
 *
 *   psc_counter_t *push_bytes = psc_metrics_counter(m, "psc_ps_push_bytes_total",
 *                                   "Bytes of gradients received by Push.", NULL);
 *   psc_histogram_t *push_lat = psc_metrics_histogram(m, "psc_rpc_latency_seconds",
 *                                   "RPC handling time.", (const char *[]){"method", "Push", NULL},
 *                                   psc_metrics_latency_buckets, PSC_METRICS_LATENCY_NBUCKETS);
 *   ...
 *   psc_counter_add(push_bytes, len);             // any thread, lock-free
 *   psc_histogram_observe(push_lat, psc_now() - t0);
 *
 * Labels are constant per series: a NULL-terminated array of name, value, name,
 * value, ..., NULL (or NULL for none). The same name with different labels is
 * one family (one # HELP / # TYPE block); registering the same name, type and
 * labels again returns the series already there. Registration errors (a bad
 * name, a family re-registered with another type or other buckets) are bugs and
 * abort through PSC_ASSERT.
 *
 * Rendering is the text exposition format 0.0.4: families in registration order,
 * then those only collectors emitted, in the order they first emitted them; the
 * series of a family in registration order; histograms as cumulative _bucket
 * lines ending with le="+Inf", then _sum and _count (_count is always the +Inf
 * bucket, so a scrape never sees them disagree). Label values and HELP text are
 * escaped as the format asks.
 *
 * Threads: updates (psc_counter_*, psc_gauge_*, psc_histogram_observe) are
 * lock-free atomics, callable from any thread, completion-queue threads
 * included. Registration, collectors and rendering share one mutex: they may
 * be called from any thread, but not from inside a collector. Collectors run
 * under that mutex, so never register while holding a lock a collector takes.
 */
#ifndef PSC_METRICS_H
#define PSC_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct psc_metrics psc_metrics_t;
typedef struct psc_counter psc_counter_t;
typedef struct psc_gauge psc_gauge_t;
typedef struct psc_histogram psc_histogram_t;
typedef struct psc_metrics_emit psc_metrics_emit_t;

/* Latency buckets in seconds, 100 us to 10 s (1-2.5-5 steps). */
#define PSC_METRICS_LATENCY_NBUCKETS 16
extern const double psc_metrics_latency_buckets[PSC_METRICS_LATENCY_NBUCKETS];

/* ---- the registry ---- */

/* Creates an empty registry. Never NULL (aborts on out-of-memory). */
psc_metrics_t *psc_metrics_create(void);
/* Stops the HTTP server if it runs, then frees the registry and every series
 * handle it gave out. NULL does nothing. No update may race with it. */
void psc_metrics_destroy(psc_metrics_t *m);

/* Registers (or finds) a series. `name` must match [a-zA-Z_:][a-zA-Z0-9_:]*;
 * `help` is one line of text (escaped on output); `labels` as above, label
 * names [a-zA-Z_][a-zA-Z0-9_]* not starting with "__" (and not "le" for a
 * histogram), values any UTF-8. Strings are copied. The handle is owned by `m`
 * and valid until psc_metrics_destroy(). */
psc_counter_t *psc_metrics_counter(psc_metrics_t *m, const char *name, const char *help,
                                   const char *const *labels);
psc_gauge_t *psc_metrics_gauge(psc_metrics_t *m, const char *name, const char *help,
                               const char *const *labels);
/* `bounds`: nbounds finite upper bounds, strictly increasing (copied); the
 * +Inf bucket is implicit. Every series of a family has the same bounds. */
psc_histogram_t *psc_metrics_histogram(psc_metrics_t *m, const char *name, const char *help,
                                       const char *const *labels, const double *bounds,
                                       size_t nbounds);

/* 1 when `name` is a valid metric name (label_name: 1 for a valid label name). */
int psc_metrics_name_valid(const char *name);
int psc_metrics_label_name_valid(const char *name);

/* ---- updates: any thread, lock-free ---- */

/* Counters only go up: an integer part and a fractional (double) part, shown
 * as their sum. psc_counter_add_double asserts v >= 0. */
void psc_counter_inc(psc_counter_t *c);
void psc_counter_add(psc_counter_t *c, uint64_t n);
void psc_counter_add_double(psc_counter_t *c, double v);
/* Current value (the integer part plus the fractional part). */
double psc_counter_value(const psc_counter_t *c);

void psc_gauge_set(psc_gauge_t *g, double v);
void psc_gauge_add(psc_gauge_t *g, double v); /* negative v subtracts */
void psc_gauge_inc(psc_gauge_t *g);
void psc_gauge_dec(psc_gauge_t *g);
double psc_gauge_value(const psc_gauge_t *g);

/* Counts v in the first bucket whose bound is >= v (NaN and values above the
 * last bound in +Inf) and adds it to the sum. */
void psc_histogram_observe(psc_histogram_t *h, double v);
/* Observations so far. */
uint64_t psc_histogram_count(const psc_histogram_t *h);

/* ---- collectors: values computed at scrape time ---- */

/* Called while a page is rendered, with the registry mutex held, on the
 * rendering thread (the metrics server's thread for a scrape): emits samples
 * with psc_metrics_emit_*() and must not register, render or block for long.
 * It reads the daemon's own state, so it takes whatever lock that state needs. */
typedef void (*psc_metrics_collect_fn)(psc_metrics_emit_t *e, void *arg);

/* Adds a collector, called on every render in the order added (the same fn
 * and arg twice is called twice). `arg` stays the caller's. Returns 0. */
int psc_metrics_add_collector(psc_metrics_t *m, psc_metrics_collect_fn fn, void *arg);
/* Removes the first collector with this fn and arg: after it returns the
 * collector is not running and will not be called again. 0 or PSC_ENOTFOUND. */
int psc_metrics_remove_collector(psc_metrics_t *m, psc_metrics_collect_fn fn, void *arg);

/* Emits one sample from inside a collector; name, help and labels as for
 * registration (copied). A name that is already a registered family of the
 * same type adds a series to that family (its registered HELP is kept); one
 * emitted before in this render with the same type joins that family. The
 * collector must not emit a series (name + labels) twice. Returns 0, or
 * PSC_EINVAL (nothing emitted) for a bad name or label, or a name whose family
 * has another type. */
int psc_metrics_emit_gauge(psc_metrics_emit_t *e, const char *name, const char *help,
                           const char *const *labels, double value);
int psc_metrics_emit_counter(psc_metrics_emit_t *e, const char *name, const char *help,
                             const char *const *labels, double value);

/* ---- rendering ---- */

/* Renders the whole page (running the collectors). Returns a NUL-terminated
 * malloc'd string the caller frees; its length (without the NUL) in *len when
 * len is not NULL. Never NULL. */
char *psc_metrics_render(psc_metrics_t *m, size_t *len);

/* ---- the HTTP server ---- */

/* Serves GET (and HEAD) /metrics over HTTP/1.1 on bind_host:port (a numeric
 * address or a host name; NULL or "" = all interfaces; port 0 = any free port)
 * from one thread that answers one connection at a time and closes it after
 * the response: 200 with Content-Type text/plain; version=0.0.4; charset=utf-8
 * and Content-Length for /metrics (a query string is ignored), 404 for any
 * other method or path, 400 for a malformed request or one whose head exceeds
 * 8 KiB. A client has 5 s to send its request head and 5 s to take the
 * response, then it is dropped; garbage never stops the server.
 * Returns the bound port (> 0), or PSC_EEXISTS when already serving,
 * PSC_EINVAL for a bad port, PSC_EIO (with err: "cannot bind HOST:PORT: ...")
 * when the address cannot be resolved or bound. Call from one thread at a time
 * (the one that owns m, like psc_metrics_stop). */
int psc_metrics_serve(psc_metrics_t *m, const char *bind_host, int port, char *err,
                      size_t errlen);
/* Stops the server (interrupting a request in progress), joins its thread and
 * closes its socket. Does nothing when not serving; serve may be called again. */
void psc_metrics_stop(psc_metrics_t *m);

#endif
