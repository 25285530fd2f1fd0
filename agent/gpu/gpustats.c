/* SPDX-License-Identifier: Apache-2.0 */
/* Component telemetry (include/sysom/records.h) → batch rows (common/wire/wire.h minor 2). */
#include "agent/gpu/gpustats.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "agent/ranks/channel.h"
#include "common/array.h"
#include "common/error.h"
#include "common/report.h"

/* What one connection (one component in one process) told us so far. */
struct gs_conn {
	uint32_t tgid;
	struct channel_hello hello;
	bool said_hello;
	struct channel_comm *comms; /* announced communicators, [0, ncomms) */
	uint32_t ncomms, comms_cap;
	uint64_t last[CHANNEL_STAT_MAX + 1]; /* cumulative counters as last reported */
};

struct gpustats {
	struct gpustats_options o;
	struct gpustats_stats stats;
};

/* Component counter → batch counter. */
static const uint16_t stat_counter[CHANNEL_STAT_MAX + 1] = {
	[SYSOM_STAT_EVENTS] = SYSOM_COUNTER_PROFILER_EVENTS,
	[SYSOM_STAT_EVENTS_DROPPED] = SYSOM_COUNTER_PROFILER_DROPPED,
	[SYSOM_STAT_ORPHANS] = SYSOM_COUNTER_PROFILER_ORPHANS,
	[SYSOM_STAT_FORCED_CLOSES] = SYSOM_COUNTER_PROFILER_FORCED,
	[SYSOM_STAT_RECORDS_DROPPED] = SYSOM_COUNTER_COMPONENT_SEND_DROPS,
	[SYSOM_STAT_CUPTI_RECORDS] = SYSOM_COUNTER_CUPTI_RECORDS,
	[SYSOM_STAT_CUPTI_DROPPED] = SYSOM_COUNTER_CUPTI_DROPPED,
};

int gpustats_new(const struct gpustats_options *o, struct gpustats **out)
{
	struct gpustats *g;

	*out = NULL;
	if (!o->batcher)
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->o = *o;
	*out = g;
	return 0;
}

void gpustats_free(struct gpustats *g)
{
	free(g);
}

void gpustats_conn_closed(struct gpustats *g, void *state)
{
	struct gs_conn *c = state;

	(void)g;
	if (!c)
		return;
	free(c->comms);
	free(c);
}

void gpustats_stats_read(const struct gpustats *g, struct gpustats_stats *out)
{
	*out = g->stats;
}

static const struct channel_comm *find_comm(const struct gs_conn *c, uint64_t id)
{
	for (uint32_t i = 0; i < c->ncomms; i++)
		if (c->comms[i].comm_id == id)
			return &c->comms[i];
	return NULL;
}

/* Records a communicator (again: replaces it, e.g. FINALIZED set). */
static int note_comm(struct gs_conn *c, const struct channel_comm *comm)
{
	struct channel_comm *found = (struct channel_comm *)find_comm(c, comm->comm_id);

	if (found) {
		*found = *comm;
		return 0;
	}
	if (c->ncomms >= GPUSTATS_MAX_COMMS)
		return -SYSOM_ELIMIT;
	if (SYSOM_ARRAY_RESERVE(c->comms, c->comms_cap, c->ncomms, 8))
		return -ENOMEM;
	c->comms[c->ncomms++] = *comm;
	return 0;
}

static uint32_t generation(const struct gpustats *g, uint32_t tgid)
{
	return g->o.generation_of ? g->o.generation_of(g->o.ctx, tgid) : 0;
}

static int fold_coll(struct gpustats *g, const struct gs_conn *c, const struct channel_table *t)
{
	const struct channel_comm *comm = find_comm(c, t->comm_id);
	uint32_t gen = generation(g, c->tgid);
	int rc;

	if (!comm)
		return -ENOENT; /* tables follow the NCCL_COMM that announces their communicator */
	for (uint32_t i = 0; i < t->entry_count; i++) {
		struct sysom_rec_coll e;
		struct sysom_nccl_profile p = { 0 };
		struct batcher_profile_names names;

		channel_table_coll(t, i, &e);
		p.rank = comm->rank;
		p.nranks = comm->nranks;
		p.comm_id = comm->comm_id;
		p.peer = e.peer;
		p.nchannels = e.nchannels;
		p.count = e.count;
		p.bytes = e.bytes;
		p.kernel_timed = e.kernel_timed;
		p.kernel_ns_total = e.kernel_ns_total;
		p.kernel_ns_min = e.kernel_ns_min;
		p.kernel_ns_max = e.kernel_ns_max;
		p.span_timed = e.span_timed;
		p.span_ns_total = e.span_ns_total;
		p.enqueue_ns_total = e.enqueue_ns_total;
		p.transfers = e.transfers;
		p.transfer_bytes = e.transfer_bytes;
		p.first_seq = e.first_seq;
		p.last_seq = e.last_seq;
		names = (struct batcher_profile_names){
			.comm_name = comm->name,
			.func = channel_table_string(t, e.func),
			.algo = channel_table_string(t, e.algo),
			.proto = channel_table_string(t, e.proto),
			.datatype = channel_table_string(t, e.datatype),
		};
		if ((rc = batcher_add_nccl_profile(g->o.batcher, c->tgid, gen, &p, &names)))
			return rc;
		g->stats.profiles++;
	}
	return 0;
}

