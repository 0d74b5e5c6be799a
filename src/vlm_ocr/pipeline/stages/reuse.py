"""Find the page's text in the store when it was read from the same pixels by the same engine
(the job's fingerprint), so a job submitted again reads only what it has not stored yet."""

from __future__ import annotations

from ...errors import JobStop, PageError, StorageError
from ...storage import Store
from ..state import PageWork, StoredText


class Reuse:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def run(self, page: PageWork) -> None:
        page.job.check()
        if page.image is None or page.blank:
            return
        job = page.job
        key = job.keys.page(page.ref.number, "json" if job.json else "md")
        try:
            have = await self.store.record(key)
            if have is None or (have.image_sha256, have.fingerprint) != (
                page.image.sha256,
                job.fingerprint_id,
            ):
                return
            text = await self.store.read_text(key) if job.input.return_text else None
        except StorageError as exc:
            raise PageError("store", str(exc), stop=JobStop("store", str(exc))) from None
        page.stored = StoredText(have.chars, text, have.blocks, have.figures)
        page.key = key
