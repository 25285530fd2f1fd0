/* SPDX-License-Identifier: Apache-2.0 */
/* Builds small x86-64 ELF images in memory, with chosen sections, for tests and fuzzers. */
#ifndef SYSOM_TESTS_ELF_BUILD_H
#define SYSOM_TESTS_ELF_BUILD_H

#include <stddef.h>
#include <stdint.h>

struct elf_build_section {
	const char *name;     /* e.g. ".eh_frame" */
	uint32_t type;        /* SHT_PROGBITS, SHT_NOBITS, ... */
	uint64_t flags;       /* SHF_ALLOC, ... */
	uint64_t addr;        /* sh_addr */
	const void *data;     /* contents (ignored for SHT_NOBITS) */
	size_t size;
};

/*
 * Lays out an ELF64 little-endian x86-64 file of `e_type` (ET_DYN, ET_EXEC, ...) with the
 * given sections plus a null section and .shstrtab, no program headers. Returns a malloc'd
 * image and its size in *size, or NULL when out of memory.
 */
uint8_t *elf_build_image(uint16_t e_type, const struct elf_build_section *sections, size_t n,
			 size_t *size);

#endif
