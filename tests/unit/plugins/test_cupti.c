/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUPTI activity library: its per-window kernel table on synthetic executions, then the
 * built libsysom-cupti.so injected as the CUDA driver does (InitializeInjection) over the fake
 * CUPTI (tests/fixtures/simjob/libcupti.so), with a test-owned socket standing in for the
 * agent: synthetic kernel activity buffers in, GPU_KERNEL tables and counters out, the last
 * window flushed at exit; another subscriber present → it steps aside and says so once; no
 * agent or no CUPTI → nothing enabled. Each injection runs in its own child process.
 */
#include <dlfcn.h>
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

#include "plugins/cupti/kernel_table.h"
#include "tests/unit/plugins/record_rx.h"

static char dir[64], sock_path[108], log_path[128];

/* ---- the kernel table ---- */

static void test_table_folds(void **state)
{
	struct kernel_table *t = malloc(sizeof(*t));

	(void)state;
	assert_non_null(t);
	kernel_table_reset(t);
	assert_int_equal(kernel_table_add(t, "gemm", 0, 7, 1000, 2000), 0);    /* 1 µs */
	assert_int_equal(kernel_table_add(t, "gemm", 0, 7, 5000, 8000), 0);    /* 3 µs */
	assert_int_equal(kernel_table_add(t, "gemm", 0, 7, 9000, 9500), 0);    /* 0.5 µs */
	assert_int_equal(kernel_table_add(t, "gemm", 1, 7, 0, 100000), 0);     /* other device */
	assert_int_equal(kernel_table_add(t, "gemm", 0, 8, 0, 10), 0);         /* other stream */
	assert_int_equal(kernel_table_add(t, "gemm_bwd", 0, 7, 10, 5), 0);     /* end < start: 0 */
	assert_int_equal(kernel_table_add(t, "", 0, 7, 0, 1), -EINVAL);
	assert_int_equal(kernel_table_add(t, NULL, 0, 7, 0, 1), -EINVAL);
	assert_int_equal(t->nkeys, 4);
	assert_int_equal(t->folded, 6);
	assert_int_equal(t->dropped, 2);

	const struct kernel_key *k = NULL;
	for (uint32_t i = 0; i < KT_MAX_KEYS; i++)
		if (t->keys[i].name_off != UINT32_MAX && !strcmp(t->names + t->keys[i].name_off, "gemm") &&
		    t->keys[i].device == 0 && t->keys[i].stream == 7)
			k = &t->keys[i];
	assert_non_null(k);
	assert_int_equal(k->r.count, 3);
	assert_int_equal(k->r.total_ns, 4500);
	assert_int_equal(k->r.min_ns, 500);
	assert_int_equal(k->r.max_ns, 3000);
	assert_int_equal(k->r.hist[0], 1); /* < 1 µs */
	assert_int_equal(k->r.hist[1], 1); /* [1, 2) µs */
	assert_int_equal(k->r.hist[2], 1); /* [2, 4) µs */
	kernel_table_reset(t);
	assert_int_equal(t->nkeys, 0);
	assert_int_equal(t->folded, 0);
	free(t);
}

