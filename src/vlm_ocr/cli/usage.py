"""A user's mistakes on the command line, said in one line: the argument, what was wrong with it
and what it accepts; the command then exits with status 2, as argparse does for its own.

`Parser` makes argparse's own refusals one line too (its default prints the usage first); the
checks here cover what argparse cannot see: a file that is not there, a folder where a file is
wanted, a JSON file that does not parse."""

from __future__ import annotations

import argparse
import difflib
import json
import shlex
import sys
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from ..field_errors import meant

USAGE_STATUS = 2
JSON_KINDS = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
}


class UsageError(Exception):
    """`argument` (as the user typed it: CONFIG, --pdf) was wrong; `message` says how and what
    is accepted."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"{argument}: {message}")
        self.argument = argument
        self.message = message


class Parser(argparse.ArgumentParser):
    """argparse, its refusals in one line that says where the help is."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_STATUS, f"{self.prog}: {message} (see {self.prog} --help)\n")


class ProgramParser(Parser):
    """A program's parser, over its commands (`vlm-ocr COMMAND …`; its own options take no
    value, so the first word not an option is the command): a command it does not have is said
    in argparse's words with the one probably meant, or with the program that has it
    (`elsewhere`: by command, that program's name)."""

    def __init__(self, *args: Any, elsewhere: Mapping[str, str] | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.elsewhere = dict(elsewhere or {})
        self.commands: Collection[str] = ()
        self.given: list[str] = []

    def add_subparsers(self, **kw: Any) -> Any:
        action = super().add_subparsers(**kw)
        self.commands = action.choices  # filled as each command is added
        return action

    def parse_known_args(  # type: ignore[override]
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self.given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        hint = self.command_hint()
        super().error(f"{message}; {hint}" if hint else message)

    def command_hint(self) -> str | None:
        at = next((n for n, arg in enumerate(self.given) if not arg.startswith("-")), None)
        if at is None or self.given[at] in self.commands:
            return None
        word, rest = self.given[at], self.given[at + 1 :]
        if program := self.elsewhere.get(word):  # the line typed, for the program that has it
            return f"that is {program}'s: {shlex.join([program, word, *rest])}"
        close = meant(word, [*self.commands, *self.elsewhere])
        if close is None:
            return None
        return f"did you mean {' '.join(filter(None, [self.elsewhere.get(close), close]))}?"


class CommandParser(Parser):
    """A command's own parser (`vlm-ocr run`). argparse hands what a command does not know up to
    the top-level parser, which would name `vlm-ocr` and its help, where the command's options
    are not listed; here the command says it, with the option probably meant."""

    def parse_known_args(  # type: ignore[override]
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(unrecognized(extras, self._option_string_actions))
        return parsed, extras


def unrecognized(extras: list[str], options: Iterable[str]) -> str:
    """argparse's words for arguments it does not know, and the option meant when one is
    close to the first unknown option."""
    said = f"unrecognized arguments: {' '.join(extras)}"
    unknown = next((a for a in extras if a.startswith("-") and len(a) > 1), None)
    meant = closest_option(unknown.split("=", 1)[0], options) if unknown else None
    return f"{said}; did you mean {meant}?" if meant else said


def closest_option(option: str, options: Iterable[str]) -> str | None:
    """The long option `option` was probably meant to be: for `-o`, the one long option that
    starts with that letter (another command's short form); else the closest by spelling."""
    names = sorted({o[2:] for o in options if o.startswith("--") and o != "--help"})
    if len(option) == 2 and option[0] == "-" and option[1] != "-":
        same = [name for name in names if name.startswith(option[1])]
        return f"--{same[0]}" if len(same) == 1 else None
    found = difflib.get_close_matches(option.lstrip("-"), names, n=1, cutoff=0.6)
    return f"--{found[0]}" if found else None


def say(command: str, error: UsageError) -> int:
    print(f"{command}: {error}", file=sys.stderr)
    return USAGE_STATUS


def input_file(path: Path, argument: str, accepted: str) -> Path:
    """`path` if it is a file that can be read, else UsageError saying what it is instead."""
    if path.is_dir():
        raise UsageError(argument, f"{path} is a folder; accepted: {accepted}")
    if not path.exists():
        raise UsageError(argument, f"no such file: {path}; accepted: {accepted}")
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise UsageError(
            argument, f"{path} cannot be read ({exc.strerror}); accepted: {accepted}"
        ) from None
    return path


def input_folder(path: Path, argument: str, accepted: str) -> Path:
    if path.is_file():
        raise UsageError(argument, f"{path} is a file, not a folder; accepted: {accepted}")
    if not path.is_dir():
        raise UsageError(argument, f"no such folder: {path}; accepted: {accepted}")
    return path


def json_object(path: Path, argument: str, accepted: str) -> dict[str, Any]:
    """The JSON object in the file `path`, or UsageError: no file, a folder, not UTF-8 JSON,
    JSON that is not an object."""
    input_file(path, argument, accepted)
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(argument, f"{path} is not text (UTF-8); accepted: {accepted}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(
            argument,
            f"{path} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f"accepted: {accepted}",
        ) from None
    if not isinstance(value, dict):
        kind = JSON_KINDS.get(type(value), "a value")
        raise UsageError(argument, f"{path} holds {kind}, not a JSON object; accepted: {accepted}")
    return value


def positive(kind: type[int] | type[float]) -> Callable[[str], Any]:
    """argparse's type for a number above zero, its refusal saying what is accepted."""
    word = "a whole number" if kind is int else "a number"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {word}; accepted: {word} above 0"
            ) from None
        if not value > 0 or value != value or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r}: accepted: {word} above 0")
        return value

    parse.__name__ = kind.__name__  # what argparse names in its own messages
    return parse


def fraction(text: str) -> float:
    """argparse's type for a share: above 0, at most 1."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: accepted: a number above 0 and at most 1")
    return value


def prompt_help(what: str) -> str:
    """Help for a `--prompt` argument: the presets, from prompts.py, and the setting that
    chooses one when the option is not given."""
    from ..prompts import PRESETS
    from ..settings import JobSettings

    default = JobSettings.model_fields["default_prompt"].default
    return (
        f"the prompt preset {what}: one of {', '.join(sorted(PRESETS))} (default: the "
        f"DEFAULT_PROMPT setting, {default} unless set; a model family with a prompt of its own "
        "takes none)"
    )
