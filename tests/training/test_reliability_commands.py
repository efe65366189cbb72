"""Bad inputs to the training commands: each is refused in one line (exit 2) before any work, or followed as the
run says (task types), and nothing the command must not touch is touched (tiny random model, generated games)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from ocsd.records import RunLock

pytestmark = pytest.mark.usefixtures("no_user_data")

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_permissions = pytest.mark.skipif(AS_ROOT, reason="the superuser writes into read-only folders")


def _one_line_error(err: str, *parts: str) -> None:
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for part in parts:
        assert part in err, err


@pytest.fixture()
def unwritable(tmp_path) -> Path:
    """An existing folder nothing can be written into: a read-only folder (chmod 555), or, for the superuser, whom
    permission bits do not stop, a folder of the kernel's /proc file system (which takes no new files)."""
    if AS_ROOT:
        yield Path("/proc/self")
        return
    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    yield folder
    folder.chmod(stat.S_IRWXU)


@pytest.fixture()
def no_work(monkeypatch):
    """Fail a test whose command loads a policy: its refusal must come before any work."""
    def refuse(*args, **kwargs):
        raise AssertionError("a policy was loaded")

    for where in ("training.policy.Policy", "training.policy.load_policy", "training.trainer.Policy"):
        monkeypatch.setattr(where, refuse)


# ------------------------------------------------------------------------------------------------------
# 2. a sweep run again while a cell of the killed sweep still runs
# ------------------------------------------------------------------------------------------------------


def test_sweep_leaves_the_log_of_a_cell_still_running_alone(tmp_path, alfworld_games, capsys):
    from training.sweep import cell_name, main, read_index

    config = tmp_path / "tiny.yaml"
    config.write_text(f"data: generated\nmodel: tiny\ngames_dir: {alfworld_games}\nprogress: false\n")
    out = tmp_path / "sweep"
    name = cell_name("grpo", 0.5, 0.5, 0)
    log = out / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True)
    log.write_text("$ python -m training.train ...\nstep 1 of the orphaned cell\n")
    with RunLock(out / name, command="python -m training.train (the orphaned cell)"):
        rc = main(["--config", str(config), "--methods", "grpo", "--rho", "0.5", "--beta", "0.5", "--out", str(out)])
        assert log.read_text() == "$ python -m training.train ...\nstep 1 of the orphaned cell\n"
    assert rc == 1
    [cell] = read_index(out)
    assert cell["status"] == "failed" and cell["returncode"] is None
    printed = capsys.readouterr().out
    assert f"[failed] {name}: not started" in printed and "(the orphaned cell)" in printed
    assert not list((out / name).glob("global_step_*"))


# ------------------------------------------------------------------------------------------------------
# 3. output places that cannot be written
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overwrite", ["false", "true"])
def test_train_refuses_a_run_dir_that_cannot_be_written(unwritable, tiny_overrides, overwrite, no_work, capsys):
    capsys.readouterr()  # what the fixtures printed while they were set up
    from training.train import main

    run_dir = unwritable / "run"
    assert main([*tiny_overrides, "model=tiny", f"run_dir={run_dir}", f"overwrite={overwrite}"]) == 2
    _one_line_error(capsys.readouterr().err, f"run_dir='{run_dir}'", f"{unwritable} cannot be written")


@needs_permissions
def test_train_overwrite_refuses_a_read_only_run(tmp_path, tiny_overrides, no_work, capsys):
    capsys.readouterr()  # what the fixtures printed while they were set up
    from training.train import main

    run = tmp_path / "run"
    (run / "global_step_1").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "run": "old", "model": "tiny", "config": {}}))
    run.chmod(0o555)
    try:
        assert main([*tiny_overrides, "model=tiny", f"run_dir={run}", "overwrite=true"]) == 2
    finally:
        run.chmod(0o755)
    _one_line_error(capsys.readouterr().err, f"{run} cannot be written")
    assert (run / "global_step_1").is_dir()


def test_evaluate_refuses_an_out_file_that_cannot_be_written(unwritable, tiny_overrides, no_work, capsys):
    capsys.readouterr()  # what the fixtures printed while they were set up
    from training.evaluate import main

    assert main(["--ckpt", "tiny", "--tasks", "1", "--out-file", str(unwritable / "eval.json"), *tiny_overrides]) == 2
    _one_line_error(capsys.readouterr().err, "--out-file:", f"{unwritable} cannot be written")


@needs_permissions
def test_evaluate_out_next_to_a_read_only_checkpoint(tiny_checkpoint, tiny_overrides, no_work, capsys):
    capsys.readouterr()  # what the fixtures printed while they were set up
    from training.evaluate import main

    tiny_checkpoint.chmod(0o555)
    try:
        assert main(["--ckpt", str(tiny_checkpoint), "--tasks", "1", "--out", *tiny_overrides]) == 2
    finally:
        tiny_checkpoint.chmod(0o755)
    _one_line_error(capsys.readouterr().err, "--out:", "cannot be written")


