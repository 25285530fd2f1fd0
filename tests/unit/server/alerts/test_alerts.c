/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Alert lifecycle and delivery (server/alerts/): payloads as loopback receivers record them
 * (Alertmanager API v2 and the webhook format), de-duplication, re-sends, resolutions, scopes,
 * receivers that go down and come back, the memory bounds, the shutdown flush, /metrics; and
 * the whole round trip through a real Alertmanager when one is installed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#include "common/bytes.h"
#include "server/alerts/alerts.h"
#include "server/alerts/alerts_internal.h"
#include "server/metrics/metrics.h"
#include "tests/support/batch_fixture.h"
#include "tests/support/stub_http.h"

#define SCOPE "job-7"
#define GEN_URL "http://sysom.example:8080/api/v1/jobs/job-7/stragglers"
#define WAIT_MS 10000

static const struct stub_step OK200 = { 200, NULL, "", false };

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* "2026-11-25T12:32:38.409Z" → ms since the epoch; -1 when malformed. */
static int64_t parse_time(const char *text)
{
	struct tm tm = { 0 };
	const char *rest = text ? strptime(text, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
	int ms = 0, used = 0;

	if (!rest)
		return -1;
	if (*rest == '.' && sscanf(rest, ".%3d%n", &ms, &used) == 1)
		rest += used;
	if (strcmp(rest, "Z") != 0)
		return -1;
	return (int64_t)timegm(&tm) * 1000 + ms;
}

static void format_time(int64_t ms, char *out, size_t outlen)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	char date[40];

	gmtime_r(&t, &tm);
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, outlen, "%s.%03dZ", date, (int)(ms % 1000));
}

static void assert_time_is(const json_t *v, int64_t ms)
{
	char want[48];

	format_time(ms, want, sizeof(want));
	assert_true(json_is_string(v));
	assert_string_equal(json_string_value(v), want);
}

/* Request i's body as JSON (owned). */
static json_t *body_of(struct stub_http *s, size_t i)
{
	json_error_t err;
	json_t *doc;

	pthread_mutex_lock(&s->lock);
	assert_true(i < s->nreqs);
	doc = json_loadb((const char *)s->reqs[i].body, s->reqs[i].body_len, 0, &err);
	pthread_mutex_unlock(&s->lock);
	if (!doc)
		fail_msg("request %zu: not JSON: %s", i, err.text);
	return doc;
}

static const char *str_at(const json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

static char *url_of(const struct stub_http *s, const char *path)
{
	char *url;

	assert_true(asprintf(&url, "http://127.0.0.1:%u%s", s->port, path) > 0);
	return url;
}

/* A straggling rank, as the analysis reports it. */
static struct alert_spec straggler(const char *job, int32_t rank, const char *summary)
{
	struct alert_spec s = {
		.alertname = "SysomStraggler",
		.job = job,
		.node = "gpu-node-3",
		.communicator = "3f2a9c0d11e4b7a5",
		.layer = "gpu",
		.severity = "warning",
		.rank = rank,
		.summary = summary,
		.description = "rank enters AllReduce 41 ms after the median",
		.action = "check the GPU clocks of gpu-node-3",
		.generator_url = GEN_URL,
	};
	return s;
}

static json_t *straggler_labels(const char *job, int32_t rank)
{
	json_t *l = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "alertname", "SysomStraggler",
			      "communicator", "3f2a9c0d11e4b7a5", "job", job, "layer", "gpu",
			      "node", "gpu-node-3", "severity", "warning");
	char r[16];

	snprintf(r, sizeof(r), "%d", rank);
	json_object_set_new(l, "rank", json_string(r));
	return l;
}

struct events {
	pthread_mutex_t lock;
	int down, up;
	char receiver[128];
};

static void on_event(void *ctx, const struct alerts_event *ev)
{
	struct events *e = ctx;

	pthread_mutex_lock(&e->lock);
	snprintf(e->receiver, sizeof(e->receiver), "%s", ev->receiver);
	if (ev->up)
		e->up++;
	else
		e->down++;
	pthread_mutex_unlock(&e->lock);
}

static struct alerts *start(const char *am_url, const char *webhook_url, uint32_t resend_ms,
			    struct alerts_config *tune)
{
	struct alerts_config cfg = { 0 };
	struct alerts *a = NULL;

	if (tune)
		cfg = *tune;
	cfg.alertmanager_urls = am_url ? &am_url : NULL;
	cfg.n_alertmanagers = am_url ? 1 : 0;
	cfg.webhook_urls = webhook_url ? &webhook_url : NULL;
	cfg.n_webhooks = webhook_url ? 1 : 0;
	cfg.resend_interval_ms = resend_ms;
	if (!cfg.retry_initial_ms)
		cfg.retry_initial_ms = 50;
	if (!cfg.retry_max_ms)
		cfg.retry_max_ms = 200;
	assert_int_equal(alerts_new(&cfg, &a), 0);
	return a;
}

static struct alerts_stats stats(struct alerts *a)
{
	struct alerts_stats st;

	alerts_stats_get(a, &st);
	return st;
}

/* Polls until `field` of the stats is `want` (or WAIT_MS pass), then asserts it. */
#define WAIT_STAT(a, field, want)                                                 \
	do {                                                                      \
		int64_t until_ = mono_ms() + WAIT_MS;                             \
		while (stats(a).field != (want) && mono_ms() < until_)            \
			sleep_ms(5);                                              \
		assert_int_equal(stats(a).field, (want));                         \
	} while (0)

/* Polls until `field` of the stats is at least `want`, then asserts it. */
#define WAIT_STAT_MIN(a, field, want)                                             \
	do {                                                                      \
		int64_t until_ = mono_ms() + WAIT_MS;                             \
		while (stats(a).field < (want) && mono_ms() < until_)             \
			sleep_ms(5);                                              \
		assert_true(stats(a).field >= (want));                            \
	} while (0)

/* ---- Alertmanager payloads ------------------------------------------------------------------ */

