/* SPDX-License-Identifier: Apache-2.0 */
/* Training-job pipeline: gputrace events → nccltrack → batcher; job identity per process. */
#include "agent/gpu/gpupipe.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "common/clock.h"
#include "common/array.h"
#include "agent/node/host.h"
#include "agent/gpu/gpumap.h"
#include "agent/gpu/nccltrack.h"
#include "agent/gpu/nvml.h"
#include "agent/node/proctrack.h"
#include "common/error.h"
#include "common/report.h"
#include "common/wire/wire.h"

#define MAX_PROCS 4096
#define MAX_PENDING_SCANS 4096
#define GROUPS_MAX 256
#define NOT_JOB_SLOTS 1024
/* How long an exited process's communicators outlive it. Its last events can reach the ring
 * consumer hundreds of milliseconds after it is reaped (a record reserved earlier by another,
 * preempted thread holds back every record behind it); forgetting at the first seal after the
 * exit re-keyed those late calls as a new, unsized communicator (seen on a loaded 2-CPU
 * machine: 26 of a 60-iteration job's all-reduces, 440 ms late). */
#define GONE_GRACE_NS (3ull * 1000000000ull)

/* A process that maps a traced library or sent an event. */
struct gp_proc {
	uint32_t tgid, generation;
	bool env_read;
	struct job_identity env;
	uint32_t rank_pid;       /* a worker's rank process (jobenv_rank_process); 0 for a rank */
	bool registered;
	bool gone;               /* exited (proctrack said so) */
	uint64_t gone_since_ns;  /* first seal that found it exited; 0 while alive */
	struct job_identity reg;
	char groups[GROUPS_MAX];
	uint8_t gpu_file;        /* NVML index + 1 from its open /dev/nvidiaN (kept), 0 none */
	uint64_t gpu_scan_ns;    /* monotonic time of its last descriptor scan, 0 never */
	enum gpumap_how gpu_how; /* how the last GPU was found (logged when it changes) */
};

struct pending_scan {
	uint32_t tgid;
	uint64_t due_ns;
};

struct gpupipe {
	struct gpupipe_options opts;
	struct gputrace *gt;
	struct nccltrack *nt;
	uv_poll_t poll;
	bool poll_started;
	struct gp_proc *procs;
	uint32_t nprocs, procs_cap;
	struct pending_scan scans[MAX_PENDING_SCANS];
	uint32_t nscans;
	struct gputrace_stats last; /* for counter deltas */
	uint64_t last_corrupt;
	uint64_t p2p, p2p_bad;           /* Send/Recv calls from the ring; peer out of range */
	uint64_t last_launch_ns;
	uint64_t drains;
	uint32_t launch_cycle;   /* launch probes on one drain interval in this many; 0: never */
	uint64_t in_flight_reported; /* collectives sent with the "in flight" flag */
	/* Processes without GPU libraries whose environment names no job, by (tgid, generation),
	 * direct-mapped: their environment is not read again at every mapping scan. */
	struct { uint32_t tgid, generation; } not_jobs[NOT_JOB_SLOTS];
	bool send_gpu_device;
	struct gpumap_device gpus[SYSOM_GPU_MAX_DEVICES];
	uint32_t ngpus;
	/* Rank processes seen, alive or recently exited: places DataLoader workers whose rank
	 * exited before they were first read (jobenv_ranks_worker_of). */
	struct jobenv_ranks *ranks;
	uint64_t ns_per_tick; /* of /proc start times (1e9 / CLK_TCK) */
};

static struct gp_proc *find_proc(struct gpupipe *gp, uint32_t tgid)
{
	for (uint32_t i = 0; i < gp->nprocs; i++)
		if (gp->procs[i].tgid == tgid)
			return &gp->procs[i];
	return NULL;
}

/* The environment of a process, read once while it is alive (it does not change after exec;
 * a short-lived rank may be gone by the time its batch is sealed). */
