"""Paper Fig. 1 from data: one step's response, token by token, coloured by Full support, Ablated support
and the residual, with the step's action, next observation and feedback label.

The numbers come from :func:`diagnostics.example.token_example` (a named step, or the invalid step with the
largest mean |e|). Writes ``fig1_example.png``, ``fig1_example.html`` (a self-contained page: hovering a
token shows its three numbers) and the values drawn in ``fig1_example.json``.

Command::

    python -m figures.fig1_example --run DIR [--step traj_uid:k | global_step:traj_uid:k] [--out DIR]
"""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from figures._common import FigureError, check_run_dir, figure_parser, wrote
from figures.drawing import add_caption, pyplot, save_and_close
from ocsd.cli import entry_point

if TYPE_CHECKING:
    from diagnostics.example import TokenExample

__all__ = ["ROWS", "color_scale", "draw", "to_html", "shown_checkpoint", "build", "main"]

NAME = "fig1_example"
ROWS = (("d_full", "Full support  δF = log πF − log πS"),
        ("d_ablated", "Ablated support  δA = log πA − log πS"),
        ("residual", "Residual  e = log πF − log πA"))
"""Signal attribute of :class:`diagnostics.example.TokenExample` and its row title, top to bottom."""
LINE_CHARS = 60


def color_scale(example: TokenExample) -> float:
    """The colour range +-v shared by the three rows: the 98th percentile of |value| over every token."""
    values = np.abs(np.concatenate([getattr(example, attr) for attr, _ in ROWS]))
    return float(max(np.percentile(values, 98), 1e-6)) if values.size else 1.0


def _layout(tokens: Sequence[str]) -> list[tuple[int, int, int]]:
    """(line, first column, width in characters) of each token, wrapped at :data:`LINE_CHARS`."""
    out, line, col = [], 0, 0
    for tok in tokens:
        width = max(1, len(tok.replace("\n", " ")))
        if col + width > LINE_CHARS and col > 0:
            line, col = line + 1, 0
        out.append((line, col, width))
        col += width
    return out


def draw(example: TokenExample):
    """Three stacked token maps (one per signal), diverging colours on a shared scale.

    Returns
    -------
    matplotlib.figure.Figure
        Axes ``gid`` per signal attribute; each token rectangle has ``gid`` ``"<attr>|<token index>"`` and the
        value as its ``_value`` attribute.
    """
    plt = pyplot()
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.patches import Rectangle

    layout = _layout(example.tokens)
    n_lines = (layout[-1][0] + 1) if layout else 1
    vmax = color_scale(example)
    norm, cmap = TwoSlopeNorm(vcenter=0.0, vmin=-vmax, vmax=vmax), plt.get_cmap("RdBu_r")
    fig, axes = plt.subplots(len(ROWS), 1, figsize=(10, 1.2 + 0.9 * len(ROWS) * (0.45 + 0.32 * n_lines)))
    for ax, (attr, title) in zip(np.atleast_1d(axes), ROWS):
        ax.set_gid(attr)
        values = getattr(example, attr)
        for i, ((line, col, width), tok, value) in enumerate(zip(layout, example.tokens, values)):
            rect = Rectangle((col, -line - 1), width, 0.9, facecolor=cmap(norm(value)), edgecolor="white", lw=0.5)
            rect.set_gid(f"{attr}|{i}")
            rect._value = float(value)
            ax.add_patch(rect)
            dark = abs(norm(value) - 0.5) > 0.32
            ax.text(col + width / 2, -line - 0.55, tok.replace("\n", "⏎"), ha="center", va="center",
                    fontsize=7, family="monospace", color="white" if dark else "black")
        ax.set_xlim(0, LINE_CHARS)
        ax.set_ylim(-n_lines - 0.1, 0.05)
        ax.set_axis_off()
        ax.set_title(f"{title}   (mean {values.mean():+.3f})", fontsize=9, loc="left")
    sm = pyplot().cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=axes, fraction=0.025, pad=0.01, label="log-prob difference (nats)")
    obs = example.obs_next if len(example.obs_next) <= 110 else example.obs_next[:107] + "..."
    fig.suptitle(f"action: {example.action}   |   feedback: {example.feedback_label}\nnext observation: {obs}",
                 fontsize=9, x=0.02, y=1.04, ha="left")
    return fig


