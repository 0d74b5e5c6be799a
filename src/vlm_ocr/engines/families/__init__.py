"""Model families: each family is one unit (a `Family` subclass) that says how its makers size
its pages, prompt it, sample it, serve it and read its answers, and holds its facts (how it is
told, its patch, its token caps and context). The family follows the model: its config.json
(`architectures`, `model_type`) and its name decide it, `MODEL_FAMILY` overrides.

Adding a family: a module here with its `Family` subclass, listed in `FAMILIES`, and a config of
each of its checkpoints' shapes in `examples/`. Nothing else knows a family by name: the engine's
flags, the settings' per-family defaults, the docs' tables, the README's table and the Hub's
presets are all written from `FAMILIES` (`vlm_ocr_lab.docs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from ..reading import Page, Reading
from .base import AnswerError, Attempt, Checkpoint, Family, Sampling
from .chandra import Chandra
from .dots import DotsOcr
from .lighton import LightOnOcr
from .lighton3 import LightOnOcr3
from .olmocr import OlmOcr
from .qwen import Qwen35, QwenVl

__all__ = [
    "FAMILIES",
    "AnswerError",
    "Attempt",
    "Checkpoint",
    "Detected",
    "Family",
    "Page",
    "Reading",
    "Sampling",
    "default_family",
    "detect",
]

# The first is the default: a model no family knows runs as it.
FAMILIES: dict[str, type[Family]] = {
    f.name: f for f in (QwenVl, Qwen35, OlmOcr, Chandra, DotsOcr, LightOnOcr, LightOnOcr3)
}
DEFAULT = next(iter(FAMILIES.values()))
# By name alone, a fine-tune first (its name may name its base too), then the longest hint: a
# family whose name extends another's (`lightonocr-3` and `lightonocr`) is told first.
BY_NAME = sorted(
    FAMILIES.values(), key=lambda f: (not f.fine_tune, -max(map(len, f.name_hints), default=0))
)


@dataclass(frozen=True)
class Detected:
    family: Family
    #: how it was told, for the log and the engine facts
    why: str
    #: set when the model's architecture is not one the worker knows
    warning: str | None = None


def detect(
    config: dict[str, Any] | None, model: str, override: str | None = None, **options: Any
) -> Detected:
    """The family of a model: MODEL_FAMILY when set, else by its config.json's architecture
    (its name telling a fine-tune from its base), else by its name. An architecture no family
    knows runs as a Qwen chat VLM, with a warning that names MODEL_FAMILY."""
    config = config or {}
    model_type = str(config.get("model_type") or "")
    if override:
        if override not in FAMILIES:
            raise ConfigError(
                f"MODEL_FAMILY={override!r}: no such family; accepted: {', '.join(FAMILIES)}"
            )
        family = make(FAMILIES[override], model, model_type, options)
        return Detected(family, f"MODEL_FAMILY={override}")
    name = model.lower()
    architectures = [str(a) for a in config.get("architectures") or []]
    if architectures:
        known = [f for f in FAMILIES.values() if f.architectures & set(architectures)]
        hinted = [f for f in known if f.fine_tune and named(f, name)]
        base = [f for f in known if not f.fine_tune]
        chosen = (hinted or base or known or [None])[0]
        if chosen is None:
            warning = (
                f"the model's architecture ({', '.join(architectures)}) is not one this worker "
                f"knows; it runs as a Qwen chat VLM: set MODEL_FAMILY to one of "
                f"{', '.join(FAMILIES)} if it is another"
            )
            family = make(DEFAULT, model, model_type, options)
            return Detected(family, "unknown architecture", warning)
        why = f"config.json architecture {architectures[0]}" + (
            f" and the name {model}" if hinted else ""
        )
        return Detected(make(chosen, model, model_type, options), why)
    for known in BY_NAME:
        if named(known, name):
            return Detected(make(known, model, model_type, options), f"the name {model}")
    warning = (
        f"no config.json of {model} to read and nothing in its name tells its family; it runs "
        f"as a Qwen chat VLM: set MODEL_FAMILY to one of {', '.join(FAMILIES)} if it is another"
    )
    return Detected(make(DEFAULT, model, model_type, options), "default", warning)


def named(family: type[Family], name: str) -> bool:
    """The model's name (lower-case) has one of the family's hints in it."""
    return any(hint in name for hint in family.name_hints)


def make(family: type[Family], model: str, model_type: str, options: dict[str, Any]) -> Family:
    return family(model_type, model=model, **options)


def default_family(**options: Any) -> Family:
    """The family a model runs as when nothing tells another (the first of `FAMILIES`)."""
    return DEFAULT(**options)
