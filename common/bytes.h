/* SPDX-License-Identifier: Apache-2.0 */
/* Little-endian readers bounded by an end pointer, and a growable write buffer. */
#ifndef SYSOM_COMMON_BYTES_H
#define SYSOM_COMMON_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * A reader over [base, end). Every read checks the end pointer first; on overrun it returns
 * false and leaves the position unchanged, so the caller can report where decoding stopped.
 */
struct byte_reader {
	const uint8_t *base; /* start of the whole input: offsets in errors are relative to it */
	const uint8_t *pos;  /* next byte to read */
	const uint8_t *end;  /* one past the last readable byte */
};

static inline void byte_reader_init(struct byte_reader *r, const void *data, size_t len)
{
	r->base = data;
	r->pos = data;
	r->end = r->pos + len;
}

static inline size_t byte_reader_offset(const struct byte_reader *r)
{
	return (size_t)(r->pos - r->base);
}

static inline size_t byte_reader_left(const struct byte_reader *r)
{
	return (size_t)(r->end - r->pos);
}

static inline bool byte_reader_bytes(struct byte_reader *r, void *out, size_t len)
{
	if (byte_reader_left(r) < len)
		return false;
	memcpy(out, r->pos, len);
	r->pos += len;
	return true;
}

static inline bool byte_reader_skip(struct byte_reader *r, size_t len)
{
	if (byte_reader_left(r) < len)
		return false;
	r->pos += len;
	return true;
}

/*
 * Copies `len` bytes of untrusted `src` as one line of printable text into `dst` (`dstlen` >= 1):
 * control characters become spaces, the copy is truncated to fit and NUL-terminated.
 */
void sysom_text_sanitize(char *dst, size_t dstlen, const void *src, size_t len);

/* Value of a hex digit (either case), or -1. */
static inline int sysom_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static inline uint16_t load_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static inline uint32_t load_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t load_le64(const uint8_t *p)
{
	return (uint64_t)load_le32(p) | (uint64_t)load_le32(p + 4) << 32;
}

static inline void store_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void store_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void store_le64(uint8_t *p, uint64_t v)
{
	store_le32(p, (uint32_t)v);
	store_le32(p + 4, (uint32_t)(v >> 32));
}

static inline bool byte_reader_u8(struct byte_reader *r, uint8_t *out)
{
	return byte_reader_bytes(r, out, 1);
}

static inline bool byte_reader_u16(struct byte_reader *r, uint16_t *out)
{
	if (byte_reader_left(r) < 2)
		return false;
	*out = load_le16(r->pos);
	r->pos += 2;
	return true;
}

static inline bool byte_reader_u32(struct byte_reader *r, uint32_t *out)
{
	if (byte_reader_left(r) < 4)
		return false;
	*out = load_le32(r->pos);
	r->pos += 4;
	return true;
}

static inline bool byte_reader_u64(struct byte_reader *r, uint64_t *out)
{
	if (byte_reader_left(r) < 8)
		return false;
	*out = load_le64(r->pos);
	r->pos += 8;
	return true;
}

/*
 * A growable output buffer. Appends never fail individually: an allocation failure (or a
 * size beyond `limit`, when nonzero) makes the buffer sticky-failed and `byte_buf_error`
 * returns the negative errno, so encoders check once at the end.
 */
struct byte_buf {
	uint8_t *data; /* owned; NULL until the first append */
	size_t len;
	size_t cap;
	size_t limit; /* 0: unlimited */
	int error;    /* 0, -ENOMEM or -E2BIG once an append failed */
};

/* Reserves room for `extra` more bytes; returns the write position or NULL (buffer failed). */
uint8_t *byte_buf_reserve(struct byte_buf *b, size_t extra);
void byte_buf_append(struct byte_buf *b, const void *data, size_t len);
void byte_buf_put_u8(struct byte_buf *b, uint8_t v);
void byte_buf_put_u16(struct byte_buf *b, uint16_t v);
void byte_buf_put_u32(struct byte_buf *b, uint32_t v);
void byte_buf_put_u64(struct byte_buf *b, uint64_t v);
/* Appends printf output (text buffers: HTTP responses, folded stacks). */
void byte_buf_printf(struct byte_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 0 or the sticky negative errno. */
static inline int byte_buf_error(const struct byte_buf *b)
{
	return b->error;
}
/* Hands the data to the caller (who frees it) and resets the buffer. */
uint8_t *byte_buf_steal(struct byte_buf *b, size_t *len);
/* Frees the data; accepts NULL. */
void byte_buf_free(struct byte_buf *b);

#endif
