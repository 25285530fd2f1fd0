/* SPDX-License-Identifier: Apache-2.0 */
/* Real-kernel tests of the BPF sampler: counts, stacks, exactly-once drains, events, hotplug. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "agent/node/host.h"
#include "agent/node/kernel.h"
#include "agent/node/proctrack.h"
#include "agent/sampling/sampler.h"
#include "tests/support/workload.h"

/* Samples of the workload, gathered over drains. */
struct tally {
	uint32_t tgid;
	uint64_t samples;          /* all samples of the workload */
	uint64_t with_chain;       /* user stack holds chain_level_1..6 in caller order */
	uint64_t with_user;        /* non-empty user stack */
	uint64_t with_kernel;      /* non-empty kernel stack */
	uint64_t kernel_in_text;   /* kernel stacks whose frames all lie in the kernel image */
	uint64_t leaf_spin_syscalls_kernel; /* kernel stack under spin_syscalls */
	uint64_t all_samples;      /* every sample drained (any process) */
	const struct workload *w;
	const struct kernel_info *kernel;
};

static bool has_chain(const struct workload *w, const struct sysom_stack_trace *u)
{
	static const char *const chain[] = { "chain_level_6", "chain_level_5", "chain_level_4",
					     "chain_level_3", "chain_level_2", "chain_level_1",
					     "run_worker" };
	size_t next = 0;

	/* Frames are leaf first: find the chain's functions in that order. */
	for (uint16_t i = 0; i < u->nframes && next < sizeof(chain) / sizeof(chain[0]); i++) {
		/* Return addresses point after the call: look up addr - 1 for non-leaf frames. */
		uint64_t addr = i == 0 ? u->ips[i] : u->ips[i] - 1;
		int f = workload_function_at(w, addr);
		if (f >= 0 && strcmp(w->functions[f].name, chain[next]) == 0)
			next++;
	}
	return next == sizeof(chain) / sizeof(chain[0]);
}

static int tally_entry(void *ctx, const struct sampler_entry *e)
{
	struct tally *t = ctx;

	t->all_samples += e->count;
	if (e->key->tgid != t->tgid)
		return 0;
	t->samples += e->count;
	if (e->user && e->user->nframes) {
		if (getenv("SYSOM_TEST_DEBUG")) {
			for (uint16_t i = 0; i < e->user->nframes; i++) {
				int f = workload_function_at(t->w, i ? e->user->ips[i] - 1 : e->user->ips[i]);
				print_message("#   %u: %llx %s\n", i, (unsigned long long)e->user->ips[i],
					      f >= 0 ? t->w->functions[f].name : "?");
			}
		}
		t->with_user += e->count;
		if (has_chain(t->w, e->user))
			t->with_chain += e->count;
	}
	if (e->kernel && e->kernel->nframes) {
		bool in_text = true;
		t->with_kernel += e->count;
		for (uint16_t i = 0; i < e->kernel->nframes; i++) {
			struct kernel_location loc;
			kernel_resolve(t->kernel, e->kernel->ips[i], &loc);
			in_text &= loc.kind == SYSOM_OBJECT_KERNEL;
		}
		if (in_text)
			t->kernel_in_text += e->count;
		if (e->user && e->user->nframes &&
		    workload_function_at(t->w, e->user->ips[0]) < 0) /* leaf in libc read() */
			t->leaf_spin_syscalls_kernel += e->count;
	}
	return 0;
}

static int setup(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		print_message("# these tests load BPF programs and need root\n");
		return -1;
	}
	return 0;
}

/* Waits for the workload to exit without reaping it, so its CPU time stays readable. */
static void wait_exit_unreaped(const struct workload *w)
{
	siginfo_t info;

	assert_int_equal(waitid(P_PID, (id_t)w->pid, &info, WEXITED | WNOWAIT), 0);
}

