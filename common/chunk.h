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

/* Decodes a Chunk without copying its data. msg holds the first `avail` bytes of
 * a message of `total` bytes (avail == total for a whole message; avail < total
 * when the caller has the last total-avail bytes elsewhere, see rpc.h's
 * reply_body). The data field must be the message's last field and end exactly
 * at `total`, as every psc sender writes it; the header fields before it are
 * unpacked into *hdr (free with psc__chunk__free_unpacked; its data is empty)
 * and, if avail == total, *data points at the bytes inside msg. *data_len gets
 * data's length. Returns 0, or -1 if the message does not parse or its data is
 * not last. */
int psc_chunk_decode(const uint8_t *msg, size_t avail, size_t total, Psc__Chunk **hdr, const uint8_t **data,
                     size_t *data_len);

/* Decodes a Chunk whose first `avail` bytes (at least its header, up to and
 * including data's tag and length; any part of the data may follow) are in
 * msg, of a message of `total` bytes held elsewhere in pieces: the header
 * into *hdr as psc_chunk_decode does, and where the data lies: bytes
 * [*data_off, total), *data_len of them. Returns 0, or -1 if the header does
 * not parse, does not fit in avail, or data is not the last field. */
int psc_chunk_decode_prefix(const uint8_t *msg, size_t avail, size_t total, Psc__Chunk **hdr, size_t *data_off,
                            size_t *data_len);

#endif
