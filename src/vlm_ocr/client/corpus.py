"""A corpus over an endpoint's workers: `vlm-ocr submit` of files, folders, list files and
bucket prefixes, as one run.

The listing is a stream: a document is taken from it only when the run has room for it (`AHEAD`
documents checked and waiting beyond the jobs in flight), so the client's memory and CPU stay
flat however long the listing is. Each document is a `Submission` (its own folder and
`document.json`); they share one connection pool, one bucket client and one gate on the jobs at
RunPod. The endpoint's /health is read at the start (its workers choose the default limit of
jobs in flight) and every `health_s` after (the limit follows the workers RunPod starts, and
their time adds up to the run's GPU time). Each document's line goes to the report as it ends.

One document a folder in a run: a document listed again, or the same file (name and content) in
another folder, has the first's folder; it waits for the first to end and is reported as its
duplicate, nothing sent. The run keeps, for each document it ended, a digest of its folder with
its outcome and source (a few hundred bytes a document) to tell them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..contract import PageReport
from ..errors import StorageError
from ..file_names import shown, stored_name
from ..settings import Settings
from .documents import Limits, Listed, Refused
from .endpoint import EndpointError, worker_count
from .gate import Gate, Plan
from .listing import Corpus, LeftOut, UsageError, count
from .manifest import DocumentManifest
from .report import DocumentLine, Report, Summary
from .submit import Duplicate, Options, Shared, Submission

log = logging.getLogger(__name__)

AHEAD = 16  # documents checked and uploaded ahead of the jobs in flight
HEALTH_S = 30.0
# the first /health: a wrong endpoint id or API base is said in seconds, not after the minute of
# retries a job's call has (a network lost mid-run)
PREFLIGHT_ATTEMPTS = 3


@dataclass
class CorpusOptions:
    max_in_flight: int | None = None  # None: from the endpoint's workers and the jobs' size
    report: Path | None = None
    gpu_price: float | None = None
    health_s: float = HEALTH_S


@dataclass
class Progress:
    """What a display shows: the run's counts, updated as documents and pages come back."""

    documents_total: int | None = None  # known once the listing has been counted
    documents_taken: int = 0
    documents: Counter[str] = field(default_factory=Counter)
    earlier: int = 0
    duplicates: int = 0  # listed again, or the same file in another folder: not sent
    opened: int = 0  # documents this run works on (their pages counted in pages_expected)
    unopened: int = 0  # documents that ended before they were opened (unreadable, refused)
    pages_expected: int = 0  # pages of the documents this run works on
    pages_stored: int = 0
    pages_failed: int = 0
    workers: int | None = None
    #: the run's jobs: sent, and queued or running at RunPod now
    sent: Callable[[], int] = lambda: 0
    held: Callable[[], int] = lambda: 0
    plan: str | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def jobs_sent(self) -> int:
        return self.sent()

    @property
    def jobs_in_flight(self) -> int:
        return self.held()

    @property
    def documents_done(self) -> int:
        return sum(self.documents.values()) + self.duplicates

    def pages_per_s(self) -> float:
        return self.pages_stored / max(time.monotonic() - self.started, 1e-9)

    def pages_estimated(self) -> int:
        """The run's pages: those of the documents opened, and as many a document as those
        have for each whose pages are not known yet (not taken on, or not opened yet); the
        duplicates and the documents an earlier run finished have none."""
        if self.documents_total is None or not self.opened:
            return self.pages_expected
        known = self.opened + self.unopened + self.earlier + self.duplicates
        unknown = max(self.documents_total - known, 0)
        return self.pages_expected + round(unknown * self.pages_expected / self.opened)

    def left_s(self) -> float | None:
        """Time left at the pace so far, for the pages estimated and not stored or failed."""
        if not self.pages_stored or self.documents_total is None:
            return None
        left = self.pages_estimated() - self.pages_stored - self.pages_failed
        return max(left, 0) / self.pages_per_s()


