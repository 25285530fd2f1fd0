/* SPDX-License-Identifier: Apache-2.0 */
/* sysom-agent option table. */
#include "agent/daemon/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/node/host.h"
#include "common/error.h"
#include "common/options.h"
#include "common/token.h"

#define OPTIONS(c)                                                                                  \
	{                                                                                           \
		{ "server", SYSOM_OPT_STRING, &(c)->server, 0, 0, "server base URL (http://HOST:PORT)", false }, \
		{ "token-file", SYSOM_OPT_STRING, &(c)->token_file, 0, 0, "file holding the bearer token", false }, \
		{ "ca-file", SYSOM_OPT_STRING, &(c)->ca_file, 0, 0, "PEM bundle to verify an https server", false }, \
		{ "hz", SYSOM_OPT_UINT, &(c)->hz, 10, 999, "timer frequency per CPU (default 99)", false }, \
		{ "sample-rate", SYSOM_OPT_DOUBLE, &(c)->sample_rate, 0.0001, 1, "fraction of ticks that collect a stack (default 0.10)", false }, \
		{ "drain-interval", SYSOM_OPT_DURATION, &(c)->drain_interval_s, 0.1, 300, "drain the BPF maps this often (default 5s)", false }, \
		{ "batch-interval", SYSOM_OPT_DURATION, &(c)->batch_interval_s, 1, 3600, "seal and ship a batch this often (default 30s)", false }, \
		{ "spool-dir", SYSOM_OPT_STRING, &(c)->spool_dir, 0, 0, "spool directory (default /var/lib/sysom/spool)", false }, \
		{ "spool-max-size", SYSOM_OPT_SIZE, &(c)->spool_max_bytes, 1 << 20, 1e13, "spool size bound (default 512M)", false }, \
		{ "spool-max-age", SYSOM_OPT_DURATION, &(c)->spool_max_age_s, 60, 30 * 86400, "drop spooled batches older than this (default 24h)", false }, \
		{ "memory-queue", SYSOM_OPT_SIZE, &(c)->memory_queue_bytes, 1 << 20, 1 << 30, "batches held in memory when the spool fails (default 64M)", false }, \
		{ "backoff-max", SYSOM_OPT_DURATION, &(c)->backoff_max_s, 1, 3600, "longest wait between upload retries (default 60s)", false }, \
		{ "shutdown-timeout", SYSOM_OPT_DURATION, &(c)->shutdown_timeout_s, 0, 600, "time to flush uploads at shutdown (default 10s)", false }, \
		{ "include-idle", SYSOM_OPT_BOOL, &(c)->include_idle, 0, 0, "also record ticks that hit the idle task", false }, \
		{ "max-stacks", SYSOM_OPT_UINT, &(c)->max_stacks, 64, 1 << 22, "BPF stack store entries per buffer (default 8192)", false }, \
		{ "max-sample-keys", SYSOM_OPT_UINT, &(c)->max_sample_keys, 64, 1 << 22, "BPF count map entries per buffer (default 16384)", false }, \
		{ "unwinder", SYSOM_OPT_STRING, &(c)->unwinder, 0, 0, "user stacks: hybrid (CFI tables + validated frame pointers) or fp (default hybrid)", false }, \
		{ "unwind-table-memory", SYSOM_OPT_SIZE, &(c)->unwind_table_bytes, 1 << 20, 1ull << 34, "kernel memory for unwind tables (default 256M)", false }, \
		{ "gpu-trace", SYSOM_OPT_BOOL, &(c)->gpu_trace, 0, 0, "trace NCCL calls and CUDA kernel launches with uprobes (default true)", false }, \
		{ "gpu-libraries", SYSOM_OPT_STRING, &(c)->gpu_libraries, 0, 0, "colon-separated NCCL/CUDA library files to trace from the start (others are found in running processes)", false }, \
		{ "gpu-launch-duty", SYSOM_OPT_DOUBLE, &(c)->gpu_launch_duty, 0, 1, "fraction of time the kernel launch probes are attached (default 0.1; 0: never, 1: always)", false }, \
		{ "gpu-loader", SYSOM_OPT_STRING, &(c)->gpu_loader, 0, 0, "on a process mapping NCCL/CUDA, ld.so's notification makes the agent attach at once: notify (the process runs on meanwhile), hold (it is stopped until the probes are in: no call missed; its parent sees a stop) or off (periodic discovery only) (default notify)", false }, \
		{ "gpu-event-ring", SYSOM_OPT_SIZE, &(c)->gpu_event_ring_bytes, 1 << 16, 1 << 30, "ring buffer for NCCL events, a power of two (default 4M)", false }, \
		{ "os-signals", SYSOM_OPT_BOOL, &(c)->os_signals, 0, 0, "measure interrupts, softirqs, run-queue latency, context switches and migrations per CPU and per thread of training jobs (default true)", false }, \
		{ "os-signals-all", SYSOM_OPT_BOOL, &(c)->os_signals_all, 0, 0, "measure every user thread, not only those of processes with a job identity (default false)", false }, \
		{ "nvml", SYSOM_OPT_BOOL, &(c)->nvml, 0, 0, "read GPU health (clocks, throttle reasons, temperature, power, ECC, retired pages, PCIe replays, NVLink errors) from NVML when libnvidia-ml.so.1 loads (default true)", false }, \
		{ "nvml-library", SYSOM_OPT_STRING, &(c)->nvml_library, 0, 0, "NVML library name or path (default libnvidia-ml.so.1)", false }, \
		{ "nvml-kmsg", SYSOM_OPT_STRING, &(c)->nvml_kmsg, 0, 0, "kernel log read for NVRM Xid events (default /dev/kmsg; empty: off)", false }, \
		{ "nvml-interval", SYSOM_OPT_DURATION, &(c)->nvml_interval_s, 0.1, 60, "read GPU clocks, throttle reasons, temperature and power this often (default 1s)", false }, \
		{ "host-signals", SYSOM_OPT_BOOL, &(c)->host_signals, 0, 0, "read host signals per batch window: CPU frequency, pressure (PSI), TCP retransmits, network drops, disk latency, memory (default true)", false }, \
		{ "host-proc-root", SYSOM_OPT_STRING, &(c)->host_proc_root, 0, 0, "where host signals read /proc (default /proc; tests point it at a fixture tree)", false }, \
		{ "host-sys-root", SYSOM_OPT_STRING, &(c)->host_sys_root, 0, 0, "where host signals read /sys (default /sys)", false }, \
		{ "off-cpu", SYSOM_OPT_STRING, &(c)->off_cpu, 0, 0, "record where threads block and for how long: jobs (threads of training processes, as os-signals tracks them), all (every user thread) or off (default jobs)", false }, \
		{ "off-cpu-min", SYSOM_OPT_DURATION, &(c)->off_cpu_min_s, 0.000001, 10, "shortest block counted off-CPU (default 1ms)", false }, \
		{ "off-cpu-unwind-budget", SYSOM_OPT_DOUBLE, &(c)->off_cpu_unwind_budget, 0, 100, "percent of each CPU the off-CPU unwinding of blocking threads' user stacks may take; past it they are frame-pointer walks (no Python frames), counted as offcpu_over_budget; 0: no limit (default 0.5)", false }, \
		{ "max-sample-rows", SYSOM_OPT_UINT, &(c)->max_sample_rows, 1024, 1 << 22, "sample rows per batch (default 1048576)", false }, \
		{ "nccl-profiler-mask", SYSOM_OPT_UINT, &(c)->nccl_profiler_mask, 0, 0xffff, "NCCL profiler plugin event mask (ncclProfile* bits) sent to plugins; 0: the plugin's default. SIGHUP applies a change to running jobs", false }, \
		{ "pod-log-root", SYSOM_OPT_STRING, &(c)->pod_log_root, 0, 0, "the kubelet's pod log directories (<namespace>_<pod>_<uid>), where a process's pod name and namespace are found (default /var/log/pods; empty: off)", false }, \
		{ "container-log-root", SYSOM_OPT_STRING, &(c)->container_log_root, 0, 0, "the kubelet's container log links (<pod>_<namespace>_<container>-<id>.log), where a process's container name is found (default /var/log/containers; empty: off)", false }, \
		{ "socket", SYSOM_OPT_STRING, &(c)->socket, 0, 0, "Unix socket where training processes register their job identity (default /run/sysom/agent.sock; empty: off)", false }, \
		{ "log-level", SYSOM_OPT_STRING, &(c)->log_level, 0, 0, "error, warn, info or debug (default info)", false }, \
		{ "machine-id-file", SYSOM_OPT_STRING, &(c)->machine_id_file, 0, 0, "node identity source (default /etc/machine-id)", false }, \
		{ "symbol-upload", SYSOM_OPT_BOOL, &(c)->symbol_upload, 0, 0, "upload executables and debug files the server lacks (default true)", false }, \
		{ "symbol-upload-rate", SYSOM_OPT_SIZE, &(c)->symbol_upload_rate, 0, 1e12, "symbol upload bandwidth per second, 0: unlimited (default 4M)", false }, \
		{ "symbol-chunk-size", SYSOM_OPT_SIZE, &(c)->symbol_chunk_bytes, 1 << 20, 64 << 20, "bytes per symbol upload request (default 8M)", false }, \
		{ "symbol-max-file-size", SYSOM_OPT_SIZE, &(c)->symbol_max_file_bytes, 1 << 20, 1e12, "files larger than this are not uploaded (default 2G)", false }, \
		{ "config", SYSOM_OPT_STRING, &(c)->config, 0, 0, "config file (default " AGENT_DEFAULT_CONFIG " if present)", true }, \
		{ "check", SYSOM_OPT_BOOL, &(c)->check, 0, 0, "check the node and the server, print verdicts, exit", true }, \
		{ "probe-nvml", SYSOM_OPT_BOOL, &(c)->probe_nvml, 0, 0, "read NVML 3 times, 1 s apart, print what the GPU health reader sees as JSON, exit", true }, \
		{ "duration", SYSOM_OPT_DURATION, &(c)->duration_s, 0, 1e9, "exit cleanly after this long (default: run until signalled)", true }, \
		{ "version", SYSOM_OPT_BOOL, &(c)->version, 0, 0, "print the version and exit", true }, \
		{ "help", SYSOM_OPT_BOOL, &(c)->help, 0, 0, "show this help", true },                   \
	}

