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
 * GPU clock (issue 22, "GPU-side stage time"). On a real GPU ncclSend/ncclRecv return once
 * enqueued, so the host busy time above is the stage's host time, not its kernels': a stage
 * slow on the GPU alone is invisible to it. Where GPU timing exists for a stage's process
 * (CUPTI kernel rows: pipeline_gpu_compute_add; the NCCL profiler plugin's Send/Recv rows:
 * pipeline_gpu_p2p_add) the stage is also judged on its GPU compute per microbatch: the GPU
 * time of its process's non-NCCL kernels (pipeline_kernel_is_nccl) over the GPU rows' range,
 * divided by its "closing" operations (the same ones as the host busy time) over the same
 * range: the plugin's count of them, matched by (process, rank, closing op, the peers its
 * calls name) in exactly one of the plugin's communicators; where the process has no
 * Send/Recv plugin rows at all and the caller says the calls cover that range
 * (pipeline_params.calls_complete), its closing calls. The same median + k·MAD test, per
 * communicator, over the stages with GPU timing (at least PIPELINE_MIN_SAMPLES microbatches),
 * when at least two have it. A stage is slow when its host or its GPU verdict says so
 * (host_slow, gpu_slow). Per link the receiver's mean Recv kernel time from the plugin
 * (gpu_transfer_ns): shown, not judged (on the GPU a Recv kernel also waits for its sender).
 *
 * Bounded: at most PIPELINE_MAX_CALLS calls are kept (more are counted as dropped), and the
 * stage and link lists are bounded by them; at most PIPELINE_MAX_GPU_ROWS GPU rows of each
 * kind (more: counted, and no GPU verdict). GPU sums saturate; a process whose sum saturated,
 * or a row that contradicts itself (time without a count, more timed than counted), is counted
 * as invalid and its stage gets no GPU timing. Pure computation: unit-tested, no store.
 */
#ifndef SYSOM_SERVER_ANALYSIS_PIPELINE_H
#define SYSOM_SERVER_ANALYSIS_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PIPELINE_MAX_CALLS 262144u
#define PIPELINE_MIN_SAMPLES 8
#define PIPELINE_EXACT_LOO 256
#define PIPELINE_MAX_GPU_ROWS 65536u

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
	bool calls_complete;    /* the calls are all of the GPU rows' range (none left out by a
				 * limit): a stage's calls may divide its GPU time where the plugin
				 * gave no count */
};

/* GPU compute of one process: its non-NCCL kernels over the GPU rows' range (rows of one
 * process added several times are summed). A stage's process is its calls' (job_rank, pid). */
struct pipeline_gpu_compute {
	int32_t job_rank;       /* with pid, the process (pids repeat across nodes); -1 unknown */
	uint32_t pid;
	uint64_t kernels;       /* executions */
	uint64_t kernel_ns;     /* their GPU time */
};

/* One NCCL profiler plugin row of a Send or Recv (summed like the above per key). */
struct pipeline_gpu_p2p {
	int32_t job_rank;       /* as above */
	uint32_t pid;
	uint64_t comm_id;       /* the plugin's communicator id (commHash, not the pipeline's key) */
	int32_t rank, peer;     /* ranks in that communicator */
	uint8_t op;             /* SYSOM_NCCL_SEND or SYSOM_NCCL_RECV */
	uint64_t count;         /* operations */
	uint64_t kernel_timed;  /* of which timed on the GPU, <= count */
	uint64_t kernel_ns;     /* their GPU time */
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
	bool judged;
	bool host_slow;         /* the host verdict (busy_ns) */
	/* GPU clock; gpu_* meaningless unless gpu_timed. */
	bool gpu_timed;
	uint64_t gpu_microbatches; /* closing operations in the GPU rows' range (the divisor) */
	double gpu_busy_ns;     /* non-NCCL kernel time per microbatch */
	double gpu_excess_ns, gpu_z;
	bool gpu_judged;        /* with >= 2 timed stages of at least PIPELINE_MIN_SAMPLES */
	bool gpu_slow;
	bool slow;              /* host_slow || gpu_slow */
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
	bool gpu_timed;         /* the receiver's plugin timed Recv kernels of this link */
	uint64_t gpu_transfers; /* those timed */
	double gpu_transfer_ns; /* their mean GPU time (includes waiting for the sender) */
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
	size_t gpu_stages;      /* stages with GPU timing */
	size_t gpu_slow_stages; /* of the slow stages, those the GPU verdict named */
	uint64_t gpu_invalid;   /* GPU rows or processes left out as contradictory or saturated */
	uint64_t gpu_ambiguous; /* stages whose closing rows matched several plugin communicators */
	bool gpu_incomplete;    /* the GPU rows were cut short (pipeline_gpu_incomplete): none used */
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

/* Adds GPU rows (copied; summed with earlier rows of the same key, saturating). 0, or
 * -ENOMEM; contradictory rows are counted as invalid, rows beyond PIPELINE_MAX_GPU_ROWS keys
 * make the GPU rows incomplete. */
int pipeline_gpu_compute_add(struct pipeline *pl, const struct pipeline_gpu_compute *g);
int pipeline_gpu_p2p_add(struct pipeline *pl, const struct pipeline_gpu_p2p *g);

/* The GPU rows read were cut short by a limit: none are used (result.gpu_incomplete). */
void pipeline_gpu_incomplete(struct pipeline *pl);

/* Whether a kernel name is NCCL's own (ncclKernel_*, ncclDevKernel_*, also mangled as
 * _Z<n>ncclDevKernel_...): its time is communication, not the stage's compute. */
bool pipeline_kernel_is_nccl(const char *name);

#endif
