/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Alert lifecycle (evaluations → firing, ongoing, resolved) and delivery to Alertmanager and
 * webhooks from one sender thread.
 *
 * Delivery is state-based, not a message queue: every alert carries, per receiver, the version
 * of it that receiver last accepted. An alert is due for a receiver when its version moved on
 * (fired, annotations changed, resolved) or, while firing, when the resend interval passed. So
 * what waits for a receiver that is down is bounded by the alerts themselves (max_alerts firing
 * plus max_alerts resolutions), never by the number of evaluations or retries, and a retry
 * always carries the newest state. The lock is never held across network I/O: the sender
 * serialises a batch under the lock, marks its alerts in flight, posts, then records the result.
 */
#include "server/alerts/alerts.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/bytes.h"
#include "common/clock.h"
#include "common/url.h"
#include "server/http/render.h"

#define IDLE_WAKE_MS 60000      /* the sender looks around at least this often */
#define MAX_BUCKETS (1u << 20)
#define RFC3339_MAX_MS 253402300799999LL /* 9999-12-31T23:59:59.999Z */
#define FNV64_OFFSET 14695981039346656037ULL
#define FNV64_PRIME 1099511628211ULL
#define LABEL_SEPARATOR 0xff    /* Prometheus' model.SeparatorByte */
#define WEBHOOK_RECEIVER "sysom"

/* What one receiver has of one alert. */
struct delivery {
	int64_t sent_ms;       /* monotonic ms of the last accepted request (resends count from it) */
	uint32_t sent_version; /* the alert's version that receiver accepted last (0: none) */
	uint16_t failures;     /* failed requests carrying the current version */
	bool done;             /* resolved and delivered, given up, or nothing to resolve there */
};

struct scope;

struct alert {
	struct alert *hnext;         /* hash chain */
	struct alert *prev, *next;   /* the scope's alerts, oldest first */
	struct alert *rprev, *rnext; /* resolutions pending, oldest first */
	struct scope *scope;
	uint64_t fp;                 /* Alertmanager fingerprint of `labels` */
	json_t *labels;              /* object of strings, names sorted */
	json_t *annotations;         /* object of strings */
	char *generator_url;         /* NULL: none */
	int64_t starts_ms, ends_ms;  /* wall clock; ends_ms once resolved */
	int64_t resolved_mono_ms;
	uint64_t seen;               /* the last evaluation of its scope that listed it */
	uint32_t version;            /* moves on with every change receivers must hear of */
	bool resolved;
	bool inflight;               /* in the batch the sender is posting now */
	bool zombie;                 /* unlinked while in flight: the sender frees it */
	struct delivery dl[];        /* one per receiver */
};

struct scope {
	struct scope *next;
	char *name;
	uint64_t hash;
	struct alert *head, *tail;
	bool pinned; /* an evaluation is walking it: not freed when it empties */
};

struct receiver {
	enum alerts_receiver_kind kind;
	char *url;
	char *origin;                 /* scheme://host:port, for events */
	/* The sender thread alone touches what follows. */
	CURL *curl;                   /* reused: its connection cache keeps the connection */
	struct curl_slist *headers;
	int64_t retry_at_ms;          /* monotonic: backing off until then */
	uint32_t backoff_ms;          /* the next backoff */
	bool down;                    /* the last request failed (events on transitions only) */
	char errbuf[CURL_ERROR_SIZE];
};

struct alerts {
	struct alerts_config cfg;     /* scalars only; the URL arrays and token are not kept */
	struct receiver *rx;
	size_t nrx;
	pthread_mutex_t lock;
	pthread_cond_t cond;          /* work for the sender, or stopping (CLOCK_MONOTONIC) */
	bool lock_ready, cond_ready, thread_started;
	pthread_t thread;
	/* Under the lock: */
	struct scope *scopes;
	struct alert **buckets;
	size_t bucket_mask;
	struct alert *rhead, *rtail;  /* resolutions pending, oldest first */
	uint64_t generation;
	bool stopping;
	int64_t flush_deadline_ms;
	struct alerts_stats stats;
};

/* One request: the alerts it carries, at the versions serialised. */
struct batch {
	struct alert *items[ALERTS_BATCH_MAX];
	uint32_t versions[ALERTS_BATCH_MAX];
	size_t n;
	char *body;
};

enum post_result { POST_OK, POST_RETRY, POST_PERMANENT };

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_status = CURLE_FAILED_INIT;

