/* SPDX-License-Identifier: Apache-2.0 */
/* Grouping call streams of unidentified communicators by their call sequences (seqmatch.h). */
#include "server/analysis/seqmatch.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return v[n / 2];
}

/* Median |Δentry| of A's window aligned with B at offset d; UINT64_MAX when the tokens differ
 * somewhere or the overlap is too short. */
static uint64_t absdiff(int64_t x, int64_t y)
{
	return x > y ? (uint64_t)(x - y) : (uint64_t)(y - x);
}

static uint64_t offset_score(const struct seqmatch_stream *a, const struct seqmatch_stream *b,
			     int64_t d, uint64_t *scratch)
{
	size_t from = a->ncalls > SEQMATCH_WINDOW ? a->ncalls - SEQMATCH_WINDOW : 0, n = 0;
	uint64_t exits[SEQMATCH_WINDOW], entry_med;

	for (size_t i = from; i < a->ncalls; i++) {
		int64_t j = (int64_t)i + d;
		if (j < 0 || (uint64_t)j >= b->ncalls)
			continue;
		const struct seqmatch_call *x = &a->calls[i], *y = &b->calls[j];
		if (x->op != y->op || x->bytes != y->bytes)
			return UINT64_MAX;
		exits[n] = x->exit_ns && y->exit_ns ? absdiff(x->exit_ns, y->exit_ns)
						     : absdiff(x->entry_ns, y->entry_ns);
		scratch[n++] = absdiff(x->entry_ns, y->entry_ns);
	}
	if (n < SEQMATCH_MIN_OVERLAP)
		return UINT64_MAX;
	entry_med = median(scratch, n);
	uint64_t exit_med = median(exits, n);
	return exit_med < entry_med ? exit_med : entry_med;
}

/* Median spacing of a stream's consecutive calls (its window), 0 with fewer than 2. */
static uint64_t spacing(const struct seqmatch_stream *s, uint64_t *scratch)
{
	size_t from = s->ncalls > SEQMATCH_WINDOW ? s->ncalls - SEQMATCH_WINDOW : 0, n = 0;

	for (size_t i = from + 1; i < s->ncalls; i++)
		scratch[n++] = s->calls[i].entry_ns > s->calls[i - 1].entry_ns
				       ? (uint64_t)(s->calls[i].entry_ns - s->calls[i - 1].entry_ns)
				       : 0;
	return n ? median(scratch, n) : 0;
}

int seqmatch_align(const struct seqmatch_stream *a, const struct seqmatch_stream *b,
		   int64_t *d)
{
	uint64_t scratch[SEQMATCH_WINDOW], best = UINT64_MAX, second = UINT64_MAX, gap;
	int64_t best_d = 0;

	if (a->ncalls < SEQMATCH_MIN_OVERLAP || b->ncalls < SEQMATCH_MIN_OVERLAP)
		return 0;
	/* The offsets that bring A's window over B's calls at all. */
	int64_t lo = -(int64_t)a->ncalls, hi = (int64_t)b->ncalls;
	if (lo < -SEQMATCH_MAX_OFFSET + ((int64_t)b->ncalls - (int64_t)a->ncalls))
		lo = -SEQMATCH_MAX_OFFSET + ((int64_t)b->ncalls - (int64_t)a->ncalls);
	if (hi > SEQMATCH_MAX_OFFSET + ((int64_t)b->ncalls - (int64_t)a->ncalls))
		hi = SEQMATCH_MAX_OFFSET + ((int64_t)b->ncalls - (int64_t)a->ncalls);
	for (int64_t off = lo; off <= hi; off++) {
		uint64_t s = offset_score(a, b, off, scratch);
		if (s < best) {
			second = best;
			best = s;
			best_d = off;
		} else if (s < second) {
			second = s;
		}
	}
	if (best == UINT64_MAX)
		return 0;
	gap = spacing(a, scratch);
	/* Unambiguous (the next best alignment is at least twice as far apart in time) and
	 * closer than the calls' own spacing. */
	if ((second != UINT64_MAX && best * 2 >= second) || (gap && best >= gap))
		return 0;
	*d = best_d;
	return 1;
}

struct member {
	size_t stream;
	int32_t job_rank;
};

static int by_job_rank(const void *a, const void *b)
{
	const struct member *x = a, *y = b;
	int64_t rx = x->job_rank < 0 ? INT64_MAX : x->job_rank;
	int64_t ry = y->job_rank < 0 ? INT64_MAX : y->job_rank;

	if (rx != ry)
		return rx < ry ? -1 : 1;
	return x->stream < y->stream ? -1 : x->stream > y->stream;
}

int seqmatch_run(struct seqmatch_stream *s, size_t n, struct seqmatch_result *out)
{
	size_t *reps = NULL, nreps = 0, limit = n < SEQMATCH_MAX_STREAMS ? n : SEQMATCH_MAX_STREAMS;
	struct member *members = NULL;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (!s && n)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		s[i].group = -1;
		s[i].seq_offset = 0;
		s[i].rank = -1;
		s[i].nranks = 0;
	}
	if (n == 0)
		return 0;
	reps = calloc(limit, sizeof(*reps));
	members = calloc(limit, sizeof(*members));
	if (!reps || !members) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (size_t i = 0; i < limit; i++) {
		int64_t d;
		for (size_t g = 0; g < nreps; g++) {
			struct seqmatch_stream *rep = &s[reps[g]];
			if (seqmatch_align(rep, &s[i], &d)) {
				/* rep's call k is s[i]'s call k + d: s[i]'s call j is instance
				 * j - d + rep's offset. */
				s[i].group = (int32_t)g;
				s[i].seq_offset = rep->seq_offset - d;
				break;
			}
		}
		if (s[i].group < 0) {
			s[i].group = (int32_t)nreps;
			reps[nreps++] = i;
		}
	}
	/* Sizes and ranks; groups of one are no groups. */
	for (size_t g = 0; g < nreps; g++) {
		size_t m = 0;
		for (size_t i = 0; i < limit; i++)
			if (s[i].group == (int32_t)g)
				members[m++] = (struct member){ i, s[i].job_rank };
		if (m < 2) {
			s[members[0].stream].group = -1;
			s[members[0].stream].seq_offset = 0;
			out->unmatched++;
			continue;
		}
		qsort(members, m, sizeof(*members), by_job_rank);
		for (size_t k = 0; k < m; k++) {
			s[members[k].stream].rank = (int32_t)k;
			s[members[k].stream].nranks = (int32_t)m;
		}
		out->groups++;
	}
	/* Renumber the groups densely (0 .. groups-1). */
	{
		int32_t next = 0;
		for (size_t g = 0; g < nreps; g++) {
			bool used = false;
			for (size_t i = 0; i < limit; i++)
				if (s[i].group == (int32_t)g) {
					s[i].group = -2 - next; /* marked, out of the way of old ids */
					used = true;
				}
			next += used;
		}
		for (size_t i = 0; i < limit; i++)
			if (s[i].group <= -2)
				s[i].group = -2 - s[i].group;
	}
	out->unmatched += (uint32_t)(n - limit);
cleanup:
	free(reps);
	free(members);
	return rc;
}
