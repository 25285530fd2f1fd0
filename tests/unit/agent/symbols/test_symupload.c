/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol upload against an in-test server implementing the symbols contract on 127.0.0.1. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "agent/node/procmaps.h"
#include "agent/node/proctrack.h"
#include "agent/symbols/symupload.h"
#include "common/elf_buildid.h"
#include "common/error.h"
#include "tests/support/stub_http.h"
#include "tests/support/batch_fixture.h"

#define NS 1000000000ull
#define WAIT_S 30 /* bound on waiting for the thread: exceeding it fails the test */
#define TOKEN "sym-t0ken"
#define CHUNK 4096u
#define MAX_FILES 32
#define MAX_PUTS 512

/* ---------------------------------------------------------------------------------------- */
/* Injected time */

struct hooks {
	pthread_mutex_t lock;
	uint64_t now;
	uint64_t sleeps[256];
	size_t nsleeps;
	uint64_t slept;   /* total */
};

static uint64_t hook_now(void *ctx)
{
	struct hooks *h = ctx;

	pthread_mutex_lock(&h->lock);
	uint64_t t = h->now;
	pthread_mutex_unlock(&h->lock);
	return t;
}

static void hook_sleep(void *ctx, uint64_t ns)
{
	struct hooks *h = ctx;

	pthread_mutex_lock(&h->lock);
	if (h->nsleeps < 256)
		h->sleeps[h->nsleeps++] = ns;
	h->slept += ns;
	h->now += ns;
	pthread_mutex_unlock(&h->lock);
}

/* Maximal jitter: backoff delays are their caps. */
static uint64_t hook_random(void *ctx)
{
	(void)ctx;
	return UINT64_MAX;
}

/* ---------------------------------------------------------------------------------------- */
/* Events */

struct recorded_event {
	enum symupload_event_kind kind;
	char path[256];
	char build_id[130];
	char debug_path[256];
	uint64_t executable_bytes, debuginfo_bytes;
	int status;
	uint64_t delay_ms;
	char message[256];
};

struct events {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct recorded_event ev[64];
	size_t n;
	size_t count[8];
};

static void on_event(void *ctx, const struct symupload_event *ev)
{
	struct events *e = ctx;

	/* No cmocka asserts here: this runs on the upload thread. */
	pthread_mutex_lock(&e->lock);
	if (e->n < 64 && ev->kind != SYMUPLOAD_EVENT_PRESENT) {
		struct recorded_event *r = &e->ev[e->n++];
		r->kind = ev->kind;
		snprintf(r->path, sizeof(r->path), "%s", ev->path);
		snprintf(r->build_id, sizeof(r->build_id), "%s", ev->build_id);
		snprintf(r->debug_path, sizeof(r->debug_path), "%s", ev->debug_path ? ev->debug_path : "");
		r->executable_bytes = ev->executable_bytes;
		r->debuginfo_bytes = ev->debuginfo_bytes;
		r->status = ev->http_status;
		r->delay_ms = ev->delay_ms;
		snprintf(r->message, sizeof(r->message), "%s", ev->message);
	}
	if (ev->kind < 8)
		e->count[ev->kind]++;
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
}

static bool events_wait(struct events *e, enum symupload_event_kind kind, size_t n)
{
	struct timespec ts;
	bool ok = true;

	stub_http_deadline(&ts, WAIT_S);
	pthread_mutex_lock(&e->lock);
	while (e->count[kind] < n && ok)
		ok = pthread_cond_timedwait(&e->cond, &e->lock, &ts) == 0 || e->count[kind] >= n;
	if (!ok) {
		/* Say what happened instead. */
		print_message("# waited for %zu events of kind %d, saw %zu; events:\n", n, kind,
			      e->count[kind]);
		for (size_t i = 0; i < e->n; i++)
			print_message("#   kind %d %s status %d: %s\n", e->ev[i].kind, e->ev[i].path,
				      e->ev[i].status, e->ev[i].message);
	}
	pthread_mutex_unlock(&e->lock);
	return ok;
}

static size_t events_count(struct events *e, enum symupload_event_kind kind)
{
	pthread_mutex_lock(&e->lock);
	size_t n = e->count[kind];
	pthread_mutex_unlock(&e->lock);
	return n;
}

static const struct recorded_event *find_event(struct events *e, enum symupload_event_kind kind)
{
	for (size_t i = 0; i < e->n; i++)
		if (e->ev[i].kind == kind)
			return &e->ev[i];
	return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* The server side of the contract, kept in memory */

struct fake_file {
	char hex[130];
	int part;            /* 0 executable, 1 debuginfo */
	bool stored;
	char upload_id[80];
	char hash[80];       /* X-Sysom-Content-Hash of the current upload */
	char identity[32];
	uint8_t *data;
	uint64_t received, total;
};

struct put_record {
	char hex[130];
	int part;
	uint64_t start, end, total; /* Content-Range */
	char upload_id[80];
	uint64_t at_ns;      /* injected clock when it arrived */
	int status;          /* answered */
};

struct symsrv {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct hooks *hooks;
	struct fake_file files[MAX_FILES];
	size_t nfiles;
	bool want_debug;     /* ask for debug files */
	bool has_everything; /* answer every missing query with nothing missing */
	/* Injections. */
	int query_status[8];          /* answers of the next missing queries (0: normal) */
	const char *query_body[8];
	size_t query_script, query_next;
	int put_status[8];            /* answers of the next PUTs before looking (0: normal) */
	const char *put_headers[8];
	size_t put_script, put_next;
	long accept_chunks;           /* chunks accepted before every PUT answers 503 (-1 off) */
	int lose_chunk;               /* forget the N-th accepted chunk (answer 202 anyway) */
	bool stall_puts;              /* hold every PUT until the client goes away */
	/* Records. */
	size_t nqueries;
	size_t query_sizes[64];
	char **queried;               /* every hex queried, in order */
	size_t nqueried, queried_cap;
	struct put_record puts[MAX_PUTS];
	size_t nputs;
	size_t conflicts;             /* 409s answered */
	size_t accepted;              /* chunks appended */
	size_t hash_mismatches;
	size_t bad_requests;          /* PUTs violating the contract (headers) */
};

static struct fake_file *srv_file(struct symsrv *s, const char *hex, int part, bool create)
{
	for (size_t i = 0; i < s->nfiles; i++)
		if (s->files[i].part == part && strcmp(s->files[i].hex, hex) == 0)
			return &s->files[i];
	if (!create || s->nfiles == MAX_FILES)
		return NULL;
	struct fake_file *f = &s->files[s->nfiles++];
	memset(f, 0, sizeof(*f));
	snprintf(f->hex, sizeof(f->hex), "%s", hex);
	f->part = part;
	return f;
}

static void hash_hex(const void *data, size_t len, char out[33])
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, XXH3_128bits(data, len));
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", c.digest[i]);
}

