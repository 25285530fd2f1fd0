/* SPDX-License-Identifier: Apache-2.0 */
/* Straggler detection and layered diagnosis of one training job (server/analysis/diagnosis.h). */
#include "server/analysis/diagnosis.h"
#include "server/analysis/hostanomaly.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/hash.h"
#include "server/analysis/seqmatch.h"
#include "server/analysis/diagnosis_render.h"
#include "server/analysis/gpuhealth.h"
#include "server/query/folded.h"
#include "server/analysis/layers.h"
#include "server/query/limits.h"
#include "server/http/render.h"


/* ---- gathering collective instances into communication groups --------------------------- */

/* One communication group being analysed. */
struct strag_group {
	uint64_t key;
	int32_t nranks;
	struct straggler_group *g;
	uint32_t *pid;      /* by rank, 0 unknown */
	char **host;        /* by rank, NULL unknown */
	uint32_t window;    /* instances kept: the requested window, or less for huge groups */
	int64_t *t0;        /* earliest entry of the latest `window` complete instances (a ring) */
	uint32_t nt0, t0_next;
};

struct strag_doc {
	struct strag_group *groups;
	size_t ngroups, cap;
	size_t cells;       /* window x nranks allocated */
	uint32_t window;
	size_t skipped;     /* instances of groups of unknown size or over the cell budget */
	uint64_t instances; /* read from the store */
	/* the instance being gathered */
	bool have;
	uint64_t key, seq;
	uint8_t op;
	int32_t nranks;
	struct strag_group *cur; /* NULL: this instance is skipped */
	int64_t *entry;     /* [nranks] */
	bool *present;
	int32_t seen;
	/* Calls of communicators of unknown size (init missed: per-process keys), kept for
	 * seqmatch (bounded: BLIND_MAX_CALLS, the rest counted as skipped). */
	struct blind_call *blind;
	size_t nblind, blind_cap;
	bool replaying;
	uint32_t recovered, unmatched; /* communicators recovered / left unanalysed */
	/* Keys with at least one complete instance (the first pass); a known key without any
	 * (only some ranks' init was seen) is treated like an unknown one. NULL: no filter. */
	uint64_t *complete_keys;
	size_t ncomplete;
};

/* The first pass: which communicator keys had a complete instance. */
struct key_scan {
	uint64_t key, seq;
	uint8_t op;
	int32_t nranks, seen;
	bool have;
	uint64_t *keys;
	size_t nkeys, cap;
};

static int key_scan_end(struct key_scan *k)
{
	if (!k->have || k->nranks < 1 || k->seen < k->nranks)
		return 0;
	for (size_t i = 0; i < k->nkeys; i++)
		if (k->keys[i] == k->key)
			return 0;
	if (SYSOM_ARRAY_RESERVE(k->keys, k->cap, k->nkeys, 16))
		return -ENOMEM;
	k->keys[k->nkeys++] = k->key;
	return 0;
}

static int key_scan_call(void *arg, const struct store_collective_call *c)
{
	struct key_scan *k = arg;
	int rc;

	if (!k->have || c->comm_key != k->key || c->op != k->op || c->seq != k->seq) {
		if ((rc = key_scan_end(k)))
			return rc;
		*k = (struct key_scan){ .key = c->comm_key, .seq = c->seq, .op = c->op,
					.nranks = c->nranks, .have = true, .keys = k->keys,
					.nkeys = k->nkeys, .cap = k->cap };
	}
	k->seen++;
	return 0;
}

static bool key_complete(const struct strag_doc *d, uint64_t key)
{
	if (!d->complete_keys)
		return true;
	for (size_t i = 0; i < d->ncomplete; i++)
		if (d->complete_keys[i] == key)
			return true;
	return false;
}

#define BLIND_MAX_CALLS 200000
#define SEED_SEQMATCH 0x5359534f4d53514dull

struct blind_call {
	uint64_t comm_key;
	uint32_t pid;
	int32_t job_rank;
	uint8_t op;
	uint64_t bytes;
	int64_t entry_ns, exit_ns;
	char *hostname;  /* owned */
	/* after matching */
	uint64_t key;
	int64_t seq;
	int32_t rank, nranks;
};

static void strag_doc_free(struct strag_doc *d)
{
	for (size_t i = 0; i < d->ngroups; i++) {
		struct strag_group *g = &d->groups[i];
		straggler_group_free(g->g);
		for (int32_t r = 0; g->host && r < g->nranks; r++)
			free(g->host[r]);
		free(g->host);
		free(g->pid);
		free(g->t0);
	}
	free(d->groups);
	free(d->entry);
	free(d->present);
	for (size_t i = 0; i < d->nblind; i++)
		free(d->blind[i].hostname);
	free(d->blind);
	free(d->complete_keys);
}

/* The group of a communicator (created on first sight), or NULL when it cannot be analysed
 * (size unknown, over the budget: counted). */
static int strag_group_of(struct strag_doc *d, uint64_t key, int32_t nranks,
			  struct strag_group **out)
{
	struct strag_group *g;
	int rc;

	*out = NULL;
	for (size_t i = 0; i < d->ngroups; i++)
		if (d->groups[i].key == key) {
			*out = d->groups[i].nranks == nranks ? &d->groups[i] : NULL;
			return 0;
		}
	/* The cell budget bounds memory: a group too large for the full window gets a shorter
	 * one (reported as its "window"), down to DIAGNOSIS_MIN_WINDOW, then it is skipped. */
	uint32_t window = d->window;
	size_t left = d->cells < QUERY_MAX_STRAGGLER_CELLS ? QUERY_MAX_STRAGGLER_CELLS - d->cells : 0;
	if (nranks >= 1 && (size_t)nranks * window > left)
		window = (uint32_t)(left / (size_t)nranks);
	if (nranks < 1 || nranks > STRAGGLER_MAX_RANKS ||
	    window < (d->window < DIAGNOSIS_MIN_WINDOW ? d->window : DIAGNOSIS_MIN_WINDOW)) {
		d->skipped++;
		return 0;
	}
	if (SYSOM_ARRAY_RESERVE(d->groups, d->cap, d->ngroups, 8))
		return -ENOMEM;
	g = &d->groups[d->ngroups];
	memset(g, 0, sizeof(*g));
	g->key = key;
	g->nranks = nranks;
	g->pid = calloc((size_t)nranks, sizeof(*g->pid));
	g->host = calloc((size_t)nranks, sizeof(*g->host));
	g->window = window;
	g->t0 = calloc(window, sizeof(*g->t0));
	if (!g->pid || !g->host || !g->t0 || (rc = straggler_group_new(nranks, window, &g->g))) {
		free(g->pid);
		free(g->host);
		free(g->t0);
		return -ENOMEM;
	}
	d->ngroups++;
	d->cells += (size_t)nranks * window;
	*out = g;
	return 0;
}

static void strag_instance_end(struct strag_doc *d)
{
	if (!d->have || !d->cur)
		return;
	if (d->seen == d->nranks) {
		struct strag_group *g = d->cur;
		int64_t t0 = d->entry[0];

		for (int32_t r = 1; r < d->nranks; r++)
			t0 = d->entry[r] < t0 ? d->entry[r] : t0;
		straggler_group_add(g->g, d->entry);
		g->t0[g->t0_next] = t0;
		g->t0_next = (g->t0_next + 1) % g->window;
		if (g->nt0 < g->window)
			g->nt0++;
	} else
		straggler_group_add_incomplete(d->cur->g, d->present);
}

static int blind_add(struct strag_doc *d, const struct store_collective_call *c)
{
	struct blind_call *b;

	if (d->nblind >= BLIND_MAX_CALLS) {
		d->skipped++;
		return 0;
	}
	if (SYSOM_ARRAY_RESERVE(d->blind, d->blind_cap, d->nblind, 1024))
		return -ENOMEM;
	b = &d->blind[d->nblind];
	*b = (struct blind_call){ .comm_key = c->comm_key, .pid = c->pid, .job_rank = c->job_rank,
				  .op = c->op, .bytes = c->bytes, .entry_ns = c->entry_ns,
				  .exit_ns = c->exit_ns,
				  .hostname = strdup(c->hostname ? c->hostname : "") };
	if (!b->hostname)
		return -ENOMEM;
	d->nblind++;
	return 0;
}

static int strag_call(void *arg, const struct store_collective_call *c)
{
	struct strag_doc *d = arg;
	int rc;

	/* A collective of a communicator whose size is unknown: its ranks are found by
	 * blind_resolve, at the end. */
	if (!d->replaying && (c->nranks < 1 || !key_complete(d, c->comm_key)) &&
	    c->op >= SYSOM_NCCL_ALL_REDUCE && c->op <= SYSOM_NCCL_SCATTER) {
		strag_instance_end(d);
		d->have = false;
		return blind_add(d, c);
	}

	if (!d->have || c->comm_key != d->key || c->op != d->op || c->seq != d->seq) {
		strag_instance_end(d);
		d->have = true;
		d->key = c->comm_key;
		d->op = c->op;
		d->seq = c->seq;
		d->nranks = c->nranks;
		d->seen = 0;
		d->cur = NULL;
		d->instances++;
		/* Collectives only: point-to-point sequence numbers do not make a barrier. */
		if (c->op < SYSOM_NCCL_ALL_REDUCE || c->op > SYSOM_NCCL_SCATTER)
			return 0;
		if ((rc = strag_group_of(d, c->comm_key, c->nranks, &d->cur)))
			return rc;
		if (!d->cur)
			return 0;
		int64_t *e = realloc(d->entry, (size_t)c->nranks * sizeof(*e));
		bool *p = e ? realloc(d->present, (size_t)c->nranks * sizeof(*p)) : NULL;
		if (e)
			d->entry = e;
		if (!e || !p)
			return -ENOMEM;
		d->present = p;
		memset(d->present, 0, (size_t)c->nranks * sizeof(*p));
	}
	if (!d->cur || c->rank < 0 || c->rank >= d->nranks || d->present[c->rank])
		return 0;
	d->present[c->rank] = true;
	d->entry[c->rank] = c->entry_ns;
	d->seen++;
	struct strag_group *g = d->cur;
	g->pid[c->rank] = c->pid;
	if (!g->host[c->rank] || strcmp(g->host[c->rank], c->hostname ? c->hostname : "")) {
		free(g->host[c->rank]);
		if (!(g->host[c->rank] = strdup(c->hostname ? c->hostname : "")))
			return -ENOMEM;
	}
	return 0;
}

static int grow(void **arr, size_t *cap, size_t n, size_t size)
{
	return sysom_array_reserve(arr, cap, n, size, 64, SIZE_MAX);
}


static int by_excess_desc(const void *a, const void *b)
{
	const struct straggler_rank *x = a, *y = b;

	return x->excess_ns < y->excess_ns ? 1 : x->excess_ns > y->excess_ns ? -1 : x->rank - y->rank;
}

