#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Symbol upload: the agent sends the workload's and libc's files to the server's Build-ID
# repository once; the flame graph then names the workload's functions; a restarted agent does
# not send them again; a file without a build ID goes by content hash; SIGHUP restarts it.
. "$(dirname "$0")/lib.sh"
require_root

printf 'e2e-symbols-%s\n' "$$" >"$E2E_TMP/token"
chmod 600 "$E2E_TMP/token"
CTL_OPTS=(--token-file "$E2E_TMP/token")
REPO=$E2E_TMP/srv.data/symbols
STATE=$E2E_TMP/symbols-uploaded # the agent's state directory holds its spool, agent.spool
build_id() {
	readelf -nW "$1" | sed -n 's/.*Build ID: *\([0-9a-f]*\).*/\1/p' | head -1
}
WORKLOAD_ID=$(build_id "$WORKLOAD_BIN")
LIBC=$(ldd "$WORKLOAD_BIN" | awk '$1 == "libc.so.6" { print $3 }')
LIBC=$(readlink -f "$LIBC")
LIBC_ID=$(build_id "$LIBC")
diag "workload build ID $WORKLOAD_ID; libc $LIBC ($LIBC_ID)"

start_server srv --token-file "$E2E_TMP/token" || exit 1
printf 'symbol-upload-rate = 64M\n' >"$E2E_TMP/agent.conf"
start_agent agent "$SERVER_URL" --config "$E2E_TMP/agent.conf" --token-file "$E2E_TMP/token" \
	--sample-rate 1 --log-level debug || exit 1
check "the agent starts its symbol upload" grep -q "symbol upload on (64.0 MiB/s" "$E2E_TMP/agent.log"

read -r WPID WCPU < <(run_workload 4 --mode mixed --threads 2)
diag "workload pid $WPID used ${WCPU}s of CPU"
check "the agent uploads the workload's executable" \
	wait_until 60 grep -q "uploaded symbols of $WORKLOAD_BIN (build ID $WORKLOAD_ID): executable" \
	"$E2E_TMP/agent.log"
check "... and libc's" \
	wait_until 60 grep -q "uploaded symbols of .*libc.so.6 (build ID $LIBC_ID): executable" \
	"$E2E_TMP/agent.log"
LIBC_DEBUG=/usr/lib/debug/.build-id/${LIBC_ID:0:2}/${LIBC_ID:2}.debug
if [ -f "$LIBC_DEBUG" ]; then
	check "... with libc's debug file from /usr/lib/debug/.build-id" \
		grep -q "uploaded symbols of .*libc.so.6 (build ID $LIBC_ID): executable .* + debuginfo" \
		"$E2E_TMP/agent.log"
	check "the server holds libc's debug file, byte for byte" \
		cmp -s "$LIBC_DEBUG" "$REPO/.build-id/${LIBC_ID:0:2}/${LIBC_ID:2}.debug"
else
	diag "no $LIBC_DEBUG on this machine (libc6-dbg): libc goes without its debug file"
fi
check "the server holds the workload's executable, byte for byte" \
	cmp -s "$WORKLOAD_BIN" "$REPO/.build-id/${WORKLOAD_ID:0:2}/${WORKLOAD_ID:2}.executable"
check "the agent's state lists both build IDs" \
	bash -c "grep -qx '$WORKLOAD_ID elf' '$STATE' && grep -qx '$LIBC_ID elf' '$STATE'"
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0