def test_collect_sft_and_sweep_refuse_outputs_that_cannot_be_written(unwritable, tmp_path, tiny_overrides,
                                                                   alfworld_games, no_work, capsys):
    capsys.readouterr()  # what the fixtures printed while they were set up
    from training.collect import main as collect
    from training.sft import main as sft
    from training.sweep import main as sweep

    assert collect(["--model", "tiny", "--tasks", "1", "--group", "1", "--out", str(unwritable / "c"),
                    *tiny_overrides]) == 2
    _one_line_error(capsys.readouterr().err, "--out:", f"{unwritable} cannot be written")
    assert sft(["model=tiny", "data=generated", f"games_dir={alfworld_games}", f"run_dir={unwritable / 's'}"]) == 2
    _one_line_error(capsys.readouterr().err, "run_dir=", f"{unwritable} cannot be written")
    config = tmp_path / "tiny.yaml"
    config.write_text(f"data: generated\nmodel: tiny\ngames_dir: {alfworld_games}\n")
    assert sweep(["--config", str(config), "--methods", "grpo", "--out", str(unwritable / "sweep")]) == 2
    _one_line_error(capsys.readouterr().err, "--out:", f"{unwritable} cannot be written")


def test_folder_problem_tries_the_folder_for_real(tmp_path, unwritable):
    from ocsd.cli import folder_problem

    assert folder_problem(tmp_path / "new" / "deeper", write=True) is None
    assert folder_problem(unwritable / "new", write=True).startswith(f"{unwritable} cannot be written (")
    assert folder_problem(unwritable / "new") is None  # without write: only its shape
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".write-check")]  # the trial file is gone


# ------------------------------------------------------------------------------------------------------
# 5. a warm start of another base model
# ------------------------------------------------------------------------------------------------------


@pytest.fixture()
def smollm2_labelled_run(tmp_path, make_tiny_model) -> Path:
    """An SFT run folder whose sft.json says it trained SmolLM2 (the weights' size plays no part in the check)."""
    run = tmp_path / "sft_smollm2"
    actor = run / "global_step_4" / "actor"
    actor.mkdir(parents=True)
    make_tiny_model(vocab_size=64, seed=0).save_pretrained(actor, safe_serialization=True)
    (run / "sft.json").write_text(json.dumps({"run": "sft", "config": {"model": "smollm2", "env": "alfworld"}}))
    return run