/* Fills the pod of the straggler entry of this rank's process, when it has one. */
static int strag_pod_visit(void *arg, const struct store_job_rank *j)
{
	struct straggler_report *rep = arg;

	if (!j->identity.known || !j->identity.pod_name[0])
		return 0;
	for (size_t i = 0; i < rep->nstragglers; i++) {
		struct straggler_entry *e = &rep->stragglers[i];

		if (e->rank != j->rank || e->pid != j->pid || e->pod)
			continue;
		e->pod_namespace = strdup(j->identity.pod_namespace);
		e->pod = strdup(j->identity.pod_name);
		if (!e->pod_namespace || !e->pod)
			return -ENOMEM;
	}
	return 0;
}

/* Adds (or merges into) the job-level entry of a straggling rank; returns 1 when the entry is
 * new (the caller diagnoses it), 0 when merged, or -ENOMEM. */
static int strag_job_add(struct straggler_report *rep, size_t *cap, const struct strag_group *g,
			 const struct straggler_rank *r)
{
	struct straggler_entry *e;
	uint64_t *comms;

	for (size_t i = 0; i < rep->nstragglers; i++) {
		e = &rep->stragglers[i];
		if (e->rank != r->rank || e->pid != g->pid[r->rank])
			continue;
		if (!(comms = realloc(e->communicators, (e->ncommunicators + 1) * sizeof(*comms))))
			return -ENOMEM;
		e->communicators = comms;
		e->communicators[e->ncommunicators++] = g->key;
		if (r->persistent)
			e->persistent = true;
		if (r->excess_ns / 1e6 > e->max_excess_ms)
			e->max_excess_ms = r->excess_ns / 1e6;
		return 0;
	}
	if (grow((void **)&rep->stragglers, cap, rep->nstragglers, sizeof(*rep->stragglers)))
		return -ENOMEM;
	e = &rep->stragglers[rep->nstragglers];
	*e = (struct straggler_entry){ .rank = r->rank, .pid = g->pid[r->rank],
				       .hostname = strdup(g->host[r->rank] ? g->host[r->rank] : ""),
				       .communicators = malloc(sizeof(uint64_t)),
				       .ncommunicators = 1, .persistent = r->persistent,
				       .max_excess_ms = r->excess_ns / 1e6 };
	rep->nstragglers++;
	if (!e->hostname || !e->communicators)
		return -ENOMEM;
	e->communicators[0] = g->key;
	return 1;
}


/* ---- layered diagnosis of a straggler (GPU, then CPU; server/analysis/layers.h) ---------- */

#define DIAGNOSE_MAX_STRAGGLERS 4

struct gk_row {
	int32_t rank;
	char *name;
	uint64_t count, total_ns;
	uint64_t hist[SYSOM_GPU_HIST_BUCKETS];
};

struct gk_rows {
	struct gk_row *rows;
	size_t n, cap;
	bool loaded;
};

static int gk_kernel(void *arg, const struct store_gpu_kernel_row *r)
{
	struct gk_rows *k = arg;
	struct gk_row *last = k->n ? &k->rows[k->n - 1] : NULL;

	if (r->who.job_rank < 0)
		return 0;
	if (!last || last->rank != r->who.job_rank || strcmp(last->name, r->name) != 0) {
		if (SYSOM_ARRAY_RESERVE(k->rows, k->cap, k->n, 256))
			return -ENOMEM;
		last = &k->rows[k->n];
		*last = (struct gk_row){ .rank = r->who.job_rank, .name = strdup(r->name) };
		if (!last->name)
			return -ENOMEM;
		k->n++;
	}
	last->count += r->count;
	last->total_ns += r->total_ns;
	for (int i = 0; i < SYSOM_GPU_HIST_BUCKETS; i++)
		last->hist[i] += r->hist[i];
	return 0;
}

static void gk_free(struct gk_rows *k)
{
	for (size_t i = 0; i < k->n; i++)
		free(k->rows[i].name);
	free(k->rows);
}

/* Adds the duration histogram of `name` on `rank` (every row of it) to `hist`. */
static void gk_hist_add(const struct gk_rows *k, int32_t rank, const char *name, uint64_t *hist)
{
	for (size_t i = 0; i < k->n; i++)
		if (k->rows[i].rank == rank && strcmp(k->rows[i].name, name) == 0)
			for (int b = 0; b < SYSOM_GPU_HIST_BUCKETS; b++)
				hist[b] += k->rows[i].hist[b];
}

/* Mean GPU ns per execution of `name` on `rank` (every row of it), or -1. */
static double gk_mean(const struct gk_rows *k, int32_t rank, const char *name)
{
	uint64_t count = 0, total = 0;

	for (size_t i = 0; i < k->n; i++)
		if (k->rows[i].rank == rank && strcmp(k->rows[i].name, name) == 0) {
			count += k->rows[i].count;
			total += k->rows[i].total_ns;
		}
	return count ? (double)total / (double)count : -1;
}

static int kcmp_by_excess(const void *a, const void *b)
{
	const struct kernel_cmp *x = a, *y = b;
	double ex = ((double)x->count) * (x->mean_ns - x->healthy_ns);
	double ey = ((double)y->count) * (y->mean_ns - y->healthy_ns);

	return ex < ey ? 1 : ex > ey ? -1 : strcmp(x->name, y->name);
}

/* A launching stack of one kernel, from a "stack;[gpu] name ns" folded line. */
struct launch_stack {
	const char *stack; /* into the folded text: stack_len bytes, without the kernel frame */
	size_t stack_len;
	uint64_t ns;
};

static int launch_stack_cmp(const void *a, const void *b)
{
	const struct launch_stack *x = a, *y = b;

	return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}
/* The straggler's launching stacks of kernel `name` holding the most of its GPU time, from
 * the gpu-time folded text, most first (none when the kernel's launches were not traced). */
static int launch_stacks_of(const struct byte_buf *folded, const char *name,
			    struct diagnosis_kernel *out)
{
	struct launch_stack top[DIAGNOSIS_TOP_STACKS + 1];
	const char *p = (const char *)folded->data, *end = p + folded->len;
	size_t n = 0, name_len = strlen(name);
	uint64_t total = 0;

	while (p && p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p)), *space, *leaf;
		size_t len = eol ? (size_t)(eol - p) : (size_t)(end - p);
		char *tail;
		unsigned long long ns;

		space = memrchr(p, ' ', len);
		leaf = space ? memrchr(p, ';', (size_t)(space - p)) : NULL;
		leaf = leaf ? leaf + 1 : p;
		/* "[gpu] name" exactly as the leaf frame */
		if (space && (size_t)(space - leaf) == name_len + 6 && memcmp(leaf, "[gpu] ", 6) == 0 &&
		    memcmp(leaf + 6, name, name_len) == 0 && leaf > p) {
			static const char none[] = "[no launch stack]";
			size_t stack_len = (size_t)(leaf - 1 - p);
			bool unlaunched = stack_len >= sizeof(none) - 1 &&
					  memcmp(leaf - sizeof(none), none, sizeof(none) - 1) == 0;
			ns = strtoull(space + 1, &tail, 10);
			if (!unlaunched && (tail == p + len || *tail == '\n')) {
				top[n] = (struct launch_stack){ p, stack_len, ns };
				total += ns;
				if (++n > DIAGNOSIS_TOP_STACKS) {
					qsort(top, n, sizeof(*top), launch_stack_cmp);
					n = DIAGNOSIS_TOP_STACKS;
				}
			}
		}
		p = eol ? eol + 1 : NULL;
	}
	qsort(top, n, sizeof(*top), launch_stack_cmp);
	for (size_t i = 0; i < n; i++) {
		struct diagnosis_launch_stack *ls = &out->stacks[out->nstacks];
		/* The text is not NUL-terminated: copy, do not strndup (which may read on). */
		if (!(ls->stack = malloc(top[i].stack_len + 1)))
			return -ENOMEM;
		memcpy(ls->stack, top[i].stack, top[i].stack_len);
		ls->stack[top[i].stack_len] = '\0';
		ls->gpu_ns = top[i].ns;
		ls->share = total ? (double)top[i].ns / (double)total : 0.0;
		out->nstacks++;
	}
	return 0;
}

/* The GPU layer: the straggler's kernels against the healthy ranks' medians, each with the
 * launching stacks that hold most of its GPU time on the straggler. */
static void diagnose_gpu(const struct diagnosis_ctx *ctx, const struct store_sample_filter *range,
			 const struct gk_rows *k, const struct strag_group *g,
			 const struct straggler_rank *ranks, int32_t s, double threshold,
			 struct diagnosis_gpu *out)
{
	struct byte_buf folded = { 0 };
	struct kernel_cmp *cmp = calloc(k->n + 1, sizeof(*cmp));
	double *means = calloc((size_t)g->nranks + 1, sizeof(*means));
	size_t n = 0;

	out->verdict = GPU_NO_DATA;
	out->slowdown = 1;
	if (!cmp || !means)
		goto cleanup;
	for (size_t i = 0; i < k->n; i++) {
		const struct gk_row *r = &k->rows[i];
		bool dup = false;
		size_t nh = 0;

		if (r->rank != s)
			continue;
		for (size_t j = 0; j < n && !dup; j++)
			dup = strcmp(cmp[j].name, r->name) == 0;
		if (dup)
			continue;
		for (int32_t h = 0; h < g->nranks; h++) {
			double m;
			if (h == s || ranks[h].straggler || (m = gk_mean(k, h, r->name)) < 0)
				continue;
			means[nh++] = m;
		}
		if (!nh)
			continue;
		cmp[n].name = r->name;
		cmp[n].mean_ns = gk_mean(k, s, r->name);
		cmp[n].count = 0;
		for (size_t j = 0; j < k->n; j++)
			if (k->rows[j].rank == s && strcmp(k->rows[j].name, r->name) == 0)
				cmp[n].count += k->rows[j].count;
		cmp[n].healthy_ns = layers_median(means, nh);
		n++;
	}
	out->verdict = layers_gpu_classify(cmp, n, threshold, &out->slowdown);
	qsort(cmp, n, sizeof(*cmp), kcmp_by_excess);
	if (n && ctx->gpu_time_folded) {
		struct store_sample_filter f = *range;
		f.has_rank = true;
		f.rank = s;
		if (ctx->gpu_time_folded(ctx->profiles_arg, &f, QUERY_DEFAULT_STACK_LIMIT, &folded))
			byte_buf_free(&folded); /* the kernels without their stacks */
	}
	for (size_t i = 0; i < n && i < DIAGNOSIS_TOP; i++) {
		struct diagnosis_kernel *kr = &out->kernels[out->nkernels];
		if (!(kr->name = strdup(cmp[i].name)))
			goto cleanup;
		out->nkernels++;
		kr->count = cmp[i].count;
		kr->mean_ns = cmp[i].mean_ns;
		kr->healthy_ns = cmp[i].healthy_ns;
		{
			uint64_t healthy[SYSOM_GPU_HIST_BUCKETS] = { 0 }, strag[SYSOM_GPU_HIST_BUCKETS] = { 0 };
			for (int32_t h = 0; h < g->nranks; h++)
				if (h != s && !ranks[h].straggler)
					gk_hist_add(k, h, cmp[i].name, healthy);
			gk_hist_add(k, s, cmp[i].name, strag);
			kr->slow_share = layers_gpu_slow_share(healthy, strag, SYSOM_GPU_HIST_BUCKETS);
		}
		if (launch_stacks_of(&folded, cmp[i].name, kr))
			goto cleanup;
	}
	out->present = true;
cleanup:
	byte_buf_free(&folded);
	free(cmp);
	free(means);
}

