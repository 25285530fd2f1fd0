#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A legitimate ingest client for the e2e tests: posts batches to /api/v1/ingest on a fixed
schedule and records each answer's status and latency.

Usage: ingest_poster.py URL TOKEN_FILE LIST MODE INTERVAL_S OUT_JSON

LIST has one "IDEMPOTENCY_KEY BATCH_FILE" line per batch, posted in order, one every
INTERVAL_S seconds (the schedule does not drift with slow answers). MODE is "fresh" (a new
connection per request, the worst case under a connection flood) or "keepalive" (one
connection reused, as the agent's libcurl handle does; when the server has closed it, one
reconnect and retry, counted, as libcurl does for a reused connection).

OUT_JSON gets {"mode", "count", "ok", "failures": [...], "reconnects", "p50_ms", "p90_ms",
"p99_ms", "max_ms", "latencies_ms": [...]}; a failure is a non-200 answer or an exception,
and its latency is counted too.
"""
import http.client
import json
import sys
import time
import urllib.parse

REQUEST_TIMEOUT_S = 30


def percentile(sorted_values, q):
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, int(round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def main():
    url, token_file, list_file, mode, interval, out_file = sys.argv[1:7]
    interval = float(interval)
    if mode not in ("fresh", "keepalive"):
        sys.exit("mode must be fresh or keepalive")
    parsed = urllib.parse.urlparse(url)
    token = open(token_file).read().strip()
    batches = [line.split() for line in open(list_file) if line.strip()]
    conn = None
    reconnects = 0
    latencies, failures = [], []

    def connection():
        return http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=REQUEST_TIMEOUT_S)

    def post(c, key, body):
        c.request("POST", "/api/v1/ingest", body=body, headers={
            "Authorization": "Bearer " + token,
            "Idempotency-Key": key,
            "Content-Type": "application/vnd.sysom.batch",
            "Content-Encoding": "zstd",
        })
        r = c.getresponse()
        return r.status, r.read()

    start = time.monotonic()
    for i, (key, path) in enumerate(batches):
        delay = start + i * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        body = open(path, "rb").read()
        t0 = time.monotonic()
        try:
            if mode == "fresh":
                c = connection()
                try:
                    status, answer = post(c, key, body)
                finally:
                    c.close()
            else:
                if conn is None:
                    conn = connection()
                try:
                    status, answer = post(conn, key, body)
                except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                    reconnects += 1
                    conn.close()
                    conn = connection()
                    status, answer = post(conn, key, body)
        except Exception as e:  # noqa: BLE001 - every failure is recorded, none ends the run
            status, answer = None, repr(e).encode()
            if conn is not None:
                conn.close()
                conn = None
        ms = (time.monotonic() - t0) * 1000.0
        latencies.append(round(ms, 2))
        if status != 200:
            failures.append({"index": i, "status": status, "ms": round(ms, 2),
                             "answer": answer[:200].decode("utf-8", "replace")})
    if conn is not None:
        conn.close()
    ordered = sorted(latencies)
    result = {
        "mode": mode, "count": len(batches), "ok": len(batches) - len(failures),
        "failures": failures, "reconnects": reconnects,
        "p50_ms": percentile(ordered, 0.50), "p90_ms": percentile(ordered, 0.90),
        "p99_ms": percentile(ordered, 0.99), "max_ms": ordered[-1] if ordered else 0.0,
        "latencies_ms": latencies,
    }
    with open(out_file, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
