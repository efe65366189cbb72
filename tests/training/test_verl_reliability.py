"""``python -m training.verl.main --dry-run`` refuses, in one line naming the setting with exit status 2 and before
anything is written: a run folder that cannot be written, a run folder holding another command's run or files
that are not a run, a GPU count below 1, and an unknown key or preset (Hydra's composition error). A verl run
folder of the same settings is accepted again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("verl")  # the dry run composes verl's own config

from tests.training.conftest import verl_dry_run as dry_run  # noqa: E402


@pytest.fixture
def section(alfworld_games, policy_dir):
    """Overrides of a small ALFWorld run (the run folder is added by each test)."""
    return ["ocsd.data=generated", f"ocsd.games_dir={alfworld_games}", "ocsd.n_train_games=2", "ocsd.n_val_games=2",
            f"actor_rollout_ref.model.path={policy_dir}"]


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(out, start: str, message: str) -> str:
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    ours = [line for line in out.stderr.splitlines() if line.startswith("training.verl.main:")]
    assert ours == [last], out.stderr[-3000:]  # one line (verl's import warnings may come before)
    assert last.startswith(f"training.verl.main: {start}") and message in last, last
    assert out.stdout == ""
    return last


def test_a_run_dir_that_cannot_be_written_is_refused(section, tmp_path):
    out = dry_run(*section, "ocsd.run_dir=/proc/self/x", cwd=tmp_path)
    refused(out, "ocsd.run_dir=/proc/self/x", "cannot be written")


def run_json(folder: Path, **info) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps({"schema_version": 1, "run": "r", "method": "ocsd", **info}))


def test_a_training_run_of_the_single_device_trainer_is_left_alone(section, tmp_path):
    run = tmp_path / "run"
    run_json(run, config={"lr": 1e-6})
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    before = snapshot(run)
    out = dry_run(*section, f"ocsd.run_dir={run}", cwd=tmp_path)
    refused(out, "ocsd.run_dir", "holds a run of python -m training.train, not a verl run")
    assert snapshot(run) == before and not (run / "data").exists()


def test_another_commands_run_and_unrelated_files_are_left_alone(section, tmp_path):
    collection = tmp_path / "collection"
    run_json(collection, source="training.collect")
    out = dry_run(*section, f"ocsd.run_dir={collection}", cwd=tmp_path)
    refused(out, "ocsd.run_dir", "written by training.collect")
    assert not (collection / "data").exists()

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("mine\n")
    out = dry_run(*section, f"ocsd.run_dir={notes}", cwd=tmp_path)
    refused(out, "ocsd.run_dir", "is not empty (notes.txt) and holds no run")
    assert sorted(p.name for p in notes.iterdir()) == ["notes.txt"]


def test_a_verl_run_folder_is_accepted_again_and_refused_with_other_settings(section, tmp_path):
    import yaml

    run = tmp_path / "run"
    first = dry_run(*section, f"ocsd.run_dir={run}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert (run / "data" / "train.parquet").is_file()
    again = dry_run(*section, f"ocsd.run_dir={run}", cwd=tmp_path)  # a dry run's task rows are ours
    assert again.returncode == 0, again.stderr[-3000:]
    # the run.json a verl run writes at its first save: the section's settings, backend verl
    run_json(run, config=yaml.safe_load(first.stdout)["ocsd"], backend="verl")
    resumed = dry_run(*section, f"ocsd.run_dir={run}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    other = dry_run(*section, f"ocsd.run_dir={run}", "ocsd.lr=3e-6", cwd=tmp_path)
    refused(other, "ocsd.run_dir", "holds a verl run with other settings (lr:")


@pytest.mark.parametrize("key, value", [("n_gpus_per_node", "0"), ("n_gpus_per_node", "-2"), ("nnodes", "0")])
def test_gpu_and_node_counts_below_one_are_refused(section, tmp_path, key, value):
    out = dry_run(*section, f"ocsd.run_dir={tmp_path / 'run'}", f"trainer.{key}={value}", cwd=tmp_path)
    refused(out, f"trainer.{key}={value}", "must be an integer >= 1")
    assert not (tmp_path / "run").exists()


def test_an_unknown_key_or_preset_is_one_line_exit_2(section, tmp_path):
    run = tmp_path / "run"
    out = dry_run(*section, f"ocsd.run_dir={run}", "ocsd.foo=1", cwd=tmp_path)
    refused(out, "Could not override 'ocsd.foo'", "+ocsd.foo=1")
    out = dry_run(*section, f"ocsd.run_dir={run}", "ocsd=atari", cwd=tmp_path)
    refused(out, "In 'ocsd_trainer': Could not find 'ocsd/atari'", "alfworld, searchqa, webshop")
    assert not run.exists()


def test_composition_problem_is_one_line():
    from hydra.errors import ConfigCompositionException

    from training.verl.main import composition_problem

    err = ConfigCompositionException("Could not override 'ocsd.foo'.\nTo append to your config use +ocsd.foo=1")
    err.__cause__ = ValueError("Key 'foo' is not in struct\n    full_key: ocsd.foo")
    assert composition_problem(err) == ("Could not override 'ocsd.foo'. To append to your config use +ocsd.foo=1 "
                                        "(Key 'foo' is not in struct)")
