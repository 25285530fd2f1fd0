/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPython support: the line-table decoders against known tables, and the per-version offsets
 * against every real interpreter on the machine (3.10–3.13 under /root/.pyenv/versions and
 * Debian's /usr/bin/python3.11): a live tests/fixtures/python/chain.py blocked in level6 is
 * inspected, its frame chain walked with the published offsets, and every frame resolved to
 * the expected qualname, file and line.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <libelf.h>

#include "agent/sampling/pyframes.h"

/* ---- line tables -------------------------------------------------------------------------- */

static void test_linetable_310(void **state)
{
	(void)state;
	/* (byte delta, line delta): [0,6) line 10+1, [6,10) line 13, [10,14) no line, [14,20)
	 * line 12 (13 - 1, after the -128 entry left the running line alone). */
	const uint8_t t[] = { 6, 1, 4, 2, 4, 0x80, 6, (uint8_t)-1 };

	assert_int_equal(py_linetable_line(PY_LAYOUT_310, t, sizeof(t), 10, 0), 11);
	assert_int_equal(py_linetable_line(PY_LAYOUT_310, t, sizeof(t), 10, 2), 11);
	assert_int_equal(py_linetable_line(PY_LAYOUT_310, t, sizeof(t), 10, 3), 13);
	assert_int_equal(py_linetable_line(PY_LAYOUT_310, t, sizeof(t), 10, 5), -1);
	assert_int_equal(py_linetable_line(PY_LAYOUT_310, t, sizeof(t), 10, 7), 12);
	assert_int_equal(py_linetable_line(PY_LAYOUT_310, t, sizeof(t), 10, 10), -1); /* past */
	assert_int_equal(py_linetable_line(PY_LAYOUT_310, t, sizeof(t), 10, -1), 10); /* not started */
	/* An odd trailing byte is ignored, an empty table has no line. */
	assert_int_equal(py_linetable_line(PY_LAYOUT_310, t, 1, 10, 0), -1);
	assert_int_equal(py_linetable_line(PY_LAYOUT_310, NULL, 0, 10, 0), -1);
}

static void test_linetable_311(void **state)
{
	(void)state;
	const uint8_t t[] = {
		0x80 | 13 << 3 | 0, 2,                 /* 1 unit, no column: line +1 → 11 */
		0x80 | 11 << 3 | 1, 4, 8,              /* 2 units, one-line form, +1 → 12 */
		0x80 | 3 << 3 | 2, 0x13,               /* 3 units, short form → 12 */
		0x80 | 15 << 3 | 0,                    /* 1 unit, no location */
		0x80 | 14 << 3 | 1, 0x40 | 0, 1, 0, 5, 9, /* 2 units, long form: delta
							    * (0 | 1<<6 =64 → +32) → 44 */
		0x80 | 13 << 3 | 0, 3,                 /* 1 unit, line -1 → 43 */
	};

	assert_int_equal(py_linetable_line(PY_LAYOUT_311, t, sizeof(t), 10, 0), 11);
	assert_int_equal(py_linetable_line(PY_LAYOUT_312, t, sizeof(t), 10, 1), 12);
	assert_int_equal(py_linetable_line(PY_LAYOUT_313, t, sizeof(t), 10, 2), 12);
	assert_int_equal(py_linetable_line(PY_LAYOUT_311, t, sizeof(t), 10, 3), 12);
	assert_int_equal(py_linetable_line(PY_LAYOUT_311, t, sizeof(t), 10, 5), 12);
	assert_int_equal(py_linetable_line(PY_LAYOUT_311, t, sizeof(t), 10, 6), -1);
	assert_int_equal(py_linetable_line(PY_LAYOUT_311, t, sizeof(t), 10, 7), 44);
	assert_int_equal(py_linetable_line(PY_LAYOUT_311, t, sizeof(t), 10, 8), 44);
	assert_int_equal(py_linetable_line(PY_LAYOUT_311, t, sizeof(t), 10, 9), 43);
	assert_int_equal(py_linetable_line(PY_LAYOUT_311, t, sizeof(t), 10, 10), -1);
	/* Cut inside an entry, or not starting at one: no line, never a read past the end. */
	assert_int_equal(py_linetable_line(PY_LAYOUT_311, t, 4, 10, 2), -1);
	assert_int_equal(py_linetable_line(PY_LAYOUT_311, t + 1, sizeof(t) - 1, 10, 0), -1);
	/* An unknown layout has no lines. */
	assert_int_equal(py_linetable_line(99, t, sizeof(t), 10, 0), -1);
}

static void test_linetable_hostile(void **state)
{
	(void)state;
	/* Endless continuation bits stop at the table's end or the varint limit. */
	uint8_t t[64];

	memset(t, 0xff, sizeof(t));
	t[0] = 0x80 | 14 << 3;
	assert_int_equal(py_linetable_line(PY_LAYOUT_311, t, sizeof(t), 1, 0), -1);
	for (unsigned seed = 1; seed < 2000; seed++) {
		srand(seed);
		for (size_t i = 0; i < sizeof(t); i++)
			t[i] = (uint8_t)rand();
		(void)py_linetable_line(PY_LAYOUT_310, t, sizeof(t), rand(), rand() % 100);
		(void)py_linetable_line(PY_LAYOUT_311, t, sizeof(t), rand(), rand() % 100);
	}
}

/* ---- live interpreters -------------------------------------------------------------------- */

#define MAX_MAPS 512

struct live {
	pid_t pid;
	int out; /* its stdout, kept open until it is killed */
	struct pt_process proc;
	struct pt_mapping maps[MAX_MAPS];
	struct pt_object objs[MAX_MAPS];
};

static const char *chain_script(void)
{
	static char path[4096];
	const char *root = getenv("SYSOM_ROOT");

	snprintf(path, sizeof(path), "%s/tests/fixtures/python/chain.py", root ? root : ".");
	return path;
}

/* Starts `python chain.py block` and waits for its "ready". */
static int start_chain(const char *python, struct live *l)
{
	int fds[2];
	char buf[16] = "";

	if (pipe(fds))
		return -1;
	l->pid = fork();
	if (l->pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		execl(python, python, chain_script(), "block", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	l->out = fds[0];
	ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
	if (n <= 0 || strncmp(buf, "ready", 5))
		return -1;
	/* "ready" comes just before time.sleep: wait until the process sleeps in it. */
	for (int i = 0; i < 200; i++) {
		char path[64], stat[512] = "";
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%d/stat", l->pid);
		f = fopen(path, "r");
		if (f) {
			size_t got = fread(stat, 1, sizeof(stat) - 1, f);
			fclose(f);
			stat[got] = '\0';
			const char *p = strrchr(stat, ')');
			if (p && p[1] == ' ' && p[2] == 'S')
				break;
		}
		usleep(10000);
	}
	return 0;
}

static void stop_chain(struct live *l)
{
	if (l->pid > 0) {
		kill(l->pid, SIGKILL);
		waitpid(l->pid, NULL, 0);
		l->pid = 0;
	}
	close(l->out);
	for (uint32_t i = 0; i < l->proc.mapping_count; i++)
		free(l->objs[i].path);
}

/* Executable file mappings from /proc/<pid>/maps, the way proctrack lists them. */
static void read_maps(struct live *l)
{
	char path[64], line[4096];
	FILE *f;

	memset(&l->proc, 0, sizeof(l->proc));
	l->proc.tgid = (uint32_t)l->pid;
	l->proc.generation = 1;
	l->proc.mappings = l->maps;
	snprintf(path, sizeof(path), "/proc/%d/maps", l->pid);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f) && l->proc.mapping_count < MAX_MAPS) {
		unsigned long start, end, off;
		char perms[8], file[4096] = "";
		uint32_t i = l->proc.mapping_count;

		if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %4095[^\n]", &start, &end, perms, &off,
			   file) < 4 ||
		    perms[2] != 'x' || file[0] != '/')
			continue;
		l->objs[i].path = strdup(file);
		l->maps[i] = (struct pt_mapping){ start, end, off, &l->objs[i] };
		l->proc.mapping_count++;
	}
	fclose(f);
}

