/* SPDX-License-Identifier: Apache-2.0 */
/* Spool directory: one checksummed file per batch, durable state, bounds, quarantine. */
#include "agent/ship/spool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/array.h"
#include "common/bytes.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/fileio.h"

/*
 * State file "state", 32 bytes, little-endian:
 *   OFFSET SIZE FIELD
 *   0      4    magic "SYSS"
 *   4      2    version (1)
 *   6      2    size (32)
 *   8      8    agent epoch (random, nonzero)
 *   16     8    next sequence number to hand out (>= 1)
 *   24     8    XXH64 (seed 0) of bytes [0, 24)
 */
#define STATE_MAGIC "SYSS"
#define STATE_VERSION 1
#define STATE_SIZE 32
#define STATE_NAME "state"
#define STATE_TMP_NAME "state.tmp"
#define CORRUPT_DIR "corrupt"
#define REJECTED_DIR "rejected"
#define BATCH_SUFFIX ".batch"
#define TMP_SUFFIX ".tmp"
/* "<16 hex>-<20 digits>.batch" plus ".tmp" and NUL */
#define NAME_LEN (16 + 1 + 20 + 6)
#define NAME_SIZE (NAME_LEN + 4 + 1)
#define PRUNE_SCAN_MAX 4096 /* entries of corrupt/ or rejected/ looked at per prune */
#define RANK_CURRENT UINT32_MAX

/* One batch file in the index. */
struct spool_item {
	uint64_t epoch;
	uint64_t sequence;
	uint64_t created_ns;
	uint64_t window_end_ns;
	uint64_t size;  /* file bytes: header + body */
	uint32_t rank;  /* delivery order of the epoch: foreign epochs by age, current last */
};

struct spool {
	pthread_mutex_t lock;
	int dirfd;       /* the spool directory, flock()ed for the spool's life */
	int corrupt_fd;  /* corrupt/ */
	int rejected_fd; /* rejected/ */
	uint64_t epoch;
	uint64_t next_sequence; /* durable in the state file before being handed out */
	uint64_t max_bytes;
	uint64_t max_age_ns;
	uint32_t max_files;
	spool_event_fn on_event;
	void *event_ctx;
	uint64_t (*now_ns)(void *ctx);
	void *clock_ctx;
	struct spool_item *items; /* sorted by (rank, sequence) */
	size_t count, cap;
	uint64_t bytes;          /* sum of items[].size */
	uint64_t reserved_bytes; /* commits writing their file outside the lock */
	uint32_t reserved_files;
	/* The batch last handed out by spool_batch_oldest, until it is removed, rejected or
	 * unpinned: the limits do not delete it (it counts toward them), so a batch being
	 * delivered is never also counted as dropped. */
	bool pinned;
	uint64_t pin_epoch, pin_sequence;
	struct spool_stats stats; /* counters; files and bytes filled in at snapshot */
};

/* ---------------------------------------------------------------------------------------- */
/* Header codec (pure) */

int spool_header_decode(const void *buf, size_t len, struct spool_header *out, size_t *where)
{
	struct byte_reader r;
	struct spool_header h;
	uint8_t magic[4];
	uint64_t checksum;
	size_t at = 0;
	int err = -SYSOM_ECORRUPT;

	memset(&h, 0, sizeof(h));
	if (!buf)
		len = 0;
	byte_reader_init(&r, buf ? buf : "", len);
	if (!byte_reader_bytes(&r, magic, sizeof(magic)) || memcmp(magic, SPOOL_MAGIC, 4) != 0)
		goto cleanup;
	at = byte_reader_offset(&r);
	if (!byte_reader_u16(&r, &h.version))
		goto cleanup;
	if (h.version != SPOOL_VERSION) {
		err = -SYSOM_EVERSION;
		goto cleanup;
	}
	at = byte_reader_offset(&r);
	if (!byte_reader_u16(&r, &h.header_size) || h.header_size < SPOOL_HEADER_SIZE ||
	    h.header_size > SPOOL_HEADER_MAX)
		goto cleanup;
	if (len < h.header_size)
		goto cleanup; /* the header size field points past the input */
	/* The checksum is the header's last 8 bytes and covers everything before it. */
	at = (size_t)h.header_size - 8;
	checksum = load_le64((const uint8_t *)buf + at);
	if (XXH64(buf, at, 0) != checksum)
		goto cleanup;
	at = byte_reader_offset(&r);
	if (!byte_reader_u64(&r, &h.epoch))
		goto cleanup;
	at = byte_reader_offset(&r);
	if (!byte_reader_u64(&r, &h.sequence) || h.sequence == 0)
		goto cleanup;
	at = byte_reader_offset(&r);
	if (!byte_reader_u64(&r, &h.window_end_ns) || !byte_reader_u64(&r, &h.created_ns))
		goto cleanup;
	at = byte_reader_offset(&r);
	if (!byte_reader_u64(&r, &h.body_len))
		goto cleanup;
	if (h.body_len > SPOOL_MAX_BODY) {
		err = -SYSOM_ELIMIT;
		goto cleanup;
	}
	at = byte_reader_offset(&r);
	if (!byte_reader_u64(&r, &h.body_hash))
		goto cleanup;
	*out = h;
	return h.header_size;
cleanup:
	if (where)
		*where = at;
	return err;
}

