/* SPDX-License-Identifier: Apache-2.0 */
/* NCCL instance rollups: the encoder and the bounded decoder of the blob (nccl_instance.h). */
#include "server/store/nccl_instance.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/compress.h"
#include "common/error.h"
#include "common/varint.h"

/* zstd level: written once per instance at retention time, read rarely; compress harder
 * than the ingest path's chunks. */
#define NCCL_INSTANCE_ZSTD_LEVEL 3

/* What a call's fields are written relative to: the previous call's process (in the blob) and
 * exit (in the instance: ranks leave a collective together, so exits differ little). */
struct prev {
	uint64_t process, exit;
};

static uint8_t *call_write(uint8_t *p, const struct nccl_instance_call *c, struct prev *prev)
{
	uint64_t exit = (uint64_t)c->lateness_ns + (uint64_t)c->duration_ns;

	p = sysom_varint_write(p, sysom_zigzag((uint64_t)c->process - prev->process));
	p = sysom_varint_write(p, sysom_zigzag((uint64_t)(int64_t)c->rank));
	p = sysom_varint_write(p, sysom_zigzag((uint64_t)(int64_t)c->job_rank));
	p = sysom_varint_write(p, sysom_zigzag((uint64_t)c->lateness_ns));
	p = sysom_varint_write(p, sysom_zigzag(exit - prev->exit));
	p = sysom_varint_write(p, c->count);
	p = sysom_varint_write(p, c->bytes);
	p = sysom_varint_write(p, sysom_zigzag((uint64_t)(int64_t)c->peer));
	p = sysom_varint_write(p, sysom_zigzag((uint64_t)(int64_t)c->result));
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
		p = sysom_varint_write(p, sysom_zigzag(x->seq - prev_seq));
		p = sysom_varint_write(p, sysom_zigzag((uint64_t)x->first_entry_ns - prev_first));
		p = sysom_varint_write(p, sysom_zigzag((uint64_t)(int64_t)x->nranks));
		p = sysom_varint_write(p, x->ncalls);
		prev.exit = 0;
		for (uint32_t k = 0; k < x->ncalls; k++)
			p = call_write(p, &calls[used++], &prev);
		prev_seq = x->seq;
		prev_first = (uint64_t)x->first_entry_ns;
	}
	payload.len += (size_t)(p - start);
	byte_buf_put_u8(out, NCCL_INSTANCE_VERSION);
	sysom_varint_put(out, ninst);
	sysom_varint_put(out, ncalls);
	sysom_varint_put(out, payload.len);
	if ((rc = byte_buf_error(out)))
		goto cleanup;
	rc = sysom_zstd_compress(payload.data, payload.len, NCCL_INSTANCE_ZSTD_LEVEL, out);
cleanup:
	byte_buf_free(&payload);
	return rc;
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

static bool get_i64(struct byte_reader *r, int64_t *out)
{
	uint64_t z;

	if (!sysom_varint_read(r, &z))
		return false;
	*out = (int64_t)sysom_unzigzag(z);
	return true;
}

static bool call_read(struct byte_reader *r, struct nccl_instance_call *c, struct prev *prev)
{
	uint64_t dprocess, dexit;

	if (!sysom_varint_read(r, &dprocess) || !get_i32(r, &c->rank) || !get_i32(r, &c->job_rank) ||
	    !get_i64(r, &c->lateness_ns) || !sysom_varint_read(r, &dexit) ||
	    !sysom_varint_read(r, &c->count) || !sysom_varint_read(r, &c->bytes) || !get_i32(r, &c->peer) ||
	    !get_i32(r, &c->result))
		return false;
	prev->process += sysom_unzigzag(dprocess);
	prev->exit += sysom_unzigzag(dexit);
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
	    !sysom_varint_read(&r, &icount) || !icount || !sysom_varint_read(&r, &ccount) || !ccount ||
	    !sysom_varint_read(&r, &raw_len)) {
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
		if (!sysom_varint_read(&r, &dseq) || !sysom_varint_read(&r, &dfirst) || !get_i32(&r, &x->nranks) ||
		    !sysom_varint_read(&r, &n) || !n || n > ccount - used) {
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
		x->seq = prev_seq + sysom_unzigzag(dseq);
		x->first_entry_ns = (int64_t)(prev_first + sysom_unzigzag(dfirst));
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
