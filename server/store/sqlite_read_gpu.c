/* SPDX-License-Identifier: Apache-2.0 */
/* Reading a job's GPU-side timing rows from SQLite: kernels, NCCL profiles and links. */
#include <math.h>

#include "server/store/sqlite_internal.h"

struct store_gpu_owner store__owner(sqlite3_stmt *st)
{
	return (struct store_gpu_owner){
		.job_rank = sqlite3_column_int(st, 0),
		.pid = (uint32_t)sqlite3_column_int64(st, 1),
		.start_time_ns = store__u64(sqlite3_column_int64(st, 2)),
		.hostname = store__text(st, 3),
	};
}

/* With max_rows 0 any row means truncation. */
static int truncate_row(void *ctx, sqlite3_stmt *st)
{
	(void)st;
	*(bool *)ctx = true;
	return 1;
}

int store__job_rows(struct conn *c, const char *sql, const struct store_gpu_filter *f,
		    uint32_t max_rows, store__row_fn row, const void *v, bool *truncated)
{
	const struct store__arg args[] = {
		STORE__TEXT(f->job),
		f->has_rank ? STORE__INT(f->rank) : STORE__SKIP,
		STORE__INT(f->from_ms),
		STORE__INT(f->to_ms),
		STORE__INT((sqlite3_int64)max_rows + 1),
	};
	int rc;

	if (!max_rows) {
		rc = store__query(c, &(struct store__query){ .sql = sql, .args = args, .nargs = 5,
							      .row = truncate_row, .ctx = truncated });
		return rc == 1 ? 0 : rc;
	}
	return store__query(c, &(struct store__query){ .sql = sql, .args = args, .nargs = 5,
							.row = row, .ctx = (void *)v,
							.max_rows = max_rows, .truncated = truncated });
}

