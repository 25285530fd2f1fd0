/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Replicas (server/cluster/cluster.c): rendezvous ownership is the same on every replica and
 * moves only a dead replica's jobs; membership follows heartbeats (a replica that departs or
 * falls silent drops out, and the hook says so); a stored batch goes to the owners of its jobs
 * and of its node's recent jobs, and to this replica's analysis only when it owns one.
 * Membership lives in a store: here a store of heartbeats in memory with a clock of its own
 * (the store's clock stamps heartbeats, as ClickHouse's now() does).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "server/cluster/cluster.h"
#include "server/store/store_impl.h"
#include "tests/unit/server/job_fixture.h"

/* ---- a store of heartbeats ------------------------------------------------------------------ */

struct beat_row {
	char id[2 * CLUSTER_ID_MAX], url[CLUSTER_URL_MAX + 1];
	int64_t started_ms;
	uint64_t beat;
	bool departed;
	int64_t seen_s;
};

struct beat_store {
	struct store base;
	struct beat_row rows[16];
	size_t n;
	int64_t now_s;   /* the store's clock */
	int fail;        /* answer this error instead (0: none) */
};

static struct beat_store *beat_store(struct store *s)
{
	return (struct beat_store *)s;
}

static int fake_beat(struct store *s, const char *id, const char *url, int64_t started_ms,
		     uint64_t beat, bool departed)
{
	struct beat_store *bs = beat_store(s);
	struct beat_row *r = NULL;

	if (bs->fail)
		return bs->fail;
	for (size_t i = 0; i < bs->n && !r; i++)
		if (strcmp(bs->rows[i].id, id) == 0)
			r = &bs->rows[i];
	if (!r) {
		assert_true(bs->n < 16);
		r = &bs->rows[bs->n++];
		snprintf(r->id, sizeof(r->id), "%s", id);
	}
	assert_true(beat > r->beat); /* each replica's beats grow */
	snprintf(r->url, sizeof(r->url), "%s", url);
	r->started_ms = started_ms;
	r->beat = beat;
	r->departed = departed;
	r->seen_s = bs->now_s;
	return 0;
}

static int fake_list(struct store *s, uint32_t max_age_s, uint32_t limit, store_replica_fn fn,
		     void *arg)
{
	struct beat_store *bs = beat_store(s);
	int rc;

	if (bs->fail)
		return bs->fail;
	for (size_t i = 0; i < bs->n && limit; i++) {
		const struct beat_row *r = &bs->rows[i];
		if (r->departed || bs->now_s - r->seen_s > (int64_t)max_age_s)
			continue;
		struct store_replica sr = { .id = r->id, .url = r->url, .started_ms = r->started_ms,
					    .age_s = (uint32_t)(bs->now_s - r->seen_s) };
		if ((rc = fn(arg, &sr)))
			return rc;
		limit--;
	}
	return 0;
}

static const struct store_ops beat_ops = { .replica_beat = fake_beat, .replicas_list = fake_list };

/* ---- helpers ---------------------------------------------------------------------------------- */

static int changes;

static void on_change(void *arg)
{
	(void)arg;
	changes++;
}

static struct cluster *join(struct beat_store *bs, const char *url)
{
	struct cluster_options o = { .store = &bs->base, .self_url = url, .expiry_s = 20,
				     .heartbeat_ms = 3600 * 1000, .on_change = on_change };
	struct cluster *c = NULL;

	assert_int_equal(cluster_new(&o, &c), 0);
	assert_int_equal(cluster_refresh(c), 0);
	return c;
}

static size_t replicas_of(struct cluster *c)
{
	json_t *o = cluster_json(c, NULL);
	size_t n;

	assert_non_null(o);
	n = json_array_size(json_object_get(o, "replicas"));
	json_decref(o);
	return n;
}

static json_int_t forward_stat(struct cluster *c, const char *name)
{
	json_t *o = cluster_json(c, NULL);
	json_int_t v;

	assert_non_null(o);
	v = json_integer_value(json_object_get(json_object_get(o, "forward"), name));
	json_decref(o);
	return v;
}

static void job_name(char *out, size_t len, int i)
{
	snprintf(out, len, "job-%d", i);
}

/* ---- tests ------------------------------------------------------------------------------------ */

/* Every replica computes the same owner whatever the order of the list; the jobs spread over
 * the replicas; removing one moves its jobs only. */
