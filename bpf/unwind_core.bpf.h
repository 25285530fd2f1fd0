/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The hybrid frame-pointer/CFI user-stack unwinder, shared by the BPF objects that unwind:
 * profile.bpf.c (CPU samples) and gputrace.bpf.c (kernel launches). Its maps are declared
 * here; the agent creates them once (the sampler's object) and the other object reuses them
 * (bpf_map__reuse_fd), so the tables and markers are one set.
 *
 * The includer defines UNWIND_ON_UNMAPPED(c, addr) (what to do when an address is outside
 * every known mapping, already rate-limited) before including this file, and calls
 * unwind_one_frame from bpf_loop with a struct unwind_ctx.
 */
#ifndef SYSOM_BPF_UNWIND_CORE_BPF_H
#define SYSOM_BPF_UNWIND_CORE_BPF_H

#include "bpf/profile.h"

#ifndef UNWIND_ON_UNMAPPED
#error "define UNWIND_ON_UNMAPPED(ctx, addr) before including unwind_core.bpf.h"
#endif

/* User registers of the frame being unwound. */
struct unwind_regs {
	__u64 ip, sp, bp;
	__u8 bp_known;  /* bp holds the frame's real RBP (a rule may lose it) */
	__u8 ip_exact;  /* look up ip itself, not ip - 1 (leaf, or after a signal frame) */
	/* CPython stitching (UNWIND_PYTHON): the walk spans tail calls, so it lives here. */
	__u8 py_in_run; /* emitting the Python frames of the eval invocation at ip */
	__u8 py_skip;   /* ip is an eval frame already replaced by its Python frames */
	/* ip is the first instruction of a function entered by a call (a uprobe on the
	 * function): nothing pushed yet, the return address at [sp], RBP the caller's. */
	__u8 at_entry;
	__u8 pad[3];
	__u64 py_frame; /* next Python frame of the sampled thread (0: none or given up) */
};

/* ---- hybrid unwinder state (published by the agent, agent/sampling/unwinder.c) ---------------------- */

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

#ifdef UNWIND_PYTHON
/* tgid → its CPython interpreter (agent/sampling/pyframes.c); absent: not Python, or a
 * version whose offsets are not known. Created by the sampler, shared like the maps above. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct py_proc);
} py_procs SEC(".maps");
#endif

/* Reports per process at most this often. */
#define UNMAPPED_REPORT_INTERVAL_NS 200000000ULL

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
	struct unwind_regs *regs;        /* the frame being unwound (per-CPU scratch) */
	struct sysom_stack_trace *trace; /* frames so far */
	struct unwind_stats *stats;
	const struct unwind_proc *proc;
	void *owner;                     /* the includer's state, for UNWIND_ON_UNMAPPED */
#ifdef UNWIND_PYTHON
	const struct py_proc *py;        /* the process's interpreter, NULL when none */
	struct py_stats *pystats;
#endif
	__u32 tgid, generation;
	__u8 stop;   /* enum unwind_stop once done */
	__u8 done;
};

static __always_inline void unwind_stop_at(struct unwind_ctx *c, __u8 reason)
{
	c->stop = reason;
	c->done = 1;
}

/* Tells the agent (UNWIND_ON_UNMAPPED, defined by the includer) about an address outside
 * every known mapping, at most once per process per UNMAPPED_REPORT_INTERVAL_NS. */
