/* SPDX-License-Identifier: Apache-2.0 */
/* sysom_batch_decode_memory: the bound holds what the decoder allocates (measured with the
 * sanitizer's hooks) on agent-shaped batches and on the worst cases per byte (empty strings,
 * one-frame stacks, interrupt rows with their index), on batches that fail late, and is 0
 * when the header is refused; and how many bytes the decoder takes per plain byte. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/bytes.h"
#include "common/error.h"
#include "common/wire/wire.h"
#include "common/wire/wire_layout.h"
#include "tests/support/heap_peak.h"

/* Decodes `raw`, checks the bound against the heap measured and the batch's own memory, and
 * returns the decoder's result. `tight`: the bound may not exceed the peak by more than 1/16. */
static int check_bound(const struct byte_buf *raw, const char *what, bool tight)
{
	struct sysom_batch b;
	struct sysom_wire_error err;
	uint64_t bound = sysom_batch_decode_memory(raw->data, raw->len, NULL), peak;
	int rc;

	heap_peak_begin();
	rc = sysom_batch_decode(raw->data, raw->len, NULL, &b, &err);
	peak = heap_peak_end();
	if (rc == 0)
		assert_true(sysom_batch_memory(&b) <= bound);
	sysom_batch_free(&b);
	if (heap_peak_available()) {
		print_message("# %s: %zu plain bytes, decoder peak %llu (%.2f per byte), bound %llu"
			      " (%s)\n",
			      what, raw->len, (unsigned long long)peak,
			      raw->len ? (double)peak / (double)raw->len : 0.0,
			      (unsigned long long)bound, rc ? err.message : "decoded");
		assert_true(peak <= bound);
		if (tight)
			assert_true(bound <= peak + peak / 16 + 256);
	}
	return rc;
}

/* ---- raw batches: header, section table, sections ---- */

struct raw_section {
	uint16_t type;
	uint32_t count;
	struct byte_buf body;
};

static void raw_encode(struct raw_section *s, size_t n, struct byte_buf *out)
{
	uint8_t hdr[SYSOM_WIRE_HEADER_SIZE] = { 0 };
	size_t at = SYSOM_WIRE_HEADER_SIZE + n * SYSOM_WIRE_SECTION_ENTRY_SIZE;

	memcpy(hdr + WIRE_HDR_MAGIC, SYSOM_WIRE_MAGIC, 4);
	store_le16(hdr + WIRE_HDR_MAJOR, SYSOM_WIRE_MAJOR);
	store_le16(hdr + WIRE_HDR_MINOR, SYSOM_WIRE_MINOR);
	store_le16(hdr + WIRE_HDR_HEADER_SIZE, SYSOM_WIRE_HEADER_SIZE);
	store_le16(hdr + WIRE_HDR_SECTION_COUNT, (uint16_t)n);
	memset(hdr + WIRE_HDR_NODE_ID, 0x5e, SYSOM_NODE_ID_SIZE);
	store_le64(hdr + WIRE_HDR_WINDOW_START, 1700000000000000000ULL);
	store_le64(hdr + WIRE_HDR_WINDOW_END, 1700000030000000000ULL);
	byte_buf_append(out, hdr, sizeof(hdr));
	for (size_t i = 0; i < n; i++) {
		uint8_t e[SYSOM_WIRE_SECTION_ENTRY_SIZE] = { 0 };
		store_le16(e + WIRE_SEC_TYPE, s[i].type);
		store_le32(e + WIRE_SEC_COUNT, s[i].count);
		store_le32(e + WIRE_SEC_OFFSET, (uint32_t)at);
		store_le32(e + WIRE_SEC_SIZE, (uint32_t)s[i].body.len);
		byte_buf_append(out, e, sizeof(e));
		at += s[i].body.len;
	}
	for (size_t i = 0; i < n; i++) {
		byte_buf_append(out, s[i].body.data, s[i].body.len);
		byte_buf_free(&s[i].body);
	}
	assert_int_equal(byte_buf_error(out), 0);
}

/* STRINGS of `n` strings: "" then `n - 1` more of `len` bytes ('a'). */
static struct raw_section strings_section(uint32_t n, uint32_t len)
{
	struct raw_section s = { .type = SYSOM_SECTION_STRINGS, .count = n };

	byte_buf_put_u32(&s.body, 0);
	for (uint32_t i = 1; i < n; i++) {
		byte_buf_put_u32(&s.body, len);
		for (uint32_t j = 0; j < len; j++)
			byte_buf_put_u8(&s.body, 'a');
	}
	return s;
}

static struct raw_section node_section(void)
{
	struct raw_section s = { .type = SYSOM_SECTION_NODE, .count = 1 };
	uint8_t *p = byte_buf_reserve(&s.body, SYSOM_NODE_RECORD_SIZE);

	memset(p, 0, SYSOM_NODE_RECORD_SIZE);
	store_le32(p + WIRE_NODE_KERNEL_OBJECT, SYSOM_WIRE_NONE);
	s.body.len = SYSOM_NODE_RECORD_SIZE;
	return s;
}

