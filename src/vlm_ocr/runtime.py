"""A private event loop on a thread of its own, where the worker lives.

The RunPod SDK runs jobs on event loops it creates (one for `--test_input`, uvicorn's for
`--rp_serve_api`, its own for production). The engine's client, locks and child process belong to
the loop that started them, so the worker is started once on this loop and every job is handed
to it; the SDK's loop only awaits the answer.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class WorkerLoop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="worker-loop", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the worker loop and block until it is done (for cold start)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def submit(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the worker loop and await it from any other loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
