/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: cgroup paths, /proc/<pid>/cgroup files, pod log directory names and
 * container log link names. */
// fuzz-sources: agent/node/identity.c
#include <stdlib.h>
#include <string.h>

#include "agent/node/identity.h"
#include "common/error.h"

static void check_identity(const struct proc_identity *id)
{
	size_t n = strnlen(id->container_id, sizeof(id->container_id));
	if (n != 0 && n != IDENTITY_CONTAINER_ID_LEN)
		abort();
	if ((n != 0) != (id->runtime != IDENTITY_RUNTIME_NONE))
		abort();
	n = strnlen(id->pod_uid, sizeof(id->pod_uid));
	if (n != 0 && n != IDENTITY_POD_UID_LEN)
		abort();
	if (strnlen(id->unit, sizeof(id->unit)) >= sizeof(id->unit) ||
	    strnlen(id->slurm_step, sizeof(id->slurm_step)) >= sizeof(id->slurm_step))
		abort();
	if (id->slurm_step[0] && !id->slurm_job)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	struct proc_identity id;
	char ns[IDENTITY_K8S_NAME_MAX], name[IDENTITY_K8S_NAME_MAX], uid[IDENTITY_POD_UID_LEN + 1];

	int rc = identity_parse_cgroup_path(text, size, &id);
	if (rc == 0)
		check_identity(&id);
	else if (rc != -SYSOM_ECORRUPT)
		abort();
	rc = identity_parse_cgroup_file(text, size, &id);
	if (rc == 0)
		check_identity(&id);
	else if (rc != -SYSOM_ECORRUPT)
		abort();
	rc = identity_parse_pod_dir(text, size, ns, sizeof(ns), name, sizeof(name), uid);
	if (rc == 0 && (strlen(uid) != IDENTITY_POD_UID_LEN || !ns[0] || !name[0] ||
			strchr(ns, '_') || strchr(name, '_')))
		abort();
	char container[IDENTITY_CONTAINER_NAME_MAX], cid[IDENTITY_CONTAINER_ID_LEN + 1];
	rc = identity_parse_container_log(text, size, container, sizeof(container), cid);
	if (rc == 0 && (strlen(cid) != IDENTITY_CONTAINER_ID_LEN || !container[0] ||
			strchr(container, '_') || strlen(container) >= IDENTITY_CONTAINER_NAME_MAX))
		abort();
	else if (rc != 0 && rc != -SYSOM_ECORRUPT)
		abort();
	return 0;
}
