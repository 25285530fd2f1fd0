// SPDX-License-Identifier: Apache-2.0
// The server under a fleet: N simulated agents (default 5,000), each its own keep-alive TCP
// connection from its own source address in 127.0.0.0/8, posting real agent batches at the
// agent's cadence (every 30 s, jittered) for --seconds (default 600). Reports ingest latency
// (request written -> 2xx response read), throughput, errors by status, and the server's memory
// (RSS at start, after warm-up, at the end, max, and its slope over the second half), CPU and
// database growth.
//
// The batches are real: files captured from a real agent's spool (bench/capture_batches.sh),
// or raw wire batches (zstd or plain). Each send re-stamps one of them as the simulated node's
// own (tests/support/batch_stamp.h: node id, hostname, epoch, increasing sequence, the window
// moved to now, its own job and communicators) on libuv's threadpool, so the event loop only
// moves bytes and the latency it measures is the server's.
//
// Starts the real sysom-server (data dir in a temporary directory, --max-connections above N,
// a bearer token) unless --url names one. Raises RLIMIT_NOFILE for itself and the server it
// starts. With --strict, any error response, connection failure, timeout or a server that dies
// or exits non-zero makes the exit status 1.
//
//   ingest_load --batches DIR [--agents N] [--seconds S] [--interval S] [--jitter X]
//               [--url URL [--server-pid PID] [--data-dir DIR] [--token-file F]] [--strict]
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <http_parser.h>
#include <jansson.h>
#include <uv.h>
#include <xxhash.h>

#include "agent/ship/http_client.h"
#include "agent/ship/retry.h"
#include "agent/ship/spool.h"
#include "agent/ship/uploader.h"
#include "bench/bench_stats.h"
#include "common/bytes.h"
#include "common/compress.h"
#include "common/hash.h"
#include "common/hex.h"
#include "common/options.h"
#include "common/wire/wire.h"
#include "tests/support/batch_stamp.h"

extern char **environ;

#define MIB (1024.0 * 1024.0)
#define MAX_BATCH_FILE (256u << 20)  /* as the spool's body limit */
#define MAX_DECOMPRESSED (128u << 20) /* the server's default limit */
#define MAX_TEMPLATES 64
#define RESPONSE_BODY_KEEP 512
#define STATUS_SLOTS 600              /* HTTP status codes counted one by one */
#define SAMPLE_PERIOD_MS 1000
#define ERROR_EXAMPLES 8
#define STOP_GRACE_S 30.0             /* in-flight requests may finish this long after the end */

/* ---- options ---------------------------------------------------------------------------- */

static struct {
	uint32_t agents;
	double seconds;
	double interval;
	double jitter;
	double warmup;
	double timeout;
	double report_every;
	double max_rss_slope;
	double backoff_max;
	double expect_share;
	uint32_t zstd_level;
	uint32_t server_pid;
	uint32_t seed;
	char *batches;
	char *url;
	char *server_bin;
	char *server_args;
	char *data_dir;
	char *token_file;
	char *markdown;
	bool strict;
	bool bind_sources;
	bool keep;
} opt = {
	.agents = 5000,
	.seconds = 600,
	.interval = 30,
	.jitter = 0.1,
	.timeout = 30,
	.report_every = 30,
	.max_rss_slope = 1.0,
	.backoff_max = 60,
	.expect_share = 1,
	.zstd_level = 1,
	.seed = 1,
	.bind_sources = true,
};

static const struct sysom_option options[] = {
	{ "batches", SYSOM_OPT_STRING, &opt.batches, 0, 0, "directory of captured batches: agent spool files (*.batch) or wire batches, zstd or plain (required)", true },
	{ "agents", SYSOM_OPT_UINT, &opt.agents, 1, 1000000, "simulated agents, one connection each (default 5000)", true },
	{ "seconds", SYSOM_OPT_DURATION, &opt.seconds, 1, 86400, "how long the agents post (default 600s)", true },
	{ "interval", SYSOM_OPT_DURATION, &opt.interval, 0.01, 3600, "batch interval of every agent (default 30s, the agent's)", true },
	{ "jitter", SYSOM_OPT_DOUBLE, &opt.jitter, 0, 0.9, "each gap is interval x (1 +- jitter x U(0,1)) (default 0.1); first posts are spread over one interval", true },
	{ "warmup", SYSOM_OPT_DURATION, &opt.warmup, 0, 86400, "RSS 'after warm-up' is taken this far in (default: one interval, at most half the run)", true },
	{ "timeout", SYSOM_OPT_DURATION, &opt.timeout, 0.1, 3600, "request timeout; then the connection is closed and the batch retried (default 30s)", true },
	{ "backoff-max", SYSOM_OPT_DURATION, &opt.backoff_max, 0.01, 3600, "longest wait between retries of a batch, as the agent's --backoff-max (default 60s)", true },
	{ "expect-share", SYSOM_OPT_DOUBLE, &opt.expect_share, 0, 1, "share of the agents that send Expect: 100-continue and wait up to 1 s for the 100 before the body, as the agent does (default 1; 0.5: both kinds side by side, reported apart)", true },
	{ "report-every", SYSOM_OPT_DURATION, &opt.report_every, 1, 3600, "progress line period (default 30s)", true },
	{ "max-rss-slope", SYSOM_OPT_DOUBLE, &opt.max_rss_slope, 0, 1e6, "memory is flat when the RSS slope over the second half is at most this, MiB/min (default 1)", true },
	{ "zstd-level", SYSOM_OPT_UINT, &opt.zstd_level, 1, 19, "compression level of the batches (default 1: as small as the agent's level 3 on captured batches, at half the CPU)", true },
	{ "seed", SYSOM_OPT_UINT, &opt.seed, 0, UINT32_MAX, "seed of the phases and jitter (default 1)", true },
	{ "url", SYSOM_OPT_STRING, &opt.url, 0, 0, "http://IPv4:PORT of a running server (default: start one)", true },
	{ "server-pid", SYSOM_OPT_UINT, &opt.server_pid, 1, 4194304, "with --url: the server's pid, for its memory and CPU", true },
	{ "data-dir", SYSOM_OPT_STRING, &opt.data_dir, 0, 0, "the server's data directory (with --url: for the database size; default: a temporary one)", true },
	{ "token-file", SYSOM_OPT_STRING, &opt.token_file, 0, 0, "bearer token file (default: a random token given to the server it starts)", true },
	{ "server", SYSOM_OPT_STRING, &opt.server_bin, 0, 0, "sysom-server binary to start (default: ../sysom-server beside this program's directory)", true },
	{ "server-args", SYSOM_OPT_STRING, &opt.server_args, 0, 0, "extra arguments for the server it starts, space-separated", true },
	{ "bind-sources", SYSOM_OPT_BOOL, &opt.bind_sources, 0, 0, "bind each agent's connection to its own 127.x.y.z address (default true; needs a loopback server)", true },
	{ "strict", SYSOM_OPT_BOOL, &opt.strict, 0, 0, "exit 1 on any error response, connection failure, timeout, or a server that dies or exits non-zero", true },
	{ "markdown", SYSOM_OPT_STRING, &opt.markdown, 0, 0, "also append the Markdown result row to this file", true },
	{ "keep", SYSOM_OPT_BOOL, &opt.keep, 0, 0, "keep the temporary directory (server log, database)", true },
};
#define NOPTIONS (sizeof(options) / sizeof(options[0]))

/* ---- batch templates -------------------------------------------------------------------- */

struct template {
	struct batch_stamp *stamp; /* mutated by every encode: used under `lock` */
	pthread_mutex_t lock;
	char name[64];
	size_t captured_bytes;     /* as the agent sent it (compressed) */
	size_t plain_bytes;
};

static struct template templates[MAX_TEMPLATES];
static uint32_t ntemplates;
static uint64_t seq_span; /* largest NCCL sequence span of any template */

/* The body of a captured file: a spool file's body (header and checksum verified), or the
 * whole file. Returns 0 with [*body, *body + *len) inside `data`, or -1 (message printed). */
static int captured_body(const char *path, const uint8_t *data, size_t len, const uint8_t **body,
			 size_t *body_len)
{
	struct spool_header h;
	size_t where = 0;
	int hs;

	if (len < 4 || memcmp(data, "SYSP", 4) != 0) {
		*body = data;
		*body_len = len;
		return 0;
	}
	hs = spool_header_decode(data, len, &h, &where);
	if (hs < 0 || (uint64_t)hs + h.body_len != len) {
		fprintf(stderr, "ingest_load: %s: invalid spool file (at byte %zu)\n", path, where);
		return -1;
	}
	if (XXH64(data + hs, h.body_len, 0) != h.body_hash) {
		fprintf(stderr, "ingest_load: %s: spool body checksum mismatch\n", path);
		return -1;
	}
	*body = data + hs;
	*body_len = h.body_len;
	return 0;
}

