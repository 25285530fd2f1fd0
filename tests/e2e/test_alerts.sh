#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sysom-server with alert receivers: a real Alertmanager (am_start/am_stop), the options, the
# alert families of /metrics, refused receiver URLs and a clean stop. The alert lifecycle and
# payloads are covered by tests/unit/server/alerts/test_alerts.c (also against a real Alertmanager).
. "$(dirname "$0")/lib.sh"
[ -x "$SERVER_BIN" ] || { echo "missing $SERVER_BIN: build first" >&2; exit 1; }
command -v prometheus-alertmanager >/dev/null || command -v alertmanager >/dev/null ||
	skip_all "no prometheus-alertmanager (make deps installs it)"

am_start am || exit 1
check "Alertmanager is ready and lists no alert" \
	test "$(curl -sf "$AM_URL/api/v2/alerts")" = "[]"

start_server srv --alertmanager-url "$AM_URL/" --webhook-url "http://127.0.0.1:9/hook" \
	--alert-resend-interval 2s || exit 1
check "the server names its receivers" \
	grep -q "alerts go to 1 Alertmanager(s) and 1 webhook(s), re-sent every 2s" "$E2E_TMP/srv.log"
curl -sf "$SERVER_URL/metrics" >"$E2E_TMP/metrics.txt"
check "metrics: no alert firing" grep -q '^sysom_alerts_active 0$' "$E2E_TMP/metrics.txt"
check "metrics: alerts fired" grep -q '^sysom_alerts_fired_total 0$' "$E2E_TMP/metrics.txt"
check "metrics: alerts resolved" grep -q '^sysom_alerts_resolved_total 0$' "$E2E_TMP/metrics.txt"
check "metrics: notifications by receiver and result" \
	grep -q '^sysom_alert_notifications_total{receiver="alertmanager",result="ok"} 0$' \
	"$E2E_TMP/metrics.txt"
stop_pid "$SERVER_PID"
check "the server stops cleanly with receivers configured" test $? -eq 0

"$SERVER_BIN" --data-dir "$E2E_TMP/bad.data" --alertmanager-url "ftp://$AM_PORT" \
	>"$E2E_TMP/bad.log" 2>&1
check "a receiver URL that is not http(s) is refused at start" test $? -eq 1
check "... saying why" grep -q "URLs must be http:// or https://" "$E2E_TMP/bad.log"

am_stop
check "Alertmanager stops cleanly" test $? -eq 0
finish
