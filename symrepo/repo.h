/* SPDX-License-Identifier: Apache-2.0 */
/* The Build-ID keyed symbol repository on disk: <root>/.build-id/xx/rest.{executable,debug,sym}
 * installed atomically, safe against concurrent writers and crashes.
 *
 * Layout (see docs/symbol-repository.md):
 *   <root>/.build-id/xx/rest.{executable,debug,sym}  GNU build IDs (debuginfod's layout)
 *   <root>/.file-hash/xx/rest.{executable,sym}        FILE_HASH identities (XXH3-128 of the
 *                       content; a tree of their own, as a 16-byte build ID would collide)
 *   <root>/.build-id/xx/rest.rebuild                  the .sym predates an installed file
 *   <root>/locks/<hex>.lock, <root>/locks/h-<hex>.lock  per-identity flock (transient)
 *   <root>/tmp/<instance>.lock + <root>/tmp/<instance>/  each open handle's temporary files
 */
#ifndef SYSOM_SYMREPO_REPO_H
#define SYSOM_SYMREPO_REPO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/elf_buildid.h"
#include "symrepo/symfile.h"

enum symrepo_kind {
	SYMREPO_EXECUTABLE = 0, /* the ELF as mapped by processes: <hex rest>.executable */
	SYMREPO_DEBUGINFO = 1,  /* its separate debug file: <hex rest>.debug */
	SYMREPO_SYMBOLS = 2,    /* the compact symbol file built from them: <hex rest>.sym */
};

struct symrepo_options {
	const char *root;          /* repository directory (created 0750 if missing) */
	uint32_t max_open_files;   /* symbol files kept mapped (LRU), default 256 */
	bool inline_frames;        /* passed to the writer (default true) */
	bool line_table;           /* passed to the writer (default true) */
	uint64_t writer_memory_budget; /* passed to the writer (0: its default) */
};

struct symrepo;

/* Defaults for `root`: 256 open files, inline frames and line table on, the writer's budget.
 * (A zeroed struct means inline_frames = line_table = false: start from this instead.) */
void symrepo_options_default(struct symrepo_options *opts, const char *root);

/*
 * Opens (creating) the repository; removes temporary files left by crashed processes (those
 * of processes that still have the repository open are left alone). Returns 0, -EINVAL
 * (options), -ENAMETOOLONG or -errno. `*out` is written only on success.
 */
int symrepo_open(const struct symrepo_options *opts, struct symrepo **out);

/* Closes the repository, its cached symbol files and its temporary directory; accepts NULL.
 * Every acquired handle must have been released. */
void symrepo_close(struct symrepo *r);

/* Path of a repository file (it may not exist). 0 or -ENAMETOOLONG. */
int symrepo_path(const struct symrepo *r, const struct sysom_build_id *id, enum symrepo_kind kind,
		 char *out, size_t outlen);

/* True when the file exists (complete: files appear only by atomic rename). */
bool symrepo_has(const struct symrepo *r, const struct sysom_build_id *id, enum symrepo_kind kind);

/*
 * Installs `tmp_path` (a complete file on the same filesystem, e.g. from symrepo_tmp_path) as
 * the file of (id, kind): checks that its build ID (or, for FILE_HASH identities, its content
 * hash) matches `id`, fsyncs, renames under a per-Build-ID lock, and (for executables and
 * debug files) (re)builds the symbol file from what the repository now holds. Returns 0,
 * -EEXIST (already installed: tmp_path is removed), -SYSOM_ECORRUPT (identity mismatch:
 * removed), or -errno. Safe when several threads or processes install the same Build ID.
 * Details: `tmp_path` must lie in the repository's temporary directory (else -EINVAL, and it
 * is left alone); otherwise it is consumed on every return (renamed into place or removed).
 * A 0 return means the file is installed; when its symbol file could not be built (corrupt
 * DWARF, say) `err` says why (it is empty otherwise) and symrepo_gc retries. Symbol files
 * are built only once the executable is there: a separate debug file keeps no usable file
 * offsets in its PT_LOAD headers (objcopy --only-keep-debug zeroes them), so a debug file
 * alone waits for its executable. Debug files need GNU build IDs (FILE_HASH: -EINVAL).
 * Installing SYMBOLS checks the file (symfile_verify, build ID in its header).
 */
