/* SPDX-License-Identifier: Apache-2.0 */
/* Query parameters: time parsing, the sample filter, bounded numbers, communicator keys. */
#include "server/query/params.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/options.h"
#include "server/query/limits.h"

/* Reads exactly `n` digits. */
static bool digits(const char **p, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)(*p)[i]))
			return false;
		v = v * 10 + ((*p)[i] - '0');
	}
	*p += n;
	*out = v;
	return true;
}

/* Reads a fraction ".ddd" (any number of digits) as milliseconds, truncating. */
static bool fraction_ms(const char **p, int64_t *ms)
{
	int64_t v = 0;
	int n = 0;

	*ms = 0;
	if (**p != '.')
		return true;
	(*p)++;
	while (isdigit((unsigned char)**p)) {
		if (n < 3)
			v = v * 10 + (**p - '0');
		n++;
		(*p)++;
	}
	if (n == 0)
		return false;
	for (int i = n; i < 3; i++)
		v *= 10;
	*ms = v;
	return true;
}

static int days_in_month(int year, int month)
{
	static const int days[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;

	return month == 2 && leap ? 29 : days[month - 1];
}

static int parse_rfc3339(const char *p, int64_t *out_ms)
{
	struct tm tm = { 0 };
	int year, mon, day, hour, min, sec, oh = 0, om = 0, sign = 0;
	int64_t ms;

	if (!digits(&p, 4, &year) || *p++ != '-' || !digits(&p, 2, &mon) || *p++ != '-' ||
	    !digits(&p, 2, &day) || (*p != 'T' && *p != 't' && *p != ' '))
		return -EINVAL;
	p++;
	if (!digits(&p, 2, &hour) || *p++ != ':' || !digits(&p, 2, &min) || *p++ != ':' ||
	    !digits(&p, 2, &sec) || !fraction_ms(&p, &ms))
		return -EINVAL;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		sign = *p++ == '+' ? 1 : -1;
		if (!digits(&p, 2, &oh) || *p++ != ':' || !digits(&p, 2, &om) || oh > 23 || om > 59)
			return -EINVAL;
	} else {
		return -EINVAL;
	}
	if (*p || year < 1970 || mon < 1 || mon > 12 || day < 1 || day > days_in_month(year, mon) ||
	    hour > 23 || min > 59 || sec > 60)
		return -EINVAL;
	tm.tm_year = year - 1900;
	tm.tm_mon = mon - 1;
	tm.tm_mday = day;
	tm.tm_hour = hour;
	tm.tm_min = min;
	tm.tm_sec = sec;
	int64_t t = (int64_t)timegm(&tm) - (int64_t)sign * (oh * 3600 + om * 60);
	*out_ms = t * 1000 + ms;
	return 0;
}

int query_time_parse(const char *text, int64_t now_ms, int64_t *out_ms)
{
	const char *p = text;

	if (!text || !*text)
		return -EINVAL;
	if (strcmp(text, "now") == 0) {
		*out_ms = now_ms;
		return 0;
	}
	if (text[0] == '-') {
		double seconds;
		/* Relative to now; a bare number counts seconds like the other durations. */
		if (!isdigit((unsigned char)text[1]) || sysom_parse_duration(text + 1, &seconds) ||
		    seconds > 100.0 * 365 * 86400)
			return -EINVAL;
		*out_ms = now_ms - (int64_t)(seconds * 1000);
		return 0;
	}
	if (strlen(text) >= 10 && text[4] == '-')
		return parse_rfc3339(text, out_ms);
	/* Unix seconds, optionally fractional. */
	int64_t sec = 0, ms;
	int n = 0;
	while (isdigit((unsigned char)*p)) {
		if (++n > 12)
			return -EINVAL;
		sec = sec * 10 + (*p++ - '0');
	}
	if (n == 0 || !fraction_ms(&p, &ms) || *p)
		return -EINVAL;
	*out_ms = sec * 1000 + ms;
	return 0;
}

/* Reads an optional parameter into `out`; false (and a 400 answered) when malformed. */
bool query_param(const struct http_request *req, const char *name, char *out, size_t outlen,
		 bool *present, struct http_response *resp)
{
	int rc = http_query_param(req, name, out, outlen);

	*present = rc >= 0;
	if (rc >= 0 || rc == -ENOENT)
		return true;
	http_response_error(resp, 400, "parameter '%s' is %s", name,
			    rc == -E2BIG ? "too long" : "not correctly percent-encoded");
	return false;
}

bool query_param_uint(const struct http_request *req, const char *name, uint32_t min,
		      uint32_t max, uint32_t *out, bool *present, struct http_response *resp)
{
	char text[QUERY_PARAM_MAX];
	char *end;

	if (!query_param(req, name, text, sizeof(text), present, resp))
		return false;
	if (!*present)
		return true;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	if (!isdigit((unsigned char)text[0]) || *end || errno || v < min || v > max) {
		http_response_error(resp, 400, "parameter '%s' must be an integer in [%u, %u]", name,
				    min, max);
		return false;
	}
	*out = (uint32_t)v;
	return true;
}

