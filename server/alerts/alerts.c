/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Alerts: setup and teardown, evaluations (a scope's firing set applied to the alert table)
 * and the public queries. How delivery works: server/alerts/alerts_internal.h.
 */
#include "server/alerts/alerts.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/url.h"
#include "server/alerts/alerts_internal.h"

#define MAX_BUCKETS (1u << 20)

/* ---- evaluation ---------------------------------------------------------------------------- */

static bool strings_equal(const char *x, const char *y)
{
	return (!x && !y) || (x && y && strcmp(x, y) == 0);
}

/* A spec turned into what an alert holds, built before the lock is taken. */
struct prepared {
	json_t *labels, *annotations;
	char *generator_url;
	uint64_t fp;
	struct alert *spare; /* used when the identity is new */
	bool ongoing;        /* it names an alert firing already */
};

static void prepared_free(struct prepared *p, size_t n)
{
	if (!p)
		return;
	for (size_t i = 0; i < n; i++) {
		json_decref(p[i].labels);
		json_decref(p[i].annotations);
		free(p[i].generator_url);
		free(p[i].spare);
	}
	free(p);
}

static int prepare(const struct alerts *a, const struct alert_spec *s, struct prepared *p)
{
	p->labels = alerts__labels_build(s);
	p->annotations = alerts__annotations_build(s);
	p->spare = calloc(1, alerts__alert_size(a));
	if (!p->labels || !p->annotations || !p->spare)
		return -ENOMEM;
	/* A generatorURL Alertmanager cannot parse would fail the whole batch: leave it out. */
	if (alerts__present(s->generator_url) &&
	    alerts__printable_ascii(s->generator_url, ALERTS_URL_MAX) &&
	    !(p->generator_url = strdup(s->generator_url)))
		return -ENOMEM;
	p->fp = alerts_fingerprint(p->labels);
	return 0;
}

/* Takes the spec's annotations into a live alert when they differ (receivers hear of it). */
static void annotations_update(struct alert *al, struct prepared *p)
{
	if (json_equal(al->annotations, p->annotations) &&
	    strings_equal(al->generator_url, p->generator_url))
		return;
	json_decref(al->annotations);
	free(al->generator_url);
	al->annotations = p->annotations;
	al->generator_url = p->generator_url;
	p->annotations = NULL;
	p->generator_url = NULL;
	al->version++;
}

/* First pass: a spec of an alert firing already keeps it (under the lock). True when found. */
static bool apply_ongoing(struct alerts *a, struct scope *sc, struct prepared *p)
{
	struct alert *al = alerts__alert_find(a, sc, p->fp, p->labels);

	if (!al || al->resolved)
		return false;
	al->seen = a->generation;
	annotations_update(al, p);
	return true;
}

/* Last pass, once the scope's ended alerts are resolved (their room is free again): a spec
 * without a live alert fires one (under the lock; allocates nothing). */
static void apply_new(struct alerts *a, struct scope *sc, struct prepared *p, int64_t now_ms)
{
	struct alert *al = alerts__alert_find(a, sc, p->fp, p->labels);

	if (al && !al->resolved) { /* a duplicate of a spec fired in this pass */
		annotations_update(al, p);
		return;
	}
	if (a->stats.active >= a->cfg.max_alerts) {
		a->stats.dropped_total++;
		return;
	}
	if (al) {
		alerts__alert_refire(a, al, now_ms);
		json_decref(al->annotations);
		free(al->generator_url);
	} else {
		al = p->spare;
		p->spare = NULL;
		al->fp = p->fp;
		al->labels = p->labels;
		p->labels = NULL;
		al->starts_ms = now_ms;
		al->version = 1;
		alerts__alert_insert(a, sc, al);
	}
	al->annotations = p->annotations;
	al->generator_url = p->generator_url;
	p->annotations = NULL;
	p->generator_url = NULL;
	al->seen = a->generation;
}

int alerts_evaluate(struct alerts *a, const char *scope, const struct alert_spec *firing,
		    size_t n, int64_t now_ms)
{
	struct prepared *prep = NULL;
	struct scope *sc, *spare_scope = NULL;
	size_t scope_len;
	uint64_t hash;
	int rc = 0;

	if (!a || !scope || (n && !firing))
		return -EINVAL;
	scope_len = strnlen(scope, ALERTS_SCOPE_MAX + 1);
	if (scope_len > ALERTS_SCOPE_MAX)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < n; i++)
		if (!alerts__present(firing[i].alertname))
			return -EINVAL;
	hash = alerts__fnv_add(ALERTS__FNV64_OFFSET, scope, scope_len);
	/* Everything that allocates happens here, so the update below cannot fail halfway. */
	if (n) {
		prep = calloc(n, sizeof(*prep));
		spare_scope = calloc(1, sizeof(*spare_scope));
		if (!prep || !spare_scope || !(spare_scope->name = strdup(scope))) {
			rc = -ENOMEM;
			goto cleanup;
		}
		spare_scope->hash = hash;
		for (size_t i = 0; i < n; i++)
			if ((rc = prepare(a, &firing[i], &prep[i])))
				goto cleanup;
	}

	pthread_mutex_lock(&a->lock);
	sc = alerts__scope_find(a, scope, hash);
	if (!sc && n) {
		sc = spare_scope;
		spare_scope = NULL;
		alerts__scope_add(a, sc);
	}
	if (sc) {
		/* Pinned: resolutions below may empty the scope while it is being walked. */
		sc->pinned = true;
		a->generation++;
		for (size_t i = 0; i < n; i++)
			prep[i].ongoing = apply_ongoing(a, sc, &prep[i]);
		/* Whatever this evaluation did not list has ended. Only `al` itself may be freed
		 * inside the loop (a resolution nobody needs to hear of). */
		for (struct alert *al = sc->head, *next; al; al = next) {
			next = al->next;
			if (!al->resolved && al->seen != a->generation)
				alerts__alert_resolve(a, al, now_ms);
		}
		for (size_t i = 0; i < n; i++)
			if (!prep[i].ongoing)
				apply_new(a, sc, &prep[i], now_ms);
		alerts__resolutions_trim(a);
		sc->pinned = false;
		alerts__scope_gc(a, sc);
	}
	pthread_cond_signal(&a->cond);
	pthread_mutex_unlock(&a->lock);
cleanup:
	prepared_free(prep, n);
	if (spare_scope) {
		free(spare_scope->name);
		free(spare_scope);
	}
	return rc;
}