/* A new alert is posted once, at once, exactly as Alertmanager's API v2 takes it. */
static void test_fire_posts_once(void **state)
{
	struct stub_http *am = stub_http_start(NULL, 0, OK200);
	char *url = url_of(am, "");
	struct alerts *a = start(url, NULL, 10000, NULL);
	struct alert_spec spec = straggler(SCOPE, 5, "rank 5 is slow");
	int64_t now = wall_ms(), before, after;
	char ctype[64];
	json_t *doc, *al, *want;

	(void)state;
	before = wall_ms();
	assert_int_equal(alerts_evaluate(a, SCOPE, &spec, 1, now), 0);
	assert_true(stub_http_wait(am, 1));
	after = wall_ms();
	assert_string_equal(am->reqs[0].method, "POST");
	assert_string_equal(am->reqs[0].path, "/api/v2/alerts");
	assert_true(stub_http_header(am, 0, "Content-Type", ctype, sizeof(ctype)));
	assert_string_equal(ctype, "application/json");

	doc = body_of(am, 0);
	assert_true(json_is_array(doc));
	assert_int_equal(json_array_size(doc), 1);
	al = json_array_get(doc, 0);
	want = straggler_labels(SCOPE, 5);
	assert_true(json_equal(json_object_get(al, "labels"), want));
	json_decref(want);
	want = json_pack("{s:s,s:s,s:s}", "summary", "rank 5 is slow", "description",
			 "rank enters AllReduce 41 ms after the median", "action",
			 "check the GPU clocks of gpu-node-3");
	assert_true(json_equal(json_object_get(al, "annotations"), want));
	json_decref(want);
	assert_time_is(json_object_get(al, "startsAt"), now);
	/* Firing: endsAt 4 resend intervals after the send, so Alertmanager ends it alone. */
	int64_t ends = parse_time(str_at(al, "endsAt"));
	assert_true(ends >= before + 40000 - 1000 && ends <= after + 40000 + 1000);
	assert_string_equal(str_at(al, "generatorURL"), GEN_URL);
	assert_null(json_object_get(al, "status")); /* webhook-only fields */
	json_decref(doc);

	/* Nothing more until the resend interval. */
	sleep_ms(300);
	assert_int_equal(stub_http_count(am), 1);
	struct alerts_stats st = stats(a);
	assert_int_equal(st.active, 1);
	assert_int_equal(st.fired_total, 1);
	assert_int_equal(st.notifications_ok[ALERTS_ALERTMANAGER], 1);
	assert_int_equal(st.notifications_error[ALERTS_ALERTMANAGER], 0);

	alerts_free(a);
	stub_http_stop(am);
	free(url);
}

/* A receiver that records when each request came. */
struct timed {
	pthread_mutex_t lock;
	int64_t at[64];
	size_t n;
};

static void timed_handler(void *ctx, const struct stub_request *req, struct stub_reply *reply)
{
	struct timed *t = ctx;

	(void)req;
	pthread_mutex_lock(&t->lock);
	if (t->n < 64)
		t->at[t->n++] = mono_ms();
	pthread_mutex_unlock(&t->lock);
	reply->status = 200;
}

/* Re-evaluating the same set creates nothing; the alert is re-sent every resend interval
 * with its first startsAt and a later endsAt. */
static void test_dedup_and_resend(void **state)
{
	struct timed t = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct stub_http *am = stub_http_start_handler(timed_handler, &t);
	char *url = url_of(am, "");
	struct alerts *a = start(url, NULL, 200, NULL);
	struct alert_spec spec[2] = { straggler(SCOPE, 3, "slow"), straggler(SCOPE, 3, "slow") };
	int64_t t0 = wall_ms(), prev_end = 0;

	(void)state;
	/* Duplicates within one evaluation are one alert too. */
	assert_int_equal(alerts_evaluate(a, SCOPE, spec, 2, t0), 0);
	for (int i = 1; i <= 16; i++) {
		sleep_ms(50);
		assert_int_equal(alerts_evaluate(a, SCOPE, spec, 1, t0 + i * 50), 0);
	}
	assert_true(stub_http_wait(am, 4));
	assert_int_equal(stats(a).fired_total, 1);
	assert_int_equal(stats(a).active, 1);
	pthread_mutex_lock(&t.lock);
	size_t n = t.n;
	for (size_t i = 1; i < n; i++)
		if (t.at[i] - t.at[i - 1] < 150)
			fail_msg("requests %zu and %zu only %" PRId64 " ms apart", i - 1, i,
				 t.at[i] - t.at[i - 1]);
	pthread_mutex_unlock(&t.lock);
	for (size_t i = 0; i < 4; i++) {
		json_t *doc = body_of(am, i), *al = json_array_get(doc, 0);
		assert_int_equal(json_array_size(doc), 1);
		assert_time_is(json_object_get(al, "startsAt"), t0);
		int64_t end = parse_time(str_at(al, "endsAt"));
		assert_true(end > prev_end);
		prev_end = end;
		json_decref(doc);
	}
	alerts_free(a);
	stub_http_stop(am);
	free(url);
}

/* Gone from the evaluation: one resolved notification (endsAt = the resolve time), then
 * silence. */
static void test_resolve(void **state)
{
	struct stub_http *am = stub_http_start(NULL, 0, OK200);
	char *url = url_of(am, "/");
	struct alerts *a = start(url, NULL, 200, NULL);
	struct alert_spec spec = straggler(SCOPE, 1, "slow");
	int64_t t0 = wall_ms(), t1 = t0 + 1234;
	json_t *doc, *al, *want, *active;

	(void)state;
	assert_int_equal(alerts_evaluate(a, SCOPE, &spec, 1, t0), 0);
	assert_true(stub_http_wait(am, 1));
	assert_int_equal(alerts_evaluate(a, SCOPE, NULL, 0, t1), 0);
	WAIT_STAT(a, resolved_total, 1);
	assert_true(stub_http_wait(am, 2));
	/* The base URL's trailing slash is not doubled. */
	assert_string_equal(am->reqs[1].path, "/api/v2/alerts");
	doc = body_of(am, stub_http_count(am) - 1);
	assert_int_equal(json_array_size(doc), 1);
	al = json_array_get(doc, 0);
	want = straggler_labels(SCOPE, 1);
	assert_true(json_equal(json_object_get(al, "labels"), want));
	json_decref(want);
	assert_time_is(json_object_get(al, "startsAt"), t0);
	assert_time_is(json_object_get(al, "endsAt"), t1);
	json_decref(doc);

	WAIT_STAT(a, notifications_ok[ALERTS_ALERTMANAGER], stub_http_count(am));
	size_t n = stub_http_count(am);
	sleep_ms(600); /* three resend intervals: a resolved alert is not re-sent */
	assert_int_equal(stub_http_count(am), n);
	struct alerts_stats st = stats(a);
	assert_int_equal(st.active, 0);
	assert_int_equal(st.resolutions_pending, 0);
	assert_int_equal(st.resolutions_abandoned_total, 0);
	active = alerts_active_json(a, NULL);
	assert_int_equal(json_array_size(active), 0);
	json_decref(active);
	alerts_free(a);
	stub_http_stop(am);
	free(url);
}

