/* SPDX-License-Identifier: Apache-2.0 */
/* Alert names and severities of incidents, and a job's alert set (server/alerts/policy.h). */
#include "server/alerts/policy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

const char *alerts_policy_severity(enum incident_kind kind, enum diagnosis_layer layer,
				   bool persistent)
{
	(void)layer; /* every layer alike today */
	if (kind == INCIDENT_HANG || kind == INCIDENT_STALL)
		return "critical"; /* every GPU of the job idles */
	return kind == INCIDENT_STRAGGLER && persistent ? "critical" : "warning";
}

const char *alerts_policy_name(enum incident_kind kind)
{
	switch (kind) {
	case INCIDENT_STRAGGLER:
		return "SysomStraggler";
	case INCIDENT_HANG:
		return "SysomHang";
	case INCIDENT_AGENT_LOST:
		return "SysomAgentLost";
	case INCIDENT_STALL:
		return "SysomStall";
	case INCIDENT_HOST_ANOMALY:
		return "SysomHostAnomaly";
	case INCIDENT_PATTERN:
		return "SysomPattern";
	case INCIDENT_REGRESSION:
		break;
	}
	return "SysomRegression";
}

int alerts_incidents_publish(void *alerts, const char *job, const struct incident_summary *open,
			     size_t n, bool enabled, const char *public_url, int64_t now_ms)
{
	struct alert_spec *specs = calloc(n + 1, sizeof(*specs));
	char (*urls)[ALERTS_URL_MAX] = calloc(n + 1, sizeof(*urls));
	size_t k = 0;
	int rc;

	if (!specs || !urls) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (size_t i = 0; enabled && i < n; i++) {
		const struct incident_summary *d = &open[i];
		bool linked = false;
		if (public_url && public_url[0]) {
			int len = snprintf(urls[k], sizeof(urls[k]),
					   "%s/ui/#view=diagnosis&id=%" PRId64,
					   public_url, d->id);
			linked = len > 0 && (size_t)len < sizeof(urls[k]); /* never a cut link */
		}
		specs[k] = (struct alert_spec){
			.alertname = alerts_policy_name(d->kind),
			.job = job,
			.node = d->hostname,
			.pod_namespace = d->pod_namespace,
			.pod = d->pod,
			.container = d->container,
			.slurm_job = d->slurm_job,
			.communicator = d->communicators,
			.layer = d->layer,
			.severity = d->severity,
			.rank = d->rank,
			.summary = d->summary,
			.description = d->identity,
			.action = d->action,
			.cause = d->cause,
			.generator_url = linked ? urls[k] : NULL,
		};
		k++;
	}
	rc = alerts_evaluate(alerts, job, specs, k, now_ms);
cleanup:
	free(specs);
	free(urls);
	return rc;
}
