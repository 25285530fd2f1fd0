/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL instances kept past the raw calls (server/store/store_nccl_rollup.c on SQLite): the
 * collectives answers and the straggler report over a range older than the raw cutoff are
 * those the raw calls gave (tid aside), also across the cutoff and with passes cut short;
 * retention run again, or again after a restart that lost the watermark, changes nothing;
 * the processes kept instances name outlive process collection until the instances go.
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
#include <jansson.h>
#include <sqlite3.h>

#include "server/analysis/diagnosis.h"
#include "server/store/store.h"
#include "server/store/store_impl.h"
#include "tests/support/batch_fixture.h"
#include "tests/unit/server/job_fixture.h"

#define T0 1700000000000000000ULL /* window start of the first batches, ns */
#define T0_MS ((int64_t)(T0 / 1000000))
#define HASH 0x5eed5eed5eed5eedULL
#define JOB "job-42"
#define INSTANCES 20 /* per batch */
/* Past every call (T0 + 300 s, not a minute start) */
#define CUT_ALL (T0_MS + 300000)
#define INSTANCES_KEPT "SELECT coalesce(sum(instances), 0) FROM nccl_instances"

struct ctx {
	char dir[128];
	struct store *store;
};

static int setup(void **state)
{
	struct ctx *c = calloc(1, sizeof(*c));
	char err[256];

	assert_non_null(c);
	assert_int_equal(fixture_tmpdir_make(c->dir, sizeof(c->dir)), 0);
	assert_int_equal(store_sqlite_open(c->dir, NULL, &c->store, err, sizeof(err)), 0);
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct ctx *c = *state;

	store__nccl_rollup_pass_set(0);
	store_close(c->store);
	fixture_tmpdir_remove(c->dir);
	free(c);
	return 0;
}