static void test_owner_index(void **state)
{
	const char *ids[] = { "a1b2c3d4e5f60708", "0011223344556677", "ffeeddccbbaa9988" };
	const char *rev[] = { ids[2], ids[1], ids[0] };
	const char *two[] = { ids[0], ids[2] };
	size_t per[3] = { 0 }, moved = 0;
	char job[32];

	(void)state;
	assert_int_equal(cluster_owner_index("x", ids, 0), -1);
	for (int i = 0; i < 3000; i++) {
		job_name(job, sizeof(job), i);
		int o = cluster_owner_index(job, ids, 3);
		assert_true(o >= 0 && o < 3);
		per[o]++;
		assert_string_equal(rev[cluster_owner_index(job, rev, 3)], ids[o]);
		const char *now = two[cluster_owner_index(job, two, 2)];
		if (o != 1)
			assert_string_equal(now, ids[o]); /* a survivor's job stays where it was */
		else
			moved++;
	}
	for (int i = 0; i < 3; i++)
		assert_true(per[i] > 800 && per[i] < 1200); /* 1000 each, give or take */
	assert_int_equal(moved, per[1]);
}

/* Two replicas see each other, agree on every owner, and the survivor takes everything when
 * the other departs or falls silent past the expiry. */
static void test_membership(void **state)
{
	struct beat_store bs = { .base.ops = &beat_ops, .now_s = 1000 };
	struct cluster *a, *b;
	char job[32];
	int owned_a = 0;

	(void)state;
	changes = 0;
	a = join(&bs, "http://127.0.0.1:18001");
	assert_int_equal(replicas_of(a), 1);
	b = join(&bs, "http://127.0.0.1:18002");
	assert_int_equal(replicas_of(b), 2);
	assert_int_equal(cluster_refresh(a), 0);
	assert_int_equal(replicas_of(a), 2);
	assert_true(changes >= 2); /* b joining a list of one; a learning of b */
	for (int i = 0; i < 200; i++) {
		job_name(job, sizeof(job), i);
		bool oa = cluster_owns(a, job), ob = cluster_owns(b, job);
		assert_true(oa != ob); /* exactly one owner */
		owned_a += oa;
	}
	assert_true(owned_a > 50 && owned_a < 150);

	/* A store that does not answer: the last list stands (nobody takes everything). */
	bs.fail = -EBUSY;
	assert_int_equal(cluster_refresh(a), -EBUSY);
	assert_int_equal(replicas_of(a), 2);
	bs.fail = 0;

	/* b silent past the expiry (20 s by the store's clock): a owns everything. */
	bs.now_s += 21;
	int before = changes;
	assert_int_equal(cluster_refresh(a), 0);
	assert_int_equal(replicas_of(a), 1);
	assert_int_equal(changes, before + 1);
	for (int i = 0; i < 200; i++) {
		job_name(job, sizeof(job), i);
		assert_true(cluster_owns(a, job));
	}
	/* b beats again: back to two; then it departs (a clean stop) and drops out at once. */
	assert_int_equal(cluster_refresh(b), 0);
	assert_int_equal(cluster_refresh(a), 0);
	assert_int_equal(replicas_of(a), 2);
	cluster_free(b);
	assert_int_equal(cluster_refresh(a), 0);
	assert_int_equal(replicas_of(a), 1);
	cluster_free(a);

	/* Peer rows are checked: an id too long or a URL that is not http(s) is not a member. */
	struct beat_store odd = { .base.ops = &beat_ops, .now_s = 5 };
	char longid[CLUSTER_ID_MAX + 8];
	memset(longid, 'x', sizeof(longid) - 1);
	longid[sizeof(longid) - 1] = '\0';
	assert_int_equal(fake_beat(&odd.base, longid, "http://x:1", 0, 1, false), 0);
	assert_int_equal(fake_beat(&odd.base, "evil", "file:///etc/passwd", 0, 1, false), 0);
	a = join(&odd, "http://127.0.0.1:18003");
	assert_int_equal(replicas_of(a), 1);
	cluster_free(a);

	/* Without a URL or a store with heartbeats (SQLite): no cluster to join. */
	struct cluster *none = NULL;
	struct store plain = { .ops = &(const struct store_ops){ 0 } };
	assert_int_equal(cluster_new(&(struct cluster_options){ .store = &bs.base, .self_url = "" },
				     &none),
			 -EINVAL);
	assert_int_equal(cluster_new(&(struct cluster_options){ .store = &bs.base }, &none), 0);
	assert_int_equal(cluster_start(none, NULL), -EINVAL); /* the URL never came */
	cluster_free(none);
	assert_int_equal(cluster_new(&(struct cluster_options){ .store = &plain }, &none), 0);
	assert_int_equal(cluster_start(none, "http://h:1"), -ENOTSUP);
	cluster_free(none);
	assert_true(cluster_owns(NULL, "any"));
}

/* A one-node batch of `job` (ranks 0-3), or of no job at all. */
static void build(struct sysom_batch *b, uint8_t node, const char *job)
{
	struct job_spec js = { .base = { .node = node, .epoch = 1, .sequence = 2,
					 .window_start_ns = 1700000000000000000ULL },
			       .job = job, .first_rank = 0, .local_ranks = 4, .instances = 2,
			       .skip_rank = -1 };

	if (job)
		assert_int_equal(job_batch_build(b, &js), 0);
	else
		assert_int_equal(fixture_batch_build(b, &js.base), 0);
}

