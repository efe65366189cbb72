"""ALFWorld on the real engine: real games from the release, generated games, batch env."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("alfworld", reason="alfworld==0.4.2 is not installed (pip install -e .[envs])")
pytest.importorskip("fast_downward", reason="textworld[pddl]==1.7.0 is not installed")

from training.envs.alfworld import (AlfworldBatchEnv, AlfworldDataError, AlfworldGame,  # noqa: E402
                                    InvalidPenalty, expert_walkthrough, generate_game, load_games,
                                    play, scan_games)
from training.envs.alfworld.game import user_data_folder  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TYPES = ("pick", "look", "clean", "heat", "cool", "pick2")


def _real_root() -> Path:
    for cand in (user_data_folder(), REPO.parent / "shared" / "alfworld"):
        if cand and list(Path(cand).glob("**/json_2.1.1")):
            return Path(cand)
    pytest.skip("real ALFWorld games not found: set ALFWORLD_DATA or provide ../shared/alfworld")


@pytest.fixture(scope="module")
def real_root():
    return _real_root()


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("alfgen")
    specs = [generate_game(out, seed=0, index=i, task_type=t) for i, t in enumerate(TYPES)]
    return out, specs


# ----------------------------------------------------------------------------- real games

def test_real_valid_seen_scan(real_root):
    scan = scan_games(real_root, split="valid_seen")
    assert len(scan.specs) == 140 and len(scan.unsolvable) == 47
    assert {s.task_type for s in scan.specs} == set(TYPES)
    assert all(s.task and s.split == "valid_seen" for s in scan.specs)


def test_real_game_walkthrough_wins_and_labels(real_root):
    spec = [s for s in load_games(real_root, split="valid_seen") if s.task_type == "look"][0]
    plan = expert_walkthrough(spec)
    game = AlfworldGame(spec)
    obs = game.reset()
    assert "Your task is to: " + spec.task in obs.text
    assert plan[0] in obs.admissible and "look" in obs.admissible
    r = game.step("jump over the moon")
    assert r.obs == "Nothing happens." and not r.action_admissible
    assert (r.feedback_label, r.progress_label, r.operator) == ("invalid", "invalid", "other")
    r = game.step("look")
    assert (r.feedback_label, r.progress_label, r.operator) == ("ambiguous", "no_progress", "look")
    results = [game.step(a) for a in plan]
    assert [x.feedback_label for x in results] == ["valid"] * len(plan)
    assert [x.progress_label for x in results] == ["progress"] * len(plan)
    assert results[-1].won and results[-1].done and results[-1].reward == 1.0
    assert all(x.reward == 0.0 and not x.done for x in results[:-1])
    late = game.step("look")
    assert not late.active and late.done
    game.close()


@pytest.mark.slow
def test_every_solvable_real_game_wins(real_root):
    """All 140 solvable valid_seen games win by their planner walkthrough."""
    specs = load_games(real_root, split="valid_seen")
    lost = [s.name for s in specs if not play(s)[1][-1].won]
    assert not lost


# ------------------------------------------------------------------------- generated games

def test_generated_each_type_wins_through_loader(generated):
    out, specs = generated
    loaded = load_games(out, split="train")
    assert sorted(s.task_type for s in loaded) == sorted(TYPES)
    for spec in loaded:
        first, results = play(spec)
        assert results and results[-1].won, spec.name
        assert "put" in " ".join(r.action for r in results) or spec.task_type == "look"
        assert "help" not in first.admissible


def test_generator_deterministic_and_splits_disjoint(tmp_path, generated):
    _, specs = generated
    again = generate_game(tmp_path, seed=0, index=0, task_type="pick")
    assert Path(again.path).read_bytes() == Path(specs[0].path).read_bytes()
    other = generate_game(tmp_path, seed=0, index=0, task_type="pick", split="valid")
    a, b = (json.loads(Path(p).read_text())["pddl_problem"] for p in (again.path, other.path))
    assert a.split("(:init")[1] != b.split("(:init")[1]


def test_generated_games_same_order_generated_and_loaded(tmp_path):
    from training.envs.alfworld.tasks import generated_games

    fresh = generated_games(tmp_path, 3, "train", seed=0, progress=False)
    loaded = generated_games(tmp_path, 3, "train", seed=0, progress=False)
    assert [g.path for g in loaded] == [g.path for g in fresh]
    assert [Path(g.path).parent.name for g in fresh] == [f"trial_G0_{i:05d}" for i in range(3)]


def test_flat_folder_and_goal_task_type(tmp_path, generated):
    _, specs = generated
    for s in specs:
        (tmp_path / f"{s.task_type}.tw-pddl").write_bytes(Path(s.path).read_bytes())
    flat = load_games(tmp_path)
    assert {s.path.rsplit("/", 1)[1][:-8]: s.task_type for s in flat} == {t: t for t in TYPES}


# ------------------------------------------------------------------------------ bad input

def test_missing_folder():
    with pytest.raises(AlfworldDataError, match="does not exist"):
        load_games("/no/such/alfworld/folder")


def test_malformed_json(tmp_path):
    (tmp_path / "bad.tw-pddl").write_text("{not json")
    with pytest.raises(AlfworldDataError, match="bad.tw-pddl.*not valid JSON"):
        load_games(tmp_path)
    (tmp_path / "bad.tw-pddl").write_text(json.dumps({"pddl_domain": "x"}))
    with pytest.raises(AlfworldDataError, match="lacks"):
        load_games(tmp_path)


def test_unsolvable_problem(tmp_path, generated):
    _, specs = generated
    data = json.loads(Path(specs[0].path).read_text())
    data.pop("walkthrough")
    goal_type = data["generator"]["parent_target"]
    data["pddl_problem"] = data["pddl_problem"].replace(f"{goal_type}Type)\n", "NoSuchThingType)\n")
    path = tmp_path / "unsolvable.tw-pddl"
    path.write_text(json.dumps(data))
    with pytest.raises(AlfworldDataError, match="unsolvable.tw-pddl"):
        expert_walkthrough(str(path))
    data["solvable"] = False
    path.write_text(json.dumps(data))
    scan = scan_games(tmp_path)
    assert scan.specs == [] and scan.unsolvable == [str(path)]


def test_penalty_config():
    assert InvalidPenalty()(1.0, 3) == pytest.approx(0.7)
    with pytest.raises(ValueError):
        InvalidPenalty(-1.0)


# ------------------------------------------------------------------------------- batch env

@pytest.mark.parametrize("workers", [0, 2])
def test_batch_env(generated, workers):
    _, specs = generated
    chosen = [specs[0], specs[0], specs[1]]
    plans = [expert_walkthrough(s) for s in chosen]
    with AlfworldBatchEnv(chosen, max_steps=6, num_workers=workers, seed=3) as env:
        obs = env.reset()
        assert [o.task_type for o in obs] == ["pick", "pick", "look"] and env.seeds == [3, 4, 5]
        done = [False] * 3
        for k in range(6):
            acts = [p[k] if k < len(p) else "look" for p in plans]
            acts[1] = "jump"
            res = env.step(acts)
            for i, r in enumerate(res):
                assert r.active == (not done[i])
                done[i] = r.done
        assert res[0].won is True and res[1].won is False and res[2].won is True
        assert env.step(["look"] * 3)[1].active is False
        with pytest.raises(ValueError):
            env.step(["look"])


def _cli_error(argv, capsys) -> str:
    """The stderr of ``python -m training.envs.alfworld`` refusing ``argv`` with exit status 2."""
    from training.envs.alfworld.__main__ import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


def test_command_line_refuses_bad_input_before_work(tmp_path, capsys):
    afile = tmp_path / "taken"
    afile.write_text("keep me")
    (tmp_path / "binary.tw-pddl").write_bytes(bytes(range(128, 256)))
    (tmp_path / "games").mkdir()
    for argv, message in (
            (["generate", "--out", str(afile), "--n", "1"], f"argument --out: {afile} is a file, not a folder"),
            (["generate", "--out", str(afile / "sub"), "--n", "1"], f"{afile} is a file, not a folder"),
            (["generate", "--out", str(tmp_path / "g"), "--n", "0"], "--n must be >= 1"),
            (["generate", "--out", str(tmp_path / "g"), "--task-types", "pick,bogus"],
             "unknown task type(s) ['bogus']"),
            (["play", str(tmp_path / "games")], "is a folder; give a .tw-pddl game file"),
            (["play", str(tmp_path / "binary.tw-pddl")], "binary.tw-pddl cannot be read as text (UnicodeDecodeError)"),
            (["play", str(tmp_path / "nope.tw-pddl"), "--max-steps", "0"], "--max-steps must be >= 1")):
        err = _cli_error(argv, capsys)
        assert message in err and "Traceback" not in err, (argv, err)
    assert afile.read_text() == "keep me" and not (tmp_path / "g").exists()


@pytest.mark.parametrize("workers", [0, 2])
def test_batch_env_reload_plays_like_a_new_env(generated, workers):
    """Reloading new games into the same workers gives the episodes a fresh environment gives, in any
    number of environments (fewer than the workers included), without new processes."""
    _, specs = generated

    def episode(env, chosen):
        obs = env.reset()
        plans = [expert_walkthrough(s) for s in chosen]
        trace = [[(o.text, tuple(o.admissible)) for o in obs]]
        for k in range(4):
            res = env.step([p[k] if k < len(p) else "jump" for p in plans])
            trace.append([(r.obs, tuple(r.admissible), r.won, r.feedback_label) for r in res])
        return trace

    with AlfworldBatchEnv([specs[0], specs[1], specs[2]], max_steps=4, num_workers=workers, seed=3) as env:
        episode(env, [specs[0], specs[1], specs[2]])
        pids = [g.proc.pid for g in env._groups] if workers else []
        for chosen in ([specs[3]], [specs[4], specs[5], specs[0], specs[1]]):
            env.reload(chosen, seed=7)
            assert len(env) == len(chosen) and env.seeds == []
            got = episode(env, chosen)
            assert env.seeds == [7 + i for i in range(len(chosen))]
            with AlfworldBatchEnv(chosen, max_steps=4, num_workers=0, seed=7) as fresh:
                assert got == episode(fresh, chosen)
        assert ([g.proc.pid for g in env._groups] if workers else []) == pids
    assert env.closed
    with pytest.raises(RuntimeError, match="closed"):
        env.reload([specs[0]])


def test_batch_env_reload_in_the_background(generated):
    """``reload(wait=False)`` returns before the workers are done; a reload of the same games only waits,
    one of other games replaces them, and stepping or resetting first waits as well."""
    _, specs = generated
    with AlfworldBatchEnv([specs[0]], max_steps=3, num_workers=2, seed=0) as env:
        env.reload([specs[1], specs[2], specs[3]], seed=5, wait=False)
        assert env._pending is not None
        env.reload([specs[1], specs[2], specs[3]], seed=5)  # the same games: waits for them
        assert env._pending is None
        first = env.reset()
        assert [o.task_type for o in first] == ["look", "clean", "heat"] and env.seeds == [5, 6, 7]
        env.reload([specs[4]], seed=1, wait=False)
        env.reload([specs[5], specs[0]], seed=2)  # other games: the pending load is finished, then replaced
        assert [o.task_type for o in env.reset()] == ["pick2", "pick"]
        env.reload([specs[1]], wait=False)
        assert env.step(["look"])[0].active  # stepping waits for the load
        with AlfworldBatchEnv([specs[1], specs[2], specs[3]], max_steps=3, num_workers=0) as fresh:
            assert [(o.text, o.admissible) for o in fresh.reset()] == [(o.text, o.admissible) for o in first]


def test_fast_text_generation_changes_nothing(generated):
    """Observations and admissible commands are the same with TextWorld's own template parsing, context
    copies and query parsing as with the fast ones (all, and each part left out alone), over whole episodes of
    every task type (wins, invalid and no-progress steps, a random admissible action at each step before the
    expert's plan)."""
    import random

    from training.envs.alfworld import engine as alfworld_engine

    _, specs = generated

    def trace(spec, seed):
        rng = random.Random(seed)
        game = AlfworldGame(spec, max_steps=40)
        obs = game.reset()
        out, admissible = [(obs.text, tuple(obs.admissible))], obs.admissible
        for k in range(6):
            res = game.step(["look", "inventory", "jump over the moon"][k] if k < 3 else rng.choice(admissible))
            out.append((res.obs, tuple(res.admissible), res.won, res.feedback_label))
            admissible = res.admissible
        for action in expert_walkthrough(spec):
            res = game.step(action)
            out.append((res.obs, tuple(res.admissible), res.won, res.feedback_label))
            if res.done:
                break
        game.close()
        return out

    alfworld_engine.fast_text_generation()
    fast = [trace(s, i) for i, s in enumerate(specs)]
    with alfworld_engine.textworld_own_text_generation():
        assert [trace(s, i) for i, s in enumerate(specs)] == fast
    for part in alfworld_engine.FAST_PARTS:
        others = tuple(p for p in alfworld_engine.FAST_PARTS if p != part)
        with alfworld_engine.textworld_own_text_generation(keep=others):
            assert [trace(s, i) for i, s in enumerate(specs[:2])] == fast[:2], part
    assert [trace(s, i) for i, s in enumerate(specs[:1])] == fast[:1]  # the fast parts are back


def test_textworld_own_text_generation_restores_and_refuses_unknown_parts():
    """The block puts TextWorld's own functions in place and the fast ones back afterwards; an unknown part
    is refused by name."""
    import textworld.envs.pddl.textgen as textgen
    from textworld.logic import Rule

    from training.envs.alfworld import engine as alfworld_engine

    alfworld_engine.fast_text_generation()
    fast = textgen._parse_and_convert, textgen.copy_context, Rule.__dict__["parse_conjunctive_query"]
    with alfworld_engine.textworld_own_text_generation(keep=("contexts",)):
        assert textgen._parse_and_convert is alfworld_engine._ORIGINALS["templates"]
        assert textgen.copy_context is fast[1]
        assert Rule.__dict__["parse_conjunctive_query"] is alfworld_engine._ORIGINALS["queries"]
    assert (textgen._parse_and_convert, textgen.copy_context, Rule.__dict__["parse_conjunctive_query"]) == fast
    with pytest.raises(ValueError, match="queriez"):
        with alfworld_engine.textworld_own_text_generation(keep=("queriez",)):
            pass


def test_cached_query_is_the_parse_of_its_string():
    """A cached conjunctive query equals TextWorld's own parse of the same string, is shared between calls,
    and a subclass of ``Rule`` is parsed by TextWorld's own function, past the cache."""
    from textworld.logic import Rule

    from training.envs.alfworld import engine as alfworld_engine

    alfworld_engine.fast_text_generation()
    expr = "receptacleatlocation(r:receptacle, lend:location) & atlocation(a:agent, lend:location)"
    with alfworld_engine.textworld_own_text_generation():
        own = Rule.parse_conjunctive_query(expr)
    cached = Rule.parse_conjunctive_query(expr)
    assert cached is Rule.parse_conjunctive_query(expr)
    assert (cached.name, cached.preconditions, cached.postconditions) == (own.name, own.preconditions,
                                                                          own.postconditions)

    class Sub(Rule):
        pass

    sub = Sub.parse_conjunctive_query(expr)
    assert sub is not cached and sub.preconditions == own.preconditions


@pytest.mark.parametrize("workers", [0, 2])
def test_batch_env_submit_collect_plays_like_step(generated, workers):
    """Environments stepped one at a time (``submit``/``collect``, in any order and at different paces) give
    each game the results ``step`` gives; whole-batch calls are refused while actions are out."""
    _, specs = generated
    chosen = [specs[0], specs[1], specs[2], specs[0]]
    plans = [expert_walkthrough(s) for s in chosen]
    plans[3] = ["jump"] * 6
    with AlfworldBatchEnv(chosen, max_steps=5, num_workers=0, seed=3) as ref:
        ref.reset()
        want = [[] for _ in chosen]
        for k in range(5):
            for i, r in enumerate(ref.step([p[k] if k < len(p) else "look" for p in plans])):
                if r.active:
                    want[i].append((r.obs, tuple(r.admissible), r.won, r.done, r.feedback_label))
    with AlfworldBatchEnv(chosen, max_steps=5, num_workers=workers, seed=3) as env:
        env.reset()
        got = [[] for _ in chosen]
        out, held = set(), []

        def send(i):
            k = len(got[i])
            env.submit(i, plans[i][k] if k < len(plans[i]) else "look")
            out.add(i)

        for i in (3, 0, 2, 1):  # submitted out of order
            send(i)
        with pytest.raises(RuntimeError, match="not collected yet"):
            env.step(["look"] * len(chosen))
        while out:
            arrived = env.collect()
            assert arrived
            for i, r in arrived:
                out.discard(i)
                got[i].append((r.obs, tuple(r.admissible), r.won, r.done, r.feedback_label))
                if not r.done:
                    held.append(i)
            for i in list(held):  # game 2 waits until game 1 is two steps in, or nothing else is out
                if i != 2 or len(got[1]) >= 2 or not out:
                    held.remove(i)
                    send(i)
        assert env.in_flight == 0 and env.collect(block=False) == []
        assert got == want
        with pytest.raises(IndexError):
            env.submit(len(chosen), "look")
        env.reset()  # whole-batch calls work again once everything is collected


def _generate_three(out: str) -> list[str]:
    from training.envs.alfworld.tasks import generated_games

    return [g.path for g in generated_games(Path(out), 3, "train", seed=5, progress=False)]


def test_runs_of_one_seed_generate_the_same_games_side_by_side(tmp_path):
    # two runs of one seed, started together, write the same games into one folder at the same time
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(2) as pool:
        first, second = pool.map(_generate_three, [str(tmp_path)] * 2)
    assert first == second
    assert not list(tmp_path.rglob("*.tmp"))
    for path in first:
        assert json.loads(Path(path).read_text())["solvable"]


def test_list_refuses_a_split_the_data_does_not_have(alfworld_games, capsys):
    from training.envs.alfworld.__main__ import main

    assert main(["list", "--data", str(alfworld_games), "--split", "train"]) == 0
    assert "2 solvable games" in capsys.readouterr().err
    for split in ("banana", "valid_seen"):  # generated games have train and valid, not the release's valid_seen
        assert main(["list", "--data", str(alfworld_games), "--split", split]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --split '{split}'") and "'train'" in err and "'valid'" in err


def test_generated_basins_print_as_the_release_prints_them(tmp_path):
    """Bathroom plans 418, 425 and 429 place no sink basin, so the generator adds one; its id was ``SinkBasin|...``,
    which ALFWorld printed as ``sinkbasinbasin 1`` where the release's games print ``sinkbasin 1``."""
    from training.envs.alfworld.gen import synthetic_id

    assert synthetic_id("SinkBasin", -1.0, 2.5) == "Sink|-01.00|+00.90|+02.50|SinkBasin"
    assert synthetic_id("BathtubBasin", 0.0, 0.0).startswith("Bathtub|") and synthetic_id("Desk", 0, 0)[:5] == "Desk|"
    spec = generate_game(tmp_path, seed=1000, index=242)  # a clean task in plan 418 (it printed sinkbasinbasin 1)
    plan = json.loads(Path(spec.path).read_text())["walkthrough"]
    assert "-418/" in spec.path and "go to sinkbasin 1" in plan
    assert not any("basinbasin" in step for step in plan) and play(spec.path, plan)[1][-1].won
