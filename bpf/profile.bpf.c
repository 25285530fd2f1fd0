// SPDX-License-Identifier: GPL-2.0-only
/* CPU stack sampler: perf_event (cpu-clock) ticks → gated stack capture → in-kernel counts. */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/profile.h"

char LICENSE[] SEC("license") = "GPL";

#define PF_KTHREAD 0x00200000
#define STOP_COMPLETE 0
#define STOP_DEPTH_LIMIT 1
#define STOP_READ_FAULT 2

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

/* User registers of the frame being unwound. */
struct unwind_regs {
	__u64 ip, sp, bp;
	__u8 bp_known;  /* bp holds the frame's real RBP (a rule may lose it) */
	__u8 ip_exact;  /* look up ip itself, not ip - 1 (leaf, or after a signal frame) */
	__u8 pad[6];
};

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

/* ---- hybrid unwinder state (published by the agent, agent/unwinder.c) ---------------------- */

/* file id → its rows (an array sized to the table; BPF_F_INNER_MAP lets sizes differ). */
struct unwind_rows_map {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_INNER_MAP | BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_row);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__array(values, struct unwind_rows_map);
} unwind_tables SEC(".maps");

/* tgid → executable mappings of its current exec generation. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct unwind_proc);
} unwind_procs SEC(".maps");

/* (file, pc) → marker with the cached rule (see struct unwind_marker). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct unwind_marker_key);
	__type(value, struct unwind_marker);
} unwind_markers SEC(".maps");

/* tgid → time of its last UNMAPPED report (rate limit). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} unwind_reported SEC(".maps");

/* Reports per process at most this often. */
#define UNMAPPED_REPORT_INTERVAL_NS 200000000ULL
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
	st->stop_reason = st->nframes >= SYSOM_PROFILE_MAX_DEPTH ? STOP_DEPTH_LIMIT : STOP_COMPLETE;
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
		sc->user.stop_reason = STOP_READ_FAULT;
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

/* ---- hybrid unwinder ------------------------------------------------------------------------ */

/*
 * Binary searches run under bpf_loop: the verifier checks a callback once for every
 * iteration count, where a plain bounded loop makes it walk every path of every iteration.
 */
struct mapping_search {
	const struct unwind_proc *proc;
	const struct unwind_mapping *found;
	__u64 addr;
	__u32 lo, hi;
};

static long mapping_search_step(__u64 index, void *data)
{
	struct mapping_search *q = data;
	const struct unwind_mapping *m;
	__u32 mid;

	if (q->lo >= q->hi)
		return 1;
	mid = (q->lo + (q->hi - q->lo) / 2) & (UNWIND_MAX_MAPPINGS - 1);
	m = &q->proc->mappings[mid];
	if (q->addr < m->start) {
		q->hi = mid;
	} else if (q->addr >= m->end) {
		q->lo = mid + 1;
	} else {
		q->found = m;
		return 1;
	}
	return 0;
}

/* The mapping of `proc` containing `addr`, or NULL. */
static __always_inline const struct unwind_mapping *find_mapping(const struct unwind_proc *proc,
								 __u64 addr)
{
	struct mapping_search q = { .proc = proc, .addr = addr, .hi = proc->count };

	if (q.hi > UNWIND_MAX_MAPPINGS)
		q.hi = UNWIND_MAX_MAPPINGS;
	bpf_loop(UNWIND_MAPPING_STEPS, mapping_search_step, &q, 0);
	return q.found;
}

struct row_search {
	void *rows;
	__u32 pc, lo, hi;
	__u32 failed;
};

static long row_search_step(__u64 index, void *data)
{
	struct row_search *q = data;
	struct unwind_row *row;
	__u32 mid;

	if (q->lo >= q->hi)
		return 1;
	mid = q->lo + (q->hi - q->lo) / 2;
	row = bpf_map_lookup_elem(q->rows, &mid);
	if (!row) {
		q->failed = 1;
		return 1;
	}
	if (row->pc <= q->pc)
		q->lo = mid + 1;
	else
		q->hi = mid;
	return 0;
}

/*
 * The row in effect at table pc `pc` (the last row whose pc <= `pc`): 0 and *out, or -1 when
 * the pc precedes the table or the table is gone (the caller then treats it as uncovered).
 */