static void read_env(struct gpupipe *gp, struct gp_proc *p)
{
	const char *root = gp->opts.proc_root ? gp->opts.proc_root : "/proc";
	int rc = jobenv_read(root, p->tgid, &p->env);

	if (rc)
		memset(&p->env, 0, sizeof(p->env));
	p->env_read = rc != -ESRCH || p->env_read;
	/* A DataLoader worker inherits its rank's variables: it is that rank's worker, not a
	 * second process of the rank. */
	if (!rc && jobenv_rank_process(root, p->tgid, &p->env, &p->rank_pid))
		p->rank_pid = 0;
	if (!rc && p->env.has_rank) {
		uint64_t now = sysom_monotonic_ns();
		/* Its rank may have exited already (the worker reparented to init): the memory of
		 * rank processes places it. A rank, or a live rank the walk found above a worker,
		 * is noted in it (not one the memory named: its pid may be another's by now). */
		if (p->rank_pid)
			(void)jobenv_ranks_note(gp->ranks, root, p->rank_pid, &p->env, now);
		else if (jobenv_ranks_worker_of(gp->ranks, root, p->tgid, &p->env, now,
						&p->rank_pid))
			p->rank_pid = 0;
		if (!p->rank_pid)
			(void)jobenv_ranks_note(gp->ranks, root, p->tgid, &p->env, now);
	}
	/* A rank whose environment names no job: its Slurm job or pod does (the tracker read
	 * its cgroup and pod name when it first met the process). Sent as source environment
	 * with job_id_source "slurm cgroup" / "pod name" (which servers show as source cgroup):
	 * source 3 would make servers older than 1.6's readers refuse the whole batch. */
	if (!rc && p->env.has_rank && !p->env.job_id[0] && gp->opts.pt) {
		const struct pt_process *pp =
			proctrack_get_live(gp->opts.pt, p->tgid, p->generation);
		const struct pt_identity *pi = pp ? pp->identity : NULL;
		if (pi)
			(void)jobenv_job_from_cgroup(&p->env, pi->cg.slurm_job, pi->cg.slurm_step,
						     pi->pod_namespace, pi->pod_name);
	}
}

static struct gp_proc *note_proc(struct gpupipe *gp, uint32_t tgid, uint32_t generation)
{
	struct gp_proc *p = find_proc(gp, tgid);

	if (p && p->generation != generation && !p->registered) {
		memset(p, 0, sizeof(*p));
		p->tgid = tgid;
		p->generation = generation;
		read_env(gp, p); /* exec'd: a new environment */
	}
	if (p) {
		p->generation = generation;
		return p;
	}
	if (gp->nprocs >= MAX_PROCS)
		return NULL;
	if (SYSOM_ARRAY_RESERVE(gp->procs, gp->procs_cap, gp->nprocs, 16))
		return NULL;
	p = &gp->procs[gp->nprocs++];
	memset(p, 0, sizeof(*p));
	p->tgid = tgid;
	p->generation = generation;
	read_env(gp, p);
	return p;
}

static void on_gt_event(void *ctx, const void *data, size_t len)
{
	struct gpupipe *gp = ctx;
	struct nccltrack_call out;
	int64_t to_real = (int64_t)(sysom_realtime_ns() - sysom_monotonic_ns());
	int rc;

	if (len >= sizeof(struct gt_dl_event) && *(const uint32_t *)data == GT_EVENT_DL_LOAD) {
		/* gputrace has attached (and resumes a held process once this returns); the
		 * process is now a user. */
		const struct gt_dl_event *e = data;
		note_proc(gp, e->tgid, e->generation);
		/* Its mappings now hold the library: re-read them at once, so launch stacks
		 * (whose leaf frames lie in it) unwind and resolve from the first launches,
		 * not only once the sampler happens to meet the new mapping. */
		if (gp->opts.pt && proctrack_rescan_loaded(gp->opts.pt, e->tgid, e->generation,
						       e->ktime_ns))
			sysom_report(&gp->opts.report, SYSOM_REPORT_DEBUG,
				     "gputrace: pid %u loaded a GPU library: mappings rescanned",
				     e->tgid);
		return;
	}
	rc = nccltrack_event(gp->nt, data, len, to_real, &out);
	if (rc <= 0)
		return;
	note_proc(gp, out.tgid, out.generation);
	if (out.call.op == SYSOM_NCCL_SEND || out.call.op == SYSOM_NCCL_RECV) {
		gp->p2p++; /* in-flight re-reads (on_pending) are not counted again */
		gp->p2p_bad += out.call.peer < 0;
	}
	rc = batcher_add_nccl_call(gp->opts.batcher, out.tgid, out.generation, &out.call);
	if (rc)
		sysom_report(&gp->opts.report, SYSOM_REPORT_DEBUG,
			     "gputrace: NCCL call of pid %u not recorded: %s", out.tgid,
			     sysom_strerror(rc));
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct gpupipe *gp = h->data;

	(void)events;
	if (status < 0) {
		sysom_report(&gp->opts.report, SYSOM_REPORT_WARN, "gputrace: event poll failed: %s",
			     uv_strerror(status));
		return;
	}
	gputrace_consume(gp->gt);
}

