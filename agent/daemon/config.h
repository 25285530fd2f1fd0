/* SPDX-License-Identifier: Apache-2.0 */
/* sysom-agent settings: defaults, flags and /etc/sysom/agent.conf through one table. */
#ifndef SYSOM_AGENT_DAEMON_CONFIG_H
#define SYSOM_AGENT_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AGENT_DEFAULT_CONFIG "/etc/sysom/agent.conf"

struct agent_config {
	char *server;            /* server base URL */
	char *token_file;        /* bearer token file, or NULL */
	char *ca_file;           /* PEM bundle for https, or NULL */
	uint32_t hz;             /* 10..999 */
	double sample_rate;      /* (0, 1] */
	double drain_interval_s; /* BPF map drain period */
	double batch_interval_s; /* window sealed and shipped this often */
	char *spool_dir;
	uint64_t spool_max_bytes;
	double spool_max_age_s;
	uint64_t memory_queue_bytes;
	double backoff_max_s;
	double shutdown_timeout_s; /* flush time at SIGTERM */
	bool include_idle;
	uint32_t max_stacks;       /* BPF stack store entries per buffer */
	uint32_t max_sample_keys;  /* BPF count map entries per buffer */
	uint32_t max_sample_rows;  /* rows per batch */
	char *unwinder;            /* "hybrid" or "fp" */
	uint64_t unwind_table_bytes; /* BPF memory for unwind tables (8 bytes a row) */
	bool gpu_trace;            /* NCCL / CUDA uprobes */
	char *gpu_libraries;       /* files to attach at start (colon-separated), or NULL */
	char *gpu_loader;          /* "notify", "hold" or "off" (enum gputrace_loader_mode) */
	double gpu_launch_duty;    /* fraction of time launch probes are attached */
	uint64_t gpu_event_ring_bytes; /* NCCL event ring buffer (power of two) */
	bool os_signals;           /* interrupts, softirqs, scheduling, NUMA (agent/os/ossignals.h) */
	bool os_signals_all;       /* ... for every user thread, not only training jobs' */
	bool nvml;                 /* GPU health from NVML (agent/gpu/nvml.h) */
	char *nvml_library;        /* dlopen name or path of libnvidia-ml.so.1 */
	char *nvml_kmsg;           /* kernel log read for Xid events; "": none */
	double nvml_interval_s;    /* GPU readings this often */
	bool host_signals;         /* PSI, network, disk, memory, CPU frequency (agent/os/hostsig.h) */
	char *host_proc_root;      /* where they are read: "/proc" (tests: a fixture tree) */
	char *host_sys_root;       /* ... "/sys" */
	char *off_cpu;             /* "jobs", "all" or "off": whose blocked time is recorded */
	double off_cpu_min_s;      /* shortest block counted */
	double off_cpu_unwind_budget; /* % of each CPU for off-CPU user-stack unwinding (0: no
				       * limit) */
	char *pod_log_root;        /* kubelet pod log directories; "": no pod names */
	char *container_log_root;  /* kubelet container log links; "": no container names */
	char *socket;              /* registration socket path (agent/ranks/registry.h); "": off */
	uint32_t nccl_profiler_mask; /* MASK for NCCL profiler plugins; 0: theirs */
	char *log_level;
	char *machine_id_file;     /* node identity source (tests run several "nodes") */
	bool symbol_upload;        /* upload executables and debug files the server lacks */
	uint64_t symbol_upload_rate; /* bytes per second, 0: unlimited */
	uint64_t symbol_chunk_bytes; /* bytes per upload request, 1 MiB..64 MiB */
	uint64_t symbol_max_file_bytes; /* larger files are not uploaded */
	/* command line only */
	char *config;
	bool check;
	bool probe_nvml;           /* print what the NVML reader sees as JSON, exit */
	bool help;
	bool version;
	double duration_s;         /* exit cleanly after this long (0: run until signalled) */
};

/* Sets every field to its default (strings heap-allocated). 0 or -ENOMEM. */
int agent_config_defaults(struct agent_config *c);

/*
 * Applies, in order: defaults, the config file (--config, else AGENT_DEFAULT_CONFIG when it
 * exists), then the flags. Returns 0, or -SYSOM_ECONFIG / -errno with `err` explaining.
 */
int agent_config_load(struct agent_config *c, int argc, char *const argv[], char *err,
		      size_t errlen);

/* Cross-field checks (e.g. drain interval <= batch interval). 0 or -SYSOM_ECONFIG. */
int agent_config_validate(const struct agent_config *c, char *err, size_t errlen);

/* Reads the token file (sysom_token_file_read) into a new string; NULL path → *out NULL.
 * Returns 0 or -errno; on success `err` holds a warning when the file is world-readable. */
int agent_config_read_token(const char *path, char **out, char *err, size_t errlen);

void agent_config_print_help(void *out);
void agent_config_free(struct agent_config *c);

#endif
