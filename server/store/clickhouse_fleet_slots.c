/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fleet slots (ClickHouse schema 14): the whole fleet's CPU and off-CPU flame graph per minute
 * and per hour, without the node dimension, so that a fleet-wide read of a long range groups a
 * few rows per (slot, comm, stacks) instead of every node's sample rows (docs/architecture.md,
 * "Fleet slots").
 *
 * fleet_slot_batches counts the batch rows whose window touches each slot: a materialized view
 *   on `batches`, which is written last, so that every committed batch counts, and so does
 *   every later copy, late or spooled batch of the slot.
 * fleet_slots holds a slot's summaries: per (kind, comm, user stack, kernel stack) the samples
 *   (off-CPU: blocked nanoseconds), the tgid range and the distinct processes (a uniqHLL12
 *   state: exact up to about 60 processes a group, a HyperLogLog estimate past that; exact
 *   states were 25 times the size and 20 times slower to merge, see below).
 * fleet_slot_state commits a summary: its id and the slot's batch count read before it was
 *   built.
 *
 * A summary is current while its slot's batch count still equals the count it was built
 * after: a batch's rows are written before its batch row, so each batch counted then was in
 * it. A later batch (a spooled one, a second copy) makes it stale, and readers read that
 * slot's raw rows until the summariser (store_fleet_slots_run, on one replica) builds it again.
 * Summaries are never updated in place: a rebuilt slot's older rows stay, unread, until
 * retention drops their day with the rollups.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/clock.h"
#include "server/store/clickhouse_internal.h"

#define MINUTE_MS 60000LL
#define HOUR_MS 3600000LL
#define DAY_MS 86400000LL
/* A slot is summarised once it ended this long ago (batches arrive after their window). */
#define SETTLE_MS (2 * MINUTE_MS)
/* A stale slot is built again at most this often (a late node must not rebuild it each pass). */
#define REBUILD_MS (5 * MINUTE_MS)
/* Slots a pass looks at, newest first; the rest wait for the next pass. */
#define PASS_CANDIDATES 4096
/* A pass stops starting builds after this long. */
#define PASS_BUDGET_MS (30 * 1000LL)
/* A read uses at most this many summaries and raw intervals; more: the raw read. */
#define READ_MAX_SLOTS 4096
#define READ_MAX_RAW 16
/* A build may read a whole hour of a large fleet's raw rows: its HTTP timeout, at least. */
#define BUILD_TIMEOUT_MS (15 * 60 * 1000L)

#define SLOT_BATCHES_SELECT                                                                   \
	" SELECT toDate(intDiv(slot.2, 86400000)) AS day, slot.1 AS span_ms, slot.2 AS start_ms," \
	" count() AS batches FROM batches ARRAY JOIN arrayConcat(" CH_WINDOW_SLOTS("60000") ","   \
	" " CH_WINDOW_SLOTS("3600000") ") AS slot GROUP BY day, span_ms, start_ms"

/* Migration 14 (own array, so that renumbering against other migrations is one line). The
 * batch counts are filled from the stored batch rows once (a second run finds the table),
 * before the view; summaries are built by the summariser, not here. */
const char *const ch__migration_fleet_slots[] = {
	"CREATE TABLE IF NOT EXISTS fleet_slots (day Date, span_ms Int64, start_ms Int64,"
	" summary UInt64, kind UInt8, comm String, user_stack Int64, kernel_stack Int64,"
	" lo UInt32, hi UInt32, procs AggregateFunction(uniqHLL12, UInt64), value UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (start_ms, span_ms, summary, kind)",
	"CREATE TABLE IF NOT EXISTS fleet_slot_state (day Date, span_ms Int64, start_ms Int64,"
	" summary UInt64, batches UInt64, at_ns Int64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (start_ms, span_ms)",
	"CREATE TABLE IF NOT EXISTS fleet_slot_batches ENGINE = SummingMergeTree PARTITION BY day"
	" ORDER BY (start_ms, span_ms) AS" SLOT_BATCHES_SELECT,
	"CREATE MATERIALIZED VIEW IF NOT EXISTS fleet_slot_batches_mv TO fleet_slot_batches AS"
	SLOT_BATCHES_SELECT,
	NULL,
};