int gpupipe_open(uv_loop_t *loop, const struct gpupipe_options *o, struct gpupipe **out,
		 char *err, size_t errlen)
{
	struct gpupipe *gp = calloc(1, sizeof(*gp));
	struct gputrace_options go;
	struct nccltrack_options no;
	int rc, n;

	if (!gp)
		return -ENOMEM;
	gp->opts = *o;
	gp->ngpus = nvml_devices(o->nvml, gp->gpus, SYSOM_GPU_MAX_DEVICES);
	long tck = sysconf(_SC_CLK_TCK);
	gp->ns_per_tick = tck > 0 ? 1000000000ull / (uint64_t)tck : 10000000ull;
	if ((rc = jobenv_ranks_new(JOBENV_RANKS_MAX, JOBENV_RANKS_MAX_AGE_NS, &gp->ranks))) {
		snprintf(err, errlen, "out of memory");
		goto cleanup;
	}
	gputrace_options_default(&go);
	go.proc_root = o->proc_root ? o->proc_root : "/proc";
	go.exec_generation_fd = o->exec_generation_fd;
	go.unwind_tables_fd = o->unwind_tables_fd;
	go.unwind_procs_fd = o->unwind_procs_fd;
	go.unwind_markers_fd = o->unwind_markers_fd;
	go.py_procs_fd = o->py_procs_fd;
	if (o->ring_bytes)
		go.ring_bytes = o->ring_bytes;
	go.on_event = on_gt_event;
	go.ctx = gp;
	go.report = o->report;
	if (o->launch_duty > 0) {
		double cycle = 1.0 / o->launch_duty + 0.5;
		gp->launch_cycle = cycle > 1000 ? 1000 : (uint32_t)cycle;
	}
	go.launch_tracing = gp->launch_cycle != 0;
	if (o->loader && gputrace_loader_mode_parse(o->loader, &go.loader)) {
		snprintf(err, errlen, "loader notification mode '%s' is not notify, hold or off",
			 o->loader);
		rc = -EINVAL;
		goto cleanup;
	}
	if ((rc = gputrace_open(&go, &gp->gt, err, errlen)))
		goto cleanup;
	nccltrack_options_default(&no);
	if ((rc = nccltrack_new(&no, &gp->nt))) {
		snprintf(err, errlen, "out of memory");
		goto cleanup;
	}
	if ((rc = uv_poll_init(loop, &gp->poll, gputrace_event_fd(gp->gt))) ||
	    (rc = uv_poll_start(&gp->poll, UV_READABLE, on_poll))) {
		snprintf(err, errlen, "cannot poll the GPU event ring: %s", uv_strerror(rc));
		rc = -EIO;
		goto cleanup;
	}
	gp->poll.data = gp;
	gp->poll_started = true;
	for (const char *s = o->libraries; s && *s;) {
		const char *end = strchr(s, ':');
		size_t len = end ? (size_t)(end - s) : strlen(s);
		char path[PATH_MAX];

		if (len && len < sizeof(path)) {
			memcpy(path, s, len);
			path[len] = '\0';
			rc = gputrace_attach_path(gp->gt, path);
			if (rc < 0)
				sysom_report(&gp->opts.report, SYSOM_REPORT_WARN,
					     "gputrace: cannot trace %s: %s", path,
					     sysom_strerror(rc));
		}
		s = end ? end + 1 : s + len;
	}
	n = gputrace_scan_all(gp->gt);
	sysom_report(&gp->opts.report, SYSOM_REPORT_INFO,
		     "gputrace: NCCL/CUDA tracing on; %d library files traced at start",
		     n > 0 ? n : 0);
	*out = gp;
	return 0;
cleanup:
	if (gp->poll_started)
		uv_close((uv_handle_t *)&gp->poll, NULL);
	gp->poll_started = false;
	gpupipe_free(gp);
	return rc;
}

