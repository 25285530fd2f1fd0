#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Connection fairness: 2,000 idle and 300 slowloris connections from 100 loopback addresses,
# reconnecting whenever the server closes them, and one greedy address over its per-peer
# limit, are held against a server with a token (default limits: 1,024 connections), while a
# legitimate client posts a real batch every second on a new connection and another on a
# keep-alive connection. Every post must be answered 200 within BOUND_MS, and the keep-alive
# connection must never be closed under it.
#
# CONN_FAIRNESS_SERVER_BIN=PATH runs the same attack against another server binary (e.g. one
# built before this change) to show the difference; CONN_FAIRNESS_POSTS (60) and
# CONN_FAIRNESS_BOUND_MS (2000) change the length and the bound, CONN_FAIRNESS_RATE (1000) the
# attacker's new connections per second.
. "$(dirname "$0")/lib.sh"

SYMTOOL=$BUILD/tests/tools/symtool
FLOOD=$BUILD/tests/tools/connflood
POSTER=$ROOT/tests/e2e/ingest_poster.py
SERVER_BIN=${CONN_FAIRNESS_SERVER_BIN:-$SERVER_BIN}
POSTS=${CONN_FAIRNESS_POSTS:-60}
BOUND_MS=${CONN_FAIRNESS_BOUND_MS:-2000}
IDLE=2000 SLOW=300 SOURCES=100 RATE=${CONN_FAIRNESS_RATE:-1000}
for b in "$SERVER_BIN" "$CTL_BIN" "$SYMTOOL" "$FLOOD"; do
	[ -x "$b" ] || { echo "missing $b: build first" >&2; exit 1; }
done
command -v python3 >/dev/null || skip_all "python3 is required"
command -v ss >/dev/null || skip_all "ss (iproute2) is required"
# All of 127/8 is loopback on Linux; the flood binds sources there.
python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.2", 0))' 2>/dev/null ||
	skip_all "cannot bind 127.0.0.2 (not Linux loopback?)"

echo "e2e-fairness-token" >"$E2E_TMP/token"
chmod 600 "$E2E_TMP/token"
CTL_OPTS=(--token-file "$E2E_TMP/token")
start_server srv --token-file "$E2E_TMP/token" || exit 1
diag "server $SERVER_BIN on port $SERVER_PORT"

# Real batches (distinct sequence numbers, 10 samples each), half for each poster.
BID=0123456789abcdef0123456789abcdef01234567
for i in $(seq 1 $((2 * POSTS))); do
	key=$("$SYMTOOL" batch "$E2E_TMP/b$i.batch" "$i" app /opt/app/app "$BID" 0x1000 0x2000) || exit 1
	echo "$key $E2E_TMP/b$i.batch"
done >"$E2E_TMP/all.list"
head -n "$POSTS" "$E2E_TMP/all.list" >"$E2E_TMP/fresh.list"
tail -n "$POSTS" "$E2E_TMP/all.list" >"$E2E_TMP/keepalive.list"

# Server-side established sockets on the port (accepted or waiting in the accept queue).
established() {
	ss -Htn state established "( sport = :$SERVER_PORT )" | wc -l
}
table_full() {
	[ "$(established)" -ge 1024 ]
}
# m NAME: a sample of the last /metrics scrape ("" when absent).
m() {
	awk -v n="$1" '$1 == n { print $2 }' "$E2E_TMP/metrics.txt" 2>/dev/null
}

# The attack, for as long as the posts take and then some.
"$FLOOD" --port "$SERVER_PORT" --idle $IDLE --slow $SLOW --source-base 127.0.0.2 \
	--sources $SOURCES --rate $RATE --slow-interval-ms 2000 --duration $((POSTS + 120)) \
	>"$E2E_TMP/flood.out" 2>"$E2E_TMP/flood.log" &
