"""The RunPod entry: settings, the worker, and the handler functions the SDK calls.

Cold start: parse settings, start the engine and warm it with a real rendered page, then hand
jobs to the worker. One worker takes up to MAX_CONCURRENT_JOBS jobs at once; their pages share
the engine. See docs/job.md for the job input and result.

On RunPod (and under the SDK's local API server) the handler streams: each page's outcome is
yielded the moment it is stored (`PageItem`), and the last item is the whole job result
(`ResultItem`), or its error when RunPod should mark the job failed (`FailedItem`); RunPod's
`/stream` shows the pages as they finish, `/run` + `/status` the aggregated list.
`--test_input` runs one job and prints its result (`one_shot`: the job checked before the engine
starts, the result alone on stdout).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import runpod

from ..contract import JobResult, PageItem, final_item
from ..errors import ConfigError
from ..pipeline.worker import Worker, build_worker
from ..settings import Settings
from .arguments import check_arguments
from .one_shot import OneShot, is_one_shot
from .runtime import Finished, WorkerLoop
from .sdk_log import quiet_sdk

log = logging.getLogger("vlm_ocr.handler")
# After a job that saw the engine die, give the SDK time to deliver the result, then exit non-zero
# so RunPod replaces this worker (the result also carries `refresh_worker`).
EXIT_AFTER_ENGINE_FAILURE_S = 5.0
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
Show = Callable[[dict[str, Any]], None]
StreamHandler = Callable[[dict[str, Any]], AsyncIterator[dict[str, Any]]]


def on_runpod() -> bool:
    """True inside a RunPod worker (the SDK is given its job queue's address)."""
    return bool(os.environ.get("RUNPOD_WEBHOOK_GET_JOB"))


def report_progress(job: dict[str, Any], item: PageItem) -> None:
    """RunPod's progress update for one page (on RunPod), and a log line."""
    update = item.progress()
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


def exit_if_engine_failed(worker: Worker, result: JobResult) -> None:
    if result.refresh_worker or worker.engine.failure:
        log.error(
            "engine failed (%s); exiting in %.0f s",
            worker.engine.failure,
            EXIT_AFTER_ENGINE_FAILURE_S,
        )
        timer = threading.Timer(EXIT_AFTER_ENGINE_FAILURE_S, os._exit, args=(1,))
        timer.daemon = True
        timer.start()


def make_handler(loop: WorkerLoop, worker: Worker, show: Show) -> Handler:
    """One job, one result, shown: `--test_input` (the SDK's local run takes no generator;
    `show` may end the run with the result's exit status)."""

    async def handler(job: dict[str, Any]) -> dict[str, Any]:
        result = await loop.submit(
            worker.run(job["id"], job.get("input"), lambda item: report_progress(job, item))
        )
        out = result.wire()
        exit_if_engine_failed(worker, result)
        show(out)  # a one-shot run may end here
        return out

    return handler


def make_one_shot_handler(loop: WorkerLoop, worker: Worker, one_shot: OneShot) -> Handler:
    """`make_handler` for `--test_input`, with the worker's own SIGINT handler put back: the
    SDK's start() sets one that exits with status 0, a traceback for each task still running
    and the engine left to die with its parent."""
    handler = make_handler(loop, worker, one_shot.finish)

    async def one_job(job: dict[str, Any]) -> dict[str, Any]:
        stop_on_signals(worker)  # the SDK runs this job on the main thread
        return await handler(job)

    return one_job


def make_stream_handler(loop: WorkerLoop, worker: Worker) -> StreamHandler:
    """Pages as they are stored, then the job result (RunPod and the local API server)."""

    async def handler(job: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        def run(emit: Callable[[PageItem], None]) -> Any:
            def on_page(item: PageItem) -> None:
                report_progress(job, item)
                emit(item)

            return worker.run(job["id"], job.get("input"), on_page)

        # closed with the handler, so that a job the SDK cancels is cancelled then, not when
        # the stream is collected
        async with contextlib.aclosing(loop.stream(run)) as items:
            async for item in items:
                if isinstance(item, Finished):
                    result: JobResult = item.value
                    exit_if_engine_failed(worker, result)
                    yield final_item(result).model_dump(mode="json", exclude_none=True)
                else:
                    yield item.model_dump(mode="json", exclude_none=True)

    return handler


def refuse_all(reason: str) -> Handler:
    """Every job is answered with why this worker cannot run any (a misconfiguration)."""

    async def handler(job: dict[str, Any]) -> dict[str, Any]:
        return JobResult.refused(job["id"], misconfigured(reason)).wire()

    return handler


def stop_on_signals(worker: Worker) -> None:
    """SIGTERM (RunPod stopping the worker) or SIGINT: end the engine and the render processes,
    then exit, so no engine outlives its worker."""

    def stop(signum: int, frame: object) -> None:
        log.warning("got %s; stopping the engine and exiting", signal.Signals(signum).name)
        try:
            worker.terminate()
        finally:  # whatever ending them raised: the exit is what was asked
            os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)


def misconfigured(reason: str) -> str:
    return f"the worker is misconfigured: {reason}"


def refuse(reason: str, one_shot: OneShot | None) -> None:
    """Settings no job can run with: a one-shot run is refused at once; a worker stays up and
    says why to every job (a restart would fail the same way)."""
    log.error("this worker cannot run jobs with its settings: %s", reason)
    if one_shot is not None:
        one_shot.refuse(misconfigured(reason))
    runpod.serverless.start({"handler": refuse_all(reason)})


def main() -> None:
    check_arguments(sys.argv)  # before anything starts: the SDK would ignore a misspelled option
    one_shot = OneShot.begin(sys.argv) if is_one_shot(sys.argv, os.environ) else None
    if one_shot is None:  # the SDK's DEBUG lines would log every item: its URLs and text
        quiet_sdk(sys.argv, "INFO")
    try:
        settings: Settings | None = Settings.from_env(os.environ)
    except ConfigError as exc:
        settings, refusal = None, exc
    # force: importing runpod has configured the root logger already, which would ignore ours
    logging.basicConfig(
        level=settings.job.log_level if settings else "INFO",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    if settings is None:  # a value no job can run with
        return refuse(str(refusal), one_shot)
    if one_shot is not None:  # its input read and checked before any engine starts
        one_shot.check(settings)
    loop = WorkerLoop()
    try:
        worker = build_worker(settings)
    except ConfigError as exc:  # settings no GPU layout or model family can run
        return refuse(str(exc), one_shot)
    stop_on_signals(worker)
    try:
        loop.run(worker.start())
    except ConfigError as exc:
        worker.terminate()
        return refuse(str(exc), one_shot)
    except Exception as exc:
        log.error("cold start failed; this worker takes no jobs: %s", exc)
        worker.terminate()
        if one_shot is not None:
            one_shot.refuse(f"the engine did not start: {exc}")
        sys.exit(1)

    def concurrency_modifier(current: int) -> int:
        return worker.jobs_at_once

    # The SDK's local run cannot iterate a generator; everywhere else the handler streams.
    runpod.serverless.start(
        {
            "handler": make_one_shot_handler(loop, worker, one_shot)
            if one_shot is not None
            else make_stream_handler(loop, worker),
            "concurrency_modifier": concurrency_modifier,
            "return_aggregate_stream": True,
        }
    )