ctl flamegraph --pid "$WPID" --from -10m --to now --format folded >"$E2E_TMP/pid.folded"
check "sysomctl flamegraph exits 0 with stacks" test -s "$E2E_TMP/pid.folded"
read -r MATCHED TOTAL FRACTION < <(python3 - "$E2E_TMP/pid.folded" <<'EOF'
import sys
chain = ["run_worker"] + [f"chain_level_{i}" for i in range(1, 7)]
total = matched = 0
for line in open(sys.argv[1]):
    stack, _, count = line.rstrip("\n").rpartition(" ")
    total += int(count)
    it = iter(stack.split(";"))
    if all(any(f == want for f in it) for want in chain):
        matched += int(count)
print(matched, total, f"{matched / total if total else 0:.3f}")
EOF
)
diag "$MATCHED of $TOTAL samples name run_worker → chain_level_1..6 ($FRACTION)"
check "≥ 90% of the workload's samples show its call chain by function name" \
	python3 -c "import sys; sys.exit(not ($FRACTION >= 0.90))"
# A sample whose innermost frame is a PLT stub (the jump to getpid() and the like) shows it
# as perf does, "getpid@plt": no workload frame may stay file+offset.
UNNAMED=$(python3 - "$E2E_TMP/pid.folded" <<'EOF'
import re, sys
bad = plt = 0
for line in open(sys.argv[1]):
    frames = line.rstrip("\n").rpartition(" ")[0].split(";")
    bad += sum(1 for f in frames if re.fullmatch(r"chain_workload\+0x[0-9a-f]+", f))
    plt += sum(1 for f in frames if f.endswith("@plt"))
print(bad, plt)
EOF
)
diag "workload frames left as file+offset, PLT stubs named name@plt (stacks): $UNNAMED"
UNNAMED=${UNNAMED%% *}
check "no workload frame is left as file+offset" test "$UNNAMED" = 0

# A restart: the state file says what is done, so nothing is sent again. A copy of the
# workload without a build ID (identified by content hash), run after the workload, is
# uploaded: once it is, the thread has seen everything offered before it.
cp "$WORKLOAD_BIN" "$E2E_TMP/chain_copy"
objcopy --remove-section=.note.gnu.build-id "$E2E_TMP/chain_copy"
uploaded_paths() {
	sed -n 's/.* uploaded symbols of \(.*\) (\(build ID\|content hash\) .*/\1/p' | sort -u
}
uploaded_paths <"$E2E_TMP/agent.log" >"$E2E_TMP/run1.paths"
# agent2: its own log and spool, the same state directory ($E2E_TMP, the spools' parent).
start_agent agent2 "$SERVER_URL" --config "$E2E_TMP/agent.conf" --token-file "$E2E_TMP/token" \
	--sample-rate 1 --log-level debug || exit 1
check "the restarted agent knows what it uploaded before" \
	grep -Eq "symbol upload on \(.*, [1-9][0-9]* build IDs uploaded before\)" "$E2E_TMP/agent2.log"
run_workload 2 --quiet >/dev/null
"$E2E_TMP/chain_copy" 2 --quiet
check "a file without a build ID is uploaded by content hash" \
	wait_until 60 grep -q "uploaded symbols of $E2E_TMP/chain_copy (content hash [0-9a-f]\{32\}): executable" \
	"$E2E_TMP/agent2.log"
check "the workload was not uploaded again" \
	bash -c "! grep -q 'uploaded symbols of $WORKLOAD_BIN ' '$E2E_TMP/agent2.log'"
check "nor libc" bash -c "! grep -q 'uploaded symbols of .*libc.so.6 ' '$E2E_TMP/agent2.log'"
uploaded_paths <"$E2E_TMP/agent2.log" >"$E2E_TMP/run2.paths"
diag "$(wc -l <"$E2E_TMP/run1.paths") files uploaded in the first run, $(wc -l <"$E2E_TMP/run2.paths") in the second"
check "no file uploaded in the first run is uploaded again in the second" \
	test -z "$(comm -12 "$E2E_TMP/run1.paths" "$E2E_TMP/run2.paths")"

# SIGHUP with a new rate restarts the upload; it goes on with the same state.
printf 'symbol-upload-rate = 32M\n' >"$E2E_TMP/agent.conf"
kill -HUP "$AGENT_PID"
check "SIGHUP with a new rate restarts the symbol upload" \
	wait_until 10 grep -q "symbol upload on (32.0 MiB/s" "$E2E_TMP/agent2.log"
