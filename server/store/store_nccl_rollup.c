/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL instances kept past the raw calls (issue 19), for every backend with the rollup ops:
 *   - store__nccl_rollup_run, retention's first step: reads the instances whose first entry
 *     is in [watermark, raw cutoff rounded up to a minute) with the backend's own raw
 *     reader, a minute of first entries at a time, and writes one row per (job,
 *     communicator, op, minute, part) with nccl_instance.h's blob, then moves the watermark.
 *     A minute is written whole and the same from the same raw calls, and a row whose key
 *     is there already is left alone, so a run cut short is simply run again.
 *   - store__collectives_read, store_collectives_list: instances with a first entry before
 *     the watermark W come from the rollup, the rest from raw calls, merged into the answer
 *     raw calls alone would have given.
 * The rollup of an instance holds every call the raw reader gave for it (its calls entered
 * after the cutoff too), so raw calls still present of an instance it holds (a chunk that
 * straddled the cutoff) are ignored: only instances with an entry >= W can have such calls,
 * and those are in the rollup rows with a last entry >= W, at most max_span before W.
 * A range that reaches both sides holds the raw part's calls (max_instances + those rows'
 * instances, with every rank's calls) until the two are merged.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "server/store/nccl_instance.h"
#include "server/store/store_impl.h"

#define NS_PER_S 1000000000LL
/* Calls of a job entered this long before its first batch window still count (its first
 * run, without a watermark). */
#define ROLLUP_MARGIN_NS (600 * NS_PER_S)
/* The instances of a job are read a minute (of first entries) at a time, in passes of at
 * most this many instances (the raw reader holds their calls); the minute's are held until
 * written, at most ROLLUP_MAX_HELD_CALLS calls (~56 bytes each; a 1,000-rank job at 10
 * instances a second holds 600,000). */
#define ROLLUP_MINUTE_NS (60 * NS_PER_S)
#define ROLLUP_PASS_INSTANCES 1024
#define ROLLUP_MAX_HELD_CALLS (4u << 20)
/* Jobs one run looks at (names held). */
#define ROLLUP_MAX_JOBS 100000

static uint32_t pass_instances = ROLLUP_PASS_INSTANCES;

void store__nccl_rollup_pass_set(uint32_t instances)
{
	pass_instances = instances ? instances : ROLLUP_PASS_INSTANCES;
}

static int cmp_i64(int64_t a, int64_t b)
{
	return (a > b) - (a < b);
}

/* Keys and sequence numbers compare as the signed integers the stores keep. */
static int key_cmp(uint64_t ka, uint8_t oa, uint64_t sa, uint64_t kb, uint8_t ob, uint64_t sb)
{
	int c = cmp_i64((int64_t)ka, (int64_t)kb);
	if (!c)
		c = (oa > ob) - (oa < ob);
	if (!c)
		c = cmp_i64((int64_t)sa, (int64_t)sb);
	return c;
}

static int64_t sat_add(int64_t a, int64_t b)
{
	if (b > 0 && a > INT64_MAX - b)
		return INT64_MAX;
	if (b < 0 && a < INT64_MIN - b)
		return INT64_MIN;
	return a + b;
}

/* ---- the computation ------------------------------------------------------------------------ */

static int64_t minute_floor_ns(int64_t ns)
{
	int64_t r = ns % ROLLUP_MINUTE_NS;

	return r < 0 ? ns - r - ROLLUP_MINUTE_NS : ns - r;
}

struct job_name {
	char *name;
	int64_t first_seen_ns, last_seen_ns;
};

struct jobs {
	struct job_name *v;
	size_t n, cap;
};

static int job_row(void *arg, const struct store_job *j)
{
	struct jobs *js = arg;

	if (SYSOM_ARRAY_RESERVE(js->v, js->cap, js->n, 16))
		return -ENOMEM;
	if (!(js->v[js->n].name = strdup(j->job)))
		return -ENOMEM;
	js->v[js->n].first_seen_ns = j->first_seen_ns;
	js->v[js->n++].last_seen_ns = j->last_seen_ns;
	return 0;
}

/* One (communicator, op)'s instances of the minute being read. */
struct acc {
	uint64_t comm_key;
	uint8_t op;
	struct nccl_instance *inst;
	size_t ninst, inst_cap;
	struct nccl_instance_call *calls;
	size_t ncalls, calls_cap;
	int64_t last_max; /* the latest entry of their calls */
};

