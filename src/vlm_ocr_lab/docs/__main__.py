"""`python -m vlm_ocr_lab.docs`: every part of the docs that is written from the code or the
data, written again in one go (the tests fail until it has run after a change):

    README.md            the families' table and "how to choose" (FAMILIES, benchmarks/gpu.jsonl)
    docs/models.md       the families' tables; the measured starts and limits (gpu.jsonl)
    docs/deploying.md    the measured starts; a corpus's workers and price by family (gpu.jsonl)
    docs/tools.md        the bench runs (gpu.jsonl)
    docs/settings.md     the settings table (settings.py)
    .runpod/hub.json     the Hub's description and model presets (FAMILIES) and its settings
                         with the image's defaults (settings.py, .runpod/Dockerfile)
"""

from __future__ import annotations

import json
from pathlib import Path

from vlm_ocr_lab.docs import (
    corpus_docs,
    family_docs,
    generated,
    hub_presets,
    measured_docs,
    settings_docs,
)

ROOT = Path(__file__).resolve().parents[3]


def write_all(root: Path = ROOT) -> list[Path]:
    for name in ("README.md", "docs/models.md"):
        family_docs.write(root / name)
    for name in ("docs/models.md", "docs/deploying.md", "docs/tools.md"):
        path = root / name
        generated.write(path, measured_docs.parts(path.read_text(encoding="utf-8")))
    corpus = {name: make() for name, make in corpus_docs.REGIONS.items()}
    generated.write(root / "docs/deploying.md", corpus)
    generated.write(root / "docs/settings.md", {"settings": settings_docs.markdown_table()})
    hub = root / ".runpod/hub.json"
    hub_presets.write(hub)
    image = settings_docs.image_env((root / ".runpod/Dockerfile").read_text(encoding="utf-8"))
    data = json.loads(hub.read_text(encoding="utf-8"))
    data["config"]["env"] = settings_docs.hub_env(image)
    hub.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return [root / n for n in ("README.md", "docs", ".runpod/hub.json")]


if __name__ == "__main__":
    for path in write_all():
        print(f"written: {path.relative_to(ROOT)}")