/* New annotations of an ongoing alert are sent at once; the alert stays the same one. */
static void test_annotations_update(void **state)
{
	struct stub_http *am = stub_http_start(NULL, 0, OK200);
	char *url = url_of(am, "");
	struct alerts *a = start(url, NULL, 10000, NULL);
	struct alert_spec spec = straggler(SCOPE, 2, "41 ms late");
	int64_t t0 = wall_ms();
	json_t *doc, *al;

	(void)state;
	assert_int_equal(alerts_evaluate(a, SCOPE, &spec, 1, t0), 0);
	assert_true(stub_http_wait(am, 1));
	spec.summary = "97 ms late";
	spec.cause = "frozen: its main thread neither ran nor woke"; /* a hang's cause class */
	assert_int_equal(alerts_evaluate(a, SCOPE, &spec, 1, t0 + 10000), 0);
	assert_true(stub_http_wait(am, 2));
	doc = body_of(am, 1);
	al = json_array_get(doc, 0);
	assert_string_equal(str_at(json_object_get(al, "annotations"), "summary"), "97 ms late");
	assert_string_equal(str_at(json_object_get(al, "annotations"), "cause"),
			    "frozen: its main thread neither ran nor woke");
	assert_time_is(json_object_get(al, "startsAt"), t0);
	json_decref(doc);
	assert_int_equal(alerts_evaluate(a, SCOPE, &spec, 1, t0 + 20000), 0);
	sleep_ms(300);
	assert_int_equal(stub_http_count(am), 2);
	assert_int_equal(stats(a).fired_total, 1);

	json_t *active = alerts_active_json(a, SCOPE);
	assert_int_equal(json_array_size(active), 1);
	assert_string_equal(
		str_at(json_object_get(json_array_get(active, 0), "annotations"), "summary"),
		"97 ms late");
	json_decref(active);
	alerts_free(a);
	stub_http_stop(am);
	free(url);
}

/* Each scope's evaluation resolves its own alerts only. */
static void test_scopes_independent(void **state)
{
	struct stub_http *am = stub_http_start(NULL, 0, OK200);
	char *url = url_of(am, "");
	struct alerts *a = start(url, NULL, 10000, NULL);
	struct alert_spec x = straggler("job-a", 0, "a"), y = straggler("job-b", 0, "b");
	int64_t t0 = wall_ms();
	json_t *all, *only;

	(void)state;
	assert_int_equal(alerts_evaluate(a, "job-a", &x, 1, t0), 0);
	assert_int_equal(alerts_evaluate(a, "job-b", &y, 1, t0), 0);
	/* The same label set in another scope is another alert. */
	assert_int_equal(alerts_evaluate(a, "job-c", &y, 1, t0), 0);
	assert_int_equal(stats(a).active, 3);
	assert_int_equal(alerts_evaluate(a, "job-a", NULL, 0, t0 + 1000), 0);
	assert_int_equal(alerts_evaluate(a, "job-b", &y, 1, t0 + 1000), 0);
	struct alerts_stats st = stats(a);
	assert_int_equal(st.active, 2);
	assert_int_equal(st.resolved_total, 1);
	assert_int_equal(st.fired_total, 3);

	all = alerts_active_json(a, NULL);
	assert_int_equal(json_array_size(all), 2);
	only = alerts_active_json(a, "job-a");
	assert_int_equal(json_array_size(only), 0);
	json_decref(only);
	only = alerts_active_json(a, "job-b");
	assert_int_equal(json_array_size(only), 1);
	json_t *e = json_array_get(only, 0);
	assert_string_equal(str_at(e, "scope"), "job-b");
	assert_string_equal(str_at(e, "status"), "firing");
	assert_string_equal(str_at(e, "generatorURL"), GEN_URL);
	assert_time_is(json_object_get(e, "startsAt"), t0);
	char fp[17];
	snprintf(fp, sizeof(fp), "%016" PRIx64, alerts_fingerprint(json_object_get(e, "labels")));
	assert_string_equal(str_at(e, "fingerprint"), fp);
	json_decref(only);
	json_decref(all);
	/* An unknown scope evaluated empty is nothing. */
	assert_int_equal(alerts_evaluate(a, "job-z", NULL, 0, t0), 0);
	alerts_free(a);
	stub_http_stop(am);
	free(url);
}

/* ---- webhooks ------------------------------------------------------------------------------- */

static json_t *webhook_alert_by_rank(json_t *msg, const char *rank)
{
	json_t *list = json_object_get(msg, "alerts"), *al;
	size_t i;

	json_array_foreach(list, i, al)
		if (strcmp(str_at(json_object_get(al, "labels"), "rank"), rank) == 0)
			return al;
	fail_msg("no alert of rank %s in the message", rank);
	return NULL;
}

/* Alertmanager's webhook format: the group (scope) whole, per-alert status and fingerprint,
 * common labels, the bearer token. */
static void test_webhook_format(void **state)
{
	struct stub_http *wh = stub_http_start(NULL, 0, OK200);
	char *url = url_of(wh, "/hooks/sysom?x=1");
	struct alerts_config tune = { .bearer_token = "tok-123" };
	struct alerts *a = start(NULL, url, 10000, &tune);
	struct alert_spec spec[2] = { straggler("job-w", 1, "one"), straggler("job-w", 2, "two") };
	int64_t t0 = wall_ms(), t1 = t0 + 5000, t2 = t0 + 9000;
	char auth[128], fp[17];
	json_t *msg, *al, *want;

	(void)state;
	assert_int_equal(alerts_evaluate(a, "job-w", spec, 2, t0), 0);
	assert_true(stub_http_wait(wh, 1));
	assert_string_equal(wh->reqs[0].path, "/hooks/sysom?x=1");
	assert_true(stub_http_header(wh, 0, "Authorization", auth, sizeof(auth)));
	assert_string_equal(auth, "Bearer tok-123");
	msg = body_of(wh, 0);
	assert_string_equal(str_at(msg, "version"), "4");
	assert_string_equal(str_at(msg, "status"), "firing");
	assert_string_equal(str_at(msg, "receiver"), "sysom");
	assert_string_equal(str_at(msg, "groupKey"), "{}:{job=\"job-w\"}");
	assert_int_equal(json_integer_value(json_object_get(msg, "truncatedAlerts")), 0);
	assert_string_equal(str_at(msg, "externalURL"), "");
	want = json_pack("{s:s}", "job", "job-w");
	assert_true(json_equal(json_object_get(msg, "groupLabels"), want));
	json_decref(want);
	/* Everything but the rank is common. */
	want = straggler_labels("job-w", 0);
	json_object_del(want, "rank");
	assert_true(json_equal(json_object_get(msg, "commonLabels"), want));
	json_decref(want);
	assert_null(json_object_get(json_object_get(msg, "commonAnnotations"), "summary"));
	assert_string_equal(str_at(json_object_get(msg, "commonAnnotations"), "action"),
			    "check the GPU clocks of gpu-node-3");
	assert_int_equal(json_array_size(json_object_get(msg, "alerts")), 2);
	al = webhook_alert_by_rank(msg, "2");
	assert_string_equal(str_at(al, "status"), "firing");
	assert_string_equal(str_at(json_object_get(al, "annotations"), "summary"), "two");
	assert_time_is(json_object_get(al, "startsAt"), t0);
	assert_true(parse_time(str_at(al, "endsAt")) > wall_ms());
	assert_string_equal(str_at(al, "generatorURL"), GEN_URL);
	snprintf(fp, sizeof(fp), "%016" PRIx64, alerts_fingerprint(json_object_get(al, "labels")));
	assert_string_equal(str_at(al, "fingerprint"), fp);
	json_decref(msg);

	/* Rank 2 recovers: the message still fires (rank 1) and carries rank 2 resolved. */
	assert_int_equal(alerts_evaluate(a, "job-w", spec, 1, t1), 0);
	assert_true(stub_http_wait(wh, 2));
	msg = body_of(wh, 1);
	assert_string_equal(str_at(msg, "status"), "firing");
	assert_int_equal(json_array_size(json_object_get(msg, "alerts")), 2);
	al = webhook_alert_by_rank(msg, "2");
	assert_string_equal(str_at(al, "status"), "resolved");
	assert_time_is(json_object_get(al, "endsAt"), t1);
	assert_string_equal(str_at(webhook_alert_by_rank(msg, "1"), "status"), "firing");
	json_decref(msg);

	/* Everything recovers: a resolved message with rank 1 only (rank 2 was delivered). */
	assert_int_equal(alerts_evaluate(a, "job-w", NULL, 0, t2), 0);
	assert_true(stub_http_wait(wh, 3));
	msg = body_of(wh, 2);
	assert_string_equal(str_at(msg, "status"), "resolved");
	assert_int_equal(json_array_size(json_object_get(msg, "alerts")), 1);
	al = webhook_alert_by_rank(msg, "1");
	assert_string_equal(str_at(al, "status"), "resolved");
	assert_time_is(json_object_get(al, "endsAt"), t2);
	assert_time_is(json_object_get(al, "startsAt"), t0);
	json_decref(msg);
	WAIT_STAT(a, notifications_ok[ALERTS_WEBHOOK], 3);
	assert_int_equal(stats(a).notifications_ok[ALERTS_ALERTMANAGER], 0);
	alerts_free(a);
	stub_http_stop(wh);
	free(url);
}

