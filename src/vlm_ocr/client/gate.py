"""How many jobs a run keeps at RunPod, and how often it asks after them.

A run holds a slot of the `Gate` from the moment it queues a job until the job ends, so at most
`limit` of its jobs are queued or running at once. Unless the user sets the limit, it follows
the endpoint: enough jobs that every worker has about `PAGES_PER_WORKER` pages queued or in
flight (eight jobs of 50 pages, what keeps one worker's engine full while its jobs start and
end), so small documents, one per job, come many more to a worker than large ones split in 50s.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

PAGES_PER_WORKER = 400
MIN_JOBS_PER_WORKER = 2  # one running, the next one already queued
MAX_AUTO_IN_FLIGHT = 256  # RunPod answers 429 past 50 queued jobs and MAX_WORKERS × 500
# Each job in flight is asked after every poll; past this many requests a second the interval
# grows, well inside RunPod's 2,000 /stream requests per 10 s.
MAX_POLLS_PER_S = 50.0


class Gate:
    """At most `limit` holders at once (0: no limit). The limit may change while slots are
    held; a lower one applies as holders leave. Without a limit yet, the first holder asks
    `plan` for one: a run chooses its limit when its first job is ready to go, from what it
    knows of the jobs by then."""

    def __init__(self, limit: int | None = 0, plan: Callable[[], int] | None = None) -> None:
        assert limit is not None or plan is not None
        self._limit = limit
        self._plan = plan
        self.held = 0
        self._changed = asyncio.Condition()

    @property
    def limit(self) -> int | None:
        return self._limit

    async def set_limit(self, limit: int) -> None:
        async with self._changed:
            self._limit = limit
            self._changed.notify_all()

    def _open(self) -> bool:
        return self._limit is not None and (self._limit == 0 or self.held < self._limit)

    async def __aenter__(self) -> Gate:
        async with self._changed:
            if self._limit is None and self._plan is not None:
                self._limit = self._plan()
            await self._changed.wait_for(self._open)
            self.held += 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        async with self._changed:
            self.held -= 1
            self._changed.notify_all()


@dataclass(frozen=True)
class Plan:
    """The default limit of jobs in flight, and what it was chosen from."""

    workers: int
    pages_per_job: float
    limit: int

    @classmethod
    def of(cls, workers: int, pages_per_job: float) -> Plan:
        per_worker = max(MIN_JOBS_PER_WORKER, math.ceil(PAGES_PER_WORKER / max(1.0, pages_per_job)))
        return cls(workers, pages_per_job, min(MAX_AUTO_IN_FLIGHT, max(1, workers) * per_worker))

    def said(self) -> str:
        shown = f"{self.workers} worker{'s' if self.workers != 1 else ''}"
        if self.workers == 0:
            shown += " (scaled to zero: counted as one until RunPod starts more)"
        return (
            f"at most {self.limit} jobs queued or running at once: {shown} on the endpoint's "
            f"/health, jobs of about {self.pages_per_job:.1f} pages, {PAGES_PER_WORKER} pages a "
            f"worker (at most {MAX_AUTO_IN_FLIGHT}; --max-in-flight sets it)"
        )


# A job still in RunPod's queue is looked at this many times less often: most of a long run's
# jobs wait there, and one that starts is seen at its next look (its end a little later).
QUEUED_SLOWER = 5


def poll_interval(poll_s: float, in_flight: int, *, queued: bool = False) -> float:
    """Seconds between two looks at one job: `poll_s`, longer when many jobs are in flight,
    and longer again while it waits in the queue."""
    interval = max(poll_s, in_flight / MAX_POLLS_PER_S)
    return interval * QUEUED_SLOWER if queued else interval


async def sleep_poll(poll_s: float, in_flight: int, *, queued: bool = False) -> None:
    await asyncio.sleep(poll_interval(poll_s, in_flight, queued=queued))