void gpupipe_stop(struct gpupipe *gp)
{
	if (gp && gp->poll_started) {
		uv_poll_stop(&gp->poll);
		uv_close((uv_handle_t *)&gp->poll, NULL);
		gp->poll_started = false;
	}
}

void gpupipe_free(struct gpupipe *gp)
{
	if (!gp)
		return;
	gputrace_close(gp->gt);
	nccltrack_free(gp->nt);
	jobenv_ranks_free(gp->ranks);
	free(gp->procs);
	free(gp);
}

/* A process with no GPU library is kept (for its JOB_RANKS record) when its environment gives
 * it a rank in a job: CPU training ranks (gloo) and their DataLoader workers. */
static void note_job_proc(struct gpupipe *gp, const struct pt_process *proc)
{
	uint32_t slot = (proc->tgid * 2654435761u) % NOT_JOB_SLOTS;
	struct gp_proc *p = find_proc(gp, proc->tgid);
	struct job_identity id;

	if (p && p->generation == proc->generation)
		return;
	if (gp->not_jobs[slot].tgid == proc->tgid &&
	    gp->not_jobs[slot].generation == proc->generation)
		return;
	/* A rank: a launcher (torchrun's agent, simjob's parent) names the job but no rank, and
	 * is not a process of the job's ranks. */
	if (jobenv_read(gp->opts.proc_root ? gp->opts.proc_root : "/proc", proc->tgid, &id) ||
	    !id.has_rank) {
		gp->not_jobs[slot].tgid = proc->tgid;
		gp->not_jobs[slot].generation = proc->generation;
		return;
	}
	note_proc(gp, proc->tgid, proc->generation);
}

void gpupipe_on_mappings(struct gpupipe *gp, const struct pt_process *proc)
{
	bool uses = false;

	for (uint32_t i = 0; i < proc->mapping_count && !uses; i++)
		uses = proc->mappings[i].object && proc->mappings[i].object->path &&
		       gputrace_library_kind(proc->mappings[i].object->path);
	if (!uses) {
		note_job_proc(gp, proc);
		return;
	}
	note_proc(gp, proc->tgid, proc->generation);
	int rc = gputrace_scan_process(gp->gt, proc->tgid);
	if (rc < 0 && rc != -ESRCH)
		sysom_report(&gp->opts.report, SYSOM_REPORT_DEBUG,
			     "gputrace: cannot scan pid %u: %s", proc->tgid, sysom_strerror(rc));
}

void gpupipe_on_forget(struct gpupipe *gp, const struct pt_process *proc)
{
	struct gp_proc *p = find_proc(gp, proc->tgid);

	gputrace_forget_process(gp->gt, proc->tgid);
	/* Its identity and communicators still go into the next batch; forgotten after it. */
	if (p && p->generation == proc->generation)
		p->gone = true;
}

void gpupipe_on_exit(struct gpupipe *gp, uint32_t tgid, uint64_t ktime_ns)
{
	/* Start times in /proc count clock ticks of boot time; the event's time is monotonic. */
	uint64_t boot = sysom_boottime_ns(), mono = sysom_monotonic_ns();
	uint64_t at = ktime_ns && boot >= mono ? ktime_ns + (boot - mono) : 0;

	jobenv_ranks_exited(gp->ranks, tgid, at ? at / gp->ns_per_tick : UINT64_MAX, mono);
}

void gpupipe_on_exec(struct gpupipe *gp, uint32_t tgid)
{
	/* Libraries load during the first seconds after exec (DT_NEEDED, then dlopen). */
	static const uint64_t delays_ms[] = { 500, 3000, 10000 };
	uint64_t now = sysom_monotonic_ns();

	for (size_t i = 0; i < sizeof(delays_ms) / sizeof(delays_ms[0]); i++) {
		if (gp->nscans >= MAX_PENDING_SCANS)
			return;
		gp->scans[gp->nscans++] = (struct pending_scan){ tgid, now + delays_ms[i] * 1000000 };
	}
}

/* The process's current incarnation number, from the sampler's map (0 when absent). */
static uint32_t generation_of(const struct gpupipe *gp, uint32_t tgid)
{
	uint32_t gen = 0;

	if (gp->opts.exec_generation_fd >= 0)
		bpf_map_lookup_elem(gp->opts.exec_generation_fd, &tgid, &gen);
	return gen;
}

