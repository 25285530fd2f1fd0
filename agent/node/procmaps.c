/* SPDX-License-Identifier: Apache-2.0 */
/* Strict /proc/<pid>/maps line parser and a streaming reader with bounded memory; the walk
 * over /proc's process directories. */
#include "agent/node/procmaps.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/error.h"

/* Longest line kept: a PATH_MAX path with every byte escaped ("\012") plus the fields. */
#define LINE_MAX_BYTES (4 * PROCMAPS_PATH_MAX + 256)
/* Bytes read from one file before giving up (a maps file is a few MiB at most). */
#define READ_MAX_BYTES (1ULL << 30)
#define READ_CHUNK_BYTES 65536

static const char deleted_suffix[] = " (deleted)";

/* A cursor over [pos, end) of one line. */
struct cursor {
	const char *pos;
	const char *end;
};

/* 1..max_digits hex digits; fails on none, too many, or a non-digit where one is due. */
static bool parse_hex(struct cursor *c, unsigned max_digits, uint64_t *out)
{
	uint64_t v = 0;
	unsigned n = 0;
	int d;

	while (c->pos < c->end && (d = sysom_hex_digit(*c->pos)) >= 0) {
		if (++n > max_digits)
			return false;
		v = v << 4 | (uint64_t)d;
		c->pos++;
	}
	if (n == 0)
		return false;
	*out = v;
	return true;
}

