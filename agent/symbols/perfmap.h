/* SPDX-License-Identifier: Apache-2.0 */
/*
 * JIT code named from the process's perf map (`/tmp/perf-<pid>.map`, the format perf reads:
 * one "START SIZE NAME" line per compiled function, START and SIZE in hex), written by JITs
 * (CPython 3.12+ with `-X perf` or PYTHONPERFSUPPORT=1, the JVM's perf-map-agent, V8's
 * --perf-basic-prof, LuaJIT, .NET). Frames in anonymous executable memory would otherwise stay
 * "[anon]+0x7f…".
 *
 * The file is read from the process's own root (`<proc_root>/<tgid>/root/tmp/perf-<nspid>.map`,
 * the pid as the process sees it in its pid namespace), never through a symbolic link, only
 * when it is a regular file owned by the process's user or root (perf's own rule), at most
 * PERFMAP_MAX_BYTES; it is re-read when it changed (JITs append), at most once a second per
 * process. Bounded: PERFMAP_MAX_PROCESSES maps held (least recently used dropped), names cut at
 * PERFMAP_NAME_MAX bytes, PERFMAP_MAX_ENTRIES lines per map. The parser is pure and fuzzed
 * (tests/fuzz/fuzz_perfmap.c).
 */
#ifndef SYSOM_AGENT_SYMBOLS_PERFMAP_H
#define SYSOM_AGENT_SYMBOLS_PERFMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PERFMAP_MAX_BYTES (64u << 20)
#define PERFMAP_MAX_ENTRIES 1000000u
#define PERFMAP_NAME_MAX 255
#define PERFMAP_MAX_PROCESSES 64
#define PERFMAP_RECHECK_NS 1000000000ull

/* One function of a map. */
struct perfmap_entry {
	uint64_t start, size;
	uint32_t name;          /* offset into the table's names */
	uint32_t line;          /* its line in the file: a later line wins an overlap */
};

/* A parsed map: entries sorted by start (then line). */
struct perfmap_table {
	struct perfmap_entry *entries;
	size_t count;
	char *names;            /* NUL-terminated names, back to back */
	size_t names_len;
	uint64_t malformed;     /* lines skipped: not "HEX HEX NAME", size 0, overflow */
	bool truncated;         /* PERFMAP_MAX_ENTRIES reached: the rest was not read */
};

/* Parses `len` bytes of map text (need not end in a newline). 0 or -ENOMEM; `out` is emptied
 * first and must be freed with perfmap_table_free. */
int perfmap_parse(const char *text, size_t len, struct perfmap_table *out);
void perfmap_table_free(struct perfmap_table *t);

/* The function containing `addr` (the latest line among overlapping ones): true with its name
 * (owned by the table) and start. */
bool perfmap_table_find(const struct perfmap_table *t, uint64_t addr, const char **name,
			uint64_t *start);

struct perfmap_stats {
	uint64_t loads;         /* map files read (first reads and changes) */
	uint64_t refused;       /* files not read: not regular, a link, foreign owner, too big */
	uint64_t named;         /* lookups that found a function */
	uint64_t unnamed;       /* lookups in no function (or with no map) */
	uint32_t maps;          /* processes with a map held now */
};

struct perfmap_cache;

/* `proc_root`: "/proc" (copied). */
int perfmap_cache_new(const char *proc_root, struct perfmap_cache **out);
void perfmap_cache_free(struct perfmap_cache *c);

/*
 * The JIT function of process (`tgid`, `generation`) at `addr`: 1 with *name (valid until the
 * next call on the cache) and *start, 0 when its perf map has none (or it has no map), -ENOMEM.
 */
int perfmap_lookup(struct perfmap_cache *c, uint32_t tgid, uint32_t generation, uint64_t addr,
		   const char **name, uint64_t *start);

/* The process (this incarnation) is gone: its map is dropped. */
void perfmap_forget(struct perfmap_cache *c, uint32_t tgid, uint32_t generation);

void perfmap_stats_read(const struct perfmap_cache *c, struct perfmap_stats *out);

#endif
