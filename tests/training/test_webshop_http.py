"""The HTTP adapter against the built-in WebShop server on loopback (WebShop's routes), and real goals."""

from __future__ import annotations

import json
import types
import urllib.request
from pathlib import Path

import pytest

from training.envs.webshop.env import LocalSession, WebshopEpisode
from training.envs.webshop.http import HttpSession, WebshopServerError, parse_page
from training.envs.webshop.real import GOALS_FILE, category_of, load_real_goals
from training.envs.webshop.runtime import demonstration, evaluation_tasks
from training.envs.webshop.server import WebshopServer
from training.envs.webshop.tasks import TEST_GOALS, WebshopSource
from tests.training.test_webshop_env import SHOP, cfg
from tests.training.test_webshop_reward import GOAL

REAL = Path(__file__).resolve().parents[3] / "shared" / "webshop"


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return WebshopSource.from_config(cfg(tmp_path_factory.mktemp("ws"), n_val_games=4), train=False)


@pytest.fixture(scope="module")
def server(generated):
    with WebshopServer(generated.valid[0].shop, [t.goal for t in generated.valid]) as srv:
        yield srv


def _pair(task, url, session):
    local = WebshopEpisode(LocalSession(task.shop, task.goal), task_type=task.task_type, game="g", split="s",
                           max_steps=15)
    remote = WebshopEpisode(HttpSession(url, session), task_type="", game="g", split="s", max_steps=15)
    return local, remote


def test_http_episode_equals_the_built_in_site(generated, server):
    for i, task in enumerate(generated.valid):
        local, remote = _pair(task, server.url, f"fixed_{i}")
        assert local.reset() == remote.reset()  # the category is read from the instruction over HTTP
        demo = [a for a, _ in demonstration(task)]
        plan = (demo[:1] + ["click[next >]", "click[< prev]", "click[nothing]", "search[x]"] + demo[1:-1]
                + ["click[description]", "click[reviews]", "click[< prev]"] + demo[-1:])
        for action in plan:
            a, b = local.step(action), remote.step(action)
            assert (a.obs, a.admissible, a.progress_label, a.feedback_label, a.score, a.won, a.done) == \
                   (b.obs, b.admissible, b.progress_label, b.feedback_label, b.score, b.won, b.done), action
        assert a.done and a.won and a.score == 1.0


def test_routes_and_page_structure(generated, server):
    with urllib.request.urlopen(f"{server.url}/fixed_1") as reply:
        page = parse_page(reply.read().decode())
    assert page.texts == ["WebShop", "Instruction:", generated.valid[1].goal.instruction, "Search"]
    assert list(page.targets) == ["search"] and page.search_form == "/fixed_1"
    # a posted search redirects to the results route, keywords as a list literal
    session = HttpSession(server.url, "fixed_1")
    session.start()
    session.go("search", "red shoes")
    assert "/search_results/fixed_1/" in session.url and session.url.endswith("/1")
    assert "['red', 'shoes']" in session._show()[2]


def test_server_errors_name_the_url():
    with WebshopServer(SHOP, [GOAL]) as srv:
        url = srv.url
    with pytest.raises(WebshopServerError, match=f"webshop_url: cannot fetch {url}/fixed_0"):
        HttpSession(url, "fixed_0", timeout=2).start()


def test_server_tasks_follow_sdar_splits(tmp_path):
    """SDAR's split of a server's goal list: validation goals 0-499, training every goal from 500 on (whatever
    n_train_games says: it counts generated goals), the number of goals read from the server."""
    pool = WebshopSource.from_config(cfg(tmp_path, n_train_games=7, n_val_games=TEST_GOALS))
    goals = [t.goal for t in pool.valid] + [t.goal for t in pool.train]
    with WebshopServer(pool.valid[0].shop, goals) as srv:
        source = WebshopSource.from_config(cfg(tmp_path, webshop_url=srv.url + "/", webshop_goals="synthetic",
                                               data=None, n_train_games=2, n_val_games=3))
        assert [t.game for t in source.train] == [f"fixed_{i}" for i in range(500, 507)]
        assert [t.game for t in source.valid] == ["fixed_0", "fixed_1", "fixed_2"]
        assert source.origin == f"server:{srv.url}" and source.real
        assert source.describe() == {"origin": f"server:{srv.url}", "n_train": 7, "n_valid": 3,
                                     "webshop_goals": "synthetic"}
        env = source.make_env(source.train[:1], max_steps=2)
        assert env.reset()[0].task == pool.train[0].goal.instruction  # fixed_500: the first training goal
        few = WebshopSource.from_config(cfg(tmp_path, webshop_url=srv.url, webshop_goals="synthetic", data=None,
                                            n_val_games=600), train=False)
        assert len(few.valid) == TEST_GOALS and not few.train