/* Parses node, pid, comm, from and to; answers 400 and returns false when malformed. */
bool query_identity_parse(const struct http_request *req, struct query_filter *q,
			  struct http_response *resp)
{
	char slurm[QUERY_PARAM_MAX];
	bool has_ns, has_pod, has_container, has_unit, has_slurm;

	if (!query_param(req, "namespace", q->pod_namespace, sizeof(q->pod_namespace), &has_ns,
			 resp) ||
	    !query_param(req, "pod", q->pod, sizeof(q->pod), &has_pod, resp) ||
	    !query_param(req, "container", q->container, sizeof(q->container), &has_container,
			 resp) ||
	    !query_param(req, "unit", q->unit, sizeof(q->unit), &has_unit, resp) ||
	    !query_param(req, "slurm_job", slurm, sizeof(slurm), &has_slurm, resp))
		return false;
	if (has_slurm) {
		char *end;

		errno = 0;
		q->f.slurm_job = strtoull(slurm, &end, 10);
		if (!slurm[0] || *end || errno || slurm[0] == '-' || q->f.slurm_job == 0 ||
		    q->f.slurm_job > INT64_MAX) {
			http_response_error(resp, 400, "parameter 'slurm_job' must be a Slurm job id"
					    " (a positive integer)");
			return false;
		}
		q->f.has_slurm_job = true;
	}
	q->f.pod_namespace = has_ns && *q->pod_namespace ? q->pod_namespace : NULL;
	q->f.pod = has_pod && *q->pod ? q->pod : NULL;
	q->f.container = has_container && *q->container ? q->container : NULL;
	q->f.unit = has_unit && *q->unit ? q->unit : NULL;
	return true;
}

bool query_filter_parse(const struct http_request *req, int64_t now_ms, struct query_filter *q,
			struct http_response *resp)
{
	char from[QUERY_PARAM_MAX], to[QUERY_PARAM_MAX];
	bool has_node, has_comm, has_job, has_from, has_to;
	int64_t now = now_ms;

	memset(q, 0, sizeof(*q));
	if (!query_param(req, "node", q->node, sizeof(q->node), &has_node, resp) ||
	    !query_param(req, "comm", q->comm, sizeof(q->comm), &has_comm, resp) ||
	    !query_param(req, "job", q->job, sizeof(q->job), &has_job, resp) ||
	    !query_param(req, "from", from, sizeof(from), &has_from, resp) ||
	    !query_param(req, "to", to, sizeof(to), &has_to, resp) ||
	    !query_param_uint(req, "pid", 0, UINT32_MAX, &q->f.pid, &q->f.has_pid, resp) ||
	    !query_identity_parse(req, q, resp))
		return false;
	q->f.node = has_node && *q->node ? q->node : NULL;
	q->f.comm = has_comm && *q->comm ? q->comm : NULL;
	q->f.job = has_job && *q->job ? q->job : NULL;
	q->f.to_ms = now;
	if (has_to && query_time_parse(to, now, &q->f.to_ms)) {
		http_response_error(resp, 400,
				    "invalid time '%s' for 'to' (use Unix seconds, RFC 3339, now,"
				    " or -30s/-5m/-1h)", to);
		return false;
	}
	q->f.from_ms = q->f.to_ms - QUERY_DEFAULT_RANGE_MS;
	if (has_from && query_time_parse(from, now, &q->f.from_ms)) {
		http_response_error(resp, 400,
				    "invalid time '%s' for 'from' (use Unix seconds, RFC 3339, now,"
				    " or -30s/-5m/-1h)", from);
		return false;
	}
	if (q->f.from_ms > q->f.to_ms) {
		http_response_error(resp, 400, "'from' is after 'to'");
		return false;
	}
	return true;
}

bool query_param_double(const struct http_request *req, const char *name, double min, double max,
			 double *out, struct http_response *resp)
{
	char text[QUERY_PARAM_MAX], *end;
	bool present;

	if (!query_param(req, name, text, sizeof(text), &present, resp))
		return false;
	if (!present)
		return true;
	errno = 0;
	double v = strtod(text, &end);
	if (!text[0] || *end || errno || !isfinite(v) || v < min || v > max) {
		http_response_error(resp, 400, "parameter '%s' must be a number in [%g, %g]", name,
				    min, max);
		return false;
	}
	*out = v;
	return true;
}


/* Parses `comm` as a communicator key (1 to 16 hex digits, optional 0x); 400 when malformed. */
bool query_param_comm_key(const struct http_request *req, bool *present, uint64_t *key,
			   struct http_response *resp)
{
	char comm[QUERY_PARAM_MAX];
	const char *hex;
	size_t n;

	if (!query_param(req, "comm", comm, sizeof(comm), present, resp))
		return false;
	if (!*present)
		return true;
	hex = strncasecmp(comm, "0x", 2) == 0 ? comm + 2 : comm;
	n = strlen(hex);
	if (n == 0 || n > 16 || strspn(hex, "0123456789abcdefABCDEF") != n) {
		http_response_error(resp, 400,
				    "parameter 'comm' must be a communicator key of 1 to 16 hex digits");
		return false;
	}
	*key = strtoull(hex, NULL, 16);
	return true;
}
