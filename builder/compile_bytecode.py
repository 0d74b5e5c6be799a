"""Compile the folders that hold the named packages to bytecode, once, at the image's build.

A container starts with an empty writable layer, so without this every cold start compiles
vLLM's and torch's sources again (about 5 s of each of the engine's two processes' 25 s of
imports, measured on an H200). Each package's site folder is compiled wherever it lies (one
site-packages in the base image, or several); files that do not compile (templates, tests for
other Pythons) are left as they are.

    python compile_bytecode.py torch transformers vllm
"""

from __future__ import annotations

import compileall
import importlib
import sys
from pathlib import Path


def site_folders(packages: list[str]) -> list[Path]:
    """The folders the packages are installed in, each once."""
    found = {Path(importlib.import_module(name).__file__ or "").parent.parent for name in packages}
    return sorted(found)


def main(argv: list[str]) -> int:
    for folder in site_folders(argv):
        # quiet=2: the files that do not compile are expected; their errors say nothing here
        compileall.compile_dir(folder, quiet=2, workers=0)
        print(f"compiled: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
