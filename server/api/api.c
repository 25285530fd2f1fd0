/* SPDX-License-Identifier: Apache-2.0 */
/* Query API: time ranges, filters, flame graph aggregation and rendering, health, metrics. */
#include "server/api/api.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/options.h"
#include "server/analysis/folded.h"
#include "server/analysis/diagnosis.h"
#include "server/analysis/monitor.h"
#include "server/api/render.h"

#define PARAM_MAX 256

struct api {
	struct store *store;
	struct symbolizer *sym;
	struct auth *auth;
	struct server_metrics *metrics;
	struct symbols *symbols;
	struct upstream *upstream;
	int64_t (*now_ms)(void);
	_Atomic(struct http_server *) http;
	struct alerts *alerts;
	struct monitor *monitor;
};

struct api *api_new(struct store *store, struct symbolizer *sym, struct auth *auth,
		    struct server_metrics *metrics, const struct api_options *opts)
{
	struct api *api = calloc(1, sizeof(*api));

	if (!api)
		return NULL;
	api->store = store;
	api->sym = sym;
	api->auth = auth;
	api->metrics = metrics;
	api->now_ms = opts && opts->now_ms ? opts->now_ms : sysom_realtime_ms;
	api->symbols = opts ? opts->symbols : NULL;
	api->upstream = opts ? opts->upstream : NULL;
	api->alerts = opts ? opts->alerts : NULL;
	api->monitor = opts ? opts->monitor : NULL;
	atomic_init(&api->http, NULL);
	return api;
}

void api_free(struct api *api)
{
	free(api);
}

void api_http_server_set(struct api *api, struct http_server *srv)
{
	atomic_store(&api->http, srv);
}

/* ---- time parsing ------------------------------------------------------------------------- */

/* Reads exactly `n` digits. */
static bool digits(const char **p, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)(*p)[i]))
			return false;
		v = v * 10 + ((*p)[i] - '0');
	}
	*p += n;
	*out = v;
	return true;
}

/* Reads a fraction ".ddd" (any number of digits) as milliseconds, truncating. */
static bool fraction_ms(const char **p, int64_t *ms)
{
	int64_t v = 0;
	int n = 0;

	*ms = 0;
	if (**p != '.')
		return true;
	(*p)++;
	while (isdigit((unsigned char)**p)) {
		if (n < 3)
			v = v * 10 + (**p - '0');
		n++;
		(*p)++;
	}
	if (n == 0)
		return false;
	for (int i = n; i < 3; i++)
		v *= 10;
	*ms = v;
	return true;
}

static int days_in_month(int year, int month)
{
	static const int days[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;

	return month == 2 && leap ? 29 : days[month - 1];
}

static int parse_rfc3339(const char *p, int64_t *out_ms)
{
	struct tm tm = { 0 };
	int year, mon, day, hour, min, sec, oh = 0, om = 0, sign = 0;
	int64_t ms;

	if (!digits(&p, 4, &year) || *p++ != '-' || !digits(&p, 2, &mon) || *p++ != '-' ||
	    !digits(&p, 2, &day) || (*p != 'T' && *p != 't' && *p != ' '))
		return -EINVAL;
	p++;
	if (!digits(&p, 2, &hour) || *p++ != ':' || !digits(&p, 2, &min) || *p++ != ':' ||
	    !digits(&p, 2, &sec) || !fraction_ms(&p, &ms))
		return -EINVAL;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		sign = *p++ == '+' ? 1 : -1;
		if (!digits(&p, 2, &oh) || *p++ != ':' || !digits(&p, 2, &om) || oh > 23 || om > 59)
			return -EINVAL;
	} else {
		return -EINVAL;
	}
	if (*p || year < 1970 || mon < 1 || mon > 12 || day < 1 || day > days_in_month(year, mon) ||
	    hour > 23 || min > 59 || sec > 60)
		return -EINVAL;
	tm.tm_year = year - 1900;
	tm.tm_mon = mon - 1;
	tm.tm_mday = day;
	tm.tm_hour = hour;
	tm.tm_min = min;
	tm.tm_sec = sec;
	int64_t t = (int64_t)timegm(&tm) - (int64_t)sign * (oh * 3600 + om * 60);
	*out_ms = t * 1000 + ms;
	return 0;
}

int api_time_parse(const char *text, int64_t now_ms, int64_t *out_ms)
{
	const char *p = text;

	if (!text || !*text)
		return -EINVAL;
	if (strcmp(text, "now") == 0) {
		*out_ms = now_ms;
		return 0;
	}
	if (text[0] == '-') {
		double seconds;
		/* Relative to now; a bare number counts seconds like the other durations. */
		if (!isdigit((unsigned char)text[1]) || sysom_parse_duration(text + 1, &seconds) ||
		    seconds > 100.0 * 365 * 86400)
			return -EINVAL;
		*out_ms = now_ms - (int64_t)(seconds * 1000);
		return 0;
	}
	if (strlen(text) >= 10 && text[4] == '-')
		return parse_rfc3339(text, out_ms);
	/* Unix seconds, optionally fractional. */
	int64_t sec = 0, ms;
	int n = 0;
	while (isdigit((unsigned char)*p)) {
		if (++n > 12)
			return -EINVAL;
		sec = sec * 10 + (*p++ - '0');
	}
	if (n == 0 || !fraction_ms(&p, &ms) || *p)
		return -EINVAL;
	*out_ms = sec * 1000 + ms;
	return 0;
}

/* ---- request parameters ------------------------------------------------------------------- */

/* Reads an optional parameter into `out`; false (and a 400 answered) when malformed. */
static bool param(const struct http_request *req, const char *name, char *out, size_t outlen,
		  bool *present, struct http_response *resp)
{
	int rc = http_query_param(req, name, out, outlen);

	*present = rc >= 0;
	if (rc >= 0 || rc == -ENOENT)
		return true;
	http_response_error(resp, 400, "parameter '%s' is %s", name,
			    rc == -E2BIG ? "too long" : "not correctly percent-encoded");
	return false;
}

static bool param_uint(const struct http_request *req, const char *name, uint32_t min,
		       uint32_t max, uint32_t *out, bool *present, struct http_response *resp)
{
	char text[PARAM_MAX];
	char *end;

	if (!param(req, name, text, sizeof(text), present, resp))
		return false;
	if (!*present)
		return true;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	if (!isdigit((unsigned char)text[0]) || *end || errno || v < min || v > max) {
		http_response_error(resp, 400, "parameter '%s' must be an integer in [%u, %u]", name,
				    min, max);
		return false;
	}
	*out = (uint32_t)v;
	return true;
}

/* A sample filter with its strings' storage. */
struct query {
	struct store_sample_filter f;
	char node[PARAM_MAX];
	char comm[PARAM_MAX];
	char job[PARAM_MAX];
};

/* Parses node, pid, comm, from and to; answers 400 and returns false when malformed. */
static bool query_parse(struct api *api, const struct http_request *req, struct query *q,
			struct http_response *resp)
{
	char from[PARAM_MAX], to[PARAM_MAX];
	bool has_node, has_comm, has_job, has_from, has_to;
	int64_t now = api->now_ms();

	memset(q, 0, sizeof(*q));
	if (!param(req, "node", q->node, sizeof(q->node), &has_node, resp) ||
	    !param(req, "comm", q->comm, sizeof(q->comm), &has_comm, resp) ||
	    !param(req, "job", q->job, sizeof(q->job), &has_job, resp) ||
	    !param(req, "from", from, sizeof(from), &has_from, resp) ||
	    !param(req, "to", to, sizeof(to), &has_to, resp) ||
	    !param_uint(req, "pid", 0, UINT32_MAX, &q->f.pid, &q->f.has_pid, resp))
		return false;
	q->f.node = has_node && *q->node ? q->node : NULL;
	q->f.comm = has_comm && *q->comm ? q->comm : NULL;
	q->f.job = has_job && *q->job ? q->job : NULL;
	q->f.to_ms = now;
	if (has_to && api_time_parse(to, now, &q->f.to_ms)) {
		http_response_error(resp, 400,
				    "invalid time '%s' for 'to' (use Unix seconds, RFC 3339, now,"
				    " or -30s/-5m/-1h)", to);
		return false;
	}
	q->f.from_ms = q->f.to_ms - API_DEFAULT_RANGE_MS;
	if (has_from && api_time_parse(from, now, &q->f.from_ms)) {
		http_response_error(resp, 400,
				    "invalid time '%s' for 'from' (use Unix seconds, RFC 3339, now,"
				    " or -30s/-5m/-1h)", from);
		return false;
	}
	if (q->f.from_ms > q->f.to_ms) {
		http_response_error(resp, 400, "'from' is after 'to'");
		return false;
	}
	return true;
}

static bool authorized(struct api *api, const struct http_request *req, struct http_response *resp)
{
	if (auth_request_check(api->auth, req))
		return true;
	auth_respond_unauthorized(resp);
	return false;
}

static void respond_store_error(struct http_response *resp, int rc)
{
	int status = rc == -EBUSY || rc == -ENOMEM ? 503 : 500;

	http_response_error(resp, status, "storage error: %s", sysom_strerror(rc));
}

static json_t *json_hex_u64(uint64_t v)
{
	char text[24];

	snprintf(text, sizeof(text), "0x%" PRIx64, v);
	return json_string(text);
}

/* ---- nodes and processes ------------------------------------------------------------------ */

static int node_to_json(void *arg, const struct store_node *n)
{
	char epoch[17];
	json_t *obj;

	snprintf(epoch, sizeof(epoch), "%016" PRIx64, n->last_epoch);
	obj = json_pack("{s:s,s:o,s:o,s:o,s:o,s:s,s:I,s:I,s:I,s:o,s:o,s:I,s:s,s:I}", "node_id",
			n->node_id, "hostname", render_json_string(n->hostname), "kernel_release",
			render_json_string(n->kernel_release), "machine",
			render_json_string(n->machine), "agent_version",
			render_json_string(n->agent_version), "boot_id", n->boot_id, "sample_hz",
			(json_int_t)n->sample_hz, "sample_rate_ppm", (json_int_t)n->sample_rate_ppm,
			"online_cpus", (json_int_t)n->online_cpus, "first_seen",
			render_json_time(n->first_seen_ns), "last_seen",
			render_json_time(n->last_seen_ns), "batches", (json_int_t)n->batches,
			"last_epoch", epoch, "last_sequence",
			(json_int_t)(n->last_sequence > INT64_MAX ? INT64_MAX : n->last_sequence));
	return obj && !json_array_append_new(arg, obj) ? 0 : -ENOMEM;
}

void api_nodes_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	json_t *nodes;
	int rc;

	if (!authorized(api, req, resp))
		return;
	nodes = json_array();
	if (!nodes) {
		respond_store_error(resp, -ENOMEM);
		return;
	}
	if ((rc = store_nodes_list(api->store, node_to_json, nodes))) {
		json_decref(nodes);
		respond_store_error(resp, rc);
		return;
	}
	render_json_respond(resp, 200, json_pack("{s:o}", "nodes", nodes));
}