enum { KIND_CPU = 0, KIND_OFFCPU = 1 };

struct slot {
	int64_t span_ms, start_ms;
	uint64_t batches;  /* batch rows touching it now */
	uint64_t summary;  /* the newest summary (0: none) */
	uint64_t built_at; /* its count when built */
	int64_t at_ns;     /* when it was built */
};

struct slots {
	struct slot *v;
	size_t n, cap, max;
};

static int slot_row(void *ctx, char **f)
{
	struct slots *s = ctx;
	struct slot x;

	if (ch_tsv_i64(f[0], &x.span_ms) || ch_tsv_i64(f[1], &x.start_ms) ||
	    ch_tsv_u64(f[2], &x.batches) || ch_tsv_u64(f[3], &x.summary) ||
	    ch_tsv_u64(f[4], &x.built_at) || ch_tsv_i64(f[5], &x.at_ns))
		return -EPROTO;
	if (x.span_ms != MINUTE_MS && x.span_ms != HOUR_MS)
		return 0;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		struct slot *v;

		if (cap > s->max)
			return -E2BIG;
		if (!(v = realloc(s->v, cap * sizeof(*v))))
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = x;
	return 0;
}

/*
 * Appends the query of the slots (span, start, batch count now, newest summary, its count,
 * when built) whose start is in [from_ms, to_ms] and that a batch row touches; with `stale`,
 * only those without a current summary, newest first.
 */
static void slots_sql(struct byte_buf *q, int64_t from_ms, int64_t to_ms, bool stale)
{
	byte_buf_printf(q,
		"SELECT span_ms, start_ms, n, cur, sb, at FROM"
		" (SELECT span_ms, start_ms, sum(batches) AS n FROM fleet_slot_batches"
		"  WHERE start_ms BETWEEN %" PRId64 " AND %" PRId64 " GROUP BY span_ms, start_ms)"
		" ANY LEFT JOIN"
		" (SELECT span_ms, start_ms, argMax(summary, (at_ns, summary)) AS cur,"
		"  argMax(batches, (at_ns, summary)) AS sb, max(at_ns) AS at FROM fleet_slot_state"
		"  WHERE start_ms BETWEEN %" PRId64 " AND %" PRId64 " GROUP BY span_ms, start_ms)"
		" USING span_ms, start_ms",
		from_ms, to_ms, from_ms, to_ms);
	if (stale)
		byte_buf_printf(q, " WHERE n != sb ORDER BY start_ms DESC, span_ms LIMIT %d",
				PASS_CANDIDATES);
	else
		byte_buf_printf(q, " ORDER BY start_ms, span_ms");
}

/* A new summary id (0 reads as "no summary"). */
static int summary_id(uint64_t *id)
{
	*id = 0;
	while (!*id)
		if (getrandom(id, sizeof(*id), 0) != sizeof(*id))
			return -EIO;
	return 0;
}

/* Commits summary `id` of slots xs[0..n-1]: a fleet_slot_state row each, with the batch count
 * read before it was built and the caller's clock. */
static int slots_commit(struct ch_store *s, const struct slot *const *xs, size_t n, uint64_t id,
			int64_t at_ns)
{
	struct byte_buf q = { 0 };
	int rc;

	byte_buf_printf(&q, "INSERT INTO fleet_slot_state (day, span_ms, start_ms, summary,"
			    " batches, at_ns) VALUES");
	for (size_t i = 0; i < n; i++)
		byte_buf_printf(&q, "%s (toDate(intDiv(%" PRId64 ", 86400000)), %" PRId64
				", %" PRId64 ", %" PRIu64 ", %" PRIu64 ", %" PRId64 ")",
				i ? "," : "", xs[i]->start_ms, xs[i]->span_ms, xs[i]->start_ms, id,
				xs[i]->batches, at_ns);
	byte_buf_append(&q, "", 1);
	if (!(rc = byte_buf_error(&q)))
		rc = ch__exec(s, (const char *)q.data, NULL, 0, NULL);
	byte_buf_free(&q);
	return rc;
}

