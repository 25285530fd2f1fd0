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

#endif
