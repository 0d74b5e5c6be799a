"""Where results go: a local folder, or an S3 bucket (Cloudflare R2) — one interface for both.

Key layout, relative to the store's root (the output folder, or `BUCKET_PREFIX/` in a bucket):
`JobKeys` names every object of a job (docs/job.md lists them, and a test holds that list to
this class). `<prefix>` is the job's `output_prefix`, or its RunPod job id. Reported keys are
the real object keys (in a bucket they start with `BUCKET_PREFIX/`).

A page object carries a `PageRecord` (its image hash and engine fingerprint): a re-run reuses the
stored text only when both match. Reading a job's inputs from the bucket is a separate, smaller
interface (`BucketInputs`). Both raise `StorageError`; the caller decides what it means to a user.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from .errors import ConfigError, StorageError
from .settings import BucketSettings, Settings

log = logging.getLogger(__name__)

TEXT_TYPE = "text/markdown; charset=utf-8"  # a page's text, document.md
PLAIN_TYPE = "text/plain; charset=utf-8"  # document.txt
JSON_TYPE = "application/json"
PNG_TYPE = "image/png"


@dataclass(frozen=True)
class JobKeys:
    prefix: str

    def page(self, number: int, suffix: str = "md") -> str:
        """page-0001.md (text) or page-0001.json (a job with a JSON schema)."""
        return f"{self.prefix}/page-{number:04d}.{suffix}"

    def partial(self, number: int) -> str:
        return f"{self.prefix}/failed/page-{number:04d}.partial.md"

    def blocks(self, number: int) -> str:
        """page-0001.json: the page's blocks (a job without a JSON schema)."""
        return self.page(number, "json")

    def second_reading(self, number: int) -> str:
        """page-0001.second.txt: the CPU engine's reading of the page (the second opinion)."""
        return self.page(number, "second.txt")

    @staticmethod
    def figure_name(number: int, index: int) -> str:
        """page-0003-figure-1.png, as the page's Markdown links it (beside the page)."""
        return f"page-{number:04d}-figure-{index}.png"

    def figure(self, number: int, index: int) -> str:
        return f"{self.prefix}/{self.figure_name(number, index)}"

    def document(self, suffix: str) -> str:
        """document.md, document.txt: the whole document's text."""
        return f"{self.prefix}/document.{suffix}"

    @property
    def searchable_pdf(self) -> str:
        return f"{self.prefix}/searchable.pdf"

    @property
    def running_lines(self) -> str:
        """running-lines.json: each page's first and last lines as read, before any was dropped
        as a running head, for a later job that reuses the page."""
        return f"{self.prefix}/running-lines.json"

    @property
    def manifest(self) -> str:
        return f"{self.prefix}/manifest.json"


@dataclass(frozen=True)
class PageRecord:
    """What decided a stored page's text: the page's pixels and the engine fingerprint."""

    image_sha256: str
    fingerprint: str
    chars: int
    #: the page's blocks file and figure files stored beside its text, from the same reading
    blocks: int = 0
    figures: int = 0

    def metadata(self) -> dict[str, str]:
        meta = {
            "image-sha256": self.image_sha256,
            "fingerprint": self.fingerprint,
            "chars": str(self.chars),
        }
        if self.blocks:
            meta["blocks"] = str(self.blocks)
        if self.figures:
            meta["figures"] = str(self.figures)
        return meta

    @classmethod
    def from_metadata(cls, meta: dict[str, str] | None) -> PageRecord | None:
        """The record of a stored page, or None when it has none (or a broken one)."""
        if not meta:
            return None
        try:
            return cls(
                meta["image-sha256"],
                meta["fingerprint"],
                int(meta["chars"]),
                int(meta.get("blocks", 0)),
                int(meta.get("figures", 0)),
            )
        except (KeyError, ValueError):
            return None


class Store(Protocol):
    """An object store for results. Keys are relative to the store's root."""

    kind: str
    #: prepended to every job's result keys (the bucket's BUCKET_PREFIX)
    key_prefix: str

    def uri(self, key: str) -> str: ...

    def taken(self, prefix: str) -> str | None:
        """Why results cannot go under `prefix` whatever is tried again (a folder's name is
        a file's), or None."""
        ...

    async def put(
        self, key: str, data: bytes, content_type: str, record: PageRecord | None = None
    ) -> None: ...

    async def record(self, key: str) -> PageRecord | None:
        """The stored page's record, or None when there is no such page or it has none."""
        ...

    async def read_text(self, key: str) -> str: ...

    async def presign(self, key: str) -> str | None: ...

    async def delete(self, key: str) -> None:
        """Remove the object if there is one."""
        ...


