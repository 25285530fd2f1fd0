/* SPDX-License-Identifier: Apache-2.0 */
/* Credentials files: parsing, validation and lookups by token hash, name and node id. */
#include "server/http/auth_credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/array.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/hex.h"

#define MAX_FIELDS 4        /* SCOPE NAME TOKEN-SPEC [NODE-IDS] */
#define SHOWN_MAX 32        /* bytes of a bad field quoted in an error */

struct auth_credentials {
	struct auth_credential *items; /* sorted by token hash once parsed */
	size_t count, cap;
	size_t *by_name;               /* indexes into items, sorted by name */
};

/* A field of a line: a byte range of the text. */
struct field {
	const char *p;
	size_t len;
};

static void fail(struct auth_credentials_error *err, size_t line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void fail(struct auth_credentials_error *err, size_t line, const char *fmt, ...)
{
	va_list ap;

	err->line = line;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
}

/* A bad field, quoted in an error: at most SHOWN_MAX bytes, unprintable ones as '?'. */
static const char *shown(const struct field *f, char out[SHOWN_MAX + 4])
{
	size_t n = f->len < SHOWN_MAX ? f->len : SHOWN_MAX;

	for (size_t i = 0; i < n; i++)
		out[i] = f->p[i] > ' ' && f->p[i] < 0x7f ? f->p[i] : '?';
	if (f->len > SHOWN_MAX) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
	return out;
}

static bool field_is(const struct field *f, const char *word)
{
	return f->len == strlen(word) && memcmp(f->p, word, f->len) == 0;
}

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == '-' || c == '@';
}

const char *auth_scope_name(enum auth_scope scope)
{
	switch (scope) {
	case AUTH_SCOPE_AGENT:
		return "agent";
	case AUTH_SCOPE_READ:
		return "read";
	case AUTH_SCOPE_ADMIN:
		return "admin";
	}
	return "?";
}

static int node_cmp(const void *a, const void *b)
{
	return memcmp(a, b, AUTH_NODE_ID_SIZE);
}

/* NODE-IDS of an agent line into `c`; returns 0 or an error (err filled). */
static int nodes_parse(const struct field *f, size_t line, struct auth_credential *c,
		       struct auth_credentials_error *err)
{
	uint8_t (*nodes)[AUTH_NODE_ID_SIZE] = NULL;
	size_t count = 0, cap = 0;
	const char *p = f->p, *end = f->p + f->len;
	char show[SHOWN_MAX + 4], hex[2 * AUTH_NODE_ID_SIZE + 1];
	int rc = 0;

	if (field_is(f, "*")) {
		c->any_node = true;
		return 0;
	}
	while (p <= end) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		struct field id = { p, (size_t)((comma ? comma : end) - p) };

		if (id.len != 2 * AUTH_NODE_ID_SIZE || !sysom_hex_valid(id.p, id.len)) {
			fail(err, line, "node id '%s' is not 32 hex digits (or give * for any node)",
			     shown(&id, show));
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
		if (count == AUTH_CREDENTIAL_MAX_NODES) {
			fail(err, line, "more than %d node ids", AUTH_CREDENTIAL_MAX_NODES);
			rc = -SYSOM_ELIMIT;
			goto cleanup;
		}
		if ((rc = SYSOM_ARRAY_RESERVE(nodes, cap, count, 4)))
			goto cleanup;
		sysom_hex_decode(id.p, id.len, nodes[count++], AUTH_NODE_ID_SIZE);
		if (!comma)
			break;
		p = comma + 1;
	}
	qsort(nodes, count, sizeof(*nodes), node_cmp);
	for (size_t i = 1; i < count; i++) {
		if (memcmp(nodes[i - 1], nodes[i], AUTH_NODE_ID_SIZE) == 0) {
			sysom_hex_encode(nodes[i], AUTH_NODE_ID_SIZE, hex, sizeof(hex));
			fail(err, line, "node id %s is listed twice", hex);
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
	}
	c->nodes = (const uint8_t(*)[AUTH_NODE_ID_SIZE])nodes;
	c->node_count = count;
	nodes = NULL;
cleanup:
	free(nodes);
	return rc;
}

/* One credential line split into `nf` fields; fills `c`. Returns 0 or an error. */
static int line_parse(const struct field *f, size_t nf, size_t line, struct auth_credential *c,
		      struct auth_credentials_error *err)
{
	static const size_t prefix_len = sizeof(AUTH_TOKEN_SPEC_PREFIX) - 1;
	char show[SHOWN_MAX + 4];

