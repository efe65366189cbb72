"""What the figure commands share: run folders, labels, their options and errors.

Exit codes of every ``python -m figures...`` command (:func:`ocsd.cli.run_main`): 0 built, 1 skipped
(:class:`SkipFigure`: the inputs exist but cannot support the figure; the reason is printed), 2 bad
input (:class:`FigureError`, a one-line ``error: ...``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ocsd.cli import output_folder
from ocsd.cli import SkipCommand, UsageError, positive_int

__all__ = ["FigureError", "SkipFigure", "RunInfo", "METHOD_LABELS", "method_label", "check_run_dir", "load_runs",
           "label_runs", "read_json_file", "read_labelled_results", "figure_parser", "add_labelled_inputs",
           "add_output_options", "wrote"]

METHOD_LABELS = {
    "vanilla": "Vanilla", "grpo": "GRPO", "opsd": "OPSD", "grpo_opsd": "GRPO+OPSD", "rlsd": "RLSD",
    "sdar": "SDAR", "ocsd": "OCSD", "ocsd_no_ablated": "OCSD w/o Ablated Teacher",
    "ocsd_random_select": "OCSD Random Selection", "ocsd_all_steps": "OCSD w/o Step Selection",
    "ocsd_no_sign": "OCSD w/o Sign Alignment",
}
"""Method name (``run.json`` ``method``) -> display label, in the paper's row order."""


class FigureError(UsageError):
    """Bad input to a figure command (missing folder, malformed file); exit status 2."""


class SkipFigure(SkipCommand):
    """The inputs exist but do not hold what the figure needs; the message says what is missing. Exit status 1."""


@dataclass(frozen=True)
class RunInfo:
    """One run folder with its ``run.json`` fields and metrics rows.

    Attributes
    ----------
    path : Path
    info : dict
        ``run.json`` (empty when the file is absent).
    metrics : list of dict
        ``metrics.jsonl`` rows in file order (empty when absent).
    label : str
        Legend/table label (set by :func:`label_runs`).
    """

    path: Path
    info: dict
    metrics: list
    label: str = ""

    @property
    def method(self) -> str:
        return str(self.info.get("method") or self.path.name)

    @property
    def seed(self):
        return self.info.get("seed")


def read_labelled_results(paths: Sequence, labels: Sequence[str] | None, *, default_name: str, command: str,
                          keys: Sequence[str], lacks: str) -> list[tuple[str, dict]]:
    """``[(label, result)]`` of JSON files that ``command`` wrote, for a figure that draws several side by side; a
    label defaults to the file's stem.

    Parameters
    ----------
    paths : sequence
        Files, or folders holding ``default_name``.
    labels : sequence of str or None
        One per path (``--label``), or none.
    default_name, command : str
        The file a folder holds, and the command that writes it (named in the messages).
    keys : sequence of str
        Keys every result has; ``lacks`` says in words what a file without them lacks.

    Raises
    ------
    FigureError
        No file, a label count that does not match, or a file that is not such a result (named).
    """
    if not paths:
        raise FigureError(f"no input: give one or more JSON files of {command}")
    if labels and len(labels) != len(paths):
        raise FigureError(f"--label given {len(labels)} time(s) for {len(paths)} file(s)")
    out = []
    for i, p in enumerate(paths):
        path, result = read_json_file(p, default_name, f"{Path(default_name).stem} result")
        if not isinstance(result, dict) or any(k not in result for k in keys):
            raise FigureError(f"{path}: no {lacks}; expected the output of {command}")
        out.append((labels[i] if labels else path.stem, result))
    return out


def check_paper_model(model: str) -> None:
    """Refuse a ``--paper-reference`` that is not one of the paper's models (:data:`figures.paper.MODELS`).

    Raises
    ------
    FigureError
        Naming the flag, the value and the paper's models.
    """
    from figures import paper

    if model not in paper.MODELS:
        raise FigureError(f"--paper-reference: {model!r} is not a model of the paper; use one of "
                          f"{', '.join(paper.MODELS)}")


def method_label(method: str) -> str:
    """Display label of a method name (unknown names are shown as given)."""
    return METHOD_LABELS.get(method, method)


