"""An HTTP server on 127.0.0.1 with a free port, serving on a thread of its own: what the test
and benchmark stand-ins that speak HTTP (the instant and batching engines, the fault proxy) are
built on; `JsonHandler`, the engines' way of answering."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LoopbackHTTP:
    """Serves `handler` until `close()`. `backlog`: connections the kernel queues before they
    are accepted, so a burst of new ones (a pool of hundreds opening at once) is not refused."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], *, backlog: int = 128) -> None:
        server = type("Server", (ThreadingHTTPServer,), {"request_queue_size": backlog})
        self.httpd = server(("127.0.0.1", 0), handler)  # listens here, with that backlog
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class JsonHandler(BaseHTTPRequestHandler):
    """A handler on HTTP/1.1 keep-alive that answers JSON and logs nothing: a stand-in engine's,
    whose `GET /stats` says what it did (`stats`) and `/health` and `/version` its `version`."""

    protocol_version = "HTTP/1.1"
    version = b'{"version": "stand-in"}'

    def stats(self) -> dict[str, int]:
        return {}

    def do_GET(self) -> None:
        if self.path == "/stats":
            self._send(json.dumps(self.stats()).encode())
        elif self.path in ("/health", "/version"):
            self._send(self.version)
        else:
            self.send_error(404)

    def request_json(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        return dict(json.loads(self.rfile.read(length) or b"{}"))

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass
