/* SPDX-License-Identifier: Apache-2.0 */
/* The alert table: scopes, alerts by label set, and their lifecycle (firing, resolved, freed). */
#include "common/list.h"
#include "common/clock.h"
#include "server/alerts/alerts_internal.h"

#include <stdlib.h>
#include <string.h>

size_t alerts__alert_size(const struct alerts *a)
{
	return sizeof(struct alert) + a->nrx * sizeof(struct delivery);
}

static size_t bucket_of(const struct alerts *a, const struct scope *sc, uint64_t fp)
{
	uint64_t h = fp ^ (sc->hash * 0x9e3779b97f4a7c15ULL);

	return (size_t)(h ^ (h >> 29)) & a->bucket_mask;
}

struct scope *alerts__scope_find(struct alerts *a, const char *name, uint64_t hash)
{
	for (struct scope *sc = a->scopes; sc; sc = sc->next)
		if (sc->hash == hash && strcmp(sc->name, name) == 0)
			return sc;
	return NULL;
}

struct alert *alerts__alert_find(struct alerts *a, struct scope *sc, uint64_t fp,
				 const json_t *labels)
{
	for (struct alert *al = a->buckets[bucket_of(a, sc, fp)]; al; al = al->hnext)
		if (al->scope == sc && al->fp == fp && json_equal(al->labels, labels))
			return al;
	return NULL;
}

void alerts__scope_add(struct alerts *a, struct scope *sc)
{
	sc->next = a->scopes;
	a->scopes = sc;
}

void alerts__alert_insert(struct alerts *a, struct scope *sc, struct alert *al)
{
	size_t b = bucket_of(a, sc, al->fp);

	al->scope = sc;
	al->hnext = a->buckets[b];
	a->buckets[b] = al;
	SYSOM_DLIST_PUSH_BACK(sc->head, sc->tail, al, prev, next);
	a->stats.active++;
	a->stats.fired_total++;
}

void alerts__alert_destroy(struct alert *al)
{
	json_decref(al->labels);
	json_decref(al->annotations);
	free(al->generator_url);
	free(al);
}

static void resolved_unlink(struct alerts *a, struct alert *al)
{
	SYSOM_DLIST_UNLINK(a->rhead, a->rtail, al, rprev, rnext);
	a->stats.resolutions_pending--;
}

void alerts__scope_gc(struct alerts *a, struct scope *sc)
{
	struct scope **sp = &a->scopes;

	if (sc->head || sc->pinned)
		return;
	while (*sp != sc)
		sp = &(*sp)->next;
	*sp = sc->next;
	free(sc->name);
	free(sc);
}

void alerts__alert_remove(struct alerts *a, struct alert *al)
{
	struct scope *sc = al->scope;
	struct alert **pp = &a->buckets[bucket_of(a, sc, al->fp)];

	while (*pp != al)
		pp = &(*pp)->hnext;
	*pp = al->hnext;
	SYSOM_DLIST_UNLINK(sc->head, sc->tail, al, prev, next);
	if (al->resolved)
		resolved_unlink(a, al);
	else
		a->stats.active--;
	al->scope = NULL;
	alerts__scope_gc(a, sc);
	if (al->inflight)
		al->zombie = true;
	else
		alerts__alert_destroy(al);
}

bool alerts__resolution_settled(const struct alerts *a, const struct alert *al)
{
	for (size_t r = 0; r < a->nrx; r++)
		if (!al->dl[r].done)
			return false;
	return true;
}

void alerts__alert_resolve(struct alerts *a, struct alert *al, int64_t now_ms)
{
	al->resolved = true;
	/* Alertmanager refuses an alert that ends before it starts. */
	al->ends_ms = now_ms > al->starts_ms ? now_ms : al->starts_ms;
	al->resolved_mono_ms = sysom_monotonic_ms();
	al->version++;
	for (size_t r = 0; r < a->nrx; r++) {
		/* A receiver that never accepted it firing has nothing to resolve (unless the
		 * firing is being posted right now). */
		al->dl[r].done = al->dl[r].sent_version == 0 && !al->inflight;
		al->dl[r].failures = 0;
	}
	a->stats.active--;
	a->stats.resolved_total++;
	a->stats.resolutions_pending++;
	SYSOM_DLIST_PUSH_BACK(a->rhead, a->rtail, al, rprev, rnext);
	if (alerts__resolution_settled(a, al))
		alerts__alert_remove(a, al);
}

void alerts__resolutions_trim(struct alerts *a)
{
	while (a->stats.resolutions_pending > a->cfg.max_alerts) {
		struct alert *old = a->rhead;
		for (size_t r = 0; r < a->nrx; r++)
			a->stats.resolutions_abandoned_total += !old->dl[r].done;
		alerts__alert_remove(a, old);
	}
}

void alerts__alert_refire(struct alerts *a, struct alert *al, int64_t now_ms)
{
	resolved_unlink(a, al);
	al->resolved = false;
	al->starts_ms = now_ms;
	al->ends_ms = 0;
	al->version++;
	for (size_t r = 0; r < a->nrx; r++) {
		al->dl[r].done = false;
		al->dl[r].failures = 0;
	}
	a->stats.active++;
	a->stats.fired_total++;
}

void alerts__table_free(struct alerts *a)
{
	for (struct scope *sc = a->scopes, *snext; sc; sc = snext) {
		snext = sc->next;
		for (struct alert *al = sc->head, *next; al; al = next) {
			next = al->next;
			alerts__alert_destroy(al);
		}
		free(sc->name);
		free(sc);
	}
	a->scopes = NULL;
	free(a->buckets);
	a->buckets = NULL;
}
