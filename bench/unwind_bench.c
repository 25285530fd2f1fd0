/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Hybrid unwinder benchmark, on the no-frame-pointer workload (tests/fixtures/nofp):
 *   accuracy  one run sampled at once by the frame-pointer sampler, the hybrid one and
 *             `perf record --call-graph dwarf`: stack and frame accuracy against the
 *             workload's known chain;
 *   cost      per-sample BPF run time of both tick programs from the kernel's BPF statistics
 *             (polled every millisecond: a window holding exactly one run gives that run's
 *             time), median and p99; marker convergence over the run;
 *   overhead  workload throughput with no sampler, the FP one and the hybrid one at 99 Hz and
 *             100% sampling, rounds interleaved, as ratios to no sampler.
 * Usage: unwind_bench [--seconds S] [--rounds N] [--no-perf]   (root; SYSOM_BUILD=build dir)
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "agent/node/host.h"
#include "common/clock.h"
#include "common/wire/wire.h"
#include "tests/support/unwind_session.h"

#define MAX_RUNS (1u << 20)
#define DRAIN_PERIOD_NS 250000000ULL
#define WINDOWS 64

struct run_times {
	uint64_t *ns;
	uint32_t count;
	uint64_t last_time, last_count;
	uint64_t total_time, total_count;
};

struct collector {
	const struct nofp_workload *n;
	const struct symtab *t;
	struct chain_accuracy acc;
};

static int collect(void *ctx, const struct sampler_entry *e)
{
	struct collector *c = ctx;

	/* The main thread's chain ends in main(); the other threads start in libc. */
	if (e->key->tgid == (uint32_t)c->n->w.pid && e->key->tid == (uint32_t)c->n->w.pid)
		chain_accuracy_add(&c->acc, c->n, c->t, e->user, e->count);
	return 0;
}

static void poll_run_times(struct unwind_session *s, struct run_times *r)
{
	uint64_t time, count;

	if (sampler_prog_stats(s->sampler, &time, &count))
		return;
	if (count == r->last_count + 1 && r->count < MAX_RUNS && r->last_count)
		r->ns[r->count++] = time - r->last_time;
	if (r->last_count) {
		r->total_time += time - r->last_time;
		r->total_count += count - r->last_count;
	}
	r->last_time = time;
	r->last_count = count;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t percentile(uint64_t *v, uint32_t n, double p)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	uint32_t i = (uint32_t)(p * (n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

static void print_accuracy(const char *name, const struct chain_accuracy *a)
{
	printf("  %-28s %8llu %14.1f%% %14.1f%%\n", name, (unsigned long long)a->samples,
	       100 * ratio(a->full_chain, a->samples), 100 * ratio(a->frames_found, a->frames_expected));
}

/* Starts `perf record --call-graph dwarf` on pid for `seconds`; its pid, or -1. */
static pid_t start_perf(pid_t pid, double seconds, const char *out)
{
	char pidbuf[32], secs[32];
	pid_t p = fork();

	if (p != 0)
		return p;
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)pid);
	snprintf(secs, sizeof(secs), "%.3f", seconds);
	int devnull = open("/dev/null", O_WRONLY);
	if (devnull >= 0) {
		dup2(devnull, STDOUT_FILENO);
		dup2(devnull, STDERR_FILENO);
	}
	execlp("perf", "perf", "record", "-q", "-F", "99", "--call-graph", "dwarf", "-p", pidbuf,
	       "-o", out, "--", "sleep", secs, (char *)NULL);
	_exit(127);
}

/* Reads `perf script -F tid,ip,sym` and scores the main thread's samples. */
static int score_perf(const char *data, const struct nofp_workload *n, struct chain_accuracy *a)
{
	char cmd[512], line[1024];
	const char *names[512];
	char *owned[512];
	int nframes = 0, tid = -1;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "perf script -i '%s' -F tid,ip,sym 2>/dev/null", data);
	f = popen(cmd, "r");
	if (!f)
		return -errno;
	for (;;) {
		char *got = fgets(line, sizeof(line), f);
		if (!got || line[0] == '\n') {
			if (nframes && tid == n->w.pid)
				chain_accuracy_add_names(a, n, names, nframes, 0, 1);
			for (int i = 0; i < nframes; i++)
				free(owned[i]);
			nframes = 0;
			tid = -1;
			if (!got)
				break;
			continue;
		}
		if (line[0] != '\t' && line[0] != ' ') {
			tid = atoi(line);
			continue;
		}
		if (line[0] == ' ') {
			tid = atoi(line);
			if (tid)
				continue;
		}
		unsigned long long ip;
		char sym[512] = "";
		if (sscanf(line, " %llx %511[^\n]", &ip, sym) < 1 || nframes == 512)
			continue;
		char *inl = strstr(sym, " (inlined)");
		if (inl)
			*inl = '\0';
		owned[nframes] = strdup(sym);
		names[nframes] = owned[nframes];
		nframes++;
	}
	return pclose(f) == 0 ? 0 : -EIO;
}

