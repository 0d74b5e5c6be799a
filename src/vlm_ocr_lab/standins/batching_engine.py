"""An OpenAI-compatible chat server on loopback that batches pages as vLLM does, in time only:
at most SEQS requests run at once and the rest wait in order; each step of the engine either
takes one waiting page in (INTAKE_MS, the vision encoder and prefill of a page) or, with none to
take or no room, decodes (STEP_MS); every running request gets a token a step and ends with the
tokens its answer counts (its `max_tokens` when it ignores EOS). So pages of one length go
through in waves, as on a GPU, with no GPU: the bench (`vlm-ocr-lab bench --batching-engine`)
tells whether the worker keeps such an engine as busy as requests sent straight to it do.
`BUSY` is the share of each step its thread spends on a CPU rather than waiting (vLLM's engine
core launches a step's kernels from one thread), so the worker's own CPU work competes with it
as it would on a host.

    python -m vlm_ocr_lab.standins.batching_engine --seqs 256 --intake-ms 55 --step-ms 17

prints its base URL on the first line of its output and serves until its input closes;
`GET /stats` says what it did.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from vlm_ocr_lab.standins.instant_engine import answer_tokens, chat_answer, image_digest
from vlm_ocr_lab.standins.loopback_http import JsonHandler, LoopbackHTTP


@dataclass
class Sequence:
    tokens_left: int
    done: threading.Event = field(default_factory=threading.Event)


class BatchingEngine(LoopbackHTTP):
    """The server and its engine loop, each on a thread of its own."""

    def __init__(self, *, seqs: int, intake_s: float, step_s: float, busy: float = 0.0) -> None:
        if seqs < 1 or intake_s < 0 or step_s <= 0 or not 0 <= busy <= 1:
            raise ValueError("seqs >= 1, intake >= 0, step > 0 and busy in [0, 1], please")
        self.seqs, self.intake_s, self.step_s, self.busy = seqs, intake_s, step_s, busy
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.stats: Counter[str] = Counter()
        self._cond = threading.Condition()
        self._closed = False
        server = self

        class Handler(JsonHandler):
            version = b'{"version": "batching"}'

            def stats(self) -> dict[str, int]:
                with server._cond:
                    return dict(server.stats)

            def do_POST(self) -> None:
                request = self.request_json()
                server.serve(answer_tokens(request))
                text = f"Page {image_digest(request)}: its text."
                self._send(chat_answer(request, text))

        super().__init__(Handler, backlog=1024)
        self._loop = threading.Thread(target=self._steps, name="engine-steps", daemon=True)
        self._loop.start()

    def serve(self, tokens: int) -> None:
        """Queue one request and wait until the engine has written its tokens."""
        seq = Sequence(max(1, tokens))
        with self._cond:
            self.waiting.append(seq)
            self.stats["requests"] += 1
            self._cond.notify()
        seq.done.wait()

    def _steps(self) -> None:
        while True:
            with self._cond:
                while not (self.waiting or self.running or self._closed):
                    self._cond.wait()
                if self._closed:
                    return
                taking = self.waiting.popleft() if self.waiting and self._room() else None
            self._step(self.intake_s if taking else self.step_s)
            with self._cond:
                self.stats["intake steps" if taking else "decode steps"] += 1
                if taking is not None:
                    self.running.append(taking)
                    self.stats["most running"] = max(self.stats["most running"], len(self.running))
                for seq in self.running:
                    seq.tokens_left -= 1
                for seq in [s for s in self.running if s.tokens_left <= 0]:
                    self.running.remove(seq)
                    seq.done.set()

    def _room(self) -> bool:
        return len(self.running) < self.seqs

    def _step(self, seconds: float) -> None:
        """One step: its busy share on the CPU (a thread that others' work can delay), the rest
        waiting for the GPU."""
        end = time.perf_counter() + seconds * self.busy
        while time.perf_counter() < end:
            pass
        time.sleep(seconds * (1 - self.busy))

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
            for seq in [*self.running, *self.waiting]:
                seq.done.set()
        super().close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seqs", type=int, default=256, help="requests run at once")
    parser.add_argument("--intake-ms", type=float, default=55.0, help="a step taking a page in")
    parser.add_argument("--step-ms", type=float, default=17.0, help="a decoding step")
    parser.add_argument("--busy", type=float, default=0.0, help="a step's share on the CPU")
    args = parser.parse_args(argv)
    server = BatchingEngine(
        seqs=args.seqs,
        intake_s=args.intake_ms / 1000,
        step_s=args.step_ms / 1000,
        busy=args.busy,
    )
    print(server.url, flush=True)
    sys.stdin.read()  # until the parent closes our input (or ends us)
    server.close()


if __name__ == "__main__":
    main()
