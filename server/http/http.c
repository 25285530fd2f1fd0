/* SPDX-License-Identifier: Apache-2.0 */
/* HTTP/1.1 transport: libuv listener, per-connection http-parser state machine, threadpool handlers. */
#include "server/http/http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <http_parser.h>

#include "common/list.h"
#include "common/array.h"
#include "common/bytes.h"
#include "common/hash.h"
#include "server/http/http_internal.h"

/*
 * Defaults of struct http_server_options (a zero field selects its default), and the
 * transport's own constants.
 */
#define DEFAULT_MAX_CONNECTIONS 1024u
/* An agent holds one connection; a host running a few tools a handful more. */
#define DEFAULT_MAX_CONNECTIONS_PER_PEER 32u
/* A client sends its request as soon as it is connected: seconds are generous. */
#define DEFAULT_FIRST_BYTE_TIMEOUT_MS 5000u
/* A head is at most 64 KiB; real clients send it in one write. */
#define DEFAULT_HEADER_TIMEOUT_MS 10000u
#define DEFAULT_MAX_HEADER_BYTES (64u * 1024u)
#define DEFAULT_MAX_HEADERS 100u
#define DEFAULT_IDLE_TIMEOUT_MS 60000u
#define DEFAULT_REQUEST_TIMEOUT_MS 30000u
#define DEFAULT_MAX_INFLIGHT 64u
/* Monitoring probes: a scraper and a health checker or two at once. */
#define DEFAULT_MAX_INFLIGHT_MONITORING 4u
/*
 * After a closing response the write side is shut down and input is read and discarded for
 * at most this long (or until the peer closes), so that a peer still sending its request gets
 * the response instead of a reset. Also the grace given to responses being written at stop.
 */
#define LINGER_MS 2000u
#define READ_CHUNK 16384u
#define LISTEN_BACKLOG 511
/* Request buffers that grew beyond this are released between keep-alive requests. */
#define KEEP_BUFFER_BYTES (64u * 1024u)
/* At most this much of an announced Content-Length is allocated before the body arrives. */
#define BODY_RESERVE_MAX (256u * 1024u)
/*
 * Waiting connections a full table looks past, per new connection, because their request
 * has arrived but not been read yet (accepting in a burst comes before reading).
 */
#define EVICT_PROBES_MAX 8
/* Peer table buckets: at most this many (chains grow beyond; entries are one per peer). */
#define PEER_BUCKETS_MAX 65536u

/*
 * Counters, for the record:
 *   requests          final responses sent on accepted connections (handler answers and the
 *                     transport's own: 400, 404, 405, 408, 413, 431, 500, 501, 503, 505)
 *   responses_Nxx     every final response, including 503s to rejected connections
 *   parse_errors      400 answers (malformed requests and invalid paths)
 *   limit_rejections  408, 413, 431 and 503 answered by the transport
 *   connections_rejected  refused with nothing evictable; peer_rejections refused over the
 *                     per-peer limit (both 503 while at most max_refusing are being answered,
 *                     a silent close beyond)
 *   bytes_sent        counted when a write completes (100 Continue and every piece of a
 *                     file body included)
 */

struct http_config {
	uint32_t max_connections;
	uint32_t max_connections_per_peer; /* HTTP_UNLIMITED: none */
	uint32_t max_refusing;             /* refused connections answered with 503 at once */
	uint32_t first_byte_timeout_ms;
	uint32_t header_timeout_ms;
	uint32_t max_header_bytes;
	uint32_t max_headers;
	uint32_t idle_timeout_ms;
	uint32_t request_timeout_ms;
	uint32_t max_inflight;
	uint32_t max_inflight_monitoring;
	bool (*busy)(void *arg);
	void *busy_arg;
	bool (*admit)(void *arg, const struct http_route *route, const struct http_request *req,
		      struct http_response *resp);
	void *admit_arg;
	const struct http_route *routes; /* borrowed */
	size_t nroutes;
};

enum conn_state {
	CONN_READING,   /* parsing input; reading the socket when none is left */
	CONN_HANDLING,  /* a handler runs on the threadpool; reading stopped */
	CONN_WRITING,   /* a response or a 100 Continue is being written; reading stopped */
	CONN_LINGERING, /* closing response sent, write side shut: discarding input */
	CONN_CLOSED,    /* handles closing (or a detached connection ended) */
};

enum timer_mode {
	TIMER_OFF,
	TIMER_IDLE,       /* trusted, no request in progress: close silently */
	TIMER_FIRST_BYTE, /* untrusted, no request in progress: close silently (counted) */
	TIMER_HEAD,       /* a request's head is not complete: 408 */
	TIMER_REQUEST,    /* a request's head arrived, its body is not complete: 408 */
	TIMER_WRITE,      /* the peer does not take the response: close */
	TIMER_LINGER,     /* end of the lingering close */
};

/*
 * Eviction queues, in the order a full connection table takes its victim from them (the
 * first connection of the first non-empty queue). Only counted connections are queued.
 */
enum evict_tier {
	TIER_LINGERING,    /* its last response sent, the connection closing */
	TIER_WAITING,      /* untrusted, no request begun: by when it began waiting */
	TIER_PARTIAL,      /* untrusted, a request part-way in: by when its last bytes came */
	TIER_TRUSTED_IDLE, /* trusted, idle between requests: by when it began waiting */
	TIER_COUNT,
	TIER_NONE = TIER_COUNT, /* not evictable: handling, writing, trusted mid-request, closed */
};

struct conn_queue {
	struct http_conn *first, *last;
};

/*
 * Untrusted connections per peer (one IPv4 address or IPv6 /64; see http__peer_key). An
 * entry lives while it counts a connection. Buckets are picked by a hash keyed with a random
 * seed, so peers cannot aim at one chain.
 */
struct peer {
	struct peer *next;             /* hash chain */
	uint8_t key[HTTP_PEER_KEY_LEN];
	uint32_t untrusted;            /* counted, untrusted connections of this peer (>= 1) */
};

struct peer_table {
	struct peer **buckets;
	uint32_t mask;                 /* bucket count - 1 (a power of two less one) */
	uint64_t seed;
};

/* Which parser callback ran last while the request head was being collected. */
enum head_cb { CB_NONE, CB_URL, CB_FIELD, CB_VALUE };

enum step {
	STEP_MORE,     /* every byte consumed; the request is not complete yet */
	STEP_CONTINUE, /* headers accepted with Expect: 100-continue: send the interim response */
	STEP_DISPATCH, /* a complete request for c->route */
	STEP_RESPOND,  /* c->resp holds the transport's own answer */
};

/* A header as offsets into the head buffer (it may move while it grows). */
struct header_span {
	size_t name;
	size_t value;
};

/*
 * A file body on its way out: read a piece (threadpool, uv_fs_read), write it, read the next
 * once the write completed — one piece in memory, and the peer's pace sets the reading pace.
 */
struct file_stream {
	bool active;                   /* fd is open and owned here */
	bool read_pending;             /* uv_fs_read issued, its callback not run yet */
	int fd;
	uint64_t offset;               /* next byte to read */
	uint64_t remaining;            /* bytes still to send */
	uint8_t *buf;                  /* HTTP_FILE_CHUNK bytes while active */
	uv_fs_t req;
};

struct http_conn {
	struct http_server *srv;       /* NULL for a detached connection */
	const struct http_config *cfg;
	struct http_conn *prev, *next; /* srv->conns */
	uv_tcp_t tcp;
	uv_timer_t timer;
	uv_write_t write_req;
	uv_shutdown_t shutdown_req;
	uv_work_t work;
	int open_handles;              /* tcp and timer not closed yet */
	bool work_pending;             /* a handler queued or running (threadpool or monitoring
					  thread), its completion not run yet on the loop */
	struct http_conn *lane_next;   /* the monitoring thread's queue or done list */
	bool reading;
	bool counted;                  /* counted in srv->served and connections_open */
	bool rejected;                 /* refused (table or peer limit): 503, then close */
	/*
	 * Set by http_request_mark_authenticated on the handler's thread while the handler
	 * runs; read on the loop thread only after the handler returned (uv_queue_work's
	 * completion orders the two), when it makes the connection trusted.
	 */
	bool handler_authenticated;
	bool trusted;                  /* a request passed authentication (loop thread) */
	enum conn_state state;
	enum timer_mode timer_mode;
	uint64_t req_deadline;         /* loop time by which the current request must be complete */
	uint64_t head_deadline;        /* ... and its head */
	enum evict_tier tier;          /* the eviction queue it is on (TIER_NONE: none) */
	struct http_conn *tier_prev, *tier_next;
	struct peer *peer_entry;       /* counted against while untrusted (NULL: not counted) */
	char peer[64];

	http_parser parser;
	struct byte_buf in;            /* received bytes; [in_off, in.len) not parsed yet */
	size_t in_off;

	/* The request being parsed (reset once its response is written). */
	bool in_message;               /* between on_message_begin and on_message_complete */
	bool headers_done;
	bool message_done;
	enum head_cb last_cb;
	uint64_t head_bytes;           /* request line + headers consumed so far */
	struct byte_buf head;          /* URL NUL, then "name NUL value NUL" per header */
	size_t url_len;
	struct header_span *spans;
	size_t nspans, spans_cap;
	struct byte_buf target;        /* decoded path NUL raw query NUL */
	size_t query_off;
	struct byte_buf body;
	const struct http_route *route;
	bool head_request;             /* HEAD: the response carries no body */
	bool keep_alive;               /* what the request asked for */
	bool must_close;               /* the transport ends the connection after this response */
	bool refused_early;            /* answered right after its head, the body not read: what
					  the peer sends later is counted as refused_body_bytes */
	int pending_status;            /* 400/404/405 answered when the (bodiless) request ends */
	bool slot_held;                /* admitted by its head: counted in srv->inflight from then
					* until its handler returns (or the request ends unhandled),
					* so a body sent after the 100 is never refused for slots */
	int error_status;              /* set by a parser callback that aborts */
	const char *error_msg;
	struct http_header *headers;   /* built at dispatch */
	struct http_request request;
	struct http_response resp;

