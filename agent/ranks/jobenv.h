/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Training-job identity from a process's environment, with no configuration: the variables
 * torchrun, SLURM, Open MPI and PMI launchers set for every rank (/proc/<pid>/environ).
 */
#ifndef SYSOM_AGENT_RANKS_JOBENV_H
#define SYSOM_AGENT_RANKS_JOBENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/gpu/gpumap.h"

#define JOBENV_MAX_BYTES (1u << 20) /* environment bytes read per process */
#define JOBENV_VALUE_MAX 128        /* job id and master address kept (truncated beyond) */
#define JOBENV_MAX_RANKS (1u << 24) /* world sizes above this are rejected */

/* What the environment says about the process's place in a job; -1 / "" when unknown. */
struct job_identity {
	bool has_rank;                   /* a rank and world size were found and are consistent */
	char job_id[JOBENV_VALUE_MAX];   /* TORCHELASTIC_RUN_ID, SLURM_JOB_ID[.SLURM_STEP_ID],
					  * else "MASTER_ADDR:MASTER_PORT"; "" when none */
	const char *job_id_source;       /* the variable it came from (static), or NULL */
	int32_t rank, world_size;        /* RANK / SLURM_PROCID / OMPI_COMM_WORLD_RANK / PMI_RANK */
	int32_t local_rank, local_world_size;
	int32_t group_rank;              /* GROUP_RANK (torchrun's node rank) / SLURM_NODEID */
	char master_addr[JOBENV_VALUE_MAX];
	int32_t master_port;
	/* CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, for the rank's GPU (agent/gpu/gpumap.h);
	 * kept as written (not sanitised: only parsed, never sent). */
	struct gpumap_env gpu;
};

/*
 * Parses an environment block (NUL-separated NAME=VALUE entries, as in /proc/<pid>/environ;
 * the last entry may lack its NUL). Numbers must be plain decimal within range; a rank not
 * below its world size, or a local rank not below its local world size, leaves has_rank
 * false. Text values have control characters replaced (sysom_text_sanitize). Returns 0 (also when nothing
 * was found) or -EINVAL for a NULL block with a non-zero length.
 */
int jobenv_parse(const char *block, size_t len, struct job_identity *out);

/*
 * Reads and parses <proc_root>/<pid>/environ (at most JOBENV_MAX_BYTES). Returns 0, -ESRCH
 * when the process is gone, -EACCES, or another -errno.
 */
int jobenv_read(const char *proc_root, uint32_t pid, struct job_identity *out);

/* Ancestors looked at by jobenv_rank_process (a worker's worker is still the rank's). */
#define JOBENV_MAX_WORKER_DEPTH 8

/*
 * Whether process `pid` (whose identity `id` has a rank) is a worker of its rank: a descendant
 * of the rank's process running the same executable with the same job id, rank, world size and
 * local rank inherited from it (a PyTorch DataLoader worker: forked, or spawned by
 * multiprocessing with sys.executable; a launcher or a shell wrapper runs another executable).
 * Walks parents (<proc_root>/<pid>/stat, /exe, /environ) up to JOBENV_MAX_WORKER_DEPTH. Sets
 * `*rank_pid` to the oldest such ancestor, or 0 when `pid` is the rank's own process (also
 * when `id` has no rank or a parent cannot be read). Returns 0, or -ESRCH when `pid` is gone.
 */
int jobenv_rank_process(const char *proc_root, uint32_t pid, const struct job_identity *id,
			uint32_t *rank_pid);

/*
 * Recently seen rank processes, for the DataLoader workers jobenv_rank_process cannot place: a
 * worker whose rank exited before the agent first read it (the worker was reparented to init
 * or a subreaper: no parent of its executable and rank is left to walk to), or one reparented
 * while its rank lives. A record is a rank process's identity (job id, rank, world size, local
 * rank), pid, start time (clock ticks since boot, /proc/<pid>/stat field 22: a pid reused by
 * another process is another record), parent at the time, executable (hashed path) and, once
 * it exited, when. Bounded: at most `max` records (a new one replaces the exited record noted
 * longest ago, else the oldest record), and an exited rank is forgotten `max_age_ns` after its
 * exit was noted. Not thread-safe.
 */
struct jobenv_ranks;

#define JOBENV_RANKS_MAX 256                             /* records by default */
#define JOBENV_RANKS_MAX_AGE_NS (600ull * 1000000000ull) /* exited ranks kept 10 minutes */

