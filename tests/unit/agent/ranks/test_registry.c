/* SPDX-License-Identifier: Apache-2.0 */
/* Registration socket: message decoding, and the agent side against the real client library. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "agent/ranks/channel.h"
#include "agent/ranks/registry.h"
#include "client/sysom_channel.h"
#include "client/sysom_client.h"
#include "common/bytes.h"
#include "common/error.h"
#include "tests/support/batch_fixture.h"

/* ---------------------------------------------------------------------------------------- */
/* Decoding */

/* A record of `type` with `payload` into `buf`; returns its size. */
static size_t make_msg(uint8_t *buf, uint16_t type, const void *payload, size_t len)
{
	assert_int_equal(registry_encode_header(buf, type, len), 0);
	if (len)
		memcpy(buf + REGISTRY_HEADER_SIZE, payload, len);
	return REGISTRY_HEADER_SIZE + len;
}

/* A REGISTER record from a NULL-terminated list of entries (each followed by a NUL). */
static size_t make_register(uint8_t *buf, size_t size, const char *const *entries)
{
	size_t len = REGISTRY_HEADER_SIZE;

	for (int i = 0; entries[i]; i++) {
		size_t n = strlen(entries[i]) + 1;
		assert_true(len + n <= size);
		memcpy(buf + len, entries[i], n);
		len += n;
	}
	assert_int_equal(registry_encode_header(buf, REGISTRY_MSG_REGISTER,
						len - REGISTRY_HEADER_SIZE), 0);
	return len;
}

static int decode(const char *const *entries, struct job_identity *id, char *groups,
		  int32_t *pid)
{
	uint8_t buf[4096];
	size_t len = make_register(buf, sizeof(buf), entries);

	return registry_decode_register(buf, len, id, groups, REGISTRY_GROUPS_MAX, pid);
}

static void test_decode_valid(void **state)
{
	static const char *const entries[] = {
		"job=llama-70b-run3", "rank=5", "local_rank=1", "world_size=16",
		"local_world_size=8", "group_rank=0", "groups=tp=0,pp=1,dp=3", "pid=1234",
		"future_key=whatever", NULL
	};
	struct job_identity id;
	char groups[REGISTRY_GROUPS_MAX];
	int32_t pid;
	(void)state;

	assert_int_equal(decode(entries, &id, groups, &pid), 0);
	assert_true(id.has_rank);
	assert_string_equal(id.job_id, "llama-70b-run3");
	assert_string_equal(id.job_id_source, "registration");
	assert_int_equal(id.rank, 5);
	assert_int_equal(id.local_rank, 1);
	assert_int_equal(id.world_size, 16);
	assert_int_equal(id.local_world_size, 8);
	assert_int_equal(id.group_rank, 0);
	assert_int_equal(id.master_port, -1);
	assert_string_equal(id.master_addr, "");
	assert_string_equal(groups, "tp=0,pp=1,dp=3");
	assert_int_equal(pid, 1234);
}

static void test_decode_partial(void **state)
{
	static const char *const only_job[] = { "job=j", NULL };
	static const char *const none[] = { NULL };
	static const char *const control[] = { "job=a\tb\x1b[31m", "groups=x\ny", NULL };
	struct job_identity id;
	char groups[REGISTRY_GROUPS_MAX], small[4];
	int32_t pid;
	uint8_t buf[64];
	size_t len;
	(void)state;

	assert_int_equal(decode(only_job, &id, groups, &pid), 0);
	assert_false(id.has_rank);
	assert_int_equal(id.rank, -1);
	assert_int_equal(id.world_size, -1);
	assert_int_equal(id.local_rank, -1);
	assert_int_equal(id.group_rank, -1);
	assert_int_equal(pid, -1);
	assert_string_equal(groups, "");

	assert_int_equal(decode(none, &id, groups, &pid), 0);
	assert_string_equal(id.job_id, "");

	/* Control characters replaced. */
	assert_int_equal(decode(control, &id, groups, &pid), 0);
	assert_string_equal(id.job_id, "a b [31m");
	assert_string_equal(groups, "x y");

	/* Last entry without its NUL; groups truncated to a small buffer; NULL groups. */
	len = make_msg(buf, REGISTRY_MSG_REGISTER, "rank=0\0world_size=1\0groups=abcdef", 33);
	assert_int_equal(registry_decode_register(buf, len, &id, small, sizeof(small), &pid), 0);
	assert_true(id.has_rank);
	assert_string_equal(small, "abc");
	assert_int_equal(registry_decode_register(buf, len, &id, NULL, 0, &pid), 0);
}

