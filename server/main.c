/* SPDX-License-Identifier: Apache-2.0 */
/* sysom-server: options, store, HTTP transport, signals (TERM/INT stop, HUP reloads the token
 * and the credentials), issuing credentials. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>
#include <uv.h>

#include "common/clock.h"
#include "common/compress.h"
#include "common/error.h"
#include "common/hex.h"
#include "common/log.h"
#include "common/membudget.h"
#include "common/token.h"
#include "common/options.h"
#include "server/alerts/alerts.h"
#include "server/alerts/policy.h"
#include "server/api/api.h"
#include "server/cluster/cluster.h"
#include "server/http/auth.h"
#include "server/http/http.h"
#include "server/http/static.h"
#include "server/analysis/monitor.h"
#include "server/ingest/ingest.h"
#include "server/metrics/metrics.h"
#include "server/store/store.h"
#include "server/symbols/symbolize.h"
#include "server/symbols/symbols.h"
#include "server/symbols/upstream.h"
#include "symrepo/repo.h"

#define EXIT_USAGE 2
#ifndef SYSOM_UI_DIR
#define SYSOM_UI_DIR "ui" /* the Makefile sets the source tree's ui/ */
#endif
/* Handlers may build symbol files for minutes; file bodies are read on the same pool. */
#define DEFAULT_THREADPOOL_SIZE "16"
#define DECODE_MMAP_THRESHOLD (1 << 20) /* bytes; see run() */
#define SWEEP_INTERVAL_MAX_S 3600.0
/* --rollup-retention-days when not given: rollup_days(). */
#define ROLLUP_DAYS_UNSET UINT32_MAX
#define ROLLUP_DAYS_DEFAULT 90

/* How often retention looks for day partitions past --retention-days. */
#define RETENTION_INTERVAL_S 3600.0
/* The key whose owner (cluster_owns) builds the fleet slot summaries: one replica at a time. */
#define FLEET_SLOTS_OWNER "sysom/fleet-slots"

struct config {
	char *listen;
	char *data_dir;
	char *token_file;
	char *credentials_file;
	char *config_file;
	char *log_level;
	char *port_file;
	uint64_t max_ingest_body;
	uint64_t max_ingest_decompressed;
	uint64_t max_symbols_body;
	uint64_t max_symbols_decompressed;
	uint32_t max_symbol_lines;
	uint32_t max_kernel_symbols;
	uint64_t decode_memory_budget;
	double decode_memory_wait;
	uint64_t max_db_size;
	char *clickhouse_url;
	char *clickhouse_credentials;
	double clickhouse_timeout;
	unsigned clickhouse_group_max;
	uint32_t retention_days;
	uint32_t rollup_retention_days; /* ROLLUP_DAYS_UNSET: rollup_days() */
	uint32_t read_connections;
	uint32_t symbol_cache_entries;
	uint32_t max_connections;
	uint32_t max_connections_per_peer;
	uint32_t max_inflight;
	double request_timeout;
	double idle_timeout;
	double first_byte_timeout;
	double header_timeout;
	char *symbols_dir;
	uint64_t max_symbol_file_size;
	uint64_t max_symbol_chunk;
	uint32_t max_upload_sessions;
	uint64_t max_upload_reserve;
	double upload_expiry;
	double fleet_slots_interval;
	char *debuginfod_urls;
	bool debuginfod_auth;
	char *alertmanager_urls;
	char *webhook_urls;
	double alert_resend_interval;
	double analysis_interval;
	char *public_url;
	char *replica_url;
	char *peer_token_file;
	double replica_heartbeat;
	char *ui_dir;
	uint64_t max_ui_file;
	bool new_credential;
	bool help;
	bool version;
};

static struct config cfg = {
	.max_ingest_body = INGEST_DEFAULT_MAX_BODY,
	.max_ingest_decompressed = INGEST_DEFAULT_MAX_DECOMPRESSED,
	.max_symbols_body = INGEST_DEFAULT_MAX_KSYMS_BODY,
	.max_symbols_decompressed = INGEST_DEFAULT_MAX_KSYMS_DECOMPRESSED,
	.max_symbol_lines = 4000000,
	.max_kernel_symbols = 8000000,
	.rollup_retention_days = ROLLUP_DAYS_UNSET,
	.clickhouse_timeout = 10,
	.decode_memory_budget = 512ull << 20,
	.decode_memory_wait = 1,
	.read_connections = 4,
	.symbol_cache_entries = SYMBOLIZER_DEFAULT_ENTRIES,
	.max_connections = 1024,
	.max_connections_per_peer = 32,
	.max_inflight = 64,
	.request_timeout = 30,
	.idle_timeout = 60,
	.first_byte_timeout = 5,
	.header_timeout = 10,
	.max_symbol_file_size = SYMBOLS_DEFAULT_MAX_FILE,
	.max_symbol_chunk = SYMBOLS_DEFAULT_MAX_CHUNK,
	.max_upload_sessions = SYMBOLS_DEFAULT_MAX_SESSIONS,
	.upload_expiry = SYMBOLS_DEFAULT_UPLOAD_EXPIRY_S,
	.fleet_slots_interval = 60,
	.alert_resend_interval = ALERTS_DEFAULT_RESEND_INTERVAL_MS / 1000.0,
	.analysis_interval = MONITOR_DEFAULT_INTERVAL_MS / 1000.0,
};

