/* SPDX-License-Identifier: Apache-2.0 */
/* Views of a job's communication and GPUs: /api/v1/jobs/{job}/collectives and /jobs/{job}/gpu. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/api/api_internal.h"
#include "server/http/render.h"
#include "server/query/limits.h"
#include "server/query/params.h"

/* What GET /api/v1/jobs/{job}/collectives collects. */
struct coll_doc {
	json_t *instances;
	json_t *cur;       /* instance being filled (borrowed from instances) */
	uint64_t key, seq;
	uint8_t op;
	int32_t nranks, last_rank;
	uint32_t ranks_seen;
	int64_t first_entry, last_entry, last_exit;
	uint32_t limit;
	size_t ninstances, calls;
	bool truncated;
};

/* Writes the derived fields of the instance being filled. */
static int coll_finish(struct coll_doc *d)
{
	if (!d->cur)
		return 0;
	if (json_object_set_new(d->cur, "ranks_seen", json_integer(d->ranks_seen)) ||
	    json_object_set_new(d->cur, "complete",
				json_boolean(d->nranks > 0 && d->ranks_seen == (uint32_t)d->nranks)) ||
	    json_object_set_new(d->cur, "last_entry_ns", json_integer(d->last_entry)) ||
	    json_object_set_new(d->cur, "last_exit_ns", json_integer(d->last_exit)) ||
	    json_object_set_new(d->cur, "skew_ns", json_integer(d->last_entry - d->first_entry)))
		return -ENOMEM;
	d->cur = NULL;
	return 0;
}

static int coll_call(void *arg, const struct store_collective_call *c)
{
	struct coll_doc *d = arg;
	const char *op = sysom_nccl_op_name(c->op);
	json_t *call;
	int rc;

	if (d->truncated)
		return 0;
	if (!d->cur || c->comm_key != d->key || c->op != d->op || c->seq != d->seq) {
		if ((rc = coll_finish(d)))
			return rc;
		if (d->ninstances == d->limit) {
			d->truncated = true; /* the store was asked for one instance more */
			return 0;
		}
		d->cur = json_pack("{s:o,s:s,s:I,s:I,s:I,s:o,s:o,s:I,s:[]}", "comm",
				   render_json_key(c->comm_key), "op", op ? op : "unknown", "seq",
				   (json_int_t)(c->seq > INT64_MAX ? INT64_MAX : c->seq), "bytes",
				   (json_int_t)c->bytes, "count", (json_int_t)c->count, "nranks",
				   api__json_int_or_null(c->nranks), "first_entry",
				   render_json_time(c->first_entry_ns), "first_entry_ns",
				   (json_int_t)c->first_entry_ns, "calls");
		if (!d->cur || json_array_append_new(d->instances, d->cur))
			return -ENOMEM;
		d->ninstances++;
		d->key = c->comm_key;
		d->op = c->op;
		d->seq = c->seq;
		d->nranks = c->nranks;
		d->last_rank = -1;
		d->ranks_seen = 0;
		d->first_entry = d->last_entry = c->entry_ns;
		d->last_exit = c->exit_ns;
	}
	if (++d->calls > API_MAX_COLLECTIVE_CALLS) {
		d->truncated = true;
		return 0;
	}
	/* Rows come by rank: count each valid rank once. */
	if (c->rank >= 0 && c->rank != d->last_rank && (d->nranks < 0 || c->rank < d->nranks)) {
		d->ranks_seen++;
		d->last_rank = c->rank;
	}
	if (c->entry_ns < d->first_entry)
		d->first_entry = c->entry_ns;
	if (c->entry_ns > d->last_entry)
		d->last_entry = c->entry_ns;
	if (c->exit_ns > d->last_exit)
		d->last_exit = c->exit_ns;
	call = json_pack("{s:o,s:s,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "rank",
			 api__json_int_or_null(c->rank), "node_id", c->node_id, "hostname",
			 render_json_string(c->hostname), "pid", (json_int_t)c->pid, "tid",
			 (json_int_t)c->tid, "entry_ns", (json_int_t)c->entry_ns, "exit_ns",
			 (json_int_t)c->exit_ns, "entry_delay_ns",
			 (json_int_t)(c->entry_ns - c->first_entry_ns), "duration_ns",
			 (json_int_t)(c->exit_ns - c->entry_ns), "result", (json_int_t)c->result);
	if (call && c->peer >= 0)
		json_object_set_new(call, "peer", json_integer(c->peer));
	return call && !json_array_append_new(json_object_get(d->cur, "calls"), call) ? 0 : -ENOMEM;
}