static __always_inline int find_row(__u32 file_id, __u32 nrows, __u32 pc, struct unwind_row *out)
{
	struct row_search q = { .pc = pc, .hi = nrows };
	struct unwind_row *row;
	__u32 idx;

	q.rows = bpf_map_lookup_elem(&unwind_tables, &file_id);
	if (!q.rows)
		return -1;
	bpf_loop(UNWIND_ROW_STEPS, row_search_step, &q, 0);
	if (q.failed || q.lo == 0 || q.lo < q.hi)
		return -1;
	idx = q.lo - 1;
	row = bpf_map_lookup_elem(q.rows, &idx);
	if (!row)
		return -1;
	*out = *row;
	return 0;
}

static __always_inline int read_user_u64(__u64 addr, __u64 *out)
{
	return bpf_probe_read_user(out, sizeof(*out), (const void *)addr) ? -1 : 0;
}

/* Everything one unwind step needs; lives on the program's stack, passed to bpf_loop. */
struct unwind_ctx {
	struct sample_scratch *sc;
	struct sysom_cpu_state *cs;
	const struct unwind_proc *proc;
	__u8 stop;   /* enum unwind_stop once done */
	__u8 done;
};

static __always_inline void unwind_stop_at(struct unwind_ctx *c, __u8 reason)
{
	c->stop = reason;
	c->done = 1;
}

static __always_inline void report_unmapped(struct unwind_ctx *c, __u64 addr)
{
	__u32 tgid = c->sc->key.tgid;
	__u64 now = bpf_ktime_get_ns(), *last = bpf_map_lookup_elem(&unwind_reported, &tgid);

	if (last && now - *last < UNMAPPED_REPORT_INTERVAL_NS)
		return;
	bpf_map_update_elem(&unwind_reported, &tgid, &now, BPF_ANY);
	c->cs->unwind.unmapped_reports++;
	emit_proc_event(c->cs, SYSOM_PROC_EVENT_UNMAPPED, tgid, c->sc->key.generation, addr);
}

/*
 * Frame-pointer step: the caller's RA at [RBP + 8], its RBP at [RBP], its SP = RBP + 16.
 * With `validate`, the step must look like a real frame: RBP aligned and above SP, the new
 * SP strictly higher, the RA inside an executable mapping. Returns 0, or an unwind_stop.
 */
/* A step reached the caller (any other value is an enum unwind_stop). */
#define STEP_CONTINUE UNWIND_STOP_REASONS

static __always_inline int fp_step(struct unwind_ctx *c, struct unwind_regs *r, bool validate)
{
	__u64 ra, bp;

	if (!r->bp_known)
		return UNWIND_STOP_RBP_UNKNOWN;
	if (r->bp == 0)
		return UNWIND_STOP_COMPLETE; /* the ABI's end of the frame chain */
	if (validate && ((r->bp & 7) || r->bp < r->sp))
		return UNWIND_STOP_FP_INVALID;
	if (read_user_u64(r->bp + 8, &ra) || read_user_u64(r->bp, &bp))
		return validate ? UNWIND_STOP_FP_INVALID : UNWIND_STOP_READ_FAULT;
	if (validate && (ra == 0 || !find_mapping(c->proc, ra - 1)))
		return UNWIND_STOP_FP_INVALID;
	if (r->bp + 16 <= r->sp)
		return UNWIND_STOP_CFA_ORDER;
	r->sp = r->bp + 16;
	r->bp = bp;
	r->ip = ra;
	r->ip_exact = 0;
	return STEP_CONTINUE;
}

/* Offsets in the rt_sigframe a signal trampoline's RSP points at (x86-64 ucontext). */
#define SIGFRAME_RBP 120
#define SIGFRAME_RSP 160
#define SIGFRAME_RIP 168

/* CFI step with `row` for the frame at `pc` (ELF-relative low bits for PLT): STEP_CONTINUE
 * or the unwind_stop that ends the stack. */