#define MIB (1024.0 * 1024)
static const struct sysom_option options[] = {
	{ "listen", SYSOM_OPT_STRING, &cfg.listen, 0, 0, "HOST:PORT to serve on (default 127.0.0.1:8080)", false },
	{ "data-dir", SYSOM_OPT_STRING, &cfg.data_dir, 0, 0, "directory of the database (required)", false },
	{ "token-file", SYSOM_OPT_STRING, &cfg.token_file, 0, 0, "file whose first line is the shared bearer token (every scope)", false },
	{ "credentials-file", SYSOM_OPT_STRING, &cfg.credentials_file, 0, 0, "scoped credentials, one 'SCOPE NAME sha256:HEX [NODES]' a line (docs/operations.md)", false },
	{ "config", SYSOM_OPT_STRING, &cfg.config_file, 0, 0, "config file of 'key = value' lines (flags override it)", true },
	{ "log-level", SYSOM_OPT_STRING, &cfg.log_level, 0, 0, "error, warn, info or debug (default info)", false },
	{ "port-file", SYSOM_OPT_STRING, &cfg.port_file, 0, 0, "write the bound port here once listening", false },
	{ "max-ingest-body", SYSOM_OPT_SIZE, &cfg.max_ingest_body, 1024, 1024 * MIB, "largest compressed batch (default 16M)", false },
	{ "max-ingest-decompressed", SYSOM_OPT_SIZE, &cfg.max_ingest_decompressed, 1024, 4096 * MIB, "largest decompressed batch (default 128M)", false },
	{ "max-symbols-body", SYSOM_OPT_SIZE, &cfg.max_symbols_body, 1024, 1024 * MIB, "largest compressed kernel symbol upload (default 64M)", false },
	{ "max-symbols-decompressed", SYSOM_OPT_SIZE, &cfg.max_symbols_decompressed, 1024, 1024 * MIB, "largest decompressed kernel symbol upload (default 64M)", false },
	{ "max-symbol-lines", SYSOM_OPT_UINT, &cfg.max_symbol_lines, 1, 100000000, "most lines in a kernel symbol upload (default 4000000)", false },
	{ "max-kernel-symbols", SYSOM_OPT_UINT, &cfg.max_kernel_symbols, 0, 1000000000, "kernel symbols of all uploaded tables; tables not used for a day are evicted, least recently used first, beyond (default 8000000; 0: no limit)", false },
	{ "decode-memory-budget", SYSOM_OPT_SIZE, &cfg.decode_memory_budget, 16 * MIB, 1e15, "memory that decompressing and decoding uploads may reserve at once (default 512M)", false },
	{ "decode-memory-wait", SYSOM_OPT_DURATION, &cfg.decode_memory_wait, 0, 60, "longest an upload waits for decode memory before a 503 (default 1s)", false },
	{ "max-db-size", SYSOM_OPT_SIZE, &cfg.max_db_size, 0, 1e15, "cap of the database size; ingest answers 507 beyond (default 0: none)", false },
	{ "clickhouse-url", SYSOM_OPT_STRING, &cfg.clickhouse_url, 0, 0, "http://HOST:8123/?database=NAME: store profiles in ClickHouse instead of DATA-DIR/sysom.db", false },
	{ "clickhouse-credentials", SYSOM_OPT_STRING, &cfg.clickhouse_credentials, 0, 0, "file whose first line is USER:PASSWORD for ClickHouse", false },
	{ "clickhouse-group-max", SYSOM_OPT_UINT, &cfg.clickhouse_group_max, 0, 65536, "most batches one group insert into ClickHouse carries (the batches stored at the same time share one INSERT per table, up to 32 MiB of rows; default 0: no count limit; 1: one batch per INSERT, as before group inserts)", false },
	{ "clickhouse-timeout", SYSOM_OPT_DURATION, &cfg.clickhouse_timeout, 0.1, 600, "longest a ClickHouse statement may take; ingest answers 503 beyond (default 10s)", false },
	{ "retention-days", SYSOM_OPT_UINT, &cfg.retention_days, 0, 36500, "delete raw profile data (samples, off-CPU, GPU, NCCL, OS rows, batches) older than N days, checked hourly: ClickHouse drops whole days, SQLite deletes rows in short transactions, then unreferenced processes and stacks, and returns free pages; older CPU and off-CPU flame graphs come from per-minute rollups and older NCCL collectives (stragglers) from per-instance rollups written just before the calls go (--rollup-retention-days); incidents, settings, baselines stay (default 0: keep everything)", false },
	{ "rollup-retention-days", SYSOM_OPT_UINT, &cfg.rollup_retention_days, 0, 36500, "with --retention-days: keep the per-minute rollups of CPU samples and off-CPU time (what flame graphs of older ranges are drawn from) and the NCCL collective instances (what stragglers of older ranges are found from) for M days, at least the raw N (default 90, or N when longer; 0: keep them)", false },
	{ "fleet-slots-interval", SYSOM_OPT_DURATION, &cfg.fleet_slots_interval, 1, 3600, "with ClickHouse: how often one replica builds the whole fleet's per-minute and per-hour flame-graph summaries that long fleet-wide reads use (default 1m)", false },
	{ "read-connections", SYSOM_OPT_UINT, &cfg.read_connections, 1, 64, "database connections for queries (default 4)", false },
	{ "symbol-cache-entries", SYSOM_OPT_UINT, &cfg.symbol_cache_entries, 16, 1 << 24, "frames the symbolizer caches (default 65536)", false },
	{ "max-connections", SYSOM_OPT_UINT, &cfg.max_connections, 1, 1000000, "open connections (default 1024)", false },
	{ "max-inflight", SYSOM_OPT_UINT, &cfg.max_inflight, 1, 100000, "requests handled at once; 503 beyond (default 64)", false },
	{ "request-timeout", SYSOM_OPT_DURATION, &cfg.request_timeout, 1, 3600, "time to receive a whole request (default 30s)", false },
	{ "idle-timeout", SYSOM_OPT_DURATION, &cfg.idle_timeout, 1, 86400, "keep-alive idle time (default 60s)", false },
	{ "max-connections-per-peer", SYSOM_OPT_UINT, &cfg.max_connections_per_peer, 0, 1000000, "unauthenticated connections per IPv4 address or IPv6 /64; 0: no limit (default 32)", false },
	{ "first-byte-timeout", SYSOM_OPT_DURATION, &cfg.first_byte_timeout, 0.1, 3600, "time for a request to begin on a new or unauthenticated connection (default 5s)", false },
	{ "header-timeout", SYSOM_OPT_DURATION, &cfg.header_timeout, 0.1, 3600, "time for a request's line and headers to arrive (default 10s)", false },
	{ "symbols-dir", SYSOM_OPT_STRING, &cfg.symbols_dir, 0, 0, "the Build-ID symbol repository (default DATA-DIR/symbols)", false },
	{ "max-symbol-file-size", SYSOM_OPT_SIZE, &cfg.max_symbol_file_size, 1024, 64 * 1024 * MIB, "largest uploaded executable or debug file (default 4G)", false },
	{ "max-symbol-chunk", SYSOM_OPT_SIZE, &cfg.max_symbol_chunk, 4096, 1024 * MIB, "largest chunk of a symbol file upload (default 64M)", false },
	{ "max-upload-sessions", SYSOM_OPT_UINT, &cfg.max_upload_sessions, 1, 100000, "partial symbol uploads at once; 503 beyond (default 64)", false },
	{ "max-upload-reserve", SYSOM_OPT_SIZE, &cfg.max_upload_reserve, 0, 1e15, "total declared size of partial symbol uploads; 503 beyond (default 0: 4 x max-symbol-file-size)", false },
	{ "upload-expiry", SYSOM_OPT_DURATION, &cfg.upload_expiry, 1, 365 * 86400.0, "partial uploads idle this long are deleted (default 24h)", false },
	{ "debuginfod-urls", SYSOM_OPT_STRING, &cfg.debuginfod_urls, 0, 0, "\"URL URL\": upstream debuginfod servers asked for Build IDs nobody uploaded", false },
	{ "debuginfod-auth", SYSOM_OPT_BOOL, &cfg.debuginfod_auth, 0, 0, "require the bearer token on /buildid/... too (default: open, like /healthz)", false },
	{ "alertmanager-url", SYSOM_OPT_STRING, &cfg.alertmanager_urls, 0, 0, "\"URL URL\": Alertmanagers the alerts are sent to (POST URL/api/v2/alerts)", false },
	{ "webhook-url", SYSOM_OPT_STRING, &cfg.webhook_urls, 0, 0, "\"URL URL\": webhooks the alerts are sent to (Alertmanager's webhook format)", false },
	{ "alert-resend-interval", SYSOM_OPT_DURATION, &cfg.alert_resend_interval, 0.1, 86400, "re-send firing alerts this often (default 60s)", false },
	{ "analysis-interval", SYSOM_OPT_DURATION, &cfg.analysis_interval, 0.1, 3600, "evaluate each job with new data at most this often (default 5s)", false },
	{ "ui-dir", SYSOM_OPT_STRING, &cfg.ui_dir, 0, 0, "the web UI's files, served at /ui/ (default: the source tree's ui/, " SYSOM_UI_DIR ")", false },
	{ "max-ui-file", SYSOM_OPT_SIZE, &cfg.max_ui_file, 1024, 1024 * MIB, "largest web UI file served (default 16M)", false },
	{ "replica-url", SYSOM_OPT_STRING, &cfg.replica_url, 0, 0, "with --clickhouse-url: where the other replicas reach this server (default http://HOST:PORT of --listen and the port it listens on; the host name when listening on every address)", false },
	{ "peer-token-file", SYSOM_OPT_STRING, &cfg.peer_token_file, 0, 0, "token this replica presents to the others (admin scope; default: the --token-file token)", false },
	{ "replica-heartbeat", SYSOM_OPT_DURATION, &cfg.replica_heartbeat, 0.5, 60, "with --clickhouse-url: heartbeat period; a replica silent for 4 periods is gone and its jobs move (default 5s)", false },
	{ "public-url", SYSOM_OPT_STRING, &cfg.public_url, 0, 0, "this server's URL as users reach it, for links in alerts (generatorURL)", false },
	{ "new-credential", SYSOM_OPT_BOOL, &cfg.new_credential, 0, 0, "with SCOPE NAME [NODES] after the options: print a new token and its credentials-file line, then exit", true },
	{ "help", SYSOM_OPT_BOOL, &cfg.help, 0, 0, "print this help", true },
	{ "version", SYSOM_OPT_BOOL, &cfg.version, 0, 0, "print the version", true },
};
#define NOPTIONS (sizeof(options) / sizeof(options[0]))

