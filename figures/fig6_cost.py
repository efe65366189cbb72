"""Paper Fig. 6: per-iteration runtime breakdown by training phase.

For each run, the time of every phase (``time/rollout``, ``time/old_logprob``, ``time/ref_logprob``,
``time/replay_scoring``, ``time/teacher_logprob``, ``time/advantage``, ``time/update``; seconds, from
``metrics.jsonl``) is averaged over the training steps, a phase a step did not run counting 0 s
(means and shares from :func:`diagnostics.runs.phase_times`), and drawn as one stacked bar per
run; a second panel shows the same stack as percent of the phase total. Phases shared with GRPO
are blue, replay scoring (OCSD-specific) orange, the privileged teacher pass of the distillation
baselines purple. The table (stdout, and ``fig6_cost.md``) gives seconds per phase and the
replay-scoring share. ``fig6_cost_modules.png`` is the paper's layout: a bar per phase and run with its
seconds printed, on a broken axis so that sub-second phases stay visible beside the rollout.
``--skip-steps K`` leaves out the first K steps (warm-up). The table also gives replay scoring as percent of
the other phases (:meth:`diagnostics.runs.PhaseTimes.overhead_percent`), which is how the paper states its
overhead; ``--paper-reference`` adds the paper's numbers (7.52 s of replay scoring and 0.12 s of modulation
per iteration, 1.40%; ALFWorld, Qwen3-4B, 8 A100s) as a table column and in the figures' caption.

Command::

    python -m figures.fig6_cost --run A [--run B ...] [--skip-steps 0] [--paper-reference] [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from diagnostics.runs import PhaseTimes, phase_times
from figures._common import FigureError, SkipFigure, figure_parser, load_runs, wrote
from figures.drawing import add_caption, pyplot, runs_caption, save_and_close
from ocsd.cli import entry_point

__all__ = ["PHASES", "axis_break", "draw", "draw_modules", "table", "build", "main"]

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


def axis_break(values) -> tuple[float, float] | None:
    """Where to break a bar chart's y axis so that the smallest bars stay visible, as the paper's Fig. 6 does:
    ``(low_top, high_bottom)`` around the widest gap (in log scale) between the sorted positive values, or None
    when they span less than a factor 20 (one axis shows them all)."""
    vals = np.sort(np.asarray([v for v in values if v > 0], dtype=float))
    if len(vals) < 2 or vals[-1] / vals[0] < 20:
        return None
    gaps = np.diff(np.log(vals))
    i = int(np.argmax(gaps))
    return float(vals[i] * 1.4), float(vals[i + 1] * 0.8)


def draw_modules(times: dict[str, PhaseTimes]):
    """The paper's layout: one group of bars per phase (one bar per run), seconds printed on each bar, the
    y axis broken (:func:`axis_break`) so that phases of a fraction of a second stay visible beside the
    rollout. Shared phases blue, OCSD-specific orange, the teacher pass purple.

    Returns
    -------
    matplotlib.figure.Figure
        Axes ``gid`` ``"high"`` and ``"low"`` (the two sides of the break; only ``"low"`` without a break);
        each bar patch has ``gid`` ``"<label>|<phase key>"`` in every axis that draws it.
    """
    plt = pyplot()
    labels, keys = list(times), _used(times)
    values = [times[lab].seconds[key] for key in keys for lab in labels]
    cut = axis_break(values)
    width = 0.8 / len(labels)
    figsize = (max(6.0, 0.4 * len(keys) * max(1, len(labels)) + 2.5), 4.2)  # about 0.4 inch a bar
    if cut is None:
        fig, ax_low = plt.subplots(figsize=figsize)
        axes = [ax_low]
    else:
        fig, (ax_high, ax_low) = plt.subplots(2, 1, sharex=True, figsize=figsize,
                                              gridspec_kw={"height_ratios": [1, 1], "hspace": 0.08})
        axes = [ax_high, ax_low]
        ax_high.set_gid("high")
    ax_low.set_gid("low")
    x = np.arange(len(keys))
    shades = np.linspace(1.0, 0.55, len(labels))
    for j, lab in enumerate(labels):
        heights = [times[lab].seconds[key] for key in keys]
        colors = [PHASES[key][1] if key in (REPLAY, "time/teacher_logprob") else "#2e75b6" for key in keys]
        for ax in axes:
            bars = ax.bar(x + (j - (len(labels) - 1) / 2) * width, heights, width=width * 0.95, color=colors,
                          alpha=float(shades[j]), edgecolor="white", linewidth=0.5)
            for bar, key in zip(bars, keys):
                bar.set_gid(f"{lab}|{key}")
        for xi, h in zip(x, heights):
            if h <= 0:
                continue
            ax = axes[0] if cut is not None and h > cut[0] else ax_low
            ax.text(xi + (j - (len(labels) - 1) / 2) * width, h, f"{h:.3g}", ha="center", va="bottom", fontsize=7)
    top = max(values) * 1.15
    if cut is None:
        ax_low.set_ylim(0, top)
    else:
        ax_high.set_ylim(cut[1], top)
        ax_low.set_ylim(0, cut[0])
        ax_high.spines["bottom"].set_visible(False)
        ax_low.spines["top"].set_visible(False)
        ax_high.tick_params(axis="x", bottom=False)
        mark = dict(marker=[(-1, -0.5), (1, 0.5)], markersize=10, linestyle="none", color="k", mec="k", mew=1,
                    clip_on=False)
        ax_high.plot([0, 1], [0, 0], transform=ax_high.transAxes, **mark)
        ax_low.plot([0, 1], [1, 1], transform=ax_low.transAxes, **mark)
    ax_low.set_xticks(x, [PHASES[k][0] for k in keys], rotation=20, fontsize=8)
    fig.supylabel("seconds per iteration (broken axis)" if cut else "seconds per iteration", fontsize=9)
    if len(labels) > 1:
        axes[0].set_title("bars left to right: " + ", ".join(labels), fontsize=8)
    fig.subplots_adjust(left=0.8 / figsize[0], right=1 - 0.2 / figsize[0], bottom=0.22)  # margins in inches
    return fig


def _used(times: dict[str, PhaseTimes]) -> list[str]:
    """The phases some run spent time in, in stacking order."""
    return [k for k in PHASES if any(t.seconds[k] > 0 for t in times.values())]


def _paper_cells() -> dict[str, str]:
    """The paper's runtime numbers (:data:`figures.paper.RUNTIME`) by table row."""
    from figures.paper import RUNTIME

    return {REPLAY: f"{RUNTIME['replay_scoring_s'].mean:.4g}",
            "modulation": f"{RUNTIME['modulation_s'].mean:.4g}",
            "overhead": f"{RUNTIME['overhead_percent'].mean:.2f}% "
                        f"(with the modulation: {RUNTIME['overhead_s'].mean:.4g} s)"}


