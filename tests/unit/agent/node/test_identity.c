/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Process identity: crafted cgroup paths of containerd, CRI-O, Docker, Podman, Kubernetes
 * (cgroupfs and systemd drivers), Slurm (v1 and v2) and systemd units; /proc/<pid>/cgroup
 * files (hybrid and v2); the kubelet's pod log directories; and a real child process placed
 * in crafted cgroups of this machine (skipped when no cgroup hierarchy is writable).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/node/identity.h"
#include "common/error.h"

#define CID "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define UID "5a3f2c1e-9b8d-4e7f-a6b5-c4d3e2f1a0b9"
#define UID_ "5a3f2c1e_9b8d_4e7f_a6b5_c4d3e2f1a0b9"

static struct proc_identity parse(const char *path)
{
	struct proc_identity id;
	assert_int_equal(identity_parse_cgroup_path(path, strlen(path), &id), 0);
	return id;
}

static void test_containerd_systemd_driver(void **state)
{
	(void)state;
	struct proc_identity id = parse("/kubepods.slice/kubepods-burstable.slice/"
					"kubepods-burstable-pod" UID_ ".slice/cri-containerd-" CID ".scope");
	assert_int_equal(id.runtime, IDENTITY_RUNTIME_CONTAINERD);
	assert_string_equal(id.container_id, CID);
	assert_string_equal(id.pod_uid, UID);
	assert_string_equal(id.unit, "cri-containerd-" CID ".scope");
	assert_int_equal(id.slurm_job, 0);
	assert_string_equal(identity_runtime_name(id.runtime), "containerd");

	/* Guaranteed QoS: no QoS slice, kubepods-pod<UID>.slice. */
	id = parse("/kubepods.slice/kubepods-pod" UID_ ".slice/cri-containerd-" CID ".scope");
	assert_string_equal(id.pod_uid, UID);
	assert_string_equal(id.container_id, CID);
}

static void test_crio(void **state)
{
	(void)state;
	struct proc_identity id = parse("/kubepods.slice/kubepods-besteffort.slice/"
					"kubepods-besteffort-pod" UID_ ".slice/crio-" CID ".scope");
	assert_int_equal(id.runtime, IDENTITY_RUNTIME_CRIO);
	assert_string_equal(id.container_id, CID);
	assert_string_equal(id.pod_uid, UID);

	/* conmon, CRI-O's monitor: the pod, no container. */
	id = parse("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID_
		   ".slice/crio-conmon-" CID ".scope");
	assert_string_equal(id.pod_uid, UID);
	assert_string_equal(id.container_id, "");
	assert_int_equal(id.runtime, IDENTITY_RUNTIME_NONE);

	/* cgroupfs driver */
	id = parse("/kubepods/burstable/pod" UID "/crio-" CID);
	assert_int_equal(id.runtime, IDENTITY_RUNTIME_CRIO);
	assert_string_equal(id.container_id, CID);
	assert_string_equal(id.pod_uid, UID);
}

static void test_kubernetes_cgroupfs_driver(void **state)
{
	(void)state;
	struct proc_identity id = parse("/kubepods/burstable/pod" UID "/" CID);
	assert_int_equal(id.runtime, IDENTITY_RUNTIME_UNKNOWN);
	assert_string_equal(id.container_id, CID);
	assert_string_equal(id.pod_uid, UID);
	assert_string_equal(id.unit, "");

	id = parse("/kubepods/pod" UID "/" CID);
	assert_string_equal(id.pod_uid, UID);
	assert_string_equal(id.container_id, CID);

	/* The pod's own cgroup (pause process accounted there): pod, no container. */
	id = parse("/kubepods/besteffort/pod" UID);
	assert_string_equal(id.pod_uid, UID);
	assert_string_equal(id.container_id, "");

	/* Uppercase hex in the uid is folded; the container id must be lowercase. */
	id = parse("/kubepods/podABCDEF01-2345-6789-abcd-ef0123456789/" CID);
	assert_string_equal(id.pod_uid, "abcdef01-2345-6789-abcd-ef0123456789");
}

