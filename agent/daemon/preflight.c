/* SPDX-License-Identifier: Apache-2.0 */
/* Preflight checks: kernel, BTF, privileges, perf events, BPF load, kallsyms, spool, server. */
#include "agent/daemon/preflight.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "agent/node/host.h"
#include "agent/ship/http_client.h"
#include "agent/node/kernel.h"
#include "agent/os/ossignals.h"
#include "agent/node/proctrack.h"
#include "agent/sampling/sampler.h"
#include "agent/gpu/gputrace.h"
#include "agent/sampling/pyframes.h"
#include "agent/sampling/unwinder.h"
#include "common/error.h"

#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
#ifndef CAP_BPF
#define CAP_BPF 39
#endif

enum verdict { OK, WARN, FAIL };

__attribute__((format(printf, 5, 6))) static void report(FILE *out, int *failed, enum verdict v,
							 const char *what, const char *fmt, ...)
{
	static const char *const names[] = { "ok", "warn", "FAIL" };
	char detail[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	fprintf(out, "%-5s %-14s %s\n", names[v], what, detail);
	if (v == FAIL)
		(*failed)++;
}

static void check_kernel(FILE *out, int *failed)
{
	struct utsname u;
	int major = 0, minor = 0;

	uname(&u);
	sscanf(u.release, "%d.%d", &major, &minor);
	bool ok = major > 5 || (major == 5 && minor >= 8);
	report(out, failed, ok ? OK : FAIL, "kernel", "%s", ok ? u.release : "");
	if (!ok)
		fprintf(out, "      %-14s %s is older than 5.8 (ring buffers, BTF raw tracepoints and "
			"batched map operations are needed)\n", "", u.release);
}

static void check_btf(FILE *out, int *failed)
{
	bool ok = access("/sys/kernel/btf/vmlinux", R_OK) == 0;

	report(out, failed, ok ? OK : FAIL, "btf", "%s",
	       ok ? "/sys/kernel/btf/vmlinux present (CO-RE relocations possible)"
		  : "/sys/kernel/btf/vmlinux missing: the kernel needs CONFIG_DEBUG_INFO_BTF=y");
}

static bool has_cap(const struct __user_cap_data_struct data[2], int cap)
{
	return data[cap / 32].effective & (1u << (cap % 32));
}

static void check_privileges(FILE *out, int *failed)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2] = { 0 };

	if (syscall(SYS_capget, &hdr, data)) {
		report(out, failed, FAIL, "privileges", "capget failed: %s", strerror(errno));
		return;
	}
	bool admin = has_cap(data, CAP_SYS_ADMIN);
	bool bpf = admin || (has_cap(data, CAP_BPF) && has_cap(data, CAP_PERFMON));
	bool ptrace = has_cap(data, CAP_SYS_PTRACE);
	if (!bpf) {
		report(out, failed, FAIL, "privileges",
		       "need CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) to load and attach BPF programs");
		return;
	}
	report(out, failed, ptrace ? OK : WARN, "privileges", "%s%s",
	       admin ? "CAP_SYS_ADMIN" : "CAP_BPF, CAP_PERFMON",
	       ptrace ? ", CAP_SYS_PTRACE" : "; without CAP_SYS_PTRACE other users' processes' "
					      "mappings cannot be read (their frames stay unresolved)");
}

static void check_perf_event(FILE *out, int *failed)
{
	struct perf_event_attr attr = {
		.type = PERF_TYPE_SOFTWARE,
		.config = PERF_COUNT_SW_CPU_CLOCK,
		.size = sizeof(attr),
		.freq = 1,
		.sample_freq = 99,
		.disabled = 1,
	};
	char paranoid[16] = "?";
	host_read_text("/proc/sys/kernel/perf_event_paranoid", paranoid, sizeof(paranoid));
	paranoid[strcspn(paranoid, "\n")] = '\0';
	int fd = (int)syscall(__NR_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0) {
		report(out, failed, FAIL, "perf_event",
		       "cannot open a cpu-clock event on CPU 0: %s (perf_event_paranoid=%s; needs "
		       "CAP_PERFMON)", strerror(errno), paranoid);
		return;
	}
	close(fd);
	report(out, failed, OK, "perf_event", "cpu-clock events open on every CPU "
	       "(perf_event_paranoid=%s)", paranoid);
}

