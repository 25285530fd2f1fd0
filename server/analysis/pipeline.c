/* SPDX-License-Identifier: Apache-2.0 */
/* Pipeline stragglers: Send/Recv pairing, per-stage and per-link verdicts (pipeline.h). */
#include "server/analysis/pipeline.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "include/sysom/nccl_ops.h"
#include "server/analysis/robust.h"

/* GPU rows summed per key; `saturated`: a sum reached UINT64_MAX. */
struct gpu_compute {
	struct pipeline_gpu_compute g;
	bool saturated;
};

struct gpu_p2p {
	struct pipeline_gpu_p2p g;
	bool saturated;
};

struct pipeline {
	struct pipeline_call *calls;
	size_t n, cap;
	uint64_t invalid, dropped;
	struct gpu_compute *compute;
	size_t ncompute, cap_compute;
	struct gpu_p2p *p2p;
	size_t np2p, cap_p2p;
	uint64_t gpu_invalid;
	bool gpu_incomplete;
};

/* The peers a stage's closing calls name, for matching the plugin's rows; a stage naming more
 * gets no GPU timing (a pipeline stage sends to one or two neighbours). */
#define STAGE_MAX_PEERS 16

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
	free(pl->compute);
	free(pl->p2p);
	free(pl);
}

static bool sat_add(uint64_t *acc, uint64_t v)
{
	if (*acc > UINT64_MAX - v) {
		*acc = UINT64_MAX;
		return true;
	}
	*acc += v;
	return false;
}

bool pipeline_kernel_is_nccl(const char *name)
{
	if (!name)
		return false;
	/* Itanium mangling of a plain function: _Z <length> <name>. */
	if (name[0] == '_' && name[1] == 'Z') {
		name += 2;
		while (*name >= '0' && *name <= '9')
			name++;
	}
	return !strncmp(name, "ncclKernel", 10) || !strncmp(name, "ncclDevKernel", 13);
}

void pipeline_gpu_incomplete(struct pipeline *pl)
{
	pl->gpu_incomplete = true;
}

int pipeline_gpu_compute_add(struct pipeline *pl, const struct pipeline_gpu_compute *g)
{
	struct gpu_compute *last = pl->ncompute ? &pl->compute[pl->ncompute - 1] : NULL;

	if (!g->kernels) {
		pl->gpu_invalid += g->kernel_ns != 0; /* time without an execution */
		return 0;
	}
	if (!last || last->g.pid != g->pid || last->g.job_rank != g->job_rank) {
		if (pl->ncompute >= PIPELINE_MAX_GPU_ROWS) {
			pl->gpu_incomplete = true;
			return 0;
		}
		if (SYSOM_ARRAY_RESERVE(pl->compute, pl->cap_compute, pl->ncompute, 64))
			return -ENOMEM;
		last = &pl->compute[pl->ncompute++];
		memset(last, 0, sizeof(*last));
		last->g.pid = g->pid;
		last->g.job_rank = g->job_rank;
	}
	last->saturated |= sat_add(&last->g.kernels, g->kernels);
	last->saturated |= sat_add(&last->g.kernel_ns, g->kernel_ns);
	return 0;
}

static bool p2p_same_key(const struct pipeline_gpu_p2p *a, const struct pipeline_gpu_p2p *b)
{
	return a->job_rank == b->job_rank && a->pid == b->pid && a->comm_id == b->comm_id &&
	       a->rank == b->rank &&
	       a->peer == b->peer && a->op == b->op;
}