def test_warm_start_of_another_base_model_is_refused(tiny_checkpoint, smollm2_labelled_run, tiny_overrides,
                                                     no_work, capsys):
    capsys.readouterr()  # what the fixtures printed while they were set up
    from training.config import ConfigError, make_config
    from training.train import main

    for warm in (tiny_checkpoint.parent, tiny_checkpoint, tiny_checkpoint / "actor"):  # run, checkpoint, actor/
        with pytest.raises(ConfigError, match="of model 'tiny', but model='smollm2'"):
            make_config({"model": "smollm2", "warm_start": str(warm)})
    assert make_config({"model": "tiny", "warm_start": str(tiny_checkpoint.parent)}).warm_start  # its own model
    for warm in (smollm2_labelled_run, smollm2_labelled_run / "global_step_4"):
        with pytest.raises(ConfigError, match="of model 'smollm2', but model='tiny'"):
            make_config({"model": "tiny", "warm_start": str(warm)})
    assert main([*tiny_overrides, "model=tiny", f"warm_start={smollm2_labelled_run}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: warm_start:") and err.count("\n") == 1
    assert "'smollm2'" in err and "model='tiny'" in err


# ------------------------------------------------------------------------------------------------------
# 7. collect and evaluate play the run's task types
# ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def look_checkpoint(tmp_path_factory, alfworld_games) -> Path:
    """A tiny checkpoint of a run trained on look tasks only, with its own games folder."""
    from tests.training.conftest import tiny_run_checkpoint

    run = tmp_path_factory.mktemp("look_run")
    (run / "games").mkdir()
    return tiny_run_checkpoint(run, step=3, seed=1, run_info={"run": "lookrun", "method": "grpo"},
                               config={"games_dir": str(run / "games"), "n_train_games": 1, "n_val_games": 1,
                                       "task_types": "look"})


def test_evaluate_and_collect_play_the_runs_task_types(look_checkpoint, tmp_path, capsys):
    import pandas as pd

    from training.collect import main as collect
    from training.evaluate import main as evaluate

    fast = ["progress=false", "generation_batch=8", "max_steps=2"]
    assert evaluate(["--ckpt", str(look_checkpoint), "--json", *fast]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert set(result["per_type"]) == {"look"} and result["task_types"] == "look"
    assert "task types: look (the run's task_types" in captured.err
    assert evaluate(["--ckpt", str(look_checkpoint), "--json", "--task-types", "all", *fast]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert set(result["per_type"]) == {"pick"} and result["task_types"] is None  # game 0 of every type in turn
    assert "task types: all (pick, look, clean, heat, cool, pick2)" in captured.err

    out = tmp_path / "collected"
    assert collect(["--model", str(look_checkpoint), "--tasks", "1", "--group", "1", "--out", str(out), *fast]) == 0
    assert "task types: look (the run's task_types" in capsys.readouterr().err
    steps = pd.read_parquet(out / "global_step_3" / "replay" / "steps.parquet")
    assert set(steps["task_type"]) == {"look"}


# ------------------------------------------------------------------------------------------------------
# 10. settings that would be recorded but not used
# ------------------------------------------------------------------------------------------------------


def test_evaluate_refuses_a_temperature_for_greedy_decoding(tiny_overrides, no_work, capsys):
    capsys.readouterr()  # what the fixtures printed while they were set up
    from training.evaluate import main

    assert main(["--ckpt", "tiny", "--greedy", "--temperature", "0.7", *tiny_overrides]) == 2
    _one_line_error(capsys.readouterr().err, "--temperature", "--greedy")
    assert main(["--ckpt", "tiny", "--top-p", "0.9", "val_do_sample=false", *tiny_overrides]) == 2
    _one_line_error(capsys.readouterr().err, "--top-p", "val_do_sample=false")


def test_greedy_evaluation_records_no_temperature(tiny_overrides, capsys):
    from training.evaluate import main

    assert main(["--ckpt", "tiny", "--tasks", "1", "--greedy", "--json", *tiny_overrides]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (result["greedy"], result["temperature"], result["top_p"]) == (True, None, None)


@pytest.mark.parametrize("settings, named", [
    (["rollout_engine=hf", "env_workers=2"], "rollout_engine=hf and env_workers=2"),
    (["rollout_engine=vllm", "env_workers=0"], "rollout_engine=vllm and env_workers=0"),
])
def test_rollout_pipeline_without_its_engine_and_workers_is_refused(settings, named, tiny_overrides, capsys):
    capsys.readouterr()  # what the fixtures printed while they were set up
    from training.config import ConfigError, make_config
    from training.train import main

    with pytest.raises(ConfigError, match="rollout_pipeline=True: pipelines episodes only with rollout_engine=vllm"):
        make_config({"rollout_pipeline": True, **dict(s.split("=") for s in settings)})
    assert main([*tiny_overrides, "model=tiny", "rollout_pipeline=true", *settings]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: rollout_pipeline=True:") and named in err and err.count("\n") == 1


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory, alfworld_games, smollm2_tokenizer) -> Path:
    from training.sft import main

    run = tmp_path_factory.mktemp("sft_export") / "run"
    assert main([f"run_dir={run}", "model=tiny", "data=generated", f"games_dir={alfworld_games}", "n_train_games=2",
                 "n_val_games=1", "epochs=1", "batch_size=4", "max_updates=1", "max_prompt_length=1024",
                 "history_length=1", "progress=false"]) == 0
    return run


def test_sft_out_is_refused_where_it_would_be_lost_or_harm_the_run(sft_run, tmp_path, alfworld_games, capsys):
    capsys.readouterr()  # what the fixtures printed while they were set up
    from training.sft import main

    before = sorted(p.relative_to(sft_run) for p in sft_run.rglob("*"))
    assert main(["--out", str(tmp_path / "adapter"), f"run_dir={tmp_path / 'new_run'}", "model=tiny", "data=generated",
                 f"games_dir={alfworld_games}", "max_updates=1", "progress=false"]) == 2  # --out without --export
    _one_line_error(capsys.readouterr().err, "--out", "--export")
    assert not (tmp_path / "new_run").exists() and not (tmp_path / "adapter").exists()
    for inside in (sft_run, sft_run / "adapter", sft_run / "global_step_1"):
        assert main(["--export", str(sft_run), "--out", str(inside)]) == 2
        _one_line_error(capsys.readouterr().err, "--out:", "inside the run folder")
    taken = tmp_path / "a_file"
    taken.write_text("keep me\n")
    assert main(["--export", str(sft_run), "--out", str(taken)]) == 2
    _one_line_error(capsys.readouterr().err, "--out:", "is a file, not a folder")
    assert taken.read_text() == "keep me\n"
    assert sorted(p.relative_to(sft_run) for p in sft_run.rglob("*")) == before
    assert main(["--export", str(sft_run), "--out", str(tmp_path / "adapter")]) == 0  # outside the run: written
    assert (tmp_path / "adapter" / "warm_start.json").is_file()


@pytest.mark.parametrize("env", ["webshop", "searchqa"])
def test_sft_in_an_environment_it_cannot_serve_is_one_line(env, tmp_path, capsys):
    capsys.readouterr()  # what the fixtures printed while they were set up
    from training.sft import main

    assert main(["model=tiny", "data=generated", f"env={env}", f"run_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"config error: env='{env}': a warm start can be made only in alfworld") and \
        err.count("\n") == 1
    assert not (tmp_path / "run").exists()