/* Publishes this very process to the hybrid unwinder: its tables compile and load for real. */
struct own_publish {
	struct unwinder *u;
	int rc;
};

static void on_own_mappings(void *ctx, const struct pt_process *proc)
{
	struct own_publish *p = ctx;

	p->rc = unwinder_publish(p->u, proc);
}

/* Loads the NCCL/CUDA probe programs and finds the libraries running processes map (probes
 * are attached and detached again: uprobes really work here). */
static void check_gputrace(FILE *out, int *failed, struct sampler *s,
			   const struct agent_config *cfg)
{
	struct gputrace_options go;
	struct gputrace_stats st;
	struct gputrace *g;
	char err[256];
	int n;

	if (!cfg->gpu_trace) {
		report(out, failed, WARN, "gpu-trace", "off (--gpu-trace=false): no NCCL or kernel "
		       "launch events");
		return;
	}
	gputrace_options_default(&go);
	go.exec_generation_fd = sampler_exec_generation_fd(s);
	int rc = gputrace_open(&go, &g, err, sizeof(err));
	if (rc) {
		report(out, failed, FAIL, "gpu-trace", "%s", err);
		return;
	}
	n = gputrace_scan_all(g);
	gputrace_stats_read(g, &st);
	if (n > 0)
		report(out, failed, OK, "gpu-trace", "uprobes attach: %u NCCL/CUDA library files in "
		       "%u running processes (%u probes)", st.libraries, st.processes, st.probes);
	else
		report(out, failed, OK, "gpu-trace", "probe programs load; no running process maps "
		       "libnccl or libcuda now (they are found when one starts)");
	gputrace_close(g);
}

/* Loads and attaches the OS signal programs and closes one window: the tracepoints exist and
 * the per-CPU flush runs on every CPU. */
static void check_ossignals(FILE *out, int *failed, const struct agent_config *cfg)
{
	struct ossignals_options oo;
	struct ossignals_window w;
	struct ossignals_stats st;
	struct ossignals *os;
	char err[256];
	int rc;

	if (!cfg->os_signals) {
		report(out, failed, WARN, "os-signals", "off (--os-signals=false): no interrupt, "
		       "softirq, run-queue or migration statistics");
		return;
	}
	ossignals_options_default(&oo);
	oo.track_all = cfg->os_signals_all;
	if ((rc = ossignals_open(&oo, &os, err, sizeof(err)))) {
		report(out, failed, FAIL, "os-signals", "%s", err);
		return;
	}
	/* A window long enough for every CPU to switch tasks at least once. */
	usleep(100 * 1000);
	rc = ossignals_collect(os, NULL, &w);
	ossignals_stats_read(os, &st);
	if (rc)
		report(out, failed, FAIL, "os-signals", "programs attached but a window cannot be "
		       "collected: %s", sysom_strerror(rc));
	else if (st.attach_errors)
		report(out, failed, WARN, "os-signals", "%u of %u tracepoints attached; missing: %s "
		       "(those signals are absent)", st.attached, st.programs, st.failed);
	else
		report(out, failed, OK, "os-signals", "%u tracepoints attached; %u CPUs report, "
		       "%u NUMA nodes%s", st.attached, w.cpus, st.numa_nodes,
		       st.numa_nodes ? "" : " (NUMA migrations not told apart)");
	ossignals_close(os);
}

