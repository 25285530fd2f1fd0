/* SPDX-License-Identifier: Apache-2.0 */
/* Hang detection over the live collective instances (server/analysis/hang.h). */
#include "server/analysis/hang.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/hash.h"

struct node_entry {
	char host[HANG_HOST_MAX];
	int64_t last_ms;  /* its last batch */
	int64_t gap_ms;   /* the spacing of its last two batches (0: one seen) */
};

struct proc_entry {
	char *job;
	char host[HANG_HOST_MAX];
	uint32_t pid;
	int32_t rank;
	int64_t listed_ms; /* the last batch of its node that listed it */
};

struct hang_tracker {
	struct node_entry *nodes;
	size_t nnodes, ncap;
	struct proc_entry *procs;
	size_t nprocs, pcap;
};

int hang_tracker_new(struct hang_tracker **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void hang_tracker_free(struct hang_tracker *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nprocs; i++)
		free(t->procs[i].job);
	free(t->procs);
	free(t->nodes);
	free(t);
}

static struct node_entry *node_find(const struct hang_tracker *t, const char *host)
{
	for (size_t i = 0; i < t->nnodes; i++)
		if (strcmp(t->nodes[i].host, host) == 0)
			return &t->nodes[i];
	return NULL;
}

static struct proc_entry *proc_find(const struct hang_tracker *t, const char *job,
				    const char *host, uint32_t pid)
{
	for (size_t i = 0; i < t->nprocs; i++) {
		struct proc_entry *p = &t->procs[i];
		if (p->pid == pid && strcmp(p->host, host) == 0 && strcmp(p->job, job) == 0)
			return p;
	}
	return NULL;
}

int hang_tracker_note(struct hang_tracker *t, const struct sysom_batch *b, int64_t now_ms)
{
	const char *host = sysom_batch_string(b, b->node.hostname);
	struct node_entry *n = node_find(t, host);

	if (!n) {
		if (t->nnodes == HANG_MAX_NODES) { /* forget the node silent the longest */
			size_t old = 0;
			for (size_t i = 1; i < t->nnodes; i++)
				if (t->nodes[i].last_ms < t->nodes[old].last_ms)
					old = i;
			t->nodes[old] = t->nodes[--t->nnodes];
		}
		if (SYSOM_ARRAY_RESERVE(t->nodes, t->ncap, t->nnodes, 16))
			return -ENOMEM;
		n = &t->nodes[t->nnodes++];
		memset(n, 0, sizeof(*n));
		snprintf(n->host, sizeof(n->host), "%s", host);
	} else if (now_ms > n->last_ms) {
		/* A decaying maximum: one late batch (a busy agent) widens the spacing at once,
		 * which then shrinks by a quarter per batch. */
		int64_t gap = now_ms - n->last_ms;
		n->gap_ms = gap > n->gap_ms * 3 / 4 ? gap : n->gap_ms * 3 / 4;
	}
	if (now_ms > n->last_ms)
		n->last_ms = now_ms;
	for (uint32_t i = 0; i < b->job_rank_count; i++) {
		const struct sysom_job_rank *jr = &b->job_ranks[i];
		const char *job = sysom_batch_string(b, jr->job);
		uint32_t pid;
		struct proc_entry *p;

		/* A rank's worker (DataLoader) is not a rank that can be stuck in a collective. */
		if (!job[0] || jr->process >= b->process_count || jr->role == SYSOM_JOB_ROLE_WORKER)
			continue;
		pid = b->processes[jr->process].tgid;
		if (!(p = proc_find(t, job, host, pid))) {
			if (t->nprocs == HANG_MAX_PROCS) { /* forget the least recently listed */
				size_t old = 0;
				for (size_t k = 1; k < t->nprocs; k++)
					if (t->procs[k].listed_ms < t->procs[old].listed_ms)
						old = k;
				free(t->procs[old].job);
				t->procs[old] = t->procs[--t->nprocs];
			}
			if (SYSOM_ARRAY_RESERVE(t->procs, t->pcap, t->nprocs, 64))
				return -ENOMEM;
			p = &t->procs[t->nprocs];
			memset(p, 0, sizeof(*p));
			if (!(p->job = strdup(job)))
				return -ENOMEM;
			snprintf(p->host, sizeof(p->host), "%s", host);
			p->pid = pid;
			t->nprocs++;
		}
		p->rank = jr->rank;
		if (now_ms > p->listed_ms)
			p->listed_ms = now_ms;
	}
	return 0;
}