/* Bounded: keys past 7/8 of the table, and names, are dropped and counted; long names cut. */
static void test_table_bounds(void **state)
{
	struct kernel_table *t = malloc(sizeof(*t));
	char name[2048];
	uint32_t limit = KT_MAX_KEYS / 8 * 7;

	(void)state;
	assert_non_null(t);
	kernel_table_reset(t);
	for (uint32_t i = 0; i < limit; i++) {
		snprintf(name, sizeof(name), "k%u", i);
		assert_int_equal(kernel_table_add(t, name, 0, 0, 0, 1000), 0);
	}
	assert_int_equal(kernel_table_add(t, "one_too_many", 0, 0, 0, 1), -ENOSPC);
	assert_int_equal(kernel_table_add(t, "k5", 0, 0, 0, 1000), 0); /* existing keys still fold */
	assert_int_equal(t->dropped, 1);
	kernel_table_reset(t);
	memset(name, 'x', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	assert_int_equal(kernel_table_add(t, name, 0, 0, 0, 1), 0);
	assert_int_equal(kernel_table_add(t, name, 0, 0, 0, 1), 0); /* same (cut) key */
	assert_int_equal(t->nkeys, 1);
	assert_int_equal(strlen(t->names), KT_NAME_MAX);
	/* Name storage runs out before keys do with 1023-byte names. */
	kernel_table_reset(t);
	int rc = 0;
	for (uint32_t i = 0; rc == 0 && i < limit; i++) {
		snprintf(name, sizeof(name), "%u", i);
		name[strlen(name)] = 'y';
		rc = kernel_table_add(t, name, 0, 0, 0, 1);
	}
	assert_int_equal(rc, -ENOSPC);
	assert_true(t->names_len <= KT_NAME_BYTES);
	free(t);
}

/* ---- injection ---- */

static void *load(const char *rel)
{
	const char *build = getenv("SYSOM_BUILD");
	char path[4096];
	void *h;

	snprintf(path, sizeof(path), "%s/%s", build ? build : "build", rel);
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
	return h;
}

static void fake_path(char *out, size_t len)
{
	const char *build = getenv("SYSOM_BUILD");

	snprintf(out, len, "%s/tests/fixtures/simjob/libcupti.so", build ? build : "build");
}

typedef void (*executed_fn)(const char *, uint32_t, uint32_t, uint64_t, uint64_t);

struct fake {
	executed_fn executed;
	void (*taken)(int);
	void (*drop)(uint64_t);
	int (*enabled)(void);
};

static struct fake fake_bind(void)
{
	char path[4096];
	struct fake f;
	void *h;

	fake_path(path, sizeof(path));
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	CHECK(h);
	*(void **)&f.executed = dlsym(h, "fake_cupti_kernel_executed");
	*(void **)&f.taken = dlsym(h, "fake_cupti_set_subscriber_taken");
	*(void **)&f.drop = dlsym(h, "fake_cupti_drop");
	*(void **)&f.enabled = dlsym(h, "fake_cupti_enabled");
	CHECK(f.executed && f.taken && f.drop && f.enabled);
	return f;
}

static int inject(void)
{
	void *lib = load("lib/libsysom-cupti.so");
	int (*init)(void);

	CHECK(lib);
	*(void **)&init = dlsym(lib, "InitializeInjection");
	CHECK(init);
	return init();
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts))
		;
}

/* Runs `fn` in a child (stderr to log_path) with the agent socket and the fake CUPTI
 * configured as given; returns its exit status. */
static int run_child(void (*fn)(void), bool agent, const char *cupti)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		char path[4096];
		int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd >= 0) {
			dup2(fd, 2);
			close(fd);
		}
		if (agent)
			setenv("SYSOM_SOCKET_PATH", sock_path, 1);
		else
			unsetenv("SYSOM_SOCKET_PATH");
		if (cupti) {
			setenv("SYSOM_CUPTI_LIBRARY", cupti, 1);
		} else {
			fake_path(path, sizeof(path));
			setenv("SYSOM_CUPTI_LIBRARY", path, 1);
		}
		setenv("SYSOM_CUPTI_WINDOW_MS", "50", 1);
		fn();
		exit(0); /* exit, not _exit: the library flushes its last window at exit */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

static void scenario_windows(void)
{
	struct fake f = fake_bind();

	CHECK(inject() == 1);
	CHECK(f.enabled());
	for (int i = 0; i < 10; i++)
		f.executed("sim_gemm_fwd", 0, 7, 1000000 + 10000ull * i, 1001000 + 10000ull * i);
	f.executed("sim_gemm_fwd", 0, 8, 0, 2000);
	f.executed("sim_gemm_fwd", 0, 8, 0, 2000);
	for (int i = 0; i < 3; i++)
		f.executed("_Z6reduceILi4EEvPf", 1, 7, 0, 5000);
	f.drop(4);
	sleep_ms(200); /* a few windows close and are sent */
	for (int i = 0; i < 5; i++)
		f.executed("sim_gemm_fwd", 0, 7, 0, 3000); /* only the exit flush sends these */
}

static void expect_log(const char *fragment, int times)
{
	char buf[8192] = { 0 };
	FILE *fp = fopen(log_path, "r");
	int n = 0;

	assert_non_null(fp);
	size_t got = fread(buf, 1, sizeof(buf) - 1, fp);
	buf[got] = '\0';
	fclose(fp);
	for (const char *p = buf; (p = strstr(p, fragment)); p++)
		n++;
	if (n != times)
		fail_msg("log has '%s' %d times (want %d): %s", fragment, n, times, buf);
}

