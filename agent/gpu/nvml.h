/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU health from NVML (libnvidia-ml.so.1, opened with dlopen: nodes without NVIDIA's driver
 * run the agent unchanged) and Xid events from the kernel log (/dev/kmsg).
 *
 * nvml_sample() reads the fast-moving values of every GPU (SM and memory clocks, clock event
 * "throttle" reasons, temperature, power, utilization) and folds them into the open window:
 * lowest/last SM clock, highest temperature and power, the reasons seen in any sample. The
 * daemon calls it every second, so a throttle of 200 ms is seen when it overlaps a sample.
 * nvml_collect() adds the slow counters (ECC, retired pages or remapped rows, PCIe replays,
 * NVLink errors: cumulative, read once per window), hands one sysom_gpu_health per GPU to
 * the visitor and starts the next window. A query NVML fails (not supported, no permission,
 * GPU lost) leaves that field SYSOM_GPU_UNKNOWN; it never fails the reader.
 */
#ifndef SYSOM_AGENT_GPU_NVML_H
#define SYSOM_AGENT_GPU_NVML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "agent/gpu/gpumap.h"
#include "common/report.h"
#include "common/wire/wire.h"

#define NVML_DEFAULT_LIBRARY "libnvidia-ml.so.1"
#define NVML_DEFAULT_KMSG "/dev/kmsg"
#define NVML_XID_LINES_PER_READ 4096 /* kernel log records read per sample, at most */
#define NVML_KMSG_LINE_MAX 2048      /* longer lines are cut */

struct nvml_options {
	const char *library; /* dlopen name or path; NULL: NVML_DEFAULT_LIBRARY */
	const char *kmsg;    /* kernel log; NULL: NVML_DEFAULT_KMSG; "": no Xid events */
	/* Read the kernel log from its start (a test's plain file); else only what is logged
	 * after nvml_open (/dev/kmsg is positioned at its end). */
	bool kmsg_from_start;
	struct sysom_reporter report;
};

struct nvml;

/* Loads the library, initialises NVML and finds the devices. -ENOENT: the library is not
 * there (or lacks nvmlInit_v2); -ENODEV: NVML failed to initialise or found no GPU; `err`
 * says which in words. The kernel log is optional (unreadable: no Xid events, reported). */
int nvml_open(const struct nvml_options *o, struct nvml **out, char *err, size_t errlen);
/* nvmlShutdown, dlclose, frees; accepts NULL. */
void nvml_close(struct nvml *n);

uint32_t nvml_device_count(const struct nvml *n);
/* Each device's minor number and UUID, read once at nvml_open (for gpumap), into out[0..max);
 * returns how many were written (0 for NULL). */
uint32_t nvml_devices(const struct nvml *n, struct gpumap_device *out, uint32_t max);

/* One reading of every GPU's fast-moving values, and any new Xid lines. */
void nvml_sample(struct nvml *n);

/* One GPU's window; strings valid during the call only; the record's string fields are 0. */
struct nvml_gpu_window {
	struct sysom_gpu_health h;
	const char *uuid, *pci_bus_id, *name;
};
typedef void (*nvml_visit_fn)(void *ctx, const struct nvml_gpu_window *w);

struct nvml_window_counters {
	uint64_t samples;   /* GPU readings (devices x samples) */
	uint64_t errors;    /* NVML queries that failed other than "not supported" */
	uint64_t xid;       /* Xid lines attributed to a GPU */
	uint64_t xid_unmatched; /* Xid lines for no known GPU or unparsable, records lost */
};

/* Reads the slow counters, visits every GPU that has at least one sample in the window, and
 * resets the window. `c` (may be NULL) receives the window's counters. */
void nvml_collect(struct nvml *n, nvml_visit_fn fn, void *ctx, struct nvml_window_counters *c);

/*
 * Parses one kernel log line, "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., ...", wherever it
 * stands in the line (a /dev/kmsg record has a "6,123,456,-;" prefix). 1 with the PCI domain,
 * bus, device and the Xid code; 0 for a line that is no Xid line; -EINVAL for an Xid line that
 * does not parse (counted as unmatched). Reads at most `len` bytes.
 */
int nvml_parse_xid(const char *line, size_t len, uint32_t *domain, uint32_t *bus, uint32_t *dev,
		   uint32_t *xid);

/* Parses NVML's "00000000:3B:00.0" bus id (or "0000:3b:00.0"). 0 or -EINVAL. */
int nvml_parse_bus_id(const char *s, uint32_t *domain, uint32_t *bus, uint32_t *dev);

/* Writes what the reader sees as one JSON object (the probe: sysom-agent --probe-nvml).
 * Takes `samples` readings `interval_ms` apart first. Returns 0, or the nvml_open error after
 * printing {"nvml":"absent"/"failed","error":...}. */
int nvml_probe(const struct nvml_options *o, unsigned samples, unsigned interval_ms, FILE *out);

#endif