void hang_tracker_job_drop(struct hang_tracker *t, const char *job)
{
	for (size_t i = 0; i < t->nprocs;) {
		if (strcmp(t->procs[i].job, job) == 0) {
			free(t->procs[i].job);
			t->procs[i] = t->procs[--t->nprocs];
		} else {
			i++;
		}
	}
}

/* How long a node may stay silent before its agent counts as lost. */
static int64_t lost_after_ms(const struct node_entry *n)
{
	int64_t gap = n->gap_ms > 0 ? n->gap_ms : HANG_DEFAULT_BATCH_MS;

	if (gap < 500)
		gap = 500;
	if (gap > 600000)
		gap = 600000;
	gap = 3 * gap + HANG_LOST_SLACK_MS;
	return gap > HANG_LOST_MIN_MS ? gap : HANG_LOST_MIN_MS;
}

bool hang_node_lost(const struct hang_tracker *t, const char *host, int64_t now_ms,
		    int64_t *last_ms)
{
	const struct node_entry *n = node_find(t, host);

	*last_ms = n ? n->last_ms : 0;
	return n && now_ms - n->last_ms > lost_after_ms(n);
}

const char *hang_rank_state_name(enum hang_rank_state s)
{
	switch (s) {
	case HANG_RANK_NOT_ENTERED:
		return "not entered";
	case HANG_RANK_IN_FLIGHT:
		return "in flight";
	case HANG_RANK_EXITED:
		return "exited";
	case HANG_RANK_AGENT_LOST:
		return "agent lost";
	case HANG_RANK_UNSEEN:
		return "unseen";
	case HANG_RANK_IDLE:
		return "between collectives";
	}
	return "unknown";
}

/* ---- evaluation ------------------------------------------------------------------------------ */

struct eval {
	const struct hang_tracker *t;
	const char *job;
	const struct hang_params *p;
	int64_t now;
	struct hang_result *out;
	struct hang_result cand; /* one group's */
	/* The stall candidate: the group that began an instance last. */
	int64_t stall_newest_ns;
	struct hang_result stall;
	/* Processes inside an NCCL call now (host and pid hashed), sorted: the first pass. */
	uint64_t *waiting;
	size_t nwaiting, capwaiting;
};

static uint64_t proc_key(const char *host, uint32_t pid)
{
	return sysom_hash_mix(sysom_hash64(host, strlen(host), 0), pid);
}

