"""Cluster-bootstrap AUROC: vectorised engine vs a loop calling ``sklearn.metrics.roc_auc_score``.

1,000 resamples over 50,000 steps in 5,000 trajectories (10 steps each, trajectory-correlated
scores). Both paths use the same drawn cluster indices, so their replicate AUROCs must agree to
rounding; the point estimates must be identical. The last line printed is ``speedup: <ratio>x``.

    python benchmarks/bootstrap.py [--n-boot 1000] [--n-steps 50000] [--n-traj 5000] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diagnostics.bootstrap import cluster_indices, counts_from_indices, percentile_ci  # noqa: E402
from diagnostics.stats import AurocEngine  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--n-steps", type=int, default=50_000)
    parser.add_argument("--n-traj", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    clusters = np.sort(rng.integers(0, args.n_traj, args.n_steps))
    clusters[: args.n_traj] = np.arange(args.n_traj)  # every trajectory has a step
    clusters = np.sort(clusters)
    traj_effect = rng.normal(0, 0.5, args.n_traj)
    y = rng.random(args.n_steps) < 0.5
    score = np.round(0.4 * y + traj_effect[clusters] + rng.normal(0, 1, args.n_steps), 3)  # ties included
    idx = cluster_indices(args.n_traj, n_boot=args.n_boot, seed=args.seed)

    t0 = time.perf_counter()
    engine = AurocEngine(y, score, clusters)
    point_fast = engine.evaluate(np.ones((1, args.n_traj)), warn=False)[0]
    reps_fast = engine.evaluate(counts_from_indices(idx, args.n_traj), warn=False)
    t_fast = time.perf_counter() - t0

    t0 = time.perf_counter()
    point_loop = roc_auc_score(y, score)
    order = np.argsort(clusters, kind="stable")
    starts = np.searchsorted(clusters[order], np.arange(args.n_traj))
    ends = np.searchsorted(clusters[order], np.arange(args.n_traj), side="right")
    reps_loop = np.empty(args.n_boot)
    for b in range(args.n_boot):
        lens = ends[idx[b]] - starts[idx[b]]
        offsets = np.cumsum(lens) - lens
        rows = order[np.repeat(starts[idx[b]] - offsets, lens) + np.arange(lens.sum())]
        reps_loop[b] = roc_auc_score(y[rows], score[rows])
    t_loop = time.perf_counter() - t0

    lo_f, hi_f = percentile_ci(reps_fast)
    lo_l, hi_l = percentile_ci(reps_loop)
    print(f"data: {args.n_steps} steps, {args.n_traj} trajectories, {args.n_boot} cluster resamples")
    print(f"point estimate: vectorised {point_fast:.12f}  roc_auc_score {point_loop:.12f}  "
          f"identical: {abs(point_fast - point_loop) < 1e-12}")
    print(f"replicates max |diff|: {np.max(np.abs(reps_fast - reps_loop)):.2e}")
    print(f"95% CI: vectorised [{lo_f:.5f}, {hi_f:.5f}]  loop [{lo_l:.5f}, {hi_l:.5f}]")
    print(f"time: vectorised {t_fast:.3f} s  loop {t_loop:.3f} s")
    print(f"speedup: {t_loop / t_fast:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
