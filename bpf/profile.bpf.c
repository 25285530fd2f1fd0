// SPDX-License-Identifier: GPL-2.0-only
/* CPU stack sampler: perf_event (cpu-clock) ticks → gated stack capture → in-kernel counts. */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/profile.h"

char LICENSE[] SEC("license") = "GPL";

#define PF_KTHREAD 0x00200000

/* Settings fixed at load time (set between __open() and __load()). */
const volatile bool include_idle = false;   /* record ticks that hit the idle task */
const volatile bool collect_user = true;    /* collect user stacks */
const volatile __u32 unwinder = SYSOM_UNWINDER_FP; /* enum sysom_unwinder */

/*
 * Settings the agent may change at run time (in .bss/.data, mmapped by the skeleton).
 * sample_threshold: a tick collects a stack when bpf_get_prandom_u32() < threshold;
 * 0xffffffff with `sample_all` means every tick.
 */
__u32 sample_threshold = 0x1999999a; /* 10% */
bool sample_all = false;
/* Which aggregation buffer (0 or 1) samples go to; flipped by the agent to drain. */
__u32 active_buffer = 0;

/* Aggregation buffers, double-buffered through ARRAY_OF_MAPS; sizes set at open. */
struct counts_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sysom_sample_key);
	__type(value, struct sysom_sample_value);
} counts_0 SEC(".maps"), counts_1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, SYSOM_PROFILE_BUFFERS);
	__type(key, __u32);
	__array(values, struct counts_map);
} counts SEC(".maps") = {
	.values = { &counts_0, &counts_1 },
};

struct stacks_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct sysom_stack_trace);
} stacks_0 SEC(".maps"), stacks_1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, SYSOM_PROFILE_BUFFERS);
	__type(key, __u32);
	__array(values, struct stacks_map);
} stacks SEC(".maps") = {
	.values = { &stacks_0, &stacks_1 },
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sysom_cpu_state);
} cpu_state SEC(".maps");

/* ---- hybrid unwinder (bpf/unwind_core.bpf.h): its maps, registers and steps ---------------- */

static __always_inline void emit_proc_event(struct sysom_cpu_state *cs, __u32 type, __u32 tgid,
					    __u32 generation, __u64 addr);
#define UNWIND_ON_UNMAPPED(c, addr)                                                            \
	emit_proc_event((struct sysom_cpu_state *)(c)->owner, SYSOM_PROC_EVENT_UNMAPPED,       \
			(c)->tgid, (c)->generation, (addr))
#define UNWIND_PYTHON 1
#include "bpf/unwind_core.bpf.h"

/*
 * Per-CPU scratch for the sample being built (too big for the BPF stack). A sample may span
 * several programs (tail calls): everything they share lives here. The perf_event program
 * runs with interrupts off on its CPU, so one slot per CPU is never used twice at once.
 */
struct sample_scratch {
	struct sysom_sample_key key;
	__u32 buffer;       /* aggregation buffer chosen at the tick (see `inflight`) */
	__u32 tail_calls;   /* unwind programs run for this sample after the first */
	struct unwind_regs regs;
	struct sysom_stack_trace kernel;
	struct sysom_stack_trace user;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sample_scratch);
} scratch SEC(".maps");

/* tgid → generation: bumped when a process is forked under this pid and at every exec
 * (absent = 0: a process older than the agent that never exec'd since). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} exec_generation SEC(".maps");

/* tgid → generation the agent was told about (NEW events are sent once per generation). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} announced SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} proc_events SEC(".maps");

/* Frames per unwind program run, and runs per sample (tail calls after the first). */
#define UNWIND_FRAMES_PER_PROG 32
#define UNWIND_MAX_TAIL_CALLS 4

int sysom_unwind_user(struct bpf_perf_event_data *ctx);

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__array(values, int(struct bpf_perf_event_data *));
} unwind_progs SEC(".maps") = {
	.values = { [0] = (void *)&sysom_unwind_user },
};

static __always_inline void emit_proc_event(struct sysom_cpu_state *cs, __u32 type, __u32 tgid,
					    __u32 generation, __u64 addr)
{
	struct sysom_proc_event *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);

	if (!e) {
		if (cs)
			__sync_fetch_and_add(&cs->events_lost, 1);
		return;
	}
	e->type = type;
	e->tgid = tgid;
	e->generation = generation;
	e->pad = 0;
	e->ktime_ns = bpf_ktime_get_ns();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->addr = addr;
	bpf_ringbuf_submit(e, 0);
}

