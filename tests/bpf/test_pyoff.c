/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Real-kernel tests of Python frames in off-CPU stacks: tests/fixtures/python/blocking.py
 * blocks three threads in known Python functions (time.sleep, queue.get, socket recv) under
 * every CPython 3.10–3.13 on the machine; the sched_switch program's stacks, with the
 * interpreter published the way the agent publishes it, carry each block's Python chain
 * (named from the process by the agent's resolver) for ≥ 90% of the blocked time; with the
 * interpreter withdrawn, the same blocks carry no Python frame; the off-CPU unwind budget
 * bounds what unwinding a thread that blocks very often costs its CPU.
 */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <cmocka.h>

#include "bpf/pyframes.h"
#include "tests/support/py_session.h"

#define BLOCK_S 3

/* Every CPython 3.10–3.13 of the machine (pyenv builds, Debian's), as e2e tests find them. */
static const char *const patterns[] = {
	"/root/.pyenv/versions/3.10*/bin/python3.10", "/root/.pyenv/versions/3.11*/bin/python3.11",
	"/root/.pyenv/versions/3.12*/bin/python3.12", "/root/.pyenv/versions/3.13*/bin/python3.13",
	"/usr/bin/python3.11",
};
static char interpreters[16][512];
static size_t ninterpreters;

static void find_interpreters(void)
{
	ninterpreters = 0;
	for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++) {
		glob_t g;
		if (glob(patterns[i], 0, NULL, &g) != 0)
			continue;
		for (size_t j = 0; j < g.gl_pathc && ninterpreters < 16; j++)
			if (access(g.gl_pathv[j], X_OK) == 0)
				snprintf(interpreters[ninterpreters++], sizeof(interpreters[0]), "%s",
					 g.gl_pathv[j]);
		globfree(&g);
	}
}

/* The chains of the three blocking threads, innermost first (as a user stack lists them). */
static const char *const chains[][6] = {
	{ "wait_here", "middle", "outer", "block", "main", "<module>" },
	{ "queue_wait", "queue_worker", NULL },
	{ "socket_wait", "socket_worker", NULL },
};

struct tally {
	struct py_session *s;
	uint32_t pid;
	uint64_t total_ns, chain_ns, python_frames, unresolved;
};

static bool has_chain(const char *const *names, int n, const char *const *chain)
{
	int len = 0;

	while (len < 6 && chain[len])
		len++;
	for (int i = 0; i + len <= n; i++) {
		int j = 0;
		while (j < len && !strcmp(names[i + j], chain[j]))
			j++;
		if (j == len)
			return true;
	}
	return false;
}

static int tally(void *ctx, const struct sampler_offcpu_entry *e)
{
	struct tally *t = ctx;
	static char names[SYSOM_PROFILE_MAX_DEPTH][128];
	const char *ptrs[SYSOM_PROFILE_MAX_DEPTH];
	int n = 0;

	if (e->key->tgid != t->pid)
		return 0;
	t->total_ns += e->total_ns;
	for (uint16_t i = 0; e->user && i < e->user->nframes && i < SYSOM_PROFILE_MAX_DEPTH; i++) {
		struct py_name name;
		if (!PY_FRAME_IS(e->user->ips[i]))
			continue;
		t->python_frames += e->count;
		if (pyframes_resolve(t->s->py, e->key->tgid, e->key->generation, e->user->ips[i],
				     &name)) {
			t->unresolved++;
			continue;
		}
		/* Only the fixture's frames: 3.10's threading frames sit between too. */
		if (!strstr(name.filename, "blocking.py"))
			continue;
		snprintf(names[n], sizeof(names[n]), "%s", name.qualname);
		ptrs[n] = names[n];
		n++;
	}
	/* The block's kernel part: the scheduler under the blocking call. */
	if (!e->kernel || !e->kernel->nframes)
		return 0;
	for (size_t c = 0; c < sizeof(chains) / sizeof(chains[0]); c++)
		if (has_chain(ptrs, n, chains[c])) {
			t->chain_ns += e->total_ns;
			break;
		}
	return 0;
}

/* Runs blocking.py under `python`; `publish`: the interpreter stays published while it
 * blocks (else it is withdrawn after the session found it). */
