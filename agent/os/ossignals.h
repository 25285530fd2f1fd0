/* SPDX-License-Identifier: Apache-2.0 */
/*
 * OS signals (bpf/ossignals.bpf.c): per CPU, device interrupts, softirqs, busy time, context
 * switches and run-queue wait; per (CPU, IRQ), handler counts and time; per thread of the
 * tracked processes (training jobs), on-CPU time, run-queue latency, voluntary and involuntary
 * switches, migrations (NUMA ones apart), pages migrated, and the interrupt time that landed
 * on its CPU while it ran. Loads and attaches the programs, keeps the set of tracked processes,
 * and turns the kernel's cumulative counts into per-window rows (wire 1.3: OS_CPUS, OS_IRQS,
 * OS_THREADS).
 */
#ifndef SYSOM_AGENT_OS_OSSIGNALS_H
#define SYSOM_AGENT_OS_OSSIGNALS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/wire.h"
#include "common/report.h"

struct ossignals;

struct ossignals_options {
	const char *proc_root;  /* "/proc": environments (job identity), threads */
	const char *sys_root;   /* "/sys": NUMA nodes' CPU lists, IRQ handler names */
	bool track_all;         /* every user thread, not only the processes of training jobs */
	uint32_t max_threads;   /* threads measured at once (BPF map entries), default 16384 */
	/* Messages for the log (tracepoints missing, processes not tracked): the daemon logs them. */
	struct sysom_reporter report;
};

void ossignals_options_default(struct ossignals_options *o);

/*
 * Loads the programs and attaches each tracepoint on its own: one that cannot attach (a kernel
 * without it) is logged, counted (ossignals_stats.attach_errors) and the rest work. Fails
 * (-errno, `err` explaining) only when the programs cannot load or nothing attaches.
 */
int ossignals_open(const struct ossignals_options *o, struct ossignals **out, char *err,
		   size_t errlen);
/* Detaches and frees; accepts NULL. */
void ossignals_close(struct ossignals *os);

/* ---- which processes are tracked -------------------------------------------------------- */

/* Tracks every thread of `tgid` from now on. 0, -ENOSPC when OS_MAX_TRACKED processes are
 * tracked already, or -errno. */
int ossignals_track(struct ossignals *os, uint32_t tgid);
/* Stops tracking `tgid` (its threads' rows end with the next collect). */
void ossignals_untrack(struct ossignals *os, uint32_t tgid);
bool ossignals_is_tracked(const struct ossignals *os, uint32_t tgid);
/* The BPF map of tracked processes (tgid → u32, OS_MAX_TRACKED entries) for other BPF objects
 * to share, or -1 when every user thread is tracked (the map is then unused). Borrowed. */
int ossignals_tracked_fd(const struct ossignals *os);

/*
 * A process the agent met (its mappings were read): whether it belongs to a training job is
 * decided at the next ossignals_refresh from its environment (agent/ranks/jobenv.c: a rank or a job
 * id), once per incarnation. Cheap: only queues it (bounded; the overflow waits for the next
 * offer).
 */
void ossignals_offer(struct ossignals *os, uint32_t tgid, uint32_t generation);
/* The incarnation is gone: untrack it and forget its decision. */
void ossignals_forget(struct ossignals *os, uint32_t tgid, uint32_t generation);
/* Queues every running process (at start). Returns the number queued or -errno. */
int ossignals_offer_all(struct ossignals *os);
/* Reads the environment of at most `budget` queued processes and tracks the job processes.
 * Returns the number of processes newly tracked. */
int ossignals_refresh(struct ossignals *os, uint32_t budget);

/* ---- per-window rows ---------------------------------------------------------------------- */

/*
 * Rows of one window. String and process fields of the records are not filled (0): the IRQ's
 * handler names and the thread's comm are passed as text, the process as its tgid. Pointers
 * are valid during the call only.
 */
struct ossignals_visitor {
	void (*cpu)(void *ctx, const struct sysom_os_cpu *c);
	void (*irq)(void *ctx, const struct sysom_os_irq *q, const char *name);
	void (*thread)(void *ctx, uint32_t tgid, const struct sysom_os_thread *t, const char *comm);
	void *ctx;
};

/* What one collect saw. */
struct ossignals_window {
	uint64_t duration_ns;   /* since the previous collect (or the open) */
	uint32_t cpus, irqs, threads; /* rows visited */
	uint64_t threads_lost;  /* tracked threads not measured: the BPF thread map was full, or
				   they exited before their entry could be made */
	uint64_t irqs_lost;     /* interrupts not counted per (CPU, IRQ): BPF map full */
	uint32_t threads_removed; /* exited threads whose entries were removed */
};

/*
 * Closes the window that began at the previous collect: charges the running tasks' time on
 * every CPU (a BPF program run on each CPU), then visits a row per CPU, per (CPU, IRQ) and per
 * tracked thread that changed in the window, with the window's increments. Exited threads are
 * read a last time and removed a collect after their exit. 0 or -errno (`out` optional).
 */
int ossignals_collect(struct ossignals *os, const struct ossignals_visitor *v,
		      struct ossignals_window *out);

struct ossignals_stats {
	uint32_t programs;       /* tracepoint programs */
	uint32_t attached;       /* ... attached */
	uint32_t attach_errors;  /* ... that failed to attach */
	char failed[256];        /* their tracepoints, comma-separated ("" none) */
	uint32_t tracked;        /* processes tracked now */
	uint32_t threads;        /* thread entries in the BPF map at the last collect */
	uint32_t numa_nodes;     /* NUMA nodes found (0: none: NUMA migrations are not told apart) */
	bool track_all;
};
void ossignals_stats_read(const struct ossignals *os, struct ossignals_stats *out);

/* One program's cost as the kernel measures it (run_cnt / run_time_ns; both stay 0 unless
 * the sysctl kernel.bpf_stats_enabled is 1). */
struct ossignals_program {
	const char *tracepoint;  /* "sched:sched_switch", ... */
	bool attached;
	uint64_t runs, run_ns;
};
/* Program `i` (0-based); -ENOENT past the last. */
int ossignals_program(const struct ossignals *os, uint32_t i, struct ossignals_program *out);

/* Name of IRQ `irq` (its handlers, /sys/kernel/irq/N/actions; "" when unknown), cached. */
const char *ossignals_irq_name(struct ossignals *os, uint32_t irq);

/* The NUMA node of `cpu` as read at open, -1 unknown. */
int32_t ossignals_cpu_node(const struct ossignals *os, uint32_t cpu);

#endif
