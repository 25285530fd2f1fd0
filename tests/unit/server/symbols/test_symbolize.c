/* SPDX-License-Identifier: Apache-2.0 */
/* Symbolization (kernel symbols with bounds, user/anon/unknown frames, truncation frames,
 * the cache) and the kernel symbol upload parser. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/error.h"
#include "server/symbols/ksyms.h"
#include "tests/unit/server/harness.h"

#define KERNEL_HEX "abf9ec0ec5946600c90641cf5db998472fac410b"
#define LIBC_HEX "0102030405060708090a0b0c0d0e0f1011121314"

struct state {
	struct harness *h;
	int64_t kernel, libc, python, anon;
};

/* Resolves a leaf frame that stays one frame (no repository here) into *f (release it). */
static int resolve1(struct symbolizer *sym, uint8_t stack_kind, int64_t object, uint64_t offset,
		    struct symbolized_frame *f)
{
	struct symbolized_location loc;
	int rc = symbolizer_location_resolve(sym, stack_kind, object, offset, true, &loc);

	if (rc)
		return rc;
	assert_int_equal(loc.count, 1);
	*f = loc.frames[0];
	free(loc.frames);
	return 0;
}

static int64_t object_id(struct harness *h, const char *where)
{
	char path[256], sql[256];
	sqlite3 *db;
	sqlite3_stmt *st;
	int64_t id;

	snprintf(path, sizeof(path), "%s/sysom.db", h->dir);
	snprintf(sql, sizeof(sql), "SELECT id FROM objects WHERE %s", where);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	id = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return id;
}

static int setup(void **state)
{
	struct state *s = calloc(1, sizeof(*s));

	assert_non_null(s);
	s->h = harness_new(NULL, NULL);
	assert_non_null(s->h);
	assert_int_equal(harness_post_fixture(s->h, &(struct fixture_spec){ .node = 1, .epoch = 1,
									     .sequence = 1,
									     .window_start_ns = HARNESS_T0 }),
			 200);
	s->kernel = object_id(s->h, "kind = 3");
	s->libc = object_id(s->h, "name LIKE '%libc.so.6'");
	s->python = object_id(s->h, "name = '/usr/bin/python3.11'");
	s->anon = object_id(s->h, "kind = 5");
	*state = s;
	return 0;
}

static int teardown(void **state)
{
	struct state *s = *state;

	harness_free(s->h);
	free(s);
	return 0;
}

/* Uploads the test kernel table through the PUT handler (which clears the cache). */
static void upload_kernel_table(struct state *s)
{
	const char text[] = "1000 T _stext\n1100 t do_one\n2200 T do_syscall_64\n3000 T _etext\n";
	struct test_request t;
	struct http_response resp;
	char *body;

	request_init(&t, "PUT", INGEST_KSYMS_PREFIX KERNEL_HEX, NULL);
	request_body(&t, text, strlen(text));
	assert_int_equal(call(ingest_ksyms_put, s->h->ingest, &t, &resp, &body), 200);
	free(body);
}

static void expect_frame(struct state *s, uint8_t stack_kind, int64_t object, uint64_t offset,
			 const char *name, enum symbolized_kind kind)
{
	struct symbolized_frame f;

	assert_int_equal(resolve1(s->h->sym, stack_kind, object, offset, &f), 0);
	if (strcmp(f.name, name) != 0)
		fail_msg("offset 0x%llx: '%s', want '%s'", (unsigned long long)offset, f.name, name);
	assert_int_equal(f.kind, kind);
	assert_int_equal(f.offset, offset);
	symbolized_frame_release(&f);
}