/* ---- failures ------------------------------------------------------------------------------- */

/* The receiver goes away (connection refused) after the alert fired; the resolution made while
 * it is down reaches it once it is back. */
static void test_receiver_down_then_up(void **state)
{
	struct events ev = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct alerts_config tune = { .on_event = on_event, .event_ctx = &ev };
	struct stub_http *am = stub_http_start(NULL, 0, OK200);
	uint16_t port = am->port;
	char *url = NULL, origin[64];
	struct alerts *a;
	struct alert_spec spec = straggler(SCOPE, 4, "slow");
	int64_t t0 = wall_ms(), t1 = t0 + 777;
	json_t *doc, *al;

	(void)state;
	/* Alertmanager behind a prefix, with user info (not in events: it is a secret). */
	assert_true(asprintf(&url, "http://user:secret@127.0.0.1:%u/am/", port) > 0);
	a = start(url, NULL, 10000, &tune);
	assert_int_equal(alerts_evaluate(a, SCOPE, &spec, 1, t0), 0);
	assert_true(stub_http_wait(am, 1));
	assert_string_equal(am->reqs[0].path, "/am/api/v2/alerts");
	WAIT_STAT(a, notifications_ok[ALERTS_ALERTMANAGER], 1);
	stub_http_stop(am);
	snprintf(origin, sizeof(origin), "http://127.0.0.1:%u", port);

	assert_int_equal(alerts_evaluate(a, SCOPE, NULL, 0, t1), 0);
	WAIT_STAT_MIN(a, notifications_error[ALERTS_ALERTMANAGER], 3); /* retried, backing off */
	assert_int_equal(stats(a).resolutions_pending, 1);
	pthread_mutex_lock(&ev.lock);
	assert_int_equal(ev.down, 1); /* told once, not per retry */
	assert_string_equal(ev.receiver, origin); /* user info and path left out */
	pthread_mutex_unlock(&ev.lock);

	am = stub_http_start_port(port, NULL, 0, OK200);
	assert_true(stub_http_wait(am, 1));
	doc = body_of(am, 0);
	assert_int_equal(json_array_size(doc), 1);
	al = json_array_get(doc, 0);
	assert_string_equal(str_at(json_object_get(al, "labels"), "rank"), "4");
	assert_time_is(json_object_get(al, "startsAt"), t0);
	assert_time_is(json_object_get(al, "endsAt"), t1);
	json_decref(doc);
	WAIT_STAT(a, notifications_ok[ALERTS_ALERTMANAGER], 2);
	struct alerts_stats st = stats(a);
	assert_int_equal(st.resolutions_pending, 0);
	assert_int_equal(st.resolutions_abandoned_total, 0);
	pthread_mutex_lock(&ev.lock);
	assert_int_equal(ev.up, 1);
	pthread_mutex_unlock(&ev.lock);
	alerts_free(a);
	stub_http_stop(am);
	free(url);
}

/* A receiver whose answer the test picks: 200, or `code` for bodies containing `refuse`. */
struct picky {
	pthread_mutex_t lock;
	int code;
	const char *refuse; /* NULL: every body */
};

static void picky_handler(void *ctx, const struct stub_request *req, struct stub_reply *reply)
{
	struct picky *p = ctx;

	pthread_mutex_lock(&p->lock);
	reply->status = 200;
	if (p->code && (!p->refuse || memmem(req->body, req->body_len, p->refuse,
					     strlen(p->refuse))))
		reply->status = p->code;
	pthread_mutex_unlock(&p->lock);
}

static void picky_set(struct picky *p, int code, const char *refuse)
{
	pthread_mutex_lock(&p->lock);
	p->code = code;
	p->refuse = refuse;
	pthread_mutex_unlock(&p->lock);
}

/* A resolution a receiver keeps failing is given up after the attempts AND the age bound. */
static void test_resolution_retry_bound(void **state)
{
	struct picky p = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct stub_http *am = stub_http_start_handler(picky_handler, &p);
	char *url = url_of(am, "");
	struct alerts_config tune = { .resolve_attempts = 3, .resolve_max_age_ms = 400 };
	struct alerts *a = start(url, NULL, 10000, &tune);
	struct alert_spec spec = straggler(SCOPE, 0, "slow");
	int64_t t0 = wall_ms(), resolved_at;

	(void)state;
	assert_int_equal(alerts_evaluate(a, SCOPE, &spec, 1, t0), 0);
	assert_true(stub_http_wait(am, 1));
	WAIT_STAT(a, notifications_ok[ALERTS_ALERTMANAGER], 1);
	picky_set(&p, 503, NULL);
	resolved_at = mono_ms();
	assert_int_equal(alerts_evaluate(a, SCOPE, NULL, 0, t0 + 1), 0);
	WAIT_STAT(a, resolutions_abandoned_total, 1);
	assert_true(mono_ms() - resolved_at >= 400);
	struct alerts_stats st = stats(a);
	assert_true(st.notifications_error[ALERTS_ALERTMANAGER] >= 3);
	assert_int_equal(st.resolutions_pending, 0);
	/* Given up: no more requests. */
	size_t n = stub_http_count(am);
	sleep_ms(400);
	assert_int_equal(stub_http_count(am), n);
	alerts_free(a);
	stub_http_stop(am);
	free(url);
}

