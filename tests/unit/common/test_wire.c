/* SPDX-License-Identifier: Apache-2.0 */
/* Wire codec: round trips, de-duplication, and rejection of truncated/corrupt/oversized input. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/bytes.h"
#include "common/error.h"
#include "common/wire.h"

static const uint8_t kernel_id[20] = { 0xab, 0xf9, 0xec, 0x0e, 0xc5, 0x94, 0x66, 0x00, 0xc9, 0x06,
				       0x41, 0xcf, 0x5d, 0xb9, 0x98, 0x47, 0x2f, 0xac, 0x41, 0x0b };
static const uint8_t libc_id[20] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20 };

/* Builds a small but complete batch: one process, kernel and user stacks, two sample rows. */
static void build_sample_batch(struct sysom_batch *b)
{
	uint32_t kobj, libc, anon, proc, kstack, ustack, comm, exe, cmd, tcomm;
	struct sysom_frame kframes[] = { { 0, 0x1234 }, { 0, 0x5678 } };
	struct sysom_frame uframes[3];

	assert_int_equal(sysom_batch_init(b), 0);
	memset(b->node_id, 0x42, sizeof(b->node_id));
	b->agent_epoch = 0x1122334455667788ULL;
	b->sequence = 7;
	b->window_start_ns = 1700000000000000000ULL;
	b->window_end_ns = b->window_start_ns + 30ULL * 1000000000ULL;
	assert_int_equal(sysom_batch_intern_cstring(b, "node-a", &b->node.hostname), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "6.18.0", &b->node.kernel_release), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "x86_64", &b->node.machine), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "test", &b->node.agent_version), 0);
	b->node.sample_hz = 99;
	b->node.sample_rate_ppm = 100000;
	b->node.drain_interval_ms = 5000;
	b->node.batch_interval_ms = 30000;
	b->node.online_cpus = 2;

	assert_int_equal(sysom_batch_add_object(b, SYSOM_OBJECT_KERNEL, kernel_id, 20,
						"[kernel.kallsyms]", &kobj), 0);
	b->node.kernel_object = kobj;
	assert_int_equal(sysom_batch_add_object(b, SYSOM_OBJECT_ELF, libc_id, 20,
						"/usr/lib/x86_64-linux-gnu/libc.so.6", &libc), 0);
	assert_int_equal(sysom_batch_add_object(b, SYSOM_OBJECT_ANON, NULL, 0, "[anon:jit]", &anon), 0);
	kframes[0].object = kframes[1].object = kobj;
	uframes[0] = (struct sysom_frame){ libc, 0x29d90 };
	uframes[1] = (struct sysom_frame){ anon, 0x7f0000001000 };
	uframes[2] = (struct sysom_frame){ libc, 0x1000 };

	assert_int_equal(sysom_batch_intern_cstring(b, "python3", &comm), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "/usr/bin/python3.11", &exe), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "python3 train.py --rank 0", &cmd), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "pt_main_thread", &tcomm), 0);
	struct sysom_process p = { .tgid = 4242, .generation = 1, .start_time_ns = 123456789,
				   .comm = comm, .exe = exe, .cmdline = cmd, .ppid = 1 };
	assert_int_equal(sysom_batch_add_process(b, &p, &proc), 0);
	struct sysom_mapping m = { proc, libc, 0x7f1234560000, 0x7f12345e0000, 0x28000 };
	assert_int_equal(sysom_batch_add_mapping(b, &m), 0);
	assert_int_equal(sysom_batch_add_stack(b, SYSOM_STACK_KERNEL, 0, kframes, 2, &kstack), 0);
	assert_int_equal(sysom_batch_add_stack(b, SYSOM_STACK_USER, SYSOM_STOP_DEPTH_LIMIT, uframes, 3,
					       &ustack), 0);
	struct sysom_sample s = { .process = proc, .tid = 4243, .cpu = 1, .time_offset_ms = 5000,
				  .kernel_stack = kstack, .user_stack = ustack, .thread_comm = tcomm,
				  .count = 10 };
	assert_int_equal(sysom_batch_add_sample(b, &s), 0);
	s.kernel_stack = SYSOM_WIRE_NONE;
	s.count = 3;
	assert_int_equal(sysom_batch_add_sample(b, &s), 0);
	assert_int_equal(sysom_batch_add_counter(b, SYSOM_COUNTER_TICKS, 990), 0);
	assert_int_equal(sysom_batch_add_counter(b, SYSOM_COUNTER_SAMPLES, 13), 0);
}

