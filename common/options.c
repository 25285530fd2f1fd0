/* SPDX-License-Identifier: Apache-2.0 */
/* Option tables: command-line flags and config files parsed by the same rules. */
#include "common/options.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

#define CONFIG_FILE_MAX (1 << 20)

static bool names_equal(const char *a, const char *b, size_t blen)
{
	size_t i = 0;

	for (; a[i] && i < blen; i++) {
		char x = a[i] == '_' ? '-' : a[i];
		char y = b[i] == '_' ? '-' : b[i];
		if (x != y)
			return false;
	}
	return a[i] == '\0' && i == blen;
}

static const struct sysom_option *find(const struct sysom_option *table, size_t n,
				       const char *name, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (names_equal(table[i].name, name, len))
			return &table[i];
	return NULL;
}

bool sysom_seconds_option(double value, double dflt, double max, uint64_t *out)
{
	uint64_t ns;

	if (value == 0)
		value = dflt;
	if (!isfinite(value) || value <= 0 || value > max)
		return false;
	ns = (uint64_t)(value * 1e9);
	if (ns == 0)
		return false;
	*out = ns;
	return true;
}

int sysom_parse_duration(const char *text, double *seconds)
{
	static const struct {
		const char *suffix;
		double scale;
	} units[] = { { "ms", 1e-3 }, { "s", 1 }, { "m", 60 }, { "h", 3600 }, { "d", 86400 }, { "", 1 } };
	char *end;
	double v;

	errno = 0;
	v = strtod(text, &end);
	if (end == text || errno || !isfinite(v) || v < 0)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].suffix) == 0) {
			*seconds = v * units[i].scale;
			return 0;
		}
	}
	return -EINVAL;
}

int sysom_parse_size(const char *text, uint64_t *bytes)
{
	char *end;
	double v;
	double scale = 1;

	errno = 0;
	v = strtod(text, &end);
	if (end == text || errno || !isfinite(v) || v < 0)
		return -EINVAL;
	switch (tolower((unsigned char)*end)) {
	case 'k':
		scale = 1024.0;
		end++;
		break;
	case 'm':
		scale = 1024.0 * 1024;
		end++;
		break;
	case 'g':
		scale = 1024.0 * 1024 * 1024;
		end++;
		break;
	case 't':
		scale = 1024.0 * 1024 * 1024 * 1024;
		end++;
		break;
	}
	if (scale > 1 && tolower((unsigned char)*end) == 'i')
		end++;
	if (tolower((unsigned char)*end) == 'b')
		end++;
	if (*end)
		return -EINVAL;
	v *= scale;
	if (v >= 18446744073709551615.0)
		return -EINVAL;
	*bytes = (uint64_t)v;
	return 0;
}

