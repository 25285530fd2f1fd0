/* SPDX-License-Identifier: Apache-2.0 */
/* Spool: header codec, replay after restart, crash leftovers, corruption, limits, full disk. */
#include <dirent.h>
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
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "agent/ship/spool.h"
#include "common/bytes.h"
#include "common/error.h"
#include "tests/support/batch_fixture.h"

#define NS 1000000000ull
#define T0 (1700000000ull * NS)

struct fixture {
	char dir[256];         /* the spool directory */
	char base[96];         /* mkdtemp directory holding it */
	uint64_t now;          /* fake wall clock */
	unsigned events[16];   /* per spool_event_kind */
	uint64_t last_sequence[16];
	char last_detail[16][128];
};

static uint64_t fake_now(void *ctx)
{
	return ((struct fixture *)ctx)->now;
}

static void on_event(void *ctx, const struct spool_event *ev)
{
	struct fixture *f = ctx;

	/* No cmocka asserts: events may come from another thread. */
	if (ev->kind <= 0 || ev->kind >= 16)
		return;
	f->events[ev->kind]++;
	f->last_sequence[ev->kind] = ev->sequence;
	snprintf(f->last_detail[ev->kind], sizeof(f->last_detail[0]), "%s", ev->detail);
}

static struct spool_options options(struct fixture *f)
{
	return (struct spool_options){ .dir = f->dir, .on_event = on_event, .event_ctx = f,
				       .now_ns = fake_now, .clock_ctx = f };
}

static struct spool *open_spool(const struct spool_options *o)
{
	struct spool *s = NULL;

	assert_int_equal(spool_open(o, &s), 0);
	assert_non_null(s);
	return s;
}

static void fill_body(uint8_t *buf, size_t len, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = (uint8_t)x;
	}
}

/* Reserves a sequence and commits a body of `len` pseudo-random bytes derived from it. */
static uint64_t commit_one(struct spool *s, size_t len)
{
	uint8_t *body = malloc(len ? len : 1);
	uint64_t seq;

	assert_non_null(body);
	assert_int_equal(spool_sequence_next(s, &seq), 0);
	fill_body(body, len, (uint32_t)seq);
	assert_int_equal(spool_batch_commit(s, seq, T0 + seq * 30 * NS, body, len), 0);
	free(body);
	return seq;
}

/* Checks that the oldest batch is `seq` with the body commit_one wrote, and unpins it. */
static void expect_oldest(struct spool *s, uint64_t epoch, uint64_t seq, size_t len)
{
	struct spool_batch b = { 0 };
	uint8_t *want = malloc(len ? len : 1);

	assert_non_null(want);
	fill_body(want, len, (uint32_t)seq);
	assert_int_equal(spool_batch_oldest(s, &b), 0);
	assert_int_equal(b.epoch, epoch);
	assert_int_equal(b.sequence, seq);
	assert_int_equal(b.window_end_ns, T0 + seq * 30 * NS);
	assert_int_equal(b.body_len, len);
	assert_memory_equal(b.body, want, len);
	spool_batch_unpin(s, b.epoch, b.sequence);
	spool_batch_release(&b);
	assert_null(b.body);
	free(want);
}

static void batch_path(const struct fixture *f, uint64_t epoch, uint64_t seq, char *out,
		       size_t outlen)
{
	snprintf(out, outlen, "%s/%016" PRIx64 "-%020" PRIu64 ".batch", f->dir, epoch, seq);
}

static size_t count_files(const char *dir, const char *suffix)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t n = 0;

	assert_non_null(d);
	while ((de = readdir(d)) != NULL) {
		size_t len = strlen(de->d_name), k = strlen(suffix);
		if (de->d_name[0] != '.' && de->d_type == DT_REG && len >= k &&
		    strcmp(de->d_name + len - k, suffix) == 0)
			n++;
	}
	closedir(d);
	return n;
}

static void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	snprintf(f->base, sizeof(f->base), "/tmp/sysom-spool-test-XXXXXX");
	if (!mkdtemp(f->base))
		return -1;
	snprintf(f->dir, sizeof(f->dir), "%s/spool", f->base);
	f->now = T0;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char mnt[192];

	/* A failed full-disk test may have left its tmpfs mounted. */
	snprintf(mnt, sizeof(mnt), "%s/tmpfs", f->base);
	umount2(mnt, MNT_DETACH);
	fixture_tmpdir_remove(f->base);
	free(f);
	return 0;
}

/* ---------------------------------------------------------------------------------------- */

static void test_header_roundtrip_and_rejects(void **state)
{
	struct spool_header h = { .epoch = 0x1122334455667788ull, .sequence = 42,
				  .window_end_ns = T0, .created_ns = T0 + 5, .body_len = 1234,
				  .body_hash = 0xdeadbeefcafef00dull };
	struct spool_header got;
	uint8_t buf[SPOOL_HEADER_SIZE], bad[SPOOL_HEADER_SIZE];
	size_t where = 999;

	(void)state;
	spool_header_encode(&h, buf);
	assert_memory_equal(buf, "SYSP", 4);
	assert_int_equal(spool_header_decode(buf, sizeof(buf), &got, &where), SPOOL_HEADER_SIZE);
	assert_int_equal(got.version, SPOOL_VERSION);
	assert_int_equal(got.header_size, SPOOL_HEADER_SIZE);
	assert_int_equal(got.epoch, h.epoch);
	assert_int_equal(got.sequence, 42);
	assert_int_equal(got.window_end_ns, T0);
	assert_int_equal(got.created_ns, T0 + 5);
	assert_int_equal(got.body_len, 1234);
	assert_int_equal(got.body_hash, h.body_hash);

	/* A longer header (fields a later minor version adds) is accepted, its extra bytes
	 * skipped; the checksum is its last 8 bytes. */
	uint8_t longer[96];
	memset(longer, 0xee, sizeof(longer));
	memcpy(longer, buf, 56);
	store_le16(longer + 6, sizeof(longer));
	store_le64(longer + 88, XXH64(longer, 88, 0));
	assert_int_equal(spool_header_decode(longer, sizeof(longer), &got, NULL), 96);
	assert_int_equal(got.header_size, 96);
	assert_int_equal(got.body_hash, h.body_hash);
	assert_int_equal(spool_header_decode(longer, 95, &got, &where), -SYSOM_ECORRUPT);
	assert_int_equal(where, 6);

	/* Every truncation is refused. */
	for (size_t len = 0; len < sizeof(buf); len++)
		assert_int_equal(spool_header_decode(buf, len, &got, NULL), -SYSOM_ECORRUPT);
	assert_int_equal(spool_header_decode(NULL, 0, &got, &where), -SYSOM_ECORRUPT);

	/* Any flipped bit is caught (magic, version, size, checksum). */
	for (size_t i = 0; i < sizeof(buf); i++) {
		memcpy(bad, buf, sizeof(buf));
		bad[i] ^= 0x10;
		int r = spool_header_decode(bad, sizeof(bad), &got, &where);
		assert_true(r == -SYSOM_ECORRUPT || r == -SYSOM_EVERSION);
		assert_true(where < sizeof(buf));
	}
	memcpy(bad, buf, sizeof(buf));
	bad[4] = 2;
	assert_int_equal(spool_header_decode(bad, sizeof(bad), &got, &where), -SYSOM_EVERSION);
	assert_int_equal(where, 4);

	/* Valid checksum but out-of-range fields. */
	h.sequence = 0;
	spool_header_encode(&h, bad);
	assert_int_equal(spool_header_decode(bad, sizeof(bad), &got, &where), -SYSOM_ECORRUPT);
	assert_int_equal(where, 16);
	h.sequence = 1;
	h.body_len = (uint64_t)SPOOL_MAX_BODY + 1;
	spool_header_encode(&h, bad);
	assert_int_equal(spool_header_decode(bad, sizeof(bad), &got, &where), -SYSOM_ELIMIT);
	assert_int_equal(where, 40);
}

