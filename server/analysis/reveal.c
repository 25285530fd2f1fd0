/* SPDX-License-Identifier: Apache-2.0 */
/* Host anomaly detection on host signals (server/analysis/reveal.h). */
#include "server/analysis/reveal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "server/analysis/robust.h"

#define REL_FLOOR 0.10 /* the scale is at least this share of the median's magnitude */

/* Per signal: the harmful direction and the smallest scale a deviation is measured in (a
 * signal that is constant — MAD 0 — or nearly so would otherwise make noise infinite). The
 * floors are what a healthy node varies by without anyone noticing. */
static const struct {
	int8_t dir;
	double floor;
} signal_info[REVEAL_SIGNALS] = {
	[SYSOM_HOST_CPU_MHZ] = { -1, 100 },
	[SYSOM_HOST_CPU_MHZ_MIN] = { -1, 100 },
	[SYSOM_HOST_CPU_BUSY] = { 0, 0.05 },
	[SYSOM_HOST_CPU_IOWAIT] = { 1, 0.05 },
	[SYSOM_HOST_CPU_STEAL] = { 1, 0.05 },
	[SYSOM_HOST_CONTEXT_SWITCHES] = { 0, 1000 },
	[SYSOM_HOST_PROCS_BLOCKED] = { 1, 2 },
	[SYSOM_HOST_SOFTIRQ_NET_RX] = { 1, 1000 },
	[SYSOM_HOST_SOFTIRQ_NET_TX] = { 1, 1000 },
	[SYSOM_HOST_SOFTIRQ_TOTAL] = { 1, 2000 },
	[SYSOM_HOST_PSI_CPU_SOME_AVG10] = { 1, 5 },
	[SYSOM_HOST_PSI_CPU_SOME] = { 1, 0.05 },
	[SYSOM_HOST_PSI_CPU_FULL_AVG10] = { 1, 5 },
	[SYSOM_HOST_PSI_CPU_FULL] = { 1, 0.05 },
	[SYSOM_HOST_PSI_MEM_SOME_AVG10] = { 1, 5 },
	[SYSOM_HOST_PSI_MEM_SOME] = { 1, 0.05 },
	[SYSOM_HOST_PSI_MEM_FULL_AVG10] = { 1, 5 },
	[SYSOM_HOST_PSI_MEM_FULL] = { 1, 0.05 },
	[SYSOM_HOST_PSI_IO_SOME_AVG10] = { 1, 5 },
	[SYSOM_HOST_PSI_IO_SOME] = { 1, 0.05 },
	[SYSOM_HOST_PSI_IO_FULL_AVG10] = { 1, 5 },
	[SYSOM_HOST_PSI_IO_FULL] = { 1, 0.05 },
	[SYSOM_HOST_TCP_OUT_SEGS] = { 0, 1000 },
	[SYSOM_HOST_TCP_RETRANS_SEGS] = { 1, 5 },
	[SYSOM_HOST_TCP_IN_ERRS] = { 1, 5 },
	[SYSOM_HOST_TCP_LOST_RETRANSMIT] = { 1, 2 },
	[SYSOM_HOST_TCP_TIMEOUTS] = { 1, 2 },
	[SYSOM_HOST_NET_RX_DROPS] = { 1, 5 },
	[SYSOM_HOST_NET_TX_DROPS] = { 1, 5 },
	[SYSOM_HOST_NET_RX_ERRS] = { 1, 5 },
	[SYSOM_HOST_NET_TX_ERRS] = { 1, 5 },
	[SYSOM_HOST_DISK_READ_IOPS] = { 0, 50 },
	[SYSOM_HOST_DISK_WRITE_IOPS] = { 0, 50 },
	[SYSOM_HOST_DISK_READ_MS] = { 1, 5 },
	[SYSOM_HOST_DISK_WRITE_MS] = { 1, 5 },
	[SYSOM_HOST_MEM_AVAILABLE] = { -1, 1073741824.0 },
	[SYSOM_HOST_MEM_AVAILABLE_SHARE] = { -1, 0.05 },
	[SYSOM_HOST_PGMAJFAULT] = { 1, 50 },
};

_Static_assert(REVEAL_SIGNALS <= 64, "known is a 64-bit mask");

void reveal_options_default(struct reveal_options *o)
{
	*o = (struct reveal_options){
		.min_periods = 2,
		.min_history = 5,
		.min_peers = 3,
		.z_min = REVEAL_Z_MIN,
		.z_support = REVEAL_Z_SUPPORT,
		.tail = REVEAL_TAIL,
		.stale_ms = 60000,
	};
}

int reveal_signal_direction(uint16_t signal)
{
	return signal > 0 && signal < REVEAL_SIGNALS ? signal_info[signal].dir : 0;
}

/* ---- input ---------------------------------------------------------------------------------- */

