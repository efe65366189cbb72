"""``diagnostics.compare``: the paired success difference of two evaluations on the same tasks, against a brute-force
resampling, and the command's output and refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from diagnostics.compare import compare, main
from diagnostics.runs import paired_task_difference, task_bootstrap


def evaluation(rng, tasks, types, p, repeats=2, order=None):
    order = list(range(len(tasks))) if order is None else order
    return {"repeats": repeats, "episodes": [{"task": tasks[i], "task_type": types[i],
                                              "won": [bool(rng.random() < p[i]) for _ in range(repeats)]}
                                             for i in order]}


@pytest.fixture()
def pair():
    rng = np.random.default_rng(7)
    n = 60
    tasks, types = [f"game_{i}" for i in range(n)], [("pick", "heat", "cool")[i % 3] for i in range(n)]
    difficulty = rng.uniform(0, 1, n)  # tasks differ far more than the two sides do
    a = evaluation(rng, tasks, types, np.clip(difficulty + 0.1, 0, 1), repeats=3)
    b = evaluation(rng, tasks, types, difficulty, repeats=3, order=list(rng.permutation(n)))  # another order
    return a, b


def test_paired_difference_equals_brute_force_resampling(pair):
    a, b = pair
    mean = {side: {e["task"]: np.mean(e["won"]) for e in ev["episodes"]} for side, ev in (("a", a), ("b", b))}
    tasks = sorted(mean["a"])
    d = np.array([mean["a"][t] - mean["b"][t] for t in tasks])
    got = paired_task_difference(a, b, n_boot=2000, level=0.9, rng=3)
    rng = np.random.default_rng(3)
    resampled = d[rng.integers(0, len(d), size=(2000, len(d)))].mean(axis=1)
    assert got.mean == pytest.approx(d.mean())
    assert (got.low, got.high) == pytest.approx((np.quantile(resampled, 0.05), np.quantile(resampled, 0.95)))
    heat = paired_task_difference(a, b, task_type="heat", n_boot=500)
    assert heat.n_tasks == 20


def test_pairing_narrows_the_interval_when_tasks_differ():
    """Tasks either always or never solved, and B loses 5 of A's: which tasks were drawn moves both sides alike."""
    rng = np.random.default_rng(2)
    n = 60
    tasks, types = [f"game_{i}" for i in range(n)], ["pick"] * n
    solved = rng.random(n) < 0.5
    flipped = np.flatnonzero(solved)[:5]
    a = evaluation(rng, tasks, types, solved.astype(float))
    b = evaluation(rng, tasks, types, np.where(np.isin(np.arange(n), flipped), 0.0, solved))
    paired = paired_task_difference(a, b, n_boot=4000)
    separate = [task_bootstrap([np.mean(e["won"]) for e in ev["episodes"]], n_boot=4000) for ev in (a, b)]
    assert paired.high - paired.low < 0.7 * min(s.high - s.low for s in separate)


def test_compare_reports_overall_and_per_type(pair):
    a, b = pair
    out = compare(a, b, n_boot=500)
    assert set(out["per_type"]) == {"pick", "heat", "cool"} and out["overall"]["n_tasks"] == 60
    overall = out["overall"]
    assert overall["difference"] == pytest.approx(overall["a"] - overall["b"])
    assert sum(r["n_tasks"] for r in out["per_type"].values()) == 60


def test_bad_pairs_are_refused(pair, tmp_path, capsys):
    a, b = pair
    fewer = {"episodes": b["episodes"][1:]}
    with pytest.raises(ValueError, match="different tasks"):
        paired_task_difference(a, fewer)
    with pytest.raises(ValueError, match="no per-task 'episodes'"):
        paired_task_difference(a, {"success_rate": 0.5})
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "old.json").write_text(json.dumps({"success_rate": 0.2}))
    (tmp_path / "fewer.json").write_text(json.dumps(fewer))
    assert main([str(tmp_path / "a.json"), str(tmp_path / "old.json")]) == 2
    assert "old.json: no per-task 'episodes'" in capsys.readouterr().err
    assert main([str(tmp_path / "a.json"), str(tmp_path / "fewer.json")]) == 2
    assert "different tasks" in capsys.readouterr().err
    assert main([str(tmp_path / "a.json"), str(tmp_path / "none.json")]) == 2
    assert "none.json: no such evaluation file" in capsys.readouterr().err


