/* SPDX-License-Identifier: Apache-2.0 */
/* Replica membership, job ownership and forwarding (server/cluster/cluster.h). */
#include "server/cluster/cluster.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/clock.h"
#include "common/hash.h"
#include "common/list.h"
#include "server/metrics/metrics.h"

struct member {
	char id[CLUSTER_ID_MAX + 1];
	char url[CLUSTER_URL_MAX + 1];
	int64_t started_ms;
	uint32_t age_s;
};

/* A node's recent jobs: its later batches go to their owners too. */
struct node_jobs {
	uint8_t node_id[SYSOM_NODE_ID_SIZE];
	char *job[CLUSTER_NODE_JOBS];
	int64_t seen_ms[CLUSTER_NODE_JOBS];
};

struct forward_item {
	struct forward_item *next;
	char url[CLUSTER_URL_MAX + 1]; /* the peer's base URL */
	char key[128];                 /* Idempotency-Key */
	bool zstd;
	size_t len;
	uint8_t data[];
};

/* What one peer's forwarding looks like, for events on transitions. */
struct peer_state {
	char url[CLUSTER_URL_MAX + 1];
	bool failing;
};

struct cluster_stats {
	uint64_t heartbeats, heartbeat_errors, membership_changes;
	uint64_t forwarded, forward_errors, forward_dropped, fed;
	uint64_t queued_bytes;
};

struct cluster {
	struct cluster_options opts; /* strings below are copies */
	char self_id[CLUSTER_ID_MAX + 1];
	char *self_url, *auth_header;
	int64_t started_ms;
	uint64_t beat;

	pthread_mutex_t lock;
	pthread_cond_t wake;         /* heartbeat thread: stopping */
	pthread_cond_t work;         /* forward thread: an item or stopping */
	pthread_t beat_thread, forward_thread;
	bool joined, beat_started, forward_started, stopping;
	/* Under the lock: */
	struct member *members;      /* sorted by id; never empty once created (self) */
	size_t nmembers;
	struct node_jobs *nodes;
	size_t nnodes;
	struct hash_index node_index;
	struct forward_item *qhead, *qtail;
	struct peer_state peers[16];
	size_t npeers;
	struct cluster_stats stats;
};

static void event(struct cluster *c, const struct cluster_event *ev)
{
	if (c->opts.on_event)
		c->opts.on_event(c->opts.on_event_arg, ev);
}

/* ---- ownership ------------------------------------------------------------------------------ */

static uint64_t weight(const char *job, const char *id)
{
	return sysom_hash64(job, strlen(job), sysom_hash64(id, strlen(id), 0x5359534f4d));
}

/* Whether `id` with weight `w` beats the best so far (none: NULL). Ties (never seen) go to
 * the smaller id, the same on every replica. */
static bool outweighs(uint64_t w, const char *id, uint64_t best_w, const char *best_id)
{
	return !best_id || w > best_w || (w == best_w && strcmp(id, best_id) < 0);
}

int cluster_owner_index(const char *job, const char *const *ids, size_t n)
{
	int best = -1;
	uint64_t best_w = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t w = weight(job, ids[i]);
		if (outweighs(w, ids[i], best_w, best < 0 ? NULL : ids[best])) {
			best = (int)i;
			best_w = w;
		}
	}
	return best;
}

/* The owning member of `job` (under the lock). */
static const struct member *owner_locked(const struct cluster *c, const char *job)
{
	const struct member *best = NULL;
	uint64_t best_w = 0;

	for (size_t i = 0; i < c->nmembers; i++) {
		uint64_t w = weight(job, c->members[i].id);
		if (outweighs(w, c->members[i].id, best_w, best ? best->id : NULL)) {
			best = &c->members[i];
			best_w = w;
		}
	}
	return best;
}

bool cluster_owns(struct cluster *c, const char *job)
{
	bool own;

	if (!c)
		return true;
	pthread_mutex_lock(&c->lock);
	own = strcmp(owner_locked(c, job)->id, c->self_id) == 0;
	pthread_mutex_unlock(&c->lock);
	return own;
}

/* ---- membership ----------------------------------------------------------------------------- */

struct member_list {
	struct member *m;
	size_t n;
	bool self_seen;
	const char *self_id;
};

