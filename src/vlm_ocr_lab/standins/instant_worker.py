"""A worker that answers at once, for measuring the client at scale (`vlm-ocr-lab bench
--corpus`): the RunPod SDK local API's `/runsync` on loopback, each page a job selects stored
in the bucket as a line of text and reported with the contract's items, as the real worker
streams them. No page is rendered or read, so thousands of documents go through in minutes and
what is measured is the client's own work: listing, checking, uploading, following jobs,
writing manifests and whole texts."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from vlm_ocr.contract import (
    JobResult,
    PageItem,
    PageReport,
    ResultItem,
    Totals,
    parse_selection,
)
from vlm_ocr.storage import TEXT_TYPE

from .loopback_s3 import s3_client


class InstantWorker:
    """`/runsync` on a loopback port (`url`), storing into `bucket` under `prefix/`."""

    def __init__(self, endpoint: str, bucket: str, prefix: str = "ocr") -> None:
        self.client = s3_client(endpoint)
        self.bucket, self.prefix = bucket, prefix
        self.jobs = 0
        self.loop = asyncio.new_event_loop()
        import threading

        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()

    async def _start(self) -> str:
        app = web.Application()
        app.add_routes([web.post("/runsync", self._runsync)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    async def _runsync(self, request: web.Request) -> web.Response:
        job = (await request.json())["input"]
        self.jobs += 1
        output = await asyncio.to_thread(self.answer, f"instant-{self.jobs}", job)
        return web.json_response(
            {"id": f"instant-{self.jobs}", "status": "COMPLETED", "output": output}
        )

    def answer(self, job_id: str, job: dict[str, Any]) -> list[dict[str, Any]]:
        """The job's items: a page item for each page it selects (stored first), then its
        result."""
        if "images" in job:
            numbers = list(range(1, len(job["images"]) + 1))
        else:
            numbers = [
                n for lo, hi in parse_selection(job["pages"]) for n in range(lo, (hi or lo) + 1)
            ]
        folder = f"{self.prefix}/{job['output_prefix']}"
        pages = []
        for n in numbers:
            key = f"{folder}/page-{n:04d}.md"
            text = f"Page {n} of {job['output_prefix']}\n"
            self.client.put_object(
                Bucket=self.bucket, Key=key, Body=text.encode(), ContentType=TEXT_TYPE
            )
            pages.append(
                PageReport(page=n, source="instant", status="ok", key=key, chars=len(text))
            )
        items: list[dict[str, Any]] = [
            PageItem(done=i, total=len(pages), page=page).model_dump(mode="json", exclude_none=True)
            for i, page in enumerate(pages, 1)
        ]
        result = JobResult(
            job_id=job_id,
            status="ok",
            store="s3",
            prefix=job["output_prefix"],
            manifest_key=f"{folder}/manifest.json",
            pages=pages,
            totals=Totals.of(pages),
        )
        items.append(ResultItem(result=result).model_dump(mode="json", exclude_none=True))
        return items

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
