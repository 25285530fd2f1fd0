/* SPDX-License-Identifier: Apache-2.0 */
/* Job identity from the launcher's environment variables. */
#include "agent/ranks/jobenv.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/hash.h"
#include "common/wire/wire.h"
#include "include/sysom/jobenv_vars.h"

/* A value found in the block: pointer into it and length (not NUL-terminated). */
struct value {
	const char *p;
	size_t len;
};

/* The first entry NAME=... of the block (like getenv); false when absent. */
static bool lookup(const char *block, size_t len, const char *name, struct value *out)
{
	size_t name_len = strlen(name);
	size_t pos = 0;

	while (pos < len) {
		const char *entry = block + pos;
		const char *nul = memchr(entry, '\0', len - pos);
		size_t entry_len = nul ? (size_t)(nul - entry) : len - pos;

		if (entry_len > name_len && memcmp(entry, name, name_len) == 0 &&
		    entry[name_len] == '=') {
			out->p = entry + name_len + 1;
			out->len = entry_len - name_len - 1;
			return true;
		}
		pos += entry_len + 1;
	}
	return false;
}

/* Plain decimal in [0, max]; -1 otherwise. */
static int32_t parse_count(const struct value *v, int64_t max)
{
	int64_t n = 0;

	if (v->len == 0 || v->len > 10)
		return -1;
	for (size_t i = 0; i < v->len; i++) {
		if (v->p[i] < '0' || v->p[i] > '9')
			return -1;
		n = n * 10 + (v->p[i] - '0');
	}
	return n <= max ? (int32_t)n : -1;
}

/* The number of the first variable for `field` present (sysom_jobenv_vars), or -1 when none
 * is or its value is not a valid number. */
static int32_t first_number(const char *block, size_t len, enum sysom_jobenv_field field,
			    int64_t max)
{
	struct value v;

	for (const char *const *name = sysom_jobenv_vars[field]; *name; name++)
		if (lookup(block, len, *name, &v))
			return parse_count(&v, max);
	return -1;
}

static void copy_text(char *dst, const struct value *v)
{
	sysom_text_sanitize(dst, JOBENV_VALUE_MAX, v->p, v->len);
}

int jobenv_parse(const char *block, size_t len, struct job_identity *out)
{
	struct value v, step, port;

	if (!block && len)
		return -EINVAL;
	*out = (struct job_identity){
		.rank = -1, .world_size = -1, .local_rank = -1, .local_world_size = -1,
		.group_rank = -1, .master_port = -1,
	};
	out->world_size = first_number(block, len, SYSOM_JOBENV_WORLD_SIZE, JOBENV_MAX_RANKS);
	out->rank = first_number(block, len, SYSOM_JOBENV_RANK, JOBENV_MAX_RANKS - 1);
	out->local_world_size = first_number(block, len, SYSOM_JOBENV_LOCAL_WORLD_SIZE,
					     JOBENV_MAX_RANKS);
	out->local_rank = first_number(block, len, SYSOM_JOBENV_LOCAL_RANK, JOBENV_MAX_RANKS - 1);
	out->group_rank = first_number(block, len, SYSOM_JOBENV_GROUP_RANK, JOBENV_MAX_RANKS - 1);
	if (lookup(block, len, SYSOM_JOBENV_MASTER_ADDR, &v))
		copy_text(out->master_addr, &v);
	if (lookup(block, len, SYSOM_JOBENV_MASTER_PORT, &port))
		out->master_port = parse_count(&port, 65535);

	if (lookup(block, len, "CUDA_VISIBLE_DEVICES", &v)) {
		out->gpu.cvd_set = true;
		if (v.len < sizeof(out->gpu.cvd)) {
			memcpy(out->gpu.cvd, v.p, v.len);
			out->gpu.cvd[v.len] = '\0';
		} else {
			out->gpu.cvd_too_long = true;
		}
	}
	out->gpu.order_pci = lookup(block, len, "CUDA_DEVICE_ORDER", &v) &&
			     v.len == strlen("PCI_BUS_ID") && !memcmp(v.p, "PCI_BUS_ID", v.len);

	out->has_rank = out->rank >= 0 && out->world_size > 0 && out->rank < out->world_size;
	if (out->local_rank >= 0 && out->local_world_size > 0 &&
	    out->local_rank >= out->local_world_size)
		out->has_rank = false;

	if (lookup(block, len, SYSOM_JOBENV_RUN_ID, &v) && v.len) {
		copy_text(out->job_id, &v);
		out->job_id_source = SYSOM_JOBENV_RUN_ID;
	} else if (lookup(block, len, SYSOM_JOBENV_SLURM_JOB_ID, &v) && v.len) {
		/* One job runs several steps (srun calls): each is its own set of ranks. */
		char id[JOBENV_VALUE_MAX], joined[2 * JOBENV_VALUE_MAX + 2];
		copy_text(id, &v);
		if (lookup(block, len, SYSOM_JOBENV_SLURM_STEP_ID, &step) && step.len) {
			char step_id[JOBENV_VALUE_MAX];
			copy_text(step_id, &step);
			snprintf(joined, sizeof(joined), "%s.%s", id, step_id);
		} else {
			snprintf(joined, sizeof(joined), "%s", id);
		}
		sysom_text_sanitize(out->job_id, sizeof(out->job_id), joined, strlen(joined));
		out->job_id_source = SYSOM_JOBENV_SLURM_JOB_ID;
	} else if (out->master_addr[0] && out->master_port > 0) {
		char joined[JOBENV_VALUE_MAX + 16];
		snprintf(joined, sizeof(joined), "%s:%d", out->master_addr, (int)out->master_port);
		sysom_text_sanitize(out->job_id, sizeof(out->job_id), joined, strlen(joined));
		out->job_id_source = SYSOM_JOBENV_MASTER_ADDR;
	}
	return 0;
}

