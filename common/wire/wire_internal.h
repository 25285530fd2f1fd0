/* SPDX-License-Identifier: Apache-2.0 */
/* Internals shared by the wire encoder and decoder. */
#ifndef SYSOM_COMMON_WIRE_WIRE_INTERNAL_H
#define SYSOM_COMMON_WIRE_WIRE_INTERNAL_H

#include "common/wire/wire.h"

/* Appends a string to the batch's table without de-duplication. */
int wire__append_string(struct sysom_batch *b, const char *s, size_t len, uint32_t *idx);

/* Why a GPU_KERNELS / NCCL_PROFILES / NCCL_LINKS row is invalid in batch `b` (its strings and
 * processes), or NULL when it is valid: one rule for the builder and the decoder. */
const char *sysom_gpu_kernel_problem(const struct sysom_batch *b, const struct sysom_gpu_kernel *k);
const char *sysom_nccl_profile_problem(const struct sysom_batch *b,
				       const struct sysom_nccl_profile *p);
const char *sysom_nccl_link_problem(const struct sysom_batch *b, const struct sysom_nccl_link *l);

/* The same for OS_CPUS / OS_IRQS / OS_THREADS rows (uniqueness is the decoder's own check). */
const char *sysom_os_cpu_problem(const struct sysom_os_cpu *c);
const char *sysom_os_irq_problem(const struct sysom_batch *b, const struct sysom_os_irq *q);
const char *sysom_os_thread_problem(const struct sysom_batch *b, const struct sysom_os_thread *t);

#endif
