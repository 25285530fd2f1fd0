/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol file writer: the DWARF pass, called by the ELF input (not installed). */
#ifndef SYSOM_SYMREPO_SYMFILE_ELF_H
#define SYSOM_SYMREPO_SYMFILE_ELF_H

#include <libelf.h>
#include <stdbool.h>
#include <stdint.h>

#include "symrepo/symfile_build.h"

/* Sorted, disjoint executable address ranges of the ELF (its SHF_EXECINSTR sections, else
 * its executable segments): DWARF addresses outside them (discarded COMDAT copies at 0,
 * tombstones) are ignored. */
struct symfile_exec {
	const struct symb_run *runs;
	uint32_t count;
};

/* True when [start, end) lies inside one executable range. */
bool symfile__exec_contains(const struct symfile_exec *ex, uint64_t start, uint64_t end);

struct symfile_dwarf_stats {
	uint32_t units;         /* compile units read */
	uint32_t functions;     /* DWARF-only functions added */
	uint32_t reopened;      /* times the libdw handle was re-opened to bound its caches */
};

/*
 * Reads the DWARF of `elf` (none: returns 0): DW_TAG_subprogram ranges that the symbol
 * tables do not cover (b->cov must be current) become functions; with `inlines`,
 * DW_TAG_inlined_subroutine ranges; with `lines`, line rows. libdw's own caches (parsed
 * line programs above all) are bounded by re-opening the handle every `libdw_rows` rows.
 * Returns 0 or b->error; malformed units are skipped.
 */
int symfile__dwarf(struct symb *b, Elf *elf, const struct symfile_exec *ex, bool inlines,
		   bool lines, uint64_t libdw_rows, struct symfile_dwarf_stats *stats);

#endif
