/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: a process environment block (as /proc/<pid>/environ) → job identity; the
 * same bytes as a pod name → its job name (jobenv_pod_job_name). */
// fuzz-sources: agent/ranks/jobenv.c
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
