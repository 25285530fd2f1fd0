/* SPDX-License-Identifier: Apache-2.0 */
/* sysom-agent event loop: timers drive drains and batches; signals stop and reload. */
#include "agent/daemon/daemon.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <systemd/sd-daemon.h>
#include <uv.h>

#include <bpf/bpf.h>

#include "agent/ship/batcher.h"
#include "agent/symbols/perfmap.h"
#include "agent/gpu/gpupipe.h"
#include "agent/node/host.h"
#include "agent/node/kernel.h"
#include "agent/symbols/ksyms_upload.h"
#include "agent/gpu/nvml.h"
#include "agent/os/hostsig.h"
#include "agent/os/ossignals.h"
#include "agent/node/proctrack.h"
#include "agent/gpu/gpustats.h"
#include "agent/ranks/registry.h"
#include "agent/sampling/sampler.h"
#include "agent/ship/spool.h"
#include "agent/symbols/symupload.h"
#include "agent/sampling/unwinder.h"
#include "agent/sampling/pyframes.h"
#include "agent/ship/uploader.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/hex.h"
#include "common/log.h"
#include "common/report.h"

struct agent {
	struct agent_config *cfg;
	int argc;
	char *const *argv;
	uv_loop_t loop;
	uv_timer_t drain_timer, batch_timer, duration_timer;
	uv_timer_t unwind_timer; /* continues compiling queued unwind tables */
	uv_timer_t nvml_timer;   /* GPU readings (--nvml-interval) */
	struct nvml *nvml;       /* NULL with --nvml=false or without NVML */
	uv_signal_t sig_term, sig_int, sig_hup;
	uv_poll_t events_poll;
	bool events_poll_started;
	struct host_identity host;
	struct kernel_info kernel;
	struct sampler *sampler;
	struct proctrack *pt;
	struct batcher *batcher;
	struct spool *spool;
	struct uploader *uploader;
	struct ksyms_upload *ksyms;
	struct symupload *symup; /* NULL when disabled or not startable */
	struct unwinder *unwinder; /* NULL with --unwinder fp */
	struct gpupipe *gpu;       /* NULL with --gpu-trace=false or when it cannot load */
	struct registry *registry; /* NULL with --socket "" or when it cannot open */
	struct gpustats *gpustats; /* folds component telemetry; with the registry */
	struct ossignals *os;      /* NULL with --os-signals=false or when it cannot load */
	struct hostsig *hostsig;   /* NULL with --host-signals=false */
	bool os_attach_reported;   /* its attach errors went into a batch */
	char *token;
	char node_hex[2 * SYSOM_NODE_ID_SIZE + 1];
	struct sampler_counters last_counters;
	struct sysom_offcpu_cpu last_offcpu; /* off-CPU counters at the last fold */
	bool offcpu_budget_warned;          /* the off-CPU unwind budget ran out once: logged */
	struct pyframes *py;          /* CPython frames (hybrid unwinder only) */
	struct perfmap_cache *jit;    /* JIT functions from perf maps */
	uint64_t last_py_unsupported;
	uint64_t last_vanished, last_retries, last_spool_dropped;
	uint64_t last_container_scans, last_container_missing;
	uint64_t last_refused_early, last_refused_bytes;
	bool stopping;
	int exit_code;
};

/* ---- events from the library modules (they do not log; the daemon does) ------------------- */

static void on_proc_event(void *ctx, const struct sysom_proc_event *ev)
{
	struct agent *a = ctx;

	switch (ev->type) {
	case SYSOM_PROC_EVENT_NEW:
		proctrack_on_new(a->pt, ev->tgid, ev->generation);
		break;
	case SYSOM_PROC_EVENT_EXEC:
		proctrack_on_exec(a->pt, ev->tgid, ev->generation);
		if (a->gpu)
			gpupipe_on_exec(a->gpu, ev->tgid);
		break;
	case SYSOM_PROC_EVENT_EXIT:
		proctrack_on_exit(a->pt, ev->tgid, ev->generation);
		if (a->gpu)
			gpupipe_on_exit(a->gpu, ev->tgid, ev->ktime_ns);
		break;
	case SYSOM_PROC_EVENT_UNMAPPED:
		/* A library loaded since the last scan (dlopen) or new JIT code. */
		if (proctrack_rescan(a->pt, ev->tgid, ev->generation))
			log_debug("rescanned pid %u: unwinder met 0x%llx outside its mappings",
				  ev->tgid, (unsigned long long)ev->addr);
		break;
	}
}

static void unwinder_step(struct agent *a);

/* proctrack read a process's mappings: publish them (and build tables) for the unwinder. */
static void on_mappings(void *ctx, const struct pt_process *proc)
{
	struct agent *a = ctx;
	int rc;

	if (a->unwinder && (rc = unwinder_publish(a->unwinder, proc)))
		log_debug("unwinder: cannot publish pid %u: %s (frame-pointer stacks until its next "
			  "scan)", proc->tgid, sysom_strerror(rc));
	if (a->py && (rc = pyframes_publish(a->py, proc)))
		log_debug("python: cannot publish pid %u: %s (native frames only)", proc->tgid,
			  sysom_strerror(rc));
	if (a->gpu)
		gpupipe_on_mappings(a->gpu, proc);
	if (a->os)
		ossignals_offer(a->os, proc->tgid, proc->generation); /* job process? at the drain */
}

static void on_forget(void *ctx, const struct pt_process *proc)
{
	struct agent *a = ctx;

	if (a->unwinder)
		unwinder_forget(a->unwinder, proc);
	if (a->py)
		pyframes_forget(a->py, proc);
	if (a->jit)
		perfmap_forget(a->jit, proc->tgid, proc->generation);
	if (a->gpu)
		gpupipe_on_forget(a->gpu, proc);
	if (a->os)
		ossignals_forget(a->os, proc->tgid, proc->generation);
}

/* A rank registered over the socket: its word beats its environment. */
static void on_rank_register(void *ctx, uint32_t tgid, const struct job_identity *id,
			     const char *groups)
{
	struct agent *a = ctx;

	log_debug("pid %u registered: job %s rank %d of %d, groups %s", tgid, id->job_id,
		  (int)id->rank, (int)id->world_size, groups && groups[0] ? groups : "-");
	if (a->gpu)
		gpupipe_set_registration(a->gpu, tgid, id, groups);
	if (a->os && ossignals_track(a->os, tgid))
		log_debug("os-signals: registered pid %u not tracked (too many processes)", tgid);
}

static void on_rank_disconnect(void *ctx, uint32_t tgid)
{
	struct agent *a = ctx;

	log_debug("pid %u closed its registration", tgid);
	if (a->gpu)
		gpupipe_clear_registration(a->gpu, tgid);
}

static uint32_t exec_generation_of(void *ctx, uint32_t tgid)
{
	struct agent *a = ctx;
	uint32_t gen = 0;
	int fd = sampler_exec_generation_fd(a->sampler);

	if (fd >= 0)
		bpf_map_lookup_elem(fd, &tgid, &gen);
	return gen;
}

static int on_component_record(void *ctx, uint32_t tgid, void **state, uint16_t type,
			       const uint8_t *payload, size_t len)
{
	struct agent *a = ctx;

	return a->gpustats ? gpustats_record(a->gpustats, tgid, state, type, payload, len) : -ENOSYS;
}

static void on_component_close(void *ctx, uint32_t tgid, void *state)
{
	struct agent *a = ctx;

	(void)tgid;
	gpustats_conn_closed(a->gpustats, state);
}

