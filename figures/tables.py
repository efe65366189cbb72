"""The paper's result tables from the runs' evaluations or validation rows, mean ± std over seeds.

Each run contributes the evaluation of its last checkpoint where one was written there
(``global_step_N/eval.json``: ``python -m training.evaluate --ckpt RUN/global_step_N --out``, e.g. on the
real valid_seen split with ``--repeats``), else its last validation row (the last ``metrics.jsonl`` row with
``val/success_rate``). With ``--evals DIR`` the evaluations kept apart from the runs are used instead
(``eval_<RUN>_step<K>.json`` anywhere under DIR, as a campaign's series keeps them, matched to a run by its folder's
name): each run's latest, or with ``--eval-step K`` the one of step K; a run without one is left out by name rather
than taken from its validation rows, and each evaluation used is named under the table; runs
are grouped by environment (``run.json``'s ``env``) and method (and by ``rho``/``beta`` where a method was run
with several values). A cell is the mean over the group's seeds ± the sample standard deviation (ddof 1; only
the mean for a single seed), from :func:`diagnostics.runs.validation_stats`, shown in percent. The best mean of
each column is bold, the second underlined (LaTeX) or italic (Markdown). Runs come from ``--run`` folders or a
sweep's ``index.json`` (``training.sweep``: a list of ``{method, seed, rho, beta, run_dir, status,
returncode}``); sweep entries with a non-zero return code or a failed status, and runs without a validation
row, are left out with a printed reason.

Tables (each written only when its runs exist; an environment without runs is left out with a note):

* ``table_main`` (paper ``tab:main_results``): ALFWorld success per task type and overall
  (``val/success/<type>``, ``val/success_rate``); WebShop score and success (``val/score``,
  ``val/success_rate``); any other environment but Search-QA, success per task type and overall.
* ``table_searchqa`` (``tab:searchqa``): exact match in domain, out of domain and the micro-average
  (``val/em_id``, ``val/em_ood``, ``val/em_avg``), and ``table_searchqa_details``
  (``tab:search_qa_details``): exact match per data set (``val/success/<data set>``) and the average.
* ``table_ablation`` (``tab:ablation``): when the runs include OCSD's ablations (``ocsd_no_ablated``,
  ``ocsd_random_select``, ``ocsd_all_steps``, ``ocsd_no_sign``), GRPO, OCSD and the ablations alone with the
  main table's columns.

``--paper-reference MODEL`` adds the paper's rows of MODEL below ours (the ablation rows exist for Qwen3-4B
only, ``tab:ablation_details``).

Command::

    python -m figures.tables (--index OUT/index.json | --run A --run B ...) [--evals DIR [--eval-step K]]
        [--out DIR] [--format md|latex|both] [--paper-reference MODEL]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from diagnostics.runs import VAL_OVERALL, VAL_PREFIX, SeedStats, evaluation_row, last_validation, validation_stats
from figures._common import (METHOD_LABELS, FigureError, RunInfo, SkipFigure, add_output_options, check_paper_model,
                             check_run_dir, load_runs, method_label, read_json_file)
from ocsd.cli import entry_point, positive_int
from ocsd.environments import get_environment
from ocsd.records import checkpoint_dirs, evaluation_files

__all__ = ["Column", "TableSpec", "Evaluations", "result_row", "read_index", "collect", "collect_by_env",
           "step_suffixes", "main_columns", "searchqa_columns", "searchqa_detail_columns", "aggregate", "paper_rows",
           "to_markdown", "to_latex", "build", "main"]

NAME = "table_main"
ABLATION_NAME = "table_ablation"
SEARCHQA_NAME = "table_searchqa"
SEARCHQA_DETAILS_NAME = "table_searchqa_details"
ABLATION_MODEL = "Qwen3-4B"
"""The one model of the paper's ablation tables."""
TASK_NAMES = {"pick": "Pick", "look": "Look", "clean": "Clean", "heat": "Heat", "cool": "Cool", "pick2": "Pick2"}
"""ALFWorld task types in the paper's column order."""
OVERALL = "Overall"
SEARCHQA_DATASETS = {"nq": "NQ", "hotpotqa": "HotpotQA", "triviaqa": "TriviaQA", "popqa": "PopQA", "2wiki": "2Wiki",
                     "musique": "MuSiQue", "bamboogle": "Bamboogle"}
