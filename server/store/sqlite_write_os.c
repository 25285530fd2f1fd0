/* SPDX-License-Identifier: Apache-2.0 */
/* Storing a batch's OS signal rows in SQLite: per-CPU, per-IRQ and per-thread counters. */
#include "server/store/sqlite_internal.h"

static const char os_cpu_insert_sql[] =
	"INSERT INTO os_cpus (time_ms, node, window_ms, cpu, numa_node, busy_ns, hardirq_count,"
	" hardirq_ns, softirq_count, softirq_ns, context_switches, runq_wait_ns)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";
static const char host_signal_insert_sql[] =
	"INSERT INTO host_signals (time_ms, node, window_ms, signal, value)"
	" VALUES (?1, ?2, ?3, ?4, ?5)";
static const char os_irq_insert_sql[] =
	"INSERT INTO os_irqs (time_ms, node, cpu, irq, name, count, ns)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
static const char os_thread_insert_sql[] =
	"INSERT INTO os_threads (time_ms, node, process, tid, comm, oncpu_ns, runq_wait_ns,"
	" runq_waits, runq_hist, voluntary_switches, involuntary_switches, migrations,"
	" numa_migrations, pages_migrated, hardirq_ns, softirq_ns, cpus) VALUES (?1, ?2, ?3,"
	" ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)";

void store__u64_blob(uint8_t *buf, const uint64_t *v, size_t n)
{
	for (size_t i = 0; i < n && i < 16; i++)
		store_le64(buf + 8 * i, v[i]);
}

void store__column_u64_blob(sqlite3_stmt *st, int col, uint64_t *v, size_t n)
{
	const uint8_t *blob = sqlite3_column_blob(st, col);

	if (blob && sqlite3_column_bytes(st, col) == (int)(8 * n))
		for (size_t i = 0; i < n; i++)
			v[i] = load_le64(blob + 8 * i);
}

static int os_cpu_insert(struct conn *c, const struct sysom_batch *b, const struct sysom_os_cpu *o,
			 sqlite3_int64 node)
{
	uint64_t window_ns = b->window_end_ns > b->window_start_ns
				     ? b->window_end_ns - b->window_start_ns : 0;
	uint8_t softirq_count[8 * SYSOM_SOFTIRQ_COUNT], softirq_ns[8 * SYSOM_SOFTIRQ_COUNT];

	store__u64_blob(softirq_count, o->softirq_count, SYSOM_SOFTIRQ_COUNT);
	store__u64_blob(softirq_ns, o->softirq_ns, SYSOM_SOFTIRQ_COUNT);
	return store__query(c, &(struct store__query){
		.sql = os_cpu_insert_sql,
		.args = STORE__ARGS(
			STORE__INT(store__clamp(b->window_end_ns / 1000000)), STORE__INT(node),
			STORE__INT(store__clamp(window_ns / 1000000)), STORE__INT(o->cpu),
			STORE__INT(o->numa_node), STORE__INT(store__clamp(o->busy_ns)),
			STORE__INT(store__clamp(o->hardirq_count)),
			STORE__INT(store__clamp(o->hardirq_ns)),
			STORE__BLOB(softirq_count, sizeof(softirq_count)),
			STORE__BLOB(softirq_ns, sizeof(softirq_ns)),
			STORE__INT(store__clamp(o->context_switches)),
			STORE__INT(store__clamp(o->runq_wait_ns))) });
}

static int os_irq_insert(struct conn *c, const struct sysom_batch *b, const struct sysom_os_irq *q,
			 sqlite3_int64 node)
{
	return store__query(c, &(struct store__query){
		.sql = os_irq_insert_sql,
		.args = STORE__ARGS(STORE__INT(store__clamp(b->window_end_ns / 1000000)),
				    STORE__INT(node), STORE__INT(q->cpu), STORE__INT(q->irq),
				    STORE__TEXT(sysom_batch_string(b, q->name)),
				    STORE__INT(store__clamp(q->count)),
				    STORE__INT(store__clamp(q->ns))) });
}

static int os_thread_insert(struct conn *c, const struct sysom_batch *b,
			    const struct sysom_os_thread *t, const struct store__batch_ids *ids)
{
	uint8_t hist[4 * SYSOM_RUNQ_HIST_BUCKETS], cpus[8 * SYSOM_CPU_MASK_WORDS];

	for (int i = 0; i < SYSOM_RUNQ_HIST_BUCKETS; i++)
		store_le32(hist + 4 * i, t->runq_hist[i]);
	store__u64_blob(cpus, t->cpus, SYSOM_CPU_MASK_WORDS);
	return store__query(c, &(struct store__query){
		.sql = os_thread_insert_sql,
		.args = STORE__ARGS(
			STORE__INT(store__clamp(b->window_end_ns / 1000000)), STORE__INT(ids->node),
			STORE__INT(ids->processes[t->process]), STORE__INT(t->tid),
			STORE__TEXT(sysom_batch_string(b, t->comm)),
			STORE__INT(store__clamp(t->oncpu_ns)),
			STORE__INT(store__clamp(t->runq_wait_ns)),
			STORE__INT(store__clamp(t->runq_waits)), STORE__BLOB(hist, sizeof(hist)),
			STORE__INT(store__clamp(t->voluntary_switches)),
			STORE__INT(store__clamp(t->involuntary_switches)),
			STORE__INT(store__clamp(t->migrations)),
			STORE__INT(store__clamp(t->numa_migrations)),
			STORE__INT(store__clamp(t->pages_migrated)),
			STORE__INT(store__clamp(t->hardirq_ns)),
			STORE__INT(store__clamp(t->softirq_ns)), STORE__BLOB(cpus, sizeof(cpus))) });
}

int store__batch_write_os(struct conn *c, const struct sysom_batch *b,
			  const struct store__batch_ids *ids, struct store_put_result *r)
{
	int rc;

	for (uint32_t i = 0; i < b->os_cpu_count; i++)
		if ((rc = os_cpu_insert(c, b, &b->os_cpus[i], ids->node)))
			return rc;
	r->os_cpu_rows = b->os_cpu_count;
	for (uint32_t i = 0; i < b->os_irq_count; i++)
		if ((rc = os_irq_insert(c, b, &b->os_irqs[i], ids->node)))
			return rc;
	r->os_irq_rows = b->os_irq_count;
	for (uint32_t i = 0; i < b->os_thread_count; i++)
		if ((rc = os_thread_insert(c, b, &b->os_threads[i], ids)))
			return rc;
	r->os_thread_rows = b->os_thread_count;
	for (uint32_t i = 0; i < b->host_signal_count; i++) {
		uint64_t window_ns = b->window_end_ns - b->window_start_ns;
		rc = store__query(c, &(struct store__query){
			.sql = host_signal_insert_sql,
			.args = STORE__ARGS(STORE__INT(store__clamp(b->window_end_ns / 1000000)),
					    STORE__INT(ids->node),
					    STORE__INT(store__clamp(window_ns / 1000000)),
					    STORE__INT(b->host_signals[i].signal),
					    STORE__REAL(b->host_signals[i].value)) });
		if (rc)
			return rc;
	}
	return 0;
}
