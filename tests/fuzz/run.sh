#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs libFuzzer targets: tests/fuzz/run.sh [--tap] BUILD_DIR SECONDS [TARGET...]
# Seeds come from tests/fuzz/corpus/<target>/ (committed); new inputs go to
# BUILD_DIR/fuzz-corpus/<target>/; crashes to BUILD_DIR/fuzz-crashes/<target>/.
set -u
tap=0
if [ "${1:-}" = --tap ]; then tap=1; shift; fi
build=${1:?usage: run.sh [--tap] BUILD_DIR SECONDS [TARGET...]}
seconds=${2:?seconds}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	for t in "$build"/fuzz/fuzz_*; do [ -x "$t" ] && targets+=("$(basename "$t")"); done
fi
n=0 bad=0
for target in "${targets[@]}"; do
	n=$((n + 1))
	work="$build/fuzz-corpus/$target" crashes="$build/fuzz-crashes/$target"
	mkdir -p "$work" "$crashes"
	seeds=()
	[ -d "$here/corpus/$target" ] && seeds=("$here/corpus/$target")
	log="$build/fuzz-crashes/$target.log"
	ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:${ASAN_OPTIONS:-}" \
		"$build/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$crashes/" "$work" "${seeds[@]}" >"$log" 2>&1
	rc=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	if [ $rc -eq 0 ]; then
		[ $tap = 1 ] && echo "ok $n - $target: ${runs:-?} inputs in ${seconds}s, no crash"
		[ $tap = 1 ] || echo "$target: ${runs:-?} inputs in ${seconds}s, no crash"
	else
		bad=$((bad + 1))
		echo "not ok $n - $target: failed (status $rc), see $log and $crashes"
		grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -5 | sed 's/^/#   /'
	fi
done
[ $tap = 1 ] && echo "1..$n"
[ $bad -eq 0 ]
