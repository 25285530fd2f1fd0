/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: a stream of gputrace ring-buffer events (as the BPF side would write them,
 * or corrupted) → nccltrack. Each event is a 1-byte size class (bit 7: prune after it, as at a
 * batch seal) followed by that many bytes.
 */
// fuzz-sources: agent/gpu/nccltrack.c
#include <stdlib.h>
#include <string.h>

#include "agent/gpu/nccltrack.h"
#include "bpf/gputrace.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static void check_comm(void *ctx, uint32_t tgid, uint32_t generation,
		       const struct sysom_communicator *c)
{
	(void)ctx;
	(void)tgid;
	(void)generation;
	if (c->key == 0 || c->key_source == 0 || c->key_source > SYSOM_COMM_KEY_SOURCE_MAX)
		abort();
	if (c->rank >= 0 && (c->nranks <= 0 || c->rank >= c->nranks))
		abort(); /* ranks kept are always consistent */
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	static const size_t sizes[] = { sizeof(struct gt_nccl_event),
					sizeof(struct gt_nccl_init_event),
					sizeof(struct gt_name_event), 4, 0 };
	struct nccltrack_options o;
	struct nccltrack *nt;
	size_t pos = 0;

	nccltrack_options_default(&o);
	o.max_processes = 8;
	o.max_comms = 8;
	o.max_names = 8;
	if (nccltrack_new(&o, &nt))
		return 0;
	while (pos < size) {
		unsigned char cls = data[pos++];
		size_t want = sizes[(cls & 0x7f) % (sizeof(sizes) / sizeof(sizes[0]))];
		size_t have = size - pos < want ? size - pos : want;
		/* An exact-size heap copy: ASan catches any read past the event. */
		unsigned char *ev = malloc(have ? have : 1);
		struct nccltrack_call out;

		if (!ev)
			break;
		memcpy(ev, data + pos, have);
		int rc = nccltrack_event(nt, ev, have, 0, &out);
		if (rc == 1 && (out.call.op == 0 || out.call.op > SYSOM_NCCL_OP_MAX ||
				out.call.exit_ns < out.call.entry_ns))
			abort();
		if (have >= sizeof(struct gt_name_event) - GT_NAME_MAX) {
			uint32_t tgid;
			uint64_t handle;
			memcpy(&tgid, ev + 4, sizeof(tgid));
			memcpy(&handle, ev + 8, sizeof(handle));
			const char *name = nccltrack_kernel_name(nt, tgid, handle);
			if (name && strlen(name) >= GT_NAME_MAX)
				abort();
		}
		free(ev);
		pos += have;
		if (cls & 0x80) /* as at a batch seal */
			nccltrack_prune(nt);
	}
	nccltrack_for_each_comm(nt, check_comm, NULL);
	nccltrack_forget(nt, 1);
	nccltrack_prune(nt);
	nccltrack_free(nt);
	return 0;
}