static long long sql_int(const char *dir, const char *sql)
{
	char path[256];
	sqlite3 *db = NULL;
	sqlite3_stmt *st;
	long long v;

	snprintf(path, sizeof(path), "%s/sysom.db", dir);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	int rc = sqlite3_step(st);
	assert_true(rc == SQLITE_ROW || rc == SQLITE_DONE);
	v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

/*
 * Two nodes of 4 ranks of JOB; rank 5 enters every AllReduce 40 ms late. Per node two
 * batches: seq 0..19 entered at T0 + 1..20 s, seq 20..39 at T0 + 91..110 s (each batch's
 * AllReduce calls one chunk per rank, so a cutoff at T0 + 40 s, a minute start, drops the
 * first batches' calls whole).
 * A second job on node 3 (other processes) with seq 0..19.
 */
static void put_batches(struct store *s)
{
	for (int node = 1; node <= 3; node++)
		for (int half = 0; half < (node == 3 ? 1 : 2); half++) {
			struct job_spec js = {
				.base = { .node = (uint8_t)node, .epoch = 1, .sequence = 1 + (uint64_t)half,
					  .window_start_ns = T0 + (uint64_t)half * 90000000000ULL },
				.job = node == 3 ? "job-7" : JOB, .first_rank = 4 * ((node - 1) % 2),
				.local_ranks = 4, .instances = INSTANCES, .skip_rank = node == 2 ? 6 : -1,
				.late_rank = 5, .late_ms = node == 3 ? 0 : 40,
			};
			struct sysom_batch b;
			struct store_put_result res;
			assert_int_equal(job_batch_build(&b, &js), 0);
			for (uint32_t i = 0; i < b.nccl_call_count; i++)
				if (b.nccl_calls[i].comm_key)
					b.nccl_calls[i].seq += (uint64_t)half * INSTANCES;
			assert_int_equal(store_batch_put(s, &b, HASH + (uint64_t)(node * 2 + half),
							 (int64_t)T0 + 120000000000LL, &res), 0);
			sysom_batch_free(&b);
		}
}

/* Every field a consumer reads, one line per call; tid apart (the rollup keeps none). */
struct text {
	FILE *out;
	uint32_t nonzero_tids;
};

static int call_line(void *arg, const struct store_collective_call *k)
{
	struct text *t = arg;

	t->nonzero_tids += k->tid != 0;
	fprintf(t->out, "%llx %u %llu first=%lld n=%d r=%d %lld-%lld %llu %llu %d %d %u %s %s %d"
			" p=%lld\n",
		(unsigned long long)k->comm_key, k->op, (unsigned long long)k->seq,
		(long long)k->first_entry_ns, k->nranks, k->rank, (long long)k->entry_ns,
		(long long)k->exit_ns, (unsigned long long)k->count, (unsigned long long)k->bytes,
		k->peer, k->result, k->pid, k->node_id, k->hostname, k->job_rank,
		(long long)k->process);
	return 0;
}

static char *answer(struct store *s, const struct store_collective_filter *f, uint32_t max,
		    uint32_t *nonzero_tids)
{
	char *text = NULL;
	size_t len = 0;
	struct text t = { .out = open_memstream(&text, &len) };

	assert_non_null(t.out);
	assert_int_equal(store_collectives_list(s, f, max, call_line, &t), 0);
	fclose(t.out);
	if (nonzero_tids)
		*nonzero_tids = t.nonzero_tids;
	return text;
}

#define S(x) ((int64_t)(x) * 1000000000LL)

/* The filters compared: whole job, parts (before, across and after the cutoffs used),
 * latest, a communicator, an op, few instances, the other job. */
static const struct store_collective_filter filters[] = {
	{ .job = JOB, .from_ns = 0, .to_ns = INT64_MAX },
	{ .job = JOB, .from_ns = (int64_t)T0 + S(5), .to_ns = (int64_t)T0 + S(15) },
	{ .job = JOB, .from_ns = (int64_t)T0 + S(5), .to_ns = (int64_t)T0 + S(95) },
	{ .job = JOB, .from_ns = (int64_t)T0 + S(12) + 1000000, .to_ns = (int64_t)T0 + S(105) },
	{ .job = JOB, .from_ns = (int64_t)T0 + S(95), .to_ns = INT64_MAX },
	{ .job = JOB, .from_ns = 0, .to_ns = INT64_MAX, .latest = true },
	{ .job = JOB, .from_ns = 0, .to_ns = (int64_t)T0 + S(18), .latest = true },
	{ .job = JOB, .from_ns = 0, .to_ns = INT64_MAX, .has_comm = true, .comm = JOB_COMM },
	{ .job = JOB, .from_ns = 0, .to_ns = INT64_MAX, .has_comm = true, .comm = 0x999 },
	{ .job = JOB, .from_ns = 0, .to_ns = INT64_MAX, .op = SYSOM_NCCL_ALL_REDUCE },
	{ .job = JOB, .from_ns = 0, .to_ns = INT64_MAX, .op = SYSOM_NCCL_BROADCAST },
	{ .job = "job-7", .from_ns = 0, .to_ns = INT64_MAX },
	{ .job = "nobody", .from_ns = 0, .to_ns = INT64_MAX },
};
#define NFILTERS (sizeof(filters) / sizeof(filters[0]))
static const uint32_t maxes[] = { 1000, 3, 1 };
#define NMAXES (sizeof(maxes) / sizeof(maxes[0]))

struct answers {
	char *text[NFILTERS][NMAXES];
};

static void answers_take(struct store *s, struct answers *a)
{
	for (size_t i = 0; i < NFILTERS; i++)
		for (size_t j = 0; j < NMAXES; j++)
			a->text[i][j] = answer(s, &filters[i], maxes[j], NULL);
}

static void answers_check(struct store *s, const struct answers *want)
{
	for (size_t i = 0; i < NFILTERS; i++)
		for (size_t j = 0; j < NMAXES; j++) {
			char *got = answer(s, &filters[i], maxes[j], NULL);
			if (strcmp(got, want->text[i][j]))
				fprintf(stderr, "filter %zu max %u:\n--- raw\n%s--- now\n%s", i,
					maxes[j], want->text[i][j], got);
			assert_string_equal(got, want->text[i][j]);
			free(got);
		}
}

static void answers_free(struct answers *a)
{
	for (size_t i = 0; i < NFILTERS; i++)
		for (size_t j = 0; j < NMAXES; j++)
			free(a->text[i][j]);
}

static int no_profile(void *arg, const struct store_sample_filter *f, uint32_t limit,
		      struct byte_buf *out)
{
	(void)arg;
	(void)f;
	(void)limit;
	(void)out;
	return 0;
}

/* The straggler report's "stragglers" and the communicators' ranks over the whole job. */
static json_t *stragglers(struct store *s)
{
	struct diagnosis_ctx ctx = { .store = s, .folded = no_profile };
	struct diagnosis_scope scope = { .job = JOB, .from_ms = 0, .to_ms = INT64_MAX / 2000000,
					 .skip_pipeline = true };
	struct diagnosis_params p;
	json_t *doc = NULL;

	diagnosis_params_default(&p);
	assert_int_equal(diagnosis_stragglers(&ctx, &scope, &p, &doc), 0);
	json_t *out = json_pack("{s:O, s:O}", "stragglers", json_object_get(doc, "stragglers"),
				"communicators", json_object_get(doc, "communicators"));
	json_decref(doc);
	assert_non_null(out);
	return out;
}

static void retention(struct store *s, int64_t before_ms, int64_t rollup_before_ms,
		      struct store_retention_stats *st)
{
	assert_int_equal(store_sqlite_retention(s, before_ms, rollup_before_ms, st), 0);
	assert_int_equal(st->nccl_lost, 0);
}

/*
 * Every raw call gone (cutoff past the job): every answer, and the straggler report (rank 5,
 * 40 ms late), the same from the rollups; 40 + 20 instances kept, the watermark at the cutoff,
 * the processes kept; tids read back 0.
 */
static void test_rollup_answers_like_raw(void **state)
{
	struct ctx *c = *state;
	struct answers want;
	struct store_retention_stats st;
	uint32_t tids = 0;

	put_batches(c->store);
	answers_take(c->store, &want);
	free(answer(c->store, &filters[0], 1000, &tids));
	assert_true(tids > 0);
	json_t *raw = stragglers(c->store);
	json_t *list = json_object_get(raw, "stragglers");
	assert_int_equal(json_array_size(list), 1);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 0), "rank")), 5);
	long long procs = sql_int(c->dir, "SELECT count(*) FROM job_ranks");

	retention(c->store, CUT_ALL, T0_MS - 1000, &st);
	assert_int_equal(st.nccl_instances, 2 * INSTANCES + INSTANCES);
	assert_int_equal(sql_int(c->dir, "SELECT count(*) FROM nccl_call_chunks"), 0);
	assert_int_equal(sql_int(c->dir, INSTANCES_KEPT), 3 * INSTANCES);
	/* One row per (job, communicator, op, minute of first entries): job-42's AllReduce in 3
	 * minutes (T0 is 20 s into one; T0 + 91..110 s spans two), job-7's in 1. */
	assert_int_equal(sql_int(c->dir, "SELECT count(*) FROM nccl_instances"), 4);
	/* The minute after the cutoff. */
	assert_int_equal(sql_int(c->dir, "SELECT watermark_ns FROM nccl_rollup_state"),
			 (CUT_ALL / 60000 + 1) * 60000 * 1000000);
	assert_int_equal(sql_int(c->dir, "SELECT count(*) FROM job_ranks"), procs);
	assert_int_equal(sql_int(c->dir, "SELECT count(*) FROM nccl_instance_processes"), procs);
	assert_int_equal(sql_int(c->dir, "SELECT count(*) FROM processes WHERE id IN"
					 " (SELECT process FROM job_ranks)"), procs);
	answers_check(c->store, &want);
	free(answer(c->store, &filters[0], 1000, &tids));
	assert_int_equal(tids, 0);
	json_t *old = stragglers(c->store);
	assert_true(json_equal(raw, old));

	/* Again, and again after a restart that lost the watermark: nothing changes. */
	retention(c->store, CUT_ALL, T0_MS - 1000, &st);
	assert_int_equal(st.nccl_instances, 0);
	store_close(c->store);
	assert_int_equal(sql_int(c->dir, "UPDATE nccl_rollup_state SET watermark_ns = 0"), 0);
	char err[256];
	assert_int_equal(store_sqlite_open(c->dir, NULL, &c->store, err, sizeof(err)), 0);
	assert_int_equal(store_schema_version(c->store), 15);
	retention(c->store, CUT_ALL, T0_MS - 1000, &st);
	assert_int_equal(st.nccl_instances, 0);
	assert_int_equal(sql_int(c->dir, INSTANCES_KEPT), 3 * INSTANCES);
	answers_check(c->store, &want);

	/* The rollups' own cutoff: instances go, then the processes they kept. */
	retention(c->store, CUT_ALL + 120000, CUT_ALL + 120000, &st);
	assert_int_equal(sql_int(c->dir, "SELECT count(*) FROM nccl_instances"), 0);
	assert_int_equal(sql_int(c->dir, "SELECT count(*) FROM nccl_instance_processes"), 0);
	assert_int_equal(sql_int(c->dir, "SELECT count(*) FROM processes"), 0);
	char *none = answer(c->store, &filters[0], 1000, NULL);
	assert_string_equal(none, "");
	free(none);
	json_decref(raw);
	json_decref(old);
	answers_free(&want);
}

