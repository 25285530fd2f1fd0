/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The hang detector (server/analysis/hang.c) over real live groups fed with batches: a 4-rank
 * job on two nodes (ranks 0-1 on node-1, 2-3 on node-2), one AllReduce per second. Threshold
 * max(floor, factor x spacing); the rank that never entered is named; progress resumes; all
 * entered and none finished; a rank whose process exited; a node that stopped reporting is
 * "agent lost", not a hang; a job whose processes are gone has ended; the tracker is bounded.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/analysis/diagnosis_render.h"
#include "server/analysis/hang.h"
#include "server/analysis/live.h"
#include "tests/support/batch_fixture.h"

#define JOB "job-hang"
#define COMM 0x1234ULL
#define T0_MS 1700000000000LL /* the job's first instance, ms since the epoch */
#define PID(rank) (7000u + (uint32_t)(rank))

static uint32_t window_of(void *arg, const char *job)
{
	(void)arg, (void)job;
	return 100;
}

/*
 * Node `node`'s batch (ranks 2 (node - 1) and 2 (node - 1) + 1): each listed rank (bit r of
 * `listed`) entered the AllReduces seq from..to-1 (instance s at T0 + s seconds + rank ms);
 * with `in_flight`, its last one had not returned.
 */
static void node_batch(struct sysom_batch *b, int node, unsigned listed, const uint64_t *from,
		       const uint64_t *to, bool in_flight)
{
	struct fixture_spec fs = { .node = (uint8_t)node, .epoch = 1, .sequence = 1,
				   .window_start_ns = (uint64_t)T0_MS * 1000000ULL };
	uint32_t comm, job;

	assert_int_equal(fixture_batch_build(b, &fs), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "python3", &comm), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, JOB, &job), 0);
	for (int i = 0; i < 2; i++) {
		int rank = 2 * (node - 1) + i;
		uint32_t proc;
		if (!(listed & (1u << rank)))
			continue;
		struct sysom_process p = { .tgid = PID(rank), .generation = 1, .comm = comm,
					   .exe = comm, .cmdline = comm, .ppid = 1 };
		assert_int_equal(sysom_batch_add_process(b, &p, &proc), 0);
		struct sysom_job_rank jr = { .process = proc, .job = job, .rank = rank,
					     .world_size = 4, .local_rank = i, .local_world_size = 2,
					     .group_rank = node - 1, .source = SYSOM_JOB_FROM_ENVIRONMENT,
					     .job_id_source = comm, .master = comm, .groups = comm };
		struct sysom_communicator c = { .process = proc, .rank = rank, .key = COMM,
						.nranks = 4, .split_color = -1, .split_key = -1,
						.key_source = SYSOM_COMM_KEY_UNIQUE_ID };
		assert_int_equal(sysom_batch_set_job_rank(b, &jr), 0);
		assert_int_equal(sysom_batch_set_communicator(b, &c), 0);
		for (uint64_t s = from[rank]; s < to[rank]; s++) {
			uint64_t at = (uint64_t)(T0_MS + 1000 * (int64_t)s + rank) * 1000000ULL;
			bool last = s + 1 == to[rank];
			struct sysom_nccl_call k = {
				.process = proc, .tid = PID(rank), .comm_key = COMM, .seq = s,
				.entry_ns = at, .exit_ns = at + 1000, .count = 1, .bytes = 4,
				.op = SYSOM_NCCL_ALL_REDUCE, .datatype = 7, .redop = 0, .peer = -1,
				.rank = rank,
				.flags = in_flight && last ? SYSOM_NCCL_IN_FLIGHT : 0 };
			assert_int_equal(sysom_batch_add_nccl_call(b, &k), 0);
		}
	}
}

struct fixture {
	struct live *l;
	struct hang_tracker *t;
	struct live_add_stats st;
	struct hang_params p;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(live_new(0, &f->l), 0);
	assert_int_equal(hang_tracker_new(&f->t), 0);
	f->p = (struct hang_params){ .floor_ms = 30000, .factor = 5 };
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	live_free(f->l);
	hang_tracker_free(f->t);
	free(f);
	return 0;
}

/* Node `node` sends its batch at `now`. */
static void feed(struct fixture *f, int node, unsigned listed, const uint64_t *from,
		 const uint64_t *to, bool in_flight, int64_t now)
{
	struct sysom_batch b;

	node_batch(&b, node, listed, from, to, in_flight);
	assert_int_equal(live_batch_add(f->l, &b, window_of, NULL, &f->st), 0);
	assert_int_equal(hang_tracker_note(f->t, &b, now), 0);
	sysom_batch_free(&b);
}

static struct hang_result eval(struct fixture *f, int64_t now)
{
	struct hang_result r;

	assert_int_equal(hang_evaluate(f->t, f->l, JOB, &f->p, now, &r), 0);
	return r;
}

/* Ranks 0, 1, 3 entered seq 20; rank 2 (node-2) stopped after seq 19. Both nodes keep
 * reporting every 2 s. */
