"""The model download at start (the Hub image, which bakes no weights): the real download script
and the hub client, against the client's own cache layout, with the hub itself unreachable."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import threading
from pathlib import Path

import pytest

from vlm_ocr.engines.model_download import ensure_model
from vlm_ocr.engines.model_files import ModelFiles
from vlm_ocr.errors import EngineError
from vlm_ocr.settings import Settings

from .support import ROOT, free_port, make_snapshot
from .support.engine import engine_python

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A volume whose Hugging Face cache holds acme/tiny-vl as the hub client lays it out; the
    hub's address is a loopback port nothing listens on, so only the cache can answer."""
    volume = tmp_path / "volume"
    repo = volume / "hf" / "hub" / "models--acme--tiny-vl"
    make_snapshot(repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    return volume


def files(volume: Path, **values: object) -> ModelFiles:
    settings = Settings(
        **{
            "model_name": "acme/tiny-vl",
            "hf_hub_offline": False,
            "model_downloader": str(ROOT / "builder" / "download_model.py"),
        }
        | values
    )
    return ModelFiles(settings.model, volume)


def download(loop, volume: Path) -> dict | None:
    return loop.run(ensure_model(files(volume), str(engine_python())))


def test_baked_images_and_local_models_download_nothing(loop, tmp_path: Path) -> None:
    python = str(engine_python())
    assert loop.run(ensure_model(files(tmp_path, hf_hub_offline=True), python)) is None
    local = files(tmp_path, model_name=str(tmp_path))
    assert loop.run(ensure_model(local, python)) is None


def test_the_model_goes_to_the_volume_and_is_checked(loop, hub_cache: Path, caplog) -> None:
    caplog.set_level(logging.INFO)
    done = download(loop, hub_cache)
    assert done is not None and done["resolved_commit"] == COMMIT
    assert done["home"] == str(hub_cache / "hf") and done["bytes"] > 0
    assert "downloading acme/tiny-vl" in caplog.text and "2 weight files" in caplog.text
    assert (hub_cache / "hf" / "locks" / "acme--tiny-vl.lock").is_file()
    assert "no network volume" not in caplog.text
    # without a volume the cache is the container's, and the log says what that costs
    assert files(hub_cache / "none").download_home() == Path.home() / ".cache/huggingface"


def test_a_killed_download_fails_clearly_and_the_next_start_completes_it(
    loop, hub_cache: Path
) -> None:
    shard = next((hub_cache / "hf/hub").rglob("model-00001-of-00002.safetensors"))
    whole = shard.read_bytes()
    shard.write_bytes(whole[:-100])  # as a download killed part-way leaves it
    with pytest.raises(EngineError) as info:
        download(loop, hub_cache)
    assert "could not be downloaded" in str(info.value)
    assert "model-00001-of-00002.safetensors: 3,975 bytes, its header says 4,075" in str(info.value)
    shard.write_bytes(whole)  # what the next start's download resumes to
    assert (download(loop, hub_cache) or {})["resolved_commit"] == COMMIT


def test_workers_of_one_endpoint_download_one_at_a_time(loop, hub_cache: Path, caplog) -> None:
    caplog.set_level(logging.INFO)
    lock = hub_cache / "hf" / "locks" / "acme--tiny-vl.lock"
    lock.parent.mkdir(parents=True)
    waiting = threading.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting for another worker's download" in record.getMessage():
                waiting.set()

    watch = Watch()
    logging.getLogger("vlm_ocr.engines.model_download").addHandler(watch)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another worker is downloading
        future = asyncio.run_coroutine_threadsafe(
            ensure_model(files(hub_cache), str(engine_python())), loop.loop
        )
        assert waiting.wait(120), "the second worker must wait for the first"
        assert not future.done()
        fcntl.flock(fd, fcntl.LOCK_UN)
        assert future.result(timeout=120)["resolved_commit"] == COMMIT
    finally:
        os.close(fd)
        logging.getLogger("vlm_ocr.engines.model_download").removeHandler(watch)
