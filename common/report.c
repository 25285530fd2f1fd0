/* SPDX-License-Identifier: Apache-2.0 */
/* Library modules' messages to their owner (see report.h). */
#include "common/report.h"

#include <stdarg.h>
#include <stdio.h>

void sysom_report(const struct sysom_reporter *r, enum sysom_report_level level,
		  const char *fmt, ...)
{
	char text[1024];
	va_list ap;

	if (!r || !r->fn)
		return;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	r->fn(r->ctx, level, text);
}
