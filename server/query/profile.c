/* SPDX-License-Identifier: Apache-2.0 */
/* The symbolised-profile service: aggregation from the store, frame resolution, folding. */
#include "server/query/profile.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/hash.h"
#include "server/http/render.h"
#include "server/query/folded.h"

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

/* A frame to resolve: which object and offset, in which kind of stack, leaf or not. */
struct frame_key {
	int64_t object;
	uint64_t offset;
	uint8_t stack_kind;
	bool leaf; /* frame 0 of its stack (others are return addresses) */
};

/* Everything one profile collects; freed by flame_free. */
struct query_profile {
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

static void flame_free(struct query_profile *fl)
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
static struct group *group_add(struct query_profile *fl, const char *comm)
{
	if (SYSOM_ARRAY_RESERVE(fl->groups, fl->groups_cap, fl->ngroups, 256))
		return NULL;
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
static int gpu_group_add(struct query_profile *fl, const char *comm, int64_t pid, uint64_t processes,
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
	const struct query_profile *fl;
	int64_t id;
};

static bool stack_eq(const void *ctx, uint32_t idx)
{
	const struct stack_match *m = ctx;

	return m->fl->stacks[idx]->id == m->id;
}

/* The loaded stack with this id (loading it once), or NULL with *rc set. */
static const struct store_stack *flame_stack(const struct query_profiles *qp, struct query_profile *fl, int64_t id, int *rc)
{
	struct stack_match m = { fl, id };
	uint64_t h = sysom_hash_mix((uint64_t)id, 0);
	uint32_t idx = hash_index_find(&fl->stack_index, h, stack_eq, &m);
	struct store_stack *stk;

	if (idx != HASH_INDEX_NONE)
		return fl->stacks[idx];
	if ((*rc = store_stack_get(qp->store, id, &stk)))
		return NULL;
	/* Every group has at most two stacks: ngroups * 2 bounds the array. */
	fl->stacks[fl->nstacks++] = stk;
	if ((*rc = hash_index_insert(&fl->stack_index, h, (uint32_t)(fl->nstacks - 1))))
		return NULL;
	return stk;
}

struct frame_match {
	const struct query_profile *fl;
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
static int flame_frame(const struct query_profiles *qp, struct query_profile *fl, const struct frame_key *key)
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
	rc = symbolizer_location_resolve(qp->sym, key->stack_kind, key->object, key->offset,
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

/* Aggregates, loads the stacks and resolves every distinct frame. */
static int flame_build(const struct query_profiles *qp, const struct store_sample_filter *f, uint32_t limit,
		       enum query_profile_kind kind, struct query_profile *fl)
{
	int rc;

	switch (kind) {
	case QUERY_PROFILE_GPU_LAUNCH:
		rc = store_launches_aggregate(qp->store, f, limit, launch_collect, fl, &fl->total);
		break;
	case QUERY_PROFILE_GPU_TIME:
		rc = store_gpu_time_aggregate(qp->store, f, limit, gpu_time_collect, fl, &fl->total);
		break;
	case QUERY_PROFILE_OFFCPU:
		rc = store_offcpu_aggregate(qp->store, f, limit, group_collect, fl, &fl->total);
		break;
	case QUERY_PROFILE_WALL:
		rc = store_wall_aggregate(qp->store, f, limit, group_collect, fl, &fl->total);
		break;
	default:
		rc = store_stacks_aggregate(qp->store, f, limit, group_collect, fl, &fl->total);
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
			if (!(stk = flame_stack(qp, fl, fl->groups[i].stack[part], &rc)))
				return rc;
			for (uint16_t j = 0; j < stk->nframes; j++) {
				struct frame_key key = { stk->frames[j].object, stk->frames[j].offset,
							 stk->kind, j == 0 };
				if ((rc = flame_frame(qp, fl, &key)))
					return rc;
			}
		}
	}
	return 0;
}


/* The synthetic frames of a GPU group: "[no launch stack]" when no traced launch explains
 * the time, then the kernel "[gpu] name" as the leaf. */
static int gpu_locations(const struct group *g, query_location_fn emit, void *arg)
{
	struct byte_buf name = { 0 };
	struct symbolized_frame f = { .kind = SYMBOLIZED_GPU };
	struct query_location loc = { 0, &f, 1, false };
	int rc;

	if (g->no_launch) {
		struct symbolized_frame none = { .kind = SYMBOLIZED_GPU,
						 .name = (char *)"[no launch stack]" };
		struct query_location nloc = { 0, &none, 1, false };
		if ((rc = emit(arg, &nloc)))
			return rc;
	}
	byte_buf_printf(&name, "[gpu] %s", g->gpu);
	byte_buf_append(&name, "", 1);
	if ((rc = byte_buf_error(&name)))
		goto cleanup;
	f.name = (char *)name.data;
	rc = emit(arg, &loc);
cleanup:
	byte_buf_free(&name);
	return rc;
}

static int group_stack_locations(const struct query_profile *fl, const struct group *g,
				 query_location_fn emit, void *arg)
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
			struct query_location loc = { 0, &err, 1, part == 1 };
			rc = emit(arg, &loc);
			symbolized_frame_release(&err);
			if (rc)
				return rc;
		}
		for (int j = stk->nframes - 1; j >= 0; j--) {
			struct frame_key key = { stk->frames[j].object, stk->frames[j].offset,
						 stk->kind, j == 0 };
			struct frame_match fm = { fl, &key };
			uint32_t idx = hash_index_find(&fl->frame_index, frame_hash(&key), frame_eq, &fm);
			/* A frame with inlined calls: the function, then the calls, root first. */
			struct query_location loc = { idx + 1, fl->frames[idx].frames,
						      fl->frames[idx].count, part == 1 };
			if ((rc = emit(arg, &loc)))
				return rc;
		}
	}
	return 0;
}