static void run_one(const char *python, bool publish, struct tally *t)
{
	const char *root = getenv("SYSOM_ROOT");
	char script[4096], go[64], err[256] = "", seconds[16];
	struct py_session s;
	struct py_proc entry;
	pid_t pid;
	int status;

	snprintf(script, sizeof(script), "%s/tests/fixtures/python/blocking.py",
		 root ? root : ".");
	snprintf(go, sizeof(go), "/tmp/sysom-test-pyoff.%d", (int)getpid());
	snprintf(seconds, sizeof(seconds), "%d", BLOCK_S);
	unlink(go);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		if (null >= 0)
			dup2(null, 1);
		execl(python, python, script, "block", go, seconds, (char *)NULL);
		_exit(127);
	}
	if (py_session_open(&s, (uint32_t)pid, err, sizeof(err)))
		fail_msg("py_session_open: %s", err);
	if (py_session_ready(&s, 90000, &entry)) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		py_session_close(&s);
		fail_msg("%s: not published with its unwind tables within 90 s", python);
	}
	if (!publish)
		assert_int_equal(bpf_map_delete_elem(s.maps.py_procs, &(uint32_t){ (uint32_t)pid }), 0);
	memset(t, 0, sizeof(*t));
	t->s = &s;
	t->pid = (uint32_t)pid;
	FILE *f = fopen(go, "w");
	assert_non_null(f);
	fclose(f);
	/* Drained while the process lives (its code objects are read to name the frames). */
	usleep((BLOCK_S * 1000 - 400) * 1000);
	assert_int_equal(py_session_drain(&s, tally, t), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	unlink(go);
	py_session_close(&s);
}

static void test_offcpu_python_chains(void **state)
{
	int ran = 0;

	(void)state;
	for (size_t i = 0; i < ninterpreters; i++) {
		struct tally t;
		run_one(interpreters[i], true, &t);
		print_message("# %s: %.0f of %.0f ms blocked under a known Python chain (%.3f), "
			      "%llu Python frames, %llu unresolved\n",
			      interpreters[i], t.chain_ns / 1e6, t.total_ns / 1e6,
			      t.total_ns ? (double)t.chain_ns / (double)t.total_ns : 0.0,
			      (unsigned long long)t.python_frames, (unsigned long long)t.unresolved);
		/* Three threads blocked for about BLOCK_S - 0.4 s each before the drain. */
		assert_true(t.total_ns >= 3ULL * 1000000000ULL);
		assert_true(t.chain_ns * 10 >= t.total_ns * 9);
		ran++;
	}
	if (!ran)
		skip();
}

/* Control: the same blocks with the interpreter withdrawn carry no Python frame. */
static void test_offcpu_withdrawn_is_native(void **state)
{
	struct tally t;

	(void)state;
	for (size_t i = 0; i < ninterpreters; i++) {
		run_one(interpreters[i], false, &t);
		print_message("# %s withdrawn: %.0f ms blocked, %llu Python frames\n",
			      interpreters[i], t.total_ns / 1e6,
			      (unsigned long long)t.python_frames);
		assert_true(t.total_ns >= 3ULL * 1000000000ULL);
		assert_int_equal(t.python_frames, 0);
		assert_int_equal(t.chain_ns, 0);
		return;
	}
	skip();
}

/* The ping-pong of blocking.py (two threads on one CPU passing a byte through pipes, the
 * blocking reads DEPTH Python frames deep): `trips` round trips; elapsed ns. */
static uint64_t pingpong(FILE *to, FILE *from, long trips)
{
	unsigned long long ns = 0, sw = 0;

	fprintf(to, "%ld\n", trips);
	fflush(to);
	assert_int_equal(fscanf(from, "%llu %llu", &ns, &sw), 2);
	return ns;
}

/*
 * The off-CPU unwind budget: threads that block ~40,000 times a second 100 Python frames deep
 * cost their CPU ~20 µs of unwinding per block without it. With a budget of 1 ms per second of
 * a CPU, the unwinding takes no more than what accrued (one second's worth banked, plus the
 * rate over the run, plus one unwind's overshoot per CPU) and the rest of the blocks get
 * frame-pointer user stacks, counted; with no limit, none is over budget and the unwinding
 * takes many times as long. A budget above one second per second is refused.
 */
