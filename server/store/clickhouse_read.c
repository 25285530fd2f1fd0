/* SPDX-License-Identifier: Apache-2.0 */
/* Reading from ClickHouse: objects, stacks, nodes, processes, the flame graph aggregate,
 * counters and kernel symbols. Every answer is TabSeparated, read by the bounded decoder. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "server/store/clickhouse_internal.h"

/*
 * Runs `sql` (built in `q`; FORMAT TabSeparated appended here) and calls `row` per row of
 * `nfields` fields. With `totals` the answer ends with a WITH TOTALS row, read into totals[].
 */
int ch__select_run(struct ch_store *s, struct byte_buf *q, unsigned nfields, ch_row_fn row,
		   void *ctx, char **totals)
{
	struct byte_buf ans = { 0 };
	struct ch_tsv t;
	char *f[CH_MAX_FIELDS];
	int rc;

	byte_buf_printf(q, " FORMAT TabSeparated");
	byte_buf_append(q, "", 1);
	if ((rc = byte_buf_error(q)) || (rc = ch__exec(s, (const char *)q->data, NULL, 0, &ans)))
		goto cleanup;
	ch_tsv_init(&t, (char *)ans.data, ans.len);
	while (!(totals && ch_tsv_blank(&t)) && (rc = ch_tsv_row(&t, f, nfields)) == 1)
		if ((rc = row(ctx, f)))
			goto cleanup;
	if (rc < 0)
		goto cleanup;
	rc = 0;
	if (totals && ch_tsv_row(&t, f, nfields) != 1)
		rc = -EPROTO;
	/* The totals point into the answer: copies outlive it. */
	for (unsigned i = 0; totals && !rc && i < nfields; i++)
		if (f[i] && !(totals[i] = strdup(f[i])))
			rc = -ENOMEM;
cleanup:
	byte_buf_free(&ans);
	return rc;
}

static void totals_free(char **t, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		free(t[i]);
}

/* ---- objects and stacks --------------------------------------------------------------------- */

static int object_row(void *ctx, char **f)
{
	struct store_object *o = ctx;
	uint64_t kind;
	size_t len;

	if (ch_tsv_u64(f[0], &kind) || kind > UINT8_MAX ||
	    ch_tsv_hex(f[1], o->id.bytes, SYSOM_BUILD_ID_MAX, &len) || !f[2])
		return -EPROTO;
	o->id.kind = (uint8_t)kind;
	o->id.len = (uint8_t)len;
	free(o->name);
	o->name = strdup(f[2]);
	return o->name ? 0 : -ENOMEM;
}

int ch__object_get(struct store *base, int64_t id, struct store_object *out)
{
	struct store_object o = { 0 };
	struct byte_buf q = { 0 };
	int rc;

	byte_buf_printf(&q, "SELECT kind, hex(build_id), argMin(name, seen_ns) FROM objects"
			    " WHERE id = %" PRId64 " GROUP BY kind, build_id LIMIT 1", id);
	rc = ch__select_run(ch__store(base), &q, 3, object_row, &o, NULL);
	if (!rc && !o.name)
		rc = -ENOENT;
	if (rc)
		free(o.name);
	else
		*out = o;
	byte_buf_free(&q);
	return rc;
}

static struct store_stack *stack_copy(const struct store_stack *stk)
{
	size_t size = sizeof(*stk) + stk->nframes * sizeof(stk->frames[0]);
	struct store_stack *c = malloc(size);

	if (c)
		memcpy(c, stk, size);
	return c;
}

struct stack_read {
	int64_t id;
	struct store_stack *stk;
};

static int stack_row(void *ctx, char **f)
{
	struct stack_read *r = ctx;
	size_t hexlen = f[0] ? strlen(f[0]) : 0, len, nframes;
	uint8_t *raw;
	int rc = 0;

	if (hexlen < 4 || hexlen / 2 > 2 + 16 * (size_t)UINT16_MAX || r->stk)
		return -EPROTO;
	if (!(raw = malloc(hexlen / 2)))
		return -ENOMEM;
	if (ch_tsv_hex(f[0], raw, hexlen / 2, &len) || (len - 2) % 16 || len == 2) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	nframes = (len - 2) / 16;
	r->stk = malloc(sizeof(*r->stk) + nframes * sizeof(r->stk->frames[0]));
	if (!r->stk) {
		rc = -ENOMEM;
		goto cleanup;
	}
	r->stk->id = r->id;
	r->stk->kind = raw[0];
	r->stk->stop_reason = raw[1];
	r->stk->nframes = (uint16_t)nframes;
	for (size_t i = 0; i < nframes; i++) {
		r->stk->frames[i].object = (int64_t)load_le64(raw + 2 + 16 * i);
		r->stk->frames[i].offset = load_le64(raw + 2 + 16 * i + 8);
	}
cleanup:
	free(raw);
	return rc;
}

