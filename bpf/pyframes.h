/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * CPython frames in sampled user stacks: what the agent publishes per Python process
 * (agent/sampling/pyframes.c) and how a Python frame is encoded in a stack's ips.
 */
#ifndef SYSOM_BPF_PYFRAMES_H
#define SYSOM_BPF_PYFRAMES_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Frame layouts the BPF walker knows. */
enum py_layout {
	PY_LAYOUT_310 = 1, /* PyFrameObject chain (f_back), one frame per eval invocation */
	PY_LAYOUT_311 = 2, /* _PyInterpreterFrame via tstate->cframe, a run ends at is_entry */
	PY_LAYOUT_312 = 3, /* ... a run ends before an owner == FRAME_OWNED_BY_CSTACK frame */
	PY_LAYOUT_313 = 4, /* ... frame from tstate->current_frame (offsets from _Py_DebugOffsets) */
};

/* FRAME_OWNED_BY_CSTACK (3.12+): the shim an eval invocation pushes below its frames. */
#define PY_OWNED_BY_CSTACK 3

/* Threads of the main interpreter scanned for the sampled thread's state. */
#define PY_MAX_THREADS 64

/*
 * One Python process of one exec generation (tgid → this). Addresses are absolute in the
 * process; offsets are in bytes from the start of the named struct. Every offset was read
 * from _Py_DebugOffsets (3.13) or from the per-version table checked against the real
 * interpreters (agent/sampling/pyframes.c); a version without them is never published.
 */
struct py_proc {
	__u32 generation;
	__u32 layout;           /* enum py_layout */
	__u32 version_hex;      /* PY_VERSION_HEX of the interpreter */
	__u32 pad;
	__u64 interp_addr;      /* address of the PyInterpreterState * to start from */
	__u64 eval_start, eval_end; /* _PyEval_EvalFrameDefault */
	__u64 cold_start, cold_end; /* its .cold part (0, 0 when none) */
	__u16 interp_threads;   /* PyInterpreterState: first PyThreadState * */
	__u16 ts_next;          /* PyThreadState: next */
	__u16 ts_thread_id;     /* PyThreadState: thread_id (pthread_self, = the thread's fsbase) */
	__u16 ts_frame;         /* 3.10 frame, 3.11/3.12 cframe, 3.13 current_frame */
	__u16 cframe_current;   /* _PyCFrame: current_frame (3.11/3.12) */
	__u16 frame_code;       /* f_code / f_executable */
	__u16 frame_previous;   /* f_back / previous */
	__u16 frame_instr;      /* 3.10 f_lasti (int); else prev_instr / instr_ptr */
	__u16 frame_entry;      /* 3.11 is_entry; 3.12+ owner (one byte) */
	__u16 code_adaptive;    /* PyCodeObject: co_code_adaptive (3.11+) */
	__u16 code_name;        /* PyCodeObject: co_name (interned, its hash known): the check */
	__u16 pad2;
};

/*
 * A Python frame in sysom_stack_trace.ips: bit 63 set (never a user address), bits 55..62 a
 * check of the code object as it was when sampled (py_frame_check_name of its co_name, 1..255;
 * 0: unreadable), bits 44..54 the instruction index + 1 (0: unknown; PY_FRAME_INSTR_MAX: past
 * 2,046 code units, unknown too: a line of a function that long is not named), bits 0..43 the
 * code object's address divided by 8 (objects are 8-aligned and below 2^47).
 *
 * The names are read from the process when the agent drains, up to a drain interval later; by
 * then a code object that was freed may have left its address to another (code compiled in a
 * loop: 93% of such samples were named after the wrong function). The agent names a frame
 * only when the code object now at the address has the same check, and counts the others as
 * reused; a false match is 1 in 255 (a successor with the same name is mostly the same function
 * compiled again; with 6 bits of check and 13 of instruction index it was 1 in 63, and 7.8% of
 * the samples of code compiled in a loop were misnamed). The hash, not the name object's address: the allocator hands a freed
 * name's block to the next name of the same size, as it does the code object's; co_name, not
 * co_qualname: names are interned, so their hash is computed, a qualified name's often not.
 */
/* PyASCIIObject: ob_refcnt, ob_type, length, then the cached hash (-1: not computed yet), in
 * every 64-bit CPython 3.x. */
#define PY_STR_HASH_OFFSET 24
#define PY_FRAME_TAG (1ULL << 63)
#define PY_FRAME_CHECK_SHIFT 55
#define PY_FRAME_CHECK_MAX 255ULL
#define PY_FRAME_INSTR_SHIFT 44
#define PY_FRAME_INSTR_MAX ((1ULL << 11) - 1)
#define PY_FRAME_IS(v) (((v) & PY_FRAME_TAG) != 0)
#define PY_FRAME_CODE(v) (((v) & ((1ULL << 44) - 1)) << 3)
#define PY_FRAME_CHECK(v) ((unsigned)(((v) >> PY_FRAME_CHECK_SHIFT) & PY_FRAME_CHECK_MAX))
/* Instruction index (code units), or -1 when unknown. */
#define PY_FRAME_INSTR(v)                                                                 \
	((((v) >> PY_FRAME_INSTR_SHIFT) & PY_FRAME_INSTR_MAX) == PY_FRAME_INSTR_MAX           \
		 ? -1LL                                                                       \
		 : (long long)(((v) >> PY_FRAME_INSTR_SHIFT) & PY_FRAME_INSTR_MAX) - 1)

/* 1..255 from a 64-bit value. */
static inline unsigned long long py_frame_check(unsigned long long x)
{
	x ^= x >> 33;
	x ^= x >> 17;
	x ^= x >> 7;
	return x % PY_FRAME_CHECK_MAX + 1;
}

/*
 * The check of a code object whose co_name is the str at `name` with cached hash `hash`: of
 * the hash, or of the address when the hash was never computed (-1: a statically allocated
 * name such as 3.11's "<module>", whose address does not move). The agent accepts either of
 * its two values for the object it reads (the hash may have been computed since).
 */
static inline unsigned long long py_frame_check_name(unsigned long long hash,
						     unsigned long long name)
{
	return hash != ~0ULL ? py_frame_check(hash) : py_frame_check(name * 0x9e3779b97f4a7c15ULL);
}

/* Per-CPU Python walker counters (monotonic); part of struct sysom_cpu_state. */
struct py_stats {
	__u64 frames;        /* Python frames inserted */
	__u64 runs;          /* eval-loop invocations replaced by their Python frames */
	__u64 no_thread;     /* eval frames whose thread state was not found (kept native) */
	__u64 lost_read;     /* Python frames lost: a frame or thread state was unreadable */
	__u64 lost_invalid;  /* ... a code object address was implausible */
	__u64 lost_depth;    /* ... the stack reached its depth limit inside a run */
};

#endif
