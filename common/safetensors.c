/* safetensors.c — see safetensors.h. */
#include "safetensors.h"

#include "bytes.h"
#include "psc.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int dtype_of(const char *s, enum psc_st_dtype *d)
{
    if (strcmp(s, "F32") == 0)
        *d = PSC_ST_F32;
    else if (strcmp(s, "I64") == 0)
        *d = PSC_ST_I64;
    else
        return -1;
    return 0;
}

/* One tensor entry of the header into t. */
static int parse_entry(const char *name, json_t *e, const uint8_t *data, uint64_t dlen, psc_st_tensor_t *t, char *err,
                       size_t errlen)
{
    if (strlen(name) == 0 || strlen(name) >= sizeof t->name)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "a tensor name of %zu bytes (1 to %zu)", strlen(name),
                          sizeof t->name - 1);
    snprintf(t->name, sizeof t->name, "%s", name);
    json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"),
           *off = json_object_get(e, "data_offsets");
    if (!json_is_object(e) || !json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) ||
        json_array_size(off) != 2)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "tensor %s: not {\"dtype\", \"shape\", \"data_offsets\": [b, e]}",
                          name);
    if (dtype_of(json_string_value(dt), &t->dtype))
        return psc_seterr(err, errlen, PSC_ECORRUPT, "tensor %s: dtype %.16s (psc reads F32 and I64)", name,
                          json_string_value(dt));
    if (json_array_size(sh) > PSC_MAX_RANK)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "tensor %s: rank %zu (at most %d)", name, json_array_size(sh),
                          PSC_MAX_RANK);
    t->rank = (int)json_array_size(sh);
    uint64_t numel = 1;
    for (int d = 0; d < t->rank; d++) {
        json_t *v = json_array_get(sh, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > ((json_int_t)1 << 40))
            return psc_seterr(err, errlen, PSC_ECORRUPT, "tensor %s: shape[%d] is not a size", name, d);
        t->shape[d] = json_integer_value(v);
        if (t->shape[d] && numel > (UINT64_MAX >> 4) / (uint64_t)t->shape[d])
            return psc_seterr(err, errlen, PSC_ECORRUPT, "tensor %s: its shape overflows", name);
        numel *= (uint64_t)t->shape[d];
    }
    json_t *b = json_array_get(off, 0), *en = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
        json_integer_value(en) < json_integer_value(b) || (uint64_t)json_integer_value(en) > dlen)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "tensor %s: data_offsets outside the %llu bytes of data", name,
                          (unsigned long long)dlen);
    uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(en);
    uint64_t want = numel * (t->dtype == PSC_ST_I64 ? 8 : 4);
    if (end - begin != want)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "tensor %s: %llu bytes of data for %llu elements of %s", name,
                          (unsigned long long)(end - begin), (unsigned long long)numel, psc_st_dtype_name(t->dtype));
    t->numel = numel;
    t->data = data + begin;
    return 0;
}

int psc_st_parse(const uint8_t *buf, size_t len, psc_st_file_t *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    if (len < 8) return psc_seterr(err, errlen, PSC_ECORRUPT, "%zu bytes: not even a header size", len);
    uint64_t n = psc_le_get64(buf);
    if (n > PSC_ST_MAX_HEADER || n > len - 8)
        return psc_seterr(err, errlen, PSC_ECORRUPT, "a header of %llu bytes in a file of %zu", (unsigned long long)n,
                          len);
    json_error_t jerr;
    json_t *h = json_loadb((const char *)buf + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!h || !json_is_object(h)) {
        json_decref(h);
        return psc_seterr(err, errlen, PSC_ECORRUPT, "the header is not a JSON object (%s)", h ? "" : jerr.text);
    }
    const uint8_t *data = buf + 8 + n;
    uint64_t dlen = len - 8 - n;
    f->t = psc_xcalloc(json_object_size(h) + 1, sizeof *f->t);
    const char *key;
    json_t *e;
    int rc = 0;
    json_object_foreach(h, key, e)
    {
        if (strcmp(key, "__metadata__") == 0) {
            json_t *j = json_object_get(e, "job_id");
            if (!json_is_object(e))
                rc = psc_seterr(err, errlen, PSC_ECORRUPT, "__metadata__ is not an object");
            else if (json_is_string(j))
                snprintf(f->job_id, sizeof f->job_id, "%s", json_string_value(j));
        } else {
            rc = parse_entry(key, e, data, dlen, &f->t[f->n], err, errlen);
            if (!rc) f->n++;
        }
        if (rc) break;
    }
    json_decref(h);
    if (rc) psc_st_free(f);
    return rc;
}

int psc_st_load(const char *path, psc_st_file_t *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return psc_seterr(err, errlen, PSC_EIO, "cannot open %s: %s", path, strerror(e));
    }
    size_t len = (size_t)st.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    int e = errno;
    close(fd);
    if (len && map == MAP_FAILED) return psc_seterr(err, errlen, PSC_EIO, "cannot map %s: %s", path, strerror(e));
    char why[512];
    int rc = psc_st_parse(map ? map : (const void *)"", len, f, why, sizeof why);
    if (rc) {
        if (map) munmap(map, len);
        return psc_seterr(err, errlen, rc, "%s is not a safetensors file psc reads: %s", path, why);
    }
    f->map = map;
    f->map_len = len;
    return 0;
}

const psc_st_tensor_t *psc_st_find(const psc_st_file_t *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

void psc_st_free(psc_st_file_t *f)
{
    free(f->t);
    if (f->map) munmap(f->map, f->map_len);
    memset(f, 0, sizeof *f);
}