/* Iterations per second of the workload (2 threads) with a session in `mode` (or none). */
static double throughput(int mode, double seconds)
{
	static const char *const args[] = { "--threads", "2", "--report", NULL };
	struct unwind_session s;
	struct nofp_workload n;
	char err[256], line[256];
	double rate = -1;

	if (mode >= 0 && unwind_session_open(&s, (enum sysom_unwinder)mode, 99, 1.0, err,
					     sizeof(err))) {
		fprintf(stderr, "session: %s\n", err);
		return -1;
	}
	if (nofp_workload_start(&n, seconds, args) == 0) {
		uint64_t end = sysom_monotonic_ns() + (uint64_t)((seconds + 10) * 1e9);
		/* Events every 100 ms: enough to publish the workload, little CPU of our own. */
		while (mode >= 0 && waitpid(n.w.pid, NULL, WNOHANG) == 0 && sysom_monotonic_ns() < end) {
			usleep(100000);
			unwind_session_poll(&s);
		}
		unsigned long long iters;
		double secs;
		if (nofp_workload_expect(&n, "iterations ", line, sizeof(line),
					 (int)(seconds * 1000) + 10000) == 0 &&
		    sscanf(line, "iterations %llu seconds %lf", &iters, &secs) == 2 && secs > 0)
			rate = (double)iters / secs;
		workload_wait(&n.w);
	}
	if (mode >= 0)
		unwind_session_close(&s);
	return rate;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

struct accuracy_run {
	struct chain_accuracy fp, hybrid, perf;
	bool perf_ok;
	int chain_len;
	struct run_times rt_fp, rt_hy;
	struct sampler_counters counters;
	struct unwinder_stats unwinder;
	double cached_frac[WINDOWS];
	int windows;
	double seconds;
};

/* One run of the workload sampled by FP, hybrid and perf at once. 0 or -1. */
static int accuracy_run(double seconds, int stack_kb, bool use_perf, struct accuracy_run *out)
{
	struct unwind_session fp, hybrid;
	struct nofp_workload n;
	struct symtab t = { 0 };
	char err[256], stack_arg[16], perf_data[] = "/tmp/sysom-unwind-perf-XXXXXX";

	snprintf(stack_arg, sizeof(stack_arg), "%d", stack_kb);
	const char *const args[] = { "--threads", "2", "--stack-kb", stack_arg, NULL };
	if (unwind_session_open(&fp, SYSOM_UNWINDER_FP, 99, 1.0, err, sizeof(err)) ||
	    unwind_session_open(&hybrid, SYSOM_UNWINDER_HYBRID, 99, 1.0, err, sizeof(err))) {
		fprintf(stderr, "session: %s\n", err);
		return -1;
	}
	/* Publish this process before the workload starts (see tests/bpf/test_unwinder.c). */
	proctrack_on_new(hybrid.pt, (uint32_t)getpid(), 0);
	if (nofp_workload_start(&n, seconds + 3, args) || symtab_load_process(&t, n.w.pid)) {
		fprintf(stderr, "cannot start the nofp workload (build it: make)\n");
		return -1;
	}
	out->chain_len = n.chain_len;
	out->seconds = seconds;
	int perf_fd = mkstemp(perf_data);
	if (perf_fd >= 0)
		close(perf_fd);
	pid_t perf = use_perf && perf_fd >= 0 ? start_perf(n.w.pid, seconds, perf_data) : -1;

	struct collector cfp = { .n = &n, .t = &t }, chy = { .n = &n, .t = &t };
	struct sampler_counters before, now;
	sampler_counters_read(hybrid.sampler, &before);
	uint64_t start = sysom_monotonic_ns(), next_drain = start + DRAIN_PERIOD_NS;
	uint64_t end = start + (uint64_t)(seconds * 1e9), ticks = 0;
	while (sysom_monotonic_ns() < end) {
		usleep(1000);
		poll_run_times(&fp, &out->rt_fp);
		poll_run_times(&hybrid, &out->rt_hy);
		if (++ticks % 10 == 0) {
			unwind_session_poll(&fp);
			unwind_session_poll(&hybrid);
		}
		if (sysom_monotonic_ns() >= next_drain) {
			next_drain += DRAIN_PERIOD_NS;
			unwind_session_drain(&fp, collect, &cfp);
			unwind_session_drain(&hybrid, collect, &chy);
			if (sampler_counters_read(hybrid.sampler, &now) == 0 && out->windows < WINDOWS) {
				uint64_t fr = now.unwind.frames - before.unwind.frames;
				uint64_t ca = now.unwind.frames_cached - before.unwind.frames_cached;
				out->cached_frac[out->windows++] = ratio(ca, fr);
				before = now;
			}
		}
	}
	unwind_session_drain(&fp, collect, &cfp);
	unwind_session_drain(&hybrid, collect, &chy);
	sampler_counters_read(hybrid.sampler, &out->counters);
	unwinder_stats_read(hybrid.unwinder, &out->unwinder);
	out->fp = cfp.acc;
	out->hybrid = chy.acc;
	if (perf > 0) {
		int status;
		waitpid(perf, &status, 0);
		out->perf_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
			       score_perf(perf_data, &n, &out->perf) == 0;
		if (!out->perf_ok)
			fprintf(stderr, "perf record/script failed (is linux-perf installed?)\n");
	}
	unlink(perf_data);
	workload_stop(&n.w);
	symtab_free(&t);
	unwind_session_close(&hybrid);
	unwind_session_close(&fp);
	return 0;
}

static void print_run(const char *title, const struct accuracy_run *r)
{
	printf("\n%s\naccuracy (samples in the leaf)   samples stack accuracy frame accuracy\n", title);
	print_accuracy("frame pointers (kernel)", &r->fp);
	print_accuracy("sysom hybrid", &r->hybrid);
	if (r->perf_ok)
		print_accuracy("perf --call-graph dwarf", &r->perf);
}

int main(int argc, char **argv)
{
	double seconds = 10;
	int rounds = 5, deep_kb = 32;
	bool use_perf = true;
	static struct accuracy_run shallow, deep;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (strcmp(argv[i], "--deep-stack-kb") == 0 && i + 1 < argc)
			deep_kb = atoi(argv[++i]);
		else if (strcmp(argv[i], "--no-perf") == 0)
			use_perf = false;
		else {
			fprintf(stderr, "usage: unwind_bench [--seconds S] [--rounds N] "
				"[--deep-stack-kb K] [--no-perf]\n");
			return 2;
		}
	}
	shallow.rt_fp.ns = calloc(MAX_RUNS, sizeof(uint64_t));
	shallow.rt_hy.ns = calloc(MAX_RUNS, sizeof(uint64_t));
	deep.rt_fp.ns = calloc(MAX_RUNS, sizeof(uint64_t));
	deep.rt_hy.ns = calloc(MAX_RUNS, sizeof(uint64_t));
	int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (!shallow.rt_fp.ns || !shallow.rt_hy.ns || !deep.rt_fp.ns || !deep.rt_hy.ns ||
	    stats_fd < 0) {
		fprintf(stderr, "cannot enable BPF run-time statistics (root needed)\n");
		return 1;
	}
	if (accuracy_run(seconds, 0, use_perf, &shallow) ||
	    accuracy_run(seconds, deep_kb, use_perf, &deep))
		return 1;

	printf("unwind_bench: nofp_workload (chain of %d functions, -O2 -fomit-frame-pointer, "
	       "through qsort), 2 threads, %.0f s per run at 99 Hz, 100%% sampling, main thread "
	       "scored; frame pointers, hybrid and perf sample the same run\n",
	       shallow.chain_len, seconds);
	print_run("run 1: shallow stack (main is ~1 KiB below the leaf)", &shallow);
	char title[128];
	snprintf(title, sizeof(title), "run 2: deep stack (main is %d KiB below the leaf, as under "
		 "an interpreter)", deep_kb);
	print_run(title, &deep);

	struct run_times *fp = &shallow.rt_fp, *hy = &shallow.rt_hy;
	uint64_t fp_med = percentile(fp->ns, fp->count, 0.5), fp_p99 = percentile(fp->ns, fp->count, 0.99);
	uint64_t hy_med = percentile(hy->ns, hy->count, 0.5), hy_p99 = percentile(hy->ns, hy->count, 0.99);
	printf("\nper-sample BPF run time, run 1 (kernel BPF stats)  runs  median      p99     mean\n");
	printf("  frame pointers                               %7u %6llu ns %6llu ns %6.0f ns\n",
	       fp->count, (unsigned long long)fp_med, (unsigned long long)fp_p99,
	       ratio(fp->total_time, fp->total_count));
	printf("  hybrid                                       %7u %6llu ns %6llu ns %6.0f ns\n",
	       hy->count, (unsigned long long)hy_med, (unsigned long long)hy_p99,
	       ratio(hy->total_time, hy->total_count));
	printf("  hybrid / frame pointers: median %.2fx, p99 %.2fx, mean %.2fx\n",
	       ratio(hy_med, fp_med), ratio(hy_p99, fp_p99),
	       ratio(hy->total_time, hy->total_count) / ratio(fp->total_time, fp->total_count));
	printf("  BPF time as a share of the CPUs' time: frame pointers %.4f%%, hybrid %.4f%%\n",
	       100 * fp->total_time / (seconds * 1e9 * (double)libbpf_num_possible_cpus()),
	       100 * hy->total_time / (seconds * 1e9 * (double)libbpf_num_possible_cpus()));

	const struct sampler_counters *c = &shallow.counters;
	printf("\nhybrid unwinder, run 1: %llu frames, %.1f%% from cached markers, %.1f%% CFI, %.1f%% FP; "
	       "%u tables, %llu rows (%.1f KiB) for every process sampled, built in %.1f ms\n",
	       (unsigned long long)c->unwind.frames,
	       100 * ratio(c->unwind.frames_cached, c->unwind.frames),
	       100 * ratio(c->unwind.frames_dwarf, c->unwind.frames),
	       100 * ratio(c->unwind.frames_fp, c->unwind.frames), shallow.unwinder.tables,
	       (unsigned long long)shallow.unwinder.rows, shallow.unwinder.rows * 8 / 1024.0,
	       shallow.unwinder.build_ns / 1e6);
	printf("marker convergence (frames served by cached markers per 0.25 s window):");
	for (int i = 0; i < shallow.windows; i++)
		if (i < 6 || i == shallow.windows - 1)
			printf(" %s%.1f%%", i == shallow.windows - 1 && shallow.windows > 7 ? "... " : "",
			       100 * shallow.cached_frac[i]);
	printf("\n");

	double ratios_fp[64], ratios_hy[64];
	int nr = rounds < 64 ? rounds : 64;
	for (int r = 0; r < nr; r++) {
		double base = 0, with_fp = 0, with_hy = 0;
		/* Rotate the order so drift does not favour one configuration. */
		for (int k = 0; k < 3; k++) {
			int which = (k + r) % 3;
			double v = throughput(which == 0 ? -1 : which == 1 ? SYSOM_UNWINDER_FP
									  : SYSOM_UNWINDER_HYBRID,
					      seconds / 2);
			if (which == 0)
				base = v;
			else if (which == 1)
				with_fp = v;
			else
				with_hy = v;
		}
		ratios_fp[r] = base > 0 ? with_fp / base : 0;
		ratios_hy[r] = base > 0 ? with_hy / base : 0;
	}
	qsort(ratios_fp, (size_t)nr, sizeof(double), cmp_double);
	qsort(ratios_hy, (size_t)nr, sizeof(double), cmp_double);
	printf("\nthroughput at 99 Hz, 100%% sampling (%d rounds of %.1f s, median ratio to no "
	       "sampler): frame pointers %.4f, hybrid %.4f\n", nr, seconds / 2,
	       nr ? ratios_fp[nr / 2] : 0, nr ? ratios_hy[nr / 2] : 0);
	close(stats_fd);
	return 0;
}
