"""The contract between the worker and its clients: the job input, each streamed item and the
job result, as typed models. The worker emits them and `vlm-ocr submit` parses them; nothing else
is shared by the two sides, so a renamed field is renamed for both.

    job["input"]  ──► JobInput.parse ──► (the worker) ──► PageItem per page, as it is stored
                                                       └► ResultItem (the JobResult), or
                                                          FailedItem when RunPod should mark
                                                          the job failed (`final_item`)

`JobInput.parse` raises `InputErrors` naming every field that is wrong and what is accepted
(`field_errors`). A job's manifest (`manifest.json`) is its `JobResult` without the page texts
and presigned URLs.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Collection, Sequence
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .blocks import HeadersFooters
from .errors import InputError, InputErrors
from .field_errors import field_problems, given, meant
from .prompts import PRESETS
from .settings import MAX_PIXELS_LIMIT, MAX_SIDE_LIMIT, MIN_PIXELS, MIN_SIDE
from .urls import looks_like_url, redact

MAX_PROMPT_CHARS = 8000
MAX_SELECTION_CHARS = 1000
_PREFIX_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-/]{0,199}")
# What a segment of an output_prefix may hold (check_prefix): anything else becomes a gap.
_NOT_IN_A_KEY = re.compile(r"[^A-Za-z0-9._-]+")
# One part of a selection; applied to each comma-separated part alone, so time is linear.
_PART_RE = re.compile(r"(\d{1,18})(-(\d{0,18}))?")  # any page number a person may write


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Source(_Strict):
    """Where one file comes from: exactly one of `base64`, `url` (https) or `key` (bucket)."""

    ACCEPTED: ClassVar[str] = (
        'an object with exactly one of "base64", "url" or "key" (and an optional "name")'
    )

    base64: str | None = Field(None, min_length=1)
    url: str | None = Field(None, min_length=1, max_length=8192)
    key: str | None = Field(None, min_length=1, max_length=1024)
    name: str | None = Field(None, max_length=200, description="Label shown in the manifest.")

    @field_validator("key")
    @classmethod
    def _a_key_not_a_url(cls, key: str | None) -> str | None:
        if key is not None and key.startswith("s3://"):  # the bucket is the worker's own
            inside = key.removeprefix("s3://").partition("/")[2]
            raise ValueError(f"{key!r} is an address; give the key within the bucket: {inside!r}")
        if key is not None and looks_like_url(key):
            raise ValueError(
                f"{redact(key)!r} is a URL, not a key in the bucket: send it as "
                '"url" (https), or give the object\'s key'
            )
        return key

    @model_validator(mode="after")
    def _exactly_one(self) -> Source:
        given = [k for k in ("base64", "url", "key") if getattr(self, k) is not None]
        if len(given) != 1:
            got = " and ".join(given) if given else "none of them"
            raise ValueError(f"give exactly one of `base64`, `url` or `key` (got {got})")
        return self

    @property
    def kind(self) -> Literal["base64", "url", "key"]:
        if self.base64 is not None:
            return "base64"
        return "url" if self.url is not None else "key"

    def label(self) -> str:
        if self.name:
            return self.name
        if self.url is not None:
            return redact(self.url)
        if self.key is not None:
            return f"key:{self.key}"
        return "base64"


class JobInput(_Strict):
    """A job: one PDF (with an optional page selection) or a list of page images."""

    pdf: Source | None = None
    pages: str | None = Field(
        None,
        description='Page selection for the PDF, e.g. "1-3,7" or "5-".',
        examples=["1-3,7", "5-"],
    )
    images: list[Source] | None = Field(None, min_length=1)
    prompt: str | None = Field(None, description="Prompt preset name.")
    custom_prompt: str | None = Field(None, min_length=1, max_length=MAX_PROMPT_CHARS)
    output_prefix: str | None = None
    return_text: bool = False
    presign_urls: bool = False
    json_schema: dict[str, Any] | None = Field(
        None,
        description="A JSON Schema: each page is read into JSON that validates against it, by the "
        "engine's guided decoding, and stored as page-NNNN.json.",
    )
    second_opinion: bool | None = Field(
        None,
        description="Read every page with the CPU engine too and flag disagreements for review "
        "(default: SECOND_OPINION).",
    )
    max_pixels: int | None = Field(None, ge=MIN_PIXELS, le=MAX_PIXELS_LIMIT)
    max_side: int | None = Field(None, ge=MIN_SIDE, le=MAX_SIDE_LIMIT)
    headers_footers: HeadersFooters = Field(
        "drop",
        description="`drop`: page headers, footers and page numbers are left out of the page "
        "text (the blocks keep them, labelled); `keep`: they stay in the text.",
    )
    searchable_pdf: bool = Field(
        False,
        description="Store the document as a searchable PDF: the pages with the recognized text "
        "laid invisibly over them (searchable.pdf beside the manifest).",
    )

    @field_validator("pages")
    @classmethod
    def _pages(cls, value: str | None) -> str | None:
        if value is not None:
            _as_value_error(parse_selection, value)
        return value

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, value: str | None) -> str | None:
        if value is not None and value not in PRESETS:
            raise ValueError(f"unknown preset {value!r}; accepted: {', '.join(sorted(PRESETS))}")
        return value

    @field_validator("output_prefix")
    @classmethod
    def _prefix(cls, value: str | None) -> str | None:
        if value is not None:
            _as_value_error(check_prefix, value)
        return value

    @field_validator("json_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            _as_value_error(check_json_schema, value)
        return value

    @model_validator(mode="after")
    def _check(self) -> JobInput:
        fields = type(self).model_fields
        present = {name for name in fields if getattr(self, name) not in (None, False)}
        if problems := combination_problems(present):
            raise InputErrors(problems)
        return self

    @classmethod
    def parse(cls, raw: Any, *, max_pages: int | None = None) -> JobInput:
        """The job, or InputErrors naming every field that is wrong (a field's own problems
        and the fields that do not go together), each with what is accepted."""
        if not isinstance(raw, dict):
            raise InputError(
                "input", f"got {given(raw)}; accepted: a JSON object of the job's fields"
            )
        raw = {k: v for k, v in raw.items() if v is not None}  # null: not given, as clients send it
        try:
            job = cls.model_validate(raw)
        except ValidationError as exc:
            present = {k for k, v in raw.items() if v is not None and v is not False}
            # a field misspelled is said with the one it meant: counted as that one here
            present |= {
                m
                for k in present - set(cls.model_fields)
                if (m := meant(k, list(cls.model_fields)))
            }
            problems = field_problems(exc, cls, "input") + combination_problems(present)
            raise InputErrors(problems) from None
        if job.images is not None and max_pages is not None and len(job.images) > max_pages:
            raise InputError(
                "input.images", f"{len(job.images)} images given; at most {max_pages} per job"
            )
        return job


def combination_problems(present: Collection[str]) -> list[InputError]:
    """What is wrong with the fields a job gives together, by which it gives (a field that is
    null or false is not given)."""
    problems = []
    if ("pdf" in present) == ("images" in present):
        problems.append(
            InputError(
                "input",
                "give exactly one document: `pdf` (one PDF) or `images` (a list of page images)"
                + (", not both" if "pdf" in present else ""),
            )
        )
    if "pages" in present and "images" in present and "pdf" not in present:
        problems.append(InputError("input.pages", "a page selection applies to `pdf` only"))
    if "prompt" in present and "custom_prompt" in present:
        problems.append(
            InputError("input.prompt", "give `prompt` (a preset) or `custom_prompt`, not both")
        )
    if "json_schema" in present and "prompt" in present:
        problems.append(
            InputError(
                "input.prompt",
                "the presets transcribe to Markdown; with `json_schema` leave `prompt` out (the "
                "built-in extraction prompt is used) or give `custom_prompt`",
            )
        )
    if "json_schema" in present and "searchable_pdf" in present:
        problems.append(
            InputError(
                "input.searchable_pdf",
                "a job with `json_schema` reads JSON, not the page's text, so there is "
                "nothing to lay over the pages; leave one of them out",
            )
        )
    return problems


def _as_value_error(check: Any, value: Any) -> None:
    """Run a check that raises InputError as a field validator (pydantic collects ValueErrors)."""
    try:
        check(value)
    except InputError as exc:
        raise ValueError(exc.message) from None


def key_name(name: str, *, gap: str = "_", limit: int = 100, empty: str = "file") -> str:
    """A name (a file's, without its extension) as a segment of a prefix may spell it
    (`check_prefix`): letters A-Z, digits, '.', '_' and '-' kept, any run of anything else one
    `gap`, the ends trimmed. A name that loses letters on the way (合約, été) or is cut to
    `limit` gets 8 hex digits of the whole name, so that 合約 and 租約 stay apart and the same
    name gets the same segment every time."""
    name = unicodedata.normalize("NFC", name)  # macOS spells é as e and an accent
    kept = _NOT_IN_A_KEY.sub(gap, name).strip("._-")
    lost = any(c.isalnum() and not c.isascii() for c in name) or len(kept) > limit
    if not lost:
        return kept or empty
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{kept[:limit].rstrip('._-') or empty}-{digest}"


def check_prefix(prefix: str) -> None:
    segments = prefix.split("/")
    if not _PREFIX_RE.fullmatch(prefix) or any(s in ("", ".", "..") for s in segments):
        raise InputError(
            "input.output_prefix",
            f"{prefix[:60]!r} is not a usable prefix; accepted: 1-200 characters of letters, "
            "digits, '.', '_', '-' and '/', starting with a letter or digit, with no empty, '.' "
            "or '..' segment and no trailing '/'",
        )


def parse_selection(text: str) -> list[tuple[int, int | None]]:
    """Parse '1-3,7,10-' into 1-based inclusive ranges; an open end is None. Linear in the
    length of the text, which is capped."""
    if len(text) > MAX_SELECTION_CHARS:
        raise InputError(
            "input.pages",
            f"the selection is {len(text)} characters long; at most {MAX_SELECTION_CHARS}. "
            'Use ranges ("1-500") or split the job',
        )
    ranges: list[tuple[int, int | None]] = []
    for part in "".join(text.split()).split(","):
        m = _PART_RE.fullmatch(part)
        if m is None:
            raise InputError(
                "input.pages",
                f"{text[:60]!r} is not a page selection; accepted: 1-based page numbers and "
                'ranges such as "1-3,7" or "5-"',
            )
        lo = int(m.group(1))
        hi = None if m.group(2) and not m.group(3) else int(m.group(3) or lo)
        if lo < 1 or (hi is not None and hi < lo):
            raise InputError(
                "input.pages", f"{part!r} is not a valid range; pages start at 1 and ranges go up"
            )
        ranges.append((lo, hi))
    return ranges


MAX_SCHEMA_CHARS = 20_000
# Deeper than any form a page holds; a schema nested some hundred levels would exhaust the
# recursion of the validator (and of guided decoding's grammar compiler) before its size did.
MAX_SCHEMA_DEPTH = 32


def _depth(value: Any) -> int:
    """How many objects and lists deep a JSON value nests, counted without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            todo.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def check_json_schema(schema: dict[str, Any]) -> None:
    """A schema guided decoding can follow: a valid JSON Schema for an object, not too large."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    if _depth(schema) > MAX_SCHEMA_DEPTH:  # before anything that recurses through it
        raise InputError(
            "input.json_schema", f"nested more than {MAX_SCHEMA_DEPTH} objects and lists deep"
        )
    if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
        raise InputError("input.json_schema", f"over {MAX_SCHEMA_CHARS:,} characters")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise InputError("input.json_schema", f"not a valid JSON Schema: {exc.message}") from None
    if schema.get("type") != "object":
        raise InputError(
            "input.json_schema", 'the schema must describe an object ("type": "object")'
        )


# --- output -------------------------------------------------------------------------------------

Status = Literal["ok", "partial", "failed"]


class PageReport(BaseModel):
    """One page's outcome, as it appears in the job result, the manifest and the stream."""

    page: int = Field(description="1-based page number in the document (or image index).")
    source: str
    status: Literal["ok", "blank", "failed"] = Field(
        description="`ok`: text stored; `blank`: no ink on the page, stored empty without the "
        "engine; `failed`: see `error`."
    )
    key: str | None = Field(None, description="Where the page text is stored.")
    url: str | None = Field(None, description="Presigned GET URL, when asked for.")
    chars: int = 0
    reused: bool = False
    image_sha256: str | None = None
    width: int | None = None
    height: int | None = None
    dpi: int | None = Field(
        None,
        description="The resolution a PDF page was drawn at, in dots per inch (unset for an "
        "image); under 60 the job's notes say its small print may not be read.",
    )
    frames: int | None = Field(
        None,
        description="The pages of a multi-page image (a TIFF), of which only the first was "
        "read; the job's notes say how to read them all.",
    )
    finish_reason: str | None = None
    attempts: int = 0
    tries: int | None = Field(
        None,
        description="Requests sent to the engine's server for the page: one per attempt, plus "
        "one for each that was lost on the way and sent again (a dropped connection, an answer "
        "cut off, HTTP 502/503/504). Unset for an engine without a server.",
    )
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    error: str | None = None
    error_stage: str | None = None
    partial_key: str | None = Field(None, description="Best partial text of a failed page.")
    blocks: int | None = Field(
        None, description="How many blocks the page's layout has (its blocks file: `blocks_key`)."
    )
    blocks_key: str | None = Field(
        None, description="Where the page's blocks are stored (page-NNNN.json)."
    )
    figures: list[str] | None = Field(
        None, description="The figures cut from the page, stored as PNG (page-NNNN-figure-N.png)."
    )
    rotated: int | None = Field(
        None,
        description="The clockwise turn (0, 90, 180, 270) that put the page upright before it "
        "was read: a scanned page's, or the one its model asked for (olmOCR's rotation hint).",
    )
    fallback: str | None = Field(
        None,
        description="Set when the model gave no good answer on any attempt and the PDF page's "
        "own text layer was stored instead: why the model's answers were not used.",
    )
    language: str | None = Field(None, description="The page's language, where the model says.")
    flags: dict[str, bool] | None = Field(
        None, description="What the model says the page holds (olmOCR: table, diagram)."
    )
    agreement: float | None = Field(
        None, description="Second opinion: similarity of the two readings (1.0 = the same)."
    )
    review: bool | None = Field(
        None,
        description="Second opinion: true when the readings agree less than "
        "SECOND_OPINION_MIN_AGREEMENT or differ in a critical token.",
    )
    differences: list[str] | None = Field(
        None, description="Second opinion: the critical tokens that differ (engine ≠ CPU)."
    )
    second_key: str | None = Field(
        None,
        description="Second opinion: where the CPU engine's reading is stored "
        "(page-NNNN.second.txt), to set beside the page's text.",
    )
    text: str | None = None

    @property
    def stored(self) -> bool:
        """Its text (or its emptiness) is in the store."""
        return self.status != "failed"


class Totals(BaseModel):
    """Counts over a set of page reports: one job's, or a whole document's."""

    pages: int = 0
    ok: int = 0
    blank: int = 0
    failed: int = 0
    reused: int = 0
    review: int = 0
    #: pages stored from the PDF's text layer after the model's answers did not parse
    fallback: int = 0
    chars: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0

    @classmethod
    def of(cls, pages: Sequence[PageReport]) -> Totals:
        return cls(
            pages=len(pages),
            ok=sum(p.status == "ok" for p in pages),
            blank=sum(p.status == "blank" for p in pages),
            failed=sum(p.status == "failed" for p in pages),
            reused=sum(p.reused for p in pages),
            review=sum(bool(p.review) for p in pages),
            fallback=sum(p.fallback is not None for p in pages),
            chars=sum(p.chars for p in pages if p.status == "ok"),
            prompt_tokens=sum(p.prompt_tokens or 0 for p in pages),
            output_tokens=sum(p.output_tokens or 0 for p in pages),
        )


class JobResult(BaseModel):
    """What a job returns; its manifest is the same without page texts and URLs."""

    job_id: str
    status: Status
    error: str | None = Field(
        None,
        description="Why the status is not `ok`, in one line: a job-level reason, or how many "
        "pages failed and the first of their reasons.",
    )
    #: the job stopped for a reason outside its input (the engine or the store failed):
    #: submitting it again finishes it, reusing the pages already stored
    retry: bool = False
    #: the engine is gone: this worker must be replaced (it exits after the job)
    refresh_worker: bool = False
    store: str | None = None
    prefix: str | None = None
    manifest_key: str | None = None
    manifest_url: str | None = None
    document_key: str | None = Field(
        None,
        description="document.md: the pages' texts in order, page breaks marked (jobs of a "
        "whole PDF); document.txt beside it.",
    )
    searchable_pdf_key: str | None = Field(
        None, description="searchable.pdf, when the job asked for it."
    )
    input_sha256: str | None = Field(
        None,
        description="Which document the results are of, whatever its name: the SHA-256 of the "
        "PDF (or TIFF) as the job received it; of images, the SHA-256 of their SHA-256s in "
        "order (hex, joined), when every image was fetched.",
    )
    pages: list[PageReport] = Field(default_factory=list)
    totals: Totals = Field(default_factory=Totals)
    timings: dict[str, float] = Field(default_factory=dict)
    engine: dict[str, Any] = Field(default_factory=dict)
    fingerprint: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)

    @classmethod
    def refused(
        cls,
        job_id: str,
        error: str,
        engine: dict[str, Any] | None = None,
        errors: list[str] | None = None,
    ) -> JobResult:
        """A job turned away before any page was read: bad input (`errors`: each problem of
        it, else the one `error` says), a misconfigured worker."""
        return cls(
            job_id=job_id,
            status="failed",
            error=error,
            engine=engine or {},
            errors=errors or [error],
        )

    def wire(self) -> dict[str, Any]:
        """As JSON travels: unset fields left out."""
        return self.model_dump(mode="json", exclude_none=True)

    def manifest(self) -> dict[str, Any]:
        """The manifest: the result without what only its caller may see (texts, URLs)."""
        return self.model_dump(
            mode="json",
            exclude_none=True,
            exclude={"manifest_url": True, "pages": {"__all__": {"text", "url"}}},
        )


