/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cost of the OS signal programs (bpf/ossignals.bpf.c) on a context-switch-heavy workload: two
 * threads ping-pong one byte through two pipes, N round trips. Each round times the same
 * workload with no programs attached (baseline), with the programs attached but this process
 * not tracked (what every other process on the node pays), and attached and tracked (what a
 * training job's threads pay), side by side; the switches are counted by the kernel
 * (getrusage per thread), so the cost per context switch is exact. Both threads on one CPU:
 * every round trip is two switches between them; on two CPUs: each switch is to or from idle,
 * plus a cross-CPU wakeup.
 * usage: ossignals_bench [--trips N] [--rounds R]
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_stats.h"
#include "agent/os/ossignals.h"
#include "common/error.h"

struct side {
	int in, out;      /* pipe ends */
	int cpu;
	long trips;
	bool starts;      /* writes first */
	uint64_t switches; /* voluntary + involuntary, this thread, during the loop */
};

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static uint64_t thread_switches(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	return (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
}

static void *pingpong(void *arg)
{
	struct side *s = arg;
	char byte = 0;

	pin(s->cpu);
	uint64_t before = thread_switches();
	for (long i = 0; i < s->trips; i++) {
		if (s->starts && write(s->out, &byte, 1) != 1)
			break;
		if (read(s->in, &byte, 1) != 1)
			break;
		if (!s->starts && write(s->out, &byte, 1) != 1)
			break;
	}
	s->switches = thread_switches() - before;
	return NULL;
}

/* Runs the ping-pong; returns the elapsed ns and the switches of both threads. */
static uint64_t run(long trips, int cpu_a, int cpu_b, uint64_t *switches)
{
	int ab[2], ba[2];
	pthread_t ta, tb;

	if (pipe(ab) || pipe(ba)) {
		perror("pipe");
		exit(1);
	}
	struct side a = { .in = ba[0], .out = ab[1], .cpu = cpu_a, .trips = trips, .starts = true };
	struct side b = { .in = ab[0], .out = ba[1], .cpu = cpu_b, .trips = trips };
	uint64_t t0 = bench_now_ns();
	pthread_create(&tb, NULL, pingpong, &b);
	pthread_create(&ta, NULL, pingpong, &a);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	uint64_t elapsed = bench_now_ns() - t0;
	*switches = a.switches + b.switches;
	close(ab[0]);
	close(ab[1]);
	close(ba[0]);
	close(ba[1]);
	return elapsed;
}

static struct ossignals *attach(bool track)
{
	struct ossignals_options o;
	struct ossignals *os = NULL;
	char err[256] = "";

	ossignals_options_default(&o);
	if (ossignals_open(&o, &os, err, sizeof(err))) {
		fprintf(stderr, "ossignals_bench: %s\n", err);
		exit(1);
	}
	if (track && ossignals_track(os, (uint32_t)getpid())) {
		fprintf(stderr, "ossignals_bench: cannot track this process\n");
		exit(1);
	}
	return os;
}

enum { BASE, UNTRACKED, TRACKED, MODES };

int main(int argc, char **argv)
{
	static const char *const mode_names[MODES] = { "not attached", "attached, not tracked",
						       "attached, tracked" };
	long trips = 200000;
	int rounds = 7;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--trips") && i + 1 < argc)
			trips = atol(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: ossignals_bench [--trips N] [--rounds R]\n");
			return 2;
		}
	}
	if (trips < 1000 || rounds < 1 || rounds > 99)
		return 2;
	if (geteuid() != 0) {
		fprintf(stderr, "ossignals_bench: needs root (BPF)\n");
		return 1;
	}
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int layouts = ncpu > 1 ? 2 : 1;

	printf("| ping-pong, %ld round trips (median of %d rounds) | mode | ns per round trip | "
	       "switches per trip | ns per switch | added ns per switch | ratio |\n"
	       "|---|---|---:|---:|---:|---:|---:|\n", trips, rounds);
	for (int layout = 0; layout < layouts; layout++) {
		int cpu_a = (int)ncpu - 1, cpu_b = layout ? 0 : cpu_a;
		double per_trip[MODES][99], per_switch[MODES][99], added[MODES][99], sw[MODES][99];
		struct ossignals_window w = { 0 };
		double collect_ms = 0;

		for (int r = 0; r < rounds; r++) {
			uint64_t switches, base_ns = 0, base_sw = 0;

			for (int m = BASE; m < MODES; m++) {
				struct ossignals *os = m == BASE ? NULL : attach(m == TRACKED);

				run(trips / 10, cpu_a, cpu_b, &switches); /* warm */
				uint64_t ns = run(trips, cpu_a, cpu_b, &switches);
				if (m == BASE) {
					base_ns = ns;
					base_sw = switches;
				}
				per_trip[m][r] = (double)ns / (double)trips;
				per_switch[m][r] = (double)ns / (double)switches;
				sw[m][r] = (double)switches / (double)trips;
				/* Extra time over the baseline, per switch of the baseline's count. */
				added[m][r] = ((double)ns - (double)base_ns) / (double)base_sw;
				if (os && m == TRACKED) {
					/* The agent's side: one collect of the tracked window. */
					uint64_t t0 = bench_now_ns();
					ossignals_collect(os, NULL, &w);
					collect_ms = (double)(bench_now_ns() - t0) / 1e6;
				}
				ossignals_close(os);
			}
		}
		double base = bench_median(per_trip[BASE], rounds);
		for (int m = BASE; m < MODES; m++) {
			double t = bench_median(per_trip[m], rounds);
			printf("| %s | %s | %.0f | %.2f | %.0f | %+.0f | %.2fx |\n",
			       layout ? "two CPUs (cross-CPU wakeups)" : "one CPU (thread to thread)",
			       mode_names[m], t, bench_median(sw[m], rounds), bench_median(per_switch[m], rounds),
			       m == BASE ? 0 : bench_median(added[m], rounds), t / base);
		}
		fprintf(stderr, "  (%s: last collect of the tracked window took %.2f ms, %u thread "
			"rows, %u CPU rows)\n", layout ? "two CPUs" : "one CPU", collect_ms,
			w.threads, w.cpus);
	}
	/* Where the time goes: the kernel's own per-program run time (kernel.bpf_stats_enabled,
	 * switched on for this pass only: it costs two clock reads per run itself). */
	char was[8] = "0";
	FILE *f = fopen("/proc/sys/kernel/bpf_stats_enabled", "r+");
	if (f) {
		if (!fgets(was, sizeof(was), f))
			snprintf(was, sizeof(was), "0");
		rewind(f);
		fputs("1", f);
		fclose(f);
		struct ossignals *os = attach(true);
		struct ossignals_program p;
		uint64_t switches;

		run(trips, (int)ncpu - 1, (int)ncpu - 1, &switches);
		printf("\n| program (one CPU, tracked, %ld round trips) | runs | ns per run |\n"
		       "|---|---:|---:|\n", trips);
		for (uint32_t i = 0; ossignals_program(os, i, &p) == 0; i++)
			if (p.runs)
				printf("| %s | %llu | %.0f |\n", p.tracepoint,
				       (unsigned long long)p.runs, (double)p.run_ns / (double)p.runs);
		ossignals_close(os);
		if ((f = fopen("/proc/sys/kernel/bpf_stats_enabled", "w"))) {
			fputs(was, f);
			fclose(f);
		}
	}
	return 0;
}
