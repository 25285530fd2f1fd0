/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A job's host anomaly scores (server/analysis/reveal.h) from the stored host signals of its
 * nodes, as JSON for the API (GET /api/v1/jobs/{job}/hosts) and the monitor's incidents of kind
 * "host-anomaly".
 */
#ifndef SYSOM_SERVER_ANALYSIS_HOSTANOMALY_H
#define SYSOM_SERVER_ANALYSIS_HOSTANOMALY_H

#include <jansson.h>
#include <stdint.h>

#include "server/analysis/reveal.h"
#include "server/store/store.h"

#define HOSTANOMALY_SPAN_MS (10 * 60 * 1000) /* history read: the last 10 minutes */
#define HOSTANOMALY_MAX_ROWS (1u << 22)       /* stored rows read at most */

struct hostanomaly {
	struct reveal_input in;
	struct reveal_node_score *scores; /* in.nnodes */
	bool truncated;                   /* rows or nodes were left out */
};

/* Scores the job's nodes over [to_ms - span_ms, to_ms]. 0 (no nodes: in.nnodes == 0),
 * -ENOTSUP (the store keeps no host signals), or an error. */
int hostanomaly_job(struct store *s, const char *job, int64_t to_ms, int64_t span_ms,
		    struct hostanomaly *out);
void hostanomaly_free(struct hostanomaly *h);

/* {"node_id", "hostname", "time_ms", "score", "threshold", "signals", "periods_over",
 *  "has_history", "has_peers", "stale", "anomalous", "deviations": [{"signal", "value", "z",
 *  "z_own", "z_peer", "own_median", "peer_median"}]}; NULL on ENOMEM. */
json_t *hostanomaly_node_json(const struct reveal_node_score *n);

/* "tcp_retrans_segs 500/s (z 99.8; peers 1, own 1), softirq_net_rx ..." into buf. */
void hostanomaly_describe(const struct reveal_node_score *n, char *buf, size_t len);

#endif
