/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU health (wire 1.6 GPU_HEALTH, agent/gpu/nvml.c) in ClickHouse: one row per (batch, GPU),
 * as SQLite's gpu_health table, and store_gpu_health_list for GET /nodes/{node}/gpus and the
 * hardware verdict of the layered diagnosis. Numbers NVML could not give keep the wire's
 * sentinels (SYSOM_GPU_UNKNOWN = 4294967295 in UInt32 columns, SYSOM_GPU_UNKNOWN64 in UInt64
 * ones) where SQLite stores NULL: the reader hands them back unchanged. Two batches naming the
 * same (node, device, window end) — SQLite keeps the later one — answer once here too (the row
 * of the latest attempt). Schema: ch__migration_gpu_health.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/clickhouse_internal.h"

/* The UInt32 and UInt64 columns after `slowdown_samples`, in the wire record's order. */
#define GPU_HEALTH_NUMBERS                                                                     \
	"reasons_any, reasons_last, sm_clock_min, sm_clock_last, sm_clock_max, mem_clock_last,"  \
	" mem_clock_max, temp_max, temp_last, temp_slowdown, temp_shutdown, power_max_mw,"        \
	" power_last_mw, power_limit_mw, util_gpu, util_mem, ecc_corrected, ecc_uncorrected,"     \
	" retired_sbe, retired_dbe, pcie_replays, flags, nvlink_errors, xid_count, xid_last"
#define GPU_HEALTH_NUMBER_COUNT 25

const char *const ch__migration_gpu_health[] = {
	"CREATE TABLE IF NOT EXISTS gpu_health (day Date, node_id String, window_start_ns Int64,"
	" window_end_ns Int64, device UInt32, uuid String, pci_bus_id String, name String,"
	" samples UInt32, slowdown_samples UInt32, reasons_any UInt64, reasons_last UInt64,"
	" sm_clock_min UInt32, sm_clock_last UInt32, sm_clock_max UInt32, mem_clock_last UInt32,"
	" mem_clock_max UInt32, temp_max UInt32, temp_last UInt32, temp_slowdown UInt32,"
	" temp_shutdown UInt32, power_max_mw UInt32, power_last_mw UInt32, power_limit_mw UInt32,"
	" util_gpu UInt32, util_mem UInt32, ecc_corrected UInt64, ecc_uncorrected UInt64,"
	" retired_sbe UInt32, retired_dbe UInt32, pcie_replays UInt32, flags UInt32,"
	" nvlink_errors UInt64, xid_count UInt32, xid_last UInt32, attempt UInt64)"
	" ENGINE = MergeTree PARTITION BY day ORDER BY (node_id, device, window_end_ns)",
	NULL,
};

