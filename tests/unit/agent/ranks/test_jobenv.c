/* SPDX-License-Identifier: Apache-2.0 */
/* Job identity from launcher environments: torchrun, SLURM, Open MPI, hostile blocks, /proc. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <setjmp.h>
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

#include "agent/ranks/jobenv.h"
#include "tests/support/batch_fixture.h"

/* Builds a NUL-separated block from a NULL-terminated list of entries. */
static size_t block_of(char *buf, size_t size, const char *const *entries)
{
	size_t len = 0;

	for (int i = 0; entries[i]; i++) {
		size_t n = strlen(entries[i]) + 1;
		assert_true(len + n <= size);
		memcpy(buf + len, entries[i], n);
		len += n;
	}
	return len;
}

static void parse(const char *const *entries, struct job_identity *out)
{
	char buf[4096];
	size_t len = block_of(buf, sizeof(buf), entries);

	assert_int_equal(jobenv_parse(buf, len, out), 0);
}

static void test_torchrun(void **state)
{
	static const char *const env[] = {
		"PATH=/usr/bin", "RANK=5", "LOCAL_RANK=1", "WORLD_SIZE=16", "LOCAL_WORLD_SIZE=8",
		"GROUP_RANK=0", "MASTER_ADDR=10.0.0.7", "MASTER_PORT=29500",
		"TORCHELASTIC_RUN_ID=llama-70b-run3", NULL
	};
	struct job_identity j;
	(void)state;

	parse(env, &j);
	assert_true(j.has_rank);
	assert_int_equal(j.rank, 5);
	assert_int_equal(j.world_size, 16);
	assert_int_equal(j.local_rank, 1);
	assert_int_equal(j.local_world_size, 8);
	assert_int_equal(j.group_rank, 0);
	assert_string_equal(j.master_addr, "10.0.0.7");
	assert_int_equal(j.master_port, 29500);
	assert_string_equal(j.job_id, "llama-70b-run3");
	assert_string_equal(j.job_id_source, "TORCHELASTIC_RUN_ID");
}

static void test_slurm_and_mpi(void **state)
{
	static const char *const slurm[] = { "SLURM_JOB_ID=81234", "SLURM_STEP_ID=2",
					      "SLURM_PROCID=17", "SLURM_NTASKS=32",
					      "SLURM_LOCALID=1", "SLURM_NODEID=8", NULL };
	static const char *const mpi[] = { "OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4",
					   "OMPI_COMM_WORLD_LOCAL_RANK=3",
					   "OMPI_COMM_WORLD_LOCAL_SIZE=4", "MASTER_ADDR=head",
					   "MASTER_PORT=1234", NULL };
	/* torchrun inside a SLURM allocation: torchrun's own variables win. */
	static const char *const both[] = { "SLURM_PROCID=0", "SLURM_NTASKS=2", "RANK=9",
					    "WORLD_SIZE=16", "SLURM_JOB_ID=7",
					    "TORCHELASTIC_RUN_ID=inner", NULL };
	struct job_identity j;
	(void)state;

	parse(slurm, &j);
	assert_true(j.has_rank);
	assert_int_equal(j.rank, 17);
	assert_int_equal(j.world_size, 32);
	assert_int_equal(j.local_rank, 1);
	assert_int_equal(j.group_rank, 8);
	assert_string_equal(j.job_id, "81234.2");
	assert_string_equal(j.job_id_source, "SLURM_JOB_ID");

	parse(mpi, &j);
	assert_true(j.has_rank);
	assert_int_equal(j.rank, 3);
	assert_int_equal(j.local_world_size, 4);
	assert_string_equal(j.job_id, "head:1234");
	assert_string_equal(j.job_id_source, "MASTER_ADDR");

	parse(both, &j);
	assert_int_equal(j.rank, 9);
	assert_int_equal(j.world_size, 16);
	assert_string_equal(j.job_id, "inner");
}