int ch__stack_get(struct store *base, int64_t id, struct store_stack **out)
{
	struct ch_store *s = ch__store(base);
	struct ch_stack_slot *slot = &s->stacks[(uint64_t)id & (CH_STACK_CACHE - 1)];
	struct stack_read r = { .id = id };
	struct store_stack *cached = NULL;
	struct byte_buf q = { 0 };
	int rc;

	/* Stacks never change once stored: a cached copy is the stored stack. */
	pthread_mutex_lock(&s->lock);
	if (slot->id == id && slot->stk && !(cached = stack_copy(slot->stk))) {
		pthread_mutex_unlock(&s->lock);
		return -ENOMEM;
	}
	pthread_mutex_unlock(&s->lock);
	if (cached) {
		*out = cached;
		return 0;
	}
	byte_buf_printf(&q, "SELECT hex(ident) FROM stack_days WHERE id = %" PRId64 " LIMIT 1", id);
	rc = ch__select_run(s, &q, 1, stack_row, &r, NULL);
	byte_buf_free(&q);
	if (!rc && !r.stk)
		rc = -ENOENT;
	if (rc) {
		free(r.stk);
		return rc;
	}
	if ((cached = stack_copy(r.stk))) {
		pthread_mutex_lock(&s->lock);
		free(slot->stk);
		slot->id = id;
		slot->stk = cached;
		pthread_mutex_unlock(&s->lock);
	}
	*out = r.stk;
	return 0;
}

/* ---- nodes ---------------------------------------------------------------------------------- */

struct node_visit {
	store_node_fn fn;
	void *arg;
};

static int node_row(void *ctx, char **f)
{
	const struct node_visit *v = ctx;
	struct store_node n = {
		.hostname = f[1], .kernel_release = f[2], .machine = f[3], .agent_version = f[4],
	};

	if (!f[0] || strlen(f[0]) != 2 * SYSOM_NODE_ID_SIZE || !f[1] || !f[2] || !f[3] ||
	    !f[4] || !f[5] || strlen(f[5]) >= sizeof(n.boot_id) || ch_tsv_u32(f[6], &n.sample_hz) ||
	    ch_tsv_u32(f[7], &n.sample_rate_ppm) || ch_tsv_u32(f[8], &n.online_cpus) ||
	    ch_tsv_i64(f[9], &n.first_seen_ns) || ch_tsv_i64(f[10], &n.last_seen_ns) ||
	    ch_tsv_u64(f[11], &n.batches) || ch_tsv_u64(f[12], &n.last_epoch) ||
	    ch_tsv_u64(f[13], &n.last_sequence))
		return -EPROTO;
	memcpy(n.node_id, f[0], sizeof(n.node_id));
	memcpy(n.boot_id, f[5], strlen(f[5]) + 1);
	return v->fn(v->arg, &n);
}

/*
 * The all-time lists read the summaries of migration 13 (clickhouse_schema_summaries.c), which
 * sum every copy of a batch. A node with two copies of a batch identity (replicas storing it
 * at once, rare) is read the old way instead: its committed batches grouped (a node's batches
 * are one range of the primary key). Past CH_DUP_NODES_MAX such nodes everything is.
 */
#define CH_DUP_NODES_MAX 1000

struct dup_nodes {
	struct byte_buf list; /* "('node','node',...)" */
	size_t n;
};

static int dup_row(void *ctx, char **f)
{
	struct dup_nodes *d = ctx;

	if (!f[0] || strlen(f[0]) != 2 * SYSOM_NODE_ID_SIZE)
		return -EPROTO;
	byte_buf_printf(&d->list, "%s", d->n++ ? "," : "(");
	ch__quote(&d->list, f[0]);
	return 0;
}

/*
 * The nodes with a sequence number stored twice in an epoch: a block's copies' bits sum to
 * its bitmap exactly when none has two copies. Blocks are grouped by a hash of their key (a
 * string key costs twice the time); blocks that share a hash are summed together, and a sum
 * over blocks one of which has a copy still exceeds their bitmaps' OR, so a collision can only
 * name more nodes (read exactly anyway), never hide one.
 */
static int dup_nodes_read(struct ch_store *s, struct dup_nodes *d)
{
	struct byte_buf q = { 0 };
	int rc;

	byte_buf_printf(&q, "SELECT DISTINCT node_id FROM batch_seqs"
			    " WHERE cityHash64(node_id, epoch, blk) IN (SELECT k FROM"
			    " (SELECT cityHash64(node_id, epoch, blk) AS k, groupBitOrMerge(bits) AS b,"
			    " sumMerge(lo) AS sl, sumMerge(hi) AS sh FROM batch_seqs GROUP BY k)"
			    " WHERE sl != bitAnd(b, 4294967295) OR sh != bitShiftRight(b, 32))");
	rc = ch__select_run(s, &q, 1, dup_row, d, NULL);
	if (!rc && d->n)
		byte_buf_printf(&d->list, ")");
	if (!rc)
		rc = byte_buf_error(&d->list);
	byte_buf_free(&q);
	return rc;
}

/* Appends " AND node_id [NOT] IN <dups>" when there are any. */
static void dup_cond(struct byte_buf *q, const struct dup_nodes *d, bool in)
{
	if (d->n)
		byte_buf_printf(q, " AND node_id %sIN %.*s", in ? "" : "NOT ", (int)d->list.len,
				(const char *)d->list.data);
}

/* The exact read's condition: CH_COMMITTED over every batch (d NULL), or over the batches of
 * the nodes of d and only those nodes' rows. */
static void dup_committed(struct byte_buf *q, const struct dup_nodes *d)
{
	if (!d) {
		byte_buf_printf(q, CH_COMMITTED);
		return;
	}
	ch__committed_nodes_begin(q);
	byte_buf_printf(q, "%.*s", (int)d->list.len, (const char *)d->list.data);
	ch__committed_nodes_end(q, CH_ALL_TIME);
	dup_cond(q, d, true);
}

