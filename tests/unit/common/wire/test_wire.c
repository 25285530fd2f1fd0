/* SPDX-License-Identifier: Apache-2.0 */
/* Wire codec: round trips, de-duplication, and rejection of truncated/corrupt/oversized input. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/bytes.h"
#include "common/compress.h"
#include "common/error.h"
#include "common/wire/wire.h"

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

/* Minor 4: Python frames are objects of kind PYTHON in user stacks (name "qualname\tfile",
 * offset = line); a kernel stack may not hold one; counters above 63 decode, once each. */
static void test_python_frames(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;
	uint32_t py, again, stack, kstack;
	struct sysom_frame f;

	(void)state;
	build_sample_batch(&b);
	assert_int_equal(sysom_batch_add_object(&b, SYSOM_OBJECT_PYTHON, NULL, 0,
						"Model.forward\t/srv/train.py", &py), 0);
	assert_int_equal(sysom_batch_add_object(&b, SYSOM_OBJECT_PYTHON, NULL, 0,
						"Model.forward\t/srv/train.py", &again), 0);
	assert_int_equal(again, py); /* de-duplicated by name */
	f = (struct sysom_frame){ py, 42 };
	assert_int_equal(sysom_batch_add_stack(&b, SYSOM_STACK_USER, 0, &f, 1, &stack), 0);
	assert_int_equal(sysom_batch_add_counter(&b, SYSOM_COUNTER_PY_FRAMES, 5), 0);
	assert_int_equal(sysom_batch_add_counter(&b, SYSOM_COUNTER_PY_NAME_CACHE_HITS, 4), 0);
	assert_int_equal(sysom_batch_add_counter(&b, SYSOM_COUNTER_MAX, 1), -EINVAL);
	encode(&b, &buf);
	assert_int_equal(load_le16(buf.data + 6), SYSOM_WIRE_MINOR);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, &err), 0);
	assert_int_equal(d.objects[py].kind, SYSOM_OBJECT_PYTHON);
	assert_string_equal(sysom_batch_string(&d, d.objects[py].name), "Model.forward\t/srv/train.py");
	assert_int_equal(sysom_batch_stack_frames(&d, stack)[0].offset, 42);
	bool seen_hits = false;
	for (uint32_t i = 0; i < d.counter_count; i++)
		seen_hits |= d.counters[i].id == SYSOM_COUNTER_PY_NAME_CACHE_HITS &&
			     d.counters[i].value == 4;
	assert_true(seen_hits);
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_PY_FRAMES), "py_frames");
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_NCCL_P2P_CALLS), "nccl_p2p_calls");
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_NCCL_P2P_BAD_PEER), "nccl_p2p_bad_peer");
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_CONTAINER_LOG_SCANS), "container_log_scans");
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_CONTAINER_NAMES_MISSING),
			    "container_names_missing");
	sysom_batch_free(&d);
	byte_buf_free(&buf);

	/* The same object in a kernel stack is refused. */
	assert_int_equal(sysom_batch_add_stack(&b, SYSOM_STACK_KERNEL, 0, &f, 1, &kstack), 0);
	encode(&b, &buf);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, &err), -SYSOM_ECORRUPT);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
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

/* A batch is exactly its sections: one byte or a second copy after it is refused, and says
 * where the batch should have ended. */
static void test_trailing_bytes(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;

	(void)state;
	build_sample_batch(&b);
	encode(&b, &buf);
	size_t len = buf.len;
	assert_int_equal(sysom_batch_decode(buf.data, len, NULL, &d, &err), 0);
	sysom_batch_free(&d);
	for (size_t extra = 1; extra <= len; extra = extra * 2 + 1) {
		uint8_t *copy = calloc(1, len + extra);
		assert_non_null(copy);
		memcpy(copy, buf.data, len);
		if (extra >= len)
			memcpy(copy + len, buf.data, len); /* the same batch twice */
		assert_int_equal(sysom_batch_decode(copy, len + extra, NULL, &d, &err), -SYSOM_ECORRUPT);
		assert_non_null(strstr(err.message, "after the last section"));
		assert_int_equal(err.offset, len);
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

/* The encoder writes every section it knows: types 1-19, 24 (IDENTITIES), 22 (HOST_SIGNALS). */
#define ENCODED_SECTIONS 22

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


/* ---- minor 1: job ranks, communicators, NCCL calls, launches ---- */

/* The sample batch plus one record of each new section (and a second launch row). */
static void build_gpu_batch(struct sysom_batch *b)
{
	uint32_t job, src, master, groups, kname;

	build_sample_batch(b);
	assert_int_equal(sysom_batch_intern_cstring(b, "job-42", &job), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "TORCHELASTIC_RUN_ID", &src), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "10.0.0.1:29500", &master), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "tp=0,dp=3", &groups), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "ncclDevKernel_AllReduce", &kname), 0);
	struct sysom_job_rank j = { .process = 0, .job = job, .rank = 3, .world_size = 8,
				    .local_rank = 3, .local_world_size = 4, .group_rank = 0,
				    .source = SYSOM_JOB_FROM_ENVIRONMENT, .job_id_source = src,
				    .master = master, .groups = groups };
	assert_int_equal(sysom_batch_set_job_rank(b, &j), 0);
	struct sysom_communicator c = { .process = 0, .rank = 3, .key = 0x1122334455667788ULL,
					.parent_key = 0xabcULL, .nccl_comm_hash = 0x99,
					.nranks = 8, .split_color = 1, .split_key = 3,
					.split_ordinal = 2, .key_source = SYSOM_COMM_KEY_SPLIT,
					.flags = SYSOM_COMM_DESTROYED, .created_ns = 1700000000000000123ULL,
					.handle = 0x5555aaaa0000ULL };
	assert_int_equal(sysom_batch_set_communicator(b, &c), 0);
	struct sysom_nccl_call k = { .process = 0, .tid = 4243, .comm_key = c.key, .seq = 17,
				     .entry_ns = 1700000001000000000ULL,
				     .exit_ns = 1700000001002000000ULL, .count = 1024,
				     .bytes = 4096, .stream = 0x7f00aa, .op = SYSOM_NCCL_ALL_REDUCE,
				     .datatype = 7, .redop = 0, .flags = SYSOM_NCCL_IN_GROUP,
				     .peer = -1, .result = 0, .rank = 3 };
	assert_int_equal(sysom_batch_add_nccl_call(b, &k), 0);
	struct sysom_launch l = { .process = 0, .kernel_name = kname, .function = 0xbeef,
				  .user_stack = 1, .kernel_stack = SYSOM_WIRE_NONE, .count = 10,
				  .grid = { 8, 2, 1 }, .block = { 256, 1, 1 }, .shared_mem = 4096,
				  .flags = SYSOM_LAUNCH_EX };
	assert_int_equal(sysom_batch_add_launch(b, &l), 0);
	l.kernel_name = 0;
	l.function = 0xdead;
	l.count = 1;
	l.user_stack = SYSOM_WIRE_NONE;
	assert_int_equal(sysom_batch_add_launch(b, &l), 0);
}

/* Offset of section type `type` in an encoded batch (the encoder writes every section). */
static uint32_t section_offset(struct byte_buf *buf, uint16_t type)
{
	for (int i = 0; i < ENCODED_SECTIONS; i++)
		if (load_le16(section_entry(buf, i)) == type)
			return load_le32(section_entry(buf, i) + 8);
	fail_msg("section %u missing", type);
	return 0;
}

static void test_gpu_round_trip(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf, again = { 0 };
	struct sysom_wire_error err;

	(void)state;
	build_gpu_batch(&b);
	encode(&b, &buf);
	assert_int_equal(load_le16(buf.data + 6), SYSOM_WIRE_MINOR);
	if (sysom_batch_decode(buf.data, buf.len, NULL, &d, &err))
		fail_msg("decode: %s", err.message);
	assert_int_equal(d.job_rank_count, 1);
	assert_int_equal(d.job_ranks[0].process, 0);
	assert_int_equal(d.job_ranks[0].rank, 3);
	assert_int_equal(d.job_ranks[0].world_size, 8);
	assert_int_equal(d.job_ranks[0].local_rank, 3);
	assert_int_equal(d.job_ranks[0].local_world_size, 4);
	assert_int_equal(d.job_ranks[0].group_rank, 0);
	assert_int_equal(d.job_ranks[0].source, SYSOM_JOB_FROM_ENVIRONMENT);
	assert_string_equal(sysom_batch_string(&d, d.job_ranks[0].master), "10.0.0.1:29500");
	assert_string_equal(sysom_batch_string(&d, d.job_ranks[0].job_id_source), "TORCHELASTIC_RUN_ID");
	assert_string_equal(sysom_batch_string(&d, d.job_ranks[0].job), "job-42");
	assert_string_equal(sysom_batch_string(&d, d.job_ranks[0].groups), "tp=0,dp=3");
	assert_int_equal(d.communicator_count, 1);
	assert_int_equal(d.communicators[0].key, 0x1122334455667788ULL);
	assert_int_equal(d.communicators[0].split_key, 3);
	assert_int_equal(d.communicators[0].split_ordinal, 2);
	assert_int_equal(d.communicators[0].flags, SYSOM_COMM_DESTROYED);
	assert_int_equal(d.communicators[0].created_ns, 1700000000000000123ULL);
	assert_int_equal(d.communicators[0].handle, 0x5555aaaa0000ULL);
	assert_int_equal(d.communicators[0].rank, 3);
	assert_int_equal(d.communicators[0].parent_key, 0xabc);
	assert_int_equal(d.communicators[0].nccl_comm_hash, 0x99);
	assert_int_equal(d.communicators[0].nranks, 8);
	assert_int_equal(d.communicators[0].split_color, 1);
	assert_int_equal(d.communicators[0].key_source, SYSOM_COMM_KEY_SPLIT);
	assert_int_equal(d.nccl_call_count, 1);
	const struct sysom_nccl_call *k = &d.nccl_calls[0];
	assert_int_equal(k->tid, 4243);
	assert_int_equal(k->comm_key, 0x1122334455667788ULL);
	assert_int_equal(k->entry_ns, 1700000001000000000ULL);
	assert_int_equal(k->exit_ns, 1700000001002000000ULL);
	assert_int_equal(k->count, 1024);
	assert_int_equal(k->bytes, 4096);
	assert_int_equal(k->stream, 0x7f00aa);
	assert_int_equal(k->op, SYSOM_NCCL_ALL_REDUCE);
	assert_int_equal(k->datatype, 7);
	assert_int_equal(k->redop, 0);
	assert_int_equal(k->flags, SYSOM_NCCL_IN_GROUP);
	assert_int_equal(k->rank, 3);
	assert_int_equal(d.nccl_calls[0].peer, -1);
	assert_int_equal(d.nccl_calls[0].seq, 17);
	assert_int_equal(d.launch_count, 2);
	assert_int_equal(d.launches[0].count, 10);
	assert_int_equal(d.launches[0].grid[1], 2);
	assert_int_equal(d.launches[0].shared_mem, 4096);
	assert_int_equal(d.launches[0].flags, SYSOM_LAUNCH_EX);
	assert_string_equal(sysom_batch_string(&d, d.launches[0].kernel_name), "ncclDevKernel_AllReduce");
	assert_int_equal(d.launches[1].user_stack, SYSOM_WIRE_NONE);
	assert_int_equal(d.launches[1].function, 0xdead);
	assert_int_equal(d.sample_count, 2);
	assert_int_equal(sysom_batch_encode(&d, &again), 0);
	assert_int_equal(again.len, buf.len);
	assert_memory_equal(again.data, buf.data, buf.len);
	byte_buf_free(&again);
	byte_buf_free(&buf);
	sysom_batch_free(&d);
	sysom_batch_free(&b);
}

/* A DataLoader worker's record: role and its rank process's pid travel in the former padding. */
static void test_job_worker_round_trip(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;

	(void)state;
	build_gpu_batch(&b);
	b.job_ranks[0].role = SYSOM_JOB_ROLE_WORKER;
	b.job_ranks[0].rank_pid = 4242;
	encode(&b, &buf);
	if (sysom_batch_decode(buf.data, buf.len, NULL, &d, &err))
		fail_msg("decode: %s", err.message);
	assert_int_equal(d.job_rank_count, 1);
	assert_int_equal(d.job_ranks[0].role, SYSOM_JOB_ROLE_WORKER);
	assert_int_equal(d.job_ranks[0].rank_pid, 4242);
	assert_int_equal(d.job_ranks[0].rank, 3);
	sysom_batch_free(&d);
	sysom_batch_free(&b);
	byte_buf_free(&buf);
}

