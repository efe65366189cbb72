"""``python -m ocsd.records validate PATH [PATH ...]``: check checkpoint or run folders against the format.

Prints every problem (file and column named) with exit status 1, or ``ok`` with exit status 0; a bad
command line (a PATH that does not exist included) exits 2 with one ``error:`` line, before anything is validated.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import ocsd.records
from ocsd.cli import run_main
from ocsd.records.run import validate_path

PROG = "python -m ocsd.records"


def existing_path(text: str) -> str:
    """An ``argparse`` type: a file or folder that exists (a missing one is a usage error, not a problem found)."""
    if not Path(text).exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file or folder")
    return text


def _validate(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=ocsd.records.__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    val = sub.add_parser("validate", help="check checkpoint or run folders against the format")
    val.add_argument("paths", nargs="+", metavar="PATH", type=existing_path)
    args = parser.parse_args(argv)
    problems = [p for path in args.paths for p in validate_path(path)]
    for problem in problems:
        print(problem)
    if not problems:
        print("ok")
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    return run_main(_validate, argv, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
