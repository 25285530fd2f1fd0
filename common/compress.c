/* SPDX-License-Identifier: Apache-2.0 */
/* zstd wrappers: streaming decompression with an output bound and a window bound. */
#include "common/compress.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#define ZSTD_STATIC_LINKING_ONLY /* frame headers and context size estimates */
#include <zstd.h>
#include <zstd_errors.h>

#include "common/error.h"

int sysom_zstd_compress(const void *data, size_t len, int level, struct byte_buf *out)
{
	size_t bound = ZSTD_compressBound(len);
	ZSTD_CCtx *cctx = NULL;
	uint8_t *dst;
	int rc = 0;

	if (ZSTD_isError(bound))
		return -E2BIG;
	dst = byte_buf_reserve(out, bound);
	if (!dst)
		return byte_buf_error(out);
	cctx = ZSTD_createCCtx();
	if (!cctx)
		return -ENOMEM;
	/* A bounded window keeps the server's decoder memory small (it caps the window too). */
	ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
	ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, 22);
	ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
	size_t n = ZSTD_compress2(cctx, dst, bound, data, len);
	if (ZSTD_isError(n)) {
		rc = -EIO;
		goto cleanup;
	}
	out->len += n;
cleanup:
	ZSTD_freeCCtx(cctx);
	return rc;
}

/* What the frame headers say, read before anything is allocated. */
struct frame_survey {
	bool all_declared;     /* every frame declares its content size */
	uint64_t declared;     /* their sum (saturating) */
	uint64_t context_size; /* decoder memory the most demanding frame needs */
};

/* Walks the frames of `len` bytes: 0, -SYSOM_ECORRUPT or -SYSOM_ELIMIT (window too large). */
static int frames_survey(const uint8_t *p, size_t len, struct frame_survey *out)
{
	struct frame_survey s = { .all_declared = true, .context_size = ZSTD_estimateDCtxSize() };

	while (len) {
		ZSTD_frameHeader fh;
		size_t frame_len;

		/* > 0: the header itself is truncated; an error: not a (current-format) frame. */
		if (ZSTD_getFrameHeader(&fh, p, len) != 0)
			return -SYSOM_ECORRUPT;
		if (fh.frameType == ZSTD_frame) {
			if (fh.windowSize > (1ULL << SYSOM_ZSTD_WINDOW_LOG_MAX))
				return -SYSOM_ELIMIT;
			size_t need = ZSTD_estimateDStreamSize_fromFrame(p, len);
			if (ZSTD_isError(need))
				return -SYSOM_ECORRUPT;
			if (need > s.context_size)
				s.context_size = need;
			if (fh.frameContentSize == ZSTD_CONTENTSIZE_UNKNOWN)
				s.all_declared = false;
			else
				s.declared = fh.frameContentSize > UINT64_MAX - s.declared
						     ? UINT64_MAX
						     : s.declared + fh.frameContentSize;
		}
		frame_len = ZSTD_findFrameCompressedSize(p, len);
		if (ZSTD_isError(frame_len) || frame_len == 0 || frame_len > len)
			return -SYSOM_ECORRUPT;
		p += frame_len;
		len -= frame_len;
	}
	*out = s;
	return 0;
}

static int account(const struct sysom_zstd_bounds *b, uint64_t bytes)
{
	return b->account ? b->account(b->account_ctx, bytes) : 0;
}

/* Moves `out` to a buffer of exactly `cap` bytes (> its capacity), telling `account` first. */
static int output_grow(struct byte_buf *out, size_t cap, const struct sysom_zstd_bounds *b,
		       uint64_t context_size)
{
	size_t saved_limit = out->limit;
	uint8_t *p;
	int rc;

	/* A realloc may copy: the old buffer lives until the new one is filled. */
	if ((rc = account(b, context_size + out->cap + cap)))
		return rc;
	out->limit = cap; /* byte_buf_reserve doubles past `cap`, then clamps to the limit */
	p = byte_buf_reserve(out, cap - out->len);
	out->limit = saved_limit;
	if (!p)
		return byte_buf_error(out) == -E2BIG ? -SYSOM_ELIMIT : byte_buf_error(out);
	account(b, context_size + out->cap);
	return 0;
}

/*
 * Gives back a buffer's unused tail when it is a large part of it (a doubled buffer). The
 * shrinking realloc may copy, so both buffers are accounted for a moment; when that is
 * refused the buffer stays as it is.
 */
static void output_trim(struct byte_buf *out, const struct sysom_zstd_bounds *b)
{
	size_t cap = out->len ? out->len : 1;

	if (out->cap - out->len <= out->cap / 8 || out->error ||
	    account(b, (uint64_t)out->cap + cap))
		return;
	uint8_t *p = realloc(out->data, cap);
	if (p) {
		out->data = p;
		out->cap = cap;
	}
}