/* One ELF object named string 0. */
static struct raw_section objects_section(void)
{
	struct raw_section s = { .type = SYSOM_SECTION_OBJECTS, .count = 1 };
	uint8_t *p = byte_buf_reserve(&s.body, SYSOM_OBJECT_RECORD_SIZE);

	memset(p, 0, SYSOM_OBJECT_RECORD_SIZE);
	p[WIRE_OBJECT_KIND] = SYSOM_OBJECT_ELF;
	p[WIRE_OBJECT_BUILD_ID_LEN] = 20;
	memset(p + WIRE_OBJECT_BUILD_ID, 0xb1, 20);
	s.body.len = SYSOM_OBJECT_RECORD_SIZE;
	return s;
}

/* `n` user stacks of `depth` frames in object 0; the last frame of the last stack names
 * object `last_object` (1: out of range, so the decoder fails after allocating). */
static struct raw_section stacks_section(uint32_t n, uint16_t depth, uint32_t last_object)
{
	struct raw_section s = { .type = SYSOM_SECTION_STACKS, .count = n };

	for (uint32_t i = 0; i < n; i++) {
		byte_buf_put_u16(&s.body, depth);
		byte_buf_put_u8(&s.body, SYSOM_STACK_USER);
		byte_buf_put_u8(&s.body, 0);
		byte_buf_put_u32(&s.body, 0);
		for (uint16_t j = 0; j < depth; j++) {
			byte_buf_put_u32(&s.body, i + 1 == n && j + 1 == depth ? last_object : 0);
			byte_buf_put_u64(&s.body, 0x1000 + (uint64_t)i * 64 + j);
		}
	}
	return s;
}

/* `n` OS_IRQS rows, unique (cpu, irq), name string 0. */
static struct raw_section irqs_section(uint32_t n)
{
	struct raw_section s = { .type = SYSOM_SECTION_OS_IRQS, .count = n };

	for (uint32_t i = 0; i < n; i++) {
		byte_buf_put_u32(&s.body, i % 64);  /* cpu */
		byte_buf_put_u32(&s.body, i / 64);  /* irq */
		byte_buf_put_u32(&s.body, 0);       /* name */
		byte_buf_put_u32(&s.body, 0);       /* reserved */
		byte_buf_put_u64(&s.body, 1 + i);   /* count */
		byte_buf_put_u64(&s.body, 1000);    /* ns */
	}
	return s;
}

static void test_worst_case_empty_strings(void **state)
{
	struct raw_section s[] = { strings_section(200000, 0), node_section() };
	struct byte_buf raw = { 0 };

	(void)state;
	raw_encode(s, 2, &raw);
	assert_int_equal(check_bound(&raw, "200000 empty strings", true), 0);
	byte_buf_free(&raw);
}

static void test_worst_case_one_frame_stacks(void **state)
{
	struct raw_section s[] = { strings_section(1, 0), node_section(), objects_section(),
				   stacks_section(100000, 1, 0) };
	struct byte_buf raw = { 0 };

	(void)state;
	raw_encode(s, 4, &raw);
	assert_int_equal(check_bound(&raw, "100000 one-frame stacks", true), 0);
	byte_buf_free(&raw);
}

static void test_worst_case_irq_rows(void **state)
{
	/* 4097 rows: the index rounds 8194 slots up to 16384, its worst. */
	struct raw_section s[] = { strings_section(1, 0), node_section(), irqs_section(4097) };
	struct byte_buf raw = { 0 };

	(void)state;
	raw_encode(s, 3, &raw);
	assert_int_equal(check_bound(&raw, "4097 interrupt rows", true), 0);
	byte_buf_free(&raw);
}

static void test_late_failure_within_the_bound(void **state)
{
	struct raw_section s[] = { strings_section(1000, 30), node_section(), objects_section(),
				   stacks_section(20000, 40, 1) };
	struct byte_buf raw = { 0 };

	(void)state;
	raw_encode(s, 4, &raw);
	assert_int_equal(check_bound(&raw, "deep stacks, bad last frame", true), -SYSOM_ECORRUPT);
	byte_buf_free(&raw);
}

static void test_refused_header_allocates_nothing(void **state)
{
	struct raw_section s[] = { strings_section(1000, 30), node_section() };
	struct byte_buf raw = { 0 };

	(void)state;
	raw_encode(s, 2, &raw);
	raw.data[WIRE_HDR_MAGIC] = 'X';
	assert_int_equal(sysom_batch_decode_memory(raw.data, raw.len, NULL), 0);
	assert_int_equal(check_bound(&raw, "bad magic", false), -SYSOM_ECORRUPT);
	raw.data[WIRE_HDR_MAGIC] = 'S';
	raw.len -= 1; /* the last section runs past the end */
	assert_int_equal(sysom_batch_decode_memory(raw.data, raw.len, NULL), 0);
	assert_int_equal(sysom_batch_decode_memory(NULL, 0, NULL), 0);
	byte_buf_free(&raw);
}

