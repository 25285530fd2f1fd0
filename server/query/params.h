/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Query parameters shared by every query route: times and time ranges, the node/pid/comm/job
 * sample filter, integers and numbers within bounds, communicator keys. A parser that refuses
 * a parameter answers 400 with a message naming it and returns false.
 */
#ifndef SYSOM_SERVER_QUERY_PARAMS_H
#define SYSOM_SERVER_QUERY_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/http/http.h"
#include "server/store/store.h"

#define QUERY_PARAM_MAX 256 /* bytes of one decoded parameter value, NUL included */

/*
 * Parses a time parameter: Unix seconds ("1700000000", "1700000000.25"), RFC 3339
 * ("2026-11-22T10:00:00Z", "2026-11-22T12:00:00.5+02:00"), "now", or a time relative to now
 * ("-30s", "-5m", "-1h", "-2d", "-500ms"). Writes ms since the Unix epoch to *out_ms.
 * Returns 0 or -EINVAL.
 */
int query_time_parse(const char *text, int64_t now_ms, int64_t *out_ms);

/*
 * Copies optional parameter `name` into `out` (outlen bytes) and sets *present. Returns true,
 * or false with 400 answered when it is too long or not correctly percent-encoded.
 */
bool query_param(const struct http_request *req, const char *name, char *out, size_t outlen,
		 bool *present, struct http_response *resp);

/* An optional decimal integer in [min, max] into *out (untouched when absent); as above. */
bool query_param_uint(const struct http_request *req, const char *name, uint32_t min,
		      uint32_t max, uint32_t *out, bool *present, struct http_response *resp);

/* An optional finite number in [min, max] into *out (untouched when absent); as above. */
bool query_param_double(const struct http_request *req, const char *name, double min, double max,
			double *out, struct http_response *resp);

/* Optional `comm` as a communicator key (1 to 16 hex digits, optional 0x); as above. */
bool query_param_comm_key(const struct http_request *req, bool *present, uint64_t *key,
			  struct http_response *resp);

/* A sample filter with the storage of its strings. */
struct query_filter {
	struct store_sample_filter f;
	char node[QUERY_PARAM_MAX];
	char comm[QUERY_PARAM_MAX];
	char job[QUERY_PARAM_MAX];
	char pod_namespace[QUERY_PARAM_MAX];
	char pod[QUERY_PARAM_MAX];
	char container[QUERY_PARAM_MAX];
	char unit[QUERY_PARAM_MAX];
};

/*
 * Parses node, pid, comm, job, the identity filters (namespace, pod, container, unit,
 * slurm_job), from and to into `q` (`to` defaults to `now_ms`, `from` to an
 * hour earlier; q->f points into q). Returns true, or false with 400 answered.
 */
bool query_filter_parse(const struct http_request *req, int64_t now_ms, struct query_filter *q,
			struct http_response *resp);

/* Only the identity filters (namespace, pod, container, unit, slurm_job) into q (which the
 * caller zeroed). True, or false with 400 answered. */
bool query_identity_parse(const struct http_request *req, struct query_filter *q,
			  struct http_response *resp);

#endif