/* The sampling rates (samples per CPU-second) of the nodes named `host[0]` and `host[1]`. */
struct node_rates {
	const char *host[2];
	double rate[2];
	int matches[2];
};

static int node_rate_visit(void *arg, const struct store_node *n)
{
	struct node_rates *nr = arg;

	for (int i = 0; i < 2; i++)
		if (nr->host[i] && n->hostname && !strcmp(nr->host[i], n->hostname)) {
			nr->rate[i] = (double)n->sample_hz * n->sample_rate_ppm / 1e6;
			nr->matches[i]++;
		}
	return 0;
}

/*
 * Samples per CPU-second of the healthy rank's node ([0]) and the straggler's ([1]): both 0
 * (compare raw counts) unless both nodes are known by a unique hostname with a rate.
 */
static void cpu_sample_rates(const struct diagnosis_ctx *ctx, const char *healthy_host,
			     const char *straggler_host, double rate[2])
{
	struct node_rates nr = { .host = { healthy_host, straggler_host } };

	rate[0] = rate[1] = 0;
	/* One node samples both at one rate: counts compare as they are (and the node list, a
	 * scan of every node, is not read). */
	if (!healthy_host || !straggler_host || !strcmp(healthy_host, straggler_host) ||
	    store_nodes_list(ctx->store, node_rate_visit, &nr))
		return;
	if (nr.matches[0] == 1 && nr.matches[1] == 1 && nr.rate[0] > 0 && nr.rate[1] > 0) {
		rate[0] = nr.rate[0];
		rate[1] = nr.rate[1];
	}
}

/* The CPU layer: functions on more of the straggler's stacks than of healthy rank `h`'s. The
 * two ranks' profiles (the profile service's folded text) side by side as a typed diff;
 * `rate`: cpu_sample_rates. */
static void diagnose_cpu(const struct diagnosis_ctx *ctx, const struct store_sample_filter *range,
			 int32_t s, int32_t h, const double rate[2], double *top_pp, char **top_fn,
			 struct diagnosis_cpu *out)
{
	const int32_t side_rank[2] = { h, s };
	struct byte_buf text[2] = { { 0 }, { 0 } };
	struct folded_diff diff = { 0 };
	struct cpu_delta *d = NULL;
	struct cpu_stack *stacks = NULL;
	uint64_t totals[2] = { 0, 0 };
	int n = 0, nstacks = 0;

	*top_pp = 0;
	*top_fn = NULL;
	for (int side = 0; side < 2; side++) {
		struct store_sample_filter f = *range;
		f.has_rank = true;
		f.rank = side_rank[side];
		if (ctx->folded(ctx->profiles_arg, &f, QUERY_DEFAULT_STACK_LIMIT, &text[side]))
			goto cleanup;
	}
	if (folded_diff_build(&text[0], &text[1], &diff))
		goto cleanup;
	if ((n = layers_cpu_diff_deltas(&diff, &d, totals)) < 0)
		goto cleanup;
	out->compared_with_rank = h;
	out->straggler_samples = totals[1];
	out->healthy_samples = totals[0];
	/* Too few samples on a side and one sample is many percentage points: no verdict. */
	out->enough_samples = totals[0] >= LAYERS_CPU_MIN_SAMPLES &&
			      totals[1] >= LAYERS_CPU_MIN_SAMPLES;
	for (int i = 0; out->enough_samples && i < n && i < DIAGNOSIS_TOP; i++) {
		struct diagnosis_cpu_function *fn = &out->functions[out->nfunctions];
		double pp = 100 * (d[i].b_fraction - d[i].a_fraction);
		double z = layers_cpu_z(d[i].a_fraction, d[i].b_fraction, totals[0], totals[1]);
		double a_count = d[i].a_fraction * (double)totals[0];
		double b_count = d[i].b_fraction * (double)totals[1];
		double time_z = layers_cpu_time_z(a_count, b_count, rate[0], rate[1]);
		if (pp <= 0)
			break;
		/* The top function counts only when its difference is no accident of sampling, and
		 * the straggler spends more CPU time in it, not only a larger share of less time. */
		if (i == 0 && z >= LAYERS_CPU_MIN_Z && time_z >= LAYERS_CPU_MIN_Z) {
			*top_pp = pp;
			*top_fn = strdup(d[i].name);
		}
		if (!(fn->function = strdup(d[i].name)))
			goto cleanup;
		fn->healthy_fraction = d[i].a_fraction;
		fn->straggler_fraction = d[i].b_fraction;
		fn->z = z;
		fn->time_z = time_z;
		fn->healthy_cpu_s = rate[0] > 0 ? a_count / rate[0] : NAN;
		fn->straggler_cpu_s = rate[1] > 0 ? b_count / rate[1] : NAN;
		out->nfunctions++;
	}
	/* The full stacks through the top function, most of the difference first. */
	if (*top_fn && (nstacks = layers_cpu_diff_stacks(&diff, *top_fn, totals,
							 DIAGNOSIS_TOP_STACKS, &stacks)) > 0)
		for (int i = 0; i < nstacks; i++) {
			struct diagnosis_cpu_stack *st = &out->stacks[out->nstacks++];
			st->stack = stacks[i].stack;
			stacks[i].stack = NULL;
			st->healthy_fraction = stacks[i].a_fraction;
			st->straggler_fraction = stacks[i].b_fraction;
		}
	out->present = true;
cleanup:
	layers_cpu_stacks_free(stacks, nstacks > 0 ? nstacks : 0);
	layers_cpu_deltas_free(d, n > 0 ? n : 0);
	folded_diff_free(&diff);
	byte_buf_free(&text[0]);
	byte_buf_free(&text[1]);
}

/* ---- the OS layer: the straggler's threads and CPUs against the healthy ranks' ----------- */


/* One rank's OS signals summed over its processes' threads. */
struct os_rank {
	int32_t rank;
	char *hostname;
	uint64_t oncpu_ns, runq_wait_ns, runq_waits, invol, vol, migrations, numa_migrations;
	uint64_t pages, hardirq_ns, softirq_ns;
	uint64_t hist[SYSOM_RUNQ_HIST_BUCKETS];
	uint64_t cpus[SYSOM_CPU_MASK_WORDS];
};

struct os_cpu {
	char *hostname;
	uint32_t cpu;
	uint64_t window_ms, busy_ns, hardirq_ns, hardirq_count;
	uint64_t softirq_ns[SYSOM_SOFTIRQ_COUNT], softirq_count[SYSOM_SOFTIRQ_COUNT];
};

struct os_irq {
	char *hostname, *name;
	uint32_t cpu, irq;
	uint64_t count, ns;
};

struct os_rows {
	struct hostanomaly host;   /* the job's host anomaly scores, read with the rows */
	struct os_rank *ranks;
	size_t nranks, cap_ranks;
	struct os_cpu *cpus;
	size_t ncpus, cap_cpus;
	struct os_irq *irqs;
	size_t nirqs, cap_irqs;
	bool loaded, truncated;
};

static int os_thread_take(void *arg, const struct store_os_thread_row *r)
{
	struct os_rows *o = arg;
	struct os_rank *k = o->nranks ? &o->ranks[o->nranks - 1] : NULL;

	if (r->who.job_rank < 0)
		return 0;
	if (!k || k->rank != r->who.job_rank) {
		if (grow((void **)&o->ranks, &o->cap_ranks, o->nranks, sizeof(*o->ranks)))
			return -ENOMEM;
		k = &o->ranks[o->nranks++];
		memset(k, 0, sizeof(*k));
		k->rank = r->who.job_rank;
		if (!(k->hostname = strdup(r->who.hostname ? r->who.hostname : "")))
			return -ENOMEM;
	}
	k->oncpu_ns += r->oncpu_ns;
	k->runq_wait_ns += r->runq_wait_ns;
	k->runq_waits += r->runq_waits;
	k->invol += r->involuntary_switches;
	k->vol += r->voluntary_switches;
	k->migrations += r->migrations;
	k->numa_migrations += r->numa_migrations;
	k->pages += r->pages_migrated;
	k->hardirq_ns += r->hardirq_ns;
	k->softirq_ns += r->softirq_ns;
	for (int i = 0; i < SYSOM_RUNQ_HIST_BUCKETS; i++)
		k->hist[i] += r->runq_hist[i];
	for (int i = 0; i < SYSOM_CPU_MASK_WORDS; i++)
		k->cpus[i] |= r->cpus[i];
	return 0;
}

static int os_cpu_take(void *arg, const struct store_os_cpu_row *r)
{
	struct os_rows *o = arg;
	struct os_cpu *c = o->ncpus ? &o->cpus[o->ncpus - 1] : NULL;

	if (!c || c->cpu != r->cpu || strcmp(c->hostname, r->hostname ? r->hostname : "")) {
		if (grow((void **)&o->cpus, &o->cap_cpus, o->ncpus, sizeof(*o->cpus)))
			return -ENOMEM;
		c = &o->cpus[o->ncpus++];
		memset(c, 0, sizeof(*c));
		c->cpu = r->cpu;
		if (!(c->hostname = strdup(r->hostname ? r->hostname : "")))
			return -ENOMEM;
	}
	c->window_ms += (uint64_t)(r->window_ms > 0 ? r->window_ms : 0);
	c->busy_ns += r->busy_ns;
	c->hardirq_ns += r->hardirq_ns;
	c->hardirq_count += r->hardirq_count;
	for (int i = 0; i < SYSOM_SOFTIRQ_COUNT; i++) {
		c->softirq_ns[i] += r->softirq_ns[i];
		c->softirq_count[i] += r->softirq_count[i];
	}
	return 0;
}

static int os_irq_take(void *arg, const struct store_os_irq_row *r)
{
	struct os_rows *o = arg;

	if (grow((void **)&o->irqs, &o->cap_irqs, o->nirqs, sizeof(*o->irqs)))
		return -ENOMEM;
	struct os_irq *q = &o->irqs[o->nirqs];
	*q = (struct os_irq){ strdup(r->hostname ? r->hostname : ""), strdup(r->name ? r->name : ""),
			      r->cpu, r->irq, r->count, r->ns };
	o->nirqs++;
	return q->hostname && q->name ? 0 : -ENOMEM;
}

static void os_rows_free(struct os_rows *o)
{
	for (size_t i = 0; i < o->nranks; i++)
		free(o->ranks[i].hostname);
	for (size_t i = 0; i < o->ncpus; i++)
		free(o->cpus[i].hostname);
	for (size_t i = 0; i < o->nirqs; i++) {
		free(o->irqs[i].hostname);
		free(o->irqs[i].name);
	}
	hostanomaly_free(&o->host);
	free(o->ranks);
	free(o->cpus);
	free(o->irqs);
}

