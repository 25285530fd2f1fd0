/* SPDX-License-Identifier: Apache-2.0 */
/* Strings, label sets and Alertmanager fingerprints of alerts (server/alerts/alerts_internal.h). */
#include "server/alerts/alerts_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/bytes.h"
#include "server/http/render.h"

#define FNV64_PRIME 1099511628211ULL
#define LABEL_SEPARATOR 0xff    /* Prometheus' model.SeparatorByte */

bool alerts__printable_ascii(const char *s, size_t max)
{
	size_t n = 0;

	for (; *s; s++, n++)
		if (n >= max || (unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
			return false;
	return n > 0;
}

json_t *alerts__text_json(const char *s, size_t max)
{
	size_t len = strnlen(s, max + 1);
	struct byte_buf clean = { 0 };
	json_t *str;

	if (len > max) {
		len = max;
		/* s[len] is the first byte left out: drop a sequence it would cut (at most 3 bytes). */
		for (int i = 0; i < 3 && len > 0 && ((unsigned char)s[len] & 0xc0) == 0x80; i++)
			len--;
	}
	str = json_stringn(s, len);
	if (str)
		return str;
	render_utf8_append(&clean, s, len);
	if (!byte_buf_error(&clean))
		str = json_stringn(clean.len ? (const char *)clean.data : "", clean.len);
	byte_buf_free(&clean);
	return str;
}

bool alerts__present(const char *s)
{
	return s && *s;
}

/* Adds name → value when value is present; 0 or -ENOMEM. */
static int text_add(json_t *obj, const char *name, const char *value, size_t max)
{
	json_t *v;

	if (!alerts__present(value))
		return 0;
	v = alerts__text_json(value, max);
	if (!v || json_object_set_new(obj, name, v))
		return -ENOMEM;
	return 0;
}

static int key_cmp(const void *x, const void *y)
{
	return strcmp(*(const char *const *)x, *(const char *const *)y);
}

uint64_t alerts__fnv_add(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= FNV64_PRIME;
	}
	return h;
}

uint64_t alerts_fingerprint(const json_t *labels)
{
	const char *stack_keys[16], **keys = stack_keys;
	size_t n = json_object_size(labels), i = 0;
	uint64_t h = ALERTS__FNV64_OFFSET;
	const unsigned char sep = LABEL_SEPARATOR;
	const char *key;
	json_t *value;

	if (n > sizeof(stack_keys) / sizeof(stack_keys[0]) && !(keys = malloc(n * sizeof(*keys))))
		return 0;
	json_object_foreach((json_t *)labels, key, value)
		keys[i++] = key;
	qsort(keys, n, sizeof(*keys), key_cmp);
	for (i = 0; i < n; i++) {
		json_t *v = json_object_get(labels, keys[i]);
		h = alerts__fnv_add(h, keys[i], strlen(keys[i]));
		h = alerts__fnv_add(h, &sep, 1);
		if (json_is_string(v))
			h = alerts__fnv_add(h, json_string_value(v), json_string_length(v));
		h = alerts__fnv_add(h, &sep, 1);
	}
	if (keys != stack_keys)
		free(keys);
	return h;
}

json_t *alerts__labels_build(const struct alert_spec *s)
{
	json_t *obj = json_object();
	char rank[16];

	if (!obj)
		return NULL;
	snprintf(rank, sizeof(rank), "%" PRId32, s->rank);
	if (text_add(obj, "alertname", s->alertname, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "communicator", s->communicator, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "container", s->container, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "job", s->job, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "layer", s->layer, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "namespace", s->pod_namespace, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "node", s->node, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "pod", s->pod, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "rank", s->rank >= 0 ? rank : NULL, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "severity", s->severity, ALERTS_LABEL_VALUE_MAX) ||
	    text_add(obj, "slurm_job", s->slurm_job, ALERTS_LABEL_VALUE_MAX)) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}

json_t *alerts__annotations_build(const struct alert_spec *s)
{
	json_t *obj = json_object();

	if (!obj)
		return NULL;
	if (text_add(obj, "summary", s->summary, ALERTS_ANNOTATION_MAX) ||
	    text_add(obj, "description", s->description, ALERTS_ANNOTATION_MAX) ||
	    text_add(obj, "action", s->action, ALERTS_ANNOTATION_MAX) ||
	    text_add(obj, "cause", s->cause, ALERTS_ANNOTATION_MAX)) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}