"""Search-QA data sets in the paper's column order (in domain first)."""
VAL_SCORE = "val/score"
"""Metrics key of the validation task score (WebShop), in [0, 1] as the success rates."""
FAILED = {"failed", "error", "crashed", "killed", "timeout", "timed_out"}
SEARCHQA = "searchqa"


@dataclass(frozen=True)
class Column:
    """One column of a table.

    Attributes
    ----------
    name : str
        Header.
    key : str
        Metrics key of the validation rows it reads.
    paper : str or None
        Column of the paper's table it matches (:mod:`figures.paper`), None when the paper has none.
    """

    name: str
    key: str
    paper: str | None = None


@dataclass(frozen=True)
class TableSpec:
    """One table: its file name, its LaTeX label, what it shows, and the paper's table beside it."""

    name: str
    label: str
    what: str
    paper_values: Callable[[str, str], dict] | None = None


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


EVAL_FILE = "eval.json"
"""What ``python -m training.evaluate --out`` writes into a checkpoint folder."""


@dataclass(frozen=True)
class Evaluations:
    """Evaluations kept apart from the runs (``--evals DIR``): :func:`ocsd.records.evaluation_files` of DIR.

    Attributes
    ----------
    folder : Path
        Where they were found.
    files : dict of str to dict of int to Path
        ``{run name: {step: file}}``.
    step : int or None
        The step every run's evaluation must have (``--eval-step``); None takes each run's latest.
    """

    folder: Path
    files: dict
    step: int | None = None

    @classmethod
    def read(cls, folder, step: int | None = None) -> "Evaluations":
        """The evaluations under ``folder``.

        Raises
        ------
        FigureError
            ``folder`` is not a folder, or holds no ``eval_<RUN>_step<K>.json`` file (of step ``step`` if given).
        """
        folder = Path(folder)
        if not folder.is_dir():
            raise FigureError(f"--evals {folder}: not a folder")
        files = evaluation_files(folder)
        if not any(step is None or step in steps for steps in files.values()):
            at = "" if step is None else f" of step {step}"
            raise FigureError(f"--evals {folder}: no evaluation{at} there (files named eval_<RUN>_step<K>.json)")
        return cls(folder, files, step)

    def step_of(self, run: RunInfo) -> int | None:
        """The step of the evaluation :meth:`of` takes for ``run``, or None where there is none."""
        steps = self.files.get(run.path.name, {})
        if self.step is not None:
            return self.step if self.step in steps else None
        return max(steps) if steps else None

    def of(self, run: RunInfo) -> tuple[Path | None, str]:
        """The file for ``run`` (matched by its folder's name), or None and why there is none."""
        steps = self.files.get(run.path.name, {})
        step = self.step_of(run)
        found = None if step is None else steps[step]
        if self.step is not None:
            held = ", ".join(map(str, steps)) or "none"
            return found, f"no evaluation of step {self.step} in {self.folder} (it has {held})"
        return found, f"no evaluation in {self.folder}"


def _evaluation_result(run: RunInfo, path: Path) -> dict:
    env = str(run.info.get("env") or "alfworld")
    data = read_json_file(path, path.name, "evaluation result")[1]
    try:
        return evaluation_row(data, get_environment(env).evaluation.metrics)
    except ValueError as err:
        raise FigureError(f"{path}: {err}") from err


