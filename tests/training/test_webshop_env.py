"""The built-in WebShop: pages, actions, labels, step cap, catalogue determinism, tasks and metrics."""

from __future__ import annotations

import json
import types

import pytest

from ocsd.environments import get_environment
from ocsd.environments.labels import NO_EFFECT_TEMPLATES
from training.envs.webshop.catalog import Goal, Product, generate_catalogue
from training.envs.webshop.env import LocalSession, WebshopBatchEnv, WebshopEpisode
from training.envs.webshop.runtime import RUNTIME, demonstration, metrics
from training.envs.webshop.site import Shop
from training.envs.webshop.tasks import WebshopDataError, WebshopSource
from tests.training.test_webshop_reward import GOAL, MUG

TEAPOT = Product(asin="B0TEA00002", title="Zeta Blue Teapot", category="furniture", query="teapots",
                 product_category="Kitchen › Teapots", price=30.0, attributes=("lead free",),
                 options=(("color", ("blue",)),), description="A teapot.", bullets=("Pours tea",),
                 reviews=(("Nice find", 4, "Pours well."),))
SHOP = Shop([MUG, TEAPOT])


def _episode(max_steps=15, goal=GOAL) -> WebshopEpisode:
    return WebshopEpisode(LocalSession(SHOP, goal), task_type="furniture", game="g", split="valid",
                          max_steps=max_steps)


def cfg(tmp_path, **kw):
    base = dict(webshop_url=None, data="generated", games_dir=str(tmp_path), seed=0, n_train_games=6, n_val_games=4,
                task_types=None)
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_scripted_purchase_scores_by_hand():
    ep = _episode()
    first = ep.reset()
    assert first.task == GOAL.instruction and first.text == "'Search'" and first.task_type == "furniture"
    assert first.admissible == ["search[<your query>]", "click[search]"]
    r = ep.step("search[coffee mug]")
    assert r.obs.startswith("'Back to Search' [SEP] 'Page 1 (Total results: 1)' [SEP] 'Next >' [SEP] 'B0MUG00001'")
    assert r.admissible == ["click[back to search]", "click[next >]", "click[b0mug00001]"]
    assert (r.feedback_label, r.progress_label, r.operator, r.done, r.score) == ("valid", "progress", "search", False,
                                                                                 None)
    r = ep.step("click[B0MUG00001]")  # the action's case does not matter
    assert "click[buy now]" in r.admissible and "click[16 oz]" in r.admissible and "'Rating: N.A.'" in r.obs
    r = ep.step("click[features]")
    assert r.obs.endswith("'Holds coffee'") and r.admissible == ["click[back to search]", "click[< prev]"]
    ep.step("click[< prev]")
    ep.step("click[red]")
    r = ep.step("click[16 oz]")
    assert r.progress_label == "progress" and not r.done
    r = ep.step("click[buy now]")
    # (1 attribute of 2 + 2 options of 2 + price) / 5, the type matching: 0.8; not a success
    assert r.done and r.score == pytest.approx(0.8) and not r.won and r.reward == 0.0 and r.admissible == []
    assert r.obs.endswith("[SEP] 0.8") and r.step == 7 and not r.truncated
    after = ep.step("click[buy now]")
    assert not after.active


def test_success_only_at_score_one():
    goal = Goal(**{**GOAL.__dict__, "attributes": ("dishwasher safe",)})
    ep = _episode(goal=goal)
    ep.reset()
    for action in ("search[mug]", "click[b0mug00001]", "click[16 oz]", "click[red]", "click[buy now]"):
        r = ep.step(action)
    assert r.score == 1.0 and r.won and r.reward == 1.0


@pytest.mark.parametrize("actions, why", [
    (["click[b0mug00001]"], "not a clickable"),
    (["click[search]"], "search button"),
    (["buy it now"], "must be search"),
    (["search[mug]", "search[teapot]"], "no search bar"),
    (["search[]"], "must be search"),
])
def test_unavailable_actions_are_invalid_and_change_nothing(actions, why):
    ep = _episode()
    ep.reset()
    for action in actions[:-1]:
        before = ep.step(action)
    view = ep.view
    r = ep.step(actions[-1])
    assert why in r.obs and r.obs.startswith("Nothing happens")
    assert any(t in r.obs.lower() for t in NO_EFFECT_TEMPLATES)
    assert (r.feedback_label, r.progress_label, r.action_admissible) == ("invalid", "invalid", False)
    assert ep.view == view and not r.done
    if len(actions) > 1:
        assert r.admissible == before.admissible


def test_revisited_page_is_no_progress():
    ep = _episode()
    ep.reset()
    labels = [ep.step(a).progress_label for a in ("search[mug]", "click[b0mug00001]", "click[< prev]",
                                                  "click[b0mug00001]", "click[back to search]", "search[mug]",
                                                  "click[back to search]", "search[teapot]", "click[next >]",
                                                  "click[< prev]")]
    assert labels == ["progress", "progress", "no_progress", "no_progress", "no_progress", "no_progress",
                      "no_progress", "progress", "progress", "no_progress"]
    assert get_environment("webshop").labels.feedback_label(True, "'x'", False) == "ambiguous"


def test_step_cap_ends_without_purchase():
    ep = _episode(max_steps=15)
    ep.reset()
    results = [ep.step("click[nothing]") for _ in range(15)]
    assert [r.done for r in results] == [False] * 14 + [True]
    last = results[-1]
    assert last.truncated and last.score == 0.0 and not last.won and last.step == 15
    assert all(r.score is None for r in results[:-1])
    assert not ep.step("search[mug]").active


