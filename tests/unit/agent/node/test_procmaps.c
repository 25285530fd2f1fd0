/* SPDX-License-Identifier: Apache-2.0 */
/* /proc/<pid>/maps: line forms, strict rejection, reading /proc/self, dead pids and limits. */
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
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/node/procmaps.h"
#include "common/error.h"

static char tmpdir[] = "/tmp/sysom-test-maps-XXXXXX";

static int setup_tmpdir(void **state)
{
	(void)state;
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
	(void)state;
	return rmdir(tmpdir);
}

static int parse(const char *line, struct procmaps_entry *e)
{
	return procmaps_parse_line(line, strlen(line), e);
}

static void test_parse_file_mapping(void **state)
{
	struct procmaps_entry e;

	(void)state;
	assert_int_equal(parse("7f1234560000-7f12345e0000 r-xp 00028000 fd:01 2621447"
			       "                    /usr/lib/x86_64-linux-gnu/libc.so.6\n",
			       &e),
			 0);
	assert_int_equal(e.start, 0x7f1234560000ULL);
	assert_int_equal(e.end, 0x7f12345e0000ULL);
	assert_int_equal(e.offset, 0x28000);
	assert_int_equal(e.dev_major, 0xfd);
	assert_int_equal(e.dev_minor, 1);
	assert_int_equal(e.inode, 2621447);
	assert_true(e.readable);
	assert_false(e.writable);
	assert_true(e.executable);
	assert_false(e.shared);
	assert_false(e.deleted);
	assert_string_equal(e.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");

	/* No trailing newline; shared writable; 3-digit major; largest inode; full 64-bit
	 * addresses; upper-case hex. */
	assert_int_equal(parse("ffffffffff600000-FFFFFFFFFF601000 rw-s 0000000000000010 103:05 "
			       "18446744073709551615 /dev/shm/ring",
			       &e),
			 0);
	assert_int_equal(e.start, 0xffffffffff600000ULL);
	assert_int_equal(e.end, 0xffffffffff601000ULL);
	assert_int_equal(e.offset, 0x10);
	assert_int_equal(e.dev_major, 0x103);
	assert_int_equal(e.dev_minor, 5);
	assert_int_equal(e.inode, UINT64_MAX);
	assert_true(e.readable && e.writable && e.shared);
	assert_false(e.executable);
	assert_string_equal(e.path, "/dev/shm/ring");

	/* Short (unpadded) addresses as older kernels print them. */
	assert_int_equal(parse("0-1000 ---p 0 0:0 0", &e), 0);
	assert_int_equal(e.start, 0);
	assert_int_equal(e.end, 0x1000);
	assert_false(e.readable || e.writable || e.executable || e.shared);
	assert_string_equal(e.path, "");
}

static void test_parse_path_forms(void **state)
{
	static const struct {
		const char *line;
		const char *path;
		bool deleted;
	} cases[] = {
		{ "55d0c4a00000-55d0c4a02000 r--p 00000000 fd:01 1835143                    "
		  "/home/user/My Programs/a b.so\n",
		  "/home/user/My Programs/a b.so", false },
		{ "55d0c4a00000-55d0c4a02000 r-xp 00001000 fd:01 1835143 /tmp/x (deleted)\n",
		  "/tmp/x", true },
		{ "55d0c4a00000-55d0c4a02000 r-xp 00001000 fd:01 1835143 /tmp/a b (deleted)",
		  "/tmp/a b", true },
		{ "7f0000000000-7f0000001000 rwxs 00000000 00:01 5123   /memfd:jit-code (deleted)\n",
		  "/memfd:jit-code", true },
		{ "7ffd1c5e4000-7ffd1c5e6000 r-xp 00000000 00:00 0                          [vdso]\n",
		  "[vdso]", false },
		{ "5555d5e8c000-5555d5ead000 rw-p 00000000 00:00 0                          [heap]\n",
		  "[heap]", false },
		{ "7ffd1c4c3000-7ffd1c4e4000 rw-p 00000000 00:00 0                          [stack]\n",
		  "[stack]", false },
		{ "7f0000000000-7f0000100000 rw-p 00000000 00:00 0      [anon:dalvik main space]\n",
		  "[anon:dalvik main space]", false },
		{ "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  "
		  "[vsyscall]\n",
		  "[vsyscall]", false },
		/* Anonymous: trailing space (as the kernel prints it), none, or padding. */
		{ "7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n", "", false },
		{ "7f0000000000-7f0000001000 rw-p 00000000 00:00 0\n", "", false },
		{ "7f0000000000-7f0000001000 rw-p 00000000 00:00 0", "", false },
		{ "7f0000000000-7f0000001000 rw-p 00000000 00:00 0                    \n", "", false },
		/* Trailing spaces belong to the path; "(deleted)" needs its space; a path that
		 * is only the suffix is kept; escaped newlines stay escaped. */
		{ "7f0000000000-7f0000001000 r--p 00000000 08:01 12 /tmp/t  \n", "/tmp/t  ", false },
		{ "7f0000000000-7f0000001000 r--p 00000000 08:01 12 /tmp/x(deleted)\n",
		  "/tmp/x(deleted)", false },
		{ "7f0000000000-7f0000001000 r--p 00000000 08:01 12  (deleted)\n", "(deleted)", false },
		{ "7f0000000000-7f0000001000 r--p 00000000 08:01 12 /tmp/a\\012b\n", "/tmp/a\\012b",
		  false },
	};
	struct procmaps_entry e;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(&e, 0x5a, sizeof(e));
		if (parse(cases[i].line, &e) != 0)
			fail_msg("rejected: %s", cases[i].line);
		assert_string_equal(e.path, cases[i].path);
		assert_int_equal(e.deleted, cases[i].deleted);
	}
}

