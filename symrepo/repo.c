/* SPDX-License-Identifier: Apache-2.0 */
/* The on-disk Build-ID symbol repository: checked atomic installs under per-identity locks,
 * symbol files (re)built from what is held, an LRU of mapped symbol files, gc. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/list.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/hash.h"
#include "common/hex.h"
#include "symrepo/repo.h"

#define DEFAULT_MAX_OPEN 256
#define MAX_OPEN_LIMIT 65536
#define ROOT_MAX 3000                 /* leaves room for the longest name below the root */
#define PATH_BUF 4096
#define HEX_BUF (2 * SYSOM_BUILD_ID_MAX + 1)
#define REVALIDATE_NS 1000000000ULL   /* a cached handle re-checks its path once a second */
#define LOCK_RETRIES 1000             /* a lock file unlinked under us this often: give up */
#define INSTANCE_TRIES 16
#define STALE_LOOSE_AGE_S 3600        /* unknown entries in tmp/ older than this are removed */
#define DIR_ENTRIES_MAX (1u << 22)    /* names read from one .build-id/xx directory */
#define COPY_CHUNK (1u << 20)

/* Which files of one identity exist (bits of walk masks). */
enum {
	HAS_EXECUTABLE = 1u << SYMREPO_EXECUTABLE,
	HAS_DEBUG = 1u << SYMREPO_DEBUGINFO,
	HAS_SYMBOLS = 1u << SYMREPO_SYMBOLS,
	HAS_MARKER = 1u << 3,
};

static const char *const kind_suffix[] = { "executable", "debug", "sym" };
#define MARKER_SUFFIX "rebuild"
static const char *const trees[] = { ".build-id", ".file-hash" };

/* One mapped symbol file. In the id table and LRU while `cached`; always in the pointer table
 * (release finds it there) until freed. */
struct entry {
	struct sysom_build_id id;
	struct symfile *file;
	uint64_t checked_ns;     /* when the path was last seen to hold (dev, ino) */
	dev_t dev;
	ino_t ino;
	uint32_t refs;           /* outstanding acquires */
	bool cached;
	struct entry *id_next, *ptr_next, *lru_prev, *lru_next;
};

struct symrepo {
	char *root;
	char *tmp_dir;           /* <root>/tmp/<instance>: this handle's temporary files */
	char *tmp_lock;          /* <root>/tmp/<instance>.lock, flocked while open */
	int tmp_lock_fd;
	_Atomic uint64_t *tmp_counter; /* a pointer: symrepo_tmp_path takes a const handle */
	uint32_t max_open;
	bool inline_frames, line_table;
	uint64_t writer_budget;

	pthread_mutex_t mu;      /* guards everything below */
	struct entry **id_buckets, **ptr_buckets;
	uint32_t nbuckets;       /* power of two */
	struct entry *lru_head, *lru_tail;
	uint32_t ncached, ndetached, nacquired;
	uint64_t hits, misses, evictions;
};

/* ------------------------------------------------------------------------------------------ */
/* Identities and paths */

static bool id_valid(const struct sysom_build_id *id)
{
	if (!id)
		return false;
	if (id->kind == SYSOM_OBJECT_ELF)
		return id->len >= 3 && id->len <= SYSOM_BUILD_ID_MAX;
	if (id->kind == SYSOM_OBJECT_FILE_HASH)
		return id->len == 16;
	return false;
}

static bool id_equal(const struct sysom_build_id *a, const struct sysom_build_id *b)
{
	return a->kind == b->kind && a->len == b->len && memcmp(a->bytes, b->bytes, a->len) == 0;
}

static const char *tree_of(const struct sysom_build_id *id)
{
	return id->kind == SYSOM_OBJECT_FILE_HASH ? trees[1] : trees[0];
}

/* 0 when snprintf's result `n` fitted in `out`, else -ENAMETOOLONG. */
static int put_path(const char *out, size_t outlen, int n)
{
	(void)out;
	return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

/* <root>/<tree>/xx */
static int id_dir_path(const struct symrepo *r, const struct sysom_build_id *id, char *out,
		       size_t outlen)
{
	char hex[HEX_BUF];

	sysom_build_id_hex(id, hex, sizeof(hex));
	return put_path(out, outlen, snprintf(out, outlen, "%s/%s/%.2s", r->root, tree_of(id), hex));
}

/* <root>/<tree>/xx/rest.<suffix> */
static int id_file_path(const struct symrepo *r, const struct sysom_build_id *id,
			const char *suffix, char *out, size_t outlen)
{
	char hex[HEX_BUF];

	sysom_build_id_hex(id, hex, sizeof(hex));
	return put_path(out, outlen, snprintf(out, outlen, "%s/%s/%.2s/%s.%s", r->root,
					      tree_of(id), hex, hex + 2, suffix));
}

static bool file_exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int mkdir_one(const char *path, mode_t mode)
{
	if (mkdir(path, mode) == 0)
		return 1;
	return errno == EEXIST ? 0 : -errno;
}

/* Creates `path` and missing parents. */
static int mkdir_parents(const char *path, mode_t mode)
{
	char buf[PATH_BUF];
	size_t len = strlen(path);
	int rc;

	if (len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	for (size_t i = 1; i < len; i++) {
		if (buf[i] != '/')
			continue;
		buf[i] = '\0';
		rc = mkdir_one(buf, mode);
		buf[i] = '/';
		if (rc < 0)
			return rc;
	}
	rc = mkdir_one(buf, mode);
	return rc < 0 ? rc : 0;
}

/* Makes <root>/<tree>/xx durable before files are renamed into it. */
static int id_dir_ensure(const struct symrepo *r, const struct sysom_build_id *id)
{
	char dir[PATH_BUF], tree[PATH_BUF];
	int rc;

	rc = id_dir_path(r, id, dir, sizeof(dir));
	if (rc)
		return rc;
	rc = mkdir_one(dir, 0750);
	if (rc <= 0)
		return rc;
	rc = put_path(tree, sizeof(tree), snprintf(tree, sizeof(tree), "%s/%s", r->root, tree_of(id)));
	return rc ? rc : sysom_fsync_dir(tree);
}

/* Removes every non-directory entry of `dir` and then `dir`; counts the files removed. */
static int remove_dir_files(const char *dir, uint64_t *removed)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) == 0) {
			if (removed)
				(*removed)++;
		} else if (errno != ENOENT) {
			rc = -errno;
		}
	}
	closedir(d);
	if (rmdir(dir) < 0 && errno != ENOENT && !rc)
		rc = -errno;
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Locks: flock on a file that is unlinked by its holder before unlocking; a waiter that wakes
 * up on an unlinked file tries again (the path must still name the file it locked). */

static int lock_path_file(const char *path, bool create, bool wait, int *fd_out)
{
	struct stat a, b;
	int fd, rc;

	for (int i = 0; i < LOCK_RETRIES; i++) {
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0640);
		if (fd < 0)
			return -errno;
		while ((rc = flock(fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB)) < 0 && errno == EINTR)
			;
		if (rc < 0) {
			rc = errno == EWOULDBLOCK ? -EWOULDBLOCK : -errno;
			close(fd);
			return rc;
		}
		if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
		    a.st_ino == b.st_ino) {
			*fd_out = fd;
			return 0;
		}
		close(fd);
	}
	return -EAGAIN;
}

