/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel symbol upload: GET /api/v1/kernel-symbols/{id}; on 404 render kallsyms and PUT. */
#include "agent/symbols/ksyms_upload.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/node/host.h"
#include "agent/ship/http_client.h"
#include "common/compress.h"
#include "common/error.h"

#define KALLSYMS_READ_MAX (256u << 20)

struct ksyms_upload {
	struct ksyms_upload_options opts;
	char *server_url, *token, *ca_file;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	atomic_bool stopping;
};

static void emit(struct ksyms_upload *u, enum ksyms_upload_event_kind kind, const char *object,
		 const char *build_id, long count, int status, uint64_t delay_ms, const char *msg)
{
	struct ksyms_upload_event ev = { kind, object, build_id, count, status, delay_ms,
					 msg ? msg : "" };

	if (u->opts.on_event)
		u->opts.on_event(u->opts.event_ctx, &ev);
}

static bool should_abort(void *ctx)
{
	return atomic_load(&((struct ksyms_upload *)ctx)->stopping);
}

/* Waits up to `seconds` or until stopped; returns true when stopping. */
static bool wait_or_stop(struct ksyms_upload *u, double seconds)
{
	struct timespec deadline;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += (time_t)seconds;
	deadline.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&u->lock);
	while (!atomic_load(&u->stopping)) {
		if (pthread_cond_timedwait(&u->wake, &u->lock, &deadline) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&u->lock);
	return atomic_load(&u->stopping);
}

enum attempt_result { ATTEMPT_DONE, ATTEMPT_RETRY, ATTEMPT_GIVE_UP };

/* One GET-then-maybe-PUT attempt for one object; *retry_after_s is the server's Retry-After
 * of the last answer (seconds, -1 when none). */
static enum attempt_result upload_object(struct ksyms_upload *u, struct http_client *client,
					 const struct kernel_module *module, const char *kallsyms,
					 size_t kallsyms_len, const char *name, const char *hex,
					 char *why, size_t whylen, int *status,
					 int64_t *retry_after_s)
{
	char path[256];
	struct http_client_response resp = { 0 };
	struct http_client_request req = {
		.method = "GET",
		.path = path,
		.should_abort = should_abort,
		.abort_ctx = u,
	};
	struct byte_buf text = { 0 }, compressed = { 0 };
	enum attempt_result result = ATTEMPT_RETRY;
	int rc;

	snprintf(path, sizeof(path), "/api/v1/kernel-symbols/%s", hex);
	rc = http_client_request(client, &req, &resp);
	*status = resp.status;
	*retry_after_s = resp.status ? resp.retry_after_s : -1;
	if (rc < 0 && resp.status == 0) {
		snprintf(why, whylen, "%s", resp.error[0] ? resp.error : sysom_strerror(rc));
		goto cleanup;
	}
	if (resp.status == 200) {
		result = ATTEMPT_DONE;
		emit(u, KSYMS_UPLOAD_PRESENT, name, hex, 0, 200, 0, NULL);
		goto cleanup;
	}
	if (resp.status != 404) {
		snprintf(why, whylen, "GET answered %d: %.160s", resp.status,
			 resp.body ? (const char *)resp.body : "");
		result = resp.status >= 400 && resp.status < 500 && resp.status != 408 &&
					 resp.status != 429 && resp.status != 401 && resp.status != 403
				 ? ATTEMPT_GIVE_UP
				 : ATTEMPT_RETRY;
		goto cleanup;
	}
	long count = kernel_symbols_render(u->opts.kernel, module, kallsyms, kallsyms_len, &text);
	if (count <= 0) {
		snprintf(why, whylen, "no text symbols to upload (%s)",
			 count < 0 ? sysom_strerror((int)count) : "empty");
		result = ATTEMPT_GIVE_UP;
		goto cleanup;
	}
	rc = sysom_zstd_compress(text.data, text.len, 3, &compressed);
	if (rc) {
		snprintf(why, whylen, "compressing symbols: %s", sysom_strerror(rc));
		goto cleanup;
	}
	http_client_response_free(&resp);
	memset(&resp, 0, sizeof(resp));
	req.method = "PUT";
	req.content_type = "text/plain";
	req.content_encoding = "zstd";
	req.body = compressed.data;
	req.body_len = compressed.len;
	rc = http_client_request(client, &req, &resp);
	*status = resp.status;
	*retry_after_s = resp.status ? resp.retry_after_s : -1;
	if (resp.status >= 200 && resp.status < 300) {
		result = ATTEMPT_DONE;
		emit(u, KSYMS_UPLOAD_DONE, name, hex, count, resp.status, 0, NULL);
	} else if (resp.status == 0) {
		snprintf(why, whylen, "%s", resp.error[0] ? resp.error : sysom_strerror(rc));
	} else {
		snprintf(why, whylen, "PUT answered %d: %.160s", resp.status,
			 resp.body ? (const char *)resp.body : "");
		if (resp.status >= 400 && resp.status < 500 && resp.status != 408 &&
		    resp.status != 429 && resp.status != 401 && resp.status != 403)
			result = ATTEMPT_GIVE_UP;
	}
cleanup:
	http_client_response_free(&resp);
	byte_buf_free(&text);
	byte_buf_free(&compressed);
	return result;
}

