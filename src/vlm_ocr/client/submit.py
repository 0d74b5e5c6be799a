"""Spread one large PDF over an endpoint's workers, and put it back together: `vlm-ocr submit`.

The PDF is uploaded once to the bucket the endpoint reads (the jobs name it by key; it never
travels inline). Its pages are split into jobs of `pages_per_job`, RunPod's queue spreads them
over workers, each job's pages stream back as they are stored, and when every job is done the
client writes a document manifest and the whole text in page order next to the jobs' own
manifests:

    {prefix}/source.pdf                 the document, uploaded once (skipped when already there)
    {prefix}/pages-0001-0050/...        one job's pages and manifest (the worker writes them)
    {prefix}/document.json              every page's status and key, every job's outcome
    {prefix}/document.md                the pages' texts in order, page breaks marked, to read
    {prefix}/document.txt               the pages' texts in order, each ended by a form feed

Running it again is safe and cheap: a job's output prefix depends only on its page range, so a
resubmitted job finds its stored pages and the worker reuses them (same pixels, same engine
fingerprint). A job that failed, timed out or left pages failed is resubmitted up to `retries`
times; `resume` skips the jobs an earlier run's document manifest records as complete.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from .. import document
from ..contract import JobResult, PageItem, PageReport, ResultItem, Totals, read_item
from ..settings import BucketSettings, ClientSettings, Settings
from ..storage import PLAIN_TYPE, TEXT_TYPE, Bucket, ObjectMissing, S3Store, put_json
from .endpoint import FINAL_STATES, Endpoint, EndpointError

log = logging.getLogger(__name__)

# 50 pages a job: a worker takes MAX_CONCURRENT_JOBS (8) jobs at once, so 8 jobs of 50 pages keep
# about twice the 192 sequences a 32B engine batches on an H200 in flight (it stays full while
# jobs start and end), and a 2,000-page document still makes 40 jobs to spread over workers.
# Each job reads the source from the bucket once, which is what smaller jobs would multiply.
DEFAULT_PAGES_PER_JOB = 50
POLL_S = 2.0


class Part(BaseModel):
    """One job's page range and what became of it."""

    first: int
    last: int
    status: Literal["pending", "running", "ok", "partial", "failed", "cancelled"] = "pending"
    job_ids: list[str] = Field(default_factory=list, description="Every submission, in order.")
    manifest_key: str | None = None
    error: str | None = None

    @property
    def pages(self) -> str:
        return f"{self.first}-{self.last}"

    def output_prefix(self, prefix: str) -> str:
        return f"{prefix}/pages-{self.first:04d}-{self.last:04d}"

    def range(self) -> range:
        return range(self.first, self.last + 1)


class DocumentTotals(Totals):
    """A document's page counts (pages never reported count as failed), and its jobs."""

    jobs: int = 0
    submissions: int = 0


class DocumentManifest(BaseModel):
    """`document.json`: the document's pages and jobs, rewritten as jobs finish."""

    endpoint: str
    source_key: str
    source_sha256: str
    prefix: str = Field(description="The document's folder, under the bucket's BUCKET_PREFIX.")
    manifest_key: str
    page_count: int
    pages_per_job: int
    parts: list[Part]
    pages: list[PageReport] = Field(
        default_factory=list, description="Every page's report, as its job returned it."
    )
    complete: bool = False
    text_key: str | None = None
    markdown_key: str | None = Field(None, description="document.md, to read.")
    totals: DocumentTotals = Field(default_factory=DocumentTotals)
    wall_s: float | None = None

    def outcome(self, part: Part, pages: list[PageReport]) -> None:
        """Record a job's page reports (without their texts), replacing what earlier attempts
        recorded."""
        by_page = {p.page: p for p in self.pages if not part.first <= p.page <= part.last}
        for page in pages:
            by_page[page.page] = page.model_copy(update={"text": None, "url": None})
        self.pages = [by_page[n] for n in sorted(by_page)]

    def summarise(self) -> None:
        stored = sum(p.stored for p in self.pages)
        pages = Totals.of(self.pages)
        self.totals = DocumentTotals(
            **pages.model_dump() | {"pages": self.page_count, "failed": self.page_count - stored},
            jobs=len(self.parts),
            submissions=sum(len(p.job_ids) for p in self.parts),
        )
        self.complete = stored == self.page_count


def split_pages(page_count: int, pages_per_job: int) -> list[Part]:
    if pages_per_job < 1:
        raise ValueError("--pages-per-job must be at least 1")
    return [
        Part(first=first, last=min(first + pages_per_job - 1, page_count))
        for first in range(1, page_count + 1, pages_per_job)
    ]