static void on_spool_event(void *ctx, const struct spool_event *ev)
{
	(void)ctx;
	switch (ev->kind) {
	case SPOOL_EVENT_STATE_CREATED:
		log_info("spool: new agent epoch %016llx", (unsigned long long)ev->epoch);
		break;
	case SPOOL_EVENT_STALE_TMP:
		log_info("spool: removed %s left by an interrupted write", ev->name ? ev->name : "?");
		break;
	case SPOOL_EVENT_DROPPED_FULL:
	case SPOOL_EVENT_DROPPED_AGE:
		log_warn("spool: dropped batch %llu (%s)", (unsigned long long)ev->sequence, ev->detail);
		break;
	default:
		log_error("spool: %s%s%s", ev->detail, ev->name ? ": " : "", ev->name ? ev->name : "");
		break;
	}
}

static void on_upload_event(void *ctx, const struct uploader_event *ev)
{
	(void)ctx;
	switch (ev->kind) {
	case UPLOADER_EVENT_DELIVERED:
		log_debug("batch %llu delivered", (unsigned long long)ev->sequence);
		break;
	case UPLOADER_EVENT_RETRY: {
		/* During a long outage, log attempts 1, 2, 4, 8, ... at warn level only. */
		bool loud = (ev->attempt & (ev->attempt - 1)) == 0;
		char status[32] = "";
		if (ev->http_status)
			snprintf(status, sizeof(status), " (HTTP %d)", ev->http_status);
		sysom_log(loud ? SYSOM_LOG_WARN : SYSOM_LOG_DEBUG,
			  "batch %llu not delivered, attempt %u: %s%s; retrying in %.1fs",
			  (unsigned long long)ev->sequence, ev->attempt, ev->message, status,
			  (double)ev->delay_ms / 1000.0);
		break;
	}
	case UPLOADER_EVENT_REJECTED:
		if (ev->http_status == 409)
			log_error("batch %llu (epoch %016llx) CONFLICTS with a different batch the"
				  " server stored under the same node id, epoch and sequence: its"
				  " samples are NOT stored. Something else writes as this node: a"
				  " machine with the same machine id (--machine-id-file) and a copy"
				  " of this spool directory, or a holder of this node's token."
				  " Server: %s; %s",
				  (unsigned long long)ev->sequence, (unsigned long long)ev->epoch,
				  ev->message, ev->kept ? "the batch is kept in the spool's rejected/"
							  " directory"
						       : "the batch could not be kept");
		else
			log_error("batch %llu rejected by the server (HTTP %d): %s; %s",
				  (unsigned long long)ev->sequence, ev->http_status, ev->message,
				  ev->kept ? "kept in the spool's rejected/ directory"
					   : "it could not be kept");
		break;
	case UPLOADER_EVENT_MEMORY_QUEUED:
		log_warn("batch %llu held in memory: the spool cannot store it (%s)",
			 (unsigned long long)ev->sequence, sysom_strerror(ev->error));
		break;
	case UPLOADER_EVENT_LOST:
		log_error("batch %llu lost: %s", (unsigned long long)ev->sequence, ev->message);
		break;
	case UPLOADER_EVENT_SPOOL_ERROR:
		log_error("spool read failed: %s", ev->message);
		break;
	}
}

static void on_ksyms_event(void *ctx, const struct ksyms_upload_event *ev)
{
	(void)ctx;
	switch (ev->kind) {
	case KSYMS_UPLOAD_PRESENT:
		log_debug("kernel symbols of %s (%s) already on the server", ev->object, ev->build_id);
		break;
	case KSYMS_UPLOAD_DONE:
		log_info("uploaded %ld kernel symbols of %s (build ID %s)", ev->count, ev->object,
			 ev->build_id);
		break;
	case KSYMS_UPLOAD_RETRY:
		log_warn("kernel symbol upload of %s failed (%s); retrying in %.0fs", ev->object,
			 ev->message, (double)ev->delay_ms / 1000.0);
		break;
	case KSYMS_UPLOAD_GIVEN_UP:
		log_error("kernel symbols of %s not uploaded: %s (kernel frames will show as "
			  "offsets)", ev->object, ev->message);
		break;
	}
}

/* "2.1 MiB" */
static void format_size(uint64_t bytes, char *out, size_t len)
{
	if (bytes >= (1ull << 30))
		snprintf(out, len, "%.1f GiB", (double)bytes / (double)(1ull << 30));
	else if (bytes >= (1ull << 20))
		snprintf(out, len, "%.1f MiB", (double)bytes / (double)(1ull << 20));
	else if (bytes >= (1ull << 10))
		snprintf(out, len, "%.1f KiB", (double)bytes / (double)(1ull << 10));
	else
		snprintf(out, len, "%llu B", (unsigned long long)bytes);
}

static void on_symupload_event(void *ctx, const struct symupload_event *ev)
{
	const char *what = strcmp(ev->identity, "file-hash") == 0 ? "content hash" : "build ID";

	(void)ctx;
	switch (ev->kind) {
	case SYMUPLOAD_EVENT_UPLOADED: {
		char exe[32], dbg[32];
		format_size(ev->executable_bytes, exe, sizeof(exe));
		format_size(ev->debuginfo_bytes, dbg, sizeof(dbg));
		if (ev->executable_bytes && ev->debuginfo_bytes)
			log_info("uploaded symbols of %s (%s %s): executable %s + debuginfo %s",
				 ev->path, what, ev->build_id, exe, dbg);
		else if (ev->executable_bytes)
			log_info("uploaded symbols of %s (%s %s): executable %s", ev->path, what,
				 ev->build_id, exe);
		else
			log_info("uploaded symbols of %s (%s %s): debuginfo %s (%s)", ev->path,
				 what, ev->build_id, dbg, ev->debug_path ? ev->debug_path : "");
		break;
	}
	case SYMUPLOAD_EVENT_PRESENT:
		log_debug("symbols of %s (%s %s) already on the server", ev->path, what,
			  ev->build_id);
		break;
	case SYMUPLOAD_EVENT_RETRY: {
		/* During a long outage, log attempts 1, 2, 4, 8, ... at warn level only. */
		bool loud = (ev->attempt & (ev->attempt - 1)) == 0;
		char status[32] = "";
		if (ev->http_status)
			snprintf(status, sizeof(status), " (HTTP %d)", ev->http_status);
		sysom_log(loud ? SYSOM_LOG_WARN : SYSOM_LOG_DEBUG,
			  "symbol upload%s%s failed, attempt %u: %s%s; retrying in %.1fs",
			  ev->path[0] ? " of " : "", ev->path, ev->attempt, ev->message, status,
			  (double)ev->delay_ms / 1000.0);
		break;
	}
	case SYMUPLOAD_EVENT_FAILED: {
		char status[32] = "";
		if (ev->http_status)
			snprintf(status, sizeof(status), " (HTTP %d)", ev->http_status);
		log_warn("symbols of %s (%s %s) not uploaded%s: %s (not retried until restart)",
			 ev->path, what, ev->build_id, status, ev->message);
		break;
	}
	case SYMUPLOAD_EVENT_SKIPPED:
		log_info("symbols of %s (%s %s) not uploaded: %s", ev->path, what, ev->build_id,
			 ev->message);
		break;
	case SYMUPLOAD_EVENT_STATE_ERROR:
		log_warn("symbol upload state: %s", ev->message);
		break;
	}
}

/* proctrack saw a new object: hand it to the symbol upload (non-blocking). */
static void on_new_object(void *ctx, const struct pt_object *obj, uint32_t tgid, uint64_t start,
			  uint64_t end)
{
	struct agent *a = ctx;

	if (a->symup)
		symupload_offer(a->symup, &obj->id, obj->path, tgid, start, end);
}