static __always_inline void report_unmapped(struct unwind_ctx *c, __u64 addr)
{
	__u32 tgid = c->tgid;
	__u64 now = bpf_ktime_get_ns(), *last = bpf_map_lookup_elem(&unwind_reported, &tgid);

	if (last && now - *last < UNMAPPED_REPORT_INTERVAL_NS)
		return;
	bpf_map_update_elem(&unwind_reported, &tgid, &now, BPF_ANY);
	c->stats->unmapped_reports++;
	UNWIND_ON_UNMAPPED(c, addr);
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

/*
 * CPython 3.12's perf trampoline (`-X perf`; x86-64 Python/asm_trampoline.S): each Python
 * function runs through a copy of "sub $8,%rsp; call *%rcx; add $8,%rsp; ret" in anonymous
 * memory, which keeps no frame pointer. Its return address follows the call; the 8 bytes
 * from 6 before it are then exactly 48 83 ec 08 ff d1 48 83 (read little-endian below), and
 * its caller's return address is at RSP + 8, its caller's RSP at RSP + 16, RBP untouched.
 * Only that exact code is stepped so; any other anonymous code stays frame pointers only.
 */
#define PY_TRAMPOLINE_CODE 0x8348d1ff08ec8348ULL

static __always_inline int py_trampoline_step(struct unwind_regs *r)
{
	__u64 code, ra;

	if (r->ip_exact || r->ip < 6 || read_user_u64(r->ip - 6, &code) ||
	    code != PY_TRAMPOLINE_CODE)
		return UNWIND_STOP_FP_INVALID;
	if (read_user_u64(r->sp + 8, &ra))
		return UNWIND_STOP_READ_FAULT;
	r->sp += 16;
	r->ip = ra;
	r->ip_exact = 0;
	return ra ? STEP_CONTINUE : UNWIND_STOP_COMPLETE;
}

/*
 * Step from a function's first instruction (r->at_entry): CFA = RSP + 8, RBP unchanged, the
 * rule every function's CFI has there, applied without its table or even its mapping: a
 * library the process mapped after the agent last published its mappings (a dlopen'ed
 * libcuda whose cuLaunchKernel is probed) has neither yet, and its caller usually has both.
 */
static __always_inline int entry_step(struct unwind_regs *r)
{
	__u64 ra;

	r->at_entry = 0;
	if (read_user_u64(r->sp, &ra))
		return UNWIND_STOP_READ_FAULT;
	r->sp += 8;
	r->ip = ra;
	r->ip_exact = 0;
	return ra ? STEP_CONTINUE : UNWIND_STOP_COMPLETE;
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

#ifdef UNWIND_PYTHON
/* ---- CPython frames (bpf/pyframes.h) --------------------------------------------------------
 *
 * Where the native walk meets _PyEval_EvalFrameDefault, the Python frames that invocation
 * runs replace the native eval frame, one per loop iteration, then native unwinding goes on
 * from the eval frame's caller. The offsets come from the agent, which publishes only
 * interpreters whose offsets it knows (never guessed); every frame lost is counted. */

struct py_thread_search {
	const struct py_proc *py;
	__u64 cur, fsbase, found;
	__u8 fault;
};

static long py_thread_step(__u64 index, void *data)
{
	struct py_thread_search *q = data;
	__u64 id;

	if (!q->cur)
		return 1;
	if (read_user_u64(q->cur + q->py->ts_thread_id, &id)) {
		q->fault = 1;
		return 1;
	}
	if (id == q->fsbase) {
		q->found = q->cur;
		return 1;
	}
	if (read_user_u64(q->cur + q->py->ts_next, &q->cur)) {
		q->fault = 1;
		return 1;
	}
	return 0;
}

/*
 * The innermost Python frame of the current thread: its thread state is the one of the main
 * interpreter whose thread_id (pthread_self) is the thread's fsbase. 0 when the thread has
 * none (not a Python thread, the interpreter not started, or a sub-interpreter's).
 */
static __always_inline __u64 py_current_frame(const struct py_proc *py, struct py_stats *st)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct py_thread_search q = { .py = py };
	__u64 interp, frame;

	q.fsbase = BPF_CORE_READ(task, thread.fsbase);
	if (read_user_u64(py->interp_addr, &interp) || !interp ||
	    read_user_u64(interp + py->interp_threads, &q.cur)) {
		st->no_thread++;
		return 0;
	}
	bpf_loop(PY_MAX_THREADS, py_thread_step, &q, 0);
	if (!q.found) {
		if (q.fault)
			st->lost_read++;
		else
			st->no_thread++;
		return 0;
	}
	if (read_user_u64(q.found + py->ts_frame, &frame)) {
		st->lost_read++;
		return 0;
	}
	if (frame && (py->layout == PY_LAYOUT_311 || py->layout == PY_LAYOUT_312) &&
	    read_user_u64(frame + py->cframe_current, &frame)) {
		st->lost_read++;
		return 0;
	}
	if (!frame)
		st->no_thread++;
	return frame;
}

static __always_inline bool py_is_eval(const struct py_proc *py, __u64 addr)
{
	return (addr >= py->eval_start && addr < py->eval_end) ||
	       (addr >= py->cold_start && addr < py->cold_end);
}

/* Ends the run: the next iteration steps the eval frame natively without recording it. */
static __always_inline void py_end_run(struct unwind_regs *r)
{
	r->py_in_run = 0;
	r->py_skip = 1;
}

/* Emits the next Python frame of the current run (or ends the run). */
static __always_inline void py_emit(struct unwind_ctx *c)
{
	const struct py_proc *py = c->py;
	struct unwind_regs *r = c->regs;
	struct sysom_stack_trace *trace = c->trace;
	__u64 frame = r->py_frame, code, prev, ptr = 0, instr = 0, check = 0, hash = 0;
	__u16 n = trace->nframes;
	__s32 lasti = -1;
	__u8 entry = 0;

	if (!frame) {
		py_end_run(r);
		return;
	}
	if (read_user_u64(frame + py->frame_code, &code) ||
	    read_user_u64(frame + py->frame_previous, &prev) ||
	    (py->layout == PY_LAYOUT_310
		     ? bpf_probe_read_user(&lasti, sizeof(lasti), (void *)(frame + py->frame_instr))
		     : (read_user_u64(frame + py->frame_instr, &ptr) ||
			bpf_probe_read_user(&entry, 1, (void *)(frame + py->frame_entry))))) {
		c->pystats->lost_read++;
		r->py_frame = 0; /* the chain cannot be trusted past here */
		py_end_run(r);
		return;
	}
	if (py->layout >= PY_LAYOUT_312 && entry == PY_OWNED_BY_CSTACK) {
		/* The shim below this invocation's frames: the run is over. */
		r->py_frame = prev;
		py_end_run(r);
		return;
	}
	if (!code || (code & 7) || code >= (1ULL << 47)) {
		c->pystats->lost_invalid++;
		r->py_frame = 0;
		py_end_run(r);
		return;
	}
	if (n >= SYSOM_PROFILE_MAX_DEPTH) {
		c->pystats->lost_depth++;
		unwind_stop_at(c, UNWIND_STOP_DEPTH);
		return;
	}
	if (py->layout == PY_LAYOUT_310) {
		instr = lasti >= 0 ? (__u64)lasti + 1 : 0;
	} else if (ptr >= code + py->code_adaptive) {
		instr = (ptr - code - py->code_adaptive) / 2 + 1;
	}
	if (instr > PY_FRAME_INSTR_MAX)
		instr = PY_FRAME_INSTR_MAX;
	/* What the agent checks the code object against when it names the frame later. */
	if (!read_user_u64(code + py->code_name, &ptr) && ptr &&
	    !read_user_u64(ptr + PY_STR_HASH_OFFSET, &hash))
		check = py_frame_check_name(hash, ptr);
	trace->ips[n] = PY_FRAME_TAG | check << PY_FRAME_CHECK_SHIFT |
			instr << PY_FRAME_INSTR_SHIFT | code >> 3;
	trace->nframes = n + 1;
	c->pystats->frames++;
	r->py_frame = prev;
	if (py->layout == PY_LAYOUT_310 || (py->layout == PY_LAYOUT_311 && entry))
		py_end_run(r); /* one frame per invocation (3.10); is_entry ends it (3.11) */
}
#endif

/* One frame: record its pc, then step to its caller (Algorithm 1). bpf_loop callback. */
static long unwind_one_frame(__u64 index, void *data)
{
	struct unwind_ctx *c = data;
	struct unwind_stats *st = c->stats;
	struct unwind_regs *r = c->regs;
	struct sysom_stack_trace *trace = c->trace;
	const struct unwind_mapping *m;
	struct unwind_marker_key mk;
	struct unwind_marker *mark, fresh = {};
	__u16 n = trace->nframes;
	__u64 lookup;
	int rc;

#ifdef UNWIND_PYTHON
	if (r->py_in_run) {
		if (c->py) {
			py_emit(c);
			return c->done ? 1 : 0;
		}
		r->py_in_run = 0; /* forgotten meanwhile: the eval frame stays native */
		r->py_frame = 0;
	}
#endif
	if (n >= SYSOM_PROFILE_MAX_DEPTH) {
		unwind_stop_at(c, UNWIND_STOP_DEPTH);
		return 1;
	}
	if (r->ip == 0) {
		unwind_stop_at(c, UNWIND_STOP_COMPLETE);
		return 1;
	}
	lookup = r->ip_exact ? r->ip : r->ip - 1;
#ifdef UNWIND_PYTHON
	if (r->py_skip) {
		r->py_skip = 0; /* replaced by its Python frames: step it, do not record it */
	} else if (c->py && r->py_frame && py_is_eval(c->py, lookup)) {
		r->py_in_run = 1;
		c->pystats->runs++;
		return 0;
	} else
#endif
	{
		trace->ips[n] = r->ip;
		trace->nframes = n + 1;
		st->frames++;
	}

	if (r->at_entry) {
		/* Counted with the CFI steps: its rule is the entry row's, CFA = RSP + 8. */
		rc = entry_step(r);
		if (rc != STEP_CONTINUE) {
			unwind_stop_at(c, rc);
			return 1;
		}
		st->frames_dwarf++;
		return 0;
	}
	m = find_mapping(c->proc, lookup);
	if (!m) {
		report_unmapped(c, r->ip);
		unwind_stop_at(c, UNWIND_STOP_NO_MAPPING);
		return 1;
	}
	if (m->file_id == 0) {
		/* No table for this code (anonymous JIT code, a file without CFI, or one whose
		 * table is not built yet): frame pointers, validated every time. */
		/* A CPython trampoline's exact code first: its RBP is its caller's, which in an
		 * interpreter built without frame pointers may look like a frame and is not. */
		rc = m->flags & UNWIND_MAPPING_ANON ? py_trampoline_step(r) : UNWIND_STOP_FP_INVALID;
		if (rc == UNWIND_STOP_FP_INVALID)
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

#endif
