"""Errors a user sees: each names what was wrong and what is accepted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# What a PDF that cannot be read is told, by the worker and by `vlm-ocr submit` alike.
NOT_A_PDF = "the data is not a PDF (it does not start with %PDF)"
UNREADABLE_PDF = (
    "the PDF is corrupt or truncated: its bytes start as a PDF's but are not a readable PDF "
    "(cut short or damaged); send the complete file"
)
ENCRYPTED_PDF = "the PDF is encrypted with a password; send an unencrypted copy"
EMPTY_PDF = "the PDF has no pages"


class OcrError(Exception):
    """Base for errors the worker reports to the user rather than crashing on."""


class InputError(OcrError):
    """The job input is wrong; `field` is its dotted path, e.g. `input.images[2].url`."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")

    def lines(self) -> list[str]:
        """Each problem on a line of its own (the result's `errors`)."""
        return [str(self)]


class InputErrors(InputError):
    """Everything wrong with one job input, reported at once: `problems` holds each, and the
    message reads them in order (`input.pages: …; input.return_text: …`)."""

    def __init__(self, problems: list[InputError]) -> None:
        self.problems = problems
        first, *rest = problems
        super().__init__(first.field, "; ".join([first.message, *map(str, rest)]))

    def lines(self) -> list[str]:
        return [str(p) for p in self.problems]


@dataclass(frozen=True)
class JobStop:
    """A failure outside a page's input that stops its whole job: the store refused a write, the
    engine is gone, or the job itself was stopped (cancelled, or out of time). The job is worth
    submitting again once that is mended."""

    kind: Literal["store", "engine", "stopped"]
    message: str


class PageError(OcrError):
    """The one way a page fails: it ends in that page's report, and the job's other pages go on.

    `stage` names where it failed (fetch, decode, render, engine, store, internal); `stop` is
    set when the cause also stops the job (the page sequence records the first one).
    """

    def __init__(self, stage: str, message: str, *, stop: JobStop | None = None) -> None:
        self.stage = stage
        self.message = message
        self.stop = stop
        super().__init__(message)


class RenderTimeout(PageError):
    """A page whose rendering ran past RENDER_TIMEOUT_S (its job counts them: `JobContext`)."""

    def __init__(self, message: str) -> None:
        super().__init__("render", message)


class EngineError(OcrError):
    """The engine failed a request; `fatal` means it is gone and the worker must be replaced.
    `tries` counts the requests sent for the page before it failed, transport retries included."""

    def __init__(self, message: str, *, fatal: bool = False, tries: int = 0) -> None:
        self.fatal = fatal
        self.tries = tries
        super().__init__(message)


class TransportError(EngineError):
    """A request or its answer was lost between the worker and the engine's server (a connection
    refused, reset or closed without an answer, an answer cut off, a gateway's 502/503/504, a
    body that is not the server's JSON). Nothing says the engine failed the page: the same
    request may be sent again."""


class StorageError(OcrError):
    """The store refused or failed a write or read after its retries."""


class ConfigError(OcrError):
    """The worker's settings cannot work on this image (a model it does not have, say). Restarting
    would not help: the worker stays up and answers every job with this message."""