static void test_commit_replay_across_reopen(void **state)
{
	struct fixture *f = *state;
	struct spool_options o = options(f);
	struct spool_batch b;
	struct spool_stats st;
	struct spool *s = open_spool(&o);
	uint64_t epoch = spool_epoch(s);

	assert_int_equal(f->events[SPOOL_EVENT_STATE_CREATED], 1);
	assert_int_not_equal(epoch, 0);
	/* Crash between write and upload: committed, never removed. */
	uint64_t s1 = commit_one(s, 10000);
	uint64_t s2 = commit_one(s, 0);
	assert_true(s2 > s1);
	spool_close(s);

	s = open_spool(&o);
	assert_int_equal(spool_epoch(s), epoch);
	assert_int_equal(f->events[SPOOL_EVENT_STATE_CREATED], 1);
	spool_stats(s, &st);
	assert_int_equal(st.files, 2);
	assert_int_equal(st.bytes, 2 * SPOOL_HEADER_SIZE + 10000);
	expect_oldest(s, epoch, s1, 10000);
	/* Reading does not consume: still there until removed. */
	expect_oldest(s, epoch, s1, 10000);
	assert_int_equal(spool_batch_remove(s, epoch, s1), 0);
	assert_int_equal(spool_batch_remove(s, epoch, s1), -ENOENT);
	expect_oldest(s, epoch, s2, 0);
	assert_int_equal(spool_batch_remove(s, epoch, s2), 0);
	assert_int_equal(spool_batch_oldest(s, &b), -ENOENT);
	spool_close(s);

	s = open_spool(&o);
	assert_int_equal(spool_batch_oldest(s, &b), -ENOENT);
	spool_stats(s, &st);
	assert_int_equal(st.files, 0);
	assert_int_equal(st.corrupt, 0);
	spool_close(s);
}

static void test_commit_argument_checks(void **state)
{
	struct fixture *f = *state;
	struct spool_options o = options(f);
	uint8_t body[2000] = { 0 };
	uint64_t seq;

	o.max_bytes = 1000;
	struct spool *s = open_spool(&o);
	assert_int_equal(spool_sequence_next(s, &seq), 0);
	/* Sequences must have been reserved. */
	assert_int_equal(spool_batch_commit(s, 0, T0, body, 10), -EINVAL);
	assert_int_equal(spool_batch_commit(s, seq + 1, T0, body, 10), -EINVAL);
	assert_int_equal(spool_batch_commit(s, seq, T0, NULL, 10), -EINVAL);
	/* Larger than the whole spool. */
	assert_int_equal(spool_batch_commit(s, seq, T0, body, sizeof(body)), -SYSOM_ELIMIT);
	assert_int_equal(spool_batch_commit(s, seq, T0, body, 10), 0);
	assert_int_equal(spool_batch_commit(s, seq, T0, body, 10), -EEXIST);
	assert_int_equal(count_files(f->dir, ".tmp"), 0);

	/* One spool per directory: a second agent would reuse sequences. */
	struct spool *other = NULL;
	assert_int_equal(spool_open(&o, &other), -EBUSY);
	assert_null(other);
	spool_close(s);
	s = open_spool(&o);
	spool_close(s);

	struct spool_options bad = o;
	bad.max_files = SPOOL_MAX_FILES_LIMIT + 1;
	assert_int_equal(spool_open(&bad, &other), -SYSOM_ECONFIG);
	bad = o;
	bad.dir = NULL;
	assert_int_equal(spool_open(&bad, &other), -SYSOM_ECONFIG);
}

