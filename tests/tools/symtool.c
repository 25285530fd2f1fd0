/* SPDX-License-Identifier: Apache-2.0 */
/* Test tool for the e2e tests (built by the Makefile): XXH3-128 of a file, a function's file
 * offset, a synthetic batch, a synthetic profile of many distinct stacks. */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/compress.h"
#include "common/elf_buildid.h"
#include "common/wire/wire.h"

/* hash FILE: the XXH3-128 (canonical hex) the upload API wants in X-Sysom-Content-Hash. */
static int cmd_hash(const char *path)
{
	struct sysom_build_id h;
	char hex[2 * SYSOM_BUILD_ID_MAX + 1];
	int fd = open(path, O_RDONLY);

	if (fd < 0 || sysom_file_content_hash(fd, &h)) {
		perror(path);
		return 1;
	}
	close(fd);
	sysom_build_id_hex(&h, hex, sizeof(hex));
	printf("%s\n", hex);
	return 0;
}

/* funcoff FILE FUNC: "OFFSET SIZE" (hex file offset of the function's start, decimal size). */
static int cmd_funcoff(const char *path, const char *func)
{
	int fd = open(path, O_RDONLY);
	Elf *elf;
	Elf_Scn *scn = NULL;
	size_t nph;
	uint64_t vaddr = 0, size = 0;
	int rc = 1;

	elf_version(EV_CURRENT);
	if (fd < 0 || !(elf = elf_begin(fd, ELF_C_READ, NULL)) || elf_getphdrnum(elf, &nph)) {
		fprintf(stderr, "%s: not an ELF file\n", path);
		return 1;
	}
	while ((scn = elf_nextscn(elf, scn)) && !vaddr) {
		GElf_Shdr sh;
		Elf_Data *d;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB || !(d = elf_getdata(scn, NULL)))
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *name;
			if (!gelf_getsym(d, (int)i, &sym))
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (GELF_ST_TYPE(sym.st_info) == STT_FUNC && name && strcmp(name, func) == 0) {
				vaddr = sym.st_value;
				size = sym.st_size;
				break;
			}
		}
	}
	for (size_t i = 0; vaddr && i < nph; i++) {
		GElf_Phdr ph;
		if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X) &&
		    vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz) {
			printf("0x%" PRIx64 " %" PRIu64 "\n", vaddr - ph.p_vaddr + ph.p_offset, size);
			rc = 0;
		}
	}
	if (rc)
		fprintf(stderr, "%s: no function %s in an executable segment\n", path, func);
	elf_end(elf);
	close(fd);
	return rc;
}

/*
 * batch OUT SEQ COMM OBJECT BUILD_ID OFFSET...: one zstd batch from node 5e5e...5e (hostname
 * e2e-sym) whose process COMM has one user stack (leaf first) of OFFSETs in OBJECT (an ELF
 * with BUILD_ID), counted 10 times now. Prints its Idempotency-Key.
 */
