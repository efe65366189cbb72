"""Paper Fig. 5 (appendix "Observation-Swapping Sensitivity Analysis"): AUROC under realized and swapped o_{k+1}.

Draws the JSON of ``python -m rescoring.swap --run DIR`` (``DIR/swap/swap.json``): the AUROC of the step score
(mean |e| over the step's tokens) for progress against invalid steps, no-progress steps left out, once with the
realized next observation and once with o_{k+1} swapped for donor observations, each with the diagnostic's
bootstrap interval. One group of two bars per run (labelled by the JSON's ``run``, else the run folder's name),
or with ``--per-checkpoint`` one group per checkpoint of each run; a dashed line marks chance (0.5) and each
bar's AUROC is printed above it. An AUROC the diagnostic could not compute (a class missing: ``null``) is not
drawn, marked ``n/a`` and named in the caption. ``--paper-reference`` adds the paper's three settings
(:data:`figures.paper.SWAP_AUROC`) as hatched, lighter groups without intervals (the paper prints none). A run
folder without ``swap/swap.json`` is skipped with the command that writes it. Writes ``fig5_swap.png`` and the
values drawn in ``fig5_swap.json``.

Command::

    python -m figures.fig5_swap --run DIR [--run DIR ...] [--swap FILE ...] [--per-checkpoint]
        [--paper-reference] [--out DIR]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from figures._common import FigureError, SkipFigure, check_run_dir, figure_parser, read_json_file, wrote
from figures.drawing import add_caption, number, pyplot, save_and_close
from ocsd.cli import entry_point, write_json

__all__ = ["SWAP_FILE", "SwapInput", "Group", "swap_command", "read_swap", "find_inputs", "groups", "paper_groups",
           "draw", "caption", "build", "main"]

NAME = "fig5_swap"
SWAP_FILE = Path("swap") / "swap.json"
"""Where ``python -m rescoring.swap --run DIR`` writes, relative to the run folder."""
CONDITIONS = {"realized": ("realized $o_{k+1}$", "#4C72B0"), "swapped": ("swapped $o_{k+1}$", "#DD8452")}
"""Bar of each group -> (legend label, colour), left to right."""
DEFAULT_ORIENTATION = "higher mean |e| predicts progress"
"""The diagnostic's default orientation; another (``--higher invalid``) is named in the caption."""
_INTERVAL = ("auroc", "ci_low", "ci_high")
_COUNTS = ("n_steps", "n_progress", "n_no_progress", "n_invalid", "n_trajectories", "n_insufficient_donors")


def swap_command(run_dir) -> str:
    """The command that writes a run's swap file."""
    return f"python -m rescoring.swap --run {run_dir}"


@dataclass(frozen=True)
class SwapInput:
    """One ``swap.json`` read and checked.

    Attributes
    ----------
    path : Path
        The file.
    label : str
        Its group label: the JSON's ``run``, else the run folder's name (:func:`find_inputs` makes labels unique).
    data : dict
        The parsed JSON.
    """

    path: Path
    label: str
    data: dict


@dataclass(frozen=True)
class Group:
    """One group of two bars: an AUROC with its interval under realized and under swapped o_{k+1}.

    Attributes
    ----------
    label : str
        Tick label.
    kind : {"run", "checkpoint", "paper"}
    realized, swapped : dict
        ``{"auroc", "ci_low", "ci_high"}`` as floats, nan where missing (the paper's intervals always).
    source : str
        The swap file, or the paper's sentence.
    global_step : int, optional
        The checkpoint (kind ``"checkpoint"``).
    counts : dict
        Step counts of the input (``n_progress``, ``n_invalid``, ...), those it has.
    """

    label: str
    kind: str
    realized: dict
    swapped: dict
    source: str
    global_step: int | None = None
    counts: dict = field(default_factory=dict)

    @property
    def paper(self) -> bool:
        return self.kind == "paper"


