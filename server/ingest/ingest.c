/* SPDX-License-Identifier: Apache-2.0 */
/* Ingest of agent batches and kernel symbol tables: auth, limits, decoding, idempotency. */
#include "server/ingest/ingest.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/clock.h"
#include "common/compress.h"
#include "common/elf_buildid.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/hex.h"
#include "server/symbols/ksyms.h"
#include "server/http/render.h"

/* Internal handler steps return an enum ingest_error_reason, or this when all went well. */
#define REASON_NONE (-1)

struct ingest {
	struct store *store;
	struct auth *auth;
	struct symbolizer *sym;
	struct server_metrics *metrics;
	struct ingest_options opts;
	struct sysom_wire_limits wire_limits;
};

struct ingest *ingest_new(struct store *store, struct auth *auth, struct symbolizer *sym,
			  struct server_metrics *metrics, const struct ingest_options *opts)
{
	struct ingest *in = calloc(1, sizeof(*in));

	if (!in)
		return NULL;
	in->store = store;
	in->auth = auth;
	in->sym = sym;
	in->metrics = metrics;
	if (opts)
		in->opts = *opts;
	if (!in->opts.max_decompressed)
		in->opts.max_decompressed = INGEST_DEFAULT_MAX_DECOMPRESSED;
	if (!in->opts.max_ksyms_decompressed)
		in->opts.max_ksyms_decompressed = INGEST_DEFAULT_MAX_KSYMS_DECOMPRESSED;
	if (!in->opts.max_ksym_lines)
		in->opts.max_ksym_lines = KSYMS_DEFAULT_MAX_LINES;
	if (!in->opts.max_sample_count)
		in->opts.max_sample_count = INGEST_DEFAULT_MAX_SAMPLE_COUNT;
	in->wire_limits = opts && opts->wire_limits ? *opts->wire_limits : sysom_wire_default_limits;
	in->opts.wire_limits = &in->wire_limits;
	return in;
}

void ingest_free(struct ingest *in)
{
	free(in);
}

struct batch_key {
	uint8_t node_id[SYSOM_NODE_ID_SIZE];
	uint64_t epoch;
	uint64_t sequence;
};

/* "<node id: 32 hex>:<epoch: 16 hex>:<sequence: 1..20 decimal digits>". */
static bool parse_key(const char *text, struct batch_key *out)
{
	struct batch_key k;
	uint8_t epoch[8];
	const char *p;
	uint64_t seq = 0;
	size_t digits = 0;

	if (strlen(text) < 32 + 1 + 16 + 1 + 1 || text[32] != ':' || text[49] != ':')
		return false;
	if (sysom_hex_decode(text, 2 * sizeof(k.node_id), k.node_id, sizeof(k.node_id)) < 0 ||
	    sysom_hex_decode(text + 33, 2 * sizeof(epoch), epoch, sizeof(epoch)) < 0)
		return false;
	k.epoch = 0;
	for (size_t i = 0; i < sizeof(epoch); i++)
		k.epoch = k.epoch << 8 | epoch[i];
	for (p = text + 50; *p; p++, digits++) {
		if (*p < '0' || *p > '9' || digits >= 20)
			return false;
		unsigned d = (unsigned)(*p - '0');
		if (seq > (UINT64_MAX - d) / 10)
			return false;
		seq = seq * 10 + d;
	}
	k.sequence = seq;
	*out = k;
	return true;
}

enum body_encoding { ENCODING_IDENTITY, ENCODING_ZSTD, ENCODING_OTHER };

static enum body_encoding body_encoding(const struct http_request *req)
{
	const char *ce = http_request_header(req, "content-encoding");

	if (!ce || !*ce || strcasecmp(ce, "identity") == 0)
		return ENCODING_IDENTITY;
	if (strcasecmp(ce, "zstd") == 0)
		return ENCODING_ZSTD;
	return ENCODING_OTHER;
}

/* A request's share of the decode memory budget. */
struct reservation {
	struct membudget_hold hold;
	uint64_t wanted; /* bytes the last step asked for (for the 413 message) */
};

static void reservation_init(struct reservation *r, struct ingest *in)
{
	membudget_hold_init(&r->hold, in->opts.memory_budget);
	r->wanted = 0;
}

/* Makes the request hold `bytes` in all: 0, -EAGAIN (budget full in time) or -E2BIG (never). */
static int reserve(struct reservation *r, uint64_t bytes)
{
	r->wanted = bytes;
	return membudget_hold_resize(&r->hold, bytes);
}

