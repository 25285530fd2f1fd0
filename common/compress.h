/* SPDX-License-Identifier: Apache-2.0 */
/* zstd compression for batches, and bounded decompression for untrusted input. */
#ifndef SYSOM_COMMON_COMPRESS_H
#define SYSOM_COMMON_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"

/* Decoder window bound: 2^23 = 8 MiB (the agent compresses with a smaller window). */
#define SYSOM_ZSTD_WINDOW_LOG_MAX 23

/* Compresses `len` bytes at `level`, appending one zstd frame to `out`. Returns 0 or -errno. */
int sysom_zstd_compress(const void *data, size_t len, int level, struct byte_buf *out);

/*
 * Told, before a decompression's memory grows, how many bytes it is about to hold at once:
 * its zstd context, the output buffer's capacity and, while the buffer moves to a larger one,
 * the old one too. Returns 0 to go on, or a negative errno that ends the decompression with
 * that code. Also told when the count falls (that call's result is ignored).
 */
typedef int (*sysom_zstd_account_fn)(void *ctx, uint64_t bytes);

struct sysom_zstd_bounds {
	size_t max_output;             /* most bytes the input may decompress to */
	sysom_zstd_account_fn account; /* optional */
	void *account_ctx;             /* passed to `account` (borrowed) */
};

/*
 * Decompresses one or more zstd frames of untrusted input, appending to `out`. Before
 * allocating anything it walks the frame headers: a frame with a window above
 * 2^SYSOM_ZSTD_WINDOW_LOG_MAX, or frames that declare more than `max_output` bytes in all,
 * give -SYSOM_ELIMIT; a malformed or truncated frame (or a legacy-format one) gives
 * -SYSOM_ECORRUPT. When every frame declares its content size the output buffer is
 * allocated once, at that size; otherwise it doubles as output arrives. Producing more than
 * `max_output` bytes gives -SYSOM_ELIMIT, a failure of `account` its code; running out of
 * memory (here or inside zstd) gives -ENOMEM, never -SYSOM_ECORRUPT. When it returns,
 * `account` was last told what `out` still holds (its capacity; the context is freed).
 */
int sysom_zstd_decompress_bounded(const void *data, size_t len,
				  const struct sysom_zstd_bounds *bounds, struct byte_buf *out);

/* sysom_zstd_decompress_bounded without accounting. */
int sysom_zstd_decompress(const void *data, size_t len, size_t max_output, struct byte_buf *out);

/* The most a decompression's zstd context needs (a frame with the largest window allowed),
 * to size memory budgets: one decompression holds this plus its output. */
uint64_t sysom_zstd_context_max(void);

#endif