/* The rank's GPU (1.7) travels in byte 30; a record of an older agent (0 there) is unknown. */
static void test_job_gpu_device_round_trip(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;
	size_t at;

	(void)state;
	build_gpu_batch(&b);
	assert_int_equal(b.job_ranks[0].gpu_device, 0);
	b.job_ranks[0].gpu_device = 5; /* NVML index 4 */
	encode(&b, &buf);
	if (sysom_batch_decode(buf.data, buf.len, NULL, &d, &err))
		fail_msg("decode: %s", err.message);
	assert_int_equal(d.job_ranks[0].gpu_device, 5);
	assert_int_equal(d.job_ranks[0].rank, 3);
	assert_int_equal(d.job_ranks[0].role, SYSOM_JOB_ROLE_RANK);
	sysom_batch_free(&d);
	/* The same record as a 1.6 agent wrote it: the byte is zero, the device unknown. */
	at = section_offset(&buf, SYSOM_SECTION_JOB_RANKS) + 30;
	assert_int_equal(buf.data[at], 5);
	buf.data[at] = 0;
	if (sysom_batch_decode(buf.data, buf.len, NULL, &d, &err))
		fail_msg("decode: %s", err.message);
	assert_int_equal(d.job_ranks[0].gpu_device, 0);
	sysom_batch_free(&d);
	/* The largest index a batch can name is accepted. */
	buf.data[at] = SYSOM_GPU_MAX_DEVICES;
	if (sysom_batch_decode(buf.data, buf.len, NULL, &d, &err))
		fail_msg("decode: %s", err.message);
	assert_int_equal(d.job_ranks[0].gpu_device, SYSOM_GPU_MAX_DEVICES);
	sysom_batch_free(&d);
	sysom_batch_free(&b);
	byte_buf_free(&buf);
}

static void test_gpu_builder(void **state)
{
	struct sysom_batch b;

	(void)state;
	build_gpu_batch(&b);
	/* set_job_rank and set_communicator replace; add_launch adds to a matching row. */
	struct sysom_job_rank j = b.job_ranks[0];
	j.rank = 5;
	assert_int_equal(sysom_batch_set_job_rank(&b, &j), 0);
	assert_int_equal(b.job_rank_count, 1);
	assert_int_equal(b.job_ranks[0].rank, 5);
	struct sysom_communicator c = b.communicators[0];
	c.nranks = 16;
	assert_int_equal(sysom_batch_set_communicator(&b, &c), 0);
	assert_int_equal(b.communicator_count, 1);
	assert_int_equal(b.communicators[0].nranks, 16);
	struct sysom_launch l = b.launches[0];
	l.count = 5;
	l.grid[0] = 99;
	assert_int_equal(sysom_batch_add_launch(&b, &l), 0);
	assert_int_equal(b.launch_count, 2);
	assert_int_equal(b.launches[0].count, 15);
	assert_int_equal(b.launches[0].grid[0], 99);
	/* Invalid records are refused. */
	j.process = 9;
	assert_int_equal(sysom_batch_set_job_rank(&b, &j), -EINVAL);
	c.key = 0;
	assert_int_equal(sysom_batch_set_communicator(&b, &c), -EINVAL);
	struct sysom_nccl_call k = b.nccl_calls[0];
	k.exit_ns = k.entry_ns - 1;
	assert_int_equal(sysom_batch_add_nccl_call(&b, &k), -EINVAL);
	k = b.nccl_calls[0];
	k.op = SYSOM_NCCL_OP_MAX + 1;
	assert_int_equal(sysom_batch_add_nccl_call(&b, &k), -EINVAL);
	l.count = 0;
	assert_int_equal(sysom_batch_add_launch(&b, &l), -EINVAL);
	sysom_batch_free(&b);
}

/* Each broken rule of the new sections is refused as corrupt, with a message saying which. */
static void test_gpu_corruptions(void **state)
{
	struct sysom_batch b;
	struct byte_buf buf;
	static const struct {
		uint16_t section;
		uint32_t at;     /* byte offset in the first record */
		uint32_t size;   /* 1, 2, 4 or 8 */
		uint64_t value;
		const char *fragment;
	} cases[] = {
		{ SYSOM_SECTION_JOB_RANKS, 0, 4, 1, "process 1 out of range" },
		{ SYSOM_SECTION_JOB_RANKS, 4, 4, 999, "string index 999" },
		{ SYSOM_SECTION_JOB_RANKS, 8, 4, 8, "rank 8 of 8" },
		{ SYSOM_SECTION_JOB_RANKS, 8, 4, (uint32_t)-2, "inconsistent" },
		{ SYSOM_SECTION_JOB_RANKS, 12, 4, 0, "inconsistent" },
		{ SYSOM_SECTION_JOB_RANKS, 16, 4, 4, "rank 4 of 4" },
		{ SYSOM_SECTION_JOB_RANKS, 24, 4, (uint32_t)-5, "group rank" },
		{ SYSOM_SECTION_JOB_RANKS, 28, 1, 0, "unknown source" },
		{ SYSOM_SECTION_JOB_RANKS, 28, 1, SYSOM_JOB_SOURCE_MAX + 1, "unknown source" },
		{ SYSOM_SECTION_JOB_RANKS, 29, 1, 2, "role 2" },
		{ SYSOM_SECTION_JOB_RANKS, 29, 1, 1, "role 1 with rank pid 0" },
		{ SYSOM_SECTION_JOB_RANKS, 44, 4, 7, "role 0 with rank pid 7" },
		{ SYSOM_SECTION_JOB_RANKS, 30, 1, SYSOM_GPU_MAX_DEVICES + 1, "GPU device 65" },
		{ SYSOM_SECTION_JOB_RANKS, 31, 1, 1, "reserved" },
		{ SYSOM_SECTION_COMMUNICATORS, 0, 4, 1, "process 1 out of range" },
		{ SYSOM_SECTION_COMMUNICATORS, 4, 4, 8, "rank 8 of 8" },
		{ SYSOM_SECTION_COMMUNICATORS, 8, 8, 0, "key 0" },
		{ SYSOM_SECTION_COMMUNICATORS, 32, 4, 0, "inconsistent" },
		{ SYSOM_SECTION_COMMUNICATORS, 48, 4, 1, "reserved" },
		{ SYSOM_SECTION_COMMUNICATORS, 52, 1, 0, "unknown key source" },
		{ SYSOM_SECTION_COMMUNICATORS, 52, 1, 5, "unknown key source" },
		{ SYSOM_SECTION_COMMUNICATORS, 53, 1, 2, "unknown flags" },
		{ SYSOM_SECTION_COMMUNICATORS, 54, 2, 1, "reserved" },
		{ SYSOM_SECTION_NCCL_CALLS, 0, 4, 1, "process 1 out of range" },
		{ SYSOM_SECTION_NCCL_CALLS, 32, 8, 1700000000999999999ULL, "returns before" },
		{ SYSOM_SECTION_NCCL_CALLS, 64, 1, 0, "unknown op 0" },
		{ SYSOM_SECTION_NCCL_CALLS, 64, 1, SYSOM_NCCL_OP_MAX + 1, "unknown op" },
		{ SYSOM_SECTION_NCCL_CALLS, 67, 1, 4, "unknown flags" },
		{ SYSOM_SECTION_NCCL_CALLS, 68, 4, (uint32_t)-2, "negative rank" },
		{ SYSOM_SECTION_NCCL_CALLS, 76, 4, (uint32_t)-2, "negative rank" },
		{ SYSOM_SECTION_LAUNCHES, 0, 4, 1, "process 1 out of range" },
		{ SYSOM_SECTION_LAUNCHES, 4, 4, 999, "string index 999" },
		{ SYSOM_SECTION_LAUNCHES, 16, 4, 0, "not a user stack" },
		{ SYSOM_SECTION_LAUNCHES, 16, 4, 7, "stack 7 out of range" },
		{ SYSOM_SECTION_LAUNCHES, 20, 4, 1, "not a kernel stack" },
		{ SYSOM_SECTION_LAUNCHES, 24, 8, 0, "zero count" },
		{ SYSOM_SECTION_LAUNCHES, 60, 2, 4, "unknown flags" },
		{ SYSOM_SECTION_LAUNCHES, 62, 2, 1, "reserved" },
	};

	(void)state;
	build_gpu_batch(&b);
	encode(&b, &buf);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t *p = buf.data + section_offset(&buf, cases[i].section) + cases[i].at;
		uint8_t saved[8];

		memcpy(saved, p, cases[i].size);
		switch (cases[i].size) {
		case 1: *p = (uint8_t)cases[i].value; break;
		case 2: store_le16(p, (uint16_t)cases[i].value); break;
		case 4: store_le32(p, (uint32_t)cases[i].value); break;
		default: store_le64(p, cases[i].value); break;
		}
		expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, cases[i].fragment);
		memcpy(p, saved, cases[i].size);
	}
	/* The restored batch decodes again; so does a job from the cgroup (source 3, wire 1.6). */
	expect_corrupt(buf.data, buf.len, 0, NULL);
	uint8_t *src = buf.data + section_offset(&buf, SYSOM_SECTION_JOB_RANKS) + 28;
	*src = SYSOM_JOB_FROM_CGROUP;
	expect_corrupt(buf.data, buf.len, 0, NULL);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

/* A second JOB_RANKS record for the same process is refused; repeated communicators and
 * launch keys are allowed (readers take the last / sum). */
static void test_gpu_repeats(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;

	(void)state;
	build_gpu_batch(&b);
	/* Append a copy of each record behind the builder's back. */
	b.job_ranks = realloc(b.job_ranks, 2 * sizeof(*b.job_ranks));
	b.job_ranks[1] = b.job_ranks[0];
	b.job_rank_count = 2;
	b.communicators = realloc(b.communicators, 2 * sizeof(*b.communicators));
	b.communicators[1] = b.communicators[0];
	b.communicator_count = 2;
	b.launches = realloc(b.launches, 3 * sizeof(*b.launches));
	b.launches[2] = b.launches[0];
	b.launch_count = 3;
	encode(&b, &buf);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "process 0 repeated");
	byte_buf_free(&buf);
	b.job_rank_count = 1;
	encode(&b, &buf);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, NULL), 0);
	assert_int_equal(d.communicator_count, 2);
	assert_int_equal(d.launch_count, 3);
	sysom_batch_free(&d);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

static void test_gpu_limits(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;
	struct sysom_wire_limits limits;
	uint32_t *fields[] = { &limits.max_job_ranks, &limits.max_communicators,
			       &limits.max_nccl_calls, &limits.max_launches };
	static const char *const names[] = { "JOB_RANKS", "COMMUNICATORS", "NCCL_CALLS",
					     "LAUNCHES" };

	(void)state;
	build_gpu_batch(&b);
	encode(&b, &buf);
	for (size_t i = 0; i < 4; i++) {
		limits = sysom_wire_default_limits;
		*fields[i] = i == 3 ? 1 : 0;
		assert_int_equal(sysom_batch_decode(buf.data, buf.len, &limits, &d, &err), -SYSOM_ELIMIT);
		if (!strstr(err.message, names[i]) || !strstr(err.message, "limit"))
			fail_msg("'%s' lacks %s", err.message, names[i]);
		sysom_batch_free(&d);
	}
	/* A record count that disagrees with the section size. */
	for (int i = 0; i < ENCODED_SECTIONS; i++) {
		uint8_t *e = section_entry(&buf, i);
		if (load_le16(e) != SYSOM_SECTION_NCCL_CALLS)
			continue;
		store_le32(e + 4, 2);
		expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "NCCL_CALLS: size");
		store_le32(e + 4, 1);
	}
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

/* A minor-0 batch (sections 1-8 only) still decodes, with no job or GPU records. */
static void test_minor0_batch(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;

	(void)state;
	build_sample_batch(&b);
	encode(&b, &buf);
	/* The four new sections are last and empty: leave them out of the table. */
	for (int i = 8; i < ENCODED_SECTIONS; i++)
		assert_int_equal(load_le32(section_entry(&buf, i) + 12), 0);
	store_le16(buf.data + 6, 0);
	store_le16(buf.data + 10, 8);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, NULL), 0);
	assert_int_equal(d.minor, 0);
	assert_int_equal(d.sample_count, 2);
	assert_int_equal(d.job_rank_count + d.communicator_count + d.nccl_call_count + d.launch_count, 0);
	sysom_batch_free(&d);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

/* Truncations and byte flips of a batch with every section fail cleanly. */
static void test_gpu_truncation_and_flips(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;

	(void)state;
	build_gpu_batch(&b);
	encode(&b, &buf);
	for (size_t len = 0; len < buf.len; len += 7) {
		int rc = sysom_batch_decode(buf.data, len, NULL, &d, &err);
		if (rc != -SYSOM_ECORRUPT)
			fail_msg("prefix %zu: rc %d (%s)", len, rc, err.message);
		sysom_batch_free(&d);
	}
	for (size_t i = 0; i < buf.len; i++) {
		buf.data[i] ^= 0x81;
		int rc = sysom_batch_decode(buf.data, buf.len, NULL, &d, &err);
		assert_true(rc == 0 || rc == -SYSOM_ECORRUPT || rc == -SYSOM_ELIMIT ||
			    rc == -SYSOM_EVERSION);
		for (uint32_t k = 0; rc == 0 && k < d.nccl_call_count; k++)
			assert_true(d.nccl_calls[k].exit_ns >= d.nccl_calls[k].entry_ns);
		for (uint32_t k = 0; rc == 0 && k < d.launch_count; k++)
			assert_true(d.launches[k].count > 0 && d.launches[k].process < d.process_count);
		sysom_batch_free(&d);
		buf.data[i] ^= 0x81;
	}
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}
/* ---- minor 2: GPU kernel time, NCCL profiles, NCCL links ---- */

/*
 * With SYSOM_WIRE_SEED_DIR set (tests/fuzz/corpus/fuzz_wire_decode), writes a seed for the
 * decoder's fuzz target: its first byte selects the path (even: raw, odd: zstd).
 */
static void write_seed(const char *name, const uint8_t *batch, size_t len, bool zstd)
{
	const char *dir = getenv("SYSOM_WIRE_SEED_DIR");
	struct byte_buf out = { 0 };
	char path[4096];
	FILE *f;

	if (!dir)
		return;
	byte_buf_put_u8(&out, zstd ? 1 : 0);
	if (zstd)
		assert_int_equal(sysom_zstd_compress(batch, len, 3, &out), 0);
	else
		byte_buf_append(&out, batch, len);
	assert_int_equal(byte_buf_error(&out), 0);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(out.data, 1, out.len, f), out.len);
	fclose(f);
	byte_buf_free(&out);
}

static void build_timing_batch(struct sysom_batch *b)
{
	uint32_t kname, comm, func, algo, proto, dtype;

	build_gpu_batch(b);
	assert_int_equal(sysom_batch_intern_cstring(b, "sim_gemm_fwd", &kname), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "dp", &comm), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "AllReduce", &func), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "Ring", &algo), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "Simple", &proto), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "ncclFloat32", &dtype), 0);
	struct sysom_gpu_kernel k = { .process = 0, .name = kname, .device = 1, .stream = 7,
				      .count = 3, .total_ns = 6000, .min_ns = 1000, .max_ns = 3000 };
	k.hist[1] = 1;
	k.hist[2] = 2;
	assert_int_equal(sysom_batch_add_gpu_kernel(b, &k), 0);
	struct sysom_nccl_profile p = { .process = 0, .rank = 3, .comm_id = 0xfeed, .comm_name = comm,
					.nranks = 8, .func = func, .algo = algo, .proto = proto,
					.datatype = dtype, .peer = -1, .nchannels = 4, .count = 10,
					.bytes = 40960, .kernel_timed = 9, .kernel_ns_total = 90000,
					.kernel_ns_min = 8000, .kernel_ns_max = 12000,
					.span_timed = 10, .span_ns_total = 150000,
					.enqueue_ns_total = 5000, .transfers = 70,
					.transfer_bytes = 286720, .first_seq = 100, .last_seq = 109 };
	assert_int_equal(sysom_batch_add_nccl_profile(b, &p), 0);
	struct sysom_nccl_link l = { .process = 0, .rank = 3, .comm_id = 0xfeed, .peer = 4,
				     .channel = -1, .transfers = 2, .bytes = 3000,
				     .time_ns_total = 10240, .sx = 3000, .sy = 10240,
				     .sxx = 5000000, .sxy = 15680000, .syy = 52490000,
				     .min_latency_ns = 5000, .min_bytes_per_ns = 12.5,
				     .min_r2 = 1, .min_points = 2 };
	assert_int_equal(sysom_batch_add_nccl_link(b, &l), 0);
}

static void test_timing_round_trip(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;

	(void)state;
	build_timing_batch(&b);
	encode(&b, &buf);
	assert_int_equal(load_le16(buf.data + 6), SYSOM_WIRE_MINOR);
	/* SYSOM_WIRE_SEED_DIR=tests/fuzz/corpus/fuzz_wire_decode regenerates the fuzz seed. */
	write_seed("batch-timing-raw", buf.data, buf.len, false);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, NULL), 0);
	assert_int_equal(d.gpu_kernel_count, 1);
	assert_memory_equal(&d.gpu_kernels[0], &b.gpu_kernels[0], sizeof(d.gpu_kernels[0]));
	assert_string_equal(sysom_batch_string(&d, d.gpu_kernels[0].name), "sim_gemm_fwd");
	assert_int_equal(d.nccl_profile_count, 1);
	assert_memory_equal(&d.nccl_profiles[0], &b.nccl_profiles[0], sizeof(d.nccl_profiles[0]));
	assert_string_equal(sysom_batch_string(&d, d.nccl_profiles[0].func), "AllReduce");
	assert_int_equal(d.nccl_link_count, 1);
	assert_true(d.nccl_links[0].min_bytes_per_ns == 12.5);
	assert_true(d.nccl_links[0].sxy == 15680000);
	assert_int_equal(d.nccl_links[0].channel, -1);
	assert_int_equal(d.nccl_links[0].min_points, 2);
	sysom_batch_free(&d);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

/* The builder merges rows with the same key the way the server would add them up. */
static void test_timing_builder(void **state)
{
	struct sysom_batch b;

	(void)state;
	build_timing_batch(&b);
	struct sysom_gpu_kernel k = b.gpu_kernels[0];
	k.count = 1;
	k.total_ns = k.min_ns = k.max_ns = 500;
	memset(k.hist, 0, sizeof(k.hist));
	k.hist[0] = 1;
	assert_int_equal(sysom_batch_add_gpu_kernel(&b, &k), 0);
	assert_int_equal(b.gpu_kernel_count, 1);
	assert_int_equal(b.gpu_kernels[0].count, 4);
	assert_int_equal(b.gpu_kernels[0].total_ns, 6500);
	assert_int_equal(b.gpu_kernels[0].min_ns, 500);
	assert_int_equal(b.gpu_kernels[0].max_ns, 3000);
	assert_int_equal(b.gpu_kernels[0].hist[0] + b.gpu_kernels[0].hist[2], 3);
	k.stream = 8; /* another stream: another row */
	assert_int_equal(sysom_batch_add_gpu_kernel(&b, &k), 0);
	assert_int_equal(b.gpu_kernel_count, 2);

	struct sysom_nccl_profile p = b.nccl_profiles[0];
	p.first_seq = 110;
	p.last_seq = 119;
	p.kernel_ns_min = 7000;
	p.nchannels = 2;
	assert_int_equal(sysom_batch_add_nccl_profile(&b, &p), 0);
	assert_int_equal(b.nccl_profile_count, 1);
	assert_int_equal(b.nccl_profiles[0].count, 20);
	assert_int_equal(b.nccl_profiles[0].kernel_timed, 18);
	assert_int_equal(b.nccl_profiles[0].kernel_ns_min, 7000);
	assert_int_equal(b.nccl_profiles[0].nchannels, 4);
	assert_int_equal(b.nccl_profiles[0].first_seq, 100);
	assert_int_equal(b.nccl_profiles[0].last_seq, 119);
	p.peer = 2; /* a P2P row is its own */
	assert_int_equal(sysom_batch_add_nccl_profile(&b, &p), 0);
	assert_int_equal(b.nccl_profile_count, 2);

	struct sysom_nccl_link l = b.nccl_links[0];
	l.min_points = 5;
	l.min_bytes_per_ns = 20;
	assert_int_equal(sysom_batch_add_nccl_link(&b, &l), 0);
	assert_int_equal(b.nccl_link_count, 1);
	assert_int_equal(b.nccl_links[0].transfers, 4);
	assert_true(b.nccl_links[0].sxx == 10000000);
	assert_true(b.nccl_links[0].min_bytes_per_ns == 20);
	l.min_points = 1;
	l.min_bytes_per_ns = 99;
	assert_int_equal(sysom_batch_add_nccl_link(&b, &l), 0);
	assert_true(b.nccl_links[0].min_bytes_per_ns == 20); /* fewer points: not taken */

	/* What the decoder refuses, the builder refuses. */
	k = b.gpu_kernels[0];
	k.name = 0;
	assert_int_equal(sysom_batch_add_gpu_kernel(&b, &k), -EINVAL);
	k = b.gpu_kernels[0];
	k.hist[5] = 1000;
	assert_int_equal(sysom_batch_add_gpu_kernel(&b, &k), -EINVAL);
	p = b.nccl_profiles[0];
	p.rank = 8;
	assert_int_equal(sysom_batch_add_nccl_profile(&b, &p), -EINVAL);
	p = b.nccl_profiles[0];
	p.kernel_timed = p.count + 1;
	assert_int_equal(sysom_batch_add_nccl_profile(&b, &p), -EINVAL);
	l = b.nccl_links[0];
	l.sxy = INFINITY;
	assert_int_equal(sysom_batch_add_nccl_link(&b, &l), -EINVAL);
	l = b.nccl_links[0];
	l.min_latency_ns = NAN; /* no MIN-mode fit: allowed */
	assert_int_equal(sysom_batch_add_nccl_link(&b, &l), 0);
	sysom_batch_free(&b);
}

static void test_timing_corruptions(void **state)
{
	struct sysom_batch b;
	struct byte_buf buf;
	const uint64_t inf_bits = 0x7ff0000000000000ULL;
	const struct {
		uint16_t section;
		uint32_t at;
		uint32_t size;
		uint64_t value;
		const char *fragment;
	} cases[] = {
		{ SYSOM_SECTION_GPU_KERNELS, 0, 4, 1, "process out of range" },
		{ SYSOM_SECTION_GPU_KERNELS, 4, 4, 0, "kernel name" },
		{ SYSOM_SECTION_GPU_KERNELS, 4, 4, 9999, "kernel name" },
		{ SYSOM_SECTION_GPU_KERNELS, 12, 4, 1, "reserved" },
		{ SYSOM_SECTION_GPU_KERNELS, 24, 8, 0, "zero count" },
		{ SYSOM_SECTION_GPU_KERNELS, 40, 8, 4000, "min > max" },
		{ SYSOM_SECTION_GPU_KERNELS, 48, 8, 7000, "max > total" },
		{ SYSOM_SECTION_GPU_KERNELS, 56, 4, 5, "histogram" },
		{ SYSOM_SECTION_NCCL_PROFILES, 0, 4, 1, "process out of range" },
		{ SYSOM_SECTION_NCCL_PROFILES, 4, 4, 8, "rank outside" },
		{ SYSOM_SECTION_NCCL_PROFILES, 8, 8, 0, "comm_id 0" },
		{ SYSOM_SECTION_NCCL_PROFILES, 20, 4, 0, "rank outside" },
		{ SYSOM_SECTION_NCCL_PROFILES, 24, 4, 0, "func empty" },
		{ SYSOM_SECTION_NCCL_PROFILES, 28, 4, 9999, "string out of range" },
		{ SYSOM_SECTION_NCCL_PROFILES, 40, 4, 8, "peer outside" },
		{ SYSOM_SECTION_NCCL_PROFILES, 40, 4, (uint32_t)-2, "peer outside" },
		{ SYSOM_SECTION_NCCL_PROFILES, 48, 8, 0, "zero count" },
		{ SYSOM_SECTION_NCCL_PROFILES, 64, 8, 11, "more timed" },
		{ SYSOM_SECTION_NCCL_PROFILES, 80, 8, 13000, "kernel_ns_min > kernel_ns_max" },
		{ SYSOM_SECTION_NCCL_PROFILES, 96, 8, 11, "more timed" },
		{ SYSOM_SECTION_NCCL_PROFILES, 136, 8, 200, "first_seq > last_seq" },
		{ SYSOM_SECTION_NCCL_LINKS, 0, 4, 1, "process out of range" },
		{ SYSOM_SECTION_NCCL_LINKS, 4, 4, (uint32_t)-1, "negative" },
		{ SYSOM_SECTION_NCCL_LINKS, 8, 8, 0, "comm_id 0" },
		{ SYSOM_SECTION_NCCL_LINKS, 16, 4, (uint32_t)-1, "negative" },
		{ SYSOM_SECTION_NCCL_LINKS, 20, 4, (uint32_t)-2, "negative" },
		{ SYSOM_SECTION_NCCL_LINKS, 24, 8, 0, "zero transfers" },
		{ SYSOM_SECTION_NCCL_LINKS, 72, 8, inf_bits, "not finite" },
		{ SYSOM_SECTION_NCCL_LINKS, 48, 8, 0x7ff8000000000000ULL, "not finite" },
		{ SYSOM_SECTION_NCCL_LINKS, 96, 8, inf_bits, "infinite" },
		{ SYSOM_SECTION_NCCL_LINKS, 116, 4, 1, "reserved" },
	};

	(void)state;
	build_timing_batch(&b);
	encode(&b, &buf);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t *p = buf.data + section_offset(&buf, cases[i].section) + cases[i].at;
		uint8_t saved[8];

		memcpy(saved, p, cases[i].size);
		if (cases[i].size == 4)
			store_le32(p, (uint32_t)cases[i].value);
		else
			store_le64(p, cases[i].value);
		expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, cases[i].fragment);
		memcpy(p, saved, cases[i].size);
	}
	expect_corrupt(buf.data, buf.len, 0, NULL);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