def result_row(run: RunInfo, evaluations: Evaluations | None = None) -> tuple[dict | None, str]:
    """The row a run contributes and where it comes from, or None and why there is none: with ``evaluations``, the
    run's file there; else the evaluation of its last checkpoint (``global_step_N/eval.json``) if there is one, else
    its last validation row."""
    if evaluations is not None:
        path, why = evaluations.of(run)
        return (None, why) if path is None else (_evaluation_result(run, path),
                                                 str(path.relative_to(evaluations.folder)))
    folders = checkpoint_dirs(run.path)
    if folders and (folders[-1][1] / EVAL_FILE).is_file():
        path = folders[-1][1] / EVAL_FILE
        return _evaluation_result(run, path), str(path.relative_to(run.path))
    row = last_validation(run.metrics)
    if row is None:
        return None, (f"no evaluation of its last checkpoint ({EVAL_FILE}) and no validation row ({VAL_OVERALL}) in "
                      "metrics.jsonl")
    return row, "metrics.jsonl"


def collect_by_env(runs: Sequence[RunInfo], entries: Sequence[dict | None] | None = None,
                   evaluations: Evaluations | None = None, sources: list[str] | None = None,
                   steps: dict | None = None):
    """The row of each run (:func:`result_row`), by environment and (method, rho, beta); ``sources``, where
    given, receives where each kept run's row came from (a path relative to the run folder, or to the
    ``evaluations``' folder), and ``steps``, with ``evaluations``, the steps each (method, rho, beta)'s rows
    were evaluated at (``{key: set of int}``).

    Returns
    -------
    (dict, list of str)
        ``{env: {(method, rho, beta): [(seed, row), ...]}}`` (environments in the order first seen) and the
        reasons for runs left out.
    """
    entries = entries or [None] * len(runs)
    by_env: dict[str, dict[tuple, list]] = {}
    skipped = []
    for run, entry in zip(runs, entries):
        row, source = result_row(run, evaluations)
        if row is None:
            skipped.append(f"{run.path}: {source}")
            continue
        print(f"tables: {run.path}: {source}", file=sys.stderr)
        if sources is not None:
            sources.append(source)
        method = str((entry or {}).get("method") or run.method)
        key = (method, _hyper(run, entry, "rho"), _hyper(run, entry, "beta"))
        if steps is not None and evaluations is not None:
            steps.setdefault(key, set()).add(evaluations.step_of(run))
        env = str(run.info.get("env") or "alfworld")
        by_env.setdefault(env, {}).setdefault(key, []).append(((entry or {}).get("seed", run.seed), row))
    return by_env, skipped


def collect(runs: Sequence[RunInfo], entries: Sequence[dict | None] | None = None):
    """Last validation row of each run, keyed by (method, rho, beta) over all environments.

    Returns
    -------
    (dict, list of str)
        ``{(method, rho, beta): [(seed, row), ...]}`` and the reasons for runs left out.
    """
    by_env, skipped = collect_by_env(runs, entries)
    groups: dict[tuple, list] = {}
    for env_groups in by_env.values():
        for key, rows in env_groups.items():
            groups.setdefault(key, []).extend(rows)
    return groups, skipped


def _order(method: str):
    names = list(METHOD_LABELS)
    return (names.index(method), "") if method in names else (len(names), method)


def _typed_columns(types, names: dict, overall: Column | None, paper: bool = True) -> list[Column]:
    """A column per task type (known ones in ``names``' order first) and the overall column."""
    ordered = sorted(types, key=lambda t: (list(names).index(t), "") if t in names else (len(names), t))
    cols = [Column(names.get(t, t), VAL_PREFIX + t, t if paper and t in names else None) for t in ordered]
    return cols + ([overall] if overall is not None else [])


def _types(stats: Sequence[dict]) -> set:
    return {k[len(VAL_PREFIX):] for s in stats for k in s if k.startswith(VAL_PREFIX) and s[k].n}