int reveal_input_add(struct reveal_input *in, const char *node_id, const char *hostname,
		     int64_t time_ms, uint16_t signal, double value)
{
	struct reveal_node *n = in->nnodes ? &in->nodes[in->nnodes - 1] : NULL;
	struct reveal_window *w;

	if (signal == 0 || signal >= REVEAL_SIGNALS || !isfinite(value) || value < 0)
		return 0;
	if (!n || strcmp(n->node_id, node_id)) {
		if (in->nnodes == REVEAL_MAX_NODES) {
			in->truncated = true;
			return 0;
		}
		if (SYSOM_ARRAY_RESERVE(in->nodes, in->cap, in->nnodes, 16))
			return -ENOMEM;
		n = &in->nodes[in->nnodes];
		memset(n, 0, sizeof(*n));
		snprintf(n->node_id, sizeof(n->node_id), "%s", node_id);
		if (!(n->hostname = strdup(hostname ? hostname : "")))
			return -ENOMEM;
		in->nnodes++;
	}
	w = n->nw ? &n->w[n->nw - 1] : NULL;
	if (!w || w->time_ms != time_ms) {
		if (n->nw == REVEAL_MAX_WINDOWS) { /* keep the latest */
			memmove(n->w, n->w + 1, (REVEAL_MAX_WINDOWS - 1) * sizeof(*n->w));
			n->nw--;
		} else if (SYSOM_ARRAY_RESERVE(n->w, n->wcap, n->nw, 8)) {
			return -ENOMEM;
		}
		w = &n->w[n->nw++];
		w->time_ms = time_ms;
		w->known = 0;
	}
	w->v[signal] = value;
	w->known |= 1ull << signal;
	return 0;
}

void reveal_input_free(struct reveal_input *in)
{
	for (size_t i = 0; in && i < in->nnodes; i++) {
		free(in->nodes[i].hostname);
		free(in->nodes[i].w);
	}
	if (in) {
		free(in->nodes);
		memset(in, 0, sizeof(*in));
	}
}

/* ---- scoring -------------------------------------------------------------------------------- */

double reveal_threshold(uint32_t d, double tail)
{
	/* Wilson-Hilferty: chi2_q(d) ~ d (1 - 2/(9d) + z_q sqrt(2/(9d)))^3, z_q the normal
	 * quantile of 1 - tail (Acklam-free: a bisection on erfc is plenty for one number). */
	double lo = 0, hi = 40, zq;

	if (d == 0)
		return INFINITY;
	for (int i = 0; i < 100; i++) {
		double mid = (lo + hi) / 2;
		if (0.5 * erfc(mid / sqrt(2.0)) > tail)
			lo = mid;
		else
			hi = mid;
	}
	zq = (lo + hi) / 2;
	double a = 2.0 / (9.0 * d), c = 1 - a + zq * sqrt(a);
	return sqrt(d * c * c * c);
}

struct ref {
	double median, scale;
	bool ok;
};

static double scale_of(uint16_t s, double median, double mad)
{
	double sc = ROBUST_MAD_SIGMA * mad;

	if (sc < signal_info[s].floor)
		sc = signal_info[s].floor;
	if (sc < REL_FLOOR * fabs(median))
		sc = REL_FLOOR * fabs(median);
	return sc;
}

static double zscore(uint16_t s, double x, const struct ref *r)
{
	double z;

	if (!r->ok)
		return NAN;
	z = (x - r->median) / r->scale;
	if (signal_info[s].dir > 0 && z < 0)
		z = 0;
	if (signal_info[s].dir < 0 && z > 0)
		z = 0;
	return z;
}

/* The smaller in magnitude of the two references (0 when they disagree in sign); one alone
 * when the other is missing. */
static double combine(double own, double peer)
{
	if (isnan(own))
		return isnan(peer) ? NAN : peer;
	if (isnan(peer))
		return own;
	if ((own > 0) != (peer > 0) || own == 0 || peer == 0)
		return 0;
	return fabs(own) < fabs(peer) ? own : peer;
}

static int cmp_top(const void *a, const void *b)
{
	double x = fabs(((const struct reveal_signal_score *)a)->z);
	double y = fabs(((const struct reveal_signal_score *)b)->z);
	return x < y ? 1 : x > y ? -1 : 0;
}

int reveal_score(const struct reveal_input *in, const struct reveal_options *o,
		 struct reveal_node_score *out)
{
	size_t n = in->nnodes, k = o->min_periods ? o->min_periods : 1;
	struct ref *peer = NULL; /* [slot][signal] */
	double *vals = NULL, *scratch = NULL;
	int64_t newest = INT64_MIN;
	bool *live = NULL;
	size_t cap = n > REVEAL_MAX_WINDOWS ? n : REVEAL_MAX_WINDOWS;
	int rc = 0;

	double thresholds[REVEAL_SIGNALS];

