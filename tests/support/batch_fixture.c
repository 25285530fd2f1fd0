/* SPDX-License-Identifier: Apache-2.0 */
/* A known batch built with the wire builder, its encoding, and temporary directories. */
#include "tests/support/batch_fixture.h"

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/compress.h"

const uint8_t FIXTURE_KERNEL_ID[20] = { 0xab, 0xf9, 0xec, 0x0e, 0xc5, 0x94, 0x66, 0x00, 0xc9, 0x06,
					0x41, 0xcf, 0x5d, 0xb9, 0x98, 0x47, 0x2f, 0xac, 0x41, 0x0b };
const uint8_t FIXTURE_LIBC_ID[20] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20 };
const uint8_t FIXTURE_PYTHON_ID[20] = { 0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9,
					0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3 };

#define TRY(expr)                       \
	do {                            \
		int err_ = (expr);      \
		if (err_)               \
			return err_;    \
	} while (0)

static int add_process(struct sysom_batch *b, uint32_t tgid, const char *comm, const char *exe,
		       const char *cmdline, uint32_t *idx)
{
	struct sysom_process p = { .tgid = tgid, .generation = 1, .start_time_ns = 1000000ULL * tgid,
				   .ppid = 1 };

	TRY(sysom_batch_intern_cstring(b, comm, &p.comm));
	TRY(sysom_batch_intern_cstring(b, exe, &p.exe));
	TRY(sysom_batch_intern_cstring(b, cmdline, &p.cmdline));
	return sysom_batch_add_process(b, &p, idx);
}

static int add_sample(struct sysom_batch *b, uint32_t proc, uint32_t tid, const char *thread_comm,
		      uint32_t offset_ms, uint32_t kstack, uint32_t ustack, uint64_t count)
{
	struct sysom_sample s = { .process = proc, .tid = tid, .cpu = tid % 4,
				  .time_offset_ms = offset_ms, .kernel_stack = kstack,
				  .user_stack = ustack, .count = count };

	TRY(sysom_batch_intern_cstring(b, thread_comm, &s.thread_comm));
	return sysom_batch_add_sample(b, &s);
}

