/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The monitor (server/analysis/monitor.c): a straggler found in stored data becomes one incident (not
 * one per evaluation) and one firing alert, resolves when it no longer holds, per-job settings
 * change the verdict; the diagnoses and settings API over it.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "server/alerts/policy.h"
#include "server/analysis/monitor.h"
#include "tests/unit/server/harness.h"
#include "tests/unit/server/job_fixture.h"

#define JOB "job-42"

struct ctx {
	struct harness *h;
	struct alerts *alerts;
	struct monitor *m;
};

static int setup(void **state)
{
	struct ctx *c = calloc(1, sizeof(*c));
	struct alerts_config ac = { .resend_interval_ms = 60000 };
	struct monitor_options mo = { .interval_ms = 3600 * 1000, .now_ms = harness_now_ms,
				      .public_url = "http://sysom.example:8080/" };
	struct diagnosis_ctx dc;

	assert_non_null(c);
	assert_non_null(c->h = harness_new(HARNESS_TOKEN, NULL));
	assert_int_equal(alerts_new(&ac, &c->alerts), 0);
	api_diagnosis_ctx(c->h->api, &dc);
	mo.alerting = (struct monitor_alerting){ .severity = alerts_policy_severity,
						 .publish = alerts_incidents_publish,
						 .arg = c->alerts };
	assert_int_equal(monitor_new(&dc, &mo, &c->m), 0);
	/* The fixture's data lie an hour before the harness's "now". */
	assert_int_equal(store_job_settings_put(c->h->store, JOB, "{\"lookback_s\":7200}", 1), 0);
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct ctx *c = *state;

	monitor_free(c->m);
	alerts_free(c->alerts);
	harness_free(c->h);
	free(c);
	return 0;
}

/* Rank 5 enters every all-reduce 30 ms after the others (both nodes' halves of the job);
 * `feed` (optional) is told of each stored batch, as ingest tells the server's monitor. */
static void post_late_job_to(struct harness *h, struct monitor *feed)
{
	for (uint8_t node = 1; node <= 2; node++) {
		struct job_spec js = { .base = { .node = node, .epoch = 1, .sequence = 2,
						 .window_start_ns = HARNESS_T0 },
				       .job = JOB, .first_rank = 4 * (node - 1), .local_ranks = 4,
				       .instances = 12, .skip_rank = -1, .late_rank = 5,
				       .late_ms = 30 };
		struct sysom_batch b;
		char *body = NULL;

		assert_int_equal(job_batch_build(&b, &js), 0);
		assert_int_equal(harness_post_batch(h, &b, &body), 200);
		if (feed)
			monitor_batch_stored(feed, &b);
		free(body);
		sysom_batch_free(&b);
	}
}

static void post_late_job(struct harness *h)
{
	post_late_job_to(h, NULL);
}

struct seen {
	int n, open;
	int64_t id;
	char identity[64], layer[16], severity[16];
	int32_t rank;
};

static int collect(void *arg, const struct store_diagnosis *d)
{
	struct seen *s = arg;

	s->n++;
	s->open += d->resolved_ms == 0;
	s->id = d->id;
	s->rank = d->rank;
	snprintf(s->identity, sizeof(s->identity), "%s", d->identity);
	snprintf(s->layer, sizeof(s->layer), "%s", d->layer);
	snprintf(s->severity, sizeof(s->severity), "%s", d->severity);
	return 0;
}

static struct seen incidents(struct harness *h)
{
	struct store_diagnosis_filter f = { .job = JOB, .from_ms = 0, .to_ms = INT64_MAX };
	struct seen s = { 0 };

	assert_int_equal(store_diagnoses_list(h->store, &f, 100, collect, &s), 0);
	return s;
}

static json_t *firing(struct ctx *c)
{
	json_t *a = alerts_active_json(c->alerts, JOB);

	assert_non_null(a);
	return a;
}

