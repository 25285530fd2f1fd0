/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol upload thread: missing queries in batches, verified files, chunked resumable PUTs. */
#include "agent/symbols/symupload.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include <xxhash.h>
#include <zlib.h>

#include "agent/ship/http_client.h"
#include "agent/node/procmaps.h"
#include "agent/ship/retry.h"
#include "common/bytes.h"
#include "common/error.h"
#include "common/hash.h"

#define NS_PER_S 1000000000ull
#define NS_PER_MS 1000000ull
#define HEX_MAX (2 * SYSOM_BUILD_ID_MAX + 1)
#define UPLOAD_ID_HEX 32                 /* 16 random bytes */
#define HASH_HEX 32                      /* XXH3-128 */
#define STATE_LINE_MAX 512               /* longest state line read */
#define RESPONSE_MAX (2u << 20)          /* a 4096-object missing answer fits */
#define DEBUGLINK_MAX 4096u              /* .gnu_debuglink section size bound */
#define VDSO_MAX (1u << 20)
#define STALL_MAX 8                      /* chunk answers without progress before backing off */
#define UPLOADED_MAGIC "# sysom symbols-uploaded 1"
#define INFLIGHT_MAGIC "# sysom symbols-inflight 1"

enum part { PART_EXECUTABLE = 0, PART_DEBUGINFO = 1 };

static const char *const part_names[2] = { "executable", "debuginfo" };

struct symupload;
static void take_offers(struct symupload *u);

/* ---------------------------------------------------------------------------------------- */
/* A set of identities: 128-bit keys in an open-addressing table with backward-shift delete */

struct idkey {
	uint64_t hi, lo; /* XXH3-128 of (kind, bytes); (0, 0) marks an empty slot */
};

struct idset {
	struct idkey *slots;
	uint32_t cap;   /* power of two, at least 2 * max */
	uint32_t count;
	uint32_t max;   /* idset_add refuses beyond */
};

static struct idkey id_key(const struct sysom_build_id *id)
{
	uint8_t buf[1 + SYSOM_BUILD_ID_MAX];
	size_t len = id->len <= SYSOM_BUILD_ID_MAX ? id->len : SYSOM_BUILD_ID_MAX;

	buf[0] = id->kind;
	memcpy(buf + 1, id->bytes, len);
	XXH128_hash_t h = XXH3_128bits(buf, 1 + len);
	struct idkey k = { h.high64, h.low64 };
	if (!k.hi && !k.lo)
		k.lo = 1;
	return k;
}

static int idset_init(struct idset *s, uint32_t max)
{
	uint32_t cap = 16;

	while (cap < 2u * max && cap < (1u << 30))
		cap <<= 1;
	s->slots = calloc(cap, sizeof(*s->slots));
	if (!s->slots)
		return -ENOMEM;
	s->cap = cap;
	s->count = 0;
	s->max = max < cap / 2 ? max : cap / 2;
	return 0;
}

static void idset_free(struct idset *s)
{
	free(s->slots);
	memset(s, 0, sizeof(*s));
}

static bool slot_empty(const struct idkey *k)
{
	return !k->hi && !k->lo;
}

/* The slot holding `k`, or the empty slot where it would go. */
static uint32_t idset_slot(const struct idset *s, struct idkey k)
{
	uint32_t mask = s->cap - 1;
	uint32_t i = (uint32_t)k.lo & mask;

	while (!slot_empty(&s->slots[i]) && (s->slots[i].hi != k.hi || s->slots[i].lo != k.lo))
		i = (i + 1) & mask;
	return i;
}

static bool idset_has(const struct idset *s, struct idkey k)
{
	return !slot_empty(&s->slots[idset_slot(s, k)]);
}

/* 1 added, 0 already there, -ENOSPC at max. */
static int idset_add(struct idset *s, struct idkey k)
{
	uint32_t i = idset_slot(s, k);

	if (!slot_empty(&s->slots[i]))
		return 0;
	if (s->count >= s->max)
		return -ENOSPC;
	s->slots[i] = k;
	s->count++;
	return 1;
}

static void idset_remove(struct idset *s, struct idkey k)
{
	uint32_t mask = s->cap - 1;
	uint32_t i = idset_slot(s, k), j = i;

	if (slot_empty(&s->slots[i]))
		return;
	/* Backward shift: move later entries of the probe run into the hole when their home
	 * slot does not lie cyclically in (i, j]. */
	for (;;) {
		j = (j + 1) & mask;
		if (slot_empty(&s->slots[j]))
			break;
		uint32_t home = (uint32_t)s->slots[j].lo & mask;
		bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
		if (stays)
			continue;
		s->slots[i] = s->slots[j];
		i = j;
	}
	s->slots[i] = (struct idkey){ 0, 0 };
	s->count--;
}

static void idset_clear(struct idset *s)
{
	memset(s->slots, 0, (size_t)s->cap * sizeof(*s->slots));
	s->count = 0;
}

/* ---------------------------------------------------------------------------------------- */
/* State */

/* An object waiting: in the offer queue, or in `pending` for a missing query. */
struct waiting {
	struct sysom_build_id id;
	char *path;         /* owned */
	uint32_t pid;
	uint64_t start, end;
	uint64_t since_ns;  /* when it entered `pending` */
};

/* What is known of one file of an item between attempts. */
struct part_state {
	bool hashed;
	uint64_t dev, ino, size, mtime_ns; /* the file the hash is of */
	uint8_t hash[16];
	bool done;          /* stored or present on the server */
	bool resumed;       /* counted in stats.resumed */
	uint64_t sent;      /* bytes acknowledged in this run */
};

/* An object the server lacks something of. */
struct item {
	struct waiting w;
	bool need[2];       /* per part: the server asked for it */
	struct part_state part[2];
	char *debug_path;   /* the debug file chosen last (owned), for the event */
};

/* A file upload begun and not finished (symbols-inflight). */
struct inflight {
	struct sysom_build_id id;
	uint8_t part;
	char upload_id[UPLOAD_ID_HEX + 1];
	char hash[HASH_HEX + 1];
	uint64_t offset, total;
	uint64_t seq;       /* age, for eviction */
};

struct symupload {
	/* Settings (immutable after new). */
	char *state_dir, *debug_root, *proc_root;
	uint64_t rate;
	uint32_t chunk;
	uint64_t max_file;
	uint32_t queue_max;
	uint32_t uploaded_max;
	uint32_t query_batch;
	uint64_t query_interval_ns;
	uint64_t backoff_initial_ns, backoff_max_ns;
	uint64_t request_timeout_ns;
	symupload_event_fn on_event;
	void *event_ctx;

