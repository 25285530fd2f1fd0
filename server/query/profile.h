/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The symbolised-profile service: aggregates samples (CPU stacks, GPU launches, GPU time) from
 * the store, resolves every distinct frame once through the symbolizer, and folds the result
 * into "stack count" lines, or two ranks' side by side ("stack count_a count_b"). The API's
 * flame graphs and the analysis (CPU-layer diff, waterline, baselines) read profiles here.
 */
#ifndef SYSOM_SERVER_QUERY_PROFILE_H
#define SYSOM_SERVER_QUERY_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"
#include "server/store/store.h"
#include "server/symbols/symbolize.h"

/* Where profiles come from; both borrowed, outliving every call that uses them. */
struct query_profiles {
	struct store *store;
	struct symbolizer *sym;
};

enum query_profile_kind {
	QUERY_PROFILE_CPU,        /* CPU samples by stack (unit: samples) */
	QUERY_PROFILE_GPU_LAUNCH, /* kernel launches by launching stack (unit: launches) */
	QUERY_PROFILE_GPU_TIME,   /* GPU kernel time by launching stack (unit: ns) */
	QUERY_PROFILE_OFFCPU,     /* blocked (off-CPU) time by stack (unit: µs) */
	QUERY_PROFILE_WALL,       /* CPU samples as time plus off-CPU time (unit: µs) */
};

/* A symbolised profile: aggregated stacks with their resolved frames. */
struct query_profile;

/*
 * Builds the profile of `kind` of the samples matching `f`, at most `limit` stacks (the
 * heaviest). Writes it to *out (free with query_profile_free) and returns 0, or a negative
 * errno (store or symbolizer error, -ENOMEM).
 */
int query_profile_build(const struct query_profiles *qp, const struct store_sample_filter *f,
			uint32_t limit, enum query_profile_kind kind, struct query_profile **out);

/* Frees a profile; accepts NULL. */
void query_profile_free(struct query_profile *p);

/* The total over all matching stacks (also those beyond the limit). */
uint64_t query_profile_total(const struct query_profile *p);

/* How many stacks the profile holds. */
size_t query_profile_stack_count(const struct query_profile *p);

/* One stack of the profile: who ran it and its weight. Strings are owned by the profile. */
struct query_profile_stack {
	const char *comm;   /* thread name */
	int64_t pid;        /* -1 when several processes were merged */
	uint64_t processes; /* processes merged into this stack */
	uint64_t count;     /* samples, launches or ns (see the kind) */
};

/* Describes stack `i` (< query_profile_stack_count). */
void query_profile_stack_get(const struct query_profile *p, size_t i,
			     struct query_profile_stack *out);

/* Called per frame, root first; `kernel_part` for frames of the kernel stack. A non-zero
 * return stops the walk and is returned. */
typedef int (*query_frame_fn)(void *arg, const struct symbolized_frame *f, bool kernel_part);

/* Walks the frames of stack `i`: user part, then kernel part (or, for a GPU profile, the
 * kernel frame "[gpu] name"). Returns 0, -ENOMEM, or what `emit` returned. */
int query_profile_frames(const struct query_profile *p, size_t i, query_frame_fn emit, void *arg);

/*
 * A stack's frames by location (what one stored frame resolved to), for encoders that keep
 * inlined calls together (pprof): `id` is 1-based and the same for every use of one resolved
 * frame within the profile (distinct ids, distinct (object, offset, leaf)); 0 for frames that
 * were never stored (why the unwind stopped, the GPU kernel of a GPU profile). `frames` are
 * root first: the function, then the calls inlined into it, innermost last.
 */
struct query_location {
	uint32_t id;
	const struct symbolized_frame *frames;
	uint32_t count; /* >= 1 */
	bool kernel_part;
};

/* Called per location, root first; a non-zero return stops the walk and is returned. */
typedef int (*query_location_fn)(void *arg, const struct query_location *loc);

/* Walks the locations of stack `i` (the same frames, in the same order, as
 * query_profile_frames). Returns 0, -ENOMEM, or what `emit` returned. */
int query_profile_locations(const struct query_profile *p, size_t i, query_location_fn emit,
			    void *arg);

/* How many distinct resolved frames the profile holds (the largest query_location id). */
size_t query_profile_location_count(const struct query_profile *p);

/* Appends the profile as folded "stack count" lines (heaviest first; lines with the same
 * names merged). 0 or -ENOMEM. */
int query_profile_folded(const struct query_profile *p, struct byte_buf *out);

/* query_profile_build + query_profile_folded. 0 or a negative errno. */
int query_folded(const struct query_profiles *qp, const struct store_sample_filter *f,
		 uint32_t limit, enum query_profile_kind kind, struct byte_buf *out);

/*
 * The CPU profiles of job ranks `a` and `b` (range: job, from, to) as folded "stack count_a
 * count_b" lines in byte order, appended to `out`. 0 or a negative errno.
 */
int query_diff_folded(const struct query_profiles *qp, const struct store_sample_filter *range,
		      int32_t a, int32_t b, uint32_t limit, struct byte_buf *out);

#endif
