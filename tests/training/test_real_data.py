"""Where the games come from: the real ALFWorld release, or generated games only when asked for.

A config names its games with ``data`` (a folder, or ``generated``) or ``$ALFWORLD_DATA``; without either a
run stops with one line naming ``data`` and how to get the ALFWorld files, and every command prints the
origin of its games before it starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from training.config import GENERATED, ConfigError, load_config, make_config
from training.envs.alfworld.engine import AlfworldDataError

pytestmark = pytest.mark.usefixtures("no_user_data")

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "training" / "configs" / "alfworld_paper.yaml"
DEMO = ROOT / "training" / "configs" / "demo.yaml"


def test_paper_config_refuses_without_data():
    with pytest.raises(ConfigError) as info:
        load_config(PAPER, ["device=cpu"])
    message = str(info.value)
    assert message.startswith("data: ") and "\n" not in message
    for hint in ("data=DIR", "$ALFWORLD_DATA", "json_2.1.1", "alfworld-download", "data=generated"):
        assert hint in message


def test_train_command_refuses_without_data_before_writing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ALFWORLD_DATA"}
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "training.train", "--config", str(PAPER), "device=cpu",
                           f"run_dir={run}"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "data: no games named" in proc.stderr and not run.exists()


def test_generated_games_only_when_asked_for(tmp_path, monkeypatch):
    assert load_config(PAPER, ["device=cpu", "data=generated"]).data_root is None
    assert load_config(DEMO).data == GENERATED  # the embedded default asks for them
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    assert load_config(PAPER, ["device=cpu"]).data_root == str(tmp_path)  # $ALFWORLD_DATA names the games
    assert load_config(DEMO).data_root is None  # an explicit data=generated wins over $ALFWORLD_DATA
    assert make_config({"data": str(tmp_path)}).data_root == str(tmp_path)


def test_unset_data_is_refused_where_games_are_loaded():
    from training.envs.alfworld.tasks import GameSource

    cfg = make_config({})  # a config is valid without data; loading its games is not
    with pytest.raises(ConfigError, match="^data: no games named"):
        cfg.data_root
    with pytest.raises(AlfworldDataError, match="^data: no games named"):
        GameSource.from_config(cfg)


def test_missing_data_folder_is_refused():
    with pytest.raises(ConfigError, match=r"^data: folder '/no/such/alfworld' does not exist \(or data=generated"):
        make_config({"data": "/no/such/alfworld"})


def test_generated_games_announce_their_origin(alfworld_games, capsys):
    from training.envs.alfworld.tasks import GameSource

    cfg = make_config(dict(data="generated", games_dir=str(alfworld_games), n_train_games=2, n_val_games=2,
                           progress=False))
    source = GameSource.from_config(cfg)
    assert not source.real
    assert capsys.readouterr().err.strip() == f"games: generated games (data=generated) in {alfworld_games}: " \
                                              "2 training, 2 validation"


def test_real_games_announce_their_origin(capsys):
    from training.envs.alfworld.tasks import GameSource

    root = ROOT.parent / "shared" / "alfworld"
    if not (root / "json_2.1.1" / "valid_seen").is_dir():
        pytest.skip("real ALFWorld games not found in ../shared/alfworld")
    source = GameSource.from_config(make_config({"data": str(root), "progress": False}), train=False)
    assert source.real and len(source.valid) == 140
    assert capsys.readouterr().err.strip() == f"games: real ALFWorld games from {root}: 0 training, 140 validation"


def test_task_types_choose_the_games(alfworld_games, tmp_path):
    """``task_types`` keeps generated and real games of those types; generated game i has the i-th type in turn,
    so a cache holding other types' games is reused only where they match."""
    from training.envs.alfworld.tasks import GameSource

    folder = tmp_path / "games"
    shutil.copytree(alfworld_games, folder)  # seed-0 games of all types: game 0 is a pick game
    cfg = make_config(dict(data="generated", games_dir=str(folder), n_train_games=2, n_val_games=1, seed=0,
                           progress=False, task_types="pick"))
    first = GameSource.from_config(cfg)
    assert [g.task_type for g in first.train] == ["pick", "pick"] and first.valid[0].task_type == "pick"
    assert first.train[0].path == GameSource.from_config(make_config(dict(
        data="generated", games_dir=str(alfworld_games), n_train_games=1, n_val_games=1, seed=0,
        progress=False))).train[0].path.replace(str(alfworld_games), str(folder))
    again = GameSource.from_config(cfg)
    assert [g.path for g in again.train] == [g.path for g in first.train]
    root = ROOT.parent / "shared" / "alfworld"
    if (root / "json_2.1.1" / "valid_seen").is_dir():
        real = GameSource.from_config(make_config({"data": str(root), "progress": False, "task_types": "heat,cool"}),
                                      train=False)
        assert real.valid and {g.task_type for g in real.valid} == {"heat", "cool"}