/* 1..20 decimal digits that fit in 64 bits. */
static bool parse_dec(struct cursor *c, uint64_t *out)
{
	uint64_t v = 0;
	unsigned n = 0;

	while (c->pos < c->end && *c->pos >= '0' && *c->pos <= '9') {
		uint64_t d = (uint64_t)(*c->pos - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
		n++;
		c->pos++;
	}
	if (n == 0)
		return false;
	*out = v;
	return true;
}

static bool expect(struct cursor *c, char ch)
{
	if (c->pos >= c->end || *c->pos != ch)
		return false;
	c->pos++;
	return true;
}

/* One permission character: `yes` or '-'. */
static bool parse_flag(struct cursor *c, char yes, char no, bool *out)
{
	if (c->pos >= c->end || (*c->pos != yes && *c->pos != no))
		return false;
	*out = *c->pos == yes;
	c->pos++;
	return true;
}

int procmaps_parse_line(const char *line, size_t len, struct procmaps_entry *out)
{
	struct cursor c = { line, line + len };
	uint64_t start, end, offset, major, minor, inode;
	bool r, w, x, shared, deleted = false;

	if (!line)
		return -SYSOM_ECORRUPT;
	if (len && line[len - 1] == '\n')
		c.end--;
	/* A line holds no NUL and no other newline (the kernel escapes '\n' in paths). */
	if (memchr(line, '\0', (size_t)(c.end - line)) || memchr(line, '\n', (size_t)(c.end - line)))
		return -SYSOM_ECORRUPT;

	if (!parse_hex(&c, 16, &start) || !expect(&c, '-') || !parse_hex(&c, 16, &end) ||
	    !expect(&c, ' '))
		return -SYSOM_ECORRUPT;
	if (start >= end)
		return -SYSOM_ECORRUPT;
	if (!parse_flag(&c, 'r', '-', &r) || !parse_flag(&c, 'w', '-', &w) ||
	    !parse_flag(&c, 'x', '-', &x) || !parse_flag(&c, 's', 'p', &shared) || !expect(&c, ' '))
		return -SYSOM_ECORRUPT;
	if (!parse_hex(&c, 16, &offset) || !expect(&c, ' '))
		return -SYSOM_ECORRUPT;
	if (!parse_hex(&c, 8, &major) || !expect(&c, ':') || !parse_hex(&c, 8, &minor) ||
	    !expect(&c, ' '))
		return -SYSOM_ECORRUPT;
	if (!parse_dec(&c, &inode))
		return -SYSOM_ECORRUPT;

	/* The inode ends the line, or spaces pad the pathname column; the path is the rest
	 * of the line (it may contain spaces, including trailing ones). */
	if (c.pos < c.end && *c.pos != ' ')
		return -SYSOM_ECORRUPT;
	while (c.pos < c.end && *c.pos == ' ')
		c.pos++;
	size_t path_len = (size_t)(c.end - c.pos);
	size_t suffix_len = sizeof(deleted_suffix) - 1;
	if (path_len > suffix_len &&
	    memcmp(c.end - suffix_len, deleted_suffix, suffix_len) == 0) {
		deleted = true;
		path_len -= suffix_len;
	}
	if (path_len > PROCMAPS_PATH_MAX - 1)
		path_len = PROCMAPS_PATH_MAX - 1;

	out->start = start;
	out->end = end;
	out->offset = offset;
	out->dev_major = (uint32_t)major;
	out->dev_minor = (uint32_t)minor;
	out->inode = inode;
	out->readable = r;
	out->writable = w;
	out->executable = x;
	out->shared = shared;
	out->deleted = deleted;
	memcpy(out->path, c.pos, path_len);
	out->path[path_len] = '\0';
	return 0;
}

/* State of one procmaps_read walk. */
struct walk {
	bool executable_only;
	uint32_t max_entries;
	procmaps_visit_fn visit;
	void *ctx;
	uint32_t visited;
	uint32_t malformed;
	struct procmaps_entry entry;
};

/* Parses and visits one line; returns 0 to go on or the negative value that ends the walk. */
static int walk_line(struct walk *wk, const char *line, size_t len)
{
	if (procmaps_parse_line(line, len, &wk->entry) != 0) {
		if (wk->malformed < UINT32_MAX)
			wk->malformed++;
		return 0;
	}
	if (wk->executable_only && !wk->entry.executable)
		return 0;
	if (wk->visited >= wk->max_entries)
		return -SYSOM_ELIMIT;
	int err = wk->visit(wk->ctx, &wk->entry);
	if (err < 0)
		return err;
	wk->visited++;
	return 0;
}

static int read_error(int err, bool is_proc)
{
	/* /proc/<pid> vanishing shows as ENOENT on open and ESRCH on open or read. */
	if (is_proc && (err == ENOENT || err == ESRCH))
		return -ESRCH;
	return -err;
}

int procmaps_read(int pid, const char *path, bool executable_only, uint32_t max_entries,
		  procmaps_visit_fn visit, void *ctx, uint32_t *malformed)
{
	char proc_path[64];
	struct walk *wk = NULL;
	char *buf = NULL;
	size_t have = 0;
	uint64_t total = 0;
	bool skipping = false; /* discarding the rest of an over-long line */
	bool is_proc = path == NULL;
	int fd = -1, err = 0;

	if (!visit || (!path && pid <= 0)) {
		err = -EINVAL;
		goto cleanup;
	}
	if (!path) {
		snprintf(proc_path, sizeof(proc_path), "/proc/%d/maps", pid);
		path = proc_path;
	}
	wk = calloc(1, sizeof(*wk));
	buf = malloc(LINE_MAX_BYTES);
	if (!wk || !buf) {
		err = -ENOMEM;
		goto cleanup;
	}
	wk->executable_only = executable_only;
	wk->max_entries = max_entries < INT32_MAX ? max_entries : INT32_MAX;
	wk->visit = visit;
	wk->ctx = ctx;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err = read_error(errno, is_proc);
		goto cleanup;
	}
	for (;;) {
		size_t room = LINE_MAX_BYTES - have;
		ssize_t n = read(fd, buf + have, room < READ_CHUNK_BYTES ? room : READ_CHUNK_BYTES);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = read_error(errno, is_proc);
			goto cleanup;
		}
		if (n == 0)
			break;
		total += (uint64_t)n;
		if (total > READ_MAX_BYTES) {
			err = -SYSOM_ELIMIT;
			goto cleanup;
		}
		have += (size_t)n;

		/* Hand every complete line over; keep the incomplete tail for the next read. */
		size_t used = 0;
		char *nl;
		while ((nl = memchr(buf + used, '\n', have - used)) != NULL) {
			size_t line_len = (size_t)(nl - (buf + used)) + 1;
			if (skipping)
				skipping = false;
			else if ((err = walk_line(wk, buf + used, line_len)) < 0)
				goto cleanup;
			used += line_len;
		}
		memmove(buf, buf + used, have - used);
		have -= used;
		if (have == LINE_MAX_BYTES) {
			/* A line longer than any real one: count it once and drop it whole. */
			if (!skipping && wk->malformed < UINT32_MAX)
				wk->malformed++;
			skipping = true;
			have = 0;
		}
	}
	if (have && !skipping) {
		err = walk_line(wk, buf, have); /* last line without its newline */
		if (err < 0)
			goto cleanup;
	}
	err = (int)wk->visited;
cleanup:
	if (wk && malformed && fd >= 0)
		*malformed = wk->malformed;
	if (fd >= 0)
		close(fd);
	free(buf);
	free(wk);
	return err;
}

int procmaps_each_pid(const char *proc_root, void (*fn)(void *arg, uint32_t pid), void *arg)
{
	DIR *d = opendir(proc_root);
	struct dirent *de;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char *end;
		unsigned long pid;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		errno = 0;
		pid = strtoul(de->d_name, &end, 10);
		if (*end || errno || pid == 0 || pid > UINT32_MAX)
			continue;
		fn(arg, (uint32_t)pid);
	}
	closedir(d);
	return 0;
}
