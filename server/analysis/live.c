/* SPDX-License-Identifier: Apache-2.0 */
/* In-memory collective instances fed by ingest (server/analysis/live.h). */
#include "server/analysis/live.h"

#include "common/array.h"
#include "common/hash.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* One (job, communicator, op): the last `window` sequence numbers of every rank. */
struct live_group {
	char *job;
	uint64_t key;
	uint8_t op;
	bool link;          /* a point-to-point link: rank 0 is `src` (its Sends), 1 `dst` (Recvs) */
	int32_t src, dst;   /* the link's ranks in the communicator */
	int32_t nranks;
	uint32_t requested; /* the job's window when the group was made */
	uint32_t window;    /* what the budget allowed */
	bool refused;       /* over the budget: its job is read from the store */
	int64_t *entry;     /* [rank * window + seq % window] */
	uint64_t *tag;      /* seq + 1 of the slot's entry, 0 empty */
	uint64_t *top;      /* per rank: highest seq seen + 1, 0 none */
	uint32_t *pid;      /* per rank, latest */
	uint8_t *inflight;  /* per rank: its newest call had not returned when its agent sealed */
	char **host;        /* per rank, latest (owned) */
};

#define LIVE_RECENT_SLOTS 64

struct live {
	size_t max_cells, cells;
	struct live_group *groups;
	size_t ngroups, cap;
};

int live_new(size_t max_cells, struct live **out)
{
	struct live *l = calloc(1, sizeof(*l));

	*out = NULL;
	if (!l)
		return -ENOMEM;
	l->max_cells = max_cells ? max_cells : LIVE_DEFAULT_MAX_CELLS;
	*out = l;
	return 0;
}

static void group_release(struct live *l, struct live_group *g)
{
	if (!g->refused)
		l->cells -= (size_t)g->nranks * g->window;
	for (int32_t r = 0; g->host && r < g->nranks; r++)
		free(g->host[r]);
	free(g->host);
	free(g->inflight);
	free(g->pid);
	free(g->top);
	free(g->tag);
	free(g->entry);
	free(g->job);
}

void live_free(struct live *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->ngroups; i++)
		group_release(l, &l->groups[i]);
	free(l->groups);
	free(l);
}

size_t live_cells(const struct live *l)
{
	return l->cells;
}

void live_job_drop(struct live *l, const char *job)
{
	for (size_t i = 0; i < l->ngroups;) {
		if (strcmp(l->groups[i].job, job) == 0) {
			group_release(l, &l->groups[i]);
			l->groups[i] = l->groups[--l->ngroups];
		} else {
			i++;
		}
	}
}

/* The group of (job, key, op), and for a link (src, dst; both -1 for a collective). */
static struct live_group *group_find(struct live *l, const char *job, uint64_t key, uint8_t op,
				     int32_t src, int32_t dst)
{
	for (size_t i = 0; i < l->ngroups; i++) {
		struct live_group *g = &l->groups[i];
		if (g->key == key && g->op == op && g->src == src && g->dst == dst &&
		    strcmp(g->job, job) == 0)
			return g;
	}
	return NULL;
}

/* The links held for `job`. */
static size_t job_links(const struct live *l, const char *job)
{
	size_t n = 0;

	for (size_t i = 0; i < l->ngroups; i++)
		n += l->groups[i].link && strcmp(l->groups[i].job, job) == 0;
	return n;
}

/* A new group; over the budget it is kept as `refused` (so its job falls back to the store). */
static int group_add(struct live *l, const char *job, uint64_t key, uint8_t op, int32_t src,
		     int32_t dst, int32_t nranks, uint32_t window, struct live_group **out)
{
	size_t left = l->cells < l->max_cells ? l->max_cells - l->cells : 0;
	struct live_group *g;

	if (SYSOM_ARRAY_RESERVE(l->groups, l->cap, l->ngroups, 16))
		return -ENOMEM;
	g = &l->groups[l->ngroups];
	memset(g, 0, sizeof(*g));
	if (!(g->job = strdup(job)))
		return -ENOMEM;
	g->key = key;
	g->op = op;
	g->src = src;
	g->dst = dst;
	g->link = src >= 0;
	g->nranks = nranks;
	g->requested = window;
	if ((size_t)nranks * window > left)
		window = (uint32_t)(left / (size_t)nranks);
	if (window < DIAGNOSIS_MIN_WINDOW) {
		g->refused = true;
		l->ngroups++;
		*out = g;
		return 0;
	}
	g->window = window;
	g->entry = calloc((size_t)nranks * window, sizeof(*g->entry));
	g->tag = calloc((size_t)nranks * window, sizeof(*g->tag));
	g->top = calloc((size_t)nranks, sizeof(*g->top));
	g->pid = calloc((size_t)nranks, sizeof(*g->pid));
	g->host = calloc((size_t)nranks, sizeof(*g->host));
	g->inflight = calloc((size_t)nranks, sizeof(*g->inflight));
	if (!g->entry || !g->tag || !g->top || !g->pid || !g->host || !g->inflight) {
		free(g->inflight);
		free(g->entry);
		free(g->tag);
		free(g->top);
		free(g->pid);
		free(g->host);
		free(g->job);
		return -ENOMEM;
	}
	l->cells += (size_t)nranks * window;
	l->ngroups++;
	*out = g;
	return 0;
}