def test_webshop_url_runs_the_server_tasks(generated, server, tmp_path):
    source = WebshopSource.from_config(cfg(tmp_path, webshop_url=server.url, webshop_goals="synthetic", n_val_games=2),
                                       train=False)
    env = source.make_env(source.valid, max_steps=3)
    obs = env.reset()
    assert [o.task for o in obs] == [t.goal.instruction for t in generated.valid[:2]]
    assert [o.game for o in obs] == ["fixed_0", "fixed_1"]
    results = [env.step(["click[search]", "search[mug]"]) for _ in range(3)][-1]
    assert all(r.done and r.truncated and r.score == 0.0 for r in results)


def test_category_keywords():
    assert category_of("women's pants") == "fashion" and category_of("hdmi cables") == "electronics"
    assert category_of("meat & seafood") == "food" and category_of("face care") == "beauty"
    assert category_of("zzz", "Oak Bookcase") == "furniture"


def test_real_goals_file_errors(tmp_path):
    bad = tmp_path / GOALS_FILE
    bad.write_text(json.dumps([{"task": "x"}]))
    with pytest.raises(ValueError, match=f"{bad} entry 0: missing field 'key'"):
        load_real_goals(tmp_path)


@pytest.fixture()
def real_goals():
    if not (REAL / GOALS_FILE).is_file():
        pytest.skip("real WebShop goals not found in ../shared/webshop")
    return REAL


def test_real_goals_catalogue_and_expert(real_goals, capsys):
    pairs = load_real_goals(real_goals)
    assert len(pairs) == 100 and pairs[0][0] == "fixed_0"
    first = pairs[0][1]
    assert first.instruction.endswith("price lower than 20.00 dollars") and first.price_upper == 20.0
    assert first.asin == "B09KCMTNQP" and first.category == "beauty" and "natural looking" in first.attributes
    assert {g.category for _, g in pairs} == {"beauty", "electronics", "fashion", "food", "furniture"}
    source, origin = evaluation_tasks(types.SimpleNamespace(**{**cfg(real_goals).__dict__, "data": str(real_goals)}),
                                      None, None)
    assert len(source.valid) == 100 and origin == f"real:{real_goals}:test" and not source.train
    assert len(source.valid[0].shop.products) == 1000
    env = source.make_env(source.valid, max_steps=15)
    obs = env.reset()
    assert obs[3].task == pairs[3][1].instruction and obs[3].game == "fixed_3"
    plays = [demonstration(t) for t in source.valid]
    for k in range(max(map(len, plays))):
        results = env.step([p[k][0] if k < len(p) else "" for p in plays])
    won = [r.won for r in results if r.active]
    assert len(won) == sum(len(p) == max(map(len, plays)) for p in plays) and all(won)
    assert "real WebShop goals" in capsys.readouterr().err


def test_a_server_that_stops_answering_stops_the_evaluation_in_one_line(generated, monkeypatch, capsys):
    """The server answers while the tasks load, then goes away before the first episode: one line naming the URL
    and exit status 1 (the evaluation stopped; nothing was written), not a traceback."""
    from training.evaluate import main
    from training.policy import Policy

    srv = WebshopServer(generated.valid[0].shop, [t.goal for t in generated.valid])
    real_init = Policy.__init__

    def init_then_stop_the_server(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        srv.close()

    monkeypatch.setattr(Policy, "__init__", init_then_stop_the_server)
    try:
        rc = main(["--ckpt", "tiny", "--env", "webshop", "--tasks", "2", f"webshop_url={srv.url}",
                   "webshop_goals=synthetic", "max_steps=2", "max_response_length=8", "progress=false"])
    finally:
        srv.close()
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"evaluation stopped: webshop_url: cannot fetch {srv.url}/fixed_0")