async def put_json(store: Store, key: str, doc: Any) -> None:
    data = json.dumps(doc, ensure_ascii=False, indent=2).encode()
    await store.put(key, data, JSON_TYPE)


class LocalStore:
    """A folder on disk. A page's record lives beside it in `.meta/<key>.json`.

    Writing a page removes its old record first and writes the new one last, so a crash between
    the two writes leaves a page without a record (recognized again), never a record that
    describes other text."""

    kind = "local"
    key_prefix = ""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root):
            raise StorageError(f"key {key!r} points outside the output folder")
        return path

    def _meta_path(self, key: str) -> Path:
        return self._path(f".meta/{key}.json")

    def uri(self, key: str) -> str:
        return self._path(key).as_uri()

    def taken(self, prefix: str) -> str | None:
        folder = self._path(prefix)
        for path in (folder, *folder.parents):
            if path == self.root or not path.is_relative_to(self.root):
                return None
            if path.exists() and not path.is_dir():
                name = path.relative_to(self.root).as_posix()
                return f"{name!r} is a file of earlier results, not a folder; give another prefix"
        return None

    async def put(
        self, key: str, data: bytes, content_type: str, record: PageRecord | None = None
    ) -> None:
        await asyncio.to_thread(self._put, key, data, record)

    def _put(self, key: str, data: bytes, record: PageRecord | None) -> None:
        try:
            meta = self._meta_path(key)
            meta.unlink(missing_ok=True)
            _atomic_write(self._path(key), data)
            if record is not None:
                _atomic_write(meta, json.dumps(record.metadata()).encode())
        except OSError as exc:
            raise StorageError(f"cannot write {key} under {self.root}: {exc}") from None

    # Reads go to a thread as writes do: the folder may be a slow or network disk, and the loop
    # they would stall feeds the engine.
    async def record(self, key: str) -> PageRecord | None:
        return await asyncio.to_thread(self._record, key)

    def _record(self, key: str) -> PageRecord | None:
        path, meta = self._path(key), self._meta_path(key)
        if not path.is_file():
            return None
        try:
            return PageRecord.from_metadata(json.loads(meta.read_text()))
        except (OSError, ValueError):  # no record, or a damaged one: the page is read again
            return None

    async def read_text(self, key: str) -> str:
        try:
            return await asyncio.to_thread(self._path(key).read_text, encoding="utf-8")
        except FileNotFoundError:
            raise ObjectMissing(f"no {key} under {self.root}") from None
        except OSError as exc:
            raise StorageError(f"cannot read {key} under {self.root}: {exc}") from None

    async def presign(self, key: str) -> str | None:
        return None

    async def delete(self, key: str) -> None:
        try:
            await asyncio.to_thread(self._path(key).unlink, missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot remove {key}: {exc.strerror}") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()  # what open() would give; mkstemp alone gives 0600


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- S3 / Cloudflare R2 -------------------------------------------------------------------------

# Errors that mean "these credentials may not do this", as R2 and S3 word them.
_AUTH_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden", "403"}
_MISSING_CODES = {"404", "NoSuchKey", "NotFound"}
_CHUNK = 1 << 20


class ObjectMissing(StorageError):
    """There is no object under the key."""


class ObjectTooLarge(StorageError):
    """The object is larger than the caller allows."""


def r2_config(max_attempts: int, connect_timeout: float, read_timeout: float) -> Any:
    """The botocore config R2 needs: region `auto`, checksums only when required (R2 rejects
    the ones current boto3 sends by default, and the failure looks like an auth error),
    standard retries with backoff (throttling, 5xx, timeouts), and explicit timeouts."""
    from botocore.config import Config

    return Config(
        region_name="auto",
        signature_version="s3v4",
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        max_pool_connections=64,
        s3={"addressing_style": "path"},
    )


class Bucket:
    """A boto3 client bound to one bucket. boto3 is synchronous, so calls run on a thread pool
    of their own; failures become StorageErrors that say what to check."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="s3")

    @classmethod
    def from_settings(cls, settings: BucketSettings) -> Bucket:
        """The bucket the settings name, with their keys (validation has checked all four are
        given): boto3's own credential chain is never consulted."""
        import boto3

        assert settings.bucket_name is not None, "the bucket settings are not given"

        client = boto3.client(
            "s3",
            endpoint_url=settings.bucket_endpoint_url,
            aws_access_key_id=settings.bucket_access_key_id,
            aws_secret_access_key=settings.bucket_secret_access_key,
            config=r2_config(
                settings.bucket_max_attempts,
                settings.bucket_connect_timeout_s,
                settings.bucket_read_timeout_s,
            ),
        )
        return cls(client, settings.bucket_name)

    async def run(self, fn: Any, /, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def call(self, op: str, key: str, fn: Any, /, **kwargs: Any) -> Any:
        """`fn` (a client method) on `key`; what the bucket or the way to it answers is a
        StorageError, and anything else (a fault of ours) goes on as it is."""
        try:
            return await self.run(lambda: fn(Bucket=self.name, Key=key, **kwargs))
        except BUCKET_ERRORS as exc:
            raise self.error(op, key, exc) from None

    async def head(self, key: str) -> dict[str, Any]:
        """The object's HEAD (its ContentLength, ETag and Metadata); ObjectMissing when none."""
        return await self.call("HEAD", key, self.client.head_object)

    async def folders(self, prefix: str) -> list[str]:
        """The folders right under `prefix`: one listing, with S3's delimiter."""
        try:
            page = await self.run(
                lambda: self.client.list_objects_v2(
                    Bucket=self.name, Prefix=f"{prefix}/", Delimiter="/"
                )
            )
        except BUCKET_ERRORS as exc:
            raise self.error("LIST", prefix, exc) from None
        return sorted(p["Prefix"].rstrip("/") for p in page.get("CommonPrefixes") or [])

    async def check_listing(self, prefix: str) -> None:
        """The bucket lists `prefix` with these credentials (a key at most), else StorageError."""
        try:
            await self.run(
                lambda: self.client.list_objects_v2(Bucket=self.name, Prefix=prefix, MaxKeys=1)
            )
        except BUCKET_ERRORS as exc:
            raise self.error("LIST", prefix, exc) from None

    def objects(self, prefix: str) -> Iterator[tuple[str, int, str]]:
        """Every object under `prefix` (key, size, ETag), a page of up to 1,000 at a time; it
        blocks on each page, so it is read in a thread."""
        pages = iter(
            self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=prefix)
        )
        while True:
            try:
                page = next(pages, None)
            except BUCKET_ERRORS as exc:
                raise self.error("LIST", prefix, exc) from None
            if page is None:
                return
            for obj in page.get("Contents") or []:
                yield obj["Key"], int(obj.get("Size") or 0), str(obj.get("ETag") or "")

    async def upload(
        self, path: Path, key: str, content_type: str, metadata: dict[str, str]
    ) -> None:
        """A local file into the bucket (in parts when it is large)."""
        from boto3.exceptions import S3UploadFailedError

        extra = {"ContentType": content_type, "Metadata": metadata}
        try:
            await self.run(
                lambda: self.client.upload_file(str(path), self.name, key, ExtraArgs=extra)
            )
        except (*BUCKET_ERRORS, S3UploadFailedError) as exc:
            raise self.error("PUT", key, exc) from None

    async def exists(self) -> bool:
        """False only when the endpoint says the bucket is not there."""
        try:
            await self.run(lambda: self.client.head_bucket(Bucket=self.name))
        except BUCKET_ERRORS as exc:
            return _code(exc) not in _MISSING_CODES | {"NoSuchBucket"}
        return True

    def error(self, op: str, key: str, exc: Exception) -> StorageError:
        code = _code(exc)
        where = f"{op} s3://{self.name}/{key}"
        if code in _MISSING_CODES:
            return ObjectMissing(f"no object {key!r} in bucket {self.name!r}")
        if code in _AUTH_CODES:
            return StorageError(
                f"{where}: access denied ({code}); check BUCKET_ACCESS_KEY_ID, "
                "BUCKET_SECRET_ACCESS_KEY and the token's permissions on this bucket"
            )
        if code == "NoSuchBucket":
            return StorageError(f"{where}: bucket {self.name!r} does not exist (BUCKET_NAME)")
        if code is None:
            return StorageError(
                f"{where}: the bucket could not be reached ({exc.__class__.__name__})"
            )
        return StorageError(f"{where}: {code} after retries ({exc})")


class S3Store:
    """Result objects in an S3-compatible bucket, under `key_prefix`."""

    kind = "s3"

    def __init__(self, bucket: Bucket, *, prefix: str = "", presign_expires_s: int = 3600) -> None:
        self.bucket = bucket
        self.key_prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.presign_expires_s = presign_expires_s

    @classmethod
    def from_settings(cls, settings: BucketSettings, bucket: Bucket | None = None) -> S3Store:
        return cls(
            bucket or Bucket.from_settings(settings),
            prefix=settings.bucket_prefix,
            presign_expires_s=settings.presign_expires_s,
        )

    @property
    def client(self) -> Any:
        return self.bucket.client

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket.name}/{key}"

    async def put(
        self, key: str, data: bytes, content_type: str, record: PageRecord | None = None
    ) -> None:
        metadata = record.metadata() if record else {}
        await self.bucket.call(
            "PUT",
            key,
            self.client.put_object,
            Body=data,
            ContentType=content_type,
            Metadata=metadata,
        )

    async def record(self, key: str) -> PageRecord | None:
        try:
            resp = await self.bucket.head(key)
        except ObjectMissing:
            return None
        return PageRecord.from_metadata(dict(resp.get("Metadata") or {}))

    async def read_text(self, key: str) -> str:
        resp = await self.bucket.call("GET", key, self.client.get_object)
        try:
            body = await self.bucket.run(resp["Body"].read)
        except BUCKET_ERRORS as exc:
            raise self.bucket.error("GET", key, exc) from None
        return body.decode("utf-8")

    def taken(self, prefix: str) -> str | None:
        return None  # a bucket's keys are names, not folders: any can prefix others

    async def delete(self, key: str) -> None:
        await self.bucket.call("DELETE", key, self.client.delete_object)

    async def presign(self, key: str) -> str | None:
        return await self.bucket.run(
            lambda: self.client.generate_presigned_url(
                "get_object",
                Params={"Bucket": self.bucket.name, "Key": key},
                ExpiresIn=self.presign_expires_s,
            )
        )