static int process_to_json(void *arg, const struct store_process *p)
{
	json_t *obj = json_pack(
		"{s:s,s:o,s:I,s:I,s:o,s:o,s:o,s:I,s:f,s:o,s:o,s:I}", "node_id", p->node_id, "hostname",
		render_json_string(p->hostname), "pid", (json_int_t)p->pid, "ppid", (json_int_t)p->ppid,
		"comm", render_json_string(p->comm), "exe", render_json_string(p->exe), "cmdline",
		render_json_string(p->cmdline), "generation", (json_int_t)p->generation,
		"start_time_since_boot", (double)(p->start_time_ns / 1000000) / 1000.0, "first_seen",
		render_json_time(p->first_seen_ns), "last_seen", render_json_time(p->last_seen_ns),
		"samples", (json_int_t)(p->samples > INT64_MAX ? INT64_MAX : p->samples));

	return obj && !json_array_append_new(arg, obj) ? 0 : -ENOMEM;
}

void api_processes_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	struct query q;
	uint32_t limit = API_DEFAULT_PROCESS_LIMIT;
	bool has_limit;
	json_t *list;
	int rc;

	if (!authorized(api, req, resp) || !query_parse(api, req, &q, resp) ||
	    !param_uint(req, "limit", 1, API_MAX_PROCESS_LIMIT, &limit, &has_limit, resp))
		return;
	list = json_array();
	if (!list) {
		respond_store_error(resp, -ENOMEM);
		return;
	}
	if ((rc = store_processes_list(api->store, &q.f, limit, process_to_json, list))) {
		json_decref(list);
		respond_store_error(resp, rc);
		return;
	}
	render_json_respond(resp, 200,
			    json_pack("{s:o,s:o,s:o}", "from", render_json_time(q.f.from_ms * 1000000),
				      "to", render_json_time(q.f.to_ms * 1000000), "processes", list));
}

/* ---- flame graphs -------------------------------------------------------------------------- */

/* One aggregated row of the store, kept for rendering. */
struct group {
	char *comm;
	int64_t pid;
	uint64_t processes;
	int64_t stack[2]; /* [0] user, [1] kernel: store ids or STORE_STACK_NONE */
	uint64_t count;
	char *gpu;        /* GPU groups: the kernel name or "0x<handle>"; NULL for CPU */
	bool gpu_named;   /* gpu is a kernel name */
	bool no_launch;   /* GPU time of a kernel no traced launch explains */
};

enum flame_kind {
	FLAME_CPU,        /* CPU samples by stack */
	FLAME_GPU_LAUNCH, /* kernel launches by launching stack */
	FLAME_GPU_TIME,   /* GPU kernel time (ns) by launching stack */
};

/* A frame to resolve: which object and offset, in which kind of stack, leaf or not. */
struct frame_key {
	int64_t object;
	uint64_t offset;
	uint8_t stack_kind;
	bool leaf; /* frame 0 of its stack (others are return addresses) */
};

/* Everything one flame graph request collects; freed by flame_free. */
struct flame {
	struct group *groups;
	size_t ngroups, groups_cap;
	struct store_stack **stacks; /* distinct stacks of all groups */
	size_t nstacks;
	struct hash_index stack_index; /* stack id → index in stacks */
	struct frame_key *keys;        /* distinct frames */
	struct symbolized_location *frames; /* resolved, parallel to keys */
	size_t nframes, frames_cap;
	struct hash_index frame_index; /* frame key → index */
	uint64_t total;
};

static void flame_free(struct flame *fl)
{
	for (size_t i = 0; i < fl->ngroups; i++) {
		free(fl->groups[i].comm);
		free(fl->groups[i].gpu);
	}
	free(fl->groups);
	for (size_t i = 0; i < fl->nstacks; i++)
		free(fl->stacks[i]);
	free(fl->stacks);
	for (size_t i = 0; i < fl->nframes; i++)
		symbolized_location_release(&fl->frames[i]);
	free(fl->frames);
	free(fl->keys);
	hash_index_free(&fl->stack_index);
	hash_index_free(&fl->frame_index);
}

/* A new zeroed group at the end of fl->groups, or NULL when out of memory. */
static struct group *group_add(struct flame *fl, const char *comm)
{
	if (fl->ngroups == fl->groups_cap) {
		size_t cap = fl->groups_cap ? fl->groups_cap * 2 : 256;
		struct group *grown = realloc(fl->groups, cap * sizeof(*grown));
		if (!grown)
			return NULL;
		fl->groups = grown;
		fl->groups_cap = cap;
	}
	struct group *g = &fl->groups[fl->ngroups];
	memset(g, 0, sizeof(*g));
	g->comm = strdup(comm);
	if (!g->comm)
		return NULL;
	fl->ngroups++;
	return g;
}

static int group_collect(void *arg, const struct store_stack_count *row)
{
	struct group *g = group_add(arg, row->comm);

	if (!g)
		return -ENOMEM;
	g->pid = row->pid;
	g->processes = row->processes;
	g->stack[0] = row->user_stack;
	g->stack[1] = row->kernel_stack;
	g->count = row->count;
	return 0;
}

/* A GPU group: the launching user stack, then the kernel as the leaf frame. */
static int gpu_group_add(struct flame *fl, const char *comm, int64_t pid, uint64_t processes,
			 int64_t user_stack, const char *kernel, bool named, bool no_launch,
			 uint64_t count)
{
	struct group *g = group_add(fl, comm);

	if (!g)
		return -ENOMEM;
	g->pid = pid;
	g->processes = processes;
	g->stack[0] = user_stack;
	g->stack[1] = STORE_STACK_NONE;
	g->count = count;
	g->gpu_named = named;
	g->no_launch = no_launch;
	g->gpu = strdup(kernel);
	return g->gpu ? 0 : -ENOMEM;
}

/* GPU launches: counted per launching stack. */
static int launch_collect(void *arg, const struct store_launch_count *row)
{
	return gpu_group_add(arg, row->comm, row->pid, row->processes, row->user_stack,
			     row->kernel, row->named, false, row->count);
}

/* GPU time: each launching stack gets its share of the kernel's time. */
static int gpu_time_collect(void *arg, const struct store_gpu_time *row)
{
	return gpu_group_add(arg, row->comm, row->pid, row->processes, row->user_stack,
			     row->kernel, true, !row->launch_seen, row->ns);
}

struct stack_match {
	const struct flame *fl;
	int64_t id;
};

static bool stack_eq(const void *ctx, uint32_t idx)
{
	const struct stack_match *m = ctx;

	return m->fl->stacks[idx]->id == m->id;
}

/* The loaded stack with this id (loading it once), or NULL with *rc set. */
static const struct store_stack *flame_stack(struct api *api, struct flame *fl, int64_t id, int *rc)
{
	struct stack_match m = { fl, id };
	uint64_t h = sysom_hash_mix((uint64_t)id, 0);
	uint32_t idx = hash_index_find(&fl->stack_index, h, stack_eq, &m);
	struct store_stack *stk;

	if (idx != HASH_INDEX_NONE)
		return fl->stacks[idx];
	if ((*rc = store_stack_get(api->store, id, &stk)))
		return NULL;
	/* Every group has at most two stacks: ngroups * 2 bounds the array. */
	fl->stacks[fl->nstacks++] = stk;
	if ((*rc = hash_index_insert(&fl->stack_index, h, (uint32_t)(fl->nstacks - 1))))
		return NULL;
	return stk;
}

struct frame_match {
	const struct flame *fl;
	const struct frame_key *key;
};

static uint64_t frame_hash(const struct frame_key *key)
{
	return sysom_hash_mix(sysom_hash_mix((uint64_t)key->object, key->offset),
			      (uint64_t)key->stack_kind << 1 | key->leaf);
}

static bool frame_eq(const void *ctx, uint32_t idx)
{
	const struct frame_match *m = ctx;
	const struct frame_key *k = &m->fl->keys[idx];

	return k->object == m->key->object && k->offset == m->key->offset &&
	       k->stack_kind == m->key->stack_kind && k->leaf == m->key->leaf;
}

/* Resolves a frame once per request (the symbolizer caches across requests). */
static int flame_frame(struct api *api, struct flame *fl, const struct frame_key *key)
{
	struct frame_match m = { fl, key };
	uint64_t h = frame_hash(key);
	int rc;

	if (hash_index_find(&fl->frame_index, h, frame_eq, &m) != HASH_INDEX_NONE)
		return 0;
	if (fl->nframes == fl->frames_cap) {
		size_t cap = fl->frames_cap ? fl->frames_cap * 2 : 1024;
		struct frame_key *keys = realloc(fl->keys, cap * sizeof(*keys));
		if (!keys)
			return -ENOMEM;
		fl->keys = keys;
		struct symbolized_location *frames = realloc(fl->frames, cap * sizeof(*frames));
		if (!frames)
			return -ENOMEM;
		fl->frames = frames;
		fl->frames_cap = cap;
	}
	rc = symbolizer_location_resolve(api->sym, key->stack_kind, key->object, key->offset,
					 key->leaf, &fl->frames[fl->nframes]);
	if (rc)
		return rc;
	fl->keys[fl->nframes] = *key;
	if ((rc = hash_index_insert(&fl->frame_index, h, (uint32_t)fl->nframes))) {
		symbolized_location_release(&fl->frames[fl->nframes]);
		return rc;
	}
	fl->nframes++;
	return 0;
}

static const struct symbolized_location *flame_frame_get(const struct flame *fl,
							 const struct frame_key *key)
{
	struct frame_match m = { fl, key };

	return &fl->frames[hash_index_find(&fl->frame_index, frame_hash(key), frame_eq, &m)];
}

/* Aggregates, loads the stacks and resolves every distinct frame. */
static int flame_build(struct api *api, const struct store_sample_filter *f, uint32_t limit,
		       enum flame_kind kind, struct flame *fl)
{
	int rc;

	switch (kind) {
	case FLAME_GPU_LAUNCH:
		rc = store_launches_aggregate(api->store, f, limit, launch_collect, fl, &fl->total);
		break;
	case FLAME_GPU_TIME:
		rc = store_gpu_time_aggregate(api->store, f, limit, gpu_time_collect, fl, &fl->total);
		break;
	default:
		rc = store_stacks_aggregate(api->store, f, limit, group_collect, fl, &fl->total);
		break;
	}
	if (rc)
		return rc;
	if ((rc = hash_index_init(&fl->stack_index, (uint32_t)(fl->ngroups * 2))) ||
	    (rc = hash_index_init(&fl->frame_index, 1024)))
		return rc;
	fl->stacks = calloc(fl->ngroups * 2 + 1, sizeof(*fl->stacks));
	if (!fl->stacks)
		return -ENOMEM;
	for (size_t i = 0; i < fl->ngroups; i++) {
		for (int part = 0; part < 2; part++) {
			const struct store_stack *stk;

			if (fl->groups[i].stack[part] == STORE_STACK_NONE)
				continue;
			if (!(stk = flame_stack(api, fl, fl->groups[i].stack[part], &rc)))
				return rc;
			for (uint16_t j = 0; j < stk->nframes; j++) {
				struct frame_key key = { stk->frames[j].object, stk->frames[j].offset,
							 stk->kind, j == 0 };
				if ((rc = flame_frame(api, fl, &key)))
					return rc;
			}
		}
	}
	return 0;
}

