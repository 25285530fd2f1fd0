/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the batch decoder (raw, and behind bounded zstd decompression). A batch
 * that decodes must re-encode and decode to the same bytes. What the decoder and the
 * decompression allocate (measured with ASan's hooks) stays within what they say beforehand:
 * sysom_batch_decode_memory and the decompression's accounting. */
// fuzz-sources: tests/support/heap_peak.c
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/compress.h"
#include "common/error.h"
#include "common/wire/wire.h"
#include "tests/support/heap_peak.h"

/* Allocations the measurement may see besides the code under test (the fuzzer's own). */
#define HEAP_SLACK 1024

static void decode_and_check(const uint8_t *data, size_t size)
{
	struct sysom_batch batch, again;
	struct sysom_wire_error err;
	struct byte_buf first = { 0 }, second = { 0 };
	uint64_t bound = sysom_batch_decode_memory(data, size, NULL);
	int rc;

	heap_peak_begin();
	rc = sysom_batch_decode(data, size, NULL, &batch, &err);
	if (heap_peak_end() > bound + HEAP_SLACK)
		abort(); /* the decoder allocated more than it announced */
	if (rc == 0) {
		if (sysom_batch_memory(&batch) > bound)
			abort();
		if (sysom_batch_encode(&batch, &first) || byte_buf_error(&first))
			abort();
		if (sysom_batch_decode(first.data, first.len, NULL, &again, &err))
			abort(); /* what we encode we must accept */
		if (sysom_batch_encode(&again, &second) || second.len != first.len ||
		    memcmp(first.data, second.data, first.len) != 0)
			abort();
		sysom_batch_free(&again);
	}
	sysom_batch_free(&batch);
	byte_buf_free(&first);
	byte_buf_free(&second);
}

static int account_peak(void *ctx, uint64_t bytes)
{
	uint64_t *peak = ctx;

	if (bytes > *peak)
		*peak = bytes;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 1) {
		/* Compressed path, as the ingest endpoint sees it, with a small output bound. */
		struct byte_buf out = { 0 };
		uint64_t accounted = 0;
		struct sysom_zstd_bounds b = { .max_output = 1 << 20, .account = account_peak,
					       .account_ctx = &accounted };
		heap_peak_begin();
		int rc = sysom_zstd_decompress_bounded(data + 1, size - 1, &b, &out);
		if (heap_peak_end() > accounted + HEAP_SLACK || out.cap > (1 << 20) + 1)
			abort(); /* allocated more than it accounted, or past the limit */
		if (rc == 0)
			decode_and_check(out.data, out.len);
		byte_buf_free(&out);
	} else {
		decode_and_check(data + 1, size - 1);
	}
	return 0;
}