int agent_config_defaults(struct agent_config *c)
{
	memset(c, 0, sizeof(*c));
	c->server = strdup("http://127.0.0.1:8080");
	c->spool_dir = strdup("/var/lib/sysom/spool");
	c->log_level = strdup("info");
	c->unwinder = strdup("hybrid");
	c->socket = strdup("/run/sysom/agent.sock");
	c->gpu_loader = strdup("notify");
	c->off_cpu = strdup("jobs");
	c->nvml_library = strdup("libnvidia-ml.so.1");
	c->nvml_kmsg = strdup("/dev/kmsg");
	c->nvml = true;
	c->nvml_interval_s = 1;
	c->pod_log_root = strdup("/var/log/pods");
	c->container_log_root = strdup("/var/log/containers");
	c->host_proc_root = strdup("/proc");
	c->host_sys_root = strdup("/sys");
	c->host_signals = true;
	c->off_cpu_min_s = 0.001;
	c->off_cpu_unwind_budget = 0.5;
	c->gpu_trace = true;
	c->os_signals = true;
	c->gpu_launch_duty = 0.1;
	c->gpu_event_ring_bytes = 4u << 20;
	if (!c->server || !c->spool_dir || !c->log_level || !c->unwinder || !c->socket ||
	    !c->gpu_loader || !c->off_cpu || !c->pod_log_root || !c->container_log_root ||
	    !c->nvml_library || !c->nvml_kmsg || !c->host_proc_root || !c->host_sys_root)
		return -ENOMEM;
	c->unwind_table_bytes = 256ull << 20;
	c->hz = 99;
	c->sample_rate = 0.10;
	c->drain_interval_s = 5;
	c->batch_interval_s = 30;
	c->spool_max_bytes = 512ULL << 20;
	c->spool_max_age_s = 24 * 3600;
	c->memory_queue_bytes = 64ULL << 20;
	c->backoff_max_s = 60;
	c->shutdown_timeout_s = 10;
	c->max_stacks = 8192;
	c->max_sample_keys = 16384;
	c->max_sample_rows = 1u << 20;
	c->symbol_upload = true;
	c->symbol_upload_rate = 4ull << 20;
	c->symbol_chunk_bytes = 8ull << 20;
	c->symbol_max_file_bytes = 2ull << 30;
	return 0;
}