int jobenv_read(const char *proc_root, uint32_t pid, struct job_identity *out)
{
	char path[256];
	char *block = NULL;
	size_t len = 0;
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/%u/environ", proc_root ? proc_root : "/proc", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	block = malloc(JOBENV_MAX_BYTES);
	if (!block) {
		rc = -ENOMEM;
		goto cleanup;
	}
	while (len < JOBENV_MAX_BYTES) {
		ssize_t n = read(fd, block + len, JOBENV_MAX_BYTES - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = errno == ESRCH ? -ESRCH : -errno;
			goto cleanup;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	rc = jobenv_parse(block, len, out);
cleanup:
	free(block);
	close(fd);
	return rc;
}

/* The parent pid from <root>/<pid>/stat (the field after the last ')'), and when `start` is
 * not NULL the start time (field 22; 0 when the line is shorter); ppid 0 when unreadable. */
static uint32_t read_stat(const char *root, uint32_t pid, int *err, uint64_t *start)
{
	char path[256], buf[1024];
	unsigned long ppid = 0;
	unsigned long long st = 0;
	ssize_t n;
	int fd;

	if (start)
		*start = 0;
	snprintf(path, sizeof(path), "%s/%u/stat", root, pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		*err = errno == ENOENT ? -ESRCH : -errno;
		return 0;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	*err = 0;
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	const char *close_paren = strrchr(buf, ')');
	if (!close_paren || sscanf(close_paren + 1, " %*c %lu", &ppid) != 1 || ppid > UINT32_MAX)
		return 0;
	/* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
	 * cutime cstime priority nice num_threads itrealvalue starttime */
	if (start && sscanf(close_paren + 1, " %*c %*u %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u "
				      "%*u %*d %*d %*d %*d %*d %*d %llu", &st) == 1)
		*start = st;
	return (uint32_t)ppid;
}

static uint32_t read_ppid(const char *root, uint32_t pid, int *err)
{
	return read_stat(root, pid, err, NULL);
}

/* <root>/<pid>/exe's target into `out`; false when unreadable. */
static bool read_exe(const char *root, uint32_t pid, char *out, size_t len)
{
	char path[256];
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%u/exe", root, pid);
	n = readlink(path, out, len - 1);
	if (n <= 0 || (size_t)n >= len - 1)
		return false;
	out[n] = '\0';
	return true;
}

static bool same_rank(const struct job_identity *a, const struct job_identity *b)
{
	return a->has_rank && b->has_rank && a->rank == b->rank && a->world_size == b->world_size &&
	       a->local_rank == b->local_rank && strcmp(a->job_id, b->job_id) == 0;
}

int jobenv_rank_process(const char *proc_root, uint32_t pid, const struct job_identity *id,
			uint32_t *rank_pid)
{
	const char *root = proc_root ? proc_root : "/proc";
	char exe[512], parent_exe[512];
	struct job_identity parent;
	uint32_t cur = pid;
	int err;

	*rank_pid = 0;
	if (!id->has_rank)
		return 0;
	if (!read_exe(root, pid, exe, sizeof(exe))) {
		char dir[256];
		snprintf(dir, sizeof(dir), "%s/%u", root, pid);
		return access(dir, F_OK) && errno == ENOENT ? -ESRCH : 0;
	}
	for (int depth = 0; depth < JOBENV_MAX_WORKER_DEPTH; depth++) {
		uint32_t ppid = read_ppid(root, cur, &err);

		if (err == -ESRCH && cur == pid)
			return -ESRCH;
		if (ppid <= 1 || !read_exe(root, ppid, parent_exe, sizeof(parent_exe)) ||
		    strcmp(exe, parent_exe) != 0 || jobenv_read(proc_root, ppid, &parent) ||
		    !same_rank(id, &parent))
			break;
		*rank_pid = ppid;
		cur = ppid;
	}
	return 0;
}

/* ---- recently seen rank processes ---------------------------------------------------------- */

struct rank_record {
	char job_id[JOBENV_VALUE_MAX];
	int32_t rank, world_size, local_rank;
	uint32_t pid, ppid;      /* the rank's pid and its parent when noted */
	uint64_t start_ticks;    /* /proc/<pid>/stat field 22 */
	uint64_t exe_hash;       /* sysom_hash64 of its executable's path */
	uint64_t cgroup_hash;    /* of its /proc/<pid>/cgroup (0: unreadable) */
	uint64_t exit_ticks;     /* UINT64_MAX while alive or when the exit time is unknown */
	bool exited;
	uint64_t noted_ns;       /* when it was last noted alive, or its exit noted */
};

struct jobenv_ranks {
	uint32_t max, count;
	uint64_t max_age_ns;
	struct rank_record recs[];
};

int jobenv_ranks_new(uint32_t max, uint64_t max_age_ns, struct jobenv_ranks **out)
{
	struct jobenv_ranks *r;

	if (max == 0 || max > (1u << 20))
		return -EINVAL;
	r = calloc(1, sizeof(*r) + (size_t)max * sizeof(r->recs[0]));
	if (!r)
		return -ENOMEM;
	r->max = max;
	r->max_age_ns = max_age_ns;
	*out = r;
	return 0;
}

void jobenv_ranks_free(struct jobenv_ranks *r)
{
	free(r);
}

uint32_t jobenv_ranks_count(const struct jobenv_ranks *r)
{
	return r ? r->count : 0;
}

/* Drops exited records whose exit was noted more than max_age_ns before `now_ns`. */
static void expire(struct jobenv_ranks *r, uint64_t now_ns)
{
	for (uint32_t i = 0; i < r->count;) {
		const struct rank_record *rec = &r->recs[i];
		if (rec->exited && now_ns - rec->noted_ns > r->max_age_ns)
			r->recs[i] = r->recs[--r->count];
		else
			i++;
	}
}

/* The executable's identity: its path hashed; false when unreadable. */
static bool exe_hash_of(const char *root, uint32_t pid, uint64_t *out)
{
	char exe[512];

	if (!read_exe(root, pid, exe, sizeof(exe)))
		return false;
	*out = sysom_hash64(exe, strlen(exe), 0x6a6f62656e76ull);
	return true;
}

/* Of the process's cgroup membership: a worker forked by its rank shares it, so two jobs
 * whose environments name no job (each named by its pod or Slurm step later, or not at all) do
 * not take each other's ranks for workers. 0 when unreadable. */
static uint64_t cgroup_hash_of(const char *root, uint32_t pid)
{
	char path[256], buf[4096];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%u/cgroup", root, pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	return n > 0 ? sysom_hash64(buf, (size_t)n, 0x636772707368ull) | 1 : 0;
}

static bool record_is(const struct rank_record *rec, const struct job_identity *id)
{
	return rec->rank == id->rank && rec->world_size == id->world_size &&
	       rec->local_rank == id->local_rank && strcmp(rec->job_id, id->job_id) == 0;
}

int jobenv_ranks_note(struct jobenv_ranks *r, const char *proc_root, uint32_t pid,
		      const struct job_identity *id, uint64_t now_ns)
{
	const char *root = proc_root ? proc_root : "/proc";
	struct rank_record rec = { .pid = pid, .exit_ticks = UINT64_MAX, .noted_ns = now_ns };
	int err;

	if (!r || !id || !id->has_rank)
		return -EINVAL;
	rec.ppid = read_stat(root, pid, &err, &rec.start_ticks);
	if (err)
		return err;
	if (!rec.ppid || !rec.start_ticks || !exe_hash_of(root, pid, &rec.exe_hash))
		return -ESRCH; /* gone in between (or a kernel thread: no rank) */
	rec.cgroup_hash = cgroup_hash_of(root, pid);
	snprintf(rec.job_id, sizeof(rec.job_id), "%s", id->job_id);
	rec.rank = id->rank;
	rec.world_size = id->world_size;
	rec.local_rank = id->local_rank;
	expire(r, now_ns);

	for (uint32_t i = 0; i < r->count; i++) {
		struct rank_record *old = &r->recs[i];
		if (old->pid != pid)
			continue;
		if (old->start_ticks == rec.start_ticks) {
			if (!old->exited)
				old->noted_ns = now_ns; /* seen alive again */
			return 0;
		}
		if (old->start_ticks < rec.start_ticks && !old->exited) {
			/* The pid was reused: the earlier process exited before this one started. */
			old->exited = true;
			old->exit_ticks = rec.start_ticks;
			old->noted_ns = now_ns;
		}
	}
	uint32_t slot = r->count;
	if (slot == r->max) {
		/* Full: the exited record noted longest ago, else the oldest record. */
		slot = 0;
		for (uint32_t i = 1; i < r->count; i++) {
			const struct rank_record *a = &r->recs[i], *b = &r->recs[slot];
			if (a->exited != b->exited ? a->exited : a->noted_ns < b->noted_ns)
				slot = i;
		}
	} else {
		r->count++;
	}
	r->recs[slot] = rec;
	return 0;
}

bool jobenv_ranks_exited(struct jobenv_ranks *r, uint32_t pid, uint64_t exit_ticks,
			 uint64_t now_ns)
{
	struct rank_record *latest = NULL;

	if (!r)
		return false;
	for (uint32_t i = 0; i < r->count; i++) {
		struct rank_record *rec = &r->recs[i];
		if (rec->pid == pid && !rec->exited &&
		    (!latest || rec->start_ticks > latest->start_ticks))
			latest = rec;
	}
	if (!latest)
		return false;
	latest->exited = true;
	latest->exit_ticks = exit_ticks;
	latest->noted_ns = now_ns;
	return true;
}

int jobenv_ranks_worker_of(struct jobenv_ranks *r, const char *proc_root, uint32_t pid,
			   const struct job_identity *id, uint64_t now_ns, uint32_t *rank_pid)
{
	const char *root = proc_root ? proc_root : "/proc";
	const struct rank_record *best = NULL;
	uint64_t start, exe, cgroup;
	uint32_t ppid;
	int err;

	*rank_pid = 0;
	if (!r || !id || !id->has_rank)
		return 0;
	ppid = read_stat(root, pid, &err, &start);
	if (err == -ESRCH)
		return -ESRCH;
	if (err || !ppid || !start || !exe_hash_of(root, pid, &exe))
		return 0;
	cgroup = cgroup_hash_of(root, pid);
	expire(r, now_ns);
	for (uint32_t i = 0; i < r->count; i++) {
		const struct rank_record *rec = &r->recs[i];
		if (!record_is(rec, id) || rec->exe_hash != exe || rec->cgroup_hash != cgroup ||
		    (rec->pid == pid && rec->start_ticks == start) || rec->start_ticks > start ||
		    (rec->exited && start > rec->exit_ticks) || ppid == rec->pid ||
		    ppid == rec->ppid)
			continue;
		if (!best || rec->start_ticks > best->start_ticks)
			best = rec;
	}
	if (!best)
		return 0;
	/* A parent of the same identity (a wrapper of another executable the rank ran, which
	 * ran this process) is not a reparenting: jobenv_rank_process's word stands. */
	struct job_identity parent;
	if (ppid > 1 && jobenv_read(proc_root, ppid, &parent) == 0 && same_rank(id, &parent))
		return 0;
	*rank_pid = best->pid;
	return 0;
}

/* A segment [p, p + n) the API server or a controller appended per pod. */
static bool per_pod_segment(const char *p, size_t n)
{
	static const char generated[] = "bcdfghjklmnpqrstvwxz2456789";
	bool digits = n > 0, gen = n == 5;

	for (size_t i = 0; i < n; i++) {
		digits = digits && p[i] >= '0' && p[i] <= '9';
		gen = gen && p[i] && strchr(generated, p[i]);
	}
	return digits || gen;
}

static bool role_segment(const char *p, size_t n)
{
	static const char *const roles[] = { "master", "worker", "launcher", "chief", "ps",
					     "evaluator" };

	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
		if (strlen(roles[i]) == n && memcmp(roles[i], p, n) == 0)
			return true;
	return false;
}

int jobenv_pod_job_name(const char *pod_name, char *out, size_t out_size)
{
	size_t end;

	if (!pod_name || !pod_name[0] || !out || out_size == 0)
		return -EINVAL;
	end = strlen(pod_name);
	/* Drop per-pod segments, then one role: never the first segment. */
	for (int pass = 0; pass < 2; pass++) {
		for (;;) {
			const char *dash = memrchr(pod_name, '-', end);
			if (!dash || dash == pod_name)
				break;
			const char *seg = dash + 1;
			size_t n = end - (size_t)(seg - pod_name);
			if (pass == 0 ? !per_pod_segment(seg, n) : !role_segment(seg, n))
				break;
			end = (size_t)(dash - pod_name);
			if (pass == 1)
				break;
		}
	}
	if (end >= out_size)
		return -EINVAL;
	memcpy(out, pod_name, end);
	out[end] = '\0';
	return 0;
}

int jobenv_job_from_cgroup(struct job_identity *id, uint64_t slurm_job, const char *slurm_step,
			   const char *pod_namespace, const char *pod_name)
{
	char joined[2 * JOBENV_VALUE_MAX + 2], name[JOBENV_VALUE_MAX];

	if (!id || !id->has_rank || id->job_id[0])
		return -ENOENT;
	if (slurm_job) {
		if (slurm_step && slurm_step[0])
			snprintf(joined, sizeof(joined), "slurm-%" PRIu64 ".%s", slurm_job, slurm_step);
		else
			snprintf(joined, sizeof(joined), "slurm-%" PRIu64, slurm_job);
		sysom_text_sanitize(id->job_id, sizeof(id->job_id), joined, strlen(joined));
		id->job_id_source = SYSOM_JOB_ID_SOURCE_SLURM_CGROUP;
		return 0;
	}
	if (!pod_namespace || !pod_namespace[0] || !pod_name ||
	    jobenv_pod_job_name(pod_name, name, sizeof(name)) != 0)
		return -ENOENT;
	snprintf(joined, sizeof(joined), "%s:%s", pod_namespace, name);
	sysom_text_sanitize(id->job_id, sizeof(id->job_id), joined, strlen(joined));
	id->job_id_source = SYSOM_JOB_ID_SOURCE_POD_NAME;
	return 0;
}
