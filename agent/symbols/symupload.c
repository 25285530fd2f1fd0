/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol upload thread: missing queries in batches, verified files, chunked resumable PUTs. */
#include "agent/symbols/symupload.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/ship/http_client.h"
#include "agent/ship/retry.h"
#include "agent/symbols/symupload_internal.h"
#include "common/options.h"
#include "common/bytes.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/hex.h"

/* ---------------------------------------------------------------------------------------- */
/* Events and retry scheduling */

static void emit(struct symupload *u, const struct symupload_event *ev)
{
	if (u->on_event)
		u->on_event(u->event_ctx, ev);
}

/* An event about object `w` (state errors pass NULL). */
static void emit_simple(struct symupload *u, enum symupload_event_kind kind,
			const struct waiting *w, int status, int error, const char *message)
{
	char hex[HEX_MAX] = "";
	struct symupload_event ev = {
		.kind = kind,
		.path = w ? w->path : "",
		.build_id = hex,
		.identity = w ? identity_name(&w->id) : "",
		.http_status = status,
		.error = error,
		.message = message ? message : "",
	};

	if (w)
		hex_of(&w->id, hex);
	emit(u, &ev);
}

void symupload__state_error(struct symupload *u, int error, const char *what)
{
	char msg[SYMUPLOAD_MESSAGE_MAX];

	STAT_ADD(u, state_errors, 1);
	snprintf(msg, sizeof(msg), "%s: %s", what, sysom_strerror(error));
	emit_simple(u, SYMUPLOAD_EVENT_STATE_ERROR, NULL, 0, error, msg);
}

static bool should_abort(void *ctx)
{
	return stopping(ctx);
}

/*
 * Schedules the next request after a failure: the server's Retry-After when it sent one
 * (capped), else full jitter in [0, min(max, initial * 2^(failures - 1))]. Returns the delay.
 */
static uint64_t schedule_retry(struct symupload *u, int64_t retry_after_s, uint32_t *attempt)
{
	*attempt = ++u->failures;
	uint64_t delay = retry_backoff_ns(&u->clock, u->backoff_initial_ns, u->backoff_max_ns,
					  u->failures, retry_after_s);
	u->next_attempt_ns = retry_sat_add(now(u), delay);
	STAT_ADD(u, retries, 1);
	return delay;
}