static void test_docker_and_podman(void **state)
{
	(void)state;
	struct proc_identity id = parse("/docker/" CID);
	assert_int_equal(id.runtime, IDENTITY_RUNTIME_DOCKER);
	assert_string_equal(id.container_id, CID);
	assert_string_equal(id.pod_uid, "");

	id = parse("/system.slice/docker-" CID ".scope");
	assert_int_equal(id.runtime, IDENTITY_RUNTIME_DOCKER);
	assert_string_equal(id.container_id, CID);
	assert_string_equal(id.unit, "docker-" CID ".scope");

	id = parse("/machine.slice/libpod-" CID ".scope/container");
	assert_int_equal(id.runtime, IDENTITY_RUNTIME_PODMAN);
	assert_string_equal(id.container_id, CID);

	id = parse("/machine.slice/libpod-conmon-" CID ".scope");
	assert_int_equal(id.runtime, IDENTITY_RUNTIME_NONE);
	assert_string_equal(id.container_id, "");
	assert_string_equal(id.unit, "libpod-conmon-" CID ".scope");

	/* docker.service itself is a unit, not a container. */
	id = parse("/system.slice/docker.service");
	assert_string_equal(id.container_id, "");
	assert_string_equal(id.unit, "docker.service");
}

static void test_slurm(void **state)
{
	(void)state;
	struct proc_identity id = parse("/slurm/uid_1000/job_4242/step_0/task_3");
	assert_int_equal(id.slurm_job, 4242);
	assert_string_equal(id.slurm_step, "0");

	id = parse("/slurm/uid_1000/job_77/step_batch/task_0");
	assert_int_equal(id.slurm_job, 77);
	assert_string_equal(id.slurm_step, "batch");

	id = parse("/slurm_node17/uid_0/job_9/step_extern");
	assert_int_equal(id.slurm_job, 9);
	assert_string_equal(id.slurm_step, "extern");

	/* cgroup v2: under slurmstepd.scope */
	id = parse("/system.slice/slurmstepd.scope/job_123456/step_interactive/user/task_0");
	assert_int_equal(id.slurm_job, 123456);
	assert_string_equal(id.slurm_step, "interactive");
	assert_string_equal(id.unit, "slurmstepd.scope");

	/* The job alone (slurmstepd's own cgroup); a step that is not one. */
	id = parse("/system.slice/slurmstepd.scope/job_5/slurm_processes");
	assert_int_equal(id.slurm_job, 5);
	assert_string_equal(id.slurm_step, "");
	id = parse("/slurm/uid_1/job_5/step_99999999999");
	assert_string_equal(id.slurm_step, "");

	/* job_ outside a Slurm hierarchy, job_0 and overflowing ids are not jobs. */
	assert_int_equal(parse("/user.slice/job_12").slurm_job, 0);
	assert_int_equal(parse("/slurm/uid_1/job_0/step_0").slurm_job, 0);
	assert_int_equal(parse("/slurm/uid_1/job_99999999999999999999999/step_0").slurm_job, 0);
	assert_int_equal(parse("/slurm/uid_1/job_18446744073709551615/step_0").slurm_job,
			 UINT64_MAX);
}

static void test_systemd_units(void **state)
{
	(void)state;
	assert_string_equal(parse("/system.slice/nginx.service").unit, "nginx.service");
	assert_string_equal(parse("/user.slice/user-1000.slice/session-3.scope").unit, "session-3.scope");
	/* The deepest unit: a user service under user@.service. */
	assert_string_equal(parse("/user.slice/user-1000.slice/user@1000.service/app.slice/"
				  "train.service")
				    .unit,
			    "train.service");
	struct proc_identity id = parse("/");
	assert_string_equal(id.unit, "");
	assert_string_equal(id.container_id, "");
	assert_string_equal(id.pod_uid, "");
}

