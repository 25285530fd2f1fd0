/* SPDX-License-Identifier: Apache-2.0 */
/* Reading a job's OS signal rows from SQLite: threads, CPUs and IRQs of its nodes. */
#include "server/store/sqlite_internal.h"

#define OS_JOB_NODES                                                                        \
	" IN (SELECT DISTINCT j.node FROM job_ranks j WHERE j.job = ?1"                       \
	" AND (?2 IS NULL OR j.rank = ?2))"

static int os_thread_row(void *arg, sqlite3_stmt *st)
{
	const struct store_os_visitor *v = arg;
	struct store_os_thread_row r = {
		.who = store__owner(st),
		.tid = (uint32_t)sqlite3_column_int64(st, 4),
		.comm = store__text(st, 5),
		.oncpu_ns = (uint64_t)sqlite3_column_int64(st, 6),
		.runq_wait_ns = (uint64_t)sqlite3_column_int64(st, 7),
		.runq_waits = (uint64_t)sqlite3_column_int64(st, 8),
		.voluntary_switches = (uint64_t)sqlite3_column_int64(st, 10),
		.involuntary_switches = (uint64_t)sqlite3_column_int64(st, 11),
		.migrations = (uint64_t)sqlite3_column_int64(st, 12),
		.numa_migrations = (uint64_t)sqlite3_column_int64(st, 13),
		.pages_migrated = (uint64_t)sqlite3_column_int64(st, 14),
		.hardirq_ns = (uint64_t)sqlite3_column_int64(st, 15),
		.softirq_ns = (uint64_t)sqlite3_column_int64(st, 16),
	};
	const uint8_t *hist = sqlite3_column_blob(st, 9);

	if (hist && sqlite3_column_bytes(st, 9) == 4 * SYSOM_RUNQ_HIST_BUCKETS)
		for (int i = 0; i < SYSOM_RUNQ_HIST_BUCKETS; i++)
			r.runq_hist[i] = load_le32(hist + 4 * i);
	store__column_u64_blob(st, 17, r.cpus, SYSOM_CPU_MASK_WORDS);
	return v->thread ? v->thread(v->arg, &r) : 0;
}

static int os_cpu_row(void *arg, sqlite3_stmt *st)
{
	const struct store_os_visitor *v = arg;
	struct store_os_cpu_row r = {
		.hostname = store__text(st, 0),
		.time_ms = sqlite3_column_int64(st, 1),
		.window_ms = sqlite3_column_int64(st, 2),
		.cpu = (uint32_t)sqlite3_column_int64(st, 3),
		.numa_node = sqlite3_column_int(st, 4),
		.busy_ns = (uint64_t)sqlite3_column_int64(st, 5),
		.hardirq_count = (uint64_t)sqlite3_column_int64(st, 6),
		.hardirq_ns = (uint64_t)sqlite3_column_int64(st, 7),
		.context_switches = (uint64_t)sqlite3_column_int64(st, 10),
		.runq_wait_ns = (uint64_t)sqlite3_column_int64(st, 11),
	};

	store__column_u64_blob(st, 8, r.softirq_count, SYSOM_SOFTIRQ_COUNT);
	store__column_u64_blob(st, 9, r.softirq_ns, SYSOM_SOFTIRQ_COUNT);
	return v->cpu ? v->cpu(v->arg, &r) : 0;
}

static int os_irq_row(void *arg, sqlite3_stmt *st)
{
	const struct store_os_visitor *v = arg;
	struct store_os_irq_row r = {
		.hostname = store__text(st, 0),
		.cpu = (uint32_t)sqlite3_column_int64(st, 1),
		.irq = (uint32_t)sqlite3_column_int64(st, 2),
		.name = store__text(st, 3),
		.count = (uint64_t)sqlite3_column_int64(st, 4),
		.ns = (uint64_t)sqlite3_column_int64(st, 5),
	};

	return v->irq ? v->irq(v->arg, &r) : 0;
}