static int member_take(void *arg, const struct store_replica *r)
{
	struct member_list *l = arg;
	struct member *m;

	if (l->n >= CLUSTER_MAX_REPLICAS)
		return 0;
	/* Ids and URLs other replicas wrote: bounded and checked like any peer input. */
	if (!r->id[0] || strlen(r->id) > CLUSTER_ID_MAX || strlen(r->url) > CLUSTER_URL_MAX ||
	    (strncmp(r->url, "http://", 7) != 0 && strncmp(r->url, "https://", 8) != 0))
		return 0;
	m = &l->m[l->n++];
	memset(m, 0, sizeof(*m));
	snprintf(m->id, sizeof(m->id), "%s", r->id);
	snprintf(m->url, sizeof(m->url), "%s", r->url);
	m->started_ms = r->started_ms;
	m->age_s = r->age_s;
	l->self_seen |= strcmp(r->id, l->self_id) == 0;
	return 0;
}

static int member_cmp(const void *a, const void *b)
{
	return strcmp(((const struct member *)a)->id, ((const struct member *)b)->id);
}

/* One heartbeat and one read of the members; tells the owner when they changed. */
static int heartbeat(struct cluster *c)
{
	struct member_list l = { .self_id = c->self_id };
	bool changed;
	uint64_t beat;
	int rc;

	if (!(l.m = calloc(CLUSTER_MAX_REPLICAS + 1, sizeof(*l.m))))
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	beat = ++c->beat;
	pthread_mutex_unlock(&c->lock);
	rc = store_replica_beat(c->opts.store, c->self_id, c->self_url, c->started_ms, beat, false);
	if (!rc)
		rc = store_replicas_list(c->opts.store, c->opts.expiry_s, CLUSTER_MAX_REPLICAS,
					 member_take, &l);
	pthread_mutex_lock(&c->lock);
	c->stats.heartbeats++;
	if (rc) {
		/* The last list stands: a store that cannot be reached takes no batches either. */
		c->stats.heartbeat_errors++;
		pthread_mutex_unlock(&c->lock);
		free(l.m);
		event(c, &(struct cluster_event){ .kind = CLUSTER_HEARTBEAT_FAILED, .error = rc });
		return rc;
	}
	/* This replica is a member whatever the read said (its own row may not be visible yet). */
	if (!l.self_seen) {
		struct member *m = &l.m[l.n++];
		snprintf(m->id, sizeof(m->id), "%s", c->self_id);
		snprintf(m->url, sizeof(m->url), "%s", c->self_url);
		m->started_ms = c->started_ms;
	}
	qsort(l.m, l.n, sizeof(*l.m), member_cmp);
	changed = l.n != c->nmembers;
	for (size_t i = 0; !changed && i < l.n; i++)
		changed = strcmp(l.m[i].id, c->members[i].id) != 0 ||
			  strcmp(l.m[i].url, c->members[i].url) != 0;
	free(c->members);
	c->members = l.m;
	c->nmembers = l.n;
	if (changed)
		c->stats.membership_changes++;
	char ids[CLUSTER_MAX_REPLICAS * 4 + 64];
	size_t off = 0;
	ids[0] = '\0';
	for (size_t i = 0; changed && i < c->nmembers && off + 1 < sizeof(ids); i++) {
		int w = snprintf(ids + off, sizeof(ids) - off, "%s%.16s%s", i ? " " : "",
				 c->members[i].id, strcmp(c->members[i].id, c->self_id) ? "" : "*");
		off += w > 0 ? (size_t)w : 0;
	}
	size_t n = c->nmembers;
	pthread_mutex_unlock(&c->lock);
	if (changed) {
		event(c, &(struct cluster_event){ .kind = CLUSTER_MEMBERS_CHANGED, .text = ids,
						  .count = n });
		if (c->opts.on_change)
			c->opts.on_change(c->opts.on_change_arg);
	}
	return 0;
}

static void deadline_after(struct timespec *ts, uint32_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	uint64_t ns = (uint64_t)ts->tv_nsec + (uint64_t)ms * 1000000u;
	ts->tv_sec += (time_t)(ns / 1000000000u);
	ts->tv_nsec = (long)(ns % 1000000000u);
}

