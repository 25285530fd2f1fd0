/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Who a process belongs to, from its cgroup: container id and runtime (containerd, CRI-O,
 * Docker, Podman), Kubernetes pod UID (and, from the kubelet's pod log directories, pod name
 * and namespace), Slurm job and step, systemd unit. Pure parsers (fuzzed:
 * tests/fuzz/fuzz_identity.c) plus bounded readers of /proc/<pid>/cgroup and /var/log/pods.
 *
 * Recognised cgroup paths (cgroup v1 controller paths and v2 paths alike):
 *   Kubernetes, cgroupfs driver   /kubepods[/burstable|/besteffort]/pod<UID>/<CID> or crio-<CID>
 *   Kubernetes, systemd driver    /kubepods.slice/kubepods-burstable.slice/
 *                                   kubepods-burstable-pod<UID with _>.slice/<scope>
 *     container scopes            cri-containerd-<CID>.scope, crio-<CID>.scope,
 *                                 docker-<CID>.scope, libpod-<CID>.scope
 *                                 (crio-conmon-<CID>.scope, libpod-conmon-<CID>.scope are the
 *                                 runtime's monitor: pod, no container)
 *   Docker, cgroupfs driver       /docker/<CID>
 *   Docker/Podman, systemd        /system.slice/docker-<CID>.scope, /machine.slice/libpod-<CID>.scope
 *   Slurm (v1)                    /slurm[_<node>]/uid_<U>/job_<J>/step_<S>[/task_<T>]
 *   Slurm (v2)                    /system.slice/slurmstepd.scope/job_<J>/step_<S>/...
 *   systemd unit                  the deepest component ending in .service or .scope
 * <CID> is 64 lowercase hex digits, <UID> a 36-character UUID (8-4-4-4-12 hex), <J> a
 * decimal job id, <S> a decimal step or batch, extern, interactive.
 */
#ifndef SYSOM_AGENT_NODE_IDENTITY_H
#define SYSOM_AGENT_NODE_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IDENTITY_PATH_MAX 4096      /* longer cgroup paths are rejected */
#define IDENTITY_CGROUP_FILE_MAX 65536 /* bytes of /proc/<pid>/cgroup read */
#define IDENTITY_CONTAINER_ID_LEN 64
#define IDENTITY_POD_UID_LEN 36
#define IDENTITY_UNIT_MAX 256       /* systemd unit names: at most 255 bytes */
#define IDENTITY_SLURM_STEP_MAX 16
#define IDENTITY_K8S_NAME_MAX 254   /* pod names: DNS subdomain, 253 bytes */
#define IDENTITY_POD_DIRS_MAX 100000 /* entries of the pod log root scanned */
#define IDENTITY_CONTAINER_NAME_MAX 64 /* container names: DNS labels, 63 bytes */
#define IDENTITY_CONTAINER_LOGS_MAX 100000 /* entries of the container log root scanned */

enum identity_runtime {
	IDENTITY_RUNTIME_NONE = 0,
	IDENTITY_RUNTIME_CONTAINERD,
	IDENTITY_RUNTIME_CRIO,
	IDENTITY_RUNTIME_DOCKER,
	IDENTITY_RUNTIME_PODMAN,
	IDENTITY_RUNTIME_UNKNOWN, /* a Kubernetes container directory without runtime prefix */
};

struct proc_identity {
	enum identity_runtime runtime;
	char container_id[IDENTITY_CONTAINER_ID_LEN + 1]; /* "" when none */
	char pod_uid[IDENTITY_POD_UID_LEN + 1];            /* "" when none; with dashes */
	uint64_t slurm_job;                                /* 0 when none */
	char slurm_step[IDENTITY_SLURM_STEP_MAX];          /* "0", "batch", ...; "" when none */
	char unit[IDENTITY_UNIT_MAX];                      /* "" when none */
};

/* "containerd", "cri-o", "docker", "podman", "unknown" or "" for none. */
const char *identity_runtime_name(enum identity_runtime r);

/*
 * Parses one cgroup path (`len` bytes, not NUL-terminated, starting with '/') into *out
 * (zeroed first). Unrecognised components are ignored; a path without any identity gives
 * 0 with an all-empty *out. Returns 0, or -SYSOM_ECORRUPT for a path that does not start
 * with '/', contains a NUL byte, or is longer than IDENTITY_PATH_MAX.
 */
int identity_parse_cgroup_path(const char *path, size_t len, struct proc_identity *out);

/*
 * Parses the text of /proc/<pid>/cgroup (`len` bytes): "ID:CONTROLLERS:PATH" lines of
 * cgroup v1 and the v2 line "0::PATH". The path that says the most wins (container, then pod,
 * then Slurm job, then unit); among equals the v2 line, then name=systemd, then the other
 * lines in order. Returns 0 (*out possibly all-empty), or -SYSOM_ECORRUPT when no line is
 * well-formed.
 */
int identity_parse_cgroup_file(const char *text, size_t len, struct proc_identity *out);

/*
 * Reads /proc/<pid>/cgroup (or `path` when non-NULL, for tests; at most
 * IDENTITY_CGROUP_FILE_MAX bytes) and parses it. Returns 0, -ESRCH when the process is gone,
 * -SYSOM_ELIMIT when the file is longer, or another negative errno.
 */
int identity_read(int pid, const char *path, struct proc_identity *out);

/*
 * The kubelet keeps a log directory per pod: <log_root>/<namespace>_<name>_<uid> (log_root
 * is /var/log/pods). Finds the one of `pod_uid` and copies its namespace and name (each
 * at most IDENTITY_K8S_NAME_MAX - 1 bytes; namespaces and pod names contain no '_').
 * Returns 0, -ENOENT when there is none, -EINVAL for a malformed uid or too small buffers,
 * -SYSOM_ELIMIT after IDENTITY_POD_DIRS_MAX entries, or another negative errno.
 */
int identity_pod_lookup(const char *log_root, const char *pod_uid, char *ns, size_t ns_size,
			char *name, size_t name_size);

/* Splits one pod log directory name "<namespace>_<name>_<uid>" (`len` bytes). 0 or
 * -SYSOM_ECORRUPT; the outputs as in identity_pod_lookup, uid with dashes. */
int identity_parse_pod_dir(const char *dir, size_t len, char *ns, size_t ns_size, char *name,
			   size_t name_size, char uid[IDENTITY_POD_UID_LEN + 1]);

/*
 * Splits one name of the kubelet's container log links,
 * "<pod>_<namespace>_<container>-<64 lowercase hex container id>.log" (`len` bytes; pod,
 * namespace and container names contain no '_', a container name may contain '-'). Copies
 * the container name (at most IDENTITY_CONTAINER_NAME_MAX - 1 bytes and below
 * `container_size`) and the id. 0 or -SYSOM_ECORRUPT.
 */
int identity_parse_container_log(const char *file, size_t len, char *container,
				 size_t container_size, char cid[IDENTITY_CONTAINER_ID_LEN + 1]);

/*
 * Container id -> container name, from the kubelet's links in `log_root`
 * (/var/log/containers): the whole directory is read into a sorted table, at most
 * `max_entries` entries of it (0: IDENTITY_CONTAINER_LOGS_MAX), and read again only when an
 * id is missing from the table and at least `min_rescan_ns` have passed since the last read,
 * so that a node with thousands of containers is not rescanned per process. Only the names
 * count: a link is not followed (a dangling one, whose log file was rotated away, still
 * names its container).
 */
struct identity_names;

struct identity_names_stats {
	uint64_t scans;     /* reads of the directory */
	uint32_t entries;   /* containers in the table */
	bool truncated;     /* the last read stopped at max_entries */
};

/* 0, -EINVAL (NULL or empty root) or -ENOMEM. */
int identity_names_new(const char *log_root, uint32_t max_entries, uint64_t min_rescan_ns,
		       struct identity_names **out);
void identity_names_free(struct identity_names *n); /* accepts NULL */
/*
 * The name of container `cid` (64 hex digits) at monotonic time `now_ns` into `name`.
 * 0; -ENOENT when the directory has no link for it (or was read too recently to look
 * again); -SYSOM_ELIMIT when it is missing and the last read stopped at the entry limit;
 * -EINVAL for a malformed id or a too small buffer; or the directory's negative errno.
 */
int identity_container_name(struct identity_names *n, const char *cid, uint64_t now_ns,
			    char *name, size_t name_size);
void identity_names_stats_read(const struct identity_names *n, struct identity_names_stats *out);

#endif