FLOOD_PID=$!
E2E_PIDS+=("$FLOOD_PID")
"$FLOOD" --port "$SERVER_PORT" --idle 100 --source-base 127.0.0.250 --sources 1 --rate 50 \
	--duration $((POSTS + 120)) >"$E2E_TMP/greedy.out" 2>"$E2E_TMP/greedy.log" &
GREEDY_PID=$!
E2E_PIDS+=("$GREEDY_PID")
check "the flood holds the connection table full (>= 1024 established)" wait_until 60 table_full
diag "established server-side sockets: $(established)"

python3 "$POSTER" "$SERVER_URL" "$E2E_TMP/token" "$E2E_TMP/fresh.list" fresh 1 \
	"$E2E_TMP/fresh.json" &
FRESH_PID=$!
python3 "$POSTER" "$SERVER_URL" "$E2E_TMP/token" "$E2E_TMP/keepalive.list" keepalive 1 \
	"$E2E_TMP/keepalive.json" &
KEEP_PID=$!
E2E_PIDS+=("$FRESH_PID" "$KEEP_PID")
wait "$FRESH_PID"
wait "$KEEP_PID"
diag "established server-side sockets at the end: $(established)"
check "the table was still full when the posts ended" wait_until 10 table_full

summary() { # summary FILE: the poster's numbers on one line
	python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print("%s: %d/%d answered 200, p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms, reconnects %d, failures %s"
      % (r["mode"], r["ok"], r["count"], r["p50_ms"], r["p90_ms"], r["p99_ms"], r["max_ms"],
         r["reconnects"], [(f["status"], f["answer"][:60]) for f in r["failures"][:3]]))' "$1"
}
field() { # field FILE KEY
	python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}
for mode in fresh keepalive; do
	diag "$(summary "$E2E_TMP/$mode.json")"
	check "$mode connection: every post answered 200" \
		test "$(field "$E2E_TMP/$mode.json" ok)" = "$POSTS"
	check "$mode connection: every post within ${BOUND_MS} ms" \
		python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["max_ms"] > float(sys.argv[2]))' \
		"$E2E_TMP/$mode.json" "$BOUND_MS"
done
check "the keep-alive connection was never closed under the client" \
	test "$(field "$E2E_TMP/keepalive.json" reconnects)" = 0

# The transport's own account, read while the flood still runs.
check "/metrics answers under the flood" \
	curl -sf --max-time 10 -o "$E2E_TMP/metrics.txt" "$SERVER_URL/metrics"
for name in connections_open connections_evicted_total peer_rejections_total \
	first_byte_timeouts_total header_timeouts_total connections_trusted \
	connections_rejected_total; do
	diag "sysom_http_$name $(m "sysom_http_$name")"
done
check "the server never held more than --max-connections" \
	test "$(m sysom_http_connections_open)" -le 1024
check "connections were evicted to make room" test "$(m sysom_http_connections_evicted_total)" -gt 0
check "slowloris heads got 408 at the head deadline" \
	test "$(m sysom_http_header_timeouts_total)" -gt 0
check "the greedy address was refused over its per-peer limit" \
	test "$(m sysom_http_peer_rejections_total)" -gt 0

kill -TERM "$FLOOD_PID" "$GREEDY_PID"
wait "$FLOOD_PID"
wait "$GREEDY_PID"
diag "flood: $(tr '\n' ' ' <"$E2E_TMP/flood.out")"
diag "greedy: $(tr '\n' ' ' <"$E2E_TMP/greedy.out")"
check "the flood reconnected after being closed" \
	test "$(awk '$1 == "closed_by_server" { print $2 }' "$E2E_TMP/flood.out")" -gt $((IDLE + SLOW))
check "the greedy address saw 503s" \
	test "$(awk '$1 == "status_503" { print $2 }' "$E2E_TMP/greedy.out")" -gt 0

check "every posted batch is stored ($((2 * POSTS * 10)) samples)" \
	test "$(stored_total)" = $((2 * POSTS * 10))
stop_pid "$SERVER_PID"
check "server exits 0" test $? -eq 0
finish