static void test_parse_long_path(void **state)
{
	static const char prefix[] = "7f0000000000-7f0000001000 r-xp 00000000 08:01 12 ";
	size_t plen = strlen(prefix);
	char *line = malloc(plen + 2 * PROCMAPS_PATH_MAX + 16);
	struct procmaps_entry e;

	(void)state;
	assert_non_null(line);
	memcpy(line, prefix, plen);
	/* Exactly PROCMAPS_PATH_MAX - 1 bytes: kept whole. */
	line[plen] = '/';
	memset(line + plen + 1, 'a', PROCMAPS_PATH_MAX - 2);
	size_t len = plen + PROCMAPS_PATH_MAX - 1;
	assert_int_equal(procmaps_parse_line(line, len, &e), 0);
	assert_int_equal(strlen(e.path), PROCMAPS_PATH_MAX - 1);
	/* Longer: truncated, NUL-terminated; the " (deleted)" suffix is still seen. */
	memset(line + len, 'b', PROCMAPS_PATH_MAX);
	len += PROCMAPS_PATH_MAX;
	memcpy(line + len, " (deleted)\n", 11);
	len += 11;
	assert_int_equal(procmaps_parse_line(line, len, &e), 0);
	assert_int_equal(strlen(e.path), PROCMAPS_PATH_MAX - 1);
	assert_true(e.deleted);
	assert_int_equal(e.path[PROCMAPS_PATH_MAX - 2], 'a');
	free(line);
}