/* First output buffer without declared sizes: a few times the input, at least 64 KiB. */
#define UNDECLARED_FIRST_RATIO 8
#define UNDECLARED_FIRST_MIN (64u * 1024u)

int sysom_zstd_decompress_bounded(const void *data, size_t len,
				  const struct sysom_zstd_bounds *bounds, struct byte_buf *out)
{
	const size_t max_output = bounds->max_output;
	ZSTD_DCtx *dctx = NULL;
	ZSTD_inBuffer in = { data, len, 0 };
	struct frame_survey survey = { 0 };
	size_t produced = 0, start_len = out->len, limit_cap, first_cap;
	int rc = 0;

	if (len == 0 || out->error)
		return len == 0 ? -SYSOM_ECORRUPT : out->error;
	if ((rc = frames_survey(data, len, &survey)))
		goto cleanup;
	if (survey.all_declared && survey.declared > max_output) {
		rc = -SYSOM_ELIMIT; /* refused before a byte is decompressed */
		goto cleanup;
	}
	/* The buffer never grows past the limit plus the one byte that proves an excess (nor
	 * past a limit the caller set on it). */
	limit_cap = max_output < SIZE_MAX - start_len - 1 ? start_len + max_output + 1 : SIZE_MAX;
	if (out->limit && out->limit < limit_cap)
		limit_cap = out->limit;
	if (survey.all_declared)
		first_cap = start_len + (size_t)survey.declared + 1;
	else
		first_cap = len > (SIZE_MAX - start_len) / UNDECLARED_FIRST_RATIO
				    ? SIZE_MAX
				    : start_len + (len * UNDECLARED_FIRST_RATIO > UNDECLARED_FIRST_MIN
							   ? len * UNDECLARED_FIRST_RATIO
							   : UNDECLARED_FIRST_MIN);
	if (first_cap > limit_cap)
		first_cap = limit_cap;
	if ((rc = account(bounds, survey.context_size + out->cap)))
		goto cleanup;
	dctx = ZSTD_createDCtx();
	if (!dctx) {
		rc = -ENOMEM;
		goto cleanup;
	}
	ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, SYSOM_ZSTD_WINDOW_LOG_MAX);
	for (;;) {
		if (out->cap == out->len || out->cap < first_cap) {
			size_t cap = out->cap < first_cap ? first_cap
				     : out->cap > limit_cap / 2 ? limit_cap : out->cap * 2;
			if (cap <= out->cap) {
				rc = -SYSOM_ELIMIT; /* a caller's limit below max_output */
				goto cleanup;
			}
			if ((rc = output_grow(out, cap, bounds, survey.context_size)))
				goto cleanup;
		}
		/* Room for at most one byte past the limit: producing it proves the excess. */
		size_t room = out->cap - out->len;
		if (room > max_output - produced + 1)
			room = max_output - produced + 1;
		ZSTD_outBuffer ob = { out->data + out->len, room, 0 };
		size_t ret = ZSTD_decompressStream(dctx, &ob, &in);
		if (ZSTD_isError(ret)) {
			switch (ZSTD_getErrorCode(ret)) {
			case ZSTD_error_frameParameter_windowTooLarge:
				rc = -SYSOM_ELIMIT;
				break;
			case ZSTD_error_memory_allocation:
				rc = -ENOMEM; /* our memory, not the input: worth a retry */
				break;
			default:
				rc = -SYSOM_ECORRUPT;
			}
			goto cleanup;
		}
		produced += ob.pos;
		out->len += ob.pos;
		if (produced > max_output) {
			rc = -SYSOM_ELIMIT;
			goto cleanup;
		}
		if (ret == 0 && in.pos == in.size)
			break; /* last frame complete, all input consumed */
		if (ob.pos == 0 && in.pos == in.size) {
			rc = -SYSOM_ECORRUPT; /* no progress possible: the input is truncated */
			goto cleanup;
		}
	}
	ZSTD_freeDCtx(dctx);
	dctx = NULL;
	account(bounds, out->cap);
	output_trim(out, bounds);
cleanup:
	ZSTD_freeDCtx(dctx);
	account(bounds, out->cap);
	return rc;
}

int sysom_zstd_decompress(const void *data, size_t len, size_t max_output, struct byte_buf *out)
{
	const struct sysom_zstd_bounds bounds = { .max_output = max_output };

	return sysom_zstd_decompress_bounded(data, len, &bounds, out);
}

uint64_t sysom_zstd_context_max(void)
{
	return ZSTD_estimateDStreamSize((size_t)1 << SYSOM_ZSTD_WINDOW_LOG_MAX);
}
