/* metrics.c — the Prometheus registry, its text rendering and the /metrics server.
 *
 * Registry: a list of families (name, help, type, histogram bounds), each with a
 * list of series (the escaped label string and the atomic values). Families and
 * series are only added, under m->lock, and freed in psc_metrics_destroy(), so a
 * handle stays valid for the registry's life and updates need no lock: integer
 * counts are atomic adds, doubles are compare-and-swap loops on their bits.
 * A histogram keeps per-bucket counts and renders their running sum, so its
 * +Inf bucket and _count come from the same reads and always agree.
 *
 * Collectors run inside psc_metrics_render() with m->lock held; what they emit
 * is gathered per render into temporary families, merged into the registered
 * family of the same name where there is one, so that every family appears once.
 *
 * Server: one thread polls the listening socket and a wake pipe; it accepts one
 * connection, reads the request head (at most 8 KiB, 5 s), answers, closes,
 * and goes back to poll. Every wait also watches the wake pipe, so stop never
 * waits for a slow client. Nothing a client sends is trusted: the head is
 * parsed only up to its first line, and bytes past the limit get a 400.
 */
#include "metrics.h"

#include "log.h"
#include "psc.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

const double psc_metrics_latency_buckets[PSC_METRICS_LATENCY_NBUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,     10,
};

#define METRICS_IO_TIMEOUT 5.0     /* seconds for a request head, and for a response */
#define METRICS_LINGER 1.0         /* seconds to drain a client's extra bytes before close */
#define METRICS_LINGER_BYTES (1 << 20)
#define METRICS_REQ_MAX 8192       /* request head limit */

typedef enum { MT_COUNTER, MT_GAUGE, MT_HISTOGRAM } mtype_t;

static const char *const mtype_name[] = {"counter", "gauge", "histogram"};

struct psc_counter {
    _Atomic uint64_t n;     /* integer increments */
    _Atomic uint64_t fbits; /* double: fractional increments */
};

struct psc_gauge {
    _Atomic uint64_t bits; /* double */
};

struct psc_histogram {
    size_t nb;              /* finite bounds; counts has nb + 1 (the last is +Inf) */
    const double *bounds;   /* the family's */
    _Atomic uint64_t *counts; /* per bucket, not cumulative */
    _Atomic uint64_t sumbits; /* double */
};

typedef struct series {
    struct series *next;
    char *labels; /* escaped `a="x",b="y"`; "" for none */
    union {
        struct psc_counter c;
        struct psc_gauge g;
        struct psc_histogram h;
    } u;
} series_t;

typedef struct family {
    struct family *next;
    char *name;
    char *help;
    mtype_t type;
    double *bounds; /* histograms: nb finite upper bounds */
    size_t nb;
    series_t *series, **stail;
} family_t;

typedef struct collector {
    struct collector *next;
    psc_metrics_collect_fn fn;
    void *arg;
} collector_t;

struct psc_metrics {
    pthread_mutex_t lock; /* families, collectors, rendering */
    family_t *families, **ftail;
    collector_t *collectors;
    /* The server: touched only by the thread calling serve/stop, and read by
     * the server thread while it runs. */
    int serving;
    int port;
    int lfd;
    int wake[2];
    pthread_t thread;
};

/* One render's collector output. */
typedef struct esample {
    struct esample *next;
    char *labels;
    double v;
} esample_t;

typedef struct efamily {
    struct efamily *next;
    char *name;
    char *help;
    mtype_t type;
    const family_t *reg; /* the registered family it joins, or NULL */
    esample_t *samples, **stail;
} efamily_t;

struct psc_metrics_emit {
    psc_metrics_t *m;
    efamily_t *families, **ftail;
};

/* ---- growable string ---- */

/* ---- atomics on doubles ---- */

