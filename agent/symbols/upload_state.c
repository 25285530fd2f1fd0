/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol upload state files: symbols-uploaded (what the server holds) and symbols-inflight
 * (resumable uploads); formats in symupload.h. */
#include "agent/symbols/symupload_internal.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/error.h"
#include "common/hex.h"

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
		if (idset_add(&u->done, idset_key(&id)) < 0)
			continue; /* the caller sized the skip: cannot happen */
		if (out >= 0) {
			char text[HEX_MAX + 16];
			char hex[HEX_MAX];
			hex_of(&id, hex);
			int len = snprintf(text, sizeof(text), "%s %s\n", hex, identity_name(&id));
			rc = sysom_write_full(out, text, (size_t)len);
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
	if ((rc = sysom_write_full(out, UPLOADED_MAGIC "\n", sizeof(UPLOADED_MAGIC))))
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
	sysom_fsync_dir(u->state_dir);
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
int symupload__uploaded_load(struct symupload *u)
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
		rc = sysom_write_full(u->uploaded_fd, UPLOADED_MAGIC "\n", sizeof(UPLOADED_MAGIC));
		if (!rc && fsync(u->uploaded_fd))
			rc = -errno;
		if (!rc)
			sysom_fsync_dir(u->state_dir);
		return rc;
	}
	rc = uploaded_scan(u, u->uploaded_fd, 0, -1, &valid, &invalid, &magic, &torn);
	if (rc)
		return rc;
	if (valid > u->uploaded_max || !magic) {
		/* Too long, or not ours: keep the newest entries in a fresh file. */
		if (!magic)
			symupload__state_error(u, -SYSOM_ECORRUPT, SYMUPLOAD_UPLOADED_FILE
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
void symupload__done_flush(struct symupload *u)
{
	int rc;

	if (!u->linebuf_len)
		return;
	rc = u->uploaded_fd < 0 ? -EBADF :
				  sysom_write_full(u->uploaded_fd, u->linebuf, u->linebuf_len);
	if (!rc && fdatasync(u->uploaded_fd))
		rc = -errno;
	if (rc)
		symupload__state_error(u, rc, "appending to " SYMUPLOAD_UPLOADED_FILE);
	u->linebuf_len = 0;
}

/* Records that the server holds `id` (call done_flush after a batch). */
void symupload__done_add(struct symupload *u, const struct sysom_build_id *id)
{
	struct idkey k = idset_key(id);
	char hex[HEX_MAX];
	int rc;

	if (idset_has(&u->done, k))
		return;
	if (u->uploaded_lines >= u->uploaded_max || u->done.count >= u->done.max) {
		symupload__done_flush(u);
		rc = uploaded_rewrite(u, u->uploaded_max * 3 / 4);
		if (rc) {
			symupload__state_error(u, rc, "compacting " SYMUPLOAD_UPLOADED_FILE);
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
			symupload__state_error(u, -ENOMEM, "appending to " SYMUPLOAD_UPLOADED_FILE);
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

int symupload__inflight_save(struct symupload *u)
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
	if ((rc = sysom_write_full(fd, INFLIGHT_MAGIC "\n", sizeof(INFLIGHT_MAGIC))))
		goto cleanup;
	for (uint32_t i = 0; i < u->inflight_count; i++) {
		const struct inflight *f = &u->inflight[i];
		char hex[HEX_MAX];
		hex_of(&f->id, hex);
		int n = snprintf(line, sizeof(line), "%s %s %s %s %s %" PRIu64 " %" PRIu64 "\n",
				 hex, identity_name(&f->id), part_name(f->part), f->upload_id,
				 f->hash, f->offset, f->total);
		if ((rc = sysom_write_full(fd, line, (size_t)n)))
			goto cleanup;
	}
	if (fsync(fd) || rename(tmp, path)) {
		rc = -errno;
		goto cleanup;
	}
	rc = sysom_fsync_dir(u->state_dir);
cleanup:
	if (fd >= 0)
		close(fd);
	if (rc) {
		unlink(tmp);
		symupload__state_error(u, rc, "writing " SYMUPLOAD_INFLIGHT_FILE);
	}
	return rc;
}

/* Whether `s` is exactly `len` lowercase hex digits. */
static bool all_hex(const char *s, size_t len)
{
	return strlen(s) == len && sysom_hex_valid_lower(s, len);
}

void symupload__inflight_load(struct symupload *u)
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
			symupload__state_error(u, -errno, "reading " SYMUPLOAD_INFLIGHT_FILE);
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

struct inflight *symupload__inflight_find(struct symupload *u, const struct sysom_build_id *id,
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

void symupload__inflight_remove(struct symupload *u, const struct sysom_build_id *id, int part)
{
	struct inflight *f = symupload__inflight_find(u, id, part);

	if (!f)
		return;
	*f = u->inflight[--u->inflight_count];
	symupload__inflight_save(u);
}

/* A new record (the oldest is evicted when full), saved. Returns it. */
struct inflight *symupload__inflight_put(struct symupload *u, const struct sysom_build_id *id,
					 int part, const char *upload_id, const char *hash,
					 uint64_t total)
{
	struct inflight *f = symupload__inflight_find(u, id, part);

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
	symupload__inflight_save(u);
	return f;
}

void symupload__new_upload_id(struct symupload *u, char out[UPLOAD_ID_HEX + 1])
{
	uint8_t b[UPLOAD_ID_HEX / 2];

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
		for (size_t i = 0; i < sizeof(b); i += 8) {
			uint64_t r = retry_clock_random(&u->clock) ^ now(u);
			memcpy(b + i, &r, sizeof(b) - i < 8 ? sizeof(b) - i : 8);
		}
	}
	sysom_hex_encode(b, sizeof(b), out, UPLOAD_ID_HEX + 1);
}
