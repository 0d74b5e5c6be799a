"""The stand-in endpoint itself: a worker it reaches is lost only when the worker is."""

from __future__ import annotations

import json
import socket
import struct

import httpx

from vlm_ocr_lab.standins.local_endpoint import API_KEY, Router
from vlm_ocr_lab.standins.loopback_http import JsonHandler, LoopbackHTTP


class ClosingWorker(LoopbackHTTP):
    """A worker's `/runsync` that keeps a connection open after its answer and resets it when a
    second request comes on it: a request meeting the worker's server as it closes an idle
    kept-alive connection (uvicorn's, after 5 s), made certain instead of a matter of timing."""

    def __init__(self) -> None:
        self.requests = 0
        self.resets = 0
        worker = self

        class Handler(JsonHandler):  # one a connection
            answered = False

            def do_POST(self) -> None:
                job = self.request_json()
                if self.answered:  # a second request on the connection: reset, no answer
                    worker.resets += 1
                    linger = struct.pack("ii", 1, 0)
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    self.close_connection = True
                    return
                worker.requests += 1
                self._send(json.dumps({"status": "COMPLETED", "output": job}).encode())
                self.answered = True

        super().__init__(Handler)


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
        worker.close()
