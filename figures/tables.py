"""Paper Table 1: validation success per task type and overall, mean ± std over seeds.

Each run contributes its last validation row (the last ``metrics.jsonl`` row with
``val/success_rate``): overall success and ``val/success/<type>`` per task type, shown in percent.
Runs are grouped by method (and by ``rho``/``beta`` where a method was run with several values);
a cell is the mean over the group's seeds ± the sample standard deviation (ddof 1; only the mean
for a single seed), both from :func:`diagnostics.runs.validation_stats`. The best mean of each
column is bold, the second underlined (LaTeX) or italic (Markdown). Runs come from ``--run``
folders or a sweep's ``index.json`` (``training.sweep``: a list of ``{method, seed, rho, beta,
run_dir, status, returncode}``); sweep entries with a non-zero return code or a failed status, and
runs without a validation row, are left out with a printed reason.

When the runs include OCSD's ablations (``ocsd_no_ablated``, ``ocsd_random_select``, ``ocsd_all_steps``,
``ocsd_no_sign``), a second table, ``table_ablation``, holds GRPO, OCSD and the ablations alone (the paper's
ablation table with its per-type details); ``--paper-reference`` adds the paper's ablation rows, which exist
for Qwen3-4B only (``tab:ablation_details``).

Command::

    python -m figures.tables (--index OUT/index.json | --run A --run B ...) [--out DIR] [--format md|latex|both]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from diagnostics.runs import VAL_OVERALL, VAL_PREFIX, SeedStats, last_validation, validation_stats
from figures._common import (METHOD_LABELS, FigureError, RunInfo, SkipFigure, add_output_options, check_paper_model,
                             check_run_dir, load_runs, method_label, read_json_file)
from ocsd.cli import run_main
from ocsd.environments import get_environment

__all__ = ["read_index", "collect", "aggregate", "paper_rows", "paper_ablation_rows", "to_markdown", "to_latex",
           "build", "main"]

NAME = "table_main"
ABLATION_NAME = "table_ablation"
ABLATION_MODEL = "Qwen3-4B"
"""The one model of the paper's ablation tables."""
TASK_NAMES = {"pick": "Pick", "look": "Look", "clean": "Clean", "heat": "Heat", "cool": "Cool", "pick2": "Pick2"}
"""ALFWorld task types in the paper's column order."""
OVERALL = "Overall"
FAILED = {"failed", "error", "crashed", "killed", "timeout", "timed_out"}


def _display_name(env: str) -> str:
    """The environment's display name from the registry (the raw name when it is not registered)."""
    try:
        return get_environment(env).display_name
    except ValueError:
        return env


def read_index(path) -> tuple[list[dict], list[str]]:
    """Completed entries of a sweep ``index.json`` (or its folder) with resolved ``run_dir``.

    Returns
    -------
    (list of dict, list of str)
        The usable entries and one reason per entry left out.

    Raises
    ------
    FigureError
        The file is missing, not JSON, or not a list of objects with ``run_dir``.
    """
    path, entries = read_json_file(path, "index.json", "sweep index")
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "run_dir" in e for e in entries):
        raise FigureError(f"{path}: expected a list of objects with a 'run_dir' key (training.sweep's index)")
    usable, skipped = [], []
    for e in entries:
        rc, status = e.get("returncode"), str(e.get("status") or "").lower()
        run_dir = Path(e["run_dir"])
        if not run_dir.is_absolute() and not run_dir.exists():
            run_dir = path.parent / run_dir
        if rc not in (None, 0) or status in FAILED:
            skipped.append(f"{run_dir}: sweep status {status or '?'}, return code {rc}")
        elif not run_dir.is_dir():
            skipped.append(f"{run_dir}: run folder does not exist (status {status or '?'})")
        else:
            usable.append({**e, "run_dir": run_dir})
    return usable, skipped


def _hyper(run: RunInfo, entry: dict | None, key: str):
    if entry is not None and entry.get(key) is not None:
        return entry[key]
    config = run.info.get("config") if isinstance(run.info.get("config"), dict) else {}
    return config.get(key)


