/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL communicator identity and GPU kernel names from the gputrace ring-buffer events:
 * turns raw events into NCCL_CALLS records with communicator keys that are identical on every
 * rank (hash of the ncclUniqueId, CommSplit children by (parent key, split ordinal, color),
 * else NCCL's commHash), keeps each process's communicators and its function → kernel name
 * table. Pure user-space state: no BPF, no /proc (unit-tested and fuzzed).
 */
#ifndef SYSOM_AGENT_GPU_NCCLTRACK_H
#define SYSOM_AGENT_GPU_NCCLTRACK_H

#include <stddef.h>
#include <stdint.h>

#include "common/wire/wire.h"

struct nccltrack_options {
	uint32_t max_processes;       /* processes tracked (default 4096) */
	uint32_t max_comms;           /* communicators per process (default 1024) */
	uint32_t max_names;           /* kernel names per process (default 65536) */
};

void nccltrack_options_default(struct nccltrack_options *o);

struct nccltrack;

int nccltrack_new(const struct nccltrack_options *o, struct nccltrack **out);
void nccltrack_free(struct nccltrack *nt);

/* A traced NCCL call of process incarnation (tgid, generation). `call.process` is left 0 for
 * the caller to fill; times are already converted to the Unix epoch. */
struct nccltrack_call {
	uint32_t tgid, generation;
	struct sysom_nccl_call call;
};

/*
 * Takes one ring-buffer event (`len` bytes as delivered). `mono_to_real_ns` converts its
 * CLOCK_MONOTONIC stamps (added, wrapping). Returns 1 when *out holds a call to record, 0
 * when the event only updated state (a kernel name), -SYSOM_ECORRUPT for an event of unknown
 * type or wrong size, -ENOSPC when a table is full (the event is counted, not kept).
 */
int nccltrack_event(struct nccltrack *nt, const void *data, size_t len, int64_t mono_to_real_ns,
		    struct nccltrack_call *out);

/* Visits every communicator of every tracked process (`c->process` is 0: the caller maps
 * (tgid, generation) to its batch index). */
typedef void (*nccltrack_comm_fn)(void *ctx, uint32_t tgid, uint32_t generation,
				  const struct sysom_communicator *c);
void nccltrack_for_each_comm(const struct nccltrack *nt, nccltrack_comm_fn fn, void *ctx);

/* The kernel name of a CUfunction / CUkernel handle in a process, NULL when unknown. */
const char *nccltrack_kernel_name(const struct nccltrack *nt, uint32_t tgid, uint64_t handle);

/* Forgets a process (it exited); destroyed communicators are dropped after the next visit. */
void nccltrack_forget(struct nccltrack *nt, uint32_t tgid);
/* Drops communicators marked destroyed (call after a visit has reported them once). */
void nccltrack_prune(struct nccltrack *nt);

struct nccltrack_stats {
	uint32_t processes, communicators, names;
	uint64_t corrupt_events, table_full;
};
void nccltrack_stats_read(const struct nccltrack *nt, struct nccltrack_stats *out);

/* Bytes per element of an ncclDataType_t, 0 when unknown. */
uint32_t nccltrack_datatype_size(int32_t datatype);

#endif