def test_command_prints_a_table_and_json(pair, tmp_path, capsys):
    a, b = pair
    for name, ev in (("ocsd", a), ("grpo", b)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "eval.json").write_text(json.dumps(ev))
    assert main([str(tmp_path / "ocsd" / "eval.json"), str(tmp_path / "grpo" / "eval.json"), "--n-boot", "300"]) == 0
    table = capsys.readouterr().out
    assert "ocsd" in table and "grpo" in table and len(table.splitlines()) == 5  # header, overall, 3 types
    assert main([str(tmp_path / "ocsd" / "eval.json"), str(tmp_path / "grpo" / "eval.json"), "--json",
                 "--n-boot", "300"]) == 0
    assert json.loads(capsys.readouterr().out)["overall"]["n_tasks"] == 60


def test_table_names_the_runs_of_checkpoint_evaluations(pair, tmp_path, capsys):
    """Evaluations stored as RUN/global_step_N/eval.json are named by their runs, the folders that differ."""
    paths = []
    for run, ev in zip(("ocsd_seed3", "grpo_seed3"), pair):
        (tmp_path / run / "global_step_10").mkdir(parents=True)
        paths.append(tmp_path / run / "global_step_10" / "eval.json")
        paths[-1].write_text(json.dumps(ev))
    assert main([str(paths[0]), str(paths[1]), "--n-boot", "200"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header[2:4] == ["ocsd_seed3", "grpo_seed3"]
    (tmp_path / "same").mkdir()  # two files of one folder: their names tell them apart
    for name, ev in zip(("eval_ocsd_step30.json", "eval_grpo_step30.json"), pair):
        (tmp_path / "same" / name).write_text(json.dumps(ev))
    assert main([str(tmp_path / "same" / "eval_ocsd_step30.json"), str(tmp_path / "same" / "eval_grpo_step30.json"),
                 "--n-boot", "200"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split()[2:4] == ["eval_ocsd_step30", "eval_grpo_step30"]
    (tmp_path / "warm_start").mkdir()
    (tmp_path / "warm_start" / "eval.json").write_text(paths[1].read_text())
    assert main([str(paths[0]), str(tmp_path / "warm_start" / "eval.json"), "--n-boot", "200"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split()[2:4] == ["ocsd_seed3/global_step_10", "warm_start"]


@pytest.fixture()
def seeds():
    """The two methods at three seeds, on the same 45 tasks (each evaluation in its own task order)."""
    rng = np.random.default_rng(11)
    n = 45
    tasks, types = [f"game_{i}" for i in range(n)], [("pick", "look", "clean")[i % 3] for i in range(n)]
    difficulty = rng.uniform(0, 1, n)
    a = [evaluation(rng, tasks, types, np.clip(difficulty + 0.05 * k, 0, 1), order=list(rng.permutation(n)))
         for k in range(3)]
    b = [evaluation(rng, tasks, types, difficulty, order=list(rng.permutation(n))) for _ in range(3)]
    return a, b


def test_seed_pairs_pool_each_tasks_difference_before_resampling(seeds):
    a, b = seeds
    mean = [{e["task"]: np.mean(e["won"]) for e in ev["episodes"]} for ev in a + b]
    tasks = sorted(mean[0])
    d = np.array([np.mean([mean[k][t] - mean[3 + k][t] for k in range(3)]) for t in tasks])
    got = paired_task_difference(a, b, n_boot=3000, level=0.9, rng=5)
    resampled = d[np.random.default_rng(5).integers(0, len(d), size=(3000, len(d)))].mean(axis=1)
    assert got.mean == pytest.approx(d.mean()) and got.n_tasks == 45
    assert (got.low, got.high) == pytest.approx((np.quantile(resampled, 0.05), np.quantile(resampled, 0.95)))
    one, single = (paired_task_difference(x, y, n_boot=500, rng=1) for x, y in (([a[0]], [b[0]]), (a[0], b[0])))
    assert (one.mean, one.low, one.high) == (single.mean, single.low, single.high)


def test_compare_of_seed_pairs_gives_the_seeds_mean_success(seeds):
    a, b = seeds
    out = compare(a, b, n_boot=300)
    assert out["n_pairs"] == 3 and set(out["per_type"]) == {"pick", "look", "clean"}
    for side, evals in (("a", a), ("b", b)):
        rates = [np.mean([np.mean(e["won"]) for e in ev["episodes"]]) for ev in evals]
        assert out["overall"][side] == pytest.approx(np.mean(rates))
    assert out["overall"]["difference"] == pytest.approx(out["overall"]["a"] - out["overall"]["b"])


def test_seed_pairs_that_do_not_match_are_refused(seeds, tmp_path, capsys):
    a, b = seeds
    with pytest.raises(ValueError, match="as many evaluations on each side, got 3 and 2"):
        paired_task_difference(a, b[:2])
    fewer = {"episodes": b[1]["episodes"][1:]}
    with pytest.raises(ValueError, match=r"different tasks \(pair 2\)"):
        paired_task_difference(a[:2], [b[0], fewer])
    paths = []
    for name, ev in (("a1", a[0]), ("b1", b[0]), ("a2", a[1]), ("b2", b[1])):
        paths.append(str(tmp_path / f"{name}.json"))
        (tmp_path / f"{name}.json").write_text(json.dumps(ev))
    assert main(paths[:3]) == 2
    assert "evaluations come in pairs" in capsys.readouterr().err
    assert main(paths + ["--n-boot", "200"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[-1] == "means over 2 paired seeds; the columns name the first pair" and len(table) == 6


def test_inputs_that_are_not_paired_evaluations_are_refused(seeds, tmp_path, capsys):
    """A file named twice, identical files (a pair repeated counts as another seed) and evaluations of different
    protocols used to be reported as paired results."""
    a, b = seeds
    paths = {}
    for name, ev in (("a1", a[0]), ("b1", b[0]), ("a2", a[1]), ("b2", b[1])):
        paths[name] = str(tmp_path / f"{name}.json")
        (tmp_path / f"{name}.json").write_text(json.dumps({**ev, "split": "valid_seen", "max_steps": 50}))
    (tmp_path / "copy.json").write_bytes((tmp_path / "a1.json").read_bytes())
    cases = {
        "named twice": [paths["a1"], paths["a1"]],
        "identical files": [paths["a1"], str(tmp_path / "copy.json")],
        "pair repeated": [paths["a1"], paths["b1"], paths["a1"], paths["b1"]],
    }
    for why, argv in cases.items():
        assert main(argv + ["--n-boot", "50"]) == 2, why
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and ("named twice" in err or "identical" in err)
    (tmp_path / "b2.json").write_text(json.dumps({**b[1], "split": "valid_seen", "max_steps": 30}))
    assert main(list(paths.values()) + ["--n-boot", "50"]) == 2
    err = capsys.readouterr().err
    assert "differ in 'max_steps'" in err and "b2.json: 30" in err
    (tmp_path / "b2.json").write_text(json.dumps({**b[1], "split": "valid_unseen", "max_steps": 50}))
    assert main(list(paths.values()) + ["--n-boot", "50"]) == 2
    assert "differ in 'split'" in capsys.readouterr().err


def test_greedy_evaluations_pair_whatever_temperature_they_recorded(seeds, tmp_path, capsys):
    """Greedy evaluations record no temperature now (null) and recorded the unused 0.4 before: they still pair, while
    sampled evaluations at two temperatures do not."""
    a, b = seeds
    old = {**a[0], "greedy": True, "temperature": 0.4, "top_p": 1.0}
    new = {**b[0], "greedy": True, "temperature": None, "top_p": None}
    for name, ev in (("old", old), ("new", new)):
        (tmp_path / f"{name}.json").write_text(json.dumps(ev))
    assert main([str(tmp_path / "old.json"), str(tmp_path / "new.json"), "--n-boot", "50"]) == 0
    capsys.readouterr()
    (tmp_path / "new.json").write_text(json.dumps({**new, "greedy": False, "temperature": 0.7, "top_p": 1.0}))
    assert main([str(tmp_path / "old.json"), str(tmp_path / "new.json"), "--n-boot", "50"]) == 2
    assert "differ in 'greedy'" in capsys.readouterr().err