static __always_inline int dwarf_step(struct unwind_regs *r, const struct unwind_row *row,
				      __u64 pc)
{
	__u64 cfa, ra, bp;

	switch (UNWIND_ROW_CFA(row)) {
	case UNWIND_CFA_RSP:
		cfa = r->sp + 8 * (__u64)row->cfa_offset8;
		break;
	case UNWIND_CFA_RBP:
		if (!r->bp_known)
			return UNWIND_STOP_RBP_UNKNOWN;
		cfa = r->bp + 8 * (__u64)row->cfa_offset8;
		break;
	case UNWIND_CFA_PLT:
		cfa = r->sp + 8 + ((pc & 15) >= row->cfa_offset8 ? 8 : 0);
		break;
	case UNWIND_CFA_SIGNAL:
		if (read_user_u64(r->sp + SIGFRAME_RIP, &ra) ||
		    read_user_u64(r->sp + SIGFRAME_RSP, &cfa) ||
		    read_user_u64(r->sp + SIGFRAME_RBP, &bp))
			return UNWIND_STOP_READ_FAULT;
		/* The interrupted frame resumes at `ra` exactly (it did not call anything). */
		r->ip = ra;
		r->sp = cfa;
		r->bp = bp;
		r->bp_known = 1;
		r->ip_exact = 1;
		return ra ? STEP_CONTINUE : UNWIND_STOP_COMPLETE;
	case UNWIND_CFA_END:
		return UNWIND_STOP_COMPLETE;
	default:
		return UNWIND_STOP_FP_INVALID; /* NONE/COMPLEX: the caller falls back */
	}
	if (read_user_u64(cfa - 8, &ra))
		return UNWIND_STOP_READ_FAULT;
	switch (UNWIND_ROW_RBP(row)) {
	case UNWIND_RBP_SAME:
		break;
	case UNWIND_RBP_AT_CFA:
		if (read_user_u64(cfa + 8 * (__s64)row->rbp_offset8, &bp))
			return UNWIND_STOP_READ_FAULT;
		r->bp = bp;
		r->bp_known = 1;
		break;
	default:
		r->bp_known = 0;
		break;
	}
	if (cfa <= r->sp)
		return UNWIND_STOP_CFA_ORDER;
	r->sp = cfa;
	r->ip = ra;
	r->ip_exact = 0;
	return ra ? STEP_CONTINUE : UNWIND_STOP_COMPLETE;
}

/* True when `row` is a standard frame: CFA = RBP + 16, caller's RBP at CFA - 16. */
static __always_inline bool row_is_fp_frame(const struct unwind_row *row)
{
	return UNWIND_ROW_CFA(row) == UNWIND_CFA_RBP && row->cfa_offset8 == 2 &&
	       UNWIND_ROW_RBP(row) == UNWIND_RBP_AT_CFA && row->rbp_offset8 == -2;
}

/* One frame: record its pc, then step to its caller (Algorithm 1). bpf_loop callback. */
static long unwind_one_frame(__u64 index, void *data)
{
	struct unwind_ctx *c = data;
	struct sample_scratch *sc = c->sc;
	struct unwind_stats *st = &c->cs->unwind;
	struct unwind_regs *r = &sc->regs;
	const struct unwind_mapping *m;
	struct unwind_marker_key mk;
	struct unwind_marker *mark, fresh = {};
	__u16 n = sc->user.nframes;
	__u64 lookup;
	int rc;

	if (n >= SYSOM_PROFILE_MAX_DEPTH) {
		unwind_stop_at(c, UNWIND_STOP_DEPTH);
		return 1;
	}
	if (r->ip == 0) {
		unwind_stop_at(c, UNWIND_STOP_COMPLETE);
		return 1;
	}
	sc->user.ips[n] = r->ip;
	sc->user.nframes = n + 1;
	st->frames++;

	lookup = r->ip_exact ? r->ip : r->ip - 1;
	m = find_mapping(c->proc, lookup);
	if (!m) {
		report_unmapped(c, r->ip);
		unwind_stop_at(c, UNWIND_STOP_NO_MAPPING);
		return 1;
	}
	if (m->file_id == 0) {
		/* No table for this code (anonymous JIT code, a file without CFI, or one whose
		 * table is not built yet): frame pointers, validated every time. */
		rc = fp_step(c, r, true);
		if (rc == UNWIND_STOP_FP_INVALID && (m->flags & UNWIND_MAPPING_ANON))
			rc = UNWIND_STOP_JIT;
		if (rc != STEP_CONTINUE) {
			unwind_stop_at(c, rc);
			return 1;
		}
		st->frames_fp++;
		return 0;
	}

	mk.file_id = m->file_id;
	mk.pc = (__u32)(lookup - m->bias);
	mark = bpf_map_lookup_elem(&unwind_markers, &mk);
	if (mark) {
		st->frames_cached++;
		if (mark->state == UNWIND_MARK_FP) {
			rc = fp_step(c, r, false);
			st->frames_fp++;
		} else {
			rc = dwarf_step(r, &mark->row, lookup - m->bias);
			st->frames_dwarf++;
		}
		if (rc != STEP_CONTINUE) {
			unwind_stop_at(c, rc);
			return 1;
		}
		return 0;
	}

	/* Unmarked: classify this pc from its CFI row, then set the marker once. */
	if (lookup - m->bias >= (1ULL << 32) || find_row(m->file_id, m->nrows, mk.pc, &fresh.row))
		fresh.row.kinds = UNWIND_ROW_KINDS(UNWIND_CFA_NONE, UNWIND_RBP_SAME);
	switch (UNWIND_ROW_CFA(&fresh.row)) {
	case UNWIND_CFA_NONE:
	case UNWIND_CFA_COMPLEX:
		/* No rule we can run: validated frame pointers; a success marks the pc FP. */
		rc = fp_step(c, r, true);
		st->frames_fp_fallback++;
		if (rc == STEP_CONTINUE) {
			st->frames_fp++;
			fresh.state = UNWIND_MARK_FP;
		}
		break;
	default:
		fresh.state = row_is_fp_frame(&fresh.row) ? UNWIND_MARK_FP : UNWIND_MARK_DWARF;
		rc = dwarf_step(r, &fresh.row, lookup - m->bias);
		st->frames_dwarf++;
		break;
	}
	if (fresh.state && !bpf_map_update_elem(&unwind_markers, &mk, &fresh, BPF_NOEXIST))
		st->markers_set++;
	if (rc != STEP_CONTINUE) {
		unwind_stop_at(c, rc);
		return 1;
	}
	return 0;
}