static void reply_json(struct stub_reply *r, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void reply_json(struct stub_reply *r, int status, const char *fmt, ...)
{
	va_list ap;
	char *body = NULL;

	va_start(ap, fmt);
	if (vasprintf(&body, fmt, ap) < 0)
		body = NULL;
	va_end(ap);
	r->status = status;
	r->body = body;
	snprintf(r->headers, sizeof(r->headers), "Content-Type: application/json\r\n");
}

static void handle_query(struct symsrv *s, const struct stub_request *req, struct stub_reply *r)
{
	const char *body = (const char *)req->body, *end = body + req->body_len, *p = body;
	size_t cap = 64, len = 0, count = 0;
	char *out = malloc(cap);

	if (s->query_next < s->query_script) {
		size_t i = s->query_next++;
		if (s->query_status[i]) {
			free(out);
			r->status = s->query_status[i];
			r->body = strdup(s->query_body[i] ? s->query_body[i] : "");
			return;
		}
	}
	len = (size_t)snprintf(out, cap, "{\"missing\":[");
	while ((p = memmem(p, (size_t)(end - p), "\"build_id\":\"", 12)) != NULL) {
		char hex[130] = "";
		p += 12;
		const char *q = memchr(p, '"', (size_t)(end - p));
		if (!q || q - p >= (long)sizeof(hex))
			break;
		memcpy(hex, p, (size_t)(q - p));
		count++;
		if (s->nqueried == s->queried_cap) {
			s->queried_cap = s->queried_cap ? s->queried_cap * 2 : 256;
			s->queried = realloc(s->queried, s->queried_cap * sizeof(*s->queried));
		}
		s->queried[s->nqueried++] = strdup(hex);
		struct fake_file *exe = srv_file(s, hex, 0, false), *dbg = srv_file(s, hex, 1, false);
		bool need_exe = !exe || !exe->stored, need_dbg = s->want_debug && (!dbg || !dbg->stored);
		if ((!need_exe && !need_dbg) || s->has_everything)
			continue;
		while (len + 256 > cap)
			out = realloc(out, cap *= 2);
		len += (size_t)snprintf(out + len, cap - len,
					"%s{\"build_id\":\"%s\",\"executable\":%s,\"debuginfo\":%s,\"x\":[1,{}]}",
					out[len - 1] == '[' ? "" : ",", hex, need_exe ? "true" : "false",
					need_dbg ? "true" : "false");
	}
	while (len + 64 > cap)
		out = realloc(out, cap *= 2);
	snprintf(out + len, cap - len, "],\"server\":\"fake \\\"1\\\"\"}");
	if (s->nqueries < 64)
		s->query_sizes[s->nqueries] = count;
	s->nqueries++;
	r->status = 200;
	r->body = out;
}

static void handle_put(struct symsrv *s, const struct stub_request *req, struct stub_reply *r)
{
	char hex[130] = "", part_name[32] = "", range[128], upload_id[80], hash[80], ident[32];
	uint64_t start, end, total;
	struct put_record *rec = s->nputs < MAX_PUTS ? &s->puts[s->nputs] : NULL;

	s->nputs++;
	if (sscanf(req->path, "/api/v1/symbols/%129[0-9a-f]/%31s", hex, part_name) != 2 ||
	    !stub_http_header_in(req->headers, "Content-Range", range, sizeof(range)) ||
	    sscanf(range, "bytes %" SCNu64 "-%" SCNu64 "/%" SCNu64, &start, &end, &total) != 3 ||
	    !stub_http_header_in(req->headers, "X-Sysom-Upload-Id", upload_id, sizeof(upload_id)) ||
	    !stub_http_header_in(req->headers, "X-Sysom-Content-Hash", hash, sizeof(hash)) ||
	    !stub_http_header_in(req->headers, "X-Sysom-Identity", ident, sizeof(ident)) ||
	    end < start || end >= total || req->body_len != end - start + 1 ||
	    strlen(upload_id) < 16 || strlen(upload_id) > 64 || strncmp(hash, "xxh3-128:", 9) != 0 ||
	    (strcmp(part_name, "executable") != 0 && strcmp(part_name, "debuginfo") != 0)) {
		s->bad_requests++;
		reply_json(r, 400, "{\"error\":\"bad request\"}");
		return;
	}
	int part = strcmp(part_name, "debuginfo") == 0;
	if (rec) {
		snprintf(rec->hex, sizeof(rec->hex), "%s", hex);
		rec->part = part;
		rec->start = start;
		rec->end = end;
		rec->total = total;
		snprintf(rec->upload_id, sizeof(rec->upload_id), "%s", upload_id);
		rec->at_ns = hook_now(s->hooks);
	}
	if (s->stall_puts) {
		r->stall = true;
		return;
	}
	if (s->put_next < s->put_script) {
		size_t i = s->put_next++;
		if (s->put_status[i]) {
			reply_json(r, s->put_status[i], "{\"status\":\"%s\"}",
				   s->put_status[i] == 200 ? "present" : "scripted");
			if (s->put_headers[i])
				snprintf(r->headers, sizeof(r->headers), "%s", s->put_headers[i]);
			if (s->put_status[i] == 200)
				srv_file(s, hex, part, true)->stored = true;
			goto done;
		}
	}
	struct fake_file *f = srv_file(s, hex, part, true);
	if (f->stored) {
		reply_json(r, 200, "{\"status\":\"present\"}");
		goto done;
	}
	if (strcmp(f->upload_id, upload_id) != 0 || f->total != total) {
		/* A new upload replaces an abandoned one. */
		free(f->data);
		f->data = calloc(1, total);
		f->received = 0;
		f->total = total;
		snprintf(f->upload_id, sizeof(f->upload_id), "%s", upload_id);
	}
	snprintf(f->hash, sizeof(f->hash), "%s", hash);
	snprintf(f->identity, sizeof(f->identity), "%s", ident);
	if (start != f->received) {
		s->conflicts++;
		reply_json(r, 409, "{\"error\":\"conflict\",\"resume_at\":%" PRIu64 "}", f->received);
		goto done;
	}
	if (s->accept_chunks == 0) {
		reply_json(r, 503, "{\"error\":\"unavailable\"}");
		goto done;
	}
	if (s->accept_chunks > 0)
		s->accept_chunks--;
	memcpy(f->data + start, req->body, req->body_len);
	f->received = end + 1;
	s->accepted++;
	if (s->lose_chunk && (size_t)s->lose_chunk == s->accepted) {
		f->received = start; /* acknowledged, then lost (crash before fsync) */
		reply_json(r, 202, "{\"status\":\"partial\",\"received\":%" PRIu64 "}", end + 1);
		goto done;
	}
	if (f->received < total) {
		reply_json(r, 202, "{\"status\":\"partial\",\"received\":%" PRIu64 "}", f->received);
		goto done;
	}
	char want[33];
	hash_hex(f->data, total, want);
	if (strcmp(hash + 9, want) != 0) {
		s->hash_mismatches++;
		f->received = 0;
		reply_json(r, 422, "{\"error\":\"content hash mismatch\"}");
		goto done;
	}
	f->stored = true;
	reply_json(r, 201, "{\"status\":\"stored\",\"bytes\":%" PRIu64 "}", total);
done:
	if (rec)
		rec->status = r->status;
}

static void srv_handler(void *ctx, const struct stub_request *req, struct stub_reply *reply)
{
	struct symsrv *s = ctx;
	char auth[128];

	pthread_mutex_lock(&s->lock);
	if (!stub_http_header_in(req->headers, "Authorization", auth, sizeof(auth)) ||
	    strcmp(auth, "Bearer " TOKEN) != 0)
		reply_json(reply, 401, "{\"error\":\"unauthorized\"}");
	else if (strcmp(req->method, "POST") == 0 && strcmp(req->path, SYMUPLOAD_MISSING_PATH) == 0)
		handle_query(s, req, reply);
	else if (strcmp(req->method, "PUT") == 0)
		handle_put(s, req, reply);
	else
		reply_json(reply, 404, "{\"error\":\"no such route\"}");
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static void srv_free(struct symsrv *s)
{
	for (size_t i = 0; i < s->nfiles; i++)
		free(s->files[i].data);
	for (size_t i = 0; i < s->nqueried; i++)
		free(s->queried[i]);
	free(s->queried);
	s->nfiles = 0;
	s->nqueried = 0;
	s->queried = NULL;
	s->queried_cap = 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Fixture */

struct fixture {
	char base[64];
	char state[128], debug[128], bin[128];
	struct stub_http *http;
	struct symsrv srv;
	struct hooks hooks;
	struct events events;
	struct symupload *u;
	char url[64];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	snprintf(f->base, sizeof(f->base), "/tmp/h-symup-XXXXXX");
	if (!mkdtemp(f->base))
		return -1;
	snprintf(f->state, sizeof(f->state), "%s/state", f->base);
	snprintf(f->debug, sizeof(f->debug), "%s/debug", f->base);
	snprintf(f->bin, sizeof(f->bin), "%s/bin", f->base);
	if (mkdir(f->state, 0700) || mkdir(f->debug, 0700) || mkdir(f->bin, 0700))
		return -1;
	pthread_mutex_init(&f->hooks.lock, NULL);
	f->hooks.now = 1000 * NS;
	pthread_mutex_init(&f->events.lock, NULL);
	pthread_cond_init(&f->events.cond, NULL);
	pthread_mutex_init(&f->srv.lock, NULL);
	pthread_cond_init(&f->srv.cond, NULL);
	f->srv.hooks = &f->hooks;
	f->srv.accept_chunks = -1;
	f->srv.want_debug = true;
	f->http = stub_http_start_handler(srv_handler, &f->srv);
	snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%u", f->http->port);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	symupload_free(f->u);
	stub_http_stop(f->http);
	srv_free(&f->srv);
	fixture_tmpdir_remove(f->base);
	pthread_mutex_destroy(&f->hooks.lock);
	pthread_cond_destroy(&f->events.cond);
	pthread_mutex_destroy(&f->events.lock);
	pthread_cond_destroy(&f->srv.cond);
	pthread_mutex_destroy(&f->srv.lock);
	free(f);
	return 0;
}

/* Options with the injected clock and maximal jitter, 4 KiB chunks, no rate limit. */
static struct symupload_options options(struct fixture *f)
{
	return (struct symupload_options){
		.server_url = f->url,
		.token = TOKEN,
		.state_dir = f->state,
		.chunk_bytes = CHUNK,
		.query_batch = 1,
		.query_interval_s = 5,
		.backoff_initial_s = 1,
		.backoff_max_s = 60,
		.request_timeout_s = WAIT_S,
		.debug_root = f->debug,
		.on_event = on_event,
		.event_ctx = &f->events,
		.now_ns = hook_now,
		.sleep_ns = hook_sleep,
		.random_u64 = hook_random,
		.hook_ctx = &f->hooks,
	};
}

static struct symupload *create(struct fixture *f, const struct symupload_options *o)
{
	struct symupload *u = NULL;

	assert_null(f->u);
	assert_int_equal(symupload_new(o, &u), 0);
	assert_non_null(u);
	f->u = u;
	return u;
}

static struct symupload *start_upload(struct fixture *f, const struct symupload_options *o)
{
	struct symupload *u = create(f, o);

	assert_int_equal(symupload_start(u), 0);
	return u;
}

static void finish(struct fixture *f)
{
	symupload_free(f->u);
	f->u = NULL;
}

/* A test ELF: `path` (stripped, optionally with a .gnu_debuglink) and `debug` (its debug file). */
struct elf_fixture {
	char path[256];
	char debug[256];
	struct sysom_build_id id;
	uint8_t *bytes, *debug_bytes;
	size_t len, debug_len;
};

static uint8_t *read_file(const char *path, size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	uint8_t *buf = malloc((size_t)st.st_size + 1);
	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

static void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
}

static void identity_of(const char *path, struct sysom_build_id *id)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(sysom_object_identity(fd, id), 0);
	close(fd);
}

/* Compiles a small program (distinct per `variant`) with gcc -g, splits its debug info out and
 * strips it, adding a debug link when asked. Skips the test without a compiler. */
static void build_elf(struct fixture *f, const char *name, int variant, bool debuglink,
		      struct elf_fixture *e)
{
	char src[256], cmd[2048];

	if (system("command -v gcc >/dev/null && command -v objcopy >/dev/null") != 0) {
		print_message("# gcc and objcopy are needed to build the test ELF files\n");
		skip();
	}
	memset(e, 0, sizeof(*e));
	snprintf(src, sizeof(src), "%s/%s.c", f->bin, name);
	snprintf(e->path, sizeof(e->path), "%s/%s", f->bin, name);
	snprintf(e->debug, sizeof(e->debug), "%s/%s.debug", f->bin, name);
	FILE *fp = fopen(src, "w");
	assert_non_null(fp);
	fprintf(fp, "#include <stdio.h>\n"
		    "static const unsigned char blob[40000] = { %d, 1, 2, 3 };\n"
		    "int helper_%d(int x) { return x * %d + blob[x %% 40000]; }\n"
		    "int main(int argc, char **argv) { (void)argv; printf(\"%%d\\n\", helper_%d(argc)); "
		    "return 0; }\n",
		variant, variant, variant + 3, variant);
	fclose(fp);
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && gcc -g -O0 -Wl,--build-id=sha1 -o '%s' '%s.c' && "
		 "objcopy --only-keep-debug '%s' '%s.debug' && objcopy --strip-debug '%s'%s%s%s",
		 f->bin, name, name, name, name, name, debuglink ? " && objcopy --add-gnu-debuglink='" : "",
		 debuglink ? name : "", debuglink ? ".debug' '" : "");
	if (debuglink) {
		size_t n = strlen(cmd);
		snprintf(cmd + n, sizeof(cmd) - n, "%s'", name);
	}
	assert_int_equal(system(cmd), 0);
	identity_of(e->path, &e->id);
	assert_int_equal(e->id.kind, SYSOM_OBJECT_ELF);
	e->bytes = read_file(e->path, &e->len);
	e->debug_bytes = read_file(e->debug, &e->debug_len);
}

static void elf_free(struct elf_fixture *e)
{
	free(e->bytes);
	free(e->debug_bytes);
	e->bytes = e->debug_bytes = NULL;
}

static void hex_of(const struct sysom_build_id *id, char out[130])
{
	sysom_build_id_hex(id, out, 130);
}

/* The server's file (asserted to exist). */
static struct fake_file *stored(struct fixture *f, const struct sysom_build_id *id, int part)
{
	char hex[130];

	hex_of(id, hex);
	struct fake_file *ff = srv_file(&f->srv, hex, part, false);
	assert_non_null(ff);
	return ff;
}

static void expect_stored(struct fixture *f, const struct sysom_build_id *id, int part,
			  const uint8_t *bytes, size_t len, const char *identity)
{
	struct fake_file *ff = stored(f, id, part);
	char want[33];

	assert_true(ff->stored);
	assert_int_equal(ff->total, len);
	assert_memory_equal(ff->data, bytes, len);
	hash_hex(bytes, len, want);
	assert_string_equal(ff->hash + 9, want);
	assert_string_equal(ff->identity, identity);
}

/* Lines of a state file (magic line excluded) containing `needle` (NULL: all). */
static size_t state_lines(struct fixture *f, const char *name, const char *needle)
{
	char path[256], line[512];
	size_t n = 0;

	snprintf(path, sizeof(path), "%s/%s", f->state, name);
	FILE *fp = fopen(path, "r");
	if (!fp)
		return 0;
	while (fgets(line, sizeof(line), fp))
		if (line[0] != '#' && (!needle || strstr(line, needle)))
			n++;
	fclose(fp);
	return n;
}

static void fake_id(struct sysom_build_id *id, uint32_t n, uint8_t kind)
{
	memset(id, 0, sizeof(*id));
	id->kind = kind;
	id->len = kind == SYSOM_OBJECT_FILE_HASH ? 16 : 20;
	for (int i = 0; i < id->len; i++)
		id->bytes[i] = (uint8_t)(0x5a ^ (n >> ((i % 4) * 8)) ^ (i * 37));
}

/* ---------------------------------------------------------------------------------------- */
/* Tests */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_missing_queries_in_batches(void **state)
{
	struct fixture *f = *state;
	enum { N = 5000 };
	char **want = calloc(N, sizeof(*want));
	struct symupload_stats st;
	char v[256];

	/* Offered before the thread runs: the first query takes the 4096 the contract allows,
	 * the rest waits for the query interval (the injected clock jumps it). */
	f->srv.has_everything = true;
	struct symupload_options o = options(f);
	o.query_batch = SYMUPLOAD_QUERY_MAX;
	o.queue_max = 8192;
	struct symupload *u = create(f, &o);
	for (uint32_t i = 0; i < N; i++) {
		struct sysom_build_id id;
		char path[64];
		fake_id(&id, i, i == 7 ? SYSOM_OBJECT_FILE_HASH : SYSOM_OBJECT_ELF);
		snprintf(path, sizeof(path), "/nonexistent/lib%u.so", i);
		assert_int_equal(symupload_offer(u, &id, path, 0, 0, 0), 0);
		want[i] = malloc(130);
		hex_of(&id, want[i]);
	}
	assert_int_equal(symupload_start(u), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_PRESENT, N));
	symupload_stop(u);
	symupload_stats(u, &st);
	assert_int_equal(st.queued, N);
	assert_int_equal(st.queries, 2);
	assert_int_equal(st.queried, N);
	assert_int_equal(st.present, N);
	assert_int_equal(st.missing, 0);
	assert_int_equal(st.waiting, 0);
	assert_int_equal(f->srv.nqueries, 2);
	assert_int_equal(f->srv.query_sizes[0], SYMUPLOAD_QUERY_MAX);
	assert_int_equal(f->srv.query_sizes[1], N - SYMUPLOAD_QUERY_MAX);
	/* The second query waited one query interval, no more. */
	assert_int_equal(f->hooks.nsleeps, 1);
	assert_int_equal(f->hooks.sleeps[0], 5 * NS);
	/* Every object exactly once. */
	assert_int_equal(f->srv.nqueried, N);
	qsort(want, N, sizeof(*want), cmp_str);
	qsort(f->srv.queried, N, sizeof(*f->srv.queried), cmp_str);
	for (size_t i = 0; i < N; i++)
		assert_string_equal(f->srv.queried[i], want[i]);
	/* The request itself. */
	assert_string_equal(f->http->reqs[0].method, "POST");
	assert_true(stub_http_header(f->http, 0, "Content-Type", v, sizeof(v)));
	assert_string_equal(v, "application/json");
	assert_true(stub_http_header(f->http, 0, "Authorization", v, sizeof(v)));
	assert_string_equal(v, "Bearer " TOKEN);
	char kind7[320];
	struct sysom_build_id id7;
	fake_id(&id7, 7, SYSOM_OBJECT_FILE_HASH);
	hex_of(&id7, v);
	snprintf(kind7, sizeof(kind7), "{\"build_id\":\"%s\",\"kind\":\"file-hash\"}", v);
	assert_non_null(memmem(f->http->reqs[0].body, f->http->reqs[0].body_len, kind7, strlen(kind7)));
	assert_non_null(memmem(f->http->reqs[0].body, f->http->reqs[0].body_len,
			       "\"kind\":\"elf\"", 12));
	/* All recorded as held by the server. */
	assert_int_equal(state_lines(f, SYMUPLOAD_UPLOADED_FILE, NULL), N);
	finish(f);
	for (size_t i = 0; i < N; i++)
		free(want[i]);
	free(want);
}

