/* SPDX-License-Identifier: Apache-2.0 */
/* Uploader and HTTP client against a scripted HTTP/1.1 server on 127.0.0.1 (tests/support). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "agent/ship/http_client.h"
#include "agent/ship/spool.h"
#include "agent/ship/uploader.h"
#include "common/error.h"
#include "tests/support/stub_http.h"
#include "tests/support/batch_fixture.h"

#define NS 1000000000ull
#define WAIT_S 20 /* generous bound on waiting for the thread: exceeding it fails the test */
#define TOKEN "s3cr3t-token"

/* ---------------------------------------------------------------------------------------- */
/* Injected time and events */

struct hooks {
	pthread_mutex_t lock;
	pthread_cond_t gate_cond; /* the gate opened */
	bool gate_closed;         /* sleeps wait for the gate (at most WAIT_S) */
	uint64_t now;
	uint64_t sleeps[64];
	size_t nsleeps;
	int rng_mode;     /* 0: always the maximum, 1: seeded xorshift */
	uint64_t rng;
};

static uint64_t hook_now(void *ctx)
{
	struct hooks *h = ctx;

	pthread_mutex_lock(&h->lock);
	uint64_t t = h->now;
	pthread_mutex_unlock(&h->lock);
	return t;
}

static void hook_sleep(void *ctx, uint64_t ns)
{
	struct hooks *h = ctx;
	struct timespec deadline;
	bool waited = true;

	stub_http_deadline(&deadline, WAIT_S);
	pthread_mutex_lock(&h->lock);
	/* A closed gate holds the thread in its backoff until the test opens it. */
	while (h->gate_closed && waited)
		waited = pthread_cond_timedwait(&h->gate_cond, &h->lock, &deadline) == 0;
	if (h->nsleeps < 64)
		h->sleeps[h->nsleeps++] = ns;
	h->now += ns;
	pthread_mutex_unlock(&h->lock);
}

static uint64_t hook_random(void *ctx)
{
	struct hooks *h = ctx;

	if (h->rng_mode == 0)
		return UINT64_MAX;
	h->rng ^= h->rng << 13;
	h->rng ^= h->rng >> 7;
	h->rng ^= h->rng << 17;
	return h->rng;
}

struct recorded_event {
	enum uploader_event_kind kind;
	uint64_t sequence;
	int status;
	int error;
	uint64_t delay_ms;
	bool kept;
	char message[256];
};

struct events {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct recorded_event ev[256];
	size_t n;
	size_t count[8];
};

static void on_event(void *ctx, const struct uploader_event *ev)
{
	struct events *e = ctx;

	/* No cmocka asserts here: this runs on the uploader's thread. */
	pthread_mutex_lock(&e->lock);
	if (e->n < 256) {
		struct recorded_event *r = &e->ev[e->n++];
		r->kind = ev->kind;
		r->sequence = ev->sequence;
		r->status = ev->http_status;
		r->error = ev->error;
		r->delay_ms = ev->delay_ms;
		r->kept = ev->kept;
		snprintf(r->message, sizeof(r->message), "%s", ev->message ? ev->message : "(null)");
	}
	if (ev->kind < 8)
		e->count[ev->kind]++;
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
}

static bool events_wait(struct events *e, enum uploader_event_kind kind, size_t n)
{
	struct timespec ts;
	bool ok = true;

	stub_http_deadline(&ts, WAIT_S);
	pthread_mutex_lock(&e->lock);
	while (e->count[kind] < n && ok)
		ok = pthread_cond_timedwait(&e->cond, &e->lock, &ts) == 0 || e->count[kind] >= n;
	pthread_mutex_unlock(&e->lock);
	return ok;
}

static const struct recorded_event *find_event(struct events *e, enum uploader_event_kind kind)
{
	for (size_t i = 0; i < e->n; i++)
		if (e->ev[i].kind == kind)
			return &e->ev[i];
	return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Fixture */

static const uint8_t node_id[16] = { 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
				     0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff };
#define NODE_HEX "00112233445566778899aabbccddeeff"

struct fixture {
	char base[96];
	char dir[256];
	char mnt[128];
	struct spool *spool;
	struct uploader *uploader; /* the running one, stopped by teardown if a test fails */
	struct stub_http *server;
	struct hooks hooks;
	struct events events;
	char url[64];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	snprintf(f->base, sizeof(f->base), "/tmp/sysom-uploader-test-XXXXXX");
	if (!mkdtemp(f->base))
		return -1;
	snprintf(f->dir, sizeof(f->dir), "%s/spool", f->base);
	snprintf(f->mnt, sizeof(f->mnt), "%s/tmpfs", f->base);
	pthread_mutex_init(&f->hooks.lock, NULL);
	pthread_cond_init(&f->hooks.gate_cond, NULL);
	f->hooks.now = 1000 * NS;
	f->hooks.rng = 0x9e3779b97f4a7c15ull;
	pthread_mutex_init(&f->events.lock, NULL);
	pthread_cond_init(&f->events.cond, NULL);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	uploader_free(f->uploader); /* before the spool it uses */
	spool_close(f->spool);
	stub_http_stop(f->server);
	umount2(f->mnt, MNT_DETACH);
	fixture_tmpdir_remove(f->base);
	pthread_cond_destroy(&f->hooks.gate_cond);
	pthread_mutex_destroy(&f->hooks.lock);
	pthread_cond_destroy(&f->events.cond);
	pthread_mutex_destroy(&f->events.lock);
	free(f);
	return 0;
}

static void open_spool(struct fixture *f, uint64_t max_bytes)
{
	struct spool_options o = { .dir = f->dir, .max_bytes = max_bytes };

	assert_int_equal(spool_open(&o, &f->spool), 0);
}

static void start_server(struct fixture *f, const struct stub_step *script, size_t n,
			 struct stub_step dflt)
{
	f->server = stub_http_start(script, n, dflt);
	snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%u", f->server->port);
}

/* Options with the fake clock, sleep and maximal jitter. */
static struct uploader_options fake_options(struct fixture *f)
{
	struct uploader_options o = {
		.server_url = f->url,
		.token = TOKEN,
		.backoff_initial_s = 1,
		.backoff_max_s = 60,
		.request_timeout_s = WAIT_S,
		.on_event = on_event,
		.event_ctx = &f->events,
		.now_ns = hook_now,
		.sleep_ns = hook_sleep,
		.random_u64 = hook_random,
		.hook_ctx = &f->hooks,
	};
	memcpy(o.node_id, node_id, sizeof(node_id));
	return o;
}

static struct uploader *start_uploader(struct fixture *f, const struct uploader_options *o)
{
	struct uploader *u = NULL;

	assert_null(f->uploader);
	assert_int_equal(uploader_start(o, f->spool, &u), 0);
	assert_non_null(u);
	f->uploader = u;
	return u;
}

static void free_uploader(struct fixture *f, struct uploader *u)
{
	assert_ptr_equal(u, f->uploader);
	uploader_free(u);
	f->uploader = NULL;
}

/* Reserves a sequence and submits a body derived from it; returns the sequence. */
static uint64_t submit(struct fixture *f, struct uploader *u, size_t len, int expect)
{
	uint64_t seq;
	char *body = malloc(len + 1);

	assert_non_null(body);
	assert_int_equal(spool_sequence_next(f->spool, &seq), 0);
	for (size_t i = 0; i < len; i++)
		body[i] = (char)('a' + (seq + i) % 26);
	assert_int_equal(uploader_submit(u, seq, seq * 30 * NS, body, len), expect);
	free(body);
	return seq;
}

static void expect_body(struct stub_http *s, size_t i, uint64_t seq, size_t len)
{
	assert_int_equal(s->reqs[i].body_len, len);
	for (size_t k = 0; k < len; k++)
		assert_int_equal(s->reqs[i].body[k], (uint8_t)('a' + (seq + k) % 26));
}

static void expect_key(struct fixture *f, size_t i, uint64_t seq)
{
	char want[128], got[128];

	snprintf(want, sizeof(want), NODE_HEX ":%016" PRIx64 ":%" PRIu64, spool_epoch(f->spool),
		 seq);
	assert_true(stub_http_header(f->server, i, "Idempotency-Key", got, sizeof(got)));
	assert_string_equal(got, want);
}

static size_t count_files(const char *dir, const char *suffix)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t n = 0;

	assert_non_null(d);
	while ((de = readdir(d)) != NULL) {
		size_t len = strlen(de->d_name), k = strlen(suffix);
		if (de->d_name[0] != '.' && de->d_type == DT_REG && len >= k &&
		    strcmp(de->d_name + len - k, suffix) == 0)
			n++;
	}
	closedir(d);
	return n;
}

static const struct stub_step OK = { 200, NULL, "{}", false };
static const struct stub_step UNAVAILABLE = { 503, NULL, "{\"error\":\"overloaded\"}", false };

/* ---------------------------------------------------------------------------------------- */
/* Tests */

static void test_retries_then_delivers_once(void **state)
{
	struct fixture *f = *state;
	struct stub_step script[] = { UNAVAILABLE, UNAVAILABLE, OK };
	struct uploader_stats st;
	char v[256];

	open_spool(f, 0);
	start_server(f, script, 3, OK);
	struct uploader_options o = fake_options(f);
	struct uploader *u = start_uploader(f, &o);
	uint64_t seq = submit(f, u, 5000, 0);

	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 1));
	assert_int_equal(uploader_stop(u, 5), 0);
	/* Exactly three attempts, the last acknowledged, and nothing after it. */
	assert_int_equal(stub_http_count(f->server), 3);
	for (size_t i = 0; i < 3; i++) {
		assert_string_equal(f->server->reqs[i].method, "POST");
		assert_string_equal(f->server->reqs[i].path, "/api/v1/ingest");
		expect_key(f, i, seq);
		expect_body(f->server, i, seq, 5000);
		assert_true(stub_http_header(f->server, i, "Content-Type", v, sizeof(v)));
		assert_string_equal(v, "application/vnd.sysom.batch");
		assert_true(stub_http_header(f->server, i, "Content-Encoding", v, sizeof(v)));
		assert_string_equal(v, "zstd");
		assert_true(stub_http_header(f->server, i, "Authorization", v, sizeof(v)));
		assert_string_equal(v, "Bearer " TOKEN);
		/* Over HTTP_CLIENT_EXPECT_MIN_BYTES: asks first. */
		assert_true(stub_http_header(f->server, i, "Expect", v, sizeof(v)));
		assert_string_equal(v, "100-continue");
	}
	assert_int_equal(stub_http_continues(f->server), 3);
	/* One kept-alive connection for all of them. */
	assert_int_equal(f->server->reqs[2].conn, f->server->reqs[0].conn);
	/* Backoff with maximal jitter: 1 s, then 2 s. */
	assert_int_equal(f->hooks.nsleeps, 2);
	assert_int_equal(f->hooks.sleeps[0], 1 * NS);
	assert_int_equal(f->hooks.sleeps[1], 2 * NS);
	assert_int_equal(f->events.count[UPLOADER_EVENT_RETRY], 2);
	assert_int_equal(find_event(&f->events, UPLOADER_EVENT_RETRY)->status, 503);
	assert_int_equal(find_event(&f->events, UPLOADER_EVENT_RETRY)->delay_ms, 1000);

	uploader_stats(u, &st);
	assert_int_equal(st.batches_sent, 1);
	assert_int_equal(st.bytes_sent, 5000);
	assert_int_equal(st.retries, 2);
	assert_int_equal(st.rejected, 0);
	assert_int_equal(st.pending, 0);
	assert_int_equal(st.last_status, 200);
	assert_int_equal(st.server_wire_minor, -1); /* no Sysom-Wire-Minor: a server before 1.7 */
	assert_true(st.last_success_unix_ns > 0);
	assert_non_null(strstr(st.last_error, "HTTP 503"));
	free_uploader(f, u);
	assert_int_equal(count_files(f->dir, ".batch"), 0);
}

/* The server's Sysom-Wire-Minor answer header (1.7 and on): the agent sends 1.7's fields only
 * to a server that names it; a value that does not parse counts as no header. */