static void stuck_rank2(struct fixture *f, int64_t until)
{
	const uint64_t from[4] = { 0 }, to[4] = { 21, 21, 20, 21 };

	for (int64_t at = T0_MS + 20000; at <= until; at += 2000) {
		feed(f, 1, 0x3, from, to, true, at);
		feed(f, 2, 0xc, from, to, true, at + 1);
	}
}

/* Below the threshold: pending, with the time to look again; past it: rank 2 named. */
static void test_threshold_and_naming(void **state)
{
	struct fixture *f = *state;
	struct hang_result r;

	stuck_rank2(f, T0_MS + 20000 + 40000);
	r = eval(f, T0_MS + 20000 + 29000);
	assert_int_equal(r.verdict, HANG_PENDING);
	assert_int_equal(r.threshold_ms, 30000); /* the floor: 5 x 1 s spacing is less */
	assert_int_equal(r.next_check_ms, T0_MS + 20000 + 30000);
	r = eval(f, T0_MS + 20000 + 31000);
	assert_int_equal(r.verdict, HANG_HUNG);
	assert_int_equal(r.seq, 20);
	assert_int_equal(r.comm, COMM);
	assert_int_equal(r.entered, 3);
	assert_int_equal(r.nranks, 4);
	assert_false(r.all_entered);
	assert_int_equal(r.nmissing, 1);
	assert_int_equal(r.ranks[0].rank, 2);
	assert_int_equal(r.ranks[0].pid, PID(2));
	assert_string_equal(r.ranks[0].host, "node-2");
	assert_int_equal(r.ranks[0].state, HANG_RANK_NOT_ENTERED);
	assert_int_equal(r.ranks[0].last_seq, 19);
	assert_int_equal(r.since_ms, T0_MS + 20000); /* rank 0 entered first */
	assert_true(r.interval_ms > 999 && r.interval_ms < 1001);
	assert_int_equal(r.nlost, 0);
}

/* A factor whose multiple of the spacing (40 x 1 s) is over the floor: it is the threshold. */
static void test_factor_over_floor(void **state)
{
	struct fixture *f = *state;
	struct hang_result r;

	f->p.factor = 40; /* 40 x 1 s spacing = 40 s */
	stuck_rank2(f, T0_MS + 20000 + 45000);
	r = eval(f, T0_MS + 20000 + 35000);
	assert_int_equal(r.verdict, HANG_PENDING);
	assert_int_equal(r.threshold_ms, 40000);
	r = eval(f, T0_MS + 20000 + 41000);
	assert_int_equal(r.verdict, HANG_HUNG);
}

/* Rank 2 enters again and the job goes on (instances up to 61, one a second): no hang. */
static void test_resume(void **state)
{
	struct fixture *f = *state;
	const uint64_t from[4] = { 0 }, to[4] = { 62, 62, 62, 62 };
	struct hang_result r;

	stuck_rank2(f, T0_MS + 20000 + 40000);
	assert_int_equal(eval(f, T0_MS + 20000 + 40000).verdict, HANG_HUNG);
	feed(f, 1, 0x3, from, to, false, T0_MS + 62000);
	feed(f, 2, 0xc, from, to, false, T0_MS + 62001);
	r = eval(f, T0_MS + 62002);
	assert_int_equal(r.verdict, HANG_NONE);
}

/* Every rank entered seq 20 and none returned. */
static void test_all_entered_none_finished(void **state)
{
	struct fixture *f = *state;
	const uint64_t from[4] = { 0 }, to[4] = { 21, 21, 21, 21 };
	const uint64_t to_next[4] = { 62, 62, 62, 62 };
	struct hang_result r;

	for (int64_t at = T0_MS + 21000; at <= T0_MS + 60000; at += 2000) {
		feed(f, 1, 0x3, from, to, true, at);
		feed(f, 2, 0xc, from, to, true, at + 1);
	}
	r = eval(f, T0_MS + 60002);
	assert_int_equal(r.verdict, HANG_HUNG);
	assert_true(r.all_entered);
	assert_int_equal(r.seq, 20);
	assert_int_equal(r.entered, 4);
	assert_int_equal(r.nmissing, 4);
	assert_int_equal(r.ranks[0].state, HANG_RANK_IN_FLIGHT);
	/* The same calls returned and the job went on (they had only been slow): no hang. */
	for (int64_t at = T0_MS + 61000; at <= T0_MS + 62000; at += 1000) {
		feed(f, 1, 0x3, from, to_next, false, at);
		feed(f, 2, 0xc, from, to_next, false, at + 1);
	}
	assert_int_equal(eval(f, T0_MS + 62002).verdict, HANG_NONE);
}

/*
 * A 4-stage pipeline of Send/Recv on COMM (stage r receives microbatch s from r - 1 and sends
 * it to r + 1; microbatch s at T0 + 100 ms s): node `node`'s batch with ranks' Sends seq
 * 0..sends[r]-1 and Recvs 0..recvs[r]-1, the last of each in flight when bit r of
 * `send_flight` / `recv_flight` is set. Rank 3 posts its receives 50 ms early.
 */
