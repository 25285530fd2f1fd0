/* SPDX-License-Identifier: Apache-2.0 */
/* Messages for the project's error codes; errno values fall through to strerror. */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const project_messages[SYSOM_ERR_END - SYSOM_ERR_BASE] = {
	[SYSOM_ECORRUPT - SYSOM_ERR_BASE] = "malformed input",
	[SYSOM_EVERSION - SYSOM_ERR_BASE] = "unsupported format version",
	[SYSOM_ELIMIT - SYSOM_ERR_BASE] = "input exceeds a configured limit",
	[SYSOM_ENOTELF - SYSOM_ERR_BASE] = "not an ELF file",
	[SYSOM_ENOBUILDID - SYSOM_ERR_BASE] = "ELF file has no build ID note",
	[SYSOM_EHTTP - SYSOM_ERR_BASE] = "peer answered with an HTTP error status",
	[SYSOM_ECONFIG - SYSOM_ERR_BASE] = "invalid configuration",
	[SYSOM_EAUTH - SYSOM_ERR_BASE] = "authentication failed",
};

const char *sysom_strerror(int err)
{
	int code = abs(err);

	if (code >= SYSOM_ERR_BASE && code < SYSOM_ERR_END)
		return project_messages[code - SYSOM_ERR_BASE];
	if (code == 0)
		return "success";
	/* strerrordesc_np is thread-safe, unlike strerror for unknown codes. */
	const char *desc = strerrordesc_np(code);
	return desc ? desc : "unknown error";
}

void sysom_errorf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}