static void encode(const struct sysom_batch *b, struct byte_buf *out)
{
	memset(out, 0, sizeof(*out));
	assert_int_equal(sysom_batch_encode(b, out), 0);
	assert_int_equal(byte_buf_error(out), 0);
}

static void test_round_trip(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;

	(void)state;
	build_sample_batch(&b);
	encode(&b, &buf);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, &err), 0);

	assert_memory_equal(d.node_id, b.node_id, 16);
	assert_int_equal(d.agent_epoch, b.agent_epoch);
	assert_int_equal(d.sequence, 7);
	assert_int_equal(d.window_start_ns, b.window_start_ns);
	assert_int_equal(d.window_end_ns, b.window_end_ns);
	assert_string_equal(sysom_batch_string(&d, d.node.hostname), "node-a");
	assert_string_equal(sysom_batch_string(&d, d.node.kernel_release), "6.18.0");
	assert_int_equal(d.node.sample_hz, 99);
	assert_int_equal(d.node.sample_rate_ppm, 100000);
	assert_int_equal(d.node.kernel_object, b.node.kernel_object);

	assert_int_equal(d.object_count, 3);
	assert_int_equal(d.objects[1].kind, SYSOM_OBJECT_ELF);
	assert_int_equal(d.objects[1].build_id_len, 20);
	assert_memory_equal(d.objects[1].build_id, libc_id, 20);
	assert_string_equal(sysom_batch_string(&d, d.objects[1].name), "/usr/lib/x86_64-linux-gnu/libc.so.6");

	assert_int_equal(d.process_count, 1);
	assert_int_equal(d.processes[0].tgid, 4242);
	assert_int_equal(d.processes[0].start_time_ns, 123456789);
	assert_string_equal(sysom_batch_string(&d, d.processes[0].cmdline), "python3 train.py --rank 0");
	assert_int_equal(d.mapping_count, 1);
	assert_int_equal(d.mappings[0].file_offset, 0x28000);

	assert_int_equal(d.stack_count, 2);
	assert_int_equal(d.stacks[1].kind, SYSOM_STACK_USER);
	assert_int_equal(d.stacks[1].stop_reason, SYSOM_STOP_DEPTH_LIMIT);
	assert_int_equal(d.stacks[1].nframes, 3);
	assert_int_equal(sysom_batch_stack_frames(&d, 1)[1].offset, 0x7f0000001000);

	assert_int_equal(d.sample_count, 2);
	assert_int_equal(d.samples[0].count, 10);
	assert_int_equal(d.samples[1].count, 3);
	assert_int_equal(d.samples[1].kernel_stack, SYSOM_WIRE_NONE);
	assert_string_equal(sysom_batch_string(&d, d.samples[0].thread_comm), "pt_main_thread");
	assert_int_equal(sysom_batch_counter(&d, SYSOM_COUNTER_TICKS), 990);
	assert_int_equal(sysom_batch_counter(&d, SYSOM_COUNTER_SAMPLES), 13);

	/* Re-encoding the decoded batch gives the same bytes. */
	struct byte_buf again = { 0 };
	assert_int_equal(sysom_batch_encode(&d, &again), 0);
	assert_int_equal(again.len, buf.len);
	assert_memory_equal(again.data, buf.data, buf.len);

	byte_buf_free(&again);
	byte_buf_free(&buf);
	sysom_batch_free(&d);
	sysom_batch_free(&b);
}

static void test_dedup(void **state)
{
	struct sysom_batch b;
	uint32_t a, a2, o1, o2, s1, s2;

	(void)state;
	build_sample_batch(&b);
	uint32_t strings = b.string_count;
	assert_int_equal(sysom_batch_intern_cstring(&b, "node-a", &a), 0);
	assert_int_equal(sysom_batch_intern_cstring(&b, "node-a", &a2), 0);
	assert_int_equal(a, a2);
	assert_int_equal(b.string_count, strings);
	assert_int_equal(sysom_batch_add_object(&b, SYSOM_OBJECT_ELF, libc_id, 20, "/other/path", &o1), 0);
	assert_int_equal(o1, 1); /* same build ID → same object, whatever the path */
	assert_int_equal(sysom_batch_add_object(&b, SYSOM_OBJECT_ANON, NULL, 0, "[anon:jit]", &o2), 0);
	assert_int_equal(o2, 2);
	struct sysom_frame f[] = { { 1, 0x29d90 }, { 2, 0x7f0000001000 }, { 1, 0x1000 } };
	assert_int_equal(sysom_batch_add_stack(&b, SYSOM_STACK_USER, SYSOM_STOP_DEPTH_LIMIT, f, 3, &s1), 0);
	assert_int_equal(s1, 1);
	/* A different stop reason is a different stack. */
	assert_int_equal(sysom_batch_add_stack(&b, SYSOM_STACK_USER, SYSOM_STOP_COMPLETE, f, 3, &s2), 0);
	assert_int_not_equal(s1, s2);
	/* Same sample key adds counts instead of adding a row. */
	struct sysom_sample s = b.samples[0];
	s.count = 5;
	assert_int_equal(sysom_batch_add_sample(&b, &s), 0);
	assert_int_equal(b.sample_count, 2);
	assert_int_equal(b.samples[0].count, 15);
	/* Invalid references are refused by the builder. */
	s.process = 99;
	assert_int_equal(sysom_batch_add_sample(&b, &s), -EINVAL);
	f[0].object = 77;
	assert_int_equal(sysom_batch_add_stack(&b, SYSOM_STACK_USER, 0, f, 3, &s2), -EINVAL);
	sysom_batch_free(&b);
}