static void test_not_a_job(void **state)
{
	static const char *const plain[] = { "HOME=/root", "SHELL=/bin/bash", NULL };
	struct job_identity j;
	(void)state;

	parse(plain, &j);
	assert_false(j.has_rank);
	assert_int_equal(j.rank, -1);
	assert_int_equal(j.world_size, -1);
	assert_string_equal(j.job_id, "");
	assert_null(j.job_id_source);
	assert_int_equal(jobenv_parse(NULL, 0, &j), 0);
	assert_false(j.has_rank);
	assert_int_equal(jobenv_parse(NULL, 5, &j), -EINVAL);
}

/* Whatever a process puts in its environment is untrusted: numbers strictly decimal and in
 * range, ranks consistent, text printable and bounded, the first definition wins. */
static void test_hostile_values(void **state)
{
	static const char *const bad_numbers[] = { "RANK=-1", "WORLD_SIZE=0x10", NULL };
	static const char *const too_big[] = { "RANK=1", "WORLD_SIZE=99999999999", NULL };
	static const char *const inconsistent[] = { "RANK=8", "WORLD_SIZE=8", NULL };
	static const char *const local_inconsistent[] = { "RANK=1", "WORLD_SIZE=8",
							  "LOCAL_RANK=4", "LOCAL_WORLD_SIZE=4", NULL };
	static const char *const twice[] = { "RANK=2", "RANK=3", "WORLD_SIZE=4", NULL };
	static const char *const bad_port[] = { "MASTER_ADDR=h", "MASTER_PORT=70000", NULL };
	struct job_identity j;
	char buf[4096];
	(void)state;

	parse(bad_numbers, &j);
	assert_false(j.has_rank);
	parse(too_big, &j);
	assert_false(j.has_rank);
	assert_int_equal(j.world_size, -1);
	parse(inconsistent, &j);
	assert_false(j.has_rank);
	parse(local_inconsistent, &j);
	assert_false(j.has_rank);
	parse(twice, &j);
	assert_int_equal(j.rank, 2);
	parse(bad_port, &j);
	assert_int_equal(j.master_port, -1);
	assert_string_equal(j.job_id, ""); /* no usable master address:port */

	/* Control characters and an over-long id: printable, truncated, terminated. */
	size_t len = (size_t)snprintf(buf, sizeof(buf), "TORCHELASTIC_RUN_ID=a\nb\033c");
	memset(buf + len, 'x', 1000);
	len += 1000;
	assert_int_equal(jobenv_parse(buf, len, &j), 0); /* last entry without its NUL */
	assert_int_equal(strlen(j.job_id), JOBENV_VALUE_MAX - 1);
	for (size_t i = 0; j.job_id[i]; i++)
		assert_true(j.job_id[i] >= 0x20 && j.job_id[i] < 0x7f);
	assert_int_equal(strncmp(j.job_id, "a b c", 5), 0);

	/* A name that is a prefix of another, and entries without '='. */
	static const char *const prefixes[] = { "RANKS=7", "RANK", "WORLD_SIZE_X=3", "RANK=1",
						"WORLD_SIZE=2", NULL };
	parse(prefixes, &j);
	assert_true(j.has_rank);
	assert_int_equal(j.rank, 1);
	assert_int_equal(j.world_size, 2);
}

/* From /proc: a real process's environment, a fake proc root, and a vanished pid. */
static void test_read_proc(void **state)
{
	char dir[] = "/tmp/sysom-jobenv-XXXXXX", path[512];
	struct job_identity j;
	int pipefd[2];
	(void)state;

	assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char *const argv[] = { "sleep", "5", NULL };
		char *const envp[] = { "RANK=3", "WORLD_SIZE=8", "TORCHELASTIC_RUN_ID=proc-test",
				       NULL };
		execve("/bin/sleep", argv, envp); /* closes the pipe: the parent sees EOF */
		_exit(127);
	}
	close(pipefd[1]);
	char c;
	assert_int_equal(read(pipefd[0], &c, 1), 0); /* exec happened (close-on-exec pipe) */
	close(pipefd[0]);
	assert_int_equal(jobenv_read(NULL, (uint32_t)pid, &j), 0);
	assert_true(j.has_rank);
	assert_int_equal(j.rank, 3);
	assert_int_equal(j.world_size, 8);
	assert_string_equal(j.job_id, "proc-test");
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/42", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/42/environ", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fwrite("RANK=0\0WORLD_SIZE=1\0", 1, 20, f);
	fclose(f);
	assert_int_equal(jobenv_read(dir, 42, &j), 0);
	assert_true(j.has_rank);
	assert_int_equal(j.world_size, 1);
	assert_int_equal(jobenv_read(dir, 43, &j), -ESRCH);
	fixture_tmpdir_remove(dir);
}