static void test_timing_limits_and_flips(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;
	struct sysom_wire_limits limits;
	uint32_t *fields[] = { &limits.max_gpu_kernels, &limits.max_nccl_profiles,
			       &limits.max_nccl_links };
	static const char *const names[] = { "GPU_KERNELS", "NCCL_PROFILES", "NCCL_LINKS" };

	(void)state;
	build_timing_batch(&b);
	encode(&b, &buf);
	for (size_t i = 0; i < 3; i++) {
		limits = sysom_wire_default_limits;
		*fields[i] = 0;
		assert_int_equal(sysom_batch_decode(buf.data, buf.len, &limits, &d, &err), -SYSOM_ELIMIT);
		if (!strstr(err.message, names[i]) || !strstr(err.message, "limit"))
			fail_msg("'%s' lacks %s", err.message, names[i]);
		sysom_batch_free(&d);
	}
	for (size_t i = 0; i < buf.len; i++) {
		buf.data[i] ^= 0x81;
		int rc = sysom_batch_decode(buf.data, buf.len, NULL, &d, &err);
		assert_true(rc == 0 || rc == -SYSOM_ECORRUPT || rc == -SYSOM_ELIMIT ||
			    rc == -SYSOM_EVERSION);
		for (uint32_t k = 0; rc == 0 && k < d.gpu_kernel_count; k++)
			assert_true(d.gpu_kernels[k].min_ns <= d.gpu_kernels[k].max_ns);
		for (uint32_t k = 0; rc == 0 && k < d.nccl_link_count; k++)
			assert_true(isfinite(d.nccl_links[k].sxy));
		sysom_batch_free(&d);
		buf.data[i] ^= 0x81;
	}
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

/* ---- minor 3: OS signals ---- */

/* The timing batch plus two CPUs, two (CPU, IRQ) rows and two threads of process 0. */
static void build_os_batch(struct sysom_batch *b)
{
	uint32_t nic, disk, comm1, comm2;

	build_timing_batch(b);
	assert_int_equal(sysom_batch_intern_cstring(b, "mlx5_comp3@pci:0000:3b:00.0", &nic), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "nvme0q4", &disk), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "pt_main_thread", &comm1), 0);
	assert_int_equal(sysom_batch_intern_cstring(b, "NCCL Proxy", &comm2), 0);
	struct sysom_os_cpu c = { .cpu = 3, .numa_node = 0, .busy_ns = 29000000000ULL,
				  .hardirq_count = 5000, .hardirq_ns = 9000000,
				  .context_switches = 12000, .runq_wait_ns = 45000000 };
	c.softirq_count[SYSOM_SOFTIRQ_NET_RX] = 4000;
	c.softirq_ns[SYSOM_SOFTIRQ_NET_RX] = 70000000;
	c.softirq_count[SYSOM_SOFTIRQ_TIMER] = 7500;
	c.softirq_ns[SYSOM_SOFTIRQ_TIMER] = 1500000;
	assert_int_equal(sysom_batch_add_os_cpu(b, &c), 0);
	c.cpu = 130;
	c.numa_node = -1;
	assert_int_equal(sysom_batch_add_os_cpu(b, &c), 0);
	struct sysom_os_irq q = { .cpu = 3, .irq = 211, .name = nic, .count = 4800,
				  .ns = 8500000 };
	assert_int_equal(sysom_batch_add_os_irq(b, &q), 0);
	q = (struct sysom_os_irq){ .cpu = 3, .irq = 90, .name = disk, .count = 200, .ns = 500000 };
	assert_int_equal(sysom_batch_add_os_irq(b, &q), 0);
	struct sysom_os_thread t = { .process = 0, .tid = 4243, .comm = comm1,
				     .oncpu_ns = 25000000000ULL, .runq_wait_ns = 30000000,
				     .runq_waits = 900, .voluntary_switches = 700,
				     .involuntary_switches = 210, .migrations = 12,
				     .numa_migrations = 2, .pages_migrated = 4096,
				     .hardirq_ns = 6000000, .softirq_ns = 50000000 };
	t.runq_hist[0] = 500;
	t.runq_hist[3] = 300;
	t.runq_hist[10] = 90;
	t.cpus[0] = 1ull << 3;
	t.cpus[2] = 1ull << (130 - 128);
	assert_int_equal(sysom_batch_add_os_thread(b, &t), 0);
	t = (struct sysom_os_thread){ .process = 0, .tid = 4250, .comm = comm2, .oncpu_ns = 1000,
				      .voluntary_switches = 1 };
	t.cpus[3] = 1ull << 63;
	assert_int_equal(sysom_batch_add_os_thread(b, &t), 0);
}

static void test_os_round_trip(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf, again = { 0 };
	struct sysom_wire_error err;

	(void)state;
	build_os_batch(&b);
	encode(&b, &buf);
	assert_int_equal(load_le16(buf.data + 6), SYSOM_WIRE_MINOR);
	write_seed("batch-os-raw", buf.data, buf.len, false);
	write_seed("batch-os-zstd", buf.data, buf.len, true);
	assert_int_equal(section_entry(&buf, 15)[0], SYSOM_SECTION_OS_CPUS);
	assert_int_equal(load_le32(section_entry(&buf, 15) + 12), 2 * SYSOM_OS_CPU_RECORD_SIZE);
	assert_int_equal(load_le32(section_entry(&buf, 16) + 12), 2 * SYSOM_OS_IRQ_RECORD_SIZE);
	assert_int_equal(load_le32(section_entry(&buf, 17) + 12), 2 * SYSOM_OS_THREAD_RECORD_SIZE);
	if (sysom_batch_decode(buf.data, buf.len, NULL, &d, &err))
		fail_msg("decode: %s", err.message);
	assert_int_equal(d.os_cpu_count, 2);
	assert_memory_equal(&d.os_cpus[0], &b.os_cpus[0], sizeof(d.os_cpus[0]));
	assert_memory_equal(&d.os_cpus[1], &b.os_cpus[1], sizeof(d.os_cpus[1]));
	assert_int_equal(d.os_cpus[1].numa_node, -1);
	assert_int_equal(d.os_cpus[0].softirq_ns[SYSOM_SOFTIRQ_NET_RX], 70000000);
	assert_int_equal(d.os_irq_count, 2);
	assert_int_equal(d.os_irqs[0].irq, 211);
	assert_int_equal(d.os_irqs[0].count, 4800);
	assert_int_equal(d.os_irqs[0].ns, 8500000);
	assert_string_equal(sysom_batch_string(&d, d.os_irqs[0].name), "mlx5_comp3@pci:0000:3b:00.0");
	assert_int_equal(d.os_thread_count, 2);
	const struct sysom_os_thread *t = &d.os_threads[0];
	assert_int_equal(t->tid, 4243);
	assert_string_equal(sysom_batch_string(&d, t->comm), "pt_main_thread");
	assert_int_equal(t->oncpu_ns, 25000000000ULL);
	assert_int_equal(t->runq_wait_ns, 30000000);
	assert_int_equal(t->runq_waits, 900);
	assert_memory_equal(t->runq_hist, b.os_threads[0].runq_hist, sizeof(t->runq_hist));
	assert_int_equal(t->voluntary_switches, 700);
	assert_int_equal(t->involuntary_switches, 210);
	assert_int_equal(t->migrations, 12);
	assert_int_equal(t->numa_migrations, 2);
	assert_int_equal(t->pages_migrated, 4096);
	assert_int_equal(t->hardirq_ns, 6000000);
	assert_int_equal(t->softirq_ns, 50000000);
	assert_int_equal(t->cpus[0], 1ull << 3);
	assert_int_equal(t->cpus[2], 1ull << 2);
	assert_int_equal(d.os_threads[1].cpus[3], 1ull << 63);
	assert_int_equal(sysom_batch_encode(&d, &again), 0);
	assert_int_equal(again.len, buf.len);
	assert_memory_equal(again.data, buf.data, buf.len);
	byte_buf_free(&again);
	byte_buf_free(&buf);
	sysom_batch_free(&d);
	sysom_batch_free(&b);
}