/* An NCCL collective or point-to-point op by name ("AllReduce", any case); 0 when unknown. */
static uint8_t collective_op_parse(const char *name)
{
	for (uint8_t op = SYSOM_NCCL_ALL_REDUCE; op <= SYSOM_NCCL_RECV; op++)
		if (strcasecmp(sysom_nccl_op_name(op), name) == 0)
			return op;
	return 0;
}

void api__job_collectives(struct api *api, const char *job, const struct http_request *req,
			    struct http_response *resp)
{
	struct store_collective_filter f = { .job = job };
	struct coll_doc d = { .limit = API_DEFAULT_COLLECTIVE_LIMIT };
	char op[QUERY_PARAM_MAX];
	bool has_op, has_limit;
	struct query_filter q;
	json_t *doc;
	int rc;

	if (!query_filter_parse(req, api->now_ms(), &q, resp) ||
	    !query_param_comm_key(req, &f.has_comm, &f.comm, resp) ||
	    !query_param(req, "op", op, sizeof(op), &has_op, resp) ||
	    !query_param_uint(req, "limit", 1, API_MAX_COLLECTIVE_LIMIT, &d.limit, &has_limit, resp))
		return;
	if (q.f.node || q.f.has_pid || q.f.job) {
		http_response_error(resp, 400, "parameters 'node', 'pid' and 'job' do not apply here");
		return;
	}
	if (has_op && !(f.op = collective_op_parse(op))) {
		http_response_error(resp, 400,
				    "parameter 'op' must be an NCCL collective or point-to-point"
				    " operation (AllReduce, ReduceScatter, AllGather, Broadcast,"
				    " Reduce, AlltoAll, Gather, Scatter, Send, Recv)");
		return;
	}
	f.from_ns = q.f.from_ms > INT64_MAX / 1000000 ? INT64_MAX : q.f.from_ms * 1000000;
	f.to_ns = q.f.to_ms > INT64_MAX / 1000000 - 1 ? INT64_MAX : q.f.to_ms * 1000000 + 999999;
	if (!(d.instances = json_array())) {
		api__store_error(resp, -ENOMEM);
		return;
	}
	rc = store_collectives_list(api->store, &f, d.limit + 1, coll_call, &d);
	if (!rc)
		rc = coll_finish(&d);
	if (rc) {
		json_decref(d.instances);
		api__store_error(resp, rc);
		return;
	}
	doc = json_pack("{s:o,s:o,s:o,s:b,s:o}", "job", render_json_string(job), "from",
			render_json_time(q.f.from_ms * 1000000), "to",
			render_json_time(q.f.to_ms * 1000000), "truncated", d.truncated, "instances",
			d.instances);
	render_json_respond(resp, 200, doc);
}

/* ---- GET /api/v1/jobs/{job}/gpu ------------------------------------------------------------ */

/* Stored rows repeat per batch; rows with equal keys arrive consecutively and are merged here
 * into one accumulator per kind before they become JSON. */
struct gpu_doc {
	json_t *procs;  /* array of process entries */
	json_t *index;  /* "rank/pid/start" → entry (borrowed) */
	bool has_k, has_p, has_l;
	struct store_gpu_kernel_row k;
	struct store_nccl_profile_row p;
	struct store_nccl_link_row l;
	char *k_name, *k_host, *p_host, *l_host;
	char *p_strings[5]; /* comm_name, func, algo, proto, datatype */
};

static bool owner_eq(const struct store_gpu_owner *a, const struct store_gpu_owner *b)
{
	return a->job_rank == b->job_rank && a->pid == b->pid &&
	       a->start_time_ns == b->start_time_ns;
}