# --- stream items -------------------------------------------------------------------------------


class PageItem(BaseModel):
    """One page's outcome the moment it is stored (or failed). The report is under `page`, so no
    top-level `error` makes RunPod's SDK take a failed page for a failed job."""

    event: Literal["page"] = "page"
    done: int
    total: int
    page: PageReport

    def progress(self) -> dict[str, Any]:
        """The short form RunPod's progress updates carry."""
        return {
            "done": self.done,
            "total": self.total,
            "page": self.page.page,
            "status": self.page.status,
        }


class ResultItem(BaseModel):
    """The stream's last item for a job that completes (`ok`, or `partial` for its input)."""

    event: Literal["result"] = "result"
    result: JobResult


class FailedItem(BaseModel):
    """The stream's last item for a job RunPod should mark failed: it stored nothing, or the
    engine or the store stopped it (its result says `retry`)."""

    error: str


StreamItem = PageItem | ResultItem | FailedItem


def final_item(result: JobResult) -> ResultItem | FailedItem:
    if result.status == "failed" or result.retry:
        return FailedItem(error=result.error or "the job failed")
    return ResultItem(result=result)


def read_item(raw: Any) -> StreamItem | None:
    """A streamed item as the client receives it; None for anything else."""
    if not isinstance(raw, dict):
        return None
    try:
        if raw.get("event") == "page":
            return PageItem.model_validate(raw)
        if raw.get("event") == "result":
            return ResultItem.model_validate(raw)
        if isinstance(raw.get("error"), str):
            return FailedItem(error=raw["error"])
    except ValidationError:
        return None
    return None


def format_ranges(numbers: list[int]) -> str:
    """[1,2,3,5] -> '1-3,5'."""
    out: list[list[int]] = []
    for n in sorted(numbers):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in out)