/* A fake /proc entry: stat with `ppid`, exe → `exe`, environ `env` (env_len bytes). */
static void fake_proc(const char *root, uint32_t pid, uint32_t ppid, const char *exe,
		      const char *env, size_t env_len)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%u", root, pid);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/%u/stat", root, pid);
	assert_non_null(f = fopen(path, "w"));
	fprintf(f, "%u (py) thon) S %u 1 1 0 -1\n", pid, ppid);
	fclose(f);
	snprintf(path, sizeof(path), "%s/%u/exe", root, pid);
	assert_int_equal(symlink(exe, path), 0);
	snprintf(path, sizeof(path), "%s/%u/environ", root, pid);
	assert_non_null(f = fopen(path, "w"));
	fwrite(env, 1, env_len, f);
	fclose(f);
}

#define ENV(s) s, sizeof(s) - 1

/* DataLoader workers (same executable, inherited rank) belong to the rank's process; a launcher
 * or wrapper of another executable, another rank, or another job does not make a worker. */
static void test_rank_process(void **state)
{
	static const char rank0[] = "TORCHELASTIC_RUN_ID=j\0RANK=0\0WORLD_SIZE=2\0LOCAL_RANK=0\0";
	static const char rank1[] = "TORCHELASTIC_RUN_ID=j\0RANK=1\0WORLD_SIZE=2\0LOCAL_RANK=1\0";
	static const char other[] = "TORCHELASTIC_RUN_ID=k\0RANK=0\0WORLD_SIZE=2\0LOCAL_RANK=0\0";
	const char *py = "/usr/bin/python3.11";
	char dir[] = "/tmp/sysom-jobenv-XXXXXX";
	struct job_identity id;
	uint32_t rank_pid = 99;

	(void)state;
	assert_non_null(mkdtemp(dir));
	fake_proc(dir, 10, 1, py, ENV(rank0));   /* rank 0 */
	fake_proc(dir, 11, 10, py, ENV(rank0));  /* its worker */
	fake_proc(dir, 12, 11, py, ENV(rank0));  /* a worker's worker */
	fake_proc(dir, 13, 10, py, ENV(rank1));  /* another rank started by it */
	fake_proc(dir, 14, 10, py, ENV(other));  /* another job's rank 0 */
	fake_proc(dir, 20, 1, "/bin/bash", ENV(rank0)); /* a wrapper script ... */
	fake_proc(dir, 21, 20, py, ENV(rank0));          /* ... runs the rank as a child */
	fake_proc(dir, 30, 1, py, ENV("PATH=/bin\0"));  /* not a job: a worker needs a rank */

	assert_int_equal(jobenv_read(dir, 10, &id), 0);
	assert_int_equal(jobenv_rank_process(dir, 10, &id, &rank_pid), 0);
	assert_int_equal(rank_pid, 0);
	assert_int_equal(jobenv_rank_process(dir, 11, &id, &rank_pid), 0);
	assert_int_equal(rank_pid, 10);
	assert_int_equal(jobenv_rank_process(dir, 12, &id, &rank_pid), 0);
	assert_int_equal(rank_pid, 10);
	assert_int_equal(jobenv_read(dir, 13, &id), 0);
	assert_int_equal(jobenv_rank_process(dir, 13, &id, &rank_pid), 0);
	assert_int_equal(rank_pid, 0);
	assert_int_equal(jobenv_read(dir, 14, &id), 0);
	assert_int_equal(jobenv_rank_process(dir, 14, &id, &rank_pid), 0);
	assert_int_equal(rank_pid, 0);
	assert_int_equal(jobenv_read(dir, 21, &id), 0);
	assert_int_equal(jobenv_rank_process(dir, 21, &id, &rank_pid), 0);
	assert_int_equal(rank_pid, 0);
	assert_int_equal(jobenv_read(dir, 30, &id), 0);
	assert_int_equal(jobenv_rank_process(dir, 30, &id, &rank_pid), 0);
	assert_int_equal(rank_pid, 0);
	assert_int_equal(jobenv_read(dir, 10, &id), 0);
	assert_int_equal(jobenv_rank_process(dir, 77, &id, &rank_pid), -ESRCH);
	fixture_tmpdir_remove(dir);
}

