/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The spool under fault injection: every allocation and every file operation of a run (open
 * with batches and a crash leftover on disk, two sequences reserved and committed, the oldest
 * batch read and removed, close) failed in turn, once and from then on (a dead or full disk).
 * Each time: clear errors, no temporary file left behind, and a re-open (as after a crash)
 * finds only complete batches, every accepted batch among them, no sequence handed out twice.
 */
// test-ldflags: -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup,--wrap=asprintf,--wrap=open,--wrap=openat,--wrap=mkdir,--wrap=mkdirat,--wrap=dup,--wrap=read,--wrap=pread,--wrap=write,--wrap=pwrite,--wrap=fsync,--wrap=fdatasync,--wrap=rename,--wrap=renameat,--wrap=unlink,--wrap=unlinkat,--wrap=ftruncate,--wrap=close
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/ship/spool.h"
#include "common/error.h"
#include "tests/support/batch_fixture.h"
#include "tests/support/fault_inject.h"

#define NS 1000000000ull
#define T0 (1700000000ull * NS)
#define BODY_LEN 3000
#define MAX_SEQ 8
#define MAX_STEPS 10000 /* far above the calls of one run: a loop that never ends */

/* What the run under faults did, and what it was told. */
struct outcome {
	bool opened;
	uint64_t epoch;
	uint64_t handed_out[2]; /* sequences spool_sequence_next returned (0: it failed) */
	bool committed[MAX_SEQ]; /* spool_batch_commit of that sequence returned 0 */
	bool attempted[MAX_SEQ]; /* ... was called */
	bool removed[MAX_SEQ];   /* spool_batch_remove returned 0 */
	bool rejected[MAX_SEQ];  /* spool_batch_reject returned 0 */
	bool dropped[MAX_SEQ];   /* reported dropped by the file-count limit */
	bool drop_failed[MAX_SEQ]; /* ... with an error: its file may still be there */
	int errors[8];           /* every error returned, in order */
	int nerrors;
	unsigned state_resets, corrupt_events; /* events seen */
};

struct ctx {
	char base[128]; /* mkdtemp directory */
	char dir[192];  /* the spool */
	uint64_t now;
	struct outcome *out; /* where events go */
};

static uint64_t fake_now(void *arg)
{
	return ((struct ctx *)arg)->now;
}

static void on_event(void *arg, const struct spool_event *ev)
{
	struct ctx *c = arg;

	if (!c->out)
		return;
	/* Dropped by the limit: gone, unless the event says deleting the file failed (then it
	 * is back after a re-open, to be sent or dropped again). */
	if (ev->kind == SPOOL_EVENT_DROPPED_FULL && ev->sequence < MAX_SEQ) {
		c->out->dropped[ev->sequence] = ev->error == 0;
		c->out->drop_failed[ev->sequence] = ev->error != 0;
	}
	if (ev->kind == SPOOL_EVENT_STATE_RESET)
		c->out->state_resets++;
	if (ev->kind == SPOOL_EVENT_CORRUPT)
		c->out->corrupt_events++;
}

static struct spool_options options(struct ctx *c)
{
	/* Three files: the run's second commit drops the oldest batch. */
	return (struct spool_options){ .dir = c->dir, .max_files = 3, .on_event = on_event,
				       .event_ctx = c, .now_ns = fake_now, .clock_ctx = c };
}

static void body_for(uint64_t seq, uint8_t *buf)
{
	uint32_t x = (uint32_t)seq * 2654435761u + 7;

	for (size_t i = 0; i < BODY_LEN; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = (uint8_t)x;
	}
}

/* Before each step: a spool holding batches 1 and 2, and a *.tmp an interrupted write left. */
static void spool_prepare(struct ctx *c)
{
	struct spool_options o = options(c);
	struct spool *s = NULL;
	uint8_t body[BODY_LEN];
	char path[320];
	FILE *f;

	fixture_tmpdir_remove(c->base);
	assert_int_equal(mkdir(c->base, 0700), 0);
	assert_int_equal(spool_open(&o, &s), 0);
	for (uint64_t want = 1; want <= 2; want++) {
		uint64_t seq;

		assert_int_equal(spool_sequence_next(s, &seq), 0);
		assert_int_equal(seq, want);
		body_for(seq, body);
		assert_int_equal(spool_batch_commit(s, seq, T0 + seq * 30 * NS, body, BODY_LEN), 0);
	}
	snprintf(path, sizeof(path), "%s/%016" PRIx64 "-%020u.batch.tmp", c->dir, spool_epoch(s), 7u);
	spool_close(s);
	f = fopen(path, "wb");
	assert_non_null(f);
	fputs("half a batch", f);
	fclose(f);
}

