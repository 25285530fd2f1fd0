/* SPDX-License-Identifier: Apache-2.0 */
/* Real-kernel tests of off-CPU recording: blocked time within 10%, state, stacks, minimum. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/sampling/sampler.h"
#include "common/clock.h"

/* ---- kernel symbols (enough to name the function a kernel frame is in) ---------------------- */

struct ksym {
	uint64_t addr;
	char name[64];
};

static struct ksym *ksyms;
static size_t nksyms;

static int ksym_cmp(const void *a, const void *b)
{
	const struct ksym *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static void ksyms_load(void)
{
	FILE *f = fopen("/proc/kallsyms", "r");
	char line[512];
	size_t cap = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long addr;
		char type, name[256];
		if (sscanf(line, "%llx %c %255s", &addr, &type, name) != 3 || addr == 0 ||
		    (type != 't' && type != 'T'))
			continue;
		if (nksyms == cap) {
			cap = cap ? cap * 2 : 65536;
			ksyms = realloc(ksyms, cap * sizeof(*ksyms));
			assert_non_null(ksyms);
		}
		ksyms[nksyms].addr = addr;
		snprintf(ksyms[nksyms].name, sizeof(ksyms[nksyms].name), "%.63s", name);
		nksyms++;
	}
	fclose(f);
	qsort(ksyms, nksyms, sizeof(*ksyms), ksym_cmp);
}