static void *beat_thread(void *arg)
{
	struct cluster *c = arg;
	struct timespec until;

	pthread_mutex_lock(&c->lock);
	while (!c->stopping) {
		deadline_after(&until, c->opts.heartbeat_ms);
		while (!c->stopping && pthread_cond_timedwait(&c->wake, &c->lock, &until) != ETIMEDOUT)
			;
		if (c->stopping)
			break;
		pthread_mutex_unlock(&c->lock);
		heartbeat(c);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* ---- routing -------------------------------------------------------------------------------- */

struct node_key {
	const struct cluster *c;
	const uint8_t *node_id;
};

static bool node_eq(const void *ctx, uint32_t v)
{
	const struct node_key *k = ctx;
	return memcmp(k->c->nodes[v].node_id, k->node_id, SYSOM_NODE_ID_SIZE) == 0;
}

static void nodes_clear(struct cluster *c)
{
	for (size_t i = 0; i < c->nnodes; i++)
		for (size_t j = 0; j < CLUSTER_NODE_JOBS; j++)
			free(c->nodes[i].job[j]);
	c->nnodes = 0;
	hash_index_clear(&c->node_index);
}

/* The node's entry, created when new (under the lock); NULL when out of memory. A table at
 * CLUSTER_MAX_NODES starts over: nodes forgotten send to the owners of the jobs their batches
 * carry, as before they were remembered. */
static struct node_jobs *node_get(struct cluster *c, const uint8_t *node_id)
{
	uint64_t h = sysom_hash64(node_id, SYSOM_NODE_ID_SIZE, 0);
	struct node_key k = { c, node_id };
	uint32_t v = hash_index_find(&c->node_index, h, node_eq, &k);
	struct node_jobs *n;

	if (v != HASH_INDEX_NONE)
		return &c->nodes[v];
	if (c->nnodes >= CLUSTER_MAX_NODES)
		nodes_clear(c);
	if (!c->nodes && !(c->nodes = calloc(CLUSTER_MAX_NODES, sizeof(*c->nodes))))
		return NULL;
	if (hash_index_insert(&c->node_index, h, (uint32_t)c->nnodes))
		return NULL;
	n = &c->nodes[c->nnodes++];
	memset(n, 0, sizeof(*n));
	memcpy(n->node_id, node_id, SYSOM_NODE_ID_SIZE);
	return n;
}

/* Notes that the node's batch carried `job` now (replacing the oldest remembered job). */
static void node_job_note(struct node_jobs *n, const char *job, int64_t now)
{
	size_t slot = 0;

	for (size_t j = 0; j < CLUSTER_NODE_JOBS; j++) {
		if (n->job[j] && strcmp(n->job[j], job) == 0) {
			n->seen_ms[j] = now;
			return;
		}
		if (!n->job[j] || n->seen_ms[j] < n->seen_ms[slot] || (n->job[slot] && !n->job[j]))
			slot = j;
	}
	char *copy = strdup(job);
	if (!copy)
		return; /* only remembered for less */
	free(n->job[slot]);
	n->job[slot] = copy;
	n->seen_ms[slot] = now;
}

static int enqueue_locked(struct cluster *c, const char *url, const struct cluster_body *body)
{
	struct forward_item *it;

	if (c->stats.queued_bytes + body->len > c->opts.forward_max_bytes) {
		c->stats.forward_dropped++;
		return -ENOBUFS;
	}
	if (!(it = malloc(sizeof(*it) + body->len))) {
		c->stats.forward_dropped++;
		return -ENOMEM;
	}
	it->next = NULL;
	snprintf(it->url, sizeof(it->url), "%s", url);
	snprintf(it->key, sizeof(it->key), "%s",
		 body->idempotency_key ? body->idempotency_key : "");
	it->zstd = body->zstd;
	it->len = body->len;
	memcpy(it->data, body->data, body->len);
	if (c->qtail)
		c->qtail->next = it;
	else
		c->qhead = it;
	c->qtail = it;
	c->stats.queued_bytes += body->len;
	pthread_cond_signal(&c->work);
	return 0;
}

#define ROUTE_MAX_OWNERS (CLUSTER_NODE_JOBS + 64) /* distinct owners one batch is sent to */

/* Adds the owner of `job` to owners[*n] unless it is there (under the lock). */
static void owner_add(const struct cluster *c, const char *job, const struct member **owners,
		      size_t *n)
{
	const struct member *o = owner_locked(c, job);

	for (size_t k = 0; k < *n; k++)
		if (owners[k] == o)
			return;
	if (*n < ROUTE_MAX_OWNERS)
		owners[(*n)++] = o;
}

bool cluster_batch_route(struct cluster *c, const struct sysom_batch *b,
			 const struct cluster_body *body)
{
	const struct member *owners[ROUTE_MAX_OWNERS];
	size_t nowners = 0;
	bool local = false, any = false;
	int64_t now;
	struct node_jobs *n;

	if (!c)
		return true;
	now = sysom_realtime_ms();
	pthread_mutex_lock(&c->lock);
	n = node_get(c, b->node_id);
	for (uint32_t i = 0; i < b->job_rank_count; i++) {
		const char *job = sysom_batch_string(b, b->job_ranks[i].job);
		/* A node's ranks of one job come one after another: one lookup for them all. */
		if (!job[0] || (i && b->job_ranks[i].job == b->job_ranks[i - 1].job))
			continue;
		any = true;
		if (n)
			node_job_note(n, job, now);
		owner_add(c, job, owners, &nowners);
	}
	for (size_t j = 0; n && j < CLUSTER_NODE_JOBS; j++) {
		if (!n->job[j] || now - n->seen_ms[j] > CLUSTER_NODE_JOB_KEEP_MS)
			continue;
		any = true;
		owner_add(c, n->job[j], owners, &nowners);
	}
	for (size_t k = 0; k < nowners; k++) {
		if (strcmp(owners[k]->id, c->self_id) == 0)
			local = true;
		else if (body && body->data)
			enqueue_locked(c, owners[k]->url, body);
	}
	if (!any)
		local = true; /* no job: only the node's liveness, noted where it arrived */
	pthread_mutex_unlock(&c->lock);
	return local;
}

void cluster_fed(struct cluster *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stats.fed++;
	pthread_mutex_unlock(&c->lock);
}

/* ---- forwarding ----------------------------------------------------------------------------- */

static size_t discard_answer(char *ptr, size_t size, size_t nmemb, void *ud)
{
	(void)ptr;
	(void)ud;
	return size * nmemb;
}

/* Tells the owner when forwarding to `url` starts failing or works again (under the lock). */
static void peer_note(struct cluster *c, const char *url, bool ok, int err, long status)
{
	struct peer_state *p = NULL;

	for (size_t i = 0; i < c->npeers && !p; i++)
		if (strcmp(c->peers[i].url, url) == 0)
			p = &c->peers[i];
	if (!p) {
		if (ok)
			return;
		p = &c->peers[c->npeers < 16 ? c->npeers++ : 15];
		snprintf(p->url, sizeof(p->url), "%s", url);
		p->failing = false;
	}
	if (p->failing == !ok)
		return;
	p->failing = !ok;
	char copy[CLUSTER_URL_MAX + 1];
	snprintf(copy, sizeof(copy), "%s", url);
	pthread_mutex_unlock(&c->lock);
	event(c, &(struct cluster_event){ .kind = ok ? CLUSTER_FORWARD_RECOVERED
						     : CLUSTER_FORWARD_FAILING,
					  .text = copy, .error = err, .status = status });
	pthread_mutex_lock(&c->lock);
}

/* Posts one body to its peer (no lock held). 0, or -EIO with *status the HTTP status. */
static int forward_post(struct cluster *c, CURL *h, const struct forward_item *it, long *status)
{
	struct curl_slist *hdrs = NULL, *grown;
	char url[CLUSTER_URL_MAX + sizeof(CLUSTER_FEED_PATH) + 1], key[160];
	size_t len = strlen(it->url);
	int rc = -ENOMEM;

	*status = 0;
	while (len > 0 && it->url[len - 1] == '/')
		len--;
	snprintf(url, sizeof(url), "%.*s%s", (int)len, it->url, CLUSTER_FEED_PATH);
	snprintf(key, sizeof(key), "Idempotency-Key: %s", it->key);
	const char *lines[] = { "Content-Type: application/octet-stream", "Expect:", key,
				it->zstd ? "Content-Encoding: zstd" : NULL, c->auth_header };
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		if (!lines[i])
			continue;
		if (!(grown = curl_slist_append(hdrs, lines[i])))
			goto cleanup;
		hdrs = grown;
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, (const char *)it->data);
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)it->len);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)CLUSTER_FORWARD_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard_answer);
	rc = curl_easy_perform(h) == CURLE_OK ? 0 : -EIO;
	if (!rc) {
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
		if (*status < 200 || *status >= 300)
			rc = -EIO;
	}