/* A process in a fake proc root with a full stat line: parent and start time (field 22). */
static void fake_proc_at(const char *root, uint32_t pid, uint32_t ppid, uint64_t start,
			 const char *exe, const char *env, size_t env_len)
{
	char path[512];
	FILE *f;

	fake_proc(root, pid, ppid, exe, env, env_len);
	snprintf(path, sizeof(path), "%s/%u/stat", root, pid);
	assert_non_null(f = fopen(path, "w"));
	fprintf(f, "%u (py) thon) S %u %u %u 0 -1 4194304 10 0 0 0 5 1 0 0 20 0 1 0 %llu 1000 "
		"100 18446744073709551615\n", pid, ppid, pid, pid, (unsigned long long)start);
	fclose(f);
}

static void gone(const char *root, uint32_t pid)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%u", root, pid);
	fixture_tmpdir_remove(path);
}

/* Whom jobenv_rank_process and then the memory say `pid` is a worker of (0: a rank). */
static uint32_t worker_of(struct jobenv_ranks *r, const char *dir, uint32_t pid, uint64_t now)
{
	struct job_identity id;
	uint32_t rank_pid = 99;

	assert_int_equal(jobenv_read(dir, pid, &id), 0);
	assert_int_equal(jobenv_rank_process(dir, pid, &id, &rank_pid), 0);
	if (rank_pid)
		return rank_pid;
	assert_int_equal(jobenv_ranks_worker_of(r, dir, pid, &id, now, &rank_pid), 0);
	return rank_pid;
}

static void note(struct jobenv_ranks *r, const char *dir, uint32_t pid, uint64_t now)
{
	struct job_identity id;

	assert_int_equal(jobenv_read(dir, pid, &id), 0);
	assert_int_equal(jobenv_ranks_note(r, dir, pid, &id, now), 0);
}

/* A DataLoader worker the agent first reads after its rank exited (reparented to init): the
 * memory of exited ranks places it; a restarted rank, an older process or another executable
 * with the same identity is not taken for a worker. */