static void run_and_tally(double rate, const char *mode, double seconds, struct tally *t,
			  double *cpu_seconds, struct sampler_counters *delta)
{
	struct sampler_options opts;
	struct sampler *s = NULL;
	struct sampler_counters before, after;
	struct workload w;
	struct kernel_info ki;
	char err[256];
	const char *args[] = { "--mode", mode, NULL };

	assert_int_equal(kernel_info_read(NULL, &ki), 0);
	sampler_options_default(&opts);
	opts.sample_rate = rate;
	int rc = sampler_open(&opts, NULL, NULL, &s, err, sizeof(err));
	if (rc)
		fail_msg("sampler_open: %s", err);
	assert_int_equal(sampler_counters_read(s, &before), 0);
	assert_int_equal(workload_start(&w, seconds, args), 0);
	memset(t, 0, sizeof(*t));
	t->tgid = (uint32_t)w.pid;
	t->w = &w;
	t->kernel = &ki;
	wait_exit_unreaped(&w);
	*cpu_seconds = workload_cpu_seconds(&w);
	assert_int_equal(sampler_drain(s, tally_entry, t, NULL), 0);
	/* A second drain catches nothing of the workload: everything came out the first time. */
	uint64_t first = t->samples;
	assert_int_equal(sampler_drain(s, tally_entry, t, NULL), 0);
	assert_int_equal(t->samples, first);
	assert_int_equal(sampler_counters_read(s, &after), 0);
	delta->samples = after.samples - before.samples;
	delta->ticks = after.ticks - before.ticks;
	delta->gated_out = after.gated_out - before.gated_out;
	delta->count_map_full = after.count_map_full - before.count_map_full;
	delta->stack_map_full = after.stack_map_full - before.stack_map_full;
	workload_wait(&w);
	sampler_close(s);
	kernel_info_free(&ki);
}

/* At 100%, samples ≈ Hz × CPU seconds; the known chain is in (almost) every user stack. */
static void test_full_rate_counts_and_chain(void **state)
{
	struct tally t;
	struct sampler_counters d;
	double cpu;

	(void)state;
	run_and_tally(1.0, "cpu", 2.0, &t, &cpu, &d);
	double expected = 99.0 * cpu;
	print_message("# rate 1.0: %llu samples of the workload for %.2f CPU s (expected %.0f), "
		      "%llu with the full chain\n",
		      (unsigned long long)t.samples, cpu, expected, (unsigned long long)t.with_chain);
	/* Tolerance ±25%: tick phase, scheduling jitter of a 2-core VM. */
	assert_true(cpu > 1.0);
	assert_true(t.samples >= 0.75 * expected && t.samples <= 1.25 * expected);
	assert_true(t.with_chain >= 0.95 * t.samples);
	assert_int_equal(d.count_map_full, 0);
	assert_int_equal(d.stack_map_full, 0);
	assert_int_equal(d.gated_out, 0);
}

/* At 10% (the default), samples ≈ Hz × 0.1 × CPU seconds. */
static void test_default_rate_gate(void **state)
{
	struct tally t;
	struct sampler_counters d;
	double cpu;

	(void)state;
	/* 8 s: ~800 ticks, so ±50% is ~4.5σ of the binomial (4 s failed once in ~1000 runs). */
	run_and_tally(0.10, "cpu", 8.0, &t, &cpu, &d);
	double expected = 99.0 * 0.10 * cpu;
	print_message("# rate 0.1: %llu samples for %.2f CPU s (expected %.1f); ticks %llu, gated out %llu\n",
		      (unsigned long long)t.samples, cpu, expected, (unsigned long long)d.ticks,
		      (unsigned long long)d.gated_out);
	/* Binomial: n ≈ 800 ticks, p = 0.1 → σ ≈ 8.5; accept ±50% of ~80. */
	assert_true(t.samples >= 0.5 * expected && t.samples <= 1.5 * expected);
	double gated_fraction = (double)d.gated_out / (double)d.ticks;
	assert_true(gated_fraction > 0.85 && gated_fraction < 0.95);
}