/* The node list from the committed batches of every node (d NULL) or of d's nodes: the
 * latest batch (by receive time) names the node; the last sequence is the highest of the
 * latest epoch. */
static void nodes_exact_sql(struct byte_buf *q, const struct dup_nodes *d)
{
	byte_buf_printf(q,
		"SELECT node_id, h, kr, m, av, bi, hz, ppm, cpus, f, l, n, le, ls FROM"
		" (SELECT node_id, argMax(hostname, received_ns) AS h,"
		"  argMax(kernel_release, received_ns) AS kr, argMax(machine, received_ns) AS m,"
		"  argMax(agent_version, received_ns) AS av, argMax(boot_id, received_ns) AS bi,"
		"  argMax(sample_hz, received_ns) AS hz, argMax(sample_rate_ppm, received_ns) AS ppm,"
		"  argMax(online_cpus, received_ns) AS cpus, min(received_ns) AS f,"
		"  max(received_ns) AS l, count() AS n, argMax(epoch, received_ns) AS le"
		"  FROM batches WHERE ");
	dup_committed(q, d);
	byte_buf_printf(q, " GROUP BY node_id)"
		" ANY LEFT JOIN (SELECT node_id, epoch AS le, max(sequence) AS ls FROM batches"
		"  WHERE ");
	dup_committed(q, d);
	byte_buf_printf(q, " GROUP BY node_id, epoch) USING (node_id, le)");
}

int ch__nodes_list(struct store *base, store_node_fn fn, void *arg)
{
	struct ch_store *s = ch__store(base);
	struct node_visit v = { fn, arg };
	struct dup_nodes d = { 0 };
	struct byte_buf q = { 0 };
	int rc;

	if ((rc = dup_nodes_read(s, &d)))
		goto cleanup;
	if (d.n > CH_DUP_NODES_MAX) {
		nodes_exact_sql(&q, NULL);
		byte_buf_printf(&q, " ORDER BY h, node_id");
		rc = ch__select_run(s, &q, 14, node_row, &v, NULL);
		goto cleanup;
	}
	/* Per node its days merged; per (node, epoch) the highest sequence, the latest epoch's
	 * picked from the arrays. */
	byte_buf_printf(&q,
		"SELECT node_id, h, kr, m, av, bi, hz, ppm, cpus, f, l, n, le, ls FROM"
		" (SELECT node_id, host AS h, krel AS kr, mach AS m, aver AS av, boot AS bi,"
		"  shz AS hz, sppm AS ppm, ncpu AS cpus, first AS f, last AS l, nb AS n, lep AS le,"
		"  tops[indexOf(eps, lep)] AS ls FROM"
		"  (SELECT node_id, argMaxMerge(h) AS host, argMaxMerge(kr) AS krel,"
		"   argMaxMerge(m) AS mach, argMaxMerge(av) AS aver, argMaxMerge(bi) AS boot,"
		"   argMaxMerge(hz) AS shz, argMaxMerge(ppm) AS sppm, argMaxMerge(cpus) AS ncpu,"
		"   minMerge(f) AS first, maxMerge(l) AS last, countMerge(n) AS nb,"
		"   argMaxMerge(le) AS lep FROM node_days WHERE 1");
	dup_cond(&q, &d, false);
	byte_buf_printf(&q, " GROUP BY node_id)"
		"  ANY LEFT JOIN (SELECT node_id, groupArray(epoch) AS eps, groupArray(t) AS tops"
		"   FROM (SELECT node_id, epoch, maxMerge(top) AS t FROM batch_seqs WHERE 1");
	dup_cond(&q, &d, false);
	byte_buf_printf(&q, " GROUP BY node_id, epoch) GROUP BY node_id) USING node_id");
	if (d.n) {
		byte_buf_printf(&q, " UNION ALL ");
		nodes_exact_sql(&q, &d);
	}
	byte_buf_printf(&q, ") ORDER BY h, node_id");
	rc = ch__select_run(s, &q, 14, node_row, &v, NULL);
cleanup:
	byte_buf_free(&d.list);
	byte_buf_free(&q);
	return rc;
}

/* ---- reads bounded to the days of their range ------------------------------------------------ */

#define MS_PER_DAY 86400000LL
/* The last day 18.16 parses from text (2105-12-31; later ones read as 0000-00-00), though a
 * Date column holds up to 65535 (rows of later times are stored clamped to it). */
#define CH_MAX_TEXT_DAY 49672LL

static void day_string(int64_t ms, char out[CH_DAY_SIZE])
{
	int64_t day = ms < 0 ? 0 : ms / MS_PER_DAY;
	time_t t = (time_t)((day > CH_MAX_TEXT_DAY ? CH_MAX_TEXT_DAY : day) * 86400);
	struct tm tm;

	gmtime_r(&t, &tm);
	snprintf(out, CH_DAY_SIZE, "%04u-%02u-%02u", (unsigned)(tm.tm_year + 1900) % 10000u,
		 (unsigned)(tm.tm_mon + 1) % 100u, (unsigned)tm.tm_mday % 100u);
}