static int parse_bool(const char *text, bool *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(text, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(text, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

static int check_range(const struct sysom_option *o, double v, const char *value, char *err,
		       size_t errlen)
{
	if (v < o->min || v > o->max) {
		snprintf(err, errlen, "%s: '%s' is outside [%g, %g]", o->name, value, o->min, o->max);
		return -EINVAL;
	}
	return 0;
}

static int apply(const struct sysom_option *o, const char *value, char *err, size_t errlen)
{
	switch (o->type) {
	case SYSOM_OPT_STRING: {
		char *copy = strdup(value);
		if (!copy)
			return -ENOMEM;
		free(*(char **)o->target);
		*(char **)o->target = copy;
		return 0;
	}
	case SYSOM_OPT_UINT: {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(value, &end, 10);
		if (end == value || *end || errno || value[0] == '-') {
			snprintf(err, errlen, "%s: '%s' is not a non-negative integer", o->name, value);
			return -EINVAL;
		}
		if (check_range(o, (double)v, value, err, errlen))
			return -EINVAL;
		*(uint32_t *)o->target = (uint32_t)v;
		return 0;
	}
	case SYSOM_OPT_DOUBLE: {
		char *end;
		errno = 0;
		double v = strtod(value, &end);
		if (end == value || *end || errno || !isfinite(v)) {
			snprintf(err, errlen, "%s: '%s' is not a number", o->name, value);
			return -EINVAL;
		}
		if (check_range(o, v, value, err, errlen))
			return -EINVAL;
		*(double *)o->target = v;
		return 0;
	}
	case SYSOM_OPT_BOOL:
		if (parse_bool(value, (bool *)o->target)) {
			snprintf(err, errlen, "%s: '%s' is not a boolean", o->name, value);
			return -EINVAL;
		}
		return 0;
	case SYSOM_OPT_DURATION: {
		double v;
		if (sysom_parse_duration(value, &v)) {
			snprintf(err, errlen, "%s: '%s' is not a duration (e.g. 30s, 500ms, 5m)", o->name,
				 value);
			return -EINVAL;
		}
		if (check_range(o, v, value, err, errlen))
			return -EINVAL;
		*(double *)o->target = v;
		return 0;
	}
	case SYSOM_OPT_SIZE: {
		uint64_t v;
		if (sysom_parse_size(value, &v)) {
			snprintf(err, errlen, "%s: '%s' is not a size (e.g. 64M, 1G)", o->name, value);
			return -EINVAL;
		}
		if (check_range(o, (double)v, value, err, errlen))
			return -EINVAL;
		*(uint64_t *)o->target = v;
		return 0;
	}
	}
	return -EINVAL;
}

int sysom_option_set(const struct sysom_option *table, size_t n, const char *name,
		     const char *value, char *err, size_t errlen)
{
	const struct sysom_option *o = find(table, n, name, strlen(name));

	if (!o) {
		snprintf(err, errlen, "unknown option '%s'", name);
		return -ENOENT;
	}
	return apply(o, value, err, errlen);
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	return s;
}

int sysom_options_load_text(const struct sysom_option *table, size_t n, const char *text,
			    size_t len, const char *origin, char *err, size_t errlen)
{
	char *copy = malloc(len + 1);
	char *line, *next;
	unsigned lineno = 0;
	int rc = 0;

	if (!copy)
		return -ENOMEM;
	memcpy(copy, text, len);
	copy[len] = '\0';
	if (memchr(text, '\0', len)) {
		snprintf(err, errlen, "%s: contains a NUL byte", origin);
		rc = -SYSOM_ECONFIG;
		goto cleanup;
	}
	for (line = copy; line; line = next) {
		char detail[256];
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		lineno++;
		/* A comment starts at the first '#' outside double quotes. */
		bool quoted = false;
		for (char *p = line; *p; p++) {
			if (*p == '"')
				quoted = !quoted;
			else if (*p == '#' && !quoted) {
				*p = '\0';
				break;
			}
		}
		char *s = trim(line);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, errlen, "%s:%u: expected 'key = value'", origin, lineno);
			rc = -SYSOM_ECONFIG;
			goto cleanup;
		}
		*eq = '\0';
		char *key = trim(s);
		char *value = trim(eq + 1);
		size_t vlen = strlen(value);
		if (vlen >= 2 && value[0] == '"') {
			if (value[vlen - 1] != '"') {
				snprintf(err, errlen, "%s:%u: unterminated quoted value", origin, lineno);
				rc = -SYSOM_ECONFIG;
				goto cleanup;
			}
			value[vlen - 1] = '\0';
			value++;
		}
		const struct sysom_option *o = find(table, n, key, strlen(key));
		if (!o || o->cli_only) {
			snprintf(err, errlen, "%s:%u: unknown key '%s'", origin, lineno, key);
			rc = -SYSOM_ECONFIG;
			goto cleanup;
		}
		if (apply(o, value, detail, sizeof(detail))) {
			snprintf(err, errlen, "%s:%u: %s", origin, lineno, detail);
			rc = -SYSOM_ECONFIG;
			goto cleanup;
		}
	}
cleanup:
	free(copy);
	return rc;
}

int sysom_options_load_file(const struct sysom_option *table, size_t n, const char *path,
			    char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	char *text = NULL;
	size_t len = 0;
	struct stat st;
	int rc;

	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, sysom_strerror(rc));
		return rc;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > CONFIG_FILE_MAX) {
		snprintf(err, errlen, "%s: not a regular file of at most %d bytes", path,
			 CONFIG_FILE_MAX);
		rc = -SYSOM_ECONFIG;
		goto cleanup;
	}
	text = malloc((size_t)st.st_size + 1);
	if (!text) {
		rc = -ENOMEM;
		goto cleanup;
	}
	while (len < (size_t)st.st_size) {
		ssize_t r = read(fd, text + len, (size_t)st.st_size - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			snprintf(err, errlen, "%s: %s", path, sysom_strerror(rc));
			goto cleanup;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	rc = sysom_options_load_text(table, n, text, len, path, err, errlen);
cleanup:
	free(text);
	close(fd);
	return rc;
}

int sysom_options_parse_argv(const struct sysom_option *table, size_t n, int argc,
			     char *const argv[], char *err, size_t errlen)
{
	int i;

	for (i = 1; i < argc; i++) {
		const char *arg = argv[i];
		char detail[256];

		if (strcmp(arg, "--") == 0)
			return i + 1;
		if (strncmp(arg, "--", 2) != 0)
			return i;
		const char *name = arg + 2;
		const char *eq = strchr(name, '=');
		size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
		const struct sysom_option *o = find(table, n, name, nlen);
		if (!o) {
			snprintf(err, errlen, "unknown flag '--%.*s' (see --help)", (int)nlen, name);
			return -SYSOM_ECONFIG;
		}
		const char *value;
		if (eq) {
			value = eq + 1;
		} else if (o->type == SYSOM_OPT_BOOL) {
			value = "true";
		} else if (i + 1 < argc) {
			value = argv[++i];
		} else {
			snprintf(err, errlen, "flag '--%s' needs a value", o->name);
			return -SYSOM_ECONFIG;
		}
		if (apply(o, value, detail, sizeof(detail))) {
			snprintf(err, errlen, "--%s", detail);
			return -SYSOM_ECONFIG;
		}
	}
	return i;
}

const char *sysom_options_peek_argv(int argc, char *const argv[], const char *name)
{
	size_t nlen = strlen(name);

	/* Without the table we cannot tell flag values from flags, so look at every argument
	 * up to "--"; a value that happens to read "--NAME" is not a supported spelling. */
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (strcmp(arg, "--") == 0)
			return NULL;
		if (strncmp(arg, "--", 2) != 0 || strncmp(arg + 2, name, nlen) != 0)
			continue;
		if (arg[2 + nlen] == '=')
			return arg + 3 + nlen;
		if (arg[2 + nlen] == '\0' && i + 1 < argc)
			return argv[i + 1];
	}
	return NULL;
}

void sysom_options_print_help(const struct sysom_option *table, size_t n, void *out)
{
	static const char *const placeholder[] = {
		[SYSOM_OPT_STRING] = "TEXT", [SYSOM_OPT_UINT] = "N",   [SYSOM_OPT_DOUBLE] = "X",
		[SYSOM_OPT_BOOL] = "",       [SYSOM_OPT_DURATION] = "DURATION", [SYSOM_OPT_SIZE] = "SIZE",
	};

	for (size_t i = 0; i < n; i++) {
		char flag[64];
		snprintf(flag, sizeof(flag), "--%s %s", table[i].name, placeholder[table[i].type]);
		fprintf(out, "  %-28s %s\n", flag, table[i].help);
	}
}

void sysom_options_free(const struct sysom_option *table, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (table[i].type == SYSOM_OPT_STRING) {
			free(*(char **)table[i].target);
			*(char **)table[i].target = NULL;
		}
	}
}
