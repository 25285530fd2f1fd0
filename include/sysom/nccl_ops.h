/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL API functions, numbered once for everyone: the BPF probes (bpf/gputrace.h names its
 * traced functions with these values), the agent (agent/gpu/nccltrack.c) and the wire
 * (NCCL_CALLS records, common/wire/wire.h). The values are stable on the wire.
 *
 * Plain constants, so BPF programs include it too; the helpers below are for user space only
 * (BPF code includes vmlinux.h first, which defines __VMLINUX_H__).
 */
#ifndef SYSOM_NCCL_OPS_H
#define SYSOM_NCCL_OPS_H

enum sysom_nccl_op {
	SYSOM_NCCL_ALL_REDUCE = 1,
	SYSOM_NCCL_REDUCE_SCATTER = 2,
	SYSOM_NCCL_ALL_GATHER = 3,
	SYSOM_NCCL_BROADCAST = 4,
	SYSOM_NCCL_REDUCE = 5,
	SYSOM_NCCL_ALL_TO_ALL = 6,
	SYSOM_NCCL_GATHER = 7,
	SYSOM_NCCL_SCATTER = 8,
	SYSOM_NCCL_SEND = 9,
	SYSOM_NCCL_RECV = 10,
	SYSOM_NCCL_GROUP_START = 11,
	SYSOM_NCCL_GROUP_END = 12,
	SYSOM_NCCL_COMM_INIT_RANK = 13,
	SYSOM_NCCL_COMM_INIT_RANK_CONFIG = 14,
	SYSOM_NCCL_COMM_INIT_ALL = 15,
	SYSOM_NCCL_COMM_INIT_RANK_SCALABLE = 16,
	SYSOM_NCCL_COMM_SPLIT = 17,
	SYSOM_NCCL_COMM_DESTROY = 18,
	SYSOM_NCCL_COMM_ABORT = 19,
	SYSOM_NCCL_COMM_FINALIZE = 20,
	SYSOM_NCCL_OP_MAX = SYSOM_NCCL_COMM_FINALIZE,
};

#ifndef __VMLINUX_H__
#include <stdbool.h>
#include <stddef.h>

/* Collectives and point-to-point operations carry a communicator and a sequence number. */
static inline bool sysom_nccl_op_is_collective(unsigned op)
{
	return op >= SYSOM_NCCL_ALL_REDUCE && op <= SYSOM_NCCL_RECV;
}

/* NCCL function name without the "nccl" prefix ("AllReduce", "CommInitRank"); NULL when
 * unknown. The string is static. */
static inline const char *sysom_nccl_op_name(unsigned op)
{
	static const char *const names[SYSOM_NCCL_OP_MAX + 1] = {
		[SYSOM_NCCL_ALL_REDUCE] = "AllReduce",
		[SYSOM_NCCL_REDUCE_SCATTER] = "ReduceScatter",
		[SYSOM_NCCL_ALL_GATHER] = "AllGather",
		[SYSOM_NCCL_BROADCAST] = "Broadcast",
		[SYSOM_NCCL_REDUCE] = "Reduce",
		[SYSOM_NCCL_ALL_TO_ALL] = "AlltoAll",
		[SYSOM_NCCL_GATHER] = "Gather",
		[SYSOM_NCCL_SCATTER] = "Scatter",
		[SYSOM_NCCL_SEND] = "Send",
		[SYSOM_NCCL_RECV] = "Recv",
		[SYSOM_NCCL_GROUP_START] = "GroupStart",
		[SYSOM_NCCL_GROUP_END] = "GroupEnd",
		[SYSOM_NCCL_COMM_INIT_RANK] = "CommInitRank",
		[SYSOM_NCCL_COMM_INIT_RANK_CONFIG] = "CommInitRankConfig",
		[SYSOM_NCCL_COMM_INIT_ALL] = "CommInitAll",
		[SYSOM_NCCL_COMM_INIT_RANK_SCALABLE] = "CommInitRankScalable",
		[SYSOM_NCCL_COMM_SPLIT] = "CommSplit",
		[SYSOM_NCCL_COMM_DESTROY] = "CommDestroy",
		[SYSOM_NCCL_COMM_ABORT] = "CommAbort",
		[SYSOM_NCCL_COMM_FINALIZE] = "CommFinalize",
	};

	return op <= SYSOM_NCCL_OP_MAX ? names[op] : NULL;
}
#endif

#endif
