/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cross-rank communicator identity from call sequences, for communicators whose init the
 * agent did not see (attached late, library layout unknown): each such communicator of each
 * process has a per-process "local" key, an unknown size, and sequence numbers counted from
 * whenever tracing began in that process. The ranks of one communicator still make the same
 * collectives in the same order (NCCL requires it), with the same op and size, and, being a
 * barrier, at about the same time. This module groups such call streams into communicators
 * and aligns their sequence numbers:
 *
 *   Two streams A and B match at offset d (A's call i is B's call i + d) when, over at least
 *   SEQMATCH_MIN_OVERLAP aligned calls, every (op, bytes) pair is equal, and d is the
 *   offset (within ±SEQMATCH_MAX_OFFSET) with the smallest median time difference (of the
 *   entries, or of the exits when those are closer: a blocking collective releases all its
 *   ranks together, so a straggler half a period late still aligns by exit), that
 *   median being under half of the next best offset's (an unambiguous alignment: a periodic
 *   sequence matches at every shift of its period by op and size alone; time decides) and
 *   under the stream's median call spacing.
 *   Streams join the first group whose first member they match (greedy, in input order).
 *
 * A group's size is its member count (ranks whose process was not traced at all are not
 * known to exist: documented as a limit); its ranks are assigned by the members' job rank
 * (unknown last), which is the true communicator rank for the world communicator and for
 * splits keyed by job rank. Streams that match nobody stay unmatched and are counted.
 * Pure computation: unit-tested, no store.
 */
#ifndef SYSOM_SERVER_ANALYSIS_SEQMATCH_H
#define SYSOM_SERVER_ANALYSIS_SEQMATCH_H

#include <stddef.h>
#include <stdint.h>

#define SEQMATCH_MIN_OVERLAP 4
#define SEQMATCH_MAX_OFFSET 64
#define SEQMATCH_MAX_STREAMS 4096      /* streams per run (more: the rest left unmatched) */
#define SEQMATCH_WINDOW 128            /* a stream's latest calls compared */

struct seqmatch_call {
	uint8_t op;
	uint64_t bytes;
	int64_t entry_ns;
	int64_t exit_ns;               /* 0: unknown (entry used) */
};

struct seqmatch_stream {
	int32_t job_rank;              /* the process's rank in the job, -1 unknown */
	const struct seqmatch_call *calls; /* by entry time ascending, borrowed */
	size_t ncalls;
	/* results */
	int32_t group;                 /* index of its group, -1 unmatched */
	int64_t seq_offset;            /* call i of the stream is the group's instance i + offset */
	int32_t rank;                  /* assigned rank in the group, -1 unmatched */
	int32_t nranks;                /* the group's size, 0 unmatched */
};

struct seqmatch_result {
	uint32_t groups;               /* groups of two or more streams */
	uint32_t unmatched;            /* streams in no group */
};

/*
 * Groups `n` streams (results written into them). 0, -EINVAL (NULL with n > 0), -ENOMEM.
 * Streams beyond SEQMATCH_MAX_STREAMS are left unmatched.
 */
int seqmatch_run(struct seqmatch_stream *s, size_t n, struct seqmatch_result *out);

/*
 * Offset d aligning B to A (A's call i is B's call i + d) by the rule above: 1 with *d set,
 * 0 when they do not match.
 */
int seqmatch_align(const struct seqmatch_stream *a, const struct seqmatch_stream *b,
		   int64_t *d);

#endif
