/* SPDX-License-Identifier: Apache-2.0 */
/* sysomctl HTTP client (libcurl) and token file reading. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/error.h"
#include "ctl/ctl.h"

static size_t on_data(char *data, size_t size, size_t n, void *arg)
{
	struct byte_buf *body = arg;

	byte_buf_append(body, data, size * n);
	return byte_buf_error(body) ? 0 : size * n; /* 0 makes curl stop with an error */
}

int ctl_http_get(const char *url, const char *token, struct byte_buf *body, long *status,
		 char *err, size_t errlen)
{
	char errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *headers = NULL;
	char *auth = NULL;
	CURL *curl = curl_easy_init();
	CURLcode cc;
	int rc = 0;

	if (!curl) {
		snprintf(err, errlen, "cannot initialise libcurl");
		return -EIO;
	}
	body->limit = CTL_MAX_RESPONSE;
	if (token) {
		if (asprintf(&auth, "Authorization: Bearer %s", token) < 0) {
			auth = NULL;
			rc = -ENOMEM;
			goto cleanup;
		}
		headers = curl_slist_append(headers, auth);
		if (!headers) {
			rc = -ENOMEM;
			goto cleanup;
		}
	}
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, body);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT, 300L);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");
	curl_easy_setopt(curl, CURLOPT_USERAGENT, "sysomctl/" SYSOM_VERSION);
	cc = curl_easy_perform(curl);
	if (cc != CURLE_OK) {
		if (byte_buf_error(body))
			snprintf(err, errlen, "response from %s is larger than %u bytes", url,
				 CTL_MAX_RESPONSE);
		else
			snprintf(err, errlen, "cannot reach %s: %s", url,
				 errbuf[0] ? errbuf : curl_easy_strerror(cc));
		rc = -EIO;
		goto cleanup;
	}
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
cleanup:
	if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	curl_slist_free_all(headers);
	if (auth) {
		explicit_bzero(auth, strlen(auth));
		free(auth);
	}
	curl_easy_cleanup(curl);
	return rc;
}
