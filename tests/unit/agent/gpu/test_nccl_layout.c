/* SPDX-License-Identifier: Apache-2.0 */
/* ncclComm offsets from the real NCCL 2.28.9's DWARF against the built-in table; files without
 * DWARF, not ELF, truncated. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/gpu/nccl_layout.h"
#include "common/error.h"
#include "tests/support/file_truncator.h"

#define REAL_NCCL "/usr/local/cuda/lib/libnccl.so.2"

static void require_real_nccl(void)
{
	if (access(REAL_NCCL, R_OK) != 0) {
		print_message("%s missing\n", REAL_NCCL);
		skip();
	}
}

static void test_version_banner(void **state)
{
	struct nccl_version v;

	(void)state;
	require_real_nccl();
	assert_int_equal(nccl_version_read(REAL_NCCL, &v), 0);
	assert_int_equal(v.major, 2);
	assert_int_equal(v.minor, 28);
	assert_int_equal(v.patch, 9);
}

/* The table's 2.28 entry is what the library's own DWARF says. */
static void test_dwarf_matches_table(void **state)
{
	struct nccl_comm_layout d, r;
	struct nccl_version v = { 2, 28, 9 };
	const struct nccl_comm_layout *t;

	(void)state;
	require_real_nccl();
	assert_int_equal(nccl_layout_from_dwarf(REAL_NCCL, &d), 0);
	assert_int_equal(d.source, NCCL_LAYOUT_DWARF);
	assert_int_equal(d.struct_size, 1082968);
	assert_int_equal(d.comm_hash_size, 8);
	assert_int_equal(d.version.minor, 28);
	t = nccl_layout_known(&v);
	assert_non_null(t);
	assert_int_equal(t->source, NCCL_LAYOUT_TABLE);
	assert_int_equal(d.rank_offset, t->rank_offset);
	assert_int_equal(d.nranks_offset, t->nranks_offset);
	assert_int_equal(d.comm_hash_offset, t->comm_hash_offset);
	assert_int_equal(d.struct_size, t->struct_size);
	assert_int_equal(d.nranks_offset, d.rank_offset + 4); /* int rank; int nRanks; */
	assert_int_equal(nccl_layout_resolve(REAL_NCCL, &r), 0);
	assert_int_equal(r.source, NCCL_LAYOUT_DWARF);
	assert_int_equal(r.comm_hash_offset, d.comm_hash_offset);
}

/* Exact versions only (patch releases differ); releases before 2.18 lack commHash. */
static void test_table(void **state)
{
	struct nccl_version old = { 2, 13, 4 }, future = { 3, 0, 0 }, patch = { 2, 28, 8 };
	struct nccl_version v2143 = { 2, 14, 3 }, v2185 = { 2, 18, 5 }, v2186 = { 2, 18, 6 };
	const struct nccl_comm_layout *l;

	(void)state;
	assert_null(nccl_layout_known(&old));
	assert_null(nccl_layout_known(&future));
	assert_null(nccl_layout_known(&patch));
	l = nccl_layout_known(&v2143);
	assert_non_null(l);
	assert_int_equal(l->comm_hash_size, 0);
	assert_int_equal(l->nranks_offset, l->rank_offset + 4);
	assert_int_not_equal(nccl_layout_known(&v2185)->rank_offset,
			     nccl_layout_known(&v2186)->rank_offset);
	for (uint16_t minor = 14; minor <= 28; minor++) {
		int found = 0;
		for (uint16_t p = 0; p < 20; p++) {
			struct nccl_version v = { 2, minor, p };
			if (!(l = nccl_layout_known(&v)))
				continue;
			found++;
			assert_int_equal(l->nranks_offset, l->rank_offset + 4);
			assert_true(l->rank_offset < l->struct_size);
			if (minor >= 18) {
				assert_int_equal(l->comm_hash_size, 8);
				assert_int_equal(l->comm_hash_offset + 8, l->rank_offset);
			}
		}
		assert_true(found > 0); /* every release series 2.14..2.28 */
	}
}

static char tmpdir[] = "/tmp/sysom-nccl-layout-XXXXXX";

static const char *write_tmp(const char *name, const void *data, size_t len)
{
	static char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
	return path;
}

