"""A user's extra `vllm serve` flags (`VLLM_EXTRA_ARGS`) joined to the worker's command line.

vLLM takes the last of a flag given twice, whole. For a plain flag that is what a user means: an
extra `--max-num-seqs 128` replaces the worker's. For a flag whose value is a JSON object it is
not: an extra `--compilation-config '{"compile_mm_encoder": true}'` (or vLLM's dotted
`--compilation-config.compile_mm_encoder=true`, which vLLM turns into such an object) would drop
every key the worker pinned in its own, its CUDA graph sizes among them. So where the worker
passes a flag as a JSON object, the user's keys go into it, key by key and the user's winning;
every other extra flag follows the worker's, as given.
"""

from __future__ import annotations

import json
from typing import Any

# vLLM's short names of the flags whose values are JSON objects (its `engine/arg_utils.py`)
ALIASES = {"-cc": "--compilation-config", "-ac": "--attention-config"}


def json_flags(argv: list[str]) -> dict[str, tuple[int, dict[str, Any]]]:
    """Each flag of `argv` given a JSON object: its value's position and the object (the last of
    a flag given twice, as vLLM reads it)."""
    found: dict[str, tuple[int, dict[str, Any]]] = {}
    for i, word in enumerate(argv[:-1]):
        value = argv[i + 1]
        if word.startswith("--") and value.startswith("{") and isinstance(v := loads(value), dict):
            found[word] = (i + 1, v)
    return found


def split_flag(word: str) -> tuple[str, str, str | None]:
    """A flag word as vLLM reads it: the flag (its short name resolved, `_` read as `-`), the
    dotted keys after it (which keep theirs) and the value given after `=` (None without)."""
    name, eq, inline = word.partition("=")
    flag, _, path = name.partition(".")
    flag = ALIASES.get(flag, flag)
    if flag.startswith("--"):
        flag = "--" + flag[2:].replace("_", "-")
    return flag, path, inline if eq else None


def loads(text: str) -> Any:
    """A dotted key's value as vLLM reads it: JSON where it is JSON, else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def update(into: dict[str, Any], given: dict[str, Any]) -> None:
    """`given`'s keys into `into`, nested objects key by key, any other value replaced."""
    for key, value in given.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            update(into[key], value)
        else:
            into[key] = value


def set_dotted(into: dict[str, Any], path: str, value: str) -> None:
    """`--flag.key.sub VALUE` into the flag's object, as vLLM reads it: a trailing `+` appends the
    comma-separated items to the list there."""
    *parents, last = path.split(".")
    for key in parents:
        if not isinstance(into.get(key), dict):
            into[key] = {}
        into = into[key]
    if last.endswith("+"):
        last = last.removesuffix("+")
        kept = into.get(last)
        into[last] = (kept if isinstance(kept, list) else []) + [loads(v) for v in value.split(",")]
    else:
        into[last] = loads(value)


def merge_extra_args(argv: list[str], extra: list[str]) -> list[str]:
    """`argv` with `extra` (shell words) joined as the module's docstring says."""
    at = json_flags(argv)
    objects = {flag: parsed for flag, (_, parsed) in at.items()}
    rest: list[str] = []
    i = 0
    while i < len(extra):
        word = extra[i]
        flag, path, value = split_flag(word)
        i += 1
        if not word.startswith("-") or flag not in objects:
            rest.append(word)
            continue
        inline = value is not None
        if not inline:
            if i == len(extra):  # the flag without its value: vLLM says so
                rest.append(word)
                continue
            value, i = extra[i], i + 1
        if path:
            set_dotted(objects[flag], path, value)
        elif isinstance(parsed := loads(value), dict):
            update(objects[flag], parsed)
        else:  # not an object (`-cc 3`): vLLM reads it as given, after the worker's
            rest += [word] if inline else [word, value]
    merged = list(argv)
    for flag, (position, _) in at.items():
        merged[position] = json.dumps(objects[flag])
    return merged + rest