static void test_near_misses(void **state)
{
	(void)state;
	/* 63 and 65 hex digits, uppercase, a non-hex character: no container. */
	assert_string_equal(parse("/docker/" CID "0").container_id, "");
	assert_string_equal(parse("/docker/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde")
				    .container_id,
			    "");
	assert_string_equal(parse("/docker/0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef")
				    .container_id,
			    "");
	assert_string_equal(parse("/system.slice/docker-" CID "x.scope").container_id, "");
	/* A container id in a path that is not docker's nor a pod's. */
	assert_string_equal(parse("/other/" CID).container_id, "");
	/* pod<UID> outside kubepods; malformed uids. */
	assert_string_equal(parse("/pod" UID "/" CID).pod_uid, "");
	assert_string_equal(parse("/kubepods/pod5a3f2c1e-9b8d-4e7f-a6b5-c4d3e2f1a0b").pod_uid, "");
	assert_string_equal(parse("/kubepods/pod5a3f2c1e_9b8d-4e7f-a6b5-c4d3e2f1a0b9").pod_uid, "");
	assert_string_equal(parse("/kubepods.slice/kubepods-burstable-pod" UID ".slice").pod_uid, "");
	assert_string_equal(parse("/kubepods.slice/kubepods-burstable-xpod" UID_ ".slice").pod_uid, "");
	/* Repeated and trailing slashes are fine. */
	assert_string_equal(parse("//docker//" CID "/").container_id, CID);
}

static void test_rejects(void **state)
{
	struct proc_identity id;
	static char big[IDENTITY_PATH_MAX + 2];
	(void)state;
	assert_int_equal(identity_parse_cgroup_path("docker/x", 8, &id), -SYSOM_ECORRUPT);
	assert_int_equal(identity_parse_cgroup_path("", 0, &id), -SYSOM_ECORRUPT);
	assert_int_equal(identity_parse_cgroup_path("/a\0b", 4, &id), -SYSOM_ECORRUPT);
	memset(big, 'a', sizeof(big));
	big[0] = '/';
	assert_int_equal(identity_parse_cgroup_path(big, IDENTITY_PATH_MAX + 1, &id), -SYSOM_ECORRUPT);
	assert_int_equal(identity_parse_cgroup_path(big, IDENTITY_PATH_MAX, &id), 0);
	/* `len` bounds the parse: the bytes after it are not read. */
	const char *p = "/docker/" CID;
	assert_int_equal(identity_parse_cgroup_path(p, strlen(p) - 1, &id), 0);
	assert_string_equal(id.container_id, "");
}

static void test_cgroup_file(void **state)
{
	struct proc_identity id;
	(void)state;
	/* Hybrid: v2 at the root, the pod in the v1 controllers (as on this machine's kind). */
	const char *hybrid = "12:pids:/kubepods/burstable/pod" UID "/" CID "\n"
			     "4:memory:/kubepods/burstable/pod" UID "/" CID "\n"
			     "1:name=systemd:/kubepods/burstable/pod" UID "/" CID "\n"
			     "0::/\n";
	assert_int_equal(identity_parse_cgroup_file(hybrid, strlen(hybrid), &id), 0);
	assert_string_equal(id.container_id, CID);
	assert_string_equal(id.pod_uid, UID);

	/* v2 only. */
	const char *v2 = "0::/system.slice/docker-" CID ".scope\n";
	assert_int_equal(identity_parse_cgroup_file(v2, strlen(v2), &id), 0);
	assert_int_equal(id.runtime, IDENTITY_RUNTIME_DOCKER);

	/* The richer line wins over the preferred one; among equals v2 wins. */
	const char *mixed = "3:cpu:/slurm/uid_1/job_8/step_2\n0::/system.slice/sshd.service\n";
	assert_int_equal(identity_parse_cgroup_file(mixed, strlen(mixed), &id), 0);
	assert_int_equal(id.slurm_job, 8);
	assert_string_equal(id.unit, "");
	const char *units = "1:name=systemd:/system.slice/a.service\n0::/system.slice/b.service";
	assert_int_equal(identity_parse_cgroup_file(units, strlen(units), &id), 0);
	assert_string_equal(id.unit, "b.service");

	/* A path containing ':' stays whole; malformed lines are skipped. */
	const char *colon = "garbage\nx:y:/z\n5:cpu:/a:b.service\n";
	assert_int_equal(identity_parse_cgroup_file(colon, strlen(colon), &id), 0);
	assert_string_equal(id.unit, "a:b.service");
	const char *bad = "garbage\n:cpu:/\n7:cpu\n";
	assert_int_equal(identity_parse_cgroup_file(bad, strlen(bad), &id), -SYSOM_ECORRUPT);
	assert_int_equal(identity_parse_cgroup_file("", 0, &id), -SYSOM_ECORRUPT);
}

