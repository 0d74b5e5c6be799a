"""`vlm-ocr submit` over a corpus, against the stand-in endpoint over workers that answer at once
(each selected page stored as a line of text) and moto's S3 server as the bucket: what is tested
is the client's bookkeeping, and every job it sends is seen."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from vlm_ocr.client.corpus import CorpusOptions, CorpusRun
from vlm_ocr.client.listing import Corpus, bucket_lister
from vlm_ocr.client.report import Summary
from vlm_ocr.client.submit import Options
from vlm_ocr.settings import Settings
from vlm_ocr_lab.standins.instant_worker import InstantWorker
from vlm_ocr_lab.standins.local_endpoint import API_KEY, Router
from vlm_ocr_lab.standins.loopback_s3 import LoopbackS3

from .workers import BUCKET


class CorpusEndpoint:
    """Two workers (`worker` at two addresses) behind the stand-in endpoint (`router`)."""

    def __init__(
        self, s3: LoopbackS3, worker: type[InstantWorker] = InstantWorker, router=Router
    ) -> None:
        self.s3 = s3
        self.worker = worker(s3.endpoint, BUCKET)
        self.router = router([self.worker.url] * 2)

    def settings(self, **values: Any) -> Settings:
        return Settings(
            **self.s3.settings_update(BUCKET)
            | {"runpod_api_base": self.router.base, "runpod_api_key": API_KEY}
            | values
        )

    def run(
        self,
        *paths: Path | str,
        report: Path,
        lists: list[str] | tuple[str, ...] = (),
        gpu_price: float | None = None,
        **options: Any,
    ) -> tuple[Summary, list[dict[str, Any]]]:
        """One run over the paths (and list files); its summary and its report's lines."""
        corpus = Corpus([str(p) for p in paths], list(lists), BUCKET, "ocr/")
        run = CorpusRun(
            corpus, self.settings(), Options("e", poll_s=0.05, **options),
            CorpusOptions(report=report, gpu_price=gpu_price),
        )  # fmt: skip
        corpus.lister = bucket_lister(run.shared.store.bucket)
        summary = asyncio.run(run.run())
        return summary, [json.loads(line) for line in report.read_text().splitlines()]

    def jobs(self, base: str) -> list[Any]:
        """The jobs sent for documents under the bucket folder `base`."""
        return [j for j in self.router.jobs.values() if j.input["output_prefix"].startswith(base)]

    def stop(self) -> None:
        self.router.stop()
        self.worker.stop()