static void pipe_batch(struct sysom_batch *b, int node, const uint64_t *sends, const uint64_t *recvs,
		       unsigned send_flight, unsigned recv_flight)
{
	struct fixture_spec fs = { .node = (uint8_t)node, .epoch = 1, .sequence = 1,
				   .window_start_ns = (uint64_t)T0_MS * 1000000ULL };
	uint32_t comm, job;

	assert_int_equal(fixture_batch_build(b, &fs), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "python3", &comm), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, JOB, &job), 0);
	for (int i = 0; i < 2; i++) {
		int rank = 2 * (node - 1) + i;
		uint32_t proc;
		struct sysom_process p = { .tgid = PID(rank), .generation = 1, .comm = comm,
					   .exe = comm, .cmdline = comm, .ppid = 1 };
		assert_int_equal(sysom_batch_add_process(b, &p, &proc), 0);
		struct sysom_job_rank jr = { .process = proc, .job = job, .rank = rank,
					     .world_size = 4, .local_rank = i, .local_world_size = 2,
					     .group_rank = node - 1, .source = SYSOM_JOB_FROM_ENVIRONMENT,
					     .job_id_source = comm, .master = comm, .groups = comm };
		struct sysom_communicator c = { .process = proc, .rank = rank, .key = COMM,
						.nranks = 4, .split_color = -1, .split_key = -1,
						.key_source = SYSOM_COMM_KEY_UNIQUE_ID };
		assert_int_equal(sysom_batch_set_job_rank(b, &jr), 0);
		assert_int_equal(sysom_batch_set_communicator(b, &c), 0);
		for (int op = 0; op < 2; op++) {
			bool send = op == 0;
			uint64_t n = send ? sends[rank] : recvs[rank];
			bool flight = ((send ? send_flight : recv_flight) >> rank) & 1;
			for (uint64_t s = 0; s < n; s++) {
				int64_t ms = T0_MS + 100 * (int64_t)s + rank - (!send && rank == 3 ? 50 : 0);
				uint64_t at = (uint64_t)ms * 1000000ULL;
				struct sysom_nccl_call k = {
					.process = proc, .tid = PID(rank), .comm_key = COMM, .seq = s,
					.entry_ns = at, .exit_ns = at + 1000, .count = 1, .bytes = 4,
					.op = send ? SYSOM_NCCL_SEND : SYSOM_NCCL_RECV, .datatype = 7,
					.redop = SYSOM_NCCL_NO_REDOP, .peer = send ? rank + 1 : rank - 1,
					.rank = rank,
					.flags = flight && s + 1 == n ? SYSOM_NCCL_IN_FLIGHT : 0 };
				assert_int_equal(sysom_batch_add_nccl_call(b, &k), 0);
			}
		}
	}
}

/* Stage 1 stopped after receiving microbatch 20 and before sending it: stage 0 waits in its
 * send of 21, stage 2 in its receive of 20 from stage 1, stage 3 (which posted its receive
 * first, so it has waited longest) in its receive of 20 from stage 2. Rank 1 is named, on a
 * link; the link 2->3 that waits longest names rank 2, which waits itself: not chosen. */
static void test_pipeline_link_hang(void **state)
{
	struct fixture *f = *state;
	const uint64_t sends[4] = { 22, 20, 20, 0 }, recvs[4] = { 0, 21, 21, 21 };
	struct sysom_batch b;
	struct hang_result r;

	for (int64_t at = T0_MS + 2200; at <= T0_MS + 40000; at += 2000)
		for (int node = 1; node <= 2; node++) {
			pipe_batch(&b, node, sends, recvs, 0x1, 0xc);
			assert_int_equal(live_batch_add(f->l, &b, window_of, NULL, &f->st), 0);
			assert_int_equal(hang_tracker_note(f->t, &b, at + node), 0);
			sysom_batch_free(&b);
		}
	assert_true(f->st.p2p_calls > 0);
	assert_int_equal(f->st.calls, 0);
	assert_int_equal(eval(f, T0_MS + 20000).verdict, HANG_PENDING);
	r = eval(f, T0_MS + 40003);
	assert_int_equal(r.verdict, HANG_HUNG);
	assert_true(r.link);
	assert_false(r.behind);
	assert_int_equal(r.nnamed, 1);
	assert_int_equal(r.ranks[0].rank, 1);
	assert_int_equal(r.ranks[0].comm_rank, 1);
	assert_int_equal(r.ranks[0].state, HANG_RANK_NOT_ENTERED);
	assert_true((r.src == 0 && r.dst == 1 && r.seq == 21) || (r.src == 1 && r.dst == 2 && r.seq == 20));
	assert_true(r.interval_ms > 99 && r.interval_ms < 101);
	/* The collective analysis sees no instance of these calls. */
	struct diagnosis_scope scope = { .job = JOB, .from_ms = 0, .to_ms = INT64_MAX };
	assert_int_equal(live_source(f->l, &scope, NULL, NULL), -ENOENT);
}

/* A pipeline-only job (Send/Recv, no collective) whose stages all finished microbatch 20 and
 * began nothing since: a stall whose newest work was a transfer, described as one. A job of
 * collectives keeps the collective wording. */
static void test_pipeline_stall(void **state)
{
	struct fixture *f = *state;
	const uint64_t sends[4] = { 21, 21, 21, 0 }, recvs[4] = { 0, 21, 21, 21 };
	struct sysom_batch b;
	struct hang_result r;
	char text[512];

	for (int64_t at = T0_MS + 2200; at <= T0_MS + 40000; at += 2000)
		for (int node = 1; node <= 2; node++) {
			pipe_batch(&b, node, sends, recvs, 0, 0);
			assert_int_equal(live_batch_add(f->l, &b, window_of, NULL, &f->st), 0);
			assert_int_equal(hang_tracker_note(f->t, &b, at + node), 0);
			sysom_batch_free(&b);
		}
	assert_int_equal(eval(f, T0_MS + 20000).verdict, HANG_NONE);
	r = eval(f, T0_MS + 40004);
	assert_int_equal(r.verdict, HANG_STALL);
	assert_true(r.link);
	assert_int_equal(r.seq, 20);
	assert_true(hang_stall_describe(&r, text, sizeof(text)) < (int)sizeof(text));
	assert_non_null(strstr(text, "no collective or transfer began on any communicator of the job"
				     " for "));
	char last[128];
	snprintf(last, sizeof(last), "; last: transfer #20 from rank %d to rank %d of communicator "
		 "0000000000001234", r.src, r.dst);
	assert_non_null(strstr(text, last));
	assert_true(r.dst == r.src + 1);
	/* The report's text says the same. */
	json_t *j = diagnosis_hang_json(&r, NULL, 0);
	struct byte_buf out = { 0 };
	assert_non_null(j);
	diagnosis_hang_text(j, &out);
	byte_buf_put_u8(&out, 0);
	snprintf(last, sizeof(last), "the newest: transfer #20 from rank %d to rank %d on "
		 "communicator 0000000000001234", r.src, r.dst);
	assert_non_null(strstr((char *)out.data, "stall: no collective or transfer began"));
	assert_non_null(strstr((char *)out.data, last));
	json_decref(j);
	byte_buf_free(&out);

	r.link = false;
	r.op = SYSOM_NCCL_ALL_REDUCE;
	hang_stall_describe(&r, text, sizeof(text));
	assert_non_null(strstr(text, "no collective began on any communicator of the job for "));
	assert_non_null(strstr(text, "; last: AllReduce #20 of communicator 0000000000001234"));
	/* Cut to fit, the full length returned. */
	int full = hang_stall_describe(&r, text, 16);
	assert_true(full > 16);
	assert_int_equal(strlen(text), 15);
}

/* Rank 2's process exited: node-2 reports rank 3 only. */
static void test_exited(void **state)
{
	struct fixture *f = *state;
	const uint64_t from[4] = { 0 }, to[4] = { 21, 21, 20, 21 };
	struct hang_result r;

	stuck_rank2(f, T0_MS + 24000);
	for (int64_t at = T0_MS + 26000; at <= T0_MS + 60000; at += 2000) {
		feed(f, 1, 0x3, from, to, true, at);
		feed(f, 2, 0x8, from, to, true, at + 1);
	}
	r = eval(f, T0_MS + 60002);
	assert_int_equal(r.verdict, HANG_HUNG);
	assert_int_equal(r.nmissing, 1);
	assert_int_equal(r.ranks[0].rank, 2);
	assert_int_equal(r.ranks[0].state, HANG_RANK_EXITED);
	assert_false(r.job_ended);
}

/* Node-2's agent stops: its ranks are not blamed, the node is named lost. */
static void test_agent_lost_not_hang(void **state)
{
	struct fixture *f = *state;
	const uint64_t from[4] = { 0 }, to_before[4] = { 21, 21, 20, 20 };
	const uint64_t to[4] = { 31, 31, 20, 20 };
	struct hang_result r;

	for (int64_t at = T0_MS + 10000; at <= T0_MS + 20000; at += 2000) {
		feed(f, 1, 0x3, from, to_before, true, at);
		feed(f, 2, 0xc, from, to_before, true, at + 1);
	}
	/* node-2 silent from T0 + 20 s; node-1's ranks go on (their calls return: the others
	 * are there, only their agent is gone). */
	for (int64_t at = T0_MS + 22000; at <= T0_MS + 60000; at += 2000)
		feed(f, 1, 0x3, from, to, false, at);
	/* Lost after max(3 x 2 s + 5 s, 30 s) of silence. */
	r = eval(f, T0_MS + 20001 + 29000);
	assert_int_equal(r.nlost, 0);
	assert_int_not_equal(r.verdict, HANG_HUNG);
	assert_int_equal(r.next_check_ms, T0_MS + 20000 + 30000); /* the threshold comes first */
	r = eval(f, T0_MS + 60002);
	assert_int_equal(r.verdict, HANG_AGENT_LOST);
	assert_int_equal(r.nlost, 1);
	assert_string_equal(r.lost[0].host, "node-2");
	assert_int_equal(r.lost[0].nranks, 2);
	assert_int_equal(r.ranks[0].state, HANG_RANK_AGENT_LOST);
	assert_int_equal(r.ranks[1].state, HANG_RANK_AGENT_LOST);
}

/* The node reports late: a missing rank whose node has not reported since the instance began
 * is not judged. */
static void test_unseen_is_not_judged(void **state)
{
	struct fixture *f = *state;
	const uint64_t from[4] = { 0 }, to[4] = { 21, 21, 20, 20 };
	struct hang_result r;

	f->p.floor_ms = 1000;
	f->p.factor = 1;
	feed(f, 2, 0xc, from, to, false, T0_MS + 19900); /* before instance 20 began */
	feed(f, 1, 0x3, from, to, true, T0_MS + 24000);
	r = eval(f, T0_MS + 24500);
	assert_int_equal(r.verdict, HANG_PENDING);
	assert_int_equal(r.ranks[0].state, HANG_RANK_UNSEEN);
	assert_int_equal(r.next_check_ms, T0_MS + 25500);
}

/* Every process of the job gone: it ended, no hang. */
static void test_job_ended(void **state)
{
	struct fixture *f = *state;
	const uint64_t from[4] = { 0 }, to[4] = { 21, 21, 20, 21 };

	stuck_rank2(f, T0_MS + 24000);
	feed(f, 1, 0, from, to, false, T0_MS + 70000);
	feed(f, 2, 0, from, to, false, T0_MS + 70001);
	struct hang_result r = eval(f, T0_MS + 70002);
	assert_int_equal(r.verdict, HANG_NONE);
	assert_true(r.job_ended);
	assert_int_equal(r.next_check_ms, 0);
	hang_tracker_job_drop(f->t, JOB);
	r = eval(f, T0_MS + 70002);
	assert_false(r.job_ended);
}

/* Tracing began after the job did: rank 2 was never seen (no call, no process) and the
 * others have waited in seq 20 since: rank 2 is named, as never seen anywhere. */
static void test_never_seen_rank(void **state)
{
	struct fixture *f = *state;
	const uint64_t from[4] = { 15, 15, 0, 15 }, to[4] = { 21, 21, 0, 21 };
	struct hang_result r;

	for (int64_t at = T0_MS + 20000; at <= T0_MS + 60000; at += 2000) {
		feed(f, 1, 0x3, from, to, true, at);
		feed(f, 2, 0x8, from, to, true, at + 1);
	}
	r = eval(f, T0_MS + 60002);
	assert_int_equal(r.verdict, HANG_HUNG);
	assert_int_equal(r.seq, 0); /* the first it never entered */
	assert_int_equal(r.since_ms, T0_MS + 20000); /* the others' wait in the newest one */
	assert_int_equal(r.nmissing, 1);
	assert_int_equal(r.ranks[0].comm_rank, 2);
	assert_int_equal(r.ranks[0].pid, 0);
	assert_int_equal(r.ranks[0].state, HANG_RANK_NOT_ENTERED);
	/* The same job progressing (newest instance fresh): no hang for the unseen rank. */
	r = eval(f, T0_MS + 20500);
	assert_int_not_equal(r.verdict, HANG_HUNG);
}

/* Healthy: ranks in the middle of an instance at the seal are not a hang. */
static void test_healthy_in_progress(void **state)
{
	struct fixture *f = *state;
	const uint64_t from[4] = { 0 }, to[4] = { 30, 30, 29, 30 };
	const uint64_t to2[4] = { 31, 31, 31, 31 };

	feed(f, 1, 0x3, from, to, true, T0_MS + 29100);
	feed(f, 2, 0xc, from, to, true, T0_MS + 29101);
	assert_int_equal(eval(f, T0_MS + 29200).verdict, HANG_PENDING);
	feed(f, 1, 0x3, from, to2, false, T0_MS + 31100);
	feed(f, 2, 0xc, from, to2, false, T0_MS + 31101);
	assert_int_equal(eval(f, T0_MS + 31200).verdict, HANG_NONE);
}

/* The node table is bounded: the node silent longest is forgotten at the limit. */
static void test_bounded_nodes(void **state)
{
	struct fixture *f = *state;
	struct fixture_spec fs = { .epoch = 1, .sequence = 1, .window_start_ns = 1 };
	char host[32];
	int64_t last;

	for (int i = 0; i < HANG_MAX_NODES + 10; i++) {
		struct sysom_batch b;
		snprintf(host, sizeof(host), "n%d", i);
		fs.hostname = host;
		fs.node = (uint8_t)i;
		assert_int_equal(fixture_batch_build(&b, &fs), 0);
		assert_int_equal(hang_tracker_note(f->t, &b, 1000 + i), 0);
		sysom_batch_free(&b);
	}
	assert_false(hang_node_lost(f->t, "n0", 2000, &last));
	assert_int_equal(last, 0); /* forgotten */
	assert_false(hang_node_lost(f->t, "n4100", 2000, &last));
	assert_int_equal(last, 1000 + 4100);
	assert_true(hang_node_lost(f->t, "n4100", 1000 + 4100 + 3 * HANG_DEFAULT_BATCH_MS +
							HANG_LOST_SLACK_MS + 1, &last));
}

