/* SPDX-License-Identifier: Apache-2.0 */
/* Sampler + tracker + unwinder + CPython walker for one process (see py_session.h). */
#include "tests/support/py_session.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"

static void on_event(void *ctx, const struct sysom_proc_event *ev)
{
	struct py_session *s = ctx;

	if (ev->tgid != s->pid)
		return;
	if (ev->type == SYSOM_PROC_EVENT_NEW)
		proctrack_on_new(s->pt, ev->tgid, ev->generation);
	else if (ev->type == SYSOM_PROC_EVENT_EXEC)
		proctrack_on_exec(s->pt, ev->tgid, ev->generation);
	else if (ev->type == SYSOM_PROC_EVENT_EXIT)
		proctrack_on_exit(s->pt, ev->tgid, ev->generation);
	else if (ev->type == SYSOM_PROC_EVENT_UNMAPPED)
		proctrack_rescan(s->pt, ev->tgid, ev->generation);
}

static void on_mappings(void *ctx, const struct pt_process *proc)
{
	struct py_session *s = ctx;

	if (s->unwinder)
		unwinder_publish(s->unwinder, proc);
	if (s->py)
		pyframes_publish(s->py, proc);
}

static void on_forget(void *ctx, const struct pt_process *proc)
{
	struct py_session *s = ctx;

	if (s->unwinder)
		unwinder_forget(s->unwinder, proc);
	if (s->py)
		pyframes_forget(s->py, proc);
}

int py_session_open(struct py_session *s, uint32_t pid, char *err, size_t errlen)
{
	struct proctrack_options po;
	struct sampler_options so;
	struct unwinder_options uo;
	struct pyframes_options pyo;
	int rc;

	memset(s, 0, sizeof(*s));
	s->pid = pid;
	proctrack_options_default(&po);
	po.on_mappings = on_mappings;
	po.on_forget = on_forget;
	po.mappings_ctx = s;
	if ((rc = proctrack_new(&po, &s->pt))) {
		snprintf(err, errlen, "proctrack_new: %d", rc);
		return rc;
	}
	sampler_options_default(&so);
	so.sample_rate = 1.0;
	so.unwinder = SYSOM_UNWINDER_HYBRID;
	so.offcpu_mode = SYSOM_OFFCPU_JOBS;
	if ((rc = sampler_open(&so, on_event, s, &s->sampler, err, errlen)))
		goto fail;
	sampler_unwind_maps(s->sampler, &s->maps);
	unwinder_options_default(&uo);
	if ((rc = unwinder_new(&uo, &s->maps, &s->unwinder))) {
		snprintf(err, errlen, "unwinder_new: %d", rc);
		goto fail;
	}
	pyframes_options_default(&pyo);
	if ((rc = pyframes_new(&pyo, s->maps.py_procs, &s->py))) {
		snprintf(err, errlen, "pyframes_new: %d", rc);
		goto fail;
	}
	return 0;
fail:
	py_session_close(s);
	return rc;
}

int py_session_drain(struct py_session *s, sampler_offcpu_fn fn, void *ctx)
{
	int rc;

	sampler_poll_events(s->sampler);
	sampler_set_offcpu_sink(s->sampler, fn, ctx);
	rc = sampler_drain(s->sampler, NULL, NULL, NULL);
	proctrack_after_drain(s->pt);
	unwinder_work(s->unwinder, 20ULL * 1000000ULL);
	return rc;
}

int py_session_ready(struct py_session *s, int timeout_ms, struct py_proc *entry)
{
	uint64_t deadline = sysom_monotonic_ns() + (uint64_t)timeout_ms * 1000000ULL;
	uint64_t found_at = 0;

	while (sysom_monotonic_ns() < deadline) {
		struct unwinder_stats us;

		py_session_drain(s, NULL, NULL);
		if (!found_at && bpf_map_lookup_elem(s->maps.py_procs, &s->pid, entry) == 0)
			found_at = sysom_monotonic_ns();
		unwinder_stats_read(s->unwinder, &us);
		/* Published, and no table left to compile (half a second for its mappings'
		 * tables to be queued after the publish). */
		if (found_at && !us.pending && sysom_monotonic_ns() - found_at > 500000000ULL)
			return sampler_offcpu_track(s->sampler, s->pid, true);
		usleep(50000);
	}
	return -ETIMEDOUT;
}

void py_session_close(struct py_session *s)
{
	proctrack_free(s->pt); /* first: it tells the unwinder and the walker what it forgets */
	s->pt = NULL;
	pyframes_free(s->py);
	s->py = NULL;
	unwinder_free(s->unwinder);
	s->unwinder = NULL;
	sampler_close(s->sampler);
	s->sampler = NULL;
}
