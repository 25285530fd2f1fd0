/* SPDX-License-Identifier: Apache-2.0 */
/* Batch decoder under fault injection: every allocation of decoding (and of the bounded zstd
 * decompression before it) failed in turn, once and from then on; a clear -ENOMEM, nothing
 * returned, nothing leaked, each time. */
// test-ldflags: -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup,--wrap=asprintf,--wrap=open,--wrap=openat,--wrap=mkdir,--wrap=mkdirat,--wrap=dup,--wrap=read,--wrap=pread,--wrap=write,--wrap=pwrite,--wrap=fsync,--wrap=fdatasync,--wrap=rename,--wrap=renameat,--wrap=unlink,--wrap=unlinkat,--wrap=ftruncate,--wrap=close
// test-ldflags: -Wl,--wrap=ZSTD_createDCtx,--wrap=ZSTD_decompressStream,--undefined=__wrap_ZSTD_createDCtx
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

#include <cmocka.h>

#include "common/bytes.h"
#include "common/compress.h"
#include "common/error.h"
#include "common/wire/wire.h"
#include "tests/support/fault_inject.h"

/* The fuzz target's seeds: real encoder output; first byte 0 = raw batch, 1 = zstd frame. */
#define SEED_DIR "tests/fuzz/corpus/fuzz_wire_decode"
#define MAX_SEEDS 32
#define MAX_STEPS 100000 /* far above the allocations of any seed: a loop that never ends */
#define DECOMPRESS_LIMIT (1u << 20)

struct seed {
	char name[256];
	bool zstd;
	uint8_t *data; /* without the selector byte */
	size_t len;
};

static struct seed seeds[MAX_SEEDS];
static size_t seed_count;

static void seeds_load(void)
{
	const char *root = getenv("SYSOM_ROOT");
	char dir[4096], path[4096 + 256 + 2];
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/%s", root && *root ? root : ".", SEED_DIR);
	d = opendir(dir);
	if (!d)
		fail_msg("cannot open %s (run from the repository root or set SYSOM_ROOT)", dir);
	while ((de = readdir(d)) && seed_count < MAX_SEEDS) {
		struct seed *s = &seeds[seed_count];
		uint8_t buf[1 << 16];
		size_t n;
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		f = fopen(path, "rb");
		assert_non_null(f);
		n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		assert_true(n >= 2 && n < sizeof(buf));
		memcpy(s->name, de->d_name, sizeof(s->name) - 1);
		s->zstd = buf[0] & 1;
		s->len = n - 1;
		s->data = malloc(s->len);
		assert_non_null(s->data);
		memcpy(s->data, buf + 1, s->len);
		seed_count++;
	}
	closedir(d);
	assert_true(seed_count >= 2);
}

static int setup(void **state)
{
	(void)state;
	seeds_load();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (size_t i = 0; i < seed_count; i++)
		free(seeds[i].data);
	seed_count = 0;
	return 0;
}

static bool all_zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* The plain batch of a seed, decompressed without faults. */
static void plain_of(const struct seed *s, struct byte_buf *out)
{
	memset(out, 0, sizeof(*out));
	if (s->zstd)
		assert_int_equal(sysom_zstd_decompress(s->data, s->len, DECOMPRESS_LIMIT, out), 0);
	else
		byte_buf_append(out, s->data, s->len);
	assert_int_equal(byte_buf_error(out), 0);
}

/* What a complete decode of `plain` encodes to (a seed of an older minor version encodes
 * differently from its input, so the reference is a decode without faults). */
static void reference_of(const struct byte_buf *plain, struct byte_buf *out)
{
	struct sysom_batch b;
	struct sysom_wire_error werr;

	memset(out, 0, sizeof(*out));
	assert_int_equal(sysom_batch_decode(plain->data, plain->len, NULL, &b, &werr), 0);
	assert_int_equal(sysom_batch_encode(&b, out), 0);
	assert_int_equal(byte_buf_error(out), 0);
	sysom_batch_free(&b);
}

/* A decoded batch is complete: it encodes to the reference. */
static void assert_encodes_to(const struct sysom_batch *b, const struct byte_buf *reference,
			      const char *what)
{
	struct byte_buf again = { 0 };

	assert_int_equal(sysom_batch_encode(b, &again), 0);
	if (again.len != reference->len || memcmp(again.data, reference->data, again.len) != 0)
		fail_msg("%s: the decoded batch differs from a decode without faults", what);
	byte_buf_free(&again);
}