/* Reads, decompresses and decodes one captured batch into a template. Returns 0 or -1. */
static int template_load(const char *path, const char *name)
{
	struct template *t = &templates[ntemplates];
	struct byte_buf plain = { 0 };
	struct sysom_batch batch;
	struct sysom_wire_error werr = { 0 };
	const uint8_t *body, *wire;
	size_t body_len, wire_len;
	uint8_t *data = NULL;
	struct stat st;
	int fd = -1, rc = -1;

	memset(&batch, 0, sizeof(batch));
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "ingest_load: %s: %s\n", path, strerror(errno));
		goto cleanup;
	}
	if (st.st_size <= 0 || (uint64_t)st.st_size > MAX_BATCH_FILE) {
		fprintf(stderr, "ingest_load: %s: size %lld out of range\n", path, (long long)st.st_size);
		goto cleanup;
	}
	if (!(data = malloc((size_t)st.st_size)) ||
	    pread(fd, data, (size_t)st.st_size, 0) != st.st_size) {
		fprintf(stderr, "ingest_load: %s: cannot read\n", path);
		goto cleanup;
	}
	if (captured_body(path, data, (size_t)st.st_size, &body, &body_len))
		goto cleanup;
	wire = body;
	wire_len = body_len;
	if (body_len >= 4 && load_le32(body) == 0xFD2FB528u) { /* zstd frame magic */
		if (sysom_zstd_decompress(body, body_len, MAX_DECOMPRESSED, &plain)) {
			fprintf(stderr, "ingest_load: %s: not valid zstd data\n", path);
			goto cleanup;
		}
		wire = plain.data;
		wire_len = plain.len;
	}
	if (sysom_batch_decode(wire, wire_len, &sysom_wire_default_limits, &batch, &werr)) {
		fprintf(stderr, "ingest_load: %s: not a valid batch: %s at byte %zu\n", path,
			werr.message, werr.offset);
		goto cleanup;
	}
	if (batch_stamp_new(&batch, &t->stamp)) {
		fprintf(stderr, "ingest_load: %s: cannot make a template\n", path);
		goto cleanup;
	}
	pthread_mutex_init(&t->lock, NULL);
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->captured_bytes = body_len;
	t->plain_bytes = wire_len;
	if (batch_stamp_seq_span(t->stamp) > seq_span)
		seq_span = batch_stamp_seq_span(t->stamp);
	ntemplates++;
	rc = 0;
cleanup:
	sysom_batch_free(&batch);
	byte_buf_free(&plain);
	free(data);
	if (fd >= 0)
		close(fd);
	return rc;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Loads every regular file of `dir` (sorted by name, at most MAX_TEMPLATES). 0 or -1. */
static int templates_load(const char *dir)
{
	char *names[MAX_TEMPLATES], path[4096];
	uint32_t n = 0;
	struct dirent *e;
	DIR *d = opendir(dir);
	int rc = 0;

	if (!d) {
		fprintf(stderr, "ingest_load: --batches %s: %s\n", dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(d)) && n < MAX_TEMPLATES) {
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (e->d_name[0] == '.' || stat(path, &st) || !S_ISREG(st.st_mode))
			continue;
		if (!(names[n] = strdup(e->d_name))) {
			rc = -1;
			break;
		}
		n++;
	}
	closedir(d);
	qsort(names, n, sizeof(names[0]), name_cmp);
	for (uint32_t i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (rc == 0 && template_load(path, names[i]))
			rc = -1;
		free(names[i]);
	}
	if (rc == 0 && ntemplates == 0) {
		fprintf(stderr, "ingest_load: no batch files in %s (bench/capture_batches.sh makes some)\n",
			dir);
		rc = -1;
	}
	return rc;
}

/* ---- simulated agents ------------------------------------------------------------------- */

enum conn_state { CONN_NONE, CONN_CONNECTING, CONN_OPEN, CONN_CLOSING };
enum batch_state {
	BATCH_NONE,      /* nothing to send */
	BATCH_BUILDING,  /* being stamped and compressed on the threadpool */
	BATCH_READY,     /* waiting for a connection */
	BATCH_IN_FLIGHT, /* request written (or being written), response awaited */
	BATCH_BACKOFF,   /* failed; retried when request_timer fires */
};

/* Errors that are not HTTP statuses. */
enum failure { FAIL_CONNECT, FAIL_CLOSED, FAIL_TIMEOUT, FAIL_PROTOCOL, FAIL_BUILD, FAIL_KINDS };
static const char *const failure_names[FAIL_KINDS] = {
	"connect failed", "connection lost", "timeout", "bad response", "build failed",
};

struct agent {
	uint32_t index;
	char hostname[16];
	uint8_t node_id[SYSOM_NODE_ID_SIZE];
	char node_hex[2 * SYSOM_NODE_ID_SIZE + 1];
	uint64_t epoch, key_salt;
	uint64_t next_sequence;    /* the next batch's sequence */
	struct sockaddr_in source;

	uv_tcp_t tcp;
	uv_connect_t connect_req;
	uv_work_t work;
	uv_timer_t cadence;        /* seals the next window */
	uv_timer_t request_timer;  /* request timeout, or the retry backoff */
	uv_timer_t continue_timer; /* Expect: the wait for 100 Continue */
	bool expect;               /* sends Expect: 100-continue (--expect-share) */
	bool awaiting_continue;    /* head written, body held until 100 Continue or the timer */
	size_t body_sent;          /* body bytes written for the request in flight */
	enum conn_state conn;
	enum batch_state batch;
	uint32_t backlog;          /* windows sealed while the previous batch was undelivered */
	uint32_t attempts;         /* of the current batch */
	uint32_t failures;         /* consecutive failed attempts (the agent's backoff counter) */
	int64_t retry_after_s;     /* the response's Retry-After, -1 none */
	bool header_retry_after;   /* parsing: the current header is Retry-After */
	uint64_t request_id;       /* increases with every request sent */
	uint64_t sequence;         /* of the current batch */
	uint64_t window_end_ns;
	uint64_t sealed_ns;        /* when the current batch's window was sealed */
	int build_rc;
	struct byte_buf body;      /* the current batch, compressed */
	char header[640];
	size_t header_len;
	uint64_t sent_ns;
	http_parser parser;
	bool response_complete;
	char response_body[RESPONSE_BODY_KEEP + 1];
	size_t response_len;
};

struct sample {
	double t;            /* seconds since the load started */
	uint64_t rss;        /* bytes */
	uint64_t cpu_ticks;  /* utime + stime */
	uint64_t db_bytes;
};

static struct {
	uv_loop_t *loop;
	struct agent *agents;
	struct sockaddr_in server_addr;
	char host_header[64];
	char token[512];
	pid_t server_pid;      /* 0: none known */
	bool server_ours;      /* started by us */
	int server_status;     /* waitpid status once it exited */
	bool server_exited;
	double server_exit_t;
	char tmp_dir[64];
	char data_dir[4096];
	char server_log[4200];

	uint64_t start_ns, end_ns;
	bool stopping, shut;
	uint64_t stop_deadline_ns;
	uv_timer_t sampler, stopper, reporter;
	uv_signal_t sigint, sigterm;
	bool interrupted;
	uint64_t rng;
	struct retry_clock retry_clock; /* the agent's backoff with full jitter */

	/* results */
	uint64_t generated, requests, stored, duplicate, unsent_at_end;
	uint64_t status_count[STATUS_SLOTS];
	uint64_t failures[FAIL_KINDS];
	uint64_t connects, idle_closes, server_closes, late_windows;
	char error_examples[ERROR_EXAMPLES][160]; /* the first answer of each error status */
	unsigned error_example_status[ERROR_EXAMPLES];
	uint32_t nerror_examples;
	uint64_t build_ns_total, builds;
	uint64_t sent_bytes;           /* bodies of the requests sent */
	/* Per kind of agent ([0] without Expect, [1] with): requests; refusals (answers other
	 * than 2xx); of those, refusals that came before the body was written; body bytes
	 * written for refused requests; 100 Continue answers; waits for 100 that timed out. */
	uint64_t k_agents[2], k_requests[2], k_refused[2], k_refused_unsent[2];
	uint64_t k_refused_bytes[2], k_stored[2], k_continues[2], k_continue_timeouts[2];
	/* The server's counters at the end (/metrics): -1 unknown. */
	int64_t srv_refused_body_bytes, srv_discarded_bytes, srv_refused_before_body;
	double *build_wait_ms;         /* per batch: window sealed -> ready to send */
	double *build_wait_t;          /* ... and when it was built */
	size_t nbuild_wait, build_wait_cap;
	double *lat_ms, *lat_t;        /* per response: latency and when it arrived */
	size_t nlat, lat_cap;
	size_t report_lat_from;        /* responses before the last progress line */
	uint64_t report_stored;
	struct sample *samples;
	size_t nsamples, sample_cap;
	uint64_t db_start;
	uint32_t connected, in_flight;
} L;

static uint64_t rng_next(void)
{
	L.rng ^= L.rng << 13;
	L.rng ^= L.rng >> 7;
	L.rng ^= L.rng << 17;
	return L.rng;
}