/* Calls `emit` for each frame of a group, root first: user part, then kernel part (or, for
 * a GPU launch group, the kernel frame "[gpu] name"). */
typedef int (*frame_emit_fn)(void *arg, const struct symbolized_frame *f, bool kernel_part);

static int gpu_frame(const struct group *g, frame_emit_fn emit, void *arg)
{
	struct byte_buf name = { 0 };
	struct symbolized_frame f = { .kind = SYMBOLIZED_GPU };
	int rc;

	if (g->no_launch) {
		struct symbolized_frame none = { .kind = SYMBOLIZED_GPU,
						 .name = (char *)"[no launch stack]" };
		if ((rc = emit(arg, &none, false)))
			return rc;
	}
	byte_buf_printf(&name, "[gpu] %s", g->gpu);
	byte_buf_append(&name, "", 1);
	if ((rc = byte_buf_error(&name)))
		goto cleanup;
	f.name = (char *)name.data;
	rc = emit(arg, &f, false);
cleanup:
	byte_buf_free(&name);
	return rc;
}

static int group_stack_frames(const struct flame *fl, const struct group *g, frame_emit_fn emit,
			      void *arg)
{
	for (int part = 0; part < 2; part++) {
		struct stack_match m = { fl, g->stack[part] };
		const struct store_stack *stk;
		int rc;

		if (g->stack[part] == STORE_STACK_NONE)
			continue;
		stk = fl->stacks[hash_index_find(&fl->stack_index, sysom_hash_mix((uint64_t)m.id, 0),
						 stack_eq, &m)];
		if (stk->stop_reason != SYSOM_STOP_COMPLETE) {
			struct symbolized_frame err;
			if ((rc = symbolizer_stop_frame(stk->stop_reason, &err)))
				return rc;
			rc = emit(arg, &err, part == 1);
			symbolized_frame_release(&err);
			if (rc)
				return rc;
		}
		for (int j = stk->nframes - 1; j >= 0; j--) {
			struct frame_key key = { stk->frames[j].object, stk->frames[j].offset,
						 stk->kind, j == 0 };
			const struct symbolized_location *loc = flame_frame_get(fl, &key);
			/* A frame with inlined calls: the function, then the calls, root first. */
			for (uint32_t k = 0; k < loc->count; k++)
				if ((rc = emit(arg, &loc->frames[k], part == 1)))
					return rc;
		}
	}
	return 0;
}

static int group_frames(const struct flame *fl, const struct group *g, frame_emit_fn emit,
			void *arg)
{
	int rc;

	if ((rc = group_stack_frames(fl, g, emit, arg)))
		return rc;
	return g->gpu ? gpu_frame(g, emit, arg) : 0;
}

/* Appends a frame name for folded output: valid UTF-8, no ';' or line breaks. */
static void folded_name(struct byte_buf *out, const char *name)
{
	struct byte_buf clean = { 0 };

	render_utf8_append(&clean, name, strlen(name));
	for (size_t i = 0; i < clean.len; i++) {
		char c = (char)clean.data[i];
		byte_buf_append(out, c == ';' ? ":" : c == '\n' || c == '\r' ? " " : &c, 1);
	}
	if (byte_buf_error(&clean) && !out->error)
		out->error = byte_buf_error(&clean);
	byte_buf_free(&clean);
}

static int folded_emit(void *arg, const struct symbolized_frame *f, bool kernel_part)
{
	struct byte_buf *line = arg;

	byte_buf_append(line, ";", 1);
	folded_name(line, f->name);
	if (kernel_part)
		byte_buf_append(line, "_[k]", 4);
	else if (f->inlined)
		byte_buf_append(line, "_[i]", 4); /* flamegraph.pl's mark of inlined frames */
	return byte_buf_error(line);
}

/* A folded line and its count; identical lines (same names, other offsets) are merged. */
struct folded_line {
	char *text;
	size_t len;
	uint64_t count;
};

struct line_match {
	const struct folded_line *lines;
	const char *text;
	size_t len;
};

static bool line_eq(const void *ctx, uint32_t idx)
{
	const struct line_match *m = ctx;

	return m->lines[idx].len == m->len && memcmp(m->lines[idx].text, m->text, m->len) == 0;
}

static int line_compare(const void *a, const void *b)
{
	const struct folded_line *x = a, *y = b;

	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	return strcmp(x->text, y->text);
}

static int folded_render(const struct flame *fl, struct byte_buf *out)
{
	struct folded_line *lines = calloc(fl->ngroups + 1, sizeof(*lines));
	struct hash_index index = { 0 };
	struct byte_buf line = { 0 };
	size_t nlines = 0;
	int rc;

	if (!lines)
		return -ENOMEM;
	if ((rc = hash_index_init(&index, (uint32_t)fl->ngroups)))
		goto cleanup;
	for (size_t i = 0; i < fl->ngroups; i++) {
		const struct group *g = &fl->groups[i];

		line.len = 0;
		folded_name(&line, *g->comm ? g->comm : "[unknown]");
		if ((rc = group_frames(fl, g, folded_emit, &line)))
			goto cleanup;
		struct line_match m = { lines, (const char *)line.data, line.len };
		uint64_t h = sysom_hash64(line.data, line.len, 0);
		uint32_t found = hash_index_find(&index, h, line_eq, &m);
		if (found != HASH_INDEX_NONE) {
			lines[found].count += g->count;
			continue;
		}
		lines[nlines].text = malloc(line.len + 1);
		if (!lines[nlines].text) {
			rc = -ENOMEM;
			goto cleanup;
		}
		memcpy(lines[nlines].text, line.data, line.len);
		lines[nlines].text[line.len] = '\0';
		lines[nlines].len = line.len;
		lines[nlines].count = g->count;
		if ((rc = hash_index_insert(&index, h, (uint32_t)nlines)))
			goto cleanup;
		nlines++;
	}
	qsort(lines, nlines, sizeof(*lines), line_compare);
	for (size_t i = 0; i < nlines; i++)
		byte_buf_printf(out, "%s %" PRIu64 "\n", lines[i].text, lines[i].count);
	rc = byte_buf_error(out);
cleanup:
	for (size_t i = 0; i < nlines; i++)
		free(lines[i].text);
	free(lines);
	hash_index_free(&index);
	byte_buf_free(&line);
	return rc;
}

static int json_emit(void *arg, const struct symbolized_frame *f, bool kernel_part)
{
	static const char *const kinds[] = { [SYMBOLIZED_USER] = "user",
					     [SYMBOLIZED_KERNEL] = "kernel",
					     [SYMBOLIZED_ERROR] = "error",
					     [SYMBOLIZED_GPU] = "gpu" };
	json_t *frames = arg;
	json_t *obj;

	(void)kernel_part;
	obj = json_pack("{s:o,s:s}", "name", render_json_string(f->name), "kind", kinds[f->kind]);
	if (obj && f->kind != SYMBOLIZED_ERROR && f->kind != SYMBOLIZED_GPU) {
		json_object_set_new(obj, "object", render_json_string(f->object));
		json_object_set_new(obj, "build_id", json_string(f->build_id));
		json_object_set_new(obj, "offset", json_hex_u64(f->offset));
		if (f->has_symbol_offset)
			json_object_set_new(obj, "symbol_offset", json_hex_u64(f->symbol_offset));
		if (f->inlined)
			json_object_set_new(obj, "inlined", json_true());
		if (f->file)
			json_object_set_new(obj, "file", render_json_string(f->file));
		if (f->file && f->line)
			json_object_set_new(obj, "line", json_integer((json_int_t)f->line));
	}
	return obj && !json_array_append_new(frames, obj) ? 0 : -ENOMEM;
}

static int json_render(const struct flame *fl, const struct query *q, enum flame_kind kind,
		       json_t **out)
{
	static const char *const units[] = { [FLAME_CPU] = "samples",
					     [FLAME_GPU_LAUNCH] = "launches",
					     [FLAME_GPU_TIME] = "ns" };
	json_t *stacks = json_array();
	uint64_t shown = 0;
	int rc = 0;

	if (!stacks)
		return -ENOMEM;
	for (size_t i = 0; i < fl->ngroups; i++) {
		const struct group *g = &fl->groups[i];
		json_t *frames = json_array();
		json_t *process = json_pack("{s:o,s:o,s:I}", "comm", render_json_string(g->comm), "pid",
					    g->pid >= 0 ? json_integer(g->pid) : json_null(),
					    "processes", (json_int_t)g->processes);
		json_t *stack = json_pack("{s:I,s:o,s:o}", "count", (json_int_t)g->count, "process",
					  process, "frames", frames);

		if (!stack || json_array_append_new(stacks, stack)) {
			rc = -ENOMEM;
			goto cleanup;
		}
		if ((rc = group_frames(fl, g, json_emit, frames)))
			goto cleanup;
		shown += g->count;
	}
	*out = json_pack("{s:I,s:s,s:o,s:o,s:b,s:O}", "total",
			 (json_int_t)(fl->total > INT64_MAX ? INT64_MAX : fl->total), "unit",
			 units[kind], "from",
			 render_json_time(q->f.from_ms * 1000000), "to",
			 render_json_time(q->f.to_ms * 1000000), "truncated", shown < fl->total,
			 "stacks", stacks);
	if (!*out)
		rc = -ENOMEM;
cleanup:
	json_decref(stacks);
	return rc;
}

void api_flamegraph_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	struct flame fl = { 0 };
	struct query q;
	char format[16] = "folded", kind[16] = "cpu";
	uint32_t limit = API_DEFAULT_STACK_LIMIT;
	bool has_limit, has_format, has_kind, json;
	enum flame_kind fk;
	json_t *doc = NULL;
	int rc;

	if (!authorized(api, req, resp) || !query_parse(api, req, &q, resp) ||
	    !param_uint(req, "limit", 1, API_MAX_STACK_LIMIT, &limit, &has_limit, resp) ||
	    !param(req, "format", format, sizeof(format), &has_format, resp))
		return;
	json = strcmp(format, "json") == 0;
	if (!json && strcmp(format, "folded") != 0) {
		http_response_error(resp, 400, "parameter 'format' must be folded or json");
		return;
	}
	if (!param(req, "kind", kind, sizeof(kind), &has_kind, resp))
		return;
	if (strcmp(kind, "cpu") == 0) {
		fk = FLAME_CPU;
	} else if (strcmp(kind, "gpu-launch") == 0) {
		fk = FLAME_GPU_LAUNCH;
	} else if (strcmp(kind, "gpu-time") == 0) {
		fk = FLAME_GPU_TIME;
	} else {
		http_response_error(resp, 400, "parameter 'kind' must be cpu, gpu-launch or gpu-time");
		return;
	}
	if ((rc = flame_build(api, &q.f, limit, fk, &fl)))
		goto cleanup;
	if (json) {
		if ((rc = json_render(&fl, &q, fk, &doc)))
			goto cleanup;
		render_json_respond(resp, 200, doc);
	} else {
		resp->status = 200;
		snprintf(resp->content_type, sizeof(resp->content_type), "text/plain; charset=utf-8");
		resp->body.len = 0;
		rc = folded_render(&fl, &resp->body);
	}
