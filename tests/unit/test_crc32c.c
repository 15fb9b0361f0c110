/* test_crc32c — CRC-32C against published vectors and a bit-at-a-time reference.
 *
 * Vectors: the check value of "123456789" and the RFC 3720 (iSCSI) B.4 vectors.
 * Every path (the dispatched psc_crc32c, the portable slicing-by-8, and so SSE4.2
 * where the CPU has it) must equal a one-bit-at-a-time reference on random data
 * at every start offset 0..15 and lengths around the 8-byte step; any split
 * point of a buffer chains to the one-shot value; mask/unmask follow LevelDB.
 */
#include "crc32c.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* The definition, one bit at a time: the reference the fast paths must equal. */
static uint32_t crc_ref(uint32_t crc, const unsigned char *p, size_t n)
{
    uint32_t s = ~crc;
    for (size_t i = 0; i < n; i++) {
        s ^= p[i];
        for (int k = 0; k < 8; k++) s = (s & 1) ? (s >> 1) ^ 0x82F63B78u : s >> 1;
    }
    return ~s;
}

static void fill_random(unsigned char *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)(x >> 24);
    }
}

static void expect_both(const void *data, size_t n, uint32_t want)
{
    assert_int_equal(psc_crc32c(0, data, n), want);
    assert_int_equal(psc_crc32c_portable(0, data, n), want);
    assert_int_equal(crc_ref(0, data, n), want);
}

static void test_vectors(void **state)
{
    (void)state;
    unsigned char buf[48];

    expect_both("123456789", 9, 0xE3069283u);
    memset(buf, 0, 32);
    expect_both(buf, 32, 0x8A9136AAu);
    memset(buf, 0xff, 32);
    expect_both(buf, 32, 0x62A8AB43u);
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
    expect_both(buf, 32, 0x46DD794Eu);
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
    expect_both(buf, 32, 0x113FDB5Cu);
    /* RFC 3720 B.4: an iSCSI read command PDU. */
    static const unsigned char iscsi[48] = {
        0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
        0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    };
    expect_both(iscsi, sizeof iscsi, 0xD9963A56u);
    /* Empty input leaves the CRC as it was, NULL allowed. */
    assert_int_equal(psc_crc32c(0, NULL, 0), 0);
    assert_int_equal(psc_crc32c(0x12345678u, NULL, 0), 0x12345678u);
    assert_int_equal(psc_crc32c_portable(0x12345678u, NULL, 0), 0x12345678u);
    print_message("crc32c: SSE4.2 path %s\n", psc_crc32c_accelerated() ? "in use" : "not available");
}

/* Every start offset 0..15 and lengths 0..70 (all residues of the 8-byte step),
 * plus a few long ones, against the reference: both fast paths. */
static void test_unaligned_against_reference(void **state)
{
    (void)state;
    enum { N = 1 << 16 };
    unsigned char *buf = malloc(N + 16);
    assert_non_null(buf);
    fill_random(buf, N + 16, 7);
    for (size_t off = 0; off < 16; off++) {
        for (size_t n = 0; n <= 70; n++) {
            uint32_t want = crc_ref(0, buf + off, n);
            assert_int_equal(psc_crc32c(0, buf + off, n), want);
            assert_int_equal(psc_crc32c_portable(0, buf + off, n), want);
        }
        size_t longs[] = {1000, 4093, N - 1, N};
        for (size_t k = 0; k < sizeof longs / sizeof longs[0]; k++) {
            uint32_t want = crc_ref(0, buf + off, longs[k]);
            assert_int_equal(psc_crc32c(0, buf + off, longs[k]), want);
            assert_int_equal(psc_crc32c_portable(0, buf + off, longs[k]), want);
        }
    }
    free(buf);
}

/* Chaining at every split point equals the one-shot CRC, on both paths and
 * across them (a portable prefix continued by the dispatched path). */
static void test_chaining(void **state)
{
    (void)state;
    unsigned char buf[257];
    fill_random(buf, sizeof buf, 99);
    uint32_t whole = crc_ref(0, buf, sizeof buf);
    for (size_t cut = 0; cut <= sizeof buf; cut++) {
        uint32_t a = psc_crc32c(0, buf, cut);
        assert_int_equal(psc_crc32c(a, buf + cut, sizeof buf - cut), whole);
        uint32_t b = psc_crc32c_portable(0, buf, cut);
        assert_int_equal(b, a);
        assert_int_equal(psc_crc32c_portable(b, buf + cut, sizeof buf - cut), whole);
        assert_int_equal(psc_crc32c(b, buf + cut, sizeof buf - cut), whole);
    }
    /* Three pieces, one of them empty. */
    uint32_t c = psc_crc32c(0, "1234", 4);
    c = psc_crc32c(c, "", 0);
    c = psc_crc32c(c, "56789", 5);
    assert_int_equal(c, 0xE3069283u);
    /* Byte by byte. */
    c = 0;
    for (size_t i = 0; i < sizeof buf; i++) c = psc_crc32c(c, buf + i, 1);
    assert_int_equal(c, whole);
}

static void test_mask(void **state)
{
    (void)state;
    assert_int_equal(psc_crc32c_mask(0), 0xa282ead8u);
    assert_int_equal(psc_crc32c_mask(0xE3069283u), 0xC78AB0E5u);
    uint32_t x = 1;
    for (int i = 0; i < 1000; i++) {
        x = x * 1664525u + 1013904223u;
        uint32_t m = psc_crc32c_mask(x);
        assert_int_equal((m - 0xa282ead8u), (x >> 15) | (x << 17));
        assert_int_equal(psc_crc32c_unmask(m), x);
        /* Masking twice is not masking once (LevelDB's test). */
        assert_int_not_equal(psc_crc32c_mask(m), m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_unaligned_against_reference),
        cmocka_unit_test(test_chaining),
        cmocka_unit_test(test_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
