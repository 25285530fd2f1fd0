/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the CFI compiler on hostile .eh_frame / .debug_frame bytes, and on whole
 * hostile ELF files. Checks the table invariants the BPF unwinder relies on. */
// fuzz-sources: agent/sampling/cfi.c tests/support/elf_build.c
#include <elf.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <libelf.h>

#include "agent/sampling/cfi.h"
#include "tests/support/elf_build.h"

static void check(const struct cfi_table *t)
{
	if (t->nrows > CFI_MAX_ROWS || (t->nrows && (!t->rows || t->end <= t->base)))
		abort();
	for (uint32_t i = 1; i < t->nrows; i++)
		if (t->rows[i].pc <= t->rows[i - 1].pc)
			abort(); /* BPF's binary search needs strictly increasing pcs */
	for (uint32_t i = 0; i < t->nrows; i++) {
		const struct unwind_row *r = &t->rows[i];
		if (UNWIND_ROW_CFA(r) > UNWIND_CFA_COMPLEX || UNWIND_ROW_RBP(r) > UNWIND_RBP_COMPLEX)
			abort();
		if ((uint64_t)r->pc > t->end - t->base)
			abort();
		/* Every row is reachable, except the NONE row that ends the table at `end`. */
		if (r->pc < t->end - t->base ? cfi_table_lookup(t, t->base + r->pc) != r
					     : i != t->nrows - 1 || UNWIND_ROW_CFA(r) != UNWIND_CFA_NONE)
			abort();
	}
	if (t->nrows && cfi_table_lookup(t, t->end))
		abort();
}

static void run(Elf *elf)
{
	struct cfi_table t = { 0 };
	char err[256];

	if (elf && cfi_table_build(elf, NULL, &t, err, sizeof(err)) == 0) {
		check(&t);
		cfi_table_free(&t);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	elf_version(EV_CURRENT);
	uint8_t mode = data[0];
	data++;
	size--;

	if (mode & 0x80) {
		/* The whole input is an ELF file (libelf must not be trusted with it either). */
		char *copy = malloc(size ? size : 1);
		if (!copy)
			return 0;
		memcpy(copy, data, size);
		Elf *elf = elf_memory(copy, size);
		run(elf);
		elf_end(elf);
		free(copy);
		return 0;
	}
	/* The input is the contents of a CFI section of a well-formed file. */
	bool debug = mode & 1;
	struct elf_build_section sec = {
		debug ? ".debug_frame" : ".eh_frame", SHT_PROGBITS, debug ? 0 : SHF_ALLOC,
		(mode & 2) ? 0xfffffffffffff000ull : 0x500000, data, size,
	};
	size_t img_size;
	uint8_t *img = elf_build_image((mode & 4) ? ET_EXEC : ET_DYN, &sec, 1, &img_size);
	if (!img)
		return 0;
	Elf *elf = elf_memory((char *)img, img_size);
	run(elf);
	elf_end(elf);
	free(img);
	return 0;
}