static int u64_compare(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* First pass: every process whose newest call of a group had not returned at its last seal. */
static int waiting_note(void *arg, const char *host, uint32_t pid)
{
	struct eval *e = arg;

	if (SYSOM_ARRAY_RESERVE(e->waiting, e->capwaiting, e->nwaiting, 64))
		return -ENOMEM;
	e->waiting[e->nwaiting++] = proc_key(host, pid);
	return 0;
}

static bool is_waiting(const struct eval *e, const char *host, uint32_t pid)
{
	uint64_t k = proc_key(host, pid);

	return pid && e->nwaiting &&
	       bsearch(&k, e->waiting, e->nwaiting, sizeof(k), u64_compare) != NULL;
}

static void next_check(struct hang_result *r, int64_t at)
{
	if (at > 0 && (!r->next_check_ms || at < r->next_check_ms))
		r->next_check_ms = at;
}

/* Whether candidate `c` should replace `best`: a hang first (the one waiting longest: the
 * others usually wait behind it), then an agent loss, then a pending wait. */
static bool better(const struct hang_result *c, const struct hang_result *best)
{
	static const int rankv[] = { [HANG_NONE] = 0, [HANG_PENDING] = 1, [HANG_AGENT_LOST] = 2,
				     [HANG_HUNG] = 3 };

	if (rankv[c->verdict] != rankv[best->verdict])
		return rankv[c->verdict] > rankv[best->verdict];
	if (c->verdict == HANG_HUNG && c->behind != best->behind)
		return !c->behind; /* the ranks it waits for wait themselves: look further */
	return c->since_ms < best->since_ms;
}

/* Whether every live node with processes of the job reported at or after `at_ms` (a rank
 * never seen anywhere would have shown up by then). */
static bool job_nodes_reported(const struct eval *e, int64_t at_ms)
{
	bool any = false;

	for (size_t i = 0; i < e->t->nprocs; i++) {
		const struct proc_entry *pe = &e->t->procs[i];
		const struct node_entry *n;
		if (strcmp(pe->job, e->job) || !(n = node_find(e->t, pe->host)) ||
		    e->now - n->last_ms > lost_after_ms(n))
			continue;
		if (n->last_ms < at_ms)
			return false;
		any = true;
	}
	return any;
}

/* A group's newest instance start: if it is the job's newest so far, the group becomes the
 * stall candidate (its ranks copied: the view is borrowed). */
static void stall_note(struct eval *e, const struct live_group_view *g)
{
	struct hang_result *c = &e->stall;
	int64_t newest = 0;

	for (int32_t r = 0; r < g->nranks; r++)
		if (g->ranks[r].last_entry_ns > newest)
			newest = g->ranks[r].last_entry_ns;
	if (newest <= e->stall_newest_ns)
		return;
	e->stall_newest_ns = newest;
	memset(c, 0, sizeof(*c));
	c->comm = g->comm;
	c->op = g->op;
	c->link = g->link;
	c->src = g->src;
	c->dst = g->dst;
	c->nranks = g->nranks;
	c->interval_ms = (double)g->interval_ns / 1e6;
	for (int32_t r = 0; r < g->nranks; r++) {
		const struct live_rank_view *rv = &g->ranks[r];
		c->entered += rv->top > 0;
		c->seq = rv->top > c->seq + 1 ? rv->top - 1 : c->seq; /* the newest begun */
		if (c->nnamed == HANG_MAX_NAMED) {
			c->nmissing++;
			continue;
		}
		struct hang_rank *hr = &c->ranks[c->nnamed++];
		*hr = (struct hang_rank){ .rank = -1, .comm_rank = g->link ? (r ? g->dst : g->src) : r,
					  .pid = rv->pid,
					  .entered_any = rv->top > 0,
					  .last_seq = rv->top ? rv->top - 1 : 0,
					  .last_entry_ms = rv->last_entry_ns / 1000000 };
		snprintf(hr->host, sizeof(hr->host), "%s", rv->host);
		c->nmissing++;
	}
}

/*
 * After every group was seen and none waits: a stall when no instance began on any
 * communicator for longer than max(floor, factor x the spacing of the group that began one
 * last), every node with processes of the job reported after that (so the quiet is not only
 * data still on its way), and no node is lost.
 */
static void stall_judge(struct eval *e)
{
	struct hang_result *c = &e->stall, *out = e->out;
	double thr;
	uint32_t alive = 0;

	if (out->verdict != HANG_NONE || out->nlost || !e->stall_newest_ns)
		return;
	c->since_ms = e->stall_newest_ns / 1000000;
	c->waited_ms = e->now - c->since_ms;
	thr = e->p->factor * c->interval_ms;
	c->threshold_ms = thr > e->p->floor_ms ? (int64_t)thr : (int64_t)e->p->floor_ms;
	if (c->waited_ms < c->threshold_ms) {
		next_check(out, c->since_ms + c->threshold_ms + 1);
		return;
	}
	if (!job_nodes_reported(e, c->since_ms + c->threshold_ms)) {
		next_check(out, e->now + 1000);
		return;
	}
	for (size_t i = 0; i < c->nnamed; i++) {
		struct hang_rank *hr = &c->ranks[i];
		const struct node_entry *n = node_find(e->t, hr->host);
		const struct proc_entry *pe = hr->pid ? proc_find(e->t, e->job, hr->host, hr->pid)
						      : NULL;
		if (pe) {
			hr->rank = pe->rank;
			hr->listed_ms = pe->listed_ms;
		}
		hr->node_last_ms = n ? n->last_ms : 0;
		hr->state = n && pe && n->last_ms > pe->listed_ms ? HANG_RANK_EXITED : HANG_RANK_IDLE;
		alive += hr->state == HANG_RANK_IDLE;
	}
	if (!alive)
		return; /* the named processes are gone: the job is ending, not stalled */
	c->verdict = HANG_STALL;
	c->next_check_ms = out->next_check_ms;
	*out = *c;
}

int hang_stall_describe(const struct hang_result *r, char *buf, size_t len)
{
	if (r->link)
		return snprintf(buf, len,
				"no collective or transfer began on any communicator of the job for "
				"%.0f s (threshold %.0f s) while its processes live and their agents "
				"report; last: transfer #%" PRIu64 " from rank %d to rank %d of "
				"communicator %016" PRIx64,
				(double)r->waited_ms / 1e3, (double)r->threshold_ms / 1e3, r->seq,
				r->src, r->dst, r->comm);
	return snprintf(buf, len,
			"no collective began on any communicator of the job for %.0f s (threshold "
			"%.0f s) while its processes live and their agents report; last: %s #%" PRIu64
			" of communicator %016" PRIx64,
			(double)r->waited_ms / 1e3, (double)r->threshold_ms / 1e3,
			sysom_nccl_op_name(r->op), r->seq, r->comm);
}

static int on_group(void *arg, const struct live_group_view *g)
{
	struct eval *e = arg;
	struct hang_result *c = &e->cand;
	int64_t since_ns = 0;
	bool all_entered = false;
	uint32_t stuck = 0, lost = 0, unseen = 0, free_here = 0;

	if (g->nranks < 2)
		return 0;
	stall_note(e, g);
	if (g->pending_t0_ns > 0) {
		since_ns = g->pending_t0_ns;
	} else if (g->pending_seq > 0) {
		/* Nobody entered the next instance: did every rank enter the last one and none
		 * return? */
		all_entered = true;
		for (int32_t r = 0; r < g->nranks && all_entered; r++) {
			const struct live_rank_view *rv = &g->ranks[r];
			all_entered = rv->in_flight && rv->top == g->pending_seq && rv->last_entry_ns;
			if (all_entered && (!since_ns || rv->last_entry_ns < since_ns))
				since_ns = rv->last_entry_ns;
		}
		if (!all_entered)
			return 0;
	} else {
		return 0;
	}
	memset(c, 0, sizeof(*c));
	c->comm = g->comm;
	c->op = g->op;
	c->link = g->link;
	c->src = g->src;
	c->dst = g->dst;
	c->seq = all_entered ? g->pending_seq - 1 : g->pending_seq;
	c->nranks = g->nranks;
	c->all_entered = all_entered;
	c->since_ms = since_ns / 1000000;
	c->waited_ms = e->now - c->since_ms;
	c->interval_ms = (double)g->interval_ns / 1e6;
	double thr = e->p->factor * c->interval_ms;
	c->threshold_ms = thr > e->p->floor_ms ? (int64_t)thr : (int64_t)e->p->floor_ms;
	for (int32_t r = 0; r < g->nranks; r++) {
		const struct live_rank_view *rv = &g->ranks[r];
		bool missing = all_entered || rv->top <= g->pending_seq;
		if (!missing) {
			c->entered++;
			continue;
		}
		if (all_entered)
			c->entered++;
		struct hang_rank hr = { .rank = -1, .comm_rank = g->link ? (r ? g->dst : g->src) : r,
					.pid = rv->pid,
					.entered_any = rv->top > 0,
					.last_seq = rv->top ? rv->top - 1 : 0,
					.last_entry_ms = rv->last_entry_ns / 1000000 };
		snprintf(hr.host, sizeof(hr.host), "%s", rv->host);
		const struct node_entry *n = node_find(e->t, rv->host);
		const struct proc_entry *pe = rv->pid ? proc_find(e->t, e->job, rv->host, rv->pid)
						      : NULL;
		if (pe) {
			hr.rank = pe->rank;
			hr.listed_ms = pe->listed_ms;
		}
		hr.node_last_ms = n ? n->last_ms : 0;
		if (n && e->now - n->last_ms > lost_after_ms(n))
			hr.state = HANG_RANK_AGENT_LOST;
		else if (n && pe && n->last_ms > pe->listed_ms)
			hr.state = HANG_RANK_EXITED;
		else if (!n && !rv->host[0] && job_nodes_reported(e, c->since_ms + 1000))
			hr.state = HANG_RANK_NOT_ENTERED; /* never seen, and every node reported since */
		else if (!n || n->last_ms < c->since_ms + 1000)
			hr.state = HANG_RANK_UNSEEN; /* its node has not reported since: maybe there */
		else if (all_entered)
			hr.state = HANG_RANK_IN_FLIGHT;
		else
			hr.state = HANG_RANK_NOT_ENTERED;
		lost += hr.state == HANG_RANK_AGENT_LOST;
		unseen += hr.state == HANG_RANK_UNSEEN;
		stuck += hr.state != HANG_RANK_AGENT_LOST && hr.state != HANG_RANK_UNSEEN;
		/* Not entered here because it waits inside another call: not the cause. */
		free_here += hr.state != HANG_RANK_NOT_ENTERED || !is_waiting(e, rv->host, rv->pid);
		if (c->nnamed < HANG_MAX_NAMED)
			c->ranks[c->nnamed++] = hr;
		c->nmissing++;
	}
	if (stuck == 0 && unseen == 0 && lost > 0) {
		c->verdict = HANG_AGENT_LOST;
	} else if (c->waited_ms < c->threshold_ms) {
		c->verdict = HANG_PENDING;
		next_check(e->out, c->since_ms + c->threshold_ms);
	} else if (stuck > 0) {
		c->verdict = HANG_HUNG;
		c->behind = !all_entered && free_here == 0;
	} else {
		c->verdict = HANG_PENDING; /* a node has not reported since: wait for it */
		next_check(e->out, e->now + 1000);
	}
	if (better(c, e->out)) { /* the job-wide fields stay */
		c->next_check_ms = e->out->next_check_ms;
		c->nlost = e->out->nlost;
		memcpy(c->lost, e->out->lost, sizeof(c->lost));
		*e->out = *c;
	}
	return 0;
}

int hang_evaluate(const struct hang_tracker *t, const struct live *l, const char *job,
		  const struct hang_params *p, int64_t now_ms, struct hang_result *out)
{
	struct eval *e = calloc(1, sizeof(*e));
	size_t known = 0, gone = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!e)
		return -ENOMEM;
	/* The job's processes: gone (their node reports without them), on a lost node, alive. */
	for (size_t i = 0; i < t->nprocs; i++) {
		const struct proc_entry *pe = &t->procs[i];
		const struct node_entry *n;
		if (strcmp(pe->job, job) || !(n = node_find(t, pe->host)))
			continue;
		known++;
		bool lost = now_ms - n->last_ms > lost_after_ms(n);
		if (!lost && n->last_ms > pe->listed_ms) {
			gone++;
			continue;
		}
		if (!lost) {
			next_check(out, n->last_ms + lost_after_ms(n) + 1);
			continue;
		}
		if (pe->listed_ms < n->last_ms)
			continue; /* it was gone before the node went silent */
		struct hang_lost_node *ln = NULL;
		for (size_t k = 0; k < out->nlost && !ln; k++)
			if (strcmp(out->lost[k].host, pe->host) == 0)
				ln = &out->lost[k];
		if (!ln && out->nlost < HANG_MAX_LOST) {
			ln = &out->lost[out->nlost++];
			snprintf(ln->host, sizeof(ln->host), "%s", pe->host);
			ln->last_ms = n->last_ms;
		}
		if (ln && ln->nranks++ < HANG_MAX_NAMED)
			ln->ranks[ln->nranks - 1] = pe->rank;
	}
	if (known && gone == known) {
		out->job_ended = true;
		out->next_check_ms = 0;
		free(e);
		return 0;
	}
	*e = (struct eval){ .t = t, .job = job, .p = p, .now = now_ms, .out = out };
	rc = live_job_in_flight(l, job, waiting_note, e);
	if (!rc && e->nwaiting > 1)
		qsort(e->waiting, e->nwaiting, sizeof(*e->waiting), u64_compare);
	if (!rc)
		rc = live_job_groups(l, job, on_group, e);
	if (!rc)
		stall_judge(e);
	free(e->waiting);
	free(e);
	return rc;
}

