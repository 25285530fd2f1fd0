/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The monitor's in-memory instances (server/analysis/live.c): calls folded in from batches in any
 * order give the same stragglers as the store; only complete instances of the last window
 * are emitted, in order; the memory budget shortens or refuses groups; a changed window or
 * communicator size starts the job over.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/analysis/live.h"
#include "tests/unit/server/harness.h"
#include "tests/unit/server/job_fixture.h"

#define JOB "job-42"

static uint32_t window_value = 100;
static int window_asked;

static uint32_t window_of(void *arg, const char *job)
{
	(void)arg, (void)job;
	window_asked++;
	return window_value;
}

/* Node `node`'s half of the 8-rank job: 4 ranks, `instances` all-reduces from seq 0. */
static void build(struct sysom_batch *b, uint8_t node, int instances, int late_rank)
{
	struct job_spec js = { .base = { .node = node, .epoch = 1, .sequence = 2,
					 .window_start_ns = HARNESS_T0 },
			       .job = JOB, .first_rank = 4 * (node - 1), .local_ranks = 4,
			       .instances = instances, .skip_rank = -1, .late_rank = late_rank,
			       .late_ms = late_rank >= 0 ? 30 : 0 };

	assert_int_equal(job_batch_build(b, &js), 0);
}

struct emitted {
	int calls, instances;
	uint64_t last_seq;
	bool ordered;
	int per_rank[8];
};

static int count(void *arg, const struct store_collective_call *c)
{
	struct emitted *e = arg;

	if (e->calls && c->seq != e->last_seq) {
		e->ordered &= c->seq > e->last_seq;
		e->instances++;
	}
	if (!e->calls)
		e->instances = 1;
	e->last_seq = c->seq;
	e->calls++;
	assert_int_equal(c->nranks, 8);
	assert_true(c->rank >= 0 && c->rank < 8);
	e->per_rank[c->rank]++;
	assert_int_equal(c->pid, JOB_PID(c->rank));
	return 0;
}

static struct emitted emit(struct live *l, bool has_comm, uint64_t comm)
{
	struct diagnosis_scope scope = { .job = JOB, .from_ms = 0, .to_ms = INT64_MAX / 2000000,
					 .has_comm = has_comm, .comm = comm };
	struct emitted e = { .ordered = true };

	assert_int_equal(live_source(l, &scope, count, &e), 0);
	return e;
}

/* Node 2's batch first: nothing complete until node 1's arrives; then every instance. */
static void test_out_of_order(void **state)
{
	struct live *l;
	struct sysom_batch b1, b2;
	struct live_add_stats st = { 0 };
	struct diagnosis_scope scope = { .job = JOB, .from_ms = 0, .to_ms = INT64_MAX / 2000000 };
	struct emitted e = { .ordered = true };

	(void)state;
	window_value = 100;
	assert_int_equal(live_new(0, &l), 0);
	assert_int_equal(live_source(l, &scope, count, &e), -ENOENT);
	build(&b2, 2, 12, -1);
	build(&b1, 1, 12, -1);
	assert_int_equal(live_batch_add(l, &b2, window_of, NULL, &st), 0);
	e = emit(l, false, 0);
	assert_int_equal(e.calls, 0);
	assert_int_equal(live_batch_add(l, &b1, window_of, NULL, &st), 0);
	e = emit(l, false, 0);
	assert_int_equal(e.instances, 12);
	assert_int_equal(e.calls, 12 * 8);
	assert_true(e.ordered);
	assert_int_equal(st.calls, 12 * 8);
	assert_int_equal(live_cells(l), 8 * 100);
	e = emit(l, true, 0xfff); /* another communicator */
	assert_int_equal(e.calls, 0);
	/* Re-sent calls (a spool replay) land in the same slots. */
	assert_int_equal(live_batch_add(l, &b1, window_of, NULL, &st), 0);
	e = emit(l, false, 0);
	assert_int_equal(e.instances, 12);
	live_job_drop(l, JOB);
	assert_int_equal(live_cells(l), 0);
	assert_int_equal(live_source(l, &scope, count, &e), -ENOENT);
	sysom_batch_free(&b1);
	sysom_batch_free(&b2);
	live_free(l);
}

/* The job's window is asked once per batch, not once per call: the monitor answers by
 * walking every job it tracks, so a per-call question made each batch cost calls x jobs (a
 * 5,000-node fleet of single-node jobs sending 30,000 calls per batch each: 0.3 s per batch
 * under the monitor's lock). */
static void test_window_asked_once_per_batch(void **state)
{
	struct live *l;
	struct sysom_batch b1, b2;
	struct live_add_stats st = { 0 };

	(void)state;
	window_value = 100;
	assert_int_equal(live_new(0, &l), 0);
	build(&b1, 1, 12, -1);
	build(&b2, 2, 12, -1);
	window_asked = 0;
	assert_int_equal(live_batch_add(l, &b1, window_of, NULL, &st), 0);
	assert_int_equal(st.calls, 12 * 4);
	assert_int_equal(window_asked, 1);
	assert_int_equal(live_batch_add(l, &b2, window_of, NULL, &st), 0);
	assert_int_equal(window_asked, 2);
	assert_int_equal(emit(l, false, 0).instances, 12);
	sysom_batch_free(&b1);
	sysom_batch_free(&b2);
	live_free(l);
}

