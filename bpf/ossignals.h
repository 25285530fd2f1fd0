/* SPDX-License-Identifier: GPL-2.0-only */
/* Plain structs and constants shared by ossignals.bpf.c and the agent (OS signals: interrupts,
 * softirqs, scheduling, NUMA). No pointers. */
#ifndef SYSOM_BPF_OSSIGNALS_H
#define SYSOM_BPF_OSSIGNALS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#include "include/sysom/histogram.h"

#define OS_SOFTIRQS 10          /* softirq vectors (HI .. RCU): SYSOM_SOFTIRQ_COUNT, asserted */
#define OS_HIST_BUCKETS SYSOM_RUNQ_HIST_BUCKETS /* include/sysom/histogram.h */
#define OS_CPU_MASK_WORDS 4     /* the first 256 CPUs: SYSOM_CPU_MASK_WORDS, asserted */
#define OS_MAX_CPUS 4096        /* cpu → NUMA node entries (CPUs beyond have no node) */
#define OS_MAX_TRACKED 16384    /* tracked processes (tgids) */
#define OS_MAX_THREADS 16384    /* threads measured at once (default; the agent may resize) */
#define OS_MAX_IRQ_KEYS 16384   /* (CPU, IRQ) pairs counted */
#define OS_COMM_LEN 16

/*
 * Everything below is cumulative since the programs were loaded: BPF only ever adds, the agent
 * takes per-window differences (agent/os/ossignals.c explains why: no value is ever reset or
 * deleted under a running program, so an increment can be neither lost nor counted twice).
 */

/* Per CPU (a PERCPU_ARRAY of one entry): written only by programs running on that CPU. */
struct os_cpu {
	__u64 busy_ns;          /* time not in the idle task (pid 0) */
	__u64 hardirq_count;
	__u64 hardirq_ns;       /* device interrupt handlers (irq_handler_entry/exit) */
	__u64 softirq_count[OS_SOFTIRQS];
	__u64 softirq_ns[OS_SOFTIRQS]; /* less the hard interrupts nested in them */
	__u64 context_switches;
	__u64 runq_wait_ns;     /* waits of every task that ran here (charged when it stops) */
	/* Losses (cumulative, per CPU). */
	__u64 threads_lost;     /* tracked threads not measured (once each): the thread map was
				 * full, or it exited before an insert succeeded */
	__u64 irqs_lost;        /* interrupts not counted per (CPU, IRQ): irq map full */
	/* State of the CPU (not statistics). */
	__u64 switch_ns;        /* when the current task was switched in (or the last flush) */
	__u64 flush_ns;         /* when os_flush last ran here: the CPU's own window edge */
	__u64 hardirq_start_ns; /* handler running since, 0 none */
	__u64 softirq_start_ns; /* softirq running since, 0 none */
	__u64 softirq_hardirq_base; /* hardirq_ns when that softirq started */
	__u32 cur_pid;          /* current task, 0 idle */
	__u32 cur_tracked;      /* 1: cur_tid/cur_start name its entry in `threads` */
	__u32 cur_tid;
	__u32 cur_epoch;        /* track_epoch when cur_tracked was decided */
	__u64 cur_start;
};

/* A thread incarnation: tid and task start time (so a reused tid is another thread). */
struct os_thread_key {
	__u32 tid;
	__u32 pad;
	__u64 start_ns; /* task_struct.start_time */
};

#define OS_THREAD_EXITED 0x1 /* sched_process_exit seen: the agent removes it after a last read */
#define OS_THREAD_LOST 0x2   /* (task storage flag) the thread map was full for it: counted */
/* (task storage flag) an insert of its entry failed for a moment (the map is not preallocated:
 * the kernel's per-CPU cache of free elements can run dry in a burst of new threads); retried
 * at its next event, and counted lost at its exit if none succeeded. */
#define OS_THREAD_INSERT_FAILED 0x8

/* Per tracked thread (HASH keyed by struct os_thread_key). */
struct os_thread {
	__u32 tgid;
	__u32 flags;            /* OS_THREAD_* */
	__u32 last_cpu;         /* CPU it was last switched in on */
	__u32 pad;
	char comm[OS_COMM_LEN]; /* at its last switch-out */
	__u64 oncpu_ns;
	__u64 runq_wait_ns;
	__u64 runq_waits;
	__u64 voluntary_switches;
	__u64 involuntary_switches;
	__u64 migrations;
	__u64 numa_migrations;
	__u64 pages_migrated;
	__u64 hardirq_ns;
	__u64 softirq_ns;
	/* The kernel's sched_info of the task when the run-queue waits were last folded in. */
	__u64 last_run_delay;
	__u64 last_pcount;
	__u32 runq_hist[OS_HIST_BUCKETS]; /* wraps at 2^32: the agent subtracts modulo 2^32 */
	/* CPUs it ran on, per window: slot (w & 1) holds window w when mask_window[w & 1] == w
	 * (the agent numbers windows in `window`, BPF clears a slot when it first uses it for a
	 * new window). */
	__u32 mask_window[2];
	__u64 cpus[2][OS_CPU_MASK_WORDS];
};

struct os_irq_key {
	__u32 cpu;
	__u32 irq;
};

struct os_irq_value {
	__u64 count;
	__u64 ns;
};

#define OS_TASK_BASELINE 0x4 /* (task storage flag) last_run_delay holds a reading */

/* Per task (TASK_STORAGE): whether it is tracked, decided once per track_epoch, and the
 * scheduler's run_delay when its waits were last charged to a CPU. */
struct os_task {
	__u64 last_run_delay;
	__u32 epoch;       /* track_epoch when `tracked` was decided (0: never) */
	__u8 tracked;
	__u8 flags;        /* OS_THREAD_LOST, OS_TASK_BASELINE, OS_THREAD_INSERT_FAILED */
	__u16 pad;
};

#endif
