/* test_safetensors — the safetensors reader (common/safetensors.h): a file
 * the export's header writer makes reads back tensor by tensor (names,
 * dtypes, shapes, bytes, the job id), and every malformed file is refused
 * with the problem named: short, a header size beyond the file, not JSON,
 * an unknown dtype, a rank too large, offsets outside the data, a size that
 * does not match the shape, a missing file.
 */
#include "bytes.h"
#include "export.h"
#include "psc.h"
#include "safetensors.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* A file of header text h (padded to 8) and data bytes d. */
static uint8_t *file_of(const char *h, const void *d, size_t dlen, size_t *len)
{
    size_t n = strlen(h), pad = (8 - n % 8) % 8;
    *len = 8 + n + pad + dlen;
    uint8_t *f = malloc(*len);
    psc_le_put64(f, n + pad);
    memcpy(f + 8, h, n);
    memset(f + 8 + n, ' ', pad);
    if (dlen) memcpy(f + 8 + n + pad, d, dlen);
    return f;
}

static void test_roundtrip(void **state)
{
    (void)state;
    psc_export_tensor_t t[2];
    memset(t, 0, sizeof t);
    snprintf(t[0].name, sizeof t[0].name, "global_step");
    t[0].dtype = PSC_ST_I64;
    t[0].bytes = 8;
    snprintf(t[1].name, sizeof t[1].name, "dense/kernel");
    t[1].dtype = PSC_ST_F32;
    t[1].rank = 2;
    t[1].shape[0] = 2;
    t[1].shape[1] = 3;
    t[1].bytes = 24;
    assert_int_equal(psc_export_layout(t, 2, NULL, 0), 0);
    const char *keys[] = {"job_id", "global_step"}, *vals[] = {"00112233aabbccdd", "7"};
    size_t hlen;
    char *h = psc_safetensors_header(t, 2, keys, vals, 2, &hlen);
    uint8_t data[32];
    psc_le_put64(data, 7);
    for (int i = 0; i < 6; i++) {
        float v = (float)i + 0.5f;
        memcpy(data + 8 + 4 * i, &v, 4);
    }
    size_t len;
    uint8_t *f = file_of(h, data, sizeof data, &len);
    psc_st_file_t st;
    char err[256];
    assert_int_equal(psc_st_parse(f, len, &st, err, sizeof err), 0);
    assert_int_equal(st.n, 2);
    assert_string_equal(st.job_id, "00112233aabbccdd");
    const psc_st_tensor_t *k = psc_st_find(&st, "dense/kernel"), *g = psc_st_find(&st, "global_step");
    assert_non_null(k);
    assert_non_null(g);
    assert_null(psc_st_find(&st, "dense/bias"));
    assert_int_equal(k->dtype, PSC_ST_F32);
    assert_int_equal(k->rank, 2);
    assert_int_equal(k->shape[1], 3);
    assert_int_equal(k->numel, 6);
    float v;
    memcpy(&v, k->data + 20, 4);
    assert_true(v == 5.5f);
    assert_int_equal(g->rank, 0);
    assert_int_equal(psc_le_get64(g->data), 7);
    psc_st_free(&st);
    free(f);
    free(h);
}

static void refused(const char *header, size_t dlen, const char *why)
{
    uint8_t data[64] = {0};
    size_t len;
    uint8_t *f = file_of(header, data, dlen, &len);
    psc_st_file_t st;
    char err[256] = "";
    assert_int_equal(psc_st_parse(f, len, &st, err, sizeof err), PSC_ECORRUPT);
    if (!strstr(err, why)) fail_msg("%s: got \"%s\", expected \"%s\"", header, err, why);
    assert_int_equal(st.n, 0);
    assert_null(st.t);
    free(f);
}

static void test_refusals(void **state)
{
    (void)state;
    psc_st_file_t st;
    char err[256];
    assert_int_equal(psc_st_parse((const uint8_t *)"abc", 3, &st, err, sizeof err), PSC_ECORRUPT);
    assert_non_null(strstr(err, "not even a header size"));
    uint8_t big[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
    assert_int_equal(psc_st_parse(big, sizeof big, &st, err, sizeof err), PSC_ECORRUPT);
    assert_non_null(strstr(err, "a header of 65535 bytes in a file of 16"));
    refused("[1, 2]", 0, "not a JSON object");
    refused("{\"a\": {\"dtype\": \"F16\", \"shape\": [1], \"data_offsets\": [0, 2]}}", 2, "tensor a: dtype F16");
    refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4, "rank 5");
    refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 16]}}", 8, "outside the 8 bytes");
    refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8, "8 bytes of data for 3");
    refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 0]}}", 0, "shape[0] is not a size");
    refused("{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "tensor a: not {");
    refused("{\"__metadata__\": 3}", 0, "__metadata__ is not an object");
    refused("{\"a\": {\"dtype\": \"I64\", \"shape\": [1099511627776, 1099511627776], \"data_offsets\": [0, 8]}}", 8,
            "overflows");
    assert_int_equal(psc_st_load("/nonexistent/x.safetensors", &st, err, sizeof err), PSC_EIO);
    assert_non_null(strstr(err, "cannot open /nonexistent/x.safetensors"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_roundtrip), cmocka_unit_test(test_refusals)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
