"""The corpus report: `corpus.jsonl`, one line per document as it finishes (what it was, what
became of it, where its results are, what this run spent on it), and the summary at the end
(documents and pages by outcome, jobs, time, and the endpoint's worker-hours and their cost).

A line's `status`:
    ok          every page stored (its text, or blank)
    partial     pages failed for their own reasons (a broken page); the others are stored
    failed      no page could be stored, for the document's own reasons
    refused     not sent: the document breaks a limit a job has, or is no document at all
    unfinished  jobs did not complete (a worker lost, the endpoint out of reach, an
                interruption): running the same command again goes on with its missing pages

A line with `duplicate_of` is a document listed again, or the same file (name and content) in
another folder: it has the first's folder and outcome, nothing was sent for it, and the summary
counts it apart (not in the documents, the pages or the cost).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from pydantic import BaseModel, Field, field_validator

from ..file_names import shown, stored_name
from .listing import LeftOut
from .manifest import DocumentManifest

log = logging.getLogger(__name__)

Status = Literal["ok", "partial", "failed", "refused", "unfinished"]
STATUSES: tuple[Status, ...] = ("ok", "partial", "failed", "refused", "unfinished")


class DocumentLine(BaseModel):
    """One line of corpus.jsonl."""

    source: str = Field(description="The file or s3:// key as listed.")
    status: Status
    pages: int = 0
    ok: int = 0
    blank: int = 0
    failed: int = Field(0, description="Pages a job reported failed.")
    not_read: int = Field(
        0, description="Pages no job reported: cut off by a stop, or their job lost or refused."
    )
    prefix: str | None = Field(None, description="The document's folder in the bucket.")
    keys: dict[str, str] = Field(
        default_factory=dict, description="document.json, document.md, document.txt, source."
    )
    stored_this_run: int | None = Field(
        None,
        description="Pages this run's jobs stored (the others an earlier run stored); unset: "
        "every page stored, unless finished by an earlier run.",
    )
    jobs: int = Field(0, description="Jobs this run sent for it.")
    earlier: bool = Field(False, description="Finished by an earlier run: nothing was sent.")
    duplicate_of: str | None = Field(
        None,
        description="The document listed before it with the same folder (the same name and "
        "content, or the same key): nothing was sent for this one.",
    )
    seconds: float = Field(0.0, description="This run's time on it, from listing to its end.")
    error: str | None = None

    @field_validator("source", "duplicate_of", "error")
    @classmethod
    def _storable(cls, text: str | None) -> str | None:
        """A name's bytes that are not UTF-8 as `\\xff`: the line is valid JSON whatever the
        file's name."""
        return None if text is None else stored_name(text)

    @classmethod
    def refused(cls, source: str, error: str, seconds: float) -> DocumentLine:
        return cls(source=source, status="refused", error=error, seconds=round(seconds, 2))

    @classmethod
    def of(
        cls,
        manifest: DocumentManifest,
        *,
        earlier: bool,
        jobs: int,
        seconds: float,
        error: str | None = None,
        stored: int | None = None,
        duplicate_of: str | None = None,
    ) -> DocumentLine:
        t = manifest.totals
        keys = {"document_json": manifest.manifest_key, "source": manifest.source_key}
        if manifest.markdown_key:
            keys["document_md"] = manifest.markdown_key
        if manifest.text_key:
            keys["document_txt"] = manifest.text_key
        return cls(
            source=manifest.source or manifest.source_key,
            status=status_of(manifest),
            pages=manifest.page_count,
            ok=t.ok,
            blank=t.blank,
            failed=t.failed,
            not_read=t.not_read,
            prefix=manifest.prefix,
            keys=keys,
            stored_this_run=stored,
            jobs=jobs,
            earlier=earlier,
            duplicate_of=duplicate_of,
            seconds=round(seconds, 2),
            error=error or first_error(manifest),
        )


def status_of(manifest: DocumentManifest) -> Status:
    if manifest.complete:
        return "ok"
    if not manifest.finished:
        return "unfinished"
    return "partial" if any(page.stored for page in manifest.pages) else "failed"


def first_error(manifest: DocumentManifest) -> str | None:
    """What a reader should see first of a document that is not ok: a job's error, else the
    first failed page's."""
    if manifest.complete:
        return None
    for part in manifest.parts:
        if part.error and part.status != "ok":
            return f"pages {part.pages}: {part.error}"[:500]
    for page in manifest.pages:
        if not page.stored and page.error:
            return f"page {page.page}: {page.error}"[:500]
    return None


EXAMPLES = 10  # of the documents not ok, named in the summary


