"""`handler.py`'s command line: the RunPod SDK's own options, and nothing else.

The SDK reads its options only once the worker has started its engine, and ignores every other
argument: `--test-input '{…}'` would run the `test_input.json` of the folder instead, exit 0. So
the command line is checked first, against the SDK's options, and a mistake is said in one line
naming the argument (and the option meant, when one is close), with exit status 2. The options
are spelled out in full: the SDK would take an abbreviation, which a typo can look like.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any, NoReturn

from runpod.serverless.modules.rp_logger import LOG_LEVELS

USAGE_STATUS = 2


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Refused(message)


def _log_level(value: str) -> str:
    if value.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a log level; accepted: {', '.join(LOG_LEVELS)}"
        )
    return value


#: The options the SDK takes (`runpod.serverless`'s parser), with what each does here.
SDK_OPTIONS: dict[str, dict[str, Any]] = {
    "--test_input": {
        "metavar": "JSON",
        "help": "run one job and print its result: '{\"input\": {…}}' (docs/job.md)",
    },
    "--rp_serve_api": {
        "action": "store_true",
        "help": "serve the SDK's local API (/run, /runsync, /stream)",
    },
    "--rp_api_host": {"metavar": "HOST", "help": "the local API's host (localhost)"},
    "--rp_api_port": {"type": int, "metavar": "PORT", "help": "the local API's port (8000)"},
    "--rp_api_concurrency": {
        "type": int,
        "metavar": "N",
        "help": "the local API's worker processes (1)",
    },
    "--rp_log_level": {
        "type": _log_level,
        "metavar": "LEVEL",
        "help": "show the SDK's own log lines from this level: ERROR, WARN, INFO or DEBUG",
    },
    "--rp_debugger": {
        "action": "store_true",
        "help": "add the SDK's timings to each job's output (rp_debugger)",
    },
}


def parser(prog: str = "handler.py") -> argparse.ArgumentParser:
    p = _Parser(
        prog=prog,
        description="The RunPod worker. With no option it takes jobs from RunPod's queue, or, "
        "away from RunPod, runs the test_input.json of the folder it is started in.",
        allow_abbrev=False,
    )
    for name, spec in SDK_OPTIONS.items():
        p.add_argument(name, **spec)
    return p


def check_arguments(argv: list[str]) -> None:
    """Exit with one line on stderr (status 2) when the command line holds anything the SDK
    does not take; `--help` prints the options and exits 0. Nothing has started yet."""
    prog = Path(argv[0]).name if argv else "handler.py"
    options = parser(prog)
    try:
        _, extra = options.parse_known_args(argv[1:])
    except _Refused as exc:
        _refuse(prog, str(exc))
    if extra:
        _refuse(prog, _unknown(extra[0]))


def _unknown(arg: str) -> str:
    if not arg.startswith("-"):
        shown = arg if len(arg) <= 60 else arg[:57] + "..."
        return f"unexpected argument {shown!r}: give the job as --test_input '{{\"input\": …}}'"
    name = arg.split("=", 1)[0]
    known = [*SDK_OPTIONS, "--help"]
    meant = close_option(name, known)
    if meant:
        return f"unknown option {name}; did you mean {meant}?"
    return f"unknown option {name}; accepted: {', '.join(known)}"


def close_option(name: str, known: list[str]) -> str | None:
    """The option `name` was probably meant to be: the same with `_` for `-` or other case, or
    the closest by spelling."""
    wanted = "--" + name.lstrip("-").replace("-", "_").lower()
    if wanted in known:
        return wanted
    matches = difflib.get_close_matches(wanted, known, n=1, cutoff=0.6)
    return matches[0] if matches else None


def _refuse(prog: str, message: str) -> NoReturn:
    print(f"{prog}: {message} (see {prog} --help)", file=sys.stderr)
    sys.exit(USAGE_STATUS)