def pdf_page_count(path: Path) -> int:
    import pymupdf

    with pymupdf.open(path) as doc:
        if not doc.is_pdf:
            raise ValueError(f"{path.name} is not a PDF")
        return doc.page_count


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class Options:
    endpoint_id: str
    pages_per_job: int = DEFAULT_PAGES_PER_JOB
    prefix: str | None = None  # default: documents/<file stem>-<first 12 hex of its sha256>
    retries: int = 2
    resume: bool = False
    out: Path | None = None
    poll_s: float = POLL_S
    job_options: dict[str, Any] | None = None  # more job input fields, e.g. {"prompt": "legal"}


PageEvent = Callable[[PageReport], None]


class Submission:
    """One document's run over an endpoint. `await run()`; `cancel()` from a signal handler."""

    def __init__(
        self,
        path: Path,
        bucket: BucketSettings,
        client: ClientSettings,
        options: Options,
        *,
        on_page: PageEvent | None = None,
    ) -> None:
        if not bucket.configured:
            raise ValueError(
                "vlm-ocr submit needs the bucket the endpoint reads and writes: set BUCKET_NAME, "
                "BUCKET_ENDPOINT_URL, BUCKET_ACCESS_KEY_ID and BUCKET_SECRET_ACCESS_KEY as the "
                "endpoint has them"
            )
        self.path = path
        self.client = client
        self.options = options
        self.on_page = on_page or (lambda page: None)
        self.store = S3Store.from_settings(bucket, Bucket.from_settings(bucket))
        self.active: dict[str, Part] = {}  # job id -> part, while RunPod runs it
        self.manifest: DocumentManifest | None = None
        self._save_lock = asyncio.Lock()

    @property
    def bucket(self) -> Bucket:
        return self.store.bucket

    def key(self, relative: str) -> str:
        return self.store.key_prefix + relative

    async def run(self) -> DocumentManifest:
        t0 = time.perf_counter()
        opts = self.options
        page_count = pdf_page_count(self.path)
        sha = file_sha256(self.path)
        prefix = (opts.prefix or f"documents/{_slug(self.path.stem)}-{sha[:12]}").strip("/")
        manifest = await self._previous(prefix) if opts.resume else None
        if manifest is not None and manifest.source_sha256 != sha:
            raise ValueError(
                f"--resume: {prefix}/document.json describes another file "
                f"(sha256 {manifest.source_sha256[:12]}…); use another --prefix"
            )
        if manifest is None:
            manifest = DocumentManifest(
                endpoint=opts.endpoint_id,
                source_key=self.key(f"{prefix}/source.pdf"),
                source_sha256=sha,
                prefix=prefix,
                manifest_key=self.key(f"{prefix}/document.json"),
                page_count=page_count,
                pages_per_job=opts.pages_per_job,
                parts=split_pages(page_count, opts.pages_per_job),
            )
        self.manifest = manifest
        await self._upload(manifest.source_key, sha)
        todo = [p for p in manifest.parts if p.status != "ok"]
        for part in manifest.parts:
            if part.status == "ok":
                for page in manifest.pages:
                    if part.first <= page.page <= part.last:
                        self.on_page(page)
        async with self._endpoint() as api:
            await asyncio.gather(*(self._part(api, part) for part in todo))
        manifest.summarise()
        if manifest.complete:
            manifest.text_key, manifest.markdown_key = await self._write_text(manifest)
        manifest.wall_s = round(time.perf_counter() - t0, 2)
        await self._save()
        return manifest

    async def cancel_active(self) -> list[str]:
        """Cancel every job this run has at RunPod now; returns their ids."""
        ids = list(self.active)
        async with self._endpoint(attempts=2) as api:
            for job_id in ids:
                try:
                    await api.cancel(job_id)
                except EndpointError as exc:
                    log.warning("could not cancel job %s: %s", job_id, exc)
                self.active[job_id].status = "cancelled"
        if self.manifest is not None:
            self.manifest.summarise()
            await self._save()
        return ids

    def _endpoint(self, **kw: Any) -> Endpoint:
        return Endpoint(
            self.options.endpoint_id,
            self.client.runpod_api_key,
            api_base=self.client.runpod_api_base,
            **kw,
        )

    # --- one job ----------------------------------------------------------------------------

    async def _part(self, api: Endpoint, part: Part) -> None:
        assert self.manifest is not None
        job_input = {
            **(self.options.job_options or {}),
            "pdf": {"key": self.manifest.source_key},
            "pages": part.pages,
            "output_prefix": part.output_prefix(self.manifest.prefix),
        }
        for _attempt in range(self.options.retries + 1):
            part.status, part.error = "running", None
            job_id = await api.run(job_input)
            part.job_ids.append(job_id)
            self.active[job_id] = part
            await self._save()
            log.info("job %s submitted: pages %s", job_id, part.pages)
            state, output, error = await self._follow(api, job_id)
            self.active.pop(job_id, None)  # kept on cancellation: cancel_active() needs it
            result, ended_with = _ending(output)
            if result is not None:
                part.manifest_key = result.manifest_key
                self.manifest.outcome(part, result.pages)
                part.status = "ok" if result.status == "ok" else "partial"
                part.error = result.error
            else:
                part.status = "failed"
                part.error = error or ended_with or f"the job ended {state}"
            await self._save()
            if part.status == "ok":
                return
            log.warning("job %s (pages %s): %s; resubmitting", job_id, part.pages, part.error)

    async def _follow(self, api: Endpoint, job_id: str) -> tuple[str, Any, str | None]:
        """Read the job's stream until it ends; returns (state, output, error)."""
        seen: set[int] = set()
        while True:
            body = await api.stream(job_id)
            for raw in body.get("stream") or []:
                item = read_item(raw.get("output") if isinstance(raw, dict) else None)
                if isinstance(item, PageItem) and item.page.page not in seen:
                    seen.add(item.page.page)
                    self.on_page(item.page)
            state = body.get("status", "")
            if state in FINAL_STATES:
                break
            await asyncio.sleep(self.options.poll_s)
        final = await api.status(job_id)
        return final.get("status", state), final.get("output"), final.get("error")

    # --- the bucket -------------------------------------------------------------------------

    async def _upload(self, key: str, sha: str) -> None:
        try:
            head = await self.bucket.call("HEAD", key, self.bucket.client.head_object)
            if (head.get("Metadata") or {}).get("sha256") == sha:
                log.info("source already in the bucket: %s", self.store.uri(key))
                return
        except ObjectMissing:
            pass
        log.info("uploading %s to %s", self.path.name, self.store.uri(key))
        await self.bucket.run(
            lambda: self.bucket.client.upload_file(
                str(self.path),
                self.bucket.name,
                key,
                ExtraArgs={"ContentType": "application/pdf", "Metadata": {"sha256": sha}},
            )
        )

    async def _previous(self, prefix: str) -> DocumentManifest | None:
        try:
            text = await self.store.read_text(self.key(f"{prefix}/document.json"))
        except ObjectMissing:
            return None
        manifest = DocumentManifest.model_validate_json(text)
        for part in manifest.parts:
            if part.status != "ok":
                part.status = "pending"
        return manifest

    async def _save(self) -> None:
        assert self.manifest is not None
        async with self._save_lock:
            doc = self.manifest.model_dump(mode="json")
            await put_json(self.store, self.manifest.manifest_key, doc)
            if self.options.out is not None:
                self.options.out.mkdir(parents=True, exist_ok=True)
                (self.options.out / "document.json").write_bytes(
                    (self.manifest.model_dump_json(indent=2) + "\n").encode()
                )

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
            if self.options.out is not None:
                self.options.out.mkdir(parents=True, exist_ok=True)
                (self.options.out / f"document.{suffix}").write_text(body, encoding="utf-8")
        return self.key(f"{manifest.prefix}/document.txt"), self.key(
            f"{manifest.prefix}/document.md"
        )


def _ending(output: Any) -> tuple[JobResult | None, str | None]:
    """(the job result, or the error the job ended with) from a streamed job's aggregated output
    (its last item), or from a worker that does not stream (the result itself)."""
    if isinstance(output, dict) and "pages" in output:
        return JobResult.model_validate(output), None
    last = read_item(output[-1] if isinstance(output, list) and output else output)
    if isinstance(last, ResultItem):
        return last.result, None
    return None, last.error if last is not None and not isinstance(last, PageItem) else None


def _slug(stem: str) -> str:
    kept = "".join(c if c.isalnum() or c in "-_" else "-" for c in stem)
    return kept.strip("-")[:60] or "document"


def submit(
    path: Path, endpoint_id: str, *, settings: Settings | None = None, **options: Any
) -> DocumentManifest:
    """From Python: `submit(Path("case.pdf"), "abc123", pages_per_job=50)`; the settings come
    from the environment unless given (bucket and `RUNPOD_API_KEY`)."""
    import os

    settings = settings or Settings.from_env(os.environ)
    run = Submission(path, settings.bucket, settings.client, Options(endpoint_id, **options))
    return asyncio.run(run.run())
