/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The analysis's results as types: the stragglers of a job with their layered diagnosis
 * (server/analysis/diagnosis.h builds them) and the baseline regression (the monitor's). They
 * cross modules as they are; JSON for the HTTP API and the stored incidents is rendered in
 * one place, server/analysis/diagnosis_render.h.
 */
#ifndef SYSOM_SERVER_ANALYSIS_REPORT_H
#define SYSOM_SERVER_ANALYSIS_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/wire.h"
#include "server/analysis/layers.h"
#include "server/analysis/pipeline.h"
#include "server/analysis/settings.h"
#include "server/analysis/straggler.h"

#define DIAGNOSIS_TOP 5        /* kernels, CPU functions per diagnosis */
#define DIAGNOSIS_TOP_STACKS 3 /* launching stacks per kernel, CPU stacks */
#define DIAGNOSIS_TOP_IRQS 5

/* The layer a straggler's slowness is attributed to. */
enum diagnosis_layer {
	DIAGNOSIS_LAYER_UNKNOWN,
	DIAGNOSIS_LAYER_GPU,
	DIAGNOSIS_LAYER_CPU,
	DIAGNOSIS_LAYER_OS,
};

/* "unknown", "gpu", "cpu", "os". */
const char *diagnosis_layer_name(enum diagnosis_layer l);

/* ---- GPU layer ---- */

struct diagnosis_launch_stack {
	char *stack;            /* owned: the launching stack, without the kernel frame */
	uint64_t gpu_ns;
	double share;           /* of the kernel's traced GPU time on the straggler */
};

struct diagnosis_kernel {
	char *name;             /* owned */
	uint64_t count;         /* the straggler's executions */
	double mean_ns;         /* the straggler's mean GPU time per execution */
	double healthy_ns;      /* median of the healthy ranks' means */
	double slow_share;      /* layers_gpu_slow_share against the healthy ranks; NAN unknown */
	struct diagnosis_launch_stack stacks[DIAGNOSIS_TOP_STACKS];
	size_t nstacks;
};

/* How the straggler's GPU was chosen among its node's (server/analysis/gpuhealth.h). */
enum diagnosis_gpu_picked {
	DIAGNOSIS_GPU_PICKED_NONE = 0,
	DIAGNOSIS_GPU_PICKED_RANK_DEVICE, /* the NVML index the rank's agent found (wire 1.7) */
	DIAGNOSIS_GPU_PICKED_LOCAL_RANK,  /* NVML index == local rank (no device known) */
	DIAGNOSIS_GPU_PICKED_WORST,       /* neither has windows: the node's strongest evidence */
};

/* What the straggler's GPU said about itself (NVML, wire 1.6) over the analysed range. */
struct diagnosis_gpu_hw {
	bool present;           /* GPU health of the rank's node was found (rendered null if not) */
	bool confirmed;         /* a hardware cause was seen: the verdict names it */
	bool by_local_rank;     /* the GPU is the rank's own (picked by its device or its local
				 * rank); else the node's worst GPU */
	enum diagnosis_gpu_picked picked_by;
	uint32_t device, windows;
	char uuid[96], pci_bus_id[32], name[96];
	uint64_t reasons_seen;  /* clock event reason bits seen in any sample */
	char reasons[256];      /* slowdown reasons seen ("hw_thermal_slowdown,..."), "" none */
	char cause[256];        /* in words, for the summary ("thermal throttling (...)") */
	uint32_t samples, slowdown_samples;
	uint32_t sm_clock_min, sm_clock_max, temp_max, temp_slowdown; /* SYSOM_GPU_UNKNOWN */
	uint32_t power_max_mw, power_limit_mw;
	uint64_t ecc_uncorrected;    /* SYSOM_GPU_UNKNOWN64 */
	uint32_t retired_dbe, xid_count, xid_last;
};

struct diagnosis_gpu {
	bool present;           /* false: the layer could not be evaluated (rendered null) */
	enum gpu_verdict verdict;
	double slowdown;
	struct diagnosis_gpu_hw hw;
	struct diagnosis_kernel kernels[DIAGNOSIS_TOP]; /* largest excess first */
	size_t nkernels;
};

/* ---- CPU layer ---- */

/* One function of the CPU diff: its inclusive share on each side and the z of the difference. */
struct diagnosis_cpu_function {
	char *function;         /* owned */
	double healthy_fraction, straggler_fraction;
	double z;               /* layers_cpu_z (may be infinite) */
	double time_z;          /* layers_cpu_time_z: its CPU time, not its share, is larger */
	double healthy_cpu_s, straggler_cpu_s; /* CPU seconds in it over the window; NAN unknown */
};

struct diagnosis_cpu_stack {
	char *stack;            /* owned */
	double healthy_fraction, straggler_fraction;
};

struct diagnosis_cpu {
	bool present;           /* false: no healthy rank, or no profile (rendered null) */
	int32_t compared_with_rank;
	uint64_t straggler_samples, healthy_samples;
	bool enough_samples;
	struct diagnosis_cpu_function functions[DIAGNOSIS_TOP]; /* more on the straggler first */
	size_t nfunctions;
	struct diagnosis_cpu_stack stacks[DIAGNOSIS_TOP_STACKS]; /* through the top function */
	size_t nstacks;
};

/* ---- OS layer ---- */

enum diagnosis_os_signal { OS_RUNQ, OS_IRQ_TIME, OS_INVOL, OS_NUMA, OS_PAGES, OS_NSIG };

enum diagnosis_os_state {
	DIAGNOSIS_OS_ABSENT,    /* not evaluated (rendered null) */
	DIAGNOSIS_OS_NO_DATA,   /* no OS data of the straggler */
	DIAGNOSIS_OS_EVALUATED,
};

struct diagnosis_os_cpu {
	uint32_t cpu;
	double busy_pct, hardirq_ms_per_s, hardirq_per_s;
	bool softirqs_present;  /* false: rendered null */
	struct {
		bool present;   /* the vector ran at all */
		double per_s, ms_per_s;
	} softirq[SYSOM_SOFTIRQ_COUNT];
};

struct diagnosis_os_irq {
	uint32_t irq, cpu;
	char *name;             /* owned */
	double per_s, ms_per_s;
};

struct diagnosis_os {
	enum diagnosis_os_state state;
	int top;                /* most implicated signal (enum diagnosis_os_signal) or -1 */
	char cpus[256];         /* the CPUs its threads ran on, "0,1,5" */
	double runq_p99_us;
	uint64_t oncpu_ms, runq_waits;
	struct os_signal_cmp signals[OS_NSIG]; /* names and units are static strings */
	struct diagnosis_os_cpu *cpu_load;     /* owned */
	size_t ncpu_load;
	struct diagnosis_os_irq irqs[DIAGNOSIS_TOP_IRQS]; /* largest time first */
	size_t nirqs;
	bool truncated;
	/* Host anomaly (server/analysis/reveal.c) of the straggler's node, when it is anomalous. */
	bool host_anomalous;
	char host_node[2 * SYSOM_NODE_ID_SIZE + 1];
	double host_score, host_threshold;
	char host_deviations[384]; /* "tcp_retrans_segs 3242 (z 648.2; peers 0.5, own 1.3), ..." */
};

/* The layered verdict for one straggler. */
struct diagnosis {
	enum diagnosis_layer layer;
	char summary[512], action[512];
	struct diagnosis_gpu gpu;
	struct diagnosis_cpu cpu;
	struct diagnosis_os os;
};

void diagnosis_free(struct diagnosis *d);

/* ---- stragglers of a job ---- */

/* A straggling rank of the job (merged over the communicators it straggles in). */
/* A pipeline stage's node and, when it is slow, its rank's diagnosis (GPU, CPU, OS layers
 * against the job's other ranks, the same as a collective straggler's). */
struct pipeline_stage_where {
	char *hostname;         /* owned; NULL unknown */
	bool diagnosed;         /* a diagnosis was attempted */
	struct diagnosis *diagnosis; /* owned; NULL: none */
};

/* A pipeline link's two nodes. */
struct pipeline_link_where {
	char *src_host, *dst_host; /* owned; NULL unknown */
};

struct straggler_entry {
	int32_t rank;
	uint32_t pid;
	char *hostname;         /* owned */
	char *pod_namespace, *pod; /* owned: the process's Kubernetes pod (wire 1.5 identity);
				    * NULL unknown */
	uint64_t *communicators; /* owned: keys, in the order found */
	size_t ncommunicators;
	bool persistent;        /* persistent in at least one of them */
	double max_excess_ms;
	bool diagnosed;         /* a diagnosis was attempted (rendered, null when it failed) */
	struct diagnosis *diagnosis; /* owned; NULL: none */
};

/* A rank as a communication group's analysis reports it. */
struct straggler_rank_report {
	struct straggler_rank stats;
	uint32_t pid;
	char *hostname;         /* owned */
};

struct straggler_group_report {
	uint64_t comm;
	int32_t nranks;
	uint32_t window, instances;
	uint64_t incomplete;
	int64_t period_ns;
	int32_t *stragglers;    /* owned: straggling ranks by rank */
	size_t nstragglers;
	struct straggler_rank_report *top; /* owned: largest excess first */
	size_t ntop;
};

struct straggler_report {
	char *job;              /* owned */
	int64_t from_ms, to_ms;
	struct diagnosis_params params;
	bool truncated;         /* the instance limit was reached */
	uint64_t skipped_instances;
	/* Communicators whose init was missed (size unknown): grouped across ranks by their call
	 * sequences (server/analysis/seqmatch.h) and analysed / matching no other rank's. */
	uint32_t recovered_communicators, unanalysed_communicators;
	int64_t iteration_ns;   /* the period of the job's busiest group; 0: unknown */
	struct straggler_entry *stragglers; /* owned */
	size_t nstragglers;
	struct straggler_group_report *groups; /* owned */
	size_t ngroups;
	/* Point-to-point calls paired across ranks: the slow pipeline stage or link
	 * (server/analysis/pipeline.h); all zero when the pass did not run or found none. */
	bool pipeline_checked;
	struct pipeline_result pipeline; /* owned */
	/* Where the stages and links run (parallel to pipeline.stages / .links; NULL when the
	 * pass did not run), and for a slow stage the layered diagnosis of its job rank. */
	struct pipeline_stage_where *stage_where; /* owned, [pipeline.nstages] */
	struct pipeline_link_where *link_where;   /* owned, [pipeline.nlinks] */
};

void straggler_report_free(struct straggler_report *r);

/* ---- incidents ---- */

/* What an incident (a stored finding of the monitor) is about. */
enum incident_kind {
	INCIDENT_STRAGGLER,     /* a straggling rank, with its diagnosis */
	INCIDENT_REGRESSION,    /* the job's iteration time rose over its baseline's */
	INCIDENT_HANG,          /* a collective instance waits for ranks that never entered */
	INCIDENT_AGENT_LOST,    /* a node with ranks of the job stopped reporting */
	INCIDENT_STALL,         /* every rank stopped between collectives */
	INCIDENT_HOST_ANOMALY,  /* a node's host signals depart from its history and its peers */
	INCIDENT_PATTERN,       /* a behaviour pattern far from the peers' or the job's history */
};

/* An open incident of a job, as the alert policy reads it (monitor_alerting.publish). Strings
 * are borrowed for the call. */
struct incident_summary {
	int64_t id;                 /* the incident's id (links to its report) */
	enum incident_kind kind;
	int32_t rank;               /* < 0: the whole job */
	const char *identity;       /* "straggler rank=3", "regression" */
	const char *hostname, *communicators, *layer, *severity, *summary, *action;
	const char *cause;          /* hang, stall: "class: detail" (NULL: none) */
	const char *pod_namespace, *pod; /* the rank's Kubernetes pod; NULL or "" unknown */
	const char *container;      /* its container's name; NULL or "" unknown */
	const char *slurm_job;      /* its Slurm job, "<job>[.<step>]"; NULL or "" none */
};

/* ---- baseline regression ---- */

/* A function on more of the job's CPU samples than in the baseline. */
struct regression_function {
	const char *function;   /* borrowed from the analysis's delta list */
	double current_fraction, baseline_fraction;
};

struct regression {
	double iteration_ms, baseline_iteration_ms, rise;
	int64_t baseline_from_ms, baseline_to_ms;
	uint64_t baseline_samples, current_samples;
	int64_t window_ms;
	double delta_pp;        /* the setting: rises at most this are not listed */
	const struct regression_function *functions; /* borrowed; largest rise first */
	size_t nfunctions;
};

#endif