	/* Shared with symupload_offer, under `lock` (held only for O(1) steps or copies). */
	pthread_mutex_t lock;
	pthread_cond_t cond;       /* offers, stop */
	pthread_t thread;
	bool running;
	bool closed;
	atomic_bool stopping;      /* also read without the lock by should_abort */
	struct waiting *queue;     /* ring of queue_max */
	uint32_t queue_head, queue_count;
	struct idset seen;
	struct symupload_stats stats;
	uint32_t backlog;          /* pending + work, published by the thread */

	/* Upload thread only (and new/free before/after it). */
	struct http_client *http;
	struct retry_clock clock;  /* its jitter source */
	struct waiting *pending;   /* SYMUPLOAD_QUERY_MAX, oldest first */
	uint32_t pending_count;
	struct item **work;        /* ring of SYMUPLOAD_WORK_MAX */
	uint32_t work_head, work_count;
	struct idset active;       /* in pending or work */
	struct idset done;         /* in symbols-uploaded */
	struct idset failed;       /* given up in this run */
	uint8_t *buf;              /* one chunk, while an item is processed */
	uint64_t next_attempt_ns;
	uint32_t failures;         /* consecutive */
	uint64_t tokens;           /* rate limiter: bytes available */
	uint64_t token_rem;        /* fraction of a byte, in byte-ns units of 1e9 */
	uint64_t token_ns;         /* last refill */
	int uploaded_fd;           /* symbols-uploaded, O_APPEND */
	uint32_t uploaded_lines;   /* valid lines in it */
	char *linebuf;             /* appends not yet written */
	size_t linebuf_len, linebuf_cap;
	struct inflight inflight[SYMUPLOAD_INFLIGHT_MAX];
	uint32_t inflight_count;
	uint64_t inflight_seq;
};

/* ---------------------------------------------------------------------------------------- */
/* Time, randomness, events */

static uint64_t now(struct symupload *u)
{
	return retry_clock_now(&u->clock);
}

static const char *identity_name(const struct sysom_build_id *id)
{
	return id->kind == SYSOM_OBJECT_FILE_HASH ? "file-hash" : "elf";
}

static void hex_of(const struct sysom_build_id *id, char out[HEX_MAX])
{
	sysom_build_id_hex(id, out, HEX_MAX);
}

static void bytes_hex(const uint8_t *b, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
}

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

#define STAT_ADD(u, field, n)                        \
	do {                                         \
		pthread_mutex_lock(&(u)->lock);      \
		(u)->stats.field += (n);             \
		pthread_mutex_unlock(&(u)->lock);    \
	} while (0)

static void state_error(struct symupload *u, int error, const char *what)
{
	char msg[SYMUPLOAD_MESSAGE_MAX];

	STAT_ADD(u, state_errors, 1);
	snprintf(msg, sizeof(msg), "%s: %s", what, sysom_strerror(error));
	emit_simple(u, SYMUPLOAD_EVENT_STATE_ERROR, NULL, 0, error, msg);
}

static bool stopping(struct symupload *u)
{
	return atomic_load(&u->stopping);
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
/* The server's answers (jansson; bodies are bounded by the HTTP client) */

/* One entry of a missing answer. */
struct missing_entry {
	char build_id[HEX_MAX];
	bool executable, debuginfo;
};

typedef void (*missing_fn)(void *ctx, const struct missing_entry *e);

/* Parses {"missing":[{"build_id":..,"executable":..,"debuginfo":..},...],...}. */
static int parse_missing(const void *body, size_t len, missing_fn fn, void *ctx)
{
	json_t *root = body ? json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
	json_t *missing = json_object_get(root, "missing");
	size_t i;
	json_t *item;
	int rc = 0;

	if (!json_is_object(root) || !json_is_array(missing)) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	json_array_foreach(missing, i, item) {
		struct missing_entry e = { .build_id = "" };
		const char *id = json_string_value(json_object_get(item, "build_id"));
		json_t *exe = json_object_get(item, "executable");
		json_t *dbg = json_object_get(item, "debuginfo");

		if (!json_is_object(item) || (exe && !json_is_boolean(exe)) ||
		    (dbg && !json_is_boolean(dbg))) {
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
		if (!id || strlen(id) >= sizeof(e.build_id))
			continue; /* nothing we asked about */
		snprintf(e.build_id, sizeof(e.build_id), "%s", id);
		e.executable = json_is_true(exe);
		e.debuginfo = json_is_true(dbg);
		fn(ctx, &e);
	}
cleanup:
	json_decref(root);
	return rc;
}

/* The integer member `name` of a top-level object; 0 or -SYSOM_ECORRUPT / -ENOENT. */
static int parse_uint_member(const void *body, size_t len, const char *name, uint64_t *out)
{
	json_t *root = body ? json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
	json_t *value = json_object_get(root, name);
	int rc = 0;

	if (!json_is_object(root))
		rc = -SYSOM_ECORRUPT;
	else if (!value)
		rc = -ENOENT;
	else if (!json_is_integer(value) || json_integer_value(value) < 0)
		rc = -SYSOM_ECORRUPT;
	else
		*out = (uint64_t)json_integer_value(value);
	json_decref(root);
	return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* File helpers */

static int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ESTALE; /* the file shrank since it was measured */
		done += (size_t)n;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd))
		rc = -errno;
	close(fd);
	return rc;
}

/*
 * Opens a regular file for reading without side effects on anything else: O_PATH first, a
 * regular-file check, then a reopen through /proc/self/fd (no FIFO or device is ever opened
 * for reading). 0 with *fd and *st set, or -errno (-EINVAL for non-regular files).
 */
