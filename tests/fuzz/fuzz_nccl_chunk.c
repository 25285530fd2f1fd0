/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: bytes through the NCCL call chunk decoder (the blobs the embedded store
 * reads back); what decodes re-encodes to a blob that decodes to the same calls. */
// fuzz-sources: server/store/nccl_chunk.c
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/store/nccl_chunk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nccl_chunk_call *calls = NULL, *again = NULL;
	struct byte_buf blob = { 0 };
	size_t n = 0, m = 0;
	int rc = nccl_chunk_decode(data, size, &calls, &n);

	if (rc) {
		if (rc != -SYSOM_ECORRUPT && rc != -SYSOM_ELIMIT && rc != -ENOMEM)
			abort();
		if (calls || n)
			abort();
		return 0;
	}
	if (!n || n > NCCL_CHUNK_MAX_CALLS)
		abort();
	if (nccl_chunk_encode(calls, n, &blob) ||
	    nccl_chunk_decode(blob.data, blob.len, &again, &m) || m != n)
		abort();
	for (size_t i = 0; i < n; i++)
		if (memcmp(&calls[i], &again[i], sizeof(calls[i])) &&
		    (calls[i].tid != again[i].tid || calls[i].seq != again[i].seq ||
		     calls[i].entry_ns != again[i].entry_ns || calls[i].exit_ns != again[i].exit_ns ||
		     calls[i].count != again[i].count || calls[i].bytes != again[i].bytes ||
		     calls[i].stream != again[i].stream || calls[i].peer != again[i].peer ||
		     calls[i].result != again[i].result || calls[i].rank != again[i].rank ||
		     calls[i].datatype != again[i].datatype || calls[i].redop != again[i].redop ||
		     calls[i].flags != again[i].flags))
			abort();
	free(calls);
	free(again);
	byte_buf_free(&blob);
	return 0;
}