	/* Output. */
	struct byte_buf out;           /* response head */
	size_t write_len;
	bool write_interim;            /* the write in progress is a 100 Continue */
	bool close_after_write;
	struct file_stream stream;     /* the file body being sent after the head */
	struct byte_buf *sink;         /* detached: where output goes */
	struct http_config detached_cfg;
};

/*
 * The monitoring thread: runs HTTP_ROUTE_MONITORING handlers one at a time, so that they never
 * queue behind uploads on the shared threadpool. Connections go in on `queue` and come back
 * on `done`, announced by `async` (the loop then finishes them as after a threadpool job).
 */
struct monitor_lane {
	pthread_t thread;
	bool thread_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool quit;
	struct http_conn *queue_first, *queue_last; /* linked by lane_next */
	struct http_conn *done_first, *done_last;
	uv_async_t async;
	bool async_open;               /* initialised, not closed yet */
	bool async_closing;            /* uv_close issued, its callback not run */
	uint32_t inflight;             /* queued or running (loop thread) */
};

struct http_server {
	uv_loop_t *loop;
	uv_tcp_t listener;
	struct http_config cfg;
	uint16_t port;
	struct http_conn *conns;       /* every connection object not freed yet */
	uint32_t served;               /* connections counted against max_connections */
	uint32_t rejecting;            /* rejected connections still answering or lingering */
	struct conn_queue tiers[TIER_COUNT]; /* evictable connections, see enum evict_tier */
	struct peer_table peers;
	uint32_t inflight;             /* handlers queued or running */
	struct monitor_lane lane;
	bool stopping;
	bool listener_closed;
	void (*done)(void *arg);
	void *done_arg;
	pthread_mutex_t stats_lock;
	struct http_server_stats stats;
	char discard[READ_CHUNK];      /* read buffer of lingering connections (never kept) */
};

static void conn_drive(struct http_conn *c);
static void conn_close(struct http_conn *c);
static int request_build(struct http_conn *c);
static void stream_end(struct http_conn *c);

/* ---------------------------------------------------------------------------------------- */
/* Configuration and counters */

static void config_init(struct http_config *cfg, const struct http_server_options *o,
			const struct http_route *routes, size_t nroutes)
{
	cfg->max_connections = o->max_connections ? o->max_connections : DEFAULT_MAX_CONNECTIONS;
	cfg->max_connections_per_peer = o->max_connections_per_peer
						? o->max_connections_per_peer
						: DEFAULT_MAX_CONNECTIONS_PER_PEER;
	/* Turning away costs a descriptor and a little memory for up to LINGER_MS each. */
	cfg->max_refusing = cfg->max_connections / 4 + 16;
	cfg->first_byte_timeout_ms =
		o->first_byte_timeout_ms ? o->first_byte_timeout_ms : DEFAULT_FIRST_BYTE_TIMEOUT_MS;
	cfg->header_timeout_ms =
		o->header_timeout_ms ? o->header_timeout_ms : DEFAULT_HEADER_TIMEOUT_MS;
	cfg->max_header_bytes = o->max_header_bytes ? o->max_header_bytes : DEFAULT_MAX_HEADER_BYTES;
	cfg->max_headers = o->max_headers ? o->max_headers : DEFAULT_MAX_HEADERS;
	cfg->idle_timeout_ms = o->idle_timeout_ms ? o->idle_timeout_ms : DEFAULT_IDLE_TIMEOUT_MS;
	cfg->request_timeout_ms =
		o->request_timeout_ms ? o->request_timeout_ms : DEFAULT_REQUEST_TIMEOUT_MS;
	cfg->max_inflight = o->max_inflight ? o->max_inflight : DEFAULT_MAX_INFLIGHT;
	cfg->max_inflight_monitoring = o->max_inflight_monitoring
					       ? o->max_inflight_monitoring
					       : DEFAULT_MAX_INFLIGHT_MONITORING;
	cfg->busy = o->busy;
	cfg->busy_arg = o->busy_arg;
	cfg->admit = o->admit;
	cfg->admit_arg = o->admit_arg;
	cfg->routes = routes;
	cfg->nroutes = nroutes;
}

#define STAT_ADD(c, field, n) stat_add((c), offsetof(struct http_server_stats, field), (n))

static void stat_add(struct http_conn *c, size_t offset, uint64_t n)
{
	struct http_server *srv = c->srv;

	if (!srv)
		return;
	pthread_mutex_lock(&srv->stats_lock);
	/* Unsigned wrap-around makes (uint64_t)-1 a decrement (the connections_open gauge). */
	*(uint64_t *)((char *)&srv->stats + offset) += n;
	pthread_mutex_unlock(&srv->stats_lock);
}

static void count_response(struct http_conn *c, int status)
{
	struct http_server *srv = c->srv;

	if (!srv)
		return;
	pthread_mutex_lock(&srv->stats_lock);
	if (!c->rejected)
		srv->stats.requests++;
	switch (status / 100) {
	case 2:
		srv->stats.responses_2xx++;
		break;
	case 3:
		srv->stats.responses_3xx++;
		break;
	case 4:
		srv->stats.responses_4xx++;
		break;
	default:
		srv->stats.responses_5xx++;
		break;
	}
	pthread_mutex_unlock(&srv->stats_lock);
}

/* ---------------------------------------------------------------------------------------- */
/* Peers: untrusted connections per address */

int http__peer_key(const struct sockaddr *sa, uint8_t key[HTTP_PEER_KEY_LEN])
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (sa->sa_family == AF_INET) {
		memcpy(key, v4mapped, sizeof(v4mapped));
		memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
		memcpy(key, a, HTTP_PEER_KEY_LEN);
		if (memcmp(a, v4mapped, sizeof(v4mapped)) != 0)
			memset(key + 8, 0, 8);
		return 0;
	}
	return -EAFNOSUPPORT;
}

static int peer_table_init(struct peer_table *t, uint32_t max_connections)
{
	uint32_t n = 16;

	while (n < max_connections && n < PEER_BUCKETS_MAX)
		n *= 2;
	t->buckets = calloc(n, sizeof(*t->buckets));
	if (!t->buckets)
		return -ENOMEM;
	t->mask = n - 1;
	if (getrandom(&t->seed, sizeof(t->seed), GRND_NONBLOCK) != (ssize_t)sizeof(t->seed))
		t->seed = uv_hrtime() ^ (uint64_t)(uintptr_t)t;
	return 0;
}

/* Frees the buckets; every entry must have been released. */
static void peer_table_free(struct peer_table *t)
{
	free(t->buckets);
	t->buckets = NULL;
}

static struct peer **peer_slot(struct peer_table *t, const uint8_t *key)
{
	struct peer **slot = &t->buckets[sysom_hash64(key, HTTP_PEER_KEY_LEN, t->seed) & t->mask];

	while (*slot && memcmp((*slot)->key, key, HTTP_PEER_KEY_LEN) != 0)
		slot = &(*slot)->next;
	return slot;
}

/* Untrusted connections counted for the peer `key` now. */
static uint32_t peer_untrusted(struct peer_table *t, const uint8_t *key)
{
	struct peer *p = *peer_slot(t, key);

	return p ? p->untrusted : 0;
}

/* Counts one more connection for `key`; the entry (NULL when out of memory). */
static struct peer *peer_acquire(struct peer_table *t, const uint8_t *key)
{
	struct peer **slot = peer_slot(t, key);

	if (!*slot) {
		struct peer *p = calloc(1, sizeof(*p));
		if (!p)
			return NULL;
		memcpy(p->key, key, HTTP_PEER_KEY_LEN);
		*slot = p;
	}
	(*slot)->untrusted++;
	return *slot;
}

/* Counts one connection less; the entry goes with its last connection. */
static void peer_release(struct peer_table *t, struct peer *p)
{
	if (--p->untrusted > 0)
		return;
	struct peer **slot = peer_slot(t, p->key);
	*slot = p->next;
	free(p);
}

/* ---------------------------------------------------------------------------------------- */
/* Small helpers: dates, reasons, header validation, paths, routes */

static void format_date(char *out, size_t outlen)
{
	http_date_format((int64_t)time(NULL), out, outlen);
}

static const char *status_reason(int status)
{
	const char *s = http_status_str((enum http_status)status);

	if (strcmp(s, "<unknown>") != 0)
		return s;
	switch (status / 100) {
	case 2:
		return "OK";
	case 3:
		return "Redirection";
	case 4:
		return "Client Error";
	default:
		return "Server Error";
	}
}

static bool is_token(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (!isalnum(ch) && !strchr("!#$%&'*+-.^_`|~", ch))
			return false;
	}
	return true;
}

/* Field values: visible characters, spaces, tabs and obs-text; no CR, LF or NUL. */
static bool is_field_value(const char *s)
{
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
			return false;
	}
	return true;
}

/* Headers the transport writes itself; a handler's copies are dropped. */
static bool is_transport_header(const char *name)
{
	static const char *const names[] = { "content-length", "content-type", "connection",
					     "date", "transfer-encoding", "keep-alive" };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcasecmp(name, names[i]) == 0)
			return true;
	return false;
}

/* True when a '/'-separated segment of [path, path+len) is "..". */
static bool has_dotdot_segment(const char *path, size_t len)
{
	size_t start = 0;

	for (size_t i = 0; i <= len; i++) {
		if (i == len || path[i] == '/') {
			if (i - start == 2 && path[start] == '.' && path[start + 1] == '.')
				return true;
			start = i + 1;
		}
	}
	return false;
}