/* An answer that retrying cannot change (400: Alertmanager refused the alert) is not retried. */
static void test_permanent_error_not_retried(void **state)
{
	struct picky p = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct stub_http *am = stub_http_start_handler(picky_handler, &p);
	char *url = url_of(am, "");
	struct alerts *a = start(url, NULL, 10000, NULL);
	struct alert_spec spec = straggler(SCOPE, 0, "slow");
	int64_t t0 = wall_ms();

	(void)state;
	assert_int_equal(alerts_evaluate(a, SCOPE, &spec, 1, t0), 0);
	assert_true(stub_http_wait(am, 1));
	WAIT_STAT(a, notifications_ok[ALERTS_ALERTMANAGER], 1);
	picky_set(&p, 400, NULL);
	assert_int_equal(alerts_evaluate(a, SCOPE, NULL, 0, t0 + 1), 0);
	WAIT_STAT(a, resolutions_abandoned_total, 1);
	sleep_ms(300);
	assert_int_equal(stub_http_count(am), 2);
	assert_int_equal(stats(a).notifications_error[ALERTS_ALERTMANAGER], 1);
	assert_int_equal(stats(a).resolutions_pending, 0);
	alerts_free(a);
	stub_http_stop(am);
	free(url);
}

/* ---- bounds --------------------------------------------------------------------------------- */

/* At most max_alerts fire; the rest are counted and dropped, again at every evaluation. */
static void test_max_alerts(void **state)
{
	struct alerts_config tune = { .max_alerts = 3 };
	struct alerts *a = start(NULL, NULL, 10000, &tune);
	struct alert_spec spec[5];
	int64_t t0 = wall_ms();
	json_t *active;

	(void)state;
	for (int i = 0; i < 5; i++)
		spec[i] = straggler(SCOPE, i, "slow");
	assert_int_equal(alerts_evaluate(a, SCOPE, spec, 5, t0), 0);
	struct alerts_stats st = stats(a);
	assert_int_equal(st.active, 3);
	assert_int_equal(st.fired_total, 3);
	assert_int_equal(st.dropped_total, 2);
	active = alerts_active_json(a, NULL);
	assert_int_equal(json_array_size(active), 3);
	json_decref(active);
	assert_int_equal(alerts_evaluate(a, SCOPE, spec, 5, t0 + 1), 0);
	st = stats(a);
	assert_int_equal(st.active, 3);
	assert_int_equal(st.fired_total, 3);
	assert_int_equal(st.dropped_total, 4);
	/* Room again once some resolve (no receivers: nothing waits for delivery). */
	assert_int_equal(alerts_evaluate(a, SCOPE, spec + 3, 2, t0 + 2), 0);
	st = stats(a);
	assert_int_equal(st.active, 2);
	assert_int_equal(st.resolved_total, 3);
	assert_int_equal(st.resolutions_pending, 0);
	/* Every new identity dropped: the scope keeps nothing. */
	assert_int_equal(alerts_evaluate(a, SCOPE, NULL, 0, t0 + 3), 0);
	assert_int_equal(alerts_evaluate(a, "other", spec, 5, t0 + 4), 0);
	assert_int_equal(stats(a).active, 3);
	alerts_free(a);
}

/* Resolutions waiting for a receiver that refuses them are bounded by max_alerts too: the
 * oldest is given up for a new one. */
static void test_pending_resolutions_bounded(void **state)
{
	struct picky p = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct stub_http *wh = stub_http_start_handler(picky_handler, &p);
	char *url = url_of(wh, "/hook");
	struct alerts_config tune = { .max_alerts = 2 };
	struct alerts *a = start(NULL, url, 10000, &tune);
	struct alert_spec sa = straggler("job-a", 0, "a"), sb = straggler("job-b", 0, "b"),
			  sc = straggler("job-c", 0, "c");
	int64_t t0 = wall_ms();

	(void)state;
	assert_int_equal(alerts_evaluate(a, "job-a", &sa, 1, t0), 0);
	assert_int_equal(alerts_evaluate(a, "job-b", &sb, 1, t0), 0);
	WAIT_STAT(a, notifications_ok[ALERTS_WEBHOOK], 2); /* one message per scope */
	/* Webhook messages are per scope: refuse those carrying a resolution. */
	picky_set(&p, 503, "\"status\":\"resolved\"");
	assert_int_equal(alerts_evaluate(a, "job-a", NULL, 0, t0 + 1), 0);
	assert_int_equal(alerts_evaluate(a, "job-c", &sc, 1, t0 + 2), 0);
	WAIT_STAT(a, notifications_ok[ALERTS_WEBHOOK], 3); /* job-c fired and was accepted */
	assert_int_equal(alerts_evaluate(a, "job-b", NULL, 0, t0 + 3), 0);
	assert_int_equal(stats(a).resolutions_pending, 2);
	assert_int_equal(stats(a).resolutions_abandoned_total, 0);
	assert_int_equal(alerts_evaluate(a, "job-c", NULL, 0, t0 + 4), 0);
	struct alerts_stats st = stats(a);
	assert_int_equal(st.resolutions_pending, 2);
	assert_int_equal(st.resolutions_abandoned_total, 1);
	assert_int_equal(st.active, 0);
	/* Back up: the two kept are delivered, the evicted one (job-a, the oldest) is not. A
	 * retry of job-a already in flight when it was evicted may still reach the receiver
	 * (nothing can call a request back), so the receiver keeps refusing job-a: what is
	 * checked is that the sender holds nothing more for it, not the race of that request. */
	picky_set(&p, 503, "\"job-a\"");
	WAIT_STAT(a, notifications_ok[ALERTS_WEBHOOK], 5);
	WAIT_STAT(a, resolutions_abandoned_total, 1);
	assert_int_equal(stats(a).resolutions_pending, 0);
	/* Then nothing more is sent: no retry of job-a (five times the longest backoff). */
	size_t n = stub_http_count(wh);
	sleep_ms(1000);
	assert_int_equal(stub_http_count(wh), n);
	assert_int_equal(stats(a).notifications_ok[ALERTS_WEBHOOK], 5);
	bool resolved_b = false, resolved_c = false;
	for (size_t i = 0; i < n; i++) {
		json_t *msg = body_of(wh, i);
		const char *job = str_at(json_object_get(msg, "groupLabels"), "job");
		bool resolved = !strcmp(str_at(msg, "status"), "resolved");
		resolved_b |= resolved && !strcmp(job, "job-b");
		resolved_c |= resolved && !strcmp(job, "job-c");
		json_decref(msg);
	}
	assert_true(resolved_b && resolved_c);
	alerts_free(a);
	stub_http_stop(wh);
	free(url);
}

/* alerts_free delivers a resolution still waiting; with the receiver down it waits no longer
 * than the flush timeout. */