int agent_config_load(struct agent_config *c, int argc, char *const argv[], char *err,
		      size_t errlen)
{
	struct sysom_option table[] = OPTIONS(c);
	size_t n = sizeof(table) / sizeof(table[0]);
	const char *explicit_config = sysom_options_peek_argv(argc, argv, "config");
	int rc;

	if (explicit_config) {
		rc = sysom_options_load_file(table, n, explicit_config, err, errlen);
		if (rc)
			return rc < 0 && rc != -SYSOM_ECONFIG ? -SYSOM_ECONFIG : rc;
	} else if (access(AGENT_DEFAULT_CONFIG, F_OK) == 0) {
		rc = sysom_options_load_file(table, n, AGENT_DEFAULT_CONFIG, err, errlen);
		if (rc)
			return -SYSOM_ECONFIG;
	}
	rc = sysom_options_parse_argv(table, n, argc, argv, err, errlen);
	if (rc < 0)
		return rc;
	if (rc < argc) {
		snprintf(err, errlen, "unexpected argument '%s' (see --help)", argv[rc]);
		return -SYSOM_ECONFIG;
	}
	return 0;
}

int agent_config_validate(const struct agent_config *c, char *err, size_t errlen)
{
	if (c->drain_interval_s > c->batch_interval_s) {
		snprintf(err, errlen, "drain-interval (%gs) must not exceed batch-interval (%gs)",
			 c->drain_interval_s, c->batch_interval_s);
		return -SYSOM_ECONFIG;
	}
	if (!c->server || (strncmp(c->server, "http://", 7) && strncmp(c->server, "https://", 8))) {
		snprintf(err, errlen, "server must be an http:// or https:// URL");
		return -SYSOM_ECONFIG;
	}
	if (!c->unwinder || (strcmp(c->unwinder, "hybrid") && strcmp(c->unwinder, "fp"))) {
		snprintf(err, errlen, "unwinder must be 'hybrid' or 'fp'");
		return -SYSOM_ECONFIG;
	}
	if (!c->gpu_loader || (strcmp(c->gpu_loader, "off") && strcmp(c->gpu_loader, "notify") &&
				strcmp(c->gpu_loader, "hold"))) {
		snprintf(err, errlen, "gpu-loader must be 'notify', 'hold' or 'off'");
		return -SYSOM_ECONFIG;
	}
	if (!c->off_cpu || (strcmp(c->off_cpu, "jobs") && strcmp(c->off_cpu, "all") &&
			    strcmp(c->off_cpu, "off"))) {
		snprintf(err, errlen, "off-cpu must be 'jobs', 'all' or 'off'");
		return -SYSOM_ECONFIG;
	}
	if (c->gpu_event_ring_bytes & (c->gpu_event_ring_bytes - 1)) {
		snprintf(err, errlen, "gpu-event-ring must be a power of two (e.g. 4M)");
		return -SYSOM_ECONFIG;
	}
	if (c->socket && c->socket[0] && (c->socket[0] != '/' || strlen(c->socket) > 107)) {
		snprintf(err, errlen, "socket must be empty or an absolute path of at most 107 bytes");
		return -SYSOM_ECONFIG;
	}
	if (!c->spool_dir || c->spool_dir[0] != '/') {
		snprintf(err, errlen, "spool-dir must be an absolute path");
		return -SYSOM_ECONFIG;
	}
	return 0;
}

