/* SPDX-License-Identifier: Apache-2.0 */
/* The alert module's Prometheus families (sysom_alert*), a source of server/metrics. */
#include "server/alerts/alerts.h"

#include "server/metrics/metrics.h"

void alerts_metrics_write(void *alerts, struct byte_buf *out)
{
	static const char *const kinds[ALERTS_RECEIVER_KINDS] = {
		[ALERTS_ALERTMANAGER] = "alertmanager",
		[ALERTS_WEBHOOK] = "webhook",
	};
	struct alerts_stats st;

	alerts_stats_get(alerts, &st);
	metrics_gauge_write(out, "sysom_alerts_active", "Alerts firing now.", st.active);
	metrics_total_write(out, "sysom_alerts_fired_total", "Alerts that started firing.",
			    st.fired_total);
	metrics_total_write(out, "sysom_alerts_resolved_total", "Alerts that resolved.",
			    st.resolved_total);
	metrics_total_write(out, "sysom_alerts_dropped_total",
			    "Alerts not kept because the most alerts (max_alerts) were firing.",
			    st.dropped_total);
	metrics_gauge_write(out, "sysom_alert_resolutions_pending",
			    "Resolved alerts not yet delivered to every receiver.",
			    st.resolutions_pending);
	metrics_total_write(out, "sysom_alert_resolutions_abandoned_total",
			    "Resolutions a receiver never accepted (retry bound, refused, or memory bound).",
			    st.resolutions_abandoned_total);
	metrics_total_write(out, "sysom_alerts_handed_over_total",
			    "Firing alerts left to the replica that took their job over, unresolved.",
			    st.handed_over_total);
	metrics_family_write(out, "sysom_alert_notifications_total", "counter",
			     "Notification requests to Alertmanager and webhooks, by result.");
	for (int k = 0; k < ALERTS_RECEIVER_KINDS; k++) {
		const char *ok[] = { "receiver", kinds[k], "result", "ok", NULL };
		const char *err[] = { "receiver", kinds[k], "result", "error", NULL };
		metrics_sample_write(out, "sysom_alert_notifications_total", ok,
				     (double)st.notifications_ok[k]);
		metrics_sample_write(out, "sysom_alert_notifications_total", err,
				     (double)st.notifications_error[k]);
	}
}