static void test_free_flushes_resolutions(void **state)
{
	struct stub_http *am = stub_http_start(NULL, 0, OK200);
	char *url = url_of(am, "");
	struct alerts_config tune = { .flush_timeout_ms = 300 };
	struct alerts *a = start(url, NULL, 10000, &tune);
	struct alert_spec spec = straggler(SCOPE, 6, "slow");
	int64_t t0 = wall_ms(), start_ms;
	json_t *doc;

	(void)state;
	assert_int_equal(alerts_evaluate(a, SCOPE, &spec, 1, t0), 0);
	assert_true(stub_http_wait(am, 1));
	assert_int_equal(alerts_evaluate(a, SCOPE, NULL, 0, t0 + 50), 0);
	alerts_free(a);
	assert_true(stub_http_count(am) >= 2);
	doc = body_of(am, stub_http_count(am) - 1);
	assert_time_is(json_object_get(json_array_get(doc, 0), "endsAt"), t0 + 50);
	json_decref(doc);

	/* Down: bounded wait. */
	a = start(url, NULL, 10000, &tune);
	assert_int_equal(alerts_evaluate(a, SCOPE, &spec, 1, t0), 0);
	WAIT_STAT(a, notifications_ok[ALERTS_ALERTMANAGER], 1);
	stub_http_stop(am);
	assert_int_equal(alerts_evaluate(a, SCOPE, NULL, 0, t0 + 50), 0);
	start_ms = mono_ms();
	alerts_free(a);
	assert_true(mono_ms() - start_ms < 2000);
	free(url);
}

/* Evaluations from several threads while the sender posts and the loop thread reads. */
struct churn {
	struct alerts *a;
	char scope[16];
	unsigned seed;
};

static void *churn_main(void *arg)
{
	struct churn *c = arg;
	struct alert_spec spec[8];

	for (int round = 0; round < 150; round++) {
		size_t n = 0;
		for (int r = 0; r < 8; r++)
			if (rand_r(&c->seed) % 2)
				spec[n++] = straggler(c->scope, r, round % 3 ? "slow" : "slower");
		if (alerts_evaluate(c->a, c->scope, spec, n, wall_ms()) != 0)
			return (void *)1;
		if (round % 16 == 0)
			sleep_ms(1);
	}
	return NULL;
}

static void test_concurrent_evaluations(void **state)
{
	struct stub_http *am = stub_http_start(NULL, 0, OK200);
	char *url = url_of(am, "");
	/* Few alerts, so resolutions are pushed out while being posted. */
	struct alerts_config tune = { .max_alerts = 12 };
	struct alerts *a = start(url, NULL, 100, &tune);
	struct churn c[4];
	pthread_t t[4];

	(void)state;
	for (int i = 0; i < 4; i++) {
		c[i] = (struct churn){ .a = a, .seed = 1000u + (unsigned)i };
		snprintf(c[i].scope, sizeof(c[i].scope), "job-%d", i);
		assert_int_equal(pthread_create(&t[i], NULL, churn_main, &c[i]), 0);
	}
	for (int i = 0; i < 200; i++) {
		json_t *active = alerts_active_json(a, i % 2 ? NULL : "job-1");
		assert_non_null(active);
		assert_true(json_array_size(active) <= 12);
		json_decref(active);
		assert_true(stats(a).active <= 12);
		assert_true(stats(a).resolutions_pending <= 12);
		sleep_ms(1);
	}
	for (int i = 0; i < 4; i++) {
		void *rc;
		pthread_join(t[i], &rc);
		assert_null(rc);
		assert_int_equal(alerts_evaluate(a, c[i].scope, NULL, 0, wall_ms()), 0);
	}
	struct alerts_stats st = stats(a);
	assert_int_equal(st.active, 0);
	assert_int_equal(st.fired_total, st.resolved_total);
	assert_true(st.fired_total > 12);
	assert_true(st.dropped_total > 0);
	WAIT_STAT(a, resolutions_pending, 0);
	assert_int_equal(stats(a).notifications_error[ALERTS_ALERTMANAGER], 0);
	alerts_free(a);
	stub_http_stop(am);
	free(url);
}

/* ---- configuration, limits, metrics --------------------------------------------------------- */