static int64_t clamp_i64(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

int ch__batch_write_gpu_health(const struct ch_gpu_os_put *p)
{
	const struct sysom_batch *b = p->b;
	struct byte_buf rows = { 0 };
	int rc;

	if (!b->gpu_health_count)
		return 0;
	for (uint32_t i = 0; i < b->gpu_health_count; i++) {
		const struct sysom_gpu_health *g = &b->gpu_health[i];
		ch__rb_date_ns(&rows, clamp_i64(b->window_end_ns));
		ch__rb_str(&rows, p->node_hex);
		byte_buf_put_u64(&rows, (uint64_t)clamp_i64(b->window_start_ns));
		byte_buf_put_u64(&rows, (uint64_t)clamp_i64(b->window_end_ns));
		byte_buf_put_u32(&rows, g->device);
		ch__rb_str(&rows, sysom_batch_string(b, g->uuid));
		ch__rb_str(&rows, sysom_batch_string(b, g->pci_bus_id));
		ch__rb_str(&rows, sysom_batch_string(b, g->name));
		byte_buf_put_u32(&rows, g->samples);
		byte_buf_put_u32(&rows, g->slowdown_samples);
		byte_buf_put_u64(&rows, g->reasons_any);
		byte_buf_put_u64(&rows, g->reasons_last);
		byte_buf_put_u32(&rows, g->sm_clock_min);
		byte_buf_put_u32(&rows, g->sm_clock_last);
		byte_buf_put_u32(&rows, g->sm_clock_max);
		byte_buf_put_u32(&rows, g->mem_clock_last);
		byte_buf_put_u32(&rows, g->mem_clock_max);
		byte_buf_put_u32(&rows, g->temp_max);
		byte_buf_put_u32(&rows, g->temp_last);
		byte_buf_put_u32(&rows, g->temp_slowdown);
		byte_buf_put_u32(&rows, g->temp_shutdown);
		byte_buf_put_u32(&rows, g->power_max_mw);
		byte_buf_put_u32(&rows, g->power_last_mw);
		byte_buf_put_u32(&rows, g->power_limit_mw);
		byte_buf_put_u32(&rows, g->util_gpu);
		byte_buf_put_u32(&rows, g->util_mem);
		byte_buf_put_u64(&rows, g->ecc_corrected);
		byte_buf_put_u64(&rows, g->ecc_uncorrected);
		byte_buf_put_u32(&rows, g->retired_sbe);
		byte_buf_put_u32(&rows, g->retired_dbe);
		byte_buf_put_u32(&rows, g->pcie_replays);
		byte_buf_put_u32(&rows, g->flags);
		byte_buf_put_u64(&rows, g->nvlink_errors);
		byte_buf_put_u32(&rows, g->xid_count);
		byte_buf_put_u32(&rows, g->xid_last);
		byte_buf_put_u64(&rows, p->attempt);
	}
	rc = ch__rows_take(p->out, "gpu_health", &rows);
	byte_buf_free(&rows);
	return rc;
}

struct health_rows {
	store_gpu_health_fn fn;
	void *arg;
};

/* Fields: node, hostname, window start, window end, device, uuid, pci bus id, name, samples,
 * slowdown samples, then the GPU_HEALTH_NUMBERS. */
static int health_row(void *ctx, char **f)
{
	const struct health_rows *hr = ctx;
	struct store_gpu_health g = { .hostname = f[1] ? f[1] : "", .uuid = f[5] ? f[5] : "",
				      .pci_bus_id = f[6] ? f[6] : "", .name = f[7] ? f[7] : "" };
	struct sysom_gpu_health *h = &g.h;
	uint32_t *u32s[] = { &h->sm_clock_min,	 &h->sm_clock_last,  &h->sm_clock_max,
			     &h->mem_clock_last, &h->mem_clock_max,  &h->temp_max,
			     &h->temp_last,	 &h->temp_slowdown,  &h->temp_shutdown,
			     &h->power_max_mw,	 &h->power_last_mw,  &h->power_limit_mw,
			     &h->util_gpu,	 &h->util_mem };
	uint32_t *u32s_late[] = { &h->retired_sbe, &h->retired_dbe, &h->pcie_replays, &h->flags };
	int c = 10;

	if (!f[0] || strlen(f[0]) != 2 * SYSOM_NODE_ID_SIZE || ch_tsv_i64(f[2], &g.window_start_ns) ||
	    ch_tsv_i64(f[3], &g.window_end_ns) || ch_tsv_u32(f[4], &h->device) ||
	    ch_tsv_u32(f[8], &h->samples) || ch_tsv_u32(f[9], &h->slowdown_samples) ||
	    ch_tsv_u64(f[c++], &h->reasons_any) || ch_tsv_u64(f[c++], &h->reasons_last))
		return -EPROTO;
	for (size_t i = 0; i < sizeof(u32s) / sizeof(u32s[0]); i++)
		if (ch_tsv_u32(f[c++], u32s[i]))
			return -EPROTO;
	if (ch_tsv_u64(f[c++], &h->ecc_corrected) || ch_tsv_u64(f[c++], &h->ecc_uncorrected))
		return -EPROTO;
	for (size_t i = 0; i < sizeof(u32s_late) / sizeof(u32s_late[0]); i++)
		if (ch_tsv_u32(f[c++], u32s_late[i]))
			return -EPROTO;
	if (ch_tsv_u64(f[c++], &h->nvlink_errors) || ch_tsv_u32(f[c++], &h->xid_count) ||
	    ch_tsv_u32(f[c++], &h->xid_last))
		return -EPROTO;
	snprintf(g.node_id, sizeof(g.node_id), "%s", f[0]);
	return hr->fn(hr->arg, &g);
}

int ch__gpu_health_list(struct store *base, const char *node, int64_t from_ms, int64_t to_ms,
			uint32_t limit, store_gpu_health_fn fn, void *arg)
{
	struct ch_store *s = ch__store(base);
	struct health_rows hr = { fn, arg };
	struct byte_buf q = { 0 };
	int rc;

	/* The window ends in [from_ms, to_ms], in ns without overflow (as SQLite compares). */
	int64_t from_ns = from_ms > INT64_MAX / 1000000	  ? INT64_MAX
			  : from_ms < INT64_MIN / 1000000 ? INT64_MIN
							  : from_ms * 1000000;
	int64_t to_ns = to_ms >= INT64_MAX / 1000000  ? INT64_MAX
			: to_ms < INT64_MIN / 1000000 ? INT64_MIN
						      : to_ms * 1000000 + 999999;

	_Static_assert(10 + GPU_HEALTH_NUMBER_COUNT == 35, "health_row reads 35 fields");
	byte_buf_printf(&q, "SELECT node, hostname, window_start_ns, window_end_ns, device, uuid,"
			    " pci_bus_id, name, samples, slowdown_samples, " GPU_HEALTH_NUMBERS
			    " FROM (SELECT node_id AS node, window_start_ns, window_end_ns, device,"
			    " uuid, pci_bus_id, name, samples, slowdown_samples, " GPU_HEALTH_NUMBERS
			    " FROM gpu_health WHERE window_end_ns >= %" PRId64 " AND"
			    " window_end_ns <= %" PRId64, from_ns, to_ns);
	ch__own_days_sql(&q, from_ms, to_ms);
	byte_buf_printf(&q, " AND ");
	ch__committed_since_sql(&q, from_ms);
	byte_buf_printf(&q, " ORDER BY attempt DESC LIMIT 1 BY node_id, device, window_end_ns)"
			    " ANY LEFT JOIN (SELECT node_id AS node, argMax(hostname, received_ns)"
			    " AS hostname FROM batches WHERE ");
	ch__received_since_sql(&q, from_ms);
	byte_buf_printf(&q, " GROUP BY node_id) USING node");
	if (node) {
		byte_buf_printf(&q, " WHERE node = lower(");
		ch__quote(&q, node);
		byte_buf_printf(&q, ") OR hostname = ");
		ch__quote(&q, node);
	}
	byte_buf_printf(&q, " ORDER BY hostname, node, device, window_end_ns LIMIT %" PRIu32, limit);
	rc = ch__select_run(s, &q, 10 + GPU_HEALTH_NUMBER_COUNT, health_row, &hr, NULL);
	byte_buf_free(&q);
	return rc;
}
