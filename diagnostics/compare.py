"""``python -m diagnostics.compare A.json B.json [A2.json B2.json ...] [--n-boot N] [--ci 0.95] [--seed 0] [--json]``

Paired comparison of two evaluations on the same tasks (``python -m training.evaluate --json --repeats K``, e.g.
OCSD's and GRPO's last checkpoints on ALFWorld's valid_seen): the difference of mean success, A - B, overall and
per task type, each with a percentile bootstrap interval that resamples whole tasks (each task's mean over its
repeats, differenced; :func:`diagnostics.runs.paired_task_difference`). Because both sides are resampled on the
same tasks, the interval is narrower than the two separate intervals suggest when the tasks' difficulty
dominates. More pairs (A2 B2, ... : the two methods at further seeds) pool the seeds: each task's difference is
averaged over the pairs before the tasks are resampled. An evaluation written before per-task outcomes were stored
(no ``episodes``) is refused by name, and so are a file named twice, identical files (a pair repeated) and
evaluations of different protocols (split, step cap, response length, sampling: :data:`PROTOCOL`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from diagnostics.options import add_resampling_options, check_ci
from diagnostics.runs import paired_task_difference, task_means
from ocsd.cli import UsageError, entry_point

__all__ = ["PROTOCOL", "check_pairing", "compare", "main"]


def compare(a: Mapping | Sequence[Mapping], b: Mapping | Sequence[Mapping], *, n_boot: int = 10_000,
            level: float = 0.95, seed: int = 0) -> dict:
    """``{overall: {...}, per_type: {type: {...}}}``, each ``{difference, ci_low, ci_high, n_tasks, a, b}`` with
    ``a`` and ``b`` the two sides' mean success on those tasks.

    ``a`` and ``b`` are two evaluations, or two sequences of evaluations paired in order (one pair a seed): then
    the differences and means are the seeds' means (:func:`diagnostics.runs.paired_task_difference`).

    Raises
    ------
    ValueError
        As :func:`diagnostics.runs.paired_task_difference`.
    """
    a, b = ([x] if isinstance(x, Mapping) else list(x) for x in (a, b))

    def row(task_type: str | None) -> dict:
        diff = paired_task_difference(a, b, task_type=task_type, n_boot=n_boot, level=level, rng=seed)
        means = [float(np.mean([np.mean(list(task_means(x, task_type).values())) for x in side]))
                 for side in (a, b)]
        return {"difference": diff.mean, "ci_low": diff.low, "ci_high": diff.high, "n_tasks": diff.n_tasks,
                "a": means[0], "b": means[1]}

    types = sorted({e["task_type"] for e in a[0].get("episodes") or []})
    return {"overall": row(None), "per_type": {t: row(t) for t in types}, "ci_level": level, "n_boot": n_boot,
            "repeats": [a[0].get("repeats"), b[0].get("repeats")], "n_pairs": len(a)}


def _read(path: str) -> dict:
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{path}: no such evaluation file (python -m training.evaluate --json --out-file ...)")
    try:
        result = json.loads(file.read_text())
    except ValueError as err:
        raise UsageError(f"{path}: not JSON ({err})") from None
    if not isinstance(result, dict) or "episodes" not in result:
        raise UsageError(f"{path}: no per-task 'episodes'; evaluate again with this version of training.evaluate")
    return result


PROTOCOL = ("env", "split", "max_steps", "max_response_length", "greedy", "temperature", "top_p")
"""Settings of an evaluation (``training.evaluate``'s JSON) that two paired evaluations must share."""
SAMPLING = ("temperature", "top_p")
"""The fields of :data:`PROTOCOL` that only sampled evaluations use: greedy ones may differ in them."""


def check_pairing(files: Sequence[str], results: Sequence[Mapping]) -> None:
    """Refuse inputs that would be reported as paired results without being two evaluations of one protocol: a
    file named twice, two files with the same content (a pair repeated, or one evaluation copied), and evaluations
    whose protocol settings (:data:`PROTOCOL`) differ (greedy evaluations in everything but :data:`SAMPLING`).

    Raises
    ------
    UsageError
        Naming the files and, for a protocol difference, the field and its values.
    """
    seen: dict[Path, str] = {}
    for f in files:
        key = Path(f).resolve()
        if key in seen:
            raise UsageError(f"{f} is named twice (also as {seen[key]}): each evaluation counts once")
        seen[key] = f
    contents: dict[str, str] = {}
    for f, result in zip(files, results):
        data = json.dumps(result, sort_keys=True)  # the evaluations as read: no file is read twice
        if data in contents:
            raise UsageError(f"{f} and {contents[data]} are the same evaluation (identical files): a pair repeated "
                             f"would count as another seed")
        contents[data] = f
    greedy = all(r.get("greedy") is True for r in results)
    for field in PROTOCOL:
        if greedy and field in SAMPLING:
            continue  # greedy decoding uses neither (older results recorded the unused values)
        values = {f: r.get(field) for f, r in zip(files, results)}
        if len({json.dumps(v) for v in values.values()}) > 1:
            listed = ", ".join(f"{f}: {json.dumps(v)}" for f, v in values.items())
            raise UsageError(f"the evaluations differ in {field!r} ({listed}); compare evaluations of one protocol")


def _labels(a: str, b: str) -> tuple[str, str]:
    """Column names of the two evaluations: their file names without ``.json`` where these differ
    (``eval_ocsd_s1_step30``), else the nearest folders of their paths whose names differ (``ocsd_s3`` and
    ``grpo_s3`` for ``ocsd_s3/global_step_10/eval.json`` against ``grpo_s3/global_step_10/eval.json``), a
    checkpoint folder named with its run (``ocsd_s3/global_step_10``); A and B when nothing tells them apart."""
    def name(folder: Path) -> str:
        return f"{folder.parent.name}/{folder.name}" if re.fullmatch(r"global_step_\d+", folder.name) else folder.name

    if Path(a).stem != Path(b).stem:
        return Path(a).stem, Path(b).stem
    for x, y in zip(Path(a).resolve().parents, Path(b).resolve().parents):
        if x.name != y.name:
            return name(x) or "A", name(y) or "B"
    return "A", "B"


def _table(result: dict, names: tuple[str, str]) -> str:
    w = max(8, *map(len, names))
    lines = [f"{'tasks':<10} {'n':>4} {names[0]:>{w}} {names[1]:>{w}} {'A - B':>8}  "
             f"{int(100 * result['ci_level'])}% interval"]
    for name, row in [("overall", result["overall"]), *result["per_type"].items()]:
        lines.append(f"{name:<10} {row['n_tasks']:>4} {100 * row['a']:>{w - 1}.1f}% {100 * row['b']:>{w - 1}.1f}% "
                     f"{100 * row['difference']:>+8.1f}  [{100 * row['ci_low']:+.1f}, {100 * row['ci_high']:+.1f}]")
    if result.get("n_pairs", 1) > 1:
        lines.append(f"means over {result['n_pairs']} paired seeds; the columns name the first pair")
    return "\n".join(lines)


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diagnostics.compare", description=__doc__.split("\n\n")[1])
    parser.add_argument("evaluations", nargs="+", metavar="A.json B.json",
                        help="two evaluation results (training.evaluate --json) on the same tasks; further pairs "
                             "(A2.json B2.json ...), the same two methods at other seeds, are pooled")
    add_resampling_options(parser, n_boot=10_000, resamples="task resamples")
    args = parser.parse_args(argv)
    check_ci(args)
    files = args.evaluations
    if len(files) % 2:
        raise UsageError(f"evaluations come in pairs (A.json B.json [A2.json B2.json ...]), got {len(files)} files")
    results = [_read(f) for f in files]
    check_pairing(files, results)
    a, b = results[0::2], results[1::2]
    try:
        result = compare(a, b, n_boot=args.n_boot, level=args.ci, seed=args.seed)
    except ValueError as err:
        raise UsageError(f"{' '.join(files)}: {err}") from None
    print(json.dumps(result) if args.json else _table(result, _labels(files[0], files[1])))
    return 0


main = entry_point(_main, "diagnostics.compare")


if __name__ == "__main__":
    sys.exit(main())
