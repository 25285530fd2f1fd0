/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One closed window of a communicator → NCCL_COLL and NCCL_LINK tables (docs/channel-records.md).
 * Runs on the plugin's background thread only, so its scratch space is static.
 *
 * Per operation (Coll or P2p) its children in the same window give: GPU time from the
 * earliest KernelCh start to the latest KernelChStop (the GPU's own timer), else the CPU span
 * from the operation's start to its last ProxyOp stop; the enqueue time (start → stop of the
 * operation itself); and its network transfers (ProxyStep from SendWait to stop, with the size
 * the state carried). Operations are summed per (func, algo, proto, datatype, peer). Each
 * transfer also feeds its link (peer, channel) and the link's all-channel row (channel -1):
 * least-squares sufficient statistics over every transfer, and the fastest transfer per size
 * for the MIN-mode fit, which ignores queueing delays.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "plugins/nccl/profiler.h"

#define MAX_OPS 1024       /* operation kinds per window */
#define MAX_LINKS 2048     /* (peer, channel) per window */
#define MAX_SIZES 8192     /* (peer, channel, size) per window, for the MIN fit */

struct op_acc {
	bool gpu;                  /* a KernelCh with start and stop was seen */
	uint64_t gpu_min, gpu_max;
	uint64_t proxy_stop;       /* latest ProxyOp stop */
	uint64_t transfers, transfer_bytes;
};

struct coll_row {
	bool used;
	const char *func, *algo, *proto, *datatype;
	int32_t peer;
	struct sysom_rec_coll r;
};

struct link_row {
	bool used;
	int32_t peer, channel;
	struct sysom_rec_link r;
	double mn, msx, msy, msxx, msxy, msyy; /* MIN-mode sums over the fastest per size */
};

struct size_row {
	bool used;
	int32_t peer, channel;
	uint64_t size;
	double min_ns;
};

static struct op_acc *ops;     /* by slot */
static uint32_t ops_cap;
static struct coll_row colls[MAX_OPS];
static struct link_row links[MAX_LINKS];
static struct size_row sizes[MAX_SIZES];

static const char *str_or_empty(const char *s)
{
	return s ? s : "";
}

static bool same_str(const char *a, const char *b)
{
	return a == b || strcmp(str_or_empty(a), str_or_empty(b)) == 0;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdull;
}