static void test_limits_respected(void **state)
{
	struct raw_section s[] = { strings_section(5000, 0), node_section() };
	struct sysom_wire_limits limits = sysom_wire_default_limits;
	struct byte_buf raw = { 0 };

	(void)state;
	raw_encode(s, 2, &raw);
	limits.max_strings = 4999; /* refused before the arrays: nothing to reserve */
	assert_int_equal(sysom_batch_decode_memory(raw.data, raw.len, &limits), 0);
	assert_true(sysom_batch_decode_memory(raw.data, raw.len, NULL) > 5000 * 8);
	byte_buf_free(&raw);
}

/* An agent-shaped batch: 200 processes, 3000 stacks 10..60 frames deep, 20000 sample rows,
 * mappings, counters. */
static void test_agent_shaped_batch(void **state)
{
	struct sysom_batch b;
	struct byte_buf raw = { 0 };
	uint32_t objects[16], procs[200], stacks[3000];
	struct sysom_frame frames[60];
	unsigned seed = 7;

	(void)state;
	assert_int_equal(sysom_batch_init(&b), 0);
	memset(b.node_id, 0x42, sizeof(b.node_id));
	b.window_start_ns = 1700000000000000000ULL;
	b.window_end_ns = b.window_start_ns + 30000000000ULL;
	assert_int_equal(sysom_batch_intern_cstring(&b, "node-a", &b.node.hostname), 0);
	b.node.kernel_object = SYSOM_WIRE_NONE;
	for (uint32_t i = 0; i < 16; i++) {
		uint8_t id[20];
		char name[64];
		memset(id, (int)i + 1, sizeof(id));
		snprintf(name, sizeof(name), "/usr/lib/x86_64-linux-gnu/libobject%u.so", i);
		assert_int_equal(sysom_batch_add_object(&b, SYSOM_OBJECT_ELF, id, 20, name,
							&objects[i]), 0);
	}
	for (uint32_t i = 0; i < 200; i++) {
		struct sysom_process p = { .tgid = 1000 + i, .start_time_ns = i, .ppid = 1 };
		char comm[32], cmd[128];
		snprintf(comm, sizeof(comm), "worker-%u", i % 13);
		snprintf(cmd, sizeof(cmd), "python3 train.py --rank %u --config /etc/job.yaml", i);
		assert_int_equal(sysom_batch_intern_cstring(&b, comm, &p.comm), 0);
		assert_int_equal(sysom_batch_intern_cstring(&b, "/usr/bin/python3.11", &p.exe), 0);
		assert_int_equal(sysom_batch_intern_cstring(&b, cmd, &p.cmdline), 0);
		assert_int_equal(sysom_batch_add_process(&b, &p, &procs[i]), 0);
		struct sysom_mapping m = { .process = procs[i], .object = objects[i % 16],
					   .start = 0x400000, .end = 0x800000 };
		assert_int_equal(sysom_batch_add_mapping(&b, &m), 0);
	}
	for (uint32_t i = 0; i < 3000; i++) {
		uint16_t depth = (uint16_t)(10 + rand_r(&seed) % 51);
		for (uint16_t j = 0; j < depth; j++)
			frames[j] = (struct sysom_frame){ objects[(i + j) % 16],
							  0x1000 + (uint64_t)(rand_r(&seed) % 65536) };
		assert_int_equal(sysom_batch_add_stack(&b, SYSOM_STACK_USER, 0, frames, depth,
						       &stacks[i]), 0);
	}
	for (uint32_t i = 0; i < 20000; i++) {
		struct sysom_sample s = { .process = procs[i % 200], .tid = 1000 + i % 700,
					  .cpu = i % 64, .time_offset_ms = (i % 6) * 5000,
					  .kernel_stack = SYSOM_WIRE_NONE,
					  .user_stack = stacks[(i * 7) % 3000], .count = 1 + i % 5 };
		s.thread_comm = b.processes[s.process].comm;
		assert_int_equal(sysom_batch_add_sample(&b, &s), 0);
	}
	assert_int_equal(sysom_batch_add_counter(&b, SYSOM_COUNTER_SAMPLES, 20000), 0);
	assert_int_equal(sysom_batch_encode(&b, &raw), 0);
	sysom_batch_free(&b);
	assert_int_equal(check_bound(&raw, "agent-shaped batch", true), 0);
	byte_buf_free(&raw);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_worst_case_empty_strings),
		cmocka_unit_test(test_worst_case_one_frame_stacks),
		cmocka_unit_test(test_worst_case_irq_rows),
		cmocka_unit_test(test_late_failure_within_the_bound),
		cmocka_unit_test(test_refused_header_allocates_nothing),
		cmocka_unit_test(test_limits_respected),
		cmocka_unit_test(test_agent_shaped_batch),
	};

	if (!heap_peak_available())
		print_message("# not an ASan build: bounds are checked against the batch only\n");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