/* Rows of one key merge the way windows add up; what the decoder refuses, the builder refuses. */
static void test_os_builder(void **state)
{
	struct sysom_batch b;
	uint32_t other;

	(void)state;
	build_os_batch(&b);
	assert_int_equal(sysom_batch_intern_cstring(&b, "renamed", &other), 0);

	struct sysom_os_cpu c = b.os_cpus[0];
	c.numa_node = -1; /* unknown: the row keeps its node */
	assert_int_equal(sysom_batch_add_os_cpu(&b, &c), 0);
	assert_int_equal(b.os_cpu_count, 2);
	assert_int_equal(b.os_cpus[0].numa_node, 0);
	assert_int_equal(b.os_cpus[0].busy_ns, 58000000000ULL);
	assert_int_equal(b.os_cpus[0].softirq_count[SYSOM_SOFTIRQ_NET_RX], 8000);
	assert_int_equal(b.os_cpus[0].softirq_ns[SYSOM_SOFTIRQ_TIMER], 3000000);
	assert_int_equal(b.os_cpus[0].context_switches, 24000);
	c = b.os_cpus[1];
	c.numa_node = 1;
	c.busy_ns = UINT64_MAX;
	assert_int_equal(sysom_batch_add_os_cpu(&b, &c), 0);
	assert_int_equal(b.os_cpus[1].numa_node, 1);
	assert_int_equal(b.os_cpus[1].busy_ns, UINT64_MAX); /* saturates */
	c.cpu = 7;
	assert_int_equal(sysom_batch_add_os_cpu(&b, &c), 0);
	assert_int_equal(b.os_cpu_count, 3);

	struct sysom_os_irq q = b.os_irqs[0];
	q.name = 0; /* no name this time: the row keeps its own */
	assert_int_equal(sysom_batch_add_os_irq(&b, &q), 0);
	assert_int_equal(b.os_irq_count, 2);
	assert_int_equal(b.os_irqs[0].count, 9600);
	assert_int_equal(b.os_irqs[0].ns, 17000000);
	assert_string_equal(sysom_batch_string(&b, b.os_irqs[0].name), "mlx5_comp3@pci:0000:3b:00.0");
	q.name = other;
	assert_int_equal(sysom_batch_add_os_irq(&b, &q), 0);
	assert_string_equal(sysom_batch_string(&b, b.os_irqs[0].name), "renamed");
	q.cpu = 4; /* another CPU: another row */
	assert_int_equal(sysom_batch_add_os_irq(&b, &q), 0);
	assert_int_equal(b.os_irq_count, 3);

	struct sysom_os_thread t = b.os_threads[0];
	memset(t.cpus, 0, sizeof(t.cpus));
	t.cpus[1] = 1;
	t.comm = other;
	t.runq_hist[10] = UINT32_MAX;
	t.runq_waits = t.runq_waits + UINT32_MAX;
	assert_int_equal(sysom_batch_add_os_thread(&b, &t), 0);
	assert_int_equal(b.os_thread_count, 2);
	const struct sysom_os_thread *m = &b.os_threads[0];
	assert_int_equal(m->oncpu_ns, 50000000000ULL);
	assert_int_equal(m->runq_hist[0], 1000);
	assert_int_equal(m->runq_hist[10], UINT32_MAX); /* saturates */
	assert_int_equal(m->voluntary_switches, 1400);
	assert_int_equal(m->numa_migrations, 4);
	assert_int_equal(m->cpus[0], 1ull << 3);
	assert_int_equal(m->cpus[1], 1);
	assert_int_equal(m->cpus[2], 1ull << 2);
	assert_string_equal(sysom_batch_string(&b, m->comm), "renamed");
	t.tid = 1; /* another thread */
	assert_int_equal(sysom_batch_add_os_thread(&b, &t), 0);
	assert_int_equal(b.os_thread_count, 3);
	/* The merged batch still decodes. */
	struct byte_buf buf;
	encode(&b, &buf);
	expect_corrupt(buf.data, buf.len, 0, NULL);
	byte_buf_free(&buf);

	/* Refusals. */
	c = b.os_cpus[0];
	c.cpu = SYSOM_OS_CPU_LIMIT;
	assert_int_equal(sysom_batch_add_os_cpu(&b, &c), -EINVAL);
	c = b.os_cpus[0];
	c.numa_node = -2;
	assert_int_equal(sysom_batch_add_os_cpu(&b, &c), -EINVAL);
	c = b.os_cpus[0];
	c.hardirq_count = 0;
	assert_int_equal(sysom_batch_add_os_cpu(&b, &c), -EINVAL);
	c = b.os_cpus[0];
	c.softirq_count[SYSOM_SOFTIRQ_NET_RX] = 0;
	assert_int_equal(sysom_batch_add_os_cpu(&b, &c), -EINVAL);
	q = b.os_irqs[0];
	q.count = 0;
	assert_int_equal(sysom_batch_add_os_irq(&b, &q), -EINVAL);
	q = b.os_irqs[0];
	q.name = b.string_count;
	assert_int_equal(sysom_batch_add_os_irq(&b, &q), -EINVAL);
	q = b.os_irqs[0];
	q.cpu = UINT32_MAX;
	assert_int_equal(sysom_batch_add_os_irq(&b, &q), -EINVAL);
	t = b.os_threads[1];
	t.process = b.process_count;
	assert_int_equal(sysom_batch_add_os_thread(&b, &t), -EINVAL);
	t = b.os_threads[1];
	t.tid = 0;
	assert_int_equal(sysom_batch_add_os_thread(&b, &t), -EINVAL);
	t = b.os_threads[1];
	t.comm = b.string_count;
	assert_int_equal(sysom_batch_add_os_thread(&b, &t), -EINVAL);
	t = b.os_threads[0];
	t.runq_waits = 0;
	assert_int_equal(sysom_batch_add_os_thread(&b, &t), -EINVAL);
	t = b.os_threads[0];
	t.numa_migrations = t.migrations + 1;
	assert_int_equal(sysom_batch_add_os_thread(&b, &t), -EINVAL);
	/* An all-zero CPU mask is allowed: the thread ran only on CPUs past the mask's 256. */
	t = b.os_threads[1];
	memset(t.cpus, 0, sizeof(t.cpus));
	t.tid = 99;
	assert_int_equal(sysom_batch_add_os_thread(&b, &t), 0);
	assert_int_equal(b.os_cpu_count, 3);
	assert_int_equal(b.os_irq_count, 3);
	sysom_batch_free(&b);
}

/* Each broken rule of the OS sections is refused as corrupt, with a message saying which. */
static void test_os_corruptions(void **state)
{
	struct sysom_batch b;
	struct byte_buf buf;
	static const struct {
		uint16_t section;
		uint32_t record;
		uint32_t at;
		uint32_t size;
		uint64_t value;
		const char *fragment;
	} cases[] = {
		{ SYSOM_SECTION_OS_CPUS, 0, 0, 4, SYSOM_OS_CPU_LIMIT, "cpu out of range" },
		{ SYSOM_SECTION_OS_CPUS, 0, 4, 4, (uint32_t)-2, "NUMA node" },
		{ SYSOM_SECTION_OS_CPUS, 0, 16, 8, 0, "hard interrupt time without" },
		{ SYSOM_SECTION_OS_CPUS, 0, 32 + 8 * SYSOM_SOFTIRQ_NET_RX, 8, 0, "softirq time without" },
		{ SYSOM_SECTION_OS_CPUS, 0, 32 + 8 * SYSOM_SOFTIRQ_TIMER, 8, 0, "softirq time without" },
		{ SYSOM_SECTION_OS_CPUS, 1, 0, 4, 3, "cpu 3 repeated" },
		{ SYSOM_SECTION_OS_IRQS, 0, 0, 4, SYSOM_OS_CPU_LIMIT, "cpu out of range" },
		{ SYSOM_SECTION_OS_IRQS, 0, 8, 4, 99999, "name out of range" },
		{ SYSOM_SECTION_OS_IRQS, 0, 12, 4, 1, "reserved" },
		{ SYSOM_SECTION_OS_IRQS, 0, 16, 8, 0, "zero count" },
		{ SYSOM_SECTION_OS_IRQS, 1, 4, 4, 211, "cpu 3 irq 211 repeated" },
		{ SYSOM_SECTION_OS_THREADS, 0, 0, 4, 1, "process out of range" },
		{ SYSOM_SECTION_OS_THREADS, 0, 4, 4, 0, "tid 0" },
		{ SYSOM_SECTION_OS_THREADS, 0, 8, 4, 99999, "comm out of range" },
		{ SYSOM_SECTION_OS_THREADS, 0, 12, 4, 1, "reserved" },
		{ SYSOM_SECTION_OS_THREADS, 0, 32, 8, 889, "histogram holds more waits" },
		{ SYSOM_SECTION_OS_THREADS, 0, 40 + 4 * 19, 4, 11, "histogram holds more waits" },
		{ SYSOM_SECTION_OS_THREADS, 0, 136, 8, 1, "more NUMA migrations" },
		{ SYSOM_SECTION_OS_THREADS, 0, 208, 8, 1, "reserved" },
		{ SYSOM_SECTION_OS_THREADS, 0, 216, 8, 1ull << 63, "reserved" },
		{ SYSOM_SECTION_OS_THREADS, 1, 4, 4, 4243, "process 0 tid 4243 repeated" },
	};
	static const uint32_t record_size[] = {
		[SYSOM_SECTION_OS_CPUS] = SYSOM_OS_CPU_RECORD_SIZE,
		[SYSOM_SECTION_OS_IRQS] = SYSOM_OS_IRQ_RECORD_SIZE,
		[SYSOM_SECTION_OS_THREADS] = SYSOM_OS_THREAD_RECORD_SIZE,
	};

	(void)state;
	build_os_batch(&b);
	encode(&b, &buf);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t *p = buf.data + section_offset(&buf, cases[i].section) +
			     cases[i].record * record_size[cases[i].section] + cases[i].at;
		uint8_t saved[8];

		memcpy(saved, p, cases[i].size);
		if (cases[i].size == 4)
			store_le32(p, (uint32_t)cases[i].value);
		else
			store_le64(p, cases[i].value);
		expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, cases[i].fragment);
		memcpy(p, saved, cases[i].size);
	}
	expect_corrupt(buf.data, buf.len, 0, NULL);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

static void test_os_limits_and_flips(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;
	struct sysom_wire_limits limits;
	uint32_t *fields[] = { &limits.max_os_cpus, &limits.max_os_irqs, &limits.max_os_threads };
	static const char *const names[] = { "OS_CPUS", "OS_IRQS", "OS_THREADS" };

	(void)state;
	assert_int_equal(sysom_wire_default_limits.max_os_cpus, 4096);
	assert_int_equal(sysom_wire_default_limits.max_os_irqs, 65536);
	assert_int_equal(sysom_wire_default_limits.max_os_threads, 65536);
	build_os_batch(&b);
	encode(&b, &buf);
	for (size_t i = 0; i < 3; i++) {
		limits = sysom_wire_default_limits;
		*fields[i] = 1;
		assert_int_equal(sysom_batch_decode(buf.data, buf.len, &limits, &d, &err), -SYSOM_ELIMIT);
		if (!strstr(err.message, names[i]) || !strstr(err.message, "limit"))
			fail_msg("'%s' lacks %s", err.message, names[i]);
		sysom_batch_free(&d);
	}
	/* A record count that disagrees with the section size; a forged huge count. */
	for (int i = 15; i < 18; i++) {
		uint8_t *e = section_entry(&buf, i);
		char want[32];

		snprintf(want, sizeof(want), "%s: size", names[i - 15]);
		store_le32(e + 4, 3);
		expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, want);
		store_le32(e + 4, 0x7fffffff);
		expect_corrupt(buf.data, buf.len, -SYSOM_ELIMIT, "limit");
		store_le32(e + 4, 2);
	}
	expect_corrupt(buf.data, buf.len, 0, NULL);
	for (size_t len = 0; len < buf.len; len += 11) {
		int rc = sysom_batch_decode(buf.data, len, NULL, &d, &err);
		if (rc != -SYSOM_ECORRUPT)
			fail_msg("prefix %zu: rc %d (%s)", len, rc, err.message);
		sysom_batch_free(&d);
	}
	for (size_t i = 0; i < buf.len; i++) {
		buf.data[i] ^= 0x81;
		int rc = sysom_batch_decode(buf.data, buf.len, NULL, &d, &err);
		assert_true(rc == 0 || rc == -SYSOM_ECORRUPT || rc == -SYSOM_ELIMIT ||
			    rc == -SYSOM_EVERSION);
		for (uint32_t k = 0; rc == 0 && k < d.os_thread_count; k++) {
			uint64_t sum = 0;
			for (int h = 0; h < SYSOM_RUNQ_HIST_BUCKETS; h++)
				sum += d.os_threads[k].runq_hist[h];
			assert_true(sum <= d.os_threads[k].runq_waits);
			assert_true(d.os_threads[k].numa_migrations <= d.os_threads[k].migrations);
			assert_true(d.os_threads[k].process < d.process_count);
		}
		for (uint32_t k = 0; rc == 0 && k < d.os_irq_count; k++)
			assert_true(d.os_irqs[k].count > 0 && d.os_irqs[k].cpu < SYSOM_OS_CPU_LIMIT);
		sysom_batch_free(&d);
		buf.data[i] ^= 0x81;
	}
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

/* A 1.2 batch (no OS sections) still decodes; a 1.2 reader, which does not know sections
 * 16-18, skips them (what an older server does with this agent's batches). */
static void test_minor2_batch_and_old_reader(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;

	(void)state;
	build_timing_batch(&b);
	encode(&b, &buf);
	for (int i = 15; i < 18; i++)
		assert_int_equal(load_le32(section_entry(&buf, i) + 12), 0);
	store_le16(buf.data + 6, 2);
	store_le16(buf.data + 10, 15);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, NULL), 0);
	assert_int_equal(d.minor, 2);
	assert_int_equal(d.nccl_link_count, 1);
	assert_int_equal(d.os_cpu_count + d.os_irq_count + d.os_thread_count, 0);
	sysom_batch_free(&d);
	byte_buf_free(&buf);
	sysom_batch_free(&b);

	/* The OS sections under type numbers this decoder does not know: skipped. */
	build_os_batch(&b);
	encode(&b, &buf);
	for (int i = 15; i < 18; i++)
		store_le16(section_entry(&buf, i), (uint16_t)(40 + i));
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, NULL), 0);
	assert_int_equal(d.os_cpu_count + d.os_irq_count + d.os_thread_count, 0);
	assert_int_equal(d.nccl_link_count, 1);
	sysom_batch_free(&d);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

