/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel symbol upload against a scripted server: a 503 with Retry-After (the server's decode
 * memory is busy) is retried after the server's delay, not the backoff; without it the
 * backoff applies; a 4xx gives up. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/symbols/ksyms_upload.h"
#include "common/clock.h"
#include "tests/support/stub_http.h"

#define MAX_EVENTS 16

struct events {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct ksyms_upload_event ev[MAX_EVENTS];
	size_t n;
};

static void on_event(void *ctx, const struct ksyms_upload_event *ev)
{
	struct events *e = ctx;

	pthread_mutex_lock(&e->lock);
	if (e->n < MAX_EVENTS) {
		e->ev[e->n] = *ev;
		e->ev[e->n].object = e->ev[e->n].build_id = e->ev[e->n].message = ""; /* borrowed */
		e->n++;
	}
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
}

/* Waits (bounded) for an event of `kind`; returns its index or fails. */
static size_t wait_event(struct events *e, enum ksyms_upload_event_kind kind)
{
	struct timespec deadline;
	size_t found = MAX_EVENTS;

	stub_http_deadline(&deadline, 20);
	pthread_mutex_lock(&e->lock);
	for (;;) {
		for (size_t i = 0; i < e->n && found == MAX_EVENTS; i++)
			if (e->ev[i].kind == kind)
				found = i;
		if (found != MAX_EVENTS || pthread_cond_timedwait(&e->cond, &e->lock, &deadline))
			break;
	}
	pthread_mutex_unlock(&e->lock);
	assert_true(found < MAX_EVENTS);
	return found;
}

struct fixture {
	char dir[64], kallsyms[96], url[64];
	struct kernel_info kernel;
	struct events events;
};

static void fixture_init(struct fixture *f, uint16_t port)
{
	static const char text[] = "ffffffff81000000 T _text\n"
				   "ffffffff81000100 T start_kernel\n"
				   "ffffffff81000200 t do_one_initcall\n"
				   "ffffffff82000000 D _end\n";
	FILE *fp;

	memset(f, 0, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/sysom-ksyms-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->kallsyms, sizeof(f->kallsyms), "%s/kallsyms", f->dir);
	assert_non_null(fp = fopen(f->kallsyms, "w"));
	assert_int_equal(fwrite(text, 1, sizeof(text) - 1, fp), sizeof(text) - 1);
	fclose(fp);
	snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%u", port);
	f->kernel.id.kind = SYSOM_OBJECT_KERNEL;
	f->kernel.id.len = 20;
	memset(f->kernel.id.bytes, 0xab, 20);
	f->kernel.text_start = 0xffffffff81000000ULL;
	f->kernel.image_end = 0xffffffff82000000ULL;
	f->kernel.addresses_visible = true;
	pthread_mutex_init(&f->events.lock, NULL);
	pthread_cond_init(&f->events.cond, NULL);
}

static void fixture_fini(struct fixture *f)
{
	unlink(f->kallsyms);
	rmdir(f->dir);
	pthread_mutex_destroy(&f->events.lock);
	pthread_cond_destroy(&f->events.cond);
}

static struct ksyms_upload *start(struct fixture *f, double retry_initial_s)
{
	struct ksyms_upload_options o = {
		.server_url = f->url,
		.kernel = &f->kernel,
		.kallsyms_path = f->kallsyms,
		.retry_initial_s = retry_initial_s,
		.retry_max_s = 600,
		.on_event = on_event,
		.event_ctx = &f->events,
	};
	struct ksyms_upload *u = NULL;

	assert_int_equal(ksyms_upload_start(&o, &u), 0);
	return u;
}

static void test_retry_after_replaces_the_backoff(void **state)
{
	static const struct stub_step script[] = {
		{ 404, NULL, "{\"error\":\"no symbols\"}", false },
		{ 503, "Retry-After: 1\r\n", "{\"error\":\"decode memory busy\"}", false },
		{ 404, NULL, "{\"error\":\"no symbols\"}", false },
		{ 200, NULL, "{\"status\":\"stored\"}", false },
	};
	struct stub_http *srv = stub_http_start(script, 4, (struct stub_step){ 500, NULL, NULL, false });
	struct fixture f;

	(void)state;
	fixture_init(&f, srv->port);
	/* A backoff of 10 minutes: only the server's 1 s lets the upload finish in time. */
	uint64_t t0 = sysom_monotonic_ns();
	struct ksyms_upload *u = start(&f, 600);
	size_t retry = wait_event(&f.events, KSYMS_UPLOAD_RETRY);
	assert_int_equal(f.events.ev[retry].http_status, 503);
	assert_int_equal(f.events.ev[retry].delay_ms, 1000);
	wait_event(&f.events, KSYMS_UPLOAD_DONE);
	uint64_t took = sysom_monotonic_ns() - t0;
	assert_true(took >= SYSOM_NS_PER_S && took < 15 * SYSOM_NS_PER_S);
	assert_int_equal(stub_http_count(srv), 4);
	assert_string_equal(srv->reqs[1].method, "PUT");
	assert_string_equal(srv->reqs[3].method, "PUT");
	ksyms_upload_stop(u);
	stub_http_stop(srv);
	fixture_fini(&f);
}

static void test_backoff_without_retry_after(void **state)
{
	static const struct stub_step script[] = {
		{ 404, NULL, NULL, false },
		{ 503, NULL, NULL, false },
	};
	struct stub_http *srv = stub_http_start(script, 2, (struct stub_step){ 404, NULL, NULL, false });
	struct fixture f;

	(void)state;
	fixture_init(&f, srv->port);
	struct ksyms_upload *u = start(&f, 300);
	size_t retry = wait_event(&f.events, KSYMS_UPLOAD_RETRY);
	assert_int_equal(f.events.ev[retry].delay_ms, 300000);
	ksyms_upload_stop(u); /* interrupts the wait */
	assert_int_equal(stub_http_count(srv), 2);
	stub_http_stop(srv);
	fixture_fini(&f);
}

static void test_client_error_gives_up(void **state)
{
	static const struct stub_step script[] = {
		{ 404, NULL, NULL, false },
		{ 413, NULL, "{\"error\":\"more than the whole budget\"}", false },
	};
	struct stub_http *srv = stub_http_start(script, 2, (struct stub_step){ 500, NULL, NULL, false });
	struct fixture f;

	(void)state;
	fixture_init(&f, srv->port);
	struct ksyms_upload *u = start(&f, 1);
	size_t given_up = wait_event(&f.events, KSYMS_UPLOAD_GIVEN_UP);
	assert_int_equal(f.events.ev[given_up].http_status, 413);
	ksyms_upload_stop(u);
	assert_int_equal(stub_http_count(srv), 2);
	stub_http_stop(srv);
	fixture_fini(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_retry_after_replaces_the_backoff),
		cmocka_unit_test(test_backoff_without_retry_after),
		cmocka_unit_test(test_client_error_gives_up),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