/* Without DWARF, not ELF, truncated, missing: errors, never a crash. */
static void test_hostile_files(void **state)
{
	struct nccl_comm_layout l;
	struct nccl_version v;
	char garbage[4096];
	const char *p;

	(void)state;
	assert_int_equal(nccl_layout_from_dwarf("/lib/x86_64-linux-gnu/libc.so.6", &l), -ENOENT);
	assert_int_equal(nccl_version_read("/lib/x86_64-linux-gnu/libc.so.6", &v), -ENOENT);
	assert_int_equal(nccl_layout_resolve("/lib/x86_64-linux-gnu/libc.so.6", &l), -ENOENT);
	assert_int_equal(nccl_layout_from_dwarf("/nonexistent/libnccl.so.2", &l), -ENOENT);
	for (size_t i = 0; i < sizeof(garbage); i++)
		garbage[i] = (char)(i * 37 + 11);
	p = write_tmp("garbage.so", garbage, sizeof(garbage));
	assert_int_not_equal(nccl_layout_from_dwarf(p, &l), 0);
	assert_int_equal(nccl_version_read(p, &v), -SYSOM_ECORRUPT);
	p = write_tmp("empty.so", "", 0);
	assert_int_not_equal(nccl_layout_resolve(p, &l), 0);

	/* The first 64 KiB of a real ELF file: headers, no sections behind them. */
	int fd = open("/lib/x86_64-linux-gnu/libc.so.6", O_RDONLY);
	static char head[65536];
	assert_true(fd >= 0);
	assert_int_equal(read(fd, head, sizeof(head)), (ssize_t)sizeof(head));
	close(fd);
	p = write_tmp("truncated.so", head, sizeof(head));
	assert_int_not_equal(nccl_layout_from_dwarf(p, &l), 0);
	nccl_version_read(p, &v); /* any error is fine */
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A library with DWARF (the simulated job's libnccl.so.2, whose ncclComm lacks nRanks) and
 * one without (libc) truncated and restored by another thread while read: every read gives
 * the whole file's answer or fails cleanly with a negative errno; never SIGBUS (pread, not
 * mmap). */
static void truncated_while_read(const char *src, const char *name)
{
	struct nccl_comm_layout l;
	struct nccl_version v;
	struct file_truncator *tr;
	char path[256];
	int dwarf_whole, version_whole;
	unsigned reads = 0, failures = 0;

	dwarf_whole = nccl_layout_from_dwarf(src, &l);
	version_whole = nccl_version_read(src, &v);
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	assert_int_equal(file_truncator_start(src, path, &tr), 0);
	for (double end = now_s() + 10; now_s() < end && (reads < 2000 || !failures); reads++) {
		int rc = reads % 2 ? nccl_version_read(path, &v) : nccl_layout_from_dwarf(path, &l);
		int whole = reads % 2 ? version_whole : dwarf_whole;
		if (rc != whole) {
			assert_true(rc < 0);
			failures++;
		}
		rc = nccl_layout_resolve(path, &l);
		assert_true(rc == 0 || rc < 0);
	}
	assert_true(file_truncator_stop(tr) > 0);
	print_message("%s: %u reads while truncated, %u failed cleanly\n", name, reads, failures);
	assert_true(failures > 0);
	assert_int_equal(nccl_layout_from_dwarf(path, &l), dwarf_whole);
	assert_int_equal(nccl_version_read(path, &v), version_whole);
	unlink(path);
}

static void test_file_truncated_while_read(void **state)
{
	const char *build = getenv("SYSOM_BUILD");
	char fake[256];

	(void)state;
	truncated_while_read("/lib/x86_64-linux-gnu/libc.so.6", "libc.so.6");
	snprintf(fake, sizeof(fake), "%s/tests/fixtures/simjob/libnccl.so.2", build ? build : "build");
	if (access(fake, R_OK) != 0) {
		print_message("%s missing\n", fake);
		skip();
	}
	truncated_while_read(fake, "libnccl.so.2");
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version_banner),
		cmocka_unit_test(test_dwarf_matches_table),
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_hostile_files),
		cmocka_unit_test(test_file_truncated_while_read),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
