/* chunk.h — framing of psc.Chunk messages without copying the tensor bytes.
 *
 * A Chunk's `data` is its last field (number 15), so a sender packs the small
 * fields with protobuf-c, appends data's tag and length, and sends the tensor
 * bytes after that as a separate slice (rpc.h's op body): the result is valid
 * protobuf that any peer decodes with psc__chunk__unpack.
 */
#ifndef PSC_CHUNK_H
#define PSC_CHUNK_H

#include "psc.pb-c.h"

#include <stddef.h>
#include <stdint.h>

/* Upper bound of the header size for chunk c (data ignored) and data_len bytes. */
size_t psc_chunk_header_bound(const Psc__Chunk *c);
/* Packs c's fields except data, then data's tag and varint(data_len) into buf
 * (at least psc_chunk_header_bound bytes). Returns the bytes written. */
size_t psc_chunk_header_pack(const Psc__Chunk *c, size_t data_len, uint8_t *buf);

#endif
