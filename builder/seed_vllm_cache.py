"""Run vLLM's model-class inspection once, at image build time, into the folder the worker copies
into each new vLLM cache folder (`VLLM_CACHE_SEED`), so no start pays it.

    vllm-python builder/seed_vllm_cache.py --out /opt/vllm-cache-seed PATH...

Each PATH is a model's config.json, a folder of `*.config.json` files (the families' shapes in
`examples/`), a model folder with a config.json, or a Hugging Face cache (`models--*/snapshots/*/`
below it): the `architectures` they name are inspected.

On a start whose cache has no entry for the model's class, vLLM imports torch, itself and the
model's module again in a subprocess to learn what the class supports, and keeps the answer in
`$VLLM_CACHE_ROOT/modelinfos/<module>-<class>.json` with a hash of the module's source (read in
0.26 and 0.32: `model_executor/models/registry.py`, `_LazyRegisteredModel.inspect_model_cls`).
The answer is the class's own declarations, so no GPU is needed; vLLM uses the subprocess only
to keep CUDA out of the process that asks. Here the inspection runs in this process, which
imports vLLM once for every class, and vLLM itself writes the entries.

Runs with the engine's interpreter. A class that cannot be inspected is reported and left out:
the start then inspects it as it would without a seed. The exit status is 0 unless nothing could
be read at all (no architecture found in the paths).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def configs(path: Path) -> list[Path]:
    """The config.json files a path names or holds."""
    if path.is_file():
        return [path]
    found = sorted(path.glob("*.config.json")) + sorted(path.glob("config.json"))
    return found + sorted(path.glob("models--*/snapshots/*/config.json"))


def architectures(paths: list[Path]) -> list[str]:
    names: set[str] = set()
    for config in (c for p in paths for c in configs(p)):
        try:
            names.update(json.loads(config.read_text()).get("architectures") or [])
        except (OSError, ValueError) as exc:
            print(f"{config}: not read ({exc})", file=sys.stderr)
    return sorted(names)


def inspect(names: list[str]) -> dict[str, str]:
    """Each architecture's outcome, the entries written under $VLLM_CACHE_ROOT/modelinfos."""
    from vllm.model_executor.models import registry

    if hasattr(registry, "_run_in_subprocess"):  # in this process: it imports vLLM once
        registry._run_in_subprocess = lambda fn: fn()
    known = registry.ModelRegistry.models
    outcome = {}
    for name in names:
        if name not in known:
            outcome[name] = "not one of this vLLM's architectures"
            continue
        # vLLM logs why a class failed and answers None; it is then inspected at start
        info = registry.ModelRegistry._try_inspect_model_cls(name)
        outcome[name] = "inspected" if info is not None else "failed (vLLM's error above)"
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the seed folder to fill")
    parser.add_argument("paths", type=Path, nargs="+", help="configs, folders or HF caches")
    args = parser.parse_args(argv)
    names = architectures(args.paths)
    if not names:
        print("no architectures found in " + ", ".join(map(str, args.paths)), file=sys.stderr)
        return 1
    os.environ["VLLM_CACHE_ROOT"] = str(args.out)  # read by vLLM when it writes the entries
    for name, what in inspect(names).items():
        print(f"{name}: {what}")
    entries = sorted(p.name for p in (args.out / "modelinfos").glob("*.json"))
    print(f"{len(entries)} entries in {args.out / 'modelinfos'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
