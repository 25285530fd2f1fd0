/* SPDX-License-Identifier: Apache-2.0 */
/*
 * LEB128 varints and zigzag deltas, as the stored blobs (server/store/nccl_chunk.h,
 * nccl_instance.h) write them: 7 bits a byte, low first, at most 10 bytes; a signed
 * difference as zigzag (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...).
 */
#ifndef SYSOM_COMMON_VARINT_H
#define SYSOM_COMMON_VARINT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/bytes.h"

#define SYSOM_VARINT_MAX 10 /* bytes of a 64-bit varint */

/* Writes `v` at `p` (room for SYSOM_VARINT_MAX bytes); returns the byte after it. */
static inline uint8_t *sysom_varint_write(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

/* Appends `v` to `b` (a failed append is b's error). */
static inline void sysom_varint_put(struct byte_buf *b, uint64_t v)
{
	uint8_t tmp[SYSOM_VARINT_MAX];

	byte_buf_append(b, tmp, (size_t)(sysom_varint_write(tmp, v) - tmp));
}

/* A wrapping difference as zigzag, and back. */
static inline uint64_t sysom_zigzag(uint64_t wrapping_difference)
{
	int64_t d = (int64_t)wrapping_difference;
	return ((uint64_t)d << 1) ^ (uint64_t)(d >> 63);
}

static inline uint64_t sysom_unzigzag(uint64_t z)
{
	return (z >> 1) ^ (0 - (z & 1));
}

/* Reads a varint of at most 10 bytes whose value fits 64 bits; false when the input ends
 * first or it is longer or larger. */
static inline bool sysom_varint_read(struct byte_reader *r, uint64_t *out)
{
	uint64_t v = 0;

	for (int shift = 0; shift < 70; shift += 7) {
		uint8_t byte;
		if (!byte_reader_u8(r, &byte))
			return false;
		if (shift == 63 && byte > 1)
			return false; /* past 64 bits */
		v |= (uint64_t)(byte & 0x7f) << shift;
		if (!(byte & 0x80)) {
			*out = v;
			return true;
		}
	}
	return false;
}

#endif