def table(times: dict[str, PhaseTimes], *, paper: bool = False) -> str:
    """Markdown table: seconds per phase per run, total, replay-scoring share of the total and overhead over the
    other phases; ``paper`` adds a column with the paper's numbers (the phases it does not print are blank)."""
    labels = list(times)
    ref = _paper_cells() if paper else None
    extra = " | paper (Qwen3-4B, 8 A100)" if paper else ""
    lines = ["| phase | " + " | ".join(labels) + extra + " |", "|---|" + "---:|" * (len(labels) + bool(paper))]

    def row(title: str, cells: list[str], paper_cell: str = "") -> str:
        return f"| {title} | " + " | ".join(cells) + (f" | {paper_cell}" if paper else "") + " |"

    for key in _used(times):
        lines.append(row(f"{PHASES[key][0]} (`{key}`)", [f"{times[lab].seconds[key]:.4g}" for lab in labels],
                         ref.get(key, "") if ref else ""))
    if paper:
        lines.append(row("Residual modulation", ["(in Advantage)"] * len(labels), ref["modulation"]))
    lines.append(row("**total**", [f"{times[lab].total:.4g}" for lab in labels]))
    shares = [f"{times[lab].percent[REPLAY]:.2f}%" if times[lab].total > 0 else "n/a" for lab in labels]
    lines.append(row("replay-scoring share of the total", shares))
    overhead = [f"{times[lab].overhead_percent(REPLAY):.2f}%" if times[lab].total > 0 else "n/a" for lab in labels]
    lines.append(row("replay scoring over the other phases", overhead, ref["overhead"] if ref else ""))
    return "\n".join(lines)


def build(run_dirs: Sequence, out_dir, *, labels: Sequence[str] | None = None, skip_steps: int = 0,
          name: str = NAME, pdf: bool = False, dpi: int = 150, paper_reference: bool = False) -> list[Path]:
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
    text = table(times, paper=paper_reference)
    print(f"Seconds per iteration, mean over training steps (first {skip_steps} skipped):\n{text}")
    caption = (runs_caption([r for r in runs if r.label in times])
               + "; means over the timed steps" + (f" after the first {skip_steps}" if skip_steps else ""))
    if paper_reference:
        from figures.paper import RUNTIME

        caption += (f"; paper (ALFWorld, Qwen3-4B, 8 A100s): replay scoring {RUNTIME['replay_scoring_s'].mean} s + "
                    f"modulation {RUNTIME['modulation_s'].mean} s per iteration = {RUNTIME['overhead_percent'].mean}%")
    fig = draw(times)
    add_caption(fig, caption)
    paths = save_and_close(fig, out_dir, name, pdf=pdf, dpi=dpi)
    fig = draw_modules(times)
    add_caption(fig, caption)
    paths += save_and_close(fig, out_dir, f"{name}_modules", pdf=pdf, dpi=dpi)
    md = Path(out_dir) / f"{name}.md"
    md.write_text(text + "\n")
    return [*paths, md]


def _main(argv: Sequence[str] | None) -> int:
    parser = figure_parser(f"figures.{NAME}", __doc__.split("\n")[0])
    parser.add_argument("--label", action="append", default=[], help="bar label per --run, in the same order")
    parser.add_argument("--skip-steps", type=int, default=0, metavar="K",
                        help="leave out the first K timed steps (warm-up; default 0)")
    parser.add_argument("--paper-reference", action="store_true",
                        help="add the paper's runtime (7.52 s + 0.12 s per iteration, 1.40%%) to the table and caption")
    args = parser.parse_args(argv)
    paths = build(args.run, args.out, labels=args.label or None, skip_steps=args.skip_steps, pdf=args.pdf,
                  dpi=args.dpi, paper_reference=args.paper_reference)
    return wrote(paths)


main = entry_point(_main, f"figures.{NAME}")


if __name__ == "__main__":
    sys.exit(main())
