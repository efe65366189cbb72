"""Fig. 7 sensitivity from a sweep index of run folders written by the record writer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from figures import fig7_sensitivity, paper
from figures.tables import collect, read_index
from ocsd.records import read_metrics
from tests.figures.runs import make_run


@pytest.fixture
def sweep(tmp_path):
    """GRPO (two seeds) and OCSD at rho 0.1/0.2/0.5 with beta 0.5 and at beta 0.25/1.0 with rho 0.2, two seeds each."""
    cells = [("grpo", None, None), *[("ocsd", r, 0.5) for r in (0.1, 0.2, 0.5)],
             *[("ocsd", 0.2, b) for b in (0.25, 1.0)]]
    index = []
    for i, (method, rho, beta) in enumerate(cells):
        for seed in (0, 1):
            run = make_run(tmp_path / f"{method}_{rho}_{beta}_{seed}", method=method, seed=10 * i + seed,
                           rho=rho if rho is not None else 0.2, beta=beta if beta is not None else 0.5)
            index.append({"method": method, "seed": seed, "rho": rho, "beta": beta, "run_dir": str(run),
                          "status": "done", "returncode": 0})
    (tmp_path / "index.json").write_text(json.dumps(index))
    return tmp_path / "index.json"


def _last_val(run_dir) -> float:
    return [r for r in read_metrics(run_dir) if "val/success_rate" in r][-1]["val/success_rate"]


def test_points_are_the_cells_seed_means(sweep, tmp_path):
    out = tmp_path / "out"
    assert fig7_sensitivity.main(["--index", str(sweep), "--out", str(out), "--paper-reference", "Qwen3-4B"]) == 0
    drawn = json.loads((out / "fig7_sensitivity.json").read_text())
    index = json.loads(sweep.read_text())

    def expected(pred):
        vals = [_last_val(e["run_dir"]) for e in index if pred(e)]
        return np.mean(vals), np.std(vals, ddof=1), len(vals)

    grpo = expected(lambda e: e["method"] == "grpo")
    assert [p["x"] for p in drawn["rho"]] == [0.0, 0.1, 0.2, 0.5]
    assert [p["x"] for p in drawn["beta"]] == [0.0, 0.25, 0.5, 1.0]
    for sweep_name in ("rho", "beta"):
        assert (drawn[sweep_name][0]["mean"], drawn[sweep_name][0]["n"]) == pytest.approx((grpo[0], grpo[2]))
    rho02 = expected(lambda e: e["method"] == "ocsd" and e["rho"] == 0.2 and e["beta"] == 0.5)
    point = next(p for p in drawn["rho"] if p["x"] == 0.2)
    assert (point["mean"], point["std"], point["n"]) == pytest.approx(rho02)
    assert drawn["paper"]["beta"]["1.0"] == paper.SENSITIVITY["beta"][1.0].mean
    assert (out / "fig7_sensitivity.png").stat().st_size > 10_000


def test_other_data_draw_other_points(sweep, tmp_path):
    """Changing one run's validation changes the point it belongs to, and only that one."""
    entries, _ = read_index(sweep)
    from figures._common import load_runs

    runs = load_runs([e["run_dir"] for e in entries])
    groups, _ = collect(runs, entries)
    before = fig7_sensitivity.sensitivity_points(groups, rho_default=0.2, beta_default=0.5)
    key = ("ocsd", 0.5, 0.5)
    seed, row = groups[key][0]
    groups[key][0] = (seed, {**row, "val/success_rate": row["val/success_rate"] + 0.2})
    after = fig7_sensitivity.sensitivity_points(groups, rho_default=0.2, beta_default=0.5)
    changed = [x for (x, a), (_, b) in zip(before["rho"], after["rho"]) if a.mean != b.mean]
    assert changed == [0.5] and [s.mean for _, s in before["beta"]] == [s.mean for _, s in after["beta"]]


def test_needs_a_sweep_and_a_paper_model(sweep, tmp_path, capsys):
    assert fig7_sensitivity.main(["--index", str(sweep), "--out", str(tmp_path), "--paper-reference", "GPT"]) == 2
    assert "--paper-reference: 'GPT'" in capsys.readouterr().err
    only_grpo = [e for e in json.loads(sweep.read_text()) if e["method"] == "grpo"]
    (tmp_path / "grpo.json").write_text(json.dumps(only_grpo))
    assert fig7_sensitivity.main(["--index", str(tmp_path / "grpo.json"), "--out", str(tmp_path)]) == 1
    assert "no OCSD cell" in capsys.readouterr().err