/* A summary answers for its slot while the slot's batch count is the one it was built after. */
static bool current(const struct slot *x)
{
	return x && x->summary && x->built_at == x->batches;
}

/* Slots built with one statement per kind: the settled minutes of one hour (a catch-up after
 * an upgrade or an outage builds an hour's minutes at once, not in 60 statements). */
#define BUILD_GROUP_MAX 60

/*
 * Builds one summary of the slots xs[0..n-1] (one span, both kinds): each kind's rows of the
 * range they cover grouped by slot, then one fleet_slot_state row per slot with the count read
 * before and the caller's clock. The slots share a summary id (readers match span, start and
 * id).
 */
static int slots_build(struct store *base, const struct slot *const *xs, size_t n,
		       int64_t at_ns)
{
	struct ch_store *s = ch__store(base);
	int64_t span = xs[0]->span_ms, lo = xs[0]->start_ms, hi = xs[0]->start_ms;
	struct byte_buf q = { 0 };
	uint64_t id;
	int rc = 0;

	for (size_t i = 1; i < n; i++) {
		lo = xs[i]->start_ms < lo ? xs[i]->start_ms : lo;
		hi = xs[i]->start_ms > hi ? xs[i]->start_ms : hi;
	}
	struct store_sample_filter f = { .from_ms = lo, .to_ms = hi + span - 1 };

	if ((rc = summary_id(&id)))
		return rc;
	for (int kind = KIND_CPU; kind <= KIND_OFFCPU && !rc; kind++) {
		const char *value = kind == KIND_CPU ? "count" : "blocked_ns";

		q.len = 0;
		byte_buf_printf(&q,
			"INSERT INTO fleet_slots (day, span_ms, start_ms, summary, kind, comm,"
			" user_stack, kernel_stack, lo, hi, procs, value)"
			" SELECT toDate(intDiv(fs_start, 86400000)), %" PRId64 ", fs_start,"
			" %" PRIu64 ", %d, comm, user_stack, kernel_stack, min(tgid), max(tgid),"
			" uniqHLL12State(process), sum(%s) FROM (SELECT intDiv(time_ms, %" PRId64
			") * %" PRId64 " AS fs_start, comm, user_stack, kernel_stack, tgid, process,"
			" %s",
			span, id, kind, value, span, span, value);
		ch__range_rows_from(&q, base, &f, kind == KIND_OFFCPU);
		byte_buf_printf(&q, ") WHERE fs_start IN (");
		for (size_t i = 0; i < n; i++)
			byte_buf_printf(&q, "%s%" PRId64, i ? ", " : "", xs[i]->start_ms);
		byte_buf_printf(&q, ") GROUP BY fs_start, comm, user_stack, kernel_stack");
		byte_buf_append(&q, "", 1);
		if (!(rc = byte_buf_error(&q)))
			rc = ch__exec_timeout(s, (const char *)q.data, NULL, 0, NULL,
					      s->timeout_ms > BUILD_TIMEOUT_MS ? s->timeout_ms
									: BUILD_TIMEOUT_MS);
	}
	if (!rc)
		rc = slots_commit(s, xs, n, id, at_ns);
	byte_buf_free(&q);
	return rc;
}

