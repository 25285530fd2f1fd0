/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the batch decoder (raw, and behind bounded zstd decompression). A batch
 * that decodes must re-encode and decode to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/compress.h"
#include "common/error.h"
#include "common/wire/wire.h"

static void decode_and_check(const uint8_t *data, size_t size)
{
	struct sysom_batch batch, again;
	struct sysom_wire_error err;
	struct byte_buf first = { 0 }, second = { 0 };

	if (sysom_batch_decode(data, size, NULL, &batch, &err) == 0) {
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 1) {
		/* Compressed path, as the ingest endpoint sees it, with a small output bound. */
		struct byte_buf out = { 0 };
		if (sysom_zstd_decompress(data + 1, size - 1, 1 << 20, &out) == 0)
			decode_and_check(out.data, out.len);
		byte_buf_free(&out);
	} else {
		decode_and_check(data + 1, size - 1);
	}
	return 0;
}
