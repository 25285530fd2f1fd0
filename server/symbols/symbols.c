/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol upload API: missing-file queries, chunked resumable uploads verified by XXH3-128
 * and identity before installation in the repository, per-Build-ID info, upload sweeping. */
#include "server/symbols/symbols.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "common/array.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/hex.h"
#include "server/http/render.h"
#include "server/symbols/symbols_internal.h"
#include "symrepo/symfile.h"

#define HASH_CHUNK (1u << 20)       /* bytes read per step when hashing a whole upload */
#define HASH_PREFIX "xxh3-128:"
#define PART_SUFFIX ".part"
#define BUILD_IDS_REFRESH_S 60
#define RETRY_AFTER_BUSY "30"
/* Decode memory stayed full: as ingest's 503 (INGEST_MEMORY_RETRY_AFTER_S). */
#define RETRY_AFTER_MEMORY "2"
#define RETRY_AFTER_NO_SPACE "60" /* as for a write that finds the disk full */

const char *symbols__kind_name(enum symrepo_kind kind)
{
	return kind == SYMREPO_EXECUTABLE ? "executable" : kind == SYMREPO_DEBUGINFO ? "debuginfo"
											: "symbols";
}

static int kind_parse(const char *text, size_t len, enum symrepo_kind *out)
{
	if (len == 10 && memcmp(text, "executable", 10) == 0)
		*out = SYMREPO_EXECUTABLE;
	else if (len == 9 && memcmp(text, "debuginfo", 9) == 0)
		*out = SYMREPO_DEBUGINFO;
	else
		return -EINVAL;
	return 0;
}

