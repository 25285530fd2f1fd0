/* SPDX-License-Identifier: Apache-2.0 */
/* Central symbolization with an LRU cache keyed by (store object id, offset). */
#include "server/symbolize.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/elf_buildid.h"
#include "common/hash.h"

struct entry {
	int64_t object;
	uint64_t offset;
	struct symbolized_frame frame;
	size_t bytes;
	struct entry *chain;            /* next in the hash bucket */
	struct entry *newer, *older;    /* LRU list */
};

struct symbolizer {
	struct store *store;
	size_t max_entries, max_bytes;
	pthread_mutex_t lock;
	struct entry **buckets;
	size_t nbuckets; /* power of two */
	struct entry *newest, *oldest;
	struct symbolizer_stats stats;
};

struct symbolizer *symbolizer_new(struct store *store, size_t max_entries, size_t max_bytes)
{
	struct symbolizer *sym = calloc(1, sizeof(*sym));

	if (!sym)
		return NULL;
	sym->store = store;
	sym->max_entries = max_entries ? max_entries : SYMBOLIZER_DEFAULT_ENTRIES;
	sym->max_bytes = max_bytes ? max_bytes : SYMBOLIZER_DEFAULT_BYTES;
	sym->nbuckets = 64;
	while (sym->nbuckets < sym->max_entries && sym->nbuckets < (1u << 24))
		sym->nbuckets *= 2;
	sym->buckets = calloc(sym->nbuckets, sizeof(*sym->buckets));
	if (!sym->buckets) {
		free(sym);
		return NULL;
	}
	pthread_mutex_init(&sym->lock, NULL);
	return sym;
}

void symbolized_frame_release(struct symbolized_frame *f)
{
	if (!f)
		return;
	free(f->name);
	free(f->object);
	f->name = f->object = NULL;
}

static void entry_free(struct entry *e)
{
	symbolized_frame_release(&e->frame);
	free(e);
}

static void clear_locked(struct symbolizer *sym)
{
	struct entry *e = sym->newest;

	while (e) {
		struct entry *next = e->older;
		entry_free(e);
		e = next;
	}
	memset(sym->buckets, 0, sym->nbuckets * sizeof(*sym->buckets));
	sym->newest = sym->oldest = NULL;
	sym->stats.entries = sym->stats.bytes = 0;
}

void symbolizer_free(struct symbolizer *sym)
{
	if (!sym)
		return;
	clear_locked(sym);
	free(sym->buckets);
	pthread_mutex_destroy(&sym->lock);
	free(sym);
}

void symbolizer_cache_clear(struct symbolizer *sym)
{
	pthread_mutex_lock(&sym->lock);
	clear_locked(sym);
	pthread_mutex_unlock(&sym->lock);
}

void symbolizer_stats_get(struct symbolizer *sym, struct symbolizer_stats *out)
{
	pthread_mutex_lock(&sym->lock);
	*out = sym->stats;
	pthread_mutex_unlock(&sym->lock);
}

static size_t bucket_of(const struct symbolizer *sym, int64_t object, uint64_t offset)
{
	return (size_t)(sysom_hash_mix((uint64_t)object, offset) & (sym->nbuckets - 1));
}

static void lru_unlink(struct symbolizer *sym, struct entry *e)
{
	if (e->newer)
		e->newer->older = e->older;
	else
		sym->newest = e->older;
	if (e->older)
		e->older->newer = e->newer;
	else
		sym->oldest = e->newer;
	e->newer = e->older = NULL;
}

static void lru_push(struct symbolizer *sym, struct entry *e)
{
	e->older = sym->newest;
	e->newer = NULL;
	if (sym->newest)
		sym->newest->newer = e;
	sym->newest = e;
	if (!sym->oldest)
		sym->oldest = e;
}

static void evict_oldest(struct symbolizer *sym)
{
	struct entry *e = sym->oldest;
	struct entry **link = &sym->buckets[bucket_of(sym, e->object, e->offset)];

	while (*link != e)
		link = &(*link)->chain;
	*link = e->chain;
	lru_unlink(sym, e);
	sym->stats.entries--;
	sym->stats.bytes -= e->bytes;
	entry_free(e);
}

static int frame_copy(const struct symbolized_frame *from, struct symbolized_frame *to)
{
	struct symbolized_frame f = *from;

	f.name = strdup(from->name);
	f.object = strdup(from->object);
	if (!f.name || !f.object) {
		symbolized_frame_release(&f);
		return -ENOMEM;
	}
	*to = f;
	return 0;
}

/* Copies the cached frame out; 0, -ENOENT (not cached) or -ENOMEM. */
static int cache_lookup(struct symbolizer *sym, int64_t object, uint64_t offset,
			struct symbolized_frame *out)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&sym->lock);
	for (struct entry *e = sym->buckets[bucket_of(sym, object, offset)]; e; e = e->chain) {
		if (e->object == object && e->offset == offset) {
			lru_unlink(sym, e);
			lru_push(sym, e);
			rc = frame_copy(&e->frame, out);
			break;
		}
	}
	if (rc == -ENOENT)
		sym->stats.misses++;
	else if (rc == 0)
		sym->stats.hits++;
	pthread_mutex_unlock(&sym->lock);
	return rc;
}