	memset(c, 0, sizeof(*c));
	c->line = line;
	if (nf < 3) {
		fail(err, line, "want SCOPE NAME TOKEN-SPEC [NODE-IDS], found %zu field%s", nf,
		     nf == 1 ? "" : "s");
		return -SYSOM_ECORRUPT;
	}
	if (field_is(&f[0], "agent"))
		c->scope = AUTH_SCOPE_AGENT;
	else if (field_is(&f[0], "read"))
		c->scope = AUTH_SCOPE_READ;
	else if (field_is(&f[0], "admin"))
		c->scope = AUTH_SCOPE_ADMIN;
	else {
		fail(err, line, "unknown scope '%s' (want agent, read or admin)", shown(&f[0], show));
		return -SYSOM_ECORRUPT;
	}
	if (f[1].len == 0 || f[1].len > AUTH_CREDENTIAL_NAME_MAX) {
		fail(err, line, "name longer than %d bytes", AUTH_CREDENTIAL_NAME_MAX);
		return -SYSOM_ECORRUPT;
	}
	for (size_t i = 0; i < f[1].len; i++) {
		if (!name_char(f[1].p[i])) {
			fail(err, line, "name '%s' has characters other than A-Z a-z 0-9 . _ @ -",
			     shown(&f[1], show));
			return -SYSOM_ECORRUPT;
		}
	}
	memcpy(c->name, f[1].p, f[1].len);
	c->name[f[1].len] = '\0';
	/* The spec is never quoted: a token pasted by mistake must not reach the logs. */
	if (f[2].len != prefix_len + 2 * AUTH_SHA256_SIZE ||
	    memcmp(f[2].p, AUTH_TOKEN_SPEC_PREFIX, prefix_len) != 0 ||
	    sysom_hex_decode(f[2].p + prefix_len, 2 * AUTH_SHA256_SIZE, c->token_sha256,
			     sizeof(c->token_sha256)) != AUTH_SHA256_SIZE) {
		fail(err, line, "credential '%s': the token spec is not sha256: and 64 hex digits"
				" (the file holds token hashes, never tokens)", c->name);
		return -SYSOM_ECORRUPT;
	}
	if (c->scope != AUTH_SCOPE_AGENT) {
		if (nf > 3) {
			fail(err, line, "credential '%s': only agent credentials name nodes (%s may"
					" do what its scope allows on every node)", c->name,
			     auth_scope_name(c->scope));
			return -SYSOM_ECORRUPT;
		}
		return 0;
	}
	if (nf < 4) {
		fail(err, line, "agent credential '%s' needs the node ids it writes for"
				" (comma-separated, or * for any node)", c->name);
		return -SYSOM_ECORRUPT;
	}
	return nodes_parse(&f[3], line, c, err);
}

/* Splits [p, end) (a line without its newline) into fields, up to the first '#'. Returns
 * the field count, or MAX_FIELDS + 1 when there are more. */
static size_t fields_split(const char *p, const char *end, struct field f[MAX_FIELDS])
{
	const char *hash = memchr(p, '#', (size_t)(end - p));
	size_t n = 0;

	if (hash)
		end = hash;
	while (p < end) {
		while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
			p++;
		if (p == end)
			break;
		const char *start = p;
		while (p < end && *p != ' ' && *p != '\t' && *p != '\r')
			p++;
		if (n == MAX_FIELDS)
			return MAX_FIELDS + 1;
		f[n++] = (struct field){ start, (size_t)(p - start) };
	}
	return n;
}

static void credential_clear(struct auth_credential *c)
{
	free((void *)c->nodes);
	c->nodes = NULL;
}

void auth_credentials_free(struct auth_credentials *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->count; i++)
		credential_clear(&c->items[i]);
	free(c->items);
	free(c->by_name);
	free(c);
}

/* Orders by token hash; qsort and bsearch comparators. */
static int by_hash(const void *a, const void *b)
{
	const struct auth_credential *x = a, *y = b;

	return memcmp(x->token_sha256, y->token_sha256, AUTH_SHA256_SIZE);
}

static int hash_key_cmp(const void *key, const void *item)
{
	return memcmp(key, ((const struct auth_credential *)item)->token_sha256, AUTH_SHA256_SIZE);
}

