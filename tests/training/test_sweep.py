"""``python -m training.sweep``: a grid of real training runs (tiny random model, generated games)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ocsd.records import RunLock, validate_replay
from training.sweep import cell_name, main, read_index

pytestmark = pytest.mark.usefixtures("no_user_data")

TINY = """\
data: generated
model: tiny
lora_rank: 0
kl_coef: 0.0
n_train_games: 2
n_val_games: 2
batch_size: 1
group_size: 2
max_steps: 2
history_length: 1
max_prompt_length: 1024
max_response_length: 8
total_steps: 1
save_freq: 1
test_freq: 0
micro_batch_tokens: 4096
progress: false
"""


@pytest.fixture()
def config(tmp_path, alfworld_games) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY + f"games_dir: {alfworld_games}\n")
    return path


def test_grid_records_every_cell_skips_finished_and_survives_a_failure(tmp_path, config, capsys):
    out = tmp_path / "sweep"
    out.mkdir()
    blocked = out / cell_name("ocsd", 0.5, 0.25, 0)
    blocked.mkdir()
    (blocked / "notes.txt").write_text("a user's file where the run folder should go\n")  # the trainer refuses it
    argv = ["--config", str(config), "--methods", "grpo,ocsd", "--seeds", "0", "--rho", "0.5", "--beta", "0.25",
            "--parallel", "2", "--out", str(out)]
    assert main(argv) == 1  # one cell failed
    cells = {c["method"]: c for c in read_index(out)}
    assert set(cells) == {"grpo", "ocsd"}
    good, bad = cells["grpo"], cells["ocsd"]
    assert (good["seed"], good["rho"], good["beta"]) == (0, 0.5, 0.25)
    assert good["status"] == "done" and good["returncode"] == 0
    assert Path(good["run_dir"]).name == "grpo_rho0.5_beta0.25_seed0"
    assert validate_replay(Path(good["run_dir"]) / "global_step_1") == []
    meta = json.loads((Path(good["run_dir"]) / "global_step_1" / "replay" / "meta.json").read_text())
    assert (meta["method"], meta["rho"], meta["beta"]) == ("grpo", 0.5, 0.25)
    assert bad["status"] == "failed" and bad["returncode"] == 2
    assert "is not empty (notes.txt)" in Path(bad["log"]).read_text()
    assert (blocked / "notes.txt").exists() and not list(blocked.glob("global_step_*"))
    capsys.readouterr()

    finished_log = Path(good["log"]).read_text()
    assert main(argv) == 1  # the finished cell is skipped, the broken one is tried again
    again = {c["method"]: c for c in read_index(out)}
    assert again["grpo"]["status"] == "skipped" and again["grpo"]["returncode"] == 0
    assert again["ocsd"]["status"] == "failed"
    assert Path(good["log"]).read_text() == finished_log  # not run again
    assert "skipped" in capsys.readouterr().out


@pytest.mark.parametrize("extra, message", [
    (["--methods", "grpo,nope"], "--methods: unknown ['nope']"),
    (["--methods", "grpo", "--rho", "0.2,1.5"], "cell grpo_rho1.5_beta0.5_seed0: rho=1.5: must be in (0, 1]"),
    (["--methods", "grpo", "--rho", "0.2,x"], "--rho: 'x' is not a number"),
    (["--methods", "grpo", "--beta", "-0.1"], "beta=-0.1: must be in [0, 1]"),
    (["--methods", "grpo", "--seeds", "0,x"], "--seeds"),
    (["--methods", "grpo", "--parallel", "0"], "--parallel"),
    (["--methods", "grpo", "method=ocsd"], "set per cell"),
    (["--methods", "grpo", "batch_size=0"], "batch_size=0"),
    (["--methods", "grpo", "no_such_key=1"], "unknown key"),
    (["--methods", "grpo", "--rho", "0.2,0.20", "--parallel", "2"], "--rho: '0.2' and '0.20' name the same cell"),
    (["--methods", "grpo", "--beta", "0.5,.5"], "--beta: '0.5' and '.5' name the same cell"),
    (["--methods", "grpo", "--seeds", "1,01"], "--seeds: '1' and '01' name the same cell"),
    (["--methods", "grpo", "games_dir="], "games_dir='': empty"),
])
def test_flag_errors_exit_2_before_any_cell(tmp_path, config, extra, message, capsys):
    out = tmp_path / "sweep"
    assert main(["--config", str(config), "--out", str(out), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_missing_config(tmp_path, capsys):
    assert main(["--config", str(tmp_path / "none.yaml"), "--methods", "grpo"]) == 2
    assert "--config" in capsys.readouterr().err


def test_cell_names():
    assert cell_name("ocsd", 0.2, 0.5, 1) == "ocsd_rho0.2_beta0.5_seed1"
    assert cell_name("grpo", 1.0, 0.25, 0) == "grpo_rho1_beta0.25_seed0"


def test_a_cell_folder_that_is_a_file_is_refused_before_any_cell(tmp_path, config, capsys):
    out = tmp_path / "sweep"
    out.mkdir()
    (out / cell_name("grpo", 0.5, 0.5, 0)).write_text("a file\n")
    assert main(["--config", str(config), "--methods", "grpo", "--rho", "0.5", "--beta", "0.5", "--out", str(out)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert not (out / "index.json").exists()


def test_a_sweep_folder_in_use_is_refused(tmp_path, config, capsys):
    out = tmp_path / "sweep"
    with RunLock(out, command="python -m training.sweep (the first)"):
        assert main(["--config", str(config), "--methods", "grpo", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out: {out} is in use by pid" in err and "(the first)" in err
    assert not (out / "index.json").exists() and not (out / "logs").exists()
