/* SPDX-License-Identifier: Apache-2.0 */
/* GPU health from NVML (dlopen) and Xid events from the kernel log: see nvml.h. */
#include "agent/gpu/nvml.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/gpu/nvml_abi.h"

#define RETIRED_PAGES_BUF 64 /* addresses asked for; more pages are counted, not listed */

struct nvml_api {
	nvmlInit_v2_fn init;
	nvmlShutdown_fn shutdown;
	nvmlErrorString_fn error_string;
	nvmlDeviceGetCount_v2_fn count;
	nvmlDeviceGetHandleByIndex_v2_fn handle;
	nvmlDeviceGetUUID_fn uuid;
	nvmlDeviceGetName_fn name;
	nvmlDeviceGetMinorNumber_fn minor; /* /dev/nvidia<minor>: a process's open GPU */
	nvmlDeviceGetPciInfo_v3_fn pci;
	nvmlDeviceGetClockInfo_fn clock;
	nvmlDeviceGetMaxClockInfo_fn max_clock;
	nvmlDeviceGetCurrentClocksReasons_fn reasons; /* EventReasons, else ThrottleReasons */
	nvmlDeviceGetTemperature_fn temp;
	nvmlDeviceGetTemperatureThreshold_fn temp_threshold;
	nvmlDeviceGetPowerUsage_fn power;
	nvmlDeviceGetEnforcedPowerLimit_fn power_limit;
	nvmlDeviceGetUtilizationRates_fn util;
	nvmlDeviceGetTotalEccErrors_fn ecc;
	nvmlDeviceGetRetiredPages_fn retired;
	nvmlDeviceGetRetiredPagesPendingStatus_fn retired_pending;
	nvmlDeviceGetRemappedRows_fn remapped;
	nvmlDeviceGetPcieReplayCounter_fn pcie_replay;
	nvmlDeviceGetNvLinkState_fn nvlink_state;
	nvmlDeviceGetNvLinkErrorCounter_fn nvlink_errors;
};

struct gpu {
	nvmlDevice_t handle;
	char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	char bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
	char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
	bool has_bus;
	uint32_t domain, bus, dev;
	bool has_minor;
	uint32_t minor;
	uint32_t sm_max, mem_max, temp_slowdown, temp_shutdown; /* read once */
	uint32_t nvlinks;    /* bit per link that answered its state */
	bool remapped_rows;  /* GetRemappedRows works (Ampere and later): no retired pages */
	struct sysom_gpu_health w; /* the open window */
};

struct nvml {
	void *dl;
	struct nvml_api api;
	bool initialised;
	struct gpu *gpus;
	uint32_t ngpus;
	int kmsg_fd;
	char line[NVML_KMSG_LINE_MAX];
	size_t line_len;
	bool line_cut;
	struct nvml_window_counters c;
	struct sysom_reporter report;
};

/* ---- Xid lines -------------------------------------------------------------------------------- */

static const char *find_in(const char *s, size_t len, const char *needle)
{
	size_t n = strlen(needle);

	for (size_t i = 0; i + n <= len; i++)
		if (!memcmp(s + i, needle, n))
			return s + i;
	return NULL;
}