@dataclass
class Summary:
    """The whole run, counted as its lines were written."""

    documents: Counter[str] = field(default_factory=Counter)
    earlier: int = 0
    duplicates: int = 0
    not_ok: int = 0
    pages: Counter[str] = field(default_factory=Counter)
    pages_this_run: int = 0
    jobs: int = 0
    resubmitted: int = 0
    wall_s: float = 0.0
    worker_s: float | None = None
    gpu_price: float | None = None
    backoffs: dict[int, int] = field(default_factory=dict)
    runs_resent: int = 0  # jobs queued again after their POST /run lost its answer once sent
    examples: list[str] = field(default_factory=list)
    #: what the listing passed over (files that are no documents, folders it could not read)
    left_out: LeftOut = field(default_factory=LeftOut)

    def add(self, line: DocumentLine) -> None:
        if line.duplicate_of is not None:  # its document is counted once, as the first
            self.duplicates += 1
            return
        self.documents[line.status] += 1
        self.earlier += line.earlier
        for kind in ("ok", "blank", "failed", "not_read"):
            self.pages[kind] += getattr(line, kind)
        # the pages this run's jobs stored, not those an earlier run stored: the pace and the
        # cost a page are this run's
        stored = line.stored_this_run
        self.pages_this_run += (
            (0 if line.earlier else line.ok + line.blank) if stored is None else stored
        )
        if line.status != "ok":
            self.not_ok += 1
            if len(self.examples) < EXAMPLES:
                said = f"{line.source}: {line.status}: {line.error or ''}".strip()
                self.examples.append(shown(said))

    @property
    def exit_code(self) -> int:
        """0 when every document is ok, 1 when one is not, 2 when there was none to send."""
        if not self.documents:
            return 2
        return 0 if set(self.documents) <= {"ok"} else 1

    @property
    def worker_hours(self) -> float | None:
        return None if self.worker_s is None else self.worker_s / 3600

    def lines(self) -> list[str]:
        total = sum(self.documents.values())
        said = ", ".join(f"{self.documents[s]} {s}" for s in STATUSES if self.documents[s])
        out = [
            f"{total} documents: {said or 'none'}"
            + (f" ({self.earlier} finished by an earlier run)" if self.earlier else ""),
            *self._duplicates_line(),
            *self.left_out.lines(),
            f"pages: {self.pages['ok']} ok, {self.pages['blank']} blank, "
            f"{self.pages['failed']} failed"
            + (f", {self.pages['not_read']} not read" if self.pages["not_read"] else "")
            + f"; {self.jobs} jobs sent this run"
            + (f" ({self.resubmitted} of them again)" if self.resubmitted else ""),
            f"time: {self.wall_s:.1f} s; {self.pages_this_run / max(self.wall_s, 1e-9):.2f} "
            "pages/s stored this run",
        ]
        out.append(self.cost_line())
        if self.backoffs:
            shown = ", ".join(
                f"{code or 'no answer'} ×{n}" for code, n in sorted(self.backoffs.items())
            )
            out.append(f"RunPod asked to slow down or did not answer, backed off: {shown}")
        if self.runs_resent:
            out.append(
                f"{self.runs_resent} POST /run lost the answer once sent and was sent again: "
                "RunPod may have run such a job twice (the same pages to the same keys, its "
                "worker time billed twice)"
            )
        out += [f"  {example}" for example in self.examples]
        if self.not_ok > len(self.examples):
            out.append(
                f"  and {self.not_ok - len(self.examples):,} more not ok: the report's lines "
                "whose status is not ok"
            )
        return out

    def _duplicates_line(self) -> list[str]:
        if not self.duplicates:
            return []
        more = (
            "1 more listed is a duplicate"
            if self.duplicates == 1
            else (f"{self.duplicates:,} more listed are duplicates")
        )
        return [
            f"{more} (the same name and content as a document listed before, or listed twice): "
            "not sent again, not counted (duplicate_of in the report)"
        ]

    def cost_line(self) -> str:
        hours = self.worker_hours
        if hours is None:
            return "GPU time: not known (the endpoint's /health did not answer)"
        said = f"GPU time: {hours:.3f} worker-hours (the endpoint's workers on its /health)"
        if self.gpu_price is None:
            return said + "; --gpu-price USD_PER_HOUR prices it"
        cost = hours * self.gpu_price
        per = (
            f", US${cost / self.pages_this_run * 1000:.3f} per 1,000 pages"
            if self.pages_this_run
            else ""
        )
        return f"{said} ≈ US${cost:.2f} at US${self.gpu_price:g} a worker-hour{per}"

    def as_json(self) -> dict[str, object]:
        return {
            "documents": dict(self.documents),
            "earlier": self.earlier,
            "duplicates": self.duplicates,
            "pages": dict(self.pages),
            "pages_this_run": self.pages_this_run,
            "jobs": self.jobs,
            "resubmitted": self.resubmitted,
            "wall_s": round(self.wall_s, 2),
            "worker_hours": None if self.worker_hours is None else round(self.worker_hours, 4),
            "gpu_price": self.gpu_price,
            "cost_usd": None
            if self.worker_hours is None or self.gpu_price is None
            else round(self.worker_hours * self.gpu_price, 4),
            "backoffs": {str(k): v for k, v in self.backoffs.items()},
            "runs_resent": self.runs_resent,
            "left_out": self.left_out.as_json(),
            "not_ok": {"documents": self.not_ok, "examples": self.examples},
        }


class Report:
    """corpus.jsonl, a line flushed as each document finishes (a stopped run leaves what it
    did), and the summary beside it at the end (`<name>.summary.json`). Both are made with the
    first line, and said where when they are: a run that sent nothing leaves no files."""

    def __init__(self, path: Path | None) -> None:
        self.target = path
        self._out: IO[str] | None = None
        self._written = False

    @property
    def path(self) -> Path | None:
        """The report's file, once a line is in it; None before (and with no report asked)."""
        return self.target if self._written else None

    @property
    def summary_path(self) -> Path | None:
        return self.path.with_suffix(".summary.json") if self.path is not None else None

    def write(self, line: DocumentLine) -> None:
        if self.target is not None and not self._written:
            self._open(self.target)
        if self._out is None:  # no report asked, or closed already
            return
        self._out.write(line.model_dump_json(exclude_none=True) + "\n")
        self._out.flush()

    def _open(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._out = path.open("w", encoding="utf-8")
        self._written = True
        log.info(
            "corpus report: %s, a line per document as it ends; its summary at the end: %s",
            path,
            path.with_suffix(".summary.json"),
        )

    def close(self, summary: Summary | None = None) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        if summary is not None and self.summary_path is not None:
            self.summary_path.write_text(
                json.dumps(summary.as_json(), indent=2) + "\n", encoding="utf-8"
            )
