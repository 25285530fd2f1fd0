/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NCCL profiler plugin ABI, versions 4 (NCCL 2.27) and 5 (NCCL 2.28), as NVIDIA's
 * ext-profiler headers define it (../shared/reference/nccl-and-cuda.md). NCCL does not install
 * these headers, so the layouts are declared here and pinned with static assertions (x86-64 and
 * aarch64 SysV: pointers and size_t 8 bytes, the event union at offset 24 in both versions).
 *
 * Only what the plugin reads is named: the two versions' descriptors share the union's layout
 * for every member used (v5 appends parentGroup to coll and p2p and widens `type` to 64 bits).
 */
#ifndef SYSOM_PLUGINS_NCCL_PROFILER_ABI_H
#define SYSOM_PLUGINS_NCCL_PROFILER_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef int nccl_result_t; /* ncclResult_t: 0 is ncclSuccess */

typedef void (*nccl_debug_logger_t)(int level, unsigned long flags, const char *file, int line,
				    const char *fmt, ...);

/* ncclDebugLogLevel values and the ncclDebugLogSubSys flag a profiler plugin logs under. */
#define NCCL_LOG_LEVEL_WARN 2
#define NCCL_LOG_LEVEL_INFO 3
#define NCCL_LOG_SUBSYS_PROFILE 0x4000ul

/* Event type bits (the activation mask uses the same bits). */
enum nccl_prof_event {
	NCCL_PROF_GROUP = 1 << 0,
	NCCL_PROF_COLL = 1 << 1,
	NCCL_PROF_P2P = 1 << 2,
	NCCL_PROF_PROXY_OP = 1 << 3,
	NCCL_PROF_PROXY_STEP = 1 << 4,
	NCCL_PROF_PROXY_CTRL = 1 << 5,
	NCCL_PROF_KERNEL_CH = 1 << 6,
	NCCL_PROF_NET_PLUGIN = 1 << 7,
	NCCL_PROF_GROUP_API = 1 << 8,   /* v5 */
	NCCL_PROF_COLL_API = 1 << 9,    /* v5 */
	NCCL_PROF_P2P_API = 1 << 10,    /* v5 */
	NCCL_PROF_KERNEL_LAUNCH = 1 << 11, /* v5 */
};

/* States passed to recordEventState (one enum across event types). */
enum nccl_prof_state {
	NCCL_PROF_STATE_PROXY_STEP_SEND_GPU_WAIT = 8,
	NCCL_PROF_STATE_PROXY_STEP_SEND_WAIT = 9,
	NCCL_PROF_STATE_PROXY_STEP_RECV_WAIT = 10,
	NCCL_PROF_STATE_PROXY_STEP_SEND_PEER_WAIT_V4 = 20,
	NCCL_PROF_STATE_KERNEL_CH_STOP = 22,
};

/* The event union (offset 24 of both descriptors). */
union nccl_prof_event_union {
	struct {
		uint64_t seqNumber;
		const char *func;
		const void *sendBuff;
		void *recvBuff;
		size_t count;
		int root;
		const char *datatype;
		uint8_t nChannels;
		uint8_t nWarps;
		const char *algo;
		const char *proto;
		void *parentGroup; /* v5 only */
	} coll;
	struct {
		const char *func;
		void *buff;
		const char *datatype;
		size_t count;
		int peer;
		uint8_t nChannels;
		void *parentGroup; /* v5 only */
	} p2p;
	struct {
		pid_t pid;
		uint8_t channelId;
		int peer;
		int nSteps;
		int chunkSize;
		int isSend;
	} proxyOp;
	struct {
		int step;
	} proxyStep;
	struct {
		uint8_t channelId;
		uint64_t pTimer; /* GPU globaltimer, ns */
	} kernelCh;
};

struct nccl_prof_descr_v4 {
	uint8_t type;
	void *parentObj;
	int rank;
	union nccl_prof_event_union u;
};

struct nccl_prof_descr_v5 {
	uint64_t type;
	void *parentObj;
	int rank;
	union nccl_prof_event_union u;
};

_Static_assert(offsetof(struct nccl_prof_descr_v4, u) == 24, "v4 event union at 24");
_Static_assert(offsetof(struct nccl_prof_descr_v5, u) == 24, "v5 event union at 24");
_Static_assert(offsetof(union nccl_prof_event_union, coll.algo) == 64, "coll.algo at 64");
_Static_assert(offsetof(union nccl_prof_event_union, p2p.peer) == 32, "p2p.peer at 32");
_Static_assert(offsetof(union nccl_prof_event_union, proxyOp.isSend) == 20, "proxyOp.isSend");
_Static_assert(offsetof(union nccl_prof_event_union, kernelCh.pTimer) == 8, "kernelCh.pTimer");

/* recordEventState arguments (same in v4 and v5 for what is read). */
union nccl_prof_state_args {
	struct {
		size_t transSize;
	} proxyStep;
	struct {
		int appendedProxyOps;
	} proxyCtrl;
	struct {
		void *data;
	} netPlugin;
	struct {
		uint64_t pTimer;
	} kernelCh;
};

struct nccl_profiler_v4 {
	const char *name;
	nccl_result_t (*init)(void **context, int *eActivationMask, const char *commName,
			      uint64_t commHash, int nNodes, int nranks, int rank,
			      nccl_debug_logger_t logfn);
	nccl_result_t (*startEvent)(void *context, void **eHandle, struct nccl_prof_descr_v4 *d);
	nccl_result_t (*stopEvent)(void *eHandle);
	nccl_result_t (*recordEventState)(void *eHandle, int eState,
					  union nccl_prof_state_args *args);
	nccl_result_t (*finalize)(void *context);
};

struct nccl_profiler_v5 {
	const char *name;
	nccl_result_t (*init)(void **context, uint64_t commId, int *eActivationMask,
			      const char *commName, int nNodes, int nranks, int rank,
			      nccl_debug_logger_t logfn);
	nccl_result_t (*startEvent)(void *context, void **eHandle, struct nccl_prof_descr_v5 *d);
	nccl_result_t (*stopEvent)(void *eHandle);
	nccl_result_t (*recordEventState)(void *eHandle, int eState,
					  union nccl_prof_state_args *args);
	nccl_result_t (*finalize)(void *context);
};

#endif
