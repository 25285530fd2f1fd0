/* SPDX-License-Identifier: GPL-2.0-only */
/* Compiled DWARF CFI rows (x86-64) shared by the agent's table builder and the BPF unwinder. */
#ifndef SYSOM_BPF_UNWIND_H
#define SYSOM_BPF_UNWIND_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/*
 * How the canonical frame address (the caller's stack pointer) of the frame whose pc falls in
 * a row is found. Stored in the low 4 bits of unwind_row.kinds.
 */
enum unwind_cfa_kind {
	UNWIND_CFA_NONE = 0,    /* no FDE covers this pc: frame-pointer unwinding, validated */
	UNWIND_CFA_RSP = 1,     /* CFA = RSP + 8 * cfa_offset8 */
	UNWIND_CFA_RBP = 2,     /* CFA = RBP + 8 * cfa_offset8 */
	UNWIND_CFA_PLT = 3,     /* PLT stub: CFA = RSP + 8 + ((pc & 15) >= cfa_offset8 ? 8 : 0) */
	UNWIND_CFA_SIGNAL = 4,  /* signal trampoline: registers come from the rt_sigframe at RSP */
	UNWIND_CFA_END = 5,     /* return address undefined: the outermost frame (_start, clone) */
	UNWIND_CFA_COMPLEX = 6, /* DWARF expression or untracked register: frame-pointer fallback */
};

/* How the caller's RBP is recovered. Stored in the high 4 bits of unwind_row.kinds. */
enum unwind_rbp_kind {
	UNWIND_RBP_SAME = 0,    /* unchanged by this frame */
	UNWIND_RBP_AT_CFA = 1,  /* saved at CFA + 8 * rbp_offset8 */
	UNWIND_RBP_COMPLEX = 2, /* expression, register or undefined: unknown in the caller */
};

/*
 * One row, 8 bytes: the rule in effect from `pc` up to the next row's pc. A table is an
 * array of rows sorted by pc, strictly increasing, covering [base, base + 2^32); pcs are ELF
 * virtual addresses minus the table's base. The return address is always at CFA - 8 (rows
 * whose CFI says otherwise are COMPLEX).
 */
struct unwind_row {
	__u32 pc;          /* ELF virtual address - table base */
	__u8 kinds;        /* enum unwind_cfa_kind | enum unwind_rbp_kind << 4 */
	__s8 rbp_offset8;  /* UNWIND_RBP_AT_CFA: RBP saved at CFA + 8 * rbp_offset8 */
	__u16 cfa_offset8; /* RSP/RBP: CFA offset / 8; PLT: the (pc & 15) threshold */
};

#define UNWIND_ROW_CFA(r) ((r)->kinds & 0x0f)
#define UNWIND_ROW_RBP(r) ((r)->kinds >> 4)
#define UNWIND_ROW_KINDS(cfa, rbp) ((__u8)((cfa) | (rbp) << 4))

/* ---- what the agent publishes to the BPF unwinder ------------------------------------------ */

/* Executable mappings per process the BPF unwinder can see (more are dropped and counted). */
#define UNWIND_MAX_MAPPINGS 512
/* Binary-search steps: enough for UNWIND_MAX_MAPPINGS mappings and 2^24 rows per table. */
#define UNWIND_MAPPING_STEPS 10
#define UNWIND_ROW_STEPS 25

enum unwind_mapping_flags {
	UNWIND_MAPPING_ANON = 1, /* anonymous executable memory (JIT): frame pointers, validated */
};

/*
 * One executable mapping of a process. A user address `addr` in [start, end) has the row pc
 * `addr - bias` in the table of file `file_id` (bias folds the mapping's load address, its
 * file offset, the segment's p_vaddr - p_offset and the table base). file_id 0: no table
 * (no CFI, table not built, over budget, anonymous): validated frame pointers only.
 */
struct unwind_mapping {
	__u64 start, end;
	__u64 bias;
	__u32 file_id;
	__u32 nrows;  /* rows in the file's table */
	__u32 flags;  /* enum unwind_mapping_flags */
	__u32 pad;
};

/* The mappings of one process, sorted by start, for one exec generation (bpf/profile.h). */
struct unwind_proc {
	__u32 generation;
	__u32 count;
	struct unwind_mapping mappings[UNWIND_MAX_MAPPINGS];
};

/*
 * Per-pc unwind marker (seed 000, Algorithm 1), keyed by (file, row pc of the frame's
 * lookup address), set once with compare-and-swap (BPF_NOEXIST) by the first CPU that
 * classifies the pc. FP: the frame keeps a standard frame there (its CFI says CFA = RBP + 16
 * with RBP saved at CFA - 16, or it has no CFI and a validated frame-pointer step succeeded):
 * later samples step by frame pointer without validation. DWARF: `row` is the rule to apply,
 * cached so later samples skip the table search.
 */
enum unwind_marker_state {
	UNWIND_MARK_FP = 1,
	UNWIND_MARK_DWARF = 2,
};

struct unwind_marker_key {
	__u32 file_id;
	__u32 pc;
};

struct unwind_marker {
	struct unwind_row row;
	__u32 state; /* enum unwind_marker_state */
};

/* Why a stack ended (also for the kernel's frame-pointer walk: COMPLETE, DEPTH, READ_FAULT):
 * counted per CPU (index into unwind_stats.stops) and stored in sysom_stack_trace.stop_reason.
 * The agent maps these to the wire's enum sysom_stack_stop in one table
 * (agent/sampling/sampler.c: sampler_stop_reason_to_wire). */
enum unwind_stop {
	UNWIND_STOP_COMPLETE = 0,    /* outermost frame reached (RA undefined or zero, RBP 0) */
	UNWIND_STOP_DEPTH = 1,       /* SYSOM_PROFILE_MAX_DEPTH frames collected */
	UNWIND_STOP_READ_FAULT = 2,  /* user stack memory unreadable (not present, bad address) */
	UNWIND_STOP_NO_MAPPING = 3,  /* pc in no executable mapping the agent published */
	UNWIND_STOP_FP_INVALID = 4,  /* no usable CFI and the frame-pointer step failed validation */
	UNWIND_STOP_JIT = 5,         /* anonymous code without a valid frame-pointer chain */
	UNWIND_STOP_CFA_ORDER = 6,   /* the caller's stack pointer did not increase */
	UNWIND_STOP_RBP_UNKNOWN = 7, /* a rule needed RBP, whose value was lost in a callee */
	UNWIND_STOP_TAIL_CALLS = 8,  /* tail-call budget exhausted or a tail call failed */
	UNWIND_STOP_TABLE = 9,       /* the file's table vanished or was unreadable mid-unwind */
	UNWIND_STOP_REASONS = 10,
};

/* Per-CPU unwinder counters (monotonic). */
struct unwind_stats {
	__u64 unwinds;           /* user stacks unwound by the hybrid unwinder */
	__u64 fallback_no_proc;  /* process not published yet: frame-pointer stack from the kernel */
	__u64 frames;            /* frames produced */
	__u64 frames_fp;         /* stepped by frame pointer */
	__u64 frames_dwarf;      /* stepped by a CFI row */
	__u64 frames_cached;     /* whose rule came from a cached marker */
	__u64 frames_fp_fallback; /* COMPLEX or uncovered rows stepped by validated frame pointers */
	__u64 markers_set;       /* markers this CPU won the compare-and-swap for */
	__u64 unmapped_reports;  /* reports sent for addresses without a mapping */
	__u64 tail_calls;
	__u64 stops[UNWIND_STOP_REASONS];
};

#endif
