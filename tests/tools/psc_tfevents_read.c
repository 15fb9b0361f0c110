/* psc_tfevents_read — an independent reader of TensorBoard event files (its
 * own CRC32C and protobuf decoding; nothing from common/), for looking at the
 * scalars the chief and the evaluator write under --logdir without
 * TensorBoard. A user tool (installed with the programs; README "Tools"), also
 * used by the tests. Checks every record's framing (length, masked CRC32C of
 * the length and of the data) and prints one line per scalar: "STEP TAG
 * VALUE"; the first event must carry file_version "brain.Event:2".
 *
 *   psc_tfevents_read FILE      exit 0; 1 naming the first bad record (or an
 *                               empty or unreadable file); 64 usage
 *   psc_tfevents_read --help    usage on stdout, exit 0
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t crc32c(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    }
    return ~c;
}
static uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }
static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static int varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    *v = 0;
    for (int s = 0; s < 64 && *p < end; s += 7) {
        unsigned char b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}
/* Next field: number, wire type, and for length-delimited the payload. */
static int field(const unsigned char **p, const unsigned char *end, uint32_t *num, uint32_t *wt, uint64_t *v,
                 const unsigned char **data)
{
    uint64_t key;
    if (varint(p, end, &key)) return -1;
    *num = (uint32_t)(key >> 3);
    *wt = (uint32_t)(key & 7);
    switch (*wt) {
    case 0: return varint(p, end, v);
    case 1: if (end - *p < 8) return -1; *v = le(*p, 8); *p += 8; return 0;
    case 5: if (end - *p < 4) return -1; *v = le(*p, 4); *p += 4; return 0;
    case 2:
        if (varint(p, end, v) || (uint64_t)(end - *p) < *v) return -1;
        *data = *p;
        *p += *v;
        return 0;
    default: return -1;
    }
}

int main(int argc, char **argv)
{
    static const char usage[] =
        "usage: psc_tfevents_read FILE\n"
        "Reads a TensorBoard event file (events.out.tfevents.*, as the chief and the evaluator write under\n"
        "--logdir), checks every record's length and CRC32C, and prints each scalar as one line:\n"
        "  STEP TAG VALUE          e.g. \"120 loss 0.4312\"\n"
        "Exit codes: 0 every record good, 1 the first bad record named on stderr (or an empty or unreadable\n"
        "file), 64 usage.\n";
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-') {
        fputs(usage, stderr);
        return 64;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    unsigned char hdr[12];
    long rec = 0;
    while (fread(hdr, 1, 12, f) == 12) {
        uint64_t len = le(hdr, 8);
        if (masked(crc32c(hdr, 8)) != (uint32_t)le(hdr + 8, 4) || len > (1u << 26)) {
            fprintf(stderr, "record %ld: bad length CRC\n", rec);
            return 1;
        }
        unsigned char *d = malloc(len + 4);
        if (fread(d, 1, len + 4, f) != len + 4 || masked(crc32c(d, len)) != (uint32_t)le(d + len, 4)) {
            fprintf(stderr, "record %ld: truncated or bad data CRC\n", rec);
            return 1;
        }
        const unsigned char *p = d, *end = d + len, *data = NULL;
        int64_t step = 0;
        int have_version = 0;
        uint32_t num, wt;
        uint64_t v;
        while (p < end) {
            if (field(&p, end, &num, &wt, &v, &data)) {
                fprintf(stderr, "record %ld: bad protobuf\n", rec);
                return 1;
            }
            if (num == 2 && wt == 0) step = (int64_t)v;
            if (num == 3 && wt == 2) have_version = v == 13 && !memcmp(data, "brain.Event:2", 13);
            if (num == 5 && wt == 2) { /* Summary: repeated Value value = 1 */
                const unsigned char *q = data, *qe = data + v, *vd = NULL;
                uint64_t vv;
                while (q < qe) {
                    if (field(&q, qe, &num, &wt, &vv, &vd)) return 1;
                    if (num != 1 || wt != 2) continue;
                    const unsigned char *r = vd, *re = vd + vv, *td = NULL, *tag = NULL;
                    uint64_t tlen = 0, x;
                    float value = 0;
                    while (r < re) {
                        if (field(&r, re, &num, &wt, &x, &td)) return 1;
                        if (num == 1 && wt == 2) tag = td, tlen = x;
                        if (num == 2 && wt == 5) {
                            uint32_t bits = (uint32_t)x;
                            memcpy(&value, &bits, 4);
                        }
                    }
                    if (tag) printf("%lld %.*s %.9g\n", (long long)step, (int)tlen, (const char *)tag, (double)value);
                }
            }
        }
        if (rec == 0 && !have_version) {
            fprintf(stderr, "record 0: no file_version brain.Event:2\n");
            return 1;
        }
        free(d);
        rec++;
    }
    fclose(f);
    return rec > 0 ? 0 : 1;
}