static double rng_unit(void)
{
	return (double)(rng_next() >> 11) / 9007199254740992.0;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double since_start_s(void)
{
	return (double)(bench_now_ns() - L.start_ns) / 1e9;
}

static uint64_t ms_of(double seconds)
{
	return seconds <= 0 ? 0 : (uint64_t)(seconds * 1000.0 + 0.5);
}

static void count_failure(enum failure f)
{
	L.failures[f]++;
}

static void on_tcp_closed(uv_handle_t *h);
static void body_send(struct agent *a);
static void response_parser_reset(struct agent *a);
static void agent_kick(struct agent *a);
static void build_start(struct agent *a);

static void conn_close(struct agent *a)
{
	if (a->conn == CONN_OPEN || a->conn == CONN_CONNECTING) {
		if (a->conn == CONN_OPEN)
			L.connected--;
		a->conn = CONN_CLOSING;
		uv_close((uv_handle_t *)&a->tcp, on_tcp_closed);
	}
}

static void batch_done(struct agent *a)
{
	byte_buf_free(&a->body);
	a->batch = BATCH_NONE;
	a->attempts = 0;
	if (a->backlog && !L.stopping) {
		a->backlog--;
		build_start(a);
	}
}

static void on_request_timer(uv_timer_t *t);

/* The agent's uploader: after a failure the same batch is retried after full-jitter
 * exponential backoff (1 s doubling up to --backoff-max), or the server's Retry-After. */
static void retry_later(struct agent *a, int64_t retry_after_s)
{
	uint64_t delay_ns;

	if (L.stopping) {
		L.unsent_at_end++;
		batch_done(a);
		return;
	}
	a->failures++;
	delay_ns = retry_backoff_ns(&L.retry_clock,
				    (uint64_t)(UPLOADER_DEFAULT_BACKOFF_INITIAL_S * 1e9),
				    (uint64_t)(opt.backoff_max * 1e9), a->failures, retry_after_s);
	a->batch = BATCH_BACKOFF;
	uv_timer_start(&a->request_timer, on_request_timer, delay_ns / 1000000 + 1, 0);
}

static void request_failed(struct agent *a, enum failure f)
{
	if (a->batch == BATCH_IN_FLIGHT)
		L.in_flight--;
	uv_timer_stop(&a->request_timer);
	uv_timer_stop(&a->continue_timer);
	a->awaiting_continue = false;
	count_failure(f);
	conn_close(a);
	retry_later(a, -1);
}

/* ---- response handling ---- */

static int on_response_header_field(http_parser *p, const char *at, size_t len)
{
	struct agent *a = p->data;

	a->header_retry_after = len == 11 && strncasecmp(at, "Retry-After", 11) == 0;
	return 0;
}

static int on_response_header_value(http_parser *p, const char *at, size_t len)
{
	struct agent *a = p->data;
	int64_t v = 0;

	if (!a->header_retry_after)
		return 0;
	for (size_t i = 0; i < len && at[i] >= '0' && at[i] <= '9' && v < 86400; i++)
		v = v * 10 + (at[i] - '0');
	a->retry_after_s = len && at[0] >= '0' && at[0] <= '9' ? v : -1;
	return 0;
}

static int on_response_body(http_parser *p, const char *at, size_t len)
{
	struct agent *a = p->data;
	size_t room = RESPONSE_BODY_KEEP - a->response_len;

	if (len > room)
		len = room;
	memcpy(a->response_body + a->response_len, at, len);
	a->response_len += len;
	return 0;
}

static int on_response_complete(http_parser *p)
{
	struct agent *a = p->data;

	a->response_complete = true;
	http_parser_pause(p, 1); /* one response per request */
	return 0;
}

static const http_parser_settings response_settings = {
	.on_header_field = on_response_header_field,
	.on_header_value = on_response_header_value,
	.on_body = on_response_body,
	.on_message_complete = on_response_complete,
};

static void latency_record(double ms)
{
	if (L.nlat == L.lat_cap) {
		size_t cap = L.lat_cap ? 2 * L.lat_cap : 65536;
		double *l = realloc(L.lat_ms, cap * sizeof(*l));
		double *t = l ? realloc(L.lat_t, cap * sizeof(*t)) : NULL;
		if (l)
			L.lat_ms = l;
		if (!l || !t)
			return; /* lost sample; the counts still hold */
		L.lat_t = t;
		L.lat_cap = cap;
	}
	L.lat_ms[L.nlat] = ms;
	L.lat_t[L.nlat] = since_start_s();
	L.nlat++;
}

/* "stored" or "duplicate" from a 200 answer's JSON body; NULL when neither. */
static const char *ingest_status(const struct agent *a)
{
	json_t *doc = json_loadb(a->response_body, a->response_len, 0, NULL);
	const char *s = doc ? json_string_value(json_object_get(doc, "status")) : NULL;
	const char *out = NULL;

	if (s && strcmp(s, "stored") == 0)
		out = "stored";
	else if (s && strcmp(s, "duplicate") == 0)
		out = "duplicate";
	json_decref(doc);
	return out;
}

/* Keeps the first answer of each error status, for the report. */
static void error_example(const struct agent *a, unsigned status)
{
	char body[128];

	for (uint32_t i = 0; i < L.nerror_examples; i++)
		if (L.error_example_status[i] == status)
			return;
	if (L.nerror_examples == ERROR_EXAMPLES)
		return;
	sysom_text_sanitize(body, sizeof(body), a->response_body, a->response_len);
	L.error_example_status[L.nerror_examples] = status;
	snprintf(L.error_examples[L.nerror_examples++], sizeof(L.error_examples[0]), "%u %s",
		 status, body);
}

static void response_done(struct agent *a)
{
	unsigned status = a->parser.status_code;
	bool keep_alive = http_should_keep_alive(&a->parser);
	const char *what;

	uv_timer_stop(&a->request_timer);
	uv_timer_stop(&a->continue_timer);
	L.in_flight--;
	if (status < 200 || status >= 300) {
		L.k_refused[a->expect]++;
		L.k_refused_unsent[a->expect] += a->awaiting_continue;
		L.k_refused_bytes[a->expect] += a->body_sent;
	} else {
		L.k_stored[a->expect]++;
	}
	/* A refusal instead of the 100: the body was never sent, the connection cannot carry
	 * another request unless the server said so; the sysom server closes it anyway. */
	if (a->awaiting_continue)
		keep_alive = false;
	a->awaiting_continue = false;
	/* Latency of the answers that took the batch; refusals (503 when the server is at its
	 * limit of requests in progress) are quick and would hide how slow ingest is. */
	if (status >= 200 && status < 300)
		latency_record((double)(bench_now_ns() - a->sent_ns) / 1e6);
	L.status_count[status < STATUS_SLOTS ? status : 0]++;
	if (!keep_alive) {
		L.server_closes++;
		conn_close(a);
	}
	if (status >= 200 && status < 300) {
		what = ingest_status(a);
		if (what && strcmp(what, "duplicate") == 0)
			L.duplicate++;
		else if (what)
			L.stored++;
		else
			count_failure(FAIL_PROTOCOL);
		a->failures = 0;
		batch_done(a);
	} else if (status < 200 || (status >= 300 && status < 400) || status == 401 ||
		   status == 403 || status == 408 || status == 429 || status >= 500) {
		/* What the agent retries (agent/ship/uploader.c, is_retryable). */
		error_example(a, status);
		retry_later(a, a->retry_after_s);
	} else {
		error_example(a, status);
		batch_done(a); /* the agent sets a refused batch aside */
	}
	agent_kick(a);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	static char chunk[65536]; /* consumed in on_read before the next read: one buffer serves all */

	(void)h;
	(void)suggested;
	*buf = uv_buf_init(chunk, sizeof(chunk));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct agent *a = s->data;
	size_t used;

	if (nread == 0)
		return;
	if (nread < 0) {
		if (a->batch == BATCH_IN_FLIGHT) {
			request_failed(a, FAIL_CLOSED);
		} else {
			L.idle_closes++;
			conn_close(a);
		}
		return;
	}
	if (a->batch != BATCH_IN_FLIGHT || a->response_complete) {
		count_failure(FAIL_PROTOCOL); /* bytes nobody asked for */
		conn_close(a);
		return;
	}
	used = http_parser_execute(&a->parser, &response_settings, buf->base, (size_t)nread);
	if (a->response_complete && a->parser.status_code == 100) {
		/* The interim answer: the body goes now; the final answer follows. */
		if (!a->awaiting_continue) {
			request_failed(a, FAIL_PROTOCOL);
			return;
		}
		L.k_continues[a->expect]++;
		uv_timer_stop(&a->continue_timer);
		body_send(a);
		if (a->batch != BATCH_IN_FLIGHT)
			return;
		response_parser_reset(a);
		if (used < (size_t)nread) {
			size_t more = http_parser_execute(&a->parser, &response_settings,
							  buf->base + used, (size_t)nread - used);
			used += more;
		}
	}
	if (a->response_complete) {
		response_done(a);
		return;
	}
	if (HTTP_PARSER_ERRNO(&a->parser) != HPE_OK || used != (size_t)nread)
		request_failed(a, FAIL_PROTOCOL);
}

/* One request on the wire: its own copy of header and body, so that a response that arrives
 * before the write completes (or a retry) never touches bytes libuv is still sending. */
struct outgoing {
	uv_write_t req;
	struct agent *agent;
	uint64_t request_id;
	size_t len;
	char data[];
};

static void on_written(uv_write_t *w, int status)
{
	struct outgoing *o = w->data;
	struct agent *a = o->agent;

	if (status < 0 && a->batch == BATCH_IN_FLIGHT && a->request_id == o->request_id &&
	    !a->response_complete && a->conn == CONN_OPEN)
		request_failed(a, FAIL_CLOSED);
	free(o);
}

/* Writes `len` bytes as one request piece; false when the write could not be queued. */
static bool piece_write(struct agent *a, const void *p1, size_t n1, const void *p2, size_t n2)
{
	struct outgoing *o = malloc(sizeof(*o) + n1 + n2);
	uv_buf_t buf;

	if (!o) {
		request_failed(a, FAIL_BUILD);
		return false;
	}
	o->agent = a;
	o->request_id = a->request_id;
	o->len = n1 + n2;
	memcpy(o->data, p1, n1);
	if (n2)
		memcpy(o->data + n1, p2, n2);
	o->req.data = o;
	buf = uv_buf_init(o->data, (unsigned)o->len);
	if (uv_write(&o->req, (uv_stream_t *)&a->tcp, &buf, 1, on_written) < 0) {
		free(o);
		request_failed(a, FAIL_CLOSED);
		return false;
	}
	return true;
}

static void response_parser_reset(struct agent *a)
{
	http_parser_init(&a->parser, HTTP_RESPONSE);
	a->parser.data = a;
	a->response_complete = false;
	a->response_len = 0;
	a->retry_after_s = -1;
	a->header_retry_after = false;
}

/* The body of a request whose head went with Expect: after the 100, or the wait timed out. */
static void body_send(struct agent *a)
{
	a->awaiting_continue = false;
	if (piece_write(a, a->body.data, a->body.len, NULL, 0))
		a->body_sent = a->body.len;
}

static void on_continue_timer(uv_timer_t *t)
{
	struct agent *a = t->data;

	if (a->batch != BATCH_IN_FLIGHT || !a->awaiting_continue)
		return;
	L.k_continue_timeouts[a->expect]++;
	body_send(a); /* RFC 9110 §10.1.1: do not wait for ever (curl: 1 s, as the agent) */
}

static void request_send(struct agent *a)
{
	bool expect = a->expect && a->body.len >= HTTP_CLIENT_EXPECT_MIN_BYTES;

	a->attempts++;
	a->batch = BATCH_IN_FLIGHT;
	L.in_flight++;
	L.requests++;
	L.k_requests[a->expect]++;
	L.sent_bytes += a->body.len;
	++a->request_id;
	response_parser_reset(a);
	a->sent_ns = bench_now_ns();
	a->body_sent = 0;
	a->awaiting_continue = expect;
	if (!piece_write(a, a->header, a->header_len, expect ? NULL : a->body.data,
			 expect ? 0 : a->body.len))
		return;
	if (expect)
		uv_timer_start(&a->continue_timer, on_continue_timer,
			       HTTP_CLIENT_EXPECT_TIMEOUT_MS, 0);
	else
		a->body_sent = a->body.len;
	uv_timer_start(&a->request_timer, on_request_timer, ms_of(opt.timeout), 0);
}

static void on_request_timer(uv_timer_t *t)
{
	struct agent *a = t->data;

	if (a->batch == BATCH_IN_FLIGHT) {
		request_failed(a, FAIL_TIMEOUT);
	} else if (a->batch == BATCH_BACKOFF) {
		a->batch = BATCH_READY;
		agent_kick(a);
	}
}

/* ---- connections ---- */

static void on_tcp_closed(uv_handle_t *h)
{
	struct agent *a = h->data;

	a->conn = CONN_NONE;
	if (!L.shut)
		agent_kick(a);
}

static void on_connected(uv_connect_t *req, int status)
{
	struct agent *a = req->data;

	if (a->conn != CONN_CONNECTING)
		return; /* closed meanwhile */
	if (status < 0) {
		count_failure(FAIL_CONNECT);
		a->conn = CONN_CLOSING;
		uv_close((uv_handle_t *)&a->tcp, on_tcp_closed);
		if (a->batch == BATCH_READY)
			retry_later(a, -1);
		return;
	}
	a->conn = CONN_OPEN;
	L.connected++;
	L.connects++;
	uv_tcp_nodelay(&a->tcp, 1);
	uv_read_start((uv_stream_t *)&a->tcp, on_alloc, on_read);
	agent_kick(a);
}

static void conn_open(struct agent *a)
{
	int rc;

	uv_tcp_init(L.loop, &a->tcp);
	a->tcp.data = a;
	a->connect_req.data = a;
	a->conn = CONN_CONNECTING;
	if (opt.bind_sources &&
	    (rc = uv_tcp_bind(&a->tcp, (const struct sockaddr *)&a->source, 0)) < 0) {
		fprintf(stderr, "ingest_load: cannot bind %s's source address: %s\n", a->hostname,
			uv_strerror(rc));
		on_connected(&a->connect_req, rc);
		return;
	}
	rc = uv_tcp_connect(&a->connect_req, &a->tcp, (const struct sockaddr *)&L.server_addr,
			    on_connected);
	if (rc < 0)
		on_connected(&a->connect_req, rc);
}

/* Moves the agent forward: a ready batch goes out on an open connection, or opens one. After
 * the end, batches already sealed still go out (as the agent flushes at shutdown) until the
 * grace period is over. */
static void agent_kick(struct agent *a)
{
	if (a->batch != BATCH_READY || L.shut)
		return;
	if (a->conn == CONN_OPEN)
		request_send(a);
	else if (a->conn == CONN_NONE)
		conn_open(a);
}

/* ---- building batches (threadpool) ---- */

static void build_run(uv_work_t *w)
{
	struct agent *a = w->data;
	struct template *t = &templates[(a->index + a->sequence) % ntemplates];
	struct batch_stamp_identity id = {
		.hostname = a->hostname,
		.epoch = a->epoch,
		.sequence = a->sequence,
		.window_end_ns = a->window_end_ns,
		.key_salt = a->key_salt,
		.seq_offset = (a->sequence - 1) * seq_span,
	};
	struct byte_buf plain = { 0 };
	uint64_t t0 = bench_now_ns();

	memcpy(id.node_id, a->node_id, sizeof(id.node_id));
	pthread_mutex_lock(&t->lock);
	a->build_rc = batch_stamp_encode(t->stamp, &id, &plain);
	pthread_mutex_unlock(&t->lock);
	if (a->build_rc == 0)
		a->build_rc = sysom_zstd_compress(plain.data, plain.len, (int)opt.zstd_level, &a->body);
	byte_buf_free(&plain);
	__atomic_add_fetch(&L.build_ns_total, bench_now_ns() - t0, __ATOMIC_RELAXED);
}

/* How long a sealed window waited for its batch to be built: when the threadpool cannot keep
 * up the bench, not the server, sets the pace, and the report says so. */
static void build_wait_record(double ms)
{
	if (L.nbuild_wait == L.build_wait_cap) {
		size_t cap = L.build_wait_cap ? 2 * L.build_wait_cap : 65536;
		double *p = realloc(L.build_wait_ms, cap * sizeof(*p));
		double *t = p ? realloc(L.build_wait_t, cap * sizeof(*t)) : NULL;
		if (p)
			L.build_wait_ms = p;
		if (!p || !t)
			return;
		L.build_wait_t = t;
		L.build_wait_cap = cap;
	}
	L.build_wait_ms[L.nbuild_wait] = ms;
	L.build_wait_t[L.nbuild_wait++] = since_start_s();
}

static void build_done(uv_work_t *w, int status)
{
	struct agent *a = w->data;
	int n;

	L.builds++;
	build_wait_record((double)(bench_now_ns() - a->sealed_ns) / 1e6);
	if (status < 0 || a->build_rc) {
		count_failure(FAIL_BUILD);
		batch_done(a);
		return;
	}
	n = snprintf(a->header, sizeof(a->header),
		     "POST /api/v1/ingest HTTP/1.1\r\n"
		     "Host: %s\r\n"
		     "User-Agent: sysom-ingest-load\r\n"
		     "%s%s%s"
		     "Content-Type: application/vnd.sysom.batch\r\n"
		     "Content-Encoding: zstd\r\n"
		     "Idempotency-Key: %s:%016" PRIx64 ":%" PRIu64 "\r\n"
		     "%s"
		     "Content-Length: %zu\r\n\r\n",
		     L.host_header, L.token[0] ? "Authorization: Bearer " : "", L.token,
		     L.token[0] ? "\r\n" : "", a->node_hex, a->epoch, a->sequence,
		     a->expect && a->body.len >= HTTP_CLIENT_EXPECT_MIN_BYTES
			     ? "Expect: 100-continue\r\n"
			     : "",
		     a->body.len);
	if (n < 0 || (size_t)n >= sizeof(a->header)) {
		count_failure(FAIL_BUILD);
		batch_done(a);
		return;
	}
	a->header_len = (size_t)n;
	if (L.shut) { /* built after the grace period */
		L.unsent_at_end++;
		batch_done(a);
		return;
	}
	a->batch = BATCH_READY;
	agent_kick(a);
}

static void build_start(struct agent *a)
{
	a->batch = BATCH_BUILDING;
	a->sequence = a->next_sequence++;
	a->window_end_ns = realtime_ns();
	a->sealed_ns = bench_now_ns();
	a->work.data = a;
	L.generated++;
	if (uv_queue_work(L.loop, &a->work, build_run, build_done) < 0) {
		count_failure(FAIL_BUILD);
		batch_done(a);
	}
}

/* Seals a window: a batch when the previous one is delivered, else one more in the backlog. */
static void on_cadence(uv_timer_t *t)
{
	struct agent *a = t->data;
	double gap = opt.interval * (1.0 + opt.jitter * (2.0 * rng_unit() - 1.0));

	if (L.stopping)
		return;
	uv_timer_start(&a->cadence, on_cadence, ms_of(gap) ? ms_of(gap) : 1, 0);
	if (a->batch != BATCH_NONE) {
		a->backlog++;
		L.late_windows++;
		return;
	}
	build_start(a);
}

static void agent_init(struct agent *a, uint32_t index)
{
	uint64_t r[2];

	a->index = index;
	snprintf(a->hostname, sizeof(a->hostname), "load-%05u", index);
	/* A stable node id per index ("sysom-load" + index), so repeated runs against one server
	 * reuse the same nodes; a new random epoch per run, as a fresh agent state would have. */
	memcpy(a->node_id, "sysom-load\0\0", 12);
	a->node_id[12] = (uint8_t)(index >> 24);
	a->node_id[13] = (uint8_t)(index >> 16);
	a->node_id[14] = (uint8_t)(index >> 8);
	a->node_id[15] = (uint8_t)index;
	sysom_hex_encode(a->node_id, sizeof(a->node_id), a->node_hex, sizeof(a->node_hex));
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
		r[0] = rng_next();
		r[1] = rng_next();
	}
	a->epoch = r[0] ? r[0] : 1;
	a->key_salt = sysom_hash_mix(r[1], index) | 1;
	a->next_sequence = 1;
	/* 127.B.C.D over the whole /8: B = 1..254 first, so neighbours differ in their /16. */
	a->source.sin_family = AF_INET;
	a->source.sin_port = 0;
	a->source.sin_addr.s_addr = htonl(127u << 24 | (1 + index % 254) << 16 |
					  ((index / 254) % 256) << 8 | (1 + (index / 65024) % 254));
	uv_timer_init(L.loop, &a->cadence);
	uv_timer_init(L.loop, &a->request_timer);
	uv_timer_init(L.loop, &a->continue_timer);
	a->cadence.data = a->request_timer.data = a->continue_timer.data = a;
	/* Spread evenly: agent i expects when floor((i + 1) x share) > floor(i x share). */
	a->expect = floor((index + 1) * opt.expect_share) > floor(index * opt.expect_share);
	L.k_agents[a->expect]++;
	/* Fleet agents started at different times: the first window ends anywhere in the first
	 * interval. */
	uv_timer_start(&a->cadence, on_cadence, ms_of(opt.interval * rng_unit()) + 1, 0);
}