static int64_t stat_mtime_ns(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static void lower(char *s)
{
	for (; *s; s++)
		*s = (char)tolower((unsigned char)*s);
}

/* Uploads (and the missing-file query that precedes them) need the agent scope; reading what
 * the repository holds for a Build ID, agent or read. Symbol files are keyed by Build ID, not
 * by node: any agent credential may upload any. */
static bool authorized(struct symbols *s, const struct http_request *req, unsigned scopes,
		       struct http_response *resp)
{
	return auth_request_allow(s->auth, req, scopes, resp);
}

/* ---- sessions ------------------------------------------------------------------------------ */

static int session_path(const struct symbols *s, const struct symbols_session *ss, char *out,
			size_t outlen)
{
	int n = snprintf(out, outlen, "%s/%s.%s.%s" PART_SUFFIX, s->uploads, ss->hex,
			 symbols__kind_name(ss->kind), ss->upload_id);

	return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

/* Parses "<hex>.<kind>.<upload id>.part"; 0 or -EINVAL. */
static int session_parse_name(const char *name, struct symbols_session *out)
{
	size_t len = strlen(name), slen = strlen(PART_SUFFIX);
	const char *dot1, *dot2;
	struct sysom_build_id id;

	memset(out, 0, sizeof(*out));
	if (len <= slen || strcmp(name + len - slen, PART_SUFFIX) != 0)
		return -EINVAL;
	dot1 = strchr(name, '.');
	dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
	if (!dot1 || !dot2 || (size_t)(dot1 - name) >= sizeof(out->hex))
		return -EINVAL;
	size_t idlen = len - slen - (size_t)(dot2 + 1 - name);
	if (idlen < SYMBOLS_UPLOAD_ID_MIN || idlen > SYMBOLS_UPLOAD_ID_MAX ||
	    !sysom_hex_valid(dot2 + 1, idlen) ||
	    kind_parse(dot1 + 1, (size_t)(dot2 - dot1 - 1), &out->kind))
		return -EINVAL;
	memcpy(out->hex, name, (size_t)(dot1 - name));
	if (sysom_build_id_parse_hex(out->hex, SYSOM_OBJECT_ELF, &id))
		return -EINVAL;
	memcpy(out->upload_id, dot2 + 1, idlen);
	lower(out->hex);
	lower(out->upload_id);
	return 0;
}

static bool session_same(const struct symbols_session *a, const struct symbols_session *b)
{
	return a->kind == b->kind && strcmp(a->hex, b->hex) == 0 &&
	       strcmp(a->upload_id, b->upload_id) == 0;
}

/* Index of the session or -1. Under the lock. */
static ssize_t session_find(const struct symbols *s, const struct symbols_session *key)
{
	for (size_t i = 0; i < s->nsessions; i++)
		if (session_same(&s->sessions[i], key))
			return (ssize_t)i;
	return -1;
}

/* Adds a session with what it reserves and holds. Under the lock. 0 or -ENOMEM. */
static int session_add(struct symbols *s, const struct symbols_session *ss)
{
	if (SYSOM_ARRAY_RESERVE(s->sessions, s->sessions_cap, s->nsessions, 16))
		return -ENOMEM;
	s->sessions[s->nsessions++] = *ss;
	s->reserved_bytes += ss->reserved;
	s->received_bytes += ss->received;
	return 0;
}

/* Removes session `i`, releasing its reservation. Under the lock. */
static void session_remove_at(struct symbols *s, size_t i)
{
	s->reserved_bytes -= s->sessions[i].reserved;
	s->received_bytes -= s->sessions[i].received;
	s->sessions[i] = s->sessions[--s->nsessions];
}

/* Forgets a session (its file is gone or must go: `unlink_file`). */
static void session_drop(struct symbols *s, const struct symbols_session *key, bool unlink_file)
{
	char path[PATH_MAX];
	ssize_t i;

	if (unlink_file && session_path(s, key, path, sizeof(path)) == 0)
		unlink(path);
	pthread_mutex_lock(&s->lock);
	if ((i = session_find(s, key)) >= 0)
		session_remove_at(s, (size_t)i);
	pthread_mutex_unlock(&s->lock);
}

/* Ends a request's hold on a session that stays; `received` is its file's size now
 * (UINT64_MAX: unknown, unchanged). */
static void session_release(struct symbols *s, const struct symbols_session *key,
			    uint64_t received)
{
	ssize_t i;

	pthread_mutex_lock(&s->lock);
	if ((i = session_find(s, key)) >= 0) {
		struct symbols_session *ss = &s->sessions[i];
		ss->busy = false;
		if (received != UINT64_MAX) {
			received = received < ss->reserved ? received : ss->reserved;
			s->received_bytes = s->received_bytes - ss->received + received;
			ss->received = received;
		}
	}
	pthread_mutex_unlock(&s->lock);
}

enum acquire_result {
	ACQUIRED_EXISTING,
	ACQUIRED_NEW,
	ACQUIRE_BUSY,        /* another request holds the session */
	ACQUIRE_FULL,        /* max_sessions partial uploads exist */
	ACQUIRE_OVER_BUDGET, /* the reservation would exceed max_reserved_bytes */
	ACQUIRE_NO_SPACE,    /* the disk has not the room the reservations promise */
	ACQUIRE_STATFS_FAILED,
	ACQUIRE_NOMEM,
};

/* What a refused reservation met, for the answer. */
struct reserve_refusal {
	uint64_t want;        /* bytes the session would reserve */
	uint64_t reserved;    /* bytes the other sessions reserve */
	uint64_t outstanding; /* bytes reserved but not yet received, this upload's included */
	uint64_t free;        /* bytes free on the uploads' filesystem (for unprivileged users) */
	int error;            /* ACQUIRE_STATFS_FAILED: -errno */
};

/*
 * Grows (or shrinks) session `i`'s reservation, or a new session's (i < 0, holding nothing),
 * to `want` bytes when the budget and the disk allow: the sum of reservations stays within
 * max_reserved_bytes, and what they still await fits in the free space. Under the lock.
 */
static enum acquire_result reserve(struct symbols *s, ssize_t i, uint64_t want,
				   struct reserve_refusal *why)
{
	uint64_t cur = i >= 0 ? s->sessions[i].reserved : 0;
	struct statvfs fs;

	why->want = want;
	why->reserved = s->reserved_bytes - cur;
	if (want > cur) {
		if (s->reserved_bytes - cur + want > s->opts.max_reserved_bytes)
			return ACQUIRE_OVER_BUDGET;
		if (statvfs(s->uploads, &fs) != 0) {
			why->error = -errno;
			return ACQUIRE_STATFS_FAILED;
		}
		why->free = (uint64_t)fs.f_bavail * fs.f_frsize;
		/* Everything reserved but not yet on disk, with this session's new share. */
		why->outstanding = s->reserved_bytes - s->received_bytes + (want - cur);
		if (why->outstanding > why->free)
			return ACQUIRE_NO_SPACE;
	}
	if (i >= 0) {
		s->reserved_bytes = s->reserved_bytes - cur + want;
		s->sessions[i].reserved = want;
	}
	return ACQUIRED_EXISTING;
}

/*
 * Takes the session for one request whose file is `total` bytes, creating it when the
 * sessions limit allows, and makes its reservation cover `total` (see reserve).
 */
static enum acquire_result session_acquire(struct symbols *s, const struct symbols_session *key,
					   uint64_t total, struct reserve_refusal *why)
{
	enum acquire_result r;
	struct symbols_session ss = *key;
	ssize_t i;

	memset(why, 0, sizeof(*why));
	pthread_mutex_lock(&s->lock);
	if ((i = session_find(s, key)) >= 0) {
		struct symbols_session *cur = &s->sessions[i];
		if (cur->busy) {
			r = ACQUIRE_BUSY;
		} else {
			/* Never below what it holds: a shorter TOTAL is answered with a 409. */
			r = reserve(s, i, total > cur->received ? total : cur->received, why);
			cur->busy = r == ACQUIRED_EXISTING;
		}
	} else if (s->nsessions >= s->opts.max_sessions) {
		r = ACQUIRE_FULL;
	} else if ((r = reserve(s, -1, total, why)) == ACQUIRED_EXISTING) {
		ss.busy = true;
		ss.reserved = total;
		ss.received = 0;
		r = session_add(s, &ss) ? ACQUIRE_NOMEM : ACQUIRED_NEW;
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

uint32_t symbols_sessions_count(struct symbols *s)
{
	uint32_t n;

	pthread_mutex_lock(&s->lock);
	n = (uint32_t)s->nsessions;
	pthread_mutex_unlock(&s->lock);
	return n;
}

uint64_t symbols_reserved_bytes(struct symbols *s)
{
	uint64_t n;

	pthread_mutex_lock(&s->lock);
	n = s->reserved_bytes;
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* Takes over the partial uploads found in the uploads directory (well-formed *.part names;
 * anything else there is left alone). The reservations of the last run are gone with it:
 * each reserves its size on disk until its next chunk declares the file's size again. */
static int sessions_load(struct symbols *s, char *err, size_t errlen)
{
	DIR *d = opendir(s->uploads);
	struct dirent *de;
	int rc = 0;

	if (!d) {
		rc = -errno;
		snprintf(err, errlen, "cannot read %s: %s", s->uploads, strerror(errno));
		return rc;
	}
	while ((de = readdir(d))) {
		struct symbols_session ss;
		struct stat sb;
		if (session_parse_name(de->d_name, &ss))
			continue;
		if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(sb.st_mode))
			ss.reserved = ss.received = (uint64_t)sb.st_size;
		if ((rc = session_add(s, &ss))) {
			snprintf(err, errlen, "out of memory");
			break;
		}
	}
	closedir(d);
	return rc;
}

int symbols_sweep(struct symbols *s, struct symbols_sweep_stats *stats)
{
	struct timespec now;
	struct symbols_sweep_stats st = { 0 };
	char path[PATH_MAX];

	clock_gettime(CLOCK_REALTIME, &now);
	int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	int64_t expiry_ns = (int64_t)(s->opts.upload_expiry_s * 1e9);
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->nsessions;) {
		struct symbols_session *ss = &s->sessions[i];
		struct stat sb;
		if (ss->busy || session_path(s, ss, path, sizeof(path))) {
			st.kept++;
			i++;
			continue;
		}
		if (stat(path, &sb) == 0 && now_ns - stat_mtime_ns(&sb) <= expiry_ns) {
			st.kept++;
			i++;
			continue;
		}
		/* Idle too long, or its file vanished. */
		unlink(path);
		session_remove_at(s, i);
		st.removed++;
	}
	pthread_mutex_unlock(&s->lock);
	if (stats)
		*stats = st;
	return 0;
}

/* ---- repository facts ---------------------------------------------------------------------- */

/* Whether the ELF file on `fd` has a .debug_info (or .zdebug_info) section with contents. */
static bool elf_has_dwarf(int fd)
{
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	Elf_Scn *scn = NULL;
	size_t shstrndx, n = 0;
	bool found = false;

	if (!elf)
		return false;
	if (elf_kind(elf) != ELF_K_ELF || elf_getshdrstrndx(elf, &shstrndx) != 0)
		goto cleanup;
	while (!found && (scn = elf_nextscn(elf, scn)) && n++ < 65536) {
		GElf_Shdr shdr;
		const char *name;
		if (!gelf_getshdr(scn, &shdr) || shdr.sh_type == SHT_NOBITS || shdr.sh_size == 0)
			continue;
		name = elf_strptr(elf, shstrndx, shdr.sh_name);
		found = name && (strcmp(name, ".debug_info") == 0 || strcmp(name, ".zdebug_info") == 0);
	}
cleanup:
	elf_end(elf);
	return found;
}

bool symbols_executable_has_dwarf(struct symbols *s, const struct sysom_build_id *id)
{
	struct symbols_dwarf_slot *slot =
		&s->dwarf[sysom_hash64(id->bytes, id->len, 0) & (SYMBOLS_DWARF_SLOTS - 1)];
	char path[PATH_MAX];
	bool has;
	int fd;

	pthread_mutex_lock(&s->lock);
	if (slot->used && slot->len == id->len && memcmp(slot->bytes, id->bytes, id->len) == 0) {
		has = slot->has_dwarf;
		pthread_mutex_unlock(&s->lock);
		return has;
	}
	pthread_mutex_unlock(&s->lock);
	if (symrepo_path(s->repo, id, SYMREPO_EXECUTABLE, path, sizeof(path)))
		return false;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false; /* not installed (yet): nothing to remember */
	has = elf_has_dwarf(fd);
	close(fd);
	pthread_mutex_lock(&s->lock);
	slot->used = true;
	slot->has_dwarf = has;
	slot->len = id->len;
	memcpy(slot->bytes, id->bytes, id->len);
	pthread_mutex_unlock(&s->lock);
	return has;
}

static int count_visit(void *ctx, const struct sysom_build_id *id, bool executable, bool debuginfo,
		       bool symbols)
{
	uint64_t *n = ctx;

	(void)id;
	if (executable || debuginfo || symbols)
		(*n)++;
	return 0;
}

int symbols_build_ids_count(struct symbols *s, uint64_t *count)
{
	int64_t now = sysom_monotonic_s();
	uint64_t n = 0;
	int rc;

	pthread_mutex_lock(&s->lock);
	if (s->build_ids_valid && now - s->build_ids_at < BUILD_IDS_REFRESH_S) {
		*count = s->build_ids;
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	pthread_mutex_unlock(&s->lock);
	if ((rc = symrepo_for_each(s->repo, count_visit, &n)) < 0)
		return rc;
	pthread_mutex_lock(&s->lock);
	s->build_ids = n;
	s->build_ids_at = now;
	s->build_ids_valid = true;
	pthread_mutex_unlock(&s->lock);
	*count = n;
	return 0;
}

/* A file was installed: its Build ID's cached frames and counts are stale. */
static void installed(struct symbols *s, const struct sysom_build_id *id)
{
	if (s->sym)
		symbolizer_build_id_invalidate(s->sym, id);
	pthread_mutex_lock(&s->lock);
	s->build_ids_valid = false;
	pthread_mutex_unlock(&s->lock);
}

/* {"segments":..,"functions":..,...} of the Build ID's symbol file, or JSON null. */
static json_t *symbols_info_json(struct symbols *s, const struct sysom_build_id *id)
{
	struct symfile_info info;
	struct symfile *f;
	int err = 0;

	f = symrepo_symbols_acquire(s->repo, id, &err);
	if (!f)
		return json_null();
	symfile_info_get(f, &info);
	symrepo_symbols_release(s->repo, f);
	return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "segments",
			 (json_int_t)info.segments, "functions", (json_int_t)info.functions,
			 "inline_ranges", (json_int_t)info.inline_ranges, "line_rows",
			 (json_int_t)info.line_rows, "files", (json_int_t)info.files, "string_bytes",
			 (json_int_t)info.string_bytes, "file_bytes", (json_int_t)info.file_bytes,
			 "from_symtab", (json_int_t)info.from_symtab, "from_dynsym",
			 (json_int_t)info.from_dynsym, "from_dwarf", (json_int_t)info.from_dwarf);
}

/* ---- POST /api/v1/symbols/missing ---------------------------------------------------------- */

struct id_match {
	const struct sysom_build_id *ids;
	const struct sysom_build_id *id;
};

static bool id_eq(const void *ctx, uint32_t idx)
{
	const struct id_match *m = ctx;
	const struct sysom_build_id *a = &m->ids[idx];

	return a->kind == m->id->kind && a->len == m->id->len &&
	       memcmp(a->bytes, m->id->bytes, a->len) == 0;
}

void symbols_missing_post(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct symbols *s = ctx;
	json_t *doc = NULL, *missing = NULL, *objects;
	json_error_t jerr;
	struct hash_index seen = { 0 };
	struct sysom_build_id *ids = NULL;
	size_t n;

	if (!authorized(s, req, AUTH_SCOPE_AGENT, resp))
		return;
	if (!req->body_len) {
		http_response_error(resp, 400, "empty body (want {\"objects\":[...]})");
		return;
	}
	doc = json_loadb((const char *)req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
	objects = json_object_get(doc, "objects");
	if (!doc || !json_is_object(doc) || !json_is_array(objects)) {
		http_response_error(resp, 400, "body must be {\"objects\":[{\"build_id\":HEX,"
					       "\"kind\":\"elf\"|\"file-hash\"},...]}%s%s",
				    doc ? "" : ": ", doc ? "" : jerr.text);
		goto cleanup;
	}
	n = json_array_size(objects);
	if (n > SYMBOLS_MAX_MISSING_OBJECTS) {
		http_response_error(resp, 413, "%zu objects exceed the limit of %u per query", n,
				    SYMBOLS_MAX_MISSING_OBJECTS);
		goto cleanup;
	}
	missing = json_array();
	ids = calloc(n + 1, sizeof(*ids));
	if (!missing || !ids || hash_index_init(&seen, (uint32_t)n + 1)) {
		http_response_error(resp, 503, "out of memory");
		goto cleanup;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *o = json_array_get(objects, i);
		const char *hex = json_string_value(json_object_get(o, "build_id"));
		json_t *kind_j = json_object_get(o, "kind");
		const char *kind = kind_j ? json_string_value(kind_j) : "elf";
		uint8_t id_kind;

		if (!json_is_object(o) || !hex || !kind) {
			http_response_error(resp, 400, "objects[%zu]: want {\"build_id\":HEX,"
						       "\"kind\":\"elf\"|\"file-hash\"}", i);
			goto cleanup;
		}
		if (strcmp(kind, "elf") == 0) {
			id_kind = SYSOM_OBJECT_ELF;
		} else if (strcmp(kind, "file-hash") == 0) {
			id_kind = SYSOM_OBJECT_FILE_HASH;
		} else {
			http_response_error(resp, 400, "objects[%zu]: kind must be elf or file-hash", i);
			goto cleanup;
		}
		if (sysom_build_id_parse_hex(hex, id_kind, &ids[i]) ||
		    (id_kind == SYSOM_OBJECT_FILE_HASH && ids[i].len != 16)) {
			http_response_error(resp, 400,
					    "objects[%zu]: build_id must be 6..128 hex digits, even"
					    " count (32 for file-hash)", i);
			goto cleanup;
		}
	}
	for (size_t i = 0; i < n; i++) {
		const struct sysom_build_id *id = &ids[i];
		uint64_t h = sysom_hash64(id->bytes, id->len, id->kind);
		struct id_match m = { ids, id };
		/* Duplicates are answered once. */
		if (hash_index_find(&seen, h, id_eq, &m) != HASH_INDEX_NONE)
			continue;
		if (hash_index_insert(&seen, h, (uint32_t)i)) {
			http_response_error(resp, 503, "out of memory");
			goto cleanup;
		}
		bool exe = symrepo_has(s->repo, id, SYMREPO_EXECUTABLE);
		bool dbg = id->kind == SYSOM_OBJECT_FILE_HASH ||
			   symrepo_has(s->repo, id, SYMREPO_DEBUGINFO) ||
			   (exe && symbols_executable_has_dwarf(s, id));
		if (exe && dbg)
			continue;
		char text[2 * SYSOM_BUILD_ID_MAX + 1];
		sysom_build_id_hex(id, text, sizeof(text));
		if (json_array_append_new(missing, json_pack("{s:s,s:b,s:b}", "build_id", text,
							     "executable", !exe, "debuginfo",
							     !dbg))) {
			http_response_error(resp, 503, "out of memory");
			goto cleanup;
		}
	}
	metrics_counter_add(&s->metrics->symbol_missing_queries, 1);
	render_json_respond(resp, 200, json_pack("{s:O}", "missing", missing));
cleanup:
	json_decref(missing);
	json_decref(doc);
	hash_index_free(&seen);
	free(ids);
}

/* ---- PUT /api/v1/symbols/{hex}/{kind} ------------------------------------------------------- */

/* One chunk request, parsed. */
struct chunk {
	struct sysom_build_id id;
	struct symbols_session session;   /* hex, kind, upload id */
	uint64_t start, end, total;       /* Content-Range: bytes START-END/TOTAL */
	uint8_t hash[16];                 /* XXH3-128 of the whole file, canonical (big-endian) */
};

/* Reads a decimal uint64 (1..19 digits) at *p; advances *p. */
static bool parse_u64(const char **p, uint64_t *out)
{
	uint64_t v = 0;
	int n = 0;

	while (isdigit((unsigned char)**p)) {
		if (++n > 19)
			return false;
		v = v * 10 + (uint64_t)(**p - '0');
		(*p)++;
	}
	*out = v;
	return n > 0;
}

/* "bytes START-END/TOTAL" with START <= END < TOTAL. */
static bool content_range_parse(const char *text, struct chunk *c)
{
	const char *p = text;

	if (strncasecmp(p, "bytes", 5) != 0)
		return false;
	p += 5;
	if (*p != ' ')
		return false;
	while (*p == ' ')
		p++;
	if (!parse_u64(&p, &c->start) || *p++ != '-' || !parse_u64(&p, &c->end) || *p++ != '/' ||
	    !parse_u64(&p, &c->total) || *p)
		return false;
	return c->start <= c->end && c->end < c->total;
}

/* Parses the path and headers; answers 400 (or 413) itself and returns false when invalid. */
static bool chunk_parse(struct symbols *s, const struct http_request *req, struct chunk *c,
			struct http_response *resp)
{
	const char *rest = req->path + strlen(SYMBOLS_PREFIX);
	const char *slash = strchr(rest, '/');
	const char *range = http_request_header(req, "content-range");
	const char *upload = http_request_header(req, "x-sysom-upload-id");
	const char *hash = http_request_header(req, "x-sysom-content-hash");
	const char *identity = http_request_header(req, "x-sysom-identity");
	char hex[2 * SYSOM_BUILD_ID_MAX + 1];
	uint8_t id_kind = SYSOM_OBJECT_ELF;
	size_t upload_len;

	memset(c, 0, sizeof(*c));
	if (!slash || (size_t)(slash - rest) >= sizeof(hex) ||
	    kind_parse(slash + 1, strlen(slash + 1), &c->session.kind)) {
		http_response_error(resp, 400, "want PUT %s{build-id}/executable or .../debuginfo",
				    SYMBOLS_PREFIX);
		return false;
	}
	memcpy(hex, rest, (size_t)(slash - rest));
	hex[slash - rest] = '\0';
	if (identity && strcmp(identity, "file-hash") == 0) {
		id_kind = SYSOM_OBJECT_FILE_HASH;
	} else if (identity && strcmp(identity, "elf") != 0) {
		http_response_error(resp, 400, "X-Sysom-Identity must be elf or file-hash");
		return false;
	}
	if (sysom_build_id_parse_hex(hex, id_kind, &c->id) ||
	    (id_kind == SYSOM_OBJECT_FILE_HASH && c->id.len != 16)) {
		http_response_error(resp, 400, "invalid build ID in the path (want 6..128 hex digits,"
					       " even count; 32 for file-hash)");
		return false;
	}
	if (id_kind == SYSOM_OBJECT_FILE_HASH && c->session.kind == SYMREPO_DEBUGINFO) {
		http_response_error(resp, 400, "a file identified by its content hash has no"
					       " separate debug file");
		return false;
	}
	sysom_build_id_hex(&c->id, c->session.hex, sizeof(c->session.hex));
	if (!range || !content_range_parse(range, c)) {
		http_response_error(resp, 400, "%s Content-Range header (want bytes START-END/TOTAL,"
					       " START <= END < TOTAL)", range ? "malformed" : "missing");
		return false;
	}
	upload_len = upload ? strlen(upload) : 0;
	if (!upload || upload_len < SYMBOLS_UPLOAD_ID_MIN || upload_len > SYMBOLS_UPLOAD_ID_MAX ||
	    !sysom_hex_valid(upload, upload_len)) {
		http_response_error(resp, 400, "%s X-Sysom-Upload-Id header (want %d..%d hex digits)",
				    upload ? "malformed" : "missing", SYMBOLS_UPLOAD_ID_MIN,
				    SYMBOLS_UPLOAD_ID_MAX);
		return false;
	}
	memcpy(c->session.upload_id, upload, upload_len);
	lower(c->session.upload_id);
	if (!hash || strncasecmp(hash, HASH_PREFIX, strlen(HASH_PREFIX)) != 0 ||
	    strlen(hash) != strlen(HASH_PREFIX) + 32) {
		http_response_error(resp, 400, "%s X-Sysom-Content-Hash header (want %s<32 hex>)",
				    hash ? "malformed" : "missing", HASH_PREFIX);
		return false;
	}
	for (int i = 0; i < 16; i++) {
		int hi = sysom_hex_digit(hash[strlen(HASH_PREFIX) + 2 * i]);
		int lo = sysom_hex_digit(hash[strlen(HASH_PREFIX) + 2 * i + 1]);
		if (hi < 0 || lo < 0) {
			http_response_error(resp, 400, "malformed X-Sysom-Content-Hash header (want %s"
						       "<32 hex>)", HASH_PREFIX);
			return false;
		}
		c->hash[i] = (uint8_t)(hi << 4 | lo);
	}
	if (c->total > s->opts.max_file_size) {
		http_response_error(resp, 413, "file of %" PRIu64 " bytes exceeds the limit of %" PRIu64
					       " bytes", c->total, s->opts.max_file_size);
		return false;
	}
	if (req->body_len != c->end - c->start + 1) {
		http_response_error(resp, 400, "body of %zu bytes does not match Content-Range"
					       " (%" PRIu64 " bytes)", req->body_len,
				    c->end - c->start + 1);
		return false;
	}
	return true;
}

static void respond_conflict(struct http_response *resp, uint64_t resume_at, const char *why)
{
	char message[160];

	snprintf(message, sizeof(message), "%s; resume at byte %" PRIu64, why, resume_at);
	render_json_respond(resp, 409, json_pack("{s:s,s:I}", "error", message, "resume_at",
						 (json_int_t)resume_at));
}

static void respond_present(struct http_response *resp, const struct chunk *c)
{
	render_json_respond(resp, 200, json_pack("{s:s,s:s,s:s}", "status", "present", "build_id",
						 c->session.hex, "kind",
						 symbols__kind_name(c->session.kind)));
}

static enum symbol_upload_result respond_io_error(struct http_response *resp, int rc,
						  const char *what)
{
	if (rc == -ENOSPC || rc == -EDQUOT || rc == -EIO) {
		http_response_error(resp, 507, "%s: %s; retry later", what, sysom_strerror(rc));
		http_response_header(resp, "Retry-After", "60");
	} else {
		http_response_error(resp, 500, "%s: %s", what, sysom_strerror(rc));
	}
	return SYMBOL_UPLOAD_FAILED;
}

/*
 * What installing a complete file of `total` bytes is assumed to allocate (its symbol file's
 * build: libdw's DWARF structures and the writer's tables grow with the debug sections):
 * the file's size, at most a quarter of the decode memory budget so that a large file is
 * not starved by the uploads around it.
 */
static uint64_t install_estimate(struct symbols *s, uint64_t total)
{
	struct membudget_stats st;

	if (!s->opts.memory_budget)
		return 0;
	membudget_stats_get(s->opts.memory_budget, &st);
	return total < st.capacity / 4 ? total : st.capacity / 4;
}

/* The decode memory budget refused a step: 503 (stayed full) or 413 (never fits). */
static enum symbol_upload_result respond_memory_busy(struct http_response *resp, int rc,
						     uint64_t want)
{
	if (rc == -E2BIG) {
		http_response_error(resp, 413, "this chunk needs %" PRIu64 " bytes of memory, more"
					       " than the server's whole decode memory budget; send"
					       " smaller chunks", want);
		return SYMBOL_UPLOAD_INVALID;
	}
	http_response_error(resp, 503, "the server's decode memory is in use by other uploads;"
				       " retry later");
	http_response_header(resp, "Retry-After", RETRY_AFTER_MEMORY);
	return SYMBOL_UPLOAD_BUSY;
}

/* XXH3-128 (canonical big-endian bytes) of `size` bytes of `fd`, streamed. 0 or -errno. */
static int file_hash(int fd, uint64_t size, uint8_t out[16])
{
	XXH3_state_t *state = XXH3_createState();
	uint8_t *buf = malloc(HASH_CHUNK);
	uint64_t at = 0;
	int rc = 0;

	if (!state || !buf) {
		rc = -ENOMEM;
		goto cleanup;
	}
	XXH3_128bits_reset(state);
	while (at < size) {
		size_t want = size - at < HASH_CHUNK ? (size_t)(size - at) : HASH_CHUNK;
		ssize_t n = pread(fd, buf, want, (off_t)at);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			goto cleanup;
		}
		XXH3_128bits_update(state, buf, (size_t)n);
		at += (uint64_t)n;
	}
	XXH128_canonical_t canon;
	XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(state));
	memcpy(out, canon.digest, 16);
cleanup:
	free(buf);
	XXH3_freeState(state);
	return rc;
}

/* Writes the whole body at c->start; on failure cuts the file back to c->start. */
static int chunk_write(int fd, const struct chunk *c, const uint8_t *data, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, data + done, len - done, (off_t)(c->start + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int rc = n < 0 ? -errno : -EIO;
			if (ftruncate(fd, (off_t)c->start) != 0) {
				/* The size stays the resume point; the final hash check catches any
				 * garbage this leaves. */
			}
			return rc;
		}
		done += (size_t)n;
	}
	return 0;
}

static int rename_errno(const char *from, const char *to)
{
	return rename(from, to) == 0 ? 0 : -errno;
}

/*
 * The file is complete: checks its hash and identity, then installs it. Answers the request;
 * `*keep` says whether the partial file (and its session) should stay for a retry.
 */
static enum symbol_upload_result chunk_finish(struct symbols *s, struct chunk *c, int fd,
					      const char *path, struct membudget_hold *hold,
					      struct http_response *resp, bool *keep)
{
	uint8_t got[16];
	char want_hex[33], got_hex[33], err[256] = "", tmp[PATH_MAX];
	struct sysom_build_id file_id;
	int rc;

	*keep = false;
	if ((rc = file_hash(fd, c->total, got))) {
		*keep = true;
		return respond_io_error(resp, rc, "cannot read the uploaded file");
	}
	if (memcmp(got, c->hash, 16) != 0) {
		sysom_hex_encode(c->hash, 16, want_hex, sizeof(want_hex));
		sysom_hex_encode(got, 16, got_hex, sizeof(got_hex));
		http_response_error(resp, 422, "content hash mismatch: X-Sysom-Content-Hash says %s%s,"
					       " the %" PRIu64 " bytes received hash to %s%s; the"
					       " upload is discarded, start again at byte 0",
				    HASH_PREFIX, want_hex, c->total, HASH_PREFIX, got_hex);
		return SYMBOL_UPLOAD_INVALID;
	}
	if (c->id.kind == SYSOM_OBJECT_FILE_HASH) {
		if (memcmp(got, c->id.bytes, 16) != 0) {
			http_response_error(resp, 422, "the file's content hash is not the build ID %s",
					    c->session.hex);
			return SYMBOL_UPLOAD_INVALID;
		}
	} else {
		rc = sysom_elf_build_id(fd, &file_id);
		if (rc || file_id.len != c->id.len || memcmp(file_id.bytes, c->id.bytes, c->id.len)) {
			char file_hex[2 * SYSOM_BUILD_ID_MAX + 1] = "";
			if (!rc)
				sysom_build_id_hex(&file_id, file_hex, sizeof(file_hex));
			http_response_error(resp, 422, "identity mismatch: the uploaded file %s%s, not"
						       " %s",
					    rc ? "has no build ID: " : "has build ID ",
					    rc ? sysom_strerror(rc) : file_hex, c->session.hex);
			return SYMBOL_UPLOAD_INVALID;
		}
	}
	/* Building the symbol file allocates with the DWARF it indexes: reserve an estimate
	 * before the file is handed over (a 503 here keeps it for the retry). */
	if ((rc = membudget_hold_resize(hold, HASH_CHUNK + install_estimate(s, c->total)))) {
		*keep = true;
		return respond_memory_busy(resp, rc, HASH_CHUNK + install_estimate(s, c->total));
	}
	/* The repository installs from its own temporary directory: move the file there (same
	 * filesystem); from now on the installation consumes it, whatever happens. */
	if ((rc = symrepo_tmp_path(s->repo, tmp, sizeof(tmp))) || (rc = rename_errno(path, tmp))) {
		*keep = true;
		return respond_io_error(resp, rc, "cannot move the upload into the repository");
	}
	rc = symrepo_install(s->repo, &c->id, c->session.kind, tmp, err, sizeof(err));
	if (rc == -EEXIST) {
		/* Another upload of the same file won the race: the repository has it. */
		respond_present(resp, c);
		return SYMBOL_UPLOAD_PRESENT;
	}
	if (rc == -SYSOM_ECORRUPT) {
		http_response_error(resp, 422, "rejected by the repository: %s",
				    err[0] ? err : sysom_strerror(rc));
		return SYMBOL_UPLOAD_INVALID;
	}
	if (rc)
		return respond_io_error(resp, rc, err[0] ? err : "cannot install the file");
	installed(s, &c->id);
	if (s->want_debuginfo && c->session.kind == SYMREPO_EXECUTABLE &&
	    c->id.kind == SYSOM_OBJECT_ELF && !symrepo_has(s->repo, &c->id, SYMREPO_DEBUGINFO) &&
	    !symbols_executable_has_dwarf(s, &c->id))
		s->want_debuginfo(s->want_debuginfo_ctx, &c->id);
	json_t *doc = json_pack("{s:s,s:s,s:s,s:I,s:o}", "status", "stored", "build_id",
				c->session.hex, "kind", symbols__kind_name(c->session.kind), "size",
				(json_int_t)c->total, "symbols", symbols_info_json(s, &c->id));
	/* Installed, but no symbol file (yet): a debug file waits for its executable, or the
	 * writer failed (the repository's gc retries). */
	if (doc && err[0])
		json_object_set_new(doc, "warning", render_json_string(err));
	render_json_respond(resp, 201, doc);
	return SYMBOL_UPLOAD_STORED;
}

static enum symbol_upload_result chunk_put(struct symbols *s, const struct http_request *req,
					   struct http_response *resp)
{
	enum symbol_upload_result result = SYMBOL_UPLOAD_INVALID;
	enum acquire_result acq;
	struct reserve_refusal why;
	struct chunk c;
	char path[PATH_MAX];
	struct stat sb;
	struct membudget_hold hold;
	bool held = false, keep = true;
	int fd = -1, rc;

	membudget_hold_init(&hold, s->opts.memory_budget);
	if (!authorized(s, req, AUTH_SCOPE_AGENT, resp) || !chunk_parse(s, req, &c, resp))
		return SYMBOL_UPLOAD_INVALID;
	if (session_path(s, &c.session, path, sizeof(path))) {
		http_response_error(resp, 400, "upload path too long");
		return SYMBOL_UPLOAD_INVALID;
	}
	if (symrepo_has(s->repo, &c.id, c.session.kind)) {
		/* This upload's partial file is of no use now (unless a request still writes it). */
		acq = session_acquire(s, &c.session, 0, &why);
		if (acq == ACQUIRED_NEW || acq == ACQUIRED_EXISTING)
			session_drop(s, &c.session, true);
		respond_present(resp, &c);
		return SYMBOL_UPLOAD_PRESENT;
	}
	acq = session_acquire(s, &c.session, c.total, &why);
	switch (acq) {
	case ACQUIRE_BUSY:
		respond_conflict(resp, stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0,
				 "another chunk of this upload is being written");
		return SYMBOL_UPLOAD_CONFLICT;
	case ACQUIRE_FULL:
		http_response_error(resp, 503, "too many uploads in progress (%u); retry later",
				    s->opts.max_sessions);
		http_response_header(resp, "Retry-After", RETRY_AFTER_BUSY);
		return SYMBOL_UPLOAD_BUSY;
	case ACQUIRE_OVER_BUDGET:
		/* Waiting helps: the other uploads finish or expire and release their share. */
		http_response_error(resp, 503, "partial uploads reserve %" PRIu64 " of %" PRIu64
					       " bytes; this file needs %" PRIu64 "; retry later",
				    why.reserved, s->opts.max_reserved_bytes, why.want);
		http_response_header(resp, "Retry-After", RETRY_AFTER_BUSY);
		return SYMBOL_UPLOAD_OVER_BUDGET;
	case ACQUIRE_NO_SPACE:
		/* Waiting alone does not help (finished uploads keep their bytes): the disk needs
		 * room made on it. Retry-After as for a write that finds the disk full. */
		http_response_error(resp, 507, "the symbols disk has %" PRIu64 " bytes free, the"
					       " partial uploads with this one still need %" PRIu64,
				    why.free, why.outstanding);
		http_response_header(resp, "Retry-After", RETRY_AFTER_NO_SPACE);
		return SYMBOL_UPLOAD_NO_SPACE;
	case ACQUIRE_STATFS_FAILED:
		return respond_io_error(resp, why.error, "cannot tell the free space for the upload");
	case ACQUIRE_NOMEM:
		http_response_error(resp, 503, "out of memory");
		http_response_header(resp, "Retry-After", RETRY_AFTER_BUSY);
		return SYMBOL_UPLOAD_BUSY;
	case ACQUIRED_NEW:
	case ACQUIRED_EXISTING:
		break;
	}
	held = true;
	if (acq == ACQUIRED_NEW && c.start != 0) {
		/* Nothing received for this upload id: it starts at 0. */
		keep = false;
		respond_conflict(resp, 0, "no partial upload with this id");
		result = SYMBOL_UPLOAD_CONFLICT;
		goto cleanup;
	}
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	if (fd < 0 || fstat(fd, &sb) != 0) {
		rc = -errno;
		keep = acq == ACQUIRED_EXISTING;
		result = respond_io_error(resp, rc, "cannot open the partial upload");
		goto cleanup;
	}
	uint64_t size = (uint64_t)sb.st_size;
	if (size > c.total) {
		/* Left over from a different file under the same upload id: start again. */
		keep = false;
		respond_conflict(resp, 0, "the partial upload is longer than the file");
		result = SYMBOL_UPLOAD_CONFLICT;
		goto cleanup;
	}
	if (size != c.start && !(size == c.total && c.end + 1 == c.total)) {
		respond_conflict(resp, size, "chunk does not start where the upload stands");
		result = SYMBOL_UPLOAD_CONFLICT;
		goto cleanup;
	}
	if (size == c.start) {
		/* (A complete file re-sent its last chunk: only the installation is retried.) */
		if ((rc = membudget_hold_resize(&hold, req->body_len + HASH_CHUNK))) {
			result = respond_memory_busy(resp, rc, req->body_len + HASH_CHUNK);
			goto cleanup;
		}
		if ((rc = chunk_write(fd, &c, req->body, req->body_len))) {
			result = respond_io_error(resp, rc, "cannot write the chunk");
			goto cleanup;
		}
		metrics_counter_add(&s->metrics->symbol_upload_bytes, req->body_len);
	}
	if (c.end + 1 < c.total) {
		render_json_respond(resp, 202, json_pack("{s:s,s:I}", "status", "partial", "received",
							 (json_int_t)(c.end + 1)));
		result = SYMBOL_UPLOAD_PARTIAL;
		goto cleanup;
	}
	result = chunk_finish(s, &c, fd, path, &hold, resp, &keep);
cleanup:
	membudget_hold_release(&hold);
	if (held && keep) {
		uint64_t received = fd >= 0 && fstat(fd, &sb) == 0 ? (uint64_t)sb.st_size : UINT64_MAX;
		session_release(s, &c.session, received);
	} else if (held) {
		session_drop(s, &c.session, true);
	}
	if (fd >= 0)
		close(fd);
	return result;
}

void symbols_put(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct symbols *s = ctx;
	enum symbol_upload_result result = chunk_put(s, req, resp);

	metrics_counter_add(&s->metrics->symbol_uploads[result], 1);
}

/* ---- GET /api/v1/symbols/{hex} -------------------------------------------------------------- */

static json_t *file_json(struct symbols *s, const struct sysom_build_id *id, enum symrepo_kind kind)
{
	char path[PATH_MAX];
	struct stat sb;

	if (symrepo_path(s->repo, id, kind, path, sizeof(path)) || stat(path, &sb) != 0)
		return json_null();
	return json_pack("{s:I}", "size", (json_int_t)sb.st_size);
}

/* The partial uploads of a Build ID (hex) as JSON. */
static json_t *uploads_json(struct symbols *s, const char *hex)
{
	json_t *list = json_array();
	struct symbols_session *copy = NULL;
	size_t n = 0;

	pthread_mutex_lock(&s->lock);
	copy = calloc(s->nsessions + 1, sizeof(*copy));
	for (size_t i = 0; copy && i < s->nsessions; i++)
		if (strcmp(s->sessions[i].hex, hex) == 0)
			copy[n++] = s->sessions[i];
	pthread_mutex_unlock(&s->lock);
	if (!copy) {
		json_decref(list);
		return NULL;
	}
	for (size_t i = 0; list && i < n; i++) {
		char path[PATH_MAX];
		struct stat sb;
		if (session_path(s, &copy[i], path, sizeof(path)) || stat(path, &sb) != 0)
			continue;
		json_array_append_new(list, json_pack("{s:s,s:s,s:I,s:o}", "kind",
						      symbols__kind_name(copy[i].kind), "upload_id",
						      copy[i].upload_id, "received",
						      (json_int_t)sb.st_size, "updated",
						      render_json_time(stat_mtime_ns(&sb))));
	}
	free(copy);
	return list;
}

void symbols_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct symbols *s = ctx;
	const char *hex = req->path + strlen(SYMBOLS_PREFIX);
	struct sysom_build_id id;
	char text[2 * SYSOM_BUILD_ID_MAX + 1];
	json_t *exe, *dbg, *syms, *uploads;

	if (!authorized(s, req, AUTH_SCOPE_AGENT | AUTH_SCOPE_READ, resp))
		return;
	if (strcmp(req->path, SYMBOLS_MISSING_PATH) == 0) {
		http_response_error(resp, 405, "method %s not allowed here", req->method);
		http_response_header(resp, "Allow", "POST");
		return;
	}
	if (sysom_build_id_parse_hex(hex, SYSOM_OBJECT_ELF, &id)) {
		http_response_error(resp, 400, "invalid build ID in the path (want 6..128 hex digits,"
					       " even count)");
		return;
	}
	sysom_build_id_hex(&id, text, sizeof(text));
	/* Content-hash identities (16 bytes) live in a tree of their own: look there when the
	 * GNU build ID tree has nothing under these bytes. */
	if (id.len == 16 && !symrepo_has(s->repo, &id, SYMREPO_EXECUTABLE) &&
	    !symrepo_has(s->repo, &id, SYMREPO_DEBUGINFO) &&
	    !symrepo_has(s->repo, &id, SYMREPO_SYMBOLS)) {
		struct sysom_build_id fh = id;
		fh.kind = SYSOM_OBJECT_FILE_HASH;
		if (symrepo_has(s->repo, &fh, SYMREPO_EXECUTABLE) ||
		    symrepo_has(s->repo, &fh, SYMREPO_SYMBOLS))
			id = fh;
	}
	exe = file_json(s, &id, SYMREPO_EXECUTABLE);
	dbg = id.kind == SYSOM_OBJECT_FILE_HASH ? json_null() : file_json(s, &id, SYMREPO_DEBUGINFO);
	syms = symbols_info_json(s, &id);
	uploads = uploads_json(s, text);
	if (!exe || !dbg || !syms || !uploads) {
		json_decref(exe);
		json_decref(dbg);
		json_decref(syms);
		json_decref(uploads);
		http_response_error(resp, 503, "out of memory");
		return;
	}
	if (json_is_null(exe) && json_is_null(dbg) && json_is_null(syms) &&
	    json_array_size(uploads) == 0) {
		json_decref(uploads);
		http_response_error(resp, 404, "no symbol files for build ID %s", text);
		return;
	}
	render_json_respond(resp, 200,
			    json_pack("{s:s,s:s,s:o,s:o,s:o,s:o}", "build_id", text, "identity",
				      id.kind == SYSOM_OBJECT_FILE_HASH ? "file-hash" : "elf",
				      "executable", exe, "debuginfo", dbg, "symbols", syms, "uploads",
				      uploads));
}