cleanup:
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(hdrs);
	return rc;
}

static void *forward_thread(void *arg)
{
	struct cluster *c = arg;
	CURL *h = curl_easy_init();

	pthread_mutex_lock(&c->lock);
	while (!c->stopping) {
		struct forward_item *it = c->qhead;
		if (!it) {
			pthread_cond_wait(&c->work, &c->lock);
			continue;
		}
		c->qhead = it->next;
		if (!c->qhead)
			c->qtail = NULL;
		pthread_mutex_unlock(&c->lock);
		long status = 0;
		int rc = h ? forward_post(c, h, it, &status) : -ENOMEM;
		pthread_mutex_lock(&c->lock);
		c->stats.queued_bytes -= it->len;
		if (rc)
			c->stats.forward_errors++;
		else
			c->stats.forwarded++;
		peer_note(c, it->url, rc == 0, rc, status);
		free(it);
	}
	pthread_mutex_unlock(&c->lock);
	if (h)
		curl_easy_cleanup(h);
	return NULL;
}

/* ---- life ----------------------------------------------------------------------------------- */

int cluster_new(const struct cluster_options *opts, struct cluster **out)
{
	struct cluster *c;
	pthread_condattr_t attr;
	uint8_t rnd[8];
	int rc;

	*out = NULL;
	if (!opts || !opts->store ||
	    (opts->self_url && (!opts->self_url[0] || strlen(opts->self_url) > CLUSTER_URL_MAX)))
		return -EINVAL;
	if (!(c = calloc(1, sizeof(*c))))
		return -ENOMEM;
	c->opts = *opts;
	if (!c->opts.heartbeat_ms)
		c->opts.heartbeat_ms = CLUSTER_DEFAULT_HEARTBEAT_MS;
	if (!c->opts.expiry_s)
		c->opts.expiry_s = CLUSTER_DEFAULT_EXPIRY_S;
	if (!c->opts.forward_max_bytes)
		c->opts.forward_max_bytes = CLUSTER_DEFAULT_FORWARD_MAX_BYTES;
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&c->wake, &attr);
	pthread_condattr_destroy(&attr);
	pthread_cond_init(&c->work, NULL);
	c->started_ms = sysom_realtime_ms();
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		rc = -EIO;
		goto fail;
	}
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(c->self_id + 2 * i, 3, "%02x", rnd[i]);
	if ((opts->self_url && !(c->self_url = strdup(opts->self_url))) ||
	    hash_index_init(&c->node_index, 1024)) {
		rc = -ENOMEM;
		goto fail;
	}
	if (opts->peer_token && opts->peer_token[0] &&
	    asprintf(&c->auth_header, "Authorization: Bearer %s", opts->peer_token) < 0) {
		c->auth_header = NULL;
		rc = -ENOMEM;
		goto fail;
	}
	c->opts.self_url = c->self_url;
	c->opts.peer_token = NULL; /* kept only inside auth_header */
	/* Self first, so that ownership is defined even before the store answers. */
	if (!(c->members = calloc(1, sizeof(*c->members)))) {
		rc = -ENOMEM;
		goto fail;
	}
	snprintf(c->members[0].id, sizeof(c->members[0].id), "%s", c->self_id);
	snprintf(c->members[0].url, sizeof(c->members[0].url), "%s", c->self_url ? c->self_url : "");
	c->members[0].started_ms = c->started_ms;
	c->nmembers = 1;
	*out = c;
	return 0;