static void curl_init_once(void)
{
	curl_status = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int64_t min64(int64_t x, int64_t y)
{
	return x < y ? x : y;
}

/* ---- strings, labels, fingerprints ---------------------------------------------------------- */

static bool printable_ascii(const char *s, size_t max)
{
	size_t n = 0;

	for (; *s; s++, n++)
		if (n >= max || (unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
			return false;
	return n > 0;
}

/*
 * A JSON string of at most `max` bytes of `s`: cut at a character boundary (peers choose job
 * and node names, so values are bounded), invalid UTF-8 replaced (jansson and Alertmanager
 * refuse it). NULL only when out of memory.
 */
static json_t *text_json(const char *s, size_t max)
{
	size_t len = strnlen(s, max + 1);
	struct byte_buf clean = { 0 };
	json_t *str;

	if (len > max) {
		len = max;
		/* s[len] is the first byte left out: drop a sequence it would cut (at most 3 bytes). */
		for (int i = 0; i < 3 && len > 0 && ((unsigned char)s[len] & 0xc0) == 0x80; i++)
			len--;
	}
	str = json_stringn(s, len);
	if (str)
		return str;
	render_utf8_append(&clean, s, len);
	if (!byte_buf_error(&clean))
		str = json_stringn(clean.len ? (const char *)clean.data : "", clean.len);
	byte_buf_free(&clean);
	return str;
}

static bool present(const char *s)
{
	return s && *s;
}

/* Adds name → value when value is present; 0 or -ENOMEM. */
static int text_add(json_t *obj, const char *name, const char *value, size_t max)
{
	json_t *v;

	if (!present(value))
		return 0;
	v = text_json(value, max);
	if (!v || json_object_set_new(obj, name, v))
		return -ENOMEM;
	return 0;
}

static int key_cmp(const void *x, const void *y)
{
	return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static uint64_t fnv_add(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= FNV64_PRIME;
	}
	return h;
}

uint64_t alerts_fingerprint(const json_t *labels)
{
	const char *stack_keys[16], **keys = stack_keys;
	size_t n = json_object_size(labels), i = 0;
	uint64_t h = FNV64_OFFSET;
	const unsigned char sep = LABEL_SEPARATOR;
	const char *key;
	json_t *value;

	if (n > sizeof(stack_keys) / sizeof(stack_keys[0]) && !(keys = malloc(n * sizeof(*keys))))
		return 0;
	json_object_foreach((json_t *)labels, key, value)
		keys[i++] = key;
	qsort(keys, n, sizeof(*keys), key_cmp);
	for (i = 0; i < n; i++) {
		json_t *v = json_object_get(labels, keys[i]);
		h = fnv_add(h, keys[i], strlen(keys[i]));
		h = fnv_add(h, &sep, 1);
		if (json_is_string(v))
			h = fnv_add(h, json_string_value(v), json_string_length(v));
		h = fnv_add(h, &sep, 1);
	}
	if (keys != stack_keys)
		free(keys);
	return h;
}

/* The spec's labels in sorted name order (Alertmanager's own display order). */
static json_t *labels_build(const struct alert_spec *s)
{
	json_t *obj = json_object();
	char rank[16];

	if (!obj)
		return NULL;
	snprintf(rank, sizeof(rank), "%" PRId32, s->rank);
	if (text_add(obj, "alertname", s->alertname, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "communicator", s->communicator, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "job", s->job, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "layer", s->layer, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "node", s->node, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "rank", s->rank >= 0 ? rank : NULL, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "severity", s->severity, ALERTS_LABEL_VALUE_MAX)) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}

static json_t *annotations_build(const struct alert_spec *s)
{
	json_t *obj = json_object();

	if (!obj)
		return NULL;
	if (text_add(obj, "summary", s->summary, ALERTS_ANNOTATION_MAX) ||
	    text_add(obj, "description", s->description, ALERTS_ANNOTATION_MAX) ||
	    text_add(obj, "action", s->action, ALERTS_ANNOTATION_MAX)) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}

static bool strings_equal(const char *x, const char *y)
{
	return (!x && !y) || (x && y && strcmp(x, y) == 0);
}

/* RFC 3339 UTC with milliseconds ("2026-11-25T12:32:38.409Z"), as a JSON string; NULL when
 * out of memory. Years beyond 9999 have no RFC 3339 form: clamped. */
static json_t *time_json(int64_t ms)
{
	char date[40], text[48];
	time_t t;
	struct tm tm;

	if (ms < 0)
		ms = 0;
	if (ms > RFC3339_MAX_MS)
		ms = RFC3339_MAX_MS;
	t = (time_t)(ms / 1000);
	if (!gmtime_r(&t, &tm) || !strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm))
		snprintf(date, sizeof(date), "1970-01-01T00:00:00");
	snprintf(text, sizeof(text), "%s.%03dZ", date, (int)(ms % 1000));
	return json_string(text);
}

static json_t *fingerprint_json(uint64_t fp)
{
	char text[17];

	snprintf(text, sizeof(text), "%016" PRIx64, fp);
	return json_string(text);
}

/* ---- the alert table (under the lock) ------------------------------------------------------ */

static size_t alert_size(const struct alerts *a)
{
	return sizeof(struct alert) + a->nrx * sizeof(struct delivery);
}

static size_t bucket_of(const struct alerts *a, const struct scope *sc, uint64_t fp)
{
	uint64_t h = fp ^ (sc->hash * 0x9e3779b97f4a7c15ULL);

	return (size_t)(h ^ (h >> 29)) & a->bucket_mask;
}

static struct scope *scope_find(struct alerts *a, const char *name, uint64_t hash)
{
	for (struct scope *sc = a->scopes; sc; sc = sc->next)
		if (sc->hash == hash && strcmp(sc->name, name) == 0)
			return sc;
	return NULL;
}

static struct alert *alert_find(struct alerts *a, struct scope *sc, uint64_t fp,
				const json_t *labels)
{
	for (struct alert *al = a->buckets[bucket_of(a, sc, fp)]; al; al = al->hnext)
		if (al->scope == sc && al->fp == fp && json_equal(al->labels, labels))
			return al;
	return NULL;
}

static void alert_destroy(struct alert *al)
{
	json_decref(al->labels);
	json_decref(al->annotations);
	free(al->generator_url);
	free(al);
}

static void resolved_unlink(struct alerts *a, struct alert *al)
{
	if (al->rprev)
		al->rprev->rnext = al->rnext;
	else
		a->rhead = al->rnext;
	if (al->rnext)
		al->rnext->rprev = al->rprev;
	else
		a->rtail = al->rprev;
	al->rprev = al->rnext = NULL;
	a->stats.resolutions_pending--;
}

/* Frees `sc` when no alert is left in it and no evaluation is working on it. */
static void scope_gc(struct alerts *a, struct scope *sc)
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

/* Takes `al` out of every structure and frees it (or leaves it to the sender when it is in
 * the request being posted), and its scope with it when that was the last alert. */
static void alert_remove(struct alerts *a, struct alert *al)
{
	struct scope *sc = al->scope;
	struct alert **pp = &a->buckets[bucket_of(a, sc, al->fp)];

	while (*pp != al)
		pp = &(*pp)->hnext;
	*pp = al->hnext;
	if (al->prev)
		al->prev->next = al->next;
	else
		sc->head = al->next;
	if (al->next)
		al->next->prev = al->prev;
	else
		sc->tail = al->prev;
	if (al->resolved)
		resolved_unlink(a, al);
	else
		a->stats.active--;
	al->scope = NULL;
	scope_gc(a, sc);
	if (al->inflight)
		al->zombie = true;
	else
		alert_destroy(al);
}

/* True when no receiver still waits for this resolution. */
static bool resolution_settled(const struct alerts *a, const struct alert *al)
{
	for (size_t r = 0; r < a->nrx; r++)
		if (!al->dl[r].done)
			return false;
	return true;
}

static void alert_resolve(struct alerts *a, struct alert *al, int64_t now_ms)
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
	al->rprev = a->rtail;
	al->rnext = NULL;
	if (a->rtail)
		a->rtail->rnext = al;
	else
		a->rhead = al;
	a->rtail = al;
	if (resolution_settled(a, al))
		alert_remove(a, al);
}

/* Bounded memory while receivers are down: the oldest resolutions go first. */
static void resolutions_trim(struct alerts *a)
{
	while (a->stats.resolutions_pending > a->cfg.max_alerts) {
		struct alert *old = a->rhead;
		for (size_t r = 0; r < a->nrx; r++)
			a->stats.resolutions_abandoned_total += !old->dl[r].done;
		alert_remove(a, old);
	}
}

/* A resolved identity fires again: a new alert for receivers (new startsAt) in the same slot;
 * an undelivered resolution of the previous one is superseded. */
static void alert_refire(struct alerts *a, struct alert *al, int64_t now_ms)
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

/* ---- evaluation ---------------------------------------------------------------------------- */

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
	p->labels = labels_build(s);
	p->annotations = annotations_build(s);
	p->spare = calloc(1, alert_size(a));
	if (!p->labels || !p->annotations || !p->spare)
		return -ENOMEM;
	/* A generatorURL Alertmanager cannot parse would fail the whole batch: leave it out. */
	if (present(s->generator_url) && printable_ascii(s->generator_url, ALERTS_URL_MAX) &&
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
	struct alert *al = alert_find(a, sc, p->fp, p->labels);

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
	struct alert *al = alert_find(a, sc, p->fp, p->labels);

	if (al && !al->resolved) { /* a duplicate of a spec fired in this pass */
		annotations_update(al, p);
		return;
	}
	if (a->stats.active >= a->cfg.max_alerts) {
		a->stats.dropped_total++;
		return;
	}
	if (al) {
		alert_refire(a, al, now_ms);
		json_decref(al->annotations);
		free(al->generator_url);
	} else {
		size_t b = bucket_of(a, sc, p->fp);
		al = p->spare;
		p->spare = NULL;
		al->scope = sc;
		al->fp = p->fp;
		al->labels = p->labels;
		p->labels = NULL;
		al->starts_ms = now_ms;
		al->version = 1;
		al->hnext = a->buckets[b];
		a->buckets[b] = al;
		al->prev = sc->tail;
		if (sc->tail)
			sc->tail->next = al;
		else
			sc->head = al;
		sc->tail = al;
		a->stats.active++;
		a->stats.fired_total++;
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
		if (!present(firing[i].alertname))
			return -EINVAL;
	hash = fnv_add(FNV64_OFFSET, scope, scope_len);
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
	sc = scope_find(a, scope, hash);
	if (!sc && n) {
		sc = spare_scope;
		spare_scope = NULL;
		sc->next = a->scopes;
		a->scopes = sc;
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
				alert_resolve(a, al, now_ms);
		}
		for (size_t i = 0; i < n; i++)
			if (!prep[i].ongoing)
				apply_new(a, sc, &prep[i], now_ms);
		resolutions_trim(a);
		sc->pinned = false;
		scope_gc(a, sc);
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

/* ---- payloads (under the lock) -------------------------------------------------------------- */

/* endsAt of a firing alert: as Prometheus does, 4 resend intervals ahead, so Alertmanager
 * resolves it by itself when the server stops sending (crash, network partition). */
static int64_t firing_ends_ms(const struct alerts *a, const struct alert *al, int64_t wall_now)
{
	int64_t from = wall_now > al->starts_ms ? wall_now : al->starts_ms;

	return from + 4 * (int64_t)a->cfg.resend_interval_ms;
}

/* One alert as Alertmanager's API v2 takes it; with `webhook`, as its webhook sends it. */
static json_t *alert_json(const struct alerts *a, const struct alert *al, int64_t wall_now,
			  bool webhook)
{
	json_t *obj = json_object();
	int64_t ends = al->resolved ? al->ends_ms : firing_ends_ms(a, al, wall_now);

	if (!obj)
		return NULL;
	if ((webhook &&
	     json_object_set_new(obj, "status", json_string(al->resolved ? "resolved" : "firing"))) ||
	    json_object_set(obj, "labels", al->labels) ||
	    json_object_set(obj, "annotations", al->annotations) ||
	    json_object_set_new(obj, "startsAt", time_json(al->starts_ms)) ||
	    json_object_set_new(obj, "endsAt", time_json(ends)) ||
	    (al->generator_url &&
	     json_object_set_new(obj, "generatorURL", json_string(al->generator_url))) ||
	    (webhook && json_object_set_new(obj, "fingerprint", fingerprint_json(al->fp)))) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}

/* The labels (or annotations) every alert of the batch has with the same value. */
static json_t *common_json(const struct batch *b, bool annotations)
{
	json_t *common = json_object();
	const json_t *first;
	const char *key;
	json_t *value;

	if (!common || b->n == 0)
		return common;
	first = annotations ? b->items[0]->annotations : b->items[0]->labels;
	json_object_foreach((json_t *)first, key, value) {
		bool everywhere = true;
		for (size_t i = 1; i < b->n && everywhere; i++) {
			const json_t *o = annotations ? b->items[i]->annotations : b->items[i]->labels;
			everywhere = json_equal(json_object_get(o, key), value);
		}
		if (everywhere && json_object_set(common, key, value)) {
			json_decref(common);
			return NULL;
		}
	}
	return common;
}

/* Alertmanager's group key for a route grouping by job: {}:{job="SCOPE"}. */
static json_t *group_key_json(const struct scope *sc)
{
	struct byte_buf key = { 0 };
	json_t *out = NULL;

	byte_buf_printf(&key, "{}:{job=\"");
	for (const char *p = sc->name; *p; p++) {
		if (*p == '"' || *p == '\\')
			byte_buf_append(&key, "\\", 1);
		byte_buf_append(&key, p, 1);
	}
	byte_buf_printf(&key, "\"}");
	byte_buf_append(&key, "", 1);
	if (!byte_buf_error(&key))
		out = text_json((const char *)key.data, key.len);
	byte_buf_free(&key);
	return out;
}

/* Alertmanager's webhook message (version 4) for the batch, all of one scope. */
static json_t *webhook_json(const struct alerts *a, const struct batch *b, size_t truncated,
			    int64_t wall_now)
{
	const struct scope *sc = b->items[0]->scope;
	json_t *msg = json_object(), *list = json_array(), *group = json_object();
	bool firing = false;

	if (!msg || !list || !group)
		goto fail;
	for (size_t i = 0; i < b->n; i++) {
		firing |= !b->items[i]->resolved;
		if (json_array_append_new(list, alert_json(a, b->items[i], wall_now, true)))
			goto fail;
	}
	if (json_object_set_new(group, "job", text_json(sc->name, ALERTS_SCOPE_MAX)) ||
	    json_object_set_new(msg, "version", json_string("4")) ||
	    json_object_set_new(msg, "groupKey", group_key_json(sc)) ||
	    json_object_set_new(msg, "truncatedAlerts", json_integer((json_int_t)truncated)) ||
	    json_object_set_new(msg, "status", json_string(firing ? "firing" : "resolved")) ||
	    json_object_set_new(msg, "receiver", json_string(WEBHOOK_RECEIVER)) ||
	    json_object_set(msg, "groupLabels", group) ||
	    json_object_set_new(msg, "commonLabels", common_json(b, false)) ||
	    json_object_set_new(msg, "commonAnnotations", common_json(b, true)) ||
	    json_object_set_new(msg, "externalURL", json_string("")) ||
	    json_object_set(msg, "alerts", list))
		goto fail;
	json_decref(list);
	json_decref(group);
	return msg;
fail:
	json_decref(msg);
	json_decref(list);
	json_decref(group);
	return NULL;
}

/* ---- the sender thread ---------------------------------------------------------------------- */

/* Whether receiver `ri` must be sent `al` now; otherwise lowers *wake to when it will. */
static bool alert_due(const struct alerts *a, const struct alert *al, size_t ri, int64_t now,
		      bool flushing, int64_t *wake)
{
	const struct delivery *d = &al->dl[ri];
	int64_t resend_at = d->sent_ms + (int64_t)a->cfg.resend_interval_ms;

	if (d->done || al->inflight)
		return false;
	if (al->resolved)
		return true; /* not done: the resolution has not been accepted */
	if (flushing)
		return false; /* stopping: only resolutions are worth the wait */
	if (d->sent_version != al->version || now >= resend_at)
		return true;
	*wake = min64(*wake, resend_at);
	return false;
}

static void batch_add(struct batch *b, struct alert *al)
{
	b->items[b->n] = al;
	b->versions[b->n] = al->version;
	b->n++;
}

/* The Alertmanager batch: up to ALERTS_BATCH_MAX due alerts of any scope. */
static void collect_alertmanager(struct alerts *a, size_t ri, int64_t now, bool flushing,
				 int64_t *wake, struct batch *b)
{
	for (struct scope *sc = a->scopes; sc; sc = sc->next)
		for (struct alert *al = sc->head; al; al = al->next)
			if (alert_due(a, al, ri, now, flushing, wake)) {
				batch_add(b, al);
				if (b->n == ALERTS_BATCH_MAX)
					return;
			}
}

/*
 * The webhook batch: like Alertmanager's notifications, a message carries its whole group (the
 * scope's firing alerts and its resolutions this receiver has not accepted), not only what is
 * due, so a consumer always sees the job's current state. Due alerts go first when the group
 * is larger than a batch; *truncated counts the rest.
 */
static void collect_webhook(struct alerts *a, size_t ri, int64_t now, bool flushing,
			    int64_t *wake, struct batch *b, size_t *truncated)
{
	for (struct scope *sc = a->scopes; sc; sc = sc->next) {
		bool any = false;
		for (struct alert *al = sc->head; al; al = al->next)
			if (alert_due(a, al, ri, now, flushing, wake)) {
				any = true;
				if (b->n < ALERTS_BATCH_MAX)
					batch_add(b, al);
			}
		if (!any)
			continue;
		for (struct alert *al = sc->head; al; al = al->next) {
			bool member = !al->dl[ri].done && (!flushing || al->resolved);
			bool taken = false;
			for (size_t i = 0; i < b->n && !taken; i++)
				taken = b->items[i] == al;
			if (!member || taken)
				continue;
			if (b->n < ALERTS_BATCH_MAX)
				batch_add(b, al);
			else
				(*truncated)++;
		}
		return;
	}
}

/* Fills `b` for receiver `ri` and serialises it; b->n == 0 when nothing is due. 0 or
 * -ENOMEM. The alerts taken are marked in flight. */
static int collect(struct alerts *a, size_t ri, int64_t now, bool flushing, int64_t *wake,
		   struct batch *b)
{
	int64_t wall_now = sysom_realtime_ms();
	size_t truncated = 0;
	json_t *doc = NULL;

	b->n = 0;
	b->body = NULL;
	if (a->rx[ri].kind == ALERTS_ALERTMANAGER) {
		collect_alertmanager(a, ri, now, flushing, wake, b);
		if (b->n && (doc = json_array()))
			for (size_t i = 0; i < b->n; i++)
				if (json_array_append_new(doc, alert_json(a, b->items[i], wall_now,
									  false))) {
					json_decref(doc);
					doc = NULL;
					break;
				}
	} else {
		collect_webhook(a, ri, now, flushing, wake, b, &truncated);
		if (b->n)
			doc = webhook_json(a, b, truncated, wall_now);
	}
	if (!b->n)
		return 0;
	b->body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (!b->body) {
		b->n = 0;
		return -ENOMEM;
	}
	for (size_t i = 0; i < b->n; i++)
		b->items[i]->inflight = true;
	return 0;
}

static size_t discard(char *data, size_t size, size_t n, void *ctx)
{
	(void)data;
	(void)ctx;
	return size * n;
}

/* Posts `body` (no lock held). */
static enum post_result post(struct receiver *rx, const char *body, uint32_t timeout_ms,
			     int *status, char *msg, size_t msglen)
{
	CURL *h = rx->curl;
	enum post_result res;
	long code = 0;
	CURLcode rc;

	*status = 0;
	/* Reset keeps the live connection; every option is set again below. */
	curl_easy_reset(h);
	rx->errbuf[0] = '\0';
	curl_easy_setopt(h, CURLOPT_URL, rx->url);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, rx->errbuf);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "sysom-server/" SYSOM_VERSION);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, rx->headers);
	curl_easy_setopt(h, CURLOPT_POST, 1L);
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	/* Answers are not read: a receiver's body can cost time (bounded by the timeout),
	 * never memory. */
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
	rc = curl_easy_perform(h);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);
	if (rc != CURLE_OK) {
		snprintf(msg, msglen, "%s", rx->errbuf[0] ? rx->errbuf : curl_easy_strerror(rc));
		return POST_RETRY;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	*status = (int)code;
	if (code >= 200 && code < 300)
		return POST_OK;
	/* Overload and server-side trouble pass; other answers (400: Alertmanager refused an
	 * alert, 401/404: misconfiguration) would only repeat. */
	res = code == 408 || code == 429 || code >= 500 ? POST_RETRY : POST_PERMANENT;
	snprintf(msg, msglen, "HTTP status %ld", code);
	return res;
}