/* The communicator record of (process, key) in the batch, or NULL. */
static const struct sysom_communicator *comm_of(const struct sysom_batch *b, uint32_t process,
						uint64_t key)
{
	for (uint32_t i = 0; i < b->communicator_count; i++)
		if (b->communicators[i].process == process && b->communicators[i].key == key)
			return &b->communicators[i];
	return NULL;
}

static const char *job_of(const struct sysom_batch *b, uint32_t process)
{
	for (uint32_t i = 0; i < b->job_rank_count; i++)
		if (b->job_ranks[i].process == process)
			return sysom_batch_string(b, b->job_ranks[i].job);
	return NULL;
}

int live_batch_add(struct live *l, const struct sysom_batch *b,
		   uint32_t (*window_of)(void *arg, const char *job), void *arg,
		   struct live_add_stats *st)
{
	const char *host = sysom_batch_string(b, b->node.hostname);
	const char *window_job = NULL; /* the job `window` belongs to (a string of the batch) */
	/* Groups met in this batch, by (key, op, link): a rank's Sends and Recvs alternate
	 * between links, and the lookup otherwise walks every group of every job. Group pointers
	 * move when a group is added or a job dropped: then the cache is emptied. */
	size_t recent[LIVE_RECENT_SLOTS];
	struct live_group *last = NULL;
	uint32_t window = 0;
	int rc;

	memset(recent, 0xff, sizeof(recent));
	for (uint32_t i = 0; i < b->nccl_call_count; i++) {
		const struct sysom_nccl_call *c = &b->nccl_calls[i];
		const struct sysom_communicator *m;
		const char *job;
		struct live_group *g = last;
		int32_t rank, src = -1, dst = -1, nranks;
		bool p2p = c->op == SYSOM_NCCL_SEND || c->op == SYSOM_NCCL_RECV;
		uint8_t op = p2p ? SYSOM_NCCL_SEND : c->op;

		/* Collectives, and point-to-point calls as links: a link's k-th Send and its k-th
		 * Recv are one transfer, the instance the hang detector watches. */
		if (((c->op < SYSOM_NCCL_ALL_REDUCE || c->op > SYSOM_NCCL_SCATTER) && !p2p) ||
		    !c->comm_key || c->process >= b->process_count ||
		    !(job = job_of(b, c->process)) || !job[0])
			continue;
		m = comm_of(b, c->process, c->comm_key);
		if (!m || m->nranks < 1 || m->nranks > STRAGGLER_MAX_RANKS) {
			st->unknown_size++;
			continue;
		}
		rank = c->rank >= 0 ? c->rank : m->rank;
		if (rank < 0 || rank >= m->nranks)
			continue;
		nranks = m->nranks;
		if (p2p) {
			if (c->peer < 0 || c->peer >= m->nranks || c->peer == rank)
				continue;
			src = c->op == SYSOM_NCCL_SEND ? rank : c->peer;
			dst = c->op == SYSOM_NCCL_SEND ? c->peer : rank;
			rank = c->op == SYSOM_NCCL_SEND ? 0 : 1;
			nranks = 2;
		}
		size_t hot = (size_t)(sysom_hash_mix(c->comm_key, (uint64_t)op << 48 ^
						     (uint64_t)(uint32_t)src << 24 ^ (uint32_t)dst) %
				       LIVE_RECENT_SLOTS);
		if (!g || g->key != c->comm_key || g->op != op || g->src != src || g->dst != dst ||
		    strcmp(g->job, job)) {
			g = recent[hot] < l->ngroups ? &l->groups[recent[hot]] : NULL;
			if (!g || g->key != c->comm_key || g->op != op || g->src != src ||
			    g->dst != dst || strcmp(g->job, job))
				g = group_find(l, job, c->comm_key, op, src, dst);
		}
		/* Asked once per job of the batch, not per call: the monitor's lookup walks every
		 * job it tracks, and a node sends tens of thousands of calls per batch. */
		if (job != window_job) {
			window = window_of(arg, job);
			window_job = job;
		}
		if (g && (g->nranks != nranks || g->requested != window)) {
			/* The communicator's size or the job's window changed: start the job over. */
			live_job_drop(l, job);
			g = last = NULL;
			memset(recent, 0xff, sizeof(recent));
		}
		if (!g && p2p && job_links(l, job) >= LIVE_MAX_LINKS_PER_JOB) {
			st->links_refused++;
			continue;
		}
		if (!g) {
			if ((rc = group_add(l, job, c->comm_key, op, src, dst, nranks, window, &g)))
				return rc;
			memset(recent, 0xff, sizeof(recent)); /* the array may have moved */
		}
		recent[hot] = (size_t)(g - l->groups);
		last = g;
		if (g->refused) {
			st->refused++;
			continue;
		}
		uint64_t top = g->top[rank];
		if (top > c->seq + g->window) { /* older than the window already holds */
			st->stale++;
			continue;
		}
		size_t slot = (size_t)rank * g->window + c->seq % g->window;
		g->entry[slot] = (int64_t)c->entry_ns;
		g->tag[slot] = c->seq + 1;
		/* An in-flight call (reported at a seal, still inside NCCL) has entered: its entry
		 * counts like any other, and the flag is the rank's newest call's until it returns. */
		if (c->seq + 1 > top) {
			g->top[rank] = c->seq + 1;
			g->inflight[rank] = (c->flags & SYSOM_NCCL_IN_FLIGHT) != 0;
		} else if (c->seq + 1 == top && !(c->flags & SYSOM_NCCL_IN_FLIGHT)) {
			g->inflight[rank] = 0;
		}
		g->pid[rank] = b->processes[c->process].tgid;
		if (!g->host[rank] || strcmp(g->host[rank], host)) {
			char *h = strdup(host);
			if (!h)
				return -ENOMEM;
			free(g->host[rank]);
			g->host[rank] = h;
		}
		if (p2p)
			st->p2p_calls++;
		else
			st->calls++;
	}
	return 0;
}