static void test_decode_bad_fields(void **state)
{
	static const struct {
		const char *entries[4];
		int rc;
	} cases[] = {
		{ { "rank=abc", NULL }, -EINVAL },
		{ { "rank=-1", NULL }, -EINVAL },
		{ { "rank=+1", NULL }, -EINVAL },
		{ { "rank= 1", NULL }, -EINVAL },
		{ { "rank=", NULL }, -EINVAL },
		{ { "rank=12345678901", NULL }, -EINVAL },
		{ { "rank=16777216", NULL }, -EINVAL },         /* JOBENV_MAX_RANKS */
		{ { "world_size=16777217", NULL }, -EINVAL },
		{ { "world_size=0", NULL }, -EINVAL },
		{ { "local_world_size=0", NULL }, -EINVAL },
		{ { "rank=16", "world_size=16", NULL }, -EINVAL },
		{ { "local_rank=8", "local_world_size=8", NULL }, -EINVAL },
		{ { "group_rank=x", NULL }, -EINVAL },
		{ { "pid=0", NULL }, -EINVAL },
		{ { "pid=4294967296", NULL }, -EINVAL },
		{ { "pid=12a", NULL }, -EINVAL },
		{ { "rank=1", "rank=1", NULL }, -EINVAL },      /* repeated key */
		{ { "job=a", "job=b", NULL }, -EINVAL },
		{ { "rank", NULL }, -EINVAL },                  /* no '=' */
		{ { "rank=1", "", "world_size=2", NULL }, -EINVAL }, /* empty entry */
	};
	struct job_identity id = { .rank = 77 };
	char groups[REGISTRY_GROUPS_MAX] = "untouched";
	int32_t pid = 77;
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(decode(cases[i].entries, &id, groups, &pid), cases[i].rc);
	}
	/* Outputs are written only on success. */
	assert_int_equal(id.rank, 77);
	assert_int_equal(pid, 77);
	assert_string_equal(groups, "untouched");
}

static void test_decode_lengths(void **state)
{
	char job[8 + REGISTRY_JOB_MAX + 2], grp[8 + REGISTRY_GROUPS_MAX + 2];
	const char *entries[2] = { NULL, NULL };
	struct job_identity id;
	char groups[REGISTRY_GROUPS_MAX];
	int32_t pid;
	(void)state;

	snprintf(job, sizeof(job), "job=%0*d", REGISTRY_JOB_MAX, 7);
	entries[0] = job;
	assert_int_equal(decode(entries, &id, groups, &pid), 0);
	assert_int_equal(strlen(id.job_id), REGISTRY_JOB_MAX);
	snprintf(job, sizeof(job), "job=%0*d", REGISTRY_JOB_MAX + 1, 7);
	assert_int_equal(decode(entries, &id, groups, &pid), -EMSGSIZE);

	snprintf(grp, sizeof(grp), "groups=%0*d", REGISTRY_GROUPS_MAX - 1, 7);
	entries[0] = grp;
	assert_int_equal(decode(entries, &id, groups, &pid), 0);
	assert_int_equal(strlen(groups), REGISTRY_GROUPS_MAX - 1);
	snprintf(grp, sizeof(grp), "groups=%0*d", REGISTRY_GROUPS_MAX, 7);
	assert_int_equal(decode(entries, &id, groups, &pid), -EMSGSIZE);
}