static void test_incident_lifecycle(void **state)
{
	struct ctx *c = *state;
	struct monitor_stats st;
	struct seen s;
	json_t *a, *labels;

	post_late_job(c->h);
	assert_int_equal(monitor_evaluate(c->m, JOB), 0);
	s = incidents(c->h);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.open, 1);
	assert_string_equal(s.identity, "straggler rank=5");
	assert_int_equal(s.rank, 5);
	assert_string_equal(s.severity, "critical"); /* persistent */
	/* No GPU, CPU or OS data in the fixture: the layer cannot be named. */
	assert_string_equal(s.layer, "unknown");
	a = firing(c);
	assert_int_equal(json_array_size(a), 1);
	labels = json_object_get(json_array_get(a, 0), "labels");
	assert_string_equal(json_string_value(json_object_get(labels, "alertname")), "SysomStraggler");
	assert_string_equal(json_string_value(json_object_get(labels, "rank")), "5");
	assert_string_equal(json_string_value(json_object_get(labels, "job")), JOB);
	assert_string_equal(json_string_value(json_object_get(labels, "communicator")),
			    "0000000000000abc");
	char url[128];
	snprintf(url, sizeof(url), "http://sysom.example:8080/ui/#view=diagnosis&id=%lld",
		 (long long)s.id);
	assert_string_equal(json_string_value(json_object_get(json_array_get(a, 0), "generatorURL")),
			    url);
	json_decref(a);

	/* Its metrics: per-job series only in the detail families (read credentials). */
	{
		struct byte_buf agg = { 0 }, detail = { 0 };
		monitor_metrics_write(c->m, &agg);
		monitor_job_metrics_write(c->m, &detail);
		byte_buf_append(&agg, "", 1);
		byte_buf_append(&detail, "", 1);
		assert_null(strstr((const char *)agg.data, JOB));
		assert_non_null(strstr((const char *)agg.data, "sysom_diagnoses_open 1\n"));
		assert_non_null(strstr((const char *)detail.data,
				       "sysom_job_stragglers{job=\"" JOB "\"} 1\n"));
		assert_non_null(strstr((const char *)detail.data,
				       "sysom_job_open_diagnoses{job=\"" JOB "\"} 1\n"));
		byte_buf_free(&agg);
		byte_buf_free(&detail);
	}

	/* Evaluating again updates the same incident: no second one, no second alert. */
	int64_t first = s.id;
	assert_int_equal(monitor_evaluate(c->m, JOB), 0);
	s = incidents(c->h);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.id, first);
	a = firing(c);
	assert_int_equal(json_array_size(a), 1);
	json_decref(a);

	/* Per-job thresholds: a floor above rank 5's 32 ms excess clears it; it resolves at once
	 * with resolve_after 0, and so does its alert. */
	assert_int_equal(store_job_settings_put(c->h->store, JOB,
						"{\"lookback_s\":7200,\"min_excess_ms\":40,"
						"\"resolve_after_s\":0}", 2), 0);
	assert_int_equal(monitor_evaluate(c->m, JOB), 0);
	s = incidents(c->h);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.open, 0);
	a = firing(c);
	assert_int_equal(json_array_size(a), 0);
	json_decref(a);
	monitor_stats_get(c->m, &st);
	assert_int_equal(st.incidents_opened, 1);
	assert_int_equal(st.incidents_resolved, 1);
	assert_int_equal(st.open_incidents, 0);
	assert_int_equal(st.evaluations, 3);
	assert_int_equal(st.evaluation_errors, 0);
}

/* An incident that stops holding stays open for resolve_after (no flapping alerts). */
static int report_take(void *arg, const struct store_diagnosis *d)
{
	char **out = arg;

	free(*out);
	*out = d->report ? strdup(d->report) : NULL;
	return 0;
}

/* Behaviour patterns fed into incidents: JOB_KERNEL twice as long on rank 3 (30 s runs, so
 * that it is a real share of the hour-long pattern window: the monitor's check reads no NCCL
 * calls, so β is a kernel's share of the window), nobody late: no straggler, a pattern incident
 * naming (rank 3, JOB_KERNEL) with its alert; it stays open between pattern checks and
 * resolves once patterns are off. */
