#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Concurrent decompression bombs stay within the decode memory budget: while 6, then 32 bombs
# (each decompressing to the per-request limit: zeros with and without a declared size, and
# batches whose stacks the decoder fills before refusing them) arrive at once, the server's
# peak RSS (VmHWM) over its RSS just before stays under the budget plus a stated margin;
# legitimate batches sent alongside are all stored (after 503 + Retry-After if need be) and
# none is lost; the server ends healthy with nothing reserved. /healthz, probed all along,
# answers 200 within a bound (its own thread and slots: not behind the uploads). A budget too
# small for one largest upload is refused at startup.
. "$(dirname "$0")/lib.sh"
TOOL=$BUILD/tests/tools/bombload
for b in "$SERVER_BIN" "$CTL_BIN" "$TOOL"; do
	[ -x "$b" ] || { echo "missing $b: build first" >&2; exit 1; }
done

# The defaults' shape at a quarter of the size (budget = 3 x the per-request limit).
LIMIT_MIB=32
BUDGET_MIB=96
# The stated margin: what the server holds beyond the reservations while bombs arrive (their
# compressed bodies in the transport, thread stacks, SQLite pages for the legitimate batches,
# allocator slack and, in sanitizer builds, ASan's shadow memory: 1/8 of what is touched).
# Without the budget the same load peaks ~200 MiB (6 bombs) and ~510 MiB (32) over it.
MARGIN_MIB=40

echo "e2e-secret-token" >"$E2E_TMP/token"
chmod 600 "$E2E_TMP/token"
CTL_OPTS=(--token-file "$E2E_TMP/token")

"$SERVER_BIN" --data-dir "$E2E_TMP/small.data" --port-file "$E2E_TMP/small.port" \
	--listen 127.0.0.1:0 --decode-memory-budget 100M >"$E2E_TMP/small.log" 2>&1
check "a budget below one largest decompression (128M + context) is refused at startup (exit 2)" \
	test $? -eq 2
check "... saying which limit it must hold" grep -q "max-ingest-decompressed" "$E2E_TMP/small.log"

# Freed memory must leave the process for RSS to mean what is live: no ASan quarantine here.
# Every upload comes from 127.0.0.1 (one peer standing for a fleet): no per-peer limit, so
# each 503 is the budget's.
ASAN_OPTIONS="$ASAN_OPTIONS:quarantine_size_mb=0" start_server srv \
	--token-file "$E2E_TMP/token" --max-ingest-decompressed ${LIMIT_MIB}M \
	--decode-memory-budget ${BUDGET_MIB}M --decode-memory-wait 1s \
	--max-connections-per-peer 0 || exit 1

# run_load NAME ARGS...: runs the tool; its "key value" lines land in $E2E_TMP/NAME.out.
run_load() {
	local name=$1
	shift
	"$TOOL" --port "$SERVER_PORT" --pid "$SERVER_PID" --bomb-size $((LIMIT_MIB << 20)) "$@" \
		>"$E2E_TMP/$name.out" 2>>"$E2E_TMP/$name.log"
}
val() { # val NAME KEY
	awk -v k="$2" '$1 == k { print $2 }' "$E2E_TMP/$1.out"
}
metric() { # metric NAME
	curl -s -H "Authorization: Bearer e2e-secret-token" "$SERVER_URL/metrics" |
		awk -v k="$1" '$1 == k { print $2 }'
}

run_load warmup --bombs 0 --legit 2 --seq 1
check "warm-up batches stored" test "$(val warmup legit_stored)" = 2
expected=$(val warmup legit_samples_stored)

# A health checker probing while the bombs arrive: "status seconds" per probe.
HEALTH_BOUND_S=2
probe_health() {
	while :; do
		curl -s -o /dev/null -m 10 -w '%{http_code} %{time_total}\n' "$SERVER_URL/healthz"
		sleep 0.1
	done
}

