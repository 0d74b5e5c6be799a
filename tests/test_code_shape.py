"""The code stays easy to change: no function in `src/` is over 80 lines (a longer one is
several steps that want names of their own)."""

from __future__ import annotations

import ast

from .support import ROOT

MAX_LINES = 80


def long_functions() -> list[str]:
    found = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            lines = (node.end_lineno or node.lineno) - start + 1
            if lines > MAX_LINES:
                where = path.relative_to(ROOT)
                found.append(f"{where}:{node.lineno} {node.name} is {lines} lines")
    return found


def test_no_function_in_src_is_over_80_lines() -> None:
    assert long_functions() == []