static uint64_t add_u64(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static json_t *json_u64(uint64_t v)
{
	return json_integer((json_int_t)(v > INT64_MAX ? INT64_MAX : v));
}

/* The JSON entry of a process (created with empty lists on first use). */
static json_t *gpu_proc(struct gpu_doc *d, const struct store_gpu_owner *who, const char *host)
{
	char key[64];
	json_t *e;

	snprintf(key, sizeof(key), "%d/%u/%" PRIu64, who->job_rank, who->pid, who->start_time_ns);
	if ((e = json_object_get(d->index, key)))
		return e;
	/* The process's start is since its node's boot (its identity across pid reuse), not a
	 * wall-clock time: rendered as a date it read 1970-01-01 (seen on a real GPU node). */
	e = json_pack("{s:o,s:s,s:I,s:f,s:I,s:I,s:[],s:[],s:[]}", "rank",
		      api__json_int_or_null(who->job_rank), "hostname", host ? host : "", "pid",
		      (json_int_t)who->pid, "start_time_since_boot",
		      (double)(who->start_time_ns / 1000000) / 1000.0,
		      "gpu_kernel_ns", (json_int_t)0, "kernel_executions", (json_int_t)0, "kernels",
		      "collectives", "links");
	if (!e || json_array_append_new(d->procs, e) || json_object_set(d->index, key, e))
		return NULL;
	return e;
}

static int replace_str(char **slot, const char *s)
{
	free(*slot);
	*slot = strdup(s ? s : "");
	return *slot ? 0 : -ENOMEM;
}

static int gpu_kernel_flush(struct gpu_doc *d)
{
	const struct store_gpu_kernel_row *k = &d->k;
	json_t *proc, *hist, *e;

	if (!d->has_k)
		return 0;
	d->has_k = false;
	if (!(proc = gpu_proc(d, &k->who, d->k_host)) || !(hist = json_array()))
		return -ENOMEM;
	for (int i = 0; i < SYSOM_GPU_HIST_BUCKETS; i++)
		if (json_array_append_new(hist, json_integer(k->hist[i]))) {
			json_decref(hist);
			return -ENOMEM;
		}
	e = json_pack("{s:s,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "name", d->k_name, "device",
		      (json_int_t)k->device, "stream", json_u64(k->stream),
		      "count", json_u64(k->count), "total_ns", json_u64(k->total_ns), "mean_ns",
		      json_u64(k->count ? k->total_ns / k->count : 0), "min_ns", json_u64(k->min_ns),
		      "max_ns", json_u64(k->max_ns), "histogram", hist);
	if (!e || json_array_append_new(json_object_get(proc, "kernels"), e))
		return -ENOMEM;
	json_object_set_new(proc, "gpu_kernel_ns",
			    json_u64(add_u64((uint64_t)json_integer_value(
						     json_object_get(proc, "gpu_kernel_ns")),
					     k->total_ns)));
	json_object_set_new(proc, "kernel_executions",
			    json_u64(add_u64((uint64_t)json_integer_value(
						     json_object_get(proc, "kernel_executions")),
					     k->count)));
	return 0;
}

static int gpu_kernel_visit(void *arg, const struct store_gpu_kernel_row *r)
{
	struct gpu_doc *d = arg;
	struct store_gpu_kernel_row *k = &d->k;
	int rc;

	if (d->has_k && owner_eq(&k->who, &r->who) && strcmp(d->k_name, r->name) == 0 &&
	    k->device == r->device && k->stream == r->stream) {
		k->count = add_u64(k->count, r->count);
		k->total_ns = add_u64(k->total_ns, r->total_ns);
		k->min_ns = r->min_ns < k->min_ns ? r->min_ns : k->min_ns;
		k->max_ns = r->max_ns > k->max_ns ? r->max_ns : k->max_ns;
		for (int i = 0; i < SYSOM_GPU_HIST_BUCKETS; i++)
			k->hist[i] = k->hist[i] > UINT32_MAX - r->hist[i] ? UINT32_MAX
									  : k->hist[i] + r->hist[i];
		return 0;
	}
	if ((rc = gpu_kernel_flush(d)))
		return rc;
	*k = *r;
	d->has_k = true;
	if ((rc = replace_str(&d->k_name, r->name)) || (rc = replace_str(&d->k_host, r->who.hostname)))
		return rc;
	return 0;
}

static int gpu_profile_flush(struct gpu_doc *d)
{
	const struct store_nccl_profile_row *p = &d->p;
	json_t *proc, *e, *gpu = json_null(), *span = json_null();

	if (!d->has_p)
		return 0;
	d->has_p = false;
	if (!(proc = gpu_proc(d, &p->who, d->p_host)))
		return -ENOMEM;
	if (p->kernel_timed) {
		uint64_t mean = p->kernel_ns_total / p->kernel_timed;
		/* Algorithm bandwidth: bytes per GPU ns = GB/s. */
		double algbw = p->kernel_ns_total ? (double)p->bytes * ((double)p->kernel_timed /
								       (double)p->count) /
							    (double)p->kernel_ns_total
						  : 0;
		gpu = json_pack("{s:o,s:o,s:o,s:o,s:o,s:f}", "timed", json_u64(p->kernel_timed),
				"total_ns", json_u64(p->kernel_ns_total), "mean_ns", json_u64(mean),
				"min_ns", json_u64(p->kernel_ns_min), "max_ns",
				json_u64(p->kernel_ns_max), "algbw_gbps", algbw);
	}
	if (p->span_timed)
		span = json_pack("{s:o,s:o}", "timed", json_u64(p->span_timed), "mean_ns",
				 json_u64(p->span_ns_total / p->span_timed));
	e = json_pack("{s:o,s:s,s:i,s:i,s:s,s:s,s:s,s:s,s:o,s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:[o,o]}",
		      "comm_id", render_json_key(p->comm_id), "comm_name", d->p_strings[0], "comm_rank",
		      p->rank, "nranks", p->nranks, "func", d->p_strings[1], "algo", d->p_strings[2],
		      "proto", d->p_strings[3], "datatype", d->p_strings[4], "peer",
		      api__json_int_or_null(p->peer), "nchannels", (json_int_t)p->nchannels, "count",
		      json_u64(p->count), "bytes", json_u64(p->bytes), "gpu", gpu, "span", span,
		      "enqueue_mean_ns", json_u64(p->enqueue_ns_total / p->count), "transfers",
		      json_u64(p->transfers), "transfer_bytes", json_u64(p->transfer_bytes), "seq",
		      json_u64(p->first_seq), json_u64(p->last_seq));
	if (!e || json_array_append_new(json_object_get(proc, "collectives"), e))
		return -ENOMEM;
	return 0;
}

static int gpu_profile_visit(void *arg, const struct store_nccl_profile_row *r)
{
	struct gpu_doc *d = arg;
	struct store_nccl_profile_row *p = &d->p;
	const char *strings[5] = { r->comm_name, r->func, r->algo, r->proto, r->datatype };
	bool same = d->has_p && owner_eq(&p->who, &r->who) && p->comm_id == r->comm_id &&
		    p->peer == r->peer;
	int rc;

	for (int i = 1; same && i < 5; i++)
		same = strcmp(d->p_strings[i], strings[i]) == 0;
	if (same) {
		if (r->kernel_timed) {
			p->kernel_ns_min = !p->kernel_timed || r->kernel_ns_min < p->kernel_ns_min
						   ? r->kernel_ns_min : p->kernel_ns_min;
			p->kernel_ns_max = r->kernel_ns_max > p->kernel_ns_max ? r->kernel_ns_max
									      : p->kernel_ns_max;
		}
		p->first_seq = r->first_seq < p->first_seq ? r->first_seq : p->first_seq;
		p->last_seq = r->last_seq > p->last_seq ? r->last_seq : p->last_seq;
		p->nchannels = r->nchannels > p->nchannels ? r->nchannels : p->nchannels;
		p->count = add_u64(p->count, r->count);
		p->bytes = add_u64(p->bytes, r->bytes);
		p->kernel_timed = add_u64(p->kernel_timed, r->kernel_timed);
		p->kernel_ns_total = add_u64(p->kernel_ns_total, r->kernel_ns_total);
		p->span_timed = add_u64(p->span_timed, r->span_timed);
		p->span_ns_total = add_u64(p->span_ns_total, r->span_ns_total);
		p->enqueue_ns_total = add_u64(p->enqueue_ns_total, r->enqueue_ns_total);
		p->transfers = add_u64(p->transfers, r->transfers);
		p->transfer_bytes = add_u64(p->transfer_bytes, r->transfer_bytes);
		return 0;
	}
	if ((rc = gpu_profile_flush(d)))
		return rc;
	*p = *r;
	d->has_p = true;
	for (int i = 0; i < 5; i++)
		if ((rc = replace_str(&d->p_strings[i], strings[i])))
			return rc;
	return replace_str(&d->p_host, r->who.hostname);
}

/* Least-squares fit time = latency + bytes / bandwidth from the sufficient statistics; null
 * when the sizes do not vary (no slope) or the slope is not positive. */
static json_t *link_fit(double n, double sx, double sy, double sxx, double sxy, double syy)
{
	double den = n * sxx - sx * sx, num = n * sxy - sx * sy, slope, intercept, r2;
	double tot = n * syy - sy * sy;

	if (n < 2 || !(den > 1e-9 * n * sxx) || !(num > 0))
		return json_null();
	slope = num / den;
	intercept = (sy - slope * sx) / n;
	r2 = tot > 0 ? num * num / (den * tot) : 1.0;
	return json_pack("{s:f,s:f,s:f}", "latency_ns", intercept, "bandwidth_gbps", 1.0 / slope,
			 "r2", r2 > 1 ? 1.0 : r2);
}

static int gpu_link_flush(struct gpu_doc *d)
{
	const struct store_nccl_link_row *l = &d->l;
	json_t *proc, *e, *min_fit = json_null();

	if (!d->has_l)
		return 0;
	d->has_l = false;
	if (!(proc = gpu_proc(d, &l->who, d->l_host)))
		return -ENOMEM;
	if (l->min_points >= 2 && isfinite(l->min_latency_ns) && isfinite(l->min_bytes_per_ns))
		min_fit = json_pack("{s:f,s:f,s:f,s:I}", "latency_ns", l->min_latency_ns,
				    "bandwidth_gbps", l->min_bytes_per_ns, "r2",
				    isfinite(l->min_r2) ? l->min_r2 : 0.0, "points",
				    (json_int_t)l->min_points);
	e = json_pack("{s:o,s:i,s:i,s:o,s:o,s:o,s:o,s:o,s:o}", "comm_id", render_json_key(l->comm_id),
		      "comm_rank", l->rank, "peer", l->peer, "channel", api__json_int_or_null(l->channel),
		      "transfers", json_u64(l->transfers), "bytes", json_u64(l->bytes),
		      "time_ns_total", json_u64(l->time_ns_total), "fit",
		      link_fit((double)l->transfers, l->sx, l->sy, l->sxx, l->sxy, l->syy),
		      "min_fit", min_fit);
	if (!e || json_array_append_new(json_object_get(proc, "links"), e))
		return -ENOMEM;
	return 0;
}

static int gpu_link_visit(void *arg, const struct store_nccl_link_row *r)
{
	struct gpu_doc *d = arg;
	struct store_nccl_link_row *l = &d->l;
	int rc;

	if (d->has_l && owner_eq(&l->who, &r->who) && l->comm_id == r->comm_id &&
	    l->peer == r->peer && l->channel == r->channel) {
		l->transfers = add_u64(l->transfers, r->transfers);
		l->bytes = add_u64(l->bytes, r->bytes);
		l->time_ns_total = add_u64(l->time_ns_total, r->time_ns_total);
		l->sx += r->sx;
		l->sy += r->sy;
		l->sxx += r->sxx;
		l->sxy += r->sxy;
		l->syy += r->syy;
		if (r->min_points > l->min_points) {
			l->min_latency_ns = r->min_latency_ns;
			l->min_bytes_per_ns = r->min_bytes_per_ns;
			l->min_r2 = r->min_r2;
			l->min_points = r->min_points;
		}
		return 0;
	}
	if ((rc = gpu_link_flush(d)))
		return rc;
	*l = *r;
	d->has_l = true;
	return replace_str(&d->l_host, r->who.hostname);
}

static int by_total_desc(const void *a, const void *b)
{
	json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "total_ns"));
	json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "total_ns"));

	return x < y ? 1 : x > y ? -1 : 0;
}

