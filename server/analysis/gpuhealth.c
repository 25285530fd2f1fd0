/* SPDX-License-Identifier: Apache-2.0 */
/* The GPU layer's hardware evidence from NVML windows: see gpuhealth.h. */
#include "server/analysis/gpuhealth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U SYSOM_GPU_UNKNOWN

void gpuhealth_acc_init(struct gpuhealth_acc *a)
{
	memset(a, 0, sizeof(*a));
}

static uint32_t min_known(uint32_t a, uint32_t b)
{
	return a == U ? b : b == U ? a : a < b ? a : b;
}

static uint32_t max_known(uint32_t a, uint32_t b)
{
	return a == U ? b : b == U ? a : a > b ? a : b;
}

void gpuhealth_add(struct gpuhealth_acc *a, const struct store_gpu_health *g)
{
	const struct sysom_gpu_health *h = &g->h;
	struct diagnosis_gpu_hw *d;
	uint64_t reasons;

	if (h->device >= SYSOM_GPU_MAX_DEVICES)
		return;
	d = &a->dev[h->device];
	if (!(a->seen & (1ull << h->device))) {
		memset(d, 0, sizeof(*d));
		d->device = h->device;
		d->sm_clock_min = d->sm_clock_max = d->temp_max = d->temp_slowdown = U;
		d->power_max_mw = d->power_limit_mw = U;
		d->ecc_uncorrected = SYSOM_GPU_UNKNOWN64;
		a->seen |= 1ull << h->device;
	}
	snprintf(d->uuid, sizeof(d->uuid), "%s", g->uuid ? g->uuid : "");
	snprintf(d->pci_bus_id, sizeof(d->pci_bus_id), "%s", g->pci_bus_id ? g->pci_bus_id : "");
	snprintf(d->name, sizeof(d->name), "%s", g->name ? g->name : "");
	d->windows++;
	d->samples += h->samples;
	d->slowdown_samples += h->slowdown_samples;
	reasons = h->reasons_any == SYSOM_GPU_UNKNOWN64 ? 0 : h->reasons_any;
	d->reasons_seen |= reasons;
	d->sm_clock_min = min_known(d->sm_clock_min, h->sm_clock_min);
	d->sm_clock_max = max_known(d->sm_clock_max, h->sm_clock_max);
	d->temp_max = max_known(d->temp_max, h->temp_max);
	d->temp_slowdown = min_known(d->temp_slowdown, h->temp_slowdown);
	d->power_max_mw = max_known(d->power_max_mw, h->power_max_mw);
	d->power_limit_mw = min_known(d->power_limit_mw, h->power_limit_mw);
	if (h->ecc_uncorrected != SYSOM_GPU_UNKNOWN64 &&
	    (d->ecc_uncorrected == SYSOM_GPU_UNKNOWN64 || h->ecc_uncorrected > d->ecc_uncorrected))
		d->ecc_uncorrected = h->ecc_uncorrected;
	if (h->retired_dbe != U && h->retired_dbe > d->retired_dbe)
		d->retired_dbe = h->retired_dbe;
	d->xid_count += h->xid_count;
	if (h->xid_last)
		d->xid_last = h->xid_last;
}

/* Appends "; text" (or "text" first) to d->cause. */
static void cause_add(char *cause, size_t len, const char *text)
{
	size_t used = strlen(cause);

	if (used < len)
		snprintf(cause + used, len - used, "%s%s", used ? "; " : "", text);
}

/* Fills reasons/cause/confirmed from the folded values; returns an evidence score. */
static int judge(struct diagnosis_gpu_hw *d)
{
	uint64_t reasons = d->reasons_seen, slow;
	char buf[160];
	int score = 0;

	d->cause[0] = '\0';
	slow = reasons & SYSOM_GPU_REASONS_SLOWDOWN;
	sysom_gpu_reasons_format(slow, d->reasons, sizeof(d->reasons));
	if (slow && d->slowdown_samples) {
		const char *what = (slow & (SYSOM_GPU_REASON_HW_THERMAL | SYSOM_GPU_REASON_SW_THERMAL))
					   ? "thermal throttling"
				   : (slow & SYSOM_GPU_REASON_HW_POWER_BRAKE) ? "power brake slowdown"
				   : (slow & SYSOM_GPU_REASON_HW_SLOWDOWN)    ? "hardware slowdown"
				   : (slow & SYSOM_GPU_REASON_SW_POWER_CAP)   ? "power capping"
									      : "sync boost";
		snprintf(buf, sizeof(buf), "%s (%s, in %u of %u samples)", what, d->reasons,
			 d->slowdown_samples, d->samples);
		cause_add(d->cause, sizeof(d->cause), buf);
		score += 4 + (int)(d->slowdown_samples > 0);
	}
	if (d->temp_max != U && d->temp_slowdown != U && d->temp_max >= d->temp_slowdown) {
		snprintf(buf, sizeof(buf), "temperature %u C at its slowdown threshold (%u C)",
			 d->temp_max, d->temp_slowdown);
		cause_add(d->cause, sizeof(d->cause), buf);
		score += 3;
	}
	if (d->sm_clock_min != U && d->sm_clock_max != U && d->sm_clock_max &&
	    d->sm_clock_min < GPUHEALTH_LOW_CLOCK * d->sm_clock_max &&
	    (reasons & ~SYSOM_GPU_REASON_IDLE)) {
		snprintf(buf, sizeof(buf), "SM clock down to %u of %u MHz", d->sm_clock_min,
			 d->sm_clock_max);
		cause_add(d->cause, sizeof(d->cause), buf);
		score += 2;
	}
	if (d->ecc_uncorrected != SYSOM_GPU_UNKNOWN64 && d->ecc_uncorrected) {
		snprintf(buf, sizeof(buf), "%llu uncorrected ECC errors",
			 (unsigned long long)d->ecc_uncorrected);
		cause_add(d->cause, sizeof(d->cause), buf);
		score += 3;
	}
	if (d->retired_dbe && d->retired_dbe != U) {
		snprintf(buf, sizeof(buf), "%u pages retired or rows remapped for uncorrectable errors",
			 d->retired_dbe);
		cause_add(d->cause, sizeof(d->cause), buf);
		score += 1;
	}
	if (d->xid_count) {
		snprintf(buf, sizeof(buf), "%u Xid events (last Xid %u)", d->xid_count, d->xid_last);
		cause_add(d->cause, sizeof(d->cause), buf);
		score += 3;
	}
	d->present = true;
	d->confirmed = score > 0;
	return score;
}