static const char *ksym_name(uint64_t addr)
{
	size_t lo = 0, hi = nksyms;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (ksyms[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? ksyms[lo - 1].name : "?";
}

static bool kernel_stack_has(const struct sysom_stack_trace *k, const char *needle)
{
	for (uint16_t i = 0; k && i < k->nframes; i++)
		if (strstr(ksym_name(k->ips[i]), needle))
			return true;
	return false;
}

/* ---- the blocking threads ------------------------------------------------------------------- */

enum { T_SLEEP, T_PIPE, T_FUTEX, T_SHORT, T_COUNT };

struct worker {
	pthread_t thread;
	pid_t tid;
	uint64_t measured_ns; /* the thread's own clock around its blocking calls */
	int fds[2];           /* T_PIPE */
	/* From the drain. */
	uint64_t bpf_ns, bpf_blocks, with_kernel_sym, with_user_fn, sleep_state_ns;
	uint64_t below_minimum; /* entries whose blocks average under 1 ms, or whose longest is */
	uint64_t leaf_not_schedule; /* entries whose kernel stack's leaf is not the scheduler */
};

static struct worker workers[T_COUNT];
static const char *const kernel_needles[T_COUNT] = { "nanosleep", "pipe_read", "futex_wait",
						     "nanosleep" };

/* The syscalls are made in separate non-inlined functions: a frame-pointer walk from the
 * syscall skips the function that called libc (its return address is on the stack, not in a
 * frame), so the thread function, one level up, is the frame to look for. */
static __attribute__((noinline)) void do_nanosleep(long ns)
{
	struct timespec ts = { 0, ns };
	uint64_t t0 = sysom_monotonic_ns();

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
	workers[T_SLEEP].measured_ns += sysom_monotonic_ns() - t0;
	__asm__ volatile("" ::: "memory");
}

static __attribute__((noinline)) void do_pipe_read(int fd)
{
	char c;
	uint64_t t0 = sysom_monotonic_ns();

	assert_int_equal(read(fd, &c, 1), 1);
	workers[T_PIPE].measured_ns += sysom_monotonic_ns() - t0;
	__asm__ volatile("" ::: "memory");
}

static __attribute__((noinline)) void do_futex_wait(uint32_t *word, long ns)
{
	struct timespec ts = { 0, ns };
	uint64_t t0 = sysom_monotonic_ns();

	/* Nobody wakes it: it times out after `ns`. */
	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
	workers[T_FUTEX].measured_ns += sysom_monotonic_ns() - t0;
	__asm__ volatile("" ::: "memory");
}

static __attribute__((noinline)) void do_short_sleeps(void)
{
	struct timespec ts = { 0, 100000 }; /* 100 µs: below the 1 ms minimum */

	nanosleep(&ts, NULL);
	__asm__ volatile("" ::: "memory");
}

static void *sleep_thread(void *arg)
{
	(void)arg;
	workers[T_SLEEP].tid = (pid_t)syscall(SYS_gettid);
	for (int i = 0; i < 10; i++)
		do_nanosleep(30 * 1000 * 1000);
	return NULL;
}

static void *pipe_thread(void *arg)
{
	(void)arg;
	workers[T_PIPE].tid = (pid_t)syscall(SYS_gettid);
	for (int i = 0; i < 4; i++)
		do_pipe_read(workers[T_PIPE].fds[0]);
	return NULL;
}

static void *futex_thread(void *arg)
{
	static uint32_t word;

	(void)arg;
	workers[T_FUTEX].tid = (pid_t)syscall(SYS_gettid);
	for (int i = 0; i < 5; i++)
		do_futex_wait(&word, 50 * 1000 * 1000);
	return NULL;
}

static void *short_thread(void *arg)
{
	(void)arg;
	workers[T_SHORT].tid = (pid_t)syscall(SYS_gettid);
	for (int i = 0; i < 200; i++)
		do_short_sleeps();
	return NULL;
}

static void *(*const thread_fns[T_COUNT])(void *) = { sleep_thread, pipe_thread, futex_thread,
						      short_thread };

static bool user_stack_has_fn(const struct sysom_stack_trace *u, void *(*fn)(void *))
{
	uintptr_t start = (uintptr_t)fn;

	/* The thread functions are a few dozen instructions: a return address into one lies
	 * within its first 512 bytes (sanitizer builds included). */
	for (uint16_t i = 0; u && i < u->nframes; i++)
		if (u->ips[i] > start && u->ips[i] - start < 512)
			return true;
	return false;
}

static int tally(void *ctx, const struct sampler_offcpu_entry *e)
{
	(void)ctx;
	for (int w = 0; w < T_COUNT; w++) {
		struct worker *wk = &workers[w];
		if ((pid_t)e->key->tid != wk->tid || (pid_t)e->key->tgid != getpid())
			continue;
		wk->bpf_ns += e->total_ns;
		wk->bpf_blocks += e->count;
		if (e->total_ns < e->count * 1000000 || e->max_ns < 1000000 ||
		    e->max_ns > e->total_ns)
			wk->below_minimum++;
		if (e->key->state == SYSOM_OFFCPU_STATE_SLEEP)
			wk->sleep_state_ns += e->total_ns;
		/* __schedule, or schedule when the unwind from the tracepoint misses the
		 * __schedule frame; never the tracing's own frames (bpf_*, __traceiter_*). */
		if (e->kernel && e->kernel->nframes &&
		    strcmp(ksym_name(e->kernel->ips[0]), "__schedule") != 0 &&
		    strcmp(ksym_name(e->kernel->ips[0]), "schedule") != 0) {
			print_message("# kernel leaf %s\n", ksym_name(e->kernel->ips[0]));
			wk->leaf_not_schedule++;
		}
		if (kernel_stack_has(e->kernel, kernel_needles[w]))
			wk->with_kernel_sym += e->total_ns;
		if (user_stack_has_fn(e->user, thread_fns[w]))
			wk->with_user_fn += e->total_ns;
	}
	return 0;
}

static void run_workers(struct sampler *s)
{
	memset(workers, 0, sizeof(workers));
	assert_int_equal(pipe(workers[T_PIPE].fds), 0);
	for (int w = 0; w < T_COUNT; w++)
		assert_int_equal(pthread_create(&workers[w].thread, NULL, thread_fns[w], NULL), 0);
	/* The pipe reader blocks until each write: 80 ms apart. */
	for (int i = 0; i < 4; i++) {
		struct timespec ts = { 0, 80 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		assert_int_equal(write(workers[T_PIPE].fds[1], "x", 1), 1);
	}
	for (int w = 0; w < T_COUNT; w++)
		assert_int_equal(pthread_join(workers[w].thread, NULL), 0);
	close(workers[T_PIPE].fds[0]);
	close(workers[T_PIPE].fds[1]);
	sampler_set_offcpu_sink(s, tally, NULL);
	assert_int_equal(sampler_drain(s, NULL, NULL, NULL), 0); /* CPU samples dropped */
}

static struct sampler *open_sampler(enum sysom_offcpu_mode mode, enum sysom_unwinder unwinder)
{
	struct sampler_options opts;
	struct sampler *s = NULL;
	char err[256];

	sampler_options_default(&opts);
	opts.offcpu_mode = mode;
	opts.unwinder = unwinder;
	opts.sample_rate = 0.01;
	if (sampler_open(&opts, NULL, NULL, &s, err, sizeof(err)))
		fail_msg("sampler_open: %s", err);
	return s;
}

static void check_accuracy(const char *what)
{
	for (int w = 0; w < T_SHORT; w++) {
		struct worker *wk = &workers[w];
		double ratio = (double)wk->bpf_ns / (double)wk->measured_ns;
		print_message("# %s thread %d: measured %.1f ms, recorded %.1f ms in %llu blocks "
			      "(ratio %.3f), kernel symbol %.0f%%, user function %.0f%%\n",
			      what, w, wk->measured_ns / 1e6, wk->bpf_ns / 1e6,
			      (unsigned long long)wk->bpf_blocks, ratio,
			      100.0 * wk->with_kernel_sym / (wk->bpf_ns ? wk->bpf_ns : 1),
			      100.0 * wk->with_user_fn / (wk->bpf_ns ? wk->bpf_ns : 1));
		assert_true(ratio > 0.9 && ratio < 1.1);
		/* Interruptible sleeps, in the expected kernel function, under the thread's code. */
		assert_true(wk->sleep_state_ns >= wk->bpf_ns * 95 / 100);
		assert_true(wk->with_kernel_sym >= wk->bpf_ns * 95 / 100);
		assert_true(wk->with_user_fn >= wk->bpf_ns * 95 / 100);
		/* The tracing's own frames are skipped: kernel stacks end in the scheduler. */
		assert_int_equal(wk->leaf_not_schedule, 0);
	}
	/* 200 sleeps of 100 µs: below the minimum, unless the thread then waited that long for
	 * a CPU (off-CPU time runs to the switch-in) on this shared machine. */
	print_message("# %s: %llu of 200 short sleeps reached 1 ms\n", what,
		      (unsigned long long)workers[T_SHORT].bpf_blocks);
	assert_true(workers[T_SHORT].bpf_blocks < 100);
	assert_int_equal(workers[T_SHORT].below_minimum, 0);
}

/* JOBS mode: only this process is tracked; blocked time of each thread within ±10%. */
static void test_blocked_time_accuracy(void **state)
{
	struct sysom_offcpu_cpu before, after;
	struct sampler *s = open_sampler(SYSOM_OFFCPU_JOBS, SYSOM_UNWINDER_HYBRID);

	(void)state;
	assert_int_equal(sampler_offcpu_track(s, (uint32_t)getpid(), true), 0);
	assert_int_equal(sampler_offcpu_counters(s, &before), 0);
	run_workers(s);
	assert_int_equal(sampler_offcpu_counters(s, &after), 0);
	/* Printed before the accuracy checks: a block lost shows where (parked but not recorded,
	 * a map full, or never parked: fewer blocks than the 10 + 4 + 5 + short sleeps). */
	print_message("# jobs: %llu switches, %llu blocks parked, %llu recorded, %llu short, "
		      "start map full %llu, count map full %llu, frame-pointer stacks %llu\n",
		      (unsigned long long)(after.switches - before.switches),
		      (unsigned long long)(after.blocks - before.blocks),
		      (unsigned long long)(after.recorded - before.recorded),
		      (unsigned long long)(after.short_blocks - before.short_blocks),
		      (unsigned long long)(after.start_map_full - before.start_map_full),
		      (unsigned long long)(after.count_map_full - before.count_map_full),
		      (unsigned long long)(after.fp_fallback - before.fp_fallback));
	check_accuracy("jobs");
	/* The short sleeps were seen and skipped; the process is not published to the hybrid
	 * unwinder, so user stacks came from frame pointers. */
	assert_true(after.short_blocks - before.short_blocks >= 150);
	assert_true(after.fp_fallback - before.fp_fallback >= 19);
	assert_int_equal(after.start_map_full - before.start_map_full, 0);
	assert_int_equal(after.count_map_full - before.count_map_full, 0);
	assert_true(after.recorded - before.recorded >= 19);
	sampler_close(s);
}

/* JOBS mode records nothing of an untracked process; ALL mode records it. */
static void test_filter(void **state)
{
	struct sampler *s = open_sampler(SYSOM_OFFCPU_JOBS, SYSOM_UNWINDER_FP);

	(void)state;
	run_workers(s);
	for (int w = 0; w < T_COUNT; w++)
		assert_int_equal(workers[w].bpf_blocks, 0);
	sampler_close(s);

	s = open_sampler(SYSOM_OFFCPU_ALL, SYSOM_UNWINDER_FP);
	run_workers(s);
	check_accuracy("all");
	sampler_close(s);
}

/* Detached, nothing is recorded; re-attached, recording resumes. */
static void test_enable_disable(void **state)
{
	struct sampler *s = open_sampler(SYSOM_OFFCPU_ALL, SYSOM_UNWINDER_FP);

	(void)state;
	assert_int_equal(sampler_offcpu_enable(s, false), 0);
	sampler_drain(s, NULL, NULL, NULL);
	run_workers(s);
	for (int w = 0; w < T_COUNT; w++)
		assert_int_equal(workers[w].bpf_blocks, 0);
	assert_int_equal(sampler_offcpu_enable(s, true), 0);
	run_workers(s);
	assert_true(workers[T_SLEEP].bpf_blocks >= 9);
	sampler_close(s);
}

/* ---- a block in progress ---------------------------------------------------------------- */

static void sleep_ms_(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static struct {
	pid_t tid;
	int fds[2];
	uint64_t measured_ns;
} stuck;

struct open_tally {
	uint64_t ns, blocks, open_ns, with_pipe_read, sleep_state;
};

static int tally_stuck(void *ctx, const struct sampler_offcpu_entry *e)
{
	struct open_tally *t = ctx;

	if ((pid_t)e->key->tid != stuck.tid)
		return 0;
	t->ns += e->total_ns;
	t->blocks += e->count;
	if (kernel_stack_has(e->kernel, "pipe_read"))
		t->with_pipe_read += e->total_ns;
	if (e->key->state == SYSOM_OFFCPU_STATE_SLEEP)
		t->sleep_state += e->total_ns;
	return 0;
}

static __attribute__((noinline)) void stuck_read(void)
{
	char c;
	uint64_t t0 = sysom_monotonic_ns();

	assert_int_equal(read(stuck.fds[0], &c, 1), 1);
	stuck.measured_ns = sysom_monotonic_ns() - t0;
	__asm__ volatile("" ::: "memory");
}

static void *stuck_thread(void *arg)
{
	(void)arg;
	stuck.tid = (pid_t)syscall(SYS_gettid);
	stuck_read();
	return NULL;
}

/* A thread blocked across drains: each drain delivers its time so far (with its stacks and
 * state), the switch-in only the rest; the parts add up to the block within 10%. */
static void test_block_in_progress(void **state)
{
	struct sampler *s = open_sampler(SYSOM_OFFCPU_JOBS, SYSOM_UNWINDER_FP);
	struct open_tally first = { 0 }, second = { 0 }, rest = { 0 };
	struct sampler_drain_stats st;
	pthread_t th;

	(void)state;
	memset(&stuck, 0, sizeof(stuck));
	assert_int_equal(sampler_offcpu_track(s, (uint32_t)getpid(), true), 0);
	assert_int_equal(pipe(stuck.fds), 0);
	assert_int_equal(pthread_create(&th, NULL, stuck_thread, NULL), 0);
	sampler_drain(s, NULL, NULL, NULL); /* anything before */
	sleep_ms_(1500);
	sampler_set_offcpu_sink(s, tally_stuck, &first);
	assert_int_equal(sampler_drain(s, NULL, NULL, &st), 0);
	print_message("# in progress after 1.5 s: %.1f ms in %llu block(s), pipe_read %.0f%%\n",
		      first.ns / 1e6, (unsigned long long)first.blocks,
		      100.0 * first.with_pipe_read / (first.ns ? first.ns : 1));
	assert_true(st.offcpu_open >= 1);
	assert_int_equal(first.blocks, 1);
	assert_true(first.ns > 1300000000ULL && first.ns < 1700000000ULL);
	assert_int_equal(first.with_pipe_read, first.ns);
	assert_int_equal(first.sleep_state, first.ns);
	sleep_ms_(400); /* under the 1 s minimum since the last drain: not delivered */
	sampler_set_offcpu_sink(s, tally_stuck, &second);
	assert_int_equal(sampler_drain(s, NULL, NULL, NULL), 0);
	assert_int_equal(second.blocks, 0);
	sleep_ms_(800);
	assert_int_equal(sampler_drain(s, NULL, NULL, NULL), 0);
	assert_int_equal(second.blocks, 1);
	assert_int_equal(write(stuck.fds[1], "x", 1), 1);
	assert_int_equal(pthread_join(th, NULL), 0);
	sampler_set_offcpu_sink(s, tally_stuck, &rest);
	assert_int_equal(sampler_drain(s, NULL, NULL, NULL), 0);
	uint64_t sum = first.ns + second.ns + rest.ns;
	print_message("# block of %.1f ms recorded as %.1f + %.1f + %.1f ms (ratio %.3f)\n",
		      stuck.measured_ns / 1e6, first.ns / 1e6, second.ns / 1e6, rest.ns / 1e6,
		      (double)sum / (double)stuck.measured_ns);
	assert_true((double)sum / (double)stuck.measured_ns > 0.9 &&
		    (double)sum / (double)stuck.measured_ns < 1.1);
	close(stuck.fds[0]);
	close(stuck.fds[1]);
	sampler_close(s);
}

static int setup(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		print_message("# these tests load BPF programs and need root\n");
		return -1;
	}
	ksyms_load();
	return nksyms > 1000 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	free(ksyms);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blocked_time_accuracy),
		cmocka_unit_test(test_filter),
		cmocka_unit_test(test_enable_disable),
		cmocka_unit_test(test_block_in_progress),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