/* Orders each process's kernels by GPU time, largest first. */
static int gpu_sort_kernels(json_t *procs)
{
	size_t i;
	json_t *proc;

	json_array_foreach(procs, i, proc) {
		json_t *kernels = json_object_get(proc, "kernels");
		size_t n = json_array_size(kernels);
		json_t **items;

		if (n < 2)
			continue; /* nothing to order (and qsort must not see a NULL array) */
		if (!(items = malloc(n * sizeof(*items))))
			return -ENOMEM;
		for (size_t j = 0; j < n; j++)
			items[j] = json_incref(json_array_get(kernels, j));
		qsort(items, n, sizeof(*items), by_total_desc);
		json_array_clear(kernels);
		for (size_t j = 0; j < n; j++)
			json_array_append_new(kernels, items[j]);
		free(items);
	}
	return 0;
}

static int u64_compare(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Job-level view: the median process GPU time and each process's ratio to it (a uniform GPU
 * slowdown of one rank shows as a ratio well above 1). */
static json_t *gpu_summary(json_t *procs)
{
	size_t n = json_array_size(procs), timed = 0;
	uint64_t *totals = calloc(n ? n : 1, sizeof(*totals));
	json_t *proc, *summary;
	double median = 0;
	size_t i;

	if (!totals)
		return NULL;
	json_array_foreach(procs, i, proc) {
		uint64_t t = (uint64_t)json_integer_value(json_object_get(proc, "gpu_kernel_ns"));
		if (t)
			totals[timed++] = t;
	}
	qsort(totals, timed, sizeof(*totals), u64_compare);
	if (timed)
		median = timed % 2 ? (double)totals[timed / 2]
				   : ((double)totals[timed / 2 - 1] + (double)totals[timed / 2]) / 2;
	free(totals);
	json_array_foreach(procs, i, proc) {
		uint64_t t = (uint64_t)json_integer_value(json_object_get(proc, "gpu_kernel_ns"));
		json_object_set_new(proc, "gpu_time_ratio_to_median",
				    t && median > 0 ? json_real((double)t / median) : json_null());
	}
	summary = json_pack("{s:I,s:I,s:f}", "processes", (json_int_t)n, "processes_with_gpu_time",
			    (json_int_t)timed, "median_gpu_kernel_ns", median);
	return summary;
}

