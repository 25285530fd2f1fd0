/* SPDX-License-Identifier: Apache-2.0 */
/*
 * No blind jobs: how much of a freshly started job the NCCL/CUDA probes see when nobody
 * attached the job's libraries beforehand, by how the tracer learns of them:
 *   scan    periodic discovery only (/proc scans every --scan-ms; the agent's exec-time
 *           scans are 0.5, 3 and 10 s after exec, so this is the generous case)
 *   notify  ld.so's notification (_dl_debug_state), the process running on meanwhile
 *   hold    the same, the process stopped until the probes are in
 * For each: the simulated job's NCCL calls seen out of those it made (init, split,
 * all-reduce, all-gather), communicator inits seen, and the time from the job's start to
 * the first traced call and from a rank's notification to its probes being in.
 * usage: sudo SYSOM_BUILD=build loader_bench [--ranks N] [--iterations K] [--rounds R]
 *        [--scan-ms MS]
 */
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/gpu/gputrace.h"
#include "agent/gpu/nccltrack.h"
#include "common/clock.h"

struct seen {
	pid_t job;               /* the launcher: its ranks are its children */
	uint32_t mine[128], nmine, others[256], nothers;
	struct nccltrack *nt;
	uint64_t calls, inits;
	uint64_t first_entry_ns; /* CLOCK_MONOTONIC */
};

/* Whether a process is this bench's job (other jobs on the machine are traced too). */
static bool is_mine(struct seen *s, uint32_t tgid)
{
	char path[64], line[256];
	FILE *f;
	long ppid = -1;

	if (tgid == (uint32_t)s->job)
		return true;
	for (uint32_t i = 0; i < s->nmine; i++)
		if (s->mine[i] == tgid)
			return true;
	for (uint32_t i = 0; i < s->nothers; i++)
		if (s->others[i] == tgid)
			return false;
	snprintf(path, sizeof(path), "/proc/%u/status", tgid);
	if ((f = fopen(path, "r"))) {
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "PPid: %ld", &ppid) == 1)
				break;
		fclose(f);
	}
	if (ppid == s->job && s->nmine < 128) {
		s->mine[s->nmine++] = tgid;
		return true;
	}
	if (ppid >= 0 && s->nothers < 256)
		s->others[s->nothers++] = tgid;
	return false;
}

static void on_event(void *ctx, const void *data, size_t len)
{
	struct seen *s = ctx;
	struct nccltrack_call out;

	if (len >= sizeof(struct gt_dl_event) && *(const uint32_t *)data == GT_EVENT_DL_LOAD)
		return;
	if (nccltrack_event(s->nt, data, len, 0, &out) != 1 || !is_mine(s, out.tgid))
		return;
	s->calls++;
	s->inits += out.call.op == SYSOM_NCCL_COMM_INIT_RANK;
	if (!s->first_entry_ns || (uint64_t)out.call.entry_ns < s->first_entry_ns)
		s->first_entry_ns = (uint64_t)out.call.entry_ns;
}

struct run {
	double seen_fraction, inits, first_ms, attach_ms_max;
};

static int run_once(enum gputrace_loader_mode mode, int ranks, int iterations, int scan_ms,
		    struct run *out)
{
	struct gputrace_options o;
	struct nccltrack_options no;
	struct gputrace *g = NULL;
	struct gputrace_stats st;
	struct seen s = { 0 };
	char err[256], exe[512], r_arg[16], i_arg[16];
	const char *build = getenv("SYSOM_BUILD");
	int status = -1, rc;
	pid_t job;
	uint64_t t0, next_scan;

