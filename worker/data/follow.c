/* follow.c — a followed directory (follow.h): listings under the
 * complete-file rule, the name-ordered stream of files, this replica's
 * share, the idle end; and the rolling test window.
 *
 * Design: a listing is opendir/readdir, filtered by the rule and the
 * pattern (fnmatch), sorted by strcmp. The follower keeps the last name it
 * took and the previous listing: a name that sorts at or before the last one
 * taken was taken before (it is in the previous listing) or is late (it is
 * not: WARN once, counted; it is in the listing from then on, so never
 * warned again). Taken files get consecutive sequence numbers; this
 * replica's (seq mod W = r) wait in a FIFO of paths until data_follow_next
 * hands them out.
 *
 * Invariants: `last` only grows (strcmp); seq counts every file taken; the
 * queue holds this replica's taken files not yet handed out, in order.
 */
#include "follow.h"

#include "job_spec.h"
#include "log.h"
#include "psc.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define FOLLOW_NAP_SECS 0.05 /* longest sleep between looks at the cancel flag */

struct data_follow {
    char dir[512];
    char pattern[512]; /* "" = every name */
    int shard, num_shards;
    double idle_secs, poll_secs;
    char *last;  /* the last name taken (NULL: none yet) */
    char **prev; /* the previous listing, sorted */
    int nprev;
    char **queue; /* this replica's files not handed out yet: full paths, FIFO */
    int qhead, qlen, qcap;
    int64_t seq;   /* files taken, every replica's */
    double t_new;  /* when a new file was last taken (the start at first) */
    double t_poll; /* when the directory was last listed */
    int lost;      /* the directory is missing or unreadable (warned) */
    data_follow_stats_t st;
};

int data_follow_complete_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || name[0] == '.') return 0;
    if (n >= 4 && strcmp(name + n - 4, ".tmp") == 0) return 0;
    if (n >= 5 && strcmp(name + n - 5, ".part") == 0) return 0;
    return 1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void free_names(char **v, int n)
{
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* "dir/name" (no doubled '/' after the root). malloc'd. */
static char *join_path(const char *dir, const char *name)
{
    size_t dl = strlen(dir), nl = strlen(name);
    int slash = dl > 0 && dir[dl - 1] != '/';
    char *p = psc_xmalloc(dl + (size_t)slash + nl + 1);
    memcpy(p, dir, dl);
    if (slash) p[dl] = '/';
    memcpy(p + dl + (size_t)slash, name, nl + 1);
    return p;
}

/* Is dir/name a regular file (links followed)? d_type spares the stat when it can. */
static int regular_file(const char *dir, const struct dirent *e)
{
#ifdef _DIRENT_HAVE_D_TYPE
    if (e->d_type == DT_REG) return 1;
    if (e->d_type != DT_UNKNOWN && e->d_type != DT_LNK) return 0;
#endif
    char *p = join_path(dir, e->d_name);
    struct stat st;
    int ok = stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

/* The complete files of dir whose names match pattern ("" = any), sorted,
 * into *out (names only). 0, or an errno: dir could not be listed. */
static int list_complete(const char *dir, const char *pattern, char ***out, int *nout)
{
    *out = NULL;
    *nout = 0;
    DIR *d = opendir(dir);
    if (!d) return errno ? errno : EIO;
    char **v = NULL;
    int n = 0, cap = 0, e = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            e = errno;
            break;
        }
        if (!data_follow_complete_name(de->d_name)) continue;
        if (pattern[0] && fnmatch(pattern, de->d_name, FNM_PERIOD) != 0) continue;
        if (!regular_file(dir, de)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            v = psc_xrealloc(v, (size_t)cap * sizeof *v);
        }
        v[n++] = psc_xstrdup(de->d_name);
    }
    closedir(d);
    if (e) {
        free_names(v, n);
        return e;
    }
    if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_str);
    *out = v;
    *nout = n;
    return 0;
}

int data_follow_create(const char *train, int shard, int num_shards, double idle_secs, double poll_secs,
                       data_follow_t **out, char *err, size_t errlen)
{
    *out = NULL;
    PSC_ASSERT(num_shards >= 1 && shard >= 0 && shard < num_shards);
    data_follow_t *f = psc_xcalloc(1, sizeof *f);
    const char *pattern;
    if (psc_job_spec_follow_dir(train, f->dir, sizeof f->dir, &pattern) != 0 ||
        (pattern && strlen(pattern) >= sizeof f->pattern)) {
        free(f);
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "data.train: cannot follow \"%s\": a directory, or a pattern with wildcards in its last "
                          "component",
                          train);
    }
    snprintf(f->pattern, sizeof f->pattern, "%s", pattern ? pattern : "");
    f->shard = shard;
    f->num_shards = num_shards;
    f->idle_secs = idle_secs > 0 ? idle_secs : 600;
    f->poll_secs = poll_secs > 0 ? poll_secs : 1;
    f->t_new = psc_now();
    f->t_poll = -INFINITY;
    *out = f;
    return 0;
}