/* One minute of one job, read in passes over [from, to]. */
struct pass {
	const char *job;
	int64_t from, to;
	/* the instance being read */
	bool open;
	uint64_t comm_key, seq;
	uint8_t op;
	int64_t first_entry, last_entry, first_in_range;
	int32_t nranks;
	struct nccl_instance_call *calls;
	size_t ncalls, calls_cap;
	bool too_big;
	/* the pass */
	uint32_t instances;
	int64_t last_order; /* first_in_range of the last instance read */
	/* the minute */
	struct acc *accs;
	size_t naccs, accs_cap;
	size_t held; /* calls in accs */
	uint64_t lost;
};

static void accs_reset(struct pass *p)
{
	for (size_t i = 0; i < p->naccs; i++) {
		p->accs[i].ninst = 0;
		p->accs[i].ncalls = 0;
		p->accs[i].last_max = INT64_MIN;
	}
	p->held = 0;
}

static int acc_get(struct pass *p, struct acc **out)
{
	for (size_t i = 0; i < p->naccs; i++)
		if (p->accs[i].comm_key == p->comm_key && p->accs[i].op == p->op) {
			*out = &p->accs[i];
			return 0;
		}
	if (SYSOM_ARRAY_RESERVE(p->accs, p->accs_cap, p->naccs, 8))
		return -ENOMEM;
	*out = &p->accs[p->naccs++];
	**out = (struct acc){ .comm_key = p->comm_key, .op = p->op, .last_max = INT64_MIN };
	return 0;
}

/* The instance read is complete: kept when its first entry is in this minute's range and a
 * pass cut short did not give it already (those are the last ones, of the same first entry). */
