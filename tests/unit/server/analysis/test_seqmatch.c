/* SPDX-License-Identifier: Apache-2.0 */
/* Communicator identity from call sequences (server/analysis/seqmatch.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "include/sysom/nccl_ops.h"
#include "server/analysis/seqmatch.h"

#define MS 1000000ll
#define ITER 100 /* iterations of the constructed jobs */

static int64_t jitter(uint32_t *state, int64_t amp)
{
	*state = *state * 1664525u + 1013904223u;
	return amp ? (int64_t)(*state >> 8) % amp : 0;
}

/* One rank's stream of a job iterating every `period`: an all-reduce of `bytes` per
 * iteration, from iteration `first` (tracing began then), entering `late` after `t0`, plus
 * jitter up to `amp`. */
static struct seqmatch_call *stream_calls(int first, int64_t t0, int64_t period, uint64_t bytes,
					  int64_t late, int64_t amp, uint32_t seed, size_t *n)
{
	struct seqmatch_call *c = calloc(ITER, sizeof(*c));

	assert_non_null(c);
	*n = 0;
	for (int it = first; it < ITER; it++)
		c[(*n)++] = (struct seqmatch_call){ SYSOM_NCCL_ALL_REDUCE, bytes,
						    t0 + it * period + late + jitter(&seed, amp), 0 };
	return c;
}

/* Four ranks attached at different iterations, listed out of rank order: one group of 4,
 * ranks by job rank, and each iteration's calls get one instance number on every rank. */
static void test_late_ranks_one_group(void **state)
{
	static const int first[4] = { 3, 0, 7, 1 };
	static const int32_t job_rank[4] = { 2, 0, 3, 1 };
	struct seqmatch_call *calls[4];
	struct seqmatch_stream s[4];
	struct seqmatch_result r;

	(void)state;
	for (int i = 0; i < 4; i++) {
		s[i] = (struct seqmatch_stream){ .job_rank = job_rank[i] };
		calls[i] = stream_calls(first[i], 1000 * MS, 100 * MS, 8, i == 2 ? 20 * MS : 0,
					2 * MS, 7u + (uint32_t)i, &s[i].ncalls);
		s[i].calls = calls[i];
	}
	assert_int_equal(seqmatch_run(s, 4, &r), 0);
	assert_int_equal(r.groups, 1);
	assert_int_equal(r.unmatched, 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(s[i].group, 0);
		assert_int_equal(s[i].nranks, 4);
		assert_int_equal(s[i].rank, job_rank[i]);
		/* call j of stream i is iteration first[i] + j: instance numbers differ from
		 * iterations by one constant for the whole group */
		assert_int_equal(s[i].seq_offset - first[i], s[0].seq_offset - first[0]);
	}
	for (int i = 0; i < 4; i++)
		free(calls[i]);
}

/* Two jobs' communicators with different sizes (bytes) at the same times, a stream alone, and
 * one whose times fall between the others' (half a period off): two groups, two unmatched. */
static void test_groups_apart(void **state)
{
	struct seqmatch_call *calls[7];
	struct seqmatch_stream s[7];
	struct seqmatch_result r;

	(void)state;
	for (int i = 0; i < 7; i++) {
		uint64_t bytes = i < 3 ? 8 : i < 5 ? 4096 : 8;
		int64_t late = i == 6 ? 50 * MS : 0;
		int64_t t0 = i == 5 ? 999999 * MS : 1000 * MS;
		s[i] = (struct seqmatch_stream){ .job_rank = i };
		calls[i] = stream_calls(i % 2, t0, 100 * MS, bytes, late, MS, 11u * (uint32_t)i + 1,
					&s[i].ncalls);
		s[i].calls = calls[i];
	}
	assert_int_equal(seqmatch_run(s, 7, &r), 0);
	assert_int_equal(r.groups, 2);
	assert_int_equal(r.unmatched, 2);
	assert_int_equal(s[0].group, s[1].group);
	assert_int_equal(s[0].group, s[2].group);
	assert_int_equal(s[3].group, s[4].group);
	assert_int_not_equal(s[0].group, s[3].group);
	assert_int_equal(s[0].nranks, 3);
	assert_int_equal(s[3].nranks, 2);
	assert_int_equal(s[3].rank, 0);
	assert_int_equal(s[4].rank, 1);
	assert_int_equal(s[5].group, -1);
	assert_int_equal(s[5].rank, -1);
	assert_int_equal(s[6].group, -1);
	for (int i = 0; i < 7; i++)
		free(calls[i]);
}

/* An op sequence that is not periodic has one alignment by ops and sizes (the other clock
 * 3 ms off); a mismatching size anywhere in the overlap refuses it, so does a short overlap. */
static void test_align_by_ops(void **state)
{
	struct seqmatch_call a[20], b[16];
	struct seqmatch_stream sa = { .calls = a, .ncalls = 20 }, sb = { .calls = b, .ncalls = 16 };
	int64_t d = 0;

	(void)state;
	for (int i = 0; i < 20; i++)
		a[i] = (struct seqmatch_call){ (uint8_t)(SYSOM_NCCL_ALL_REDUCE + (i * i) % 3),
					       (uint64_t)(i % 5) * 64, i * 10 * MS, 0 };
	for (int i = 0; i < 16; i++)
		b[i] = a[i + 4], b[i].entry_ns += 3 * MS;
	assert_int_equal(seqmatch_align(&sa, &sb, &d), 1);
	assert_int_equal(d, -4); /* a's call i is b's call i - 4 */
	b[10].bytes = 1;
	assert_int_equal(seqmatch_align(&sa, &sb, &d), 0);
	sb.ncalls = 2; /* too short to tell */
	assert_int_equal(seqmatch_align(&sa, &sb, &d), 0);
}

/* A straggler half a period late: entries alone are ambiguous between neighbouring
 * iterations, but a blocking collective releases every rank together: the exits align. */
static void test_half_period_late_aligns_by_exit(void **state)
{
	struct seqmatch_call a[40], b[40];
	struct seqmatch_stream sa = { .calls = a, .ncalls = 40 }, sb = { .calls = b, .ncalls = 38 };
	int64_t d = 0;

	(void)state;
	for (int i = 0; i < 40; i++) {
		int64_t release = i * 10 * MS + 5 * MS;
		a[i] = (struct seqmatch_call){ SYSOM_NCCL_ALL_REDUCE, 8, i * 10 * MS, release + 50000 };
		b[i] = (struct seqmatch_call){ SYSOM_NCCL_ALL_REDUCE, 8, i * 10 * MS + 5 * MS - 100000,
					       release + 60000 };
	}
	sb.calls = &b[2]; /* b traced from iteration 2 */
	assert_int_equal(seqmatch_align(&sa, &sb, &d), 1);
	assert_int_equal(d, -2);
	for (int i = 0; i < 40; i++)
		b[i].exit_ns = 0; /* exits unknown: entries alone are 4.9 / 5.1 ms off either way */
	assert_int_equal(seqmatch_align(&sa, &sb, &d), 0);
}

static void test_edges(void **state)
{
	struct seqmatch_result r;

	(void)state;
	assert_int_equal(seqmatch_run(NULL, 0, &r), 0);
	assert_int_equal(r.groups, 0);
	assert_int_equal(seqmatch_run(NULL, 3, &r), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_late_ranks_one_group),
		cmocka_unit_test(test_groups_apart),
		cmocka_unit_test(test_align_by_ops),
		cmocka_unit_test(test_half_period_late_aligns_by_exit),
		cmocka_unit_test(test_edges),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
