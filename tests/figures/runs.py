"""Small run folders for the figure tests, written with the real record writers (test input only).

Metrics rows carry the keys of docs/replay-format.md (``step``, ``reward_mean``, ``success_rate``,
``success/<type>``, ``time/...``) and, every ``val_every`` steps, ``val/success_rate`` and
``val/success/<type>``; values come from a seeded Generator. Checkpoints come from the diagnostics'
synthetic replay generator.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ocsd.records import RunWriter

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "diagnostics"))
from synth import make_checkpoint  # noqa: E402

TASKS = ("pick", "look", "clean", "heat", "cool", "pick2")
ENV_TASKS = {"alfworld": TASKS, "webshop": ("beauty", "electronics", "fashion", "food", "furniture"),
             "searchqa": ("nq", "hotpotqa", "triviaqa", "popqa", "2wiki", "musique", "bamboogle")}
PHASES = ("time/rollout", "time/old_logprob", "time/ref_logprob", "time/replay_scoring", "time/advantage",
          "time/update")


def make_run(root, *, method: str = "ocsd", seed: int = 0, n_steps: int = 12, val_every: int | None = 4,
             checkpoints=(), teacher: bool = False, rho: float = 0.2, beta: float = 0.5, env: str = "alfworld") -> Path:
    """Write ``run.json``, ``metrics.jsonl`` and optional replay checkpoints under ``root``.

    Validation rows carry the keys of ``env``'s validation: success per task type (ALFWorld's types, WebShop's
    categories, Search-QA's data sets) and overall, with ``val/score`` for WebShop and ``val/em_id``,
    ``val/em_ood``, ``val/em_avg`` for Search-QA."""
    root = Path(root)
    writer = RunWriter(root)
    tasks = ENV_TASKS[env]
    writer.write_run_json({"run": root.name, "method": method, "env": env, "model": "none", "seed": seed,
                           "config": {"rho": rho, "beta": beta, "method": method, "seed": seed}})
    rng = np.random.default_rng([seed, *map(ord, method)])
    for step in range(1, n_steps + 1):
        row = {"step": step, "reward_mean": float(rng.normal(step / n_steps, 0.1)),
               "success_rate": float(rng.uniform(0, 1))}
        row.update({f"success/{t}": float(rng.uniform(0, 1)) for t in tasks})
        row.update({k: float(rng.uniform(0.1, 2.0)) for k in PHASES})
        if method == "grpo":
            row.pop("time/replay_scoring")
        if teacher:
            row["time/teacher_logprob"] = float(rng.uniform(0.1, 0.5))
        row["time/step"] = sum(v for k, v in row.items() if k.startswith("time/"))
        if val_every and (step % val_every == 0 or step == n_steps):
            row["val/success_rate"] = float(rng.uniform(0, 1))
            row.update({f"val/success/{t}": float(rng.uniform(0, 1)) for t in tasks})
            if env == "webshop":
                row["val/score"] = float(rng.uniform(row["val/success_rate"], 1))
            if env == "searchqa":
                row.update({f"val/em_{k}": float(rng.uniform(0, 1)) for k in ("id", "ood", "avg")})
            row["time/validation"] = 3.0
        writer.append_metrics(row)
    for step in checkpoints:
        make_checkpoint(root, int(step), n_traj=8, n_steps=8, seed=seed)
    return root
