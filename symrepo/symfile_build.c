/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol file writer core: counted heap, strings, overlap resolution, atomic output. */
#include "symrepo/symfile_build.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/hash.h"
#include "symrepo/symfile_format.h"

/* From libstdc++ (linked with -lstdc++): the Itanium C++ ABI demangler. */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define DEFAULT_BUDGET (256ULL << 20)
#define ALLOC_HEADER 16 /* bytes before each counted block: its size (keeps 16-byte alignment) */
#define OUT_BUFFER_BYTES (64u << 10)
#define INITIAL_SLOTS 1024u

void symb__init(struct symb *b, uint64_t budget, char *err, size_t errlen)
{
	memset(b, 0, sizeof(*b));
	b->budget = budget ? budget : DEFAULT_BUDGET;
	b->errbuf = err;
	b->errlen = errlen;
	if (err && errlen)
		err[0] = 0;
}

int symb__fail(struct symb *b, int rc, const char *fmt, ...)
{
	va_list ap;

	if (b->error)
		return b->error;
	b->error = rc;
	if (b->errbuf && b->errlen) {
		va_start(ap, fmt);
		vsnprintf(b->errbuf, b->errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Counted heap with a budget */

static void drop_lines(struct symb *b)
{
	void *p = b->lines;

	b->lines = NULL;
	b->nlines = b->lines_cap = 0;
	b->lines_on = false;
	b->lines_dropped = true;
	symb__free(b, p);
}

static void drop_inlines(struct symb *b)
{
	void *p = b->inl;

	b->inl = NULL;
	b->ninl = b->inl_cap = 0;
	b->inline_on = false;
	b->inline_dropped = true;
	symb__free(b, p);
}

/* Makes room for `n` more bytes under the budget, giving up line rows, then inline ranges. */
static bool reserve(struct symb *b, uint64_t n)
{
	while (b->mem_current + n > b->budget) {
		if (b->lines_on)
			drop_lines(b);
		else if (b->inline_on)
			drop_inlines(b);
		else
			return false;
	}
	return true;
}

void *symb__alloc(struct symb *b, size_t n)
{
	uint64_t total = (uint64_t)n + ALLOC_HEADER;
	uint8_t *p;

	if (b->error)
		return NULL;
	if (!reserve(b, total)) {
		symb__fail(b, -SYSOM_ELIMIT,
			   "memory budget of %llu bytes exceeded (%llu in use, %zu more needed)",
			   (unsigned long long)b->budget, (unsigned long long)b->mem_current, n);
		return NULL;
	}
	p = malloc(total);
	if (!p) {
		symb__fail(b, -ENOMEM, "out of memory (%zu bytes)", n);
		return NULL;
	}
	memcpy(p, &total, sizeof(total));
	b->mem_current += total;
	if (b->mem_current > b->mem_peak)
		b->mem_peak = b->mem_current;
	return p + ALLOC_HEADER;
}

void symb__free(struct symb *b, void *p)
{
	uint64_t total;

	if (!p)
		return;
	uint8_t *base = (uint8_t *)p - ALLOC_HEADER;
	memcpy(&total, base, sizeof(total));
	b->mem_current -= total;
	free(base);
}

/* The capacity symb__grow moves to for `need` elements (doubling from 64, capped). */
static uint64_t grown_capacity(uint32_t cap, uint64_t need)
{
	uint64_t ncap = cap ? cap : 64;

	while (ncap < need)
		ncap *= 2;
	return ncap > SYMF_MAX_COUNT ? SYMF_MAX_COUNT : ncap;
}

void *symb__grow(struct symb *b, void *arr, uint32_t *cap, size_t elem, uint64_t need)
{
	uint64_t ncap;
	void *p;

	if (need <= *cap)
		return arr;
	if (need > SYMF_MAX_COUNT) {
		symb__fail(b, -SYSOM_ELIMIT, "more than %u records of one kind", SYMF_MAX_COUNT);
		return NULL;
	}
	ncap = grown_capacity(*cap, need);
	p = symb__alloc(b, ncap * elem);
	if (!p)
		return NULL;
	if (arr)
		memcpy(p, arr, (size_t)*cap * elem);
	symb__free(b, arr);
	*cap = (uint32_t)ncap;
	return p;
}

/* ------------------------------------------------------------------------------------------ */
/* Strings, names, maps */

static uint32_t hash_tag(const void *s, size_t len)
{
	uint64_t h = sysom_hash64(s, len, 0);
	return (uint32_t)(h ^ (h >> 32));
}

static int intern_rehash(struct symb *b)
{
	uint32_t ncap = b->str_slot_cap ? b->str_slot_cap * 2 : INITIAL_SLOTS;
	uint32_t *off = symb__alloc(b, (size_t)ncap * sizeof(uint32_t));
	uint32_t *tag = off ? symb__alloc(b, (size_t)ncap * sizeof(uint32_t)) : NULL;

	if (!tag) {
		symb__free(b, off);
		return b->error;
	}
	memset(off, 0xff, (size_t)ncap * sizeof(uint32_t));
	for (uint32_t i = 0; i < b->str_slot_cap; i++) {
		if (b->str_slot_off[i] == SYMF_NONE)
			continue;
		uint32_t j = b->str_slot_hash[i] & (ncap - 1);
		while (off[j] != SYMF_NONE)
			j = (j + 1) & (ncap - 1);
		off[j] = b->str_slot_off[i];
		tag[j] = b->str_slot_hash[i];
	}
	symb__free(b, b->str_slot_off);
	symb__free(b, b->str_slot_hash);
	b->str_slot_off = off;
	b->str_slot_hash = tag;
	b->str_slot_cap = ncap;
	return 0;
}

uint32_t symb__intern(struct symb *b, const char *s, size_t len)
{
	if (b->error)
		return SYMF_NONE;
	if (len > SYMF_MAX_NAME_BYTES)
		len = SYMF_MAX_NAME_BYTES;
	if (!b->str) {
		b->str = symb__alloc(b, 4096);
		if (!b->str)
			return SYMF_NONE;
		b->str_cap = 4096;
		b->str[0] = 0; /* offset 0 is "" */
		b->str_len = 1;
	}
	if (len == 0)
		return 0;
	if ((uint64_t)(b->str_slot_count + 1) * 2 > b->str_slot_cap && intern_rehash(b) < 0)
		return SYMF_NONE;

	uint32_t tag = hash_tag(s, len), mask = b->str_slot_cap - 1, j = tag & mask;
	while (b->str_slot_off[j] != SYMF_NONE) {
		uint32_t off = b->str_slot_off[j];
		if (b->str_slot_hash[j] == tag && off + len < b->str_len &&
		    memcmp(b->str + off, s, len) == 0 && b->str[off + len] == 0)
			return off;
		j = (j + 1) & mask;
	}
	if (b->str_len + len + 1 > SYMF_MAX_STRINGS_BYTES) {
		symb__fail(b, -SYSOM_ELIMIT, "string table over %u bytes", SYMF_MAX_STRINGS_BYTES);
		return SYMF_NONE;
	}
	if (b->str_len + len + 1 > b->str_cap) {
		size_t ncap = b->str_cap;
		while (ncap < b->str_len + len + 1)
			ncap *= 2;
		char *p = symb__alloc(b, ncap);
		if (!p)
			return SYMF_NONE;
		memcpy(p, b->str, b->str_len);
		symb__free(b, b->str);
		b->str = p;
		b->str_cap = ncap;
	}
	uint32_t off = (uint32_t)b->str_len;
	memcpy(b->str + off, s, len);
	b->str[off + len] = 0;
	b->str_len += len + 1;
	b->str_slot_off[j] = off;
	b->str_slot_hash[j] = tag;
	b->str_slot_count++;
	return off;
}

/* Demangled form of an Itanium-mangled `name` (a "@VERSION" suffix kept as is), interned;
 * 0 when the name is not mangled or does not demangle. */
static uint32_t demangle(struct symb *b, const char *name)
{
	char local[512];
	const char *at, *mangled = name;
	char *dm = NULL;
	int status = -1;
	uint32_t off = 0;

	if (name[0] != '_' || name[1] != 'Z')
		return 0;
	at = strchr(name, '@');
	if (at) {
		size_t n = (size_t)(at - name);
		if (n >= sizeof(local))
			return 0;
		memcpy(local, name, n);
		local[n] = 0;
		mangled = local;
	}
	dm = __cxa_demangle(mangled, NULL, NULL, &status);
	if (!dm || status != 0)
		goto cleanup;
	size_t dlen = strlen(dm);
	if (at) {
		size_t alen = strlen(at);
		char *joined = realloc(dm, dlen + alen + 1);
		if (!joined)
			goto cleanup;
		dm = joined;
		memcpy(dm + dlen, at, alen + 1);
		dlen += alen;
	}
	if (strcmp(dm, name) != 0) {
		off = symb__intern(b, dm, dlen);
		if (off == SYMF_NONE)
			off = 0;
	}
cleanup:
	free(dm);
	return off;
}

uint32_t symb__add_function(struct symb *b, uint64_t start, uint64_t size, const char *name,
			    uint32_t flags)
{
	uint32_t name_off = symb__intern(b, name, strlen(name));
	uint32_t dm = name_off == SYMF_NONE ? 0 : demangle(b, name);
	struct symb_func *p;

	if (b->error)
		return SYMF_NONE;
	p = symb__grow(b, b->funcs, &b->funcs_cap, sizeof(*p), (uint64_t)b->nfuncs + 1);
	if (!p)
		return SYMF_NONE;
	b->funcs = p;
	p[b->nfuncs] = (struct symb_func){ .start = start, .size = size, .name = name_off,
					   .demangled = dm, .flags = flags };
	return b->nfuncs++;
}

static inline uint32_t map_slot(uint32_t key, uint32_t mask)
{
	return (key * 0x9e3779b1u) & mask;
}

static uint32_t map_get(const struct symb_map *m, uint32_t key)
{
	if (!m->cap)
		return SYMF_NONE;
	for (uint32_t j = map_slot(key, m->cap - 1);; j = (j + 1) & (m->cap - 1)) {
		if (m->keys[j] == key)
			return m->values[j];
		if (m->keys[j] == SYMF_NONE)
			return SYMF_NONE;
	}
}

static int map_put(struct symb *b, struct symb_map *m, uint32_t key, uint32_t value)
{
	if ((uint64_t)(m->count + 1) * 2 > m->cap) {
		uint32_t ncap = m->cap ? m->cap * 2 : 256;
		uint32_t *keys = symb__alloc(b, (size_t)ncap * sizeof(uint32_t));
		uint32_t *values = keys ? symb__alloc(b, (size_t)ncap * sizeof(uint32_t)) : NULL;
		if (!values) {
			symb__free(b, keys);
			return b->error;
		}
		memset(keys, 0xff, (size_t)ncap * sizeof(uint32_t));
		for (uint32_t i = 0; i < m->cap; i++) {
			if (m->keys[i] == SYMF_NONE)
				continue;
			uint32_t j = map_slot(m->keys[i], ncap - 1);
			while (keys[j] != SYMF_NONE)
				j = (j + 1) & (ncap - 1);
			keys[j] = m->keys[i];
			values[j] = m->values[i];
		}
		symb__free(b, m->keys);
		symb__free(b, m->values);
		m->keys = keys;
		m->values = values;
		m->cap = ncap;
	}
	uint32_t j = map_slot(key, m->cap - 1);
	while (m->keys[j] != SYMF_NONE)
		j = (j + 1) & (m->cap - 1);
	m->keys[j] = key;
	m->values[j] = value;
	m->count++;
	return 0;
}

static void map_free(struct symb *b, struct symb_map *m)
{
	symb__free(b, m->keys);
	symb__free(b, m->values);
	memset(m, 0, sizeof(*m));
}

uint32_t symb__callee(struct symb *b, const char *name)
{
	uint32_t off = symb__intern(b, name, strlen(name));
	uint32_t fi;

	if (off == SYMF_NONE)
		return SYMF_NONE;
	fi = map_get(&b->callee_map, off);
	if (fi != SYMF_NONE)
		return fi;
	fi = symb__add_function(b, 0, 0, name, SYMF_FN_INLINE_ONLY | SYMF_FN_SOURCE_DWARF);
	if (fi == SYMF_NONE || map_put(b, &b->callee_map, off, fi) < 0)
		return SYMF_NONE;
	return fi;
}

uint32_t symb__file(struct symb *b, const char *path)
{
	uint32_t off = symb__intern(b, path, strlen(path));
	uint32_t fi;
	uint32_t *p;

	if (off == SYMF_NONE)
		return SYMF_NONE;
	fi = map_get(&b->file_map, off);
	if (fi != SYMF_NONE)
		return fi;
	p = symb__grow(b, b->files, &b->files_cap, sizeof(*p), (uint64_t)b->nfiles + 1);
	if (!p)
		return SYMF_NONE;
	b->files = p;
	p[b->nfiles] = off;
	if (map_put(b, &b->file_map, off, b->nfiles) < 0)
		return SYMF_NONE;
	return b->nfiles++;
}

/* ------------------------------------------------------------------------------------------ */
/* Records */

int symb__add_segment(struct symb *b, uint64_t file_offset, uint64_t vaddr, uint64_t size)
{
	struct symfile_segment *p;

	if (b->error)
		return b->error;
	if (b->nsegs >= SYMF_MAX_SEGMENTS)
		return symb__fail(b, -SYSOM_ELIMIT, "more than %u executable segments",
				  SYMF_MAX_SEGMENTS);
	p = symb__grow(b, b->segs, &b->segs_cap, sizeof(*p), (uint64_t)b->nsegs + 1);
	if (!p)
		return b->error;
	b->segs = p;
	p[b->nsegs++] = (struct symfile_segment){ file_offset, vaddr, size };
	return 0;
}

int symb__add_interval(struct symb *b, uint64_t start, uint64_t end, uint32_t function,
		       uint32_t flags)
{
	struct symb_interval *p;

	if (b->error)
		return b->error;
	if (end <= start)
		return 0;
	p = symb__grow(b, b->ivs, &b->ivs_cap, sizeof(*p), (uint64_t)b->nivs + 1);
	if (!p)
		return b->error;
	b->ivs = p;
	p[b->nivs++] = (struct symb_interval){ start, end, function, flags };
	b->ivs_sorted = false;
	return 0;
}

int symb__add_sizeless(struct symb *b, uint64_t start, uint64_t limit, uint32_t function)
{
	struct symb_sizeless *p;

	if (b->error)
		return b->error;
	p = symb__grow(b, b->sizeless, &b->sizeless_cap, sizeof(*p), (uint64_t)b->nsizeless + 1);
	if (!p)
		return b->error;
	b->sizeless = p;
	p[b->nsizeless++] = (struct symb_sizeless){ start, limit, function };
	return 0;
}

int symb__add_bound(struct symb *b, uint64_t addr)
{
	uint64_t *p;

	if (b->error)
		return b->error;
	p = symb__grow(b, b->bounds, &b->bounds_cap, sizeof(*p), (uint64_t)b->nbounds + 1);
	if (!p)
		return b->error;
	b->bounds = p;
	p[b->nbounds++] = addr;
	return 0;
}

int symb__add_inline(struct symb *b, uint64_t start, uint64_t end, uint32_t function,
		     uint32_t call_file, uint32_t call_line, uint32_t depth)
{
	if (b->error)
		return b->error;
	if (!b->inline_on || end <= start || end - start > UINT32_MAX ||
	    depth >= SYMF_MAX_INLINE_DEPTH)
		return 0;
	if (b->ninl >= SYMF_MAX_COUNT) {
		drop_inlines(b); /* optional data: over the record limit it is dropped, not fatal */
		return 0;
	}
	if (b->ninl == b->inl_cap) {
		uint64_t ncap = grown_capacity(b->inl_cap, (uint64_t)b->ninl + 1);
		/* The old array is in mem_current already; growing adds the new one. */
		uint64_t need = ncap * sizeof(struct symb_inline) + ALLOC_HEADER;
		/* Function ranges come first: line rows yield, then inline ranges. */
		while (b->mem_current + need > b->budget && b->inline_on) {
			if (b->lines_on)
				drop_lines(b);
			else
				drop_inlines(b);
		}
		if (!b->inline_on)
			return 0;
		struct symb_inline *p = symb__grow(b, b->inl, &b->inl_cap, sizeof(*p),
						   (uint64_t)b->ninl + 1);
		if (!p)
			return b->error;
		b->inl = p;
	}
	b->inl[b->ninl++] = (struct symb_inline){ .start = start, .size = (uint32_t)(end - start),
						  .function = function, .call_file = call_file,
						  .call_line = call_line, .parent = SYMF_NONE,
						  .depth = (uint16_t)depth };
	return 0;
}

int symb__add_line(struct symb *b, uint64_t addr, uint32_t file, uint32_t line)
{
	if (b->error)
		return b->error;
	if (!b->lines_on)
		return 0;
	if (b->nlines >= SYMF_MAX_COUNT) {
		drop_lines(b);
		return 0;
	}
	if (b->nlines == b->lines_cap) {
		uint64_t ncap = grown_capacity(b->lines_cap, (uint64_t)b->nlines + 1);
		uint64_t need = ncap * sizeof(struct symb_line) + ALLOC_HEADER;
		if (b->mem_current + need > b->budget) {
			drop_lines(b);
			return 0;
		}
		struct symb_line *p = symb__grow(b, b->lines, &b->lines_cap, sizeof(*p),
						 (uint64_t)b->nlines + 1);
		if (!p)
			return b->error;
		b->lines = p;
	}
	b->lines[b->nlines++] = (struct symb_line){ addr, file, line };
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Sorting (in place, no allocation) */

static void swap_bytes(uint8_t *a, uint8_t *b, size_t n)
{
	uint8_t tmp[64];

	while (n) {
		size_t k = n < sizeof(tmp) ? n : sizeof(tmp);
		memcpy(tmp, a, k);
		memcpy(a, b, k);
		memcpy(b, tmp, k);
		a += k;
		b += k;
		n -= k;
	}
}

static void sift_down(uint8_t *base, size_t root, size_t n, size_t elem,
		      int (*cmp)(const void *, const void *))
{
	for (;;) {
		size_t child = 2 * root + 1;
		if (child >= n)
			return;
		if (child + 1 < n && cmp(base + child * elem, base + (child + 1) * elem) < 0)
			child++;
		if (cmp(base + root * elem, base + child * elem) >= 0)
			return;
		swap_bytes(base + root * elem, base + child * elem, elem);
		root = child;
	}
}

void symb__sort(void *base, size_t n, size_t elem, int (*cmp)(const void *, const void *))
{
	uint8_t *p = base;

	if (n < 2)
		return;
	for (size_t i = n / 2; i-- > 0;)
		sift_down(p, i, n, elem, cmp);
	for (size_t end = n - 1; end > 0; end--) {
		swap_bytes(p, p + end * elem, elem);
		sift_down(p, 0, end, elem, cmp);
	}
}

#define CMP(a, b) (((a) > (b)) - ((a) < (b)))

/* Intervals: start ascending, then longer first (so the shortest is pushed last and wins). */
static int cmp_interval(const void *pa, const void *pb)
{
	const struct symb_interval *a = pa, *b = pb;
	int c = CMP(a->start, b->start);
	if (c == 0)
		c = CMP(b->end, a->end);
	if (c == 0)
		c = CMP(a->function, b->function);
	return c;
}

static int cmp_sizeless(const void *pa, const void *pb)
{
	const struct symb_sizeless *a = pa, *b = pb;
	int c = CMP(a->start, b->start);
	return c ? c : CMP(a->function, b->function);
}

static int cmp_u64(const void *pa, const void *pb)
{
	uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
	return CMP(a, b);
}

static int cmp_segment(const void *pa, const void *pb)
{
	const struct symfile_segment *a = pa, *b = pb;
	int c = CMP(a->file_offset, b->file_offset);
	return c ? c : CMP(a->size, b->size);
}

/* Inline ranges: start, then depth (parents first), then longer first, then callee. */
static int cmp_inline(const void *pa, const void *pb)
{
	const struct symb_inline *a = pa, *b = pb;
	int c = CMP(a->start, b->start);
	if (c == 0)
		c = CMP(a->depth, b->depth);
	if (c == 0)
		c = CMP(b->size, a->size);
	if (c == 0)
		c = CMP(a->function, b->function);
	if (c == 0)
		c = CMP(a->call_line, b->call_line);
	if (c == 0)
		c = CMP(a->call_file, b->call_file);
	return c;
}

/* Rank of a row among rows at one address (the highest is kept): an end-of-sequence
 * marker, then a weak row, then a row. */
static int line_rank(const struct symb_line *l)
{
	if (l->file == SYMF_NONE)
		return 0;
	return l->line & SYMB_LINE_WEAK ? 1 : 2;
}

/* Line rows: address, then rank (a sequence may start where another ends), then file and
 * line for a deterministic order. */
static int cmp_line(const void *pa, const void *pb)
{
	const struct symb_line *a = pa, *b = pb;
	int c = CMP(a->addr, b->addr);
	if (c == 0)
		c = CMP(line_rank(a), line_rank(b));
	if (c == 0)
		c = CMP(a->file, b->file);
	if (c == 0)
		c = CMP(a->line, b->line);
	return c;
}

/* ------------------------------------------------------------------------------------------ */
/* Coverage, sizeless symbols, overlap resolution */

int symb__coverage(struct symb *b)
{
	struct symb_run *runs;
	uint32_t n = 0;

	if (b->error)
		return b->error;
	if (!b->ivs_sorted) {
		symb__sort(b->ivs, b->nivs, sizeof(*b->ivs), cmp_interval);
		b->ivs_sorted = true;
	}
	symb__free(b, b->cov);
	b->cov = NULL;
	b->ncov = 0;
	runs = symb__alloc(b, ((size_t)b->nivs + 1) * sizeof(*runs));
	if (!runs)
		return b->error;
	for (uint32_t i = 0; i < b->nivs; i++) {
		const struct symb_interval *iv = &b->ivs[i];
		if (n && iv->start <= runs[n - 1].end) {
			if (iv->end > runs[n - 1].end)
				runs[n - 1].end = iv->end;
		} else {
			runs[n++] = (struct symb_run){ iv->start, iv->end };
		}
	}
	b->cov = runs;
	b->ncov = n;
	return 0;
}

/* Index of the first run starting after `addr` (runs are sorted and disjoint). */
static uint32_t run_after(const struct symb *b, uint64_t addr)
{
	uint32_t lo = 0, hi = b->ncov;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (b->cov[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

bool symb__covered(const struct symb *b, uint64_t start, uint64_t end)
{
	uint32_t i = run_after(b, start);

	if (i > 0 && b->cov[i - 1].end > start)
		return true;
	return i < b->ncov && b->cov[i].start < end;
}

/* First value in sorted `v[0..n)` greater than `addr`, or UINT64_MAX. */
static uint64_t next_above(const uint64_t *v, uint32_t n, uint64_t addr)
{
	uint32_t lo = 0, hi = n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (v[mid] <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n ? v[lo] : UINT64_MAX;
}

/*
 * A sizeless symbol extends to the nearest of: the next start of any function (sized, DWARF
 * or sizeless), the next other symbol in an executable section (b->bounds), and its
 * section's end. One that lies inside a sized or DWARF function is a label of it: dropped.
 */
static int bound_sizeless(struct symb *b)
{
	if (symb__coverage(b) < 0)
		return b->error;
	symb__sort(b->sizeless, b->nsizeless, sizeof(*b->sizeless), cmp_sizeless);
	symb__sort(b->bounds, b->nbounds, sizeof(*b->bounds), cmp_u64);
	for (uint32_t i = 0; i < b->nsizeless; i++) {
		const struct symb_sizeless *z = &b->sizeless[i];
		uint64_t end = z->limit;

		if (i && z->start == b->sizeless[i - 1].start)
			continue; /* callers dedupe; keep the first for safety */
		if (symb__covered(b, z->start, z->start + 1))
			continue;
		uint32_t r = run_after(b, z->start);
		if (r < b->ncov && b->cov[r].start < end)
			end = b->cov[r].start;
		for (uint32_t k = i + 1; k < b->nsizeless; k++) {
			if (b->sizeless[k].start > z->start) {
				if (b->sizeless[k].start < end)
					end = b->sizeless[k].start;
				break;
			}
		}
		uint64_t bound = next_above(b->bounds, b->nbounds, z->start);
		if (bound < end)
			end = bound;
		if (end <= z->start || end == UINT64_MAX)
			continue;
		b->funcs[z->function].size = end - z->start;
		b->funcs[z->function].flags |= SYMF_FN_SIZE_INFERRED;
		if (symb__add_interval(b, z->start, end, z->function, SYMF_RANGE_SIZE_INFERRED) < 0)
			return b->error;
	}
	symb__free(b, b->sizeless);
	symb__free(b, b->bounds);
	b->sizeless = NULL;
	b->bounds = NULL;
	b->nsizeless = b->sizeless_cap = b->nbounds = b->bounds_cap = 0;
	return 0;
}

/* Emits [start, end) for function `iv` into ranges (or only counts when ranges is NULL),
 * merging with the previous range when contiguous and of the same function. */
static void emit_range(struct symb_range *ranges, uint32_t *n, uint64_t start, uint64_t end,
		       const struct symb_interval *iv, uint64_t *prev_end, uint32_t *prev_fn,
		       uint32_t *prev_flags)
{
	if (*n && *prev_end == start && *prev_fn == iv->function && *prev_flags == iv->flags) {
		if (ranges)
			ranges[*n - 1].size = end - ranges[*n - 1].start;
	} else {
		if (ranges)
			ranges[*n] = (struct symb_range){ start, end - start, iv->function,
							  iv->flags };
		(*n)++;
	}
	*prev_end = end;
	*prev_fn = iv->function;
	*prev_flags = iv->flags;
}

/* One sweep over the sorted intervals: at every address the interval that started last
 * (the innermost; the shortest among equal starts) owns it. Counts, or fills `ranges`. */
static uint32_t sweep(const struct symb *b, uint32_t *stack, struct symb_range *ranges)
{
	uint32_t i = 0, sp = 0, n = 0, prev_fn = SYMF_NONE, prev_flags = 0;
	uint64_t p = 0, prev_end = 0;

	while (i < b->nivs || sp > 0) {
		if (sp == 0)
			p = b->ivs[i].start;
		while (i < b->nivs && b->ivs[i].start == p)
			stack[sp++] = i++;
		while (sp > 0 && b->ivs[stack[sp - 1]].end <= p)
			sp--;
		if (sp == 0)
			continue;
		const struct symb_interval *top = &b->ivs[stack[sp - 1]];
		uint64_t next = top->end;
		if (i < b->nivs && b->ivs[i].start < next)
			next = b->ivs[i].start;
		emit_range(ranges, &n, p, next, top, &prev_end, &prev_fn, &prev_flags);
		p = next;
	}
	return n;
}

static int resolve_overlaps(struct symb *b)
{
	uint32_t *stack = NULL;
	uint32_t n;

	if (!b->ivs_sorted) {
		symb__sort(b->ivs, b->nivs, sizeof(*b->ivs), cmp_interval);
		b->ivs_sorted = true;
	}
	symb__free(b, b->cov);
	b->cov = NULL;
	b->ncov = 0;
	stack = symb__alloc(b, ((size_t)b->nivs + 1) * sizeof(*stack));
	if (!stack)
		goto cleanup;
	n = sweep(b, stack, NULL);
	if (n > SYMF_MAX_COUNT) {
		symb__fail(b, -SYSOM_ELIMIT, "more than %u address ranges", SYMF_MAX_COUNT);
		goto cleanup;
	}
	b->ranges = symb__alloc(b, ((size_t)n + 1) * sizeof(*b->ranges));
	if (!b->ranges)
		goto cleanup;
	b->nranges = sweep(b, stack, b->ranges);
	symb__free(b, b->ivs);
	b->ivs = NULL;
	b->nivs = b->ivs_cap = 0;
cleanup:
	symb__free(b, stack);
	return b->error;
}

/*
 * Drops functions that own no range (sizeless symbols that turned out to be labels) and
 * renumbers the references; counts the sources of the remaining ones.
 */
static int compact_functions(struct symb *b)
{
	uint32_t *remap = symb__alloc(b, ((size_t)b->nfuncs + 1) * sizeof(*remap));
	uint32_t n = 0;

	if (!remap)
		return b->error;
	for (uint32_t i = 0; i < b->nfuncs; i++) {
		const struct symb_func *fn = &b->funcs[i];
		bool keep = (fn->flags & SYMF_FN_INLINE_ONLY) || fn->size > 0;

		remap[i] = keep ? n : SYMF_NONE;
		if (!keep)
			continue;
		b->funcs[n++] = *fn;
		if (fn->flags & SYMF_FN_INLINE_ONLY)
			continue;
		switch (fn->flags & SYMF_FN_SOURCE_MASK) {
		case SYMF_FN_SOURCE_SYMTAB:
			b->from_symtab++;
			break;
		case SYMF_FN_SOURCE_DYNSYM:
			b->from_dynsym++;
			break;
		case SYMF_FN_SOURCE_DWARF:
			b->from_dwarf++;
			break;
		default:
			break;
		}
	}
	b->nfuncs = n;
	for (uint32_t i = 0; i < b->nranges; i++)
		b->ranges[i].function = remap[b->ranges[i].function];
	for (uint32_t i = 0; i < b->ninl; i++)
		b->inl[i].function = remap[b->inl[i].function];
	symb__free(b, remap);
	return 0;
}

/*
 * Sorts inline ranges by (start, depth) and links each to its parent: the innermost open
 * range one level up that contains it. Ranges that do not nest (inconsistent DWARF, code
 * folded from several functions) are dropped with their descendants, so INLINE stays a
 * laminar family, which the reader's O(log n) lookup relies on.
 */
static void finalize_inlines(struct symb *b)
{
	uint32_t stack[SYMF_MAX_INLINE_DEPTH];
	uint64_t stack_end[SYMF_MAX_INLINE_DEPTH];
	uint32_t sp = 0, n = 0;

	symb__sort(b->inl, b->ninl, sizeof(*b->inl), cmp_inline);
	for (uint32_t i = 0; i < b->ninl; i++) {
		struct symb_inline r = b->inl[i];
		uint64_t end = r.start + r.size;

		while (sp > 0 && stack_end[sp - 1] <= r.start)
			sp--;
		if (r.depth != sp || (sp > 0 && end > stack_end[sp - 1]))
			continue; /* not nested in an open parent of the level above */
		r.parent = sp ? stack[sp - 1] : SYMF_NONE;
		stack[sp] = n;
		stack_end[sp] = end;
		sp++;
		b->inl[n++] = r;
	}
	b->ninl = n;
}

/* Sorts line rows; keeps the last row at one address and drops rows that repeat the
 * previous row's file and line. */
static void finalize_lines(struct symb *b)
{
	uint32_t n = 0;

	symb__sort(b->lines, b->nlines, sizeof(*b->lines), cmp_line);
	for (uint32_t i = 0; i < b->nlines; i++) {
		struct symb_line r = b->lines[i];
		r.line &= ~SYMB_LINE_WEAK;
		if (n && b->lines[n - 1].addr == r.addr) {
			b->lines[n - 1] = r;
			continue;
		}
		if (n && b->lines[n - 1].file == r.file && b->lines[n - 1].line == r.line)
			continue;
		if (n == 0 && r.file == SYMF_NONE)
			continue;
		b->lines[n++] = r;
	}
	b->nlines = n;
}

static void finalize_segments(struct symb *b)
{
	uint32_t n = 0;

	symb__sort(b->segs, b->nsegs, sizeof(*b->segs), cmp_segment);
	for (uint32_t i = 0; i < b->nsegs; i++) {
		const struct symfile_segment *s = &b->segs[i];
		if (s->size == 0 || s->file_offset + s->size < s->file_offset ||
		    s->vaddr + s->size < s->vaddr)
			continue;
		if (n && s->file_offset < b->segs[n - 1].file_offset + b->segs[n - 1].size)
			continue; /* overlapping file ranges: the first wins */
		b->segs[n++] = *s;
	}
	b->nsegs = n;
}

/* ------------------------------------------------------------------------------------------ */
/* Output */

struct out {
	struct symb *b;
	int fd;
	uint8_t *buf;
	size_t len;
	uint64_t written;
};

static int out_flush(struct out *o)
{
	int rc = sysom_write_full(o->fd, o->buf, o->len);

	if (rc)
		return symb__fail(o->b, rc, "write: %s", strerror(-rc));
	o->len = 0;
	return 0;
}

/* Space for `n` (<= OUT_BUFFER_BYTES) bytes in the buffer, or NULL after a write error. */
static uint8_t *out_reserve(struct out *o, size_t n)
{
	if (o->len + n > OUT_BUFFER_BYTES && out_flush(o) < 0)
		return NULL;
	uint8_t *p = o->buf + o->len;
	memset(p, 0, n);
	o->len += n;
	o->written += n;
	return p;
}

static int out_bytes(struct out *o, const void *data, size_t n)
{
	const uint8_t *p = data;

	while (n) {
		size_t k = n < OUT_BUFFER_BYTES ? n : OUT_BUFFER_BYTES;
		uint8_t *d = out_reserve(o, k);
		if (!d)
			return o->b->error;
		memcpy(d, p, k);
		p += k;
		n -= k;
	}
	return 0;
}

static int out_pad(struct out *o, uint64_t to)
{
	while (o->written < to) {
		if (!out_reserve(o, 1))
			return o->b->error;
	}
	return 0;
}

struct section_plan {
	uint32_t type, record_size, count;
	uint64_t offset, size;
};

static int write_section(struct out *o, const struct symb *b, const struct section_plan *s)
{
	uint8_t *p;

	if (out_pad(o, s->offset) < 0)
		return o->b->error;
	switch (s->type) {
	case SYMF_SEC_ADDRESSES:
		for (uint32_t i = 0; i < b->nranges; i++) {
			if (!(p = out_reserve(o, SYMF_ADDRESS_SIZE)))
				return o->b->error;
			store_le64(p, b->ranges[i].start);
		}
		break;
	case SYMF_SEC_RANGES:
		for (uint32_t i = 0; i < b->nranges; i++) {
			if (!(p = out_reserve(o, SYMF_RANGE_SIZE)))
				return o->b->error;
			store_le64(p + SYMF_RANGE_BYTES, b->ranges[i].size);
			store_le32(p + SYMF_RANGE_FUNCTION, b->ranges[i].function);
			store_le32(p + SYMF_RANGE_FLAGS, b->ranges[i].flags);
		}
		break;
	case SYMF_SEC_FUNCTIONS:
		for (uint32_t i = 0; i < b->nfuncs; i++) {
			const struct symb_func *fn = &b->funcs[i];
			if (!(p = out_reserve(o, SYMF_FUNCTION_SIZE)))
				return o->b->error;
			store_le64(p + SYMF_FUNCTION_START, fn->start);
			store_le64(p + SYMF_FUNCTION_BYTES, fn->size);
			store_le32(p + SYMF_FUNCTION_NAME, fn->name);
			store_le32(p + SYMF_FUNCTION_DEMANGLED, fn->demangled);
			store_le32(p + SYMF_FUNCTION_FLAGS, fn->flags);
		}
		break;
	case SYMF_SEC_INLINE:
		for (uint32_t i = 0; i < b->ninl; i++) {
			const struct symb_inline *r = &b->inl[i];
			if (!(p = out_reserve(o, SYMF_INLINE_SIZE)))
				return o->b->error;
			store_le64(p + SYMF_INLINE_START, r->start);
			store_le32(p + SYMF_INLINE_BYTES, r->size);
			store_le32(p + SYMF_INLINE_PARENT, r->parent);
			store_le32(p + SYMF_INLINE_FUNCTION, r->function);
			store_le32(p + SYMF_INLINE_CALL_FILE, r->call_file);
			store_le32(p + SYMF_INLINE_CALL_LINE, r->call_line);
			store_le16(p + SYMF_INLINE_DEPTH, r->depth);
		}
		break;
	case SYMF_SEC_LINES:
		for (uint32_t i = 0; i < b->nlines; i++) {
			if (!(p = out_reserve(o, SYMF_LINE_SIZE)))
				return o->b->error;
			store_le64(p + SYMF_LINE_ADDR, b->lines[i].addr);
			store_le32(p + SYMF_LINE_FILE, b->lines[i].file);
			store_le32(p + SYMF_LINE_LINE, b->lines[i].line);
		}
		break;
	case SYMF_SEC_FILES:
		for (uint32_t i = 0; i < b->nfiles; i++) {
			if (!(p = out_reserve(o, SYMF_FILE_SIZE)))
				return o->b->error;
			store_le32(p, b->files[i]);
		}
		break;
	case SYMF_SEC_SEGMENTS:
		for (uint32_t i = 0; i < b->nsegs; i++) {
			if (!(p = out_reserve(o, SYMF_SEGMENT_SIZE)))
				return o->b->error;
			store_le64(p + SYMF_SEGMENT_FILE_OFFSET, b->segs[i].file_offset);
			store_le64(p + SYMF_SEGMENT_VADDR, b->segs[i].vaddr);
			store_le64(p + SYMF_SEGMENT_BYTES, b->segs[i].size);
		}
		break;
	case SYMF_SEC_STRINGS:
		return out_bytes(o, b->str, b->str_len);
	default:
		break;
	}
	return 0;
}

static void add_plan(struct section_plan *plan, uint32_t *n, uint32_t type, uint32_t record_size,
		     uint32_t count)
{
	plan[*n] =
		(struct section_plan){ .type = type, .record_size = record_size, .count = count };
	(*n)++;
}

/* Plans the sections (offsets, sizes) of the file; returns their number. */
static uint32_t plan_sections(const struct symb *b, struct section_plan *plan, uint64_t *total)
{
	uint32_t n = 0;

	add_plan(plan, &n, SYMF_SEC_ADDRESSES, SYMF_ADDRESS_SIZE, b->nranges);
	add_plan(plan, &n, SYMF_SEC_RANGES, SYMF_RANGE_SIZE, b->nranges);
	add_plan(plan, &n, SYMF_SEC_FUNCTIONS, SYMF_FUNCTION_SIZE, b->nfuncs);
	if (b->inline_on)
		add_plan(plan, &n, SYMF_SEC_INLINE, SYMF_INLINE_SIZE, b->ninl);
	if (b->lines_on)
		add_plan(plan, &n, SYMF_SEC_LINES, SYMF_LINE_SIZE, b->nlines);
	if (b->inline_on || b->lines_on)
		add_plan(plan, &n, SYMF_SEC_FILES, SYMF_FILE_SIZE, b->nfiles);
	add_plan(plan, &n, SYMF_SEC_SEGMENTS, SYMF_SEGMENT_SIZE, b->nsegs);
	add_plan(plan, &n, SYMF_SEC_STRINGS, 1, (uint32_t)b->str_len);

	uint64_t off = SYMF_HEADER_SIZE + (uint64_t)n * SYMF_SECTION_ENTRY_SIZE;
	for (uint32_t i = 0; i < n; i++) {
		off = (off + SYMF_ALIGN - 1) & ~(uint64_t)(SYMF_ALIGN - 1);
		plan[i].offset = off;
		plan[i].size = (uint64_t)plan[i].count * plan[i].record_size;
		off += plan[i].size;
	}
	*total = off;
	return n;
}

static int write_all(struct symb *b, struct out *o)
{
	struct section_plan plan[SYMF_MAX_SECTIONS];
	uint64_t total;
	uint32_t n = plan_sections(b, plan, &total);
	uint32_t flags = 0;
	uint8_t *h;

	if (b->inline_on)
		flags |= SYMF_HDR_HAS_INLINE;
	if (b->lines_on)
		flags |= SYMF_HDR_HAS_LINES;
	if (b->inline_dropped)
		flags |= SYMF_HDR_INLINE_DROPPED;
	if (b->lines_dropped)
		flags |= SYMF_HDR_LINES_DROPPED;
	if (!(h = out_reserve(o, SYMF_HEADER_SIZE)))
		return b->error;
	memcpy(h + SYMF_HDR_MAGIC, SYMF_MAGIC, SYMF_MAGIC_LEN);
	store_le16(h + SYMF_HDR_MAJOR, SYMF_MAJOR);
	store_le16(h + SYMF_HDR_MINOR, SYMF_MINOR);
	store_le32(h + SYMF_HDR_HEADER_SIZE, SYMF_HEADER_SIZE);
	store_le32(h + SYMF_HDR_SECTION_COUNT, n);
	store_le32(h + SYMF_HDR_SECTION_ENTRY, SYMF_SECTION_ENTRY_SIZE);
	store_le64(h + SYMF_HDR_FILE_SIZE, total);
	store_le32(h + SYMF_HDR_FLAGS, flags);
	store_le32(h + SYMF_HDR_FROM_SYMTAB, b->from_symtab);
	store_le32(h + SYMF_HDR_FROM_DYNSYM, b->from_dynsym);
	store_le32(h + SYMF_HDR_FROM_DWARF, b->from_dwarf);
	h[SYMF_HDR_BUILD_ID_KIND] = b->id.kind;
	h[SYMF_HDR_BUILD_ID_LEN] = b->id.len;
	memcpy(h + SYMF_HDR_BUILD_ID, b->id.bytes, b->id.len);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *e = out_reserve(o, SYMF_SECTION_ENTRY_SIZE);
		if (!e)
			return b->error;
		store_le32(e + SYMF_SEC_TYPE, plan[i].type);
		store_le32(e + SYMF_SEC_RECORD_SIZE, plan[i].record_size);
		store_le64(e + SYMF_SEC_OFFSET, plan[i].offset);
		store_le64(e + SYMF_SEC_SIZE, plan[i].size);
		store_le32(e + SYMF_SEC_COUNT, plan[i].count);
	}
	for (uint32_t i = 0; i < n; i++) {
		if (write_section(o, b, &plan[i]) < 0)
			return b->error;
	}
	if (out_flush(o) < 0)
		return b->error;
	if (o->written != total)
		return symb__fail(b, -EIO, "wrote %llu bytes, planned %llu",
				  (unsigned long long)o->written, (unsigned long long)total);
	return 0;
}

/* Writes the file to a temporary in out_path's directory, fsyncs, renames, fsyncs the dir. */
static int write_atomic(struct symb *b, const char *out_path, uint64_t *out_bytes)
{
	char tmp[PATH_MAX], dir[PATH_MAX];
	struct out o = { .b = b, .fd = -1 };
	const char *slash = strrchr(out_path, '/');
	const char *base = slash ? slash + 1 : out_path;
	int dfd = -1;
	bool created = false;

	if (slash) {
		size_t dlen = slash == out_path ? 1 : (size_t)(slash - out_path);
		if (dlen >= sizeof(dir)) {
			symb__fail(b, -ENAMETOOLONG, "output path too long");
			goto cleanup;
		}
		memcpy(dir, out_path, dlen);
		dir[dlen] = 0;
	} else {
		strcpy(dir, ".");
	}
	if (!*base ||
	    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp.XXXXXX", dir, base) >= (int)sizeof(tmp)) {
		symb__fail(b, -ENAMETOOLONG, "bad output path %s", out_path);
		goto cleanup;
	}
	o.buf = symb__alloc(b, OUT_BUFFER_BYTES);
	if (!o.buf)
		goto cleanup;
	o.fd = mkostemp(tmp, O_CLOEXEC);
	if (o.fd < 0) {
		symb__fail(b, -errno, "create %s: %s", tmp, strerror(errno));
		goto cleanup;
	}
	created = true;
	if (write_all(b, &o) < 0)
		goto cleanup;
	if (fchmod(o.fd, 0644) < 0 || fsync(o.fd) < 0) {
		symb__fail(b, -errno, "fsync %s: %s", tmp, strerror(errno));
		goto cleanup;
	}
	if (close(o.fd) < 0) {
		o.fd = -1;
		symb__fail(b, -errno, "close %s: %s", tmp, strerror(errno));
		goto cleanup;
	}
	o.fd = -1;
	if (rename(tmp, out_path) < 0) {
		symb__fail(b, -errno, "rename to %s: %s", out_path, strerror(errno));
		goto cleanup;
	}
	created = false;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) < 0) {
		symb__fail(b, -errno, "fsync directory %s: %s", dir, strerror(errno));
		goto cleanup;
	}
	*out_bytes = o.written;
cleanup:
	if (o.fd >= 0)
		close(o.fd);
	if (created)
		unlink(tmp);
	if (dfd >= 0)
		close(dfd);
	symb__free(b, o.buf);
	return b->error;
}

int symb__finish(struct symb *b, const char *out_path, uint64_t *out_bytes)
{
	if (b->error)
		return b->error;
	if (b->nsizeless && bound_sizeless(b) < 0)
		return b->error;
	if (resolve_overlaps(b) < 0 || compact_functions(b) < 0)
		return b->error;
	if (!b->str && symb__intern(b, "", 0) == SYMF_NONE)
		return b->error;
	finalize_segments(b);
	if (b->inline_on)
		finalize_inlines(b);
	if (b->lines_on)
		finalize_lines(b);
	return write_atomic(b, out_path, out_bytes);
}

void symb__destroy(struct symb *b)
{
	symb__free(b, b->str);
	symb__free(b, b->str_slot_off);
	symb__free(b, b->str_slot_hash);
	symb__free(b, b->segs);
	symb__free(b, b->funcs);
	symb__free(b, b->ivs);
	symb__free(b, b->cov);
	symb__free(b, b->sizeless);
	symb__free(b, b->bounds);
	symb__free(b, b->inl);
	map_free(b, &b->callee_map);
	symb__free(b, b->lines);
	symb__free(b, b->files);
	map_free(b, &b->file_map);
	symb__free(b, b->ranges);
	b->str = NULL;
	b->str_slot_off = b->str_slot_hash = NULL;
	b->segs = NULL;
	b->funcs = NULL;
	b->ivs = NULL;
	b->cov = NULL;
	b->sizeless = NULL;
	b->bounds = NULL;
	b->inl = NULL;
	b->lines = NULL;
	b->files = NULL;
	b->ranges = NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Programmatic input */

static int cmp_table_symbol(const void *pa, const void *pb)
{
	const struct symfile_symbol *const *a = pa, *const *b = pb;
	int c = CMP((*a)->start, (*b)->start);
	return c ? c : CMP(*a, *b); /* input order: the first at an address wins */
}

int symfile_write_table(const struct sysom_build_id *id, const struct symfile_segment *segments,
			uint32_t nsegments, const struct symfile_symbol *symbols, uint32_t nsymbols,
			const char *out_path, char *err, size_t errlen)
{
	const struct symfile_symbol **order = NULL;
	struct symb b;
	uint64_t bytes = 0;

	symb__init(&b, 0, err, errlen);
	if (!id || !out_path || (nsegments && !segments) || (nsymbols && !symbols)) {
		symb__fail(&b, -EINVAL, "invalid arguments");
		goto cleanup;
	}
	if (id->kind < 1 || id->kind > SYSOM_OBJECT_KIND_MAX || id->len < 1 ||
	    id->len > SYSOM_BUILD_ID_MAX) {
		symb__fail(&b, -EINVAL, "invalid build ID (kind %u, %u bytes)", id->kind, id->len);
		goto cleanup;
	}
	if (nsymbols > SYMF_MAX_COUNT / 2) {
		symb__fail(&b, -SYSOM_ELIMIT, "%u symbols (limit %u)", nsymbols,
			   SYMF_MAX_COUNT / 2);
		goto cleanup;
	}
	b.id = *id;
	for (uint32_t i = 0; i < nsegments; i++) {
		const struct symfile_segment *s = &segments[i];
		if (s->size == 0 || s->file_offset + s->size < s->file_offset ||
		    s->vaddr + s->size < s->vaddr) {
			symb__fail(&b, -EINVAL, "segment %u: empty or overflowing", i);
			goto cleanup;
		}
		for (uint32_t j = 0; j < i; j++) {
			if (s->file_offset < segments[j].file_offset + segments[j].size &&
			    segments[j].file_offset < s->file_offset + s->size) {
				symb__fail(&b, -EINVAL, "segments %u and %u overlap", j, i);
				goto cleanup;
			}
		}
		if (symb__add_segment(&b, s->file_offset, s->vaddr, s->size) < 0)
			goto cleanup;
	}
	order = symb__alloc(&b, ((size_t)nsymbols + 1) * sizeof(*order));
	if (!order)
		goto cleanup;
	for (uint32_t i = 0; i < nsymbols; i++) {
		const struct symfile_symbol *s = &symbols[i];
		if (!s->name || s->start + s->size < s->start) {
			symb__fail(&b, -EINVAL, "symbol %u: no name or overflowing range", i);
			goto cleanup;
		}
		order[i] = s;
	}
	symb__sort(order, nsymbols, sizeof(*order), cmp_table_symbol);
	for (uint32_t i = 0; i < nsymbols; i++) {
		const struct symfile_symbol *s = order[i];
		if (i && s->start == order[i - 1]->start)
			continue;
		uint32_t fi = symb__add_function(&b, s->start, s->size, s->name,
						 SYMF_FN_SOURCE_TABLE);
		if (fi == SYMF_NONE)
			goto cleanup;
		if (s->size) {
			symb__add_interval(&b, s->start, s->start + s->size, fi, 0);
			continue;
		}
		/* Bounded by the next symbol, else by the end of its segment. */
		uint64_t limit = UINT64_MAX;
		for (uint32_t k = 0; k < b.nsegs; k++) {
			if (s->start >= b.segs[k].vaddr &&
			    s->start - b.segs[k].vaddr < b.segs[k].size)
				limit = b.segs[k].vaddr + b.segs[k].size;
		}
		symb__add_sizeless(&b, s->start, limit, fi);
	}
	symb__free(&b, order);
	order = NULL;
	symb__finish(&b, out_path, &bytes);
cleanup:
	symb__free(&b, order);
	symb__destroy(&b);
	return b.error;
}
