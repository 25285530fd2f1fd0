/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Storing a batch's GPU, OS and off-CPU rows in ClickHouse: launch counts, GPU kernel timing,
 * NCCL profiler profiles and links, per-CPU / per-IRQ / per-thread OS counters and off-CPU
 * time. Each row carries the batch's attempt (it counts once the batch row is written, see
 * clickhouse_open.c) and the values SQLite stores (the same clamping), so that both backends
 * answer alike. Schema: ch__migration_gpu_os below; layouts in docs/architecture.md.
 */
#include <stdio.h>
#include <string.h>

#include "server/store/clickhouse_internal.h"

/*
 * Migration 2. Every table is partitioned by day (retention drops whole days) and ordered by
 * (node_id, time_ms): the readers filter on time and node; process and tgid are stored with
 * each row so that the flame graphs need no join to filter by pid. time_ms is the batch
 * window end for per-window rows (as SQLite), the sample time for off-CPU rows.
 */
const char *const ch__migration_gpu_os[] = {
	"CREATE TABLE IF NOT EXISTS launches (day Date, node_id String, time_ms Int64,"
	" process UInt64, tgid UInt32, function UInt64, kernel_name String, user_stack Int64,"
	" kernel_stack Int64, count UInt64, grid_x UInt32, grid_y UInt32, grid_z UInt32,"
	" block_x UInt32, block_y UInt32, block_z UInt32, shared_mem UInt32, flags UInt16,"
	" attempt UInt64) ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, time_ms)",
	"CREATE TABLE IF NOT EXISTS gpu_kernels (day Date, node_id String, time_ms Int64,"
	" process UInt64, tgid UInt32, name String, device UInt32, stream UInt64, count UInt64,"
	" total_ns UInt64, min_ns UInt64, max_ns UInt64, hist Array(UInt32), attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, time_ms)",
	"CREATE TABLE IF NOT EXISTS nccl_profiles (day Date, node_id String, time_ms Int64,"
	" process UInt64, tgid UInt32, comm_id UInt64, comm_name String, rank Int32,"
	" nranks Int32, func String, algo String, proto String, datatype String, peer Int32,"
	" nchannels UInt32, count UInt64, bytes UInt64, kernel_timed UInt64,"
	" kernel_ns_total UInt64, kernel_ns_min UInt64, kernel_ns_max UInt64, span_timed UInt64,"
	" span_ns_total UInt64, enqueue_ns_total UInt64, transfers UInt64,"
	" transfer_bytes UInt64, first_seq UInt64, last_seq UInt64, attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, time_ms)",
	/* NaN min_*: no MIN-mode fit (SQLite: NULL). */
	"CREATE TABLE IF NOT EXISTS nccl_links (day Date, node_id String, time_ms Int64,"
	" process UInt64, tgid UInt32, comm_id UInt64, rank Int32, peer Int32, channel Int32,"
	" transfers UInt64, bytes UInt64, time_ns_total UInt64, sx Float64, sy Float64,"
	" sxx Float64, sxy Float64, syy Float64, min_latency_ns Float64,"
	" min_bytes_per_ns Float64, min_r2 Float64, min_points UInt32, attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, time_ms)",
	"CREATE TABLE IF NOT EXISTS os_cpus (day Date, node_id String, time_ms Int64,"
	" window_ms Int64, cpu UInt32, numa_node Int32, busy_ns UInt64, hardirq_count UInt64,"
	" hardirq_ns UInt64, softirq_count Array(UInt64), softirq_ns Array(UInt64),"
	" context_switches UInt64, runq_wait_ns UInt64, attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, time_ms)",
	"CREATE TABLE IF NOT EXISTS os_irqs (day Date, node_id String, time_ms Int64, cpu UInt32,"
	" irq UInt32, name String, count UInt64, ns UInt64, attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, time_ms)",
	"CREATE TABLE IF NOT EXISTS os_threads (day Date, node_id String, time_ms Int64,"
	" process UInt64, tgid UInt32, tid UInt32, comm String, oncpu_ns UInt64,"
	" runq_wait_ns UInt64, runq_waits UInt64, runq_hist Array(UInt32),"
	" voluntary_switches UInt64, involuntary_switches UInt64, migrations UInt64,"
	" numa_migrations UInt64, pages_migrated UInt64, hardirq_ns UInt64, softirq_ns UInt64,"
	" cpus Array(UInt64), attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, time_ms)",
	"CREATE TABLE IF NOT EXISTS offcpu (day Date, node_id String, time_ms Int64,"
	" process UInt64, tgid UInt32, tid UInt32, thread_comm String, state UInt8,"
	" kernel_stack Int64, user_stack Int64, count UInt64, blocked_ns UInt64, max_ns UInt64,"
	" attempt UInt64) ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, time_ms)",
	NULL,
};