static int open_regular(const char *path, int *fd, struct stat *st)
{
	char self[64];
	struct stat s;
	int pfd, rfd, rc = 0;

	pfd = open(path, O_PATH | O_CLOEXEC);
	if (pfd < 0)
		return -errno;
	if (fstat(pfd, &s)) {
		rc = -errno;
		goto cleanup;
	}
	if (!S_ISREG(s.st_mode)) {
		rc = -EINVAL;
		goto cleanup;
	}
	snprintf(self, sizeof(self), "/proc/self/fd/%d", pfd);
	rfd = open(self, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (rfd < 0) {
		rc = -errno;
		goto cleanup;
	}
	*fd = rfd;
	*st = s;
cleanup:
	close(pfd);
	return rc;
}

static uint64_t mtime_ns(const struct stat *st)
{
	return (uint64_t)st->st_mtim.tv_sec * NS_PER_S + (uint64_t)st->st_mtim.tv_nsec;
}

/* Streams bytes [0, size) of `fd` through u->buf into `fn`; -ECANCELED when stopped. */
typedef void (*scan_fn)(void *ctx, const uint8_t *data, size_t len);

static int scan_file(struct symupload *u, int fd, uint64_t size, scan_fn fn, void *ctx)
{
	for (uint64_t off = 0; off < size;) {
		size_t n = size - off < u->chunk ? (size_t)(size - off) : u->chunk;
		if (stopping(u))
			return -ECANCELED;
		int rc = pread_full(fd, u->buf, n, off);
		if (rc)
			return rc;
		fn(ctx, u->buf, n);
		off += n;
	}
	return 0;
}

static void xxh_update(void *ctx, const uint8_t *data, size_t len)
{
	XXH3_128bits_update(ctx, data, len);
}

/* XXH3-128 (canonical, big-endian) of bytes [0, size). */
static int hash_file(struct symupload *u, int fd, uint64_t size, uint8_t out[16])
{
	XXH3_state_t *state = XXH3_createState();
	XXH128_canonical_t canon;
	int rc;

	if (!state)
		return -ENOMEM;
	XXH3_128bits_reset(state);
	rc = scan_file(u, fd, size, xxh_update, state);
	if (rc)
		goto cleanup;
	XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(state));
	memcpy(out, canon.digest, 16);
cleanup:
	XXH3_freeState(state);
	return rc;
}

static void crc_update(void *ctx, const uint8_t *data, size_t len)
{
	uLong *crc = ctx;

	while (len) {
		uInt n = len > (1u << 30) ? (1u << 30) : (uInt)len;
		*crc = crc32(*crc, data, n);
		data += n;
		len -= n;
	}
}

/* ---------------------------------------------------------------------------------------- */
/* symbols-uploaded */

/* Reads '\n'-terminated lines with a fixed buffer. */
struct line_reader {
	int fd;
	char buf[8192];
	size_t len, pos;
	bool eof;
	uint64_t complete_end; /* file offset after the last complete line */
};

/* 1: a complete line in `line`; 2: a line too long (skipped); 0: end (a partial last line
 * is left out: complete_end tells where it begins); -errno. */
static int line_next(struct line_reader *r, char *line, size_t max)
{
	size_t n = 0;
	bool too_long = false;

	for (;;) {
		if (r->pos == r->len) {
			if (r->eof)
				return 0;
			ssize_t got = read(r->fd, r->buf, sizeof(r->buf));
			if (got < 0) {
				if (errno == EINTR)
					continue;
				return -errno;
			}
			if (got == 0) {
				r->eof = true;
				return 0;
			}
			r->len = (size_t)got;
			r->pos = 0;
		}
		char c = r->buf[r->pos++];
		if (c == '\n') {
			r->complete_end += n + 1;
			line[too_long ? 0 : n] = '\0';
			return too_long ? 2 : 1;
		}
		if (n + 1 >= max)
			too_long = true;
		else
			line[n] = c;
		n++;
	}
}

static int parse_uploaded_line(const char *line, struct sysom_build_id *out)
{
	char hex[HEX_MAX + 1], ident[16];
	int used = 0;
	uint8_t kind;

	if (sscanf(line, "%129s %15s%n", hex, ident, &used) != 2 || line[used] != '\0')
		return -EINVAL;
	if (strcmp(ident, "elf") == 0)
		kind = SYSOM_OBJECT_ELF;
	else if (strcmp(ident, "file-hash") == 0)
		kind = SYSOM_OBJECT_FILE_HASH;
	else
		return -EINVAL;
	return sysom_build_id_parse_hex(hex, kind, out);
}

static int state_path(const struct symupload *u, const char *name, char *out, size_t outlen)
{
	if ((size_t)snprintf(out, outlen, "%s/%s", u->state_dir, name) >= outlen)
		return -ENAMETOOLONG;
	return 0;
}

/*
 * Reads symbols-uploaded from `in`: valid lines after the first `skip` go into the done set
 * and, when out >= 0, to `out`. Counts valid and other lines; *torn_at gets the offset of a
 * partial last line (or the end).
 */
static int uploaded_scan(struct symupload *u, int in, uint32_t skip, int out, uint32_t *valid,
			 uint32_t *invalid, bool *magic_ok, uint64_t *torn_at)
{
	struct line_reader *r = calloc(1, sizeof(*r));
	char line[STATE_LINE_MAX];
	uint32_t nvalid = 0, ninvalid = 0;
	bool first = true, magic = false;
	int rc;

	if (!r)
		return -ENOMEM;
	r->fd = in;
	while ((rc = line_next(r, line, sizeof(line))) > 0) {
		struct sysom_build_id id;
		if (first) {
			first = false;
			magic = rc == 1 && strcmp(line, UPLOADED_MAGIC) == 0;
			if (magic)
				continue;
		}
		if (rc != 1 || parse_uploaded_line(line, &id)) {
			ninvalid++;
			continue;
		}
		if (nvalid++ < skip)
			continue;
		if (idset_add(&u->done, id_key(&id)) < 0)
			continue; /* the caller sized the skip: cannot happen */
		if (out >= 0) {
			char text[HEX_MAX + 16];
			char hex[HEX_MAX];
			hex_of(&id, hex);
			int len = snprintf(text, sizeof(text), "%s %s\n", hex, identity_name(&id));
			rc = write_full(out, text, (size_t)len);
			if (rc)
				break;
		}
	}
	*valid = nvalid;
	*invalid = ninvalid;
	*magic_ok = magic;
	*torn_at = r->complete_end;
	free(r);
	return rc;
}

