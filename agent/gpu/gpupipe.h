/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's training-job pipeline: NCCL/CUDA probes (gputrace) → communicator keys and
 * kernel names (nccltrack) → batch records, plus each traced process's job identity (its
 * environment, or what it registered over the agent's socket).
 */
#ifndef SYSOM_AGENT_GPU_GPUPIPE_H
#define SYSOM_AGENT_GPU_GPUPIPE_H

#include <stdint.h>

#include <uv.h>

#include "agent/ship/batcher.h"
#include "agent/gpu/gputrace.h"
#include "agent/ranks/jobenv.h"
#include "agent/node/proctrack.h"
#include "common/report.h"

struct gpupipe;

struct gpupipe_options {
	const char *proc_root;   /* "/proc" */
	struct proctrack *pt;    /* borrowed */
	struct batcher *batcher; /* borrowed */
	int exec_generation_fd;  /* the sampler's map, or -1 */
	int unwind_tables_fd, unwind_procs_fd, unwind_markers_fd; /* hybrid unwinder, or -1 */
	int py_procs_fd; /* Python processes (bpf/pyframes.h), or -1 */
	uint32_t ring_bytes;     /* 0: default */
	const char *libraries;   /* colon-separated files to attach at start, or NULL */
	double launch_duty;      /* fraction of drain intervals with launch probes on, 0..1 */
	const char *loader;      /* loader notification: "notify" (NULL), "hold", "off" */
	struct nvml *nvml;       /* borrowed, or NULL: the GPU of each rank (agent/gpu/gpumap.h)
				  * is sent as its NVML index */
	/* Messages for the log (libraries traced, events lost, ...), the tracer's included: the
	 * daemon logs them. */
	struct sysom_reporter report;
};

/* Loads the probes' BPF programs, scans running processes for NCCL/CUDA libraries and starts
 * polling the event ring on `loop`. 0 or -errno with `err` explaining. */
int gpupipe_open(uv_loop_t *loop, const struct gpupipe_options *o, struct gpupipe **out,
		 char *err, size_t errlen);
/* Stops polling (uv_close); call gpupipe_free once the loop has run the close. */
void gpupipe_stop(struct gpupipe *gp);
void gpupipe_free(struct gpupipe *gp);

/* proctrack hooks: a process's mappings were read / it was forgotten. */
void gpupipe_on_mappings(struct gpupipe *gp, const struct pt_process *proc);
void gpupipe_on_forget(struct gpupipe *gp, const struct pt_process *proc);
/* A process exited at `ktime_ns` (monotonic; 0 unknown): a rank's exit is kept in the memory of
 * rank processes (jobenv_ranks_exited), for its orphaned DataLoader workers. */
void gpupipe_on_exit(struct gpupipe *gp, uint32_t tgid, uint64_t ktime_ns);
/* A process exec'd: look at its libraries again shortly (they load after exec). */
void gpupipe_on_exec(struct gpupipe *gp, uint32_t tgid);

/* The process registered itself (overrides its environment) / its registration ended. */
void gpupipe_set_registration(struct gpupipe *gp, uint32_t tgid, const struct job_identity *id,
			      const char *groups);
void gpupipe_clear_registration(struct gpupipe *gp, uint32_t tgid);

/* Whether the JOB_RANKS records carry the rank's GPU (wire 1.7: a server that reads at least
 * 1.7; older readers refuse the byte). Off until set. */
void gpupipe_set_send_gpu_device(struct gpupipe *gp, bool on);

/* At every drain: events, launch counts, due scans, counters. */
void gpupipe_drain(struct gpupipe *gp);
/* Before sealing a batch: communicators and job identities of the traced processes. */
void gpupipe_before_seal(struct gpupipe *gp);

void gpupipe_stats_read(const struct gpupipe *gp, struct gputrace_stats *out);

#endif