static int pass_close(struct pass *p)
{
	struct acc *a;
	int rc;

	if (!p->open)
		return 0;
	p->open = false;
	p->instances++;
	p->last_order = p->first_in_range;
	if (p->first_entry < p->from || p->first_entry > p->to)
		return 0; /* an earlier minute's (or none's: entered before the watermark) */
	if ((rc = acc_get(p, &a)))
		return rc;
	for (size_t i = a->ninst; i > 0 && a->inst[i - 1].first_entry_ns == p->first_entry; i--)
		if (a->inst[i - 1].seq == p->seq)
			return 0;
	if (p->too_big || p->held + p->ncalls > ROLLUP_MAX_HELD_CALLS) {
		p->lost++;
		return 0;
	}
	if (SYSOM_ARRAY_RESERVE(a->inst, a->inst_cap, a->ninst, 64))
		return -ENOMEM;
	if (a->ncalls + p->ncalls > a->calls_cap) {
		size_t cap = a->calls_cap ? a->calls_cap : 256;
		while (cap < a->ncalls + p->ncalls)
			cap *= 2;
		struct nccl_instance_call *v = realloc(a->calls, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		a->calls = v;
		a->calls_cap = cap;
	}
	memcpy(a->calls + a->ncalls, p->calls, p->ncalls * sizeof(*p->calls));
	a->inst[a->ninst++] = (struct nccl_instance){ .seq = p->seq,
						      .first_entry_ns = p->first_entry,
						      .nranks = p->nranks,
						      .ncalls = (uint32_t)p->ncalls,
						      .call0 = a->ncalls };
	a->ncalls += p->ncalls;
	p->held += p->ncalls;
	if (p->last_entry > a->last_max)
		a->last_max = p->last_entry;
	return 0;
}

static int pass_call(void *arg, const struct store_collective_call *c)
{
	struct pass *p = arg;
	int rc;

	if (p->open && (c->comm_key != p->comm_key || c->op != p->op || c->seq != p->seq) &&
	    (rc = pass_close(p)))
		return rc;
	if (!p->open) {
		p->open = true;
		p->comm_key = c->comm_key;
		p->op = c->op;
		p->seq = c->seq;
		p->first_entry = c->first_entry_ns;
		p->last_entry = INT64_MIN;
		p->first_in_range = INT64_MAX;
		p->nranks = c->nranks;
		p->ncalls = 0;
		p->too_big = false;
	}
	if (c->entry_ns > p->last_entry)
		p->last_entry = c->entry_ns;
	if (c->entry_ns >= p->from && c->entry_ns <= p->to && c->entry_ns < p->first_in_range)
		p->first_in_range = c->entry_ns;
	if (p->too_big || p->ncalls == NCCL_INSTANCE_MAX_CALLS) {
		p->too_big = true;
		return 0;
	}
	if (SYSOM_ARRAY_RESERVE(p->calls, p->calls_cap, p->ncalls, 64))
		return -ENOMEM;
	p->calls[p->ncalls++] = (struct nccl_instance_call){
		.process = c->process, .rank = c->rank, .job_rank = c->job_rank,
		.lateness_ns = (int64_t)((uint64_t)c->entry_ns - (uint64_t)c->first_entry_ns),
		.duration_ns = (int64_t)((uint64_t)c->exit_ns - (uint64_t)c->entry_ns),
		.count = c->count, .bytes = c->bytes, .peer = c->peer, .result = c->result,
	};
	return 0;
}

/* Writes the minute's instances: per (communicator, op), blobs of at most the format's
 * bounds, in one transaction. */
static int minute_write(struct store *s, struct pass *p, int64_t minute, uint64_t *instances)
{
	struct store__nccl_instances *rows = NULL;
	size_t nrows = 0, rows_cap = 0;
	size_t *offs = NULL;
	struct byte_buf blobs = { 0 };
	int rc = 0;

	for (size_t i = 0; i < p->naccs && !rc; i++) {
		struct acc *a = &p->accs[i];
		uint32_t part = 0;
		for (size_t i0 = 0; i0 < a->ninst && !rc; part++) {
			size_t i1 = i0, calls = 0;
			int64_t first_min = INT64_MAX, first_max = INT64_MIN;
			while (i1 < a->ninst && i1 - i0 < NCCL_INSTANCE_MAX_INSTANCES &&
			       calls + a->inst[i1].ncalls <= NCCL_INSTANCE_MAX_CALLS) {
				calls += a->inst[i1].ncalls;
				if (a->inst[i1].first_entry_ns < first_min)
					first_min = a->inst[i1].first_entry_ns;
				if (a->inst[i1].first_entry_ns > first_max)
					first_max = a->inst[i1].first_entry_ns;
				i1++;
			}
			size_t off = blobs.len;
			if (SYSOM_ARRAY_RESERVE(rows, rows_cap, nrows, 16) ||
			    !(offs = reallocarray(offs, rows_cap, sizeof(*offs)))) {
				rc = -ENOMEM;
				break;
			}
			if ((rc = nccl_instance_encode(a->inst + i0, i1 - i0,
						       a->calls + a->inst[i0].call0, calls, &blobs)))
				break;
			offs[nrows] = off;
			rows[nrows++] = (struct store__nccl_instances){
				.job = p->job, .comm_key = a->comm_key, .op = a->op,
				.minute_ns = minute, .part = part, .first_min_ns = first_min,
				.first_max_ns = first_max, .last_max_ns = a->last_max,
				.instances = (uint32_t)(i1 - i0), .calls = (uint32_t)calls,
				.len = blobs.len - off,
			};
			i0 = i1;
		}
	}
	if (!rc && nrows) {
		for (size_t i = 0; i < nrows; i++)
			rows[i].data = blobs.data + offs[i];
		rc = s->ops->nccl_rollup_put(s, rows, nrows);
		if (rc >= 0) {
			*instances += (uint64_t)rc; /* new ones: a run again writes none */
			rc = 0;
		}
	}
	free(rows);
	free(offs);
	byte_buf_free(&blobs);
	return rc;
}

/* The instances of one job with a first entry in [from, end) (minute starts), a minute at a
 * time, each minute in passes of at most pass_instances instances. */
static int job_rollup(struct store *s, const char *job, int64_t from, int64_t end,
		      uint64_t *instances, uint64_t *lost)
{
	struct pass p = { .job = job };
	int rc = 0;

	for (int64_t m = from; m < end && !rc; m += ROLLUP_MINUTE_NS) {
		accs_reset(&p);
		p.from = m;
		p.to = m + ROLLUP_MINUTE_NS - 1;
		for (int64_t t = m; t <= p.to;) {
			struct store_collective_filter f = { .job = job, .from_ns = t, .to_ns = p.to };

			p.open = false;
			p.instances = 0;
			if ((rc = s->ops->collectives_list(s, &f, pass_instances, pass_call, &p)) ||
			    (rc = pass_close(&p)))
				goto cleanup;
			if (p.instances < pass_instances)
				break;
			/* The pass held every instance ordered before its last one: the next starts
			 * there (those at that very time come again and are skipped). */
			if (p.last_order > t) {
				t = p.last_order;
			} else {
				p.lost++; /* more ties in one nanosecond than a pass holds */
				t++;
			}
		}
		rc = minute_write(s, &p, m, instances);
	}
cleanup:
	*lost += p.lost;
	for (size_t i = 0; i < p.naccs; i++) {
		free(p.accs[i].inst);
		free(p.accs[i].calls);
	}
	free(p.accs);
	free(p.calls);
	return rc;
}

int store__nccl_rollup_run(struct store *s, int64_t before_ms, uint64_t *instances,
			   uint64_t *lost)
{
	struct jobs js = { 0 };
	uint64_t written = 0, dropped = 0;
	int64_t wm = 0, span = 0, end;
	int rc = 0;

	if (instances)
		*instances = 0;
	if (lost)
		*lost = 0;
	if (!s->ops->nccl_rollup_put || before_ms <= 0)
		return 0;
	if (before_ms > INT64_MAX / 1000000 - ROLLUP_MINUTE_NS)
		return -EINVAL;
	/* Up to the minute after the cutoff: a minute's blobs are written whole, once. */
	end = minute_floor_ns(before_ms * 1000000 + ROLLUP_MINUTE_NS - 1);
	if ((rc = s->ops->nccl_rollup_state(s, &wm, &span)) || wm >= end)
		goto cleanup;
	if ((rc = store_jobs_list(s, ROLLUP_MAX_JOBS, job_row, &js)))
		goto cleanup;
	for (size_t i = 0; i < js.n; i++) {
		int64_t from = minute_floor_ns(sat_add(js.v[i].first_seen_ns, -ROLLUP_MARGIN_NS));
		int64_t to = sat_add(js.v[i].last_seen_ns, ROLLUP_MARGIN_NS);

		if (to < wm)
			continue; /* no call since the last run */
		if (from < wm)
			from = wm; /* a minute start: the last run's end */
		to = to < end ? minute_floor_ns(to) + ROLLUP_MINUTE_NS : end;
		if (to > end)
			to = end;
		if (from < to && (rc = job_rollup(s, js.v[i].name, from, to, &written, &dropped)))
			goto cleanup;
	}
	rc = s->ops->nccl_rollup_watermark_set(s, end);
cleanup:
	for (size_t i = 0; i < js.n; i++)
		free(js.v[i].name);
	free(js.v);
	if (instances)
		*instances = written;
	if (lost)
		*lost = dropped;
	return rc;
}

/* ---- the reader ----------------------------------------------------------------------------- */

/* One instance of the answer: from the rollup (calls decoded) or raw (calls in `raw`). */
struct ri {
	uint64_t comm_key, seq;
	uint8_t op;
	int64_t first_in_range, first_entry;
	int32_t nranks;
	struct nccl_instance_call *calls; /* rollup; NULL: raw */
	size_t ncalls;
	size_t raw0, raw1; /* raw: its calls */
};

struct key {
	uint64_t comm_key, seq;
	uint8_t op;
};

struct proc_cache {
	int64_t process;
	struct store__nccl_process p;
};

struct rd {
	struct store *s;
	const struct store_collective_filter *f;
	uint32_t max;
	bool desc;
	/* rollup candidates, ordered by the answer's order (reversed with `latest`) */
	struct ri *v;
	size_t n, cap;
	/* raw */
	int64_t raw_from;
	struct store_collective_call *raw;
	size_t nraw, raw_cap;
	char **hosts;
	size_t nhosts, hosts_cap;
	struct ri *rawi;
	size_t nrawi, rawi_cap;
	/* rollup instances raw calls may repeat */
	struct key *keys;
	size_t nkeys, keys_cap;
	/* process lookups */
	struct proc_cache *procs;
	size_t nprocs, procs_cap;
	int64_t span;
};

static int ri_order(const struct ri *a, const struct ri *b)
{
	int c = cmp_i64(a->first_in_range, b->first_in_range);
	return c ? c : key_cmp(a->comm_key, a->op, a->seq, b->comm_key, b->op, b->seq);
}

static int ri_cmp_asc(const void *x, const void *y)
{
	return ri_order(x, y);
}

static int ri_cmp_desc(const void *x, const void *y)
{
	return ri_order(y, x);
}

static void ri_free(struct ri *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].calls);
}

