/* SPDX-License-Identifier: Apache-2.0 */
/* Frame → display names: kernel symbols from the store, user frames through the Build-ID
 * symbol repository (inlined calls as frames of their own), with a bounded, thread-safe LRU
 * cache per (object, offset, leaf). */
#ifndef SYSOM_SERVER_SYMBOLS_SYMBOLIZE_H
#define SYSOM_SERVER_SYMBOLS_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/elf_buildid.h"
#include "common/wire/wire.h"
#include "server/store/store.h"

/* The recheck period of replicas (symbolizer_recheck_set): they share a repository and install
 * files (and debug files) the others are never told of. */
#define SYMBOLIZER_MISSING_RECHECK_MS 10000

struct symrepo;

enum symbolized_kind {
	SYMBOLIZED_USER,
	SYMBOLIZED_KERNEL,
	SYMBOLIZED_ERROR, /* not a frame: why the unwind stopped ("[truncated: depth limit]") */
	SYMBOLIZED_GPU,   /* not symbolized: a GPU kernel launched from the stack ("[gpu] name") */
	SYMBOLIZED_PYTHON, /* a Python function, named by the agent: "qualname (file.py:line)" */
};

/* A frame ready to display. Strings are owned (symbolized_frame_release). */
struct symbolized_frame {
	enum symbolized_kind kind;
	char *name;    /* "do_syscall_64", "main", "std::vector<int>::push_back(int const&)",
			  "libc.so.6+0x29d90", "[kernel]+0x1234", "[anon]+0x7f00..." */
	char *object;  /* object name: full path, "[kernel.kallsyms]", module; "" for error frames */
	char build_id[2 * SYSOM_BUILD_ID_MAX + 1]; /* lower-case hex; "" when the object has none */
	uint64_t offset;        /* the frame's offset in its object */
	bool has_symbol_offset; /* resolved to a symbol: */
	uint64_t symbol_offset; /* offset - symbol start (rendered "+0x5c" in JSON) */
	bool inlined;           /* a call inlined into the frame before it (toward the root) */
	bool jit;               /* JIT code named by its process's perf map (wire object kind 8) */
	char *file;             /* source file of the location, or NULL when unknown */
	uint32_t line;          /* source line, 0 when unknown */
};

/*
 * What one stored frame becomes: usually one frame; with inlined calls the function itself
 * first, then the calls inlined into it, innermost last (root-to-leaf order, as flame graphs
 * draw them). Owned (symbolized_location_release).
 */
struct symbolized_location {
	struct symbolized_frame *frames;
	uint32_t count; /* >= 1 */
};

struct symbolizer;

/* Counters of a symbolizer's cache and of its repository lookups (for /metrics). */
struct symbolizer_stats {
	uint64_t hits, misses;  /* cache lookups */
	uint64_t entries, bytes;
	/* User frames of ELF / content-hashed objects resolved (cache misses only): */
	uint64_t repo_named;    /* named from the object's symbol file */
	uint64_t repo_missing;  /* no symbol file for the Build ID: file+0xOFF */
	uint64_t repo_gaps;     /* a symbol file, but no function covers the address */
	uint64_t invalidations; /* Build IDs whose cached frames were dropped (new symbols) */
};

#define SYMBOLIZER_DEFAULT_ENTRIES 65536
#define SYMBOLIZER_DEFAULT_BYTES (64u << 20)
/* Frames (inlined calls + the function) asked of a symbol file per stored frame: above the
 * symbol files' own nesting limit (64), so the function itself is never cut off. */
#define SYMBOLIZER_MAX_INLINE_DEPTH 80

/*
 * Creates a symbolizer reading from `store` (borrowed; outlives it) whose cache holds at most
 * `max_entries` stored frames and about `max_bytes` bytes (0: the defaults). Without
 * symbolizer_repository_set, user frames are "basename+0xOFF". NULL when out of memory.
 */
struct symbolizer *symbolizer_new(struct store *store, size_t max_entries, size_t max_bytes);

/*
 * Frames named without a symbol file ("file+0xOFF") or from one without DWARF are looked up
 * again `ms` after they were cached (0, the default: kept until evicted or invalidated, which
 * is right when every file is installed through this process: the install invalidates them).
 * For replicas sharing a repository. Thread-safe.
 */
void symbolizer_recheck_set(struct symbolizer *sym, int64_t ms);

/* Frees it; accepts NULL. */
void symbolizer_free(struct symbolizer *sym);

/* Called (from any thread, must not block) when a frame needs a Build ID the repository lacks. */
typedef void (*symbolizer_missing_fn)(void *ctx, const struct sysom_build_id *id);

/*
 * Resolves user frames of ELF and content-hashed objects through `repo` (borrowed; outlives
 * the symbolizer); `missing` (optional) hears of Build IDs without a symbol file, e.g. to
 * fetch them from upstream debuginfod servers. Call before the symbolizer is shared between
 * threads.
 */
void symbolizer_repository_set(struct symbolizer *sym, struct symrepo *repo,
			       symbolizer_missing_fn missing, void *missing_ctx);

/*
 * Resolves the frame (store object id, offset) of a stack of kind `stack_kind` into *out
 * (release it). `leaf` is true for frame 0 of a stack (the interrupted instruction); other
 * frames are return addresses, so user frames are looked up at offset - 1 (the call), while
 * `offset` and `symbol_offset` still describe the return address.
 *   kernel and module frames: the nearest symbol at or below the offset when a next symbol
 *     bounds it; otherwise, and without a symbol table for the build ID, "[kernel]+0xOFF";
 *   ELF and content-hashed files: the function (demangled when mangled) and the calls inlined
 *     into it from the repository's symbol file; "basename+0xOFF" when the repository has no
 *     symbol file, the offset is in no executable segment or no function covers the address
 *     (never the name of a neighbour);
 *   anonymous memory "[anon]+0xADDR", unknown "[unknown]+0xADDR".
 * Thread-safe. Returns 0, -ENOENT (no such object) or a store error.
 */
int symbolizer_location_resolve(struct symbolizer *sym, uint8_t stack_kind, int64_t object,
				uint64_t offset, bool leaf, struct symbolized_location *out);

/* Frees what a location owns; accepts NULL. */
void symbolized_location_release(struct symbolized_location *loc);

/*
 * The root-side error frame of a stack that stopped for `stop_reason` (≠ 0), e.g.
 * "[truncated: depth limit]". Returns 0, -EINVAL for reason 0, or -ENOMEM.
 */
int symbolizer_stop_frame(uint8_t stop_reason, struct symbolized_frame *out);

/* Frees what a frame owns; accepts NULL. */
void symbolized_frame_release(struct symbolized_frame *f);

/* Forgets every cached frame (after a kernel symbol table was added). Thread-safe. */
void symbolizer_cache_clear(struct symbolizer *sym);

/*
 * Forgets the cached frames of objects with this Build ID (its bytes; after a file for it
 * was installed in the repository), including results being computed right now. Thread-safe.
 */
void symbolizer_build_id_invalidate(struct symbolizer *sym, const struct sysom_build_id *id);

/* A snapshot of the counters. Thread-safe. */
void symbolizer_stats_get(struct symbolizer *sym, struct symbolizer_stats *out);

#endif
