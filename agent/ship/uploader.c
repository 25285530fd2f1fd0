/* SPDX-License-Identifier: Apache-2.0 */
/* Upload thread: oldest-first delivery, exponential backoff with full jitter, memory queue. */
#include "agent/ship/uploader.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/ship/http_client.h"
#include "agent/ship/retry.h"
#include "common/options.h"
#include "common/bytes.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/hex.h"

#define NS_PER_S 1000000000ull
#define NS_PER_MS 1000000ull

/* A batch held in memory because the spool could not store it. */
struct mem_batch {
	struct mem_batch *next;
	uint64_t sequence;
	uint64_t window_end_ns;
	size_t len;
	uint8_t body[]; /* len bytes */
};

/* The batch the thread is delivering (owned by the thread while it holds it). A spooled batch
 * is held only for one attempt (pinned in the spool meanwhile) and read again for the next:
 * while the thread backs off, the spool's limits may delete it, and then it counts as dropped
 * and is not sent again. A memory-held batch is held until it is delivered or rejected. */
struct current {
	bool have;
	struct mem_batch *mem;  /* when it came from the memory queue */
	struct spool_batch sb;  /* when it came from the spool */
};

struct uploader {
	pthread_mutex_t lock;
	pthread_cond_t cond;    /* work arrived, or stop was asked */
	pthread_t thread;
	bool running;           /* the thread exists and was not joined */
	struct spool *spool;    /* borrowed */
	struct http_client *http; /* used by the thread only */
	uint64_t epoch;         /* the spool's, for memory-held batches */
	char node_hex[33];
	uint64_t backoff_initial_ns;
	uint64_t backoff_max_ns;
	uint64_t request_timeout_ns;
	uint64_t memq_max;
	uploader_event_fn on_event;
	void *event_ctx;
	struct retry_clock clock; /* jitter source used by the thread only */

	/* Under `lock`: */
	struct mem_batch *mq_head, *mq_tail;
	uint64_t mq_count, mq_bytes; /* queue plus a memory batch in flight */
	uint64_t work_gen;      /* bumped by each submit */
	bool closed;            /* submit refused */
	bool stopping;
	uint64_t stop_deadline_ns;
	uint64_t next_attempt_ns;
	uint32_t failures;      /* consecutive failed attempts */
	struct uploader_stats stats;
};

/* ---------------------------------------------------------------------------------------- */
/* Time, randomness, events */

static uint64_t now(struct uploader *u)
{
	return retry_clock_now(&u->clock);
}

static void emit(struct uploader *u, enum uploader_event_kind kind, uint64_t epoch,
		 uint64_t sequence, int status, int error, uint64_t delay_ns, uint32_t attempt,
		 const char *message)
{
	struct uploader_event ev = { kind, epoch, sequence, status, error, delay_ns / NS_PER_MS,
				     attempt, message ? message : "", false };

	if (u->on_event)
		u->on_event(u->event_ctx, &ev);
}

/* Reports a rejected batch; `kept`: it is in the spool's rejected/ directory. */
static void emit_rejected(struct uploader *u, uint64_t epoch, uint64_t sequence, int status,
			  const char *message, bool kept)
{
	struct uploader_event ev = { .kind = UPLOADER_EVENT_REJECTED, .epoch = epoch,
				     .sequence = sequence, .http_status = status,
				     .error = -SYSOM_EHTTP, .message = message, .kept = kept };

	if (u->on_event)
		u->on_event(u->event_ctx, &ev);
}

/* ---------------------------------------------------------------------------------------- */
/* Delivery */

/*
 * Sets a refused batch aside in the spool's rejected/ directory, for an operator to look at
 * (a 409 means the server holds other content under its identity: these samples are not
 * stored). A memory-held batch is committed to the spool first, which may work again by now.
 * Returns whether the batch was kept.
 */
static bool reject_keep(struct uploader *u, const struct current *cur, uint64_t epoch,
			uint64_t seq)
{
	if (cur->mem && spool_batch_commit(u->spool, seq, cur->mem->window_end_ns, cur->mem->body,
					   cur->mem->len) != 0)
		return false;
	return spool_batch_reject(u->spool, epoch, seq) == 0;
}

static bool should_abort(void *ctx)
{
	struct uploader *u = ctx;
	bool abort_now;

	pthread_mutex_lock(&u->lock);
	abort_now = u->stopping && now(u) >= u->stop_deadline_ns;
	pthread_mutex_unlock(&u->lock);
	return abort_now;
}