void gpupipe_set_registration(struct gpupipe *gp, uint32_t tgid, const struct job_identity *id,
			      const char *groups)
{
	struct gp_proc *p = note_proc(gp, tgid, generation_of(gp, tgid));

	if (!p)
		return;
	p->registered = true;
	p->reg = *id;
	snprintf(p->groups, sizeof(p->groups), "%s", groups ? groups : "");
}

void gpupipe_clear_registration(struct gpupipe *gp, uint32_t tgid)
{
	struct gp_proc *p = find_proc(gp, tgid);

	if (p) {
		p->registered = false;
		p->groups[0] = '\0';
	}
}

struct launch_ctx {
	struct gpupipe *gp;
	uint64_t launches;
};

static void on_launch(void *ctx, const struct gt_launch_key *k, const struct gt_launch_value *v)
{
	struct launch_ctx *lc = ctx;
	struct batcher_launch l = {
		.function = k->function,
		.kernel_name = nccltrack_kernel_name(lc->gp->nt, k->tgid, k->function),
		.ips = (const uint64_t *)k->ips,
		.nframes = k->nframes <= GT_LAUNCH_MAX_DEPTH ? k->nframes : GT_LAUNCH_MAX_DEPTH,
		.count = v->count,
		.shared_mem = v->shared_mem,
		.flags = k->flags & (SYSOM_LAUNCH_EX | SYSOM_LAUNCH_PTSZ),
	};
	int rc;

	memcpy(l.grid, v->grid, sizeof(l.grid));
	memcpy(l.block, v->block, sizeof(l.block));
	note_proc(lc->gp, k->tgid, k->generation);
	if ((rc = batcher_add_launch(lc->gp->opts.batcher, k->tgid, k->generation, &l)))
		sysom_report(&lc->gp->opts.report, SYSOM_REPORT_DEBUG,
			     "gputrace: launches of pid %u not recorded: %s", k->tgid,
			     sysom_strerror(rc));
	lc->launches += v->count;
}

static void run_due_scans(struct gpupipe *gp)
{
	uint64_t now = sysom_monotonic_ns();

	for (uint32_t i = 0; i < gp->nscans;) {
		if (gp->scans[i].due_ns > now) {
			i++;
			continue;
		}
		uint32_t tgid = gp->scans[i].tgid;
		gp->scans[i] = gp->scans[--gp->nscans];
		int rc = gputrace_scan_process(gp->gt, tgid);
		if (rc > 0)
			sysom_report(&gp->opts.report, SYSOM_REPORT_INFO,
				     "gputrace: pid %u loaded NCCL/CUDA: %d library files newly traced",
				     tgid, rc);
	}
}

