/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Duration histograms carried across layers, defined once: GPU kernel times (CUPTI library →
 * agent → wire GPU_KERNELS) and run-queue waits (BPF → agent → wire OS_THREADS). The bucket
 * counts are plain constants that BPF programs include too; the bucket functions are for user
 * space (BPF code includes vmlinux.h first, which defines __VMLINUX_H__, and computes the
 * run-queue bucket with its own shifts in bpf/ossignals.bpf.c).
 */
#ifndef SYSOM_HISTOGRAM_H
#define SYSOM_HISTOGRAM_H

/* GPU kernel durations: bucket 0 < 1 µs; i: [2^(i-1), 2^i) µs; 19: >= 2^18 µs. */
#define SYSOM_GPU_HIST_BUCKETS 20

/* Run-queue waits: bucket 0 < 2 µs, bucket i in [2^i, 2^(i+1)) µs, the last one everything
 * from 2^(N-1) µs (about 0.5 s) up. */
#define SYSOM_RUNQ_HIST_BUCKETS 20

#ifndef __VMLINUX_H__
#include <stdint.h>

/* The GPU histogram bucket of a duration in ns. */
static inline unsigned sysom_gpu_hist_bucket(uint64_t ns)
{
	uint64_t us = ns / 1000;
	unsigned b = 0;

	while (us && b < SYSOM_GPU_HIST_BUCKETS - 1) {
		us >>= 1;
		b++;
	}
	return b;
}

/* The run-queue histogram bucket of a wait: floor(log2(µs)), 0 below 2 µs, at most 19. */
static inline unsigned sysom_runq_hist_bucket(uint64_t ns)
{
	uint64_t us = ns / 1000;
	unsigned b = 0;

	while (us > 1 && b < SYSOM_RUNQ_HIST_BUCKETS - 1) {
		us >>= 1;
		b++;
	}
	return b;
}
#endif

#endif
