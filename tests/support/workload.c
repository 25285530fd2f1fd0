/* SPDX-License-Identifier: Apache-2.0 */
/* Test support: the chain_workload fixture as a child process with known function ranges. */
#include "tests/support/workload.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

const char *fixture_path(const char *name)
{
	static char path[PATH_MAX];
	const char *build = getenv("SYSOM_BUILD");

	snprintf(path, sizeof(path), "%s/tests/fixtures/%s", build ? build : "build", name);
	return path;
}

int workload_read_line(int fd, char *buf, size_t size, int timeout_ms)
{
	size_t len = 0;

	while (len + 1 < size) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, timeout_ms);
		if (r == 0)
			return -ETIMEDOUT;
		if (r < 0)
			return -errno;
		ssize_t n = read(fd, buf + len, 1);
		if (n <= 0)
			return n == 0 ? -EPIPE : -errno;
		if (buf[len] == '\n')
			break;
		len++;
	}
	buf[len] = '\0';
	return (int)len;
}

/* Sizes from `nm -S`, matched by name; the runtime start comes from the banner. */
static void fill_sizes(struct workload *w, const char *binary, uint64_t *link_addr)
{
	char cmd[PATH_MAX + 64], line[512];

	snprintf(cmd, sizeof(cmd), "nm -S --defined-only '%s'", binary);
	FILE *nm = popen(cmd, "r");
	if (!nm)
		return;
	while (fgets(line, sizeof(line), nm)) {
		unsigned long long addr, size;
		char type, name[256];
		if (sscanf(line, "%llx %llx %c %255s", &addr, &size, &type, name) != 4)
			continue;
		int i = workload_function_index(w, name);
		if (i >= 0) {
			w->functions[i].end = w->functions[i].start + size;
			link_addr[i] = addr;
		}
	}
	pclose(nm);
}

int workload_spawn(struct workload *w, const char *binary, double seconds,
		   const char *const *args)
{
	char secs[32];
	const char *argv[32];
	int pipefd[2], argc = 0, rc;

	memset(w, 0, sizeof(*w));
	w->pid = -1;
	w->stdout_fd = -1;
	snprintf(secs, sizeof(secs), "%.3f", seconds);
	argv[argc++] = binary;
	argv[argc++] = secs;
	for (int i = 0; args && args[i] && argc < 30; i++)
		argv[argc++] = args[i];
	argv[argc] = NULL;
	if (pipe2(pipefd, O_CLOEXEC))
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		rc = -errno;
		close(pipefd[0]);
		close(pipefd[1]);
		return rc;
	}
	if (pid == 0) {
		dup2(pipefd[1], STDOUT_FILENO);
		execv(binary, (char *const *)argv);
		_exit(127);
	}
	close(pipefd[1]);
	w->pid = pid;
	w->stdout_fd = pipefd[0];
	return 0;
}

int workload_start(struct workload *w, double seconds, const char *const *args)
{
	const char *binary = fixture_path("chain_workload");
	char line[256];
	int rc;
	uint64_t link_addr[WORKLOAD_MAX_FUNCTIONS] = { 0 };

	if ((rc = workload_spawn(w, binary, seconds, args)))
		return rc;
	for (;;) {
		rc = workload_read_line(w->stdout_fd, line, sizeof(line), 10000);
		if (rc < 0)
			goto fail;
		if (strcmp(line, "end") == 0)
			break;
		char name[64];
		unsigned long long addr;
		if (sscanf(line, "fn %63s %llx", name, &addr) == 2 &&
		    w->function_count < WORKLOAD_MAX_FUNCTIONS) {
			struct workload_function *f = &w->functions[w->function_count++];
			snprintf(f->name, sizeof(f->name), "%s", name);
			f->start = addr;
			f->end = addr + 1;
		}
	}
	fill_sizes(w, binary, link_addr);
	return 0;
fail:
	workload_stop(w);
	return rc;
}

int workload_wait(struct workload *w)
{
	int status;

	if (w->pid <= 0)
		return -ECHILD;
	if (waitpid(w->pid, &status, 0) < 0)
		return -errno;
	w->pid = -1;
	if (w->stdout_fd > 0)
		close(w->stdout_fd);
	w->stdout_fd = -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void workload_stop(struct workload *w)
{
	if (w->pid > 0) {
		kill(w->pid, SIGKILL);
		waitpid(w->pid, NULL, 0);
		w->pid = -1;
	}
	if (w->stdout_fd > 0)
		close(w->stdout_fd);
	w->stdout_fd = -1;
}

int workload_function_at(const struct workload *w, uint64_t addr)
{
	for (int i = 0; i < w->function_count; i++)
		if (addr >= w->functions[i].start && addr < w->functions[i].end)
			return i;
	return -1;
}

int workload_function_index(const struct workload *w, const char *name)
{
	for (int i = 0; i < w->function_count; i++)
		if (strcmp(w->functions[i].name, name) == 0)
			return i;
	return -1;
}

double workload_cpu_seconds(const struct workload *w)
{
	char path[64], text[1024];
	unsigned long long utime, stime;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)w->pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	char *p = strrchr(text, ')');
	if (!p)
		return -1;
	/* fields after ")": state(3) ... utime(14) stime(15) */
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
		   &stime) != 2)
		return -1;
	return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}