/*
 * Splits the request target (origin-form "/p?q" or absolute-form "http://h/p?q"), and
 * stores the percent-decoded path and the raw query in c->target. -EINVAL when the target
 * has another form, a bad escape, a NUL or a ".." segment.
 */
static int target_parse(struct http_conn *c)
{
	const char *url = (const char *)c->head.data;
	const char *end = url + c->url_len, *p = url, *path, *query = NULL;
	size_t path_len, query_len = 0;

	if (c->url_len == 0)
		return -EINVAL;
	if (url[0] != '/') {
		const char *sep = memmem(url, c->url_len, "://", 3);
		if (!sep || sep == url || !isalpha((unsigned char)url[0]))
			return -EINVAL;
		for (const char *s = url; s < sep; s++)
			if (!isalnum((unsigned char)*s) && *s != '+' && *s != '-' && *s != '.')
				return -EINVAL;
		p = sep + 3;
		while (p < end && *p != '/' && *p != '?' && *p != '#')
			p++;
	}
	path = p;
	while (p < end && *p != '?' && *p != '#')
		p++;
	path_len = (size_t)(p - path);
	if (p < end && *p == '?') {
		query = ++p;
		while (p < end && *p != '#')
			p++;
		query_len = (size_t)(p - query);
	}

	c->target.len = 0;
	if (path_len == 0) {
		byte_buf_append(&c->target, "/", 1);
	} else {
		char *dst = (char *)byte_buf_reserve(&c->target, path_len + 1);
		if (!dst)
			return byte_buf_error(&c->target);
		int n = http_percent_decode(path, path_len, false, dst, path_len + 1);
		if (n < 0)
			return -EINVAL;
		c->target.len += (size_t)n;
	}
	if (byte_buf_error(&c->target))
		return byte_buf_error(&c->target);
	if (has_dotdot_segment((const char *)c->target.data, c->target.len))
		return -EINVAL;
	byte_buf_put_u8(&c->target, 0);
	c->query_off = c->target.len;
	if (query_len)
		byte_buf_append(&c->target, query, query_len);
	byte_buf_put_u8(&c->target, 0);
	return byte_buf_error(&c->target);
}

/* The first route for the method and path (see http_route_find). */
static const struct http_route *route_find(const struct http_config *cfg, const char *method,
					   const char *path, bool *path_known)
{
	return http_route_find(cfg->routes, cfg->nroutes, method, path, path_known);
}

/* Adds "Allow: A, B" listing the methods of the routes with the request's path. */
static void add_allow_header(struct http_conn *c)
{
	const struct http_config *cfg = c->cfg;
	const char *path = (const char *)c->target.data;
	char allow[256];
	size_t len = 0;
	bool get = false, head = false;

	allow[0] = '\0';
	for (size_t i = 0; i < cfg->nroutes; i++) {
		const struct http_route *r = &cfg->routes[i];
		bool seen = false;
		if (!http_route_path_matches(r, path))
			continue;
		for (size_t j = 0; j < i && !seen; j++)
			seen = http_route_path_matches(&cfg->routes[j], path) &&
			       strcmp(cfg->routes[j].method, r->method) == 0;
		if (seen)
			continue;
		get |= strcmp(r->method, "GET") == 0;
		head |= strcmp(r->method, "HEAD") == 0;
		int n = snprintf(allow + len, sizeof(allow) - len, "%s%s", len ? ", " : "", r->method);
		if (n < 0 || (size_t)n >= sizeof(allow) - len)
			break;
		len += (size_t)n;
	}
	if (get && !head && len + 6 < sizeof(allow))
		snprintf(allow + len, sizeof(allow) - len, "%sHEAD", len ? ", " : "");
	http_response_header(&c->resp, "Allow", allow);
}

/* ---------------------------------------------------------------------------------------- */
/* Parsing: http-parser callbacks fill the request; conn_parse turns them into steps */

static int parse_abort(struct http_conn *c, int status, const char *msg)
{
	c->error_status = status;
	c->error_msg = msg;
	return -1;
}

static int head_check(struct http_conn *c)
{
	int err = byte_buf_error(&c->head);

	if (!err)
		return 0;
	if (err == -E2BIG)
		return parse_abort(c, 431, "request line and headers exceed the limit");
	return parse_abort(c, 500, "out of memory");
}

static int on_message_begin(http_parser *p)
{
	struct http_conn *c = p->data;

	c->in_message = true;
	if (c->srv) {
		uint64_t now = uv_now(c->srv->loop);
		c->req_deadline = now + c->cfg->request_timeout_ms;
		c->head_deadline = now + c->cfg->header_timeout_ms;
	}
	return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
	struct http_conn *c = p->data;

	byte_buf_append(&c->head, at, len);
	c->url_len += len;
	c->last_cb = CB_URL;
	return head_check(c);
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
	struct http_conn *c = p->data;

	if (c->headers_done)
		return 0; /* a chunked body's trailer: ignored */
	if (c->last_cb != CB_FIELD) {
		/* A new header: terminate the URL or the previous value. */
		byte_buf_put_u8(&c->head, 0);
		if (c->nspans >= c->cfg->max_headers)
			return parse_abort(c, 431, "too many request headers");
		if (sysom_array_reserve((void **)&c->spans, &c->spans_cap, c->nspans,
					sizeof(*c->spans), 16, c->cfg->max_headers))
			return parse_abort(c, 500, "out of memory");
		c->spans[c->nspans].name = c->head.len;
		c->spans[c->nspans].value = SIZE_MAX;
		c->nspans++;
		c->last_cb = CB_FIELD;
	}
	uint8_t *dst = byte_buf_reserve(&c->head, len);
	if (!dst)
		return head_check(c);
	for (size_t i = 0; i < len; i++)
		dst[i] = (uint8_t)tolower((unsigned char)at[i]);
	c->head.len += len;
	return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
	struct http_conn *c = p->data;

	if (c->headers_done)
		return 0;
	if (c->last_cb == CB_FIELD) {
		byte_buf_put_u8(&c->head, 0);
		c->spans[c->nspans - 1].value = c->head.len;
		c->last_cb = CB_VALUE;
	}
	byte_buf_append(&c->head, at, len);
	return head_check(c);
}

static int on_headers_complete(http_parser *p)
{
	struct http_conn *c = p->data;

	if (c->last_cb == CB_FIELD) {
		/* A name without a value (the parser does not produce one; be safe). */
		byte_buf_put_u8(&c->head, 0);
		c->spans[c->nspans - 1].value = c->head.len;
	}
	byte_buf_put_u8(&c->head, 0);
	if (head_check(c))
		return -1;
	c->headers_done = true;
	/* Stop here: limits and routing are decided before any body byte is read. */
	http_parser_pause(p, 1);
	return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
	struct http_conn *c = p->data;

	if (!c->route)
		return parse_abort(c, 400, "unexpected request body");
	if (len > c->route->max_body - c->body.len)
		return parse_abort(c, 413, "request body exceeds the limit");
	byte_buf_append(&c->body, at, len);
	if (byte_buf_error(&c->body))
		return parse_abort(c, 500, "out of memory");
	return 0;
}