static int cmd_batch(int argc, char **argv)
{
	struct sysom_batch b;
	struct byte_buf raw = { 0 }, out = { 0 };
	struct sysom_build_id id;
	struct sysom_frame frames[64];
	struct sysom_process p = { .tgid = 4711, .generation = 1, .start_time_ns = 1, .ppid = 1 };
	struct timespec now;
	uint32_t obj, proc, stack;
	int nframes = argc - 5, rc;
	FILE *f;

	if (nframes < 1 || nframes > 64 || sysom_build_id_parse_hex(argv[4], SYSOM_OBJECT_ELF, &id)) {
		fprintf(stderr, "batch: want OUT SEQ COMM OBJECT BUILD_ID OFFSET...\n");
		return 2;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	rc = sysom_batch_init(&b);
	memset(b.node_id, 0x5e, sizeof(b.node_id));
	b.agent_epoch = 1;
	b.sequence = strtoull(argv[1], NULL, 10);
	b.window_start_ns = (uint64_t)now.tv_sec * 1000000000ULL - 10000000000ULL;
	b.window_end_ns = b.window_start_ns + 30000000000ULL;
	rc = rc ?: sysom_batch_intern_cstring(&b, "e2e-sym", &b.node.hostname);
	rc = rc ?: sysom_batch_intern_cstring(&b, "6.1.0", &b.node.kernel_release);
	rc = rc ?: sysom_batch_intern_cstring(&b, "x86_64", &b.node.machine);
	rc = rc ?: sysom_batch_intern_cstring(&b, "symtool", &b.node.agent_version);
	b.node.kernel_object = SYSOM_WIRE_NONE;
	b.node.sample_hz = 99;
	b.node.sample_rate_ppm = 1000000;
	b.node.drain_interval_ms = 5000;
	b.node.batch_interval_ms = 30000;
	b.node.online_cpus = 1;
	rc = rc ?: sysom_batch_add_object(&b, SYSOM_OBJECT_ELF, id.bytes, id.len, argv[3], &obj);
	rc = rc ?: sysom_batch_intern_cstring(&b, argv[2], &p.comm);
	rc = rc ?: sysom_batch_intern_cstring(&b, argv[3], &p.exe);
	rc = rc ?: sysom_batch_intern_cstring(&b, argv[2], &p.cmdline);
	rc = rc ?: sysom_batch_add_process(&b, &p, &proc);
	for (int i = 0; i < nframes; i++)
		frames[i] = (struct sysom_frame){ obj, strtoull(argv[5 + i], NULL, 0) };
	rc = rc ?: sysom_batch_add_stack(&b, SYSOM_STACK_USER, SYSOM_STOP_COMPLETE, frames,
					 (uint16_t)nframes, &stack);
	struct sysom_sample s = { .process = proc, .tid = 4711, .time_offset_ms = 5000,
				  .kernel_stack = SYSOM_WIRE_NONE, .user_stack = stack, .count = 10,
				  .thread_comm = p.comm };
	rc = rc ?: sysom_batch_add_sample(&b, &s);
	rc = rc ?: sysom_batch_add_counter(&b, SYSOM_COUNTER_SAMPLES, 10);
	rc = rc ?: sysom_batch_encode(&b, &raw);
	rc = rc ?: sysom_zstd_compress(raw.data, raw.len, 3, &out);
	if (rc || !(f = fopen(argv[0], "wb")) || fwrite(out.data, 1, out.len, f) != out.len ||
	    fclose(f)) {
		fprintf(stderr, "batch: cannot build or write %s (%d)\n", argv[0], rc);
		return 1;
	}
	printf("%s:%016" PRIx64 ":%" PRIu64 "\n",
	       "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e", b.agent_epoch, b.sequence);
	sysom_batch_free(&b);
	byte_buf_free(&raw);
	byte_buf_free(&out);
	return 0;
}

#define PROFILE_DEPTH 24

/*
 * profile OUT SEQ N: one zstd batch from node 6e6e...6e (hostname e2e-big) whose process
 * "bigprof" has N distinct user stacks of PROFILE_DEPTH frames, the shape of
 * bench/export_bench.c (a binary tree of calls over three ELF objects, so stacks share their
 * root side as real ones do), each counted 1..50 times now. Prints its Idempotency-Key and
 * the sample total.
 */
static int cmd_profile(const char *out_path, const char *seq, const char *count)
{
	static const uint8_t ids[3][20] = { { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } };
	static const char *const paths[3] = { "/usr/bin/python3.11",
					      "/opt/torch/lib/libtorch_cpu.so",
					      "/opt/trainer/libtrainer.so" };
	struct sysom_process p = { .tgid = 4242, .generation = 1, .start_time_ns = 1, .ppid = 1 };
	struct byte_buf raw = { 0 }, out = { 0 };
	uint32_t objs[3], proc = 0, levels = 0, n = (uint32_t)strtoul(count, NULL, 10);
	uint64_t total = 0;
	struct sysom_batch b;
	struct timespec now;
	FILE *f = NULL;
	int rc;

	if (n < 1 || n > 1000000) {
		fprintf(stderr, "profile: N must be in [1, 1000000]\n");
		return 2;
	}
	while ((1u << levels) < n)
		levels++;
	clock_gettime(CLOCK_REALTIME, &now);
	rc = sysom_batch_init(&b);
	memset(b.node_id, 0x6e, sizeof(b.node_id));
	b.agent_epoch = 1;
	b.sequence = strtoull(seq, NULL, 10);
	b.window_start_ns = (uint64_t)now.tv_sec * 1000000000ULL - 10000000000ULL;
	b.window_end_ns = b.window_start_ns + 30000000000ULL;
	rc = rc ?: sysom_batch_intern_cstring(&b, "e2e-big", &b.node.hostname);
	rc = rc ?: sysom_batch_intern_cstring(&b, "6.1.0", &b.node.kernel_release);
	rc = rc ?: sysom_batch_intern_cstring(&b, "x86_64", &b.node.machine);
	rc = rc ?: sysom_batch_intern_cstring(&b, "symtool", &b.node.agent_version);
	b.node.kernel_object = SYSOM_WIRE_NONE;
	b.node.sample_hz = 99;
	b.node.sample_rate_ppm = 1000000;
	b.node.drain_interval_ms = 5000;
	b.node.batch_interval_ms = 30000;
	b.node.online_cpus = 4;
	for (int i = 0; i < 3; i++)
		rc = rc ?: sysom_batch_add_object(&b, SYSOM_OBJECT_ELF, ids[i], 20, paths[i], &objs[i]);
	rc = rc ?: sysom_batch_intern_cstring(&b, "bigprof", &p.comm);
	rc = rc ?: sysom_batch_intern_cstring(&b, "/usr/bin/python3.11", &p.exe);
	rc = rc ?: sysom_batch_intern_cstring(&b, "bigprof", &p.cmdline);
	rc = rc ?: sysom_batch_add_process(&b, &p, &proc);
	for (uint32_t i = 0; !rc && i < n; i++) {
		struct sysom_frame fr[PROFILE_DEPTH];
		uint32_t stack;

		for (uint32_t j = 0; j < PROFILE_DEPTH; j++) {
			/* Root first: the tree node at depth j identifies i's first j bits; below
			 * the tree, a few shared frames. Stored leaf first. */
			uint64_t node = j < levels ? i >> (levels - j) : (i * 7u + j) & 255u;
			fr[PROFILE_DEPTH - 1 - j] = (struct sysom_frame){
				objs[j % 3], 0x100000 + ((uint64_t)j << 20) + node * 16 };
		}
		rc = sysom_batch_add_stack(&b, SYSOM_STACK_USER, SYSOM_STOP_COMPLETE, fr,
					   PROFILE_DEPTH, &stack);
		struct sysom_sample s = { .process = proc, .tid = 4243, .thread_comm = p.comm,
					  .time_offset_ms = 5000, .kernel_stack = SYSOM_WIRE_NONE,
					  .user_stack = stack,
					  .count = 1 + ((i * 2654435761u) >> 27) % 50 };
		rc = rc ?: sysom_batch_add_sample(&b, &s);
		total += s.count;
	}
	rc = rc ?: sysom_batch_add_counter(&b, SYSOM_COUNTER_SAMPLES, total);
	rc = rc ?: sysom_batch_encode(&b, &raw);
	rc = rc ?: sysom_zstd_compress(raw.data, raw.len, 3, &out);
	if (rc || !(f = fopen(out_path, "wb")) || fwrite(out.data, 1, out.len, f) != out.len) {
		fprintf(stderr, "profile: cannot build or write %s (%d)\n", out_path, rc);
		rc = 1;
	} else {
		printf("%s:%016" PRIx64 ":%" PRIu64 " %" PRIu64 "\n",
		       "6e6e6e6e6e6e6e6e6e6e6e6e6e6e6e6e", b.agent_epoch, b.sequence, total);
	}
	if (f && fclose(f))
		rc = 1;
	sysom_batch_free(&b);
	byte_buf_free(&raw);
	byte_buf_free(&out);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "hash") == 0)
		return cmd_hash(argv[2]);
	if (argc == 4 && strcmp(argv[1], "funcoff") == 0)
		return cmd_funcoff(argv[2], argv[3]);
	if (argc >= 8 && strcmp(argv[1], "batch") == 0)
		return cmd_batch(argc - 2, argv + 2);
	if (argc == 5 && strcmp(argv[1], "profile") == 0)
		return cmd_profile(argv[2], argv[3], argv[4]);
	fprintf(stderr, "usage: symtool hash FILE | funcoff FILE FUNC |"
			" batch OUT SEQ COMM OBJECT BUILD_ID OFFSET... | profile OUT SEQ N\n");
	return 2;
}