static void test_parse_malformed(void **state)
{
	static const char *const bad[] = {
		"",
		"\n",
		"garbage",
		" 1000-2000 r-xp 00000000 08:01 12 /a",    /* leading space */
		"1000-1000 r-xp 00000000 08:01 12 /a",     /* start == end */
		"2000-1000 r-xp 00000000 08:01 12 /a",     /* start > end */
		"g000-2000 r-xp 00000000 08:01 12 /a",     /* bad hex */
		"1000-2g00 r-xp 00000000 08:01 12 /a",
		"0x1000-0x2000 r-xp 00000000 08:01 12 /a", /* prefix */
		"-2000 r-xp 00000000 08:01 12 /a",         /* missing start */
		"1000- r-xp 00000000 08:01 12 /a",         /* missing end */
		"1000 r-xp 00000000 08:01 12 /a",
		"10000000000000000-20000000000000000 r-xp 0 08:01 12 /a", /* 17 digits */
		"1000-2000 rwxx 00000000 08:01 12 /a",     /* bad permissions */
		"1000-2000 r-x 00000000 08:01 12 /a",
		"1000-2000 r-xpp 00000000 08:01 12 /a",
		"1000-2000 R-xp 00000000 08:01 12 /a",
		"1000-2000 xwrp 00000000 08:01 12 /a",
		"1000-2000 r-x- 00000000 08:01 12 /a",
		"1000-2000  r-xp 00000000 08:01 12 /a",    /* double separator */
		"1000-2000 r-xp  00000000 08:01 12 /a",
		"1000-2000 r-xp 00000000  08:01 12 /a",
		"1000-2000 r-xp 00000000 08:01  12 /a",
		"1000-2000\tr-xp 00000000 08:01 12 /a",
		"1000-2000 r-xp zz 08:01 12 /a",           /* bad offset */
		"1000-2000 r-xp 08:01 12 /a",              /* missing offset */
		"1000-2000 r-xp 00000000 0801 12 /a",      /* bad device */
		"1000-2000 r-xp 00000000 08: 12 /a",
		"1000-2000 r-xp 00000000 :01 12 /a",
		"1000-2000 r-xp 00000000 08:01x 12 /a",
		"1000-2000 r-xp 00000000 123456789:01 12 /a",
		"1000-2000 r-xp 00000000 08:01",           /* missing inode */
		"1000-2000 r-xp 00000000 08:01 ",
		"1000-2000 r-xp 00000000 08:01 12a /a",    /* bad inode */
		"1000-2000 r-xp 00000000 08:01 -1 /a",
		"1000-2000 r-xp 00000000 08:01 18446744073709551616 /a", /* overflows */
		"1000-2000 r-xp 00000000 08:01 12\t/a",
		"1000-2000 r-xp 00000000 08:01 12 /a\nb",  /* a second line */
		"1000-2000 r-xp\n",
		"1000-2000",
	};
	struct procmaps_entry e;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&e, 0x5a, sizeof(e));
		if (parse(bad[i], &e) != -SYSOM_ECORRUPT)
			fail_msg("accepted: \"%s\"", bad[i]);
		assert_int_equal(e.start, 0x5a5a5a5a5a5a5a5aULL); /* out untouched */
	}
	/* An embedded NUL, and a length that cuts a valid line short. */
	static const char nul[] = "1000-2000 r-xp 00000000 08:01 12 /a\0b";
	assert_int_equal(procmaps_parse_line(nul, sizeof(nul) - 1, &e), -SYSOM_ECORRUPT);
	assert_int_equal(procmaps_parse_line("1000-2000 r-xp 00000000 08:01 12", 20, &e),
			 -SYSOM_ECORRUPT);
	assert_int_equal(procmaps_parse_line(NULL, 0, &e), -SYSOM_ECORRUPT);
}

/* ------------------------------------------------------------------------------------------ */
/* procmaps_read */

struct collect {
	uint32_t count;
	uint32_t non_exec;
	uintptr_t target;
	bool target_found;
	struct procmaps_entry target_entry;
	uint32_t stop_after; /* 0: never stop */
	uint64_t last_start;
};

static int collect_visit(void *ctx, const struct procmaps_entry *e)
{
	struct collect *c = ctx;

	c->count++;
	if (!e->executable)
		c->non_exec++;
	if (c->target >= e->start && c->target < e->end) {
		c->target_found = true;
		c->target_entry = *e;
	}
	c->last_start = e->start;
	if (c->stop_after && c->count == c->stop_after)
		return -ECANCELED;
	return 0;
}