static int on_message_complete(http_parser *p)
{
	struct http_conn *c = p->data;

	c->message_done = true;
	c->in_message = false;
	/* Stop at the end of the message: pipelined bytes wait for this response. */
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings parser_settings = {
	.on_message_begin = on_message_begin,
	.on_url = on_url,
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};

/* Gives back the handler slot a request held since its head (it ended without a handler). */
static void slot_release(struct http_conn *c)
{
	if (!c->slot_held)
		return;
	c->slot_held = false;
	c->srv->inflight--;
}

/*
 * Replaces c->resp with the transport's own JSON error answer. `closing` ends the connection
 * after it. Counts parse errors and limit rejections. Returns STEP_RESPOND.
 */
__attribute__((format(printf, 4, 5))) static enum step answer(struct http_conn *c, int status,
							       bool closing, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	slot_release(c); /* the transport answers: no handler will run for this request */
	http_response_release(&c->resp);
	memset(&c->resp, 0, sizeof(c->resp));
	http_response_error(&c->resp, status, "%s", msg);
	if (closing)
		c->must_close = true;
	if (status == 400)
		STAT_ADD(c, parse_errors, 1);
	else if (status == 408 || status == 413 || status == 431 || status == 503)
		STAT_ADD(c, limit_rejections, 1);
	if (status == 503)
		http_response_header(&c->resp, "Retry-After", "1");
	return STEP_RESPOND;
}

static enum step answer_unrouted(struct http_conn *c, int status, bool closing)
{
	switch (status) {
	case 404:
		return answer(c, 404, closing, "no such path");
	case 405:
		answer(c, 405, closing, "method %s not allowed here",
		       http_method_str((enum http_method)c->parser.method));
		add_allow_header(c);
		return STEP_RESPOND;
	default:
		return answer(c, 400, closing, "invalid request path");
	}
}

static const char *header_value(const struct http_conn *c, const char *lower_name)
{
	const char *base = (const char *)c->head.data;

	for (size_t i = 0; i < c->nspans; i++)
		if (c->spans[i].value != SIZE_MAX && strcmp(base + c->spans[i].name, lower_name) == 0)
			return base + c->spans[i].value;
	return NULL;
}

static void headers_trim(struct http_conn *c)
{
	char *base = (char *)c->head.data;

	for (size_t i = 0; i < c->nspans; i++) {
		if (c->spans[i].value == SIZE_MAX)
			continue;
		char *v = base + c->spans[i].value;
		size_t len = strlen(v);
		while (len && (v[len - 1] == ' ' || v[len - 1] == '\t'))
			v[--len] = '\0';
		while (*v == ' ' || *v == '\t')
			v++;
		c->spans[i].value = (size_t)(v - base);
	}
}

/*
 * Whether a request for c->route that carries a body is refused right after its head: the
 * server's handler slots are all taken, or the route decodes and the server says its decode
 * memory is full. Monitoring routes have their own slots; detached connections never refuse.
 */
static bool head_over_budget(const struct http_conn *c)
{
	const struct http_server *srv = c->srv;

	if (!srv || (c->route->flags & HTTP_ROUTE_MONITORING))
		return false;
	if (srv->inflight >= c->cfg->max_inflight)
		return true;
	return (c->route->flags & HTTP_ROUTE_DECODES) && c->cfg->busy &&
	       c->cfg->busy(c->cfg->busy_arg);
}

/*
 * A request with a body answered right after its head (`step` is answer()'s STEP_RESPOND, its
 * answer closing the connection): the body is never parsed, and what the peer sends of it
 * anyway is read and thrown away by the lingering close, counted as refused_body_bytes.
 */
static enum step refuse_before_body(struct http_conn *c, enum step step)
{
	bool has_body = (c->parser.flags & F_CHUNKED) ||
			(c->parser.content_length != 0 && c->parser.content_length != ULLONG_MAX);

	c->must_close = true;
	if (!has_body)
		return step;
	STAT_ADD(c, refused_before_body, 1);
	c->refused_early = true;
	/* The head's final LF (not consumed while paused) is not the body's. */
	if (c->in_off < c->in.len && c->in.data[c->in_off] == '\n')
		c->in_off++;
	return step;
}

/*
 * Asks the server's admit callback about the request by its head. False when refused, with
 * c->resp holding the callback's answer (a 500 when it left no error status there).
 */
static bool admitted(struct http_conn *c)
{
	if (!c->cfg->admit || (c->route->flags & HTTP_ROUTE_MONITORING))
		return true;
	if (request_build(c) < 0) {
		answer(c, 500, true, "out of memory");
		return false;
	}
	bool ok = c->cfg->admit(c->cfg->admit_arg, c->route, &c->request, &c->resp);
	free(c->headers);
	c->headers = NULL;
	memset(&c->request, 0, sizeof(c->request));
	if (ok) {
		http_response_release(&c->resp);
		memset(&c->resp, 0, sizeof(c->resp));
		return true;
	}
	if (c->resp.status < 400)
		answer(c, 500, true, "request refused without an answer");
	return false;
}

/* The head is complete (parser paused before its final LF): limits, target and route. */
static enum step head_complete(struct http_conn *c)
{
	const http_parser *p = &c->parser;
	const char *method = http_method_str((enum http_method)p->method);
	bool chunked = p->flags & F_CHUNKED;
	bool has_body = chunked || (p->content_length != 0 && p->content_length != ULLONG_MAX);
	bool path_known;
	int status;

	c->keep_alive = http_should_keep_alive(p) && !p->upgrade;
	c->head_request = p->method == HTTP_HEAD;
	if (p->http_major != 1)
		return answer(c, 505, true, "HTTP version %u.%u not supported", p->http_major,
			      p->http_minor);
	headers_trim(c);
	/* http-parser frames "chunked" only; another coding would reach handlers undecoded. */
	for (size_t i = 0; chunked && i < c->nspans; i++) {
		const char *base = (const char *)c->head.data;
		if (strcmp(base + c->spans[i].name, "transfer-encoding") == 0 &&
		    c->spans[i].value != SIZE_MAX &&
		    strcasecmp(base + c->spans[i].value, "chunked") != 0)
			return answer(c, 501, true, "transfer coding \"%s\" not supported",
				      base + c->spans[i].value);
	}
	if (target_parse(c) < 0) {
		status = 400;
		goto unrouted;
	}
	c->route = route_find(c->cfg, method, (const char *)c->target.data, &path_known);
	if (!c->route) {
		status = path_known ? 405 : 404;
		goto unrouted;
	}
	const char *expect = header_value(c, "expect");
	if (expect && !*expect)
		expect = NULL; /* an empty list expects nothing */
	if (expect && strcasecmp(expect, "100-continue") != 0)
		return refuse_before_body(c, answer(c, 417, true,
						    "expectation \"%.64s\" not supported; only "
						    "100-continue is",
						    expect));
	if (has_body && !chunked) {
		if (p->content_length > c->route->max_body)
			return refuse_before_body(
				c, answer(c, 413, true,
					  "request body of %llu bytes exceeds the limit of %zu bytes",
					  (unsigned long long)p->content_length,
					  c->route->max_body));
	}
	if (has_body && head_over_budget(c)) {
		/*
		 * Refused before the body: nothing of it is parsed or buffered, no 100 Continue
		 * is sent, and the connection closes after the answer (a lingering close: what
		 * the peer had already sent is discarded, not read into the request).
		 */
		STAT_ADD(c, early_rejections, 1);
		return refuse_before_body(
			c, answer(c, 503, true, "the server is busy (%s); retry later",
				  c->srv->inflight >= c->cfg->max_inflight
					  ? "too many requests in progress"
					  : "its decode memory is in use by other uploads"));
	}
	if (has_body && !admitted(c))
		return refuse_before_body(c, STEP_RESPOND);
	if (has_body && c->srv && !(c->route->flags & HTTP_ROUTE_MONITORING)) {
		/* Its handler slot from now on: the 100 (or the body the peer sends anyway) is a
		 * promise that the body will be handled, not refused as "busy" once it arrived. */
		c->srv->inflight++;
		c->slot_held = true;
	}
	if (has_body && !chunked) {
		/* Room for the announced body, capped: a peer that announces and then stalls
		 * must not make every connection hold max_body bytes. */
		size_t room = (size_t)p->content_length;
		if (room > BODY_RESERVE_MAX)
			room = BODY_RESERVE_MAX;
		if (!byte_buf_reserve(&c->body, room))
			return answer(c, 500, true, "out of memory");
	}
	/*
	 * RFC 9110 §10.1.1: 100 Continue only for HTTP/1.1 and a request with content, and not
	 * when some of the content is already here (an impatient client: the head's final LF
	 * is still unconsumed at in_off, so more than one byte left means body bytes came).
	 */
	if (expect && has_body && p->http_minor >= 1 && c->in.len - c->in_off <= 1)
		return STEP_CONTINUE;
	return STEP_MORE;

unrouted:
	/* Without a body the connection survives: answer when the message ends. */
	if (has_body)
		return answer_unrouted(c, status, true);
	c->pending_status = status;
	return STEP_MORE;
}

static enum step parse_failed(struct http_conn *c, enum http_errno err)
{
	if (c->error_status)
		return answer(c, c->error_status, true, "%s", c->error_msg);
	if (err == HPE_HEADER_OVERFLOW && !c->headers_done)
		return answer(c, 431, true, "request line and headers exceed the limit");
	return answer(c, 400, true, "malformed request: %s", http_errno_description(err));
}

/* Parses c->in from c->in_off until something must be done. */
static enum step conn_parse(struct http_conn *c)
{
	while (c->in_off < c->in.len) {
		const char *data = (const char *)c->in.data + c->in_off;
		size_t len = c->in.len - c->in_off;
		bool in_head = !c->headers_done;
		size_t n = http_parser_execute(&c->parser, &parser_settings, data, len);
		enum http_errno err = HTTP_PARSER_ERRNO(&c->parser);

		c->in_off += n;
		if (in_head) {
			c->head_bytes += n;
			/* Paused in on_headers_complete, the final LF is not consumed yet. */
			if (c->head_bytes + (c->headers_done ? 1 : 0) > c->cfg->max_header_bytes)
				return answer(c, 431, true, "request line and headers exceed %u bytes",
					      c->cfg->max_header_bytes);
		}
		if (err == HPE_PAUSED) {
			http_parser_pause(&c->parser, 0);
			if (c->message_done) {
				if (c->pending_status)
					return answer_unrouted(c, c->pending_status, false);
				return STEP_DISPATCH;
			}
			enum step s = head_complete(c);
			if (s != STEP_MORE)
				return s;
			continue;
		}
		if (err != HPE_OK)
			return parse_failed(c, err);
		if (n == 0)
			return parse_failed(c, HPE_UNKNOWN); /* cannot happen; never spin */
	}
	return STEP_MORE;
}

/* Forgets the answered request; the parser continues with the next one. */
static void request_reset(struct http_conn *c)
{
	c->headers_done = false;
	c->message_done = false;
	c->last_cb = CB_NONE;
	c->head_bytes = 0;
	c->url_len = 0;
	c->nspans = 0;
	c->query_off = 0;
	c->route = NULL;
	c->head_request = false;
	c->keep_alive = false;
	c->must_close = false;
	c->refused_early = false;
	c->pending_status = 0;
	c->error_status = 0;
	c->error_msg = NULL;
	free(c->headers);
	c->headers = NULL;
	memset(&c->request, 0, sizeof(c->request));
	http_response_release(&c->resp);
	memset(&c->resp, 0, sizeof(c->resp));
	if (c->head.cap > KEEP_BUFFER_BYTES)
		byte_buf_free(&c->head);
	if (c->body.cap > KEEP_BUFFER_BYTES)
		byte_buf_free(&c->body);
	if (c->target.cap > KEEP_BUFFER_BYTES)
		byte_buf_free(&c->target);
	c->head.len = c->body.len = c->target.len = 0;
	c->head.error = c->body.error = c->target.error = 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Connection: timers, reading, writing, closing */

static void on_timer(uv_timer_t *t);

static void timer_arm(struct http_conn *c, enum timer_mode mode, uint64_t timeout_ms)
{
	c->timer_mode = mode;
	if (c->srv)
		uv_timer_start(&c->timer, on_timer, timeout_ms, 0);
}

static void timer_stop(struct http_conn *c)
{
	c->timer_mode = TIMER_OFF;
	if (c->srv)
		uv_timer_stop(&c->timer);
}

/* The eviction queue c belongs on now. */
static enum evict_tier tier_of(const struct http_conn *c)
{
	if (!c->counted)
		return TIER_NONE;
	switch (c->state) {
	case CONN_LINGERING:
		return TIER_LINGERING;
	case CONN_READING:
		if (!c->in_message)
			return c->trusted ? TIER_TRUSTED_IDLE : TIER_WAITING;
		return c->trusted ? TIER_NONE : TIER_PARTIAL;
	case CONN_HANDLING:
	case CONN_WRITING:
	case CONN_CLOSED:
		break;
	}
	return TIER_NONE;
}

/*
 * Moves c to the queue its state calls for (to the back when it changes queue); `active`
 * (request bytes just arrived) also sends a partial request to the back of its queue.
 */
static void tier_update(struct http_conn *c, bool active)
{
	struct http_server *srv = c->srv;
	enum evict_tier t;

	if (!srv)
		return;
	t = tier_of(c);
	if (t == c->tier && !(active && t == TIER_PARTIAL))
		return;
	if (c->tier != TIER_NONE)
		SYSOM_DLIST_UNLINK(srv->tiers[c->tier].first, srv->tiers[c->tier].last, c, tier_prev,
				   tier_next);
	c->tier = t;
	if (t != TIER_NONE)
		SYSOM_DLIST_PUSH_BACK(srv->tiers[t].first, srv->tiers[t].last, c, tier_prev, tier_next);
}

/* Whether bytes the peer sent wait in the socket, not read yet. */
static bool conn_has_unread(struct http_conn *c)
{
	uv_os_fd_t fd;
	int pending = 0;

	return uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 && ioctl(fd, FIONREAD, &pending) == 0 &&
	       pending > 0;
}

/*
 * The connection a full table gives up for a new one; NULL when none may go. A waiting one
 * whose request already arrived unread (a client that sent it right after connecting, still
 * behind the accept burst) goes to the back of its queue instead, a few times at most, so
 * the choice stays O(1) and peers that send a byte cannot push the choice past their tier.
 */
static struct http_conn *evict_victim(struct http_server *srv)
{
	for (int t = 0; t < TIER_COUNT; t++) {
		struct conn_queue *q = &srv->tiers[t];
		for (int probes = 0; q->first; probes++) {
			struct http_conn *c = q->first;
			bool waiting = t == TIER_WAITING || t == TIER_TRUSTED_IDLE;
			if (!waiting || probes >= EVICT_PROBES_MAX || q->first == q->last ||
			    !conn_has_unread(c))
				return c;
			SYSOM_DLIST_UNLINK(q->first, q->last, c, tier_prev, tier_next);
			SYSOM_DLIST_PUSH_BACK(q->first, q->last, c, tier_prev, tier_next);
		}
	}
	return NULL;
}

/* After a handler: a request that passed authentication makes the connection trusted. */
static void conn_trust_update(struct http_conn *c)
{
	if (c->trusted || !c->handler_authenticated)
		return;
	c->trusted = true;
	if (!c->srv)
		return;
	if (c->peer_entry) {
		peer_release(&c->srv->peers, c->peer_entry);
		c->peer_entry = NULL;
	}
	if (c->counted)
		STAT_ADD(c, connections_trusted, 1);
	tier_update(c, false);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct http_conn *c = h->data;
	uint8_t *dst;

	(void)suggested;
	if (c->state == CONN_LINGERING) {
		*buf = uv_buf_init(c->srv->discard, sizeof(c->srv->discard));
		return;
	}
	if (c->in_off == c->in.len) {
		c->in.len = 0;
		c->in_off = 0;
	} else if (c->in_off) {
		memmove(c->in.data, c->in.data + c->in_off, c->in.len - c->in_off);
		c->in.len -= c->in_off;
		c->in_off = 0;
	}
	dst = byte_buf_reserve(&c->in, READ_CHUNK);
	*buf = dst ? uv_buf_init((char *)dst, READ_CHUNK) : uv_buf_init(NULL, 0);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
	struct http_conn *c = stream->data;

	(void)buf;
	if (nread == 0)
		return;
	if (nread < 0) {
		/* EOF, reset or no buffer: nothing more can be answered. */
		conn_close(c);
		return;
	}
	STAT_ADD(c, bytes_received, (uint64_t)nread);
	if (c->state == CONN_LINGERING) {
		STAT_ADD(c, discarded_bytes, (uint64_t)nread);
		if (c->refused_early)
			STAT_ADD(c, refused_body_bytes, (uint64_t)nread);
		return;
	}
	c->in.len += (size_t)nread;
	tier_update(c, true);
	conn_drive(c);
}

static void read_start(struct http_conn *c)
{
	if (c->reading || c->state == CONN_CLOSED)
		return;
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
		conn_close(c);
		return;
	}
	c->reading = true;
}

static void read_stop(struct http_conn *c)
{
	if (!c->reading)
		return;
	uv_read_stop((uv_stream_t *)&c->tcp);
	c->reading = false;
}

static void conn_free(struct http_conn *c)
{
	if (!c)
		return;
	free(c->headers);
	free(c->spans);
	byte_buf_free(&c->in);
	byte_buf_free(&c->head);
	byte_buf_free(&c->target);
	byte_buf_free(&c->body);
	http_response_release(&c->resp);
	stream_end(c);
	byte_buf_free(&c->out);
	free(c);
}

static void lane_stop(struct http_server *srv);

static void srv_maybe_finish(struct http_server *srv)
{
	void (*done)(void *arg) = srv->done;
	void *arg = srv->done_arg;

	if (!srv->stopping || !srv->listener_closed || srv->conns)
		return;
	if (srv->lane.async_open || srv->lane.async_closing) {
		lane_stop(srv); /* comes back here once its handle is closed */
		return;
	}
	pthread_mutex_destroy(&srv->lane.mu);
	pthread_cond_destroy(&srv->lane.cv);
	pthread_mutex_destroy(&srv->stats_lock);
	peer_table_free(&srv->peers);
	free(srv);
	if (done)
		done(arg);
}

/* Frees a socket connection once its handles are closed and no handler holds it. */
static void conn_maybe_free(struct http_conn *c)
{
	struct http_server *srv = c->srv;

	if (c->open_handles > 0 || c->work_pending || c->stream.read_pending)
		return;
	SYSOM_LIST_UNLINK(srv->conns, c, prev, next);
	conn_free(c);
	srv_maybe_finish(srv);
}

static void on_conn_close(uv_handle_t *h)
{
	struct http_conn *c = h->data;

	c->open_handles--;
	conn_maybe_free(c);
}

static void conn_close(struct http_conn *c)
{
	if (c->state == CONN_CLOSED)
		return;
	c->state = CONN_CLOSED;
	c->reading = false;
	c->timer_mode = TIMER_OFF;
	if (!c->srv)
		return;
	tier_update(c, false); /* off its queue: CONN_CLOSED is on none */
	if (c->counted) {
		c->counted = false;
		c->srv->served--;
		STAT_ADD(c, connections_open, (uint64_t)-1);
		if (c->trusted)
			STAT_ADD(c, connections_trusted, (uint64_t)-1);
	}
	if (c->peer_entry) {
		peer_release(&c->srv->peers, c->peer_entry);
		c->peer_entry = NULL;
	}
	if (c->rejected)
		c->srv->rejecting--;
	slot_release(c); /* a peer that left (or timed out) before its body was whole */
	uv_close((uv_handle_t *)&c->tcp, on_conn_close);
	uv_close((uv_handle_t *)&c->timer, on_conn_close);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	struct http_conn *c = req->data;

	if (status < 0)
		conn_close(c);
}

/* After a closing response: shut the write side, discard input for a while, then close. */
static void conn_linger(struct http_conn *c)
{
	if (!c->srv || c->srv->stopping) {
		conn_close(c);
		return;
	}
	c->state = CONN_LINGERING;
	c->shutdown_req.data = c;
	if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown) < 0) {
		conn_close(c);
		return;
	}
	/* Received but never parsed (a refused request's body, pipelined requests). */
	STAT_ADD(c, discarded_bytes, (uint64_t)(c->in.len - c->in_off));
	if (c->refused_early)
		STAT_ADD(c, refused_body_bytes, (uint64_t)(c->in.len - c->in_off));
	byte_buf_free(&c->in);
	c->in_off = 0;
	timer_arm(c, TIMER_LINGER, LINGER_MS);
	tier_update(c, false);
	read_start(c);
}