/* Hex digits at *p (at most `max`), into *v; advances. false when none. */
static bool hex_field(const char **p, const char *end, unsigned max, uint32_t *v)
{
	unsigned n = 0;

	*v = 0;
	while (*p < end && n < max && isxdigit((unsigned char)**p)) {
		char c = **p;
		*v = *v * 16 + (uint32_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
		(*p)++;
		n++;
	}
	return n > 0 && !(*p < end && isxdigit((unsigned char)**p));
}

int nvml_parse_xid(const char *line, size_t len, uint32_t *domain, uint32_t *bus, uint32_t *dev,
		   uint32_t *xid)
{
	const char *p = find_in(line, len, "NVRM: Xid (PCI:"), *end = line + len;
	uint32_t d, b, v;
	uint64_t code = 0;
	unsigned digits = 0;

	if (!p)
		return 0;
	p += strlen("NVRM: Xid (PCI:");
	/* "0000:3b:00" (domain:bus:device), sometimes with ".0" */
	if (!hex_field(&p, end, 8, &d) || p >= end || *p++ != ':' || !hex_field(&p, end, 2, &b) ||
	    p >= end || *p++ != ':' || !hex_field(&p, end, 2, &v))
		return -EINVAL;
	if (p < end && *p == '.') {
		uint32_t fn;
		p++;
		if (!hex_field(&p, end, 1, &fn))
			return -EINVAL;
	}
	if (end - p < 3 || p[0] != ')' || p[1] != ':' || p[2] != ' ')
		return -EINVAL;
	p += 3;
	while (p < end && *p >= '0' && *p <= '9' && digits < 6) {
		code = code * 10 + (uint64_t)(*p++ - '0');
		digits++;
	}
	if (!digits || (p < end && *p >= '0' && *p <= '9') || code == 0)
		return -EINVAL;
	*domain = d;
	*bus = b;
	*dev = v;
	*xid = (uint32_t)code;
	return 1;
}

int nvml_parse_bus_id(const char *s, uint32_t *domain, uint32_t *bus, uint32_t *dev)
{
	const char *p = s, *end = s + strnlen(s, NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE);

	if (!hex_field(&p, end, 8, domain) || p >= end || *p++ != ':' ||
	    !hex_field(&p, end, 2, bus) || p >= end || *p++ != ':' || !hex_field(&p, end, 2, dev))
		return -EINVAL;
	return 0;
}

static void xid_line(struct nvml *n, const char *line, size_t len)
{
	uint32_t d, b, v, code;
	int rc = nvml_parse_xid(line, len, &d, &b, &v, &code);

	if (rc == 0)
		return;
	if (rc < 0) {
		n->c.xid_unmatched++;
		return;
	}
	for (uint32_t i = 0; i < n->ngpus; i++) {
		struct gpu *g = &n->gpus[i];

		if (g->has_bus && g->domain == d && g->bus == b && g->dev == v) {
			g->w.xid_count++;
			g->w.xid_last = code;
			n->c.xid++;
			sysom_report(&n->report, SYSOM_REPORT_WARN, "GPU %u (%s): Xid %u", i, g->bus_id,
				     code);
			return;
		}
	}
	n->c.xid_unmatched++;
}

/* New kernel log lines: /dev/kmsg gives one record per read (EAGAIN when none is left, EPIPE
 * when records were overwritten before we read them); a plain file gives bytes, split here. */
static void read_kmsg(struct nvml *n)
{
	char buf[8192];

	if (n->kmsg_fd < 0)
		return;
	for (unsigned reads = 0; reads < NVML_XID_LINES_PER_READ; reads++) {
		ssize_t got = read(n->kmsg_fd, buf, sizeof(buf));

		if (got < 0) {
			if (errno == EPIPE) {
				n->c.xid_unmatched++;
				continue;
			}
			if (errno == EINTR)
				continue;
			return; /* EAGAIN: nothing more */
		}
		if (got == 0)
			return;
		for (ssize_t i = 0; i < got; i++) {
			if (buf[i] == '\n') {
				xid_line(n, n->line, n->line_len);
				n->line_len = 0;
				n->line_cut = false;
			} else if (n->line_len < sizeof(n->line)) {
				n->line[n->line_len++] = buf[i];
			} else {
				n->line_cut = true;
			}
		}
	}
}

/* ---- opening ---------------------------------------------------------------------------------- */

static const char *nvml_err(const struct nvml *n, nvmlReturn_t rc)
{
	const char *s = n->api.error_string ? n->api.error_string(rc) : NULL;

	return s ? s : "NVML error";
}

#define SYM(field, name) (*(void **)&n->api.field = dlsym(n->dl, name))

static void window_reset(struct gpu *g, uint32_t index)
{
	memset(&g->w, 0, sizeof(g->w));
	g->w.device = index;
	g->w.reasons_any = g->w.reasons_last = SYSOM_GPU_UNKNOWN64;
	g->w.sm_clock_min = g->w.sm_clock_last = SYSOM_GPU_UNKNOWN;
	g->w.mem_clock_last = SYSOM_GPU_UNKNOWN;
	g->w.temp_max = g->w.temp_last = SYSOM_GPU_UNKNOWN;
	g->w.power_max_mw = g->w.power_last_mw = g->w.power_limit_mw = SYSOM_GPU_UNKNOWN;
	g->w.util_gpu = g->w.util_mem = SYSOM_GPU_UNKNOWN;
}

/* Counts a failed query (not "not supported", which is normal) and says whether it worked. */
static bool ok(struct nvml *n, nvmlReturn_t rc)
{
	if (rc == NVML_SUCCESS)
		return true;
	if (rc != NVML_ERROR_NOT_SUPPORTED)
		n->c.errors++;
	return false;
}

static void open_gpu(struct nvml *n, uint32_t i)
{
	struct gpu *g = &n->gpus[i];
	nvmlPciInfo_t pci;
	unsigned int v;

	g->sm_max = g->mem_max = g->temp_slowdown = g->temp_shutdown = SYSOM_GPU_UNKNOWN;
	window_reset(g, i);
	if (!ok(n, n->api.handle(i, &g->handle))) {
		g->handle = NULL;
		return;
	}
	if (n->api.uuid && ok(n, n->api.uuid(g->handle, g->uuid, sizeof(g->uuid))))
		g->uuid[sizeof(g->uuid) - 1] = '\0';
	else
		g->uuid[0] = '\0';
	if (n->api.name && ok(n, n->api.name(g->handle, g->name, sizeof(g->name))))
		g->name[sizeof(g->name) - 1] = '\0';
	else
		g->name[0] = '\0';
	if (n->api.minor && ok(n, n->api.minor(g->handle, &v))) {
		g->has_minor = true;
		g->minor = v;
	}
	memset(&pci, 0, sizeof(pci));
	if (n->api.pci && ok(n, n->api.pci(g->handle, &pci))) {
		pci.busId[sizeof(pci.busId) - 1] = '\0';
		snprintf(g->bus_id, sizeof(g->bus_id), "%s", pci.busId);
		g->has_bus = nvml_parse_bus_id(g->bus_id, &g->domain, &g->bus, &g->dev) == 0;
	}
	if (n->api.max_clock && ok(n, n->api.max_clock(g->handle, NVML_CLOCK_SM, &v)))
		g->sm_max = v;
	if (n->api.max_clock && ok(n, n->api.max_clock(g->handle, NVML_CLOCK_MEM, &v)))
		g->mem_max = v;
	if (n->api.temp_threshold &&
	    ok(n, n->api.temp_threshold(g->handle, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, &v)))
		g->temp_slowdown = v;
	if (n->api.temp_threshold &&
	    ok(n, n->api.temp_threshold(g->handle, NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, &v)))
		g->temp_shutdown = v;
	if (n->api.nvlink_state && n->api.nvlink_errors) {
		for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
			int active = 0;
			if (n->api.nvlink_state(g->handle, l, &active) == NVML_SUCCESS)
				g->nvlinks |= 1u << l;
		}
	}
	if (n->api.remapped) {
		unsigned int c, u, p, f;
		g->remapped_rows = n->api.remapped(g->handle, &c, &u, &p, &f) == NVML_SUCCESS;
	}
}

