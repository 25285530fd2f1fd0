# SPDX-License-Identifier: Apache-2.0
# sysom: the one Makefile. Everything builds under $(BUILD); `V=1` shows commands.
#
#   make            release build of BPF objects, skeletons, daemons, CLI, tests, fixtures
#   make test       install missing packages, ASan/UBSan build in build/san, run every test
#   make demo       install missing packages, build, run the end-to-end demo
#   make fuzz       run every fuzz target for FUZZ_SECONDS (default 300) each
#   make soak       the 10-minute healthy soak (make test runs it for 5 minutes)
#   make bench      run the benchmarks in bench/ (release build)
#   make install    install the release build (PREFIX, DESTDIR, BINDIR, ...); make uninstall
#   make deb        Debian packages in $(BUILD)/deb; make deb-test: build, install, run, purge them
#   make deps       install the Debian packages the project needs (apt-get) and the web UI's
#                   JavaScript libraries (npm ci: package-lock.json)
#   make ui         copy the UI's libraries from node_modules/ into ui/vendor/ (part of `all`
#                   once `make deps` has run)

.DELETE_ON_ERROR:
.SUFFIXES:
SHELL := /bin/bash

BUILD ?= build
SAN ?= 0
V ?= 0
ifeq ($(V),1)
Q :=
msg = @true
else
Q := @
msg = @printf '  %-7s %s\n' $(1) $(2)
endif

CC := gcc
CLANG ?= clang
BPFTOOL ?= bpftool
LLVM_STRIP ?= llvm-strip
ARCH := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo unknown)

WARNINGS := -Wall -Wextra -Werror -Wformat=2 -Wshadow -Wstrict-prototypes \
            -Wmissing-prototypes -Wvla -Wpointer-arith -Wundef
CPPFLAGS := -D_GNU_SOURCE -DSYSOM_VERSION='"$(VERSION)"' -DSYSOM_UI_DIR='"$(CURDIR)/ui"' \
            -I. -I$(BUILD)/bpf
CFLAGS := -std=gnu11 -g -fno-omit-frame-pointer -pthread $(WARNINGS)
ifeq ($(SAN),1)
CFLAGS += -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
else
CFLAGS += -O2
endif
LDFLAGS += -pthread

# Libraries, one variable per dependency so each binary links only what it uses.
LIB_BPF := -lbpf -lelf -lz
LIB_ELF := -lelf -ldw
LIB_CURL := -lcurl
LIB_JSON := -ljansson
LIB_UV := -luv
LIB_ZSTD := -lzstd
LIB_SQLITE := -lsqlite3
LIB_HTTP := -lhttp_parser
LIB_XXHASH := -lxxhash
LIB_SYSTEMD := -lsystemd
LIB_CMOCKA := -lcmocka
LIB_CXXABI := -lstdc++ # __cxa_demangle for C++ symbol names
LIB_DEBUGINFOD := -ldebuginfod
LIB_CRYPTO := -lcrypto # SHA-256 of bearer tokens (credentials files hold hashes)
LIB_PROTOBUF := -lprotobuf-c -lz # pprof exports: profile.proto encoding, gzip

# Debian packages needed to build, test and demo (installed by `make deps`).
DEB_PACKAGES := make gcc clang llvm bpftool libbpf-dev libelf-dev libdw-dev zlib1g-dev \
  libcurl4-openssl-dev libjansson-dev libuv1-dev libzstd-dev libsqlite3-dev \
  libhttp-parser-dev libcmocka-dev libxxhash-dev libsystemd-dev pkg-config \
  libclang-rt-14-dev curl binutils procps util-linux zstd python3 elfutils linux-perf \
  libstdc++-12-dev libdebuginfod-dev debuginfod libc6-dbg gcc prometheus-alertmanager libssl-dev \
  protobuf-c-compiler libprotobuf-c-dev protobuf-compiler systemd strace debhelper dpkg-dev python3-yaml \
  clickhouse-server clickhouse-client chromium firefox-esr python3-torch austin haproxy

# ---------------------------------------------------------------------------------------------
# Sources, discovered per directory tree: a program is a top-level directory whose
# subdirectories are its components (agent/sampling, server/store, ...); its main.c is the
# executable (the agent's in agent/daemon/, the daemon component).