/* Closes the file of a finished or abandoned file body; no read may be in flight. */
static void stream_end(struct http_conn *c)
{
	struct file_stream *st = &c->stream;

	if (!st->active || st->read_pending)
		return;
	close(st->fd);
	free(st->buf);
	st->active = false;
	st->fd = -1;
	st->buf = NULL;
	st->remaining = 0;
}

/* Takes the response's file body over for sending; 0 or -ENOMEM (the response keeps it). */
static int stream_begin(struct http_conn *c)
{
	struct http_response *r = &c->resp;
	struct file_stream *st = &c->stream;
	uint8_t *buf = malloc(HTTP_FILE_CHUNK);

	if (!buf)
		return -ENOMEM;
	st->active = true;
	st->read_pending = false;
	st->fd = r->body_fd;
	st->offset = r->body_fd_offset;
	st->remaining = r->body_fd_length;
	st->buf = buf;
	r->has_body_fd = false;
	r->body_fd = -1;
	return 0;
}

/* The whole response has left: on to the next request, or close. */
static void response_complete(struct http_conn *c)
{
	stream_end(c);
	if (c->srv && c->srv->stopping) {
		conn_close(c);
		return;
	}
	if (c->close_after_write) {
		conn_linger(c);
		return;
	}
	request_reset(c);
	c->state = CONN_READING;
}

