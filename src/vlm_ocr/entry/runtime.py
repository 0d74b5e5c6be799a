"""A private event loop on a thread of its own, where the worker lives.

The RunPod SDK runs jobs on event loops it creates (one for `--test_input`, uvicorn's for
`--rp_serve_api`, its own for production). The engine's client, locks and child process belong to
the loop that started them, so the worker is started once on this loop and every job is handed
to it; the SDK's loop only awaits the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
E = TypeVar("E")


@dataclass(frozen=True)
class Finished(Generic[T]):
    """The last item of `WorkerLoop.stream`: what the coroutine returned."""

    value: T


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

    async def stream(
        self, start: Callable[[Callable[[E], None]], Coroutine[Any, Any, T]]
    ) -> AsyncIterator[E | Finished[T]]:
        """Run `start(emit)` on the worker loop and yield, on the caller's loop, each event it
        emits as it comes, then `Finished(result)`. Closing the iterator early (the job was
        cancelled) cancels the coroutine at once, on the worker loop: not by a step of the
        caller's loop, which may be closing (the SDK's, once a cancelled job's handler ends)."""
        caller = asyncio.get_running_loop()
        events: asyncio.Queue[E] = asyncio.Queue()

        def emit(event: E) -> None:  # called on the worker loop's thread
            # the caller's loop closed: a page of a cancelled job may still end, unheard
            with contextlib.suppress(RuntimeError):
                caller.call_soon_threadsafe(events.put_nowait, event)

        running = asyncio.run_coroutine_threadsafe(start(emit), self.loop)
        done = asyncio.wrap_future(running)
        try:
            while not done.done():
                next_event = asyncio.ensure_future(events.get())
                await asyncio.wait({next_event, done}, return_when=asyncio.FIRST_COMPLETED)
                if next_event.done():
                    yield next_event.result()
                else:
                    next_event.cancel()
            # Events emitted before the result were queued before it (one thread, in order).
            while not events.empty():
                yield events.get_nowait()
            yield Finished(done.result())
        finally:
            running.cancel()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
