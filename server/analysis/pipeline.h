/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Pipeline stragglers: point-to-point (ncclSend/ncclRecv) calls of a job paired across ranks
 * and the slow stage or the slow link named (issue 22; docs/architecture.md "Pipeline
 * stragglers").
 *
 * Pairing. A Send record carries (comm, rank = A, peer = B, seq = k), the matching Recv
 * (comm, rank = B, peer = A, seq = k): the agent counts Send/Recv sequence numbers per peer
 * (docs/wire-format.md, NCCL_CALLS), so the k-th send from A to B is the k-th receive on B
 * from A. A key with exactly one send and one receive is a transfer; a key with one side only
 * is unmatched (its partner outside the window, or its rank not traced), one with several
 * calls of a side is a duplicate (counted, not used). Matching is by equality of the
 * sequence number, so a counter that wraps is matched like any other value; order in time
 * comes from the timestamps.
 *
 * Per stage (a rank of a communicator that makes point-to-point calls; its stage number is
 * its rank in that communicator, as in a pipeline-parallel group): its busy time per
 * microbatch, from its own clock only: the time outside point-to-point calls between two
 * consecutive "closing" calls (its sends; a rank that never sends: its receives). For a middle
 * stage that is receive completion -> send entry (its compute); waiting inside Recv for a
 * slower upstream, or inside Send for a slower downstream, does not count. The median over
 * its microbatches (robust to pauses between windows).
 *
 * Per link (comm, A -> B): per transfer the receiver's wait on the sender,
 * max(0, send entry - recv entry), and the transfer time, recv exit - max(send entry, recv
 * entry): the time from both sides being ready until the data was in. These compare two
 * ranks' clocks (exact on one node; with NTP between nodes, good to its offset): they name a
 * slow link, the stage verdict does not depend on them.
 *
 * Verdicts, per communicator, like the collective straggler test (straggler.h): a stage is
 * slow when its busy time exceeds the median of the other stages' by more than k times their
 * robust scale max(1.4826 MAD, scale_floor) and by at least min_excess; a link is slow by the
 * same test on its median transfer time against the other links'. Leave-one-out exactly up to
 * PIPELINE_EXACT_LOO stages or links per communicator, from all of them above. Stages and
 * links with fewer than PIPELINE_MIN_SAMPLES microbatches / transfers are listed, not judged.
 *
 * Bounded: at most PIPELINE_MAX_CALLS calls are kept (more are counted as dropped), and the
 * stage and link lists are bounded by them. Pure computation: unit-tested, no store.
 */
#ifndef SYSOM_SERVER_ANALYSIS_PIPELINE_H
#define SYSOM_SERVER_ANALYSIS_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PIPELINE_MAX_CALLS 262144u
#define PIPELINE_MIN_SAMPLES 8
#define PIPELINE_EXACT_LOO 256

/* One Send or Recv call. */
struct pipeline_call {
	uint64_t comm;          /* communicator key, != 0 */
	uint64_t seq;           /* per (process, comm, op, peer) */
	int64_t entry_ns, exit_ns;
	int32_t rank;           /* the caller's rank in the communicator, >= 0 */
	int32_t peer;           /* the other side's rank, >= 0, != rank */
	int32_t job_rank;       /* the caller's rank in the job, -1 unknown */
	uint32_t pid;
	uint8_t op;             /* SYSOM_NCCL_SEND or SYSOM_NCCL_RECV */
};

struct pipeline_params {
	double k;
	uint64_t min_excess_ns;
	uint64_t scale_floor_ns;
};

struct pipeline_stage {
	uint64_t comm;
	int32_t rank, job_rank; /* the stage number is `rank` */
	uint32_t pid;
	uint64_t sends, recvs;
	uint64_t microbatches;  /* busy-time samples */
	double busy_ns;         /* median busy time per microbatch */
	double recv_wait_ns;    /* median time inside its receives (waiting for upstream) */
	double excess_ns, z;    /* against the other stages of the communicator */
	bool judged, slow;
};

struct pipeline_link {
	uint64_t comm;
	int32_t src, dst;       /* ranks in the communicator */
	int32_t src_job_rank, dst_job_rank;
	uint64_t transfers;
	double wait_ns;         /* mean receiver wait on the sender */
	double transfer_ns;     /* median transfer time */
	double excess_ns, z;
	bool judged, slow;
};

struct pipeline_result {
	uint64_t calls;         /* kept and valid */
	uint64_t invalid;       /* not a Send/Recv, rank or peer out of range, exit < entry */
	uint64_t dropped;       /* over PIPELINE_MAX_CALLS */
	uint64_t transfers, unmatched_sends, unmatched_recvs, duplicates;
	struct pipeline_stage *stages; /* owned, by (comm, rank) */
	size_t nstages;
	struct pipeline_link *links;   /* owned, by (comm, src, dst) */
	size_t nlinks;
	size_t slow_stages, slow_links;
};

struct pipeline;

int pipeline_new(struct pipeline **out);
void pipeline_free(struct pipeline *pl);

/* Adds one call (copied). 0, or -ENOMEM; invalid and over-limit calls are counted, not kept. */
int pipeline_add(struct pipeline *pl, const struct pipeline_call *c);

/* Pairs and judges what was added (the calls are reordered). *out owned by the caller: free
 * with pipeline_result_free. 0, -EINVAL, -ENOMEM. */
int pipeline_analyse(struct pipeline *pl, const struct pipeline_params *p,
		     struct pipeline_result *out);

void pipeline_result_free(struct pipeline_result *r);

#endif