/* qsort_r comparator: indexes into the items array (arg), by name. */
static int by_name(const void *a, const void *b, void *arg)
{
	const struct auth_credential *items = arg;

	return strcmp(items[*(const size_t *)a].name, items[*(const size_t *)b].name);
}

/* Sorts the parsed set and refuses repeated names and token hashes. */
static int set_index(struct auth_credentials *set, struct auth_credentials_error *err)
{
	if (set->count == 0)
		return 0;
	qsort(set->items, set->count, sizeof(*set->items), by_hash);
	for (size_t i = 1; i < set->count; i++) {
		const struct auth_credential *a = &set->items[i - 1], *b = &set->items[i];
		if (memcmp(a->token_sha256, b->token_sha256, AUTH_SHA256_SIZE) == 0) {
			const struct auth_credential *later = a->line > b->line ? a : b;
			const struct auth_credential *earlier = later == a ? b : a;
			fail(err, later->line, "credential '%s' has the same token as '%s' (line %zu):"
					       " issue each client its own token",
			     later->name, earlier->name, earlier->line);
			return -SYSOM_ECORRUPT;
		}
	}
	set->by_name = malloc(set->count * sizeof(*set->by_name));
	if (!set->by_name)
		return -ENOMEM;
	for (size_t i = 0; i < set->count; i++)
		set->by_name[i] = i;
	qsort_r(set->by_name, set->count, sizeof(*set->by_name), by_name, set->items);
	for (size_t i = 1; i < set->count; i++) {
		const struct auth_credential *a = &set->items[set->by_name[i - 1]];
		const struct auth_credential *b = &set->items[set->by_name[i]];
		if (strcmp(a->name, b->name) == 0) {
			const struct auth_credential *later = a->line > b->line ? a : b;
			fail(err, later->line, "name '%s' is already used on line %zu", later->name,
			     (later == a ? b : a)->line);
			return -SYSOM_ECORRUPT;
		}
	}
	return 0;
}

int auth_credentials_parse(const char *text, size_t len, struct auth_credentials **out,
			   struct auth_credentials_error *err)
{
	struct auth_credentials *set = calloc(1, sizeof(*set));
	const char *p = text, *end = text + len;
	struct field f[MAX_FIELDS];
	size_t line = 0;
	int rc = 0;

	memset(err, 0, sizeof(*err));
	if (!set)
		return -ENOMEM;
	if (len > AUTH_CREDENTIALS_FILE_MAX) {
		fail(err, 0, "larger than %u bytes", AUTH_CREDENTIALS_FILE_MAX);
		rc = -SYSOM_ELIMIT;
		goto cleanup;
	}
	if (len && memchr(text, '\0', len)) {
		fail(err, 0, "a NUL byte: not a text file");
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end;
		size_t nf = fields_split(p, eol, f);

		line++;
		p = nl ? nl + 1 : end;
		if (nf == 0)
			continue;
		if (nf > MAX_FIELDS) {
			fail(err, line, "more than %d fields (want SCOPE NAME TOKEN-SPEC [NODE-IDS];"
					" node ids are separated by commas, not spaces)", MAX_FIELDS);
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
		if (set->count == AUTH_CREDENTIALS_MAX) {
			fail(err, line, "more than %d credentials", AUTH_CREDENTIALS_MAX);
			rc = -SYSOM_ELIMIT;
			goto cleanup;
		}
		if ((rc = SYSOM_ARRAY_RESERVE(set->items, set->cap, set->count, 16)))
			goto cleanup;
		if ((rc = line_parse(f, nf, line, &set->items[set->count], err))) {
			credential_clear(&set->items[set->count]);
			goto cleanup;
		}
		set->count++;
	}
	if ((rc = set_index(set, err)))
		goto cleanup;
	*out = set;
	set = NULL;
cleanup:
	auth_credentials_free(set);
	return rc;
}

int auth_credentials_load(const char *path, struct auth_credentials **out, char *err,
			  size_t errlen)
{
	struct auth_credentials_error perr;
	struct stat st;
	char *text = NULL;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	int rc = 0;

	if (fd < 0) {
		rc = -errno;
		sysom_errorf(err, errlen, "cannot open credentials file %s: %s", path,
			     sysom_strerror(rc));
		return rc;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		sysom_errorf(err, errlen, "credentials file %s is not a regular file", path);
		rc = -SYSOM_ECONFIG;
		goto cleanup;
	}
	/* Anyone who can write it can add an admin credential; names and node lists are the
	 * operator's business even though tokens are stored hashed. */
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		sysom_errorf(err, errlen, "credentials file %s is writable by %s: anyone could add a"
					  " credential; chmod 600 (or 640 for a group the server is in)",
			     path, st.st_mode & S_IWOTH ? "every user" : "its group");
		rc = -SYSOM_ECONFIG;
		goto cleanup;
	}
	if (st.st_mode & S_IROTH) {
		sysom_errorf(err, errlen, "credentials file %s is readable by every user; chmod 600"
					  " (or 640 for a group the server is in)", path);
		rc = -SYSOM_ECONFIG;
		goto cleanup;
	}
	if ((uint64_t)st.st_size > AUTH_CREDENTIALS_FILE_MAX) {
		sysom_errorf(err, errlen, "credentials file %s is larger than %u bytes", path,
			     AUTH_CREDENTIALS_FILE_MAX);
		rc = -SYSOM_ECONFIG;
		goto cleanup;
	}
	/* One byte more than the limit shows a file that grew past it since fstat. */
	text = malloc((size_t)st.st_size + 2);
	if (!text) {
		rc = -ENOMEM;
		sysom_errorf(err, errlen, "credentials file %s: out of memory", path);
		goto cleanup;
	}
	n = sysom_read_full(fd, text, (size_t)st.st_size + 1);
	if (n < 0) {
		rc = (int)n;
		sysom_errorf(err, errlen, "cannot read credentials file %s: %s", path,
			     sysom_strerror(rc));
		goto cleanup;
	}
	rc = auth_credentials_parse(text, (size_t)n, out, &perr);
	if (rc == -ENOMEM) {
		sysom_errorf(err, errlen, "credentials file %s: out of memory", path);
	} else if (rc) {
		if (perr.line)
			sysom_errorf(err, errlen, "credentials file %s, line %zu: %s", path, perr.line,
				     perr.message);
		else
			sysom_errorf(err, errlen, "credentials file %s: %s", path, perr.message);
		rc = -SYSOM_ECONFIG;
	}
cleanup:
	free(text);
	close(fd);
	return rc;
}

