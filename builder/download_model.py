"""Bake a model's weights into the image at build time, and prove they are whole.

    python builder/download_model.py --model ORG/NAME [--revision REV] --cache-dir DIR \
        [--token-file /run/secrets/hf_token] --record DIR/baked-model.json [--lock FILE]

Downloads only what serving needs (weights, configs, tokenizer, processor, chat template) into a
Hugging Face cache, so vLLM finds it by its hub id with HF_HUB_OFFLINE=1. Then every shard the
safetensors index lists must be present and exactly as long as its own header says; anything
else fails the build with the file named. Finally it writes a record of what was baked (repo,
revision, files, bytes) that the worker reports at start.

`--model` may also be a local directory, which is verified and recorded without downloading.
Runs with the engine's interpreter (the base image's Python, which has huggingface_hub).

The worker also runs it at start when the image bakes no model (the Hub variant): then `--lock`
names a file on the network volume, so the workers of one endpoint download a model once; the
others wait, then find it complete. A download killed half-way is resumed by the next run.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import struct
import sys
import time
from pathlib import Path

ALLOW_PATTERNS = [
    "*.safetensors",
    "*.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
    "processor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "*.model",
    "*.tiktoken",
    "chat_template.json",
    "chat_template.jinja",
    "quant_config.json",
    "quantize_config.json",
    # the code a config.json's `auto_map` names: dots.ocr's checkpoints bring their configuration
    # class (`configuration_dots.py`), which transformers has not got; vLLM reads it with
    # --trust-remote-code, which only that family passes, so no other model's code is run
    "*.py",
]


class BakeError(Exception):
    pass


def safetensors_expected_size(path: Path) -> int:
    """The file length a safetensors file's own header implies: 8 + header + tensor bytes."""
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) < 8:
            raise BakeError(f"{path.name}: shorter than a safetensors header ({len(raw)} bytes)")
        (header_len,) = struct.unpack("<Q", raw)
        if header_len > 100_000_000:
            raise BakeError(f"{path.name}: not a safetensors file (header of {header_len} bytes)")
        header = fh.read(header_len)
    if len(header) < header_len:
        raise BakeError(f"{path.name}: truncated inside its header")
    try:
        tensors = json.loads(header)
    except ValueError:
        raise BakeError(f"{path.name}: unreadable safetensors header") from None
    end = max((t["data_offsets"][1] for k, t in tensors.items() if k != "__metadata__"), default=0)
    return 8 + header_len + end


def verify(model_dir: Path) -> list[Path]:
    """Weights present and whole; returns the weight files."""
    if not (model_dir / "config.json").is_file():
        raise BakeError(f"config.json is missing in {model_dir}")
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        shards = sorted(p.name for p in model_dir.glob("*.safetensors"))
        if not shards:
            raise BakeError(f"no *.safetensors weights in {model_dir}")
    problems = []
    for name in shards:
        path = model_dir / name
        if not path.is_file():
            problems.append(f"{name}: listed in the index but missing")
            continue
        try:
            expected = safetensors_expected_size(path)
        except BakeError as exc:
            problems.append(str(exc))
            continue
        actual = path.stat().st_size
        if actual != expected:
            problems.append(f"{name}: {actual:,} bytes, its header says {expected:,} (truncated?)")
    if problems:
        raise BakeError("incomplete weights:\n  " + "\n  ".join(problems))
    return [model_dir / n for n in shards]


def download(model: str, revision: str | None, cache_dir: Path, token: str | None) -> Path:
    from huggingface_hub import snapshot_download

    return Path(
        snapshot_download(
            repo_id=model,
            revision=revision,
            cache_dir=str(cache_dir),
            allow_patterns=ALLOW_PATTERNS,
            token=token,
        )
    )


def record(model: str, revision: str | None, model_dir: Path, out: Path) -> dict:
    files = sorted(p for p in model_dir.iterdir() if p.is_file())
    doc = {
        "repo": model,
        "revision": revision or "main",
        "resolved_commit": model_dir.name if model_dir.parent.name == "snapshots" else None,
        "path": str(model_dir),
        "files": {p.name: p.stat().st_size for p in files},
        "bytes": sum(p.stat().st_size for p in files),
        "baked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2))
    return doc


@contextlib.contextmanager
def locked(path: Path | None, what: str):
    """Hold an exclusive lock on `path` (released by the kernel if this process dies)."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another worker's download of {what} (lock {path})", flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="hub id (ORG/NAME) or a local directory")
    parser.add_argument("--revision", default=None)
    parser.add_argument(
        "--cache-dir", type=Path, default=Path(os.environ.get("HF_HOME", ".")) / "hub"
    )
    parser.add_argument("--token-file", type=Path, help="file holding the Hugging Face token")
    parser.add_argument("--record", type=Path, required=True, help="where to write the record")
    parser.add_argument("--lock", type=Path, help="hold this lock file while downloading")
    args = parser.parse_args(argv)

    token = None
    if args.token_file and args.token_file.is_file():
        token = args.token_file.read_text().strip() or None
    try:
        with locked(args.lock, args.model):
            if Path(args.model).is_dir():
                model_dir = Path(args.model)
            else:
                print(f"downloading {args.model} into {args.cache_dir}", flush=True)
                model_dir = download(args.model, args.revision or None, args.cache_dir, token)
            weights = verify(model_dir)
            doc = record(args.model, args.revision, model_dir, args.record)
    except BakeError as exc:
        print(f"download_model: FAILED for {args.model}: {exc}", file=sys.stderr)
        return 1
    print(
        f"baked {args.model}@{doc['revision']}: {len(weights)} weight files, "
        f"{doc['bytes'] / 1e9:.2f} GB in {model_dir}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