/* Records the outcome of a request (under the lock). */
static void apply(struct alerts *a, size_t ri, struct batch *b, enum post_result res,
		  int64_t now)
{
	struct receiver *rx = &a->rx[ri];

	if (res == POST_OK)
		a->stats.notifications_ok[rx->kind]++;
	else
		a->stats.notifications_error[rx->kind]++;
	for (size_t i = 0; i < b->n; i++) {
		struct alert *al = b->items[i];
		struct delivery *d;
		bool current;

		al->inflight = false;
		if (al->zombie) {
			alert_destroy(al);
			continue;
		}
		d = &al->dl[ri];
		current = b->versions[i] == al->version;
		if (res == POST_RETRY) {
			if (current && d->failures < UINT16_MAX)
				d->failures++;
			continue;
		}
		d->sent_version = b->versions[i];
		d->sent_ms = now;
		if (current)
			d->failures = 0;
		if (al->resolved && current && !d->done) {
			d->done = true;
			if (res == POST_PERMANENT)
				a->stats.resolutions_abandoned_total++;
		}
	}
	if (res == POST_RETRY) {
		rx->retry_at_ms = now + rx->backoff_ms;
		rx->backoff_ms = rx->backoff_ms >= a->cfg.retry_max_ms / 2 ? a->cfg.retry_max_ms
									  : rx->backoff_ms * 2;
	} else {
		rx->retry_at_ms = 0;
		rx->backoff_ms = a->cfg.retry_initial_ms;
	}
	free(b->body);
	b->body = NULL;
	b->n = 0;
}