static bool is_retryable(int r)
{
	/* Transport failures, timeouts, throttling and server errors can heal; so can bad
	 * credentials (an operator fixes the token: the batch itself is fine). 1xx/3xx mean a
	 * misconfigured URL or proxy: keep the data too. */
	return r < 200 || (r >= 300 && r < 400) || r == 401 || r == 403 || r == 408 ||
	       r == 429 || r >= 500;
}

/* Records the last failure (lock held): an HTTP status with the server's text, or a transport
 * error's text. Both are truncated to fit. */
static void set_last_error(struct uploader *u, int status, const char *message)
{
	if (status > 0)
		snprintf(u->stats.last_error, sizeof(u->stats.last_error), "HTTP %d: %.200s", status,
			 message);
	else
		snprintf(u->stats.last_error, sizeof(u->stats.last_error), "%.240s", message);
}

/* Forgets the current batch after it was delivered or rejected. */
static void current_done(struct uploader *u, struct current *cur)
{
	if (cur->mem) {
		pthread_mutex_lock(&u->lock);
		u->mq_count--;
		u->mq_bytes -= cur->mem->len;
		pthread_mutex_unlock(&u->lock);
		free(cur->mem);
		cur->mem = NULL;
	} else {
		spool_batch_release(&cur->sb);
	}
	cur->have = false;
}

/* After an attempt that did not settle a spooled batch: unpins and forgets it (the next
 * attempt reads the oldest batch again). A memory-held batch stays current. */
static void current_put_back(struct uploader *u, struct current *cur)
{
	if (cur->mem)
		return;
	spool_batch_unpin(u->spool, cur->sb.epoch, cur->sb.sequence);
	spool_batch_release(&cur->sb);
	cur->have = false;
}

/* One attempt at delivering `cur`; updates stats and schedules the next attempt. */
static void deliver(struct uploader *u, struct current *cur)
{
	uint64_t epoch = cur->mem ? u->epoch : cur->sb.epoch;
	uint64_t seq = cur->mem ? cur->mem->sequence : cur->sb.sequence;
	const void *body = cur->mem ? (const void *)cur->mem->body : cur->sb.body;
	size_t len = cur->mem ? cur->mem->len : cur->sb.body_len;
	struct http_client_response resp;
	char key[96], message[UPLOADER_MESSAGE_MAX];
	const char *headers[1] = { key };
	uint64_t timeout_ns = u->request_timeout_ns, t;
	uint32_t attempt;
	int r;

	snprintf(key, sizeof(key), "Idempotency-Key: %s:%016" PRIx64 ":%" PRIu64, u->node_hex,
		 epoch, seq);
	pthread_mutex_lock(&u->lock);
	t = now(u);
	if (u->stopping)
		timeout_ns = u->stop_deadline_ns > t && u->stop_deadline_ns - t < timeout_ns ?
				     u->stop_deadline_ns - t : timeout_ns;
	pthread_mutex_unlock(&u->lock);
	struct http_client_request req = {
		.method = "POST",
		.path = UPLOADER_INGEST_PATH,
		.content_type = UPLOADER_CONTENT_TYPE,
		.content_encoding = UPLOADER_CONTENT_ENCODING,
		.headers = headers,
		.header_count = 1,
		.body = body,
		.body_len = len,
		.timeout_ms = (uint32_t)(timeout_ns / NS_PER_MS ? timeout_ns / NS_PER_MS : 1),
		.should_abort = should_abort,
		.abort_ctx = u,
	};

	r = http_client_request(u->http, &req, &resp);
	if (r < 0)
		snprintf(message, sizeof(message), "%s", resp.error);
	else
		sysom_text_sanitize(message, sizeof(message), resp.body ? (const char *)resp.body : "",
			 resp.body_len);

	pthread_mutex_lock(&u->lock);
	t = now(u);
	u->stats.last_status = r > 0 ? r : 0;
	if (r >= 300) {
		u->stats.refused_early += resp.body_bytes_sent < len;
		u->stats.refused_body_bytes += resp.body_bytes_sent;
	}
	if (r >= 200 && r < 300) {
		u->stats.server_wire_minor = resp.wire_minor;
		u->stats.batches_sent++;
		u->stats.bytes_sent += len;
		u->stats.last_success_unix_ns = sysom_realtime_ns();
		u->failures = 0;
		u->next_attempt_ns = 0;
		pthread_mutex_unlock(&u->lock);
		if (!cur->mem)
			spool_batch_remove(u->spool, epoch, seq); /* pinned: the limits left it */
		current_done(u, cur);
		emit(u, UPLOADER_EVENT_DELIVERED, epoch, seq, r, 0, 0, 0, "");
	} else if (r == -ECANCELED) {
		/* Aborted by uploader_stop at its deadline: not a failure of the server. */
		pthread_mutex_unlock(&u->lock);
		current_put_back(u, cur);
	} else if (is_retryable(r)) {
		attempt = ++u->failures;
		uint64_t delay = retry_backoff_ns(&u->clock, u->backoff_initial_ns, u->backoff_max_ns,
						  attempt, r > 0 ? resp.retry_after_s : -1);
		u->next_attempt_ns = retry_sat_add(t, delay);
		u->stats.retries++;
		set_last_error(u, r, message);
		pthread_mutex_unlock(&u->lock);
		current_put_back(u, cur); /* before the event: from now on it may be dropped */
		emit(u, UPLOADER_EVENT_RETRY, epoch, seq, r > 0 ? r : 0,
		     r > 0 ? -SYSOM_EHTTP : r, delay, attempt, message);
	} else {
		u->stats.rejected++;
		u->stats.conflicts += r == 409;
		u->failures = 0;
		u->next_attempt_ns = 0;
		set_last_error(u, r, message);
		pthread_mutex_unlock(&u->lock);
		bool kept = reject_keep(u, cur, epoch, seq);
		current_done(u, cur);
		emit_rejected(u, epoch, seq, r, message, kept);
	}
	http_client_response_free(&resp);
}