static void test_chunked_upload_with_debuglink(void **state)
{
	struct fixture *f = *state;
	struct elf_fixture e;
	struct symupload_stats st;
	char hex[130], v[256], first_id[80] = "";

	build_elf(f, "prog", 1, true, &e);
	struct symupload_options o = options(f);
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &e.id, e.path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_UPLOADED, 1));
	symupload_stop(u);

	expect_stored(f, &e.id, 0, e.bytes, e.len, "elf");
	expect_stored(f, &e.id, 1, e.debug_bytes, e.debug_len, "elf");
	assert_int_equal(f->srv.bad_requests, 0);
	assert_int_equal(f->srv.conflicts, 0);
	/* Chunks of 4 KiB in order, one upload id per file. */
	size_t exe_chunks = (e.len + CHUNK - 1) / CHUNK, dbg_chunks = (e.debug_len + CHUNK - 1) / CHUNK;
	assert_true(exe_chunks >= 3);
	assert_int_equal(f->srv.nputs, exe_chunks + dbg_chunks);
	for (size_t i = 0; i < f->srv.nputs; i++) {
		const struct put_record *p = &f->srv.puts[i];
		size_t k = i < exe_chunks ? i : i - exe_chunks;
		assert_int_equal(p->part, i < exe_chunks ? 0 : 1);
		assert_int_equal(p->start, k * CHUNK);
		assert_int_equal(p->total, i < exe_chunks ? e.len : e.debug_len);
		if (k == 0 && i == 0)
			snprintf(first_id, sizeof(first_id), "%s", p->upload_id);
		if (i < exe_chunks)
			assert_string_equal(p->upload_id, first_id);
		else
			assert_string_not_equal(p->upload_id, first_id);
		if (i > exe_chunks)
			assert_string_equal(p->upload_id, f->srv.puts[exe_chunks].upload_id);
	}
	assert_int_equal(strlen(first_id), 32);
	hex_of(&e.id, hex);
	snprintf(v, sizeof(v), "/api/v1/symbols/%s/executable", hex);
	assert_string_equal(f->http->reqs[1].path, v);
	assert_true(stub_http_header(f->http, 1, "Content-Type", v, sizeof(v)));
	assert_string_equal(v, "application/octet-stream");

	const struct recorded_event *ev = find_event(&f->events, SYMUPLOAD_EVENT_UPLOADED);
	assert_non_null(ev);
	assert_string_equal(ev->path, e.path);
	assert_string_equal(ev->build_id, hex);
	assert_int_equal(ev->executable_bytes, e.len);
	assert_int_equal(ev->debuginfo_bytes, e.debug_len);
	assert_string_equal(ev->debug_path, e.debug);
	symupload_stats(u, &st);
	assert_int_equal(st.uploaded_objects, 1);
	assert_int_equal(st.uploaded_files, 2);
	assert_int_equal(st.uploaded_bytes, e.len + e.debug_len);
	assert_int_equal(st.missing, 1);
	assert_int_equal(st.retries, 0);
	/* No rate limit: nothing waited. */
	assert_int_equal(f->hooks.nsleeps, 0);
	assert_int_equal(state_lines(f, SYMUPLOAD_UPLOADED_FILE, hex), 1);
	assert_int_equal(state_lines(f, SYMUPLOAD_INFLIGHT_FILE, NULL), 0);
	finish(f);
	elf_free(&e);
}

