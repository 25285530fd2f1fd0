/* SPDX-License-Identifier: Apache-2.0 */
/* CFI compiler: .eh_frame / .debug_frame of one ELF file → a compact sorted unwind table. */
#ifndef SYSOM_AGENT_SAMPLING_CFI_H
#define SYSOM_AGENT_SAMPLING_CFI_H

#include <stddef.h>
#include <stdint.h>
#include <libelf.h>

#include "bpf/unwind.h"

/* Limits on what one file may make us do (a hostile ELF must not exhaust memory or time). */
#define CFI_MAX_ROWS (16u << 20)      /* rows per table (128 MiB) */
#define CFI_MAX_FDES (4u << 20)       /* FDEs per file */
#define CFI_MAX_STATE_DEPTH 16        /* DW_CFA_remember_state nesting */
#define CFI_MAX_SPAN UINT32_MAX       /* covered pc range: row pcs are 32-bit */
#define CFI_MAX_SECTION_BYTES (512u << 20) /* .eh_frame / .debug_frame read into memory */

/* What the compiler met: sizes, and every FDE or row it could not express exactly. */
struct cfi_stats {
	uint64_t cies;
	uint64_t fdes;              /* FDEs whose rows are in the table */
	uint64_t eh_frame_fdes;     /* of which from .eh_frame */
	uint64_t debug_frame_fdes;  /* of which from .debug_frame (ranges .eh_frame lacks) */
	uint64_t rows_raw;          /* rows before identical neighbours were merged */
	uint64_t rows;              /* rows in the table */
	uint64_t complex_cfa_rows;  /* UNWIND_CFA_COMPLEX rows (frame-pointer fallback) */
	uint64_t complex_rbp_rows;  /* UNWIND_RBP_COMPLEX rows */
	uint64_t plt_fdes;          /* FDEs recognised as PLT stubs */
	uint64_t signal_fdes;       /* FDEs of signal trampolines ('S' augmentation) */
	uint64_t end_rows;          /* rows with an undefined return address (outermost frames) */
	uint64_t overlapping_fdes;  /* dropped: their range overlaps an earlier FDE */
	uint64_t empty_fdes;        /* zero-length FDEs (ignored) */
	uint64_t bad_fdes;          /* dropped: undecodable (encoding, truncation, bad opcode) */
	uint64_t bad_cies;          /* CIEs we could not use: their FDEs count as bad_fdes */
};

/* An unwind table. Owned by the caller; cfi_table_free releases it. */
struct cfi_table {
	uint64_t base;             /* ELF vaddr of row pc 0 (the lowest FDE start) */
	uint64_t end;              /* one past the highest covered vaddr */
	struct unwind_row *rows;   /* sorted, strictly increasing pc; NULL when empty */
	uint32_t nrows;
	struct cfi_stats stats;
};

/*
 * Compiles the CFI of `elf` (its .eh_frame, and its .debug_frame if it has one) and, if
 * `debug_elf` is not NULL, the .debug_frame of its separate debug file, for ranges .eh_frame
 * does not cover. x86-64 ELF only. Writes `*out` only on success; a file with no CFI at all
 * gives an empty table (frame pointers alone unwind it). FDEs that cannot be decoded are
 * dropped and counted (their pcs fall back to validated frame pointers), not fatal. Returns 0,
 * -SYSOM_ENOTELF (not an x86-64 executable or shared object), -SYSOM_ELIMIT (a limit above),
 * -EIO (a section could not be read: the file changed while being read), -ENOMEM; `err` (may
 * be NULL) says what went wrong. Open `elf` with ELF_C_READ (pread), never ELF_C_READ_MMAP:
 * a mapped file truncated by another process raises SIGBUS.
 */
int cfi_table_build(Elf *elf, Elf *debug_elf, struct cfi_table *out, char *err, size_t errlen);

/* Opens `path` (ELF_C_READ) and compiles it as above (no separate debug file). */
int cfi_table_build_path(const char *path, struct cfi_table *out, char *err, size_t errlen);

/* The row in effect at ELF vaddr `vaddr`, or NULL outside [base, end). */
const struct unwind_row *cfi_table_lookup(const struct cfi_table *t, uint64_t vaddr);

/* Frees the rows; accepts a zeroed or already freed table. */
void cfi_table_free(struct cfi_table *t);

#endif