cleanup:
	if (rc)
		respond_store_error(resp, rc);
	flame_free(&fl);
}

/* ---- differential flame graph ------------------------------------------------------------ */

/* A flame graph of `kind` as folded "stack count" lines. */
static int folded_of_kind(struct api *api, const struct store_sample_filter *f, uint32_t limit,
			  enum flame_kind kind, struct byte_buf *out)
{
	struct flame fl = { 0 };
	int rc = flame_build(api, f, limit, kind, &fl);

	if (!rc)
		rc = folded_render(&fl, out);
	flame_free(&fl);
	return rc;
}

int api_folded(struct api *api, const struct store_sample_filter *f, uint32_t limit,
	       struct byte_buf *out)
{
	return folded_of_kind(api, f, limit, FLAME_CPU, out);
}

/* GPU kernel time by launching stack as folded lines (the gpu-time flame graph's). */
static int api_gpu_time_folded(void *arg, const struct store_sample_filter *f, uint32_t limit,
			       struct byte_buf *out)
{
	return folded_of_kind(arg, f, limit, FLAME_GPU_TIME, out);
}

int api_diff_folded(struct api *api, const struct store_sample_filter *base, int32_t a, int32_t b,
		    uint32_t limit, struct byte_buf *out)
{
	const int32_t ranks[2] = { a, b };
	struct byte_buf folded[2] = { { 0 }, { 0 } };
	int rc = 0;

	for (int side = 0; side < 2 && !rc; side++) {
		struct store_sample_filter f = *base;

		f.has_rank = true;
		f.rank = ranks[side];
		rc = api_folded(api, &f, limit, &folded[side]);
	}
	if (!rc)
		rc = folded_merge(&folded[0], &folded[1], out);
	byte_buf_free(&folded[0]);
	byte_buf_free(&folded[1]);
	return rc;
}

/*
 * GET /api/v1/flamegraph/diff?job=J&a=RANK&b=RANK&from=&to=&limit=: the CPU profiles of two
 * ranks of a job as one folded file "stack count_a count_b" (the input of difffolded-style
 * differential flame graphs), stacks in byte order.
 */
void api_flamegraph_diff_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	struct query q;
	uint32_t ranks[2], limit = API_DEFAULT_STACK_LIMIT;
	bool has[2], has_limit;
	int rc;

	if (!authorized(api, req, resp) || !query_parse(api, req, &q, resp) ||
	    !param_uint(req, "a", 0, INT32_MAX, &ranks[0], &has[0], resp) ||
	    !param_uint(req, "b", 0, INT32_MAX, &ranks[1], &has[1], resp) ||
	    !param_uint(req, "limit", 1, API_MAX_STACK_LIMIT, &limit, &has_limit, resp))
		return;
	if (!q.f.job || !has[0] || !has[1]) {
		http_response_error(resp, 400, "parameters 'job', 'a' and 'b' (two ranks) are required");
		return;
	}
	resp->status = 200;
	snprintf(resp->content_type, sizeof(resp->content_type), "text/plain; charset=utf-8");
	resp->body.len = 0;
	if ((rc = api_diff_folded(api, &q.f, (int32_t)ranks[0], (int32_t)ranks[1], limit, &resp->body)))
		respond_store_error(resp, rc);
}

/* ---- training jobs ------------------------------------------------------------------------- */

static json_t *json_int_or_null(int64_t v)
{
	return v >= 0 ? json_integer((json_int_t)v) : json_null();
}

static const char *job_source_name(uint8_t source)
{
	switch (source) {
	case SYSOM_JOB_FROM_ENVIRONMENT:
		return "environment";
	case SYSOM_JOB_FROM_REGISTRATION:
		return "registration";
	}
	return "unknown";
}

static const char *key_source_name(uint8_t source)
{
	switch (source) {
	case SYSOM_COMM_KEY_UNIQUE_ID:
		return "unique_id";
	case SYSOM_COMM_KEY_SPLIT:
		return "split";
	case SYSOM_COMM_KEY_COMM_HASH:
		return "comm_hash";
	case SYSOM_COMM_KEY_LOCAL:
		return "local";
	}
	return "unknown";
}

static int job_to_json(void *arg, const struct store_job *j)
{
	json_t *obj = json_pack("{s:o,s:o,s:I,s:I,s:I,s:o,s:o}", "job", render_json_string(j->job),
				"world_size", json_int_or_null(j->world_size), "ranks",
				(json_int_t)j->ranks, "processes", (json_int_t)j->processes, "nodes",
				(json_int_t)j->nodes, "first_seen", render_json_time(j->first_seen_ns),
				"last_seen", render_json_time(j->last_seen_ns));

	return obj && !json_array_append_new(arg, obj) ? 0 : -ENOMEM;
}

void api_jobs_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	uint32_t limit = API_DEFAULT_JOB_LIMIT;
	bool has_limit;
	json_t *jobs;
	int rc;

	if (!authorized(api, req, resp) ||
	    !param_uint(req, "limit", 1, API_MAX_JOB_LIMIT, &limit, &has_limit, resp))
		return;
	if (!(jobs = json_array())) {
		respond_store_error(resp, -ENOMEM);
		return;
	}
	if ((rc = store_jobs_list(api->store, limit, job_to_json, jobs))) {
		json_decref(jobs);
		respond_store_error(resp, rc);
		return;
	}
	render_json_respond(resp, 200, json_pack("{s:o}", "jobs", jobs));
}

/* What GET /api/v1/jobs/{job} collects. */
struct job_doc {
	json_t *ranks;      /* array */
	json_t *nodes;      /* array, in order of first appearance (ranks are sorted) */
	json_t *node_index; /* node id → index in nodes */
	json_t *groups;     /* group name → { value → ranks } */
	json_t *comms;      /* array */
	json_t *comm;       /* the communicator being filled (borrowed from comms) */
	uint64_t comm_key;
	int32_t last_rank;  /* last rank added to comm (rows are sorted by rank) */
	int32_t world_size;
	size_t rank_rows, comm_rows;
};

/* Adds "name=value,name=value" to the group table (malformed or oversized parts skipped). */
static int groups_add(json_t *groups, const char *text)
{
	const char *p = text;

	while (*p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		char name[128], value[128];

		if (eq && eq > p && (size_t)(eq - p) < sizeof(name) &&
		    len - (size_t)(eq - p) - 1 < sizeof(value)) {
			json_t *values, *n;

			memcpy(name, p, (size_t)(eq - p));
			name[eq - p] = '\0';
			memcpy(value, eq + 1, len - (size_t)(eq - p) - 1);
			value[len - (size_t)(eq - p) - 1] = '\0';
			if (!(values = json_object_get(groups, name))) {
				if (!(values = json_object()) || json_object_set_new(groups, name, values))
					return -ENOMEM;
			}
			n = json_object_get(values, value);
			if (json_object_set_new(values, value,
						json_integer(n ? json_integer_value(n) + 1 : 1)))
				return -ENOMEM;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	return 0;
}

static int job_rank_to_json(void *arg, const struct store_job_rank *r)
{
	struct job_doc *d = arg;
	json_t *obj, *idx, *node;

	if (++d->rank_rows > API_MAX_JOB_ROWS)
		return 0; /* the caller says truncated */
	if (r->world_size > d->world_size)
		d->world_size = r->world_size;
	obj = json_pack("{s:o,s:o,s:o,s:o,s:o,s:s,s:o,s:I,s:o,s:s,s:o,s:o,s:o,s:o,s:o}", "rank",
			json_int_or_null(r->rank), "local_rank", json_int_or_null(r->local_rank),
			"world_size", json_int_or_null(r->world_size), "local_world_size",
			json_int_or_null(r->local_world_size), "group_rank",
			json_int_or_null(r->group_rank), "node_id", r->node_id, "hostname",
			render_json_string(r->hostname), "pid", (json_int_t)r->pid, "comm",
			render_json_string(r->comm), "source", job_source_name(r->source),
			"job_id_source", render_json_string(r->job_id_source), "master",
			render_json_string(r->master), "groups", render_json_string(r->groups),
			"first_seen", render_json_time(r->first_seen_ns), "last_seen",
			render_json_time(r->last_seen_ns));
	if (!obj || json_array_append_new(d->ranks, obj))
		return -ENOMEM;
	if (!(idx = json_object_get(d->node_index, r->node_id))) {
		node = json_pack("{s:s,s:o,s:[]}", "node_id", r->node_id, "hostname",
				 render_json_string(r->hostname), "ranks");
		if (!node || json_array_append_new(d->nodes, node) ||
		    json_object_set_new(d->node_index, r->node_id,
					json_integer((json_int_t)json_array_size(d->nodes) - 1)))
			return -ENOMEM;
	} else {
		node = json_array_get(d->nodes, (size_t)json_integer_value(idx));
	}
	if (r->rank >= 0 && json_array_append_new(json_object_get(node, "ranks"),
						  json_integer(r->rank)))
		return -ENOMEM;
	return groups_add(d->groups, r->groups);
}

static int job_comm_to_json(void *arg, const struct store_job_communicator *c)
{
	struct job_doc *d = arg;
	json_t *member;

	if (++d->comm_rows > API_MAX_JOB_ROWS)
		return 0;
	if (!d->comm || c->key != d->comm_key) {
		d->comm = json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:s,s:o,s:b,s:I,s:[]}", "key",
				    render_json_key(c->key), "nranks", json_int_or_null(c->nranks),
				    "parent_key", c->parent_key ? render_json_key(c->parent_key) : json_null(),
				    "split_color", json_int_or_null(c->split_color), "split_ordinal",
				    c->split_ordinal ? json_integer(c->split_ordinal) : json_null(),
				    "comm_hash", c->comm_hash ? render_json_key(c->comm_hash) : json_null(),
				    "key_source", key_source_name(c->key_source), "created",
				    c->created_ns > 0 ? render_json_time(c->created_ns) : json_null(),
				    "destroyed", c->destroyed, "ranks_seen", (json_int_t)0, "ranks");
		if (!d->comm || json_array_append_new(d->comms, d->comm))
			return -ENOMEM;
		d->comm_key = c->key;
		d->last_rank = -1;
	} else {
		json_t *n = json_object_get(d->comm, "nranks");
		if (c->nranks > 0 && (!json_is_integer(n) || json_integer_value(n) < c->nranks))
			json_object_set_new(d->comm, "nranks", json_integer(c->nranks));
		if (c->destroyed)
			json_object_set_new(d->comm, "destroyed", json_true());
	}
	if (c->rank >= 0 && c->rank != d->last_rank) {
		json_t *seen = json_object_get(d->comm, "ranks_seen");
		json_integer_set(seen, json_integer_value(seen) + 1);
		d->last_rank = c->rank;
	}
	member = json_pack("{s:o,s:o,s:s,s:o,s:I,s:b}", "rank", json_int_or_null(c->rank),
			   "job_rank", json_int_or_null(c->job_rank), "node_id", c->node_id,
			   "hostname", render_json_string(c->hostname), "pid", (json_int_t)c->pid,
			   "destroyed", c->destroyed);
	return member && !json_array_append_new(json_object_get(d->comm, "ranks"), member) ? 0
												: -ENOMEM;
}

