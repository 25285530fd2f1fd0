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

#define TOKEN_MAX 4096

int ctl_token_read(const char *path, char **token, char *err, size_t errlen)
{
	char buf[TOKEN_MAX + 2];
	char *start = buf, *end;
	size_t len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open token file %s: %s", path, sysom_strerror(rc));
		return rc;
	}
	while (len < sizeof(buf) - 1) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			snprintf(err, errlen, "cannot read token file %s: %s", path, sysom_strerror(rc));
			goto cleanup;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	end = memchr(buf, '\n', len);
	if (!end)
		end = buf + len;
	while (start < end && isspace((unsigned char)*start))
		start++;
	while (end > start && isspace((unsigned char)end[-1]))
		end--;
	bool printable = end > start && (size_t)(end - start) <= TOKEN_MAX;
	for (const char *p = start; printable && p < end; p++)
		printable = isgraph((unsigned char)*p);
	if (!printable) {
		snprintf(err, errlen,
			 "token file %s: the first line must hold the token (1..%d printable bytes)",
			 path, TOKEN_MAX);
		rc = -SYSOM_ECONFIG;
		goto cleanup;
	}
	*token = strndup(start, (size_t)(end - start));
	if (!*token)
		rc = -ENOMEM;
cleanup:
	explicit_bzero(buf, sizeof(buf));
	close(fd);
	return rc;
}

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
