/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading a job's GPU-side timing rows (kernels, NCCL profiles and links) and OS rows
 * (threads, CPUs and IRQs of its nodes) from ClickHouse, as sqlite_read_gpu.c and
 * sqlite_read_os.c do: the same rows (one per stored batch, IRQs summed), the same order,
 * at most max_rows of each kind with *truncated when a kind had more. Owners are the merged
 * job ranks (clickhouse_read_collectives.c). SQLite orders nodes by their row id (first
 * stored); here by the first receive time of their batches, then node id. SQLite keeps
 * 64-bit ids (streams, communicator ids) as signed integers: they sort as such here too.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/clickhouse_internal.h"

/* Nodes' current hostname and first receive time, to join USING node. */
/* " ANY LEFT JOIN <the job's nodes' current hostnames and first batch> USING node": all
 * their committed batches, read through the primary key's node prefix. */
static void join_node_names(struct byte_buf *q, const char *job)
{
	byte_buf_printf(q, " ANY LEFT JOIN (SELECT node_id AS node, argMax(hostname, received_ns)"
			   " AS hostname, min(received_ns) AS node_first FROM batches WHERE ");
	ch__committed_job_sql(q, job, CH_ALL_TIME);
	byte_buf_printf(q, " AND node_id IN ");
	ch__job_node_ids_sql(q, job);
	byte_buf_printf(q, " GROUP BY node_id) USING node");
}

/* " AND <committed>" for a job's rows timed in [from_ms, to_ms] (their own days). */
static void job_range_committed(struct byte_buf *q, const char *job, int64_t from_ms,
				int64_t to_ms)
{
	ch__own_days_sql(q, from_ms, to_ms);
	byte_buf_printf(q, " AND ");
	ch__committed_job_sql(q, job, from_ms);
}

/* Owner columns of the rows below, in store_gpu_owner order, and their order. */
#define OWNER_COLUMNS "r, pid, st, hostname"
#define OWNER_ORDER "r < 0, r, pid, st"

/* Appends "FROM (SELECT <cols> FROM table JOIN the job's processes ... ) JOIN NODE_NAMES". */
static void job_from(struct byte_buf *q, const char *table, const char *cols,
		     const struct store_gpu_filter *f)
{
	byte_buf_printf(q, " FROM (SELECT r, pid, st, node, time_ms, %s FROM %s ALL INNER JOIN"
			   " (SELECT process, r, pid, st, node FROM ", cols, table);
	ch__job_ranks_sql(q, f->job);
	if (f->has_rank)
		byte_buf_printf(q, " WHERE r = %" PRId32, f->rank);
	byte_buf_printf(q, ") USING process WHERE time_ms BETWEEN %" PRId64 " AND %" PRId64,
			f->from_ms, f->to_ms);
	job_range_committed(q, f->job, f->from_ms, f->to_ms);
	byte_buf_printf(q, ")");
	join_node_names(q, f->job);
}

/* The nodes of the job's (selected) ranks, as a subquery of node ids. */
static void job_nodes(struct byte_buf *q, const struct store_gpu_filter *f)
{
	byte_buf_printf(q, "(SELECT node FROM ");
	ch__job_ranks_sql(q, f->job);
	if (f->has_rank)
		byte_buf_printf(q, " WHERE r = %" PRId32, f->rank);
	byte_buf_printf(q, ")");
}

/* One kind's rows: at most max rows to `row`, the one more sets *truncated. */
struct rows {
	ch_row_fn row;
	const void *v;
	uint32_t max, n;
	bool *truncated;
};

static int rows_row(void *ctx, char **f)
{
	struct rows *r = ctx;

	if (r->n++ >= r->max) {
		*r->truncated = true;
		return 0;
	}
	return r->row((void *)r->v, f);
}

static int rows_run(struct ch_store *s, struct byte_buf *q, unsigned nfields, ch_row_fn row,
		    const void *v, uint32_t max_rows, bool *truncated)
{
	struct rows r = { .row = row, .v = v, .max = max_rows, .truncated = truncated };

	byte_buf_printf(q, " LIMIT %" PRIu64, (uint64_t)max_rows + 1);
	return ch__select_run(s, q, nfields, rows_row, &r, NULL);
}

static int i32_field(const char *f, int32_t *out)
{
	int64_t v;

	if (ch_tsv_i64(f, &v) || v < INT32_MIN || v > INT32_MAX)
		return -EPROTO;
	*out = (int32_t)v;
	return 0;
}

/* A Float64 as ClickHouse writes it: a number, nan, inf or -inf. */
static int f64_field(const char *f, double *out)
{
	char *end;

	if (!f || !*f)
		return -EPROTO;
	if (!strcmp(f, "nan") || !strcmp(f, "-nan")) {
		*out = NAN;
		return 0;
	}
	*out = strtod(f, &end);
	return *end ? -EPROTO : 0;
}