static int fold_link(struct gpustats *g, const struct gs_conn *c, const struct channel_table *t)
{
	const struct channel_comm *comm = find_comm(c, t->comm_id);
	uint32_t gen = generation(g, c->tgid);
	int rc;

	if (!comm)
		return -ENOENT;
	for (uint32_t i = 0; i < t->entry_count; i++) { /* all or nothing */
		struct sysom_rec_link e;

		channel_table_link(t, i, &e);
		if (e.peer >= comm->nranks)
			return -EINVAL;
	}
	for (uint32_t i = 0; i < t->entry_count; i++) {
		struct sysom_rec_link e;
		struct sysom_nccl_link l = { 0 };

		channel_table_link(t, i, &e);
		l.rank = comm->rank;
		l.comm_id = comm->comm_id;
		l.peer = e.peer;
		l.channel = e.channel;
		l.transfers = e.transfers;
		l.bytes = e.bytes;
		l.time_ns_total = e.time_ns_total;
		l.sx = e.sx;
		l.sy = e.sy;
		l.sxx = e.sxx;
		l.sxy = e.sxy;
		l.syy = e.syy;
		l.min_latency_ns = e.min_latency_ns;
		l.min_bytes_per_ns = e.min_bytes_per_ns;
		l.min_r2 = e.min_r2;
		l.min_points = e.min_points;
		if ((rc = batcher_add_nccl_link(g->o.batcher, c->tgid, gen, &l)))
			return rc;
		g->stats.links++;
	}
	return 0;
}

static int fold_kernels(struct gpustats *g, const struct gs_conn *c, const struct channel_table *t)
{
	uint32_t gen = generation(g, c->tgid);
	int rc;

	for (uint32_t i = 0; i < t->entry_count; i++) {
		struct sysom_rec_kernel e;
		struct sysom_gpu_kernel k = { 0 };

		channel_table_kernel(t, i, &e);
		k.device = e.device;
		k.stream = e.stream;
		k.count = e.count;
		k.total_ns = e.total_ns;
		k.min_ns = e.min_ns;
		k.max_ns = e.max_ns;
		memcpy(k.hist, e.hist, sizeof(k.hist));
		if ((rc = batcher_add_gpu_kernel(g->o.batcher, c->tgid, gen, &k,
						 channel_table_string(t, e.name))))
			return rc;
		g->stats.kernels++;
	}
	return 0;
}

/* Counters are cumulative per component: the batch gets what grew since the last report (all
 * of it when the value went down, i.e. the component started again). */
static int fold_stats(struct gpustats *g, struct gs_conn *c, const uint8_t *p, size_t len)
{
	uint64_t values[CHANNEL_STAT_MAX + 1];
	bool present[CHANNEL_STAT_MAX + 1];
	int rc;

	if ((rc = channel_decode_stats(p, len, values, present)))
		return rc;
	for (unsigned id = 1; id <= CHANNEL_STAT_MAX; id++) {
		uint64_t delta;

		if (!present[id])
			continue;
		delta = values[id] >= c->last[id] ? values[id] - c->last[id] : values[id];
		c->last[id] = values[id];
		if (stat_counter[id] && delta)
			batcher_add_counter(g->o.batcher, stat_counter[id], delta);
	}
	return 0;
}

static int handle(struct gpustats *g, struct gs_conn *c, uint16_t type, const uint8_t *payload,
		  size_t len)
{
	struct channel_table t;
	struct channel_comm comm;
	int rc;

	switch (type) {
	case SYSOM_REC_HELLO:
		if ((rc = channel_decode_hello(payload, len, &c->hello)))
			return rc;
		if (!c->said_hello)
			g->stats.components++;
		c->said_hello = true;
		/* One line per component per process: which in-process timing is live. */
		sysom_report(&g->o.report, SYSOM_REPORT_INFO,
			     "pid %u: component connected: %s (kind %u, interface %u, mask %#x)",
			     c->tgid, c->hello.name, c->hello.component, c->hello.interface,
			     c->hello.activation_mask);
		return 0;
	case SYSOM_REC_NCCL_COMM:
		if ((rc = channel_decode_comm(payload, len, &comm)))
			return rc;
		return note_comm(c, &comm);
	case SYSOM_REC_NCCL_COLL:
	case SYSOM_REC_NCCL_LINK:
	case SYSOM_REC_GPU_KERNEL:
		if ((rc = channel_decode_table(payload, len, type, &t)))
			return rc;
		if (type == SYSOM_REC_NCCL_COLL)
			return fold_coll(g, c, &t);
		if (type == SYSOM_REC_NCCL_LINK)
			return fold_link(g, c, &t);
		return fold_kernels(g, c, &t);
	case SYSOM_REC_STATS:
		return fold_stats(g, c, payload, len);
	default:
		return -ENOSYS;
	}
}

int gpustats_record(struct gpustats *g, uint32_t tgid, void **state, uint16_t type,
		    const uint8_t *payload, size_t len)
{
	struct gs_conn *c = *state;
	int rc;

	if (!c) {
		c = calloc(1, sizeof(*c));
		if (!c)
			return -ENOMEM;
		c->tgid = tgid;
		*state = c;
	}
	rc = handle(g, c, type, payload, len);
	if (rc == -ENOSYS)
		return rc;
	if (rc) {
		g->stats.rejected++;
		batcher_add_counter(g->o.batcher, SYSOM_COUNTER_CHANNEL_REJECTED, 1);
		return rc;
	}
	g->stats.records++;
	batcher_add_counter(g->o.batcher, SYSOM_COUNTER_CHANNEL_RECORDS, 1);
	return 0;
}