/* Offers the sampled objects of a tracked process (after the symbol upload (re)started). */
static void offer_process_objects(void *ctx, const struct pt_process *proc)
{
	struct agent *a = ctx;

	for (uint32_t i = 0; i < proc->mapping_count; i++) {
		const struct pt_mapping *m = &proc->mappings[i];
		const struct pt_object *o = m->object;
		if (o->sampled &&
		    (o->id.kind == SYSOM_OBJECT_ELF || o->id.kind == SYSOM_OBJECT_FILE_HASH))
			symupload_offer(a->symup, &o->id, o->path, proc->tgid, m->start, m->end);
	}
}

/* ---- drain and seal ------------------------------------------------------------------------ */

static void fold_counters(struct agent *a)
{
	struct sampler_counters now;
	struct proctrack_stats ps;

	if (sampler_counters_read(a->sampler, &now) == 0) {
		const struct sampler_counters *o = &a->last_counters;
		batcher_add_counter(a->batcher, SYSOM_COUNTER_TICKS, now.ticks - o->ticks);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_GATED_OUT, now.gated_out - o->gated_out);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_IDLE_SKIPPED,
				    now.idle_skipped - o->idle_skipped);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_SAMPLES, now.samples - o->samples);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_KSTACK_ERRORS,
				    now.kstack_errors - o->kstack_errors);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_USTACK_ERRORS,
				    now.ustack_errors - o->ustack_errors);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_COUNT_MAP_FULL,
				    now.count_map_full - o->count_map_full);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_STACK_MAP_FULL,
				    now.stack_map_full - o->stack_map_full);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_EVENTS_LOST,
				    now.events_lost - o->events_lost);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_UNWIND_FRAMES,
				    now.unwind.frames - o->unwind.frames);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_UNWIND_FRAMES_DWARF,
				    now.unwind.frames_dwarf - o->unwind.frames_dwarf);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_UNWIND_FRAMES_FP,
				    now.unwind.frames_fp - o->unwind.frames_fp);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_UNWIND_FRAMES_CACHED,
				    now.unwind.frames_cached - o->unwind.frames_cached);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_UNWIND_FALLBACK,
				    now.unwind.fallback_no_proc - o->unwind.fallback_no_proc);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_PY_FRAMES, now.py.frames - o->py.frames);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_PY_NO_THREAD,
				    now.py.no_thread - o->py.no_thread);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_PY_LOST_READ,
				    now.py.lost_read - o->py.lost_read);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_PY_LOST_INVALID,
				    now.py.lost_invalid - o->py.lost_invalid);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_PY_LOST_DEPTH,
				    now.py.lost_depth - o->py.lost_depth);
		if (a->py) {
			struct pyframes_stats py;
			pyframes_stats_read(a->py, &py);
			batcher_add_counter(a->batcher, SYSOM_COUNTER_PY_UNSUPPORTED,
					    py.unsupported - a->last_py_unsupported);
			a->last_py_unsupported = py.unsupported;
		}
		for (int r = UNWIND_STOP_DEPTH; r < UNWIND_STOP_REASONS; r++)
			batcher_add_counter(a->batcher, (uint16_t)(SYSOM_COUNTER_UNWIND_STOP_FIRST - 1 + r),
					    now.unwind.stops[r] - o->unwind.stops[r]);
		if (now.count_map_full > o->count_map_full || now.stack_map_full > o->stack_map_full)
			log_warn("BPF maps full: %llu samples and %llu stacks lost since the last drain "
				 "(raise --max-sample-keys / --max-stacks or shorten --drain-interval)",
				 (unsigned long long)(now.count_map_full - o->count_map_full),
				 (unsigned long long)(now.stack_map_full - o->stack_map_full));
		a->last_counters = now;
	}
	struct sysom_offcpu_cpu off;
	if (sampler_offcpu_loaded(a->sampler) && sampler_offcpu_counters(a->sampler, &off) == 0) {
		const struct sysom_offcpu_cpu *o = &a->last_offcpu;
		uint64_t lost = off.start_map_full + off.count_map_full - o->start_map_full -
				o->count_map_full;
		batcher_add_counter(a->batcher, SYSOM_COUNTER_OFFCPU_BLOCKS, off.recorded - o->recorded);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_OFFCPU_SHORT,
				    off.short_blocks - o->short_blocks);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_OFFCPU_LOST, lost);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_OFFCPU_FP_FALLBACK,
				    off.fp_fallback - o->fp_fallback);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_OFFCPU_OVER_BUDGET,
				    off.over_budget - o->over_budget);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_OFFCPU_UNWIND_US,
				    off.unwind_ns / 1000 - o->unwind_ns / 1000);
		if (off.over_budget > o->over_budget && !a->offcpu_budget_warned) {
			/* Once: a thread that blocks this often is worth knowing about, but the
			 * counter says how often after that. */
			log_warn("off-CPU: %llu blocking threads' user stacks since the last drain "
				 "taken by frame pointers (no Python frames): this node's threads block "
				 "faster than --off-cpu-unwind-budget %.2g%% of a CPU pays for",
				 (unsigned long long)(off.over_budget - o->over_budget),
				 a->cfg->off_cpu_unwind_budget);
			a->offcpu_budget_warned = true;
		}
		if (lost)
			log_warn("off-CPU: %llu blocks lost since the last drain: BPF maps full",
				 (unsigned long long)lost);
		a->last_offcpu = off;
	}
	proctrack_stats_read(a->pt, &ps);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_PROCESSES_VANISHED, ps.vanished - a->last_vanished);
	a->last_vanished = ps.vanished;
	batcher_add_counter(a->batcher, SYSOM_COUNTER_CONTAINER_LOG_SCANS,
			    ps.container_log_scans - a->last_container_scans);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_CONTAINER_NAMES_MISSING,
			    ps.container_names_missing - a->last_container_missing);
	a->last_container_scans = ps.container_log_scans;
	a->last_container_missing = ps.container_names_missing;
}

/* ---- OS signals: rows into the batch ------------------------------------------------------- */

static void on_os_cpu(void *ctx, const struct sysom_os_cpu *c)
{
	struct agent *a = ctx;
	int rc = batcher_add_os_cpu(a->batcher, c);

	if (rc)
		log_debug("os-signals: CPU %u row not recorded: %s", c->cpu, sysom_strerror(rc));
}

static void on_os_irq(void *ctx, const struct sysom_os_irq *q, const char *name)
{
	struct agent *a = ctx;
	int rc = batcher_add_os_irq(a->batcher, q, name);

	if (rc)
		log_debug("os-signals: IRQ %u row not recorded: %s", q->irq, sysom_strerror(rc));
}

static void on_os_thread(void *ctx, uint32_t tgid, const struct sysom_os_thread *t,
			 const char *comm)
{
	struct agent *a = ctx;
	int rc = batcher_add_os_thread(a->batcher, tgid, exec_generation_of(a, tgid), t, comm);

	if (rc)
		log_debug("os-signals: thread %u of pid %u not recorded: %s", t->tid, tgid,
			  sysom_strerror(rc));
}

/* Environments of newly seen processes read per drain (the rest wait for the next one). */
#define OS_ENV_READS_PER_DRAIN 256