/* The decompression's accounting (a sysom_zstd_account_fn over a struct reservation). */
static int reserve_for_zstd(void *ctx, uint64_t bytes)
{
	return reserve(ctx, bytes);
}

/* Answers a reservation the budget refused (rc -EAGAIN or -E2BIG); returns the reason. */
static int respond_memory(struct http_response *resp, int rc, const struct reservation *r)
{
	char seconds[16];

	if (rc == -E2BIG) {
		http_response_error(resp, 413,
				    "decoding this body needs %" PRIu64 " bytes of memory, more than the"
				    " server's whole decode memory budget",
				    r->wanted);
		return INGEST_ERR_TOO_LARGE;
	}
	snprintf(seconds, sizeof(seconds), "%d", INGEST_MEMORY_RETRY_AFTER_S);
	http_response_error(resp, 503, "the server's decode memory is in use by other uploads;"
				       " retry later");
	http_response_header(resp, "Retry-After", seconds);
	return INGEST_ERR_MEMORY_BUSY;
}

/*
 * The request body as plain bytes in *data and *len: borrowed from the request (identity) or
 * decompressed into `buf`, whose memory `r` reserves as it grows. Returns REASON_NONE, or
 * answers the request itself and returns the error reason.
 */
static int body_plain(struct ingest *in, const struct http_request *req, uint64_t limit,
		      struct reservation *r, struct byte_buf *buf, const uint8_t **data,
		      size_t *len, struct http_response *resp)
{
	const struct sysom_zstd_bounds bounds = { .max_output = (size_t)limit,
						  .account = reserve_for_zstd,
						  .account_ctx = r };
	const char *ce = http_request_header(req, "content-encoding");
	int rc;

	if (req->body_len == 0) {
		http_response_error(resp, 400, "empty body");
		return INGEST_ERR_BAD_REQUEST;
	}
	switch (body_encoding(req)) {
	case ENCODING_IDENTITY:
		if (req->body_len > limit) {
			http_response_error(resp, 413, "body of %zu bytes exceeds the limit of %" PRIu64,
					    req->body_len, limit);
			return INGEST_ERR_TOO_LARGE;
		}
		*data = req->body;
		*len = req->body_len;
		return REASON_NONE;
	case ENCODING_ZSTD:
		break;
	case ENCODING_OTHER:
		http_response_error(resp, 415, "unsupported Content-Encoding '%s' (use zstd or identity)",
				    ce);
		http_response_header(resp, "Accept-Encoding", "zstd, identity");
		return INGEST_ERR_ENCODING;
	}
	rc = sysom_zstd_decompress_bounded(req->body, req->body_len, &bounds, buf);
	if (rc == -EAGAIN || rc == -E2BIG)
		return respond_memory(resp, rc, r);
	if (rc == -SYSOM_ELIMIT) {
		http_response_error(resp, 413,
				    "decompressed body exceeds the limit of %" PRIu64
				    " bytes (or uses a zstd window above 2^%d)",
				    limit, SYSOM_ZSTD_WINDOW_LOG_MAX);
		return INGEST_ERR_TOO_LARGE;
	}
	if (rc == -SYSOM_ECORRUPT) {
		http_response_error(resp, 400, "body is not valid zstd data");
		return INGEST_ERR_DECOMPRESS;
	}
	if (rc) {
		http_response_error(resp, 503, "cannot decompress the body: %s", sysom_strerror(rc));
		return INGEST_ERR_INTERNAL;
	}
	metrics_counter_add(&in->metrics->bytes_decompressed, buf->len);
	*data = buf->data;
	*len = buf->len;
	return REASON_NONE;
}

/* Answers a store failure; returns the error reason. */
static int respond_store_error(struct http_response *resp, int rc)
{
	if (rc == -ENOSPC || rc == -EIO) {
		http_response_error(resp, 507, "storage unavailable (%s); retry later",
				    sysom_strerror(rc));
		http_response_header(resp, "Retry-After", "60");
		return INGEST_ERR_STORAGE_FULL;
	}
	if (rc == -EBUSY || rc == -ENOMEM) {
		http_response_error(resp, 503, "storage busy (%s); retry later", sysom_strerror(rc));
		http_response_header(resp, "Retry-After", "5");
		return rc == -EBUSY ? INGEST_ERR_STORAGE_BUSY : INGEST_ERR_INTERNAL;
	}
	http_response_error(resp, 500, "storage error: %s", sysom_strerror(rc));
	return INGEST_ERR_INTERNAL;
}

static void respond_decode_error(struct http_response *resp, int rc,
				 const struct sysom_wire_error *werr)
{
	char message[320];
	json_t *doc;

	if (rc == -SYSOM_EVERSION)
		snprintf(message, sizeof(message),
			 "unsupported batch format: %s; this server reads major version %d"
			 " (any minor)",
			 werr->message, SYSOM_WIRE_MAJOR);
	else if (rc == -SYSOM_ELIMIT)
		snprintf(message, sizeof(message), "batch exceeds a limit at byte %zu: %s",
			 werr->offset, werr->message);
	else
		snprintf(message, sizeof(message), "malformed batch at byte %zu: %s", werr->offset,
			 werr->message[0] ? werr->message : sysom_strerror(rc));
	doc = json_pack("{s:o,s:I}", "error", render_json_string(message), "offset",
			(json_int_t)werr->offset);
	render_json_respond(resp, rc == -SYSOM_ELIMIT ? 413 : 400, doc);
}

/* Checks the batch against the key and the limits; returns an error reason or REASON_NONE. */
static int batch_check(struct ingest *in, const struct sysom_batch *b, const struct batch_key *key,
		       struct http_response *resp)
{
	char header_key[80];

	if (memcmp(key->node_id, b->node_id, SYSOM_NODE_ID_SIZE) != 0 || key->epoch != b->agent_epoch ||
	    key->sequence != b->sequence) {
		struct sysom_build_id node = { .len = SYSOM_NODE_ID_SIZE };
		char node_hex[33];

		memcpy(node.bytes, b->node_id, SYSOM_NODE_ID_SIZE);
		sysom_build_id_hex(&node, node_hex, sizeof(node_hex));
		snprintf(header_key, sizeof(header_key), "%s:%016" PRIx64 ":%" PRIu64, node_hex,
			 b->agent_epoch, b->sequence);
		http_response_error(resp, 400,
				    "Idempotency-Key does not match the batch header (expected %s)",
				    header_key);
		return INGEST_ERR_KEY_MISMATCH;
	}
	for (uint32_t i = 0; i < b->sample_count; i++) {
		if (b->samples[i].count > in->opts.max_sample_count) {
			http_response_error(resp, 400, "sample row %u: count %" PRIu64
						       " exceeds the limit of %" PRIu64,
					    i, b->samples[i].count, in->opts.max_sample_count);
			return INGEST_ERR_CORRUPT;
		}
	}
	return REASON_NONE;
}

/*
 * Authorizes the request for the agent scope and, when `node_id` is not NULL, for writing
 * that node; answers a refusal (reporting a 403) and returns its reason, or REASON_NONE.
 * `who` receives the decision (the credential's name).
 */
static int authorize(struct ingest *in, const struct http_request *req, const uint8_t *node_id,
		     struct auth_decision *who, struct http_response *resp)
{
	if (auth_request_authorize(in->auth, req, AUTH_SCOPE_AGENT, node_id, who) == AUTH_ALLOWED)
		return REASON_NONE;
	auth_respond(resp, who);
	if (who->result != AUTH_FORBIDDEN)
		return INGEST_ERR_UNAUTHORIZED;
	if (in->opts.on_event) {
		struct ingest_event ev = { .kind = INGEST_EVENT_FORBIDDEN, .peer = req->peer,
					   .credential = who->name, .message = who->message };
		if (node_id)
			memcpy(ev.node_id, node_id, SYSOM_NODE_ID_SIZE);
		in->opts.on_event(in->opts.on_event_arg, &ev);
	}
	return INGEST_ERR_FORBIDDEN;
}

