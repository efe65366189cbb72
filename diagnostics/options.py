"""The options every ``python -m diagnostics.<name>`` command takes, and loading what they name.

Input: ``--ckpt DIR`` or ``--run DIR`` (each repeatable, pooled; a checkpoint named twice is read once),
``--steps selected|all`` and ``--total-steps L``; bootstrap: ``--n-boot``, ``--ci``, ``--seed``; output:
``--json``. Exit codes, tables, the JSON output and the ``argparse`` types of output folders and seeds
follow :mod:`ocsd.cli`: a bad value is refused while the command line is parsed, before any work.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ocsd.cli import UsageError, non_negative_int, positive_int

if TYPE_CHECKING:
    from diagnostics.load import DiagData

__all__ = ["command_parser", "add_selection_options", "add_bootstrap_options", "add_resampling_options", "check_ci",
           "load_args", "show_progress"]


def add_selection_options(parser) -> None:
    """Add ``--steps selected|all`` and ``--total-steps L`` to a parser or argument group."""
    parser.add_argument("--steps", choices=("selected", "all"), default="selected",
                        help="analyse the selected (top-NLL) steps only (default, as in the paper) or all scored steps")
    parser.add_argument("--total-steps", type=int, default=None, metavar="L",
                        help="run length for early/middle/late thirds (default: largest global step loaded)")


def add_bootstrap_options(parser: argparse.ArgumentParser, *, seed_help: str = "random seed (default 0)") -> None:
    """Add the ``bootstrap`` group: ``--n-boot``, ``--ci`` and ``--seed``."""
    boot = parser.add_argument_group("bootstrap")
    boot.add_argument("--n-boot", type=int, default=1000, help="trajectory-cluster resamples (default 1000)")
    boot.add_argument("--ci", type=float, default=0.95, help="interval coverage (default 0.95)")
    boot.add_argument("--seed", type=non_negative_int("--seed"), default=0, help=seed_help)


def add_resampling_options(parser: argparse.ArgumentParser, *, n_boot: int, resamples: str) -> None:
    """Add ``--n-boot`` (an integer >= 1, refused while parsing), ``--ci``, ``--seed`` (>= 0) and ``--json`` to the
    parser of a command that reads result files rather than checkpoints (``diagnostics.compare``,
    ``diagnostics.paired_steps``); check ``--ci`` after parsing with :func:`check_ci`."""
    parser.add_argument("--n-boot", type=positive_int("--n-boot"), default=n_boot,
                        help=f"{resamples} (default {n_boot})")
    parser.add_argument("--ci", type=float, default=0.95, help="interval coverage (default 0.95)")
    parser.add_argument("--seed", type=non_negative_int("--seed"), default=0, help="random seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object and nothing else on stdout")


def check_ci(args: argparse.Namespace) -> None:
    """Refuse a ``--ci`` outside (0, 1) with :class:`~ocsd.cli.UsageError`, naming the flag."""
    if not 0 < args.ci < 1:
        raise UsageError(f"--ci must be in (0, 1), got {args.ci}")


def command_parser(prog: str, description: str, *, bootstrap: bool = True,
                   progress: bool = False) -> argparse.ArgumentParser:
    """Parser with the input, selection, bootstrap (unless ``bootstrap=False``) and ``--json`` options.

    Parameters
    ----------
    prog : str
        Module name (``diagnostics.auroc``); the usage line shows ``python -m <prog>``.
    description : str
    bootstrap : bool, default True
        Add ``--n-boot``, ``--ci`` and ``--seed``.
    progress : bool, default False
        Add ``--no-progress``, for a command that shows a progress bar (as ``rescoring``'s commands do); read it
        with :func:`show_progress`.
    """
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=description)
    src = parser.add_argument_group("input")
    src.add_argument("--ckpt", action="append", default=[], metavar="DIR",
                     help="checkpoint folder global_step_N (or its replay/); repeat to pool several")
    src.add_argument("--run", action="append", default=[], metavar="DIR",
                     help="run folder: all complete checkpoints in it; repeat to pool several runs")
    add_selection_options(src)
    if bootstrap:
        add_bootstrap_options(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object and nothing else on stdout")
    if progress:
        parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def show_progress(args: argparse.Namespace) -> bool:
    """Whether a command of :func:`command_parser` with ``progress=True`` shows its bar: not with ``--no-progress``
    or ``--json``."""
    return not (args.no_progress or args.json)


def load_args(args: argparse.Namespace, *, properties=None) -> DiagData:
    """Check the input and bootstrap options and load the data named by ``--ckpt``/``--run`` (``properties``:
    per-step columns to derive, see :func:`diagnostics.load.load`).

    Raises
    ------
    DiagnosticsError
        Both or neither of ``--run`` and ``--ckpt``, or ``--n-boot`` < 1.
    UsageError
        ``--ci`` outside (0, 1) (:func:`check_ci`).
    """
    from diagnostics.load import DiagnosticsError, load  # the figures import this module's types only

    if args.run and args.ckpt:
        raise DiagnosticsError("give either --run DIR or --ckpt DIR (each repeatable), not both")
    paths = list(args.run) if args.run else list(args.ckpt)
    if not paths:
        raise DiagnosticsError("no input: give --run DIR or --ckpt DIR")
    if getattr(args, "n_boot", 1) < 1:
        raise DiagnosticsError(f"--n-boot must be >= 1, got {args.n_boot}")
    if hasattr(args, "ci"):
        check_ci(args)
    return load(paths, steps=args.steps, total_steps=args.total_steps, properties=properties)