static void job_detail(struct api *api, const char *job, struct http_response *resp)
{
	struct job_doc d = { .world_size = -1 };
	json_t *doc = NULL;
	int rc = -ENOMEM;

	d.ranks = json_array();
	d.nodes = json_array();
	d.node_index = json_object();
	d.groups = json_object();
	d.comms = json_array();
	if (!d.ranks || !d.nodes || !d.node_index || !d.groups || !d.comms)
		goto cleanup;
	if ((rc = store_job_ranks_list(api->store, job, API_MAX_JOB_ROWS + 1, job_rank_to_json, &d)))
		goto cleanup;
	if (d.rank_rows == 0) {
		http_response_error(resp, 404, "no job '%s'", job);
		goto cleanup;
	}
	if ((rc = store_job_communicators_list(api->store, job, API_MAX_JOB_ROWS + 1,
					       job_comm_to_json, &d)))
		goto cleanup;
	doc = json_pack("{s:o,s:o,s:I,s:O,s:O,s:O,s:O,s:b}", "job", render_json_string(job),
			"world_size", json_int_or_null(d.world_size), "processes",
			(json_int_t)(d.rank_rows > API_MAX_JOB_ROWS ? API_MAX_JOB_ROWS : d.rank_rows),
			"ranks", d.ranks, "nodes", d.nodes, "communicators", d.comms, "groups",
			d.groups, "truncated",
			d.rank_rows > API_MAX_JOB_ROWS || d.comm_rows > API_MAX_JOB_ROWS);
	rc = doc ? 0 : -ENOMEM;
	if (!rc)
		render_json_respond(resp, 200, doc);
cleanup:
	if (rc)
		respond_store_error(resp, rc);
	json_decref(d.ranks);
	json_decref(d.nodes);
	json_decref(d.node_index);
	json_decref(d.groups);
	json_decref(d.comms);
}

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
				   json_int_or_null(c->nranks), "first_entry",
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
			 json_int_or_null(c->rank), "node_id", c->node_id, "hostname",
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

/* Parses `comm` as a communicator key (1 to 16 hex digits, optional 0x); 400 when malformed. */
static bool param_comm_key(const struct http_request *req, bool *present, uint64_t *key,
			   struct http_response *resp)
{
	char comm[PARAM_MAX];
	const char *hex;
	size_t n;

	if (!param(req, "comm", comm, sizeof(comm), present, resp))
		return false;
	if (!*present)
		return true;
	hex = strncasecmp(comm, "0x", 2) == 0 ? comm + 2 : comm;
	n = strlen(hex);
	if (n == 0 || n > 16 || strspn(hex, "0123456789abcdefABCDEF") != n) {
		http_response_error(resp, 400,
				    "parameter 'comm' must be a communicator key of 1 to 16 hex digits");
		return false;
	}
	*key = strtoull(hex, NULL, 16);
	return true;
}

static void job_collectives(struct api *api, const char *job, const struct http_request *req,
			    struct http_response *resp)
{
	struct store_collective_filter f = { .job = job };
	struct coll_doc d = { .limit = API_DEFAULT_COLLECTIVE_LIMIT };
	char op[PARAM_MAX];
	bool has_op, has_limit;
	struct query q;
	json_t *doc;
	int rc;