int nvml_open(const struct nvml_options *o, struct nvml **out, char *err, size_t errlen)
{
	const char *lib = o && o->library && *o->library ? o->library : NVML_DEFAULT_LIBRARY;
	const char *kmsg = o && o->kmsg ? o->kmsg : NVML_DEFAULT_KMSG;
	struct nvml *n;
	unsigned int count = 0;
	nvmlReturn_t rc;
	int ret;

	*out = NULL;
	if (!(n = calloc(1, sizeof(*n))))
		return -ENOMEM;
	n->kmsg_fd = -1;
	if (o)
		n->report = o->report;
	if (!(n->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL))) {
		snprintf(err, errlen, "%s not loadable: %s", lib, dlerror());
		ret = -ENOENT;
		goto cleanup;
	}
	SYM(init, "nvmlInit_v2");
	SYM(shutdown, "nvmlShutdown");
	SYM(error_string, "nvmlErrorString");
	SYM(count, "nvmlDeviceGetCount_v2");
	SYM(handle, "nvmlDeviceGetHandleByIndex_v2");
	SYM(uuid, "nvmlDeviceGetUUID");
	SYM(name, "nvmlDeviceGetName");
	SYM(minor, "nvmlDeviceGetMinorNumber");
	SYM(pci, "nvmlDeviceGetPciInfo_v3");
	SYM(clock, "nvmlDeviceGetClockInfo");
	SYM(max_clock, "nvmlDeviceGetMaxClockInfo");
	if (!SYM(reasons, "nvmlDeviceGetCurrentClocksEventReasons"))
		SYM(reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
	SYM(temp, "nvmlDeviceGetTemperature");
	SYM(temp_threshold, "nvmlDeviceGetTemperatureThreshold");
	SYM(power, "nvmlDeviceGetPowerUsage");
	SYM(power_limit, "nvmlDeviceGetEnforcedPowerLimit");
	SYM(util, "nvmlDeviceGetUtilizationRates");
	SYM(ecc, "nvmlDeviceGetTotalEccErrors");
	SYM(retired, "nvmlDeviceGetRetiredPages");
	SYM(retired_pending, "nvmlDeviceGetRetiredPagesPendingStatus");
	SYM(remapped, "nvmlDeviceGetRemappedRows");
	SYM(pcie_replay, "nvmlDeviceGetPcieReplayCounter");
	SYM(nvlink_state, "nvmlDeviceGetNvLinkState");
	SYM(nvlink_errors, "nvmlDeviceGetNvLinkErrorCounter");
	if (!n->api.init || !n->api.count || !n->api.handle) {
		snprintf(err, errlen, "%s lacks nvmlInit_v2/nvmlDeviceGetCount_v2/"
			 "nvmlDeviceGetHandleByIndex_v2: not NVML", lib);
		ret = -ENOENT;
		goto cleanup;
	}
	if ((rc = n->api.init()) != NVML_SUCCESS) {
		snprintf(err, errlen, "nvmlInit_v2: %s (%d)", nvml_err(n, rc), rc);
		ret = -ENODEV;
		goto cleanup;
	}
	n->initialised = true;
	if ((rc = n->api.count(&count)) != NVML_SUCCESS || count == 0) {
		snprintf(err, errlen, "nvmlDeviceGetCount_v2: %s",
			 rc ? nvml_err(n, rc) : "no GPU");
		ret = -ENODEV;
		goto cleanup;
	}
	if (count > SYSOM_GPU_MAX_DEVICES) {
		sysom_report(&n->report, SYSOM_REPORT_WARN, "NVML: %u GPUs, only the first %u read",
			     count, SYSOM_GPU_MAX_DEVICES);
		count = SYSOM_GPU_MAX_DEVICES;
	}
	if (!(n->gpus = calloc(count, sizeof(*n->gpus)))) {
		ret = -ENOMEM;
		goto cleanup;
	}
	n->ngpus = count;
	for (uint32_t i = 0; i < count; i++)
		open_gpu(n, i);
	if (*kmsg) {
		n->kmsg_fd = open(kmsg, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
		if (n->kmsg_fd < 0)
			sysom_report(&n->report, SYSOM_REPORT_WARN,
				     "cannot read %s (%s): no Xid events", kmsg, strerror(errno));
		else if (!(o && o->kmsg_from_start))
			lseek(n->kmsg_fd, 0, SEEK_END);
	}
	*out = n;
	return 0;
cleanup:
	nvml_close(n);
	return ret;
}

void nvml_close(struct nvml *n)
{
	if (!n)
		return;
	if (n->initialised && n->api.shutdown)
		n->api.shutdown();
	if (n->dl)
		dlclose(n->dl);
	if (n->kmsg_fd >= 0)
		close(n->kmsg_fd);
	free(n->gpus);
	free(n);
}

uint32_t nvml_device_count(const struct nvml *n)
{
	return n ? n->ngpus : 0;
}

uint32_t nvml_devices(const struct nvml *n, struct gpumap_device *out, uint32_t max)
{
	uint32_t count = n ? (n->ngpus < max ? n->ngpus : max) : 0;

	for (uint32_t i = 0; i < count; i++) {
		const struct gpu *g = &n->gpus[i];
		out[i].has_minor = g->handle && g->has_minor;
		out[i].minor = g->minor;
		snprintf(out[i].uuid, sizeof(out[i].uuid), "%s", g->handle ? g->uuid : "");
	}
	return count;
}

/* ---- sampling --------------------------------------------------------------------------------- */

static void sample_gpu(struct nvml *n, struct gpu *g)
{
	struct sysom_gpu_health *w = &g->w;
	unsigned long long reasons;
	nvmlUtilization_t u;
	unsigned int v;

	if (!g->handle)
		return;
	w->samples++;
	n->c.samples++;
	if (n->api.reasons && ok(n, n->api.reasons(g->handle, &reasons))) {
		if (w->reasons_any == SYSOM_GPU_UNKNOWN64)
			w->reasons_any = 0;
		w->reasons_any |= reasons;
		w->reasons_last = reasons;
		if (reasons & SYSOM_GPU_REASONS_SLOWDOWN)
			w->slowdown_samples++;
	} else if (w->reasons_any != SYSOM_GPU_UNKNOWN64) {
		w->reasons_last = 0; /* keep "last among any"; this sample's reasons are unknown */
	}
	if (n->api.clock && ok(n, n->api.clock(g->handle, NVML_CLOCK_SM, &v)) &&
	    v != SYSOM_GPU_UNKNOWN) {
		if (w->sm_clock_min == SYSOM_GPU_UNKNOWN || v < w->sm_clock_min)
			w->sm_clock_min = v;
		w->sm_clock_last = v;
		if (w->sm_clock_min > w->sm_clock_last)
			w->sm_clock_min = v;
	}
	if (n->api.clock && ok(n, n->api.clock(g->handle, NVML_CLOCK_MEM, &v)))
		w->mem_clock_last = v;
	if (n->api.temp && ok(n, n->api.temp(g->handle, NVML_TEMPERATURE_GPU, &v)) &&
	    v != SYSOM_GPU_UNKNOWN) {
		if (w->temp_max == SYSOM_GPU_UNKNOWN || v > w->temp_max)
			w->temp_max = v;
		w->temp_last = v;
	}
	if (n->api.power && ok(n, n->api.power(g->handle, &v)) && v != SYSOM_GPU_UNKNOWN) {
		if (w->power_max_mw == SYSOM_GPU_UNKNOWN || v > w->power_max_mw)
			w->power_max_mw = v;
		w->power_last_mw = v;
	}
	if (n->api.power_limit && ok(n, n->api.power_limit(g->handle, &v)))
		w->power_limit_mw = v;
	if (n->api.util && ok(n, n->api.util(g->handle, &u)) && u.gpu <= 100 && u.memory <= 100) {
		w->util_gpu = u.gpu;
		w->util_mem = u.memory;
	}
}

void nvml_sample(struct nvml *n)
{
	if (!n)
		return;
	for (uint32_t i = 0; i < n->ngpus; i++)
		sample_gpu(n, &n->gpus[i]);
	read_kmsg(n);
}

static void read_counters(struct nvml *n, struct gpu *g)
{
	struct sysom_gpu_health *w = &g->w;
	unsigned long long v64, addrs[RETIRED_PAGES_BUF];
	unsigned int v;

	w->sm_clock_max = g->sm_max;
	w->mem_clock_max = g->mem_max;
	w->temp_slowdown = g->temp_slowdown;
	w->temp_shutdown = g->temp_shutdown;
	w->ecc_corrected = w->ecc_uncorrected = SYSOM_GPU_UNKNOWN64;
	w->retired_sbe = w->retired_dbe = w->pcie_replays = SYSOM_GPU_UNKNOWN;
	w->nvlink_errors = SYSOM_GPU_UNKNOWN64;
	w->flags = 0;
	if (n->api.ecc &&
	    ok(n, n->api.ecc(g->handle, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &v64)))
		w->ecc_corrected = v64;
	if (n->api.ecc &&
	    ok(n, n->api.ecc(g->handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &v64)))
		w->ecc_uncorrected = v64;
	if (g->remapped_rows) {
		unsigned int c, u, p, f;
		if (ok(n, n->api.remapped(g->handle, &c, &u, &p, &f))) {
			w->flags |= SYSOM_GPU_REMAPPED_ROWS | (p ? SYSOM_GPU_RETIRE_PENDING : 0) |
				    (f ? SYSOM_GPU_REMAP_FAILED : 0);
			w->retired_sbe = c;
			w->retired_dbe = u;
		}
	} else if (n->api.retired) {
		const int causes[2] = { NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
					NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR };
		uint32_t *dst[2] = { &w->retired_sbe, &w->retired_dbe };

		for (int k = 0; k < 2; k++) {
			unsigned int count = RETIRED_PAGES_BUF;
			nvmlReturn_t rc = n->api.retired(g->handle, causes[k], &count, addrs);

			if (rc == NVML_SUCCESS || rc == NVML_ERROR_INSUFFICIENT_SIZE)
				*dst[k] = count; /* INSUFFICIENT_SIZE sets the needed count */
			else
				ok(n, rc);
		}
		int pending = 0;
		if (n->api.retired_pending &&
		    n->api.retired_pending(g->handle, &pending) == NVML_SUCCESS && pending)
			w->flags |= SYSOM_GPU_RETIRE_PENDING;
	}
	if (n->api.pcie_replay && ok(n, n->api.pcie_replay(g->handle, &v)))
		w->pcie_replays = v;
	if (g->nvlinks) {
		uint64_t sum = 0;
		bool any = false;

		for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
			if (!(g->nvlinks & (1u << l)))
				continue;
			for (int c = 0; c < NVML_NVLINK_ERROR_COUNT; c++) {
				if (n->api.nvlink_errors(g->handle, l, c, &v64) == NVML_SUCCESS) {
					sum += v64;
					any = true;
				}
			}
		}
		if (any)
			w->nvlink_errors = sum;
	}
}