int store__sqlite_job_os(struct store *base, const struct store_os_filter *f, uint32_t max_rows,
			 const struct store_os_visitor *v, bool *truncated)
{
	static const char threads_sql[] =
		"SELECT " STORE__OWNER_COLUMNS ", g.tid, g.comm, g.oncpu_ns, g.runq_wait_ns,"
		" g.runq_waits, g.runq_hist, g.voluntary_switches, g.involuntary_switches,"
		" g.migrations, g.numa_migrations, g.pages_migrated, g.hardirq_ns, g.softirq_ns,"
		" g.cpus FROM os_threads g" STORE__OWNER_JOIN("g")
		" ORDER BY " STORE__OWNER_ORDER ", g.tid, g.time_ms LIMIT ?5";
	static const char cpus_sql[] =
		"SELECT n.hostname, c.time_ms, c.window_ms, c.cpu, c.numa_node, c.busy_ns,"
		" c.hardirq_count, c.hardirq_ns, c.softirq_count, c.softirq_ns, c.context_switches,"
		" c.runq_wait_ns FROM os_cpus c JOIN nodes n ON n.id = c.node"
		" WHERE c.node" OS_JOB_NODES " AND c.time_ms BETWEEN ?3 AND ?4"
		" ORDER BY c.node, c.cpu, c.time_ms LIMIT ?5";
	static const char irqs_sql[] =
		"SELECT n.hostname, q.cpu, q.irq, q.name, sum(q.count), sum(q.ns) FROM os_irqs q"
		" JOIN nodes n ON n.id = q.node WHERE q.node" OS_JOB_NODES
		" AND q.time_ms BETWEEN ?3 AND ?4 GROUP BY q.node, q.cpu, q.irq, q.name"
		" ORDER BY sum(q.ns) DESC, q.node, q.cpu, q.irq LIMIT ?5";
	struct store_gpu_filter g = { .job = f->job, .has_rank = f->has_rank, .rank = f->rank,
				      .from_ms = f->from_ms, .to_ms = f->to_ms };
	struct sqlite_store *s = store__sqlite(base);
	struct conn *c;
	int rc;

	/* One read transaction: the three kinds come from the same snapshot. */
	if ((rc = store__read_begin(s, &c)))
		return rc;
	if ((rc = store__job_rows(c, threads_sql, &g, max_rows, os_thread_row, v, truncated)) ||
	    (rc = store__job_rows(c, cpus_sql, &g, max_rows, os_cpu_row, v, truncated)) ||
	    (rc = store__job_rows(c, irqs_sql, &g, max_rows, os_irq_row, v, truncated)))
		goto cleanup;
cleanup:
	return store__read_end(s, c, rc);
}

struct host_rows {
	store_host_signal_fn fn;
	void *arg;
};

static int host_signal_row(void *arg, sqlite3_stmt *st)
{
	const struct host_rows *h = arg;
	struct store_host_signal_row r = {
		.hostname = store__text(st, 1),
		.time_ms = sqlite3_column_int64(st, 2),
		.window_ms = sqlite3_column_int64(st, 3),
		.signal = (uint16_t)sqlite3_column_int(st, 4),
		.value = sqlite3_column_double(st, 5),
	};
	snprintf(r.node_id, sizeof(r.node_id), "%s", store__text(st, 0));
	return h->fn(h->arg, &r);
}

int store__sqlite_host_signals(struct store *base, const struct store_host_filter *f,
			       uint32_t max_rows, store_host_signal_fn fn, void *arg,
			       bool *truncated)
{
	static const char sql[] =
		"SELECT n.node_id, n.hostname, h.time_ms, h.window_ms, h.signal, h.value"
		" FROM host_signals h JOIN nodes n ON n.id = h.node WHERE h.node" OS_JOB_NODES
		" AND h.time_ms BETWEEN ?3 AND ?4 ORDER BY h.node, h.time_ms, h.signal LIMIT ?5";
	struct store_gpu_filter g = { .job = f->job, .from_ms = f->from_ms, .to_ms = f->to_ms };
	struct host_rows h = { fn, arg };
	struct sqlite_store *s = store__sqlite(base);
	struct conn *c;
	int rc;

	if ((rc = store__read_begin(s, &c)))
		return rc;
	rc = store__job_rows(c, sql, &g, max_rows, host_signal_row, &h, truncated);
	return store__read_end(s, c, rc);
}
