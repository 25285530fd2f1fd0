/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading GPU launch, GPU time, off-CPU and wall-clock aggregates from ClickHouse: the same
 * groups, values, totals and order as SQLite (sqlite_read_profiles.c), with the rows of
 * committed attempts only. ClickHouse 18.16 has one JOIN per SELECT: joins nest.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/clickhouse_internal.h"

/* Rows of `table` in the filter's time range, committed, as a WHERE clause. */
static void range_where(struct byte_buf *q, const struct store_sample_filter *f)
{
	byte_buf_printf(q, " WHERE time_ms BETWEEN %" PRId64 " AND %" PRId64, f->from_ms,
			f->to_ms);
	ch__own_days_sql(q, f->from_ms, f->to_ms);
	byte_buf_printf(q, " AND ");
	ch__committed_since_sql(q, f->from_ms);
}

/* " ANY LEFT JOIN <the processes' comms> USING process" for rows of f's range. */
static void join_comms(struct byte_buf *q, const struct store_sample_filter *f)
{
	byte_buf_printf(q, " ANY LEFT JOIN ");
	ch__process_comms_since_sql(q, f->from_ms);
	byte_buf_printf(q, " USING process");
}

/* The stacks a group names, for the prefetch (an optimization: on ENOMEM it is skipped). */
struct stack_ids {
	int64_t *ids;
	size_t n, cap;
};

static void stack_ids_add(struct stack_ids *s, int64_t id)
{
	if (id == STORE_STACK_NONE)
		return;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 256;
		int64_t *ids = realloc(s->ids, cap * sizeof(*ids));

		if (!ids)
			return;
		s->ids = ids;
		s->cap = cap;
	}
	s->ids[s->n++] = id;
}

/* ---- launches ------------------------------------------------------------------------------- */

struct launch_visit {
	store_launch_count_fn fn;
	void *arg;
	struct stack_ids stacks;
};

static int launch_row(void *ctx, char **f)
{
	struct launch_visit *v = ctx;
	struct store_launch_count row = { .comm = f[0], .kernel = f[6] };
	uint64_t named;
	int64_t lo, hi;

	if (!f[0] || !f[6] || ch_tsv_i64(f[1], &lo) || ch_tsv_i64(f[2], &hi) ||
	    ch_tsv_u64(f[3], &row.processes) || ch_tsv_i64(f[4], &row.user_stack) ||
	    ch_tsv_u64(f[5], &named) || ch_tsv_u64(f[7], &row.count))
		return -EPROTO;
	row.pid = lo == hi ? lo : -1;
	row.named = named != 0;
	stack_ids_add(&v->stacks, row.user_stack);
	return v->fn(v->arg, &row);
}

int ch__launches_aggregate(struct store *base, const struct store_sample_filter *f,
			   uint32_t limit, store_launch_count_fn fn, void *arg, uint64_t *total)
{
	struct ch_store *s = ch__store(base);
	struct launch_visit v = { .fn = fn, .arg = arg };
	struct byte_buf q = { 0 };
	char *totals[8] = { 0 };
	int rc;

	/* An unnamed kernel is "0x" and its handle in lower-case hex without leading zeros, as
	 * SQLite's printf('0x%x') spells it. */
	byte_buf_printf(&q, "SELECT comm, min(tgid), max(tgid), uniqExact(process), user_stack AS u,"
			    " kernel_name != '' AS named, if(kernel_name != '', kernel_name,"
			    " concat('0x', replaceRegexpOne(lower(hex(function)), '^0+(.)', '\\\\1')))"
			    " AS kn, sum(count) AS c FROM launches");
	join_comms(&q, f);
	range_where(&q, f);
	if ((rc = ch__filter_conds(&q, f, false)))
		goto cleanup;
	byte_buf_printf(&q, " GROUP BY comm, u, named, kn WITH TOTALS"
			    " ORDER BY c DESC, comm, u, kn LIMIT %u", limit);
	rc = ch__select_run(s, &q, 8, launch_row, &v, totals);
	if (!rc && ch_tsv_u64(totals[7], total))
		rc = -EPROTO;
	if (!rc)
		ch__stacks_prefetch(s, v.stacks.ids, v.stacks.n);
cleanup:
	for (unsigned i = 0; i < 8; i++)
		free(totals[i]);
	free(v.stacks.ids);
	byte_buf_free(&q);
	return rc;
}

