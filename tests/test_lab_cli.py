"""`vlm-ocr-lab` as a user types it, mistakes included: said as `vlm-ocr` says them, in one line
with the option or command probably meant and exit status 2, and `--version` as `vlm-ocr` has
it."""

from __future__ import annotations

from importlib import metadata

import pytest

from vlm_ocr.cli import main as product
from vlm_ocr_lab import cli as lab

# command line -> what the one line says
MISTAKES = [
    (
        ["eval", "pages.jsonl", "--ouput", "x"],
        "vlm-ocr-lab eval: unrecognized arguments: --ouput x; did you mean --outputs? (see "
        "vlm-ocr-lab eval --help)",
    ),
    (
        ["bench", "--pagse", "3"],
        "vlm-ocr-lab bench: unrecognized arguments: --pagse 3; did you mean --pages? (see "
        "vlm-ocr-lab bench --help)",
    ),
    (["evl"], "vlm-ocr-lab: argument COMMAND: invalid choice: 'evl' (choose from "),
    (["evl"], "); did you mean eval? (see vlm-ocr-lab --help)"),
    # the product's commands, typed to the lab
    (["run", "one.pdf"], "); that is vlm-ocr's: vlm-ocr run one.pdf (see vlm-ocr-lab --help)"),
    (["reveiw", "r1"], "); did you mean vlm-ocr review? (see vlm-ocr-lab --help)"),
    ([], "vlm-ocr-lab: the following arguments are required: COMMAND (see vlm-ocr-lab --help)"),
]


@pytest.mark.parametrize(("argv", "said"), MISTAKES, ids=[" ".join(a) for a, _ in MISTAKES])
def test_a_mistake_is_one_line_with_what_was_meant(capsys, argv: list[str], said: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        lab.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.count("\n") == 1 and said in err, err


def test_version_is_the_installed_packages_as_vlm_ocr_says_it(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        lab.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"vlm-ocr-lab {metadata.version(product.DISTRIBUTION)}\n"


def test_the_commands_vlm_ocr_sends_to_the_lab_are_the_labs() -> None:
    assert sorted(product.LAB_COMMANDS) == sorted(lab.parser().commands)
