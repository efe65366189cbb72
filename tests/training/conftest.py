"""Fixtures of the collect / evaluate / sweep command tests.

``alfworld_games``: a session-wide folder of generated ALFWorld games (2 training, 2 validation,
generator seed 0), made once with the real generator (a few seconds per game).
``tiny_overrides``: ``key=value`` settings that keep a run of the tiny random model to seconds.
``no_user_data``: hides a real-data ``$ALFWORLD_DATA`` so commands use the generated games.
``policy_dir``: a Hugging Face folder of the tiny model (config.json and weights), the policy verl is given;
:func:`verl_dry_run` runs ``python -m training.verl.main --dry-run``.
``tiny_checkpoint``: a ``global_step_7`` folder in the trainer's layout (``actor/`` Hugging Face folder
with tokenizer and ``trainer_state.pt``, ``run.json`` beside it) holding a tiny random model.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _need_alfworld():
    # find_spec, not import: importing alfworld sets $ALFWORLD_DATA to its cache folder
    for name, why in (("alfworld", "alfworld==0.4.2"), ("fast_downward", "textworld[pddl]==1.7.0")):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{why} is not installed (pip install -e .[envs])")


@pytest.fixture()
def no_user_data(monkeypatch):
    """Run as a user without real ALFWorld data: generated games only."""
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)


@pytest.fixture(scope="session")
def alfworld_games(tmp_path_factory) -> Path:
    _need_alfworld()
    from training.config import make_config
    from training.envs.alfworld.tasks import GameSource

    folder = tmp_path_factory.mktemp("cmd_games")
    cfg = make_config(dict(data="generated", games_dir=str(folder), n_train_games=2, n_val_games=2, seed=0,
                           progress=False))
    source = GameSource.from_config(cfg)
    assert len(source.train) == 2 and len(source.valid) == 2
    return folder


@pytest.fixture(scope="session")
def tiny_overrides(alfworld_games) -> list[str]:
    return ["data=generated", f"games_dir={alfworld_games}", "n_train_games=2", "n_val_games=2", "max_steps=2",
            "max_response_length=8", "max_prompt_length=1024", "history_length=1", "progress=false",
            "generation_batch=8", "env_workers=1"]


def tiny_run_checkpoint(run: Path, *, step: int, seed: int, run_info: dict, config: dict) -> Path:
    """``run/global_step_<step>`` in the trainer's layout holding a tiny random model (weights seeded by ``seed``,
    SmolLM2's tokenizer), with ``run.json`` (``run_info`` and ``config``) beside it; skips without the tokenizer."""
    import torch

    from ocsd.replay.models import ModelNotFoundError, load_tokenizer, tiny_model

    try:
        tokenizer = load_tokenizer("smollm2")
    except ModelNotFoundError as err:
        pytest.skip(f"SmolLM2's tokenizer is not available: {err}")
    actor = run / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    tiny_model(vocab_size=len(tokenizer), seed=seed).save_pretrained(actor, safe_serialization=True)
    tokenizer.save_pretrained(actor)
    torch.save({"global_step": step, "optimizer": {}}, actor / "trainer_state.pt")
    base = {"env": "alfworld", "max_steps": 2, "max_response_length": 8, "history_length": 1,
            "max_prompt_length": 1024, "data": "generated"}
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "env": "alfworld", "model": "tiny", "seed": 0,
                                              **run_info, "config": {**base, **config}}))
    return run / f"global_step_{step}"


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, alfworld_games) -> Path:
    return tiny_run_checkpoint(tmp_path_factory.mktemp("cmd_run"), step=7, seed=3,
                               run_info={"run": "tinyrun", "method": "ocsd"},
                               config={"rho": 0.5, "beta": 0.5, "games_dir": str(alfworld_games), "n_train_games": 2,
                                       "n_val_games": 2, "device": "cuda", "lora_rank": 8})


ROOT = Path(__file__).resolve().parents[2]


def verl_dry_run(*overrides: str, cwd: Path = ROOT, timeout: float = 180) -> subprocess.CompletedProcess:
    """``python -m training.verl.main --dry-run OVERRIDES`` in ``cwd`` (the suite on ``PYTHONPATH``; the plugin is not
    needed to compose)."""
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="none", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "training.verl.main", "--dry-run", *overrides], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def policy_dir(tmp_path_factory) -> Path:
    """A Hugging Face folder of the tiny model (config.json and weights): the policy verl is given."""
    from ocsd.replay.models import tiny_model

    folder = tmp_path_factory.mktemp("policy") / "tiny"
    tiny_model(hidden_size=16, intermediate_size=32).save_pretrained(folder)
    return folder