/* Rewrites symbols-uploaded with its newest `keep` valid lines (tmp, fsync, rename). */
static int uploaded_rewrite(struct symupload *u, uint32_t keep)
{
	char path[4096], tmp[4096 + 8];
	uint32_t valid = 0, invalid = 0, kept;
	uint64_t torn = 0;
	bool magic = false;
	int in = -1, out = -1, rc;

	if ((rc = state_path(u, SYMUPLOAD_UPLOADED_FILE, path, sizeof(path))))
		return rc;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0) {
		rc = -errno;
		goto cleanup;
	}
	/* First pass: count, so the oldest can be skipped. */
	idset_clear(&u->done);
	rc = uploaded_scan(u, in, UINT32_MAX, -1, &valid, &invalid, &magic, &torn);
	if (rc)
		goto cleanup;
	if (lseek(in, 0, SEEK_SET) < 0) {
		rc = -errno;
		goto cleanup;
	}
	out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0) {
		rc = -errno;
		goto cleanup;
	}
	if ((rc = write_full(out, UPLOADED_MAGIC "\n", sizeof(UPLOADED_MAGIC))))
		goto cleanup;
	kept = valid < keep ? valid : keep;
	idset_clear(&u->done);
	rc = uploaded_scan(u, in, valid - kept, out, &valid, &invalid, &magic, &torn);
	if (rc)
		goto cleanup;
	if (fsync(out) || rename(tmp, path)) {
		rc = -errno;
		goto cleanup;
	}
	fsync_dir(u->state_dir);
	if (u->uploaded_fd >= 0)
		close(u->uploaded_fd);
	u->uploaded_fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (u->uploaded_fd < 0)
		rc = -errno;
	u->uploaded_lines = kept;
cleanup:
	if (in >= 0)
		close(in);
	if (out >= 0) {
		close(out);
		if (rc)
			unlink(tmp);
	}
	return rc;
}

/* Loads symbols-uploaded into the done set, creating or repairing the file as needed. */
static int uploaded_load(struct symupload *u)
{
	char path[4096];
	uint32_t valid = 0, invalid = 0;
	uint64_t torn = 0;
	bool magic = false;
	struct stat st;
	int rc;

	if ((rc = state_path(u, SYMUPLOAD_UPLOADED_FILE, path, sizeof(path))))
		return rc;
	u->uploaded_fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (u->uploaded_fd < 0)
		return -errno;
	if (fstat(u->uploaded_fd, &st))
		return -errno;
	if (st.st_size == 0) {
		rc = write_full(u->uploaded_fd, UPLOADED_MAGIC "\n", sizeof(UPLOADED_MAGIC));
		if (!rc && fsync(u->uploaded_fd))
			rc = -errno;
		if (!rc)
			fsync_dir(u->state_dir);
		return rc;
	}
	rc = uploaded_scan(u, u->uploaded_fd, 0, -1, &valid, &invalid, &magic, &torn);
	if (rc)
		return rc;
	if (valid > u->uploaded_max || !magic) {
		/* Too long, or not ours: keep the newest entries in a fresh file. */
		if (!magic)
			state_error(u, -SYSOM_ECORRUPT, SYMUPLOAD_UPLOADED_FILE
				    " does not start with its magic line: rewritten");
		return uploaded_rewrite(u, valid > u->uploaded_max ? u->uploaded_max * 3 / 4
								     : valid);
	}
	/* A crash during an append can leave a partial last line: cut it off, so the next
	 * append does not glue onto it. */
	if (torn < (uint64_t)st.st_size && ftruncate(u->uploaded_fd, (off_t)torn))
		return -errno;
	u->uploaded_lines = valid;
	return 0;
}

/* Writes the lines collected by done_add and makes them durable. */
static void done_flush(struct symupload *u)
{
	int rc;

	if (!u->linebuf_len)
		return;
	rc = u->uploaded_fd < 0 ? -EBADF : write_full(u->uploaded_fd, u->linebuf, u->linebuf_len);
	if (!rc && fdatasync(u->uploaded_fd))
		rc = -errno;
	if (rc)
		state_error(u, rc, "appending to " SYMUPLOAD_UPLOADED_FILE);
	u->linebuf_len = 0;
}

/* Records that the server holds `id` (call done_flush after a batch). */
static void done_add(struct symupload *u, const struct sysom_build_id *id)
{
	struct idkey k = id_key(id);
	char hex[HEX_MAX];
	int rc;

	if (idset_has(&u->done, k))
		return;
	if (u->uploaded_lines >= u->uploaded_max || u->done.count >= u->done.max) {
		done_flush(u);
		rc = uploaded_rewrite(u, u->uploaded_max * 3 / 4);
		if (rc) {
			state_error(u, rc, "compacting " SYMUPLOAD_UPLOADED_FILE);
			idset_clear(&u->done);
			u->uploaded_lines = 0;
		}
	}
	if (idset_add(&u->done, k) < 0)
		return;
	size_t need = u->linebuf_len + HEX_MAX + 16;
	if (need > u->linebuf_cap) {
		size_t cap = u->linebuf_cap ? u->linebuf_cap * 2 : 4096;
		while (cap < need)
			cap *= 2;
		char *grown = realloc(u->linebuf, cap);
		if (!grown) {
			state_error(u, -ENOMEM, "appending to " SYMUPLOAD_UPLOADED_FILE);
			return;
		}
		u->linebuf = grown;
		u->linebuf_cap = cap;
	}
	hex_of(id, hex);
	u->linebuf_len += (size_t)snprintf(u->linebuf + u->linebuf_len,
					   u->linebuf_cap - u->linebuf_len, "%s %s\n", hex,
					   identity_name(id));
	u->uploaded_lines++;
	pthread_mutex_lock(&u->lock);
	u->stats.known_uploaded = u->done.count;
	pthread_mutex_unlock(&u->lock);
}

/* ---------------------------------------------------------------------------------------- */
/* symbols-inflight */

static int inflight_save(struct symupload *u)
{
	char path[4096], tmp[4096 + 8];
	char line[HEX_MAX + 128];
	int fd = -1, rc;

	if ((rc = state_path(u, SYMUPLOAD_INFLIGHT_FILE, path, sizeof(path))))
		return rc;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		goto cleanup;
	}
	if ((rc = write_full(fd, INFLIGHT_MAGIC "\n", sizeof(INFLIGHT_MAGIC))))
		goto cleanup;
	for (uint32_t i = 0; i < u->inflight_count; i++) {
		const struct inflight *f = &u->inflight[i];
		char hex[HEX_MAX];
		hex_of(&f->id, hex);
		int n = snprintf(line, sizeof(line), "%s %s %s %s %s %" PRIu64 " %" PRIu64 "\n",
				 hex, identity_name(&f->id), part_names[f->part], f->upload_id,
				 f->hash, f->offset, f->total);
		if ((rc = write_full(fd, line, (size_t)n)))
			goto cleanup;
	}
	if (fsync(fd) || rename(tmp, path)) {
		rc = -errno;
		goto cleanup;
	}
	rc = fsync_dir(u->state_dir);
