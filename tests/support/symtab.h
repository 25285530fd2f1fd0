/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test support: function names of a running process by runtime address, from the ELF symbol
 * tables (.symtab, else .dynsym) of its executable file mappings in /proc/PID/maps.
 * Anonymous executable mappings (JIT code) resolve to "[jit]".
 */
#ifndef SYSOM_TESTS_SUPPORT_SYMTAB_H
#define SYSOM_TESTS_SUPPORT_SYMTAB_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SYMTAB_MAX_MAPPINGS 1024        /* executable mappings read per process */
#define SYMTAB_MAX_ANON 256             /* anonymous executable mappings kept */
#define SYMTAB_MAX_SYMBOLS (1u << 20)   /* function symbols kept per process */
#define SYMTAB_MAX_NAMES (64u << 20)    /* bytes of names kept per process */

struct symtab_symbol {
	uint64_t start, end; /* runtime range [start, end) */
	uint32_t name;       /* offset in symtab.names */
};

struct symtab_range {
	uint64_t start, end;
};

struct symtab {
	struct symtab_symbol *symbols; /* sorted by start, one per start address */
	size_t count, capacity;
	char *names;
	size_t names_len, names_capacity;
	struct symtab_range anon[SYMTAB_MAX_ANON];
	size_t anon_count;
};

/*
 * Reads /proc/PID/maps and the function symbols (STT_FUNC/STT_GNU_IFUNC with a size) of every
 * executable file mapping; files that cannot be read are skipped. Returns 0 or -errno (-E2BIG
 * past the limits above); on error *t is left empty.
 */
int symtab_load_process(struct symtab *t, pid_t pid);

/* Name of the function containing addr, "[jit]" in an anonymous executable mapping, or NULL. */
const char *symtab_name_at(const struct symtab *t, uint64_t addr);

/* Frees what symtab_load_process allocated; *t is left empty (safe to call twice). */
void symtab_free(struct symtab *t);

#endif
