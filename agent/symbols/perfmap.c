/* SPDX-License-Identifier: Apache-2.0 */
/* JIT functions from perf maps (agent/symbols/perfmap.h). */
#include "agent/symbols/perfmap.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/node/host.h"
#include "common/array.h"
#include "common/bytes.h"
#include "common/clock.h"

/* ---- the parser --------------------------------------------------------------------------- */

void perfmap_table_free(struct perfmap_table *t)
{
	free(t->entries);
	free(t->names);
	memset(t, 0, sizeof(*t));
}

/* A hex number (optional 0x) at *p up to `end`; advances *p. False when none or over 64 bits. */
static bool parse_hex(const char **p, const char *end, uint64_t *out)
{
	const char *s = *p;
	uint64_t v = 0;
	int digits = 0;

	if (end - s >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		s += 2;
	for (; s < end; s++, digits++) {
		int d = sysom_hex_digit(*s);
		if (d < 0)
			break;
		if (v >> 60)
			return false;
		v = v << 4 | (uint64_t)d;
	}
	if (!digits)
		return false;
	*p = s;
	*out = v;
	return true;
}

static int entry_compare(const void *a, const void *b)
{
	const struct perfmap_entry *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->line < y->line ? -1 : x->line > y->line;
}

int perfmap_parse(const char *text, size_t len, struct perfmap_table *out)
{
	const char *p = text, *end = text + len;
	size_t cap = 0, names_cap = 0;
	uint32_t line = 0;

	memset(out, 0, sizeof(*out));
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *next = eol ? eol + 1 : end, *s = p;
		uint64_t start, size;

		if (!eol)
			eol = end;
		line++;
		p = next;
		if (out->count == PERFMAP_MAX_ENTRIES) {
			out->truncated = true;
			break;
		}
		if (s == eol)
			continue; /* a blank line */
		/* "START SIZE NAME": two hex numbers, each followed by one space. */
		bool ok = parse_hex(&s, eol, &start) && s < eol && *s++ == ' ' &&
			  parse_hex(&s, eol, &size) && s < eol && *s++ == ' ' && size != 0 &&
			  start + size > start;
		if (!ok) {
			out->malformed++;
			continue;
		}
		size_t nlen = (size_t)(eol - s);
		while (nlen && (s[nlen - 1] == '\r' || s[nlen - 1] == ' ' || s[nlen - 1] == '\t'))
			nlen--;
		if (!nlen || memchr(s, '\0', nlen)) {
			out->malformed++;
			continue;
		}
		if (nlen > PERFMAP_NAME_MAX)
			nlen = PERFMAP_NAME_MAX;
		if (SYSOM_ARRAY_RESERVE(out->entries, cap, out->count, 256) ||
		    SYSOM_ARRAY_RESERVE(out->names, names_cap, out->names_len + nlen, 4096)) {
			perfmap_table_free(out);
			return -ENOMEM;
		}
		memcpy(out->names + out->names_len, s, nlen);
		out->names[out->names_len + nlen] = '\0';
		out->entries[out->count++] = (struct perfmap_entry){
			.start = start, .size = size, .name = (uint32_t)out->names_len, .line = line };
		out->names_len += nlen + 1;
	}
	if (out->count > 1)
		qsort(out->entries, out->count, sizeof(*out->entries), entry_compare);
	return 0;
}

/* Overlapping functions looked at below the last start at or before an address. */
#define PERFMAP_OVERLAP_SCAN 32