/* Answers 409 for a batch identity stored with other content, and reports it. */
static int respond_conflict(struct ingest *in, const struct http_request *req,
			    const struct batch_key *key, const struct auth_decision *who,
			    uint64_t stored_hash, uint64_t received_hash, struct http_response *resp)
{
	char node_hex[2 * SYSOM_NODE_ID_SIZE + 1], stored[20], received[20], message[320];

	sysom_hex_encode(key->node_id, SYSOM_NODE_ID_SIZE, node_hex, sizeof(node_hex));
	snprintf(stored, sizeof(stored), "%016" PRIx64, stored_hash);
	snprintf(received, sizeof(received), "%016" PRIx64, received_hash);
	snprintf(message, sizeof(message),
		 "batch %s:%016" PRIx64 ":%" PRIu64 " was already stored with different content"
		 " (stored xxh3 %s, received %s): two writers use this identity; not stored",
		 node_hex, key->epoch, key->sequence, stored, received);
	render_json_respond(resp, 409, json_pack("{s:s,s:s,s:s}", "error", message, "stored_hash",
						 stored, "received_hash", received));
	if (in->opts.on_event) {
		struct ingest_event ev = { .kind = INGEST_EVENT_CONFLICT, .peer = req->peer,
					   .credential = who->name, .epoch = key->epoch,
					   .sequence = key->sequence, .stored_hash = stored_hash,
					   .received_hash = received_hash };
		memcpy(ev.node_id, key->node_id, SYSOM_NODE_ID_SIZE);
		in->opts.on_event(in->opts.on_event_arg, &ev);
	}
	return INGEST_ERR_CONFLICT;
}

/* What store_batch_put allocates besides SQLite's own (bounded) cache: a row id per object,
 * process and stack of the batch, plus one each (server/store/sqlite_write_batch.c). */
static uint64_t store_put_memory(const struct sysom_batch *b)
{
	return sizeof(int64_t) *
	       ((uint64_t)b->object_count + b->process_count + b->stack_count + 3);
}

/*
 * Decodes the plain bytes of a batch (`data`, `len`, held by `plain` when decompressed) into
 * *batch within the request's memory reservation and checks it against its key. The plain
 * bytes are freed once decoded. Returns REASON_NONE, or answers the request and returns the
 * error reason.
 */
static int batch_decode_checked(struct ingest *in, struct reservation *mem, struct byte_buf *plain,
				const uint8_t *data, size_t len, const struct batch_key *key,
				struct sysom_batch *batch, struct http_response *resp)
{
	struct sysom_wire_error werr;
	int rc;

	/* The plain bytes (when decompressed) and everything the decoder will allocate. */
	rc = reserve(mem, plain->cap + sysom_batch_decode_memory(data, len, &in->wire_limits));
	if (rc)
		return respond_memory(resp, rc, mem);
	rc = sysom_batch_decode(data, len, &in->wire_limits, batch, &werr);
	/* The decoded batch owns copies of everything: drop the (up to 128 MiB) plain bytes. */
	byte_buf_free(plain);
	/* From here on the request holds the batch and what storing it allocates: no more than
	 * it reserved for decoding (each array entry outweighs its id), so this only shrinks. */
	if (rc == 0 && (rc = reserve(mem, sysom_batch_memory(batch) + store_put_memory(batch))))
		return respond_memory(resp, rc, mem);
	if (rc == -ENOMEM)
		return respond_store_error(resp, rc);
	if (rc) {
		respond_decode_error(resp, rc, &werr);
		return rc == -SYSOM_EVERSION ? INGEST_ERR_VERSION
		       : rc == -SYSOM_ELIMIT ? INGEST_ERR_TOO_LARGE
					     : INGEST_ERR_CORRUPT;
	}
	return batch_check(in, batch, key, resp);
}

/* Handles one ingest request; returns the error reason, or REASON_NONE. */
static int batch_ingest(struct ingest *in, const struct http_request *req,
			struct http_response *resp, bool *duplicate)
{
	struct server_metrics *m = in->metrics;
	struct byte_buf plain = { 0 };
	struct reservation mem;
	struct sysom_batch batch;
	struct store_put_result res;
	struct store_batch_record stored;
	struct auth_decision who;
	struct batch_key key;
	const uint8_t *data = NULL;
	const char *key_text = http_request_header(req, "idempotency-key");
	uint64_t content_hash;
	size_t len = 0;
	int reason = REASON_NONE, rc;

