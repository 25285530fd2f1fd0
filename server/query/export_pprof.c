/* SPDX-License-Identifier: Apache-2.0 */
/* pprof export: a symbolised profile as a gzipped perftools.profiles.Profile (protobuf-c). */
#include "server/query/export.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "common/array.h"
#include "common/hash.h"
#include "server/http/render.h"
#include "server/query/profile.pb-c.h"

typedef Perftools__Profiles__Profile pb_profile;
typedef Perftools__Profiles__Sample pb_sample;
typedef Perftools__Profiles__Location pb_location;
typedef Perftools__Profiles__Line pb_line;
typedef Perftools__Profiles__Function pb_function;
typedef Perftools__Profiles__Mapping pb_mapping;
typedef Perftools__Profiles__Label pb_label;
typedef Perftools__Profiles__ValueType pb_value_type;

#define LABELS_PER_SAMPLE 3 /* comm, pid, processes */

/* Everything the Profile message points to; freed by pprof_free. */
struct pprof {
	char **strings; /* string_table (owned copies) */
	size_t nstrings, strings_cap;
	struct hash_index string_index;
	pb_function *functions;
	size_t nfunctions, functions_cap;
	struct hash_index function_index;
	pb_mapping *mappings;
	size_t nmappings, mappings_cap;
	struct hash_index mapping_index;
	pb_location *locations;
	pb_line *lines; /* every location's lines, one pool (indexes; pointers set at the end) */
	size_t nlocations, locations_cap, nlines, lines_cap;
	size_t *first_line;           /* per location: its first line in the pool */
	size_t first_line_cap;
	uint64_t *location_by_frame;  /* query_location id → pprof location id (0: none yet) */
	struct hash_index synthetic_index; /* synthetic frames (id 0) by name and part */
	pb_sample *samples;
	uint64_t *sample_locations; /* every sample's location ids, one pool */
	int64_t *sample_values;     /* two per sample */
	pb_label *labels;           /* LABELS_PER_SAMPLE per sample */
	pb_label **label_ptrs;
	size_t nsamples, nsample_locations, sample_locations_cap;
	uint64_t stack[1024];       /* the stack being walked, root first */
	size_t depth;
	bool stack_cut;             /* deeper than stack[]: the root side is dropped */
	int64_t kernel_mapping_name;
};

static bool string_eq(const void *ctx, uint32_t idx)
{
	const struct { const struct pprof *pp; const char *s; } *m = ctx;

	return strcmp(m->pp->strings[idx], m->s) == 0;
}

/* The string table index of `s` (added once), as valid UTF-8 (proto3 strings must be: strict
 * decoders reject the message otherwise). -ENOMEM when out of memory. */
static int64_t intern(struct pprof *pp, const char *s)
{
	struct byte_buf clean = { 0 };
	struct { const struct pprof *pp; const char *s; } m = { pp, "" };
	uint64_t h;
	uint32_t idx;
	int64_t rc = -ENOMEM;

	render_utf8_append(&clean, s ? s : "", s ? strlen(s) : 0);
	byte_buf_append(&clean, "", 1);
	if (byte_buf_error(&clean))
		goto cleanup;
	m.s = (const char *)clean.data;
	h = sysom_hash64(m.s, clean.len - 1, 0);
	if ((idx = hash_index_find(&pp->string_index, h, string_eq, &m)) != HASH_INDEX_NONE) {
		rc = idx;
		goto cleanup;
	}
	if (SYSOM_ARRAY_RESERVE(pp->strings, pp->strings_cap, pp->nstrings, 1024))
		goto cleanup;
	if (hash_index_insert(&pp->string_index, h, (uint32_t)pp->nstrings))
		goto cleanup;
	pp->strings[pp->nstrings] = (char *)byte_buf_steal(&clean, NULL);
	rc = (int64_t)pp->nstrings++;
cleanup:
	byte_buf_free(&clean);
	return rc;
}

struct function_match {
	const struct pprof *pp;
	int64_t name, filename;
};

static bool function_match_eq(const void *ctx, uint32_t idx)
{
	const struct function_match *m = ctx;
	const pb_function *f = &m->pp->functions[idx];

	return f->name == m->name && f->filename == m->filename;
}

