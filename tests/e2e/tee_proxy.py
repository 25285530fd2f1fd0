#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An HTTP tee for the e2e tests: every request goes to the PRIMARY server and then to the
SECONDARY, byte for byte; the client gets the primary's answer. Each request's method, path and
both statuses are appended to LOG as "METHOD PATH PRIMARY SECONDARY".

Usage: tee_proxy.py PORT_FILE PRIMARY_URL SECONDARY_URL LOG
"""
import http.client
import http.server
import sys
import threading
import urllib.parse

port_file, primary, secondary, log_path = sys.argv[1:5]
lock = threading.Lock()
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "expect"}


def forward(base, method, path, headers, body):
    u = urllib.parse.urlparse(base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, [(k, v) for k, v in r.getheaders() if k.lower() not in HOP], r.read()
    finally:
        c.close()


class Tee(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        status, rh, data = forward(primary, self.command, self.path, headers, body)
        try:
            status2 = forward(secondary, self.command, self.path, headers, body)[0]
        except OSError as e:
            status2 = "error:" + type(e).__name__
        with lock, open(log_path, "a") as f:
            f.write("%s %s %s %s\n" % (self.command, self.path.split("?")[0], status, status2))
        self.send_response(status)
        for k, v in rh:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = handle_any


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Tee)
with open(port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os
os.rename(port_file + ".tmp", port_file)
srv.serve_forever()