const char *gpuhealth_picked_name(enum diagnosis_gpu_picked p)
{
	switch (p) {
	case DIAGNOSIS_GPU_PICKED_RANK_DEVICE:
		return "nvml index from the rank";
	case DIAGNOSIS_GPU_PICKED_LOCAL_RANK:
		return "local rank";
	case DIAGNOSIS_GPU_PICKED_WORST:
		return "worst device";
	case DIAGNOSIS_GPU_PICKED_NONE:
		break;
	}
	return "";
}

static bool has_device(const struct gpuhealth_acc *a, int32_t i)
{
	return i >= 0 && i < SYSOM_GPU_MAX_DEVICES && (a->seen & (1ull << i));
}

void gpuhealth_pick(struct gpuhealth_acc *a, int32_t gpu_device, int32_t local_rank,
		    struct diagnosis_gpu_hw *out)
{
	int best = -1, best_score = -1;

	memset(out, 0, sizeof(*out));
	for (int i = 0; i < SYSOM_GPU_MAX_DEVICES; i++) {
		int score;
		if (!(a->seen & (1ull << i)))
			continue;
		score = judge(&a->dev[i]);
		if (score > best_score) {
			best_score = score;
			best = i;
		}
	}
	if (best < 0)
		return;
	if (has_device(a, gpu_device)) {
		*out = a->dev[gpu_device];
		out->by_local_rank = true; /* the rank's own GPU (the field's old meaning) */
		out->picked_by = DIAGNOSIS_GPU_PICKED_RANK_DEVICE;
		return;
	}
	/* A device the agent found without windows: its local rank's would be a guess. */
	if (gpu_device < 0 && has_device(a, local_rank)) {
		*out = a->dev[local_rank];
		out->by_local_rank = true;
		out->picked_by = DIAGNOSIS_GPU_PICKED_LOCAL_RANK;
		return;
	}
	*out = a->dev[best];
	out->picked_by = DIAGNOSIS_GPU_PICKED_WORST;
}

struct rank_find {
	int32_t rank, local_rank, gpu_device;
	bool own; /* found the rank's own process (not a worker) */
	char node_id[2 * SYSOM_NODE_ID_SIZE + 1];
};

static int rank_row(void *arg, const struct store_job_rank *r)
{
	struct rank_find *f = arg;
	bool own = r->role == SYSOM_JOB_ROLE_RANK;

	/* The rank's own process first: a DataLoader worker carries its numbers, not its GPU. */
	if (r->rank == f->rank && (own || !f->node_id[0]) && !(f->own && !own)) {
		f->local_rank = r->local_rank;
		f->gpu_device = r->gpu_device;
		f->own = own;
		snprintf(f->node_id, sizeof(f->node_id), "%s", r->node_id);
	}
	return 0;
}

static int window_row(void *arg, const struct store_gpu_health *g)
{
	gpuhealth_add(arg, g);
	return 0;
}

#define GPUHEALTH_MAX_RANKS 65536
#define GPUHEALTH_MAX_WINDOWS 100000

int gpuhealth_lookup(struct store *s, const char *job, int32_t rank, const char *hostname,
		     int64_t from_ms, int64_t to_ms, struct diagnosis_gpu_hw *out)
{
	struct rank_find f = { .rank = rank, .local_rank = -1, .gpu_device = -1 };
	struct gpuhealth_acc *a;
	const char *node;
	int rc;

	memset(out, 0, sizeof(*out));
	if (job && (rc = store_job_ranks_list(s, job, GPUHEALTH_MAX_RANKS, rank_row, &f)) &&
	    rc != -ENOTSUP)
		return rc == -ENOMEM ? rc : 0;
	node = f.node_id[0] ? f.node_id : hostname;
	if (!node || !*node)
		return 0;
	if (!(a = malloc(sizeof(*a))))
		return -ENOMEM;
	gpuhealth_acc_init(a);
	rc = store_gpu_health_list(s, node, from_ms, to_ms, GPUHEALTH_MAX_WINDOWS, window_row, a);
	if (rc == 0)
		gpuhealth_pick(a, f.gpu_device, f.local_rank, out);
	free(a);
	return rc == -ENOMEM ? rc : 0;
}