static void gpu_doc_free(struct gpu_doc *d)
{
	json_decref(d->procs);
	json_decref(d->index);
	free(d->k_name);
	free(d->k_host);
	free(d->p_host);
	free(d->l_host);
	for (int i = 0; i < 5; i++)
		free(d->p_strings[i]);
}

void api__job_gpu(struct api *api, const char *job, const struct http_request *req,
		    struct http_response *resp)
{
	struct store_gpu_filter f = { .job = job };
	struct gpu_doc d = { 0 };
	struct store_gpu_visitor v = { gpu_kernel_visit, gpu_profile_visit, gpu_link_visit, &d };
	uint32_t rank;
	bool has_rank, truncated = false;
	struct query_filter q;
	json_t *summary, *doc;
	int rc;

	if (!query_filter_parse(req, api->now_ms(), &q, resp) ||
	    !query_param_uint(req, "rank", 0, INT32_MAX, &rank, &has_rank, resp))
		return;
	if (q.f.node || q.f.has_pid || q.f.job || q.f.comm) {
		http_response_error(resp, 400,
				    "parameters 'node', 'pid', 'comm' and 'job' do not apply here");
		return;
	}
	f.has_rank = has_rank;
	f.rank = (int32_t)rank;
	f.from_ms = q.f.from_ms;
	f.to_ms = q.f.to_ms;
	if (!(d.procs = json_array()) || !(d.index = json_object())) {
		rc = -ENOMEM;
		goto cleanup;
	}
	if ((rc = store_job_gpu(api->store, &f, QUERY_MAX_GPU_ROWS, &v, &truncated)) ||
	    (rc = gpu_kernel_flush(&d)) || (rc = gpu_profile_flush(&d)) ||
	    (rc = gpu_link_flush(&d)) || (rc = gpu_sort_kernels(d.procs)))
		goto cleanup;
	if (!(summary = gpu_summary(d.procs))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	doc = json_pack("{s:o,s:o,s:o,s:b,s:o,s:O}", "job", render_json_string(job), "from",
			render_json_time(q.f.from_ms * 1000000), "to",
			render_json_time(q.f.to_ms * 1000000), "truncated", truncated, "summary",
			summary, "processes", d.procs);
	render_json_respond(resp, 200, doc);
cleanup:
	if (rc)
		api__store_error(resp, rc);
	gpu_doc_free(&d);
}
