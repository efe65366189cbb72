"""``diagnostics.strata``: the within-strata AUROC against brute-force pair counting, the step properties on
hand-built trajectories, and the command on a synthetic run (test input only)."""

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from diagnostics import auroc, strata
from diagnostics.load import load
from ocsd.records import CHECKPOINT_COLUMN


def brute_within(y, scores, groups):
    """Pairs of one valid and one invalid observation of the same group, counted one by one."""
    num = den = 0.0
    for i in np.flatnonzero(y):
        for j in np.flatnonzero(~y):
            if groups[i] == groups[j]:
                num += (scores[i] > scores[j]) + 0.5 * (scores[i] == scores[j])
                den += 1
    return num / den if den else np.nan


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_within_strata_auroc_counts_the_pairs_of_each_stratum(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(40, 90))
    y = rng.random(n) < 0.45
    groups = rng.choice(np.array(["a", "b", "c", "d"]), n)
    groups[:6] = "only"  # a stratum of one class adds no pair
    y[:6] = True
    scores = np.round(rng.normal(size=(n, 3)) + y[:, None] * rng.normal(0.3, 0.2, 3), 1)  # ties
    got = strata.within_strata_auroc(y, scores, groups)
    assert got == pytest.approx([brute_within(y, scores[:, j], groups) for j in range(3)])
    one = strata.within_strata_auroc(y, scores[:, 0], np.zeros(n))
    assert one == pytest.approx(roc_auc_score(y, scores[:, 0]))


def test_within_strata_auroc_under_cluster_weights_equals_the_repeated_sample():
    """A bootstrap resample (integer weights per trajectory) is the sample with each trajectory repeated."""
    rng = np.random.default_rng(11)
    n, n_clusters = 70, 15
    clusters = rng.integers(0, n_clusters, n)
    y = rng.random(n) < 0.5
    groups = rng.integers(0, 3, n)
    scores = np.round(rng.normal(size=n) + 0.5 * y, 1)
    counts = rng.integers(0, 3, n_clusters)
    rows = np.concatenate([np.flatnonzero(clusters == c).repeat(1) for c in range(n_clusters)
                           for _ in range(counts[c])])
    expected = brute_within(y[rows], scores[rows], groups[rows])
    got = strata.within_strata_auroc(y, scores, groups, cluster_weights=counts, clusters=clusters)
    assert got == pytest.approx(expected)
    with pytest.raises(ValueError, match="needs clusters"):
        strata.within_strata_auroc(y, scores, groups, cluster_weights=counts)


def _steps(rows):
    frame = pd.DataFrame(rows, columns=["ck", "traj_uid", "step_idx", "action", "obs_next"])
    frame[CHECKPOINT_COLUMN] = pd.Categorical(frame.pop("ck"))
    return frame.sample(frac=1.0, random_state=3)  # any row order


def test_step_properties_follow_the_trajectory():
    steps = _steps([
        ("a", "t0", 0, "go to desk 1", "Nothing happens."),
        ("a", "t0", 1, "go to desk 1", "You arrive at desk 1. On the desk 1, you see a pen 1."),
        ("a", "t0", 2, "go to shelf 1", "You arrive at shelf 1."),
        ("a", "t0", 3, "take pen 1 from desk 1", "You pick up the pen 1 from the desk 1."),
        ("a", "t1", 0, "open drawer 1", None),
        ("a", "t1", 2, "look", "You are in the middle of a room."),  # step 1 missing: no next step for step 0
        ("b", "t0", 0, "go to desk 1", "Nothing happens."),  # another checkpoint's trajectory of the same name
    ])
    words = strata.evidence_words(steps)["evidence_words"]
    nxt = strata.next_action(steps)["next_action"]
    key = list(zip(steps[CHECKPOINT_COLUMN], steps["traj_uid"], steps["step_idx"]))
    words, nxt = dict(zip(key, words)), dict(zip(key, nxt))
    assert words[("a", "t0", 0)] == 2 + 14 and words[("a", "t0", 1)] == 14 + 5
    assert words[("a", "t0", 3)] == 10  # the last step: o_{k+1} only
    assert words[("a", "t1", 0)] == 0 and words[("b", "t0", 0)] == 2
    assert nxt == {("a", "t0", 0): "repeat", ("a", "t0", 1): "same family", ("a", "t0", 2): "other family",
                   ("a", "t0", 3): "none", ("a", "t1", 0): "none", ("a", "t1", 2): "none", ("b", "t0", 0): "none"}