static void drain_ossignals(struct agent *a)
{
	const struct ossignals_visitor v = { on_os_cpu, on_os_irq, on_os_thread, a };
	struct ossignals_window w;
	int rc;

	if (!a->os)
		return;
	rc = ossignals_refresh(a->os, OS_ENV_READS_PER_DRAIN);
	if (rc > 0)
		log_debug("os-signals: %d training processes newly tracked", rc);
	if ((rc = ossignals_collect(a->os, &v, &w))) {
		log_warn("os-signals: collect failed: %s (the window's increments come with the next)",
			 sysom_strerror(rc));
		return;
	}
	batcher_add_counter(a->batcher, SYSOM_COUNTER_OS_THREADS_LOST, w.threads_lost);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_OS_IRQS_LOST, w.irqs_lost);
	if (!a->os_attach_reported) {
		struct ossignals_stats st;
		ossignals_stats_read(a->os, &st);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_OS_ATTACH_ERRORS, st.attach_errors);
		a->os_attach_reported = true;
	}
	if (w.threads_lost)
		log_warn("os-signals: %llu threads not measured: the thread map is full (or had no "
			 "room until they exited)", (unsigned long long)w.threads_lost);
}

static void agent_drain(struct agent *a)
{
	struct sampler_drain_stats st;
	int rc;

	/* Process events first, so incarnations seen since the last drain are known. */
	sampler_poll_events(a->sampler);
	batcher_begin_drain(a->batcher, sysom_realtime_ns());
	rc = sampler_drain(a->sampler, batcher_add_entry, a->batcher, &st);
	if (rc < 0)
		log_warn("drain incomplete: %s (undrained samples stay for the next drain)",
			 sysom_strerror(rc));
	batcher_add_counter(a->batcher, SYSOM_COUNTER_DRAINS, 1);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_DISTINCT_KEYS, st.entries);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_OFFCPU_OPEN, st.offcpu_open);
	if (a->gpu)
		gpupipe_drain(a->gpu);
	drain_ossignals(a);
	fold_counters(a);
	proctrack_after_drain(a->pt);
	if (a->unwinder) {
		unwinder_sweep(a->unwinder, sysom_monotonic_ns());
		unwinder_step(a);
	}
	rc = sampler_sync_cpus(a->sampler);
	if (rc > 0)
		log_info("CPU hotplug: now sampling %u CPUs", sampler_attached_cpus(a->sampler));
	else if (rc < 0)
		log_warn("CPU hotplug check failed: %s", sysom_strerror(rc));
	log_debug("drain: %u keys, %llu samples, %u stacks (%u missing), waited %llu us",
		  st.entries, (unsigned long long)st.samples, st.stacks, st.stacks_missing,
		  (unsigned long long)(st.quiesce_wait_ns / 1000));
}

/* ---- GPU health: one record per GPU per window -------------------------------------------- */

static void on_gpu_window(void *ctx, const struct nvml_gpu_window *w)
{
	struct agent *a = ctx;
	int rc = batcher_add_gpu_health(a->batcher, &w->h, w->uuid, w->pci_bus_id, w->name);

	if (rc)
		log_debug("GPU %u health not recorded: %s", w->h.device, sysom_strerror(rc));
}

static void collect_gpu_health(struct agent *a)
{
	struct nvml_window_counters c;

	if (!a->nvml)
		return;
	nvml_sample(a->nvml); /* the window's last reading */
	nvml_collect(a->nvml, on_gpu_window, a, &c);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_NVML_SAMPLES, c.samples);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_NVML_ERRORS, c.errors);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_XID_EVENTS, c.xid);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_XID_UNMATCHED, c.xid_unmatched);
}

static void on_nvml_timer(uv_timer_t *t)
{
	struct agent *a = t->data;

	nvml_sample(a->nvml);
}

/* Host signals of the window that is being sealed (one read of /proc and /sys per batch). */
static void collect_host_signals(struct agent *a)
{
	struct hostsig_window w;

	if (!a->hostsig)
		return;
	hostsig_collect(a->hostsig, sysom_monotonic_ns(), &w);
	for (uint16_t s = 1; s <= SYSOM_HOST_SIGNAL_MAX; s++) {
		int rc;
		if (w.known[s] && (rc = batcher_set_host_signal(a->batcher, s, w.value[s])))
			log_debug("host-signals: %s not recorded: %s", sysom_host_signal_name(s),
				  sysom_strerror(rc));
	}
	batcher_add_counter(a->batcher, SYSOM_COUNTER_HOST_SIGNALS, w.nknown);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_HOST_FILES_MISSING, w.files_missing);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_HOST_PARSE_ERRORS, w.parse_errors);
}

static void agent_seal(struct agent *a)
{
	struct batcher_seal_info info;
	struct byte_buf out = { 0 };
	struct uploader_stats us;
	struct spool_stats ss;
	uint64_t seq;
	int rc;

	agent_drain(a);
	collect_gpu_health(a);
	/* JIT frames go named to servers that read wire 1.8 (they said so in a reply). */
	if (a->uploader) {
		uploader_stats(a->uploader, &us);
		batcher_set_jit_names(a->batcher, us.server_wire_minor >= 8);
	}
	if (a->gpu) {
		/* The ranks' GPUs go to servers that read wire 1.7 (they said so in a reply). */
		uploader_stats(a->uploader, &us);
		gpupipe_set_send_gpu_device(a->gpu, us.server_wire_minor >= 7);
		gpupipe_before_seal(a->gpu);
	}
	collect_host_signals(a);
	if (a->os) {
		struct ossignals_stats st;
		ossignals_stats_read(a->os, &st);
		batcher_add_counter(a->batcher, SYSOM_COUNTER_OS_TRACKED, st.tracked); /* a level */
	}
	uploader_stats(a->uploader, &us);
	spool_stats(a->spool, &ss);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_UPLOAD_RETRIES, us.retries - a->last_retries);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_SPOOL_DROPPED,
			    ss.dropped_full + ss.dropped_age - a->last_spool_dropped);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_UPLOAD_REFUSED_EARLY,
			    us.refused_early - a->last_refused_early);
	batcher_add_counter(a->batcher, SYSOM_COUNTER_UPLOAD_REFUSED_BYTES,
			    us.refused_body_bytes - a->last_refused_bytes);
	a->last_retries = us.retries;
	a->last_refused_early = us.refused_early;
	a->last_refused_bytes = us.refused_body_bytes;
	a->last_spool_dropped = ss.dropped_full + ss.dropped_age;

	rc = spool_sequence_next(a->spool, &seq);
	if (rc) {
		log_error("cannot reserve a batch sequence (%s): the window stays open",
			  sysom_strerror(rc));
		return;
	}
	rc = batcher_seal(a->batcher, a->host.node_id, spool_epoch(a->spool), seq, sysom_realtime_ns(),
			  &out, &info);
	if (rc) {
		log_error("cannot seal batch %llu: %s (the window stays open)",
			  (unsigned long long)seq, sysom_strerror(rc));
		goto cleanup;
	}
	rc = uploader_submit(a->uploader, seq, info.window_end_ns, out.data, out.len);
	if (rc < 0)
		log_error("batch %llu lost: %s", (unsigned long long)seq, sysom_strerror(rc));
	log_info("batch %llu: %llu samples from %llu keys, %u stacks, %u processes, %zu bytes (%zu raw)%s",
		 (unsigned long long)seq, (unsigned long long)info.samples,
		 (unsigned long long)info.drained_keys, info.stacks, info.processes,
		 info.compressed_bytes, info.encoded_bytes,
		 rc == 1 ? ", held in memory" : "");
cleanup:
	byte_buf_free(&out);
}

/* ---- loop callbacks --------------------------------------------------------------------------- */

static void on_close_noop(uv_handle_t *h)
{
	(void)h;
}

