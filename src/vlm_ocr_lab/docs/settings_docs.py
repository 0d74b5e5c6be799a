"""The settings as users read them: the table of `docs/settings.md` and the Hub form
(`.runpod/hub.json`), both generated from the declarations in `settings.py` (and, for a setting
whose default is the model family's own, from `FAMILIES`) and checked against them by the tests.

    python -m vlm_ocr_lab.docs.settings_docs                          the table
    python -m vlm_ocr_lab.docs.settings_docs --write docs/settings.md   rewrite it where it is
    python -m vlm_ocr_lab.docs.settings_docs --hub-env [DOCKERFILE]   hub.json's `config.env`
"""

from __future__ import annotations

import json
import re
import sys
from enum import StrEnum
from pathlib import Path

from pydantic.fields import FieldInfo

from vlm_ocr.engines.families import FAMILIES
from vlm_ocr.settings import EngineKind, Settings, declared_fields, env_name
from vlm_ocr_lab.docs import generated
from vlm_ocr_lab.docs.family_docs import PER_FAMILY, by_family

# Plumbing the image sets and an endpoint's form should not offer: paths and interpreters inside
# the image, the engine's loopback port, local-development switches, the worker's internal
# timeouts and pools, and the fan-out client's own settings. They stay settable as environment
# variables; the Hub form leaves them out.
HUB_OMITTED = frozenset(
    {
        "output_dir",
        "allow_private_urls",
        "render_processes",
        "render_memory_mb",
        "decode_pixels",
        "bucket_connect_timeout_s",
        "bucket_read_timeout_s",
        "vllm_python",
        "vllm_port",
        "vllm_split_start",
        "vllm_startup_timeout_s",
        "vllm_cache_seed",
        "hf_home",
        "hf_hub_cache",
        "hf_hub_offline",
        "model_downloader",
        "cuda_graph_sizes",
        "request_timeout_s",
        "cpu_model_processes",
        "runpod_api_key",
        "runpod_api_base",
    }
)


def shown_default(default: object) -> str:
    if default is None:
        return ""
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, StrEnum):
        return default.value
    return str(default)


def description(name: str, field: FieldInfo) -> str:
    """The setting's description, with each family's value where its default is the family's,
    and the families by name for `MODEL_FAMILY`."""
    text = field.description or ""
    if name in PER_FAMILY:
        text = f"{text.removesuffix('.')} ({by_family(PER_FAMILY[name])})."
    if name == "model_family":
        text += " The families: " + ", ".join(f"`{n}`" for n in FAMILIES) + "."
    return text


def settings_table() -> list[tuple[str, str, str]]:
    """(variable, default, description) for every setting, in declaration order."""
    return [
        (env_name(name), shown_default(field.default), description(name, field))
        for name, field in declared_fields()
    ]


def markdown_table() -> str:
    lines = ["| Variable | Default | What it does |", "|---|---|---|"]
    for var, default, desc in settings_table():
        lines.append(f"| `{var}` | {f'`{default}`' if default else '—'} | {desc} |")
    return "\n".join(lines)


def image_env(dockerfile: str) -> dict[str, str]:
    """The settings a Dockerfile's `ENV` lines give the image (`${ARG}` values left out)."""
    text = dockerfile.replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            for key, value in re.findall(r"([A-Z][A-Z0-9_]*)=(\S+)", line):
                if not value.startswith("$"):
                    env[key] = value
    return env


def hub_env(image: dict[str, str] | None = None) -> list[dict[str, object]]:
    """The `config.env` entries of `.runpod/hub.json`: every setting but the plumbing
    (`HUB_OMITTED`), each with the default the image runs with (its `ENV`, else the code's)."""
    image = image or {}
    entries: list[dict[str, object]] = []
    for name, field in declared_fields():
        if name in HUB_OMITTED:
            continue
        kind = field.annotation
        if kind is bool:
            hub_type = "boolean"
        elif kind in (int, float):
            hub_type = "number"
        else:
            hub_type = "string"
        spec: dict[str, object] = {
            "name": name.replace("_", " ")
            .title()
            .replace("Vllm", "vLLM")
            .replace("Gpu", "GPU")
            .replace("Cpu", "CPU"),
            "type": hub_type,
            "description": description(name, field).replace("`", ""),
        }
        default = field.default
        if env_name(name) in image:
            default = Settings(**{name: image[env_name(name)]}).flat()[name]
        if default is not None:
            spec["default"] = (
                default.value
                if isinstance(default, StrEnum)
                else (str(default) if isinstance(default, Path) else default)
            )
        if kind is EngineKind:
            spec["options"] = [{"label": k.value, "value": k.value} for k in EngineKind]
        entries.append({"key": env_name(name), "input": spec})
    return entries


if __name__ == "__main__":
    if sys.argv[1:2] == ["--hub-env"]:  # --hub-env DOCKERFILE
        image = image_env(Path(sys.argv[2]).read_text()) if sys.argv[2:] else {}
        print(json.dumps(hub_env(image), ensure_ascii=False, indent=2))
    elif sys.argv[1:2] == ["--write"]:  # --write docs/settings.md
        generated.write(Path(sys.argv[2]), {"settings": markdown_table()})
    else:
        print(markdown_table())
