"""Where results go: a local folder, or an S3 bucket (Cloudflare R2) — one interface for both.

Key layout, relative to the store's root (the output folder, or `BUCKET_PREFIX/` in a bucket):

    <prefix>/page-0001.md                one object per page (1-based page number, 4+ digits)
    <prefix>/failed/page-0003.partial.md best partial text of a page that failed, if any
    <prefix>/manifest.json               the job manifest

`<prefix>` is the job's `output_prefix`, or its RunPod job id.
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
        return self._path(key).read_text(encoding="utf-8")

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
