"""``python -m figures.credit``: the three panels drawn from what ``diagnostics.credit`` computed on synthetic runs
(test input only): each point and whisker is the result's number, and bad inputs are refused by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from figures import credit
from figures._common import FigureError
from tests.diagnostics.synth import make_run
from tests.figures.test_figures import assert_png

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """The credit of one synthetic run over whole steps and over the actions' tokens."""
    root = tmp_path_factory.mktemp("credit")
    run = make_run(root / "run", [10, 20], n_traj=10, seed=5, advantage_sd=1.0)
    paths = []
    for part in ("step", "action"):
        done = subprocess.run([sys.executable, "-m", "diagnostics.credit", "--run", str(run), "--part", part,
                               "--n-boot", "100", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        paths.append(root / f"{part}.json")
        paths[-1].write_text(done.stdout)
    return paths


def test_each_point_is_the_results_mean_and_interval(results):
    inputs = credit.read_inputs(results, ["whole steps", "actions"])
    fig, data = credit.draw(inputs)
    try:
        for stat, _, scale in credit.PANELS:
            ax = next(a for a in fig.axes if a.get_gid() == stat)
            expected = [part[stat] for _, result in inputs for part in result["labels"].values()]
            assert len(ax.containers) == len(expected) == 4  # valid and invalid of each input, top to bottom
            for container, est in zip(ax.containers, expected):
                assert np.allclose(container.lines[0].get_xdata(), [scale * est["estimate"]])
                segment = container.lines[2][0].get_segments()[0]
                assert np.allclose([segment[0][0], segment[1][0]], [scale * est["ci_low"], scale * est["ci_high"]])
            ys = [c.lines[0].get_ydata()[0] for c in ax.containers]
            assert ys == sorted(ys, reverse=True)
        assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["whole steps", "actions"]
        assert data["actions"]["push"]["invalid"]["value"] == pytest.approx(
            1e3 * inputs[1][1]["labels"]["invalid"]["push"]["estimate"])
    finally:
        credit.pyplot().close(fig)


def test_the_command_writes_the_picture_and_the_values(results, tmp_path):
    done = subprocess.run([sys.executable, "-m", "figures.credit", *map(str, results), "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert_png(tmp_path / "credit.png")
    values = json.loads((tmp_path / "credit_fig.json").read_text())
    assert set(values) == {"step", "action"} and set(values["step"]) == {"q", "abs_q", "push"}


def test_a_file_that_is_not_a_credit_result_is_refused_by_name(results, tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"pairs": []}))
    with pytest.raises(FigureError, match="other.json: no means per feedback label"):
        credit.read_inputs([results[0], other])
    with pytest.raises(FigureError, match="--label given 1"):
        credit.read_inputs(results, ["one"])