/*
 * Builds hour slot `x` from its minutes' summaries: when every minute of the hour that a batch
 * touches has a current summary, their rows merged (sums, tgid bounds, the union of the
 * HyperLogLog states: what the hour's rows give, since the minutes partition the hour and a
 * current summary holds every counted batch's rows) instead of reading the hour's rows again.
 * The minutes and the hour's batch count are read together: a batch stored after that read
 * makes the hour stale, as a batch stored during a build from rows does. 1: built; 0: a minute
 * has no current summary (the caller reads rows); or an error.
 */
static int hour_from_minutes(struct store *base, const struct slot *x, int64_t at_ns)
{
	struct ch_store *s = ch__store(base);
	struct slots c = { .max = 128 }; /* its 60 minutes and itself */
	struct slot hour = { .span_ms = 0 };
	struct byte_buf q = { 0 };
	size_t minutes = 0;
	uint64_t id;
	int rc;

	slots_sql(&q, x->start_ms, x->start_ms + HOUR_MS - 1, false);
	if ((rc = ch__select_run(s, &q, 6, slot_row, &c, NULL)))
		goto cleanup;
	for (size_t i = 0; i < c.n; i++) {
		if (c.v[i].span_ms == HOUR_MS && c.v[i].start_ms == x->start_ms)
			hour = c.v[i];
		else if (c.v[i].span_ms == MINUTE_MS && !current(&c.v[i]))
			goto cleanup; /* rc 0: from rows */
		else if (c.v[i].span_ms == MINUTE_MS)
			minutes++;
	}
	if (!hour.span_ms || !minutes || (rc = summary_id(&id)))
		goto cleanup;
	q.len = 0;
	byte_buf_printf(&q, "INSERT INTO fleet_slots (day, span_ms, start_ms, summary, kind, comm,"
			    " user_stack, kernel_stack, lo, hi, procs, value)"
			    " SELECT toDate(intDiv(%" PRId64 ", 86400000)), %" PRId64 ", %" PRId64
			    ", %" PRIu64 ", kind, comm, user_stack, kernel_stack, min(lo), max(hi),"
			    " uniqHLL12MergeState(procs), sum(value) FROM fleet_slots"
			    " WHERE start_ms BETWEEN %" PRId64 " AND %" PRId64
			    " AND (span_ms, start_ms, summary) IN (",
			x->start_ms, (int64_t)HOUR_MS, x->start_ms, id, x->start_ms,
			(int64_t)(x->start_ms + HOUR_MS - 1));
	for (size_t i = 0, k = 0; i < c.n; i++)
		if (c.v[i].span_ms == MINUTE_MS)
			byte_buf_printf(&q, "%s(%" PRId64 ", %" PRId64 ", %" PRIu64 ")",
					k++ ? ", " : "", (int64_t)MINUTE_MS, c.v[i].start_ms,
					c.v[i].summary);
	byte_buf_printf(&q, ") GROUP BY kind, comm, user_stack, kernel_stack");
	byte_buf_append(&q, "", 1);
	if ((rc = byte_buf_error(&q)) || (rc = ch__exec(s, (const char *)q.data, NULL, 0, NULL)))
		goto cleanup;
	const struct slot *one = &hour;

	if (!(rc = slots_commit(s, &one, 1, id, at_ns)))
		rc = 1;
cleanup:
	free(c.v);
	byte_buf_free(&q);
	return rc;
}

/* Builds the group (if any; an hour from its minutes when it can) and counts it in *out;
 * empties it. */
static int group_build(struct store *base, const struct slot **group, size_t *n, int64_t at_ns,
		       struct store_fleet_slots_pass *out)
{
	int rc = 0;

	if (*n == 1 && group[0]->span_ms == HOUR_MS &&
	    (rc = hour_from_minutes(base, group[0], at_ns)) > 0) {
		out->merged++;
		rc = 0;
	} else if (!*n || rc || (rc = slots_build(base, group, *n, at_ns))) {
		*n = 0;
		return rc;
	}
	for (size_t i = 0; i < *n; i++) {
		out->built++;
		if (group[i]->summary)
			out->rebuilt++;
	}
	*n = 0;
	return rc;
}

