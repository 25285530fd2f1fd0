/* SPDX-License-Identifier: Apache-2.0 */
/* Background fetches of executables and debug files from upstream debuginfod servers
 * (libdebuginfod) into the symbol repository, for Build IDs nobody uploaded. */
#ifndef SYSOM_SERVER_SYMBOLS_UPSTREAM_H
#define SYSOM_SERVER_SYMBOLS_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/elf_buildid.h"

struct symrepo;

#define UPSTREAM_DEFAULT_QUEUE 1024
#define UPSTREAM_DEFAULT_THREADS 2
#define UPSTREAM_DEFAULT_NEGATIVE_TTL_S 600
#define UPSTREAM_DEFAULT_NEGATIVE_SLOTS 16384

struct upstream_options {
	const char *urls;          /* space-separated debuginfod base URLs (required) */
	const char *cache_dir;     /* libdebuginfod's cache (DEBUGINFOD_CACHE_PATH; required) */
	uint64_t max_file_size;    /* DEBUGINFOD_MAXSIZE: larger files are not fetched (0: none) */
	uint32_t queue_max;        /* Build IDs waiting (default 1024); beyond: dropped, counted */
	uint32_t threads;          /* fetch threads, one libdebuginfod client each (default 2) */
	uint32_t negative_ttl_s;   /* how long a Build ID upstream lacks is not asked again (600) */
	uint32_t negative_slots;   /* remembered Build IDs (lossy table; default 16384) */
};

/* What a fetch did (for the event callback). */
struct upstream_result {
	bool executable;           /* an executable was installed (or already present) */
	bool debuginfo;            /* a debug file was installed (or already present) */
	int error;                 /* 0, or the first failure (-ENOENT: upstream lacks both) */
	char message[256];         /* why, when error != 0 */
};

/* What the fetcher tells its owner, on a fetch thread; neither may block. */
struct upstream_hooks {
	/* A file of `id` was just installed (e.g. forget cached frames of the Build ID). */
	void (*installed)(void *ctx, const struct sysom_build_id *id);
	/* A fetch ended (logging). */
	void (*done)(void *ctx, const struct sysom_build_id *id,
		     const struct upstream_result *result);
	void *ctx;
};

struct upstream_stats {
	uint64_t requested;        /* Build IDs queued */
	uint64_t dropped;          /* not queued: the queue was full */
	uint64_t fetched;          /* files installed from upstream */
	uint64_t not_found;        /* fetches where upstream had neither file */
	uint64_t failed;           /* fetches that failed otherwise (network, install) */
	uint64_t queued;           /* gauge: waiting now */
};

struct upstream;

/*
 * Starts the fetch threads. libdebuginfod reads its configuration from the environment only,
 * so this sets DEBUGINFOD_URLS, DEBUGINFOD_CACHE_PATH (created 0750) and DEBUGINFOD_MAXSIZE
 * in the process environment: call it before threads that read the environment run.
 * `repo` is borrowed and must outlive the fetcher; `hooks` (optional, copied) hear of
 * installations and finished fetches. Returns 0 or -errno with `err` saying why.
 */
int upstream_new(struct symrepo *repo, const struct upstream_options *opts,
		 const struct upstream_hooks *hooks, struct upstream **out, char *err,
		 size_t errlen);

/* Stops: aborts downloads in progress, joins the threads, frees. Accepts NULL. */
void upstream_free(struct upstream *u);

/*
 * Asks for the files of ELF Build ID `id` in the background; never blocks on the network.
 * Ignored when already queued or being fetched, when upstream lacked it within the negative
 * TTL, or for identities other than SYSOM_OBJECT_ELF. Thread-safe.
 */
void upstream_request(struct upstream *u, const struct sysom_build_id *id);

/*
 * Waits until nothing is queued or being fetched, at most `timeout_ms`. Returns 0 or
 * -ETIMEDOUT. For orderly shutdown and tests.
 */
int upstream_wait_idle(struct upstream *u, uint32_t timeout_ms);

/* A snapshot of the counters. Thread-safe. */
void upstream_stats_get(struct upstream *u, struct upstream_stats *out);

#endif
