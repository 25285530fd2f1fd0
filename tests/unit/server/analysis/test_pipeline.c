/* SPDX-License-Identifier: Apache-2.0 */
/* Pipeline stragglers: Send/Recv pairing and the slow stage / link (server/analysis/pipeline.c). */
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
#include "server/analysis/pipeline.h"

#define US 1000ll
#define MS 1000000ll
#define COMM 0xabcdull
#define MB 40 /* microbatches */

static const struct pipeline_params params = { .k = 3.5, .min_excess_ns = 1000000,
					       .scale_floor_ns = 50000 };

static void add(struct pipeline *pl, uint8_t op, int32_t rank, int32_t peer, uint64_t seq,
		int64_t entry, int64_t exit)
{
	struct pipeline_call c = { .comm = COMM, .seq = seq, .entry_ns = entry, .exit_ns = exit,
				   .rank = rank, .peer = peer, .job_rank = rank + 100,
				   .pid = (uint32_t)(1000 + rank), .op = op };
	assert_int_equal(pipeline_add(pl, &c), 0);
}

static uint32_t lcg(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

/*
 * A simulated `stages`-stage chain over `MB` microbatches: stage r computes `compute[r]` per
 * microbatch (plus jitter up to 100 µs), receives from r-1 and sends to r+1; a receive
 * completes `link_extra` after both sides are ready on link slow_src -> slow_src+1. Sends do
 * not block (unbounded buffers); the times are what the calls would show. Sequence numbers
 * start at `seq0` (wrapping past UINT64_MAX when near it). Calls are added in `order`:
 * 0 by stage, 1 reversed.
 */
static void chain(struct pipeline *pl, int stages, const int64_t *compute, int slow_src,
		  int64_t link_extra, uint64_t seq0, int order)
{
	int64_t ready[16][MB]; /* when stage r's send of microbatch m entered */
	int64_t recv_entry[16][MB], recv_exit[16][MB], send_exit[16][MB];
	uint32_t s = 7;

	assert_true(stages <= 16);
	for (int r = 0; r < stages; r++) {
		int64_t t = 0;
		for (int m = 0; m < MB; m++) {
			if (r > 0) {
				int64_t e = t, avail = ready[r - 1][m];
				int64_t start = avail > e ? avail : e;
				int64_t x = start + 20 * US + (r - 1 == slow_src ? link_extra : 0);
				recv_entry[r][m] = e;
				recv_exit[r][m] = x;
				t = x;
			}
			t += compute[r] + (int64_t)(lcg(&s) % 100) * US;
			ready[r][m] = t;
			send_exit[r][m] = t + 5 * US;
			if (r + 1 < stages)
				t = send_exit[r][m];
		}
	}
	for (int i = 0; i < stages; i++) {
		int r = order ? stages - 1 - i : i;
		for (int m = 0; m < MB; m++) {
			int mm = order ? MB - 1 - m : m;
			uint64_t seq = seq0 + (uint64_t)mm;
			if (r > 0)
				add(pl, SYSOM_NCCL_RECV, r, r - 1, seq, recv_entry[r][mm], recv_exit[r][mm]);
			if (r + 1 < stages)
				add(pl, SYSOM_NCCL_SEND, r, r + 1, seq, ready[r][mm], send_exit[r][mm]);
		}
	}
}

static const struct pipeline_stage *stage(const struct pipeline_result *r, int32_t rank)
{
	for (size_t i = 0; i < r->nstages; i++)
		if (r->stages[i].rank == rank)
			return &r->stages[i];
	fail_msg("stage %d missing", rank);
	return NULL;
}

static const struct pipeline_link *link_of(const struct pipeline_result *r, int32_t src)
{
	for (size_t i = 0; i < r->nlinks; i++)
		if (r->links[i].src == src)
			return &r->links[i];
	fail_msg("link %d missing", src);
	return NULL;
}

static void run_chain(int64_t slow_stage_extra, int slow_src, int64_t link_extra, uint64_t seq0,
		      int order, struct pipeline_result *res)
{
	int64_t compute[4] = { 2 * MS, 2 * MS, 2 * MS, 2 * MS };
	struct pipeline *pl;

	compute[2] += slow_stage_extra;
	assert_int_equal(pipeline_new(&pl), 0);
	chain(pl, 4, compute, slow_src, link_extra, seq0, order);
	assert_int_equal(pipeline_analyse(pl, &params, res), 0);
	pipeline_free(pl);
}

static void test_healthy(void **state)
{
	struct pipeline_result r;

	(void)state;
	run_chain(0, -1, 0, 0, 0, &r);
	assert_int_equal(r.transfers, 3 * MB);
	assert_int_equal(r.unmatched_sends + r.unmatched_recvs + r.duplicates, 0);
	assert_int_equal(r.nstages, 4);
	assert_int_equal(r.nlinks, 3);
	assert_int_equal(r.slow_stages, 0);
	assert_int_equal(r.slow_links, 0);
	for (int s = 0; s < 4; s++) {
		assert_true(stage(&r, s)->judged);
		/* 2 ms compute + up to 0.1 ms jitter (the middle stages also their send's 5 µs). */
		assert_true(stage(&r, s)->busy_ns > 1.9 * MS && stage(&r, s)->busy_ns < 2.2 * MS);
	}
	pipeline_result_free(&r);
}

static void test_slow_stage(void **state)
{
	struct pipeline_result r;

	(void)state;
	run_chain(3 * MS, -1, 0, 0, 0, &r);
	assert_int_equal(r.slow_stages, 1);
	assert_int_equal(r.slow_links, 0);
	const struct pipeline_stage *s2 = stage(&r, 2);
	assert_true(s2->slow);
	assert_int_equal(s2->job_rank, 102);
	assert_true(s2->excess_ns > 2.8 * MS && s2->excess_ns < 3.2 * MS);
	/* Downstream waits for it in its receives; upstream's busy time is unchanged. */
	assert_true(stage(&r, 3)->recv_wait_ns > 2.5 * MS);
	assert_false(stage(&r, 1)->slow);
	assert_false(stage(&r, 3)->slow);
	/* The receiver of link 2->3 waits on the sender. */
	assert_true(link_of(&r, 2)->wait_ns > 2.5 * MS);
	pipeline_result_free(&r);
}

static void test_slow_link(void **state)
{
	struct pipeline_result r;

	(void)state;
	run_chain(0, 1, 4 * MS, 0, 0, &r);
	assert_int_equal(r.slow_links, 1);
	assert_int_equal(r.slow_stages, 0);
	const struct pipeline_link *l = link_of(&r, 1);
	assert_true(l->slow);
	assert_int_equal(l->dst, 2);
	assert_true(l->transfer_ns > 3.9 * MS && l->transfer_ns < 4.2 * MS);
	pipeline_result_free(&r);
}

/* Input order does not matter; sequence numbers wrapping past UINT64_MAX pair as well. */
static void test_order_and_wraparound(void **state)
{
	struct pipeline_result a, b;

	(void)state;
	run_chain(3 * MS, -1, 0, 0, 0, &a);
	run_chain(3 * MS, -1, 0, UINT64_MAX - MB / 2, 1, &b);
	assert_int_equal(b.transfers, 3 * MB);
	assert_int_equal(b.unmatched_sends + b.unmatched_recvs, 0);
	assert_int_equal(a.nstages, b.nstages);
	for (size_t i = 0; i < a.nstages; i++) {
		assert_int_equal(a.stages[i].rank, b.stages[i].rank);
		assert_true(a.stages[i].busy_ns == b.stages[i].busy_ns);
		assert_int_equal(a.stages[i].slow, b.stages[i].slow);
	}
	for (size_t i = 0; i < a.nlinks; i++)
		assert_true(a.links[i].transfer_ns == b.links[i].transfer_ns);
	pipeline_result_free(&a);
	pipeline_result_free(&b);
}

/* A partner outside the window (or untraced) is counted, the rest still pairs. */
static void test_missing_partner(void **state)
{
	struct pipeline *pl;
	struct pipeline_result r;

	(void)state;
	assert_int_equal(pipeline_new(&pl), 0);
	for (uint64_t k = 0; k < 10; k++) {
		int64_t t = (int64_t)k * 10 * MS;
		add(pl, SYSOM_NCCL_SEND, 0, 1, k, t, t + 10 * US);
		if (k != 3) /* receive 3 never seen */
			add(pl, SYSOM_NCCL_RECV, 1, 0, k, t - MS, t + 50 * US);
	}
	add(pl, SYSOM_NCCL_RECV, 1, 0, 42, 200 * MS, 201 * MS); /* its send never seen */
	/* Two sends claiming one key: duplicates, not a transfer. */
	add(pl, SYSOM_NCCL_SEND, 2, 3, 0, 0, 1);
	add(pl, SYSOM_NCCL_SEND, 2, 3, 0, 5, 6);
	add(pl, SYSOM_NCCL_RECV, 3, 2, 0, 0, 7);
	assert_int_equal(pipeline_analyse(pl, &params, &r), 0);
	assert_int_equal(r.transfers, 9);
	assert_int_equal(r.unmatched_sends, 1);
	assert_int_equal(r.unmatched_recvs, 1);
	assert_int_equal(r.duplicates, 3);
	/* 0->1 waited 1 ms for the sender each time. */
	assert_true(link_of(&r, 0)->wait_ns > 0.99 * MS && link_of(&r, 0)->wait_ns < 1.01 * MS);
	/* Too few samples on 2->3: listed, not judged. */
	assert_false(link_of(&r, 2)->judged);
	pipeline_result_free(&r);
	pipeline_free(pl);
}

/* Hostile input: invalid calls counted, memory capped at PIPELINE_MAX_CALLS. */
static void test_bounded_hostile(void **state)
{
	struct pipeline *pl;
	struct pipeline_result r;
	uint32_t s = 1;

	(void)state;
	assert_int_equal(pipeline_new(&pl), 0);
	struct pipeline_call bad[] = {
		{ .comm = COMM, .rank = 0, .peer = 0, .op = SYSOM_NCCL_SEND },       /* to itself */
		{ .comm = COMM, .rank = -1, .peer = 1, .op = SYSOM_NCCL_SEND },
		{ .comm = COMM, .rank = 0, .peer = -5, .op = SYSOM_NCCL_RECV },
		{ .comm = 0, .rank = 0, .peer = 1, .op = SYSOM_NCCL_SEND },          /* no comm */
		{ .comm = COMM, .rank = 0, .peer = 1, .op = SYSOM_NCCL_ALL_REDUCE },
		{ .comm = COMM, .rank = 0, .peer = 1, .op = SYSOM_NCCL_SEND, .entry_ns = 5,
		  .exit_ns = 4 },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(pipeline_add(pl, &bad[i]), 0);
	/* Random ranks, peers, keys and times, more than the cap. */
	for (uint32_t i = 0; i < PIPELINE_MAX_CALLS + 1000; i++) {
		struct pipeline_call c = { .comm = 1 + lcg(&s) % 7, .seq = lcg(&s) % 50,
					   .rank = (int32_t)(lcg(&s) % 1000),
					   .peer = (int32_t)(lcg(&s) % 1000), .job_rank = -1,
					   .op = lcg(&s) % 2 ? SYSOM_NCCL_SEND : SYSOM_NCCL_RECV };
		c.entry_ns = (int64_t)lcg(&s);
		c.exit_ns = c.entry_ns + (int64_t)(lcg(&s) % 1000);
		assert_int_equal(pipeline_add(pl, &c), 0);
	}
	assert_int_equal(pipeline_analyse(pl, &params, &r), 0);
	assert_int_equal(r.calls, PIPELINE_MAX_CALLS);
	assert_true(r.invalid >= 6);
	assert_int_equal(r.calls + r.invalid + r.dropped, PIPELINE_MAX_CALLS + 1000 + 6);
	assert_true(r.nstages <= r.calls && r.nlinks <= r.calls);
	assert_int_equal(r.transfers * 2 + r.unmatched_sends + r.unmatched_recvs + r.duplicates,
			 r.calls);
	pipeline_result_free(&r);
	pipeline_free(pl);
}

static void test_empty(void **state)
{
	struct pipeline *pl;
	struct pipeline_result r;

	(void)state;
	assert_int_equal(pipeline_new(&pl), 0);
	assert_int_equal(pipeline_analyse(pl, &params, &r), 0);
	assert_int_equal(r.nstages + r.nlinks + r.transfers, 0);
	assert_int_equal(pipeline_analyse(NULL, &params, &r), -EINVAL);
	pipeline_result_free(&r);
	pipeline_free(pl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_healthy),
		cmocka_unit_test(test_slow_stage),
		cmocka_unit_test(test_slow_link),
		cmocka_unit_test(test_order_and_wraparound),
		cmocka_unit_test(test_missing_partner),
		cmocka_unit_test(test_bounded_hostile),
		cmocka_unit_test(test_empty),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