/* What SQLite keeps of an unsigned count (its integers are signed 64-bit). */
static uint64_t c63(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : v;
}

static void put_f64(struct byte_buf *b, double v)
{
	uint64_t bits;

	memcpy(&bits, &v, sizeof(bits));
	byte_buf_put_u64(b, bits);
}

static void put_u32s(struct byte_buf *b, const uint32_t *v, size_t n)
{
	ch__rb_varint(b, n);
	for (size_t i = 0; i < n; i++)
		byte_buf_put_u32(b, v[i]);
}

/* The columns every per-window row of a process starts with. */
static void head(struct byte_buf *b, const struct ch_gpu_os_put *p, int64_t time_ms,
		 uint32_t process)
{
	ch__rb_date_ns(b, time_ms * 1000000);
	ch__rb_str(b, p->node_hex);
	byte_buf_put_u64(b, (uint64_t)time_ms);
	if (process != SYSOM_WIRE_NONE) {
		byte_buf_put_u64(b, p->processes[process]);
		byte_buf_put_u32(b, p->b->processes[process].tgid);
	}
}

static uint64_t stack_id(const struct ch_gpu_os_put *p, uint32_t idx)
{
	return idx != SYSOM_WIRE_NONE ? (uint64_t)p->stacks[idx] : 0;
}

static void launch_rows(struct byte_buf *rows, const struct ch_gpu_os_put *p, int64_t end_ms,
			struct store_put_result *r)
{
	const struct sysom_batch *b = p->b;

	for (uint32_t i = 0; i < b->launch_count; i++) {
		const struct sysom_launch *l = &b->launches[i];

		head(rows, p, end_ms, l->process);
		byte_buf_put_u64(rows, l->function);
		ch__rb_str(rows, sysom_batch_string(b, l->kernel_name));
		byte_buf_put_u64(rows, stack_id(p, l->user_stack));
		byte_buf_put_u64(rows, stack_id(p, l->kernel_stack));
		byte_buf_put_u64(rows, c63(l->count));
		for (int j = 0; j < 3; j++)
			byte_buf_put_u32(rows, l->grid[j]);
		for (int j = 0; j < 3; j++)
			byte_buf_put_u32(rows, l->block[j]);
		byte_buf_put_u32(rows, l->shared_mem);
		byte_buf_put_u16(rows, l->flags);
		byte_buf_put_u64(rows, p->attempt);
		r->launches = l->count > UINT64_MAX - r->launches ? UINT64_MAX : r->launches + l->count;
	}
}

static void gpu_kernel_rows(struct byte_buf *rows, const struct ch_gpu_os_put *p, int64_t end_ms)
{
	const struct sysom_batch *b = p->b;

	for (uint32_t i = 0; i < b->gpu_kernel_count; i++) {
		const struct sysom_gpu_kernel *k = &b->gpu_kernels[i];

		head(rows, p, end_ms, k->process);
		ch__rb_str(rows, sysom_batch_string(b, k->name));
		byte_buf_put_u32(rows, k->device);
		byte_buf_put_u64(rows, k->stream);
		byte_buf_put_u64(rows, c63(k->count));
		byte_buf_put_u64(rows, c63(k->total_ns));
		byte_buf_put_u64(rows, c63(k->min_ns));
		byte_buf_put_u64(rows, c63(k->max_ns));
		put_u32s(rows, k->hist, SYSOM_GPU_HIST_BUCKETS);
		byte_buf_put_u64(rows, p->attempt);
	}
}

static void nccl_profile_rows(struct byte_buf *rows, const struct ch_gpu_os_put *p, int64_t end_ms)
{
	const struct sysom_batch *b = p->b;

	for (uint32_t i = 0; i < b->nccl_profile_count; i++) {
		const struct sysom_nccl_profile *n = &b->nccl_profiles[i];
		const uint64_t sums[] = { n->count, n->bytes, n->kernel_timed, n->kernel_ns_total,
					  n->kernel_ns_min, n->kernel_ns_max, n->span_timed,
					  n->span_ns_total, n->enqueue_ns_total, n->transfers,
					  n->transfer_bytes, n->first_seq, n->last_seq };

		head(rows, p, end_ms, n->process);
		byte_buf_put_u64(rows, n->comm_id);
		ch__rb_str(rows, sysom_batch_string(b, n->comm_name));
		byte_buf_put_u32(rows, (uint32_t)n->rank);
		byte_buf_put_u32(rows, (uint32_t)n->nranks);
		ch__rb_str(rows, sysom_batch_string(b, n->func));
		ch__rb_str(rows, sysom_batch_string(b, n->algo));
		ch__rb_str(rows, sysom_batch_string(b, n->proto));
		ch__rb_str(rows, sysom_batch_string(b, n->datatype));
		byte_buf_put_u32(rows, (uint32_t)n->peer);
		byte_buf_put_u32(rows, n->nchannels);
		for (size_t j = 0; j < sizeof(sums) / sizeof(sums[0]); j++)
			byte_buf_put_u64(rows, c63(sums[j]));
		byte_buf_put_u64(rows, p->attempt);
	}
}

