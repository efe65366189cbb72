"""The diagnosis across scorer models (beyond the paper): what ``python -m rescoring.ladder`` measured, by model size.

Three panels, one group of bars per rung (the runs' own stored scores first, then the scorer models by size):
(a) feedback AUROC of the Ablated, Full and residual step scores, all runs pooled, with the paper's three values
beside them (its Fig. 2c, a Qwen3 policy scoring its own steps); (b) the paired Delta AUROC, residual - Full: raw,
matched (stage x operator) and within strata of evidence length; (c) the observation swap's drop in the AUROC of the
residual magnitude (realized - swapped), with the paper's drops of Qwen3-1.7B, 4B and 8B; and where the ladder
paired its rungs, (d) every two rungs paired on the same steps: the change of Full's and the residual's AUROC and of
Delta AUROC (residual - Full), later rung minus earlier. Whiskers are the ladder's trajectory-cluster bootstrap
intervals; the values drawn are written to ``ladder_fig.json``.

Command::

    python -m figures.ladder OUT/ladder.json [--out DIR] [--dpi 150] [--pdf]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from figures._common import FigureError, add_output_options, read_json_file, wrote
from figures.drawing import add_caption, bar_chart, pyplot, save_with_values
from figures.paper import FEEDBACK_AUROC, SWAP_AUROC
from ocsd.cli import entry_point

__all__ = ["NAME", "rung_label", "panels", "build", "main"]

NAME = "ladder"
SIGNALS = {"ablated": ("Ablated", "#999999"), "full": ("Full", "#4C72B0"), "residual": ("Residual", "#C44E52")}
DELTAS = {"raw": ("raw", "#C44E52"), "matched": ("matched", "#DD8452"), "within": ("within strata", "#8172B3")}
PAPER_LABEL = "paper\n(Qwen3)"
CHANGES = {"full": ("Full", "#4C72B0"), "residual": ("Residual", "#C44E52"),
           "delta": ("residual - Full", "#8172B3")}


def rung_label(model: str, parameters) -> str:
    """``qwen2.5-coder-1.5b\\n1.54B`` for a scorer; ``policy\\n(stored)`` for the runs' own scores."""
    if model == "stored":
        return "policy\n(stored)"
    name = Path(model).name if "/" in model else model
    if not parameters:
        return name
    size = f"{parameters / 1e9:.2f}B" if parameters >= 1e9 else f"{parameters / 1e6:.0f}M"
    return f"{name}\n{size}"


def _order(rungs: dict) -> list[str]:
    """The runs' own scores first, then weights named by a folder path (the policy's, e.g. its warm start) as given,
    then the scorers named by a model name, by size."""
    def key(item):
        i, m = item
        named = "/" not in m
        return (m != "stored", named, (rungs[m].get("parameters") or 0) if named else i)

    return [m for _, m in sorted(enumerate(rungs), key=key)]


def pair_label(a: str, b: str) -> str:
    """``qwen2.5-coder-1.5b\n- policy`` for the pair A - B of two rungs."""
    short = lambda m: rung_label(m, None).split("\n")[0]  # noqa: E731
    return f"{short(a)}\n- {short(b)}"


def _entry(d: dict | None, key: str) -> tuple:
    d = d or {}
    return d.get(key), d.get("ci_low"), d.get("ci_high")


def panels(ladder: dict) -> dict:
    """The bars of the panels: ``{"labels", "auroc": {signal: [(v, lo, hi)]}, "delta": {setting: [...]},
    "swap": [(v, lo, hi)], "steps", "pairs": {"labels", "full"|"residual"|"delta": [(v, lo, hi)]}, "paper": {...}}``
    (``pairs`` empty where the ladder has no ``paired``: one written before it paired its rungs)."""
    order = _order(ladder["rungs"])
    rungs = [ladder["rungs"][m]["pooled"] for m in order]
    return {
        "labels": [rung_label(m, ladder["rungs"][m].get("parameters")) for m in order],
        "auroc": {s: [_entry(r["auroc"]["signals"].get(s), "auroc") for r in rungs] for s in SIGNALS},
        "delta": {"raw": [_entry(r["robustness"].get("raw"), "delta") for r in rungs],
                  "matched": [_entry(r["robustness"].get("matched"), "delta") for r in rungs],
                  "within": [_entry(r["strata"]["delta"].get("within"), "delta") for r in rungs]},
        "swap": [_entry((r.get("swap") or {}).get("drop"), "delta") for r in rungs],
        "steps": [r["auroc"]["n_steps"] for r in rungs],
        "pairs": {"labels": [pair_label(p["a"], p["b"]) for p in ladder.get("paired") or []],
                  **{c: [_entry(p["contrasts"][c], "delta") for p in ladder.get("paired") or []] for c in CHANGES}},
        "paper": {"auroc": {s: FEEDBACK_AUROC[s].mean for s in SIGNALS},
                  "swap": {m: SWAP_AUROC[m]["realized"].mean - SWAP_AUROC[m]["swapped"].mean for m in SWAP_AUROC}},
    }


def auroc_limits(series: dict, low: float = 0.2, high: float = 0.9, margin: float = 0.02) -> tuple[float, float]:
    """The AUROC panel's y range: ``low`` to ``high``, widened (within 0 to 1) to every value and interval end of
    ``series`` (``{signal: [(value, lo, hi)]}``) with ``margin`` to spare."""
    ends = [x for values in series.values() for entry in values for x in entry if x is not None]
    return max(0.0, min([low, *(x - margin for x in ends)])), min(1.0, max([high, *(x + margin for x in ends)]))