	nccltrack_options_default(&no);
	if ((rc = nccltrack_new(&no, &s.nt)))
		return rc;
	gputrace_options_default(&o);
	o.on_event = on_event;
	o.ctx = &s;
	o.loader = mode;
	o.launch_tracing = false;
	if ((rc = gputrace_open(&o, &g, err, sizeof(err)))) {
		fprintf(stderr, "loader_bench: %s\n", err);
		nccltrack_free(s.nt);
		return rc;
	}
	snprintf(exe, sizeof(exe), "%s/tests/fixtures/simjob/simjob", build ? build : "build");
	snprintf(r_arg, sizeof(r_arg), "%d", ranks);
	snprintf(i_arg, sizeof(i_arg), "%d", iterations);
	fflush(stdout); /* the child's freopen would write out a copy of the buffer */
	t0 = sysom_monotonic_ns();
	next_scan = t0 + (uint64_t)scan_ms * 1000000;
	job = fork();
	s.job = job;
	if (job == 0) {
		if (!freopen("/dev/null", "w", stdout))
			_exit(126);
		execl(exe, exe, "--ranks", r_arg, "--iterations", i_arg, "--cpu-us", "300",
		      "--kernel-us", "300", (char *)NULL);
		_exit(127);
	}
	for (;;) {
		gputrace_consume(g);
		if (mode == GPUTRACE_LOADER_OFF && sysom_monotonic_ns() >= next_scan) {
			gputrace_scan_all(g);
			next_scan += (uint64_t)scan_ms * 1000000;
		}
		if (waitpid(job, &status, WNOHANG) == job)
			break;
		usleep(200);
	}
	gputrace_consume(g);
	gputrace_stats_read(g, &st);
	/* Calls the job made: per rank init + split, an all-reduce per iteration, an
	 * all-gather every 4th, 2 destroys; ncclGetUniqueId (launcher) is not traced. */
	double made = (double)ranks * (2 + iterations + iterations / 4 + 2);
	out->seen_fraction = (double)s.calls / made;
	out->inits = (double)s.inits;
	out->first_ms = s.first_entry_ns ? (double)(s.first_entry_ns - t0) / 1e6 : -1;
	out->attach_ms_max = (double)st.dl_attach_ns_max / 1e6;
	gputrace_close(g);
	nccltrack_free(s.nt);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -ECHILD;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int ranks = 4, iterations = 200, rounds = 5, scan_ms = 500;
	static const enum gputrace_loader_mode modes[] = { GPUTRACE_LOADER_OFF,
		GPUTRACE_LOADER_NOTIFY, GPUTRACE_LOADER_HOLD };

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--ranks"))
			ranks = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--iterations"))
			iterations = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--scan-ms"))
			scan_ms = atoi(argv[i + 1]);
	}
	if (ranks < 1 || ranks > 64 || iterations < 4 || rounds < 1 || rounds > 100 || scan_ms < 1) {
		fprintf(stderr, "loader_bench: bad arguments\n");
		return 2;
	}
	printf("# %d ranks x %d iterations, %d rounds each (median, [min..max])\n", ranks,
	       iterations, rounds);
	printf("%-7s %-24s %-18s %-26s %s\n", "mode", "calls seen (fraction)", "inits seen",
	       "first traced call (ms)", "notification->attached (ms, worst)");
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		double seen[100], inits[100], first[100], attach[100];
		for (int r = 0; r < rounds; r++) {
			struct run x;
			int rc = run_once(modes[m], ranks, iterations, scan_ms, &x);
			if (rc) {
				fprintf(stderr, "loader_bench: run failed: %s\n", strerror(-rc));
				return 1;
			}
			seen[r] = x.seen_fraction, inits[r] = x.inits, first[r] = x.first_ms;
			attach[r] = x.attach_ms_max;
		}
		qsort(seen, (size_t)rounds, sizeof(double), cmp_double);
		qsort(inits, (size_t)rounds, sizeof(double), cmp_double);
		qsort(first, (size_t)rounds, sizeof(double), cmp_double);
		qsort(attach, (size_t)rounds, sizeof(double), cmp_double);
		printf("%-7s %.3f [%.3f..%.3f]    %.0f/%d [%.0f..%.0f]    %7.1f [%.1f..%.1f]       "
		       "%.1f [%.1f..%.1f]\n", gputrace_loader_mode_name(modes[m]),
		       seen[rounds / 2], seen[0], seen[rounds - 1], inits[rounds / 2], ranks,
		       inits[0], inits[rounds - 1], first[rounds / 2], first[0], first[rounds - 1],
		       attach[rounds / 2], attach[0], attach[rounds - 1]);
		fflush(stdout);
	}
	return 0;
}
