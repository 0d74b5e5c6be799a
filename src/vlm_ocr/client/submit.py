"""Spread one document over an endpoint's workers, and put it back together: `vlm-ocr submit`.

A local document is uploaded once to the bucket the endpoint reads (the jobs name it by key; it
never travels inline); one already in the bucket is named by its own key. A PDF's pages are
split into jobs of `pages_per_job`, RunPod's queue spreads them over workers, each job's pages
stream back as they are stored, and when every job is done the client writes a document
manifest and the whole text in page order next to the jobs' own manifests:

    {prefix}/source.pdf                 the document, uploaded once (skipped when already there)
    {prefix}/pages-0001-0050/...        one job's pages and manifest (the worker writes them)
    {prefix}/document.json              every page's status and key, every job's outcome
    {prefix}/document.md                the pages' texts in order, page breaks marked, to read
    {prefix}/document.txt               the pages' texts in order, each ended by a form feed

One retry policy: a job that did not complete for a reason outside the document (a worker lost,
a time-out, the engine or the bucket failing) is sent again, up to `retries` times, for the
pages it had not stored; a job that completed, or that the worker refused for its input, is
final, and its failed pages are reported, not sent again (unless `retry_failed`). Running again
with `resume` (the command always does) goes on from `document.json`: a finished document is
not sent at all (with `out`, its files are copied from the bucket), an unfinished one sends only
its missing pages. A job RunPod loses (its stream answers 404) is a failed job, sent again. A
resubmitted job finds its stored pages and the worker reuses them (same pixels, same engine
fingerprint).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import document
from ..contract import JobResult, PageItem, PageReport, ResultItem, read_item
from ..errors import StorageError
from ..file_names import shown
from ..pdf_file import file_sha256
from ..settings import BucketSettings, ClientSettings, Settings
from ..storage import JSON_TYPE, PLAIN_TYPE, TEXT_TYPE, Bucket, ObjectMissing, S3Store, put_json
from .documents import (
    CONTENT_TYPES,
    TIFF_SUFFIXES,
    Facts,
    Limits,
    Listed,
    Refused,
    examine,
    folder_of,
    inspect_object,
    key_identity,
    local_identity,
    pdf_pages,
    snapshot,
)
from .endpoint import FINAL_STATES, Endpoint, EndpointError
from .gate import Gate, sleep_poll
from .manifest import DocumentManifest, DocumentTotals, Part, split_pages

__all__ = [
    "DocumentManifest",
    "DocumentTotals",
    "Duplicate",
    "Options",
    "Part",
    "Shared",
    "Submission",
    "file_sha256",
    "pdf_page_count",
    "split_pages",
    "submit",
]

log = logging.getLogger(__name__)

# 50 pages a job: a worker takes MAX_CONCURRENT_JOBS (8) jobs at once, so 8 jobs of 50 pages keep
# about twice the 192 sequences a 32B engine batches on an H200 in flight (it stays full while
# jobs start and end), and a 2,000-page document still makes 40 jobs to spread over workers.
# Each job reads the source from the bucket once, which is what smaller jobs would multiply.
DEFAULT_PAGES_PER_JOB = 50
POLL_S = 2.0
# How a failed job's error begins when the document caused it, as the worker words it: a field
# of its input refused (`InputError` names the field) or every page failed on its own
# (`verdict`). Sending such a job again would fail the same way.
OWN_FAULT = ("input", "no page could be processed")
# The fields of a job's input this client builds (the folder, the pages a part asks for): a
# refusal of one is the client's, not the document's, and is never final; a later run (a client
# that builds them right) sends the job again. Within a run it would fail the same way.
CLIENT_MADE = ("input.output_prefix", "input.pages")
CANCELS_AT_ONCE = 10  # RunPod takes 20 /cancel requests at once, 100 in 10 s
# document.json is written as jobs are sent and end, for a run cut short to go on from; a large
# document's takes a while to write (10,000 pages: 8 MB), so after a write the next waits this
# many times as long (all that happened meanwhile in one): writing it takes at most a tenth of
# the client's time, and a small document's is written at once.
SAVE_SPACING = 9


def pdf_page_count(path: Path) -> int:
    try:
        return pdf_pages(path)
    except Refused as exc:
        raise ValueError(f"{path.name}: {exc}") from None


@dataclass
class Options:
    endpoint_id: str
    pages_per_job: int = DEFAULT_PAGES_PER_JOB
    prefix: str | None = None  # default: <base>/<file stem>-<first 12 hex of its sha256>
    base: str = "documents"
    retries: int = 2
    resume: bool = False
    retry_failed: bool = False  # send again the pages that failed for their own reasons
    out: Path | None = None
    out_folders: bool = False  # a folder of `out` per document (a corpus), named as in the bucket
    poll_s: float = POLL_S
    job_options: dict[str, Any] | None = None  # more job input fields, e.g. {"prompt": "legal"}


PageEvent = Callable[[PageReport], None]
StartEvent = Callable[[DocumentManifest], None]
#: a run's claim on a document's folder: None for the first document of it, else (once the first
#: has ended) the first's (status, source)
Claim = Callable[[str], Awaitable[tuple[str, str] | None]]


class Duplicate(Exception):
    """The document is one listed before it in this run, which recorded no document.json (it was
    refused, or stopped before): `status` and `first` are the first's."""

    def __init__(self, status: str, first: str) -> None:
        super().__init__(f"the same document as {first}, which was {status}")
        self.status, self.first = status, first