def collect(runs: Sequence[RunInfo], entries: Sequence[dict | None] | None = None):
    """Last validation row of each run, keyed by (method, rho, beta).

    Returns
    -------
    (dict, list of str)
        ``{(method, rho, beta): [(seed, row), ...]}`` and the reasons for runs left out.
    """
    entries = entries or [None] * len(runs)
    groups: dict[tuple, list] = {}
    skipped = []
    for run, entry in zip(runs, entries):
        row = last_validation(run.metrics)
        if row is None:
            skipped.append(f"{run.path}: no validation row ({VAL_OVERALL}) in metrics.jsonl")
            continue
        method = str((entry or {}).get("method") or run.method)
        key = (method, _hyper(run, entry, "rho"), _hyper(run, entry, "beta"))
        groups.setdefault(key, []).append(((entry or {}).get("seed", run.seed), row))
    return groups, skipped


def _order(method: str):
    names = list(METHOD_LABELS)
    return (names.index(method), "") if method in names else (len(names), method)


def aggregate(groups: dict) -> tuple[list[str], list[str], dict[str, dict[str, SeedStats]]]:
    """Row labels, column names and cells (row label -> column -> :class:`diagnostics.runs.SeedStats`).

    The seed statistics come from :func:`diagnostics.runs.validation_stats`. A method run with one
    (rho, beta) is labelled by its name; with several, each row also names rho and beta.
    """
    keys = sorted(groups, key=lambda k: (_order(k[0]), str(k[1]), str(k[2])))
    stats = {key: validation_stats([r for _, r in groups[key]]) for key in keys}
    types = sorted({k[len(VAL_PREFIX):] for s in stats.values() for k in s if k.startswith(VAL_PREFIX)},
                   key=lambda t: (list(TASK_NAMES).index(t), "") if t in TASK_NAMES else (len(TASK_NAMES), t))
    columns = [TASK_NAMES.get(t, t) for t in types] + [OVERALL]
    per_method = {m: sum(k[0] == m for k in keys) for m, _, _ in keys}
    cells, labels = {}, []
    for key in keys:
        method, rho, beta = key
        label = method_label(method) + (f" (rho={rho}, beta={beta})" if per_method[method] > 1 else "")
        cells[label] = {TASK_NAMES.get(t, t): stats[key].get(VAL_PREFIX + t, SeedStats(())) for t in types}
        cells[label][OVERALL] = stats[key][VAL_OVERALL]
        labels.append(label)
    return labels, columns, cells


def _ranks(labels, columns, cells) -> dict[tuple[str, str], int]:
    """(row, column) -> 1 for the best mean of the column, 2 for the second (ties share)."""
    out = {}
    if len(labels) < 2:
        return out
    for col in columns:
        means = sorted({round(cells[lab][col].mean, 10) for lab in labels if cells[lab][col].n}, reverse=True)
        for lab in labels:
            m = cells[lab][col]
            if m.n and round(m.mean, 10) in means[:2]:
                out[(lab, col)] = means.index(round(m.mean, 10)) + 1
    return out


def _number(mean: float, std: float | None, pm: str) -> str:
    """``mean`` and, when given, ``pm`` and ``std`` (percent, one decimal)."""
    return f"{mean:.1f}" + (f"{pm}{std:.1f}" if std is not None else "")


def _text(cell: SeedStats, pm: str) -> str:
    return _number(100 * cell.mean, 100 * cell.std if cell.n > 1 else None, pm) if cell.n else "-"


PAPER_COLUMNS = {**{name: kind for kind, name in TASK_NAMES.items()}, OVERALL: "overall"}
"""Column of this table -> column of the paper's ``tab:main_results`` (:data:`figures.paper.MAIN_COLUMNS`)."""


def paper_rows(model: str, labels: Sequence[str], columns: Sequence[str]) -> list[tuple[str, dict]]:
    """The paper's ``tab:main_results`` rows of ``model`` for the methods among ``labels`` (all methods when
    none of them is one of the paper's), as ``(label, {column: PaperValue})`` in the paper's row order.

    Raises
    ------
    FigureError
        ``model`` is not one of the paper's (:data:`figures.paper.MODELS`).
    """
    from figures import paper

    check_paper_model(model)
    ours = {method_label(m) for m in paper.PAPER_METHODS.values() if m} & {lab.split(" (rho=")[0] for lab in labels}
    rows = []
    for name, method in paper.PAPER_METHODS.items():
        if ours and (method is None or method_label(method) not in ours):
            continue
        values = paper.main_results(model, name)
        rows.append((f"paper, {model}: {name}", {col: values[PAPER_COLUMNS[col]] for col in columns
                                                 if col in PAPER_COLUMNS}))
    return rows


