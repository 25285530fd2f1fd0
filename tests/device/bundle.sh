#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs a release build and the shared libraries it needs (beside glibc's own) into DIR, so the
# device check (gpu_check.sh) can run it on a GPU machine of another distribution.
#   tests/device/bundle.sh BUILD DIR        e.g. tests/device/bundle.sh build .dev
set -euo pipefail
build=${1:?BUILD}
dir=${2:?DIR}
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib" "$dir/deps"
cp "$build/sysom-agent" "$build/sysom-server" "$build/sysomctl" "$dir/bin/"
cp "$build/lib/libsysom-cupti.so" "$build/lib/libnccl-profiler-sysom.so" "$dir/lib/"
for extra in "$build"/sysom-nvml-probe "$build"/tools/sysom-nvml-probe; do
	[ -x "$extra" ] && cp "$extra" "$dir/bin/"
done
# glibc's libraries stay: the target's (newer) ones serve binaries built against older ones.
ldd "$dir"/bin/* "$dir"/lib/*.so 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
	grep -v -E '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so' |
	while read -r lib; do cp -L "$lib" "$dir/deps/"; done
du -sh "$dir"
