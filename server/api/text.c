/* SPDX-License-Identifier: Apache-2.0 */
/* Text rendering: the plain-text report of a diagnosis (GET /api/v1/diagnoses/{id}?format=text). */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "server/analysis/diagnosis_render.h"
#include "server/api/api_internal.h"
#include "server/http/render.h"

/* A folded stack, one frame per line, outermost first. */
static void render_frames(struct byte_buf *out, const char *stack)
{
	for (const char *f = stack; f && *f;) {
		const char *semi = strchr(f, ';');
		size_t flen = semi ? (size_t)(semi - f) : strlen(f);
		byte_buf_printf(out, "      %.*s\n", (int)flen, f);
		f = semi ? semi + 1 : NULL;
	}
}

/* Plain-text report of one diagnosis: what an SRE reads in a terminal or an alert link. */
void api__diagnosis_text(const struct store_diagnosis *d, struct byte_buf *out)
{
	json_t *r = json_loads(d->report, 0, NULL), *e, *dg, *layer, *v, *ls;
	char opened[48], resolved[48] = "";
	size_t i;

	render_time_rfc3339(d->opened_ms * 1000000, opened, sizeof(opened));
	if (d->resolved_ms)
		render_time_rfc3339(d->resolved_ms * 1000000, resolved, sizeof(resolved));
	byte_buf_printf(out, "diagnosis %" PRId64 " (%s, %s)\n", d->id, d->kind,
			d->resolved_ms ? "resolved" : "open");
	byte_buf_printf(out, "job:       %s\n", d->job);
	if (d->rank >= 0)
		byte_buf_printf(out, "rank:      %d on %s\n", d->rank, d->hostname);
	if (d->communicators[0])
		byte_buf_printf(out, "comms:     %s\n", d->communicators);
	byte_buf_printf(out, "layer:     %s\nseverity:  %s\nopened:    %s\n", d->layer, d->severity,
			opened);
	if (resolved[0])
		byte_buf_printf(out, "resolved:  %s\n", resolved);
	byte_buf_printf(out, "\n%s\n\naction: %s\n", d->summary, d->action);
	if (!strcmp(d->kind, "hang") || !strcmp(d->kind, "stall") ||
	    !strcmp(d->kind, "agent-lost"))
		diagnosis_hang_text(r, out);
	if ((v = json_object_get(r, "pipeline")) && json_is_object(v)) {
		json_t *row;
		byte_buf_printf(out, "\npipeline: %" JSON_INTEGER_FORMAT " transfers paired, "
				     "%" JSON_INTEGER_FORMAT " sends and %" JSON_INTEGER_FORMAT
				     " receives unmatched\n",
				json_integer_value(json_object_get(v, "transfers")),
				json_integer_value(json_object_get(v, "unmatched_sends")),
				json_integer_value(json_object_get(v, "unmatched_recvs")));
		json_array_foreach(json_object_get(v, "stages"), i, row) {
			const json_t *gpu = json_object_get(row, "gpu_busy_ms");
			const char *clock = json_string_value(json_object_get(row, "clock"));
			char gpu_text[48] = "";
			if (json_is_number(gpu))
				snprintf(gpu_text, sizeof(gpu_text), "  GPU %8.2f ms/microbatch",
					 json_number_value(gpu));
			byte_buf_printf(out, "  stage %3" JSON_INTEGER_FORMAT " (rank %" JSON_INTEGER_FORMAT
					     " on %s)  busy %8.2f ms/microbatch%s  waits %8.2f ms in receives%s\n",
					json_integer_value(json_object_get(row, "stage")),
					json_integer_value(json_object_get(row, "job_rank")),
					json_string_value(json_object_get(row, "hostname")) ?: "?",
					json_number_value(json_object_get(row, "busy_ms")), gpu_text,
					json_number_value(json_object_get(row, "recv_wait_ms")),
					!json_is_true(json_object_get(row, "slow")) ? ""
					: clock && !strcmp(clock, "gpu")            ? "  SLOW (gpu)"
										    : "  SLOW");
		}
		json_array_foreach(json_object_get(v, "links"), i, row) {
			const json_t *gpu = json_object_get(row, "gpu_transfer_ms");
			char gpu_text[40] = "";
			if (json_is_number(gpu))
				snprintf(gpu_text, sizeof(gpu_text), "  GPU %8.2f ms",
					 json_number_value(gpu));
			byte_buf_printf(out, "  link %" JSON_INTEGER_FORMAT "->%" JSON_INTEGER_FORMAT
					     "  transfer %8.2f ms%s  receiver waits %8.2f ms%s\n",
					json_integer_value(json_object_get(row, "src")),
					json_integer_value(json_object_get(row, "dst")),
					json_number_value(json_object_get(row, "transfer_ms")), gpu_text,
					json_number_value(json_object_get(row, "wait_ms")),
					json_is_true(json_object_get(row, "slow")) ? "  SLOW" : "");
		}
	}
	if (!strcmp(d->kind, "pattern") && (v = json_object_get(r, "deviation"))) {
		const char *scope = json_string_value(json_object_get(r, "scope"));
		bool peers = scope && !strcmp(scope, "peers");
		byte_buf_printf(out, "\nbehaviour pattern (%s), held %" JSON_INTEGER_FORMAT " checks:\n",
				peers ? "against the peers' median" : "against the job's own history",
				json_integer_value(json_object_get(r, "periods")));
		byte_buf_printf(out, "  %s %s, %s: ",
				json_string_value(json_object_get(v, "kind")) ?: "",
				json_string_value(json_object_get(v, "function")) ?: "",
				json_string_value(json_object_get(v, "dimension")) ?: "");
		if (peers)
			byte_buf_printf(out, "%.4g vs median %.4g (scale %.3g, z %.1f), cost %.3f\n",
					json_number_value(json_object_get(v, "value")),
					json_number_value(json_object_get(v, "median")),
					json_number_value(json_object_get(v, "scale")),
					json_number_value(json_object_get(v, "z")),
					json_number_value(json_object_get(v, "cost")));
		else
			byte_buf_printf(out, "%.4g now vs %.4g in the history, cost %.3f\n",
					json_number_value(json_object_get(v, "now")),
					json_number_value(json_object_get(v, "then")),
					json_number_value(json_object_get(v, "cost")));
	}
	e = json_object_get(r, "straggler");
	dg = json_object_get(e, "diagnosis");
	if (!dg) /* a slow pipeline stage's rank, diagnosed the same way */
		dg = json_object_get(json_object_get(r, "stage"), "diagnosis");
	if ((layer = json_object_get(dg, "gpu")) && json_is_object(layer)) {
		byte_buf_printf(out, "\nGPU layer: %s, slowdown %.2fx\n",
				json_string_value(json_object_get(layer, "verdict")) ?: "",
				json_number_value(json_object_get(layer, "slowdown")));
		json_array_foreach(json_object_get(layer, "kernels"), i, v) {
			json_t *share = json_object_get(v, "slow_share");
			byte_buf_printf(out, "  %-40s %8.1f us vs %8.1f us healthy (%.2fx), %" JSON_INTEGER_FORMAT " runs",
					json_string_value(json_object_get(v, "name")) ?: "",
					json_number_value(json_object_get(v, "mean_ns")) / 1e3,
					json_number_value(json_object_get(v, "healthy_median_ns")) / 1e3,
					json_number_value(json_object_get(v, "ratio")),
					json_integer_value(json_object_get(v, "count")));
			if (json_is_number(share))
				byte_buf_printf(out, ", %.0f%% slower than the healthy ranks' p99%s",
						100 * json_number_value(share),
						json_is_true(json_object_get(v, "intermittent"))
							? " (intermittent)" : "");
			byte_buf_printf(out, "\n");
		}
		/* The launching stacks of the kernel with the most excess, as the CPU stacks. */
		v = json_array_get(json_object_get(layer, "kernels"), 0);
		json_array_foreach(json_object_get(v, "launch_stacks"), i, ls) {
			const char *st = json_string_value(json_object_get(ls, "stack"));
			byte_buf_printf(out, "  launched from (%.1f%% of %s's GPU time there):\n",
					100 * json_number_value(json_object_get(ls, "share")),
					json_string_value(json_object_get(v, "name")) ?: "");
			render_frames(out, st);
		}
	}
	if ((layer = json_object_get(dg, "cpu")) && json_is_object(layer)) {
		byte_buf_printf(out, "\nCPU layer: against rank %" JSON_INTEGER_FORMAT " (%" JSON_INTEGER_FORMAT " vs %" JSON_INTEGER_FORMAT " samples)\n",
				json_integer_value(json_object_get(layer, "compared_with_rank")),
				json_integer_value(json_object_get(layer, "straggler_samples")),
				json_integer_value(json_object_get(layer, "healthy_samples")));
		json_array_foreach(json_object_get(layer, "functions"), i, v) {
			json_t *sc = json_object_get(v, "straggler_cpu_s");
			json_t *hc = json_object_get(v, "healthy_cpu_s");
			byte_buf_printf(out, "  %+6.1f pp  %s (%.1f%% vs %.1f%%",
					json_number_value(json_object_get(v, "delta_pp")),
					json_string_value(json_object_get(v, "function")) ?: "",
					json_number_value(json_object_get(v, "straggler_pct")),
					json_number_value(json_object_get(v, "healthy_pct")));
			/* Its CPU time too: a larger share of less time is no cause of lateness. */
			if (json_is_number(sc) && json_is_number(hc))
				byte_buf_printf(out, "; %.3f vs %.3f CPU-s", json_number_value(sc),
						json_number_value(hc));
			byte_buf_printf(out, ")\n");
		}
		json_array_foreach(json_object_get(layer, "top_stacks"), i, v) {
			const char *st = json_string_value(json_object_get(v, "stack"));
			byte_buf_printf(out, "  stack (%.1f%% vs %.1f%%):\n",
					json_number_value(json_object_get(v, "straggler_pct")),
					json_number_value(json_object_get(v, "healthy_pct")));
			render_frames(out, st);
		}
	}
	if ((layer = json_object_get(dg, "os")) && json_is_object(layer)) {
		byte_buf_printf(out, "\nOS layer: against the healthy ranks' median\n");
		json_array_foreach(json_object_get(layer, "signals"), i, v)
			byte_buf_printf(out, "  %-28s %10.2f vs %10.2f %s%s\n",
					json_string_value(json_object_get(v, "signal")) ?: "",
					json_number_value(json_object_get(v, "straggler")),
					json_number_value(json_object_get(v, "healthy_median")),
					json_string_value(json_object_get(v, "unit")) ?: "",
					json_is_true(json_object_get(v, "implicated")) ? "  <==" : "");
		json_array_foreach(json_object_get(layer, "cpu_load"), i, v) {
			const char *vec;
			json_t *x;
			byte_buf_printf(out, "  CPU %" JSON_INTEGER_FORMAT ": %.0f%% busy, %.0f hard interrupts/s (%.2f ms/s); softirqs:",
					json_integer_value(json_object_get(v, "cpu")),
					json_number_value(json_object_get(v, "busy_pct")),
					json_number_value(json_object_get(v, "hardirq_per_s")),
					json_number_value(json_object_get(v, "hardirq_ms_per_s")));
			json_object_foreach(json_object_get(v, "softirqs"), vec, x)
				if (json_number_value(json_object_get(x, "ms_per_s")) >= 0.5)
					byte_buf_printf(out, " %s %.0f/s %.1f ms/s", vec,
							json_number_value(json_object_get(x, "per_s")),
							json_number_value(json_object_get(x, "ms_per_s")));
			byte_buf_printf(out, "\n");
		}
		json_array_foreach(json_object_get(layer, "irqs"), i, v)
			byte_buf_printf(out, "  IRQ %" JSON_INTEGER_FORMAT " %s on CPU %" JSON_INTEGER_FORMAT ": %.1f/s, %.2f ms/s\n",
					json_integer_value(json_object_get(v, "irq")),
					json_string_value(json_object_get(v, "name")) ?: "",
					json_integer_value(json_object_get(v, "cpu")),
					json_number_value(json_object_get(v, "per_s")),
					json_number_value(json_object_get(v, "ms_per_s")));
		if ((v = json_object_get(layer, "host_anomaly")) && json_is_object(v))
			byte_buf_printf(out, "  node %s is anomalous (host signals, score %.1f over %.1f): %s\n",
					json_string_value(json_object_get(v, "node_id")) ?: "",
					json_number_value(json_object_get(v, "score")),
					json_number_value(json_object_get(v, "threshold")),
					json_string_value(json_object_get(v, "deviations")) ?: "");
	}
	if (json_object_get(r, "functions")) {
		byte_buf_printf(out, "\niteration %.1f ms, baseline %.1f ms\n",
				json_number_value(json_object_get(r, "iteration_ms")),
				json_number_value(json_object_get(r, "baseline_iteration_ms")));
		json_array_foreach(json_object_get(r, "functions"), i, v)
			byte_buf_printf(out, "  %+6.2f pp  %s (%.2f%% vs %.2f%% in the baseline)\n",
					json_number_value(json_object_get(v, "delta_pp")),
					json_string_value(json_object_get(v, "function")) ?: "",
					json_number_value(json_object_get(v, "current_pct")),
					json_number_value(json_object_get(v, "baseline_pct")));
	}
	json_decref(r);
}