static __always_inline __u64 stack_hash(const struct sysom_stack_trace *st)
{
	__u64 h = 0xcbf29ce484222325ULL ^ ((__u64)st->side << 40) ^ ((__u64)st->stop_reason << 48) ^
		  st->nframes;

	for (int i = 0; i < SYSOM_PROFILE_MAX_DEPTH; i++) {
		if (i >= st->nframes)
			break;
		h ^= st->ips[i];
		h *= 0x9e3779b97f4a7c15ULL;
		h ^= h >> 29;
	}
	return h ? h : 1;
}

/* Fills `st` from bpf_get_stack; returns the number of frames (0 on failure or none). */
static __always_inline int capture_stack(struct bpf_perf_event_data *ctx,
					 struct sysom_stack_trace *st, __u8 side, __u64 flags,
					 __u64 *error_counter)
{
	long bytes = bpf_get_stack(ctx, st->ips, sizeof(st->ips), flags);

	st->side = side;
	st->pad = 0;
	if (bytes < 0) {
		__sync_fetch_and_add(error_counter, 1);
		st->nframes = 0;
		return 0;
	}
	st->nframes = (__u16)(bytes / sizeof(__u64));
	st->stop_reason =
		st->nframes >= SYSOM_PROFILE_MAX_DEPTH ? UNWIND_STOP_DEPTH : UNWIND_STOP_COMPLETE;
	return st->nframes;
}

/* Stores a stack in the active buffer's stack store; returns its hash (0 for none). */
static __always_inline __u64 store_stack(void *store, struct sysom_stack_trace *st,
					 struct sysom_cpu_state *cs)
{
	__u64 h;

	if (!st->nframes)
		return 0;
	h = stack_hash(st);
	if (!bpf_map_lookup_elem(store, &h)) {
		long err = bpf_map_update_elem(store, &h, st, BPF_NOEXIST);
		/* -EEXIST: another CPU stored the same stack first. The sample keeps the hash
		 * when the store is full; the agent then marks the stack as lost. */
		if (err && err != -17 /* EEXIST */)
			__sync_fetch_and_add(&cs->stack_map_full, 1);
	}
	return h;
}

/*
 * Stores the sample built in `sc` into aggregation buffer sc->buffer and ends the in-flight
 * section the tick opened. Every program of a sample ends here exactly once.
 */
static __always_inline void finish_sample(struct sample_scratch *sc, struct sysom_cpu_state *cs)
{
	struct sysom_sample_value *val;
	void *count_map, *stack_map;
	__u32 buf = sc->buffer & 1, *seen;

	count_map = bpf_map_lookup_elem(&counts, &buf);
	stack_map = bpf_map_lookup_elem(&stacks, &buf);
	if (!count_map || !stack_map)
		goto out;
	if (!sc->kernel.nframes && !sc->user.nframes) {
		/* Neither side could be read: keep the sample, attributed to a fault marker. */
		sc->user.nframes = 1;
		sc->user.side = SYSOM_SIDE_USER;
		sc->user.stop_reason = UNWIND_STOP_READ_FAULT;
		sc->user.ips[0] = 0;
	}
	sc->key.kernel_stack = store_stack(stack_map, &sc->kernel, cs);
	sc->key.user_stack = store_stack(stack_map, &sc->user, cs);

	val = bpf_map_lookup_elem(count_map, &sc->key);
	if (val) {
		/* The key includes the CPU, so only this CPU ever updates this entry. */
		val->count++;
	} else {
		struct sysom_sample_value init = { .count = 1 };

		bpf_get_current_comm(init.comm, sizeof(init.comm));
		if (bpf_map_update_elem(count_map, &sc->key, &init, BPF_NOEXIST)) {
			cs->count_map_full++;
			goto out;
		}
	}
	cs->samples++;

	/* Tell the agent about a process (generation) it has not been told about, so it reads
	 * the process's mappings while the process is still alive. */
	seen = bpf_map_lookup_elem(&announced, &sc->key.tgid);
	if (!seen || *seen != sc->key.generation) {
		bpf_map_update_elem(&announced, &sc->key.tgid, &sc->key.generation, BPF_ANY);
		emit_proc_event(cs, SYSOM_PROC_EVENT_NEW, sc->key.tgid, sc->key.generation, 0);
	}
out:
	__sync_fetch_and_add(&cs->inflight, 1);
}

