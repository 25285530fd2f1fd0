/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: bytes through the NCCL instance rollup decoder (the blobs the stores
 * read back for instances older than the raw calls); what decodes re-encodes to a blob
 * that decodes to the same instances and calls. */
// fuzz-sources: server/store/nccl_instance.c
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/store/nccl_instance.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool same_call(const struct nccl_instance_call *a, const struct nccl_instance_call *b)
{
	return a->process == b->process && a->rank == b->rank && a->job_rank == b->job_rank &&
	       a->lateness_ns == b->lateness_ns && a->duration_ns == b->duration_ns &&
	       a->count == b->count && a->bytes == b->bytes && a->peer == b->peer &&
	       a->result == b->result;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nccl_instance *inst = NULL, *inst2 = NULL;
	struct nccl_instance_call *calls = NULL, *calls2 = NULL;
	struct byte_buf blob = { 0 };
	size_t ni = 0, nc = 0, ni2 = 0, nc2 = 0;
	int rc = nccl_instance_decode(data, size, &inst, &ni, &calls, &nc);

	if (rc) {
		if (rc != -SYSOM_ECORRUPT && rc != -SYSOM_ELIMIT && rc != -ENOMEM)
			abort();
		if (inst || calls || ni || nc)
			abort();
		return 0;
	}
	if (!ni || ni > NCCL_INSTANCE_MAX_INSTANCES || !nc || nc > NCCL_INSTANCE_MAX_CALLS)
		abort();
	if (nccl_instance_encode(inst, ni, calls, nc, &blob) ||
	    nccl_instance_decode(blob.data, blob.len, &inst2, &ni2, &calls2, &nc2) || ni2 != ni ||
	    nc2 != nc)
		abort();
	for (size_t i = 0; i < ni; i++)
		if (inst[i].seq != inst2[i].seq || inst[i].first_entry_ns != inst2[i].first_entry_ns ||
		    inst[i].nranks != inst2[i].nranks || inst[i].ncalls != inst2[i].ncalls ||
		    inst[i].call0 != inst2[i].call0)
			abort();
	for (size_t i = 0; i < nc; i++)
		if (!same_call(&calls[i], &calls2[i]))
			abort();
	free(inst);
	free(inst2);
	free(calls);
	free(calls2);
	byte_buf_free(&blob);
	return 0;
}