void hang_evidence_free(struct hang_evidence *e)
{
	for (size_t i = 0; i < e->noncpu; i++)
		free(e->oncpu[i].stack);
	for (size_t i = 0; i < e->noffcpu; i++)
		free(e->offcpu[i].stack);
	e->noncpu = e->noffcpu = 0;
}

const char *hang_cause_name(enum hang_cause_class c)
{
	switch (c) {
	case HANG_CAUSE_UNKNOWN:
		break;
	case HANG_CAUSE_EXITED:
		return "exited";
	case HANG_CAUSE_AGENT_LOST:
		return "agent lost";
	case HANG_CAUSE_IN_NCCL:
		return "in NCCL";
	case HANG_CAUSE_FROZEN:
		return "frozen";
	case HANG_CAUSE_STOPPED:
		return "stopped";
	case HANG_CAUSE_SPINNING:
		return "spinning";
	case HANG_CAUSE_KERNEL_WAIT:
		return "kernel wait";
	case HANG_CAUSE_LOCK_WAIT:
		return "lock wait";
	case HANG_CAUSE_SLEEPING:
		return "sleeping";
	}
	return "unknown";
}

/* Whether any frame of folded `stack` contains one of `words`. */
static bool stack_has(const char *stack, const char *const *words)
{
	for (size_t i = 0; words[i]; i++)
		if (strstr(stack, words[i]))
			return true;
	return false;
}

