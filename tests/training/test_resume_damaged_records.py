"""``python -m training.train`` resuming a run whose ``run.json`` or ``metrics.jsonl`` is not text: one line
naming the file, exit status 2, and the run folder left as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("alfworld", reason="the ALFWorld engine (envs extra) is not installed")

ROOT = Path(__file__).resolve().parents[2]
NOT_TEXT = b"\x89PNG\r\n\x1a\n\xff\xfe\x00binary"


def _train(settings: dict, run_dir: Path, **extra) -> subprocess.CompletedProcess:
    overrides = [f"{k}={v}" for k, v in {**settings, **extra, "run_dir": run_dir}.items()]
    env = {k: v for k, v in os.environ.items() if k != "ALFWORLD_DATA"}
    return subprocess.run([sys.executable, "-m", "training.train", *overrides], cwd=ROOT, capture_output=True,
                          text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def one_step_run(tmp_path_factory, alfworld_games):
    settings = dict(model="tiny", data="generated", games_dir=str(alfworld_games), n_train_games=2, n_val_games=2,
                    batch_size=1, group_size=2, max_steps=2, max_response_length=8, max_prompt_length=1024,
                    save_freq=1, test_freq=0, progress="false", rho=0.5, kl_coef=0.0, micro_batch_tokens=4096, seed=3)
    run = tmp_path_factory.mktemp("resume") / "run"
    done = _train(settings, run, total_steps=1)
    assert done.returncode == 0, done.stderr[-3000:]
    return run, settings


def _snapshot(run: Path) -> dict:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["run.json", "metrics.jsonl"])
def test_resume_with_a_record_that_is_not_text_is_one_line(one_step_run, tmp_path, name):
    import shutil

    source, settings = one_step_run
    run = shutil.copytree(source, tmp_path / "run")
    (run / name).write_bytes(NOT_TEXT)
    before = _snapshot(run)
    out = _train(settings, run, total_steps=2)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and f"{run / name}: not UTF-8 text" in last
    assert [line for line in out.stderr.splitlines() if line.startswith("error")] == [last]
    assert _snapshot(run) == before


def test_bad_input_met_during_the_steps_stops_with_the_checkpoints_kept(one_step_run, tmp_path, monkeypatch, capsys):
    """An input error raised by a step (here a view that cannot render, at step 2) is not "nothing was written"
    (exit 2): the run stopped after its first checkpoint, exit status 1, and step 1 is kept."""
    import shutil

    from ocsd.replay.views import ViewRenderError
    from training import train
    from training.trainer import Trainer

    source, settings = one_step_run
    run = shutil.copytree(source, tmp_path / "run")
    real_step = Trainer.train_step

    def step(self, n):
        if n == 2:
            raise ViewRenderError("view 'broken' at step 0 of episode x: render returned None, not token ids")
        return real_step(self, n)

    monkeypatch.setattr(Trainer, "train_step", step)
    argv = [f"{k}={v}" for k, v in {**settings, "run_dir": run, "total_steps": 2}.items()]
    assert train.main(argv) == 1
    err = capsys.readouterr().err
    assert "training stopped: view 'broken'" in err and "Traceback" not in err
    assert (run / "global_step_1" / "replay" / "meta.json").is_file() and not (run / "global_step_2").exists()