void spool_header_encode(const struct spool_header *h, uint8_t out[SPOOL_HEADER_SIZE])
{
	memset(out, 0, SPOOL_HEADER_SIZE);
	memcpy(out, SPOOL_MAGIC, 4);
	store_le16(out + 4, SPOOL_VERSION);
	store_le16(out + 6, SPOOL_HEADER_SIZE);
	store_le64(out + 8, h->epoch);
	store_le64(out + 16, h->sequence);
	store_le64(out + 24, h->window_end_ns);
	store_le64(out + 32, h->created_ns);
	store_le64(out + 40, h->body_len);
	store_le64(out + 48, h->body_hash);
	store_le64(out + 56, XXH64(out, SPOOL_HEADER_SIZE - 8, 0));
}

/* ---------------------------------------------------------------------------------------- */
/* Small helpers */

static uint64_t realtime_ns(void *ctx)
{
	(void)ctx;
	return sysom_realtime_ns();
}

static void emit(struct spool *s, enum spool_event_kind kind, const char *name, uint64_t epoch,
		 uint64_t sequence, int error, const char *detail)
{
	struct spool_event ev = { kind, name, epoch, sequence, error, detail ? detail : "" };

	if (s->on_event)
		s->on_event(s->event_ctx, &ev);
}

static void batch_name(char out[NAME_SIZE], uint64_t epoch, uint64_t sequence, bool tmp)
{
	snprintf(out, NAME_SIZE, "%016" PRIx64 "-%020" PRIu64 BATCH_SUFFIX "%s", epoch, sequence,
		 tmp ? TMP_SUFFIX : "");
}

/* Parses "<16 lower hex>-<20 digits>.batch" exactly. */
static bool parse_batch_name(const char *name, uint64_t *epoch, uint64_t *sequence)
{
	uint64_t e = 0, q = 0;

	if (strlen(name) != NAME_LEN || name[16] != '-' || strcmp(name + 37, BATCH_SUFFIX) != 0)
		return false;
	for (int i = 0; i < 16; i++) {
		char c = name[i];
		unsigned v;
		if (c >= '0' && c <= '9')
			v = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = (unsigned)(c - 'a' + 10);
		else
			return false;
		e = e << 4 | v;
	}
	for (int i = 17; i < 37; i++) {
		char c = name[i];
		if (c < '0' || c > '9')
			return false;
		unsigned v = (unsigned)(c - '0');
		if (q > (UINT64_MAX - v) / 10)
			return false;
		q = q * 10 + v;
	}
	*epoch = e;
	*sequence = q;
	return true;
}