static void *upload_thread(void *arg)
{
	struct ksyms_upload *u = arg;
	const struct kernel_info *k = u->opts.kernel;
	struct http_client_options copts = {
		.base_url = u->server_url,
		.token = u->token,
		.ca_file = u->ca_file,
		.user_agent = "sysom-agent",
	};
	struct http_client *client = NULL;
	char *kallsyms = NULL;
	long len;

	len = host_read_file(u->opts.kallsyms_path ? u->opts.kallsyms_path : "/proc/kallsyms",
			     KALLSYMS_READ_MAX, &kallsyms);
	if (len < 0) {
		emit(u, KSYMS_UPLOAD_GIVEN_UP, "[kernel.kallsyms]", "", 0, 0, 0,
		     "cannot read /proc/kallsyms");
		return NULL;
	}
	if (http_client_new(&copts, &client)) {
		emit(u, KSYMS_UPLOAD_GIVEN_UP, "[kernel.kallsyms]", "", 0, 0, 0,
		     "cannot create the HTTP client");
		goto cleanup;
	}
	/* Object 0 is the kernel; 1..n the modules. */
	for (uint32_t i = 0; i <= k->module_count && !atomic_load(&u->stopping); i++) {
		const struct kernel_module *module = i ? &k->modules[i - 1] : NULL;
		const struct sysom_build_id *id = module ? &module->id : &k->id;
		const char *name = module ? module->name : "[kernel.kallsyms]";
		char hex[2 * SYSOM_BUILD_ID_MAX + 1];
		double delay = u->opts.retry_initial_s > 0 ? u->opts.retry_initial_s : 5;
		double max_delay = u->opts.retry_max_s > 0 ? u->opts.retry_max_s : 300;

		sysom_build_id_hex(id, hex, sizeof(hex));
		while (!atomic_load(&u->stopping)) {
			char why[320] = "";
			int status = 0;
			int64_t retry_after = -1;
			enum attempt_result r = upload_object(u, client, module, kallsyms, (size_t)len,
							      name, hex, why, sizeof(why), &status,
							      &retry_after);
			if (r == ATTEMPT_DONE)
				break;
			if (r == ATTEMPT_GIVE_UP) {
				emit(u, KSYMS_UPLOAD_GIVEN_UP, name, hex, 0, status, 0, why);
				break;
			}
			/* The server's Retry-After (a 503 while its decode memory is busy) wins
			 * over the backoff, within the longest delay. */
			double wait = retry_after < 0 ? delay
				      : (double)retry_after < max_delay ? (double)retry_after
									: max_delay;
			emit(u, KSYMS_UPLOAD_RETRY, name, hex, 0, status, (uint64_t)(wait * 1000), why);
			if (wait_or_stop(u, wait))
				break;
			if (retry_after < 0)
				delay = delay * 2 > max_delay ? max_delay : delay * 2;
		}
	}
cleanup:
	http_client_free(client);
	free(kallsyms);
	malloc_trim(0); /* the kallsyms copy was the agent's largest allocation */
	return NULL;
}

int ksyms_upload_start(const struct ksyms_upload_options *opts, struct ksyms_upload **out)
{
	struct ksyms_upload *u = calloc(1, sizeof(*u));
	int rc;

	if (!u)
		return -ENOMEM;
	u->opts = *opts;
	u->server_url = strdup(opts->server_url);
	u->token = opts->token ? strdup(opts->token) : NULL;
	u->ca_file = opts->ca_file ? strdup(opts->ca_file) : NULL;
	if (!u->server_url || (opts->token && !u->token) || (opts->ca_file && !u->ca_file)) {
		rc = -ENOMEM;
		goto fail;
	}
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->wake, NULL);
	atomic_init(&u->stopping, false);
	rc = -pthread_create(&u->thread, NULL, upload_thread, u);
	if (rc) {
		pthread_mutex_destroy(&u->lock);
		pthread_cond_destroy(&u->wake);
		goto fail;
	}
	*out = u;
	return 0;
fail:
	free(u->server_url);
	free(u->token);
	free(u->ca_file);
	free(u);
	return rc;
}

void ksyms_upload_stop(struct ksyms_upload *u)
{
	if (!u)
		return;
	pthread_mutex_lock(&u->lock);
	atomic_store(&u->stopping, true);
	pthread_cond_broadcast(&u->wake);
	pthread_mutex_unlock(&u->lock);
	pthread_join(u->thread, NULL);
	pthread_mutex_destroy(&u->lock);
	pthread_cond_destroy(&u->wake);
	free(u->server_url);
	free(u->token);
	free(u->ca_file);
	free(u);
}