/* One kept instance: a candidate when a call is entered in the range, kept among the best
 * `max` by the answer's order. */
static int rollup_instance(struct rd *d, const struct store__nccl_instances *r,
			   const struct nccl_instance *in, const struct nccl_instance_call *calls)
{
	const struct store_collective_filter *f = d->f;
	struct ri x = { .comm_key = r->comm_key, .seq = in->seq, .op = r->op,
			.first_entry = in->first_entry_ns, .nranks = in->nranks,
			.first_in_range = INT64_MAX };

	for (uint32_t i = 0; i < in->ncalls; i++) {
		int64_t entry = (int64_t)((uint64_t)in->first_entry_ns +
					  (uint64_t)calls[i].lateness_ns);
		if (entry >= f->from_ns && entry <= f->to_ns && entry < x.first_in_range)
			x.first_in_range = entry;
	}
	if (x.first_in_range == INT64_MAX)
		return 0;
	/* Insert in order; the worst goes when full. */
	size_t at = d->n;
	while (at > 0 && (d->desc ? ri_order(&x, &d->v[at - 1]) > 0
				  : ri_order(&x, &d->v[at - 1]) < 0))
		at--;
	if (at == d->max)
		return 0;
	if (!(x.calls = malloc(in->ncalls * sizeof(*x.calls))))
		return -ENOMEM;
	memcpy(x.calls, calls, in->ncalls * sizeof(*x.calls));
	x.ncalls = in->ncalls;
	if (d->n == d->max) {
		free(d->v[d->n - 1].calls);
		d->n--;
	} else if (SYSOM_ARRAY_RESERVE(d->v, d->cap, d->n, 64)) {
		free(x.calls);
		return -ENOMEM;
	}
	memmove(&d->v[at + 1], &d->v[at], (d->n - at) * sizeof(*d->v));
	d->v[at] = x;
	d->n++;
	return 0;
}