fail:
	cluster_free(c);
	return rc;
}

int cluster_refresh(struct cluster *c)
{
	int rc;

	if (!c->self_url)
		return -EINVAL;
	if ((rc = heartbeat(c)))
		return rc;
	c->joined = true;
	return 0;
}

int cluster_start(struct cluster *c, const char *self_url)
{
	int rc;

	if (self_url) {
		char *copy;
		if (!self_url[0] || strlen(self_url) > CLUSTER_URL_MAX)
			return -EINVAL;
		if (!(copy = strdup(self_url)))
			return -ENOMEM;
		pthread_mutex_lock(&c->lock);
		free(c->self_url);
		c->self_url = copy;
		c->opts.self_url = copy;
		for (size_t i = 0; i < c->nmembers; i++)
			if (strcmp(c->members[i].id, c->self_id) == 0)
				snprintf(c->members[i].url, sizeof(c->members[i].url), "%s", copy);
		pthread_mutex_unlock(&c->lock);
	}
	/* Joins synchronously, so that ownership is right from the first batch. */
	if ((rc = cluster_refresh(c)))
		return rc;
	if ((rc = -pthread_create(&c->beat_thread, NULL, beat_thread, c)))
		return rc;
	c->beat_started = true;
	if ((rc = -pthread_create(&c->forward_thread, NULL, forward_thread, c)))
		return rc;
	c->forward_started = true;
	return 0;
}

