"""The RunPod Hub's model presets (`.runpod/hub.json`'s `config.presets`), written from `FAMILIES`:
one for each checkpoint that names where it runs (`Checkpoint.preset`), with its makers'
olmOCR-bench figure and its licence; and the listing's description, which names the OCR families.
The tests compare the file with what this writes now.

    python -m vlm_ocr_lab.docs.family_docs --hub .runpod/hub.json   rewrite them in place
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vlm_ocr.engines.families import FAMILIES


def hub_presets() -> list[dict[str, Any]]:
    presets = []
    for family in FAMILIES.values():
        for c in family.checkpoints:
            if not c.preset:
                continue
            licence = c.licence or family.licence
            said = [f"{c.olmocr_bench:.1f} on olmOCR-bench"] if c.olmocr_bench else []
            said.append(licence if licence.startswith("Apache-2.0") else f"licence: {licence}")
            words = "; ".join(said)
            where = c.preset
            name = f"{where[:-1]}; {words})" if where.endswith(")") else f"{where} ({words})"
            defaults = {"MODEL_NAME": c.repo, **dict(c.preset_defaults), "MAX_NUM_SEQS": 0}
            presets.append({"name": f"{c.short}, {name}", "defaults": defaults})
    return presets


def description() -> str:
    chat, *others = FAMILIES.values()
    ocr = ", ".join(f.title for f in others if f.prompt is not None)
    return (
        "Turn PDFs and page images into text with a self-hosted vision-language model on vLLM: "
        f"{chat.checkpoints[0].short} by default, or an OCR model ({ocr}) served with its "
        "makers' prompt, page size and answer format. Every page is rendered, transcribed and "
        "stored in your Cloudflare R2 bucket with a job manifest; bad pages are reported, the "
        "others complete."
    )


def write(path: Path) -> None:
    hub = json.loads(path.read_text(encoding="utf-8"))
    hub["description"] = description()
    hub["config"]["presets"] = hub_presets()
    path.write_text(json.dumps(hub, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
