"""The one-shot run: `python handler.py --test_input '{"input": …}'` (or `test_input.json` in the
folder, as the RunPod SDK reads it), which runs one job and exits.

Its job is read and checked before the engine starts, so a mistake costs a second, not the
engine's start; a job that cannot run (bad fields, a URL that is not https or has no host, a
bucket key with no bucket, a file sent inline that the worker could not open: a PDF encrypted or
damaged, `pages` selecting none of it, images none of which is one) is refused in one line on
stderr. A file behind a URL or a key is the job's to fetch, once. A failed job's error is said
in one line on stderr too. Its stdout
carries the job result alone, one JSON document a script can read (`| jq`): everything else
written there (the SDK's banner and log lines, a library's print, a child process) goes to stderr
instead, however the SDK is set to log. The SDK's own lines (the payload, the result again, its
"Job … failed") are left out unless `RUNPOD_LOG_LEVEL` (or `--rp_log_level`) asks for them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TextIO

from ..contract import JobInput, JobResult, Source
from ..errors import InputError, InputErrors, PageError
from ..pipeline import render
from ..pipeline.fetch import url_target
from ..pipeline.job_files import NO_BUCKET, decode_base64
from ..pipeline.rendering import apart
from ..pipeline.sources import select_pages
from ..settings import Settings
from .sdk_log import quiet_sdk

log = logging.getLogger("vlm_ocr.handler")
LOCAL_JOB_ID = "local_test"  # the SDK's id for a local job that names none
JOB_FILE = "test_input.json"  # what the SDK reads when no --test_input is given
ACCEPTED = 'one JSON object with the job under "input": {"input": {"pdf": {…}, …}}'


def is_one_shot(argv: list[str], environ: Mapping[str, str]) -> bool:
    """Whether the SDK will run one local job and exit, as it decides: not its API server
    (`--rp_serve_api`, a realtime port), and `--test_input` given or no job queue to ask."""
    if "--rp_serve_api" in argv or environ.get("RUNPOD_REALTIME_PORT"):
        return False
    return _test_input(argv) is not None or not environ.get("RUNPOD_WEBHOOK_GET_JOB")


@dataclass
class OneShot:
    #: the process's real stdout, kept for the result alone
    out: TextIO
    #: the job as given, or None when it cannot be read (`problem` says why)
    job: dict[str, Any] | None = None
    problem: str | None = None
    #: the SDK's own lines were asked for (`RUNPOD_LOG_LEVEL`, `--rp_log_level`)
    sdk_lines: bool = False
    _shown: bool = field(default=False, repr=False)

    @classmethod
    def begin(cls, argv: list[str]) -> OneShot:
        """Keep stdout for the result, quiet the SDK unless asked, and read the job."""
        out = keep_stdout_for_the_result()
        sdk_lines = not quiet_sdk(argv, "WARN")
        job, problem = read_job(argv)
        return cls(out, job, problem, sdk_lines)

    @property
    def job_id(self) -> str:
        return str((self.job or {}).get("id", LOCAL_JOB_ID))

    def check(self, settings: Settings) -> None:
        """Refuse the job (and exit) when it cannot run: before the worker is built. Its
        fields, its files as far as they can be had without the network, and a file sent
        inline opened as the worker would; the rest is the worker's to find."""
        if self.problem is not None:
            self.refuse(self.problem)
        assert self.job is not None
        try:
            job = JobInput.parse(self.job["input"], max_pages=settings.job.max_pages_per_job)
            check_sources(job, settings)
        except InputError as exc:
            self.refuse(str(exc), exc.lines())

    def show(self, result: dict[str, Any]) -> None:
        """The job result, on stdout, once."""
        if not self._shown:
            self._shown = True
            self.out.write(json.dumps(result, ensure_ascii=False, indent=2) + "\n")
            self.out.flush()

    def finish(self, result: dict[str, Any]) -> None:
        """Show the result and, unless the SDK's lines were asked for, exit as the SDK would
        (1 when the result has an `error`) without its "Job … failed" line, which repeats it."""
        self.show(result)
        if result.get("status") == "failed":  # a user reading stderr sees why, not only stdout
            log.error("job %s failed: %s", self.job_id, result.get("error"))
        if not self.sdk_lines:
            sys.exit(1 if result.get("error") else 0)

    def refuse(self, error: str, errors: list[str] | None = None) -> NoReturn:
        log.error("job %s refused: %s", self.job_id, error)
        self.show(JobResult.refused(self.job_id, error, errors=errors).wire())
        sys.exit(1)


