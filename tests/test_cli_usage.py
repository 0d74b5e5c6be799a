"""`vlm-ocr` as a user types it, mistakes included: every command refuses a file that is not
there, a folder where a file is wanted and a JSON file of the wrong kind in one line that names
the argument, says what was wrong and what is accepted, with exit status 2 and no traceback; help
on every argument, the prompt presets where a prompt is chosen, and `--version`."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from vlm_ocr.cli import main as cli
from vlm_ocr.cli import plan
from vlm_ocr.prompts import PRESETS
from vlm_ocr_lab import cli as lab_cli

from .support import ROOT

EXAMPLE = ROOT / "examples/chandra-ocr-2.config.json"
JOB_INPUT = ROOT / "test_input.json"  # a JSON file, but a job's input: no config, no manifest


@pytest.fixture
def here(tmp_path: Path, monkeypatch) -> Path:
    """A folder to type commands in: a folder with no job in it, a job folder whose manifest
    is another JSON file, and OUTPUT_DIR pointing inside it."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "not-a-job").mkdir()
    (tmp_path / "not-a-job/manifest.json").write_bytes(JOB_INPUT.read_bytes())
    monkeypatch.setenv("OUTPUT_DIR", str(tmp_path / "output"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


# command line -> the argument named and what the line says; each a user's mistake
MISTAKES = [
    (["plan", "nope.json"], "CONFIG: no such file: nope.json; accepted: a model's config.json"),
    (["plan", "folder"], "CONFIG: folder is a folder; accepted: a model's config.json"),
    (["plan", str(JOB_INPUT)], "is not a model's config: it has no num_hidden_layers"),
    (["plan", str(EXAMPLE), "--page-size", "big"], "argument --page-size: 'big' is not WIDTH"),
    (["plan", str(EXAMPLE), "--gpus", "0"], "argument --gpus: '0': accepted: a whole number"),
    (
        ["plan", str(EXAMPLE), "--max-pixels", "10"],
        "--max-pixels: 10: accepted: a whole number at least 65,536 and at most 16,000,000",
    ),
    (["show", "nope", "--page", "1"], "RESULTS: no such folder here, and no job manifest at"),
    (["show", "folder", "--page", "1"], "RESULTS: folder holds no manifest.json; accepted:"),
    (["show", "not-a-job", "--page", "1"], "manifest.json is not a job manifest (job_id: Field"),
    (["show", "nope", "--page", "1", "--pdf", "missing.pdf"], "--pdf: no such file: missing.pdf"),
    (["show", "nope", "--page", "1", "--pdf", "folder"], "--pdf: folder is a folder; accepted"),
    (["show", "nope", "--page", "1", "--pdf", str(JOB_INPUT)], "test_input.json is not a PDF"),
    (["show", "nope", "--page", "1", "--source", "missing.pdf"], "--source: no such file"),
    (["show", "nope", "--page", "1", "--images", "missing"], "--images: no such folder: missing"),
    (["show", "nope", "--page", "1", "--images", str(JOB_INPUT)], "is a file, not a folder"),
    (["show", "nope", "--page", "0"], "argument --page: '0': accepted: a whole number above 0"),
    (["show", "nope"], "the following arguments are required: --page"),
    (["review", "nope"], "RESULTS: no such folder here, and no job manifest at"),
    (["review", "folder"], "RESULTS: folder holds no manifest.json; accepted:"),
    (["review", str(JOB_INPUT)], "RESULTS: " + str(JOB_INPUT) + " is a file; accepted"),
    (["review", "not-a-job"], "manifest.json is not a job manifest (job_id: Field"),
    (["review", "nope", "--pdf", "missing.pdf"], "--pdf: no such file: missing.pdf; accepted"),
    (["review", "nope", "--pdf", "folder"], "--pdf: folder is a folder; accepted"),
    (["review", "nope", "--pdf", str(JOB_INPUT)], "test_input.json is not a PDF; accepted"),
    (["review", "nope", "--images", "missing"], "--images: no such folder: missing"),
    (["review", "nope", "--max-mb", "lots"], "argument --max-mb: 'lots' is not a number"),
    # an absolute path is a folder meant, said as typed, not a prefix under OUTPUT_DIR
    (["review", "/no-such-results/job"], "RESULTS: no such folder: /no-such-results/job; accepted"),
    (["show", "/no-such-results/job", "--page", "1"], "RESULTS: no such folder: /no-such-results"),
    # an option a command does not take: said by that command, with the one probably meant
    (
        ["run", "one.pdf", "-o", "out"],
        "vlm-ocr run: unrecognized arguments: -o out; did you mean --out? (see vlm-ocr run --help)",
    ),
    (["run", "one.pdf", "--output", "out"], "--output out; did you mean --out? (see vlm-ocr run"),
    (["review", "nope", "--frobnicate"], "unrecognized arguments: --frobnicate (see vlm-ocr rev"),
    (["show", "nope", "--page", "1", "--pgae", "2"], "--pgae 2; did you mean --page? (see vlm-ocr"),
    # run and submit: the other parts of their input are their own tests'
    (["run", "nope.pdf"], "nope.pdf: no such file"),
    (["run", "folder"], "folder: a folder, not a file; accepted: PDF"),
    (["submit", "nope.pdf", "--endpoint", "e1"], "nope.pdf: no such file or folder"),
    # a folder is a corpus to submit; with no bucket configured, that is what is said
    (["submit", "folder", "--endpoint", "e1"], "set BUCKET_NAME, BUCKET_ENDPOINT_URL"),
    (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
    # a command mistyped, or the lab's: argparse's words, then the one meant or the line to type
    (["rn", "one.pdf"], "invalid choice: 'rn' (choose from "),
    (["rn", "one.pdf"], "); did you mean run? (see vlm-ocr --help)"),
    (
        ["eval", "pages.jsonl", "--out", "a b"],
        "); that is vlm-ocr-lab's: vlm-ocr-lab eval pages.jsonl --out 'a b' (see vlm-ocr --help)",
    ),
    (["bench"], "); that is vlm-ocr-lab's: vlm-ocr-lab bench (see vlm-ocr --help)"),
    (["evl"], "); did you mean vlm-ocr-lab eval? (see vlm-ocr --help)"),
]
NOT_A_COMMAND = {"frobnicate", "rn", "eval", "bench", "evl"}  # said by `vlm-ocr` itself


@pytest.mark.parametrize(("argv", "said"), MISTAKES, ids=[" ".join(a) for a, _ in MISTAKES])
def test_a_users_mistake_is_one_line_naming_it_with_status_2(
    here: Path, capsys, argv: list[str], said: str
) -> None:
    try:
        status = cli.main(argv)
    except SystemExit as exit_:  # argparse's own refusals
        status = exit_.code
    out, err = capsys.readouterr()
    assert status == 2, (out, err)
    assert err.count("\n") == 1 and said in err, err
    assert err.startswith("vlm-ocr: " if argv[0] in NOT_A_COMMAND else f"vlm-ocr {argv[0]}: ")
    assert "Traceback" not in out + err and "unexpectedly" not in err
    assert not (here / "output").exists()  # a reader makes no results folder


def test_a_mistake_is_said_in_one_line_in_a_terminal_too(tmp_path: Path) -> None:
    """As typed: a process of its own, the whole of what it writes."""
    proc = subprocess.run(
        [sys.executable, "-m", "vlm_ocr", "plan", "examples"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        "vlm-ocr plan: CONFIG: examples is a folder; accepted: a model's config.json (from its "
        "Hugging Face repository), e.g. examples/chandra-ocr-2.config.json\n"
    )


def test_the_unexpected_is_one_line_too_unless_debug_asks_for_the_traceback(
    capsys, monkeypatch
) -> None:
    def broken(args: argparse.Namespace, settings: object) -> int:
        raise RuntimeError("a fault of the tool's own")

    monkeypatch.setattr(plan, "plan_main", broken)
    assert cli.main(["plan", str(EXAMPLE)]) == 1
    assert capsys.readouterr().err == (
        "vlm-ocr plan: failed unexpectedly (RuntimeError: a fault of the tool's own); run with "
        "LOG_LEVEL=DEBUG for the traceback\n"
    )
    monkeypatch.setenv("LOG_LEVEL", "DEBUG")
    with pytest.raises(RuntimeError, match="a fault of the tool's own"):
        cli.main(["plan", str(EXAMPLE)])


def test_ctrl_c_is_one_line_with_status_130(capsys, monkeypatch) -> None:
    def interrupted(args: argparse.Namespace, settings: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(plan, "plan_main", interrupted)
    assert cli.main(["plan", str(EXAMPLE)]) == 130
    assert capsys.readouterr().err == "vlm-ocr plan: interrupted\n"


def arguments(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.Action]]:
    """Every argument of every command under `parser`, by the command line that reaches it."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += arguments(sub, f"{path} {name}")
        else:
            found.append((path, action))
    return found


@pytest.mark.parametrize("tool", [cli.parser, lab_cli.parser])
def test_every_argument_of_every_command_has_help(tool) -> None:
    missing = [
        f"{path} {'/'.join(action.option_strings) or action.dest}"
        for path, action in arguments(tool(), tool().prog)
        if not action.help  # hidden ones (old spellings) say argparse.SUPPRESS
    ]
    assert missing == []


@pytest.mark.parametrize("command", ["run", "submit"])
def test_where_a_prompt_is_chosen_the_presets_are_listed(capsys, command: str) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"one of {', '.join(sorted(PRESETS))}" in text
    # the setting that chooses one when --prompt is not given, by its name
    assert "(default: the DEFAULT_PROMPT setting, markdown unless set;" in text
    assert "PROMPT's" not in text


def test_version_is_the_installed_packages(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"vlm-ocr {metadata.version(cli.DISTRIBUTION)}\n"