def _ablation_methods() -> dict[str, str]:
    """Registry name -> the paper's row name of the ablation table (GRPO, the four ablations, OCSD)."""
    from figures.paper import ABLATION_METHODS

    return {method: name for name, method in ABLATION_METHODS.items()}


def paper_ablation_rows(labels: Sequence[str], columns: Sequence[str]) -> list[tuple[str, dict]]:
    """The paper's ablation rows (``tab:ablation_details``, Qwen3-4B) of the methods among ``labels``."""
    from figures.paper import ablation_results

    ours = {lab.split(" (rho=")[0] for lab in labels}
    rows = []
    for method, name in _ablation_methods().items():
        if method_label(method) not in ours:
            continue
        values = ablation_results(name, detailed=True)
        rows.append((f"paper, {ABLATION_MODEL}: {name}", {col: values[PAPER_COLUMNS[col]] for col in columns
                                                          if col in PAPER_COLUMNS}))
    return rows


def _paper_text(value, pm: str) -> str:
    return "-" if value is None else _number(value.mean, value.std, pm)


def to_markdown(labels, columns, cells, *, paper: Sequence[tuple[str, dict]] = ()) -> str:
    """Markdown table (percent; best bold, second italic; ``n`` = seeds); ``paper`` rows (:func:`paper_rows`)
    follow ours, unranked, with ``n`` = "paper"."""
    rank = _ranks(labels, columns, cells)
    lines = ["| Method | n | " + " | ".join(columns) + " |", "|---|---:|" + "---:|" * len(columns)]
    for lab in labels:
        out = []
        for col in columns:
            t = _text(cells[lab][col], " ± ")
            out.append({1: f"**{t}**", 2: f"*{t}*"}.get(rank.get((lab, col)), t))
        lines.append(f"| {lab} | {cells[lab][OVERALL].n} | " + " | ".join(out) + " |")
    for lab, values in paper:
        lines.append(f"| {lab} | paper | " + " | ".join(_paper_text(values.get(col), " ± ") for col in columns) + " |")
    return "\n".join(lines)


def _latex_number(mean: float, std: float | None) -> str:
    """``mean`` with ``std`` as a subscript (percent, one decimal)."""
    return _number(mean, std, r"$_{\pm ") + ("}$" if std is not None else "")


def _latex_escape(text: str) -> str:
    return text.replace("\\", r"\textbackslash{}").replace("&", r"\&").replace("%", r"\%").replace("_", r"\_")