/* A rollup row: its instances are candidates; stops the listing when no later row can hold
 * a better one (rows come by their earliest first entry). */
static int rollup_row(void *arg, const struct store__nccl_instances *r)
{
	struct rd *d = arg;
	struct nccl_instance *inst = NULL;
	struct nccl_instance_call *calls = NULL;
	size_t ninst = 0, ncalls = 0;
	int rc;

	if (d->n == d->max) {
		const struct ri *worst = &d->v[d->n - 1];
		if (!d->desc && r->first_min_ns > worst->first_in_range)
			return 1; /* every later row is entered after the worst kept */
		if (d->desc && sat_add(r->first_min_ns, d->span) < worst->first_in_range)
			return 1;
	}
	if ((rc = nccl_instance_decode(r->data, r->len, &inst, &ninst, &calls, &ncalls)))
		return rc;
	for (size_t i = 0; i < ninst && !rc; i++)
		rc = rollup_instance(d, r, &inst[i], calls + inst[i].call0);
	free(inst);
	free(calls);
	return rc;
}

/* A rollup row with calls entered from W on: its instances' keys (raw calls of them are
 * not read again). */
static int key_row(void *arg, const struct store__nccl_instances *r)
{
	struct rd *d = arg;
	struct nccl_instance *inst = NULL;
	struct nccl_instance_call *calls = NULL;
	size_t ninst = 0, ncalls = 0;
	int rc = nccl_instance_decode(r->data, r->len, &inst, &ninst, &calls, &ncalls);

	for (size_t i = 0; i < ninst && !rc; i++) {
		if (SYSOM_ARRAY_RESERVE(d->keys, d->keys_cap, d->nkeys, 64)) {
			rc = -ENOMEM;
			break;
		}
		d->keys[d->nkeys++] = (struct key){ r->comm_key, inst[i].seq, r->op };
	}
	free(inst);
	free(calls);
	return rc;
}

static int key_sort(const void *x, const void *y)
{
	const struct key *a = x, *b = y;
	return key_cmp(a->comm_key, a->op, a->seq, b->comm_key, b->op, b->seq);
}

