/* SPDX-License-Identifier: Apache-2.0 */
/* Parser for /proc/<pid>/maps (pure functions, fuzzed) and a bounded reader. */
#ifndef SYSOM_AGENT_NODE_PROCMAPS_H
#define SYSOM_AGENT_NODE_PROCMAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROCMAPS_PATH_MAX 4096

/* One line of /proc/<pid>/maps. */
struct procmaps_entry {
	uint64_t start, end;   /* [start, end) */
	uint64_t offset;       /* file offset of `start` */
	uint32_t dev_major, dev_minor;
	uint64_t inode;
	bool readable, writable, executable, shared;
	bool deleted;          /* path ended in " (deleted)" (suffix stripped from `path`) */
	/* Pathname column: "" for anonymous mappings, "[vdso]", "[heap]", "[anon:name]",
	 * or a file path (which may contain spaces). NUL-terminated, truncated to fit. */
	char path[PROCMAPS_PATH_MAX];
};

/*
 * Parses one line (without or with its trailing '\n'; `len` bytes, not NUL-terminated).
 * Returns 0 or -SYSOM_ECORRUPT for anything malformed (bad hex, start >= end, missing
 * fields, bad permission string).
 */
int procmaps_parse_line(const char *line, size_t len, struct procmaps_entry *out);

/* Called per parsed entry; a negative return stops the walk and is returned. */
typedef int (*procmaps_visit_fn)(void *ctx, const struct procmaps_entry *entry);

/*
 * Reads /proc/<pid>/maps (or `path` when non-NULL, for tests) and calls `visit` for each
 * entry, or only executable ones when `executable_only`. At most `max_entries` entries are
 * visited (-SYSOM_ELIMIT beyond, after visiting them). Returns the number visited, -ESRCH
 * when the process is gone, or another negative errno. Malformed lines are skipped and
 * counted in *malformed (optional).
 * The file is streamed with O(1) memory: lines longer than 4 * PROCMAPS_PATH_MAX + 256 bytes
 * count as malformed, and more than 1 GiB read gives -SYSOM_ELIMIT. `pid` must be > 0 when
 * `path` is NULL and `visit` must be set (else -EINVAL). *malformed is written whenever the
 * file was opened, also when the walk ends early (limit, visitor, read error). `entry` is
 * only valid during the call to `visit`.
 */
int procmaps_read(int pid, const char *path, bool executable_only, uint32_t max_entries,
		  procmaps_visit_fn visit, void *ctx, uint32_t *malformed);

/*
 * Calls fn(arg, pid) for every process directory of `proc_root` ("/proc", or a test's fake
 * tree): names that are whole decimal numbers in [1, 2^32). Returns 0 or -errno of opendir.
 */
int procmaps_each_pid(const char *proc_root, void (*fn)(void *arg, uint32_t pid), void *arg);

#endif