void nvml_collect(struct nvml *n, nvml_visit_fn fn, void *ctx, struct nvml_window_counters *c)
{
	if (!n) {
		if (c)
			memset(c, 0, sizeof(*c));
		return;
	}
	read_kmsg(n);
	for (uint32_t i = 0; i < n->ngpus; i++) {
		struct gpu *g = &n->gpus[i];
		struct nvml_gpu_window w;

		if (!g->handle || !g->w.samples) {
			window_reset(g, i);
			continue;
		}
		read_counters(n, g);
		w.h = g->w;
		w.uuid = g->uuid;
		w.pci_bus_id = g->bus_id;
		w.name = g->name;
		if (fn)
			fn(ctx, &w);
		window_reset(g, i);
	}
	if (c)
		*c = n->c;
	memset(&n->c, 0, sizeof(n->c));
}

/* ---- the probe -------------------------------------------------------------------------------- */

static void json_str(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(out, "\\%c", ch);
		else if (ch < 0x20 || ch > 0x7e)
			fprintf(out, "\\u%04x", ch);
		else
			fputc(ch, out);
	}
	fputc('"', out);
}

static void json_u32(FILE *out, const char *key, uint32_t v, bool comma)
{
	if (v == SYSOM_GPU_UNKNOWN)
		fprintf(out, "\"%s\":null%s", key, comma ? "," : "");
	else
		fprintf(out, "\"%s\":%u%s", key, v, comma ? "," : "");
}

