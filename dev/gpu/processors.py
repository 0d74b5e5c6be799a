"""Which image processor each model folder's pages go through, and on which backend: run with
the engine's interpreter (its transformers is the one vLLM uses), on dummy folders
(`make_dummy_model.py`) or real checkpoints.

    .venv-engine/bin/python dev/gpu/processors.py FOLDER...

vLLM builds dots.ocr's processor itself (Qwen2-VL's, with dots.ocr's image token), so that
folder is read the same way here.
"""

from __future__ import annotations

import sys


def describe(folder: str) -> str:
    from transformers import AutoConfig, AutoProcessor, Qwen2VLProcessor

    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    if config.model_type == "dots_ocr":
        processor = Qwen2VLProcessor.from_pretrained(folder, trust_remote_code=True)
    else:
        processor = AutoProcessor.from_pretrained(folder, trust_remote_code=True)
    images = getattr(processor, "image_processor", processor)
    backend = getattr(images, "backend", "unknown")
    return f"{folder}: {type(processor).__name__}, {type(images).__name__}, backend {backend}"


if __name__ == "__main__":
    for folder in sys.argv[1:]:
        print(describe(folder))
