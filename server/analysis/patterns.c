/* SPDX-License-Identifier: Apache-2.0 */
/* Behaviour patterns and their localisation (server/analysis/patterns.h). */
#include "server/analysis/patterns.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/bytes.h"
#include "include/sysom/histogram.h"
#include "include/sysom/nccl_ops.h"
#include "server/analysis/robust.h"
#include "server/http/render.h"
#include "server/query/limits.h"

/* Absolute scale floors per dimension: half a percent of the iteration, 1 µs, 0.05. */
static const double abs_floor[3] = { 0.005, 1000.0, 0.05 };

const char *patterns_kind_name(enum patterns_kind k)
{
	switch (k) {
	case PATTERNS_COLLECTIVE:
		return "collective";
	case PATTERNS_P2P:
		return "p2p";
	case PATTERNS_KERNEL:
		return "kernel";
	default:
		return "cpu";
	}
}

const char *patterns_dim_name(enum patterns_dim d)
{
	return d == PATTERNS_BETA ? "beta" : d == PATTERNS_MU ? "mu" : "cov";
}

void patterns_params_default(struct patterns_params *p)
{
	p->k = PATTERNS_DEFAULT_K;
	p->min_beta = PATTERNS_DEFAULT_MIN_BETA;
	p->rel_floor = PATTERNS_DEFAULT_REL_FLOOR;
	p->history_change = PATTERNS_DEFAULT_HISTORY_CHANGE;
	p->limit = PATTERNS_DEFAULT_LIMIT;
	p->calls = true;
}

/* ---- the bounded top list ------------------------------------------------------------------ */

int patterns_top_init(struct patterns_top *t, size_t cap)
{
	memset(t, 0, sizeof(*t));
	t->cap = cap ? cap : 1;
	t->f = calloc(t->cap, sizeof(*t->f));
	return t->f ? 0 : -ENOMEM;
}

void patterns_top_free(struct patterns_top *t)
{
	free(t->f);
	memset(t, 0, sizeof(*t));
}

/* a ranks below b: smaller cost, then smaller |z|, then the larger worker and function. */
static bool below(const struct patterns_finding *a, const struct patterns_finding *b)
{
	if (a->cost != b->cost)
		return a->cost < b->cost;
	if (fabs(a->z) != fabs(b->z))
		return fabs(a->z) < fabs(b->z);
	if (a->worker != b->worker)
		return a->worker > b->worker;
	return a->function > b->function;
}

static void sift_down(struct patterns_finding *h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < n && below(&h[l], &h[m]))
			m = l;
		if (l + 1 < n && below(&h[l + 1], &h[m]))
			m = l + 1;
		if (m == i)
			return;
		struct patterns_finding t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

static void top_push(struct patterns_top *t, const struct patterns_finding *f)
{
	t->total++;
	if (t->n == t->cap) {
		if (!below(&t->f[0], f))
			return;
		t->f[0] = *f;
		sift_down(t->f, t->n, 0);
		return;
	}
	size_t i = t->n++;
	t->f[i] = *f;
	while (i && below(&t->f[i], &t->f[(i - 1) / 2])) {
		struct patterns_finding x = t->f[i];
		t->f[i] = t->f[(i - 1) / 2];
		t->f[(i - 1) / 2] = x;
		i = (i - 1) / 2;
	}
}

void patterns_top_sort(struct patterns_top *t)
{
	/* Heap sort with the min-heap: the smallest goes last, so the order ends descending. */
	for (size_t n = t->n; n > 1; n--) {
		struct patterns_finding x = t->f[0];
		t->f[0] = t->f[n - 1];
		t->f[n - 1] = x;
		sift_down(t->f, n - 1, 0);
	}
}

/* ---- localisation -------------------------------------------------------------------------- */

/* Median and MAD of the values that are numbers; *count gets how many. */
static void center(const double *v, size_t n, double *scratch, double *med, double *mad,
		   size_t *count)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		if (!isnan(v[i]))
			scratch[k++] = v[i];
	*count = k;
	if (!k) {
		*med = *mad = NAN;
		return;
	}
	double m = robust_median(scratch, k);
	size_t j = 0;
	for (size_t i = 0; i < n; i++)
		if (!isnan(v[i]))
			scratch[j++] = fabs(v[i] - m);
	*med = m;
	*mad = robust_median(scratch, k);
}

