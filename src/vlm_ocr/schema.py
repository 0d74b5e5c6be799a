"""The job's input and output, as typed models.

`JobInput.parse` turns RunPod's `job["input"]` into a validated request or raises `InputError`
naming the field and what is accepted. `JobReport` is what the handler returns.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import InputError
from .prompts import PRESETS

MAX_PROMPT_CHARS = 8000
_PREFIX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/]{0,199}$")
_SELECTION_RE = re.compile(r"^\s*\d+\s*(-\s*\d*\s*)?(,\s*\d+\s*(-\s*\d*\s*)?)*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Source(_Strict):
    """Where one file comes from: exactly one of `base64`, `url` (https) or `key` (bucket)."""

    base64: str | None = None
    url: str | None = None
    key: str | None = None
    name: str | None = Field(None, max_length=200, description="Label shown in the manifest.")

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
            return self.url.split("?", 1)[0]
        if self.key is not None:
            return f"key:{self.key}"
        return "base64"


class JobInput(_Strict):
    """A job: one PDF (with an optional page selection) or a list of page images."""

    pdf: Source | None = None
    pages: str | None = Field(None, description='Page selection for the PDF, e.g. "1-3,7" or "5-".')
    images: list[Source] | None = Field(None, min_length=1)
    prompt: str | None = Field(None, description="Prompt preset name.")
    custom_prompt: str | None = Field(None, min_length=1, max_length=MAX_PROMPT_CHARS)
    output_prefix: str | None = None
    return_text: bool = False
    presign_urls: bool = False
    max_pixels: int | None = Field(None, ge=65_536, le=16_000_000)
    max_side: int | None = Field(None, ge=256, le=8192)

    @model_validator(mode="after")
    def _check(self) -> JobInput:
        if (self.pdf is None) == (self.images is None):
            raise InputError(
                "input",
                "give exactly one document: `pdf` (one PDF) or `images` (a list of page images)"
                + (", not both" if self.pdf is not None else ""),
            )
        if self.pages is not None:
            if self.pdf is None:
                raise InputError("input.pages", "a page selection applies to `pdf` only")
            parse_selection(self.pages)  # raises InputError
        if self.prompt is not None and self.custom_prompt is not None:
            raise InputError(
                "input.prompt", "give `prompt` (a preset) or `custom_prompt`, not both"
            )
        if self.prompt is not None and self.prompt not in PRESETS:
            raise InputError(
                "input.prompt",
                f"unknown preset {self.prompt!r}; accepted: {', '.join(sorted(PRESETS))}",
            )
        if self.output_prefix is not None and (
            not _PREFIX_RE.match(self.output_prefix) or ".." in self.output_prefix
        ):
            raise InputError(
                "input.output_prefix",
                "use 1-200 characters of letters, digits, '.', '_', '-' and '/', "
                "starting with a letter or digit and without '..'",
            )
        return self

    @classmethod
    def parse(cls, raw: Any, *, max_pages: int | None = None) -> JobInput:
        if not isinstance(raw, dict):
            raise InputError("input", f"expected a JSON object, got {type(raw).__name__}")
        try:
            job = cls.model_validate(raw)
        except ValidationError as exc:
            raise _as_input_error(exc) from None
        if job.images is not None and max_pages is not None and len(job.images) > max_pages:
            raise InputError(
                "input.images", f"{len(job.images)} images given; at most {max_pages} per job"
            )
        return job


def _as_input_error(exc: ValidationError) -> InputError:
    err = exc.errors()[0]
    loc = "input" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        allowed = (
            ", ".join(JobInput.model_fields) if len(err["loc"]) == 1 else "base64, url, key, name"
        )
        return InputError(loc, f"unknown field; accepted fields: {allowed}")
    message = err["msg"].removeprefix("Value error, ")
    return InputError(loc, message)


def parse_selection(text: str) -> list[tuple[int, int | None]]:
    """Parse '1-3,7,10-' into 1-based inclusive ranges; an open end is None."""
    if not _SELECTION_RE.match(text):
        raise InputError(
            "input.pages",
            f"{text!r} is not a page selection; use 1-based numbers and ranges such as "
            '"1-3,7" or "5-"',
        )
    ranges: list[tuple[int, int | None]] = []
    for part in text.replace(" ", "").split(","):
        lo_s, dash, hi_s = part.partition("-")
        lo = int(lo_s)
        hi = int(hi_s) if hi_s else (None if dash else lo)
        if lo < 1 or (hi is not None and hi < lo):
            raise InputError(
                "input.pages", f"{part!r} is not a valid range; pages start at 1 and ranges go up"
            )
        ranges.append((lo, hi))
    return ranges


def select_pages(text: str | None, page_count: int, max_pages: int) -> tuple[list[int], list[int]]:
    """Pages (1-based, in order, once each) that exist, and those selected beyond the end."""
    ranges = [(1, None)] if text is None else parse_selection(text)
    chosen: dict[int, None] = {}
    missing: dict[int, None] = {}
    for lo, hi in ranges:
        end = page_count if hi is None else hi
        for n in range(lo, max(end, lo) + 1):
            (chosen if n <= page_count else missing)[n] = None
            if len(chosen) + len(missing) > max_pages:
                raise InputError(
                    "input.pages", f"selects more than {max_pages} pages; split the job"
                )
    return list(chosen), list(missing)


# --- output -------------------------------------------------------------------------------------


class PageReport(BaseModel):
    """One page's outcome, as it appears in the job result and the manifest."""

    page: int = Field(description="1-based page number in the document (or image index).")
    source: str
    status: Literal["ok", "failed"]
    key: str | None = Field(None, description="Where the page text is stored.")
    url: str | None = Field(None, description="Presigned GET URL, when asked for.")
    chars: int = 0
    reused: bool = False
    image_sha256: str | None = None
    width: int | None = None
    height: int | None = None
    finish_reason: str | None = None
    attempts: int = 0
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    error: str | None = None
    error_stage: str | None = None
    partial_key: str | None = Field(None, description="Best partial text of a failed page.")
    text: str | None = None


class JobReport(BaseModel):
    """What the handler returns and the manifest stores."""

    job_id: str
    status: Literal["ok", "partial", "failed"]
    store: str
    prefix: str
    manifest_key: str | None = None
    manifest_url: str | None = None
    pages: list[PageReport]
    totals: dict[str, int]
    timings: dict[str, float]
    engine: dict[str, Any]
    fingerprint: dict[str, Any]
    notes: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