void cluster_free(struct cluster *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	pthread_cond_broadcast(&c->wake);
	pthread_cond_broadcast(&c->work);
	pthread_mutex_unlock(&c->lock);
	if (c->beat_started)
		pthread_join(c->beat_thread, NULL);
	if (c->forward_started)
		pthread_join(c->forward_thread, NULL);
	/* Departing lets the others take this replica's jobs at once, not after expiry. */
	if (c->joined)
		store_replica_beat(c->opts.store, c->self_id, c->self_url, c->started_ms, ++c->beat,
				   true);
	while (c->qhead) {
		struct forward_item *it = c->qhead;
		c->qhead = it->next;
		free(it);
	}
	nodes_clear(c);
	free(c->nodes);
	hash_index_free(&c->node_index);
	free(c->members);
	free(c->self_url);
	free(c->auth_header);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->wake);
	pthread_cond_destroy(&c->work);
	free(c);
}

/* ---- views ---------------------------------------------------------------------------------- */

json_t *cluster_json(struct cluster *c, const char *job)
{
	json_t *o, *list;

	if (!c)
		return json_pack("{s:b}", "enabled", 0);
	if (!(o = json_object()) || !(list = json_array())) {
		json_decref(o);
		return NULL;
	}
	pthread_mutex_lock(&c->lock);
	json_object_set_new(o, "enabled", json_true());
	json_object_set_new(o, "self", json_pack("{s:s,s:s,s:I}", "id", c->self_id, "url",
						 c->self_url, "started_ms",
						 (json_int_t)c->started_ms));
	for (size_t i = 0; i < c->nmembers; i++) {
		const struct member *m = &c->members[i];
		json_array_append_new(list, json_pack("{s:s,s:s,s:I,s:i,s:b}", "id", m->id, "url",
						      m->url, "started_ms",
						      (json_int_t)m->started_ms, "age_s",
						      (int)m->age_s, "self",
						      strcmp(m->id, c->self_id) == 0));
	}
	json_object_set_new(o, "replicas", list);
	json_object_set_new(o, "heartbeat_s", json_real(c->opts.heartbeat_ms / 1000.0));
	json_object_set_new(o, "expiry_s", json_integer(c->opts.expiry_s));
	json_object_set_new(o, "forward",
			    json_pack("{s:I,s:I,s:I,s:I,s:I}", "forwarded",
				      (json_int_t)c->stats.forwarded, "errors",
				      (json_int_t)c->stats.forward_errors, "dropped",
				      (json_int_t)c->stats.forward_dropped, "queued_bytes",
				      (json_int_t)c->stats.queued_bytes, "fed",
				      (json_int_t)c->stats.fed));
	if (job) {
		const struct member *m = owner_locked(c, job);
		json_object_set_new(o, "job", json_pack("{s:s,s:s,s:s,s:b}", "id", job, "owner",
							m->id, "owner_url", m->url, "self",
							strcmp(m->id, c->self_id) == 0));
	}
	pthread_mutex_unlock(&c->lock);
	return o;
}

void cluster_metrics_write(void *arg, struct byte_buf *out)
{
	struct cluster *c = arg;
	struct cluster_stats st;
	size_t n;

	pthread_mutex_lock(&c->lock);
	st = c->stats;
	n = c->nmembers;
	pthread_mutex_unlock(&c->lock);
	metrics_gauge_write(out, "sysom_cluster_replicas",
			    "Replicas this server counts as alive (itself included).", n);
	metrics_total_write(out, "sysom_cluster_heartbeat_errors_total",
			    "Heartbeats or member reads the store refused.", st.heartbeat_errors);
	metrics_total_write(out, "sysom_cluster_membership_changes_total",
			    "Times the set of live replicas changed.", st.membership_changes);
	metrics_total_write(out, "sysom_cluster_forwarded_total",
			    "Stored batches sent to the replica that owns their job's analysis.",
			    st.forwarded);
	metrics_total_write(out, "sysom_cluster_forward_errors_total",
			    "Forwarded batches the owner did not accept (unreachable, refused).",
			    st.forward_errors);
	metrics_total_write(out, "sysom_cluster_forward_dropped_total",
			    "Batches not forwarded because the forward queue was full.",
			    st.forward_dropped);
	metrics_gauge_write(out, "sysom_cluster_forward_queue_bytes",
			    "Bodies waiting to be forwarded.", st.queued_bytes);
	metrics_total_write(out, "sysom_cluster_fed_total",
			    "Batches peers forwarded to this replica's analysis.", st.fed);
}