static void test_read_file_and_self(void **state)
{
	struct proc_identity id;
	char path[] = "/tmp/sysom-test-identity-XXXXXX";
	(void)state;
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	const char *text = "0::/system.slice/slurmstepd.scope/job_31/step_batch/user/task_0\n";
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(identity_read(0, path, &id), 0);
	assert_int_equal(id.slurm_job, 31);
	assert_string_equal(id.slurm_step, "batch");
	/* Longer than IDENTITY_CGROUP_FILE_MAX: refused. */
	static char filler[4096];
	memset(filler, '\n', sizeof(filler));
	for (size_t n = 0; n <= IDENTITY_CGROUP_FILE_MAX; n += sizeof(filler))
		assert_int_equal(write(fd, filler, sizeof(filler)), (ssize_t)sizeof(filler));
	close(fd);
	assert_int_equal(identity_read(0, path, &id), -SYSOM_ELIMIT);
	unlink(path);
	assert_int_equal(identity_read(0, "/nonexistent/sysom", &id), -ENOENT);
	assert_int_equal(identity_read(0, NULL, &id), -EINVAL);
	/* This process: whatever its cgroup, the real file parses. */
	assert_int_equal(identity_read(getpid(), NULL, &id), 0);
	/* A pid that does not exist (beyond pid_max). */
	assert_int_equal(identity_read(1 << 30, NULL, &id), -ESRCH);
}

static char podroot[] = "/tmp/sysom-test-pods-XXXXXX";

static void mkpod(const char *name)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", podroot, name);
	assert_int_equal(mkdir(p, 0755), 0);
}

static void rmpod(const char *name)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", podroot, name);
	rmdir(p);
}

static void test_pod_lookup(void **state)
{
	char ns[IDENTITY_K8S_NAME_MAX], name[IDENTITY_K8S_NAME_MAX], small[4];
	(void)state;
	assert_non_null(mkdtemp(podroot));
	mkpod("kube-system_coredns-5d78c9869d-abcde_11111111-2222-3333-4444-555555555555");
	mkpod("training_llama-worker-3_" UID);
	mkpod("junk_" UID "x");
	mkpod("a_b_c_" UID);

	assert_int_equal(identity_pod_lookup(podroot, UID, ns, sizeof(ns), name, sizeof(name)), 0);
	assert_string_equal(ns, "training");
	assert_string_equal(name, "llama-worker-3");
	assert_int_equal(identity_pod_lookup(podroot, "11111111-2222-3333-4444-555555555555", ns,
					     sizeof(ns), name, sizeof(name)),
			 0);
	assert_string_equal(ns, "kube-system");
	assert_string_equal(name, "coredns-5d78c9869d-abcde");
	assert_int_equal(identity_pod_lookup(podroot, "99999999-2222-3333-4444-555555555555", ns,
					     sizeof(ns), name, sizeof(name)),
			 -ENOENT);
	assert_int_equal(identity_pod_lookup(podroot, "not-a-uid", ns, sizeof(ns), name, sizeof(name)),
			 -EINVAL);
	assert_int_equal(identity_pod_lookup(podroot, UID, small, sizeof(small), name, sizeof(name)),
			 -EINVAL);
	assert_int_equal(identity_pod_lookup("/nonexistent/sysom", UID, ns, sizeof(ns), name,
					     sizeof(name)),
			 -ENOENT);

	/* The directory name parser alone. */
	char uid[IDENTITY_POD_UID_LEN + 1];
	const char *d = "ns_pod_" UID;
	assert_int_equal(identity_parse_pod_dir(d, strlen(d), ns, sizeof(ns), name, sizeof(name), uid), 0);
	assert_string_equal(uid, UID);
	const char *bads[] = { "_pod_" UID, "ns__" UID, "nspod_" UID, "ns_pod" UID, "a_b_c_" UID,
			       "ns_pod_" UID_ };
	for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++)
		assert_int_equal(identity_parse_pod_dir(bads[i], strlen(bads[i]), ns, sizeof(ns), name,
							sizeof(name), uid),
				 -SYSOM_ECORRUPT);

	rmpod("kube-system_coredns-5d78c9869d-abcde_11111111-2222-3333-4444-555555555555");
	rmpod("training_llama-worker-3_" UID);
	rmpod("junk_" UID "x");
	rmpod("a_b_c_" UID);
	rmdir(podroot);
}