static void test_os_names(void **state)
{
	static const char *const names[] = { "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK",
					     "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU" };

	(void)state;
	for (uint32_t v = 0; v < SYSOM_SOFTIRQ_COUNT; v++)
		assert_string_equal(sysom_softirq_name(v), names[v]);
	assert_null(sysom_softirq_name(SYSOM_SOFTIRQ_COUNT));
	assert_null(sysom_softirq_name(UINT32_MAX));
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_OS_THREADS_LOST), "os_threads_lost");
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_OS_IRQS_LOST), "os_irqs_lost");
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_OS_ROWS_DROPPED), "os_rows_dropped");
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_OS_ATTACH_ERRORS), "os_attach_errors");
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_OS_TRACKED), "os_tracked_processes");
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_UPLOAD_REFUSED_EARLY),
			    "upload_refused_early");
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_UPLOAD_REFUSED_BYTES),
			    "upload_refused_body_bytes");
	assert_null(sysom_counter_name(SYSOM_COUNTER_MAX - 1)); /* not assigned */
	assert_null(sysom_counter_name(SYSOM_COUNTER_MAX));
	/* Run-queue buckets: < 2 µs, then [2^i, 2^(i+1)) µs, the last open-ended. */
	assert_int_equal(sysom_runq_hist_bucket(0), 0);
	assert_int_equal(sysom_runq_hist_bucket(1999), 0);
	assert_int_equal(sysom_runq_hist_bucket(2000), 1);
	assert_int_equal(sysom_runq_hist_bucket(3999), 1);
	assert_int_equal(sysom_runq_hist_bucket(4000), 2);
	assert_int_equal(sysom_runq_hist_bucket(1024000), 10);
	assert_int_equal(sysom_runq_hist_bucket(524288000ULL), 19);
	assert_int_equal(sysom_runq_hist_bucket(UINT64_MAX), 19);
}


/* ---- minor 4: off-CPU time ---- */

/* The OS batch plus two off-CPU rows of process 0: a sleep on both stacks, a D-state block
 * with only a kernel stack. Stacks 0 (kernel) and 1 (user) come from the sample batch. */
static void build_offcpu_batch(struct sysom_batch *b)
{
	uint32_t comm;

	build_os_batch(b);
	assert_int_equal(sysom_batch_intern_cstring(b, "pt_data_worker", &comm), 0);
	struct sysom_offcpu o = { .process = 0, .tid = 4244, .time_offset_ms = 5000,
				  .kernel_stack = 0, .user_stack = 1, .thread_comm = comm,
				  .state = SYSOM_OFFCPU_SLEEP, .count = 40,
				  .blocked_ns = 2000000000ULL, .max_ns = 100000000ULL };
	assert_int_equal(sysom_batch_add_offcpu(b, &o), 0);
	o = (struct sysom_offcpu){ .process = 0, .tid = 4244, .time_offset_ms = 10000,
				   .kernel_stack = 0, .user_stack = SYSOM_WIRE_NONE,
				   .thread_comm = comm, .state = SYSOM_OFFCPU_DISK, .count = 1,
				   .blocked_ns = 7000000, .max_ns = 7000000 };
	assert_int_equal(sysom_batch_add_offcpu(b, &o), 0);
}

static void test_offcpu_round_trip(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;

	(void)state;
	build_offcpu_batch(&b);
	encode(&b, &buf);
	assert_int_equal(load_le16(buf.data + 6), SYSOM_WIRE_MINOR);
	write_seed("batch-offcpu-raw", buf.data, buf.len, false);
	assert_int_equal(section_entry(&buf, 18)[0], SYSOM_SECTION_OFFCPU);
	assert_int_equal(load_le32(section_entry(&buf, 18) + 4), 2);
	assert_int_equal(load_le32(section_entry(&buf, 18) + 12), 2 * SYSOM_OFFCPU_RECORD_SIZE);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, &err), 0);
	assert_int_equal(d.offcpu_count, 2);
	for (int i = 0; i < 2; i++) {
		const struct sysom_offcpu *x = &d.offcpu[i], *y = &b.offcpu[i];
		assert_int_equal(x->process, y->process);
		assert_int_equal(x->tid, y->tid);
		assert_int_equal(x->time_offset_ms, y->time_offset_ms);
		assert_int_equal(x->kernel_stack, y->kernel_stack);
		assert_int_equal(x->user_stack, y->user_stack);
		assert_int_equal(x->thread_comm, y->thread_comm);
		assert_int_equal(x->state, y->state);
		assert_int_equal(x->count, y->count);
		assert_int_equal(x->blocked_ns, y->blocked_ns);
		assert_int_equal(x->max_ns, y->max_ns);
	}
	assert_int_equal(d.offcpu[0].state, SYSOM_OFFCPU_SLEEP);
	assert_int_equal(d.offcpu[1].state, SYSOM_OFFCPU_DISK);
	assert_int_equal(d.offcpu[1].user_stack, SYSOM_WIRE_NONE);
	assert_string_equal(sysom_batch_string(&d, d.offcpu[0].thread_comm), "pt_data_worker");
	assert_true(sysom_batch_decode_memory(buf.data, buf.len, NULL) >= sysom_batch_memory(&d));
	sysom_batch_free(&d);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

static void test_offcpu_builder(void **state)
{
	struct sysom_batch b;
	struct sysom_offcpu o;

	(void)state;
	build_offcpu_batch(&b);
	/* Same key: counts and totals add, the longest wins. */
	o = b.offcpu[0];
	o.count = 2;
	o.blocked_ns = 300000000ULL;
	o.max_ns = 250000000ULL;
	assert_int_equal(sysom_batch_add_offcpu(&b, &o), 0);
	assert_int_equal(b.offcpu_count, 2);
	assert_int_equal(b.offcpu[0].count, 42);
	assert_int_equal(b.offcpu[0].blocked_ns, 2300000000ULL);
	assert_int_equal(b.offcpu[0].max_ns, 250000000ULL);
	/* Another state is another row. */
	o.state = SYSOM_OFFCPU_OTHER;
	assert_int_equal(sysom_batch_add_offcpu(&b, &o), 0);
	assert_int_equal(b.offcpu_count, 3);
	/* What the decoder would refuse. */
	o = b.offcpu[0]; o.count = 0;
	assert_int_equal(sysom_batch_add_offcpu(&b, &o), -EINVAL);
	o = b.offcpu[0]; o.max_ns = 0;
	assert_int_equal(sysom_batch_add_offcpu(&b, &o), -EINVAL);
	o = b.offcpu[0]; o.max_ns = o.blocked_ns + 1;
	assert_int_equal(sysom_batch_add_offcpu(&b, &o), -EINVAL);
	o = b.offcpu[0]; o.state = 0;
	assert_int_equal(sysom_batch_add_offcpu(&b, &o), -EINVAL);
	o = b.offcpu[0]; o.state = 4;
	assert_int_equal(sysom_batch_add_offcpu(&b, &o), -EINVAL);
	o = b.offcpu[0]; o.process = 1;
	assert_int_equal(sysom_batch_add_offcpu(&b, &o), -EINVAL);
	o = b.offcpu[0]; o.kernel_stack = o.user_stack = SYSOM_WIRE_NONE;
	assert_int_equal(sysom_batch_add_offcpu(&b, &o), -EINVAL);
	o = b.offcpu[0]; o.kernel_stack = 1; /* a user stack */
	assert_int_equal(sysom_batch_add_offcpu(&b, &o), -EINVAL);
	o = b.offcpu[0]; o.user_stack = 99;
	assert_int_equal(sysom_batch_add_offcpu(&b, &o), -EINVAL);
	o = b.offcpu[0]; o.thread_comm = 99999;
	assert_int_equal(sysom_batch_add_offcpu(&b, &o), -EINVAL);
	assert_int_equal(b.offcpu_count, 3);
	assert_string_equal(sysom_offcpu_state_name(SYSOM_OFFCPU_DISK), "D");
	assert_null(sysom_offcpu_state_name(0));
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_OFFCPU_FP_FALLBACK),
			    "offcpu_fp_fallback");
	sysom_batch_free(&b);
}

static void test_offcpu_corruptions(void **state)
{
	struct sysom_batch b;
	struct byte_buf buf;
	static const struct {
		uint32_t record;
		uint32_t at;
		uint32_t size;
		uint64_t value;
		const char *fragment;
	} cases[] = {
		{ 0, 0, 4, 1, "process 1 out of range" },
		{ 0, 8, 4, 30001, "beyond the 30000 ms window" },
		{ 1, 12, 4, SYSOM_WIRE_NONE, "neither a kernel nor a user stack" },
		{ 0, 12, 4, 1, "is not a kernel stack" },
		{ 0, 16, 4, 0, "is not a user stack" },
		{ 0, 16, 4, 77, "out of range" },
		{ 0, 20, 4, 99999, "out of range" },
		{ 0, 24, 1, 0, "unknown state 0" },
		{ 0, 24, 1, 4, "unknown state 4" },
		{ 0, 25, 1, 1, "reserved" },
		{ 0, 28, 4, 1, "reserved" },
		{ 0, 32, 8, 0, "zero count" },
		{ 0, 48, 8, 0, "longest block 0 ns" },
		{ 1, 48, 8, 7000001, "not in 1..total" },
	};

	(void)state;
	build_offcpu_batch(&b);
	encode(&b, &buf);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t *p = buf.data + section_offset(&buf, SYSOM_SECTION_OFFCPU) +
			     cases[i].record * SYSOM_OFFCPU_RECORD_SIZE + cases[i].at;
		uint8_t saved[8];

		memcpy(saved, p, cases[i].size);
		if (cases[i].size == 1)
			*p = (uint8_t)cases[i].value;
		else if (cases[i].size == 4)
			store_le32(p, (uint32_t)cases[i].value);
		else
			store_le64(p, cases[i].value);
		expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, cases[i].fragment);
		memcpy(p, saved, cases[i].size);
	}
	expect_corrupt(buf.data, buf.len, 0, NULL);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

static void test_offcpu_limits_and_flips(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;
	struct sysom_wire_limits limits = sysom_wire_default_limits;

	(void)state;
	assert_int_equal(sysom_wire_default_limits.max_offcpu, 1u << 20);
	build_offcpu_batch(&b);
	encode(&b, &buf);
	limits.max_offcpu = 1;
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, &limits, &d, &err), -SYSOM_ELIMIT);
	if (!strstr(err.message, "OFFCPU") || !strstr(err.message, "limit"))
		fail_msg("'%s' lacks OFFCPU", err.message);
	sysom_batch_free(&d);
	uint8_t *e = section_entry(&buf, 18);
	store_le32(e + 4, 3);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "OFFCPU: size");
	store_le32(e + 4, 2);
	/* Every single-bit flip in the section decodes or is refused, never crashes. */
	size_t off = section_offset(&buf, SYSOM_SECTION_OFFCPU);
	for (size_t i = off; i < off + 2 * SYSOM_OFFCPU_RECORD_SIZE; i++) {
		for (int bit = 0; bit < 8; bit++) {
			buf.data[i] ^= (uint8_t)(1u << bit);
			int rc = sysom_batch_decode(buf.data, buf.len, NULL, &d, &err);
			assert_true(rc == 0 || rc == -SYSOM_ECORRUPT);
			sysom_batch_free(&d);
			buf.data[i] ^= (uint8_t)(1u << bit);
		}
	}
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

#define CID "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define PUID "6f9d1c2e-1b2a-4c3d-8e4f-0a1b2c3d4e5f"

static uint32_t str(struct sysom_batch *b, const char *s)
{
	uint32_t idx;

	assert_int_equal(sysom_batch_intern_cstring(b, s, &idx), 0);
	return idx;
}

/* Two processes: one in a Kubernetes container, one in a Slurm step under a systemd scope. */
static void build_identity_batch(struct sysom_batch *b)
{
	struct sysom_process p = { .tgid = 4300, .generation = 1, .start_time_ns = 99,
				   .comm = 0, .exe = 0, .cmdline = 0, .ppid = 1 };
	uint32_t second;

	build_offcpu_batch(b);
	assert_int_equal(sysom_batch_add_process(b, &p, &second), 0);
	struct sysom_identity id = {
		.process = 0, .runtime = SYSOM_RUNTIME_CONTAINERD, .container_id = str(b, CID),
		.pod_uid = str(b, PUID), .pod_namespace = str(b, "training"),
		.pod_name = str(b, "llama-worker-3"), .container_name = str(b, "trainer"),
		.unit = str(b, "cri-containerd-" CID ".scope"),
	};
	assert_int_equal(sysom_batch_set_identity(b, &id), 0);
	id = (struct sysom_identity){ .process = second, .slurm_job = 4242,
				      .slurm_step = str(b, "batch"),
				      .unit = str(b, "slurmstepd.scope") };
	assert_int_equal(sysom_batch_set_identity(b, &id), 0);
}

