"""Relative residual contribution D per functional role (paper Fig. 2b).

For each word occurrence ``w`` with tokens ``T``::

    m_R = mean_{t in T} |delta_F - delta_A|,   m_A = mean_{t in T} |delta_A|,
    D   = m_R / (m_R + m_A + eps_D)            (D in [0, 1))

Words come from :mod:`diagnostics.words`, roles from :mod:`diagnostics.roles`. The estimate per
role is the mean of D over the role's word occurrences within each checkpoint, averaged over
checkpoints with equal weight (checkpoints without a word of that role are skipped). The 95%
interval comes from trajectory-cluster resamples drawn within each checkpoint (each checkpoint
keeps its number of trajectories), evaluated as weighted means without a loop over words.

Command::

    python -m diagnostics.dratio --run DIR [--eps 1e-6] [--n-boot 1000] [--json]
"""

from __future__ import annotations

import math
import sys
import warnings
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from diagnostics.bootstrap import BootstrapResult, bootstrap_result, iter_cluster_counts
from diagnostics.load import DiagData, DiagnosticsError
from diagnostics.options import command_parser, load_args
from diagnostics.roles import ROLES, get_lexicon
from ocsd.environments.lexicon import Lexicon
from diagnostics.stats import DegenerateInputWarning, nanmean
from diagnostics.wordtable import word_table
from ocsd.cli import emit, entry_point, format_table

__all__ = ["d_ratio", "checkpoint_mean", "dratio", "main"]


def d_ratio(m_r, m_a, *, eps: float = 1e-6) -> np.ndarray:
    """``D = m_R / (m_R + m_A + eps)`` elementwise; inputs must be non-negative."""
    m_r = np.asarray(m_r, dtype=np.float64)
    m_a = np.asarray(m_a, dtype=np.float64)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be finite and > 0, got {eps}")
    if np.any(m_r < 0) or np.any(m_a < 0):
        raise ValueError("m_R and m_A are mean absolute values and must be non-negative")
    return m_r / (m_r + m_a + eps)


def checkpoint_mean(values, groups, ckpt, clusters, *, n_groups: int, n_boot: int = 1000, ci: float = 0.95,
                    seed=0) -> list:
    """Checkpoint-equal-weight mean of ``values`` per group, with a within-checkpoint cluster bootstrap.

    Parameters
    ----------
    values : array-like of shape (n,)
    groups : array-like of int, shape (n,)
        Group (role) index in ``[0, n_groups)``.
    ckpt, clusters : array-like of int, shape (n,)
        Checkpoint and cluster of each value (a cluster lies in one checkpoint).
    n_groups : int
    n_boot, ci, seed : bootstrap settings.

    Returns
    -------
    list of BootstrapResult, one per group (nan where the group is empty).
    """
    values = np.asarray(values, dtype=np.float64)
    groups = np.asarray(groups, dtype=np.int64)
    _, ck = np.unique(np.asarray(ckpt), return_inverse=True)
    _, cl = np.unique(np.asarray(clusters), return_inverse=True)
    ck, cl = ck.reshape(-1), cl.reshape(-1)
    n_ck = int(ck.max()) + 1 if ck.size else 0
    n_cl = int(cl.max()) + 1 if cl.size else 0
    col = ck * n_groups + groups
    shape = (n_cl, n_ck * n_groups)
    sums = sp.csr_matrix((values, (cl, col)), shape=shape)
    cnts = sp.csr_matrix((np.ones_like(values), (cl, col)), shape=shape)

    def estimate(weights):  # weights (B, n_cl) -> (B, n_groups)
        s = np.asarray((sums.T @ weights.T).T).reshape(len(weights), n_ck, n_groups)
        c = np.asarray((cnts.T @ weights.T).T).reshape(len(weights), n_ck, n_groups)
        with np.errstate(invalid="ignore", divide="ignore"):
            per = np.where(c > 0, s / np.where(c > 0, c, 1), np.nan)
        return nanmean(per, axis=1)

    if n_cl == 0:
        return [bootstrap_result(np.nan, np.full(n_boot, np.nan), ci) for _ in range(n_groups)]
    point = estimate(np.ones((1, n_cl)))[0]
    cl_ckpt = np.zeros(n_cl, dtype=np.int64)
    cl_ckpt[cl] = ck
    reps = np.vstack([estimate(c) for c in iter_cluster_counts(n_cl, n_boot=n_boot, strata=cl_ckpt, seed=seed)])
    out = []
    for g in range(n_groups):
        if np.isnan(point[g]):
            out.append(BootstrapResult(np.nan, np.nan, np.nan, n_boot, 0))
        else:
            out.append(bootstrap_result(point[g], reps[:, g], ci))
    return out