/* A window of 16 keeps the last 16 instances; calls older than that are stale. */
static void test_window(void **state)
{
	struct live *l;
	struct sysom_batch b1, b2;
	struct live_add_stats st = { 0 };
	struct emitted e;

	(void)state;
	window_value = 16;
	assert_int_equal(live_new(0, &l), 0);
	build(&b1, 1, 40, -1);
	build(&b2, 2, 40, -1);
	assert_int_equal(live_batch_add(l, &b1, window_of, NULL, &st), 0);
	assert_int_equal(live_batch_add(l, &b2, window_of, NULL, &st), 0);
	e = emit(l, false, 0);
	assert_int_equal(e.instances, 16);
	assert_int_equal(e.last_seq, 39);
	assert_true(e.ordered);
	assert_int_equal(live_batch_add(l, &b1, window_of, NULL, &st), 0); /* seq 0..23 now stale */
	assert_int_equal(st.stale, 4 * 24);
	/* A new window for the job: its groups start over. */
	window_value = 20;
	assert_int_equal(live_batch_add(l, &b1, window_of, NULL, &st), 0);
	e = emit(l, false, 0);
	assert_int_equal(e.calls, 0); /* node 2's ranks have nothing in the new groups yet */
	assert_int_equal(live_cells(l), 8 * 20);
	sysom_batch_free(&b1);
	sysom_batch_free(&b2);
	live_free(l);
}

/* The budget: 8 ranks x 100 do not fit 400 cells, 8 x 50 do; under 16 slots: refused. */
static void test_budget(void **state)
{
	struct live *l;
	struct sysom_batch b1, b2;
	struct live_add_stats st = { 0 };
	struct diagnosis_scope scope = { .job = JOB, .from_ms = 0, .to_ms = INT64_MAX / 2000000 };
	struct emitted e = { .ordered = true };

	(void)state;
	window_value = 100;
	assert_int_equal(live_new(400, &l), 0);
	build(&b1, 1, 60, -1);
	build(&b2, 2, 60, -1);
	assert_int_equal(live_batch_add(l, &b1, window_of, NULL, &st), 0);
	assert_int_equal(live_batch_add(l, &b2, window_of, NULL, &st), 0);
	assert_int_equal(live_cells(l), 400);
	e = emit(l, false, 0);
	assert_int_equal(e.instances, 50);
	live_free(l);
	assert_int_equal(live_new(100, &l), 0);
	memset(&st, 0, sizeof(st));
	assert_int_equal(live_batch_add(l, &b1, window_of, NULL, &st), 0);
	assert_int_equal(st.refused, 4 * 60);
	assert_int_equal(live_cells(l), 0);
	assert_int_equal(live_source(l, &scope, count, &e), -ENOENT); /* the store takes over */
	sysom_batch_free(&b1);
	sysom_batch_free(&b2);
	live_free(l);
}

/* The same stragglers from memory as from the store. */
static void test_same_as_store(void **state)
{
	struct harness *h = harness_new(HARNESS_TOKEN, NULL);
	struct live *l;
	struct sysom_batch b1, b2;
	struct live_add_stats st = { 0 };
	struct diagnosis_ctx ctx;
	struct diagnosis_params p;
	struct diagnosis_scope scope = { .job = JOB, .from_ms = 0, .to_ms = INT64_MAX / 2000000 };
	json_t *from_store = NULL, *from_live = NULL;
	char *body = NULL;

	(void)state;
	window_value = 100;
	assert_non_null(h);
	assert_int_equal(live_new(0, &l), 0);
	build(&b1, 1, 12, 5);
	build(&b2, 2, 12, 5);
	assert_int_equal(harness_post_batch(h, &b1, &body), 200);
	free(body);
	assert_int_equal(harness_post_batch(h, &b2, &body), 200);
	free(body);
	assert_int_equal(live_batch_add(l, &b2, window_of, NULL, &st), 0);
	assert_int_equal(live_batch_add(l, &b1, window_of, NULL, &st), 0);
	api_diagnosis_ctx(h->api, &ctx);
	diagnosis_params_default(&p);
	assert_int_equal(diagnosis_stragglers(&ctx, &scope, &p, &from_store), 0);
	assert_int_equal(diagnosis_stragglers_from(&ctx, &scope, &p, live_source, l, &from_live), 0);
	json_t *a = json_object_get(from_store, "stragglers"), *b = json_object_get(from_live, "stragglers");
	assert_int_equal(json_array_size(a), 1);
	assert_true(json_equal(a, b));
	json_t *ca = json_array_get(json_object_get(from_store, "communicators"), 0);
	json_t *cb = json_array_get(json_object_get(from_live, "communicators"), 0);
	assert_true(json_equal(json_object_get(ca, "ranks"), json_object_get(cb, "ranks")));
	assert_int_equal(json_integer_value(json_object_get(cb, "instances")), 12);
	json_decref(from_store);
	json_decref(from_live);
	sysom_batch_free(&b1);
	sysom_batch_free(&b2);
	live_free(l);
	harness_free(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_out_of_order),
		cmocka_unit_test(test_window_asked_once_per_batch),
		cmocka_unit_test(test_window),
		cmocka_unit_test(test_budget),
		cmocka_unit_test(test_same_as_store),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