static void unlock_path_file(const char *path, int fd)
{
	unlink(path);
	close(fd);
}

struct id_lock {
	char path[PATH_BUF];
	int fd;
};

static int id_lock_take(const struct symrepo *r, const struct sysom_build_id *id, struct id_lock *l)
{
	char hex[HEX_BUF];
	int rc;

	sysom_build_id_hex(id, hex, sizeof(hex));
	rc = put_path(l->path, sizeof(l->path),
		      snprintf(l->path, sizeof(l->path), "%s/locks/%s%s.lock", r->root,
			       id->kind == SYSOM_OBJECT_FILE_HASH ? "h-" : "", hex));
	if (rc)
		return rc;
	return lock_path_file(l->path, true, true, &l->fd);
}

static void id_lock_drop(struct id_lock *l)
{
	unlock_path_file(l->path, l->fd);
	l->fd = -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Temporary directories: one per open handle, <root>/tmp/<instance>/, owned while the handle
 * holds the flock of <root>/tmp/<instance>.lock. The lock file is created before the directory
 * and removed after it, so a lock file that can be locked belongs to a dead handle. */

static int instance_create(struct symrepo *r)
{
	char name[64], lock[PATH_BUF], dir[PATH_BUF];
	struct stat a, b;
	uint64_t rnd;
	int fd, rc = -EEXIST;

	for (int i = 0; i < INSTANCE_TRIES; i++) {
		if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
			rnd = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)i;
		snprintf(name, sizeof(name), "%ld-%016llx", (long)getpid(), (unsigned long long)rnd);
		rc = put_path(lock, sizeof(lock),
			      snprintf(lock, sizeof(lock), "%s/tmp/%s.lock", r->root, name));
		if (!rc)
			rc = put_path(dir, sizeof(dir),
				      snprintf(dir, sizeof(dir), "%s/tmp/%s", r->root, name));
		if (rc)
			return rc;
		fd = open(lock, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0640);
		if (fd < 0) {
			rc = -errno;
			if (rc == -EEXIST)
				continue;
			return rc;
		}
		/* A cleaner may have locked and unlinked it between our open and flock. */
		if (flock(fd, LOCK_EX | LOCK_NB) < 0 || fstat(fd, &a) < 0 || stat(lock, &b) < 0 ||
		    a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
			close(fd);
			rc = -EAGAIN;
			continue;
		}
		if (mkdir(dir, 0750) < 0) {
			rc = -errno;
			unlock_path_file(lock, fd);
			if (rc == -EEXIST)
				continue;
			return rc;
		}
		r->tmp_dir = strdup(dir);
		r->tmp_lock = strdup(lock);
		if (!r->tmp_dir || !r->tmp_lock) {
			rmdir(dir);
			unlock_path_file(lock, fd);
			return -ENOMEM;
		}
		r->tmp_lock_fd = fd;
		return 0;
	}
	return rc;
}

static bool has_suffix(const char *name, const char *suffix)
{
	size_t n = strlen(name), s = strlen(suffix);

	return n > s && !strcmp(name + n - s, suffix);
}

/* Removes the temporary files of handles that no longer exist (and old unknown entries). */
static int tmp_clean(struct symrepo *r, uint64_t *removed)
{
	char tmp[PATH_BUF], path[PATH_BUF], other[PATH_BUF];
	const char *own_dir = r->tmp_dir ? strrchr(r->tmp_dir, '/') + 1 : "";
	const char *own_lock = r->tmp_lock ? strrchr(r->tmp_lock, '/') + 1 : "";
	struct stat st;
	struct dirent *de;
	DIR *d = NULL;
	int fd, rc;

	rc = put_path(tmp, sizeof(tmp), snprintf(tmp, sizeof(tmp), "%s/tmp", r->root));
	if (rc)
		goto cleanup;
	d = opendir(tmp);
	if (!d) {
		rc = -errno;
		goto cleanup;
	}
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strcmp(de->d_name, own_dir) || !strcmp(de->d_name, own_lock))
			continue;
		if (put_path(path, sizeof(path),
			     snprintf(path, sizeof(path), "%s/%s", tmp, de->d_name)))
			continue;
		if (lstat(path, &st) < 0)
			continue;
		if (S_ISREG(st.st_mode) && has_suffix(de->d_name, ".lock")) {
			if (lock_path_file(path, false, false, &fd) < 0)
				continue; /* alive (or being cleaned by someone else) */
			snprintf(other, sizeof(other), "%.*s", (int)(strlen(path) - 5), path);
			remove_dir_files(other, removed);
			unlock_path_file(path, fd);
			continue;
		}
		if (time(NULL) - st.st_mtime < STALE_LOOSE_AGE_S)
			continue;
		if (S_ISDIR(st.st_mode)) {
			/* A directory whose lock file is gone: its owner died mid-cleanup. */
			if (put_path(other, sizeof(other),
				     snprintf(other, sizeof(other), "%s.lock", path)) == 0 &&
			    lstat(other, &st) < 0 && errno == ENOENT)
				remove_dir_files(path, removed);
		} else if (unlink(path) == 0 && removed) {
			(*removed)++;
		}
	}
	rc = 0;
cleanup:
	if (d)
		closedir(d);
	return rc;
}

int symrepo_tmp_path(const struct symrepo *r, char *out, size_t outlen)
{
	uint64_t n;

	if (!r || !out)
		return -EINVAL;
	n = atomic_fetch_add(r->tmp_counter, 1);
	return put_path(out, outlen,
			snprintf(out, outlen, "%s/t%llu", r->tmp_dir, (unsigned long long)n));
}

/* True when `path` names a file below <root>/tmp/ (without "..": ours to remove). */
static bool in_tmp(const struct symrepo *r, const char *path)
{
	size_t n = strlen(r->root);

	return !strncmp(path, r->root, n) && !strncmp(path + n, "/tmp/", 5) && path[n + 5] &&
	       !strstr(path + n, "/../") && !has_suffix(path, "/..");
}

/* ------------------------------------------------------------------------------------------ */
/* Checks */

/* Opens the symbol file at `path` (the handle naming the file `st` describes) and checks that
 * it describes `id`. */
static int symbols_open(const char *path, const struct sysom_build_id *id, struct symfile **out,
			struct stat *st, char *err, size_t errlen)
{
	struct symfile_error serr = { 0 };
	struct symfile_info info;
	struct symfile *f = NULL;
	struct stat before, after;
	int rc = -EAGAIN;

	/* The path may be replaced by a rebuild between stat and open: retry until it is not. */
	for (int i = 0; i < 8 && rc == -EAGAIN; i++) {
		if (stat(path, &before) < 0)
			return -errno;
		rc = symfile_open(path, &f, &serr);
		if (rc) {
			if (rc == -SYSOM_ECORRUPT || rc == -SYSOM_EVERSION)
				sysom_errorf(err, errlen, "%s: offset %llu: %s", path,
				       (unsigned long long)serr.offset, serr.message);
			else
				sysom_errorf(err, errlen, "%s: %s", path, sysom_strerror(rc));
			return rc;
		}
		if (stat(path, &after) < 0 || after.st_ino != before.st_ino ||
		    after.st_dev != before.st_dev) {
			symfile_close(f);
			f = NULL;
			rc = -EAGAIN;
		}
	}
	if (rc)
		return rc;
	symfile_info_get(f, &info);
	if (!id_equal(&info.build_id, id)) {
		char want[HEX_BUF], got[HEX_BUF];

		sysom_build_id_hex(id, want, sizeof(want));
		sysom_build_id_hex(&info.build_id, got, sizeof(got));
		sysom_errorf(err, errlen, "%s describes %s (kind %u), not %s (kind %u)", path, got,
		       info.build_id.kind, want, id->kind);
		symfile_close(f);
		return -SYSOM_ECORRUPT;
	}
	*out = f;
	if (st)
		*st = after;
	return 0;
}

