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
 * Decompresses one or more zstd frames from untrusted input into `out`, refusing to produce
 * more than `max_output` bytes (-SYSOM_ELIMIT) or to use a window above
 * 2^SYSOM_ZSTD_WINDOW_LOG_MAX (-SYSOM_ELIMIT). Malformed input gives -SYSOM_ECORRUPT.
 */
int sysom_zstd_decompress(const void *data, size_t len, size_t max_output, struct byte_buf *out);

#endif