static void test_kernel_nearest_symbol(void **state)
{
	struct state *s = *state;
	struct symbolized_frame f;

	/* Without a table: "[kernel]+0xOFF". */
	expect_frame(s, SYSOM_STACK_KERNEL, s->kernel, 0x2234, "[kernel]+0x2234", SYMBOLIZED_KERNEL);
	upload_kernel_table(s);
	/* The upload cleared the cache: the same frame now has its symbol. */
	assert_int_equal(resolve1(s->h->sym, SYSOM_STACK_KERNEL, s->kernel, 0x2234, &f), 0);
	assert_string_equal(f.name, "do_syscall_64");
	assert_int_equal(f.kind, SYMBOLIZED_KERNEL);
	assert_true(f.has_symbol_offset);
	assert_int_equal(f.symbol_offset, 0x34);
	assert_string_equal(f.object, "[kernel.kallsyms]");
	assert_string_equal(f.build_id, KERNEL_HEX);
	symbolized_frame_release(&f);
	expect_frame(s, SYSOM_STACK_KERNEL, s->kernel, 0x1100, "do_one", SYMBOLIZED_KERNEL);
	expect_frame(s, SYSOM_STACK_KERNEL, s->kernel, 0x10ff, "_stext", SYMBOLIZED_KERNEL);
	expect_frame(s, SYSOM_STACK_KERNEL, s->kernel, 0x2fff, "do_syscall_64", SYMBOLIZED_KERNEL);
	/* Below the first symbol. */
	expect_frame(s, SYSOM_STACK_KERNEL, s->kernel, 0x10, "[kernel]+0x10", SYMBOLIZED_KERNEL);
	/* The last symbol has no end: at or past it nothing is named. */
	expect_frame(s, SYSOM_STACK_KERNEL, s->kernel, 0x3000, "[kernel]+0x3000", SYMBOLIZED_KERNEL);
	expect_frame(s, SYSOM_STACK_KERNEL, s->kernel, 0x123456, "[kernel]+0x123456", SYMBOLIZED_KERNEL);
	expect_frame(s, SYSOM_STACK_KERNEL, s->kernel, UINT64_MAX, "[kernel]+0xffffffffffffffff",
		     SYMBOLIZED_KERNEL);
	assert_int_equal(resolve1(s->h->sym, SYSOM_STACK_KERNEL, s->kernel, 0x3000, &f), 0);
	assert_false(f.has_symbol_offset);
	symbolized_frame_release(&f);
}

static void test_user_frames(void **state)
{
	struct state *s = *state;
	struct symbolized_frame f;

	assert_int_equal(resolve1(s->h->sym, SYSOM_STACK_USER, s->libc, 0x29d90, &f), 0);
	assert_string_equal(f.name, "libc.so.6+0x29d90");
	assert_string_equal(f.object, "/usr/lib/x86_64-linux-gnu/libc.so.6");
	assert_string_equal(f.build_id, LIBC_HEX);
	assert_int_equal(f.kind, SYMBOLIZED_USER);
	assert_false(f.has_symbol_offset);
	symbolized_frame_release(&f);
	expect_frame(s, SYSOM_STACK_USER, s->python, 0x1000, "python3.11+0x1000", SYMBOLIZED_USER);
	assert_int_equal(resolve1(s->h->sym, SYSOM_STACK_USER, s->anon, 0x7f0000001000, &f), 0);
	assert_string_equal(f.name, "[anon]+0x7f0000001000");
	assert_string_equal(f.build_id, "");
	assert_string_equal(f.object, "[anon:jit]");
	symbolized_frame_release(&f);
	/* No such object. */
	assert_int_equal(resolve1(s->h->sym, SYSOM_STACK_USER, 987654, 1, &f), -ENOENT);
}


/* A Python frame (object kind 7, "qualname\tfile", offset = line) is named
 * "qualname (file.py:line)", kind python, with its file and line; without a line
 * "(file.py)"; a name without a file "qualname (line N)". */