/* Ends the user stack with `reason` and stores the sample. */
static __always_inline void unwind_finish(struct sample_scratch *sc, struct sysom_cpu_state *cs,
					  __u8 reason)
{
	if (reason < UNWIND_STOP_REASONS)
		cs->unwind.stops[reason]++;
	sc->user.stop_reason = reason; /* the agent translates it to the wire's code */
	finish_sample(sc, cs);
}

/* Unwinds up to UNWIND_FRAMES_PER_PROG frames, then tail-calls itself or finishes. */
SEC("perf_event")
int sysom_unwind_user(struct bpf_perf_event_data *ctx)
{
	struct unwind_ctx c = {};
	struct sysom_cpu_state *cs;
	struct sample_scratch *sc;
	__u32 zero = 0, tgid;

	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!cs || !sc)
		return 0; /* cannot happen: per-CPU arrays of one element */
	tgid = sc->key.tgid;
	c.proc = bpf_map_lookup_elem(&unwind_procs, &tgid);
	if (sc->tail_calls == 0) {
		/* First run for this sample: the process must be published for this exec
		 * generation, else the kernel's frame-pointer walk takes the stack. */
		if (!c.proc || c.proc->generation != sc->key.generation) {
			cs->unwind.fallback_no_proc++;
			capture_stack(ctx, &sc->user, SYSOM_SIDE_USER, BPF_F_USER_STACK,
				      &cs->ustack_errors);
			finish_sample(sc, cs);
			return 0;
		}
		cs->unwind.unwinds++;
		sc->regs.py_frame = 0;
		sc->regs.py_in_run = 0;
		sc->regs.py_skip = 0;
		c.py = bpf_map_lookup_elem(&py_procs, &tgid);
		if (c.py && c.py->generation == sc->key.generation)
			sc->regs.py_frame = py_current_frame(c.py, &cs->py);
	} else if (!c.proc) {
		/* Forgotten between two runs: keep what we have. */
		unwind_finish(sc, cs, UNWIND_STOP_NO_MAPPING);
		return 0;
	}
	if (!c.py && sc->regs.py_frame)
		c.py = bpf_map_lookup_elem(&py_procs, &tgid);
	if (c.py && c.py->generation != sc->key.generation)
		c.py = NULL;
	c.pystats = &cs->py;
	c.regs = &sc->regs;
	c.trace = &sc->user;
	c.stats = &cs->unwind;
	c.owner = cs;
	c.tgid = tgid;
	c.generation = sc->key.generation;
	bpf_loop(UNWIND_FRAMES_PER_PROG, unwind_one_frame, &c, 0);
	if (c.done) {
		unwind_finish(sc, cs, c.stop);
		return 0;
	}
	if (sc->tail_calls < UNWIND_MAX_TAIL_CALLS) {
		sc->tail_calls++;
		cs->unwind.tail_calls++;
		bpf_tail_call(ctx, &unwind_progs, 0);
	}
	unwind_finish(sc, cs, UNWIND_STOP_TAIL_CALLS);
	return 0;
}

/*
 * Starts the hybrid unwind of the current task's user stack: its user registers come from
 * the sample when it interrupted user mode, else from the task's saved user context. The
 * unwind program then finishes the sample (with the kernel's frame-pointer walk when the
 * process is not published yet); this returns only when the tail call failed: the caller
 * uses frame pointers.
 */
static __always_inline void start_hybrid_unwind(struct bpf_perf_event_data *ctx,
						struct sample_scratch *sc,
						struct sysom_cpu_state *cs, struct task_struct *task)
{
	struct pt_regs *regs;

	/* The context allows only whole 8-byte loads of the registers; cs is in the low bits. */
	if (*(volatile __u64 *)((void *)&ctx->regs + offsetof(struct pt_regs, cs)) & 3) {
		sc->regs.ip = ctx->regs.ip;
		sc->regs.sp = ctx->regs.sp;
		sc->regs.bp = ctx->regs.bp;
	} else {
		regs = (struct pt_regs *)bpf_task_pt_regs(task);
		if (!regs)
			return;
		sc->regs.ip = BPF_CORE_READ(regs, ip);
		sc->regs.sp = BPF_CORE_READ(regs, sp);
		sc->regs.bp = BPF_CORE_READ(regs, bp);
	}
	sc->regs.bp_known = 1;
	sc->regs.ip_exact = 1;
	sc->regs.at_entry = 0;
	sc->tail_calls = 0;
	sc->user.nframes = 0;
	sc->user.side = SYSOM_SIDE_USER;
	sc->user.pad = 0;
	sc->user.stop_reason = UNWIND_STOP_COMPLETE;
	bpf_tail_call(ctx, &unwind_progs, 0);
	/* The tail call failed: nothing was unwound yet, let the caller use frame pointers. */
	cs->unwind.stops[UNWIND_STOP_TAIL_CALLS]++;
}

