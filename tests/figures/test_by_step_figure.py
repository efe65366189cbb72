"""``python -m figures.by_step``: the diagnosis along training drawn from what ``diagnostics.by_step`` computed on
synthetic runs (test input only): the points and whiskers are the results' numbers, and bad inputs are refused by
name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from diagnostics import by_step as stats
from diagnostics.load import load
from figures import by_step
from figures._common import FigureError
from tests.figures.test_figures import assert_png

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results(runs, tmp_path_factory):
    """Two by_step results (windows of 4 and of 8 steps) of the OCSD run with checkpoints 4, 8 and 12."""
    out = tmp_path_factory.mktemp("by_step")
    paths = []
    for width in (4, 8):
        data = load([runs["ocsd0"]])
        path = out / f"w{width}.json"
        path.write_text(json.dumps(stats.by_step(data, width=width, n_boot=40, seed=1)))
        paths.append(path)
    return paths


def test_the_points_and_whiskers_are_the_results_numbers(results):
    inputs = by_step.read_inputs(results, ["four", "eight"])
    fig, data = by_step.draw(inputs, ablated=True)
    try:
        delta = next(ax for ax in fig.axes if ax.get_gid() == "delta")
        auroc = next(ax for ax in fig.axes if ax.get_gid() == "auroc")
        assert [c.get_label() for c in delta.containers] == ["four", "eight"]
        assert len(auroc.containers) == 6  # three signals for each input
        offsets = []
        for (label, result), drawn in zip(inputs, delta.containers):
            windows = result["windows"]
            line = drawn.lines[0]
            assert np.allclose(line.get_ydata(), [w["delta"]["delta"] for w in windows])
            shift = np.asarray(line.get_xdata()) - [(w["first"] + w["last"]) / 2 for w in windows]
            assert np.allclose(shift, shift[0])  # each input nudged by one amount
            offsets.append(shift[0])
            segments = drawn.lines[2][0].get_segments()  # the whiskers: from ci_low to ci_high
            assert np.allclose([(seg[0][1], seg[1][1]) for seg in segments],
                               [(w["delta"]["ci_low"], w["delta"]["ci_high"]) for w in windows])
        assert offsets[0] < offsets[1]  # side by side
        full = next(c for c in auroc.containers if c.get_label() == "Full, four")
        assert np.allclose(full.lines[0].get_ydata(), [w["signals"]["full"]["auroc"] for w in inputs[0][1]["windows"]])
        assert data["four"]["auroc"]["full"][0][0] == inputs[0][1]["windows"][0]["signals"]["full"]["auroc"]
    finally:
        by_step.pyplot().close(fig)


def test_the_command_writes_the_picture_and_the_values(results, tmp_path):
    done = subprocess.run([sys.executable, "-m", "figures.by_step", *map(str, results), "--label", "a",
                           "--label", "b", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert_png(tmp_path / "by_step.png")
    values = json.loads((tmp_path / "by_step_fig.json").read_text())
    assert set(values) == {"a", "b"} and len(values["a"]["x"]) == len(json.loads(results[0].read_text())["windows"])


def test_inputs_it_cannot_draw_are_refused_by_name(results, tmp_path):
    other = tmp_path / "report.json"
    other.write_text(json.dumps({"auroc": {}}))
    with pytest.raises(FigureError, match=f"{other}: no windows"):
        by_step.read_inputs([other])
    with pytest.raises(FigureError, match="--label given 1 time"):
        by_step.read_inputs(results, ["only one"])
    with pytest.raises(FigureError, match="no input"):
        by_step.read_inputs([])
    done = subprocess.run([sys.executable, "-m", "figures.by_step", str(tmp_path / "missing.json")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "missing.json does not exist" in done.stderr and "Traceback" not in done.stderr


def test_the_caption_names_the_checkpoints_steps_not_the_last_windows_edge(results, tmp_path, monkeypatch):
    """Checkpoints 4, 8 and 12 in windows of 8 (4-11, 12-19): the caption says steps 4-12, not 4-19."""
    said = []
    monkeypatch.setattr(by_step, "add_caption", lambda fig, text: said.append(text))
    by_step.build(results[1:], tmp_path, labels=["eight"])
    windows = json.loads(results[1].read_text())["windows"]
    assert windows[-1]["last"] == 19
    assert said and "eight: checkpoints of steps 4-12, windows of 8" in said[0]
