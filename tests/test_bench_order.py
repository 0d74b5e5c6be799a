"""`vlm-ocr-lab bench --direct-first`: the direct path runs before the worker's passes, so a
worker pass slower than the direct path is told from the engine's first busy minute. Driven as
a user types it, against the instant engine."""

from __future__ import annotations

from vlm_ocr_lab import cli, measured

INSTANT = ["bench", "--instant-engine", "--slow", "0", "--jobs", "1", "--pages", "3"]


def first_lines(capsys, *args: str) -> tuple[int, list[str]]:
    # --progress prints a line at each pass's first page: their order is the passes' order
    code = cli.main([*INSTANT, "--progress", "30", *args])
    lines = capsys.readouterr().out.splitlines()
    return code, [line for line in lines if line.startswith(("progress, ", "direct to server"))]


def test_the_direct_path_runs_first_when_asked(capsys) -> None:
    code, lines = first_lines(capsys, "--direct-first")
    assert code == 0
    assert lines[0].startswith("progress, direct path: ")
    assert any(line.startswith("progress, worker pass 1: ") for line in lines[1:])
    assert lines[-1].startswith("direct to server (before the worker's passes): pages/s: ")
    assert "worker/direct pages/s ratio" in lines[-1]


def test_by_default_it_runs_after_the_passes(capsys) -> None:
    code, lines = first_lines(capsys, "--direct")
    assert code == 0
    assert lines[0].startswith("progress, worker pass 1: ")
    assert lines[-1].startswith("direct to server: pages/s: ")


def test_a_row_of_a_run_with_the_direct_path_first_is_off_the_defaults(capsys, tmp_path) -> None:
    data = tmp_path / "gpu.jsonl"
    rec = ["--record", str(data), "--commit", "abc1234", "--progress", "0"]
    assert cli.main([*INSTANT, "--direct-first", *rec]) == 0
    assert cli.main([*INSTANT, "--direct", *rec]) == 0
    capsys.readouterr()
    first, after = measured.runs(data)
    # neither of its paces compares with a run at the defaults: its direct path had the engine's
    # first busy minute, so the tables of figures at the defaults leave it out and say why
    # (a stand-in's rows say no start mode, so they may be off the family's by that alone)
    assert first.extra["direct_first"] is True and "direct_first" not in after.extra
    assert first.off_defaults == after.off_defaults | {"DIRECT_FIRST": "1"}
    assert "DIRECT_FIRST" not in after.off_defaults
    same = after.off_defaults
    assert measured.latest(after.family, overrides=same, rows=[first, after]) is after
    assert measured.latest(after.family, overrides=same, rows=[after, first]) is after
