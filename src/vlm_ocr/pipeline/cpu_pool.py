"""A pool of processes for the CPU-bound work of pages, with a deadline per task.

Decoding, rendering and encoding a page can take any time a crafted file asks for (nested form
XObjects, a huge image) and a thread cannot be stopped. So that work runs in child processes: the
event loop hands a task to an idle child and awaits its answer on the pipe without blocking, and a
task that outlives its deadline is killed with its process, which is replaced. Children are
started with `spawn` (the worker has threads, which `fork` would copy half-way) and may be given
an address-space limit, so a page that asks for too much memory fails alone. They ignore Ctrl-C
(a terminal sends it to every process of its foreground group): the parent decides what it means
and ends them, and none of them prints a traceback of its own, whichever thread starts the pool
(the worker's loop runs on a thread of its own) and however long a child takes to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import traceback
from collections.abc import Callable, Iterator
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

from ..engines.gpu import host_cores
from ..errors import PageError

log = logging.getLogger(__name__)
T = TypeVar("T")


class TaskTimeout(Exception):
    """The task did not finish in time; its process was killed."""


class TaskFailed(Exception):
    """The task raised something other than a PageError, or its process died."""


def _serve(conn: Connection, memory_limit: int) -> None:
    """A child's life: run tasks until the pipe closes. A PageError travels back as itself;
    anything else as its type name for the user, with its traceback for the worker's log only
    (a fault of ours in the render code must be found there)."""
    # Ignored, then let through: a Ctrl-C that came while the child started is dropped.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    import ctypes

    from . import render  # noqa: F401  (loaded before the limit: the limit is for the work)

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # die with the worker, even mid-render
    if memory_limit:
        import resource

        # On top of what the process has mapped now (libraries, thread arenas), which differs
        # from host to host: the limit bounds what one task may add.
        mapped = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (mapped + memory_limit, mapped + memory_limit))
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send(("ok", fn(*args)))
        except PageError as exc:
            conn.send(("page", (exc.stage, exc.message)))
        except MemoryError:
            conn.send(("failed", "it needed more memory than RENDER_MEMORY_MB allows"))
        except Exception as exc:
            conn.send(("fault", (type(exc).__name__, traceback.format_exc())))


@contextlib.contextmanager
def _deaf_to_ctrl_c() -> Iterator[None]:
    """SIGINT blocked in this thread while a child starts: the child inherits the mask across
    fork and exec, so a Ctrl-C during its start (seconds of imports before `_serve` ignores it)
    stays pending, then is dropped. Unlike a handler, a mask can be set on any thread, and the
    pool is started on the worker loop's (multiprocessing starts its resource tracker so too)."""
    # Starting multiprocessing's resource tracker (a spawned child's start does it once) unblocks
    # SIGINT in this thread: started first, it leaves the mask set below alone.
    resource_tracker.ensure_running()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class _Child:
    def __init__(self, ctx: Any, memory_limit: int) -> None:
        self.conn, child_end = ctx.Pipe()
        self.proc = ctx.Process(
            target=_serve, args=(child_end, memory_limit), name="vlm-ocr-cpu", daemon=True
        )
        with _deaf_to_ctrl_c():
            self.proc.start()
        child_end.close()

    def kill(self, close: bool = True) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
        self.proc.join(5)
        if close:
            self.conn.close()


class CpuPool:
    """`size` child processes; `run(fn, *args, timeout_s=…)` runs `fn(*args)` in one of them.

    `fn` and its arguments and result are pickled: pass paths and small values, not documents.
    """

    def __init__(self, size: int = 0, *, memory_limit_mb: int = 0) -> None:
        self.size = size or host_cores()
        self._memory_limit = memory_limit_mb * 1024 * 1024
        self._ctx = multiprocessing.get_context("spawn")
        self._idle: asyncio.Queue[_Child] | None = None
        self._children: set[_Child] = set()
        # `terminate` runs on the main thread (the worker's SIGINT handler) while children are
        # replaced on the loop's: it waits for a child being started, and none is started after
        # it, so that none is left half-started (its traceback) when the worker exits.
        self._lock = threading.RLock()
        self._ended = False

    @property
    def started(self) -> bool:
        return self._idle is not None

    async def start(self) -> None:
        self._ended = False
        self._idle = asyncio.Queue()
        for _ in range(self.size):
            self._add_child()

    def _add_child(self) -> None:
        """A new idle child; none once the pool is ended (its children were killed, not lost)."""
        assert self._idle is not None
        with self._lock:
            if not self._ended:
                child = _Child(self._ctx, self._memory_limit)
                self._children.add(child)
                self._idle.put_nowait(child)

    def _replace(self, child: _Child) -> None:
        with self._lock:  # each child is killed once, by whoever takes it out of the set
            if child not in self._children:  # ended: `terminate` killed it, its pipe is ours
                child.conn.close()
                return
            self._children.discard(child)
        child.kill()
        self._add_child()

    async def run(
        self,
        fn: Callable[..., T],
        /,
        *args: Any,
        timeout_s: float,
        ready: Callable[[], None] | None = None,
    ) -> T:
        """fn(*args) in a child; PageError as raised there, TaskTimeout past `timeout_s`,
        TaskFailed for anything else. `ready` is called once a child is free, and may raise to
        call the task off (a job that no longer wants it)."""
        if self._idle is None:
            raise RuntimeError("the CPU pool was not started")
        child = await self._idle.get()
        if ready is not None:
            try:
                ready()
            except BaseException:
                self._idle.put_nowait(child)
                raise
        try:
            child.conn.send((fn, args))
            kind, value = await asyncio.wait_for(self._answer(child.conn), timeout_s)
        except TimeoutError:
            self._replace(child)
            raise TaskTimeout(f"it did not finish within {timeout_s:g} s") from None
        except (EOFError, OSError):
            code = child.proc.exitcode
            self._replace(child)
            raise TaskFailed(f"its process died (exit code {code})") from None
        except BaseException:  # cancelled: the child is busy with work nobody will read
            self._replace(child)
            raise
        self._idle.put_nowait(child)
        if kind == "page":
            raise PageError(*value)
        if kind == "failed":
            raise TaskFailed(value)
        if kind == "fault":
            name, trace = value
            log.warning("%s failed in a render process:\n%s", fn.__name__, trace)
            raise TaskFailed(name)
        return value

    @staticmethod
    async def _answer(conn: Connection) -> tuple[str, Any]:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        fd = conn.fileno()
        loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        return conn.recv()

    def idle(self) -> int:
        """How many children wait for a task now (none before `start`); a read from any thread."""
        return self._idle.qsize() if self._idle is not None else 0

    def pids(self) -> list[int]:
        """The live children's process ids (to watch or measure them from outside)."""
        return [c.proc.pid for c in self._children if c.proc.pid is not None]

    def terminate(self) -> None:
        with self._lock:
            self._ended = True
            children = list(self._children)
            self._children.clear()
        for child in children:
            # The process alone: a task waiting for its answer on the loop's thread wakes on the
            # pipe's end, and closes it (`_replace`). Closed here, from another thread, before
            # the loop had polled it, the pipe would leave the loop's poller silently, and that
            # task would wait until its timeout. An idle child's pipe is closed when dropped.
            child.kill(close=False)

    async def close(self) -> None:
        self.terminate()