/* The id of the function (name, source file), added once. 0 when out of memory. */
static uint64_t function_id(struct pprof *pp, const struct symbolized_frame *fr)
{
	int64_t name = intern(pp, fr->name), file = intern(pp, fr->file);
	struct function_match m = { pp, name, file };
	uint64_t h;
	uint32_t idx;
	pb_function *f;

	if (name < 0 || file < 0)
		return 0;
	h = sysom_hash_mix((uint64_t)name, (uint64_t)file);
	if ((idx = hash_index_find(&pp->function_index, h, function_match_eq, &m)) != HASH_INDEX_NONE)
		return idx + 1;
	if (SYSOM_ARRAY_RESERVE(pp->functions, pp->functions_cap, pp->nfunctions, 1024))
		return 0;
	f = &pp->functions[pp->nfunctions];
	perftools__profiles__function__init(f);
	f->id = pp->nfunctions + 1;
	f->name = f->system_name = name;
	f->filename = file;
	if (hash_index_insert(&pp->function_index, h, (uint32_t)pp->nfunctions))
		return 0;
	return ++pp->nfunctions;
}

struct mapping_match {
	const struct pprof *pp;
	int64_t filename, build_id;
};

static bool mapping_eq(const void *ctx, uint32_t idx)
{
	const struct mapping_match *m = ctx;
	const pb_mapping *mp = &m->pp->mappings[idx];

	return mp->filename == m->filename && mp->build_id == m->build_id;
}

/* The mapping of the object a frame is in (added once), grown to cover its offset; 0 for
 * frames without an object (error and GPU frames), -1 when out of memory. */
static int64_t mapping_id(struct pprof *pp, const struct query_location *loc)
{
	const struct symbolized_frame *fr = &loc->frames[0];
	struct mapping_match m = { pp, 0, 0 };
	pb_mapping *mp;
	uint64_t h;
	uint32_t idx;

	if (fr->kind == SYMBOLIZED_ERROR || fr->kind == SYMBOLIZED_GPU || !fr->object)
		return 0;
	if ((m.filename = intern(pp, fr->object)) < 0 || (m.build_id = intern(pp, fr->build_id)) < 0)
		return -1;
	h = sysom_hash_mix((uint64_t)m.filename, (uint64_t)m.build_id);
	idx = hash_index_find(&pp->mapping_index, h, mapping_eq, &m);
	if (idx == HASH_INDEX_NONE) {
		if (SYSOM_ARRAY_RESERVE(pp->mappings, pp->mappings_cap, pp->nmappings, 64))
			return -1;
		idx = (uint32_t)pp->nmappings;
		mp = &pp->mappings[idx];
		perftools__profiles__mapping__init(mp);
		mp->id = idx + 1;
		mp->filename = m.filename;
		mp->build_id = m.build_id;
		if (hash_index_insert(&pp->mapping_index, h, idx))
			return -1;
		pp->nmappings++;
	}
	mp = &pp->mappings[idx];
	if (fr->offset >= mp->memory_limit)
		mp->memory_limit = fr->offset + 1;
	for (uint32_t k = 0; k < loc->count; k++) {
		mp->has_functions |= loc->frames[k].has_symbol_offset;
		mp->has_filenames |= loc->frames[k].file != NULL;
		mp->has_line_numbers |= loc->frames[k].line != 0;
	}
	mp->has_inline_frames |= loc->count > 1;
	return (int64_t)mp->id;
}

struct synthetic_match {
	const struct pprof *pp;
	uint64_t function;
	int64_t mapping;
};

static bool synthetic_eq(const void *ctx, uint32_t idx)
{
	const struct synthetic_match *m = ctx;
	const pb_location *l = &m->pp->locations[idx];

	return (int64_t)l->mapping_id == m->mapping &&
	       m->pp->lines[m->pp->first_line[idx]].function_id == m->function;
}

