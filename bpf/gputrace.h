/* SPDX-License-Identifier: GPL-2.0-only */
/* Plain structs and constants shared by gputrace.bpf.c and the agent (NCCL and CUDA probes). */
#ifndef SYSOM_BPF_GPUTRACE_H
#define SYSOM_BPF_GPUTRACE_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#include "bpf/unwind.h"
#include "include/sysom/nccl_ops.h"

/*
 * Attach cookie of every probe: the traced function (enum gputrace_fn) in bits 0..7 and the
 * library slot (index into `nccl_layouts`) in bits 8..15.
 */
#define GPUTRACE_COOKIE(fn, slot) ((__u64)(fn) | (__u64)(slot) << 8)
#define GPUTRACE_COOKIE_FN(c) ((__u32)((c) & 0xff))
#define GPUTRACE_COOKIE_SLOT(c) ((__u32)(((c) >> 8) & 0xff))
#define GPUTRACE_MAX_LIBRARIES 64 /* library slots (files with probes), ever */

/* Traced functions. The NCCL ones are enum sysom_nccl_op (include/sysom/nccl_ops.h), so the
 * values pass through to the wire unchanged. */
enum gputrace_fn {
	GT_NCCL_ALL_REDUCE = SYSOM_NCCL_ALL_REDUCE,
	GT_NCCL_REDUCE_SCATTER = SYSOM_NCCL_REDUCE_SCATTER,
	GT_NCCL_ALL_GATHER = SYSOM_NCCL_ALL_GATHER,
	GT_NCCL_BROADCAST = SYSOM_NCCL_BROADCAST,
	GT_NCCL_REDUCE = SYSOM_NCCL_REDUCE,
	GT_NCCL_ALL_TO_ALL = SYSOM_NCCL_ALL_TO_ALL,
	GT_NCCL_GATHER = SYSOM_NCCL_GATHER,
	GT_NCCL_SCATTER = SYSOM_NCCL_SCATTER,
	GT_NCCL_SEND = SYSOM_NCCL_SEND,
	GT_NCCL_RECV = SYSOM_NCCL_RECV,
	GT_NCCL_GROUP_START = SYSOM_NCCL_GROUP_START,
	GT_NCCL_GROUP_END = SYSOM_NCCL_GROUP_END,
	GT_NCCL_COMM_INIT_RANK = SYSOM_NCCL_COMM_INIT_RANK,
	GT_NCCL_COMM_INIT_RANK_CONFIG = SYSOM_NCCL_COMM_INIT_RANK_CONFIG,
	GT_NCCL_COMM_INIT_ALL = SYSOM_NCCL_COMM_INIT_ALL,
	GT_NCCL_COMM_INIT_RANK_SCALABLE = SYSOM_NCCL_COMM_INIT_RANK_SCALABLE,
	GT_NCCL_COMM_SPLIT = SYSOM_NCCL_COMM_SPLIT,
	GT_NCCL_COMM_DESTROY = SYSOM_NCCL_COMM_DESTROY,
	GT_NCCL_COMM_ABORT = SYSOM_NCCL_COMM_ABORT,
	GT_NCCL_COMM_FINALIZE = SYSOM_NCCL_COMM_FINALIZE,
	GT_NCCL_LAST = SYSOM_NCCL_OP_MAX,
	/* CUDA driver */
	GT_CU_LAUNCH_KERNEL = 32,
	GT_CU_LAUNCH_KERNEL_PTSZ = 33,
	GT_CU_LAUNCH_KERNEL_EX = 34,
	GT_CU_LAUNCH_KERNEL_EX_PTSZ = 35,
	GT_CU_MODULE_GET_FUNCTION = 36, /* (CUfunction *out, CUmodule, const char *name) */
	GT_CU_LIBRARY_GET_KERNEL = 37,  /* (CUkernel *out, CUlibrary, const char *name) */
	GT_CU_KERNEL_GET_FUNCTION = 38, /* (CUfunction *out, CUkernel) */
	GT_FN_MAX = 39,
};

enum gputrace_event_type {
	GT_EVENT_NCCL_CALL = 1, /* struct gt_nccl_event */
	GT_EVENT_NCCL_INIT = 2, /* struct gt_nccl_init_event */
	GT_EVENT_CU_NAME = 3,   /* struct gt_name_event: function/kernel handle → name */
	GT_EVENT_CU_ALIAS = 4,  /* struct gt_name_event without name: function → kernel */
};

