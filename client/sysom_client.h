/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libsysom-client: lets a training process (a rank) tell the local sysom agent who it is,
 * over the agent's registration socket (docs/registration-protocol.md). Depends on libc only;
 * safe to load into any process. Every call is thread-safe, never raises SIGPIPE and never
 * blocks longer than about 100 ms.
 */
#ifndef SYSOM_CLIENT_H
#define SYSOM_CLIENT_H

#ifdef __cplusplus
extern "C" {
#endif

#define SYSOM_CLIENT_SOCKET_ENV "SYSOM_SOCKET_PATH" /* where the agent listens */
#define SYSOM_CLIENT_JOB_MAX 127                    /* bytes of a job id */
#define SYSOM_CLIENT_GROUPS_MAX 255                 /* bytes of the groups text */

/* A rank's identity. Integers are -1 when unknown; strings NULL (or "") when unknown. */
struct sysom_registration {
	const char *job;       /* job id, e.g. TORCHELASTIC_RUN_ID (at most 127 bytes) */
	int rank;              /* global rank, below world_size */
	int local_rank;        /* rank on this node, below local_world_size */
	int world_size;
	int local_world_size;
	int group_rank;        /* node index (torchrun GROUP_RANK) */
	const char *groups;    /* parallelism groups, free text like "tp=0,pp=1,dp=3" (<= 255 bytes) */
};

/*
 * Registers the calling process with the agent at $SYSOM_SOCKET_PATH: connects (once; the
 * connection stays open for later records, and is made again after fork() or when the agent
 * restarted), sends the identity and waits at most 100 ms for the agent's answer. `r` is
 * borrowed for the call. Returns 0 when the agent accepted it; -ENOENT when the variable is
 * unset or empty; -EINVAL / -EMSGSIZE for bad fields (or the agent's refusal); -EPERM when the
 * agent attributes the connection to another process; -ETIMEDOUT when no answer came in time
 * (the identity may still be recorded); -EAGAIN when the agent is busy; another -errno when it
 * cannot be reached.
 */
int sysom_client_register(const struct sysom_registration *r);

/*
 * sysom_client_register with the identity from the environment: RANK, LOCAL_RANK, WORLD_SIZE,
 * LOCAL_WORLD_SIZE, GROUP_RANK (else SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS,
 * SLURM_NODEID), and the job id TORCHELASTIC_RUN_ID, else SLURM_JOB_ID[.SLURM_STEP_ID].
 * Same returns.
 */
int sysom_client_register_from_env(void);

/* Closes the connection (the agent forgets the identity). Safe to call at any time. */
void sysom_client_close(void);

#ifdef __cplusplus
}
#endif

#endif
