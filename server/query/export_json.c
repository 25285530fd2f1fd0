/* SPDX-License-Identifier: Apache-2.0 */
/* JSON exports written as text while walking (no document tree): speedscope profiles and
 * Chrome trace events of a job's NCCL calls. */
#include "server/query/export.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "common/array.h"
#include "common/hash.h"
#include "common/wire/wire.h"
#include "server/http/render.h"

void query_json_string_append(struct byte_buf *out, const char *s)
{
	struct byte_buf clean = { 0 };

	render_utf8_append(&clean, s ? s : "", s ? strlen(s) : 0);
	byte_buf_append(out, "\"", 1);
	for (size_t i = 0; i < clean.len; i++) {
		unsigned char c = clean.data[i];
		if (c == '"' || c == '\\')
			byte_buf_printf(out, "\\%c", c);
		else if (c < 0x20)
			byte_buf_printf(out, "\\u%04x", c);
		else
			byte_buf_append(out, &c, 1);
	}
	byte_buf_append(out, "\"", 1);
	if (byte_buf_error(&clean) && !out->error)
		out->error = byte_buf_error(&clean);
	byte_buf_free(&clean);
}

/* Appends ns as µs with three decimals (exact), e.g. -1.500 or 1234.005. */
static void micros_append(struct byte_buf *out, int64_t ns)
{
	uint64_t abs = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;

	byte_buf_printf(out, "%s%" PRIu64 ".%03u", ns < 0 ? "-" : "", abs / 1000,
			(unsigned)(abs % 1000));
}

/* ---- speedscope ---------------------------------------------------------------------------- */

struct ss_frame {
	char *name, *file;
	uint32_t line;
};

struct speedscope {
	struct ss_frame *frames;
	size_t nframes, cap;
	struct hash_index index;
	struct byte_buf *samples; /* "[i,j,k]" of the stack being walked (into the samples list) */
	/* Per resolved location (query_location id): where its frames' indexes start in pool,
	 * -1 until first seen; a location's frames are looked up by name once. */
	int64_t *location_start;
	uint32_t *pool;
	size_t npool, pool_cap;
};

