/* SPDX-License-Identifier: Apache-2.0 */
/* NCCL instance rollups: the encoder and the bounded decoder of the blob (nccl_instance.h). */
#include "server/store/nccl_instance.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/compress.h"
#include "common/error.h"

/* zstd level: written once per instance at retention time, read rarely; compress harder
 * than the ingest path's chunks. */
#define NCCL_INSTANCE_ZSTD_LEVEL 3

static uint8_t *varint_write(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

static void put_varint(struct byte_buf *b, uint64_t v)
{
	uint8_t tmp[10];

	byte_buf_append(b, tmp, (size_t)(varint_write(tmp, v) - tmp));
}

static uint64_t zigzag(uint64_t wrapping_difference)
{
	int64_t d = (int64_t)wrapping_difference;
	return ((uint64_t)d << 1) ^ (uint64_t)(d >> 63);
}

static uint64_t unzigzag(uint64_t z)
{
	return (z >> 1) ^ (0 - (z & 1));
}

int nccl_instance_encode(const struct nccl_instance_call *calls, size_t n, struct byte_buf *out)
{
	struct byte_buf payload = { 0 };
	uint64_t prev_process = 0;
	int rc;

	if (!n || n > NCCL_INSTANCE_MAX_CALLS)
		return -EINVAL;
	uint8_t *p = byte_buf_reserve(&payload, n * NCCL_INSTANCE_CALL_MAX_BYTES), *start = p;
	if (!p) {
		rc = byte_buf_error(&payload) ? byte_buf_error(&payload) : -ENOMEM;
		goto cleanup;
	}
	for (size_t i = 0; i < n; i++) {
		const struct nccl_instance_call *c = &calls[i];
		p = varint_write(p, zigzag((uint64_t)c->process - prev_process));
		p = varint_write(p, zigzag((uint64_t)(int64_t)c->rank));
		p = varint_write(p, zigzag((uint64_t)(int64_t)c->job_rank));
		p = varint_write(p, zigzag((uint64_t)c->lateness_ns));
		p = varint_write(p, zigzag((uint64_t)c->duration_ns));
		p = varint_write(p, c->count);
		p = varint_write(p, c->bytes);
		p = varint_write(p, zigzag((uint64_t)(int64_t)c->peer));
		p = varint_write(p, zigzag((uint64_t)(int64_t)c->result));
		prev_process = (uint64_t)c->process;
	}
	payload.len += (size_t)(p - start);
	byte_buf_put_u8(out, NCCL_INSTANCE_VERSION);
	put_varint(out, n);
	put_varint(out, payload.len);
	if ((rc = byte_buf_error(out)))
		goto cleanup;
	rc = sysom_zstd_compress(payload.data, payload.len, NCCL_INSTANCE_ZSTD_LEVEL, out);
cleanup:
	byte_buf_free(&payload);
	return rc;
}

/* A varint of at most 10 bytes whose value fits 64 bits. */
static bool get_varint(struct byte_reader *r, uint64_t *out)
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

static bool get_i32(struct byte_reader *r, int32_t *out)
{
	uint64_t z;

	if (!get_varint(r, &z))
		return false;
	int64_t v = (int64_t)unzigzag(z);
	if (v < INT32_MIN || v > INT32_MAX)
		return false;
	*out = (int32_t)v;
	return true;
}

static bool get_i64(struct byte_reader *r, int64_t *out)
{
	uint64_t z;

	if (!get_varint(r, &z))
		return false;
	*out = (int64_t)unzigzag(z);
	return true;
}

int nccl_instance_decode(const void *blob, size_t len, struct nccl_instance_call **calls,
			 size_t *n)
{
	struct byte_reader r;
	struct byte_buf payload = { 0 };
	struct nccl_instance_call *v = NULL;
	uint64_t count = 0, raw_len = 0, prev_process = 0;
	uint8_t version;
	int rc;

	*calls = NULL;
	*n = 0;
	byte_reader_init(&r, blob, len);
	if (!byte_reader_u8(&r, &version) || version != NCCL_INSTANCE_VERSION ||
	    !get_varint(&r, &count) || !count || !get_varint(&r, &raw_len)) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	if (count > NCCL_INSTANCE_MAX_CALLS || raw_len > count * NCCL_INSTANCE_CALL_MAX_BYTES) {
		rc = -SYSOM_ELIMIT;
		goto cleanup;
	}
	if ((rc = sysom_zstd_decompress((const uint8_t *)blob + byte_reader_offset(&r),
					byte_reader_left(&r), raw_len, &payload)))
		goto cleanup;
	if (payload.len != raw_len) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	if (!(v = calloc(count, sizeof(*v)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	byte_reader_init(&r, payload.data, payload.len);
	for (uint64_t i = 0; i < count; i++) {
		struct nccl_instance_call *c = &v[i];
		uint64_t dprocess;
		if (!get_varint(&r, &dprocess) || !get_i32(&r, &c->rank) ||
		    !get_i32(&r, &c->job_rank) || !get_i64(&r, &c->lateness_ns) ||
		    !get_i64(&r, &c->duration_ns) || !get_varint(&r, &c->count) ||
		    !get_varint(&r, &c->bytes) || !get_i32(&r, &c->peer) ||
		    !get_i32(&r, &c->result)) {
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
		prev_process += unzigzag(dprocess);
		c->process = (int64_t)prev_process;
	}
	if (byte_reader_left(&r)) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	*calls = v;
	*n = (size_t)count;
	v = NULL;
cleanup:
	free(v);
	byte_buf_free(&payload);
	return rc;
}