/* Whether frame [f, f + len) is the scheduler's own (every blocked stack ends in it). */
static bool sched_frame(const char *f, size_t len)
{
	static const char *const names[] = { "__schedule_[k]", "schedule_[k]",
					     "schedule_preempt_disabled_[k]", NULL };

	for (size_t i = 0; names[i]; i++)
		if (strlen(names[i]) == len && !memcmp(f, names[i], len))
			return true;
	return false;
}

/* Up to `max` innermost frames of folded `stack` (outermost first), innermost first, the
 * scheduler's own skipped, joined by " < ", appended to `out` at `used`. */
static void leaf_frames(const char *stack, int max, char *out, size_t cap, size_t used)
{
	const char *end = stack + strlen(stack);

	for (int k = 0; k < max && end > stack && used + 1 < cap;) {
		const char *start = end;
		while (start > stack && start[-1] != ';')
			start--;
		if (sched_frame(start, (size_t)(end - start))) {
			end = start > stack ? start - 1 : stack;
			continue;
		}
		int n = snprintf(out + used, cap - used, "%s%.*s", k++ ? " < " : "",
				 (int)(end - start), start);
		if (n < 0)
			break;
		used += (size_t)n < cap - used ? (size_t)n : cap - used - 1;
		end = start > stack ? start - 1 : stack;
	}
}