static void test_debuglink_crc_and_build_id_tree(void **state)
{
	struct fixture *f = *state;
	struct elf_fixture a, b;
	char path[512], hex[130];

	/* a: the debug link names a.debug; the one next to it is damaged (CRC differs, build ID
	 * the same), the good copy is in .debug/. */
	build_elf(f, "a", 2, true, &a);
	snprintf(path, sizeof(path), "%s/.debug", f->bin);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/.debug/a.debug", f->bin);
	assert_int_equal(rename(a.debug, path), 0);
	uint8_t *damaged = malloc(a.debug_len);
	memcpy(damaged, a.debug_bytes, a.debug_len);
	damaged[a.debug_len / 2] ^= 0xff;
	write_file(a.debug, damaged, a.debug_len);
	free(damaged);
	struct sysom_build_id same;
	identity_of(a.debug, &same);
	assert_memory_equal(same.bytes, a.id.bytes, a.id.len); /* only the CRC tells */

	/* b: no debug link; its debug file only in DEBUG_ROOT/.build-id/xx/rest.debug, next to a
	 * decoy with another build ID under a's name. */
	build_elf(f, "b", 3, false, &b);
	hex_of(&b.id, hex);
	snprintf(path, sizeof(path), "%s/.build-id", f->debug);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/.build-id/%.2s", f->debug, hex);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/.build-id/%.2s/%s.debug", f->debug, hex, hex + 2);
	assert_int_equal(rename(b.debug, path), 0);
	char ahex[130];
	hex_of(&a.id, ahex);
	snprintf(path, sizeof(path), "%s/.build-id/%.2s", f->debug, ahex);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/.build-id/%.2s/%s.debug", f->debug, ahex, ahex + 2);
	write_file(path, b.debug_bytes, b.debug_len); /* wrong build ID: must be ignored */

	struct symupload_options o = options(f);
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &a.id, a.path, 0, 0, 0), 0);
	assert_int_equal(symupload_offer(u, &b.id, b.path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_UPLOADED, 2));
	symupload_stop(u);
	expect_stored(f, &a.id, 0, a.bytes, a.len, "elf");
	expect_stored(f, &a.id, 1, a.debug_bytes, a.debug_len, "elf");
	expect_stored(f, &b.id, 0, b.bytes, b.len, "elf");
	expect_stored(f, &b.id, 1, b.debug_bytes, b.debug_len, "elf");
	for (size_t i = 0; i < f->events.n; i++) {
		if (strcmp(f->events.ev[i].path, a.path) == 0) {
			snprintf(path, sizeof(path), "%s/.debug/a.debug", f->bin);
			assert_string_equal(f->events.ev[i].debug_path, path);
		}
	}
	finish(f);
	elf_free(&a);
	elf_free(&b);
}