/* Fields f[0..n-1] as unsigned 64-bit numbers. */
static int u64_fields(char **f, uint64_t *const *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (ch_tsv_u64(f[i], out[i]))
			return -EPROTO;
	return 0;
}

static int owner(char **f, struct store_gpu_owner *w)
{
	if (i32_field(f[0], &w->job_rank) || ch_tsv_u32(f[1], &w->pid) ||
	    ch_tsv_u64(f[2], &w->start_time_ns))
		return -EPROTO;
	w->hostname = f[3] ? f[3] : "";
	return 0;
}

/* ---- GPU ------------------------------------------------------------------------------------ */

static int kernel_row(void *ctx, char **f)
{
	const struct store_gpu_visitor *v = ctx;
	struct store_gpu_kernel_row r = { .name = f[4] };

	if (owner(f, &r.who) || !f[4] || ch_tsv_u32(f[5], &r.device) ||
	    u64_fields(f + 6, (uint64_t *const[]){ &r.stream, &r.count, &r.total_ns, &r.min_ns,
						  &r.max_ns }, 5))
		return -EPROTO;
	for (int i = 0; i < SYSOM_GPU_HIST_BUCKETS; i++)
		if (ch_tsv_u32(f[11 + i], &r.hist[i]))
			return -EPROTO;
	return v->kernel ? v->kernel(v->arg, &r) : 0;
}

static int profile_row(void *ctx, char **f)
{
	const struct store_gpu_visitor *v = ctx;
	struct store_nccl_profile_row r = { .comm_name = f[5], .func = f[8], .algo = f[9],
					    .proto = f[10], .datatype = f[11] };

	if (owner(f, &r.who) || ch_tsv_u64(f[4], &r.comm_id) || !f[5] ||
	    i32_field(f[6], &r.rank) || i32_field(f[7], &r.nranks) || !f[8] || !f[9] || !f[10] ||
	    !f[11] || i32_field(f[12], &r.peer) || ch_tsv_u32(f[13], &r.nchannels) ||
	    u64_fields(f + 14, (uint64_t *const[]){ &r.count, &r.bytes, &r.kernel_timed,
						   &r.kernel_ns_total, &r.kernel_ns_min,
						   &r.kernel_ns_max, &r.span_timed,
						   &r.span_ns_total, &r.enqueue_ns_total,
						   &r.transfers, &r.transfer_bytes, &r.first_seq,
						   &r.last_seq }, 13))
		return -EPROTO;
	return v->profile ? v->profile(v->arg, &r) : 0;
}

static int link_row(void *ctx, char **f)
{
	const struct store_gpu_visitor *v = ctx;
	struct store_nccl_link_row r = { 0 };

	if (owner(f, &r.who) || ch_tsv_u64(f[4], &r.comm_id) || i32_field(f[5], &r.rank) ||
	    i32_field(f[6], &r.peer) || i32_field(f[7], &r.channel) ||
	    u64_fields(f + 8, (uint64_t *const[]){ &r.transfers, &r.bytes, &r.time_ns_total }, 3) ||
	    f64_field(f[11], &r.sx) || f64_field(f[12], &r.sy) || f64_field(f[13], &r.sxx) ||
	    f64_field(f[14], &r.sxy) || f64_field(f[15], &r.syy) ||
	    f64_field(f[16], &r.min_latency_ns) || f64_field(f[17], &r.min_bytes_per_ns) ||
	    f64_field(f[18], &r.min_r2) || ch_tsv_u32(f[19], &r.min_points))
		return -EPROTO;
	return v->link ? v->link(v->arg, &r) : 0;
}

/* "hist[1], ..., hist[n]" (ClickHouse arrays count from 1). */
static void elements(struct byte_buf *q, const char *array, int n)
{
	for (int i = 1; i <= n; i++)
		byte_buf_printf(q, ", %s[%d]", array, i);
}