static void test_server_wire_minor(void **state)
{
	struct fixture *f = *state;
	struct stub_step script[] = {
		{ 200, "Sysom-Wire-Minor: 7\r\n", "{}", false },
		{ 503, "sysom-wire-minor:  9 \r\n", "{}", false }, /* not a 2xx: not taken */
		{ 200, "Sysom-Wire-Minor: 12\r\n", "{}", false },
		{ 200, "Sysom-Wire-Minor: 7x\r\n", "{}", false },
	};
	struct uploader_stats st;

	open_spool(f, 0);
	start_server(f, script, 4, OK);
	struct uploader_options o = fake_options(f);
	struct uploader *u = start_uploader(f, &o);
	uploader_stats(u, &st);
	assert_int_equal(st.server_wire_minor, -1);
	submit(f, u, 10, 0);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 1));
	uploader_stats(u, &st);
	assert_int_equal(st.server_wire_minor, 7);
	submit(f, u, 10, 0);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 2));
	uploader_stats(u, &st);
	assert_int_equal(st.server_wire_minor, 12);
	submit(f, u, 10, 0);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 3));
	uploader_stats(u, &st);
	assert_int_equal(st.server_wire_minor, -1);
	assert_int_equal(uploader_stop(u, 5), 0);
	free_uploader(f, u);
}

/*
 * A server that refuses from the head (503 + Retry-After instead of 100 Continue): the body
 * never leaves (counted as refused early, 0 body bytes sent for nothing), the batch stays in
 * the spool and is delivered whole once the server takes it.
 */
static void test_expect_refused_before_body(void **state)
{
	struct fixture *f = *state;
	struct uploader_stats st;
	char v[64];

	open_spool(f, 0);
	start_server(f, NULL, 0, OK);
	stub_http_set_expect_refusal(f->server, 503);
	struct uploader_options o = fake_options(f);
	struct uploader *u = start_uploader(f, &o);
	uint64_t seq = submit(f, u, 200000, 0);

	assert_true(events_wait(&f->events, UPLOADER_EVENT_RETRY, 2));
	assert_int_equal(count_files(f->dir, ".batch"), 1);
	uploader_stats(u, &st);
	assert_true(st.refused_early >= 2);
	assert_int_equal(st.refused_body_bytes, 0);
	assert_int_equal(st.batches_sent, 0);
	assert_int_equal(find_event(&f->events, UPLOADER_EVENT_RETRY)->status, 503);
	assert_int_equal(f->server->reqs[0].status, 503);
	assert_true(stub_http_header(f->server, 0, "Expect", v, sizeof(v)));
	assert_string_equal(v, "100-continue");

	stub_http_set_expect_refusal(f->server, 0);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 1));
	assert_int_equal(uploader_stop(u, 5), 0);
	size_t n = stub_http_count(f->server);
	expect_key(f, n - 1, seq);
	expect_body(f->server, n - 1, seq, 200000);
	uploader_stats(u, &st);
	assert_int_equal(st.batches_sent, 1);
	assert_int_equal(st.refused_body_bytes, 0);
	assert_int_equal(st.refused_early, (uint64_t)(n - 1));
	assert_int_equal(stub_http_continues(f->server), 1);
	free_uploader(f, u);
	assert_int_equal(count_files(f->dir, ".batch"), 0);
}

static void test_replay_oldest_first(void **state)
{
	struct fixture *f = *state;
	/* Small bodies go without Expect; larger ones (over 1 MiB too) ask first. */
	size_t len[4] = { 100, (3u << 20) / 2, 100, 7 };
	uint8_t *body = malloc(len[1]);
	uint64_t seq[4];

	/* Left in the spool by an earlier run: delivered in order when the uploader starts. A
	 * file of an older epoch (its state file was lost) goes first; its small epoch checks
	 * the key's zero padding. */
	assert_non_null(body);
	struct spool_header h = { .epoch = 0x42, .sequence = 7, .window_end_ns = 1,
				  .created_ns = (uint64_t)time(NULL) * NS, .body_len = 7,
				  .body_hash = XXH64("foreign", 7, 0) };
	uint8_t file[SPOOL_HEADER_SIZE + 7];
	char path[512];
	spool_header_encode(&h, file);
	memcpy(file + SPOOL_HEADER_SIZE, "foreign", 7);
	assert_int_equal(mkdir(f->dir, 0700), 0);
	snprintf(path, sizeof(path), "%s/0000000000000042-00000000000000000007.batch", f->dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, file, sizeof(file)), (ssize_t)sizeof(file));
	close(fd);
	open_spool(f, 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(spool_sequence_next(f->spool, &seq[i]), 0);
		for (size_t k = 0; k < len[i]; k++)
			body[k] = (uint8_t)('a' + (seq[i] + k) % 26);
		assert_int_equal(spool_batch_commit(f->spool, seq[i], 0, body, len[i]), 0);
	}
	free(body);
	start_server(f, NULL, 0, OK);
	struct uploader_options o = fake_options(f);
	o.token = NULL;
	struct uploader *u = start_uploader(f, &o);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 5));
	free_uploader(f, u);
	assert_int_equal(stub_http_count(f->server), 5);
	char v[128];
	assert_true(stub_http_header(f->server, 0, "Idempotency-Key", v, sizeof(v)));
	assert_string_equal(v, NODE_HEX ":0000000000000042:7");
	assert_int_equal(f->server->reqs[0].body_len, 7);
	assert_memory_equal(f->server->reqs[0].body, "foreign", 7);
	for (size_t i = 0; i < 4; i++) {
		expect_key(f, i + 1, seq[i]);
		expect_body(f->server, i + 1, seq[i], len[i]);
		assert_false(stub_http_header(f->server, i + 1, "Authorization", v, sizeof(v)));
		if (len[i] < HTTP_CLIENT_EXPECT_MIN_BYTES) {
			assert_false(stub_http_header(f->server, i + 1, "Expect", v, sizeof(v)));
		} else {
			assert_true(stub_http_header(f->server, i + 1, "Expect", v, sizeof(v)));
			assert_string_equal(v, "100-continue");
		}
	}
	assert_int_equal(stub_http_continues(f->server), 1);
	assert_int_equal(count_files(f->dir, ".batch"), 0);
}

