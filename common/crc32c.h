/* crc32c.h — CRC-32C (Castagnoli), the checksum of checkpoint tensors and manifests.
 *
 * Polynomial 0x1EDC6F41, reflected 0x82F63B78, initial value and final xor
 * 0xFFFFFFFF: the CRC of iSCSI, ext4, LevelDB/RocksDB and TFRecord. "123456789"
 * gives 0xE3069283.
 *
 * Two implementations behind one function: a portable table-driven slicing-by-8
 * (any byte order, any alignment), and on x86-64 the SSE4.2 crc32 instruction,
 * chosen once at run time by cpuid. Both give the same value for every input;
 * the unit test checks them against each other.
 *
 * All functions are pure and thread-safe (the tables are built once, under
 * pthread_once).
 */
#ifndef PSC_CRC32C_H
#define PSC_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of n bytes at data, continuing from crc: pass 0 to start, or the result
 * of a previous call to extend it, so that
 *   psc_crc32c(psc_crc32c(0, a, na), b, nb) == psc_crc32c(0, a ++ b, na + nb).
 * data may be NULL when n is 0. */
uint32_t psc_crc32c(uint32_t crc, const void *data, size_t n);

/* The portable slicing-by-8 path alone (what psc_crc32c uses without SSE4.2).
 * Exposed for tests and benchmarks. */
uint32_t psc_crc32c_portable(uint32_t crc, const void *data, size_t n);

/* 1 when psc_crc32c uses the SSE4.2 instruction on this machine, else 0. */
int psc_crc32c_accelerated(void);

/* Masked form for storing a CRC next to the data it covers (LevelDB, TFRecord):
 * a CRC computed over data that embeds CRCs is otherwise weak.
 * mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8; unmask inverts it. */
uint32_t psc_crc32c_mask(uint32_t crc);
uint32_t psc_crc32c_unmask(uint32_t masked);

#endif