int ch__job_gpu(struct store *base, const struct store_gpu_filter *f, uint32_t max_rows,
		const struct store_gpu_visitor *v, bool *truncated)
{
	struct ch_store *s = ch__store(base);
	struct byte_buf q = { 0 };
	int rc = 0;

	/* A kind without a callback is not read (a caller of kernels alone pays for no more). */
	if (v->kernel) {
		byte_buf_printf(&q, "SELECT " OWNER_COLUMNS ", name, device, stream, count, total_ns,"
				    " min_ns, max_ns");
		elements(&q, "hist", SYSOM_GPU_HIST_BUCKETS);
		job_from(&q, "gpu_kernels",
			 "name, device, stream, count, total_ns, min_ns, max_ns, hist", f);
		byte_buf_printf(&q, " ORDER BY " OWNER_ORDER ", name, device, toInt64(stream),"
				    " time_ms");
		if ((rc = rows_run(s, &q, 11 + SYSOM_GPU_HIST_BUCKETS, kernel_row, v, max_rows,
				   truncated)))
			goto cleanup;
	}
	if (v->profile) {
		q.len = 0;
		byte_buf_printf(&q, "SELECT " OWNER_COLUMNS ", comm_id, comm_name, rank, nranks, func,"
				    " algo, proto, datatype, peer, nchannels, count, bytes, kernel_timed,"
				    " kernel_ns_total, kernel_ns_min, kernel_ns_max, span_timed,"
				    " span_ns_total, enqueue_ns_total, transfers, transfer_bytes,"
				    " first_seq, last_seq");
		job_from(&q, "nccl_profiles", "comm_id, comm_name, rank, nranks, func, algo, proto,"
			 " datatype, peer, nchannels, count, bytes, kernel_timed, kernel_ns_total,"
			 " kernel_ns_min, kernel_ns_max, span_timed, span_ns_total, enqueue_ns_total,"
			 " transfers, transfer_bytes, first_seq, last_seq", f);
		byte_buf_printf(&q, " ORDER BY " OWNER_ORDER ", toInt64(comm_id), func, algo, proto,"
				    " datatype, peer, time_ms");
		if ((rc = rows_run(s, &q, 27, profile_row, v, max_rows, truncated)))
			goto cleanup;
	}
	if (v->link) {
		q.len = 0;
		byte_buf_printf(&q, "SELECT " OWNER_COLUMNS ", comm_id, rank, peer, channel, transfers,"
				    " bytes, time_ns_total, sx, sy, sxx, sxy, syy, min_latency_ns,"
				    " min_bytes_per_ns, min_r2, min_points");
		job_from(&q, "nccl_links", "comm_id, rank, peer, channel, transfers, bytes,"
			 " time_ns_total, sx, sy, sxx, sxy, syy, min_latency_ns, min_bytes_per_ns,"
			 " min_r2, min_points", f);
		byte_buf_printf(&q, " ORDER BY " OWNER_ORDER ", toInt64(comm_id), peer, channel,"
				    " time_ms");
		rc = rows_run(s, &q, 20, link_row, v, max_rows, truncated);
	}
cleanup:
	byte_buf_free(&q);
	return rc;
}

/* ---- OS ------------------------------------------------------------------------------------- */

static int thread_row(void *ctx, char **f)
{
	const struct store_os_visitor *v = ctx;
	struct store_os_thread_row r = { .comm = f[5] };
	const unsigned hist = 9, sums = hist + SYSOM_RUNQ_HIST_BUCKETS;
	const unsigned cpus = sums + 7;

	if (owner(f, &r.who) || ch_tsv_u32(f[4], &r.tid) || !f[5] ||
	    u64_fields(f + 6, (uint64_t *const[]){ &r.oncpu_ns, &r.runq_wait_ns, &r.runq_waits },
		       3) ||
	    u64_fields(f + sums, (uint64_t *const[]){ &r.voluntary_switches,
						     &r.involuntary_switches, &r.migrations,
						     &r.numa_migrations, &r.pages_migrated,
						     &r.hardirq_ns, &r.softirq_ns }, 7))
		return -EPROTO;
	for (unsigned i = 0; i < SYSOM_RUNQ_HIST_BUCKETS; i++)
		if (ch_tsv_u32(f[hist + i], &r.runq_hist[i]))
			return -EPROTO;
	for (unsigned i = 0; i < SYSOM_CPU_MASK_WORDS; i++)
		if (ch_tsv_u64(f[cpus + i], &r.cpus[i]))
			return -EPROTO;
	return v->thread ? v->thread(v->arg, &r) : 0;
}

static int cpu_row(void *ctx, char **f)
{
	const struct store_os_visitor *v = ctx;
	struct store_os_cpu_row r = { .hostname = f[0] ? f[0] : "" };
	const unsigned counts = 8, nss = counts + SYSOM_SOFTIRQ_COUNT, tail = nss + SYSOM_SOFTIRQ_COUNT;

	if (ch_tsv_i64(f[1], &r.time_ms) || ch_tsv_i64(f[2], &r.window_ms) ||
	    ch_tsv_u32(f[3], &r.cpu) || i32_field(f[4], &r.numa_node) ||
	    u64_fields(f + 5, (uint64_t *const[]){ &r.busy_ns, &r.hardirq_count, &r.hardirq_ns },
		       3) ||
	    u64_fields(f + tail, (uint64_t *const[]){ &r.context_switches, &r.runq_wait_ns }, 2))
		return -EPROTO;
	for (unsigned i = 0; i < SYSOM_SOFTIRQ_COUNT; i++)
		if (ch_tsv_u64(f[counts + i], &r.softirq_count[i]) ||
		    ch_tsv_u64(f[nss + i], &r.softirq_ns[i]))
			return -EPROTO;
	return v->cpu ? v->cpu(v->arg, &r) : 0;
}