static int build(struct sysom_batch *b, const struct fixture_spec *spec)
{
	char hostname[32];
	uint32_t kobj, libc, python, anon, py, nccl, k, u, t;

	memset(b->node_id, spec->node, sizeof(b->node_id));
	b->agent_epoch = spec->epoch;
	b->sequence = spec->sequence;
	b->window_start_ns = spec->window_start_ns;
	b->window_end_ns = spec->window_start_ns + 30ULL * 1000000000ULL;
	snprintf(hostname, sizeof(hostname), "node-%u", spec->node);
	TRY(sysom_batch_intern_cstring(b, spec->hostname ? spec->hostname : hostname, &b->node.hostname));
	TRY(sysom_batch_intern_cstring(b, "6.1.0-18-amd64", &b->node.kernel_release));
	TRY(sysom_batch_intern_cstring(b, "x86_64", &b->node.machine));
	TRY(sysom_batch_intern_cstring(b, "sysom-agent test", &b->node.agent_version));
	b->node.sample_hz = 99;
	b->node.sample_rate_ppm = 100000;
	b->node.drain_interval_ms = 5000;
	b->node.batch_interval_ms = 30000;
	b->node.online_cpus = 4;
	memset(b->node.boot_id, 0x5a, sizeof(b->node.boot_id));

	TRY(sysom_batch_add_object(b, SYSOM_OBJECT_KERNEL, FIXTURE_KERNEL_ID, 20, "[kernel.kallsyms]", &kobj));
	b->node.kernel_object = kobj;
	TRY(sysom_batch_add_object(b, SYSOM_OBJECT_ELF, FIXTURE_LIBC_ID, 20,
				   "/usr/lib/x86_64-linux-gnu/libc.so.6", &libc));
	TRY(sysom_batch_add_object(b, SYSOM_OBJECT_ELF, FIXTURE_PYTHON_ID, 20, "/usr/bin/python3.11", &python));
	TRY(sysom_batch_add_object(b, SYSOM_OBJECT_ANON, NULL, 0, "[anon:jit]", &anon));

	TRY(add_process(b, FIXTURE_PID_PYTHON, spec->python_comm ? spec->python_comm : "python3",
			"/usr/bin/python3.11", "python3 train.py", &py));
	TRY(add_process(b, FIXTURE_PID_NCCL, "nccl-proxy", "/opt/nccl/proxy", "nccl-proxy --rank 0", &nccl));

	struct sysom_frame kf[] = { { kobj, 0x1100 }, { kobj, 0x2234 } };
	struct sysom_frame uf[] = { { libc, 0x29d90 }, { python, 0x1000 } };
	struct sysom_frame tf[] = { { anon, 0x7f0000001000 }, { libc, 0x1000 } };
	TRY(sysom_batch_add_stack(b, SYSOM_STACK_KERNEL, SYSOM_STOP_COMPLETE, kf, 2, &k));
	TRY(sysom_batch_add_stack(b, SYSOM_STACK_USER, SYSOM_STOP_COMPLETE, uf, 2, &u));
	TRY(sysom_batch_add_stack(b, SYSOM_STACK_USER, SYSOM_STOP_DEPTH_LIMIT, tf, 2, &t));

	TRY(add_sample(b, py, 4243, "pt_main_thread", 5000, k, u, 10));
	TRY(add_sample(b, py, 4243, "pt_main_thread", 5000, SYSOM_WIRE_NONE, u, 3));
	TRY(add_sample(b, nccl, 780, "nccl-net", 10000, SYSOM_WIRE_NONE, t, 4));
	TRY(add_sample(b, nccl, 780, "nccl-net", 10000, k, SYSOM_WIRE_NONE, 5));
	for (uint32_t i = 0; i < spec->extra_stacks; i++) {
		struct sysom_frame ef[] = { { libc, 0x100000 + (uint64_t)i * 16 }, { python, 0x2000 } };
		uint32_t e;
		TRY(sysom_batch_add_stack(b, SYSOM_STACK_USER, SYSOM_STOP_COMPLETE, ef, 2, &e));
		TRY(add_sample(b, py, 4244, "worker", 20000, SYSOM_WIRE_NONE, e, 1));
	}
	TRY(sysom_batch_add_counter(b, SYSOM_COUNTER_TICKS, 990));
	TRY(sysom_batch_add_counter(b, SYSOM_COUNTER_SAMPLES, FIXTURE_SAMPLES + spec->extra_stacks));
	return 0;
}

int fixture_batch_build(struct sysom_batch *b, const struct fixture_spec *spec)
{
	int rc = sysom_batch_init(b);

	if (!rc)
		rc = build(b, spec);
	if (rc)
		sysom_batch_free(b);
	return rc;
}

int fixture_batch_encode(const struct sysom_batch *b, bool compress, struct byte_buf *out)
{
	struct byte_buf raw = { 0 };
	int rc;

	memset(out, 0, sizeof(*out));
	rc = sysom_batch_encode(b, compress ? &raw : out);
	if (!rc && compress)
		rc = sysom_zstd_compress(raw.data, raw.len, 3, out);
	byte_buf_free(&raw);
	if (rc)
		byte_buf_free(out);
	return rc;
}

void fixture_batch_key(const struct sysom_batch *b, char *out, size_t outlen)
{
	char node[33];

	for (int i = 0; i < 16; i++)
		snprintf(node + 2 * i, 3, "%02x", b->node_id[i]);
	snprintf(out, outlen, "%s:%016" PRIx64 ":%" PRIu64, node, b->agent_epoch, b->sequence);
}

int fixture_tmpdir_make(char *out, size_t outlen)
{
	const char *base = getenv("TMPDIR");

	snprintf(out, outlen, "%s/sysom-test-XXXXXX", base && *base ? base : "/tmp");
	return mkdtemp(out) ? 0 : -errno;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path) ? -errno : 0;
}

int fixture_tmpdir_remove(const char *path)
{
	return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