static double column_real_or_nan(sqlite3_stmt *st, int i)
{
	return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

static int gpu_kernel_row(void *arg, sqlite3_stmt *st)
{
	const struct store_gpu_visitor *v = arg;
	struct store_gpu_kernel_row r = {
		.who = store__owner(st),
		.name = store__text(st, 4),
		.device = (uint32_t)sqlite3_column_int64(st, 5),
		.stream = store__u64(sqlite3_column_int64(st, 6)),
		.count = (uint64_t)sqlite3_column_int64(st, 7),
		.total_ns = (uint64_t)sqlite3_column_int64(st, 8),
		.min_ns = (uint64_t)sqlite3_column_int64(st, 9),
		.max_ns = (uint64_t)sqlite3_column_int64(st, 10),
	};
	const uint8_t *hist = sqlite3_column_blob(st, 11);

	if (hist && sqlite3_column_bytes(st, 11) == 4 * SYSOM_GPU_HIST_BUCKETS)
		for (int i = 0; i < SYSOM_GPU_HIST_BUCKETS; i++)
			r.hist[i] = load_le32(hist + 4 * i);
	return v->kernel ? v->kernel(v->arg, &r) : 0;
}

static int nccl_profile_row(void *arg, sqlite3_stmt *st)
{
	const struct store_gpu_visitor *v = arg;
	struct store_nccl_profile_row r = {
		.who = store__owner(st),
		.comm_id = store__u64(sqlite3_column_int64(st, 4)),
		.comm_name = store__text(st, 5),
		.rank = sqlite3_column_int(st, 6),
		.nranks = sqlite3_column_int(st, 7),
		.func = store__text(st, 8),
		.algo = store__text(st, 9),
		.proto = store__text(st, 10),
		.datatype = store__text(st, 11),
		.peer = sqlite3_column_int(st, 12),
		.nchannels = (uint32_t)sqlite3_column_int64(st, 13),
	};
	uint64_t *sums[] = { &r.count, &r.bytes, &r.kernel_timed, &r.kernel_ns_total,
			     &r.kernel_ns_min, &r.kernel_ns_max, &r.span_timed, &r.span_ns_total,
			     &r.enqueue_ns_total, &r.transfers, &r.transfer_bytes, &r.first_seq,
			     &r.last_seq };

	for (size_t i = 0; i < sizeof(sums) / sizeof(sums[0]); i++)
		*sums[i] = (uint64_t)sqlite3_column_int64(st, 14 + (int)i);
	return v->profile ? v->profile(v->arg, &r) : 0;
}

static int nccl_link_row(void *arg, sqlite3_stmt *st)
{
	const struct store_gpu_visitor *v = arg;
	struct store_nccl_link_row r = {
		.who = store__owner(st),
		.comm_id = store__u64(sqlite3_column_int64(st, 4)),
		.rank = sqlite3_column_int(st, 5),
		.peer = sqlite3_column_int(st, 6),
		.channel = sqlite3_column_int(st, 7),
		.transfers = (uint64_t)sqlite3_column_int64(st, 8),
		.bytes = (uint64_t)sqlite3_column_int64(st, 9),
		.time_ns_total = (uint64_t)sqlite3_column_int64(st, 10),
		.sx = sqlite3_column_double(st, 11),
		.sy = sqlite3_column_double(st, 12),
		.sxx = sqlite3_column_double(st, 13),
		.sxy = sqlite3_column_double(st, 14),
		.syy = sqlite3_column_double(st, 15),
		.min_latency_ns = column_real_or_nan(st, 16),
		.min_bytes_per_ns = column_real_or_nan(st, 17),
		.min_r2 = column_real_or_nan(st, 18),
		.min_points = (uint32_t)sqlite3_column_int64(st, 19),
	};

	return v->link ? v->link(v->arg, &r) : 0;
}

int store__sqlite_job_gpu(struct store *base, const struct store_gpu_filter *f, uint32_t max_rows,
			  const struct store_gpu_visitor *v, bool *truncated)
{
	static const char kernels_sql[] =
		"SELECT " STORE__OWNER_COLUMNS ", g.name, g.device, g.stream, g.count, g.total_ns,"
		" g.min_ns, g.max_ns, g.hist FROM gpu_kernels g" STORE__OWNER_JOIN("g")
		" ORDER BY " STORE__OWNER_ORDER ", g.name, g.device, g.stream, g.time_ms LIMIT ?5";
	static const char profiles_sql[] =
		"SELECT " STORE__OWNER_COLUMNS ", g.comm_id, g.comm_name, g.rank, g.nranks, g.func,"
		" g.algo, g.proto, g.datatype, g.peer, g.nchannels, g.count, g.bytes, g.kernel_timed,"
		" g.kernel_ns_total, g.kernel_ns_min, g.kernel_ns_max, g.span_timed, g.span_ns_total,"
		" g.enqueue_ns_total, g.transfers, g.transfer_bytes, g.first_seq, g.last_seq"
		" FROM nccl_profiles g" STORE__OWNER_JOIN("g")
		" ORDER BY " STORE__OWNER_ORDER ", g.comm_id, g.func, g.algo, g.proto, g.datatype,"
		" g.peer, g.time_ms LIMIT ?5";
	static const char links_sql[] =
		"SELECT " STORE__OWNER_COLUMNS ", g.comm_id, g.rank, g.peer, g.channel, g.transfers,"
		" g.bytes, g.time_ns_total, g.sx, g.sy, g.sxx, g.sxy, g.syy, g.min_latency_ns,"
		" g.min_bytes_per_ns, g.min_r2, g.min_points FROM nccl_links g" STORE__OWNER_JOIN("g")
		" ORDER BY " STORE__OWNER_ORDER ", g.comm_id, g.peer, g.channel, g.time_ms LIMIT ?5";
	struct sqlite_store *s = store__sqlite(base);
	struct conn *c;
	int rc;

	/* One read transaction: the three kinds come from the same snapshot. */
	if ((rc = store__read_begin(s, &c)))
		return rc;
	/* A kind without a callback is not read (a caller of kernels alone pays for no more). */
	if ((v->kernel &&
	     (rc = store__job_rows(c, kernels_sql, f, max_rows, gpu_kernel_row, v, truncated))) ||
	    (v->profile &&
	     (rc = store__job_rows(c, profiles_sql, f, max_rows, nccl_profile_row, v, truncated))) ||
	    (v->link &&
	     (rc = store__job_rows(c, links_sql, f, max_rows, nccl_link_row, v, truncated))))
		goto cleanup;
cleanup:
	return store__read_end(s, c, rc);
}

/* ---- GPU health (wire 1.6) -------------------------------------------------------------------- */

static const char gpu_health_list_sql[] =
	"SELECT n.node_id, n.hostname, g.window_start_ns, g.window_end_ns, g.device, g.uuid,"
	" g.pci_bus_id, g.name, g.samples, g.slowdown_samples, g.reasons_any, g.reasons_last,"
	" g.sm_clock_min, g.sm_clock_last, g.sm_clock_max, g.mem_clock_last, g.mem_clock_max,"
	" g.temp_max, g.temp_last, g.temp_slowdown, g.temp_shutdown, g.power_max_mw,"
	" g.power_last_mw, g.power_limit_mw, g.util_gpu, g.util_mem, g.ecc_corrected,"
	" g.ecc_uncorrected, g.retired_sbe, g.retired_dbe, g.pcie_replays, g.flags,"
	" g.nvlink_errors, g.xid_count, g.xid_last"
	" FROM gpu_health g JOIN nodes n ON n.id = g.node"
	" WHERE (?1 IS NULL OR n.node_id = lower(?1) OR n.hostname = ?1)"
	" AND g.window_end_ns >= ?2 * 1000000 AND g.window_end_ns <= ?3 * 1000000 + 999999"
	" ORDER BY n.hostname, n.node_id, g.device, g.window_end_ns LIMIT ?4";

static uint32_t col_u32(sqlite3_stmt *st, int i)
{
	return sqlite3_column_type(st, i) == SQLITE_NULL ? SYSOM_GPU_UNKNOWN
							 : (uint32_t)sqlite3_column_int64(st, i);
}

static uint64_t col_u64(sqlite3_stmt *st, int i)
{
	return sqlite3_column_type(st, i) == SQLITE_NULL ? SYSOM_GPU_UNKNOWN64
							 : store__u64(sqlite3_column_int64(st, i));
}

struct gpu_health_visit {
	store_gpu_health_fn fn;
	void *arg;
};

static int gpu_health_row(void *ctx, sqlite3_stmt *st)
{
	const struct gpu_health_visit *v = ctx;
	struct store_gpu_health g = {
		.hostname = store__text(st, 1),
		.window_start_ns = sqlite3_column_int64(st, 2),
		.window_end_ns = sqlite3_column_int64(st, 3),
		.uuid = store__text(st, 5),
		.pci_bus_id = store__text(st, 6),
		.name = store__text(st, 7),
	};
	struct sysom_gpu_health *h = &g.h;
	int c = 8;

	store__text_copy(st, 0, g.node_id, sizeof(g.node_id));
	h->device = (uint32_t)sqlite3_column_int64(st, 4);
	h->samples = col_u32(st, c++);
	h->slowdown_samples = col_u32(st, c++);
	h->reasons_any = col_u64(st, c++);
	h->reasons_last = col_u64(st, c++);
	h->sm_clock_min = col_u32(st, c++);
	h->sm_clock_last = col_u32(st, c++);
	h->sm_clock_max = col_u32(st, c++);
	h->mem_clock_last = col_u32(st, c++);
	h->mem_clock_max = col_u32(st, c++);
	h->temp_max = col_u32(st, c++);
	h->temp_last = col_u32(st, c++);
	h->temp_slowdown = col_u32(st, c++);
	h->temp_shutdown = col_u32(st, c++);
	h->power_max_mw = col_u32(st, c++);
	h->power_last_mw = col_u32(st, c++);
	h->power_limit_mw = col_u32(st, c++);
	h->util_gpu = col_u32(st, c++);
	h->util_mem = col_u32(st, c++);
	h->ecc_corrected = col_u64(st, c++);
	h->ecc_uncorrected = col_u64(st, c++);
	h->retired_sbe = col_u32(st, c++);
	h->retired_dbe = col_u32(st, c++);
	h->pcie_replays = col_u32(st, c++);
	h->flags = col_u32(st, c++);
	h->nvlink_errors = col_u64(st, c++);
	h->xid_count = col_u32(st, c++);
	h->xid_last = col_u32(st, c++);
	return v->fn(v->arg, &g);
}

int store__sqlite_gpu_health_list(struct store *base, const char *node, int64_t from_ms,
				  int64_t to_ms, uint32_t limit, store_gpu_health_fn fn, void *arg)
{
	struct gpu_health_visit v = { fn, arg };

	return store__read(store__sqlite(base), &(struct store__query){
		.sql = gpu_health_list_sql,
		.args = STORE__ARGS(node ? STORE__TEXT(node) : STORE__NULL, STORE__INT(from_ms),
				    STORE__INT(to_ms), STORE__INT(limit)),
		.row = gpu_health_row, .ctx = &v });
}