class Shared:
    """What the documents of one run share: one connection pool to the endpoint, one bucket
    client, the gate on jobs in flight, and every job at RunPod now (to cancel on a stop)."""

    def __init__(
        self, bucket: BucketSettings, client: ClientSettings, options: Options, jobs: Gate
    ) -> None:
        if not bucket.configured:
            raise ValueError(
                "the documents go to the bucket the endpoint reads and writes: set BUCKET_NAME, "
                "BUCKET_ENDPOINT_URL, BUCKET_ACCESS_KEY_ID and BUCKET_SECRET_ACCESS_KEY as the "
                "endpoint has them"
            )
        if not client.runpod_api_key:
            raise ValueError(
                "the endpoint's API needs your key: set RUNPOD_API_KEY (RunPod's console, "
                "Settings, API Keys)"
            )
        self.store = S3Store.from_settings(bucket, Bucket.from_settings(bucket))
        self.client, self.endpoint_id = client, options.endpoint_id
        self.api = endpoint(client, options.endpoint_id)
        self.jobs = jobs
        self.active: dict[str, tuple[Submission, Part]] = {}
        self.sent = 0

    async def close(self) -> None:
        await self.api.__aexit__()

    async def cancel_active(
        self, owner: Submission | None = None, *, attempts: int = 3
    ) -> list[str]:
        """Cancel every job of this run (or of one document) at RunPod now, mark their parts
        and save their documents' manifests; returns the job ids. Its own connection: the run's
        may be closed by the interruption."""
        chosen = {k: v for k, v in self.active.items() if owner is None or v[0] is owner}
        owners = {id(sub): sub for sub, _ in chosen.values()}
        at_once = asyncio.Semaphore(CANCELS_AT_ONCE)

        async def cancel(api: Endpoint, job_id: str, part: Part) -> None:
            async with at_once:
                try:
                    await api.cancel(job_id)
                except EndpointError as exc:
                    log.warning("could not cancel job %s: %s", job_id, exc)
                part.status = "cancelled"

        async with endpoint(self.client, self.endpoint_id, attempts=attempts) as api:
            await asyncio.gather(*(cancel(api, k, part) for k, (_, part) in chosen.items()))
        for sub in owners.values():
            if sub.manifest is not None:
                sub.manifest.summarise()
                await sub.save()
        return list(chosen)


def endpoint(client: ClientSettings, endpoint_id: str, **kw: Any) -> Endpoint:
    return Endpoint(endpoint_id, client.runpod_api_key, api_base=client.runpod_api_base, **kw)