int symrepo_install(struct symrepo *r, const struct sysom_build_id *id, enum symrepo_kind kind,
		    const char *tmp_path, char *err, size_t errlen);

/* A fresh temporary path inside the repository (same filesystem as the final files). */
int symrepo_tmp_path(const struct symrepo *r, char *out, size_t outlen);

/*
 * The mapped symbol file of `id` from the LRU cache (opening it if needed), or NULL when the
 * repository has none (*err set to -ENOENT) or it is corrupt. The handle stays valid until
 * symrepo_symbols_release; thread-safe.
 */
struct symfile *symrepo_symbols_acquire(struct symrepo *r, const struct sysom_build_id *id,
					int *err);
/* Gives back a handle from symrepo_symbols_acquire; accepts NULL. */
void symrepo_symbols_release(struct symrepo *r, struct symfile *f);

struct symrepo_cache_stats {
	uint32_t cached;    /* handles held by the LRU (at most max_open_files) */
	uint32_t detached;  /* evicted or replaced while acquired: closed at their last release */
	uint32_t acquired;  /* handles with at least one outstanding acquire */
	uint64_t hits, misses, evictions;
};

/* A snapshot of the handle cache's counters. */
void symrepo_cache_stats_get(struct symrepo *r, struct symrepo_cache_stats *out);

/* Adds an ELF (and optionally its debug file) from local paths: copy + install + build.
 * Returns 0 when something was installed or (re)built, -EEXIST when all was already there,
 * -SYSOM_ECORRUPT when the debug file belongs to another build, or -errno. */
int symrepo_add_files(struct symrepo *r, const char *executable, const char *debug_file,
		      struct sysom_build_id *id_out, char *err, size_t errlen);

/* What symrepo_add_files_ex did. */
struct symrepo_add_result {
	struct sysom_build_id id;
	bool executable_installed;    /* false: it was already there */
	bool debug_installed;         /* false: none given, or already there */
	bool symbols_built;           /* the symbol file was (re)built: `stats` are valid */
	struct symfile_write_stats stats;
};

/* symrepo_add_files, also saying what it did (`out` written on 0 and on -EEXIST). */
int symrepo_add_files_ex(struct symrepo *r, const char *executable, const char *debug_file,
			 struct symrepo_add_result *out, char *err, size_t errlen);

/*
 * Checks one file of `id`: an executable's or debug file's identity matches its name; a
 * symbol file opens, passes symfile_verify and names `id`, and no rebuild is pending (an
 * executable or debug file was installed after it and a crash interrupted the rebuild).
 * Returns 0, -ENOENT (no such file), -SYSOM_ECORRUPT or -ESTALE (rebuild pending) with `err`
 * saying what is wrong, or -errno.
 */
int symrepo_check(struct symrepo *r, const struct sysom_build_id *id, enum symrepo_kind kind,
		  char *err, size_t errlen);

struct symrepo_gc_stats {
	uint64_t tmp_removed;      /* temporary files of interrupted writes */
	uint64_t symbols_rebuilt;  /* symbol files missing or corrupt, rebuilt from the ELF */
	uint64_t corrupt_removed;  /* files whose identity no longer matches their name */
	uint64_t build_ids;        /* Build IDs held */
	uint64_t symbols_failed;   /* symbol files that could not be (re)built (see `err`) */
};

/*
 * Walks the repository: removes leftovers, rebuilds missing/corrupt symbol files. Each Build
 * ID is handled under its lock, so gc may run beside installs (also from another process).
 * Returns 0 (failures to rebuild are counted, the first one described in `err`) or -errno.
 */
int symrepo_gc(struct symrepo *r, struct symrepo_gc_stats *stats, char *err, size_t errlen);

/* Calls `fn` for every Build ID held (with which kinds exist); stops on a negative return,
 * which it returns; 0 after the last. Build IDs installed during the walk may be missed. */
typedef int (*symrepo_visit_fn)(void *ctx, const struct sysom_build_id *id, bool executable,
				bool debuginfo, bool symbols);
int symrepo_for_each(struct symrepo *r, symrepo_visit_fn fn, void *ctx);

#endif
