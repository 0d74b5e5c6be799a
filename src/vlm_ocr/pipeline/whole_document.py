"""What a job makes of its pages together, once every page is done:

    running headers and footers (pages without labels) ─► document.md + document.txt (a whole
    PDF) ─► searchable.pdf (when asked)

Each reads the pages as stored, and reused pages take part like new ones (in the running heads by
their edges as first read, kept in running-lines.json). None of them can lose a page: what fails
here is reported as a job-level problem, and the pages stay stored.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from .. import document
from ..contract import JobInput, PageReport, format_ranges
from ..errors import PageError, StorageError
from ..storage import PLAIN_TYPE, TEXT_TYPE, JobKeys, Store
from . import running_heads, searchable
from .cpu_pool import CpuPool
from .sources import Document
from .state import JobContext

log = logging.getLogger(__name__)


@dataclass
class Finished:
    pages: list[PageReport]
    document_key: str | None = None
    searchable_pdf_key: str | None = None
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


class WholeDocument:
    """The pass over a job's pages together: it reads and writes the store, and makes the
    searchable PDF's pages in the render processes, each within the render time limit."""

    def __init__(self, store: Store, pool: CpuPool, *, timeout_s: float) -> None:
        self.store = store
        self.pool = pool
        self.timeout_s = timeout_s

    async def finish(
        self,
        job: JobInput,
        keys: JobKeys,
        doc: Document,
        context: JobContext,
        pages: list[PageReport],
    ) -> Finished:
        out = Finished(pages)
        if context.stop is not None or context.json:
            return out  # a job the store or the engine stopped is submitted again to finish
        t0 = time.perf_counter()
        await self._running_heads(out, keys, job, context)
        t1 = time.perf_counter()
        out.timings["running_heads_s"] = round(t1 - t0, 3)
        if doc.whole:
            try:
                out.document_key = await write_document(self.store, keys, out.pages)
            except StorageError as exc:
                out.problems.append(f"document.md: not stored ({exc})")
            out.timings["document_s"] = round(time.perf_counter() - t1, 3)
        elif doc.pdf_path is not None:  # part of a PDF: an earlier job's whole text is not its
            await self._drop_document(out, keys)
        if job.searchable_pdf:
            t2 = time.perf_counter()
            await self._searchable_pdf(out, keys, doc, context)
            out.timings["searchable_pdf_s"] = round(time.perf_counter() - t2, 3)
        else:  # an earlier job's would not be of the pages this job read
            await self._drop(out, keys.searchable_pdf)
        return out

    async def _running_heads(
        self, out: Finished, keys: JobKeys, job: JobInput, context: JobContext
    ) -> None:
        """Running heads found among the job's pages: those it read, and those it reused with
        their edges as an earlier job read them (kept in running-lines.json: their stored text
        has lost what that job dropped)."""
        if not context.edges:
            return  # no page read now: what an earlier job found stands
        reused = frozenset(p.page for p in out.pages if p.reused and p.page not in context.edges)
        earlier = await running_heads.read_edges(self.store, keys.running_lines)
        edges = {n: e for n, e in earlier.items() if n in reused} | context.edges
        out.pages, notes = await running_heads.apply(
            self.store, out.pages, edges, job.headers_footers, reused=reused
        )
        out.notes += notes
        try:  # the pages of earlier jobs kept too: a later job may reuse any of them
            await running_heads.keep_edges(self.store, keys.running_lines, earlier | edges)
        except StorageError as exc:  # the pages are stored: a later job finds fewer heads
            log.warning("running-lines.json not stored: %s", exc)

    async def _drop_document(self, out: Finished, keys: JobKeys) -> None:
        """Remove a document.md and .txt an earlier job of the whole PDF left under the prefix:
        they would contradict the pages this job read."""
        for kind in ("md", "txt"):
            await self._drop(out, keys.document(kind))

    async def _drop(self, out: Finished, key: str) -> None:
        try:
            await self.store.delete(key)
        except StorageError as exc:
            out.notes.append(
                f"an earlier {key.rpartition('/')[2]} under this prefix may remain ({exc})"
            )

    async def _searchable_pdf(
        self, out: Finished, keys: JobKeys, doc: Document, context: JobContext
    ) -> None:
        try:
            made = await searchable.make(
                self.pool,
                self.store,
                keys.searchable_pdf,
                out.pages,
                source_pdf=doc.pdf_path,
                images=context.keep_images,
                work=doc.files.dir,
                timeout_s=self.timeout_s,
            )
        except (PageError, StorageError, ValueError) as exc:  # ValueError: a foreign blocks file
            out.problems.append(f"input.searchable_pdf: no searchable PDF was made ({exc})")
            return
        out.searchable_pdf_key = made.key
        kept = f"; {made.kept} pages kept their own text layer" if made.kept else ""
        many = len(made.missing) > 1
        missing = (
            f"; {'images' if many else 'image'} {format_ranges(list(made.missing))} could not "
            f"be read, and {'their pages say' if many else 'its page says'} so"
            if made.missing
            else ""
        )
        out.notes.append(
            f"searchable PDF: {made.overlaid} pages got a text layer{kept}{missing} "
            f"({made.size / 1e6:.2f} MB)"
        )


async def write_document(store: Store, keys: JobKeys, pages: list[PageReport]) -> str:
    """document.md and document.txt from the stored page texts; the key of document.md."""
    texts = await document.read_texts(store, pages)
    await store.put(keys.document("txt"), document.plain(texts).encode("utf-8"), PLAIN_TYPE)
    key = keys.document("md")
    await store.put(key, document.markdown(texts).encode("utf-8"), TEXT_TYPE)
    return key