def read_json_file(path, default_name: str, what: str) -> tuple[Path, object]:
    """``(file, parsed JSON)`` of ``path`` (a file, or a folder holding ``default_name``).

    Raises
    ------
    FigureError
        If the file is missing, cannot be read, is not UTF-8 text or not JSON; the message names the file.
    """
    import json

    path = Path(path)
    if path.is_dir():
        path = path / default_name
    if not path.exists():
        raise FigureError(f"{what} {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise FigureError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise FigureError(f"{what} {path} cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        return path, json.loads(text)
    except json.JSONDecodeError as exc:
        raise FigureError(f"{path} is not valid JSON ({exc})") from None


def check_run_dir(path) -> Path:
    """The run folder as a Path; :class:`FigureError` if it does not exist or is not a folder."""
    path = Path(path)
    if not path.exists():
        raise FigureError(f"run folder {path} does not exist")
    if not path.is_dir():
        raise FigureError(f"run folder {path} is not a folder")
    return path


def load_runs(paths: Sequence, labels: Sequence[str] | None = None) -> list[RunInfo]:
    """Read ``run.json`` and ``metrics.jsonl`` of each run folder and give each a label.

    Raises
    ------
    FigureError
        A folder is missing, or ``labels`` does not match the number of runs.
    ocsd.records.RecordError
        A file is malformed.
    """
    from ocsd.records import read_metrics, read_run_info

    if not paths:
        raise FigureError("no input: give --run DIR (repeatable)")
    if labels and len(labels) != len(paths):
        raise FigureError(f"--label given {len(labels)} time(s) for {len(paths)} --run folder(s)")
    runs, seen = [], {}
    for p in paths:
        path = check_run_dir(p)
        if path.resolve() in seen:
            raise FigureError(f"--run {p} is named twice (also as {seen[path.resolve()]}): a run counts once")
        seen[path.resolve()] = p
        info = read_run_info(path) if (path / "run.json").exists() else {}
        runs.append(RunInfo(path=path, info=info, metrics=read_metrics(path)))
    return label_runs(runs, labels)


def label_runs(runs: list[RunInfo], labels: Sequence[str] | None = None) -> list[RunInfo]:
    """Labels from the method; seed, then folder name, are added where labels would collide."""
    if labels:
        return [RunInfo(r.path, r.info, r.metrics, str(lab)) for r, lab in zip(runs, labels)]
    names = [method_label(r.method) for r in runs]
    if len(set(names)) < len(names):
        names = [n if names.count(n) == 1 or r.seed is None else f"{n} (seed {r.seed})" for n, r in zip(names, runs)]
    if len(set(names)) < len(names):
        names = [n if names.count(n) == 1 else f"{n} [{r.path.name}]" for n, r in zip(names, runs)]
    return [RunInfo(r.path, r.info, r.metrics, n) for r, n in zip(runs, names)]


def figure_parser(prog: str, description: str, *, runs: str = "+", run_help: str | None = None
                  ) -> argparse.ArgumentParser:
    """Parser with ``--run`` (repeatable; ``run_help`` replaces its help), ``--out``, ``--dpi`` and ``--pdf``
    (:func:`add_output_options`)."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=description)
    parser.add_argument("--run", action="append", default=[], metavar="DIR",
                        help=run_help or ("run folder (run.json, metrics.jsonl, global_step_N/); repeat to overlay "
                                          "several" if runs == "+" else "run folder"))
    add_output_options(parser)
    return parser


def add_labelled_inputs(parser: argparse.ArgumentParser, command: str, default_name: str) -> None:
    """Add the positional JSON inputs of a figure that draws several results side by side (the ``--json`` output of
    ``command``, or folders holding ``default_name``) and ``--label`` (one per input, in order); read them with
    :func:`read_labelled_results`."""
    parser.add_argument("inputs", nargs="+", metavar="JSON",
                        help=f"output of {command} --json (a file, or a folder with {default_name})")
    parser.add_argument("--label", action="append", default=[], help="title of each input, in the same order")


def add_output_options(parser: argparse.ArgumentParser, *, images: bool = True,
                       default: tuple[str | None, str] = ("figures_out", "figures_out")) -> None:
    """Add ``--out DIR`` (a folder, not a file; ``default`` is its value and how the help names it) and, with
    ``images``, ``--dpi N`` (>= 1) and ``--pdf``; bad values are refused while parsing, before any work."""
    parser.add_argument("--out", type=output_folder, default=default[0], metavar="DIR",
                        help=f"output folder (default {default[1]})")
    if images:
        parser.add_argument("--dpi", type=positive_int("--dpi"), default=150, help="PNG resolution (default 150)")
        parser.add_argument("--pdf", action="store_true", help="also write a PDF next to each PNG")


def wrote(paths: Sequence) -> int:
    """Print the files a figure command wrote (``wrote a, b``); the command's exit status, 0."""
    print("wrote " + ", ".join(map(str, paths)))
    return 0

