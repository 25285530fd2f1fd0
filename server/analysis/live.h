/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The monitor's in-memory collective instances: what makes its analysis incremental.
 * Point-to-point calls are held the same way per link (communicator, sender, receiver), for
 * the hang detector only: a receive that waits for a send that never comes is a hang.
 *
 * Every stored batch's NCCL collective calls are folded in as they arrive (live_batch_add):
 * per (job, communicator, op) a ring of the last W sequence numbers holds each rank's entry
 * time, tagged with the sequence number it belongs to, so calls may arrive in any order and
 * from any node, and a late batch fills its slots when it comes. An evaluation reads the
 * latest W instances every rank has entered straight from memory (live_source), in the order
 * the store would give them: its cost is O(ranks x W) per communicator and does not depend on
 * how long the job has run or how many rows the store holds.
 *
 * Memory is bounded: at most `max_cells` (rank, slot) cells over every group, 16 bytes each; a
 * group too large for the full window gets a shorter one (down to DIAGNOSIS_MIN_WINDOW), then
 * is refused (counted; the monitor reads that job from the store instead).
 *
 * Not thread-safe: the monitor serialises calls under its lock.
 */
#ifndef SYSOM_SERVER_ANALYSIS_LIVE_H
#define SYSOM_SERVER_ANALYSIS_LIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/wire.h"
#include "server/analysis/diagnosis.h"

#define LIVE_DEFAULT_MAX_CELLS (1u << 23) /* 128 MiB of entries and tags */
#define LIVE_MAX_LINKS_PER_JOB 512        /* point-to-point links held per job */

struct live;

int live_new(size_t max_cells, struct live **out);
void live_free(struct live *l);

struct live_add_stats {
	uint64_t calls;        /* collective calls folded in */
	uint64_t unknown_size; /* calls of communicators whose size no record gave: skipped */
	uint64_t refused;      /* calls of groups over the memory budget: skipped */
	uint64_t stale;        /* calls older than their group's window: skipped */
	uint64_t p2p_calls;    /* Send/Recv calls folded into links */
	uint64_t links_refused; /* Send/Recv calls of links over LIVE_MAX_LINKS_PER_JOB: skipped */
};

/*
 * Folds the batch's collective calls into the groups of their jobs; `window_of(arg, job)`
 * gives a job's window W (a changed W rebuilds its groups), asked once per job of the batch.
 * -ENOMEM leaves what was added.
 */
int live_batch_add(struct live *l, const struct sysom_batch *b,
		   uint32_t (*window_of)(void *arg, const char *job), void *arg,
		   struct live_add_stats *st);

/*
 * A diagnosis_source_fn over the live instances (arg: struct live): the latest complete
 * instances of scope->job (and scope->comm), those whose earliest entry is in the scope's
 * range. -ENOENT when the job has no live group or one of its groups was refused (the caller
 * reads the store instead).
 */
int live_source(void *arg, const struct diagnosis_scope *scope, store_collective_fn fn,
		void *fn_arg);

/* One rank of a group as the hang detector reads it. */
struct live_rank_view {
	uint64_t top;           /* highest sequence number entered + 1, 0: none */
	int64_t last_entry_ns;  /* entry time of that newest call (0: not in the window) */
	bool in_flight;         /* the newest call had not returned when its agent last sealed */
	uint32_t pid;
	const char *host;       /* borrowed; "" unknown */
};

/* A (communicator, op) group's progress, or a point-to-point link's: its instances are the
 * transfers (the k-th Send of `src` to `dst` and the k-th Recv of `dst` from `src`), its rank 0
 * the sender and rank 1 the receiver. */
struct live_group_view {
	uint64_t comm;
	uint8_t op;             /* SYSOM_NCCL_SEND for a link */
	bool link;
	int32_t src, dst;       /* a link's ranks in the communicator (-1 for a collective) */
	int32_t nranks;
	const struct live_rank_view *ranks; /* [nranks], borrowed for the callback */
	uint64_t pending_seq;   /* the lowest top: the first instance some rank has not entered */
	int64_t pending_t0_ns;  /* the earliest entry into it by the ranks that did (0: none did) */
	int64_t interval_ns;    /* median spacing of the window's complete instances (0: < 2) */
};

typedef int (*live_group_fn)(void *arg, const struct live_group_view *g);

/* Calls `fn` for every group of `job` held in memory (refused ones are skipped); stops at
 * the first non-zero return and returns it; -ENOMEM. */
int live_job_groups(const struct live *l, const char *job, live_group_fn fn, void *arg);

/* Calls `fn` for every process of `job` whose newest call of some group had not returned when
 * its agent last sealed (inside NCCL now), without building group views. */
int live_job_in_flight(const struct live *l, const char *job,
		       int (*fn)(void *arg, const char *host, uint32_t pid), void *arg);

/* Forgets a job's groups. */
void live_job_drop(struct live *l, const char *job);

/* Cells allocated over every group. */
size_t live_cells(const struct live *l);

#endif