class BucketInputs:
    """Job inputs named by `key`: streamed from the bucket into a file, never whole in memory."""

    def __init__(self, bucket: Bucket) -> None:
        self.bucket = bucket

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket.name}/{key}"

    async def fetch(self, key: str, dest: BinaryIO, max_bytes: int) -> int:
        """Copy the object into `dest`; returns its size. ObjectMissing, ObjectTooLarge or
        StorageError when it cannot."""
        try:
            head = await self.bucket.head(key)
        except ObjectMissing:  # a HEAD's 404 has no body to tell a missing bucket by
            if not await self.bucket.exists():
                raise StorageError(
                    f"HEAD {self.uri(key)}: bucket {self.bucket.name!r} does not exist "
                    "(BUCKET_NAME)"
                ) from None
            raise
        size = int(head.get("ContentLength") or 0)
        if size > max_bytes:
            raise ObjectTooLarge(f"{self.uri(key)} is {size / 1e6:.1f} MB")
        resp = await self.bucket.call("GET", key, self.bucket.client.get_object)

        def copy() -> int:
            written = 0
            for chunk in resp["Body"].iter_chunks(_CHUNK):
                written += len(chunk)
                if written > max_bytes:
                    raise ObjectTooLarge(f"{self.uri(key)} is over {max_bytes / 1e6:g} MB")
                dest.write(chunk)
            return written

        try:
            return await self.bucket.run(copy)
        except BUCKET_ERRORS as exc:
            raise self.bucket.error("GET", key, exc) from None