static void test_orphaned_worker(void **state)
{
	static const char rank0[] = "TORCHELASTIC_RUN_ID=j\0RANK=0\0WORLD_SIZE=2\0LOCAL_RANK=0\0";
	static const char rank1[] = "TORCHELASTIC_RUN_ID=j\0RANK=1\0WORLD_SIZE=2\0LOCAL_RANK=1\0";
	static const char launcher[] = "TORCHELASTIC_RUN_ID=j\0";
	const char *py = "/usr/bin/python3.11";
	char dir[] = "/tmp/sysom-jobenv-XXXXXX";
	struct jobenv_ranks *r = NULL;
	struct job_identity id;
	uint32_t rank_pid = 99;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(jobenv_ranks_new(JOBENV_RANKS_MAX, JOBENV_RANKS_MAX_AGE_NS, &r), 0);
	fake_proc_at(dir, 5, 1, 50, py, ENV(launcher));   /* torchrun: names the job, no rank */
	fake_proc_at(dir, 10, 5, 100, py, ENV(rank0));    /* rank 0 */
	fake_proc_at(dir, 20, 5, 100, py, ENV(rank1));    /* rank 1 */
	fake_proc_at(dir, 9, 1, 60, py, ENV(rank0));      /* rank 0's identity, started before */
	fake_proc_at(dir, 8, 1, 150, "/bin/bash", ENV(rank0)); /* another executable */
	assert_int_equal(worker_of(r, dir, 10, 1), 0);
	note(r, dir, 10, 1);
	note(r, dir, 20, 1);
	assert_int_equal(jobenv_ranks_count(r), 2);
	note(r, dir, 10, 2); /* seen again: the same record */
	assert_int_equal(jobenv_ranks_count(r), 2);

	/* Rank 0 exits at tick 500; its worker (started at 200) is reparented to init. */
	fake_proc_at(dir, 11, 1, 200, py, ENV(rank0));
	gone(dir, 10);
	assert_true(jobenv_ranks_exited(r, 10, 500, 3));
	assert_false(jobenv_ranks_exited(r, 10, 600, 3)); /* already marked */
	assert_int_equal(worker_of(r, dir, 11, 4), 10);
	/* ... and a worker of that worker, reparented too: its walk stops at init. */
	fake_proc_at(dir, 12, 1, 300, py, ENV(rank0));
	assert_int_equal(worker_of(r, dir, 12, 4), 10);
	/* Not workers: started before the rank, another executable, another rank's identity
	 * under the same parent, a process started after the rank exited. */
	assert_int_equal(worker_of(r, dir, 9, 4), 0);
	assert_int_equal(worker_of(r, dir, 8, 4), 0);
	fake_proc_at(dir, 13, 1, 700, py, ENV(rank0));
	assert_int_equal(worker_of(r, dir, 13, 4), 0);
	/* torchrun restarts rank 0 (its parent is the old rank's): a rank, even when the old
	 * rank's exit time is unknown. */
	fake_proc_at(dir, 14, 5, 600, py, ENV(rank0));
	assert_int_equal(worker_of(r, dir, 14, 4), 0);
	fake_proc_at(dir, 21, 5, 300, py, ENV(rank1));
	assert_int_equal(worker_of(r, dir, 21, 4), 0);
	assert_true(jobenv_ranks_exited(r, 20, UINT64_MAX, 4));
	assert_int_equal(worker_of(r, dir, 21, 4), 0);
	/* A rank alive whose worker was reparented (its parent exited): still the rank's. */
	note(r, dir, 14, 5);
	fake_proc_at(dir, 15, 1, 650, py, ENV(rank0));
	assert_int_equal(worker_of(r, dir, 15, 5), 14);
	/* A process the rank ran through a wrapper of another executable (which inherited the
	 * rank's variables) is not taken for a reparented worker: the wrapper rule stands. */
	fake_proc_at(dir, 16, 14, 660, "/bin/bash", ENV(rank0));
	fake_proc_at(dir, 17, 16, 670, py, ENV(rank0));
	assert_int_equal(worker_of(r, dir, 17, 5), 0);
	/* No rank: nothing to place. */
	memset(&id, 0, sizeof(id));
	assert_int_equal(jobenv_ranks_worker_of(r, dir, 15, &id, 5, &rank_pid), 0);
	assert_int_equal(rank_pid, 0);
	assert_int_equal(jobenv_read(dir, 15, &id), 0);
	assert_int_equal(jobenv_ranks_worker_of(r, dir, 77, &id, 5, &rank_pid), -ESRCH);
	assert_int_equal(jobenv_ranks_note(r, dir, 77, &id, 5), -ESRCH);
	jobenv_ranks_free(r);
	fixture_tmpdir_remove(dir);
}

static void fake_cgroup(const char *root, uint32_t pid, const char *cgroup)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%u/cgroup", root, pid);
	assert_non_null(f = fopen(path, "w"));
	fprintf(f, "0::%s\n", cgroup);
	fclose(f);
}

/* Two jobs whose environments name no job (each named later by its pod or its Slurm step):
 * the same rank of the other, started later under another launcher, is not a worker of this
 * one (e2e test_identity: the pod job's rank 1 was taken for the Slurm step's); a worker in
 * its rank's cgroup still is. */
