/* SPDX-License-Identifier: Apache-2.0 */
/* Upload thread: delivers spooled (or memory-held) batches to the server, with backoff. */
#ifndef SYSOM_AGENT_SHIP_UPLOADER_H
#define SYSOM_AGENT_SHIP_UPLOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/ship/spool.h"

#define UPLOADER_INGEST_PATH "/api/v1/ingest"
#define UPLOADER_CONTENT_TYPE "application/vnd.sysom.batch"
#define UPLOADER_CONTENT_ENCODING "zstd"
#define UPLOADER_DEFAULT_BACKOFF_INITIAL_S 1.0
#define UPLOADER_DEFAULT_BACKOFF_MAX_S 60.0
#define UPLOADER_DEFAULT_REQUEST_TIMEOUT_S 60.0
#define UPLOADER_DEFAULT_CONNECT_TIMEOUT_S 10.0
#define UPLOADER_DEFAULT_MEMORY_QUEUE (64ull << 20)
#define UPLOADER_MAX_BACKOFF_S 86400.0  /* largest accepted backoff_max_s */
#define UPLOADER_MAX_TIMEOUT_S 3600.0   /* largest accepted request/connect timeout */
#define UPLOADER_MESSAGE_MAX 1024        /* event messages are truncated to this */
#define UPLOADER_ERROR_MAX 256

/* What the uploader reports through its event callback (library code does not log). */
enum uploader_event_kind {
	UPLOADER_EVENT_DELIVERED = 1, /* the server acknowledged a batch (2xx); it was removed */
	UPLOADER_EVENT_RETRY,         /* an attempt failed (network error, 408, 429, 5xx, 401,
					 403, 1xx/3xx); retried after delay_ms (a spooled batch
					 is unpinned meanwhile: if the spool's limits delete it,
					 it counts as dropped and the next oldest goes instead) */
	UPLOADER_EVENT_REJECTED,      /* any other 4xx: the batch is set aside in the spool's
					 rejected/ (a memory-held one is written there first; `kept`
					 says whether that worked) and is not retried; message holds
					 the server's error body. 409: the server stored other content
					 under this batch's identity (another writer uses this node
					 id): the batch's samples are not in the server */
	UPLOADER_EVENT_MEMORY_QUEUED, /* the spool could not store a batch (error): it is held in
					 the memory queue and still delivered */
	UPLOADER_EVENT_LOST,          /* a batch could be kept neither on disk nor in memory
					 (memory queue full or too small, or not spoolable at stop) */
	UPLOADER_EVENT_SPOOL_ERROR,   /* reading the spool failed (error); retried after delay_ms */
};

struct uploader_event {
	enum uploader_event_kind kind;
	uint64_t epoch;      /* batch identity (0 for SPOOL_ERROR) */
	uint64_t sequence;
	int http_status;     /* the server's answer, 0 when there was none */
	int error;           /* negative error code where one applies, else 0 */
	uint64_t delay_ms;   /* RETRY, SPOOL_ERROR: wait before the next attempt */
	uint32_t attempt;    /* consecutive failed attempts, this one included */
	const char *message; /* borrowed for the call, never NULL: transport error text or the
				server's body (control characters replaced, truncated) */
	bool kept;           /* REJECTED: the batch is in the spool's rejected/ directory */
};

/*
 * Event callback. Called without the uploader's locks held, from the upload thread or from
 * the thread calling uploader_submit/uploader_stop. It may call uploader_stats.
 */
typedef void (*uploader_event_fn)(void *ctx, const struct uploader_event *ev);