static void stream_read(struct http_conn *c);

/* A write finished (or failed): decide what the connection does next. */
static void write_done(struct http_conn *c, int status)
{
	bool interim = c->write_interim;

	if (status == 0)
		STAT_ADD(c, bytes_sent, c->write_len);
	c->write_interim = false;
	if (!interim)
		http_response_release(&c->resp);
	if (c->state == CONN_CLOSED)
		return;
	if (status < 0) {
		conn_close(c);
		return;
	}
	if (interim) {
		if (c->srv && c->srv->stopping)
			conn_close(c);
		else
			c->state = CONN_READING;
		return;
	}
	/* A file body continues while the server stops: the write timer (LINGER_MS from the
	 * stop, see conn_write) bounds it. */
	if (c->stream.active && c->stream.remaining > 0) {
		stream_read(c);
		return;
	}
	response_complete(c);
}

static void on_write(uv_write_t *req, int status)
{
	struct http_conn *c = req->data;

	write_done(c, status);
	if (c->state == CONN_READING)
		conn_drive(c);
}

static void conn_write(struct http_conn *c, const uv_buf_t *bufs, unsigned n, bool interim)
{
	size_t total = 0;

	for (unsigned i = 0; i < n; i++)
		total += bufs[i].len;
	c->state = CONN_WRITING;
	c->write_interim = interim;
	c->write_len = total;
	if (!c->srv) {
		for (unsigned i = 0; i < n; i++)
			byte_buf_append(c->sink, bufs[i].base, bufs[i].len);
		write_done(c, 0);
		return;
	}
	read_stop(c);
	tier_update(c, false);
	/* Once stopping, the grace armed at the stop (or by the first write since) is not
	 * extended by each piece of a file body. */
	if (!c->srv->stopping || c->timer_mode != TIMER_WRITE)
		timer_arm(c, TIMER_WRITE, c->srv->stopping ? LINGER_MS : c->cfg->idle_timeout_ms);
	c->write_req.data = c;
	int rc = uv_write(&c->write_req, (uv_stream_t *)&c->tcp, bufs, n, on_write);
	if (rc < 0)
		write_done(c, rc);
}

static void on_stream_read(uv_fs_t *req)
{
	struct http_conn *c = req->data;
	struct file_stream *st = &c->stream;
	ssize_t n = req->result;

	uv_fs_req_cleanup(req);
	st->read_pending = false;
	if (c->state == CONN_CLOSED) {
		conn_maybe_free(c);
		return;
	}
	/* An error, or a file shorter than announced: the body cannot be completed, and the
	 * Content-Length already sent forbids anything but ending the connection. */
	if (n <= 0) {
		conn_close(c);
		return;
	}
	if ((uint64_t)n > st->remaining)
		n = (ssize_t)st->remaining;
	st->offset += (uint64_t)n;
	st->remaining -= (uint64_t)n;
	uv_buf_t buf = uv_buf_init((char *)st->buf, (unsigned)n);
	conn_write(c, &buf, 1, false);
}

/* Reads the next piece of the file body (then on_stream_read writes it). */
static void stream_read(struct http_conn *c)
{
	struct file_stream *st = &c->stream;

	if (!c->srv) {
		/* Detached (fuzzing): synchronous reads straight into the sink. */
		while (st->remaining > 0) {
			size_t want = st->remaining < HTTP_FILE_CHUNK ? (size_t)st->remaining
								      : HTTP_FILE_CHUNK;
			ssize_t n = pread(st->fd, st->buf, want, (off_t)st->offset);
			if (n <= 0) {
				conn_close(c);
				stream_end(c);
				return;
			}
			byte_buf_append(c->sink, st->buf, (size_t)n);
			st->offset += (uint64_t)n;
			st->remaining -= (uint64_t)n;
		}
		response_complete(c);
		return;
	}
	size_t want = st->remaining < HTTP_FILE_CHUNK ? (size_t)st->remaining : HTTP_FILE_CHUNK;
	uv_buf_t buf = uv_buf_init((char *)st->buf, (unsigned)want);
	st->req.data = c;
	if (uv_fs_read(c->srv->loop, &st->req, st->fd, &buf, 1, (int64_t)st->offset,
		       on_stream_read) < 0) {
		conn_close(c);
		return;
	}
	st->read_pending = true;
}

static void send_continue(struct http_conn *c)
{
	static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
	uv_buf_t buf = uv_buf_init((char *)line, sizeof(line) - 1);

	conn_write(c, &buf, 1, true);
}

/* Writes c->resp with the transport's headers (then the file body, piece by piece). */
static void response_send(struct http_conn *c)
{
	struct http_response *r = &c->resp;
	struct byte_buf *out = &c->out;
	int status = r->status ? r->status : 200;
	char date[64];
	uv_buf_t bufs[2];
	unsigned n = 1;

	if (byte_buf_error(&r->body) || status < 200 || status > 599) {
		bool bad_status = !byte_buf_error(&r->body);
		http_response_release(r);
		memset(r, 0, sizeof(*r));
		if (bad_status)
			http_response_error(r, 500, "handler returned an invalid status %d", status);
		else
			http_response_error(r, 500, "response body could not be built");
		status = 500;
	}
	bool closing = c->must_close || !c->keep_alive || (c->srv && c->srv->stopping);
	bool bodiless_status = status == 204 || status == 304;
	if (r->has_body_fd && !c->head_request && !bodiless_status && r->body_fd_length > 0 &&
	    stream_begin(c) < 0) {
		http_response_release(r);
		memset(r, 0, sizeof(*r));
		http_response_error(r, 500, "out of memory");
		status = 500;
	}
	/* A file body that is not sent (HEAD, 204/304, empty) still gives its length. */
	uint64_t body_len = c->stream.active ? c->stream.remaining
			    : r->has_body_fd ? r->body_fd_length
					     : r->body.len;
	bool send_body = !c->stream.active && !r->has_body_fd && !c->head_request &&
			 !bodiless_status && r->body.len > 0;
	const char *ctype = r->content_type[0] ? r->content_type : "application/json";
	if (!memchr(r->content_type, 0, sizeof(r->content_type)) || !is_field_value(ctype))
		ctype = "application/octet-stream";

	format_date(date, sizeof(date));
	out->len = 0;
	out->error = 0;
	byte_buf_printf(out, "HTTP/1.1 %d %s\r\nDate: %s\r\n", status, status_reason(status), date);
	if (!bodiless_status)
		byte_buf_printf(out, "Content-Type: %s\r\nContent-Length: %" PRIu64 "\r\n", ctype,
				body_len);
	for (size_t i = 0; i < r->extra_header_count && i < HTTP_MAX_EXTRA_HEADERS; i++) {
		const char *name = r->extra_headers[i].name, *value = r->extra_headers[i].value;
		/* Names and values were truncated to fit by http_response_header. */
		if (!memchr(name, 0, sizeof(r->extra_headers[i].name)) ||
		    !memchr(value, 0, sizeof(r->extra_headers[i].value)))
			continue;
		if (!is_token(name) || !is_field_value(value) || is_transport_header(name))
			continue;
		byte_buf_printf(out, "%s: %s\r\n", name, value);
	}
	if (closing)
		byte_buf_printf(out, "Connection: close\r\n");
	else if (c->parser.http_major == 1 && c->parser.http_minor == 0)
		byte_buf_printf(out, "Connection: keep-alive\r\n");
	byte_buf_append(out, "\r\n", 2);
	if (r->has_body_fd) {
		/* Not sent: close the file now. */
		close(r->body_fd);
		r->has_body_fd = false;
		r->body_fd = -1;
	}
	if (byte_buf_error(out)) {
		conn_close(c);
		stream_end(c);
		return;
	}
	count_response(c, status);
	c->close_after_write = closing;
	bufs[0] = uv_buf_init((char *)out->data, (unsigned)out->len);
	if (send_body)
		bufs[n++] = uv_buf_init((char *)r->body.data, (unsigned)r->body.len);
	conn_write(c, bufs, n, false);
}

static void work_run(uv_work_t *w)
{
	struct http_conn *c = w->data;

	c->route->handler(c->route->ctx, &c->request, &c->resp);
}

/* A handler returned (threadpool or monitoring thread): send its answer. */
static void handler_done(struct http_conn *c, int status)
{
	c->work_pending = false;
	if (c->route->flags & HTTP_ROUTE_MONITORING)
		c->srv->lane.inflight--;
	else
		c->srv->inflight--;
	if (c->state == CONN_CLOSED) {
		conn_maybe_free(c);
		return;
	}
	conn_trust_update(c);
	if (status < 0)
		answer(c, 503, false, "request cancelled");
	response_send(c);
}

static void work_done(uv_work_t *w, int status)
{
	handler_done(w->data, status);
}

/* ---------------------------------------------------------------------------------------- */
/* The monitoring thread */

