/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: bytes through the NCCL instance rollup decoder (the blobs the stores
 * read back for instances older than the raw calls); what decodes re-encodes to a blob
 * that decodes to the same calls. */
// fuzz-sources: server/store/nccl_instance.c
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/store/nccl_instance.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nccl_instance_call *calls = NULL, *again = NULL;
	struct byte_buf blob = { 0 };
	size_t n = 0, m = 0;
	int rc = nccl_instance_decode(data, size, &calls, &n);

	if (rc) {
		if (rc != -SYSOM_ECORRUPT && rc != -SYSOM_ELIMIT && rc != -ENOMEM)
			abort();
		if (calls || n)
			abort();
		return 0;
	}
	if (!n || n > NCCL_INSTANCE_MAX_CALLS)
		abort();
	if (nccl_instance_encode(calls, n, &blob) ||
	    nccl_instance_decode(blob.data, blob.len, &again, &m) || m != n)
		abort();
	for (size_t i = 0; i < n; i++)
		if (calls[i].process != again[i].process || calls[i].rank != again[i].rank ||
		    calls[i].job_rank != again[i].job_rank ||
		    calls[i].lateness_ns != again[i].lateness_ns ||
		    calls[i].duration_ns != again[i].duration_ns ||
		    calls[i].count != again[i].count || calls[i].bytes != again[i].bytes ||
		    calls[i].peer != again[i].peer || calls[i].result != again[i].result)
			abort();
	free(calls);
	free(again);
	byte_buf_free(&blob);
	return 0;
}
