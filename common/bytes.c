/* SPDX-License-Identifier: Apache-2.0 */
/* Growable output buffer with a sticky error. */
#include "common/bytes.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

uint8_t *byte_buf_reserve(struct byte_buf *b, size_t extra)
{
	if (b->error)
		return NULL;
	if (extra > SIZE_MAX - b->len || (b->limit && b->len + extra > b->limit)) {
		b->error = -E2BIG;
		return NULL;
	}
	size_t need = b->len + extra;
	if (need > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < need)
			cap = cap > SIZE_MAX / 2 ? need : cap * 2;
		/* Never reserve past the limit: a bounded buffer's memory stays bounded too. */
		if (b->limit && cap > b->limit)
			cap = b->limit;
		uint8_t *grown = realloc(b->data, cap);
		if (!grown) {
			b->error = -ENOMEM;
			return NULL;
		}
		b->data = grown;
		b->cap = cap;
	}
	return b->data + b->len;
}

void byte_buf_append(struct byte_buf *b, const void *data, size_t len)
{
	uint8_t *dst = byte_buf_reserve(b, len);

	if (!dst)
		return;
	if (len)
		memcpy(dst, data, len);
	b->len += len;
}

void byte_buf_put_u8(struct byte_buf *b, uint8_t v)
{
	byte_buf_append(b, &v, 1);
}

void byte_buf_put_u16(struct byte_buf *b, uint16_t v)
{
	uint8_t le[2];

	store_le16(le, v);
	byte_buf_append(b, le, sizeof(le));
}

void byte_buf_put_u32(struct byte_buf *b, uint32_t v)
{
	uint8_t le[4];

	store_le32(le, v);
	byte_buf_append(b, le, sizeof(le));
}

void byte_buf_put_u64(struct byte_buf *b, uint64_t v)
{
	uint8_t le[8];

	store_le64(le, v);
	byte_buf_append(b, le, sizeof(le));
}

void byte_buf_printf(struct byte_buf *b, const char *fmt, ...)
{
	va_list ap;
	char small[256];

	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0) {
		if (!b->error)
			b->error = -EINVAL;
		return;
	}
	if ((size_t)n < sizeof(small)) {
		byte_buf_append(b, small, (size_t)n);
		return;
	}
	uint8_t *dst = byte_buf_reserve(b, (size_t)n + 1);
	if (!dst)
		return;
	va_start(ap, fmt);
	vsnprintf((char *)dst, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

uint8_t *byte_buf_steal(struct byte_buf *b, size_t *len)
{
	uint8_t *data = b->data;

	if (len)
		*len = b->len;
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	return data;
}

void byte_buf_free(struct byte_buf *b)
{
	if (!b)
		return;
	free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->error = 0;
}

void sysom_text_sanitize(char *dst, size_t dstlen, const void *src, size_t len)
{
	const unsigned char *s = src;
	size_t n = len < dstlen - 1 ? len : dstlen - 1;

	for (size_t i = 0; i < n; i++)
		dst[i] = (s[i] < 0x20 || s[i] == 0x7f) ? ' ' : (char)s[i];
	dst[n] = '\0';
}
