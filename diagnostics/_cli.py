"""Command-line plumbing shared by the ``python -m diagnostics.<name>`` commands.

Every command takes ``--ckpt DIR`` (repeatable) or ``--run DIR``, prints a plain-text table, and
with ``--json`` prints exactly one JSON object on stdout (warnings and progress go to stderr).
Bad input exits with status 2 and a one-line message, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from typing import Callable, Sequence

import numpy as np

from diagnostics.load import DiagData, DiagnosticsError, load

__all__ = ["base_parser", "load_args", "run_main", "emit", "jsonable", "format_table", "fmt"]


def base_parser(prog: str, description: str, *, bootstrap: bool = True) -> argparse.ArgumentParser:
    """Parser with the common input, selection, bootstrap and output options."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=description)
    src = parser.add_argument_group("input")
    src.add_argument("--ckpt", action="append", default=[], metavar="DIR",
                     help="checkpoint folder global_step_N (or its replay/); repeat to pool several")
    src.add_argument("--run", metavar="DIR", help="run folder: all complete checkpoints in it")
    src.add_argument("--steps", choices=("selected", "all"), default="selected",
                     help="analyse the selected (top-NLL) steps only (default, as in the paper) or all scored steps")
    src.add_argument("--total-steps", type=int, default=None, metavar="L",
                     help="run length for early/middle/late thirds (default: largest global step loaded)")
    if bootstrap:
        boot = parser.add_argument_group("bootstrap")
        boot.add_argument("--n-boot", type=int, default=1000, help="trajectory-cluster resamples (default 1000)")
        boot.add_argument("--ci", type=float, default=0.95, help="interval coverage (default 0.95)")
        boot.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object and nothing else on stdout")
    return parser


def load_args(args: argparse.Namespace) -> DiagData:
    """Load the data named by ``--ckpt``/``--run``."""
    if args.run and args.ckpt:
        raise DiagnosticsError("give either --run DIR or --ckpt DIR (repeatable), not both")
    paths = [args.run] if args.run else list(args.ckpt)
    if not paths:
        raise DiagnosticsError("no input: give --run DIR or --ckpt DIR")
    if getattr(args, "n_boot", 1) < 1:
        raise DiagnosticsError(f"--n-boot must be >= 1, got {args.n_boot}")
    if not 0 < getattr(args, "ci", 0.5) < 1:
        raise DiagnosticsError(f"--ci must be in (0, 1), got {args.ci}")
    return load(paths, steps=args.steps, total_steps=args.total_steps)


def jsonable(value):
    """Plain JSON types; nan and inf become null."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    return value


def fmt(value, digits: int = 3) -> str:
    """A number for a table: fixed digits, ``nan`` for missing."""
    if value is None:
        return "nan"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    return "nan" if not math.isfinite(value) else f"{value:.{digits}f}"


def format_table(headers: Sequence[str], rows: Sequence[Sequence], *, title: str | None = None) -> str:
    """Plain-text table with aligned columns (first column left, others right)."""
    cells = [[str(h) for h in headers]] + [[c if isinstance(c, str) else fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    out = [title] if title else []
    out += [line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]]
    return "\n".join(out)


def emit(args: argparse.Namespace, result: dict, table: str) -> None:
    """Print the JSON object (``--json``) or the table."""
    if args.json:
        sys.stdout.write(json.dumps(jsonable(result), allow_nan=False) + "\n")
    else:
        sys.stdout.write(table.rstrip("\n") + "\n")
    sys.stdout.flush()


def run_main(body: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """Run a command body, turning input errors into ``error: ...`` on stderr and exit status 2."""
    from ocsd.records import RecordError

    warnings.simplefilter("default")
    try:
        return body(argv)
    except (DiagnosticsError, RecordError, FileNotFoundError, NotADirectoryError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