static void test_config_and_arguments(void **state)
{
	const char *bad[] = { "ftp://x", "http://", "http://a b", "localhost:9093" };
	const char *many[ALERTS_MAX_RECEIVERS + 1];
	struct alerts_config cfg = { 0 };
	struct alerts *a = NULL;
	struct alert_spec spec = straggler(SCOPE, 0, "slow");
	char **urls;
	size_t n;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cfg.alertmanager_urls = &bad[i];
		cfg.n_alertmanagers = 1;
		assert_int_equal(alerts_new(&cfg, &a), -EINVAL);
	}
	for (size_t i = 0; i < ALERTS_MAX_RECEIVERS + 1; i++)
		many[i] = "http://127.0.0.1:1";
	cfg.alertmanager_urls = NULL;
	cfg.n_alertmanagers = 0;
	cfg.webhook_urls = many;
	cfg.n_webhooks = ALERTS_MAX_RECEIVERS + 1;
	assert_int_equal(alerts_new(&cfg, &a), -EINVAL);
	cfg.n_webhooks = 1;
	cfg.bearer_token = "two words";
	assert_int_equal(alerts_new(&cfg, &a), -EINVAL);

	assert_int_equal(alerts_url_list_parse("  http://a:9093 \thttp://b:9093/x  ", &urls, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(urls[0], "http://a:9093");
	assert_string_equal(urls[1], "http://b:9093/x");
	alerts_url_list_free(urls, n);
	assert_int_equal(alerts_url_list_parse(NULL, &urls, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(alerts_url_list_parse("   ", &urls, &n), 0);
	assert_int_equal(n, 0);

	a = start(NULL, NULL, 1000, NULL);
	assert_int_equal(alerts_evaluate(a, NULL, NULL, 0, 0), -EINVAL);
	assert_int_equal(alerts_evaluate(a, SCOPE, NULL, 1, 0), -EINVAL);
	spec.alertname = "";
	assert_int_equal(alerts_evaluate(a, SCOPE, &spec, 1, 0), -EINVAL);
	spec.alertname = "SysomStraggler";
	char *long_scope = malloc(ALERTS_SCOPE_MAX + 2);
	memset(long_scope, 's', ALERTS_SCOPE_MAX + 1);
	long_scope[ALERTS_SCOPE_MAX + 1] = '\0';
	assert_int_equal(alerts_evaluate(a, long_scope, &spec, 1, 0), -ENAMETOOLONG);
	free(long_scope);
	assert_int_equal(stats(a).active, 0);

	/* Peer-chosen values: bounded, valid UTF-8; a generatorURL with spaces is left out. */
	char *node = malloc(5000);
	memset(node, 'n', 4999);
	node[4999] = '\0';
	memcpy(node + 1022, "\xc3\xa9", 2); /* a 2-byte character across the 1024-byte cut */
	spec.node = node;
	spec.job = "bad\xff" "utf8";
	spec.generator_url = "http://x/with space";
	assert_int_equal(alerts_evaluate(a, SCOPE, &spec, 1, 1700000000123), 0);
	json_t *active = alerts_active_json(a, SCOPE), *e = json_array_get(active, 0);
	json_t *labels = json_object_get(e, "labels");
	assert_int_equal(strlen(str_at(labels, "node")), 1024);
	assert_string_equal(str_at(labels, "job"), "bad\xef\xbf\xbdutf8");
	assert_null(json_object_get(e, "generatorURL"));
	assert_string_equal(str_at(e, "startsAt"), "2023-11-14T22:13:20.123Z");
	json_decref(active);
	free(node);
	alerts_free(a);
	alerts_free(NULL);
}

/* The fingerprint is Alertmanager's: FNV-1a 64 over sorted names and values. */
static void test_fingerprint(void **state)
{
	json_t *l1 = json_pack("{s:s,s:s}", "job", "j1", "alertname", "X");
	json_t *l2 = json_pack("{s:s,s:s}", "alertname", "X", "job", "j1");
	json_t *empty = json_object();

	(void)state;
	/* Alertmanager 0.25 named {alertname="X", job="j1"} 38e41a060f5caa3c. */
	assert_true(alerts_fingerprint(l1) == 0x38e41a060f5caa3cULL);
	assert_true(alerts_fingerprint(l2) == 0x38e41a060f5caa3cULL);
	assert_true(alerts_fingerprint(empty) == 14695981039346656037ULL);
	json_decref(l1);
	json_decref(l2);
	json_decref(empty);
}

static void test_metrics(void **state)
{
	struct stub_http *am = stub_http_start(NULL, 0, OK200);
	char *url = url_of(am, "");
	struct alerts *a = start(url, NULL, 10000, NULL);
	struct server_metrics m = { 0 };
	struct alert_spec spec[2] = { straggler(SCOPE, 0, "a"), straggler(SCOPE, 1, "b") };
	struct byte_buf out = { 0 };
	const char *text;

	(void)state;
	server_metrics_init(&m);
	assert_int_equal(server_metrics_source_add(&m, alerts_metrics_write, a), 0);
	assert_int_equal(alerts_evaluate(a, SCOPE, spec, 2, wall_ms()), 0);
	WAIT_STAT(a, notifications_ok[ALERTS_ALERTMANAGER], 1);
	assert_int_equal(alerts_evaluate(a, SCOPE, spec, 1, wall_ms()), 0);
	WAIT_STAT(a, notifications_ok[ALERTS_ALERTMANAGER], 2);
	server_metrics_write(&m, &out);
	byte_buf_append(&out, "", 1);
	assert_int_equal(byte_buf_error(&out), 0);
	text = (const char *)out.data;
	assert_non_null(strstr(text, "# TYPE sysom_alerts_active gauge\nsysom_alerts_active 1\n"));
	assert_non_null(strstr(text, "\nsysom_alerts_fired_total 2\n"));
	assert_non_null(strstr(text, "\nsysom_alerts_resolved_total 1\n"));
	assert_non_null(strstr(text, "\nsysom_alerts_dropped_total 0\n"));
	assert_non_null(strstr(text, "# TYPE sysom_alert_notifications_total counter\n"));
	assert_non_null(strstr(
		text, "sysom_alert_notifications_total{receiver=\"alertmanager\",result=\"ok\"} 2\n"));
	assert_non_null(strstr(
		text, "sysom_alert_notifications_total{receiver=\"webhook\",result=\"error\"} 0\n"));
	byte_buf_free(&out);

	/* Without the module: no alert families. */
	m.nsources = 0;
	server_metrics_write(&m, &out);
	byte_buf_append(&out, "", 1);
	assert_null(strstr((const char *)out.data, "sysom_alert"));
	byte_buf_free(&out);
	alerts_free(a);
	stub_http_stop(am);
	free(url);
}

/* ---- a real Alertmanager -------------------------------------------------------------------- */

struct fetched {
	char *data;
	size_t len;
};

static size_t fetched_append(char *p, size_t size, size_t n, void *ctx)
{
	struct fetched *f = ctx;
	char *grown = realloc(f->data, f->len + size * n + 1);

	if (!grown)
		return 0;
	memcpy(grown + f->len, p, size * n);
	f->data = grown;
	f->len += size * n;
	f->data[f->len] = '\0';
	return size * n;
}

/* GET url: the status (0 when unreachable); the body in *body (owned) when wanted. */
static long http_get(const char *url, char **body)
{
	struct fetched f = { 0 };
	CURL *h = curl_easy_init();
	long code = 0;

	assert_non_null(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 2000L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fetched_append);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &f);
	if (curl_easy_perform(h) == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(h);
	if (body)
		*body = f.data;
	else
		free(f.data);
	return code;
}

static const char *alertmanager_binary(void)
{
	static const char *const candidates[] = { "/usr/bin/prometheus-alertmanager",
						  "/usr/local/bin/alertmanager",
						  "/usr/bin/alertmanager" };

	for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++)
		if (access(candidates[i], X_OK) == 0)
			return candidates[i];
	return NULL;
}

static uint16_t free_port(void)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
	close(fd);
	return ntohs(addr.sin_port);
}

struct am_proc {
	pid_t pid;
	uint16_t port;
	char dir[128];
	char base[64];
};

/* Starts Alertmanager on a free loopback port (a null receiver, clustering off, storage in a
 * temporary directory) and waits for /-/ready; false when it does not come up. */
static bool am_start(const char *bin, struct am_proc *am)
{
	char path[256], flag_cfg[300], flag_storage[300], flag_listen[64], log[300], ready[96];
	FILE *f;

	assert_int_equal(fixture_tmpdir_make(am->dir, sizeof(am->dir)), 0);
	snprintf(path, sizeof(path), "%s/alertmanager.yml", am->dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("route:\n  receiver: \"null\"\n  group_wait: 1s\nreceivers:\n  - name: \"null\"\n", f);
	assert_int_equal(fclose(f), 0);
	snprintf(flag_cfg, sizeof(flag_cfg), "--config.file=%s", path);
	snprintf(flag_storage, sizeof(flag_storage), "--storage.path=%s/data", am->dir);
	snprintf(log, sizeof(log), "%s/alertmanager.log", am->dir);
	/* The port is free when chosen; another process may take it first: try again then. */
	for (int attempt = 0; attempt < 3; attempt++) {
		am->port = free_port();
		snprintf(flag_listen, sizeof(flag_listen), "--web.listen-address=127.0.0.1:%u",
			 am->port);
		am->pid = fork();
		assert_true(am->pid >= 0);
		if (am->pid == 0) {
			int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
			if (fd >= 0) {
				dup2(fd, 1);
				dup2(fd, 2);
			}
			execl(bin, bin, flag_cfg, flag_storage, flag_listen,
			      "--cluster.listen-address=", (char *)NULL);
			_exit(127);
		}
		snprintf(am->base, sizeof(am->base), "http://127.0.0.1:%u", am->port);
		snprintf(ready, sizeof(ready), "%s/-/ready", am->base);
		for (int64_t until = mono_ms() + 20000; mono_ms() < until;) {
			int status;
			if (http_get(ready, NULL) == 200)
				return true;
			if (waitpid(am->pid, &status, WNOHANG) == am->pid) {
				am->pid = 0;
				break;
			}
			sleep_ms(100);
		}
		if (am->pid > 0) {
			kill(am->pid, SIGKILL);
			waitpid(am->pid, NULL, 0);
			am->pid = 0;
		}
	}
	return false;
}

static void am_stop(struct am_proc *am)
{
	if (am->pid > 0) {
		kill(am->pid, SIGTERM);
		waitpid(am->pid, NULL, 0);
		am->pid = 0;
	}
	fixture_tmpdir_remove(am->dir);
}

/* The alert in Alertmanager's list whose fingerprint is `fp`, as a new object, or NULL. */
static json_t *am_find(const struct am_proc *am, const char *query, const char *fp)
{
	char url[256], *body = NULL;
	json_t *list, *al, *found = NULL;
	size_t i;

	snprintf(url, sizeof(url), "%s/api/v2/alerts%s", am->base, query);
	if (http_get(url, &body) != 200) {
		free(body);
		return NULL;
	}
	list = json_loads(body ? body : "", 0, NULL);
	free(body);
	json_array_foreach(list, i, al)
		if (strcmp(str_at(al, "fingerprint"), fp) == 0)
			found = json_incref(al);
	json_decref(list);
	return found;
}

/* Fire through the module, find it active in a real Alertmanager (labels, annotations,
 * fingerprint, startsAt), resolve, watch it leave the active list. */
static void test_real_alertmanager(void **state)
{
	const char *bin = alertmanager_binary();
	struct am_proc am = { 0 };
	struct alerts *a;
	struct alert_spec spec = straggler("job-real", 3, "rank 3 is 41 ms late");
	int64_t t0 = wall_ms();
	json_t *got = NULL, *want, *active;
	char fp[17];

	(void)state;
	if (!bin) {
		print_message("no prometheus-alertmanager or alertmanager binary (make deps)\n");
		skip();
	}
	if (!am_start(bin, &am)) {
		char log[300];
		snprintf(log, sizeof(log), "cat %s/alertmanager.log >&2", am.dir);
		if (system(log) != 0)
			print_message("no Alertmanager log\n");
		am_stop(&am);
		fail_msg("Alertmanager (%s) did not become ready", bin);
	}
	a = start(am.base, NULL, 60000, NULL);
	assert_int_equal(alerts_evaluate(a, "job-real", &spec, 1, t0), 0);
	active = alerts_active_json(a, "job-real");
	snprintf(fp, sizeof(fp), "%s", str_at(json_array_get(active, 0), "fingerprint"));
	json_decref(active);

	for (int64_t until = mono_ms() + WAIT_MS; !got && mono_ms() < until; sleep_ms(100))
		got = am_find(&am, "", fp);
	if (!got) {
		am_stop(&am);
		fail_msg("the alert never showed in Alertmanager (%" PRIu64 " ok, %" PRIu64
			 " failed notifications)",
			 stats(a).notifications_ok[ALERTS_ALERTMANAGER],
			 stats(a).notifications_error[ALERTS_ALERTMANAGER]);
	}
	want = straggler_labels("job-real", 3);
	assert_true(json_equal(json_object_get(got, "labels"), want));
	json_decref(want);
	assert_string_equal(str_at(json_object_get(got, "annotations"), "summary"),
			    "rank 3 is 41 ms late");
	assert_string_equal(str_at(json_object_get(got, "status"), "state"), "active");
	assert_int_equal(parse_time(str_at(got, "startsAt")), t0);
	assert_true(parse_time(str_at(got, "endsAt")) > wall_ms() + 200000);
	assert_string_equal(str_at(got, "generatorURL"), GEN_URL);
	json_decref(got);

	assert_int_equal(alerts_evaluate(a, "job-real", NULL, 0, wall_ms()), 0);
	bool gone = false;
	for (int64_t until = mono_ms() + WAIT_MS; !gone && mono_ms() < until; sleep_ms(100)) {
		got = am_find(&am, "?active=true&silenced=false&inhibited=false", fp);
		gone = got == NULL;
		json_decref(got);
	}
	assert_true(gone);
	struct alerts_stats st = stats(a);
	assert_int_equal(st.notifications_error[ALERTS_ALERTMANAGER], 0);
	assert_int_equal(st.resolutions_pending, 0);
	alerts_free(a);
	am_stop(&am);
}

/* An incident of a rank in a Kubernetes pod carries the pod as labels "namespace" and "pod"
 * (and its container's name as "container"), one in a Slurm job the job as "slurm_job";
 * without one (NULL or "") the labels are left out. */
static void test_pod_labels(void **state)
{
	struct alert_spec s = straggler("job-1", 3, "rank 3 is late");
	json_t *l, *want;

	(void)state;
	s.pod_namespace = "training";
	s.pod = "llama-worker-3";
	l = alerts__labels_build(&s);
	want = straggler_labels("job-1", 3);
	json_object_set_new(want, "namespace", json_string("training"));
	json_object_set_new(want, "pod", json_string("llama-worker-3"));
	assert_true(json_equal(l, want));
	json_decref(want);
	want = straggler_labels("job-1", 3);
	assert_int_not_equal(alerts_fingerprint(l), alerts_fingerprint(want)); /* another alert */
	json_decref(l);
	json_decref(want);
	s.container = "pytorch";
	s.slurm_job = "4242.0";
	l = alerts__labels_build(&s);
	want = straggler_labels("job-1", 3);
	json_object_set_new(want, "namespace", json_string("training"));
	json_object_set_new(want, "pod", json_string("llama-worker-3"));
	json_object_set_new(want, "container", json_string("pytorch"));
	json_object_set_new(want, "slurm_job", json_string("4242.0"));
	assert_true(json_equal(l, want));
	json_decref(l);
	json_decref(want);
	s.pod_namespace = "";
	s.pod = NULL;
	s.container = "";
	s.slurm_job = NULL;
	l = alerts__labels_build(&s);
	want = straggler_labels("job-1", 3);
	assert_true(json_equal(l, want));
	json_decref(l);
	json_decref(want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fire_posts_once),
		cmocka_unit_test(test_pod_labels),
		cmocka_unit_test(test_dedup_and_resend),
		cmocka_unit_test(test_resolve),
		cmocka_unit_test(test_annotations_update),
		cmocka_unit_test(test_scopes_independent),
		cmocka_unit_test(test_webhook_format),
		cmocka_unit_test(test_receiver_down_then_up),
		cmocka_unit_test(test_resolution_retry_bound),
		cmocka_unit_test(test_permanent_error_not_retried),
		cmocka_unit_test(test_max_alerts),
		cmocka_unit_test(test_pending_resolutions_bounded),
		cmocka_unit_test(test_free_flushes_resolutions),
		cmocka_unit_test(test_concurrent_evaluations),
		cmocka_unit_test(test_config_and_arguments),
		cmocka_unit_test(test_fingerprint),
		cmocka_unit_test(test_metrics),
		cmocka_unit_test(test_real_alertmanager),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
