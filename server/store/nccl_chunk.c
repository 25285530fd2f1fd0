/* SPDX-License-Identifier: Apache-2.0 */
/* NCCL call chunks: the encoder and the bounded decoder of the blob (format: nccl_chunk.h). */
#include "server/store/nccl_chunk.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/compress.h"
#include "common/error.h"
#include "common/varint.h"

/* zstd level: chunks are written on the ingest path; level 1 keeps it cheap. */
#define NCCL_CHUNK_ZSTD_LEVEL 1

void nccl_chunk_call_from_wire(const struct sysom_nccl_call *k, struct nccl_chunk_call *out)
{
	*out = (struct nccl_chunk_call){
		.tid = k->tid, .seq = k->seq, .entry_ns = k->entry_ns, .exit_ns = k->exit_ns,
		.count = k->count, .bytes = k->bytes, .stream = k->stream, .peer = k->peer,
		.result = k->result, .rank = k->rank, .datatype = k->datatype, .redop = k->redop,
		.flags = k->flags,
	};
}

int nccl_chunk_encode(const struct nccl_chunk_call *calls, size_t n, struct byte_buf *out)
{
	struct byte_buf payload = { 0 };
	uint64_t prev_seq = 0, prev_entry = 0;
	int rc;

	if (!n || n > NCCL_CHUNK_MAX_CALLS)
		return -EINVAL;
	/* Room for the largest encoding, written in place (no append per field). */
	uint8_t *p = byte_buf_reserve(&payload, n * NCCL_CHUNK_CALL_MAX_BYTES), *start = p;
	if (!p) {
		rc = byte_buf_error(&payload) ? byte_buf_error(&payload) : -ENOMEM;
		goto cleanup;
	}
	for (size_t i = 0; i < n; i++) {
		const struct nccl_chunk_call *c = &calls[i];
		p = sysom_varint_write(p, c->tid);
		p = sysom_varint_write(p, sysom_zigzag(c->seq - prev_seq));
		p = sysom_varint_write(p, sysom_zigzag(c->entry_ns - prev_entry));
		p = sysom_varint_write(p, sysom_zigzag(c->exit_ns - c->entry_ns));
		p = sysom_varint_write(p, c->count);
		p = sysom_varint_write(p, c->bytes);
		p = sysom_varint_write(p, sysom_zigzag((uint64_t)(int64_t)c->peer));
		p = sysom_varint_write(p, sysom_zigzag((uint64_t)(int64_t)c->result));
		p = sysom_varint_write(p, sysom_zigzag((uint64_t)(int64_t)c->rank));
		p = sysom_varint_write(p, c->datatype);
		p = sysom_varint_write(p, c->redop);
		p = sysom_varint_write(p, c->flags);
		p = sysom_varint_write(p, c->stream);
		prev_seq = c->seq;
		prev_entry = c->entry_ns;
	}
	payload.len += (size_t)(p - start);
	byte_buf_put_u8(out, NCCL_CHUNK_VERSION);
	sysom_varint_put(out, n);
	sysom_varint_put(out, payload.len);
	if ((rc = byte_buf_error(out)))
		goto cleanup;
	rc = sysom_zstd_compress(payload.data, payload.len, NCCL_CHUNK_ZSTD_LEVEL, out);
cleanup:
	byte_buf_free(&payload);
	return rc;
}

static bool get_bounded(struct byte_reader *r, uint64_t max, uint64_t *out)
{
	return sysom_varint_read(r, out) && *out <= max;
}

static bool get_i32(struct byte_reader *r, int32_t *out)
{
	uint64_t z;

	if (!sysom_varint_read(r, &z))
		return false;
	int64_t v = (int64_t)sysom_unzigzag(z);
	if (v < INT32_MIN || v > INT32_MAX)
		return false;
	*out = (int32_t)v;
	return true;
}

int nccl_chunk_decode(const void *blob, size_t len, struct nccl_chunk_call **calls, size_t *n)
{
	struct byte_reader r;
	struct byte_buf payload = { 0 };
	struct nccl_chunk_call *v = NULL;
	uint64_t count = 0, raw_len = 0, prev_seq = 0, prev_entry = 0;
	uint8_t version;
	int rc;

	*calls = NULL;
	*n = 0;
	byte_reader_init(&r, blob, len);
	if (!byte_reader_u8(&r, &version) || version != NCCL_CHUNK_VERSION ||
	    !sysom_varint_read(&r, &count) || !count || !sysom_varint_read(&r, &raw_len)) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	if (count > NCCL_CHUNK_MAX_CALLS || raw_len > count * NCCL_CHUNK_CALL_MAX_BYTES) {
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
		struct nccl_chunk_call *c = &v[i];
		uint64_t tid, dseq, dentry, dexit, datatype, redop, flags;
		if (!get_bounded(&r, UINT32_MAX, &tid) || !sysom_varint_read(&r, &dseq) ||
		    !sysom_varint_read(&r, &dentry) || !sysom_varint_read(&r, &dexit) ||
		    !sysom_varint_read(&r, &c->count) || !sysom_varint_read(&r, &c->bytes) ||
		    !get_i32(&r, &c->peer) || !get_i32(&r, &c->result) || !get_i32(&r, &c->rank) ||
		    !get_bounded(&r, UINT8_MAX, &datatype) || !get_bounded(&r, UINT8_MAX, &redop) ||
		    !get_bounded(&r, UINT8_MAX, &flags) || !sysom_varint_read(&r, &c->stream)) {
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
		c->tid = (uint32_t)tid;
		c->seq = prev_seq + sysom_unzigzag(dseq);
		c->entry_ns = prev_entry + sysom_unzigzag(dentry);
		c->exit_ns = c->entry_ns + sysom_unzigzag(dexit);
		c->datatype = (uint8_t)datatype;
		c->redop = (uint8_t)redop;
		c->flags = (uint8_t)flags;
		prev_seq = c->seq;
		prev_entry = c->entry_ns;
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