void data_follow_destroy(data_follow_t *f)
{
    if (!f) return;
    free(f->last);
    free_names(f->prev, f->nprev);
    for (int i = 0; i < f->qlen; i++) free(f->queue[(f->qhead + i) % f->qcap]);
    free(f->queue);
    free(f);
}

static void enqueue(data_follow_t *f, char *path)
{
    if (f->qlen == f->qcap) {
        int cap = f->qcap ? 2 * f->qcap : 16;
        char **q = psc_xmalloc((size_t)cap * sizeof *q);
        for (int i = 0; i < f->qlen; i++) q[i] = f->queue[(f->qhead + i) % f->qcap];
        free(f->queue);
        f->queue = q;
        f->qcap = cap;
        f->qhead = 0;
    }
    f->queue[(f->qhead + f->qlen++) % f->qcap] = path;
}

/* Takes name: the next sequence number, queued when it is this replica's. */
static void take(data_follow_t *f, const char *name)
{
    free(f->last);
    f->last = psc_xstrdup(name);
    if (f->seq % f->num_shards == f->shard) {
        enqueue(f, join_path(f->dir, name));
        f->st.mine++;
    }
    f->seq++;
    f->st.taken++;
}

static int in_sorted(char *const *v, int n, const char *name)
{
    return n > 0 && bsearch(&name, v, (size_t)n, sizeof *v, cmp_str) != NULL;
}

int data_follow_poll(data_follow_t *f, double now)
{
    char **names;
    int n, added = 0;
    f->t_poll = now;
    int e = list_complete(f->dir, f->pattern, &names, &n);
    if (e) {
        if (!f->lost) {
            f->lost = 1;
            f->st.dir_lost++;
            PSC_WARN("followed directory %s: cannot list it (%s): waiting for it to come back (the wait counts as "
                     "idle)",
                     f->dir, strerror(e));
        }
        return 0;
    }
    if (f->lost) {
        f->lost = 0;
        PSC_INFO("followed directory %s is back", f->dir);
    }
    for (int i = 0; i < n; i++) {
        int c = f->last ? strcmp(names[i], f->last) : 1;
        if (c > 0) {
            take(f, names[i]);
            added++;
        } else if (c < 0 && !in_sorted(f->prev, f->nprev, names[i])) {
            f->st.late++;
            PSC_WARN("followed directory %s: %s appeared after %s was taken and sorts before it: it is never read "
                     "(files are taken in name order)",
                     f->dir, names[i], f->last);
        }
    }
    free_names(f->prev, f->nprev);
    f->prev = names;
    f->nprev = n;
    if (added) f->t_new = now;
    return added;
}

static void nap(double secs)
{
    if (secs < 0.001) secs = 0.001;
    struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
    nanosleep(&ts, NULL);
}

int data_follow_next(data_follow_t *f, const atomic_int *cancel, char **path)
{
    *path = NULL;
    for (;;) {
        if (f->qlen > 0) {
            *path = f->queue[f->qhead];
            f->qhead = (f->qhead + 1) % f->qcap;
            f->qlen--;
            return 1;
        }
        if (cancel && atomic_load(cancel)) return PSC_ECANCELLED;
        double now = psc_now();
        if (now >= f->t_poll + f->poll_secs && data_follow_poll(f, now) > 0) continue;
        if (now - f->t_new >= f->idle_secs) return 0;
        double until = PSC_MIN(f->t_poll + f->poll_secs, f->t_new + f->idle_secs);
        nap(PSC_MIN(until - now, FOLLOW_NAP_SECS));
    }
}

void data_follow_stats(const data_follow_t *f, data_follow_stats_t *out) { *out = f->st; }

int data_follow_newest(const char *dir, int n, char ***files, int *nfiles, char *err, size_t errlen)
{
    char **names;
    int count;
    *files = NULL;
    *nfiles = 0;
    int e = list_complete(dir, "", &names, &count);
    if (e) return psc_seterr(err, errlen, PSC_EIO, "data.test: cannot list directory %s: %s", dir, strerror(e));
    if (count == 0) {
        free(names);
        return psc_seterr(err, errlen, PSC_ENOTFOUND, "data.test: directory %s holds no complete file yet", dir);
    }
    int k = PSC_MIN(n > 0 ? n : 1, count), first = count - k;
    char **v = psc_xmalloc((size_t)k * sizeof *v);
    for (int i = 0; i < k; i++) v[i] = join_path(dir, names[first + i]);
    free_names(names, count);
    *files = v;
    *nfiles = k;
    return 0;
}