int pipeline_gpu_p2p_add(struct pipeline *pl, const struct pipeline_gpu_p2p *g)
{
	struct gpu_p2p *last = pl->np2p ? &pl->p2p[pl->np2p - 1] : NULL;

	if ((g->op != SYSOM_NCCL_SEND && g->op != SYSOM_NCCL_RECV) || g->rank < 0 ||
	    g->peer < 0 || g->peer == g->rank || !g->count || g->kernel_timed > g->count ||
	    (!g->kernel_timed && g->kernel_ns)) {
		pl->gpu_invalid++;
		return 0;
	}
	if (!last || !p2p_same_key(&last->g, g)) {
		if (pl->np2p >= PIPELINE_MAX_GPU_ROWS) {
			pl->gpu_incomplete = true;
			return 0;
		}
		if (SYSOM_ARRAY_RESERVE(pl->p2p, pl->cap_p2p, pl->np2p, 64))
			return -ENOMEM;
		last = &pl->p2p[pl->np2p++];
		memset(last, 0, sizeof(*last));
		last->g = *g;
		last->g.count = last->g.kernel_timed = last->g.kernel_ns = 0;
	}
	last->saturated |= sat_add(&last->g.count, g->count);
	last->saturated |= sat_add(&last->g.kernel_timed, g->kernel_timed);
	last->saturated |= sat_add(&last->g.kernel_ns, g->kernel_ns);
	return 0;
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
			 double *inrecv, double *tmp2, size_t *stage_first)
{
	size_t i = 0;

	while (i < pl->n) {
		stage_first[out->nstages] = i;
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
	stage_first[out->nstages] = pl->n;
}

/* ---- GPU clock ------------------------------------------------------------------------------ */

static int by_process(const void *x, const void *y)
{
	const struct gpu_compute *a = x, *b = y;
	int c;

	if ((c = CMP(a->g.job_rank, b->g.job_rank)))
		return c;
	return CMP(a->g.pid, b->g.pid);
}

static int p2p_cmp_key(const struct pipeline_gpu_p2p *a, const struct pipeline_gpu_p2p *b)
{
	int c;

	if ((c = CMP(a->job_rank, b->job_rank)) || (c = CMP(a->pid, b->pid)) ||
	    (c = CMP(a->op, b->op)) || (c = CMP(a->rank, b->rank)) ||
	    (c = CMP(a->comm_id, b->comm_id)))
		return c;
	return CMP(a->peer, b->peer);
}

static int by_p2p_key(const void *x, const void *y)
{
	return p2p_cmp_key(&((const struct gpu_p2p *)x)->g, &((const struct gpu_p2p *)y)->g);
}

/* Sorts the GPU rows by key and sums rows of equal keys (added apart). */
static void gpu_merge(struct pipeline *pl)
{
	size_t n = 0;

	if (pl->ncompute)
		qsort(pl->compute, pl->ncompute, sizeof(*pl->compute), by_process);
	for (size_t i = 0; i < pl->ncompute; i++) {
		struct gpu_compute *c = &pl->compute[i], *o = n ? &pl->compute[n - 1] : NULL;
		if (o && !by_process(o, c)) {
			o->saturated |= c->saturated | sat_add(&o->g.kernels, c->g.kernels) |
					sat_add(&o->g.kernel_ns, c->g.kernel_ns);
			continue;
		}
		pl->compute[n++] = *c;
	}
	pl->ncompute = n;
	n = 0;
	if (pl->np2p)
		qsort(pl->p2p, pl->np2p, sizeof(*pl->p2p), by_p2p_key);
	for (size_t i = 0; i < pl->np2p; i++) {
		struct gpu_p2p *c = &pl->p2p[i], *o = n ? &pl->p2p[n - 1] : NULL;
		if (o && !p2p_cmp_key(&o->g, &c->g)) {
			o->saturated |= c->saturated | sat_add(&o->g.count, c->g.count) |
					sat_add(&o->g.kernel_timed, c->g.kernel_timed) |
					sat_add(&o->g.kernel_ns, c->g.kernel_ns);
			continue;
		}
		pl->p2p[n++] = *c;
	}
	pl->np2p = n;
}

static const struct gpu_compute *compute_find(const struct pipeline *pl, int32_t job_rank,
					     uint32_t pid)
{
	const struct gpu_compute key = { .g.job_rank = job_rank, .g.pid = pid };

	return pl->ncompute
		       ? bsearch(&key, pl->compute, pl->ncompute, sizeof(*pl->compute), by_process)
		       : NULL;
}

/* The first plugin row at or after (process, op, rank) in key order. */
static size_t p2p_lower(const struct pipeline *pl, int32_t job_rank, uint32_t pid, uint8_t op,
			int32_t rank)
{
	const struct pipeline_gpu_p2p key = { .job_rank = job_rank, .pid = pid, .op = op,
					      .rank = rank, .comm_id = 0, .peer = INT32_MIN };
	size_t lo = 0, hi = pl->np2p;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (p2p_cmp_key(&pl->p2p[mid].g, &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static bool p2p_in(const struct pipeline *pl, size_t i, int32_t job_rank, uint32_t pid,
		   uint8_t op, int32_t rank)
{
	return i < pl->np2p && pl->p2p[i].g.job_rank == job_rank && pl->p2p[i].g.pid == pid &&
	       pl->p2p[i].g.op == op && pl->p2p[i].g.rank == rank;
}

static bool peer_in(const int32_t *peers, size_t n, int32_t peer)
{
	for (size_t i = 0; i < n; i++)
		if (peers[i] == peer)
			return true;
	return false;
}

/* Sums the plugin rows of (process, op, rank) whose peer passes `peers` (NULL: == `one`), all
 * in one communicator: 1 with the sums, 0 none, -1 several communicators, -2 saturated. */
static int p2p_sum(const struct pipeline *pl, int32_t job_rank, uint32_t pid, uint8_t op,
		   int32_t rank, const int32_t *peers, size_t npeers, int32_t one, uint64_t *count,
		   uint64_t *timed, uint64_t *ns)
{
	uint64_t comm = 0;
	int found = 0;
	bool sat = false;

	*count = *timed = *ns = 0;
	for (size_t i = p2p_lower(pl, job_rank, pid, op, rank);
	     p2p_in(pl, i, job_rank, pid, op, rank); i++) {
		const struct gpu_p2p *r = &pl->p2p[i];
		if (peers ? !peer_in(peers, npeers, r->g.peer) : r->g.peer != one)
			continue;
		if (found && r->g.comm_id != comm)
			return -1;
		found = 1;
		comm = r->g.comm_id;
		sat |= r->saturated | sat_add(count, r->g.count) | sat_add(timed, r->g.kernel_timed) |
		       sat_add(ns, r->g.kernel_ns);
	}
	return sat ? -2 : found;
}

/* A stage's GPU compute per microbatch (calls [first, end) are its own, by entry). */
static void stage_gpu(const struct pipeline *pl, const struct pipeline_params *p, size_t first,
		      size_t end, struct pipeline_stage *st, struct pipeline_result *out)
{
	uint8_t closing = st->sends ? SYSOM_NCCL_SEND : SYSOM_NCCL_RECV;
	int32_t peers[STAGE_MAX_PEERS];
	size_t npeers = 0;
	uint64_t microbatches = 0, timed, ns;
	const struct gpu_compute *c;

	for (size_t i = first; i < end; i++) {
		const struct pipeline_call *call = &pl->calls[i];
		if (call->op != closing || peer_in(peers, npeers, call->peer))
			continue;
		if (npeers == STAGE_MAX_PEERS)
			return;
		peers[npeers++] = call->peer;
	}
	if (!(c = compute_find(pl, st->job_rank, st->pid)))
		return;
	if (c->saturated) {
		out->gpu_invalid++;
		return;
	}
	int got = p2p_sum(pl, st->job_rank, st->pid, closing, st->rank, peers, npeers, -1,
			  &microbatches, &timed, &ns);
	if (got == -1) {
		out->gpu_ambiguous++;
		return;
	}
	if (got == -2) {
		out->gpu_invalid++;
		return;
	}
	if (!got) {
		/* No plugin count: the calls, when they are the whole range and the process has
		 * no Send/Recv plugin rows at all (rows that do not match are not a gap). */
		size_t row = p2p_lower(pl, st->job_rank, st->pid, 0, INT32_MIN);
		bool process_has_rows = row < pl->np2p && pl->p2p[row].g.job_rank == st->job_rank &&
					pl->p2p[row].g.pid == st->pid;
		if (process_has_rows || !p->calls_complete)
			return;
		microbatches = closing == SYSOM_NCCL_SEND ? st->sends : st->recvs;
	}
	if (!microbatches)
		return;
	st->gpu_timed = true;
	st->gpu_microbatches = microbatches;
	st->gpu_busy_ns = (double)c->g.kernel_ns / (double)microbatches;
	out->gpu_stages++;
}

static const struct pipeline_stage *stage_find(const struct pipeline_result *out, uint64_t comm,
					       int32_t rank)
{
	size_t lo = 0, hi = out->nstages;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct pipeline_stage *s = &out->stages[mid];
		if (s->comm < comm || (s->comm == comm && s->rank < rank))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < out->nstages && out->stages[lo].comm == comm && out->stages[lo].rank == rank
		       ? &out->stages[lo] : NULL;
}

/* A link's GPU transfer time: the receiver's timed Recv kernels from the sender. */
static void link_gpu(const struct pipeline *pl, struct pipeline_link *l,
		     struct pipeline_result *out)
{
	const struct pipeline_stage *dst = stage_find(out, l->comm, l->dst);
	uint64_t count, timed, ns;
	int got;

	if (!dst)
		return;
	got = p2p_sum(pl, dst->job_rank, dst->pid, SYSOM_NCCL_RECV, l->dst, NULL, 0, l->src, &count,
		      &timed, &ns);
	if (got == -1)
		out->gpu_ambiguous++;
	else if (got == -2)
		out->gpu_invalid++;
	if (got != 1 || !timed)
		return;
	l->gpu_timed = true;
	l->gpu_transfers = timed;
	l->gpu_transfer_ns = (double)ns / (double)timed;
}

int pipeline_analyse(struct pipeline *pl, const struct pipeline_params *p,
		     struct pipeline_result *out)
{
	struct judge_bufs jb = { 0 };
	double *tmp = NULL, *tmp2 = NULL;
	size_t *stage_first = NULL;
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
	stage_first = malloc((n + 1) * sizeof(*stage_first));
	if (!out->links || !out->stages || !tmp || !tmp2 || !stage_first || bufs_alloc(&jb, n))
		goto cleanup;

	if (pl->n)
		qsort(pl->calls, pl->n, sizeof(*pl->calls), by_transfer);
	links_build(pl, out, tmp, tmp2);
	if (pl->n)
		qsort(pl->calls, pl->n, sizeof(*pl->calls), by_stage);
	/* busy and in-receive samples of one stage: at most its calls; tmp/jb.v as scratch. */
	stages_build(pl, out, tmp, jb.v, tmp2, stage_first);
	out->gpu_invalid = pl->gpu_invalid;
	out->gpu_incomplete = pl->gpu_incomplete;
	if (!pl->gpu_incomplete) {
		gpu_merge(pl);
		for (size_t i = 0; i < out->nstages; i++)
			stage_gpu(pl, p, stage_first[i], stage_first[i + 1], &out->stages[i], out);
		for (size_t i = 0; i < out->nlinks; i++)
			link_gpu(pl, &out->links[i], out);
	}

	/* Verdicts per communicator (stages and links are sorted by comm first). */
	for (size_t i = 0; i < out->nstages;) {
		size_t end = i;
		while (end < out->nstages && out->stages[end].comm == out->stages[i].comm)
			end++;
		for (size_t j = i; j < end; j++) {
			jb.v[j - i] = out->stages[j].busy_ns;
			jb.judged[j - i] = out->stages[j].microbatches >= PIPELINE_MIN_SAMPLES;
		}
		judge(jb.v, jb.judged, end - i, p, jb.scratch, jb.scratch2, jb.excess, jb.z,
		      jb.slow);
		for (size_t j = i; j < end; j++) {
			struct pipeline_stage *s = &out->stages[j];
			s->judged = jb.judged[j - i];
			s->excess_ns = jb.excess[j - i];
			s->z = jb.z[j - i];
			s->host_slow = jb.slow[j - i];
		}
		/* The GPU clock: the stages with GPU timing, when two of them have it at least. */
		size_t ngpu = 0;
		for (size_t j = i; j < end; j++) {
			const struct pipeline_stage *s = &out->stages[j];
			jb.v[j - i] = s->gpu_busy_ns;
			jb.judged[j - i] = s->gpu_timed && s->gpu_microbatches >= PIPELINE_MIN_SAMPLES;
			ngpu += jb.judged[j - i];
		}
		if (ngpu >= 2)
			judge(jb.v, jb.judged, end - i, p, jb.scratch, jb.scratch2, jb.excess, jb.z,
			      jb.slow);
		for (size_t j = i; j < end; j++) {
			struct pipeline_stage *s = &out->stages[j];
			if (ngpu >= 2 && jb.judged[j - i]) {
				s->gpu_judged = true;
				s->gpu_excess_ns = jb.excess[j - i];
				s->gpu_z = jb.z[j - i];
				s->gpu_slow = jb.slow[j - i];
			}
			s->slow = s->host_slow || s->gpu_slow;
			out->slow_stages += s->slow;
			out->gpu_slow_stages += s->gpu_slow;
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
	free(stage_first);
	if (rc)
		pipeline_result_free(out);
	return rc;
}
