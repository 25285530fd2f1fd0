/* SPDX-License-Identifier: Apache-2.0 */
/* Validation of the http(s) URLs the daemons are configured with. */
#include "common/url.h"

#include <strings.h>

bool sysom_url_valid(const char *url, size_t max_len)
{
	const char *host;
	size_t n = 0;

	if (!url)
		return false;
	for (const char *p = url; *p; p++, n++)
		if (n >= max_len || (unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
			return false;
	if (n == 0)
		return false;
	if (strncasecmp(url, "http://", 7) == 0)
		host = url + 7;
	else if (strncasecmp(url, "https://", 8) == 0)
		host = url + 8;
	else
		return false;
	return *host != '\0' && *host != '/';
}
