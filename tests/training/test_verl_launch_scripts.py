"""``scripts/verl/``: the shared launcher ``paper.sh`` and its three per-environment scripts, offline: their syntax,
and dry runs (``--dry-run`` / ``DRY_RUN=1``: the composed config, nothing started) that show what they pass on."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts" / "verl"


def launch(script: str, *args: str, timeout: float = 120, **variables: str) -> subprocess.CompletedProcess:
    """``bash scripts/verl/<script> ARGS`` from the repository root, with this interpreter as ``python``."""
    env = {k: v for k, v in os.environ.items() if k not in ("N_GPUS", "GPUS", "TP", "SEED", "DRY_RUN",
                                                             "WEBSHOP_URL", "SEARCHQA_DATA", "RETRIEVAL_URLS")}
    env.update(VERL_USE_EXTERNAL_PLUGINS="none", PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
               **variables)
    return subprocess.run(["bash", str(SCRIPTS / script), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def composed(stdout: str) -> dict:
    """The printed config; lines a library printed before it (the built-in BM25 server's "Building index ...")
    are skipped."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line[:1].isalpha() and line.rstrip().endswith(":"))
    return yaml.safe_load("\n".join(lines[start:]))


@pytest.mark.parametrize("script", ["paper.sh", "alfworld.sh", "webshop.sh", "searchqa.sh"])
def test_syntax(script):
    assert shutil.which("bash")
    done = subprocess.run(["bash", "-n", str(SCRIPTS / script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_alfworld_with_a_catalogue_model_method_and_gpus(alfworld_games, tmp_path):
    out = launch("alfworld.sh", "smollm2", "grpo", "2", "ocsd.data=generated", f"ocsd.games_dir={alfworld_games}",
                 "ocsd.n_train_games=2", "ocsd.n_val_games=2", DRY_RUN="1", SEED="5", RUN_ROOT=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    config = composed(out.stdout)
    ocsd, aro = config["ocsd"], config["actor_rollout_ref"]
    assert (ocsd["env"], ocsd["method"], ocsd["seed"], config["trainer"]["n_gpus_per_node"]) == ("alfworld", "grpo",
                                                                                                  5, 2)
    assert ocsd["run_dir"] == str(tmp_path / "grpo_alfworld_smollm2_s5")
    assert Path(aro["model"]["path"]).is_dir()  # the catalogue name, resolved to its installed folder
    assert aro["rollout"]["tensor_model_parallel_size"] == 1
    assert not (tmp_path / "grpo_alfworld_smollm2_s5" / "global_step_1").exists()  # nothing started


def test_searchqa_takes_its_data_from_the_environment(tmp_path):
    out = launch("searchqa.sh", "smollm2", "--dry-run", f"ocsd.games_dir={tmp_path / 'questions'}",
                 "ocsd.n_train_games=4", "ocsd.n_val_games=2", SEARCHQA_DATA="generated", N_GPUS="4",
                 RUN_ROOT=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    config = composed(out.stdout)
    ocsd = config["ocsd"]
    assert (ocsd["env"], ocsd["data"], ocsd["method"], ocsd["batch_size"]) == ("searchqa", "generated", "ocsd", 128)
    assert config["trainer"]["n_gpus_per_node"] == 4 and ocsd["run_dir"] == str(tmp_path / "ocsd_searchqa_smollm2_s0")


def test_webshop_passes_the_server_url_on(tmp_path):
    """$WEBSHOP_URL arrives as ocsd.webshop_url: the dry run asks that server for its goals (none listens here)."""
    out = launch("webshop.sh", "smollm2", "ocsd", "1", "--dry-run", WEBSHOP_URL="http://127.0.0.1:9",
                 RUN_ROOT=str(tmp_path))
    assert out.returncode == 2
    assert "webshop_url: cannot reach http://127.0.0.1:9/" in out.stderr and "Traceback" not in out.stderr


def test_an_eight_billion_model_folder_gets_two_way_tensor_parallelism(alfworld_games, tmp_path, policy_dir):
    model = shutil.copytree(policy_dir, tmp_path / "Qwen3-8B")  # the size is read from the name
    out = launch("paper.sh", "alfworld", str(model), "ocsd", "--dry-run", "ocsd.data=generated",
                 f"ocsd.games_dir={alfworld_games}", "ocsd.n_train_games=2", "ocsd.n_val_games=2", GPUS="4",
                 RUN_ROOT=str(tmp_path / "runs"))
    assert out.returncode == 0, out.stderr[-3000:]
    config = composed(out.stdout)
    assert config["actor_rollout_ref"]["rollout"]["tensor_model_parallel_size"] == 2
    assert config["trainer"]["n_gpus_per_node"] == 4  # GPUS, the older name of N_GPUS


@pytest.mark.parametrize("args, variables, message", [
    (("alfworld.sh", "smollm2", "ocsd", "0"), {}, "N_GPUS must be a count >= 1, not '0'"),
    (("alfworld.sh", "smollm2"), {"N_GPUS": "two"}, "N_GPUS must be a count >= 1, not 'two'"),
    (("paper.sh", "atari", "smollm2"), {}, "ENV must be alfworld, webshop or searchqa"),
    (("alfworld.sh", "/no/such/Qwen3-4B"), {}, "model folder /no/such/Qwen3-4B does not exist"),
])
def test_refusals_before_anything_starts(tmp_path, args, variables, message):
    out = launch(*args, RUN_ROOT=str(tmp_path), **variables)
    assert out.returncode == 2 and message in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_catalogue_model_that_is_not_installed_is_named(tmp_path):
    out = launch("alfworld.sh", "qwen2.5-coder-0.5b", "ocsd", "4", "--dry-run", "ocsd.data=generated",
                 f"ocsd.games_dir={tmp_path / 'games'}", OCSD_CACHE=str(tmp_path / "cache"),
                 RUN_ROOT=str(tmp_path / "runs"))
    assert out.returncode == 2, out.stderr[-2000:]
    assert "actor_rollout_ref.model.path='qwen2.5-coder-0.5b'" in out.stderr
    assert "python -m ocsd.replay.catalog fetch qwen2.5-coder-0.5b" in out.stderr
    assert not (tmp_path / "runs").exists()