static void test_resume_after_conflict(void **state)
{
	struct fixture *f = *state;
	struct elf_fixture e;

	build_elf(f, "prog", 4, true, &e);
	f->srv.want_debug = false;
	f->srv.lose_chunk = 2; /* the server forgets chunk 2 after acknowledging it */
	struct symupload_options o = options(f);
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &e.id, e.path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_UPLOADED, 1));
	symupload_stop(u);
	expect_stored(f, &e.id, 0, e.bytes, e.len, "elf");
	assert_int_equal(f->srv.conflicts, 1);
	/* Chunk 3 was refused with resume_at = chunk 2's start; chunk 2 went again, same id. */
	assert_int_equal(f->srv.puts[2].start, 2 * CHUNK);
	assert_int_equal(f->srv.puts[2].status, 409);
	assert_int_equal(f->srv.puts[3].start, CHUNK);
	assert_int_equal(f->srv.puts[4].start, 2 * CHUNK);
	assert_string_equal(f->srv.puts[3].upload_id, f->srv.puts[0].upload_id);
	assert_int_equal(f->srv.nputs, (e.len + CHUNK - 1) / CHUNK + 2);
	/* The server only asked for the executable. */
	assert_null(srv_file(&f->srv, f->srv.puts[0].hex, 1, false));
	finish(f);
	elf_free(&e);
}

static void test_present_stops(void **state)
{
	struct fixture *f = *state;
	struct elf_fixture e;
	struct symupload_stats st;
	char hex[130];

	build_elf(f, "prog", 5, true, &e);
	f->srv.want_debug = false;
	f->srv.put_status[0] = 200; /* someone else uploaded it meanwhile */
	f->srv.put_script = 1;
	struct symupload_options o = options(f);
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &e.id, e.path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_PRESENT, 1));
	symupload_stop(u);
	assert_int_equal(f->srv.nputs, 1);
	symupload_stats(u, &st);
	assert_int_equal(st.present, 1);
	assert_int_equal(st.uploaded_objects, 0);
	assert_int_equal(st.uploaded_files, 0);
	assert_int_equal(events_count(&f->events, SYMUPLOAD_EVENT_UPLOADED), 0);
	hex_of(&e.id, hex);
	assert_int_equal(state_lines(f, SYMUPLOAD_UPLOADED_FILE, hex), 1);
	assert_int_equal(state_lines(f, SYMUPLOAD_INFLIGHT_FILE, NULL), 0);
	finish(f);
	elf_free(&e);
}

static void test_transient_errors_back_off(void **state)
{
	struct fixture *f = *state;
	struct elf_fixture e;
	struct symupload_stats st;

	build_elf(f, "prog", 6, true, &e);
	f->srv.want_debug = false;
	/* The query: a 503, then an answer that is not JSON, then the real one. */
	f->srv.query_status[0] = 503;
	f->srv.query_status[1] = 200;
	f->srv.query_body[1] = "{\"missing\":[{\"build_id\":";
	f->srv.query_script = 2;
	/* The first chunk: 503 twice, then 429 with Retry-After, then accepted. */
	f->srv.put_status[0] = 503;
	f->srv.put_status[1] = 500;
	f->srv.put_status[2] = 429;
	f->srv.put_headers[2] = "Retry-After: 7\r\n";
	f->srv.put_script = 3;
	struct symupload_options o = options(f);
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &e.id, e.path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_UPLOADED, 1));
	symupload_stop(u);
	expect_stored(f, &e.id, 0, e.bytes, e.len, "elf");
	/* Full jitter at its cap: 1 s, 2 s for the query; the counter restarts after the good
	 * answer: 1 s, 2 s, then the server's 7 s with the third failure's jitter (4 s) on top. */
	assert_int_equal(f->hooks.nsleeps, 5);
	const uint64_t want[] = { 1, 2, 1, 2, 11 };
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(f->hooks.sleeps[i], want[i] * NS);
	assert_int_equal(events_count(&f->events, SYMUPLOAD_EVENT_RETRY), 5);
	const struct recorded_event *ev = find_event(&f->events, SYMUPLOAD_EVENT_RETRY);
	assert_int_equal(ev->status, 503);
	assert_int_equal(ev->delay_ms, 1000);
	symupload_stats(u, &st);
	assert_int_equal(st.retries, 5);
	assert_int_equal(st.queries, 1);
	/* The failed chunk went again with the same upload id and range. */
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(f->srv.puts[i].start, 0);
		assert_string_equal(f->srv.puts[i].upload_id, f->srv.puts[0].upload_id);
	}
	finish(f);
	elf_free(&e);
}

static void test_client_error_gives_up(void **state)
{
	struct fixture *f = *state;
	struct elf_fixture a, b;
	struct symupload_stats st;
	char hex[130];

	build_elf(f, "a", 7, true, &a);
	build_elf(f, "b", 8, true, &b);
	f->srv.want_debug = false;
	f->srv.put_status[0] = 422;
	f->srv.put_script = 1;
	struct symupload_options o = options(f);
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &a.id, a.path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_FAILED, 1));
	assert_int_equal(symupload_offer(u, &b.id, b.path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_UPLOADED, 1));
	/* Offered again in the same run: ignored. */
	assert_int_equal(symupload_offer(u, &a.id, a.path, 0, 0, 0), 1);
	symupload_stop(u);
	const struct recorded_event *ev = find_event(&f->events, SYMUPLOAD_EVENT_FAILED);
	assert_int_equal(ev->status, 422);
	assert_string_equal(ev->path, a.path);
	/* a got exactly one PUT; b all of its chunks. */
	hex_of(&a.id, hex);
	size_t a_puts = 0;
	for (size_t i = 0; i < f->srv.nputs; i++)
		a_puts += strcmp(f->srv.puts[i].hex, hex) == 0;
	assert_int_equal(a_puts, 1);
	expect_stored(f, &b.id, 0, b.bytes, b.len, "elf");
	symupload_stats(u, &st);
	assert_int_equal(st.failed, 1);
	assert_int_equal(st.retries, 0);
	assert_int_equal(st.uploaded_objects, 1);
	assert_int_equal(state_lines(f, SYMUPLOAD_UPLOADED_FILE, hex), 0);
	assert_int_equal(state_lines(f, SYMUPLOAD_INFLIGHT_FILE, hex), 0);
	finish(f);
	elf_free(&a);
	elf_free(&b);
}

static void test_restart_does_not_upload_again(void **state)
{
	struct fixture *f = *state;
	struct elf_fixture a, b;
	struct symupload_stats st;
	char hex[130];

	build_elf(f, "a", 9, true, &a);
	build_elf(f, "b", 10, true, &b);
	struct symupload_options o = options(f);
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &a.id, a.path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_UPLOADED, 1));
	finish(f);
	size_t puts = f->srv.nputs, queries = f->srv.nqueries;

	/* A new agent run, and a server that lost everything: a is still not sent again. */
	srv_free(&f->srv);
	u = start_upload(f, &o);
	symupload_stats(u, &st);
	assert_int_equal(st.known_uploaded, 1);
	assert_int_equal(symupload_offer(u, &a.id, a.path, 0, 0, 0), 1);
	assert_int_equal(symupload_offer(u, &b.id, b.path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_UPLOADED, 2));
	symupload_stop(u);
	assert_int_equal(f->srv.nqueries, queries + 1);
	assert_int_equal(f->srv.nqueried, 1); /* only b */
	hex_of(&b.id, hex);
	assert_string_equal(f->srv.queried[0], hex);
	hex_of(&a.id, hex);
	for (size_t i = puts; i < f->srv.nputs; i++)
		assert_string_not_equal(f->srv.puts[i].hex, hex);
	assert_int_equal(state_lines(f, SYMUPLOAD_UPLOADED_FILE, NULL), 2);
	finish(f);
	elf_free(&a);
	elf_free(&b);
}