static void test_offcpu_unwind_budget(void **state)
{
	const char *root = getenv("SYSOM_ROOT");
	char script[4096], cpu[24], err[256] = "";
	struct sysom_offcpu_cpu o0, o1;
	struct py_session s;
	struct py_proc entry;
	const uint64_t budget = 1000000; /* ns per s */
	long ncpus = sysconf(_SC_NPROCESSORS_ONLN);
	int in[2], out[2];
	pid_t pid;

	(void)state;
	if (!ninterpreters)
		skip();
	snprintf(script, sizeof(script), "%s/tests/fixtures/python/blocking.py", root ? root : ".");
	snprintf(cpu, sizeof(cpu), "%ld", ncpus - 1);
	assert_int_equal(pipe(in), 0);
	assert_int_equal(pipe(out), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		execl(interpreters[0], interpreters[0], script, "pingpong", cpu, "100", (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	FILE *to = fdopen(in[1], "w"), *from = fdopen(out[0], "r");
	assert_non_null(to);
	assert_non_null(from);
	if (py_session_open(&s, (uint32_t)pid, err, sizeof(err)))
		fail_msg("py_session_open: %s", err);
	if (py_session_ready(&s, 90000, &entry)) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		py_session_close(&s);
		fail_msg("%s: not published with its unwind tables within 90 s", interpreters[0]);
	}
	assert_int_equal(sampler_set_offcpu_budget_ns(s.sampler, 1000000001ULL), -EINVAL);

	assert_int_equal(sampler_set_offcpu_budget_ns(s.sampler, budget), 0);
	pingpong(to, from, 2000); /* spends what was banked */
	assert_int_equal(sampler_offcpu_counters(s.sampler, &o0), 0);
	uint64_t ns = pingpong(to, from, 20000);
	assert_int_equal(sampler_offcpu_counters(s.sampler, &o1), 0);
	uint64_t blocks = o1.blocks - o0.blocks, over = o1.over_budget - o0.over_budget;
	uint64_t spent = o1.unwind_ns - o0.unwind_ns;
	/* Per CPU: one second's worth banked + the rate over the run + one unwind (< 1 ms). */
	uint64_t bound = (uint64_t)ncpus * (budget + budget * ns / 1000000000ULL + 1000000);
	print_message("# budget %llu ns/s: %llu blocks in %.0f ms, %llu over budget, %.2f ms "
		      "unwinding (bound %.2f ms)\n", (unsigned long long)budget,
		      (unsigned long long)blocks, ns / 1e6, (unsigned long long)over, spent / 1e6,
		      bound / 1e6);
	assert_true(blocks >= 20000);
	assert_true(spent <= bound);
	assert_true(over * 2 >= blocks);

	assert_int_equal(sampler_set_offcpu_budget_ns(s.sampler, 0), 0);
	assert_int_equal(sampler_offcpu_counters(s.sampler, &o0), 0);
	ns = pingpong(to, from, 20000);
	assert_int_equal(sampler_offcpu_counters(s.sampler, &o1), 0);
	blocks = o1.blocks - o0.blocks;
	over = o1.over_budget - o0.over_budget;
	uint64_t unlimited = o1.unwind_ns - o0.unwind_ns;
	print_message("# no budget: %llu blocks in %.0f ms, %llu over budget, %.2f ms unwinding "
		      "(%.1f µs per block)\n", (unsigned long long)blocks, ns / 1e6,
		      (unsigned long long)over, unlimited / 1e6,
		      blocks ? unlimited / 1e3 / (double)blocks : 0.0);
	assert_int_equal(over, 0);
	assert_true(unlimited > 4 * spent);

	fclose(to);
	fclose(from);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	py_session_close(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_offcpu_python_chains),
		cmocka_unit_test(test_offcpu_withdrawn_is_native),
		cmocka_unit_test(test_offcpu_unwind_budget),
	};
	if (geteuid() != 0) {
		print_message("# these tests load BPF programs and need root\n");
		return 1;
	}
	find_interpreters();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
