/* SPDX-License-Identifier: Apache-2.0 */
/* The GPU tracer's symbol reader: the simulated job's libnccl.so.2 / libcuda.so.1 define the
 * traced functions; a file truncated and restored while it is read fails cleanly, never
 * SIGBUS (pread, not mmap). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/gpu/gputrace.h"
#include "tests/support/file_truncator.h"

static char tmpdir[] = "/tmp/sysom-gputrace-syms-XXXXXX";

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void fixture(char *out, size_t len, const char *name)
{
	const char *build = getenv("SYSOM_BUILD");

	snprintf(out, len, "%s/tests/fixtures/simjob/%s", build ? build : "build", name);
	if (access(out, R_OK) != 0) {
		print_message("%s missing\n", out);
		skip();
	}
}

static void test_fixture_symbols(void **state)
{
	char path[256];

	(void)state;
	fixture(path, sizeof(path), "libnccl.so.2");
	assert_true(gputrace_library_symbols(path) >= 10); /* collectives, init, destroy, ... */
	fixture(path, sizeof(path), "libcuda.so.1");
	assert_true(gputrace_library_symbols(path) >= 1); /* kernel launches */
	assert_int_equal(gputrace_library_symbols("/lib/x86_64-linux-gnu/libc.so.6"), -EINVAL);
	assert_int_equal(gputrace_library_symbols("/nonexistent/libnccl.so.2"), -ENOENT);
}

static void truncated_while_read(const char *src, const char *name)
{
	struct file_truncator *tr;
	char path[256];
	int whole = gputrace_library_symbols(src);
	unsigned reads = 0, failures = 0;

	assert_true(whole > 0);
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	assert_int_equal(file_truncator_start(src, path, &tr), 0);
	for (double end = now_s() + 10; now_s() < end && (reads < 2000 || !failures); reads++) {
		int rc = gputrace_library_symbols(path);
		if (rc != whole) {
			assert_true(rc < 0); /* the whole answer or an error, never a partial one */
			failures++;
		}
	}
	assert_true(file_truncator_stop(tr) > 0);
	print_message("%s: %u reads while truncated, %u failed cleanly\n", name, reads, failures);
	assert_true(failures > 0);
	assert_int_equal(gputrace_library_symbols(path), whole);
	unlink(path);
}

static void test_file_truncated_while_read(void **state)
{
	char path[256];

	(void)state;
	fixture(path, sizeof(path), "libnccl.so.2");
	truncated_while_read(path, "libnccl.so.2");
	fixture(path, sizeof(path), "libcuda.so.1");
	truncated_while_read(path, "libcuda.so.1");
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return rmdir(tmpdir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fixture_symbols),
		cmocka_unit_test(test_file_truncated_while_read),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