static void test_restart_resumes_upload(void **state)
{
	struct fixture *f = *state;
	struct elf_fixture e;
	struct symupload_stats st;
	struct timespec t0, t1;
	char hex[130], path[256], line[512], id[80] = "";
	uint64_t offset = 0;

	build_elf(f, "prog", 11, true, &e);
	f->srv.want_debug = false;
	f->srv.accept_chunks = 2; /* then 503 */
	/* The real clock, and a long backoff that stop() must cut short. */
	struct symupload_options o = options(f);
	o.now_ns = NULL;
	o.sleep_ns = NULL;
	o.backoff_initial_s = 30;
	o.backoff_max_s = 30;
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &e.id, e.path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_RETRY, 1));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	finish(f);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true(t1.tv_sec - t0.tv_sec < 5);
	assert_int_equal(f->srv.nputs, 3);
	assert_int_equal(f->srv.accepted, 2);

	/* The upload id and the acknowledged offset are on disk. */
	hex_of(&e.id, hex);
	snprintf(path, sizeof(path), "%s/" SYMUPLOAD_INFLIGHT_FILE, f->state);
	FILE *fp = fopen(path, "r");
	assert_non_null(fp);
	assert_non_null(fgets(line, sizeof(line), fp));
	assert_string_equal(line, "# sysom symbols-inflight 1\n");
	assert_non_null(fgets(line, sizeof(line), fp));
	fclose(fp);
	char lhex[130], ident[16], part[16], hash[40];
	uint64_t total;
	assert_int_equal(sscanf(line, "%129s %15s %15s %79s %39s %" SCNu64 " %" SCNu64, lhex, ident,
				part, id, hash, &offset, &total), 7);
	assert_string_equal(lhex, hex);
	assert_string_equal(part, "executable");
	assert_string_equal(id, f->srv.puts[0].upload_id);
	assert_int_equal(offset, 2 * CHUNK);
	assert_int_equal(total, e.len);

	/* The next run resumes: same upload id, from the offset, no conflict. */
	f->srv.accept_chunks = -1;
	size_t before = f->srv.nputs;
	o = options(f);
	u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &e.id, e.path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_UPLOADED, 1));
	symupload_stop(u);
	assert_string_equal(f->srv.puts[before].upload_id, id);
	assert_int_equal(f->srv.puts[before].start, 2 * CHUNK);
	assert_int_equal(f->srv.conflicts, 0);
	expect_stored(f, &e.id, 0, e.bytes, e.len, "elf");
	symupload_stats(u, &st);
	assert_int_equal(st.resumed, 1);
	const struct recorded_event *ev = NULL;
	for (size_t i = 0; i < f->events.n; i++)
		if (f->events.ev[i].kind == SYMUPLOAD_EVENT_UPLOADED)
			ev = &f->events.ev[i];
	assert_non_null(ev);
	assert_int_equal(ev->executable_bytes, e.len - 2 * CHUNK);
	assert_int_equal(state_lines(f, SYMUPLOAD_INFLIGHT_FILE, NULL), 0);
	finish(f);
	elf_free(&e);
}

static void test_replaced_file_is_skipped(void **state)
{
	struct fixture *f = *state;
	struct elf_fixture a, b;
	struct symupload_stats st;

	build_elf(f, "a", 12, true, &a);
	build_elf(f, "b", 13, true, &b);
	/* a was mapped; the package was upgraded since: a's path now holds b. */
	assert_int_equal(rename(b.path, a.path), 0);
	struct symupload_options o = options(f);
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &a.id, a.path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_SKIPPED, 1));
	symupload_stop(u);
	assert_int_equal(f->srv.nputs, 0);
	symupload_stats(u, &st);
	assert_int_equal(st.skipped_identity_mismatch, 1);
	assert_int_equal(st.uploaded_files, 0);
	char hex[130];
	hex_of(&a.id, hex);
	assert_int_equal(state_lines(f, SYMUPLOAD_UPLOADED_FILE, hex), 0);
	finish(f);
	elf_free(&a);
	elf_free(&b);
}

static void test_deleted_file_through_map_files(void **state)
{
	struct fixture *f = *state;
	struct elf_fixture e;
	char path[128];

	build_elf(f, "prog", 14, true, &e);
	int fd = open(e.path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	void *map = mmap(NULL, e.len, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	assert_true(map != MAP_FAILED);
	uint64_t start = (uint64_t)(uintptr_t)map;
	uint64_t end = start + ((e.len + 4095) & ~(uint64_t)4095);
	snprintf(path, sizeof(path), "/proc/self/map_files/%" PRIx64 "-%" PRIx64, start, end);
	int probe = open(path, O_RDONLY | O_CLOEXEC);
	if (probe < 0) {
		munmap(map, e.len);
		print_message("# /proc/self/map_files needs CAP_SYS_ADMIN: %s\n", strerror(errno));
		skip();
	}
	close(probe);
	/* Deleted: only the mapping leads to it. */
	assert_int_equal(unlink(e.path), 0);
	struct symupload_options o = options(f);
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &e.id, e.path, (uint32_t)getpid(), start, end), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_UPLOADED, 1));
	symupload_stop(u);
	expect_stored(f, &e.id, 0, e.bytes, e.len, "elf");
	/* The debug file still sits where the link says. */
	expect_stored(f, &e.id, 1, e.debug_bytes, e.debug_len, "elf");
	munmap(map, e.len);
	finish(f);
	elf_free(&e);
}

static void test_rate_limit(void **state)
{
	struct fixture *f = *state;
	struct elf_fixture e;
	const uint64_t rate = 16384; /* bytes per second, 4 chunks */

	build_elf(f, "prog", 15, true, &e);
	struct symupload_options o = options(f);
	o.rate_bytes_per_s = rate;
	uint64_t t0 = f->hooks.now;
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &e.id, e.path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_UPLOADED, 1));
	symupload_stop(u);
	expect_stored(f, &e.id, 1, e.debug_bytes, e.debug_len, "elf");
	uint64_t total = e.len + e.debug_len, sent = 0;
	assert_true(total > 3 * rate);
	/* Every chunk left no earlier than the bytes before it and its own allow. */
	for (size_t i = 0; i < f->srv.nputs; i++) {
		const struct put_record *p = &f->srv.puts[i];
		sent += p->end - p->start + 1;
		assert_true(p->at_ns - t0 >= sent * NS / rate);
	}
	assert_int_equal(sent, total);
	uint64_t elapsed = f->hooks.now - t0;
	assert_true(elapsed >= total * NS / rate);
	assert_true(elapsed <= total * NS / rate + NS); /* and not much slower either */
	finish(f);
	elf_free(&e);
}

static void test_queue_full_drops(void **state)
{
	struct fixture *f = *state;
	struct symupload_stats st;
	struct sysom_build_id id;

	f->srv.want_debug = false;
	struct symupload_options o = options(f);
	o.queue_max = 4;
	o.query_batch = 4;
	struct symupload *u = create(f, &o);
	for (uint32_t i = 0; i < 6; i++) {
		fake_id(&id, i, SYSOM_OBJECT_ELF);
		assert_int_equal(symupload_offer(u, &id, "/nonexistent/lib.so", 0, 0, 0),
				 i < 4 ? 0 : -ENOSPC);
	}
	fake_id(&id, 1, SYSOM_OBJECT_ELF);
	assert_int_equal(symupload_offer(u, &id, "/nonexistent/lib.so", 0, 0, 0), 1);
	id.kind = SYSOM_OBJECT_ANON;
	assert_int_equal(symupload_offer(u, &id, "[anon:jit]", 0, 0, 0), -EINVAL);
	id.kind = SYSOM_OBJECT_ELF;
	assert_int_equal(symupload_offer(u, &id, "relative/path", 0, 0, 0), -EINVAL);
	symupload_stats(u, &st);
	assert_int_equal(st.queued, 4);
	assert_int_equal(st.dropped, 2);
	assert_int_equal(st.duplicates, 1);
	assert_int_equal(st.waiting, 4);
	assert_int_equal(symupload_start(u), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_SKIPPED, 4));
	symupload_stop(u);
	assert_int_equal(f->srv.nqueries, 1);
	assert_int_equal(f->srv.query_sizes[0], 4);
	symupload_stats(u, &st);
	assert_int_equal(st.skipped_unavailable, 4);
	/* Stopped: offers are refused. */
	fake_id(&id, 5, SYSOM_OBJECT_ELF);
	assert_int_equal(symupload_offer(u, &id, "/nonexistent/lib.so", 0, 0, 0), -ESHUTDOWN);
	finish(f);
}