static void test_stale_tmp_removed(void **state)
{
	struct fixture *f = *state;
	struct spool_options o = options(f);
	struct spool_batch b;
	struct spool_stats st;
	char path[512];
	uint8_t partial[SPOOL_HEADER_SIZE + 100];
	struct spool *s = open_spool(&o);
	uint64_t epoch = spool_epoch(s);
	uint64_t s1 = commit_one(s, 500);
	uint64_t s2;

	assert_int_equal(spool_sequence_next(s, &s2), 0);
	spool_close(s);

	/* What a crash in the middle of committing s2 leaves: a *.tmp with a valid header and
	 * half a body, and an interrupted state update. */
	struct spool_header h = { .epoch = epoch, .sequence = s2, .created_ns = T0,
				  .body_len = 200 };
	spool_header_encode(&h, partial);
	memset(partial + SPOOL_HEADER_SIZE, 0xab, 100);
	batch_path(f, epoch, s2, path, sizeof(path));
	strcat(path, ".tmp");
	write_file(path, partial, sizeof(partial));
	snprintf(path, sizeof(path), "%s/state.tmp", f->dir);
	write_file(path, "garbage", 7);
	assert_int_equal(count_files(f->dir, ".tmp"), 2);

	s = open_spool(&o);
	assert_int_equal(f->events[SPOOL_EVENT_STALE_TMP], 2);
	assert_int_equal(count_files(f->dir, ".tmp"), 0);
	assert_int_equal(spool_epoch(s), epoch);
	spool_stats(s, &st);
	assert_int_equal(st.stale_tmp, 2);
	assert_int_equal(st.files, 1);
	expect_oldest(s, epoch, s1, 500);
	assert_int_equal(spool_batch_remove(s, epoch, s1), 0);
	assert_int_equal(spool_batch_oldest(s, &b), -ENOENT);
	/* s2 was reserved before the crash: it is never handed out again. */
	uint64_t s3;
	assert_int_equal(spool_sequence_next(s, &s3), 0);
	assert_true(s3 > s2);
	spool_close(s);
}

static void flip_byte(const char *path, off_t off)
{
	uint8_t c;
	int fd = open(path, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &c, 1, off), 1);
	c ^= 0x5a;
	assert_int_equal(pwrite(fd, &c, 1, off), 1);
	close(fd);
}

static void test_corrupt_files_quarantined(void **state)
{
	struct fixture *f = *state;
	struct spool_options o = options(f);
	struct spool_batch b;
	struct spool_stats st;
	char path[512], corrupt[300];
	struct spool *s = open_spool(&o);
	uint64_t epoch = spool_epoch(s);
	uint64_t seq[6];

	for (int i = 0; i < 6; i++)
		seq[i] = commit_one(s, 300);
	spool_close(s);

	batch_path(f, epoch, seq[1], path, sizeof(path));
	flip_byte(path, SPOOL_HEADER_SIZE + 150); /* body byte */
	batch_path(f, epoch, seq[2], path, sizeof(path));
	assert_int_equal(truncate(path, 20), 0); /* header cut short */
	batch_path(f, epoch, seq[3], path, sizeof(path));
	flip_byte(path, 9); /* epoch byte: header checksum */
	batch_path(f, epoch, seq[4], path, sizeof(path));
	assert_int_equal(truncate(path, SPOOL_HEADER_SIZE + 299), 0); /* body cut short */

	s = open_spool(&o);
	/* Headers and sizes are checked at open... */
	assert_int_equal(f->events[SPOOL_EVENT_CORRUPT], 3);
	spool_stats(s, &st);
	assert_int_equal(st.files, 3);
	assert_int_equal(st.corrupt, 3);
	/* ...bodies when read; the good ones are still served, in order. */
	expect_oldest(s, epoch, seq[0], 300);
	assert_int_equal(spool_batch_remove(s, epoch, seq[0]), 0);
	expect_oldest(s, epoch, seq[5], 300);
	assert_int_equal(f->events[SPOOL_EVENT_CORRUPT], 4);
	assert_int_equal(f->last_sequence[SPOOL_EVENT_CORRUPT], seq[1]);
	assert_string_equal(f->last_detail[SPOOL_EVENT_CORRUPT], "body checksum mismatch");
	assert_int_equal(spool_batch_remove(s, epoch, seq[5]), 0);
	assert_int_equal(spool_batch_oldest(s, &b), -ENOENT);
	spool_stats(s, &st);
	assert_int_equal(st.corrupt, 4);
	spool_close(s);

	snprintf(corrupt, sizeof(corrupt), "%s/corrupt", f->dir);
	assert_int_equal(count_files(corrupt, ".batch"), 4);
	assert_int_equal(count_files(f->dir, ".batch"), 0);

	/* Quarantine keeps at most SPOOL_KEEP_QUARANTINED files. */
	s = open_spool(&o);
	for (int i = 0; i < 20; i++) {
		uint64_t q = commit_one(s, 10);
		batch_path(f, epoch, q, path, sizeof(path));
		flip_byte(path, SPOOL_HEADER_SIZE + 5);
	}
	assert_int_equal(spool_batch_oldest(s, &b), -ENOENT);
	assert_int_equal(f->events[SPOOL_EVENT_CORRUPT], 24);
	spool_close(s);
	assert_int_equal(count_files(corrupt, ".batch"), SPOOL_KEEP_QUARANTINED);
}

