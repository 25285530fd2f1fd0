/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: a PUT /api/v1/jobs/{job}/settings body → validated job settings. */
// fuzz-sources: server/analysis/settings.c server/analysis/straggler.c server/analysis/robust.c server/analysis/layers.c server/query/folded.c
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/analysis/settings.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct job_settings s, before;
	char err[160];
	json_t *obj = json_loadb((const char *)data, size, 0, NULL), *back;

	job_settings_default(&s);
	before = s;
	if (!obj)
		return 0;
	if (job_settings_apply(&s, obj, err, sizeof(err)) != 0) {
		/* Refused whole: nothing changed, and the message says why. */
		if (memcmp(&s, &before, sizeof(s)) != 0 || !err[0] || strlen(err) >= sizeof(err))
			abort();
	} else {
		/* Accepted values are in range, and what GET shows applies back to the same. */
		if (!(s.diag.sp.k >= 0.1 && s.diag.sp.k <= 100) || s.diag.sp.window < 2 ||
		    s.diag.sp.window > STRAGGLER_MAX_WINDOW || !isfinite(s.regression))
			abort();
		struct job_settings again;
		job_settings_default(&again);
		back = job_settings_json(&s);
		if (!back || job_settings_apply(&again, back, err, sizeof(err)) != 0)
			abort();
		json_decref(back);
	}
	json_decref(obj);
	return 0;
}
