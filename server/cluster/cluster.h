/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Replicas of sysom-server sharing one ClickHouse: who is alive, which replica owns a job's
 * analysis, and getting a stored batch's analysis input to that owner.
 *
 * Any replica stores any batch (the store is idempotent across replicas); the analysis of a
 * job (its live collective instances, hang tracking, incidents, alerts) needs every batch of
 * the job in one process, so exactly one replica owns each job:
 *
 *   membership  each replica writes a heartbeat to the store every `heartbeat_ms` (the
 *               store's clock stamps it) and reads the replicas heard from within `expiry_s`;
 *               a clean shutdown departs at once, a dead replica drops out after expiry_s.
 *   ownership   rendezvous hashing (highest random weight) of the job id over the live
 *               replicas' ids: every replica computes the same owner from the same list, and
 *               when a replica dies only its own jobs move (to the next in their order).
 *   forwarding  after storing a batch, a replica sends its body to the owners of the jobs it
 *               carries, and of the jobs its node carried within CLUSTER_NODE_JOB_KEEP_MS (so
 *               the owner also sees the node's later batches: its ranks exiting, its liveness)
 *               at POST CLUSTER_FEED_PATH; the owner decodes it into its analysis without
 *               storing it again. Forwarding is best effort and bounded: what cannot be sent
 *               (queue full, owner unreachable) is counted and only missing from the live
 *               analysis, never from the store.
 *
 * Without a cluster (SQLite, one server per data directory) the server owns every job; the
 * functions below accept NULL for that case.
 */
#ifndef SYSOM_SERVER_CLUSTER_CLUSTER_H
#define SYSOM_SERVER_CLUSTER_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/bytes.h"
#include "common/wire/wire.h"
#include "server/store/store.h"

#define CLUSTER_FEED_PATH "/api/v1/cluster/feed"
#define CLUSTER_PATH "/api/v1/cluster"

#define CLUSTER_DEFAULT_HEARTBEAT_MS 5000u
#define CLUSTER_DEFAULT_EXPIRY_S 20u         /* a replica not heard from this long is gone */
#define CLUSTER_MAX_REPLICAS 256             /* replicas read from the store */
#define CLUSTER_ID_MAX 64
#define CLUSTER_URL_MAX 512
#define CLUSTER_DEFAULT_FORWARD_MAX_BYTES (64u << 20) /* bodies waiting to be forwarded */
#define CLUSTER_FORWARD_TIMEOUT_MS 5000u     /* per forwarded request */
#define CLUSTER_NODE_JOBS 4                  /* recent jobs remembered per node */
#define CLUSTER_NODE_JOB_KEEP_MS 600000      /* ... for this long after their last batch */
#define CLUSTER_MAX_NODES 100000             /* nodes remembered (then forgotten at once) */

/* What the cluster tells its owner (for the server's log); strings borrowed for the call. */
enum cluster_event_kind {
	CLUSTER_MEMBERS_CHANGED,  /* `count` replicas now; `text` lists their ids */
	CLUSTER_HEARTBEAT_FAILED, /* `error`: the store refused the heartbeat or the list */
	CLUSTER_FORWARD_FAILING,  /* forwarding to `text` (a peer URL) fails: `error`/`status` */
	CLUSTER_FORWARD_RECOVERED,/* ... works again */
};

struct cluster_event {
	enum cluster_event_kind kind;
	const char *text;
	int error;      /* negative errno, or 0 */
	long status;    /* HTTP status of a failed forward, or 0 */
	size_t count;
};

struct cluster_options {
	struct store *store;         /* borrowed: where the heartbeats live */
	const char *self_url;        /* required: where peers reach this replica (http://host:port) */
	const char *peer_token;      /* Bearer token sent to peers (admin scope); NULL: none */
	uint32_t heartbeat_ms;       /* 0: CLUSTER_DEFAULT_HEARTBEAT_MS */
	uint32_t expiry_s;           /* 0: CLUSTER_DEFAULT_EXPIRY_S */
	uint64_t forward_max_bytes;  /* 0: CLUSTER_DEFAULT_FORWARD_MAX_BYTES */
	/* Membership changed, so owners may have (on the cluster's thread, no lock held). */
	void (*on_change)(void *arg);
	void *on_change_arg;
	void (*on_event)(void *arg, const struct cluster_event *ev); /* optional */
	void *on_event_arg;
};

/* A stored batch's body as it arrived, to forward as it is (borrowed for the call). */
struct cluster_body {
	const uint8_t *data;
	size_t len;
	bool zstd;                   /* Content-Encoding: zstd */
	const char *idempotency_key; /* the agent's Idempotency-Key */
};

struct cluster;

/*
 * Creates the cluster state; nothing touches the store or runs in the background until
 * cluster_start, so hooks may be wired to objects created after this, and self_url may wait
 * for the listening port (NULL here, given to cluster_start). Until then this replica counts
 * as the only one. 0, -EINVAL (a self_url empty or longer than CLUSTER_URL_MAX), -ENOMEM.
 */
int cluster_new(const struct cluster_options *opts, struct cluster **out);

/*
 * Joins: sets self_url when not NULL, writes the first heartbeat and reads the members
 * (synchronously, so that ownership is right from the first batch), then starts the heartbeat
 * and forwarding threads. 0, -EINVAL (no URL), -ENOTSUP (a store without heartbeats: SQLite),
 * the store's error, or -errno.
 */
int cluster_start(struct cluster *c, const char *self_url);

/* One heartbeat and read of the members now, synchronously (tests; the thread does the same
 * every heartbeat_ms). 0, -EINVAL (no URL yet) or the store's error (the last members stand). */
int cluster_refresh(struct cluster *c);

/* Departs (a last heartbeat saying so, best effort), stops the threads, drops what waits to be
 * forwarded and frees. Accepts NULL. */
void cluster_free(struct cluster *c);

/* Whether this replica owns `job`'s analysis now. NULL: true. */
bool cluster_owns(struct cluster *c, const char *job);

/*
 * Routes a batch this replica stored: queues its body for the other replicas that own a job
 * it carries (or its node carried lately) and returns whether this replica should feed it to
 * its own analysis (it owns one of those jobs, or the batch names none). NULL: true.
 */
bool cluster_batch_route(struct cluster *c, const struct sysom_batch *b,
			 const struct cluster_body *body);

/* Counts a batch a peer forwarded to this replica's analysis. Accepts NULL. */
void cluster_fed(struct cluster *c);

/*
 * The members and this replica as a new JSON object {enabled, self, replicas: [...], forward:
 * {...}}, with `job` (optional) {job: {id, owner, owner_url, self}}. NULL c: {enabled: false}.
 * NULL when out of memory.
 */
json_t *cluster_json(struct cluster *c, const char *job);

/* Appends the sysom_cluster_* families (a metrics source over a struct cluster *). */
void cluster_metrics_write(void *c, struct byte_buf *out);

/* The replica that owns `job` among `ids` (rendezvous hashing): its index, or -1 when n is 0.
 * Exposed for tests. */
int cluster_owner_index(const char *job, const char *const *ids, size_t n);

#endif
