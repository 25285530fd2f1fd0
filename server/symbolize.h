/* SPDX-License-Identifier: Apache-2.0 */
/* Frame → display name: kernel symbols from the store, user frames by object and offset,
 * with a bounded, thread-safe LRU cache per (object, offset). */
#ifndef SYSOM_SERVER_SYMBOLIZE_H
#define SYSOM_SERVER_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire.h"
#include "server/store/store.h"

enum symbolized_kind {
	SYMBOLIZED_USER,
	SYMBOLIZED_KERNEL,
	SYMBOLIZED_ERROR, /* not a frame: why the unwind stopped ("[truncated: depth limit]") */
};

/* A frame ready to display. Strings are owned (symbolized_frame_release). */
struct symbolized_frame {
	enum symbolized_kind kind;
	char *name;    /* "do_syscall_64", "libc.so.6+0x29d90", "[kernel]+0x1234", "[anon]+0x7f00..." */
	char *object;  /* object name: full path, "[kernel.kallsyms]", module; "" for error frames */
	char build_id[2 * SYSOM_BUILD_ID_MAX + 1]; /* lower-case hex; "" when the object has none */
	uint64_t offset;        /* the frame's offset in its object */
	bool has_symbol_offset; /* resolved to a symbol: */
	uint64_t symbol_offset; /* offset - symbol start (rendered "+0x5c" in JSON) */
};

struct symbolizer;

/* Counters of a symbolizer's cache (for /metrics). */
struct symbolizer_stats {
	uint64_t hits, misses;
	uint64_t entries, bytes;
};

#define SYMBOLIZER_DEFAULT_ENTRIES 65536
#define SYMBOLIZER_DEFAULT_BYTES (64u << 20)

/*
 * Creates a symbolizer reading from `store` (borrowed; outlives it) whose cache holds at most
 * `max_entries` frames and about `max_bytes` bytes (0: the defaults). NULL when out of memory.
 */
struct symbolizer *symbolizer_new(struct store *store, size_t max_entries, size_t max_bytes);

/* Frees it; accepts NULL. */
void symbolizer_free(struct symbolizer *sym);

/*
 * Resolves the frame (store object id, offset) of a stack of kind `stack_kind` into *out
 * (release it). Kernel and kernel-module frames take the nearest symbol at or below the
 * offset when a next symbol bounds it; otherwise, and without a symbol table for the object's
 * build ID, "[kernel]+0xOFF". Frames of ELF files (until the symbol repository lands) are
 * "basename+0xOFF", anonymous memory "[anon]+0xADDR", unknown "[unknown]+0xADDR". Thread-safe.
 * Returns 0, -ENOENT (no such object) or a store error.
 */
int symbolizer_frame_resolve(struct symbolizer *sym, uint8_t stack_kind, int64_t object,
			     uint64_t offset, struct symbolized_frame *out);

/*
 * The root-side error frame of a stack that stopped for `stop_reason` (≠ 0), e.g.
 * "[truncated: depth limit]". Returns 0, -EINVAL for reason 0, or -ENOMEM.
 */
int symbolizer_stop_frame(uint8_t stop_reason, struct symbolized_frame *out);

/* Frees what a frame owns; accepts NULL. */
void symbolized_frame_release(struct symbolized_frame *f);

/* Forgets every cached frame (after a symbol table was added). Thread-safe. */
void symbolizer_cache_clear(struct symbolizer *sym);

/* A snapshot of the cache counters. Thread-safe. */
void symbolizer_stats_get(struct symbolizer *sym, struct symbolizer_stats *out);

#endif
