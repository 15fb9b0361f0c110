/* test_wire — chunking of tensors and the zero-copy Chunk framing.
 *
 * Chunk arithmetic against hand-worked sizes; every chunking of a tensor covers
 * it exactly once in order; header + raw payload decodes as an ordinary
 * psc.Chunk with protobuf-c (so any peer can read what psc sends without copying).
 */
#include "chunk.h"
#include "wire.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define MiB ((uint64_t)1 << 20)

static void test_chunk_arithmetic(void **state)
{
    (void)state;
    assert_int_equal(PSC_CHUNK_BYTES, 2 * MiB);
    assert_int_equal(psc_chunk_count(0), 1);
    assert_int_equal(psc_chunk_count(4), 1);
    assert_int_equal(psc_chunk_count(2 * MiB), 1);
    assert_int_equal(psc_chunk_count(2 * MiB + 4), 2);
    assert_int_equal(psc_chunk_count(64 * MiB), 32);
    /* 5 MiB = 2 + 2 + 1 */
    assert_int_equal(psc_chunk_count(5 * MiB), 3);
    assert_int_equal(psc_chunk_len(5 * MiB, 0), 2 * MiB);
    assert_int_equal(psc_chunk_len(5 * MiB, 1), 2 * MiB);
    assert_int_equal(psc_chunk_len(5 * MiB, 2), 1 * MiB);
    assert_int_equal(psc_chunk_len(5 * MiB, 3), 0);
    assert_int_equal(psc_chunk_offset(2), 4 * MiB);
}

static void test_chunks_cover_tensor_once(void **state)
{
    (void)state;
    static const uint64_t totals[] = {4, 1000, 2 * MiB - 4, 2 * MiB, 2 * MiB + 4, 7 * MiB + 12, 64 * MiB};
    for (size_t t = 0; t < sizeof totals / sizeof totals[0]; t++) {
        uint64_t total = totals[t], next = 0;
        for (size_t k = 0; k < psc_chunk_count(total); k++) {
            assert_int_equal(psc_chunk_offset(k), next);
            size_t len = psc_chunk_len(total, k);
            assert_true(len > 0 && len <= PSC_CHUNK_BYTES);
            assert_true(psc_chunk_valid(total, next, len));
            next += len;
        }
        assert_int_equal(next, total);
    }
}

static void test_chunk_valid_rejects(void **state)
{
    (void)state;
    assert_false(psc_chunk_valid(5 * MiB, 4, 2 * MiB));          /* misaligned offset */
    assert_false(psc_chunk_valid(5 * MiB, 0, 2 * MiB - 4));      /* short middle chunk */
    assert_false(psc_chunk_valid(5 * MiB, 4 * MiB, 2 * MiB));    /* last chunk too long */
    assert_false(psc_chunk_valid(5 * MiB, 6 * MiB, 0));          /* past the end */
    assert_false(psc_chunk_valid(12, 0, 8));
    assert_true(psc_chunk_valid(12, 0, 12));
    assert_true(psc_chunk_valid(0, 0, 0));
}