/* ---- Container names from the kubelet's /var/log/containers links. */

#define CID2 "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
#define CID3 "00000000000000000000000000000000000000000000000000000000000000ff"

static char logroot[] = "/tmp/sysom-test-containers-XXXXXX";

/* A link named `name` pointing at `target` (which need not exist). */
static void mklink(const char *name, const char *target)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", logroot, name);
	assert_int_equal(symlink(target, p), 0);
}

static void rmall(void)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", logroot);
	assert_int_equal(system(cmd), 0);
}

static void test_container_log_parser(void **state)
{
	char name[IDENTITY_CONTAINER_NAME_MAX], cid[IDENTITY_CONTAINER_ID_LEN + 1], small[4];
	(void)state;
	/* '-' in pod, namespace and container names; the id is what follows the last '-'. */
	const char *f = "llama-worker-3_kube-train_pytorch-main-2-" CID ".log";
	assert_int_equal(identity_parse_container_log(f, strlen(f), name, sizeof(name), cid), 0);
	assert_string_equal(name, "pytorch-main-2");
	assert_string_equal(cid, CID);
	f = "p_n_c-" CID ".log";
	assert_int_equal(identity_parse_container_log(f, strlen(f), name, sizeof(name), cid), 0);
	assert_string_equal(name, "c");
	/* The longest container name, 63 bytes, fits; 64 does not; nor a small buffer. */
	char longest[200];
	snprintf(longest, sizeof(longest), "p_n_%063d-" CID ".log", 7);
	assert_int_equal(identity_parse_container_log(longest, strlen(longest), name, sizeof(name), cid), 0);
	assert_int_equal(strlen(name), 63);
	snprintf(longest, sizeof(longest), "p_n_%064d-" CID ".log", 7);
	assert_int_equal(identity_parse_container_log(longest, strlen(longest), name, sizeof(name), cid),
			 -SYSOM_ECORRUPT);
	f = "p_n_main-" CID ".log";
	assert_int_equal(identity_parse_container_log(f, strlen(f), small, sizeof(small), cid),
			 -SYSOM_ECORRUPT);
	const char *bads[] = {
		"p_n_c_d-" CID ".log",          /* '_' in the container name */
		"p_nc-" CID ".log",             /* no namespace */
		"_n_c-" CID ".log",             /* empty pod */
		"p__c-" CID ".log",             /* empty namespace */
		"p_n_-" CID ".log",             /* empty container */
		"p_n_c" CID ".log",             /* no '-' before the id */
		"p_n_c-" CID "0.log",           /* 65 hex digits */
		"p_n_c-" CID ".logx",           /* not .log */
		"p_n_c-" CID,                   /* no .log */
		"p_n_c-0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef.log", /* case */
		"p_n_c-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde.log", /* 63 */
		"p_n_c--" CID ".log",           /* container "c-": accepted below, not here */
	};
	for (size_t i = 0; i + 1 < sizeof(bads) / sizeof(bads[0]); i++)
		assert_int_equal(identity_parse_container_log(bads[i], strlen(bads[i]), name, sizeof(name),
							      cid),
				 -SYSOM_ECORRUPT);
	/* 63 hex digits after a '-' that belongs to the name: the id is read as 64 digits from
	 * the end, so "c-0123...cde" is refused above, while "c--<64>" is the name "c-". */
	f = bads[sizeof(bads) / sizeof(bads[0]) - 1];
	assert_int_equal(identity_parse_container_log(f, strlen(f), name, sizeof(name), cid), 0);
	assert_string_equal(name, "c-");
	/* A NUL byte inside. */
	char nul[] = "p_n_c-" CID ".log";
	nul[1] = '\0';
	assert_int_equal(identity_parse_container_log(nul, sizeof(nul) - 1, name, sizeof(name), cid),
			 -SYSOM_ECORRUPT);
}