static void test_sequence_survives_restart(void **state)
{
	struct fixture *f = *state;
	struct spool_options o = options(f);
	uint64_t last = 0, seq, epoch = 0;
	char path[512];

	for (int round = 0; round < 5; round++) {
		struct spool *s = open_spool(&o);
		if (round == 0)
			epoch = spool_epoch(s);
		assert_int_equal(spool_epoch(s), epoch);
		for (int i = 0; i < 3; i++) {
			assert_int_equal(spool_sequence_next(s, &seq), 0);
			assert_true(seq > last);
			last = seq;
		}
		/* The spool stays empty: only the state file remembers. */
		spool_close(s);
	}
	assert_int_equal(count_files(f->dir, ".batch"), 0);

	/* A damaged state file cannot be trusted: a new epoch, so no (epoch, sequence) repeats. */
	snprintf(path, sizeof(path), "%s/state", f->dir);
	flip_byte(path, 17);
	struct spool *s = open_spool(&o);
	assert_int_equal(f->events[SPOOL_EVENT_STATE_RESET], 1);
	assert_int_not_equal(spool_epoch(s), epoch);
	spool_close(s);
	snprintf(path, sizeof(path), "%s/corrupt/state", f->dir);
	assert_int_equal(access(path, F_OK), 0);
}

static void test_foreign_epoch_delivered_first(void **state)
{
	struct fixture *f = *state;
	struct spool_options o = options(f);
	char path[512];
	struct spool *s = open_spool(&o);
	uint64_t old_epoch = spool_epoch(s);
	uint64_t a = commit_one(s, 100);
	uint64_t b = commit_one(s, 100);

	spool_close(s);
	/* The state file is lost: the files of the old epoch must still be delivered, first. */
	snprintf(path, sizeof(path), "%s/state", f->dir);
	assert_int_equal(unlink(path), 0);
	f->now += NS;
	s = open_spool(&o);
	uint64_t epoch = spool_epoch(s);
	assert_int_not_equal(epoch, old_epoch);
	uint64_t c = commit_one(s, 100);
	assert_int_equal(c, 1);
	expect_oldest(s, old_epoch, a, 100);
	assert_int_equal(spool_batch_remove(s, old_epoch, a), 0);
	expect_oldest(s, old_epoch, b, 100);
	assert_int_equal(spool_batch_remove(s, old_epoch, b), 0);
	expect_oldest(s, epoch, c, 100);
	spool_close(s);
}

static void test_size_limit_drops_oldest(void **state)
{
	struct fixture *f = *state;
	struct spool_options o = options(f);
	struct spool_stats st;
	uint64_t seq[6];

	o.max_bytes = 3 * (SPOOL_HEADER_SIZE + 1000);
	struct spool *s = open_spool(&o);
	uint64_t epoch = spool_epoch(s);
	for (int i = 0; i < 5; i++)
		seq[i] = commit_one(s, 1000);
	spool_stats(s, &st);
	assert_int_equal(st.files, 3);
	assert_int_equal(st.bytes, o.max_bytes);
	assert_int_equal(st.dropped_full, 2);
	assert_int_equal(f->events[SPOOL_EVENT_DROPPED_FULL], 2);
	assert_int_equal(f->last_sequence[SPOOL_EVENT_DROPPED_FULL], seq[1]);
	expect_oldest(s, epoch, seq[2], 1000);
	assert_int_equal(count_files(f->dir, ".batch"), 3);
	/* A bigger batch pushes out as many as needed. */
	seq[5] = commit_one(s, 2000);
	spool_stats(s, &st);
	assert_int_equal(st.files, 2);
	assert_int_equal(st.dropped_full, 4);
	expect_oldest(s, epoch, seq[4], 1000);
	spool_close(s);

	/* A lower limit at the next open applies at once; so does the file-count limit. */
	o.max_bytes = 0;
	o.max_files = 1;
	s = open_spool(&o);
	spool_stats(s, &st);
	assert_int_equal(st.files, 1);
	assert_int_equal(st.dropped_full, 1);
	expect_oldest(s, epoch, seq[5], 2000);
	seq[0] = commit_one(s, 10);
	expect_oldest(s, epoch, seq[0], 10);
	spool_close(s);
}

/* The batch handed out for delivery is pinned: neither limit deletes it (so it is never both
 * delivered and counted as dropped); newer batches go in its place. */
static void test_pinned_batch_not_dropped(void **state)
{
	struct fixture *f = *state;
	struct spool_options o = options(f);
	struct spool_batch b;
	struct spool_stats st;
	uint64_t seq[6];

	o.max_bytes = 3 * (SPOOL_HEADER_SIZE + 1000);
	o.max_age_s = 3600;
	struct spool *s = open_spool(&o);
	uint64_t epoch = spool_epoch(s);
	for (int i = 0; i < 3; i++)
		seq[i] = commit_one(s, 1000);
	assert_int_equal(spool_batch_oldest(s, &b), 0);
	assert_int_equal(b.sequence, seq[0]);

	/* Full: the commits delete the batches after the pinned one, oldest first. */
	seq[3] = commit_one(s, 1000);
	seq[4] = commit_one(s, 1000);
	spool_stats(s, &st);
	assert_int_equal(st.files, 3);
	assert_int_equal(st.bytes, o.max_bytes);
	assert_int_equal(st.dropped_full, 2);
	assert_int_equal(f->last_sequence[SPOOL_EVENT_DROPPED_FULL], seq[2]);
	/* Past the age limit while pinned: kept; the other old ones go. */
	f->now += 3601 * NS;
	seq[5] = commit_one(s, 1000);
	spool_stats(s, &st);
	assert_int_equal(st.dropped_age, 2);
	assert_int_equal(st.files, 2);
	/* One that cannot fit beside the pinned batch even alone: refused, nothing deleted in
	 * vain. One that fits once the others are gone: they are deleted. */
	uint8_t big[2 * 1000 + SPOOL_HEADER_SIZE + 1] = { 0 };
	uint64_t extra;
	assert_int_equal(spool_sequence_next(s, &extra), 0);
	assert_int_equal(spool_batch_commit(s, extra, 0, big, sizeof(big)), -SYSOM_ELIMIT);
	spool_stats(s, &st);
	assert_int_equal(st.dropped_full, 2);
	assert_int_equal(st.files, 2);
	assert_int_equal(spool_batch_commit(s, extra, 0, big, sizeof(big) - 1), 0);
	spool_stats(s, &st);
	assert_int_equal(st.dropped_full, 3);
	assert_int_equal(f->last_sequence[SPOOL_EVENT_DROPPED_FULL], seq[5]);
	assert_int_equal(st.files, 2);
	assert_int_equal(st.bytes, o.max_bytes);
	/* Delivered: removed, and counted only as that. */
	assert_int_equal(spool_batch_remove(s, epoch, seq[0]), 0);
	spool_batch_release(&b);
	assert_int_equal(spool_batch_remove(s, epoch, extra), 0);
	spool_stats(s, &st);
	assert_int_equal(st.files, 0);
	assert_int_equal(st.dropped_full + st.dropped_age, 5);

	/* Unpinned (the reader waits before its next attempt): the limits may take it again. */
	seq[0] = commit_one(s, 1000);
	seq[1] = commit_one(s, 1000);
	seq[2] = commit_one(s, 1000);
	assert_int_equal(spool_batch_oldest(s, &b), 0);
	assert_int_equal(b.sequence, seq[0]);
	spool_batch_unpin(s, epoch, seq[1]); /* not the pinned one: no effect */
	seq[3] = commit_one(s, 1000);
	spool_stats(s, &st);
	assert_int_equal(f->last_sequence[SPOOL_EVENT_DROPPED_FULL], seq[1]);
	spool_batch_unpin(s, b.epoch, b.sequence);
	spool_batch_release(&b);
	seq[4] = commit_one(s, 1000);
	assert_int_equal(f->last_sequence[SPOOL_EVENT_DROPPED_FULL], seq[0]);
	/* A new read ends the previous pin too. */
	assert_int_equal(spool_batch_oldest(s, &b), 0);
	assert_int_equal(b.sequence, seq[2]);
	spool_batch_release(&b);
	assert_int_equal(spool_batch_oldest(s, &b), 0);
	assert_int_equal(b.sequence, seq[2]);
	spool_batch_release(&b);
	spool_stats(s, &st);
	assert_int_equal(st.dropped_full, 5);
	assert_int_equal(st.files, 3);
	spool_close(s);
}