static void test_identity_round_trip(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;

	(void)state;
	build_identity_batch(&b);
	encode(&b, &buf);
	assert_int_equal(load_le16(buf.data + 6), SYSOM_WIRE_MINOR);
	write_seed("batch-identity-raw", buf.data, buf.len, false);
	assert_int_equal(load_le16(section_entry(&buf, 19)), SYSOM_SECTION_IDENTITIES);
	assert_int_equal(load_le32(section_entry(&buf, 19) + 4), 2);
	assert_int_equal(load_le32(section_entry(&buf, 19) + 12), 2 * SYSOM_IDENTITY_RECORD_SIZE);
	if (sysom_batch_decode(buf.data, buf.len, NULL, &d, &err))
		fail_msg("decode: %s", err.message);
	assert_int_equal(d.identity_count, 2);
	const struct sysom_identity *x = &d.identities[0], *y = &d.identities[1];
	assert_int_equal(x->process, 0);
	assert_int_equal(x->runtime, SYSOM_RUNTIME_CONTAINERD);
	assert_string_equal(sysom_batch_string(&d, x->container_id), CID);
	assert_string_equal(sysom_batch_string(&d, x->pod_uid), PUID);
	assert_string_equal(sysom_batch_string(&d, x->pod_namespace), "training");
	assert_string_equal(sysom_batch_string(&d, x->pod_name), "llama-worker-3");
	assert_string_equal(sysom_batch_string(&d, x->container_name), "trainer");
	assert_int_equal(x->slurm_job, 0);
	assert_string_equal(sysom_batch_string(&d, x->slurm_step), "");
	assert_int_equal(y->process, 1);
	assert_int_equal(y->runtime, SYSOM_RUNTIME_NONE);
	assert_int_equal(y->slurm_job, 4242);
	assert_string_equal(sysom_batch_string(&d, y->slurm_step), "batch");
	assert_string_equal(sysom_batch_string(&d, y->unit), "slurmstepd.scope");
	assert_string_equal(sysom_runtime_name(x->runtime), "containerd");
	assert_null(sysom_runtime_name(SYSOM_RUNTIME_MAX + 1));
	assert_true(sysom_batch_decode_memory(buf.data, buf.len, NULL) >= sysom_batch_memory(&d));
	sysom_batch_free(&d);

	/* A 1.4 reader (and an older server) knows no section 24: it skips it. */
	store_le16(section_entry(&buf, 19), 57);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, NULL), 0);
	assert_int_equal(d.identity_count, 0);
	assert_int_equal(d.offcpu_count, 2);
	sysom_batch_free(&d);
	/* A 1.4 batch (no section 24 in the table) decodes with no identities. */
	sysom_batch_free(&b);
	byte_buf_free(&buf);
	build_offcpu_batch(&b);
	encode(&b, &buf);
	store_le16(buf.data + 6, 4);
	store_le16(buf.data + 10, 19);
	/* The dropped entry's bytes now lie between the table and the first section: legal. */
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, NULL), 0);
	assert_int_equal(d.minor, 4);
	assert_int_equal(d.identity_count, 0);
	sysom_batch_free(&d);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

/* A thermally throttled GPU 1 and a healthy GPU 0 with some fields unknown. */
static void build_gpu_health_batch(struct sysom_batch *b)
{
	build_offcpu_batch(b);
	struct sysom_gpu_health g = {
		.device = 1, .uuid = str(b, "GPU-12345678-aaaa-bbbb-cccc-1234567890ab"),
		.pci_bus_id = str(b, "00000000:3B:00.0"), .name = str(b, "NVIDIA H200"),
		.samples = 30, .slowdown_samples = 12,
		.reasons_any = SYSOM_GPU_REASON_SW_THERMAL | SYSOM_GPU_REASON_HW_THERMAL,
		.reasons_last = SYSOM_GPU_REASON_HW_THERMAL,
		.sm_clock_min = 1005, .sm_clock_last = 1200, .sm_clock_max = 1980,
		.mem_clock_last = 3201, .mem_clock_max = 3201, .temp_max = 91, .temp_last = 90,
		.temp_slowdown = 90, .temp_shutdown = 95, .power_max_mw = 690000,
		.power_last_mw = 650000, .power_limit_mw = 700000, .util_gpu = 99, .util_mem = 41,
		.ecc_corrected = 3, .ecc_uncorrected = 0, .retired_sbe = 1, .retired_dbe = 0,
		.pcie_replays = 7, .flags = SYSOM_GPU_REMAPPED_ROWS, .nvlink_errors = 2,
		.xid_count = 2, .xid_last = 79,
	};
	assert_int_equal(sysom_batch_set_gpu_health(b, &g), 0);
	g = (struct sysom_gpu_health){
		.device = 0, .samples = 30, .reasons_any = SYSOM_GPU_UNKNOWN64,
		.reasons_last = SYSOM_GPU_UNKNOWN64, .sm_clock_min = SYSOM_GPU_UNKNOWN,
		.sm_clock_last = SYSOM_GPU_UNKNOWN, .sm_clock_max = SYSOM_GPU_UNKNOWN,
		.mem_clock_last = SYSOM_GPU_UNKNOWN, .mem_clock_max = SYSOM_GPU_UNKNOWN,
		.temp_max = 40, .temp_last = 40, .temp_slowdown = SYSOM_GPU_UNKNOWN,
		.temp_shutdown = SYSOM_GPU_UNKNOWN, .power_max_mw = SYSOM_GPU_UNKNOWN,
		.power_last_mw = SYSOM_GPU_UNKNOWN, .power_limit_mw = SYSOM_GPU_UNKNOWN,
		.util_gpu = SYSOM_GPU_UNKNOWN, .util_mem = SYSOM_GPU_UNKNOWN,
		.ecc_corrected = SYSOM_GPU_UNKNOWN64, .ecc_uncorrected = SYSOM_GPU_UNKNOWN64,
		.retired_sbe = SYSOM_GPU_UNKNOWN, .retired_dbe = SYSOM_GPU_UNKNOWN,
		.pcie_replays = SYSOM_GPU_UNKNOWN, .nvlink_errors = SYSOM_GPU_UNKNOWN64,
	};
	assert_int_equal(sysom_batch_set_gpu_health(b, &g), 0);
}

static int gpu_health_section(struct byte_buf *buf)
{
	uint16_t n = load_le16(buf->data + 10);

	for (int i = 0; i < n; i++)
		if (load_le16(section_entry(buf, i)) == SYSOM_SECTION_GPU_HEALTH)
			return i;
	fail_msg("no GPU_HEALTH section");
	return -1;
}

static void test_gpu_health_round_trip(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;
	char names[256];

	(void)state;
	build_gpu_health_batch(&b);
	encode(&b, &buf);
	write_seed("batch-gpu-health-raw", buf.data, buf.len, false);
	int e = gpu_health_section(&buf);
	assert_int_equal(load_le32(section_entry(&buf, e) + 4), 2);
	assert_int_equal(load_le32(section_entry(&buf, e) + 12), 2 * SYSOM_GPU_HEALTH_RECORD_SIZE);
	if (sysom_batch_decode(buf.data, buf.len, NULL, &d, &err))
		fail_msg("decode: %s", err.message);
	assert_int_equal(d.gpu_health_count, 2);
	assert_memory_equal(&d.gpu_health[1], &b.gpu_health[1], sizeof(d.gpu_health[1]));
	const struct sysom_gpu_health *x = &d.gpu_health[0];
	assert_int_equal(x->device, 1);
	assert_string_equal(sysom_batch_string(&d, x->name), "NVIDIA H200");
	assert_string_equal(sysom_batch_string(&d, x->pci_bus_id), "00000000:3B:00.0");
	assert_int_equal(x->reasons_any, 0x60);
	assert_int_equal(x->sm_clock_min, 1005);
	assert_int_equal(x->temp_max, 91);
	assert_int_equal(x->ecc_corrected, 3);
	assert_int_equal(x->nvlink_errors, 2);
	assert_int_equal(x->xid_last, 79);
	assert_int_equal(d.gpu_health[1].sm_clock_min, SYSOM_GPU_UNKNOWN);
	assert_true(d.gpu_health[1].ecc_corrected == SYSOM_GPU_UNKNOWN64);
	sysom_gpu_reasons_format(x->reasons_any, names, sizeof(names));
	assert_string_equal(names, "sw_thermal_slowdown,hw_thermal_slowdown");
	sysom_gpu_reasons_format(0x10004ull, names, sizeof(names));
	assert_string_equal(names, "sw_power_cap,other(0x10000)");
	assert_true(sysom_batch_decode_memory(buf.data, buf.len, NULL) >= sysom_batch_memory(&d));
	sysom_batch_free(&d);

	/* A 1.5 reader knows no section 21: it skips it. */
	store_le16(section_entry(&buf, e), 58);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, NULL), 0);
	assert_int_equal(d.gpu_health_count, 0);
	sysom_batch_free(&d);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