/* The report as JSON and as text: the waiting instance, the named rank with its state, pid,
 * process, stacks and threads; an agent-lost report names the node and its ranks. */
static void test_render(void **state)
{
	struct hang_result r = { .verdict = HANG_HUNG, .comm = 0xabcdef, .op = SYSOM_NCCL_ALL_REDUCE,
				 .seq = 57, .nranks = 8, .entered = 7, .since_ms = 1000,
				 .waited_ms = 42000, .threshold_ms = 30000, .interval_ms = 250,
				 .nmissing = 1, .nnamed = 1 };
	struct hang_evidence ev = { .process_exists = 1, .oncpu_samples = 9, .noncpu = 1,
				    .threads_present = true, .nthreads = 1, .threads_total = 3 };
	struct hang_lost_node ln = { .host = "gpu-7", .last_ms = 5, .nranks = 2, .ranks = { 4, 5 } };
	struct byte_buf text = { 0 };
	json_t *j;
	char *s;

	(void)state;
	r.ranks[0] = (struct hang_rank){ .rank = 3, .comm_rank = 3, .pid = 4242, .host = "gpu-1",
					 .state = HANG_RANK_NOT_ENTERED, .entered_any = true,
					 .last_seq = 56 };
	ev.rank = r.ranks[0];
	ev.cause = (struct hang_cause){ .cls = HANG_CAUSE_SLEEPING, .detail = "loader" };
	ev.oncpu[0] = (struct hang_stack){ strdup("main;train_step;read_batch"), 9 };
	ev.threads[0] = (struct hang_thread){ .tid = 4243, .comm = "loader", .oncpu_ns = 2000000,
					      .voluntary_switches = 4 };
	j = diagnosis_hang_json(&r, &ev, 1);
	assert_non_null(j);
	s = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
	assert_non_null(strstr(s, "\"comm\":\"0000000000abcdef\""));
	assert_non_null(strstr(s, "\"op\":\"AllReduce\""));
	assert_non_null(strstr(s, "\"state\":\"not entered\""));
	assert_non_null(strstr(s, "\"process_exists\":true"));
	assert_non_null(strstr(s, "\"offcpu_stacks\":null"));
	assert_non_null(strstr(s, "\"verdict\":\"hang\""));
	assert_non_null(strstr(s, "\"cause\":{\"class\":\"sleeping\",\"detail\":\"loader\"}"));
	assert_non_null(strstr(s, "\"stack\":\"main;train_step;read_batch\""));
	free(s);
	diagnosis_hang_text(j, &text);
	byte_buf_put_u8(&text, 0);
	assert_non_null(strstr((char *)text.data, "AllReduce #57 on communicator 0000000000abcdef: 7 of 8 ranks entered, waiting 42.0 s (threshold 30.0 s"));
	assert_non_null(strstr((char *)text.data, "rank 3 (communicator rank 3, gpu-1, pid 4242): not entered; process exists"));
	assert_non_null(strstr((char *)text.data, "thread 4243 loader"));
	assert_non_null(strstr((char *)text.data, "  cause: sleeping (loader)\n"));
	assert_non_null(strstr((char *)text.data, "        train_step\n"));
	json_decref(j);
	byte_buf_free(&text);
	hang_evidence_free(&ev);

	j = diagnosis_agent_lost_json(&ln);
	diagnosis_hang_text(j, &text);
	byte_buf_put_u8(&text, 0);
	assert_non_null(strstr((char *)text.data, "node gpu-7: no batch since 5 ms since the epoch; it listed 2 process(es) of the job, ranks: 4 5"));
	json_decref(j);
	byte_buf_free(&text);
}

/* A named rank's identity: set from its job-rank row (same rank and pid only), shown in the
 * JSON as the straggler evidence shows its pod (with the container), and the Slurm job, and in
 * the text; a rank without one says null. */
