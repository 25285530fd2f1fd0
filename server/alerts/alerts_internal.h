/* SPDX-License-Identifier: Apache-2.0 */
/* Alerts internals shared by the files of server/alerts/: the alert table, receivers, helpers. */
#ifndef SYSOM_SERVER_ALERTS_ALERTS_INTERNAL_H
#define SYSOM_SERVER_ALERTS_ALERTS_INTERNAL_H

/*
 * Delivery is state-based, not a message queue: every alert carries, per receiver, the version
 * of it that receiver last accepted. An alert is due for a receiver when its version moved on
 * (fired, annotations changed, resolved) or, while firing, when the resend interval passed. So
 * what waits for a receiver that is down is bounded by the alerts themselves (max_alerts firing
 * plus max_alerts resolutions), never by the number of evaluations or retries, and a retry
 * always carries the newest state. The lock is never held across network I/O: the sender
 * serialises a batch under the lock, marks its alerts in flight, posts, then records the result.
 *
 * Files: labels.c (strings, label sets, fingerprints), table.c (the alert table and its
 * lifecycle, under the lock), payload.c (JSON: Alertmanager API v2, webhooks, the active list),
 * sender.c (receivers and the sender thread: batches, backoff, giving up resolutions),
 * alerts.c (setup, evaluation and the public entry points).
 */

#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

#include "server/alerts/alerts.h"

#define ALERTS__FNV64_OFFSET 14695981039346656037ULL

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

/* ---- labels.c: strings, labels, fingerprints ------------------------------------------------ */

/* True when `s` is 1 to max-1 bytes of printable ASCII without spaces. */
bool alerts__printable_ascii(const char *s, size_t max);

/* True when `s` is neither NULL nor "". */
bool alerts__present(const char *s);

/*
 * A new JSON string of at most `max` bytes of `s`: cut at a character boundary (peers choose
 * job and node names, so values are bounded), invalid UTF-8 replaced (jansson and Alertmanager
 * refuse it). NULL only when out of memory.
 */
json_t *alerts__text_json(const char *s, size_t max);

/* FNV-1a 64 of `data` continued from `h` (start from ALERTS__FNV64_OFFSET). */
uint64_t alerts__fnv_add(uint64_t h, const void *data, size_t len);

/* The spec's labels as a new object of strings, in sorted name order (Alertmanager's own
 * display order), values cut at ALERTS_LABEL_VALUE_MAX. NULL when out of memory. */
json_t *alerts__labels_build(const struct alert_spec *s);

/* The spec's annotations (summary, description, action) as a new object of strings, values
 * cut at ALERTS_ANNOTATION_MAX. NULL when out of memory. */
json_t *alerts__annotations_build(const struct alert_spec *s);

/* ---- table.c: the alert table (every function under the lock) ------------------------------- */

/* Bytes of one alert with its per-receiver deliveries (for calloc). */
size_t alerts__alert_size(const struct alerts *a);

/* The scope named `name` (`hash`: alerts__fnv_add of the name), or NULL. */
struct scope *alerts__scope_find(struct alerts *a, const char *name, uint64_t hash);

/* Links the new, empty scope `sc` (its name and hash set) into the table, which owns it. */
void alerts__scope_add(struct alerts *a, struct scope *sc);

/* Frees `sc` when no alert is left in it and no evaluation is working on it. */
void alerts__scope_gc(struct alerts *a, struct scope *sc);

/* The alert (firing or resolved) of `sc` with the label set `labels` (fingerprint `fp`), or
 * NULL. */
struct alert *alerts__alert_find(struct alerts *a, struct scope *sc, uint64_t fp,
				 const json_t *labels);

/* Links the new alert `al` (fp and labels set) into `sc` as the newest and counts it firing;
 * the table owns it. */
void alerts__alert_insert(struct alerts *a, struct scope *sc, struct alert *al);

/* Frees an alert no structure links any more. */
void alerts__alert_destroy(struct alert *al);

/* Takes `al` out of every structure and frees it (or leaves it to the sender when it is in
 * the request being posted), and its scope with it when that was the last alert. */
void alerts__alert_remove(struct alerts *a, struct alert *al);

/* Resolves the firing `al` (endsAt = now_ms, not before startsAt): a resolution pending for
 * the receivers that had it firing; removed at once when none had. */
void alerts__alert_resolve(struct alerts *a, struct alert *al, int64_t now_ms);

/* A resolved identity fires again: a new alert for receivers (new startsAt) in the same slot;
 * an undelivered resolution of the previous one is superseded. */
void alerts__alert_refire(struct alerts *a, struct alert *al, int64_t now_ms);

/* True when no receiver still waits for this resolution. */
bool alerts__resolution_settled(const struct alerts *a, const struct alert *al);

/* Bounded memory while receivers are down: the oldest resolutions beyond max_alerts are given
 * up (counted as abandoned) and removed. */
void alerts__resolutions_trim(struct alerts *a);

/* Frees every scope and alert (the sender thread already joined). */
void alerts__table_free(struct alerts *a);

/* ---- payload.c: JSON documents (under the lock) --------------------------------------------- */

/* The batch as Alertmanager's API v2 takes it: a new array of alerts. NULL when out of
 * memory. `wall_now`: wall clock ms (endsAt of firing alerts counts from it). */
json_t *alerts__alertmanager_json(const struct alerts *a, const struct batch *b,
				  int64_t wall_now);

/* Alertmanager's webhook message (version 4) for the batch, all of one scope (b->n > 0);
 * `truncated`: alerts of the group left out. A new object; NULL when out of memory. */
json_t *alerts__webhook_json(const struct alerts *a, const struct batch *b, size_t truncated,
			     int64_t wall_now);

/* A firing alert as alerts_active_json lists it: a new object sharing no references with the
 * table. NULL when out of memory. */
json_t *alerts__active_json(const struct alert *al);

/* ---- sender.c: receivers and the sender thread ---------------------------------------------- */

/* Initialises libcurl once per process. 0 or -ENOMEM. */
int alerts__curl_init(void);

/*
 * Sets up `rx` (zeroed) for `url` (valid): Alertmanager's {url}/api/v2/alerts or the webhook
 * URL itself, its origin for events, a curl handle and headers (`auth_header`, borrowed and
 * copied, for webhooks only; NULL: none). 0 or -ENOMEM; release with alerts__receiver_cleanup
 * either way.
 */
int alerts__receiver_init(struct receiver *rx, enum alerts_receiver_kind kind, const char *url,
			  const char *auth_header, uint32_t backoff_ms);

/* Frees what alerts__receiver_init set up (not `rx` itself). */
void alerts__receiver_cleanup(struct receiver *rx);

/* The sender thread (pthread_create's start routine; `arg` is the struct alerts): delivers
 * until a->stopping, then flushes resolutions until they are delivered or flush_deadline_ms. */
void *alerts__sender_main(void *arg);

#endif
