/* SPDX-License-Identifier: Apache-2.0 */
/* Reading nodes, their counters, and training jobs with their ranks and communicators. */
#include "server/store/sqlite_internal.h"

static const char nodes_list_sql[] =
	"SELECT node_id, hostname, kernel_release, machine, agent_version, boot_id,"
	" sample_hz, sample_rate_ppm, online_cpus, first_seen_ns, last_seen_ns,"
	" batches, last_epoch, last_sequence FROM nodes ORDER BY hostname, node_id";
static const char counters_list_sql[] =
	"SELECT n.node_id, n.hostname, c.counter, c.total FROM node_counters c"
	" JOIN nodes n ON n.id = c.node ORDER BY c.counter, n.node_id";
static const char jobs_list_sql[] =
	"SELECT job, max(world_size), count(DISTINCT iif(rank >= 0, rank, NULL)),"
	" count(*), count(DISTINCT node), min(first_seen_ns),"
	" max(last_seen_ns) AS last FROM job_ranks WHERE job != ''"
	" GROUP BY job ORDER BY last DESC, job LIMIT ?1";
static const char job_ranks_list_sql[] =
	"SELECT j.rank, j.world_size, j.local_rank, j.local_world_size,"
	" j.group_rank, j.source, n.node_id, n.hostname, p.tgid, p.generation,"
	" p.start_time_ns, p.comm, j.job_id_source, j.master, j.groups,"
	" j.first_seen_ns, j.last_seen_ns, j.role, j.rank_pid, j.gpu_device, "
	STORE__IDENTITY_COLUMNS " FROM job_ranks j"
	" JOIN processes p ON p.id = j.process JOIN nodes n ON n.id = j.node"
	" LEFT JOIN process_identities i ON i.process = j.process"
	" WHERE j.job = ?1 ORDER BY j.rank < 0, j.rank, n.node_id, p.tgid,"
	" p.start_time_ns LIMIT ?2";
static const char job_communicators_list_sql[] =
	"SELECT m.key, m.parent_key, m.comm_hash, m.rank, m.nranks,"
	" m.split_color, m.split_key, m.split_ordinal, m.key_source, m.destroyed,"
	" m.created_ns, n.node_id, n.hostname, p.tgid, j.rank, m.first_seen_ns,"
	" m.last_seen_ns FROM job_ranks j"
	" JOIN communicators m ON m.process = j.process"
	" JOIN processes p ON p.id = j.process JOIN nodes n ON n.id = m.node"
	" WHERE j.job = ?1 ORDER BY m.key, m.rank < 0, m.rank, n.node_id, p.tgid"
	" LIMIT ?2";

void store__identity_read(sqlite3_stmt *st, int col, struct store_identity *id)
{
	memset(id, 0, sizeof(*id));
	if (sqlite3_column_type(st, col) == SQLITE_NULL)
		return;
	id->known = true;
	id->runtime = store__text(st, col + 1);
	id->container_id = store__text(st, col + 2);
	id->pod_uid = store__text(st, col + 3);
	id->pod_namespace = store__text(st, col + 4);
	id->pod_name = store__text(st, col + 5);
	id->container_name = store__text(st, col + 6);
	id->slurm_job = store__u64(sqlite3_column_int64(st, col + 7));
	id->slurm_step = store__text(st, col + 8);
	id->unit = store__text(st, col + 9);
}

/* The caller's callback of a listing. */
struct visit {
	union {
		store_node_fn node;
		store_counter_fn counter;
		store_job_fn job;
		store_job_rank_fn rank;
		store_job_communicator_fn communicator;
	} fn;
	void *arg;
};

static int node_row(void *ctx, sqlite3_stmt *st)
{
	const struct visit *v = ctx;
	struct store_node n = {
		.hostname = store__text(st, 1),
		.kernel_release = store__text(st, 2),
		.machine = store__text(st, 3),
		.agent_version = store__text(st, 4),
		.sample_hz = (uint32_t)sqlite3_column_int64(st, 6),
		.sample_rate_ppm = (uint32_t)sqlite3_column_int64(st, 7),
		.online_cpus = (uint32_t)sqlite3_column_int64(st, 8),
		.first_seen_ns = sqlite3_column_int64(st, 9),
		.last_seen_ns = sqlite3_column_int64(st, 10),
		.batches = (uint64_t)sqlite3_column_int64(st, 11),
		.last_epoch = store__u64(sqlite3_column_int64(st, 12)),
		.last_sequence = store__u64(sqlite3_column_int64(st, 13)),
	};

	store__text_copy(st, 0, n.node_id, sizeof(n.node_id));
	store__text_copy(st, 5, n.boot_id, sizeof(n.boot_id));
	return v->fn.node(v->arg, &n);
}