size_t patterns_localise(const struct patterns_vectors *v, uint32_t function,
			 const struct patterns_params *p, double *scratch, struct patterns_top *top,
			 struct patterns_summary *summary)
{
	const double *dims[3] = { v->beta, v->mu, v->cov };
	double med[3], mad[3], scale[3];
	size_t count[3], found = 0, active = 0;

	for (int d = 0; d < 3; d++) {
		if (!dims[d]) {
			med[d] = mad[d] = NAN;
			count[d] = 0;
			continue;
		}
		center(dims[d], v->n, scratch, &med[d], &mad[d], &count[d]);
		scale[d] = fmax(fmax(ROBUST_MAD_SIGMA * mad[d], p->rel_floor * fabs(med[d])),
				abs_floor[d]);
	}
	for (size_t w = 0; w < v->n; w++)
		active += v->beta[w] > 0;
	if (summary)
		*summary = (struct patterns_summary){ med[0], med[1], med[2], mad[0], mad[1], mad[2],
						      active };
	if (v->n < 3) /* a median of two says nothing about which one is abnormal */
		return 0;
	for (size_t w = 0; w < v->n; w++) {
		double beta = v->beta[w];
		struct patterns_finding best = { 0 };
		bool abnormal = false;
		/* The function must matter on this worker or on its peers. */
		if (!(beta >= p->min_beta || med[0] >= p->min_beta))
			continue;
		for (int d = 0; d < 3; d++) {
			if (!count[d] || count[d] < 3)
				continue;
			double x = dims[d][w];
			if (isnan(x))
				continue;
			double sc = scale[d];
			if (d == PATTERNS_BETA && v->beta_se && isfinite(v->beta_se[w]))
				sc = fmax(sc, v->beta_se[w]);
			double z = (x - med[d]) / sc;
			if (fabs(z) <= p->k)
				continue;
			double cost = d == PATTERNS_BETA ? fabs(x - med[d])
				      : beta * fabs(x - med[d]) / fmax(fabs(x), fabs(med[d]));
			struct patterns_finding f = { .function = function, .worker = (int32_t)w,
						      .dim = (enum patterns_dim)d, .value = x,
						      .median = med[d], .scale = sc, .z = z,
						      .beta = beta, .cost = cost };
			if (!abnormal || below(&best, &f))
				best = f;
			abnormal = true;
		}
		if (abnormal) {
			top_push(top, &best);
			found++;
		}
	}
	return found;
}

/* ---- a job's table ------------------------------------------------------------------------- */

struct pfn {
	char *name;
	enum patterns_kind kind;
	double *count, *sum, *sumsq; /* per worker; CPU: sum = samples */
};

struct ptable {
	int32_t nworkers;
	struct pfn *fns;
	size_t nfns, cap;
	uint64_t dropped;        /* functions over PATTERNS_MAX_FUNCTIONS */
	int32_t op_fn[SYSOM_NCCL_OP_MAX + 1]; /* function index of an op, -1 none */
	double *first, *last;    /* per worker: earliest entry, latest exit (ns) */
	double *cpu_total;       /* per worker: CPU samples */
	double range_ns;
	uint64_t calls, kernels;
};

static void table_free(struct ptable *t)
{
	for (size_t i = 0; i < t->nfns; i++) {
		free(t->fns[i].name);
		free(t->fns[i].count);
	}
	free(t->fns);
	free(t->first);
	free(t->cpu_total);
	memset(t, 0, sizeof(*t));
}

static int table_init(struct ptable *t, int32_t nworkers, double range_ns)
{
	memset(t, 0, sizeof(*t));
	t->nworkers = nworkers;
	t->range_ns = range_ns;
	for (size_t i = 0; i <= SYSOM_NCCL_OP_MAX; i++)
		t->op_fn[i] = -1;
	t->first = malloc((size_t)nworkers * 2 * sizeof(double));
	t->cpu_total = calloc((size_t)nworkers, sizeof(double));
	if (!t->first || !t->cpu_total)
		return -ENOMEM;
	t->last = t->first + nworkers;
	for (int32_t w = 0; w < nworkers; w++) {
		t->first[w] = INFINITY;
		t->last[w] = -INFINITY;
	}
	return 0;
}

