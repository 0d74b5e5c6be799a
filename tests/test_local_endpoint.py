"""The stand-in endpoint itself: a worker it reaches is lost only when the worker is."""

from __future__ import annotations

import json
import socket
import socketserver
import struct
import threading

import httpx

from vlm_ocr_lab.standins.local_endpoint import API_KEY, Router


class ClosingWorker(socketserver.ThreadingTCPServer):
    """A worker's `/runsync` that keeps a connection open after its answer and resets it when a
    second request comes on it: a request meeting the worker's server as it closes an idle
    kept-alive connection (uvicorn's, after 5 s), made certain instead of a matter of timing."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.requests = 0
        self.resets = 0

        class Handler(socketserver.StreamRequestHandler):
            def handle(handler) -> None:
                answered = False
                while (request := read_request(handler.rfile)) is not None:
                    if answered:  # a second request on the connection: reset, no answer
                        self.resets += 1
                        linger = struct.pack("ii", 1, 0)
                        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                        return
                    self.requests += 1
                    body = json.dumps({"status": "COMPLETED", "output": {"read": request}})
                    handler.wfile.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Connection: keep-alive\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
                    )
                    handler.wfile.flush()
                    answered = True

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def read_request(rfile) -> int | None:
    """The next request's body length, once its head and body are read; None when the
    connection ends."""
    length = 0
    line = rfile.readline()
    if not line:
        return None
    while (line := rfile.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    rfile.read(length)
    return length


def test_jobs_one_after_another_on_a_worker_that_closes_idle_connections_all_complete() -> None:
    worker = ClosingWorker()
    router = Router([worker.url])
    try:
        auth = {"Authorization": f"Bearer {API_KEY}"}
        for n in range(3):  # one after the other: each would meet the connection the last left
            sent = httpx.post(f"{router.base}/e/run", json={"input": {"n": n}}, headers=auth)
            job = router.jobs[sent.json()["id"]]
            router.wait_for(lambda _, job=job: job.state not in ("IN_QUEUE", "IN_PROGRESS"), 60)
            if job.state != "COMPLETED":  # a lost worker takes no more jobs
                break
        assert [(j.state, j.error) for j in router.jobs.values()] == [("COMPLETED", None)] * 3
        assert worker.requests == 3 and worker.resets == 0
    finally:
        router.stop()
        worker.shutdown()
        worker.server_close()