static void test_age_limit_drops_old(void **state)
{
	struct fixture *f = *state;
	struct spool_options o = options(f);
	struct spool_batch b;
	struct spool_stats st;

	o.max_age_s = 3600;
	struct spool *s = open_spool(&o);
	uint64_t epoch = spool_epoch(s);
	uint64_t a = commit_one(s, 100);
	f->now += 1800 * NS;
	uint64_t c = commit_one(s, 100);
	f->now += 1801 * NS; /* a is 3601 s old, c 1801 s */
	expect_oldest(s, epoch, c, 100);
	spool_stats(s, &st);
	assert_int_equal(st.dropped_age, 1);
	assert_int_equal(st.files, 1);
	assert_int_equal(f->last_sequence[SPOOL_EVENT_DROPPED_AGE], a);
	spool_close(s);

	/* Expired while the agent was down: dropped at open. */
	f->now += 1800 * NS;
	s = open_spool(&o);
	spool_stats(s, &st);
	assert_int_equal(st.dropped_age, 1);
	assert_int_equal(st.files, 0);
	assert_int_equal(spool_batch_oldest(s, &b), -ENOENT);
	assert_int_equal(count_files(f->dir, ".batch"), 0);
	spool_close(s);
}

static void test_reject_keeps_newest(void **state)
{
	struct fixture *f = *state;
	struct spool_options o = options(f);
	struct spool_batch b;
	struct spool_stats st;
	char dir[300], path[400];
	struct spool *s = open_spool(&o);
	uint64_t epoch = spool_epoch(s);
	uint64_t last = 0;

	for (int i = 0; i < SPOOL_KEEP_QUARANTINED + 4; i++) {
		last = commit_one(s, 50);
		assert_int_equal(spool_batch_reject(s, epoch, last), 0);
	}
	assert_int_equal(spool_batch_reject(s, epoch, last), -ENOENT);
	assert_int_equal(spool_batch_oldest(s, &b), -ENOENT);
	spool_stats(s, &st);
	assert_int_equal(st.rejected, SPOOL_KEEP_QUARANTINED + 4);
	assert_int_equal(f->events[SPOOL_EVENT_REJECTED], SPOOL_KEEP_QUARANTINED + 4);
	spool_close(s);
	snprintf(dir, sizeof(dir), "%s/rejected", f->dir);
	assert_int_equal(count_files(dir, ".batch"), SPOOL_KEEP_QUARANTINED);
	/* The newest is among those kept. */
	snprintf(path, sizeof(path), "%s/%016" PRIx64 "-%020" PRIu64 ".batch", dir, epoch, last);
	assert_int_equal(access(path, F_OK), 0);
}

struct concurrent {
	struct spool *spool;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t committed;
};

static void *committer(void *arg)
{
	struct concurrent *c = arg;

	for (int i = 0; i < 200; i++) {
		commit_one(c->spool, 64 + (size_t)i);
		pthread_mutex_lock(&c->lock);
		c->committed++;
		pthread_cond_signal(&c->cond);
		pthread_mutex_unlock(&c->lock);
	}
	return NULL;
}