int ch__fleet_slots_run(struct store *base, int64_t now_ms, struct store_fleet_slots_pass *out)
{
	struct slots c = { .max = PASS_CANDIDATES };
	const struct slot *group[BUILD_GROUP_MAX];
	struct byte_buf q = { 0 };
	int64_t started = sysom_monotonic_ms(), built_ns = now_ms > INT64_MAX / 1000000
		? INT64_MAX : now_ms * 1000000;
	size_t ngroup = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	/* Slots that ended SETTLE_MS ago (a minute's start at most now - settle - 1 min). */
	slots_sql(&q, 0, now_ms - SETTLE_MS - MINUTE_MS, true);
	if ((rc = ch__select_run(ch__store(base), &q, 6, slot_row, &c, NULL)))
		goto cleanup;
	/* Newest first: an hour's minutes come one after another (each before its hour). */
	for (size_t i = 0; i < c.n; i++) {
		const struct slot *x = &c.v[i];

		if (x->start_ms > now_ms - SETTLE_MS - x->span_ms)
			continue; /* an hour not over yet */
		if (x->summary && x->at_ns > built_ns - REBUILD_MS * 1000000) {
			out->pending++; /* rebuilt lately: again in a later pass */
			continue;
		}
		if (ngroup && (x->span_ms != MINUTE_MS || ngroup == BUILD_GROUP_MAX ||
			       x->start_ms / HOUR_MS != group[0]->start_ms / HOUR_MS) &&
		    (rc = group_build(base, group, &ngroup, built_ns, out)))
			goto cleanup;
		if (sysom_monotonic_ms() - started > PASS_BUDGET_MS) {
			out->pending++;
			continue;
		}
		group[ngroup++] = x;
		if (x->span_ms != MINUTE_MS &&
		    (rc = group_build(base, group, &ngroup, built_ns, out)))
			goto cleanup;
	}
	rc = group_build(base, group, &ngroup, built_ns, out);
cleanup:
	free(c.v);
	byte_buf_free(&q);
	return rc;
}

/* ---- reading -------------------------------------------------------------------------------- */

static bool fleet_wide(const struct store_sample_filter *f)
{
	return !f->node && !f->has_pid && !f->comm && !f->job && !store_filter_has_identity(f);
}

/* Orders slots as the plan query does: by start, then span. */
static int slot_cmp(const void *a, const void *b)
{
	const struct slot *x = a, *y = b;

	if (x->start_ms != y->start_ms)
		return x->start_ms < y->start_ms ? -1 : 1;
	return (x->span_ms > y->span_ms) - (x->span_ms < y->span_ms);
}

static const struct slot *slot_find(const struct slots *s, int64_t span_ms, int64_t start_ms)
{
	const struct slot key = { .span_ms = span_ms, .start_ms = start_ms };

	return s->n ? bsearch(&key, s->v, s->n, sizeof(*s->v), slot_cmp) : NULL;
}

/* How a range is read: summaries of whole slots, raw rows for the rest. */
struct plan {
	const struct slot *used[READ_MAX_SLOTS];
	size_t nused;
	int64_t raw[READ_MAX_RAW][2];
	size_t nraw;
	bool too_many;
};

static void plan_raw(struct plan *p, int64_t from_ms, int64_t to_ms)
{
	if (p->nraw && p->raw[p->nraw - 1][1] == from_ms - 1) {
		p->raw[p->nraw - 1][1] = to_ms;
		return;
	}
	if (p->nraw == READ_MAX_RAW) {
		p->too_many = true;
		return;
	}
	p->raw[p->nraw][0] = from_ms;
	p->raw[p->nraw++][1] = to_ms;
}

static void plan_use(struct plan *p, const struct slot *x)
{
	if (p->nused == READ_MAX_SLOTS)
		p->too_many = true;
	else
		p->used[p->nused++] = x;
}