	if (!query_parse(api, req, &q, resp) ||
	    !param_comm_key(req, &f.has_comm, &f.comm, resp) ||
	    !param(req, "op", op, sizeof(op), &has_op, resp) ||
	    !param_uint(req, "limit", 1, API_MAX_COLLECTIVE_LIMIT, &d.limit, &has_limit, resp))
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
		respond_store_error(resp, -ENOMEM);
		return;
	}
	rc = store_collectives_list(api->store, &f, d.limit + 1, coll_call, &d);
	if (!rc)
		rc = coll_finish(&d);
	if (rc) {
		json_decref(d.instances);
		respond_store_error(resp, rc);
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
	e = json_pack("{s:o,s:s,s:I,s:o,s:I,s:I,s:[],s:[],s:[]}", "rank",
		      json_int_or_null(who->job_rank), "hostname", host ? host : "", "pid",
		      (json_int_t)who->pid, "start_time", render_json_time((int64_t)who->start_time_ns),
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
		      json_int_or_null(p->peer), "nchannels", (json_int_t)p->nchannels, "count",
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
		      "comm_rank", l->rank, "peer", l->peer, "channel", json_int_or_null(l->channel),
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

static void job_gpu(struct api *api, const char *job, const struct http_request *req,
		    struct http_response *resp)
{
	struct store_gpu_filter f = { .job = job };
	struct gpu_doc d = { 0 };
	struct store_gpu_visitor v = { gpu_kernel_visit, gpu_profile_visit, gpu_link_visit, &d };
	uint32_t rank;
	bool has_rank, truncated = false;
	struct query q;
	json_t *summary, *doc;
	int rc;

	if (!query_parse(api, req, &q, resp) ||
	    !param_uint(req, "rank", 0, INT32_MAX, &rank, &has_rank, resp))
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
	if ((rc = store_job_gpu(api->store, &f, API_MAX_GPU_ROWS, &v, &truncated)) ||
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
		respond_store_error(resp, rc);
	gpu_doc_free(&d);
}

static bool param_double(const struct http_request *req, const char *name, double min, double max,
			 double *out, struct http_response *resp)
{
	char text[PARAM_MAX], *end;
	bool present;

	if (!param(req, name, text, sizeof(text), &present, resp))
		return false;
	if (!present)
		return true;
	errno = 0;
	double v = strtod(text, &end);
	if (!text[0] || *end || errno || !isfinite(v) || v < min || v > max) {
		http_response_error(resp, 400, "parameter '%s' must be a number in [%g, %g]", name,
				    min, max);
		return false;
	}
	*out = v;
	return true;
}


static int api_diff_folded_cb(void *arg, const struct store_sample_filter *range, int32_t a,
			      int32_t b, uint32_t limit, struct byte_buf *out)
{
	return api_diff_folded(arg, range, a, b, limit, out);
}

static int api_folded_cb(void *arg, const struct store_sample_filter *f, uint32_t limit,
			 struct byte_buf *out)
{
	return api_folded(arg, f, limit, out);
}

void api_diagnosis_ctx(struct api *api, struct diagnosis_ctx *ctx)
{
	*ctx = (struct diagnosis_ctx){ api->store, api_diff_folded_cb, api, api_folded_cb,
				       api_gpu_time_folded };
}

static void job_stragglers(struct api *api, const char *job, const struct http_request *req,
			   struct http_response *resp)
{
	struct diagnosis_ctx ctx;
	struct diagnosis_params p;
	struct diagnosis_scope scope = { .job = job };
	uint32_t diagnose_on = 1, window, min_ms;
	bool has_diagnose, has_window, has_min;
	json_t *doc = NULL;
	struct query q;
	int rc;

	api_diagnosis_ctx(api, &ctx);
	diagnosis_params_default(&p);
	window = p.sp.window;
	min_ms = (uint32_t)(p.sp.min_excess_ns / 1000000);
	if (!query_parse(api, req, &q, resp) ||
	    !param_uint(req, "window", 1, STRAGGLER_MAX_WINDOW, &window, &has_window, resp) ||
	    !param_uint(req, "min_excess_ms", 0, 600000, &min_ms, &has_min, resp) ||
	    !param_double(req, "k", 0.1, 100, &p.sp.k, resp) ||
	    !param_double(req, "persistent_fraction", 0, 1, &p.sp.persistent_fraction, resp) ||
	    !param_double(req, "gpu_threshold", 1.01, 100, &p.gpu_threshold, resp) ||
	    !param_double(req, "cpu_min_pp", 0.1, 100, &p.cpu_min_pp, resp) ||
	    !param_uint(req, "diagnose", 0, 1, &diagnose_on, &has_diagnose, resp) ||
	    !param_comm_key(req, &scope.has_comm, &scope.comm, resp))
		return;
	/* `comm` is a communicator key here, not a process comm. */
	if (q.f.node || q.f.has_pid || q.f.job) {
		http_response_error(resp, 400, "parameters 'node', 'pid' and 'job' do not apply here");
		return;
	}
	p.sp.window = window;
	p.sp.min_excess_ns = (uint64_t)min_ms * 1000000ull;
	p.diagnose = diagnose_on != 0;
	scope.from_ms = q.f.from_ms;
	scope.to_ms = q.f.to_ms;
	if ((rc = diagnosis_stragglers(&ctx, &scope, &p, &doc)))
		respond_store_error(resp, rc);
	else
		render_json_respond(resp, 200, doc);
}

/* GET /api/v1/jobs/{job}/waterline?comm=&from=&to=&k=&min_pp= */
static void job_waterline(struct api *api, const char *job, const struct http_request *req,
			  struct http_response *resp)
{
	struct diagnosis_ctx ctx;
	struct diagnosis_scope scope = { .job = job };
	double k = DIAGNOSIS_WATERLINE_K, min_pp = DIAGNOSIS_WATERLINE_MIN_PP;
	json_t *doc = NULL;
	struct query q;
	int rc;

	if (!query_parse(api, req, &q, resp) || !param_double(req, "k", 0.1, 100, &k, resp) ||
	    !param_double(req, "min_pp", 0, 100, &min_pp, resp) ||
	    !param_comm_key(req, &scope.has_comm, &scope.comm, resp))
		return;
	if (q.f.node || q.f.has_pid || q.f.job) {
		http_response_error(resp, 400, "parameters 'node', 'pid' and 'job' do not apply here");
		return;
	}
	api_diagnosis_ctx(api, &ctx);
	scope.from_ms = q.f.from_ms;
	scope.to_ms = q.f.to_ms;
	rc = diagnosis_waterline(&ctx, &scope, k, min_pp, &doc);
	if (rc == -E2BIG)
		http_response_error(resp, 413, "more than %d ranks to profile: name one communicator",
				    DIAGNOSIS_WATERLINE_MAX_RANKS);
	else if (rc)
		respond_store_error(resp, rc);
	else
		render_json_respond(resp, 200, doc);
}

static void job_settings_get(struct api *api, const char *job, struct http_response *resp);
static void job_settings_put(struct api *api, const char *job, const struct http_request *req,
			     struct http_response *resp);
static void job_baseline(struct api *api, const char *job, const struct http_request *req,
			 struct http_response *resp);

void api_job_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	static const char prefix[] = API_JOBS_PREFIX;
	struct api *api = ctx;
	const char *rest, *slash;
	char job[API_MAX_JOB_ID + 1];
	size_t len;
	bool is_get;

	if (!authorized(api, req, resp))
		return;
	rest = strncmp(req->path, prefix, sizeof(prefix) - 1) == 0 ? req->path + sizeof(prefix) - 1
								    : "";
	slash = strchr(rest, '/');
	len = slash ? (size_t)(slash - rest) : strlen(rest);
	if (len == 0 || len > API_MAX_JOB_ID) {
		http_response_error(resp, len ? 400 : 404, len ? "job id longer than %d bytes"
							     : "missing job id", API_MAX_JOB_ID);
		return;
	}
	memcpy(job, rest, len);
	job[len] = '\0';
	is_get = strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0;
	if (!is_get && (!slash || (strcmp(slash, "/settings") && strcmp(slash, "/baseline")) ||
			(strcmp(slash, "/settings") == 0 && strcmp(req->method, "PUT")) ||
			(strcmp(slash, "/baseline") == 0 && strcmp(req->method, "POST")))) {
		http_response_error(resp, 405, "method %s not allowed here", req->method);
		return;
	}
	if (!slash)
		job_detail(api, job, resp);
	else if (strcmp(slash, "/collectives") == 0)
		job_collectives(api, job, req, resp);
	else if (strcmp(slash, "/gpu") == 0)
		job_gpu(api, job, req, resp);
	else if (strcmp(slash, "/stragglers") == 0 && is_get)
		job_stragglers(api, job, req, resp);
	else if (strcmp(slash, "/waterline") == 0)
		job_waterline(api, job, req, resp);
	else if (strcmp(slash, "/settings") == 0)
		is_get ? job_settings_get(api, job, resp) : job_settings_put(api, job, req, resp);
	else if (strcmp(slash, "/baseline") == 0 && (is_get || strcmp(req->method, "POST") == 0))
		job_baseline(api, job, req, resp);
	else
		http_response_error(resp, 404, "no such resource under job '%s'", job);
}

/* ---- diagnoses (incidents the monitor opened) -------------------------------------------- */

static json_t *diagnosis_json(const struct store_diagnosis *d, bool with_report)
{
	json_t *comms = json_array(), *o;
	const char *p = d->communicators;

	while (comms && p && *p) {
		const char *sp = strchr(p, ' ');
		size_t len = sp ? (size_t)(sp - p) : strlen(p);
		json_array_append_new(comms, json_stringn(p, len));
		p = sp ? sp + 1 : p + len;
	}
	o = json_pack("{s:I,s:o,s:s,s:s,s:o,s:o,s:o,s:s,s:s,s:o,s:o,s:s,s:o,s:o,s:o}", "id",
		      (json_int_t)d->id, "job", render_json_string(d->job), "kind", d->kind,
		      "status", d->resolved_ms ? "resolved" : "open", "rank",
		      json_int_or_null(d->rank), "hostname", render_json_string(d->hostname),
		      "communicators", comms ? comms : json_array(), "layer", d->layer, "severity",
		      d->severity, "summary", render_json_string(d->summary), "action",
		      render_json_string(d->action), "identity", d->identity, "opened",
		      render_json_time(d->opened_ms * 1000000), "updated",
		      render_json_time(d->updated_ms * 1000000), "resolved",
		      d->resolved_ms ? render_json_time(d->resolved_ms * 1000000) : json_null());
	if (o && with_report) {
		json_t *r = json_loads(d->report, 0, NULL);
		json_object_set_new(o, "report", r ? r : json_null());
	}
	return o;
}

static int diagnosis_list_add(void *arg, const struct store_diagnosis *d)
{
	json_t *o = diagnosis_json(d, false);

	return o && !json_array_append_new(arg, o) ? 0 : -ENOMEM;
}

struct diagnosis_one {
	json_t *doc;
	char *text;
};

/* Plain-text report of one diagnosis: what an SRE reads in a terminal or an alert link. */
/* A folded stack, one frame per line, outermost first. */
static void render_frames(struct byte_buf *out, const char *stack)
{
	for (const char *f = stack; f && *f;) {
		const char *semi = strchr(f, ';');
		size_t flen = semi ? (size_t)(semi - f) : strlen(f);
		byte_buf_printf(out, "      %.*s\n", (int)flen, f);
		f = semi ? semi + 1 : NULL;
	}
}

static void diagnosis_text(const struct store_diagnosis *d, struct byte_buf *out)
{
	json_t *r = json_loads(d->report, 0, NULL), *e, *dg, *layer, *v, *ls;
	char opened[48], resolved[48] = "";
	size_t i;

	render_time_rfc3339(d->opened_ms * 1000000, opened, sizeof(opened));
	if (d->resolved_ms)
		render_time_rfc3339(d->resolved_ms * 1000000, resolved, sizeof(resolved));
	byte_buf_printf(out, "diagnosis %" PRId64 " (%s, %s)\n", d->id, d->kind,
			d->resolved_ms ? "resolved" : "open");
	byte_buf_printf(out, "job:       %s\n", d->job);
	if (d->rank >= 0)
		byte_buf_printf(out, "rank:      %d on %s\n", d->rank, d->hostname);
	if (d->communicators[0])
		byte_buf_printf(out, "comms:     %s\n", d->communicators);
	byte_buf_printf(out, "layer:     %s\nseverity:  %s\nopened:    %s\n", d->layer, d->severity,
			opened);
	if (resolved[0])
		byte_buf_printf(out, "resolved:  %s\n", resolved);
	byte_buf_printf(out, "\n%s\n\naction: %s\n", d->summary, d->action);
	e = json_object_get(r, "straggler");
	dg = json_object_get(e, "diagnosis");
	if ((layer = json_object_get(dg, "gpu")) && json_is_object(layer)) {
		byte_buf_printf(out, "\nGPU layer: %s, slowdown %.2fx\n",
				json_string_value(json_object_get(layer, "verdict")) ?: "",
				json_number_value(json_object_get(layer, "slowdown")));
		json_array_foreach(json_object_get(layer, "kernels"), i, v)
			byte_buf_printf(out, "  %-40s %8.1f us vs %8.1f us healthy (%.2fx), %" JSON_INTEGER_FORMAT " runs\n",
					json_string_value(json_object_get(v, "name")) ?: "",
					json_number_value(json_object_get(v, "mean_ns")) / 1e3,
					json_number_value(json_object_get(v, "healthy_median_ns")) / 1e3,
					json_number_value(json_object_get(v, "ratio")),
					json_integer_value(json_object_get(v, "count")));
		/* The launching stacks of the kernel with the most excess, as the CPU stacks. */
		v = json_array_get(json_object_get(layer, "kernels"), 0);
		json_array_foreach(json_object_get(v, "launch_stacks"), i, ls) {
			const char *st = json_string_value(json_object_get(ls, "stack"));
			byte_buf_printf(out, "  launched from (%.1f%% of %s's GPU time there):\n",
					100 * json_number_value(json_object_get(ls, "share")),
					json_string_value(json_object_get(v, "name")) ?: "");
			render_frames(out, st);
		}
	}
	if ((layer = json_object_get(dg, "cpu")) && json_is_object(layer)) {
		byte_buf_printf(out, "\nCPU layer: against rank %" JSON_INTEGER_FORMAT " (%" JSON_INTEGER_FORMAT " vs %" JSON_INTEGER_FORMAT " samples)\n",
				json_integer_value(json_object_get(layer, "compared_with_rank")),
				json_integer_value(json_object_get(layer, "straggler_samples")),
				json_integer_value(json_object_get(layer, "healthy_samples")));
		json_array_foreach(json_object_get(layer, "functions"), i, v)
			byte_buf_printf(out, "  %+6.1f pp  %s (%.1f%% vs %.1f%%)\n",
					json_number_value(json_object_get(v, "delta_pp")),
					json_string_value(json_object_get(v, "function")) ?: "",
					json_number_value(json_object_get(v, "straggler_pct")),
					json_number_value(json_object_get(v, "healthy_pct")));
		json_array_foreach(json_object_get(layer, "top_stacks"), i, v) {
			const char *st = json_string_value(json_object_get(v, "stack"));
			byte_buf_printf(out, "  stack (%.1f%% vs %.1f%%):\n",
					json_number_value(json_object_get(v, "straggler_pct")),
					json_number_value(json_object_get(v, "healthy_pct")));
			render_frames(out, st);
		}
	}
	if ((layer = json_object_get(dg, "os")) && json_is_object(layer)) {
		byte_buf_printf(out, "\nOS layer: against the healthy ranks' median\n");
		json_array_foreach(json_object_get(layer, "signals"), i, v)
			byte_buf_printf(out, "  %-28s %10.2f vs %10.2f %s%s\n",
					json_string_value(json_object_get(v, "signal")) ?: "",
					json_number_value(json_object_get(v, "straggler")),
					json_number_value(json_object_get(v, "healthy_median")),
					json_string_value(json_object_get(v, "unit")) ?: "",
					json_is_true(json_object_get(v, "implicated")) ? "  <==" : "");
		json_array_foreach(json_object_get(layer, "cpu_load"), i, v) {
			const char *vec;
			json_t *x;
			byte_buf_printf(out, "  CPU %" JSON_INTEGER_FORMAT ": %.0f%% busy, %.0f hard interrupts/s (%.2f ms/s); softirqs:",
					json_integer_value(json_object_get(v, "cpu")),
					json_number_value(json_object_get(v, "busy_pct")),
					json_number_value(json_object_get(v, "hardirq_per_s")),
					json_number_value(json_object_get(v, "hardirq_ms_per_s")));
			json_object_foreach(json_object_get(v, "softirqs"), vec, x)
				if (json_number_value(json_object_get(x, "ms_per_s")) >= 0.5)
					byte_buf_printf(out, " %s %.0f/s %.1f ms/s", vec,
							json_number_value(json_object_get(x, "per_s")),
							json_number_value(json_object_get(x, "ms_per_s")));
			byte_buf_printf(out, "\n");
		}
		json_array_foreach(json_object_get(layer, "irqs"), i, v)
			byte_buf_printf(out, "  IRQ %" JSON_INTEGER_FORMAT " %s on CPU %" JSON_INTEGER_FORMAT ": %.1f/s, %.2f ms/s\n",
					json_integer_value(json_object_get(v, "irq")),
					json_string_value(json_object_get(v, "name")) ?: "",
					json_integer_value(json_object_get(v, "cpu")),
					json_number_value(json_object_get(v, "per_s")),
					json_number_value(json_object_get(v, "ms_per_s")));
	}
	if (json_object_get(r, "functions")) {
		byte_buf_printf(out, "\niteration %.1f ms, baseline %.1f ms\n",
				json_number_value(json_object_get(r, "iteration_ms")),
				json_number_value(json_object_get(r, "baseline_iteration_ms")));
		json_array_foreach(json_object_get(r, "functions"), i, v)
			byte_buf_printf(out, "  %+6.2f pp  %s (%.2f%% vs %.2f%% in the baseline)\n",
					json_number_value(json_object_get(v, "delta_pp")),
					json_string_value(json_object_get(v, "function")) ?: "",
					json_number_value(json_object_get(v, "current_pct")),
					json_number_value(json_object_get(v, "baseline_pct")));
	}
	json_decref(r);
}

static int diagnosis_take(void *arg, const struct store_diagnosis *d)
{
	struct byte_buf *text = ((void **)arg)[1];

	if (text) {
		diagnosis_text(d, text);
		return byte_buf_error(text);
	}
	json_t **doc = ((void **)arg)[0];
	return (*doc = diagnosis_json(d, true)) ? 0 : -ENOMEM;
}

/* GET /api/v1/diagnoses?job=&from=&to=&status=open|all&limit= and /api/v1/diagnoses/{id}
 * [?format=json|text]. */
void api_diagnoses_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	static const char prefix[] = "/api/v1/diagnoses/";
	struct api *api = ctx;
	struct store_diagnosis_filter f = { 0 };
	char status[16] = "all", format[16] = "json";
	uint32_t limit = API_DEFAULT_DIAGNOSIS_LIMIT;
	bool has, has_limit;
	json_t *list = NULL;
	struct query q;
	int rc;

	if (!authorized(api, req, resp))
		return;
	if (strncmp(req->path, prefix, sizeof(prefix) - 1) == 0) {
		const char *id_text = req->path + sizeof(prefix) - 1;
		char *end;
		json_t *doc = NULL;
		void *args[2] = { &doc, NULL };
		errno = 0;
		long long id = strtoll(id_text, &end, 10);
		if (!id_text[0] || *end || errno || id <= 0) {
			http_response_error(resp, 400, "diagnosis id must be a positive integer");
			return;
		}
		if (!param(req, "format", format, sizeof(format), &has, resp))
			return;
		if (strcmp(format, "json") && strcmp(format, "text")) {
			http_response_error(resp, 400, "parameter 'format' must be json or text");
			return;
		}
		f.id = id;
		if (strcmp(format, "text") == 0) {
			resp->status = 200;
			snprintf(resp->content_type, sizeof(resp->content_type),
				 "text/plain; charset=utf-8");
			resp->body.len = 0;
			args[1] = &resp->body;
		}
		if ((rc = store_diagnoses_list(api->store, &f, 1, diagnosis_take, args))) {
			respond_store_error(resp, rc);
			json_decref(doc);
			return;
		}
		if (args[1] ? resp->body.len == 0 : !doc) {
			http_response_error(resp, 404, "no diagnosis %lld", id);
			return;
		}
		if (!args[1])
			render_json_respond(resp, 200, doc);
		return;
	}
	if (!query_parse(api, req, &q, resp) ||
	    !param(req, "status", status, sizeof(status), &has, resp) ||
	    !param_uint(req, "limit", 1, API_MAX_DIAGNOSIS_LIMIT, &limit, &has_limit, resp))
		return;
	if (q.f.node || q.f.has_pid || q.f.comm) {
		http_response_error(resp, 400, "parameters 'node', 'pid' and 'comm' do not apply here");
		return;
	}
	if (strcmp(status, "all") && strcmp(status, "open")) {
		http_response_error(resp, 400, "parameter 'status' must be open or all");
		return;
	}
	f.job = q.f.job;
	f.from_ms = q.f.from_ms;
	f.to_ms = q.f.to_ms;
	f.open_only = strcmp(status, "open") == 0;
	if (!(list = json_array())) {
		respond_store_error(resp, -ENOMEM);
		return;
	}
	if ((rc = store_diagnoses_list(api->store, &f, limit, diagnosis_list_add, list))) {
		json_decref(list);
		respond_store_error(resp, rc);
		return;
	}
	render_json_respond(resp, 200,
			    json_pack("{s:o,s:o,s:o}", "from", render_json_time(f.from_ms * 1000000),
				      "to", render_json_time(f.to_ms * 1000000), "diagnoses", list));
}

/* GET /api/v1/alerts?job=: what is firing now. */
void api_alerts_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	char job[PARAM_MAX];
	bool has;
	json_t *list;

	if (!authorized(api, req, resp) || !param(req, "job", job, sizeof(job), &has, resp))
		return;
	list = api->alerts ? alerts_active_json(api->alerts, has ? job : NULL) : json_array();
	if (!list) {
		respond_store_error(resp, -ENOMEM);
		return;
	}
	render_json_respond(resp, 200, json_pack("{s:o}", "alerts", list));
}