static int group_locations(const struct query_profile *fl, const struct group *g,
			   query_location_fn emit, void *arg)
{
	int rc;

	if ((rc = group_stack_locations(fl, g, emit, arg)))
		return rc;
	return g->gpu ? gpu_locations(g, emit, arg) : 0;
}

/* query_profile_frames over group_locations: each location's frames one by one. */
struct frames_walk {
	query_frame_fn emit;
	void *arg;
};

static int location_frames(void *arg, const struct query_location *loc)
{
	const struct frames_walk *w = arg;
	int rc;

	for (uint32_t k = 0; k < loc->count; k++)
		if ((rc = w->emit(w->arg, &loc->frames[k], loc->kernel_part)))
			return rc;
	return 0;
}

static int group_frames(const struct query_profile *fl, const struct group *g, query_frame_fn emit,
			void *arg)
{
	struct frames_walk w = { emit, arg };

	return group_locations(fl, g, location_frames, &w);
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
	else if (f->jit)
		byte_buf_append(line, "_[j]", 4); /* ... and of JIT-compiled ones */
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

static int folded_render(const struct query_profile *fl, struct byte_buf *out)
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

int query_profile_build(const struct query_profiles *qp, const struct store_sample_filter *f,
			uint32_t limit, enum query_profile_kind kind, struct query_profile **out)
{
	struct query_profile *fl = calloc(1, sizeof(*fl));
	int rc;

	if (!fl)
		return -ENOMEM;
	if ((rc = flame_build(qp, f, limit, kind, fl))) {
		query_profile_free(fl);
		return rc;
	}
	*out = fl;
	return 0;
}

void query_profile_free(struct query_profile *p)
{
	if (!p)
		return;
	flame_free(p);
	free(p);
}

uint64_t query_profile_total(const struct query_profile *p)
{
	return p->total;
}

size_t query_profile_stack_count(const struct query_profile *p)
{
	return p->ngroups;
}

void query_profile_stack_get(const struct query_profile *p, size_t i,
			     struct query_profile_stack *out)
{
	const struct group *g = &p->groups[i];

	*out = (struct query_profile_stack){ g->comm, g->pid, g->processes, g->count };
}

int query_profile_frames(const struct query_profile *p, size_t i, query_frame_fn emit, void *arg)
{
	return group_frames(p, &p->groups[i], emit, arg);
}

int query_profile_locations(const struct query_profile *p, size_t i, query_location_fn emit,
			    void *arg)
{
	return group_locations(p, &p->groups[i], emit, arg);
}

size_t query_profile_location_count(const struct query_profile *p)
{
	return p->nframes;
}

int query_profile_folded(const struct query_profile *p, struct byte_buf *out)
{
	return folded_render(p, out);
}

int query_folded(const struct query_profiles *qp, const struct store_sample_filter *f,
		 uint32_t limit, enum query_profile_kind kind, struct byte_buf *out)
{
	struct query_profile *p;
	int rc = query_profile_build(qp, f, limit, kind, &p);

	if (rc)
		return rc;
	rc = folded_render(p, out);
	query_profile_free(p);
	return rc;
}

int query_diff_folded(const struct query_profiles *qp, const struct store_sample_filter *base,
		      int32_t a, int32_t b, uint32_t limit, struct byte_buf *out)
{
	const int32_t ranks[2] = { a, b };
	struct byte_buf folded[2] = { { 0 }, { 0 } };
	int rc = 0;

	for (int side = 0; side < 2 && !rc; side++) {
		struct store_sample_filter f = *base;

		f.has_rank = true;
		f.rank = ranks[side];
		rc = query_folded(qp, &f, limit, QUERY_PROFILE_CPU, &folded[side]);
	}
	if (!rc)
		rc = folded_merge(&folded[0], &folded[1], out);
	byte_buf_free(&folded[0]);
	byte_buf_free(&folded[1]);
	return rc;
}