static void json_u64(FILE *out, const char *key, uint64_t v, bool comma)
{
	if (v == SYSOM_GPU_UNKNOWN64)
		fprintf(out, "\"%s\":null%s", key, comma ? "," : "");
	else
		fprintf(out, "\"%s\":%llu%s", key, (unsigned long long)v, comma ? "," : "");
}

struct probe_ctx {
	FILE *out;
	unsigned printed;
	const struct nvml *n;
};

static void probe_gpu(void *ctx, const struct nvml_gpu_window *w)
{
	struct probe_ctx *p = ctx;
	const struct sysom_gpu_health *h = &w->h;
	FILE *out = p->out;
	char reasons[256] = "";

	fprintf(out, "%s\n  {\"index\":%u,\"uuid\":", p->printed++ ? "," : "", h->device);
	json_str(out, w->uuid);
	fputs(",\"pci_bus_id\":", out);
	json_str(out, w->pci_bus_id);
	fputs(",\"name\":", out);
	json_str(out, w->name);
	/* The device file a process using this GPU holds open (agent/gpu/gpumap.h). */
	if (h->device < p->n->ngpus && p->n->gpus[h->device].has_minor)
		fprintf(out, ",\"device_file\":\"/dev/nvidia%u\"", p->n->gpus[h->device].minor);
	else
		fputs(",\"device_file\":null", out);
	fprintf(out, ",\"samples\":%u,\"slowdown_samples\":%u,", h->samples, h->slowdown_samples);
	json_u64(out, "reasons_any", h->reasons_any, true);
	json_u64(out, "reasons_last", h->reasons_last, true);
	if (h->reasons_any != SYSOM_GPU_UNKNOWN64)
		sysom_gpu_reasons_format(h->reasons_any, reasons, sizeof(reasons));
	fputs("\"reasons_any_names\":", out);
	json_str(out, reasons);
	fputc(',', out);
	json_u32(out, "sm_clock_min_mhz", h->sm_clock_min, true);
	json_u32(out, "sm_clock_last_mhz", h->sm_clock_last, true);
	json_u32(out, "sm_clock_max_mhz", h->sm_clock_max, true);
	json_u32(out, "mem_clock_last_mhz", h->mem_clock_last, true);
	json_u32(out, "mem_clock_max_mhz", h->mem_clock_max, true);
	json_u32(out, "temp_max_c", h->temp_max, true);
	json_u32(out, "temp_last_c", h->temp_last, true);
	json_u32(out, "temp_slowdown_c", h->temp_slowdown, true);
	json_u32(out, "temp_shutdown_c", h->temp_shutdown, true);
	json_u32(out, "power_max_mw", h->power_max_mw, true);
	json_u32(out, "power_last_mw", h->power_last_mw, true);
	json_u32(out, "power_limit_mw", h->power_limit_mw, true);
	json_u32(out, "util_gpu_pct", h->util_gpu, true);
	json_u32(out, "util_mem_pct", h->util_mem, true);
	json_u64(out, "ecc_volatile_corrected", h->ecc_corrected, true);
	json_u64(out, "ecc_volatile_uncorrected", h->ecc_uncorrected, true);
	if (h->flags & SYSOM_GPU_REMAPPED_ROWS) {
		json_u32(out, "remapped_rows_correctable", h->retired_sbe, true);
		json_u32(out, "remapped_rows_uncorrectable", h->retired_dbe, true);
	} else {
		json_u32(out, "retired_pages_sbe", h->retired_sbe, true);
		json_u32(out, "retired_pages_dbe", h->retired_dbe, true);
	}
	fprintf(out, "\"retire_pending\":%s,\"remap_failed\":%s,",
		h->flags & SYSOM_GPU_RETIRE_PENDING ? "true" : "false",
		h->flags & SYSOM_GPU_REMAP_FAILED ? "true" : "false");
	json_u32(out, "pcie_replays", h->pcie_replays, true);
	json_u64(out, "nvlink_errors", h->nvlink_errors, true);
	fprintf(out, "\"xid_count\":%u,\"xid_last\":%u}", h->xid_count, h->xid_last);
}