/* ---- per-job settings and baselines --------------------------------------------------------- */

static void job_settings_get(struct api *api, const char *job, struct http_response *resp)
{
	struct job_settings s;
	char *text = NULL, err[160];
	json_t *stored = NULL, *doc;
	int rc;

	job_settings_default(&s);
	if ((rc = store_job_settings_get(api->store, job, &text))) {
		respond_store_error(resp, rc);
		return;
	}
	if (text && (stored = json_loads(text, 0, NULL)))
		job_settings_apply(&s, stored, err, sizeof(err));
	free(text);
	doc = json_pack("{s:o,s:o,s:o}", "job", render_json_string(job), "settings",
			job_settings_json(&s), "overrides", stored ? stored : json_object());
	render_json_respond(resp, 200, doc);
}

/* PUT /api/v1/jobs/{job}/settings: a JSON object of overrides (replacing the previous ones;
 * {} restores the defaults). */
static void job_settings_put(struct api *api, const char *job, const struct http_request *req,
			     struct http_response *resp)
{
	struct job_settings s;
	json_error_t jerr;
	char err[160];
	json_t *obj = req->body ? json_loadb((const char *)req->body, req->body_len, 0, &jerr) : NULL;
	char *text = NULL;
	int rc;

	job_settings_default(&s);
	if (!obj) {
		http_response_error(resp, 400, "body must be a JSON object of settings");
		return;
	}
	if (job_settings_apply(&s, obj, err, sizeof(err))) {
		http_response_error(resp, 400, "%s", err);
		json_decref(obj);
		return;
	}
	text = json_object_size(obj) ? json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	if (json_object_size(obj) && !text)
		rc = -ENOMEM;
	else
		rc = store_job_settings_put(api->store, job, text, api->now_ms());
	free(text);
	json_decref(obj);
	if (rc)
		respond_store_error(resp, rc);
	else
		job_settings_get(api, job, resp);
}

static int baseline_json(void *arg, const struct store_baseline *b)
{
	json_t **doc = arg;

	*doc = json_pack("{s:o,s:o,s:o,s:f,s:I,s:s,s:o}", "job", render_json_string(b->job), "from",
			 render_json_time(b->from_ms * 1000000), "to",
			 render_json_time(b->to_ms * 1000000), "iteration_ms",
			 (double)b->iteration_ns / 1e6, "samples", (json_int_t)b->samples, "source",
			 b->source, "created", render_json_time(b->created_ms * 1000000));
	return *doc ? 0 : -ENOMEM;
}

/* GET: the job's baseline; POST ?from=&to=: the profile and iteration time of that range
 * become the baseline. */
static void job_baseline(struct api *api, const char *job, const struct http_request *req,
			 struct http_response *resp)
{
	struct byte_buf profile = { 0 };
	json_t *doc = NULL;
	struct straggler_report *strag = NULL;
	struct query q;
	int rc;

	if (strcmp(req->method, "POST") == 0) {
		struct diagnosis_ctx ctx;
		struct diagnosis_params p;
		struct diagnosis_scope scope = { .job = job };
		struct store_sample_filter f = { .job = job };
		if (!query_parse(api, req, &q, resp))
			return;
		api_diagnosis_ctx(api, &ctx);
		diagnosis_params_default(&p);
		p.diagnose = false;
		scope.from_ms = f.from_ms = q.f.from_ms;
		scope.to_ms = f.to_ms = q.f.to_ms;
		if ((rc = diagnosis_report_build(&ctx, &scope, &p, NULL, NULL, &strag)) ||
		    (rc = api_folded(api, &f, 20000, &profile)))
			goto cleanup;
		uint64_t samples = folded_samples(&profile);
		byte_buf_put_u8(&profile, 0);
		if ((rc = byte_buf_error(&profile)))
			goto cleanup;
		struct store_baseline b = {
			.job = job, .from_ms = f.from_ms, .to_ms = f.to_ms,
			.created_ms = api->now_ms(), .source = "api",
			.iteration_ns = (uint64_t)((double)strag->iteration_ns / 1e6 * 1e6),
			.profile = (const char *)profile.data,
			.samples = samples,
		};
		if (b.samples == 0) {
			http_response_error(resp, 409, "no CPU samples of job '%s' in that range", job);
			goto cleanup;
		}
		if ((rc = store_baseline_put(api->store, &b)))
			goto cleanup;
	}
	rc = store_baseline_get(api->store, job, baseline_json, &doc);
	if (rc == -ENOENT) {
		rc = 0;
		http_response_error(resp, 404, "job '%s' has no baseline", job);
		goto cleanup;
	}
	if (!rc)
		render_json_respond(resp, 200, doc);
cleanup:
	if (rc)
		respond_store_error(resp, rc);
	straggler_report_free(strag);
	byte_buf_free(&profile);
}

void api_job_put(void *ctx, const struct http_request *req, struct http_response *resp)
{
	api_job_get(ctx, req, resp);
}

/* ---- health and metrics -------------------------------------------------------------------- */

void api_healthz_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	int rc = store_ping(api->store);

	(void)req;
	if (rc)
		render_json_respond(resp, 503,
				    json_pack("{s:s,s:s}", "status", "unavailable", "error",
					      sysom_strerror(rc)));
	else
		render_json_respond(resp, 200, json_pack("{s:s}", "status", "ok"));
}

/* Renders the agents' counters: one family per counter id, one sample per node. */
struct counter_render {
	struct byte_buf *out;
	int last_counter;
	char family[96];
};