class CorpusRun:
    """One run over a corpus. `await run()` returns the summary; cancelling it (Ctrl-C)
    cancels the jobs at RunPod and records what each open document has."""

    def __init__(
        self,
        corpus: Corpus,
        settings: Settings,
        options: Options,
        copts: CorpusOptions,
        progress: Progress | None = None,
        note: Callable[[str], None] = lambda text: None,
    ) -> None:
        self.corpus, self.settings, self.copts = corpus, settings, copts
        self.options = replace(options, resume=True)
        self.single = corpus.single_file is not None
        self.limits = Limits.of(settings)
        self.progress = progress or Progress()
        self.note = note
        auto = copts.max_in_flight is None
        self.jobs = Gate(None if auto else copts.max_in_flight, plan=self._plan if auto else None)
        self.window = Gate(AHEAD + (copts.max_in_flight or 0))
        self.shared = Shared(settings.bucket, settings.client, self.options, self.jobs)
        self.progress.sent = lambda: self.shared.sent
        self.progress.held = lambda: self.jobs.held
        self.left_out = LeftOut()  # what this run's listing passed over, for its summary
        self.summary = Summary(gpu_price=copts.gpu_price, left_out=self.left_out)
        self.report = Report(copts.report)
        self.stopped: Exception | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: the folders of the documents open now, and of those ended: (status, source)
        self._open: dict[int, asyncio.Event] = {}
        self._ended: dict[int, tuple[str, str]] = {}
        self._job_pages = [0, 0]  # pages and jobs of the documents this run sends
        self._worker_s: float | None = None
        self._sampled = time.monotonic()
        #: the last document's line and manifest (what the command prints for one document)
        self.last_line: DocumentLine | None = None
        self.last_manifest: DocumentManifest | None = None
        self.cancelled: list[str] = []  # jobs cancelled at RunPod by an interruption

    async def run(self) -> Summary:
        t0 = time.monotonic()
        helpers: list[asyncio.Task[None]] = []
        try:
            await self._preflight()
            helpers = [asyncio.create_task(self._sample()), asyncio.create_task(self._count())]
            await self._feed()
        except asyncio.CancelledError:
            await self._interrupt()
            raise
        finally:
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            self._close(time.monotonic() - t0)
            await self.shared.close()
        return self.summary

    # --- the stream of documents ------------------------------------------------------------

    async def _feed(self) -> None:
        documents = self.corpus.documents(self.left_out)
        while self.stopped is None:
            await self.window.__aenter__()
            try:
                listed = await asyncio.to_thread(next, documents, None)
            except UsageError as exc:  # standard input that is no list: said once, by the command
                self.stopped, listed = exc, None  # (the documents taken on end as they would)
            except Exception as exc:  # the bucket refused the listing, a list file vanished
                self._stop(exc)
                listed = None
            if listed is None or self.stopped is not None:
                await self.window.__aexit__()
                break
            self.progress.documents_taken += 1
            task = asyncio.create_task(self._document(listed))
            self._tasks.add(task)
            task.add_done_callback(self._task_done)
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self.stopped is not None:
            raise self.stopped

    async def _document(self, listed: Listed) -> None:
        t0 = time.monotonic()
        sub: Submission | None = None
        held: list[int] = []  # the folder this document claimed, if any
        line: DocumentLine | None = None
        try:
            sub = self._submission(listed, held)
            manifest = await sub.run()
            line = DocumentLine.of(
                manifest,
                earlier=sub.skipped,
                jobs=sub.sent,
                seconds=time.monotonic() - t0,
                stored=sub.stored_now,
                duplicate_of=sub.duplicate_of,
            ).model_copy(update={"source": listed.source})  # as listed this time
        except Duplicate as dup:
            line = DocumentLine(
                source=listed.source,
                status=dup.status,  # type: ignore[arg-type]
                duplicate_of=dup.first,
                error=str(dup),
                seconds=round(time.monotonic() - t0, 2),
            )
        except Refused as exc:
            line = DocumentLine.refused(listed.source, str(exc), time.monotonic() - t0)
        except asyncio.CancelledError:
            line = self._unfinished(listed, sub, "interrupted", t0)
            self._record(line, sub)
            raise
        except (EndpointError, StorageError, ValueError) as exc:
            line = self._unfinished(listed, sub, str(exc), t0)
            if isinstance(exc, EndpointError) and exc.unreachable:
                self._stop(exc)
        except Exception as exc:  # no document leaves the report without its line
            log.exception("%s", shown(listed.source))
            line = self._unfinished(listed, sub, f"{type(exc).__name__}: {exc}", t0)
        finally:
            self._release(held, line, listed.source)
            await self.window.__aexit__()
        self._record(line, sub)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A document's task is done: `_document` records every outcome, so one that raised is
        a fault of ours, said and counted (the run does not end 0), never dropped."""
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("a document's handling failed: %s: %s", type(exc).__name__, exc)
            self.summary.documents["unfinished"] += 1

    def _submission(self, listed: Listed, held: list[int]) -> Submission:
        sub = Submission(
            listed,
            self.settings.bucket,
            self.settings.client,
            self.options,
            on_start=self._started,
            shared=self.shared,
            limits=self.limits,
        )
        sub.on_page = lambda page: self._page(sub, page)
        sub.claim = lambda prefix: self._claim(prefix, held)
        return sub

    async def _claim(self, prefix: str, held: list[int]) -> tuple[str, str] | None:
        """One document a folder in a run: the first holds it (None); another of the same
        folder (listed again, or the same file elsewhere) waits for the first to end and gets
        its (status, source)."""
        key = int.from_bytes(hashlib.blake2b(prefix.encode(), digest_size=8).digest(), "big")
        while key in self._open:
            await self._open[key].wait()
        if key in self._ended:
            return self._ended[key]
        self._open[key] = asyncio.Event()
        held.append(key)
        return None

    def _release(self, held: list[int], line: DocumentLine | None, source: str) -> None:
        for key in held:
            self._ended[key] = (line.status if line is not None else "unfinished", source)
            event = self._open.pop(key, None)
            if event is not None:
                event.set()

    def _unfinished(
        self, listed: Listed, sub: Submission | None, error: str, t0: float
    ) -> DocumentLine:
        seconds = time.monotonic() - t0
        error = stored_name(error)  # (an exception's text may hold a file's name)
        manifest = sub.manifest if sub is not None else None
        if manifest is None:
            return DocumentLine(
                source=listed.source, status="unfinished", error=error, seconds=round(seconds, 2)
            )
        manifest.summarise()
        line = DocumentLine.of(
            manifest,
            earlier=False,
            jobs=sub.sent if sub else 0,
            seconds=seconds,
            stored=sub.stored_now if sub else 0,
        )
        update = {"status": "unfinished", "error": error, "source": listed.source}
        return line.model_copy(update=update)

    # --- counts -----------------------------------------------------------------------------

    def _started(self, manifest: DocumentManifest) -> None:
        """A document this run works on: its pages not stored yet, and the size of the jobs it
        sends."""
        self.progress.opened += 1
        self.progress.pages_expected += manifest.page_count - sum(p.stored for p in manifest.pages)
        for part in manifest.parts:
            if not part.settled:
                self._job_pages[0] += part.last - part.first + 1
                self._job_pages[1] += 1

    def _page(self, sub: Submission, page: PageReport) -> None:
        """A page stored by a job of this run (not one an earlier run stored)."""
        if page.stored and sub.sent:
            self.progress.pages_stored += 1

    def _record(self, line: DocumentLine, sub: Submission | None) -> None:
        """The document's line in the report, the summary and the counts, whatever fails: a
        document is never left out in silence (its line as unfinished, if its own cannot be
        made)."""
        try:
            self._finish(line, sub)
        except Exception as exc:
            log.exception("%s: its outcome could not be recorded", shown(line.source))
            error = f"its outcome could not be recorded ({type(exc).__name__}: {exc})"
            fallback = DocumentLine(source=line.source, status="unfinished", error=error)
            try:
                self._finish(fallback, None)
            except Exception:  # the report itself fails: counted all the same, said above
                self.summary.add(fallback)
                self.progress.documents[fallback.status] += 1

    def _finish(self, line: DocumentLine, sub: Submission | None) -> None:
        try:
            self.report.write(line)
        except OSError as exc:  # the report's disk: said, and the run goes on
            log.error("%s: not written to the report: %s", shown(line.source), exc)
        self.summary.add(line)
        self.last_line, self.last_manifest = line, sub.manifest if sub is not None else None
        p = self.progress
        if line.duplicate_of is not None:  # counted once, as the first
            p.duplicates += 1
            return
        p.documents[line.status] += 1
        if line.earlier:
            p.earlier += 1
        elif sub is None or sub.manifest is None:
            p.unopened += 1
        elif line.status in ("partial", "failed"):
            p.pages_failed += line.failed
        if line.status != "ok" and not self.single:  # one document's outcome is printed after
            said = f"{line.source}: {line.status}" + (f": {line.error}" if line.error else "")
            log.info("%s", shown(said))

    def _close(self, wall_s: float) -> None:
        s = self.summary
        s.wall_s = wall_s
        s.jobs = self.shared.sent
        s.resubmitted = max(0, self.shared.sent - self._job_pages[1])  # beyond one a part
        self._add_worker_time()
        s.worker_s = self._worker_s
        s.backoffs = dict(self.shared.api.backoffs)
        s.runs_resent = self.shared.api.runs_resent
        self.report.close(s)

    # --- the endpoint -----------------------------------------------------------------------

    async def _preflight(self) -> None:
        """The endpoint answers with this key, and the bucket with its credentials: else the
        run stops before its first document (an EndpointError or a StorageError)."""
        health = await self.shared.api.health(attempts=PREFLIGHT_ATTEMPTS)
        self.progress.workers = worker_count(health)
        self._worker_s, self._sampled = 0.0, time.monotonic()
        await self.shared.store.bucket.check_listing(self.shared.store.key_prefix)

    def _plan(self) -> int:
        """The default limit of jobs in flight, chosen when the first job is ready to go."""
        pages, jobs = self._job_pages
        plan = Plan.of(self.progress.workers or 0, pages / jobs if jobs else 1.0)
        self.progress.plan = plan.said()
        self.note(plan.said())
        asyncio.get_running_loop().create_task(self.window.set_limit(AHEAD + plan.limit))
        return plan.limit

    async def _sample(self) -> None:
        """Every `health_s`: the endpoint's workers, their time, and (by default) the limit
        that follows them."""
        while True:
            await asyncio.sleep(self.copts.health_s)
            self._add_worker_time()
            try:
                health = await self.shared.api.health()
            except EndpointError as exc:
                log.debug("the endpoint's /health: %s", exc)
                continue
            self.progress.workers = worker_count(health)
            if self.copts.max_in_flight is None and self.jobs.limit is not None:
                pages, jobs = self._job_pages
                plan = Plan.of(self.progress.workers, pages / jobs if jobs else 1.0)
                await self.jobs.set_limit(plan.limit)
                await self.window.set_limit(AHEAD + plan.limit)

    def _add_worker_time(self) -> None:
        """The workers last seen, for the time since they were seen."""
        now = time.monotonic()
        if self._worker_s is not None and self.progress.workers is not None:
            self._worker_s += self.progress.workers * (now - self._sampled)
        self._sampled = now

    async def _count(self) -> None:
        """The listing once more, to count it for the display (not a list read from stdin)."""
        if any(str(path) == "-" for path in self.corpus.list_files):
            return
        self.progress.documents_total = await asyncio.to_thread(count, self.corpus.documents())

    # --- stopping ---------------------------------------------------------------------------

    def _stop(self, exc: Exception) -> None:
        """The endpoint is out of reach: take no more documents, end the open ones."""
        if self.stopped is None:
            self.stopped = exc
            log.error("stopping: %s; run the same command again to go on", exc)
            for task in list(self._tasks):
                task.cancel()

    async def _interrupt(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self.cancelled = await self.shared.cancel_active()
