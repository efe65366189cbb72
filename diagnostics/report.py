"""All diagnoses of a run in one Markdown report with figures.

Runs :mod:`diagnostics.auroc`, :mod:`diagnostics.robustness`, :mod:`diagnostics.dratio` and
:mod:`diagnostics.tails` on data loaded once and writes ``report.md``, ``report.json`` and PNGs
(AUROC bars, Delta AUROC bars, D bars with intervals, four word clouds) into ``--out``.

Command::

    python -m diagnostics.report --run DIR [--out DIR] [--n-boot 1000] [--json]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from diagnostics import _cli, auroc, dratio, robustness, tails
from diagnostics.wordtable import word_table

__all__ = ["build_report", "main"]


def _bar_chart(path: Path, labels, values, lows, highs, *, ylabel: str, title: str, baseline: float | None = None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = np.asarray(values, dtype=float)
    err = np.vstack([values - np.asarray(lows, float), np.asarray(highs, float) - values])
    fig, ax = plt.subplots(figsize=(1.2 * len(labels) + 2, 3.2))
    ax.bar(range(len(labels)), values, yerr=np.nan_to_num(err), capsize=4, color="#4C72B0")
    ax.set_xticks(range(len(labels)), labels, rotation=20 if len(labels) > 4 else 0)
    if baseline is not None:
        ax.axhline(baseline, color="grey", lw=0.8, ls="--")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def build_report(data, out_dir, *, n_boot: int = 1000, ci: float = 0.95, seed: int = 0, top: int = 30,
                 progress: bool = True, source: str = "") -> dict:
    """Compute every diagnosis and write ``report.md``, ``report.json`` and the figures.

    Returns
    -------
    dict
        ``{"auroc", "robustness", "dratio", "tails", "files", "seconds"}`` (each as its command's JSON).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    timings = {}
    t0 = time.perf_counter()
    res_auroc = auroc.feedback_auroc(data, n_boot=n_boot, ci=ci, seed=seed)
    timings["auroc"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    res_rob = robustness.robustness(data, n_boot=n_boot, ci=ci, seed=seed, progress=progress)
    timings["robustness"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    res_d = dratio.dratio(data, n_boot=n_boot, ci=ci, seed=seed)
    timings["dratio"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    res_t, rates = tails.tails(data, top=top, words=word_table(data, centre=True))
    files = {"csv": str(tails.write_csv(rates, out_dir, top=top))}
    files.update(tails.write_clouds(rates, out_dir, seed=seed))
    timings["tails"] = time.perf_counter() - t0
    res_t["files"] = dict(files)

    sig = res_auroc["signals"]
    files["auroc_png"] = str(_bar_chart(out_dir / "auroc.png", ["Ablated", "Full", "Residual"],
                                        [sig[k]["auroc"] for k in sig], [sig[k]["ci_low"] for k in sig],
                                        [sig[k]["ci_high"] for k in sig], ylabel="AUROC", baseline=0.5,
                                        title="Valid vs invalid steps"))
    files["delta_png"] = str(_bar_chart(out_dir / "delta_auroc.png", list(res_rob),
                                        [v["delta"] for v in res_rob.values()], [v["ci_low"] for v in res_rob.values()],
                                        [v["ci_high"] for v in res_rob.values()], ylabel="dAUROC", baseline=0.0,
                                        title="AUROC(residual) - AUROC(full)"))
    cats = res_d["categories"]
    files["dratio_png"] = str(_bar_chart(out_dir / "dratio.png", list(cats), [v["mean"] for v in cats.values()],
                                         [v["ci_low"] for v in cats.values()], [v["ci_high"] for v in cats.values()],
                                         ylabel="mean D", title="Relative residual contribution per role"))
    pct = f"{ci:.0%}"
    lines = [
        "# Replay-support diagnosis", "",
        f"Input: {source or 'checkpoints'}; {data.n_checkpoints} checkpoint(s) (global steps "
        f"{int(data.global_steps.min())}-{int(data.global_steps.max())}), env `{data.env}`, "
        f"{len(data.steps)} analysed steps, {n_boot} trajectory-cluster resamples, {pct} percentile intervals.", "",
        "## Feedback AUROC", "",
        f"{res_auroc['n_steps']} labelled steps ({res_auroc['n_valid']} valid, {res_auroc['n_invalid']} invalid; "
        f"ambiguous excluded) in {res_auroc['n_trajectories']} trajectories.", "",
        f"| signal | AUROC | {pct} CI |", "|---|---|---|",
        *[f"| {k} | {_cli.fmt(v['auroc'])} | [{_cli.fmt(v['ci_low'])}, {_cli.fmt(v['ci_high'])}] |"
          for k, v in sig.items()], "", "![AUROC](auroc.png)", "",
        "## Delta AUROC (residual - full)", "",
        f"| setting | dAUROC | {pct} CI | steps |", "|---|---|---|---|",
        *[f"| {k} | {_cli.fmt(v['delta'])} | [{_cli.fmt(v['ci_low'])}, {_cli.fmt(v['ci_high'])}] | {v['n_steps']} |"
          for k, v in res_rob.items()], "", "![Delta AUROC](delta_auroc.png)", "",
        "## Relative residual contribution D per functional role", "",
        f"Checkpoints weighted equally; entity lexicon: {res_d['lexicon_source']}.", "",
        f"| role | mean D | {pct} CI | words |", "|---|---|---|---|",
        *[f"| {k} | {_cli.fmt(v['mean'])} | [{_cli.fmt(v['ci_low'])}, {_cli.fmt(v['ci_high'])}] | {v['n_words']} |"
          for k, v in cats.items()], "", "![D ratio](dratio.png)", "",
        "## Tail-enriched words", "",
        f"Upper 5% tails of checkpoint-centred delta_F, delta_A, e and the lower 5% tail of e; size = "
        f"tail rate x log(1 + count). Top {top} words per tail in `tails_top_words.csv`.", "",
        "| tail | top words |", "|---|---|",
        *[f"| {k} | {', '.join(w['word'] for w in v[:15])} |" for k, v in res_t["top"].items()], "",
        "| top-set pair | Jaccard |", "|---|---|",
        *[f"| {k} | {_cli.fmt(v)} |" for k, v in res_t["overlap"].items()], "",
        *[f"![{k}]({Path(p).name})" for k, p in files.items() if k in tails.TAILS], "",
    ]
    (out_dir / "report.md").write_text("\n".join(lines))
    files["report"] = str(out_dir / "report.md")
    result = {"auroc": res_auroc, "robustness": res_rob, "dratio": res_d, "tails": res_t, "files": files,
              "seconds": timings}
    (out_dir / "report.json").write_text(json.dumps(_cli.jsonable(result), indent=2, allow_nan=False))
    return result


def _main(argv: Sequence[str] | None) -> int:
    parser = _cli.base_parser("diagnostics.report", __doc__.split("\n")[0])
    parser.add_argument("--out", default="diagnostics_out", help="output folder (default diagnostics_out)")
    parser.add_argument("--top", type=int, default=30, help="top words per tail (30)")
    args = parser.parse_args(argv)
    data = _cli.load_args(args)
    result = build_report(data, args.out, n_boot=args.n_boot, ci=args.ci, seed=args.seed, top=args.top,
                          source=args.run or ", ".join(args.ckpt))
    table = "\n\n".join([auroc.table(result["auroc"], args.ci), robustness.table(result["robustness"], args.ci),
                         dratio.table(result["dratio"], args.ci), tails.table(result["tails"]),
                         f"wrote {result['files']['report']}"])
    _cli.emit(args, result, table)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m diagnostics.report``."""
    return _cli.run_main(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