/* Returns 0 and a new, empty memory in *out, -EINVAL (max 0) or -ENOMEM. */
int jobenv_ranks_new(uint32_t max, uint64_t max_age_ns, struct jobenv_ranks **out);

/* Frees the memory (NULL is fine). */
void jobenv_ranks_free(struct jobenv_ranks *r);

/* The records held (exited ones past their age included until the next note or lookup). */
uint32_t jobenv_ranks_count(const struct jobenv_ranks *r);

/*
 * Notes process `pid` of identity `id` (with a rank) as a rank's own process, alive at
 * `now_ns` (monotonic; ages are measured with it): reads its start time, parent and
 * executable from <proc_root>/<pid>/. A record with the same pid and start time is kept; one
 * with the same pid and an earlier start time is of an earlier process: marked exited no later
 * than this one's start. Returns 0, -EINVAL (no rank), -ESRCH (gone) or another -errno.
 */
int jobenv_ranks_note(struct jobenv_ranks *r, const char *proc_root, uint32_t pid,
		      const struct job_identity *id, uint64_t now_ns);

/*
 * Rank process `pid` exited at `exit_ticks` (clock ticks since boot, as start times are;
 * UINT64_MAX when unknown: the time the exit is noted, `now_ns`, only ages the record).
 * Marks the latest-started alive record of that pid; an earlier exit time noted stays.
 * Returns whether a record was marked.
 */
bool jobenv_ranks_exited(struct jobenv_ranks *r, uint32_t pid, uint64_t exit_ticks,
			 uint64_t now_ns);

/*
 * For process `pid` of identity `id` that jobenv_rank_process found no rank parent for: the
 * rank process it is a worker of, from the memory. A record matches when its identity is the
 * same (job id, rank, world size, local rank), its executable and cgroups are the same (a
 * worker forked by its rank shares them; two jobs naming no job in their environments, each
 * in its own pod or Slurm step, have the same identity there), it is another
 * process (pid or start time differ), it started no later than `pid` did, `pid` started while
 * it was alive (no later than its exit), and `pid`'s parent now is neither that rank nor that
 * rank's own parent (a rank restarted by its launcher, torchrun or Slurm, has the old rank's
 * parent; an orphaned worker has init or a subreaper) nor a process of the same identity (a
 * wrapper of another executable: jobenv_rank_process's rule stands). Of the matches, the one
 * started last.
 * Sets *rank_pid to its pid, or 0 when none matches (or `id` has no rank). Returns 0, or
 * -ESRCH when `pid` is gone.
 */
int jobenv_ranks_worker_of(struct jobenv_ranks *r, const char *proc_root, uint32_t pid,
			   const struct job_identity *id, uint64_t now_ns, uint32_t *rank_pid);

/*
 * The job a rank belongs to when its environment names none (`id->has_rank` with an empty
 * `id->job_id`), from who its cgroup says it belongs to:
 *   a Slurm job (`slurm_job` not 0)   "slurm-<job>[.<step>]"        job_id_source "slurm cgroup"
 *   else a Kubernetes pod             "<namespace>:<jobname>"       job_id_source "pod name"
 * where <jobname> is jobenv_pod_job_name of the pod name (not '/': a job id is a path segment
 * of the API, /api/v1/jobs/{job}; namespaces contain no ':'). Sets id->job_id and
 * id->job_id_source and returns 0; -ENOENT (id unchanged) when `id` has no rank, already has
 * a job id, or the cgroup names neither.
 */
int jobenv_job_from_cgroup(struct job_identity *id, uint64_t slurm_job, const char *slurm_step,
			   const char *pod_namespace, const char *pod_name);

/*
 * The name a training job's pods share: the pod name without its trailing per-pod segments.
 * Dash-separated segments are dropped from the end while they are decimal (replica, ordinal,
 * completion and JobSet indexes: "llama-worker-3", "train-2") or a 5-character suffix the
 * Kubernetes API server generates (only the letters and digits of its alphabet,
 * "bcdfghjklmnpqrstvwxz2456789": "train-2-x7k9p"); then one role segment ("master", "worker",
 * "launcher", "chief", "ps", "evaluator": the Kubeflow PyTorchJob/MPIJob/TFJob replica types)
 * is dropped. The first segment always stays. "llama-7b-worker-3" and "llama-7b-master-0"
 * both give "llama-7b". Writes at most out_size - 1 bytes (0), or -EINVAL for an empty name
 * or when it does not fit.
 */
int jobenv_pod_job_name(const char *pod_name, char *out, size_t out_size);

#endif