def main_columns(env: str, stats: Sequence[dict]) -> list[Column]:
    """Columns of ``env`` in the main table, from the seed statistics of its groups.

    ALFWorld: success per task type and overall; WebShop: score and success; any other environment: success
    per task type and overall, headed by its display name.
    """
    if env == "webshop":
        return [Column("WebShop Score", VAL_SCORE, "webshop_score"),
                Column("WebShop Succ.", VAL_OVERALL, "webshop_success")]
    if env == "alfworld":
        return _typed_columns(_types(stats), TASK_NAMES, Column(OVERALL, VAL_OVERALL, "overall"))
    name = _display_name(env)
    return [Column(f"{name} {c.name}", c.key) for c in
            _typed_columns(_types(stats), {}, Column(OVERALL, VAL_OVERALL), paper=False)]


def searchqa_columns(stats: Sequence[dict]) -> list[Column]:
    """Search-QA exact match in domain, out of domain and the micro-average (``tab:searchqa``)."""
    return [Column("ID", "val/em_id", "id"), Column("OOD", "val/em_ood", "ood"), Column("Avg.", "val/em_avg", "avg")]


def searchqa_detail_columns(stats: Sequence[dict]) -> list[Column]:
    """Search-QA exact match per data set (the paper's seven first, then others) and the average."""
    return _typed_columns(_types(stats), SEARCHQA_DATASETS, Column("Avg.", "val/em_avg", "avg"))


def step_suffixes(steps: dict) -> dict[tuple, str]:
    """Row-label suffixes naming the step each row was evaluated at, where the rows' steps differ.

    Parameters
    ----------
    steps : dict
        ``{(method, rho, beta): set of int}``, the steps of each row's evaluations (:func:`collect_by_env`).

    Returns
    -------
    dict
        ``{key: " (step K)"}`` (``" (steps K1, K2)"`` where a row's seeds were evaluated at several), or empty
        when every row was evaluated at the same steps: a table that mixes steps says so in its rows.
    """
    if len({frozenset(s) for s in steps.values()}) < 2:
        return {}
    return {key: (" (step " if len(s) == 1 else " (steps ") + ", ".join(map(str, sorted(s))) + ")"
            for key, s in steps.items()}


def aggregate(parts: Sequence[tuple[dict, list[Column]]], suffixes: dict[tuple, str] | None = None,
              ) -> tuple[list[str], list[Column], dict[str, dict]]:
    """Row labels, columns and cells (row label -> column name -> :class:`diagnostics.runs.SeedStats`).

    Parameters
    ----------
    parts : sequence of (groups, columns)
        Per environment, its ``(method, rho, beta) -> [(seed, row), ...]`` groups and its columns; a method
        without runs in an environment has empty cells there. A method run with one (rho, beta) is labelled by
        its name; with several, each row also names rho and beta.
    suffixes : dict, optional
        ``{(method, rho, beta): text}`` appended to the row's label (:func:`step_suffixes`).
    """
    keys = sorted({k for groups, _ in parts for k in groups}, key=lambda k: (_order(k[0]), str(k[1]), str(k[2])))
    per_method = {m: sum(k[0] == m for k in keys) for m, _, _ in keys}
    columns = [c for _, cols in parts for c in cols]
    cells, labels = {}, []
    for key in keys:
        method, rho, beta = key
        label = method_label(method) + (f" (rho={rho}, beta={beta})" if per_method[method] > 1 else "")
        label += (suffixes or {}).get(key, "")
        row = {}
        for groups, cols in parts:
            stats = validation_stats([r for _, r in groups.get(key, [])])
            row.update({c.name: stats.get(c.key, SeedStats(())) for c in cols})
        cells[label] = row
        labels.append(label)
    return labels, columns, cells


def _ranks(labels, columns, cells) -> dict[tuple[str, str], int]:
    """(row, column) -> 1 for the best mean of the column, 2 for the second (ties share)."""
    out = {}
    if len(labels) < 2:
        return out
    for col in (c.name for c in columns):
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