static void test_python_frames(void **state)
{
	struct state *s = *state;
	struct sysom_batch b;
	uint32_t o1, o2, proc, u1, u2, comm;
	struct sysom_process p = { .tgid = 2, .start_time_ns = 2 };
	struct symbolized_frame f;

	assert_int_equal(sysom_batch_init(&b), 0);
	memset(b.node_id, 0x34, sizeof(b.node_id));
	b.window_start_ns = HARNESS_T0;
	b.window_end_ns = HARNESS_T0 + 1000000000ULL;
	assert_int_equal(sysom_batch_add_object(&b, SYSOM_OBJECT_PYTHON, NULL, 0,
						"Model.forward\t/srv/job/model.py", &o1), 0);
	assert_int_equal(sysom_batch_add_object(&b, SYSOM_OBJECT_PYTHON, NULL, 0, "<lambda>", &o2), 0);
	assert_int_equal(sysom_batch_intern_cstring(&b, "python3", &comm), 0);
	p.comm = comm;
	assert_int_equal(sysom_batch_add_process(&b, &p, &proc), 0);
	struct sysom_frame f1 = { o1, 42 }, f2 = { o2, 0 };
	assert_int_equal(sysom_batch_add_stack(&b, SYSOM_STACK_USER, 0, &f1, 1, &u1), 0);
	assert_int_equal(sysom_batch_add_stack(&b, SYSOM_STACK_USER, 0, &f2, 1, &u2), 0);
	struct sysom_sample smp = { .process = proc, .kernel_stack = SYSOM_WIRE_NONE,
				    .user_stack = u1, .count = 1, .thread_comm = comm };
	assert_int_equal(sysom_batch_add_sample(&b, &smp), 0);
	smp.user_stack = u2;
	assert_int_equal(sysom_batch_add_sample(&b, &smp), 0);
	struct store_put_result res;
	assert_int_equal(store_batch_put(s->h->store, &b, 0, 1, &res), 0);
	sysom_batch_free(&b);
	int64_t id = object_id(s->h, "kind = 7 AND name LIKE 'Model.forward%'");
	assert_int_equal(resolve1(s->h->sym, SYSOM_STACK_USER, id, 42, &f), 0);
	assert_string_equal(f.name, "Model.forward (model.py:42)");
	assert_int_equal(f.kind, SYMBOLIZED_PYTHON);
	assert_string_equal(f.file, "/srv/job/model.py");
	assert_int_equal(f.line, 42);
	symbolized_frame_release(&f);
	expect_frame(s, SYSOM_STACK_USER, id, 0, "Model.forward (model.py)", SYMBOLIZED_PYTHON);
	id = object_id(s->h, "kind = 7 AND name = '<lambda>'");
	expect_frame(s, SYSOM_STACK_USER, id, 7, "<lambda> (line 7)", SYMBOLIZED_PYTHON);
}

/* A JIT frame (object kind 8, named by the process's perf map, offset into the function): the
 * map's name as is, a user frame marked jit, its offset as the symbol offset. */
static void test_jit_frames(void **state)
{
	struct state *s = *state;
	struct sysom_batch b;
	uint32_t o, proc, u, comm;
	struct sysom_process p = { .tgid = 3, .start_time_ns = 3 };
	struct symbolized_frame f;

	assert_int_equal(sysom_batch_init(&b), 0);
	memset(b.node_id, 0x35, sizeof(b.node_id));
	b.window_start_ns = HARNESS_T0;
	b.window_end_ns = HARNESS_T0 + 1000000000ULL;
	assert_int_equal(sysom_batch_add_object(&b, SYSOM_OBJECT_JIT, NULL, 0,
						"py::level3:/srv/chain.py", &o), 0);
	assert_int_equal(sysom_batch_intern_cstring(&b, "python3.12", &comm), 0);
	p.comm = comm;
	assert_int_equal(sysom_batch_add_process(&b, &p, &proc), 0);
	struct sysom_frame fr = { o, 5 };
	assert_int_equal(sysom_batch_add_stack(&b, SYSOM_STACK_USER, 0, &fr, 1, &u), 0);
	struct sysom_sample smp = { .process = proc, .kernel_stack = SYSOM_WIRE_NONE,
				    .user_stack = u, .count = 1, .thread_comm = comm };
	assert_int_equal(sysom_batch_add_sample(&b, &smp), 0);
	struct store_put_result res;
	assert_int_equal(store_batch_put(s->h->store, &b, 0, 1, &res), 0);
	sysom_batch_free(&b);
	int64_t id = object_id(s->h, "kind = 8 AND name = 'py::level3:/srv/chain.py'");
	assert_int_equal(resolve1(s->h->sym, SYSOM_STACK_USER, id, 5, &f), 0);
	assert_string_equal(f.name, "py::level3:/srv/chain.py");
	assert_int_equal(f.kind, SYMBOLIZED_USER);
	assert_true(f.jit);
	assert_true(f.has_symbol_offset);
	assert_int_equal(f.symbol_offset, 5);
	symbolized_frame_release(&f);
}