/* Everything the running server owns. */
struct server {
	uv_loop_t loop;
	uv_signal_t sig_term, sig_int, sig_hup;
	uv_timer_t sweep_timer;
	uv_work_t sweep_work;
	bool sweep_running;
	uv_timer_t retention_timer;
	uv_work_t retention_work;
	bool retention_running;
	uv_timer_t fleet_slots_timer;
	uv_work_t fleet_slots_work;
	bool fleet_slots_running;
	struct store *store;
	struct auth *auth;
	struct symbolizer *sym;
	struct symrepo *repo;
	struct symbols *symbols;
	struct upstream *upstream;
	struct http_static *ui; /* the web UI's files; NULL when the default directory is absent */
	struct alerts *alerts; /* alert lifecycle and delivery: the analysis feeds it */
	struct monitor *monitor; /* straggler detection and diagnosis as batches arrive */
	struct cluster *cluster; /* replicas sharing ClickHouse: job ownership (NULL: SQLite) */
	struct server_metrics metrics;
	struct ingest *ingest;
	struct membudget *decode_memory; /* shared by decompression and decoding of uploads */
	struct api *api;
	struct http_route routes[API_ROUTE_COUNT];
	size_t nroutes;
	struct http_server *http;
	bool stopping;
};

/* Splits "HOST:PORT" or "[V6]:PORT"; 0 or -EINVAL. */
static int listen_parse(const char *text, char *host, size_t hostlen, uint16_t *port)
{
	const char *colon = strrchr(text, ':');
	char *end;
	unsigned long p;

	if (!colon || colon == text || !colon[1])
		return -EINVAL;
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (*end || errno || p > 65535 || colon[1] == '-' || colon[1] == '+')
		return -EINVAL;
	if ((size_t)(colon - text) >= hostlen)
		return -EINVAL;
	/* A bare IPv6 address needs brackets: "::1:8080" is ambiguous. */
	if (memchr(text, ':', (size_t)(colon - text)) && text[0] != '[')
		return -EINVAL;
	snprintf(host, hostlen, "%.*s", (int)(colon - text), text);
	*port = (uint16_t)p;
	return 0;
}

/* Loads the token file into the authenticator; logs what happened. 0 or a negative error. */
static int token_load(struct auth *auth, const char *path)
{
	char err[512];
	char *token = NULL;
	bool world_readable = false;
	int rc = sysom_token_file_read(path, &token, &world_readable, err, sizeof(err));

	if (rc) {
		log_error("%s", err);
		return rc;
	}
	/*
	 * A token others can read is a leaked token, but refusing it would leave the API without
	 * authentication or the server down: use it and say so loudly.
	 */
	if (world_readable)
		log_warn("token file %s is readable by every user; restrict it (chmod 600)", path);
	rc = auth_token_set(auth, token);
	explicit_bzero(token, strlen(token));
	free(token);
	if (rc == -EEXIST)
		log_error("token file %s: a credential of --credentials-file has the same token;"
			  " give the shared token a token of its own", path);
	else if (rc)
		log_error("cannot set the token: %s", sysom_strerror(rc));
	return rc;
}

#define NAMES_LOGGED_MAX 20 /* names listed per line when credentials change */

/* Logs the names of one kind of change ("added", "removed", "new token") in one line. */
static void credentials_changes_log(const char *what, const struct auth_credentials *from,
				    const struct auth_credentials *other, bool token_changes)
{
	char line[1024];
	size_t len = 0, n = 0;

	for (size_t i = 0; i < auth_credentials_count(from); i++) {
		const struct auth_credential *c = auth_credentials_at(from, i);
		const struct auth_credential *o = auth_credentials_by_name(other, c->name);
		bool listed = token_changes ? o && memcmp(o->token_sha256, c->token_sha256,
							  AUTH_SHA256_SIZE) != 0
					    : !o;
		if (!listed)
			continue;
		if (n++ < NAMES_LOGGED_MAX && len < sizeof(line)) {
			int w = snprintf(line + len, sizeof(line) - len, "%s%s", len ? ", " : "",
					 c->name);
			len += w > 0 ? (size_t)w : 0;
		}
	}
	if (n > NAMES_LOGGED_MAX)
		log_info("credentials %s: %s and %zu more", what, line, n - NAMES_LOGGED_MAX);
	else if (n)
		log_info("credentials %s: %s", what, line);
}

/*
 * Loads the credentials file into the authenticator (replacing the installed set only when
 * the whole file is valid); logs what happened and, after a reload, which names came, went
 * or got a new token. 0 or a negative error.
 */
static int credentials_load(struct auth *auth, const char *path)
{
	struct auth_credentials *set = NULL, *old = NULL;
	size_t scopes[3] = { 0 };
	char err[512];
	int rc = auth_credentials_load(path, &set, err, sizeof(err));

	if (rc) {
		log_error("%s", err);
		return rc;
	}
	for (size_t i = 0; i < auth_credentials_count(set); i++) {
		enum auth_scope s = auth_credentials_at(set, i)->scope;
		scopes[s == AUTH_SCOPE_AGENT ? 0 : s == AUTH_SCOPE_READ ? 1 : 2]++;
	}
	if ((rc = auth_credentials_set(auth, set, &old))) {
		log_error("credentials file %s: a credential has the same token as --token-file;"
			  " give it a token of its own", path);
		auth_credentials_free(set);
		return -SYSOM_ECONFIG;
	}
	log_info("credentials from %s: %zu agent, %zu read, %zu admin", path, scopes[0], scopes[1],
		 scopes[2]);
	if (old) {
		credentials_changes_log("added", set, old, false);
		credentials_changes_log("removed", old, set, false);
		credentials_changes_log("with a new token", set, old, true);
	}
	auth_credentials_free(old);
	return 0;
}

/* Ingest's refusals worth a line: wrong credential for a node, conflicting batches. */
static void on_ingest_event(void *arg, const struct ingest_event *ev)
{
	char node[2 * SYSOM_NODE_ID_SIZE + 1];

	(void)arg;
	switch (ev->kind) {
	case INGEST_EVENT_FORBIDDEN:
		log_warn("ingest from %s refused (403): %s", ev->peer ? ev->peer : "?", ev->message);
		break;
	case INGEST_EVENT_CONFLICT:
		sysom_hex_encode(ev->node_id, sizeof(ev->node_id), node, sizeof(node));
		log_error("ingest from %s (credential '%s'): conflict (409): node %s epoch %016" PRIx64
			  " sequence %" PRIu64 " is stored with content hash %016" PRIx64
			  ", this upload has %016" PRIx64 "; not stored (two writers use this"
			  " identity)", ev->peer ? ev->peer : "?", ev->credential, node, ev->epoch,
			  ev->sequence, ev->stored_hash, ev->received_hash);
		break;
	}
}

/* Writes the port to `path` atomically (temporary file + rename). */
static int port_file_write(const char *path, uint16_t port)
{
	char tmp[PATH_MAX];
	FILE *f;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "%u\n", port);
	if (fclose(f) != 0) {
		int rc = -errno;
		unlink(tmp);
		return rc;
	}
	return rename(tmp, path) ? -errno : 0;
}

static void on_handle_closed(uv_handle_t *h)
{
	(void)h;
}

/* The transport is gone: close the signal and timer handles so the loop ends. */
static void on_http_stopped(void *arg)
{
	struct server *s = arg;

	uv_close((uv_handle_t *)&s->sig_term, on_handle_closed);
	uv_close((uv_handle_t *)&s->sig_int, on_handle_closed);
	uv_close((uv_handle_t *)&s->sig_hup, on_handle_closed);
	if (s->sweep_timer.loop && !uv_is_closing((uv_handle_t *)&s->sweep_timer))
		uv_close((uv_handle_t *)&s->sweep_timer, on_handle_closed);
	if (s->retention_timer.loop && !uv_is_closing((uv_handle_t *)&s->retention_timer))
		uv_close((uv_handle_t *)&s->retention_timer, on_handle_closed);
	if (s->fleet_slots_timer.loop && !uv_is_closing((uv_handle_t *)&s->fleet_slots_timer))
		uv_close((uv_handle_t *)&s->fleet_slots_timer, on_handle_closed);
}

/* ---- symbol repository: sweeping partial uploads, upstream debuginfod ------------------------ */