SEC("perf_event")
int sysom_profile_tick(struct bpf_perf_event_data *ctx)
{
	struct sample_scratch *sc;
	struct sysom_cpu_state *cs;
	struct task_struct *task;
	__u32 zero = 0, *gen;
	__u64 id;

	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!cs)
		return 0;
	cs->ticks++;
	if (!sample_all && bpf_get_prandom_u32() >= sample_threshold) {
		cs->gated_out++;
		return 0;
	}
	id = bpf_get_current_pid_tgid();
	if ((__u32)id == 0 && !include_idle) {
		cs->idle_skipped++;
		return 0;
	}
	sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!sc)
		return 0;
	sc->key.tgid = id >> 32;
	sc->key.tid = (__u32)id;

	/* Odd from here until finish_sample: a full barrier (locked add) orders it before
	 * reading active_buffer, pairing with the agent's store of active_buffer then read of
	 * this. */
	__sync_fetch_and_add(&cs->inflight, 1);
	sc->buffer = *(volatile __u32 *)&active_buffer & 1;

	sc->key.cpu = bpf_get_smp_processor_id();
	gen = bpf_map_lookup_elem(&exec_generation, &sc->key.tgid);
	sc->key.generation = gen ? *gen : 0;
	sc->key.kernel_stack = 0;
	sc->key.user_stack = 0;

	capture_stack(ctx, &sc->kernel, SYSOM_SIDE_KERNEL, 0, &cs->kstack_errors);
	sc->user.nframes = 0;
	task = bpf_get_current_task_btf();
	if (collect_user && !(BPF_CORE_READ(task, flags) & PF_KTHREAD)) {
		if (unwinder == SYSOM_UNWINDER_HYBRID)
			start_hybrid_unwind(ctx, sc, cs, task);
		capture_stack(ctx, &sc->user, SYSOM_SIDE_USER, BPF_F_USER_STACK, &cs->ustack_errors);
	}
	finish_sample(sc, cs);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(sysom_process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	__u32 zero = 0, next = 1, *gen;

	gen = bpf_map_lookup_elem(&exec_generation, &tgid);
	if (gen)
		next = *gen + 1;
	bpf_map_update_elem(&exec_generation, &tgid, &next, BPF_ANY);
	emit_proc_event(bpf_map_lookup_elem(&cpu_state, &zero), SYSOM_PROC_EVENT_EXEC, tgid, next,
			0);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(sysom_process_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 tgid = BPF_CORE_READ(child, tgid);
	__u32 next = 1, *gen;

	/* A new process (not a thread) may reuse the pid of one whose samples still sit in a
	 * buffer: give it the next generation so the two never share a key. */
	if (BPF_CORE_READ(child, pid) != tgid)
		return 0;
	gen = bpf_map_lookup_elem(&exec_generation, &tgid);
	if (gen)
		next = *gen + 1;
	bpf_map_update_elem(&exec_generation, &tgid, &next, BPF_ANY);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sysom_process_exit, struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	__u32 zero = 0, generation = 0, *gen;

	/* Only the last thread of the group: signal->live has dropped to zero by now. The
	 * generation stays: the dying task may still be sampled after this point, and those
	 * samples belong to this incarnation. */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	gen = bpf_map_lookup_elem(&exec_generation, &tgid);
	if (gen)
		generation = *gen;
	emit_proc_event(bpf_map_lookup_elem(&cpu_state, &zero), SYSOM_PROC_EVENT_EXIT, tgid,
			generation, 0);
	return 0;
}

/* ---- off-CPU time ----------------------------------------------------------------------------- */

/*
 * At a switch-out of a recorded thread that blocks, its kernel and user stacks are taken (the
 * user one by the hybrid unwinder when its process is published, else by frame pointers) and
 * parked in `offcpu_start` under its tid. At its next switch-in the time in between is the
 * block; a block of at least offcpu_min_ns stores the stacks in the active buffer's stack store
 * (shared with CPU samples: the agent drains both together) and adds to `offcpu_counts`.
 * Stacks of short blocks never reach the store. All of it runs in sched_switch, with interrupts
 * off, so one per-CPU scratch slot is never used twice at once.
 */

const volatile __u32 offcpu_mode = SYSOM_OFFCPU_OFF; /* enum sysom_offcpu_mode */
/* Shorter blocks are not counted (run-time setting). */
__u64 offcpu_min_ns = 1000000;
/*
 * Hybrid unwinding of off-CPU user stacks may take this many ns per second of each CPU (run-
 * time setting; 0: no limit). Every blocking switch of a recorded thread pays for its unwind
 * before anyone knows how long the block will be (a deep Python stack: ~20 µs), so a thread
 * that blocks tens of thousands of times a second would otherwise cost its CPU a large share.
 * Past the budget a block's user stack is the kernel's frame-pointer walk (cheap, no Python
 * frames, short where frame pointers are missing), counted as over_budget. The balance
 * accrues at this rate, at most one second's worth, and each unwind is charged what it took.
 */
__u64 offcpu_budget_ns = 5000000;

#define OFFCPU_KERNEL_SKIP 3
#define OFFCPU_BLOCKED_STATES 0xf /* S, D, __TASK_STOPPED, __TASK_TRACED */
#define TASK_INTERRUPTIBLE 0x1
#define TASK_UNINTERRUPTIBLE 0x2

struct offcpu_counts_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct sysom_offcpu_key);
	__type(value, struct sysom_offcpu_value);
} offcpu_counts_0 SEC(".maps"), offcpu_counts_1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, SYSOM_PROFILE_BUFFERS);
	__type(key, __u32);
	__array(values, struct offcpu_counts_map);
} offcpu_counts SEC(".maps") = {
	.values = { &offcpu_counts_0, &offcpu_counts_1 },
};

