/* ckpt_fixture.h — what the checkpoint store's unit tests share (test_ckpt.c,
 * test_ckpt_disk.c): tensors whose bytes are a function of (id, name), a
 * shard of them saved and checked, the store's listing, and the checks of an
 * error's code and message. Include once, in a test file. */
#ifndef PSC_CKPT_FIXTURE_H
#define PSC_CKPT_FIXTURE_H

#include "ckpt.h"
#include "crc32c.h"
#include "psc.h"

#include <ftw.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#define MiB ((size_t)1 << 20)
#define JOB "1a2b3c4d5e6f7a8b"
#define OTHER_JOB "3c4d000000000000"

/* ---- deterministic tensor contents: a function of (id, name) ---- */

__attribute__((unused)) static void fill(void *dst, size_t n, uint64_t id, const char *name)
{
    uint64_t x = 0x9E3779B97F4A7C15ull ^ (id * 0xff51afd7ed558ccdull);
    for (const char *s = name; *s; s++) x = (x ^ (unsigned char)*s) * 0x100000001b3ull;
    unsigned char *p = dst;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)(x >> 32);
    }
}

/* The standard shard: global_step first (holding step), as the PS saves it. */
typedef struct tspec {
    const char *name;
    size_t len;
} tspec_t;

static const tspec_t SHARD[] = {
    {"global_step", 8},
    {"dense/kernel", 784 * 128 * 4},
    {"dense/kernel/slot:m", 784 * 128 * 4},
    {"dense/bias", 128 * 4},
    {"big/kernel", 5 * MiB},
    {"empty", 0},
};
#define NSHARD ((int)PSC_ARRAY_LEN(SHARD))

__attribute__((unused)) static void *tensor_bytes(uint64_t id, int64_t step, const char *name, size_t len)
{
    unsigned char *p = malloc(len ? len : 1);
    assert_non_null(p);
    if (strcmp(name, "global_step") == 0)
        memcpy(p, &step, 8);
    else
        fill(p, len, id, name);
    return p;
}

__attribute__((unused)) static void add_shard(ckpt_writer_t *w, uint64_t id, int64_t step, int small)
{
    for (int i = 0; i < NSHARD; i++) {
        size_t len = small && SHARD[i].len > 4096 ? 4096 : SHARD[i].len;
        void *b = tensor_bytes(id, step, SHARD[i].name, len);
        assert_int_equal(ckpt_add(w, SHARD[i].name, b, len), 0);
        free(b);
    }
}

__attribute__((unused)) static void save(ckpt_db_t *db, uint64_t id, const char *job, int64_t step, int small)
{
    char err[512] = "";
    ckpt_writer_t *w = ckpt_begin(db, id, job, step);
    add_shard(w, id, step, small);
    int rc = ckpt_prepare(w, err, sizeof err);
    if (rc) fail_msg("prepare %" PRIu64 ": %s", id, err);
}

__attribute__((unused)) static void save_commit(ckpt_db_t *db, uint64_t id, const char *job, int64_t step, int keep)
{
    char err[512] = "";
    save(db, id, job, step, 1);
    int rc = ckpt_commit(db, id, keep, err, sizeof err);
    if (rc) fail_msg("commit %" PRIu64 ": %s", id, err);
}

/* Reads every tensor of the shard back and compares bit for bit. */
__attribute__((unused)) static void expect_shard(ckpt_db_t *db, uint64_t id, int64_t step, int small)
{
    char err[512] = "";
    for (int i = 0; i < NSHARD; i++) {
        size_t want_len = small && SHARD[i].len > 4096 ? 4096 : SHARD[i].len;
        void *want = tensor_bytes(id, step, SHARD[i].name, want_len);
        void *got = NULL;
        size_t len = 12345;
        int rc = ckpt_read(db, id, SHARD[i].name, &got, &len, err, sizeof err);
        if (rc) fail_msg("read %" PRIu64 " %s: %s", id, SHARD[i].name, err);
        assert_non_null(got);
        assert_int_equal(len, want_len);
        if (len) assert_memory_equal(got, want, len);
        free(got);
        free(want);
    }
}

/* Ids of ckpt_list, as a string "1p 2c ..." (p = prepared, c = committed). */
__attribute__((unused)) static void list_ids(ckpt_db_t *db, char *buf, size_t n)
{
    char err[512] = "";
    ckpt_info_t *info;
    int cnt;
    int rc = ckpt_list(db, &info, &cnt, err, sizeof err);
    if (rc) fail_msg("list: %s", err);
    buf[0] = 0;
    size_t off = 0;
    for (int i = 0; i < cnt; i++) {
        if (i) assert_true(info[i - 1].id < info[i].id);
        off += (size_t)snprintf(buf + off, n - off, "%s%" PRIu64 "%c", i ? " " : "", info[i].id,
                                info[i].committed ? 'c' : 'p');
    }
    free(info);
}

#define EXPECT_LIST(db, want)                                                                 \
    do {                                                                                      \
        char got_[256];                                                                       \
        list_ids((db), got_, sizeof got_);                                                    \
        if (strcmp(got_, (want)) != 0) fail_msg("list \"%s\", want \"%s\"", got_, (want)); \
    } while (0)

/* call must return code and leave a message containing msg in err. */
#define EXPECT_ERR(code, msg, call)                                                                 \
    do {                                                                                            \
        err[0] = 0;                                                                                 \
        int rc_ = (call);                                                                           \
        if (rc_ != (code))                                                                          \
            fail_msg("%s: rc %d (%s), want %d; err \"%s\"", #call, rc_, psc_strerror(rc_), (code), err); \
        if (!strstr(err, (msg))) fail_msg("%s: err \"%s\" lacks \"%s\"", #call, err, (msg));         \
    } while (0)

__attribute__((unused)) static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

#endif