/* ---- GPU time ------------------------------------------------------------------------------- */

struct gpu_time_visit {
	store_gpu_time_fn fn;
	void *arg;
	struct stack_ids stacks;
};

static int gpu_time_row(void *ctx, char **f)
{
	struct gpu_time_visit *v = ctx;
	struct store_gpu_time row = { .comm = f[0], .kernel = f[6] };
	uint64_t seen;
	int64_t lo, hi, ns;

	if (!f[0] || !f[6] || ch_tsv_i64(f[1], &lo) || ch_tsv_i64(f[2], &hi) ||
	    ch_tsv_u64(f[3], &row.processes) || ch_tsv_i64(f[4], &row.user_stack) ||
	    ch_tsv_u64(f[5], &seen) || ch_tsv_i64(f[7], &ns))
		return -EPROTO;
	row.pid = lo == hi ? lo : -1;
	row.launch_seen = seen != 0;
	row.ns = (uint64_t)ns;
	stack_ids_add(&v->stacks, row.user_stack);
	return v->fn(v->arg, &row);
}

int ch__gpu_time_aggregate(struct store *base, const struct store_sample_filter *f,
			   uint32_t limit, store_gpu_time_fn fn, void *arg, uint64_t *total)
{
	struct ch_store *s = ch__store(base);
	struct gpu_time_visit v = { .fn = fn, .arg = arg };
	struct byte_buf q = { 0 };
	char *totals[8] = { 0 };
	int64_t t;
	int rc;

	/* Per (process, kernel): its GPU time in the range, its launches per user stack (lc) and
	 * in all (lt); each stack gets the share of the time its launches had; without any
	 * launch (the LEFT JOIN's defaults: lc = 0) the kernel's whole time, stack unknown. */
	byte_buf_printf(&q,
		"SELECT comm, min(tgid), max(tgid), uniqExact(process), u, seen, name,"
		" toInt64(sum(x)) AS t FROM"
		" (SELECT process, tgid, node_id, name, u, lc > 0 AS seen,"
		"  if(lc = 0, toFloat64(ns), ns * 1.0 * lc / lt) AS x FROM"
		"  (SELECT process, any(tgid) AS tgid, any(node_id) AS node_id, name,"
		"   sum(total_ns) AS ns FROM gpu_kernels");
	range_where(&q, f);
	byte_buf_printf(&q, "   GROUP BY process, name)"
		"  ALL LEFT JOIN"
		"  (SELECT process, name, u, lc, lt FROM"
		"   (SELECT process, kernel_name AS name, user_stack AS u, sum(count) AS lc"
		"    FROM launches");
	range_where(&q, f);
	byte_buf_printf(&q, "    GROUP BY process, name, u)"
		"   ALL INNER JOIN"
		"   (SELECT process, kernel_name AS name, sum(count) AS lt FROM launches");
	range_where(&q, f);
	byte_buf_printf(&q, "    GROUP BY process, name) USING (process, name))"
		"  USING (process, name))");
	join_comms(&q, f);
	byte_buf_printf(&q, " WHERE 1");
	if ((rc = ch__filter_conds(&q, f, false)))
		goto cleanup;
	byte_buf_printf(&q, " GROUP BY comm, u, seen, name WITH TOTALS"
			    " ORDER BY t DESC, comm, u, name LIMIT %u", limit);
	rc = ch__select_run(s, &q, 8, gpu_time_row, &v, totals);
	if (!rc && ch_tsv_i64(totals[7], &t))
		rc = -EPROTO;
	if (!rc) {
		*total = (uint64_t)t;
		ch__stacks_prefetch(s, v.stacks.ids, v.stacks.n);
	}
cleanup:
	for (unsigned i = 0; i < 8; i++)
		free(totals[i]);
	free(v.stacks.ids);
	byte_buf_free(&q);
	return rc;
}

/* ---- off-CPU and wall-clock time ------------------------------------------------------------ */

/*
 * Wraps grouped rows (comm, lo, hi, procs, u, k, c0: microseconds rounded down per group) so
 * that WITH TOTALS adds up the rounded groups, as SQLite's total does.
 */
