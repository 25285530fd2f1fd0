/* SPDX-License-Identifier: GPL-2.0-only */
/* Plain structs and constants shared by profile.bpf.c and the agent (no pointers). */
#ifndef SYSOM_BPF_PROFILE_H
#define SYSOM_BPF_PROFILE_H

#ifndef __VMLINUX_H__
#include <linux/types.h> /* user space; BPF code gets the types from vmlinux.h */
#endif

#include "bpf/pyframes.h"
#include "bpf/unwind.h"

/* Deepest stack collected per side (the kernel's perf_event_max_stack default). */
#define SYSOM_PROFILE_MAX_DEPTH 127
#define SYSOM_COMM_LEN 16
/* Number of aggregation buffers: BPF writes one while the agent drains the other. */
#define SYSOM_PROFILE_BUFFERS 2

/* Aggregation key: one count per (process, thread, CPU, exec generation, stacks). */
struct sysom_sample_key {
	__u32 tgid;
	__u32 tid;
	__u32 cpu;
	__u32 generation;   /* incarnation of `tgid`: bumped at fork of a new process and at exec */
	__u64 kernel_stack; /* hash of the kernel stack in the stack store, 0 = none */
	__u64 user_stack;   /* hash of the user stack in the stack store, 0 = none */
};

struct sysom_sample_value {
	__u64 count;
	char comm[SYSOM_COMM_LEN]; /* thread name at the first sample */
};

enum sysom_stack_side {
	SYSOM_SIDE_KERNEL = 1,
	SYSOM_SIDE_USER = 2,
};

/*
 * A stack in the stack store, keyed by its hash. `ips` are raw instruction pointers,
 * leaf first; the agent turns user ones into (build ID, file offset) and kernel ones into
 * offsets from _text. Later unwinders fill the same struct, so the store does not change.
 */
struct sysom_stack_trace {
	__u16 nframes;
	__u8 side;        /* enum sysom_stack_side */
	__u8 stop_reason; /* enum unwind_stop (bpf/unwind.h); the sampler translates it */
	__u32 pad;
	__u64 ips[SYSOM_PROFILE_MAX_DEPTH];
};

/*
 * Per-CPU state (a per-CPU array of one element). `inflight` is odd while a sample program
 * that may write an aggregation buffer runs on that CPU: after switching buffers the agent
 * waits until every CPU's value is even or has moved on, so no sample is written into a buffer
 * being drained. The other fields are monotonic counters.
 */
struct sysom_cpu_state {
	__u64 inflight;
	__u64 ticks;          /* timer ticks seen */
	__u64 gated_out;      /* skipped by the sampling-rate gate */
	__u64 idle_skipped;   /* hit the idle task (not recorded unless include_idle) */
	__u64 samples;        /* recorded (counted in an aggregation buffer) */
	__u64 kstack_errors;  /* bpf_get_stack failed for the kernel stack */
	__u64 ustack_errors;  /* bpf_get_stack failed for the user stack */
	__u64 count_map_full; /* sample lost: aggregation map full */
	__u64 stack_map_full; /* stack not stored: stack store full (sample kept) */
	__u64 events_lost;    /* process events lost: ring buffer full */
	struct unwind_stats unwind; /* hybrid unwinder (zero in frame-pointer mode) */
	struct py_stats py;         /* CPython frames (hybrid unwinder only) */
};

/* How user stacks are unwound (fixed at load time). */
enum sysom_unwinder {
	SYSOM_UNWINDER_FP = 0,     /* the kernel's frame-pointer walk (bpf_get_stack) */
	SYSOM_UNWINDER_HYBRID = 1, /* CFI tables + validated frame pointers with markers */
};

enum sysom_proc_event_type {
	SYSOM_PROC_EVENT_NEW = 1,  /* first sample of (tgid, generation) since the agent knew it */
	SYSOM_PROC_EVENT_EXEC = 2, /* the process exec'd: generation incremented */
	SYSOM_PROC_EVENT_EXIT = 3, /* the last thread of the process exited */
	SYSOM_PROC_EVENT_UNMAPPED = 4, /* unwinder met `addr` in no published mapping: rescan */
};

/* Ring buffer record telling the agent to read or drop a process's mappings. */
struct sysom_proc_event {
	__u32 type; /* enum sysom_proc_event_type */
	__u32 tgid;
	__u32 generation;
	__u32 pad;
	__u64 ktime_ns; /* bpf_ktime_get_ns() */
	char comm[SYSOM_COMM_LEN];
	__u64 addr;     /* UNMAPPED: the user address */
};

/* ---- off-CPU time (sched_switch): where threads block and for how long ---------------------- */

/* Which threads' blocked time is recorded (fixed at load time). */
enum sysom_offcpu_mode {
	SYSOM_OFFCPU_OFF = 0,  /* not recorded (the programs are not loaded) */
	SYSOM_OFFCPU_JOBS = 1, /* threads of the processes in the `offcpu_tracked` map */
	SYSOM_OFFCPU_ALL = 2,  /* every user thread */
};

/* How a thread left the CPU: its state at the switch (the kernel's TASK_* bits). */
enum sysom_offcpu_state {
	SYSOM_OFFCPU_STATE_SLEEP = 1, /* S: interruptible sleep (poll, futex, pipe, nanosleep) */
	SYSOM_OFFCPU_STATE_DISK = 2,  /* D: uninterruptible (I/O, page faults, some locks) */
	SYSOM_OFFCPU_STATE_OTHER = 3, /* stopped, traced, dead, parked, ... */
};

/* Aggregation key of blocked time: one entry per (thread, exec generation, state, stacks). */
struct sysom_offcpu_key {
	__u32 tgid;
	__u32 tid;
	__u32 generation;   /* as in struct sysom_sample_key */
	__u32 state;        /* enum sysom_offcpu_state */
	__u64 kernel_stack; /* hash in the stack store (the same store as CPU samples), 0 = none */
	__u64 user_stack;
};

struct sysom_offcpu_value {
	__u64 count;    /* blocks at least offcpu_min_ns long */
	__u64 total_ns; /* switch-out to switch-in, summed */
	__u64 max_ns;   /* the longest one */
	char comm[SYSOM_COMM_LEN]; /* thread name at the first block */
};

/*
 * Off-CPU counters, per CPU (a per-CPU array of one element), monotonic. A block is a
 * switch-out of a recorded thread that was not runnable (it slept, not preempted).
 */
struct sysom_offcpu_cpu {
	__u64 switches;       /* sched_switch events seen */
	__u64 blocks;         /* blocks of recorded threads whose stacks were taken */
	__u64 recorded;       /* blocks counted in an aggregation buffer */
	__u64 short_blocks;   /* ended before offcpu_min_ns: not counted */
	__u64 start_map_full; /* block lost: no room to park its stacks until switch-in */
	__u64 count_map_full; /* block lost: aggregation map full */
	__u64 fp_fallback;    /* user stack by the kernel's frame-pointer walk (hybrid unwinder
			       * not used: process unpublished, or the tail call failed) */
	__u64 blocked_ns;     /* total of recorded blocks */
	__u64 unwind_ns;      /* spent in hybrid unwinds of blocking threads' user stacks */
	__u64 over_budget;    /* user stacks by the frame-pointer walk instead: this CPU had spent
			       * its unwind budget (offcpu_budget_ns per second) */
};

#endif
