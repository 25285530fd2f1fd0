/* SPDX-License-Identifier: Apache-2.0 */
/* The Build-ID keyed symbol repository on disk: <root>/.build-id/xx/rest.{executable,debug,sym}
 * installed atomically, safe against concurrent writers and crashes. */
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

/* Opens (creating) the repository; removes temporary files left by crashes. 0 or -errno. */
int symrepo_open(const struct symrepo_options *opts, struct symrepo **out);
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
void symrepo_symbols_release(struct symrepo *r, struct symfile *f);

/* Adds an ELF (and optionally its debug file) from local paths: copy + install + build. */
int symrepo_add_files(struct symrepo *r, const char *executable, const char *debug_file,
		      struct sysom_build_id *id_out, char *err, size_t errlen);

struct symrepo_gc_stats {
	uint64_t tmp_removed;      /* temporary files of interrupted writes */
	uint64_t symbols_rebuilt;  /* symbol files missing or corrupt, rebuilt from the ELF */
	uint64_t corrupt_removed;  /* files whose identity no longer matches their name */
	uint64_t build_ids;        /* Build IDs held */
};

/* Walks the repository: removes leftovers, rebuilds missing/corrupt symbol files. */
int symrepo_gc(struct symrepo *r, struct symrepo_gc_stats *stats, char *err, size_t errlen);

/* Calls `fn` for every Build ID held (with which kinds exist); stops on a negative return. */
typedef int (*symrepo_visit_fn)(void *ctx, const struct sysom_build_id *id, bool executable,
				bool debuginfo, bool symbols);
int symrepo_for_each(struct symrepo *r, symrepo_visit_fn fn, void *ctx);

#endif
