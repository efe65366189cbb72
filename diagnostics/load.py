"""Loading replay scores for the diagnosis (reads only the replay-score format, docs/replay-format.md v1).

Token signals (never stored, derived here):

* ``d_full``     delta_F = logp_full - logp_student
* ``d_ablated``  delta_A = logp_ablated - logp_student
* ``residual``   e = logp_full - logp_ablated (signed)

Step scores ``S_<signal>`` are the means of a step's token signals. Checkpoints are keyed by their
folder (``ocsd.records.CHECKPOINT_COLUMN``), so two runs whose checkpoints share global steps and
trajectory ids are pooled side by side, never joined; a checkpoint named twice is read once. Clusters
are trajectories, keyed by ``(checkpoint, traj_uid)``. Training stages split the run's global-step
range ``1..L`` into thirds: a checkpoint at step ``s`` is *early* if ``3 s <= L``, *middle* if
``3 s <= 2 L`` and *late* otherwise (``L = 150`` gives 1-50, 51-100, 101-150). ``L`` is
``total_steps`` when given, else the largest global step loaded.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from ocsd.cli import UsageError
from ocsd.records import CHECKPOINT_COLUMN, RecordError, read_replay

__all__ = ["SIGNALS", "STAGES", "DiagnosticsError", "DiagData", "load", "from_replay", "stage_of"]

SIGNALS = ("ablated", "full", "residual")
"""Token signals: delta_A, delta_F and the signed residual e = delta_F - delta_A."""
STAGES = ("early", "middle", "late")
_TOKEN_COLS = ("token", "logp_student", "logp_full", "logp_ablated")


class DiagnosticsError(UsageError):
    """The input cannot support the requested analysis (the message says why); a command exits 2."""


def stage_of(global_step, total_steps: int) -> np.ndarray:
    """Stage index (0 early, 1 middle, 2 late) of each global step for a run of ``total_steps``."""
    s = np.asarray(global_step, dtype=np.int64)
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    return np.where(3 * s <= total_steps, 0, np.where(3 * s <= 2 * total_steps, 1, 2))


@dataclass
class DiagData:
    """Scored steps and their tokens, ready for the diagnosis.

    Attributes
    ----------
    steps : pandas.DataFrame
        One row per scored step (in the chosen selection): ``global_step, traj_uid, step_idx,
        operator, feedback_label, n_tok, S_ablated, S_full, S_residual, cluster, ckpt, stage``.
        ``cluster`` and ``ckpt`` are 0-based integer codes; ``stage`` indexes :data:`STAGES`.
    tokens : pandas.DataFrame
        Token rows of those steps in output order: ``step`` (row of ``steps``), ``token``,
        ``d_ablated, d_full, residual``.
    env : str
        Environment of the checkpoints.
    global_steps : numpy.ndarray
        Training step of each checkpoint code (two runs' checkpoints may share one).
    total_steps : int
        Run length L used for the stages.
    checkpoints : tuple of str
        Name of each checkpoint code for messages (``run/global_step_N``).
    """

    steps: pd.DataFrame
    tokens: pd.DataFrame
    env: str
    global_steps: np.ndarray
    total_steps: int
    checkpoints: tuple = ()

    @property
    def n_checkpoints(self) -> int:
        return int(self.global_steps.size)

    def labelled(self) -> pd.DataFrame:
        """Steps labelled valid or invalid (ambiguous excluded), with ``y`` = 1 for valid."""
        lab = self.steps[self.steps["feedback_label"].isin(["valid", "invalid"])].copy()
        lab["y"] = (lab["feedback_label"] == "valid").to_numpy()
        return lab

    def checkpoint_names(self, codes, *, limit: int = 3) -> str:
        """The names of the checkpoint ``codes`` (each once, in code order), the first ``limit`` of them."""
        codes = np.unique(np.asarray(codes, dtype=np.int64))
        names = [self.checkpoints[c] if c < len(self.checkpoints) else f"checkpoint {c}" for c in codes]
        more = f" and {len(names) - limit} more" if len(names) > limit else ""
        return ", ".join(names[:limit]) + more


def _checkpoint_name(key) -> str:
    """``run/global_step_N`` for a checkpoint folder; ``global_step_N`` for a bare global step."""
    if isinstance(key, str):
        path = Path(key)
        return f"{path.parent.name}/{path.name}" if path.parent.name else path.name
    return f"global_step_{int(key)}"


def _checkpoint_codes(steps: pd.DataFrame, tokens: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, list]:
    """Integer checkpoint of each step and token row, and the key of each integer.

    Keys are the :data:`CHECKPOINT_COLUMN` read with the tables; tables without it (one checkpoint
    per global step) are keyed by ``global_step``. A token row of no listed checkpoint gets -1.
    """
    has = [CHECKPOINT_COLUMN in frame.columns for frame in (steps, tokens)]
    if has[0] != has[1]:
        raise DiagnosticsError(f"the steps and tokens tables must both have or both lack the "
                               f"{CHECKPOINT_COLUMN!r} column")
    column = CHECKPOINT_COLUMN if has[0] else "global_step"
    keys = pd.unique(np.asarray(steps[column]))
    step_codes = pd.Categorical(steps[column], categories=keys).codes.astype(np.int64)
    token_codes = pd.Categorical(tokens[column], categories=keys).codes.astype(np.int64)
    return step_codes, token_codes, list(keys)


def _checkpoint_order(st: pd.DataFrame, keys: list) -> tuple[np.ndarray, np.ndarray, tuple]:
    """Checkpoint code of each step row (checkpoints in global-step order, ties in read order), the
    global step and the name of each code."""
    ckpts = st.groupby("_ck", sort=True)["global_step"].first().reset_index().sort_values(
        ["global_step", "_ck"], kind="stable")
    order = np.full(len(keys), -1, dtype=np.int64)
    order[ckpts["_ck"].to_numpy()] = np.arange(len(ckpts))
    names = tuple(_checkpoint_name(keys[c]) for c in ckpts["_ck"].to_numpy())
    return order[st["_ck"].to_numpy()], ckpts["global_step"].to_numpy(np.int64), names


def _environment(metas: list[dict]) -> str:
    """The one environment of the checkpoints' metadata ("unknown" without any)."""
    envs = sorted({str(m.get("env")) for m in metas}) if metas else ["unknown"]
    if len(envs) > 1:
        raise DiagnosticsError(f"checkpoints of different environments cannot be pooled: {envs}")
    return envs[0]


def from_replay(steps: pd.DataFrame, tokens: pd.DataFrame, metas: list[dict], *,
                total_steps: int | None = None, extra_columns: Sequence[str] = ()) -> DiagData:
    """Build :class:`DiagData` from replay tables (as returned by ``ocsd.records.read_replay``).

    Rows are matched by checkpoint (the tables' ``ocsd.records.CHECKPOINT_COLUMN``; tables without it
    are taken as one checkpoint per global step), trajectory and step. ``extra_columns`` of ``steps`` are
    kept in ``DiagData.steps`` after the signals.
    """
    if len(steps) == 0:
        raise DiagnosticsError("no steps in the selection (is any step selected/scored?)")
    env = _environment(metas)
    step_ck, token_ck, keys = _checkpoint_codes(steps, tokens)
    key = ["_ck", "global_step", "traj_uid", "step_idx"]
    extra = [c for c in extra_columns if c not in key + ["operator", "feedback_label"]]
    st = steps.loc[:, key[1:] + ["operator", "feedback_label", *extra]].reset_index(drop=True).assign(_ck=step_ck)
    st["_step"] = np.arange(len(st))
    tok = tokens.loc[:, key[1:] + ["token_idx", *_TOKEN_COLS]].assign(_ck=token_ck)
    tok = tok.merge(st[key + ["_step"]], on=key, how="inner")
    tok = tok.sort_values(["_step", "token_idx"], kind="stable").reset_index(drop=True)
    n_tok = np.bincount(tok["_step"].to_numpy(), minlength=len(st))
    if (n_tok == 0).any():
        n_missing = int((n_tok == 0).sum())
        warnings.warn(f"{n_missing} of {len(st)} steps have no token rows (not scored) and are left out",
                      UserWarning, stacklevel=2)
    keep = n_tok > 0
    if not keep.any():
        raise DiagnosticsError("no scored steps in the selection (tokens.parquet has no rows for them)")
    remap = np.cumsum(keep) - 1
    st = st[keep].reset_index(drop=True)
    step_code = remap[tok["_step"].to_numpy()]
    student = tok["logp_student"].to_numpy(np.float64)
    full = tok["logp_full"].to_numpy(np.float64)
    ablated = tok["logp_ablated"].to_numpy(np.float64)
    signals = {"d_ablated": ablated - student, "d_full": full - student, "residual": full - ablated}
    counts = n_tok[keep].astype(np.float64)
    st["n_tok"] = n_tok[keep]
    for name, col in zip(SIGNALS, ("d_ablated", "d_full", "residual")):
        st[f"S_{name}"] = np.bincount(step_code, weights=signals[col], minlength=len(st)) / counts
    st["ckpt"], global_steps, names = _checkpoint_order(st, keys)
    st["cluster"] = st.groupby(["ckpt", "traj_uid"], sort=True).ngroup().to_numpy()
    total = int(total_steps) if total_steps is not None else int(global_steps.max())
    if total < int(global_steps.max()):
        raise DiagnosticsError(f"total steps {total} is smaller than the largest global step {global_steps.max()}")
    st["stage"] = stage_of(st["global_step"].to_numpy(), total)
    st = st.drop(columns=["_step", "_ck"])
    st = st[["global_step", "traj_uid", "step_idx", "operator", "feedback_label", "n_tok",
             *[f"S_{name}" for name in SIGNALS], "cluster", "ckpt", "stage", *extra]]
    tokens_out = pd.DataFrame({"step": step_code, "token": tok["token"].to_numpy(object), **signals})
    return DiagData(steps=st, tokens=tokens_out, env=env, global_steps=global_steps, total_steps=total,
                    checkpoints=names)


def load(paths, *, steps: str = "selected", total_steps: int | None = None,
         properties: Callable[[pd.DataFrame, str], pd.DataFrame] | None = None) -> DiagData:
    """Read checkpoints and derive the signals.

    Parameters
    ----------
    paths : path or list of paths
        Checkpoint folders (``global_step_<N>`` or their ``replay/``) and/or run folders.
    steps : {"selected", "all"}, default "selected"
        Analyse only the selected (top-NLL) steps, as the paper does, or every scored step.
    total_steps : int, optional
        Run length for the stages (default: the largest global step loaded).
    properties : callable, optional
        ``f(steps, env) -> DataFrame``: per-step columns computed on every step of the checkpoints (the pooled
        ``steps.parquet`` rows with their ``ocsd.records.CHECKPOINT_COLUMN``, before the selection; the result
        is aligned with its input's index), e.g. from a trajectory's next step. Its columns are kept in
        ``DiagData.steps``.

    Raises
    ------
    DiagnosticsError, ocsd.records.RecordError
        On missing or malformed input, or an empty selection.
    """
    if steps not in ("selected", "all"):
        raise DiagnosticsError(f"--steps must be 'selected' or 'all', got {steps!r}")
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise DiagnosticsError("no input: give --run DIR or --ckpt DIR")
    read = "all" if properties is not None else steps  # properties may need the steps outside the selection
    data = read_replay(list(paths), steps=read, token_columns=list(_TOKEN_COLS) + ["token_idx"])
    if not data.metas:
        raise RecordError(f"{', '.join(map(str, paths))}: no complete checkpoint found")
    if properties is None:
        return from_replay(data.steps, data.tokens, data.metas, total_steps=total_steps)
    derived = properties(data.steps, _environment(data.metas))
    table = data.steps.assign(**{c: derived[c] for c in derived.columns})
    if steps == "selected":
        table = table[table["selected"].to_numpy(bool)]
    return from_replay(table, data.tokens, data.metas, total_steps=total_steps, extra_columns=list(derived.columns))