static void *upload_thread(void *arg)
{
	struct uploader *u = arg;
	struct current cur = { 0 };

	pthread_mutex_lock(&u->lock);
	for (;;) {
		uint64_t t = now(u);
		if (u->stopping && t >= u->stop_deadline_ns)
			break;
		if (t < u->next_attempt_ns) {
			/* Backing off (after a failed attempt or spool read); stop cuts it short. */
			retry_clock_wait_until(&u->clock, &u->lock, &u->cond,
					       u->stopping && u->stop_deadline_ns < u->next_attempt_ns ?
						       u->stop_deadline_ns : u->next_attempt_ns);
			continue;
		}
		if (!cur.have && u->mq_head) {
			/* Memory-held batches first: they are the ones a crash would lose. */
			cur.mem = u->mq_head;
			u->mq_head = cur.mem->next;
			if (!u->mq_head)
				u->mq_tail = NULL;
			cur.mem->next = NULL;
			cur.have = true;
		}
		if (!cur.have) {
			uint64_t gen = u->work_gen;
			pthread_mutex_unlock(&u->lock);
			int r = spool_batch_oldest(u->spool, &cur.sb);
			pthread_mutex_lock(&u->lock);
			if (r == 0) {
				cur.have = true;
			} else if (r == -ENOENT) {
				if (u->mq_head || gen != u->work_gen)
					continue;
				if (u->stopping)
					break; /* everything delivered */
				pthread_cond_wait(&u->cond, &u->lock);
				continue;
			} else {
				uint32_t attempt = ++u->failures;
				uint64_t delay = retry_backoff_ns(&u->clock, u->backoff_initial_ns,
							  u->backoff_max_ns, attempt, -1);
				u->next_attempt_ns = retry_sat_add(t, delay);
				snprintf(u->stats.last_error, sizeof(u->stats.last_error),
					 "reading the spool: %s", sysom_strerror(r));
				pthread_mutex_unlock(&u->lock);
				emit(u, UPLOADER_EVENT_SPOOL_ERROR, 0, 0, 0, r, delay, attempt,
				     sysom_strerror(r));
				pthread_mutex_lock(&u->lock);
				continue;
			}
		}
		pthread_mutex_unlock(&u->lock);
		deliver(u, &cur);
		pthread_mutex_lock(&u->lock);
	}
	if (cur.have && cur.mem) {
		/* Back to the front, in order, for uploader_stop to spool. */
		cur.mem->next = u->mq_head;
		u->mq_head = cur.mem;
		if (!u->mq_tail)
			u->mq_tail = cur.mem;
		cur.have = false;
	}
	pthread_mutex_unlock(&u->lock);
	if (cur.have)
		current_put_back(u, &cur); /* stays in the spool for the next start */
	return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Public API */

int uploader_start(const struct uploader_options *opts, struct spool *spool,
		   struct uploader **out)
{
	struct uploader *u = NULL;
	bool have_mutex = false, have_cond = false;
	uint64_t connect_ns = 0;
	int err = -SYSOM_ECONFIG;

	if (!opts || !spool || !opts->server_url)
		return -SYSOM_ECONFIG;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->stats.server_wire_minor = -1;
	if (!sysom_seconds_option(opts->backoff_initial_s, UPLOADER_DEFAULT_BACKOFF_INITIAL_S,
			    UPLOADER_MAX_BACKOFF_S, &u->backoff_initial_ns) ||
	    !sysom_seconds_option(opts->backoff_max_s, UPLOADER_DEFAULT_BACKOFF_MAX_S,
			    UPLOADER_MAX_BACKOFF_S, &u->backoff_max_ns) ||
	    !sysom_seconds_option(opts->request_timeout_s, UPLOADER_DEFAULT_REQUEST_TIMEOUT_S,
			    UPLOADER_MAX_TIMEOUT_S, &u->request_timeout_ns) ||
	    !sysom_seconds_option(opts->connect_timeout_s, UPLOADER_DEFAULT_CONNECT_TIMEOUT_S,
			    UPLOADER_MAX_TIMEOUT_S, &connect_ns) ||
	    u->backoff_initial_ns > u->backoff_max_ns || u->request_timeout_ns < NS_PER_MS ||
	    connect_ns < NS_PER_MS)
		goto cleanup;
	struct http_client_options hopts = {
		.base_url = opts->server_url,
		.token = opts->token,
		.ca_file = opts->ca_file,
		.user_agent = "sysom-agent",
		.connect_timeout_ms = (uint32_t)(connect_ns / NS_PER_MS),
		.timeout_ms = (uint32_t)(u->request_timeout_ns / NS_PER_MS),
	};
	err = http_client_new(&hopts, &u->http);
	if (err)
		goto cleanup;
	u->spool = spool;
	u->epoch = spool_epoch(spool);
	sysom_hex_encode(opts->node_id, 16, u->node_hex, sizeof(u->node_hex));
	u->memq_max = opts->memory_queue_max_bytes ? opts->memory_queue_max_bytes :
						     UPLOADER_DEFAULT_MEMORY_QUEUE;
	u->on_event = opts->on_event;
	u->event_ctx = opts->event_ctx;
	retry_clock_init(&u->clock, opts->now_ns, opts->sleep_ns, opts->random_u64, opts->hook_ctx);

	err = -pthread_mutex_init(&u->lock, NULL);
	if (err)
		goto cleanup;
	have_mutex = true;
	err = retry_cond_init(&u->cond);
	if (err)
		goto cleanup;
	have_cond = true;
	err = -pthread_create(&u->thread, NULL, upload_thread, u);
	if (err)
		goto cleanup;
	u->running = true;
	*out = u;
	return 0;
cleanup:
	if (have_cond)
		pthread_cond_destroy(&u->cond);
	if (have_mutex)
		pthread_mutex_destroy(&u->lock);
	http_client_free(u->http);
	free(u);
	return err;
}

int uploader_submit(struct uploader *u, uint64_t sequence, uint64_t window_end_ns,
		    const void *body, size_t len)
{
	struct mem_batch *mb = NULL, *dropped = NULL;
	bool closed;
	int r;

	if (!u || (!body && len))
		return -EINVAL;
	pthread_mutex_lock(&u->lock);
	closed = u->closed;
	pthread_mutex_unlock(&u->lock);
	if (closed)
		return -ESHUTDOWN;

	r = spool_batch_commit(u->spool, sequence, window_end_ns, body, len);
	if (r == 0) {
		pthread_mutex_lock(&u->lock);
		u->work_gen++;
		pthread_cond_signal(&u->cond);
		pthread_mutex_unlock(&u->lock);
		return 0;
	}
	if (r == -EINVAL || r == -EEXIST)
		return r; /* the caller's mistake, not a storage failure */

	/* The spool failed (disk full, I/O error, over its limits): hold the batch in memory. */
	if (len <= u->memq_max)
		mb = malloc(sizeof(*mb) + len);
	if (!mb) {
		pthread_mutex_lock(&u->lock);
		u->stats.lost++;
		pthread_mutex_unlock(&u->lock);
		emit(u, UPLOADER_EVENT_LOST, u->epoch, sequence, 0, r, 0, 0,
		     len > u->memq_max ? "spool failed and the batch exceeds the memory queue"
				       : "spool failed and no memory for the batch");
		return r;
	}
	*mb = (struct mem_batch){ NULL, sequence, window_end_ns, len };
	memcpy(mb->body, body, len);

	pthread_mutex_lock(&u->lock);
	/* Full: drop the oldest held batches (not the one in flight, which is counted). */
	struct mem_batch **tail = &dropped;
	while (u->mq_bytes + len > u->memq_max && u->mq_head) {
		struct mem_batch *old = u->mq_head;
		u->mq_head = old->next;
		if (!u->mq_head)
			u->mq_tail = NULL;
		u->mq_count--;
		u->mq_bytes -= old->len;
		u->stats.lost++;
		old->next = NULL;
		*tail = old;
		tail = &old->next;
	}
	/* uploader_stop may have flushed the queue since the check above: too late to hold. */
	bool late = u->closed;
	bool fits = !late && u->mq_bytes + len <= u->memq_max;
	if (fits) {
		if (u->mq_tail)
			u->mq_tail->next = mb;
		else
			u->mq_head = mb;
		u->mq_tail = mb;
		u->mq_count++;
		u->mq_bytes += len;
		u->stats.memory_queued++;
		u->work_gen++;
		pthread_cond_signal(&u->cond);
	} else {
		u->stats.lost++;
	}
	pthread_mutex_unlock(&u->lock);

	while (dropped) {
		struct mem_batch *next = dropped->next;
		emit(u, UPLOADER_EVENT_LOST, u->epoch, dropped->sequence, 0, -SYSOM_ELIMIT, 0, 0,
		     "memory queue full: oldest held batch dropped");
		free(dropped);
		dropped = next;
	}
	if (!fits) {
		emit(u, UPLOADER_EVENT_LOST, u->epoch, sequence, 0, r, 0, 0,
		     late ? "spool failed while the uploader was stopping"
			  : "spool failed and the memory queue is taken by a batch in flight");
		free(mb);
		return r;
	}
	emit(u, UPLOADER_EVENT_MEMORY_QUEUED, u->epoch, sequence, 0, r, 0, 0, sysom_strerror(r));
	return 1;
}

int uploader_stop(struct uploader *u, double flush_timeout_s)
{
	int lost = 0;

	if (!u)
		return 0;
	pthread_mutex_lock(&u->lock);
	if (!u->running) {
		pthread_mutex_unlock(&u->lock);
		return 0;
	}
	uint64_t t = now(u);
	uint64_t flush_ns = isfinite(flush_timeout_s) && flush_timeout_s > 0 ?
				    (flush_timeout_s >= 1e9 ? UINT64_MAX :
							      (uint64_t)(flush_timeout_s * (double)NS_PER_S)) :
				    0;
	u->closed = true;
	u->stopping = true;
	u->stop_deadline_ns = retry_sat_add(t, flush_ns);
	pthread_cond_broadcast(&u->cond);
	pthread_mutex_unlock(&u->lock);
	pthread_join(u->thread, NULL);
	u->running = false;

	/* What only memory holds goes to the spool now, for the next start to deliver. */
	for (;;) {
		pthread_mutex_lock(&u->lock);
		struct mem_batch *mb = u->mq_head;
		if (mb) {
			u->mq_head = mb->next;
			if (!u->mq_head)
				u->mq_tail = NULL;
		}
		pthread_mutex_unlock(&u->lock);
		if (!mb)
			break;
		int r = spool_batch_commit(u->spool, mb->sequence, mb->window_end_ns, mb->body,
					   mb->len);
		pthread_mutex_lock(&u->lock);
		u->mq_count--;
		u->mq_bytes -= mb->len;
		if (r < 0)
			u->stats.lost++;
		pthread_mutex_unlock(&u->lock);
		if (r < 0) {
			lost++;
			emit(u, UPLOADER_EVENT_LOST, u->epoch, mb->sequence, 0, r, 0, 0,
			     "stopping: a memory-held batch could not be written to the spool");
		}
		free(mb);
	}
	return lost;
}

void uploader_stats(struct uploader *u, struct uploader_stats *out)
{
	struct spool_stats ss;

	spool_stats(u->spool, &ss);
	pthread_mutex_lock(&u->lock);
	*out = u->stats;
	out->pending_memory = u->mq_count;
	out->pending_memory_bytes = u->mq_bytes;
	out->pending = ss.files + u->mq_count;
	pthread_mutex_unlock(&u->lock);
}

void uploader_free(struct uploader *u)
{
	if (!u)
		return;
	uploader_stop(u, 0); /* empties the memory queue: nothing is queued once closed */
	http_client_free(u->http);
	pthread_cond_destroy(&u->cond);
	pthread_mutex_destroy(&u->lock);
	free(u);
}