/*
 * A cutoff between the batches (T0 + 40 s): the first batches' calls go, the second batches'
 * stay; answers over ranges before, across and after it are the raw ones. Then a cutoff
 * inside the second batches (T0 + 100 s: their chunks stay, instances both kept and raw are
 * read once).
 * Passes of 3 instances (cut short and resumed) write the same rows.
 */
static void test_rollup_across_cutoff(void **state)
{
	struct ctx *c = *state;
	struct answers want;
	struct store_retention_stats st;

	put_batches(c->store);
	answers_take(c->store, &want);
	json_t *raw = stragglers(c->store);
	long long kept = sql_int(c->dir, "SELECT count(*) FROM nccl_call_chunks"
					 " WHERE entry_max_ns >= 1700000040000000000");
	assert_true(kept > 0);
	store__nccl_rollup_pass_set(3);
	retention(c->store, T0_MS + 40000, T0_MS - 1000, &st);
	assert_int_equal(st.nccl_instances, 2 * INSTANCES);
	assert_int_equal(sql_int(c->dir, INSTANCES_KEPT), 2 * INSTANCES);
	assert_int_equal(sql_int(c->dir, "SELECT count(*) FROM nccl_call_chunks"), kept);
	answers_check(c->store, &want);
	json_t *now = stragglers(c->store);
	assert_true(json_equal(raw, now));
	json_decref(now);

	kept = sql_int(c->dir, "SELECT count(*) FROM nccl_call_chunks"
			       " WHERE entry_max_ns >= 1700000100000000000");
	char sql[160];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM nccl_call_chunks WHERE op = %d"
				   " AND entry_min_ns < 1700000100000000000", SYSOM_NCCL_ALL_REDUCE);
	assert_int_equal(sql_int(c->dir, sql), 8); /* the AllReduce chunks across the cutoff */
	retention(c->store, T0_MS + 100000, T0_MS - 1000, &st);
	assert_int_equal(st.nccl_instances, 9); /* seq 20..28, entered before T0 + 100 s */
	assert_int_equal(sql_int(c->dir, "SELECT count(*) FROM nccl_call_chunks"), kept);
	answers_check(c->store, &want);
	now = stragglers(c->store);
	assert_true(json_equal(raw, now));
	json_decref(now);
	json_decref(raw);
	answers_free(&want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_rollup_answers_like_raw, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rollup_across_cutoff, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
