"""`vlm-ocr`: the worker's pipeline and tools on the command line.

vlm-ocr run FILE... [--out DIR]   OCR local PDFs and images, as a job would
vlm-ocr plan CONFIG.json          GPU memory, and the pages that fit in the KV cache
vlm-ocr submit PATH... --endpoint ID    documents or a corpus over an endpoint's workers
vlm-ocr show RESULTS --page N     a page drawn with the blocks found on it
vlm-ocr review RESULTS -o FILE    one HTML page to review a job's pages on

Each command is a module of this package with its own `add_arguments`. The benchmarks and the
evaluation are the lab's (`vlm-ocr-lab`), not the product's. A user's mistake is said in one
line with exit status 2 (`usage`); anything else unexpected in one line too, unless
LOG_LEVEL=DEBUG asks for the traceback; Ctrl-C in one line too, with exit status 130.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from importlib import metadata

from ..errors import ConfigError, EngineError
from ..settings import Settings
from . import plan, review, run, show, submit
from .usage import USAGE_STATUS, CommandParser, ProgramParser, UsageError, say

DISTRIBUTION = "runpod-vlm-ocr"
INTERRUPTED_STATUS = 130  # a shell's status for a command ended by Ctrl-C (128 + SIGINT)
# The lab's commands, which a user may type here: said to be the lab's (the product never
# imports the lab, so they are named here)
LAB_COMMANDS = ("bench", "eval")


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def parser() -> ProgramParser:
    p = ProgramParser(
        prog="vlm-ocr",
        description=__doc__.splitlines()[0],
        elsewhere=dict.fromkeys(LAB_COMMANDS, "vlm-ocr-lab"),
    )
    p.add_argument(
        "--version", action="version", version=f"%(prog)s {version()}", help="print the version"
    )
    sub = p.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=CommandParser
    )
    run.add_arguments(
        sub.add_parser("run", help="OCR local PDFs and images through the worker pipeline")
    )
    plan.add_arguments(sub.add_parser("plan", help="GPU memory and pages at once for a model"))
    submit.add_arguments(
        sub.add_parser(
            "submit",
            help="spread documents (a large PDF, folders, a bucket prefix) over an endpoint's "
            "workers and put each back together",
        )
    )
    show.add_arguments(sub.add_parser("show", help="draw a page with the blocks found on it"))
    review.add_arguments(
        sub.add_parser("review", help="write one HTML page to review a job's pages on")
    )
    return p


def commands() -> list[str]:
    """The commands `vlm-ocr` has, as its parser lists them (the lab says a user typed one of
    them to the wrong program)."""
    return list(parser().commands)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    command = f"vlm-ocr {args.command}"
    try:
        settings = Settings.from_env(os.environ)
    except ConfigError as exc:
        print(f"vlm-ocr: the settings cannot work: {exc}", file=sys.stderr)
        return USAGE_STATUS
    try:
        return dispatch(args, settings)
    except UsageError as exc:
        return say(command, exc)
    except ConfigError as exc:
        print(f"{command}: the settings cannot work: {exc}", file=sys.stderr)
        return USAGE_STATUS
    except EngineError as exc:  # its message is already the user's line (the engine's own words)
        print(f"{command}: the engine did not start or answer: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C outside a command's own handling of it
        print(f"{command}: interrupted", file=sys.stderr)
        return INTERRUPTED_STATUS
    except Exception as exc:  # the backstop: a known mistake has its own message above
        if settings.job.log_level == "DEBUG":
            raise
        print(
            f"{command}: failed unexpectedly ({type(exc).__name__}: {exc}); run with "
            "LOG_LEVEL=DEBUG for the traceback",
            file=sys.stderr,
        )
        return 1


def dispatch(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "plan":  # arithmetic on a config: no logging
        return plan.plan_main(args, settings)
    logging.basicConfig(
        level=settings.job.log_level, format="%(levelname)s %(name)s: %(message)s", force=True
    )
    if args.command == "run":
        return asyncio.run(run.run_main(settings, args))
    if args.command == "submit":
        return asyncio.run(submit.submit_main(settings, args))
    if args.command == "show":
        return show.run(settings, args)
    return review.run(settings, args)


if __name__ == "__main__":
    raise SystemExit(main())