static void record_error(struct outcome *o, int rc)
{
	if (rc && o->nerrors < 8)
		o->errors[o->nerrors++] = rc;
}

/* The run under test (armed by the caller). */
static void spool_run(struct ctx *c, struct outcome *o)
{
	struct spool_options opts = options(c);
	struct spool *s = NULL;
	struct spool_batch b = { 0 };
	uint8_t body[BODY_LEN];
	int rc;

	rc = spool_open(&opts, &s);
	record_error(o, rc);
	if (rc)
		return;
	o->opened = true;
	o->epoch = spool_epoch(s);
	for (int k = 0; k < 2; k++) {
		uint64_t seq = 0;

		rc = spool_sequence_next(s, &seq);
		record_error(o, rc);
		if (rc)
			continue;
		o->handed_out[k] = seq;
		if (seq >= MAX_SEQ)
			fail_msg("sequence %" PRIu64 " handed out: more than this run can use", seq);
		body_for(seq, body);
		o->attempted[seq] = true;
		rc = spool_batch_commit(s, seq, T0 + seq * 30 * NS, body, BODY_LEN);
		record_error(o, rc);
		o->committed[seq] = rc == 0;
	}
	/* The uploader's part: the oldest batch delivered (removed), the next one refused. */
	for (int k = 0; k < 2; k++) {
		uint8_t want[BODY_LEN];

		rc = spool_batch_oldest(s, &b);
		record_error(o, rc == -ENOENT ? 0 : rc);
		if (rc)
			break;
		/* Whatever the spool hands out is a whole batch we gave it. */
		if (b.epoch != o->epoch || b.sequence == 0 || b.sequence >= MAX_SEQ ||
		    b.body_len != BODY_LEN)
			fail_msg("oldest: batch %" PRIu64 " of %zu bytes is not one of ours", b.sequence,
				 b.body_len);
		body_for(b.sequence, want);
		if (memcmp(b.body, want, BODY_LEN) != 0)
			fail_msg("oldest: batch %" PRIu64 " has another body", b.sequence);
		rc = k == 0 ? spool_batch_remove(s, b.epoch, b.sequence)
			    : spool_batch_reject(s, b.epoch, b.sequence);
		record_error(o, rc);
		if (k == 0)
			o->removed[b.sequence] = rc == 0;
		else
			o->rejected[b.sequence] = rc == 0;
		spool_batch_release(&b);
		if (rc)
			break;
	}
	spool_close(s);
}

static bool has_suffix(const char *name, const char *suffix)
{
	size_t n = strlen(name), k = strlen(suffix);

	return n > k && strcmp(name + n - k, suffix) == 0;
}

/* Counts *.tmp files in the spool directory other than the one spool_prepare planted. */
static unsigned stray_tmp_files(const struct ctx *c, bool *planted_left)
{
	DIR *d = opendir(c->dir);
	struct dirent *de;
	unsigned n = 0;

	assert_non_null(d);
	*planted_left = false;
	while ((de = readdir(d))) {
		if (!has_suffix(de->d_name, ".tmp"))
			continue;
		if (strstr(de->d_name, "-00000000000000000007.batch.tmp"))
			*planted_left = true;
		else
			n++;
	}
	closedir(d);
	return n;
}