/* A block in progress: what is known at switch-out. */
struct offcpu_start {
	__u64 start_ns;
	__u32 tgid;
	__u32 generation;
	__u32 state; /* enum sysom_offcpu_state */
	__u32 pad;
	char comm[SYSOM_COMM_LEN];
	struct sysom_stack_trace kernel;
	struct sysom_stack_trace user;
};

/* tid → its block in progress (start_ns 0: none). Bounded (size set at open); not
 * preallocated: memory follows the recorded threads; an entry goes when its thread exits. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct offcpu_start);
} offcpu_start SEC(".maps");

/* tgid → anything: the processes recorded in SYSOM_OFFCPU_JOBS mode. The agent shares the OS
 * signals' `tracked` map here (bpf_map__reuse_fd), so both follow the same training processes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} offcpu_tracked SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sysom_offcpu_cpu);
} offcpu_cpu SEC(".maps");

struct offcpu_scratch {
	struct offcpu_start block;
	struct unwind_regs regs;
	__u32 tid;
	__u32 tail_calls;
	__u64 unwind_start_ns; /* the hybrid unwind of this block began */
	__s64 budget_left_ns;  /* this CPU's unwind budget (below 0 by at most one unwind) */
	__u64 budget_at_ns;    /* when it was last credited */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct offcpu_scratch);
} offcpu_scratch SEC(".maps");

int sysom_offcpu_unwind(struct bpf_raw_tracepoint_args *ctx);

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__array(values, int(struct bpf_raw_tracepoint_args *));
} offcpu_unwind_progs SEC(".maps") = {
	.values = { [0] = (void *)&sysom_offcpu_unwind },
};

/* Copies the `n` first frames of `from` into `to` (n <= SYSOM_PROFILE_MAX_DEPTH). */
static __always_inline void offcpu_copy_stack(struct sysom_stack_trace *to,
					      const struct sysom_stack_trace *from)
{
	__u32 n = from->nframes;

	to->nframes = from->nframes;
	to->side = from->side;
	to->stop_reason = from->stop_reason;
	to->pad = 0;
	if (n > SYSOM_PROFILE_MAX_DEPTH)
		n = SYSOM_PROFILE_MAX_DEPTH;
	if (n)
		bpf_probe_read_kernel(to->ips, n * sizeof(__u64), from->ips);
}

/*
 * Parks the block built in the scratch until the thread's switch-in. A thread's entry is made
 * at its first block and reused in place after (only the frames its stacks have are copied):
 * no element is allocated and freed per block. The entry goes at the thread's exit.
 */