def _grouped(ax, labels, series: dict, styles: dict, *, ylabel: str, baseline: float) -> None:
    """Bars of several series side by side in each group, with whiskers."""
    n = len(series)
    width = 0.8 / n
    for i, (key, values) in enumerate(series.items()):
        name, color = styles[key]
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(labels))]
        heights = [v if v is not None else 0.0 for v, _, _ in values]
        ax.bar(xs, heights, width * 0.95, color=color, label=name, gid=f"{ax.get_gid()}:{key}")
        whiskers = [(x, h, lo, hi) for x, h, (_, lo, hi) in zip(xs, heights, values)
                    if lo is not None and hi is not None]
        if whiskers:  # values without an interval (the paper's) get none
            x, h, lo, hi = (list(c) for c in zip(*whiskers))
            ax.errorbar(x, h, yerr=[[a - b for a, b in zip(h, lo)], [b - a for a, b in zip(h, hi)]], fmt="none",
                        ecolor="#333333", elinewidth=0.8, capsize=2)
    ax.axhline(baseline, color="#333333", lw=0.8, ls="--")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8, rotation=30, ha="right", rotation_mode="anchor")
    ax.set_ylabel(ylabel)


def draw(ladder: dict):
    """The figure of a ladder (module docstring)."""
    plt = pyplot()
    data = panels(ladder)
    labels = data["labels"]
    pairs = data["pairs"]["labels"]
    widths = [len(labels) + 1, len(labels), len(labels) + 1] + ([len(pairs)] if pairs else [])
    fig, axes = plt.subplots(1, len(widths), figsize=(4.2 + 3.0 * len(labels) + 1.2 * len(pairs), 4.4),
                             gridspec_kw={"width_ratios": widths})
    ax = axes[0]
    ax.set_gid("auroc")
    paper = {s: [(None, None, None)] * len(labels) + [(v, None, None)] for s, v in data["paper"]["auroc"].items()}
    _grouped(ax, labels + [PAPER_LABEL], {s: data["auroc"][s] + paper[s][-1:] for s in SIGNALS}, SIGNALS,
             ylabel="feedback AUROC (valid vs invalid)", baseline=0.5)
    ax.set_ylim(*auroc_limits(data["auroc"]))
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title("(a) feedback AUROC", fontsize=10)
    ax = axes[1]
    ax.set_gid("delta")
    _grouped(ax, labels, data["delta"], DELTAS, ylabel="Delta AUROC (residual - Full)", baseline=0.0)
    ax.legend(fontsize=7, loc="best")
    ax.set_title("(b) residual - Full, paired", fontsize=10)
    ax = axes[2]
    ax.set_gid("swap")
    swap = data["swap"] + [(v, None, None) for v in data["paper"]["swap"].values()]
    names = labels + [f"paper\n{m.removeprefix('Qwen3-')}" for m in data["paper"]["swap"]]
    bar_chart(ax, names, [v for v, _, _ in swap], [lo for _, lo, _ in swap], [hi for _, _, hi in swap],
              color=["#55A868"] * len(labels) + ["#BBBBBB"] * len(data["paper"]["swap"]),
              ylabel="AUROC drop when o_(k+1) is swapped", baseline=0.0, gid="swap",
              note="no swap in this ladder (--no-swap)")
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title("(c) observation swap: realized - swapped", fontsize=10)
    if pairs:
        ax = axes[3]
        ax.set_gid("pairs")
        _grouped(ax, pairs, {c: data["pairs"][c] for c in CHANGES}, CHANGES,
                 ylabel="change of AUROC, same steps (A - B)", baseline=0.0)
        ax.legend(fontsize=7, loc="best")
        ax.set_title("(d) across scorers, paired", fontsize=10)
    fig.tight_layout()
    return fig, data


def build(path, out_dir=None, *, pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Draw the ladder of ``path`` (a ``ladder.json`` or its folder) into ``out_dir`` (default: its folder)."""
    path, ladder = read_json_file(path, "ladder.json", "ladder")
    if not isinstance(ladder, dict) or not ladder.get("rungs"):
        raise FigureError(f"{path}: no rungs; expected the ladder.json of python -m rescoring.ladder")
    out_dir = Path(out_dir) if out_dir else path.parent
    fig, data = draw(ladder)
    runs = ", ".join(Path(r).name for r in ladder["runs"])
    ckpts = ladder.get("ckpt_steps") or "every checkpoint of each run folder"
    add_caption(fig, f"{len(ladder['runs'])} run(s) ({runs}), checkpoints: {ckpts}; "
                     f"labelled selected steps per rung: {', '.join(map(str, data['steps']))}; "
                     f"{ladder['n_boot']} trajectory-cluster resamples, {ladder['ci']:.0%} intervals; paper values: "
                     f"Fig. 2c (model not stated) and the swap appendix (Qwen3-1.7B, 4B, 8B)")
    return save_with_values(fig, out_dir, NAME, data, pdf=pdf, dpi=dpi)


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m figures.{NAME}", description=__doc__.split("\n")[0])
    parser.add_argument("ladder", metavar="JSON", help="the ladder.json of python -m rescoring.ladder (or its folder)")
    add_output_options(parser)
    parser.set_defaults(out=None)
    args = parser.parse_args(argv)
    return wrote(build(args.ladder, args.out, pdf=args.pdf, dpi=args.dpi))


main = entry_point(_main, f"figures.{NAME}")

if __name__ == "__main__":
    sys.exit(main())
