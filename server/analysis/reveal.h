/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host anomaly detection (Reveal, seed 003) on the host signals of a job's nodes (wire 1.6
 * HOST_SIGNALS): unsupervised, per node and per batch window.
 *
 * Per signal, a robust z-score (median / MAD, scale floored per signal so that a constant
 * signal — MAD 0 — is not infinitely sensitive) against
 *   (a) the node's own history: its windows before the ones being judged, and
 *   (b) its peers: every scored node of the job in the same period (the i-th last window of
 *       each node; the median is robust to the node itself being among them).
 * A signal's deviation is the smaller of the two in magnitude (0 when they disagree in sign): a
 * node is anomalous when it departs from its own past AND from the other nodes now. A change of
 * every node at once (the fabric, the job's phase) moves the peers' median with it; a node that
 * was always different (other hardware) matches its own history. Directional signals count in
 * their harmful direction only (more retransmits, less available memory, a lower clock).
 *
 * Multivariate score: the Mahalanobis distance of the window's deviations under a diagonal
 * robust covariance, sqrt(sum z_s^2) — the signals are already robustly standardised, and a full
 * covariance needs more simultaneous samples than signals (39+ nodes) and stays unstable at the
 * sizes of most jobs; PCA reconstruction error needs the same covariance. An isolation forest is
 * not used: no Debian-packaged C library provides one. A window is over the threshold when one
 * signal deviates by REVEAL_Z_MIN or more on its own (univariate), or when the score exceeds the
 * chi-square quantile of its number of known signals at REVEAL_TAIL (Wilson-Hilferty
 * approximation) with at least one signal at REVEAL_Z_SUPPORT (several moderate deviations
 * together).
 *
 * A node is anomalous when its last `min_periods` windows are all over the threshold and both
 * references existed (history and peers). Pure functions, no I/O.
 */
#ifndef SYSOM_SERVER_ANALYSIS_REVEAL_H
#define SYSOM_SERVER_ANALYSIS_REVEAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/wire.h"

#define REVEAL_SIGNALS (SYSOM_HOST_SIGNAL_MAX + 1) /* index 0 unused */
#define REVEAL_MAX_WINDOWS 32   /* a node's latest windows kept */
#define REVEAL_MAX_NODES 100000 /* nodes of one job scored */
#define REVEAL_TOP 5            /* deviating signals reported per node */
#define REVEAL_Z_MIN 6.0        /* one signal this far is an anomaly on its own */
#define REVEAL_Z_SUPPORT 3.0    /* the multivariate score needs one signal at least this far */
#define REVEAL_TAIL 1e-6        /* the score's false-alarm probability per healthy window */

struct reveal_options {
	uint32_t min_periods;  /* consecutive windows over the threshold: default 2 */
	uint32_t min_history;  /* own windows needed before the judged ones: default 5 */
	uint32_t min_peers;    /* nodes (itself included) needed for the peer reference: default 3 */
	double z_min;          /* REVEAL_Z_MIN */
	double z_support;      /* REVEAL_Z_SUPPORT */
	double tail;           /* REVEAL_TAIL */
	int64_t stale_ms;      /* a node whose last window is this much older than the newest
				* node's is not scored (its agent stopped): default 60 s */
};

void reveal_options_default(struct reveal_options *o);

/* One node's windows, oldest first. */
struct reveal_window {
	int64_t time_ms;
	uint64_t known;        /* bit s: signal s has a value */
	double v[REVEAL_SIGNALS];
};

struct reveal_node {
	char node_id[2 * SYSOM_NODE_ID_SIZE + 1];
	char *hostname;
	struct reveal_window *w; /* the latest `nw` (at most REVEAL_MAX_WINDOWS) */
	uint32_t nw, wcap;
};

struct reveal_input {
	struct reveal_node *nodes;
	size_t nnodes, cap;
	bool truncated;          /* nodes over REVEAL_MAX_NODES were left out */
};

/* Appends a value; rows must come grouped by node and ordered by time (as the store lists
 * them). Keeps each node's latest REVEAL_MAX_WINDOWS windows. Unknown signals and values that
 * are not finite and >= 0 are ignored. 0 or -ENOMEM. */
int reveal_input_add(struct reveal_input *in, const char *node_id, const char *hostname,
		     int64_t time_ms, uint16_t signal, double value);
void reveal_input_free(struct reveal_input *in);

struct reveal_signal_score {
	uint16_t signal;
	double value;            /* in the node's latest window */
	double z;                /* its deviation (the smaller of own and peer) */
	double z_own, z_peer;    /* NAN where that reference was missing */
	double own_median, peer_median; /* NAN where missing */
};

struct reveal_node_score {
	const char *node_id, *hostname; /* borrowed from the input */
	int64_t time_ms;         /* the latest window's end */
	double score;            /* the latest window's multivariate score */
	double threshold;        /* ... and its threshold */
	uint32_t nsignals;       /* signals known in the latest window */
	uint32_t periods_over;   /* latest windows in a row over the threshold */
	bool has_history, has_peers, stale;
	bool anomalous;
	uint32_t ntop;
	struct reveal_signal_score top[REVEAL_TOP]; /* by |z|, those >= z_min first */
};

/* Scores every node of `in` into out[0..in->nnodes-1] (same order). 0 or -ENOMEM. */
int reveal_score(const struct reveal_input *in, const struct reveal_options *o,
		 struct reveal_node_score *out);

/* The score's threshold for `d` known signals at tail probability `tail`. */
double reveal_threshold(uint32_t d, double tail);

/* +1: higher is harmful, -1: lower is harmful, 0: either way. */
int reveal_signal_direction(uint16_t signal);

#endif