/* Gives up resolutions past the bound and frees the ones every receiver settled. */
static void reap(struct alerts *a, int64_t now)
{
	for (struct alert *al = a->rhead, *next; al; al = next) {
		next = al->rnext;
		for (size_t r = 0; r < a->nrx; r++) {
			struct delivery *d = &al->dl[r];
			if (!d->done && d->failures >= a->cfg.resolve_attempts &&
			    now - al->resolved_mono_ms >= (int64_t)a->cfg.resolve_max_age_ms) {
				d->done = true;
				a->stats.resolutions_abandoned_total++;
			}
		}
		if (resolution_settled(a, al))
			alert_remove(a, al);
	}
}

/* Tells the owner when a receiver starts failing or delivers again (no lock held). */
static void event_maybe(struct alerts *a, struct receiver *rx, enum post_result res, int status,
			const char *msg)
{
	bool up = res == POST_OK;
	struct alerts_event ev = { .kind = rx->kind, .receiver = rx->origin, .up = up,
				   .status = status, .message = up ? "" : msg };

	if (up == !rx->down)
		return;
	rx->down = !up;
	if (a->cfg.on_event)
		a->cfg.on_event(a->cfg.event_ctx, &ev);
}

static void cond_wait_until(struct alerts *a, int64_t when_ms)
{
	struct timespec ts = { .tv_sec = when_ms / 1000, .tv_nsec = (when_ms % 1000) * 1000000L };

	pthread_cond_timedwait(&a->cond, &a->lock, &ts);
}