static void test_retry_after_honoured(void **state)
{
	struct fixture *f = *state;
	char date_header[128];
	time_t when = time(NULL) + 20;
	struct tm tm;

	gmtime_r(&when, &tm);
	strftime(date_header, sizeof(date_header), "Retry-After: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
	struct stub_step script[] = {
		{ 429, "Retry-After: 7\r\n", "{\"error\":\"slow down\"}", false },
		{ 503, "Retry-After: 3600\r\n", NULL, false }, /* capped at backoff_max_s */
		{ 503, date_header, NULL, false },              /* HTTP-date form */
		{ 408, NULL, NULL, false },                     /* no Retry-After: jittered backoff */
		OK,
	};

	open_spool(f, 0);
	start_server(f, script, 5, OK);
	struct uploader_options o = fake_options(f);
	o.backoff_max_s = 30;
	struct uploader *u = start_uploader(f, &o);
	uint64_t seq = submit(f, u, 10, 0);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 1));
	free_uploader(f, u);

	assert_int_equal(stub_http_count(f->server), 5);
	for (size_t i = 0; i < 5; i++)
		expect_key(f, i, seq);
	assert_int_equal(f->hooks.nsleeps, 4);
	/* Retry-After is the least wait, the (here maximal) jitter comes on top: 7 s + 1 s. */
	assert_int_equal(f->hooks.sleeps[0], 8 * NS);
	assert_int_equal(f->hooks.sleeps[1], 30 * NS);
	/* About 20 s from the date, plus the third failure's jitter of 4 s. */
	assert_true(f->hooks.sleeps[2] >= 21 * NS && f->hooks.sleeps[2] <= 24 * NS);
	/* Fourth consecutive failure: cap 1 s * 2^3 = 8 s, maximal jitter. */
	assert_int_equal(f->hooks.sleeps[3], 8 * NS);
	assert_int_equal(find_event(&f->events, UPLOADER_EVENT_RETRY)->status, 429);
	assert_string_equal(find_event(&f->events, UPLOADER_EVENT_RETRY)->message,
			    "{\"error\":\"slow down\"}");
}

static void test_backoff_grows_with_full_jitter(void **state)
{
	struct fixture *f = *state;
	struct stub_step script[STUB_HTTP_MAX_STEPS];
	uint64_t cap = NS;
	bool below_cap = false, varied = false;

	for (int i = 0; i < 12; i++)
		script[i] = UNAVAILABLE;
	script[12] = OK;
	open_spool(f, 0);
	start_server(f, script, 13, OK);
	pthread_mutex_lock(&f->server->lock);
	f->server->nscript = 6; /* six 503s, then 200 */
	pthread_mutex_unlock(&f->server->lock);

	/* Maximal random values show the cap: 1, 2, 4, 8 s then the 8 s maximum. */
	struct uploader_options o = fake_options(f);
	o.backoff_max_s = 8;
	struct uploader *u = start_uploader(f, &o);
	submit(f, u, 10, 0);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 1));
	free_uploader(f, u);
	assert_int_equal(stub_http_count(f->server), 7);
	assert_int_equal(f->hooks.nsleeps, 6);
	const uint64_t want[] = { 1, 2, 4, 8, 8, 8 };
	for (size_t i = 0; i < 6; i++)
		assert_int_equal(f->hooks.sleeps[i], want[i] * NS);

	/* Random values: every delay within [0, cap], caps doubling up to 16 s, and jittered. */
	pthread_mutex_lock(&f->server->lock);
	f->server->next_step = 0;
	f->server->nscript = 13;
	pthread_mutex_unlock(&f->server->lock);
	f->hooks.nsleeps = 0;
	f->hooks.rng_mode = 1;
	o.backoff_max_s = 16;
	u = start_uploader(f, &o);
	submit(f, u, 10, 0);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 2));
	free_uploader(f, u);
	assert_int_equal(f->hooks.nsleeps, 12);
	for (size_t i = 0; i < 12; i++) {
		uint64_t d = f->hooks.sleeps[i];
		assert_true(d <= cap);
		if (d < cap * 9 / 10)
			below_cap = true;
		if (i > 0 && d != f->hooks.sleeps[i - 1])
			varied = true;
		cap = cap * 2 > 16 * NS ? 16 * NS : cap * 2;
	}
	assert_true(below_cap);
	assert_true(varied);

	/* The real random source stays within the same bounds. */
	pthread_mutex_lock(&f->server->lock);
	f->server->next_step = 0;
	f->server->nscript = 6;
	pthread_mutex_unlock(&f->server->lock);
	f->hooks.nsleeps = 0;
	o.random_u64 = NULL;
	u = start_uploader(f, &o);
	submit(f, u, 10, 0);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 3));
	free_uploader(f, u);
	assert_int_equal(f->hooks.nsleeps, 6);
	cap = NS;
	for (size_t i = 0; i < 6; i++) {
		assert_true(f->hooks.sleeps[i] <= cap);
		cap = cap * 2 > 16 * NS ? 16 * NS : cap * 2;
	}
}

static void test_client_error_rejected_not_retried(void **state)
{
	struct fixture *f = *state;
	struct stub_step script[] = {
		{ 400, "Content-Type: application/json\r\n",
		  "{\"error\":\"bad batch: unknown section\"}", false },
		OK,
	};
	struct uploader_stats st;
	char rejected[300];

	open_spool(f, 0);
	start_server(f, script, 2, OK);
	struct uploader_options o = fake_options(f);
	struct uploader *u = start_uploader(f, &o);
	uint64_t bad = submit(f, u, 10, 0);
	uint64_t good = submit(f, u, 20, 0);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 1));
	assert_int_equal(uploader_stop(u, 1), 0);

	assert_int_equal(stub_http_count(f->server), 2);
	expect_key(f, 0, bad);
	expect_key(f, 1, good);
	const struct recorded_event *ev = find_event(&f->events, UPLOADER_EVENT_REJECTED);
	assert_non_null(ev);
	assert_int_equal(ev->sequence, bad);
	assert_int_equal(ev->status, 400);
	assert_string_equal(ev->message, "{\"error\":\"bad batch: unknown section\"}");
	assert_int_equal(f->events.count[UPLOADER_EVENT_REJECTED], 1);
	assert_int_equal(f->events.count[UPLOADER_EVENT_RETRY], 0);
	assert_int_equal(f->hooks.nsleeps, 0);
	uploader_stats(u, &st);
	assert_int_equal(st.rejected, 1);
	assert_int_equal(st.retries, 0);
	assert_int_equal(st.batches_sent, 1);
	assert_non_null(strstr(st.last_error, "HTTP 400"));
	free_uploader(f, u);

	snprintf(rejected, sizeof(rejected), "%s/rejected", f->dir);
	assert_int_equal(count_files(rejected, ".batch"), 1);
	assert_int_equal(count_files(f->dir, ".batch"), 0);
}