static void test_container_names(void **state)
{
	char name[IDENTITY_CONTAINER_NAME_MAX], small[3];
	struct identity_names *n;
	struct identity_names_stats st;
	(void)state;
	assert_non_null(mkdtemp(logroot));
	/* A live link, a dangling one (its log rotated away), and names that are not links of
	 * containers. */
	char target[600];
	snprintf(target, sizeof(target), "%s/0.log", logroot);
	assert_int_equal(close(open(target, O_CREAT | O_WRONLY | O_CLOEXEC, 0644)), 0);
	mklink("llama-worker-3_training_pytorch-" CID ".log", target);
	mklink("coredns-5d78c9869d-abcde_kube-system_coredns-" CID2 ".log", "/nonexistent/sysom/0.log");
	mklink("junk-" CID3 ".log", target);
	mklink("a_b_c_d-" CID3 ".log", target);

	assert_int_equal(identity_names_new("", 0, 0, &n), -EINVAL);
	assert_int_equal(identity_names_new(logroot, 0, 1000, &n), 0);
	assert_int_equal(identity_container_name(n, CID, 1, name, sizeof(name)), 0);
	assert_string_equal(name, "pytorch");
	assert_int_equal(identity_container_name(n, CID2, 2, name, sizeof(name)), 0);
	assert_string_equal(name, "coredns");
	identity_names_stats_read(n, &st);
	assert_int_equal(st.scans, 1); /* one read served both */
	assert_int_equal(st.entries, 2);
	assert_false(st.truncated);
	assert_int_equal(identity_container_name(n, CID, 3, small, sizeof(small)), -EINVAL);
	assert_int_equal(identity_container_name(n, "0123", 3, name, sizeof(name)), -EINVAL);

	/* A new container: unknown until the rescan interval has passed since the last read. */
	mklink("p_ns_late-" CID3 ".log", target);
	assert_int_equal(identity_container_name(n, CID3, 500, name, sizeof(name)), -ENOENT);
	identity_names_stats_read(n, &st);
	assert_int_equal(st.scans, 1);
	assert_int_equal(identity_container_name(n, CID3, 1001, name, sizeof(name)), 0);
	assert_string_equal(name, "late");
	identity_names_stats_read(n, &st);
	assert_int_equal(st.scans, 2);
	assert_int_equal(st.entries, 3);
	/* Known ids never cause a read. */
	for (uint64_t t = 5000; t < 5100; t++)
		assert_int_equal(identity_container_name(n, CID, t, name, sizeof(name)), 0);
	identity_names_stats_read(n, &st);
	assert_int_equal(st.scans, 2);
	identity_names_free(n);

	/* The entry limit: a table stopped at it says so for the ids it could not reach. */
	for (int i = 0; i < 40; i++) {
		char f[200];
		snprintf(f, sizeof(f), "p_ns_c%d-%064x.log", i, i + 0x100);
		mklink(f, target);
	}
	assert_int_equal(identity_names_new(logroot, 10, 0, &n), 0);
	int found = 0, limited = 0;
	for (int i = 0; i < 40; i++) {
		char id[80];
		snprintf(id, sizeof(id), "%064x", i + 0x100);
		int rc = identity_container_name(n, id, 0, name, sizeof(name));
		assert_true(rc == 0 || rc == -SYSOM_ELIMIT);
		found += rc == 0;
		limited += rc == -SYSOM_ELIMIT;
	}
	identity_names_stats_read(n, &st);
	assert_true(st.truncated);
	assert_true(st.entries <= 10);
	assert_true(found <= 10 && limited >= 30);
	identity_names_free(n);

	/* The directory gone: its errno. */
	rmall();
	assert_int_equal(identity_names_new(logroot, 0, 0, &n), 0);
	assert_int_equal(identity_container_name(n, CID, 0, name, sizeof(name)), -ENOENT);
	identity_names_free(n);
	identity_names_free(NULL);
}

/* ---- A real process in crafted cgroups of this machine. */

static int write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, text, strlen(text));
	int rc = n == (ssize_t)strlen(text) ? 0 : -errno;
	close(fd);
	return rc;
}

/*
 * Makes `rel` (a path of nested directories) under the first writable hierarchy of
 * `roots`; moves `pid` into it. Returns the index of the root used or -1.
 */
static const char *const roots[] = { "/sys/fs/cgroup/unified", "/sys/fs/cgroup/pids",
				     "/sys/fs/cgroup" };

