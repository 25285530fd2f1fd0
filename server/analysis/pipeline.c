/* SPDX-License-Identifier: Apache-2.0 */
/* Pipeline stragglers: Send/Recv pairing, per-stage and per-link verdicts (pipeline.h). */
#include "server/analysis/pipeline.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "include/sysom/nccl_ops.h"
#include "server/analysis/robust.h"

struct pipeline {
	struct pipeline_call *calls;
	size_t n, cap;
	uint64_t invalid, dropped;
};

int pipeline_new(struct pipeline **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void pipeline_free(struct pipeline *pl)
{
	if (!pl)
		return;
	free(pl->calls);
	free(pl);
}

int pipeline_add(struct pipeline *pl, const struct pipeline_call *c)
{
	if ((c->op != SYSOM_NCCL_SEND && c->op != SYSOM_NCCL_RECV) || !c->comm || c->rank < 0 ||
	    c->peer < 0 || c->peer == c->rank || c->exit_ns < c->entry_ns) {
		pl->invalid++;
		return 0;
	}
	if (pl->n >= PIPELINE_MAX_CALLS) {
		pl->dropped++;
		return 0;
	}
	if (SYSOM_ARRAY_RESERVE(pl->calls, pl->cap, pl->n, 1024))
		return -ENOMEM;
	pl->calls[pl->n++] = *c;
	return 0;
}

void pipeline_result_free(struct pipeline_result *r)
{
	if (!r)
		return;
	free(r->stages);
	free(r->links);
	memset(r, 0, sizeof(*r));
}

static int32_t src_of(const struct pipeline_call *c)
{
	return c->op == SYSOM_NCCL_SEND ? c->rank : c->peer;
}

static int32_t dst_of(const struct pipeline_call *c)
{
	return c->op == SYSOM_NCCL_SEND ? c->peer : c->rank;
}

#define CMP(a, b) ((a) < (b) ? -1 : (a) > (b) ? 1 : 0)

static int by_transfer(const void *x, const void *y)
{
	const struct pipeline_call *a = x, *b = y;
	int c;

	if ((c = CMP(a->comm, b->comm)) || (c = CMP(src_of(a), src_of(b))) ||
	    (c = CMP(dst_of(a), dst_of(b))) || (c = CMP(a->seq, b->seq)) || (c = CMP(a->op, b->op)))
		return c;
	return CMP(a->entry_ns, b->entry_ns);
}

static int by_stage(const void *x, const void *y)
{
	const struct pipeline_call *a = x, *b = y;
	int c;

	if ((c = CMP(a->comm, b->comm)) || (c = CMP(a->rank, b->rank)) ||
	    (c = CMP(a->entry_ns, b->entry_ns)))
		return c;
	return CMP(a->exit_ns, b->exit_ns);
}

/* The verdict over values v[0..n-1] of one communicator: excess and z of each against the
 * others (leave-one-out up to PIPELINE_EXACT_LOO). `judged[i]` false: left out (not enough
 * samples) and not compared. Writes excess/z/slow; returns how many are slow. */
static size_t judge(const double *v, const bool *judged, size_t n, const struct pipeline_params *p,
		    double *scratch, double *scratch2, double *excess, double *z, bool *slow)
{
	size_t m = 0, nslow = 0;
	double all_med = 0, all_mad = 0;

	for (size_t i = 0; i < n; i++)
		if (judged[i])
			scratch[m++] = v[i];
	if (m > PIPELINE_EXACT_LOO)
		robust_median_mad(scratch, m, scratch2, &all_med, &all_mad);
	for (size_t i = 0; i < n; i++) {
		double med = all_med, mad = all_mad, scale;

		excess[i] = z[i] = 0;
		slow[i] = false;
		if (!judged[i] || m < 2)
			continue;
		if (m <= PIPELINE_EXACT_LOO) {
			size_t k = 0;
			for (size_t j = 0; j < n; j++)
				if (j != i && judged[j])
					scratch[k++] = v[j];
			robust_median_mad(scratch, k, scratch2, &med, &mad);
		}
		scale = ROBUST_MAD_SIGMA * mad;
		if (scale < (double)p->scale_floor_ns)
			scale = (double)p->scale_floor_ns;
		if (scale <= 0)
			scale = 1;
		excess[i] = v[i] - med;
		z[i] = excess[i] / scale;
		slow[i] = excess[i] > p->k * scale && excess[i] >= (double)p->min_excess_ns;
		nslow += slow[i];
	}
	return nslow;
}

/* Judges items [from, to) of one communicator; `get`/`put` address their value and verdict. */
struct judge_bufs {
	double *v, *scratch, *scratch2, *excess, *z;
	bool *judged, *slow;
};

static int bufs_alloc(struct judge_bufs *b, size_t n)
{
	n = n ? n : 1;
	b->v = malloc(n * sizeof(double));
	b->scratch = malloc(n * sizeof(double));
	b->scratch2 = malloc(n * sizeof(double));
	b->excess = malloc(n * sizeof(double));
	b->z = malloc(n * sizeof(double));
	b->judged = malloc(n * sizeof(bool));
	b->slow = malloc(n * sizeof(bool));
	return b->v && b->scratch && b->scratch2 && b->excess && b->z && b->judged && b->slow
		       ? 0 : -ENOMEM;
}

static void bufs_free(struct judge_bufs *b)
{
	free(b->v);
	free(b->scratch);
	free(b->scratch2);
	free(b->excess);
	free(b->z);
	free(b->judged);
	free(b->slow);
}

/* Links: pairs the calls (sorted by transfer key) and fills out->links. */
static int links_build(struct pipeline *pl, struct pipeline_result *out, double *tmp,
		       double *tmp2)
{
	size_t i = 0;

	while (i < pl->n) {
		const struct pipeline_call *first = &pl->calls[i];
		size_t lt = 0;
		double wait_sum = 0;
		struct pipeline_link *l;

		/* One link: [i, end). */
		size_t end = i;
		while (end < pl->n && pl->calls[end].comm == first->comm &&
		       src_of(&pl->calls[end]) == src_of(first) && dst_of(&pl->calls[end]) == dst_of(first))
			end++;
		l = &out->links[out->nlinks++];
		memset(l, 0, sizeof(*l));
		l->comm = first->comm;
		l->src = src_of(first);
		l->dst = dst_of(first);
		l->src_job_rank = l->dst_job_rank = -1;
		for (size_t j = i; j < end;) {
			size_t k = j, ns = 0, nr = 0;
			const struct pipeline_call *s = NULL, *r = NULL;

			while (k < end && pl->calls[k].seq == pl->calls[j].seq) {
				if (pl->calls[k].op == SYSOM_NCCL_SEND) {
					ns++;
					s = &pl->calls[k];
					l->src_job_rank = s->job_rank;
				} else {
					nr++;
					r = &pl->calls[k];
					l->dst_job_rank = r->job_rank;
				}
				k++;
			}
			if (ns == 1 && nr == 1) {
				int64_t ready = s->entry_ns > r->entry_ns ? s->entry_ns : r->entry_ns;
				int64_t t = r->exit_ns - ready;

				tmp[lt++] = t > 0 ? (double)t : 0;
				wait_sum += s->entry_ns > r->entry_ns ? (double)(s->entry_ns - r->entry_ns) : 0;
				out->transfers++;
			} else if (ns > 1 || nr > 1) {
				out->duplicates += ns + nr;
			} else if (ns) {
				out->unmatched_sends++;
			} else {
				out->unmatched_recvs++;
			}
			j = k;
		}
		l->transfers = lt;
		if (lt) {
			l->wait_ns = wait_sum / (double)lt;
			double mad;
			robust_median_mad(tmp, lt, tmp2, &l->transfer_ns, &mad);
		}
		i = end;
	}
	return 0;
}

/* Stages: from the calls sorted by (comm, rank, entry). */
static void stages_build(struct pipeline *pl, struct pipeline_result *out, double *busy,
			 double *inrecv, double *tmp2)
{
	size_t i = 0;

	while (i < pl->n) {
		const struct pipeline_call *first = &pl->calls[i];
		struct pipeline_stage *st = &out->stages[out->nstages++];
		size_t end = i, nb = 0, nw = 0;
		uint8_t closing;
		int64_t prev_exit = 0;
		double acc = 0, mad;
		bool started = false, have_prev = false;

		memset(st, 0, sizeof(*st));
		st->comm = first->comm;
		st->rank = first->rank;
		st->job_rank = first->job_rank;
		st->pid = first->pid;
		while (end < pl->n && pl->calls[end].comm == first->comm &&
		       pl->calls[end].rank == first->rank) {
			if (pl->calls[end].op == SYSOM_NCCL_SEND)
				st->sends++;
			else
				st->recvs++;
			end++;
		}
		closing = st->sends ? SYSOM_NCCL_SEND : SYSOM_NCCL_RECV;
		for (size_t j = i; j < end; j++) {
			const struct pipeline_call *c = &pl->calls[j];

			if (have_prev && c->entry_ns > prev_exit)
				acc += (double)(c->entry_ns - prev_exit);
			if (c->op == SYSOM_NCCL_RECV)
				inrecv[nw++] = (double)(c->exit_ns - c->entry_ns);
			if (c->op == closing) {
				if (started)
					busy[nb++] = acc;
				started = true;
				acc = 0;
			}
			if (!have_prev || c->exit_ns > prev_exit)
				prev_exit = c->exit_ns;
			have_prev = true;
		}
		st->microbatches = nb;
		if (nb)
			robust_median_mad(busy, nb, tmp2, &st->busy_ns, &mad);
		if (nw)
			robust_median_mad(inrecv, nw, tmp2, &st->recv_wait_ns, &mad);
		i = end;
	}
}

int pipeline_analyse(struct pipeline *pl, const struct pipeline_params *p,
		     struct pipeline_result *out)
{
	struct judge_bufs jb = { 0 };
	double *tmp = NULL, *tmp2 = NULL;
	int rc = -ENOMEM;

	if (!pl || !p || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->calls = pl->n;
	out->invalid = pl->invalid;
	out->dropped = pl->dropped;
	size_t n = pl->n ? pl->n : 1;
	/* At most one link and one stage per call. */
	out->links = calloc(n, sizeof(*out->links));
	out->stages = calloc(n, sizeof(*out->stages));
	tmp = malloc(n * sizeof(double));
	tmp2 = malloc(n * sizeof(double));
	if (!out->links || !out->stages || !tmp || !tmp2 || bufs_alloc(&jb, n))
		goto cleanup;

	if (pl->n)
		qsort(pl->calls, pl->n, sizeof(*pl->calls), by_transfer);
	links_build(pl, out, tmp, tmp2);
	if (pl->n)
		qsort(pl->calls, pl->n, sizeof(*pl->calls), by_stage);
	/* busy and in-receive samples of one stage: at most its calls; tmp/jb.v as scratch. */
	stages_build(pl, out, tmp, jb.v, tmp2);

	/* Verdicts per communicator (stages and links are sorted by comm first). */
	for (size_t i = 0; i < out->nstages;) {
		size_t end = i;
		while (end < out->nstages && out->stages[end].comm == out->stages[i].comm)
			end++;
		for (size_t j = i; j < end; j++) {
			jb.v[j - i] = out->stages[j].busy_ns;
			jb.judged[j - i] = out->stages[j].microbatches >= PIPELINE_MIN_SAMPLES;
		}
		out->slow_stages += judge(jb.v, jb.judged, end - i, p, jb.scratch, jb.scratch2,
					  jb.excess, jb.z, jb.slow);
		for (size_t j = i; j < end; j++) {
			struct pipeline_stage *s = &out->stages[j];
			s->judged = jb.judged[j - i];
			s->excess_ns = jb.excess[j - i];
			s->z = jb.z[j - i];
			s->slow = jb.slow[j - i];
		}
		i = end;
	}
	for (size_t i = 0; i < out->nlinks;) {
		size_t end = i;
		while (end < out->nlinks && out->links[end].comm == out->links[i].comm)
			end++;
		for (size_t j = i; j < end; j++) {
			jb.v[j - i] = out->links[j].transfer_ns;
			jb.judged[j - i] = out->links[j].transfers >= PIPELINE_MIN_SAMPLES;
		}
		out->slow_links += judge(jb.v, jb.judged, end - i, p, jb.scratch, jb.scratch2,
					 jb.excess, jb.z, jb.slow);
		for (size_t j = i; j < end; j++) {
			struct pipeline_link *l = &out->links[j];
			l->judged = jb.judged[j - i];
			l->excess_ns = jb.excess[j - i];
			l->z = jb.z[j - i];
			l->slow = jb.slow[j - i];
		}
		i = end;
	}
	/* Sized for one stage and one link per call: keep what was used. */
	if (out->nstages) {
		void *t = realloc(out->stages, out->nstages * sizeof(*out->stages));
		out->stages = t ? t : out->stages;
	}
	if (out->nlinks) {
		void *t = realloc(out->links, out->nlinks * sizeof(*out->links));
		out->links = t ? t : out->links;
	}
	rc = 0;
cleanup:
	bufs_free(&jb);
	free(tmp);
	free(tmp2);
	if (rc)
		pipeline_result_free(out);
	return rc;
}
