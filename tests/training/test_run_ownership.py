"""A run folder has one writer, and nothing a user did not ask to replace is deleted: the trainer's
lock, its decision between a fresh start, a resume and a refusal, and the messages of each."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("alfworld", reason="the ALFWorld engine (envs extra) is not installed")
pytest.importorskip("verl", reason="verl (verl extra) is not installed")

from ocsd.records import LOCK_FILE, RunInUseError, RunLock, read_metrics, validate_path  # noqa: E402
from training.config import ConfigError, make_config  # noqa: E402
from training.envs.alfworld.tasks import GameSource  # noqa: E402
from training.trainer import (RunFolderError, Trainer, changed_settings, check_run_folder,  # noqa: E402
                              load_trainer_state)

pytestmark = pytest.mark.usefixtures("no_user_data")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(alfworld_games) -> dict:
    """The settings of a run of the tiny random model that takes seconds."""
    return dict(model="tiny", data="generated", games_dir=str(alfworld_games), n_train_games=2, n_val_games=2, batch_size=1,
                group_size=2, max_steps=2, max_response_length=8, max_prompt_length=1024, total_steps=1, save_freq=1,
                test_freq=0, progress=False, rho=0.5, kl_coef=0.0, micro_batch_tokens=4096, seed=3)


@pytest.fixture(scope="module")
def games(tiny):
    return GameSource.from_config(make_config(tiny))


@pytest.fixture(scope="module")
def one_step_run(tmp_path_factory, tiny, games) -> Path:
    """A finished one-step training run (copy it before changing it)."""
    run = tmp_path_factory.mktemp("owned") / "run"
    Trainer(make_config({**tiny, "run_dir": str(run)}), games=games).fit()
    return run


def _cfg(tiny: dict, run_dir: Path, **kw):
    return make_config({**tiny, "run_dir": str(run_dir), **kw})


def _train_cli(tiny: dict, run_dir, *extra: str) -> subprocess.CompletedProcess:
    overrides = [f"{k}={v}" for k, v in tiny.items()] + [f"run_dir={run_dir}", *extra]
    return subprocess.run([sys.executable, "-m", "training.train", *overrides], cwd=ROOT, capture_output=True,
                          text=True)


def _fake_run(run_dir: Path, config: dict, *, source: str | None = None, state: bool = True) -> None:
    """A run folder with one complete checkpoint (contents are not read by the folder checks)."""
    replay = run_dir / "global_step_1" / "replay"
    replay.mkdir(parents=True)
    (replay / "meta.json").write_text("{}")
    if state:
        (run_dir / "global_step_1" / "actor").mkdir()
        (run_dir / "global_step_1" / "actor" / "trainer_state.pt").write_bytes(b"")
    info = {"schema_version": 1, "run": "r", "config": config, **({"source": source} if source else {})}
    (run_dir / "run.json").write_text(json.dumps(info))


# ----------------------------------------------------------------------------------------------
# what a folder holds decides: fresh start, resume or refusal
# ----------------------------------------------------------------------------------------------


def test_a_new_or_empty_folder_starts_fresh(tmp_path, tiny):
    assert check_run_folder(_cfg(tiny, tmp_path / "new")) is None
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / LOCK_FILE).write_text("")  # only a lock: still empty
    assert check_run_folder(_cfg(tiny, tmp_path / "empty")) is None


def test_a_folder_with_other_files_is_refused_unless_overwrite(tmp_path, tiny):
    (tmp_path / "global_step_5").mkdir()
    (tmp_path / "global_step_5" / "mine.txt").write_text("a user's file")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(RunFolderError, match=r"is not empty \(global_step_5, metrics.jsonl\) and holds no run "
                                             r"\(no run.json\); use a new or empty run_dir, or overwrite=true"):
        check_run_folder(_cfg(tiny, tmp_path))
    assert check_run_folder(_cfg(tiny, tmp_path, overwrite=True)) is None


def test_another_commands_run_is_refused(tmp_path, tiny):
    _fake_run(tmp_path, {}, source="training.collect", state=False)
    with pytest.raises(RunFolderError, match="holds a run written by training.collect, not a training run; "
                                             "use another run_dir"):
        check_run_folder(_cfg(tiny, tmp_path))
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(RunFolderError, match="not valid JSON"):
        check_run_folder(_cfg(tiny, tmp_path))


def test_changed_settings_are_named_and_nothing_destructive_is_suggested(tmp_path, tiny):
    cfg = _cfg(tiny, tmp_path)
    _fake_run(tmp_path, {**cfg.to_dict(), "method": "grpo", "lr": 1e-5})
    with pytest.raises(RunFolderError) as err:
        check_run_folder(cfg)
    message = str(err.value)
    assert "other settings (lr: 1e-05 -> 1e-06; method: 'grpo' -> 'ocsd')" in message
    assert "use another run_dir to keep it" in message and "resume=false" not in message
    with pytest.raises(RunFolderError, match="resume=false; use another run_dir to keep it, or overwrite=true"):
        check_run_folder(_cfg(tiny, tmp_path, resume=False))
    assert check_run_folder(_cfg(tiny, tmp_path, overwrite=True)) is None
    assert (tmp_path / "global_step_1").is_dir()  # the checks delete nothing


def test_a_resume_where_dtype_auto_chooses_otherwise_is_refused(tmp_path, tiny, monkeypatch):
    import ocsd.replay.models as models

    monkeypatch.setattr(models, "cpu_flags", lambda: frozenset({"avx2"}))
    started = _cfg(tiny, tmp_path, dtype="auto")
    _fake_run(tmp_path, started.to_dict())  # run.json records float32, the choice on an AVX2 CPU
    monkeypatch.setattr(models, "cpu_flags", lambda: frozenset({"avx2", "amx_bf16"}))
    with pytest.raises(RunFolderError, match="other settings \\(dtype: 'float32' -> 'bfloat16'\\)"):
        check_run_folder(_cfg(tiny, tmp_path, dtype="auto"))
    assert check_run_folder(_cfg(tiny, tmp_path, dtype="float32")) is not None  # the recorded dtype resumes


def test_location_and_progress_keys_are_not_settings():
    old = {"run_dir": "a", "games_dir": "g1", "total_steps": 5, "progress": True, "seed": 0, "gone": 1}
    new = {"run_dir": "b", "games_dir": "g2", "total_steps": 9, "progress": False, "seed": 1, "overwrite": False}
    assert changed_settings(old, new) == ["seed: 0 -> 1"]


def test_complete_checkpoints_without_trainer_state_are_not_replaced(tmp_path, tiny):
    cfg = _cfg(tiny, tmp_path)
    _fake_run(tmp_path, cfg.to_dict(), state=False)
    with pytest.raises(RunFolderError, match="without trainer state .* cannot be resumed"):
        check_run_folder(cfg)


def test_a_run_folder_naming_a_file_or_nothing_is_a_config_error(tmp_path, tiny):
    afile = tmp_path / "file"
    afile.write_text("x")
    for key, value, message in (("run_dir", "", "run_dir='': empty"), ("run_dir", afile, "is a file, not a folder"),
                                ("run_dir", afile / "sub", f"{afile} is a file"),
                                ("games_dir", afile, "is a file, not a folder")):
        with pytest.raises(ConfigError, match=message):
            make_config({**tiny, "run_dir": str(tmp_path / "r"), key: str(value)})


# ----------------------------------------------------------------------------------------------
# real runs
# ----------------------------------------------------------------------------------------------


def test_a_moved_run_resumes(tmp_path, tiny, games, one_step_run):
    moved = tmp_path / "moved"
    shutil.copytree(one_step_run, moved)
    trainer = Trainer(_cfg(tiny, moved, total_steps=2), games=games)
    assert trainer.start_step == 2
    trainer.fit()
    assert [r["step"] for r in read_metrics(moved)] == [1, 2] and validate_path(moved) == []
    assert json.loads((moved / "run.json").read_text())["config"]["run_dir"] == str(moved)


def test_a_second_trainer_is_refused_while_the_first_holds_the_folder(tmp_path, tiny, games):
    first = Trainer(_cfg(tiny, tmp_path / "r"), games=games)
    with pytest.raises(RunInUseError, match=rf"{tmp_path / 'r'} is in use by pid \d+"):
        Trainer(_cfg(tiny, tmp_path / "r", method="grpo", seed=7), games=games)
    first.fit()
    assert not (tmp_path / "r" / LOCK_FILE).exists()
    assert json.loads((tmp_path / "r" / "global_step_1" / "replay" / "meta.json").read_text())["method"] == "ocsd"


def test_the_lock_is_released_when_a_run_is_interrupted_or_refused(tmp_path, tiny, games, monkeypatch):
    def interrupted(self, step):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "train_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Trainer(_cfg(tiny, tmp_path / "r"), games=games).fit()
    assert not (tmp_path / "r" / LOCK_FILE).exists()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(RunFolderError):  # refused after the lock was taken
        Trainer(_cfg(tiny, tmp_path / "other"), games=games)
    assert sorted(p.name for p in (tmp_path / "other").iterdir()) == ["notes.txt"]


def test_cli_refuses_a_folder_in_use(tmp_path, tiny):
    run = tmp_path / "r"
    with RunLock(run, command="python -m training.train (the first run)"):
        out = _train_cli(tiny, run, "method=grpo", "seed=7")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: {run} is in use by pid ") and "(the first run)" in line
    assert sorted(p.name for p in run.iterdir()) == []


def test_cli_run_folder_errors_are_one_line_before_any_work(tmp_path, tiny, one_step_run):
    afile = tmp_path / "file"
    afile.write_text("x")
    for extra, message in ((["run_dir="], "run_dir='': empty"), ([f"run_dir={afile}"], "is a file, not a folder"),
                           ([f"games_dir={afile}"], "games_dir=")):
        out = subprocess.run([sys.executable, "-m", "training.train", "model=tiny", *extra], cwd=tmp_path,
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing written, not even checkpoints/

    damaged = tmp_path / "damaged"
    shutil.copytree(one_step_run, damaged)
    state = damaged / "global_step_1" / "actor" / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[:100])
    out = _train_cli(tiny, damaged, "total_steps=2")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(f"error: {state}: cannot be read")
    assert [r["step"] for r in read_metrics(damaged)] == [1]  # nothing changed


def test_load_trainer_state_names_a_damaged_file(tmp_path):
    path = tmp_path / "trainer_state.pt"
    torch.save({"optimizer": {"state": {}, "param_groups": []}, "global_step": 4}, path)
    assert load_trainer_state(path)["global_step"] == 4
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(RunFolderError, match=f"{path}: cannot be read"):
        load_trainer_state(path)
    torch.save({"global_step": 4}, path)
    with pytest.raises(RunFolderError, match="cannot be read"):
        load_trainer_state(path)