static void test_pattern_incident(void **state)
{
	struct ctx *c = *state;
	struct store_diagnosis_filter f = { .job = JOB, .from_ms = 0, .to_ms = INT64_MAX };
	struct monitor_stats st;
	struct seen s;
	json_t *a, *labels;

	/* The data lie an hour before "now": the longest pattern window reaches them. */
	assert_int_equal(store_job_settings_put(c->h->store, JOB,
						"{\"lookback_s\":7200,\"pattern_window_s\":3600,"
						"\"pattern_hold\":1}", 2), 0);
	for (uint8_t node = 1; node <= 2; node++) {
		struct job_spec js = { .base = { .node = node, .epoch = 1, .sequence = 2,
						 .window_start_ns = HARNESS_T0 },
				       .job = JOB, .first_rank = 4 * (node - 1), .local_ranks = 4,
				       .instances = 12, .skip_rank = -1, .late_rank = -1,
				       .gpu_timing = true, .slow_rank = 3,
				       .kernel_ns = 30000000000ULL };
		struct sysom_batch b;
		char *body = NULL;

		assert_int_equal(job_batch_build(&b, &js), 0);
		assert_int_equal(harness_post_batch(c->h, &b, &body), 200);
		free(body);
		sysom_batch_free(&b);
	}
	assert_int_equal(monitor_evaluate(c->m, JOB), 0);
	s = incidents(c->h);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.open, 1);
	assert_int_equal(s.rank, 3);
	assert_string_equal(s.identity, "pattern rank=3 kernel " JOB_KERNEL);
	assert_string_equal(s.layer, "gpu");
	assert_string_equal(s.severity, "warning");
	a = firing(c);
	assert_int_equal(json_array_size(a), 1);
	labels = json_object_get(json_array_get(a, 0), "labels");
	assert_string_equal(json_string_value(json_object_get(labels, "alertname")), "SysomPattern");
	assert_string_equal(json_string_value(json_object_get(labels, "rank")), "3");
	json_decref(a);

	/* Its report: the deviation against the peers. */
	{
		char *report = NULL;
		assert_int_equal(store_diagnoses_list(c->h->store, &f, 10, report_take, &report), 0);
		assert_non_null(report);
		json_t *r = json_loads(report, 0, NULL);
		assert_non_null(r);
		assert_string_equal(json_string_value(json_object_get(r, "scope")), "peers");
		const json_t *dev = json_object_get(r, "deviation");
		assert_string_equal(json_string_value(json_object_get(dev, "function")), JOB_KERNEL);
		assert_true(fabs(json_number_value(json_object_get(dev, "z"))) >= 6);
		json_decref(r);
		free(report);
	}

	/* The same "now": no pattern check is due, the incident stays open (not resolved for
	 * lack of a check). */
	assert_int_equal(store_job_settings_put(c->h->store, JOB,
						"{\"lookback_s\":7200,\"pattern_window_s\":3600,"
						"\"pattern_hold\":1,\"resolve_after_s\":0}", 3), 0);
	assert_int_equal(monitor_evaluate(c->m, JOB), 0);
	s = incidents(c->h);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.open, 1);
	/* Patterns off: not found any more, it resolves (resolve_after 0), and its alert. */
	assert_int_equal(store_job_settings_put(c->h->store, JOB,
						"{\"lookback_s\":7200,\"patterns\":false,"
						"\"resolve_after_s\":0}", 4), 0);
	assert_int_equal(monitor_evaluate(c->m, JOB), 0);
	s = incidents(c->h);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.open, 0);
	a = firing(c);
	assert_int_equal(json_array_size(a), 0);
	json_decref(a);
	monitor_stats_get(c->m, &st);
	assert_int_equal(st.patterns_opened, 1);
	assert_int_equal(st.pattern_checks, 1);
}