/* The seeds together hold every section type, so the loops reach every section decoder. */
static void test_seeds_cover_every_section(void **state)
{
	uint64_t sum[18] = { 0 };

	(void)state;
	for (size_t i = 0; i < seed_count; i++) {
		struct byte_buf plain;
		struct sysom_batch b;
		struct sysom_wire_error werr;

		plain_of(&seeds[i], &plain);
		assert_int_equal(sysom_batch_decode(plain.data, plain.len, NULL, &b, &werr), 0);
		uint32_t counts[18] = { b.string_count, b.object_count, b.process_count,
					b.mapping_count, b.stack_count, b.frame_count,
					b.sample_count, b.counter_count, b.job_rank_count,
					b.communicator_count, b.nccl_call_count, b.launch_count,
					b.gpu_kernel_count, b.nccl_profile_count, b.nccl_link_count,
					b.os_cpu_count, b.os_irq_count, b.os_thread_count };
		for (int k = 0; k < 18; k++)
			sum[k] += counts[k];
		sysom_batch_free(&b);
		byte_buf_free(&plain);
	}
	for (int k = 0; k < 18; k++)
		if (!sum[k])
			fail_msg("no seed in %s has records of kind %d", SEED_DIR, k);
}

/*
 * One step: decode (after decompressing, for a zstd seed: the ingest path) with the plan
 * armed. A failed call must give -ENOMEM with the decoder's message, an empty batch and no
 * leak; a step the fault did not reach must decode the whole batch. True when a call failed.
 */
static bool decode_step(const struct seed *s, const struct byte_buf *reference,
			const struct fault_plan *plan)
{
	struct byte_buf buf = { 0 };
	struct sysom_batch b;
	struct sysom_wire_error werr = { 0 };
	struct fault_stats st;
	const uint8_t *data = s->data;
	size_t len = s->len;
	int rc = 0;
	bool decoded = false;

	memset(&b, 0xa5, sizeof(b)); /* the decoder must not rely on a zeroed output */
	fault_arm(plan);
	if (s->zstd) {
		rc = sysom_zstd_decompress(s->data, s->len, DECOMPRESS_LIMIT, &buf);
		data = buf.data;
		len = buf.len;
	}
	if (!rc) {
		rc = sysom_batch_decode(data, len, NULL, &b, &werr);
		decoded = true;
	}
	fault_disarm();
	fault_stats_get(&st);
	if (st.failed) {
		if (rc != -ENOMEM)
			fail_msg("%s, call %" PRIu64 "%s failed (%s): %s returned %d (%s), want -ENOMEM",
				 s->name, plan->nth, plan->persistent ? " and later" : "",
				 st.first_failed, decoded ? "decode" : "decompress", rc,
				 sysom_strerror(rc));
		if (decoded) {
			assert_string_equal(werr.message, "out of memory while decoding");
			if (!all_zero(&b, sizeof(b)))
				fail_msg("%s, call %" PRIu64 " failed: decode returned a partial batch",
					 s->name, plan->nth);
		}
	} else {
		if (rc)
			fail_msg("%s: no fault reached, yet %d (%s)", s->name, rc, sysom_strerror(rc));
		assert_encodes_to(&b, reference, s->name);
	}
	if (decoded)
		sysom_batch_free(&b);
	byte_buf_free(&buf);
	if (fault_leaks_found())
		fail_msg("%s, call %" PRIu64 "%s failed (%s): memory leaked", s->name, plan->nth,
			 plan->persistent ? " and later" : "", st.first_failed);
	return st.failed != 0;
}

/* Fails call N = 1, 2, ... of `classes` (once, or from N on) until decoding completes. */
static void decode_loops(unsigned classes, bool zstd_seeds)
{
	for (size_t i = 0; i < seed_count; i++) {
		const struct seed *s = &seeds[i];
		struct byte_buf plain, reference;

		if (s->zstd != zstd_seeds)
			continue;
		plain_of(s, &plain);
		reference_of(&plain, &reference);
		byte_buf_free(&plain);
		for (int persistent = 0; persistent < 2; persistent++) {
			uint64_t n = 1;

			while (decode_step(s, &reference, &(struct fault_plan){ .classes = classes, .nth = n,
									      .persistent = persistent }))
				if (++n > MAX_STEPS)
					fail_msg("%s: the fault loop does not end", s->name);
			print_message("# %-24s %-10s %3" PRIu64 " allocation points failed\n", s->name,
				      persistent ? "persistent" : "once", n - 1);
		}
		byte_buf_free(&reference);
	}
}

static void test_decode_allocation_faults(void **state)
{
	(void)state;
	decode_loops(FAULT_ALLOC, false);
}

/* As ingest: bounded decompression, then decoding; zstd's own allocations fail too. */
static void test_decompress_and_decode_allocation_faults(void **state)
{
	(void)state;
	decode_loops(FAULT_ALLOC | FAULT_ZSTD, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seeds_cover_every_section),
		cmocka_unit_test(test_decode_allocation_faults),
		cmocka_unit_test(test_decompress_and_decode_allocation_faults),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
