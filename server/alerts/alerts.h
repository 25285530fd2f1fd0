/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Alert lifecycle and delivery. The analysis hands over, per scope (a training job), the
 * complete set of conditions firing now; this module turns successive sets into alerts that
 * fire, stay firing (re-sent periodically) and resolve, and delivers them from one background
 * thread to Prometheus Alertmanager (API v2) and to generic webhooks (Alertmanager's webhook
 * format). Every function is thread-safe.
 */
#ifndef SYSOM_SERVER_ALERTS_ALERTS_H
#define SYSOM_SERVER_ALERTS_ALERTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define ALERTS_DEFAULT_RESEND_INTERVAL_MS 60000u
#define ALERTS_DEFAULT_TIMEOUT_MS 5000u
#define ALERTS_DEFAULT_MAX_ALERTS 10000u
#define ALERTS_DEFAULT_RETRY_INITIAL_MS 1000u
#define ALERTS_DEFAULT_RETRY_MAX_MS 60000u
#define ALERTS_DEFAULT_RESOLVE_ATTEMPTS 10u
#define ALERTS_DEFAULT_RESOLVE_MAX_AGE_MS 600000u
#define ALERTS_DEFAULT_FLUSH_TIMEOUT_MS 5000u

#define ALERTS_MAX_RECEIVERS 16      /* Alertmanagers and webhooks together */
#define ALERTS_URL_MAX 2048          /* receiver URLs, generatorURL (longer: omitted) */
#define ALERTS_SCOPE_MAX 1024        /* scope (job id) bytes */
#define ALERTS_LABEL_VALUE_MAX 1024  /* label value bytes; longer values are truncated */
#define ALERTS_ANNOTATION_MAX 4096   /* annotation bytes; longer values are truncated */
#define ALERTS_BATCH_MAX 64          /* alerts per request */
#define ALERTS_TOKEN_MAX 4096

/* One condition firing now. Strings are borrowed for the call only. */
struct alert_spec {
	const char *alertname;     /* required, e.g. "SysomStraggler" */
	/* Labels; NULL or "" = label omitted. Together they are the alert's identity. */
	const char *job, *node, *communicator, *layer, *severity;
	const char *pod_namespace, *pod; /* labels "namespace", "pod": the rank's Kubernetes pod */
	const char *container;     /* label "container": its container's name in the pod */
	const char *slurm_job;     /* label "slurm_job": its Slurm job ("<job>" or "<job>.<step>") */
	int32_t rank;              /* label "rank"; < 0 = omitted */
	/* Annotations; NULL or "" = omitted. Changing them updates an ongoing alert. */
	const char *summary, *description, *action;
	const char *cause;         /* annotation "cause": a hang's or stall's cause class */
	const char *generator_url; /* link to the report (printable ASCII; otherwise omitted) */
};

enum alerts_receiver_kind { ALERTS_ALERTMANAGER, ALERTS_WEBHOOK, ALERTS_RECEIVER_KINDS };

/* A receiver started failing or delivers again (for the owner's log; told on transitions
 * only, on the sender thread, which the hook must not block nor call back into the module). */
struct alerts_event {
	enum alerts_receiver_kind kind;
	const char *receiver;      /* scheme://host:port of the URL: paths and user info of
				    * webhook URLs often hold secrets, so they are left out */
	bool up;                   /* true: delivering again after failures */
	int status;                /* HTTP status of the failure, or 0 */
	const char *message;       /* why it failed ("" when up) */
};

struct alerts_config {
	/* Base URLs, e.g. http://127.0.0.1:9093: alerts are POSTed to {base}/api/v2/alerts. */
	const char *const *alertmanager_urls;
	size_t n_alertmanagers;
	/* Webhook URLs, POSTed to as they are. */
	const char *const *webhook_urls;
	size_t n_webhooks;
	uint32_t resend_interval_ms; /* firing alerts are re-sent this often (default 60 s) */
	uint32_t timeout_ms;         /* per HTTP request (default 5 s) */
	uint32_t max_alerts;         /* firing alerts kept (default 10000); beyond: counted, dropped.
				      * Resolutions awaiting delivery are bounded by it too. */
	const char *bearer_token;    /* optional: "Authorization: Bearer" for webhooks */
	/* Tuning, 0 = default: backoff of a failing receiver (doubling from initial to max); a
	 * resolution is given up once it failed resolve_attempts times AND is resolve_max_age
	 * old; alerts_free waits for undelivered resolutions at most flush_timeout (or the timeout
	 * of the request in flight, when later). */
	uint32_t retry_initial_ms, retry_max_ms;
	uint32_t resolve_attempts, resolve_max_age_ms;
	uint32_t flush_timeout_ms;
	void (*on_event)(void *ctx, const struct alerts_event *ev); /* optional */
	void *event_ctx;
};