static void test_render_identity(void **state)
{
	struct hang_result r = { .verdict = HANG_HUNG, .comm = 0x1, .op = SYSOM_NCCL_ALL_REDUCE,
				 .seq = 5, .nranks = 4, .entered = 2, .nmissing = 2, .nnamed = 2 };
	struct byte_buf text = { 0 };
	char longpod[400];
	json_t *j;
	char *s;

	(void)state;
	r.ranks[0] = (struct hang_rank){ .rank = 1, .comm_rank = 1, .pid = 100, .host = "gpu-1",
					 .state = HANG_RANK_NOT_ENTERED };
	r.ranks[1] = (struct hang_rank){ .rank = 2, .comm_rank = 2, .pid = 200, .host = "gpu-2",
					 .state = HANG_RANK_EXITED };
	/* Another process of rank 1 (same rank, other pid), another rank: not set. */
	assert_int_equal(hang_rank_set_identity(&r, 1, 101, "ml", "x", "y", 0, NULL), 0);
	assert_int_equal(hang_rank_set_identity(&r, 3, 100, "ml", "x", "y", 0, NULL), 0);
	assert_int_equal(hang_rank_set_identity(&r, 1, 100, "ml", "llama-worker-1", "pytorch", 0,
						"ignored without a job"),
			 1);
	assert_string_equal(r.ranks[0].identity.slurm_step, "");
	assert_int_equal(hang_rank_set_identity(&r, 2, 200, NULL, NULL, NULL, 4242, "0"), 1);
	j = diagnosis_hang_json(&r, NULL, 0);
	assert_non_null(j);
	s = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
	assert_non_null(strstr(s, "\"pod\":{\"container\":\"pytorch\",\"name\":\"llama-worker-1\","
				  "\"namespace\":\"ml\"}"));
	assert_non_null(strstr(s, "\"pod\":null"));
	assert_non_null(strstr(s, "\"slurm_job\":4242,\"slurm_step\":\"0\""));
	assert_non_null(strstr(s, "\"slurm_job\":null,\"slurm_step\":null"));
	free(s);
	diagnosis_hang_text(j, &text);
	byte_buf_put_u8(&text, 0);
	assert_non_null(strstr((char *)text.data, "rank 1 (communicator rank 1, gpu-1, pid 100, pod "
						  "ml/llama-worker-1 container pytorch): not entered"));
	assert_non_null(strstr((char *)text.data, "rank 2 (communicator rank 2, gpu-2, pid 200, slurm "
						  "job 4242.0): exited"));
	json_decref(j);
	byte_buf_free(&text);

	/* Longer names than a pod's are cut, never overrun. */
	memset(longpod, 'p', sizeof(longpod) - 1);
	longpod[sizeof(longpod) - 1] = '\0';
	assert_int_equal(hang_rank_set_identity(&r, 1, 100, longpod, longpod, longpod, 0, NULL), 1);
	assert_int_equal(strlen(r.ranks[0].identity.pod), HANG_K8S_NAME_MAX - 1);
	assert_int_equal(strlen(r.ranks[0].identity.container), HANG_CONTAINER_MAX - 1);
	assert_int_equal(hang_rank_set_identity(NULL, 1, 100, "a", "b", "c", 0, NULL), 0);
}

/* Every rank returned from seq 20 and began nothing since (a data loader, storage), both
 * nodes still reporting and listing the processes: a stall past max(floor, 5 x spacing),
 * naming the ranks as between collectives; rank 2 exiting is named as exited. */
static void test_stall(void **state)
{
	struct fixture *f = *state;
	const uint64_t from[4] = { 0 }, to[4] = { 21, 21, 21, 21 };
	struct hang_result r;

	for (int64_t at = T0_MS + 21000; at <= T0_MS + 60000; at += 2000) {
		feed(f, 1, 0x3, from, to, false, at);
		feed(f, 2, 0xc, from, to, false, at + 1);
	}
	r = eval(f, T0_MS + 45000); /* 25 s quiet: below the 30 s floor */
	assert_int_equal(r.verdict, HANG_NONE);
	assert_int_equal(r.next_check_ms, T0_MS + 20003 + 30000 + 1);
	r = eval(f, T0_MS + 55000);
	assert_int_equal(r.verdict, HANG_STALL);
	assert_int_equal(r.since_ms, T0_MS + 20003); /* the newest entry: rank 3's */
	assert_int_equal(r.threshold_ms, 30000);
	assert_int_equal(r.seq, 20);
	assert_int_equal(r.nnamed, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(r.ranks[i].rank, i);
		assert_int_equal(r.ranks[i].state, HANG_RANK_IDLE);
	}
	assert_string_equal(hang_rank_state_name(HANG_RANK_IDLE), "between collectives");
	/* Rank 2 exits: still a stall of the others, rank 2 named as exited. */
	feed(f, 2, 0x8, from, to, false, T0_MS + 62000);
	r = eval(f, T0_MS + 62001);
	assert_int_equal(r.verdict, HANG_STALL);
	assert_int_equal(r.ranks[2].state, HANG_RANK_EXITED);
	/* A node silent past its lost time: agent lost, never a stall. */
	r = eval(f, T0_MS + 200000);
	assert_int_not_equal(r.verdict, HANG_STALL);
	assert_true(r.nlost > 0);
}

/* The quiet is only data on its way: a node has not reported since the threshold passed. */
static void test_stall_waits_for_reports(void **state)
{
	struct fixture *f = *state;
	const uint64_t from[4] = { 0 }, to[4] = { 21, 21, 21, 21 };
	struct hang_result r;

	feed(f, 1, 0x3, from, to, false, T0_MS + 60000);
	feed(f, 2, 0xc, from, to, false, T0_MS + 40000); /* before since + threshold */
	r = eval(f, T0_MS + 60500);
	assert_int_equal(r.verdict, HANG_NONE);
	assert_int_equal(r.next_check_ms, T0_MS + 61500);
	feed(f, 2, 0xc, from, to, false, T0_MS + 61000);
	assert_int_equal(eval(f, T0_MS + 61500).verdict, HANG_STALL);
}