/* Seconds of OS data recorded for one CPU of one node (0: none). */
static double os_cpu_secs(const struct os_rows *o, const char *hostname, uint32_t cpu)
{
	for (size_t j = 0; j < o->ncpus; j++)
		if (o->cpus[j].cpu == cpu && !strcmp(o->cpus[j].hostname, hostname))
			return (double)o->cpus[j].window_ms / 1e3;
	return 0;
}

static const struct os_rank *os_rank_of(const struct os_rows *o, int32_t rank)
{
	for (size_t i = 0; i < o->nranks; i++)
		if (o->ranks[i].rank == rank)
			return &o->ranks[i];
	return NULL;
}

static bool cpu_in(const uint64_t *mask, uint32_t cpu)
{
	return cpu < 64 * SYSOM_CPU_MASK_WORDS && (mask[cpu / 64] >> (cpu % 64)) & 1;
}


/* The rank's signal rates per second on a CPU. */
static void os_rates(const struct os_rank *k, double out[OS_NSIG])
{
	double cpu_s = (double)k->oncpu_ns / 1e9;

	out[OS_RUNQ] = (double)k->runq_wait_ns / 1e6 / cpu_s;
	out[OS_IRQ_TIME] = (double)(k->hardirq_ns + k->softirq_ns) / 1e6 / cpu_s;
	out[OS_INVOL] = (double)k->invol / cpu_s;
	out[OS_NUMA] = (double)k->numa_migrations / cpu_s;
	out[OS_PAGES] = (double)k->pages / cpu_s;
}

/* The upper bound of the bucket holding the 99th percentile run-queue latency, µs. */
static double os_runq_p99_us(const struct os_rank *k)
{
	uint64_t total = 0, seen = 0;

	for (int i = 0; i < SYSOM_RUNQ_HIST_BUCKETS; i++)
		total += k->hist[i];
	for (int i = 0; i < SYSOM_RUNQ_HIST_BUCKETS && total; i++) {
		seen += k->hist[i];
		if (seen * 100 >= total * 99)
			return (double)(2ull << i);
	}
	return 0;
}
/*
 * The OS layer for straggler `s`: its signal rates against the healthy ranks' medians, the
 * interrupt lines and softirq vectors on the CPUs its threads ran on. out->top gets the most
 * implicated signal or -1, *top_irq its busiest IRQ line.
 */
static void diagnose_os(const struct diagnosis_ctx *ctx, const struct store_sample_filter *range,
			struct os_rows *o, const struct strag_group *g,
			const struct straggler_rank *ranks, int32_t s, struct diagnosis_os *out,
			const struct os_irq **top_irq)
{
	static const char *const names[OS_NSIG] = { "run-queue wait", "interrupt time",
						     "involuntary switches", "NUMA migrations",
						     "pages migrated" };
	static const char *const units[OS_NSIG] = { "ms/s", "ms/s", "/s", "/s", "/s" };
	/* What matters at all, per second on a CPU: 2% of the time waiting or in interrupts, 1
	 * NUMA migration, 1,000 migrated pages (4 MB). Involuntary switches are evidence only
	 * (floor 0: never implicated): a preemption costs nothing by itself, the time it costs
	 * is in the run-queue wait — and a rank that sleeps (a delay in user space) is preempted
	 * more often per CPU-second by the ranks spinning while they wait for it. */
	static const double floors[OS_NSIG] = { 20, 20, 0, 1, 1000 };
	double mine[OS_NSIG], rates[OS_NSIG], *healthy = NULL;
	const struct os_rank *k;
	size_t nh = 0, used = 0, load_cap = 0;

	out->state = DIAGNOSIS_OS_ABSENT;
	out->top = -1;
	*top_irq = NULL;
	out->cpus[0] = '\0';
	if (!o->loaded) {
		struct store_os_filter f = { .job = range->job, .from_ms = range->from_ms,
					     .to_ms = range->to_ms };
		struct store_os_visitor v = { os_thread_take, os_cpu_take, os_irq_take, o };
		o->loaded = true;
		/* Host signals until the range's end; none (or a store without them) is fine. */
		if (hostanomaly_job(ctx->store, range->job, range->to_ms, HOSTANOMALY_SPAN_MS,
				    &o->host))
			memset(&o->host, 0, sizeof(o->host));
		if (store_job_os(ctx->store, &f, QUERY_MAX_GPU_ROWS, &v, &o->truncated))
			return;
	}
	if (!(k = os_rank_of(o, s)) || k->oncpu_ns == 0) {
		out->state = DIAGNOSIS_OS_NO_DATA;
		return;
	}
	if (!(healthy = calloc((size_t)g->nranks + 1, sizeof(*healthy))))
		goto cleanup;
	os_rates(k, mine);
	for (int i = 0; i < OS_NSIG; i++) {
		nh = 0;
		for (int32_t h = 0; h < g->nranks; h++) {
			const struct os_rank *hk;
			if (h == s || ranks[h].straggler || !(hk = os_rank_of(o, h)) || !hk->oncpu_ns)
				continue;
			os_rates(hk, rates);
			healthy[nh++] = rates[i];
		}
		out->signals[i] = (struct os_signal_cmp){ names[i], units[i], mine[i],
							  layers_median(healthy, nh), floors[i], false };
	}
	out->top = layers_os_classify(out->signals, OS_NSIG, LAYERS_OS_FACTOR);
	for (size_t i = 0; i < o->host.in.nnodes; i++) {
		const struct reveal_node_score *hn = &o->host.scores[i];
		if (!hn->anomalous || !hn->hostname || strcmp(hn->hostname, k->hostname))
			continue;
		out->host_anomalous = true;
		snprintf(out->host_node, sizeof(out->host_node), "%s", hn->node_id);
		out->host_score = hn->score;
		out->host_threshold = hn->threshold;
		hostanomaly_describe(hn, out->host_deviations, sizeof(out->host_deviations));
		break;
	}
	/* The CPUs its threads ran on, with what interrupted them. */
	for (uint32_t c = 0; c < 64 * SYSOM_CPU_MASK_WORDS; c++) {
		if (!cpu_in(k->cpus, c))
			continue;
		int n = snprintf(out->cpus + used, sizeof(out->cpus) - used, "%s%u", used ? "," : "", c);
		if (n < 0 || (size_t)n >= sizeof(out->cpus) - used)
			break;
		used += (size_t)n;
	}
	for (size_t i = 0; i < o->ncpus; i++) {
		const struct os_cpu *c = &o->cpus[i];
		double secs = (double)c->window_ms / 1e3;
		if (strcmp(c->hostname, k->hostname) || !cpu_in(k->cpus, c->cpu) || secs <= 0)
			continue;
		if (grow((void **)&out->cpu_load, &load_cap, out->ncpu_load, sizeof(*out->cpu_load)))
			goto cleanup;
		struct diagnosis_os_cpu *l = &out->cpu_load[out->ncpu_load++];
		memset(l, 0, sizeof(*l));
		l->cpu = c->cpu;
		l->busy_pct = (double)c->busy_ns / 1e7 / secs;
		l->hardirq_ms_per_s = (double)c->hardirq_ns / 1e6 / secs;
		l->hardirq_per_s = (double)c->hardirq_count / secs;
		l->softirqs_present = true;
		for (int v = 0; v < SYSOM_SOFTIRQ_COUNT; v++)
			if (c->softirq_count[v]) {
				l->softirq[v].present = true;
				l->softirq[v].per_s = (double)c->softirq_count[v] / secs;
				l->softirq[v].ms_per_s = (double)c->softirq_ns[v] / 1e6 / secs;
			}
	}
	for (size_t i = 0; i < o->nirqs && out->nirqs < DIAGNOSIS_TOP_IRQS; i++) {
		const struct os_irq *q = &o->irqs[i]; /* largest time first */
		struct diagnosis_os_irq *r = &out->irqs[out->nirqs];
		double secs;
		if (strcmp(q->hostname, k->hostname) || !cpu_in(k->cpus, q->cpu))
			continue;
		if ((secs = os_cpu_secs(o, q->hostname, q->cpu)) <= 0)
			continue;
		if (!*top_irq)
			*top_irq = q;
		if (!(r->name = strdup(q->name)))
			goto cleanup;
		r->irq = q->irq;
		r->cpu = q->cpu;
		r->per_s = (double)q->count / secs;
		r->ms_per_s = (double)q->ns / 1e6 / secs;
		out->nirqs++;
	}
	out->runq_p99_us = os_runq_p99_us(k);
	out->oncpu_ms = k->oncpu_ns / 1000000;
	out->runq_waits = k->runq_waits;
	out->truncated = o->truncated;
	out->state = DIAGNOSIS_OS_EVALUATED;
cleanup:
	free(healthy);
}