static void sweep_run(uv_work_t *w)
{
	struct server *s = w->data;
	struct symbols_sweep_stats st;

	if (symbols_sweep(s->symbols, &st) == 0 && st.removed)
		log_info("deleted %u partial symbol upload(s) idle for more than %.0fs (%u kept)",
			 st.removed, cfg.upload_expiry, st.kept);
}

static void sweep_done(uv_work_t *w, int status)
{
	struct server *s = w->data;

	(void)status;
	s->sweep_running = false;
}

/* Sweeps on the threadpool (it touches the disk), one sweep at a time. */
static void on_sweep_timer(uv_timer_t *t)
{
	struct server *s = t->data;

	if (s->sweep_running || s->stopping)
		return;
	s->sweep_work.data = s;
	if (uv_queue_work(&s->loop, &s->sweep_work, sweep_run, sweep_done) == 0)
		s->sweep_running = true;
}

static int sweep_start(struct server *s)
{
	double interval = cfg.upload_expiry / 4;
	int rc;

	if (interval > SWEEP_INTERVAL_MAX_S)
		interval = SWEEP_INTERVAL_MAX_S;
	if (interval < 1)
		interval = 1;
	if ((rc = uv_timer_init(&s->loop, &s->sweep_timer)))
		return rc;
	s->sweep_timer.data = s;
	return uv_timer_start(&s->sweep_timer, on_sweep_timer, 0, (uint64_t)(interval * 1000));
}

/* ---- retention: profile data past --retention-days (day partitions / rows) ----------------- */

/* Days the rollups are kept (0: always): --rollup-retention-days, else the default. */
static uint32_t rollup_days(void)
{
	if (cfg.rollup_retention_days != ROLLUP_DAYS_UNSET)
		return cfg.rollup_retention_days;
	return cfg.retention_days > ROLLUP_DAYS_DEFAULT ? cfg.retention_days : ROLLUP_DAYS_DEFAULT;
}

static void retention_run(uv_work_t *w)
{
	struct server *s = w->data;
	int64_t now_ms = sysom_realtime_ms();
	int64_t before_ms = now_ms - (int64_t)cfg.retention_days * 86400000LL;
	int64_t rollup_before_ms = rollup_days() ? now_ms - (int64_t)rollup_days() * 86400000LL : 0;
	uint32_t dropped = 0;
	int rc = store_retention_apply(s->store, before_ms, rollup_before_ms, &dropped);

	if (rc)
		log_warn("retention: cannot drop data older than %u days: %s (retried in %.0fs)",
			 cfg.retention_days, sysom_strerror(rc), RETENTION_INTERVAL_S);
	else if (dropped)
		log_info("retention: dropped %u %s older than %u days", dropped,
			 cfg.clickhouse_url ? "day partition(s)" : "row(s)", cfg.retention_days);
}

static void retention_done(uv_work_t *w, int status)
{
	struct server *s = w->data;

	(void)status;
	s->retention_running = false;
}

static void on_retention_timer(uv_timer_t *t)
{
	struct server *s = t->data;

	if (s->retention_running || s->stopping)
		return;
	s->retention_work.data = s;
	if (uv_queue_work(&s->loop, &s->retention_work, retention_run, retention_done) == 0)
		s->retention_running = true;
}

/* With --retention-days: a first pass at start, then one per RETENTION_INTERVAL_S. */
static int retention_start(struct server *s)
{
	int rc;

	if (!cfg.retention_days)
		return 0;
	if ((rc = uv_timer_init(&s->loop, &s->retention_timer)))
		return rc;
	s->retention_timer.data = s;
	return uv_timer_start(&s->retention_timer, on_retention_timer, 0,
			      (uint64_t)(RETENTION_INTERVAL_S * 1000));
}

/* ---- fleet slots: the whole fleet's minute and hour summaries (ClickHouse) ------------------ */

static void fleet_slots_run(uv_work_t *w)
{
	struct server *s = w->data;
	struct store_fleet_slots_pass p;
	int rc = store_fleet_slots_run(s->store, sysom_realtime_ms(), &p);

	if (rc)
		log_warn("fleet slots: cannot build summaries: %s (retried in %.0fs)",
			 sysom_strerror(rc), cfg.fleet_slots_interval);
	else if (p.built || p.pending)
		log_debug("fleet slots: %u summaries built (%u rebuilt after later batches, %u hours"
			  " from their minutes), %u left", p.built, p.rebuilt, p.merged, p.pending);
}

static void fleet_slots_done(uv_work_t *w, int status)
{
	struct server *s = w->data;

	(void)status;
	s->fleet_slots_running = false;
}

static void on_fleet_slots_timer(uv_timer_t *t)
{
	struct server *s = t->data;

	if (s->fleet_slots_running || s->stopping || !cluster_owns(s->cluster, FLEET_SLOTS_OWNER))
		return;
	s->fleet_slots_work.data = s;
	if (uv_queue_work(&s->loop, &s->fleet_slots_work, fleet_slots_run, fleet_slots_done) == 0)
		s->fleet_slots_running = true;
}

/* With ClickHouse: a pass every --fleet-slots-interval on the replica owning them. */
static int fleet_slots_start(struct server *s)
{
	uint64_t ms = (uint64_t)(cfg.fleet_slots_interval * 1000);
	int rc;

	if (!cfg.clickhouse_url)
		return 0;
	if ((rc = uv_timer_init(&s->loop, &s->fleet_slots_timer)))
		return rc;
	s->fleet_slots_timer.data = s;
	return uv_timer_start(&s->fleet_slots_timer, on_fleet_slots_timer, ms, ms);
}

/* A frame met a Build ID the repository lacks: ask upstream (never blocks). */
static void on_symbols_missing(void *ctx, const struct sysom_build_id *id)
{
	upstream_request(ctx, id);
}

/* A file fetched from upstream was installed (on a fetch thread). */
static void on_upstream_installed(void *ctx, const struct sysom_build_id *id)
{
	struct server *s = ctx;

	symbolizer_build_id_invalidate(s->sym, id);
}

/* An upstream fetch ended (on a fetch thread). */
static void on_upstream_done(void *ctx, const struct sysom_build_id *id,
			     const struct upstream_result *r)
{
	char hex[2 * SYSOM_BUILD_ID_MAX + 1];

	(void)ctx;
	sysom_build_id_hex(id, hex, sizeof(hex));
	if (r->executable || r->debuginfo) {
		log_info("upstream debuginfod: %s: %s%s%s", hex, r->executable ? "executable" : "",
			 r->executable && r->debuginfo ? " and " : "",
			 r->debuginfo ? "debug file" : "");
	}
	if (r->error == -ENOENT)
		log_debug("upstream debuginfod: %s: %s", hex, r->message);
	else if (r->error)
		log_warn("upstream debuginfod: %s: %s", hex, r->message);
}

/* Opens the repository, the upload API and (with --debuginfod-urls) the upstream fetcher. */
static int symbols_create(struct server *s)
{
	struct symrepo_options ro;
	struct symbols_options so = {
		.max_file_size = cfg.max_symbol_file_size,
		.max_sessions = cfg.max_upload_sessions,
		.max_reserved_bytes = cfg.max_upload_reserve,
		.upload_expiry_s = cfg.upload_expiry,
		.debuginfod_auth = cfg.debuginfod_auth,
		.memory_budget = s->decode_memory,
	};
	char dir[PATH_MAX], cache[PATH_MAX], err[512];
	int rc;

	if ((size_t)snprintf(dir, sizeof(dir), "%s/symbols", cfg.data_dir) >= sizeof(dir) ||
	    (size_t)snprintf(cache, sizeof(cache), "%s/debuginfod-cache", cfg.data_dir) >=
		    sizeof(cache)) {
		log_error("--data-dir is too long");
		return -ENAMETOOLONG;
	}
	symrepo_options_default(&ro, cfg.symbols_dir ? cfg.symbols_dir : dir);
	if ((rc = symrepo_open(&ro, &s->repo))) {
		log_error("cannot open the symbol repository %s: %s", ro.root, sysom_strerror(rc));
		return rc;
	}
	so.dir = ro.root;
	if ((rc = symbols_new(s->repo, s->auth, s->sym, &s->metrics, &so, &s->symbols, err,
			      sizeof(err)))) {
		log_error("symbol uploads: %s", err);
		return rc;
	}
	if (!cfg.debuginfod_urls || !*cfg.debuginfod_urls) {
		/* Only what --debuginfod-urls names is asked: not what a login profile exported. */
		unsetenv("DEBUGINFOD_URLS");
		symbolizer_repository_set(s->sym, s->repo, NULL, NULL);
		return 0;
	}
	struct upstream_options uo = { .urls = cfg.debuginfod_urls, .cache_dir = cache,
				       .max_file_size = cfg.max_symbol_file_size };
	struct upstream_hooks hooks = { .installed = on_upstream_installed,
					.done = on_upstream_done, .ctx = s };
	if ((rc = upstream_new(s->repo, &uo, &hooks, &s->upstream, err, sizeof(err)))) {
		log_error("upstream debuginfod: %s", err);
		return rc;
	}
	symbolizer_repository_set(s->sym, s->repo, on_symbols_missing, s->upstream);
	symbols_want_debuginfo_set(s->symbols, on_symbols_missing, s->upstream);
	log_info("asking upstream debuginfod servers for Build IDs nobody uploaded: %s",
		 cfg.debuginfod_urls);
	return 0;
}

/* ---- alerts --------------------------------------------------------------------------------- */

/* A receiver failed or delivers again (on the alert sender thread). */
static void on_alerts_event(void *ctx, const struct alerts_event *ev)
{
	const char *kind = ev->kind == ALERTS_ALERTMANAGER ? "Alertmanager" : "webhook";

	(void)ctx;
	if (ev->up)
		log_info("alerts: %s %s accepts notifications again", kind, ev->receiver);
	else
		log_warn("alerts: %s %s: %s; retrying with backoff", kind, ev->receiver, ev->message);
}

/* The alert module, with the receivers of --alertmanager-url and --webhook-url. */
static int alerts_create(struct server *s)
{
	struct alerts_config ac = {
		.resend_interval_ms = (uint32_t)(cfg.alert_resend_interval * 1000),
		.on_event = on_alerts_event,
	};
	char **am = NULL, **wh = NULL;
	size_t nam = 0, nwh = 0;
	int rc;

	if ((rc = alerts_url_list_parse(cfg.alertmanager_urls, &am, &nam)) ||
	    (rc = alerts_url_list_parse(cfg.webhook_urls, &wh, &nwh))) {
		if (rc == -EINVAL)
			log_error("--alertmanager-url, --webhook-url: more than %d URLs",
				  ALERTS_MAX_RECEIVERS);
		else
			log_error("cannot start alerts: %s", sysom_strerror(rc));
		goto cleanup;
	}
	ac.alertmanager_urls = (const char *const *)am;
	ac.n_alertmanagers = nam;
	ac.webhook_urls = (const char *const *)wh;
	ac.n_webhooks = nwh;
	if ((rc = alerts_new(&ac, &s->alerts))) {
		if (rc == -EINVAL)
			log_error("--alertmanager-url, --webhook-url: URLs must be http:// or https://"
				  " (%d at most)", ALERTS_MAX_RECEIVERS);
		else
			log_error("cannot start alerts: %s", sysom_strerror(rc));
		goto cleanup;
	}
	if ((rc = server_metrics_source_add(&s->metrics, alerts_metrics_write, s->alerts)))
		goto cleanup;
	if (nam + nwh)
		log_info("alerts go to %zu Alertmanager(s) and %zu webhook(s), re-sent every %gs",
			 nam, nwh, cfg.alert_resend_interval);
cleanup:
	alerts_url_list_free(am, nam);
	alerts_url_list_free(wh, nwh);
	return rc;
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct server *s = h->data;

	if (signum == SIGHUP) {
		if (!cfg.token_file && !cfg.credentials_file)
			log_info("SIGHUP: no --token-file or --credentials-file to reload");
		if (cfg.token_file) {
			if (token_load(s->auth, cfg.token_file) == 0)
				log_info("SIGHUP: reloaded the token from %s", cfg.token_file);
			else
				log_warn("SIGHUP: keeping the previous token");
		}
		if (cfg.credentials_file && credentials_load(s->auth, cfg.credentials_file))
			log_warn("SIGHUP: keeping the previous credentials");
		return;
	}
	if (s->stopping)
		return;
	s->stopping = true;
	log_info("%s: stopping", strsignal(signum));
	sd_notify(0, "STOPPING=1");
	/* /metrics must not read the transport's counters once it is being freed. */
	api_http_server_set(s->api, NULL);
	http_server_stop(s->http, on_http_stopped, s);
}

static int signals_start(struct server *s)
{
	uv_signal_t *handles[] = { &s->sig_term, &s->sig_int, &s->sig_hup };
	const int signums[] = { SIGTERM, SIGINT, SIGHUP };
	int rc;

	for (int i = 0; i < 3; i++) {
		if ((rc = uv_signal_init(&s->loop, handles[i])))
			return rc;
		handles[i]->data = s;
		if ((rc = uv_signal_start(handles[i], on_signal, signums[i])))
			return rc;
	}
	return 0;
}

/* The reason part of a transport error ("http: cannot listen on H port P: REASON"). */
static const char *error_reason(const char *err)
{
	const char *sep = strstr(err, ": ");
	const char *last = NULL;

	while (sep) {
		last = sep;
		sep = strstr(sep + 2, ": ");
	}
	return last ? last + 2 : err;
}

/* The monitor's events, logged as the server always logged them. */
static void on_monitor_event(void *arg, const struct monitor_event *ev)
{
	(void)arg;
	switch (ev->kind) {
	case MONITOR_SETTINGS_IGNORED:
		log_warn("job %s: stored settings ignored: %s", ev->job, ev->text);
		break;
	case MONITOR_BASELINE_STORED:
		log_info("job %s: baseline stored (iteration %.1f ms, %" PRIu64 " samples)", ev->job,
			 ev->iteration_ms, ev->samples);
		break;
	case MONITOR_INCIDENT_OPENED:
		log_warn("job %s: diagnosis %" PRId64 " opened: %s", ev->job, ev->incident_id, ev->text);
		break;
	case MONITOR_INCIDENT_RESOLVED:
		log_info("job %s: diagnosis %" PRId64 " resolved (%s)", ev->job, ev->incident_id,
			 ev->text);
		break;
	case MONITOR_EVALUATION_FAILED:
		log_warn("job %s: evaluation failed: %s", ev->job, strerror(-ev->error));
		break;
	}
}

/* A stored batch: to this replica's analysis when it owns one of its jobs, and to the
 * replicas that own the others. */
static void on_batch_stored(void *arg, const struct sysom_batch *b, const struct ingest_body *body)
{
	struct server *s = arg;
	const struct cluster_body cb = { .data = body->data, .len = body->len, .zstd = body->zstd,
					 .idempotency_key = body->idempotency_key };

	if (cluster_batch_route(s->cluster, b, &cb))
		monitor_batch_stored(s->monitor, b);
}

/* A batch another replica stored, for the jobs this one owns. */
static void on_batch_fed(void *arg, const struct sysom_batch *b)
{
	struct server *s = arg;

	cluster_fed(s->cluster);
	monitor_batch_stored(s->monitor, b);
}

static bool job_owned(void *arg, const char *job)
{
	return cluster_owns(arg, job);
}

static void job_alerts_forget(void *arg, const char *job)
{
	alerts_scope_forget(arg, job);
}

static void on_owners_changed(void *arg)
{
	struct server *s = arg;

	monitor_owners_changed(s->monitor);
}

static void on_cluster_event(void *arg, const struct cluster_event *ev)
{
	(void)arg;
	switch (ev->kind) {
	case CLUSTER_MEMBERS_CHANGED:
		log_info("replicas: %zu alive (%s; * is this one)", ev->count, ev->text);
		break;
	case CLUSTER_HEARTBEAT_FAILED:
		log_warn("replicas: heartbeat failed: %s", sysom_strerror(ev->error));
		break;
	case CLUSTER_FORWARD_FAILING:
		if (ev->status)
			log_warn("replicas: forwarding to %s fails (HTTP %ld)", ev->text, ev->status);
		else
			log_warn("replicas: forwarding to %s fails (%s)", ev->text,
				 sysom_strerror(ev->error));
		break;
	case CLUSTER_FORWARD_RECOVERED:
		log_info("replicas: forwarding to %s works again", ev->text);
		break;
	}
}

/*
 * The URL the other replicas reach this one at: --replica-url, else http://HOST:PORT of
 * --listen (this host's name when it listens on every address) with the port it listens on.
 */
static void replica_url(uint16_t port, char *url, size_t len)
{
	char lhost[256], host[256];
	uint16_t lport;

	if (cfg.replica_url) {
		snprintf(url, len, "%s", cfg.replica_url);
		return;
	}
	if (listen_parse(cfg.listen, lhost, sizeof(lhost), &lport) || !lhost[0] ||
	    strcmp(lhost, "0.0.0.0") == 0 || strcmp(lhost, "[::]") == 0) {
		if (gethostname(host, sizeof(host)) != 0)
			snprintf(host, sizeof(host), "localhost");
		host[sizeof(host) - 1] = '\0';
	} else {
		snprintf(host, sizeof(host), "%s", lhost);
	}
	snprintf(url, len, "http://%s:%u", host, port);
}

/*
 * The replicas sharing ClickHouse (none with SQLite): created here, joined once the server
 * listens (cluster_join). 0 or -SYSOM_ECONFIG (logged).
 */
static int cluster_create(struct server *s)
{
	struct cluster_options co = { .store = s->store,
				      .heartbeat_ms = (uint32_t)(cfg.replica_heartbeat * 1000),
				      .expiry_s = 0,
				      .on_change = on_owners_changed, .on_change_arg = s,
				      .on_event = on_cluster_event };
	char *token = NULL, err[512];
	int rc;

	if (!cfg.clickhouse_url)
		return 0;
	if (cfg.replica_heartbeat > 0)
		co.expiry_s = (uint32_t)(cfg.replica_heartbeat * 4 + 0.999);
	const char *token_path = cfg.peer_token_file ? cfg.peer_token_file : cfg.token_file;
	if (token_path) {
		bool world_readable = false;
		if (sysom_token_file_read(token_path, &token, &world_readable, err, sizeof(err))) {
			log_error("%s", err);
			return -SYSOM_ECONFIG;
		}
	}
	co.peer_token = token;
	rc = cluster_new(&co, &s->cluster);
	if (token) {
		explicit_bzero(token, strlen(token));
		free(token);
	}
	if (rc) {
		log_error("cannot create the replica state: %s", sysom_strerror(rc));
		return -SYSOM_ECONFIG;
	}
	return server_metrics_source_add(&s->metrics, cluster_metrics_write, s->cluster);
}

/* Joins the replicas once the server listens on `port`. 0 or -1 (logged). */
static int cluster_join(struct server *s, uint16_t port)
{
	char url[CLUSTER_URL_MAX + 1];
	int rc;

	if (!s->cluster)
		return 0;
	replica_url(port, url, sizeof(url));
	if ((rc = cluster_start(s->cluster, url))) {
		log_error("cannot join the replicas in ClickHouse: %s", sysom_strerror(rc));
		return -1;
	}
	log_info("replica of the servers sharing ClickHouse, reached at %s", url);
	return 0;
}

/* The monitor's families in /metrics (a metrics source). */
static void monitor_metrics_source(void *ctx, struct byte_buf *out)
{
	monitor_metrics_write(ctx, out);
}

/* Its per-job families (a detail source: read credentials only). */
static void monitor_job_metrics_source(void *ctx, struct byte_buf *out)
{
	monitor_job_metrics_write(ctx, out);
}

/* The web UI's directory: a --ui-dir that cannot be opened is a configuration error; the
 * default (the source tree's ui/) missing only means no UI (an installed server without it). */
static int ui_open(struct server *s)
{
	const char *dir = cfg.ui_dir ? cfg.ui_dir : SYSOM_UI_DIR;
	char err[512];

	if (http_static_open(dir, cfg.max_ui_file, &s->ui, err, sizeof(err)) == 0) {
		log_info("web UI served at /ui/ from %s", dir);
		return 0;
	}
	if (cfg.ui_dir) {
		log_error("%s", err);
		return -SYSOM_ECONFIG;
	}
	log_info("no web UI (%s; see --ui-dir)", err);
	return 0;
}

static int components_create(struct server *s)
{
	struct ingest_options io = {
		.max_decompressed = cfg.max_ingest_decompressed,
		.max_ksyms_decompressed = cfg.max_symbols_decompressed,
		.max_ksym_lines = cfg.max_symbol_lines,
	};
	struct api_route_limits limits = {
		.ingest_max_body = cfg.max_ingest_body,
		.ksyms_max_body = cfg.max_symbols_body,
		.symbols_max_chunk = cfg.max_symbol_chunk,
	};
	struct api_options ao = { 0 };
	struct monitor_options mo = { .interval_ms = (uint32_t)(cfg.analysis_interval * 1000),
				      .public_url = cfg.public_url, .on_event = on_monitor_event };
	struct diagnosis_ctx dc;
	int rc;

	server_metrics_init(&s->metrics);
	s->auth = auth_new();
	s->sym = symbolizer_new(s->store, cfg.symbol_cache_entries, 0);
	/* Replicas share the symbol repository: files another one installs show up here too. */
	if (s->sym && cfg.clickhouse_url)
		symbolizer_recheck_set(s->sym, SYMBOLIZER_MISSING_RECHECK_MS);
	if (!s->auth || !s->sym)
		return -ENOMEM;
	if (cfg.token_file && token_load(s->auth, cfg.token_file))
		return -SYSOM_ECONFIG;
	if (cfg.credentials_file && credentials_load(s->auth, cfg.credentials_file))
		return -SYSOM_ECONFIG;
	if (!auth_enabled(s->auth))
		log_warn("no --token-file or --credentials-file: every request is allowed");
	/* Shared by ingest and symbol uploads: created before either. */
	struct membudget_options mbo = {
		.capacity = cfg.decode_memory_budget,
		.max_wait_ms = (uint32_t)(cfg.decode_memory_wait * 1000),
	};
	if ((rc = membudget_new(&mbo, &s->decode_memory)) ||
	    (rc = server_metrics_source_add(&s->metrics, ingest_memory_metrics_write,
					    s->decode_memory)))
		return rc;
	if ((rc = symbols_create(s)))
		return -SYSOM_ECONFIG; /* logged */
	ao.symbols = s->symbols;
	ao.upstream = s->upstream;
	ao.alerts = s->alerts;
	if ((rc = ui_open(s)))
		return rc; /* logged */
	ao.ui = s->ui;
	if ((rc = cluster_create(s)))
		return rc; /* logged */
	ao.cluster = s->cluster;
	if (!(s->api = api_new(s->store, s->sym, s->auth, &s->metrics, &ao)))
		return -ENOMEM;
	/* The monitor analyses what ingest stores, reading through the API's profiles. */
	api_diagnosis_ctx(s->api, &dc);
	mo.alerting = (struct monitor_alerting){ .severity = alerts_policy_severity,
						 .publish = alerts_incidents_publish,
						 .forget = s->alerts ? job_alerts_forget : NULL,
						 .arg = s->alerts };
	mo.ownership = (struct monitor_ownership){ .owns = s->cluster ? job_owned : NULL,
						   .arg = s->cluster };
	/* On either store: incidents, settings and baselines live in it (ClickHouse:
	 * clickhouse_state.c). Where a store cannot answer a job's data yet (-ENOTSUP), the
	 * evaluation fails and counts in the monitor's metrics; nothing is opened. */
	if ((rc = monitor_new(&dc, &mo, &s->monitor))) {
		log_error("cannot start the analysis: %s", sysom_strerror(rc));
		return -SYSOM_ECONFIG;
	}
	if ((rc = server_metrics_source_add(&s->metrics, monitor_metrics_source,
					    s->monitor)) ||
	    (rc = server_metrics_detail_source_add(&s->metrics, monitor_job_metrics_source,
						   s->monitor)))
		return rc;
	io.on_stored = on_batch_stored;
	io.on_fed = s->cluster ? on_batch_fed : NULL;
	io.on_stored_arg = s;
	io.on_event = on_ingest_event;
	io.memory_budget = s->decode_memory;
	if (!(s->ingest = ingest_new(s->store, s->auth, s->sym, &s->metrics, &io)))
		return -ENOMEM;
	s->nroutes = api_routes_build(s->api, s->ingest, s->symbols, &limits, s->routes);
	return 0;
}