/* The cause class of each kind of evidence. */
static void test_classify(void **state)
{
	struct hang_evidence ev;
	struct hang_cause c;

	(void)state;
	memset(&ev, 0, sizeof(ev));
	ev.rank = (struct hang_rank){ .rank = 1, .pid = 100, .host = "gpu-1",
				      .state = HANG_RANK_EXITED };
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_EXITED);
	assert_string_equal(hang_cause_name(c.cls), "exited");
	ev.rank.state = HANG_RANK_IN_FLIGHT;
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_IN_NCCL);
	ev.rank.state = HANG_RANK_AGENT_LOST;
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_AGENT_LOST);

	ev.rank.state = HANG_RANK_NOT_ENTERED;
	ev.main_active = -1;
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_UNKNOWN); /* nothing to go by */

	/* Threads listed, the main one neither ran nor woke: frozen. */
	ev.threads_present = true;
	ev.threads_total = 3;
	ev.main_active = 0;
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_FROZEN);
	assert_string_equal(hang_cause_name(c.cls), "frozen");

	/* A thread on the CPU most of the window: spinning, with its on-CPU leaf frames. */
	ev.nthreads = 1;
	ev.threads[0] = (struct hang_thread){ .tid = 101, .comm = "python3",
					      .oncpu_ns = 900000000 };
	ev.noncpu = 1;
	ev.oncpu[0] = (struct hang_stack){ (char *)"main;train;spin_wait", 90 };
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_SPINNING);
	assert_non_null(strstr(c.detail, "thread 101 (python3) 900 ms on CPU"));
	assert_non_null(strstr(c.detail, "spin_wait < train < main"));
	ev.threads[0].oncpu_ns = 1000000; /* 1 ms: not spinning */
	ev.main_active = 1;

	/* The heaviest off-CPU stack says where it sleeps. */
	ev.noffcpu = 1;
	ev.offcpu[0] = (struct hang_stack){
		(char *)"main;load;pthread_mutex_lock;__lll_lock_wait;futex_wait_queue_[k]", 5000000 };
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_LOCK_WAIT);
	assert_non_null(strstr(c.detail, "5.0 s blocked in futex_wait_queue_[k] < __lll_lock_wait"));
	ev.offcpu[0].stack = (char *)"main;read;vfs_read_[k];nfs_file_read_[k];folio_wait_bit_[k];io_schedule_[k]";
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_KERNEL_WAIT);
	assert_non_null(strstr(c.detail, "io_schedule_[k] < folio_wait_bit_[k] < nfs_file_read_[k]"));
	ev.offcpu[0].stack = (char *)"main;loader;nanosleep;do_nanosleep_[k];schedule_[k];__schedule_[k]";
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_SLEEPING);
	/* The scheduler's own frames say nothing: skipped. */
	assert_non_null(strstr(c.detail, "blocked in do_nanosleep_[k] < nanosleep < loader < main"));
	assert_string_equal(hang_cause_name(c.cls), "sleeping");
	/* Frozen: the off-CPU stack of its block in progress says where. */
	ev.main_active = 0;
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_FROZEN);
	assert_non_null(strstr(c.detail, "blocked in a call that never returns: 5.0 s in do_nanosleep_[k]"));
	ev.offcpu[0].stack = (char *)"main;raise;get_signal_[k];do_signal_stop_[k];schedule_[k]";
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_STOPPED);
	assert_string_equal(hang_cause_name(c.cls), "stopped");
	assert_non_null(strstr(c.detail, "SIGSTOP"));
	ev.offcpu[0].stack = (char *)"main;gdb_attached;ptrace_stop_[k]";
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_STOPPED);
	assert_non_null(strstr(c.detail, "ptrace"));
	ev.offcpu[0].stack = (char *)"main;pthread_mutex_lock;futex_wait_[k]";
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_LOCK_WAIT);
	assert_non_null(strstr(c.detail, "never woke from a lock wait"));
	ev.offcpu[0].stack = (char *)"main;read;vfs_read_[k];folio_wait_bit_[k];io_schedule_[k]";
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_KERNEL_WAIT);
	ev.offcpu[0].stack = (char *)"main;read;pipe_read_[k]";
	hang_classify(&ev, &c);
	assert_int_equal(c.cls, HANG_CAUSE_FROZEN);
	assert_non_null(strstr(c.detail, "in pipe_read_[k] < read < main"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_threshold_and_naming, setup, teardown),
		cmocka_unit_test_setup_teardown(test_factor_over_floor, setup, teardown),
		cmocka_unit_test_setup_teardown(test_resume, setup, teardown),
		cmocka_unit_test_setup_teardown(test_all_entered_none_finished, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exited, setup, teardown),
		cmocka_unit_test_setup_teardown(test_agent_lost_not_hang, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unseen_is_not_judged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_job_ended, setup, teardown),
		cmocka_unit_test_setup_teardown(test_healthy_in_progress, setup, teardown),
		cmocka_unit_test_setup_teardown(test_never_seen_rank, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bounded_nodes, setup, teardown),
		cmocka_unit_test(test_render),
		cmocka_unit_test(test_render_identity),
		cmocka_unit_test_setup_teardown(test_stall, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stall_waits_for_reports, setup, teardown),
		cmocka_unit_test(test_classify),
		cmocka_unit_test_setup_teardown(test_pipeline_link_hang, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pipeline_stall, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