static void test_decode_header(void **state)
{
	static const char payload[] = "rank=0\0world_size=1";
	uint8_t buf[64];
	uint8_t *big;
	struct sysom_frame_header h;
	struct job_identity id;
	char groups[REGISTRY_GROUPS_MAX];
	int32_t pid;
	size_t len = make_msg(buf, REGISTRY_MSG_REGISTER, payload, sizeof(payload));
	(void)state;

	assert_int_equal(registry_decode_header(buf, len, &h), 0);
	assert_int_equal(h.type, REGISTRY_MSG_REGISTER);
	assert_int_equal(h.length, sizeof(payload));
	assert_memory_equal(buf, "SYRG", 4);

	assert_int_equal(registry_decode_header(buf, 15, &h), -SYSOM_ECORRUPT);
	assert_int_equal(registry_decode_header(NULL, 0, &h), -SYSOM_ECORRUPT);
	/* Length field not matching the record, either way. */
	assert_int_equal(registry_decode_header(buf, len - 1, &h), -SYSOM_ECORRUPT);
	assert_int_equal(registry_decode_register(buf, len + 1, &id, groups, sizeof(groups), &pid),
			 -SYSOM_ECORRUPT);
	buf[0] = 'X';
	assert_int_equal(registry_decode_register(buf, len, &id, groups, sizeof(groups), &pid),
			 -SYSOM_ECORRUPT);
	buf[0] = 'S';
	store_le16(buf + 4, 2);
	assert_int_equal(registry_decode_register(buf, len, &id, groups, sizeof(groups), &pid),
			 -SYSOM_EVERSION);
	store_le16(buf + 4, REGISTRY_VERSION);
	store_le32(buf + 12, 1);
	assert_int_equal(registry_decode_header(buf, len, &h), -SYSOM_ECORRUPT);
	store_le32(buf + 12, 0);
	/* Another type is not a REGISTER (the socket skips it; the decoder refuses it). */
	store_le16(buf + 6, REGISTRY_MSG_ACK);
	assert_int_equal(registry_decode_header(buf, len, &h), 0);
	assert_int_equal(registry_decode_register(buf, len, &id, groups, sizeof(groups), &pid),
			 -EINVAL);
	store_le16(buf + 6, REGISTRY_MSG_REGISTER);
	assert_int_equal(registry_decode_register(buf, len, &id, groups, sizeof(groups), &pid), 0);

	/* Oversize: a record over 64 KiB, whatever its length field says. */
	big = calloc(1, REGISTRY_MAX_MESSAGE + 1);
	assert_non_null(big);
	store_le32(big, REGISTRY_MAGIC);
	store_le16(big + 4, REGISTRY_VERSION);
	store_le16(big + 6, REGISTRY_MSG_REGISTER);
	store_le32(big + 8, REGISTRY_MAX_MESSAGE + 1 - REGISTRY_HEADER_SIZE);
	assert_int_equal(registry_decode_header(big, REGISTRY_MAX_MESSAGE + 1, &h), -SYSOM_ELIMIT);
	store_le32(big + 8, REGISTRY_MAX_MESSAGE - REGISTRY_HEADER_SIZE);
	assert_int_equal(registry_decode_header(big, REGISTRY_MAX_MESSAGE, &h), 0);
	free(big);
	assert_int_equal(registry_encode_header(buf, 1, REGISTRY_MAX_MESSAGE), -SYSOM_ELIMIT);
}

/* ---------------------------------------------------------------------------------------- */
/* The socket, with the client library in a second thread (same process, same pid) */

struct fx {
	uv_loop_t loop;
	uv_async_t async;          /* a client thread finished */
	uv_timer_t timer;          /* safety limit of loop_until */
	bool timed_out;
	bool thread_done;
	char dir[256];
	char path[320];
	struct registry *reg;
	int registered, disconnected;
	uint32_t last_tgid, disconnected_tgid;
	struct job_identity last_id;
	char last_groups[REGISTRY_GROUPS_MAX];
	/* telemetry (on_record / on_conn_close) */
	int records, conn_closes;
	uint32_t record_tgid;
	uint16_t record_types[8];
	/* results of the client thread */
	uint32_t got_mask;
	int rc[8];
	int32_t ack[8];
};

static void on_register(void *ctx, uint32_t tgid, const struct job_identity *id,
			const char *groups)
{
	struct fx *f = ctx;

	f->registered++;
	f->last_tgid = tgid;
	f->last_id = *id;
	snprintf(f->last_groups, sizeof(f->last_groups), "%s", groups);
}

static void on_disconnect(void *ctx, uint32_t tgid)
{
	struct fx *f = ctx;

	f->disconnected++;
	f->disconnected_tgid = tgid;
}

/* A consumer like agent/gpu/gpustats.c: keeps a per-connection state, validates NCCL_COMM. */
static int on_record(void *ctx, uint32_t tgid, void **state, uint16_t type,
		     const uint8_t *payload, size_t len)
{
	struct fx *f = ctx;
	struct channel_comm comm;

	if (!*state)
		*state = malloc(16);
	if (f->records < 8)
		f->record_types[f->records] = type;
	f->records++;
	f->record_tgid = tgid;
	if (type == SYSOM_REC_NCCL_COMM)
		return channel_decode_comm(payload, len, &comm);
	return type == SYSOM_REC_HELLO ? 0 : -ENOSYS;
}