void gpupipe_drain(struct gpupipe *gp)
{
	struct launch_ctx lc = { gp, 0 };
	struct gputrace_stats now;
	struct nccltrack_stats ns;
	struct batcher *b = gp->opts.batcher;

	gputrace_consume(gp->gt);
	gputrace_drain_launches(gp->gt, on_launch, &lc);
	/* Duty cycle of the launch probes: on for the interval after every launch_cycle-th drain. */
	gp->drains++;
	gputrace_set_launch_tracing(gp->gt, gp->launch_cycle &&
						    gp->drains % gp->launch_cycle == 0);
	uint64_t traced = gputrace_launch_traced_ns(gp->gt);
	batcher_add_counter(b, SYSOM_COUNTER_LAUNCH_TRACED_MS,
			    (traced - gp->last_launch_ns) / 1000000);
	gp->last_launch_ns = traced - (traced - gp->last_launch_ns) % 1000000;
	run_due_scans(gp);
	gputrace_sweep(gp->gt, sysom_monotonic_ns());
	gputrace_stats_read(gp->gt, &now);
	nccltrack_stats_read(gp->nt, &ns);
	batcher_add_counter(b, SYSOM_COUNTER_NCCL_CALLS, now.bpf.calls - gp->last.bpf.calls);
	batcher_add_counter(b, SYSOM_COUNTER_NCCL_EVENTS_LOST,
			    now.bpf.events_lost - gp->last.bpf.events_lost);
	batcher_add_counter(b, SYSOM_COUNTER_NCCL_UNMATCHED,
			    now.bpf.unmatched - gp->last.bpf.unmatched);
	batcher_add_counter(b, SYSOM_COUNTER_LAUNCHES, now.bpf.launches - gp->last.bpf.launches);
	batcher_add_counter(b, SYSOM_COUNTER_LAUNCH_MAP_FULL,
			    now.bpf.launch_map_full - gp->last.bpf.launch_map_full);
	batcher_add_counter(b, SYSOM_COUNTER_KERNEL_NAMES, now.bpf.names - gp->last.bpf.names);
	batcher_add_counter(b, SYSOM_COUNTER_GPU_ATTACH_ERRORS,
			    now.attach_errors - gp->last.attach_errors);
	batcher_add_counter(b, SYSOM_COUNTER_GPU_LOADER_EVENTS, now.dl_events - gp->last.dl_events);
	batcher_add_counter(b, SYSOM_COUNTER_GPU_LOADER_HELD, now.dl_resumed - gp->last.dl_resumed);
	if (now.bpf.events_lost > gp->last.bpf.events_lost)
		sysom_report(&gp->opts.report, SYSOM_REPORT_WARN,
			     "gputrace: %llu NCCL events lost (ring buffer full)",
			     (unsigned long long)(now.bpf.events_lost - gp->last.bpf.events_lost));
	if (ns.corrupt_events > gp->last_corrupt)
		sysom_report(&gp->opts.report, SYSOM_REPORT_WARN,
			     "gputrace: %llu malformed events ignored",
			     (unsigned long long)(ns.corrupt_events - gp->last_corrupt));
	gp->last_corrupt = ns.corrupt_events;
	batcher_add_counter(b, SYSOM_COUNTER_NCCL_P2P_CALLS, gp->p2p);
	batcher_add_counter(b, SYSOM_COUNTER_NCCL_P2P_BAD_PEER, gp->p2p_bad);
	gp->p2p = gp->p2p_bad = 0;
	gp->last = now;
}

static void on_comm(void *ctx, uint32_t tgid, uint32_t generation,
		    const struct sysom_communicator *c)
{
	struct gpupipe *gp = ctx;
	int rc = batcher_set_communicator(gp->opts.batcher, tgid, generation, c);

	if (rc)
		sysom_report(&gp->opts.report, SYSOM_REPORT_DEBUG,
			     "gputrace: communicator of pid %u not recorded: %s", tgid,
			     sysom_strerror(rc));
}

/* A collective still inside NCCL at the seal: recorded with the "in flight" flag, so the
 * server sees which ranks entered an instance that never completes (a hang). */
static void on_pending(void *ctx, const struct gt_nccl_event *ev)
{
	struct gpupipe *gp = ctx;
	struct gt_nccl_event e = *ev;
	struct nccltrack_call out;
	int64_t to_real = (int64_t)(sysom_realtime_ns() - sysom_monotonic_ns());

	e.generation = generation_of(gp, e.tgid);
	if (nccltrack_event(gp->nt, &e, sizeof(e), to_real, &out) <= 0 ||
	    !sysom_nccl_op_is_collective(out.call.op) || !out.call.comm_key)
		return;
	out.call.flags |= SYSOM_NCCL_IN_FLIGHT;
	if (batcher_add_nccl_call(gp->opts.batcher, out.tgid, out.generation, &out.call) == 0)
		gp->in_flight_reported++;
}

void gpupipe_set_send_gpu_device(struct gpupipe *gp, bool on)
{
	gp->send_gpu_device = on;
}

/* Whether a rank's descriptors are due for a scan: at most once per GPU_RESCAN_NS, so that a
 * rank holding no or several GPU device files (one that sees every GPU) is not re-read (up to
 * GPUMAP_MAX_FDS links) at every seal. */
#define GPU_RESCAN_NS (30ull * 1000000000ull)
static bool scan_due(struct gp_proc *p)
{
	uint64_t now = sysom_monotonic_ns();

	if (p->gpu_scan_ns && now - p->gpu_scan_ns < GPU_RESCAN_NS)
		return false;
	p->gpu_scan_ns = now;
	return true;
}