def _seeds(row: dict) -> int:
    """Seeds of a row: the most any of its cells has."""
    return max((c.n for c in row.values()), default=0)


def paper_rows(model: str, labels: Sequence[str], columns: Sequence[Column], *,
               values: Callable[[str, str], dict] | None = None,
               methods: dict[str, str | None] | None = None) -> list[tuple[str, dict]]:
    """The paper's rows of ``model`` for the methods among ``labels`` (all methods when none of them is one of
    the paper's), as ``(label, {column name: PaperValue})`` in the paper's row order.

    Parameters
    ----------
    values : callable, optional
        ``values(model, paper method name) -> {paper column: PaperValue}`` (default
        :func:`figures.paper.main_results`).
    methods : dict, optional
        The paper's row names -> registry names (default :data:`figures.paper.PAPER_METHODS`).

    Raises
    ------
    FigureError
        ``model`` is not one of the paper's (:data:`figures.paper.MODELS`).
    """
    from figures import paper

    check_paper_model(model)
    values = values or paper.main_results
    methods = methods if methods is not None else paper.PAPER_METHODS
    ours = {method_label(m) for m in methods.values() if m} & {lab.split(" (")[0] for lab in labels}
    rows = []
    for name, method in methods.items():
        if ours and (method is None or method_label(method) not in ours):
            continue
        got = values(model, name)
        rows.append((f"paper, {model}: {name}", {c.name: got[c.paper] for c in columns if c.paper in got}))
    return rows


def _paper_text(value, pm: str) -> str:
    return "-" if value is None else _number(value.mean, value.std, pm)


def to_markdown(labels, columns, cells, *, paper: Sequence[tuple[str, dict]] = (), notes: Sequence[str] = ()) -> str:
    """Markdown table (percent; best bold, second italic; ``n`` = seeds); ``paper`` rows (:func:`paper_rows`)
    follow ours, unranked, with ``n`` = "paper"; ``notes`` follow the table."""
    rank = _ranks(labels, columns, cells)
    names = [c.name for c in columns]
    lines = ["| Method | n | " + " | ".join(names) + " |", "|---|---:|" + "---:|" * len(names)]
    for lab in labels:
        out = []
        for col in names:
            t = _text(cells[lab][col], " ± ")
            out.append({1: f"**{t}**", 2: f"*{t}*"}.get(rank.get((lab, col)), t))
        lines.append(f"| {lab} | {_seeds(cells[lab])} | " + " | ".join(out) + " |")
    for lab, values in paper:
        lines.append(f"| {lab} | paper | " + " | ".join(_paper_text(values.get(col), " ± ") for col in names) + " |")
    return "\n".join(lines + ([""] + [f"Note: {n}" for n in notes] if notes else []))


def _latex_number(mean: float, std: float | None) -> str:
    """``mean`` with ``std`` as a subscript (percent, one decimal)."""
    return _number(mean, std, r"$_{\pm ") + ("}$" if std is not None else "")


def _latex_escape(text: str) -> str:
    return text.replace("\\", r"\textbackslash{}").replace("&", r"\&").replace("%", r"\%").replace("_", r"\_")