static void on_conn_close(void *ctx, uint32_t tgid, void *state)
{
	struct fx *f = ctx;

	(void)tgid;
	f->conn_closes++;
	free(state);
}

static void on_async(uv_async_t *a)
{
	((struct fx *)a->data)->thread_done = true;
}

static void on_timeout(uv_timer_t *t)
{
	((struct fx *)t->data)->timed_out = true;
}

static bool is_thread_done(struct fx *f)
{
	return f->thread_done;
}

static bool is_disconnected(struct fx *f)
{
	return f->disconnected > 0;
}

static bool no_clients(struct fx *f)
{
	struct registry_stats s;

	registry_stats_read(f->reg, &s);
	return s.clients == 0;
}

/* Runs the loop until `done` (no sleeping: each turn waits for an event), at most 10 s. */
static void loop_until(struct fx *f, bool (*done)(struct fx *))
{
	f->timed_out = false;
	uv_timer_start(&f->timer, on_timeout, 10000, 0);
	while (!done(f) && !f->timed_out)
		uv_run(&f->loop, UV_RUN_ONCE);
	uv_timer_stop(&f->timer);
	assert_false(f->timed_out);
}

struct job {
	struct fx *f;
	void (*fn)(struct fx *f);
};

static void *thread_main(void *arg)
{
	struct job *j = arg;

	j->fn(j->f);
	uv_async_send(&j->f->async);
	return NULL;
}

/* Runs `fn` in a thread while this thread runs the loop; joins it. */
static void run_client(struct fx *f, void (*fn)(struct fx *f))
{
	struct job j = { .f = f, .fn = fn };
	pthread_t t;

	f->thread_done = false;
	memset(f->rc, 0x7f, sizeof(f->rc));
	memset(f->ack, 0x7f, sizeof(f->ack));
	assert_int_equal(pthread_create(&t, NULL, thread_main, &j), 0);
	loop_until(f, is_thread_done);
	assert_int_equal(pthread_join(t, NULL), 0);
}

static int fx_open(struct fx *f, uint32_t max_clients, char *err, size_t errlen)
{
	struct registry_options o = {
		.path = f->path, .max_clients = max_clients, .on_register = on_register,
		.on_disconnect = on_disconnect, .on_record = on_record,
		.on_conn_close = on_conn_close, .profiler_mask = 0x42, .ctx = f,
	};

	return registry_open(&f->loop, &o, &f->reg, err, errlen);
}

static void fx_setup(struct fx *f)
{
	memset(f, 0, sizeof(*f));
	assert_int_equal(uv_loop_init(&f->loop), 0);
	assert_int_equal(uv_async_init(&f->loop, &f->async, on_async), 0);
	f->async.data = f;
	assert_int_equal(uv_timer_init(&f->loop, &f->timer), 0);
	f->timer.data = f;
	assert_int_equal(fixture_tmpdir_make(f->dir, sizeof(f->dir)), 0);
	snprintf(f->path, sizeof(f->path), "%s/run/agent.sock", f->dir);
	assert_int_equal(setenv("SYSOM_SOCKET_PATH", f->path, 1), 0);
}

static void fx_teardown(struct fx *f)
{
	sysom_client_close();
	registry_close(f->reg);
	f->reg = NULL;
	uv_close((uv_handle_t *)&f->async, NULL);
	uv_close((uv_handle_t *)&f->timer, NULL);
	uv_run(&f->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&f->loop), 0); /* every handle closed, registry freed */
	fixture_tmpdir_remove(f->dir);
	unsetenv("SYSOM_SOCKET_PATH");
}

/* A blocking SEQPACKET connection to the agent (5 s receive limit). */
static int raw_connect(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 5 };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

/* The next ACK's status into *status: 1; 0 at end of stream; -errno. */
static int raw_ack(int fd, int32_t *status)
{
	uint8_t buf[64];
	ssize_t n = recv(fd, buf, sizeof(buf), 0);
	struct sysom_frame_header h;

	if (n <= 0)
		return n == 0 ? 0 : -errno;
	if (registry_decode_header(buf, (size_t)n, &h) || h.type != REGISTRY_MSG_ACK || h.length != 4)
		return -EPROTO;
	*status = (int32_t)load_le32(buf + REGISTRY_HEADER_SIZE);
	return 1;
}