static struct diagnosis *diagnose(const struct diagnosis_ctx *ctx, const struct diagnosis_params *p,
				   const struct store_sample_filter *range, struct gk_rows *k,
				   struct os_rows *osr, const struct strag_group *g,
				   const struct straggler_rank *ranks, int32_t s)
{
	enum gpu_verdict gv;
	double slowdown, top_pp = 0, best = HUGE_VAL;
	char *top_fn = NULL;
	int32_t healthy = -1;
	const struct os_irq *top_irq = NULL;
	struct diagnosis *d;
	char *summary, *action, *cpus;
	const struct os_signal_cmp *sig;
	int os_top;

	if (!k->loaded) {
		struct store_gpu_filter f = { .job = range->job, .from_ms = range->from_ms,
					      .to_ms = range->to_ms };
		struct store_gpu_visitor v = { .kernel = gk_kernel, .arg = k };
		bool truncated;
		k->loaded = true;
		if (store_job_gpu(ctx->store, &f, QUERY_MAX_GPU_ROWS, &v, &truncated))
			return NULL;
	}
	if (!(d = calloc(1, sizeof(*d))))
		return NULL;
	summary = d->summary;
	action = d->action;
	cpus = d->os.cpus;
	sig = d->os.signals;
	d->layer = DIAGNOSIS_LAYER_UNKNOWN;
	diagnose_gpu(ctx, range, k, g, ranks, s, p->gpu_threshold, &d->gpu);
	gv = d->gpu.verdict;
	slowdown = d->gpu.slowdown;
	/* The healthy rank to compare CPU profiles with: the most typical one. */
	for (int32_t r = 0; r < g->nranks; r++)
		if (r != s && !ranks[r].straggler && fabs(ranks[r].excess_ns) < best) {
			best = fabs(ranks[r].excess_ns);
			healthy = r;
		}
	if (healthy >= 0) {
		double rate[2];
		cpu_sample_rates(ctx, g->host ? g->host[healthy] : NULL, g->host ? g->host[s] : NULL, rate);
		diagnose_cpu(ctx, range, s, healthy, rate, &top_pp, &top_fn, &d->cpu);
	}
	diagnose_os(ctx, range, osr, g, ranks, s, &d->os, &top_irq);
	os_top = d->os.top;
	if (gv == GPU_UNIFORM) {
		struct diagnosis_gpu_hw *hw = &d->gpu.hw;

		d->layer = DIAGNOSIS_LAYER_GPU;
		if (gpuhealth_lookup(ctx->store, range->job, s, g->host[s], range->from_ms,
				     range->to_ms, hw) == -ENOMEM) {
			diagnosis_free(d);
			return NULL;
		}
		if (hw->confirmed) {
			char temp[64] = "";
			if (hw->temp_max != SYSOM_GPU_UNKNOWN)
				snprintf(temp, sizeof(temp), ", up to %u C", hw->temp_max);
			int n = snprintf(summary, sizeof(d->summary),
				 "every kernel runs %.2fx slower on rank %d than on the healthy ranks; "
				 "CONFIRMED hardware cause on its GPU %u (%.16s%s): %.220s; SM clock %u-%u "
				 "MHz%s", slowdown, s, hw->device, hw->pci_bus_id[0] ? hw->pci_bus_id : "?",
				 hw->picked_by == DIAGNOSIS_GPU_PICKED_RANK_DEVICE
					 ? ", the GPU the rank uses"
				 : hw->picked_by == DIAGNOSIS_GPU_PICKED_LOCAL_RANK
					 ? ", by its local rank"
					 : ", the node's GPU with the strongest evidence",
				 hw->cause, hw->sm_clock_min, hw->sm_clock_max, temp);
			n += snprintf(action, sizeof(d->action),
				 "%s GPU %u (%.16s) on %.64s of rank %d: %s; drain the node from the job if "
				 "it persists",
				 strstr(hw->cause, "thermal") || strstr(hw->cause, "temperature")
					 ? "cool"
					 : "service",
				 hw->device, hw->pci_bus_id, g->host[s] ? g->host[s] : "?", s,
				 strstr(hw->cause, "thermal") || strstr(hw->cause, "temperature")
					 ? "check its fans, airflow and inlet temperature"
				 : strstr(hw->cause, "power") ? "check the power limit and the PSU/brake"
							      : "check ECC, Xid and the PCIe/NVLink link");
			(void)n; /* long causes are cut */
		} else {
			snprintf(summary, sizeof(d->summary),
				 "every kernel runs %.2fx slower on rank %d than on the healthy ranks: a "
				 "uniform GPU slowdown, hardware suspected%s", slowdown, s,
				 hw->present ? " (its GPU reported no throttle reason, thermal limit or "
					       "error)" : "");
			snprintf(action, sizeof(d->action),
				 "check the GPU of rank %d: clocks and throttle reasons, temperature, "
				 "power, ECC (nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE,POWER,ECC)",
				 s);
		}
	} else if (gv == GPU_KERNEL_SPECIFIC || gv == GPU_ONE_KERNEL) {
		d->layer = DIAGNOSIS_LAYER_GPU;
		const struct diagnosis_kernel *top = d->gpu.nkernels ? &d->gpu.kernels[0] : NULL;
		if (top && layers_gpu_intermittent(top->slow_share)) {
			snprintf(summary, sizeof(d->summary),
				 "GPU time %.2fx the healthy ranks' on rank %d, concentrated in %.100s, "
				 "which is slow on %.0f%% of its runs only (the others as fast as on the "
				 "healthy ranks): intermittent, as under load from something sharing the "
				 "GPU or node", slowdown, s, top->name, 100 * top->slow_share);
			snprintf(action, sizeof(d->action),
				 "find what runs on rank %d's GPU or node while %.100s is slow (other "
				 "processes on the GPU: nvidia-smi pmon; memory bandwidth, PCIe or NVLink "
				 "traffic; power capping), and whether its inputs vary between runs", s,
				 top->name);
		} else {
			snprintf(summary, sizeof(d->summary),
				 "GPU time %.2fx the healthy ranks' on rank %d, concentrated in specific "
				 "kernels (software suspected)", slowdown, s);
			snprintf(action, sizeof(d->action),
				 "look at the slower kernels' inputs on rank %d (shapes, data skew) and "
				 "their implementation", s);
		}
	} else if (top_fn && top_pp >= p->cpu_min_pp) {
		d->layer = DIAGNOSIS_LAYER_CPU;
		snprintf(summary, sizeof(d->summary),
			 "%s is on %.1f percentage points more of rank %d's CPU samples than of rank "
			 "%d's; the GPU layer is normal", top_fn, top_pp, s, healthy);
		snprintf(action, sizeof(d->action),
			 "find what makes rank %d run %s more (its input data, logging, checkpointing, "
			 "garbage collection); the diff: sysomctl diff --a %d --b %d", s, top_fn, healthy, s);
	} else if (os_top >= 0) {
		const struct os_signal_cmp *t = &sig[os_top];
		d->layer = DIAGNOSIS_LAYER_OS;
		if (os_top == OS_IRQ_TIME && top_irq)
			snprintf(summary, sizeof(d->summary),
				 "rank %d's threads lose %.1f ms per CPU-second to interrupts (healthy "
				 "ranks: %.1f); IRQ %u (%s) takes %.1f ms/s on its CPU %u; GPU and CPU "
				 "profiles are normal", s, t->straggler, t->healthy, top_irq->irq,
				 top_irq->name[0] ? top_irq->name : "?",
				 (double)top_irq->ns / 1e6 /
					 fmax(1e-3, os_cpu_secs(osr, top_irq->hostname, top_irq->cpu)),
				 top_irq->cpu);
		else
			snprintf(summary, sizeof(d->summary),
				 "%s on rank %d is %.1f %s against %.1f %s on the healthy ranks (CPUs %s); "
				 "GPU and CPU profiles are normal", t->name, s, t->straggler, t->unit,
				 t->healthy, t->unit, cpus[0] ? cpus : "?");
		switch (os_top) {
		case OS_IRQ_TIME:
			if (top_irq)
				snprintf(action, sizeof(d->action),
					 "move IRQ %u (%s) off CPU %u, where rank %d's threads run: write a "
					 "mask without that CPU to /proc/irq/%u/smp_affinity (and exclude it "
					 "from irqbalance), or pin the rank to other CPUs",
					 top_irq->irq, top_irq->name, top_irq->cpu, s, top_irq->irq);
			else
				snprintf(action, sizeof(d->action),
					 "find the interrupt or softirq source on CPUs %s (/proc/interrupts, "
					 "/proc/softirqs) and steer it away from rank %d's threads",
					 cpus[0] ? cpus : "?", s);
			break;
		case OS_NUMA:
		case OS_PAGES:
			snprintf(action, sizeof(d->action),
				 "bind rank %d's CPUs and memory to its GPU's NUMA node (numactl "
				 "--cpunodebind --membind) and keep NUMA balancing off for the job", s);
			break;
		default:
			snprintf(action, sizeof(d->action),
				 "another task competes for CPUs %s with rank %d: find it (perf sched "
				 "latency, pidstat -t -u 1, top -H on those CPUs), then give the training "
				 "threads dedicated CPUs (cpuset, isolcpus) or move the neighbour away",
				 cpus[0] ? cpus : "?", s);
		}
	} else if (d->os.host_anomalous) {
		d->layer = DIAGNOSIS_LAYER_OS;
		snprintf(summary, sizeof(d->summary),
			 "rank %d's node %.32s is anomalous against its own history and its peers: "
			 "%.300s; GPU and CPU profiles are normal", s, d->os.host_node,
			 d->os.host_deviations);
		snprintf(action, sizeof(d->action),
			 "check the node of rank %d: its network (TCP retransmits, drops, NIC errors), "
			 "memory pressure, disks and CPU clocks (sysomctl hosts --job JOB)", s);
	} else {
		snprintf(summary, sizeof(d->summary),
			 "rank %d is late but neither its GPU kernels, its CPU profile nor its OS signals "
			 "(run-queue wait, interrupts, NUMA) differ from the healthy ranks'%s", s,
			 d->os.state == DIAGNOSIS_OS_EVALUATED
				 ? "" : "; no OS signals were recorded for it");
		snprintf(action, sizeof(d->action),
			 "compare rank %d's network path (NCCL links: sysomctl gpu --rank %d), its input "
			 "pipeline and storage with a healthy rank's", s, s);
	}
	free(top_fn);
	return d;
}