static void roundtrip(size_t data_len, const char *name)
{
    uint8_t *data = malloc(data_len ? data_len : 1);
    for (size_t i = 0; i < data_len; i++) data[i] = (uint8_t)(i * 31 + 7);
    Psc__Chunk c = PSC__CHUNK__INIT;
    c.name = (char *)name;
    c.offset = 4 * MiB;
    c.total = 1234567890123ULL;
    c.version = 77;
    c.local_step = 9;
    c.worker = 3;
    uint8_t hdr[512];
    assert_true(psc_chunk_header_bound(&c) <= sizeof hdr);
    size_t hlen = psc_chunk_header_pack(&c, data_len, hdr);
    assert_true(hlen <= psc_chunk_header_bound(&c));
    uint8_t *msg = malloc(hlen + data_len);
    memcpy(msg, hdr, hlen);
    memcpy(msg + hlen, data, data_len);
    Psc__Chunk *d = psc__chunk__unpack(NULL, hlen + data_len, msg);
    assert_non_null(d);
    assert_string_equal(d->name, name);
    assert_int_equal(d->offset, c.offset);
    assert_int_equal(d->total, c.total);
    assert_int_equal(d->version, 77);
    assert_int_equal(d->local_step, 9);
    assert_int_equal(d->worker, 3);
    assert_int_equal(d->data.len, data_len);
    if (data_len) assert_memory_equal(d->data.data, data, data_len);
    /* The framing is what protobuf-c itself produces for the whole message. */
    c.data.data = data;
    c.data.len = data_len;
    size_t full = psc__chunk__get_packed_size(&c);
    assert_int_equal(full, hlen + data_len);
    uint8_t *ref = malloc(full);
    psc__chunk__pack(&c, ref);
    assert_memory_equal(ref, msg, full);
    psc__chunk__free_unpacked(d, NULL);
    /* Zero-copy decode of the whole message: data points into msg. */
    Psc__Chunk *h;
    const uint8_t *dp;
    size_t dl;
    assert_int_equal(psc_chunk_decode(msg, hlen + data_len, hlen + data_len, &h, &dp, &dl), 0);
    assert_string_equal(h->name, name);
    assert_int_equal(h->offset, c.offset);
    assert_int_equal(h->worker, 3);
    assert_int_equal(dl, data_len);
    if (data_len) assert_ptr_equal(dp, msg + hlen);
    psc__chunk__free_unpacked(h, NULL);
    /* Split decode (the header only; the data went elsewhere), as rpc.h's reply_body does. */
    if (data_len) {
        assert_int_equal(psc_chunk_decode(msg, hlen, hlen + data_len, &h, &dp, &dl), 0);
        assert_null(dp);
        assert_int_equal(dl, data_len);
        assert_int_equal(h->version, 77);
        psc__chunk__free_unpacked(h, NULL);
        /* a split that does not fall where the data begins is refused */
        assert_int_equal(psc_chunk_decode(msg, hlen - 1, hlen + data_len, &h, &dp, &dl), -1);
        assert_int_equal(psc_chunk_decode(msg, hlen + 1, hlen + data_len, &h, &dp, &dl), -1);
        /* truncated: data's declared length runs past the end */
        assert_int_equal(psc_chunk_decode(msg, hlen + data_len - 1, hlen + data_len - 1, &h, &dp, &dl), -1);
    }
    /* Prefix decode (the server's slices): any prefix that holds the header
     * gives the header and where the data lies; a shorter one is refused. */
    size_t off;
    for (size_t avail = hlen; avail <= hlen + (data_len < 40 ? data_len : 40); avail++) {
        assert_int_equal(psc_chunk_decode_prefix(msg, avail, hlen + data_len, &h, &off, &dl), 0);
        assert_string_equal(h->name, name);
        assert_int_equal(h->version, 77);
        assert_int_equal(off, hlen);
        assert_int_equal(dl, data_len);
        psc__chunk__free_unpacked(h, NULL);
    }
    if (data_len) assert_int_equal(psc_chunk_decode_prefix(msg, hlen - 1, hlen + data_len, &h, &off, &dl), -1);
    assert_int_equal(psc_chunk_decode_prefix(msg, 2, hlen + data_len, &h, &off, &dl), -1);
    free(ref);
    free(msg);
    free(data);
}

static void test_header_framing_roundtrip(void **state)
{
    (void)state;
    roundtrip(0, "global_step");
    roundtrip(4, "b");
    roundtrip(127, "dense/bias");   /* 1-byte varint length */
    roundtrip(128, "dense/kernel"); /* 2-byte varint length */
    roundtrip((size_t)PSC_CHUNK_BYTES, "dense/kernel/part_12");
}

static void test_decode_rejects(void **state)
{
    (void)state;
    Psc__Chunk *h;
    const uint8_t *dp;
    size_t dl;
    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(psc_chunk_decode(garbage, sizeof garbage, sizeof garbage, &h, &dp, &dl), -1);
    static const uint8_t bad_wire_type[] = {(1 << 3) | 3, 0};
    assert_int_equal(psc_chunk_decode(bad_wire_type, 2, 2, &h, &dp, &dl), -1);
    /* data followed by another field: valid protobuf, but not the zero-copy layout */
    Psc__Chunk c = PSC__CHUNK__INIT;
    c.name = (char *)"v";
    uint8_t buf[64];
    size_t n = psc_chunk_header_pack(&c, 2, buf);
    buf[n++] = 1;
    buf[n++] = 2;
    buf[n++] = (2 << 3) | 0; /* offset = 5 after data */
    buf[n++] = 5;
    assert_int_equal(psc_chunk_decode(buf, n, n, &h, &dp, &dl), -1);
    size_t off;
    assert_int_equal(psc_chunk_decode_prefix(buf, n, n, &h, &off, &dl), -1);
    Psc__Chunk *full = psc__chunk__unpack(NULL, n, buf); /* the server's fallback path */
    assert_non_null(full);
    assert_int_equal(full->offset, 5);
    psc__chunk__free_unpacked(full, NULL);
    /* an empty message is an empty Chunk */
    assert_int_equal(psc_chunk_decode(buf, 0, 0, &h, &dp, &dl), 0);
    assert_int_equal(dl, 0);
    psc__chunk__free_unpacked(h, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunk_arithmetic),
        cmocka_unit_test(test_chunks_cover_tensor_once),
        cmocka_unit_test(test_chunk_valid_rejects),
        cmocka_unit_test(test_header_framing_roundtrip),
        cmocka_unit_test(test_decode_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
