"""The feedback AUROC and Delta AUROC (residual - Full) along training, window by window of global steps.

Fig. 2's numbers pool every checkpoint given; its early / middle / late thirds split them coarsely. Here the
labelled steps (``valid`` positive, ``invalid`` negative) are grouped into windows of ``width`` consecutive global
steps, counted from the smallest step loaded (``[g0, g0 + width)``, ``[g0 + width, g0 + 2 width)``, ...), pooling
every run's checkpoints that fall in a window. In each window the AUROC of each step signal (Ablated, Full,
residual) and the paired difference residual - Full come from the same 1,000 trajectory-cluster resamples drawn
within the window, as :mod:`diagnostics.auroc` and the raw setting of :mod:`diagnostics.robustness` do for the
pool. A window that lacks a class gets nan (with a warning); a window without any loaded step is left out.

Command::

    python -m diagnostics.by_step --run DIR [--run DIR ...] [--width 4] [--n-boot 1000] [--json]
"""

from __future__ import annotations

import sys
import warnings
from typing import Sequence

import numpy as np

from diagnostics.auroc import signal_aurocs
from diagnostics.bootstrap import as_generator, paired_delta_auroc
from diagnostics.load import DiagData
from diagnostics.options import command_parser, load_args
from diagnostics.stats import DegenerateInputWarning
from ocsd.cli import emit, entry_point, format_table, positive_int

__all__ = ["step_windows", "by_step", "table", "main"]


def step_windows(global_steps, width: int) -> np.ndarray:
    """The window of each global step: ``(g - min(g)) // width`` (0 for the smallest step loaded).

    Raises
    ------
    ValueError
        ``width`` < 1.
    """
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    steps = np.asarray(global_steps, dtype=np.int64)
    return (steps - steps.min()) // width if steps.size else steps


def by_step(data: DiagData, *, width: int = 1, n_boot: int = 1000, ci: float = 0.95, seed=0) -> dict:
    """Feedback AUROC of each signal and Delta AUROC (residual - Full) per window of ``width`` global steps.

    Parameters
    ----------
    data : DiagData
        Loaded steps of one or more runs (:func:`diagnostics.load.load`).
    width : int, default 1
        Global steps per window; 1 gives each training step its own window.
    n_boot : int, default 1000
    ci : float, default 0.95
    seed : int, Generator or None
        Each window draws its resamples from its own seed, taken in window order from this one.

    Returns
    -------
    dict
        ``{"width", "n_boot", "ci", "windows": [{"first", "last", "global_steps", "n_checkpoints", "n_steps",
        "n_valid", "n_invalid", "n_trajectories", "signals": {"ablated"|"full"|"residual": {"auroc", "ci_low",
        "ci_high"}}, "delta": {"delta", "ci_low", "ci_high"}}]}``; ``first`` and ``last`` bound the window,
        ``global_steps`` are the steps loaded in it.
    """
    lab = data.labelled()
    steps = lab["global_step"].to_numpy(np.int64)
    window = step_windows(steps, width)
    g0 = int(steps.min()) if steps.size else 0
    present = np.unique(window)
    seeds = as_generator(seed).integers(0, 2**63 - 1, size=present.size)
    out = {"width": int(width), "n_boot": int(n_boot), "ci": float(ci), "windows": []}
    for w, s in zip(present, seeds):
        part = lab[window == w]
        y = part["y"].to_numpy(bool)
        first = g0 + int(w) * width
        entry = {"first": first, "last": first + width - 1,
                 "global_steps": sorted(int(g) for g in part["global_step"].unique()),
                 "n_checkpoints": int(part["ckpt"].nunique()), "n_steps": int(y.size), "n_valid": int(y.sum()),
                 "n_invalid": int((~y).sum()), "n_trajectories": int(part["cluster"].nunique())}
        one_class = y.all() or not y.any()
        if one_class:
            warnings.warn(f"global steps {first}-{first + width - 1}: needs valid and invalid steps "
                          f"({entry['n_valid']} valid, {entry['n_invalid']} invalid in "
                          f"{data.checkpoint_names(part['ckpt'])}); its AUROCs are nan", DegenerateInputWarning,
                          stacklevel=2)
        entry["signals"] = signal_aurocs(part, n_boot=n_boot, ci=ci, seed=int(s))  # nan without both classes
        if one_class:
            entry["delta"] = {"delta": float("nan"), "ci_low": float("nan"), "ci_high": float("nan")}
        else:
            d = paired_delta_auroc(y, part["S_residual"].to_numpy(), part["S_full"].to_numpy(),
                                   part["cluster"].to_numpy(), n_boot=n_boot, ci=ci, seed=int(s))
            entry["delta"] = d.as_dict("delta")
        out["windows"].append(entry)
    return out


def table(result: dict) -> str:
    """Plain-text rendering of :func:`by_step`'s result."""
    pct = f"{result['ci']:.0%}"
    rows = []
    for w in result["windows"]:
        span = str(w["first"]) if w["first"] == w["last"] else f"{w['first']}-{w['last']}"
        sig = w["signals"]
        rows.append([span, w["n_checkpoints"], f"{w['n_steps']} ({w['n_invalid']})",
                     sig["ablated"]["auroc"], sig["full"]["auroc"], sig["residual"]["auroc"],
                     w["delta"]["delta"], w["delta"]["ci_low"], w["delta"]["ci_high"]])
    title = (f"Feedback AUROC along training, windows of {result['width']} global step(s), "
             f"{result['n_boot']} trajectory-cluster resamples per window")
    return format_table(["steps", "checkpoints", "labelled (invalid)", "Ablated", "Full", "residual",
                         "residual - Full", f"{pct} low", f"{pct} high"], rows, title=title)


def _main(argv: Sequence[str] | None) -> int:
    parser = command_parser("diagnostics.by_step", __doc__.split("\n")[0])
    parser.add_argument("--width", type=positive_int("--width"), default=1,
                        help="global steps per window, >= 1 (default 1: each training step on its own)")
    args = parser.parse_args(argv)
    data = load_args(args)
    result = by_step(data, width=args.width, n_boot=args.n_boot, ci=args.ci, seed=args.seed)
    emit(args.json, result, table(result))
    return 0


main = entry_point(_main, "diagnostics.by_step")


if __name__ == "__main__":
    sys.exit(main())
