/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Hang detection: a communicator whose newest collective instance stays incomplete, or a
 * point-to-point link whose transfer does: a receive that waits for a send that never comes
 * (or a send for its receive). Among several waiting instances the detector names the one
 * whose missing ranks are not themselves waiting inside another NCCL call: in a pipeline
 * whose stage 1 stopped, stage 3 waits for stage 2, which waits in its receive from stage 1;
 * stage 1 is named.
 *
 * The monitor's in-memory groups (server/analysis/live.h) say, per (communicator, op), how far
 * each rank got: the highest sequence number it entered, and whether that call was still in
 * flight (inside NCCL) when its agent last sealed a batch. An instance some ranks entered and
 * others did not, older than the threshold max(floor, factor x the group's median instance
 * spacing) (EROICA's 5x rule with a floor), is a hang of the ranks that never entered; an
 * instance every rank entered and none returned is a hang of the whole communicator
 * ("all entered, none finished").
 *
 * Whether a missing rank is stuck or only unseen comes from the tracker, fed with every stored
 * batch: when each node last reported (and its usual spacing), and which processes each node
 * listed in its JOB_RANKS. A rank whose node stopped reporting (no batch for 3 x its spacing +
 * 5 s, at least 30 s; the spacing a decaying maximum of its batch gaps) is "agent lost", not hung; a rank whose node still reports but no longer lists its
 * process has exited; a rank whose node has not reported since the instance began is not
 * judged yet. A job whose processes are all gone has ended: no hang.
 *
 * Bounded: at most HANG_MAX_NODES nodes and HANG_MAX_PROCS processes over all jobs (the least
 * recently listed are forgotten). Not thread-safe: the monitor serialises calls under its lock.
 */
#ifndef SYSOM_SERVER_ANALYSIS_HANG_H
#define SYSOM_SERVER_ANALYSIS_HANG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/wire.h"
#include "server/analysis/live.h"

#define HANG_DEFAULT_FLOOR_MS 30000u /* no hang before an instance has waited this long */
#define HANG_DEFAULT_FACTOR 5.0      /* ... nor before this many of its usual spacings */
#define HANG_MAX_NODES 4096
#define HANG_MAX_PROCS 65536
#define HANG_MAX_NAMED 16            /* ranks named in one verdict (the count says how many) */
#define HANG_MAX_LOST 16             /* lost nodes named per job */
#define HANG_DEFAULT_BATCH_MS 30000  /* a node's spacing until two of its batches were seen */
#define HANG_LOST_SLACK_MS 5000
#define HANG_LOST_MIN_MS 30000      /* never lost after less silence than this */
#define HANG_HOST_MAX 128
#define HANG_K8S_NAME_MAX 254        /* namespace, pod name (253 bytes) */
#define HANG_CONTAINER_MAX 64        /* container name (a DNS label, 63 bytes) */
#define HANG_SLURM_STEP_MAX 16

struct hang_params {
	uint32_t floor_ms;
	double factor;
};

struct hang_tracker;

int hang_tracker_new(struct hang_tracker **out);
void hang_tracker_free(struct hang_tracker *t);

/* Notes a stored batch received at now_ms: its node reported, and listed these processes. */
int hang_tracker_note(struct hang_tracker *t, const struct sysom_batch *b, int64_t now_ms);

/* Forgets a job's processes. */
void hang_tracker_job_drop(struct hang_tracker *t, const char *job);

/* Whether `host` stopped reporting at now_ms; *last_ms gets its last batch (0: never seen). */
bool hang_node_lost(const struct hang_tracker *t, const char *host, int64_t now_ms,
		    int64_t *last_ms);

enum hang_rank_state {
	HANG_RANK_NOT_ENTERED, /* its node reported after the others started waiting: not there */
	HANG_RANK_IN_FLIGHT,   /* entered, not returned (every rank so: all entered, none finished) */
	HANG_RANK_EXITED,      /* its node still reports, its process is no longer listed */
	HANG_RANK_AGENT_LOST,  /* its node stopped reporting */
	HANG_RANK_UNSEEN,      /* its node has not reported since the instance began: not judged */
	HANG_RANK_IDLE,        /* a stall: it returned from its last collective and entered none */
};

/* "not entered", "in flight", "exited", "agent lost", "unseen", "between collectives". */
const char *hang_rank_state_name(enum hang_rank_state s);

/* Who a named rank's process belongs to (its wire IDENTITIES record, as the store keeps it);
 * filled by hang_rank_set_identity after the verdict, "" / 0 when unknown. */
struct hang_rank_identity {
	char pod_namespace[HANG_K8S_NAME_MAX], pod[HANG_K8S_NAME_MAX];
	char container[HANG_CONTAINER_MAX];
	uint64_t slurm_job;    /* 0 none */
	char slurm_step[HANG_SLURM_STEP_MAX];
};

struct hang_rank {
	int32_t rank;          /* job rank (JOB_RANKS), -1 unknown */
	int32_t comm_rank;
	uint32_t pid;
	char host[HANG_HOST_MAX];
	enum hang_rank_state state;
	bool entered_any;      /* it entered some instance of the group */
	uint64_t last_seq;     /* its newest instance (with entered_any) */
	int64_t last_entry_ms; /* when it entered that one (0: unknown) */
	int64_t listed_ms;     /* its agent last listed its process (0: never) */
	int64_t node_last_ms;  /* its node's last batch */
	struct hang_rank_identity identity;
};

enum hang_verdict {
	HANG_NONE,        /* every communicator progresses (or the job ended) */
	HANG_PENDING,     /* an instance waits, below the threshold or not yet judged */
	HANG_HUNG,        /* a hang: `ranks` names who the others wait for */
	HANG_AGENT_LOST,  /* an instance waits only for ranks whose agent stopped reporting */
	HANG_STALL,       /* no instance waits, yet none began on any communicator for longer than
			   * the threshold while the job's processes live and their agents report:
			   * every rank stopped between collectives (`ranks`: those of the group
			   * that began an instance last, state "between collectives") */
};

struct hang_lost_node {
	char host[HANG_HOST_MAX];
	int64_t last_ms;       /* its last batch */
	uint32_t nranks;       /* the job's processes it listed last */
	int32_t ranks[HANG_MAX_NAMED]; /* the first of them (job ranks) */
};

struct hang_result {
	enum hang_verdict verdict;
	/* The waiting instance (with HANG_HUNG, HANG_AGENT_LOST, HANG_PENDING). */
	uint64_t comm;
	uint8_t op;             /* SYSOM_NCCL_SEND for a link */
	bool link;              /* a point-to-point transfer: `seq` is the link's, ranks src, dst */
	int32_t src, dst;       /* the link's sender and receiver (communicator ranks) */
	bool behind;            /* every named rank is itself inside another NCCL call that waits:
				 * the cause is further on (chosen only when no other hang is) */
	uint64_t seq;
	int32_t nranks;        /* the communicator's size */
	int32_t entered;       /* ranks that entered the instance */
	bool all_entered;      /* every rank entered and none returned */
	int64_t since_ms;      /* the first rank entered it */
	int64_t waited_ms;
	int64_t threshold_ms;
	double interval_ms;    /* the group's median spacing (0 unknown) */
	uint32_t nmissing;     /* ranks named by the verdict (not entered / in flight ...) */
	struct hang_rank ranks[HANG_MAX_NAMED];
	size_t nnamed;
	/* The job's nodes that stopped reporting while they listed its processes. */
	struct hang_lost_node lost[HANG_MAX_LOST];
	size_t nlost;
	bool job_ended;        /* every process of the job seen is gone */
	int64_t next_check_ms; /* evaluate again at this time even without new data (0: no need) */
};

/* ---- why a rank is stuck: its cause class, from the evidence the server has ------------------ */

enum hang_cause_class {
	HANG_CAUSE_UNKNOWN,     /* not enough evidence (no thread rows, no stacks) */
	HANG_CAUSE_EXITED,      /* its process is gone (exit status: not known to the server) */
	HANG_CAUSE_AGENT_LOST,  /* its agent stopped reporting: nothing known */
	HANG_CAUSE_IN_NCCL,     /* inside the collective, waiting for peers (all entered) */
	HANG_CAUSE_FROZEN,      /* its main thread neither ran nor woke since the wait began, in
				 * a call that never returns (detail: where, when known) */
	HANG_CAUSE_STOPPED,     /* frozen, stopped: SIGSTOP (do_signal_stop) or ptrace
				 * (ptrace_stop): state T */
	HANG_CAUSE_SPINNING,    /* a thread keeps running on the CPU without reaching a collective */
	HANG_CAUSE_KERNEL_WAIT, /* blocked mostly in a kernel wait (I/O, filesystem, driver, D) */
	HANG_CAUSE_LOCK_WAIT,   /* sleeping mostly on a lock (futex, mutex, condition variable) */
	HANG_CAUSE_SLEEPING,    /* sleeping in user space outside NCCL (poll, sleep: a data loader,
				 * an input pipeline, a host-side wait) */
};

#define HANG_CAUSE_DETAIL_MAX 192
#define HANG_SPIN_MIN_NS 250000000ull /* a thread this long on CPU in the latest window spins */

struct hang_cause {
	enum hang_cause_class cls;
	char detail[HANG_CAUSE_DETAIL_MAX]; /* e.g. the top kernel frames it waits in */
};

/* "unknown", "exited", "agent lost", "in NCCL", "frozen", "stopped", "spinning",
 * "kernel wait", "lock wait", "sleeping". */
const char *hang_cause_name(enum hang_cause_class c);

/* ---- the report of a hang: the verdict plus what each named rank was doing ------------------ */

#define HANG_EVIDENCE_RANKS 4   /* ranks whose stacks and threads are looked up */
#define HANG_TOP_STACKS 3
#define HANG_TOP_THREADS 8

struct hang_stack {
	char *stack;            /* owned: folded, outermost first */
	uint64_t weight;        /* samples (on-CPU) or microseconds blocked (off-CPU) */
};

struct hang_thread {
	uint32_t tid;
	char comm[32];
	uint64_t oncpu_ns;      /* in its node's latest batch window (after the wait began) */
	uint64_t voluntary_switches, involuntary_switches;
};

struct hang_evidence {
	struct hang_rank rank;  /* copied from the result */
	int process_exists;     /* 1 listed by its agent, 0 gone, -1 unknown (agent lost) */
	uint64_t oncpu_samples; /* since shortly before the wait began */
	struct hang_stack oncpu[HANG_TOP_STACKS];
	size_t noncpu;
	bool offcpu_present;    /* the store had off-CPU data to look at */
	struct hang_stack offcpu[HANG_TOP_STACKS];
	size_t noffcpu;
	bool threads_present;   /* OS_THREADS rows were looked up */
	struct hang_thread threads[HANG_TOP_THREADS]; /* most on-CPU time first */
	size_t nthreads;
	uint32_t threads_total;
	int main_active;        /* its main thread (tid = pid) ran or switched in the latest
				 * window: 1; 0 no (no row, or an idle one, while its node
				 * reports thread rows); -1 unknown (its node reports none) */
	struct hang_cause cause; /* hang_classify's verdict over the above */
};

/*
 * The cause class of a named rank from its state and evidence (`ev` with the stacks and
 * threads filled; its `cause` is not read). In order: exited / agent lost / in flight from the
 * state; a thread with >= HANG_SPIN_MIN_NS on CPU in the latest window: spinning; threads
 * its main thread (tid = pid) neither ran nor switched in the latest window while its node
 * reports thread rows (`main_active` 0): frozen, and the heaviest off-CPU stack since the wait
 * (the agent delivers blocks in progress) says where: stopped (signal or ptrace stop frames),
 * a lock wait (a deadlock), a kernel wait, or frozen in that call; else the heaviest off-CPU
 * stack: a lock (futex, mutex, condition frames), a kernel wait (I/O, filesystem, block,
 * driver frames) or a sleep in user space; else, threads that ran a little and no
 * stacks: sleeping; nothing: unknown. `detail` names the top frames.
 */
void hang_classify(const struct hang_evidence *ev, struct hang_cause *out);

void hang_evidence_free(struct hang_evidence *e);

/*
 * Sets the identity of every rank `r` names with this job rank and pid (the process of a
 * job-rank row; a worker's row is not the rank's, the caller skips it). NULL strings are "";
 * longer ones are cut. Returns the number of ranks set.
 */
size_t hang_rank_set_identity(struct hang_result *r, int32_t rank, uint32_t pid,
			      const char *pod_namespace, const char *pod, const char *container,
			      uint64_t slurm_job, const char *slurm_step);

/*
 * A stall (HANG_STALL) in words for its summary: how long nothing began and the newest thing
 * that did — "no collective began on any communicator of the job for 42 s (threshold 30 s)
 * while its processes live and their agents report; last: AllReduce #20 of communicator
 * 0000000000001234", or, when that was a point-to-point transfer (a pipeline-parallel job),
 * "no collective or transfer began ...; last: transfer #20 from rank 2 to rank 3 of
 * communicator ...". snprintf's contract: writes at most len bytes, returns the full length.
 */
int hang_stall_describe(const struct hang_result *r, char *buf, size_t len);

/* Evaluates `job` over its live groups and the tracker at now_ms. 0 or -ENOMEM. */
int hang_evaluate(const struct hang_tracker *t, const struct live *l, const char *job,
		  const struct hang_params *p, int64_t now_ms, struct hang_result *out);

#endif
