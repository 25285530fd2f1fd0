/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cost of off-CPU recording (the sched_switch program of bpf/profile.bpf.c) on a
 * context-switch-heavy workload, next to the on-CPU sampler's: two threads ping-pong one byte
 * through two pipes, both pinned to one CPU, so every round trip is two blocking switches
 * between them. Each round times the same workload with nothing attached (the scheduler's own
 * cost), with the CPU sampler alone (99 Hz, 10%: the default), with off-CPU recording
 * attached but this process not recorded (what other processes pay in "jobs" mode), recorded
 * with the default 1 ms minimum (stacks taken at every switch-out, the microsecond blocks not
 * counted), and recorded with a 1 µs minimum (nearly every block counted: the worst case).
 * Switches are counted by the kernel (getrusage per thread). User stacks are frame-pointer
 * walks here: this process is not published to the hybrid unwinder.
 * Then the cost of delivering blocks still in progress at a drain: --parked N threads of this
 * (recorded) process blocked in a pipe read for good; each round sleeps 1.1 s (so every block
 * is >= 1 s old again) and times one drain with the delivery on, and one with it off.
 * usage: offcpu_bench [--trips N] [--rounds R] [--parked N]
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "agent/sampling/sampler.h"
#include "bench/bench_stats.h"

struct side {
	int in, out;
	int cpu;
	long trips;
	bool starts;
	uint64_t switches;
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

static uint64_t run(long trips, int cpu, uint64_t *switches)
{
	int ab[2], ba[2];
	pthread_t ta, tb;

	if (pipe(ab) || pipe(ba)) {
		perror("pipe");
		exit(1);
	}
	struct side a = { .in = ba[0], .out = ab[1], .cpu = cpu, .trips = trips, .starts = true };
	struct side b = { .in = ab[0], .out = ba[1], .cpu = cpu, .trips = trips };
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

enum { BASE, SAMPLER, OFF_UNTRACKED, OFF_TRACKED, OFF_ALL_BLOCKS, MODES };

static struct sampler *open_mode(int m)
{
	struct sampler_options o;
	struct sampler *s = NULL;
	char err[256] = "";

	if (m == BASE)
		return NULL;
	sampler_options_default(&o);
	o.unwinder = SYSOM_UNWINDER_FP;
	o.offcpu_mode = m == SAMPLER ? SYSOM_OFFCPU_OFF : SYSOM_OFFCPU_JOBS;
	o.offcpu_min_ns = m == OFF_ALL_BLOCKS ? 1000 : 1000000;
	if (sampler_open(&o, NULL, NULL, &s, err, sizeof(err))) {
		fprintf(stderr, "offcpu_bench: %s\n", err);
		exit(1);
	}
	if (m >= OFF_TRACKED && sampler_offcpu_track(s, (uint32_t)getpid(), true)) {
		fprintf(stderr, "offcpu_bench: cannot record this process\n");
		exit(1);
	}
	return s;
}

/* ---- drains with blocks in progress -------------------------------------------------------- */

static int parked_fds[2];
static uint64_t delivered_ns, delivered;

static void *parked_thread(void *arg)
{
	char c;

	(void)arg;
	if (read(parked_fds[0], &c, 1) < 0)
		return NULL;
	return NULL;
}

static int count_open(void *ctx, const struct sampler_offcpu_entry *e)
{
	(void)ctx;
	delivered_ns += e->total_ns;
	delivered++;
	return 0;
}

static struct sampler *open_parked(bool open)
{
	struct sampler_options o;
	struct sampler *s = NULL;
	char err[256] = "";

	sampler_options_default(&o);
	o.unwinder = SYSOM_UNWINDER_FP;
	o.offcpu_mode = SYSOM_OFFCPU_JOBS;
	o.offcpu_open = open;
	if (sampler_open(&o, NULL, NULL, &s, err, sizeof(err)) ||
	    sampler_offcpu_track(s, (uint32_t)getpid(), true)) {
		fprintf(stderr, "offcpu_bench: %s\n", err);
		exit(1);
	}
	sampler_set_offcpu_sink(s, count_open, NULL);
	return s;
}

static int parked_drains(long n, int rounds)
{
	pthread_t *th = calloc((size_t)n, sizeof(*th));
	struct sampler *on = open_parked(true), *off = open_parked(false);
	pthread_attr_t attr;
	double t_on[99], t_off[99];
	uint64_t per_round = 0;

	if (!th || pipe(parked_fds))
		return 1;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	for (long i = 0; i < n; i++)
		if (pthread_create(&th[i], &attr, parked_thread, NULL)) {
			fprintf(stderr, "offcpu_bench: cannot start parked thread %ld\n", i);
			return 1;
		}
	sampler_drain(on, NULL, NULL, NULL);
	sampler_drain(off, NULL, NULL, NULL);
	for (int r = 0; r < rounds; r++) {
		usleep(1100 * 1000);
		uint64_t d0 = delivered, t0 = bench_now_ns();
		sampler_drain(off, NULL, NULL, NULL);
		t_off[r] = (double)(bench_now_ns() - t0) / 1e6;
		t0 = bench_now_ns();
		sampler_drain(on, NULL, NULL, NULL);
		t_on[r] = (double)(bench_now_ns() - t0) / 1e6;
		per_round = delivered - d0;
	}
	double m_on = bench_median(t_on, rounds), m_off = bench_median(t_off, rounds);
	printf("\n| one drain, %ld threads blocked for good (median of %d rounds) | ms per drain | "
	       "blocks in progress delivered | us per parked thread | ratio |\n"
	       "|---|---:|---:|---:|---:|\n", n, rounds);
	printf("| blocks in progress not read | %.2f | 0 | | 1.00x |\n", m_off);
	printf("| blocks in progress delivered | %.2f | %llu | %.2f | %.2fx |\n", m_on,
	       (unsigned long long)per_round, (m_on - m_off) * 1e3 / (double)n,
	       m_off > 0 ? m_on / m_off : 0.0);
	fprintf(stderr, "  (%.1f s of blocked time delivered in %llu parts)\n", delivered_ns / 1e9,
		(unsigned long long)delivered);
	for (long i = 0; i < n; i++)
		if (write(parked_fds[1], "x", 1) != 1)
			break;
	for (long i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	sampler_close(on);
	sampler_close(off);
	free(th);
	return 0;
}

int main(int argc, char **argv)
{
	static const char *const names[MODES] = {
		"nothing attached (the scheduler alone)", "CPU sampler (99 Hz, 10%)",
		"+ off-CPU, this process not recorded", "+ off-CPU recorded, 1 ms minimum",
		"+ off-CPU recorded, 1 us minimum (every block counted)"
	};
	long trips = 200000;
	int rounds = 7;
	long parked = 1000;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--trips") && i + 1 < argc)
			trips = atol(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--parked") && i + 1 < argc)
			parked = atol(argv[++i]);
		else {
			fprintf(stderr, "usage: offcpu_bench [--trips N] [--rounds R] [--parked N]\n");
			return 2;
		}
	}
	if (trips < 1000 || rounds < 1 || rounds > 99 || parked < 1 || parked > 4000)
		return 2;
	if (geteuid() != 0) {
		fprintf(stderr, "offcpu_bench: needs root (BPF)\n");
		return 1;
	}
	int cpu = (int)sysconf(_SC_NPROCESSORS_ONLN) - 1;
	double per_switch[MODES][99], added[MODES][99];
	uint64_t recorded = 0, blocks = 0;

	for (int r = 0; r < rounds; r++) {
		uint64_t switches, base_ns = 0, base_sw = 1;

		for (int m = BASE; m < MODES; m++) {
			struct sampler *s = open_mode(m);
			struct sysom_offcpu_cpu before = { 0 }, after = { 0 };

			run(trips / 10, cpu, &switches); /* warm */
			if (s && m != SAMPLER)
				sampler_offcpu_counters(s, &before);
			uint64_t ns = run(trips, cpu, &switches);
			if (s && m != SAMPLER)
				sampler_offcpu_counters(s, &after);
			if (m == BASE) {
				base_ns = ns;
				base_sw = switches ? switches : 1;
			}
			per_switch[m][r] = (double)ns / (double)(switches ? switches : 1);
			added[m][r] = ((double)ns - (double)base_ns) / (double)base_sw;
			if (m == OFF_ALL_BLOCKS) {
				recorded += after.recorded - before.recorded;
				blocks += after.blocks - before.blocks;
			}
			if (s)
				sampler_drain(s, NULL, NULL, NULL);
			sampler_close(s);
		}
	}
	double base = bench_median(per_switch[BASE], rounds);
	printf("| ping-pong on one CPU, %ld round trips (median of %d rounds) | ns per switch | "
	       "added ns per switch | ratio to the scheduler alone |\n|---|---:|---:|---:|\n",
	       trips, rounds);
	for (int m = BASE; m < MODES; m++) {
		double t = bench_median(per_switch[m], rounds);
		printf("| %s | %.0f | %+.0f | %.2fx |\n", names[m], t,
		       m == BASE ? 0.0 : bench_median(added[m], rounds), t / base);
	}
	fprintf(stderr, "  (1 us minimum: %llu of %llu parked blocks counted)\n",
		(unsigned long long)recorded, (unsigned long long)blocks);

	/* The kernel's own accounting of the switch program (kernel.bpf_stats_enabled, on for
	 * this pass only): ns per run, unwind tail calls included. */
	char was[8] = "0";
	FILE *f = fopen("/proc/sys/kernel/bpf_stats_enabled", "r+");
	if (f) {
		if (!fgets(was, sizeof(was), f))
			snprintf(was, sizeof(was), "0");
		rewind(f);
		fputs("1", f);
		fclose(f);
		printf("\n| sched_switch program, %ld round trips | runs | ns per run |\n"
		       "|---|---:|---:|\n", trips);
		for (int m = OFF_UNTRACKED; m < MODES; m++) {
			struct sampler *s = open_mode(m);
			uint64_t switches, rt0 = 0, rc0 = 0, rt1 = 0, rc1 = 0;

			sampler_offcpu_prog_stats(s, &rt0, &rc0);
			run(trips, cpu, &switches);
			sampler_offcpu_prog_stats(s, &rt1, &rc1);
			printf("| %s | %llu | %.0f |\n", names[m], (unsigned long long)(rc1 - rc0),
			       rc1 > rc0 ? (double)(rt1 - rt0) / (double)(rc1 - rc0) : 0.0);
			sampler_close(s);
		}
		if ((f = fopen("/proc/sys/kernel/bpf_stats_enabled", "w"))) {
			fputs(was, f);
			fclose(f);
		}
	}
	return parked_drains(parked, rounds);
}