static void agent_shutdown(struct agent *a, const char *why)
{
	if (a->stopping)
		return;
	a->stopping = true;
	log_info("%s: final drain and flush (up to %gs)", why, a->cfg->shutdown_timeout_s);
	sd_notify(0, "STOPPING=1");
	uv_timer_stop(&a->drain_timer);
	uv_timer_stop(&a->batch_timer);
	uv_timer_stop(&a->duration_timer);
	uv_timer_stop(&a->unwind_timer);
	uv_timer_stop(&a->nvml_timer);
	if (a->events_poll_started)
		uv_poll_stop(&a->events_poll);
	/* Symbols first: they can wait for the next start (resumable), batches should not. */
	symupload_stop(a->symup);
	agent_seal(a);
	int lost = uploader_stop(a->uploader, a->cfg->shutdown_timeout_s);
	struct uploader_stats us;
	uploader_stats(a->uploader, &us);
	if (lost > 0)
		log_error("%d batches could not be kept at shutdown", lost);
	if (us.pending)
		log_info("%llu batches remain in the spool for the next start",
			 (unsigned long long)us.pending);
	uv_close((uv_handle_t *)&a->drain_timer, on_close_noop);
	uv_close((uv_handle_t *)&a->batch_timer, on_close_noop);
	uv_close((uv_handle_t *)&a->duration_timer, on_close_noop);
	uv_close((uv_handle_t *)&a->unwind_timer, on_close_noop);
	uv_close((uv_handle_t *)&a->nvml_timer, on_close_noop);
	uv_close((uv_handle_t *)&a->sig_term, on_close_noop);
	uv_close((uv_handle_t *)&a->sig_int, on_close_noop);
	uv_close((uv_handle_t *)&a->sig_hup, on_close_noop);
	if (a->events_poll_started)
		uv_close((uv_handle_t *)&a->events_poll, on_close_noop);
	gpupipe_stop(a->gpu);
	registry_close(a->registry);
	a->registry = NULL;
}

static void on_drain_timer(uv_timer_t *t)
{
	agent_drain(t->data);
}

static void on_batch_timer(uv_timer_t *t)
{
	agent_seal(t->data);
}

static void on_duration_timer(uv_timer_t *t)
{
	agent_shutdown(t->data, "duration reached");
}

/*
 * Unwind tables are compiled on the loop one file per turn (then it yields for a millisecond):
 * a file costs 8-25 ms even when small (the kernel waits for an RCU grace period on every
 * map-in-map update), and ranks registering meanwhile wait for their ACK at most 100 ms, so a
 * turn must not hold several. (Building on a worker thread instead stalled the whole loop
 * for 0.5 s at times while a job started, losing short-lived ranks' identities: left for now.)
 */
#define UNWIND_WORK_BUDGET_NS 0

static void on_unwind_timer(uv_timer_t *t);

/* Compiles queued unwind tables for a bounded time; schedules itself while some remain. */
static void unwinder_step(struct agent *a)
{
	if (a->unwinder && !a->stopping && unwinder_work(a->unwinder, UNWIND_WORK_BUDGET_NS) > 0 &&
	    !uv_is_active((uv_handle_t *)&a->unwind_timer))
		uv_timer_start(&a->unwind_timer, on_unwind_timer, 1, 0);
}

static void on_unwind_timer(uv_timer_t *t)
{
	unwinder_step(t->data);
}

static void on_events(uv_poll_t *p, int status, int events)
{
	struct agent *a = p->data;

	(void)events;
	if (status < 0) {
		log_warn("process event poll failed: %s", uv_strerror(status));
		return;
	}
	int rc = sampler_poll_events(a->sampler);
	if (rc < 0)
		log_warn("reading process events failed: %s", sysom_strerror(rc));
	unwinder_step(a);
}