static void nccl_link_rows(struct byte_buf *rows, const struct ch_gpu_os_put *p, int64_t end_ms)
{
	const struct sysom_batch *b = p->b;

	for (uint32_t i = 0; i < b->nccl_link_count; i++) {
		const struct sysom_nccl_link *l = &b->nccl_links[i];

		head(rows, p, end_ms, l->process);
		byte_buf_put_u64(rows, l->comm_id);
		byte_buf_put_u32(rows, (uint32_t)l->rank);
		byte_buf_put_u32(rows, (uint32_t)l->peer);
		byte_buf_put_u32(rows, (uint32_t)l->channel);
		byte_buf_put_u64(rows, c63(l->transfers));
		byte_buf_put_u64(rows, c63(l->bytes));
		byte_buf_put_u64(rows, c63(l->time_ns_total));
		put_f64(rows, l->sx);
		put_f64(rows, l->sy);
		put_f64(rows, l->sxx);
		put_f64(rows, l->sxy);
		put_f64(rows, l->syy);
		put_f64(rows, l->min_latency_ns);
		put_f64(rows, l->min_bytes_per_ns);
		put_f64(rows, l->min_r2);
		byte_buf_put_u32(rows, l->min_points);
		byte_buf_put_u64(rows, p->attempt);
	}
}

static void os_cpu_rows(struct byte_buf *rows, const struct ch_gpu_os_put *p, int64_t end_ms)
{
	const struct sysom_batch *b = p->b;
	uint64_t window_ns = b->window_end_ns > b->window_start_ns
				     ? b->window_end_ns - b->window_start_ns : 0;

	for (uint32_t i = 0; i < b->os_cpu_count; i++) {
		const struct sysom_os_cpu *o = &b->os_cpus[i];

		head(rows, p, end_ms, SYSOM_WIRE_NONE);
		byte_buf_put_u64(rows, c63(window_ns / 1000000));
		byte_buf_put_u32(rows, o->cpu);
		byte_buf_put_u32(rows, (uint32_t)o->numa_node);
		byte_buf_put_u64(rows, c63(o->busy_ns));
		byte_buf_put_u64(rows, c63(o->hardirq_count));
		byte_buf_put_u64(rows, c63(o->hardirq_ns));
		/* SQLite keeps these bit for bit (a blob): so does this. */
		ch__rb_varint(rows, SYSOM_SOFTIRQ_COUNT);
		for (int j = 0; j < SYSOM_SOFTIRQ_COUNT; j++)
			byte_buf_put_u64(rows, o->softirq_count[j]);
		ch__rb_varint(rows, SYSOM_SOFTIRQ_COUNT);
		for (int j = 0; j < SYSOM_SOFTIRQ_COUNT; j++)
			byte_buf_put_u64(rows, o->softirq_ns[j]);
		byte_buf_put_u64(rows, c63(o->context_switches));
		byte_buf_put_u64(rows, c63(o->runq_wait_ns));
		byte_buf_put_u64(rows, p->attempt);
	}
}

static void os_irq_rows(struct byte_buf *rows, const struct ch_gpu_os_put *p, int64_t end_ms)
{
	const struct sysom_batch *b = p->b;

	for (uint32_t i = 0; i < b->os_irq_count; i++) {
		const struct sysom_os_irq *q = &b->os_irqs[i];

		head(rows, p, end_ms, SYSOM_WIRE_NONE);
		byte_buf_put_u32(rows, q->cpu);
		byte_buf_put_u32(rows, q->irq);
		ch__rb_str(rows, sysom_batch_string(b, q->name));
		byte_buf_put_u64(rows, c63(q->count));
		byte_buf_put_u64(rows, c63(q->ns));
		byte_buf_put_u64(rows, p->attempt);
	}
}

