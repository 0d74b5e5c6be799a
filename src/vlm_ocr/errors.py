"""Errors a user sees: each names what was wrong and what is accepted."""

from __future__ import annotations


class OcrError(Exception):
    """Base for errors the worker reports to the user rather than crashing on."""


class InputError(OcrError):
    """The job input is wrong; `field` is its dotted path, e.g. `input.images[2].url`."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class PageError(OcrError):
    """One page could not be read, rendered or recognized; the other pages go on."""

    def __init__(self, stage: str, message: str) -> None:
        self.stage = stage
        self.message = message
        super().__init__(message)


class EngineError(OcrError):
    """The engine failed a request; `fatal` means it is gone and the worker must be replaced."""

    def __init__(self, message: str, *, fatal: bool = False) -> None:
        self.fatal = fatal
        super().__init__(message)


class StorageError(OcrError):
    """The store refused or failed a write or read after its retries."""


class ConfigError(OcrError):
    """The worker's settings cannot work on this image (a model it does not have, say). Restarting
    would not help: the worker stays up and answers every job with this message."""
