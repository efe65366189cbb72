"""``python -m training.evaluate``: sampled success per task type, repeats and the bootstrap interval
(tiny random model, generated games)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ocsd.environments import get_environment
import numpy as np

from diagnostics.runs import task_bootstrap
from training.envs.runtime import EnvironmentRuntime, success_metrics
from training.evaluate import BOOTSTRAP_SAMPLES, CI_LEVEL, EvalSampling, evaluate, format_table, main
from training.rollout.loop import StepSample, Trajectory

pytestmark = pytest.mark.usefixtures("no_user_data")

REPO = Path(__file__).resolve().parents[2]
KEYS = {"model", "checkpoint", "global_step", "env", "tasks_from", "split", "max_steps", "greedy", "n",
        "successes", "success_rate", "per_type", "mean_steps", "well_formed_rate", "invalid_action_rate", "time_s",
        "do_sample", "temperature", "top_p", "sample_seed", "tasks", "repeats", "ci_low", "ci_high", "ci_level",
        "episodes"}


def _check(result: dict, n_tasks: int, repeats: int = 1) -> None:
    assert KEYS <= set(result)
    assert (result["tasks"], result["repeats"], result["n"]) == (n_tasks, repeats, n_tasks * repeats)
    assert result["greedy"] is not result["do_sample"]
    assert 0.0 <= result["ci_low"] <= result["success_rate"] <= result["ci_high"] <= 1.0
    assert sum(row["n"] for row in result["per_type"].values()) == n_tasks * repeats
    assert sum(row["successes"] for row in result["per_type"].values()) == result["successes"]
    for row in result["per_type"].values():
        assert 0.0 <= row["success_rate"] <= 1.0 and row["success_rate"] == row["successes"] / row["n"]
    episodes = result["episodes"]  # per task: every repeat's outcome
    assert len(episodes) == n_tasks and all(len(e["won"]) == repeats for e in episodes)
    assert sum(sum(e["won"]) for e in episodes) == result["successes"]
    assert len({e["task"] for e in episodes}) == n_tasks


def test_checkpoint_evaluation_json_and_eval_file(tiny_checkpoint, tiny_overrides, capsys):
    rc = main(["--ckpt", str(tiny_checkpoint), "--tasks", "2", "--json", "--out", *tiny_overrides])
    assert rc == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    _check(result, 2)
    assert result["global_step"] == 7 and result["max_steps"] == 2 and result["tasks_from"].startswith("generated:")
    # SDAR's validation sampling (val_kwargs temperature 0.4, do_sample True, top_p 1.0) is the default
    assert (result["do_sample"], result["temperature"], result["top_p"], result["greedy"]) == (True, 0.4, 1.0, False)
    assert json.loads((tiny_checkpoint / "eval.json").read_text()) == result


def test_base_model_table(tmp_path, tiny_overrides, capsys):
    rc = main(["--ckpt", "tiny", "--tasks", "1", "--out-file", str(tmp_path), *tiny_overrides])
    assert rc == 0
    table = capsys.readouterr().out
    assert "overall" in table and "task type" in table
    result = json.loads((tmp_path / "eval.json").read_text())
    _check(result, 1)
    assert result["global_step"] == 0 and result["tasks_from"].startswith("generated:")


def test_real_valid_seen_split_is_found():
    from training.envs.alfworld.game import user_data_folder

    root = user_data_folder() or str(REPO.parent / "shared" / "alfworld")
    if not list(Path(root).glob("**/json_2.1.1")):
        pytest.skip("real ALFWorld games not found: set ALFWORLD_DATA or provide ../shared/alfworld")
    from training.config import make_config

    cfg = make_config({"data": root, "progress": False})
    games, origin = get_environment("alfworld").load_runtime().evaluation_tasks(cfg, "valid_seen", None)
    assert len(games.valid) == 140 and origin.endswith(":valid_seen")
    assert get_environment("alfworld").max_steps == 50


def test_alfworld_runtime_resolves():
    from training.envs.alfworld.engine import AlfworldDataError
    from training.envs.alfworld.tasks import GameSource

    spec = get_environment("alfworld")
    runtime = spec.load_runtime()
    assert isinstance(runtime, EnvironmentRuntime)
    assert runtime.task_source == GameSource.from_config and runtime.data_error is AlfworldDataError
    assert runtime.metrics is success_metrics
    assert "valid_seen" in spec.evaluation.splits and set(spec.evaluation.metrics) <= set(success_metrics([]))


def test_success_metrics_against_counting():
    trajs = []
    for i, (task_type, won) in enumerate([("pick", 1), ("pick", 0), ("heat", 1), ("look", 0), ("pick", 1)]):
        t = Trajectory(uid=str(i), group_uid=str(i), task="t", task_type=task_type, game="g", won=bool(won))
        t.steps = [StepSample(step_idx=k, obs="", admissible=[], history=[], history_shown=0, prompt_ids=[1],
                              response_ids=[1], response_text="", action="", well_formed=k % 2 == 0,
                              feedback_label=("invalid", "valid", "ambiguous")[k % 3])
                   for k in range(i + 1)]
        trajs.append(t)
    m = success_metrics(trajs)
    assert m["success_rate"] == pytest.approx(3 / 5)
    assert m["per_type"]["pick"] == {"n": 3, "successes": 2, "success_rate": pytest.approx(2 / 3)}
    assert m["mean_steps"] == pytest.approx(3.0)
    assert m["well_formed_rate"] == pytest.approx(9 / 15)
    assert m["invalid_action_rate"] == pytest.approx(7 / 15)


@pytest.mark.parametrize("argv, message", [
    (["--ckpt", "/no/such/ckpt"], "--ckpt"),
    (["--ckpt", "tiny", "--split", "train"], "--split"),
    (["--ckpt", "tiny", "--out"], "--out-file"),
    (["--ckpt", "tiny", "--data", "/no/such/data"], "--data"),
    (["--ckpt", "tiny", "lr=-1"], "lr"),
])
def test_flag_errors_exit_2(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_tasks_must_be_positive(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--ckpt", "tiny", "--tasks", "0"])
    assert info.value.code == 2 and "--tasks must be >= 1" in capsys.readouterr().err


def test_cli_missing_split_has_no_traceback(tmp_path):
    (tmp_path / "json_2.1.1").mkdir()
    proc = subprocess.run([sys.executable, "-m", "training.evaluate", "--ckpt", "tiny", "--data", str(tmp_path),
                           "--split", "valid_unseen"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "valid_unseen" in proc.stderr


@pytest.mark.parametrize("env,message", [("minecraft", "env: unknown 'minecraft'; known: alfworld, webshop, searchqa")])
def test_config_env_is_a_registered_environment_with_a_runtime(env, message):
    from training.config import ConfigError, make_config

    with pytest.raises(ConfigError, match=re.escape(message)):
        make_config({"env": env})


@pytest.fixture
def no_evaluation(monkeypatch):
    """Fail a test that reaches the evaluation: its errors must come before any work."""
    import training.evaluate

    def refuse(*args, **kwargs):
        raise AssertionError("the evaluation ran")

    monkeypatch.setattr(training.evaluate, "evaluate", refuse)
    monkeypatch.setattr("training.policy.Policy", refuse)


def test_out_file_that_cannot_be_written_exits_2_before_evaluating(tmp_path, no_evaluation, capsys):
    (tmp_path / "res" / "eval.json").mkdir(parents=True)
    (tmp_path / "afile").write_text("keep me")
    for target, message in ((tmp_path / "res", "eval.json is a folder, not a file"),  # res/eval.json is a folder
                            (tmp_path / "afile" / "x.json", "afile is a file, not a folder")):
        assert main(["--ckpt", "tiny", "--out-file", str(target)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --out-file:") and message in err and err.count("\n") == 1
    assert (tmp_path / "afile").read_text() == "keep me"


def test_out_file_naming_a_folder_writes_into_it(tmp_path, tiny_overrides, capsys):
    folder = tmp_path / "results.json"  # a folder, whatever its name
    folder.mkdir()
    assert main(["--ckpt", "tiny", "--tasks", "1", "--out-file", str(folder), *tiny_overrides]) == 0
    assert json.loads((folder / "eval.json").read_text())["n"] == 1
    assert f"written to {folder / 'eval.json'}" in capsys.readouterr().out


def test_malformed_yaml_exits_2_in_one_line(tmp_path, no_evaluation, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\nb: {\n")
    assert main(["--ckpt", "tiny", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --config:") and str(bad) in err and err.count("\n") == 1
    assert main(["--ckpt", "tiny", "lr=["]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: override 'lr=['") and err.count("\n") == 1
    assert main(["--ckpt", "tiny", "rollout_engine=vllm"]) == 2  # on the CPU
    assert "rollout_engine='vllm': needs device=cuda" in capsys.readouterr().err
    proc = subprocess.run([sys.executable, "-m", "training.evaluate", "--ckpt", "tiny", "--config", str(bad)],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_repeats_report_every_episode_and_an_interval(tiny_overrides, capsys):
    assert main(["--ckpt", "tiny", "--tasks", "2", "--repeats", "3", "--sample-seed", "5", "--temperature", "0.7",
                 "--json", *tiny_overrides]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    _check(result, 2, repeats=3)
    assert (result["temperature"], result["sample_seed"], result["ci_level"]) == (0.7, 5, CI_LEVEL)


def test_greedy_flag_and_table(tiny_overrides, capsys):
    assert main(["--ckpt", "tiny", "--tasks", "1", "--greedy", *tiny_overrides]) == 0
    out = capsys.readouterr()
    assert "greedy" in out.out and "bootstrap interval over 1 tasks" in out.out
    assert "games: generated games (data=generated)" in out.err  # the origin of the games is printed


def test_sampling_settings_and_seeds():
    from training.config import make_config

    cfg = make_config({"max_response_length": 9, "generation_batch": 3})
    sampling = EvalSampling.from_config(cfg)
    assert sampling == EvalSampling(do_sample=True, temperature=0.4, top_p=1.0, seed=0)
    gen = sampling.generation(cfg)
    assert (gen.do_sample, gen.temperature, gen.top_p, gen.max_new_tokens, gen.batch) == (True, 0.4, 1.0, 9, 3)
    assert len({sampling.torch_seed(r) for r in range(5)}) == 5  # each repeat its own stream
    assert sampling.torch_seed(1) == EvalSampling(seed=0).torch_seed(1) != EvalSampling(seed=1).torch_seed(1)
    assert str(EvalSampling(do_sample=False)) == "greedy"
    assert EvalSampling.from_config(make_config({"val_do_sample": False})).describe()["greedy"] is True


def test_evaluate_bootstraps_tasks_over_repeats(monkeypatch):
    """Task i of repeat r is won per a fixed table; the interval is task_bootstrap of that (tasks, repeats) table."""
    won = np.array([[1, 1, 0], [0, 0, 0], [1, 0, 1], [1, 1, 1], [0, 1, 0]], dtype=bool)  # (tasks, repeats)

    def episodes(policy, specs, sampling, *, repeat, step, desc):
        return [Trajectory(uid=f"{i}_{repeat}", group_uid=str(i), task="t", task_type=spec, game=f"g{i}",
                           won=bool(won[i, repeat])) for i, spec in enumerate(specs)]

    monkeypatch.setattr("training.evaluate.evaluation_episodes", episodes)
    games = type("Games", (), {"valid": ["pick", "heat", "pick", "look", "heat"]})()
    spec = get_environment("alfworld")
    sampling = EvalSampling(seed=4)
    out = evaluate(None, games, global_step=0, spec=spec, runtime=spec.load_runtime(), sampling=sampling, repeats=3)
    ref = task_bootstrap(won.astype(float), n_boot=BOOTSTRAP_SAMPLES, level=CI_LEVEL, rng=4)
    assert (out["tasks"], out["repeats"], out["n"], out["successes"]) == (5, 3, 15, int(won.sum()))
    assert (out["ci_low"], out["ci_high"]) == (ref.low, ref.high) and out["success_rate"] == pytest.approx(ref.mean)
    assert out["per_type"]["pick"]["n"] == 6 and out["per_type"]["pick"]["successes"] == 4
    assert out["episodes"] == [{"task": f"g{i}", "task_type": t, "won": won[i].tolist()}
                               for i, t in enumerate(games.valid)]
    for name in ("pick", "heat", "look"):  # each type's interval resamples that type's tasks only
        rows = [i for i, t in enumerate(games.valid) if t == name]
        ref = task_bootstrap(won[rows].astype(float), n_boot=BOOTSTRAP_SAMPLES, level=CI_LEVEL, rng=4)
        assert (out["per_type"][name]["ci_low"], out["per_type"][name]["ci_high"]) == (ref.low, ref.high)
    assert "[" in format_table({**out, "model": "m", "global_step": 0, "env": "alfworld", "tasks_from": "x",
                                "max_steps": 50, **sampling.describe()}).splitlines()[2]


def test_repeats_must_be_positive(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--ckpt", "tiny", "--repeats", "0"])
    assert info.value.code == 2 and "--repeats must be >= 1" in capsys.readouterr().err


def test_evaluation_without_data_stops_naming_data(no_evaluation, capsys):
    assert main(["--ckpt", "tiny"]) == 2  # neither --data nor $ALFWORLD_DATA: generated games are not a fallback
    err = capsys.readouterr().err
    assert err.startswith("error: data: no games named") and "data=generated" in err and err.count("\n") == 1