static void test_orphaned_worker_other_cgroup(void **state)
{
	static const char rank1[] = "RANK=1\0WORLD_SIZE=2\0LOCAL_RANK=1\0";
	const char *exe = "/opt/job/simjob";
	char dir[] = "/tmp/sysom-jobenv-XXXXXX";
	struct jobenv_ranks *r = NULL;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(jobenv_ranks_new(JOBENV_RANKS_MAX, JOBENV_RANKS_MAX_AGE_NS, &r), 0);
	fake_proc_at(dir, 5, 1, 50, "/bin/sh", ENV("HOME=/"));  /* the Slurm step's launcher */
	fake_proc_at(dir, 6, 1, 50, "/bin/sh", ENV("HOME=/"));  /* the pod's */
	fake_proc_at(dir, 30, 5, 100, exe, ENV(rank1));
	fake_cgroup(dir, 30, "/system.slice/slurmstepd.scope/job_7419/step_0/user/task_0");
	fake_proc_at(dir, 40, 6, 101, exe, ENV(rank1));
	fake_cgroup(dir, 40, "/kubepods.slice/kubepods-pod86e4.slice/cri-containerd-0e45.scope");
	assert_int_equal(worker_of(r, dir, 30, 1), 0);
	note(r, dir, 30, 1);
	assert_int_equal(worker_of(r, dir, 40, 1), 0);
	/* The Slurm rank's orphaned worker, in its cgroup: still its worker. */
	fake_proc_at(dir, 31, 1, 120, exe, ENV(rank1));
	fake_cgroup(dir, 31, "/system.slice/slurmstepd.scope/job_7419/step_0/user/task_0");
	assert_int_equal(worker_of(r, dir, 31, 1), 30);
	jobenv_ranks_free(r);
	fixture_tmpdir_remove(dir);
}

/* Pids are reused: a record is a (pid, start time); the memory never places a process by its
 * pid alone. */
static void test_orphaned_worker_pid_reuse(void **state)
{
	static const char rank0[] = "TORCHELASTIC_RUN_ID=j\0RANK=0\0WORLD_SIZE=1\0LOCAL_RANK=0\0";
	static const char job2[] = "TORCHELASTIC_RUN_ID=k\0RANK=0\0WORLD_SIZE=1\0LOCAL_RANK=0\0";
	const char *py = "/usr/bin/python3.11";
	char dir[] = "/tmp/sysom-jobenv-XXXXXX";
	struct jobenv_ranks *r = NULL;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(jobenv_ranks_new(8, JOBENV_RANKS_MAX_AGE_NS, &r), 0);
	/* Rank A (pid 10, start 100) is noted and exits unseen (no exit event). */
	fake_proc_at(dir, 10, 5, 100, py, ENV(rank0));
	note(r, dir, 10, 1);
	gone(dir, 10);
	/* Pid 10 is reused by job k's rank (start 1000): noting it marks A exited by then. */
	fake_proc_at(dir, 10, 6, 1000, py, ENV(job2));
	note(r, dir, 10, 2);
	assert_int_equal(jobenv_ranks_count(r), 2);
	/* A worker of A started at 900 (reparented): A's; one started at 1100 is not (A was gone
	 * by 1000), and job k's identity does not match j's. */
	fake_proc_at(dir, 11, 1, 900, py, ENV(rank0));
	assert_int_equal(worker_of(r, dir, 11, 3), 10);
	fake_proc_at(dir, 12, 1, 1100, py, ENV(rank0));
	assert_int_equal(worker_of(r, dir, 12, 3), 0);
	/* Job k's worker reparented: job k's rank, pid 10 too. */
	fake_proc_at(dir, 13, 1, 1100, py, ENV(job2));
	assert_int_equal(worker_of(r, dir, 13, 3), 10);
	/* The exit of pid 10 marks the latest process of that pid (job k's), not A again. */
	assert_true(jobenv_ranks_exited(r, 10, 1200, 4));
	assert_false(jobenv_ranks_exited(r, 10, 1300, 4));
	fake_proc_at(dir, 14, 1, 1250, py, ENV(job2));
	assert_int_equal(worker_of(r, dir, 14, 5), 0);
	/* A process that got the dead rank's pid, with its identity, started after it: not its
	 * own worker. */
	gone(dir, 10);
	fake_proc_at(dir, 10, 1, 1400, py, ENV(job2));
	assert_int_equal(worker_of(r, dir, 10, 6), 0);
	jobenv_ranks_free(r);
	fixture_tmpdir_remove(dir);
}