static void *lane_main(void *arg)
{
	struct http_server *srv = arg;
	struct monitor_lane *l = &srv->lane;

	pthread_mutex_lock(&l->mu);
	for (;;) {
		while (!l->queue_first && !l->quit)
			pthread_cond_wait(&l->cv, &l->mu);
		struct http_conn *c = l->queue_first;
		if (!c)
			break; /* quit with nothing queued */
		l->queue_first = c->lane_next;
		if (!l->queue_first)
			l->queue_last = NULL;
		c->lane_next = NULL;
		pthread_mutex_unlock(&l->mu);
		c->route->handler(c->route->ctx, &c->request, &c->resp);
		pthread_mutex_lock(&l->mu);
		if (l->done_last)
			l->done_last->lane_next = c;
		else
			l->done_first = c;
		l->done_last = c;
		uv_async_send(&l->async);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

/* The loop's side: finishes the connections whose monitoring handler returned. */
static void on_lane_async(uv_async_t *a)
{
	struct http_server *srv = a->data;
	struct monitor_lane *l = &srv->lane;
	struct http_conn *c;

	pthread_mutex_lock(&l->mu);
	c = l->done_first;
	l->done_first = l->done_last = NULL;
	pthread_mutex_unlock(&l->mu);
	while (c) {
		struct http_conn *next = c->lane_next;
		c->lane_next = NULL;
		STAT_ADD(c, monitoring_requests, 1);
		handler_done(c, 0); /* may free c */
		c = next;
	}
}

static void on_lane_close(uv_handle_t *h)
{
	struct http_server *srv = h->data;

	srv->lane.async_closing = false;
	srv_maybe_finish(srv);
}

/* Ends the thread (nothing is queued: every connection is gone) and closes the handle. */
static void lane_stop(struct http_server *srv)
{
	struct monitor_lane *l = &srv->lane;

	if (!l->async_open)
		return;
	if (l->thread_started) {
		pthread_mutex_lock(&l->mu);
		l->quit = true;
		pthread_cond_signal(&l->cv);
		pthread_mutex_unlock(&l->mu);
		pthread_join(l->thread, NULL);
		l->thread_started = false;
	}
	l->async_open = false;
	l->async_closing = true;
	uv_close((uv_handle_t *)&l->async, on_lane_close);
}

/* Creates the thread and its handle; 0 or -errno. */
static int lane_start(struct http_server *srv)
{
	struct monitor_lane *l = &srv->lane;
	int rc = uv_async_init(srv->loop, &l->async, on_lane_async);

	if (rc < 0)
		return rc;
	l->async.data = srv;
	l->async_open = true;
	rc = pthread_create(&l->thread, NULL, lane_main, srv);
	if (rc)
		return -rc;
	l->thread_started = true;
	return 0;
}

/* Hands a monitoring request to the monitoring thread. */
static void lane_queue(struct http_conn *c)
{
	struct monitor_lane *l = &c->srv->lane;

	pthread_mutex_lock(&l->mu);
	c->lane_next = NULL;
	if (l->queue_last)
		l->queue_last->lane_next = c;
	else
		l->queue_first = c;
	l->queue_last = c;
	pthread_cond_signal(&l->cv);
	pthread_mutex_unlock(&l->mu);
}

static int request_build(struct http_conn *c)
{
	const char *base = (const char *)c->head.data;

	if (c->nspans) {
		c->headers = calloc(c->nspans, sizeof(*c->headers));
		if (!c->headers)
			return -ENOMEM;
	}
	for (size_t i = 0; i < c->nspans; i++) {
		c->headers[i].name = base + c->spans[i].name;
		c->headers[i].value = c->spans[i].value == SIZE_MAX ? "" : base + c->spans[i].value;
	}
	c->request = (struct http_request){
		.method = http_method_str((enum http_method)c->parser.method),
		.path = (const char *)c->target.data,
		.query = (const char *)c->target.data + c->query_off,
		.headers = c->headers,
		.header_count = c->nspans,
		.body = c->body.len ? c->body.data : NULL,
		.body_len = c->body.len,
		.peer = c->peer,
		.conn = c,
	};
	http_response_release(&c->resp);
	memset(&c->resp, 0, sizeof(c->resp));
	return 0;
}

/* Runs the route's handler: inline when detached, on the threadpool otherwise. */
static void conn_dispatch(struct http_conn *c)
{
	struct http_server *srv = c->srv;

	if (request_build(c) < 0) {
		answer(c, 500, true, "out of memory");
		response_send(c);
		return;
	}
	if (!srv) {
		c->route->handler(c->route->ctx, &c->request, &c->resp);
		conn_trust_update(c);
		response_send(c);
		return;
	}
	bool monitoring = c->route->flags & HTTP_ROUTE_MONITORING;
	bool held = c->slot_held; /* counted since its head: the handler takes that slot over */
	c->slot_held = false;
	if (!held && (monitoring ? srv->lane.inflight >= c->cfg->max_inflight_monitoring
				 : srv->inflight >= c->cfg->max_inflight)) {
		answer(c, 503, false, "too many requests in progress");
		response_send(c);
		return;
	}
	c->state = CONN_HANDLING;
	read_stop(c);
	timer_stop(c);
	tier_update(c, false);
	if (monitoring) {
		srv->lane.inflight++;
		c->work_pending = true;
		lane_queue(c);
		return;
	}
	c->work.data = c;
	if (uv_queue_work(srv->loop, &c->work, work_run, work_done) < 0) {
		if (held)
			srv->inflight--;
		c->state = CONN_READING;
		answer(c, 500, true, "cannot queue the request");
		response_send(c);
		return;
	}
	if (!held)
		srv->inflight++;
	c->work_pending = true;
}

/*
 * The timer a reading connection runs: between requests the idle timeout (trusted) or the
 * first-byte timeout (untrusted); during a request's head the head deadline (and the
 * request's), then the request deadline. Re-armed only when the mode changes, so bytes that
 * trickle in do not extend a deadline.
 */
static enum timer_mode conn_timer_mode(const struct http_conn *c)
{
	if (c->in_message)
		return c->headers_done ? TIMER_REQUEST : TIMER_HEAD;
	return c->trusted ? TIMER_IDLE : TIMER_FIRST_BYTE;
}

/* Parses what has been received and acts on it until input runs out or the state changes. */
static void conn_drive(struct http_conn *c)
{
	while (c->state == CONN_READING && c->in_off < c->in.len) {
		switch (conn_parse(c)) {
		case STEP_MORE:
			break;
		case STEP_CONTINUE:
			send_continue(c);
			break;
		case STEP_DISPATCH:
			conn_dispatch(c);
			break;
		case STEP_RESPOND:
			response_send(c);
			break;
		}
	}
	if (c->state != CONN_READING || !c->srv)
		return;
	if (c->srv->stopping) {
		conn_close(c);
		return;
	}
	enum timer_mode want = conn_timer_mode(c);
	if (c->timer_mode != want) {
		uint64_t now = uv_now(c->srv->loop), deadline;
		switch (want) {
		case TIMER_HEAD:
			deadline = c->head_deadline < c->req_deadline ? c->head_deadline
								       : c->req_deadline;
			break;
		case TIMER_REQUEST:
			deadline = c->req_deadline;
			break;
		case TIMER_FIRST_BYTE:
			deadline = now + (c->cfg->first_byte_timeout_ms < c->cfg->idle_timeout_ms
						  ? c->cfg->first_byte_timeout_ms
						  : c->cfg->idle_timeout_ms);
			break;
		default:
			deadline = now + c->cfg->idle_timeout_ms;
			break;
		}
		timer_arm(c, want, deadline > now ? deadline - now : 0);
	}
	tier_update(c, false);
	read_start(c);
}

static void conn_expire(struct http_conn *c, enum timer_mode mode)
{
	if ((mode == TIMER_REQUEST || mode == TIMER_HEAD) && c->state == CONN_READING) {
		/* The head deadline is the earlier one unless the request timeout is shorter. */
		if (mode == TIMER_HEAD && c->cfg->header_timeout_ms < c->cfg->request_timeout_ms) {
			STAT_ADD(c, header_timeouts, 1);
			answer(c, 408, true, "request line and headers not complete within %u ms",
			       c->cfg->header_timeout_ms);
		} else {
			answer(c, 408, true, "request not complete within %u ms",
			       c->cfg->request_timeout_ms);
		}
		response_send(c);
		return;
	}
	if (mode == TIMER_FIRST_BYTE)
		STAT_ADD(c, first_byte_timeouts, 1);
	conn_close(c);
}

static void on_timer(uv_timer_t *t)
{
	struct http_conn *c = t->data;
	enum timer_mode mode = c->timer_mode;

	c->timer_mode = TIMER_OFF;
	conn_expire(c, mode);
}

static struct http_conn *conn_alloc(struct http_server *srv, const struct http_config *cfg)
{
	struct http_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->srv = srv;
	c->cfg = cfg;
	c->state = CONN_READING;
	c->tier = TIER_NONE;
	http_parser_init(&c->parser, HTTP_REQUEST);
	c->parser.data = c;
	/* Bounds memory within one parser call; the precise check counts consumed bytes. */
	c->head.limit = cfg->max_header_bytes;
	return c;
}

/* ---------------------------------------------------------------------------------------- */
/* Detached connections (fuzzing) */

struct http_conn *http__conn_new(const struct http_server_options *opts,
				 const struct http_route *routes, size_t nroutes,
				 struct byte_buf *out)
{
	struct http_server_options none = { 0 };
	struct http_config cfg;
	struct http_conn *c;

	config_init(&cfg, opts ? opts : &none, routes, nroutes);
	c = conn_alloc(NULL, &cfg);
	if (!c)
		return NULL;
	c->detached_cfg = cfg;
	c->cfg = &c->detached_cfg;
	c->sink = out;
	snprintf(c->peer, sizeof(c->peer), "in-process");
	return c;
}

int http__conn_feed(struct http_conn *c, const void *data, size_t len)
{
	if (c->state == CONN_CLOSED)
		return 1;
	if (c->in_off == c->in.len)
		c->in.len = c->in_off = 0;
	byte_buf_append(&c->in, data, len);
	if (byte_buf_error(&c->in)) {
		conn_close(c);
		return 1;
	}
	conn_drive(c);
	return c->state == CONN_CLOSED;
}

int http__conn_expire(struct http_conn *c)
{
	if (c->state == CONN_CLOSED)
		return 1;
	conn_expire(c, conn_timer_mode(c));
	return c->state == CONN_CLOSED;
}

bool http__conn_trusted(const struct http_conn *c)
{
	return c->trusted;
}

void http__conn_free(struct http_conn *c)
{
	conn_free(c);
}

/* ---------------------------------------------------------------------------------------- */
/* Server */

void http_request_mark_authenticated(const struct http_request *req)
{
	if (req && req->conn)
		req->conn->handler_authenticated = true;
}

/*
 * Turns a new connection away: 503 and a lingering close while fewer than max_refusing are
 * being turned away, a silent close beyond (answering costs a descriptor and memory too).
 */
static void conn_refuse(struct http_conn *c, const char *why)
{
	struct http_server *srv = c->srv;

	if (srv->rejecting >= srv->cfg.max_refusing) {
		conn_close(c);
		return;
	}
	c->rejected = true;
	srv->rejecting++;
	answer(c, 503, true, "%s", why);
	response_send(c);
}

static void on_connection(uv_stream_t *listener, int status)
{
	struct http_server *srv = listener->data;
	struct sockaddr_storage ss;
	int sslen = sizeof(ss);
	char ip[INET6_ADDRSTRLEN] = "";
	uint8_t key[HTTP_PEER_KEY_LEN];
	bool peer_known = false;
	struct http_conn *c;

	if (status < 0 || srv->stopping)
		return;
	c = conn_alloc(srv, &srv->cfg);
	if (!c)
		return;
	if (uv_tcp_init(srv->loop, &c->tcp) < 0) {
		conn_free(c);
		return;
	}
	uv_timer_init(srv->loop, &c->timer);
	c->tcp.data = c;
	c->timer.data = c;
	c->open_handles = 2;
	SYSOM_LIST_PUSH_FRONT(srv->conns, c, prev, next);
	if (uv_accept(listener, (uv_stream_t *)&c->tcp) < 0) {
		conn_close(c);
		return;
	}
	snprintf(c->peer, sizeof(c->peer), "unknown");
	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sslen) == 0) {
		peer_known = http__peer_key((const struct sockaddr *)&ss, key) == 0;
		if (ss.ss_family == AF_INET6) {
			const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&ss;
			uv_ip6_name(a6, ip, sizeof(ip));
			snprintf(c->peer, sizeof(c->peer), "[%s]:%u", ip, ntohs(a6->sin6_port));
		} else if (ss.ss_family == AF_INET) {
			const struct sockaddr_in *a4 = (const struct sockaddr_in *)&ss;
			uv_ip4_name(a4, ip, sizeof(ip));
			snprintf(c->peer, sizeof(c->peer), "%s:%u", ip, ntohs(a4->sin_port));
		}
	}
	uv_tcp_nodelay(&c->tcp, 1);
	/* A peer at its limit is refused before it can push anybody else out. A peer that
	 * cannot be named (gone already) is not limited: it cannot hold a connection either. */
	bool peer_limited = peer_known && srv->cfg.max_connections_per_peer != HTTP_UNLIMITED;
	if (peer_limited &&
	    peer_untrusted(&srv->peers, key) >= srv->cfg.max_connections_per_peer) {
		STAT_ADD(c, peer_rejections, 1);
		conn_refuse(c, "too many connections from this address");
		return;
	}
	if (srv->served >= srv->cfg.max_connections) {
		struct http_conn *victim = evict_victim(srv);
		if (!victim) {
			STAT_ADD(c, connections_rejected, 1);
			conn_refuse(c, "too many connections");
			return;
		}
		STAT_ADD(victim, connections_evicted, 1);
		conn_close(victim);
	}
	if (peer_limited && !(c->peer_entry = peer_acquire(&srv->peers, key))) {
		conn_close(c);
		return;
	}
	srv->served++;
	c->counted = true;
	pthread_mutex_lock(&srv->stats_lock);
	srv->stats.connections_accepted++;
	srv->stats.connections_open++;
	pthread_mutex_unlock(&srv->stats_lock);
	conn_drive(c);
}