static void test_concurrent_commit_and_consume(void **state)
{
	struct fixture *f = *state;
	struct spool_options o = options(f);
	struct concurrent c = { .spool = open_spool(&o) };
	pthread_t t;
	uint64_t expect = 1, consumed = 0;

	pthread_mutex_init(&c.lock, NULL);
	pthread_cond_init(&c.cond, NULL);
	assert_int_equal(pthread_create(&t, NULL, committer, &c), 0);
	while (consumed < 200) {
		struct spool_batch b;
		int r = spool_batch_oldest(c.spool, &b);
		if (r == -ENOENT) {
			pthread_mutex_lock(&c.lock);
			while (c.committed <= consumed)
				pthread_cond_wait(&c.cond, &c.lock);
			pthread_mutex_unlock(&c.lock);
			continue;
		}
		assert_int_equal(r, 0);
		assert_int_equal(b.sequence, expect);
		assert_int_equal(b.body_len, 64 + expect - 1);
		assert_int_equal(spool_batch_remove(c.spool, b.epoch, b.sequence), 0);
		spool_batch_release(&b);
		expect++;
		consumed++;
	}
	pthread_join(t, NULL);
	struct spool_stats st;
	spool_stats(c.spool, &st);
	assert_int_equal(st.files, 0);
	assert_int_equal(st.commits, 200);
	spool_close(c.spool);
	pthread_cond_destroy(&c.cond);
	pthread_mutex_destroy(&c.lock);
}

static void test_full_disk(void **state)
{
	struct fixture *f = *state;
	char mnt[128], filler[192];

	_Static_assert(sizeof(mnt) + 8 <= sizeof(f->dir), "room for the spool path");
	uint8_t chunk[4096] = { 0 };
	uint8_t body[8192];

	snprintf(mnt, sizeof(mnt), "%s/tmpfs", f->base);
	assert_int_equal(mkdir(mnt, 0700), 0);
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=256k") != 0) {
		print_message("# cannot mount a 256 KiB tmpfs (%s): the full-disk test needs root "
			      "and CAP_SYS_ADMIN\n", strerror(errno));
		skip();
	}
	snprintf(f->dir, sizeof(f->dir), "%s/spool", mnt);
	struct spool_options o = options(f);
	struct spool *s = open_spool(&o);
	uint64_t epoch = spool_epoch(s);
	uint64_t s1 = commit_one(s, 1000), s2;

	snprintf(filler, sizeof(filler), "%s/filler", mnt);
	int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	for (;;) {
		ssize_t n = write(fd, chunk, sizeof(chunk));
		if (n < 0) {
			assert_int_equal(errno, ENOSPC);
			break;
		}
	}
	close(fd);

	/* The sequence can still be reserved durably (state rewritten in place)... */
	assert_int_equal(spool_sequence_next(s, &s2), 0);
	assert_true(s2 > s1);
	/* ...but the batch does not fit: -ENOSPC, and nothing half-written is left. */
	fill_body(body, sizeof(body), (uint32_t)s2);
	assert_int_equal(spool_batch_commit(s, s2, T0, body, sizeof(body)), -ENOSPC);
	assert_int_equal(count_files(f->dir, ".tmp"), 0);
	assert_int_equal(count_files(f->dir, ".batch"), 1);
	struct spool_stats st;
	spool_stats(s, &st);
	assert_int_equal(st.commit_errors, 1);
	assert_int_equal(st.files, 1);
	spool_close(s);

	/* After a restart on the still-full disk everything is consistent. */
	s = open_spool(&o);
	assert_int_equal(spool_epoch(s), epoch);
	assert_int_equal(f->events[SPOOL_EVENT_CORRUPT], 0);
	uint64_t s3;
	assert_int_equal(spool_sequence_next(s, &s3), 0);
	assert_true(s3 > s2);
	expect_oldest(s, epoch, s1, 1000);
	/* Space comes back: committing works again. */
	assert_int_equal(unlink(filler), 0);
	assert_int_equal(spool_batch_commit(s, s2, T0 + s2 * 30 * NS, body, sizeof(body)), 0);
	assert_int_equal(spool_batch_remove(s, epoch, s1), 0);
	expect_oldest(s, epoch, s2, sizeof(body));
	spool_close(s);
	assert_int_equal(umount(mnt), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_roundtrip_and_rejects),
		cmocka_unit_test_setup_teardown(test_commit_replay_across_reopen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_commit_argument_checks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stale_tmp_removed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_files_quarantined, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sequence_survives_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_foreign_epoch_delivered_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_size_limit_drops_oldest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_age_limit_drops_old, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pinned_batch_not_dropped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reject_keeps_newest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_commit_and_consume, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full_disk, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
