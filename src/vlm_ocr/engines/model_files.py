"""Where the model's files are: one answer for `ENGINE=auto`, the family, the engine server and
the facts.

`MODEL_NAME` is a local folder, or a Hugging Face id found in a hub cache: the image's baked
cache (`HF_HOME`, with `baked-model.json` saying what was baked), RunPod's cache of an
endpoint's model (its cached-models feature, on the network volume), or the download cache of an
image that bakes none (the network volume's, else the container's).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..settings import ModelSettings

NETWORK_VOLUME = Path("/runpod-volume")  # where RunPod mounts a serverless network volume
# where RunPod's cached-models feature puts an endpoint's model (a Hugging Face hub cache)
RUNPOD_CACHE = Path("huggingface-cache") / "hub"
_COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class ModelFiles:
    settings: ModelSettings
    # read when a ModelFiles is made, not when the class is: the test suite points it away from
    # a machine's own /runpod-volume
    volume: Path = field(default_factory=lambda: NETWORK_VOLUME)

    @property
    def name(self) -> str:
        return self.settings.model_name

    def local_dir(self) -> Path | None:
        """MODEL_NAME when it is a folder."""
        path = Path(self.name)
        return path if path.is_dir() else None

    def home(self) -> Path:
        """The Hugging Face home the engine reads: HF_HOME, else the user's default."""
        return Path(self.settings.hf_home or Path.home() / ".cache" / "huggingface")

    def hub_cache(self) -> Path:
        return Path(self.settings.hf_hub_cache or self.home() / "hub")

    @property
    def slug(self) -> str:
        return f"models--{self.name.replace('/', '--')}"

    def present(self) -> bool:
        """A local folder, or the hub id in a hub cache the engine reads (a model downloaded at
        an earlier start included)."""
        caches = (self.hub_cache(), self.runpod_cache(), self.download_home() / "hub")
        return self.local_dir() is not None or any((c / self.slug).is_dir() for c in caches)

    def runpod_cache(self) -> Path:
        return self.volume / RUNPOD_CACHE

    def snapshot(self, cache: Path) -> tuple[Path, str] | None:
        """The model's snapshot folder in a hub cache and its commit: MODEL_REVISION's, else
        the default branch's."""
        repo = cache / self.slug
        revision = self.settings.model_revision or "main"
        ref = repo / "refs" / revision
        try:
            commit = ref.read_text().strip() if ref.is_file() else revision
        except OSError:
            return None
        folder = repo / "snapshots" / commit
        if not _COMMIT.fullmatch(commit) or not folder.is_dir():
            return None
        return folder, commit

    def folder(self) -> Path | None:
        """Where the model's files are on this machine now, if they are."""
        if (local := self.local_dir()) is not None:
            return local
        for cache in (self.hub_cache(), self.runpod_cache(), self.download_home() / "hub"):
            if found := self.snapshot(cache):
                return found[0]
        return None

    def config(self) -> dict[str, Any] | None:
        """The model's config.json, when its files are here."""
        folder = self.folder()
        try:
            return json.loads((folder / "config.json").read_text()) if folder else None
        except (OSError, ValueError):
            return None

    def baked(self) -> dict[str, Any] | None:
        """What the image build baked (builder/download_model.py), without the file list."""
        if not self.settings.hf_home:
            return None
        path = Path(self.settings.hf_home) / "baked-model.json"
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return {k: doc.get(k) for k in ("repo", "revision", "resolved_commit", "bytes", "baked_at")}

    def download_home(self) -> Path:
        """Where a model downloaded at start goes: HF_HOME, else the network volume (shared by
        the endpoint's workers), else the container."""
        if self.settings.hf_home:
            return Path(self.settings.hf_home)
        if self.volume.is_dir():
            return self.volume / "hf"
        return Path.home() / ".cache" / "huggingface"