/* The pprof location of `loc` (added once); 0 when out of memory. */
static uint64_t location_id(struct pprof *pp, const struct query_location *loc)
{
	struct synthetic_match m = { pp, 0, 0 };
	uint64_t h = 0;
	pb_location *l;
	int64_t mapping;

	if (loc->id && pp->location_by_frame[loc->id])
		return pp->location_by_frame[loc->id];
	if ((mapping = mapping_id(pp, loc)) < 0)
		return 0;
	if (!loc->id) {
		/* Error and GPU frames: one location per name (and kernel/user part). */
		if (!(m.function = function_id(pp, &loc->frames[0])))
			return 0;
		m.mapping = mapping;
		h = sysom_hash_mix(m.function, (uint64_t)loc->kernel_part);
		uint32_t idx = hash_index_find(&pp->synthetic_index, h, synthetic_eq, &m);
		if (idx != HASH_INDEX_NONE)
			return idx + 1;
	}
	if (SYSOM_ARRAY_RESERVE(pp->locations, pp->locations_cap, pp->nlocations, 1024))
		return 0;
	if (pp->first_line_cap < pp->locations_cap) {
		size_t *fl = realloc(pp->first_line, pp->locations_cap * sizeof(*fl));
		if (!fl)
			return 0;
		pp->first_line = fl;
		pp->first_line_cap = pp->locations_cap;
	}
	l = &pp->locations[pp->nlocations];
	perftools__profiles__location__init(l);
	l->id = pp->nlocations + 1;
	l->mapping_id = (uint64_t)mapping;
	l->address = loc->frames[0].kind == SYMBOLIZED_ERROR || loc->frames[0].kind == SYMBOLIZED_GPU
			     ? 0 : loc->frames[0].offset;
	pp->first_line[pp->nlocations] = pp->nlines;
	/* pprof lists a location's lines innermost first, the caller they are inlined into last. */
	for (uint32_t k = loc->count; k-- > 0;) {
		const struct symbolized_frame *fr = &loc->frames[k];
		uint64_t fid = function_id(pp, fr);
		if (!fid || SYSOM_ARRAY_RESERVE(pp->lines, pp->lines_cap, pp->nlines, 1024))
			return 0;
		perftools__profiles__line__init(&pp->lines[pp->nlines]);
		pp->lines[pp->nlines].function_id = fid;
		pp->lines[pp->nlines].line = fr->file ? fr->line : 0;
		pp->nlines++;
	}
	l->n_line = loc->count;
	if (loc->id)
		pp->location_by_frame[loc->id] = l->id;
	else if (hash_index_insert(&pp->synthetic_index, h, (uint32_t)pp->nlocations))
		return 0;
	return ++pp->nlocations;
}

static int stack_push(void *arg, const struct query_location *loc)
{
	struct pprof *pp = arg;
	uint64_t id = location_id(pp, loc);

	if (!id)
		return -ENOMEM;
	if (pp->depth == sizeof(pp->stack) / sizeof(pp->stack[0])) {
		/* Deeper than any stored stack can be (frames x inline depth): keep the leaf side. */
		memmove(pp->stack, pp->stack + 1, (pp->depth - 1) * sizeof(pp->stack[0]));
		pp->depth--;
		pp->stack_cut = true;
	}
	pp->stack[pp->depth++] = id;
	return 0;
}

static void pprof_free(struct pprof *pp)
{
	for (size_t i = 0; i < pp->nstrings; i++)
		free(pp->strings[i]);
	free(pp->strings);
	hash_index_free(&pp->string_index);
	free(pp->functions);
	hash_index_free(&pp->function_index);
	free(pp->mappings);
	hash_index_free(&pp->mapping_index);
	for (size_t i = 0; i < pp->nlocations; i++)
		free(pp->locations[i].line);
	free(pp->locations);
	free(pp->lines);
	free(pp->first_line);
	free(pp->location_by_frame);
	hash_index_free(&pp->synthetic_index);
	free(pp->samples);
	free(pp->sample_locations);
	free(pp->sample_values);
	free(pp->labels);
	free(pp->label_ptrs);
}

/* gzip of `data` appended to `out`. 0 or -ENOMEM. */
static int gzip_append(const uint8_t *data, size_t len, struct byte_buf *out)
{
	z_stream z = { 0 };
	uLong bound;
	size_t at = out->len;
	int rc = 0;


	if (len > UINT32_MAX / 2)
		return -E2BIG;
	if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -ENOMEM;
	bound = deflateBound(&z, (uLong)len) + 32;
	uint8_t *dst = byte_buf_reserve(out, bound);
	if (!dst) {
		rc = byte_buf_error(out) ? byte_buf_error(out) : -ENOMEM;
		goto cleanup;
	}
	z.next_in = (Bytef *)data;
	z.avail_in = (uInt)len;
	z.next_out = dst;
	z.avail_out = (uInt)bound;
	if (deflate(&z, Z_FINISH) != Z_STREAM_END) {
		rc = -ENOMEM;
		goto cleanup;
	}
	out->len = at + z.total_out;
cleanup:
	deflateEnd(&z);
	return rc;
}

/* Points the messages at their parts, packs and compresses. */
static int pprof_pack(struct pprof *pp, pb_profile *prof, struct byte_buf *out)
{
	pb_function **functions = NULL;
	pb_mapping **mappings = NULL;
	pb_location **locations = NULL;
	pb_sample **samples = NULL;
	uint8_t *packed = NULL;
	size_t len;
	int rc = -ENOMEM;

	if (!(functions = calloc(pp->nfunctions + 1, sizeof(*functions))) ||
	    !(mappings = calloc(pp->nmappings + 1, sizeof(*mappings))) ||
	    !(locations = calloc(pp->nlocations + 1, sizeof(*locations))) ||
	    !(samples = calloc(pp->nsamples + 1, sizeof(*samples))))
		goto cleanup;
	for (size_t i = 0; i < pp->nfunctions; i++)
		functions[i] = &pp->functions[i];
	for (size_t i = 0; i < pp->nmappings; i++)
		mappings[i] = &pp->mappings[i];
	for (size_t i = 0; i < pp->nlocations; i++) {
		pb_location *l = &pp->locations[i];
		if (!(l->line = calloc(l->n_line, sizeof(*l->line))))
			goto cleanup;
		for (size_t k = 0; k < l->n_line; k++)
			l->line[k] = &pp->lines[pp->first_line[i] + k];
		locations[i] = l;
	}
	for (size_t i = 0; i < pp->nsamples; i++)
		samples[i] = &pp->samples[i];
	prof->function = functions;
	prof->n_function = pp->nfunctions;
	prof->mapping = mappings;
	prof->n_mapping = pp->nmappings;
	prof->location = locations;
	prof->n_location = pp->nlocations;
	prof->sample = samples;
	prof->n_sample = pp->nsamples;
	prof->string_table = pp->strings;
	prof->n_string_table = pp->nstrings;
	len = perftools__profiles__profile__get_packed_size(prof);
	if (!(packed = malloc(len ? len : 1)))
		goto cleanup;
	perftools__profiles__profile__pack(prof, packed);
	rc = gzip_append(packed, len, out);
cleanup:
	free(packed);
	free(functions);
	free(mappings);
	free(locations);
	free(samples);
	return rc;
}

int query_pprof_encode(const struct query_profile *p, const struct query_export_info *info,
		       struct byte_buf *out)
{
	static const char *const types[][2] = { [QUERY_PROFILE_CPU] = { "samples", "count" },
						[QUERY_PROFILE_GPU_LAUNCH] = { "launches", "count" },
						[QUERY_PROFILE_GPU_TIME] = { "gpu_time", "nanoseconds" },
						[QUERY_PROFILE_OFFCPU] = { "off_cpu", "microseconds" },
						[QUERY_PROFILE_WALL] = { "wall", "microseconds" } };
	struct pprof pp = { 0 };
	pb_profile prof = PERFTOOLS__PROFILES__PROFILE__INIT;
	pb_value_type st[2], *st_ptrs[2] = { &st[0], &st[1] }, period_type;
	size_t nstacks = query_profile_stack_count(p), nvalues;
	int64_t comment[2], label_keys[3], unit_count;
	bool cpu_ns = info->kind == QUERY_PROFILE_CPU && info->sample_hz > 0;
	uint64_t period_ns = cpu_ns ? 1000000000ull / info->sample_hz : 0;
	int rc = -ENOMEM;

