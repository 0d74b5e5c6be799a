"""Worker processes behind the stand-in endpoint, on a loopback bucket: what `vlm-ocr submit`
runs against in the tests, and the environment the command runs in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from vlm_ocr.settings import Settings
from vlm_ocr_lab.standins.local_endpoint import API_KEY, LocalEndpoint, worker_environ
from vlm_ocr_lab.standins.loopback_s3 import LoopbackS3, s3_client

from . import ROOT, SPARE_LIMITS_ENV, TEST_PIXELS

BUCKET = "fanout"
SAFETY_S = 600  # a wait that should end long before; only a hung test runs into it


def worker_env(s3: LoopbackS3, tmp: Path, bucket_url: str | None = None) -> dict[str, str]:
    return worker_environ(
        **SPARE_LIMITS_ENV
        | s3.env(BUCKET)
        | ({"BUCKET_ENDPOINT_URL": bucket_url} if bucket_url else {}),
        ENGINE="rapidocr",
        RENDER_PROCESSES="1",
        MAX_PIXELS=str(TEST_PIXELS),
        OUTPUT_DIR=str(tmp / "unused"),
        RUNPOD_LOG_LEVEL="ERROR",
        LOG_LEVEL="WARNING",
        UVICORN_LOG_LEVEL="warning",
    )


class Workers(LocalEndpoint):
    """Two CPU-engine workers behind the stand-in endpoint, on the loopback bucket."""

    def __init__(self, s3: LoopbackS3, tmp: Path, *, bucket_url: str | None = None) -> None:
        super().__init__(ROOT / "handler.py", worker_env(s3, tmp, bucket_url), 2)
        self.s3 = s3

    def settings(self, **values: Any) -> Settings:
        """The client's settings: this bucket, this endpoint."""
        return Settings(
            **self.s3.settings_update(BUCKET)
            | {"runpod_api_base": self.router.base, "runpod_api_key": API_KEY}
            | values
        )

    def client_env(self, **extra: str) -> dict[str, str]:
        """The environment `vlm-ocr submit` runs in, as a user would set it."""
        given = self.s3.env(BUCKET) | {"RUNPOD_API_BASE": self.router.base}
        return worker_environ(**given | {"RUNPOD_API_KEY": API_KEY} | extra)

    def submit(self, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
        """`vlm-ocr submit ARGS --endpoint e` as a user types it, to its end."""
        return subprocess.run(
            [sys.executable, "-m", "vlm_ocr", "submit", *args, "--endpoint", "e"],
            cwd=cwd,
            env=self.client_env(**env),
            capture_output=True,
            text=True,
            timeout=SAFETY_S,
        )


def read(s3: LoopbackS3, key: str) -> str:
    body = s3_client(s3.endpoint).get_object(Bucket=BUCKET, Key=key)["Body"].read()
    return body.decode()


def keys(s3: LoopbackS3, prefix: str) -> list[str]:
    pages = (
        s3_client(s3.endpoint)
        .get_paginator("list_objects_v2")
        .paginate(Bucket=BUCKET, Prefix=prefix)
    )
    return [obj["Key"] for page in pages for obj in page.get("Contents") or []]