static void client_register_job1(struct fx *f)
{
	struct sysom_registration r = {
		.job = "job-1", .rank = 3, .local_rank = 1, .world_size = 8, .local_world_size = 4,
		.group_rank = 0, .groups = "tp=0,pp=1,dp=3",
	};

	f->rc[0] = sysom_client_register(&r);
}

static void client_register_job2_and_bad(struct fx *f)
{
	struct sysom_registration r = {
		.job = "job-2", .rank = -1, .local_rank = -1, .world_size = -1,
		.local_world_size = -1, .group_rank = -1,
	};
	char long_job[SYSOM_CLIENT_JOB_MAX + 2];

	f->rc[0] = sysom_client_register(&r);
	/* Refused by the agent: the previous identity stays. */
	r.rank = 9;
	r.world_size = 8;
	f->rc[1] = sysom_client_register(&r);
	/* Refused by the library itself. */
	memset(long_job, 'j', sizeof(long_job) - 1);
	long_job[sizeof(long_job) - 1] = '\0';
	r.job = long_job;
	f->rc[2] = sysom_client_register(&r);
	r.job = "j";
	r.rank = -2;
	f->rc[3] = sysom_client_register(&r);
	f->rc[4] = sysom_client_register(NULL);
}

/* Someone else's identity, unknown and bad records, each on its own raw connection. */
static void client_raw(struct fx *f)
{
	uint8_t buf[512];
	char payload[64];
	size_t len;
	int fd, n;
	uint8_t *big;

	/* A pid that is not the sender's. */
	fd = raw_connect(f->path);
	if (fd < 0) {
		f->rc[0] = fd;
		return;
	}
	n = snprintf(payload, sizeof(payload), "job=x%crank=0%cworld_size=1%cpid=%d", 0, 0, 0,
		     (int)getpid() + 1);
	len = make_msg(buf, REGISTRY_MSG_REGISTER, payload, (size_t)n + 1);
	f->rc[0] = send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -errno;
	f->rc[1] = raw_ack(fd, &f->ack[1]);
	/* An unknown type is skipped (no answer), then a bad magic closes the connection. */
	len = make_msg(buf, 77, "future", 6);
	f->rc[2] = send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -errno;
	len = make_msg(buf, REGISTRY_MSG_REGISTER, "rank=0", 6);
	buf[1] = 'X';
	send(fd, buf, len, MSG_NOSIGNAL);
	f->rc[3] = raw_ack(fd, &f->ack[3]); /* 0: closed by the agent */
	close(fd);

	/* A record over 64 KiB. */
	fd = raw_connect(f->path);
	big = calloc(1, REGISTRY_MAX_MESSAGE + 100);
	if (fd < 0 || !big) {
		f->rc[4] = -ENOMEM;
		free(big);
		if (fd >= 0)
			close(fd);
		return;
	}
	store_le32(big, REGISTRY_MAGIC);
	store_le16(big + 4, REGISTRY_VERSION);
	store_le16(big + 6, REGISTRY_MSG_REGISTER);
	store_le32(big + 8, REGISTRY_MAX_MESSAGE + 100 - REGISTRY_HEADER_SIZE);
	f->rc[4] = send(fd, big, REGISTRY_MAX_MESSAGE + 100, MSG_NOSIGNAL) < 0 ? -errno : 0;
	f->rc[5] = raw_ack(fd, &f->ack[5]);
	free(big);
	close(fd);

	/* Another version. */
	fd = raw_connect(f->path);
	if (fd < 0) {
		f->rc[6] = fd;
		return;
	}
	len = make_msg(buf, REGISTRY_MSG_REGISTER, "rank=0", 6);
	store_le16(buf + 4, 2);
	send(fd, buf, len, MSG_NOSIGNAL);
	f->rc[6] = raw_ack(fd, &f->ack[6]);
	close(fd);
}

static void client_close(struct fx *f)
{
	(void)f;
	sysom_client_close();
}

static void client_from_env(struct fx *f)
{
	f->rc[0] = sysom_client_register_from_env();
}

static void test_socket_register(void **state)
{
	struct fx f;
	struct registry_stats s;
	struct job_identity id;
	char groups[REGISTRY_GROUPS_MAX];
	char err[256] = "";
	char dir[400];
	struct stat st;
	(void)state;

	fx_setup(&f);
	assert_int_equal(fx_open(&f, 0, err, sizeof(err)), 0);
	/* The directory was made 0755, the socket 0666. */
	snprintf(dir, sizeof(dir), "%s/run", f.dir);
	assert_int_equal(stat(dir, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755);
	assert_int_equal(stat(f.path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0666);

	/* Register: the callback gets the identity, attributed to this process. */
	run_client(&f, client_register_job1);
	assert_int_equal(f.rc[0], 0);
	assert_int_equal(f.registered, 1);
	assert_int_equal(f.last_tgid, (uint32_t)getpid());
	assert_string_equal(f.last_id.job_id, "job-1");
	assert_string_equal(f.last_id.job_id_source, "registration");
	assert_true(f.last_id.has_rank);
	assert_int_equal(f.last_id.rank, 3);
	assert_int_equal(f.last_id.local_rank, 1);
	assert_int_equal(f.last_id.world_size, 8);
	assert_int_equal(f.last_id.local_world_size, 4);
	assert_int_equal(f.last_id.group_rank, 0);
	assert_string_equal(f.last_groups, "tp=0,pp=1,dp=3");
	assert_int_equal(registry_lookup(f.reg, (uint32_t)getpid(), &id, groups, sizeof(groups)), 0);
	assert_string_equal(id.job_id, "job-1");
	assert_string_equal(groups, "tp=0,pp=1,dp=3");
	assert_int_equal(registry_lookup(f.reg, (uint32_t)getpid() + 1, &id, NULL, 0), -ENOENT);

	/* Re-registration replaces; refused registrations leave it. */
	run_client(&f, client_register_job2_and_bad);
	assert_int_equal(f.rc[0], 0);
	assert_int_equal(f.rc[1], -EINVAL);
	assert_int_equal(f.rc[2], -EMSGSIZE);
	assert_int_equal(f.rc[3], -EINVAL);
	assert_int_equal(f.rc[4], -EINVAL);
	assert_int_equal(f.registered, 2);
	assert_int_equal(registry_lookup(f.reg, (uint32_t)getpid(), &id, groups, sizeof(groups)), 0);
	assert_string_equal(id.job_id, "job-2");
	assert_false(id.has_rank);
	assert_string_equal(groups, "");
	registry_stats_read(f.reg, &s);
	assert_int_equal(s.connections, 1); /* one connection, kept open across calls */
	assert_int_equal(s.clients, 1);
	assert_int_equal(s.registrations, 2);
	assert_int_equal(s.rejected_bad_message, 1);

	/* Another pid claimed, unknown type, bad magic, oversize, bad version. */
	run_client(&f, client_raw);
	assert_int_equal(f.rc[0], 0);
	assert_int_equal(f.rc[1], 1);
	assert_int_equal(f.ack[1], -EPERM);
	assert_int_equal(f.rc[2], 0);
	assert_int_equal(f.rc[3], 0); /* the agent closed the connection */
	assert_int_equal(f.rc[4], 0);
	assert_int_equal(f.rc[5], 0);
	assert_int_equal(f.rc[6], 0);
	registry_stats_read(f.reg, &s);
	assert_int_equal(s.connections, 4);
	assert_int_equal(s.rejected_pid_mismatch, 1);
	assert_int_equal(s.unknown_types, 1);
	assert_int_equal(s.rejected_bad_message, 4);
	assert_int_equal(s.registrations, 2);
	assert_int_equal(f.registered, 2);
	assert_int_equal(f.disconnected, 0); /* none of those held an identity */
	assert_int_equal(registry_lookup(f.reg, (uint32_t)getpid(), &id, NULL, 0), 0);
	assert_string_equal(id.job_id, "job-2");

	/* Disconnecting forgets the identity. */
	run_client(&f, client_close);
	loop_until(&f, is_disconnected);
	assert_int_equal(f.disconnected, 1);
	assert_int_equal(f.disconnected_tgid, (uint32_t)getpid());
	assert_int_equal(registry_lookup(f.reg, (uint32_t)getpid(), &id, NULL, 0), -ENOENT);
	loop_until(&f, no_clients);

	/* From the environment, on a new connection. */
	setenv("TORCHELASTIC_RUN_ID", "elastic-7", 1);
	setenv("RANK", "6", 1);
	setenv("WORLD_SIZE", "8", 1);
	setenv("LOCAL_RANK", "2", 1);
	setenv("LOCAL_WORLD_SIZE", "4", 1);
	setenv("GROUP_RANK", "1", 1);
	run_client(&f, client_from_env);
	unsetenv("TORCHELASTIC_RUN_ID");
	unsetenv("RANK");
	unsetenv("WORLD_SIZE");
	unsetenv("LOCAL_RANK");
	unsetenv("LOCAL_WORLD_SIZE");
	unsetenv("GROUP_RANK");
	assert_int_equal(f.rc[0], 0);
	assert_int_equal(f.registered, 3);
	assert_int_equal(f.last_tgid, (uint32_t)getpid());
	assert_string_equal(f.last_id.job_id, "elastic-7");
	assert_int_equal(f.last_id.rank, 6);
	assert_int_equal(f.last_id.world_size, 8);
	assert_int_equal(f.last_id.local_rank, 2);
	assert_int_equal(f.last_id.local_world_size, 4);
	assert_int_equal(f.last_id.group_rank, 1);

	/* The agent restarts: the library's kept connection is dead, it connects again. */
	registry_close(f.reg);
	f.reg = NULL;
	uv_run(&f.loop, UV_RUN_NOWAIT);
	assert_int_equal(lstat(f.path, &st), -1); /* the socket file went with it */
	assert_int_equal(fx_open(&f, 0, err, sizeof(err)), 0);
	run_client(&f, client_register_job1);
	assert_int_equal(f.rc[0], 0);
	assert_int_equal(f.registered, 4);
	assert_string_equal(f.last_id.job_id, "job-1");

	fx_teardown(&f);
}

static void client_unset(struct fx *f)
{
	struct sysom_registration r = { .rank = -1, .local_rank = -1, .world_size = -1,
					.local_world_size = -1, .group_rank = -1 };

	f->rc[0] = sysom_client_register(&r);
}

static void client_two_raw(struct fx *f)
{
	int32_t ack;
	uint8_t buf[64];
	size_t len = make_msg(buf, REGISTRY_MSG_REGISTER, "job=a", 5);
	int a = raw_connect(f->path), b;

	f->rc[0] = a < 0 ? a : 0;
	if (a < 0)
		return;
	send(a, buf, len, MSG_NOSIGNAL);
	f->rc[1] = raw_ack(a, &ack); /* a is connected and answered */
	f->ack[1] = ack;
	b = raw_connect(f->path);     /* accepted by the kernel, then closed by the agent */
	f->rc[2] = b < 0 ? b : raw_ack(b, &ack);
	if (b >= 0)
		close(b);
	close(a);
}

static void test_socket_limits(void **state)
{
	struct fx f;
	struct registry_stats s;
	char err[256] = "";
	(void)state;

	fx_setup(&f);
	assert_int_equal(fx_open(&f, 1, err, sizeof(err)), 0);
	run_client(&f, client_two_raw);
	assert_int_equal(f.rc[0], 0);
	assert_int_equal(f.rc[1], 1);
	assert_int_equal(f.ack[1], 0);
	assert_int_equal(f.rc[2], 0);
	loop_until(&f, is_disconnected); /* a's close */
	registry_stats_read(f.reg, &s);
	assert_int_equal(s.rejected_too_many_clients, 1);
	assert_int_equal(s.registrations, 1);

	/* No SYSOM_SOCKET_PATH: nothing to talk to. */
	unsetenv("SYSOM_SOCKET_PATH");
	run_client(&f, client_unset);
	assert_int_equal(f.rc[0], -ENOENT);
	setenv("SYSOM_SOCKET_PATH", "", 1);
	run_client(&f, client_unset);
	assert_int_equal(f.rc[0], -ENOENT);
	fx_teardown(&f);
}

static void on_mask(void *ctx, uint32_t mask)
{
	((struct fx *)ctx)->got_mask = mask;
}

/* An NCCL profiler's channel: HELLO, a good and a bad NCCL_COMM, an unknown telemetry type;
 * the agent answers HELLO with the configured mask. */
static void client_telemetry(struct fx *f)
{
	struct sysom_channel_options o = { .component = SYSOM_COMPONENT_NCCL_PROFILER,
					   .interface = 5, .name = "profiler", .on_mask = on_mask,
					   .ctx = f };
	struct sysom_rec_comm good = { .comm_id = 7, .rank = 1, .nranks = 2, .nnodes = 1 };
	struct sysom_rec_comm bad = { .comm_id = 7, .rank = 2, .nranks = 2, .nnodes = 1 };
	struct sysom_channel *c;

	f->rc[0] = sysom_channel_open(&o, &c);
	if (f->rc[0])
		return;
	f->rc[1] = sysom_channel_send(c, SYSOM_REC_NCCL_COMM, &good, sizeof(good));
	f->rc[2] = sysom_channel_send(c, SYSOM_REC_NCCL_COMM, &bad, sizeof(bad));
	f->rc[3] = sysom_channel_send(c, 200, "x", 1);
	for (int i = 0; i < 500 && !f->got_mask; i++) {
		sysom_channel_poll(c);
		if (!f->got_mask)
			usleep(2000);
	}
	sysom_channel_close(c);
}

static void test_socket_telemetry(void **state)
{
	struct fx f;
	struct registry_stats s;
	char err[256] = "";
	(void)state;

	fx_setup(&f);
	assert_int_equal(fx_open(&f, 0, err, sizeof(err)), 0);
	run_client(&f, client_telemetry);
	assert_int_equal(f.rc[0], 0);
	assert_int_equal(f.rc[1], 0);
	assert_int_equal(f.rc[2], 0); /* sent; the agent rejects it */
	assert_int_equal(f.rc[3], 0);
	assert_int_equal(f.got_mask, 0x42);
	loop_until(&f, no_clients);
	assert_int_equal(f.records, 4); /* HELLO, two NCCL_COMM, type 200 */
	assert_int_equal(f.record_types[0], SYSOM_REC_HELLO);
	assert_int_equal(f.record_types[3], 200);
	assert_int_equal(f.record_tgid, (uint32_t)getpid());
	assert_int_equal(f.conn_closes, 1); /* the consumer's state was handed back */
	registry_stats_read(f.reg, &s);
	assert_int_equal(s.records, 2);
	assert_int_equal(s.rejected_records, 1);
	assert_int_equal(s.unknown_types, 1);
	assert_int_equal(s.rejected_bad_message, 0); /* the connection was never dropped */
	assert_int_equal(f.registered, 0);
	fx_teardown(&f);
}

static void test_socket_path(void **state)
{
	struct fx f;
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	char err[256] = "";
	char dir[400];
	struct stat st;
	int fd;
	FILE *file;
	(void)state;

	fx_setup(&f);
	snprintf(dir, sizeof(dir), "%s/run", f.dir);
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_true(strlen(f.path) < sizeof(addr.sun_path));
	memcpy(addr.sun_path, f.path, strlen(f.path) + 1);

	/* Not a socket: refused, left alone. */
	file = fopen(f.path, "w");
	assert_non_null(file);
	fputs("precious", file);
	fclose(file);
	assert_int_equal(fx_open(&f, 0, err, sizeof(err)), -ENOTSOCK);
	assert_non_null(strstr(err, "not a socket"));
	assert_null(f.reg);
	assert_int_equal(stat(f.path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_size, 8);
	assert_int_equal(unlink(f.path), 0);

	/* A live socket (another agent): refused. */
	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(fx_open(&f, 0, err, sizeof(err)), -EADDRINUSE);
	assert_null(f.reg);

	/* The same socket once nobody listens: stale, replaced. */
	close(fd);
	assert_int_equal(stat(f.path, &st), 0);
	assert_int_equal(fx_open(&f, 0, err, sizeof(err)), 0);
	run_client(&f, client_register_job1);
	assert_int_equal(f.rc[0], 0);
	assert_int_equal(f.registered, 1);
	assert_int_equal(f.last_tgid, (uint32_t)getpid());

	/* An existing directory keeps its mode. */
	assert_int_equal(stat(dir, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);
	fx_teardown(&f);

	/* Bad options and a path that does not fit a socket address. */
	fx_setup(&f);
	memset(f.path, 'p', 200);
	f.path[0] = '/';
	f.path[200] = '\0';
	assert_int_equal(fx_open(&f, 0, err, sizeof(err)), -ENAMETOOLONG);
	assert_int_equal(fx_open(&f, REGISTRY_MAX_CLIENTS_LIMIT + 1, err, sizeof(err)), -EINVAL);
	f.path[0] = '\0';
	assert_int_equal(fx_open(&f, 0, err, sizeof(err)), -EINVAL);
	fx_teardown(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode_valid),
		cmocka_unit_test(test_decode_partial),
		cmocka_unit_test(test_decode_bad_fields),
		cmocka_unit_test(test_decode_lengths),
		cmocka_unit_test(test_decode_header),
		cmocka_unit_test(test_socket_register),
		cmocka_unit_test(test_socket_limits),
		cmocka_unit_test(test_socket_telemetry),
		cmocka_unit_test(test_socket_path),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
