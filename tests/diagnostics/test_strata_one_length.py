"""``python -m diagnostics.strata`` on steps that all show one evidence length (equal values, whose quantile
edges coincide): one stratum, reported as such, whose within-strata AUROC is the pooled one; and fewer bins than
``--bins`` asked for are said to be fewer."""

import json
import shutil

import pandas as pd
import pytest

from diagnostics import strata
from ocsd.records import validate_path


def _set_observations(run, obs_of_step):
    """Rewrite every checkpoint's ``obs_next`` with ``obs_of_step(step_idx, num_steps)``."""
    for path in run.glob("global_step_*/replay/steps.parquet"):
        steps = pd.read_parquet(path)
        steps["obs_next"] = [obs_of_step(int(k), int(n)) for k, n in zip(steps["step_idx"], steps["num_steps"])]
        steps.to_parquet(path, index=False)
    assert validate_path(run) == []
    return run


@pytest.fixture
def one_length_run(synth_run, tmp_path):
    """Every step's evidence (o_{k+1}, and o_{k+2} where the trajectory goes on) is 3 words long: observations
    of 3 words and of none alternate, ending with 3 words after the last action."""
    run = shutil.copytree(synth_run, tmp_path / "one_length")
    return _set_observations(run, lambda k, n: "You see it." if (n - 1 - k) % 2 == 0 else "")


def test_one_evidence_length_is_one_stratum(one_length_run, capsys):
    assert strata.main(["--run", str(one_length_run), "--n-boot", "50", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [s["stratum"] for s in result["strata"]] == ["3"]
    assert result["strata"][0]["n_steps"] == result["n_steps"] == result["n_steps_within"] > 0
    assert result["bins"] == {"requested": 5, "used": 1, "distinct_values": 1}
    for sig in ("ablated", "full", "residual"):
        assert result["within"][sig] == result["pooled"][sig] == result["strata"][0]["signals"][sig]
    assert strata.main(["--run", str(one_length_run), "--n-boot", "50"]) == 0
    captured = capsys.readouterr()
    assert ("note: every labelled step has evidence_words = 3: one stratum instead of --bins 5; the within-strata "
            "AUROC is the pooled one") in captured.out
    assert "Traceback" not in captured.err


def test_fewer_bins_than_asked_are_named(synth_run, tmp_path, capsys):
    """Two evidence lengths (the last step shows one observation): two strata at most, and the note says why."""
    run = _set_observations(shutil.copytree(synth_run, tmp_path / "two_lengths"), lambda k, n: "You see it.")
    assert strata.main(["--run", str(run), "--n-boot", "50", "--bins", "4"]) == 0
    out = capsys.readouterr().out
    assert "note: 1 strata instead of --bins 4" in out or "note: 2 strata instead of --bins 4" in out
    assert "2 distinct evidence_words values" in out
    assert strata.main(["--run", str(synth_run), "--n-boot", "50", "--by", "next_action"]) == 0
    assert "note:" not in capsys.readouterr().out