/* 409 (the server holds other content under the identity): not retried, counted as a
 * conflict, the batch kept in rejected/ whether it came from the spool or from memory. */
static void test_conflict_kept_as_rejected(void **state)
{
	struct fixture *f = *state;
	static const char conflict_body[] =
		"{\"error\":\"batch ... was already stored with different content\"}";
	struct stub_step script[] = {
		{ 409, "Content-Type: application/json\r\n", conflict_body, false },
		OK,
	};
	struct uploader_stats st;
	char rejected[300];

	open_spool(f, 0);
	start_server(f, script, 2, OK);
	struct uploader_options o = fake_options(f);
	struct uploader *u = start_uploader(f, &o);
	uint64_t first = submit(f, u, 10, 0);
	submit(f, u, 20, 0);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 1));
	assert_int_equal(uploader_stop(u, 1), 0);
	const struct recorded_event *ev = find_event(&f->events, UPLOADER_EVENT_REJECTED);
	assert_non_null(ev);
	assert_int_equal(ev->sequence, first);
	assert_int_equal(ev->status, 409);
	assert_true(ev->kept);
	assert_string_equal(ev->message, conflict_body);
	assert_int_equal(f->events.count[UPLOADER_EVENT_RETRY], 0);
	uploader_stats(u, &st);
	assert_int_equal(st.rejected, 1);
	assert_int_equal(st.conflicts, 1);
	free_uploader(f, u);
	snprintf(rejected, sizeof(rejected), "%s/rejected", f->dir);
	assert_int_equal(count_files(rejected, ".batch"), 1);
	assert_int_equal(count_files(f->dir, ".batch"), 0);
	spool_close(f->spool);
	f->spool = NULL;
	stub_http_stop(f->server);

	/* A memory-held batch (the spool refused it: too small) is not dropped either: once the
	 * spool takes it, it goes to rejected/. Here the spool still refuses: reported not kept. */
	snprintf(f->dir, sizeof(f->dir), "%s/spool-small", f->base);
	open_spool(f, 100);
	start_server(f, script, 1, OK);
	memset(&f->events.count, 0, sizeof(f->events.count));
	f->events.n = 0;
	o = fake_options(f);
	u = start_uploader(f, &o);
	uint64_t held = submit(f, u, 1000, 1);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_REJECTED, 1));
	ev = find_event(&f->events, UPLOADER_EVENT_REJECTED);
	assert_int_equal(ev->sequence, held);
	assert_int_equal(ev->status, 409);
	assert_false(ev->kept);
	assert_int_equal(uploader_stop(u, 0), 0);
	uploader_stats(u, &st);
	assert_int_equal(st.conflicts, 1);
	assert_int_equal(st.pending_memory, 0);
	free_uploader(f, u);
}

static void test_connection_closed_without_answer(void **state)
{
	struct fixture *f = *state;
	struct stub_step script[] = { { 0, NULL, NULL, false }, OK };
	struct uploader_stats st;

	open_spool(f, 0);
	start_server(f, script, 2, OK);
	struct uploader_options o = fake_options(f);
	struct uploader *u = start_uploader(f, &o);
	uint64_t seq = submit(f, u, 10, 0);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 1));
	assert_int_equal(uploader_stop(u, 1), 0);
	uploader_stats(u, &st);
	assert_int_equal(st.retries, 1);
	assert_int_equal(st.batches_sent, 1);
	assert_int_equal(st.last_status, 200);
	free_uploader(f, u);

	assert_int_equal(stub_http_count(f->server), 2);
	expect_key(f, 0, seq);
	expect_key(f, 1, seq);
	assert_int_equal(f->server->reqs[0].status, 0);
	/* The hang-up is a transport error: retried after backoff, with curl's explanation. */
	const struct recorded_event *ev = find_event(&f->events, UPLOADER_EVENT_RETRY);
	assert_non_null(ev);
	assert_int_equal(ev->status, 0);
	assert_true(ev->error < 0);
	assert_true(strlen(ev->message) > 0);
	assert_int_equal(f->hooks.nsleeps, 1);
}

static void test_stop_keeps_pending_for_next_start(void **state)
{
	struct fixture *f = *state;
	struct uploader_stats st;
	struct timespec t0, t1;
	uint64_t seq[2];

	open_spool(f, 0);
	start_server(f, NULL, 0, UNAVAILABLE);
	/* The real clock and wait: a long backoff that stop() must cut short. */
	struct uploader_options o = fake_options(f);
	o.now_ns = NULL;
	o.sleep_ns = NULL;
	o.random_u64 = NULL;
	o.backoff_initial_s = 30;
	o.backoff_max_s = 30;
	struct uploader *u = start_uploader(f, &o);
	seq[0] = submit(f, u, 100, 0);
	seq[1] = submit(f, u, 200, 0);
	assert_true(stub_http_wait(f->server, 1));
	assert_true(events_wait(&f->events, UPLOADER_EVENT_RETRY, 1));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(uploader_stop(u, 0.2), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true(t1.tv_sec - t0.tv_sec < 5);
	uploader_stats(u, &st);
	assert_int_equal(st.pending, 2);
	assert_int_equal(st.batches_sent, 0);
	assert_int_equal(uploader_submit(u, 99, 0, "x", 1), -ESHUTDOWN);
	free_uploader(f, u);
	assert_int_equal(count_files(f->dir, ".batch"), 2);
	/* Every attempt was for the oldest batch. */
	size_t n = stub_http_count(f->server);
	for (size_t i = 0; i < n && i < STUB_HTTP_MAX_RECORDED; i++)
		expect_key(f, i, seq[0]);

	/* The server is back; a new uploader on the same spool delivers both, in order. */
	stub_http_set_default(f->server, OK);
	o = fake_options(f);
	u = start_uploader(f, &o);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 2));
	free_uploader(f, u);
	assert_int_equal(stub_http_count(f->server), n + 2);
	expect_key(f, n, seq[0]);
	expect_body(f->server, n, seq[0], 100);
	expect_key(f, n + 1, seq[1]);
	expect_body(f->server, n + 1, seq[1], 200);
	assert_int_equal(count_files(f->dir, ".batch"), 0);
}