static void request_succeeded(struct symupload *u)
{
	u->failures = 0;
	u->next_attempt_ns = 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Uploading */

/* Rate limiter: a token bucket of rate bytes/s holding at most one chunk (or `n`). */
static int rate_take(struct symupload *u, uint64_t n)
{
	if (!u->rate)
		return 0;
	uint64_t cap = n > u->chunk ? n : u->chunk;
	for (;;) {
		uint64_t t = now(u);
		uint64_t wait = rate_limit_take(&u->bucket, n, cap, t);
		if (!wait)
			return 0;
		pthread_mutex_lock(&u->lock);
		if (stopping(u)) {
			pthread_mutex_unlock(&u->lock);
			return -ECANCELED;
		}
		retry_clock_wait_until(&u->clock, &u->lock, &u->cond, retry_sat_add(t, wait));
		pthread_mutex_unlock(&u->lock);
		if (stopping(u))
			return -ECANCELED;
	}
}

static int request_timeout_ms(const struct symupload *u)
{
	uint64_t ms = u->request_timeout_ns / NS_PER_MS;

	return (int)(ms ? (ms > INT32_MAX ? INT32_MAX : ms) : 1);
}

/* Whether a failed request is worth repeating (the data is fine, the server or network not). */
static bool is_retryable(int r)
{
	return r < 200 || (r >= 300 && r < 400) || r == 401 || r == 403 || r == 408 || r == 429 ||
	       r >= 500;
}

enum outcome {
	OUT_DONE,     /* finished (stored or present) */
	OUT_RETRY,    /* transient failure: backoff scheduled, try again later */
	OUT_GIVE_UP,  /* refused or unreadable: failed for this run (event sent) */
	OUT_SKIP,     /* identity mismatch, too large, not found (event sent) */
	OUT_STOPPED,  /* stop was asked */
	OUT_YIELD,    /* a chunk was stored and other objects wait: go on after them */
};

static void report_retry(struct symupload *u, const struct waiting *w, int status, int error,
			 int64_t retry_after, const char *message)
{
	char hex[HEX_MAX] = "";
	uint32_t attempt;
	uint64_t delay = schedule_retry(u, retry_after, &attempt);
	struct symupload_event ev = {
		.kind = SYMUPLOAD_EVENT_RETRY,
		.path = w ? w->path : "",
		.build_id = hex,
		.identity = w ? identity_name(&w->id) : "",
		.http_status = status,
		.error = error,
		.delay_ms = delay / NS_PER_MS,
		.attempt = attempt,
		.message = message,
	};

	if (w)
		hex_of(&w->id, hex);
	emit(u, &ev);
}

/* Whether a query is due for the objects waiting for one. */
static bool query_due(const struct symupload *u, uint64_t t)
{
	return u->pending_count > 0 && (u->pending_count >= u->query_batch ||
					t - u->pending[0].since_ns >= u->query_interval_ns);
}

/* Whether other objects wait for the upload thread (known missing, or due for their query;
 * offers just taken):
 * a large file then gives way after each chunk, so that one 1-GiB library does not hold every
 * small object's symbols back for minutes (round robin by chunk). */
static bool others_waiting(struct symupload *u, const struct item *it)
{
	if (!it->yielded && u->yielded_items >= SYMUPLOAD_YIELDED_MAX)
		return false; /* enough uploads left part-way: finish this one */
	return u->work_count > 0 || query_due(u, now(u));
}

/* Records how far the server holds a file upload (symbols-inflight), when that moved. */
static void save_offset(struct symupload *u, const struct item *it, int part, uint64_t offset)
{
	struct inflight *cur = symupload__inflight_find(u, &it->w.id, part);

	if (cur && cur->offset != offset) {
		cur->offset = offset;
		symupload__inflight_save(u);
	}
}

/* Uploads one file of an item, chunk by chunk, resuming where the server (or our state)
 * says. */
static enum outcome upload_part(struct symupload *u, struct item *it, int part, int fd,
				const struct stat *st)
{
	struct part_state *ps = &it->part[part];
	uint64_t size = (uint64_t)st->st_size, offset = 0;
	char hex[HEX_MAX], hash[HASH_HEX + 1], upload_id[UPLOAD_ID_HEX + 1];
	char path[64 + HEX_MAX], range[96], h_id[64], h_hash[64], h_ident[48];
	char message[SYMUPLOAD_MESSAGE_MAX];
	const char *headers[4] = { range, h_id, h_hash, h_ident };
	int stalls = 0, rc;

	if (!ps->hashed || ps->dev != st->st_dev || ps->ino != st->st_ino || ps->size != size ||
	    ps->mtime_ns != mtime_ns(st)) {
		rc = symupload__hash_file(u, fd, size, ps->hash);
		if (rc == -ECANCELED)
			return OUT_STOPPED;
		if (rc) {
			snprintf(message, sizeof(message), "reading the %s: %s", part_name(part),
				 sysom_strerror(rc));
			emit_simple(u, SYMUPLOAD_EVENT_FAILED, &it->w, 0, rc, message);
			return OUT_GIVE_UP;
		}
		ps->hashed = true;
		ps->dev = st->st_dev;
		ps->ino = st->st_ino;
		ps->size = size;
		ps->mtime_ns = mtime_ns(st);
	}
	sysom_hex_encode(ps->hash, 16, hash, sizeof(hash));
	hex_of(&it->w.id, hex);

	struct inflight *rec = symupload__inflight_find(u, &it->w.id, part);
	if (rec && strcmp(rec->hash, hash) == 0 && rec->total == size) {
		memcpy(upload_id, rec->upload_id, sizeof(upload_id));
		offset = rec->offset;
		if (!ps->resumed) {
			ps->resumed = true;
			STAT_ADD(u, resumed, 1);
		}
	} else {
		symupload__new_upload_id(u, upload_id);
		symupload__inflight_put(u, &it->w.id, part, upload_id, hash, size);
		ps->resumed = true; /* this run's own upload: going on with it is no resume */
	}
	snprintf(path, sizeof(path), "/api/v1/symbols/%s/%s", hex, part_name(part));
	snprintf(h_id, sizeof(h_id), "X-Sysom-Upload-Id: %s", upload_id);
	snprintf(h_hash, sizeof(h_hash), "X-Sysom-Content-Hash: xxh3-128:%s", hash);
	snprintf(h_ident, sizeof(h_ident), "X-Sysom-Identity: %s", identity_name(&it->w.id));

	while (offset < size) {
		size_t n = size - offset < u->chunk ? (size_t)(size - offset) : u->chunk;
		struct http_client_response resp;
		uint64_t value = 0;
		bool stored = false; /* this chunk was acknowledged as received */

		if (stopping(u))
			return OUT_STOPPED;
		rc = pread_exact(fd, u->buf, n, offset);
		if (rc) {
			snprintf(message, sizeof(message), "reading the %s: %s", part_name(part),
				 sysom_strerror(rc));
			emit_simple(u, SYMUPLOAD_EVENT_FAILED, &it->w, 0, rc, message);
			return OUT_GIVE_UP;
		}
		if (rate_take(u, n))
			return OUT_STOPPED;
		snprintf(range, sizeof(range),
			 "Content-Range: bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, offset,
			 offset + n - 1, size);
		struct http_client_request req = {
			.method = "PUT",
			.path = path,
			.content_type = "application/octet-stream",
			.headers = headers,
			.header_count = 4,
			.body = u->buf,
			.body_len = n,
			.timeout_ms = (uint32_t)request_timeout_ms(u),
			.should_abort = should_abort,
			.abort_ctx = u,
		};
		int r = http_client_request(u->http, &req, &resp);
		if (r == -ECANCELED) {
			http_client_response_free(&resp);
			return OUT_STOPPED;
		}
		if (r < 0)
			snprintf(message, sizeof(message), "PUT %s: %s", part_name(part),
				 resp.error);
		else
			sysom_text_sanitize(message, sizeof(message), resp.body ? (const char *)resp.body : "",
				 resp.body_len);
		int64_t retry_after = resp.retry_after_s;
		bool got_received = r == 202 && symupload__parse_uint_member(
							resp.body, resp.body_len, "received", &value) == 0;
		bool got_resume = r == 409 && symupload__parse_uint_member(
						      resp.body, resp.body_len, "resume_at", &value) == 0;
		http_client_response_free(&resp);

		if (r == 200 || r == 201) {
			request_succeeded(u);
			if (r == 201) {
				ps->sent += n;
				pthread_mutex_lock(&u->lock);
				u->stats.uploaded_bytes += n;
				u->stats.uploaded_files++;
				pthread_mutex_unlock(&u->lock);
			}
			ps->done = true;
			symupload__inflight_remove(u, &it->w.id, part);
			return OUT_DONE;
		}
		if (got_received && value > offset && value < size) {
			request_succeeded(u);
			uint64_t taken = value - offset < n ? value - offset : n;
			ps->sent += taken;
			STAT_ADD(u, uploaded_bytes, taken);
			offset = value;
			stalls = 0;
			stored = true;
		} else if (got_resume && value < size) {
			/* The server holds another amount (lost, or more than we remembered). */
			request_succeeded(u);
			offset = value;
			if (++stalls > STALL_MAX) {
				report_retry(u, &it->w, r, -SYSOM_EHTTP, -1,
					     "the server keeps asking for other offsets");
				return OUT_RETRY;
			}
		} else if (r == 202 || r == 409 || (r >= 200 && r < 300)) {
			/* An answer outside the contract: start this file over after a pause. */
			char why[SYMUPLOAD_MESSAGE_MAX];
			snprintf(why, sizeof(why), "unexpected answer %d to a chunk: %.200s", r,
				 message);
			symupload__inflight_remove(u, &it->w.id, part);
			report_retry(u, &it->w, r, -SYSOM_EHTTP, -1, why);
			return OUT_RETRY;
		} else if (is_retryable(r)) {
			report_retry(u, &it->w, r > 0 ? r : 0, r > 0 ? -SYSOM_EHTTP : r,
				     r > 0 ? retry_after : -1, message);
			return OUT_RETRY;
		} else {
			symupload__inflight_remove(u, &it->w.id, part);
			emit_simple(u, SYMUPLOAD_EVENT_FAILED, &it->w, r, -SYSOM_EHTTP, message);
			return OUT_GIVE_UP;
		}
		save_offset(u, it, part, offset);
		/* Between chunks: keep the offers flowing into the backlog (no I/O). */
		symupload__take_offers(u);
		if (stored && others_waiting(u, it)) {
			STAT_ADD(u, yields, 1);
			return OUT_YIELD;
		}
	}
	/* Not reached with a file that has bytes (empty files are never uploaded). */
	return OUT_DONE;
}

static void skip_item(struct symupload *u, struct item *it, enum find_result why, int error)
{
	const char *msg = "";

	switch (why) {
	case MISMATCH:
		STAT_ADD(u, skipped_identity_mismatch, 1);
		msg = "the file no longer has this identity (replaced since it was mapped)";
		break;
	case TOO_LARGE:
		STAT_ADD(u, skipped_too_large, 1);
		msg = "larger than the upload limit (symbol-max-file-size)";
		break;
	case NOT_FOUND:
	case FOUND:
		STAT_ADD(u, skipped_unavailable, 1);
		msg = "the file cannot be opened any more (process and path gone)";
		break;
	}
	emit_simple(u, SYMUPLOAD_EVENT_SKIPPED, &it->w, 0, error, msg);
}

/* One attempt at an item: prove the executable, find the debug file, send what is missing. */
static enum outcome run_item(struct symupload *u, struct item *it)
{
	char dpath[SYMUPLOAD_PATH_MAX + 256];
	enum find_result found;
	struct stat st, dst;
	int fd = -1, dfd = -1, rc;
	enum outcome out = OUT_DONE;

	rc = symupload__open_executable(u, it, &fd, &st, &found);
	if (rc == -ECANCELED) {
		out = OUT_STOPPED;
		goto cleanup;
	}
	if (rc || found != FOUND) {
		skip_item(u, it, found, rc);
		out = OUT_SKIP;
		goto cleanup;
	}
	if (it->need[PART_EXECUTABLE] && !it->part[PART_EXECUTABLE].done) {
		out = upload_part(u, it, PART_EXECUTABLE, fd, &st);
		if (out != OUT_DONE)
			goto cleanup;
	}
	/* Searched once the executable is stored (an upload that yields to other objects comes
	 * back here per chunk; a debug link's CRC reads the whole debug file). */
	if (it->need[PART_DEBUGINFO] && !it->part[PART_DEBUGINFO].done) {
		bool too_large = false;
		rc = symupload__find_debug(u, it, fd, &st, dpath, sizeof(dpath), &dfd, &dst,
					   &too_large);
		if (rc == -ECANCELED) {
			out = OUT_STOPPED;
			goto cleanup;
		}
		if (rc <= 0) {
			/* None here (or over the size limit): the server keeps lacking it. */
			if (too_large)
				STAT_ADD(u, skipped_too_large, 1);
			it->need[PART_DEBUGINFO] = false;
		} else {
			free(it->debug_path);
			it->debug_path = strdup(dpath);
		}
	}
	if (it->need[PART_DEBUGINFO] && !it->part[PART_DEBUGINFO].done)
		out = upload_part(u, it, PART_DEBUGINFO, dfd, &dst);
cleanup:
	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
	if (dfd >= 0) {
		posix_fadvise(dfd, 0, 0, POSIX_FADV_DONTNEED);
		close(dfd);
	}
	return out;
}

/* ---------------------------------------------------------------------------------------- */
/* The backlog: offers → pending (missing query) → work (uploads) */

static void waiting_free(struct waiting *w)
{
	free(w->path);
	w->path = NULL;
}

static void item_free(struct symupload *u, struct item *it)
{
	if (!it)
		return;
	if (it->yielded)
		u->yielded_items--;
	waiting_free(&it->w);
	free(it->debug_path);
	free(it);
}

/* Moves offers from the shared queue into `pending` (what fits), dropping those known. */
void symupload__take_offers(struct symupload *u)
{
	struct waiting batch[64];
	uint32_t n;

	do {
		uint32_t room = SYMUPLOAD_QUERY_MAX - u->pending_count;
		n = 0;
		pthread_mutex_lock(&u->lock);
		while (n < room && n < 64 && u->queue_count > 0) {
			batch[n++] = u->queue[u->queue_head];
			u->queue_head = (u->queue_head + 1) % u->queue_max;
			u->queue_count--;
		}
		pthread_mutex_unlock(&u->lock);
		uint64_t t = n ? now(u) : 0;
		uint64_t known = 0;
		for (uint32_t i = 0; i < n; i++) {
			struct idkey k = idset_key(&batch[i].id);
			if (idset_has(&u->done, k)) {
				known++;
				waiting_free(&batch[i]);
			} else if (idset_has(&u->failed, k) || idset_add(&u->active, k) != 1) {
				waiting_free(&batch[i]);
			} else {
				batch[i].since_ns = t;
				u->pending[u->pending_count++] = batch[i];
			}
		}
		if (known)
			STAT_ADD(u, already_uploaded, known);
	} while (n == 64);
}

static void work_push(struct symupload *u, struct item *it, bool front)
{
	if (front) {
		u->work_head = (u->work_head + SYMUPLOAD_WORK_MAX - 1) % SYMUPLOAD_WORK_MAX;
		u->work[u->work_head] = it;
	} else {
		u->work[(u->work_head + u->work_count) % SYMUPLOAD_WORK_MAX] = it;
	}
	u->work_count++;
}

static struct item *work_pop(struct symupload *u)
{
	struct item *it = u->work[u->work_head];

	u->work_head = (u->work_head + 1) % SYMUPLOAD_WORK_MAX;
	u->work_count--;
	return it;
}

static void forget_failed(struct symupload *u, const struct sysom_build_id *id)
{
	struct idkey k = idset_key(id);

	idset_remove(&u->active, k);
	if (idset_add(&u->failed, k) == -ENOSPC) {
		idset_clear(&u->failed);
		idset_add(&u->failed, k);
	}
}

/* Processes the item at the head of the work list. */
static void process_item(struct symupload *u)
{
	struct item *it = work_pop(u);
	enum outcome out;

	if (!u->buf) {
		u->buf = malloc(u->chunk);
		if (!u->buf) {
			work_push(u, it, true);
			uint32_t attempt;
			schedule_retry(u, -1, &attempt);
			return;
		}
	}
	out = run_item(u, it);
	switch (out) {
	case OUT_DONE: {
		char hex[HEX_MAX];
		bool sent = it->part[0].sent || it->part[1].sent;
		struct symupload_event ev = {
			.kind = sent ? SYMUPLOAD_EVENT_UPLOADED : SYMUPLOAD_EVENT_PRESENT,
			.path = it->w.path,
			.build_id = hex,
			.identity = identity_name(&it->w.id),
			.debug_path = it->part[PART_DEBUGINFO].sent ? it->debug_path : NULL,
			.executable_bytes = it->part[PART_EXECUTABLE].sent,
			.debuginfo_bytes = it->part[PART_DEBUGINFO].sent,
			.http_status = 0,
			.message = "",
		};
		symupload__done_add(u, &it->w.id);
		symupload__done_flush(u);
		idset_remove(&u->active, idset_key(&it->w.id));
		STAT_ADD(u, uploaded_objects, sent ? 1 : 0);
		STAT_ADD(u, present, sent ? 0 : 1);
		hex_of(&it->w.id, hex);
		emit(u, &ev);
		item_free(u, it);
		break;
	}
	case OUT_RETRY:
		work_push(u, it, false); /* round robin: one stubborn file does not block others */
		break;
	case OUT_GIVE_UP:
		STAT_ADD(u, failed, 1);
		forget_failed(u, &it->w.id);
		item_free(u, it);
		break;
	case OUT_SKIP:
		forget_failed(u, &it->w.id);
		item_free(u, it);
		break;
	case OUT_STOPPED:
		work_push(u, it, true);
		break;
	case OUT_YIELD:
		if (!it->yielded)
			u->yielded_items++;
		it->yielded = true;
		work_push(u, it, false);
		break;
	}
	if (!u->work_count) {
		free(u->buf); /* idle: no chunk buffer held */
		u->buf = NULL;
	}
}

/* Maps a missing answer onto the queried objects. */
struct query_ctx {
	struct symupload *u;
	uint32_t n;
	uint8_t *flags;  /* per queried object: 1 executable, 2 debuginfo missing */
	struct hash_index index;
};

static uint64_t bytes_hash(const uint8_t *b, size_t len)
{
	return sysom_hash64(b, len, 0x53594d);
}

struct query_key {
	const struct symupload *u;
	const struct sysom_build_id *id;
};

static bool query_eq(const void *ctx, uint32_t idx)
{
	const struct query_key *k = ctx;
	const struct sysom_build_id *p = &k->u->pending[idx].id;

	return p->len == k->id->len && memcmp(p->bytes, k->id->bytes, p->len) == 0;
}

static void on_missing(void *ctx, const struct missing_entry *e)
{
	struct query_ctx *q = ctx;
	struct sysom_build_id id;

	if (sysom_build_id_parse_hex(e->build_id, SYSOM_OBJECT_ELF, &id))
		return; /* not something we asked about */
	struct query_key key = { q->u, &id };
	uint32_t idx = hash_index_find(&q->index, bytes_hash(id.bytes, id.len), query_eq, &key);
	if (idx != HASH_INDEX_NONE && idx < q->n)
		q->flags[idx] |= (e->executable ? 1 : 0) | (e->debuginfo ? 2 : 0);
}

/* Asks the server which of the oldest pending objects it lacks. */
static void run_query(struct symupload *u, uint32_t n)
{
	struct query_ctx q = { .u = u, .n = n };
	struct http_client_response resp = { 0 };
	char message[SYMUPLOAD_MESSAGE_MAX];
	char *body = NULL;
	size_t len = 0, cap = (size_t)n * (HEX_MAX + 48) + 32;
	int r, rc;

	body = malloc(cap);
	q.flags = calloc(n, 1);
	if (!body || !q.flags || hash_index_init(&q.index, n)) {
		report_retry(u, NULL, 0, -ENOMEM, -1, "missing query: out of memory");
		goto cleanup;
	}
	len += (size_t)snprintf(body, cap, "{\"objects\":[");
	for (uint32_t i = 0; i < n; i++) {
		const struct sysom_build_id *id = &u->pending[i].id;
		char hex[HEX_MAX];
		hex_of(id, hex);
		len += (size_t)snprintf(body + len, cap - len,
					"%s{\"build_id\":\"%s\",\"kind\":\"%s\"}", i ? "," : "",
					hex, identity_name(id));
		hash_index_insert(&q.index, bytes_hash(id->bytes, id->len), i);
	}
	len += (size_t)snprintf(body + len, cap - len, "]}");
	struct http_client_request req = {
		.method = "POST",
		.path = SYMUPLOAD_MISSING_PATH,
		.content_type = "application/json",
		.body = body,
		.body_len = len,
		.timeout_ms = (uint32_t)request_timeout_ms(u),
		.should_abort = should_abort,
		.abort_ctx = u,
	};
	r = http_client_request(u->http, &req, &resp);
	if (r == -ECANCELED)
		goto cleanup;
	if (r != 200) {
		char text[320];
		sysom_text_sanitize(text, sizeof(text), resp.body ? (const char *)resp.body : "",
			 resp.body_len);
		if (r < 0)
			snprintf(message, sizeof(message), "missing query: %s", resp.error);
		else
			snprintf(message, sizeof(message), "missing query answered %d: %s", r,
				 text);
		report_retry(u, NULL, r > 0 ? r : 0, r > 0 ? -SYSOM_EHTTP : r,
			     r > 0 ? resp.retry_after_s : -1, message);
		goto cleanup;
	}
	rc = resp.body_truncated ?
		     -SYSOM_ELIMIT :
		     symupload__parse_missing(resp.body, resp.body_len, on_missing, &q);
	if (rc) {
		report_retry(u, NULL, r, rc, -1, "missing query: the answer is not understood");
		goto cleanup;
	}
	request_succeeded(u);

	uint64_t missing = 0, present = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct waiting *w = &u->pending[i];
		bool exe = q.flags[i] & 1, dbg = q.flags[i] & 2;
		struct item *it = exe || dbg ? calloc(1, sizeof(*it)) : NULL;
		if (it) {
			it->w = *w;
			it->need[PART_EXECUTABLE] = exe;
			it->need[PART_DEBUGINFO] = dbg;
			w->path = NULL;
			work_push(u, it, false);
			missing++;
			continue;
		}
		if (exe || dbg) {
			/* No memory for the item: leave it for a later run. */
			idset_remove(&u->active, idset_key(&w->id));
			waiting_free(w);
			continue;
		}
		symupload__done_add(u, &w->id);
		idset_remove(&u->active, idset_key(&w->id));
		present++;
		emit_simple(u, SYMUPLOAD_EVENT_PRESENT, w, 200, 0, "");
		waiting_free(w);
	}
	symupload__done_flush(u);
	memmove(u->pending, u->pending + n, (size_t)(u->pending_count - n) * sizeof(*u->pending));
	u->pending_count -= n;
	pthread_mutex_lock(&u->lock);
	u->stats.queries++;
	u->stats.queried += n;
	u->stats.missing += missing;
	u->stats.present += present;
	pthread_mutex_unlock(&u->lock);
cleanup:
	http_client_response_free(&resp);
	hash_index_free(&q.index);
	free(q.flags);
	free(body);
}