void hang_classify(const struct hang_evidence *ev, struct hang_cause *out)
{
	/* Lock words first: a futex wait is a kernel wait too. */
	static const char *const lock_words[] = { "futex", "pthread_mutex", "pthread_cond",
						  "__lll_lock", "pthread_rwlock", "sem_wait", NULL };
	static const char *const io_words[] = {
		"io_schedule", "folio_wait", "wait_on_page", "bit_wait_io", "blk_", "submit_bio",
		"rwsem_down", "jbd2", "ext4_", "xfs_", "btrfs_", "nfs", "fuse_", "rpc_wait",
		"__lock_page", "filemap_", "wait_for_completion", "msleep", "nvidia", "mlx5",
		"ib_", "rdma", NULL };
	const struct hang_thread *spin = NULL;
	size_t used;

	memset(out, 0, sizeof(*out));
	switch (ev->rank.state) {
	case HANG_RANK_EXITED:
		out->cls = HANG_CAUSE_EXITED;
		snprintf(out->detail, sizeof(out->detail),
			 "its agent no longer lists pid %u (exit status not known to the server)",
			 ev->rank.pid);
		return;
	case HANG_RANK_AGENT_LOST:
		out->cls = HANG_CAUSE_AGENT_LOST;
		snprintf(out->detail, sizeof(out->detail), "no batch from %s", ev->rank.host);
		return;
	case HANG_RANK_IN_FLIGHT:
		out->cls = HANG_CAUSE_IN_NCCL;
		snprintf(out->detail, sizeof(out->detail),
			 "inside the collective, waiting for its peers");
		return;
	default:
		break;
	}
	for (size_t i = 0; ev->threads_present && i < ev->nthreads; i++)
		if (ev->threads[i].oncpu_ns >= HANG_SPIN_MIN_NS &&
		    (!spin || ev->threads[i].oncpu_ns > spin->oncpu_ns))
			spin = &ev->threads[i];
	if (spin) {
		out->cls = HANG_CAUSE_SPINNING;
		used = (size_t)snprintf(out->detail, sizeof(out->detail),
					"thread %u (%s) %.0f ms on CPU in the latest window",
					spin->tid, spin->comm, (double)spin->oncpu_ns / 1e6);
		if (ev->noncpu && used < sizeof(out->detail) - 8) {
			used += (size_t)snprintf(out->detail + used, sizeof(out->detail) - used,
						 "; on CPU in ");
			if (used < sizeof(out->detail))
				leaf_frames(ev->oncpu[0].stack, 3, out->detail,
					    sizeof(out->detail), used);
		}
		return;
	}
	if (ev->main_active == 0 && ev->noffcpu) {
		/* Where it is frozen: its blocks in progress are delivered as they last. */
		const char *top = ev->offcpu[0].stack;
		const char *what;
		if (strstr(top, "do_signal_stop")) {
			out->cls = HANG_CAUSE_STOPPED;
			what = "stopped by a signal (SIGSTOP/SIGTSTP; state T)";
		} else if (strstr(top, "ptrace_stop")) {
			out->cls = HANG_CAUSE_STOPPED;
			what = "stopped under ptrace (a debugger; state t)";
		} else if (stack_has(top, lock_words)) {
			out->cls = HANG_CAUSE_LOCK_WAIT;
			what = "never woke from a lock wait (a deadlock?)";
		} else if (stack_has(top, io_words)) {
			out->cls = HANG_CAUSE_KERNEL_WAIT;
			what = "never woke from a kernel wait";
		} else {
			out->cls = HANG_CAUSE_FROZEN;
			what = "blocked in a call that never returns";
		}
		used = (size_t)snprintf(out->detail, sizeof(out->detail), "%s: %.1f s in ", what,
					(double)ev->offcpu[0].weight / 1e6);
		if (used < sizeof(out->detail))
			leaf_frames(top, 4, out->detail, sizeof(out->detail), used);
		return;
	}
	if (ev->main_active == 0) {
		out->cls = HANG_CAUSE_FROZEN;
		snprintf(out->detail, sizeof(out->detail),
			 "its main thread neither ran nor woke since the wait began: stopped "
			 "(SIGSTOP, ptrace) or blocked in a call that never returns");
		return;
	}
	if (ev->noffcpu) {
		const char *top = ev->offcpu[0].stack;
		out->cls = stack_has(top, lock_words) ? HANG_CAUSE_LOCK_WAIT
			   : stack_has(top, io_words) ? HANG_CAUSE_KERNEL_WAIT
						      : HANG_CAUSE_SLEEPING;
		used = (size_t)snprintf(out->detail, sizeof(out->detail), "%.1f s blocked in ",
					(double)ev->offcpu[0].weight / 1e6);
		if (used < sizeof(out->detail))
			leaf_frames(top, 4, out->detail, sizeof(out->detail), used);
		return;
	}
	if (ev->threads_present && ev->nthreads) {
		out->cls = HANG_CAUSE_SLEEPING;
		snprintf(out->detail, sizeof(out->detail),
			 "its threads ran little and woke (no off-CPU stacks to say where)");
		return;
	}
	out->cls = HANG_CAUSE_UNKNOWN;
	snprintf(out->detail, sizeof(out->detail), "no thread rows nor stacks in the window");
}

size_t hang_rank_set_identity(struct hang_result *r, int32_t rank, uint32_t pid,
			      const char *pod_namespace, const char *pod, const char *container,
			      uint64_t slurm_job, const char *slurm_step)
{
	size_t set = 0;

	for (size_t i = 0; r && i < r->nnamed && i < HANG_MAX_NAMED; i++) {
		struct hang_rank_identity *id = &r->ranks[i].identity;

		if (r->ranks[i].rank != rank || r->ranks[i].pid != pid)
			continue;
		snprintf(id->pod_namespace, sizeof(id->pod_namespace), "%.*s",
			 (int)sizeof(id->pod_namespace) - 1, pod_namespace ? pod_namespace : "");
		snprintf(id->pod, sizeof(id->pod), "%.*s", (int)sizeof(id->pod) - 1,
			 pod ? pod : "");
		snprintf(id->container, sizeof(id->container), "%.*s",
			 (int)sizeof(id->container) - 1, container ? container : "");
		id->slurm_job = slurm_job;
		snprintf(id->slurm_step, sizeof(id->slurm_step), "%.*s",
			 (int)sizeof(id->slurm_step) - 1, slurm_job && slurm_step ? slurm_step : "");
		set++;
	}
	return set;
}