static void test_stop_aborts_request_in_flight(void **state)
{
	struct fixture *f = *state;
	struct stub_step script[] = { { 200, NULL, NULL, true } };
	struct timespec t0, t1;

	open_spool(f, 0);
	start_server(f, script, 1, OK);
	struct uploader_options o = fake_options(f);
	o.now_ns = NULL;
	o.sleep_ns = NULL;
	o.request_timeout_s = 600;
	struct uploader *u = start_uploader(f, &o);
	uint64_t seq = submit(f, u, 10, 0);
	assert_true(stub_http_wait(f->server, 1));
	/* The server holds the request; submitting more does not wait for it. */
	submit(f, u, 10, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(uploader_stop(u, 0.1), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true(t1.tv_sec - t0.tv_sec < 5);
	free_uploader(f, u);
	expect_key(f, 0, seq);
	assert_int_equal(f->events.count[UPLOADER_EVENT_DELIVERED], 0);
	assert_int_equal(count_files(f->dir, ".batch"), 2);
}

static void test_memory_queue_when_spool_refuses(void **state)
{
	struct fixture *f = *state;
	struct uploader_stats st;

	/* A spool too small for any batch makes every commit fail (-SYSOM_ELIMIT). */
	open_spool(f, 100);
	start_server(f, NULL, 0, UNAVAILABLE);
	struct uploader_options o = fake_options(f);
	o.now_ns = NULL;
	o.sleep_ns = NULL;
	o.backoff_initial_s = 30;
	o.backoff_max_s = 30;
	o.memory_queue_max_bytes = 3000;
	struct uploader *u = start_uploader(f, &o);
	for (int i = 0; i < 5; i++)
		submit(f, u, 1000, 1);
	uploader_stats(u, &st);
	assert_int_equal(st.memory_queued, 5);
	assert_int_equal(st.lost, 2);
	assert_int_equal(st.pending_memory, 3);
	assert_int_equal(st.pending_memory_bytes, 3000);
	assert_int_equal(f->events.count[UPLOADER_EVENT_LOST], 2);
	assert_int_equal(f->events.count[UPLOADER_EVENT_MEMORY_QUEUED], 5);
	assert_int_equal(find_event(&f->events, UPLOADER_EVENT_MEMORY_QUEUED)->error, -SYSOM_ELIMIT);
	/* Larger than the whole memory queue: lost at once, with the spool's error. */
	uint64_t seq;
	char big[4000] = { 0 };
	assert_int_equal(spool_sequence_next(f->spool, &seq), 0);
	assert_int_equal(uploader_submit(u, seq, 0, big, sizeof(big)), -SYSOM_ELIMIT);
	/* At stop they cannot be spooled either: reported lost. */
	assert_int_equal(uploader_stop(u, 0), 3);
	uploader_stats(u, &st);
	assert_int_equal(st.lost, 6);
	assert_int_equal(st.pending, 0);
	free_uploader(f, u);
}

/* Mounts a 256 KiB tmpfs for the spool and fills it; skips when mounting is not allowed. */
static void full_disk_spool(struct fixture *f, char *filler, size_t len)
{
	uint8_t chunk[4096] = { 0 };

	assert_int_equal(mkdir(f->mnt, 0700), 0);
	if (mount("tmpfs", f->mnt, "tmpfs", 0, "size=256k") != 0) {
		print_message("# cannot mount a 256 KiB tmpfs (%s): the full-disk test needs root "
			      "and CAP_SYS_ADMIN\n", strerror(errno));
		skip();
	}
	snprintf(f->dir, sizeof(f->dir), "%s/spool", f->mnt);
	open_spool(f, 0);
	snprintf(filler, len, "%s/filler", f->mnt);
	int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	while (write(fd, chunk, sizeof(chunk)) > 0)
		;
	assert_int_equal(errno, ENOSPC);
	close(fd);
}

static void test_full_disk_memory_queue_delivers(void **state)
{
	struct fixture *f = *state;
	struct uploader_stats st;
	char filler[192];

	full_disk_spool(f, filler, sizeof(filler));
	start_server(f, NULL, 0, OK);
	struct uploader_options o = fake_options(f);
	struct uploader *u = start_uploader(f, &o);

	/* Accepted although the disk is full, and delivered from memory. */
	uint64_t seq = submit(f, u, 20000, 1);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 1));
	assert_int_equal(stub_http_count(f->server), 1);
	expect_key(f, 0, seq);
	expect_body(f->server, 0, seq, 20000);
	assert_int_equal(find_event(&f->events, UPLOADER_EVENT_MEMORY_QUEUED)->error, -ENOSPC);
	uploader_stats(u, &st);
	assert_int_equal(st.memory_queued, 1);
	assert_int_equal(st.batches_sent, 1);
	assert_int_equal(st.pending, 0);
	assert_int_equal(count_files(f->dir, ".tmp"), 0);
	assert_int_equal(count_files(f->dir, ".batch"), 0);
	assert_int_equal(uploader_stop(u, 1), 0);
	free_uploader(f, u);

	/* Server down and disk full at stop: the held batch is reported lost. The real clock and
	 * a long backoff keep the attempts few. */
	stub_http_set_default(f->server, UNAVAILABLE);
	o.now_ns = NULL;
	o.sleep_ns = NULL;
	o.backoff_initial_s = 30;
	o.backoff_max_s = 30;
	u = start_uploader(f, &o);
	seq = submit(f, u, 20000, 1);
	assert_true(stub_http_wait(f->server, 2));
	assert_int_equal(uploader_stop(u, 0), 1);
	assert_int_equal(f->events.count[UPLOADER_EVENT_LOST], 1);
	assert_int_equal(find_event(&f->events, UPLOADER_EVENT_LOST)->sequence, seq);
	free_uploader(f, u);

	/* Server down, disk freed before stop: the held batch goes to the spool... */
	u = start_uploader(f, &o);
	seq = submit(f, u, 20000, 1);
	assert_true(stub_http_wait(f->server, 3));
	assert_int_equal(unlink(filler), 0);
	assert_int_equal(uploader_stop(u, 0), 0);
	free_uploader(f, u);
	assert_int_equal(count_files(f->dir, ".batch"), 1);
	/* ...and the next start delivers it. */
	stub_http_set_default(f->server, OK);
	size_t before = stub_http_count(f->server);
	o = fake_options(f);
	u = start_uploader(f, &o);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 2));
	free_uploader(f, u);
	expect_key(f, before, seq);
	expect_body(f->server, before, seq, 20000);
	assert_int_equal(count_files(f->dir, ".batch"), 0);
}