bool perfmap_table_find(const struct perfmap_table *t, uint64_t addr, const char **name,
			uint64_t *start)
{
	size_t lo = 0, hi = t->count;
	const struct perfmap_entry *best = NULL;

	while (lo < hi) { /* the first entry starting after addr */
		size_t mid = lo + (hi - lo) / 2;
		if (t->entries[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo, seen = 0; i > 0 && seen < PERFMAP_OVERLAP_SCAN; i--, seen++) {
		const struct perfmap_entry *e = &t->entries[i - 1];
		if (addr - e->start < e->size && (!best || e->line > best->line))
			best = e;
	}
	if (!best)
		return false;
	*name = t->names + best->name;
	*start = best->start;
	return true;
}

/* ---- per-process maps --------------------------------------------------------------------- */

struct perfmap_proc {
	uint32_t tgid, generation;
	bool have_file;          /* a file was read (or refused) at (dev, ino, size, mtime) */
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	uint64_t checked_ns;     /* last look at the file */
	uint64_t used;           /* LRU tick */
	struct perfmap_table table;
};

struct perfmap_cache {
	char *proc_root;
	struct perfmap_proc procs[PERFMAP_MAX_PROCESSES];
	uint32_t nprocs;
	uint64_t tick;
	struct perfmap_stats stats;
};

int perfmap_cache_new(const char *proc_root, struct perfmap_cache **out)
{
	struct perfmap_cache *c = calloc(1, sizeof(*c));

	*out = NULL;
	if (!c || !(c->proc_root = strdup(proc_root ? proc_root : "/proc"))) {
		free(c);
		return -ENOMEM;
	}
	*out = c;
	return 0;
}

void perfmap_cache_free(struct perfmap_cache *c)
{
	if (!c)
		return;
	for (uint32_t i = 0; i < c->nprocs; i++)
		perfmap_table_free(&c->procs[i].table);
	free(c->proc_root);
	free(c);
}

void perfmap_stats_read(const struct perfmap_cache *c, struct perfmap_stats *out)
{
	*out = c->stats;
	out->maps = c->nprocs;
}

/* The pid `tgid` has in its own pid namespace (NSpid's last field); `tgid` when unknown. */
static uint32_t ns_pid(const struct perfmap_cache *c, uint32_t tgid)
{
	char path[PATH_MAX], text[4096];
	const char *ns;
	uint32_t pid = tgid;

	snprintf(path, sizeof(path), "%s/%u/status", c->proc_root, tgid);
	if (host_read_text(path, text, sizeof(text)) < 0 || !(ns = strstr(text, "\nNSpid:")))
		return tgid;
	ns += 7;
	for (;;) {
		char *endp;
		unsigned long v = strtoul(ns, &endp, 10);
		if (endp == ns || v == 0 || v > UINT32_MAX)
			break;
		pid = (uint32_t)v;
		ns = endp;
		if (*ns != '\t' && *ns != ' ')
			break;
	}
	return pid;
}

/*
 * (Re)reads the map of `m` when its file changed. The file: the process's own /tmp, not a link,
 * regular, owned by the process's user or root, at most PERFMAP_MAX_BYTES. -ENOMEM only.
 */
static int load(struct perfmap_cache *c, struct perfmap_proc *m)
{
	char path[PATH_MAX];
	struct stat owner, st;
	char *text = NULL;
	size_t got = 0;
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/%u", c->proc_root, m->tgid);
	if (stat(path, &owner) < 0)
		return 0;
	snprintf(path, sizeof(path), "%s/%u/root/tmp/perf-%u.map", c->proc_root, m->tgid,
		 ns_pid(c, m->tgid));
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ELOOP)
			c->stats.refused++;
		return 0;
	}
	if (fstat(fd, &st) < 0)
		goto cleanup;
	if (m->have_file && st.st_dev == m->dev && st.st_ino == m->ino && st.st_size == m->size &&
	    st.st_mtim.tv_sec == m->mtime.tv_sec && st.st_mtim.tv_nsec == m->mtime.tv_nsec)
		goto cleanup; /* unchanged */
	m->have_file = true;
	m->dev = st.st_dev;
	m->ino = st.st_ino;
	m->size = st.st_size;
	m->mtime = st.st_mtim;
	if (!S_ISREG(st.st_mode) || (st.st_uid != owner.st_uid && st.st_uid != 0) ||
	    st.st_size > (off_t)PERFMAP_MAX_BYTES) {
		c->stats.refused++;
		perfmap_table_free(&m->table);
		goto cleanup;
	}
	if (!(text = malloc((size_t)st.st_size + 1))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, text + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	/* A line being appended (no newline yet) is left for the next read. */
	while (got && text[got - 1] != '\n')
		got--;
	struct perfmap_table t;
	if ((rc = perfmap_parse(text, got, &t)))
		goto cleanup;
	perfmap_table_free(&m->table);
	m->table = t;
	if (got < (size_t)st.st_size)
		m->size = (off_t)got; /* the partial line: look again */
	c->stats.loads++;
cleanup:
	free(text);
	close(fd);
	return rc;
}

static struct perfmap_proc *proc_of(struct perfmap_cache *c, uint32_t tgid, uint32_t generation)
{
	struct perfmap_proc *m = NULL;

	for (uint32_t i = 0; i < c->nprocs; i++)
		if (c->procs[i].tgid == tgid && c->procs[i].generation == generation)
			return &c->procs[i];
	if (c->nprocs < PERFMAP_MAX_PROCESSES) {
		m = &c->procs[c->nprocs++];
	} else {
		m = &c->procs[0];
		for (uint32_t i = 1; i < c->nprocs; i++)
			if (c->procs[i].used < m->used)
				m = &c->procs[i];
		perfmap_table_free(&m->table);
	}
	memset(m, 0, sizeof(*m));
	m->tgid = tgid;
	m->generation = generation;
	return m;
}

int perfmap_lookup(struct perfmap_cache *c, uint32_t tgid, uint32_t generation, uint64_t addr,
		   const char **name, uint64_t *start)
{
	struct perfmap_proc *m = proc_of(c, tgid, generation);
	uint64_t now = sysom_monotonic_ns();
	int rc;

	m->used = ++c->tick;
	if (perfmap_table_find(&m->table, addr, name, start)) {
		c->stats.named++;
		return 1;
	}
	/* Not in the map as read: the JIT may have appended since. */
	if (!m->checked_ns || now - m->checked_ns >= PERFMAP_RECHECK_NS) {
		m->checked_ns = now;
		if ((rc = load(c, m)))
			return rc;
		if (perfmap_table_find(&m->table, addr, name, start)) {
			c->stats.named++;
			return 1;
		}
	}
	c->stats.unnamed++;
	return 0;
}

void perfmap_forget(struct perfmap_cache *c, uint32_t tgid, uint32_t generation)
{
	for (uint32_t i = 0; i < c->nprocs; i++)
		if (c->procs[i].tgid == tgid && c->procs[i].generation == generation) {
			perfmap_table_free(&c->procs[i].table);
			c->procs[i] = c->procs[--c->nprocs];
			return;
		}
}