static int i64_compare(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

/* Median time between consecutive complete instances of the group (its iteration time when it
 * runs one collective per iteration), ns; 0 with fewer than 3 instances. */
static int64_t strag_period_ns(const struct strag_group *g)
{
	int64_t *t = malloc((g->nt0 + 1) * sizeof(*t)), period = 0;

	if (!t || g->nt0 < 3) {
		free(t);
		return 0;
	}
	memcpy(t, g->t0, g->nt0 * sizeof(*t));
	qsort(t, g->nt0, sizeof(*t), i64_compare);
	for (uint32_t i = 0; i + 1 < g->nt0; i++)
		t[i] = t[i + 1] - t[i];
	qsort(t, g->nt0 - 1, sizeof(*t), i64_compare);
	period = t[(g->nt0 - 1) / 2];
	free(t);
	return period;
}

static int blind_by_stream(const void *a, const void *b)
{
	const struct blind_call *x = a, *y = b;

	if (x->comm_key != y->comm_key)
		return x->comm_key < y->comm_key ? -1 : 1;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->entry_ns < y->entry_ns ? -1 : x->entry_ns > y->entry_ns;
}

static int blind_by_instance(const void *a, const void *b)
{
	const struct blind_call *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	if (x->op != y->op)
		return x->op < y->op ? -1 : 1;
	return x->rank - y->rank;
}

/* Communicators of unknown size: their call streams (one per process and key) grouped by
 * seqmatch into communicators, whose instances then go through strag_call like any other. */
static int blind_resolve(struct strag_doc *d)
{
	struct seqmatch_stream *st = NULL, *single = NULL;
	struct seqmatch_call *calls = NULL;
	struct seqmatch_result res;
	size_t *start = NULL, nstreams = 0;
	int rc = 0;

	if (!d->nblind)
		return 0;
	qsort(d->blind, d->nblind, sizeof(*d->blind), blind_by_stream);
	for (size_t i = 0; i < d->nblind; i++)
		nstreams += i == 0 || d->blind[i].comm_key != d->blind[i - 1].comm_key ||
			    d->blind[i].pid != d->blind[i - 1].pid;
	st = calloc(nstreams, sizeof(*st));
	single = calloc(nstreams, sizeof(*single));
	start = calloc(nstreams + 1, sizeof(*start));
	calls = calloc(d->nblind, sizeof(*calls));
	if (!st || !single || !start || !calls) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (size_t i = 0, k = 0; i < d->nblind; i++) {
		const struct blind_call *b = &d->blind[i];
		if (i == 0 || b->comm_key != d->blind[i - 1].comm_key || b->pid != d->blind[i - 1].pid) {
			start[k] = i;
			st[k] = (struct seqmatch_stream){ .job_rank = b->job_rank, .calls = &calls[i] };
			k++;
		}
		calls[i] = (struct seqmatch_call){ b->op, b->bytes, b->entry_ns, b->exit_ns };
		st[k - 1].ncalls++;
	}
	start[nstreams] = d->nblind;
	/* A key several processes report but whose size is unknown (a split child whose size
	 * the agent could not read) stays unanalysed, as before: its membership is known but
	 * not whether it is complete. Only per-process keys go to sequence matching. */
	size_t nsingle = 0;
	for (size_t k = 0; k < nstreams;) {
		size_t e = k + 1;
		while (e < nstreams && d->blind[start[e]].comm_key == d->blind[start[k]].comm_key)
			e++;
		if (e - k == 1)
			single[nsingle++] = st[k];
		else
			for (size_t m = k; m < e; m++)
				st[m].group = -2; /* shared key: skipped */
		k = e;
	}
	if ((rc = seqmatch_run(single, nsingle, &res)))
		goto cleanup;
	for (size_t k = 0, j = 0; k < nstreams; k++)
		if (st[k].group != -2)
			st[k] = single[j++];
	d->recovered += res.groups;
	d->unmatched += res.unmatched;
	/* Group keys: named after the smallest per-process key among the members. */
	uint64_t *gkey = calloc(res.groups ? res.groups : 1, sizeof(*gkey));
	if (!gkey) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (size_t k = 0; k < nstreams; k++)
		if (st[k].group >= 0 && (!gkey[st[k].group] ||
					 d->blind[start[k]].comm_key < gkey[st[k].group]))
			gkey[st[k].group] = d->blind[start[k]].comm_key;
	size_t kept = 0;
	for (size_t k = 0; k < nstreams; k++) {
		for (size_t i = start[k]; i < start[k + 1]; i++) {
			struct blind_call *b = &d->blind[i];
			if (st[k].group < 0) {
				d->skipped++;
				free(b->hostname);
				b->hostname = NULL;
				continue;
			}
			b->key = sysom_hash_mix(SEED_SEQMATCH, gkey[st[k].group]) | 1;
			b->seq = (int64_t)(i - start[k]) + st[k].seq_offset;
			b->rank = st[k].rank;
			b->nranks = st[k].nranks;
			d->blind[kept++] = *b;
		}
	}
	free(gkey);
	d->nblind = kept;
	qsort(d->blind, d->nblind, sizeof(*d->blind), blind_by_instance);
	d->replaying = true;
	d->have = false;
	for (size_t i = 0; i < d->nblind && !rc; i++) {
		const struct blind_call *b = &d->blind[i];
		struct store_collective_call c = {
			.comm_key = b->key, .seq = (uint64_t)b->seq, .op = b->op,
			.nranks = b->nranks, .rank = b->rank, .entry_ns = b->entry_ns,
			.exit_ns = b->exit_ns, .bytes = b->bytes, .peer = -1, .pid = b->pid,
			.hostname = b->hostname, .job_rank = b->job_rank,
		};
		rc = strag_call(d, &c);
	}
	if (!rc)
		strag_instance_end(d);
	d->replaying = false;
cleanup:
	free(st);
	free(single);
	free(start);
	free(calls);
	return rc;
}

/* The store as the source of calls: the latest instances of the job in the scope's range. */
static int store_source(void *arg, const struct diagnosis_scope *scope, store_collective_fn fn,
			void *fn_arg)
{
	struct store_collective_filter f = { .job = scope->job, .latest = true,
					     .has_comm = scope->has_comm, .comm = scope->comm };

	f.from_ns = scope->from_ms > INT64_MAX / 1000000 ? INT64_MAX : scope->from_ms * 1000000;
	f.to_ns = scope->to_ms > INT64_MAX / 1000000 - 1 ? INT64_MAX : scope->to_ms * 1000000 + 999999;
	return store_collectives_list(arg, &f, QUERY_MAX_STRAGGLER_INSTANCES, fn, fn_arg);
}

/* The pipeline pass's store reads: the calls (counting instances, to tell whether a limit left
 * some of the range out) and the GPU rows of the same range. */
struct pipeline_read {
	struct pipeline *pl;
	uint32_t instances;     /* of the op being read */
	uint64_t calls;         /* of both ops */
	bool have;
	uint64_t comm, seq;
};

static int pipeline_call_add(void *arg, const struct store_collective_call *c)
{
	struct pipeline_read *rd = arg;
	struct pipeline_call pc = { .comm = c->comm_key, .seq = c->seq, .entry_ns = c->entry_ns,
				    .exit_ns = c->exit_ns, .rank = c->rank, .peer = c->peer,
				    .job_rank = c->job_rank, .pid = c->pid, .op = c->op };

	/* Calls arrive grouped by instance (communicator, op, seq). */
	if (!rd->have || c->comm_key != rd->comm || c->seq != rd->seq) {
		rd->instances++;
		rd->have = true;
		rd->comm = c->comm_key;
		rd->seq = c->seq;
	}
	rd->calls++;
	return pipeline_add(rd->pl, &pc);
}

/* CUPTI kernel rows: a stage's compute is its process's kernels that are not NCCL's. */
static int pipeline_kernel_add(void *arg, const struct store_gpu_kernel_row *r)
{
	struct pipeline_gpu_compute g = { .job_rank = r->who.job_rank, .pid = r->who.pid,
					  .kernels = r->count,
					  .kernel_ns = r->total_ns };

	if (pipeline_kernel_is_nccl(r->name))
		return 0;
	return pipeline_gpu_compute_add(arg, &g);
}

/* NCCL profiler plugin rows: the Send/Recv counts and Recv kernel times. */
static int pipeline_profile_add(void *arg, const struct store_nccl_profile_row *r)
{
	struct pipeline_gpu_p2p g = { .job_rank = r->who.job_rank, .pid = r->who.pid,
				      .comm_id = r->comm_id, .rank = r->rank,
				      .peer = r->peer, .count = r->count,
				      .kernel_timed = r->kernel_timed,
				      .kernel_ns = r->kernel_ns_total };

	if (!r->func || (strcmp(r->func, "Send") && strcmp(r->func, "Recv")))
		return 0;
	g.op = r->func[0] == 'S' ? SYSOM_NCCL_SEND : SYSOM_NCCL_RECV;
	return pipeline_gpu_p2p_add(arg, &g);
}

/* The pipeline pass: the job's latest Send and Recv calls from the store, paired and judged
 * into rep->pipeline, with the GPU rows of the same range (the GPU clock, pipeline.h). 0 or a
 * negative errno. */
static int pipeline_pass(const struct diagnosis_ctx *ctx, const struct diagnosis_scope *scope,
			 const struct diagnosis_params *p, struct straggler_report *rep)
{
	static const uint8_t ops[] = { SYSOM_NCCL_SEND, SYSOM_NCCL_RECV };
	struct pipeline_params pp = { .k = p->sp.k, .min_excess_ns = p->sp.min_excess_ns,
				      .scale_floor_ns = p->sp.scale_floor_ns,
				      .calls_complete = true };
	struct pipeline_read rd = { 0 };
	struct store_gpu_filter gf = { .job = scope->job, .from_ms = scope->from_ms,
				       .to_ms = scope->to_ms };
	bool gpu_truncated = false;
	int rc;

	if ((rc = pipeline_new(&rd.pl)))
		goto cleanup;
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		struct store_collective_filter f = { .job = scope->job, .latest = true,
						     .has_comm = scope->has_comm,
						     .comm = scope->comm, .op = ops[i] };

		f.from_ns = scope->from_ms > INT64_MAX / 1000000 ? INT64_MAX : scope->from_ms * 1000000;
		f.to_ns = scope->to_ms > INT64_MAX / 1000000 - 1 ? INT64_MAX
								  : scope->to_ms * 1000000 + 999999;
		rd.instances = 0;
		rd.have = false;
		if ((rc = store_collectives_list(ctx->store, &f, DIAGNOSIS_PIPELINE_INSTANCES,
						 pipeline_call_add, &rd)))
			goto cleanup;
		/* As many instances as asked for: older ones of the range may be left out. */
		if (rd.instances >= DIAGNOSIS_PIPELINE_INSTANCES)
			pp.calls_complete = false;
	}
	/* GPU rows only where there is a pipeline to time (a job of collectives alone reads
	 * nothing more). */
	if (rd.calls) {
		struct store_gpu_visitor v = { .kernel = pipeline_kernel_add,
					       .profile = pipeline_profile_add, .arg = rd.pl };
		if ((rc = store_job_gpu(ctx->store, &gf, QUERY_MAX_GPU_ROWS, &v,
					&gpu_truncated)))
			goto cleanup;
		if (gpu_truncated)
			pipeline_gpu_incomplete(rd.pl);
	}
	if ((rc = pipeline_analyse(rd.pl, &pp, &rep->pipeline)))
		goto cleanup;
	rep->pipeline_checked = true;
cleanup:
	pipeline_free(rd.pl);
	return rc;
}

/* ---- where the pipeline runs, and why a slow stage is slow ---------------------------------- */

/* Ranks of a job above this are not laid out by rank for the pipeline's diagnoses. */
#define PIPELINE_DIAGNOSE_MAX_RANKS 65536

/* One process of the job (a rank's; workers are left out). */
struct job_proc {
	int32_t rank;
	uint32_t pid;
	int64_t last_seen_ns;
	char *hostname;
};

struct job_procs {
	struct job_proc *v;
	size_t n, cap;
	int32_t max_rank;
	size_t *first; /* job_procs_index: rank r's processes are v[first[r]..first[r + 1]) */
};

static int job_proc_visit(void *arg, const struct store_job_rank *j)
{
	struct job_procs *jp = arg;

	if (j->rank < 0 || j->rank >= PIPELINE_DIAGNOSE_MAX_RANKS || j->rank_pid || !j->hostname)
		return 0;
	if (SYSOM_ARRAY_RESERVE(jp->v, jp->cap, jp->n, 64))
		return -ENOMEM;
	if (!(jp->v[jp->n].hostname = strdup(j->hostname)))
		return -ENOMEM;
	jp->v[jp->n].rank = j->rank;
	jp->v[jp->n].pid = j->pid;
	jp->v[jp->n].last_seen_ns = j->last_seen_ns;
	jp->n++;
	if (j->rank > jp->max_rank)
		jp->max_rank = j->rank;
	return 0;
}

