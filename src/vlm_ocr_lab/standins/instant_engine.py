"""An OpenAI-compatible chat server on loopback that answers every page at once, for the soak
benchmark (`vlm-ocr-lab bench --instant-engine`) and the tests of the worker's transport.

It can lose a share of the requests on the way, as a network, a proxy or a restarting server
does (`FAULTS`), and answer a share slowly; `answer` makes its answers (in a model's format, for
the tests of a family through the worker's whole path). What a fault looks like to the client is
written once here (`send_fault`), for this server and for the tests' fault proxy in front of a
real one.

    python -m vlm_ocr_lab.standins.instant_engine --faults 0.02 --slow 0.005

prints its base URL on the first line of its output and serves until it is ended;
`GET /stats` says what it did.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import socket
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from vlm_ocr_lab.standins.loopback_http import JsonHandler, LoopbackHTTP

# What a request lost on the way can look like to the client.
FAULTS = ("drop", "cut", "reset", "502", "503", "504", "garbage")


def send_fault(h: BaseHTTPRequestHandler, kind: str, answer: bytes = b"") -> None:
    """Answer the request `h` is handling as a failing network or proxy would: `drop` closes
    the connection with no answer, `cut` sends the headers of `answer` and half its body,
    `reset` resets the connection, `502`/`503`/`504` are a gateway's refusal, and `garbage` is
    an HTTP 200 whose body is no JSON."""
    h.close_connection = True
    if kind == "drop":
        return
    if kind == "reset":  # SO_LINGER 0: close() sends RST instead of FIN
        h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return
    if kind == "cut":
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(answer)))
        h.end_headers()
        h.wfile.write(answer[: len(answer) // 2])
        h.wfile.flush()
        return
    if kind in ("502", "503", "504"):
        body = f"<html><body>{kind} from the gateway</body></html>".encode()
        h.send_response(int(kind))
    elif kind == "garbage":
        body = b"<html><body>an error page where the answer should be</body></html>"
        h.send_response(200)
    else:
        raise ValueError(f"unknown fault {kind!r}; the faults are {', '.join(FAULTS)}")
    h.send_header("Content-Type", "text/html")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def answer_tokens(request: dict[str, Any]) -> int:
    """The tokens a stand-in's answer counts: as many as the request asks when it ignores EOS."""
    return int(request.get("max_tokens") or 16) if request.get("ignore_eos") else 16


def chat_answer(request: dict[str, Any], text: str) -> bytes:
    """A chat completion of `text`, `answer_tokens` long."""
    tokens = answer_tokens(request)
    body = {
        "id": "instant",
        "object": "chat.completion",
        "model": request.get("model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length" if request.get("ignore_eos") else "stop",
            }
        ],
        "usage": {"prompt_tokens": 1000, "completion_tokens": tokens},
    }
    return json.dumps(body).encode()


def image_digest(request: dict[str, Any]) -> str:
    """A digest of the page image a chat request carries (the same for every try of a page)."""
    urls = [
        part.get("image_url", {}).get("url", "")
        for message in request.get("messages", [])
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if isinstance(part, dict)
    ]
    return hashlib.sha256("".join(urls).encode()).hexdigest()[:12]


class InstantEngine(LoopbackHTTP):
    """The server, on a thread of its own. `faults`: the share of requests lost on the way (one
    of `kinds`, chosen at random); `slow`: the share answered after `slow_s` seconds; `spare`:
    the first requests answered at once whatever `faults` and `slow` say (the worker's warm-up
    page, so that a worker starts on an engine that then fails or stalls its pages)."""

    def __init__(
        self,
        *,
        faults: float = 0.0,
        slow: float = 0.0,
        slow_s: float = 2.0,
        kinds: tuple[str, ...] = FAULTS,
        seed: int = 0,
        spare: int = 0,
        answer: Callable[[dict[str, Any]], str] | None = None,
    ) -> None:
        self.faults, self.slow, self.slow_s, self.kinds = faults, slow, slow_s, kinds
        self.spare = spare
        self.answer = answer or (lambda request: f"Page {image_digest(request)}: its text.")
        self.random = random.Random(seed)
        self.stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        server = self

        class Handler(JsonHandler):
            version = b'{"version": "instant"}'

            def stats(self) -> dict[str, int]:
                with server._lock:
                    return dict(server.stats)

            def do_POST(self) -> None:
                request = self.request_json()
                answer = chat_answer(request, server.answer(request))
                fault, slow = server.draw()
                if fault:
                    send_fault(self, fault, answer)
                    return
                if slow:
                    time.sleep(server.slow_s)
                self._send(answer)

        super().__init__(Handler, backlog=1024)

    def draw(self) -> tuple[str | None, bool]:
        """This request's fate: the fault it meets (or None), and whether it is slow."""
        with self._lock:
            self.stats["requests"] += 1
            if self.stats["requests"] <= self.spare:
                self.stats["instant"] += 1
                return None, False
            if self.random.random() < self.faults:
                kind = self.random.choice(self.kinds)
                self.stats[f"fault {kind}"] += 1
                return kind, False
            slow = self.random.random() < self.slow
            self.stats["slow" if slow else "instant"] += 1
            return None, slow


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=float, default=0.0, help="share of requests lost")
    parser.add_argument("--slow", type=float, default=0.0, help="share of answers that are slow")
    parser.add_argument("--slow-s", type=float, default=2.0, help="how slow, in seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spare", type=int, default=0, help="first requests answered at once")
    args = parser.parse_args(argv)
    server = InstantEngine(
        faults=args.faults, slow=args.slow, slow_s=args.slow_s, seed=args.seed, spare=args.spare
    )
    print(server.url, flush=True)
    sys.stdin.read()  # until the parent closes our input (or ends us)
    server.close()


if __name__ == "__main__":
    main()