def test_load_with_properties_keeps_the_selection(synth_run):
    plain = load(synth_run)
    derived = load(synth_run, properties=strata.PROPERTIES["evidence_words"])
    columns = list(plain.steps.columns)
    pd.testing.assert_frame_equal(derived.steps[columns], plain.steps)
    assert (derived.steps["evidence_words"] > 0).all()


def test_strata_command(synth_run, capsys):
    assert strata.main(["--run", str(synth_run), "--by", "next_action", "--n-boot", "200", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    pooled = auroc.feedback_auroc(load(synth_run), n_boot=10)
    for sig in ("ablated", "full", "residual"):
        assert result["pooled"][sig]["auroc"] == pytest.approx(pooled["signals"][sig]["auroc"])
        low, high = result["within"][sig]["ci_low"], result["within"][sig]["ci_high"]
        assert low <= result["within"][sig]["auroc"] <= high
    for name in ("within", "pooled"):
        delta = result["delta"][name]
        assert delta["delta"] == pytest.approx(result[name]["residual"]["auroc"] - result[name]["full"]["auroc"])
        assert delta["ci_low"] <= delta["delta"] <= delta["ci_high"]
    data = load(synth_run, properties=strata.PROPERTIES["next_action"])
    lab = data.labelled()
    for s in result["strata"]:  # class means of each stratum, from the loaded steps directly
        rows = lab[(lab["next_action"] == s["stratum"]) & lab["y"]]
        assert s["mean"]["valid"]["residual"] == pytest.approx(rows["S_residual"].mean())
    names = [s["stratum"] for s in result["strata"]]
    assert names == [n for n in strata.NEXT_ACTIONS if n in names] and "none" in names
    assert sum(s["n_steps"] for s in result["strata"]) == result["n_steps"] == pooled["n_steps"]
    assert result["n_steps_within"] == sum(s["n_steps"] for s in result["strata"] if 0 < s["n_valid"] < s["n_steps"])
    assert strata.main(["--run", str(synth_run), "--n-boot", "50", "--bins", "3"]) == 0
    text = capsys.readouterr().out
    assert "within strata" in text and "pooled (raw)" in text and "(words)" in text
    assert "Delta AUROC (residual - full): within " in text
    with pytest.raises(SystemExit) as stop:
        strata.main(["--run", str(synth_run), "--bins", "0"])
    assert stop.value.code == 2 and "--bins must be >= 1" in capsys.readouterr().err


def test_out_writes_the_json_and_a_figure_of_its_values(synth_run, tmp_path, capsys, monkeypatch):
    import matplotlib.figure

    import figures.panels
    from tests.figures.test_figures import assert_png, bars

    drawn = []
    real = matplotlib.figure.Figure.savefig

    def spy(self, fname, *args, **kwargs):
        drawn.append(self)
        return real(self, fname, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    out = tmp_path / "strata"
    assert strata.main(["--run", str(synth_run), "--n-boot", "100", "--bins", "3", "--out", str(out)]) == 0
    assert f"picture: python -m figures.panels {out / 'strata_evidence_words.json'}" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["strata_evidence_words.json"]  # statistics never draw
    result = json.loads((out / "strata_evidence_words.json").read_text())
    assert figures.panels.draw_file(out / "strata_evidence_words.json") == [str(out / "strata_evidence_words.png")]
    assert_png(out / "strata_evidence_words.png")
    for signal in ("ablated", "full", "residual"):
        heights, lows, highs = bars(drawn[0], signal)
        expected = [s["signals"][signal] for s in result["strata"]] + [result["within"][signal],
                                                                          result["pooled"][signal]]
        for drawn_values, key in ((heights, "auroc"), (lows, "ci_low"), (highs, "ci_high")):
            assert drawn_values == pytest.approx([e[key] if e[key] is not None else 0.0 for e in expected])  # n/a: 0
