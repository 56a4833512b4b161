"""``python -m data_prep <command>``: mine hard negatives, build task datasets, convert formats.

Each command lives in its own module, which exposes ``register(subparsers)``; the parser it adds
sets ``func`` to the function that runs the command and returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from .io import DataError, MissingInputError

COMMAND_MODULES = ["data_prep.mining.command", "data_prep.build", "data_prep.convert", "data_prep.feedback",
                   "data_prep.labelling.command"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m data_prep", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except (DataError, MissingInputError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
