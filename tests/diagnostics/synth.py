"""Synthetic replay-score runs for testing the diagnostics (test input only, never a result).

Signals are drawn from a seeded Generator with a planted structure:

* delta_A = scaffold effect (shared by both views, independent of the label) + noise;
* e = residual, shifted up for valid steps, plus a per-trajectory random effect;
* delta_F = delta_A + e.

So AUROC(residual) > AUROC(full) > AUROC(ablated) ~ 0.5, and entity words carry a larger residual
than format words (larger D).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ocsd.records import RunWriter, write_replay

OPERATORS = ["go", "take", "put", "open", "examine"]
OBJECTS = ["mug", "apple", "cabinet", "shelf", "countertop", "drawer"]


def _response(rng: np.random.Generator, op: str) -> list[tuple[str, str]]:
    """Token pieces of one output with a coarse kind per piece (format/entity/other)."""
    obj, rec = rng.choice(OBJECTS, 2, replace=False)
    n1, n2 = rng.integers(1, 4, 2)
    pieces = [("<", "format"), ("reason", "format"), (">", "format"), (" I", "other"), (" see", "other"),
              (" a", "other"), (f" {obj[:2]}", "entity"), (obj[2:], "entity"), (f" {n1}", "entity"),
              (",", "other"), (" so", "other"), (" I", "other"), (" should", "other"), (f" {op}", "other"),
              (" it", "other"), (" because", "other"), (" the", "other"), (f" {rec}", "entity"),
              (" is", "other"), (" open", "entity"), (".</", "format"), ("reason", "format"), (">", "format"),
              (" <", "format"), ("action", "format"), (">", "format"), (f" {op}", "other"),
              (f" {obj}", "entity"), (f" {n1}", "entity"), (" from", "other"), (f" {rec}", "entity"),
              (f" {n2}", "entity"), ("</", "format"), ("action", "format"), (">", "format")]
    return pieces


def make_checkpoint(folder: Path, global_step: int, *, n_traj: int = 8, n_steps: int = 10, rho: float = 0.2,
                    effect: float = 0.6, traj_sd: float = 0.3, seed: int = 0, env: str = "alfworld",
                    labels: tuple = ("valid", "invalid", "ambiguous"), label_p=(0.5, 0.4, 0.1),
                    advantage_sd: float = 0.0) -> Path:
    """Write one synthetic checkpoint under ``folder/global_step_<N>/replay``; with ``advantage_sd`` > 0 each
    trajectory's advantage is drawn from N(0, advantage_sd) (a separate stream: the other draws are unchanged),
    half of them set to 0 as in flat groups."""
    rng = np.random.default_rng([seed, global_step])
    adv_rng = np.random.default_rng([seed, global_step, 1])
    advantages = adv_rng.normal(0, advantage_sd, n_traj) * (adv_rng.random(n_traj) < 0.5) if advantage_sd else \
        np.zeros(n_traj)
    step_rows, token_rows = [], []
    k_sel = int(np.ceil(rho * n_steps))
    for t in range(n_traj):
        uid = f"traj{t}"
        nll = rng.gamma(2.0, 0.5, n_steps)
        selected = np.zeros(n_steps, dtype=bool)
        selected[np.argsort(-nll, kind="stable")[:k_sel]] = True
        traj_effect = rng.normal(0, traj_sd)
        reward = float(rng.random() < 0.5)
        for k in range(n_steps):
            op = OPERATORS[rng.integers(len(OPERATORS))]
            label = labels[rng.choice(len(labels), p=label_p)]
            pieces = _response(rng, op)
            n_tok = len(pieces)
            if selected[k]:
                shift = effect if label == "valid" else 0.0
                student = -rng.gamma(1.5, 0.7, n_tok)
                kinds = np.array([p[1] for p in pieces])
                scaffold = rng.normal(0.4, 1.0) + rng.normal(0, 0.8, n_tok) + 0.8 * (kinds == "format")
                resid_scale = np.where(kinds == "entity", 1.0, np.where(kinds == "format", 0.1, 0.4))
                resid = resid_scale * (shift + traj_effect + rng.normal(0, 1.0, n_tok))
                ablated = student + scaffold
                full = ablated + resid
                for i, (piece, _) in enumerate(pieces):
                    token_rows.append({"global_step": global_step, "traj_uid": uid, "step_idx": k, "token_idx": i,
                                       "token_id": 1000 + i, "token": piece, "logp_student": student[i],
                                       "logp_full": min(full[i], 0.0), "logp_ablated": min(ablated[i], 0.0)})
            step_rows.append({
                "global_step": global_step, "traj_uid": uid, "group_uid": f"g{t // 4}", "task_type": "pick",
                "step_idx": k, "num_steps": n_steps, "action": f"{op} mug 1", "operator": op,
                "obs_next": "Nothing happens." if label == "invalid" else "You see a mug 1.",
                "feedback_label": label, "progress_label": "invalid" if label == "invalid" else "progress",
                "reward": reward, "advantage": float(advantages[t]), "nll": float(nll[k]),
                "selected": bool(selected[k]),
                "scored": bool(selected[k]), "n_tokens": n_tok})
    steps = pd.DataFrame(step_rows)
    tokens = pd.DataFrame(token_rows, columns=["global_step", "traj_uid", "step_idx", "token_idx", "token_id",
                                               "token", "logp_student", "logp_full", "logp_ablated"])
    meta = {"global_step": global_step, "run": "synthetic", "model": "none", "env": env, "method": "ocsd",
            "rho": rho, "beta": 0.5, "views": ["student", "full", "ablated"]}
    return write_replay(Path(folder) / f"global_step_{global_step}" / "replay", steps, tokens, meta)


def make_run(root: Path, global_steps, **kwargs) -> Path:
    """Write a synthetic run folder with the given checkpoints."""
    root = Path(root)
    writer = RunWriter(root)
    writer.write_run_json({"run": "synthetic", "method": "ocsd", "env": kwargs.get("env", "alfworld"),
                           "model": "none", "seed": kwargs.get("seed", 0), "config": {}})
    for step in global_steps:
        make_checkpoint(root, int(step), **kwargs)
    return root