cleanup:
	if (fd >= 0)
		close(fd);
	if (rc) {
		unlink(tmp);
		state_error(u, rc, "writing " SYMUPLOAD_INFLIGHT_FILE);
	}
	return rc;
}

static bool all_hex(const char *s, size_t len)
{
	if (strlen(s) != len)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static void inflight_load(struct symupload *u)
{
	char path[4096];
	char line[STATE_LINE_MAX];
	struct line_reader *r = NULL;
	bool first = true;
	int fd, rc;

	if (state_path(u, SYMUPLOAD_INFLIGHT_FILE, path, sizeof(path)))
		return;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno != ENOENT)
			state_error(u, -errno, "reading " SYMUPLOAD_INFLIGHT_FILE);
		return;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		goto cleanup;
	r->fd = fd;
	while ((rc = line_next(r, line, sizeof(line))) > 0 &&
	       u->inflight_count < SYMUPLOAD_INFLIGHT_MAX) {
		char hex[HEX_MAX + 1], ident[16], part[16];
		char id[UPLOAD_ID_HEX + 2], hash[HASH_HEX + 2];
		struct inflight f = { 0 };
		int used = 0;
		if (first) {
			first = false;
			if (rc != 1 || strcmp(line, INFLIGHT_MAGIC) != 0)
				break; /* not ours: start afresh */
			continue;
		}
		if (rc != 1 ||
		    sscanf(line, "%129s %15s %15s %33s %33s %" SCNu64 " %" SCNu64 "%n", hex, ident,
			   part, id, hash, &f.offset, &f.total, &used) != 7 || line[used] != '\0')
			continue;
		uint8_t kind = strcmp(ident, "elf") == 0 ? SYSOM_OBJECT_ELF :
			       strcmp(ident, "file-hash") == 0 ? SYSOM_OBJECT_FILE_HASH : 0;
		int p = strcmp(part, "executable") == 0 ? PART_EXECUTABLE :
			strcmp(part, "debuginfo") == 0 ? PART_DEBUGINFO : -1;
		if (!kind || p < 0 || sysom_build_id_parse_hex(hex, kind, &f.id) ||
		    !all_hex(id, UPLOAD_ID_HEX) || !all_hex(hash, HASH_HEX) || f.offset >= f.total)
			continue;
		f.part = (uint8_t)p;
		memcpy(f.upload_id, id, sizeof(f.upload_id));
		memcpy(f.hash, hash, sizeof(f.hash));
		f.seq = ++u->inflight_seq;
		u->inflight[u->inflight_count++] = f;
	}
cleanup:
	free(r);
	close(fd);
}

static struct inflight *inflight_find(struct symupload *u, const struct sysom_build_id *id,
				      int part)
{
	for (uint32_t i = 0; i < u->inflight_count; i++) {
		struct inflight *f = &u->inflight[i];
		if (f->part == part && f->id.kind == id->kind && f->id.len == id->len &&
		    memcmp(f->id.bytes, id->bytes, id->len) == 0)
			return f;
	}
	return NULL;
}

static void inflight_remove(struct symupload *u, const struct sysom_build_id *id, int part)
{
	struct inflight *f = inflight_find(u, id, part);

	if (!f)
		return;
	*f = u->inflight[--u->inflight_count];
	inflight_save(u);
}

/* A new record (the oldest is evicted when full), saved. Returns it. */
static struct inflight *inflight_put(struct symupload *u, const struct sysom_build_id *id, int part,
				     const char *upload_id, const char *hash, uint64_t total)
{
	struct inflight *f = inflight_find(u, id, part);

	if (!f) {
		if (u->inflight_count == SYMUPLOAD_INFLIGHT_MAX) {
			uint32_t oldest = 0;
			for (uint32_t i = 1; i < u->inflight_count; i++)
				if (u->inflight[i].seq < u->inflight[oldest].seq)
					oldest = i;
			u->inflight[oldest] = u->inflight[--u->inflight_count];
		}
		f = &u->inflight[u->inflight_count++];
	}
	*f = (struct inflight){ .id = *id, .part = (uint8_t)part, .total = total,
				.seq = ++u->inflight_seq };
	memcpy(f->upload_id, upload_id, sizeof(f->upload_id));
	memcpy(f->hash, hash, sizeof(f->hash));
	inflight_save(u);
	return f;
}

static void new_upload_id(struct symupload *u, char out[UPLOAD_ID_HEX + 1])
{
	uint8_t b[UPLOAD_ID_HEX / 2];

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
		for (size_t i = 0; i < sizeof(b); i += 8) {
			uint64_t r = retry_clock_random(&u->clock) ^ now(u);
			memcpy(b + i, &r, sizeof(b) - i < 8 ? sizeof(b) - i : 8);
		}
	}
	bytes_hex(b, sizeof(b), out);
}

/* ---------------------------------------------------------------------------------------- */
/* Finding and proving files */

static pthread_once_t elf_once = PTHREAD_ONCE_INIT;
static bool elf_ok;

static void elf_init(void)
{
	elf_ok = elf_version(EV_CURRENT) != EV_NONE;
}

static bool same_id(const struct sysom_build_id *a, const struct sysom_build_id *b)
{
	return a->kind == b->kind && a->len == b->len && memcmp(a->bytes, b->bytes, a->len) == 0;
}

static int vdso_visit(void *ctx, const struct procmaps_entry *m)
{
	uint64_t *len = ctx;

	if (strcmp(m->path, "[vdso]") == 0 && m->start == getauxval(AT_SYSINFO_EHDR))
		*len = m->end - m->start;
	return 0;
}