/* Emits group g's complete instances (every rank's slot holds that seq) of the last window,
 * ascending, those with their earliest entry in [from_ns, to_ns]. */
static int group_emit(const struct live_group *g, int64_t from_ns, int64_t to_ns,
		      store_collective_fn fn, void *arg)
{
	uint64_t low = UINT64_MAX;
	int rc = 0;

	for (int32_t r = 0; r < g->nranks; r++)
		low = g->top[r] < low ? g->top[r] : low;
	if (low == 0)
		return 0; /* some rank has entered nothing yet */
	uint64_t first = low > g->window ? low - g->window : 0;
	for (uint64_t seq = first; seq < low && !rc; seq++) {
		size_t col = seq % g->window;
		int64_t t0 = INT64_MAX;
		bool complete = true;
		for (int32_t r = 0; r < g->nranks && complete; r++) {
			size_t slot = (size_t)r * g->window + col;
			complete = g->tag[slot] == seq + 1;
			if (g->entry[slot] < t0)
				t0 = g->entry[slot];
		}
		if (!complete || t0 < from_ns || t0 > to_ns)
			continue;
		for (int32_t r = 0; r < g->nranks && !rc; r++) {
			size_t slot = (size_t)r * g->window + col;
			struct store_collective_call k = {
				.comm_key = g->key, .seq = seq, .op = g->op, .first_entry_ns = t0,
				.nranks = g->nranks, .rank = r, .entry_ns = g->entry[slot],
				.exit_ns = g->entry[slot], .peer = -1, .pid = g->pid[r],
				.hostname = g->host[r] ? g->host[r] : "", .job_rank = -1,
			};
			rc = fn(arg, &k);
		}
	}
	return rc;
}

int live_source(void *arg, const struct diagnosis_scope *scope, store_collective_fn fn,
		void *fn_arg)
{
	struct live *l = arg;
	int64_t from_ns = scope->from_ms > INT64_MAX / 1000000 ? INT64_MAX : scope->from_ms * 1000000;
	int64_t to_ns = scope->to_ms > INT64_MAX / 1000000 - 1 ? INT64_MAX
							       : scope->to_ms * 1000000 + 999999;
	bool any = false;
	int rc = 0;

	/* Collective groups only: links are the hang detector's (the store path's collective
	 * listing has no point-to-point calls either). */
	for (size_t i = 0; i < l->ngroups; i++)
		if (!l->groups[i].link && strcmp(l->groups[i].job, scope->job) == 0) {
			if (l->groups[i].refused)
				return -ENOENT;
			any = true;
		}
	if (!any)
		return -ENOENT;
	for (size_t i = 0; i < l->ngroups && !rc; i++) {
		const struct live_group *g = &l->groups[i];
		if (g->link || strcmp(g->job, scope->job) ||
		    (scope->has_comm && g->key != scope->comm))
			continue;
		rc = group_emit(g, from_ns, to_ns, fn, fn_arg);
	}
	return rc;
}

