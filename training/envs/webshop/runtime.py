"""WebShop's runtime: the engine objects that the registry's ``webshop`` entry names.

Tasks come from :class:`training.envs.webshop.tasks.WebshopSource`; evaluation plays the first ``n``
validation tasks (split ``test``: the real goals or a server's test sessions; the generated validation
goals with ``data=generated``) and reports the task score (mean purchase reward in [0, 1], shown in percent by
the tables, as the paper's) and the success rate (score 1), overall and per product category, with the common step statistics
(:func:`training.envs.runtime.success_metrics`). The expert buys the target with its goal options
(:func:`demonstration`).
"""

from __future__ import annotations

from typing import Sequence

from training.envs.runtime import EnvironmentRuntime, success_metrics
from training.envs.webshop.site import BUY, NEXT, PAGE_SIZE
from training.envs.webshop.tasks import WebshopDataError, WebshopSource, WebshopTask

__all__ = ["RUNTIME", "demonstration", "evaluation_tasks", "metrics"]


def evaluation_tasks(cfg, split: str | None, n: int | None) -> tuple[WebshopSource, str]:
    """The first ``n`` evaluation tasks (``n=None``: all of them) and where they came from."""
    source = WebshopSource.from_config(cfg, train=False, n_valid=n if n is not None else 10**6)
    return source, f"{source.origin}:{'valid' if not source.real else split or 'test'}"


def _score(t) -> float:
    return float(t.score) if getattr(t, "score", None) is not None else 0.0


def metrics(trajs: Sequence) -> dict:
    """:func:`success_metrics` plus ``score`` (mean task score in [0, 1], like ``success_rate``; an episode
    without a purchase scores 0) overall and in each ``per_type`` row (paper appendix "Evaluation Protocol")."""
    out = success_metrics(trajs)
    out["score"] = sum(_score(t) for t in trajs) / len(trajs) if trajs else float("nan")
    for kind, row in out["per_type"].items():
        mine = [t for t in trajs if t.task_type == kind]
        row["score"] = sum(_score(t) for t in mine) / len(mine)
    return out


def demonstration(task: WebshopTask) -> list[tuple[str, str]]:
    """An expert's play of a built-in-site task: search the target's title, page to it, open it, choose
    the goal options it offers, buy. Empty for a server session (its goal is not known)."""
    goal, shop = task.goal, task.shop
    if goal is None or shop is None:
        return []
    query = " ".join(goal.name.lower().replace(",", " ").split()[:8])
    plays = [(f"search[{query}]", "I search for the product the instruction describes.")]
    hits = [p.asin for p in shop.search(query.split(" "))]
    rank = hits.index(goal.asin) if goal.asin in hits else 0
    plays += [(f"click[{NEXT}]", "The product is not on this page; I look at the next one.")] * (rank // PAGE_SIZE)
    plays.append((f"click[{goal.asin.lower()}]", "This product matches the instruction; I open it."))
    product = shop.by_asin[goal.asin]
    offered = {v for _, values in product.options for v in values}
    plays += [(f"click[{v}]", f"The instruction asks for {v}; I choose it.") for v in goal.options if v in offered]
    plays.append((f"click[{BUY}]", "Everything the instruction asks for is chosen; I buy it."))
    return plays


RUNTIME = EnvironmentRuntime(task_source=WebshopSource.from_config, evaluation_tasks=evaluation_tasks,
                             metrics=metrics, data_error=WebshopDataError, demonstration=demonstration)
"""The runtime of :data:`ocsd.environments.webshop.WEBSHOP`."""