static bool key_held(const struct rd *d, const struct ri *x)
{
	struct key k = { x->comm_key, x->seq, x->op };
	return d->nkeys && bsearch(&k, d->keys, d->nkeys, sizeof(k), key_sort);
}

static int host_intern(struct rd *d, const char *h, const char **out)
{
	for (size_t i = 0; i < d->nhosts; i++)
		if (!strcmp(d->hosts[i], h)) {
			*out = d->hosts[i];
			return 0;
		}
	if (SYSOM_ARRAY_RESERVE(d->hosts, d->hosts_cap, d->nhosts, 16) ||
	    !(d->hosts[d->nhosts] = strdup(h)))
		return -ENOMEM;
	*out = d->hosts[d->nhosts++];
	return 0;
}

/* The instance of raw calls just read is complete: kept unless the rollup holds it. */
static void raw_close(struct rd *d)
{
	struct ri *x;

	if (!d->nrawi)
		return;
	x = &d->rawi[d->nrawi - 1];
	if (x->raw1 != SIZE_MAX)
		return;
	x->raw1 = d->nraw;
	if (key_held(d, x)) {
		d->nraw = x->raw0;
		d->nrawi--;
	}
}

static int raw_call(void *arg, const struct store_collective_call *c)
{
	struct rd *d = arg;
	struct ri *x = d->nrawi ? &d->rawi[d->nrawi - 1] : NULL;
	int rc;

	if (!x || x->raw1 != SIZE_MAX || c->comm_key != x->comm_key || c->op != x->op ||
	    c->seq != x->seq) {
		raw_close(d);
		if (SYSOM_ARRAY_RESERVE(d->rawi, d->rawi_cap, d->nrawi, 64))
			return -ENOMEM;
		x = &d->rawi[d->nrawi++];
		*x = (struct ri){ .comm_key = c->comm_key, .seq = c->seq, .op = c->op,
				  .first_entry = c->first_entry_ns, .nranks = c->nranks,
				  .first_in_range = INT64_MAX, .raw0 = d->nraw, .raw1 = SIZE_MAX };
	}
	if (c->entry_ns >= d->raw_from && c->entry_ns <= d->f->to_ns &&
	    c->entry_ns < x->first_in_range)
		x->first_in_range = c->entry_ns;
	if (SYSOM_ARRAY_RESERVE(d->raw, d->raw_cap, d->nraw, 256))
		return -ENOMEM;
	d->raw[d->nraw] = *c;
	if ((rc = host_intern(d, c->hostname ? c->hostname : "", &d->raw[d->nraw].hostname)))
		return rc;
	d->nraw++;
	return 0;
}

static int proc_get(struct rd *d, int64_t process, const struct store__nccl_process **out)
{
	for (size_t i = 0; i < d->nprocs; i++)
		if (d->procs[i].process == process) {
			*out = &d->procs[i].p;
			return 0;
		}
	if (SYSOM_ARRAY_RESERVE(d->procs, d->procs_cap, d->nprocs, 16))
		return -ENOMEM;
	struct proc_cache *pc = &d->procs[d->nprocs];
	*pc = (struct proc_cache){ .process = process };
	int rc = process ? d->s->ops->nccl_rollup_process(d->s, process, &pc->p) : 0;
	if (rc == -ENOENT)
		rc = 0; /* unknown: pid 0, no node */
	if (rc)
		return rc;
	d->nprocs++;
	*out = &pc->p;
	return 0;
}

static int emit(struct rd *d, const struct ri *x, store_collective_fn fn, void *arg)
{
	int rc;

	if (!x->calls) {
		for (size_t i = x->raw0; i < x->raw1; i++)
			if ((rc = fn(arg, &d->raw[i])))
				return rc;
		return 0;
	}
	for (size_t i = 0; i < x->ncalls; i++) {
		const struct nccl_instance_call *k = &x->calls[i];
		const struct store__nccl_process *p;
		if ((rc = proc_get(d, k->process, &p)))
			return rc;
		int64_t entry = (int64_t)((uint64_t)x->first_entry + (uint64_t)k->lateness_ns);
		struct store_collective_call out = {
			.comm_key = x->comm_key, .seq = x->seq, .op = x->op,
			.first_entry_ns = x->first_entry, .nranks = x->nranks, .rank = k->rank,
			.entry_ns = entry,
			.exit_ns = (int64_t)((uint64_t)entry + (uint64_t)k->duration_ns),
			.count = k->count, .bytes = k->bytes, .peer = k->peer, .result = k->result,
			.pid = p->pid, .tid = 0, .hostname = p->hostname, .job_rank = k->job_rank,
			.process = k->process,
		};
		memcpy(out.node_id, p->node_id, sizeof(out.node_id));
		if ((rc = fn(arg, &out)))
			return rc;
	}
	return 0;
}