def to_html(example: TokenExample) -> str:
    """A self-contained page: the step's context, then its tokens three times (one per signal), each token
    coloured by its value and showing delta_F, delta_A and e on hover."""
    plt = pyplot()
    from matplotlib.colors import TwoSlopeNorm, to_hex

    vmax = color_scale(example)
    norm, cmap = TwoSlopeNorm(vcenter=0.0, vmin=-vmax, vmax=vmax), plt.get_cmap("RdBu_r")
    rows = []
    for attr, title in ROWS:
        spans = []
        for tok, f, a, e, v in zip(example.tokens, example.d_full, example.d_ablated, example.residual,
                                   getattr(example, attr)):
            tip = f"δF = {f:+.4f}&#10;δA = {a:+.4f}&#10;e = {e:+.4f}"
            spans.append(f'<span class="t" style="background:{to_hex(cmap(norm(v)))}" title="{tip}">'
                         f"{html.escape(tok).replace(chr(10), '⏎<br>')}</span>")
        rows.append(f"<h3>{html.escape(title)}</h3><div class='toks'>{''.join(spans)}</div>")
    head = (f"<p><b>step</b> {example.global_step}:{html.escape(example.traj_uid)}:{example.step_idx} "
            f"({html.escape(example.chosen)}) &middot; <b>checkpoint</b> {html.escape(example.checkpoint)}</p>"
            f"<p><b>action</b> {html.escape(example.action)} &middot; <b>feedback</b> "
            f"{html.escape(example.feedback_label)}</p><p><b>next observation</b> {html.escape(example.obs_next)}</p>"
            f"<p>Colour: blue negative, red positive, shared scale &plusmn;{vmax:.3g} nats; hover a token for "
            f"its three numbers.</p>")
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto}"
             ".toks{font-family:monospace;line-height:1.9;white-space:pre-wrap}"
             ".t{padding:1px 0;border-radius:2px;cursor:default}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Token-level example</title>"
            f"<style>{style}</style></head><body><h2>Token-level example</h2>{head}{''.join(rows)}</body></html>\n")


def shown_checkpoint(checkpoint: str, run_dir) -> str:
    """The checkpoint as the page and the values name it: its folder relative to the run folder (``global_step_4``),
    or its folder name when the run folder is the checkpoint itself or does not hold it; never a path of the
    machine that drew the figure."""
    folder, run = Path(checkpoint), Path(run_dir).resolve()
    try:
        relative = folder.relative_to(run)
    except ValueError:
        return folder.name
    return relative.as_posix() if relative.parts else folder.name


def build(run_dir, out_dir, *, step: str | None = None, pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Pick the step, draw the PNG, write the HTML page and the values (checkpoints named relative to the run
    folder, :func:`shown_checkpoint`)."""
    from dataclasses import replace

    from diagnostics.example import token_example

    example = token_example(run_dir, step=step)
    example = replace(example, checkpoint=shown_checkpoint(example.checkpoint, run_dir))
    fig = draw(example)
    add_caption(fig, f"{Path(run_dir).name}, global step {example.global_step}, "
                     f"{example.traj_uid}:{example.step_idx} ({example.chosen}); {len(example.tokens)} tokens, "
                     f"mean |e| {example.mean_abs_residual:.3f}")
    paths = save_and_close(fig, out_dir, NAME, pdf=pdf, dpi=dpi)
    page = Path(out_dir) / f"{NAME}.html"
    page.write_text(to_html(example), encoding="utf-8")
    values = Path(out_dir) / f"{NAME}.json"
    values.write_text(json.dumps(example.as_dict(), indent=1) + "\n")
    return [*paths, page, values]


def _main(argv: Sequence[str] | None) -> int:
    parser = figure_parser(f"figures.{NAME}", __doc__.split("\n")[0], runs="1")
    parser.add_argument("--step", metavar="TRAJ:K", help="the step (traj_uid:k or global_step:traj_uid:k); "
                                                         "default: the invalid step with the largest mean |e|")
    args = parser.parse_args(argv)
    if len(args.run) != 1:
        raise FigureError(f"give exactly one --run DIR (a run or checkpoint folder), got {len(args.run)}")
    paths = build(check_run_dir(args.run[0]), args.out, step=args.step, pdf=args.pdf, dpi=args.dpi)
    return wrote(paths)


main = entry_point(_main, f"figures.{NAME}")


if __name__ == "__main__":
    sys.exit(main())