/* An address in no known mapping: "[unknown]+0xADDR", a kernel frame when in a kernel stack. */
static void test_unknown_frames(void **state)
{
	struct state *s = *state;
	struct sysom_batch b;
	uint32_t unk, proc, k, u, comm;
	struct sysom_process p = { .tgid = 1, .start_time_ns = 1 };

	assert_int_equal(sysom_batch_init(&b), 0);
	memset(b.node_id, 0x33, sizeof(b.node_id));
	b.window_start_ns = HARNESS_T0;
	b.window_end_ns = HARNESS_T0 + 1000000000ULL;
	assert_int_equal(sysom_batch_add_object(&b, SYSOM_OBJECT_UNKNOWN, NULL, 0, "[unknown]", &unk), 0);
	assert_int_equal(sysom_batch_intern_cstring(&b, "init", &comm), 0);
	p.comm = comm;
	assert_int_equal(sysom_batch_add_process(&b, &p, &proc), 0);
	struct sysom_frame fk = { unk, 0xffffffff81000000ULL }, fu = { unk, 0x401000 };
	assert_int_equal(sysom_batch_add_stack(&b, SYSOM_STACK_KERNEL, 0, &fk, 1, &k), 0);
	assert_int_equal(sysom_batch_add_stack(&b, SYSOM_STACK_USER, 0, &fu, 1, &u), 0);
	struct sysom_sample smp = { .process = proc, .kernel_stack = k, .user_stack = u, .count = 1,
				    .thread_comm = comm };
	assert_int_equal(sysom_batch_add_sample(&b, &smp), 0);
	struct store_put_result res;
	assert_int_equal(store_batch_put(s->h->store, &b, 0, 1, &res), 0);
	sysom_batch_free(&b);
	int64_t id = object_id(s->h, "kind = 6");
	expect_frame(s, SYSOM_STACK_KERNEL, id, 0xffffffff81000000ULL, "[unknown]+0xffffffff81000000",
		     SYMBOLIZED_KERNEL);
	expect_frame(s, SYSOM_STACK_USER, id, 0x401000, "[unknown]+0x401000", SYMBOLIZED_USER);
}

static void test_truncation_frames(void **state)
{
	static const struct {
		uint8_t stop;
		const char *name;
	} cases[] = {
		{ SYSOM_STOP_DEPTH_LIMIT, "[truncated: depth limit]" },
		{ SYSOM_STOP_READ_FAULT, "[truncated: read fault]" },
		{ SYSOM_STOP_STACK_LOST, "[truncated: stack lost]" },
		{ SYSOM_STOP_NO_MAPPING, "[truncated: no mapping]" },
		{ SYSOM_STOP_JIT, "[truncated: JIT code]" },
		{ 17, "[truncated: reason 17]" },
	};
	struct symbolized_frame f;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(symbolizer_stop_frame(cases[i].stop, &f), 0);
		assert_string_equal(f.name, cases[i].name);
		assert_int_equal(f.kind, SYMBOLIZED_ERROR);
		assert_string_equal(f.object, "");
		symbolized_frame_release(&f);
	}
	assert_int_equal(symbolizer_stop_frame(SYSOM_STOP_COMPLETE, &f), -EINVAL);
}

