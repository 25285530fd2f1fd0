#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the benchmarks against a release build: bench/run.sh BUILD_DIR
# Results are printed as a Markdown table (copy them into docs/PERFORMANCE.md with the date).
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" != 0 ]; then
	exec sudo "$0" "$@"
fi
python3 "$here/overhead.py" "$build" --rounds "${BENCH_ROUNDS:-3}" --seconds "${BENCH_SECONDS:-30}" \
	--markdown "$build/bench-overhead.md"
echo "table written to $build/bench-overhead.md"
"$here/symrepo.sh" "$build"