static void test_resolve_after(void **state)
{
	struct ctx *c = *state;

	post_late_job(c->h);
	assert_int_equal(monitor_evaluate(c->m, JOB), 0);
	assert_int_equal(store_job_settings_put(c->h->store, JOB,
						"{\"lookback_s\":7200,\"min_excess_ms\":40}", 2), 0);
	assert_int_equal(monitor_evaluate(c->m, JOB), 0);
	assert_int_equal(incidents(c->h).open, 1); /* updated 0 ms ago < 60 s */
	json_t *a = firing(c);
	assert_int_equal(json_array_size(a), 1);
	json_decref(a);
}

static void test_settings(void **state)
{
	struct job_settings s;
	char err[160];
	json_t *o;

	(void)state;
	job_settings_default(&s);
	assert_true(s.diag.sp.k == 3.5);
	assert_int_equal(s.diag.sp.window, 100);
	assert_int_equal(s.diag.sp.min_excess_ns, 1000000);
	assert_int_equal(s.diag.sp.scale_floor_ns, 50000);
	assert_true(s.baseline_delta_pp == 0.5);
	o = json_pack("{s:f,s:i,s:b,s:f,s:f}", "k", 3.0, "window", 50, "alerts", 0, "min_excess_ms",
		      2.5, "scale_floor_ms", 0.2);
	assert_int_equal(job_settings_apply(&s, o, err, sizeof(err)), 0);
	json_decref(o);
	assert_int_equal(s.diag.sp.scale_floor_ns, 200000);
	assert_true(s.diag.sp.k == 3);
	assert_int_equal(s.diag.sp.window, 50);
	assert_int_equal(s.diag.sp.min_excess_ns, 2500000);
	assert_false(s.alerts);
	/* Refused whole: unknown key, wrong type, out of range; nothing changes. */
	o = json_pack("{s:f,s:i}", "k", 5.0, "bogus", 1);
	assert_int_equal(job_settings_apply(&s, o, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "bogus"));
	assert_true(s.diag.sp.k == 3);
	json_decref(o);
	o = json_pack("{s:s}", "k", "2");
	assert_int_equal(job_settings_apply(&s, o, err, sizeof(err)), -EINVAL);
	json_decref(o);
	o = json_pack("{s:i}", "window", 1);
	assert_int_equal(job_settings_apply(&s, o, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "window"));
	json_decref(o);
	o = json_pack("[]");
	assert_int_equal(job_settings_apply(&s, o, err, sizeof(err)), -EINVAL);
	json_decref(o);
	o = job_settings_json(&s);
	assert_true(json_number_value(json_object_get(o, "k")) == 3);
	assert_true(json_number_value(json_object_get(o, "min_excess_ms")) == 2.5);
	json_decref(o);
}

static int request(struct harness *h, http_handler_fn fn, const char *method, const char *path,
		   const char *query, const char *body, char **out)
{
	struct test_request t;
	struct http_response resp;

	request_init(&t, method, path, query);
	request_token(&t, HARNESS_TOKEN);
	if (body)
		request_body(&t, body, strlen(body));
	return call(fn, h->api, &t, &resp, out);
}