size_t auth_credentials_count(const struct auth_credentials *c)
{
	return c ? c->count : 0;
}

const struct auth_credential *auth_credentials_at(const struct auth_credentials *c, size_t i)
{
	return &c->items[i];
}

const struct auth_credential *auth_credentials_by_name(const struct auth_credentials *c,
						       const char *name)
{
	size_t lo = 0, hi = c ? c->count : 0;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct auth_credential *cred = &c->items[c->by_name[mid]];
		int cmp = strcmp(name, cred->name);
		if (cmp == 0)
			return cred;
		if (cmp < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* Compares without an early exit: the time does not depend on where the bytes differ. */
static bool equal_constant_time(const uint8_t *a, const uint8_t *b, size_t len)
{
	unsigned diff = 0;

	for (size_t i = 0; i < len; i++)
		diff |= (unsigned)(a[i] ^ b[i]);
	return diff == 0;
}

const struct auth_credential *auth_credentials_find(const struct auth_credentials *c,
						    const uint8_t sha256[AUTH_SHA256_SIZE])
{
	const struct auth_credential *lo, *cand;
	size_t n;

	if (!c || c->count == 0)
		return NULL;
	/* Lower bound: the first credential whose hash is not below the presented one. */
	lo = c->items;
	n = c->count;
	while (n > 0) {
		size_t half = n / 2;
		if (hash_key_cmp(sha256, &lo[half]) > 0) {
			lo += half + 1;
			n -= half + 1;
		} else {
			n = half;
		}
	}
	/* Past the end, compare with the last one anyway (and refuse it): same work. */
	cand = lo < c->items + c->count ? lo : &c->items[c->count - 1];
	return equal_constant_time(sha256, cand->token_sha256, AUTH_SHA256_SIZE) ? cand : NULL;
}

bool auth_credential_writes_node(const struct auth_credential *cred,
				 const uint8_t node_id[AUTH_NODE_ID_SIZE])
{
	if (cred->scope == AUTH_SCOPE_ADMIN || cred->any_node)
		return true;
	if (cred->scope != AUTH_SCOPE_AGENT || !cred->nodes)
		return false;
	return bsearch(node_id, cred->nodes, cred->node_count, AUTH_NODE_ID_SIZE, node_cmp) != NULL;
}