/* ---- lifetime -------------------------------------------------------------------------------- */

int symbols_new(struct symrepo *repo, struct auth *auth, struct symbolizer *sym,
		struct server_metrics *metrics, const struct symbols_options *opts,
		struct symbols **out, char *err, size_t errlen)
{
	struct symbols *s;
	int rc;

	if (!repo || !auth || !metrics || !opts || !opts->dir) {
		snprintf(err, errlen, "symbols: repository, auth, metrics and a directory are required");
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->repo = repo;
	s->auth = auth;
	s->sym = sym;
	s->metrics = metrics;
	s->opts = *opts;
	if (!s->opts.max_file_size)
		s->opts.max_file_size = SYMBOLS_DEFAULT_MAX_FILE;
	if (!s->opts.max_sessions)
		s->opts.max_sessions = SYMBOLS_DEFAULT_MAX_SESSIONS;
	if (!s->opts.max_reserved_bytes)
		s->opts.max_reserved_bytes =
			s->opts.max_file_size > UINT64_MAX / SYMBOLS_DEFAULT_RESERVE_FILES ?
				UINT64_MAX : s->opts.max_file_size * SYMBOLS_DEFAULT_RESERVE_FILES;
	if (!(s->opts.upload_expiry_s > 0))
		s->opts.upload_expiry_s = SYMBOLS_DEFAULT_UPLOAD_EXPIRY_S;
	pthread_mutex_init(&s->lock, NULL);
	if (s->opts.max_reserved_bytes < s->opts.max_file_size) {
		rc = -EINVAL;
		snprintf(err, errlen, "max-upload-reserve (%" PRIu64 " bytes) is below"
				      " max-symbol-file-size (%" PRIu64 " bytes): a file of that size"
				      " could never be uploaded", s->opts.max_reserved_bytes,
			 s->opts.max_file_size);
		goto cleanup;
	}
	elf_version(EV_CURRENT);
	if ((size_t)snprintf(s->uploads, sizeof(s->uploads), "%s/uploads", opts->dir) >=
	    sizeof(s->uploads)) {
		rc = -ENAMETOOLONG;
		snprintf(err, errlen, "symbols directory name too long");
		goto cleanup;
	}
	if (mkdir(s->uploads, 0750) != 0 && errno != EEXIST) {
		rc = -errno;
		snprintf(err, errlen, "cannot create %s: %s", s->uploads, strerror(errno));
		goto cleanup;
	}
	s->opts.dir = NULL; /* borrowed for the call only */
	if ((rc = sessions_load(s, err, errlen)))
		goto cleanup;
	*out = s;
	return 0;
cleanup:
	symbols_free(s);
	return rc;
}

void symbols_want_debuginfo_set(struct symbols *s, symbolizer_missing_fn fn, void *ctx)
{
	s->want_debuginfo = fn;
	s->want_debuginfo_ctx = ctx;
}

void symbols_free(struct symbols *s)
{
	if (!s)
		return;
	free(s->sessions);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