/* The wire's gpu_device of a process: its NVML index + 1, 0 when unknown (gpumap.h). */
static uint8_t rank_gpu(struct gpupipe *gp, struct gp_proc *p, const struct job_identity *id)
{
	const char *root = gp->opts.proc_root ? gp->opts.proc_root : "/proc";
	enum gpumap_how how = GPUMAP_UNKNOWN;
	uint32_t minor;
	int idx = -1;

	if (!gp->ngpus || !id->has_rank)
		return 0;
	if (p->gpu_file) {
		idx = p->gpu_file - 1; /* a CUDA context keeps its device */
		how = GPUMAP_DEVICE_FILE;
	} else if (!p->gone && scan_due(p) && gpumap_scan_fds(root, p->tgid, &minor) == 1 &&
		   (idx = gpumap_from_minor(gp->gpus, gp->ngpus, minor)) >= 0) {
		p->gpu_file = (uint8_t)(idx + 1);
		how = GPUMAP_DEVICE_FILE;
	} else {
		/* A registered process's environment still says which devices it sees. */
		if (!p->env_read)
			read_env(gp, p);
		idx = gpumap_from_env(gp->gpus, gp->ngpus, p->env_read ? &p->env.gpu : NULL,
				      id->local_rank, &how);
	}
	if (how != p->gpu_how) {
		sysom_report(&gp->opts.report, SYSOM_REPORT_DEBUG,
			     "pid %u (rank %d, local rank %d): GPU %d by %s", p->tgid, id->rank,
			     id->local_rank, idx, gpumap_how_name(how));
		p->gpu_how = how;
	}
	return idx >= 0 && idx < SYSOM_GPU_MAX_DEVICES ? (uint8_t)(idx + 1) : 0;
}

void gpupipe_before_seal(struct gpupipe *gp)
{
	struct gputrace_stats st;

	gpupipe_drain(gp);
	gputrace_pending_calls(gp->gt, gp->opts.proc_root, sysom_monotonic_ns(), 0, on_pending, gp);
	nccltrack_for_each_comm(gp->nt, on_comm, gp);
	for (uint32_t i = 0; i < gp->nprocs; i++) {
		struct gp_proc *p = &gp->procs[i];
		const struct job_identity *id;
		uint8_t source;

		if (p->registered) {
			id = &p->reg;
			source = SYSOM_JOB_FROM_REGISTRATION;
		} else {
			if (!p->env_read)
				read_env(gp, p);
			id = &p->env;
			source = SYSOM_JOB_FROM_ENVIRONMENT;
		}
		if (!id->has_rank && !id->job_id[0])
			continue;
		/* A registered process said who it is: a rank. */
		uint32_t rank_pid = p->registered ? 0 : p->rank_pid;
		uint8_t gpu = gp->send_gpu_device ? rank_gpu(gp, p, id) : 0;
		int rc = batcher_set_job_rank(gp->opts.batcher, p->tgid, p->generation, id, source,
					      p->registered ? p->groups : NULL, rank_pid, gpu);
		if (rc)
			sysom_report(&gp->opts.report, SYSOM_REPORT_DEBUG,
				     "gputrace: job identity of pid %u not recorded: %s", p->tgid,
				     sysom_strerror(rc));
	}
	/* Processes that exited are forgotten (the tracker too, which may never have seen them)
	 * once GONE_GRACE_NS has passed since a seal first found them gone: until then their late
	 * events still find their communicators, and their identity and communicators go into
	 * every batch. */
	uint64_t now = sysom_monotonic_ns();
	for (uint32_t i = 0; i < gp->nprocs;) {
		struct gp_proc *p = &gp->procs[i];
		char dir[64];

		snprintf(dir, sizeof(dir), "%s/%u", gp->opts.proc_root ? gp->opts.proc_root : "/proc",
			 p->tgid);
		if (!p->gone && (p->registered || access(dir, F_OK) == 0)) {
			i++;
			continue;
		}
		if (!p->gone_since_ns)
			p->gone_since_ns = now;
		if (now - p->gone_since_ns < GONE_GRACE_NS) {
			i++;
			continue;
		}
		nccltrack_forget(gp->nt, p->tgid);
		gputrace_forget_process(gp->gt, p->tgid);
		*p = gp->procs[--gp->nprocs];
	}
	nccltrack_prune(gp->nt);
	gputrace_stats_read(gp->gt, &st);
	batcher_add_counter(gp->opts.batcher, SYSOM_COUNTER_GPU_LIBRARIES, st.libraries);
}

void gpupipe_stats_read(const struct gpupipe *gp, struct gputrace_stats *out)
{
	gputrace_stats_read(gp->gt, out);
}
