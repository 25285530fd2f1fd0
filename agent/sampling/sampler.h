/* SPDX-License-Identifier: Apache-2.0 */
/* The BPF CPU sampler: load, attach per online CPU, drain the double-buffered counts. */
#ifndef SYSOM_AGENT_SAMPLING_SAMPLER_H
#define SYSOM_AGENT_SAMPLING_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bpf/profile.h"

struct sampler_options {
	uint32_t hz;               /* timer frequency per CPU, 10..999 */
	double sample_rate;        /* fraction of ticks that collect a stack, (0, 1] */
	bool include_idle;         /* record ticks that hit the idle task */
	bool collect_user;         /* collect user stacks (else kernel only) */
	uint32_t max_sample_keys;  /* entries per aggregation buffer (count map) */
	uint32_t max_stacks;       /* entries per stack store */
	enum sysom_unwinder unwinder; /* user stacks: kernel frame pointers or hybrid (CFI) */
	/* Off-CPU time (sched_switch): whose blocks, the shortest counted, map bounds. */
	enum sysom_offcpu_mode offcpu_mode;
	uint64_t offcpu_min_ns;       /* shorter blocks are not counted, >= 1 µs */
	uint64_t offcpu_budget_ns;    /* ns of hybrid unwinding of blocking threads' user stacks
				       * per second of each CPU (default 5 ms: 0.5%), at most 1e9;
				       * 0: no limit (bpf/profile.bpf.c, offcpu_budget_ns) */
	uint32_t max_offcpu_keys;     /* entries per off-CPU aggregation buffer */
	uint32_t max_offcpu_threads;  /* threads asleep at once whose stacks are parked */
	bool offcpu_open;             /* JOBS mode: deliver blocks still in progress at drains
				       * (default true; false only to measure what it costs) */
	int offcpu_tracked_fd;        /* JOBS mode: a tgid-keyed HASH map (u32 → u32, at most
				       * 16384 entries, e.g. the OS signals' `tracked`) to share,
				       * or -1 for the sampler's own (sampler_offcpu_track) */
};

/* Defaults: 99 Hz, 10%, no idle, user stacks, 16384 keys, 8192 stacks, hybrid unwinder;
 * off-CPU off (the daemon turns it on), 1 ms minimum, 8192 keys, 4096 threads asleep. */
void sampler_options_default(struct sampler_options *opts);

/* Cumulative counters summed over CPUs (see struct sysom_cpu_state). */
struct sampler_counters {
	uint64_t ticks, gated_out, idle_skipped, samples, kstack_errors, ustack_errors;
	uint64_t count_map_full, stack_map_full, events_lost;
	struct unwind_stats unwind;
	struct py_stats py;
};

/* File descriptors of the hybrid unwinder's maps (owned by the sampler). */
struct sampler_unwind_maps {
	int tables;  /* HASH_OF_MAPS file id → rows */
	int procs;   /* tgid → struct unwind_proc */
	int markers; /* (file id, pc) → struct unwind_marker */
	int py_procs; /* tgid → struct py_proc (bpf/pyframes.h) */
	int table_template_flags; /* map_flags every rows array must be created with */
};

/*
 * The wire's stop reason (enum sysom_stack_stop, common/wire/wire.h) of a stack the BPF
 * program ended with `bpf_reason` (enum unwind_stop, bpf/unwind.h): the one table between the
 * two numberings. An unknown reason gives SYSOM_STOP_REASON_MAX.
 */
uint8_t sampler_stop_reason_to_wire(uint8_t bpf_reason);

/* One drained aggregation entry; pointers are valid only during the callback. Stacks carry
 * the wire's stop reasons (sampler_stop_reason_to_wire). */
struct sampler_entry {
	const struct sysom_sample_key *key;
	uint64_t count;
	const char *comm;                       /* thread name, NUL-terminated */
	const struct sysom_stack_trace *kernel; /* NULL when none, or lost (see below) */
	const struct sysom_stack_trace *user;
	bool kernel_lost;                       /* key had a kernel stack the store lacked */
	bool user_lost;
};

/* One drained off-CPU entry (blocked time of one thread on one pair of stacks); pointers are
 * valid only during the callback, as for struct sampler_entry. */
struct sampler_offcpu_entry {
	const struct sysom_offcpu_key *key;
	uint64_t count;    /* blocks */
	uint64_t total_ns; /* blocked time */
	uint64_t max_ns;   /* longest block */
	const char *comm;
	const struct sysom_stack_trace *kernel;
	const struct sysom_stack_trace *user;
	bool kernel_lost;
	bool user_lost;
};

typedef int (*sampler_offcpu_fn)(void *ctx, const struct sampler_offcpu_entry *entry);

/* Per-drain statistics. */
struct sampler_drain_stats {
	uint32_t entries;        /* distinct keys drained */
	uint64_t samples;        /* sum of counts */
	uint32_t stacks;         /* stacks read from the store */
	uint32_t stacks_missing; /* referenced stacks the store did not have */
	uint64_t quiesce_wait_ns; /* time spent waiting for in-flight programs */
	uint32_t offcpu_entries;  /* distinct off-CPU keys drained */
	uint64_t offcpu_blocks;   /* sum of their counts */
	uint32_t offcpu_open;     /* of them: blocks still in progress (JOBS mode, >= 1 s so far;
				   * their time so far, the switch-in adds the rest) */
};

