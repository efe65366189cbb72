"""Paper Fig. 6: per-iteration runtime breakdown by training phase.

For each run, the time of every phase (``time/rollout``, ``time/old_logprob``, ``time/ref_logprob``,
``time/replay_scoring``, ``time/teacher_logprob``, ``time/advantage``, ``time/update``; seconds, from
``metrics.jsonl``) is averaged over the training steps (a phase a step did not run counts 0 s) and
drawn as one stacked bar per run; a second panel shows the same stack as percent of the phase
total. Phases shared with GRPO are blue, replay scoring (OCSD-specific) orange, the privileged
teacher pass of the distillation baselines purple. The table (stdout, and ``fig6_cost.md``) gives
seconds per phase and the replay-scoring share. ``--skip-steps K`` leaves out the first K steps
(warm-up).

Command::

    python -m figures.fig6_cost --run A [--run B ...] [--skip-steps 0] [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from figures._common import FigureError, RunInfo, SkipFigure, base_parser, load_runs, pyplot, run_main, save_figure

__all__ = ["PHASES", "phase_means", "draw", "table", "build", "main"]

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


def phase_means(run: RunInfo, *, skip_steps: int = 0) -> dict[str, float] | None:
    """Mean seconds per training step of every phase (0 where a step lacks the key).

    Returns
    -------
    dict or None
        Phase key -> mean seconds over the run's rows that carry any phase key (after the first
        ``skip_steps`` of them); None when the run has no such row.
    """
    rows = [r for r in run.metrics if any(k in r for k in PHASES)][skip_steps:]
    if not rows:
        return None
    return {k: float(np.mean([float(r.get(k) or 0.0) for r in rows])) for k in PHASES}


def draw(means: dict[str, dict[str, float]]):
    """Stacked bars (seconds, and percent of the phase total), one per run label.

    Parameters
    ----------
    means : dict
        Run label -> :func:`phase_means`.

    Returns
    -------
    matplotlib.figure.Figure
        Axes ``gid`` ``"seconds"`` and ``"percent"``; every bar patch has ``gid`` ``"<label>|<phase key>"``.
    """
    plt = pyplot()
    labels = list(means)
    fig, (ax_s, ax_p) = plt.subplots(1, 2, figsize=(max(6.0, 1.6 * len(labels) + 4.5), 3.8))
    x = np.arange(len(labels))
    totals = np.array([sum(means[lab].values()) for lab in labels])
    bottom_s, bottom_p = np.zeros(len(labels)), np.zeros(len(labels))
    used = [k for k in PHASES if any(means[lab][k] > 0 for lab in labels)]
    for key in used:
        name, color = PHASES[key]
        sec = np.array([means[lab][key] for lab in labels])
        pct = np.divide(100.0 * sec, totals, out=np.zeros_like(sec), where=totals > 0)
        for ax, vals, bottom in ((ax_s, sec, bottom_s), (ax_p, pct, bottom_p)):
            bars = ax.bar(x, vals, bottom=bottom, color=color, edgecolor="white", linewidth=0.5, width=0.6,
                          label=name)
            for bar, lab in zip(bars, labels):
                bar.set_gid(f"{lab}|{key}")
            bottom += vals
    for i, lab in enumerate(labels):
        share = 100.0 * means[lab][REPLAY] / totals[i] if totals[i] > 0 else 0.0
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


def table(means: dict[str, dict[str, float]]) -> str:
    """Markdown table: seconds per phase per run, total, replay-scoring seconds and share."""
    labels = list(means)
    used = [k for k in PHASES if any(means[lab][k] > 0 for lab in labels)]
    lines = ["| phase | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    for key in used:
        lines.append(f"| {PHASES[key][0]} (`{key}`) | " + " | ".join(f"{means[lab][key]:.4g}" for lab in labels) + " |")
    totals = {lab: sum(means[lab].values()) for lab in labels}
    lines.append("| **total** | " + " | ".join(f"{totals[lab]:.4g}" for lab in labels) + " |")
    shares = [f"{100 * means[lab][REPLAY] / totals[lab]:.2f}%" if totals[lab] > 0 else "n/a" for lab in labels]
    lines.append("| replay-scoring share | " + " | ".join(shares) + " |")
    return "\n".join(lines)


def build(run_dirs: Sequence, out_dir, *, labels: Sequence[str] | None = None, skip_steps: int = 0,
          name: str = NAME, pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Draw Fig. 6, print the table and write ``<name>.png`` and ``<name>.md``."""
    if skip_steps < 0:
        raise FigureError(f"--skip-steps must be >= 0, got {skip_steps}")
    runs = load_runs(run_dirs, labels)
    means = {}
    for r in runs:
        m = phase_means(r, skip_steps=skip_steps)
        if m is None:
            print(f"{name}: {r.label} ({r.path}) has no timing rows after {skip_steps} skipped step(s); left out",
                  file=sys.stderr)
        else:
            means[r.label] = m
    if not means:
        raise SkipFigure("no run has metrics rows with time/<phase> keys (" + ", ".join(PHASES) + ")")
    text = table(means)
    print(f"Seconds per iteration, mean over training steps (first {skip_steps} skipped):\n{text}")
    fig = draw(means)
    try:
        paths = save_figure(fig, out_dir, name, pdf=pdf, dpi=dpi)
    finally:
        pyplot().close(fig)
    md = Path(out_dir) / f"{name}.md"
    md.write_text(text + "\n")
    return [*paths, md]


def _main(argv: Sequence[str] | None) -> int:
    parser = base_parser(f"figures.{NAME}", __doc__.split("\n")[0])
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
    return run_main(f"figures.{NAME}", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