/* Descriptors the server needs besides the transport's: database, logs, symbol files. */
#define FD_MARGIN 256

/*
 * Raises the soft RLIMIT_NOFILE to the hard one (systemd's LimitNOFILE, ulimit -Hn) so
 * that --max-connections can be reached, and warns when even that is short: connections
 * beyond the limit fail in accept and are dropped unanswered.
 */
static void nofile_limit_raise(const struct http_server_options *ho)
{
	uint64_t need = http_server_descriptors_needed(ho) + FD_MARGIN;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
		log_warn("cannot read the open-file limit: %s", sysom_strerror(-errno));
		return;
	}
	if (rl.rlim_cur < rl.rlim_max) {
		rlim_t old = rl.rlim_cur;
		/* An infinite hard limit cannot be the soft one (the kernel's nr_open caps it). */
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? (rlim_t)need : rl.rlim_max;
		if (rl.rlim_cur > old && setrlimit(RLIMIT_NOFILE, &rl) != 0) {
			log_warn("cannot raise the open-file limit from %llu to %llu: %s",
				 (unsigned long long)old, (unsigned long long)rl.rlim_cur,
				 sysom_strerror(-errno));
			rl.rlim_cur = old;
		}
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
		log_warn("the open-file limit (%llu) is below the %llu that --max-connections %u "
			 "needs: connections beyond it are dropped; raise LimitNOFILE (ulimit -n) or "
			 "lower --max-connections",
			 (unsigned long long)rl.rlim_cur, (unsigned long long)need,
			 ho->max_connections);
}

/* http_server_options.busy: uploads are refused before their body while decode memory is full. */
static bool decode_memory_busy(void *arg)
{
	struct server *s = arg;

	return s->decode_memory && membudget_saturated(s->decode_memory);
}

/*
 * http_server_options.admit: an upload (a decoding route: ingest, symbols) whose bearer token
 * authenticates as nobody is answered 401 from its head, so that its body is never sent (with
 * Expect: 100-continue) or never read. Scopes and node ids are still checked by the handler.
 */
static bool upload_admit(void *arg, const struct http_route *route, const struct http_request *req,
			 struct http_response *resp)
{
	struct server *s = arg;
	struct auth_decision d;

	if (!(route->flags & HTTP_ROUTE_DECODES) || !s->auth ||
	    auth_request_identify(s->auth, req, &d) == AUTH_ALLOWED)
		return true;
	auth_respond(resp, &d);
	/* Counted like the handler's own refusal would have been. */
	server_metrics_reject(&s->metrics, INGEST_ERR_UNAUTHORIZED,
			      strcmp(req->path, INGEST_PATH) == 0 ? &s->metrics.batches[INGEST_REJECTED]
								   : NULL);
	return false;
}

static int run(const char *host, uint16_t port)
{
	static struct server s;
	struct store_sqlite_options so = { .read_connections = cfg.read_connections,
					   .max_size = cfg.max_db_size,
					   .max_kernel_symbols = cfg.max_kernel_symbols };
	struct http_server_options ho = {
		.host = host,
		.port = port,
		.max_connections = cfg.max_connections,
		.max_inflight = cfg.max_inflight,
		.request_timeout_ms = (uint32_t)(cfg.request_timeout * 1000),
		.idle_timeout_ms = (uint32_t)(cfg.idle_timeout * 1000),
		.max_connections_per_peer = cfg.max_connections_per_peer ? cfg.max_connections_per_peer
									 : HTTP_UNLIMITED,
		.first_byte_timeout_ms = (uint32_t)(cfg.first_byte_timeout * 1000),
		.header_timeout_ms = (uint32_t)(cfg.header_timeout * 1000),
		.busy = decode_memory_busy,
		.busy_arg = &s,
		.admit = upload_admit,
		.admit_arg = &s,
	};
	char err[512];
	bool loop_open = false;
	int rc, status = EXIT_FAILURE;

	/* libuv sizes its threadpool at first use; an operator's UV_THREADPOOL_SIZE wins. */
	setenv("UV_THREADPOOL_SIZE", DEFAULT_THREADPOOL_SIZE, 0);
	nofile_limit_raise(&ho);
	/* Decode buffers come and go in many threads: a fixed mmap threshold keeps every large
	 * one an mmap of its own, returned on free. glibc's default raises the threshold to the
	 * last freed size (up to 32 MiB), after which such buffers land in per-thread arenas
	 * that keep their pages, so RSS would drift above what the decode memory budget holds. */
	mallopt(M_MMAP_THRESHOLD, DECODE_MMAP_THRESHOLD);
	if (cfg.clickhouse_url) {
		struct store_clickhouse_options co = {
			.url = cfg.clickhouse_url,
			.credentials_file = cfg.clickhouse_credentials,
			.timeout_ms = (uint32_t)(cfg.clickhouse_timeout * 1000),
			.group_max = cfg.clickhouse_group_max,
		};

		if (cfg.max_db_size)
			log_warn("--max-db-size does not apply to ClickHouse: size it there");
		rc = store_clickhouse_open(&co, &s.store, err, sizeof(err));
	} else {
		rc = store_sqlite_open(cfg.data_dir, &so, &s.store, err, sizeof(err));
	}
	if (rc) {
		log_error("%s", err);
		goto cleanup;
	}
	/* Ranges older than the raw rows are read from the per-minute rollups. */
	store_rollup_raw_keep_set(s.store, (int64_t)cfg.retention_days * 86400000LL);
	if (alerts_create(&s))
		goto cleanup; /* logged */
	if ((rc = components_create(&s))) {
		if (rc != -SYSOM_ECONFIG)
			log_error("cannot start: %s", sysom_strerror(rc));
		goto cleanup;
	}
	if ((rc = uv_loop_init(&s.loop))) {
		log_error("cannot create the event loop: %s", uv_strerror(rc));
		goto cleanup;
	}
	loop_open = true;
	if ((rc = signals_start(&s))) {
		log_error("cannot handle signals: %s", uv_strerror(rc));
		goto cleanup;
	}
	if ((rc = sweep_start(&s))) {
		log_error("cannot start the upload sweep timer: %s", uv_strerror(rc));
		goto cleanup;
	}
	if ((rc = retention_start(&s))) {
		log_error("cannot start the retention timer: %s", uv_strerror(rc));
		goto cleanup;
	}
	if ((rc = fleet_slots_start(&s))) {
		log_error("cannot start the fleet slots timer: %s", uv_strerror(rc));
		goto cleanup;
	}
	s.http = http_server_start(&s.loop, &ho, s.routes, s.nroutes, err, sizeof(err));
	if (!s.http) {
		log_error("cannot listen on %s: %s", cfg.listen, error_reason(err));
		goto cleanup;
	}
	api_http_server_set(s.api, s.http);
	if (cfg.port_file && (rc = port_file_write(cfg.port_file, http_server_port(s.http)))) {
		log_error("cannot write the port file %s: %s", cfg.port_file, sysom_strerror(rc));
		s.stopping = true;
		api_http_server_set(s.api, NULL);
		http_server_stop(s.http, on_http_stopped, &s);
		uv_run(&s.loop, UV_RUN_DEFAULT);
		goto cleanup;
	}
	if (cluster_join(&s, http_server_port(s.http))) {
		s.stopping = true;
		api_http_server_set(s.api, NULL);
		http_server_stop(s.http, on_http_stopped, &s);
		uv_run(&s.loop, UV_RUN_DEFAULT);
		goto cleanup;
	}
	log_info("listening on http://%s:%u (data dir %s)", host, http_server_port(s.http),
		 cfg.data_dir);
	sd_notify(0, "READY=1");
	uv_run(&s.loop, UV_RUN_DEFAULT);
	log_info("stopped");
	status = EXIT_SUCCESS;
cleanup:
	if (loop_open) {
		/* Let every handle close (signals, a failed listener) before closing the loop. */
		if (!s.stopping) {
			uv_handle_t *handles[] = { (uv_handle_t *)&s.sig_term, (uv_handle_t *)&s.sig_int,
						   (uv_handle_t *)&s.sig_hup,
						   (uv_handle_t *)&s.sweep_timer,
						   (uv_handle_t *)&s.retention_timer,
						   (uv_handle_t *)&s.fleet_slots_timer };
			for (int i = 0; i < 6; i++)
				if (handles[i]->loop && !uv_is_closing(handles[i]))
					uv_close(handles[i], on_handle_closed);
		}
		uv_run(&s.loop, UV_RUN_DEFAULT);
		if (uv_loop_close(&s.loop))
			log_warn("event loop closed with handles still open");
	}
	cluster_free(s.cluster); /* departs first: the others take its jobs over at once */
	monitor_free(s.monitor); /* before the API it reads through and the alerts it feeds */
	api_free(s.api);
	http_static_free(s.ui);
	ingest_free(s.ingest);
	alerts_free(s.alerts); /* after its users; delivers pending resolutions (bounded wait) */
	upstream_free(s.upstream); /* before the symbolizer: its events invalidate frames */
	symbols_free(s.symbols);
	membudget_free(s.decode_memory); /* after its users (ingest, symbol uploads) */
	symbolizer_free(s.sym);
	symrepo_close(s.repo);
	auth_free(s.auth);
	store_close(s.store);
	return status;
}