/* At most `max` records (exited ones replaced first), and exited ones for max_age_ns. */
static void test_orphaned_worker_bounds(void **state)
{
	static const char rank0[] = "TORCHELASTIC_RUN_ID=j\0RANK=0\0WORLD_SIZE=1\0LOCAL_RANK=0\0";
	const char *py = "/usr/bin/python3.11";
	char dir[] = "/tmp/sysom-jobenv-XXXXXX";
	struct jobenv_ranks *r = NULL;

	(void)state;
	assert_int_equal(jobenv_ranks_new(0, 1, &r), -EINVAL);
	assert_non_null(mkdtemp(dir));
	assert_int_equal(jobenv_ranks_new(3, 1000, &r), 0);
	for (uint32_t pid = 10; pid < 16; pid++) {
		fake_proc_at(dir, pid, 5, 100 * pid, py, ENV(rank0));
		note(r, dir, pid, pid);
		assert_true(jobenv_ranks_count(r) <= 3);
	}
	assert_int_equal(jobenv_ranks_count(r), 3); /* 13, 14, 15: the oldest replaced */
	fake_proc_at(dir, 30, 1, 1450, py, ENV(rank0));
	assert_int_equal(worker_of(r, dir, 30, 20), 14); /* started last before it: 14 (1400) */
	/* 14 exits; the next note replaces it, not an alive rank. */
	assert_true(jobenv_ranks_exited(r, 14, 1460, 21));
	fake_proc_at(dir, 16, 5, 1600, py, ENV(rank0));
	note(r, dir, 16, 22);
	assert_int_equal(jobenv_ranks_count(r), 3);
	assert_int_equal(worker_of(r, dir, 30, 23), 13); /* 14 is forgotten: 13 started before */
	/* An exited record is dropped max_age_ns after its exit was noted. */
	assert_true(jobenv_ranks_exited(r, 13, 1700, 100));
	assert_int_equal(worker_of(r, dir, 30, 1100), 13);
	assert_int_equal(worker_of(r, dir, 30, 1101), 0);
	assert_int_equal(jobenv_ranks_count(r), 2);
	jobenv_ranks_free(r);
	jobenv_ranks_free(NULL);
	fixture_tmpdir_remove(dir);
}

static void test_pod_job_name(void **state)
{
	(void)state;
	static const struct {
		const char *pod, *job;
	} cases[] = {
		{ "llama-7b-worker-3", "llama-7b" },       /* PyTorchJob worker */
		{ "llama-7b-master-0", "llama-7b" },       /* its master: the same job */
		{ "bert-launcher", "bert" },               /* MPIJob launcher */
		{ "train-2-x7k9p", "train" },              /* Indexed Job: index, generated suffix */
		{ "llm-workers-0-3-q7k2z", "llm-workers" }, /* JobSet: job and pod index */
		{ "trainer-0", "trainer" },                /* StatefulSet ordinal */
		{ "trainer", "trainer" },                  /* nothing to drop */
		{ "worker-0", "worker" },                  /* the first segment stays */
		{ "12345", "12345" },
		{ "42-7", "42" },
		{ "train-abcde", "train-abcde" },          /* vowels: not a generated suffix */
		{ "train-X7K9P", "train-X7K9P" },          /* upper case: not generated */
		{ "train-x7k9", "train-x7k9" },            /* 4 characters */
		{ "a-worker-master-1", "a-worker" },       /* one role at most */
		{ "x--1", "x-" },                          /* empty segment stays */
		{ "job-", "job-" },
	};
	char out[64], small[4];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(jobenv_pod_job_name(cases[i].pod, out, sizeof(out)), 0);
		assert_string_equal(out, cases[i].job);
	}
	assert_int_equal(jobenv_pod_job_name("", out, sizeof(out)), -EINVAL);
	assert_int_equal(jobenv_pod_job_name("trainer-0", small, sizeof(small)), -EINVAL);
	assert_int_equal(jobenv_pod_job_name("abc-0", small, sizeof(small)), 0);
	assert_string_equal(small, "abc");
}