static void test_api(void **state)
{
	struct ctx *c = *state;
	char path[64], *body = NULL;
	json_t *doc;

	post_late_job(c->h);
	assert_int_equal(monitor_evaluate(c->m, JOB), 0);
	struct seen s = incidents(c->h);

	assert_int_equal(request(c->h, api_diagnoses_get, "GET", "/api/v1/diagnoses",
				 "job=" JOB "&from=0&status=open", NULL, &body), 200);
	assert_non_null(doc = json_loads(body, 0, NULL));
	free(body);
	json_t *d = json_array_get(json_object_get(doc, "diagnoses"), 0);
	assert_int_equal(json_array_size(json_object_get(doc, "diagnoses")), 1);
	assert_string_equal(json_string_value(json_object_get(d, "status")), "open");
	assert_int_equal(json_integer_value(json_object_get(d, "rank")), 5);
	assert_null(json_object_get(d, "report")); /* the list is a summary */
	json_decref(doc);

	snprintf(path, sizeof(path), "/api/v1/diagnoses/%lld", (long long)s.id);
	assert_int_equal(request(c->h, api_diagnoses_get, "GET", path, "", NULL, &body), 200);
	assert_non_null(doc = json_loads(body, 0, NULL));
	free(body);
	json_t *r = json_object_get(doc, "report");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "straggler"), "rank")),
			 5);
	json_decref(doc);
	assert_int_equal(request(c->h, api_diagnoses_get, "GET", path, "format=text", NULL, &body),
			 200);
	assert_non_null(strstr(body, "rank:      5"));
	assert_non_null(strstr(body, "layer:     unknown"));
	assert_non_null(strstr(body, "action: "));
	free(body);
	assert_int_equal(request(c->h, api_diagnoses_get, "GET", "/api/v1/diagnoses/999", "", NULL,
				 &body), 404);
	free(body);
	assert_int_equal(request(c->h, api_diagnoses_get, "GET", "/api/v1/diagnoses/x1", "", NULL,
				 &body), 400);
	free(body);
	assert_int_equal(request(c->h, api_diagnoses_get, "GET", path, "format=xml", NULL, &body),
			 400);
	free(body);
	assert_int_equal(request(c->h, api_diagnoses_get, "GET", "/api/v1/diagnoses", "status=x",
				 NULL, &body), 400);
	free(body);

	/* Settings: PUT validates and stores; GET shows the effective values. */
	assert_int_equal(request(c->h, api_job_put, "PUT", "/api/v1/jobs/" JOB "/settings", "",
				 "{\"k\": 3, \"lookback_s\": 7200}", &body), 200);
	assert_non_null(doc = json_loads(body, 0, NULL));
	free(body);
	assert_true(json_number_value(json_object_get(json_object_get(doc, "settings"), "k")) == 3);
	json_decref(doc);
	assert_int_equal(request(c->h, api_job_put, "PUT", "/api/v1/jobs/" JOB "/settings", "",
				 "{\"k\": -1}", &body), 400);
	assert_non_null(strstr(body, "'k'"));
	free(body);
	assert_int_equal(request(c->h, api_job_put, "PUT", "/api/v1/jobs/" JOB "/settings", "",
				 "not json", &body), 400);
	free(body);
	assert_int_equal(request(c->h, api_job_put, "PUT", "/api/v1/jobs/" JOB "/gpu", "", "{}",
				 &body), 405);
	free(body);
	assert_int_equal(request(c->h, api_job_get, "GET", "/api/v1/jobs/" JOB "/settings", "", NULL,
				 &body), 200);
	assert_non_null(strstr(body, "\"overrides\":{\"k\":3"));
	free(body);
	/* Baselines: none yet; one from a range without samples is refused. */
	assert_int_equal(request(c->h, api_job_get, "GET", "/api/v1/jobs/" JOB "/baseline", "", NULL,
				 &body), 404);
	free(body);
	assert_int_equal(request(c->h, api_job_put, "POST", "/api/v1/jobs/" JOB "/baseline",
				 "from=0&to=1", NULL, &body), 409);
	free(body);
}

/* ---- ownership (replicas) ---------------------------------------------------------------------- */

static int forgot;
static char forgot_job[64];
static struct alerts *forget_alerts;

static bool owns_flag(void *arg, const char *job)
{
	(void)job;
	return *(const bool *)arg;
}

static void forget_job(void *arg, const char *job)
{
	forgot++;
	snprintf(forgot_job, sizeof(forgot_job), "%s", job);
	alerts_scope_forget(arg, job);
}

static struct monitor *owned_monitor(struct ctx *c, bool *owns)
{
	struct monitor_options mo = { .interval_ms = 20, .now_ms = harness_now_ms };
	struct diagnosis_ctx dc;
	struct monitor *m = NULL;

	api_diagnosis_ctx(c->h->api, &dc);
	mo.alerting = (struct monitor_alerting){ .severity = alerts_policy_severity,
						 .publish = alerts_incidents_publish,
						 .forget = forget_job,
						 .arg = c->alerts };
	mo.ownership = (struct monitor_ownership){ .owns = owns_flag, .arg = owns };
	assert_int_equal(monitor_new(&dc, &mo, &m), 0);
	return m;
}

