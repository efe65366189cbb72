"""Outputs that must not land on other commands' folders or record what never ran: an SFT export into a training
run, a sweep into a training run or over cells finished with other settings, a collection of another base model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.collect import main as collect
from training.sweep import cell_name, main as sweep

from .conftest import tiny_run_checkpoint
from tests.training.test_sweep import config  # noqa: F401  (the sweep tests' tiny config file, a fixture)

pytestmark = pytest.mark.usefixtures("no_user_data")


def _files(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture()
def training_run(tmp_path, alfworld_games) -> Path:
    """A training run folder (run.json, global_step_2/) of the tiny model."""
    run = tmp_path / "run"
    tiny_run_checkpoint(run, step=2, seed=1, run_info={"run": "run", "method": "ocsd"},
                        config={"games_dir": str(alfworld_games), "n_train_games": 2, "n_val_games": 2})
    return run


# F13: an SFT export into a training run --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory, alfworld_games, smollm2_tokenizer) -> Path:
    from training.sft import main

    run = tmp_path_factory.mktemp("sft") / "run"
    assert main([f"run_dir={run}", "model=tiny", "data=generated", f"games_dir={alfworld_games}", "n_train_games=2",
                 "n_val_games=1", "seed=0", "epochs=1", "batch_size=4", "save_freq=1", "max_prompt_length=1024",
                 "history_length=1", "progress=false", "max_updates=1"]) == 0
    return run


def test_export_refuses_a_training_run_and_rewrites_an_earlier_export(sft_run, training_run, tmp_path, capsys):
    from training.sft import main

    before = _files(training_run)
    assert main(["--export", str(sft_run), "--out", str(training_run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out: {training_run} is not empty (global_step_2, run.json)" in err
    assert _files(training_run) == before
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("a user's file\n")
    assert main(["--export", str(sft_run), "--out", str(notes)]) == 2
    assert "is not empty (notes.txt)" in capsys.readouterr().err
    exported = tmp_path / "exported"
    assert main(["--export", str(sft_run), "--out", str(exported)]) == 0
    assert main(["--export", str(sft_run), "--out", str(exported)]) == 0  # an earlier export is rewritten
    assert sorted(p.name for p in exported.iterdir()) == ["adapter_config.json", "adapter_model.safetensors",
                                                           "warm_start.json"]


# S09, S14: sweeps ---------------------------------------------------------------------------------------------------



def test_sweep_refuses_a_training_run_as_its_folder(config, training_run, capsys):
    before = _files(training_run)
    assert sweep(["--config", str(config), "--methods", "grpo", "--out", str(training_run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out: {training_run} holds a run (run.json, global_step_2), not a sweep" in err
    assert _files(training_run) == before


def test_sweep_refuses_a_cell_finished_with_other_settings(config, tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["--config", str(config), "--methods", "grpo", "--rho", "0.5", "--beta", "0.5", "--out", str(out)]
    assert sweep(argv) == 0
    capsys.readouterr()
    before = _files(out)
    assert sweep([*argv, "max_steps=3", "temperature=0.5"]) == 2
    err = capsys.readouterr().err
    name = cell_name("grpo", 0.5, 0.5, 0)
    assert err.count("\n") == 1
    assert f"cell {name} finished with other settings (max_steps: 2 -> 3; temperature: 1.0 -> 0.5)" in err
    assert _files(out) == before
    assert sweep([*argv, "progress=false"]) == 0  # the same settings: skipped
    assert [c["status"] for c in json.loads((out / "index.json").read_text())] == ["skipped"]


# C15: a collection of another base model ---------------------------------------------------------------------------


def _second_collection_refused(tiny_checkpoint, out: Path, second: list[str], capsys) -> str:
    """Collect from ``tiny_checkpoint`` into ``out``, then collect with ``second`` into it: refused in one line
    with nothing of the first changed; returns the message."""
    shape = ["--tasks", "1", "--group", "2", "--out", str(out), "progress=false"]
    assert collect(["--model", str(tiny_checkpoint), *shape]) == 0
    capsys.readouterr()
    before = _files(out)
    assert collect([*second, *shape]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert _files(out) == before
    return err


def test_collection_refuses_another_base_model(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "collect"
    err = _second_collection_refused(tiny_checkpoint, out, ["--model", "smollm2"], capsys)
    assert f"--out: {out} holds a collection of base model 'tiny', not 'smollm2'" in err
    assert json.loads((out / "run.json").read_text())["base_model"] == "tiny"


def test_collection_refuses_another_environment(tiny_checkpoint, tmp_path, capsys):
    err = _second_collection_refused(tiny_checkpoint, tmp_path / "collect", ["--model", "tiny", "--env", "searchqa"],
                                     capsys)
    assert "holds a collection in environment 'alfworld', not 'searchqa'" in err