def test_batch_env_reset_step_reload():
    tasks = [GOAL, GOAL]
    env = WebshopBatchEnv(tasks, lambda g: (LocalSession(SHOP, g), "furniture", "g", "valid"), max_steps=2, seed=5)
    obs = env.reset()
    assert len(env) == 2 and env.seeds == [5, 6] and obs[0] == obs[1]
    out = env.step(["search[mug]", "nonsense"])
    assert [r.progress_label for r in out] == ["progress", "invalid"]
    out = env.step(["click[b0mug00001]", "nonsense"])
    assert all(r.done and r.truncated for r in out)
    assert not any(r.active for r in env.step(["a", "b"]))
    with pytest.raises(ValueError, match="2 environments"):
        env.step(["a"])
    env.reload([GOAL])
    assert len(env.reset()) == 1
    env.close()
    assert env.closed


def test_catalogue_is_deterministic_and_plain():
    a, b = generate_catalogue(0, 50), generate_catalogue(0, 50)
    assert a == b and a != generate_catalogue(1, 50)
    assert {p.category for p in a} == {"beauty", "electronics", "fashion", "food", "furniture"}
    assert len({p.asin for p in generate_catalogue(0)}) == 1000
    for p in a:  # no product text reads as a rejected action
        text = " ".join((p.title, p.description, *p.bullets, *(t for r in p.reviews for t in (r[0], r[2])))).lower()
        assert not any(t in text for t in NO_EFFECT_TEMPLATES), p


def test_generated_tasks_are_written_once_and_reused(tmp_path, capsys):
    first = WebshopSource.from_config(cfg(tmp_path))
    folder = tmp_path / "webshop" / "seed0"
    written = {f.name: f.read_text() for f in folder.iterdir()}
    assert set(written) == {"catalogue.json", "train.json", "valid.json"}
    again = WebshopSource.from_config(cfg(tmp_path, n_val_games=2))
    assert [t.goal for t in again.valid] == [t.goal for t in first.valid][:2]
    assert {f.name: f.read_text() for f in folder.iterdir()} == written
    other = WebshopSource.from_config(cfg(tmp_path / "fresh"))
    assert [t.goal for t in other.train] == [t.goal for t in first.train]
    assert {t.goal.asin for t in first.train}.isdisjoint({t.goal.asin for t in first.valid})
    assert "generated WebShop catalogue" in capsys.readouterr().err
    assert first.describe() == {"origin": f"generated:{folder}", "n_train": 6, "n_valid": 4}
    assert json.loads((folder / "valid.json").read_text())[0]["instruction"] == first.valid[0].goal.instruction


def test_expert_wins_generated_tasks(tmp_path):
    source = WebshopSource.from_config(cfg(tmp_path, n_val_games=10))
    env = source.make_env(source.valid, max_steps=15)
    env.reset()
    plays = [demonstration(t) for t in source.valid]
    for k in range(max(map(len, plays))):
        results = env.step([p[k][0] if k < len(p) else "" for p in plays])
    assert all(r.won or not r.active for r in results)


def test_no_task_data_names_the_setting(tmp_path):
    with pytest.raises(WebshopDataError, match="data: no WebShop tasks"):
        WebshopSource.from_config(cfg(tmp_path, data=None))
    with pytest.raises(WebshopDataError, match="webshop_url='ftp://x'"):
        WebshopSource.from_config(cfg(tmp_path, webshop_url="ftp://x"))
    with pytest.raises(WebshopDataError, match="no WebShop goals file"):
        WebshopSource.from_config(cfg(tmp_path, data=str(tmp_path)), train=False)
    with pytest.raises(WebshopDataError, match="evaluation set"):
        WebshopSource.from_config(cfg(tmp_path, data=str(tmp_path)))
    assert RUNTIME.data_error is WebshopDataError


def test_metrics_score_per_category():
    def traj(kind, score, won):
        step = types.SimpleNamespace(well_formed=True, feedback_label="valid")
        return types.SimpleNamespace(task_type=kind, score=score, won=won, steps=[step])

    out = metrics([traj("food", 1.0, True), traj("food", 0.5, False), traj("beauty", None, False)])
    assert out["score"] == pytest.approx(0.5) and out["success_rate"] == pytest.approx(1 / 3)
    assert out["per_type"]["food"]["score"] == pytest.approx(0.75) and out["per_type"]["beauty"]["score"] == 0.0
    assert set(get_environment("webshop").evaluation.metrics) <= set(out)


@pytest.mark.parametrize("query", ["body lotion lavender sulfate free", "coffee mug red 16 oz", "wireless mouse"])
def test_search_scores_are_lucene_bm25(query):
    """The shop's BM25 against bm25s's Lucene variant with the same k1, b and tokens: bm25s leaves out the
    (k1 + 1) factor of the numerator, which scales every score alike and changes no ranking."""
    import numpy as np

    bm25s = pytest.importorskip("bm25s")
    from training.envs.webshop.site import BM25_B, BM25_K1, _tokens, product_document

    shop = Shop(generate_catalogue(0)[:300])
    docs = [_tokens(product_document(p)) for p in shop.products]
    reference = bm25s.BM25(method="lucene", k1=BM25_K1, b=BM25_B)
    reference.index(docs, show_progress=False)
    want = reference.get_scores(_tokens(query)) * (BM25_K1 + 1)
    np.testing.assert_allclose(shop.scores([query]), want, rtol=1e-5, atol=1e-6)
    assert (shop.scores([query]) > 0).any()
