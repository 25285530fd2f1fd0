/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU layer's hardware evidence: the NVML windows (wire 1.6 GPU_HEALTH) of the straggling
 * rank's GPU over the analysed range, folded per device, and whether they confirm a hardware
 * cause (a slowdown clock event reason, the temperature at its slowdown threshold, the SM
 * clock well under its maximum, uncorrected ECC errors, retired pages, Xid events).
 */
#ifndef SYSOM_SERVER_ANALYSIS_GPUHEALTH_H
#define SYSOM_SERVER_ANALYSIS_GPUHEALTH_H

#include <stdint.h>

#include "server/analysis/report.h"
#include "server/store/store.h"

/* SM clock below this fraction of its maximum (with a non-idle reason or none known) is named. */
#define GPUHEALTH_LOW_CLOCK 0.7

struct gpuhealth_acc {
	struct diagnosis_gpu_hw dev[SYSOM_GPU_MAX_DEVICES];
	uint64_t seen; /* bit per device */
};

void gpuhealth_acc_init(struct gpuhealth_acc *a);
/* Folds one window in. */
void gpuhealth_add(struct gpuhealth_acc *a, const struct store_gpu_health *g);
/* Judges every device and picks the rank's, best evidence first: `gpu_device` (>= 0, the NVML
 * index the rank's agent found: its open /dev/nvidiaN or CUDA_VISIBLE_DEVICES) when the node
 * has windows of it; else, with no device known (-1), `local_rank` (>= 0) when the node has
 * that device (right only without CUDA_VISIBLE_DEVICES remapping); else the device with the
 * strongest evidence. out->picked_by says which; out->present false: no window. */
void gpuhealth_pick(struct gpuhealth_acc *a, int32_t gpu_device, int32_t local_rank,
		    struct diagnosis_gpu_hw *out);

/* Words for out->picked_by, as the JSON's "picked_by" has them. */
const char *gpuhealth_picked_name(enum diagnosis_gpu_picked p);

/* Reads the windows of rank `rank` of `job` (its node, GPU device and local rank from the
 * job's ranks, the rank's own process before its workers; `hostname` when the rank is not
 * listed) within [from_ms, to_ms] and picks as above. 0 (also with nothing found, or a store
 * without GPU health) or -ENOMEM. */
int gpuhealth_lookup(struct store *s, const char *job, int32_t rank, const char *hostname,
		     int64_t from_ms, int64_t to_ms, struct diagnosis_gpu_hw *out);

#endif