/* Appends ",N" (faster than printf: a profile has millions of these). */
static void index_append(struct byte_buf *out, uint64_t v)
{
	char text[24];
	size_t at = sizeof(text);

	do {
		text[--at] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	text[--at] = ',';
	byte_buf_append(out, text + at, sizeof(text) - at);
}

struct ss_match {
	const struct speedscope *ss;
	const char *name, *file;
	uint32_t line;
};

static bool ss_frame_eq(const void *ctx, uint32_t idx)
{
	const struct ss_match *m = ctx;
	const struct ss_frame *f = &m->ss->frames[idx];

	return f->line == m->line && strcmp(f->name, m->name) == 0 && strcmp(f->file, m->file) == 0;
}

/* The index of frame (name, file, line) in the shared frames (added once); -ENOMEM. */
static int64_t ss_frame(struct speedscope *ss, const char *name, const char *file, uint32_t line)
{
	struct ss_match m = { ss, name ? name : "", file ? file : "", line };
	uint64_t h = sysom_hash_mix(sysom_hash64(m.name, strlen(m.name), 0),
				    sysom_hash64(m.file, strlen(m.file), line));
	uint32_t idx = hash_index_find(&ss->index, h, ss_frame_eq, &m);
	struct ss_frame *f;

	if (idx != HASH_INDEX_NONE)
		return idx;
	if (SYSOM_ARRAY_RESERVE(ss->frames, ss->cap, ss->nframes, 1024))
		return -ENOMEM;
	f = &ss->frames[ss->nframes];
	f->name = strdup(m.name);
	f->file = strdup(m.file);
	f->line = line;
	if (!f->name || !f->file || hash_index_insert(&ss->index, h, (uint32_t)ss->nframes)) {
		free(f->name);
		free(f->file);
		return -ENOMEM;
	}
	return (int64_t)ss->nframes++;
}

static int ss_location(void *arg, const struct query_location *loc)
{
	struct speedscope *ss = arg;
	bool cached = loc->id && ss->location_start[loc->id] >= 0;
	size_t start = cached ? (size_t)ss->location_start[loc->id] : ss->npool;

	if (!cached) {
		if (SYSOM_ARRAY_RESERVE(ss->pool, ss->pool_cap, ss->npool + loc->count, 4096))
			return -ENOMEM;
		for (uint32_t k = 0; k < loc->count; k++) {
			const struct symbolized_frame *f = &loc->frames[k];
			/* The source file when known, else the object the frame is in. */
			int64_t idx = ss_frame(ss, f->name, f->file ? f->file : f->object,
					       f->file ? f->line : 0);
			if (idx < 0)
				return (int)idx;
			ss->pool[start + k] = (uint32_t)idx;
		}
		/* Synthetic frames (id 0) differ per stack: their slots are reused. */
		if (loc->id) {
			ss->location_start[loc->id] = (int64_t)start;
			ss->npool += loc->count;
		}
	}
	for (uint32_t k = 0; k < loc->count; k++)
		index_append(ss->samples, ss->pool[start + k]);
	return byte_buf_error(ss->samples);
}

int query_speedscope_render(const struct query_profile *p, const struct query_export_info *info,
			    struct byte_buf *out)
{
	static const char *const kinds[] = { [QUERY_PROFILE_CPU] = "CPU samples",
					     [QUERY_PROFILE_GPU_LAUNCH] = "GPU kernel launches",
					     [QUERY_PROFILE_GPU_TIME] = "GPU kernel time",
					     [QUERY_PROFILE_OFFCPU] = "off-CPU time",
					     [QUERY_PROFILE_WALL] = "wall-clock time" };
	struct speedscope ss = { 0 };
	struct byte_buf samples = { 0 }, weights = { 0 }, name = { 0 };
	char from[40], to[40];
	uint64_t total = 0;
	int rc;

	ss.samples = &samples;
	if ((rc = hash_index_init(&ss.index, 1024)))
		goto cleanup;
	size_t nloc = query_profile_location_count(p) + 1;
	if (!(ss.location_start = malloc(nloc * sizeof(*ss.location_start)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	memset(ss.location_start, 0xff, nloc * sizeof(*ss.location_start)); /* -1 */
	for (size_t i = 0; i < query_profile_stack_count(p); i++) {
		struct query_profile_stack g;
		int64_t root;

		query_profile_stack_get(p, i, &g);
		/* The thread name as the root frame, as in folded output. */
		if ((root = ss_frame(&ss, *g.comm ? g.comm : "[unknown]", "", 0)) < 0) {
			rc = (int)root;
			goto cleanup;
		}
		byte_buf_printf(&samples, "%s", i ? "," : "");
		byte_buf_printf(&samples, "[%" PRId64, root);
		if ((rc = query_profile_locations(p, i, ss_location, &ss)))
			goto cleanup;
		byte_buf_append(&samples, "]", 1);
		byte_buf_printf(&weights, "%s%" PRIu64, i ? "," : "", g.count);
		total += g.count;
	}
	if ((rc = byte_buf_error(&samples)) || (rc = byte_buf_error(&weights)))
		goto cleanup;
	render_time_rfc3339(info->from_ns, from, sizeof(from));
	render_time_rfc3339(info->to_ns, to, sizeof(to));
	byte_buf_printf(&name, "sysom %s %s to %s", kinds[info->kind], from, to);
	byte_buf_append(&name, "", 1);
	if ((rc = byte_buf_error(&name)))
		goto cleanup;
	byte_buf_printf(out, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\","
			     "\"exporter\":\"sysom-server %s\",\"name\":", SYSOM_VERSION);
	query_json_string_append(out, (const char *)name.data);
	byte_buf_printf(out, ",\"activeProfileIndex\":0,\"shared\":{\"frames\":[");
	for (size_t i = 0; i < ss.nframes; i++) {
		byte_buf_printf(out, "%s{\"name\":", i ? "," : "");
		query_json_string_append(out, ss.frames[i].name);
		if (*ss.frames[i].file) {
			byte_buf_printf(out, ",\"file\":");
			query_json_string_append(out, ss.frames[i].file);
		}
		if (ss.frames[i].line)
			byte_buf_printf(out, ",\"line\":%u", ss.frames[i].line);
		byte_buf_append(out, "}", 1);
	}
	byte_buf_printf(out, "]},\"profiles\":[{\"type\":\"sampled\",\"name\":");
	query_json_string_append(out, (const char *)name.data);
	byte_buf_printf(out, ",\"unit\":\"%s\",\"startValue\":0,\"endValue\":%" PRIu64
			     ",\"samples\":[",
			info->kind == QUERY_PROFILE_GPU_TIME ? "nanoseconds"
			: info->kind == QUERY_PROFILE_OFFCPU || info->kind == QUERY_PROFILE_WALL
				? "microseconds"
				: "none",
			total);
	byte_buf_append(out, samples.data, samples.len);
	byte_buf_printf(out, "],\"weights\":[");
	byte_buf_append(out, weights.data, weights.len);
	byte_buf_printf(out, "]}]}\n");
	rc = byte_buf_error(out);
cleanup:
	for (size_t i = 0; i < ss.nframes; i++) {
		free(ss.frames[i].name);
		free(ss.frames[i].file);
	}
	free(ss.frames);
	free(ss.location_start);
	free(ss.pool);
	hash_index_free(&ss.index);
	byte_buf_free(&samples);
	byte_buf_free(&weights);
	byte_buf_free(&name);
	return rc;
}

/* ---- Chrome trace events ------------------------------------------------------------------- */

/* A traced process (Chrome "pid"): a (node, pid) of the job. */
struct trace_process {
	char node_id[2 * SYSOM_NODE_ID_SIZE + 1];
	uint32_t pid;
	int32_t job_rank; /* -1 unknown */
	char *hostname;
	bool named;       /* its metadata events are written */
};

struct query_trace {
	struct byte_buf body; /* the document so far: its head, then the events */
	bool has_events;      /* an event (or metadata event) is written: the next takes a comma */
	char *job;
	int64_t from_ns, to_ns;
	uint32_t max_events, events;
	bool truncated;
	struct trace_process *procs;
	size_t nprocs, procs_cap;
	struct hash_index proc_index;
	uint64_t *comms; /* communicator keys by thread id - 1 */
	size_t ncomms, comms_cap;
	struct hash_index comm_index;
	struct hash_index thread_index; /* (process, communicator) named already */
	uint64_t *threads; /* (process index << 32 | comm index) of the threads named */
	size_t nthreads, threads_cap;
};

int query_trace_new(const char *job, int64_t from_ns, int64_t to_ns, uint32_t max_events,
		    struct query_trace **out)
{
	struct query_trace *t = calloc(1, sizeof(*t));
	int rc = -ENOMEM;

	if (!t || !(t->job = strdup(job)))
		goto cleanup;
	t->from_ns = from_ns;
	t->to_ns = to_ns;
	t->max_events = max_events;
	byte_buf_printf(&t->body, "{\"traceEvents\":[");
	if ((rc = byte_buf_error(&t->body)))
		goto cleanup;
	if ((rc = hash_index_init(&t->proc_index, 64)) || (rc = hash_index_init(&t->comm_index, 16)) ||
	    (rc = hash_index_init(&t->thread_index, 64)))
		goto cleanup;
	*out = t;
	return 0;
cleanup:
	query_trace_free(t);
	return rc;
}

void query_trace_free(struct query_trace *t)
{
	if (!t)
		return;
	byte_buf_free(&t->body);
	free(t->job);
	for (size_t i = 0; i < t->nprocs; i++)
		free(t->procs[i].hostname);
	free(t->procs);
	free(t->comms);
	free(t->threads);
	hash_index_free(&t->proc_index);
	hash_index_free(&t->comm_index);
	hash_index_free(&t->thread_index);
	free(t);
}

struct proc_match {
	const struct query_trace *t;
	const char *node_id;
	uint32_t pid;
};

static bool proc_eq(const void *ctx, uint32_t idx)
{
	const struct proc_match *m = ctx;
	const struct trace_process *p = &m->t->procs[idx];

	return p->pid == m->pid && strcmp(p->node_id, m->node_id) == 0;
}

static uint64_t proc_hash(const char *node_id, uint32_t pid)
{
	return sysom_hash_mix(sysom_hash64(node_id, strlen(node_id), 0), pid);
}

/* Writes a comma before every event but the first. */
static void event_start(struct query_trace *t)
{
	if (t->has_events)
		byte_buf_append(&t->body, ",", 1);
	t->has_events = true;
}

/* The index of process (node, pid), added (not yet named) when new; -ENOMEM. */
static int64_t process_index(struct query_trace *t, const char *node_id, uint32_t pid,
			     int32_t job_rank, const char *hostname)
{
	struct proc_match m = { t, node_id, pid };
	uint64_t h = proc_hash(node_id, pid);
	uint32_t idx = hash_index_find(&t->proc_index, h, proc_eq, &m);
	struct trace_process *p;

	if (idx != HASH_INDEX_NONE)
		return idx;
	if (SYSOM_ARRAY_RESERVE(t->procs, t->procs_cap, t->nprocs, 64))
		return -ENOMEM;
	p = &t->procs[t->nprocs];
	memset(p, 0, sizeof(*p));
	snprintf(p->node_id, sizeof(p->node_id), "%s", node_id);
	p->pid = pid;
	p->job_rank = job_rank;
	if (!(p->hostname = strdup(hostname ? hostname : "")) ||
	    hash_index_insert(&t->proc_index, h, (uint32_t)t->nprocs)) {
		free(p->hostname);
		return -ENOMEM;
	}
	return (int64_t)t->nprocs++;
}

int query_trace_process_add(struct query_trace *t, const char *node_id, uint32_t pid,
			    int32_t job_rank, const char *hostname)
{
	int64_t idx = process_index(t, node_id, pid, job_rank, hostname);

	return idx < 0 ? (int)idx : 0;
}

/* The Chrome pid (index + 1) of the call's process; names it on first use. -ENOMEM. */
static int64_t trace_process(struct query_trace *t, const struct store_collective_call *c)
{
	int64_t idx = process_index(t, c->node_id, c->pid, -1, c->hostname);
	struct trace_process *p;
	struct byte_buf name = { 0 };
	int rc;

	if (idx < 0)
		return idx;
	p = &t->procs[idx];
	if (p->named)
		return idx + 1;
	if (p->job_rank >= 0)
		byte_buf_printf(&name, "rank %d (%s pid %u)", p->job_rank, p->hostname, p->pid);
	else
		byte_buf_printf(&name, "rank ? (%s pid %u)", p->hostname, p->pid);
	byte_buf_append(&name, "", 1);
	event_start(t);
	byte_buf_printf(&t->body, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%" PRId64
				  ",\"tid\":0,\"args\":{\"name\":", idx + 1);
	query_json_string_append(&t->body, name.data ? (const char *)name.data : "");
	byte_buf_printf(&t->body, "}},{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%" PRId64
				  ",\"tid\":0,\"args\":{\"sort_index\":%d}}",
			idx + 1, p->job_rank >= 0 ? p->job_rank : INT32_MAX);
	rc = byte_buf_error(&name);
	byte_buf_free(&name);
	p->named = true;
	return rc ? rc : idx + 1;
}

/* Appends ",\"name\":v" with v null when negative (unknown). */
static void int_or_null(struct byte_buf *out, const char *name, int64_t v)
{
	if (v < 0)
		byte_buf_printf(out, ",\"%s\":null", name);
	else
		byte_buf_printf(out, ",\"%s\":%" PRId64, name, v);
}

struct key_match {
	const uint64_t *keys;
	uint64_t key;
};

static bool key_eq(const void *ctx, uint32_t idx)
{
	const struct key_match *m = ctx;

	return m->keys[idx] == m->key;
}

/* Index of `key` in keys[] (added once); -ENOMEM. */
static int64_t key_index(uint64_t **keys, size_t *n, size_t *cap, struct hash_index *index,
			 uint64_t key, bool *added)
{
	struct key_match m = { *keys, key };
	uint64_t h = sysom_hash_mix(key, 0x7472616365ull);
	uint32_t idx = hash_index_find(index, h, key_eq, &m);

	*added = false;
	if (idx != HASH_INDEX_NONE)
		return idx;
	if (SYSOM_ARRAY_RESERVE(*keys, *cap, *n, 64))
		return -ENOMEM;
	(*keys)[*n] = key;
	if (hash_index_insert(index, h, (uint32_t)*n))
		return -ENOMEM;
	*added = true;
	return (int64_t)(*n)++;
}

int query_trace_add(struct query_trace *t, const struct store_collective_call *c)
{
	const char *op = sysom_nccl_op_name(c->op);
	int64_t pid, comm, thread;
	bool added;

	if (t->events >= t->max_events) {
		t->truncated = true;
		return -ENOSPC;
	}
	if ((pid = trace_process(t, c)) < 0)
		return (int)pid;
	/* A thread per communicator, the same tid for a communicator in every process. */
	if ((comm = key_index(&t->comms, &t->ncomms, &t->comms_cap, &t->comm_index, c->comm_key,
			      &added)) < 0 ||
	    (thread = key_index(&t->threads, &t->nthreads, &t->threads_cap, &t->thread_index,
				(uint64_t)pid << 32 | (uint64_t)comm, &added)) < 0)
		return -ENOMEM;
	if (added) {
		event_start(t);
		byte_buf_printf(&t->body, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%" PRId64
					  ",\"tid\":%" PRId64 ",\"args\":{\"name\":\"comm %016" PRIx64
					  "\"}}", pid, comm + 1, c->comm_key);
	}
	event_start(t);
	byte_buf_printf(&t->body, "{\"name\":\"%s\",\"cat\":\"nccl\",\"ph\":\"X\",\"ts\":",
			op ? op : "unknown");
	micros_append(&t->body, c->entry_ns - t->from_ns);
	byte_buf_printf(&t->body, ",\"dur\":");
	micros_append(&t->body, c->exit_ns > c->entry_ns ? c->exit_ns - c->entry_ns : 0);
	byte_buf_printf(&t->body, ",\"pid\":%" PRId64 ",\"tid\":%" PRId64 ",\"args\":{\"op\":\"%s\","
				  "\"comm\":\"%016" PRIx64 "\",\"seq\":%" PRIu64 ",\"instance\":\"%016"
				  PRIx64 "/%s/%" PRIu64 "\",\"bytes\":%" PRIu64 ",\"count\":%" PRIu64
				  ",\"result\":%d,\"pid\":%u,\"tid\":%u,\"entry_delay_ns\":%" PRId64,
			pid, comm + 1, op ? op : "unknown", c->comm_key, c->seq, c->comm_key,
			op ? op : "unknown", c->seq, c->bytes, c->count, c->result, c->pid, c->tid,
			c->entry_ns - c->first_entry_ns);
	int_or_null(&t->body, "rank", c->rank);
	int_or_null(&t->body, "nranks", c->nranks);
	int_or_null(&t->body, "peer", c->peer);
	byte_buf_append(&t->body, "}}", 2);
	t->events++;
	return byte_buf_error(&t->body);
}

void query_trace_truncated_set(struct query_trace *t)
{
	t->truncated = true;
}

uint32_t query_trace_events(const struct query_trace *t)
{
	return t->events;
}

int query_trace_finish(struct query_trace *t, struct byte_buf *out)
{
	char from[40], to[40];
	struct byte_buf *doc = &t->body;
	int rc;

	render_time_rfc3339(t->from_ns, from, sizeof(from));
	render_time_rfc3339(t->to_ns, to, sizeof(to));
	byte_buf_printf(doc, "],\"displayTimeUnit\":\"ns\",\"otherData\":{\"job\":");
	query_json_string_append(doc, t->job);
	byte_buf_printf(doc, ",\"from\":\"%s\",\"to\":\"%s\",\"time_origin_ns\":%" PRId64
			     ",\"events\":%u,\"max_events\":%u,\"truncated\":%s,"
			     "\"exporter\":\"sysom-server %s\"}}\n",
			from, to, t->from_ns, t->events, t->max_events,
			t->truncated ? "true" : "false", SYSOM_VERSION);
	if ((rc = byte_buf_error(doc)))
		return rc;
	if (out->len == 0 && !out->error) {
		/* Hand the document over rather than copy it (it can be tens of MiB). */
		size_t limit = out->limit;
		byte_buf_free(out);
		*out = *doc;
		out->limit = limit;
		memset(doc, 0, sizeof(*doc));
		return 0;
	}
	byte_buf_append(out, doc->data, doc->len);
	return byte_buf_error(out);
}
