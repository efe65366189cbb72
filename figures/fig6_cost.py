"""Paper Fig. 6: per-iteration runtime breakdown by training phase.

For each run, the time of every phase (``time/rollout``, ``time/old_logprob``, ``time/ref_logprob``,
``time/replay_scoring``, ``time/teacher_logprob``, ``time/advantage``, ``time/update``; seconds, from
``metrics.jsonl``) is averaged over the training steps, a phase a step did not run counting 0 s
(means and shares from :func:`diagnostics.runs.phase_times`), and drawn as one stacked bar per
run; a second panel shows the same stack as percent of the phase total. Phases shared with GRPO
are blue, replay scoring (OCSD-specific) orange, the privileged teacher pass of the distillation
baselines purple. The table (stdout, and ``fig6_cost.md``) gives seconds per phase and the
replay-scoring share. ``--skip-steps K`` leaves out the first K steps (warm-up).

Command::

    python -m figures.fig6_cost --run A [--run B ...] [--skip-steps 0] [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from diagnostics.runs import PhaseTimes, phase_times
from figures._common import FigureError, SkipFigure, figure_parser, load_runs
from figures.drawing import pyplot, save_figure
from ocsd.cli import run_main

__all__ = ["PHASES", "draw", "table", "build", "main"]

NAME = "fig6_cost"
PHASES = {
    "time/rollout": ("Rollout", "#1f4e79"),
    "time/old_logprob": ("Old log-prob", "#2e75b6"),
    "time/ref_logprob": ("Ref log-prob", "#5b9bd5"),
    "time/advantage": ("Advantage", "#9dc3e6"),
    "time/update": ("Update", "#bdd7ee"),
    "time/replay_scoring": ("Replay scoring", "#ed7d31"),
    "time/teacher_logprob": ("Teacher log-prob", "#7030a0"),
}
"""Phase key -> (label, colour), in stacking order (shared with GRPO first)."""
REPLAY = "time/replay_scoring"


def draw(times: dict[str, PhaseTimes]):
    """Stacked bars (seconds, and percent of the phase total), one per run label.

    Parameters
    ----------
    times : dict
        Run label -> :func:`diagnostics.runs.phase_times` over :data:`PHASES`.

    Returns
    -------
    matplotlib.figure.Figure
        Axes ``gid`` ``"seconds"`` and ``"percent"``; every bar patch has ``gid`` ``"<label>|<phase key>"``.
    """
    plt = pyplot()
    labels = list(times)
    fig, (ax_s, ax_p) = plt.subplots(1, 2, figsize=(max(6.0, 1.6 * len(labels) + 4.5), 3.8))
    x = np.arange(len(labels))
    totals = np.array([times[lab].total for lab in labels])
    bottom_s, bottom_p = np.zeros(len(labels)), np.zeros(len(labels))
    for key in _used(times):
        name, color = PHASES[key]
        sec = np.array([times[lab].seconds[key] for lab in labels])
        pct = np.nan_to_num([times[lab].percent[key] for lab in labels])
        for ax, vals, bottom in ((ax_s, sec, bottom_s), (ax_p, pct, bottom_p)):
            bars = ax.bar(x, vals, bottom=bottom, color=color, edgecolor="white", linewidth=0.5, width=0.6,
                          label=name)
            for bar, lab in zip(bars, labels):
                bar.set_gid(f"{lab}|{key}")
            bottom += vals
    for i, lab in enumerate(labels):
        share = np.nan_to_num(times[lab].percent[REPLAY])
        ax_s.text(i, totals[i], f"{totals[i]:.3g} s\nreplay {share:.2f}%", ha="center", va="bottom", fontsize=7)
    for ax, ylabel in ((ax_s, "seconds per iteration"), (ax_p, "% of iteration")):
        ax.set_xticks(x, labels, rotation=20 if len(labels) > 3 else 0, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.tick_params(axis="y", labelsize=8)
    ax_s.set_ylim(0, max(totals.max(), 1e-9) * 1.25)
    ax_p.set_ylim(0, 100)
    ax_s.set_gid("seconds")
    ax_p.set_gid("percent")
    ax_p.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8, frameon=False, reverse=True)
    fig.tight_layout()
    return fig


def _used(times: dict[str, PhaseTimes]) -> list[str]:
    """The phases some run spent time in, in stacking order."""
    return [k for k in PHASES if any(t.seconds[k] > 0 for t in times.values())]


def table(times: dict[str, PhaseTimes]) -> str:
    """Markdown table: seconds per phase per run, total, replay-scoring seconds and share."""
    labels = list(times)
    lines = ["| phase | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    for key in _used(times):
        cells = " | ".join(f"{times[lab].seconds[key]:.4g}" for lab in labels)
        lines.append(f"| {PHASES[key][0]} (`{key}`) | {cells} |")
    lines.append("| **total** | " + " | ".join(f"{times[lab].total:.4g}" for lab in labels) + " |")
    shares = [f"{times[lab].percent[REPLAY]:.2f}%" if times[lab].total > 0 else "n/a" for lab in labels]
    lines.append("| replay-scoring share | " + " | ".join(shares) + " |")
    return "\n".join(lines)


def build(run_dirs: Sequence, out_dir, *, labels: Sequence[str] | None = None, skip_steps: int = 0,
          name: str = NAME, pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Draw Fig. 6, print the table and write ``<name>.png`` and ``<name>.md``."""
    if skip_steps < 0:
        raise FigureError(f"--skip-steps must be >= 0, got {skip_steps}")
    runs = load_runs(run_dirs, labels)
    times = {}
    for r in runs:
        t = phase_times(r.metrics, list(PHASES), skip_steps=skip_steps)
        if t is None:
            print(f"{name}: {r.label} ({r.path}) has no timing rows after {skip_steps} skipped step(s); left out",
                  file=sys.stderr)
        else:
            times[r.label] = t
    if not times:
        raise SkipFigure("no run has metrics rows with time/<phase> keys (" + ", ".join(PHASES) + ")")
    text = table(times)
    print(f"Seconds per iteration, mean over training steps (first {skip_steps} skipped):\n{text}")
    fig = draw(times)
    try:
        paths = save_figure(fig, out_dir, name, pdf=pdf, dpi=dpi)
    finally:
        pyplot().close(fig)
    md = Path(out_dir) / f"{name}.md"
    md.write_text(text + "\n")
    return [*paths, md]


def _main(argv: Sequence[str] | None) -> int:
    parser = figure_parser(f"figures.{NAME}", __doc__.split("\n")[0])
    parser.add_argument("--label", action="append", default=[], help="bar label per --run, in the same order")
    parser.add_argument("--skip-steps", type=int, default=0, metavar="K",
                        help="leave out the first K timed steps (warm-up; default 0)")
    args = parser.parse_args(argv)
    paths = build(args.run, args.out, labels=args.label or None, skip_steps=args.skip_steps, pdf=args.pdf,
                  dpi=args.dpi)
    print("wrote " + ", ".join(map(str, paths)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m figures.fig6_cost``."""
    return run_main(_main, argv, prog=f"figures.{NAME}")


if __name__ == "__main__":
    sys.exit(main())