static void check_interpreter(const char *python, bool want_debug_offsets)
{
	static const char *expected[] = { "level6", "level5", "level4", "level3", "level2",
					  "level1", "<module>" };
	/* Lines of the calls in chain.py: level6 sleeps at 14, levelN calls at 24..40. */
	static const int lines[] = { 14, 24, 28, 32, 36, 40, 46 };
	struct pyframes_options opts;
	struct pyframes *pf = NULL;
	struct py_target t;
	struct live *l = calloc(1, sizeof(*l));
	uint64_t values[64];
	size_t n = 0;
	char why[256];

	if (access(python, X_OK)) {
		fprintf(stderr, "# %s absent: skipped\n", python);
		free(l);
		return;
	}
	assert_non_null(l);
	assert_int_equal(start_chain(python, l), 0);
	read_maps(l);
	int rc = pyframes_inspect("/proc", &l->proc, &t, why, sizeof(why));
	if (rc)
		fprintf(stderr, "# %s: %d %s\n", python, rc, why);
	assert_int_equal(rc, 0);
	assert_int_equal(t.debug_offsets, want_debug_offsets);
	assert_true(t.proc.eval_start && t.proc.eval_end > t.proc.eval_start);
	assert_int_equal(pyframes_walk("/proc", l->proc.tgid, &t, 0, values, 64, &n), 0);
	assert_int_equal(n, 7);

	pyframes_options_default(&opts);
	assert_int_equal(pyframes_new(&opts, -1, &pf), 0);
	assert_int_equal(pyframes_publish(pf, &l->proc), 0);
	for (size_t i = 0; i < n; i++) {
		struct py_name name;

		assert_int_equal(pyframes_resolve(pf, l->proc.tgid, 1, values[i], &name), 0);
		assert_string_equal(name.qualname, expected[i]);
		assert_non_null(strstr(name.filename, "chain.py"));
		if (name.line != lines[i])
			fprintf(stderr, "# %s frame %zu %s: line %d, expected %d\n", python, i,
				name.qualname, name.line, lines[i]);
		assert_int_equal(name.line, lines[i]);
		/* The second time comes from the cache. */
		assert_int_equal(pyframes_resolve(pf, l->proc.tgid, 1, values[i], &name), 0);
	}
	struct pyframes_stats st;
	pyframes_stats_read(pf, &st);
	assert_int_equal(st.processes, 1);
	assert_int_equal(st.cache_hits, n);
	/* Each frame carries the check of its code object; a frame whose check differs is of a
	 * code object that is not the one at the address now (freed, address reused): refused
	 * and counted, the cached name stays for the frames that match; no check: unchecked. */
	struct py_name name;
	for (size_t i = 0; i < n; i++)
		assert_true(PY_FRAME_CHECK(values[i]) >= 1);
	unsigned good = PY_FRAME_CHECK(values[2]);
	uint64_t clear = values[2] & ~(PY_FRAME_CHECK_MAX << PY_FRAME_CHECK_SHIFT);
	/* The object matches two values (of its name's hash and of its name's address): one of
	 * the next two after `good` is neither. */
	int stale = 0;
	for (unsigned w = good % PY_FRAME_CHECK_MAX + 1, k = 0; k < 2 && !stale;
	     w = w % PY_FRAME_CHECK_MAX + 1, k++) {
		uint64_t wrong = clear | (uint64_t)w << PY_FRAME_CHECK_SHIFT;
		stale = pyframes_resolve(pf, l->proc.tgid, 1, wrong, &name) == -ESTALE;
	}
	assert_true(stale);
	assert_int_equal(pyframes_resolve(pf, l->proc.tgid, 1, values[2], &name), 0);
	assert_string_equal(name.qualname, expected[2]);
	assert_int_equal(pyframes_resolve(pf, l->proc.tgid, 1, clear, &name), 0);
	assert_string_equal(name.qualname, expected[2]);
	pyframes_stats_read(pf, &st);
	assert_int_equal(st.reused, 1);
	/* Another generation of the pid is not this process. */
	assert_int_equal(pyframes_resolve(pf, l->proc.tgid, 2, values[0], &name), -ENOENT);
	/* A bad code object address is refused, not followed. */
	assert_int_equal(pyframes_resolve(pf, l->proc.tgid, 1, PY_FRAME_TAG | 0x10, &name),
			 -EFAULT);
	char desc[512];
	pyframes_describe(pf, desc, sizeof(desc));
	assert_non_null(strstr(desc, "stitched"));
	/* Gone: its cached code objects still name frames, at other instructions too. */
	kill(l->pid, SIGKILL);
	waitpid(l->pid, NULL, 0);
	l->pid = 0;
	uint64_t other = (values[1] & ~(PY_FRAME_INSTR_MAX << PY_FRAME_INSTR_SHIFT)) |
			 (1ULL << PY_FRAME_INSTR_SHIFT); /* instruction 0 */
	assert_int_equal(pyframes_resolve(pf, l->proc.tgid, 1, other, &name), 0);
	assert_string_equal(name.qualname, "level5");
	assert_true(name.line >= 22 && name.line <= 24);
	/* A code object never seen cannot be read any more. */
	assert_int_equal(pyframes_resolve(pf, l->proc.tgid, 1, PY_FRAME_TAG | 0x12340, &name),
			 -ENOENT);
	pyframes_forget(pf, &l->proc);
	pyframes_stats_read(pf, &st);
	assert_int_equal(st.processes, 0);
	pyframes_free(pf);
	stop_chain(l);
	free(l);
}

