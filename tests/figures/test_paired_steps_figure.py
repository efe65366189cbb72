"""``python -m figures.paired_steps``: the forest plot drawn from what ``diagnostics.paired_steps`` computed on
synthetic runs (test input only): each row's point and whisker are the result's numbers, and bad inputs are refused
by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from figures import paired_steps
from figures._common import FigureError
from tests.figures.test_figures import assert_png

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Two results: two pairs of runs (OCSD - GRPO at two seeds) and one pair (a run against its rerun)."""
    root = tmp_path_factory.mktemp("paired")
    rng = np.random.default_rng(4)
    for name in ("ocsd_s1", "grpo_s1", "ocsd_s2", "grpo_s2", "rerun/ocsd_s1"):
        folder = root / name
        folder.mkdir(parents=True)
        rows = [{"step": s, "success_rate": float(rng.random())} for s in range(1, 13)]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    paths = []
    for out, pairs in (("methods", [("ocsd_s1", "grpo_s1"), ("ocsd_s2", "grpo_s2")]),
                       ("rerun", [("ocsd_s1", "rerun/ocsd_s1")])):
        argv = [x for a, b in pairs for x in ("--pair", str(root / a), str(root / b))]
        done = subprocess.run([sys.executable, "-m", "diagnostics.paired_steps", *argv, "--n-boot", "300", "--json"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        paths.append(root / f"{out}.json")
        paths[-1].write_text(done.stdout)
    return paths


def test_each_row_is_the_results_difference_and_interval(results):
    inputs = paired_steps.read_inputs(results, ["methods", "rerun"])
    fig, data = paired_steps.draw(inputs, percent=True)
    try:
        ax = next(a for a in fig.axes if a.get_gid() == "forest")
        drawn = ax.containers
        expected = []
        for _, result in inputs:
            expected += [(p["difference"], p["ci_low"], p["ci_high"]) for p in result["pairs"]]
            if len(result["pairs"]) > 1:
                expected.append((result["pooled"]["difference"], result["pooled"]["ci_low"],
                                 result["pooled"]["ci_high"]))
        assert len(drawn) == len(expected) == 4  # two pairs and their pooled row, then the one rerun pair
        for container, (value, low, high) in zip(drawn, expected):
            assert np.allclose(container.lines[0].get_xdata(), [100 * value])
            segment = container.lines[2][0].get_segments()[0]
            assert np.allclose([segment[0][0], segment[1][0]], [100 * low, 100 * high])
        ys = [c.lines[0].get_ydata()[0] for c in drawn]
        assert ys == sorted(ys, reverse=True)  # top to bottom, in input order
        names = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert names[0] == "ocsd_s1 - grpo_s1 (steps 1-12)" and names[2] == "pooled (24 steps)"
        assert names[3].endswith("/ocsd_s1 - rerun/ocsd_s1 (steps 1-12)")  # same names: their parent folders too
        assert [r["pooled"] for r in data["methods"]] == [False, False, True] and len(data["rerun"]) == 1
    finally:
        paired_steps.pyplot().close(fig)


def test_the_command_writes_the_picture_and_the_values(results, tmp_path):
    done = subprocess.run([sys.executable, "-m", "figures.paired_steps", *map(str, results), "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert_png(tmp_path / "paired_steps.png")
    values = json.loads((tmp_path / "paired_steps_fig.json").read_text())
    stored = json.loads(results[0].read_text())
    assert set(values) == {"methods", "rerun"}
    assert values["methods"][0]["value"] == pytest.approx(stored["pairs"][0]["difference"])  # no --percent: as is


def test_inputs_it_cannot_draw_are_refused_by_name(results, tmp_path):
    other = tmp_path / "by_step.json"
    other.write_text(json.dumps({"windows": []}))
    with pytest.raises(FigureError, match=f"{other}: no pairs"):
        paired_steps.read_inputs([other])
    with pytest.raises(FigureError, match="--label given 1 time"):
        paired_steps.read_inputs(results, ["only one"])
    with pytest.raises(FigureError, match="no input"):
        paired_steps.read_inputs([])
    done = subprocess.run([sys.executable, "-m", "figures.paired_steps", str(tmp_path / "missing.json")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "missing.json does not exist" in done.stderr and "Traceback" not in done.stderr