static __always_inline void offcpu_park_at(struct offcpu_scratch *sc, struct sysom_offcpu_cpu *oc,
					   __u64 now)
{
	struct offcpu_start *b = bpf_map_lookup_elem(&offcpu_start, &sc->tid);

	sc->block.start_ns = now;
	if (!b) {
		if (bpf_map_update_elem(&offcpu_start, &sc->tid, &sc->block, BPF_NOEXIST))
			oc->start_map_full++;
		else
			oc->blocks++;
		return;
	}
	b->tgid = sc->block.tgid;
	b->generation = sc->block.generation;
	b->state = sc->block.state;
	b->pad = 0;
	__builtin_memcpy(b->comm, sc->block.comm, sizeof(b->comm));
	offcpu_copy_stack(&b->kernel, &sc->block.kernel);
	offcpu_copy_stack(&b->user, &sc->block.user);
	b->start_ns = sc->block.start_ns; /* last: a parked block is one with a start */
	oc->blocks++;
}

static __always_inline void offcpu_park(struct offcpu_scratch *sc, struct sysom_offcpu_cpu *oc)
{
	offcpu_park_at(sc, oc, bpf_ktime_get_ns());
}

/* The user stack by the kernel's frame-pointer walk (the caller counts why). */
static __always_inline void offcpu_fp_user(void *ctx, struct offcpu_scratch *sc)
{
	long bytes = bpf_get_stack(ctx, sc->block.user.ips, sizeof(sc->block.user.ips),
				   BPF_F_USER_STACK);

	sc->block.user.side = SYSOM_SIDE_USER;
	sc->block.user.pad = 0;
	sc->block.user.nframes = bytes > 0 ? (__u16)(bytes / sizeof(__u64)) : 0;
	sc->block.user.stop_reason = sc->block.user.nframes >= SYSOM_PROFILE_MAX_DEPTH
					     ? UNWIND_STOP_DEPTH
					     : UNWIND_STOP_COMPLETE;
}

/* Credits this CPU's unwind budget up to `now`: whether an unwind may start. */
static __always_inline bool offcpu_budget_allows(struct offcpu_scratch *sc, __u64 now)
{
	__u64 rate = *(volatile __u64 *)&offcpu_budget_ns, dt;
	__s64 left;

	if (!rate)
		return true;
	if (rate > 1000000000ULL)
		rate = 1000000000ULL;
	dt = now > sc->budget_at_ns ? now - sc->budget_at_ns : 0;
	if (dt > 1000000000ULL)
		dt = 1000000000ULL;
	sc->budget_at_ns = now;
	left = sc->budget_left_ns + (__s64)(dt * rate / 1000000000ULL);
	if (left > (__s64)rate)
		left = (__s64)rate;
	sc->budget_left_ns = left;
	return left > 0;
}

/* Charges the unwind that began at sc->unwind_start_ns, then parks the block. */
static __always_inline void offcpu_unwound(struct offcpu_scratch *sc, struct sysom_offcpu_cpu *oc)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 spent = now > sc->unwind_start_ns ? now - sc->unwind_start_ns : 0;

	oc->unwind_ns += spent;
	sc->budget_left_ns -= (__s64)spent;
	offcpu_park_at(sc, oc, now); /* one clock read for both */
}

/* Hybrid unwind of the blocking thread's user stack, UNWIND_FRAMES_PER_PROG frames per run. */
SEC("raw_tp")
int sysom_offcpu_unwind(struct bpf_raw_tracepoint_args *ctx)
{
	struct unwind_ctx c = {};
	struct sysom_offcpu_cpu *oc;
	struct sysom_cpu_state *cs;
	struct offcpu_scratch *sc;
	__u32 zero = 0, tgid;

	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	oc = bpf_map_lookup_elem(&offcpu_cpu, &zero);
	sc = bpf_map_lookup_elem(&offcpu_scratch, &zero);
	if (!cs || !oc || !sc)
		return 0;
	tgid = sc->block.tgid;
	c.proc = bpf_map_lookup_elem(&unwind_procs, &tgid);
	if (sc->tail_calls == 0) {
		if (!c.proc || c.proc->generation != sc->block.generation) {
			cs->unwind.fallback_no_proc++;
			oc->fp_fallback++;
			offcpu_fp_user(ctx, sc);
			offcpu_unwound(sc, oc);
			return 0;
		}
		cs->unwind.unwinds++;
		/* The blocking thread is still current: its thread state and frames are read
		 * from its own memory, as at an on-CPU tick. */
		sc->regs.py_frame = 0;
		sc->regs.py_in_run = 0;
		sc->regs.py_skip = 0;
		c.py = bpf_map_lookup_elem(&py_procs, &tgid);
		if (c.py && c.py->generation == sc->block.generation)
			sc->regs.py_frame = py_current_frame(c.py, &cs->py);
	} else if (!c.proc) {
		sc->block.user.stop_reason = UNWIND_STOP_NO_MAPPING;
		cs->unwind.stops[UNWIND_STOP_NO_MAPPING]++;
		offcpu_unwound(sc, oc);
		return 0;
	}
	if (!c.py && sc->regs.py_frame)
		c.py = bpf_map_lookup_elem(&py_procs, &tgid);
	if (c.py && c.py->generation != sc->block.generation)
		c.py = NULL;
	c.pystats = &cs->py;
	c.regs = &sc->regs;
	c.trace = &sc->block.user;
	c.stats = &cs->unwind;
	c.owner = cs;
	c.tgid = tgid;
	c.generation = sc->block.generation;
	bpf_loop(UNWIND_FRAMES_PER_PROG, unwind_one_frame, &c, 0);
	if (!c.done && sc->tail_calls < UNWIND_MAX_TAIL_CALLS) {
		sc->tail_calls++;
		cs->unwind.tail_calls++;
		bpf_tail_call(ctx, &offcpu_unwind_progs, 0);
	}
	if (!c.done)
		c.stop = UNWIND_STOP_TAIL_CALLS;
	if (c.stop < UNWIND_STOP_REASONS)
		cs->unwind.stops[c.stop]++;
	sc->block.user.stop_reason = c.stop;
	offcpu_unwound(sc, oc);
	return 0;
}

