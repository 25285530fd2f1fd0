/* SPDX-License-Identifier: Apache-2.0 */
/*
 * agent/symbols/perfmap.c: the perf map parser (hex with and without 0x, blank and malformed
 * lines, names trimmed and cut, a later line winning an overlap) and the per-process reader
 * over a fake /proc (the process's own /tmp, NSpid, a link refused, a foreign owner refused,
 * a file appended to re-read, a line still being written left for later, forget).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/symbols/perfmap.h"

static void test_parse(void **state)
{
	static const char text[] =
		"7f0000001000 40 py::level3:/srv/chain.py\n"
		"\n"
		"0x7f0000002000 0x20 Interpreted: Foo.bar  \r\n"
		"7f0000003000 0 zero sized\n"
		"nothex 10 bad start\n"
		"7f0000004000 10\n"
		"7f0000004000 10 \n"
		"ffffffffffffff00 200 wraps around\n"
		"7f0000001010 8 recompiled over the first\n"
		"7f0000005000 10 last line without a newline";
	struct perfmap_table t;
	const char *name;
	uint64_t start;

	(void)state;
	assert_int_equal(perfmap_parse(text, sizeof(text) - 1, &t), 0);
	assert_int_equal(t.count, 4);
	assert_int_equal(t.malformed, 5);
	assert_false(t.truncated);
	assert_true(perfmap_table_find(&t, 0x7f0000001000, &name, &start));
	assert_string_equal(name, "py::level3:/srv/chain.py");
	assert_int_equal(start, 0x7f0000001000);
	assert_true(perfmap_table_find(&t, 0x7f000000103f, &name, &start));
	assert_string_equal(name, "py::level3:/srv/chain.py");
	assert_false(perfmap_table_find(&t, 0x7f0000001040, &name, &start));
	assert_false(perfmap_table_find(&t, 0x7f0000000fff, &name, &start));
	/* An overlap: the later line (a function compiled again there) wins. */
	assert_true(perfmap_table_find(&t, 0x7f0000001012, &name, &start));
	assert_string_equal(name, "recompiled over the first");
	assert_int_equal(start, 0x7f0000001010);
	assert_true(perfmap_table_find(&t, 0x7f000000201f, &name, &start));
	assert_string_equal(name, "Interpreted: Foo.bar"); /* trailing blanks and CR trimmed */
	assert_true(perfmap_table_find(&t, 0x7f0000005000, &name, &start));
	assert_string_equal(name, "last line without a newline");
	perfmap_table_free(&t);

	/* Names are cut at PERFMAP_NAME_MAX bytes; an empty map finds nothing. */
	char longline[600];
	int n = snprintf(longline, sizeof(longline), "1000 10 ");
	memset(longline + n, 'x', 400);
	longline[n + 400] = '\0';
	assert_int_equal(perfmap_parse(longline, strlen(longline), &t), 0);
	assert_int_equal(t.count, 1);
	assert_true(perfmap_table_find(&t, 0x1000, &name, &start));
	assert_int_equal(strlen(name), PERFMAP_NAME_MAX);
	perfmap_table_free(&t);
	assert_int_equal(perfmap_parse("", 0, &t), 0);
	assert_false(perfmap_table_find(&t, 0, &name, &start));
	perfmap_table_free(&t);
}

/* A fake /proc under a temporary directory, process 4242 seen as pid 7 in its namespace. */
struct fake {
	char root[64];
	char map[PATH_MAX];
};

static void write_file(const char *path, const char *text, const char *mode)
{
	FILE *f = fopen(path, mode);

	assert_non_null(f);
	assert_true(fputs(text, f) >= 0);
	assert_int_equal(fclose(f), 0);
}

static void fake_proc(struct fake *fk)
{
	char path[PATH_MAX + 64];

	snprintf(fk->root, sizeof(fk->root), "/tmp/sysom-perfmap.XXXXXX");
	assert_non_null(mkdtemp(fk->root));
	snprintf(path, sizeof(path), "%s/4242", fk->root);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/4242/root", fk->root);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/4242/root/tmp", fk->root);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/4242/status", fk->root);
	write_file(path, "Name:\tpython3\nTgid:\t4242\nNSpid:\t4242\t7\nPPid:\t1\n", "w");
	snprintf(fk->map, sizeof(fk->map), "%s/4242/root/tmp/perf-7.map", fk->root);
}

