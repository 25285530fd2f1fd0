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

/* What a call's fields are written relative to: the previous call's process (in the blob) and
 * exit (in the instance: ranks leave a collective together, so exits differ little). */
struct prev {
	uint64_t process, exit;
};

static uint8_t *call_write(uint8_t *p, const struct nccl_instance_call *c, struct prev *prev)
{
	uint64_t exit = (uint64_t)c->lateness_ns + (uint64_t)c->duration_ns;

	p = varint_write(p, zigzag((uint64_t)c->process - prev->process));
	p = varint_write(p, zigzag((uint64_t)(int64_t)c->rank));
	p = varint_write(p, zigzag((uint64_t)(int64_t)c->job_rank));
	p = varint_write(p, zigzag((uint64_t)c->lateness_ns));
	p = varint_write(p, zigzag(exit - prev->exit));
	p = varint_write(p, c->count);
	p = varint_write(p, c->bytes);
	p = varint_write(p, zigzag((uint64_t)(int64_t)c->peer));
	p = varint_write(p, zigzag((uint64_t)(int64_t)c->result));
	prev->process = (uint64_t)c->process;
	prev->exit = exit;
	return p;
}

int nccl_instance_encode(const struct nccl_instance *inst, size_t ninst,
			 const struct nccl_instance_call *calls, size_t ncalls,
			 struct byte_buf *out)
{
	struct byte_buf payload = { 0 };
	uint64_t prev_seq = 0, prev_first = 0;
	struct prev prev = { 0 };
	size_t used = 0;
	int rc;

	if (!ninst || ninst > NCCL_INSTANCE_MAX_INSTANCES || !ncalls ||
	    ncalls > NCCL_INSTANCE_MAX_CALLS)
		return -EINVAL;
	for (size_t i = 0; i < ninst; i++) {
		if (!inst[i].ncalls || inst[i].ncalls > ncalls - used)
			return -EINVAL;
		used += inst[i].ncalls;
	}
	if (used != ncalls)
		return -EINVAL;
	uint8_t *p = byte_buf_reserve(&payload, ninst * NCCL_INSTANCE_HEAD_MAX_BYTES +
							ncalls * NCCL_INSTANCE_CALL_MAX_BYTES),
		*start = p;
	if (!p) {
		rc = byte_buf_error(&payload) ? byte_buf_error(&payload) : -ENOMEM;
		goto cleanup;
	}
	used = 0;
	for (size_t i = 0; i < ninst; i++) {
		const struct nccl_instance *x = &inst[i];
		p = varint_write(p, zigzag(x->seq - prev_seq));
		p = varint_write(p, zigzag((uint64_t)x->first_entry_ns - prev_first));
		p = varint_write(p, zigzag((uint64_t)(int64_t)x->nranks));
		p = varint_write(p, x->ncalls);
		prev.exit = 0;
		for (uint32_t k = 0; k < x->ncalls; k++)
			p = call_write(p, &calls[used++], &prev);
		prev_seq = x->seq;
		prev_first = (uint64_t)x->first_entry_ns;
	}
	payload.len += (size_t)(p - start);
	byte_buf_put_u8(out, NCCL_INSTANCE_VERSION);
	put_varint(out, ninst);
	put_varint(out, ncalls);
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

static bool call_read(struct byte_reader *r, struct nccl_instance_call *c, struct prev *prev)
{
	uint64_t dprocess, dexit;

	if (!get_varint(r, &dprocess) || !get_i32(r, &c->rank) || !get_i32(r, &c->job_rank) ||
	    !get_i64(r, &c->lateness_ns) || !get_varint(r, &dexit) ||
	    !get_varint(r, &c->count) || !get_varint(r, &c->bytes) || !get_i32(r, &c->peer) ||
	    !get_i32(r, &c->result))
		return false;
	prev->process += unzigzag(dprocess);
	prev->exit += unzigzag(dexit);
	c->process = (int64_t)prev->process;
	c->duration_ns = (int64_t)(prev->exit - (uint64_t)c->lateness_ns);
	return true;
}

int nccl_instance_decode(const void *blob, size_t len, struct nccl_instance **inst,
			 size_t *ninst, struct nccl_instance_call **calls, size_t *ncalls)
{
	struct byte_reader r;
	struct byte_buf payload = { 0 };
	struct nccl_instance *v = NULL;
	struct nccl_instance_call *k = NULL;
	uint64_t icount = 0, ccount = 0, raw_len = 0, prev_seq = 0, prev_first = 0, used = 0;
	struct prev prev = { 0 };
	uint8_t version;
	int rc;

	*inst = NULL;
	*calls = NULL;
	*ninst = 0;
	*ncalls = 0;
	byte_reader_init(&r, blob, len);
	if (!byte_reader_u8(&r, &version) || version != NCCL_INSTANCE_VERSION ||
	    !get_varint(&r, &icount) || !icount || !get_varint(&r, &ccount) || !ccount ||
	    !get_varint(&r, &raw_len)) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	if (icount > NCCL_INSTANCE_MAX_INSTANCES || ccount > NCCL_INSTANCE_MAX_CALLS ||
	    raw_len > icount * NCCL_INSTANCE_HEAD_MAX_BYTES + ccount * NCCL_INSTANCE_CALL_MAX_BYTES) {
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
	if (!(v = calloc(icount, sizeof(*v))) || !(k = calloc(ccount, sizeof(*k)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	byte_reader_init(&r, payload.data, payload.len);
	for (uint64_t i = 0; i < icount; i++) {
		struct nccl_instance *x = &v[i];
		uint64_t dseq, dfirst, n;
		if (!get_varint(&r, &dseq) || !get_varint(&r, &dfirst) || !get_i32(&r, &x->nranks) ||
		    !get_varint(&r, &n) || !n || n > ccount - used) {
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
		x->seq = prev_seq + unzigzag(dseq);
		x->first_entry_ns = (int64_t)(prev_first + unzigzag(dfirst));
		x->ncalls = (uint32_t)n;
		x->call0 = (size_t)used;
		prev.exit = 0;
		for (uint64_t j = 0; j < n; j++)
			if (!call_read(&r, &k[used++], &prev)) {
				rc = -SYSOM_ECORRUPT;
				goto cleanup;
			}
		prev_seq = x->seq;
		prev_first = (uint64_t)x->first_entry_ns;
	}
	if (used != ccount || byte_reader_left(&r)) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	*inst = v;
	*calls = k;
	*ninst = (size_t)icount;
	*ncalls = (size_t)ccount;
	v = NULL;
	k = NULL;
cleanup:
	free(v);
	free(k);
	byte_buf_free(&payload);
	return rc;
}
