"""A job's inputs fetched into a spill folder of its own: base64, an https URL or a bucket key,
within one byte budget (`MAX_JOB_BYTES`) and one budget of fetching time (`FETCH_TIMEOUT_S`)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ..contract import Source
from ..errors import InputError, StorageError
from ..settings import FetchSettings
from ..storage import BucketInputs, ObjectMissing, ObjectTooLarge
from .fetch import DownloadTimeout, download

# `data:image/png;base64,` and with parameters (`data:image/png;charset=utf-8;base64,`)
_DATA_URL = re.compile(r"data:[\w/+.-]{0,100}(;[\w.+-]{1,40}=[^;,]{0,100}){0,5};base64,", re.I)
_URL_SAFE = str.maketrans("-_", "+/")
FETCH_CONCURRENCY = 8  # files of one job being fetched at once
NO_BUCKET = (
    "inputs named by `key` are read from the bucket, and no bucket is configured; set the four "
    "bucket settings (BUCKET_ENDPOINT_URL, BUCKET_NAME and its two keys), or send `base64` or "
    "`url`"
)


class JobFiles:
    """A job's fetched inputs: one byte budget, one budget of fetching time, one spill folder
    removed when the job ends.

    The time budget counts the wall time during which any of the job's fetches is running, not
    the time since the job began: inputs are fetched as their pages come up, so a long job
    fetches its last pages late, and that is no reason to fail them."""

    def __init__(self, limits: FetchSettings, inputs: BucketInputs | None) -> None:
        self.limits = limits
        self.inputs = inputs
        self.dir = Path(tempfile.mkdtemp(prefix="vlm-ocr-job-"))
        self.used = 0
        self.gate = asyncio.Semaphore(FETCH_CONCURRENCY)
        self._count = 0
        self._active = 0  # fetches running now
        self._since = 0.0  # when the current busy stretch began
        self._spent = 0.0  # busy time of the stretches that have ended

    def _time_left(self) -> float:
        busy = time.monotonic() - self._since if self._active else 0.0
        return self.limits.fetch_timeout_s - self._spent - busy

    @contextlib.contextmanager
    def _busy(self) -> Iterator[None]:
        if not self._active:
            self._since = time.monotonic()
        self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            if not self._active:
                self._spent += time.monotonic() - self._since

    def take(self, n: int) -> None:
        self.used += n
        if self.used > self.limits.max_job_bytes:
            raise _JobBytesExceeded

    async def fetch(self, src: Source, field: str) -> Path:
        """The file a source names, spilled to disk, or InputError naming `field.<kind>`."""
        where = f"{field}.{src.kind}"
        self._count += 1
        path = self.dir / f"input-{self._count:05d}"
        try:
            async with self.gate:
                left = self._time_left()
                if left <= 0:
                    raise InputError(where, self._late())
                with self._busy(), path.open("wb") as out:
                    await self._fetch(src, where, out, left)
        except _JobBytesExceeded:
            path.unlink(missing_ok=True)
            raise InputError(
                where,
                f"the job's inputs add up to more than {self.limits.max_job_bytes / 1e6:g} MB "
                "(MAX_JOB_BYTES); split the job",
            ) from None
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path

    async def _fetch(self, src: Source, where: str, out: BinaryIO, left: float) -> None:
        limits = self.limits
        if src.base64 is not None:
            data = decode_base64(src.base64, where, limits.max_download_bytes)
            self.take(len(data))
            out.write(data)
        elif src.url is not None:
            timeout = min(limits.download_timeout_s, left)
            try:
                await download(
                    src.url,
                    out,
                    field=where,
                    max_bytes=limits.max_download_bytes,
                    timeout_s=timeout,
                    allow_private=limits.allow_private_urls,
                    take=self.take,
                )
            except DownloadTimeout:
                if timeout < limits.download_timeout_s:  # the job's fetching time ran out
                    raise InputError(where, self._late()) from None
                raise
        else:
            assert src.key is not None
            await self._read_key(src.key, where, out, left)

    async def _read_key(self, key: str, where: str, out: BinaryIO, left: float) -> None:
        if self.inputs is None:
            raise InputError(where, NO_BUCKET)
        limit = self.limits.max_download_bytes
        try:
            async with asyncio.timeout(left):
                size = await self.inputs.fetch(key, out, limit)
        except TimeoutError:
            raise InputError(where, self._late()) from None
        except ObjectMissing:
            raise InputError(
                where, f"no object {key!r} in bucket {self.inputs.bucket.name!r}; upload it first"
            ) from None
        except ObjectTooLarge as exc:
            raise InputError(
                where, f"{exc}, over the {limit / 1e6:g} MB limit (MAX_DOWNLOAD_BYTES)"
            ) from None
        except StorageError as exc:
            raise InputError(where, str(exc)) from None
        self.take(size)

    def _late(self) -> str:
        return (
            f"the job has spent its {self.limits.fetch_timeout_s:g} s of fetching time "
            "(FETCH_TIMEOUT_S); use faster hosts or bucket keys, or split the job"
        )

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class _JobBytesExceeded(Exception):
    pass


def decode_base64(text: str, field: str, max_bytes: int) -> bytes:
    """The bytes of base64 text as encoders write it: the standard or the URL-safe alphabet
    (RFC 4648 has both), padded or not, wrapped in lines, behind a `data:` URL's prefix."""
    text = text.lstrip()
    if found := _DATA_URL.match(text, 0, 700):
        text = text[found.end() :]
    if len(text) * 3 // 4 > max_bytes:
        raise InputError(
            field, f"the file is over the {max_bytes / 1e6:g} MB limit; use a `url` or `key`"
        )
    compact = "".join(text.split()).rstrip("=")
    if "-" in compact or "_" in compact:
        compact = compact.translate(_URL_SAFE)
    try:
        data = base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InputError(
            field,
            "not valid base64 (it may hold letters, digits, + and / or - and _, and = at the "
            "end, and no other character); send the file's bytes base64-encoded",
        ) from None
    if not data:
        raise InputError(field, "the file is empty")
    return data
