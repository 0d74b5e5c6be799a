"""A job's status, decided in one place from its page reports and what stopped it."""

from __future__ import annotations

from dataclasses import dataclass

from ..contract import PageReport, Status, format_ranges
from ..errors import JobStop

#: failed pages whose reasons the job's one-line error quotes; `errors` lists every one
REASONS_SHOWN = 3


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
    """`problems`: job-level findings a user must act on (pages selected beyond the end, a
    whole-document file not stored, no searchable PDF made); `stop`: what
    stopped its pages; `engine_failure`: the engine is gone (even if no page of this job met
    it); `manifest_error`: the manifest could not be written. The error is set whenever the
    status is not `ok`: pages that failed on their own are counted, with their first reasons."""
    ok = [p.page for p in pages if p.stored]
    failed = [p for p in pages if not p.stored]
    status: Status = "failed" if not ok else ("ok" if len(ok) == len(pages) else "partial")
    store_error = stop.message if stop and stop.kind == "store" else None
    engine_error = stop.message if stop and stop.kind == "engine" else engine_failure
    stopped = stop.message if stop and stop.kind == "stopped" else None
    messages = list(problems)
    if stopped:
        messages.append(
            f"{stopped}: {len(ok)} of {len(pages)} pages stored, the rest not processed; "
            "submitting it again reads only the pages missing"
        )
    if store_error or manifest_error:
        # A page is ok or blank only once its text is stored: the two lists follow from status.
        messages.append(
            f"the store failed: {store_error or manifest_error}. "
            f"Stored pages: {format_ranges(ok) or 'none'}; "
            f"not stored: {format_ranges([p.page for p in failed]) or 'none'}"
            + ("" if manifest_error is None else "; the manifest was not written")
        )
    if engine_error:
        messages.append(f"the engine failed and this worker will be replaced: {engine_error}")
    # A stopped job's pages failed for the stop, which its message says; else they failed for
    # reasons of their own, and the job's error says so after any job-level problem.
    if failed and not (store_error or manifest_error or engine_error or stopped):
        messages.append(pages_failed(failed, len(pages)))
    if messages and status == "ok":
        status = "partial"
    return Verdict(
        status,
        " | ".join(messages) or None,
        refresh_worker=bool(engine_error),
        retry=bool(engine_error or store_error or manifest_error or stopped),
    )


def pages_failed(failed: list[PageReport], total: int) -> str:
    """'2 of 5 pages failed: page 3: …; pages 4-5: …', pages that failed the same way together,
    the first few reasons quoted and the pages of the rest counted; 'no page could be
    processed: …' when none was stored."""
    groups: dict[str, list[int]] = {}
    for page in failed:
        reason = " ".join((page.error or "failed").split())
        groups.setdefault(reason.removeprefix(f"page {page.page} "), []).append(page.page)
    shown = list(groups.items())[:REASONS_SHOWN]
    reasons = [
        f"page{'s' if len(numbers) > 1 else ''} {format_ranges(numbers)}: {reason}"
        for reason, numbers in shown
    ]
    if rest := len(failed) - sum(len(numbers) for _, numbers in shown):
        reasons.append(f"{rest} more in `errors`")
    head = (
        "no page could be processed"
        if len(failed) == total
        else f"{len(failed)} of {total} pages failed"
    )
    return f"{head}: " + "; ".join(reasons)
