/* SPDX-License-Identifier: Apache-2.0 */
/* Sampler + tracker + unwinder wiring, the no-frame-pointer workload, and chain accuracy. */
#include "common/clock.h"
#include "tests/support/unwind_session.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/node/host.h"

static void on_event(void *ctx, const struct sysom_proc_event *ev)
{
	struct unwind_session *s = ctx;

	switch (ev->type) {
	case SYSOM_PROC_EVENT_NEW:
		proctrack_on_new(s->pt, ev->tgid, ev->generation);
		break;
	case SYSOM_PROC_EVENT_EXEC:
		proctrack_on_exec(s->pt, ev->tgid, ev->generation);
		break;
	case SYSOM_PROC_EVENT_EXIT:
		proctrack_on_exit(s->pt, ev->tgid, ev->generation);
		break;
	case SYSOM_PROC_EVENT_UNMAPPED:
		s->unmapped_events++;
		proctrack_rescan(s->pt, ev->tgid, ev->generation);
		break;
	}
}

static void on_mappings(void *ctx, const struct pt_process *proc)
{
	struct unwind_session *s = ctx;

	if (s->unwinder)
		unwinder_publish(s->unwinder, proc);
}

static void on_forget(void *ctx, const struct pt_process *proc)
{
	struct unwind_session *s = ctx;

	if (s->unwinder)
		unwinder_forget(s->unwinder, proc);
}

uint64_t unwind_session_max_rows;

int unwind_session_open(struct unwind_session *s, enum sysom_unwinder mode, uint32_t hz,
			double rate, char *err, size_t errlen)
{
	struct sampler_options so;
	struct proctrack_options po;
	int rc;

	memset(s, 0, sizeof(*s));
	proctrack_options_default(&po);
	po.on_mappings = on_mappings;
	po.on_forget = on_forget;
	po.mappings_ctx = s;
	if ((rc = proctrack_new(&po, &s->pt)))
		return rc;
	sampler_options_default(&so);
	so.hz = hz;
	so.sample_rate = rate;
	so.unwinder = mode;
	if ((rc = sampler_open(&so, on_event, s, &s->sampler, err, errlen)))
		goto fail;
	if (mode == SYSOM_UNWINDER_HYBRID) {
		struct unwinder_options uo;
		struct sampler_unwind_maps maps;
		unwinder_options_default(&uo);
		if (unwind_session_max_rows)
			uo.max_rows = unwind_session_max_rows;
		sampler_unwind_maps(s->sampler, &maps);
		if ((rc = unwinder_new(&uo, &maps, &s->unwinder))) {
			snprintf(err, errlen, "unwinder_new: %d", rc);
			goto fail;
		}
	}
	return 0;
fail:
	unwind_session_close(s);
	return rc;
}

/* As the agent: table compilation gets a bounded slice after each batch of events. */
#define WORK_BUDGET_NS (20ULL * 1000000ULL)

void unwind_session_poll(struct unwind_session *s)
{
	sampler_poll_events(s->sampler);
	if (s->unwinder)
		unwinder_work(s->unwinder, WORK_BUDGET_NS);
}

int unwind_session_drain(struct unwind_session *s, sampler_drain_fn fn, void *ctx)
{
	int rc;

	sampler_poll_events(s->sampler);
	rc = sampler_drain(s->sampler, fn, ctx, NULL);
	proctrack_after_drain(s->pt);
	if (s->unwinder) {
		unwinder_sweep(s->unwinder, sysom_monotonic_ns());
		unwinder_work(s->unwinder, WORK_BUDGET_NS);
	}
	return rc;
}

void unwind_session_close(struct unwind_session *s)
{
	unwinder_free(s->unwinder);
	s->unwinder = NULL;
	sampler_close(s->sampler);
	s->sampler = NULL;
	proctrack_free(s->pt);
	s->pt = NULL;
}

int nofp_workload_expect(struct nofp_workload *n, const char *prefix, char *line, size_t size,
			 int timeout_ms)
{
	uint64_t deadline = sysom_monotonic_ns() + (uint64_t)timeout_ms * 1000000ULL;

	for (;;) {
		uint64_t now = sysom_monotonic_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		int rc = workload_read_line(n->w.stdout_fd, line, size,
					    (int)((deadline - now) / 1000000ULL) + 1);
		if (rc < 0)
			return rc;
		if (strncmp(line, prefix, strlen(prefix)) == 0)
			return 0;
	}
}

int nofp_workload_start(struct nofp_workload *n, double seconds, const char *const *args)
{
	char line[1024];
	int rc;

	memset(n, 0, sizeof(*n));
	if ((rc = workload_spawn(&n->w, fixture_path("nofp_workload"), seconds, args)))
		return rc;
	if ((rc = nofp_workload_expect(n, "ready ", line, sizeof(line), 10000)) ||
	    (rc = nofp_workload_expect(n, "chain ", line, sizeof(line), 10000)))
		goto fail;
	char *save = NULL;
	for (char *tok = strtok_r(line + 6, " ", &save); tok && n->chain_len < NOFP_CHAIN_MAX;
	     tok = strtok_r(NULL, " ", &save))
		snprintf(n->chain[n->chain_len++], sizeof(n->chain[0]), "%s", tok);
	if (n->chain_len < 2) {
		rc = -EPROTO;
		goto fail;
	}
	return 0;
fail:
	workload_stop(&n->w);
	return rc;
}

void chain_accuracy_add_names(struct chain_accuracy *a, const struct nofp_workload *n,
			      const char *const *names, int nframes, uint8_t stop_reason,
			      uint64_t count)
{
	int found = 0;

	if (nframes <= 0 || !names[0] || strcmp(names[0], n->chain[0]) != 0)
		return;
	/* The expected chain must appear in caller order; other frames (qsort's internals) may
	 * sit between its functions. */
	for (int i = 0; i < nframes && found < n->chain_len; i++)
		if (names[i] && strcmp(names[i], n->chain[found]) == 0)
			found++;
	a->samples += count;
	a->frames_expected += count * (uint64_t)n->chain_len;
	a->frames_found += count * (uint64_t)found;
	if (found == n->chain_len)
		a->full_chain += count;
	else if (a->label && getenv("SYSOM_DEBUG_CHAIN")) {
		fprintf(stderr, "%s: partial (%llu, stop %u) at %.3f:", a->label,
			(unsigned long long)count, stop_reason, sysom_monotonic_ns() / 1e9);
		for (int i = 0; i < nframes; i++)
			fprintf(stderr, " %s", names[i] ? names[i] : "?");
		fprintf(stderr, "\n");
	}
	a->stop[stop_reason & 31] += count;
}

void chain_accuracy_add(struct chain_accuracy *a, const struct nofp_workload *n,
			const struct symtab *t, const struct sysom_stack_trace *user, uint64_t count)
{
	const char *names[SYSOM_PROFILE_MAX_DEPTH];

	if (!user)
		return;
	for (int i = 0; i < user->nframes && i < SYSOM_PROFILE_MAX_DEPTH; i++)
		names[i] = symtab_name_at(t, i == 0 ? user->ips[i] : user->ips[i] - 1);
	chain_accuracy_add_names(a, n, names, user->nframes, user->stop_reason, count);
}
