/* SPDX-License-Identifier: Apache-2.0 */
/* zstd wrappers: streaming decompression with an output bound and a window bound. */
#include "common/compress.h"

#include <errno.h>
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

int sysom_zstd_decompress(const void *data, size_t len, size_t max_output, struct byte_buf *out)
{
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	ZSTD_inBuffer in = { data, len, 0 };
	size_t produced = 0;
	int rc = 0;

	if (!dctx)
		return -ENOMEM;
	/* Bound the buffer itself (not only what is decoded) to the limit plus the one byte
	 * that proves an excess; restored before returning. */
	size_t saved_limit = out->limit;
	if (max_output < SIZE_MAX - out->len - 1 &&
	    (!out->limit || out->limit > out->len + max_output + 1))
		out->limit = out->len + max_output + 1;
	ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, SYSOM_ZSTD_WINDOW_LOG_MAX);
	if (len == 0) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	for (;;) {
		/* Room for at most one byte past the limit: producing it proves the excess. */
		size_t room = max_output - produced + 1;
		if (room > ZSTD_DStreamOutSize())
			room = ZSTD_DStreamOutSize();
		uint8_t *dst = byte_buf_reserve(out, room);
		if (!dst) {
			rc = byte_buf_error(out) == -E2BIG ? -SYSOM_ELIMIT : byte_buf_error(out);
			goto cleanup;
		}
		ZSTD_outBuffer ob = { dst, room, 0 };
		size_t ret = ZSTD_decompressStream(dctx, &ob, &in);
		if (ZSTD_isError(ret)) {
			rc = ZSTD_getErrorCode(ret) == ZSTD_error_frameParameter_windowTooLarge
				     ? -SYSOM_ELIMIT
				     : -SYSOM_ECORRUPT;
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
cleanup:
	out->limit = saved_limit;
	ZSTD_freeDCtx(dctx);
	return rc;
}