/* A receiver that is down (503) or up (200) and can hold a request until the test lets go. */
struct outage {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool down;    /* answer 503 */
	bool hold;    /* keep the next request until hold is cleared (at most WAIT_S) */
	bool holding; /* a request is being held */
};

static void outage_handler(void *ctx, const struct stub_request *req, struct stub_reply *reply)
{
	struct outage *o = ctx;
	struct timespec deadline;
	bool waited = true;

	(void)req;
	stub_http_deadline(&deadline, WAIT_S);
	pthread_mutex_lock(&o->lock);
	if (o->hold) {
		o->holding = true;
		pthread_cond_broadcast(&o->cond);
		while (o->hold && waited)
			waited = pthread_cond_timedwait(&o->cond, &o->lock, &deadline) == 0;
		o->holding = false;
	}
	reply->status = o->down ? 503 : 200;
	pthread_mutex_unlock(&o->lock);
	reply->body = strdup("{}");
}

static bool outage_wait_holding(struct outage *o)
{
	struct timespec deadline;
	bool waited = true;

	stub_http_deadline(&deadline, WAIT_S);
	pthread_mutex_lock(&o->lock);
	while (!o->holding && waited)
		waited = pthread_cond_timedwait(&o->cond, &o->lock, &deadline) == 0;
	bool holding = o->holding;
	pthread_mutex_unlock(&o->lock);
	return holding;
}

/* Sequences the spool deleted by its limits, from its event callback. */
struct drops {
	uint64_t seq[64];
	size_t n;
};

static void on_spool_drop(void *ctx, const struct spool_event *ev)
{
	struct drops *d = ctx;

	/* The spool's lock is held; events come from the thread that commits or reads. */
	if ((ev->kind == SPOOL_EVENT_DROPPED_FULL || ev->kind == SPOOL_EVENT_DROPPED_AGE) &&
	    d->n < 64)
		d->seq[d->n++] = ev->sequence;
}

/* The sequences the receiver acknowledged (2xx), in order; returns how many. */
static size_t acknowledged(struct fixture *f, uint64_t *out, size_t max)
{
	size_t n = 0, total = stub_http_count(f->server);
	char key[128];

	for (size_t i = 0; i < total && i < STUB_HTTP_MAX_RECORDED; i++) {
		if (f->server->reqs[i].status < 200 || f->server->reqs[i].status >= 300)
			continue;
		assert_true(stub_http_header(f->server, i, "Idempotency-Key", key, sizeof(key)));
		assert_true(n < max);
		out[n++] = strtoull(strrchr(key, ':') + 1, NULL, 10);
	}
	return n;
}

static void test_outage_accounting_exact(void **state)
{
	struct fixture *f = *state;
	struct outage srv = { .down = true };
	struct drops drops = { 0 };
	struct uploader_stats us;
	struct spool_stats ss;
	uint64_t seq[7], acked[16];

	pthread_mutex_init(&srv.lock, NULL);
	pthread_cond_init(&srv.cond, NULL);
	/* Room for three batches of 1000 bytes. */
	struct spool_options so = { .dir = f->dir, .max_bytes = 3 * (SPOOL_HEADER_SIZE + 1000),
				    .on_event = on_spool_drop, .event_ctx = &drops };
	assert_int_equal(spool_open(&so, &f->spool), 0);
	f->server = stub_http_start_handler(outage_handler, &srv);
	snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%u", f->server->port);
	f->hooks.gate_closed = true;
	struct uploader_options o = fake_options(f);
	struct uploader *u = start_uploader(f, &o);

	/* The outage: the first batch's attempt fails, and while the thread backs off four more
	 * batches arrive; the full spool deletes the two oldest, the outage's first among them. */
	seq[0] = submit(f, u, 1000, 0);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_RETRY, 1));
	for (int i = 1; i < 5; i++)
		seq[i] = submit(f, u, 1000, 0);
	assert_int_equal(drops.n, 2);
	assert_int_equal(drops.seq[0], seq[0]);
	assert_int_equal(drops.seq[1], seq[1]);

	/* The receiver is back but holds the next attempt; two batches arrive meanwhile. The one
	 * in flight is not deleted (it is about to be delivered): the two after it are. */
	pthread_mutex_lock(&srv.lock);
	srv.down = false;
	srv.hold = true;
	pthread_mutex_unlock(&srv.lock);
	pthread_mutex_lock(&f->hooks.lock);
	f->hooks.gate_closed = false;
	pthread_cond_broadcast(&f->hooks.gate_cond);
	pthread_mutex_unlock(&f->hooks.lock);
	assert_true(outage_wait_holding(&srv));
	seq[5] = submit(f, u, 1000, 0);
	seq[6] = submit(f, u, 1000, 0);
	pthread_mutex_lock(&srv.lock);
	srv.hold = false;
	pthread_cond_broadcast(&srv.cond);
	pthread_mutex_unlock(&srv.lock);
	assert_true(events_wait(&f->events, UPLOADER_EVENT_DELIVERED, 3));
	assert_int_equal(uploader_stop(u, 1), 0);

	/* Every batch produced is delivered, dropped or pending: exactly one of them. */
	uploader_stats(u, &us);
	spool_stats(f->spool, &ss);
	assert_int_equal(us.lost, 0);
	assert_int_equal(us.rejected, 0);
	assert_int_equal(us.pending, 0);
	assert_int_equal(us.batches_sent + ss.dropped_full + ss.dropped_age + us.pending, 7);
	assert_int_equal(us.batches_sent, 3);
	assert_int_equal(ss.dropped_full, 4);
	assert_int_equal(f->events.count[UPLOADER_EVENT_DELIVERED], 3);
	/* The receiver acknowledged each delivered batch once, and none that was dropped. */
	assert_int_equal(acknowledged(f, acked, 16), 3);
	assert_int_equal(acked[0], seq[2]);
	assert_int_equal(acked[1], seq[5]);
	assert_int_equal(acked[2], seq[6]);
	assert_int_equal(drops.n, 4);
	assert_int_equal(drops.seq[2], seq[3]);
	assert_int_equal(drops.seq[3], seq[4]);
	free_uploader(f, u);
	assert_int_equal(count_files(f->dir, ".batch"), 0);
	pthread_cond_destroy(&srv.cond);
	pthread_mutex_destroy(&srv.lock);
}

