"""An HTTP server on 127.0.0.1 with a free port, serving on a thread of its own: what the test
and benchmark stand-ins that speak HTTP (the instant and batching engines, the fault proxy) are
built on; `JsonHandler`, the engines' way of answering."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
    """A handler on HTTP/1.1 keep-alive that answers JSON and logs nothing."""

    protocol_version = "HTTP/1.1"

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass
