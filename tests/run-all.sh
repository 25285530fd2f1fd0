#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every test of a build: cmocka units, real-kernel BPF tests, end-to-end scripts and a
# short run of each fuzz target. Each test case reports as a TAP line; the run ends with
# "N passed, N failed, N skipped". Usage: tests/run-all.sh BUILD_DIR [FILTER]
#
# Units and fuzz smoke runs are self-contained (no BPF, no host-wide agent, ephemeral ports,
# their own files): they run $SYSOM_TEST_JOBS at a time (default: the CPUs, at most 4), their
# lines printed in order once the phase ends. BPF and end-to-end tests run one at a time: their
# agents watch the whole host, and several measure latencies.
set -u
build=${1:?usage: tests/run-all.sh BUILD_DIR [FILTER]}
filter=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$(cd "$build" && pwd)
logdir="$build/test-logs"
mkdir -p "$logdir"
rm -f "$logdir"/*.log "$logdir"/measurements.txt

passed=0 failed=0 skipped=0
failures=()

export SYSOM_BUILD="$build" SYSOM_ROOT="$root"
export CMOCKA_MESSAGE_OUTPUT=TAP
# Sanitizers: abort on the first report so a test cannot pass with a hidden error.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"

# sweep_leftovers TAG: kills every process still carrying SYSOM_TEST_TAG=TAG in its environment
# (a test's server, agent or job that outlived it would load the machine under the next tests:
# ranks under a killed `timeout`, a setsid'd job, an orphaned worker); prints "comm[pid] ...".
sweep_leftovers() {
	local tag=$1 env pid out="" round
	for round in 1 2 3; do
		local found=0
		for env in $(grep -lzxF "SYSOM_TEST_TAG=$tag" /proc/[0-9]*/environ 2>/dev/null); do
			pid=${env#/proc/}
			pid=${pid%/environ}
			[ "$round" -eq 1 ] && out+="$(cat "/proc/$pid/comm" 2>/dev/null || echo '?')[$pid] "
			kill -KILL "$pid" 2>/dev/null && found=1
		done
		[ "$found" -eq 0 ] && break
		sleep 0.2
	done
	echo "${out% }"
}

# Runs one test program; counts its TAP lines. A program that exits non-zero without a
# failing TAP line (a crash, a sanitizer report) counts as one failure.
run_tap() {
	local name=$1 timeout_s=$2
	shift 2
	local log="$logdir/${name//\//_}.log"
	local start=$SECONDS rc
	local tag="${name//\//_}-$$-$start"
	SYSOM_TEST_TAG=$tag timeout --kill-after=10 "$timeout_s" "$@" >"$log" 2>&1
	rc=$?
	local leftovers
	leftovers=$(sweep_leftovers "$tag")
	local p f s
	# cmocka 1.1.5 reports a skipped test as "not ok N # SKIP"; TAP itself uses "ok N # SKIP".
	p=$(grep -E '^ok [0-9]+' "$log" | grep -cvE '# (SKIP|skip)' | tr -d ' ')
	s=$(grep -cE '^(not )?ok [0-9]+.*# (SKIP|skip)' "$log" | tr -d ' ')
	f=$(grep -E '^not ok [0-9]+' "$log" | grep -cvE '# (SKIP|skip)' | tr -d ' ')
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1
		if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
			echo "not ok - $name: timed out after ${timeout_s}s" >>"$log"
		else
			echo "not ok - $name: exited with status $rc" >>"$log"
		fi
	fi
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
	local verdict=PASS
	[ "$f" -gt 0 ] && verdict=FAIL && failures+=("$name (log: $log)")
	[ -n "$counts_file" ] && echo "$p $f $s $name (log: $log)" >"$counts_file"
	printf '%-4s %-48s %3d passed %3d failed %3d skipped  %3ds\n' "$verdict" "$name" "$p" "$f" "$s" $((SECONDS - start))
	if [ -n "$leftovers" ]; then
		echo "# left behind (killed): $leftovers" >>"$log"
		echo "     | left behind (killed): $leftovers"
	fi
	if [ "$f" -gt 0 ]; then
		# Each failure with the two diagnostic lines just before it, so that a CI summary
		# alone says why (the log itself stays on the CI machine).
		awk '/^# / { d2 = d1; d1 = substr($0, 1, 400); next }
		     /^ok/ { d1 = d2 = ""; next }
		     /^not ok/ { if (d2 != "") print d2; if (d1 != "") print d1; d1 = d2 = ""; print; next }
		     /ERROR|error:|Sanitizer|runtime error/ { print }' "$log" | head -40 | sed 's/^/     | /'
	fi
}