static void test_python310(void **state)
{
	(void)state;
	check_interpreter("/root/.pyenv/versions/3.10.13/bin/python3.10", false);
}

static void test_python311(void **state)
{
	(void)state;
	check_interpreter("/root/.pyenv/versions/3.11.7/bin/python3.11", false);
}

static void test_python311_debian(void **state)
{
	(void)state;
	check_interpreter("/usr/bin/python3.11", false);
}

static void test_python312(void **state)
{
	(void)state;
	check_interpreter("/root/.pyenv/versions/3.12.1/bin/python3.12", false);
}

static void test_python313(void **state)
{
	(void)state;
	check_interpreter("/root/.pyenv/versions/3.13.0/bin/python3.13", true);
}

/* 3.9 has no known offsets: detected, never published. */
static void test_python39_unsupported(void **state)
{
	(void)state;
	const char *python = "/root/.pyenv/versions/3.9.18/bin/python3.9";
	struct live *l;
	struct py_target t;
	char why[256];

	if (access(python, X_OK)) {
		fprintf(stderr, "# %s absent: skipped\n", python);
		return;
	}
	l = calloc(1, sizeof(*l));
	assert_non_null(l);
	assert_int_equal(start_chain(python, l), 0);
	read_maps(l);
	assert_int_equal(pyframes_inspect("/proc", &l->proc, &t, why, sizeof(why)), PY_UNSUPPORTED);
	assert_non_null(strstr(why, "3.9"));
	stop_chain(l);
	free(l);
}

int main(void)
{
	elf_version(EV_CURRENT);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linetable_310),
		cmocka_unit_test(test_linetable_311),
		cmocka_unit_test(test_linetable_hostile),
		cmocka_unit_test(test_python310),
		cmocka_unit_test(test_python311),
		cmocka_unit_test(test_python311_debian),
		cmocka_unit_test(test_python312),
		cmocka_unit_test(test_python313),
		cmocka_unit_test(test_python39_unsupported),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