static int irq_row(void *ctx, char **f)
{
	const struct store_os_visitor *v = ctx;
	struct store_os_irq_row r = { .hostname = f[0] ? f[0] : "", .name = f[3] };

	if (ch_tsv_u32(f[1], &r.cpu) || ch_tsv_u32(f[2], &r.irq) || !f[3] ||
	    ch_tsv_u64(f[4], &r.count) || ch_tsv_u64(f[5], &r.ns))
		return -EPROTO;
	return v->irq ? v->irq(v->arg, &r) : 0;
}

int ch__job_os(struct store *base, const struct store_os_filter *of, uint32_t max_rows,
	       const struct store_os_visitor *v, bool *truncated)
{
	struct store_gpu_filter f = { .job = of->job, .has_rank = of->has_rank, .rank = of->rank,
				      .from_ms = of->from_ms, .to_ms = of->to_ms };
	struct ch_store *s = ch__store(base);
	struct byte_buf q = { 0 };
	int rc;

	byte_buf_printf(&q, "SELECT " OWNER_COLUMNS ", tid, comm, oncpu_ns, runq_wait_ns,"
			    " runq_waits");
	elements(&q, "runq_hist", SYSOM_RUNQ_HIST_BUCKETS);
	byte_buf_printf(&q, ", voluntary_switches, involuntary_switches, migrations,"
			    " numa_migrations, pages_migrated, hardirq_ns, softirq_ns");
	elements(&q, "cpus", SYSOM_CPU_MASK_WORDS);
	job_from(&q, "os_threads", "tid, comm, oncpu_ns, runq_wait_ns, runq_waits, runq_hist,"
		 " voluntary_switches, involuntary_switches, migrations, numa_migrations,"
		 " pages_migrated, hardirq_ns, softirq_ns, cpus", &f);
	byte_buf_printf(&q, " ORDER BY " OWNER_ORDER ", tid, time_ms");
	if ((rc = rows_run(s, &q, 16 + SYSOM_RUNQ_HIST_BUCKETS + SYSOM_CPU_MASK_WORDS, thread_row,
			   v, max_rows, truncated)))
		goto cleanup;
	q.len = 0;
	byte_buf_printf(&q, "SELECT hostname, time_ms, window_ms, cpu, numa_node, busy_ns,"
			    " hardirq_count, hardirq_ns");
	elements(&q, "softirq_count", SYSOM_SOFTIRQ_COUNT);
	elements(&q, "softirq_ns", SYSOM_SOFTIRQ_COUNT);
	byte_buf_printf(&q, ", context_switches, runq_wait_ns FROM (SELECT node_id AS node, *"
			    " FROM os_cpus WHERE node_id IN ");
	job_nodes(&q, &f);
	byte_buf_printf(&q, " AND time_ms BETWEEN %" PRId64 " AND %" PRId64, f.from_ms, f.to_ms);
	job_range_committed(&q, f.job, f.from_ms, f.to_ms);
	byte_buf_printf(&q, ")");
	join_node_names(&q, f.job);
	byte_buf_printf(&q, " ORDER BY node_first, node, cpu, time_ms");
	if ((rc = rows_run(s, &q, 10 + 2 * SYSOM_SOFTIRQ_COUNT, cpu_row, v, max_rows, truncated)))
		goto cleanup;
	q.len = 0;
	byte_buf_printf(&q, "SELECT hostname, cpu, irq, name, c, n FROM"
			    " (SELECT node_id AS node, cpu, irq, name, sum(count) AS c, sum(ns) AS n"
			    " FROM os_irqs WHERE node_id IN ");
	job_nodes(&q, &f);
	byte_buf_printf(&q, " AND time_ms BETWEEN %" PRId64 " AND %" PRId64, f.from_ms, f.to_ms);
	job_range_committed(&q, f.job, f.from_ms, f.to_ms);
	byte_buf_printf(&q, " GROUP BY node, cpu, irq, name)");
	join_node_names(&q, f.job);
	byte_buf_printf(&q, " ORDER BY n DESC, node_first, node, cpu, irq");
	rc = rows_run(s, &q, 6, irq_row, v, max_rows, truncated);
cleanup:
	byte_buf_free(&q);
	return rc;
}
