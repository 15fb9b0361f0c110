/* data_file.c — one data file read as a stream (reader_internal.h): plain
 * or gzip through zlib's gzread (which passes plain files through), or bytes
 * in memory (tests, fuzzers).
 *
 * One buffer holds the unread bytes buf[pos, end); a line is handed out in
 * place (its '\n' overwritten by a NUL), so a line costs one memchr and no
 * copy. A line that does not fit moves to the front and the buffer doubles
 * until it does: lines of any length. buf has one byte more than cap so the
 * last line of a file, without '\n', can be NUL-terminated too.
 *
 * Errors: I/O and gzip errors are PSC_EIO naming the file (they stop a
 * read); a binary read that ends inside its bytes is PSC_ECORRUPT without the
 * file name (the reader names the file and record).
 */
#include "reader_internal.h"

#include "psc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define DATA_FILE_BUF (256 * 1024) /* our buffer, and zlib's (gzbuffer) */
#define DATA_MEM_BUF 64            /* small for memory files: the fuzzers cross every refill path */

struct data_file {
    char *path;
    gzFile gz;                /* NULL: a memory file */
    const unsigned char *mem; /* memory file: its bytes, mem_pos read so far */
    size_t mem_len, mem_pos;
    char *buf;                /* cap + 1 bytes */
    size_t cap, pos, end;     /* unread: buf[pos, end) */
    int eof;                  /* the source gave its last byte */
    int64_t offset;           /* bytes consumed */
    int64_t lineno;
    int64_t record, record_off;
    void *state; /* the format's (data_file_set_state) */
    void (*state_free)(void *);
};

static data_file_t *file_new(const char *path, size_t cap)
{
    data_file_t *f = psc_xcalloc(1, sizeof *f);
    f->path = psc_xstrdup(path);
    f->cap = cap;
    f->buf = psc_xmalloc(cap + 1);
    return f;
}