/*
 * The decode memory budget must hold one largest decompression (its output, the byte that
 * proves an excess and the zstd context), or such an upload could never be served. Returns 0,
 * or -SYSOM_ECONFIG with `err` saying why.
 */
static int decode_memory_check(char *err, size_t errlen)
{
	uint64_t largest = cfg.max_ingest_decompressed > cfg.max_symbols_decompressed
				   ? cfg.max_ingest_decompressed
				   : cfg.max_symbols_decompressed;
	uint64_t need = largest + 1 + sysom_zstd_context_max();

	if (cfg.decode_memory_budget >= need)
		return 0;
	snprintf(err, errlen,
		 "--decode-memory-budget %" PRIu64 " is below what one largest upload needs to be"
		 " decompressed (%" PRIu64 " bytes: --max-%s-decompressed %" PRIu64 " plus the zstd"
		 " context); raise the budget or lower that limit",
		 cfg.decode_memory_budget, need,
		 largest == cfg.max_ingest_decompressed ? "ingest" : "symbols", largest);
	return -SYSOM_ECONFIG;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: sysom-server --data-dir DIR [--listen HOST:PORT] [--token-file F]"
		     " [--credentials-file F] [--config F] [options]\n"
		     "       sysom-server --new-credential agent|read|admin NAME [NODE-ID,...|*]\n"
		     "\noptions:\n");
	sysom_options_print_help(options, NOPTIONS, out);
}

/*
 * --new-credential SCOPE NAME [NODES]: prints a new token (line 1: give it to the client as
 * its token file) and the credentials-file line with the token's hash (line 2), after
 * checking that line as the server will. Returns the exit status.
 */
static int credential_issue(int argc, char **argv)
{
	char token[AUTH_TOKEN_LEN + 1], hex[2 * AUTH_SHA256_SIZE + 1], line[1024];
	uint8_t sha256[AUTH_SHA256_SIZE];
	struct auth_credentials *check = NULL;
	struct auth_credentials_error err;
	int n, rc, status = EXIT_USAGE;

	if (argc < 2 || argc > 3) {
		fprintf(stderr, "sysom-server: --new-credential wants SCOPE NAME [NODES]: e.g."
				" 'agent gpu-node-17 <node id>' or 'read grafana'\n");
		return EXIT_USAGE;
	}
	for (int i = 0; i < argc; i++) {
		if (strpbrk(argv[i], " \t\r\n#")) {
			fprintf(stderr, "sysom-server: --new-credential: '%s' has a space or '#'\n",
				argv[i]);
			return EXIT_USAGE;
		}
	}
	if ((rc = auth_token_generate(token, sizeof(token))) ||
	    (rc = auth_token_sha256(token, strlen(token), sha256))) {
		fprintf(stderr, "sysom-server: cannot make a token: %s\n", sysom_strerror(rc));
		status = EXIT_FAILURE;
		goto cleanup;
	}
	sysom_hex_encode(sha256, sizeof(sha256), hex, sizeof(hex));
	n = snprintf(line, sizeof(line), "%s %s " AUTH_TOKEN_SPEC_PREFIX "%s%s%s", argv[0], argv[1],
		     hex, argc == 3 ? " " : "", argc == 3 ? argv[2] : "");
	if (n < 0 || (size_t)n >= sizeof(line)) {
		fprintf(stderr, "sysom-server: --new-credential: the node list is too long for one"
				" command line; write the line by hand (docs/operations.md)\n");
		goto cleanup;
	}
	rc = auth_credentials_parse(line, (size_t)n, &check, &err);
	if (rc) {
		fprintf(stderr, "sysom-server: --new-credential: %s\n", err.message);
		goto cleanup;
	}
	printf("%s\n%s\n", token, line);
	status = fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
cleanup:
	auth_credentials_free(check);
	explicit_bzero(token, sizeof(token));
	return status;
}

int main(int argc, char **argv)
{
	enum sysom_log_level level = SYSOM_LOG_INFO;
	const char *config = sysom_options_peek_argv(argc, argv, "config");
	char err[512], host[256];
	uint16_t port;
	int rc, status = EXIT_USAGE;

	sysom_log_setup("sysom-server", level);
	if (config && sysom_options_load_file(options, NOPTIONS, config, err, sizeof(err))) {
		fprintf(stderr, "sysom-server: %s\n", err);
		goto cleanup;
	}
	rc = sysom_options_parse_argv(options, NOPTIONS, argc, argv, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "sysom-server: %s\n", err);
		goto cleanup;
	}
	if (rc < argc && !cfg.new_credential) {
		fprintf(stderr, "sysom-server: unexpected argument '%s' (see --help)\n", argv[rc]);
		goto cleanup;
	}
	if (cfg.help) {
		usage(stdout);
		status = EXIT_SUCCESS;
		goto cleanup;
	}
	if (cfg.version) {
		printf("sysom-server %s\n", SYSOM_VERSION);
		status = EXIT_SUCCESS;
		goto cleanup;
	}
	if (cfg.new_credential) {
		status = credential_issue(argc - rc, argv + rc);
		goto cleanup;
	}
	if (cfg.log_level && sysom_log_level_parse(cfg.log_level, &level)) {
		fprintf(stderr, "sysom-server: --log-level: '%s' is not error, warn, info or debug\n",
			cfg.log_level);
		goto cleanup;
	}
	if (!cfg.data_dir || !*cfg.data_dir) {
		fprintf(stderr, "sysom-server: --data-dir is required (see --help)\n");
		goto cleanup;
	}
	if (!cfg.listen && !(cfg.listen = strdup("127.0.0.1:8080"))) {
		fprintf(stderr, "sysom-server: out of memory\n");
		status = EXIT_FAILURE;
		goto cleanup;
	}
	if (listen_parse(cfg.listen, host, sizeof(host), &port)) {
		fprintf(stderr, "sysom-server: --listen: '%s' is not HOST:PORT (e.g. 127.0.0.1:8080,"
				" [::1]:8080)\n", cfg.listen);
		goto cleanup;
	}
	if (cfg.retention_days && rollup_days() && rollup_days() < cfg.retention_days) {
		fprintf(stderr, "sysom-server: --rollup-retention-days (%u) must be at least"
				" --retention-days (%u), or 0 to keep rollups\n", rollup_days(),
			cfg.retention_days);
		goto cleanup;
	}
	if (decode_memory_check(err, sizeof(err))) {
		fprintf(stderr, "sysom-server: %s\n", err);
		goto cleanup;
	}
	sysom_log_setup("sysom-server", level);
	status = run(host, port);
cleanup:
	sysom_options_free(options, NOPTIONS);
	return status;
}
