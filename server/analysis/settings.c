/* SPDX-License-Identifier: Apache-2.0 */
/* Analysis thresholds and per-job settings (server/analysis/settings.h). */
#include "server/analysis/settings.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "server/analysis/layers.h"

void diagnosis_params_default(struct diagnosis_params *p)
{
	memset(p, 0, sizeof(*p));
	straggler_params_default(&p->sp);
	p->diagnose = true;
	p->gpu_threshold = LAYERS_GPU_THRESHOLD;
	p->cpu_min_pp = DIAGNOSIS_DEFAULT_CPU_MIN_PP;
}

/* ---- per-job settings ------------------------------------------------------------------------ */

void job_settings_default(struct job_settings *s)
{
	memset(s, 0, sizeof(*s));
	diagnosis_params_default(&s->diag);
	s->lookback_ms = SETTINGS_DEFAULT_LOOKBACK_MS;
	s->resolve_after_ms = SETTINGS_DEFAULT_RESOLVE_AFTER_MS;
	s->alerts = true;
	s->regression = SETTINGS_DEFAULT_REGRESSION;
	s->regression_hold_ms = SETTINGS_DEFAULT_REGRESSION_HOLD_MS;
	s->baseline_delta_pp = SETTINGS_DEFAULT_BASELINE_DELTA_PP;
	s->baseline_after_ms = SETTINGS_DEFAULT_BASELINE_AFTER_MS;
	s->hang_floor_ms = SETTINGS_DEFAULT_HANG_FLOOR_MS;
	s->hang_factor = SETTINGS_DEFAULT_HANG_FACTOR;
	s->patterns = true;
	s->pattern_k = SETTINGS_DEFAULT_PATTERN_K;
	s->pattern_min_cost = SETTINGS_DEFAULT_PATTERN_MIN_COST;
	s->pattern_change = SETTINGS_DEFAULT_PATTERN_CHANGE;
	s->pattern_window_ms = SETTINGS_DEFAULT_PATTERN_WINDOW_MS;
	s->pattern_period_ms = SETTINGS_DEFAULT_PATTERN_PERIOD_MS;
	s->pattern_hold = SETTINGS_DEFAULT_PATTERN_HOLD;
}

/* One numeric setting: its key, range, and where it goes (double, u32, u64 or bool). */
struct setting {
	const char *key;
	double min, max;
	double scale; /* stored value = JSON value x scale */
	enum { SET_DOUBLE, SET_U32, SET_U64, SET_BOOL } type;
	size_t offset;
};

#define SET(k, lo, hi, sc, t, field) { k, lo, hi, sc, t, offsetof(struct job_settings, field) }

static const struct setting settings[] = {
	SET("k", 0.1, 100, 1, SET_DOUBLE, diag.sp.k),
	SET("window", 2, STRAGGLER_MAX_WINDOW, 1, SET_U32, diag.sp.window),
	SET("min_excess_ms", 0, 600000, 1e6, SET_U64, diag.sp.min_excess_ns),
	SET("persistent_fraction", 0, 1, 1, SET_DOUBLE, diag.sp.persistent_fraction),
	SET("scale_floor_ms", 0, 60000, 1e6, SET_U64, diag.sp.scale_floor_ns),
	SET("gpu_threshold", 1.01, 100, 1, SET_DOUBLE, diag.gpu_threshold),
	SET("cpu_min_pp", 0.1, 100, 1, SET_DOUBLE, diag.cpu_min_pp),
	SET("lookback_s", 1, 86400, 1000, SET_U32, lookback_ms),
	SET("resolve_after_s", 0, 86400, 1000, SET_U32, resolve_after_ms),
	SET("alert_intermittent", 0, 1, 1, SET_BOOL, alert_intermittent),
	SET("alerts", 0, 1, 1, SET_BOOL, alerts),
	SET("regression", 0.01, 10, 1, SET_DOUBLE, regression),
	SET("regression_hold_s", 0, 86400, 1000, SET_U32, regression_hold_ms),
	SET("baseline_delta_pp", 0.01, 100, 1, SET_DOUBLE, baseline_delta_pp),
	SET("baseline_after_s", 10, 86400 * 7, 1000, SET_U32, baseline_after_ms),
	SET("hang_floor_s", 1, 86400, 1000, SET_U32, hang_floor_ms),
	SET("hang_factor", 1, 1000, 1, SET_DOUBLE, hang_factor),
	SET("patterns", 0, 1, 1, SET_BOOL, patterns),
	SET("pattern_k", 1, 1000, 1, SET_DOUBLE, pattern_k),
	SET("pattern_min_cost", 0.001, 1, 1, SET_DOUBLE, pattern_min_cost),
	SET("pattern_change", 0.05, 100, 1, SET_DOUBLE, pattern_change),
	SET("pattern_window_s", 5, 3600, 1000, SET_U32, pattern_window_ms),
	SET("pattern_period_s", 1, 3600, 1000, SET_U32, pattern_period_ms),
	SET("pattern_hold", 1, 100, 1, SET_U32, pattern_hold),
};
#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

int job_settings_apply(struct job_settings *s, const json_t *obj, char *err, size_t errlen)
{
	struct job_settings next = *s;
	const char *key;
	json_t *value;

	if (!json_is_object(obj)) {
		snprintf(err, errlen, "settings must be a JSON object");
		return -EINVAL;
	}
	json_object_foreach((json_t *)obj, key, value) {
		const struct setting *st = NULL;
		double v;

		for (size_t i = 0; i < NSETTINGS && !st; i++)
			if (strcmp(settings[i].key, key) == 0)
				st = &settings[i];
		if (!st) {
			snprintf(err, errlen, "unknown setting '%.64s'", key);
			return -EINVAL;
		}
		if (st->type == SET_BOOL ? !json_is_boolean(value) : !json_is_number(value)) {
			snprintf(err, errlen, "setting '%s' must be %s", key,
				 st->type == SET_BOOL ? "true or false" : "a number");
			return -EINVAL;
		}
		v = st->type == SET_BOOL ? json_is_true(value) : json_number_value(value);
		if (!isfinite(v) || v < st->min || v > st->max) {
			snprintf(err, errlen, "setting '%s' must be in [%g, %g]", key, st->min, st->max);
			return -EINVAL;
		}
		char *field = (char *)&next + st->offset;
		switch (st->type) {
		case SET_DOUBLE:
			*(double *)field = v * st->scale;
			break;
		case SET_U32:
			*(uint32_t *)field = (uint32_t)llround(v * st->scale);
			break;
		case SET_U64:
			*(uint64_t *)field = (uint64_t)llround(v * st->scale);
			break;
		case SET_BOOL:
			*(bool *)field = v != 0;
			break;
		}
	}
	*s = next;
	return 0;
}

json_t *job_settings_json(const struct job_settings *s)
{
	json_t *obj = json_object();

	for (size_t i = 0; obj && i < NSETTINGS; i++) {
		const char *field = (const char *)s + settings[i].offset;
		json_t *v = NULL;

		switch (settings[i].type) {
		case SET_DOUBLE:
			v = json_real(*(const double *)field / settings[i].scale);
			break;
		case SET_U32:
			v = json_real(*(const uint32_t *)field / settings[i].scale);
			break;
		case SET_U64:
			v = json_real((double)*(const uint64_t *)field / settings[i].scale);
			break;
		case SET_BOOL:
			v = json_boolean(*(const bool *)field);
			break;
		}
		if (json_object_set_new(obj, settings[i].key, v)) {
			json_decref(obj);
			return NULL;
		}
	}
	return obj;
}