static void test_bad_options(void **state)
{
	struct fixture *f = *state;
	struct uploader *u = NULL;

	open_spool(f, 0);
	snprintf(f->url, sizeof(f->url), "ftp://127.0.0.1:1");
	struct uploader_options o = fake_options(f);
	assert_int_equal(uploader_start(&o, f->spool, &u), -SYSOM_ECONFIG);
	o.server_url = "127.0.0.1:8080";
	assert_int_equal(uploader_start(&o, f->spool, &u), -SYSOM_ECONFIG);
	o.server_url = "http://127.0.0.1:1";
	o.token = "bad\r\nX-Injected: 1";
	assert_int_equal(uploader_start(&o, f->spool, &u), -SYSOM_ECONFIG);
	o.token = TOKEN;
	o.backoff_initial_s = 10;
	o.backoff_max_s = 5;
	assert_int_equal(uploader_start(&o, f->spool, &u), -SYSOM_ECONFIG);
	o.backoff_initial_s = -1;
	assert_int_equal(uploader_start(&o, f->spool, &u), -SYSOM_ECONFIG);
	assert_null(u);
	o.backoff_initial_s = 0;
	o.backoff_max_s = 0;
	assert_int_equal(uploader_start(&o, f->spool, &u), 0);
	uploader_free(u);
	uploader_free(NULL);
}

static void test_retry_after_parsing(void **state)
{
	int64_t v;
	time_t t = 1445412480; /* Wed, 21 Oct 2015 07:28:00 GMT */

	(void)state;
	assert_int_equal(http_client_parse_retry_after("120", 0, &v), 0);
	assert_int_equal(v, 120);
	assert_int_equal(http_client_parse_retry_after("  0 \r\n", 0, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(http_client_parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", t - 90, &v),
			 0);
	assert_int_equal(v, 90);
	assert_int_equal(http_client_parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", t + 5, &v),
			 0);
	assert_int_equal(v, 0);
	assert_int_equal(http_client_parse_retry_after("99999999999999999999999", 0, &v), 0);
	assert_true(v > 0 && v <= 10ll * 365 * 24 * 3600);
	assert_int_equal(http_client_parse_retry_after("", 0, &v), -EINVAL);
	assert_int_equal(http_client_parse_retry_after("12s", 0, &v), -EINVAL);
	assert_int_equal(http_client_parse_retry_after("soon", 0, &v), -EINVAL);
}

static void test_http_client_bounds_response(void **state)
{
	struct fixture *f = *state;
	static char big[3001];
	struct http_client *c = NULL;
	struct http_client_response resp;
	const char *extra[] = { "X-Test: yes" };

	memset(big, 'z', sizeof(big) - 1);
	struct stub_step script[] = { { 200, NULL, big, false }, { 404, NULL, "nope", false } };
	start_server(f, script, 2, OK);
	struct http_client_options o = { .base_url = f->url, .max_response_bytes = 1000 };
	assert_int_equal(http_client_new(&o, &c), 0);

	struct http_client_request req = { .method = "GET", .path = "/big", .headers = extra,
					   .header_count = 1 };
	assert_int_equal(http_client_request(c, &req, &resp), 200);
	assert_int_equal(resp.body_len, 1000);
	assert_true(resp.body_truncated);
	assert_int_equal(resp.body[1000], '\0');
	assert_int_equal(resp.retry_after_s, -1);
	http_client_response_free(&resp);

	req = (struct http_client_request){ .method = "PUT", .path = "/x", .body = "abc",
					    .body_len = 3, .content_type = "text/plain" };
	assert_int_equal(http_client_request(c, &req, &resp), 404);
	assert_string_equal((char *)resp.body, "nope");
	assert_false(resp.body_truncated);
	http_client_response_free(&resp);

	/* Header injection and malformed requests are refused before anything is sent. */
	const char *evil[] = { "X-A: 1\r\nX-B: 2" };
	req = (struct http_client_request){ .method = "GET", .path = "/", .headers = evil,
					    .header_count = 1 };
	assert_int_equal(http_client_request(c, &req, &resp), -EINVAL);
	http_client_response_free(&resp);
	req = (struct http_client_request){ .method = "GET", .path = "no-slash" };
	assert_int_equal(http_client_request(c, &req, &resp), -EINVAL);
	http_client_response_free(&resp);
	http_client_free(c);

	assert_int_equal(stub_http_count(f->server), 2);
	char v[64];
	assert_string_equal(f->server->reqs[0].method, "GET");
	assert_true(stub_http_header(f->server, 0, "X-Test", v, sizeof(v)));
	assert_string_equal(v, "yes");
	assert_string_equal(f->server->reqs[1].method, "PUT");
	assert_int_equal(f->server->reqs[1].body_len, 3);
	assert_true(stub_http_header(f->server, 1, "Content-Type", v, sizeof(v)));
	assert_string_equal(v, "text/plain");
	assert_int_equal(f->server->reqs[1].conn, f->server->reqs[0].conn);

	/* Nobody listening: a transport error with curl's text. */
	struct stub_http *dead = stub_http_start(NULL, 0, OK);
	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%u", dead->port);
	stub_http_stop(dead); /* the port is closed now */
	o.base_url = url;
	assert_int_equal(http_client_new(&o, &c), 0);
	req = (struct http_client_request){ .method = "GET", .path = "/" };
	assert_int_equal(http_client_request(c, &req, &resp), -ECONNREFUSED);
	assert_int_equal(resp.status, 0);
	assert_true(strlen(resp.error) > 0);
	http_client_response_free(&resp);
	http_client_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_retry_after_parsing),
		cmocka_unit_test_setup_teardown(test_server_wire_minor, setup, teardown),
		cmocka_unit_test_setup_teardown(test_http_client_bounds_response, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_options, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retries_then_delivers_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replay_oldest_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_expect_refused_before_body, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retry_after_honoured, setup, teardown),
		cmocka_unit_test_setup_teardown(test_backoff_grows_with_full_jitter, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_error_rejected_not_retried, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conflict_kept_as_rejected, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connection_closed_without_answer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stop_keeps_pending_for_next_start, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stop_aborts_request_in_flight, setup, teardown),
		cmocka_unit_test_setup_teardown(test_memory_queue_when_spool_refuses, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full_disk_memory_queue_delivers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_outage_accounting_exact, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
