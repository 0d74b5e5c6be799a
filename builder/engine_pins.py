"""The engine's packages that MODEL_NAME's family needs at versions of its own, for the image's
build to install into the engine's Python (the base image's, which has vLLM).

    /opt/worker/bin/python /opt/builder/engine_pins.py --vllm VERSION

prints one requirement a line (nothing for a family that runs on the image's packages). The
family is told as the worker tells it at start: from the environment's MODEL_NAME (and
MODEL_FAMILY), and the config.json of the weights the image baked when there is one. It fails,
saying why, when the image's vLLM (VERSION) is one the family's makers say breaks their models.
Run with the worker's interpreter: it reads the families from the worker's package.
"""

from __future__ import annotations

import argparse
import os
import sys

from vlm_ocr.engines.families import detect
from vlm_ocr.engines.model_files import ModelFiles
from vlm_ocr.settings import Settings


def pins(environ: dict[str, str], vllm: str) -> list[str]:
    settings = Settings.from_env(environ)
    model = settings.model
    config = ModelFiles(model).config()
    family = detect(config, model.model_name, model.model_family).family
    release = vllm.split("+", 1)[0]  # a local build's suffix (`0.32.0+cpu`) aside
    if release in family.broken_vllm:
        raise SystemExit(
            f"{model.model_name} is of the {family.name} family, which does not run on vLLM "
            f"{release} (the image's): {family.broken_vllm[release]}; build with another "
            "VLLM_VERSION"
        )
    return list(family.engine_pins)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm", required=True, help="the engine's vLLM version")
    args = parser.parse_args(argv)
    for line in pins(dict(os.environ), args.vllm):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
