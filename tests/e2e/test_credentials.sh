#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Scoped credentials with the real server and agents: issuing them, agent credentials bound to
# their node, read and admin scopes, /metrics without node names, SIGHUP rotation and revocation
# (a bad file keeps the previous set), and a cloned spool whose batches conflict (409) with
# what the original already delivered, while its identical copies stay duplicates.
. "$(dirname "$0")/lib.sh"
require_root

NODE=$(tr -d '-' </etc/machine-id)
OTHER=0123456789abcdef0123456789abcdef
[ "$NODE" != "$OTHER" ] || OTHER=fedcba9876543210fedcba9876543210

# ---- issuing: one token per client, the file holds only hashes ----------------------------
issue() { # issue NAME SCOPE CRED-NAME [NODES]: token → $E2E_TMP/NAME.token, line → credentials
	local name=$1
	shift
	"$SERVER_BIN" --new-credential "$@" >"$E2E_TMP/$name.issued" || return 1
	sed -n 1p "$E2E_TMP/$name.issued" >"$E2E_TMP/$name.token"
	chmod 600 "$E2E_TMP/$name.token"
	sed -n 2p "$E2E_TMP/$name.issued" >>"$E2E_TMP/credentials"
}
: >"$E2E_TMP/credentials"
chmod 600 "$E2E_TMP/credentials"
check "--new-credential agent for this node" issue node agent "node-$(hostname -s)" "$NODE"
check "--new-credential agent for another node" issue other agent other-node "$OTHER"
check "--new-credential read" issue read read grafana
check "--new-credential admin" issue admin admin ops
check "a token is sysom_ and 64 hex digits" grep -qxE 'sysom_[0-9a-f]{64}' "$E2E_TMP/node.token"
check "the credentials file holds no token" \
	bash -c "! grep -qF \"\$(cat '$E2E_TMP/node.token')\" '$E2E_TMP/credentials'"
check "its line is the token's SHA-256" \
	grep -q "sha256:$(tr -d '\n' <"$E2E_TMP/node.token" | sha256sum | cut -c1-64) $NODE\$" "$E2E_TMP/credentials"
"$SERVER_BIN" --new-credential reader x >/dev/null 2>"$E2E_TMP/err.txt"
check "--new-credential with an unknown scope exits 2" test $? -eq 2
check "... saying why" grep -q "unknown scope 'reader'" "$E2E_TMP/err.txt"
"$SERVER_BIN" --new-credential agent x >/dev/null 2>"$E2E_TMP/err.txt"
check "--new-credential agent without nodes exits 2" test $? -eq 2
check "... saying why" grep -q "needs the node ids" "$E2E_TMP/err.txt"

# ---- batches: an agent spools without a server; a copy of its spool then diverges ----------
start_agent a http://127.0.0.1:9 --token-file "$E2E_TMP/node.token" --sample-rate 1 --duration 4s || exit 1
run_workload 2 >/dev/null
wait "$AGENT_PID"
cp -a "$E2E_TMP/a.spool" "$E2E_TMP/b.spool"
ls "$E2E_TMP/b.spool" | grep '\.batch$' >"$E2E_TMP/copied.txt"
COPIED=$(wc -l <"$E2E_TMP/copied.txt")
# Both continue from the same state: the same epoch and sequence numbers, other samples.
for s in a b; do
	start_agent "$s" http://127.0.0.1:9 --token-file "$E2E_TMP/node.token" --sample-rate 1 --duration 3s || exit 1
	run_workload 1 >/dev/null
	wait "$AGENT_PID"