selected() {
	[ -z "$filter" ] || [[ $1 == *"$filter"* ]]
}

# The parallel phase: queue_tap NAME TIMEOUT CMD... starts a test once a slot is free (its
# output and counts to files), drain_queue waits for all and reports them in queued order.
counts_file=""
queued=()
jobs_max=${SYSOM_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[[ $jobs_max =~ ^[1-9][0-9]*$ ]] || jobs_max=1
[ "$jobs_max" -gt 4 ] && [ -z "${SYSOM_TEST_JOBS:-}" ] && jobs_max=4
queue_dir=$(mktemp -d "${TMPDIR:-/tmp}/sysom-run-all.XXXXXX")
trap 'rm -rf "$queue_dir"' EXIT

queue_tap() {
	local i=${#queued[@]}
	while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do
		wait -n
	done
	queued+=("$i")
	(counts_file="$queue_dir/$i.counts"; run_tap "$@" >"$queue_dir/$i.out") &
}

drain_queue() {
	local i p f s rest
	wait
	for i in "${queued[@]}"; do
		cat "$queue_dir/$i.out"
		if read -r p f s rest <"$queue_dir/$i.counts"; then
			passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
			[ "$f" -gt 0 ] && failures+=("$rest")
		else
			failed=$((failed + 1)) failures+=("queued test $i: no result")
		fi
	done
	queued=()
	rm -f "$queue_dir"/*
}

cd "$root" || exit 2

echo "== unit tests (cmocka, $build) and fuzz smoke runs (${SYSOM_FUZZ_SMOKE_SECONDS:-20}s each), $jobs_max at a time"
while IFS= read -r t; do
	[ -x "$t" ] && [ -f "$t" ] || continue
	name=unit/${t#"$build"/tests/unit/}
	selected "$name" && queue_tap "$name" 300 "$t"
done < <(find "$build/tests/unit" -type f -name 'test_*' -perm -u+x 2>/dev/null | sort)
for t in "$build"/fuzz/fuzz_*; do
	[ -x "$t" ] && [ -f "$t" ] || continue
	name=fuzz/$(basename "$t")
	selected "$name" && queue_tap "$name" 300 "$here/fuzz/run.sh" --tap "$build" "${SYSOM_FUZZ_SMOKE_SECONDS:-20}" "$(basename "$t")"
done
drain_queue

echo "== real-kernel BPF tests"
for t in "$build"/tests/bpf/test_*; do
	[ -x "$t" ] && [ -f "$t" ] || continue
	name=bpf/$(basename "$t")
	selected "$name" && run_tap "$name" 600 "$t"
done

echo "== end-to-end tests"
for t in "$here"/e2e/test_*.sh; do
	[ -f "$t" ] || continue
	name=e2e/$(basename "$t" .sh)
	selected "$name" && run_tap "$name" 900 bash "$t"
done

if [ -s "$logdir/measurements.txt" ]; then
	echo
	echo "Measurements (tests that record one):"
	sed 's/^/  /' "$logdir/measurements.txt"
fi
if [ ${#failures[@]} -gt 0 ]; then
	echo
	echo "Failed:"
	printf '  %s\n' "${failures[@]}"
fi
echo
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