#define GT_IN_GROUP 0x1       /* nccl event flags: inside GroupStart/GroupEnd */
#define GT_COMM_FIELDS 0x2    /* rank/nranks/comm_hash were read from the communicator */
#define GT_UNIQUE_ID_BYTES 128
#define GT_INIT_ALL_MAX 16    /* communicators reported by one CommInitAll */
#define GT_NAME_MAX 512       /* kernel name bytes kept (longer names are truncated) */

/* One NCCL API call (entry + return). */
struct gt_nccl_event {
	__u32 type; /* GT_EVENT_NCCL_CALL or _INIT */
	__u32 tgid;
	__u32 tid;
	__u8 fn;    /* enum gputrace_fn */
	__u8 flags; /* GT_* */
	__u16 slot; /* library slot */
	__u32 generation; /* process incarnation (the sampler's exec_generation map, shared) */
	__u32 pad;
	__u64 entry_ns, exit_ns; /* bpf_ktime_get_ns (CLOCK_MONOTONIC) */
	__u64 comm;   /* ncclComm_t (for init and split: the new communicator) */
	__u64 parent; /* CommSplit: the parent communicator */
	__u64 count;
	__u64 stream;
	__u64 seq;    /* per (tgid, comm, fn) call number from 0 */
	__u64 comm_hash;
	__s32 datatype, redop, peer, result;
	__s32 rank, nranks; /* from the arguments (init) or the communicator (GT_COMM_FIELDS) */
	__s32 color, key;   /* CommSplit */
};

/* CommInitRank[Config|Scalable]: the unique id; CommInitAll: the communicators. */
struct gt_nccl_init_event {
	struct gt_nccl_event call;
	union {
		__u8 unique_id[GT_UNIQUE_ID_BYTES];
		__u64 comms[GT_INIT_ALL_MAX];
	};
};

struct gt_name_event {
	__u32 type; /* GT_EVENT_CU_NAME or GT_EVENT_CU_ALIAS */
	__u32 tgid;
	__u64 handle; /* CUfunction or CUkernel returned */
	__u64 source; /* ALIAS: the CUkernel the function came from */
	__u32 name_len; /* bytes in name, without the NUL */
	__u32 generation;
	char name[GT_NAME_MAX];
};

/* Where a library's communicator fields are (from DWARF or a version table); valid != 0. */
struct gt_comm_layout {
	__u32 valid;
	__u32 rank_offset, nranks_offset, comm_hash_offset;
	__u32 comm_hash_size; /* 8, or 0: the release has no commHash */
};

#define GT_LAUNCH_MAX_DEPTH 64

/* Launch aggregation: one count per (process, function, user stack). */
struct gt_launch_key {
	__u32 tgid;
	__u32 generation;
	__u16 flags;   /* SYSOM_LAUNCH_* */
	__u16 nframes;
	__u32 pad;
	__u64 function;
	__u64 ips[GT_LAUNCH_MAX_DEPTH];
};

struct gt_launch_value {
	__u64 count;
	__u32 grid[3];
	__u32 block[3];
	__u32 shared_mem;
	__u32 pad;
};

/* Per-CPU counters (summed by the agent). */
struct gt_stats {
	__u64 calls;           /* NCCL calls completed (events emitted or lost) */
	__u64 events_lost;     /* ring buffer full */
	__u64 unmatched;       /* a return without its entry */
	__u64 nesting_overflow; /* calls nested deeper than GT_MAX_NESTING */
	__u64 launches;
	__u64 launch_map_full;
	__u64 names;
	__u64 stack_errors;
	__u64 launch_stacks_hybrid; /* launch stacks by the hybrid unwinder (the rest: frame pointers) */
	struct unwind_stats unwind;  /* the hybrid unwinder's counters for launch stacks */
};

#define GT_MAX_NESTING 4

/* One in-flight call of a thread (entry seen, return not yet). The agent reads these at each
 * seal to report collectives still inside NCCL (wire NCCL_CALLS flag "in flight"). */
struct pending_call {
	__u64 entry_ns;
	__u64 args[6];
	__u64 stack_args[2]; /* arguments 7 and 8 */
	__u64 seq;
	__u64 comm_hash;
	__s32 rank, nranks;
	__u32 fn;
	__u32 flags;
};

/* The `threads` map's value, per pid_tgid. */
struct thread_state {
	__u32 depth;       /* in-flight calls */
	__u32 group_depth; /* GroupStart minus GroupEnd */
	struct pending_call calls[GT_MAX_NESTING];
	__u8 unique_id[GT_UNIQUE_ID_BYTES]; /* init: the id argument (one init per thread at once) */
};

#endif
