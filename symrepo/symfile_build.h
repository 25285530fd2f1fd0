/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol file writer internals shared by the table, ELF and DWARF inputs (not installed). */
#ifndef SYSOM_SYMREPO_SYMFILE_BUILD_H
#define SYSOM_SYMREPO_SYMFILE_BUILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/elf_buildid.h"
#include "symrepo/symfile.h"

/* A function as written to FUNCTIONS. */
struct symb_func {
	uint64_t start, size;
	uint32_t name, demangled; /* string offsets (demangled 0: none) */
	uint32_t flags;           /* SYMF_FN_* */
};

/* An address interval claimed by a function, before overlaps are resolved. */
struct symb_interval {
	uint64_t start, end;
	uint32_t function;
	uint32_t flags; /* SYMF_RANGE_* */
};

/* A merged run of covered addresses [start, end). */
struct symb_run {
	uint64_t start, end;
};

/* A symbol without size, to be bounded by its neighbours. */
struct symb_sizeless {
	uint64_t start;
	uint64_t limit;    /* end of its section or segment: never extended beyond */
	uint32_t function; /* already added with size 0; the inferred size is filled in */
};

/* An inlined call range (one piece of DW_AT_ranges). */
struct symb_inline {
	uint64_t start;
	uint32_t size;
	uint32_t function;  /* the inlined callee */
	uint32_t call_file; /* FILES index or SYMF_NONE */
	uint32_t call_line;
	uint32_t parent; /* filled by finalisation */
	uint16_t depth;
};

struct symb_line {
	uint64_t addr;
	uint32_t file; /* SYMF_NONE: end of a sequence */
	uint32_t line; /* | SYMB_LINE_WEAK: loses to another row at the same address */
};
#define SYMB_LINE_WEAK 0x80000000u
#define SYMB_LINE_MAX 0x7fffffffu

/* u32 → u32 open-addressing map (keys are string offsets). */
struct symb_map {
	uint32_t *keys; /* SYMF_NONE: empty */
	uint32_t *values;
	uint32_t cap, count;
};

/* Output range after overlaps are resolved. */
struct symb_range {
	uint64_t start, size;
	uint32_t function, flags;
};

/*
 * The whole symbol file being built. Every allocation goes through symb__alloc & co., which
 * count bytes against `budget` and, when it would be exceeded, drop line rows and then
 * inline ranges before failing with -SYSOM_ELIMIT.
 */
struct symb {
	/* counted heap */
	uint64_t mem_current, mem_peak, budget;
	int error; /* sticky: first failure (negative) */
	char *errbuf;
	size_t errlen;

	struct sysom_build_id id;
	uint32_t from_symtab, from_dynsym, from_dwarf;

	/* STRINGS and its intern table (slot: offset, hash tag) */
	char *str;
	size_t str_len, str_cap;
	uint32_t *str_slot_off, *str_slot_hash;
	uint32_t str_slot_cap, str_slot_count;

	struct symfile_segment *segs;
	uint32_t nsegs, segs_cap;

	struct symb_func *funcs;
	uint32_t nfuncs, funcs_cap;

	struct symb_interval *ivs;
	uint32_t nivs, ivs_cap;
	bool ivs_sorted;

	struct symb_run *cov; /* merged coverage of ivs (symb__coverage) */
	uint32_t ncov;

	struct symb_sizeless *sizeless;
	uint32_t nsizeless, sizeless_cap;

	uint64_t *bounds; /* addresses that end sizeless functions (other symbols) */
	uint32_t nbounds, bounds_cap;

	bool inline_on, inline_dropped;
	struct symb_inline *inl;
	uint32_t ninl, inl_cap;
	struct symb_map callee_map; /* callee name offset → FUNCTIONS index */

	bool lines_on, lines_dropped;
	struct symb_line *lines;
	uint32_t nlines, lines_cap;

	uint32_t *files; /* FILES: path string offsets */
	uint32_t nfiles, files_cap;
	struct symb_map file_map; /* path offset → FILES index */

	struct symb_range *ranges;
	uint32_t nranges;
};

/* Prepares an empty builder (budget 0: 256 MiB). */
void symb__init(struct symb *b, uint64_t budget, char *err, size_t errlen);
/* Frees everything the builder holds. */
void symb__destroy(struct symb *b);
/* Records the first failure: sets b->error (if unset) and formats the message. Returns rc. */
int symb__fail(struct symb *b, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Counted allocation; NULL with b->error set (-ENOMEM / -SYSOM_ELIMIT) on failure. */
void *symb__alloc(struct symb *b, size_t n);
void symb__free(struct symb *b, void *p);
/* Returns `arr` (elements of `elem` bytes, capacity `*cap`) grown to hold `need` elements,
 * or NULL with b->error set (then `arr` is unchanged and still owned by the caller). */
void *symb__grow(struct symb *b, void *arr, uint32_t *cap, size_t elem, uint64_t need);

/* Interns `len` bytes of `s` (truncated to SYMF_MAX_NAME_BYTES); offset or SYMF_NONE. */
uint32_t symb__intern(struct symb *b, const char *s, size_t len);

/* Adds a function named `name` (demangled when mangled); its index or SYMF_NONE. */
uint32_t symb__add_function(struct symb *b, uint64_t start, uint64_t size, const char *name,
			    uint32_t flags);
/* FUNCTIONS index of the inline-only name holder for `name` (created once). */
uint32_t symb__callee(struct symb *b, const char *name);
/* FILES index of `path` (created once), or SYMF_NONE on failure. */
uint32_t symb__file(struct symb *b, const char *path);

int symb__add_segment(struct symb *b, uint64_t file_offset, uint64_t vaddr, uint64_t size);
int symb__add_interval(struct symb *b, uint64_t start, uint64_t end, uint32_t function,
		       uint32_t flags);
int symb__add_sizeless(struct symb *b, uint64_t start, uint64_t limit, uint32_t function);
int symb__add_bound(struct symb *b, uint64_t addr);

/* Sorts the intervals and merges them into b->cov. */
int symb__coverage(struct symb *b);
/* True when [start, end) overlaps the coverage computed by the last symb__coverage. */
bool symb__covered(const struct symb *b, uint64_t start, uint64_t end);

/* Inline ranges and line rows; both may be dropped by the budget (then they are no-ops). */
int symb__add_inline(struct symb *b, uint64_t start, uint64_t end, uint32_t function,
		     uint32_t call_file, uint32_t call_line, uint32_t depth);
int symb__add_line(struct symb *b, uint64_t addr, uint32_t file, uint32_t line);

/* Bounds the sizeless functions, resolves overlaps, sorts and checks everything, and writes
 * the file atomically (temporary file in the same directory, fsync, rename). */
int symb__finish(struct symb *b, const char *out_path, uint64_t *out_bytes);

/* In-place heap sort (no hidden allocation, unlike qsort). */
void symb__sort(void *base, size_t n, size_t elem, int (*cmp)(const void *, const void *));

#endif
