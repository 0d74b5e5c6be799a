"""RunPod serverless entry point.

Cold start: parse settings, start the engine and warm it with a real rendered page, then hand
jobs to the worker. One worker takes up to MAX_CONCURRENT_JOBS jobs at once; their pages share
the engine. See README.md for the job input and result.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import runpod

from vlm_ocr.app import build_worker
from vlm_ocr.errors import ConfigError
from vlm_ocr.runtime import WorkerLoop
from vlm_ocr.settings import Settings
from vlm_ocr.worker import Worker

log = logging.getLogger("vlm_ocr.handler")
# After a job that saw the engine die, give the SDK time to deliver the result, then exit non-zero
# so RunPod replaces this worker (the result also carries `refresh_worker`).
EXIT_AFTER_ENGINE_FAILURE_S = 5.0
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def on_runpod() -> bool:
    """True inside a RunPod worker (the SDK is given its job queue's address)."""
    return bool(os.environ.get("RUNPOD_WEBHOOK_GET_JOB"))


def make_handler(loop: WorkerLoop, worker: Worker) -> Handler:
    async def handler(job: dict[str, Any]) -> dict[str, Any]:
        def progress(update: dict[str, Any]) -> None:
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

        result = await loop.submit(worker.run(job["id"], job.get("input"), progress))
        if not on_runpod():
            print(json.dumps(result, ensure_ascii=False, indent=2), flush=True)
        if worker.engine.failure:
            log.error(
                "engine failed (%s); exiting in %.0f s",
                worker.engine.failure,
                EXIT_AFTER_ENGINE_FAILURE_S,
            )
            timer = threading.Timer(EXIT_AFTER_ENGINE_FAILURE_S, os._exit, args=(1,))
            timer.daemon = True
            timer.start()
        return result

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

    runpod.serverless.start(
        {"handler": make_handler(loop, worker), "concurrency_modifier": concurrency_modifier}
    )


if __name__ == "__main__":
    main()
