/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which GPU a rank uses, as an NVML index (the numbering of the node's GPU health windows),
 * best evidence first:
 *   1. the device files the process holds open: exactly one /dev/nvidiaN (N is the device's
 *      minor number, nvmlDeviceGetMinorNumber; nvidiactl, nvidia-uvm*, nvidia-modeset and
 *      nvidia-caps/ are not GPUs) names its GPU;
 *   2. else CUDA_VISIBLE_DEVICES with the local rank as the position in its list: a UUID entry
 *      ("GPU-8a3f...", a unique prefix allowed, as CUDA allows) is the NVML device with that
 *      UUID; an integer is that NVML index (CUDA_DEVICE_ORDER=PCI_BUS_ID numbers devices as
 *      NVML does; the default FASTEST_FIRST does too on a node of one GPU model, which is what
 *      is assumed: on a node mixing GPU models the order may differ); "MIG-..." entries, "-1",
 *      an entry past the first invalid one (CUDA stops there), a position past the list, or
 *      a device NVML does not have: unknown. Unset: the local rank itself, when NVML has it.
 *   3. unknown otherwise.
 * Everything here is pure except gpumap_scan_fds (which reads <proc_root>/<pid>/fd).
 */
#ifndef SYSOM_AGENT_GPU_GPUMAP_H
#define SYSOM_AGENT_GPU_GPUMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GPUMAP_MAX_FDS 4096   /* descriptors looked at per process, at most */
#define GPUMAP_UUID_MAX 96    /* NVML UUIDs are 40-ish characters */
#define GPUMAP_CVD_MAX 1024   /* CUDA_VISIBLE_DEVICES bytes kept (longer: unknown) */

/* How the device was found (the agent's evidence; the server only gets the index). */
enum gpumap_how {
	GPUMAP_UNKNOWN = 0,
	GPUMAP_DEVICE_FILE = 1,      /* the one /dev/nvidiaN the process has open */
	GPUMAP_VISIBLE_DEVICES = 2,  /* CUDA_VISIBLE_DEVICES at the local rank's position */
	GPUMAP_LOCAL_RANK = 3,       /* no CUDA_VISIBLE_DEVICES: the local rank's index */
};

/* One NVML device as the mapping needs it. */
struct gpumap_device {
	bool has_minor;
	uint32_t minor;              /* /dev/nvidia<minor> */
	char uuid[GPUMAP_UUID_MAX];  /* "GPU-..." or "" */
};

/* What a process's environment says (jobenv fills it). */
struct gpumap_env {
	bool cvd_set;               /* CUDA_VISIBLE_DEVICES present (possibly empty) */
	bool cvd_too_long;          /* longer than GPUMAP_CVD_MAX - 1: not kept */
	bool order_pci;             /* CUDA_DEVICE_ORDER=PCI_BUS_ID (else FASTEST_FIRST) */
	char cvd[GPUMAP_CVD_MAX];   /* the value, NUL-terminated */
};

/* One CUDA_VISIBLE_DEVICES entry. */
enum gpumap_cvd_kind {
	GPUMAP_CVD_INDEX = 1, /* a device number */
	GPUMAP_CVD_UUID = 2,  /* a "GPU-" UUID or prefix of one */
};
struct gpumap_cvd_entry {
	enum gpumap_cvd_kind kind;
	uint32_t index;                 /* GPUMAP_CVD_INDEX */
	char uuid[GPUMAP_UUID_MAX];     /* GPUMAP_CVD_UUID: the entry as written */
};

/*
 * The entry at position `pos` (0-based) of a CUDA_VISIBLE_DEVICES value of `len` bytes (not
 * necessarily NUL-terminated). Entries are separated by commas, blanks around them ignored.
 * 0 with *out filled; -ENOENT when the list is shorter; -EINVAL when the entry, or one before
 * it, is no usable device ("-1", "MIG-...", empty, not a number or a GPU UUID, too long):
 * CUDA ignores the list from the first invalid entry on.
 */
int gpumap_cvd_entry(const char *cvd, size_t len, uint32_t pos, struct gpumap_cvd_entry *out);

/*
 * The NVML index of the rank's GPU from its environment (rule 2 above) among `n` devices.
 * `*how` says which rule decided (GPUMAP_UNKNOWN with -1). Returns the index or -1.
 */
int gpumap_from_env(const struct gpumap_device *devs, uint32_t n, const struct gpumap_env *env,
		    int32_t local_rank, enum gpumap_how *how);

/* The NVML index whose minor number is `minor`, or -1. */
int gpumap_from_minor(const struct gpumap_device *devs, uint32_t n, uint32_t minor);

/*
 * Whether name is a GPU device file path "/dev/nvidia<N>" (N decimal, no leading zeros beyond
 * "0"): 1 with *minor set, else 0.
 */
int gpumap_device_path(const char *path, uint32_t *minor);

/*
 * Reads the links of <proc_root>/<pid>/fd (at most GPUMAP_MAX_FDS). 1 with *minor set when
 * exactly one GPU device file (one minor, however many descriptors) is open; 0 when none or
 * several are; -ESRCH when the process is gone; another -errno.
 */
int gpumap_scan_fds(const char *proc_root, uint32_t pid, uint32_t *minor);

/* Words for `how`, for logs and the probe. */
const char *gpumap_how_name(enum gpumap_how how);

#endif
