"""``python -m training.verl.main --dry-run`` refuses, in one line naming the key and before anything is written, a
section device that is not a device and a policy path that is not a model folder (``config.json`` and weights) nor
an installed catalogue model; a good folder and a catalogue name pass."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl")  # the dry run composes verl's own config

from tests.training.conftest import verl_dry_run as dry_run  # noqa: E402


@pytest.fixture
def section(alfworld_games, tmp_path):
    """Overrides of a small ALFWorld run writing into ``tmp_path/run``."""
    return ["ocsd.data=generated", f"ocsd.games_dir={alfworld_games}", f"ocsd.run_dir={tmp_path / 'run'}",
            "ocsd.n_train_games=2", "ocsd.n_val_games=2"]


def _refused(out, key: str, message: str, run: Path):
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    ours = [line for line in out.stderr.splitlines() if line.startswith("training.verl.main:")]  # verl's import
    # warnings (no accelerator, optional engines) come before
    assert ours == [out.stderr.strip().splitlines()[-1]], out.stderr[-3000:]
    assert ours[0].startswith(f"training.verl.main: {key}") and message in ours[0], out.stderr[-3000:]
    assert out.stdout == "" and not run.exists()  # no task rows written


def test_an_unknown_section_device_is_refused(section, policy_dir, tmp_path):
    out = dry_run(*section, "ocsd.device=banana", f"actor_rollout_ref.model.path={policy_dir}", cwd=tmp_path)
    _refused(out, "ocsd.device='banana'", "must be 'cpu', 'cuda' or 'cuda:N'", tmp_path / "run")


def test_device_forms():
    from training.verl.main import section_device_problem

    for good in (None, "cpu", "cuda", "cuda:0", "cuda:3"):
        assert section_device_problem(good) is None
    for bad in ("banana", "gpu", "cuda:x", "cpu0", "CUDA", "", 3):
        assert "must be 'cpu', 'cuda' or 'cuda:N'" in section_device_problem(bad)


def test_a_device_is_accepted_and_given_cpu(section, policy_dir, tmp_path):
    """verl places the models: a device the section names, visible here or not, becomes cpu."""
    out = dry_run(*section, "ocsd.device=cuda:3", f"actor_rollout_ref.model.path={policy_dir}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    config = yaml.safe_load(out.stdout)
    assert config["ocsd"]["device"] == "cpu" and config["actor_rollout_ref"]["model"]["path"] == str(policy_dir)


def _empty(folder: Path) -> None:
    folder.mkdir()


def _config_only(folder: Path) -> None:
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')


def _truncated(folder: Path, policy_dir: Path) -> None:
    import shutil

    shutil.copytree(policy_dir, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])


def test_an_empty_policy_folder_is_refused(section, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    out = dry_run(*section, f"actor_rollout_ref.model.path={folder}", cwd=tmp_path)
    _refused(out, f"actor_rollout_ref.model.path='{folder}'", "has no config.json", tmp_path / "run")


@pytest.mark.parametrize("make, message", [
    (_empty, "has no config.json"),
    (_config_only, "has no weights"),
    (_truncated, "truncated or corrupt safetensors file"),
    (None, "is not a local folder"),
])
def test_policy_folder_names_the_key_and_the_file(policy_dir, tmp_path, make, message):
    from training.config import ConfigError
    from training.verl.main import policy_folder

    folder = tmp_path / "model"
    if make is _truncated:
        make(folder, policy_dir)
    elif make is not None:
        make(folder)
    with pytest.raises(ConfigError) as err:
        policy_folder(str(folder))
    assert str(err.value).startswith(f"actor_rollout_ref.model.path='{folder}': ") and message in str(err.value)
    assert policy_folder(str(policy_dir)) == policy_dir


def test_a_catalogue_name_is_replaced_by_its_folder(section, tmp_path):
    from ocsd.replay.models import ModelNotFoundError, smollm2_path

    try:
        folder = smollm2_path()
    except ModelNotFoundError as err:
        pytest.skip(f"SmolLM2 is not available: {err}")
    out = dry_run(*section, "actor_rollout_ref.model.path=smollm2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert yaml.safe_load(out.stdout)["actor_rollout_ref"]["model"]["path"] == str(folder)