def check_sources(job: JobInput, settings: Settings) -> None:
    """InputErrors when the job's file cannot be fetched or read at all, as far as can be told
    without the network: a URL that is not https or has no host, a key with no bucket
    configured, a PDF sent inline that the worker could not open or select `pages` of. A list
    of images is refused only when no image can be had: the others would be stored."""
    if job.pdf is not None:
        if problem := _unfetchable(job.pdf, "input.pdf", settings):
            raise problem
        if job.pdf.base64 is not None:
            check_inline_pdf(job, job.pdf.base64, settings)
        return
    named = [(f"input.images[{i}]", src) for i, src in enumerate(job.images or [])]
    problems = [
        p
        for where, src in named
        if (p := _unfetchable(src, where, settings) or _unreadable_image(src, where, settings))
    ]
    if problems and len(problems) == len(named):
        raise InputErrors(problems)


def check_inline_pdf(job: JobInput, data: str, settings: Settings) -> None:
    """The PDF sent inline opened as the job opens it (a TIFF's pages counted, as the PDF the
    job makes of them would have them), in a render process under its limits, and its pages
    selected as the job selects them, or InputError in the job's own words."""
    where = "input.pdf.base64"
    with tempfile.TemporaryDirectory(prefix="vlm-ocr-check-") as folder:
        path = Path(folder) / "input"
        path.write_bytes(decode_base64(data, where, settings.fetch.max_download_bytes))
        try:
            count = apart(
                render.document_pages,
                str(path),
                settings.render.max_image_pixels,
                settings=settings.render,
            )
        except PageError as exc:
            raise InputError(where, exc.message) from None
    # A selection reaching past the end is the job's to note; one of no page is refused here.
    select_pages(job.pages, count, settings.job.max_pages_per_job)


def _unreadable_image(src: Source, where: str, settings: Settings) -> InputError | None:
    """Why an image sent inline cannot be a page (not base64, not an image, over
    MAX_IMAGE_PIXELS), by its header as the job reads it; None for one to fetch."""
    if src.base64 is None:
        return None
    field = f"{where}.base64"
    try:
        data = decode_base64(src.base64, field, settings.fetch.max_download_bytes)
        with tempfile.TemporaryDirectory(prefix="vlm-ocr-check-") as folder:
            path = Path(folder) / "input"
            path.write_bytes(data)
            render.open_image(str(path), settings.render.max_image_pixels).close()
    except InputError as exc:
        return exc
    except PageError as exc:
        return InputError(field, exc.message)
    return None


def _unfetchable(src: Source, where: str, settings: Settings) -> InputError | None:
    field = f"{where}.{src.kind}"
    if src.key is not None and not settings.bucket.configured:
        return InputError(field, NO_BUCKET)
    if src.url is not None:
        try:
            url_target(src.url, field, settings.fetch.allow_private_urls)
        except InputError as exc:
            return exc
    return None


def keep_stdout_for_the_result() -> TextIO:
    """Point file descriptor 1 at stderr, for this process and the children it starts, and
    return a stream to the real stdout."""
    sys.stdout.flush()
    kept = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(kept, "w", encoding="utf-8")


def read_job(argv: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    """The job as `--test_input` or `test_input.json` gives it, or why it cannot be read."""
    text, where = _test_input(argv), "--test_input"
    if text is None:
        path, where = Path(JOB_FILE), JOB_FILE
        if not path.is_file():
            return None, (
                f"no job to run: give --test_input '{{\"input\": …}}' or a {JOB_FILE} in this "
                "folder"
            )
        text = path.read_text(encoding="utf-8", errors="replace")
    try:
        job = json.loads(text)
    except ValueError as exc:
        if where == "--test_input" and _names_a_file(text):
            return None, (
                f"--test_input: {text.strip()!r} is a file's name, not JSON; --test_input takes "
                "the job's JSON itself; for a file: "
                f'--test_input "$(cat {shlex.quote(text.strip())})"'
            )
        return None, f"{where}: not JSON ({exc}); accepted: {ACCEPTED}"
    except RecursionError:
        return None, f"{where}: not JSON that can be read (nested too deep); accepted: {ACCEPTED}"
    if not isinstance(job, dict) or "input" not in job:
        got = 'no "input" in it' if isinstance(job, dict) else f"a JSON {type(job).__name__}"
        return None, f"{where}: {got}; accepted: {ACCEPTED}"
    return job, None


def _names_a_file(text: str) -> bool:
    """Whether the text is a file's name (one there, or one ending in .json), not a job."""
    name = text.strip()
    if not name or "\n" in name or len(name) > 1024:
        return False
    try:
        return name.endswith(".json") or Path(name).is_file()
    except (OSError, ValueError):  # not a name a file can have
        return False


def _test_input(argv: list[str]) -> str | None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--test_input")
    return parser.parse_known_args(argv[1:])[0].test_input