	memset(&batch, 0, sizeof(batch));
	reservation_init(&mem, in);
	if ((reason = authorize(in, req, NULL, &who, resp)) != REASON_NONE)
		goto cleanup;
	metrics_counter_add(&m->bytes_compressed, req->body_len);
	if (!key_text || !parse_key(key_text, &key)) {
		http_response_error(resp, 400, "%s Idempotency-Key header (want"
					       " <node id: 32 hex>:<epoch: 16 hex>:<sequence: decimal>)",
				    key_text ? "malformed" : "missing");
		reason = INGEST_ERR_BAD_REQUEST;
		goto cleanup;
	}
	/*
	 * The credential must cover the key's node before anything about that node is looked
	 * up; batch_check then holds the batch header to the key, so the node written is the
	 * one authorized.
	 */
	if ((reason = authorize(in, req, key.node_id, &who, resp)) != REASON_NONE)
		goto cleanup;
	if ((rc = store_batch_find(in->store, key.node_id, key.epoch, key.sequence, &stored))) {
		reason = respond_store_error(resp, rc);
		goto cleanup;
	}
	/* Stored before content hashes existed: nothing to compare, a duplicate as it was. */
	if (stored.exists && !stored.hash_known) {
		*duplicate = true;
		render_json_respond(resp, 200, json_pack("{s:s}", "status", "duplicate"));
		goto cleanup;
	}
	reason = body_plain(in, req, in->opts.max_decompressed, &mem, &plain, &data, &len, resp);
	if (reason != REASON_NONE)
		goto cleanup;
	/* The agent re-sends the exact bytes it spooled: equal plain bytes, equal hash. */
	content_hash = sysom_hash64(data, len, 0);
	/* A replay is answered without decoding it again. */
	if (stored.exists) {
		if (stored.content_hash != content_hash) {
			reason = respond_conflict(in, req, &key, &who, stored.content_hash,
						  content_hash, resp);
			goto cleanup;
		}
		*duplicate = true;
		render_json_respond(resp, 200, json_pack("{s:s}", "status", "duplicate"));
		goto cleanup;
	}
	if ((reason = batch_decode_checked(in, &mem, &plain, data, len, &key, &batch, resp)) !=
	    REASON_NONE)
		goto cleanup;
	data = NULL;
	if ((rc = store_batch_put(in->store, &batch, content_hash, sysom_realtime_ns(), &res))) {
		reason = respond_store_error(resp, rc);
		goto cleanup;
	}
	if (res.conflict) {
		/* A concurrent upload of other content under the same identity won. */
		reason = respond_conflict(in, req, &key, &who, res.existing.content_hash,
					  content_hash, resp);
		goto cleanup;
	}
	if (res.duplicate) {
		*duplicate = true; /* a concurrent upload of the same batch won */
		render_json_respond(resp, 200, json_pack("{s:s}", "status", "duplicate"));
		goto cleanup;
	}
	if (in->opts.on_stored) {
		const struct ingest_body body = { .data = req->body, .len = req->body_len,
						  .zstd = body_encoding(req) == ENCODING_ZSTD,
						  .idempotency_key = key_text };
		in->opts.on_stored(in->opts.on_stored_arg, &batch, &body);
	}
	metrics_counter_add(&m->samples_stored, res.samples);
	metrics_counter_add(&m->sample_rows_stored, res.sample_rows);
	metrics_counter_add(&m->stacks_created, res.new_stacks);
	render_json_respond(resp, 200,
			    json_pack("{s:s,s:I,s:I,s:I,s:I}", "status", "stored", "samples",
				      (json_int_t)(res.samples > INT64_MAX ? INT64_MAX : res.samples),
				      "sample_rows", (json_int_t)res.sample_rows, "new_stacks",
				      (json_int_t)res.new_stacks, "processes",
				      (json_int_t)res.processes));
cleanup:
	sysom_batch_free(&batch);
	byte_buf_free(&plain);
	membudget_hold_release(&mem.hold);
	return reason;
}

void ingest_batch_post(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct ingest *in = ctx;
	int64_t start = sysom_monotonic_ns();
	bool duplicate = false;
	char minor[8];
	int reason;

	/* The newest batch format this server reads: agents send 1.7's JOB_RANKS gpu_device only
	 * to a server that says it reads it (older readers refuse a non-zero byte there). */
	snprintf(minor, sizeof(minor), "%d", SYSOM_WIRE_MINOR);
	http_response_header(resp, SYSOM_WIRE_MINOR_HEADER, minor);
	reason = batch_ingest(in, req, resp, &duplicate);

	if (reason != REASON_NONE)
		server_metrics_reject(in->metrics, (enum ingest_error_reason)reason,
				      &in->metrics->batches[INGEST_REJECTED]);
	else
		metrics_counter_add(&in->metrics->batches[duplicate ? INGEST_DUPLICATE : INGEST_STORED],
				    1);
	metrics_histogram_observe(&in->metrics->ingest_seconds,
				  (uint64_t)(sysom_monotonic_ns() - start));
}

