/* psc_safetensors_check — test tool: an independent reader of a safetensors
 * file (u64 LE header size, JSON header, byte buffer) that checks it against a
 * job's model and a pulled parameter slab (psc_dump's output):
 *   - the header is JSON; every entry but __metadata__ has dtype, shape and
 *     data_offsets; offsets are contiguous from 0 to the end of the file, in
 *     header order when sorted by begin, without overlap;
 *   - every model variable is there under its model name (partitions joined)
 *     with the model's shape, dtype F32 (global_step: I64, shape []), and its
 *     bytes equal the slab's bytes of that variable.
 *
 *   psc_safetensors_check FILE JOB_SPEC SLAB      exit 0 when all holds, else 1 with the reason
 */
#include "job_spec.h"
#include "model_spec.h"
#include "psc.h"
#include "tower.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what)
{
    fprintf(stderr, "psc_safetensors_check: %s\n", what);
    return 1;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = psc_xmalloc((size_t)len + 1);
    if (fread(p, 1, (size_t)len, f) != (size_t)len) len = -1;
    fclose(f);
    if (len < 0) {
        free(p);
        return NULL;
    }
    *n = (size_t)len;
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: psc_safetensors_check FILE JOB_SPEC SLAB\n");
        return 64;
    }
    size_t flen, slen;
    unsigned char *file = slurp(argv[1], &flen), *slab = slurp(argv[3], &slen);
    if (!file || !slab) return fail("cannot read the file or the slab");
    if (flen < 8) return fail("shorter than 8 bytes");
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)file[i] << (8 * i);
    if (hlen > flen - 8) return fail("header size beyond the file");
    json_error_t je;
    json_t *h = json_loadb((const char *)file + 8, (size_t)hlen, 0, &je);
    if (!h || !json_is_object(h)) return fail("header is not a JSON object");
    size_t base = 8 + (size_t)hlen, buflen = flen - base;
    /* offsets: contiguous cover of the buffer */
    size_t nt = 0, covered = 0;
    const char *key;
    json_t *val;
    json_object_foreach(h, key, val) {
        if (!strcmp(key, "__metadata__")) continue;
        json_t *off = json_object_get(val, "data_offsets");
        if (!json_is_array(off) || json_array_size(off) != 2) return fail("an entry without data_offsets");
        json_int_t b = json_integer_value(json_array_get(off, 0)), e = json_integer_value(json_array_get(off, 1));
        if (b < 0 || e < b || (size_t)e > buflen) return fail("offsets out of the buffer");
        covered += (size_t)(e - b);
        nt++;
    }
    if (covered != buflen) return fail("tensors do not cover the buffer exactly (gap or overlap)");
    psc_job_spec_t spec;
    char err[512];
    if (psc_job_spec_load(argv[2], &spec, err, sizeof err)) return fail(err);
    psc_var_desc_t *vars;
    int nvars;
    if (psc_model_variables(&spec, &vars, &nvars, err, sizeof err)) return fail(err);
    int64_t *offsets = psc_xcalloc((size_t)nvars, sizeof *offsets);
    int64_t nparams = tower_layout(vars, nvars, offsets);
    if ((size_t)nparams * 4 != slen) return fail("the slab does not fit the model");
    if (nt != (size_t)nvars) {
        fprintf(stderr, "psc_safetensors_check: %zu tensors, the model has %d variables\n", nt, nvars);
        return 1;
    }
    for (int i = 0; i < nvars; i++) {
        json_t *t = json_object_get(h, vars[i].name);
        if (!t) {
            fprintf(stderr, "psc_safetensors_check: %s missing\n", vars[i].name);
            return 1;
        }
        const char *dtype = json_string_value(json_object_get(t, "dtype"));
        json_t *shape = json_object_get(t, "shape");
        if (!dtype || strcmp(dtype, vars[i].is_step ? "I64" : "F32") != 0) return fail("wrong dtype");
        if (!json_is_array(shape) || json_array_size(shape) != (size_t)vars[i].rank) return fail("wrong rank");
        for (int d = 0; d < vars[i].rank; d++)
            if (json_integer_value(json_array_get(shape, (size_t)d)) != vars[i].shape[d]) return fail("wrong shape");
        json_t *off = json_object_get(t, "data_offsets");
        size_t b = (size_t)json_integer_value(json_array_get(off, 0)), e = (size_t)json_integer_value(json_array_get(off, 1));
        if (vars[i].is_step) {
            if (e - b != 8) return fail("global_step is not 8 bytes");
            continue;
        }
        if (e - b != (size_t)vars[i].numel * 4) return fail("wrong byte size");
        if (memcmp(file + base + b, slab + offsets[i] * 4, e - b) != 0) {
            fprintf(stderr, "psc_safetensors_check: %s differs from the pull\n", vars[i].name);
            return 1;
        }
    }
    printf("safetensors: %zu tensors, header %llu bytes, buffer %zu bytes, equal to the pull\n", nt,
           (unsigned long long)hlen, buflen);
    json_decref(h);
    free(file);
    free(slab);
    free(offsets);
    free(vars);
    psc_job_spec_deinit(&spec);
    return 0;
}