int data_file_open(const char *path, data_file_t **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return psc_seterr(err, errlen, PSC_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int e = fstat(fd, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : 0;
    if (e) {
        close(fd);
        return psc_seterr(err, errlen, PSC_EIO, "%s: cannot read: %s", path, strerror(e));
    }
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        return psc_seterr(err, errlen, PSC_EIO, "%s: cannot open (zlib)", path);
    }
    gzbuffer(gz, DATA_FILE_BUF);
    data_file_t *f = file_new(path, DATA_FILE_BUF);
    f->gz = gz;
    *out = f;
    return 0;
}

int data_file_open_mem(const void *data, size_t len, const char *name, data_file_t **out, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    data_file_t *f = file_new(name, DATA_MEM_BUF);
    f->mem = data;
    f->mem_len = len;
    *out = f;
    return 0;
}

void data_file_close(data_file_t *f)
{
    if (!f) return;
    if (f->state_free) f->state_free(f->state);
    if (f->gz) gzclose(f->gz);
    free(f->buf);
    free(f->path);
    free(f);
}

const char *data_file_path(const data_file_t *f) { return f->path; }
int64_t data_file_offset(const data_file_t *f) { return f->offset; }
int64_t data_file_record(const data_file_t *f) { return f->record; }
int64_t data_file_record_offset(const data_file_t *f) { return f->record_off; }

void data_file_set_state(data_file_t *f, void *state, void (*free_fn)(void *))
{
    if (f->state_free) f->state_free(f->state);
    f->state = state;
    f->state_free = free_fn;
}

void *data_file_state(const data_file_t *f) { return f->state; }

void data_file_mark_record(data_file_t *f)
{
    f->record++;
    f->record_off = f->offset;
}

/* Up to n bytes from the source into dst: the count (0 at its end) or PSC_EIO. */
static ssize_t source_read(data_file_t *f, void *dst, size_t n, char *err, size_t errlen)
{
    if (!f->gz) {
        size_t k = f->mem_len - f->mem_pos < n ? f->mem_len - f->mem_pos : n;
        if (k) memcpy(dst, f->mem + f->mem_pos, k);
        f->mem_pos += k;
        return (ssize_t)k;
    }
    if (n > INT_MAX / 2) n = INT_MAX / 2;
    int got = gzread(f->gz, dst, (unsigned)n);
    if (got > 0) return got;
    /* 0 is the end of the file, unless zlib says the gzip stream broke off
     * there (Z_BUF_ERROR: a soft error that gzread reports only this way) */
    int zerr = Z_OK;
    const char *msg = gzerror(f->gz, &zerr);
    if (got == 0 && zerr != Z_BUF_ERROR) return 0;
    if (zerr == Z_ERRNO) return psc_seterr(err, errlen, PSC_EIO, "%s: read error: %s", f->path, strerror(errno));
    /* zlib prefixes its message with the name given to gzdopen ("<fd:8>: "): the path is ours */
    const char *colon = msg && msg[0] == '<' ? strstr(msg, ">: ") : NULL;
    if (colon) msg = colon + 3;
    return psc_seterr(err, errlen, PSC_EIO, "%s: corrupt or truncated gzip data (%s)", f->path, msg);
}

/* Moves the unread bytes to the front (doubling the buffer when it is full of
 * them) and reads more behind them. 0 (f->eof set at the end) or PSC_EIO. */
static int fill(data_file_t *f, char *err, size_t errlen)
{
    if (f->pos > 0) {
        memmove(f->buf, f->buf + f->pos, f->end - f->pos);
        f->end -= f->pos;
        f->pos = 0;
    }
    if (f->end == f->cap) {
        f->cap *= 2;
        f->buf = psc_xrealloc(f->buf, f->cap + 1);
    }
    ssize_t got = source_read(f, f->buf + f->end, f->cap - f->end, err, errlen);
    if (got < 0) return (int)got;
    if (got == 0) f->eof = 1;
    f->end += (size_t)got;
    return 0;
}

ssize_t data_file_line(data_file_t *f, char **line, int64_t *lineno, char *err, size_t errlen)
{
    size_t scanned = 0; /* bytes after pos known to hold no '\n' */
    for (;;) {
        char *start = f->buf + f->pos;
        char *nl = memchr(start + scanned, '\n', f->end - f->pos - scanned);
        size_t len, used;
        if (nl) {
            len = (size_t)(nl - start);
            used = len + 1;
        } else if (f->eof) {
            if (f->pos == f->end) return -1;
            len = used = f->end - f->pos; /* a last line without '\n' */
        } else {
            scanned = f->end - f->pos;
            int rc = fill(f, err, errlen);
            if (rc < 0) return rc;
            continue;
        }
        start[len] = '\0'; /* the '\n', or buf[end] of the cap + 1 bytes */
        if (len > 0 && start[len - 1] == '\r') start[--len] = '\0';
        f->pos += used;
        f->offset += (int64_t)used;
        f->record = ++f->lineno;
        f->record_off = f->offset - (int64_t)used;
        *line = start;
        if (lineno) *lineno = f->lineno;
        return (ssize_t)len;
    }
}

int data_file_at_end(data_file_t *f, char *err, size_t errlen)
{
    while (f->pos == f->end && !f->eof) {
        int rc = fill(f, err, errlen);
        if (rc < 0) return rc;
    }
    return f->pos == f->end;
}

int data_file_read(data_file_t *f, void *buf, size_t n, char *err, size_t errlen)
{
    unsigned char *dst = buf;
    size_t done = 0;
    while (done < n) {
        if (f->pos == f->end) {
            if (f->eof) break;
            if (n - done >= f->cap) { /* a large read bypasses the buffer */
                ssize_t got = source_read(f, dst + done, n - done, err, errlen);
                if (got < 0) return (int)got;
                if (got == 0) f->eof = 1;
                done += (size_t)got;
                continue;
            }
            int rc = fill(f, err, errlen);
            if (rc < 0) return rc;
            continue;
        }
        size_t k = f->end - f->pos < n - done ? f->end - f->pos : n - done;
        memcpy(dst + done, f->buf + f->pos, k);
        f->pos += k;
        done += k;
    }
    f->offset += (int64_t)done;
    if (done == n) return 1;
    if (done == 0) return 0;
    return psc_seterr(err, errlen, PSC_ECORRUPT, "truncated: the file ends %zu bytes into a %zu-byte read", done, n);
}

void data_quote(char *dst, size_t dstlen, const char *p, size_t len)
{
    if (!dstlen) return;
    size_t o = 0, shown = len > 40 ? 40 : len;
    for (size_t i = 0; i < shown && o + 5 < dstlen; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            dst[o++] = (char)c;
        } else {
            snprintf(dst + o, dstlen - o, "\\x%02x", c);
            o += 4;
        }
    }
    if (shown < len && o + 4 < dstlen) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o] = '\0';
}
