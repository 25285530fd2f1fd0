/* SPDX-License-Identifier: Apache-2.0 */
/* Error codes: negative errno values plus the project's own codes, with one message table. */
#ifndef SYSOM_COMMON_ERROR_H
#define SYSOM_COMMON_ERROR_H

#include <stddef.h>

/*
 * Functions return 0 (or a count) on success and a negative value on failure: either -errno
 * or -SYSOM_E*. The project codes start above any errno value.
 */
enum sysom_error_code {
	SYSOM_ERR_BASE = 4096,
	SYSOM_ECORRUPT = SYSOM_ERR_BASE, /* input is malformed */
	SYSOM_EVERSION,                  /* input uses an unsupported format version */
	SYSOM_ELIMIT,                    /* input exceeds a configured limit */
	SYSOM_ENOTELF,                   /* file is not an ELF file */
	SYSOM_ENOBUILDID,                /* ELF file carries no build ID note */
	SYSOM_EHTTP,                     /* peer answered with a non-success HTTP status */
	SYSOM_ECONFIG,                   /* configuration is invalid */
	SYSOM_EAUTH,                     /* authentication failed */
	SYSOM_ERR_END
};

/* Message for a negative (or positive) error code; never NULL; static storage. */
const char *sysom_strerror(int err);

/* Formats a message into `err` (`errlen` bytes); does nothing when `err` is NULL or
 * `errlen` is 0, so callers may pass an optional error buffer straight through. */
void sysom_errorf(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