/* A syscall-heavy workload shows kernel stacks inside the kernel image, under user stacks. */
static void test_kernel_stacks(void **state)
{
	struct tally t;
	struct sampler_counters d;
	double cpu;

	(void)state;
	run_and_tally(1.0, "syscall", 2.0, &t, &cpu, &d);
	print_message("# syscall mode: %llu samples, %llu with kernel stacks, %llu all in kernel text\n",
		      (unsigned long long)t.samples, (unsigned long long)t.with_kernel,
		      (unsigned long long)t.kernel_in_text);
	assert_true(t.samples > 50);
	assert_true(t.with_kernel >= 0.5 * t.samples);
	assert_true(t.kernel_in_text >= 0.95 * t.with_kernel);
	assert_true(t.with_user >= 0.9 * t.samples);
}

struct count_ctx {
	uint64_t samples;
};

static int count_entry(void *ctx, const struct sampler_entry *e)
{
	((struct count_ctx *)ctx)->samples += e->count;
	return 0;
}

/* Draining every few milliseconds while two busy threads are sampled at 999 Hz: the drained
 * total equals the kernel's count of recorded samples exactly (none lost, none twice). */
static void test_drain_exactly_once(void **state)
{
	struct sampler_options opts;
	struct sampler *s = NULL;
	struct sampler_counters before, after;
	struct count_ctx c = { 0 };
	struct workload w;
	char err[256];
	const char *args[] = { "--threads", "2", NULL };
	int drains = 0;

	(void)state;
	sampler_options_default(&opts);
	opts.sample_rate = 1.0;
	opts.hz = 999;
	opts.include_idle = true;
	assert_int_equal(sampler_open(&opts, NULL, NULL, &s, err, sizeof(err)), 0);
	assert_int_equal(sampler_drain(s, count_entry, &c, NULL), 0);
	c.samples = 0;
	assert_int_equal(sampler_counters_read(s, &before), 0);
	assert_int_equal(workload_start(&w, 3.0, args), 0);
	uint64_t end = sysom_monotonic_ns() + 3000000000ULL;
	while (sysom_monotonic_ns() < end) {
		struct timespec pause = { 0, 3000000 };
		assert_int_equal(sampler_drain(s, count_entry, &c, NULL), 0);
		drains++;
		nanosleep(&pause, NULL);
	}
	workload_wait(&w);
	/* Stop sampling, drain what remains: the totals must now agree exactly. */
	assert_int_equal(sampler_pause(s), 0);
	assert_int_equal(sampler_drain(s, count_entry, &c, NULL), 0);
	assert_int_equal(sampler_drain(s, count_entry, &c, NULL), 0);
	assert_int_equal(sampler_counters_read(s, &after), 0);
	uint64_t recorded = after.samples - before.samples;
	print_message("# %d drains: drained %llu, kernel recorded %llu\n", drains,
		      (unsigned long long)c.samples, (unsigned long long)recorded);
	assert_true(drains > 100);
	assert_true(recorded > 1000);
	assert_int_equal(c.samples, recorded);
	sampler_close(s);
}

struct event_log {
	uint32_t tgid;
	int news, execs, exits;
	uint32_t first_exec_generation, exec_generation, exit_generation, last_new_generation;
};

static void on_event(void *ctx, const struct sysom_proc_event *ev)
{
	struct event_log *log = ctx;

	if (ev->tgid != log->tgid)
		return;
	switch (ev->type) {
	case SYSOM_PROC_EVENT_NEW:
		log->news++;
		log->last_new_generation = ev->generation;
		break;
	case SYSOM_PROC_EVENT_EXEC:
		if (log->execs++ == 0)
			log->first_exec_generation = ev->generation;
		log->exec_generation = ev->generation;
		break;
	case SYSOM_PROC_EVENT_EXIT:
		log->exits++;
		log->exit_generation = ev->generation;
		break;
	}
}