/* `next` is back on a CPU: count the block it parked, if long enough. */
static __always_inline void offcpu_account(__u32 tid, struct sysom_offcpu_cpu *oc)
{
	struct sysom_offcpu_value *val;
	struct sysom_offcpu_key key;
	struct offcpu_start *b;
	struct sysom_cpu_state *cs;
	void *count_map, *stack_map;
	__u32 zero = 0, buf;
	__u64 now, ns;

	b = bpf_map_lookup_elem(&offcpu_start, &tid);
	if (!b || !b->start_ns)
		return;
	now = bpf_ktime_get_ns();
	ns = now > b->start_ns ? now - b->start_ns : 0;
	if (ns < offcpu_min_ns) {
		oc->short_blocks++;
		goto out;
	}
	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!cs)
		goto out;
	/* The same in-flight protocol as CPU samples (see sysom_profile_tick). */
	__sync_fetch_and_add(&cs->inflight, 1);
	buf = *(volatile __u32 *)&active_buffer & 1;
	count_map = bpf_map_lookup_elem(&offcpu_counts, &buf);
	stack_map = bpf_map_lookup_elem(&stacks, &buf);
	if (!count_map || !stack_map)
		goto done;
	if (!b->kernel.nframes && !b->user.nframes) {
		b->user.nframes = 1;
		b->user.side = SYSOM_SIDE_USER;
		b->user.stop_reason = UNWIND_STOP_READ_FAULT;
		b->user.ips[0] = 0;
	}
	key.tgid = b->tgid;
	key.tid = tid;
	key.generation = b->generation;
	key.state = b->state;
	key.kernel_stack = store_stack(stack_map, &b->kernel, cs);
	key.user_stack = store_stack(stack_map, &b->user, cs);
	val = bpf_map_lookup_elem(count_map, &key);
	if (val) {
		/* Only this thread's switch-in updates its keys, one CPU at a time. */
		val->count++;
		val->total_ns += ns;
		if (ns > val->max_ns)
			val->max_ns = ns;
	} else {
		struct sysom_offcpu_value init = { .count = 1, .total_ns = ns, .max_ns = ns };

		__builtin_memcpy(init.comm, b->comm, sizeof(init.comm));
		if (bpf_map_update_elem(count_map, &key, &init, BPF_NOEXIST)) {
			oc->count_map_full++;
			goto done;
		}
	}
	oc->recorded++;
	oc->blocked_ns += ns;
done:
	__sync_fetch_and_add(&cs->inflight, 1);
out:
	b->start_ns = 0; /* consumed; the entry stays for the thread's next block */
}

/* Whether the blocks of `prev` (the current task) are recorded. */
static __always_inline bool offcpu_wanted(struct task_struct *prev, __u32 tgid)
{
	if (BPF_CORE_READ(prev, flags) & PF_KTHREAD)
		return false;
	if (offcpu_mode == SYSOM_OFFCPU_ALL)
		return true;
	return bpf_map_lookup_elem(&offcpu_tracked, &tgid) != NULL;
}