int agent_config_read_token(const char *path, char **out, char *err, size_t errlen)
{
	bool world_readable = false;
	int rc;

	*out = NULL;
	if (!path)
		return 0;
	rc = sysom_token_file_read(path, out, &world_readable, err, errlen);
	if (rc == 0 && world_readable)
		snprintf(err, errlen, "token file %s is world-readable", path);
	return rc;
}

void agent_config_print_help(void *out)
{
	struct agent_config c;
	struct sysom_option table[] = OPTIONS(&c);

	fprintf(out, "usage: sysom-agent [--server URL] [--token-file F] [--hz N] [--sample-rate F]\n"
		     "                   [--drain-interval SEC] [--batch-interval SEC] [--spool-dir DIR]\n"
		     "                   [--config F] [--check] [options]\n\n"
		     "Samples CPU stacks on every CPU with eBPF and ships them to sysom-server.\n\n");
	sysom_options_print_help(table, sizeof(table) / sizeof(table[0]), out);
	fprintf(out, "\nFlags override the config file (key = value lines, same names). SIGHUP reloads\n"
		     "the config file (sampling, intervals, log level, token); SIGTERM flushes and exits.\n");
}

void agent_config_free(struct agent_config *c)
{
	struct sysom_option table[] = OPTIONS(c);

	sysom_options_free(table, sizeof(table) / sizeof(table[0]));
}