static void test_gpu_health_builder_and_corruptions(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;
	struct sysom_wire_limits limits = sysom_wire_default_limits;

	(void)state;
	build_gpu_health_batch(&b);
	struct sysom_gpu_health good = b.gpu_health[0], bad;
#define BAD(field, value)                                                                          \
	do {                                                                                       \
		bad = good;                                                                        \
		bad.field = (value);                                                               \
		if (sysom_batch_set_gpu_health(&b, &bad) != -EINVAL)                               \
			fail_msg("bad GPU health (%s) accepted", #field);                          \
	} while (0)
	BAD(device, SYSOM_GPU_MAX_DEVICES);
	BAD(name, 99999);
	BAD(samples, 0);
	BAD(slowdown_samples, 31);
	BAD(reasons_last, 0x4);         /* not among any */
	BAD(reasons_last, SYSOM_GPU_UNKNOWN64);
	BAD(sm_clock_min, 1300);        /* above last */
	BAD(sm_clock_min, SYSOM_GPU_UNKNOWN);
	BAD(temp_last, 92);             /* above max */
	BAD(power_last_mw, 700001);
	BAD(util_gpu, 101);
	BAD(flags, 8);
	BAD(xid_count, 0);              /* code without events */
#undef BAD
	bad = good;
	bad.reasons_any = bad.reasons_last = SYSOM_GPU_UNKNOWN64; /* slowdown samples remain */
	assert_int_equal(sysom_batch_set_gpu_health(&b, &bad), -EINVAL);
	good.temp_last = 85;
	assert_int_equal(sysom_batch_set_gpu_health(&b, &good), 0); /* replaces device 1 */
	assert_int_equal(b.gpu_health_count, 2);
	assert_int_equal(b.gpu_health[0].temp_last, 85);

	encode(&b, &buf);
	int e = gpu_health_section(&buf);
	uint8_t *rec = buf.data + load_le32(section_entry(&buf, e) + 8);
	/* Each corruption is refused with a message, never a crash. */
	struct {
		size_t off;
		uint32_t value;
	} corrupt[] = {
		{ 0, 64 },                              /* device out of range */
		{ 0, 0 },                               /* device 0 repeated */
		{ 4, 0x7fffffff },                      /* uuid string */
		{ 16, 0 },                              /* samples */
		{ 20, 1000 },                           /* slowdown > samples */
		{ 40, 5000 },                           /* sm min above last */
		{ 64, 200 },                            /* temp above max */
		{ 88, 250 },                            /* utilization */
		{ 124, 0x80 },                          /* flags */
	};
	for (size_t i = 0; i < sizeof(corrupt) / sizeof(corrupt[0]); i++) {
		uint32_t saved = load_le32(rec + corrupt[i].off);

		store_le32(rec + corrupt[i].off, corrupt[i].value);
		if (sysom_batch_decode(buf.data, buf.len, NULL, &d, &err) != -SYSOM_ECORRUPT)
			fail_msg("corruption %zu accepted", i);
		assert_true(strstr(err.message, "GPU_HEALTH") != NULL);
		store_le32(rec + corrupt[i].off, saved);
	}
	/* The section's count is bounded. */
	limits.max_gpu_health = 1;
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, &limits, &d, &err), -SYSOM_ELIMIT);
	/* Bit flips anywhere in the records: decoded or refused, never a crash or a leak. */
	for (size_t bit = 0; bit < 2 * SYSOM_GPU_HEALTH_RECORD_SIZE * 8; bit += 3) {
		rec[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		if (sysom_batch_decode(buf.data, buf.len, NULL, &d, NULL) == 0)
			sysom_batch_free(&d);
		rec[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, NULL), 0);
	sysom_batch_free(&d);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

static void test_identity_builder(void **state)
{
	struct sysom_batch b;
	uint32_t cid, puid, longname, space, step;
	char big[SYSOM_IDENT_NAME_MAX + 2];

	(void)state;
	build_identity_batch(&b);
	cid = str(&b, CID);
	puid = str(&b, PUID);
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	longname = str(&b, big);
	space = str(&b, "two words");
	step = str(&b, "0");
	struct sysom_identity ok = { .process = 0, .pod_uid = puid };
	assert_int_equal(sysom_batch_set_identity(&b, &ok), 0); /* replaces process 0's */
	assert_int_equal(b.identity_count, 2);
	assert_int_equal(b.identities[0].container_id, 0);
	const struct sysom_identity bad[] = {
		{ .process = 2, .pod_uid = puid },                        /* no such process */
		{ .process = 0, .pod_uid = 99999 },                       /* string range */
		{ .process = 0 },                                         /* says nothing */
		{ .process = 0, .runtime = 6, .container_id = cid },      /* runtime */
		{ .process = 0, .container_id = cid },                    /* id without runtime */
		{ .process = 0, .runtime = SYSOM_RUNTIME_DOCKER, .unit = step }, /* reverse */
		{ .process = 0, .runtime = SYSOM_RUNTIME_DOCKER, .container_id = puid }, /* not hex */
		{ .process = 0, .pod_uid = cid },                         /* not a UUID */
		{ .process = 0, .pod_uid = puid, .pod_name = longname },  /* 254 bytes */
		{ .process = 0, .pod_uid = puid, .pod_namespace = space }, /* space */
		{ .process = 0, .pod_name = step },                       /* name without uid */
		{ .process = 0, .slurm_step = step, .unit = step },       /* step without job */
		{ .process = 0, .slurm_job = 1, .slurm_step = longname }, /* step too long */
		{ .process = 0, .unit = space },                          /* unit with a space */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (sysom_batch_set_identity(&b, &bad[i]) != -EINVAL)
			fail_msg("bad identity %zu accepted", i);
	sysom_batch_free(&b);
}

static void test_identity_corruptions_limits_flips(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;
	struct sysom_wire_limits limits = sysom_wire_default_limits;

	(void)state;
	assert_int_equal(sysom_wire_default_limits.max_identities, 1u << 16);
	build_identity_batch(&b);
	encode(&b, &buf);
	limits.max_identities = 1;
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, &limits, &d, &err), -SYSOM_ELIMIT);
	if (!strstr(err.message, "IDENTITIES") || !strstr(err.message, "limit"))
		fail_msg("'%s' lacks IDENTITIES", err.message);
	sysom_batch_free(&d);
	uint8_t *e = section_entry(&buf, 19);
	store_le32(e + 4, 3);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "IDENTITIES: size");
	store_le32(e + 4, 2);

	size_t off = section_offset(&buf, SYSOM_SECTION_IDENTITIES);
	uint8_t *r0 = buf.data + off, *r1 = r0 + SYSOM_IDENTITY_RECORD_SIZE;
	/* Specific corruptions, each undone after. */
	r0[5] = 1;
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "reserved");
	r0[5] = 0;
	r0[4] = 9;
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "runtime");
	r0[4] = SYSOM_RUNTIME_CONTAINERD;
	store_le32(r1, 0);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "repeated");
	store_le32(r1, 1);
	store_le32(r1, 7);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "process");
	store_le32(r1, 1);
	uint32_t ns = load_le32(r0 + 16);
	store_le32(r0 + 16, 1u << 30);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "string index");
	store_le32(r0 + 16, load_le32(r0 + 8)); /* the 64-hex container id is a valid name */
	store_le32(r0 + 12, 0);                 /* ... but a namespace needs a pod uid */
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "without pod uid");
	store_le32(r0 + 16, ns);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, NULL), -SYSOM_ECORRUPT);
	sysom_batch_free(&d);
	sysom_batch_free(&b);
	byte_buf_free(&buf);

	build_identity_batch(&b);
	encode(&b, &buf);
	off = section_offset(&buf, SYSOM_SECTION_IDENTITIES);
	/* A truncated section: every prefix of the batch that cuts it is refused. */
	for (size_t len = off; len < buf.len; len++) {
		int rc = sysom_batch_decode(buf.data, len, NULL, &d, &err);
		if (rc != -SYSOM_ECORRUPT)
			fail_msg("prefix %zu: rc %d", len, rc);
		sysom_batch_free(&d);
	}
	/* Every single-bit flip in the section decodes or is refused, never crashes. */
	for (size_t i = off; i < off + 2 * SYSOM_IDENTITY_RECORD_SIZE; i++) {
		for (int bit = 0; bit < 8; bit++) {
			buf.data[i] ^= (uint8_t)(1u << bit);
			int rc = sysom_batch_decode(buf.data, buf.len, NULL, &d, &err);
			assert_true(rc == 0 || rc == -SYSOM_ECORRUPT);
			sysom_batch_free(&d);
			buf.data[i] ^= (uint8_t)(1u << bit);
		}
	}
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

/* HOST_SIGNALS (1.6): round trip, builder rules, every broken rule refused, older readers skip. */
static void test_host_signals(void **state)
{
	struct sysom_batch b, d;
	struct byte_buf buf;
	struct sysom_wire_error err;
	double v;

	(void)state;
	build_sample_batch(&b);
	assert_int_equal(sysom_batch_set_host_signal(&b, SYSOM_HOST_TCP_RETRANS_SEGS, 12.5), 0);
	assert_int_equal(sysom_batch_set_host_signal(&b, SYSOM_HOST_CPU_MHZ, 2400), 0);
	assert_int_equal(sysom_batch_set_host_signal(&b, SYSOM_HOST_TCP_RETRANS_SEGS, 13.5), 0);
	assert_int_equal(b.host_signal_count, 2); /* replaced, not added */
	assert_int_equal(sysom_batch_set_host_signal(&b, 0, 1), -EINVAL);
	assert_int_equal(sysom_batch_set_host_signal(&b, SYSOM_HOST_SIGNAL_MAX + 1, 1), -EINVAL);
	assert_int_equal(sysom_batch_set_host_signal(&b, SYSOM_HOST_CPU_BUSY, NAN), -EINVAL);
	assert_int_equal(sysom_batch_set_host_signal(&b, SYSOM_HOST_CPU_BUSY, INFINITY), -EINVAL);
	assert_int_equal(sysom_batch_set_host_signal(&b, SYSOM_HOST_CPU_BUSY, -0.5), -EINVAL);
	assert_int_equal(b.host_signal_count, 2);
	assert_string_equal(sysom_host_signal_name(SYSOM_HOST_TCP_RETRANS_SEGS), "tcp_retrans_segs");
	assert_int_equal(sysom_host_signal_by_name("psi_memory_some"), SYSOM_HOST_PSI_MEM_SOME);
	assert_int_equal(sysom_host_signal_by_name("nope"), 0);
	assert_null(sysom_host_signal_name(0));
	for (uint16_t i = 1; i <= SYSOM_HOST_SIGNAL_MAX; i++)
		assert_non_null(sysom_host_signal_name(i));
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_HOST_SIGNALS), "host_signals");
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_HOST_FILES_MISSING),
			    "host_files_missing");
	assert_string_equal(sysom_counter_name(SYSOM_COUNTER_HOST_PARSE_ERRORS),
			    "host_parse_errors");
	encode(&b, &buf);
	write_seed("batch-host-signals-raw", buf.data, buf.len, false);
	assert_int_equal(load_le16(section_entry(&buf, 21)), SYSOM_SECTION_HOST_SIGNALS);
	assert_int_equal(load_le32(section_entry(&buf, 21) + 4), 2);
	if (sysom_batch_decode(buf.data, buf.len, NULL, &d, &err))
		fail_msg("decode: %s", err.message);
	assert_int_equal(d.host_signal_count, 2);
	assert_true(sysom_batch_host_signal(&d, SYSOM_HOST_TCP_RETRANS_SEGS, &v));
	assert_true(v == 13.5);
	assert_true(sysom_batch_host_signal(&d, SYSOM_HOST_CPU_MHZ, &v));
	assert_true(v == 2400);
	assert_false(sysom_batch_host_signal(&d, SYSOM_HOST_CPU_BUSY, &v)); /* unknown */
	assert_true(sysom_batch_decode_memory(buf.data, buf.len, NULL) >= sysom_batch_memory(&d));
	sysom_batch_free(&d);

	uint8_t *rec = buf.data + section_offset(&buf, SYSOM_SECTION_HOST_SIGNALS);
	uint8_t save[2 * SYSOM_HOST_SIGNAL_RECORD_SIZE];
	memcpy(save, rec, sizeof(save));
	store_le16(rec, 0);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "unknown signal 0");
	store_le16(rec, SYSOM_HOST_SIGNAL_MAX + 1);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "unknown signal");
	memcpy(rec, save, sizeof(save));
	rec[3] = 1;
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "reserved");
	memcpy(rec, save, sizeof(save));
	double bad[] = { NAN, INFINITY, -1.0 };
	for (size_t i = 0; i < 3; i++) {
		uint64_t bits;
		memcpy(&bits, &bad[i], 8);
		store_le64(rec + 8, bits);
		expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "not finite");
	}
	memcpy(rec, save, sizeof(save));
	store_le16(rec + SYSOM_HOST_SIGNAL_RECORD_SIZE, load_le16(rec));
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "repeated");
	memcpy(rec, save, sizeof(save));
	store_le32(section_entry(&buf, 21) + 4, 3);
	expect_corrupt(buf.data, buf.len, -SYSOM_ECORRUPT, "HOST_SIGNALS: size");
	store_le32(section_entry(&buf, 21) + 4, 2);
	struct sysom_wire_limits limits = sysom_wire_default_limits;
	limits.max_host_signals = 1;
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, &limits, &d, &err), -SYSOM_ELIMIT);
	assert_non_null(strstr(err.message, "HOST_SIGNALS"));
	sysom_batch_free(&d);
	/* A 1.5 reader knows no section 22: it skips it (as any unknown type). */
	store_le16(section_entry(&buf, 21), 57);
	assert_int_equal(sysom_batch_decode(buf.data, buf.len, NULL, &d, NULL), 0);
	assert_int_equal(d.host_signal_count, 0);
	assert_int_equal(d.sample_count, 2);
	sysom_batch_free(&d);
	byte_buf_free(&buf);
	sysom_batch_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_python_frames),
		cmocka_unit_test(test_dedup),
		cmocka_unit_test(test_truncation),
		cmocka_unit_test(test_trailing_bytes),
		cmocka_unit_test(test_bit_flips),
		cmocka_unit_test(test_specific_corruptions),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_unknown_section_skipped),
		cmocka_unit_test(test_empty_batch),
		cmocka_unit_test(test_gpu_round_trip),
		cmocka_unit_test(test_job_worker_round_trip),
		cmocka_unit_test(test_job_gpu_device_round_trip),
		cmocka_unit_test(test_gpu_builder),
		cmocka_unit_test(test_gpu_corruptions),
		cmocka_unit_test(test_gpu_repeats),
		cmocka_unit_test(test_gpu_limits),
		cmocka_unit_test(test_minor0_batch),
		cmocka_unit_test(test_gpu_truncation_and_flips),
		cmocka_unit_test(test_timing_round_trip),
		cmocka_unit_test(test_timing_builder),
		cmocka_unit_test(test_timing_corruptions),
		cmocka_unit_test(test_timing_limits_and_flips),
		cmocka_unit_test(test_os_round_trip),
		cmocka_unit_test(test_os_builder),
		cmocka_unit_test(test_os_corruptions),
		cmocka_unit_test(test_os_limits_and_flips),
		cmocka_unit_test(test_minor2_batch_and_old_reader),
		cmocka_unit_test(test_os_names),
		cmocka_unit_test(test_offcpu_round_trip),
		cmocka_unit_test(test_offcpu_builder),
		cmocka_unit_test(test_offcpu_corruptions),
		cmocka_unit_test(test_offcpu_limits_and_flips),
		cmocka_unit_test(test_identity_round_trip),
		cmocka_unit_test(test_identity_builder),
		cmocka_unit_test(test_gpu_health_round_trip),
		cmocka_unit_test(test_gpu_health_builder_and_corruptions),
		cmocka_unit_test(test_identity_corruptions_limits_flips),
		cmocka_unit_test(test_host_signals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
