/* SPDX-License-Identifier: Apache-2.0 */
/* Receivers and the sender thread: due alerts batched and posted, backoff, resolutions given up. */
#include "common/clock.h"
#include "server/alerts/alerts_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDLE_WAKE_MS 60000      /* the sender looks around at least this often */

enum post_result { POST_OK, POST_RETRY, POST_PERMANENT };

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_status = CURLE_FAILED_INIT;

static void curl_init_once(void)
{
	curl_status = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int alerts__curl_init(void)
{
	pthread_once(&curl_once, curl_init_once);
	return curl_status == CURLE_OK ? 0 : -ENOMEM;
}

static int64_t min64(int64_t x, int64_t y)
{
	return x < y ? x : y;
}

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
		if (b->n)
			doc = alerts__alertmanager_json(a, b, wall_now);
	} else {
		collect_webhook(a, ri, now, flushing, wake, b, &truncated);
		if (b->n)
			doc = alerts__webhook_json(a, b, truncated, wall_now);
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
			alerts__alert_destroy(al);
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
		if (alerts__resolution_settled(a, al))
			alerts__alert_remove(a, al);
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

void *alerts__sender_main(void *arg)
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

int alerts__receiver_init(struct receiver *rx, enum alerts_receiver_kind kind, const char *url,
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

void alerts__receiver_cleanup(struct receiver *rx)
{
	if (rx->curl)
		curl_easy_cleanup(rx->curl);
	curl_slist_free_all(rx->headers);
	free(rx->url);
	free(rx->origin);
}