int store__sqlite_nodes_list(struct store *base, store_node_fn fn, void *arg)
{
	struct visit v = { .fn.node = fn, .arg = arg };

	return store__read(store__sqlite(base), &(struct store__query){
		.sql = nodes_list_sql, .row = node_row, .ctx = &v });
}

static int counter_row(void *ctx, sqlite3_stmt *st)
{
	const struct visit *v = ctx;
	struct store_counter_total t = {
		.hostname = store__text(st, 1),
		.counter = (uint16_t)sqlite3_column_int(st, 2),
		.total = (uint64_t)sqlite3_column_int64(st, 3),
	};

	store__text_copy(st, 0, t.node_id, sizeof(t.node_id));
	return v->fn.counter(v->arg, &t);
}

int store__sqlite_counters_list(struct store *base, store_counter_fn fn, void *arg)
{
	struct visit v = { .fn.counter = fn, .arg = arg };

	return store__read(store__sqlite(base), &(struct store__query){
		.sql = counters_list_sql, .row = counter_row, .ctx = &v });
}

static int job_row(void *ctx, sqlite3_stmt *st)
{
	const struct visit *v = ctx;
	struct store_job j = {
		.job = store__text(st, 0),
		.world_size = sqlite3_column_int(st, 1),
		.ranks = (uint32_t)sqlite3_column_int64(st, 2),
		.processes = (uint32_t)sqlite3_column_int64(st, 3),
		.nodes = (uint32_t)sqlite3_column_int64(st, 4),
		.first_seen_ns = sqlite3_column_int64(st, 5),
		.last_seen_ns = sqlite3_column_int64(st, 6),
	};

	return v->fn.job(v->arg, &j);
}

int store__sqlite_jobs_list_identity(struct store *base, const struct store_sample_filter *f,
				     uint32_t limit, store_job_fn fn, void *arg)
{
	struct visit v = { .fn.job = fn, .arg = arg };
	struct byte_buf sql = { 0 };
	int rc;

	byte_buf_printf(&sql, "SELECT job, max(world_size), count(DISTINCT iif(rank >= 0, rank, NULL)),"
			      " count(*), count(DISTINCT node), min(first_seen_ns),"
			      " max(last_seen_ns) AS last FROM job_ranks WHERE job != ''"
			      " AND job IN (SELECT j.job FROM job_ranks j JOIN process_identities i"
			      " ON i.process = j.process WHERE 1");
	if (f->pod_namespace)
		byte_buf_printf(&sql, " AND i.namespace = ?2");
	if (f->pod)
		byte_buf_printf(&sql, " AND (i.pod_name = ?3 OR i.pod_uid = lower(?3))");
	if (f->container)
		byte_buf_printf(&sql, " AND (i.container_name = ?4 OR (length(?4) >= 12 AND"
				      " substr(i.container_id, 1, length(?4)) = lower(?4)))");
	if (f->unit)
		byte_buf_printf(&sql, " AND i.unit = ?5");
	if (f->has_slurm_job)
		byte_buf_printf(&sql, " AND i.slurm_job = ?6");
	byte_buf_printf(&sql, ") GROUP BY job ORDER BY last DESC, job LIMIT ?1");
	if ((rc = store__sql_end(&sql)))
		goto cleanup;
	rc = store__read(store__sqlite(base), &(struct store__query){
		.sql = (const char *)sql.data, .once = true,
		.args = STORE__ARGS(STORE__INT(limit),
				    f->pod_namespace ? STORE__TEXT(f->pod_namespace) : STORE__SKIP,
				    f->pod ? STORE__TEXT(f->pod) : STORE__SKIP,
				    f->container ? STORE__TEXT(f->container) : STORE__SKIP,
				    f->unit ? STORE__TEXT(f->unit) : STORE__SKIP,
				    f->has_slurm_job ? STORE__INT(store__clamp(f->slurm_job))
						     : STORE__SKIP),
		.row = job_row, .ctx = &v });
cleanup:
	byte_buf_free(&sql);
	return rc;
}