int alerts_scope_forget(struct alerts *a, const char *scope)
{
	struct scope *sc;
	size_t scope_len;
	int forgotten = 0;

	if (!a || !scope)
		return -EINVAL;
	scope_len = strnlen(scope, ALERTS_SCOPE_MAX + 1);
	if (scope_len > ALERTS_SCOPE_MAX)
		return -ENAMETOOLONG;
	pthread_mutex_lock(&a->lock);
	sc = alerts__scope_find(a, scope, alerts__fnv_add(ALERTS__FNV64_OFFSET, scope, scope_len));
	if (sc) {
		sc->pinned = true;
		for (struct alert *al = sc->head, *next; al; al = next) {
			next = al->next;
			/* Resolutions still owed to a receiver are delivered: they ended while
			 * this server owned the scope. */
			if (al->resolved)
				continue;
			alerts__alert_remove(a, al);
			a->stats.handed_over_total++;
			forgotten++;
		}
		sc->pinned = false;
		alerts__scope_gc(a, sc);
	}
	pthread_mutex_unlock(&a->lock);
	return forgotten;
}

/* ---- setup and queries ---------------------------------------------------------------------- */

/* Frees what alerts_new built (the thread already joined). */
static void destroy(struct alerts *a)
{
	alerts__table_free(a);
	for (size_t i = 0; a->rx && i < a->nrx; i++)
		alerts__receiver_cleanup(&a->rx[i]);
	free(a->rx);
	if (a->cond_ready)
		pthread_cond_destroy(&a->cond);
	if (a->lock_ready)
		pthread_mutex_destroy(&a->lock);
	free(a);
}