struct alerts_stats {
	uint64_t active;              /* gauge: firing alerts */
	uint64_t resolutions_pending; /* gauge: resolved, not yet delivered to every receiver */
	uint64_t fired_total;         /* alerts that started firing */
	uint64_t resolved_total;      /* alerts that resolved */
	uint64_t dropped_total;       /* alerts not kept: max_alerts were firing already */
	uint64_t resolutions_abandoned_total; /* (alert, receiver) resolutions never delivered */
	uint64_t handed_over_total;   /* firing alerts forgotten unresolved (alerts_scope_forget) */
	uint64_t notifications_ok[ALERTS_RECEIVER_KINDS];    /* requests answered 2xx */
	uint64_t notifications_error[ALERTS_RECEIVER_KINDS]; /* requests that failed */
};

struct alerts;

/*
 * Validates the configuration (URLs http(s), at most ALERTS_MAX_RECEIVERS, token printable),
 * copies it and starts the sender thread. No receivers is valid: the lifecycle is tracked
 * (alerts_active_json) and nothing is sent. 0, -EINVAL (configuration) or -ENOMEM/-errno.
 */
int alerts_new(const struct alerts_config *cfg, struct alerts **out);

/*
 * Delivers resolutions not yet delivered (at most flush_timeout), stops the sender thread and
 * frees everything. Firing alerts are not resolved: Alertmanager ends them by itself at their
 * endsAt. No other call may run concurrently or follow. Accepts NULL.
 */
void alerts_free(struct alerts *a);

/*
 * The complete set firing now for `scope` (a job id; at most ALERTS_SCOPE_MAX bytes). Label
 * sets new to the scope fire (startsAt = now_ms), label sets of the scope missing from the set
 * resolve (endsAt = now_ms), ongoing ones keep their startsAt and take the new annotations.
 * Identity is (scope, label set); duplicates within `firing` are one alert. `now_ms` is wall
 * clock, ms since the epoch. Never blocks on the network. 0, -EINVAL (missing alertname, bad
 * arguments), -ENAMETOOLONG (scope) or -ENOMEM (nothing changed).
 */
int alerts_evaluate(struct alerts *a, const char *scope, const struct alert_spec *firing,
		    size_t n, int64_t now_ms);

/*
 * Forgets the firing alerts of `scope` without resolving them: another server took the scope
 * over (server/cluster/cluster.h) and goes on sending the same alerts, which Alertmanager knows
 * by their labels, so a resolution from here would end an alert that still holds. Resolutions
 * of the scope not yet delivered are still delivered. Returns how many were forgotten,
 * -EINVAL or -ENAMETOOLONG.
 */
int alerts_scope_forget(struct alerts *a, const char *scope);

/* Counters and gauges for /metrics. */
void alerts_stats_get(struct alerts *a, struct alerts_stats *out);

struct byte_buf;

/* Appends the sysom_alert* families of `alerts` (a struct alerts *, borrowed) to `out`: a
 * metrics_source_fn, wired into server/metrics by the composition root. */
void alerts_metrics_write(void *alerts, struct byte_buf *out);

/*
 * The firing alerts (of `scope_or_null`, or all) as a new JSON array, oldest first per scope:
 * [{scope, fingerprint, status: "firing", labels, annotations, startsAt, generatorURL?}].
 * NULL when out of memory.
 */
json_t *alerts_active_json(struct alerts *a, const char *scope_or_null);

/*
 * Alertmanager's fingerprint of a label set (FNV-1a 64 over the sorted names and values, each
 * followed by 0xff), so webhook payloads and the API name alerts as Alertmanager does.
 * `labels` is a JSON object of strings.
 */
uint64_t alerts_fingerprint(const json_t *labels);

/*
 * Splits a space-separated list of URLs ("http://a:9093 http://b:9093") into a new array of
 * new strings; an empty or NULL list gives *n = 0. 0, -EINVAL (more than ALERTS_MAX_RECEIVERS)
 * or -ENOMEM. Free with alerts_url_list_free.
 */
int alerts_url_list_parse(const char *text, char ***urls, size_t *n);
void alerts_url_list_free(char **urls, size_t n);

#endif