typedef int (*sampler_drain_fn)(void *ctx, const struct sampler_entry *entry);
typedef void (*sampler_event_fn)(void *ctx, const struct sysom_proc_event *event);

struct sampler;

/*
 * Opens and loads the BPF object with `opts`, attaches the exec/exit hooks and a cpu-clock
 * perf event on every online CPU. Process events go to `on_event` (called from
 * sampler_poll_events). Returns 0 or -errno with `err` explaining (permissions, no BTF, ...).
 */
int sampler_open(const struct sampler_options *opts, sampler_event_fn on_event, void *ctx,
		 struct sampler **out, char *err, size_t errlen);

/* Frees everything; accepts NULL. */
void sampler_close(struct sampler *s);

/* File descriptor that becomes readable when process events are pending (epoll fd). */
int sampler_event_fd(const struct sampler *s);

/* Consumes pending process events; returns the number handled or -errno. */
int sampler_poll_events(struct sampler *s);

/*
 * Switches BPF to the other aggregation buffer, waits until no program can still write the
 * old one, then hands every entry of the old buffer to `fn` and empties it. Every sample is
 * delivered exactly once (`fn` NULL: drained and dropped; off-CPU entries go to the sink of
 * sampler_set_offcpu_sink). Returns 0 or the first negative value from `fn` or the kernel
 * (entries not yet delivered then stay for the next drain).
 */
int sampler_drain(struct sampler *s, sampler_drain_fn fn, void *ctx,
		  struct sampler_drain_stats *stats);

/*
 * Re-reads the online CPU list and attaches/detaches perf events to match (CPU hotplug).
 * Returns the number of CPUs attached + detached, or -errno.
 */
int sampler_sync_cpus(struct sampler *s);

/*
 * Detaches every perf event: once it returns no sample program runs any more (used to stop
 * sampling before the final drain, so the drained total matches the kernel's counters).
 * sampler_resume re-attaches the online CPUs. Both return 0 or -errno.
 */
int sampler_pause(struct sampler *s);
int sampler_resume(struct sampler *s);

/* Number of CPUs with an attached perf event. */
uint32_t sampler_attached_cpus(const struct sampler *s);

/* Changes the sampling-rate gate at run time. 0 or -EINVAL. */
int sampler_set_rate(struct sampler *s, double sample_rate);

/* Changes the timer frequency at run time (re-opens the perf events). 0 or -errno. */
int sampler_set_hz(struct sampler *s, uint32_t hz);

/* Cumulative counters. 0 or -errno. */
int sampler_counters_read(struct sampler *s, struct sampler_counters *out);

/* The unwinder's maps, for agent/sampling/unwinder.c. */
void sampler_unwind_maps(const struct sampler *s, struct sampler_unwind_maps *out);

/* The tgid → exec generation map, for other BPF objects to share (bpf_map__reuse_fd). */
int sampler_exec_generation_fd(const struct sampler *s);

/*
 * Run time and run count of the tick program from the kernel's BPF statistics (the run time
 * includes the unwind programs it tail-calls; zero unless
 * kernel.bpf_stats_enabled=1 or stats were enabled with BPF_ENABLE_STATS). 0 or -errno.
 */
int sampler_prog_stats(const struct sampler *s, uint64_t *run_time_ns, uint64_t *run_count);

/*
 * Where sampler_drain delivers off-CPU entries (drained with the CPU samples, whose stack
 * store they share); without a sink they are drained and dropped. `ctx` is borrowed.
 */
void sampler_set_offcpu_sink(struct sampler *s, sampler_offcpu_fn fn, void *ctx);

/* Whether off-CPU recording was loaded (options' mode not OFF). */
bool sampler_offcpu_loaded(const struct sampler *s);

/* Detaches (false) or re-attaches (true) the off-CPU sched_switch program. 0, -ENOTSUP when
 * not loaded, or -errno. */
int sampler_offcpu_enable(struct sampler *s, bool on);

/* JOBS mode with the sampler's own map: records (or stops recording) the threads of `tgid`.
 * 0 or -errno. */
int sampler_offcpu_track(struct sampler *s, uint32_t tgid, bool on);

/* Changes the minimum counted block at run time (>= 1 µs). 0 or -EINVAL. */
int sampler_set_offcpu_min_ns(struct sampler *s, uint64_t min_ns);

/* Changes the off-CPU unwind budget at run time (ns per second of each CPU, <= 1e9; 0: no
 * limit). 0 or -EINVAL. */
int sampler_set_offcpu_budget_ns(struct sampler *s, uint64_t budget_ns);

/* Off-CPU counters summed over CPUs (zero when not loaded). 0 or -errno. */
int sampler_offcpu_counters(struct sampler *s, struct sysom_offcpu_cpu *out);

/* Run time and count of the off-CPU programs (switch program plus its unwind tail calls; see
 * sampler_prog_stats). 0, -ENOTSUP when not loaded, or -errno. */
int sampler_offcpu_prog_stats(const struct sampler *s, uint64_t *run_time_ns,
			      uint64_t *run_count);

#endif