/* exec bumps the generation, the first sample of an incarnation is announced, exit is seen
 * once per process (not per thread), and the tracker resolves the right image. */
static void test_exec_and_exit_events(void **state)
{
	struct sampler_options opts;
	struct sampler *s = NULL;
	struct event_log log = { 0 };
	char err[256], cmd[4200];

	(void)state;
	sampler_options_default(&opts);
	opts.sample_rate = 1.0;
	opts.hz = 999;
	assert_int_equal(sampler_open(&opts, on_event, &log, &s, err, sizeof(err)), 0);
	/* A shell that burns CPU, then execs the (multi-threaded) workload, whose two threads
	 * exit separately: one exit event for the process, none for the thread. */
	snprintf(cmd, sizeof(cmd),
		 "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exec %s 1.5 --threads 2 --quiet",
		 fixture_path("chain_workload"));
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	log.tgid = (uint32_t)pid;
	int status;
	uint64_t deadline = sysom_monotonic_ns() + 20000000000ULL;
	while (waitpid(pid, &status, WNOHANG) == 0 && sysom_monotonic_ns() < deadline) {
		struct timespec pause = { 0, 5000000 };
		sampler_poll_events(s);
		nanosleep(&pause, NULL);
	}
	for (int i = 0; i < 20 && log.exits == 0; i++) {
		struct timespec pause = { 0, 10000000 };
		sampler_poll_events(s);
		nanosleep(&pause, NULL);
	}
	print_message("# events: %d new, %d exec (generation %u), %d exit (generation %u)\n",
		      log.news, log.execs, log.exec_generation, log.exits, log.exit_generation);
	/* Two execs: the forked child becoming sh, then sh becoming the workload; each one
	 * is a new generation. */
	assert_int_equal(log.execs, 2);
	assert_int_equal(log.exec_generation, log.first_exec_generation + 1);
	assert_int_equal(log.exits, 1);
	assert_true(log.news >= 2); /* the shell, then the workload image */
	assert_int_equal(log.exit_generation, log.exec_generation);
	assert_int_equal(log.last_new_generation, log.exec_generation);
	sampler_close(s);
}

/* Busy child for the pid-reuse test: burns CPU for `ms` milliseconds, then exits. */
static pid_t spawn_busy_child(int ms)
{
	pid_t pid = fork();

	if (pid == 0) {
		uint64_t end = sysom_monotonic_ns() + (uint64_t)ms * 1000000ULL;
		volatile uint64_t x = 0;
		while (sysom_monotonic_ns() < end)
			x++;
		_exit(0);
	}
	return pid;
}

struct reuse_log {
	uint32_t tgid;
	uint32_t generations[8];
	int count;
};

static void on_reuse_event(void *ctx, const struct sysom_proc_event *ev)
{
	struct reuse_log *log = ctx;

	if (ev->tgid == log->tgid && ev->type == SYSOM_PROC_EVENT_NEW && log->count < 8)
		log->generations[log->count++] = ev->generation;
}

struct generation_tally {
	uint32_t tgid;
	uint64_t per_generation[2];
	uint32_t generations[2];
	int distinct;
};

static int tally_generations(void *ctx, const struct sampler_entry *e)
{
	struct generation_tally *t = ctx;

	if (e->key->tgid != t->tgid)
		return 0;
	for (int i = 0; i < t->distinct; i++) {
		if (t->generations[i] == e->key->generation) {
			t->per_generation[i] += e->count;
			return 0;
		}
	}
	if (t->distinct < 2) {
		t->generations[t->distinct] = e->key->generation;
		t->per_generation[t->distinct++] = e->count;
	}
	return 0;
}

static int write_text(const char *path, const char *text);

/* Two processes with the same pid inside one drain interval: their samples carry different
 * generations, so neither is resolved against the other's mappings. */
