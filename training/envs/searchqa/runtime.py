"""Search-QA's runtime: the engine objects that the registry's ``searchqa`` entry names.

Questions come from :class:`training.envs.searchqa.tasks.SearchSource`; evaluation plays the first ``n``
evaluation questions (split ``test`` of a data folder, one data set when ``--split`` names it; the
generated validation questions with ``data=generated``) and reports Exact Match micro-averaged over the
in-domain, out-of-domain and all questions (``em_id``, ``em_ood``, ``em_avg``; paper appendix "Evaluation
Protocol"), EM per data set or question family (``per_type``, each row with ``em``) and the common step
statistics (:func:`training.envs.runtime.success_metrics`). A question's EM is its episode's success.
The expert of generated questions searches the questions' planned queries, then answers
(:func:`demonstration`).
"""

from __future__ import annotations

from typing import Sequence

from ocsd.environments.searchqa import IN_DOMAIN
from training.envs.runtime import EnvironmentRuntime, success_metrics
from training.envs.searchqa.data import SearchDataError, SearchTask
from training.envs.searchqa.tasks import SearchSource

__all__ = ["RUNTIME", "demonstration", "evaluation_tasks", "metrics"]


def evaluation_tasks(cfg, split: str | None, n: int | None) -> tuple[SearchSource, str]:
    """The first ``n`` evaluation questions (``n=None``: all of them) of ``split`` (a data set name; None:
    every data set) and where they came from."""
    source = SearchSource.from_config(cfg, train=False, val_split=split, n_valid=n if n is not None else 10**9)
    return source, f"{source.origin}:{'valid' if not source.real else split or 'test'}"


def _em(trajs: Sequence) -> float:
    return sum(bool(t.won) for t in trajs) / len(trajs) if trajs else float("nan")


def metrics(trajs: Sequence) -> dict:
    """:func:`success_metrics` plus ``em_id``, ``em_ood``, ``em_avg`` (EM micro-averaged over in-domain,
    out-of-domain and all questions; nan without such questions) and ``em`` in each ``per_type`` row."""
    out = success_metrics(trajs)
    out["em_id"] = _em([t for t in trajs if t.task_type in IN_DOMAIN])
    out["em_ood"] = _em([t for t in trajs if t.task_type not in IN_DOMAIN])
    out["em_avg"] = _em(trajs)
    for row in out["per_type"].values():
        row["em"] = row["success_rate"]
    return out


def demonstration(task: SearchTask) -> list[tuple[str, str]]:
    """The expert's play of a generated question: each planned search, then the first gold answer. Empty
    for a question without a plan (real data sets)."""
    if not task.queries:
        return []
    plays = [(f"<search>{task.queries[0]}</search>", "I do not know this yet; I search for it.")]
    if len(task.queries) > 1:
        plays += [(f"<search>{q}</search>", "The results name the country the question describes; I search for "
                   "the fact the question asks about it.") for q in task.queries[1:]]
    plays.append((f"<answer>{task.answers[0]}</answer>", "The search results give the answer."))
    return plays


RUNTIME = EnvironmentRuntime(task_source=SearchSource.from_config, evaluation_tasks=evaluation_tasks,
                             metrics=metrics, data_error=SearchDataError, demonstration=demonstration)
"""The runtime of :data:`ocsd.environments.searchqa.SEARCHQA`."""
