/* SPDX-License-Identifier: Apache-2.0 */
/* Agent-facing handlers: batch ingest and kernel symbol uploads. */
#ifndef SYSOM_SERVER_INGEST_INGEST_H
#define SYSOM_SERVER_INGEST_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/membudget.h"
#include "common/wire/wire.h"
#include "server/http/auth.h"
#include "server/http/http.h"
#include "server/metrics/metrics.h"
#include "server/store/store.h"
#include "server/symbols/symbolize.h"

#define INGEST_PATH "/api/v1/ingest"
#define INGEST_KSYMS_PREFIX "/api/v1/kernel-symbols/"
#define INGEST_FEED_PATH "/api/v1/cluster/feed" /* = CLUSTER_FEED_PATH */

#define INGEST_DEFAULT_MAX_BODY (16u << 20)            /* compressed batch (route limit) */
#define INGEST_DEFAULT_MAX_DECOMPRESSED (128u << 20)   /* decompressed batch */
#define INGEST_DEFAULT_MAX_KSYMS_BODY (64u << 20)      /* compressed symbol table (route limit) */
#define INGEST_DEFAULT_MAX_KSYMS_DECOMPRESSED (64u << 20)
#define INGEST_DEFAULT_MAX_SAMPLE_COUNT (1ULL << 32)   /* per sample row */
/* Retry-After (seconds) of a 503 when the decode memory budget stayed full. */
#define INGEST_MEMORY_RETRY_AFTER_S 2

/* What ingest reports through its event callback (library code does not log). */
enum ingest_event_kind {
	INGEST_EVENT_FORBIDDEN = 1, /* 403: a credential without the scope or for another node */
	INGEST_EVENT_CONFLICT,      /* 409: a batch identity stored with other content */
};

struct ingest_event {
	enum ingest_event_kind kind;
	const char *peer;       /* the client's address (borrowed for the call) */
	const char *credential; /* the credential's name (borrowed), "" when off; never a token */
	const char *message;    /* FORBIDDEN: why (borrowed for the call) */
	/* CONFLICT: the identity and both content hashes (XXH3-64 of the plain wire bytes). */
	uint8_t node_id[SYSOM_NODE_ID_SIZE];
	uint64_t epoch;
	uint64_t sequence;
	uint64_t stored_hash;
	uint64_t received_hash;
};

/* A stored batch's body as it arrived (borrowed for the on_stored call). */
struct ingest_body {
	const uint8_t *data;
	size_t len;
	bool zstd;                   /* Content-Encoding: zstd (else identity) */
	const char *idempotency_key;
};

struct ingest_options {
	uint64_t max_decompressed;       /* batch bytes after zstd (0: default) */
	uint64_t max_ksyms_decompressed; /* symbol text bytes after zstd (0: default) */
	uint32_t max_ksym_lines;         /* symbol text lines (0: default 4,000,000) */
	uint64_t max_sample_count;       /* largest count of one sample row (0: default) */
	const struct sysom_wire_limits *wire_limits; /* NULL: sysom_wire_default_limits */
	/* Decompression and decoding reserve what they allocate from it first; a request it
	 * cannot serve in time gets 503 + Retry-After, one it could never serve 413. Shared
	 * with the other users of the server's budget (borrowed; NULL: nothing is reserved). */
	struct membudget *memory_budget;
	/* Called after a batch was stored (not for duplicates), on the thread that stored it: the
	 * monitor learns which jobs have new data, the cluster forwards the body to the replicas
	 * that own them. Optional. */
	void (*on_stored)(void *arg, const struct sysom_batch *b, const struct ingest_body *body);
	/* Called with a batch a replica stored and forwarded here (POST INGEST_FEED_PATH), on the
	 * handler's thread; NULL: that route answers 404. Same `on_stored_arg`. */
	void (*on_fed)(void *arg, const struct sysom_batch *b);
	void *on_stored_arg;
	/* Called for refusals worth a log line (struct ingest_event), on the handler's thread.
	 * Optional. */
	void (*on_event)(void *arg, const struct ingest_event *ev);
	void *on_event_arg;
};

struct ingest;

/*
 * Creates the handlers' context. Everything passed is borrowed and must outlive it; `sym`
 * (optional) has its cache cleared when a new symbol table arrives; `opts` may be NULL.
 * Returns NULL when out of memory.
 */
struct ingest *ingest_new(struct store *store, struct auth *auth, struct symbolizer *sym,
			  struct server_metrics *metrics, const struct ingest_options *opts);

/* Frees it; accepts NULL. */
void ingest_free(struct ingest *in);

/*
 * POST /api/v1/ingest (ctx: struct ingest). Authenticates (agent or admin scope), checks the
 * Idempotency-Key header ("<node id: 32 hex>:<epoch: 16 hex>:<sequence: decimal>") and that
 * the credential may write that node, decompresses (Content-Encoding zstd or identity) within
 * the limit, hashes the plain bytes (XXH3-64), decodes, checks the key against the batch
 * header and stores the batch once. A stored identity is a duplicate (200) when its content
 * hash is the same or unknown, a conflict (409) when it differs. 200 stored/duplicate; 400,
 * 401, 403, 409, 413, 415, 503, 507 otherwise (503 with Retry-After
 * INGEST_MEMORY_RETRY_AFTER_S when the decode memory budget stays full).
 */
void ingest_batch_post(void *ctx, const struct http_request *req, struct http_response *resp);

/*
 * POST /api/v1/cluster/feed (admin scope: a replica's credential): a batch another replica
 * stored, for this replica's analysis (on_fed); decoded and checked like an ingest, not
 * stored. 200 {"status":"fed"}; 400, 401, 403, 404 (not a replica), 413, 415, 503.
 */
void ingest_feed_post(void *ctx, const struct http_request *req, struct http_response *resp);

/* PUT /api/v1/kernel-symbols/{build-id-hex} (agent scope): stores a symbol table once (200
 * stored/unchanged). */
void ingest_ksyms_put(void *ctx, const struct http_request *req, struct http_response *resp);

/* GET /api/v1/kernel-symbols/{build-id-hex} (agent or read scope): 200 {"build_id","symbols"}
 * or 404. */
void ingest_ksyms_get(void *ctx, const struct http_request *req, struct http_response *resp);

/*
 * Appends the decode memory budget's families (sysom_decode_memory_*) to `out`: a metrics
 * source over `budget` (a struct membudget, borrowed).
 */
void ingest_memory_metrics_write(void *budget, struct byte_buf *out);

#define INGEST_ROUTE_COUNT 4

/*
 * Writes the agent-facing routes (POST INGEST_PATH, PUT and GET INGEST_KSYMS_PREFIX, POST INGEST_FEED_PATH) over
 * `in` (borrowed) to `out` and returns INGEST_ROUTE_COUNT. `max_body` and `ksyms_max_body`
 * bound the compressed bodies (0: INGEST_DEFAULT_MAX_BODY, INGEST_DEFAULT_MAX_KSYMS_BODY).
 */
size_t ingest_routes_get(struct ingest *in, size_t max_body, size_t ksyms_max_body,
			 struct http_route out[INGEST_ROUTE_COUNT]);

#endif
