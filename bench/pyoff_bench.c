/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cost of Python frames in off-CPU stacks: what the CPython walker adds to a recorded
 * thread's switch-out (bpf/profile.bpf.c, sysom_offcpu_unwind), next to the same switch-out
 * unwound natively. The workload is tests/fixtures/python/blocking.py's ping-pong: two
 * Python threads pinned to one CPU pass a byte through two pipes, so every round trip is two
 * blocking reads under the Python chain pingpong_side → pingpong_here. The process is
 * published as the agent publishes it (process tracker → hybrid unwinder tables + CPython
 * offsets); each round then times the same trips with off-CPU recording detached, recorded
 * with the interpreter withdrawn from the walker (native hybrid stacks: the cost before
 * this change), and recorded with it published (Python frames stitched in). The kernel's own
 * accounting of the sched_switch program (kernel.bpf_stats_enabled, on for a separate pass)
 * gives ns per run, unwind tail calls included. The walker is measured without the off-CPU
 * unwind budget; a last mode has the agent's default budget (0.5% of the CPU), with the share
 * of blocks past it (frame-pointer stacks) and the CPU share the unwinding took.
 * --depth D puts D more Python frames (pingpong_deep) above the blocking function: the walker's
 * cost as stacks deepen (it stops at the BPF program's frame bound).
 * usage: pyoff_bench [--python PATH] [--trips N] [--rounds R] [--depth D]
 */
#include <bpf/bpf.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_stats.h"
#include "tests/support/py_session.h"

static void die(const char *what)
{
	fprintf(stderr, "pyoff_bench: %s\n", what);
	exit(1);
}

/* Runs `trips` round trips in the child; returns elapsed ns and the switches counted. */
static uint64_t trip(FILE *to, FILE *from, long trips, uint64_t *switches)
{
	unsigned long long ns = 0, sw = 0;

	fprintf(to, "%ld\n", trips);
	fflush(to);
	if (fscanf(from, "%llu %llu", &ns, &sw) != 2)
		die("the Python workload stopped answering");
	*switches = sw ? sw : 1;
	return ns;
}

enum { DETACHED, NATIVE, PYTHON, BUDGET, MODES };

/* The agent's default off-CPU unwind budget (0.5% of a CPU: ns per second). */
#define AGENT_BUDGET_NS 5000000ULL

static void set_mode(struct py_session *s, int m, uint32_t pid, const struct py_proc *entry)
{
	/* The walker's own cost is measured unlimited; BUDGET shows what the agent's default
	 * budget leaves of it. */
	if (sampler_set_offcpu_budget_ns(s->sampler, m == BUDGET ? AGENT_BUDGET_NS : 0))
		die("cannot set the unwind budget");
	if (m == PYTHON || m == BUDGET) {
		if (bpf_map_update_elem(s->maps.py_procs, &pid, entry, BPF_ANY))
			die("cannot publish the interpreter");
	} else {
		bpf_map_delete_elem(s->maps.py_procs, &pid);
	}
	if (sampler_offcpu_enable(s->sampler, m != DETACHED))
		die("cannot attach off-CPU recording");
}

int main(int argc, char **argv)
{
	static const char *const names[MODES] = {
		"off-CPU recording detached",
		"recorded, native hybrid stacks (interpreter not published: before this change)",
		"recorded, Python frames stitched in",
		"recorded, Python frames, the agent's unwind budget (0.5% of the CPU)",
	};
	const char *python = "/usr/bin/python3";
	long trips = 20000;
	int rounds = 7, depth = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--python") && i + 1 < argc)
			python = argv[++i];
		else if (!strcmp(argv[i], "--trips") && i + 1 < argc)
			trips = atol(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--depth") && i + 1 < argc)
			depth = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: pyoff_bench [--python PATH] [--trips N] [--rounds R]"
					" [--depth D]\n");
			return 2;
		}
	}
	if (trips < 100 || rounds < 1 || rounds > 99 || depth < 0 || depth > 900)
		return 2;
	if (geteuid() != 0)
		die("needs root (BPF)");

	const char *root = getenv("SYSOM_ROOT");
	char script[4096], cpu[24], depth_text[24];
	snprintf(script, sizeof(script), "%s/tests/fixtures/python/blocking.py", root ? root : ".");
	snprintf(cpu, sizeof(cpu), "%ld", sysconf(_SC_NPROCESSORS_ONLN) - 1);
	int in[2], out[2];
	if (pipe(in) || pipe(out))
		die("pipe failed");
	pid_t pid = fork();
	if (pid < 0)
		die("fork failed");
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		snprintf(depth_text, sizeof(depth_text), "%d", depth);
		execl(python, python, script, "pingpong", cpu, depth_text, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	FILE *to = fdopen(in[1], "w"), *from = fdopen(out[0], "r");

	struct py_session s;
	struct py_proc entry;
	char err[256] = "";
	if (py_session_open(&s, (uint32_t)pid, err, sizeof(err)))
		die(err);
	/* The child spins until its first line: sampled, published, its tables loaded. */
	if (py_session_ready(&s, 60000, &entry))
		die("the Python workload was not published (unsupported interpreter?)");
	sampler_set_rate(s.sampler, 0.1); /* the agent's default from here on */

	double per_switch[MODES][99], added[MODES][99], over[MODES][99], unwind_share[MODES][99];
	uint64_t py_frames = 0, py_blocks = 0;
	for (int r = 0; r < rounds; r++) {
		uint64_t base_ns = 0, base_sw = 1, sw;
		for (int m = DETACHED; m < MODES; m++) {
			struct sampler_counters c0, c1;
			struct sysom_offcpu_cpu o0, o1;

			set_mode(&s, m, (uint32_t)pid, &entry);
			trip(to, from, trips / 10, &sw); /* warm */
			sampler_counters_read(s.sampler, &c0);
			sampler_offcpu_counters(s.sampler, &o0);
			uint64_t ns = trip(to, from, trips, &sw);
			sampler_counters_read(s.sampler, &c1);
			sampler_offcpu_counters(s.sampler, &o1);
			if (m == DETACHED) {
				base_ns = ns;
				base_sw = sw;
			}
			per_switch[m][r] = (double)ns / (double)sw;
			added[m][r] = ((double)ns - (double)base_ns) / (double)base_sw;
			/* Blocks past the budget, and the unwinding's share of the elapsed time
			 * (of the one CPU both threads run on). */
			over[m][r] = o1.blocks > o0.blocks ? (double)(o1.over_budget - o0.over_budget) /
								    (double)(o1.blocks - o0.blocks)
							   : 0.0;
			unwind_share[m][r] = ns ? (double)(o1.unwind_ns - o0.unwind_ns) / (double)ns : 0.0;
			if (m == PYTHON) {
				py_frames += c1.py.frames - c0.py.frames;
				py_blocks += o1.blocks - o0.blocks;
			}
			sampler_drain(s.sampler, NULL, NULL, NULL);
		}
	}
	printf("| Python ping-pong on one CPU (%s), %d extra frames, %ld round trips, median of "
	       "%d rounds | ns per switch | added ns per switch | blocks over budget | CPU in "
	       "unwinding |\n|---|---:|---:|---:|---:|\n",
	       python, depth, trips, rounds);
	for (int m = DETACHED; m < MODES; m++)
		printf("| %s | %.0f | %+.0f | %.3f | %.2f%% |\n", names[m],
		       bench_median(per_switch[m], rounds),
		       m == DETACHED ? 0.0 : bench_median(added[m], rounds),
		       bench_median(over[m], rounds), 100 * bench_median(unwind_share[m], rounds));
	printf("\nPython frames per parked block with the interpreter published: %.2f "
	       "(%llu frames, %llu blocks)\n",
	       py_blocks ? (double)py_frames / (double)py_blocks : 0.0,
	       (unsigned long long)py_frames, (unsigned long long)py_blocks);

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
		for (int m = NATIVE; m < MODES; m++) {
			uint64_t sw, rt0 = 0, rc0 = 0, rt1 = 0, rc1 = 0;

			set_mode(&s, m, (uint32_t)pid, &entry);
			sampler_offcpu_prog_stats(s.sampler, &rt0, &rc0);
			trip(to, from, trips, &sw);
			sampler_offcpu_prog_stats(s.sampler, &rt1, &rc1);
			printf("| %s | %llu | %.0f |\n", names[m], (unsigned long long)(rc1 - rc0),
			       rc1 > rc0 ? (double)(rt1 - rt0) / (double)(rc1 - rc0) : 0.0);
		}
		if ((f = fopen("/proc/sys/kernel/bpf_stats_enabled", "w"))) {
			fputs(was, f);
			fclose(f);
		}
	}
	fclose(to);
	fclose(from);
	waitpid(pid, NULL, 0);
	py_session_close(&s);
	return 0;
}
