"""A small HTTP server on loopback serving fixed routes, for URL-source tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from vlm_ocr_lab.standins.loopback_http import LoopbackHTTP

Route = Callable[[BaseHTTPRequestHandler], None]


class LoopbackServer(LoopbackHTTP):
    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.closed = threading.Event()
        routes = self.routes

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                if route is None:
                    self.send_error(404)
                else:
                    route(self)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(Handler)

    def body(self, path: str, data: bytes) -> None:
        def route(h: BaseHTTPRequestHandler) -> None:
            h.send_response(200)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)

        self.routes[path] = route

    def stall(self, path: str) -> None:
        """Send the headers, then nothing until the server is closed."""

        def route(h: BaseHTTPRequestHandler) -> None:
            h.send_response(200)
            h.send_header("Content-Length", "1000")
            h.end_headers()
            self.closed.wait()

        self.routes[path] = route

    def redirect(self, path: str, location: str) -> None:
        def route(h: BaseHTTPRequestHandler) -> None:
            h.send_response(302)
            h.send_header("Location", location)
            h.send_header("Content-Length", "0")
            h.end_headers()

        self.routes[path] = route

    def close(self) -> None:
        self.closed.set()  # a stalled answer ends, so the server can shut down
        super().close()