def _fail(path: Path, key: str, problem: str):
    return FigureError(f"{path}: {key} {problem}; expected the JSON written by rescoring.swap")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_interval(path: Path, key: str, entry) -> None:
    if not isinstance(entry, dict):
        raise _fail(path, key, f"is {type(entry).__name__}, not an object with {', '.join(_INTERVAL)}")
    for k in _INTERVAL:
        if k not in entry:
            raise _fail(path, f"{key}.{k}", "is missing")
        if entry[k] is not None and not _is_number(entry[k]):
            raise _fail(path, f"{key}.{k}", f"is {entry[k]!r}, not a number or null")


def _check_counts(path: Path, key: str, entry: dict, required: Sequence[str]) -> None:
    for k in required:
        if k not in entry:
            raise _fail(path, f"{key}{k}", "is missing")
    for k in _COUNTS:
        if k in entry and not (isinstance(entry[k], int) and not isinstance(entry[k], bool)):
            raise _fail(path, f"{key}{k}", f"is {entry[k]!r}, not an integer")


def read_swap(path, *, label: str | None = None) -> SwapInput:
    """Read and check a ``python -m rescoring.swap`` ``swap.json`` (or the folder holding it).

    Parameters
    ----------
    path : path
        The file, or its folder.
    label : str, optional
        Group label; default the JSON's ``run``, else the run folder's name (the folder above ``swap/``).

    Raises
    ------
    FigureError
        The file is missing or not JSON, or lacks a key the figure draws (``realized``, ``swapped`` with
        ``auroc``, ``ci_low``, ``ci_high`` each, ``n_progress``, ``n_invalid``; per checkpoint ``global_step``,
        ``realized``, ``swapped``); the message names the file and the key.
    """
    path, data = read_json_file(path, SWAP_FILE.name, "swap file")
    if not isinstance(data, dict):
        raise FigureError(f"{path}: holds {type(data).__name__}, not an object; expected the JSON written by "
                          f"rescoring.swap")
    for key in CONDITIONS:
        if key not in data:
            raise _fail(path, key, "is missing")
        _check_interval(path, key, data[key])
    _check_counts(path, "", data, ("n_progress", "n_invalid"))
    checkpoints = data.get("per_checkpoint", [])
    if not isinstance(checkpoints, list):
        raise _fail(path, "per_checkpoint", f"is {type(checkpoints).__name__}, not a list")
    for i, entry in enumerate(checkpoints):
        where = f"per_checkpoint[{i}]"
        if not isinstance(entry, dict):
            raise _fail(path, where, f"is {type(entry).__name__}, not an object")
        if not isinstance(entry.get("global_step"), int) or isinstance(entry.get("global_step"), bool):
            raise _fail(path, f"{where}.global_step", "is missing" if "global_step" not in entry
                        else f"is {entry['global_step']!r}, not an integer")
        for key in CONDITIONS:
            if key not in entry:
                raise _fail(path, f"{where}.{key}", "is missing")
            _check_interval(path, f"{where}.{key}", entry[key])
        _check_counts(path, f"{where}.", entry, ())
    folder = path.parent.parent if path.parent.name == SWAP_FILE.parent.name else path.parent
    return SwapInput(path, label or str(data.get("run") or folder.resolve().name), data)


def find_inputs(run_dirs: Sequence = (), swap_files: Sequence = ()) -> tuple[list[SwapInput], list[str]]:
    """The swap files of the run folders (``DIR/swap/swap.json``) and the named files, labels made unique.

    Returns
    -------
    inputs : list of SwapInput
        Run folders first, then ``swap_files``, in the order given; where two share a label, the file's
        folder is added (``"label [folder]"``).
    skipped : list of str
        One reason per run folder without a swap file, naming the command that writes it.

    Raises
    ------
    FigureError
        A run folder is missing, a named file is missing, or a file is malformed (:func:`read_swap`).
    """
    inputs, skipped = [], []
    for run in run_dirs:
        run = check_run_dir(run)
        if not (run / SWAP_FILE).is_file():
            skipped.append(f"{run} has no {SWAP_FILE}; run {swap_command(run)} first")
            continue
        inputs.append(read_swap(run / SWAP_FILE))
    inputs += [read_swap(p) for p in swap_files]
    labels = [i.label for i in inputs]
    return [SwapInput(i.path, f"{i.label} [{i.path.parent}]" if labels.count(i.label) > 1 else i.label, i.data)
            for i in inputs], skipped


