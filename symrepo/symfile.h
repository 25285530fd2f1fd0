/* SPDX-License-Identifier: Apache-2.0 */
/* Compact symbol files: written from an ELF (+ separate debug file), searched in place from
 * an mmap. The format is documented in docs/symbol-format.md. */
#ifndef SYSOM_SYMREPO_SYMFILE_H
#define SYSOM_SYMREPO_SYMFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/elf_buildid.h"

/* Where and why a symbol file was refused. */
struct symfile_error {
	uint64_t offset;     /* byte offset in the file where the problem was found */
	char message[200];
};

/* One frame of a lookup result. Strings are borrowed from the mapped file (NUL-terminated,
 * valid until symfile_close). */
struct symfile_frame {
	const char *name;        /* raw (mangled) symbol name; "??" for an inlined call whose
				    DWARF names no callee */
	const char *demangled;   /* demangled C++ name, or NULL when the name is not mangled */
	uint64_t function_start; /* vaddr of the function (for inlined frames: of the inlined range) */
	uint64_t function_size;
	const char *file;        /* source file of the location (made absolute with the unit's
				    DW_AT_comp_dir when relative), or NULL without line info */
	uint32_t line;           /* 0 without line info */
	bool inlined;            /* an inlined call inside the next (outer) frame */
	bool size_inferred;      /* the symbol had no size: bounded by the next symbol/section end */
};

struct symfile_info {
	struct sysom_build_id build_id;
	uint32_t segments;      /* executable PT_LOAD segments (file offset → vaddr) */
	uint32_t functions;     /* address ranges */
	uint32_t inline_ranges;
	uint32_t line_rows;
	uint32_t files;
	uint64_t string_bytes;
	uint64_t file_bytes;
	uint32_t from_symtab, from_dynsym, from_dwarf; /* where the functions came from */
};

struct symfile;

/*
 * Maps `path` and validates its header and section table (every later read is bounded by
 * what this checks). Returns 0, -errno, -SYSOM_ECORRUPT or -SYSOM_EVERSION with `err`
 * (optional) saying where and why. The file is never read whole into memory.
 */
int symfile_open(const char *path, struct symfile **out, struct symfile_error *err);

/* Same for a mapped buffer the caller owns (fuzzing, tests); `data` must outlive the handle. */
int symfile_open_memory(const void *data, size_t len, struct symfile **out,
			struct symfile_error *err);

/* Unmaps and frees; accepts NULL. */
void symfile_close(struct symfile *f);

/* Fills `out` from the header and section table (O(1); `functions` counts address ranges). */
void symfile_info_get(const struct symfile *f, struct symfile_info *out);

/*
 * Translates a file offset of the described ELF (what agents send for user frames) into its
 * virtual address through the executable PT_LOAD segments. Returns 0 or -ENOENT when the
 * offset lies in no executable segment.
 */
int symfile_offset_to_vaddr(const struct symfile *f, uint64_t file_offset, uint64_t *vaddr);

/*
 * Looks up `vaddr`. Writes up to `max` frames, innermost first: inlined calls (when the file
 * has inline ranges), then the function itself. Returns the number of frames written; 0 when
 * no function covers the address (a gap: the caller shows file+offset, never a neighbour's
 * name); -EINVAL for max < 1; -SYSOM_ECORRUPT when a record it reads points outside its
 * table (never for a file symfile_verify accepted). O(log n) binary searches plus the
 * inline nesting depth (at most 64); allocation-free. Thread-safe (read-only).
 */
int symfile_lookup(const struct symfile *f, uint64_t vaddr, struct symfile_frame *frames, int max);

/*
 * Checks the whole file: sorted non-overlapping ranges, every index and string reference in
 * bounds, NUL-terminated strings. Returns 0 or -SYSOM_ECORRUPT with `err` set.
 */
int symfile_verify(const struct symfile *f, struct symfile_error *err);

struct symfile_write_options {
	const char *executable_path; /* the ELF as mapped by processes (required) */
	const char *debug_path;      /* separate debug file (.debug), or NULL */
	bool inline_frames;          /* emit inline ranges from DWARF (default on in the CLI) */
	bool line_table;             /* emit file:line rows from DWARF */
	uint64_t memory_budget;      /* bytes of heap the writer may use (0: 256 MiB); beyond it the
					writer drops line rows, then inline ranges, and says so.
					It bounds the writer's own (counted) allocations; libdw's
					caches are bounded apart by re-opening its handle every
					budget/8 bytes' worth of parsed line rows */
};

struct symfile_write_stats {
	uint32_t from_symtab, from_dynsym, from_dwarf;
	uint32_t inline_ranges, line_rows;
	bool lines_dropped, inlines_dropped; /* the memory budget was reached */
	uint64_t peak_heap_bytes;             /* writer's own high-water mark (counted
						 allocations; never above the budget) */
	uint64_t output_bytes;
	double seconds;
};

/* Programmatic input for symfile_write_table (tests, benchmarks, synthetic repositories). */
struct symfile_segment {
	uint64_t file_offset, vaddr, size; /* an executable PT_LOAD: [vaddr, vaddr + size) */
};

struct symfile_symbol {
	uint64_t start, size; /* size 0: bounded by the next symbol (marked size_inferred) */
	const char *name;     /* raw name; demangled by the writer when mangled */
};

/*
 * Writes a symbol file from explicit segments and symbols (no ELF input, no inline or line
 * data), atomically as symfile_write does. Symbols need not be sorted; duplicates at one
 * address keep the first. Overlapping sized symbols: at each address the one that starts
 * last owns it. A sizeless symbol inside a sized one is ignored; one after the last symbol
 * is bounded by the end of its segment, or dropped outside every segment. Segments must not
 * overlap in file offsets. Borrowed inputs. Returns 0 or -errno / -EINVAL / -SYSOM_ELIMIT
 * with `err` (optional) explaining.
 */
int symfile_write_table(const struct sysom_build_id *id, const struct symfile_segment *segments,
			uint32_t nsegments, const struct symfile_symbol *symbols, uint32_t nsymbols,
			const char *out_path, char *err, size_t errlen);

/*
 * Builds the symbol file for `opts` and writes it to `out_path` atomically (a temporary file
 * in the same directory, fsync, rename). The build IDs of the executable and the debug file
 * must match (-SYSOM_ECORRUPT "build ID mismatch" otherwise; -SYSOM_ENOBUILDID when either
 * has none). An executable without a build ID note and without a debug file is identified
 * by its content hash (SYSOM_OBJECT_FILE_HASH), as sysom_object_identity does. Reads only
 * the headers, symbol tables and DWARF (libelf ELF_C_READ_MMAP), never the whole file.
 * `stats` (optional) is written only on success. Returns 0 or -errno / -SYSOM_ENOTELF /
 * -SYSOM_ENOBUILDID / -SYSOM_ECORRUPT / -SYSOM_ELIMIT with `err` (optional) explaining.
 * Selection rules (aliases, sizeless symbols, DWARF-only functions): docs/symbol-format.md.
 */
int symfile_write(const struct symfile_write_options *opts, const char *out_path,
		  struct symfile_write_stats *stats, char *err, size_t errlen);

#endif