static bool forwarded_by(struct cluster *c, json_int_t errors)
{
	for (int i = 0; i < 500 && forward_stat(c, "errors") < errors; i++)
		nanosleep(&(struct timespec){ 0, 10 * 1000000 }, NULL);
	return forward_stat(c, "errors") == errors;
}

/* Routing: a batch of a job this replica owns stays here; one of the peer's job goes to the
 * peer (here unreachable: counted as a forward error, never lost from the store); a later
 * batch of the same node without the job follows it; a node with no job stays here. */
static void test_route(void **state)
{
	struct beat_store bs = { .base.ops = &beat_ops, .now_s = 1000 };
	struct cluster *a, *b;
	const uint8_t body[] = "batch bytes";
	const struct cluster_body cb = { .data = body, .len = sizeof(body), .zstd = false,
					 .idempotency_key = "k" };
	char mine[32] = "", theirs[32] = "";
	struct sysom_batch batch;

	(void)state;
	a = join(&bs, "http://127.0.0.1:18004");
	b = join(&bs, "http://127.0.0.1:1"); /* nothing listens there */
	assert_int_equal(cluster_refresh(a), 0);
	for (int i = 0; i < 100 && (!mine[0] || !theirs[0]); i++) {
		char job[32];
		job_name(job, sizeof(job), i);
		if (cluster_owns(a, job))
			snprintf(mine, sizeof(mine), "%s", job);
		else
			snprintf(theirs, sizeof(theirs), "%s", job);
	}
	assert_true(mine[0] && theirs[0]);
	assert_int_equal(cluster_start(a, NULL), 0);

	build(&batch, 1, mine);
	assert_true(cluster_batch_route(a, &batch, &cb));
	sysom_batch_free(&batch);
	assert_true(forwarded_by(a, 0));

	build(&batch, 2, theirs);
	assert_false(cluster_batch_route(a, &batch, &cb));
	sysom_batch_free(&batch);
	assert_true(forwarded_by(a, 1));

	build(&batch, 2, NULL); /* node 2 again, its ranks gone: still the peer's to see */
	assert_false(cluster_batch_route(a, &batch, &cb));
	sysom_batch_free(&batch);
	assert_true(forwarded_by(a, 2));

	build(&batch, 3, NULL); /* a node that never carried a job */
	assert_true(cluster_batch_route(a, &batch, &cb));
	sysom_batch_free(&batch);
	assert_int_equal(forward_stat(a, "forwarded"), 0);
	assert_int_equal(forward_stat(a, "queued_bytes"), 0);

	/* The job's owner as the API shows it. */
	json_t *o = cluster_json(a, theirs);
	assert_non_null(o);
	assert_string_equal(json_string_value(json_object_get(json_object_get(o, "job"), "owner_url")),
			    "http://127.0.0.1:1");
	assert_false(json_is_true(json_object_get(json_object_get(o, "job"), "self")));
	json_decref(o);
	assert_true(cluster_batch_route(NULL, &batch, &cb));
	cluster_free(a);
	cluster_free(b);
}

/* A bounded queue: bodies beyond forward_max_bytes are dropped and counted. */
static void test_forward_bound(void **state)
{
	struct beat_store bs = { .base.ops = &beat_ops, .now_s = 1000 };
	struct cluster_options o = { .store = &bs.base, .self_url = "http://127.0.0.1:18005",
				     .heartbeat_ms = 3600 * 1000, .forward_max_bytes = 100 };
	static uint8_t big[101];
	const struct cluster_body cb = { .data = big, .len = sizeof(big), .idempotency_key = "k" };
	struct cluster *a = NULL, *b;
	char theirs[32] = "";
	struct sysom_batch batch;

	(void)state;
	assert_int_equal(cluster_new(&o, &a), 0);
	assert_int_equal(cluster_refresh(a), 0);
	b = join(&bs, "http://127.0.0.1:1");
	assert_int_equal(cluster_refresh(a), 0);
	for (int i = 0; i < 100 && !theirs[0]; i++) {
		char job[32];
		job_name(job, sizeof(job), i);
		if (!cluster_owns(a, job))
			snprintf(theirs, sizeof(theirs), "%s", job);
	}
	build(&batch, 4, theirs);
	assert_false(cluster_batch_route(a, &batch, &cb));
	sysom_batch_free(&batch);
	assert_int_equal(forward_stat(a, "dropped"), 1);
	assert_int_equal(forward_stat(a, "queued_bytes"), 0);
	cluster_free(a);
	cluster_free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_owner_index),
		cmocka_unit_test(test_membership),
		cmocka_unit_test(test_route),
		cmocka_unit_test(test_forward_bound),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