static void os_thread_rows(struct byte_buf *rows, const struct ch_gpu_os_put *p, int64_t end_ms)
{
	const struct sysom_batch *b = p->b;

	for (uint32_t i = 0; i < b->os_thread_count; i++) {
		const struct sysom_os_thread *t = &b->os_threads[i];
		const uint64_t sums[] = { t->voluntary_switches, t->involuntary_switches,
					  t->migrations, t->numa_migrations, t->pages_migrated,
					  t->hardirq_ns, t->softirq_ns };

		head(rows, p, end_ms, t->process);
		byte_buf_put_u32(rows, t->tid);
		ch__rb_str(rows, sysom_batch_string(b, t->comm));
		byte_buf_put_u64(rows, c63(t->oncpu_ns));
		byte_buf_put_u64(rows, c63(t->runq_wait_ns));
		byte_buf_put_u64(rows, c63(t->runq_waits));
		put_u32s(rows, t->runq_hist, SYSOM_RUNQ_HIST_BUCKETS);
		for (size_t j = 0; j < sizeof(sums) / sizeof(sums[0]); j++)
			byte_buf_put_u64(rows, c63(sums[j]));
		ch__rb_varint(rows, SYSOM_CPU_MASK_WORDS);
		for (int j = 0; j < SYSOM_CPU_MASK_WORDS; j++)
			byte_buf_put_u64(rows, t->cpus[j]);
		byte_buf_put_u64(rows, p->attempt);
	}
}

static void offcpu_rows(struct byte_buf *rows, const struct ch_gpu_os_put *p)
{
	const struct sysom_batch *b = p->b;

	for (uint32_t i = 0; i < b->offcpu_count; i++) {
		const struct sysom_offcpu *o = &b->offcpu[i];
		int64_t time_ms = (int64_t)(b->window_start_ns / 1000000) + o->time_offset_ms;

		head(rows, p, time_ms, o->process);
		byte_buf_put_u32(rows, o->tid);
		ch__rb_str(rows, sysom_batch_string(b, o->thread_comm));
		byte_buf_put_u8(rows, o->state);
		byte_buf_put_u64(rows, stack_id(p, o->kernel_stack));
		byte_buf_put_u64(rows, stack_id(p, o->user_stack));
		byte_buf_put_u64(rows, c63(o->count));
		byte_buf_put_u64(rows, c63(o->blocked_ns));
		byte_buf_put_u64(rows, c63(o->max_ns));
		byte_buf_put_u64(rows, p->attempt);
	}
}


int ch__batch_write_gpu_os(const struct ch_gpu_os_put *p, struct store_put_result *r)
{
	const struct sysom_batch *b = p->b;
	int64_t end_ms = (int64_t)c63(b->window_end_ns / 1000000);
	struct byte_buf rows = { 0 };
	uint64_t launches = 0;
	int rc;

	/* One INSERT per table (none for a table without rows). */
	launch_rows(&rows, p, end_ms, r);
	launches = r->launches;
	if ((rc = ch__rows_take(p->out, "launches", &rows)))
		goto cleanup;
	gpu_kernel_rows(&rows, p, end_ms);
	if ((rc = ch__rows_take(p->out, "gpu_kernels", &rows)))
		goto cleanup;
	nccl_profile_rows(&rows, p, end_ms);
	if ((rc = ch__rows_take(p->out, "nccl_profiles", &rows)))
		goto cleanup;
	nccl_link_rows(&rows, p, end_ms);
	if ((rc = ch__rows_take(p->out, "nccl_links", &rows)))
		goto cleanup;
	os_cpu_rows(&rows, p, end_ms);
	if ((rc = ch__rows_take(p->out, "os_cpus", &rows)))
		goto cleanup;
	os_irq_rows(&rows, p, end_ms);
	if ((rc = ch__rows_take(p->out, "os_irqs", &rows)))
		goto cleanup;
	os_thread_rows(&rows, p, end_ms);
	if ((rc = ch__rows_take(p->out, "os_threads", &rows)))
		goto cleanup;
	offcpu_rows(&rows, p);
	if ((rc = ch__rows_take(p->out, "offcpu", &rows)))
		goto cleanup;
	r->launches = launches;
	r->launch_rows = b->launch_count;
	r->gpu_kernel_rows = b->gpu_kernel_count;
	r->nccl_profile_rows = b->nccl_profile_count;
	r->nccl_link_rows = b->nccl_link_count;
	r->os_cpu_rows = b->os_cpu_count;
	r->os_irq_rows = b->os_irq_count;
	r->os_thread_rows = b->os_thread_count;
cleanup:
	byte_buf_free(&rows);
	return rc;
}