for bombs in 6 32; do
	probe_health >"$E2E_TMP/health$bombs.out" 2>/dev/null &
	probe_pid=$!
	run_load "bombs$bombs" --bombs $bombs --legit 8 --seq $((bombs + 10))
	kill "$probe_pid" 2>/dev/null
	wait "$probe_pid" 2>/dev/null
	probes=$(wc -l <"$E2E_TMP/health$bombs.out")
	slowest=$(awk 'BEGIN { m = 0 } $2 > m { m = $2 } END { print m }' "$E2E_TMP/health$bombs.out")
	bad=$(awk '$1 != 200' "$E2E_TMP/health$bombs.out" | wc -l)
	diag "$bombs bombs: $probes /healthz probes, slowest $slowest s, not 200: $bad"
	echo "healthz_slowest_s_${bombs}_bombs $slowest ($probes probes)" \
		>>"$BUILD/test-logs/measurements.txt"
	check "$bombs bombs: /healthz was probed during the load" test "$probes" -gt 0
	check "$bombs bombs: every /healthz probe answered 200" test "$bad" = 0
	check "$bombs bombs: /healthz answered within ${HEALTH_BOUND_S} s (slowest $slowest s)" \
		awk -v m="$slowest" -v b="$HEALTH_BOUND_S" 'BEGIN { exit !(m <= b) }'
	check "$bombs bombs: the tool ran" test -n "$(val bombs$bombs peak_hwm_kib)"
	base=$(val bombs$bombs baseline_rss_kib)
	peak=$(val bombs$bombs peak_hwm_kib)
	over=$(((peak - base) / 1024))
	diag "$bombs bombs: baseline $((base / 1024)) MiB, peak $((peak / 1024)) MiB (+$over MiB;" \
		"budget $BUDGET_MIB + margin $MARGIN_MIB)," \
		"answers: $(grep bomb_status "$E2E_TMP/bombs$bombs.out" | tr '\n' ' ')," \
		"legit 503s $(val bombs$bombs legit_503s), slowest $(val bombs$bombs legit_slowest_s) s"
	echo "decode_memory_peak_over_baseline_mib_${bombs}_bombs $over" \
		"(budget $BUDGET_MIB MiB, limit $LIMIT_MIB MiB)" >>"$BUILD/test-logs/measurements.txt"
	check "$bombs bombs: the peak resets before the load" test "$(val bombs$bombs hwm_reset)" = 1
	check "$bombs bombs: peak RSS +$over MiB <= budget $BUDGET_MIB + margin $MARGIN_MIB MiB" \
		test "$over" -le $((BUDGET_MIB + MARGIN_MIB))
	others=$(grep bomb_status_ "$E2E_TMP/bombs$bombs.out" | grep -cvE 'bomb_status_(400|413|503) ')
	check "$bombs bombs: every bomb refused with 400, 413 or 503" test "$others" = 0
	check "$bombs bombs: all 8 legitimate batches stored" test "$(val bombs$bombs legit_stored)" = 8
	expected=$((expected + $(val bombs$bombs legit_samples_stored)))
done
check "32 bombs: the budget turned some away (503)" test -n "$(val bombs32 bomb_status_503)"

check "the decode memory high-water mark is within the budget" \
	test "$(metric sysom_decode_memory_reserved_peak_bytes)" -le $((BUDGET_MIB << 20))
check "nothing stays reserved" test "$(metric sysom_decode_memory_reserved_bytes)" = 0
check "503s for memory are counted" test "$(metric sysom_decode_memory_timeouts_total)" -gt 0
# The transport's only answers: 503s right after the head while decode memory was full (their
# bodies not read), never 408/413/431.
check "the transport answered only early 503s (busy decode memory)" \
	test "$(metric sysom_http_limit_rejections_total)" = "$(metric sysom_http_early_rejections_total)"
diag "early 503s: $(metric sysom_http_early_rejections_total)," \
	"bytes discarded unread: $(metric sysom_http_discarded_bytes_total)" 
check "no accepted batch is lost ($expected samples)" test "$(stored_total)" = "$expected"
check "the server still answers" curl -sf "$SERVER_URL/healthz" -o /dev/null
stop_pid "$SERVER_PID"
check "server exits 0 (no leak, no sanitizer report)" test $? -eq 0
finish
