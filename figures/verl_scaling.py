"""The veRL backend's scaling: steps per second and the phase breakdown against the number of GPUs.

Draws what ``benchmarks/verl_scaling.py`` stored, one JSON file per configuration (the single-device trainer on
one GPU, verl on 1, 2, 4, ... GPUs), each holding its per-phase means in ``summary``; nothing is averaged here.
Left panel: steps/s of verl against its GPUs, the line of perfect scaling from verl's smallest run, and the
single-device trainer as a point at its GPU count. Right panel: one stacked bar of seconds per phase for each
configuration (rollout, old log-probs, reference, replay scoring, update, and the rest of the step).
:func:`scaling_table` gives the same numbers as a markdown table (also written as ``verl_scaling.md``).

Command::

    python -m figures.verl_scaling RESULT.json [RESULT.json ...] [--out DIR] [--pdf] [--dpi N]

A folder given as RESULT stands for every ``*.json`` file in it.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from figures._common import FigureError, SkipFigure, add_output_options, read_json_file, wrote
from figures.drawing import add_caption, pyplot, save_and_close
from ocsd.cli import entry_point

__all__ = ["PHASES", "ScalingPoint", "load_points", "scaling_table", "draw", "build", "main"]

NAME = "verl_scaling"
PHASES = {
    "time/rollout": ("rollout", "#1f4e79"),
    "time/old_logprob": ("old log-probs", "#2e75b6"),
    "time/ref_logprob": ("reference", "#5b9bd5"),
    "time/replay_scoring": ("replay scoring", "#ed7d31"),
    "time/update": ("update", "#bdd7ee"),
}
"""Summary key -> (label, colour) of the phases drawn and tabled, in stacking order; ``time/step`` is the whole
step, and what the phases leave of it is drawn as "other"."""
STEP = "time/step"
BACKENDS = {"single": "single-device", "verl": "verl"}


@dataclass(frozen=True)
class ScalingPoint:
    """One configuration of the scaling benchmark, as stored.

    Attributes
    ----------
    path : Path
        The JSON file it was read from.
    backend : str
        ``single`` (``python -m training.train``) or ``verl`` (``python -m training.verl.main``).
    gpus : int
        GPUs the configuration ran on.
    seconds : dict
        Mean seconds per step of each key of :data:`PHASES` and of ``time/step`` (the step, checkpoint excluded).
    steps_per_s : float
    steps_averaged : int
        Training steps the means are taken over.
    card, model : str
        The GPU and the policy, as the benchmark recorded them.
    alongside : tuple of str
        The configurations that ran at the same time on other GPUs of the machine (``--side-by-side``).
    """

    path: Path
    backend: str
    gpus: int
    seconds: dict
    steps_per_s: float
    steps_averaged: int
    card: str = ""
    model: str = ""
    alongside: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return configuration_label(self.backend, self.gpus)


def configuration_label(backend: str, gpus: int) -> str:
    """How tables and figures name a configuration: "verl, 2 GPUs"."""
    return f"{BACKENDS.get(backend, backend)}, {gpus} GPU{'s' if gpus > 1 else ''}"


def _named(result_label: str) -> str:
    """A result file's ``label`` (``verl_2gpu``) in words ("verl on 2 GPUs"); any other text as it is."""
    backend, _, gpus = result_label.rpartition("_")
    if backend and gpus.endswith("gpu") and gpus[:-3].isdigit():
        n = int(gpus[:-3])
        return f"{BACKENDS.get(backend, backend)} on {n} GPU{'s' if n > 1 else ''}"
    return result_label


def _number(path: Path, data: dict, key: str, *, integer: bool = False) -> float:
    value = data.get(key)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    if not ok or (integer and (int(value) != value or value < 1)):
        raise FigureError(f"{path}: {key} must be a {'count >= 1' if integer else 'number >= 0'}, got {value!r}")
    return int(value) if integer else float(value)