/* ---- the server's resources ------------------------------------------------------------- */

static uint64_t proc_rss(pid_t pid)
{
	char path[64], line[256];
	uint64_t kb = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "re")))
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %" SCNu64 " kB", &kb) == 1)
			break;
	fclose(f);
	return kb * 1024;
}

static uint64_t proc_cpu_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long utime = 0, stime = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* After "(comm)": state is field 3; utime and stime are fields 14 and 15. */
	if (!(p = strrchr(buf, ')')) ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
		return 0;
	return utime + stime;
}

/* Bytes of the regular files directly in the data directory (the database and its WAL). */
static uint64_t dir_bytes(const char *dir)
{
	char path[4600];
	uint64_t total = 0;
	struct dirent *e;
	DIR *d;

	if (!dir[0] || !(d = opendir(dir)))
		return 0;
	while ((e = readdir(d))) {
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
			total += (uint64_t)st.st_size;
	}
	closedir(d);
	return total;
}

static void server_check_exit(void)
{
	int status;

	if (L.server_exited || !L.server_pid)
		return;
	if (!L.server_ours) { /* --server-pid: gone when the pid is */
		if (kill(L.server_pid, 0) && errno == ESRCH) {
			L.server_exited = true;
			L.server_exit_t = since_start_s();
		}
		return;
	}
	if (waitpid(L.server_pid, &status, WNOHANG) == L.server_pid) {
		L.server_exited = true;
		L.server_status = status;
		L.server_exit_t = since_start_s();
	}
}

static void sample_take(void)
{
	struct sample s = { .t = since_start_s() };

	server_check_exit();
	if (L.server_pid && !L.server_exited) {
		s.rss = proc_rss(L.server_pid);
		s.cpu_ticks = proc_cpu_ticks(L.server_pid);
	}
	s.db_bytes = dir_bytes(L.data_dir);
	if (L.nsamples == L.sample_cap) {
		size_t cap = L.sample_cap ? 2 * L.sample_cap : 1024;
		struct sample *p = realloc(L.samples, cap * sizeof(*p));
		if (!p)
			return;
		L.samples = p;
		L.sample_cap = cap;
	}
	L.samples[L.nsamples++] = s;
}

/* ---- run control ------------------------------------------------------------------------ */

static void close_cb_nop(uv_handle_t *h)
{
	(void)h;
}

/* Closes every handle: uv_run returns once they are closed. */
static void shut_down(void)
{
	if (L.shut)
		return;
	L.shut = true;
	for (uint32_t i = 0; i < opt.agents; i++) {
		struct agent *a = &L.agents[i];
		if (a->conn == CONN_OPEN || a->conn == CONN_CONNECTING) {
			if (a->conn == CONN_OPEN)
				L.connected--;
			a->conn = CONN_CLOSING;
			uv_close((uv_handle_t *)&a->tcp, on_tcp_closed);
		}
		if (a->batch == BATCH_IN_FLIGHT)
			L.in_flight--;
		if (a->batch == BATCH_IN_FLIGHT || a->batch == BATCH_READY ||
		    a->batch == BATCH_BACKOFF) {
			L.unsent_at_end++;
			a->batch = BATCH_NONE;
		}
		byte_buf_free(&a->body);
		uv_close((uv_handle_t *)&a->cadence, close_cb_nop);
		uv_close((uv_handle_t *)&a->request_timer, close_cb_nop);
		uv_close((uv_handle_t *)&a->continue_timer, close_cb_nop);
	}
	uv_close((uv_handle_t *)&L.sampler, close_cb_nop);
	uv_close((uv_handle_t *)&L.stopper, close_cb_nop);
	uv_close((uv_handle_t *)&L.reporter, close_cb_nop);
	uv_close((uv_handle_t *)&L.sigint, close_cb_nop);
	uv_close((uv_handle_t *)&L.sigterm, close_cb_nop);
}

static bool agents_busy(void)
{
	for (uint32_t i = 0; i < opt.agents; i++)
		if (L.agents[i].batch == BATCH_IN_FLIGHT || L.agents[i].batch == BATCH_BUILDING ||
		    L.agents[i].batch == BATCH_READY)
			return true;
	return false;
}

/* Every 100 ms after the end: shuts down once no request is in flight (or the grace is over). */
static void on_stopper(uv_timer_t *t)
{
	(void)t;
	if (!agents_busy() || bench_now_ns() >= L.stop_deadline_ns)
		shut_down();
}

static void run_stop(void)
{
	if (L.stopping)
		return;
	L.stopping = true;
	L.end_ns = bench_now_ns();
	sample_take();
	for (uint32_t i = 0; i < opt.agents; i++) {
		struct agent *a = &L.agents[i];
		uv_timer_stop(&a->cadence);
		L.unsent_at_end += a->backlog;
		a->backlog = 0;
		if (a->batch == BATCH_BACKOFF) { /* the server was failing: no more retries */
			uv_timer_stop(&a->request_timer);
			L.unsent_at_end++;
			batch_done(a);
		}
	}
	L.stop_deadline_ns = bench_now_ns() + (uint64_t)(fmax(STOP_GRACE_S, 0) * 1e9);
	uv_timer_start(&L.stopper, on_stopper, 0, 100);
}

static double percentile(const double *sorted, size_t n, double p)
{
	size_t i;

	if (n == 0)
		return NAN;
	i = (size_t)ceil(p * (double)n);
	return sorted[i ? i - 1 : 0];
}

static void on_reporter(uv_timer_t *t)
{
	double now = since_start_s(), p99 = NAN;
	size_t n = L.nlat - L.report_lat_from;
	double *recent = n ? malloc(n * sizeof(*recent)) : NULL;
	const struct sample *s = L.nsamples ? &L.samples[L.nsamples - 1] : NULL;
	uint64_t errors = 0;

	(void)t;
	if (recent) {
		memcpy(recent, L.lat_ms + L.report_lat_from, n * sizeof(*recent));
		qsort(recent, n, sizeof(*recent), bench_dbl_cmp);
		p99 = percentile(recent, n, 0.99);
		free(recent);
	}
	for (int i = 0; i < FAIL_KINDS; i++)
		errors += L.failures[i];
	for (int i = 0; i < STATUS_SLOTS; i++)
		if (i < 200 || i >= 300)
			errors += L.status_count[i];
	printf("  t=%4.0fs  stored %" PRIu64 " (%.1f/s)  dup %" PRIu64 "  errors %" PRIu64
	       "  connected %u  in flight %u  p99 %.1f ms  server RSS %.1f MiB\n",
	       now, L.stored, (double)(L.stored - L.report_stored) / opt.report_every, L.duplicate,
	       errors, L.connected, L.in_flight, p99, s ? (double)s->rss / MIB : 0.0);
	fflush(stdout);
	L.report_lat_from = L.nlat;
	L.report_stored = L.stored;
}

static void on_sampler(uv_timer_t *t)
{
	(void)t;
	sample_take();
	if (L.server_exited) {
		if (!L.stopping)
			fprintf(stderr, "ingest_load: the server exited at t=%.1fs: stopping\n",
				L.server_exit_t);
		run_stop();
		return;
	}
	if (!L.stopping && bench_now_ns() - L.start_ns >= (uint64_t)(opt.seconds * 1e9))
		run_stop();
}

static void on_signal(uv_signal_t *s, int signum)
{
	(void)s;
	fprintf(stderr, "ingest_load: signal %d: stopping\n", signum);
	L.interrupted = true;
	run_stop();
}

/* ---- server process --------------------------------------------------------------------- */

static int raise_nofile(rlim_t need)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return -errno;
	if (rl.rlim_cur >= need)
		return 0;
	if (rl.rlim_max < need)
		rl.rlim_max = need; /* root may raise the hard limit */
	rl.rlim_cur = need;
	if (setrlimit(RLIMIT_NOFILE, &rl)) {
		getrlimit(RLIMIT_NOFILE, &rl);
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		return -EMFILE;
	}
	return 0;
}

static int token_setup(void)
{
	uint8_t raw[16];
	char path[128];
	FILE *f;

	if (opt.token_file) {
		if (!(f = fopen(opt.token_file, "re")) || !fgets(L.token, sizeof(L.token), f)) {
			fprintf(stderr, "ingest_load: cannot read --token-file %s\n", opt.token_file);
			if (f)
				fclose(f);
			return -1;
		}
		fclose(f);
		L.token[strcspn(L.token, "\r\n")] = '\0';
		return 0;
	}
	if (opt.url)
		return 0; /* an open server */
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return -1;
	sysom_hex_encode(raw, sizeof(raw), L.token, sizeof(L.token));
	snprintf(path, sizeof(path), "%s/token", L.tmp_dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || dprintf(fd, "%s\n", L.token) < 0 || close(fd)) {
		fprintf(stderr, "ingest_load: cannot write %s\n", path);
		return -1;
	}
	return 0;
}

static void default_server_bin(char *out, size_t len)
{
	char self[2048];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	if (n <= 0) {
		snprintf(out, len, "sysom-server");
		return;
	}
	self[n] = '\0';
	if ((slash = strrchr(self, '/')))
		*slash = '\0'; /* .../build/bench */
	if ((slash = strrchr(self, '/')))
		*slash = '\0'; /* .../build */
	snprintf(out, len, "%s/sysom-server", self);
}

/* Starts the server on an ephemeral loopback port; fills L.server_addr. 0 or -1. */
static int server_start(void)
{
	char bin[4096], port_file[128], token_path[128], maxconn[24], *args_copy = NULL;
	char *argv[64];
	int argc = 0, rc = -1;
	posix_spawn_file_actions_t fa;

	if (opt.server_bin)
		snprintf(bin, sizeof(bin), "%s", opt.server_bin);
	else
		default_server_bin(bin, sizeof(bin));
	snprintf(port_file, sizeof(port_file), "%s/port", L.tmp_dir);
	snprintf(token_path, sizeof(token_path), "%s/token", L.tmp_dir);
	snprintf(maxconn, sizeof(maxconn), "%u", opt.agents + 64);
	snprintf(L.server_log, sizeof(L.server_log), "%s/server.log", L.tmp_dir);
	argv[argc++] = bin;
	argv[argc++] = "--listen";
	argv[argc++] = "127.0.0.1:0";
	argv[argc++] = "--data-dir";
	argv[argc++] = L.data_dir;
	argv[argc++] = "--port-file";
	argv[argc++] = port_file;
	argv[argc++] = "--max-connections";
	argv[argc++] = maxconn;
	argv[argc++] = "--log-level";
	argv[argc++] = "warn";
	if (L.token[0]) {
		argv[argc++] = "--token-file";
		argv[argc++] = opt.token_file ? opt.token_file : token_path;
	}
	if (opt.server_args) {
		if (!(args_copy = strdup(opt.server_args)))
			return -1;
		for (char *save = NULL, *w = strtok_r(args_copy, " \t", &save); w;
		     w = strtok_r(NULL, " \t", &save)) {
			if (argc >= (int)(sizeof(argv) / sizeof(argv[0])) - 1) {
				fprintf(stderr, "ingest_load: too many --server-args\n");
				goto cleanup;
			}
			argv[argc++] = w;
		}
	}
	argv[argc] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, L.server_log,
					 O_WRONLY | O_CREAT | O_APPEND, 0600);
	posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
	rc = posix_spawn(&L.server_pid, bin, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc) {
		fprintf(stderr, "ingest_load: cannot start %s: %s\n", bin, strerror(rc));
		rc = -1;
		goto cleanup;
	}
	L.server_ours = true;
	rc = -1;
	for (int i = 0; i < 600; i++) { /* 60 s */
		FILE *f = fopen(port_file, "re");
		unsigned port = 0;
		if (f) {
			int got = fscanf(f, "%u", &port);
			fclose(f);
			if (got == 1 && port > 0 && port < 65536) {
				L.server_addr.sin_family = AF_INET;
				L.server_addr.sin_port = htons((uint16_t)port);
				L.server_addr.sin_addr.s_addr = htonl(0x7f000001);
				snprintf(L.host_header, sizeof(L.host_header), "127.0.0.1:%u", port);
				rc = 0;
				break;
			}
		}
		server_check_exit();
		if (L.server_exited)
			break;
		usleep(100000);
	}
	if (rc)
		fprintf(stderr, "ingest_load: the server did not start (log: %s)\n", L.server_log);
cleanup:
	free(args_copy);
	return rc;
}

/* SIGTERM, then waits (sanitizer builds check for leaks at exit: that takes a while). */
/* Reads the value of metric `name` (no labels) from /metrics text; -1 when absent. */
static int64_t metric_value(const char *text, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, name, n) == 0 && p[n] == ' ')
			return (int64_t)strtod(p + n + 1, NULL);
	return -1;
}

/* The server's own counts of refused bodies, from /metrics (blocking; once, at the end). */
static void server_counters_read(void)
{
	static char buf[4 << 20];
	char req[700];
	size_t have = 0;
	struct timeval tv = { .tv_sec = 10 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	L.srv_refused_body_bytes = L.srv_discarded_bytes = L.srv_refused_before_body = -1;
	if (fd < 0)
		return;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	int n = snprintf(req, sizeof(req),
			 "GET /metrics HTTP/1.1\r\nHost: %s\r\n%s%s%sConnection: close\r\n\r\n",
			 L.host_header, L.token[0] ? "Authorization: Bearer " : "", L.token,
			 L.token[0] ? "\r\n" : "");
	if (connect(fd, (const struct sockaddr *)&L.server_addr, sizeof(L.server_addr)) < 0 ||
	    n < 0 || (size_t)n >= sizeof(req) || write(fd, req, (size_t)n) != n) {
		close(fd);
		return;
	}
	for (;;) {
		ssize_t r = read(fd, buf + have, sizeof(buf) - 1 - have);
		if (r <= 0)
			break;
		have += (size_t)r;
		if (have == sizeof(buf) - 1)
			break;
	}
	close(fd);
	buf[have] = '\0';
	L.srv_refused_body_bytes = metric_value(buf, "sysom_http_refused_body_bytes_total");
	L.srv_discarded_bytes = metric_value(buf, "sysom_http_discarded_bytes_total");
	L.srv_refused_before_body = metric_value(buf, "sysom_http_refused_before_body_total");
}

static void server_stop(void)
{
	if (!L.server_ours || L.server_exited)
		return;
	kill(L.server_pid, SIGTERM);
	for (int i = 0; i < 1200 && !L.server_exited; i++) { /* 120 s */
		server_check_exit();
		if (!L.server_exited)
			usleep(100000);
	}
	if (!L.server_exited) {
		fprintf(stderr, "ingest_load: the server did not exit in 120 s after SIGTERM: killed\n");
		kill(L.server_pid, SIGKILL);
		waitpid(L.server_pid, &L.server_status, 0);
		L.server_exited = true;
	}
}

static int url_parse(const char *url)
{
	unsigned a, b, c, d, port;
	char tail;

	if (sscanf(url, "http://%u.%u.%u.%u:%u%c", &a, &b, &c, &d, &port, &tail) < 5 ||
	    a > 255 || b > 255 || c > 255 || d > 255 || port == 0 || port > 65535) {
		fprintf(stderr, "ingest_load: --url wants http://IPv4:PORT, got %s\n", url);
		return -1;
	}
	L.server_addr.sin_family = AF_INET;
	L.server_addr.sin_port = htons((uint16_t)port);
	L.server_addr.sin_addr.s_addr = htonl(a << 24 | b << 16 | c << 8 | d);
	snprintf(L.host_header, sizeof(L.host_header), "%u.%u.%u.%u:%u", a, b, c, d, port);
	if (a != 127 && opt.bind_sources) {
		fprintf(stderr, "ingest_load: %s is not loopback: connections are not bound to"
				" 127.x.y.z sources (--bind-sources=false)\n", url);
		opt.bind_sources = false;
	}
	return 0;
}

/* ---- report ------------------------------------------------------------------------------ */

/* Prints the last `lines` lines of a file (the server's log when something failed). */
static void log_tail(const char *path, int lines)
{
	char buf[16384];
	FILE *f = fopen(path, "re");
	long size, from;
	size_t n;
	int seen = 0;

	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	from = size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0;
	fseek(f, from, SEEK_SET);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	for (size_t i = n; i > 0; i--) {
		if (buf[i - 1] == '\n' && i != n && ++seen == lines) {
			memmove(buf, buf + i, n - i + 1);
			break;
		}
	}
	printf("  server log (%s), last lines:\n%s", path, buf);
}

/* Least-squares slope of RSS (MiB) over time (minutes) for samples with t in [from, to]. */
static double rss_slope(double from, double to)
{
	double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;

	for (size_t i = 0; i < L.nsamples; i++) {
		const struct sample *s = &L.samples[i];
		if (s->t < from || s->t > to || !s->rss)
			continue;
		double x = s->t / 60.0, y = (double)s->rss / MIB;
		n++;
		sx += x;
		sy += y;
		sxx += x * x;
		sxy += x * y;
	}
	if (n < 3 || n * sxx - sx * sx <= 0)
		return NAN;
	return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

/* The first sample at or after `t` (the last one when none). */
static const struct sample *sample_at(double t)
{
	for (size_t i = 0; i < L.nsamples; i++)
		if (L.samples[i].t >= t)
			return &L.samples[i];
	return L.nsamples ? &L.samples[L.nsamples - 1] : NULL;
}

static int report(void)
{
	double run_s = (double)(L.end_ns - L.start_ns) / 1e9;
	double warm = opt.warmup > 0 ? opt.warmup : fmin(opt.interval, run_s / 2);
	double p50, p90, p99, pmax, slope, cpu_pct = NAN, bench_cpu_pct, build_p99;
	double *sorted = NULL;
	uint64_t http_errors = 0, other_errors = 0, rss_max = 0;
	const struct sample *first = L.nsamples ? &L.samples[0] : NULL;
	const struct sample *warm_s = sample_at(warm), *last = NULL;
	size_t captured = 0, plain = 0;
	struct rusage ru;
	bool flat, failed = false;
	char row[1024];
	const char *header = "| agents | seconds | interval s | batch KiB (zstd) | batches/s | stored |"
			     " duplicate | errors | p50 ms | p90 ms | p99 ms | max ms |"
			     " RSS MiB start / warm / end / max | RSS slope MiB/min | server CPU % |"
			     " DB growth MiB |";
	const char *rule = "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|";
	long hz = sysconf(_SC_CLK_TCK);

	/* The last sample taken up to the end of the load (run_stop takes one at the end). */
	for (size_t i = 0; i < L.nsamples; i++) {
		if (L.samples[i].t <= run_s + 0.5)
			last = &L.samples[i];
		if (L.samples[i].rss > rss_max)
			rss_max = L.samples[i].rss;
	}
	for (uint32_t i = 0; i < ntemplates; i++) {
		captured += templates[i].captured_bytes;
		plain += templates[i].plain_bytes;
	}
	if (L.nlat && (sorted = malloc(L.nlat * sizeof(*sorted)))) {
		memcpy(sorted, L.lat_ms, L.nlat * sizeof(*sorted));
		qsort(sorted, L.nlat, sizeof(*sorted), bench_dbl_cmp);
	}
	p50 = sorted ? percentile(sorted, L.nlat, 0.50) : NAN;
	p90 = sorted ? percentile(sorted, L.nlat, 0.90) : NAN;
	p99 = sorted ? percentile(sorted, L.nlat, 0.99) : NAN;
	pmax = sorted ? sorted[L.nlat - 1] : NAN;
	free(sorted);
	for (int i = 0; i < STATUS_SLOTS; i++)
		if (i < 200 || i >= 300)
			http_errors += L.status_count[i];
	for (int i = 0; i < FAIL_KINDS; i++)
		other_errors += L.failures[i];
	slope = rss_slope(run_s / 2, run_s);
	flat = !isnan(slope) && slope <= opt.max_rss_slope;
	if (L.server_pid && first && last && last->t > first->t && last->cpu_ticks && hz > 0)
		cpu_pct = 100.0 * (double)(last->cpu_ticks - first->cpu_ticks) / (double)hz /
			  (last->t - first->t);
	getrusage(RUSAGE_SELF, &ru);
	bench_cpu_pct = 100.0 * ((double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
				 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6) /
			run_s;

	printf("\nSummary (%u agents, %.0f s, interval %.0f s +- %.0f%%, %u captured batches of"
	       " %.0f KiB zstd / %.0f KiB plain on average):\n",
	       opt.agents, run_s, opt.interval, opt.jitter * 100, ntemplates,
	       (double)captured / ntemplates / 1024, (double)plain / ntemplates / 1024);
	printf("  batches: generated %" PRIu64 ", requests %" PRIu64 ", stored %" PRIu64
	       ", duplicate %" PRIu64 ", errors %" PRIu64 ", unsent at the end %" PRIu64
	       ", late windows %" PRIu64 "\n",
	       L.generated, L.requests, L.stored, L.duplicate, http_errors + other_errors,
	       L.unsent_at_end, L.late_windows);
	if (http_errors + other_errors) {
		printf("  errors by status:");
		for (int i = 0; i < STATUS_SLOTS; i++)
			if ((i < 200 || i >= 300) && L.status_count[i])
				printf(" %d x %" PRIu64, i, L.status_count[i]);
		for (int i = 0; i < FAIL_KINDS; i++)
			if (L.failures[i])
				printf(" [%s] x %" PRIu64, failure_names[i], L.failures[i]);
		printf("\n");
		for (uint32_t i = 0; i < L.nerror_examples; i++)
			printf("    e.g. %s\n", L.error_examples[i]);
	}
	printf("  rate: %.1f batches/s stored (%.1f MiB/s compressed)\n",
	       (double)L.stored / run_s,
	       (double)L.stored / run_s * (double)captured / ntemplates / MIB);
	printf("  ingest latency (request written -> 2xx response read, %zu responses): p50 %.1f ms,"
	       " p90 %.1f ms, p99 %.1f ms, max %.1f ms\n",
	       L.nlat, p50, p90, p99, pmax);
	printf("  connections: %" PRIu64 " opened (%u open at the end), %" PRIu64
	       " closed idle by the server, %" PRIu64 " closed after a response\n",
	       L.connects, L.connected, L.idle_closes, L.server_closes);
	if (L.server_pid) {
		printf("  server RSS: start %.1f MiB, after warm-up (%.0f s) %.1f MiB, end %.1f MiB,"
		       " max %.1f MiB; slope over the second half %.2f MiB/min: %s (flat: <= %.2f"
		       " MiB/min)\n",
		       first ? (double)first->rss / MIB : 0, warm,
		       warm_s ? (double)warm_s->rss / MIB : 0, last ? (double)last->rss / MIB : 0,
		       (double)rss_max / MIB, slope, isnan(slope) ? "too few samples" : flat ? "flat" : "GROWING",
		       opt.max_rss_slope);
		printf("  server CPU: %.0f%% of one core on average\n", cpu_pct);
		/* The server's CPU per stored batch over the run: what the per-core rate comes from
		 * when the store (not the server) is what limits the rate. */
		if (L.stored && cpu_pct > 0)
			printf("  server CPU per stored batch: %.2f ms (%.0f batches/s per server"
			       " core)\n", cpu_pct * 10.0 * run_s / (double)L.stored,
			       (double)L.stored / run_s / (cpu_pct / 100.0));
	}
	if (L.data_dir[0] && first && last)
		printf("  database: %.1f MiB -> %.1f MiB (+%.1f MiB, %.1f MiB/min)\n",
		       (double)L.db_start / MIB, (double)last->db_bytes / MIB,
		       ((double)last->db_bytes - (double)L.db_start) / MIB,
		       ((double)last->db_bytes - (double)L.db_start) / MIB / (run_s / 60));
	/* After warm-up the agents seal windows at the fleet's steady rate; the first interval
	 * (every agent's first batch, plus connecting) is reported apart. */
	size_t nsteady = 0;
	for (size_t i = 0; i < L.nbuild_wait; i++)
		if (L.build_wait_t[i] >= warm)
			L.build_wait_ms[nsteady++] = L.build_wait_ms[i];
	if (nsteady)
		qsort(L.build_wait_ms, nsteady, sizeof(*L.build_wait_ms), bench_dbl_cmp);
	build_p99 = nsteady ? percentile(L.build_wait_ms, nsteady, 0.99) : 0;
	printf("  bench: %.0f%% CPU, %.1f ms per batch built (stamp + encode + zstd -%u, %.0f KiB"
	       " sent on average), sealed -> built p99 %.0f ms after warm-up%s\n",
	       bench_cpu_pct, L.builds ? (double)L.build_ns_total / (double)L.builds / 1e6 : 0.0,
	       opt.zstd_level, L.requests ? (double)L.sent_bytes / (double)L.requests / 1024 : 0.0,
	       build_p99,
	       build_p99 > 1000 ? ": BENCH-LIMITED (its threads could not build batches as fast"
				  " as the agents seal them; give it more cores or fewer agents)"
				: "");
	printf("  refused bodies (--expect-share %.2f; refused = any answer but 2xx):\n"
	       "    | agents | Expect | requests | stored | refused | refused before the body |"
	       " body MiB sent for refused | 100 Continue | waits for 100 timed out |\n"
	       "    |---:|---|---:|---:|---:|---:|---:|---:|---:|\n",
	       opt.expect_share);
	for (int k = 0; k < 2; k++)
		if (L.k_agents[k])
			printf("    | %" PRIu64 " | %s | %" PRIu64 " | %" PRIu64 " | %" PRIu64
			       " | %" PRIu64 " | %.1f | %" PRIu64 " | %" PRIu64 " |\n",
			       L.k_agents[k], k ? "yes" : "no", L.k_requests[k], L.k_stored[k],
			       L.k_refused[k], L.k_refused_unsent[k],
			       (double)L.k_refused_bytes[k] / MIB, L.k_continues[k],
			       L.k_continue_timeouts[k]);
	if (L.srv_refused_body_bytes >= 0)
		printf("    server: %" PRId64 " requests refused before the body; %.1f MiB of their"
		       " bodies read (sysom_http_refused_body_bytes_total), %.1f MiB discarded in"
		       " all\n",
		       L.srv_refused_before_body, (double)L.srv_refused_body_bytes / MIB,
		       (double)L.srv_discarded_bytes / MIB);
	if (L.server_ours && L.server_exited)
		printf("  server exit: %s %d\n",
		       WIFEXITED(L.server_status) ? "status" : "signal",
		       WIFEXITED(L.server_status) ? WEXITSTATUS(L.server_status)
						  : WTERMSIG(L.server_status));

	snprintf(row, sizeof(row),
		 "| %u | %.0f | %.0f | %.0f | %.1f | %" PRIu64 " | %" PRIu64 " | %" PRIu64
		 " | %.1f | %.1f | %.1f | %.1f | %.0f / %.0f / %.0f / %.0f | %.2f | %.0f | %.1f |",
		 opt.agents, run_s, opt.interval, (double)captured / ntemplates / 1024,
		 (double)L.stored / run_s, L.stored, L.duplicate, http_errors + other_errors, p50,
		 p90, p99, pmax, first ? (double)first->rss / MIB : 0,
		 warm_s ? (double)warm_s->rss / MIB : 0, last ? (double)last->rss / MIB : 0,
		 (double)rss_max / MIB, slope, cpu_pct,
		 last ? ((double)last->db_bytes - (double)L.db_start) / MIB : 0);
	printf("\n%s\n%s\n%s\n", header, rule, row);
	if (opt.markdown) {
		FILE *f = fopen(opt.markdown, "ae");
		if (f) {
			fseek(f, 0, SEEK_END);
			if (ftell(f) == 0) /* a new file: the header first */
				fprintf(f, "%s\n%s\n", header, rule);
			fprintf(f, "%s\n", row);
			fclose(f);
		} else {
			fprintf(stderr, "ingest_load: cannot append to %s\n", opt.markdown);
		}
	}

	if (http_errors + other_errors)
		failed = true;
	if (L.server_ours && L.server_exited &&
	    (!WIFEXITED(L.server_status) || WEXITSTATUS(L.server_status) != 0))
		failed = true;
	if (!L.server_ours && L.server_exited) {
		printf("  server (pid %d) gone at t=%.0f s\n", (int)L.server_pid, L.server_exit_t);
		failed = true;
	}
	if (L.stored == 0)
		failed = true;
	if (failed && L.server_log[0])
		log_tail(L.server_log, 20);
	fflush(stdout);
	return opt.strict && failed ? 1 : 0;
}

/* ---- main -------------------------------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void usage(FILE *out)
{
	fprintf(out, "usage: ingest_load --batches DIR [options]\n\n");
	sysom_options_print_help(options, NOPTIONS, out);
}

int main(int argc, char **argv)
{
	char err[256];
	int rc = 2, i;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		}
	}
	i = sysom_options_parse_argv(options, NOPTIONS, argc, argv, err, sizeof(err));
	if (i < 0 || i != argc || !opt.batches) {
		fprintf(stderr, "ingest_load: %s\n", i < 0 ? err : "--batches DIR is required");
		usage(stderr);
		goto out;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	L.rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)opt.seed << 1 | 1);
	retry_clock_init(&L.retry_clock, NULL, NULL, NULL, NULL);
	if (templates_load(opt.batches))
		goto out;
	/* Every agent's connection, the server's end of each, and room for files. */
	if (raise_nofile((rlim_t)opt.agents * (opt.url ? 1 : 2) + 1024)) {
		fprintf(stderr, "ingest_load: cannot raise RLIMIT_NOFILE to %u: raise `ulimit -n`\n",
			opt.agents * (opt.url ? 1 : 2) + 1024);
		goto out;
	}
	snprintf(L.tmp_dir, sizeof(L.tmp_dir), "/tmp/sysom-load.XXXXXX");
	if (!mkdtemp(L.tmp_dir)) {
		fprintf(stderr, "ingest_load: mkdtemp: %s\n", strerror(errno));
		goto out;
	}
	if (opt.data_dir)
		snprintf(L.data_dir, sizeof(L.data_dir), "%s", opt.data_dir);
	else if (!opt.url)
		snprintf(L.data_dir, sizeof(L.data_dir), "%s/data", L.tmp_dir);
	if (token_setup())
		goto out;
	if (opt.url) {
		if (url_parse(opt.url))
			goto out;
		L.server_pid = (pid_t)opt.server_pid;
	} else {
		if (!opt.data_dir && mkdir(L.data_dir, 0700)) {
			fprintf(stderr, "ingest_load: mkdir %s: %s\n", L.data_dir, strerror(errno));
			goto out;
		}
		if (server_start())
			goto out;
	}
	/* One threadpool thread per core (at least 2) builds batches; set before first use. */
	if (!getenv("UV_THREADPOOL_SIZE")) {
		char n[24];
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		snprintf(n, sizeof(n), "%ld", cpus > 2 ? cpus : 2);
		setenv("UV_THREADPOOL_SIZE", n, 1);
	}
	printf("ingest_load: %u agents for %.0f s, interval %.1f s +- %.0f%%, %u captured batches,"
	       " server %s%s (pid %d)\n",
	       opt.agents, opt.seconds, opt.interval, opt.jitter * 100, ntemplates,
	       L.host_header, L.server_ours ? " started by the bench" : "", (int)L.server_pid);
	for (uint32_t t = 0; t < ntemplates; t++)
		printf("  batch %s: %zu bytes zstd, %zu plain\n", templates[t].name,
		       templates[t].captured_bytes, templates[t].plain_bytes);

	L.loop = uv_default_loop();
	if (!(L.agents = calloc(opt.agents, sizeof(*L.agents)))) {
		fprintf(stderr, "ingest_load: out of memory\n");
		goto out;
	}
	uv_timer_init(L.loop, &L.sampler);
	uv_timer_init(L.loop, &L.stopper);
	uv_timer_init(L.loop, &L.reporter);
	uv_signal_init(L.loop, &L.sigint);
	uv_signal_init(L.loop, &L.sigterm);
	uv_signal_start(&L.sigint, on_signal, SIGINT);
	uv_signal_start(&L.sigterm, on_signal, SIGTERM);
	L.start_ns = bench_now_ns();
	sample_take();
	L.db_start = L.nsamples ? L.samples[0].db_bytes : 0;
	for (uint32_t a = 0; a < opt.agents; a++)
		agent_init(&L.agents[a], a);
	uv_timer_start(&L.sampler, on_sampler, SAMPLE_PERIOD_MS, SAMPLE_PERIOD_MS);
	uv_timer_start(&L.reporter, on_reporter, ms_of(opt.report_every), ms_of(opt.report_every));
	uv_run(L.loop, UV_RUN_DEFAULT);
	if (!L.end_ns)
		L.end_ns = bench_now_ns();
	if (!L.server_exited)
		server_counters_read();
	else
		L.srv_refused_body_bytes = L.srv_discarded_bytes = L.srv_refused_before_body = -1;
	server_stop();
	rc = report();
	if (L.interrupted && opt.strict)
		rc = 1;
out:
	uv_loop_close(uv_default_loop());
	for (uint32_t t = 0; t < ntemplates; t++) {
		batch_stamp_free(templates[t].stamp);
		pthread_mutex_destroy(&templates[t].lock);
	}
	if (L.tmp_dir[0] && !opt.keep) {
		if (nftw(L.tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS))
			fprintf(stderr, "ingest_load: could not remove %s\n", L.tmp_dir);
	} else if (L.tmp_dir[0]) {
		printf("  kept %s\n", L.tmp_dir);
	}
	free(L.agents);
	free(L.lat_ms);
	free(L.lat_t);
	free(L.build_wait_ms);
	free(L.build_wait_t);
	free(L.samples);
	sysom_options_free(options, NOPTIONS);
	return rc;
}