class Submission:
    """One document's run over an endpoint. `await run()`; `cancel_active()` from a signal
    handler. In a corpus, many share one `Shared`; alone, it makes its own."""

    def __init__(
        self,
        path: Path | Listed,
        bucket: BucketSettings,
        client: ClientSettings,
        options: Options,
        *,
        on_page: PageEvent | None = None,
        on_start: StartEvent | None = None,
        shared: Shared | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.listed = path if isinstance(path, Listed) else Listed(str(path), path=path)
        self.options = options
        self.on_page = on_page or (lambda page: None)
        self.on_start = on_start or (lambda manifest: None)
        self.shared = shared or Shared(bucket, client, options, Gate(0))
        self._own = shared is None
        self.limits = limits or Limits.of(Settings())
        self.manifest: DocumentManifest | None = None
        #: the document was finished by an earlier run: nothing was sent
        self.skipped = False
        self.sent = 0  # jobs this run sent for it
        self.stored_now = 0  # pages this run's jobs stored
        #: a corpus's claim on the document's folder (one document a folder in a run)
        self.claim: Claim | None = None
        #: the document listed before it with the same folder, whose outcome it has
        self.duplicate_of: str | None = None
        self._stored: set[int] = set()  # pages told to `on_page` as stored
        self._save_lock = asyncio.Lock()
        self._next_save = 0.0  # (monotonic) when document.json may be written again
        self._deferred: asyncio.Future[None] | None = None  # a write when it may be
        #: the private copy of a local file its pages are counted in and uploaded from
        self._snapshot: Path | None = None

    @property
    def path(self) -> Path | None:
        return self.listed.path

    @property
    def store(self) -> S3Store:
        return self.shared.store

    @property
    def bucket(self) -> Bucket:
        return self.store.bucket

    def key(self, relative: str) -> str:
        return self.store.key_prefix + relative

    async def run(self) -> DocumentManifest:
        try:
            return await self._run()
        finally:
            self._drop_snapshot()
            await self._flush()
            if self._own:
                await self.shared.close()

    async def cancel_active(self) -> list[str]:
        """Cancel every job this document has at RunPod now; returns their ids."""
        ids = await self.shared.cancel_active(self)
        if self.manifest is not None and not ids:
            self.manifest.summarise()
            await self.save()
        return ids

    # --- the document -----------------------------------------------------------------------

    async def _run(self) -> DocumentManifest:
        t0 = time.perf_counter()
        identity = await self._identify()
        prefix = (self.options.prefix or folder_of(self.options.base, self.listed, identity)).strip(
            "/"
        )
        first = await self.claim(prefix) if self.claim is not None else None
        if first is not None:
            return await self._duplicate(prefix, *first)
        manifest = await self._previous(prefix, identity) if self.options.resume else None
        facts = None
        if manifest is not None and manifest.finished:
            facts = await self._read_as_one_image(manifest, identity)
            if facts is None:
                return await self._finished(manifest)
            manifest = None  # a TIFF of several pages an earlier version read as one image
        facts = facts or await self._inspect(identity)
        manifest = manifest or self._new(prefix, facts)
        self.manifest = manifest
        self.on_start(manifest)
        try:
            await self._upload(manifest, identity)
        finally:  # one copy a document at a time on this machine's disk: none once uploaded
            self._drop_snapshot()
        for page in manifest.pages:
            self._tell(page)
        await self._parts([p for p in manifest.parts if not p.settled])
        manifest.summarise()
        try:
            if manifest.finished and any(page.stored for page in manifest.pages):
                manifest.text_key, manifest.markdown_key = await self._write_text(manifest)
        finally:  # what the jobs did is recorded even if the whole text could not be written
            manifest.wall_s = round(time.perf_counter() - t0, 2)
            await self._settle()
            await self.save()
        return manifest

    async def _parts(self, todo: list[Part]) -> None:
        """Every part's jobs to their end; if one raises (the endpoint out of reach), the
        others are stopped too, not left running on unawaited."""
        tasks = [asyncio.ensure_future(self._part(part)) for part in todo]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _finished(self, manifest: DocumentManifest) -> DocumentManifest:
        """A document an earlier run finished: nothing is sent; `--out` gets its files."""
        self.manifest, self.skipped = manifest, True
        for page in manifest.pages:
            self._tell(page)
        await self._copy_out(manifest)
        return manifest

    async def _duplicate(self, prefix: str, status: str, first: str) -> DocumentManifest:
        """The document listed before it in this run with the same folder: its outcome, as the
        first recorded it (Duplicate where it recorded none)."""
        self.duplicate_of = first
        try:
            text = await self.store.read_text(self.key(f"{prefix}/document.json"))
        except ObjectMissing:
            raise Duplicate(status, first) from None
        self.manifest = DocumentManifest.model_validate_json(text)
        return self.manifest

    async def _read_as_one_image(self, manifest: DocumentManifest, identity: str) -> Facts | None:
        """The document's facts where an earlier version of this client sent a TIFF of several
        pages as one image (its first page alone read), so that it is read in full now; None
        for any other finished document (its file is not opened again)."""
        if manifest.kind != "image" or Path(manifest.source_key).suffix not in TIFF_SUFFIXES:
            return None
        facts = await self._inspect(identity)
        if facts.kind == "image":
            return None
        log.warning(
            "%s: an earlier run read only the first of its %d pages; reading them all",
            shown(self.listed.source),
            facts.page_count,
        )
        return facts

    async def _identify(self) -> str:
        """A local file's sha256 (within the size limit), or an object's key hash."""
        if self.listed.problem:
            raise Refused(self.listed.problem)
        if self.listed.path is not None:
            return await asyncio.to_thread(local_identity, self.listed, self.limits)
        key = self.listed.key
        assert key is not None
        if self.listed.etag is None:  # named by the user, not listed: its size and version
            try:
                head = await self.bucket.head(key)
            except ObjectMissing:
                raise Refused(f"no object {key!r} in bucket {self.bucket.name!r}") from None
            size, etag = int(head.get("ContentLength") or 0), str(head.get("ETag") or "")
            self.listed = replace(self.listed, size=size, etag=etag)
        return key_identity(key)

    async def _inspect(self, identity: str) -> Facts:
        listed = self.listed
        if listed.path is not None:
            named = listed.kind or "pdf"  # local_identity refused any other
            # counted and sent from one copy, the content `identity` names (Refused if the file
            # changed since it was read)
            self._drop_snapshot()
            self._snapshot = await asyncio.to_thread(snapshot, listed, self.limits, identity)
            found = await asyncio.to_thread(examine, self._snapshot, named, self.limits)
            return Facts(found.kind, found.pages, sha256=identity, suffix=found.suffix)
        return await inspect_object(self.bucket, listed, self.limits)

    def _new(self, prefix: str, facts: Facts) -> DocumentManifest:
        listed, opts = self.listed, self.options
        if listed.path is not None:  # named as what it is (a TIFF of several pages is no PDF)
            source_key = self.key(f"{prefix}/source{facts.suffix or '.pdf'}")
        else:
            assert listed.key is not None
            source_key = listed.key
        return DocumentManifest(
            endpoint=opts.endpoint_id,
            source_key=source_key,
            source_sha256=facts.sha256,
            source_etag=facts.etag,
            source=listed.source,
            kind=facts.kind,
            prefix=prefix,
            manifest_key=self.key(f"{prefix}/document.json"),
            page_count=facts.page_count,
            pages_per_job=opts.pages_per_job,
            job_options=opts.job_options or {},
            parts=split_pages(facts.page_count, opts.pages_per_job),
        )

    async def _previous(self, prefix: str, identity: str) -> DocumentManifest | None:
        """What an earlier run recorded for this document, to go on from; None to start anew
        (nothing recorded, another version of the object, other job options)."""
        try:
            text = await self.store.read_text(self.key(f"{prefix}/document.json"))
        except ObjectMissing:
            return None
        manifest = DocumentManifest.model_validate_json(text)
        if self.listed.path is not None and manifest.source_sha256 not in (None, identity):
            raise ValueError(
                f"{prefix}/document.json describes another file "
                f"(sha256 {(manifest.source_sha256 or '')[:12]}…); use another --prefix"
            )
        if self.listed.key is not None and manifest.source_key != self.listed.key:
            raise ValueError(f"{prefix}/document.json describes another object")
        if manifest.job_options != (self.options.job_options or {}):
            return None  # read with other options: every page again
        if self.listed.key is not None and self.listed.etag not in (None, manifest.source_etag):
            return None  # the object changed since
        for part in manifest.parts:
            if not part.settled and not manifest.missing(part):
                part.status = "ok"  # every page stored; the run stopped before its job's end
            if (self.options.retry_failed and part.status != "ok") or client_made(part.error):
                part.final = False
            if not part.settled:
                part.status = "pending"
        return manifest

    # --- one job ----------------------------------------------------------------------------

    def _job_input(self, part: Part) -> dict[str, Any]:
        assert self.manifest is not None
        m = self.manifest
        source = (
            {"images": [{"key": m.source_key}]}
            if m.kind == "image"
            else {
                "pdf": {"key": m.source_key},
                "pages": m.selection(part),
            }
        )
        return {
            **(self.options.job_options or {}),
            **source,
            "output_prefix": part.output_prefix(m.prefix),
        }

    async def _part(self, part: Part) -> None:
        assert self.manifest is not None
        for attempt in range(self.options.retries + 1):
            async with self.shared.jobs:  # a slot: the job is queued or running at RunPod
                job_id, state, output, error = await self._submit(part)
            result, ended_with = _ending(output)
            if result is not None:
                part.manifest_key = result.manifest_key
                self.manifest.outcome(part, result.pages)
                for page in result.pages:
                    self._tell(page)
                part.status = "ok" if result.status == "ok" else "partial"
                part.error, part.final = result.error, True
            else:
                part.error = error or ended_with or f"the job ended {state}"
                # every page stored (only its manifest was not): nothing is left to send
                part.status = "failed" if self.manifest.missing(part) else "ok"
                part.final = part.error.startswith(OWN_FAULT) and not client_made(part.error)
            if not part.settled or not self.manifest.finished:
                self._checkpoint()  # (the document's last part: saved once, with its text)
            if part.settled or client_made(part.error):
                return
            if attempt < self.options.retries:
                log.warning(
                    "job %s (pages %s): %s; sending it again",
                    job_id,
                    part.pages,
                    part.error,
                )

    async def _submit(self, part: Part) -> tuple[str, str, Any, str | None]:
        """Queue one job of the part and follow it to its end."""
        assert self.manifest is not None
        job_input = self._job_input(part)
        part.status, part.error = "running", None
        job_id = await self.shared.api.run(job_input)  # refused: the endpoint or the key, raised
        self.shared.sent += 1
        self.sent += 1
        part.job_ids.append(job_id)
        self.shared.active[job_id] = (self, part)
        self._checkpoint()
        log.debug("job %s submitted: %s pages %s", job_id, self.manifest.prefix, part.pages)
        try:
            state, output, error = await self._follow(job_id)
        except EndpointError as exc:
            if exc.unreachable or exc.status == 401:  # the endpoint, not this job: it stops
                raise
            # RunPod lost the job (404) or would not say how it went: this job's failure,
            # sent again like a job that failed; the document's other jobs go on
            await self._forget(job_id)
            state, output, error = "LOST", None, f"job {job_id}: {exc}"
        self.shared.active.pop(job_id, None)  # kept on cancellation: cancel_active() needs it
        return job_id, state, output, error

    async def _forget(self, job_id: str) -> None:
        """Cancel a job this client can no longer follow, should it still run (once, quietly):
        it would read the pages a job sent again reads."""
        try:
            await self.shared.api.cancel(job_id, attempts=1)
        except EndpointError as exc:
            log.debug("cancelling job %s: %s", job_id, exc)

    async def _follow(self, job_id: str) -> tuple[str, Any, str | None]:
        """Read the job's stream until it ends; returns (state, output, error)."""
        assert self.manifest is not None
        seen: set[int] = set()
        api = self.shared.api
        while True:
            body = await api.stream(job_id)
            for raw in body.get("stream") or []:
                item = read_item(raw.get("output") if isinstance(raw, dict) else None)
                if isinstance(item, PageItem) and item.page.page not in seen:
                    seen.add(item.page.page)
                    self.manifest.record(item.page)
                    self._tell(item.page)
            state = body.get("status", "")
            if state in FINAL_STATES:
                break
            queued = state == "IN_QUEUE"
            await sleep_poll(self.options.poll_s, len(self.shared.active), queued=queued)
        final = await api.status(job_id)
        return final.get("status", state), final.get("output"), final.get("error")

    def _tell(self, page: PageReport) -> None:
        """`on_page`, once for each page stored (as it streams, or from a result or an earlier
        run), and for each failure as it comes."""
        if page.stored and page.page in self._stored:
            return
        if page.stored:
            self._stored.add(page.page)
            self.stored_now += self.sent > 0  # (an earlier run's are told before any job)
        self.on_page(page)

    # --- the bucket -------------------------------------------------------------------------

    async def _upload(self, manifest: DocumentManifest, sha: str) -> None:
        """A local document, uploaded (its copy, whose content `sha` is) unless the bucket has
        it already."""
        if self.listed.path is None:
            return
        path = self._snapshot
        assert path is not None, "a local document is inspected (and copied) before its upload"
        key = manifest.source_key
        try:
            head = await self.bucket.head(key)
            if (head.get("Metadata") or {}).get("sha256") == sha:
                log.debug("source already in the bucket: %s", self.store.uri(key))
                return
        except ObjectMissing:
            pass
        log.debug("uploading %s to %s", shown(self.listed.name), self.store.uri(key))
        kind = CONTENT_TYPES.get(Path(key).suffix, "application/pdf")
        await self.bucket.upload(path, key, kind, {"sha256": sha})

    @property
    def out(self) -> Path | None:
        """Where the document's files also go on this machine, if anywhere."""
        out = self.options.out
        if out is None or not self.options.out_folders or self.manifest is None:
            return out
        return out / self.manifest.prefix.rsplit("/", 1)[-1]

    async def save(self) -> None:
        """document.json, now (in the bucket, and in `out`)."""
        assert self.manifest is not None
        async with self._save_lock:
            t0 = time.monotonic()
            doc = (self.manifest.model_dump_json(indent=2) + "\n").encode()
            await self.store.put(self.manifest.manifest_key, doc, JSON_TYPE)
            if self.out is not None:
                self.out.mkdir(parents=True, exist_ok=True)
                (self.out / "document.json").write_bytes(doc)
            now = time.monotonic()
            self._next_save = now + SAVE_SPACING * (now - t0)

    def _checkpoint(self) -> None:
        """document.json written soon, as a job is sent or a part ends: at once after a short
        write, else when SAVE_SPACING says, with all that happened until then."""
        if self._deferred is None:
            self._deferred = asyncio.ensure_future(self._save_later())

    async def _save_later(self) -> None:
        async with self._save_lock:  # after a write under way, which sets when the next may be
            pass
        await asyncio.sleep(max(self._next_save - time.monotonic(), 0))
        self._deferred = None  # what changes from here on is in the next write
        try:
            await asyncio.shield(self.save())  # (cancelled, it ends its write: never two at once)
        except StorageError as exc:  # said by the document's last write, if it fails too
            log.warning("document.json not written (%s); written at the document's end", exc)

    async def _settle(self) -> None:
        """No write left waiting: the one that follows writes what it would have."""
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            deferred.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await deferred

    async def _flush(self) -> None:
        """A write left waiting when the run ended early (an error, an interruption) is made
        now, so what the jobs did is kept for the next run."""
        if self._deferred is None or self.manifest is None:
            return
        await self._settle()
        try:
            await asyncio.shield(self.save())
        except StorageError as exc:
            log.warning("document.json not written (%s); the next run sends its jobs again", exc)

    def _drop_snapshot(self) -> None:
        if self._snapshot is not None:
            self._snapshot.unlink(missing_ok=True)
            self._snapshot = None

    async def _copy_out(self, manifest: DocumentManifest) -> None:
        """`--out` for a document an earlier run finished: its document.json, .md and .txt,
        from the bucket (unless `--out` has them as they are), so that a run into a new or
        emptied folder brings every document's results back."""
        out = self.out
        if out is None:
            return
        doc = (manifest.model_dump_json(indent=2) + "\n").encode()
        texts = {"md": manifest.markdown_key, "txt": manifest.text_key}
        local = out / "document.json"
        wanted = [out / f"document.{suffix}" for suffix, key in texts.items() if key]
        if local.is_file() and local.read_bytes() == doc and all(p.is_file() for p in wanted):
            return
        out.mkdir(parents=True, exist_ok=True)
        try:
            for suffix, key in texts.items():
                if key:
                    text = await self.store.read_text(key)
                    (out / f"document.{suffix}").write_text(text, encoding="utf-8")
        except ObjectMissing:  # the whole text is gone from the bucket: written again
            log.warning(
                "%s: its whole text is missing in the bucket; written again", manifest.prefix
            )
            manifest.text_key, manifest.markdown_key = await self._write_text(manifest)
            doc = (manifest.model_dump_json(indent=2) + "\n").encode()
            await put_json(self.store, manifest.manifest_key, manifest.model_dump(mode="json"))
        local.write_bytes(doc)  # last: a copy cut short is copied again by the next run

    async def _write_text(self, manifest: DocumentManifest) -> tuple[str, str]:
        """document.txt and document.md from the stored page texts; their keys."""
        folders = {n: p.output_prefix("").lstrip("/") for p in manifest.parts for n in p.range()}
        texts = await document.read_texts(self.store, manifest.pages, lambda n: folders.get(n, ""))
        written = {"txt": document.plain(texts), "md": document.markdown(texts)}
        kinds = {"txt": PLAIN_TYPE, "md": TEXT_TYPE}
        for suffix, body in written.items():
            await self.store.put(
                self.key(f"{manifest.prefix}/document.{suffix}"), body.encode(), kinds[suffix]
            )
            if self.out is not None:
                self.out.mkdir(parents=True, exist_ok=True)
                (self.out / f"document.{suffix}").write_text(body, encoding="utf-8")
        return self.key(f"{manifest.prefix}/document.txt"), self.key(
            f"{manifest.prefix}/document.md"
        )


def client_made(error: str | None) -> bool:
    """The worker refused a field of the job's input that this client built."""
    return error is not None and error.startswith(CLIENT_MADE)


def _ending(output: Any) -> tuple[JobResult | None, str | None]:
    """(the job result, or the error the job ended with) from a streamed job's aggregated output
    (its last item), or from a worker that does not stream (the result itself)."""
    if isinstance(output, dict) and "pages" in output:
        return JobResult.model_validate(output), None
    last = read_item(output[-1] if isinstance(output, list) and output else output)
    if isinstance(last, ResultItem):
        return last.result, None
    return None, last.error if last is not None and not isinstance(last, PageItem) else None


def submit(
    path: Path, endpoint_id: str, *, settings: Settings | None = None, **options: Any
) -> DocumentManifest:
    """From Python: `submit(Path("case.pdf"), "abc123", pages_per_job=50)`; the settings come
    from the environment unless given (bucket and `RUNPOD_API_KEY`)."""
    import os

    settings = settings or Settings.from_env(os.environ)
    run = Submission(
        path,
        settings.bucket,
        settings.client,
        Options(endpoint_id, **options),
        limits=Limits.of(settings),
    )
    return asyncio.run(run.run())