stop_pid "$AGENT_PID"
check "agent exits 0 after SIGTERM" test $? -eq 0
check "agent logs have no error lines" \
	bash -c "! grep -q ' error: ' '$E2E_TMP/agent.log' '$E2E_TMP/agent2.log'"
# (Files of other processes may be skipped: replaced since they were mapped, say.)
check "... no symbol file refused by the server" \
	bash -c "! grep -q 'not retried until restart' '$E2E_TMP/agent.log' '$E2E_TMP/agent2.log'"
check "... and none of the workload's, the copy's or libc's skipped" \
	bash -c "! grep -h 'not uploaded' '$E2E_TMP/agent.log' '$E2E_TMP/agent2.log' | grep -q 'chain_workload\|chain_copy\|libc.so.6'"
metric() {
	awk -v name="$1" '$1 == name { print $2 }' "$E2E_TMP/metrics.txt"
}
curl -s "$SERVER_URL/metrics" >"$E2E_TMP/metrics.txt"
SESSIONS=$(metric sysom_symbol_upload_sessions)
RESERVED=$(metric sysom_symbol_upload_reserved_bytes)
diag "$SESSIONS partial uploads reserving $RESERVED bytes after the agents stopped"
check "/metrics reports the partial uploads' reservation" test -n "$RESERVED"
if [ "$SESSIONS" = 0 ]; then
	check "... none once every upload is stored" test "$RESERVED" = 0
fi
check "... and no upload refused for want of room" \
	bash -c "! grep -Eq '^sysom_symbol_uploads_total\{result=\"(over_budget|no_space)\"\} [1-9]' '$E2E_TMP/metrics.txt'"
stop_pid "$SERVER_PID"
check "server exits 0 after SIGTERM" test $? -eq 0

# Partial uploads reserve their declared sizes: within --max-upload-reserve in total (503 and
# Retry-After beyond), released when an upload is stored.
start_server srv2 --token-file "$E2E_TMP/token" --max-symbol-file-size 1M \
	--max-upload-reserve 1M || exit 1
put_declared() { # BUILD_ID UPLOAD_ID TOTAL FILE: the first 100 bytes of FILE declared as TOTAL
	head -c 100 "$4" >"$E2E_TMP/chunk"
	curl -s -o "$E2E_TMP/put.body" -D "$E2E_TMP/put.headers" -w '%{http_code}' -X PUT \
		"$SERVER_URL/api/v1/symbols/$1/executable" -H "Authorization: Bearer $(cat "$E2E_TMP/token")" \
		-H "Content-Range: bytes 0-99/$3" -H "X-Sysom-Upload-Id: $2" \
		-H "X-Sysom-Content-Hash: xxh3-128:00000000000000000000000000000000" \
		--data-binary @"$E2E_TMP/chunk"
}
check "a partial upload declaring 600 KiB is accepted" \
	test "$(put_declared 0102030405060708 00112233445566778899aabbccddeeff 614400 "$WORKLOAD_BIN")" = 202
check "a second declaring 600 KiB more is refused: 503" \
	test "$(put_declared 0a0b0c0d0e0f1011 ffeeddccbbaa99887766554433221100 614400 "$WORKLOAD_BIN")" = 503
check "... with Retry-After" grep -qi '^Retry-After: 30' "$E2E_TMP/put.headers"
check "... saying why" grep -q 'partial uploads reserve 614400 of 1048576 bytes' "$E2E_TMP/put.body"
curl -s "$SERVER_URL/metrics" >"$E2E_TMP/metrics.txt"
check "/metrics counts it" grep -q '^sysom_symbol_uploads_total{result="over_budget"} 1$' "$E2E_TMP/metrics.txt"
check "... and shows the reservation" test "$(metric sysom_symbol_upload_reserved_bytes)" = 614400
stop_pid "$SERVER_PID"
check "server exits 0 after SIGTERM" test $? -eq 0
finish