static void test_windows_and_exit_flush(void **state)
{
	int lfd = rx_listen(sock_path);
	struct rx rx;

	(void)state;
	assert_true(lfd >= 0);
	rx_init(&rx);
	assert_int_equal(run_child(scenario_windows, true, NULL), 0);
	rx_drain(lfd, &rx, 300);
	close(lfd);
	assert_int_equal(rx.bad, 0);
	assert_int_equal(rx.hello.component, SYSOM_COMPONENT_CUPTI);
	assert_int_equal(rx.hello.interface, 13);
	assert_non_null(strstr(rx.hello.name, "libsysom-cupti"));
	assert_non_null(strstr(rx.hello.name, "CUPTI API 130001"));
	assert_true(rx.tables >= 2); /* a window during the run, and the exit flush */
	assert_int_equal(rx.nkernels, 3);
	for (int i = 0; i < rx.nkernels; i++) {
		const struct sysom_rec_kernel *k = &rx.kernels[i].r;
		uint64_t in_hist = 0;
		for (int b = 0; b < SYSOM_REC_HIST_BUCKETS; b++)
			in_hist += k->hist[b];
		assert_int_equal(in_hist, k->count);
		if (!strcmp(rx.kernels[i].name, "sim_gemm_fwd") && k->stream == 7) {
			assert_int_equal(k->count, 15);
			assert_int_equal(k->total_ns, 10 * 1000 + 5 * 3000);
			assert_int_equal(k->min_ns, 1000);
			assert_int_equal(k->max_ns, 3000);
			assert_int_equal(k->hist[1], 10);
			assert_int_equal(k->hist[2], 5);
		} else if (!strcmp(rx.kernels[i].name, "sim_gemm_fwd")) {
			assert_int_equal(k->stream, 8);
			assert_int_equal(k->count, 2);
		} else {
			assert_string_equal(rx.kernels[i].name, "_Z6reduceILi4EEvPf");
			assert_int_equal(k->device, 1);
			assert_int_equal(k->count, 3);
			assert_int_equal(k->total_ns, 15000);
		}
	}
	assert_int_equal(rx.stats[SYSOM_STAT_CUPTI_RECORDS], 20);
	assert_int_equal(rx.stats[SYSOM_STAT_CUPTI_DROPPED], 4);
	assert_true(rx.stats[SYSOM_STAT_WINDOWS] >= 2);
	expect_log("sysom-cupti", 0);
}

/* LeakSanitizer's exit-time check in a child forked from a multithreaded process can wait
 * forever on an allocator lock another thread held at fork() (seen with the library's window
 * thread): LSan asks this documented hook first, and the fork scenario's child turns it off. */
static volatile int lsan_off;
int __lsan_is_turned_off(void);
__attribute__((visibility("default"), used)) int __lsan_is_turned_off(void)
{
	return lsan_off;
}

/* Fork safety: a child of the injected process inherits CUPTI's state but not the library's
 * thread; whatever it does (kernels, exit handlers) must send nothing and not crash. */
static void scenario_fork(void)
{
	struct fake f = fake_bind();
	pid_t pid;
	int status;

	CHECK(inject() == 1);
	f.executed("parent_k", 0, 1, 0, 4000);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		lsan_off = 1;
		for (int i = 0; i < 5; i++)
			f.executed("child_only", 0, 1, 0, 1000);
		sleep_ms(120); /* windows would have closed, had the child a thread */
		exit(0);       /* runs the library's exit handler: it must stay silent */
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	f.executed("parent_k", 0, 1, 0, 2000);
	sleep_ms(100);
}