static bool config_valid(const struct alerts_config *cfg)
{
	if (!cfg || cfg->n_alertmanagers + cfg->n_webhooks > ALERTS_MAX_RECEIVERS ||
	    cfg->n_alertmanagers > ALERTS_MAX_RECEIVERS || cfg->n_webhooks > ALERTS_MAX_RECEIVERS ||
	    (cfg->n_alertmanagers && !cfg->alertmanager_urls) ||
	    (cfg->n_webhooks && !cfg->webhook_urls))
		return false;
	for (size_t i = 0; i < cfg->n_alertmanagers; i++)
		if (!sysom_url_valid(cfg->alertmanager_urls[i], ALERTS_URL_MAX - 32))
			return false;
	for (size_t i = 0; i < cfg->n_webhooks; i++)
		if (!sysom_url_valid(cfg->webhook_urls[i], ALERTS_URL_MAX - 32))
			return false;
	return !cfg->bearer_token || alerts__printable_ascii(cfg->bearer_token, ALERTS_TOKEN_MAX);
}

static uint32_t or_default(uint32_t v, uint32_t dflt)
{
	return v ? v : dflt;
}

int alerts_new(const struct alerts_config *cfg, struct alerts **out)
{
	struct alerts *a = NULL;
	pthread_condattr_t attr;
	char *auth = NULL;
	size_t buckets = 16;
	int rc = -ENOMEM;

	if (!out || !config_valid(cfg))
		return -EINVAL;
	if (alerts__curl_init())
		return -ENOMEM;
	if (!(a = calloc(1, sizeof(*a))))
		goto cleanup;
	a->cfg = *cfg;
	a->cfg.alertmanager_urls = a->cfg.webhook_urls = NULL;
	a->cfg.bearer_token = NULL;
	a->cfg.resend_interval_ms = or_default(cfg->resend_interval_ms,
					       ALERTS_DEFAULT_RESEND_INTERVAL_MS);
	a->cfg.timeout_ms = or_default(cfg->timeout_ms, ALERTS_DEFAULT_TIMEOUT_MS);
	a->cfg.max_alerts = or_default(cfg->max_alerts, ALERTS_DEFAULT_MAX_ALERTS);
	a->cfg.retry_initial_ms = or_default(cfg->retry_initial_ms, ALERTS_DEFAULT_RETRY_INITIAL_MS);
	a->cfg.retry_max_ms = or_default(cfg->retry_max_ms, ALERTS_DEFAULT_RETRY_MAX_MS);
	if (a->cfg.retry_max_ms < a->cfg.retry_initial_ms)
		a->cfg.retry_max_ms = a->cfg.retry_initial_ms;
	a->cfg.resolve_attempts = or_default(cfg->resolve_attempts, ALERTS_DEFAULT_RESOLVE_ATTEMPTS);
	a->cfg.resolve_max_age_ms = or_default(cfg->resolve_max_age_ms,
					       ALERTS_DEFAULT_RESOLVE_MAX_AGE_MS);
	a->cfg.flush_timeout_ms = or_default(cfg->flush_timeout_ms, ALERTS_DEFAULT_FLUSH_TIMEOUT_MS);
	if (cfg->bearer_token && asprintf(&auth, "Authorization: Bearer %s", cfg->bearer_token) < 0) {
		auth = NULL;
		goto cleanup;
	}
	/* Up to 2 × max_alerts alerts live (firing plus resolutions pending): chains of ~2. */
	while (buckets < a->cfg.max_alerts && buckets < MAX_BUCKETS)
		buckets *= 2;
	a->bucket_mask = buckets - 1;
	if (!(a->buckets = calloc(buckets, sizeof(*a->buckets))))
		goto cleanup;
	a->nrx = cfg->n_alertmanagers + cfg->n_webhooks;
	if (a->nrx && !(a->rx = calloc(a->nrx, sizeof(*a->rx))))
		goto cleanup;
	for (size_t i = 0; i < a->nrx; i++) {
		bool am = i < cfg->n_alertmanagers;
		const char *url = am ? cfg->alertmanager_urls[i]
				     : cfg->webhook_urls[i - cfg->n_alertmanagers];
		if ((rc = alerts__receiver_init(&a->rx[i], am ? ALERTS_ALERTMANAGER : ALERTS_WEBHOOK,
						 url, auth, a->cfg.retry_initial_ms)))
			goto cleanup;
	}
	if ((rc = -pthread_mutex_init(&a->lock, NULL)))
		goto cleanup;
	a->lock_ready = true;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	rc = -pthread_cond_init(&a->cond, &attr);
	pthread_condattr_destroy(&attr);
	if (rc)
		goto cleanup;
	a->cond_ready = true;
	if ((rc = -pthread_create(&a->thread, NULL, alerts__sender_main, a)))
		goto cleanup;
	a->thread_started = true;
	*out = a;
	a = NULL;
cleanup:
	if (auth) {
		explicit_bzero(auth, strlen(auth));
		free(auth);
	}
	if (a)
		destroy(a);
	return rc;
}