static void test_read_self(void **state)
{
	struct collect *c = calloc(1, sizeof(*c));
	char exe[PATH_MAX];
	uint32_t malformed = 99;
	ssize_t n;

	(void)state;
	assert_non_null(c);
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(n > 0);
	exe[n] = '\0';

	c->target = (uintptr_t)&test_read_self;
	int ret = procmaps_read(getpid(), NULL, true, 100000, collect_visit, c, &malformed);
	assert_true(ret > 0);
	assert_int_equal((uint32_t)ret, c->count);
	assert_int_equal(malformed, 0);
	assert_int_equal(c->non_exec, 0);
	assert_true(c->target_found);
	assert_true(c->target_entry.executable);
	assert_true(c->target_entry.readable);
	assert_false(c->target_entry.deleted);
	assert_string_equal(c->target_entry.path, exe);
	assert_true(c->target_entry.inode != 0);
	uint32_t exec_count = c->count;

	/* All mappings: more of them, a data address found in a non-executable one. */
	static int data_object;
	memset(c, 0, sizeof(*c));
	c->target = (uintptr_t)&data_object;
	ret = procmaps_read(getpid(), NULL, false, 100000, collect_visit, c, NULL);
	assert_true(ret > 0);
	assert_true(c->count > exec_count);
	assert_true(c->non_exec > 0);
	assert_true(c->target_found);
	assert_false(c->target_entry.executable);
	assert_true(c->target_entry.writable);

	/* The same file by path. */
	memset(c, 0, sizeof(*c));
	ret = procmaps_read(0, "/proc/self/maps", true, 100000, collect_visit, c, NULL);
	assert_int_equal(ret, (int)exec_count);
	free(c);
}

static void test_dead_pid(void **state)
{
	struct collect c = { 0 };
	uint32_t malformed = 77;
	int status;

	(void)state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(procmaps_read(pid, NULL, false, 1000, collect_visit, &c, &malformed), -ESRCH);
	assert_int_equal(c.count, 0);
	assert_int_equal(malformed, 77); /* not written when nothing was read */
}

static void test_bad_arguments(void **state)
{
	struct collect c = { 0 };
	char path[256];

	(void)state;
	assert_int_equal(procmaps_read(0, NULL, false, 10, collect_visit, &c, NULL), -EINVAL);
	assert_int_equal(procmaps_read(-5, NULL, false, 10, collect_visit, &c, NULL), -EINVAL);
	assert_int_equal(procmaps_read(getpid(), NULL, false, 10, NULL, &c, NULL), -EINVAL);
	/* A test path that does not exist is just missing, not a dead process. */
	snprintf(path, sizeof(path), "%s/missing", tmpdir);
	assert_int_equal(procmaps_read(0, path, false, 10, collect_visit, &c, NULL), -ENOENT);
}

