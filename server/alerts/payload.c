/* SPDX-License-Identifier: Apache-2.0 */
/* JSON of alerts: Alertmanager's API v2 and webhook formats, and the list of firing alerts. */
#include "server/alerts/alerts_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "common/bytes.h"

#define RFC3339_MAX_MS 253402300799999LL /* 9999-12-31T23:59:59.999Z */
#define WEBHOOK_RECEIVER "sysom"

/* RFC 3339 UTC with milliseconds ("2026-11-25T12:32:38.409Z"), as a JSON string; NULL when
 * out of memory. Years beyond 9999 have no RFC 3339 form: clamped. */
static json_t *time_json(int64_t ms)
{
	char date[40], text[48];
	time_t t;
	struct tm tm;

	if (ms < 0)
		ms = 0;
	if (ms > RFC3339_MAX_MS)
		ms = RFC3339_MAX_MS;
	t = (time_t)(ms / 1000);
	if (!gmtime_r(&t, &tm) || !strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm))
		snprintf(date, sizeof(date), "1970-01-01T00:00:00");
	snprintf(text, sizeof(text), "%s.%03dZ", date, (int)(ms % 1000));
	return json_string(text);
}

static json_t *fingerprint_json(uint64_t fp)
{
	char text[17];

	snprintf(text, sizeof(text), "%016" PRIx64, fp);
	return json_string(text);
}

/* endsAt of a firing alert: as Prometheus does, 4 resend intervals ahead, so Alertmanager
 * resolves it by itself when the server stops sending (crash, network partition). */
static int64_t firing_ends_ms(const struct alerts *a, const struct alert *al, int64_t wall_now)
{
	int64_t from = wall_now > al->starts_ms ? wall_now : al->starts_ms;

	return from + 4 * (int64_t)a->cfg.resend_interval_ms;
}

/* One alert as Alertmanager's API v2 takes it; with `webhook`, as its webhook sends it. */
static json_t *alert_json(const struct alerts *a, const struct alert *al, int64_t wall_now,
			  bool webhook)
{
	json_t *obj = json_object();
	int64_t ends = al->resolved ? al->ends_ms : firing_ends_ms(a, al, wall_now);

	if (!obj)
		return NULL;
	if ((webhook &&
	     json_object_set_new(obj, "status", json_string(al->resolved ? "resolved" : "firing"))) ||
	    json_object_set(obj, "labels", al->labels) ||
	    json_object_set(obj, "annotations", al->annotations) ||
	    json_object_set_new(obj, "startsAt", time_json(al->starts_ms)) ||
	    json_object_set_new(obj, "endsAt", time_json(ends)) ||
	    (al->generator_url &&
	     json_object_set_new(obj, "generatorURL", json_string(al->generator_url))) ||
	    (webhook && json_object_set_new(obj, "fingerprint", fingerprint_json(al->fp)))) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}

/* The labels (or annotations) every alert of the batch has with the same value. */
static json_t *common_json(const struct batch *b, bool annotations)
{
	json_t *common = json_object();
	const json_t *first;
	const char *key;
	json_t *value;

	if (!common || b->n == 0)
		return common;
	first = annotations ? b->items[0]->annotations : b->items[0]->labels;
	json_object_foreach((json_t *)first, key, value) {
		bool everywhere = true;
		for (size_t i = 1; i < b->n && everywhere; i++) {
			const json_t *o = annotations ? b->items[i]->annotations : b->items[i]->labels;
			everywhere = json_equal(json_object_get(o, key), value);
		}
		if (everywhere && json_object_set(common, key, value)) {
			json_decref(common);
			return NULL;
		}
	}
	return common;
}

/* Alertmanager's group key for a route grouping by job: {}:{job="SCOPE"}. */
static json_t *group_key_json(const struct scope *sc)
{
	struct byte_buf key = { 0 };
	json_t *out = NULL;

	byte_buf_printf(&key, "{}:{job=\"");
	for (const char *p = sc->name; *p; p++) {
		if (*p == '"' || *p == '\\')
			byte_buf_append(&key, "\\", 1);
		byte_buf_append(&key, p, 1);
	}
	byte_buf_printf(&key, "\"}");
	byte_buf_append(&key, "", 1);
	if (!byte_buf_error(&key))
		out = alerts__text_json((const char *)key.data, key.len);
	byte_buf_free(&key);
	return out;
}

json_t *alerts__alertmanager_json(const struct alerts *a, const struct batch *b,
				  int64_t wall_now)
{
	json_t *doc = json_array();

	if (!doc)
		return NULL;
	for (size_t i = 0; i < b->n; i++)
		if (json_array_append_new(doc, alert_json(a, b->items[i], wall_now, false))) {
			json_decref(doc);
			return NULL;
		}
	return doc;
}

json_t *alerts__webhook_json(const struct alerts *a, const struct batch *b, size_t truncated,
			     int64_t wall_now)
{
	const struct scope *sc = b->items[0]->scope;
	json_t *msg = json_object(), *list = json_array(), *group = json_object();
	bool firing = false;

	if (!msg || !list || !group)
		goto fail;
	for (size_t i = 0; i < b->n; i++) {
		firing |= !b->items[i]->resolved;
		if (json_array_append_new(list, alert_json(a, b->items[i], wall_now, true)))
			goto fail;
	}
	if (json_object_set_new(group, "job", alerts__text_json(sc->name, ALERTS_SCOPE_MAX)) ||
	    json_object_set_new(msg, "version", json_string("4")) ||
	    json_object_set_new(msg, "groupKey", group_key_json(sc)) ||
	    json_object_set_new(msg, "truncatedAlerts", json_integer((json_int_t)truncated)) ||
	    json_object_set_new(msg, "status", json_string(firing ? "firing" : "resolved")) ||
	    json_object_set_new(msg, "receiver", json_string(WEBHOOK_RECEIVER)) ||
	    json_object_set(msg, "groupLabels", group) ||
	    json_object_set_new(msg, "commonLabels", common_json(b, false)) ||
	    json_object_set_new(msg, "commonAnnotations", common_json(b, true)) ||
	    json_object_set_new(msg, "externalURL", json_string("")) ||
	    json_object_set(msg, "alerts", list))
		goto fail;
	json_decref(list);
	json_decref(group);
	return msg;
fail:
	json_decref(msg);
	json_decref(list);
	json_decref(group);
	return NULL;
}

json_t *alerts__active_json(const struct alert *al)
{
	json_t *obj = json_object();

	if (!obj ||
	    json_object_set_new(obj, "scope", alerts__text_json(al->scope->name, ALERTS_SCOPE_MAX)) ||
	    json_object_set_new(obj, "fingerprint", fingerprint_json(al->fp)) ||
	    json_object_set_new(obj, "status", json_string("firing")) ||
	    /* Copies: the caller's thread must not share reference counts with ours. */
	    json_object_set_new(obj, "labels", json_deep_copy(al->labels)) ||
	    json_object_set_new(obj, "annotations", json_deep_copy(al->annotations)) ||
	    json_object_set_new(obj, "startsAt", time_json(al->starts_ms)) ||
	    (al->generator_url &&
	     json_object_set_new(obj, "generatorURL", json_string(al->generator_url)))) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}