static void test_fork_child_silent(void **state)
{
	int lfd = rx_listen(sock_path);
	struct rx rx;

	(void)state;
	assert_true(lfd >= 0);
	rx_init(&rx);
	assert_int_equal(run_child(scenario_fork, true, NULL), 0);
	rx_drain(lfd, &rx, 300);
	close(lfd);
	assert_int_equal(rx.bad, 0);
	assert_int_equal(rx.nkernels, 1);
	assert_string_equal(rx.kernels[0].name, "parent_k");
	assert_int_equal(rx.kernels[0].r.count, 2);
	assert_int_equal(rx.kernels[0].r.total_ns, 6000);
	assert_int_equal(rx.kernels[0].r.min_ns, 2000);
	assert_int_equal(rx.kernels[0].r.max_ns, 4000);
	assert_int_equal(rx.stats[SYSOM_STAT_CUPTI_RECORDS], 2);
	expect_log("sysom-cupti", 0);
}

static void scenario_taken(void)
{
	struct fake f = fake_bind();

	f.taken(1); /* Nsight or Kineto got there first */
	CHECK(inject() == 1);
	CHECK(inject() == 1); /* a second call changes nothing, says nothing */
	CHECK(!f.enabled());
	f.executed("k", 0, 0, 0, 1);
	sleep_ms(100);
}

static void test_steps_aside(void **state)
{
	int lfd = rx_listen(sock_path);
	struct rx rx;

	(void)state;
	assert_true(lfd >= 0);
	rx_init(&rx);
	assert_int_equal(run_child(scenario_taken, true, NULL), 0);
	rx_drain(lfd, &rx, 200);
	close(lfd);
	expect_log("another CUPTI subscriber is active", 1);
	expect_log("stepping aside", 1);
	assert_int_equal(rx.tables, 0);
	assert_int_equal(rx.bad, 0);
}

static void scenario_silent(void)
{
	CHECK(inject() == 1);
	sleep_ms(80);
}

static void scenario_no_agent(void)
{
	struct fake f = fake_bind();

	CHECK(inject() == 1);
	CHECK(!f.enabled()); /* no agent: CUPTI is not even asked */
}

static void scenario_no_timing(void)
{
	struct fake f = fake_bind();

	CHECK(inject() == 1);
	CHECK(!f.enabled()); /* refused: activity never enabled */
}

static void test_no_agent_no_cupti(void **state)
{
	(void)state;
	assert_int_equal(run_child(scenario_no_agent, false, NULL), 0);
	expect_log("sysom-cupti", 0);
	assert_int_equal(run_child(scenario_silent, true, "/nonexistent/libcupti.so"), 0);
	expect_log("no CUPTI library found", 1);
}

/* A CUPTI of another CUDA is refused before it is used (a CUDA 10.2 CUPTI crashed a CUDA 13
 * PyTorch process on a real GPU); one of CUDA 12 is still read. */
static void test_refuses_unfitting_cupti(void **state)
{
	int lfd = rx_listen(sock_path);
	struct rx rx;

	(void)state;
	assert_true(lfd >= 0);
	rx_init(&rx);
	setenv("FAKE_CUPTI_API_VERSION", "12", 1);
	assert_int_equal(run_child(scenario_no_timing, true, NULL), 0);
	expect_log("CUPTI API 12 (CUDA 10), older than this library reads (CUDA 12)", 1);
	expect_log("no fitting CUPTI library found", 1);
	setenv("FAKE_CUPTI_API_VERSION", "28", 1); /* CUDA 12.9 Update 1 */
	assert_int_equal(run_child(scenario_windows, true, NULL), 0);
	unsetenv("FAKE_CUPTI_API_VERSION");
	expect_log("not using", 0);
	rx_drain(lfd, &rx, 300);
	close(lfd);
	assert_true(rx.tables > 0);
	assert_int_equal(rx.bad, 0);
	assert_int_equal(rx.hello.interface, 12); /* the CUDA major, also before 13's numbering */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_folds),
		cmocka_unit_test(test_table_bounds),
		cmocka_unit_test(test_windows_and_exit_flush),
		cmocka_unit_test(test_fork_child_silent),
		cmocka_unit_test(test_steps_aside),
		cmocka_unit_test(test_no_agent_no_cupti),
		cmocka_unit_test(test_refuses_unfitting_cupti),
	};
	int rc;

	snprintf(dir, sizeof(dir), "/tmp/sysom-cupti-XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	snprintf(sock_path, sizeof(sock_path), "%s/agent.sock", dir);
	snprintf(log_path, sizeof(log_path), "%s/child.log", dir);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(sock_path);
	unlink(log_path);
	rmdir(dir);
	return rc;
}
