"""One step of a run, token by token (paper Fig. 1): the numbers the token-level example draws.

For one scored step: its action, next observation and feedback label, and for each response token the
Full support delta_F = logp_full - logp_student, the Ablated support delta_A = logp_ablated - logp_student
and the residual e = logp_full - logp_ablated (as :mod:`diagnostics.load` defines them). The step is named
(``traj_uid:k``, optionally ``global_step:traj_uid:k``) or chosen as the most telling one: the invalid step
with the largest mean |e| (else, without invalid steps, the labelled step with the largest mean |e|).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from diagnostics.load import DiagnosticsError
from ocsd.records import read_replay

__all__ = ["TokenExample", "parse_step", "token_example"]


@dataclass(frozen=True)
class TokenExample:
    """A step's tokens with their three signals and the step's context."""

    checkpoint: str
    global_step: int
    traj_uid: str
    step_idx: int
    action: str
    obs_next: str
    feedback_label: str
    tokens: tuple[str, ...]
    d_full: np.ndarray
    d_ablated: np.ndarray
    residual: np.ndarray
    chosen: str  # how the step was chosen

    @property
    def mean_abs_residual(self) -> float:
        return float(np.abs(self.residual).mean())

    def as_dict(self) -> dict:
        """JSON-ready values (what the figure draws)."""
        return {"checkpoint": self.checkpoint, "global_step": self.global_step, "traj_uid": self.traj_uid,
                "step_idx": self.step_idx, "action": self.action, "obs_next": self.obs_next,
                "feedback_label": self.feedback_label, "chosen": self.chosen,
                "mean_abs_residual": self.mean_abs_residual,
                "tokens": [{"token": t, "d_full": float(f), "d_ablated": float(a), "residual": float(e)}
                           for t, f, a, e in zip(self.tokens, self.d_full, self.d_ablated, self.residual)]}


def parse_step(text: str) -> tuple[int | None, str, int]:
    """``traj_uid:k`` or ``global_step:traj_uid:k`` -> (global step or None, traj_uid, k).

    Raises
    ------
    DiagnosticsError
        Naming ``--step`` and the expected form.
    """
    parts = str(text).split(":")
    try:
        if len(parts) == 2:
            return None, parts[0], int(parts[1])
        if len(parts) == 3:
            return int(parts[0]), parts[1], int(parts[2])
    except ValueError:
        pass
    raise DiagnosticsError(f"--step {text!r}: expected traj_uid:k or global_step:traj_uid:k (e.g. s1_t0_r0:3)")


def token_example(paths, *, step: str | None = None) -> TokenExample:
    """The token-level example of a run or checkpoints (``paths``), for a named ``step`` or chosen.

    Raises
    ------
    DiagnosticsError
        No scored step, the named step is not scored or is ambiguous (several checkpoints have it).
    """
    data = read_replay(paths if isinstance(paths, (list, tuple)) else [paths], steps="all")
    steps, tokens = data.steps, data.tokens
    if len(tokens) == 0:
        raise DiagnosticsError("no scored step (tokens.parquet is empty): train or collect with replay scores first")
    key = ["checkpoint", "global_step", "traj_uid", "step_idx"]
    scored = steps.merge(tokens[key].drop_duplicates(), on=key, how="inner")
    tok = tokens.sort_values([*key, "token_idx"], kind="stable")
    tok = tok.assign(residual=tok["logp_full"] - tok["logp_ablated"])
    mean_abs = tok.assign(a=tok["residual"].abs()).groupby(key, sort=False)["a"].mean().rename("mean_abs")
    scored = scored.merge(mean_abs.reset_index(), on=key, how="left")
    if step is not None:
        gstep, traj, k = parse_step(step)
        hit = scored[(scored["traj_uid"] == traj) & (scored["step_idx"] == k)]
        if gstep is not None:
            hit = hit[hit["global_step"] == gstep]
        if len(hit) == 0:
            some = ", ".join(f"{r.global_step}:{r.traj_uid}:{r.step_idx}" for r in scored.head(3).itertuples())
            where = f" at global step {gstep}" if gstep is not None else ""
            raise DiagnosticsError(f"--step {step}: no scored step {traj}:{k}{where}; scored steps include {some}")
        if len(hit) > 1:
            raise DiagnosticsError(f"--step {step}: {len(hit)} checkpoints have it; name the global step "
                                   f"(global_step:traj_uid:k)")
        row, chosen = hit.iloc[0], f"named ({step})"
    else:
        invalid = scored[scored["feedback_label"] == "invalid"]
        pool = invalid if len(invalid) else scored[scored["feedback_label"].isin(["valid", "invalid"])]
        if len(pool) == 0:
            pool = scored
        row = pool.sort_values(["mean_abs", "global_step", "traj_uid", "step_idx"],
                               ascending=[False, True, True, True], kind="stable").iloc[0]
        what = "invalid" if len(invalid) else "labelled" if pool is not scored else "scored"
        chosen = f"largest mean |e| among {len(pool)} {what} step(s)"
    mine = tok[(tok["checkpoint"] == row["checkpoint"]) & (tok["global_step"] == row["global_step"])
               & (tok["traj_uid"] == row["traj_uid"]) & (tok["step_idx"] == row["step_idx"])]
    student = mine["logp_student"].to_numpy(np.float64)
    full, ablated = mine["logp_full"].to_numpy(np.float64), mine["logp_ablated"].to_numpy(np.float64)
    obs = row["obs_next"]
    return TokenExample(checkpoint=str(row["checkpoint"]), global_step=int(row["global_step"]),
                        traj_uid=str(row["traj_uid"]), step_idx=int(row["step_idx"]), action=str(row["action"]),
                        obs_next="" if pd.isna(obs) else str(obs), feedback_label=str(row["feedback_label"]),
                        tokens=tuple(map(str, mine["token"])), d_full=full - student, d_ablated=ablated - student,
                        residual=full - ablated, chosen=chosen)