static void check_unwinder(FILE *out, int *failed, struct sampler *s,
			   const struct agent_config *cfg)
{
	struct own_publish state = { .rc = -ENOENT };
	struct unwinder_options uo;
	struct sampler_unwind_maps maps;
	struct proctrack_options po;
	struct proctrack *pt = NULL;
	struct unwinder_stats st;
	int rc;

	unwinder_options_default(&uo);
	uo.max_rows = cfg->unwind_table_bytes / sizeof(struct unwind_row);
	sampler_unwind_maps(s, &maps);
	if ((rc = unwinder_new(&uo, &maps, &state.u))) {
		report(out, failed, FAIL, "unwinder", "cannot create: %s", sysom_strerror(rc));
		return;
	}
	proctrack_options_default(&po);
	po.on_mappings = on_own_mappings;
	po.mappings_ctx = &state;
	if ((rc = proctrack_new(&po, &pt)) == 0) {
		proctrack_get(pt, (uint32_t)getpid(), 0);
		unwinder_work(state.u, UINT64_MAX);
	}
	unwinder_stats_read(state.u, &st);
	if (rc || state.rc)
		report(out, failed, FAIL, "unwinder", "cannot publish this process: %s",
		       sysom_strerror(rc ? rc : state.rc));
	else if (st.tables == 0)
		report(out, failed, WARN, "unwinder", "no unwind table could be built for this "
		       "process (%llu failures): frame pointers only", (unsigned long long)st.build_failures);
	else
		report(out, failed, OK, "unwinder", "hybrid: %u tables, %llu rows for this process "
		       "compiled and loaded in %.1f ms", st.tables, (unsigned long long)st.rows,
		       st.build_ns / 1e6);
	proctrack_free(pt);
	unwinder_free(state.u);
}

/*
 * Python processes running now: whether their frames will be stitched (a supported
 * interpreter: version, where its offsets come from) or sampled natively (and why). At most
 * 32 processes are listed.
 */
static void check_python(FILE *out, int *failed, bool hybrid)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	unsigned found = 0;

	if (!d)
		return;
	while ((e = readdir(d)) && found < 32) {
		char *end, why[256];
		unsigned long pid = strtoul(e->d_name, &end, 10);
		struct py_target t;
		int rc;

		if (*end || pid == 0 || pid > UINT32_MAX || pid == (unsigned long)getpid())
			continue;
		rc = pyframes_inspect_pid("/proc", (uint32_t)pid, &t, why, sizeof(why));
		if (rc < 0 || rc == PY_NOT_PYTHON)
			continue;
		found++;
		if (rc == 0 && hybrid) {
			report(out, failed, OK, "python", "pid %lu: %s %u.%u: Python frames stitched "
			       "(offsets from %s)", pid, t.path, t.proc.version_hex >> 24,
			       (t.proc.version_hex >> 16) & 0xff,
			       t.debug_offsets ? "_Py_DebugOffsets" : "the version table");
		} else {
			report(out, failed, WARN, "python", "pid %lu: %s: sampled natively", pid,
			       rc == 0 ? "frame-pointer unwinder (--unwinder fp)" : why);
		}
	}
	closedir(d);
	if (!found)
		report(out, failed, OK, "python", "no Python process running (CPython 3.10-3.13 "
		       "frames are stitched when one runs)");
}

static void check_bpf(FILE *out, int *failed, const struct agent_config *cfg)
{
	struct sampler_options so;
	struct sampler *s = NULL;
	char err[512];

	sampler_options_default(&so);
	so.hz = cfg->hz;
	so.sample_rate = cfg->sample_rate;
	so.max_stacks = 64;
	so.max_sample_keys = 64;
	so.unwinder = strcmp(cfg->unwinder, "fp") == 0 ? SYSOM_UNWINDER_FP : SYSOM_UNWINDER_HYBRID;
	int rc = sampler_open(&so, NULL, NULL, &s, err, sizeof(err));
	if (rc) {
		report(out, failed, FAIL, "bpf", "%s", err);
		return;
	}
	report(out, failed, OK, "bpf", "sampler loaded and attached to %u CPUs",
	       sampler_attached_cpus(s));
	if (so.unwinder == SYSOM_UNWINDER_HYBRID)
		check_unwinder(out, failed, s, cfg);
	else
		report(out, failed, WARN, "unwinder", "frame pointers only (--unwinder fp): code "
		       "built without them gets one- or two-frame user stacks");
	check_python(out, failed, so.unwinder == SYSOM_UNWINDER_HYBRID);
	check_gputrace(out, failed, s, cfg);
	sampler_close(s);
	check_ossignals(out, failed, cfg);
}

