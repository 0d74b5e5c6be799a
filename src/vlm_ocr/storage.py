"""Where results go: a local folder, or an S3 bucket (Cloudflare R2) — one interface for both.

Key layout, relative to the store's root (the output folder, or `BUCKET_PREFIX/` in a bucket):

    <prefix>/page-0001.md                one object per page (1-based page number, 4+ digits)
    <prefix>/failed/page-0003.partial.md best partial text of a page that failed, if any
    <prefix>/manifest.json               the job manifest

`<prefix>` is the job's `output_prefix`, or its RunPod job id. Reported keys are the real object
keys (in a bucket they start with `BUCKET_PREFIX/`).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .errors import InputError, StorageError

TEXT_TYPE = "text/markdown; charset=utf-8"
JSON_TYPE = "application/json"


@dataclass(frozen=True)
class JobKeys:
    prefix: str

    def page(self, number: int) -> str:
        return f"{self.prefix}/page-{number:04d}.md"

    def partial(self, number: int) -> str:
        return f"{self.prefix}/failed/page-{number:04d}.partial.md"

    @property
    def manifest(self) -> str:
        return f"{self.prefix}/manifest.json"


class Store(Protocol):
    """An object store. Keys are relative to the store's root; metadata is str → str."""

    kind: str
    #: prepended to every job's result keys (the bucket's BUCKET_PREFIX)
    key_prefix: str

    def uri(self, key: str) -> str: ...

    async def put(
        self, key: str, data: bytes, content_type: str, metadata: dict[str, str] | None = None
    ) -> None: ...

    async def head(self, key: str) -> dict[str, str] | None:
        """The object's metadata, or None when there is no such object."""
        ...

    async def get(self, key: str, *, max_bytes: int, field: str) -> bytes:
        """Read an input object; errors are InputErrors naming `field`."""
        ...

    async def read_text(self, key: str) -> str: ...

    async def presign(self, key: str) -> str | None: ...


async def put_json(store: Store, key: str, doc: Any) -> None:
    data = json.dumps(doc, ensure_ascii=False, indent=2).encode()
    await store.put(key, data, JSON_TYPE)


class LocalStore:
    """A folder on disk. Page metadata lives beside each object in `.meta/<key>.json`."""

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

    async def put(
        self, key: str, data: bytes, content_type: str, metadata: dict[str, str] | None = None
    ) -> None:
        await asyncio.to_thread(self._put, key, data, metadata)

    def _put(self, key: str, data: bytes, metadata: dict[str, str] | None) -> None:
        try:
            _atomic_write(self._path(key), data)
            meta = self._meta_path(key)
            if metadata:
                _atomic_write(meta, json.dumps(metadata).encode())
            else:
                meta.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot write {key} under {self.root}: {exc}") from None

    async def head(self, key: str) -> dict[str, str] | None:
        path, meta = self._path(key), self._meta_path(key)
        if not path.is_file():
            return None
        try:
            return json.loads(meta.read_text()) if meta.is_file() else {}
        except (OSError, ValueError):
            return {}

    async def get(self, key: str, *, max_bytes: int, field: str) -> bytes:
        raise InputError(
            field,
            "inputs named by `key` are read from the bucket, and no bucket is configured; "
            "set BUCKET_NAME and its credentials, or send `base64` or `url`",
        )

    async def read_text(self, key: str) -> str:
        try:
            return self._path(key).read_text(encoding="utf-8")
        except OSError as exc:
            raise StorageError(f"cannot read {key} under {self.root}: {exc}") from None

    async def presign(self, key: str) -> str | None:
        return None


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- S3 / Cloudflare R2 -------------------------------------------------------------------------

# Errors that mean "these credentials may not do this", as R2 and S3 word them.
_AUTH_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden", "403"}


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


class S3Store:
    """Objects in an S3-compatible bucket. Result keys carry `key_prefix`; input keys are used
    as given. boto3 is synchronous, so calls run on a thread pool of their own."""

    kind = "s3"

    def __init__(
        self, client: Any, bucket: str, *, prefix: str = "", presign_expires_s: int = 3600
    ) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.client = client
        self.bucket = bucket
        self.key_prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.presign_expires_s = presign_expires_s
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="s3")

    @classmethod
    def from_settings(cls, settings: Any) -> S3Store:
        import boto3

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
        return cls(
            client,
            settings.bucket_name,
            prefix=settings.bucket_prefix,
            presign_expires_s=settings.presign_expires_s,
        )

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    async def _call(self, fn: Any, /, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(Bucket=self.bucket, **kwargs))

    async def put(
        self, key: str, data: bytes, content_type: str, metadata: dict[str, str] | None = None
    ) -> None:
        try:
            await self._call(
                self.client.put_object,
                Key=key,
                Body=data,
                ContentType=content_type,
                Metadata=metadata or {},
            )
        except Exception as exc:
            raise StorageError(self._explain("PUT", key, exc)) from None

    async def head(self, key: str) -> dict[str, str] | None:
        try:
            resp = await self._call(self.client.head_object, Key=key)
        except Exception as exc:
            if _code(exc) in {"404", "NoSuchKey", "NotFound"}:
                return None
            raise StorageError(self._explain("HEAD", key, exc)) from None
        return dict(resp.get("Metadata") or {})

    async def read_text(self, key: str) -> str:
        try:
            resp = await self._call(self.client.get_object, Key=key)
            body = await asyncio.get_running_loop().run_in_executor(self._pool, resp["Body"].read)
        except Exception as exc:
            raise StorageError(self._explain("GET", key, exc)) from None
        return body.decode("utf-8")

    async def get(self, key: str, *, max_bytes: int, field: str) -> bytes:
        try:
            head = await self._call(self.client.head_object, Key=key)
            size = int(head.get("ContentLength") or 0)
            if size > max_bytes:
                raise InputError(
                    field,
                    f"s3://{self.bucket}/{key} is {size / 1e6:.1f} MB, over the "
                    f"{max_bytes / 1e6:g} MB limit (MAX_DOWNLOAD_BYTES)",
                )
            resp = await self._call(self.client.get_object, Key=key)
            return await asyncio.get_running_loop().run_in_executor(self._pool, resp["Body"].read)
        except InputError:
            raise
        except Exception as exc:
            code = _code(exc)
            if code in {"404", "NoSuchKey", "NotFound"}:
                raise InputError(
                    field, f"no object {key!r} in bucket {self.bucket!r}; upload it first"
                ) from None
            raise InputError(field, self._explain("GET", key, exc)) from None

    async def presign(self, key: str) -> str | None:
        return await asyncio.get_running_loop().run_in_executor(
            self._pool,
            lambda: self.client.generate_presigned_url(
                "get_object",
                Params={"Bucket": self.bucket, "Key": key},
                ExpiresIn=self.presign_expires_s,
            ),
        )

    def _explain(self, op: str, key: str, exc: Exception) -> str:
        code = _code(exc)
        where = f"{op} s3://{self.bucket}/{key}"
        if code in _AUTH_CODES:
            return (
                f"{where}: access denied ({code}); check BUCKET_ACCESS_KEY_ID, "
                "BUCKET_SECRET_ACCESS_KEY and the token's permissions on this bucket"
            )
        if code == "NoSuchBucket":
            return f"{where}: bucket {self.bucket!r} does not exist (BUCKET_NAME)"
        if code is None:
            return f"{where}: the bucket could not be reached ({exc.__class__.__name__}: {exc})"
        return f"{where}: {code} after retries ({exc})"


def _code(exc: Exception) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or "") or None
    return None
