/* SPDX-License-Identifier: Apache-2.0 */
/* A rank's GPU as an NVML index: see gpumap.h. */
#include "agent/gpu/gpumap.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static bool blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Classifies one entry [p, p + len) (blanks already trimmed). */
static int classify(const char *p, size_t len, struct gpumap_cvd_entry *out)
{
	memset(out, 0, sizeof(*out));
	if (len == 0)
		return -EINVAL;
	if (len > 4 && strncasecmp(p, "GPU-", 4) == 0) {
		if (len >= sizeof(out->uuid))
			return -EINVAL;
		for (size_t i = 4; i < len; i++)
			if (!isxdigit((unsigned char)p[i]) && p[i] != '-')
				return -EINVAL;
		out->kind = GPUMAP_CVD_UUID;
		memcpy(out->uuid, p, len);
		out->uuid[len] = '\0';
		return 0;
	}
	if (len > 9) /* more devices than any node has; also no overflow */
		return -EINVAL;
	uint32_t v = 0;
	for (size_t i = 0; i < len; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -EINVAL; /* "-1", "MIG-...", anything else */
		v = v * 10 + (uint32_t)(p[i] - '0');
	}
	out->kind = GPUMAP_CVD_INDEX;
	out->index = v;
	return 0;
}

int gpumap_cvd_entry(const char *cvd, size_t len, uint32_t pos, struct gpumap_cvd_entry *out)
{
	size_t at = 0;

	if (!cvd)
		return -ENOENT;
	for (uint32_t i = 0;; i++) {
		const char *comma = memchr(cvd + at, ',', len - at);
		size_t end = comma ? (size_t)(comma - cvd) : len, b = at, e = end;
		int rc;

		while (b < e && blank(cvd[b]))
			b++;
		while (e > b && blank(cvd[e - 1]))
			e--;
		/* "" is an empty list, not an invalid first entry */
		if (i == 0 && !comma && b == e)
			return -ENOENT;
		if ((rc = classify(cvd + b, e - b, out)))
			return rc; /* this entry or one before the position is invalid */
		if (i == pos)
			return 0;
		if (!comma)
			return -ENOENT;
		at = end + 1;
	}
}

int gpumap_from_minor(const struct gpumap_device *devs, uint32_t n, uint32_t minor)
{
	for (uint32_t i = 0; i < n; i++)
		if (devs[i].has_minor && devs[i].minor == minor)
			return (int)i;
	return -1;
}

int gpumap_from_env(const struct gpumap_device *devs, uint32_t n, const struct gpumap_env *env,
		    int32_t local_rank, enum gpumap_how *how)
{
	struct gpumap_cvd_entry e;
	int found = -1;

	*how = GPUMAP_UNKNOWN;
	if (local_rank < 0)
		return -1;
	if (!env || !env->cvd_set) {
		if ((uint32_t)local_rank >= n)
			return -1;
		*how = GPUMAP_LOCAL_RANK;
		return local_rank;
	}
	if (env->cvd_too_long ||
	    gpumap_cvd_entry(env->cvd, strnlen(env->cvd, sizeof(env->cvd)), (uint32_t)local_rank,
			     &e))
		return -1;
	if (e.kind == GPUMAP_CVD_INDEX) {
		/* PCI_BUS_ID is NVML's order; FASTEST_FIRST is the same on a node of one model. */
		if (e.index >= n)
			return -1;
		found = (int)e.index;
	} else {
		size_t plen = strlen(e.uuid);
		for (uint32_t i = 0; i < n; i++) {
			if (strncasecmp(devs[i].uuid, e.uuid, plen) != 0)
				continue;
			if (found >= 0)
				return -1; /* an ambiguous prefix: CUDA refuses it too */
			found = (int)i;
		}
		if (found < 0)
			return -1;
	}
	*how = GPUMAP_VISIBLE_DEVICES;
	return found;
}

int gpumap_device_path(const char *path, uint32_t *minor)
{
	static const char prefix[] = "/dev/nvidia";
	const char *p = path;
	uint32_t v = 0;
	size_t digits = 0;

	if (strncmp(p, prefix, sizeof(prefix) - 1) != 0)
		return 0;
	p += sizeof(prefix) - 1;
	for (; *p >= '0' && *p <= '9'; p++, digits++) {
		if (digits >= 6)
			return 0;
		v = v * 10 + (uint32_t)(*p - '0');
	}
	/* nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset, nvidia-caps/...: no digits */
	if (!digits || *p || (digits > 1 && path[sizeof(prefix) - 1] == '0'))
		return 0;
	*minor = v;
	return 1;
}

int gpumap_scan_fds(const char *proc_root, uint32_t pid, uint32_t *minor)
{
	char dir[256], link[256 + 16], target[128];
	struct dirent *de;
	uint32_t seen = 0, m;
	bool several = false, any = false;
	unsigned looked = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/%u/fd", proc_root ? proc_root : "/proc", pid);
	if (!(d = opendir(dir)))
		return errno == ENOENT ? -ESRCH : -errno;
	while ((de = readdir(d)) && looked < GPUMAP_MAX_FDS) {
		ssize_t got;

		if (de->d_name[0] == '.')
			continue;
		looked++;
		if ((size_t)snprintf(link, sizeof(link), "%s/%.15s", dir, de->d_name) >= sizeof(link))
			continue;
		got = readlink(link, target, sizeof(target) - 1);
		if (got <= 0)
			continue; /* closed meanwhile */
		target[got] = '\0';
		if (!gpumap_device_path(target, &m))
			continue;
		if (any && m != seen)
			several = true;
		seen = m;
		any = true;
	}
	closedir(d);
	if (!any || several)
		return 0;
	*minor = seen;
	return 1;
}

const char *gpumap_how_name(enum gpumap_how how)
{
	switch (how) {
	case GPUMAP_DEVICE_FILE:
		return "device file";
	case GPUMAP_VISIBLE_DEVICES:
		return "CUDA_VISIBLE_DEVICES";
	case GPUMAP_LOCAL_RANK:
		return "local rank";
	case GPUMAP_UNKNOWN:
		break;
	}
	return "unknown";
}