def to_latex(labels, columns, cells, *, caption: str = "Validation success (\\%) on ALFWorld, mean $\\pm$ std over "
             "seeds.", label: str = "tab:main_results", paper: Sequence[tuple[str, dict]] = ()) -> str:
    """LaTeX ``table`` with booktabs rules (best bold, second underlined); ``paper`` rows below a rule."""
    rank = _ranks(labels, columns, cells)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{l" + "c" * len(columns) + "}",
             r"\toprule", "Method & " + " & ".join(rf"\textbf{{{_latex_escape(c)}}}" for c in columns) + r" \\",
             r"\midrule"]
    for lab in labels:
        out = []
        for col in columns:
            cell = cells[lab][col]
            t = "-" if not cell.n else _latex_number(100 * cell.mean, 100 * cell.std if cell.n > 1 else None)
            out.append({1: rf"\textbf{{{t}}}", 2: rf"\underline{{{t}}}"}.get(rank.get((lab, col)), t))
        lines.append(_latex_escape(lab) + " & " + " & ".join(out) + r" \\")
    if paper:
        lines.append(r"\midrule")
    for lab, values in paper:
        texts = [_latex_number(values[col].mean, values[col].std) if col in values else "-" for col in columns]
        lines.append(r"\textit{" + _latex_escape(lab) + "} & " + " & ".join(texts) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", rf"\label{{{label}}}", r"\end{table}"]
    return "\n".join(lines)


def build(out_dir, *, run_dirs: Sequence = (), index=None, fmt: str = "both", name: str = NAME,
          paper_reference: str | None = None) -> list[Path]:
    """Collect the runs, print the Markdown table and write ``<name>.md`` / ``<name>.tex``; with
    ``paper_reference`` (a model of the paper, e.g. ``Qwen3-4B``) the paper's rows of that model follow ours.

    Raises
    ------
    FigureError
        Neither runs nor an index given, or a given path is missing.
    SkipFigure
        No run has a validation row.
    """
    if fmt not in ("md", "latex", "both"):
        raise FigureError(f"--format must be md, latex or both, got {fmt!r}")
    entries: list = [None] * len(run_dirs)
    paths = list(run_dirs)
    skipped: list[str] = []
    if index is not None:
        usable, skipped = read_index(index)
        paths += [e["run_dir"] for e in usable]
        entries += usable
    if not paths:
        if skipped:
            raise SkipFigure("no completed run in the sweep index: " + "; ".join(skipped))
        raise FigureError("no input: give --run DIR (repeatable) or --index OUT/index.json")
    runs = load_runs([check_run_dir(p) for p in paths])
    groups, left = collect(runs, entries)
    for reason in skipped + left:
        print(f"tables: left out {reason}", file=sys.stderr)
    if not groups:
        raise SkipFigure("no run has a validation row (val/success_rate) in metrics.jsonl")
    labels, columns, cells = aggregate(groups)
    paper = paper_rows(paper_reference, labels, columns) if paper_reference else ()
    envs = sorted({str(r.info.get("env")) for r in runs if r.info.get("env")})
    env = _display_name(envs[0]) if len(envs) == 1 else "the benchmarks"
    caption = f"Validation success (\\%) on {env}, mean $\\pm$ std over seeds."
    if paper:
        caption += f" Rows in italics: the paper's {paper_reference} (its Table 1)."
    written = _write(Path(out_dir), name, labels, columns, cells, paper, fmt, caption, "tab:main_results")
    ablations = {key: rows for key, rows in groups.items() if key[0] in _ablation_methods()}
    if any(key[0] not in ("grpo", "ocsd") for key in ablations):
        labels, columns, cells = aggregate(ablations)
        paper = paper_ablation_rows(labels, columns) if paper_reference else ()
        caption = f"Ablations: validation success (\\%) on {env}, mean $\\pm$ std over seeds."
        if paper:
            caption += f" Rows in italics: the paper's ablations ({ABLATION_MODEL}, its only ablated model)."
        written += _write(Path(out_dir), ABLATION_NAME, labels, columns, cells, paper, fmt, caption, "tab:ablation")
    return written


def _write(out_dir: Path, name: str, labels, columns, cells, paper, fmt: str, caption: str, label: str) -> list[Path]:
    """Print the Markdown table and write ``<name>.md`` and/or ``<name>.tex``."""
    md = to_markdown(labels, columns, cells, paper=paper)
    print(md)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    if fmt in ("md", "both"):
        written.append(out_dir / f"{name}.md")
        written[-1].write_text(md + "\n")
    if fmt in ("latex", "both"):
        written.append(out_dir / f"{name}.tex")
        written[-1].write_text(to_latex(labels, columns, cells, caption=caption, label=label, paper=paper) + "\n")
    return written


def _main(argv: Sequence[str] | None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m figures.tables", description=__doc__.split("\n")[0])
    parser.add_argument("--run", action="append", default=[], metavar="DIR", help="run folder (repeatable)")
    parser.add_argument("--index", metavar="JSON", help="a training.sweep index.json (or the sweep's output folder)")
    add_output_options(parser, images=False)
    parser.add_argument("--format", default="both", choices=("md", "latex", "both"), help="files to write")
    parser.add_argument("--paper-reference", metavar="MODEL", help="add the paper's rows of MODEL (Qwen3-1.7B, "
                                                                   "Qwen3-4B or Qwen3-8B) below ours")
    args = parser.parse_args(argv)
    paths = build(args.out, run_dirs=args.run, index=args.index, fmt=args.format,
                  paper_reference=args.paper_reference)
    print("wrote " + ", ".join(map(str, paths)), file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m figures.tables``."""
    return run_main(_main, argv, prog="figures.tables")


if __name__ == "__main__":
    sys.exit(main())