#define REGROUP_HEAD "SELECT comm, any(lo), any(hi), any(procs), u, k, sum(c0) AS c FROM ("
#define REGROUP_TAIL ") GROUP BY comm, u, k WITH TOTALS ORDER BY c DESC, comm, u, k LIMIT %u"

int ch__offcpu_aggregate(struct store *base, const struct store_sample_filter *f,
			 uint32_t limit, store_stack_count_fn fn, void *arg, uint64_t *total)
{
	struct byte_buf q = { 0 };
	int rc;

	/* A fleet-wide range: the slots' summaries where they are current, raw rows for the rest
	 * (clickhouse_fleet_slots.c). */
	byte_buf_printf(&q, REGROUP_HEAD
			"SELECT comm, min(flo) AS lo, max(fhi) AS hi, uniqHLL12Merge(fst) AS procs,"
			" user_stack AS u, kernel_stack AS k, intDiv(sum(fv), 1000) AS c0");
	if ((rc = ch__fleet_slots_from(&q, base, f, true)) < 0)
		goto cleanup;
	if (!rc) {
		q.len = 0;
		byte_buf_printf(&q, REGROUP_HEAD
				"SELECT comm, min(tgid) AS lo, max(tgid) AS hi,"
				" uniqExact(process) AS procs, user_stack AS u, kernel_stack AS k,"
				" intDiv(sum(blocked_ns), 1000) AS c0");
		ch__range_rows_from(&q, base, f, true);
		if ((rc = ch__filter_conds(&q, f, true)))
			goto cleanup;
	}
	byte_buf_printf(&q, " GROUP BY comm, u, k" REGROUP_TAIL, limit);
	rc = ch__stack_counts(ch__store(base), &q, fn, arg, total);
cleanup:
	byte_buf_free(&q);
	return rc;
}

int ch__wall_aggregate(struct store *base, const struct store_sample_filter *f, uint32_t limit,
		       store_stack_count_fn fn, void *arg, uint64_t *total)
{
	struct byte_buf q = { 0 };
	int rc;

	/* Both halves in nanoseconds (a CPU sample stands for 1e15 / (Hz x rate ppm) ns of its
	 * node, at the node's latest rate; nodes without a known rate add no CPU time), grouped
	 * together, then microseconds rounded down per group. */
	byte_buf_printf(&q, REGROUP_HEAD
		"SELECT comm, min(tgid) AS lo, max(tgid) AS hi, uniqExact(process) AS procs, u, k,"
		" toInt64(sum(ns) / 1000) AS c0 FROM"
		" (SELECT comm, tgid, process, u, k, count * 1e15 / (hz * ppm) AS ns FROM"
		"  (SELECT comm, tgid, process, node_id, user_stack AS u, kernel_stack AS k, count"
		"   FROM samples");
	join_comms(&q, f);
	range_where(&q, f);
	if ((rc = ch__filter_conds(&q, f, true)))
		goto cleanup;
	/* The node's latest rate: its latest batch, which is one received since the range's
	 * first day when the node has samples in the range. */
	byte_buf_printf(&q, "  ) ANY INNER JOIN"
		"  (SELECT node_id, toUInt64(argMax(sample_hz, received_ns)) AS hz,"
		"   toUInt64(argMax(sample_rate_ppm, received_ns)) AS ppm FROM batches WHERE ");
	ch__received_since_sql(&q, f->from_ms);
	byte_buf_printf(&q, " GROUP BY node_id) USING node_id WHERE hz > 0 AND ppm > 0"
		"  UNION ALL"
		"  SELECT comm, tgid, process, user_stack AS u, kernel_stack AS k,"
		"  toFloat64(blocked_ns) AS ns FROM offcpu");
	join_comms(&q, f);
	range_where(&q, f);
	if ((rc = ch__filter_conds(&q, f, true)))
		goto cleanup;
	byte_buf_printf(&q, ") GROUP BY comm, u, k" REGROUP_TAIL, limit);
	rc = ch__stack_counts(ch__store(base), &q, fn, arg, total);
cleanup:
	byte_buf_free(&q);
	return rc;
}
