"""RunPod serverless entry point.

Cold start: parse settings, start the engine and warm it with a real rendered page, then hand
jobs to the worker. One worker takes up to MAX_CONCURRENT_JOBS jobs at once; their pages share
the engine. See README.md for the job input and result.

On RunPod (and under the SDK's local API server) the handler streams: each page's outcome is
yielded the moment it is stored, and the last item is the whole job result; RunPod's `/stream`
shows the pages as they finish, `/run` + `/status` the aggregated list. `--test_input` runs one
job and prints its result.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import runpod

from vlm_ocr.app import build_worker
from vlm_ocr.errors import ConfigError
from vlm_ocr.runtime import Finished, WorkerLoop
from vlm_ocr.settings import Settings
from vlm_ocr.worker import PageDone, Worker

log = logging.getLogger("vlm_ocr.handler")
# After a job that saw the engine die, give the SDK time to deliver the result, then exit non-zero
# so RunPod replaces this worker (the result also carries `refresh_worker`).
EXIT_AFTER_ENGINE_FAILURE_S = 5.0
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
StreamHandler = Callable[[dict[str, Any]], AsyncIterator[dict[str, Any]]]


def on_runpod() -> bool:
    """True inside a RunPod worker (the SDK is given its job queue's address)."""
    return bool(os.environ.get("RUNPOD_WEBHOOK_GET_JOB"))


def report_progress(job: dict[str, Any], event: PageDone) -> None:
    """RunPod's progress update for one page (on RunPod), and a log line."""
    update = event.update()
    if on_runpod():
        runpod.serverless.progress_update(job, update)
    log.info(
        "job %s: page %s %s (%s/%s)",
        job["id"],
        update["page"],
        update["status"],
        update["done"],
        update["total"],
    )


def exit_if_engine_failed(worker: Worker) -> None:
    if worker.engine.failure:
        log.error(
            "engine failed (%s); exiting in %.0f s",
            worker.engine.failure,
            EXIT_AFTER_ENGINE_FAILURE_S,
        )
        timer = threading.Timer(EXIT_AFTER_ENGINE_FAILURE_S, os._exit, args=(1,))
        timer.daemon = True
        timer.start()


def page_item(event: PageDone) -> dict[str, Any]:
    """One streamed page: its report under `page`, so no top-level `error` key makes the SDK
    take a failed page for a failed job."""
    return {
        "event": "page",
        "done": event.done,
        "total": event.total,
        "page": event.report.model_dump(mode="json", exclude_none=True),
    }


def result_item(result: dict[str, Any]) -> dict[str, Any]:
    """The stream's last item. A job that stored nothing, or that the engine or the store
    stopped (`retry`: submitting it again finishes it), ends as a failed RunPod job with its
    error; any other job completes with its whole result under `result` (status `ok`, or
    `partial` with pages its input made fail, and why)."""
    result.pop("refresh_worker", None)  # the process exits instead (exit_if_engine_failed)
    if result.get("status", "failed") == "failed" or result.get("retry"):
        return {"error": result.get("error") or "the job failed"}
    return {"event": "result", "result": result}


def make_handler(loop: WorkerLoop, worker: Worker) -> Handler:
    """One job, one result: `--test_input` (the SDK's local run takes no generator)."""

    async def handler(job: dict[str, Any]) -> dict[str, Any]:
        result = await loop.submit(
            worker.run(job["id"], job.get("input"), lambda event: report_progress(job, event))
        )
        if not on_runpod():
            print(json.dumps(result, ensure_ascii=False, indent=2), flush=True)
        exit_if_engine_failed(worker)
        return result

    return handler


def make_stream_handler(loop: WorkerLoop, worker: Worker) -> StreamHandler:
    """Pages as they are stored, then the job result (RunPod and the local API server)."""

    async def handler(job: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        def run(emit: Callable[[PageDone], None]) -> Any:
            def on_page(event: PageDone) -> None:
                report_progress(job, event)
                emit(event)

            return worker.run(job["id"], job.get("input"), on_page)

        async for item in loop.stream(run):
            if isinstance(item, Finished):
                exit_if_engine_failed(worker)
                yield result_item(item.value)
            else:
                yield page_item(item)

    return handler


def refuse_all(reason: str) -> Handler:
    async def handler(job: dict[str, Any]) -> dict[str, Any]:
        result = {"error": f"the worker is misconfigured: {reason}"}
        if not on_runpod():
            print(json.dumps(result, ensure_ascii=False, indent=2), flush=True)
        return result

    return handler


def stop_on_signals(worker: Worker) -> None:
    """SIGTERM (RunPod stopping the worker) or SIGINT: end the engine and the render processes,
    then exit, so no engine outlives its worker."""

    def stop(signum: int, frame: object) -> None:
        log.warning("got %s; stopping the engine and exiting", signal.Signals(signum).name)
        worker.terminate()
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)


def main() -> None:
    settings = Settings()
    # force: importing runpod has configured the root logger already, which would ignore ours
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    loop = WorkerLoop()
    worker = build_worker(settings)
    stop_on_signals(worker)
    try:
        loop.run(worker.start())
    except ConfigError as exc:
        # A restart would fail the same way: stay up and say why to every job instead.
        log.error("this worker cannot run jobs with its settings: %s", exc)
        worker.terminate()
        runpod.serverless.start({"handler": refuse_all(str(exc))})
        return
    except Exception as exc:
        log.error("cold start failed; this worker takes no jobs: %s", exc)
        worker.terminate()
        sys.exit(1)

    def concurrency_modifier(current: int) -> int:
        return settings.max_concurrent_jobs

    # The SDK's local run (`--test_input`, or no job queue and no `--rp_serve_api`) cannot
    # iterate a generator; everywhere else the handler streams.
    local_run = not on_runpod() and "--rp_serve_api" not in sys.argv
    runpod.serverless.start(
        {
            "handler": (make_handler if local_run else make_stream_handler)(loop, worker),
            "concurrency_modifier": concurrency_modifier,
            "return_aggregate_stream": True,
        }
    )


if __name__ == "__main__":
    main()