/* Ends the user stack with `reason` and stores the sample. */
static __always_inline void unwind_finish(struct sample_scratch *sc, struct sysom_cpu_state *cs,
					  __u8 reason)
{
	if (reason < UNWIND_STOP_REASONS)
		cs->unwind.stops[reason]++;
	/* Wire stop reasons: COMPLETE, DEPTH, READ_FAULT keep their values; the unwinder's own
	 * reasons come after SYSOM_STOP_STACK_LOST (3). */
	sc->user.stop_reason = reason <= UNWIND_STOP_READ_FAULT ? reason : reason + 1;
	finish_sample(sc, cs);
}

/* Unwinds up to UNWIND_FRAMES_PER_PROG frames, then tail-calls itself or finishes. */
SEC("perf_event")
int sysom_unwind_user(struct bpf_perf_event_data *ctx)
{
	struct unwind_ctx c = {};
	__u32 zero = 0, tgid;

	c.cs = bpf_map_lookup_elem(&cpu_state, &zero);
	c.sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!c.cs || !c.sc)
		return 0; /* cannot happen: per-CPU arrays of one element */
	tgid = c.sc->key.tgid;
	c.proc = bpf_map_lookup_elem(&unwind_procs, &tgid);
	if (c.sc->tail_calls == 0) {
		/* First run for this sample: the process must be published for this exec
		 * generation, else the kernel's frame-pointer walk takes the stack. */
		if (!c.proc || c.proc->generation != c.sc->key.generation) {
			c.cs->unwind.fallback_no_proc++;
			capture_stack(ctx, &c.sc->user, SYSOM_SIDE_USER, BPF_F_USER_STACK,
				      &c.cs->ustack_errors);
			finish_sample(c.sc, c.cs);
			return 0;
		}
		c.cs->unwind.unwinds++;
	} else if (!c.proc) {
		/* Forgotten between two runs: keep what we have. */
		unwind_finish(c.sc, c.cs, UNWIND_STOP_NO_MAPPING);
		return 0;
	}
	bpf_loop(UNWIND_FRAMES_PER_PROG, unwind_one_frame, &c, 0);
	if (c.done) {
		unwind_finish(c.sc, c.cs, c.stop);
		return 0;
	}
	if (c.sc->tail_calls < UNWIND_MAX_TAIL_CALLS) {
		c.sc->tail_calls++;
		c.cs->unwind.tail_calls++;
		bpf_tail_call(ctx, &unwind_progs, 0);
	}
	unwind_finish(c.sc, c.cs, UNWIND_STOP_TAIL_CALLS);
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
	sc->tail_calls = 0;
	sc->user.nframes = 0;
	sc->user.side = SYSOM_SIDE_USER;
	sc->user.pad = 0;
	sc->user.stop_reason = 0;
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