static void check_kallsyms(FILE *out, int *failed)
{
	struct kernel_info ki;
	char hex[2 * SYSOM_BUILD_ID_MAX + 1];
	int rc = kernel_info_read(NULL, &ki);

	if (rc) {
		report(out, failed, FAIL, "kernel-symbols", "cannot read the kernel identity: %s",
		       sysom_strerror(rc));
		return;
	}
	sysom_build_id_hex(&ki.id, hex, sizeof(hex));
	if (!ki.addresses_visible)
		report(out, failed, WARN, "kernel-symbols",
		       "/proc/kallsyms hides addresses (kptr_restrict): kernel frames will not be "
		       "symbolized; build ID %s", hex);
	else
		report(out, failed, OK, "kernel-symbols", "build ID %s%s, %u modules", hex,
		       ki.id_derived ? " (derived: no build ID note)" : "", ki.module_count);
	kernel_info_free(&ki);
}

static void check_spool(FILE *out, int *failed, const struct agent_config *cfg)
{
	char probe[PATH_MAX];
	struct stat st;

	if (stat(cfg->spool_dir, &st) != 0) {
		/* It is created at start; its parent must be writable then. */
		char parent[PATH_MAX];
		snprintf(parent, sizeof(parent), "%s", cfg->spool_dir);
		char *slash = strrchr(parent, '/');
		if (slash && slash != parent)
			*slash = '\0';
		bool ok = access(parent, W_OK) == 0 || errno == ENOENT;
		report(out, failed, ok ? OK : FAIL, "spool", "%s does not exist yet; %s",
		       cfg->spool_dir, ok ? "it will be created at start" : "its parent is not writable");
		return;
	}
	snprintf(probe, sizeof(probe), "%s/.sysom-check.%d", cfg->spool_dir, (int)getpid());
	int fd = open(probe, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
	if (fd < 0) {
		report(out, failed, FAIL, "spool", "%s is not writable: %s", cfg->spool_dir,
		       strerror(errno));
		return;
	}
	close(fd);
	unlink(probe);
	report(out, failed, OK, "spool", "%s writable", cfg->spool_dir);
}

static void check_server(FILE *out, int *failed, const struct agent_config *cfg)
{
	struct http_client *client = NULL;
	struct http_client_response resp = { 0 };
	char err[512] = "";
	char *token = NULL;
	int rc = agent_config_read_token(cfg->token_file, &token, err, sizeof(err));

	if (rc) {
		report(out, failed, FAIL, "token", "%s", err);
		return;
	}
	if (cfg->token_file)
		report(out, failed, err[0] ? WARN : OK, "token", "%s", err[0] ? err : cfg->token_file);
	struct http_client_options o = { .base_url = cfg->server, .token = token,
					 .ca_file = cfg->ca_file, .timeout_ms = 5000,
					 .connect_timeout_ms = 3000 };
	struct http_client_request req = { .method = "GET", .path = "/healthz" };
	if ((rc = http_client_new(&o, &client))) {
		report(out, failed, FAIL, "server", "%s: %s", cfg->server, sysom_strerror(rc));
		goto cleanup;
	}
	rc = http_client_request(client, &req, &resp);
	if (resp.status == 200)
		report(out, failed, OK, "server", "%s answers /healthz", cfg->server);
	else if (resp.status)
		report(out, failed, FAIL, "server", "%s answered HTTP %d to /healthz", cfg->server,
		       resp.status);
	else
		report(out, failed, FAIL, "server", "%s unreachable: %s (batches will be spooled "
		       "until it is)", cfg->server, resp.error[0] ? resp.error : sysom_strerror(rc));
cleanup:
	http_client_response_free(&resp);
	http_client_free(client);
	free(token);
}

int agent_preflight_run(const struct agent_config *cfg, FILE *out)
{
	int failed = 0;

	check_kernel(out, &failed);
	check_btf(out, &failed);
	check_privileges(out, &failed);
	check_perf_event(out, &failed);
	check_bpf(out, &failed, cfg);
	check_kallsyms(out, &failed);
	check_spool(out, &failed, cfg);
	check_server(out, &failed, cfg);
	fprintf(out, "%s\n", failed ? "some checks failed" : "all checks passed");
	return failed;
}