/* Every prefix of a valid batch is rejected as corrupt, without crashing. */
static void test_truncation(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;

	(void)state;
	build_sample_batch(&b);
	encode(&b, &buf);
	for (size_t len = 0; len < buf.len; len++) {
		uint8_t *copy = malloc(len ? len : 1);
		memcpy(copy, buf.data, len);
		int rc = sysom_batch_decode(copy, len, NULL, &d, &err);
		if (rc != -SYSOM_ECORRUPT)
			fail_msg("prefix of %zu/%zu bytes: rc %d (%s)", len, buf.len, rc, err.message);
		assert_true(err.message[0] != '\0');
		assert_true(err.offset <= len);
		sysom_batch_free(&d);
		free(copy);
	}
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

/* Flipping any single byte either decodes to a valid batch or fails cleanly. */
static void test_bit_flips(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;

	(void)state;
	build_sample_batch(&b);
	encode(&b, &buf);
	for (size_t i = 0; i < buf.len; i++) {
		for (int bit = 0; bit < 8; bit += 3) {
			buf.data[i] ^= (uint8_t)(1u << bit);
			int rc = sysom_batch_decode(buf.data, buf.len, NULL, &d, &err);
			assert_true(rc == 0 || rc == -SYSOM_ECORRUPT || rc == -SYSOM_ELIMIT ||
				    rc == -SYSOM_EVERSION);
			if (rc == 0) {
				/* Whatever decoded must satisfy the invariants the server relies on. */
				for (uint32_t k = 0; k < d.sample_count; k++) {
					assert_true(d.samples[k].process < d.process_count);
					assert_true(d.samples[k].count > 0);
				}
			}
			sysom_batch_free(&d);
			buf.data[i] ^= (uint8_t)(1u << bit);
		}
	}
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

static void expect_corrupt(uint8_t *data, size_t len, int want, const char *fragment)
{
	struct sysom_batch d;
	struct sysom_wire_error err;
	int rc = sysom_batch_decode(data, len, NULL, &d, &err);

	if (rc != want)
		fail_msg("rc %d, want %d (%s)", rc, want, err.message);
	if (fragment && !strstr(err.message, fragment))
		fail_msg("message '%s' lacks '%s'", err.message, fragment);
	sysom_batch_free(&d);
}

/* Section table entry i of an encoded batch. */
static uint8_t *section_entry(struct byte_buf *buf, int i)
{
	return buf->data + SYSOM_WIRE_HEADER_SIZE + (size_t)i * SYSOM_WIRE_SECTION_ENTRY_SIZE;
}

static void test_specific_corruptions(void **state)
{
	struct sysom_batch b;
	struct byte_buf buf;

	(void)state;
	build_sample_batch(&b);
	encode(&b, &buf);

	buf.data[0] = 'X';
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "magic");
	buf.data[0] = 'S';

	store_le16(buf.data + 4, 2);
	expect_corrupt(buf.data, buf.len, -SYSOM_EVERSION, "major");
	store_le16(buf.data + 4, SYSOM_WIRE_MAJOR);

	/* Window that ends before it starts. */
	uint64_t start = load_le64(buf.data + 48);
	store_le64(buf.data + 48, load_le64(buf.data + 56) + 1);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "window");
	store_le64(buf.data + 48, start);

	/* A sample row pointing at a process that does not exist. */
	uint8_t *samples = section_entry(&buf, 6);
	assert_int_equal(load_le16(samples), SYSOM_SECTION_SAMPLES);
	uint32_t soff = load_le32(samples + 8);
	uint32_t saved = load_le32(buf.data + soff);
	store_le32(buf.data + soff, 5);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "process 5 out of range");
	store_le32(buf.data + soff, saved);

	/* A kernel stack slot pointing at a user stack. */
	saved = load_le32(buf.data + soff + 16);
	store_le32(buf.data + soff + 16, 1);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "not a kernel stack");
	store_le32(buf.data + soff + 16, saved);

	/* Zero count. */
	uint64_t count = load_le64(buf.data + soff + 32);
	store_le64(buf.data + soff + 32, 0);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "zero count");
	store_le64(buf.data + soff + 32, count);

	/* A record count that disagrees with the section size. */
	store_le32(samples + 4, load_le32(samples + 4) + 1);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "SAMPLES: size");
	store_le32(samples + 4, load_le32(samples + 4) - 1);

	/* Overlapping sections. */
	uint8_t *objects = section_entry(&buf, 2);
	uint32_t ooff = load_le32(objects + 8);
	store_le32(objects + 8, ooff - 4);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "overlaps");
	store_le32(objects + 8, ooff);

	/* A user-space object kind inside a kernel stack. */
	uint8_t *stacks = section_entry(&buf, 5);
	uint32_t stoff = load_le32(stacks + 8);
	saved = load_le32(buf.data + stoff + 8);
	store_le32(buf.data + stoff + 8, 1); /* frame 0 of the kernel stack → libc */
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "cannot appear in a kernel stack");
	store_le32(buf.data + stoff + 8, saved);

	/* A string containing NUL. */
	uint8_t *strings = section_entry(&buf, 0);
	uint32_t stroff = load_le32(strings + 8);
	/* string 0 is "" (4 bytes); string 1 starts at +4 with its length, then bytes */
	buf.data[stroff + 4 + 4 + 1] = 0;
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "NUL");

	struct sysom_batch d;
	assert_int_equal(sysom_batch_decode(buf.data, 10, NULL, &d, NULL), -SYSOM_ECORRUPT);
	sysom_batch_free(&d);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

