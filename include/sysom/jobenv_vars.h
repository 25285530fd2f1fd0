/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The launcher environment variables that tell a process its place in a training job
 * (torchrun, SLURM, Open MPI, PMI), defined once for the agent, which reads them from
 * /proc/<pid>/environ (agent/ranks/jobenv.c), and the client library, which reads its own
 * environment (client/sysom_client.c). Libc only.
 */
#ifndef SYSOM_JOBENV_VARS_H
#define SYSOM_JOBENV_VARS_H

#include <stddef.h>

/* The numbers of a rank's identity. */
enum sysom_jobenv_field {
	SYSOM_JOBENV_RANK,             /* global rank */
	SYSOM_JOBENV_WORLD_SIZE,       /* ranks in the job */
	SYSOM_JOBENV_LOCAL_RANK,       /* rank on this node */
	SYSOM_JOBENV_LOCAL_WORLD_SIZE, /* ranks on this node */
	SYSOM_JOBENV_GROUP_RANK,       /* node index (torchrun's GROUP_RANK) */
	SYSOM_JOBENV_FIELDS,
};

#define SYSOM_JOBENV_VARS_MAX 4 /* variables per field at most */

/* Where each field may come from, most specific launcher first: the first variable present
 * decides (also when its value is not a valid number). Each list ends with NULL. */
static const char *const sysom_jobenv_vars[SYSOM_JOBENV_FIELDS][SYSOM_JOBENV_VARS_MAX + 1] = {
	[SYSOM_JOBENV_RANK] = { "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", NULL },
	[SYSOM_JOBENV_WORLD_SIZE] = { "WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE",
				      "PMI_SIZE", NULL },
	[SYSOM_JOBENV_LOCAL_RANK] = { "LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK",
				      "MPI_LOCALRANKID", NULL },
	[SYSOM_JOBENV_LOCAL_WORLD_SIZE] = { "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
					    "MPI_LOCALNRANKS", NULL },
	[SYSOM_JOBENV_GROUP_RANK] = { "GROUP_RANK", "SLURM_NODEID", NULL },
};

/* The job id: TORCHELASTIC_RUN_ID, else SLURM_JOB_ID[.SLURM_STEP_ID] (one job runs several
 * steps, each its own set of ranks); the agent falls back to MASTER_ADDR:MASTER_PORT. */
#define SYSOM_JOBENV_RUN_ID "TORCHELASTIC_RUN_ID"
#define SYSOM_JOBENV_SLURM_JOB_ID "SLURM_JOB_ID"
#define SYSOM_JOBENV_SLURM_STEP_ID "SLURM_STEP_ID"
#define SYSOM_JOBENV_MASTER_ADDR "MASTER_ADDR"
#define SYSOM_JOBENV_MASTER_PORT "MASTER_PORT"

#endif