/* ---- batches forwarded by a replica (server/cluster/cluster.h) ------------------------------ */

/* Handles one forwarded batch; returns the error reason, or REASON_NONE. */
static int batch_feed(struct ingest *in, const struct http_request *req,
		      struct http_response *resp)
{
	struct byte_buf plain = { 0 };
	struct reservation mem;
	struct sysom_batch batch;
	struct auth_decision who;
	struct batch_key key;
	const uint8_t *data = NULL;
	const char *key_text = http_request_header(req, "idempotency-key");
	size_t len = 0;
	int reason = REASON_NONE;

	memset(&batch, 0, sizeof(batch));
	reservation_init(&mem, in);
	/* Batches of any node: a replica's credential (admin scope, or the shared token). */
	if (auth_request_authorize(in->auth, req, AUTH_SCOPE_ADMIN, NULL, &who) != AUTH_ALLOWED) {
		auth_respond(resp, &who);
		reason = who.result == AUTH_FORBIDDEN ? INGEST_ERR_FORBIDDEN
						      : INGEST_ERR_UNAUTHORIZED;
		goto cleanup;
	}
	if (!in->opts.on_fed) {
		http_response_error(resp, 404, "this server is not a replica of a cluster");
		reason = INGEST_ERR_BAD_REQUEST;
		goto cleanup;
	}
	if (!key_text || !parse_key(key_text, &key)) {
		http_response_error(resp, 400, "%s Idempotency-Key header",
				    key_text ? "malformed" : "missing");
		reason = INGEST_ERR_BAD_REQUEST;
		goto cleanup;
	}
	reason = body_plain(in, req, in->opts.max_decompressed, &mem, &plain, &data, &len, resp);
	if (reason != REASON_NONE)
		goto cleanup;
	if ((reason = batch_decode_checked(in, &mem, &plain, data, len, &key, &batch, resp)) !=
	    REASON_NONE)
		goto cleanup;
	in->opts.on_fed(in->opts.on_stored_arg, &batch);
	render_json_respond(resp, 200, json_pack("{s:s}", "status", "fed"));
cleanup:
	sysom_batch_free(&batch);
	byte_buf_free(&plain);
	membudget_hold_release(&mem.hold);
	return reason;
}

void ingest_feed_post(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct ingest *in = ctx;
	int reason = batch_feed(in, req, resp);

	/* Counted apart from the agents' batches: these were stored (and counted) by a peer. */
	if (reason != REASON_NONE)
		server_metrics_reject(in->metrics, (enum ingest_error_reason)reason,
				      &in->metrics->batches[INGEST_REJECTED]);
}

/* ---- kernel symbols ------------------------------------------------------------------------ */

/* The build ID named by the path after INGEST_KSYMS_PREFIX; answers 400 when invalid. */
static bool ksyms_build_id(const struct http_request *req, struct sysom_build_id *id,
			   struct http_response *resp)
{
	const char *hex = req->path + strlen(INGEST_KSYMS_PREFIX);

	if (strncmp(req->path, INGEST_KSYMS_PREFIX, strlen(INGEST_KSYMS_PREFIX)) != 0 ||
	    sysom_build_id_parse_hex(hex, SYSOM_OBJECT_KERNEL, id)) {
		http_response_error(resp, 400,
				    "invalid build ID in the path (want 6..128 hex digits, even count)");
		return false;
	}
	return true;
}

static void respond_ksyms(struct http_response *resp, const struct sysom_build_id *id,
			  uint64_t symbols, const char *status)
{
	char hex[2 * SYSOM_BUILD_ID_MAX + 1];
	json_t *doc;

	sysom_build_id_hex(id, hex, sizeof(hex));
	doc = json_pack("{s:s,s:I}", "build_id", hex, "symbols", (json_int_t)symbols);
	if (doc && status)
		json_object_set_new(doc, "status", json_string(status));
	render_json_respond(resp, 200, doc);
}

/* store_ksyms_put refused a table under the kernel symbol limit: 413 when the table alone
 * exceeds it, else 507 with Retry-After when the least recently used table could leave. */