int nvml_probe(const struct nvml_options *o, unsigned samples, unsigned interval_ms, FILE *out)
{
	struct probe_ctx p = { out, 0, NULL };
	struct nvml_window_counters c;
	struct nvml *n;
	char err[512] = "";
	int rc;

	if ((rc = nvml_open(o, &n, err, sizeof(err)))) {
		fprintf(out, "{\"nvml\":\"%s\",\"error\":", rc == -ENOENT ? "absent" : "failed");
		json_str(out, err);
		fputs("}\n", out);
		return rc;
	}
	p.n = n;
	if (!samples)
		samples = 1;
	for (unsigned i = 0; i < samples; i++) {
		struct timespec ts = { interval_ms / 1000, (long)(interval_ms % 1000) * 1000000L };

		if (i)
			nanosleep(&ts, NULL);
		nvml_sample(n);
	}
	fprintf(out, "{\"nvml\":\"ok\",\"library\":");
	json_str(out, o && o->library && *o->library ? o->library : NVML_DEFAULT_LIBRARY);
	fprintf(out, ",\"reasons_function\":\"%s\",\"kmsg\":%s,\"devices\":%u,\"gpus\":[",
		dlsym(n->dl, "nvmlDeviceGetCurrentClocksEventReasons")
			? "nvmlDeviceGetCurrentClocksEventReasons"
			: n->api.reasons ? "nvmlDeviceGetCurrentClocksThrottleReasons" : "none",
		n->kmsg_fd >= 0 ? "true" : "false", n->ngpus);
	nvml_collect(n, probe_gpu, &p, &c);
	fprintf(out, "\n ],\"nvml_errors\":%llu,\"xid_events\":%llu,\"xid_unmatched\":%llu}\n",
		(unsigned long long)c.errors, (unsigned long long)c.xid,
		(unsigned long long)c.xid_unmatched);
	nvml_close(n);
	return 0;
}