def dratio(data: DiagData, *, eps: float = 1e-6, n_boot: int = 1000, ci: float = 0.95, seed=0,
           lexicon: Lexicon | None = None, words=None) -> dict:
    """Mean D per functional role with trajectory-cluster intervals.

    Parameters
    ----------
    data : DiagData
    eps : float, default 1e-6
        The stabiliser eps_D.
    n_boot, ci, seed : bootstrap settings.
    lexicon : Lexicon, optional
    words : pandas.DataFrame, optional
        A precomputed :func:`diagnostics.wordtable.word_table` (reused by the report).

    Returns
    -------
    dict
        ``{"categories": {role: {"mean", "ci_low", "ci_high", "n_words"}}, "eps", "n_boot",
        "n_checkpoints", "lexicon_source"}``.
    """
    words = words if words is not None else word_table(data, lexicon=lexicon)
    d = d_ratio(words["m_R"].to_numpy(), words["m_A"].to_numpy(), eps=eps)
    role = words["role"].cat.codes.to_numpy().astype(np.int64)
    results = checkpoint_mean(d, role, words["ckpt"].to_numpy(), words["cluster"].to_numpy(), n_groups=len(ROLES),
                              n_boot=n_boot, ci=ci, seed=seed)
    n_words = np.bincount(role, minlength=len(ROLES))
    cats = {}
    for i, name in enumerate(ROLES):
        if n_words[i] == 0:
            warnings.warn(f"no words of role {name}; its D is nan", DegenerateInputWarning, stacklevel=2)
        r = results[i]
        cats[name] = {**r.as_dict("mean"), "n_words": int(n_words[i])}
    source = (lexicon or get_lexicon(data.env)).source
    return {"categories": cats, "eps": eps, "n_boot": int(n_boot), "n_checkpoints": data.n_checkpoints,
            "lexicon_source": source}


def table(result: dict, ci: float = 0.95) -> str:
    """Plain-text rendering of :func:`dratio`'s result."""
    rows = [[k, v["mean"], v["ci_low"], v["ci_high"], v["n_words"]] for k, v in result["categories"].items()]
    return format_table(["role", "mean D", f"{ci:.0%} low", f"{ci:.0%} high", "words"], rows,
                        title=f"Relative residual contribution D per role ({result['n_checkpoints']} checkpoints "
                              f"weighted equally, entity lexicon: {result['lexicon_source']})")


def _main(argv: Sequence[str] | None) -> int:
    parser = command_parser("diagnostics.dratio", __doc__.split("\n")[0])
    parser.add_argument("--eps", type=float, default=1e-6, help="stabiliser eps_D, finite and > 0 (default 1e-6)")
    args = parser.parse_args(argv)
    if not (math.isfinite(args.eps) and args.eps > 0):
        raise DiagnosticsError(f"--eps must be a finite number > 0, got {args.eps}")
    data = load_args(args)
    result = dratio(data, eps=args.eps, n_boot=args.n_boot, ci=args.ci, seed=args.seed)
    emit(args.json, result, table(result, args.ci))
    return 0


main = entry_point(_main, "diagnostics.dratio")


if __name__ == "__main__":
    sys.exit(main())