done
BATCH=$(ls "$E2E_TMP/a.spool"/*.batch | head -1)
NAME=$(basename "$BATCH" .batch)
KEY="$NODE:${NAME%%-*}:$((10#${NAME##*-}))"
HDR=$(python3 -c "import struct,sys; print(struct.unpack_from('<H', open(sys.argv[1],'rb').read(8), 6)[0])" "$BATCH")
tail -c +$((HDR + 1)) "$BATCH" >"$E2E_TMP/body.zst"
diag "$COPIED batches copied; a has $(ls "$E2E_TMP/a.spool"/*.batch | wc -l), b has $(ls "$E2E_TMP/b.spool"/*.batch | wc -l)"

start_server srv --credentials-file "$E2E_TMP/credentials" || exit 1
check "the server logs what it loaded" grep -q "credentials from $E2E_TMP/credentials: 2 agent, 1 read, 1 admin" "$E2E_TMP/srv.log"
post() { # post TOKEN-NAME [KEY]: prints the status of POSTing the batch (body in resp.json)
	curl -s -o "$E2E_TMP/resp.json" -w '%{http_code}' -X POST "$SERVER_URL/api/v1/ingest" \
		${1:+-H "Authorization: Bearer $(cat "$E2E_TMP/$1.token" 2>/dev/null || echo "$1")"} \
		-H "Idempotency-Key: ${2:-$KEY}" -H "Content-Encoding: zstd" --data-binary "@$E2E_TMP/body.zst"
}
req() { # req TOKEN-NAME METHOD PATH [curl args]: prints the status
	local who=$1 method=$2 path=$3
	shift 3
	curl -s -o "$E2E_TMP/resp.json" -w '%{http_code}' -X "$method" \
		${who:+-H "Authorization: Bearer $(cat "$E2E_TMP/$who.token")"} "$@" "$SERVER_URL$path"
}
CTL_OPTS=(--token-file "$E2E_TMP/read.token")
check "no token → 401" test "$(post "")" = 401
check "an unknown token → 401" test "$(post not-a-token)" = 401
check "another node's agent credential → 403" test "$(post other)" = 403
check "... saying which credential and node" grep -q "credential 'other-node' may not write batches for node $NODE" "$E2E_TMP/resp.json"
check "a read credential cannot post → 403" test "$(post read)" = 403
check "nothing stored by the refused posts" test "$(stored_total)" = 0
check "the server logs the refusal with the credential's name" grep -q "refused (403): credential 'other-node'" "$E2E_TMP/srv.log"
check "the node's own agent credential → 200" test "$(post node)" = 200
check "... stored" grep -q '"stored"' "$E2E_TMP/resp.json"
check "the same batch again → 200 duplicate" test "$(post node)" = 200
check "... duplicate" grep -q '"duplicate"' "$E2E_TMP/resp.json"
check "read: sysomctl nodes works" ctl nodes
check "read: GET settings → 200" test "$(req read GET /api/v1/jobs/j1/settings)" = 200
check "read: PUT settings → 403" test "$(req read PUT /api/v1/jobs/j1/settings --data '{"k":4}')" = 403
check "agent: GET nodes → 403" test "$(req node GET /api/v1/nodes)" = 403
check "agent: PUT settings → 403" test "$(req node PUT /api/v1/jobs/j1/settings --data '{"k":4}')" = 403
check "admin: PUT settings → 200" test "$(req admin PUT /api/v1/jobs/j1/settings --data '{"k":4}')" = 200
check "admin: GET nodes → 200" test "$(req admin GET /api/v1/nodes)" = 200
check "no token: GET nodes → 401" test "$(req "" GET /api/v1/nodes)" = 401

# ---- /metrics: node names and ids only for read (or admin) ---------------------------------
HOST=$(hostname)
curl -s "$SERVER_URL/metrics" >"$E2E_TMP/m-open.txt"
check "/metrics without a token has no hostname" bash -c "! grep -qF '\"$HOST\"' '$E2E_TMP/m-open.txt'"
check "... no node id" bash -c "! grep -q '$NODE' '$E2E_TMP/m-open.txt'"
check "... but the agent counters, summed" grep -qE '^sysom_agent_ticks_total [0-9]+$' "$E2E_TMP/m-open.txt"
curl -s -H "Authorization: Bearer $(cat "$E2E_TMP/node.token")" "$SERVER_URL/metrics" >"$E2E_TMP/m-agent.txt"
check "/metrics with an agent token: no node id either" bash -c "! grep -q '$NODE' '$E2E_TMP/m-agent.txt'"
curl -s -H "Authorization: Bearer $(cat "$E2E_TMP/read.token")" "$SERVER_URL/metrics" >"$E2E_TMP/m-read.txt"
check "/metrics with a read token: per node" grep -q "sysom_agent_ticks_total{node=\"$HOST\",node_id=\"$NODE\"}" "$E2E_TMP/m-read.txt"
check "/metrics with a wrong token → 401" test "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer nope' "$SERVER_URL/metrics")" = 401

# ---- the original agent delivers; the clone's diverged batches conflict --------------------
start_agent a "$SERVER_URL" --token-file "$E2E_TMP/node.token" --sample-rate 1 --duration 2s || exit 1
wait "$AGENT_PID"
check "the original spool is delivered" bash -c "! ls '$E2E_TMP/a.spool'/*.batch >/dev/null 2>&1"
start_agent b "$SERVER_URL" --token-file "$E2E_TMP/node.token" --sample-rate 1 --duration 2s || exit 1
wait "$AGENT_PID"
curl -s -H "Authorization: Bearer $(cat "$E2E_TMP/read.token")" "$SERVER_URL/metrics" >"$E2E_TMP/m-after.txt"
DUPS=$(sed -n 's/^sysom_ingest_batches_total{result="duplicate"} \([0-9]*\)$/\1/p' "$E2E_TMP/m-after.txt")
CONFLICTS=$(sed -n 's/^sysom_ingest_errors_total{reason="conflict"} \([0-9]*\)$/\1/p' "$E2E_TMP/m-after.txt")
diag "duplicates $DUPS, conflicts $CONFLICTS"
check "the copied batches were answered as duplicates (the agent re-sends identical bytes)" \
	test "${DUPS:-0}" -ge "$COPIED"
check "the diverged batches were refused as conflicts" test "${CONFLICTS:-0}" -ge 1
check "the server logs a conflict with both hashes" \
	grep -qE "conflict \(409\): node $NODE epoch [0-9a-f]{16} sequence [0-9]+ is stored with content hash [0-9a-f]{16}, this upload has [0-9a-f]{16}" "$E2E_TMP/srv.log"
check "the clone's agent logs each conflict loudly" \
	test "$(grep -c "error: batch [0-9]* (epoch [0-9a-f]*) CONFLICTS" "$E2E_TMP/b.log")" = "$CONFLICTS"
check "... and keeps the batches in rejected/" test "$(ls "$E2E_TMP/b.spool/rejected"/*.batch 2>/dev/null | wc -l)" -ge 1
check "no batch it had copied (identical bytes) is among the conflicts" \
	bash -c "! ls '$E2E_TMP/b.spool/rejected' | grep -qxFf '$E2E_TMP/copied.txt'"

# ---- rotation: add the new credential, SIGHUP, switch, remove the old, SIGHUP --------------
cp "$E2E_TMP/node.token" "$E2E_TMP/old.token"
issue new agent "node-$(hostname -s)-2" "$NODE"
kill -HUP "$SERVER_PID"
check "SIGHUP loads the new credential" wait_until 10 grep -q "credentials added: node-$(hostname -s)-2" "$E2E_TMP/srv.log"
check "during the switch the old token works" test "$(post old)" = 200
check "... and the new one" test "$(post new)" = 200
grep -v " node-$(hostname -s) " "$E2E_TMP/credentials" >"$E2E_TMP/credentials.next"
cat "$E2E_TMP/credentials.next" >"$E2E_TMP/credentials"
kill -HUP "$SERVER_PID"
check "SIGHUP after removing the old line" wait_until 10 grep -q "credentials removed: node-$(hostname -s)\$" "$E2E_TMP/srv.log"
check "the old token is refused (401)" test "$(post old)" = 401
check "the new token works" test "$(post new)" = 200
# A bad file at SIGHUP keeps the previous set.
echo "reader broken sha256:00" >>"$E2E_TMP/credentials"
kill -HUP "$SERVER_PID"
check "a bad file at SIGHUP is refused, naming the line" wait_until 10 grep -q "line 5: unknown scope 'reader'" "$E2E_TMP/srv.log"
check "... keeping the previous credentials" grep -q "keeping the previous credentials" "$E2E_TMP/srv.log"
check "... under which the new token still works" test "$(post new)" = 200
cp "$E2E_TMP/credentials.next" "$E2E_TMP/credentials"
chmod 644 "$E2E_TMP/credentials"
kill -HUP "$SERVER_PID"
check "a world-readable file at SIGHUP is refused" wait_until 10 grep -q "is readable by every user" "$E2E_TMP/srv.log"
check "... and the new token still works" test "$(post new)" = 200
stop_pid "$SERVER_PID"
check "server exits 0" test $? -eq 0

# ---- start: a bad file is a clear error ---------------------------------------------------
"$SERVER_BIN" --listen 127.0.0.1:0 --data-dir "$E2E_TMP/x.data" --credentials-file "$E2E_TMP/credentials" 2>"$E2E_TMP/err.txt"
check "a world-readable credentials file: exit 1" test $? -eq 1
check "... saying so" grep -q "readable by every user" "$E2E_TMP/err.txt"
chmod 600 "$E2E_TMP/credentials"
echo "agent dup $(sed -n 's/.* \(sha256:[0-9a-f]*\).*/\1/p' "$E2E_TMP/credentials" | head -1) *" >>"$E2E_TMP/credentials"
"$SERVER_BIN" --listen 127.0.0.1:0 --data-dir "$E2E_TMP/x.data" --credentials-file "$E2E_TMP/credentials" 2>"$E2E_TMP/err.txt"
check "a repeated token: exit 1" test $? -eq 1
check "... naming both credentials" grep -q "has the same token as" "$E2E_TMP/err.txt"
finish