static void test_offer_never_blocks(void **state)
{
	struct fixture *f = *state;
	struct elf_fixture e;
	struct symupload_stats st;
	struct timespec t0, t1;

	build_elf(f, "prog", 16, true, &e);
	f->srv.stall_puts = true; /* the upload thread sits in a request that never ends */
	struct symupload_options o = options(f);
	o.now_ns = NULL;
	o.sleep_ns = NULL;
	o.queue_max = 4096;
	o.request_timeout_s = 600;
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &e.id, e.path, 0, 0, 0), 0);
	/* Query, then the first PUT: held. */
	assert_true(stub_http_wait(f->http, 2));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint32_t i = 0; i < 3000; i++) {
		struct sysom_build_id id;
		fake_id(&id, 100000 + i, SYSOM_OBJECT_ELF);
		assert_int_equal(symupload_offer(u, &id, "/nonexistent/lib.so", 0, 0, 0), 0);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	/* Still in the request: the offers did not wait for it. */
	assert_int_equal(stub_http_count(f->http), 2);
	symupload_stats(u, &st);
	assert_int_equal(st.queued, 3001);
	assert_int_equal(st.uploaded_files, 0);
	assert_true(t1.tv_sec - t0.tv_sec < 5);
	/* stop() aborts the request in flight. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	symupload_stop(u);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true(t1.tv_sec - t0.tv_sec < 5);
	assert_int_equal(events_count(&f->events, SYMUPLOAD_EVENT_UPLOADED), 0);
	finish(f);
	elf_free(&e);
}

static int vdso_visit(void *ctx, const struct procmaps_entry *m)
{
	uint64_t *len = ctx;

	if (strcmp(m->path, "[vdso]") == 0)
		*len = m->end - m->start;
	return 0;
}

static void test_vdso_from_memory(void **state)
{
	struct fixture *f = *state;
	unsigned long image = getauxval(AT_SYSINFO_EHDR);
	struct sysom_build_id id;
	uint64_t len = 0;

	if (!image) {
		print_message("# no vDSO in this process\n");
		skip();
	}
	assert_true(procmaps_read(getpid(), NULL, false, 1u << 16, vdso_visit, &len, NULL) > 0);
	assert_true(len > 0);
	assert_int_equal(sysom_elf_build_id_memory((const void *)image, len, &id), 0);
	struct symupload_options o = options(f);
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &id, "[vdso]", (uint32_t)getpid(), image, image + len), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_UPLOADED, 1));
	symupload_stop(u);
	expect_stored(f, &id, 0, (const uint8_t *)image, len, "elf");
	const struct recorded_event *ev = find_event(&f->events, SYMUPLOAD_EVENT_UPLOADED);
	assert_string_equal(ev->path, "[vdso]");
	assert_int_equal(ev->executable_bytes, len);
	assert_int_equal(ev->debuginfo_bytes, 0); /* asked for, but none on this machine's root */
	finish(f);
}

static void test_content_hash_object(void **state)
{
	struct fixture *f = *state;
	struct sysom_build_id id;
	char path[256], hex[130];
	uint8_t data[10000];

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 131 + (i >> 7));
	snprintf(path, sizeof(path), "%s/script.bin", f->bin);
	write_file(path, data, sizeof(data));
	identity_of(path, &id);
	assert_int_equal(id.kind, SYSOM_OBJECT_FILE_HASH);
	struct symupload_options o = options(f);
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &id, path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_UPLOADED, 1));
	symupload_stop(u);
	expect_stored(f, &id, 0, data, sizeof(data), "file-hash");
	/* The content hash header is the identity itself. */
	hex_of(&id, hex);
	assert_string_equal(stored(f, &id, 0)->hash + 9, hex);
	assert_non_null(memmem(f->http->reqs[0].body, f->http->reqs[0].body_len,
			       "\"kind\":\"file-hash\"", 18));
	assert_int_equal(state_lines(f, SYMUPLOAD_UPLOADED_FILE, "file-hash"), 1);
	finish(f);
}

/* A large file gives way to a small object after each chunk: the small one is stored first,
 * and the large one goes on where it stopped (same upload id, contiguous ranges, each file
 * searched and hashed once). */
static void test_large_file_gives_way(void **state)
{
	struct fixture *f = *state;
	struct elf_fixture big;
	struct sysom_build_id small_id;
	struct symupload_stats st;
	char small_path[256], big_hex[130], small_hex[130], upload_id[80] = "";
	uint8_t small[5000];
	uint64_t next = 0;
	size_t first_small = SIZE_MAX, big_after_small = 0;

	build_elf(f, "big", 11, true, &big);
	for (size_t i = 0; i < sizeof(small); i++)
		small[i] = (uint8_t)(i * 7 + (i >> 5));
	snprintf(small_path, sizeof(small_path), "%s/small.bin", f->bin);
	write_file(small_path, small, sizeof(small));
	identity_of(small_path, &small_id);
	struct symupload_options o = options(f);
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &big.id, big.path, 0, 0, 0), 0);
	assert_int_equal(symupload_offer(u, &small_id, small_path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_UPLOADED, 2));
	symupload_stop(u);

	expect_stored(f, &big.id, 0, big.bytes, big.len, "elf");
	expect_stored(f, &big.id, 1, big.debug_bytes, big.debug_len, "elf");
	expect_stored(f, &small_id, 0, small, sizeof(small), "file-hash");
	assert_string_equal(f->events.ev[0].path, small_path);
	assert_string_equal(f->events.ev[1].path, big.path);
	hex_of(&big.id, big_hex);
	hex_of(&small_id, small_hex);
	for (size_t i = 0; i < f->srv.nputs; i++) {
		const struct put_record *p = &f->srv.puts[i];
		if (!strcmp(p->hex, small_hex) && first_small == SIZE_MAX)
			first_small = i;
		if (strcmp(p->hex, big_hex) || p->part != 0)
			continue;
		big_after_small += first_small != SIZE_MAX;
		/* The executable's chunks: in order, one upload id across the yields. */
		assert_int_equal(p->start, next);
		next = p->end + 1;
		if (!upload_id[0])
			snprintf(upload_id, sizeof(upload_id), "%s", p->upload_id);
		assert_string_equal(p->upload_id, upload_id);
	}
	assert_int_equal(next, big.len);
	assert_true(first_small != SIZE_MAX);
	assert_true(big_after_small > 0); /* the small object went in between */
	assert_int_equal(f->srv.conflicts, 0);
	symupload_stats(u, &st);
	assert_true(st.yields >= 1);
	assert_int_equal(st.resumed, 0);
	assert_int_equal(st.uploaded_objects, 2);
	assert_int_equal(state_lines(f, SYMUPLOAD_INFLIGHT_FILE, NULL), 0);
	finish(f);
	elf_free(&big);
}

static void test_too_large_is_skipped(void **state)
{
	struct fixture *f = *state;
	struct elf_fixture e;
	struct symupload_stats st;

	build_elf(f, "prog", 17, true, &e);
	struct symupload_options o = options(f);
	o.max_file_bytes = 8192;
	struct symupload *u = start_upload(f, &o);
	assert_int_equal(symupload_offer(u, &e.id, e.path, 0, 0, 0), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_SKIPPED, 1));
	symupload_stop(u);
	symupload_stats(u, &st);
	assert_int_equal(st.skipped_too_large, 1);
	assert_int_equal(f->srv.nputs, 0);
	finish(f);
	elf_free(&e);
}