static void fake_free(struct fake *fk)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fk->root);
	assert_int_equal(system(cmd), 0);
}

static void test_reader(void **state)
{
	struct perfmap_cache *c = NULL;
	struct perfmap_stats st;
	struct fake fk;
	const char *name;
	uint64_t start;

	(void)state;
	fake_proc(&fk);
	assert_int_equal(perfmap_cache_new(fk.root, &c), 0);
	/* No map yet: nothing, and no error. */
	assert_int_equal(perfmap_lookup(c, 4242, 1, 0x5000, &name, &start), 0);

	/* The map as the process names it (NSpid 7), with a line still being written. */
	write_file(fk.map, "5000 100 py::train_step:/srv/train.py\n6000 10 py::half", "w");
	usleep(PERFMAP_RECHECK_NS / 1000 + 50000);
	assert_int_equal(perfmap_lookup(c, 4242, 1, 0x5080, &name, &start), 1);
	assert_string_equal(name, "py::train_step:/srv/train.py");
	assert_int_equal(start, 0x5000);
	assert_int_equal(perfmap_lookup(c, 4242, 1, 0x6004, &name, &start), 0);
	/* Completed and appended to: read again at the next look a second later. */
	write_file(fk.map, "-written\n7000 10 py::later:/srv/train.py\n", "a");
	assert_int_equal(perfmap_lookup(c, 4242, 1, 0x7000, &name, &start), 0); /* too soon */
	usleep(PERFMAP_RECHECK_NS / 1000 + 50000);
	assert_int_equal(perfmap_lookup(c, 4242, 1, 0x7008, &name, &start), 1);
	assert_string_equal(name, "py::later:/srv/train.py");
	assert_int_equal(perfmap_lookup(c, 4242, 1, 0x6004, &name, &start), 1);
	assert_string_equal(name, "py::half-written");
	perfmap_stats_read(c, &st);
	assert_int_equal(st.loads, 2);
	assert_int_equal(st.maps, 1);
	assert_int_equal(st.named, 3);

	/* Another incarnation of the pid starts from nothing; forget drops one. */
	perfmap_forget(c, 4242, 1);
	perfmap_stats_read(c, &st);
	assert_int_equal(st.maps, 0);

	/* A link in the process's /tmp is never followed. */
	char target[PATH_MAX + 16];
	snprintf(target, sizeof(target), "%s/elsewhere.map", fk.root);
	write_file(target, "8000 10 secret\n", "w");
	assert_int_equal(unlink(fk.map), 0);
	assert_int_equal(symlink(target, fk.map), 0);
	assert_int_equal(perfmap_lookup(c, 4242, 2, 0x8000, &name, &start), 0);
	perfmap_stats_read(c, &st);
	assert_int_equal(st.refused, 1);

	/* A file owned by another user than the process's (and not root) is refused. */
	assert_int_equal(unlink(fk.map), 0);
	write_file(fk.map, "9000 10 foreign\n", "w");
	assert_int_equal(chown(fk.map, 4321, 4321), 0);
	assert_int_equal(perfmap_lookup(c, 4242, 3, 0x9000, &name, &start), 0);
	perfmap_stats_read(c, &st);
	assert_int_equal(st.refused, 2);
	perfmap_cache_free(c);
	fake_free(&fk);
}

/* More processes than the cache holds: the least recently used are dropped, none leaks. */
static void test_bounded(void **state)
{
	struct perfmap_cache *c = NULL;
	struct perfmap_stats st;
	const char *name;
	uint64_t start;

	(void)state;
	assert_int_equal(perfmap_cache_new("/nonexistent-proc", &c), 0);
	for (uint32_t pid = 1; pid <= 3 * PERFMAP_MAX_PROCESSES; pid++)
		assert_int_equal(perfmap_lookup(c, pid, 1, 0x1000, &name, &start), 0);
	perfmap_stats_read(c, &st);
	assert_int_equal(st.maps, PERFMAP_MAX_PROCESSES);
	assert_int_equal(st.unnamed, 3 * PERFMAP_MAX_PROCESSES);
	perfmap_cache_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_reader),
		cmocka_unit_test(test_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