/* Our own vDSO image (same kernel, same image in every 64-bit process) in a memfd. */
static int vdso_open(int *fd_out, struct stat *st)
{
	unsigned long image = getauxval(AT_SYSINFO_EHDR);
	uint64_t len = 0;
	int fd = -1, rc;

	if (!image)
		return -ENOENT;
	rc = procmaps_read(getpid(), NULL, false, 1u << 16, vdso_visit, &len, NULL);
	if (rc < 0)
		return rc;
	if (len == 0)
		return -ENOENT;
	if (len > VDSO_MAX)
		return -SYSOM_ELIMIT;
	fd = memfd_create("sysom-vdso", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	rc = write_full(fd, (const void *)image, (size_t)len);
	if (!rc && fstat(fd, st))
		rc = -errno;
	if (rc) {
		close(fd);
		return rc;
	}
	*fd_out = fd;
	return 0;
}

enum find_result { FOUND = 0, NOT_FOUND, MISMATCH, TOO_LARGE };

/* Whether the file on `fd` has identity `id`; for content hashes the hash is kept in `ps`. */
static int check_identity(struct symupload *u, int fd, const struct stat *st,
			  const struct sysom_build_id *id, struct part_state *ps, bool *match)
{
	struct sysom_build_id got;
	int rc;

	*match = false;
	if (id->kind == SYSOM_OBJECT_ELF) {
		rc = sysom_elf_build_id(fd, &got);
		if (rc == 0)
			*match = same_id(&got, id);
		return rc == -ECANCELED || rc == -ENOMEM ? rc : 0;
	}
	rc = hash_file(u, fd, (uint64_t)st->st_size, got.bytes);
	if (rc)
		return rc == -ESTALE ? 0 : rc;
	*match = id->len == 16 && memcmp(got.bytes, id->bytes, 16) == 0;
	if (*match) {
		/* The content hash is the upload's hash header too: no second pass. */
		ps->hashed = true;
		ps->dev = st->st_dev;
		ps->ino = st->st_ino;
		ps->size = (uint64_t)st->st_size;
		ps->mtime_ns = mtime_ns(st);
		memcpy(ps->hash, got.bytes, 16);
	}
	return 0;
}

/*
 * Opens the object's executable and proves it: through /proc/PID/map_files (the very mapping:
 * deleted files, other mount namespaces), else /proc/PID/root/PATH, else PATH; the first whose
 * identity equals the object's wins. The vDSO comes from our own image.
 */
static int open_executable(struct symupload *u, struct item *it, int *fd_out, struct stat *st_out,
			   enum find_result *result)
{
	char path[SYMUPLOAD_PATH_MAX + 128];
	const struct waiting *w = &it->w;
	bool opened = false, too_large = false;
	struct stat st;
	int fd = -1, rc;

	*result = NOT_FOUND;
	if (strcmp(w->path, "[vdso]") == 0) {
		rc = vdso_open(&fd, &st);
		if (rc)
			return rc == -ENOENT ? 0 : rc;
		bool match = false;
		rc = check_identity(u, fd, &st, &w->id, &it->part[PART_EXECUTABLE], &match);
		if (rc || !match) {
			close(fd);
			*result = MISMATCH;
			return rc;
		}
		*fd_out = fd;
		*st_out = st;
		*result = FOUND;
		return 0;
	}
	for (int c = 0; c < 3; c++) {
		if (c == 0 && w->pid && w->end > w->start)
			snprintf(path, sizeof(path), "%s/%u/map_files/%" PRIx64 "-%" PRIx64,
				 u->proc_root, w->pid, w->start, w->end);
		else if (c == 1 && w->pid)
			snprintf(path, sizeof(path), "%s/%u/root%s", u->proc_root, w->pid, w->path);
		else if (c == 2)
			snprintf(path, sizeof(path), "%s", w->path);
		else
			continue;
		if (open_regular(path, &fd, &st))
			continue;
		opened = true;
		bool match = false;
		if (w->id.kind == SYSOM_OBJECT_FILE_HASH && (uint64_t)st.st_size > u->max_file) {
			too_large = true;
		} else {
			rc = check_identity(u, fd, &st, &w->id, &it->part[PART_EXECUTABLE], &match);
			if (rc) {
				close(fd);
				return rc;
			}
		}
		if (match && (uint64_t)st.st_size > u->max_file) {
			too_large = true;
			match = false;
		}
		if (match && st.st_size > 0) {
			*fd_out = fd;
			*st_out = st;
			*result = FOUND;
			return 0;
		}
		close(fd);
	}
	*result = too_large ? TOO_LARGE : opened ? MISMATCH : NOT_FOUND;
	return 0;
}

/* Reads .gnu_debuglink: the debug file's base name and its CRC-32. 0 or -ENOENT/-errno. */
static int read_debuglink(int fd, char *name, size_t namelen, uint32_t *crc)
{
	Elf *elf = NULL;
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	int rc = -ENOENT;

	pthread_once(&elf_once, elf_init);
	if (!elf_ok)
		return -ENOSYS;
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || elf_getshdrstrndx(elf, &shstrndx))
		goto cleanup;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		const char *sname;
		if (!gelf_getshdr(scn, &sh) || !(sname = elf_strptr(elf, shstrndx, sh.sh_name)) ||
		    strcmp(sname, ".gnu_debuglink") != 0)
			continue;
		if (sh.sh_type != SHT_PROGBITS || sh.sh_size < 8 || sh.sh_size > DEBUGLINK_MAX) {
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
		Elf_Data *d = elf_rawdata(scn, NULL);
		if (!d || !d->d_buf || d->d_size != sh.sh_size) {
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
		const uint8_t *p = d->d_buf;
		size_t n = strnlen((const char *)p, d->d_size);
		size_t crc_off = (n + 1 + 3) & ~(size_t)3;
		if (n == 0 || n >= namelen || crc_off + 4 > d->d_size || memchr(p, '/', n) ||
		    (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) {
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
		memcpy(name, p, n);
		name[n] = '\0';
		const uint8_t *c = p + crc_off;
		bool big = elf_getident(elf, NULL)[EI_DATA] == ELFDATA2MSB;
		uint32_t v = 0;
		for (int i = 0; i < 4; i++)
			v = v << 8 | c[big ? i : 3 - i];
		*crc = v;
		rc = 0;
		goto cleanup;
	}
cleanup:
	elf_end(elf);
	return rc;
}

/*
 * Checks one debug file candidate: a regular ELF file, not the executable itself, within the
 * size limit, carrying the object's build ID (for content-hashed objects: an ELF without one),
 * and matching the debug link's CRC-32 when `check_crc`. The build ID requirement also keeps
 * a symlink planted in a container from passing a host file off as a debug file.
 */
static int try_debug(struct symupload *u, const char *path, const struct stat *exe_st,
		     const struct sysom_build_id *id, bool check_crc, uint32_t crc, int *fd_out,
		     struct stat *st_out, bool *too_large)
{
	struct sysom_build_id got;
	struct stat st;
	int fd, rc;

	if (open_regular(path, &fd, &st))
		return 0;
	if ((st.st_dev == exe_st->st_dev && st.st_ino == exe_st->st_ino) || st.st_size <= 0)
		goto reject;
	if ((uint64_t)st.st_size > u->max_file) {
		*too_large = true;
		goto reject;
	}
	rc = sysom_elf_build_id(fd, &got);
	if (id->kind == SYSOM_OBJECT_ELF ? rc != 0 || !same_id(&got, id) : rc != -SYSOM_ENOBUILDID)
		goto reject;
	if (check_crc) {
		uLong c = crc32(0L, Z_NULL, 0);
		rc = scan_file(u, fd, (uint64_t)st.st_size, crc_update, &c);
		if (rc == -ECANCELED) {
			close(fd);
			return rc;
		}
		if (rc || (uint32_t)c != crc)
			goto reject;
	}
	*fd_out = fd;
	*st_out = st;
	return 1;
reject:
	close(fd);
	return 0;
}

/*
 * Finds the object's debug file: DEBUG_ROOT/.build-id/xx/rest.debug (its build ID checked),
 * else the .gnu_debuglink name in the executable's directory, its .debug/ and
 * DEBUG_ROOT/<directory> (the build ID and the link's CRC-32 checked);
 * each first inside the process's root (containers), then in ours. Returns 1 with *fd_out,
 * 0 when there is none, or -ECANCELED.
 */
static int find_debug(struct symupload *u, struct item *it, int exe_fd, const struct stat *exe_st,
		      char *dpath, size_t dlen, int *fd_out, struct stat *st_out, bool *too_large)
{
	const struct waiting *w = &it->w;
	char roots[2][64];
	char hex[HEX_MAX], link[256], dir[SYMUPLOAD_PATH_MAX];
	uint32_t crc = 0;
	int nroots = 0, rc;

	if (w->pid && w->path[0] == '/')
		snprintf(roots[nroots++], sizeof(roots[0]), "%s/%u/root", u->proc_root, w->pid);
	roots[nroots++][0] = '\0';
	if (w->id.kind == SYSOM_OBJECT_ELF && w->id.len >= 2) {
		hex_of(&w->id, hex);
		for (int r = 0; r < nroots; r++) {
			snprintf(dpath, dlen, "%s%s/.build-id/%.2s/%s.debug", roots[r],
				 u->debug_root, hex, hex + 2);
			rc = try_debug(u, dpath, exe_st, &w->id, false, 0, fd_out, st_out,
				       too_large);
			if (rc)
				return rc;
		}
	}
	if (w->path[0] != '/')
		return 0;
	/* Only for files whose ELF headers the build ID reader accepted (libelf is then safe). */
	struct sysom_build_id unused;
	rc = sysom_elf_build_id(exe_fd, &unused);
	if ((rc != 0 && rc != -SYSOM_ENOBUILDID) ||
	    read_debuglink(exe_fd, link, sizeof(link), &crc))
		return 0;
	snprintf(dir, sizeof(dir), "%s", w->path);
	char *slash = strrchr(dir, '/');
	slash[slash == dir ? 1 : 0] = '\0';
	const char *sep = strcmp(dir, "/") == 0 ? "" : "/";
	for (int r = 0; r < nroots; r++) {
		for (int c = 0; c < 3; c++) {
			int n;
			if (c == 0)
				n = snprintf(dpath, dlen, "%s%s%s%s", roots[r], dir, sep, link);
			else if (c == 1)
				n = snprintf(dpath, dlen, "%s%s%s.debug/%s", roots[r], dir, sep,
					     link);
			else
				n = snprintf(dpath, dlen, "%s%s%s%s%s", roots[r], u->debug_root,
					     dir, sep, link);
			if (n < 0 || (size_t)n >= dlen)
				continue;
			rc = try_debug(u, dpath, exe_st, &w->id, true, crc, fd_out, st_out,
				       too_large);
			if (rc)
				return rc;
		}
	}
	return 0;
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
		if (t > u->token_ns) {
			unsigned __int128 add =
				(unsigned __int128)(t - u->token_ns) * u->rate + u->token_rem;
			uint64_t whole = add / NS_PER_S > cap ? cap : (uint64_t)(add / NS_PER_S);
			u->token_rem = (uint64_t)(add % NS_PER_S);
			u->tokens = u->tokens + whole > cap ? cap : u->tokens + whole;
			if (u->tokens == cap)
				u->token_rem = 0;
			u->token_ns = t;
		}
		if (u->tokens >= n) {
			u->tokens -= n;
			return 0;
		}
		unsigned __int128 need = (unsigned __int128)(n - u->tokens) * NS_PER_S;
		need = need > u->token_rem ? need - u->token_rem : 0;
		uint64_t wait = (uint64_t)((need + u->rate - 1) / u->rate);
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
		rc = hash_file(u, fd, size, ps->hash);
		if (rc == -ECANCELED)
			return OUT_STOPPED;
		if (rc) {
			snprintf(message, sizeof(message), "reading the %s: %s", part_names[part],
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
	bytes_hex(ps->hash, 16, hash);
	hex_of(&it->w.id, hex);

	struct inflight *rec = inflight_find(u, &it->w.id, part);
	if (rec && strcmp(rec->hash, hash) == 0 && rec->total == size) {
		memcpy(upload_id, rec->upload_id, sizeof(upload_id));
		offset = rec->offset;
		if (!ps->resumed) {
			ps->resumed = true;
			STAT_ADD(u, resumed, 1);
		}
	} else {
		new_upload_id(u, upload_id);
		inflight_put(u, &it->w.id, part, upload_id, hash, size);
	}
	snprintf(path, sizeof(path), "/api/v1/symbols/%s/%s", hex, part_names[part]);
	snprintf(h_id, sizeof(h_id), "X-Sysom-Upload-Id: %s", upload_id);
	snprintf(h_hash, sizeof(h_hash), "X-Sysom-Content-Hash: xxh3-128:%s", hash);
	snprintf(h_ident, sizeof(h_ident), "X-Sysom-Identity: %s", identity_name(&it->w.id));

	while (offset < size) {
		size_t n = size - offset < u->chunk ? (size_t)(size - offset) : u->chunk;
		struct http_client_response resp;
		uint64_t value = 0;

		if (stopping(u))
			return OUT_STOPPED;
		rc = pread_full(fd, u->buf, n, offset);
		if (rc) {
			snprintf(message, sizeof(message), "reading the %s: %s", part_names[part],
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
			snprintf(message, sizeof(message), "PUT %s: %s", part_names[part],
				 resp.error);
		else
			sysom_text_sanitize(message, sizeof(message), resp.body ? (const char *)resp.body : "",
				 resp.body_len);
		int64_t retry_after = resp.retry_after_s;
		bool got_received = r == 202 && parse_uint_member(resp.body, resp.body_len,
								  "received", &value) == 0;
		bool got_resume = r == 409 && parse_uint_member(resp.body, resp.body_len,
								"resume_at", &value) == 0;
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
			inflight_remove(u, &it->w.id, part);
			return OUT_DONE;
		}
		if (got_received && value > offset && value < size) {
			request_succeeded(u);
			uint64_t taken = value - offset < n ? value - offset : n;
			ps->sent += taken;
			STAT_ADD(u, uploaded_bytes, taken);
			offset = value;
			stalls = 0;
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
			inflight_remove(u, &it->w.id, part);
			report_retry(u, &it->w, r, -SYSOM_EHTTP, -1, why);
			return OUT_RETRY;
		} else if (is_retryable(r)) {
			report_retry(u, &it->w, r > 0 ? r : 0, r > 0 ? -SYSOM_EHTTP : r,
				     r > 0 ? retry_after : -1, message);
			return OUT_RETRY;
		} else {
			inflight_remove(u, &it->w.id, part);
			emit_simple(u, SYMUPLOAD_EVENT_FAILED, &it->w, r, -SYSOM_EHTTP, message);
			return OUT_GIVE_UP;
		}
		struct inflight *cur = inflight_find(u, &it->w.id, part);
		if (cur && cur->offset != offset) {
			cur->offset = offset;
			inflight_save(u);
		}
		/* Between chunks: keep the offers flowing into the backlog (no I/O). */
		take_offers(u);
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

	rc = open_executable(u, it, &fd, &st, &found);
	if (rc == -ECANCELED) {
		out = OUT_STOPPED;
		goto cleanup;
	}
	if (rc || found != FOUND) {
		skip_item(u, it, found, rc);
		out = OUT_SKIP;
		goto cleanup;
	}
	if (it->need[PART_DEBUGINFO] && !it->part[PART_DEBUGINFO].done) {
		bool too_large = false;
		rc = find_debug(u, it, fd, &st, dpath, sizeof(dpath), &dfd, &dst, &too_large);
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
	if (it->need[PART_EXECUTABLE] && !it->part[PART_EXECUTABLE].done) {
		out = upload_part(u, it, PART_EXECUTABLE, fd, &st);
		if (out != OUT_DONE)
			goto cleanup;
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

static void item_free(struct item *it)
{
	if (!it)
		return;
	waiting_free(&it->w);
	free(it->debug_path);
	free(it);
}

/* Moves offers from the shared queue into `pending` (what fits), dropping those known. */
static void take_offers(struct symupload *u)
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
			struct idkey k = id_key(&batch[i].id);
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
	struct idkey k = id_key(id);

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
		done_add(u, &it->w.id);
		done_flush(u);
		idset_remove(&u->active, id_key(&it->w.id));
		STAT_ADD(u, uploaded_objects, sent ? 1 : 0);
		STAT_ADD(u, present, sent ? 0 : 1);
		hex_of(&it->w.id, hex);
		emit(u, &ev);
		item_free(it);
		break;
	}
	case OUT_RETRY:
		work_push(u, it, false); /* round robin: one stubborn file does not block others */
		break;
	case OUT_GIVE_UP:
		STAT_ADD(u, failed, 1);
		forget_failed(u, &it->w.id);
		item_free(it);
		break;
	case OUT_SKIP:
		forget_failed(u, &it->w.id);
		item_free(it);
		break;
	case OUT_STOPPED:
		work_push(u, it, true);
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
	rc = resp.body_truncated ? -SYSOM_ELIMIT :
				   parse_missing(resp.body, resp.body_len, on_missing, &q);
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
			idset_remove(&u->active, id_key(&w->id));
			waiting_free(w);
			continue;
		}
		done_add(u, &w->id);
		idset_remove(&u->active, id_key(&w->id));
		present++;
		emit_simple(u, SYMUPLOAD_EVENT_PRESENT, w, 200, 0, "");
		waiting_free(w);
	}
	done_flush(u);
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

	u->token_ns = now(u);
	for (;;) {
		take_offers(u);
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
		bool due = n > 0 && (u->pending_count >= u->query_batch ||
				     t - u->pending[0].since_ns >= u->query_interval_ns);
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

static bool seconds_option(double value, double dflt, double max, uint64_t *out)
{
	if (value == 0)
		value = dflt;
	if (!isfinite(value) || value <= 0 || value > max)
		return false;
	*out = (uint64_t)(value * (double)NS_PER_S);
	return *out > 0;
}

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
	    !seconds_option(opts->query_interval_s, SYMUPLOAD_DEFAULT_QUERY_INTERVAL_S, 86400,
			    &u->query_interval_ns) ||
	    !seconds_option(opts->backoff_initial_s, SYMUPLOAD_DEFAULT_BACKOFF_INITIAL_S, 86400,
			    &u->backoff_initial_ns) ||
	    !seconds_option(opts->backoff_max_s, SYMUPLOAD_DEFAULT_BACKOFF_MAX_S, 86400,
			    &u->backoff_max_ns) ||
	    !seconds_option(opts->request_timeout_s, SYMUPLOAD_DEFAULT_REQUEST_TIMEOUT_S, 3600,
			    &u->request_timeout_ns) ||
	    !seconds_option(opts->connect_timeout_s, SYMUPLOAD_DEFAULT_CONNECT_TIMEOUT_S, 3600,
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
	int rc = uploaded_load(u);
	if (rc) {
		state_error(u, rc, "reading " SYMUPLOAD_UPLOADED_FILE);
		idset_clear(&u->done);
	}
	inflight_load(u);
	/* What this node uploaded before needs no queue slot. */
	for (uint32_t i = 0; i < u->done.cap && u->seen.count < u->seen.max; i++)
		if (!slot_empty(&u->done.slots[i]))
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
	struct idkey k = id_key(id);

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
		item_free(work_pop(u));
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