static int respond_ksyms_full(struct ingest *in, struct http_response *resp, uint64_t count)
{
	struct store_ksyms_usage u;
	char retry[24];
	int rc = store_ksyms_usage_get(in->store, &u);

	if (rc)
		return respond_store_error(resp, rc);
	if (count > u.max_rows) {
		http_response_error(resp, 413, "%" PRIu64 " symbols exceed the limit of %" PRIu64
					       " kernel symbols in all tables", count, u.max_rows);
		return INGEST_ERR_TOO_LARGE;
	}
	/* Waiting helps only if tables fall out of use: the earliest is the least recently
	 * used one, unless a batch names it again. */
	int64_t now = sysom_realtime_ns(), free_at = u.oldest_use_ns + u.in_use_ns;
	int64_t wait_s = free_at > now ? (free_at - now) / 1000000000 + 1 : 60;
	snprintf(retry, sizeof(retry), "%lld", (long long)(wait_s < 60 ? 60 : wait_s));
	http_response_error(resp, 507, "kernel symbol tables are full: %" PRIu64 " tables hold %"
				       PRIu64 " of %" PRIu64 " symbols, and every table that would"
				       " have to go to make room for %" PRIu64 " was used within"
				       " the last %lld s", u.tables, u.rows, u.max_rows, count,
			    (long long)(u.in_use_ns / 1000000000));
	http_response_header(resp, "Retry-After", retry);
	return INGEST_ERR_STORAGE_FULL;
}

static int ksyms_upload(struct ingest *in, const struct http_request *req,
			struct http_response *resp, bool *unchanged)
{
	struct ksyms_limits limits = { .max_lines = in->opts.max_ksym_lines };
	struct ksyms_table table = { 0 };
	struct ksyms_error kerr;
	struct byte_buf plain = { 0 };
	struct reservation mem;
	struct sysom_build_id id;
	const uint8_t *data = NULL;
	size_t len = 0;
	uint64_t count, parse_memory;
	bool created = false;
	struct auth_decision who;
	int reason = REASON_NONE, rc;

	reservation_init(&mem, in);
	/* Kernel symbol tables are keyed by Build ID, not by node: any agent may upload one. */
	if ((reason = authorize(in, req, NULL, &who, resp)) != REASON_NONE)
		goto cleanup;
	if (!ksyms_build_id(req, &id, resp)) {
		reason = INGEST_ERR_BAD_REQUEST;
		goto cleanup;
	}
	rc = store_ksyms_count(in->store, id.bytes, id.len, &count);
	if (rc == 0) {
		*unchanged = true;
		respond_ksyms(resp, &id, count, "unchanged");
		goto cleanup;
	}
	if (rc != -ENOENT) {
		reason = respond_store_error(resp, rc);
		goto cleanup;
	}
	if ((reason = body_plain(in, req, in->opts.max_ksyms_decompressed, &mem, &plain, &data,
				 &len, resp)) != REASON_NONE)
		goto cleanup;
	parse_memory = ksyms_parse_memory((const char *)data, len, &limits);
	if ((rc = reserve(&mem, plain.cap + parse_memory))) {
		reason = respond_memory(resp, rc, &mem);
		goto cleanup;
	}
	rc = ksyms_table_parse((const char *)data, len, &limits, &table, &kerr);
	/* The table owns a copy of the text: the plain bytes can go. */
	byte_buf_free(&plain);
	data = NULL;
	reserve(&mem, parse_memory); /* shrinks: cannot fail */
	if (rc == -ENOMEM) {
		reason = respond_store_error(resp, rc);
		goto cleanup;
	}
	if (rc) {
		json_t *doc = json_pack("{s:o}", "error", render_json_string(kerr.message));
		if (doc && kerr.line)
			json_object_set_new(doc, "line", json_integer((json_int_t)kerr.line));
		render_json_respond(resp, rc == -SYSOM_ELIMIT ? 413 : 400, doc);
		reason = rc == -SYSOM_ELIMIT ? INGEST_ERR_TOO_LARGE : INGEST_ERR_CORRUPT;
		goto cleanup;
	}
	rc = store_ksyms_put(in->store, id.bytes, id.len, table.syms, table.count,
			     sysom_realtime_ns(), &created);
	if (rc == -SYSOM_ELIMIT) {
		reason = respond_ksyms_full(in, resp, table.count);
		goto cleanup;
	}
	if (rc) {
		reason = respond_store_error(resp, rc);
		goto cleanup;
	}
	/* Frames cached as "[kernel]+0x..." before the table arrived can now be named. */
	if (created && in->sym)
		symbolizer_cache_clear(in->sym);
	*unchanged = !created;
	if (created)
		respond_ksyms(resp, &id, table.count, "stored");
	else if ((rc = store_ksyms_count(in->store, id.bytes, id.len, &count)) == 0)
		respond_ksyms(resp, &id, count, "unchanged");
	else
		reason = respond_store_error(resp, rc);
cleanup:
	ksyms_table_free(&table);
	byte_buf_free(&plain);
	membudget_hold_release(&mem.hold);
	return reason;
}

