/* follow.h — a followed directory (online training, docs/online-training.md):
 * the complete files of a directory taken in name order as they appear, and
 * this replica's share of them. The reader (reader.c) reads a job's
 * data.train this way when the spec has data.follow.
 *
 * The complete-file rule: a file counts once it is in place under its final
 * name: a regular file (links followed) whose name does not start with '.'
 * and does not end in ".tmp" or ".part", and that matches the pattern when
 * data.train gave one. A writer writes ".NAME.tmp" and rename(2)s it into
 * place, which is atomic: no half-written file is ever taken.
 *
 * Order and shares: each listing takes the complete files whose names sort
 * (strcmp) after the last one taken, in that order; they get the sequence
 * numbers 0, 1, 2, ... and replica r of W gets those with seq mod W = r (its
 * r-th, r+W-th, ... file), so every replica, and a replica restarted, sees the
 * same stream as long as files appear in name order. A file that appears with
 * a name sorting before one already taken is never read: one WARN names it
 * (counted as `late`). A directory that disappears or cannot be listed: one
 * WARN, the follower keeps polling (the time counts as idle), one INFO when
 * it is back.
 *
 * Idle: data_follow_next ends (0) once this replica has no file left and no
 * new complete file (any replica's) has appeared for idle_secs.
 *
 * Threads: one thread uses a follower; the cancel flag may be set by any.
 */
#ifndef PSC_DATA_FOLLOW_H
#define PSC_DATA_FOLLOW_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct data_follow data_follow_t;

typedef struct data_follow_stats {
    int64_t taken;    /* complete files taken, every replica's */
    int64_t mine;     /* of them, this replica's */
    int64_t late;     /* never read: they appeared sorting before a file already taken */
    int64_t dir_lost; /* times the directory went missing or could not be listed */
} data_follow_stats_t;

/* 1 when a directory entry's name passes the complete-file rule's name test
 * (no leading '.', no ".tmp" or ".part" ending). Thread-safe. */
int data_follow_complete_name(const char *name);

/* A follower of `train` (a directory, or a pattern with wildcards in its last
 * component: psc_job_spec_follow_dir) for replica shard of num_shards. The
 * directory is not listed yet; the idle clock starts now. 0, or PSC_ECONFIG
 * naming train. *out: the caller's, data_follow_destroy frees it. */
int data_follow_create(const char *train, int shard, int num_shards, double idle_secs, double poll_secs,
                       data_follow_t **out, char *err, size_t errlen);
void data_follow_destroy(data_follow_t *f); /* NULL ok */

/* Lists the directory once at time now (psc_now's clock): takes the new
 * complete files, WARNs about late ones and about a lost directory. Returns
 * the files taken (any replica's). Never fails. */
int data_follow_poll(data_follow_t *f, double now);

/* The next file of this replica: 1 with *path (malloc'd, the caller frees),
 * polling every poll_secs until there is one; 0 when idle (no file left and
 * none new for idle_secs); PSC_ECANCELLED as soon as *cancel (may be NULL) is
 * set. Sleeps in slices of at most 50 ms. */
int data_follow_next(data_follow_t *f, const atomic_int *cancel, char **path);

void data_follow_stats(const data_follow_t *f, data_follow_stats_t *out);

/* The rolling test window: the newest (last in name order) n complete files
 * of dir, sorted, into *files (malloc'd array of malloc'd paths; the caller
 * frees each and the array). 0 with *nfiles >= 1; PSC_ENOTFOUND when dir
 * holds no complete file yet; PSC_EIO when it cannot be listed (err names
 * it). Thread-safe. */
int data_follow_newest(const char *dir, int n, char ***files, int *nfiles, char *err, size_t errlen);

#endif
