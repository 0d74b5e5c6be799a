"""A loopback HTTP proxy in front of the S3 server that fails or stalls chosen requests."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# rule(method, path) -> None (forward), ("status", code), ("stall", seconds): no answer,
# ("delay", seconds): forward after a pause, or ("hold", seconds): forward once `release` is set
# (or the seconds have passed)
Rule = Callable[[str, str], tuple[str, float] | None]
ERROR_CODES = {500: "InternalError", 503: "SlowDown", 403: "AccessDenied"}


class FaultProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.rule: Rule = lambda method, path: None
        self.seen: list[tuple[str, str, str]] = []  # (method, path, outcome)
        self.times: list[tuple[str, str, float]] = []  # (method, path, when forwarded)
        self.release = threading.Event()
        # called once a forwarded request was answered: (method, path, status)
        self.answered: Callable[[str, str, int], None] = lambda method, path, status: None
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                action = proxy.rule(self.command, self.path)
                if action and action[0] == "stall":
                    proxy.seen.append((self.command, self.path, "stall"))
                    time.sleep(action[1])
                    self.close_connection = True
                    return
                if action and action[0] == "status":
                    proxy.seen.append((self.command, self.path, str(int(action[1]))))
                    code = ERROR_CODES.get(int(action[1]), "InternalError")
                    payload = (
                        f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
                    )
                    self.send_response(int(action[1]))
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload if self.command != "HEAD" else b"")
                    return
                if action and action[0] == "delay":
                    time.sleep(action[1])
                if action and action[0] == "hold":
                    released = proxy.release.wait(action[1])
                    proxy.seen.append((self.command, self.path, "released" if released else "late"))
                proxy.seen.append((self.command, self.path, "pass"))
                proxy.times.append((self.command, self.path, time.monotonic()))
                conn = http.client.HTTPConnection(*upstream, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()
                proxy.answered(self.command, self.path, resp.status)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
