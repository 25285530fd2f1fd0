/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: a process environment block (as /proc/<pid>/environ) → job identity and
 * its CUDA_VISIBLE_DEVICES → the rank's GPU (agent/gpu/gpumap.c); the same bytes as a pod
 * name → its job name (jobenv_pod_job_name), and as a CUDA_VISIBLE_DEVICES value. */
// fuzz-sources: agent/ranks/jobenv.c agent/gpu/gpumap.c
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agent/ranks/jobenv.h"

static void check_text(const char *s)
{
	size_t n = strnlen(s, JOBENV_VALUE_MAX);

	if (n >= JOBENV_VALUE_MAX)
		abort();
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] == 0x7f)
			abort(); /* control characters are replaced (UTF-8 bytes are kept) */
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct job_identity j;

	/* A copy of exactly `size` bytes: ASan catches any read past the block. */
	char *block = malloc(size ? size : 1);
	if (!block)
		return 0;
	memcpy(block, data, size);
	if (jobenv_parse(block, size, &j) != 0)
		abort();
	check_text(j.job_id);
	check_text(j.master_addr);
	if (j.has_rank && (j.rank < 0 || j.world_size <= 0 || j.rank >= j.world_size))
		abort();
	if (j.master_port < -1 || j.master_port > 65535)
		abort();
	/* The rank's GPU among four devices: an index the node has, or -1. */
	{
		struct gpumap_device devs[4] = {
			{ true, 0, "GPU-0a0a" }, { true, 1, "GPU-0a0b" }, { true, 2, "GPU-1c" },
			{ false, 0, "" },
		};
		struct gpumap_cvd_entry e;
		enum gpumap_how how;
		for (int32_t lr = -1; lr < 4; lr++) {
			int idx = gpumap_from_env(devs, 4, &j.gpu, lr, &how);
			if (idx < -1 || idx >= 4 || (idx < 0) != (how == GPUMAP_UNKNOWN))
				abort();
		}
		if (j.gpu.cvd_set && strnlen(j.gpu.cvd, sizeof(j.gpu.cvd)) >= sizeof(j.gpu.cvd))
			abort();
		/* The raw bytes as a CUDA_VISIBLE_DEVICES value (an exact-size copy: no overread). */
		for (uint32_t pos = 0; pos < 3; pos++) {
			int rc = gpumap_cvd_entry(block, size, pos, &e);
			if (rc != 0 && rc != -ENOENT && rc != -EINVAL)
				abort();
			if (rc == 0 && e.kind == GPUMAP_CVD_UUID &&
			    strnlen(e.uuid, sizeof(e.uuid)) >= sizeof(e.uuid))
				abort();
		}
	}
	/* As a pod name: the job name is a non-empty prefix of it, never longer. */
	char *pod = malloc(size + 1), name[64];
	if (pod) {
		memcpy(pod, data, size);
		pod[size] = '\0';
		int rc = jobenv_pod_job_name(pod, name, sizeof(name));
		if (rc == 0 && (!name[0] || strncmp(pod, name, strlen(name)) != 0))
			abort();
		if (rc != 0 && pod[0] && strlen(pod) < sizeof(name))
			abort(); /* a name that fits always gives a job name */
		if (rc == 0 && pod[0]) {
			j.has_rank = true;
			j.job_id[0] = '\0';
			if (jobenv_job_from_cgroup(&j, 0, "", "ns", pod) != 0)
				abort();
			check_text(j.job_id);
		}
		free(pod);
	}
	free(block);
	return 0;
}