def point(path: Path, data: object) -> ScalingPoint:
    """One stored configuration as a :class:`ScalingPoint`.

    Raises
    ------
    FigureError
        Naming the file and the field that is missing or not a number.
    """
    if not isinstance(data, dict) or not isinstance(data.get("summary"), dict):
        raise FigureError(f"{path}: not a result of benchmarks/verl_scaling.py (no 'summary' object)")
    backend = data.get("backend")
    if backend not in BACKENDS:
        raise FigureError(f"{path}: backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    summary = data["summary"]
    seconds = {key: _number(path, summary, key) for key in (*PHASES, STEP)}
    return ScalingPoint(path=path, backend=backend, gpus=int(_number(path, data, "gpus", integer=True)),
                        seconds=seconds, steps_per_s=_number(path, summary, "steps_per_s"),
                        steps_averaged=int(_number(path, summary, "steps_averaged", integer=True)),
                        card=str(data.get("card", "")), model=str(data.get("model", "")),
                        alongside=tuple(str(label) for label in data.get("alongside") or ()))


def load_points(paths: Sequence) -> list[ScalingPoint]:
    """The configurations stored in ``paths`` (files, or folders of ``*.json`` files), single-device first, then
    verl by GPUs; a file whose run failed (``returncode`` other than 0, or no ``summary``) is refused.

    Raises
    ------
    FigureError
        No file given or found, a file that cannot be read or is malformed (named), or two files of the same
        backend and GPU count.
    """
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        files += sorted(p.glob("*.json")) if p.is_dir() else [p]
    if not files:
        raise FigureError("no input: give the JSON files of benchmarks/verl_scaling.py (or their folder)")
    points, seen = [], {}
    for f in files:
        path, data = read_json_file(f, "", "result file")
        if isinstance(data, dict) and data.get("returncode", 0) != 0:
            raise FigureError(f"{path}: its run failed (returncode {data['returncode']}); see its log")
        p = point(path, data)
        key = (p.backend, p.gpus)
        if key in seen:
            raise FigureError(f"{path} and {seen[key]} both hold {p.label}: give one of them")
        seen[key] = path
        points.append(p)
    return sorted(points, key=lambda p: (p.backend != "single", p.gpus))


def ran_at_once(points: Sequence[ScalingPoint]) -> str:
    """The configurations that ran at the same time (``--side-by-side``), in words, each set once ("single-device
    on 1 GPU, verl on 1 GPU and verl on 2 GPUs"); "" when each ran alone."""
    waves: list[list[str]] = []
    for p in points:
        wave = [f"{p.backend}_{p.gpus}gpu", *p.alongside] if p.alongside else []
        if wave and sorted(wave) not in [sorted(w) for w in waves]:
            waves.append(wave)
    return "; ".join(", ".join(map(_named, w[:-1])) + f" and {_named(w[-1])}" for w in waves)


def scaling_table(points: Sequence[ScalingPoint]) -> str:
    """The markdown table: one row per configuration with seconds per phase and per step, steps/s, the speed-up
    over the single-device trainer and over verl's smallest run, and the scaling efficiency (that speed-up over
    the ratio of GPUs). A column whose reference configuration is absent shows "-"."""
    single = next((p for p in points if p.backend == "single"), None)
    verl = [p for p in points if p.backend == "verl"]
    base = min(verl, key=lambda p: p.gpus) if verl else None
    header = (["configuration", "GPUs"] + [label for label, _ in PHASES.values()]
              + ["step (s)", "steps/s", "vs single-device", "vs verl on fewest GPUs", "scaling efficiency"])
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]

    def ratio(a: float, b: float | None) -> str:
        return f"{a / b:.2f}x" if b else "-"

    for p in points:
        cells = [p.label, str(p.gpus), *(f"{p.seconds[k]:.2f}" for k in PHASES), f"{p.seconds[STEP]:.2f}",
                 f"{p.steps_per_s:.4f}", ratio(p.steps_per_s, single.steps_per_s if single else None)]
        if p.backend == "verl" and base is not None:
            speedup = p.steps_per_s / base.steps_per_s if base.steps_per_s else math.nan
            cells += [f"{speedup:.2f}x", f"{100 * speedup * base.gpus / p.gpus:.0f}%"]
        else:
            cells += ["-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    together = ran_at_once(points)
    if together:
        lines += ["", f"Ran at once on disjoint GPUs of the machine (sharing its CPUs, no GPU): {together}."]
    return "\n".join(lines)


def draw(points: Sequence[ScalingPoint]):
    """The two panels (steps/s against GPUs; stacked seconds per phase of each configuration).

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1, 1.4]})
    verl = [p for p in points if p.backend == "verl"]
    if verl:
        gpus = [p.gpus for p in verl]
        left.plot(gpus, [p.steps_per_s for p in verl], "o-", color="#1f4e79", label="verl")
        base = verl[0]
        left.plot(gpus, [base.steps_per_s * g / base.gpus for g in gpus], "--", color="#999999",
                  label=f"perfect scaling from {base.gpus} GPU{'s' if base.gpus > 1 else ''}")
        left.set_xticks(sorted(set(gpus)))
    for p in points:
        if p.backend == "single":
            left.plot([p.gpus], [p.steps_per_s], "s", color="#ed7d31", markersize=8, label="single-device trainer")
    left.set_xlabel("GPUs")
    left.set_ylabel("training steps per second")
    left.set_ylim(bottom=0)
    left.legend(fontsize=8, frameon=False)
    left.set_title("Throughput", fontsize=10)
    x = range(len(points))
    bottom = [0.0] * len(points)
    for key, (label, colour) in PHASES.items():
        values = [p.seconds[key] for p in points]
        right.bar(x, values, bottom=bottom, color=colour, label=label, width=0.6)
        bottom = [b + v for b, v in zip(bottom, values)]
    rest = [max(p.seconds[STEP] - b, 0.0) for p, b in zip(points, bottom)]
    right.bar(x, rest, bottom=bottom, color="#d9d9d9", label="other", width=0.6)
    right.set_xticks(list(x), [p.label for p in points], fontsize=8)
    right.set_ylabel("seconds per step")
    right.set_title("Where a step's time goes", fontsize=10)
    right.legend(fontsize=8, frameon=False, loc="upper right")
    for side in (left, right):
        side.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def build(paths: Sequence, out_dir, *, pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Draw the figure, print the table and write ``verl_scaling.png`` and ``verl_scaling.md`` into ``out_dir``."""
    points = load_points(paths)
    if not points:
        raise SkipFigure("no configuration to draw")
    text = scaling_table(points)
    print(text)
    fig = draw(points)
    cards = sorted({p.card for p in points if p.card})
    models = sorted({p.model for p in points if p.model})
    together = ran_at_once(points)
    add_caption(fig, "; ".join([f"model: {', '.join(models) or 'not recorded'}",
                                f"GPU: {', '.join(cards) or 'not recorded'}",
                                "means over " + ", ".join(f"{p.label}: {p.steps_averaged} steps" for p in points)]
                               + ([f"at once: {together}"] if together else [])))
    written = save_and_close(fig, out_dir, NAME, pdf=pdf, dpi=dpi)
    table_path = Path(out_dir) / f"{NAME}.md"
    table_path.write_text(text + "\n")
    return [*written, table_path]


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m figures.{NAME}", description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", metavar="RESULT",
                        help="JSON file of benchmarks/verl_scaling.py, or a folder of them")
    add_output_options(parser)
    args = parser.parse_args(argv)
    return wrote(build(args.results, args.out, pdf=args.pdf, dpi=args.dpi))


main = entry_point(_main, f"figures.{NAME}")

if __name__ == "__main__":
    sys.exit(main())
