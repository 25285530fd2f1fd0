/* SPDX-License-Identifier: Apache-2.0 */
/* Central symbolization through the store (kernel) and the symbol repository (user frames),
 * with an LRU cache keyed by (store object id, offset, leaf) and invalidation per Build ID. */
#include "server/symbols/symbolize.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/list.h"
#include "common/elf_buildid.h"
#include "common/hash.h"
#include "symrepo/repo.h"
#include "symrepo/symfile.h"

struct entry {
	int64_t object;
	uint64_t offset;
	bool leaf;
	struct symbolized_location loc;
	size_t bytes;
	int64_t recheck_ms;             /* named without a symbol file: look again then (0: never) */
	struct entry *chain;            /* next in the hash bucket */
	struct entry *newer, *older;    /* LRU list */
};

struct symbolizer {
	struct store *store;
	int64_t recheck_ms;             /* symbolizer_recheck_set (0: provisional names kept) */
	struct symrepo *repo;           /* NULL: user frames stay file+offset */
	symbolizer_missing_fn missing;
	void *missing_ctx;
	size_t max_entries, max_bytes;
	pthread_mutex_t lock;
	struct entry **buckets;
	size_t nbuckets; /* power of two */
	struct entry *newest, *oldest;
	/*
	 * Bumped by every invalidation: a result computed while one happened may predate the
	 * new symbols, so it is returned but not cached.
	 */
	uint64_t generation;
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

void symbolizer_repository_set(struct symbolizer *sym, struct symrepo *repo,
			       symbolizer_missing_fn missing, void *missing_ctx)
{
	sym->repo = repo;
	sym->missing = missing;
	sym->missing_ctx = missing_ctx;
}

void symbolized_frame_release(struct symbolized_frame *f)
{
	if (!f)
		return;
	free(f->name);
	free(f->object);
	free(f->file);
	f->name = f->object = f->file = NULL;
}

void symbolized_location_release(struct symbolized_location *loc)
{
	if (!loc)
		return;
	for (uint32_t i = 0; i < loc->count && loc->frames; i++)
		symbolized_frame_release(&loc->frames[i]);
	free(loc->frames);
	loc->frames = NULL;
	loc->count = 0;
}

static void entry_free(struct entry *e)
{
	symbolized_location_release(&e->loc);
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
	sym->generation++;
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

static size_t bucket_of(const struct symbolizer *sym, int64_t object, uint64_t offset, bool leaf)
{
	return (size_t)(sysom_hash_mix(sysom_hash_mix((uint64_t)object, offset), leaf) &
			(sym->nbuckets - 1));
}

static void lru_unlink(struct symbolizer *sym, struct entry *e)
{
	SYSOM_DLIST_UNLINK(sym->newest, sym->oldest, e, newer, older);
}

static void lru_push(struct symbolizer *sym, struct entry *e)
{
	SYSOM_DLIST_PUSH_FRONT(sym->newest, sym->oldest, e, newer, older);
}

/* Removes an entry from its bucket and the LRU list and frees it. */
static void entry_remove(struct symbolizer *sym, struct entry *e)
{
	struct entry **link = &sym->buckets[bucket_of(sym, e->object, e->offset, e->leaf)];

	while (*link != e)
		link = &(*link)->chain;
	*link = e->chain;
	lru_unlink(sym, e);
	sym->stats.entries--;
	sym->stats.bytes -= e->bytes;
	entry_free(e);
}

void symbolizer_build_id_invalidate(struct symbolizer *sym, const struct sysom_build_id *id)
{
	char hex[2 * SYSOM_BUILD_ID_MAX + 1];

	sysom_build_id_hex(id, hex, sizeof(hex));
	pthread_mutex_lock(&sym->lock);
	for (struct entry *e = sym->newest; e;) {
		struct entry *next = e->older;
		if (strcmp(e->loc.frames[0].build_id, hex) == 0)
			entry_remove(sym, e);
		e = next;
	}
	sym->generation++;
	sym->stats.invalidations++;
	pthread_mutex_unlock(&sym->lock);
}

static char *strdup_or_null(const char *s, bool *failed)
{
	char *copy;

	if (!s)
		return NULL;
	copy = strdup(s);
	if (!copy)
		*failed = true;
	return copy;
}

static int location_copy(const struct symbolized_location *from, struct symbolized_location *to)
{
	struct symbolized_location loc = { .count = from->count };
	bool failed = false;

	loc.frames = calloc(from->count, sizeof(*loc.frames));
	if (!loc.frames)
		return -ENOMEM;
	for (uint32_t i = 0; i < from->count; i++) {
		struct symbolized_frame *f = &loc.frames[i];
		*f = from->frames[i];
		f->name = strdup_or_null(from->frames[i].name, &failed);
		f->object = strdup_or_null(from->frames[i].object, &failed);
		f->file = strdup_or_null(from->frames[i].file, &failed);
	}
	if (failed) {
		symbolized_location_release(&loc);
		return -ENOMEM;
	}
	*to = loc;
	return 0;
}

static size_t location_bytes(const struct symbolized_location *loc)
{
	size_t n = loc->count * sizeof(*loc->frames);

	for (uint32_t i = 0; i < loc->count; i++) {
		const struct symbolized_frame *f = &loc->frames[i];
		n += strlen(f->name) + 1 + strlen(f->object) + 1 + (f->file ? strlen(f->file) + 1 : 0);
	}
	return n;
}

/*
 * Copies the cached location out; 0, -ENOENT (not cached: *generation says which cache
 * generation a result computed now belongs to) or -ENOMEM.
 */
static int cache_lookup(struct symbolizer *sym, int64_t object, uint64_t offset, bool leaf,
			struct symbolized_location *out, uint64_t *generation)
{
	int rc = -ENOENT;

	int64_t now = sysom_monotonic_ms();

	pthread_mutex_lock(&sym->lock);
	for (struct entry *e = sym->buckets[bucket_of(sym, object, offset, leaf)]; e;
	     e = e->chain) {
		if (e->object == object && e->offset == offset && e->leaf == leaf) {
			/* Its object had no symbol file: one may have arrived since (another
			 * replica sharing the repository installs files this one never hears of). */
			if (e->recheck_ms && now >= e->recheck_ms) {
				entry_remove(sym, e);
				break;
			}
			lru_unlink(sym, e);
			lru_push(sym, e);
			rc = location_copy(&e->loc, out);
			break;
		}
	}
	if (rc == -ENOENT)
		sym->stats.misses++;
	else if (rc == 0)
		sym->stats.hits++;
	*generation = sym->generation;
	pthread_mutex_unlock(&sym->lock);
	return rc;
}

/*
 * Adds a copy of a freshly resolved location unless an invalidation happened since it was
 * computed (a concurrent resolver may also have added it first).
 */
static void cache_insert(struct symbolizer *sym, int64_t object, uint64_t offset, bool leaf,
			 const struct symbolized_location *loc, uint64_t generation,
			 bool provisional)
{
	struct entry *e = calloc(1, sizeof(*e));
	size_t b;

	if (!e || location_copy(loc, &e->loc)) {
		free(e);
		return; /* the cache is an optimisation: out of memory just skips it */
	}
	e->object = object;
	e->offset = offset;
	e->leaf = leaf;
	e->recheck_ms = provisional && sym->recheck_ms ? sysom_monotonic_ms() + sym->recheck_ms : 0;
	e->bytes = sizeof(*e) + location_bytes(loc);
	pthread_mutex_lock(&sym->lock);
	if (sym->generation != generation) {
		pthread_mutex_unlock(&sym->lock);
		entry_free(e);
		return;
	}
	b = bucket_of(sym, object, offset, leaf);
	for (struct entry *o = sym->buckets[b]; o; o = o->chain) {
		if (o->object == object && o->offset == offset && o->leaf == leaf) {
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
		entry_remove(sym, sym->oldest);
	pthread_mutex_unlock(&sym->lock);
}

static void stat_count(struct symbolizer *sym, uint64_t *counter)
{
	pthread_mutex_lock(&sym->lock);
	(*counter)++;
	pthread_mutex_unlock(&sym->lock);
}

static const char *basename_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

/* "basename+0xOFF" (the first 16 hex digits of the Build ID when the name is empty). */
static int name_file_offset(struct symbolized_frame *f, const char *object_name)
{
	char shortid[17];
	const char *base = basename_of(object_name);

	if (!*base) {
		snprintf(shortid, sizeof(shortid), "%.16s", f->build_id);
		base = shortid;
	}
	if (asprintf(&f->name, "%s+0x%" PRIx64, base, f->offset) < 0) {
		f->name = NULL;
		return -ENOMEM;
	}
	return 0;
}

/*
 * A Python frame: the object's name is "<qualname>\t<file>" (docs/wire-format.md, kind 7),
 * the offset its line. Named "qualname (file.py:line)" with the file's base name, "(file.py)"
 * when the line is unknown; file and line kept for the JSON views.
 */
static int name_python(struct symbolized_frame *f, const char *object_name, uint64_t line)
{
	const char *tab = strchr(object_name, '\t');
	const char *file = tab ? tab + 1 : "";
	int qlen = tab ? (int)(tab - object_name) : (int)strlen(object_name);
	int rc;

	if (line > UINT32_MAX)
		line = 0;
	if (!*file)
		rc = line ? asprintf(&f->name, "%.*s (line %" PRIu64 ")", qlen, object_name, line)
			  : asprintf(&f->name, "%.*s", qlen, object_name);
	else if (line)
		rc = asprintf(&f->name, "%.*s (%s:%" PRIu64 ")", qlen, object_name,
			      basename_of(file), line);
	else
		rc = asprintf(&f->name, "%.*s (%s)", qlen, object_name, basename_of(file));
	if (rc < 0) {
		f->name = NULL;
		return -ENOMEM;
	}
	if (*file && !(f->file = strdup(file)))
		return -ENOMEM;
	f->line = (uint32_t)line;
	return 0;
}

/* "[anon]+0xADDR", "[unknown]+0xADDR". */
static int name_address(struct symbolized_frame *f, const char *what)
{
	if (asprintf(&f->name, "%s+0x%" PRIx64, what, f->offset) < 0) {
		f->name = NULL;
		return -ENOMEM;
	}
	return 0;
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

/*
 * Names a user frame from the repository's symbol file into `loc` (whose frames[0] is the
 * template: kind, object, build ID, offset). Returns 0 with loc->count set, 1 when the frame
 * stays "basename+0xOFF" (no symbol file, no segment, a gap), or -ENOMEM. *provisional: the
 * name may still change (no symbol file yet, or one without DWARF, whose debug file may
 * still arrive).
 */
static int resolve_repo(struct symbolizer *sym, const struct store_object *o, uint64_t offset,
			bool leaf, struct symbolized_location *loc, bool *provisional)
{
	struct symfile_frame found[SYMBOLIZER_MAX_INLINE_DEPTH];
	struct symbolized_frame *frames = NULL;
	struct symfile *sf;
	uint64_t vaddr = 0;
	bool failed = false;
	int err = 0, n, rc = 1;

	sf = symrepo_symbols_acquire(sym->repo, &o->id, &err);
	if (!sf) {
		stat_count(sym, &sym->stats.repo_missing);
		if (err == -ENOENT && sym->missing && o->id.kind == SYSOM_OBJECT_ELF)
			sym->missing(sym->missing_ctx, &o->id);
		*provisional = true;
		return 1;
	}
	struct symfile_info info;
	symfile_info_get(sf, &info);
	*provisional = info.from_dwarf == 0;
	/* A return address is the instruction after the call: look up the call itself. */
	if (symfile_offset_to_vaddr(sf, offset, &vaddr) || (!leaf && vaddr == 0) ||
	    (n = symfile_lookup(sf, leaf ? vaddr : vaddr - 1, found, SYMBOLIZER_MAX_INLINE_DEPTH)) <= 0) {
		stat_count(sym, &sym->stats.repo_gaps);
		goto cleanup;
	}
	/* The function itself must be named; an inlined call whose DWARF names no callee ("??")
	 * is left out rather than shown under a made-up name. */
	int kept = 0;
	for (int i = 0; i < n; i++) {
		const char *name = found[i].name;
		bool unnamed = !name || !*name || strcmp(name, "??") == 0;
		if (unnamed && found[i].inlined)
			continue;
		if (unnamed) {
			stat_count(sym, &sym->stats.repo_gaps);
			goto cleanup;
		}
		found[kept++] = found[i];
	}
	if ((n = kept) == 0) {
		stat_count(sym, &sym->stats.repo_gaps);
		goto cleanup;
	}
	frames = calloc((size_t)n, sizeof(*frames));
	if (!frames) {
		rc = -ENOMEM;
		goto cleanup;
	}
	/* symfile_lookup answers innermost first; a location is root first. */
	for (int i = 0; i < n; i++) {
		const struct symfile_frame *s = &found[n - 1 - i];
		struct symbolized_frame *f = &frames[i];

		*f = loc->frames[0];
		f->object = f->name = f->file = NULL;
		f->object = strdup_or_null(loc->frames[0].object, &failed);
		f->name = strdup_or_null(s->demangled && *s->demangled ? s->demangled : s->name,
					 &failed);
		f->file = strdup_or_null(s->file && *s->file ? s->file : NULL, &failed);
		f->line = s->file && *s->file ? s->line : 0;
		f->inlined = s->inlined;
		f->has_symbol_offset = !s->inlined && vaddr >= s->function_start;
		f->symbol_offset = f->has_symbol_offset ? vaddr - s->function_start : 0;
	}
	if (failed) {
		rc = -ENOMEM;
		goto cleanup;
	}
	stat_count(sym, &sym->stats.repo_named);
	symbolized_location_release(loc);
	loc->frames = frames;
	loc->count = (uint32_t)n;
	frames = NULL;
	rc = 0;
cleanup:
	if (frames) {
		struct symbolized_location partial = { frames, (uint32_t)n };
		symbolized_location_release(&partial);
	}
	symrepo_symbols_release(sym->repo, sf);
	return rc;
}

/* Resolves a stored frame (cache miss); *provisional: named without the symbol or debug file,
 * which may still arrive. */
static int resolve(struct symbolizer *sym, int64_t object, uint64_t offset, bool leaf,
		   struct symbolized_location *out, bool *provisional)
{
	struct symbolized_location loc = { 0 };
	struct symbolized_frame *f;
	struct store_object o = { 0 };
	int rc = store_object_get(sym->store, object, &o);

	if (rc)
		return rc;
	loc.frames = calloc(1, sizeof(*loc.frames));
	if (!loc.frames) {
		rc = -ENOMEM;
		goto cleanup;
	}
	loc.count = 1;
	f = &loc.frames[0];
	f->offset = offset;
	if (o.id.len)
		sysom_build_id_hex(&o.id, f->build_id, sizeof(f->build_id));
	f->object = strdup(o.name);
	if (!f->object) {
		rc = -ENOMEM;
		goto cleanup;
	}
	switch (o.id.kind) {
	case SYSOM_OBJECT_KERNEL:
	case SYSOM_OBJECT_KMODULE:
		f->kind = SYMBOLIZED_KERNEL;
		rc = resolve_kernel(sym, &o, offset, f);
		break;
	case SYSOM_OBJECT_ANON:
		rc = name_address(f, "[anon]");
		break;
	case SYSOM_OBJECT_UNKNOWN:
		rc = name_address(f, "[unknown]");
		break;
	case SYSOM_OBJECT_PYTHON:
		f->kind = SYMBOLIZED_PYTHON;
		rc = name_python(f, o.name, offset);
		break;
	case SYSOM_OBJECT_JIT: /* the perf map's name, as perf shows it */
		f->jit = true;
		f->has_symbol_offset = true;
		f->symbol_offset = offset;
		rc = (f->name = strdup(o.name)) ? 0 : -ENOMEM;
		break;
	case SYSOM_OBJECT_ELF:
	case SYSOM_OBJECT_FILE_HASH:
		rc = sym->repo && o.id.len ? resolve_repo(sym, &o, offset, leaf, &loc, provisional)
					    : 1;
		if (rc == 1)
			rc = name_file_offset(&loc.frames[0], o.name);
		break;
	default:
		rc = name_file_offset(f, o.name);
		break;
	}
cleanup:
	store_object_release(&o);
	if (rc < 0) {
		symbolized_location_release(&loc);
		return rc;
	}
	*out = loc;
	return 0;
}

void symbolizer_recheck_set(struct symbolizer *sym, int64_t ms)
{
	pthread_mutex_lock(&sym->lock);
	sym->recheck_ms = ms > 0 ? ms : 0;
	pthread_mutex_unlock(&sym->lock);
}

int symbolizer_location_resolve(struct symbolizer *sym, uint8_t stack_kind, int64_t object,
				uint64_t offset, bool leaf, struct symbolized_location *out)
{
	struct symbolized_location loc;
	uint64_t generation;
	int rc;

	/* Kernel frames are named alike as leaf or return address: one cache entry. */
	if (stack_kind == SYSOM_STACK_KERNEL)
		leaf = false;
	rc = cache_lookup(sym, object, offset, leaf, &loc, &generation);
	if (rc == -ENOENT) {
		bool provisional = false;
		rc = resolve(sym, object, offset, leaf, &loc, &provisional);
		if (!rc)
			cache_insert(sym, object, offset, leaf, &loc, generation, provisional);
	}
	if (rc)
		return rc;
	/* Unknown addresses in a kernel stack are kernel frames too. */
	if (stack_kind == SYSOM_STACK_KERNEL)
		for (uint32_t i = 0; i < loc.count; i++)
			loc.frames[i].kind = SYMBOLIZED_KERNEL;
	*out = loc;
	return 0;
}

int symbolizer_stop_frame(uint8_t stop_reason, struct symbolized_frame *out)
{
	struct symbolized_frame f = { .kind = SYMBOLIZED_ERROR };
	int n;

	const char *why = sysom_stop_reason_name(stop_reason);

	if (stop_reason == SYSOM_STOP_COMPLETE)
		return -EINVAL;
	if (why)
		n = asprintf(&f.name, "[truncated: %s]", why);
	else
		n = asprintf(&f.name, "[truncated: reason %u]", stop_reason);
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