static bool has_suffix(const char *name, const char *suffix)
{
	size_t n = strlen(name), k = strlen(suffix);

	return n > k && strcmp(name + n - k, suffix) == 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Index */

static int item_cmp(const struct spool_item *a, const struct spool_item *b)
{
	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	if (a->sequence != b->sequence)
		return a->sequence < b->sequence ? -1 : 1;
	return 0;
}

static int item_qsort_cmp(const void *a, const void *b)
{
	return item_cmp(a, b);
}

static size_t item_find(const struct spool *s, uint64_t epoch, uint64_t sequence)
{
	for (size_t i = 0; i < s->count; i++)
		if (s->items[i].epoch == epoch && s->items[i].sequence == sequence)
			return i;
	return SIZE_MAX;
}

static int item_reserve(struct spool *s)
{
	if (s->count < s->cap)
		return 0;
	if (s->count >= SPOOL_MAX_FILES_LIMIT)
		return -SYSOM_ELIMIT;
	return sysom_array_reserve((void **)&s->items, &s->cap, s->count, sizeof(*s->items), 64,
				   SPOOL_MAX_FILES_LIMIT);
}

/* Inserts in order; the caller made room with item_reserve. */
static void item_insert(struct spool *s, const struct spool_item *it)
{
	size_t lo = 0, hi = s->count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (item_cmp(&s->items[mid], it) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	memmove(&s->items[lo + 1], &s->items[lo], (s->count - lo) * sizeof(*it));
	s->items[lo] = *it;
	s->count++;
	s->bytes += it->size;
}

static bool item_pinned(const struct spool *s, const struct spool_item *it)
{
	return s->pinned && it->epoch == s->pin_epoch && it->sequence == s->pin_sequence;
}

static void item_delete(struct spool *s, size_t i)
{
	if (item_pinned(s, &s->items[i]))
		s->pinned = false;
	s->bytes -= s->items[i].size;
	memmove(&s->items[i], &s->items[i + 1], (s->count - i - 1) * sizeof(s->items[0]));
	s->count--;
}

/* ---------------------------------------------------------------------------------------- */
/* corrupt/ and rejected/ */

struct prune_entry {
	char *name;
	struct timespec mtime;
};

static int prune_cmp(const void *a, const void *b)
{
	const struct prune_entry *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Deletes the oldest regular files of `fd` (by mtime) beyond the newest `keep`. Best effort. */
static void prune_dir(int fd, size_t keep)
{
	struct prune_entry *list = NULL;
	size_t n = 0;
	struct dirent *de;
	int dfd = dup(fd);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;

	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return;
	}
	rewinddir(d);
	list = calloc(PRUNE_SCAN_MAX, sizeof(*list));
	if (!list)
		goto cleanup;
	while (n < PRUNE_SCAN_MAX && (de = readdir(d)) != NULL) {
		struct stat st;
		if (de->d_name[0] == '.')
			continue;
		if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		list[n].name = strdup(de->d_name);
		if (!list[n].name)
			goto cleanup;
		list[n].mtime = st.st_mtim;
		n++;
	}
	if (n > keep) {
		qsort(list, n, sizeof(*list), prune_cmp);
		for (size_t i = 0; i < n - keep; i++)
			unlinkat(fd, list[i].name, 0);
		sysom_fsync_dirfd(fd);
	}
cleanup:
	if (list)
		for (size_t i = 0; i < n; i++)
			free(list[i].name);
	free(list);
	closedir(d);
}

/*
 * Moves `name` from the spool directory into the directory `to_fd`, stamps it with the
 * current time (pruning keeps the newest) and prunes. When the move fails the file is
 * deleted instead, so a bad file can never block the spool. Returns 0 or -errno.
 */
static int move_aside(struct spool *s, const char *name, int to_fd)
{
	int err = 0;

	if (renameat(s->dirfd, name, to_fd, name) == 0) {
		utimensat(to_fd, name, NULL, AT_SYMLINK_NOFOLLOW);
		sysom_fsync_dirfd(to_fd);
		prune_dir(to_fd, SPOOL_KEEP_QUARANTINED);
	} else if (unlinkat(s->dirfd, name, 0) < 0) {
		err = -errno;
	}
	if (!err)
		sysom_fsync_dirfd(s->dirfd);
	return err;
}

/* Quarantines the indexed file items[i] and forgets it. */
static void quarantine_item(struct spool *s, size_t i, int error, const char *reason)
{
	struct spool_item it = s->items[i];
	char name[NAME_SIZE];

	batch_name(name, it.epoch, it.sequence, false);
	move_aside(s, name, s->corrupt_fd);
	item_delete(s, i);
	s->stats.corrupt++;
	emit(s, SPOOL_EVENT_CORRUPT, name, it.epoch, it.sequence, error, reason);
}

/*
 * Deletes the file of `it` because of a limit (counted, reported). The caller updates the
 * index and fsyncs the directory once for a whole pass.
 */
static void drop_file(struct spool *s, const struct spool_item *it, enum spool_event_kind kind)
{
	char name[NAME_SIZE];
	int err = 0;

	batch_name(name, it->epoch, it->sequence, false);
	if (unlinkat(s->dirfd, name, 0) < 0 && errno != ENOENT)
		err = -errno;
	if (kind == SPOOL_EVENT_DROPPED_AGE) {
		s->stats.dropped_age++;
		emit(s, kind, name, it->epoch, it->sequence, err, "older than the spool's age limit");
	} else {
		s->stats.dropped_full++;
		emit(s, kind, name, it->epoch, it->sequence, err,
		     "spool full: oldest batch deleted to make room");
	}
}

/* Deletes every batch older than the age limit but the pinned one, compacting the index in
 * one pass. */
static void enforce_age(struct spool *s, uint64_t now)
{
	size_t kept = 0, n = s->count;

	for (size_t i = 0; i < n; i++) {
		struct spool_item it = s->items[i];
		if (now > it.created_ns && now - it.created_ns > s->max_age_ns &&
		    !item_pinned(s, &it)) {
			s->bytes -= it.size;
			drop_file(s, &it, SPOOL_EVENT_DROPPED_AGE);
		} else {
			s->items[kept++] = it;
		}
	}
	s->count = kept;
	if (kept != n)
		sysom_fsync_dirfd(s->dirfd);
}

/*
 * Drops oldest batches, passing over the pinned one, until `size` more bytes and `files` more
 * files fit; false, with nothing dropped, when even dropping all the others would not do.
 */
static bool make_room(struct spool *s, uint64_t size, uint32_t files)
{
	size_t i = 0, kept = 0, dropped = 0; /* items[0, i) looked at, kept ones moved down */
	uint64_t bytes = s->bytes, least_bytes = 0;
	uint32_t least_files = 0;
	bool fits;

	for (size_t k = 0; s->pinned && k < s->count; k++)
		if (item_pinned(s, &s->items[k])) {
			least_bytes = s->items[k].size;
			least_files = 1;
		}
	if (least_files + s->reserved_files + files > s->max_files ||
	    least_bytes + s->reserved_bytes + size > s->max_bytes)
		return false;
	for (;;) {
		fits = s->count - dropped + s->reserved_files + files <= s->max_files &&
		       bytes + s->reserved_bytes + size <= s->max_bytes;
		if (fits || i == s->count)
			break;
		struct spool_item it = s->items[i++];
		if (item_pinned(s, &it)) {
			s->items[kept++] = it;
			continue;
		}
		bytes -= it.size;
		drop_file(s, &it, SPOOL_EVENT_DROPPED_FULL);
		dropped++;
	}
	if (dropped) {
		memmove(s->items + kept, s->items + i, (s->count - i) * sizeof(s->items[0]));
		s->count -= dropped;
		s->bytes = bytes;
		sysom_fsync_dirfd(s->dirfd);
	}
	return fits;
}

/* ---------------------------------------------------------------------------------------- */
/* State file */

static void state_encode(uint8_t out[STATE_SIZE], uint64_t epoch, uint64_t next)
{
	memcpy(out, STATE_MAGIC, 4);
	store_le16(out + 4, STATE_VERSION);
	store_le16(out + 6, STATE_SIZE);
	store_le64(out + 8, epoch);
	store_le64(out + 16, next);
	store_le64(out + 24, XXH64(out, 24, 0));
}

/* Returns 0 with the fields, -ENOENT when absent, -SYSOM_ECORRUPT with a reason, or -errno. */
static int state_load(struct spool *s, uint64_t *epoch, uint64_t *next, const char **reason)
{
	uint8_t buf[STATE_SIZE + 1];
	ssize_t n;
	int err = 0;
	int fd = openat(s->dirfd, STATE_NAME, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return -errno;
	n = sysom_pread_full(fd, buf, sizeof(buf), 0);
	if (n < 0) {
		err = (int)n;
		goto cleanup;
	}
	err = -SYSOM_ECORRUPT;
	if (n != STATE_SIZE) {
		*reason = "state file has the wrong size";
		goto cleanup;
	}
	if (memcmp(buf, STATE_MAGIC, 4) != 0 || load_le16(buf + 6) != STATE_SIZE) {
		*reason = "state file has a bad magic or size field";
		goto cleanup;
	}
	if (load_le16(buf + 4) != STATE_VERSION) {
		*reason = "state file has an unsupported version";
		goto cleanup;
	}
	if (XXH64(buf, 24, 0) != load_le64(buf + 24)) {
		*reason = "state file checksum mismatch";
		goto cleanup;
	}
	*epoch = load_le64(buf + 8);
	*next = load_le64(buf + 16);
	if (*epoch == 0 || *next == 0) {
		*reason = "state file holds a zero epoch or sequence";
		goto cleanup;
	}
	err = 0;
cleanup:
	close(fd);
	return err;
}

/*
 * Overwrites the existing state file in place (used when the disk is too full for a new
 * file). A torn write fails the checksum at the next open, which starts a new epoch: a
 * sequence is still never reused within an epoch.
 */
static int state_store_in_place(struct spool *s, const uint8_t buf[STATE_SIZE])
{
	int err = 0;
	int fd = openat(s->dirfd, STATE_NAME, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return -errno;
	for (size_t done = 0; done < STATE_SIZE;) {
		ssize_t n = pwrite(fd, buf + done, STATE_SIZE - done, (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			err = n < 0 ? -errno : -EIO;
			goto cleanup;
		}
		done += (size_t)n;
	}
	if (fdatasync(fd) < 0)
		err = -errno;
cleanup:
	close(fd);
	return err;
}

/* Makes (epoch, next) durable: state.tmp, fsync, rename, fsync(dir); in place when full. */
static int state_store(struct spool *s, uint64_t epoch, uint64_t next, bool may_overwrite)
{
	uint8_t buf[STATE_SIZE];
	int err;
	int fd;

	state_encode(buf, epoch, next);
	fd = openat(s->dirfd, STATE_TMP_NAME, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
		    0600);
	if (fd < 0) {
		err = -errno;
		goto cleanup;
	}
	err = sysom_write_full(fd, buf, sizeof(buf));
	if (!err && fsync(fd) < 0)
		err = -errno;
	close(fd);
	if (!err && renameat(s->dirfd, STATE_TMP_NAME, s->dirfd, STATE_NAME) < 0)
		err = -errno;
	if (!err)
		return sysom_fsync_dirfd(s->dirfd);
	unlinkat(s->dirfd, STATE_TMP_NAME, 0);
cleanup:
	if ((err == -ENOSPC || err == -EDQUOT) && may_overwrite)
		err = state_store_in_place(s, buf);
	return err;
}

static int new_epoch(uint64_t *out)
{
	uint64_t e = 0;

	for (int tries = 0; tries < 8 && e == 0; tries++) {
		ssize_t n = getrandom(&e, sizeof(e), 0);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n != (ssize_t)sizeof(e))
			e = 0;
	}
	if (e == 0)
		return -EIO;
	*out = e;
	return 0;
}

static int state_init(struct spool *s)
{
	const char *reason = NULL;
	int err = state_load(s, &s->epoch, &s->next_sequence, &reason);

	if (err == 0 || (err != -ENOENT && err != -SYSOM_ECORRUPT))
		return err;
	if (err == -SYSOM_ECORRUPT) {
		/* Keep the bad file for inspection; a new epoch never repeats a sequence. */
		emit(s, SPOOL_EVENT_STATE_RESET, STATE_NAME, 0, 0, err, reason);
		move_aside(s, STATE_NAME, s->corrupt_fd);
	}
	err = new_epoch(&s->epoch);
	if (err)
		return err;
	s->next_sequence = 1;
	err = state_store(s, s->epoch, s->next_sequence, false);
	if (err)
		return err;
	if (!reason)
		emit(s, SPOOL_EVENT_STATE_CREATED, STATE_NAME, s->epoch, 0, 0,
		     "no state file: created a new agent epoch");
	return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Open: scan and recover */

/* Validates the header of batch file `name` against its name and size; fills *it. */
static int check_file(struct spool *s, const char *name, uint64_t epoch, uint64_t sequence,
		      struct spool_item *it, const char **reason)
{
	uint8_t buf[SPOOL_HEADER_MAX];
	struct spool_header h;
	struct stat st;
	ssize_t n;
	int hs;
	int err = -SYSOM_ECORRUPT;
	int fd = openat(s->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0) {
		*reason = "cannot open batch file";
		return -errno;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		*reason = "not a regular file";
		goto cleanup;
	}
	n = sysom_pread_full(fd, buf, sizeof(buf), 0);
	if (n < 0) {
		err = (int)n;
		*reason = "cannot read batch header";
		goto cleanup;
	}
	hs = spool_header_decode(buf, (size_t)n, &h, NULL);
	if (hs < 0) {
		err = hs;
		*reason = n < SPOOL_HEADER_SIZE ? "truncated header" : "invalid header";
		goto cleanup;
	}
	if (h.epoch != epoch || h.sequence != sequence) {
		*reason = "header does not match the file name";
		goto cleanup;
	}
	if ((uint64_t)st.st_size != (uint64_t)hs + h.body_len) {
		*reason = "file size does not match the body length";
		goto cleanup;
	}
	*it = (struct spool_item){ epoch, sequence, h.created_ns, h.window_end_ns,
				   (uint64_t)st.st_size, 0 };
	err = 0;
cleanup:
	close(fd);
	return err;
}

struct epoch_group {
	uint64_t epoch;
	uint64_t first_created;
	size_t begin, end; /* items[begin, end) once sorted by epoch */
};

static int cmp_by_epoch(const void *a, const void *b)
{
	const struct spool_item *x = a, *y = b;

	if (x->epoch != y->epoch)
		return x->epoch < y->epoch ? -1 : 1;
	return 0;
}

static int cmp_group(const void *a, const void *b)
{
	const struct epoch_group *x = a, *y = b;

	if (x->first_created != y->first_created)
		return x->first_created < y->first_created ? -1 : 1;
	if (x->epoch != y->epoch)
		return x->epoch < y->epoch ? -1 : 1;
	return 0;
}

/* Orders the scanned items: foreign epochs by their oldest file, the current epoch last. */
static int rank_items(struct spool *s)
{
	struct epoch_group *groups = NULL;
	size_t ngroups = 0;

	if (s->count == 0)
		return 0;
	qsort(s->items, s->count, sizeof(s->items[0]), cmp_by_epoch);
	groups = calloc(s->count, sizeof(*groups));
	if (!groups)
		return -ENOMEM;
	for (size_t i = 0; i < s->count; i++) {
		struct spool_item *it = &s->items[i];
		if (ngroups == 0 || groups[ngroups - 1].epoch != it->epoch)
			groups[ngroups++] = (struct epoch_group){ it->epoch, it->created_ns, i, i };
		struct epoch_group *g = &groups[ngroups - 1];
		if (it->created_ns < g->first_created)
			g->first_created = it->created_ns;
		g->end = i + 1;
	}
	qsort(groups, ngroups, sizeof(*groups), cmp_group);
	for (size_t g = 0; g < ngroups; g++)
		for (size_t i = groups[g].begin; i < groups[g].end; i++)
			s->items[i].rank = groups[g].epoch == s->epoch ? RANK_CURRENT : (uint32_t)g;
	free(groups);
	qsort(s->items, s->count, sizeof(s->items[0]), item_qsort_cmp);
	return 0;
}

static int scan(struct spool *s)
{
	struct dirent *de;
	int err = 0;
	bool unindexed_reported = false;
	int dfd = dup(s->dirfd);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;

	if (!d) {
		err = -errno;
		if (dfd >= 0)
			close(dfd);
		return err;
	}
	rewinddir(d);
	while ((de = readdir(d)) != NULL) {
		const char *name = de->d_name;
		const char *reason = NULL;
		struct spool_item it;
		uint64_t epoch, sequence;

		if (de->d_type == DT_DIR)
			continue;
		if (has_suffix(name, TMP_SUFFIX)) {
			/* Never renamed into place: an interrupted write. */
			int r = unlinkat(s->dirfd, name, 0) < 0 ? -errno : 0;
			s->stats.stale_tmp++;
			emit(s, SPOOL_EVENT_STALE_TMP, name, 0, 0, r,
			     "removed a temporary file left by an interrupted write");
			continue;
		}
		if (!parse_batch_name(name, &epoch, &sequence))
			continue;
		int r = check_file(s, name, epoch, sequence, &it, &reason);
		if (r == -ENOENT)
			continue; /* vanished meanwhile */
		if (r < 0 && r != -SYSOM_ECORRUPT && r != -SYSOM_EVERSION && r != -SYSOM_ELIMIT &&
		    r != -EIO) {
			err = r; /* EMFILE, ENOMEM, EACCES...: not the file's fault */
			goto cleanup;
		}
		if (r < 0) {
			move_aside(s, name, s->corrupt_fd);
			s->stats.corrupt++;
			emit(s, SPOOL_EVENT_CORRUPT, name, epoch, sequence, r, reason);
			continue;
		}
		r = item_reserve(s);
		if (r == -SYSOM_ELIMIT) {
			if (!unindexed_reported)
				emit(s, SPOOL_EVENT_UNINDEXED, name, epoch, sequence, r,
				     "too many batch files: the rest are left on disk unindexed");
			unindexed_reported = true;
			continue;
		}
		if (r < 0) {
			err = r;
			goto cleanup;
		}
		s->items[s->count++] = it;
		s->bytes += it.size;
	}
cleanup:
	closedir(d);
	return err;
}

static int open_subdir(int dirfd, const char *name)
{
	if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
		return -errno;
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	return fd < 0 ? -errno : fd;
}

int spool_open(const struct spool_options *opts, struct spool **out)
{
	struct spool *s = NULL;
	int err;

	if (!opts || !opts->dir || !opts->dir[0] || opts->max_files > SPOOL_MAX_FILES_LIMIT ||
	    opts->max_age_s > UINT64_MAX / 1000000000ull)
		return -SYSOM_ECONFIG;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->dirfd = s->corrupt_fd = s->rejected_fd = -1;
	if ((err = -pthread_mutex_init(&s->lock, NULL)) != 0) {
		free(s);
		return err;
	}
	s->max_bytes = opts->max_bytes ? opts->max_bytes : SPOOL_DEFAULT_MAX_BYTES;
	s->max_age_ns = (opts->max_age_s ? opts->max_age_s : SPOOL_DEFAULT_MAX_AGE_S) * 1000000000ull;
	s->max_files = opts->max_files ? opts->max_files : SPOOL_DEFAULT_MAX_FILES;
	s->on_event = opts->on_event;
	s->event_ctx = opts->event_ctx;
	s->now_ns = opts->now_ns ? opts->now_ns : realtime_ns;
	s->clock_ctx = opts->clock_ctx;

	if (mkdir(opts->dir, 0700) < 0 && errno != EEXIST) {
		err = -errno;
		goto cleanup;
	}
	s->dirfd = open(opts->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dirfd < 0) {
		err = -errno;
		goto cleanup;
	}
	/* Two agents on one spool would hand out the same sequences. */
	if (flock(s->dirfd, LOCK_EX | LOCK_NB) < 0) {
		err = errno == EWOULDBLOCK ? -EBUSY : -errno;
		goto cleanup;
	}
	if ((s->corrupt_fd = open_subdir(s->dirfd, CORRUPT_DIR)) < 0) {
		err = s->corrupt_fd;
		goto cleanup;
	}
	if ((s->rejected_fd = open_subdir(s->dirfd, REJECTED_DIR)) < 0) {
		err = s->rejected_fd;
		goto cleanup;
	}
	/* Removes state.tmp too, so the state is loaded after the scan. */
	err = scan(s);
	if (err)
		goto cleanup;
	err = state_init(s);
	if (err)
		goto cleanup;
	/* The epoch is known now: order the files, and never hand out a sequence at or below
	 * one on disk (defensive: the state is always written before a sequence is used). */
	uint64_t max_seq = 0;
	for (size_t i = 0; i < s->count; i++)
		if (s->items[i].epoch == s->epoch && s->items[i].sequence > max_seq)
			max_seq = s->items[i].sequence;
	err = rank_items(s);
	if (err)
		goto cleanup;
	if (max_seq >= s->next_sequence) {
		if (max_seq == UINT64_MAX) {
			err = -EOVERFLOW;
			goto cleanup;
		}
		err = state_store(s, s->epoch, max_seq + 1, true);
		if (err)
			goto cleanup;
		s->next_sequence = max_seq + 1;
	}
	enforce_age(s, s->now_ns(s->clock_ctx));
	make_room(s, 0, 0);
	*out = s;
	return 0;
cleanup:
	spool_close(s);
	return err;
}

void spool_close(struct spool *s)
{
	if (!s)
		return;
	if (s->rejected_fd >= 0)
		close(s->rejected_fd);
	if (s->corrupt_fd >= 0)
		close(s->corrupt_fd);
	if (s->dirfd >= 0)
		close(s->dirfd); /* releases the flock */
	pthread_mutex_destroy(&s->lock);
	free(s->items);
	free(s);
}

uint64_t spool_epoch(const struct spool *s)
{
	return s->epoch; /* fixed after open */
}

int spool_sequence_next(struct spool *s, uint64_t *out)
{
	int err;

	pthread_mutex_lock(&s->lock);
	if (s->next_sequence == UINT64_MAX) {
		err = -EOVERFLOW;
		goto cleanup;
	}
	err = state_store(s, s->epoch, s->next_sequence + 1, true);
	if (err)
		goto cleanup;
	*out = s->next_sequence++;
cleanup:
	pthread_mutex_unlock(&s->lock);
	return err;
}

/* ---------------------------------------------------------------------------------------- */
/* Commit, read, remove */

/* Writes header + body to the new file `tmp` and fsyncs it; removes it on failure. */
static int write_tmp(struct spool *s, const char *tmp, const uint8_t *header, const void *body,
		     size_t len)
{
	int err;
	int fd = openat(s->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);

	if (fd < 0)
		return -errno;
	err = sysom_write_full(fd, header, SPOOL_HEADER_SIZE);
	if (!err)
		err = sysom_write_full(fd, body, len);
	if (!err && fsync(fd) < 0)
		err = -errno;
	if (close(fd) < 0 && !err && errno != EINTR)
		err = -errno;
	if (err)
		unlinkat(s->dirfd, tmp, 0);
	return err;
}

int spool_batch_commit(struct spool *s, uint64_t sequence, uint64_t window_end_ns,
		       const void *body, size_t len)
{
	uint8_t header[SPOOL_HEADER_SIZE];
	char name[NAME_SIZE], tmp[NAME_SIZE];
	struct spool_header h;
	struct spool_item it;
	uint64_t size = (uint64_t)SPOOL_HEADER_SIZE + len;
	bool reserved = false;
	int err = 0;

	if (!body && len)
		return -EINVAL;
	if (len > SPOOL_MAX_BODY)
		return -SYSOM_ELIMIT;
	pthread_mutex_lock(&s->lock);
	if (sequence == 0 || sequence >= s->next_sequence) {
		err = -EINVAL;
		goto cleanup;
	}
	if (item_find(s, s->epoch, sequence) != SIZE_MAX) {
		err = -EEXIST;
		goto cleanup;
	}
	if (size > s->max_bytes) {
		err = -SYSOM_ELIMIT;
		goto cleanup;
	}
	err = item_reserve(s);
	if (err)
		goto cleanup;
	h = (struct spool_header){ .epoch = s->epoch, .sequence = sequence,
				   .window_end_ns = window_end_ns,
				   .created_ns = s->now_ns(s->clock_ctx), .body_len = len };
	enforce_age(s, h.created_ns);
	if (!make_room(s, size, 1)) {
		err = -SYSOM_ELIMIT; /* other commits in flight hold the room */
		goto cleanup;
	}
	s->reserved_bytes += size;
	s->reserved_files++;
	reserved = true;
	pthread_mutex_unlock(&s->lock);

	/* The slow part (hashing, writing, fsync) runs unlocked: the uploader keeps going. */
	h.body_hash = XXH64(len ? body : "", len, 0);
	spool_header_encode(&h, header);
	batch_name(name, h.epoch, sequence, false);
	batch_name(tmp, h.epoch, sequence, true);
	err = write_tmp(s, tmp, header, body, len);

	pthread_mutex_lock(&s->lock);
	if (err)
		goto cleanup;
	err = item_reserve(s); /* concurrent commits may have used the slot reserved above */
	if (err) {
		unlinkat(s->dirfd, tmp, 0);
		goto cleanup;
	}
	if (renameat(s->dirfd, tmp, s->dirfd, name) < 0) {
		err = -errno;
		unlinkat(s->dirfd, tmp, 0);
		goto cleanup;
	}
	err = sysom_fsync_dirfd(s->dirfd);
	if (err) {
		/* Not known to be durable: do not claim it (the caller keeps the batch). */
		unlinkat(s->dirfd, name, 0);
		goto cleanup;
	}
	it = (struct spool_item){ h.epoch, sequence, h.created_ns, window_end_ns, size,
				  RANK_CURRENT };
	item_insert(s, &it);
	s->stats.commits++;
cleanup:
	if (reserved) {
		s->reserved_bytes -= size;
		s->reserved_files--;
	}
	if (err)
		s->stats.commit_errors++;
	pthread_mutex_unlock(&s->lock);
	return err;
}

/* Reads and verifies the whole file behind `fd` for item `it`. */
static int read_batch(int fd, const struct spool_item *it, struct spool_batch *out,
		      const char **reason)
{
	uint8_t hbuf[SPOOL_HEADER_MAX];
	struct spool_header h;
	struct stat st;
	uint8_t *body = NULL;
	ssize_t n;
	int hs;
	int err = -SYSOM_ECORRUPT;

	if (fstat(fd, &st) < 0) {
		*reason = "cannot stat batch file";
		return -errno;
	}
	if ((uint64_t)st.st_size != it->size) {
		*reason = "file size changed since it was indexed";
		goto cleanup;
	}
	n = sysom_pread_full(fd, hbuf, (size_t)st.st_size < sizeof(hbuf) ? (size_t)st.st_size :
				   sizeof(hbuf), 0);
	if (n < 0) {
		err = (int)n;
		*reason = "cannot read batch header";
		goto cleanup;
	}
	hs = spool_header_decode(hbuf, (size_t)n, &h, NULL);
	if (hs < 0) {
		err = hs;
		*reason = "invalid header";
		goto cleanup;
	}
	if (h.epoch != it->epoch || h.sequence != it->sequence ||
	    (uint64_t)hs + h.body_len != it->size) {
		*reason = "header does not match the file name or size";
		goto cleanup;
	}
	body = malloc(h.body_len ? h.body_len : 1);
	if (!body) {
		err = -ENOMEM;
		*reason = "out of memory";
		goto cleanup;
	}
	n = sysom_pread_full(fd, body, h.body_len, hs);
	if (n < 0 || (uint64_t)n != h.body_len) {
		err = n < 0 ? (int)n : -SYSOM_ECORRUPT;
		*reason = "cannot read batch body";
		goto cleanup;
	}
	if (XXH64(body, h.body_len, 0) != h.body_hash) {
		*reason = "body checksum mismatch";
		goto cleanup;
	}
	*out = (struct spool_batch){ h.epoch, h.sequence, h.window_end_ns, h.created_ns, body,
				     h.body_len };
	return 0;
cleanup:
	free(body);
	return err;
}

int spool_batch_oldest(struct spool *s, struct spool_batch *out)
{
	for (;;) {
		struct spool_item it;
		char name[NAME_SIZE];
		const char *reason = NULL;
		int fd, err;

		pthread_mutex_lock(&s->lock);
		s->pinned = false; /* one pin at a time: the reader is done with the last batch */
		enforce_age(s, s->now_ns(s->clock_ctx));
		if (s->count == 0) {
			pthread_mutex_unlock(&s->lock);
			return -ENOENT;
		}
		it = s->items[0];
		batch_name(name, it.epoch, it.sequence, false);
		fd = openat(s->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0) {
			err = -errno;
			if (err == -ENOENT || err == -ELOOP) {
				quarantine_item(s, 0, err, "batch file vanished or was replaced");
				pthread_mutex_unlock(&s->lock);
				continue;
			}
			pthread_mutex_unlock(&s->lock);
			return err;
		}
		/* Pinned from here: the limits leave it alone while it is read and delivered. */
		s->pinned = true;
		s->pin_epoch = it.epoch;
		s->pin_sequence = it.sequence;
		pthread_mutex_unlock(&s->lock);

		/* Read unlocked: the pin keeps the limits from deleting it meanwhile. */
		err = read_batch(fd, &it, out, &reason);
		close(fd);
		if (err == 0)
			return 0;

		pthread_mutex_lock(&s->lock);
		s->pinned = false;
		size_t i = item_find(s, it.epoch, it.sequence);
		/* Corrupt or unreadable (EIO): set it aside so it cannot block the spool. */
		if (i != SIZE_MAX && err != -ENOMEM)
			quarantine_item(s, i, err, reason);
		pthread_mutex_unlock(&s->lock);
		if (err == -ENOMEM)
			return err;
	}
}

void spool_batch_release(struct spool_batch *b)
{
	if (!b)
		return;
	free(b->body);
	b->body = NULL;
	b->body_len = 0;
}

/* Takes a batch out of the spool once the server answered: deleted when it was stored
 * (`rejected` false), moved aside to REJECTED_DIR when it was refused. 0 or -errno. */
static int batch_retire(struct spool *s, uint64_t epoch, uint64_t sequence, bool rejected)
{
	char name[NAME_SIZE];
	int err = 0;

	pthread_mutex_lock(&s->lock);
	size_t i = item_find(s, epoch, sequence);
	if (i == SIZE_MAX) {
		err = -ENOENT;
		goto cleanup;
	}
	batch_name(name, epoch, sequence, false);
	if (rejected)
		err = move_aside(s, name, s->rejected_fd);
	else if (unlinkat(s->dirfd, name, 0) < 0 && errno != ENOENT)
		err = -errno;
	if (err)
		goto cleanup;
	item_delete(s, i);
	if (rejected) {
		s->stats.rejected++;
		emit(s, SPOOL_EVENT_REJECTED, name, epoch, sequence, 0,
		     "server rejected the batch: moved to " REJECTED_DIR "/");
	} else {
		/* Not required for correctness (a resurrected file is re-sent and de-duplicated by
		 * its idempotency key), but keeps replays after a crash to a minimum. */
		sysom_fsync_dirfd(s->dirfd);
	}
cleanup:
	pthread_mutex_unlock(&s->lock);
	return err;
}

int spool_batch_remove(struct spool *s, uint64_t epoch, uint64_t sequence)
{
	return batch_retire(s, epoch, sequence, false);
}

int spool_batch_reject(struct spool *s, uint64_t epoch, uint64_t sequence)
{
	return batch_retire(s, epoch, sequence, true);
}

void spool_batch_unpin(struct spool *s, uint64_t epoch, uint64_t sequence)
{
	pthread_mutex_lock(&s->lock);
	if (s->pinned && s->pin_epoch == epoch && s->pin_sequence == sequence)
		s->pinned = false;
	pthread_mutex_unlock(&s->lock);
}

void spool_stats(struct spool *s, struct spool_stats *out)
{
	pthread_mutex_lock(&s->lock);
	*out = s->stats;
	out->files = s->count;
	out->bytes = s->bytes;
	pthread_mutex_unlock(&s->lock);
}