static void *sender_main(void *arg)
{
	struct alerts *a = arg;
	struct batch b = { 0 };
	char msg[CURL_ERROR_SIZE + 64];

	pthread_mutex_lock(&a->lock);
	for (;;) {
		int64_t now = sysom_monotonic_ms(), wake = now + IDLE_WAKE_MS;
		bool flushing = a->stopping, sent = false;

		if (flushing && (now >= a->flush_deadline_ms || a->stats.resolutions_pending == 0))
			break;
		reap(a, now);
		for (size_t ri = 0; ri < a->nrx; ri++) {
			struct receiver *rx = &a->rx[ri];
			uint32_t timeout = a->cfg.timeout_ms;
			enum post_result res;
			int status;

			if (rx->retry_at_ms > now) {
				wake = min64(wake, rx->retry_at_ms);
				continue;
			}
			if (collect(a, ri, now, flushing, &wake, &b)) {
				/* Out of memory: try again later rather than spin. */
				wake = min64(wake, now + a->cfg.retry_initial_ms);
				continue;
			}
			if (!b.n)
				continue;
			if (flushing && a->flush_deadline_ms - now < (int64_t)timeout)
				timeout = (uint32_t)(a->flush_deadline_ms - now) + 1;
			pthread_mutex_unlock(&a->lock);
			res = post(rx, b.body, timeout, &status, msg, sizeof(msg));
			event_maybe(a, rx, res, status, msg);
			pthread_mutex_lock(&a->lock);
			now = sysom_monotonic_ms();
			apply(a, ri, &b, res, now);
			sent = true;
		}
		if (sent)
			continue; /* more may be due: batches are bounded */
		if (flushing)
			wake = min64(wake, a->flush_deadline_ms);
		if (!a->stopping || flushing)
			cond_wait_until(a, wake);
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

/* ---- setup and queries ---------------------------------------------------------------------- */

/* "scheme://host:port" of a valid URL, without user info, path or query. */
static char *origin_of(const char *url)
{
	const char *host = strstr(url, "://") + 3;
	size_t len = strcspn(host, "/?#");
	const char *at = memchr(host, '@', len);
	char *out;

	if (at) {
		len -= (size_t)(at + 1 - host);
		host = at + 1;
	}
	if (asprintf(&out, "%.*s%.*s", (int)(strstr(url, "://") + 3 - url), url, (int)len,
		     host) < 0)
		return NULL;
	return out;
}

static int receiver_init(struct receiver *rx, enum alerts_receiver_kind kind, const char *url,
			 const char *auth_header, uint32_t backoff_ms)
{
	size_t len = strlen(url);

	rx->kind = kind;
	rx->backoff_ms = backoff_ms;
	if (kind == ALERTS_ALERTMANAGER) {
		while (len > 0 && url[len - 1] == '/')
			len--;
		if (asprintf(&rx->url, "%.*s/api/v2/alerts", (int)len, url) < 0)
			rx->url = NULL;
	} else {
		rx->url = strdup(url);
	}
	rx->origin = origin_of(url);
	rx->curl = curl_easy_init();
	if (!rx->url || !rx->origin || !rx->curl)
		return -ENOMEM;
	/* "Expect:" drops the 100-continue round trip curl does for larger bodies. */
	const char *lines[] = { "Content-Type: application/json", "Expect:",
				kind == ALERTS_WEBHOOK ? auth_header : NULL };
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		struct curl_slist *grown;
		if (!lines[i])
			continue;
		if (!(grown = curl_slist_append(rx->headers, lines[i])))
			return -ENOMEM;
		rx->headers = grown;
	}
	return 0;
}

/* Frees what alerts_new built (the thread already joined). */
static void destroy(struct alerts *a)
{
	if (a->buckets) {
		for (struct scope *sc = a->scopes, *snext; sc; sc = snext) {
			snext = sc->next;
			for (struct alert *al = sc->head, *next; al; al = next) {
				next = al->next;
				alert_destroy(al);
			}
			free(sc->name);
			free(sc);
		}
		free(a->buckets);
	}
	for (size_t i = 0; a->rx && i < a->nrx; i++) {
		if (a->rx[i].curl)
			curl_easy_cleanup(a->rx[i].curl);
		curl_slist_free_all(a->rx[i].headers);
		free(a->rx[i].url);
		free(a->rx[i].origin);
	}
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
	return !cfg->bearer_token || printable_ascii(cfg->bearer_token, ALERTS_TOKEN_MAX);
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
	pthread_once(&curl_once, curl_init_once);
	if (curl_status != CURLE_OK)
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
		if ((rc = receiver_init(&a->rx[i], am ? ALERTS_ALERTMANAGER : ALERTS_WEBHOOK, url,
					auth, a->cfg.retry_initial_ms)))
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
	if ((rc = -pthread_create(&a->thread, NULL, sender_main, a)))
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

static json_t *active_json(const struct alert *al)
{
	json_t *obj = json_object();

	if (!obj ||
	    json_object_set_new(obj, "scope", text_json(al->scope->name, ALERTS_SCOPE_MAX)) ||
	    json_object_set_new(obj, "fingerprint", fingerprint_json(al->fp)) ||
	    json_object_set_new(obj, "status", json_string("firing")) ||
	    /* Copies: the caller's thread must not share reference counts with ours. */
	    json_object_set_new(obj, "labels", json_deep_copy(al->labels)) ||
	    json_object_set_new(obj, "annotations", json_deep_copy(al->annotations)) ||
	    json_object_set_new(obj, "startsAt", time_json(al->starts_ms)) ||
	    (al->generator_url &&
	     json_object_set_new(obj, "generatorURL", json_string(al->generator_url)))) {
		json_decref(obj);
		return NULL;
	}
	return obj;
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
			if (json_array_append_new(list, active_json(al))) {
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
