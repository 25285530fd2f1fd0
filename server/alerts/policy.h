/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Alert policy: which alert an incident of the analysis becomes (its name and severity, by
 * kind, layer and persistence), and a job's open incidents turned into the job's alert set
 * (alerts_evaluate).
 */
#ifndef SYSOM_SERVER_ALERTS_POLICY_H
#define SYSOM_SERVER_ALERTS_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/alerts/alerts.h"
#include "server/analysis/report.h"

/* The severity of an incident: a persistent straggler is "critical"; an intermittent one and
 * a regression are "warning" (whatever the layer). A static string. */
const char *alerts_policy_severity(enum incident_kind kind, enum diagnosis_layer layer,
				   bool persistent);

/* The alert name of an incident's kind: "SysomStraggler", "SysomRegression". */
const char *alerts_policy_name(enum incident_kind kind);

/*
 * Makes `open` (the job's open incidents; none when !enabled) the job's firing alert set, each
 * linked to its text report under `public_url` (NULL or "": no link; a link that would not
 * fit ALERTS_URL_MAX is left out). 0 or what alerts_evaluate returns.
 */
int alerts_incidents_publish(void *alerts, const char *job, const struct incident_summary *open,
			     size_t n, bool enabled, const char *public_url, int64_t now_ms);

#endif