/* Writes `text` to a temporary file; returns its path in `path`. */
static void write_maps(char *path, size_t pathlen, const char *text, size_t len)
{
	snprintf(path, pathlen, "%s/maps", tmpdir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	close(fd);
}

static const char sample_maps[] =
	"1000-2000 r-xp 00000000 08:01 11 /bin/a\n"
	"2000-3000 r--p 00001000 08:01 11 /bin/a\n"
	"this line is broken\n"
	"3000-4000 r-xp 00000000 08:01 12 /lib/b.so\n"
	"4000-5000 rw-p 00000000 00:00 0 \n"
	"5000-6000 r-xp 00000000 00:00 0 [vdso]\n"
	"6000-5000 r-xp 00000000 00:00 0 [bad]\n"
	"7000-8000 r-xp 00000000 08:01 13 /lib/c.so (deleted)\n"
	"\n"
	"8000-9000 rw-p 00000000 08:01 13 /lib/c.so (deleted)\n"
	"9000-a000 r-xp 00000000 08:01 14 /lib/last.so"; /* no final newline */

static void test_limits_and_counts(void **state)
{
	struct collect c = { 0 };
	char path[256];
	uint32_t malformed = 0;
	int ret;

	(void)state;
	write_maps(path, sizeof(path), sample_maps, strlen(sample_maps));

	/* 8 valid lines (5 executable, the last without its newline), 3 malformed. */
	ret = procmaps_read(0, path, false, 100, collect_visit, &c, &malformed);
	assert_int_equal(ret, 8);
	assert_int_equal(c.count, 8);
	assert_int_equal(malformed, 3);
	assert_int_equal(c.last_start, 0x9000);

	c = (struct collect){ 0 };
	ret = procmaps_read(0, path, true, 100, collect_visit, &c, &malformed);
	assert_int_equal(ret, 5);
	assert_int_equal(c.non_exec, 0);

	/* max_entries: the limit is reached after visiting exactly that many. */
	c = (struct collect){ 0 };
	malformed = 0;
	ret = procmaps_read(0, path, false, 4, collect_visit, &c, &malformed);
	assert_int_equal(ret, -SYSOM_ELIMIT);
	assert_int_equal(c.count, 4);
	assert_int_equal(c.last_start, 0x4000);
	assert_int_equal(malformed, 1); /* counted up to where the walk stopped */

	c = (struct collect){ 0 };
	assert_int_equal(procmaps_read(0, path, true, 5, collect_visit, &c, NULL), 5);
	c = (struct collect){ 0 };
	assert_int_equal(procmaps_read(0, path, true, 4, collect_visit, &c, NULL), -SYSOM_ELIMIT);
	assert_int_equal(c.count, 4);
	c = (struct collect){ 0 };
	assert_int_equal(procmaps_read(0, path, false, 0, collect_visit, &c, NULL), -SYSOM_ELIMIT);
	assert_int_equal(c.count, 0);
	assert_int_equal(procmaps_read(0, path, false, 8, collect_visit, &c, NULL), 8);

	/* The visitor stops the walk with its own error. */
	c = (struct collect){ .stop_after = 3 };
	assert_int_equal(procmaps_read(0, path, false, 100, collect_visit, &c, NULL), -ECANCELED);
	assert_int_equal(c.count, 3);

	/* An empty file (a kernel thread's maps). */
	write_maps(path, sizeof(path), "", 0);
	c = (struct collect){ 0 };
	assert_int_equal(procmaps_read(0, path, false, 100, collect_visit, &c, &malformed), 0);
	assert_int_equal(malformed, 0);
	unlink(path);
}

/* Many lines across read boundaries, and lines too long to keep: streamed, bounded memory. */
static void test_large_file(void **state)
{
	size_t cap = 8u << 20, len = 0;
	char *text = malloc(cap);
	struct collect c = { 0 };
	char path[256];
	uint32_t malformed = 0;
	unsigned valid = 0;

	(void)state;
	assert_non_null(text);
	for (unsigned i = 0; i < 30000; i++) {
		if (i == 100 || i == 20000) {
			/* A 200 KiB line: over the line limit, counted once as malformed. */
			len += (size_t)sprintf(text + len, "%x-%x r-xp 0 08:01 1 /", i + 1, i + 2);
			memset(text + len, 'p', 200000);
			len += 200000;
			text[len++] = '\n';
			continue;
		}
		if (i == 5000) {
			/* A 6000-byte path: within the line limit, truncated into the entry. */
			len += (size_t)sprintf(text + len, "%x-%x r-xp 0 08:01 1 /", i + 1, i + 2);
			memset(text + len, 'q', 6000);
			len += 6000;
			text[len++] = '\n';
			valid++;
			continue;
		}
		len += (size_t)sprintf(text + len,
				       "%012x-%012x %s 00000000 08:01 %u /usr/lib/lib%u.so\n",
				       (i + 1) * 0x1000, (i + 2) * 0x1000,
				       i % 2 ? "r-xp" : "r--p", i, i);
		valid++;
		assert_true(len < cap - 300000);
	}
	write_maps(path, sizeof(path), text, len);
	int ret = procmaps_read(0, path, false, 100000, collect_visit, &c, &malformed);
	assert_int_equal(ret, (int)valid);
	assert_int_equal(malformed, 2);
	assert_int_equal(c.last_start, 30000 * 0x1000);

	/* A file that ends inside an over-long line. */
	write_maps(path, sizeof(path), text, 100 * 64 + 120000);
	c = (struct collect){ 0 };
	ret = procmaps_read(0, path, false, 100000, collect_visit, &c, &malformed);
	assert_int_equal(ret, 100);
	assert_int_equal(malformed, 1);
	unlink(path);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_file_mapping),
		cmocka_unit_test(test_parse_path_forms),
		cmocka_unit_test(test_parse_long_path),
		cmocka_unit_test(test_parse_malformed),
		cmocka_unit_test(test_read_self),
		cmocka_unit_test(test_dead_pid),
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_limits_and_counts),
		cmocka_unit_test(test_large_file),
	};
	return cmocka_run_group_tests(tests, setup_tmpdir, remove_tmpdir);
}