static void test_job_from_cgroup(void **state)
{
	(void)state;
	static const char env[] = "RANK=1\0WORLD_SIZE=4\0LOCAL_RANK=1\0";
	struct job_identity id;

	/* A Slurm job wins over a pod; the step is part of the job (each srun is its own set of
	 * ranks, as with SLURM_JOB_ID.SLURM_STEP_ID). */
	assert_int_equal(jobenv_parse(env, sizeof(env) - 1, &id), 0);
	assert_true(id.has_rank);
	assert_string_equal(id.job_id, "");
	assert_int_equal(jobenv_job_from_cgroup(&id, 4242, "0", "ml", "llama-worker-1"), 0);
	assert_string_equal(id.job_id, "slurm-4242.0");
	assert_string_equal(id.job_id_source, "slurm cgroup");
	assert_int_equal(id.rank, 1);
	assert_int_equal(jobenv_parse(env, sizeof(env) - 1, &id), 0);
	assert_int_equal(jobenv_job_from_cgroup(&id, 77, "", NULL, NULL), 0);
	assert_string_equal(id.job_id, "slurm-77");

	/* A pod: its namespace and job name. */
	assert_int_equal(jobenv_parse(env, sizeof(env) - 1, &id), 0);
	assert_int_equal(jobenv_job_from_cgroup(&id, 0, "", "ml", "llama-7b-worker-1"), 0);
	assert_string_equal(id.job_id, "ml:llama-7b");
	assert_string_equal(id.job_id_source, "pod name");

	/* Nothing to go on: a pod without its name (no pod log directory), or no cgroup. */
	assert_int_equal(jobenv_parse(env, sizeof(env) - 1, &id), 0);
	assert_int_equal(jobenv_job_from_cgroup(&id, 0, "", "", ""), -ENOENT);
	assert_int_equal(jobenv_job_from_cgroup(&id, 0, NULL, NULL, NULL), -ENOENT);
	assert_string_equal(id.job_id, "");
	assert_null(id.job_id_source);

	/* The environment's job id stays; a process without a rank gets none. */
	static const char named[] = "RANK=0\0WORLD_SIZE=2\0TORCHELASTIC_RUN_ID=run7\0";
	assert_int_equal(jobenv_parse(named, sizeof(named) - 1, &id), 0);
	assert_int_equal(jobenv_job_from_cgroup(&id, 4242, "0", "ml", "p-0"), -ENOENT);
	assert_string_equal(id.job_id, "run7");
	static const char norank[] = "PATH=/bin\0";
	assert_int_equal(jobenv_parse(norank, sizeof(norank) - 1, &id), 0);
	assert_int_equal(jobenv_job_from_cgroup(&id, 4242, "0", "ml", "p-0"), -ENOENT);
	assert_string_equal(id.job_id, "");
	assert_int_equal(jobenv_job_from_cgroup(NULL, 4242, "0", "ml", "p-0"), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_torchrun),
		cmocka_unit_test(test_slurm_and_mpi),
		cmocka_unit_test(test_not_a_job),
		cmocka_unit_test(test_hostile_values),
		cmocka_unit_test(test_read_proc),
		cmocka_unit_test(test_rank_process),
		cmocka_unit_test(test_orphaned_worker),
		cmocka_unit_test(test_orphaned_worker_pid_reuse),
		cmocka_unit_test(test_orphaned_worker_other_cgroup),
		cmocka_unit_test(test_orphaned_worker_bounds),
		cmocka_unit_test(test_pod_job_name),
		cmocka_unit_test(test_job_from_cgroup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