void alerts_free(struct alerts *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	a->stopping = true;
	a->flush_deadline_ms = sysom_monotonic_ms() + a->cfg.flush_timeout_ms;
	pthread_cond_signal(&a->cond);
	pthread_mutex_unlock(&a->lock);
	if (a->thread_started)
		pthread_join(a->thread, NULL);
	destroy(a);
}

void alerts_stats_get(struct alerts *a, struct alerts_stats *out)
{
	pthread_mutex_lock(&a->lock);
	*out = a->stats;
	pthread_mutex_unlock(&a->lock);
}

json_t *alerts_active_json(struct alerts *a, const char *scope_or_null)
{
	json_t *list = json_array();

	if (!list)
		return NULL;
	pthread_mutex_lock(&a->lock);
	for (struct scope *sc = a->scopes; sc && list; sc = sc->next) {
		if (scope_or_null && strcmp(sc->name, scope_or_null) != 0)
			continue;
		for (struct alert *al = sc->head; al && list; al = al->next) {
			if (al->resolved)
				continue;
			if (json_array_append_new(list, alerts__active_json(al))) {
				json_decref(list);
				list = NULL;
			}
		}
	}
	pthread_mutex_unlock(&a->lock);
	return list;
}

int alerts_url_list_parse(const char *text, char ***urls, size_t *n)
{
	char **list = NULL;
	size_t count = 0;
	int rc = 0;

	*urls = NULL;
	*n = 0;
	for (const char *p = text; p && *p;) {
		size_t len;
		char **grown;

		p += strspn(p, " \t\n");
		len = strcspn(p, " \t\n");
		if (!len)
			break;
		if (count == ALERTS_MAX_RECEIVERS) {
			rc = -EINVAL;
			goto cleanup;
		}
		if (!(grown = realloc(list, (count + 1) * sizeof(*list)))) {
			rc = -ENOMEM;
			goto cleanup;
		}
		list = grown;
		if (!(list[count] = strndup(p, len))) {
			rc = -ENOMEM;
			goto cleanup;
		}
		count++;
		p += len;
	}
	*urls = list;
	*n = count;
	list = NULL;
cleanup:
	if (list)
		alerts_url_list_free(list, count);
	return rc;
}

void alerts_url_list_free(char **urls, size_t n)
{
	for (size_t i = 0; urls && i < n; i++)
		free(urls[i]);
	free(urls);
}