/* Full check of a symbol file: opens, verifies every table, names `id`. */
static int symbols_check(const char *path, const struct sysom_build_id *id, char *err,
			 size_t errlen)
{
	struct symfile_error serr = { 0 };
	struct symfile *f;
	int rc;

	rc = symbols_open(path, id, &f, NULL, err, errlen);
	if (rc)
		return rc;
	rc = symfile_verify(f, &serr);
	if (rc)
		sysom_errorf(err, errlen, "%s: offset %llu: %s", path, (unsigned long long)serr.offset,
		       serr.message);
	symfile_close(f);
	return rc;
}

/* Checks the identity of the file at `path` as `kind` of `id`: 0, -SYSOM_ECORRUPT (it is
 * not that file) with `err` set, or -errno (could not tell). */
static int identity_check(const struct sysom_build_id *id, enum symrepo_kind kind,
			  const char *path, char *err, size_t errlen)
{
	struct sysom_build_id got;
	char want_hex[HEX_BUF], got_hex[HEX_BUF];
	int fd, rc;

	if (kind == SYMREPO_SYMBOLS) {
		rc = symbols_check(path, id, err, errlen);
		return rc == -SYSOM_EVERSION ? -SYSOM_ECORRUPT : rc;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		rc = -errno;
		sysom_errorf(err, errlen, "%s: %s", path, strerror(-rc));
		return rc;
	}
	if (id->kind == SYSOM_OBJECT_FILE_HASH)
		rc = sysom_file_content_hash(fd, &got);
	else
		rc = sysom_elf_build_id(fd, &got);
	close(fd);
	if (rc == -SYSOM_ENOTELF || rc == -SYSOM_ENOBUILDID || rc == -SYSOM_ECORRUPT ||
	    rc == -SYSOM_ELIMIT || rc == -EISDIR || rc == -EINVAL) {
		sysom_errorf(err, errlen, "%s: %s", path, sysom_strerror(rc));
		return -SYSOM_ECORRUPT;
	}
	if (rc) {
		sysom_errorf(err, errlen, "%s: %s", path, sysom_strerror(rc));
		return rc;
	}
	if (!id_equal(&got, id)) {
		sysom_build_id_hex(id, want_hex, sizeof(want_hex));
		sysom_build_id_hex(&got, got_hex, sizeof(got_hex));
		sysom_errorf(err, errlen, "%s has %s %s, not %s", path,
		       id->kind == SYSOM_OBJECT_FILE_HASH ? "content hash" : "build ID", got_hex,
		       want_hex);
		return -SYSOM_ECORRUPT;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The handle cache */

static uint32_t id_bucket(const struct symrepo *r, const struct sysom_build_id *id)
{
	return (uint32_t)sysom_hash64(id->bytes, id->len, id->kind) & (r->nbuckets - 1);
}

static uint32_t ptr_bucket(const struct symrepo *r, const struct symfile *f)
{
	return (uint32_t)sysom_hash_mix(0, (uint64_t)(uintptr_t)f) & (r->nbuckets - 1);
}

static struct entry *cache_find(struct symrepo *r, const struct sysom_build_id *id)
{
	for (struct entry *e = r->id_buckets[id_bucket(r, id)]; e; e = e->id_next)
		if (id_equal(&e->id, id))
			return e;
	return NULL;
}

static struct entry **ptr_slot(struct symrepo *r, const struct symfile *f)
{
	struct entry **p = &r->ptr_buckets[ptr_bucket(r, f)];

	while (*p && (*p)->file != f)
		p = &(*p)->ptr_next;
	return p;
}

static void lru_unlink(struct symrepo *r, struct entry *e)
{
	SYSOM_DLIST_UNLINK(r->lru_head, r->lru_tail, e, lru_prev, lru_next);
}

static void lru_push_front(struct symrepo *r, struct entry *e)
{
	SYSOM_DLIST_PUSH_FRONT(r->lru_head, r->lru_tail, e, lru_prev, lru_next);
}

/* Takes `e` out of the id table and the LRU. Returns true when nobody holds it: the caller
 * frees it (outside the mutex); otherwise its last release does. */
static bool cache_detach(struct symrepo *r, struct entry *e)
{
	struct entry **p = &r->id_buckets[id_bucket(r, &e->id)];

	while (*p != e)
		p = &(*p)->id_next;
	*p = e->id_next;
	e->id_next = NULL;
	lru_unlink(r, e);
	e->cached = false;
	r->ncached--;
	if (e->refs) {
		r->ndetached++;
		return false;
	}
	*ptr_slot(r, e->file) = e->ptr_next;
	return true;
}

static void entry_free(struct entry *e)
{
	if (!e)
		return;
	symfile_close(e->file);
	free(e);
}

/* Drops the cached handle of `id` (its file was replaced or removed). */
static void cache_forget(struct symrepo *r, const struct sysom_build_id *id)
{
	struct entry *e, *victim = NULL;

	pthread_mutex_lock(&r->mu);
	e = cache_find(r, id);
	if (e && cache_detach(r, e))
		victim = e;
	pthread_mutex_unlock(&r->mu);
	entry_free(victim);
}

/* Drops one reference; returns the entry when it must be freed. Under the mutex. */
static struct entry *entry_unref(struct symrepo *r, struct entry *e)
{
	if (--e->refs)
		return NULL;
	r->nacquired--;
	if (e->cached)
		return NULL;
	r->ndetached--;
	*ptr_slot(r, e->file) = e->ptr_next;
	return e;
}

void symrepo_symbols_release(struct symrepo *r, struct symfile *f)
{
	struct entry *e, *victim = NULL;

	if (!r || !f)
		return;
	pthread_mutex_lock(&r->mu);
	e = *ptr_slot(r, f);
	if (e)
		victim = entry_unref(r, e);
	pthread_mutex_unlock(&r->mu);
	entry_free(victim);
}

/* A cache hit: the file is still the one the path names (checked at most once a second). */
static bool entry_current(const struct symrepo *r, const struct entry *e)
{
	char path[PATH_BUF];
	struct stat st;

	if (id_file_path(r, &e->id, kind_suffix[SYMREPO_SYMBOLS], path, sizeof(path)))
		return false;
	return stat(path, &st) == 0 && st.st_ino == e->ino && st.st_dev == e->dev;
}

struct symfile *symrepo_symbols_acquire(struct symrepo *r, const struct sysom_build_id *id,
					int *err)
{
	char path[PATH_BUF];
	struct entry *e, *fresh = NULL, *victims = NULL, *victim;
	struct symfile *f = NULL, *result = NULL;
	struct stat st;
	uint64_t now;
	int rc;

	if (!r || !id_valid(id)) {
		rc = -EINVAL;
		goto cleanup;
	}
	now = sysom_clock_ns(CLOCK_MONOTONIC_COARSE);
	pthread_mutex_lock(&r->mu);
	e = cache_find(r, id);
	if (e) {
		if (!e->refs++)
			r->nacquired++;
		r->hits++;
		lru_unlink(r, e);
		lru_push_front(r, e);
		if (now - e->checked_ns < REVALIDATE_NS) {
			pthread_mutex_unlock(&r->mu);
			result = e->file;
			rc = 0;
			goto cleanup;
		}
		e->checked_ns = now; /* one thread re-checks per interval */
		pthread_mutex_unlock(&r->mu);
		if (entry_current(r, e)) {
			result = e->file;
			rc = 0;
			goto cleanup;
		}
		/* Replaced by another process's rebuild, or removed by gc. */
		pthread_mutex_lock(&r->mu);
		if (e->cached)
			cache_detach(r, e); /* we hold a reference: it only becomes detached */
		victim = entry_unref(r, e);
		pthread_mutex_unlock(&r->mu);
		entry_free(victim);
	} else {
		pthread_mutex_unlock(&r->mu);
	}

	/* A miss: open outside the mutex (other lookups go on), then publish. */
	rc = id_file_path(r, id, kind_suffix[SYMREPO_SYMBOLS], path, sizeof(path));
	if (rc)
		goto cleanup;
	rc = symbols_open(path, id, &f, &st, NULL, 0);
	if (rc)
		goto cleanup;
	fresh = calloc(1, sizeof(*fresh));
	if (!fresh) {
		rc = -ENOMEM;
		goto cleanup;
	}
	fresh->id = *id;
	fresh->file = f;
	fresh->dev = st.st_dev;
	fresh->ino = st.st_ino;
	fresh->checked_ns = now;
	f = NULL;

	pthread_mutex_lock(&r->mu);
	r->misses++;
	e = cache_find(r, id);
	if (e) {
		/* Another thread opened it meanwhile: use that one. */
		if (!e->refs++)
			r->nacquired++;
		result = e->file;
		pthread_mutex_unlock(&r->mu);
		rc = 0;
		goto cleanup;
	}
	e = fresh;
	fresh = NULL;
	e->refs = 1;
	e->cached = true;
	r->nacquired++;
	e->id_next = r->id_buckets[id_bucket(r, id)];
	r->id_buckets[id_bucket(r, id)] = e;
	e->ptr_next = r->ptr_buckets[ptr_bucket(r, e->file)];
	r->ptr_buckets[ptr_bucket(r, e->file)] = e;
	lru_push_front(r, e);
	r->ncached++;
	while (r->ncached > r->max_open) {
		victim = r->lru_tail;
		r->evictions++;
		if (cache_detach(r, victim)) {
			victim->id_next = victims;
			victims = victim;
		}
	}
	result = e->file;
	pthread_mutex_unlock(&r->mu);
	rc = 0;
cleanup:
	while (victims) {
		victim = victims;
		victims = victim->id_next;
		entry_free(victim);
	}
	entry_free(fresh);
	symfile_close(f);
	if (!result && err)
		*err = rc;
	return result;
}

void symrepo_cache_stats_get(struct symrepo *r, struct symrepo_cache_stats *out)
{
	pthread_mutex_lock(&r->mu);
	out->cached = r->ncached;
	out->detached = r->ndetached;
	out->acquired = r->nacquired;
	out->hits = r->hits;
	out->misses = r->misses;
	out->evictions = r->evictions;
	pthread_mutex_unlock(&r->mu);
}

/* ------------------------------------------------------------------------------------------ */
/* Installing and building */

int symrepo_path(const struct symrepo *r, const struct sysom_build_id *id, enum symrepo_kind kind,
		 char *out, size_t outlen)
{
	if (!r || !id_valid(id) || (unsigned)kind > SYMREPO_SYMBOLS || !out)
		return -EINVAL;
	return id_file_path(r, id, kind_suffix[kind], out, outlen);
}

bool symrepo_has(const struct symrepo *r, const struct sysom_build_id *id, enum symrepo_kind kind)
{
	char path[PATH_BUF];

	return symrepo_path(r, id, kind, path, sizeof(path)) == 0 && file_exists(path);
}

/* rename(2) that never replaces: -EEXIST when `to` exists. */
static int rename_noreplace(const char *from, const char *to)
{
	if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -errno;
	/* A filesystem without RENAME_NOREPLACE: link(2) fails when `to` exists. */
	if (link(from, to) < 0)
		return -errno;
	unlink(from);
	return 0;
}

/* Identity check and fsync of a file about to be installed. */
static int prepare_tmp(const struct sysom_build_id *id, enum symrepo_kind kind, const char *tmp,
		       char *err, size_t errlen)
{
	int fd, rc;

	rc = identity_check(id, kind, tmp, err, errlen);
	if (rc)
		return rc;
	fd = open(tmp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fsync(fd) < 0) {
		rc = -errno;
		sysom_errorf(err, errlen, "%s: %s", tmp, strerror(errno));
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

/*
 * Under the identity's lock: renames `tmp` into place unless the file exists (-EEXIST; tmp is
 * removed). When the existing symbol file will have to be rebuilt, a marker is made durable
 * first, so a crash before the rebuild leaves a trace gc finds.
 */
static int place_locked(struct symrepo *r, const struct sysom_build_id *id,
			enum symrepo_kind kind, const char *tmp, char *err, size_t errlen)
{
	char dir[PATH_BUF], final[PATH_BUF], sym[PATH_BUF], exe[PATH_BUF], marker[PATH_BUF];
	int fd, rc;

	rc = id_dir_path(r, id, dir, sizeof(dir));
	if (!rc)
		rc = id_file_path(r, id, kind_suffix[kind], final, sizeof(final));
	if (!rc)
		rc = id_file_path(r, id, kind_suffix[SYMREPO_SYMBOLS], sym, sizeof(sym));
	if (!rc)
		rc = id_file_path(r, id, kind_suffix[SYMREPO_EXECUTABLE], exe, sizeof(exe));
	if (!rc)
		rc = id_file_path(r, id, MARKER_SUFFIX, marker, sizeof(marker));
	if (!rc)
		rc = id_dir_ensure(r, id);
	if (rc) {
		sysom_errorf(err, errlen, "%s: %s", dir, sysom_strerror(rc));
		goto cleanup;
	}
	if (file_exists(final)) {
		rc = -EEXIST;
		goto cleanup;
	}
	if (file_exists(sym) && (kind == SYMREPO_EXECUTABLE ||
				 (kind == SYMREPO_DEBUGINFO && file_exists(exe)))) {
		fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
		if (fd < 0) {
			rc = -errno;
			sysom_errorf(err, errlen, "%s: %s", marker, strerror(-rc));
			goto cleanup;
		}
		close(fd);
		rc = sysom_fsync_dir(dir);
		if (rc) {
			sysom_errorf(err, errlen, "fsync %s: %s", dir, strerror(-rc));
			goto cleanup;
		}
	}
	rc = rename_noreplace(tmp, final);
	if (rc) {
		if (rc != -EEXIST)
			sysom_errorf(err, errlen, "rename %s to %s: %s", tmp, final, strerror(-rc));
		goto cleanup;
	}
	rc = sysom_fsync_dir(dir);
	if (rc)
		sysom_errorf(err, errlen, "fsync %s: %s", dir, strerror(-rc));
cleanup:
	if (rc)
		unlink(tmp);
	return rc;
}

/*
 * Under the identity's lock: (re)builds the symbol file from the executable (+ debug file)
 * into a temporary file, checks it and renames it over the old one (readers that have the
 * old one mapped keep it). Returns 1 when built, 0 when there is nothing to build from (no
 * executable, or it is not ELF), or a negative error with `err` set.
 */
static int rebuild_locked(struct symrepo *r, const struct sysom_build_id *id,
			  struct symfile_write_stats *stats, char *err, size_t errlen)
{
	char exe[PATH_BUF], dbg[PATH_BUF], sym[PATH_BUF], marker[PATH_BUF], dir[PATH_BUF];
	char out[PATH_BUF], werr[512] = "";
	struct symfile_write_options opts = { 0 };
	struct symfile_write_stats st = { 0 };
	bool made = false;
	int rc;

	rc = id_file_path(r, id, kind_suffix[SYMREPO_EXECUTABLE], exe, sizeof(exe));
	if (!rc)
		rc = id_file_path(r, id, kind_suffix[SYMREPO_DEBUGINFO], dbg, sizeof(dbg));
	if (!rc)
		rc = id_file_path(r, id, kind_suffix[SYMREPO_SYMBOLS], sym, sizeof(sym));
	if (!rc)
		rc = id_file_path(r, id, MARKER_SUFFIX, marker, sizeof(marker));
	if (!rc)
		rc = id_dir_path(r, id, dir, sizeof(dir));
	if (!rc)
		rc = symrepo_tmp_path(r, out, sizeof(out) - 4);
	if (rc) {
		sysom_errorf(err, errlen, "%s", sysom_strerror(rc));
		goto cleanup;
	}
	strcat(out, ".sym");
	if (!file_exists(exe))
		goto cleanup; /* rc = 0: the executable has not arrived */
	opts.executable_path = exe;
	opts.debug_path = id->kind == SYSOM_OBJECT_ELF && file_exists(dbg) ? dbg : NULL;
	opts.inline_frames = r->inline_frames;
	opts.line_table = r->line_table;
	opts.memory_budget = r->writer_budget;
	made = true;
	rc = symfile_write(&opts, out, &st, werr, sizeof(werr));
	if (rc == -SYSOM_ENOTELF) {
		unlink(marker); /* a FILE_HASH identity of a non-ELF file: no symbols to have */
		rc = 0;
		goto cleanup;
	}
	if (rc) {
		sysom_errorf(err, errlen, "building %s: %s", sym, werr[0] ? werr : sysom_strerror(rc));
		goto cleanup;
	}
	rc = symbols_check(out, id, werr, sizeof(werr));
	if (rc) {
		sysom_errorf(err, errlen, "the writer's output is invalid: %s", werr);
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	if (rename(out, sym) < 0) {
		rc = -errno;
		sysom_errorf(err, errlen, "rename %s to %s: %s", out, sym, strerror(-rc));
		goto cleanup;
	}
	made = false;
	rc = sysom_fsync_dir(dir);
	if (rc) {
		sysom_errorf(err, errlen, "fsync %s: %s", dir, strerror(-rc));
		goto cleanup;
	}
	cache_forget(r, id);
	unlink(marker);
	if (stats)
		*stats = st;
	rc = 1;
cleanup:
	if (made)
		unlink(out);
	return rc;
}

int symrepo_install(struct symrepo *r, const struct sysom_build_id *id, enum symrepo_kind kind,
		    const char *tmp_path, char *err, size_t errlen)
{
	char final[PATH_BUF], sym[PATH_BUF], exe[PATH_BUF], marker[PATH_BUF], berr[512];
	struct id_lock lock = { .fd = -1 };
	int rc, brc;

	if (err && errlen)
		err[0] = '\0';
	if (!r || !tmp_path || !in_tmp(r, tmp_path)) {
		sysom_errorf(err, errlen, "%s is not a temporary file of the repository",
		       tmp_path ? tmp_path : "(null)");
		return -EINVAL;
	}
	if (!id_valid(id) || (unsigned)kind > SYMREPO_SYMBOLS) {
		rc = -EINVAL;
		sysom_errorf(err, errlen, "invalid identity or kind");
		goto cleanup;
	}
	if (kind == SYMREPO_DEBUGINFO && id->kind != SYSOM_OBJECT_ELF) {
		rc = -EINVAL;
		sysom_errorf(err, errlen, "debug files are matched by GNU build ID, not by content hash");
		goto cleanup;
	}
	rc = id_file_path(r, id, kind_suffix[kind], final, sizeof(final));
	if (!rc)
		rc = id_file_path(r, id, kind_suffix[SYMREPO_SYMBOLS], sym, sizeof(sym));
	if (!rc)
		rc = id_file_path(r, id, kind_suffix[SYMREPO_EXECUTABLE], exe, sizeof(exe));
	if (!rc)
		rc = id_file_path(r, id, MARKER_SUFFIX, marker, sizeof(marker));
	if (rc) {
		sysom_errorf(err, errlen, "%s", sysom_strerror(rc));
		goto cleanup;
	}
	rc = prepare_tmp(id, kind, tmp_path, err, errlen);
	if (rc)
		goto cleanup;
	/* Already complete: no need to wait behind a rebuild. */
	if (file_exists(final) &&
	    (kind == SYMREPO_SYMBOLS || (file_exists(sym) && !file_exists(marker)))) {
		rc = -EEXIST;
		goto cleanup;
	}
	rc = id_lock_take(r, id, &lock);
	if (rc) {
		sysom_errorf(err, errlen, "%s: %s", lock.path, sysom_strerror(rc));
		goto cleanup;
	}
	rc = place_locked(r, id, kind, tmp_path, err, errlen);
	if ((rc == 0 || rc == -EEXIST) && kind != SYMREPO_SYMBOLS && file_exists(exe) &&
	    (rc == 0 || !file_exists(sym) || file_exists(marker))) {
		/* Also when it existed: a crash may have left its symbol file unbuilt. */
		brc = rebuild_locked(r, id, NULL, berr, sizeof(berr));
		if (brc < 0 && rc == 0)
			sysom_errorf(err, errlen, "installed, but the symbol file was not built: %s", berr);
	}
cleanup:
	if (lock.fd >= 0)
		id_lock_drop(&lock);
	if (rc)
		unlink(tmp_path);
	return rc;
}

/* Copies `src` to the new file `dst` (in-kernel where the filesystems allow). */
static int copy_file(const char *src, const char *dst)
{
	struct stat st;
	char *buf = NULL;
	ssize_t n;
	int in = -1, out = -1, rc = 0;

	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0 || fstat(in, &st) < 0) {
		rc = -errno;
		goto cleanup;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		goto cleanup;
	}
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
	if (out < 0) {
		rc = -errno;
		goto cleanup;
	}
	while ((n = copy_file_range(in, NULL, out, NULL, 64 * COPY_CHUNK, 0)) > 0)
		;
	if (n == 0)
		goto cleanup;
	if (errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP) {
		rc = -errno;
		goto cleanup;
	}
	buf = malloc(COPY_CHUNK);
	if (!buf) {
		rc = -ENOMEM;
		goto cleanup;
	}
	while ((n = read(in, buf, COPY_CHUNK)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			goto cleanup;
		}
		if ((rc = sysom_write_full(out, buf, (size_t)n)))
			goto cleanup;
	}
cleanup:
	free(buf);
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out) < 0 && !rc)
		rc = -errno;
	return rc;
}

/*
 * Copies `src` to a new temporary file of the repository (its path left in `tmp`, which the
 * caller removes if it is not installed) and checks it is the `kind` file of `id`.
 */
static int stage_copy(struct symrepo *r, const struct sysom_build_id *id, enum symrepo_kind kind,
		      const char *src, char *tmp, size_t tmplen, char *err, size_t errlen)
{
	int rc = symrepo_tmp_path(r, tmp, tmplen);

	if (!rc)
		rc = copy_file(src, tmp);
	if (rc) {
		sysom_errorf(err, errlen, "copying %s: %s", src, sysom_strerror(rc));
		return rc;
	}
	return prepare_tmp(id, kind, tmp, err, errlen);
}

int symrepo_add_files_ex(struct symrepo *r, const char *executable, const char *debug_file,
			 struct symrepo_add_result *out, char *err, size_t errlen)
{
	char tmp_exe[PATH_BUF] = "", tmp_dbg[PATH_BUF] = "", sym[PATH_BUF], marker[PATH_BUF];
	char hex[HEX_BUF], dhex[HEX_BUF];
	struct symrepo_add_result res = { 0 };
	struct sysom_build_id did;
	struct id_lock lock = { .fd = -1 };
	int fd = -1, rc;

	if (err && errlen)
		err[0] = '\0';
	if (!r || !executable || !out) {
		rc = -EINVAL;
		sysom_errorf(err, errlen, "no executable given");
		goto cleanup;
	}
	fd = open(executable, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		sysom_errorf(err, errlen, "%s: %s", executable, strerror(-rc));
		goto cleanup;
	}
	rc = sysom_object_identity(fd, &res.id);
	close(fd);
	fd = -1;
	if (rc) {
		sysom_errorf(err, errlen, "%s: %s", executable, sysom_strerror(rc));
		goto cleanup;
	}
	sysom_build_id_hex(&res.id, hex, sizeof(hex));
	if (debug_file) {
		fd = open(debug_file, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			rc = -errno;
			sysom_errorf(err, errlen, "%s: %s", debug_file, strerror(-rc));
			goto cleanup;
		}
		rc = sysom_elf_build_id(fd, &did);
		close(fd);
		fd = -1;
		if (rc) {
			sysom_errorf(err, errlen, "%s: %s", debug_file, sysom_strerror(rc));
			rc = rc == -SYSOM_ENOTELF || rc == -SYSOM_ENOBUILDID ? -SYSOM_ECORRUPT : rc;
			goto cleanup;
		}
		if (!id_equal(&did, &res.id)) {
			sysom_build_id_hex(&did, dhex, sizeof(dhex));
			sysom_errorf(err, errlen, "%s has build ID %s, but %s has %s %s", debug_file, dhex,
			       executable,
			       res.id.kind == SYSOM_OBJECT_ELF ? "build ID"
							       : "no build ID; content hash",
			       hex);
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
	}
	rc = id_file_path(r, &res.id, kind_suffix[SYMREPO_SYMBOLS], sym, sizeof(sym));
	if (!rc)
		rc = id_file_path(r, &res.id, MARKER_SUFFIX, marker, sizeof(marker));
	if (rc)
		goto cleanup;
	/* Copies made (and checked) before the lock is taken. */
	if (!symrepo_has(r, &res.id, SYMREPO_EXECUTABLE)) {
		rc = stage_copy(r, &res.id, SYMREPO_EXECUTABLE, executable, tmp_exe,
				sizeof(tmp_exe), err, errlen);
		if (rc)
			goto cleanup;
	}
	if (debug_file && !symrepo_has(r, &res.id, SYMREPO_DEBUGINFO)) {
		rc = stage_copy(r, &res.id, SYMREPO_DEBUGINFO, debug_file, tmp_dbg,
				sizeof(tmp_dbg), err, errlen);
		if (rc)
			goto cleanup;
	}
	rc = id_lock_take(r, &res.id, &lock);
	if (rc) {
		sysom_errorf(err, errlen, "%s: %s", lock.path, sysom_strerror(rc));
		goto cleanup;
	}
	if (tmp_exe[0]) {
		rc = place_locked(r, &res.id, SYMREPO_EXECUTABLE, tmp_exe, err, errlen);
		tmp_exe[0] = '\0'; /* renamed or removed */
		if (rc && rc != -EEXIST)
			goto cleanup;
		res.executable_installed = rc == 0;
	}
	if (tmp_dbg[0]) {
		rc = place_locked(r, &res.id, SYMREPO_DEBUGINFO, tmp_dbg, err, errlen);
		tmp_dbg[0] = '\0';
		if (rc && rc != -EEXIST)
			goto cleanup;
		res.debug_installed = rc == 0;
	}
	rc = 0;
	if (res.executable_installed || res.debug_installed || !file_exists(sym) ||
	    file_exists(marker)) {
		rc = rebuild_locked(r, &res.id, &res.stats, err, errlen);
		if (rc < 0)
			goto cleanup;
		res.symbols_built = rc == 1;
	}
	rc = res.executable_installed || res.debug_installed || res.symbols_built ? 0 : -EEXIST;
	*out = res;
cleanup:
	if (lock.fd >= 0)
		id_lock_drop(&lock);
	if (tmp_exe[0])
		unlink(tmp_exe);
	if (tmp_dbg[0])
		unlink(tmp_dbg);
	return rc;
}

int symrepo_add_files(struct symrepo *r, const char *executable, const char *debug_file,
		      struct sysom_build_id *id_out, char *err, size_t errlen)
{
	struct symrepo_add_result res;
	int rc;

	rc = symrepo_add_files_ex(r, executable, debug_file, &res, err, errlen);
	if ((rc == 0 || rc == -EEXIST) && id_out)
		*id_out = res.id;
	return rc;
}

int symrepo_check(struct symrepo *r, const struct sysom_build_id *id, enum symrepo_kind kind,
		  char *err, size_t errlen)
{
	char path[PATH_BUF], marker[PATH_BUF];
	int rc;

	if (err && errlen)
		err[0] = '\0';
	rc = symrepo_path(r, id, kind, path, sizeof(path));
	if (rc)
		return rc;
	if (!file_exists(path))
		return -ENOENT;
	if (kind == SYMREPO_DEBUGINFO && id->kind != SYSOM_OBJECT_ELF) {
		sysom_errorf(err, errlen, "%s: a debug file under a content-hash identity", path);
		return -SYSOM_ECORRUPT;
	}
	rc = identity_check(id, kind, path, err, errlen);
	if (rc || kind != SYMREPO_SYMBOLS)
		return rc;
	rc = id_file_path(r, id, MARKER_SUFFIX, marker, sizeof(marker));
	if (rc)
		return rc;
	if (file_exists(marker) && symrepo_has(r, id, SYMREPO_EXECUTABLE)) {
		sysom_errorf(err, errlen, "%s predates an installed file (rebuild pending: run gc)", path);
		return -ESTALE;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Walking the trees */

struct walk_item {
	char rest[2 * SYSOM_BUILD_ID_MAX - 1]; /* hex after the two of the directory name */
	uint8_t mask;
};

typedef int (*walk_fn)(struct symrepo *r, void *ctx, const struct sysom_build_id *id,
		       unsigned mask);

static int item_cmp(const void *a, const void *b)
{
	return strcmp(((const struct walk_item *)a)->rest, ((const struct walk_item *)b)->rest);
}

/* Parses "<rest>.<suffix>" into an item; false for names that are not ours. */
static bool item_parse(const char *name, uint8_t kind, struct walk_item *it)
{
	const char *dot = strrchr(name, '.');
	size_t n = dot ? (size_t)(dot - name) : 0;
	unsigned bit = 0;

	if (!dot || !sysom_hex_valid_lower(name, n) || n >= sizeof(it->rest) || (n + 2) % 2 ||
	    n + 2 < 6)
		return false;
	if (kind == SYSOM_OBJECT_FILE_HASH && n + 2 != 32)
		return false;
	for (unsigned k = 0; k <= SYMREPO_SYMBOLS; k++)
		if (!strcmp(dot + 1, kind_suffix[k]))
			bit = 1u << k;
	if (!strcmp(dot + 1, MARKER_SUFFIX))
		bit = HAS_MARKER;
	if (!bit)
		return false;
	memcpy(it->rest, name, n);
	it->rest[n] = '\0';
	it->mask = (uint8_t)bit;
	return true;
}

/* Visits the identities of one <tree>/xx directory, in name order. */
static int walk_dir(struct symrepo *r, uint8_t kind, const char *dir, const char *xx, walk_fn fn,
		    void *ctx)
{
	struct walk_item *items = NULL, *grown;
	size_t n = 0, cap = 0;
	char hex[HEX_BUF];
	struct sysom_build_id id;
	struct dirent *de;
	DIR *d;
	int rc = 0;

	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d)) != NULL) {
		if (n == cap) {
			if (cap >= DIR_ENTRIES_MAX) {
				rc = -E2BIG;
				break;
			}
			cap = cap ? cap * 2 : 256;
			grown = realloc(items, cap * sizeof(*items));
			if (!grown) {
				rc = -ENOMEM;
				break;
			}
			items = grown;
		}
		if (item_parse(de->d_name, kind, &items[n]))
			n++;
	}
	closedir(d);
	if (rc)
		goto cleanup;
	qsort(items, n, sizeof(*items), item_cmp);
	for (size_t i = 0; i < n;) {
		unsigned mask = 0;
		size_t j = i;

		while (j < n && !strcmp(items[j].rest, items[i].rest))
			mask |= items[j++].mask;
		hex[0] = xx[0];
		hex[1] = xx[1];
		memcpy(hex + 2, items[i].rest, strlen(items[i].rest) + 1); /* < sizeof(rest) */
		i = j;
		if (sysom_build_id_parse_hex(hex, kind, &id) || !id_valid(&id))
			continue;
		rc = fn(r, ctx, &id, mask);
		if (rc < 0)
			break;
	}
cleanup:
	free(items);
	return rc < 0 ? rc : 0;
}

static int walk(struct symrepo *r, walk_fn fn, void *ctx)
{
	char tree[PATH_BUF], dir[PATH_BUF];
	struct dirent *de;
	DIR *d;
	int rc = 0;

	for (unsigned t = 0; t < 2 && !rc; t++) {
		uint8_t kind = t ? SYSOM_OBJECT_FILE_HASH : SYSOM_OBJECT_ELF;

		rc = put_path(tree, sizeof(tree),
			      snprintf(tree, sizeof(tree), "%s/%s", r->root, trees[t]));
		if (rc)
			break;
		d = opendir(tree);
		if (!d) {
			rc = errno == ENOENT ? 0 : -errno;
			continue;
		}
		while (!rc && (de = readdir(d)) != NULL) {
			if (strlen(de->d_name) != 2 || !sysom_hex_valid_lower(de->d_name, 2))
				continue;
			rc = put_path(dir, sizeof(dir),
				      snprintf(dir, sizeof(dir), "%s/%s", tree, de->d_name));
			if (!rc)
				rc = walk_dir(r, kind, dir, de->d_name, fn, ctx);
		}
		closedir(d);
	}
	return rc;
}

struct visit_ctx {
	symrepo_visit_fn fn;
	void *ctx;
};

static int visit_one(struct symrepo *r, void *ctx, const struct sysom_build_id *id, unsigned mask)
{
	struct visit_ctx *v = ctx;

	(void)r;
	if (!(mask & (HAS_EXECUTABLE | HAS_DEBUG | HAS_SYMBOLS)))
		return 0;
	return v->fn(v->ctx, id, mask & HAS_EXECUTABLE, mask & HAS_DEBUG, mask & HAS_SYMBOLS);
}

int symrepo_for_each(struct symrepo *r, symrepo_visit_fn fn, void *ctx)
{
	struct visit_ctx v = { fn, ctx };

	if (!r || !fn)
		return -EINVAL;
	return walk(r, visit_one, &v);
}

/* ------------------------------------------------------------------------------------------ */
/* gc */

struct gc_ctx {
	struct symrepo_gc_stats stats;
	char *err;
	size_t errlen;
	bool noted;
	int io_rc; /* first error that is not about a file's content */
};

static void gc_note(struct gc_ctx *g, const char *msg)
{
	if (!g->noted && msg[0]) {
		sysom_errorf(g->err, g->errlen, "%s", msg);
		g->noted = true;
	}
}

static int gc_one(struct symrepo *r, void *ctx, const struct sysom_build_id *id, unsigned mask)
{
	struct gc_ctx *g = ctx;
	struct id_lock lock = { .fd = -1 };
	char path[SYMREPO_SYMBOLS + 1][PATH_BUF], marker[PATH_BUF], dir[PATH_BUF], msg[512];
	bool have[SYMREPO_SYMBOLS + 1] = { false }, sym_ok = false;
	int rc;

	(void)mask; /* looked at again under the lock */
	rc = id_dir_path(r, id, dir, sizeof(dir));
	if (!rc)
		rc = id_file_path(r, id, MARKER_SUFFIX, marker, sizeof(marker));
	for (unsigned k = 0; k <= SYMREPO_SYMBOLS && !rc; k++)
		rc = id_file_path(r, id, kind_suffix[k], path[k], sizeof(path[k]));
	if (rc)
		goto cleanup;
	rc = id_lock_take(r, id, &lock);
	if (rc)
		goto cleanup;
	for (unsigned k = SYMREPO_EXECUTABLE; k <= SYMREPO_DEBUGINFO; k++) {
		have[k] = file_exists(path[k]);
		if (!have[k])
			continue;
		msg[0] = '\0';
		if (k == SYMREPO_DEBUGINFO && id->kind != SYSOM_OBJECT_ELF)
			rc = -SYSOM_ECORRUPT;
		else
			rc = identity_check(id, k, path[k], msg, sizeof(msg));
		if (rc == -SYSOM_ECORRUPT) {
			unlink(path[k]);
			sysom_fsync_dir(dir);
			g->stats.corrupt_removed++;
			have[k] = false;
		} else if (rc) {
			gc_note(g, msg);
			if (!g->io_rc)
				g->io_rc = rc;
		}
	}
	rc = 0;
	have[SYMREPO_SYMBOLS] = file_exists(path[SYMREPO_SYMBOLS]);
	sym_ok = have[SYMREPO_SYMBOLS] && symbols_check(path[SYMREPO_SYMBOLS], id, NULL, 0) == 0;
	if (have[SYMREPO_EXECUTABLE] && (!sym_ok || file_exists(marker))) {
		msg[0] = '\0';
		rc = rebuild_locked(r, id, NULL, msg, sizeof(msg));
		if (rc > 0) {
			g->stats.symbols_rebuilt++;
			have[SYMREPO_SYMBOLS] = sym_ok = true;
		} else if (rc < 0) {
			g->stats.symbols_failed++;
			gc_note(g, msg);
		}
		rc = 0;
	}
	if (have[SYMREPO_SYMBOLS] && !sym_ok) {
		/* Corrupt and nothing to rebuild it from: never serve it. */
		unlink(path[SYMREPO_SYMBOLS]);
		sysom_fsync_dir(dir);
		cache_forget(r, id);
		g->stats.corrupt_removed++;
		have[SYMREPO_SYMBOLS] = false;
	}
	if (!have[SYMREPO_EXECUTABLE])
		unlink(marker);
	if (have[SYMREPO_EXECUTABLE] || have[SYMREPO_DEBUGINFO] || have[SYMREPO_SYMBOLS])
		g->stats.build_ids++;
cleanup:
	if (lock.fd >= 0)
		id_lock_drop(&lock);
	return rc;
}

/* Removes lock files left by crashed holders (nobody holds them). */
static void locks_clean(struct symrepo *r)
{
	char dir[PATH_BUF], path[PATH_BUF];
	struct dirent *de;
	DIR *d;
	int fd;

	if (put_path(dir, sizeof(dir), snprintf(dir, sizeof(dir), "%s/locks", r->root)))
		return;
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		if (!has_suffix(de->d_name, ".lock") ||
		    put_path(path, sizeof(path),
			     snprintf(path, sizeof(path), "%s/%s", dir, de->d_name)))
			continue;
		if (lock_path_file(path, false, false, &fd) == 0)
			unlock_path_file(path, fd);
	}
	closedir(d);
}

int symrepo_gc(struct symrepo *r, struct symrepo_gc_stats *stats, char *err, size_t errlen)
{
	struct gc_ctx g = { .err = err, .errlen = errlen };
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (!r)
		return -EINVAL;
	rc = tmp_clean(r, &g.stats.tmp_removed);
	if (rc) {
		sysom_errorf(err, errlen, "cleaning %s/tmp: %s", r->root, sysom_strerror(rc));
		return rc;
	}
	locks_clean(r);
	rc = walk(r, gc_one, &g);
	if (rc) {
		sysom_errorf(err, errlen, "walking %s: %s", r->root, sysom_strerror(rc));
		return rc;
	}
	if (stats)
		*stats = g.stats;
	return g.io_rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Open and close */

void symrepo_options_default(struct symrepo_options *opts, const char *root)
{
	memset(opts, 0, sizeof(*opts));
	opts->root = root;
	opts->max_open_files = DEFAULT_MAX_OPEN;
	opts->inline_frames = true;
	opts->line_table = true;
}

int symrepo_open(const struct symrepo_options *opts, struct symrepo **out)
{
	static const char *const subdirs[] = { ".build-id", ".file-hash", "tmp", "locks" };
	struct symrepo *r = NULL;
	char path[PATH_BUF];
	size_t len;
	int rc;

	if (!opts || !opts->root || !opts->root[0] || !out) {
		rc = -EINVAL;
		goto cleanup;
	}
	len = strlen(opts->root);
	while (len > 1 && opts->root[len - 1] == '/')
		len--;
	if (len > ROOT_MAX) {
		rc = -ENAMETOOLONG;
		goto cleanup;
	}
	if (opts->max_open_files > MAX_OPEN_LIMIT) {
		rc = -EINVAL;
		goto cleanup;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		rc = -ENOMEM;
		goto cleanup;
	}
	r->tmp_lock_fd = -1;
	r->root = strndup(opts->root, len);
	r->tmp_counter = calloc(1, sizeof(*r->tmp_counter));
	r->max_open = opts->max_open_files ? opts->max_open_files : DEFAULT_MAX_OPEN;
	r->nbuckets = 16;
	while (r->nbuckets < 2 * r->max_open)
		r->nbuckets *= 2;
	r->id_buckets = calloc(r->nbuckets, sizeof(*r->id_buckets));
	r->ptr_buckets = calloc(r->nbuckets, sizeof(*r->ptr_buckets));
	if (!r->root || !r->tmp_counter || !r->id_buckets || !r->ptr_buckets) {
		rc = -ENOMEM;
		goto cleanup;
	}
	r->inline_frames = opts->inline_frames;
	r->line_table = opts->line_table;
	r->writer_budget = opts->writer_memory_budget;
	rc = -pthread_mutex_init(&r->mu, NULL);
	if (rc)
		goto cleanup;
	rc = mkdir_parents(r->root, 0750);
	for (size_t i = 0; i < sizeof(subdirs) / sizeof(subdirs[0]) && !rc; i++) {
		rc = put_path(path, sizeof(path),
			      snprintf(path, sizeof(path), "%s/%s", r->root, subdirs[i]));
		if (!rc)
			rc = mkdir_one(path, 0750);
		rc = rc > 0 ? 0 : rc;
	}
	if (!rc)
		rc = instance_create(r);
	if (!rc)
		rc = tmp_clean(r, NULL);
	if (rc) {
		pthread_mutex_destroy(&r->mu);
		goto cleanup;
	}
	*out = r;
	r = NULL;
cleanup:
	if (r) {
		if (r->tmp_lock_fd >= 0) {
			remove_dir_files(r->tmp_dir, NULL);
			unlock_path_file(r->tmp_lock, r->tmp_lock_fd);
		}
		free(r->tmp_dir);
		free(r->tmp_lock);
		free(r->id_buckets);
		free(r->ptr_buckets);
		free(r->tmp_counter);
		free(r->root);
		free(r);
	}
	return rc;
}

void symrepo_close(struct symrepo *r)
{
	struct entry *e, *next;

	if (!r)
		return;
	/* Every entry is in the pointer table, cached or detached. */
	for (uint32_t b = 0; b < r->nbuckets; b++) {
		for (e = r->ptr_buckets[b]; e; e = next) {
			next = e->ptr_next;
			entry_free(e);
		}
	}
	remove_dir_files(r->tmp_dir, NULL);
	unlock_path_file(r->tmp_lock, r->tmp_lock_fd);
	pthread_mutex_destroy(&r->mu);
	free(r->tmp_dir);
	free(r->tmp_lock);
	free(r->id_buckets);
	free(r->ptr_buckets);
	free((void *)r->tmp_counter);
	free(r->root);
	free(r);
}