/* The function's index, added when new; -1 when the table is full, -ENOMEM... as -2. */
static int table_fn(struct ptable *t, enum patterns_kind kind, const char *name)
{
	for (size_t i = 0; i < t->nfns; i++)
		if (t->fns[i].kind == kind && strcmp(t->fns[i].name, name) == 0)
			return (int)i;
	if (t->nfns == PATTERNS_MAX_FUNCTIONS) {
		t->dropped++;
		return -1;
	}
	if (SYSOM_ARRAY_RESERVE(t->fns, t->cap, t->nfns, 16))
		return -2;
	struct pfn *f = &t->fns[t->nfns];
	f->kind = kind;
	f->name = strdup(name);
	f->count = calloc((size_t)t->nworkers * 3, sizeof(double));
	if (!f->name || !f->count) {
		free(f->name);
		free(f->count);
		return -2;
	}
	f->sum = f->count + t->nworkers;
	f->sumsq = f->sum + t->nworkers;
	return (int)t->nfns++;
}

/* ---- loading ------------------------------------------------------------------------------- */

struct rank_key {
	uint32_t pid;
	const char *host; /* owned by the rank list */
	int32_t rank;
};

struct rank_map {
	struct rank_key *k;
	size_t n, cap;
	int32_t max_rank;
};

static int rank_take(void *arg, const struct store_job_rank *r)
{
	struct rank_map *m = arg;

	/* A rank's worker (DataLoader) is not another rank: patterns compare rank processes. */
	if (r->rank < 0 || r->rank >= PATTERNS_MAX_WORKERS || r->role == SYSOM_JOB_ROLE_WORKER)
		return 0;
	if (SYSOM_ARRAY_RESERVE(m->k, m->cap, m->n, 64))
		return -ENOMEM;
	char *h = strdup(r->hostname ? r->hostname : "");
	if (!h)
		return -ENOMEM;
	m->k[m->n++] = (struct rank_key){ r->pid, h, r->rank };
	if (r->rank > m->max_rank)
		m->max_rank = r->rank;
	return 0;
}

static int key_cmp(const void *a, const void *b)
{
	const struct rank_key *x = a, *y = b;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return strcmp(x->host, y->host);
}

static void rank_map_free(struct rank_map *m)
{
	for (size_t i = 0; i < m->n; i++)
		free((char *)m->k[i].host);
	free(m->k);
}

static int32_t rank_of(const struct rank_map *m, uint32_t pid, const char *host)
{
	struct rank_key key = { pid, host ? host : "", 0 };
	const struct rank_key *k = bsearch(&key, m->k, m->n, sizeof(*m->k), key_cmp);
	return k ? k->rank : -1;
}

/* The host of a rank (its first process's), "" when unknown. */
static const char *host_of(const struct rank_map *m, int32_t rank)
{
	for (size_t i = 0; i < m->n; i++)
		if (m->k[i].rank == rank)
			return m->k[i].host;
	return "";
}

struct load {
	struct ptable *t;
	const struct rank_map *ranks;
	int rc;
};

static int call_take(void *arg, const struct store_collective_call *c)
{
	struct load *l = arg;
	struct ptable *t = l->t;
	int32_t w = rank_of(l->ranks, c->pid, c->hostname);
	const char *name = sysom_nccl_op_name(c->op);
	int fi;

	if (w < 0 || w >= t->nworkers || !name || c->op > SYSOM_NCCL_OP_MAX || c->exit_ns < c->entry_ns)
		return 0;
	if ((fi = t->op_fn[c->op]) < 0) {
		bool p2p = c->op == SYSOM_NCCL_SEND || c->op == SYSOM_NCCL_RECV;
		if ((fi = table_fn(t, p2p ? PATTERNS_P2P : PATTERNS_COLLECTIVE, name)) == -2)
			return -ENOMEM;
		if (fi < 0)
			return 0;
		t->op_fn[c->op] = fi;
	}
	double d = (double)(c->exit_ns - c->entry_ns);
	struct pfn *f = &t->fns[fi];
	f->count[w] += 1;
	f->sum[w] += d;
	f->sumsq[w] += d * d;
	if ((double)c->entry_ns < t->first[w])
		t->first[w] = (double)c->entry_ns;
	if ((double)c->exit_ns > t->last[w])
		t->last[w] = (double)c->exit_ns;
	t->calls++;
	return 0;
}