static void on_listener_close(uv_handle_t *h)
{
	struct http_server *srv = h->data;

	srv->listener_closed = true;
	srv_maybe_finish(srv);
}

/* http-parser's own header limit is process-wide: raise it (never lower it) when needed. */
static void parser_header_limit_raise(uint32_t bytes)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static uint32_t current = HTTP_MAX_HEADER_SIZE;

	pthread_mutex_lock(&lock);
	if (bytes > current) {
		http_parser_set_max_header_size(bytes);
		current = bytes;
	}
	pthread_mutex_unlock(&lock);
}

struct http_server *http_server_start(uv_loop_t *loop, const struct http_server_options *opts,
				      const struct http_route *routes, size_t nroutes, char *err,
				      size_t errlen)
{
	struct http_server *srv = NULL;
	struct sockaddr_storage addr;
	struct sigaction sa;
	char host[INET6_ADDRSTRLEN + 16];
	int addrlen = sizeof(addr);
	int rc;

	if (!loop || !opts || !opts->host || (!routes && nroutes)) {
		snprintf(err, errlen, "http: invalid arguments (loop, options, host and routes are required)");
		return NULL;
	}
	/* "[::1]" is accepted for "::1". */
	size_t hlen = strlen(opts->host);
	if (hlen >= 2 && opts->host[0] == '[' && opts->host[hlen - 1] == ']')
		snprintf(host, sizeof(host), "%.*s", (int)(hlen - 2), opts->host + 1);
	else
		snprintf(host, sizeof(host), "%s", opts->host);
	memset(&addr, 0, sizeof(addr));
	if (uv_ip4_addr(host, opts->port, (struct sockaddr_in *)&addr) != 0 &&
	    uv_ip6_addr(host, opts->port, (struct sockaddr_in6 *)&addr) != 0) {
		snprintf(err, errlen, "http: invalid listen address \"%s\" (an IPv4 or IPv6 literal is required)",
			 opts->host);
		return NULL;
	}
	for (size_t i = 0; i < nroutes; i++) {
		if (!routes[i].method || !routes[i].path || !routes[i].handler) {
			snprintf(err, errlen, "http: route %zu lacks a method, path or handler", i);
			return NULL;
		}
	}
	srv = calloc(1, sizeof(*srv));
	if (!srv) {
		snprintf(err, errlen, "http: out of memory");
		return NULL;
	}
	srv->loop = loop;
	config_init(&srv->cfg, opts, routes, nroutes);
	if (peer_table_init(&srv->peers, srv->cfg.max_connections) < 0) {
		snprintf(err, errlen, "http: out of memory");
		free(srv);
		return NULL;
	}
	pthread_mutex_init(&srv->stats_lock, NULL);
	pthread_mutex_init(&srv->lane.mu, NULL);
	pthread_cond_init(&srv->lane.cv, NULL);
	rc = uv_tcp_init(loop, &srv->listener);
	if (rc < 0) {
		snprintf(err, errlen, "http: %s", uv_strerror(rc));
		pthread_mutex_destroy(&srv->lane.mu);
		pthread_cond_destroy(&srv->lane.cv);
		pthread_mutex_destroy(&srv->stats_lock);
		peer_table_free(&srv->peers);
		free(srv);
		return NULL;
	}
	srv->listener.data = srv;
	rc = lane_start(srv);
	if (rc < 0) {
		snprintf(err, errlen, "http: cannot start the monitoring thread: %s", strerror(-rc));
		/* Freed once the listener and the lane's handle are closed. */
		srv->stopping = true;
		uv_close((uv_handle_t *)&srv->listener, on_listener_close);
		return NULL;
	}
	rc = uv_tcp_bind(&srv->listener, (const struct sockaddr *)&addr, 0);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&srv->listener, LISTEN_BACKLOG, on_connection);
	if (rc == 0)
		rc = uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&addr, &addrlen);
	if (rc < 0) {
		snprintf(err, errlen, "http: cannot listen on %s port %u: %s", opts->host,
			 (unsigned)opts->port, uv_strerror(rc));
		/* The handle is freed in its close callback, when the loop next runs. */
		srv->stopping = true;
		uv_close((uv_handle_t *)&srv->listener, on_listener_close);
		return NULL;
	}
	srv->port = ntohs(addr.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&addr)->sin6_port
						      : ((struct sockaddr_in *)&addr)->sin_port);
	parser_header_limit_raise(srv->cfg.max_header_bytes);
	/* A peer that goes away must make writes fail with EPIPE, not kill the process. */
	if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
		signal(SIGPIPE, SIG_IGN);
	return srv;
}

uint64_t http_server_descriptors_needed(const struct http_server_options *opts)
{
	struct http_config cfg;

	config_init(&cfg, opts, NULL, 0);
	return (uint64_t)cfg.max_connections + cfg.max_refusing + 1;
}

uint16_t http_server_port(const struct http_server *srv)
{
	return srv->port;
}

void http_server_stats(const struct http_server *srv, struct http_server_stats *out)
{
	pthread_mutex_t *lock = (pthread_mutex_t *)&srv->stats_lock;

	pthread_mutex_lock(lock);
	*out = srv->stats;
	pthread_mutex_unlock(lock);
}

void http_server_stop(struct http_server *srv, void (*done)(void *arg), void *arg)
{
	if (!srv || srv->stopping)
		return;
	srv->stopping = true;
	srv->done = done;
	srv->done_arg = arg;
	uv_close((uv_handle_t *)&srv->listener, on_listener_close);
	for (struct http_conn *c = srv->conns; c; c = c->next) {
		switch (c->state) {
		case CONN_READING:
		case CONN_LINGERING:
			conn_close(c);
			break;
		case CONN_WRITING:
			/* Give the response a short while to leave, then close. */
			timer_arm(c, TIMER_WRITE, LINGER_MS);
			break;
		case CONN_HANDLING: /* answered (with Connection: close) when the handler returns */
		case CONN_CLOSED:
			break;
		}
	}
}