	if (!n)
		return 0;
	for (uint32_t d = 0; d < REVEAL_SIGNALS; d++) /* a bisection each: once per call */
		thresholds[d] = reveal_threshold(d, o->tail);
	if (k > REVEAL_MAX_WINDOWS)
		k = REVEAL_MAX_WINDOWS;
	peer = calloc(k * REVEAL_SIGNALS, sizeof(*peer));
	vals = malloc(cap * sizeof(*vals));
	scratch = malloc(cap * sizeof(*scratch));
	live = calloc(n, sizeof(*live));
	if (!peer || !vals || !scratch || !live) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (size_t i = 0; i < n; i++)
		if (in->nodes[i].nw && in->nodes[i].w[in->nodes[i].nw - 1].time_ms > newest)
			newest = in->nodes[i].w[in->nodes[i].nw - 1].time_ms;
	for (size_t i = 0; i < n; i++) {
		const struct reveal_node *nd = &in->nodes[i];
		live[i] = nd->nw && newest - nd->w[nd->nw - 1].time_ms <= o->stale_ms;
	}
	/* Peers: per slot (the j-th last window of each live node) and signal. */
	for (size_t j = 0; j < k; j++) {
		for (uint16_t s = 1; s < REVEAL_SIGNALS; s++) {
			size_t m = 0;
			for (size_t i = 0; i < n; i++) {
				const struct reveal_node *nd = &in->nodes[i];
				if (!live[i] || nd->nw <= j)
					continue;
				const struct reveal_window *w = &nd->w[nd->nw - 1 - j];
				if (w->known & (1ull << s))
					vals[m++] = w->v[s];
			}
			struct ref *r = &peer[j * REVEAL_SIGNALS + s];
			if (m < o->min_peers || m < 2)
				continue;
			double med, mad;
			robust_median_mad(vals, m, scratch, &med, &mad);
			*r = (struct ref){ med, scale_of(s, med, mad), true };
		}
	}
	for (size_t i = 0; i < n; i++) {
		const struct reveal_node *nd = &in->nodes[i];
		struct reveal_node_score *ns = &out[i];
		struct reveal_signal_score all[REVEAL_SIGNALS];
		struct ref own[REVEAL_SIGNALS];
		size_t nall = 0, hist = nd->nw > k ? nd->nw - k : 0;
		bool counting = true;

		memset(ns, 0, sizeof(*ns));
		ns->node_id = nd->node_id;
		ns->hostname = nd->hostname;
		ns->stale = !live[i];
		if (!nd->nw)
			continue;
		ns->time_ms = nd->w[nd->nw - 1].time_ms;
		ns->has_history = hist >= o->min_history;
		memset(own, 0, sizeof(own));
		for (uint16_t s = 1; s < REVEAL_SIGNALS && ns->has_history; s++) {
			size_t m = 0;
			for (size_t h = 0; h < hist; h++)
				if (nd->w[h].known & (1ull << s))
					vals[m++] = nd->w[h].v[s];
			if (m < o->min_history)
				continue;
			double med, mad;
			robust_median_mad(vals, m, scratch, &med, &mad);
			own[s] = (struct ref){ med, scale_of(s, med, mad), true };
		}
		/* The latest windows, newest first, while they stay over the threshold. */
		for (size_t j = 0; j < k && j < nd->nw && live[i]; j++) {
			const struct reveal_window *w = &nd->w[nd->nw - 1 - j];
			double sum = 0, zmax = 0;
			uint32_t d = 0;
			bool peers = false;
			for (uint16_t s = 1; s < REVEAL_SIGNALS; s++) {
				if (!(w->known & (1ull << s)))
					continue;
				const struct ref *pr = &peer[j * REVEAL_SIGNALS + s];
				double zo = zscore(s, w->v[s], &own[s]);
				double zp = zscore(s, w->v[s], pr);
				double z = combine(zo, zp);
				peers |= pr->ok;
				d++;
				if (isnan(z))
					continue;
				sum += z * z;
				zmax = fabs(z) > zmax ? fabs(z) : zmax;
				if (j == 0)
					all[nall++] = (struct reveal_signal_score){
						.signal = s, .value = w->v[s], .z = z, .z_own = zo,
						.z_peer = zp,
						.own_median = own[s].ok ? own[s].median : NAN,
						.peer_median = pr->ok ? pr->median : NAN,
					};
			}
			double score = sqrt(sum), thr = thresholds[d];
			if (j == 0) {
				ns->score = score;
				ns->threshold = thr;
				ns->nsignals = d;
				ns->has_peers = peers;
			}
			bool over = zmax >= o->z_min || (score > thr && zmax >= o->z_support);
			if (counting && over)
				ns->periods_over++;
			else
				counting = false;
		}
		ns->anomalous = ns->periods_over >= k && ns->has_history && ns->has_peers;
		qsort(all, nall, sizeof(all[0]), cmp_top);
		for (size_t t = 0; t < nall && ns->ntop < REVEAL_TOP; t++)
			if (fabs(all[t].z) > 0)
				ns->top[ns->ntop++] = all[t];
	}
cleanup:
	free(peer);
	free(vals);
	free(scratch);
	free(live);
	return rc;
}