/* Kernel rows: μ exact (total / count), the spread from the duration histogram (bucket i
 * stands for 1.5 × 2^(i-1) µs; coarse: a kernel within one bucket has σ 0). */
static int kernel_take(void *arg, const struct store_gpu_kernel_row *r)
{
	struct load *l = arg;
	struct ptable *t = l->t;
	int32_t w = r->who.job_rank;
	int fi;

	if (w < 0 || w >= t->nworkers || !r->count || !r->name)
		return 0;
	if ((fi = table_fn(t, PATTERNS_KERNEL, r->name)) == -2)
		return -ENOMEM;
	if (fi < 0)
		return 0;
	struct pfn *f = &t->fns[fi];
	double hsum = 0, hsq = 0, hn = 0;
	for (int b = 0; b < SYSOM_GPU_HIST_BUCKETS; b++) {
		double mid = b == 0 ? 500.0 : 1.5 * 1000.0 * ldexp(1.0, b - 1);
		hn += r->hist[b];
		hsum += r->hist[b] * mid;
		hsq += r->hist[b] * mid * mid;
	}
	double mean = (double)r->total_ns / (double)r->count;
	/* E[x²] from the exact mean and the histogram's relative spread. */
	double rel_var = hn > 0 && hsum > 0 ? fmax(0, hsq / hn / ((hsum / hn) * (hsum / hn)) - 1) : 0;
	f->count[w] += (double)r->count;
	f->sum[w] += (double)r->total_ns;
	f->sumsq[w] += (double)r->count * mean * mean * (1 + rel_var);
	t->kernels += r->count;
	return 0;
}

/*
 * Whether the folded frame text[0..len) is a Python frame as the symbolizer names them
 * ("qualname (file.py:line)", "qualname (<string>:line)", "qualname (file.py)", "qualname
 * (line N)"): then *fn_len is the qualname's length and text[*file_at..+*file_len) the file
 * (length 0 when the frame names none).
 */
static bool python_frame(const char *text, size_t len, size_t *fn_len, size_t *file_at,
			 size_t *file_len)
{
	if (len < 4 || text[len - 1] != ')')
		return false;
	const char *open = NULL;
	for (const char *c = text + len - 2; c > text; c--)
		if (*c == '(') {
			open = c;
			break;
		} else if (*c == ')' || *c == ';') {
			return false;
		}
	if (!open || open[-1] != ' ' || open - 1 == text)
		return false;
	const char *in = open + 1, *close = text + len - 1;
	const char *colon = memrchr(in, ':', (size_t)(close - in));
	const char *file_end = close;
	if (colon) {
		if (colon + 1 == close)
			return false;
		for (const char *d = colon + 1; d < close; d++)
			if (*d < '0' || *d > '9')
				return false;
		file_end = colon;
	}
	size_t flen = (size_t)(file_end - in);
	bool is_file = (flen > 3 && !memcmp(file_end - 3, ".py", 3)) ||
		       (flen > 2 && in[0] == '<' && file_end[-1] == '>');
	bool is_line = !colon && flen > 5 && !memcmp(in, "line ", 5);
	if (!is_file && !is_line)
		return false;
	*fn_len = (size_t)(open - 1 - text);
	*file_at = is_line ? 0 : (size_t)(in - text);
	*file_len = is_line ? 0 : flen;
	return true;
}