static void test_pid_reuse(void **state)
{
	struct sampler_options opts;
	struct sampler *s = NULL;
	struct reuse_log log = { 0 };
	char err[256], last[32];

	(void)state;
	sampler_options_default(&opts);
	opts.sample_rate = 1.0;
	opts.hz = 999;
	assert_int_equal(sampler_open(&opts, on_reuse_event, &log, &s, err, sizeof(err)), 0);
	pid_t first = spawn_busy_child(300);
	assert_true(first > 0);
	log.tgid = (uint32_t)first;
	assert_int_equal(waitpid(first, NULL, 0), first);
	/* Ask the kernel to hand out the same pid next. */
	snprintf(last, sizeof(last), "%d", (int)first - 1);
	if (write_text("/proc/sys/kernel/ns_last_pid", last) != 0) {
		sampler_close(s);
		print_message("# cannot write ns_last_pid here; skipping\n");
		skip();
	}
	pid_t second = spawn_busy_child(300);
	assert_true(second > 0);
	assert_int_equal(waitpid(second, NULL, 0), second);
	if (second != first) {
		sampler_close(s);
		print_message("# another process took pid %d first; skipping\n", (int)first);
		skip();
	}
	sampler_poll_events(s);
	struct generation_tally t = { .tgid = (uint32_t)first };
	assert_int_equal(sampler_drain(s, tally_generations, &t, NULL), 0);
	print_message("# pid %d reused: NEW events with generations %u, %u; samples %llu (gen %u) + "
		      "%llu (gen %u)\n", (int)first, log.generations[0], log.generations[1],
		      (unsigned long long)t.per_generation[0], t.generations[0],
		      (unsigned long long)t.per_generation[1], t.generations[1]);
	assert_int_equal(log.count, 2);
	assert_int_equal(log.generations[1], log.generations[0] + 1);
	assert_int_equal(t.distinct, 2);
	assert_true(t.per_generation[0] > 100 && t.per_generation[1] > 100);
	sampler_close(s);
}

static int write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, text, strlen(text));
	int rc = n < 0 ? -errno : 0;
	close(fd);
	return rc;
}

/* Taking a CPU offline detaches its event; bringing it back attaches a new one. */
static void test_cpu_hotplug(void **state)
{
	struct sampler_options opts;
	struct sampler *s = NULL;
	char err[256];
	const char *online = "/sys/devices/system/cpu/cpu1/online";

	(void)state;
	if (access(online, W_OK) != 0 || sysconf(_SC_NPROCESSORS_ONLN) < 2)
		skip();
	sampler_options_default(&opts);
	assert_int_equal(sampler_open(&opts, NULL, NULL, &s, err, sizeof(err)), 0);
	uint32_t attached = sampler_attached_cpus(s);
	if (write_text(online, "0") != 0) {
		print_message("# cannot take cpu1 offline here; skipping\n");
		sampler_close(s);
		skip();
	}
	int changed = sampler_sync_cpus(s);
	uint32_t while_offline = sampler_attached_cpus(s);
	assert_int_equal(write_text(online, "1"), 0);
	int changed_back = sampler_sync_cpus(s);
	print_message("# attached %u → %u (changed %d) → %u (changed %d)\n", attached, while_offline,
		      changed, sampler_attached_cpus(s), changed_back);
	assert_int_equal(changed, 1);
	assert_int_equal(while_offline, attached - 1);
	assert_int_equal(changed_back, 1);
	assert_int_equal(sampler_attached_cpus(s), attached);
	sampler_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_rate_counts_and_chain),
		cmocka_unit_test(test_default_rate_gate),
		cmocka_unit_test(test_kernel_stacks),
		cmocka_unit_test(test_drain_exactly_once),
		cmocka_unit_test(test_exec_and_exit_events),
		cmocka_unit_test(test_pid_reuse),
		cmocka_unit_test(test_cpu_hotplug),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
