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

#endif