size_t patterns_cpu_function(const char *stack, size_t len, char *out, size_t cap)
{
	const char *end = stack + len, *leaf = end;
	size_t fn_len = 0, file_at = 0, file_len = 0;
	int wrote;

	if (!cap)
		return 0;
	out[0] = '\0';
	while (leaf > stack && leaf[-1] != ';')
		leaf--;
	/* The first frame is the process comm: a stack of it alone has no function. Kernel
	 * leaves ("_[k]") are mostly the scheduler on a shared machine: the OS layer's
	 * business, not a key function of the job. */
	if (leaf == stack || leaf == end || (end - leaf >= 4 && !memcmp(end - 4, "_[k]", 4)))
		return 0;
	/* The innermost Python frame, from the leaf up (not the comm). */
	for (const char *fr = leaf, *fr_end = end; fr > stack;) {
		if (python_frame(fr, (size_t)(fr_end - fr), &fn_len, &file_at, &file_len)) {
			wrote = file_len ? snprintf(out, cap, "%.*s (%.*s)", (int)fn_len, fr,
						    (int)file_len, fr + file_at)
					 : snprintf(out, cap, "%.*s", (int)fn_len, fr);
			return wrote < 0 ? 0 : (size_t)wrote < cap ? (size_t)wrote : cap - 1;
		}
		fr_end = fr - 1;
		for (fr = fr_end; fr > stack && fr[-1] != ';'; fr--)
			;
	}
	wrote = snprintf(out, cap, "%.*s", (int)(end - leaf), leaf);
	return wrote < 0 ? 0 : (size_t)wrote < cap ? (size_t)wrote : cap - 1;
}

/*
 * One rank's CPU profile: samples per key function, the hottest PATTERNS_CPU_TOP. A sample's
 * key function is its innermost Python frame when it has one (the Python code running, or
 * calling into the native code below: "slow_step (train.py)", lines merged), else its leaf
 * ("self" time of a native function). Without the first rule a PyTorch rank's profile is
 * the interpreter's and libtorch's leaves, the same on every rank.
 */
struct leaf {
	char *name;
	double samples;
};

static int leaf_cmp(const void *a, const void *b)
{
	const struct leaf *x = a, *y = b;
	return x->samples < y->samples ? 1 : x->samples > y->samples ? -1 : strcmp(x->name, y->name);
}

static int cpu_load(const struct diagnosis_ctx *ctx, const struct diagnosis_scope *scope,
		    struct ptable *t, int32_t w)
{
	struct store_sample_filter f = { .job = scope->job, .from_ms = scope->from_ms,
					 .to_ms = scope->to_ms, .has_rank = true, .rank = w };
	struct byte_buf text = { 0 };
	struct leaf *leaves = NULL;
	size_t n = 0, cap = 0;
	int rc;

	if ((rc = ctx->folded(ctx->profiles_arg, &f, QUERY_DEFAULT_STACK_LIMIT, &text)))
		goto cleanup;
	const char *p = (const char *)text.data, *end = p + text.len;
	while (p && p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *line_end = nl ? nl : end;
		const char *sp = line_end;
		while (sp > p && sp[-1] != ' ')
			sp--;
		if (sp > p) {
			double count = 0; /* digits up to the line's end (no NUL to stop strtod) */
			for (const char *c = sp; c < line_end && *c >= '0' && *c <= '9'; c++)
				count = count * 10 + (*c - '0');
			char name[PATTERNS_CPU_NAME_MAX];
			size_t name_len = count > 0 ? patterns_cpu_function(p, (size_t)(sp - 1 - p),
									   name, sizeof(name))
						    : 0;
			if (name_len) {
				size_t i;
				for (i = 0; i < n; i++)
					if (!strcmp(leaves[i].name, name))
						break;
				if (i == n) {
					if (SYSOM_ARRAY_RESERVE(leaves, cap, n, 64) ||
					    !(leaves[n].name = strdup(name))) {
						rc = -ENOMEM;
						goto cleanup;
					}
					leaves[n++].samples = 0;
				}
				leaves[i].samples += count;
			}
			if (count > 0)
				t->cpu_total[w] += count;
		}
		p = nl ? nl + 1 : NULL;
	}
	if (n)
		qsort(leaves, n, sizeof(*leaves), leaf_cmp);
	for (size_t i = 0; i < n && i < PATTERNS_CPU_TOP; i++) {
		int fi = table_fn(t, PATTERNS_CPU, leaves[i].name);
		if (fi == -2) {
			rc = -ENOMEM;
			goto cleanup;
		}
		if (fi >= 0)
			t->fns[fi].sum[w] += leaves[i].samples;
	}
cleanup:
	for (size_t i = 0; i < n; i++)
		free(leaves[i].name);
	free(leaves);
	byte_buf_free(&text);
	return rc;
}