static void on_stop_signal(uv_signal_t *s, int signum)
{
	agent_shutdown(s->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static uint64_t ms(double seconds)
{
	return (uint64_t)(seconds * 1000.0 + 0.5);
}

static int start_uploader(struct agent *a)
{
	struct uploader_options uo = {
		.server_url = a->cfg->server,
		.token = a->token,
		.ca_file = a->cfg->ca_file,
		.backoff_max_s = a->cfg->backoff_max_s,
		.memory_queue_max_bytes = a->cfg->memory_queue_bytes,
		.on_event = on_upload_event,
		.event_ctx = a,
	};

	memcpy(uo.node_id, a->host.node_id, sizeof(uo.node_id));
	return uploader_start(&uo, a->spool, &a->uploader);
}

/* The state directory holds the spool: the symbol upload state lives next to it. */
static int state_dir_of(const char *spool_dir, char *out, size_t len)
{
	if ((size_t)snprintf(out, len, "%s", spool_dir) >= len)
		return -ENAMETOOLONG;
	char *slash = strrchr(out, '/');
	while (slash && slash > out && slash[1] == '\0') { /* "/a/spool/" */
		*slash = '\0';
		slash = strrchr(out, '/');
	}
	if (!slash)
		return -EINVAL;
	slash[slash == out ? 1 : 0] = '\0';
	return 0;
}

/* Starts the symbol upload when enabled; a failure is logged and sampling goes on without it. */
static void start_symupload(struct agent *a)
{
	char state_dir[PATH_MAX];
	struct symupload_stats st;
	char rate[32];
	int rc;

	if (!a->cfg->symbol_upload)
		return;
	if ((rc = state_dir_of(a->cfg->spool_dir, state_dir, sizeof(state_dir)))) {
		log_warn("symbol upload off: no state directory for %s: %s", a->cfg->spool_dir,
			 sysom_strerror(rc));
		return;
	}
	struct symupload_options so = {
		.server_url = a->cfg->server,
		.token = a->token,
		.ca_file = a->cfg->ca_file,
		.state_dir = state_dir,
		.rate_bytes_per_s = a->cfg->symbol_upload_rate,
		.chunk_bytes = (uint32_t)a->cfg->symbol_chunk_bytes,
		.max_file_bytes = a->cfg->symbol_max_file_bytes,
		.backoff_max_s = a->cfg->backoff_max_s,
		.on_event = on_symupload_event,
		.event_ctx = a,
	};
	if ((rc = symupload_new(&so, &a->symup)) || (rc = symupload_start(a->symup))) {
		log_warn("symbol upload off: cannot start it: %s", sysom_strerror(rc));
		symupload_free(a->symup);
		a->symup = NULL;
		return;
	}
	/* Objects the tracker identified before (or while the upload was restarting). */
	proctrack_for_each(a->pt, offer_process_objects, a);
	symupload_stats(a->symup, &st);
	if (a->cfg->symbol_upload_rate) {
		format_size(a->cfg->symbol_upload_rate, rate, sizeof(rate));
		strncat(rate, "/s", sizeof(rate) - strlen(rate) - 1);
	} else {
		snprintf(rate, sizeof(rate), "no rate limit");
	}
	log_info("symbol upload on (%s, state in %s, %u build IDs uploaded before)", rate,
		 state_dir, st.known_uploaded);
}

static void stop_symupload(struct agent *a)
{
	symupload_stop(a->symup);
	symupload_free(a->symup);
	a->symup = NULL;
}

static bool string_changed(const char *x, const char *y)
{
	return (x == NULL) != (y == NULL) || (x && strcmp(x, y) != 0);
}

static void agent_reload(struct agent *a)
{
	struct agent_config fresh;
	enum sysom_log_level level;
	char err[512] = "";
	char *token = NULL;
	int rc;

	if ((rc = agent_config_defaults(&fresh)) ||
	    (rc = agent_config_load(&fresh, a->argc, a->argv, err, sizeof(err))) ||
	    (rc = agent_config_validate(&fresh, err, sizeof(err))) ||
	    (rc = sysom_log_level_parse(fresh.log_level, &level) ? -SYSOM_ECONFIG : 0)) {
		log_error("SIGHUP: configuration not reloaded: %s", err[0] ? err : "invalid log level");
		agent_config_free(&fresh);
		return;
	}
	err[0] = '\0';
	if ((rc = agent_config_read_token(fresh.token_file, &token, err, sizeof(err)))) {
		log_error("SIGHUP: configuration not reloaded: %s", err);
		agent_config_free(&fresh);
		return;
	}
	sysom_log_setup("sysom-agent", level);
	if (fresh.sample_rate != a->cfg->sample_rate)
		sampler_set_rate(a->sampler, fresh.sample_rate);
	if (fresh.hz != a->cfg->hz && (rc = sampler_set_hz(a->sampler, fresh.hz)))
		log_error("SIGHUP: cannot change the frequency to %u Hz: %s", fresh.hz,
			  sysom_strerror(rc));
	uv_timer_set_repeat(&a->drain_timer, ms(fresh.drain_interval_s));
	uv_timer_set_repeat(&a->batch_timer, ms(fresh.batch_interval_s));
	if (fresh.os_signals != a->cfg->os_signals || fresh.os_signals_all != a->cfg->os_signals_all)
		log_warn("SIGHUP: os-signals and os-signals-all take effect after a restart");
	if (fresh.nccl_profiler_mask != a->cfg->nccl_profiler_mask && a->registry) {
		/* On-demand detail: every connected NCCL profiler switches its events now. */
		registry_set_profiler_mask(a->registry, fresh.nccl_profiler_mask);
		a->cfg->nccl_profiler_mask = fresh.nccl_profiler_mask;
		log_info("SIGHUP: NCCL profiler activation mask %#x sent to the plugins",
			 fresh.nccl_profiler_mask);
	}
	batcher_set_sampling(a->batcher, fresh.hz, fresh.sample_rate, fresh.drain_interval_s,
			     fresh.batch_interval_s);
	bool connection_changed = string_changed(fresh.server, a->cfg->server) ||
				  string_changed(token, a->token) ||
				  string_changed(fresh.ca_file, a->cfg->ca_file);
	bool symbols_changed = fresh.symbol_upload != a->cfg->symbol_upload ||
			       fresh.symbol_upload_rate != a->cfg->symbol_upload_rate ||
			       fresh.symbol_chunk_bytes != a->cfg->symbol_chunk_bytes ||
			       fresh.symbol_max_file_bytes != a->cfg->symbol_max_file_bytes;
	if (connection_changed || symbols_changed)
		stop_symupload(a); /* prompt: an upload in flight resumes in the new one */
	if (connection_changed) {
		uploader_stop(a->uploader, 0);
		uploader_free(a->uploader);
		a->uploader = NULL;
		free(a->token);
		a->token = token;
		token = NULL;
		free(a->cfg->server);
		a->cfg->server = strdup(fresh.server);
		free(a->cfg->ca_file);
		a->cfg->ca_file = fresh.ca_file ? strdup(fresh.ca_file) : NULL;
		if ((rc = start_uploader(a))) {
			log_error("SIGHUP: cannot restart the uploader: %s; shutting down",
				  sysom_strerror(rc));
			free(token);
			agent_config_free(&fresh);
			a->exit_code = 1;
			agent_shutdown(a, "reload failure");
			return;
		}
	}
	if (connection_changed || symbols_changed) {
		a->cfg->symbol_upload = fresh.symbol_upload;
		a->cfg->symbol_upload_rate = fresh.symbol_upload_rate;
		a->cfg->symbol_chunk_bytes = fresh.symbol_chunk_bytes;
		a->cfg->symbol_max_file_bytes = fresh.symbol_max_file_bytes;
		start_symupload(a);
	}
	if (string_changed(fresh.spool_dir, a->cfg->spool_dir) || fresh.max_stacks != a->cfg->max_stacks ||
	    fresh.max_sample_keys != a->cfg->max_sample_keys || fresh.include_idle != a->cfg->include_idle)
		log_warn("SIGHUP: spool-dir, map sizes and include-idle take effect after a restart");
	if (fresh.unwind_table_bytes != a->cfg->unwind_table_bytes && a->unwinder) {
		unwinder_set_max_rows(a->unwinder, fresh.unwind_table_bytes / sizeof(struct unwind_row));
		log_info("SIGHUP: unwind tables may now take %llu MiB%s",
			 (unsigned long long)(fresh.unwind_table_bytes >> 20),
			 fresh.unwind_table_bytes > a->cfg->unwind_table_bytes
				 ? " (tables that found no room are built again)"
				 : " (loaded tables stay; later ones obey it)");
		a->cfg->unwind_table_bytes = fresh.unwind_table_bytes;
	}
	a->cfg->hz = fresh.hz;
	a->cfg->sample_rate = fresh.sample_rate;
	a->cfg->drain_interval_s = fresh.drain_interval_s;
	a->cfg->batch_interval_s = fresh.batch_interval_s;
	free(token);
	agent_config_free(&fresh);
	log_info("SIGHUP: configuration reloaded (%u Hz, %.0f%% of ticks, drain %gs, batch %gs)",
		 a->cfg->hz, a->cfg->sample_rate * 100, a->cfg->drain_interval_s,
		 a->cfg->batch_interval_s);
}

static void on_hup(uv_signal_t *s, int signum)
{
	(void)signum;
	agent_reload(s->data);
}

/* ---- start and stop ------------------------------------------------------------------------- */

static int make_parent_dirs(const char *dir)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return 0;
}

/* The library modules' messages (struct sysom_reporter): logged here, at their level. */
static void log_report(void *ctx, enum sysom_report_level level, const char *text)
{
	(void)ctx;
	if (sysom_log_enabled((enum sysom_log_level)level))
		sysom_log((enum sysom_log_level)level, "%s", text);
}

static const struct sysom_reporter daemon_reporter = { log_report, NULL };

/* Loads the OS signal programs; a failure leaves the agent running without them. */
static void start_ossignals(struct agent *a)
{
	struct ossignals_options oo;
	struct ossignals_stats st;
	char err[512] = "";
	int rc;

	ossignals_options_default(&oo);
	oo.track_all = a->cfg->os_signals_all;
	oo.report = daemon_reporter;
	if ((rc = ossignals_open(&oo, &a->os, err, sizeof(err)))) {
		log_warn("OS signals off: %s", err);
		return;
	}
	/* Processes already running: their environments are read over the next drains. */
	if (!oo.track_all && (rc = ossignals_offer_all(a->os)) < 0)
		log_warn("os-signals: cannot list processes: %s", sysom_strerror(rc));
	ossignals_stats_read(a->os, &st);
	log_info("os-signals: %u of %u tracepoints attached%s%s; %s; %u NUMA nodes", st.attached,
		 st.programs, st.failed[0] ? ", missing: " : "", st.failed,
		 st.track_all ? "every user thread measured" : "threads of training jobs measured",
		 st.numa_nodes);
}

/* NVML by dlopen: a node without NVIDIA's driver says so once and runs on without GPU health. */
static void start_nvml(struct agent *a)
{
	struct nvml_options no = { .library = a->cfg->nvml_library, .kmsg = a->cfg->nvml_kmsg,
				   .report = daemon_reporter };
	char err[512] = "";
	int rc;

	if ((rc = nvml_open(&no, &a->nvml, err, sizeof(err)))) {
		log_info("GPU health off: %s", err);
		return;
	}
	log_info("GPU health: %u GPUs via NVML (%s), read every %gs", nvml_device_count(a->nvml),
		 a->cfg->nvml_library, a->cfg->nvml_interval_s);
	nvml_sample(a->nvml);
}

static int agent_start(struct agent *a)
{
	struct sampler_options so;
	struct proctrack_options po;
	char err[512] = "";
	int rc;

	if ((rc = agent_config_read_token(a->cfg->token_file, &a->token, err, sizeof(err)))) {
		log_error("%s", err);
		return rc;
	}
	if (err[0])
		log_warn("%s", err);
	if ((rc = host_identity_read(a->cfg->machine_id_file, &a->host))) {
		log_error("cannot read the node identity: %s", sysom_strerror(rc));
		return rc;
	}
	sysom_hex_encode(a->host.node_id, sizeof(a->host.node_id), a->node_hex,
			 sizeof(a->node_hex));
	if ((rc = kernel_info_read(NULL, &a->kernel))) {
		log_error("cannot read the kernel's identity (/sys/kernel/notes, /proc/kallsyms): %s",
			  sysom_strerror(rc));
		return rc;
	}
	if (!a->kernel.addresses_visible)
		log_warn("/proc/kallsyms hides addresses (kernel.kptr_restrict): kernel frames will "
			 "not be symbolized");

	proctrack_options_default(&po);
	po.on_new_object = on_new_object;
	po.object_ctx = a;
	po.on_mappings = on_mappings;
	po.on_forget = on_forget;
	po.mappings_ctx = a;
	po.pod_log_root = a->cfg->pod_log_root;
	po.container_log_root = a->cfg->container_log_root;
	if ((rc = proctrack_new(&po, &a->pt))) {
		log_error("cannot create the process tracker: %s", sysom_strerror(rc));
		return rc;
	}
	if (a->cfg->nvml)
		start_nvml(a);
	/* Before the sampler: off-CPU recording of jobs shares the OS signals' process set. */
	if (a->cfg->os_signals)
		start_ossignals(a);
	if (a->cfg->host_signals) {
		struct hostsig_options ho = { a->cfg->host_proc_root, a->cfg->host_sys_root };
		if ((rc = hostsig_open(&ho, &a->hostsig)))
			log_warn("host signals off: %s", sysom_strerror(rc));
		else
			hostsig_collect(a->hostsig, sysom_monotonic_ns(), &(struct hostsig_window){ 0 });
	}
	sampler_options_default(&so);
	so.hz = a->cfg->hz;
	so.sample_rate = a->cfg->sample_rate;
	so.include_idle = a->cfg->include_idle;
	so.max_stacks = a->cfg->max_stacks;
	so.max_sample_keys = a->cfg->max_sample_keys;
	so.unwinder = strcmp(a->cfg->unwinder, "fp") == 0 ? SYSOM_UNWINDER_FP : SYSOM_UNWINDER_HYBRID;
	so.offcpu_min_ns = (uint64_t)(a->cfg->off_cpu_min_s * 1e9);
	so.offcpu_budget_ns = (uint64_t)(a->cfg->off_cpu_unwind_budget / 100 * 1e9);
	if (a->cfg->off_cpu_unwind_budget > 0 && so.offcpu_budget_ns < 1000)
		so.offcpu_budget_ns = 1000; /* a budget, however small, is never "no limit" */
	if (so.offcpu_min_ns < 1000)
		so.offcpu_min_ns = 1000;
	if (strcmp(a->cfg->off_cpu, "all") == 0) {
		so.offcpu_mode = SYSOM_OFFCPU_ALL;
	} else if (strcmp(a->cfg->off_cpu, "jobs") == 0) {
		/* The training processes are those the OS signals track (job environment or
		 * registration): their BPF map is shared, so both follow the same set. */
		so.offcpu_tracked_fd = a->os ? ossignals_tracked_fd(a->os) : -1;
		if (so.offcpu_tracked_fd >= 0)
			so.offcpu_mode = SYSOM_OFFCPU_JOBS;
		else
			log_warn("off-cpu=jobs follows the training processes os-signals tracks, "
				 "and os-signals is %s: off-CPU recording off (off-cpu=all records "
				 "every thread)", a->os ? "set to every thread" : "off");
	}
	if ((rc = sampler_open(&so, on_proc_event, a, &a->sampler, err, sizeof(err)))) {
		log_error("%s", err);
		return rc;
	}
	if (so.unwinder == SYSOM_UNWINDER_HYBRID) {
		struct unwinder_options uo;
		struct sampler_unwind_maps maps;
		unwinder_options_default(&uo);
		uo.max_rows = a->cfg->unwind_table_bytes / sizeof(struct unwind_row);
		uo.report = daemon_reporter;
		sampler_unwind_maps(a->sampler, &maps);
		if ((rc = unwinder_new(&uo, &maps, &a->unwinder))) {
			log_error("cannot create the unwinder: %s", sysom_strerror(rc));
			return rc;
		}
		struct pyframes_options pyo;
		pyframes_options_default(&pyo);
		pyo.report = daemon_reporter;
		if ((rc = pyframes_new(&pyo, maps.py_procs, &a->py))) {
			log_error("cannot create the Python frame support: %s", sysom_strerror(rc));
			return rc;
		}
	}
	if ((rc = perfmap_cache_new("/proc", &a->jit))) {
		log_error("cannot create the JIT map reader: %s", sysom_strerror(rc));
		return rc;
	}
	struct batcher_options bo = {
		.host = &a->host,
		.kernel = &a->kernel,
		.agent_version = SYSOM_VERSION,
		.hz = a->cfg->hz,
		.sample_rate = a->cfg->sample_rate,
		.drain_interval_s = a->cfg->drain_interval_s,
		.batch_interval_s = a->cfg->batch_interval_s,
		.max_sample_rows = a->cfg->max_sample_rows,
		.zstd_level = 3,
		.py = a->py,
		.jit = a->jit,
	};
	if ((rc = batcher_new(&bo, a->pt, &a->batcher))) {
		log_error("cannot create the batcher: %s", sysom_strerror(rc));
		return rc;
	}
	sampler_set_offcpu_sink(a->sampler, batcher_add_offcpu, a->batcher);
	sampler_counters_read(a->sampler, &a->last_counters);
	if (sampler_offcpu_loaded(a->sampler))
		sampler_offcpu_counters(a->sampler, &a->last_offcpu);
	if (a->cfg->gpu_trace) {
		struct sampler_unwind_maps um;
		sampler_unwind_maps(a->sampler, &um);
		struct gpupipe_options go = {
			.proc_root = "/proc",
			.pt = a->pt,
			.batcher = a->batcher,
			.exec_generation_fd = sampler_exec_generation_fd(a->sampler),
			.unwind_tables_fd = a->unwinder ? um.tables : -1,
			.unwind_procs_fd = a->unwinder ? um.procs : -1,
			.unwind_markers_fd = a->unwinder ? um.markers : -1,
			.py_procs_fd = a->unwinder ? um.py_procs : -1,
			.ring_bytes = (uint32_t)a->cfg->gpu_event_ring_bytes,
			.libraries = a->cfg->gpu_libraries,
			.launch_duty = a->cfg->gpu_launch_duty,
			.loader = a->cfg->gpu_loader,
			.nvml = a->nvml,
			.report = daemon_reporter,
		};
		/* CPU profiling is worth running without it (e.g. a kernel without uprobes). */
		if ((rc = gpupipe_open(&a->loop, &go, &a->gpu, err, sizeof(err))))
			log_warn("NCCL/CUDA tracing off: %s", err);
	}

	/* The spool and uploader come after the sampler: a node that cannot profile should say
	 * so (privileges, BTF) before anything else. */
	struct spool_options spo = {
		.dir = a->cfg->spool_dir,
		.max_bytes = a->cfg->spool_max_bytes,
		.max_age_s = (uint64_t)a->cfg->spool_max_age_s,
		.on_event = on_spool_event,
		.event_ctx = a,
	};
	if ((rc = make_parent_dirs(a->cfg->spool_dir)) || (rc = spool_open(&spo, &a->spool))) {
		log_error("cannot open the spool %s: %s", a->cfg->spool_dir, sysom_strerror(rc));
		return rc;
	}
	struct spool_stats spooled;
	spool_stats(a->spool, &spooled);
	if (spooled.files)
		log_info("spool: %llu batches (%llu bytes) left by an earlier run, delivered first",
			 (unsigned long long)spooled.files, (unsigned long long)spooled.bytes);
	if ((rc = start_uploader(a))) {
		log_error("cannot start the uploader for %s: %s", a->cfg->server, sysom_strerror(rc));
		return rc;
	}


	struct ksyms_upload_options ko = {
		.server_url = a->cfg->server,
		.token = a->token,
		.ca_file = a->cfg->ca_file,
		.kernel = &a->kernel,
		.on_event = on_ksyms_event,
		.event_ctx = a,
	};
	if (a->kernel.addresses_visible && (rc = ksyms_upload_start(&ko, &a->ksyms)))
		log_warn("cannot start the kernel symbol upload: %s", sysom_strerror(rc));
	start_symupload(a);
	return 0;
}

static int agent_loop_setup(struct agent *a)
{
	int rc;

	if ((rc = uv_loop_init(&a->loop)))
		return rc;
	uv_timer_init(&a->loop, &a->drain_timer);
	uv_timer_init(&a->loop, &a->batch_timer);
	uv_timer_init(&a->loop, &a->duration_timer);
	uv_timer_init(&a->loop, &a->unwind_timer);
	uv_timer_init(&a->loop, &a->nvml_timer);
	a->nvml_timer.data = a;
	a->drain_timer.data = a->batch_timer.data = a->duration_timer.data = a;
	a->unwind_timer.data = a;
	uv_signal_init(&a->loop, &a->sig_term);
	uv_signal_init(&a->loop, &a->sig_int);
	uv_signal_init(&a->loop, &a->sig_hup);
	a->sig_term.data = a->sig_int.data = a->sig_hup.data = a;
	uv_signal_start(&a->sig_term, on_stop_signal, SIGTERM);
	uv_signal_start(&a->sig_int, on_stop_signal, SIGINT);
	uv_signal_start(&a->sig_hup, on_hup, SIGHUP);
	return 0;
}

static void agent_teardown(struct agent *a)
{
	stop_symupload(a);
	ksyms_upload_stop(a->ksyms);
	uploader_free(a->uploader);
	batcher_free(a->batcher);
	unwinder_free(a->unwinder);
	a->unwinder = NULL; /* proctrack_free below calls on_forget */
	pyframes_free(a->py);
	a->py = NULL;
	gpupipe_free(a->gpu);
	a->gpu = NULL;
	gpustats_free(a->gpustats);
	a->gpustats = NULL;
	ossignals_close(a->os);
	hostsig_close(a->hostsig);
	a->os = NULL;
	nvml_close(a->nvml);
	a->nvml = NULL;
	sampler_close(a->sampler);
	proctrack_free(a->pt); /* forgets through on_forget: the JIT maps after */
	perfmap_cache_free(a->jit);
	a->jit = NULL;
	spool_close(a->spool);
	kernel_info_free(&a->kernel);
	free(a->token);
}

int agent_daemon_run(struct agent_config *config, int argc, char *const argv[])
{
	struct agent a = { .cfg = config, .argc = argc, .argv = argv };
	int rc;

	if ((rc = agent_loop_setup(&a))) {
		log_error("cannot set up the event loop: %s", uv_strerror(rc));
		return 1;
	}
	if (agent_start(&a)) {
		a.stopping = true;
		uv_close((uv_handle_t *)&a.drain_timer, on_close_noop);
		uv_close((uv_handle_t *)&a.batch_timer, on_close_noop);
		uv_close((uv_handle_t *)&a.duration_timer, on_close_noop);
		uv_close((uv_handle_t *)&a.unwind_timer, on_close_noop);
		uv_close((uv_handle_t *)&a.nvml_timer, on_close_noop);
		uv_close((uv_handle_t *)&a.sig_term, on_close_noop);
		uv_close((uv_handle_t *)&a.sig_int, on_close_noop);
		uv_close((uv_handle_t *)&a.sig_hup, on_close_noop);
		gpupipe_stop(a.gpu);
		uv_run(&a.loop, UV_RUN_DEFAULT);
		uv_loop_close(&a.loop);
		if (a.uploader)
			uploader_stop(a.uploader, 0);
		agent_teardown(&a);
		return 1;
	}
	uv_timer_start(&a.drain_timer, on_drain_timer, ms(config->drain_interval_s),
		       ms(config->drain_interval_s));
	uv_timer_start(&a.batch_timer, on_batch_timer, ms(config->batch_interval_s),
		       ms(config->batch_interval_s));
	if (a.nvml)
		uv_timer_start(&a.nvml_timer, on_nvml_timer, ms(config->nvml_interval_s),
			       ms(config->nvml_interval_s));
	if (config->duration_s > 0)
		uv_timer_start(&a.duration_timer, on_duration_timer, ms(config->duration_s), 0);
	if (uv_poll_init(&a.loop, &a.events_poll, sampler_event_fd(a.sampler)) == 0) {
		a.events_poll.data = &a;
		uv_poll_start(&a.events_poll, UV_READABLE, on_events);
		a.events_poll_started = true;
	} else {
		log_warn("cannot poll process events; relying on drains");
	}
	if (config->socket && config->socket[0]) {
		struct registry_options ro = { .path = config->socket,
					       .on_register = on_rank_register,
					       .on_disconnect = on_rank_disconnect,
					       .on_record = on_component_record,
					       .on_conn_close = on_component_close,
					       .profiler_mask = config->nccl_profiler_mask, .ctx = &a,
					       .report = daemon_reporter };
		struct gpustats_options gso = { .batcher = a.batcher,
						.generation_of = exec_generation_of, .ctx = &a,
						.report = daemon_reporter };
		char rerr[256] = "";

		if (gpustats_new(&gso, &a.gpustats))
			log_warn("component telemetry off: out of memory");

		if (registry_open(&a.loop, &ro, &a.registry, rerr, sizeof(rerr)))
			log_warn("registration socket off: %s", rerr); /* identity from environments */
		else
			log_info("ranks register at %s (SYSOM_SOCKET_PATH)", config->socket);
	}

	log_info("attached to %u CPUs at %u Hz, sampling %.0f%% of ticks; shipping to %s every %gs "
		 "(drain every %gs, spool %s, node %s, kernel %s)",
		 sampler_attached_cpus(a.sampler), config->hz, config->sample_rate * 100,
		 config->server, config->batch_interval_s, config->drain_interval_s,
		 config->spool_dir, a.node_hex, a.host.kernel_release);
	sd_notifyf(0, "READY=1\nSTATUS=sampling %u CPUs at %u Hz", sampler_attached_cpus(a.sampler),
		   config->hz);

	uv_run(&a.loop, UV_RUN_DEFAULT);
	uv_loop_close(&a.loop);
	agent_teardown(&a);
	log_info("stopped");
	return a.exit_code;
}
