/* SPDX-License-Identifier: Apache-2.0 */
/* Test fixtures: a known, realistic batch (builder API), its encoding, and temporary dirs. */
#ifndef SYSOM_TESTS_SUPPORT_BATCH_FIXTURE_H
#define SYSOM_TESTS_SUPPORT_BATCH_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"
#include "common/wire/wire.h"

/*
 * The fixture batch (window of 30 s starting at `window_start_ns`):
 *   objects: kernel (FIXTURE_KERNEL_ID, "[kernel.kallsyms]"), libc (ELF,
 *            "/usr/lib/x86_64-linux-gnu/libc.so.6"), python (ELF, "/usr/bin/python3.11"),
 *            anonymous "[anon:jit]"
 *   processes: python3 (tgid 4242), nccl (tgid 777, comm "nccl-proxy")
 *   stacks (leaf first): K = kernel [0x1100, 0x2234]; U = user [libc 0x29d90, python 0x1000];
 *            T = user, depth limit, [anon 0x7f0000001000, libc 0x1000]
 *   samples: 4242/4243 "pt_main_thread" K+U 10 at +5 s; 4242/4243 U 3 at +5 s;
 *            777/780 "nccl-net" T 4 at +10 s; 777/780 K 5 at +10 s
 *   counters: ticks 990, samples 22
 */
#define FIXTURE_PID_PYTHON 4242
#define FIXTURE_PID_NCCL 777
#define FIXTURE_SAMPLES 22

extern const uint8_t FIXTURE_KERNEL_ID[20];
extern const uint8_t FIXTURE_LIBC_ID[20];
extern const uint8_t FIXTURE_PYTHON_ID[20];

struct fixture_spec {
	uint8_t node;             /* node id = 16 bytes of this value */
	uint64_t epoch;
	uint64_t sequence;
	uint64_t window_start_ns;
	const char *hostname;     /* NULL: "node-<node>" */
	const char *python_comm;  /* NULL: "python3" */
	uint32_t extra_stacks;    /* adds this many distinct user stacks with one sample each */
};

/* Builds the fixture batch into `b` (sysom_batch_free it). Returns 0 or a negative errno. */
int fixture_batch_build(struct sysom_batch *b, const struct fixture_spec *spec);

/* Encodes `b` into `out` (zeroed first), zstd-compressed when `compress`. 0 or -errno. */
int fixture_batch_encode(const struct sysom_batch *b, bool compress, struct byte_buf *out);

/* "<node hex>:<epoch 16 hex>:<sequence>" for the batch into `out` (at least 72 bytes). */
void fixture_batch_key(const struct sysom_batch *b, char *out, size_t outlen);

/* Creates a fresh directory under $TMPDIR (or /tmp) into `out` (>= 64 bytes). 0 or -errno. */
int fixture_tmpdir_make(char *out, size_t outlen);

/* Removes a directory tree; 0 or -errno. */
int fixture_tmpdir_remove(const char *path);

#endif
