/* SPDX-License-Identifier: Apache-2.0 */
/* Symbol upload: parsing the server's JSON answers (missing lists, chunk acknowledgements). */
#include "agent/symbols/symupload_internal.h"

#include <stdio.h>
#include <string.h>
#include <jansson.h>

#include "common/error.h"

/* Parses {"missing":[{"build_id":..,"executable":..,"debuginfo":..},...],...}. */
int symupload__parse_missing(const void *body, size_t len, missing_fn fn, void *ctx)
{
	json_t *root = body ? json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
	json_t *missing = json_object_get(root, "missing");
	size_t i;
	json_t *item;
	int rc = 0;

	if (!json_is_object(root) || !json_is_array(missing)) {
		rc = -SYSOM_ECORRUPT;
		goto cleanup;
	}
	json_array_foreach(missing, i, item) {
		struct missing_entry e = { .build_id = "" };
		const char *id = json_string_value(json_object_get(item, "build_id"));
		json_t *exe = json_object_get(item, "executable");
		json_t *dbg = json_object_get(item, "debuginfo");

		if (!json_is_object(item) || (exe && !json_is_boolean(exe)) ||
		    (dbg && !json_is_boolean(dbg))) {
			rc = -SYSOM_ECORRUPT;
			goto cleanup;
		}
		if (!id || strlen(id) >= sizeof(e.build_id))
			continue; /* nothing we asked about */
		snprintf(e.build_id, sizeof(e.build_id), "%s", id);
		e.executable = json_is_true(exe);
		e.debuginfo = json_is_true(dbg);
		fn(ctx, &e);
	}
cleanup:
	json_decref(root);
	return rc;
}

/* The integer member `name` of a top-level object; 0 or -SYSOM_ECORRUPT / -ENOENT. */
int symupload__parse_uint_member(const void *body, size_t len, const char *name,
				uint64_t *out)
{
	json_t *root = body ? json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
	json_t *value = json_object_get(root, name);
	int rc = 0;

	if (!json_is_object(root))
		rc = -SYSOM_ECORRUPT;
	else if (!value)
		rc = -ENOENT;
	else if (!json_is_integer(value) || json_integer_value(value) < 0)
		rc = -SYSOM_ECORRUPT;
	else
		*out = (uint64_t)json_integer_value(value);
	json_decref(root);
	return rc;
}
