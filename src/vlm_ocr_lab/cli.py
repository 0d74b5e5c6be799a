"""`vlm-ocr-lab`: the worker measured and checked, for the people who build and deploy it.

vlm-ocr-lab bench [--pages N]     pages/s and per-stage time through the pipeline (and --memory,
                                  --layout, --fanout, --instant-engine)
vlm-ocr-lab eval PAGES.jsonl      accuracy against ground truth (or --compare A B)
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from vlm_ocr.cli import main as product
from vlm_ocr.cli.usage import USAGE_STATUS, CommandParser, ProgramParser
from vlm_ocr.errors import ConfigError
from vlm_ocr.settings import Settings

from . import bench, evaluate


def parser() -> ProgramParser:
    """The product's parser's ways: a mistake in one line with the option or command meant
    (a command of `vlm-ocr` named as its), and `--version`."""
    p = ProgramParser(
        prog="vlm-ocr-lab",
        description=__doc__.splitlines()[0],
        elsewhere=dict.fromkeys(product.commands(), "vlm-ocr"),
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {product.version()}",
        help="print the version",
    )
    sub = p.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=CommandParser
    )
    bench.add_arguments(sub.add_parser("bench", help="measure pages/s and per-stage time per page"))
    evaluate.add_arguments(
        sub.add_parser(
            "eval", help="score an engine against ground truth, or compare two stored outputs"
        )
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = Settings.from_env(os.environ)
    except ConfigError as exc:
        print(f"vlm-ocr-lab: the settings cannot work: {exc}", file=sys.stderr)
        return USAGE_STATUS
    logging.basicConfig(
        level=settings.job.log_level, format="%(levelname)s %(name)s: %(message)s", force=True
    )
    if args.command == "eval":
        return asyncio.run(evaluate.eval_main(settings, args))
    return bench.bench_command(settings, args)


if __name__ == "__main__":
    raise SystemExit(main())