static void since_day(int64_t from_ms, char out[CH_DAY_SIZE])
{
	day_string(from_ms < INT64_MIN + MS_PER_DAY ? INT64_MIN : from_ms - MS_PER_DAY, out);
}

void ch__committed_nodes_begin(struct byte_buf *q)
{
	byte_buf_printf(q, "attempt IN (SELECT min(attempt) FROM batches WHERE node_id IN ");
}

void ch__committed_nodes_end(struct byte_buf *q, int64_t from_ms)
{
	char day[CH_DAY_SIZE];

	if (from_ms != CH_ALL_TIME) {
		since_day(from_ms, day);
		byte_buf_printf(q, " AND day >= '%s'", day);
	}
	byte_buf_printf(q, " GROUP BY node_id, epoch, sequence)");
}

void ch__committed_since_sql(struct byte_buf *q, int64_t from_ms)
{
	byte_buf_printf(q, "attempt IN (SELECT min(attempt) FROM batches WHERE 1");
	ch__committed_nodes_end(q, from_ms); /* every node's batches from that day on */
}

void ch__committed_range_sql(struct byte_buf *q, int64_t from_ms, int64_t to_ms)
{
	/* A row timed t came from a batch whose window [CH_WINDOW_LO_MS, CH_WINDOW_HI_MS] holds
	 * t: one indexed under a minute of [from, to] (batch_minutes, schema 17: minutes of
	 * unsigned windows, never negative). */
	int64_t lo = from_ms < 0 ? 0 : store__minute_floor(from_ms);
	int64_t hi = to_ms < 0 ? -1 : store__minute_floor(to_ms);

	byte_buf_printf(q, "attempt IN (SELECT min(attempt) FROM batch_minutes WHERE minute_ms"
			   " BETWEEN %" PRId64 " AND %" PRId64, lo, hi);
	ch__committed_nodes_end(q, from_ms);
}

void ch__job_node_ids_sql(struct byte_buf *q, const char *job)
{
	byte_buf_printf(q, "(SELECT node_id FROM job_ranks WHERE job = ");
	ch__quote(q, job);
	byte_buf_printf(q, ")");
}

void ch__committed_job_sql(struct byte_buf *q, const char *job, int64_t from_ms)
{
	ch__committed_nodes_begin(q);
	ch__job_node_ids_sql(q, job);
	ch__committed_nodes_end(q, from_ms);
}

void ch__received_since_sql(struct byte_buf *q, int64_t from_ms)
{
	char day[CH_DAY_SIZE];

	since_day(from_ms, day);
	byte_buf_printf(q, "day >= '%s' AND ", day);
	ch__committed_since_sql(q, from_ms);
}

void ch__process_comms_since_sql(struct byte_buf *q, int64_t from_ms)
{
	char day[CH_DAY_SIZE];

	/* The committed process rows' latest comm, merged from the per-day summary (schema 15). */
	since_day(from_ms, day);
	byte_buf_printf(q, "(SELECT process, argMaxMerge(name) AS comm FROM process_names"
			   " WHERE day >= '%s' GROUP BY process)", day);
}

void ch__own_days_sql(struct byte_buf *q, int64_t from_ms, int64_t to_ms)
{
	char from[CH_DAY_SIZE], to[CH_DAY_SIZE];

	day_string(from_ms, from);
	byte_buf_printf(q, " AND day >= '%s'", from);
	if (to_ms / MS_PER_DAY < CH_MAX_TEXT_DAY) { /* else unbounded: days past it are stored */
		day_string(to_ms, to);
		byte_buf_printf(q, " AND day <= '%s'", to);
	}
}

/* ---- samples -------------------------------------------------------------------------------- */

int ch__filter_conds(struct byte_buf *q, const struct store_sample_filter *f, bool thread_comm)
{
	if (f->node) {
		char lower[2 * SYSOM_NODE_ID_SIZE + 1], day[CH_DAY_SIZE];
		size_t n = strlen(f->node);
		struct byte_buf id = { 0 }, cand = { 0 };
		int rc;

		if (n < sizeof(lower)) {
			for (size_t i = 0; i <= n; i++)
				lower[i] = (char)(f->node[i] >= 'A' && f->node[i] <= 'Z'
							  ? f->node[i] - 'A' + 'a' : f->node[i]);
			ch__quote(&id, lower);
		} else {
			ch__quote(&id, f->node);
		}
		byte_buf_append(&id, "", 1);
		/* The node whose id it is or whose latest committed batch names that host: only
		 * nodes with a batch naming either can be it, so the committed batches grouped
		 * are theirs (primary-key ranges), not every node's received since that day. */
		since_day(f->from_ms, day);
		if (!(rc = byte_buf_error(&id))) {
			byte_buf_printf(&cand, "(SELECT node_id FROM batches WHERE day >= '%s' AND"
					       " (node_id = %s OR hostname = ", day,
					(const char *)id.data);
			ch__quote(&cand, f->node);
			byte_buf_printf(&cand, "))");
			byte_buf_append(&cand, "", 1);
			rc = byte_buf_error(&cand);
		}
		if (rc) {
			byte_buf_free(&id);
			byte_buf_free(&cand);
			return rc;
		}
		byte_buf_printf(q, " AND node_id IN (SELECT node_id FROM batches WHERE day >= '%s'"
				   " AND node_id IN %s AND ", day, (const char *)cand.data);
		ch__committed_nodes_begin(q);
		byte_buf_printf(q, "%s", (const char *)cand.data);
		ch__committed_nodes_end(q, f->from_ms);
		byte_buf_printf(q, " GROUP BY node_id HAVING node_id = %s"
				   " OR argMax(hostname, received_ns) = ", (const char *)id.data);
		ch__quote(q, f->node);
		byte_buf_printf(q, ")");
		byte_buf_free(&id);
		byte_buf_free(&cand);
	}
	if (f->has_pid)
		byte_buf_printf(q, " AND tgid = %u", f->pid);
	if (f->comm) {
		byte_buf_printf(q, " AND (comm = ");
		ch__quote(q, f->comm);
		if (thread_comm) {
			byte_buf_printf(q, " OR thread_comm = ");
			ch__quote(q, f->comm);
		}
		byte_buf_printf(q, ")");
	}
	if (f->job) {
		/* Its processes run on the nodes of its rank records: named first, only those
		 * nodes' rows are read (node_id leads the row tables' keys), not the fleet's. */
		byte_buf_printf(q, " AND node_id IN ");
		ch__job_node_ids_sql(q, f->job);
		byte_buf_printf(q, " AND process IN ");
		ch__job_processes_sql(q, f->job, f->has_rank, f->rank);
	}
	if (store_filter_has_identity(f)) {
		byte_buf_printf(q, " AND process IN ");
		ch__identity_processes_sql(q, f, f->from_ms);
	}
	return byte_buf_error(q);
}

