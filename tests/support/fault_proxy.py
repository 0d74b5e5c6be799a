"""A loopback HTTP proxy in front of a server (S3, or an engine's) that fails or stalls chosen
requests."""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from vlm_ocr_lab.standins.instant_engine import image_digest, send_fault
from vlm_ocr_lab.standins.loopback_http import LoopbackHTTP

# rule(method, path) -> None (forward), ("status", code), ("stall", seconds): no answer,
# ("delay", seconds): forward after a pause, or ("hold", seconds): forward once `release` is set
# (or the seconds have passed)
Rule = Callable[[str, str], tuple[str, float] | None]
# body_rule(method, path, body) -> None (forward) or a fault of `send_fault` ("drop", "cut",
# "reset", "503", ...): for requests the body tells apart (an engine's page requests)
BodyRule = Callable[[str, str, bytes], str | None]
ERROR_CODES = {500: "InternalError", 503: "SlowDown", 403: "AccessDenied"}


class FaultProxy(LoopbackHTTP):
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.rule: Rule = lambda method, path: None
        self.body_rule: BodyRule = lambda method, path, body: None
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
                fault = proxy.body_rule(self.command, self.path, body)
                if fault is not None and fault != "cut":
                    proxy.seen.append((self.command, self.path, fault))
                    send_fault(self, fault)
                    return
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
                proxy.seen.append((self.command, self.path, fault or "pass"))  # fault: "cut"
                proxy.times.append((self.command, self.path, time.monotonic()))
                conn = http.client.HTTPConnection(*upstream, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if fault == "cut":  # the whole answer came; half of it goes on
                    send_fault(self, "cut", data)
                    conn.close()
                    return
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

            def handle_one_request(self) -> None:
                # a client that drops its end mid-request is no failure of the proxy's
                with contextlib.suppress(ConnectionError):
                    super().handle_one_request()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(Handler, backlog=256)


def first_try_of_each_page(fault: str) -> BodyRule:
    """`fault` for the first chat request of each page image, then none: every page loses one
    request on the way, whatever attempt or turn it is on."""
    seen: set[str] = set()
    lock = threading.Lock()

    def rule(method: str, path: str, body: bytes) -> str | None:
        if method != "POST" or not path.endswith("/chat/completions"):
            return None
        digest = image_digest(json.loads(body))
        with lock:
            if digest in seen:
                return None
            seen.add(digest)
        return fault

    return rule


def every_chat_request(fault: str) -> BodyRule:
    def rule(method: str, path: str, body: bytes) -> str | None:
        return fault if method == "POST" and path.endswith("/chat/completions") else None

    return rule