/* Adds a copy of a freshly resolved frame (a concurrent resolver may have added it first). */
static void cache_insert(struct symbolizer *sym, int64_t object, uint64_t offset,
			 const struct symbolized_frame *f)
{
	struct entry *e = calloc(1, sizeof(*e));
	size_t b;

	if (!e || frame_copy(f, &e->frame)) {
		free(e);
		return; /* the cache is an optimisation: out of memory just skips it */
	}
	e->object = object;
	e->offset = offset;
	e->bytes = sizeof(*e) + strlen(f->name) + strlen(f->object) + 2;
	pthread_mutex_lock(&sym->lock);
	b = bucket_of(sym, object, offset);
	for (struct entry *o = sym->buckets[b]; o; o = o->chain) {
		if (o->object == object && o->offset == offset) {
			pthread_mutex_unlock(&sym->lock);
			entry_free(e);
			return;
		}
	}
	e->chain = sym->buckets[b];
	sym->buckets[b] = e;
	lru_push(sym, e);
	sym->stats.entries++;
	sym->stats.bytes += e->bytes;
	while (sym->stats.entries > sym->max_entries || sym->stats.bytes > sym->max_bytes)
		evict_oldest(sym);
	pthread_mutex_unlock(&sym->lock);
}

static const char *basename_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

/* Resolves a kernel or module frame against the symbol table of the object's build ID. */
static int resolve_kernel(struct symbolizer *sym, const struct store_object *o, uint64_t offset,
			  struct symbolized_frame *f)
{
	struct store_ksym_range r = { 0 };
	int rc = store_ksym_range_get(sym->store, o->id.bytes, o->id.len, offset, &r);

	if (rc && rc != -ENOENT)
		return rc;
	/* The next symbol's start bounds the floor symbol; past the last one nothing does. */
	if (!rc && r.has_floor && r.has_next) {
		f->name = r.floor_name;
		r.floor_name = NULL;
		f->has_symbol_offset = true;
		f->symbol_offset = offset - r.floor;
	} else if (asprintf(&f->name, "[kernel]+0x%" PRIx64, offset) < 0) {
		f->name = NULL;
	}
	store_ksym_range_release(&r);
	return f->name ? 0 : -ENOMEM;
}

/* Resolves a frame from the store (cache miss). */
static int resolve(struct symbolizer *sym, int64_t object, uint64_t offset,
		   struct symbolized_frame *out)
{
	struct symbolized_frame f = { .offset = offset };
	struct store_object o = { 0 };
	int rc = store_object_get(sym->store, object, &o);

	if (rc)
		return rc;
	if (o.id.len)
		sysom_build_id_hex(&o.id, f.build_id, sizeof(f.build_id));
	f.object = strdup(o.name);
	if (!f.object) {
		rc = -ENOMEM;
		goto cleanup;
	}
	switch (o.id.kind) {
	case SYSOM_OBJECT_KERNEL:
	case SYSOM_OBJECT_KMODULE:
		f.kind = SYMBOLIZED_KERNEL;
		rc = resolve_kernel(sym, &o, offset, &f);
		goto cleanup;
	case SYSOM_OBJECT_ANON:
		rc = asprintf(&f.name, "[anon]+0x%" PRIx64, offset);
		break;
	case SYSOM_OBJECT_UNKNOWN:
		rc = asprintf(&f.name, "[unknown]+0x%" PRIx64, offset);
		break;
	default: {
		/* ELF or content-hashed file: the symbol repository will name these. */
		char shortid[17];
		const char *base = basename_of(o.name);
		if (!*base) {
			snprintf(shortid, sizeof(shortid), "%.16s", f.build_id);
			base = shortid;
		}
		rc = asprintf(&f.name, "%s+0x%" PRIx64, base, offset);
		break;
	}
	}
	if (rc < 0) {
		f.name = NULL;
		rc = -ENOMEM;
	} else {
		rc = 0;
	}
cleanup:
	store_object_release(&o);
	if (rc) {
		symbolized_frame_release(&f);
		return rc;
	}
	*out = f;
	return 0;
}

int symbolizer_frame_resolve(struct symbolizer *sym, uint8_t stack_kind, int64_t object,
			     uint64_t offset, struct symbolized_frame *out)
{
	struct symbolized_frame f;
	int rc = cache_lookup(sym, object, offset, &f);

	if (rc == -ENOENT) {
		rc = resolve(sym, object, offset, &f);
		if (!rc)
			cache_insert(sym, object, offset, &f);
	}
	if (rc)
		return rc;
	/* Unknown addresses in a kernel stack are kernel frames too. */
	if (stack_kind == SYSOM_STACK_KERNEL)
		f.kind = SYMBOLIZED_KERNEL;
	*out = f;
	return 0;
}

int symbolizer_stop_frame(uint8_t stop_reason, struct symbolized_frame *out)
{
	struct symbolized_frame f = { .kind = SYMBOLIZED_ERROR };
	int n;

	switch (stop_reason) {
	case SYSOM_STOP_COMPLETE:
		return -EINVAL;
	case SYSOM_STOP_DEPTH_LIMIT:
		n = asprintf(&f.name, "[truncated: depth limit]");
		break;
	case SYSOM_STOP_READ_FAULT:
		n = asprintf(&f.name, "[truncated: read fault]");
		break;
	case SYSOM_STOP_STACK_LOST:
		n = asprintf(&f.name, "[truncated: stack lost]");
		break;
	default:
		n = asprintf(&f.name, "[truncated: reason %u]", stop_reason);
		break;
	}
	if (n < 0)
		return -ENOMEM;
	f.object = strdup("");
	if (!f.object) {
		free(f.name);
		return -ENOMEM;
	}
	*out = f;
	return 0;
}