static int place(pid_t pid, const char *rel, char *dir, size_t dir_size)
{
	char procs[4200], pidtext[32];
	snprintf(pidtext, sizeof(pidtext), "%d\n", (int)pid);
	for (size_t r = 0; r < sizeof(roots) / sizeof(roots[0]); r++) {
		snprintf(procs, sizeof(procs), "%s/cgroup.procs", roots[r]);
		if (access(procs, W_OK) != 0)
			continue;
		/* mkdir -p */
		snprintf(dir, dir_size, "%s%s", roots[r], rel);
		bool made = true;
		for (char *s = dir + strlen(roots[r]) + 1; made; s++) {
			if (*s == '/' || *s == '\0') {
				char c = *s;
				*s = '\0';
				if (mkdir(dir, 0755) != 0 && errno != EEXIST)
					made = false;
				*s = c;
				if (c == '\0')
					break;
			}
		}
		snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
		if (made && write_text(procs, pidtext) == 0)
			return (int)r;
	}
	return -1;
}

/* Moves `pid` back to the root of hierarchy `r` and removes `rel`'s directories. */
static void unplace(int r, pid_t pid, const char *rel)
{
	char path[4200], pidtext[32], buf[4200];
	snprintf(pidtext, sizeof(pidtext), "%d\n", (int)pid);
	snprintf(path, sizeof(path), "%s/cgroup.procs", roots[r]);
	write_text(path, pidtext);
	snprintf(buf, sizeof(buf), "%s", rel);
	for (;;) {
		snprintf(path, sizeof(path), "%s%s", roots[r], buf);
		rmdir(path);
		char *slash = strrchr(buf, '/');
		if (!slash || slash == buf)
			break;
		*slash = '\0';
	}
}

static void test_real_process_in_cgroups(void **state)
{
	(void)state;
	char dir[4200];
	struct proc_identity id;
	if (geteuid() != 0)
		skip();
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		pause();
		_exit(0);
	}
	char rel[512];
	snprintf(rel, sizeof(rel), "/kubepods/burstable/pod%08x-9b8d-4e7f-a6b5-c4d3e2f1a0b9/" CID,
		 (unsigned)getpid());
	int r = place(child, rel, dir, sizeof(dir));
	if (r < 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		skip();
	}
	int rc = identity_read(child, NULL, &id);
	char want_uid[40];
	snprintf(want_uid, sizeof(want_uid), "%08x-9b8d-4e7f-a6b5-c4d3e2f1a0b9", (unsigned)getpid());
	bool pod_ok = strcmp(id.pod_uid, want_uid) == 0 && strcmp(id.container_id, CID) == 0;
	unplace(r, child, rel);

	/* The same child in a Slurm step of the same hierarchy. */
	snprintf(rel, sizeof(rel), "/system.slice/slurmstepd.scope/job_%u/step_batch",
		 (unsigned)getpid());
	struct proc_identity sid;
	int r2 = place(child, rel, dir, sizeof(dir));
	int rc2 = r2 >= 0 ? identity_read(child, NULL, &sid) : -1;
	if (r2 >= 0)
		unplace(r2, child, rel);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);

	assert_int_equal(rc, 0);
	assert_true(pod_ok);
	assert_int_equal(rc2, 0);
	assert_int_equal(sid.slurm_job, (uint64_t)getpid());
	assert_string_equal(sid.slurm_step, "batch");
	/* Gone: -ESRCH. */
	assert_int_equal(identity_read(child, NULL, &id), -ESRCH);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_containerd_systemd_driver),
		cmocka_unit_test(test_crio),
		cmocka_unit_test(test_kubernetes_cgroupfs_driver),
		cmocka_unit_test(test_docker_and_podman),
		cmocka_unit_test(test_slurm),
		cmocka_unit_test(test_systemd_units),
		cmocka_unit_test(test_near_misses),
		cmocka_unit_test(test_rejects),
		cmocka_unit_test(test_cgroup_file),
		cmocka_unit_test(test_read_file_and_self),
		cmocka_unit_test(test_pod_lookup),
		cmocka_unit_test(test_container_log_parser),
		cmocka_unit_test(test_container_names),
		cmocka_unit_test(test_real_process_in_cgroups),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