/* raw_tp rather than tp_btf: the user-stack unwind continues in tail calls. */
SEC("raw_tp/sched_switch")
int sysom_offcpu_switch(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *prev = (struct task_struct *)ctx->args[1];
	struct task_struct *next = (struct task_struct *)ctx->args[2];
	bool preempt = (bool)ctx->args[0];
	__u32 prev_state = (__u32)ctx->args[3];
	struct sysom_offcpu_cpu *oc;
	struct offcpu_scratch *sc;
	struct task_struct *task;
	struct pt_regs *regs;
	__u32 zero = 0, *gen;
	__u64 id;
	long bytes;

	oc = bpf_map_lookup_elem(&offcpu_cpu, &zero);
	if (!oc)
		return 0;
	oc->switches++;
	offcpu_account(BPF_CORE_READ(next, pid), oc);

	/* Preempted or yielding: runnable, waiting for a CPU, not blocked. Only sleeping,
	 * stopped and traced states are blocks: a dying task's last switch (TASK_DEAD) would
	 * park an entry after its exit removed the old one, and nothing would ever take it. */
	if (preempt || !(prev_state & OFFCPU_BLOCKED_STATES))
		return 0;
	id = bpf_get_current_pid_tgid(); /* current is still prev */
	if (!(__u32)id || !offcpu_wanted(prev, id >> 32))
		return 0;
	sc = bpf_map_lookup_elem(&offcpu_scratch, &zero);
	if (!sc)
		return 0;
	sc->tid = (__u32)id;
	sc->block.tgid = id >> 32;
	gen = bpf_map_lookup_elem(&exec_generation, &sc->block.tgid);
	sc->block.generation = gen ? *gen : 0;
	sc->block.state = prev_state & TASK_UNINTERRUPTIBLE ? SYSOM_OFFCPU_STATE_DISK
			  : prev_state & TASK_INTERRUPTIBLE ? SYSOM_OFFCPU_STATE_SLEEP
							    : SYSOM_OFFCPU_STATE_OTHER;
	sc->block.pad = 0;
	bpf_get_current_comm(sc->block.comm, sizeof(sc->block.comm));

	/* The three leaf frames are the tracing itself (this program, bpf_trace_run4,
	 * __traceiter_sched_switch): skipped, so stacks end in the scheduler (tests/bpf checks). */
	bytes = bpf_get_stack(ctx, sc->block.kernel.ips, sizeof(sc->block.kernel.ips),
			      OFFCPU_KERNEL_SKIP & BPF_F_SKIP_FIELD_MASK);
	sc->block.kernel.side = SYSOM_SIDE_KERNEL;
	sc->block.kernel.pad = 0;
	sc->block.kernel.nframes = bytes > 0 ? (__u16)(bytes / sizeof(__u64)) : 0;
	sc->block.kernel.stop_reason = sc->block.kernel.nframes >= SYSOM_PROFILE_MAX_DEPTH
					       ? UNWIND_STOP_DEPTH
					       : UNWIND_STOP_COMPLETE;
	sc->block.user.nframes = 0;
	sc->block.user.side = SYSOM_SIDE_USER;
	sc->block.user.pad = 0;
	sc->block.user.stop_reason = UNWIND_STOP_COMPLETE;
	if (!collect_user) {
		offcpu_park(sc, oc);
		return 0;
	}
	if (unwinder == SYSOM_UNWINDER_HYBRID) {
		__u64 now = bpf_ktime_get_ns();
		if (!offcpu_budget_allows(sc, now)) {
			oc->over_budget++;
			offcpu_fp_user(ctx, sc);
			offcpu_park(sc, oc);
			return 0;
		}
		task = bpf_get_current_task_btf();
		regs = (struct pt_regs *)bpf_task_pt_regs(task);
		if (regs) {
			sc->regs.ip = BPF_CORE_READ(regs, ip);
			sc->regs.sp = BPF_CORE_READ(regs, sp);
			sc->regs.bp = BPF_CORE_READ(regs, bp);
			sc->regs.bp_known = 1;
			sc->regs.ip_exact = 1;
			sc->regs.at_entry = 0;
			sc->tail_calls = 0;
			sc->unwind_start_ns = now;
			bpf_tail_call(ctx, &offcpu_unwind_progs, 0);
		}
	}
	oc->fp_fallback++;
	offcpu_fp_user(ctx, sc);
	offcpu_park(sc, oc);
	return 0;
}

/* A thread exits: its parked-block entry goes (a later thread may reuse the tid). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(sysom_offcpu_exit, struct task_struct *p)
{
	__u32 tid = BPF_CORE_READ(p, pid);

	bpf_map_delete_elem(&offcpu_start, &tid);
	return 0;
}