sources_under = $(sort $(shell find $(1) -name '*.c' 2>/dev/null))
COMMON_SRCS := $(call sources_under,common)
COMMON_HDRS := $(sort $(shell find common include -name '*.h'))
AGENT_MAIN := agent/daemon/main.c
AGENT_SRCS := $(filter-out $(AGENT_MAIN),$(call sources_under,agent))
SERVER_SRCS := $(filter-out server/main.c,$(call sources_under,server))
CTL_SRCS := $(filter-out ctl/main.c,$(call sources_under,ctl))
SYMREPO_SRCS := $(filter-out symrepo/main.c,$(call sources_under,symrepo))
BPF_SRCS := $(wildcard bpf/*.bpf.c)

OBJ := $(BUILD)/obj
obj_of = $(patsubst %.c,$(OBJ)/%.o,$(1))

COMMON_LIB := $(BUILD)/lib/libsysom-common.a
AGENT_LIB := $(BUILD)/lib/libsysom-agent.a
SERVER_LIB := $(BUILD)/lib/libsysom-server.a
CTL_LIB := $(BUILD)/lib/libsysom-ctl.a
SYMREPO_LIB := $(BUILD)/lib/libsysom-symrepo.a

BPF_OBJS := $(patsubst bpf/%.bpf.c,$(BUILD)/bpf/%.bpf.o,$(BPF_SRCS))
BPF_SKELS := $(patsubst bpf/%.bpf.c,$(BUILD)/bpf/%.skel.h,$(BPF_SRCS))
VMLINUX_H := $(BUILD)/bpf/vmlinux.h

AGENT_BIN := $(BUILD)/sysom-agent
SERVER_BIN := $(BUILD)/sysom-server
CTL_BIN := $(BUILD)/sysomctl
SYMREPO_BIN := $(BUILD)/sysom-symrepo

COMMON_LDLIBS := $(LIB_XXHASH) $(LIB_ZSTD) $(LIB_ELF) -lm
AGENT_LDLIBS := $(AGENT_LIB) $(COMMON_LIB) $(LIB_BPF) $(LIB_CURL) $(LIB_UV) $(LIB_SYSTEMD) $(LIB_JSON) $(COMMON_LDLIBS)
SYMREPO_LDLIBS := $(SYMREPO_LIB) $(COMMON_LIB) $(LIB_CXXABI) $(COMMON_LDLIBS)
SERVER_LDLIBS := $(SERVER_LIB) $(SYMREPO_LIB) $(COMMON_LIB) $(LIB_UV) $(LIB_HTTP) $(LIB_SQLITE) \
  $(LIB_JSON) $(LIB_SYSTEMD) $(LIB_CURL) $(LIB_DEBUGINFOD) $(LIB_CRYPTO) $(LIB_CXXABI) $(COMMON_LDLIBS) \
  $(LIB_PROTOBUF)
CTL_LDLIBS := $(CTL_LIB) $(COMMON_LIB) $(LIB_CURL) $(LIB_JSON) $(COMMON_LDLIBS)

# Unit tests: tests/unit/<program>/<component>/test_<name>.c, mirroring the source tree, linked
# against that program's library, plus the flags of a `// test-ldflags: ...` line in the test's
# source (the fault injection tests' -Wl,--wrap=..., tests/support/fault_inject.h).
UNIT_TEST_SRCS := $(sort $(shell find tests/unit -name 'test_*.c'))
UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_TEST_SRCS))
BPF_TEST_SRCS := $(wildcard tests/bpf/test_*.c)
BPF_TESTS := $(patsubst tests/bpf/%.c,$(BUILD)/tests/bpf/%,$(BPF_TEST_SRCS))
test_ldflags = $(shell sed -n 's|^// test-ldflags: ||p' $(1))
TEST_SUPPORT_SRCS := $(wildcard tests/support/*.c)
TEST_SUPPORT_OBJS := $(call obj_of,$(TEST_SUPPORT_SRCS))
# An archive, so each test pulls only the helpers it uses (and only their libraries).
TEST_SUPPORT_LIB := $(BUILD)/lib/libsysom-testsupport.a

# Fixtures: small programs the tests and benchmarks run (workloads with known call chains).
# They are built with their own flags (frame pointers, no inlining) so their stacks are known;
# with clang, because GCC 12 drops the frame of leaf functions despite
# -mno-omit-leaf-frame-pointer.
FIXTURE_SRCS := $(wildcard tests/fixtures/*.c)
FIXTURES := $(patsubst tests/fixtures/%.c,$(BUILD)/tests/fixtures/%,$(FIXTURE_SRCS))
FIXTURE_CFLAGS := -std=gnu11 -g -O1 -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer \
                  -fno-inline -fno-optimize-sibling-calls -Wall -Wextra -Werror -pthread

# Fixtures without frame pointers, for the DWARF/frame-pointer hybrid unwinder: gcc -O2 with
# .eh_frame only (no -g), symbol tables kept. A workload, the library it links, and the same
# library with late_ names that the workload dlopen()s (tests/fixtures/nofp/nofp_workload.c).
NOFP_FIXTURE_DIR := $(BUILD)/tests/fixtures
NOFP_FIXTURES := $(NOFP_FIXTURE_DIR)/libsysom_nofp.so $(NOFP_FIXTURE_DIR)/libsysom_nofp_late.so \
                 $(NOFP_FIXTURE_DIR)/nofp_workload
NOFP_FIXTURE_CFLAGS := -std=gnu11 -O2 -fomit-frame-pointer -fasynchronous-unwind-tables -g0 \
                       -fno-optimize-sibling-calls -Wall -Wextra -Werror -pthread
FIXTURES += $(NOFP_FIXTURES)

# Simulated multi-rank training job (tests/fixtures/simjob): fake libnccl.so.2 / libcuda.so.1
# with the real names and signatures (compiled against the real nccl.h / cuda.h, so built only
# where those headers exist) and the simjob launcher/rank program linked to them ($ORIGIN).
SIMJOB_CUDA_INCLUDE ?= /usr/local/cuda/include
SIMJOB_DIR := $(BUILD)/tests/fixtures/simjob
SIMJOB_LIB_CFLAGS := -std=gnu11 -D_GNU_SOURCE -O2 -g -fPIC -shared -Wall -Wextra -Werror -pthread \
                     -isystem $(SIMJOB_CUDA_INCLUDE)
SIMJOB_CFLAGS := -std=gnu11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer \
                 -fno-inline -fno-optimize-sibling-calls -Wall -Wextra -Werror -pthread \
                 -isystem $(SIMJOB_CUDA_INCLUDE)
ifneq ($(wildcard $(SIMJOB_CUDA_INCLUDE)/nccl.h),)
ifneq ($(wildcard $(SIMJOB_CUDA_INCLUDE)/cuda.h),)
SIMJOB_FIXTURES := $(SIMJOB_DIR)/libnccl.so.2 $(SIMJOB_DIR)/libcuda.so.1 $(SIMJOB_DIR)/simjob
ifneq ($(wildcard $(SIMJOB_CUDA_INCLUDE)/cupti.h),)
SIMJOB_FIXTURES += $(SIMJOB_DIR)/libcupti.so
endif
FIXTURES += $(SIMJOB_FIXTURES)
endif
endif

# A fake NVML (libnvidia-ml.so.1) with the real exported names and signatures
# (agent/gpu/nvml_abi.h), answering from a control file; the old/ variant lacks the functions
# of newer drivers. Never sanitized (dlopened by the agent and the probe).
NVML_FIXTURE_DIR := $(BUILD)/tests/fixtures/nvml
NVML_FIXTURES := $(NVML_FIXTURE_DIR)/libnvidia-ml.so.1 $(NVML_FIXTURE_DIR)/old/libnvidia-ml.so.1
FIXTURES += $(NVML_FIXTURES)

# Tools the end-to-end tests run (linked against the common library).
TEST_TOOL_SRCS := $(wildcard tests/tools/*.c)
TEST_TOOLS := $(patsubst tests/tools/%.c,$(BUILD)/tests/tools/%,$(TEST_TOOL_SRCS))

BENCH_SRCS := $(wildcard bench/*.c)
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))

FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZERS := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRCS))
FUZZ_SECONDS ?= 300
FUZZ_CFLAGS := -std=gnu11 -g -O1 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined \
               -fno-sanitize-recover=undefined -Wall -Wextra -Werror

.PHONY: all soak daemons tests fuzzers test demo fuzz bench deps clean
.SECONDARY: $(BPF_OBJS) $(BPF_SKELS) $(VMLINUX_H)
all: daemons tests $(FIXTURES) $(BENCHES)
daemons: $(AGENT_BIN) $(SERVER_BIN) $(CTL_BIN) $(SYMREPO_BIN)
tests: $(UNIT_TESTS) $(BPF_TESTS) $(FIXTURES) $(TEST_TOOLS)

# ---------------------------------------------------------------------------------------------
# BPF: vmlinux.h from the running kernel's BTF → %.bpf.o (CO-RE) → %.skel.h

$(VMLINUX_H):
	$(call msg,BTF,$@)
	$(Q)mkdir -p $(@D)
	$(Q)test -r /sys/kernel/btf/vmlinux || { echo "error: /sys/kernel/btf/vmlinux missing: the kernel needs CONFIG_DEBUG_INFO_BTF=y" >&2; exit 1; }
	$(Q)$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@

$(BUILD)/bpf/%.bpf.o: bpf/%.bpf.c $(wildcard bpf/*.h include/sysom/*.h) $(VMLINUX_H)
	$(call msg,BPF,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -I$(BUILD)/bpf -I. \
	    -Wall -Werror -Wno-unused-function -c $< -o $@
	$(Q)$(LLVM_STRIP) -g $@

$(BUILD)/bpf/%.skel.h: $(BUILD)/bpf/%.bpf.o
	$(call msg,SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name $(subst -,_,$*)_bpf > $@

# ---------------------------------------------------------------------------------------------
# Protocol buffers: server/**/*.proto → $(BUILD)/proto/**/*.pb-c.{c,h} (protoc-c, Debian's
# protobuf-c-compiler), compiled into the server library; sources include them as
# "server/query/profile.pb-c.h". The server's objects and tests wait for the headers.

PROTO_SRCS := $(sort $(shell find server -name '*.proto'))
PROTO_GEN := $(BUILD)/proto
PROTO_C := $(patsubst %.proto,$(PROTO_GEN)/%.pb-c.c,$(PROTO_SRCS))
PROTO_H := $(PROTO_C:.c=.h)
PROTO_OBJS := $(patsubst $(PROTO_GEN)/%.c,$(OBJ)/proto/%.o,$(PROTO_C))
CPPFLAGS += -I$(PROTO_GEN)
.SECONDARY: $(PROTO_C) $(PROTO_H)

$(PROTO_GEN)/%.pb-c.c $(PROTO_GEN)/%.pb-c.h: %.proto
	$(call msg,PROTOC,$@)
	$(Q)mkdir -p $(PROTO_GEN)
	$(Q)protoc-c --proto_path=. --c_out=$(PROTO_GEN) $<

$(OBJ)/proto/%.o: $(PROTO_GEN)/%.c $(PROTO_H)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(call obj_of,$(SERVER_SRCS) server/main.c bench/export_bench.c \
  $(filter tests/unit/server/%,$(UNIT_TEST_SRCS))): | $(PROTO_H)

# ---------------------------------------------------------------------------------------------
# C objects and libraries

$(OBJ)/%.o: %.c | $(BPF_SKELS)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(COMMON_LIB): $(call obj_of,$(COMMON_SRCS))
$(AGENT_LIB): $(call obj_of,$(AGENT_SRCS))
$(SERVER_LIB): $(call obj_of,$(SERVER_SRCS))
$(CTL_LIB): $(call obj_of,$(CTL_SRCS))
$(SYMREPO_LIB): $(call obj_of,$(SYMREPO_SRCS))
$(SERVER_LIB): $(PROTO_OBJS)
$(TEST_SUPPORT_LIB): $(TEST_SUPPORT_OBJS)
$(BUILD)/lib/%.a:
	$(call msg,AR,$@)
	$(Q)mkdir -p $(@D)
	$(Q)rm -f $@ && ar rcs $@ $^

$(AGENT_BIN): $(OBJ)/agent/daemon/main.o $(AGENT_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(AGENT_LDLIBS)

$(SERVER_BIN): $(OBJ)/server/main.o $(SERVER_LIB) $(SYMREPO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(SERVER_LDLIBS)

$(CTL_BIN): $(OBJ)/ctl/main.o $(CTL_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(CTL_LDLIBS)

$(SYMREPO_BIN): $(OBJ)/symrepo/main.o $(SYMREPO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(SYMREPO_LDLIBS)

# ---------------------------------------------------------------------------------------------
# Client library (client/): loaded into training processes, so it links libc only and is never
# sanitized (position-independent objects of its own under $(OBJ)/pic/). The unit test that
# drives it against agent/ranks/registry.c links the ordinary (sanitized in SAN=1) object instead.

CLIENT_SRCS := $(wildcard client/*.c)
CLIENT_PIC_OBJS := $(patsubst %.c,$(OBJ)/pic/%.o,$(CLIENT_SRCS))
CLIENT_SO := $(BUILD)/lib/libsysom-client.so
CLIENT_A := $(BUILD)/lib/libsysom-client.a
CLIENT_CFLAGS := -std=gnu11 -g -O2 -fPIC -fvisibility=hidden -pthread $(WARNINGS)

all: $(CLIENT_SO) $(CLIENT_A)

$(OBJ)/pic/client/%.o: client/%.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -D_GNU_SOURCE -I. $(CLIENT_CFLAGS) -MMD -MP -c $< -o $@

$(CLIENT_A): $(CLIENT_PIC_OBJS)

$(CLIENT_SO): $(CLIENT_PIC_OBJS)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -shared -pthread -Wl,-soname,libsysom-client.so.1 -Wl,-z,defs -o $@ $^
	$(Q)ln -sf libsysom-client.so $(@D)/libsysom-client.so.1

# ---------------------------------------------------------------------------------------------
# In-process components (plugins/): shared libraries loaded into training processes, built like
# the client library (libc + libdl only, never sanitized, hidden visibility; each exports only
# its entry points) and linking the client's telemetry channel. Unit tests in
# tests/unit/plugins/ link the ordinary (sanitized in SAN=1) objects of every plugin instead.
#   libnccl-profiler-sysom.so  NCCL profiler plugin (NCCL_PROFILER_PLUGIN=sysom or its path)
#   libsysom-cupti.so          CUPTI activity library (CUDA_INJECTION64_PATH); needs cupti.h

CUDA_INCLUDE ?= /usr/local/cuda/include
NCCL_PLUGIN_SRCS := $(wildcard plugins/nccl/*.c)
NCCL_PLUGIN_SO := $(BUILD)/lib/libnccl-profiler-sysom.so
CUPTI_PLUGIN_SRCS := $(wildcard plugins/cupti/*.c)
CUPTI_PLUGIN_SO := $(BUILD)/lib/libsysom-cupti.so
CHANNEL_SRCS := client/sysom_channel.c
PLUGIN_OBJS := $(call obj_of,$(NCCL_PLUGIN_SRCS) $(CHANNEL_SRCS))
PLUGIN_LDLIBS := -ldl -lm
$(OBJ)/plugins/cupti/%.o $(OBJ)/pic/plugins/cupti/%.o: CPPFLAGS += -isystem $(CUDA_INCLUDE)

$(OBJ)/pic/plugins/%.o: plugins/%.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -D_GNU_SOURCE -I. $(if $(findstring /cupti/,$<),-isystem $(CUDA_INCLUDE)) \
	    $(CLIENT_CFLAGS) -MMD -MP -c $< -o $@

ifneq ($(NCCL_PLUGIN_SRCS),)
all: $(NCCL_PLUGIN_SO)
$(NCCL_PLUGIN_SO): $(patsubst %.c,$(OBJ)/pic/%.o,$(NCCL_PLUGIN_SRCS) $(CHANNEL_SRCS))
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -shared -pthread -Wl,-soname,libnccl-profiler-sysom.so -Wl,-z,defs -o $@ $^ $(PLUGIN_LDLIBS)
endif

ifneq ($(CUPTI_PLUGIN_SRCS),)
ifneq ($(wildcard $(CUDA_INCLUDE)/cupti.h),)
all: $(CUPTI_PLUGIN_SO)
PLUGIN_OBJS += $(call obj_of,$(CUPTI_PLUGIN_SRCS))
$(CUPTI_PLUGIN_SO): $(patsubst %.c,$(OBJ)/pic/%.o,$(CUPTI_PLUGIN_SRCS) $(CHANNEL_SRCS))
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -shared -pthread -Wl,-soname,libsysom-cupti.so -Wl,-z,defs -o $@ $^ $(PLUGIN_LDLIBS)
endif
endif

$(BUILD)/tests/unit/plugins/%: $(OBJ)/tests/unit/plugins/%.o $(PLUGIN_OBJS) $(TEST_SUPPORT_LIB) $(AGENT_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(PLUGIN_OBJS) $(TEST_SUPPORT_LIB) $(AGENT_LDLIBS) $(LIB_CMOCKA) $(PLUGIN_LDLIBS)

$(BUILD)/tests/unit/agent/ranks/test_channel: $(OBJ)/tests/unit/agent/ranks/test_channel.o \
		$(OBJ)/client/sysom_channel.o $(TEST_SUPPORT_LIB) $(AGENT_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(TEST_SUPPORT_LIB) $(AGENT_LDLIBS) $(LIB_CMOCKA)

$(BUILD)/tests/unit/agent/ranks/test_registry: $(OBJ)/tests/unit/agent/ranks/test_registry.o \
		$(OBJ)/client/sysom_client.o $(OBJ)/client/sysom_channel.o $(TEST_SUPPORT_LIB) $(AGENT_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(TEST_SUPPORT_LIB) $(AGENT_LDLIBS) $(LIB_CMOCKA)

# ---------------------------------------------------------------------------------------------
# Tests

$(BUILD)/tests/unit/common/%: $(OBJ)/tests/unit/common/%.o $(TEST_SUPPORT_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) $(call test_ldflags,tests/unit/common/$*.c) -o $@ $< $(TEST_SUPPORT_LIB) $(COMMON_LIB) $(LIB_CMOCKA) $(COMMON_LDLIBS)

$(BUILD)/tests/unit/agent/%: $(OBJ)/tests/unit/agent/%.o $(TEST_SUPPORT_LIB) $(AGENT_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) $(call test_ldflags,tests/unit/agent/$*.c) -o $@ $< $(TEST_SUPPORT_LIB) $(AGENT_LDLIBS) $(LIB_CMOCKA)

$(BUILD)/tests/unit/server/%: $(OBJ)/tests/unit/server/%.o $(TEST_SUPPORT_LIB) $(SERVER_LIB) $(SYMREPO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) $(call test_ldflags,tests/unit/server/$*.c) -o $@ $< $(TEST_SUPPORT_LIB) $(SERVER_LDLIBS) $(LIB_CMOCKA)

$(BUILD)/tests/unit/symrepo/%: $(OBJ)/tests/unit/symrepo/%.o $(TEST_SUPPORT_LIB) $(SYMREPO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) $(call test_ldflags,tests/unit/symrepo/$*.c) -o $@ $< $(TEST_SUPPORT_LIB) $(SYMREPO_LDLIBS) $(LIB_CMOCKA)

$(BUILD)/tests/unit/ctl/%: $(OBJ)/tests/unit/ctl/%.o $(TEST_SUPPORT_LIB) $(CTL_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) $(call test_ldflags,tests/unit/ctl/$*.c) -o $@ $< $(TEST_SUPPORT_LIB) $(CTL_LDLIBS) $(LIB_CMOCKA)

$(BUILD)/tests/bpf/%: $(OBJ)/tests/bpf/%.o $(TEST_SUPPORT_LIB) $(AGENT_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT_LIB) $(AGENT_LDLIBS) $(LIB_CMOCKA)

$(BUILD)/tests/tools/%: $(OBJ)/tests/tools/%.o $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(COMMON_LIB) $(COMMON_LDLIBS)

$(BUILD)/tests/fixtures/%: tests/fixtures/%.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(FIXTURE_CFLAGS) -o $@ $< -lm

$(NOFP_FIXTURE_DIR)/libsysom_nofp.so: tests/fixtures/nofp/nofp_lib.c tests/fixtures/nofp/nofp.h
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(NOFP_FIXTURE_CFLAGS) -fPIC -shared -Wl,-soname,libsysom_nofp.so -o $@ $<

$(NOFP_FIXTURE_DIR)/libsysom_nofp_late.so: tests/fixtures/nofp/nofp_lib.c tests/fixtures/nofp/nofp.h
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(NOFP_FIXTURE_CFLAGS) -DNOFP_LATE -fPIC -shared -Wl,-soname,libsysom_nofp_late.so \
	    -o $@ $<

$(NOFP_FIXTURE_DIR)/nofp_workload: tests/fixtures/nofp/nofp_workload.c tests/fixtures/nofp/nofp.h \
		$(NOFP_FIXTURE_DIR)/libsysom_nofp.so | $(NOFP_FIXTURE_DIR)/libsysom_nofp_late.so
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(NOFP_FIXTURE_CFLAGS) -o $@ $< -L$(@D) -lsysom_nofp -Wl,-rpath,'$$ORIGIN' -ldl

# Simulated training job (see SIMJOB_FIXTURES above); never sanitized.
$(SIMJOB_DIR)/libnccl.so.2: tests/fixtures/simjob/fake_nccl.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(SIMJOB_LIB_CFLAGS) -Wl,-soname,libnccl.so.2 -o $@ $<

$(SIMJOB_DIR)/libcuda.so.1: tests/fixtures/simjob/fake_cuda.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(SIMJOB_LIB_CFLAGS) -Wl,-soname,libcuda.so.1 -o $@ $<

# A fake CUPTI for the CUPTI library's tests and the simulated job (fake CUDA reports to it).
$(SIMJOB_DIR)/libcupti.so: tests/fixtures/simjob/fake_cupti.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(SIMJOB_LIB_CFLAGS) -Wl,-soname,libcupti.so -o $@ $<

$(SIMJOB_DIR)/simjob: tests/fixtures/simjob/simjob.c $(SIMJOB_DIR)/libnccl.so.2 $(SIMJOB_DIR)/libcuda.so.1
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(SIMJOB_CFLAGS) -o $@ $< -L$(@D) -l:libnccl.so.2 -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN'

$(NVML_FIXTURE_DIR)/libnvidia-ml.so.1: tests/fixtures/nvml/fake_nvml.c agent/gpu/nvml_abi.h
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -std=gnu11 -D_GNU_SOURCE -O2 -g -fPIC -shared -Wall -Wextra -Werror -I. \
	    -Wl,-soname,libnvidia-ml.so.1 -o $@ $<

$(NVML_FIXTURE_DIR)/old/libnvidia-ml.so.1: tests/fixtures/nvml/fake_nvml.c agent/gpu/nvml_abi.h
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -std=gnu11 -D_GNU_SOURCE -DFAKE_NVML_OLD -O2 -g -fPIC -shared -Wall -Wextra -Werror \
	    -I. -Wl,-soname,libnvidia-ml.so.1 -o $@ $<

# The NCCL profiler benchmark also sends through the component channel directly.
$(BUILD)/bench/nccl_profiler_bench: $(OBJ)/bench/nccl_profiler_bench.o $(OBJ)/client/sysom_channel.o
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -pthread -ldl

# The analysis benchmark runs the server's analysis over its store.
$(BUILD)/bench/analysis_bench: $(OBJ)/bench/analysis_bench.o $(SERVER_LIB) $(SYMREPO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(SERVER_LDLIBS)

# The patterns benchmark runs the server's behaviour-pattern localisation.
$(BUILD)/bench/patterns_bench: $(OBJ)/bench/patterns_bench.o $(SERVER_LIB) $(SYMREPO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(SERVER_LDLIBS)

# The host anomaly benchmark runs the server's Reveal scoring.
$(BUILD)/bench/reveal_bench: $(OBJ)/bench/reveal_bench.o $(SERVER_LIB) $(SYMREPO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(SERVER_LDLIBS)

# The export benchmark drives the server's flame graph handler through the unit-test harness.
$(BUILD)/bench/export_bench: $(OBJ)/bench/export_bench.o $(TEST_SUPPORT_LIB) $(SERVER_LIB) $(SYMREPO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT_LIB) $(SERVER_LDLIBS)

# The ingest load generator: batch templates (test support), spool files (agent), libuv and
# http-parser for the simulated agents' connections.
# SQLite retention against a one-transaction delete (the store itself).
$(BUILD)/bench/retention_bench: $(OBJ)/bench/retention_bench.o $(TEST_SUPPORT_LIB) $(SERVER_LIB) $(SYMREPO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT_LIB) $(SERVER_LDLIBS)

# NCCL raw chunks against the instances kept past them (the store itself).
$(BUILD)/bench/nccl_rollup_bench: $(OBJ)/bench/nccl_rollup_bench.o $(TEST_SUPPORT_LIB) $(SERVER_LIB) $(SYMREPO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT_LIB) $(SERVER_LDLIBS)

$(BUILD)/bench/ingest_load: $(OBJ)/bench/ingest_load.o $(TEST_SUPPORT_LIB) $(AGENT_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT_LIB) $(AGENT_LIB) $(COMMON_LIB) $(LIB_UV) \
	    $(LIB_HTTP) $(LIB_JSON) $(COMMON_LDLIBS)

# Benchmark programs link every library (each uses what it needs).
$(BUILD)/bench/%: $(OBJ)/bench/%.o $(TEST_SUPPORT_LIB) $(AGENT_LIB) $(SYMREPO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT_LIB) $(AGENT_LIB) $(SYMREPO_LIB) $(COMMON_LIB) $(LIB_BPF) $(LIB_CURL) \
	    $(LIB_UV) $(LIB_SYSTEMD) $(LIB_JSON) $(LIB_CXXABI) $(COMMON_LDLIBS)

# Fuzz targets: clang + libFuzzer; each links the common sources plus what it names in
# a `// fuzz-sources: a.c b.c` line of its own (those are prerequisites too).
fuzz_sources = $(shell sed -n 's|^// fuzz-sources: ||p' $(1))
.SECONDEXPANSION:
$(BUILD)/fuzz/%: tests/fuzz/%.c $(COMMON_SRCS) $(COMMON_HDRS) \
		$$(call fuzz_sources,tests/fuzz/$$*.c) | $(BPF_SKELS)
	$(call msg,FUZZ,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(FUZZ_CFLAGS) -I$(BUILD)/bpf -o $@ $< $(COMMON_SRCS) \
	    $(call fuzz_sources,$<) $(COMMON_LDLIBS) $(LIB_JSON) $(LIB_UV) $(LIB_HTTP) $(LIB_CXXABI)

fuzzers: $(FUZZERS)

# ---------------------------------------------------------------------------------------------
# Installation: `make install` / `make uninstall` of the release build, GNU-style directories,
# DESTDIR for staging (packages). The configuration directory is /etc (not $(PREFIX)/etc) by
# default, because the units, the docs and the daemons' defaults use /etc/sysom; systemd
# searches $(PREFIX)/lib/systemd/system for /usr/local and /usr. The systemd units are written
# from deploy/*.service.in with these paths. Configuration files are installed only where
# none exists and removed only while unchanged; tokens are never installed.
#   make install PREFIX=/usr/local DESTDIR=/tmp/stage
PREFIX ?= /usr/local
EXEC_PREFIX ?= $(PREFIX)
BINDIR ?= $(EXEC_PREFIX)/bin
LIBDIR ?= $(EXEC_PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DATADIR ?= $(PREFIX)/share
DOCDIR ?= $(DATADIR)/doc/sysom
SYSCONFDIR ?= /etc
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
# The web UI's files (ui/, with ui/vendor/ when `make ui` could build it); the server unit
# passes --ui-dir (a server built here defaults to the source tree's ui/).
UIDIR ?= $(DATADIR)/sysom/ui
INSTALL ?= install
DESTDIR ?=

UNIT_TEMPLATES := $(wildcard deploy/*.service.in)
UNITS := $(patsubst deploy/%.in,$(BUILD)/deploy/%,$(UNIT_TEMPLATES))
CONF_EXAMPLES := deploy/agent.conf.example deploy/server.conf.example
INSTALL_DOCS := README.md docs/operations.md docs/http-api.md docs/registration-protocol.md \
  docs/nccl-profiler.md docs/cupti-library.md docs/deployment.md deploy/reverse-proxy.nginx.conf
# The in-process libraries that this tree can build (the CUPTI one needs cupti.h).
INSTALL_PLUGINS := $(NCCL_PLUGIN_SO) $(if $(wildcard $(CUDA_INCLUDE)/cupti.h),$(CUPTI_PLUGIN_SO))
INSTALL_BINS := $(AGENT_BIN) $(SERVER_BIN) $(CTL_BIN) $(SYMREPO_BIN)

.PHONY: install install-prereqs uninstall units FORCE
units: $(UNITS)
# What install copies (debian/rules builds exactly this).
install-prereqs: $(INSTALL_BINS) $(INSTALL_PLUGINS) $(CLIENT_SO) $(UNITS)
# Rewritten when a directory changed (FORCE), kept (same timestamp) otherwise.
$(BUILD)/deploy/%.service: deploy/%.service.in FORCE
	$(Q)mkdir -p $(@D)
	$(Q)sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
	    -e 's|@DOCDIR@|$(DOCDIR)|g' -e 's|@UIDIR@|$(UIDIR)|g' $< > $@.tmp
	$(Q)if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv -f $@.tmp $@; echo "  GEN     $@"; fi
FORCE:

install: install-prereqs
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/sysom \
	    $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(SYSCONFDIR)/sysom $(DESTDIR)$(DOCDIR)/examples
	$(INSTALL) -m 0755 $(INSTALL_BINS) $(DESTDIR)$(BINDIR)/
	$(INSTALL) -m 0644 $(INSTALL_PLUGINS) $(DESTDIR)$(LIBDIR)/
	$(INSTALL) -m 0644 $(CLIENT_SO) $(DESTDIR)$(LIBDIR)/libsysom-client.so.1
	ln -sf libsysom-client.so.1 $(DESTDIR)$(LIBDIR)/libsysom-client.so
	$(INSTALL) -m 0644 client/sysom_client.h $(DESTDIR)$(INCLUDEDIR)/sysom/
	$(INSTALL) -m 0644 $(UNITS) $(DESTDIR)$(SYSTEMDUNITDIR)/
	$(INSTALL) -m 0644 $(CONF_EXAMPLES) $(DESTDIR)$(DOCDIR)/examples/
	$(INSTALL) -m 0644 $(wildcard $(INSTALL_DOCS)) $(DESTDIR)$(DOCDIR)/
	@cd ui && find . -type f | while read -r f; do \
	  $(INSTALL) -D -m 0644 "$$f" "$(DESTDIR)$(UIDIR)/$$f" || exit 1; done
	@echo "  installed ui/ in $(DESTDIR)$(UIDIR)"
	@for f in $(CONF_EXAMPLES); do \
	  c=$(DESTDIR)$(SYSCONFDIR)/sysom/$$(basename $$f .example); \
	  if [ -e $$c ]; then echo "  keeping $$c"; else $(INSTALL) -m 0644 $$f $$c && echo "  created $$c"; fi; \
	done

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(INSTALL_BINS)))
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,$(notdir $(NCCL_PLUGIN_SO) $(CUPTI_PLUGIN_SO)) \
	    libsysom-client.so.1 libsysom-client.so)
	rm -f $(DESTDIR)$(INCLUDEDIR)/sysom/sysom_client.h
	rm -f $(addprefix $(DESTDIR)$(SYSTEMDUNITDIR)/,$(notdir $(UNITS)))
	@for f in $(CONF_EXAMPLES); do \
	  c=$(DESTDIR)$(SYSCONFDIR)/sysom/$$(basename $$f .example); \
	  if cmp -s $$f $$c; then rm -f $$c; elif [ -e $$c ]; then echo "  keeping $$c (changed)"; fi; \
	done
	rm -rf $(DESTDIR)$(UIDIR)
	@rmdir $(dir $(DESTDIR)$(UIDIR)) 2>/dev/null || true
	rm -f $(addprefix $(DESTDIR)$(DOCDIR)/examples/,$(notdir $(CONF_EXAMPLES))) \
	    $(addprefix $(DESTDIR)$(DOCDIR)/,$(notdir $(INSTALL_DOCS)))
	@rmdir $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) $(DESTDIR)$(INCLUDEDIR)/sysom \
	    $(DESTDIR)$(SYSCONFDIR)/sysom 2>/dev/null || true

# Debian packages (debian/): built from a copy of the tree into $(BUILD)/deb; deb-test builds,
# installs, runs and purges them (root; minutes, so not part of `make test`).
.PHONY: deb deb-test
deb:
	$(Q)scripts/build-debs.sh $(BUILD)/deb

deb-test: deps
	$(Q)$(MAKE) --no-print-directory $(BUILD)/tests/fixtures/chain_workload
	$(Q)SYSOM_BUILD=$(BUILD) SYSOM_ROOT=$(CURDIR) bash tests/pkg/test_deb.sh

# ---------------------------------------------------------------------------------------------
# The web UI (ui/, served by sysom-server at /ui/): its libraries are npm packages pinned in
# package-lock.json, copied from node_modules/ (`make deps`: npm ci) into ui/vendor/, which the
# server serves like the rest of ui/; nothing comes from a CDN at run time. Without
# node_modules the build goes on and the browser test (tests/e2e/test_ui.sh) skips.
UI_VENDOR_FILES := \
  node_modules/d3/dist/d3.min.js:d3.min.js \
  node_modules/d3/LICENSE:d3.LICENSE.txt \
  node_modules/d3-flame-graph/dist/d3-flamegraph.min.js:d3-flamegraph.min.js \
  node_modules/d3-flame-graph/dist/d3-flamegraph.css:d3-flamegraph.css \
  node_modules/d3-flame-graph/LICENSE:d3-flame-graph.LICENSE.txt
UI_VENDOR := $(foreach f,$(UI_VENDOR_FILES),ui/vendor/$(word 2,$(subst :, ,$(f))))
ui/vendor/%:
	$(Q)mkdir -p $(@D)
	$(Q)src=$$(printf '%s\n' $(UI_VENDOR_FILES) | sed -n 's|:$*$$||p'); \
	  test -f "$$src" || { echo "$$src missing: run make deps (npm ci)" >&2; exit 1; }; \
	  cp "$$src" $@
ui: $(UI_VENDOR)
.PHONY: ui
ifneq ($(wildcard node_modules/d3/dist/d3.min.js),)
all: ui
endif

# ---------------------------------------------------------------------------------------------
# Entry points of the README

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

	@command -v npm >/dev/null || { echo "installing Debian packages: nodejs npm"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nodejs npm; }
	$(Q)PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error

# `make test` stays under 50 minutes on a 2-CPU machine: the healthy soak runs 2 minutes there
# (`make soak` runs the 10-minute one) and each fuzz target 5 s (`make fuzz` fuzzes for longer).
TEST_SOAK_SECONDS ?= 120
TEST_FUZZ_SMOKE_SECONDS ?= 5
test: deps
	$(Q)$(MAKE) --no-print-directory BUILD=build/san SAN=1 all fuzzers
	$(Q)SYSOM_SOAK_SECONDS=$${SYSOM_SOAK_SECONDS:-$(TEST_SOAK_SECONDS)} \
	    SYSOM_FUZZ_SMOKE_SECONDS=$${SYSOM_FUZZ_SMOKE_SECONDS:-$(TEST_FUZZ_SMOKE_SECONDS)} \
	    tests/run-all.sh build/san

# The healthy soak at its full length: 10 minutes of a healthy 8-rank job, no incident allowed.
soak: deps
	$(Q)$(MAKE) --no-print-directory BUILD=build/san SAN=1 all
	$(Q)SYSOM_SOAK_SECONDS=600 tests/run-all.sh build/san e2e/test_healthy_soak

demo: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/demo.sh $(BUILD)

fuzz: deps
	$(Q)$(MAKE) --no-print-directory BUILD=build/san fuzzers
	$(Q)tests/fuzz/run.sh build/san $(FUZZ_SECONDS)

bench: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)bench/run.sh $(BUILD)

clean:
	rm -rf build ui/vendor

-include $(shell find $(OBJ) -name '*.d' 2>/dev/null)