void ingest_ksyms_put(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct ingest *in = ctx;
	bool unchanged = false;
	int reason = ksyms_upload(in, req, resp, &unchanged);

	if (reason != REASON_NONE)
		server_metrics_reject(in->metrics, (enum ingest_error_reason)reason,
				      &in->metrics->ksym_uploads[INGEST_REJECTED]);
	else
		metrics_counter_add(
			&in->metrics->ksym_uploads[unchanged ? INGEST_DUPLICATE : INGEST_STORED], 1);
}

void ingest_ksyms_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct ingest *in = ctx;
	struct sysom_build_id id;
	char hex[2 * SYSOM_BUILD_ID_MAX + 1];
	uint64_t count;
	int rc;

	if (!auth_request_allow(in->auth, req, AUTH_SCOPE_AGENT | AUTH_SCOPE_READ, resp))
		return;
	if (!ksyms_build_id(req, &id, resp))
		return;
	rc = store_ksyms_count(in->store, id.bytes, id.len, &count);
	if (rc == -ENOENT) {
		sysom_build_id_hex(&id, hex, sizeof(hex));
		http_response_error(resp, 404, "no kernel symbols for build ID %s", hex);
		return;
	}
	if (rc) {
		respond_store_error(resp, rc);
		return;
	}
	respond_ksyms(resp, &id, count, NULL);
}

size_t ingest_routes_get(struct ingest *in, size_t max_body, size_t ksyms_max_body,
			 struct http_route out[INGEST_ROUTE_COUNT])
{
	const struct http_route routes[INGEST_ROUTE_COUNT] = {
		{ "POST", INGEST_PATH, false, ingest_batch_post, in,
		  max_body ? max_body : INGEST_DEFAULT_MAX_BODY, HTTP_ROUTE_DECODES },
		{ "PUT", INGEST_KSYMS_PREFIX, true, ingest_ksyms_put, in,
		  ksyms_max_body ? ksyms_max_body : INGEST_DEFAULT_MAX_KSYMS_BODY,
		  HTTP_ROUTE_DECODES },
		{ "GET", INGEST_KSYMS_PREFIX, true, ingest_ksyms_get, in, 0, 0 },
		{ "POST", INGEST_FEED_PATH, false, ingest_feed_post, in,
		  max_body ? max_body : INGEST_DEFAULT_MAX_BODY, HTTP_ROUTE_DECODES },
	};

	memcpy(out, routes, sizeof(routes));
	return INGEST_ROUTE_COUNT;
}

void ingest_memory_metrics_write(void *budget, struct byte_buf *out)
{
	struct membudget_stats st;

	membudget_stats_get(budget, &st);
	metrics_gauge_write(out, "sysom_decode_memory_budget_bytes",
			    "Memory that decompression and decoding of uploads may reserve at once.",
			    st.capacity);
	metrics_gauge_write(out, "sysom_decode_memory_reserved_bytes",
			    "Memory reserved by uploads being decompressed or decoded now.",
			    st.reserved);
	metrics_gauge_write(out, "sysom_decode_memory_reserved_peak_bytes",
			    "Most memory reserved at once since the server started.",
			    st.reserved_peak);
	metrics_gauge_write(out, "sysom_decode_memory_waiting",
			    "Uploads waiting for decode memory now.", st.waiting);
	metrics_total_write(out, "sysom_decode_memory_waits_total",
			    "Reservations that had to wait for memory.", st.waits);
	metrics_total_write(out, "sysom_decode_memory_timeouts_total",
			    "Uploads answered 503 because the decode memory stayed in use.",
			    st.timeouts);
	metrics_total_write(out, "sysom_decode_memory_oversized_total",
			    "Uploads answered 413 because they need more than the whole budget.",
			    st.oversized);
}