static void test_state_file_bounded_and_repaired(void **state)
{
	struct fixture *f = *state;
	struct symupload_stats st;
	struct sysom_build_id id;
	char hex[130], path[256];

	f->srv.has_everything = true;
	struct symupload_options o = options(f);
	o.uploaded_max = 16;
	o.query_batch = 40;
	struct symupload *u = create(f, &o);
	for (uint32_t i = 0; i < 40; i++) {
		fake_id(&id, i, SYSOM_OBJECT_ELF);
		assert_int_equal(symupload_offer(u, &id, "/nonexistent/lib.so", 0, 0, 0), 0);
	}
	assert_int_equal(symupload_start(u), 0);
	assert_true(events_wait(&f->events, SYMUPLOAD_EVENT_PRESENT, 40));
	finish(f);
	size_t lines = state_lines(f, SYMUPLOAD_UPLOADED_FILE, NULL);
	assert_true(lines >= 12 && lines <= 16);
	fake_id(&id, 39, SYSOM_OBJECT_ELF);
	hex_of(&id, hex);
	assert_int_equal(state_lines(f, SYMUPLOAD_UPLOADED_FILE, hex), 1);
	fake_id(&id, 0, SYSOM_OBJECT_ELF);
	hex_of(&id, hex);
	assert_int_equal(state_lines(f, SYMUPLOAD_UPLOADED_FILE, hex), 0);

	/* A crash mid-append leaves a partial line: it is cut off, and the rest still counts. */
	snprintf(path, sizeof(path), "%s/" SYMUPLOAD_UPLOADED_FILE, f->state);
	int fd = open(path, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "0123abcd", 8), 8);
	close(fd);
	u = create(f, &o);
	symupload_stats(u, &st);
	assert_int_equal(st.known_uploaded, lines);
	assert_int_equal(st.state_errors, 0);
	fake_id(&id, 39, SYSOM_OBJECT_ELF);
	assert_int_equal(symupload_offer(u, &id, "/nonexistent/lib.so", 0, 0, 0), 1);
	finish(f);
	size_t len;
	char *text = (char *)read_file(path, &len);
	assert_true(len > 0 && text[len - 1] == '\n');
	assert_null(memmem(text, len, "0123abcd", 8));
	free(text);

	/* A foreign file is replaced, with a state error reported. */
	write_file(path, "not a state file\n", 17);
	u = create(f, &o);
	symupload_stats(u, &st);
	assert_int_equal(st.known_uploaded, 0);
	assert_int_equal(st.state_errors, 1);
	finish(f);
	text = (char *)read_file(path, &len);
	assert_int_equal(len, strlen("# sysom symbols-uploaded 1\n"));
	free(text);
}

static void test_bad_options(void **state)
{
	struct fixture *f = *state;
	struct symupload *u = NULL;
	char missing[256];

	struct symupload_options o = options(f);
	o.chunk_bytes = 100;
	assert_int_equal(symupload_new(&o, &u), -SYSOM_ECONFIG);
	o.chunk_bytes = SYMUPLOAD_CHUNK_MAX + 1;
	assert_int_equal(symupload_new(&o, &u), -SYSOM_ECONFIG);
	o = options(f);
	snprintf(missing, sizeof(missing), "%s/nope", f->base);
	o.state_dir = missing;
	assert_int_equal(symupload_new(&o, &u), -SYSOM_ECONFIG);
	o = options(f);
	o.server_url = "ftp://127.0.0.1:1";
	assert_int_equal(symupload_new(&o, &u), -SYSOM_ECONFIG);
	o = options(f);
	o.backoff_initial_s = 10;
	o.backoff_max_s = 5;
	assert_int_equal(symupload_new(&o, &u), -SYSOM_ECONFIG);
	o = options(f);
	o.query_batch = SYMUPLOAD_QUERY_MAX + 1;
	assert_int_equal(symupload_new(&o, &u), -SYSOM_ECONFIG);
	assert_null(u);
	symupload_free(NULL);
	symupload_stop(NULL);
}

/* The tracker announces each new file and vDSO identity once, with where it was mapped. */
struct seen_objects {
	char paths[256][256];
	uint32_t tgid[256];
	uint64_t start[256], end[256];
	size_t n;
};

static void on_new_object(void *ctx, const struct pt_object *obj, uint32_t tgid, uint64_t start,
			  uint64_t end)
{
	struct seen_objects *s = ctx;

	if (s->n < 256) {
		snprintf(s->paths[s->n], sizeof(s->paths[0]), "%s", obj->path);
		s->tgid[s->n] = tgid;
		s->start[s->n] = start;
		s->end[s->n] = end;
		s->n++;
	}
}

/* An address inside `path`'s executable mapping of process `p`, or 0. */
static uint64_t address_in(const struct pt_process *p, const char *path)
{
	for (uint32_t m = 0; m < p->mapping_count; m++)
		if (strcmp(p->mappings[m].object->path, path) == 0)
			return p->mappings[m].start + (p->mappings[m].end - p->mappings[m].start) / 2;
	return 0;
}

/* Objects are announced the first time a sampled address resolves into them (once), with
 * the mapping the address is in; mapped objects that no stack touches are not announced. */
static void test_proctrack_announces_new_objects(void **state)
{
	struct seen_objects *seen = calloc(1, sizeof(*seen));
	struct proctrack_options po;
	struct proctrack *pt = NULL;
	struct pt_resolved r;
	char exe[4096];

	(void)state;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(n > 0);
	exe[n] = '\0';
	proctrack_options_default(&po);
	po.on_new_object = on_new_object;
	po.object_ctx = seen;
	assert_int_equal(proctrack_new(&po, &pt), 0);
	struct pt_process *p = proctrack_get(pt, (uint32_t)getpid(), 0);
	assert_non_null(p);
	assert_true(p->mapping_count >= 3);
	assert_int_equal(seen->n, 0); /* reading the mappings announces nothing */

	uint64_t in_self = address_in(p, exe);
	assert_true(in_self != 0);
	proctrack_resolve(pt, p, in_self, &r);
	assert_int_equal(seen->n, 1);
	assert_string_equal(seen->paths[0], exe);
	assert_int_equal(seen->tgid[0], getpid());
	assert_true(seen->start[0] <= in_self && in_self < seen->end[0]);
	assert_true(r.object->sampled);
	proctrack_resolve(pt, p, in_self + 1, &r); /* the same object again: nothing new */
	assert_int_equal(seen->n, 1);

	uint64_t in_vdso = address_in(p, "[vdso]");
	if (in_vdso) {
		proctrack_resolve(pt, p, in_vdso, &r);
		assert_int_equal(seen->n, 2);
		assert_string_equal(seen->paths[1], "[vdso]");
	}
	/* Another incarnation mapping the same files: already announced, nothing new. */
	size_t before = seen->n;
	struct pt_process *again = proctrack_get(pt, (uint32_t)getpid(), 1);
	assert_non_null(again);
	proctrack_resolve(pt, again, address_in(again, exe), &r);
	assert_int_equal(seen->n, before);
	proctrack_free(pt);
	free(seen);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proctrack_announces_new_objects),
		cmocka_unit_test_setup_teardown(test_bad_options, setup, teardown),
		cmocka_unit_test_setup_teardown(test_queue_full_drops, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_queries_in_batches, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chunked_upload_with_debuglink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_debuglink_crc_and_build_id_tree, setup, teardown),
		cmocka_unit_test_setup_teardown(test_resume_after_conflict, setup, teardown),
		cmocka_unit_test_setup_teardown(test_present_stops, setup, teardown),
		cmocka_unit_test_setup_teardown(test_transient_errors_back_off, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_error_gives_up, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart_does_not_upload_again, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart_resumes_upload, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replaced_file_is_skipped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_deleted_file_through_map_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rate_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_offer_never_blocks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_vdso_from_memory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_content_hash_object, setup, teardown),
		cmocka_unit_test_setup_teardown(test_large_file_gives_way, setup, teardown),
		cmocka_unit_test_setup_teardown(test_too_large_is_skipped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_state_file_bounded_and_repaired, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