static void *symupload_thread(void *arg)
{
	struct symupload *u = arg;

	rate_limit_init(&u->bucket, u->rate, now(u));
	for (;;) {
		symupload__take_offers(u);
		pthread_mutex_lock(&u->lock);
		u->backlog = u->pending_count + u->work_count;
		if (stopping(u)) {
			pthread_mutex_unlock(&u->lock);
			break;
		}
		uint64_t t = now(u);
		if (t < u->next_attempt_ns) {
			retry_clock_wait_until(&u->clock, &u->lock, &u->cond, u->next_attempt_ns);
			pthread_mutex_unlock(&u->lock);
			continue;
		}
		pthread_mutex_unlock(&u->lock);

		uint32_t room = SYMUPLOAD_WORK_MAX - u->work_count;
		uint32_t n = u->pending_count < room ? u->pending_count : room;
		bool due = n > 0 && query_due(u, t);
		if (due) {
			run_query(u, n);
			continue;
		}
		if (u->work_count) {
			process_item(u);
			continue;
		}
		pthread_mutex_lock(&u->lock);
		if (!stopping(u) && u->queue_count == 0) {
			if (u->pending_count)
				retry_clock_wait_until(&u->clock, &u->lock, &u->cond,
						       u->pending[0].since_ns + u->query_interval_ns);
			else
				pthread_cond_wait(&u->cond, &u->lock);
		}
		pthread_mutex_unlock(&u->lock);
	}
	return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Public API */

static char *copy_or(const char *s, const char *dflt)
{
	return strdup(s ? s : dflt);
}

int symupload_new(const struct symupload_options *opts, struct symupload **out)
{
	struct symupload *u = NULL;
	bool have_mutex = false, have_cond = false;
	uint64_t connect_ns = 0;
	struct stat st;
	int err = -SYSOM_ECONFIG;

	if (!opts || !opts->server_url || !opts->state_dir || opts->state_dir[0] == '\0' ||
	    stat(opts->state_dir, &st) || !S_ISDIR(st.st_mode))
		return -SYSOM_ECONFIG;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->uploaded_fd = -1;
	u->rate = opts->rate_bytes_per_s;
	u->chunk = opts->chunk_bytes ? opts->chunk_bytes : SYMUPLOAD_DEFAULT_CHUNK;
	u->max_file = opts->max_file_bytes ? opts->max_file_bytes : SYMUPLOAD_DEFAULT_MAX_FILE;
	u->queue_max = opts->queue_max ? opts->queue_max : SYMUPLOAD_DEFAULT_QUEUE;
	u->uploaded_max = opts->uploaded_max ? opts->uploaded_max : SYMUPLOAD_DEFAULT_UPLOADED;
	u->query_batch = opts->query_batch ? opts->query_batch : SYMUPLOAD_DEFAULT_QUERY_BATCH;
	uint32_t seen_max = opts->seen_max ? opts->seen_max : SYMUPLOAD_DEFAULT_SEEN;
	if (u->chunk < SYMUPLOAD_CHUNK_MIN || u->chunk > SYMUPLOAD_CHUNK_MAX ||
	    u->queue_max > (1u << 20) || seen_max > (1u << 24) || u->uploaded_max < 16 ||
	    u->uploaded_max > (1u << 24) || u->query_batch > SYMUPLOAD_QUERY_MAX ||
	    !sysom_seconds_option(opts->query_interval_s, SYMUPLOAD_DEFAULT_QUERY_INTERVAL_S, 86400,
			    &u->query_interval_ns) ||
	    !sysom_seconds_option(opts->backoff_initial_s, SYMUPLOAD_DEFAULT_BACKOFF_INITIAL_S, 86400,
			    &u->backoff_initial_ns) ||
	    !sysom_seconds_option(opts->backoff_max_s, SYMUPLOAD_DEFAULT_BACKOFF_MAX_S, 86400,
			    &u->backoff_max_ns) ||
	    !sysom_seconds_option(opts->request_timeout_s, SYMUPLOAD_DEFAULT_REQUEST_TIMEOUT_S, 3600,
			    &u->request_timeout_ns) ||
	    !sysom_seconds_option(opts->connect_timeout_s, SYMUPLOAD_DEFAULT_CONNECT_TIMEOUT_S, 3600,
			    &connect_ns) ||
	    u->backoff_initial_ns > u->backoff_max_ns)
		goto cleanup;
	struct http_client_options hopts = {
		.base_url = opts->server_url,
		.token = opts->token,
		.ca_file = opts->ca_file,
		.user_agent = "sysom-agent",
		.connect_timeout_ms =
			(uint32_t)(connect_ns >= NS_PER_MS ? connect_ns / NS_PER_MS : 1),
		.timeout_ms = (uint32_t)request_timeout_ms(u),
		.max_response_bytes = RESPONSE_MAX,
	};
	err = http_client_new(&hopts, &u->http);
	if (err)
		goto cleanup;
	err = -ENOMEM;
	u->state_dir = strdup(opts->state_dir);
	u->debug_root = copy_or(opts->debug_root, "/usr/lib/debug");
	u->proc_root = copy_or(opts->proc_root, "/proc");
	u->queue = calloc(u->queue_max ? u->queue_max : 1, sizeof(*u->queue));
	u->pending = calloc(SYMUPLOAD_QUERY_MAX, sizeof(*u->pending));
	u->work = calloc(SYMUPLOAD_WORK_MAX, sizeof(*u->work));
	if (!u->state_dir || !u->debug_root || !u->proc_root || !u->queue || !u->pending ||
	    !u->work || idset_init(&u->seen, seen_max) ||
	    idset_init(&u->active, SYMUPLOAD_QUERY_MAX + SYMUPLOAD_WORK_MAX) ||
	    idset_init(&u->done, u->uploaded_max) || idset_init(&u->failed, SYMUPLOAD_FAILED_MAX))
		goto cleanup;
	u->on_event = opts->on_event;
	u->event_ctx = opts->event_ctx;
	retry_clock_init(&u->clock, opts->now_ns, opts->sleep_ns, opts->random_u64, opts->hook_ctx);
	atomic_init(&u->stopping, false);

	err = -pthread_mutex_init(&u->lock, NULL);
	if (err)
		goto cleanup;
	have_mutex = true;
	err = retry_cond_init(&u->cond);
	if (err)
		goto cleanup;
	have_cond = true;

	/* The state: problems are reported, never fatal (the server's answers still prevent
	 * duplicate uploads). */
	int rc = symupload__uploaded_load(u);
	if (rc) {
		symupload__state_error(u, rc, "reading " SYMUPLOAD_UPLOADED_FILE);
		idset_clear(&u->done);
	}
	symupload__inflight_load(u);
	/* What this node uploaded before needs no queue slot. */
	for (uint32_t i = 0; i < u->done.cap && u->seen.count < u->seen.max; i++)
		if (!idset_key_empty(&u->done.slots[i]))
			idset_add(&u->seen, u->done.slots[i]);
	u->stats.known_uploaded = u->done.count;
	*out = u;
	return 0;
cleanup:
	if (have_cond)
		pthread_cond_destroy(&u->cond);
	if (have_mutex)
		pthread_mutex_destroy(&u->lock);
	http_client_free(u->http);
	idset_free(&u->seen);
	idset_free(&u->active);
	idset_free(&u->done);
	idset_free(&u->failed);
	free(u->queue);
	free(u->pending);
	free(u->work);
	free(u->state_dir);
	free(u->debug_root);
	free(u->proc_root);
	free(u);
	return err;
}

int symupload_start(struct symupload *u)
{
	int err;

	pthread_mutex_lock(&u->lock);
	if (u->running || u->closed) {
		pthread_mutex_unlock(&u->lock);
		return -EALREADY;
	}
	err = -pthread_create(&u->thread, NULL, symupload_thread, u);
	if (!err)
		u->running = true;
	pthread_mutex_unlock(&u->lock);
	return err;
}

/* Whether an offer of `k` can be queued (lock held): 0, or 1 / -ENOSPC / -ESHUTDOWN counted. */
static int offer_verdict(struct symupload *u, struct idkey k)
{
	if (u->closed)
		return -ESHUTDOWN;
	if (idset_has(&u->seen, k)) {
		u->stats.duplicates++;
		return 1;
	}
	if (u->queue_count >= u->queue_max) {
		u->stats.dropped++;
		return -ENOSPC;
	}
	return 0;
}

int symupload_offer(struct symupload *u, const struct sysom_build_id *id, const char *path,
		    uint32_t pid, uint64_t map_start, uint64_t map_end)
{
	struct waiting w = { 0 };
	int rc;

	if (!u || !id || !path ||
	    (id->kind != SYSOM_OBJECT_ELF && id->kind != SYSOM_OBJECT_FILE_HASH) ||
	    id->len < 3 || id->len > SYSOM_BUILD_ID_MAX ||
	    (id->kind == SYSOM_OBJECT_FILE_HASH && id->len != 16) ||
	    (path[0] != '/' && strcmp(path, "[vdso]") != 0) ||
	    strnlen(path, SYMUPLOAD_PATH_MAX) >= SYMUPLOAD_PATH_MAX)
		return -EINVAL;
	struct idkey k = idset_key(id);

	/* Duplicates (the common case when the daemon re-offers everything it tracks) and
	 * drops are answered without an allocation. */
	pthread_mutex_lock(&u->lock);
	rc = offer_verdict(u, k);
	pthread_mutex_unlock(&u->lock);
	if (rc)
		return rc;
	w.path = strdup(path);
	if (!w.path)
		return -ENOMEM;
	w.id = *id;
	w.pid = pid;
	w.start = map_start;
	w.end = map_end;

	pthread_mutex_lock(&u->lock);
	rc = offer_verdict(u, k); /* again: another thread may have offered meanwhile */
	if (rc == 0) {
		if (idset_add(&u->seen, k) == -ENOSPC) {
			idset_clear(&u->seen); /* bounded: forget, the thread's sets still filter */
			idset_add(&u->seen, k);
		}
		u->queue[(u->queue_head + u->queue_count) % u->queue_max] = w;
		u->queue_count++;
		u->stats.queued++;
		w.path = NULL;
		pthread_cond_signal(&u->cond);
	}
	pthread_mutex_unlock(&u->lock);
	free(w.path);
	return rc;
}

void symupload_stop(struct symupload *u)
{
	bool join;

	if (!u)
		return;
	pthread_mutex_lock(&u->lock);
	u->closed = true;
	atomic_store(&u->stopping, true);
	join = u->running;
	u->running = false;
	pthread_cond_broadcast(&u->cond);
	pthread_mutex_unlock(&u->lock);
	if (join)
		pthread_join(u->thread, NULL);
}

void symupload_stats(struct symupload *u, struct symupload_stats *out)
{
	pthread_mutex_lock(&u->lock);
	*out = u->stats;
	out->waiting = u->queue_count + u->backlog;
	pthread_mutex_unlock(&u->lock);
}

void symupload_free(struct symupload *u)
{
	if (!u)
		return;
	symupload_stop(u);
	for (uint32_t i = 0; i < u->queue_count; i++)
		waiting_free(&u->queue[(u->queue_head + i) % u->queue_max]);
	for (uint32_t i = 0; i < u->pending_count; i++)
		waiting_free(&u->pending[i]);
	while (u->work_count)
		item_free(u, work_pop(u));
	if (u->uploaded_fd >= 0)
		close(u->uploaded_fd);
	http_client_free(u->http);
	pthread_cond_destroy(&u->cond);
	pthread_mutex_destroy(&u->lock);
	idset_free(&u->seen);
	idset_free(&u->active);
	idset_free(&u->done);
	idset_free(&u->failed);
	free(u->queue);
	free(u->pending);
	free(u->work);
	free(u->buf);
	free(u->linebuf);
	free(u->state_dir);
	free(u->debug_root);
	free(u->proc_root);
	free(u);
}