int store__sqlite_jobs_list(struct store *base, uint32_t limit, store_job_fn fn, void *arg)
{
	struct visit v = { .fn.job = fn, .arg = arg };

	return store__read(store__sqlite(base), &(struct store__query){
		.sql = jobs_list_sql, .args = STORE__ARGS(STORE__INT(limit)), .row = job_row,
		.ctx = &v });
}

static int job_rank_row(void *ctx, sqlite3_stmt *st)
{
	const struct visit *v = ctx;
	struct store_job_rank r = {
		.rank = sqlite3_column_int(st, 0),
		.world_size = sqlite3_column_int(st, 1),
		.local_rank = sqlite3_column_int(st, 2),
		.local_world_size = sqlite3_column_int(st, 3),
		.group_rank = sqlite3_column_int(st, 4),
		.source = (uint8_t)sqlite3_column_int(st, 5),
		.hostname = store__text(st, 7),
		.pid = (uint32_t)sqlite3_column_int64(st, 8),
		.generation = (uint32_t)sqlite3_column_int64(st, 9),
		.start_time_ns = store__u64(sqlite3_column_int64(st, 10)),
		.comm = store__text(st, 11),
		.job_id_source = store__text(st, 12),
		.master = store__text(st, 13),
		.groups = store__text(st, 14),
		.first_seen_ns = sqlite3_column_int64(st, 15),
		.last_seen_ns = sqlite3_column_int64(st, 16),
	};

	store__text_copy(st, 6, r.node_id, sizeof(r.node_id));
	r.role = (uint8_t)sqlite3_column_int(st, 17);
	r.rank_pid = (uint32_t)sqlite3_column_int64(st, 18);
	r.gpu_device = sqlite3_column_int(st, 19);
	if (r.gpu_device < -1 || r.gpu_device >= SYSOM_GPU_MAX_DEVICES)
		r.gpu_device = -1;
	store__identity_read(st, 20, &r.identity);
	return v->fn.rank(v->arg, &r);
}

int store__sqlite_job_ranks_list(struct store *base, const char *job, uint32_t limit,
				 store_job_rank_fn fn, void *arg)
{
	struct visit v = { .fn.rank = fn, .arg = arg };

	return store__read(store__sqlite(base), &(struct store__query){
		.sql = job_ranks_list_sql, .args = STORE__ARGS(STORE__TEXT(job), STORE__INT(limit)),
		.row = job_rank_row, .ctx = &v });
}

static int job_communicator_row(void *ctx, sqlite3_stmt *st)
{
	const struct visit *v = ctx;
	struct store_job_communicator m = {
		.key = store__u64(sqlite3_column_int64(st, 0)),
		.parent_key = store__u64(sqlite3_column_int64(st, 1)),
		.comm_hash = store__u64(sqlite3_column_int64(st, 2)),
		.rank = sqlite3_column_int(st, 3),
		.nranks = sqlite3_column_int(st, 4),
		.split_color = sqlite3_column_int(st, 5),
		.split_key = sqlite3_column_int(st, 6),
		.split_ordinal = (uint32_t)sqlite3_column_int64(st, 7),
		.key_source = (uint8_t)sqlite3_column_int(st, 8),
		.destroyed = sqlite3_column_int(st, 9) != 0,
		.created_ns = sqlite3_column_int64(st, 10),
		.hostname = store__text(st, 12),
		.pid = (uint32_t)sqlite3_column_int64(st, 13),
		.job_rank = sqlite3_column_int(st, 14),
		.first_seen_ns = sqlite3_column_int64(st, 15),
		.last_seen_ns = sqlite3_column_int64(st, 16),
	};

	store__text_copy(st, 11, m.node_id, sizeof(m.node_id));
	return v->fn.communicator(v->arg, &m);
}

int store__sqlite_job_communicators_list(struct store *base, const char *job, uint32_t limit,
					 store_job_communicator_fn fn, void *arg)
{
	struct visit v = { .fn.communicator = fn, .arg = arg };

	return store__read(store__sqlite(base), &(struct store__query){
		.sql = job_communicators_list_sql,
		.args = STORE__ARGS(STORE__TEXT(job), STORE__INT(limit)),
		.row = job_communicator_row, .ctx = &v });
}