/* Appends the samples (joined with their process's comm) matching `f`, as a FROM clause: raw
 * rows and rollups (the flame graph) or raw rows only (`raw`: the process list, as SQLite). */
static int filter_from(struct byte_buf *q, struct store *base, const struct store_sample_filter *f,
		       bool raw)
{
	if (raw)
		ch__raw_rows_from(q, f, false);
	else
		ch__range_rows_from(q, base, f, false);
	return ch__filter_conds(q, f, true);
}

struct aggregate_visit {
	store_stack_count_fn fn;
	void *arg;
	int64_t *ids;  /* stacks the groups name, for the prefetch */
	size_t nids, cap;
};

static void visit_id(struct aggregate_visit *v, int64_t id)
{
	if (id == STORE_STACK_NONE)
		return;
	if (v->nids == v->cap) {
		size_t cap = v->cap ? 2 * v->cap : 256;
		int64_t *ids = realloc(v->ids, cap * sizeof(*ids));

		if (!ids)
			return; /* the prefetch is an optimization: stack_get still works */
		v->ids = ids;
		v->cap = cap;
	}
	v->ids[v->nids++] = id;
}

static int prefetch_row(void *ctx, char **f)
{
	struct ch_store *s = ctx;
	struct stack_read r;
	int rc;

	if (ch_tsv_i64(f[0], &r.id))
		return -EPROTO;
	r.stk = NULL;
	if ((rc = stack_row(&r, f + 1)))
		return rc;
	struct ch_stack_slot *slot = &s->stacks[(uint64_t)r.id & (CH_STACK_CACHE - 1)];

	pthread_mutex_lock(&s->lock);
	free(slot->stk);
	slot->id = r.id;
	slot->stk = r.stk;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/*
 * Reads the stacks a flame graph is about to ask for one by one into the stack cache, 4096 a
 * query, skipping those cached already: one round trip per 4096 stacks instead of one each.
 */
void ch__stacks_prefetch(struct ch_store *s, const int64_t *ids, size_t n)
{
	struct byte_buf q = { 0 };

	for (size_t i = 0; i < n;) {
		size_t in = 0;

		q.len = 0;
		byte_buf_printf(&q, "SELECT id, hex(ident) FROM stack_days WHERE id IN (");
		for (; i < n && in < 4096; i++) {
			struct ch_stack_slot *slot = &s->stacks[(uint64_t)ids[i] & (CH_STACK_CACHE - 1)];
			bool cached;

			pthread_mutex_lock(&s->lock);
			cached = slot->id == ids[i] && slot->stk;
			pthread_mutex_unlock(&s->lock);
			if (cached)
				continue;
			byte_buf_printf(&q, "%s%" PRId64, in ? "," : "", ids[i]);
			in++;
		}
		if (!in)
			continue;
		byte_buf_printf(&q, ") LIMIT 1 BY id");
		if (ch__select_run(s, &q, 2, prefetch_row, s, NULL))
			break; /* stack_get will say what is wrong */
	}
	byte_buf_free(&q);
}

static int stack_count_row(void *ctx, char **f)
{
	struct aggregate_visit *v = ctx;
	struct store_stack_count row = { .comm = f[0] };
	int64_t lo, hi;

	if (!f[0] || ch_tsv_i64(f[1], &lo) || ch_tsv_i64(f[2], &hi) ||
	    ch_tsv_u64(f[3], &row.processes) || ch_tsv_i64(f[4], &row.user_stack) ||
	    ch_tsv_i64(f[5], &row.kernel_stack) || ch_tsv_u64(f[6], &row.count))
		return -EPROTO;
	row.pid = lo == hi ? lo : -1;
	visit_id(v, row.user_stack);
	visit_id(v, row.kernel_stack);
	return v->fn(v->arg, &row);
}

int ch__stack_counts(struct ch_store *s, struct byte_buf *q, store_stack_count_fn fn, void *arg,
		     uint64_t *total)
{
	struct aggregate_visit v = { .fn = fn, .arg = arg };
	char *totals[7] = { 0 };
	int rc = ch__select_run(s, q, 7, stack_count_row, &v, totals);

	if (!rc && ch_tsv_u64(totals[6], total))
		rc = -EPROTO;
	if (!rc)
		ch__stacks_prefetch(s, v.ids, v.nids);
	free(v.ids);
	totals_free(totals, 7);
	return rc;
}

int ch__stacks_aggregate(struct store *base, const struct store_sample_filter *f, uint32_t limit,
			 store_stack_count_fn fn, void *arg, uint64_t *total)
{
	struct byte_buf q = { 0 };
	int rc;

	/* A fleet-wide range: the slots' summaries where they are current, raw rows for the rest
	 * (clickhouse_fleet_slots.c). */
	byte_buf_printf(&q, "SELECT comm, min(flo), max(fhi), uniqHLL12Merge(fst), user_stack,"
			    " kernel_stack, sum(fv) AS c");
	if ((rc = ch__fleet_slots_from(&q, base, f, false)) < 0)
		goto cleanup;
	if (!rc) {
		q.len = 0;
		byte_buf_printf(&q, "SELECT comm, min(tgid), max(tgid), uniqExact(process),"
				    " user_stack, kernel_stack, sum(count) AS c");
		if ((rc = filter_from(&q, base, f, false)))
			goto cleanup;
	}
	/* WITH TOTALS sums every group, also those beyond the LIMIT. */
	byte_buf_printf(&q, " GROUP BY comm, user_stack, kernel_stack WITH TOTALS"
			    " ORDER BY c DESC, comm, user_stack, kernel_stack LIMIT %u", limit);
	rc = ch__stack_counts(ch__store(base), &q, fn, arg, total);
cleanup:
	byte_buf_free(&q);
	return rc;
}

struct process_visit {
	store_process_fn fn;
	void *arg;
};

static int process_row(void *ctx, char **f)
{
	const struct process_visit *v = ctx;
	struct store_process p = {
		.hostname = f[1], .comm = f[6], .exe = f[7], .cmdline = f[8],
	};

	if (!f[0] || strlen(f[0]) != 2 * SYSOM_NODE_ID_SIZE || !f[1] || !f[6] || !f[7] ||
	    !f[8] || ch_tsv_u32(f[2], &p.pid) || ch_tsv_u32(f[3], &p.ppid) ||
	    ch_tsv_u32(f[4], &p.generation) || ch_tsv_u64(f[5], &p.start_time_ns) ||
	    ch_tsv_i64(f[9], &p.first_seen_ns) || ch_tsv_i64(f[10], &p.last_seen_ns) ||
	    ch_tsv_u64(f[11], &p.samples) || ch__identity_read(f + 12, &p.identity))
		return -EPROTO;
	memcpy(p.node_id, f[0], sizeof(p.node_id));
	return v->fn(v->arg, &p);
}

int ch__processes_list(struct store *base, const struct store_sample_filter *f, uint32_t limit,
		       store_process_fn fn, void *arg)
{
	struct process_visit v = { fn, arg };
	struct byte_buf q = { 0 }, top = { 0 }, nodes = { 0 };
	int rc;

	/* The top processes of the range (with their node), and their nodes: the processes' and
	 * nodes' attributes are merged over every committed batch of those nodes (the primary
	 * key's prefix), as SQLite keeps them, not over the fleet's. */
	byte_buf_printf(&top, "(SELECT process, any(node_id) AS top_node, sum(count) AS c");
	if ((rc = filter_from(&top, base, f, true)))
		goto cleanup;
	byte_buf_printf(&top, " GROUP BY process ORDER BY c DESC, process LIMIT %u)", limit);
	byte_buf_append(&top, "", 1);
	byte_buf_printf(&nodes, "(SELECT top_node FROM %s)", (const char *)top.data);
	byte_buf_append(&nodes, "", 1);
	if ((rc = byte_buf_error(&top)) || (rc = byte_buf_error(&nodes)))
		goto cleanup;
	/* One JOIN per SELECT (18.16): the top processes, their attributes, their identity (a
	 * process without one reads i_known 0), then their node's hostname. */
	byte_buf_printf(&q,
		"SELECT node_id, hostname, tgid, ppid, generation, start_time_ns, comm, exe, cmdline,"
		" first_seen_ns, last_seen_ns, c, " CH_IDENTITY_COLUMNS " FROM"
		" (SELECT process, c, node_id, tgid, ppid, generation, start_time_ns, comm, exe,"
		"  cmdline, first_seen_ns, last_seen_ns, " CH_IDENTITY_COLUMNS " FROM"
		" (SELECT process, c, node_id, tgid, ppid, generation, start_time_ns, comm, exe,"
		"  cmdline, first_seen_ns, last_seen_ns FROM"
		"  (SELECT process, c FROM %s)"
		"  ANY LEFT JOIN (SELECT process, any(node_id) AS node_id, any(tgid) AS tgid,"
		"   argMax(ppid, received_ns) AS ppid, any(generation) AS generation,"
		"   any(start_time_ns) AS start_time_ns, argMax(comm, received_ns) AS comm,"
		"   argMax(exe, received_ns) AS exe, argMax(cmdline, received_ns) AS cmdline,"
		"   min(first_seen_ns) AS first_seen_ns, max(last_seen_ns) AS last_seen_ns"
		"   FROM (SELECT * FROM processes WHERE node_id IN %s"
		"   AND process IN (SELECT process FROM %s) AND ",
		(const char *)top.data, (const char *)nodes.data, (const char *)top.data);
	ch__committed_nodes_begin(&q);
	byte_buf_printf(&q, "%s", (const char *)nodes.data);
	ch__committed_nodes_end(&q, CH_ALL_TIME);
	byte_buf_printf(&q, ") GROUP BY process) USING process) ANY LEFT JOIN ");
	ch__identities_merged_sql(&q, NULL, (const char *)nodes.data, CH_ALL_TIME);
	byte_buf_printf(&q,
		"  USING process)"
		" ANY LEFT JOIN (SELECT node_id, argMax(hostname, received_ns) AS hostname"
		"  FROM batches WHERE node_id IN %s AND ", (const char *)nodes.data);
	ch__committed_nodes_begin(&q);
	byte_buf_printf(&q, "%s", (const char *)nodes.data);
	ch__committed_nodes_end(&q, CH_ALL_TIME);
	byte_buf_printf(&q, " GROUP BY node_id) USING node_id ORDER BY c DESC, process");
	rc = ch__select_run(ch__store(base), &q, 12 + CH_IDENTITY_FIELDS, process_row, &v, NULL);
cleanup:
	byte_buf_free(&q);
	byte_buf_free(&top);
	byte_buf_free(&nodes);
	return rc;
}

/* ---- counters ------------------------------------------------------------------------------- */

struct counter_visit {
	store_counter_fn fn;
	void *arg;
};

static int counter_row(void *ctx, char **f)
{
	const struct counter_visit *v = ctx;
	struct store_counter_total c = { .hostname = f[2] };
	uint64_t id;

	if (ch_tsv_u64(f[0], &id) || id > UINT16_MAX || !f[1] ||
	    strlen(f[1]) != 2 * SYSOM_NODE_ID_SIZE || !f[2] || ch_tsv_u64(f[3], &c.total))
		return -EPROTO;
	c.counter = (uint16_t)id;
	memcpy(c.node_id, f[1], sizeof(c.node_id));
	return v->fn(v->arg, &c);
}

/* Counter totals from the committed batches of every node (d NULL) or of d's nodes. */
static void counters_exact_sql(struct byte_buf *q, const struct dup_nodes *d)
{
	byte_buf_printf(q,
		"SELECT counter, node_id, hostname, total FROM"
		" (SELECT counter, node_id, sum(value) AS total FROM batches"
		"  ARRAY JOIN counter_ids AS counter, counter_values AS value WHERE ");
	dup_committed(q, d);
	byte_buf_printf(q, " GROUP BY counter, node_id)"
		" ANY LEFT JOIN (SELECT node_id, argMax(hostname, received_ns) AS hostname"
		"  FROM batches WHERE ");
	dup_committed(q, d);
	byte_buf_printf(q, " GROUP BY node_id) USING node_id");
}

int ch__counters_list(struct store *base, store_counter_fn fn, void *arg)
{
	struct ch_store *s = ch__store(base);
	struct counter_visit v = { fn, arg };
	struct dup_nodes d = { 0 };
	struct byte_buf q = { 0 };
	int rc;

	if ((rc = dup_nodes_read(s, &d)))
		goto cleanup;
	if (d.n > CH_DUP_NODES_MAX) {
		counters_exact_sql(&q, NULL);
		byte_buf_printf(&q, " ORDER BY counter, node_id");
		rc = ch__select_run(s, &q, 4, counter_row, &v, NULL);
		goto cleanup;
	}
	byte_buf_printf(&q,
		"SELECT counter, node_id, hostname, total FROM"
		" (SELECT counter, node_id, hostname, tot AS total FROM"
		"  (SELECT counter, node_id, sumMerge(total) AS tot FROM node_counters WHERE 1");
	dup_cond(&q, &d, false);
	byte_buf_printf(&q, " GROUP BY counter, node_id)"
		"  ANY LEFT JOIN (SELECT node_id, argMaxMerge(h) AS hostname FROM node_days WHERE 1");
	dup_cond(&q, &d, false);
	byte_buf_printf(&q, " GROUP BY node_id) USING node_id");
	if (d.n) {
		byte_buf_printf(&q, " UNION ALL ");
		counters_exact_sql(&q, &d);
	}
	byte_buf_printf(&q, ") ORDER BY counter, node_id");
	rc = ch__select_run(s, &q, 4, counter_row, &v, NULL);
cleanup:
	byte_buf_free(&d.list);
	byte_buf_free(&q);
	return rc;
}

/* ---- kernel symbols ------------------------------------------------------------------------- */

static void build_id_sql(struct byte_buf *q, const uint8_t *id, size_t len)
{
	byte_buf_printf(q, "unhex('");
	for (size_t i = 0; i < len; i++)
		byte_buf_printf(q, "%02x", id[i]);
	byte_buf_printf(q, "')");
}

static int u64_row(void *ctx, char **f)
{
	return ch_tsv_u64(f[0], ctx) ? -EPROTO : 0;
}

int ch__ksyms_count(struct store *base, const uint8_t *build_id, size_t build_id_len,
		    uint64_t *count)
{
	struct byte_buf q = { 0 };
	uint64_t n = 0;
	int rc;

	if (build_id_len == 0 || build_id_len > SYSOM_BUILD_ID_MAX)
		return -EINVAL;
	/* uniqExact: two replicas storing the same table at once store its rows twice. */
	byte_buf_printf(&q, "SELECT uniqExact(offset) FROM ksyms WHERE build_id = ");
	build_id_sql(&q, build_id, build_id_len);
	rc = ch__select_run(ch__store(base), &q, 1, u64_row, &n, NULL);
	byte_buf_free(&q);
	if (!rc && !n)
		rc = -ENOENT;
	if (!rc)
		*count = n;
	return rc;
}

int ch__ksyms_put(struct store *base, const uint8_t *build_id, size_t build_id_len,
		  const struct store_ksym *syms, size_t count, int64_t uploaded_ns, bool *created)
{
	struct ch_store *s = ch__store(base);
	pthread_mutex_t *stripe = &s->stripes[build_id[0] % CH_STRIPES];
	struct byte_buf rows = { 0 };
	uint64_t have;
	int rc = store__ksyms_check(build_id_len, syms, count);

	if (rc)
		return rc;
	*created = false;
	if (count == 0)
		return 0; /* an empty table stores nothing (SQLite keeps none either) */
	pthread_mutex_lock(stripe);
	rc = ch__ksyms_count(base, build_id, build_id_len, &have);
	if (rc != -ENOENT)
		goto cleanup; /* stored already (0), or an error */
	for (size_t i = 0; i < count; i++) {
		ch__rb_string(&rows, build_id, build_id_len);
		byte_buf_put_u64(&rows, syms[i].offset);
		byte_buf_put_u8(&rows, (uint8_t)syms[i].type);
		ch__rb_str(&rows, syms[i].name);
		byte_buf_put_u64(&rows, (uint64_t)uploaded_ns);
	}
	/* One INSERT: ClickHouse writes a block of up to max_insert_block_size (1,048,576) rows
	 * atomically, far above a kernel's symbol count. */
	if (!(rc = byte_buf_error(&rows)))
		rc = ch__exec(s, "INSERT INTO ksyms FORMAT RowBinary", rows.data, rows.len, NULL);
	*created = rc == 0;
cleanup:
	pthread_mutex_unlock(stripe);
	byte_buf_free(&rows);
	return rc;
}

struct range_read {
	struct store_ksym_range *r;
};

static int floor_row(void *ctx, char **f)
{
	struct store_ksym_range *r = ctx;

	if (ch_tsv_u64(f[0], &r->floor) || !f[1])
		return -EPROTO;
	free(r->floor_name);
	if (!(r->floor_name = strdup(f[1])))
		return -ENOMEM;
	r->has_floor = true;
	return 0;
}

static int next_row(void *ctx, char **f)
{
	struct store_ksym_range *r = ctx;

	if (ch_tsv_u64(f[0], &r->next))
		return -EPROTO;
	r->has_next = true;
	return 0;
}

int ch__ksym_range_get(struct store *base, const uint8_t *build_id, size_t build_id_len,
		       uint64_t offset, struct store_ksym_range *out)
{
	struct ch_store *s = ch__store(base);
	struct store_ksym_range r = { 0 };
	struct byte_buf q = { 0 };
	uint64_t n;
	int rc = ch__ksyms_count(base, build_id, build_id_len, &n);

	if (rc)
		return rc;
	byte_buf_printf(&q, "SELECT offset, name FROM ksyms WHERE build_id = ");
	build_id_sql(&q, build_id, build_id_len);
	byte_buf_printf(&q, " AND offset <= %" PRIu64 " ORDER BY offset DESC LIMIT 1", offset);
	if ((rc = ch__select_run(s, &q, 2, floor_row, &r, NULL)))
		goto cleanup;
	q.len = 0;
	byte_buf_printf(&q, "SELECT offset FROM ksyms WHERE build_id = ");
	build_id_sql(&q, build_id, build_id_len);
	byte_buf_printf(&q, " AND offset > %" PRIu64 " ORDER BY offset LIMIT 1", offset);
	rc = ch__select_run(s, &q, 1, next_row, &r, NULL);
cleanup:
	byte_buf_free(&q);
	if (rc)
		free(r.floor_name);
	else
		*out = r;
	return rc;
}

static int usage_row(void *ctx, char **f)
{
	struct store_ksyms_usage *u = ctx;

	return ch_tsv_u64(f[0], &u->tables) || ch_tsv_u64(f[1], &u->rows) ? -EPROTO : 0;
}

int ch__ksyms_usage_get(struct store *base, struct store_ksyms_usage *out)
{
	struct store_ksyms_usage u = { .in_use_ns = STORE_KSYMS_IN_USE_NS };
	struct byte_buf q = { 0 };
	int rc;

	/* No limit on ClickHouse yet (max_rows 0): nothing is evicted. */
	byte_buf_printf(&q, "SELECT uniqExact(build_id), count() FROM ksyms");
	rc = ch__select_run(ch__store(base), &q, 2, usage_row, &u, NULL);
	byte_buf_free(&q);
	if (!rc)
		*out = u;
	return rc;
}