static void test_cache_bounded(void **state)
{
	struct state *s = *state;
	struct symbolizer *small = symbolizer_new(s->h->store, 4, 0);
	struct symbolizer_stats st;
	struct symbolized_frame f;
	char want[64];

	assert_non_null(small);
	for (int round = 0; round < 2; round++) {
		for (uint64_t off = 0; off < 10; off++) {
			assert_int_equal(resolve1(small, SYSOM_STACK_USER, s->libc, off, &f), 0);
			snprintf(want, sizeof(want), "libc.so.6+0x%llx", (unsigned long long)off);
			assert_string_equal(f.name, want);
			symbolized_frame_release(&f);
			symbolizer_stats_get(small, &st);
			assert_true(st.entries <= 4);
		}
	}
	/* The most recent frame is cached: resolving it again is a hit. */
	symbolizer_stats_get(small, &st);
	uint64_t hits = st.hits;
	assert_int_equal(resolve1(small, SYSOM_STACK_USER, s->libc, 9, &f), 0);
	symbolized_frame_release(&f);
	symbolizer_stats_get(small, &st);
	assert_int_equal(st.hits, hits + 1);
	assert_int_equal(st.misses, 20);
	/* A byte budget bounds it as well. */
	struct symbolizer *tiny = symbolizer_new(s->h->store, 1000, 1000);
	assert_non_null(tiny);
	for (uint64_t off = 0; off < 50; off++) {
		assert_int_equal(resolve1(tiny, SYSOM_STACK_USER, s->libc, off, &f), 0);
		symbolized_frame_release(&f);
	}
	symbolizer_stats_get(tiny, &st);
	assert_true(st.bytes <= 1000);
	assert_true(st.entries >= 1 && st.entries < 50);
	symbolizer_free(tiny);
	symbolizer_free(small);
}

struct worker {
	struct symbolizer *sym;
	int64_t libc;
	int failures;
};

static void *resolve_many(void *arg)
{
	struct worker *w = arg;
	char want[64];

	for (uint64_t i = 0; i < 2000; i++) {
		struct symbolized_frame f;
		uint64_t off = (i * 7) % 50;
		snprintf(want, sizeof(want), "libc.so.6+0x%llx", (unsigned long long)off);
		if (resolve1(w->sym, SYSOM_STACK_USER, w->libc, off, &f) ||
		    strcmp(f.name, want) != 0)
			w->failures++;
		else
			symbolized_frame_release(&f);
	}
	return NULL;
}

static void test_cache_threads(void **state)
{
	struct state *s = *state;
	struct symbolizer *sym = symbolizer_new(s->h->store, 16, 0);
	struct worker w[4];
	pthread_t th[4];

	assert_non_null(sym);
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ sym, s->libc, 0 };
		assert_int_equal(pthread_create(&th[i], NULL, resolve_many, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].failures, 0);
	}
	symbolizer_free(sym);
}

/* ---- the upload parser ---------------------------------------------------------------------- */

static void test_parse_valid(void **state)
{
	/* Unsorted, aliases at one offset, tabs, an empty line, no final newline. */
	const char text[] = "2200 t local_alias\n1000\tT\t_stext\n\n2200 T do_syscall_64\n"
			    "2200 W weak_one\nABCDEF t upper_hex\n0 t at_zero";
	struct ksyms_table t;
	struct ksyms_error err;

	(void)state;
	assert_int_equal(ksyms_table_parse(text, strlen(text), NULL, &t, &err), 0);
	assert_int_equal(t.count, 4);
	assert_int_equal(t.syms[0].offset, 0);
	assert_string_equal(t.syms[0].name, "at_zero");
	assert_int_equal(t.syms[1].offset, 0x1000);
	assert_string_equal(t.syms[1].name, "_stext");
	assert_int_equal(t.syms[1].type, 'T');
	/* The global text symbol wins over the local and the weak alias. */
	assert_int_equal(t.syms[2].offset, 0x2200);
	assert_string_equal(t.syms[2].name, "do_syscall_64");
	assert_int_equal(t.syms[3].offset, 0xabcdef);
	ksyms_table_free(&t);
	/* A 512-byte name and a 16-digit offset just below 2^63 are fine. */
	char line[600];
	memset(line, 0, sizeof(line));
	strcpy(line, "7fffffffffffffff T ");
	memset(line + strlen(line), 'n', 512);
	assert_int_equal(ksyms_table_parse(line, strlen(line), NULL, &t, &err), 0);
	assert_int_equal(t.syms[0].offset, 0x7fffffffffffffffULL);
	assert_int_equal(strlen(t.syms[0].name), 512);
	ksyms_table_free(&t);
}