def _interval(entry: dict) -> dict:
    return {k: number(entry.get(k)) for k in _INTERVAL}


def _counts(entry: dict) -> dict:
    return {k: entry[k] for k in _COUNTS if k in entry}


def _pooled_run(data: dict, entry: dict) -> str | None:
    """The run of a pooled file's checkpoint entry (``"RUN/global_step_N"``); None for one run's file."""
    name = entry.get("checkpoint")
    if "runs" not in data or not isinstance(name, str) or "/" not in name:
        return None
    return name.rsplit("/", 1)[0]


def groups(inputs: Sequence[SwapInput], *, per_checkpoint: bool = False) -> list[Group]:
    """The groups to draw: one per input (its pooled AUROCs), or one per checkpoint of each input.

    Checkpoint groups are labelled ``"<run>\\nstep N"`` in the file's order; a pooled file's checkpoints
    (``python -m rescoring.swap_pool``) by the runs their ``checkpoint`` names, not by the pooled label.
    """
    out = []
    for inp in inputs:
        if not per_checkpoint:
            out.append(Group(inp.label, "run", _interval(inp.data["realized"]), _interval(inp.data["swapped"]),
                             str(inp.path), counts=_counts(inp.data)))
            continue
        for entry in inp.data.get("per_checkpoint", []):
            step = entry["global_step"]
            run = _pooled_run(inp.data, entry) or inp.label
            out.append(Group(f"{run}\nstep {step}", "checkpoint", _interval(entry["realized"]),
                             _interval(entry["swapped"]), str(inp.path), step, _counts(entry)))
    return out


#: the longest tick-label line (characters) drawn upright: at fontsize 8 a longer one reaches past its group's
#: 1.2 inches into the next (a run name such as ``ocsd_qwen0.5b_s1``, 16 characters, did)
SLANT_ABOVE = 12


def paper_groups() -> list[Group]:
    """The paper's three settings (:data:`figures.paper.SWAP_AUROC`), labelled ``"paper <model>"``, no intervals."""
    from figures.paper import SWAP_AUROC

    nan = float("nan")
    return [Group(f"paper {model}", "paper", *({"auroc": v[c].mean, "ci_low": nan, "ci_high": nan} for c in CONDITIONS),
                  source=v["realized"].source) for model, v in SWAP_AUROC.items()]


