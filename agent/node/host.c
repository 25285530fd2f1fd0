/* SPDX-License-Identifier: Apache-2.0 */
/* Node identity, CPU lists and small file readers. */
#include "agent/node/host.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/clock.h"
#include "common/hash.h"

int host_read_text(const char *path, char *buf, size_t max)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t len = 0;
	int rc;

	if (max == 0)
		return -EINVAL;
	if (fd < 0)
		return -errno;
	ssize_t n = sysom_read_full(fd, buf, max - 1);
	if (n < 0) {
		rc = (int)n;
		goto cleanup;
	}
	len = (size_t)n;
	buf[len] = '\0';
	rc = (int)len;
cleanup:
	close(fd);
	return rc;
}

long host_read_file(const char *path, size_t max, char **out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t len = 0, cap = 4096;
	char *buf = NULL;
	long rc;

	if (fd < 0)
		return -errno;
	buf = malloc(cap + 1);
	if (!buf) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (;;) {
		if (len == cap) {
			if (cap >= max) {
				rc = -E2BIG;
				goto cleanup;
			}
			size_t grown_cap = cap * 2 > max ? max : cap * 2;
			char *grown = realloc(buf, grown_cap + 1);
			if (!grown) {
				rc = -ENOMEM;
				goto cleanup;
			}
			buf = grown;
			cap = grown_cap;
		}
		ssize_t n = sysom_read_full(fd, buf + len, cap - len);
		if (n < 0) {
			rc = n;
			goto cleanup;
		}
		len += (size_t)n;
		if (len < cap)
			break; /* end of file */
	}
	buf[len] = '\0';
	*out = buf;
	buf = NULL;
	rc = (long)len;
cleanup:
	free(buf);
	close(fd);
	return rc;
}

int host_parse_uuid(const char *text, uint8_t out[16])
{
	uint8_t bytes[16];
	int nibbles = 0;

	for (const char *p = text; *p && !isspace((unsigned char)*p); p++) {
		if (*p == '-')
			continue;
		if (!isxdigit((unsigned char)*p) || nibbles >= 32)
			return -EINVAL;
		int v = isdigit((unsigned char)*p) ? *p - '0' : tolower((unsigned char)*p) - 'a' + 10;
		if (nibbles % 2 == 0)
			bytes[nibbles / 2] = (uint8_t)(v << 4);
		else
			bytes[nibbles / 2] |= (uint8_t)v;
		nibbles++;
	}
	if (nibbles != 32)
		return -EINVAL;
	memcpy(out, bytes, 16);
	return 0;
}

int host_cpulist_parse(const char *text, uint64_t *out, uint32_t nbits)
{
	const char *p = text;
	int count = 0;

	memset(out, 0, ((size_t)nbits + 63) / 64 * sizeof(uint64_t));
	while (*p && *p != '\n') {
		char *end;
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		unsigned long first = strtoul(p, &end, 10), last = first;
		p = end;
		if (*p == '-') {
			p++;
			if (!isdigit((unsigned char)*p))
				return -EINVAL;
			last = strtoul(p, &end, 10);
			p = end;
		}
		if (last < first || last >= nbits)
			return -EINVAL;
		for (unsigned long cpu = first; cpu <= last; cpu++) {
			if (!(out[cpu / 64] & (1ULL << (cpu % 64))))
				count++;
			out[cpu / 64] |= 1ULL << (cpu % 64);
		}
		if (*p == ',')
			p++;
		else if (*p && *p != '\n')
			return -EINVAL;
	}
	return count;
}

int host_online_cpus(const char *path, uint64_t *out, uint32_t nbits)
{
	char text[4096];
	int rc = host_read_text(path ? path : "/sys/devices/system/cpu/online", text, sizeof(text));

	if (rc < 0)
		return rc;
	return host_cpulist_parse(text, out, nbits);
}

int host_identity_read(const char *machine_id_path, struct host_identity *out)
{
	struct host_identity id;
	struct utsname uts;
	char text[128];

	memset(&id, 0, sizeof(id));
	if (uname(&uts))
		return -errno;
	snprintf(id.kernel_release, sizeof(id.kernel_release), "%s", uts.release);
	snprintf(id.machine, sizeof(id.machine), "%s", uts.machine);
	if (gethostname(id.hostname, sizeof(id.hostname) - 1)) {
		_Static_assert(sizeof(id.hostname) > sizeof(uts.nodename), "hostname buffer");
		memcpy(id.hostname, uts.nodename, sizeof(uts.nodename));
	}

	/* The machine id names the node; without one, derive a stable id from the hostname. */
	if (host_read_text(machine_id_path ? machine_id_path : "/etc/machine-id", text,
			   sizeof(text)) < 0 ||
	    host_parse_uuid(text, id.node_id)) {
		uint64_t h1 = sysom_hash64(id.hostname, strlen(id.hostname), 0x5359534f4d);
		uint64_t h2 = sysom_hash64(id.hostname, strlen(id.hostname), h1);
		memcpy(id.node_id, &h1, 8);
		memcpy(id.node_id + 8, &h2, 8);
	}
	if (host_read_text("/proc/sys/kernel/random/boot_id", text, sizeof(text)) >= 0)
		host_parse_uuid(text, id.boot_id);

	uint64_t boot = sysom_boottime_ns();
	uint64_t now = sysom_realtime_ns();
	id.boot_time_realtime_ns = now > boot ? now - boot : 0;
	id.clock_ticks = sysconf(_SC_CLK_TCK);
	if (id.clock_ticks <= 0)
		id.clock_ticks = 100;
	*out = id;
	return 0;
}