static void test_limits(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;
	struct sysom_wire_limits limits = sysom_wire_default_limits;

	(void)state;
	build_sample_batch(&b);
	encode(&b, &buf);
	limits.max_samples = 1;
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, &limits, &d, &err), -SYSOM_ELIMIT);
	assert_non_null(strstr(err.message, "limit"));
	sysom_batch_free(&d);
	limits = sysom_wire_default_limits;
	limits.max_frames_per_stack = 2;
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, &limits, &d, &err), -SYSOM_ELIMIT);
	sysom_batch_free(&d);
	limits = sysom_wire_default_limits;
	limits.max_string_len = 8;
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, &limits, &d, &err), -SYSOM_ELIMIT);
	sysom_batch_free(&d);

	/* A forged huge record count must not allocate: it is refused before. */
	uint8_t *stacks = section_entry(&buf, 5);
	store_le32(stacks + 4, 0x7fffffff);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, &err), -SYSOM_ELIMIT);
	sysom_batch_free(&d);
	store_le32(stacks + 4, 1000);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, &err), -SYSOM_ECORRUPT);
	sysom_batch_free(&d);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

/* A newer minor version's unknown section is skipped; a known one repeated is refused. */
static void test_unknown_section_skipped(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;

	(void)state;
	build_sample_batch(&b);
	encode(&b, &buf);
	uint8_t *counters = section_entry(&buf, 7);
	store_le16(counters, 40); /* pretend COUNTERS is some future section */
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, NULL), 0);
	assert_int_equal(d.counter_count, 0);
	assert_int_equal(d.sample_count, 2);
	sysom_batch_free(&d);
	store_le16(counters, SYSOM_SECTION_SAMPLES);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "repeated");
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

static void test_empty_batch(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;

	(void)state;
	assert_int_equal(sysom_batch_init(&b), 0);
	b.window_start_ns = 1;
	b.window_end_ns = 2;
	encode(&b, &buf);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, NULL), 0);
	assert_int_equal(d.sample_count, 0);
	assert_int_equal(d.string_count, 1);
	assert_int_equal(d.node.kernel_object, SYSOM_WIRE_NONE);
	sysom_batch_free(&d);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_dedup),
		cmocka_unit_test(test_truncation),
		cmocka_unit_test(test_bit_flips),
		cmocka_unit_test(test_specific_corruptions),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_unknown_section_skipped),
		cmocka_unit_test(test_empty_batch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