static int table_load(const struct diagnosis_ctx *ctx, const struct diagnosis_scope *scope,
		      const struct rank_map *ranks, bool calls, struct ptable *t)
{
	struct load l = { .t = t, .ranks = ranks };
	struct store_collective_filter cf = {
		.job = scope->job, .from_ns = scope->from_ms * 1000000,
		.to_ns = scope->to_ms * 1000000 + 999999, .latest = true,
	};
	struct store_gpu_filter gf = { .job = scope->job, .from_ms = scope->from_ms,
				       .to_ms = scope->to_ms };
	struct store_gpu_visitor v = { .kernel = kernel_take, .arg = &l };
	bool truncated;
	int rc;

	if (calls && (rc = store_collectives_list(ctx->store, &cf, PATTERNS_MAX_INSTANCES, call_take,
						  &l)))
		return rc;
	if ((rc = store_job_gpu(ctx->store, &gf, QUERY_MAX_GPU_ROWS, &v, &truncated)))
		return rc;
	if (ctx->folded)
		for (int32_t w = 0; w < t->nworkers && w < PATTERNS_MAX_CPU_WORKERS; w++)
			if ((rc = cpu_load(ctx, scope, t, w)))
				return rc;
	return 0;
}

/* Vectors of function fi: β, μ, CoV and β's sampling error per worker (scratch `vec` holds
 * 4 × nworkers). */
static void table_vectors(const struct ptable *t, size_t fi, double *vec,
			  struct patterns_vectors *out)
{
	const struct pfn *f = &t->fns[fi];
	int32_t n = t->nworkers;
	double *beta = vec, *mu = vec + n, *cov = vec + 2 * n, *se = vec + 3 * n;

	for (int32_t w = 0; w < n; w++) {
		if (f->kind == PATTERNS_CPU) {
			/* Too few samples and one sample is several percent: no pattern. */
			beta[w] = t->cpu_total[w] >= PATTERNS_CPU_MIN_SAMPLES ? f->sum[w] / t->cpu_total[w]
									      : NAN;
			/* A sampled share's binomial standard error (at least one sample's worth). */
			se[w] = isnan(beta[w]) ? NAN
					       : sqrt(fmax(beta[w] * (1 - beta[w]), 1.0 / t->cpu_total[w]) /
						      t->cpu_total[w]);
			mu[w] = cov[w] = NAN;
			continue;
		}
		double span = t->last[w] > t->first[w] ? t->last[w] - t->first[w] : t->range_ns;
		if (!f->count[w]) {
			beta[w] = 0;
			mu[w] = cov[w] = NAN;
			continue;
		}
		double m = f->sum[w] / f->count[w];
		double var = f->sumsq[w] / f->count[w] - m * m;
		beta[w] = span > 0 ? fmin(f->sum[w] / span, 1.0) : 0;
		mu[w] = m;
		cov[w] = m > 0 ? sqrt(fmax(var, 0)) / m : 0;
	}
	out->beta = beta;
	out->mu = mu;
	out->cov = f->kind == PATTERNS_CPU ? NULL : cov;
	out->beta_se = f->kind == PATTERNS_CPU ? se : NULL;
	out->n = (size_t)n;
}

/* ---- the document -------------------------------------------------------------------------- */

/* CPU samples of the ranks whose CPU shares are patterns (enough samples). */
static double cpu_samples(const struct ptable *t)
{
	double n = 0;

	for (int32_t w = 0; t->cpu_total && w < t->nworkers; w++)
		if (t->cpu_total[w] >= PATTERNS_CPU_MIN_SAMPLES)
			n += t->cpu_total[w];
	return n;
}