def to_latex(labels, columns, cells, *, caption: str, label: str = "tab:main_results",
             paper: Sequence[tuple[str, dict]] = ()) -> str:
    """LaTeX ``table`` with booktabs rules (best bold, second underlined); ``paper`` rows below a rule."""
    rank = _ranks(labels, columns, cells)
    names = [c.name for c in columns]
    lines = [r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{l" + "c" * len(names) + "}",
             r"\toprule", "Method & " + " & ".join(rf"\textbf{{{_latex_escape(c)}}}" for c in names) + r" \\",
             r"\midrule"]
    for lab in labels:
        out = []
        for col in names:
            cell = cells[lab][col]
            t = "-" if not cell.n else _latex_number(100 * cell.mean, 100 * cell.std if cell.n > 1 else None)
            out.append({1: rf"\textbf{{{t}}}", 2: rf"\underline{{{t}}}"}.get(rank.get((lab, col)), t))
        lines.append(_latex_escape(lab) + " & " + " & ".join(out) + r" \\")
    if paper:
        lines.append(r"\midrule")
    for lab, values in paper:
        texts = [_latex_number(values[col].mean, values[col].std) if col in values else "-" for col in names]
        lines.append(r"\textit{" + _latex_escape(lab) + "} & " + " & ".join(texts) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", rf"\label{{{label}}}", r"\end{table}"]
    return "\n".join(lines)


def _ablation_methods() -> dict[str, str]:
    """Registry name -> the paper's row name of the ablation table (GRPO, the four ablations, OCSD)."""
    from figures.paper import ABLATION_METHODS

    return {method: name for name, method in ABLATION_METHODS.items()}


def _ablation_values(model: str, name: str) -> dict:
    from figures.paper import ablation_results

    return ablation_results(name, detailed=True)


def _tables() -> dict[str, TableSpec]:
    from figures import paper

    return {
        NAME: TableSpec(NAME, "tab:main_results", "Validation success (\\%)", paper.main_results),
        SEARCHQA_NAME: TableSpec(SEARCHQA_NAME, "tab:searchqa", "Search-QA exact match (\\%), in domain (NQ, "
                                 "HotpotQA), out of domain and the micro-average", paper.searchqa_results),
        SEARCHQA_DETAILS_NAME: TableSpec(SEARCHQA_DETAILS_NAME, "tab:search_qa_details", "Search-QA exact match "
                                         "(\\%) per data set", paper.searchqa_details),
        ABLATION_NAME: TableSpec(ABLATION_NAME, "tab:ablation", "Ablations: validation success (\\%)", _ablation_values),
    }


def _main_parts(by_env: dict, keep: Callable[[tuple], bool] = lambda key: True) -> list[tuple[dict, list[Column]]]:
    """(groups, columns) of every environment of the main table (all but Search-QA), ALFWorld first."""
    envs = sorted((e for e in by_env if e != SEARCHQA), key=lambda e: (e != "alfworld", e != "webshop", e))
    parts = []
    for env in envs:
        groups = {k: rows for k, rows in by_env[env].items() if keep(k)}
        if groups:
            stats = [validation_stats([r for _, r in rows]) for rows in groups.values()]
            parts.append((groups, main_columns(env, stats)))
    return parts


def _missing(by_env: dict, wanted: Sequence[str]) -> list[str]:
    """Notes for the environments of a paper table that have no runs."""
    return [f"{_display_name(e)} left out: no {_display_name(e)} run with an evaluation or a validation row."
            for e in wanted if e not in by_env]


def build(out_dir, *, run_dirs: Sequence = (), index=None, fmt: str = "both", name: str = NAME,
          paper_reference: str | None = None, evals=None, eval_step: int | None = None) -> list[Path]:
    """Collect the runs, print each Markdown table and write ``<table>.md`` / ``<table>.tex``; with
    ``paper_reference`` (a model of the paper, e.g. ``Qwen3-4B``) the paper's rows of that model follow ours.
    ``name`` is the main table's file name. ``evals`` (a folder) takes each run's row from the evaluations kept
    there (:class:`Evaluations`; ``eval_step``: those of that step), named under the main table.

    Raises
    ------
    FigureError
        Neither runs nor an index given, or a given path is missing.
    SkipFigure
        No run has a validation row.
    """
    if fmt not in ("md", "latex", "both"):
        raise FigureError(f"--format must be md, latex or both, got {fmt!r}")
    if paper_reference:
        check_paper_model(paper_reference)
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
    if eval_step is not None and evals is None:
        raise FigureError("--eval-step needs --evals DIR (the folder of eval_<RUN>_step<K>.json files)")
    evaluations = None if evals is None else Evaluations.read(evals, eval_step)
    runs = load_runs([check_run_dir(p) for p in paths])
    sources: list[str] = []
    steps: dict[tuple, set] = {}
    by_env, left = collect_by_env(runs, entries, evaluations, sources, steps)
    suffixes = step_suffixes(steps)
    for reason in skipped + left:
        print(f"tables: left out {reason}", file=sys.stderr)
    if not by_env:
        raise SkipFigure("no run has a validation row (val/success_rate) in metrics.jsonl")
    specs, out_dir, written = _tables(), Path(out_dir), []

    main_envs = " and ".join(_display_name(e) for e in by_env if e != SEARCHQA)

    def table(spec: TableSpec, parts, notes, file_name: str | None = None, model: str | None = paper_reference,
              methods=None) -> None:
        labels, columns, cells = aggregate(parts, suffixes)
        paper = paper_rows(model, labels, columns, values=spec.paper_values, methods=methods) if model else ()
        where = "" if spec.name in (SEARCHQA_NAME, SEARCHQA_DETAILS_NAME) else f" on {main_envs}"
        caption = f"{spec.what}{where}, mean $\\pm$ std over seeds."
        if paper:
            caption += f" Rows in italics: the paper's {model}."
        for note in notes:
            print(f"tables: {file_name or spec.name}: {note}", file=sys.stderr)
        written.extend(_write(out_dir, file_name or spec.name, labels, columns, cells, paper, fmt, caption,
                              spec.label, notes))

    runs_left = [f"Left out {reason}." for reason in skipped + left]  # named under the table, not only printed
    if evaluations is not None:
        runs_left += [f"Evaluations (under {evaluations.folder}): {', '.join(sources)}."]
    main_parts = _main_parts(by_env)
    if main_parts:
        table(specs[NAME], main_parts, _missing(by_env, ("alfworld", "webshop")) + runs_left, name)
    if SEARCHQA in by_env:
        groups = by_env[SEARCHQA]
        stats = [validation_stats([r for _, r in rows]) for rows in groups.values()]
        table(specs[SEARCHQA_NAME], [(groups, searchqa_columns(stats))], [])
        table(specs[SEARCHQA_DETAILS_NAME], [(groups, searchqa_detail_columns(stats))], [])
    ablations = _ablation_methods()
    parts = _main_parts(by_env, keep=lambda key: key[0] in ablations)
    if any(key[0] not in ("grpo", "ocsd") for groups, _ in parts for key in groups):
        methods = {name: method for method, name in ablations.items()}
        table(specs[ABLATION_NAME], parts, _missing(by_env, ("alfworld", "webshop")),
              model=ABLATION_MODEL if paper_reference else None, methods=methods)
    return written


def _write(out_dir: Path, name: str, labels, columns, cells, paper, fmt: str, caption: str, label: str,
           notes: Sequence[str] = ()) -> list[Path]:
    """Print the Markdown table and write ``<name>.md`` and/or ``<name>.tex``."""
    md = to_markdown(labels, columns, cells, paper=paper, notes=notes)
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
    parser.add_argument("--evals", metavar="DIR", help="take each run's row from the evaluations kept in DIR "
                                                        "(eval_<RUN>_step<K>.json, any depth): its latest")
    parser.add_argument("--eval-step", type=positive_int("--eval-step"), metavar="K",
                        help="with --evals: the evaluations of step K (a run without one is left out, named)")
    args = parser.parse_args(argv)
    paths = build(args.out, run_dirs=args.run, index=args.index, fmt=args.format,
                  paper_reference=args.paper_reference, evals=args.evals, eval_step=args.eval_step)
    print("wrote " + ", ".join(map(str, paths)), file=sys.stderr)
    return 0


main = entry_point(_main, "figures.tables")


if __name__ == "__main__":
    sys.exit(main())
