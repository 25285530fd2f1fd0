/* SPDX-License-Identifier: Apache-2.0 */
/*
 * User side of the hybrid unwinder: compiles the unwind table of every file a sampled process
 * maps (once per Build ID, shared by all processes, dropped when none maps it any more) and
 * publishes each process's executable mappings to the BPF unwinder (bpf/unwind.h).
 */
#ifndef SYSOM_AGENT_SAMPLING_UNWINDER_H
#define SYSOM_AGENT_SAMPLING_UNWINDER_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/node/proctrack.h"
#include "agent/sampling/sampler.h"
#include "common/report.h"

struct unwinder_options {
	const char *proc_root;    /* "/proc" */
	uint64_t max_rows;        /* rows over all loaded tables, 8 bytes each (default 8 Mi) */
	uint32_t max_tables;      /* loaded tables (default 4096; the BPF map holds 8192) */
	uint64_t unused_grace_ns; /* a table no process maps is dropped after this (60 s) */
	/* Messages for the log (tables built, files that failed, over budget): the daemon logs them. */
	struct sysom_reporter report;
};

void unwinder_options_default(struct unwinder_options *opts);

/* Tables of at least this many rows (8 bytes each) are named in the log at info level. */
#define UNWINDER_LARGE_TABLE_ROWS (1u << 20)

struct unwinder_stats {
	uint32_t tables;            /* tables loaded in BPF */
	uint32_t files;             /* files known (with or without a table) */
	uint32_t processes;         /* processes published */
	uint32_t pending;           /* files whose table is still to be compiled */
	uint64_t rows;              /* rows loaded */
	uint64_t fdes;              /* FDEs behind the loaded rows */
	uint64_t builds;            /* tables compiled */
	uint64_t build_ns;          /* time spent compiling and loading them */
	uint64_t build_failures;    /* files whose CFI could not be read (frame pointers only) */
	uint64_t no_cfi;            /* files without any CFI (frame pointers only) */
	uint64_t over_budget;       /* tables not loaded: max_rows or max_tables reached */
	uint64_t no_room_retries;   /* such files tried again after tables were dropped */
	uint64_t tables_dropped;    /* tables dropped after no process mapped them */
	uint64_t publishes;         /* process mapping lists written to BPF */
	uint64_t publish_failures;  /* ... that the kernel refused (map full, no memory) */
	uint64_t mappings_dropped;  /* mappings beyond UNWIND_MAX_MAPPINGS per process */
};

struct unwinder;

/* Creates the unwinder over the sampler's maps. 0 or -ENOMEM / -EINVAL. */
int unwinder_new(const struct unwinder_options *opts, const struct sampler_unwind_maps *maps,
		 struct unwinder **out);

/* Drops every table and published process from BPF and frees; accepts NULL. */
void unwinder_free(struct unwinder *u);

/*
 * Publishes the current executable mappings of `proc` (after a /proc/<pid>/maps scan) at
 * once; files not seen before are queued for unwinder_work, and until their tables load
 * their frames are stepped by validated frame pointers. Returns 0 or -errno when the kernel
 * refused the process entry (counted; kernel frame-pointer stacks until the next scan).
 */
int unwinder_publish(struct unwinder *u, const struct pt_process *proc);

/*
 * Compiles and loads queued tables, newest first, until `budget_ns` has passed (at least one
 * file per call), then rewrites the BPF entries of the processes that map them. Keeps the
 * agent's loop responsive when a process with hundreds of new libraries appears. Returns
 * the number of files still queued (call again soon when non-zero).
 */
uint32_t unwinder_work(struct unwinder *u, uint64_t budget_ns);

/* The process is gone: withdraws its mappings (if still this generation's) and releases its
 * tables. */
void unwinder_forget(struct unwinder *u, const struct pt_process *proc);

/* Drops tables that no process has mapped for unused_grace_ns. */
/* Changes the row budget (SIGHUP). Raised: the files that found no room are built again by
 * unwinder_work. Lowered: applies to later loads; loaded tables stay. */
void unwinder_set_max_rows(struct unwinder *u, uint64_t max_rows);
void unwinder_sweep(struct unwinder *u, uint64_t now_ns);

void unwinder_stats_read(const struct unwinder *u, struct unwinder_stats *out);

/* What the unwinder holds for one file. */
struct unwinder_file_info {
	uint32_t file_id; /* 0: no table (no CFI, unreadable, over budget) */
	uint32_t nrows;
	uint32_t refs;    /* published processes mapping it */
	bool pending;     /* its table is still to be compiled (unwinder_work) */
};

/* 0 and *out for a known file, -ENOENT otherwise (never seen, or dropped). */
int unwinder_file_info(const struct unwinder *u, const struct sysom_build_id *id,
		       struct unwinder_file_info *out);

#endif