	nvalues = cpu_ns ? 2 : 1;
	if (hash_index_init(&pp.string_index, 1024) || hash_index_init(&pp.function_index, 1024) ||
	    hash_index_init(&pp.mapping_index, 64) || hash_index_init(&pp.synthetic_index, 64) ||
	    !(pp.location_by_frame = calloc(query_profile_location_count(p) + 1,
					    sizeof(*pp.location_by_frame))) ||
	    !(pp.samples = calloc(nstacks + 1, sizeof(*pp.samples))) ||
	    !(pp.sample_values = calloc(nstacks * 2 + 1, sizeof(*pp.sample_values))) ||
	    !(pp.labels = calloc(nstacks * LABELS_PER_SAMPLE + 1, sizeof(*pp.labels))) ||
	    !(pp.label_ptrs = calloc(nstacks * LABELS_PER_SAMPLE + 1, sizeof(*pp.label_ptrs))))
		goto cleanup;
	if (intern(&pp, "") != 0)
		goto cleanup;
	for (int i = 0; i < 2; i++)
		perftools__profiles__value_type__init(&st[i]);
	perftools__profiles__value_type__init(&period_type);
	if ((st[0].type = intern(&pp, types[info->kind][0])) < 0 ||
	    (st[0].unit = intern(&pp, types[info->kind][1])) < 0 ||
	    (st[1].type = intern(&pp, "cpu")) < 0 || (st[1].unit = intern(&pp, "nanoseconds")) < 0 ||
	    (label_keys[0] = intern(&pp, "comm")) < 0 || (label_keys[1] = intern(&pp, "pid")) < 0 ||
	    (label_keys[2] = intern(&pp, "processes")) < 0 || (unit_count = intern(&pp, "count")) < 0)
		goto cleanup;
	/* The location id pool: sized per stack as it is walked. */
	for (size_t i = 0; i < nstacks; i++) {
		struct query_profile_stack g;
		pb_sample *s = &pp.samples[i];
		pb_label *lab = &pp.labels[i * LABELS_PER_SAMPLE];
		size_t nlabels = 0;

		query_profile_stack_get(p, i, &g);
		pp.depth = 0;
		if ((rc = query_profile_locations(p, i, stack_push, &pp)))
			goto cleanup;
		rc = -ENOMEM;
		if (SYSOM_ARRAY_RESERVE(pp.sample_locations, pp.sample_locations_cap,
					pp.nsample_locations + pp.depth, 4096))
			goto cleanup;
		perftools__profiles__sample__init(s);
		s->n_location_id = pp.depth;
		/* Offsets for now (the pool may move); pointers once all are written. */
		s->location_id = (uint64_t *)(uintptr_t)pp.nsample_locations;
		for (size_t k = 0; k < pp.depth; k++) /* leaf first */
			pp.sample_locations[pp.nsample_locations++] = pp.stack[pp.depth - 1 - k];
		s->value = &pp.sample_values[i * 2];
		s->n_value = nvalues;
		s->value[0] = (int64_t)(g.count > INT64_MAX ? INT64_MAX : g.count);
		if (cpu_ns)
			s->value[1] = g.count > (uint64_t)INT64_MAX / period_ns
					      ? INT64_MAX : (int64_t)(g.count * period_ns);
		for (int k = 0; k < LABELS_PER_SAMPLE; k++)
			perftools__profiles__label__init(&lab[k]);
		lab[nlabels].key = label_keys[0];
		if ((lab[nlabels++].str = intern(&pp, *g.comm ? g.comm : "[unknown]")) < 0)
			goto cleanup;
		if (g.pid >= 0) {
			lab[nlabels].key = label_keys[1];
			lab[nlabels++].num = g.pid;
		}
		lab[nlabels].key = label_keys[2];
		lab[nlabels].num_unit = unit_count;
		lab[nlabels++].num = (int64_t)(g.processes > INT64_MAX ? INT64_MAX : g.processes);
		s->label = &pp.label_ptrs[i * LABELS_PER_SAMPLE];
		s->n_label = nlabels;
		for (size_t k = 0; k < nlabels; k++)
			s->label[k] = &lab[k];
		pp.nsamples++;
	}
	for (size_t i = 0; i < pp.nsamples; i++)
		pp.samples[i].location_id = pp.sample_locations +
					    (uintptr_t)pp.samples[i].location_id;
	prof.sample_type = st_ptrs;
	prof.n_sample_type = nvalues;
	prof.time_nanos = info->from_ns;
	prof.duration_nanos = info->to_ns - info->from_ns;
	prof.default_sample_type = cpu_ns ? st[1].type : st[0].type;
	if (cpu_ns) {
		period_type.type = st[1].type;
		period_type.unit = st[1].unit;
		prof.period_type = &period_type;
		prof.period = (int64_t)period_ns;
	} else if (info->kind == QUERY_PROFILE_CPU) {
		period_type = st[0];
		prof.period_type = &period_type;
		prof.period = 1;
	}
	if ((comment[0] = intern(&pp, "sysom-server " SYSOM_VERSION)) < 0)
		goto cleanup;
	prof.comment = comment;
	prof.n_comment = 1;
	if (pp.stack_cut) {
		if ((comment[1] = intern(&pp, "stacks deeper than 1024 frames lost their root side")) < 0)
			goto cleanup;
		prof.n_comment = 2;
	}
	rc = pprof_pack(&pp, &prof, out);
cleanup:
	pprof_free(&pp);
	return rc;
}