static uint64_t str_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (s = str_or_empty(s); *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static struct coll_row *coll_get(const struct prof_event *e, int32_t peer)
{
	uint64_t h = mix(mix(mix(mix(str_hash(e->func), str_hash(e->algo)), str_hash(e->proto)),
			     str_hash(e->datatype)), (uint32_t)peer);

	for (uint32_t i = 0; i < MAX_OPS; i++) {
		struct coll_row *c = &colls[(h + i) % MAX_OPS];

		if (!c->used) {
			memset(c, 0, sizeof(*c));
			c->used = true;
			c->func = e->func;
			c->algo = e->algo;
			c->proto = e->proto;
			c->datatype = e->datatype;
			c->peer = peer;
			c->r.peer = peer;
			c->r.first_seq = UINT64_MAX;
			return c;
		}
		if (c->peer == peer && same_str(c->func, e->func) && same_str(c->algo, e->algo) &&
		    same_str(c->proto, e->proto) && same_str(c->datatype, e->datatype))
			return c;
	}
	return NULL;
}

static struct link_row *link_get(int32_t peer, int32_t channel)
{
	uint64_t h = mix((uint32_t)peer, (uint32_t)channel);

	for (uint32_t i = 0; i < MAX_LINKS; i++) {
		struct link_row *l = &links[(h + i) % MAX_LINKS];

		if (!l->used) {
			memset(l, 0, sizeof(*l));
			l->used = true;
			l->peer = peer;
			l->channel = channel;
			l->r.peer = peer;
			l->r.channel = channel;
			return l;
		}
		if (l->peer == peer && l->channel == channel)
			return l;
	}
	return NULL;
}

static void size_note(int32_t peer, int32_t channel, uint64_t size, double ns)
{
	uint64_t h = mix(mix((uint32_t)peer, (uint32_t)channel), size);

	for (uint32_t i = 0; i < MAX_SIZES; i++) {
		struct size_row *s = &sizes[(h + i) % MAX_SIZES];

		if (!s->used) {
			*s = (struct size_row){ true, peer, channel, size, ns };
			return;
		}
		if (s->peer == peer && s->channel == channel && s->size == size) {
			if (ns < s->min_ns)
				s->min_ns = ns;
			return;
		}
	}
}

static void link_add(int32_t peer, int32_t channel, uint64_t bytes, uint64_t ns)
{
	struct link_row *l = link_get(peer, channel);
	double x = (double)bytes, y = (double)ns;

	if (!l)
		return;
	l->r.transfers++;
	l->r.bytes += bytes;
	l->r.time_ns_total += ns;
	l->r.sx += x;
	l->r.sy += y;
	l->r.sxx += x * x;
	l->r.sxy += x * y;
	l->r.syy += y * y;
	size_note(peer, channel, bytes, y);
}

/* The MIN-mode fit of every link: least squares through the fastest transfer of each size. */
static void min_fits(void)
{
	for (uint32_t i = 0; i < MAX_SIZES; i++) {
		const struct size_row *s = &sizes[i];
		struct link_row *l;
		double x = (double)s->size, y = s->min_ns;

		if (!s->used || !(l = link_get(s->peer, s->channel)))
			continue;
		l->mn++;
		l->msx += x;
		l->msy += y;
		l->msxx += x * x;
		l->msxy += x * y;
		l->msyy += y * y;
	}
	for (uint32_t i = 0; i < MAX_LINKS; i++) {
		struct link_row *l = &links[i];
		double n = l->mn, den = n * l->msxx - l->msx * l->msx;
		double num = n * l->msxy - l->msx * l->msy, tot = n * l->msyy - l->msy * l->msy;

		if (!l->used)
			continue;
		l->r.min_points = (uint32_t)n;
		l->r.min_latency_ns = l->r.min_bytes_per_ns = l->r.min_r2 = NAN;
		if (n < 2 || !(den > 0) || !(num > 0))
			continue;
		double slope = num / den;
		l->r.min_latency_ns = (l->msy - slope * l->msx) / n;
		l->r.min_bytes_per_ns = 1.0 / slope;
		l->r.min_r2 = tot > 0 ? fmin(1.0, num * num / (den * tot)) : 1.0;
	}
}

/* Slot `i` as written for this window generation, or NULL. */
static const struct prof_event *slot_at(const struct prof_window *w, uint32_t i)
{
	const struct prof_event *e = &w->slots[i];

	if (atomic_load_explicit(&e->tag, memory_order_acquire) != win_tag(atomic_load(&w->gen)))
		return NULL;
	return e;
}

static bool is_op(const struct prof_event *e)
{
	return e && (e->type == EV_COLL || e->type == EV_P2P);
}

unsigned prof_window_aggregate(const struct prof_context *ctx, const struct prof_window *w,
			       uint32_t nslots, double ns_per_tick, struct sysom_channel *ch,
			       struct sysom_table *t, uint64_t *events)
{
	static const uint32_t coll_strings[] = { offsetof(struct sysom_rec_coll, func),
						 offsetof(struct sysom_rec_coll, algo),
						 offsetof(struct sysom_rec_coll, proto),
						 offsetof(struct sysom_rec_coll, datatype) };
	unsigned failed = 0;

	if (nslots > ops_cap) {
		struct op_acc *grown = realloc(ops, (size_t)nslots * sizeof(*ops));
		if (!grown)
			return 1;
		ops = grown;
		ops_cap = nslots;
	}
	memset(ops, 0, (size_t)nslots * sizeof(*ops));
	memset(colls, 0, sizeof(colls));
	memset(links, 0, sizeof(links));
	memset(sizes, 0, sizeof(sizes));

	/* Children first: fold each into its operation (parents are in this window). */
	for (uint32_t i = 0; i < nslots; i++) {
		const struct prof_event *e = slot_at(w, i), *p, *op;
		uint8_t flags;

		if (e)
			(*events)++;
		if (!e || e->type == EV_COLL || e->type == EV_P2P)
			continue;
		flags = atomic_load_explicit(&e->flags, memory_order_acquire);
		p = e->parent < nslots ? slot_at(w, e->parent) : NULL;
		if (e->type == EV_KERNEL_CH) {
			if (!is_op(p) || !(flags & EV_KERNEL_STOP) || e->gpu_stop < e->gpu_start)
				continue;
			struct op_acc *a = &ops[e->parent];
			if (!a->gpu || e->gpu_start < a->gpu_min)
				a->gpu_min = e->gpu_start;
			if (!a->gpu || e->gpu_stop > a->gpu_max)
				a->gpu_max = e->gpu_stop;
			a->gpu = true;
		} else if (e->type == EV_PROXY_OP) {
			if (is_op(p) && (flags & EV_STOPPED) && e->stop_ns > ops[e->parent].proxy_stop)
				ops[e->parent].proxy_stop = e->stop_ns;
		} else if (e->type == EV_PROXY_STEP) {
			/* A send step that reached SendWait and stopped: one network transfer. */
			if (!p || p->type != EV_PROXY_OP || !(flags & EV_STOPPED) ||
			    !(flags & EV_SEND_WAIT) || e->stop_ns < e->wait_ns || !e->bytes)
				continue;
			uint64_t ns = (uint64_t)((double)(e->stop_ns - e->wait_ns) * ns_per_tick);
			link_add(p->peer, p->channel, e->bytes, ns);
			link_add(p->peer, -1, e->bytes, ns);
			op = p->parent < nslots ? slot_at(w, p->parent) : NULL;
			if (is_op(op)) {
				ops[p->parent].transfers++;
				ops[p->parent].transfer_bytes += e->bytes;
			}
		}
	}
	/* Operations, summed per kind. */
	for (uint32_t i = 0; i < nslots; i++) {
		const struct prof_event *e = slot_at(w, i);
		const struct op_acc *a = &ops[i];
		struct coll_row *c;
		uint8_t flags;

		if (!is_op(e))
			continue;
		c = coll_get(e, e->type == EV_P2P ? e->peer : -1);
		if (!c)
			continue;
		flags = atomic_load_explicit(&e->flags, memory_order_acquire);
		c->r.count++;
		c->r.bytes += e->bytes;
		if (e->nchannels > c->r.nchannels)
			c->r.nchannels = e->nchannels;
		if (a->gpu) {
			uint64_t ns = a->gpu_max - a->gpu_min;
			if (!c->r.kernel_timed || ns < c->r.kernel_ns_min)
				c->r.kernel_ns_min = ns;
			if (ns > c->r.kernel_ns_max)
				c->r.kernel_ns_max = ns;
			c->r.kernel_timed++;
			c->r.kernel_ns_total += ns;
		}
		if (a->proxy_stop > e->start_ns) {
			c->r.span_timed++;
			c->r.span_ns_total += (uint64_t)((double)(a->proxy_stop - e->start_ns) *
							 ns_per_tick);
		}
		if ((flags & EV_STOPPED) && e->stop_ns >= e->start_ns)
			c->r.enqueue_ns_total += (uint64_t)((double)(e->stop_ns - e->start_ns) *
							    ns_per_tick);
		c->r.transfers += a->transfers;
		c->r.transfer_bytes += a->transfer_bytes;
		uint64_t seq = e->type == EV_COLL ? e->seq : 0;
		if (seq < c->r.first_seq)
			c->r.first_seq = seq;
		if (seq > c->r.last_seq)
			c->r.last_seq = seq;
	}
	if (!ch)
		return 0;

	sysom_table_begin(t, SYSOM_REC_NCCL_COLL, sizeof(struct sysom_rec_coll), ctx->comm_id,
			  w->opened_real, w->closed_real);
	for (uint32_t i = 0; i < MAX_OPS; i++) {
		const struct coll_row *c = &colls[i];
		const char *strings[4] = { c->func, c->algo, c->proto, c->datatype };

		if (!c->used)
			continue;
		if (!c->func || !*c->func)
			strings[0] = "Unknown";
		(void)sysom_table_add(t, ch, &c->r, coll_strings, strings, 4);
	}
	(void)sysom_table_flush(t, ch);
	failed += t->records_dropped;

	min_fits();
	sysom_table_begin(t, SYSOM_REC_NCCL_LINK, sizeof(struct sysom_rec_link), ctx->comm_id,
			  w->opened_real, w->closed_real);
	for (uint32_t i = 0; i < MAX_LINKS; i++) {
		const struct link_row *l = &links[i];

		if (l->used)
			(void)sysom_table_add(t, ch, &l->r, NULL, NULL, 0);
	}
	(void)sysom_table_flush(t, ch);
	failed += t->records_dropped;
	return failed;
}
