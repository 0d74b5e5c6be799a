"""`document.json`: one submitted document's pages and jobs, as the client records them in the
bucket. It is what a run that was stopped reads to go on: which jobs are done, which pages are
stored, and whether anything is left to send."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from ..contract import PageReport, Totals, format_ranges
from ..file_names import stored_name


class Part(BaseModel):
    """One job's page range and what became of it."""

    first: int
    last: int
    status: Literal["pending", "running", "ok", "partial", "failed", "cancelled"] = "pending"
    job_ids: list[str] = Field(default_factory=list, description="Every submission, in order.")
    manifest_key: str | None = None
    error: str | None = None
    final: bool = Field(
        False,
        description="Its outcome is the pages' own (a job that completed, or a document the "
        "worker refused): its failed pages are reported, not sent again.",
    )

    @property
    def pages(self) -> str:
        return f"{self.first}-{self.last}"

    def output_prefix(self, prefix: str) -> str:
        return f"{prefix}/pages-{self.first:04d}-{self.last:04d}"

    def range(self) -> range:
        return range(self.first, self.last + 1)

    @property
    def settled(self) -> bool:
        """Nothing of it is left to send (unless failed pages are asked for again)."""
        return self.status == "ok" or self.final


class DocumentTotals(Totals):
    """A document's page counts, and its jobs. `failed`: pages a job reported failed;
    `not_read`: pages no job reported (a run stopped before them, a job lost or refused)."""

    not_read: int = 0
    jobs: int = 0
    submissions: int = 0


class DocumentManifest(BaseModel):
    """`document.json`: the document's pages and jobs, rewritten as jobs finish."""

    endpoint: str
    source_key: str = Field(description="The object the jobs read: the upload, or the key given.")
    source_sha256: str | None = None
    source_etag: str | None = Field(
        None, description="The object's ETag, for a document that was in the bucket already."
    )
    source: str | None = Field(None, description="The file or object the user named.")
    kind: Literal["pdf", "image"] = "pdf"
    prefix: str = Field(description="The document's folder, under the bucket's BUCKET_PREFIX.")
    manifest_key: str
    page_count: int
    pages_per_job: int
    job_options: dict[str, Any] = Field(
        default_factory=dict, description="The job input fields every job had (prompt, ...)."
    )
    parts: list[Part]
    pages: list[PageReport] = Field(
        default_factory=list, description="Every page's report, as its job returned it."
    )
    complete: bool = False
    text_key: str | None = None
    markdown_key: str | None = Field(None, description="document.md, to read.")
    totals: DocumentTotals = Field(default_factory=DocumentTotals)
    wall_s: float | None = None

    @field_validator("source")
    @classmethod
    def _storable(cls, source: str | None) -> str | None:
        return None if source is None else stored_name(source)

    @model_validator(mode="after")
    def _in_order(self) -> DocumentManifest:
        """The pages in page order, as `record` keeps them (once, as it is read)."""
        if any(a.page >= b.page for a, b in zip(self.pages, self.pages[1:], strict=False)):
            by_page = {p.page: p for p in self.pages}
            self.pages = [by_page[n] for n in sorted(by_page)]
        return self

    def record(self, page: PageReport) -> None:
        """One page's report as it streamed, or as its job's result gave it (without its text).
        The pages stay in page order: found by bisection, so a document's pages cost no more
        than their count times its log."""
        kept = page.model_copy(update={"text": None, "url": None})
        pages = self.pages
        if not pages or pages[-1].page < page.page:  # the common case: the next page
            pages.append(kept)
            return
        i = bisect_left(pages, page.page, key=lambda p: p.page)
        if i < len(pages) and pages[i].page == page.page:
            pages[i] = kept
        else:
            pages.insert(i, kept)

    def outcome(self, part: Part, pages: list[PageReport]) -> None:
        """Record a job's page reports, replacing what earlier attempts recorded for them."""
        for page in pages:
            if part.first <= page.page <= part.last:
                self.record(page)

    def missing(self, part: Part) -> list[int]:
        """The part's pages whose text is not stored yet."""
        pages, stored = self.pages, set()
        i = bisect_left(pages, part.first, key=lambda p: p.page)  # its pages alone are read
        while i < len(pages) and pages[i].page <= part.last:
            if pages[i].stored:
                stored.add(pages[i].page)
            i += 1
        return [n for n in part.range() if n not in stored]

    def selection(self, part: Part) -> str:
        """The pages a job of this part asks for: only those not stored yet."""
        missing = self.missing(part)
        return part.pages if len(missing) == len(part.range()) else format_ranges(missing)

    @property
    def finished(self) -> bool:
        """Every part settled: nothing is left to send."""
        return all(part.settled for part in self.parts)

    def summarise(self) -> None:
        stored = sum(p.stored for p in self.pages)
        pages = Totals.of(self.pages)
        self.totals = DocumentTotals(
            **pages.model_dump() | {"pages": self.page_count},
            not_read=self.page_count - len(self.pages),
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