/* ---- progress of a job's groups (the hang detector's input) ------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* The view of group g in `v` (ranks in `rv`, nranks long; `t0s`, window long, is scratch). */
static void group_view(const struct live_group *g, struct live_rank_view *rv, int64_t *t0s,
		       struct live_group_view *v)
{
	uint64_t low = UINT64_MAX, high = 0;
	size_t n = 0;

	memset(v, 0, sizeof(*v));
	v->comm = g->key;
	v->op = g->op;
	v->link = g->link;
	v->src = g->src;
	v->dst = g->dst;
	v->nranks = g->nranks;
	v->ranks = rv;
	for (int32_t r = 0; r < g->nranks; r++) {
		uint64_t top = g->top[r];
		size_t slot = (size_t)r * g->window + (top ? (top - 1) % g->window : 0);
		rv[r] = (struct live_rank_view){
			.top = top, .in_flight = g->inflight[r] != 0, .pid = g->pid[r],
			.host = g->host[r] ? g->host[r] : "",
			.last_entry_ns = top && g->tag[slot] == top ? g->entry[slot] : 0,
		};
		low = top < low ? top : low;
		high = top > high ? top : high;
	}
	v->pending_seq = low;
	/* The first instance some rank has not entered: when did the others enter it? When no
	 * rank holds it (tracing began after it: a rank never seen at all), the newest instance
	 * instead: the others wait there now. */
	for (int pass = 0; pass < 2 && high > low && !v->pending_t0_ns; pass++) {
		uint64_t seq = pass ? high - 1 : low;
		size_t col = seq % g->window;
		for (int32_t r = 0; r < g->nranks; r++) {
			size_t slot = (size_t)r * g->window + col;
			if (g->top[r] > seq && g->tag[slot] == seq + 1 &&
			    (!v->pending_t0_ns || g->entry[slot] < v->pending_t0_ns))
				v->pending_t0_ns = g->entry[slot];
		}
	}
	/* The spacing of the window's complete instances: their first entries, one seq apart. */
	uint64_t first = low > g->window ? low - g->window : 0;
	for (uint64_t seq = first; seq < low; seq++) {
		size_t col = seq % g->window;
		int64_t t0 = INT64_MAX;
		bool complete = true;
		for (int32_t r = 0; r < g->nranks && complete; r++) {
			size_t slot = (size_t)r * g->window + col;
			complete = g->tag[slot] == seq + 1;
			if (complete && g->entry[slot] < t0)
				t0 = g->entry[slot];
		}
		if (complete)
			t0s[n++] = t0;
		else if (n)
			n = 0; /* a hole: spacing across it is not one instance's */
	}
	if (n >= 2) {
		for (size_t i = 0; i + 1 < n; i++)
			t0s[i] = t0s[i + 1] - t0s[i];
		qsort(t0s, n - 1, sizeof(*t0s), cmp_i64);
		v->interval_ns = t0s[(n - 1) / 2];
	}
}

int live_job_groups(const struct live *l, const char *job, live_group_fn fn, void *arg)
{
	int rc = 0;

	for (size_t i = 0; i < l->ngroups && !rc; i++) {
		const struct live_group *g = &l->groups[i];
		struct live_group_view v;
		if (g->refused || strcmp(g->job, job))
			continue;
		struct live_rank_view *rv = calloc((size_t)g->nranks, sizeof(*rv));
		int64_t *t0s = calloc(g->window, sizeof(*t0s));
		if (!rv || !t0s) {
			free(rv);
			free(t0s);
			return -ENOMEM;
		}
		group_view(g, rv, t0s, &v);
		rc = fn(arg, &v);
		free(rv);
		free(t0s);
	}
	return rc;
}

int live_job_in_flight(const struct live *l, const char *job,
		       int (*fn)(void *arg, const char *host, uint32_t pid), void *arg)
{
	int rc = 0;

	for (size_t i = 0; i < l->ngroups && !rc; i++) {
		const struct live_group *g = &l->groups[i];
		if (g->refused || strcmp(g->job, job))
			continue;
		for (int32_t r = 0; r < g->nranks && !rc; r++)
			if (g->inflight[r] && g->pid[r])
				rc = fn(arg, g->host[r] ? g->host[r] : "", g->pid[r]);
	}
	return rc;
}