def draw(drawn: Sequence[Group], *, title: str | None = None):
    """Grouped bars, realized and swapped side by side per group, intervals as whiskers, chance at 0.5.

    Parameters
    ----------
    drawn : sequence of Group
        Ours first, then the paper's (hatched, lighter, no whiskers; a dotted line separates them).
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
        One axes, ``gid`` ``"auroc"``; each bar patch has ``gid`` ``"<group label>|<condition>"``; a missing AUROC
        has no patch and an ``n/a`` mark instead.
    """
    plt = pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    n = len(drawn)
    labels = [g.label.replace("paper ", "paper\n", 1) if g.paper else g.label for g in drawn]
    longest = max((len(line) for lab in labels for line in lab.split("\n")), default=0)
    crowded = n > 8 or longest > SLANT_ABOVE  # tick labels side by side would touch: slant them
    fig, ax = plt.subplots(figsize=(max(5.0, (0.8 if crowded else 1.2) * n + 2.6), 3.8))
    ax.set_gid("auroc")
    x = np.arange(n)
    width = 0.38
    at_bottom = ax.get_xaxis_transform()
    highest = 0.0
    for j, (condition, (name, color)) in enumerate(CONDITIONS.items()):
        offset = (j - 0.5) * width
        for xi, group in zip(x, drawn):
            entry = getattr(group, condition)
            value, low, high = entry["auroc"], entry["ci_low"], entry["ci_high"]
            if not np.isfinite(value):
                ax.text(xi + offset, 0.02, "n/a", transform=at_bottom, ha="center", va="bottom", fontsize=7,
                        color="grey")
                continue
            ax.bar(xi + offset, value, width, color=color, alpha=0.45 if group.paper else 1.0,
                   hatch="///" if group.paper else None, edgecolor="dimgrey" if group.paper else "black",
                   linewidth=0.5, gid=f"{group.label}|{condition}")
            top = value
            if np.isfinite(low) and np.isfinite(high):
                # whiskers over the interval, not around the bar: a percentile interval need not contain the estimate
                ax.errorbar(xi + offset, (low + high) / 2, yerr=abs(high - low) / 2, fmt="none", ecolor="black",
                            elinewidth=0.8, capsize=3)
                top = max(value, high)
            ax.text(xi + offset, top + 0.015, f"{value:.3f}", ha="center", va="bottom", fontsize=6.5,
                    rotation=90 if crowded else 0)
            highest = max(highest, top)
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ours = sum(not g.paper for g in drawn)
    if 0 < ours < n:
        ax.axvline(ours - 0.5, color="grey", lw=0.8, ls=":", gid="paper-separator")
    ax.set_xticks(x, labels, fontsize=8, rotation=30 if crowded else 0, ha="right" if crowded else "center",
                  rotation_mode="anchor" if crowded else "default")
    ax.set_xlim(-0.6, n - 0.4)
    # room above 1 for the labels of bars or whiskers that reach near the top, the AUROC axis itself ending at 1
    ax.set_ylim(0, 1.13 if highest > 0.88 else 1)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_ylabel("AUROC, progress vs invalid steps\n(step score: mean |e|)", fontsize=9)
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(axis="y", alpha=0.3, lw=0.5)
    handles = [Patch(facecolor=color, edgecolor="black", linewidth=0.5, label=name)
               for name, color in CONDITIONS.values()]
    if ours < n:
        handles.append(Patch(facecolor="white", edgecolor="dimgrey", hatch="///", linewidth=0.5,
                             label="paper (no interval printed)"))
    handles.append(Line2D([], [], color="grey", lw=0.8, ls="--", label="chance (0.5)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title(title or "Valid vs invalid steps under realized and swapped future observations", fontsize=10,
                 pad=14)
    fig.tight_layout()
    return fig


def _steps(counts: dict) -> str:
    text = f"{counts.get('n_progress', '?')} progress vs {counts.get('n_invalid', '?')} invalid steps"
    if "n_no_progress" in counts:
        text += f" ({counts['n_no_progress']} no-progress excluded)"
    return text


def caption(inputs: Sequence[SwapInput], drawn: Sequence[Group], *, per_checkpoint: bool = False) -> str:
    """What the figure is drawn from: per input its run, model, checkpoints, steps and donors; the interval;
    the AUROCs not drawn; the paper's values where drawn."""
    parts = []
    for inp in inputs:
        d = inp.data
        steps = d.get("checkpoints") or [e["global_step"] for e in d.get("per_checkpoint", [])]
        text = f"{inp.label} ({inp.path}"
        text += f", model {d['model']}" if d.get("model") else ""
        text += f", checkpoints {', '.join(map(str, steps))}" if steps else ""
        text += f": {_steps(d)}"
        text += f" in {d['n_trajectories']} trajectories" if "n_trajectories" in d else ""
        text += f", {d['donors']} donors per step" if "donors" in d else ""
        short = d.get("n_insufficient_donors", len(d.get("insufficient_donors") or []))
        text += f", {short} step(s) without enough donors left out" if short else ""
        orientation = d.get("orientation", DEFAULT_ORIENTATION)
        text += f", {orientation}" if orientation != DEFAULT_ORIENTATION else ""
        parts.append(text + ")")
    ci = {(number(i.data.get("ci")), i.data.get("n_boot")) for i in inputs}
    if len(ci) == 1:
        (level, n_boot), = ci
        text = f"error bars: {level:.0%} bootstrap interval" if np.isfinite(level) else "error bars: bootstrap interval"
        parts.append(text + (f" ({n_boot} resamples)" if n_boot else ""))
    missing = [f"{g.label.replace(chr(10), ' ')} {c}" for g in drawn for c in CONDITIONS
               if not np.isfinite(getattr(g, c)["auroc"])]
    if missing:
        parts.append("no AUROC (a class missing), not drawn: " + ", ".join(missing))
    if per_checkpoint:
        parts.append("one group per checkpoint")
    if any(g.paper for g in drawn):
        parts.append("paper: the appendix's values (Qwen3-1.7B, 4B, 8B), no intervals printed")
    return "drawn from " + "; ".join(parts)


def build(run_dirs: Sequence = (), out_dir="figures_out", *, swap_files: Sequence = (), per_checkpoint: bool = False,
          paper_reference: bool = False, name: str = NAME, pdf: bool = False, dpi: int = 150) -> list[Path]:
    """Read the swap files, draw Fig. 5 and write the PNG (and PDF) and the values drawn.

    Parameters
    ----------
    run_dirs : sequence of path
        Run folders; each contributes its ``swap/swap.json`` (one without it is skipped, the reason printed).
    out_dir : path
    swap_files : sequence of path
        ``swap.json`` files named directly.
    per_checkpoint : bool
        One group per checkpoint of each run instead of one per run.
    paper_reference : bool
        Add the paper's three settings.

    Returns
    -------
    list of Path
        The PNG (and PDF) and ``<name>.json`` written.

    Raises
    ------
    FigureError
        A run folder or named file is missing, or a swap file is malformed.
    SkipFigure
        No run folder has a swap file and none is named, or (``per_checkpoint``) no input has a checkpoint entry.
    """
    if not run_dirs and not swap_files:
        raise FigureError("no input: give --run DIR (repeatable) or --swap FILE")
    inputs, skipped = find_inputs(run_dirs, swap_files)
    if not inputs:
        raise SkipFigure("; ".join(skipped))
    for reason in skipped:
        print(f"{name}: skipped one run: {reason}", file=sys.stderr)
    ours = groups(inputs, per_checkpoint=per_checkpoint)
    if not ours:
        raise SkipFigure("no per_checkpoint entry in " + ", ".join(str(i.path) for i in inputs))
    drawn = ours + (paper_groups() if paper_reference else [])
    fig = draw(drawn)
    add_caption(fig, caption(inputs, drawn, per_checkpoint=per_checkpoint))  # wrapped to the figure's width there
    paths = save_and_close(fig, out_dir, name, pdf=pdf, dpi=dpi)
    values = {"groups": [{"label": g.label, "kind": g.kind, "global_step": g.global_step, "source": g.source,
                          **{c: getattr(g, c) for c in CONDITIONS}, **g.counts} for g in drawn],
              "per_checkpoint": per_checkpoint, "paper_reference": paper_reference,
              "inputs": [str(i.path) for i in inputs], "skipped": skipped}
    out = Path(out_dir) / f"{name}.json"
    write_json(out, values, indent=1)
    return [*paths, out]


def _main(argv: Sequence[str] | None) -> int:
    parser = figure_parser(f"figures.{NAME}", __doc__.split("\n")[0],
                           run_help=f"run folder with {SWAP_FILE} (python -m rescoring.swap --run DIR); repeatable")
    parser.add_argument("--swap", action="append", default=[], metavar="FILE",
                        help="a rescoring.swap swap.json named directly (or its folder); repeatable")
    parser.add_argument("--per-checkpoint", action="store_true",
                        help="one group per checkpoint of each run instead of one per run")
    parser.add_argument("--paper-reference", action="store_true",
                        help="add the paper's settings (Qwen3-1.7B 0.803 -> 0.542, Qwen3-4B 0.668 -> 0.484, "
                             "Qwen3-8B 0.664 -> 0.552)")
    args = parser.parse_args(argv)
    paths = build(args.run, args.out, swap_files=args.swap, per_checkpoint=args.per_checkpoint,
                  paper_reference=args.paper_reference, pdf=args.pdf, dpi=args.dpi)
    return wrote(paths)


main = entry_point(_main, f"figures.{NAME}")


if __name__ == "__main__":
    sys.exit(main())
