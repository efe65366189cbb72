"""Fig. 1 (a step token by token) from replay checkpoints written by the record writer."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from diagnostics.example import parse_step, token_example
from diagnostics.load import DiagnosticsError
from figures import fig1_example
from ocsd.records import RecordError, read_replay


def _reference(run):
    """Per scored step: the three signals from the tokens table, and the step row."""
    data = read_replay([run], steps="all")
    tok = data.tokens.sort_values(["global_step", "traj_uid", "step_idx", "token_idx"])
    out = {}
    for (g, t, k), rows in tok.groupby(["global_step", "traj_uid", "step_idx"]):
        s, f, a = (rows[c].to_numpy(np.float64) for c in ("logp_student", "logp_full", "logp_ablated"))
        out[(g, t, k)] = (f - s, a - s, f - a)
    return data.steps, out


def test_automatic_choice_is_the_invalid_step_with_the_largest_mean_abs_residual(runs):
    steps, ref = _reference(runs["ocsd0"])
    invalid = {(r.global_step, r.traj_uid, r.step_idx) for r in steps.itertuples() if r.feedback_label == "invalid"}
    best = max((k for k in ref if k in invalid), key=lambda k: np.abs(ref[k][2]).mean())
    ex = token_example(runs["ocsd0"])
    assert (ex.global_step, ex.traj_uid, ex.step_idx) == best and ex.feedback_label == "invalid"
    np.testing.assert_allclose(ex.d_full, ref[best][0])
    np.testing.assert_allclose(ex.d_ablated, ref[best][1])
    np.testing.assert_allclose(ex.residual, ref[best][2])
    row = steps[(steps.global_step == best[0]) & (steps.traj_uid == best[1]) & (steps.step_idx == best[2])].iloc[0]
    assert ex.action == row["action"] and "invalid step" in ex.chosen


def test_named_step_and_its_errors(runs):
    steps, ref = _reference(runs["ocsd0"])
    g, t, k = sorted(ref)[-1]
    ex = token_example(runs["ocsd0"], step=f"{g}:{t}:{k}")
    np.testing.assert_allclose(ex.residual, ref[(g, t, k)][2])
    assert parse_step("s1_t0_r0:3") == (None, "s1_t0_r0", 3)
    with pytest.raises(DiagnosticsError, match="expected traj_uid:k"):
        parse_step("nonsense")
    with pytest.raises(DiagnosticsError, match="no scored step nope:1"):
        token_example(runs["ocsd0"], step="nope:1")
    with pytest.raises(RecordError, match="no.*checkpoint"):  # a run without checkpoints
        token_example(runs["grpo0"])


def test_png_html_and_values(runs, tmp_path):
    assert fig1_example.main(["--run", str(runs["ocsd0"]), "--out", str(tmp_path)]) == 0
    values = json.loads((tmp_path / "fig1_example.json").read_text())
    ex = token_example(runs["ocsd0"])
    assert [t["residual"] for t in values["tokens"]] == pytest.approx(ex.residual.tolist())
    page = (tmp_path / "fig1_example.html").read_text()
    titles = re.findall(r'title="δF = ([-+\d.]+)&#10;δA = ([-+\d.]+)&#10;e = ([-+\d.]+)"', page)
    assert len(titles) == 3 * len(ex.tokens)  # every token in each of the three rows shows its numbers
    assert [float(e) for _, _, e in titles[: len(ex.tokens)]] == pytest.approx(ex.residual.tolist(), abs=1e-4)
    assert (tmp_path / "fig1_example.png").stat().st_size > 10_000
    fig = fig1_example.draw(ex)
    drawn = {p.get_gid(): p._value for ax in fig.axes for p in ax.patches if p.get_gid()}
    assert [drawn[f"residual|{i}"] for i in range(len(ex.tokens))] == pytest.approx(ex.residual.tolist())
    assert [drawn[f"d_full|{i}"] for i in range(len(ex.tokens))] == pytest.approx(ex.d_full.tolist())