static int merged_read(struct rd *d, store_collective_fn fn, void *arg, int64_t w)
{
	const struct store_collective_filter *f = d->f;
	struct ri *all = NULL;
	int rc = 0;

	/* The rollup rows that can have a call in the range. */
	int64_t hi = f->to_ns < w - 1 ? f->to_ns : w - 1;
	struct store__nccl_rollup_query q = { .job = f->job,
					      .first_lo_ns = sat_add(f->from_ns, -d->span),
					      .first_hi_ns = hi, .last_from_ns = f->from_ns,
					      .has_comm = f->has_comm, .comm = f->comm, .op = f->op,
					      .descending = d->desc };
	if (q.first_lo_ns <= q.first_hi_ns &&
	    (rc = d->s->ops->nccl_rollup_list(d->s, &q, rollup_row, d)))
		goto cleanup;
	/* The raw calls from W on, less the instances the rollup holds. */
	if (f->to_ns >= w) {
		struct store_collective_filter rf = *f;
		q.first_lo_ns = sat_add(w, -d->span);
		q.first_hi_ns = w - 1;
		q.last_from_ns = w;
		if (q.first_lo_ns <= q.first_hi_ns &&
		    (rc = d->s->ops->nccl_rollup_list(d->s, &q, key_row, d)))
			goto cleanup;
		if (d->nkeys)
			qsort(d->keys, d->nkeys, sizeof(*d->keys), key_sort);
		rf.from_ns = f->from_ns > w ? f->from_ns : w;
		d->raw_from = rf.from_ns;
		uint64_t lim = (uint64_t)d->max + d->nkeys;
		if ((rc = d->s->ops->collectives_list(d->s, &rf, lim > UINT32_MAX ? UINT32_MAX
										: (uint32_t)lim,
						      raw_call, d)))
			goto cleanup;
		raw_close(d);
	}
	/* Both, in the answer's order, the first (last) max, visited ascending. */
	size_t n = d->n + d->nrawi;
	if (!n)
		goto cleanup;
	if (!(all = malloc(n * sizeof(*all)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	if (d->n)
		memcpy(all, d->v, d->n * sizeof(*all));
	if (d->nrawi)
		memcpy(all + d->n, d->rawi, d->nrawi * sizeof(*all));
	qsort(all, n, sizeof(*all), d->desc ? ri_cmp_desc : ri_cmp_asc);
	if (n > d->max)
		n = d->max;
	if (d->desc)
		qsort(all, n, sizeof(*all), ri_cmp_asc);
	for (size_t i = 0; i < n && !rc; i++)
		rc = emit(d, &all[i], fn, arg);
cleanup:
	free(all);
	return rc;
}

int store__collectives_read(struct store *s, const struct store_collective_filter *f,
			    uint32_t max_instances, store_collective_fn fn, void *arg)
{
	struct rd d = { .s = s, .f = f, .max = max_instances, .desc = f->latest };
	int64_t w = 0;
	int rc;

	if (!s->ops->nccl_rollup_state)
		return s->ops->collectives_list(s, f, max_instances, fn, arg);
	if ((rc = s->ops->nccl_rollup_state(s, &w, &d.span)))
		return rc;
	/* Nothing kept, or a range no kept instance reaches: raw calls only. */
	if (w <= 0 || f->from_ns > sat_add(w, d.span) || !max_instances || f->to_ns < f->from_ns)
		return s->ops->collectives_list(s, f, max_instances, fn, arg);
	rc = merged_read(&d, fn, arg, w);
	ri_free(d.v, d.n);
	free(d.v);
	free(d.raw);
	for (size_t i = 0; i < d.nhosts; i++)
		free(d.hosts[i]);
	free(d.hosts);
	free(d.rawi);
	free(d.keys);
	free(d.procs);
	return rc;
}