static double bits_d(uint64_t b)
{
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

static uint64_t d_bits(double d)
{
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    return b;
}

static void atomic_add_d(_Atomic uint64_t *p, double v)
{
    uint64_t old = atomic_load_explicit(p, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(p, &old, d_bits(bits_d(old) + v),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

static double atomic_get_d(const _Atomic uint64_t *p)
{
    return bits_d(atomic_load_explicit((_Atomic uint64_t *)p, memory_order_relaxed));
}

/* ---- names, labels, numbers ---- */

static int is_alpha_(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

int psc_metrics_name_valid(const char *name)
{
    if (!name || !(is_alpha_(name[0]) || name[0] == ':')) return 0;
    for (const char *p = name + 1; *p; p++)
        if (!is_alpha_(*p) && !is_digit(*p) && *p != ':') return 0;
    return 1;
}

int psc_metrics_label_name_valid(const char *name)
{
    if (!name || !is_alpha_(name[0]) || strncmp(name, "__", 2) == 0) return 0;
    for (const char *p = name + 1; *p; p++)
        if (!is_alpha_(*p) && !is_digit(*p)) return 0;
    return 1;
}

/* Appends s with backslash, newline and (in label values) double quote escaped. */
static void sb_escaped(psc_sbuf_t *b, const char *s, int quote)
{
    for (const char *p = s; *p; p++) {
        if (*p == '\\') psc_sbuf_put(b, "\\\\", 2);
        else if (*p == '\n') psc_sbuf_put(b, "\\n", 2);
        else if (quote && *p == '"') psc_sbuf_put(b, "\\\"", 2);
        else psc_sbuf_put(b, p, 1);
    }
}

/* Formats labels (name, value, ..., NULL) as `a="x",b="y"` into b. 0, or -1
 * when a name is invalid or repeated, a value is missing, or (for histograms)
 * a label is called "le". */
static int labels_format(psc_sbuf_t *b, const char *const *labels, int histogram)
{
    if (!labels) return 0;
    for (size_t i = 0; labels[i]; i += 2) {
        if (!psc_metrics_label_name_valid(labels[i]) || !labels[i + 1]) return -1;
        if (histogram && strcmp(labels[i], "le") == 0) return -1;
        for (size_t j = 0; j < i; j += 2)
            if (strcmp(labels[j], labels[i]) == 0) return -1;
        if (i) psc_sbuf_put(b, ",", 1);
        psc_sbuf_puts(b, labels[i]);
        psc_sbuf_put(b, "=\"", 2);
        sb_escaped(b, labels[i + 1], 1);
        psc_sbuf_put(b, "\"", 1);
    }
    return 0;
}

/* Shortest of %.15g..%.17g that reads back as v; Prometheus' spellings of the
 * special values. */
static void fmt_double(char *out, size_t n, double v)
{
    if (isnan(v)) {
        snprintf(out, n, "NaN");
    } else if (isinf(v)) {
        snprintf(out, n, v > 0 ? "+Inf" : "-Inf");
    } else {
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(out, n, "%.*g", prec, v);
            if (strtod(out, NULL) == v) break;
        }
    }
}

static void sb_double(psc_sbuf_t *b, double v)
{
    char tmp[40];
    fmt_double(tmp, sizeof tmp, v);
    psc_sbuf_puts(b, tmp);
}

/* ---- registry ---- */

psc_metrics_t *psc_metrics_create(void)
{
    psc_metrics_t *m = psc_xcalloc(1, sizeof *m);
    PSC_ASSERT(pthread_mutex_init(&m->lock, NULL) == 0);
    m->ftail = &m->families;
    m->lfd = m->wake[0] = m->wake[1] = -1;
    return m;
}

void psc_metrics_destroy(psc_metrics_t *m)
{
    if (!m) return;
    psc_metrics_stop(m);
    for (family_t *f = m->families, *fn; f; f = fn) {
        fn = f->next;
        for (series_t *s = f->series, *sn; s; s = sn) {
            sn = s->next;
            if (f->type == MT_HISTOGRAM) free(s->u.h.counts);
            free(s->labels);
            free(s);
        }
        free(f->name);
        free(f->help);
        free(f->bounds);
        free(f);
    }
    for (collector_t *c = m->collectors, *cn; c; c = cn) {
        cn = c->next;
        free(c);
    }
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static _Noreturn void registration_bug(const char *what, const char *name)
{
    PSC_ERROR("metrics: %s: %s", what, name ? name : "(null)");
    psc_assert_fail(what, __FILE__, __LINE__, __func__);
}

static family_t *family_find(const psc_metrics_t *m, const char *name)
{
    for (family_t *f = m->families; f; f = f->next)
        if (strcmp(f->name, name) == 0) return f;
    return NULL;
}

/* Finds or adds the series name{labels}; registration mistakes abort. */
static series_t *series_get(psc_metrics_t *m, mtype_t type, const char *name, const char *help,
                            const char *const *labels, const double *bounds, size_t nb)
{
    PSC_ASSERT(m && help);
    if (!psc_metrics_name_valid(name)) registration_bug("invalid metric name", name);
    psc_sbuf_t lb = {0};
    if (labels_format(&lb, labels, type == MT_HISTOGRAM) != 0)
        registration_bug("invalid, repeated or missing label (or \"le\" on a histogram)", name);
    char *lstr = psc_sbuf_take(&lb, NULL);
    if (type == MT_HISTOGRAM) {
        PSC_ASSERT(nb == 0 || bounds);
        for (size_t i = 0; i < nb; i++)
            if (!isfinite(bounds[i]) || (i && !(bounds[i] > bounds[i - 1])))
                registration_bug("histogram bounds must be finite and strictly increasing", name);
    }

    pthread_mutex_lock(&m->lock);
    family_t *f = family_find(m, name);
    if (f) {
        if (f->type != type) registration_bug("metric registered again with another type", name);
        if (type == MT_HISTOGRAM &&
            (f->nb != nb || (nb && memcmp(f->bounds, bounds, nb * sizeof *bounds) != 0)))
            registration_bug("histogram registered again with other buckets", name);
        for (series_t *s = f->series; s; s = s->next) {
            if (strcmp(s->labels, lstr) == 0) {
                pthread_mutex_unlock(&m->lock);
                free(lstr);
                return s;
            }
        }
    } else {
        f = psc_xcalloc(1, sizeof *f);
        f->name = psc_xstrdup(name);
        f->help = psc_xstrdup(help);
        f->type = type;
        if (type == MT_HISTOGRAM && nb) {
            f->bounds = psc_xmalloc(nb * sizeof *bounds);
            memcpy(f->bounds, bounds, nb * sizeof *bounds);
        }
        f->nb = nb;
        f->stail = &f->series;
        *m->ftail = f;
        m->ftail = &f->next;
    }
    series_t *s = psc_xcalloc(1, sizeof *s);
    s->labels = lstr;
    if (type == MT_HISTOGRAM) {
        s->u.h.nb = nb;
        s->u.h.bounds = f->bounds;
        s->u.h.counts = psc_xcalloc(nb + 1, sizeof *s->u.h.counts);
    }
    *f->stail = s;
    f->stail = &s->next;
    pthread_mutex_unlock(&m->lock);
    return s;
}

psc_counter_t *psc_metrics_counter(psc_metrics_t *m, const char *name, const char *help,
                                   const char *const *labels)
{
    return &series_get(m, MT_COUNTER, name, help, labels, NULL, 0)->u.c;
}

psc_gauge_t *psc_metrics_gauge(psc_metrics_t *m, const char *name, const char *help,
                               const char *const *labels)
{
    return &series_get(m, MT_GAUGE, name, help, labels, NULL, 0)->u.g;
}

psc_histogram_t *psc_metrics_histogram(psc_metrics_t *m, const char *name, const char *help,
                                       const char *const *labels, const double *bounds,
                                       size_t nbounds)
{
    return &series_get(m, MT_HISTOGRAM, name, help, labels, bounds, nbounds)->u.h;
}

/* ---- updates ---- */

void psc_counter_inc(psc_counter_t *c) { atomic_fetch_add_explicit(&c->n, 1, memory_order_relaxed); }

void psc_counter_add(psc_counter_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(&c->n, n, memory_order_relaxed);
}

void psc_counter_add_double(psc_counter_t *c, double v)
{
    PSC_ASSERT(v >= 0); /* counters never go down (NaN fails too) */
    atomic_add_d(&c->fbits, v);
}

double psc_counter_value(const psc_counter_t *c)
{
    uint64_t n = atomic_load_explicit((_Atomic uint64_t *)&c->n, memory_order_relaxed);
    return (double)n + atomic_get_d(&c->fbits);
}

void psc_gauge_set(psc_gauge_t *g, double v)
{
    atomic_store_explicit(&g->bits, d_bits(v), memory_order_relaxed);
}

void psc_gauge_add(psc_gauge_t *g, double v) { atomic_add_d(&g->bits, v); }
void psc_gauge_inc(psc_gauge_t *g) { atomic_add_d(&g->bits, 1.0); }
void psc_gauge_dec(psc_gauge_t *g) { atomic_add_d(&g->bits, -1.0); }
double psc_gauge_value(const psc_gauge_t *g) { return atomic_get_d(&g->bits); }

void psc_histogram_observe(psc_histogram_t *h, double v)
{
    /* The first bound >= v; NaN compares false everywhere and lands in +Inf. */
    size_t lo = 0, hi = h->nb;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->bounds[mid] >= v) hi = mid;
        else lo = mid + 1;
    }
    atomic_fetch_add_explicit(&h->counts[lo], 1, memory_order_relaxed);
    atomic_add_d(&h->sumbits, v);
}

uint64_t psc_histogram_count(const psc_histogram_t *h)
{
    uint64_t n = 0;
    for (size_t i = 0; i <= h->nb; i++)
        n += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
    return n;
}

/* ---- collectors ---- */

int psc_metrics_add_collector(psc_metrics_t *m, psc_metrics_collect_fn fn, void *arg)
{
    PSC_ASSERT(m && fn);
    collector_t *c = psc_xcalloc(1, sizeof *c);
    c->fn = fn;
    c->arg = arg;
    pthread_mutex_lock(&m->lock);
    collector_t **pp = &m->collectors;
    while (*pp) pp = &(*pp)->next;
    *pp = c;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

int psc_metrics_remove_collector(psc_metrics_t *m, psc_metrics_collect_fn fn, void *arg)
{
    PSC_ASSERT(m);
    pthread_mutex_lock(&m->lock);
    for (collector_t **pp = &m->collectors; *pp; pp = &(*pp)->next) {
        if ((*pp)->fn == fn && (*pp)->arg == arg) {
            collector_t *c = *pp;
            *pp = c->next;
            pthread_mutex_unlock(&m->lock);
            free(c);
            return 0;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return PSC_ENOTFOUND;
}

static int emit(psc_metrics_emit_t *e, mtype_t type, const char *name, const char *help,
                const char *const *labels, double value)
{
    PSC_ASSERT(e);
    if (!psc_metrics_name_valid(name) || !help) return PSC_EINVAL;
    efamily_t *ef = NULL;
    for (efamily_t *x = e->families; x; x = x->next)
        if (strcmp(x->name, name) == 0) ef = x;
    const family_t *reg = ef ? ef->reg : family_find(e->m, name);
    if ((ef && ef->type != type) || (reg && reg->type != type)) return PSC_EINVAL;
    psc_sbuf_t lb = {0};
    if (labels_format(&lb, labels, 0) != 0) {
        free(lb.p);
        return PSC_EINVAL;
    }
    if (!ef) {
        ef = psc_xcalloc(1, sizeof *ef);
        ef->name = psc_xstrdup(name);
        ef->help = psc_xstrdup(help);
        ef->type = type;
        ef->reg = reg;
        ef->stail = &ef->samples;
        *e->ftail = ef;
        e->ftail = &ef->next;
    }
    esample_t *s = psc_xcalloc(1, sizeof *s);
    s->labels = psc_sbuf_take(&lb, NULL);
    s->v = value;
    *ef->stail = s;
    ef->stail = &s->next;
    return 0;
}

int psc_metrics_emit_gauge(psc_metrics_emit_t *e, const char *name, const char *help,
                           const char *const *labels, double value)
{
    return emit(e, MT_GAUGE, name, help, labels, value);
}

int psc_metrics_emit_counter(psc_metrics_emit_t *e, const char *name, const char *help,
                             const char *const *labels, double value)
{
    return emit(e, MT_COUNTER, name, help, labels, value);
}

/* ---- rendering ---- */

static void render_header(psc_sbuf_t *b, const char *name, const char *help, mtype_t type)
{
    if (*help) {
        psc_sbuf_puts(b, "# HELP ");
        psc_sbuf_puts(b, name);
        psc_sbuf_put(b, " ", 1);
        sb_escaped(b, help, 0);
        psc_sbuf_put(b, "\n", 1);
    }
    psc_sbuf_puts(b, "# TYPE ");
    psc_sbuf_puts(b, name);
    psc_sbuf_put(b, " ", 1);
    psc_sbuf_puts(b, mtype_name[type]);
    psc_sbuf_put(b, "\n", 1);
}

/* name[suffix]{labels[,extra]} */
static void render_series_name(psc_sbuf_t *b, const char *name, const char *suffix, const char *labels,
                               const char *extra)
{
    psc_sbuf_puts(b, name);
    psc_sbuf_puts(b, suffix);
    if (*labels || extra) {
        psc_sbuf_put(b, "{", 1);
        psc_sbuf_puts(b, labels);
        if (*labels && extra) psc_sbuf_put(b, ",", 1);
        if (extra) psc_sbuf_puts(b, extra);
        psc_sbuf_put(b, "}", 1);
    }
    psc_sbuf_put(b, " ", 1);
}

static void render_series(psc_sbuf_t *b, const family_t *f, series_t *s)
{
    if (f->type == MT_COUNTER) {
        render_series_name(b, f->name, "", s->labels, NULL);
        uint64_t n = atomic_load_explicit(&s->u.c.n, memory_order_relaxed);
        double frac = atomic_get_d(&s->u.c.fbits);
        if (frac == 0) psc_sbuf_printf(b, "%llu", (unsigned long long)n); /* exact past 2^53 */
        else sb_double(b, (double)n + frac);
    } else if (f->type == MT_GAUGE) {
        render_series_name(b, f->name, "", s->labels, NULL);
        sb_double(b, atomic_get_d(&s->u.g.bits));
    } else {
        const struct psc_histogram *h = &s->u.h;
        uint64_t cum = 0;
        char le[64];
        for (size_t i = 0; i <= h->nb; i++) {
            cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
            char v[40];
            if (i < h->nb) fmt_double(v, sizeof v, h->bounds[i]);
            else snprintf(v, sizeof v, "+Inf");
            snprintf(le, sizeof le, "le=\"%s\"", v);
            render_series_name(b, f->name, "_bucket", s->labels, le);
            psc_sbuf_printf(b, "%llu\n", (unsigned long long)cum);
        }
        render_series_name(b, f->name, "_sum", s->labels, NULL);
        sb_double(b, atomic_get_d(&h->sumbits));
        psc_sbuf_put(b, "\n", 1);
        render_series_name(b, f->name, "_count", s->labels, NULL);
        psc_sbuf_printf(b, "%llu", (unsigned long long)cum);
    }
    psc_sbuf_put(b, "\n", 1);
}

static void render_esamples(psc_sbuf_t *b, const efamily_t *ef)
{
    for (const esample_t *s = ef->samples; s; s = s->next) {
        render_series_name(b, ef->name, "", s->labels, NULL);
        sb_double(b, s->v);
        psc_sbuf_put(b, "\n", 1);
    }
}

char *psc_metrics_render(psc_metrics_t *m, size_t *len)
{
    PSC_ASSERT(m);
    psc_sbuf_t b = {0};
    psc_metrics_emit_t e = {.m = m, .families = NULL, .ftail = &e.families};

    pthread_mutex_lock(&m->lock);
    for (collector_t *c = m->collectors; c; c = c->next) c->fn(&e, c->arg);
    for (const family_t *f = m->families; f; f = f->next) {
        render_header(&b, f->name, f->help, f->type);
        for (series_t *s = f->series; s; s = s->next) render_series(&b, f, s);
        for (const efamily_t *ef = e.families; ef; ef = ef->next)
            if (ef->reg == f) render_esamples(&b, ef);
    }
    pthread_mutex_unlock(&m->lock);

    for (efamily_t *ef = e.families, *en; ef; ef = en) {
        en = ef->next;
        if (!ef->reg) {
            render_header(&b, ef->name, ef->help, ef->type);
            render_esamples(&b, ef);
        }
        for (esample_t *s = ef->samples, *sn; s; s = sn) {
            sn = s->next;
            free(s->labels);
            free(s);
        }
        free(ef->name);
        free(ef->help);
        free(ef);
    }
    return psc_sbuf_take(&b, len);
}

/* ---- the HTTP server ---- */

/* Waits until fd has `events`, the deadline passes or stop is asked:
 * 1 ready (or an error to read), 0 timed out, -1 stopping. */
static int wait_fd(psc_metrics_t *m, int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - psc_now();
        if (left <= 0) return 0;
        struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = m->wake[0], .events = POLLIN}};
        int n = poll(p, 2, (int)(left * 1000) + 1); /* fd -1: poll skips it, a pure sleep */
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (p[1].revents) return -1;
        if (p[0].revents) return 1;
    }
}

static int send_all(psc_metrics_t *m, int fd, const char *p, size_t n, double deadline)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (wait_fd(m, fd, POLLOUT, deadline) <= 0) return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Checks a request line (without its \n). Returns 200 for GET or HEAD of
 * /metrics (*head for HEAD), 404 for any other well-formed request, 400 else. */
static int parse_request_line(const char *s, size_t len, int *head)
{
    static const char tchar[] = "!#$%&'*+-.^_`|~";
    if (len && s[len - 1] == '\r') len--;
    const char *sp1 = memchr(s, ' ', len);
    if (!sp1 || sp1 == s || sp1 - s > 32) return 400;
    for (const char *p = s; p < sp1; p++)
        if (!is_alpha_(*p) && !is_digit(*p) && (*p == '\0' || !strchr(tchar, *p))) return 400;
    const char *target = sp1 + 1, *end = s + len;
    const char *sp2 = memchr(target, ' ', (size_t)(end - target));
    if (!sp2 || sp2 == target || *target != '/') return 400;
    for (const char *p = target; p < sp2; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f) return 400;
    const char *version = sp2 + 1;
    if (end - version != 8 || (memcmp(version, "HTTP/1.1", 8) != 0 && memcmp(version, "HTTP/1.0", 8) != 0))
        return 400;
    size_t mlen = (size_t)(sp1 - s);
    *head = mlen == 4 && memcmp(s, "HEAD", 4) == 0;
    int get = mlen == 3 && memcmp(s, "GET", 3) == 0;
    const char *q = memchr(target, '?', (size_t)(sp2 - target));
    size_t plen = (size_t)((q ? q : sp2) - target);
    if ((get || *head) && plen == 8 && memcmp(target, "/metrics", 8) == 0) return 200;
    return 404;
}

/* The blank line that ends a request head: "\n\n" or "\n\r\n". */
static int head_complete(const char *p, size_t n)
{
    return memmem(p, n, "\n\n", 2) != NULL || memmem(p, n, "\n\r\n", 3) != NULL;
}

static void respond(psc_metrics_t *m, int fd, int status, int head)
{
    static const char ct_metrics[] = "text/plain; version=0.0.4; charset=utf-8";
    char *body;
    size_t blen;
    const char *reason, *ctype = "text/plain; charset=utf-8";
    if (status == 200) {
        body = psc_metrics_render(m, &blen);
        reason = "OK";
        ctype = ct_metrics;
    } else {
        body = psc_xstrdup(status == 404 ? "not found\n" : "bad request\n");
        blen = strlen(body);
        reason = status == 404 ? "Not Found" : "Bad Request";
    }
    char hdr[256];
    int hlen = snprintf(hdr, sizeof hdr,
                        "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                        "Connection: close\r\n\r\n",
                        status, reason, ctype, blen);
    PSC_ASSERT(hlen > 0 && (size_t)hlen < sizeof hdr);
    /* One buffer, one send: a second small write would wait on Nagle. */
    psc_sbuf_t out = {0};
    psc_sbuf_put(&out, hdr, (size_t)hlen);
    if (!head) psc_sbuf_put(&out, body, blen);
    free(body);
    if (send_all(m, fd, out.p, out.len, psc_now() + METRICS_IO_TIMEOUT) != 0)
        PSC_DEBUG("metrics: client went away during the response");
    free(out.p);
}

/* After the response: stop sending, then read what the client still sends
 * (briefly) so that closing with unread bytes does not reset the connection
 * before the client has read the response. */
static void linger_close(psc_metrics_t *m, int fd)
{
    shutdown(fd, SHUT_WR);
    double deadline = psc_now() + METRICS_LINGER;
    size_t drained = 0;
    char buf[4096];
    while (drained < METRICS_LINGER_BYTES) {
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r > 0) {
            drained += (size_t)r;
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
        if (wait_fd(m, fd, POLLIN, deadline) <= 0) break;
    }
}

static void conn_serve(psc_metrics_t *m, int fd)
{
    char req[METRICS_REQ_MAX];
    size_t n = 0;
    int status = 0, head = 0;
    double deadline = psc_now() + METRICS_IO_TIMEOUT;
    for (;;) {
        if (!status) {
            const char *nl = memchr(req, '\n', n);
            if (nl) status = parse_request_line(req, (size_t)(nl - req), &head);
        }
        if (status == 400 || (status && head_complete(req, n))) break;
        if (n == sizeof req) { /* request line or head too long */
            status = 400;
            break;
        }
        ssize_t r = recv(fd, req + n, sizeof req - n, 0);
        if (r > 0) {
            n += (size_t)r;
        } else if (r == 0) {
            if (n == 0) return; /* connected and left */
            status = 400;       /* ended inside the head */
            break;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            if (wait_fd(m, fd, POLLIN, deadline) <= 0) return; /* too slow, or stopping */
        } else {
            return;
        }
    }
    respond(m, fd, status, head);
    linger_close(m, fd);
}

static void *server_main(void *arg)
{
    psc_metrics_t *m = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = m->lfd, .events = POLLIN}, {.fd = m->wake[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            if (wait_fd(m, -1, 0, psc_now() + 0.1) < 0) break;
            continue;
        }
        if (p[1].revents) break;
        if (!p[0].revents) continue;
        int fd = accept4(m->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            /* Out of descriptors or memory: back off instead of spinning. */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                PSC_DEBUG("metrics: accept: %s", strerror(errno));
                if (wait_fd(m, -1, 0, psc_now() + 0.1) < 0) break;
            }
            continue;
        }
        conn_serve(m, fd);
        close(fd);
    }
    return NULL;
}

int psc_metrics_serve(psc_metrics_t *m, const char *bind_host, int port, char *err, size_t errlen)
{
    PSC_ASSERT(m);
    if (m->serving)
        return psc_seterr(err, errlen, PSC_EEXISTS, "metrics server already serving on port %d", m->port);
    if (port < 0 || port > 65535)
        return psc_seterr(err, errlen, PSC_EINVAL, "bad metrics port %d (want 0..65535, 0 = any)", port);
    const char *host = bind_host && *bind_host ? bind_host : NULL;
    const char *shown = host ? host : "*";
    const char *lb = host && strchr(host, ':') ? "[" : "", *rb = *lb ? "]" : "";

    char pstr[8];
    snprintf(pstr, sizeof pstr, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, pstr, &hints, &res);
    if (gai != 0)
        return psc_seterr(err, errlen, PSC_EIO, "cannot bind %s%s%s:%d: %s", lb, shown, rb, port,
                          gai_strerror(gai));
    int fd = -1, saved = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0) break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return psc_seterr(err, errlen, PSC_EIO, "cannot bind %s%s%s:%d: %s", lb, shown, rb, port,
                          strerror(saved));

    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int bound = -1;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) bound = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6) bound = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    if (bound <= 0) {
        saved = errno;
        close(fd);
        return psc_seterr(err, errlen, PSC_EIO, "cannot bind %s%s%s:%d: getsockname: %s", lb, shown,
                          rb, port, strerror(saved));
    }
    if (pipe2(m->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        saved = errno;
        close(fd);
        m->wake[0] = m->wake[1] = -1;
        return psc_seterr(err, errlen, PSC_EIO, "metrics server: pipe: %s", strerror(saved));
    }
    m->lfd = fd;
    int rc = pthread_create(&m->thread, NULL, server_main, m);
    if (rc != 0) {
        close(fd);
        close(m->wake[0]);
        close(m->wake[1]);
        m->lfd = m->wake[0] = m->wake[1] = -1;
        return psc_seterr(err, errlen, PSC_EIO, "metrics server: thread: %s", strerror(rc));
    }
    m->serving = 1;
    m->port = bound;
    return bound;
}

void psc_metrics_stop(psc_metrics_t *m)
{
    if (!m || !m->serving) return;
    char c = 1;
    while (write(m->wake[1], &c, 1) < 0 && errno == EINTR) {
    }
    pthread_join(m->thread, NULL);
    close(m->lfd);
    close(m->wake[0]);
    close(m->wake[1]);
    m->lfd = m->wake[0] = m->wake[1] = -1;
    m->serving = 0;
    m->port = 0;
}
