"""The model's weights at start, for an image that bakes none (the RunPod Hub variant).

With `HF_HUB_OFFLINE=false` the worker first looks where RunPod's cached-models feature puts an
endpoint's model (`/runpod-volume/huggingface-cache/hub`) and uses it from there when it is
whole. Otherwise it runs the builder's download script (`MODEL_DOWNLOADER`)
with the engine's interpreter before it starts the engine: into the network volume's Hugging Face
cache when one is mounted (the workers of an endpoint share it, and a lock file there makes them
download once), into the container otherwise (each cold start then downloads again, and the log
says so). The script checks every shard as the image build does; its progress goes to the log.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import re
from typing import Any

from ..errors import EngineError
from .model_files import ModelFiles

log = logging.getLogger(__name__)


async def ensure_model(files: ModelFiles, python: str) -> dict[str, Any] | None:
    """Download and check the model unless the image has it, running the download script with
    `python` (the engine's interpreter); returns the download record (or None when nothing had
    to be downloaded). The engine must then read HF_HOME = `home`."""
    settings = files.settings
    if settings.hf_hub_offline or files.local_dir() is not None:
        return None
    cached = files.snapshot(files.runpod_cache())
    if cached is not None:
        log.info("model %s: RunPod's model cache has it (%s)", settings.model_name, cached[0])
        return {
            "repo": settings.model_name,
            "revision": settings.model_revision,
            "resolved_commit": cached[1],
            "hub_cache": str(files.runpod_cache()),
        }
    home = files.download_home()
    volume = files.volume
    if not str(home).startswith(str(volume)):
        log.warning(
            "no network volume at %s: downloading %s into the container; every cold start will "
            "download it again (attach a network volume to keep it)",
            volume,
            settings.model_name,
        )
    slug = re.sub(r"[^A-Za-z0-9._-]+", "--", settings.model_name)
    record = home / "downloaded" / f"{slug}.json"
    argv = [
        python,
        settings.model_downloader,
        "--model",
        settings.model_name,
        "--revision",
        settings.model_revision or "",
        "--cache-dir",
        str(home / "hub"),
        "--record",
        str(record),
        "--lock",
        str(home / "locks" / f"{slug}.lock"),
    ]
    env = dict(os.environ) | {"HF_HOME": str(home), "HF_HUB_OFFLINE": "0", "PYTHONUNBUFFERED": "1"}
    log.info("model %s: checking the cache in %s, downloading what is missing", slug, home)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    tail: collections.deque[str] = collections.deque(maxlen=20)
    assert proc.stdout is not None
    async for raw in proc.stdout:
        for line in raw.decode(errors="replace").replace("\r", "\n").splitlines():
            if line.strip():
                tail.append(line.strip())
                log.info("model download: %s", line.strip())
    if await proc.wait() != 0:
        lines = list(tail)
        start = next((i for i, line in enumerate(lines) if "FAILED" in line), len(lines) - 1)
        why = "; ".join(lines[start:]) or "no output"
        raise EngineError(
            f"the model {settings.model_name} could not be downloaded: {why}", fatal=True
        )
    doc = json.loads(record.read_text())
    return {k: doc.get(k) for k in ("repo", "revision", "resolved_commit", "bytes")} | {
        "home": str(home)
    }