static int counter_write(void *arg, const struct store_counter_total *c)
{
	struct counter_render *r = arg;
	const char *labels[] = { "node", c->hostname, "node_id", c->node_id, NULL };

	if (c->counter != r->last_counter) {
		const char *name = sysom_counter_name(c->counter);
		char help[160];

		if (name)
			snprintf(r->family, sizeof(r->family), "sysom_agent_%s_total", name);
		else
			snprintf(r->family, sizeof(r->family), "sysom_agent_counter_%u_total",
				 c->counter);
		snprintf(help, sizeof(help), "Agent counter %s (id %u) summed over stored batches.",
			 name ? name : "without a name", c->counter);
		metrics_family_write(r->out, r->family, "counter", help);
		r->last_counter = c->counter;
	}
	metrics_sample_write(r->out, r->family, labels, (double)c->total);
	return byte_buf_error(r->out);
}

static void http_stats_write(struct byte_buf *out, const struct http_server_stats *st)
{
	static const struct {
		const char *name, *type, *help;
		size_t offset;
	} simple[] = {
		{ "sysom_http_connections_accepted_total", "counter", "Connections accepted.",
		  offsetof(struct http_server_stats, connections_accepted) },
		{ "sysom_http_connections_rejected_total", "counter",
		  "Connections refused over the connection limit.",
		  offsetof(struct http_server_stats, connections_rejected) },
		{ "sysom_http_connections_open", "gauge", "Connections open now.",
		  offsetof(struct http_server_stats, connections_open) },
		{ "sysom_http_requests_total", "counter", "Requests received.",
		  offsetof(struct http_server_stats, requests) },
		{ "sysom_http_received_bytes_total", "counter", "Bytes received.",
		  offsetof(struct http_server_stats, bytes_received) },
		{ "sysom_http_sent_bytes_total", "counter", "Bytes sent.",
		  offsetof(struct http_server_stats, bytes_sent) },
		{ "sysom_http_parse_errors_total", "counter", "Malformed requests.",
		  offsetof(struct http_server_stats, parse_errors) },
		{ "sysom_http_limit_rejections_total", "counter",
		  "Requests refused by the transport's limits (408, 413, 431, 503).",
		  offsetof(struct http_server_stats, limit_rejections) },
	};
	const uint64_t classes[] = { st->responses_2xx, st->responses_3xx, st->responses_4xx,
				     st->responses_5xx };
	static const char *const class_names[] = { "2xx", "3xx", "4xx", "5xx" };

	for (size_t i = 0; i < sizeof(simple) / sizeof(simple[0]); i++) {
		uint64_t v;

		memcpy(&v, (const char *)st + simple[i].offset, sizeof(v));
		metrics_family_write(out, simple[i].name, simple[i].type, simple[i].help);
		metrics_sample_write(out, simple[i].name, NULL, (double)v);
	}
	metrics_family_write(out, "sysom_http_responses_total", "counter",
			     "Responses sent, by status class.");
	for (size_t i = 0; i < 4; i++) {
		const char *labels[] = { "class", class_names[i], NULL };
		metrics_sample_write(out, "sysom_http_responses_total", labels, (double)classes[i]);
	}
}

/* The symbol repository's families: symbolization results, repository and upload gauges,
 * upstream fetches. */
static void symbols_metrics_write(struct api *api, const struct symbolizer_stats *ss,
				  struct byte_buf *out)
{
	static const char *const results[] = { "named", "no_symbols", "gap" };
	const uint64_t counts[] = { ss->repo_named, ss->repo_missing, ss->repo_gaps };
	uint64_t n;

	metrics_family_write(out, "sysom_symbolization_user_frames_total", "counter",
			     "User frames resolved through the symbol repository (cache misses), by"
			     " result: named, no_symbols (no symbol file: file+offset), gap (no"
			     " function covers the address: file+offset).");
	for (size_t i = 0; i < 3; i++) {
		const char *labels[] = { "result", results[i], NULL };
		metrics_sample_write(out, "sysom_symbolization_user_frames_total", labels,
				     (double)counts[i]);
	}
	metrics_family_write(out, "sysom_symbol_cache_invalidations_total", "counter",
			     "Build IDs whose cached frames were dropped because a file arrived.");
	metrics_sample_write(out, "sysom_symbol_cache_invalidations_total", NULL,
			     (double)ss->invalidations);
	if (api->symbols) {
		if (symbols_build_ids_count(api->symbols, &n) == 0) {
			metrics_family_write(out, "sysom_symbol_repository_build_ids", "gauge",
					     "Build IDs the symbol repository holds files of.");
			metrics_sample_write(out, "sysom_symbol_repository_build_ids", NULL, (double)n);
		}
		metrics_family_write(out, "sysom_symbol_upload_sessions", "gauge",
				     "Partial symbol file uploads in progress.");
		metrics_sample_write(out, "sysom_symbol_upload_sessions", NULL,
				     (double)symbols_sessions_count(api->symbols));
	}
	if (api->upstream) {
		struct upstream_stats us;
		upstream_stats_get(api->upstream, &us);
		static const char *const fetch_results[] = { "installed", "not_found", "failed",
							     "dropped" };
		const uint64_t fetch_counts[] = { us.fetched, us.not_found, us.failed, us.dropped };
		metrics_family_write(out, "sysom_debuginfod_upstream_total", "counter",
				     "Upstream debuginfod work: files installed, Build IDs upstream"
				     " lacked, failed fetches, requests dropped (queue full).");
		for (size_t i = 0; i < 4; i++) {
			const char *labels[] = { "result", fetch_results[i], NULL };
			metrics_sample_write(out, "sysom_debuginfod_upstream_total", labels,
					     (double)fetch_counts[i]);
		}
		metrics_family_write(out, "sysom_debuginfod_upstream_queued", "gauge",
				     "Build IDs waiting for an upstream fetch.");
		metrics_sample_write(out, "sysom_debuginfod_upstream_queued", NULL, (double)us.queued);
	}
}

void api_metrics_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct api *api = ctx;
	struct http_server *srv = atomic_load(&api->http);
	struct byte_buf out = { 0 };
	struct counter_render cr = { .out = &out, .last_counter = -1 };
	struct symbolizer_stats ss;
	uint64_t size;
	int rc;

	(void)req;
	{
		const char *labels[] = { "version", SYSOM_VERSION, NULL };
		metrics_family_write(&out, "sysom_build_info", "gauge", "Build of this sysom-server.");
		metrics_sample_write(&out, "sysom_build_info", labels, 1);
	}
	server_metrics_write(api->metrics, &out);
	if ((rc = store_size_get(api->store, &size)) == 0) {
		metrics_family_write(&out, "sysom_store_size_bytes", "gauge",
				     "Bytes the store occupies on disk.");
		metrics_sample_write(&out, "sysom_store_size_bytes", NULL, (double)size);
	}
	symbolizer_stats_get(api->sym, &ss);
	metrics_family_write(&out, "sysom_symbol_cache_lookups_total", "counter",
			     "Symbolizer cache lookups, by result.");
	{
		const char *hit[] = { "result", "hit", NULL }, *miss[] = { "result", "miss", NULL };
		metrics_sample_write(&out, "sysom_symbol_cache_lookups_total", hit, (double)ss.hits);
		metrics_sample_write(&out, "sysom_symbol_cache_lookups_total", miss, (double)ss.misses);
	}
	metrics_family_write(&out, "sysom_symbol_cache_entries", "gauge", "Frames cached.");
	metrics_sample_write(&out, "sysom_symbol_cache_entries", NULL, (double)ss.entries);
	symbols_metrics_write(api, &ss, &out);
	if (srv) {
		struct http_server_stats st;
		http_server_stats(srv, &st);
		http_stats_write(&out, &st);
	}
	rc = store_counters_list(api->store, counter_write, &cr);
	if (!rc)
		rc = byte_buf_error(&out);
	if (rc) {
		byte_buf_free(&out);
		respond_store_error(resp, rc);
		return;
	}
	http_response_text(resp, 200, "text/plain; version=0.0.4; charset=utf-8",
			   out.len ? (const char *)out.data : "", out.len);
	byte_buf_free(&out);
}

/* ---- routes -------------------------------------------------------------------------------- */

size_t api_routes_build(struct api *api, struct ingest *in, struct symbols *symbols,
			const struct api_route_limits *limits, struct http_route out[API_ROUTE_COUNT])
{
	size_t ingest_max = limits && limits->ingest_max_body ? limits->ingest_max_body
							      : INGEST_DEFAULT_MAX_BODY;
	size_t ksyms_max = limits && limits->ksyms_max_body ? limits->ksyms_max_body
							    : INGEST_DEFAULT_MAX_KSYMS_BODY;
	size_t chunk_max = limits && limits->symbols_max_chunk ? limits->symbols_max_chunk
							       : SYMBOLS_DEFAULT_MAX_CHUNK;
	const struct http_route routes[API_ROUTE_COUNT] = {
		{ "POST", INGEST_PATH, false, ingest_batch_post, in, ingest_max },
		{ "PUT", INGEST_KSYMS_PREFIX, true, ingest_ksyms_put, in, ksyms_max },
		{ "GET", INGEST_KSYMS_PREFIX, true, ingest_ksyms_get, in, 0 },
		{ "GET", "/api/v1/nodes", false, api_nodes_get, api, 0 },
		{ "GET", "/api/v1/processes", false, api_processes_get, api, 0 },
		{ "GET", "/api/v1/flamegraph", false, api_flamegraph_get, api, 0 },
		{ "GET", "/api/v1/flamegraph/diff", false, api_flamegraph_diff_get, api, 0 },
		{ "GET", "/api/v1/jobs", false, api_jobs_get, api, 0 },
		{ "GET", API_JOBS_PREFIX, true, api_job_get, api, 0 },
		{ "PUT", API_JOBS_PREFIX, true, api_job_put, api, API_MAX_SETTINGS_BODY },
		{ "POST", API_JOBS_PREFIX, true, api_job_put, api, 0 },
		{ "GET", "/api/v1/diagnoses", false, api_diagnoses_get, api, 0 },
		{ "GET", "/api/v1/diagnoses/", true, api_diagnoses_get, api, 0 },
		{ "GET", "/api/v1/alerts", false, api_alerts_get, api, 0 },
		{ "GET", "/healthz", false, api_healthz_get, api, 0 },
		{ "GET", "/metrics", false, api_metrics_get, api, 0 },
		/* The symbol repository (the last routes: left out without `symbols`). */
		{ "POST", SYMBOLS_MISSING_PATH, false, symbols_missing_post, symbols,
		  SYMBOLS_MISSING_MAX_BODY },
		{ "PUT", SYMBOLS_PREFIX, true, symbols_put, symbols, chunk_max },
		{ "GET", SYMBOLS_PREFIX, true, symbols_get, symbols, 0 },
		{ "GET", DEBUGINFOD_PREFIX, true, symbols_debuginfod_get, symbols, 0 },
	};

	memcpy(out, routes, sizeof(routes));
	return symbols ? API_ROUTE_COUNT : API_ROUTE_COUNT - 4;
}