static int job_proc_by_rank(const void *a, const void *b)
{
	const struct job_proc *x = a, *y = b;

	return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Sorts the processes by rank and indexes where each rank's start, so that a lookup reads only
 * that rank's processes (a job of many ranks is not scanned once per stage and link). */
static int job_procs_index(struct job_procs *jp)
{
	if (jp->max_rank < 0)
		return 0;
	qsort(jp->v, jp->n, sizeof(*jp->v), job_proc_by_rank);
	if (!(jp->first = calloc((size_t)jp->max_rank + 2, sizeof(*jp->first))))
		return -ENOMEM;
	size_t i = 0;
	for (int32_t r = 0; r <= jp->max_rank + 1; r++) {
		while (i < jp->n && jp->v[i].rank < r)
			i++;
		jp->first[r] = i;
	}
	return 0;
}

/* The host of job rank `rank`: its process `pid` when listed (0: any), else the rank's most
 * recently seen process. NULL unknown. */
static const char *job_proc_host(const struct job_procs *jp, int32_t rank, uint32_t pid)
{
	const struct job_proc *best = NULL;

	if (!jp->first || rank < 0 || rank > jp->max_rank)
		return NULL;
	for (size_t i = jp->first[rank]; i < jp->first[rank + 1]; i++) {
		const struct job_proc *x = &jp->v[i];
		if (pid && x->pid == pid)
			return x->hostname;
		if (!best || x->last_seen_ns > best->last_seen_ns)
			best = x;
	}
	return best ? best->hostname : NULL;
}

static int strdup_or_null(const char *s, char **out)
{
	*out = NULL;
	return s && !(*out = strdup(s)) ? -ENOMEM : 0;
}

/*
 * The pipeline pass names stages and links by job rank: where each runs, and for every slow
 * stage the layered diagnosis of its rank, against a group of the job's ranks laid out by job
 * rank (the healthy side preferring the pipeline's other stages, the fastest first).
 */
static int pipeline_where(const struct diagnosis_ctx *ctx, const struct diagnosis_params *p,
			  const struct store_sample_filter *range, struct gk_rows *gk,
			  struct os_rows *osr, struct straggler_report *rep, int *diagnosed)
{
	const struct pipeline_result *pl = &rep->pipeline;
	struct job_procs jp = { .max_rank = -1 };
	struct strag_group jg = { 0 };
	struct straggler_rank *ranks = NULL;
	int rc;

	if (!(rep->stage_where = calloc(pl->nstages + 1, sizeof(*rep->stage_where))) ||
	    !(rep->link_where = calloc(pl->nlinks + 1, sizeof(*rep->link_where)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	if (!pl->nstages && !pl->nlinks)
		return 0;
	if ((rc = store_job_ranks_list(ctx->store, range->job, QUERY_MAX_JOB_ROWS, job_proc_visit,
				       &jp)) ||
	    (rc = job_procs_index(&jp)))
		goto cleanup;
	for (size_t i = 0; i < pl->nstages; i++)
		if ((rc = strdup_or_null(job_proc_host(&jp, pl->stages[i].job_rank,
						       pl->stages[i].pid),
					 &rep->stage_where[i].hostname)))
			goto cleanup;
	for (size_t i = 0; i < pl->nlinks; i++)
		if ((rc = strdup_or_null(job_proc_host(&jp, pl->links[i].src_job_rank, 0),
					 &rep->link_where[i].src_host)) ||
		    (rc = strdup_or_null(job_proc_host(&jp, pl->links[i].dst_job_rank, 0),
					 &rep->link_where[i].dst_host)))
			goto cleanup;
	if (!p->diagnose || !pl->slow_stages || jp.max_rank < 1)
		goto cleanup;
	jg.nranks = jp.max_rank + 1;
	if (!(jg.pid = calloc((size_t)jg.nranks, sizeof(*jg.pid))) ||
	    !(jg.host = calloc((size_t)jg.nranks, sizeof(*jg.host))) ||
	    !(ranks = calloc((size_t)jg.nranks, sizeof(*ranks)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (int32_t r = 0; r < jg.nranks; r++) {
		ranks[r].rank = r;
		ranks[r].excess_ns = 1e18; /* not a stage: compared with only when no stage is */
		jg.host[r] = (char *)job_proc_host(&jp, r, 0); /* borrowed from jp */
	}
	for (size_t i = 0; i < pl->nstages; i++) {
		const struct pipeline_stage *st = &pl->stages[i];
		if (st->job_rank < 0 || st->job_rank >= jg.nranks)
			continue;
		ranks[st->job_rank].excess_ns = st->excess_ns;
		ranks[st->job_rank].straggler = st->slow;
		jg.pid[st->job_rank] = st->pid;
	}
	for (size_t i = 0; i < pl->nstages && *diagnosed < DIAGNOSE_MAX_STRAGGLERS; i++) {
		const struct pipeline_stage *st = &pl->stages[i];
		if (!st->slow || st->job_rank < 0 || st->job_rank >= jg.nranks)
			continue;
		rep->stage_where[i].diagnosed = true;
		rep->stage_where[i].diagnosis = diagnose(ctx, p, range, gk, osr, &jg, ranks,
							 st->job_rank);
		(*diagnosed)++;
	}
cleanup:
	free(jg.pid);
	free(jg.host); /* the strings are jp's */
	free(ranks);
	for (size_t i = 0; i < jp.n; i++)
		free(jp.v[i].hostname);
	free(jp.v);
	free(jp.first);
	return rc;
}

int diagnosis_report_build(const struct diagnosis_ctx *ctx, const struct diagnosis_scope *scope,
			   const struct diagnosis_params *p, diagnosis_source_fn source,
			   void *source_arg, struct straggler_report **out)
{
	struct strag_doc d = { 0 };
	struct gk_rows gk = { 0 };
	struct os_rows osr = { 0 };
	struct store_sample_filter range = { .job = scope->job, .from_ms = scope->from_ms,
					     .to_ms = scope->to_ms };
	int diagnosed = 0;
	struct straggler_rank *ranks = NULL;
	struct straggler_report *rep = NULL;
	size_t cap_stragglers = 0;
	uint32_t best_instances = 0;
	int32_t best_nranks = 0;
	int rc = 0;

	*out = NULL;
	if (!source) {
		source = store_source;
		source_arg = ctx->store;
	}
	d.window = p->sp.window;
	{
		struct key_scan ks = { 0 };
		rc = source(source_arg, scope, key_scan_call, &ks);
		if (!rc)
			rc = key_scan_end(&ks);
		d.complete_keys = ks.keys;
		d.ncomplete = ks.nkeys;
		if (!d.complete_keys && !rc)
			d.complete_keys = calloc(1, sizeof(uint64_t)); /* an empty set, not "no filter" */
		if (!rc && !d.complete_keys)
			rc = -ENOMEM;
		if (rc)
			goto cleanup;
	}
	if ((rc = source(source_arg, scope, strag_call, &d)))
		goto cleanup;
	strag_instance_end(&d);
	d.have = false;
	if ((rc = blind_resolve(&d)))
		goto cleanup;
	if (!(rep = calloc(1, sizeof(*rep))) ||
	    (d.ngroups && !(rep->groups = calloc(d.ngroups, sizeof(*rep->groups)))) ||
	    (scope->job && !(rep->job = strdup(scope->job)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	rep->from_ms = scope->from_ms;
	rep->to_ms = scope->to_ms;
	rep->params = *p;
	for (size_t i = 0; i < d.ngroups; i++) {
		struct strag_group *g = &d.groups[i];
		struct straggler_group_report *gr = &rep->groups[rep->ngroups++];
		int found;

		free(ranks);
		if (!(ranks = calloc((size_t)g->nranks, sizeof(*ranks)))) {
			rc = -ENOMEM;
			goto cleanup;
		}
		if ((found = straggler_group_analyse(g->g, &p->sp, ranks)) < 0) {
			rc = found;
			goto cleanup;
		}
		gr->comm = g->key;
		gr->nranks = g->nranks;
		gr->window = g->window;
		if (!(gr->stragglers = calloc((size_t)found + 1, sizeof(*gr->stragglers)))) {
			rc = -ENOMEM;
			goto cleanup;
		}
		for (int32_t r = 0; r < g->nranks; r++) {
			if (!ranks[r].straggler)
				continue;
			gr->stragglers[gr->nstragglers++] = r;
			if ((rc = strag_job_add(rep, &cap_stragglers, g, &ranks[r])) < 0)
				goto cleanup;
			/* A new job-level straggler: which layer, with the evidence. */
			if (rc == 1 && p->diagnose && diagnosed < DIAGNOSE_MAX_STRAGGLERS) {
				struct straggler_entry *e = &rep->stragglers[rep->nstragglers - 1];
				e->diagnosis = diagnose(ctx, p, &range, &gk, &osr, g, ranks, r);
				e->diagnosed = true;
				diagnosed++;
			}
			rc = 0;
		}
		qsort(ranks, (size_t)g->nranks, sizeof(*ranks), by_excess_desc);
		size_t ntop = g->nranks < QUERY_STRAGGLER_TOP_RANKS ? (size_t)g->nranks
								  : (size_t)QUERY_STRAGGLER_TOP_RANKS;
		if (!(gr->top = calloc(ntop + 1, sizeof(*gr->top)))) {
			rc = -ENOMEM;
			goto cleanup;
		}
		for (size_t r = 0; r < ntop; r++) {
			struct straggler_rank_report *t = &gr->top[gr->ntop++];
			t->stats = ranks[r];
			t->pid = g->pid[ranks[r].rank];
			if (!(t->hostname = strdup(g->host[ranks[r].rank] ? g->host[ranks[r].rank] : ""))) {
				rc = -ENOMEM;
				goto cleanup;
			}
		}
		gr->period_ns = strag_period_ns(g);
		gr->instances = straggler_group_instances(g->g);
		gr->incomplete = straggler_group_incomplete(g->g);
		/* The job's iteration time: the period of its busiest group. */
		if (gr->instances > best_instances ||
		    (gr->instances == best_instances && g->nranks > best_nranks)) {
			best_instances = gr->instances;
			best_nranks = g->nranks;
			rep->iteration_ns = gr->period_ns;
		}
	}
	/* Which pod each straggling process runs in (evidence; a failed read leaves it out). */
	if (rep->nstragglers)
		(void)store_job_ranks_list(ctx->store, scope->job, QUERY_MAX_JOB_ROWS, strag_pod_visit,
					   rep);
	rep->truncated = d.instances > QUERY_MAX_STRAGGLER_INSTANCES - 1;
	rep->skipped_instances = d.skipped;
	rep->recovered_communicators = d.recovered;
	rep->unanalysed_communicators = d.unmatched;
	if (!scope->skip_pipeline && scope->job && (rc = pipeline_pass(ctx, scope, p, rep)))
		goto cleanup;
	if (rep->pipeline_checked &&
	    (rc = pipeline_where(ctx, p, &range, &gk, &osr, rep, &diagnosed)))
		goto cleanup;
	*out = rep;
	rep = NULL;
cleanup:
	straggler_report_free(rep);
	free(ranks);
	strag_doc_free(&d);
	gk_free(&gk);
	os_rows_free(&osr);
	return rc;
}

int diagnosis_stragglers(const struct diagnosis_ctx *ctx, const struct diagnosis_scope *scope,
			 const struct diagnosis_params *p, json_t **out)
{
	return diagnosis_stragglers_from(ctx, scope, p, NULL, NULL, out);
}

int diagnosis_stragglers_from(const struct diagnosis_ctx *ctx, const struct diagnosis_scope *scope,
			      const struct diagnosis_params *p, diagnosis_source_fn source,
			      void *source_arg, json_t **out)
{
	struct straggler_report *rep;
	int rc;

	*out = NULL;
	if ((rc = diagnosis_report_build(ctx, scope, p, source, source_arg, &rep)))
		return rc;
	if (!(*out = diagnosis_report_json(rep)))
		rc = -ENOMEM;
	straggler_report_free(rep);
	return rc;
}

/* ---- freeing the typed results (server/analysis/report.h) ---------------------------------- */

const char *diagnosis_layer_name(enum diagnosis_layer l)
{
	switch (l) {
	case DIAGNOSIS_LAYER_GPU:
		return "gpu";
	case DIAGNOSIS_LAYER_CPU:
		return "cpu";
	case DIAGNOSIS_LAYER_OS:
		return "os";
	default:
		return "unknown";
	}
}

void diagnosis_free(struct diagnosis *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->gpu.nkernels; i++) {
		for (size_t j = 0; j < d->gpu.kernels[i].nstacks; j++)
			free(d->gpu.kernels[i].stacks[j].stack);
		free(d->gpu.kernels[i].name);
	}
	for (size_t i = 0; i < d->cpu.nfunctions; i++)
		free(d->cpu.functions[i].function);
	for (size_t i = 0; i < d->cpu.nstacks; i++)
		free(d->cpu.stacks[i].stack);
	free(d->os.cpu_load);
	for (size_t i = 0; i < d->os.nirqs; i++)
		free(d->os.irqs[i].name);
	free(d);
}

void straggler_report_free(struct straggler_report *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nstragglers; i++) {
		free(r->stragglers[i].hostname);
		free(r->stragglers[i].pod_namespace);
		free(r->stragglers[i].pod);
		free(r->stragglers[i].communicators);
		diagnosis_free(r->stragglers[i].diagnosis);
	}
	for (size_t i = 0; i < r->ngroups; i++) {
		for (size_t j = 0; j < r->groups[i].ntop; j++)
			free(r->groups[i].top[j].hostname);
		free(r->groups[i].top);
		free(r->groups[i].stragglers);
	}
	free(r->stragglers);
	free(r->groups);
	free(r->job);
	for (size_t i = 0; r->stage_where && i < r->pipeline.nstages; i++) {
		free(r->stage_where[i].hostname);
		diagnosis_free(r->stage_where[i].diagnosis);
	}
	for (size_t i = 0; r->link_where && i < r->pipeline.nlinks; i++) {
		free(r->link_where[i].src_host);
		free(r->link_where[i].dst_host);
	}
	free(r->stage_where);
	free(r->link_where);
	pipeline_result_free(&r->pipeline);
	free(r);
}

/* ---- CPU waterline per communication group --------------------------------------------- */

#define WATERLINE_MAX_FUNCTIONS 20000
#define WATERLINE_TOP_FLAGS 20

struct wl_member {
	int32_t job_rank;
	uint32_t pid;
};

struct wl_group {
	uint64_t key;
	int32_t *ranks;   /* distinct job ranks of its members */
	size_t n, cap;
};

struct wl_doc {
	struct wl_group *groups;
	size_t n, cap;
	bool has_comm;
	uint64_t comm;
};

static int wl_member(void *arg, const struct store_job_communicator *c)
{
	struct wl_doc *d = arg;
	struct wl_group *g = NULL;

	if (c->job_rank < 0 || (d->has_comm && c->key != d->comm))
		return 0;
	for (size_t i = 0; i < d->n && !g; i++)
		if (d->groups[i].key == c->key)
			g = &d->groups[i];
	if (!g) {
		if (grow((void **)&d->groups, &d->cap, d->n, sizeof(*d->groups)))
			return -ENOMEM;
		g = &d->groups[d->n++];
		memset(g, 0, sizeof(*g));
		g->key = c->key;
	}
	for (size_t i = 0; i < g->n; i++)
		if (g->ranks[i] == c->job_rank)
			return 0;
	if (grow((void **)&g->ranks, &g->cap, g->n, sizeof(*g->ranks)))
		return -ENOMEM;
	g->ranks[g->n++] = c->job_rank;
	return 0;
}

/* One rank's inclusive function shares. */
struct wl_profile {
	int32_t rank;
	struct cpu_delta *fns; /* a_fraction: the share */
	int nfns;
	uint64_t samples;
};

static int wl_profile_load(const struct diagnosis_ctx *ctx, const struct diagnosis_scope *scope,
			   int32_t rank, struct wl_profile *p)
{
	struct store_sample_filter f = { .job = scope->job, .from_ms = scope->from_ms,
					 .to_ms = scope->to_ms, .has_rank = true, .rank = rank };
	struct byte_buf text = { 0 }, none = { 0 };
	struct folded_diff diff = { 0 };
	uint64_t totals[2] = { 0, 0 };
	int rc;

	memset(p, 0, sizeof(*p));
	p->rank = rank;
	if (!(rc = ctx->folded(ctx->profiles_arg, &f, QUERY_DEFAULT_STACK_LIMIT, &text)) &&
	    !(rc = folded_diff_build(&text, &none, &diff))) {
		int n = layers_cpu_diff_deltas(&diff, &p->fns, totals);
		if (n < 0)
			rc = n;
		else
			p->nfns = n;
	}
	p->samples = totals[0];
	byte_buf_free(&text);
	folded_diff_free(&diff);
	return rc;
}

static int cpu_delta_by_name(const void *a, const void *b)
{
	return strcmp(((const struct cpu_delta *)a)->name, ((const struct cpu_delta *)b)->name);
}

/* The waterline of one group over the profiles of its ranks that have enough samples. */
static json_t *wl_group_json(const struct wl_group *g, const struct wl_profile *profiles,
			     size_t nprofiles, double k, double min_pp, int *rc)
{
	const struct wl_profile **members = calloc(g->n + 1, sizeof(*members));
	struct cpu_delta *names = NULL;
	struct waterline_flag *flags = NULL;
	double *frac = NULL;
	size_t nm = 0, nnames = 0, cap = 0;
	json_t *out = NULL, *list = json_array();
	int nflags = 0;

	*rc = -ENOMEM;
	if (!members || !list)
		goto cleanup;
	for (size_t i = 0; i < g->n; i++)
		for (size_t j = 0; j < nprofiles; j++)
			if (profiles[j].rank == g->ranks[i] && profiles[j].samples >= LAYERS_CPU_MIN_SAMPLES)
				members[nm++] = &profiles[j];
	/* The functions any member ran, sorted by name so each gets one column. */
	for (size_t i = 0; i < nm; i++)
		for (int f = 0; f < members[i]->nfns && nnames < WATERLINE_MAX_FUNCTIONS; f++) {
			if (grow((void **)&names, &cap, nnames, sizeof(*names)))
				goto cleanup;
			names[nnames++] = (struct cpu_delta){ members[i]->fns[f].name, 0, 0 };
		}
	if (nnames > 1)
		qsort(names, nnames, sizeof(*names), cpu_delta_by_name);
	size_t u = 0;
	for (size_t i = 0; i < nnames; i++)
		if (!u || strcmp(names[u - 1].name, names[i].name))
			names[u++] = names[i];
	nnames = u;
	if (!(frac = calloc(nm * nnames + 1, sizeof(*frac))))
		goto cleanup;
	for (size_t i = 0; i < nm; i++)
		for (int f = 0; f < members[i]->nfns; f++) {
			struct cpu_delta key = { members[i]->fns[f].name, 0, 0 };
			struct cpu_delta *hit = bsearch(&key, names, nnames, sizeof(*names),
							cpu_delta_by_name);
			if (hit)
				frac[i * nnames + (size_t)(hit - names)] = members[i]->fns[f].a_fraction;
		}
	if ((nflags = layers_waterline(frac, nm, nnames, k, min_pp / 100, &flags)) < 0) {
		*rc = nflags;
		nflags = 0;
		goto cleanup;
	}
	for (int i = 0; i < nflags && i < WATERLINE_TOP_FLAGS; i++)
		json_array_append_new(list, json_pack("{s:i,s:s,s:f,s:f,s:f,s:o}", "rank",
						       members[flags[i].rank]->rank, "function",
						       names[flags[i].fn].name, "pct",
						       100 * flags[i].fraction, "mean_pct",
						       100 * flags[i].mean, "std_pct", 100 * flags[i].std,
						       "z", isfinite(flags[i].z) ? json_real(flags[i].z)
										 : json_null()));
	out = json_pack("{s:o,s:I,s:I,s:I,s:O}", "comm", render_json_key(g->key), "ranks",
			(json_int_t)g->n, "ranks_analysed", (json_int_t)nm, "flags_total",
			(json_int_t)nflags, "flags", list);
	*rc = out ? 0 : -ENOMEM;
cleanup:
	free(members);
	free(names);
	free(frac);
	free(flags);
	json_decref(list);
	return out;
}

int diagnosis_waterline(const struct diagnosis_ctx *ctx, const struct diagnosis_scope *scope,
			double k, double min_pp, json_t **out)
{
	struct wl_doc d = { .has_comm = scope->has_comm, .comm = scope->comm };
	struct wl_profile *profiles = NULL;
	size_t nprofiles = 0, cap = 0, skipped = 0;
	json_t *groups = json_array();
	int rc;

	*out = NULL;
	if (!groups) {
		rc = -ENOMEM;
		goto cleanup;
	}
	if ((rc = store_job_communicators_list(ctx->store, scope->job, QUERY_MAX_JOB_ROWS, wl_member, &d)))
		goto cleanup;
	for (size_t i = 0; i < d.n; i++) {
		struct wl_group *g = &d.groups[i];
		json_t *gj;
		if (g->n > DIAGNOSIS_WATERLINE_MAX_RANKS) {
			skipped++;
			continue;
		}
		/* Each rank's profile once, whatever groups it is in. */
		for (size_t r = 0; r < g->n; r++) {
			bool have = false;
			for (size_t j = 0; j < nprofiles && !have; j++)
				have = profiles[j].rank == g->ranks[r];
			if (have)
				continue;
			if (nprofiles >= DIAGNOSIS_WATERLINE_MAX_RANKS) {
				rc = -E2BIG;
				goto cleanup;
			}
			if (grow((void **)&profiles, &cap, nprofiles, sizeof(*profiles))) {
				rc = -ENOMEM;
				goto cleanup;
			}
			rc = wl_profile_load(ctx, scope, g->ranks[r], &profiles[nprofiles]);
			nprofiles++;
			if (rc)
				goto cleanup;
		}
		if (!(gj = wl_group_json(g, profiles, nprofiles, k, min_pp, &rc)) ||
		    json_array_append_new(groups, gj))
			goto cleanup;
	}
	*out = json_pack("{s:o,s:o,s:o,s:{s:f,s:f},s:I,s:O}", "job", render_json_string(scope->job),
			 "from", render_json_time(scope->from_ms * 1000000), "to",
			 render_json_time(scope->to_ms * 1000000), "params", "k", k, "min_pp", min_pp,
			 "skipped_communicators", (json_int_t)skipped, "communicators", groups);
	rc = *out ? 0 : -ENOMEM;
cleanup:
	for (size_t i = 0; i < nprofiles; i++)
		layers_cpu_deltas_free(profiles[i].fns, profiles[i].nfns);
	free(profiles);
	for (size_t i = 0; i < d.n; i++)
		free(d.groups[i].ranks);
	free(d.groups);
	json_decref(groups);
	return rc;
}
