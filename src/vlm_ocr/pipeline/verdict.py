"""A job's status, decided in one place from its page reports and what stopped it."""

from __future__ import annotations

from dataclasses import dataclass

from ..contract import PageReport, Status, format_ranges
from ..errors import JobStop


@dataclass(frozen=True)
class Verdict:
    """A job's status and, when it is not plainly `ok`, the error a user reads first."""

    status: Status
    error: str | None = None
    refresh_worker: bool = False
    #: the job stopped for a reason outside its input (the engine or the store failed):
    #: submitting it again finishes it, reusing the pages already stored
    retry: bool = False


def verdict(
    pages: list[PageReport],
    *,
    problems: list[str],
    stop: JobStop | None,
    engine_failure: str | None = None,
    manifest_error: str | None = None,
) -> Verdict:
    """`problems`: job-level findings about its input (pages beyond the end); `stop`: what
    stopped its pages; `engine_failure`: the engine is gone (even if no page of this job met
    it); `manifest_error`: the manifest could not be written."""
    ok = [p.page for p in pages if p.stored]
    status: Status = "failed" if not ok else ("ok" if len(ok) == len(pages) else "partial")
    store_error = stop.message if stop and stop.kind == "store" else None
    engine_error = stop.message if stop and stop.kind == "engine" else engine_failure
    messages = list(problems)
    if store_error or manifest_error:
        # A page is ok or blank only once its text is stored: the two lists follow from status.
        not_stored = [p.page for p in pages if not p.stored]
        messages.append(
            f"the store failed: {store_error or manifest_error}. "
            f"Stored pages: {format_ranges(ok) or 'none'}; "
            f"not stored: {format_ranges(not_stored) or 'none'}"
            + ("" if manifest_error is None else "; the manifest was not written")
        )
    if engine_error:
        messages.append(f"the engine failed and this worker will be replaced: {engine_error}")
    if status == "failed" and not messages:
        errors = [f"page {p.page}: {p.error}" for p in pages if p.error]
        messages.append("no page could be processed: " + "; ".join(errors[:5]))
    if messages and status == "ok":
        status = "partial"
    return Verdict(
        status,
        " | ".join(messages) or None,
        refresh_worker=bool(engine_error),
        retry=bool(engine_error or store_error or manifest_error),
    )