/* Walks [from, to]: current hours, else current minutes, else raw rows; slots no batch
 * touches hold no rows and are skipped. */
static void plan_make(struct plan *p, const struct slots *s, int64_t from_ms, int64_t to_ms)
{
	int64_t t = from_ms;

	while (t <= to_ms && !p->too_many) {
		int64_t minute = t - ((t % MINUTE_MS) + MINUTE_MS) % MINUTE_MS;
		const struct slot *x;

		if (t % HOUR_MS == 0 && t <= to_ms - (HOUR_MS - 1)) {
			x = slot_find(s, HOUR_MS, t);
			if (!x || current(x)) {
				if (x)
					plan_use(p, x);
				t += HOUR_MS;
				continue;
			}
		}
		x = slot_find(s, MINUTE_MS, minute);
		if (t == minute && t <= to_ms - (MINUTE_MS - 1) && current(x)) {
			plan_use(p, x);
		} else if (x) {
			int64_t end = minute + MINUTE_MS - 1;

			plan_raw(p, t, end < to_ms ? end : to_ms);
		}
		if (minute > INT64_MAX - MINUTE_MS)
			break;
		t = minute + MINUTE_MS;
	}
}

int ch__fleet_slots_from(struct byte_buf *q, struct store *base,
			 const struct store_sample_filter *f, bool offcpu)
{
	struct slots s = { .max = 1u << 20 };
	struct byte_buf sq = { 0 };
	struct plan *p = NULL;
	int rc;

	/* Below a minute's length no slot fits; past 2^53 ms the walk's steps are meaningless. */
	if (!fleet_wide(f) || f->from_ms > f->to_ms || f->to_ms - f->from_ms < MINUTE_MS - 1 ||
	    f->from_ms < -(1LL << 53) || f->to_ms > (1LL << 53))
		return 0;
	slots_sql(&sq, f->from_ms - MINUTE_MS, f->to_ms, false);
	if ((rc = ch__select_run(ch__store(base), &sq, 6, slot_row, &s, NULL)))
		goto cleanup;
	if (!(p = calloc(1, sizeof(*p)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	plan_make(p, &s, f->from_ms, f->to_ms);
	if (p->too_many || !p->nused)
		goto cleanup; /* rc 0: the plain read */
	byte_buf_printf(q, " FROM (");
	for (size_t i = 0; i < p->nraw; i++) {
		struct store_sample_filter r = { .from_ms = p->raw[i][0], .to_ms = p->raw[i][1] };

		byte_buf_printf(q, "SELECT comm, min(tgid) AS flo, max(tgid) AS fhi,"
				   " uniqHLL12State(process) AS fst, user_stack, kernel_stack,"
				   " sum(%s) AS fv", offcpu ? "blocked_ns" : "count");
		ch__range_rows_from(q, base, &r, offcpu);
		byte_buf_printf(q, " GROUP BY comm, user_stack, kernel_stack UNION ALL ");
	}
	byte_buf_printf(q, "SELECT comm, lo AS flo, hi AS fhi, procs AS fst, user_stack,"
			   " kernel_stack, value AS fv FROM fleet_slots WHERE kind = %d"
			   " AND start_ms BETWEEN %" PRId64 " AND %" PRId64
			   " AND (span_ms, start_ms, summary) IN (",
			offcpu ? KIND_OFFCPU : KIND_CPU, f->from_ms, f->to_ms);
	for (size_t i = 0; i < p->nused; i++)
		byte_buf_printf(q, "%s(%" PRId64 ", %" PRId64 ", %" PRIu64 ")", i ? ", " : "",
				p->used[i]->span_ms, p->used[i]->start_ms, p->used[i]->summary);
	byte_buf_printf(q, "))");
	rc = byte_buf_error(q) ? -ENOMEM : 1;
cleanup:
	free(p);
	free(s.v);
	byte_buf_free(&sq);
	return rc;
}