struct uploader_options {
	const char *server_url;          /* "http(s)://host:port" (copied) */
	const char *token;               /* bearer token or NULL (copied) */
	const char *ca_file;             /* PEM bundle for https, NULL: system store (copied) */
	uint8_t node_id[16];             /* first part of the idempotency key */
	double backoff_initial_s;        /* 0: UPLOADER_DEFAULT_BACKOFF_INITIAL_S */
	double backoff_max_s;            /* 0: UPLOADER_DEFAULT_BACKOFF_MAX_S; caps Retry-After */
	double request_timeout_s;        /* whole request; 0: UPLOADER_DEFAULT_REQUEST_TIMEOUT_S */
	double connect_timeout_s;        /* 0: UPLOADER_DEFAULT_CONNECT_TIMEOUT_S */
	uint64_t memory_queue_max_bytes; /* batches held when the spool fails; 0: 64 MiB */
	uploader_event_fn on_event;      /* optional */
	void *event_ctx;
	/* Test hooks; NULL for the real ones. now_ns: a monotonic clock in ns. sleep_ns: waits
	 * out a backoff delay (the real wait is a condition-variable wait that uploader_stop
	 * interrupts). random_u64: uniform 64-bit values for the jitter. */
	uint64_t (*now_ns)(void *ctx);
	void (*sleep_ns)(void *ctx, uint64_t ns);
	uint64_t (*random_u64)(void *ctx);
	void *hook_ctx;
};

struct uploader_stats {
	uint64_t batches_sent;         /* acknowledged with 2xx */
	uint64_t bytes_sent;           /* body bytes of those */
	uint64_t retries;              /* failed attempts that were retried */
	uint64_t rejected;             /* batches refused for good (4xx) */
	uint64_t conflicts;            /* of those, 409: other content stored under the identity */
	uint64_t refused_early;        /* attempts answered with an error status (503, 4xx)
					  before their whole body was sent (Expect: 100-continue) */
	uint64_t refused_body_bytes;   /* body bytes that left in attempts answered with an error
					  status: sent for nothing */
	uint64_t memory_queued;        /* batches that went to the memory queue */
	uint64_t lost;                 /* batches lost (see UPLOADER_EVENT_LOST) */
	uint64_t pending;              /* batches waiting: spool files + memory queue */
	uint64_t pending_memory;       /* of which held in memory */
	uint64_t pending_memory_bytes;
	uint64_t last_success_unix_ns; /* CLOCK_REALTIME of the last 2xx, 0 if none */
	int last_status;               /* HTTP status of the last attempt, 0 if none or none came */
	int server_wire_minor;         /* Sysom-Wire-Minor of the last 2xx: the batch format the
					  server reads (1.7 and on); -1 before one, or an older
					  server */
	char last_error[UPLOADER_ERROR_MAX]; /* last failure, "" if none */
};

struct uploader;

/*
 * Starts the upload thread over `spool` (borrowed: it must outlive the uploader). The thread
 * POSTs batches to {server_url}/api/v1/ingest, memory-held ones first, then the spool's
 * oldest first. Returns 0 with *out set, -SYSOM_ECONFIG for bad options, -ENOMEM or -errno.
 */
int uploader_start(const struct uploader_options *opts, struct spool *spool,
		   struct uploader **out);

/*
 * Hands over a sealed batch (`body` borrowed; `sequence` from spool_sequence_next): commits it
 * to the spool, or when that fails holds a copy in the memory queue (dropping the oldest held
 * batches when full, counted as lost), and wakes the thread. Blocks on the disk, never on the
 * network. Returns 0 (durable in the spool), 1 (held in memory), -ESHUTDOWN after
 * uploader_stop, -EINVAL / -EEXIST for a bad sequence, or the spool's error when the batch was
 * lost (counted and reported).
 */
int uploader_submit(struct uploader *u, uint64_t sequence, uint64_t window_end_ns,
		    const void *body, size_t len);

/*
 * Stops accepting batches, keeps delivering for up to `flush_timeout_s` (honouring backoff;
 * an attempt in flight at the deadline is aborted), then stops the thread. Undelivered spool
 * files stay for the next start; memory-held batches are written to the spool, and those that
 * cannot be are reported lost. Returns the number lost this way (0 normally). Idempotent.
 */
int uploader_stop(struct uploader *u, double flush_timeout_s);

/* A consistent snapshot of the counters; callable from any thread, also after stop. */
void uploader_stats(struct uploader *u, struct uploader_stats *out);

/* Stops (without flushing) if still running and frees the uploader. Accepts NULL. */
void uploader_free(struct uploader *u);

#endif