/* Polls the monitor's stats until `field` reaches `want` (10 s at most). */
#define WAIT_STAT(m, field, want)                                                              \
	do {                                                                                   \
		struct monitor_stats ws_;                                                      \
		for (int i_ = 0; i_ < 1000; i_++) {                                            \
			monitor_stats_get(m, &ws_);                                            \
			if (ws_.field >= (want))                                               \
				break;                                                         \
			nanosleep(&(struct timespec){ 0, 10 * 1000000 }, NULL);                \
		}                                                                              \
		monitor_stats_get(m, &ws_);                                                    \
		assert_true(ws_.field >= (want));                                              \
	} while (0)

/*
 * A job another replica owns is tracked but never evaluated; when it becomes this replica's, it
 * is evaluated at once (incident and alert); when it moves away, its alert is forgotten, not
 * resolved (the new owner sends it on) and its evaluations stop. A replica that never saw the
 * job's batches takes up its open incident from the store when the job becomes its own.
 */
static void test_ownership(void **state)
{
	struct ctx *c = *state;
	bool own_a = false, own_b = false;
	struct monitor *a = owned_monitor(c, &own_a), *b = owned_monitor(c, &own_b);
	struct monitor_stats st;
	struct alerts_stats as;
	json_t *f;

	forgot = 0;
	forget_alerts = c->alerts;
	post_late_job_to(c->h, a);
	nanosleep(&(struct timespec){ 0, 300 * 1000000 }, NULL);
	monitor_stats_get(a, &st);
	assert_int_equal(st.evaluations, 0);
	assert_int_equal(st.jobs, 1);
	assert_int_equal(st.jobs_owned, 0);
	assert_int_equal(incidents(c->h).n, 0);

	own_a = true;
	monitor_owners_changed(a);
	WAIT_STAT(a, evaluations, 1);
	monitor_stats_get(a, &st);
	assert_int_equal(st.jobs_taken_over, 1);
	assert_int_equal(st.jobs_owned, 1);
	assert_true(st.live_cells > 0); /* the job's instances, fed as they were stored */
	/* The straggler, and a stall: fed live, the job's calls lie an hour before "now". */
	struct seen s1 = incidents(c->h);
	assert_true(s1.open >= 1);
	f = firing(c);
	assert_int_equal(json_array_size(f), (size_t)s1.open);
	json_decref(f);

	own_a = false;
	monitor_owners_changed(a);
	WAIT_STAT(a, jobs_handed_over, 1);
	assert_int_equal(forgot, 1);
	assert_string_equal(forgot_job, JOB);
	f = firing(c);
	assert_int_equal(json_array_size(f), 0);
	json_decref(f);
	alerts_stats_get(c->alerts, &as);
	assert_int_equal(as.handed_over_total, (uint64_t)s1.open);
	assert_int_equal(as.resolved_total, 0);
	assert_int_equal(incidents(c->h).open, s1.open); /* still open: the new owner decides */
	monitor_stats_get(a, &st);
	uint64_t evaluations = st.evaluations;
	nanosleep(&(struct timespec){ 0, 200 * 1000000 }, NULL);
	monitor_stats_get(a, &st);
	assert_int_equal(st.evaluations, evaluations);
	assert_int_equal(st.jobs_owned, 0);
	assert_int_equal(st.live_cells, 0); /* its live state went with it */

	/* b saw none of the job's batches: owning it, it finds the open incident in the store. */
	monitor_stats_get(b, &st);
	assert_int_equal(st.jobs, 0);
	own_b = true;
	monitor_owners_changed(b);
	WAIT_STAT(b, evaluations, 1);
	monitor_stats_get(b, &st);
	assert_int_equal(st.jobs, 1);
	assert_int_equal(st.jobs_owned, 1);
	monitor_free(a);
	monitor_free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_incident_lifecycle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_resolve_after, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pattern_incident, setup, teardown),
		cmocka_unit_test(test_settings),
		cmocka_unit_test_setup_teardown(test_api, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ownership, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