#: what boto3 raises for an answer of the bucket's (ClientError) or for the way to it
#: (BotoCoreError: no connection, a timeout, a broken read)
BUCKET_ERRORS = (BotoCoreError, ClientError)


def _code(exc: Exception) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or "") or None
    return None


# --- which store ---------------------------------------------------------------------------


def open_store(
    settings: Settings, out_dir: Path | None = None
) -> tuple[Store, BucketInputs | None]:
    """The result store and the reader of inputs named by key. Results go to the bucket when
    bucket settings are present, unless a local folder is asked for; keys are read from the
    bucket whenever one is configured."""
    bucket_settings = settings.bucket
    if not bucket_settings.configured:
        return local_store(out_dir, settings), None
    bucket = Bucket.from_settings(bucket_settings)
    if out_dir is not None:
        return local_store(out_dir, settings), BucketInputs(bucket)
    log.info("store: s3://%s/%s", bucket_settings.bucket_name, bucket_settings.bucket_prefix)
    return S3Store.from_settings(bucket_settings, bucket), BucketInputs(bucket)


def local_store(out_dir: Path | None, settings: Settings) -> LocalStore:
    """The results folder, made now: one that cannot be written refuses every job at start,
    not each page as it is stored."""
    root = out_dir or settings.job.output_dir
    try:
        root.mkdir(parents=True, exist_ok=True)
        why = cannot_write(root)
    except (OSError, ValueError) as exc:
        why = str(exc)
    if why is not None:
        name = "the results folder" if out_dir else "OUTPUT_DIR"
        raise ConfigError(
            f"{name}={str(root)!r}: it cannot be written ({why}); accepted: a folder this "
            "worker may create and write to, or the four bucket settings (docs/settings.md)"
        )
    return LocalStore(root)


def cannot_write(path: Path) -> str | None:
    """Why `path` (a folder to write in, or a file to write again) cannot be written, or None.
    Tried, not asked (os.access): root passes every permission check, and a read-only or
    special file system refuses root too."""
    try:
        if path.is_dir():
            with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
                pass
        else:
            with path.open("ab"):  # neither truncated nor changed
                pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None
