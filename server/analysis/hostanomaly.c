/* SPDX-License-Identifier: Apache-2.0 */
/* A job's host anomaly scores from the store (server/analysis/hostanomaly.h). */
#include "server/analysis/hostanomaly.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int take_row(void *arg, const struct store_host_signal_row *r)
{
	return reveal_input_add(arg, r->node_id, r->hostname, r->time_ms, r->signal, r->value);
}

int hostanomaly_job(struct store *s, const char *job, int64_t to_ms, int64_t span_ms,
		    struct hostanomaly *out)
{
	struct store_host_filter f = { .job = job, .from_ms = to_ms - span_ms, .to_ms = to_ms };
	struct reveal_options o;
	bool truncated = false;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = store_host_signals_list(s, &f, HOSTANOMALY_MAX_ROWS, take_row, &out->in,
					  &truncated)))
		goto cleanup;
	out->truncated = truncated || out->in.truncated;
	if (!out->in.nnodes)
		goto cleanup;
	if (!(out->scores = calloc(out->in.nnodes, sizeof(*out->scores)))) {
		rc = -ENOMEM;
		goto cleanup;
	}
	reveal_options_default(&o);
	rc = reveal_score(&out->in, &o, out->scores);
cleanup:
	if (rc)
		hostanomaly_free(out);
	return rc;
}

void hostanomaly_free(struct hostanomaly *h)
{
	if (!h)
		return;
	reveal_input_free(&h->in);
	free(h->scores);
	memset(h, 0, sizeof(*h));
}

static json_t *real_or_null(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

json_t *hostanomaly_node_json(const struct reveal_node_score *n)
{
	json_t *o = json_object(), *devs = json_array();

	if (!o || !devs)
		goto fail;
	for (uint32_t i = 0; i < n->ntop; i++) {
		const struct reveal_signal_score *d = &n->top[i];
		json_t *j = json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o}",
				      "signal", sysom_host_signal_name(d->signal),
				      "value", real_or_null(d->value), "z", real_or_null(d->z),
				      "z_own", real_or_null(d->z_own),
				      "z_peer", real_or_null(d->z_peer),
				      "own_median", real_or_null(d->own_median),
				      "peer_median", real_or_null(d->peer_median));
		if (!j || json_array_append_new(devs, j))
			goto fail;
	}
	if (json_object_set_new(o, "deviations", devs)) /* owned by o from here, even on error */
		goto fail_owned;
	if (json_object_set_new(o, "node_id", json_string(n->node_id)) ||
	    json_object_set_new(o, "hostname", json_string(n->hostname ? n->hostname : "")) ||
	    json_object_set_new(o, "time_ms", json_integer(n->time_ms)) ||
	    json_object_set_new(o, "score", real_or_null(n->score)) ||
	    json_object_set_new(o, "threshold", real_or_null(n->threshold)) ||
	    json_object_set_new(o, "signals", json_integer(n->nsignals)) ||
	    json_object_set_new(o, "periods_over", json_integer(n->periods_over)) ||
	    json_object_set_new(o, "has_history", json_boolean(n->has_history)) ||
	    json_object_set_new(o, "has_peers", json_boolean(n->has_peers)) ||
	    json_object_set_new(o, "stale", json_boolean(n->stale)) ||
	    json_object_set_new(o, "anomalous", json_boolean(n->anomalous)))
		goto fail_owned;
	return o;
fail:
	json_decref(devs);
fail_owned:
	json_decref(o);
	return NULL;
}

void hostanomaly_describe(const struct reveal_node_score *n, char *buf, size_t len)
{
	size_t used = 0;

	if (len)
		buf[0] = '\0';
	for (uint32_t i = 0; i < n->ntop && used < len; i++) {
		const struct reveal_signal_score *d = &n->top[i];
		if (fabs(d->z) < REVEAL_Z_MIN && i > 0)
			break;
		int k = snprintf(buf + used, len - used, "%s%s %.4g (z %.1f; peers %.4g, own %.4g)",
				 used ? ", " : "", sysom_host_signal_name(d->signal), d->value,
				 d->z, d->peer_median, d->own_median);
		if (k < 0 || (size_t)k >= len - used)
			break;
		used += (size_t)k;
	}
}
