/* SPDX-License-Identifier: Apache-2.0 */
/* Validation of the http(s) URLs the daemons are configured with. */
#ifndef SYSOM_COMMON_URL_H
#define SYSOM_COMMON_URL_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Whether `url` (NULL allowed: false) is an absolute http:// or https:// URL (the scheme in
 * either case) with a non-empty authority, 1 to `max_len` bytes long, made only of printable
 * ASCII: spaces, control characters and bytes >= 0x7f are refused (they would break the
 * request line or a header, or smuggle one in).
 */
bool sysom_url_valid(const char *url, size_t max_len);

#endif