static json_t *num(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

/* In the document μ is in ms. */
static double shown(enum patterns_dim d, double v)
{
	return d == PATTERNS_MU ? v / 1e6 : v;
}

static const char *why(const struct pfn *f, const struct patterns_finding *x)
{
	bool more = x->value > x->median;

	switch (x->dim) {
	case PATTERNS_BETA:
		if (f->kind == PATTERNS_COLLECTIVE && !more)
			return "less time in the collective than its peers: they wait for it (it "
			       "enters late)";
		return more ? "more of its time goes into this function than on its peers"
			    : "less of its time goes into this function than on its peers";
	case PATTERNS_MU:
		return more ? "each call or execution takes longer than on its peers"
			    : "each call or execution is shorter than on its peers";
	default:
		return more ? "its durations vary more than on its peers"
			    : "its durations vary less than on its peers";
	}
}

struct hist_base {
	int64_t from_ms, to_ms;
	bool found;
};

static int baseline_range(void *arg, const struct store_baseline *b)
{
	struct hist_base *h = arg;
	h->from_ms = b->from_ms;
	h->to_ms = b->to_ms;
	h->found = true;
	return 0;
}

int patterns_job(const struct diagnosis_ctx *ctx, const struct diagnosis_scope *scope,
		 const struct patterns_params *p, int64_t hist_from_ms, int64_t hist_to_ms,
		 json_t **out)
{
	struct rank_map ranks = { .max_rank = -1 };
	struct ptable cur = { 0 }, hist = { 0 };
	struct patterns_top top = { 0 };
	struct patterns_summary *sums = NULL;
	struct hist_base hb = { hist_from_ms, hist_to_ms, hist_from_ms || hist_to_ms };
	double *vec = NULL, *scratch = NULL;
	json_t *doc = NULL, *fns, *findings, *changes;
	int32_t n;
	int rc;

	*out = NULL;
	if ((rc = store_job_ranks_list(ctx->store, scope->job, PATTERNS_MAX_WORKERS * 4, rank_take,
				       &ranks)))
		goto cleanup;
	if (ranks.max_rank < 0) {
		rc = -ENOENT;
		goto cleanup;
	}
	n = ranks.max_rank + 1;
	qsort(ranks.k, ranks.n, sizeof(*ranks.k), key_cmp);
	if ((rc = table_init(&cur, n, (double)(scope->to_ms - scope->from_ms) * 1e6)) ||
	    (rc = table_load(ctx, scope, &ranks, p->calls, &cur)))
		goto cleanup;
	if (!hb.found && store_baseline_get(ctx->store, scope->job, baseline_range, &hb) == 0)
		hb.found = hb.found && hb.to_ms > hb.from_ms;
	if (hb.found) {
		struct diagnosis_scope hs = *scope;
		hs.from_ms = hb.from_ms;
		hs.to_ms = hb.to_ms;
		if ((rc = table_init(&hist, n, (double)(hs.to_ms - hs.from_ms) * 1e6)) ||
		    (rc = table_load(ctx, &hs, &ranks, p->calls, &hist)))
			goto cleanup;
	}
	vec = malloc((size_t)n * 4 * sizeof(*vec));
	scratch = malloc((size_t)n * 2 * sizeof(*scratch));
	sums = calloc(cur.nfns ? cur.nfns : 1, sizeof(*sums));
	if (!vec || !scratch || !sums || (rc = patterns_top_init(&top, p->limit))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	fns = json_array();
	findings = json_array();
	changes = json_array();
	doc = json_pack("{s:s,s:o,s:o,s:i,s:I,s:I,s:I,s:{s:f,s:f,s:f,s:f,s:I},s:o,s:o}", "job",
			scope->job, "from", render_json_time(scope->from_ms * 1000000), "to",
			render_json_time(scope->to_ms * 1000000), "workers", n, "calls",
			(json_int_t)cur.calls, "kernel_executions", (json_int_t)cur.kernels,
			"functions_dropped", (json_int_t)cur.dropped, "params", "k", p->k,
			"min_beta", p->min_beta, "rel_floor", p->rel_floor, "history_change",
			p->history_change, "limit", (json_int_t)p->limit, "functions",
			fns ? fns : json_null(), "findings", findings ? findings : json_null());
	if (!doc || !fns || !findings || !changes) {
		json_decref(changes);
		rc = -ENOMEM;
		goto cleanup;
	}
	for (size_t i = 0; i < cur.nfns; i++) {
		struct patterns_vectors v;
		table_vectors(&cur, i, vec, &v);
		size_t bad = patterns_localise(&v, (uint32_t)i, p, scratch, &top, &sums[i]);
		if (json_array_append_new(fns, json_pack("{s:s,s:s,s:I,s:o,s:o,s:o,s:I}", "name",
							 cur.fns[i].name, "kind",
							 patterns_kind_name(cur.fns[i].kind),
							 "workers", (json_int_t)sums[i].workers,
							 "beta", num(sums[i].beta), "mu_ms",
							 num(sums[i].mu / 1e6), "cov",
							 num(sums[i].cov), "abnormal",
							 (json_int_t)bad))) {
			rc = -ENOMEM;
			goto cleanup;
		}
	}
	patterns_top_sort(&top);
	for (size_t i = 0; i < top.n; i++) {
		const struct patterns_finding *x = &top.f[i];
		const struct pfn *f = &cur.fns[x->function];
		if (json_array_append_new(findings,
					  json_pack("{s:i,s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:f,s:f,s:f,s:s}",
						    "rank", x->worker, "host",
						    host_of(&ranks, x->worker), "function", f->name, "kind",
						    patterns_kind_name(f->kind), "dimension",
						    patterns_dim_name(x->dim),
						    "value", num(shown(x->dim, x->value)), "median",
						    num(shown(x->dim, x->median)), "scale",
						    num(shown(x->dim, x->scale)), "z", x->z, "beta",
						    x->beta, "cost", x->cost, "why", why(f, x)))) {
			rc = -ENOMEM;
			goto cleanup;
		}
	}
	/* The job against its own history: what every rank does differently. */
	for (size_t i = 0; hb.found && i < cur.nfns; i++) {
		int hi = -1;
		for (size_t j = 0; j < hist.nfns && hi < 0; j++)
			if (hist.fns[j].kind == cur.fns[i].kind && !strcmp(hist.fns[j].name, cur.fns[i].name))
				hi = (int)j;
		struct patterns_summary hs = { 0 };
		if (hi >= 0) {
			struct patterns_vectors v;
			struct patterns_top none = { 0 };
			table_vectors(&hist, (size_t)hi, vec, &v);
			if ((rc = patterns_top_init(&none, 1)))
				goto cleanup;
			patterns_localise(&v, 0, p, scratch, &none, &hs);
			patterns_top_free(&none);
		}
		const struct patterns_summary *cs = &sums[i];
		const double now[2] = { cs->beta, cs->mu }, then[2] = { hi >= 0 ? hs.beta : 0, hs.mu };
		for (int d = 0; d < 2; d++) {
			if (!isfinite(now[d]) || (d == PATTERNS_MU && (hi < 0 || !isfinite(then[d]))))
				continue;
			/* New, or changed by more than history_change, and it matters now or then. */
			double change = then[d] > 0 ? (now[d] - then[d]) / then[d] : INFINITY;
			if (fmax(cs->beta, hi >= 0 ? hs.beta : 0) < p->min_beta ||
			    fabs(change) <= p->history_change ||
			    (d == PATTERNS_BETA && fabs(now[d] - then[d]) < abs_floor[0]))
				continue;
			if (json_array_append_new(changes,
						  json_pack("{s:s,s:s,s:s,s:o,s:o,s:o,s:b,s:f}", "function",
							    cur.fns[i].name, "kind",
							    patterns_kind_name(cur.fns[i].kind),
							    "dimension", patterns_dim_name(d), "now",
							    num(shown(d, now[d])), "then",
							    num(shown(d, then[d])), "change", num(change),
							    "new", hi < 0 || !(then[d] > 0), "cost",
							    fabs(cs->beta - (hi >= 0 ? hs.beta : 0))))) {
				rc = -ENOMEM;
				goto cleanup;
			}
		}
	}
	if (json_object_set_new(doc, "cpu_samples", json_real(cpu_samples(&cur))) ||
	    json_object_set_new(doc, "history",
				hb.found ? json_pack("{s:o,s:o,s:f,s:o}", "from",
						     render_json_time(hb.from_ms * 1000000), "to",
						     render_json_time(hb.to_ms * 1000000),
						     "cpu_samples", cpu_samples(&hist), "changes",
						     changes)
					 : json_pack("{s:n,s:n,s:i,s:o}", "from", "to", "cpu_samples", 0,
						     "changes", changes))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	*out = doc;
	doc = NULL;
cleanup:
	json_decref(doc);
	patterns_top_free(&top);
	free(sums);
	free(scratch);
	free(vec);
	table_free(&hist);
	table_free(&cur);
	rank_map_free(&ranks);
	return rc;
}