static void expect_bad(const char *text, size_t len, size_t line, const char *fragment)
{
	struct ksyms_table t = { .count = 77 };
	struct ksyms_error err;
	int rc = ksyms_table_parse(text, len, NULL, &t, &err);

	if (rc != -SYSOM_ECORRUPT)
		fail_msg("'%s': rc %d, want ECORRUPT", text, rc);
	assert_int_equal(err.line, line);
	if (!strstr(err.message, fragment))
		fail_msg("'%s': message '%s' lacks '%s'", text, err.message, fragment);
	if (line) {
		char prefix[32];
		snprintf(prefix, sizeof(prefix), "line %zu: ", line);
		assert_memory_equal(err.message, prefix, strlen(prefix));
	}
	assert_int_equal(t.count, 77); /* untouched on failure */
}

static void test_parse_malformed(void **state)
{
	char name[600];

	(void)state;
	expect_bad("1000 T a\nxyz T b\n", 17, 2, "not hexadecimal");
	expect_bad("1000 T a\n\n\n1000\n", 15, 4, "missing type");
	expect_bad("1000 T\n", 7, 1, "missing name");
	expect_bad("1000 TT name\n", 12, 1, "longer than one letter");
	expect_bad("1000 1 name\n", 11, 1, "not a letter");
	expect_bad("1000 T a b\n", 11, 1, "after the name");
	expect_bad("1000 T a \n", 10, 1, "after the name");
	expect_bad("1000 T a\r\n", 10, 1, "control character");
	expect_bad(" 1000 T a\n", 10, 1, "missing offset");
	expect_bad("11112222333344445 T a\n", 22, 1, "more than 16 digits");
	expect_bad("8000000000000000 T a\n", 21, 1, "below 2^63");
	expect_bad("1000 T a\n2000 T b\0c\n", 20, 2, "NUL");
	expect_bad("", 0, 0, "no symbols");
	expect_bad("\n\n", 2, 0, "no symbols");
	snprintf(name, sizeof(name), "1 T %0513d", 0);
	expect_bad(name, strlen(name), 1, "longer than 512");
}

static void test_parse_limits(void **state)
{
	struct ksyms_limits lim = { .max_lines = 3 };
	struct ksyms_table t;
	struct ksyms_error err;

	(void)state;
	assert_int_equal(ksyms_table_parse("1 T a\n2 T b\n3 T c\n", 18, &lim, &t, &err), 0);
	ksyms_table_free(&t);
	/* Empty lines count. */
	assert_int_equal(ksyms_table_parse("1 T a\n\n\n4 T d\n", 14, &lim, &t, &err), -SYSOM_ELIMIT);
	assert_non_null(strstr(err.message, "more than 3 lines"));
	assert_int_equal(ksyms_table_parse(NULL, 3, &lim, &t, &err), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_kernel_nearest_symbol, setup, teardown),
		cmocka_unit_test_setup_teardown(test_user_frames, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_frames, setup, teardown),
		cmocka_unit_test_setup_teardown(test_python_frames, setup, teardown),
		cmocka_unit_test_setup_teardown(test_jit_frames, setup, teardown),
		cmocka_unit_test(test_truncation_frames),
		cmocka_unit_test_setup_teardown(test_cache_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_threads, setup, teardown),
		cmocka_unit_test(test_parse_valid),
		cmocka_unit_test(test_parse_malformed),
		cmocka_unit_test(test_parse_limits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