/* A batch set aside (corrupt/, rejected/) is still whole: header, then exactly its body. */
static void set_aside_batches(const struct ctx *c, const char *subdir, bool found[MAX_SEQ],
			      const char *when)
{
	char dir[256], path[600];
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/%s", c->dir, subdir);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		uint8_t buf[SPOOL_HEADER_SIZE + BODY_LEN + 1], want[BODY_LEN];
		struct spool_header h;
		size_t n;
		FILE *f;

		if (!has_suffix(de->d_name, ".batch"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		f = fopen(path, "rb");
		assert_non_null(f);
		n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		if (n != SPOOL_HEADER_SIZE + BODY_LEN ||
		    spool_header_decode(buf, n, &h, NULL) != SPOOL_HEADER_SIZE ||
		    h.sequence == 0 || h.sequence >= MAX_SEQ)
			fail_msg("%s: %s/%s is not a whole batch of ours", when, subdir, de->d_name);
		body_for(h.sequence, want);
		if (memcmp(buf + SPOOL_HEADER_SIZE, want, BODY_LEN) != 0)
			fail_msg("%s: %s/%s has another body", when, subdir, de->d_name);
		found[h.sequence] = true;
	}
	closedir(d);
}

static bool error_allowed(int rc, int io_error)
{
	return rc == -ENOMEM || rc == -io_error;
}

/*
 * One step: prepare, run armed, then judge. True when a call failed (the loop goes on).
 */
static bool spool_step(struct ctx *c, const struct fault_plan *plan, uint64_t *quarantines)
{
	struct outcome o = { 0 }, after = { 0 };
	struct spool_options opts = options(c);
	struct spool *s = NULL;
	struct spool_stats stats;
	struct fault_stats st;
	struct spool_batch b = { 0 };
	bool present[MAX_SEQ] = { false }, quarantined[MAX_SEQ] = { false };
	bool in_rejected[MAX_SEQ] = { false }, planted_left;
	char when[200];
	uint64_t next;

	spool_prepare(c);
	c->out = &o;
	fault_arm(plan);
	spool_run(c, &o);
	fault_disarm();
	c->out = NULL;
	fault_stats_get(&st);
	snprintf(when, sizeof(when), "call %" PRIu64 "%s failed (%s)", plan->nth,
		 plan->persistent ? " and later" : "", st.failed ? st.first_failed : "none");

	/* Clear errors: only what was failed, as itself. */
	for (int i = 0; i < o.nerrors; i++)
		if (!error_allowed(o.errors[i], plan->error ? plan->error : EIO) || !st.failed)
			fail_msg("%s: a call returned %d (%s)", when, o.errors[i],
				 sysom_strerror(o.errors[i]));
	if (!st.failed && !(o.committed[3] && o.committed[4] && o.dropped[1] && o.removed[2] &&
			    o.rejected[3]))
		fail_msg("no fault reached, yet the run did not go as planned");

	/* No temporary file left behind, unless deleting it was what failed. */
	if (stray_tmp_files(c, &planted_left) && !(st.failed_classes & FAULT_UNLINK))
		fail_msg("%s: a *.tmp file was left behind", when);
	if (planted_left && o.opened && !(st.failed_classes & (FAULT_UNLINK | FAULT_OPEN)))
		fail_msg("%s: the open left the interrupted write's *.tmp", when);

	/* Re-open as after a crash: nothing half-written, nothing accepted missing. */
	c->out = &after;
	assert_int_equal(spool_open(&opts, &s), 0);
	spool_stats(s, &stats);
	if (after.corrupt_events || stats.corrupt)
		fail_msg("%s: the re-open found a damaged batch file", when);
	if (o.opened && spool_epoch(s) == o.epoch) {
		/* A sequence is never handed out twice within an epoch. */
		assert_int_equal(spool_sequence_next(s, &next), 0);
		for (int k = 0; k < 2; k++)
			if (o.handed_out[k] && next <= o.handed_out[k])
				fail_msg("%s: sequence %" PRIu64 " handed out again", when, next);
	} else if (o.opened && !after.state_resets) {
		fail_msg("%s: the epoch changed without a state reset", when);
	}
	for (;;) {
		int rc = spool_batch_oldest(s, &b);
		uint8_t want[BODY_LEN];

		if (rc == -ENOENT)
			break;
		assert_int_equal(rc, 0);
		if (b.sequence == 0 || b.sequence >= MAX_SEQ || b.body_len != BODY_LEN)
			fail_msg("%s: the re-open found batch %" PRIu64 " that is not ours", when,
				 b.sequence);
		body_for(b.sequence, want);
		if (memcmp(b.body, want, BODY_LEN) != 0)
			fail_msg("%s: batch %" PRIu64 " has another body", when, b.sequence);
		present[b.sequence] = true;
		assert_int_equal(spool_batch_remove(s, b.epoch, b.sequence), 0);
		spool_batch_release(&b);
	}
	spool_close(s);
	c->out = NULL;
	set_aside_batches(c, "corrupt", quarantined, when);
	set_aside_batches(c, "rejected", in_rejected, when);
	for (uint64_t q = 1; q < MAX_SEQ; q++) {
		bool accepted = q <= 2 || o.committed[q];
		bool may_be_present = accepted || o.attempted[q];

		if (present[q] && !may_be_present)
			fail_msg("%s: batch %" PRIu64 " was never committed, yet is there", when, q);
		if (present[q] && (o.removed[q] || o.rejected[q] || o.dropped[q]))
			fail_msg("%s: batch %" PRIu64 " was taken out of the spool, yet is back", when,
				 q);
		if (in_rejected[q] && present[q])
			fail_msg("%s: batch %" PRIu64 " is both rejected and queued", when, q);
		/* Taken out as told (a refused one may be kept in rejected/ or not: when it
		 * cannot be moved there, it is deleted so it cannot block the spool). */
		if (!accepted || o.removed[q] || o.rejected[q] || o.dropped[q] || o.drop_failed[q] ||
		    present[q] || in_rejected[q])
			continue;
		/* An accepted batch may only be missing as set aside whole, after a failed read
		 * (a file that cannot be read is moved to corrupt/ so it cannot block the spool). */
		if (!quarantined[q] || !(st.failed_classes & (FAULT_READ | FAULT_OPEN)))
			fail_msg("%s: accepted batch %" PRIu64 " is missing", when, q);
		(*quarantines)++;
	}
	if (fault_leaks_found())
		fail_msg("%s: memory leaked", when);
	return st.failed != 0;
}

static void spool_loop(struct ctx *c, const char *name, unsigned classes, int error,
		       bool persistent)
{
	uint64_t n = fault_first_step(), first = n, quarantines = 0;

	while (spool_step(c, &(struct fault_plan){ .classes = classes, .nth = n,
						    .persistent = persistent, .error = error },
			  &quarantines))
		if (++n > MAX_STEPS)
			fail_msg("%s: the fault loop does not end", name);
	print_message("# %-10s %-10s %4" PRIu64 " fault points; %" PRIu64
		      " accepted batches set aside whole after a failed read\n",
		      name, persistent ? "persistent" : "once", n - first, quarantines);
}

static int setup(void **state)
{
	struct ctx *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	assert_int_equal(fixture_tmpdir_make(c->base, sizeof(c->base)), 0);
	snprintf(c->dir, sizeof(c->dir), "%s/spool", c->base);
	c->now = T0;
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct ctx *c = *state;

	fixture_tmpdir_remove(c->base);
	free(c);
	return 0;
}

static void test_allocation_faults(void **state)
{
	spool_loop(*state, "allocation", FAULT_ALLOC, 0, false);
	spool_loop(*state, "allocation", FAULT_ALLOC, 0, true);
}

static void test_io_faults(void **state)
{
	spool_loop(*state, "I/O error", FAULT_IO, EIO, false);
	spool_loop(*state, "I/O error", FAULT_IO, EIO, true);
}

/* A full disk fails what needs space: creating, writing, syncing, renaming, closing. */
static void test_disk_full(void **state)
{
	const unsigned classes = FAULT_OPEN | FAULT_WRITE | FAULT_SYNC | FAULT_RENAME |
				 FAULT_TRUNCATE | FAULT_CLOSE;

	spool_loop(*state, "disk full", classes, ENOSPC, false);
	spool_loop(*state, "disk full", classes, ENOSPC, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_allocation_faults, setup, teardown),
		cmocka_unit_test_setup_teardown(test_io_faults, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
	};

	/* fsync on tmpfs is free; the re-open stands for the crash. */
	if (!getenv("TMPDIR") && access("/dev/shm", W_OK) == 0)
		setenv("TMPDIR", "/dev/shm", 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
