"""``rescoring.ladder`` and ``figures.ladder`` on a tiny run: the battery for several scorers on the same steps."""

from __future__ import annotations

import json

import pytest

from diagnostics import auroc, scorers, strata
from diagnostics.load import DiagnosticsError, load
from figures import ladder as ladder_fig
from rescoring.ladder import STORED, ladder, main, model_slug
from tests.figures.test_figures import assert_png


@pytest.fixture(scope="module")
def built(frozen_run, qwen_scorer, tmp_path_factory):
    """A ladder of the run's stored scores, its own weights and a scorer with another tokenizer."""
    out = tmp_path_factory.mktemp("ladder")
    own = str(frozen_run / "global_step_2" / "actor")
    models = [STORED, own, str(qwen_scorer[0])]
    result = ladder([frozen_run], models, out, ckpt_steps=[1, 2], swap=True, donors=2, per_category=3, n_boot=40,
                    progress=False)
    return out, models, result


def test_every_rung_is_the_battery_of_its_own_scores(built, frozen_run):
    out, models, result = built
    assert list(result["rungs"]) == models
    assert json.loads((out / "ladder.json").read_text())["rungs"].keys() == result["rungs"].keys()
    for model, rung in result["rungs"].items():
        folder = frozen_run if model == STORED else out / model_slug(model) / frozen_run.name
        assert rung["folders"] == {frozen_run.name: str(folder)}
        data = load([folder / "global_step_1", folder / "global_step_2"], properties=strata.PROPERTIES["evidence_words"])
        pooled = rung["pooled"]
        assert pooled["auroc"] == json.loads(json.dumps(auroc.feedback_auroc(data, n_boot=40, seed=0)))
        assert pooled["strata"]["delta"] == json.loads(json.dumps(
            strata.strata_auroc(data, "evidence_words", n_boot=40, seed=0)["delta"]))
        assert set(pooled["robustness"]) >= {"raw", "standard", "matched"}
        assert ("swap" in pooled) == (model != STORED)
    # the run's own weights reproduce its stored scores, so the two rungs agree
    stored, own = (result["rungs"][m]["pooled"]["auroc"]["signals"] for m in models[:2])
    for signal in ("ablated", "full", "residual"):
        assert own[signal]["auroc"] == pytest.approx(stored[signal]["auroc"], abs=0.02)
    assert result["rungs"][models[2]]["parameters"] > 0


def test_every_two_rungs_are_paired_on_their_shared_steps(built, frozen_run):
    out, models, result = built
    assert [(p["a"], p["b"]) for p in result["paired"]] == [(models[1], models[0]), (models[2], models[0]),
                                                            (models[2], models[1])]
    folder = lambda m: frozen_run if m == STORED else out / model_slug(m) / frozen_run.name  # noqa: E731
    for pair in result["paired"]:
        a, b = ([folder(m) / f"global_step_{s}" for s in (1, 2)] for m in (pair["a"], pair["b"]))
        want = scorers.scorer_contrasts(load(a), load(b), n_boot=40, seed=0)
        assert pair == json.loads(json.dumps({"a": pair["a"], "b": pair["b"], **want}))
        assert pair["only_a"] == pair["only_b"] == 0  # a re-scoring holds every step of the run
    # the run's own weights against its stored scores: the same scores up to the scorer's numerics
    own = result["paired"][0]["contrasts"]
    assert all(abs(own[name]["delta"]) < 0.02 for name in scorers.CONTRASTS)


def test_a_second_ladder_reuses_the_rescorings(built, frozen_run, monkeypatch):
    out, models, _ = built
    import rescoring.ladder as mod

    def refuse(*args, **kwargs):
        raise AssertionError("scored again")

    monkeypatch.setattr(mod, "rescore_run", refuse)
    monkeypatch.setattr(mod, "swap_analysis", refuse)
    again = ladder([frozen_run], models[1:], out, ckpt_steps=[1, 2], swap=True, donors=2, per_category=3, n_boot=40,
                   progress=False)
    assert list(again["rungs"]) == models[1:]
    for model in models[1:]:  # the same numbers from the kept scores
        assert again["rungs"][model]["pooled"]["swap"] == built[2]["rungs"][model]["pooled"]["swap"]


def test_the_figure_draws_the_ladder(built, tmp_path):
    _, models, result = built
    (tmp_path / "ladder.json").write_text(json.dumps(result))  # as written by the fixture's ladder
    paths = ladder_fig.build(tmp_path / "ladder.json")
    assert_png(tmp_path / "ladder.png")
    drawn = json.loads((tmp_path / "ladder_fig.json").read_text())
    assert drawn["labels"][0] == "policy\n(stored)" and len(drawn["labels"]) == len(models)
    first = result["rungs"][STORED]["pooled"]["auroc"]["signals"]["residual"]
    assert drawn["auroc"]["residual"][0] == [first["auroc"], first["ci_low"], first["ci_high"]]
    assert drawn["paper"]["auroc"] == {"ablated": 0.464, "full": 0.654, "residual": 0.707}
    assert str(tmp_path / "ladder.png") in map(str, paths)
    # panel (d): every two rungs paired, as the ladder computed them
    assert len(drawn["pairs"]["labels"]) == len(result["paired"]) == 3
    assert drawn["pairs"]["labels"][0].endswith("\n- policy")
    last = result["paired"][-1]["contrasts"]["delta"]
    assert drawn["pairs"]["delta"][-1] == [last["delta"], last["ci_low"], last["ci_high"]]
    # a ladder written before the rungs were paired draws its three panels
    older = {k: v for k, v in result.items() if k != "paired"}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "ladder.json").write_text(json.dumps(older))
    ladder_fig.build(tmp_path / "old" / "ladder.json")
    assert json.loads((tmp_path / "old" / "ladder_fig.json").read_text())["pairs"]["labels"] == []


def test_the_auroc_panel_shows_every_bar_and_whisker():
    """A Full AUROC of 0.911 with its interval up to 0.948 (the base 1.5B at checkpoint 22) was cut at 0.9."""
    assert ladder_fig.auroc_limits({"full": [(0.6, 0.5, 0.7)]}) == (0.2, 0.9)
    low, high = ladder_fig.auroc_limits({"full": [(0.911, 0.857, 0.948), (None, None, None)],
                                         "residual": [(0.2, 0.1, 0.3)]})
    assert (low, high) == pytest.approx((0.08, 0.968))
    assert ladder_fig.auroc_limits({"full": [(1.0, 0.99, 1.0), (0.0, 0.0, 0.01)]}) == (0.0, 1.0)


def test_bad_input_is_refused(frozen_run, tmp_path, capsys):
    with pytest.raises(DiagnosticsError, match="named twice"):
        ladder([frozen_run], ["stored", "stored"], tmp_path, ckpt_steps=None, progress=False)
    assert main(["--run", str(tmp_path / "nope"), "--model", "stored", "--out", str(tmp_path / "o")]) == 2
    assert "nope is not a folder" in capsys.readouterr().err
