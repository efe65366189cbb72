"""Interaction prompts of many steps at once equal the prompts of each step alone."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")

from ocsd.replay.models import ModelNotFoundError, load_tokenizer  # noqa: E402
from ocsd.replay.prompts import PromptRenderer  # noqa: E402
from training.rollout.loop import step_prompt, step_prompts  # noqa: E402

WORDS = ["apple", "countertop", "fridge", "open", "go", "to", "the", "mug", "sinkbasin", "nothing", "happens"]


@pytest.fixture(scope="module")
def renderer():
    try:
        return PromptRenderer(load_tokenizer("smollm2"))
    except ModelNotFoundError as err:
        pytest.skip(f"SmolLM2's tokenizer is not available: {err}")


def _text(rng, n):
    return " ".join(rng.choice(WORDS, size=n))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_step_prompts_equal_step_prompt(renderer, seed):
    """Same ids and history counts, including steps whose history must be shortened to fit, and the
    first step (no history)."""
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(12):
        history = [(_text(rng, int(rng.integers(5, 60))), _text(rng, 4)) for _ in range(int(rng.integers(0, 6)))]
        steps.append((_text(rng, 6), history, _text(rng, int(rng.integers(5, 80))),
                      [_text(rng, 3) for _ in range(int(rng.integers(1, 8)))]))
    for max_len in (10_000, 400, 250):
        got = step_prompts(renderer, "alfworld", steps, history_length=3, max_prompt_length=max_len)
        want = [step_prompt(renderer, "alfworld", task=t, history=h, obs=o, admissible=a, history_length=3,
                            max_prompt_length=max_len) for t, h, o, a in steps]
        assert got == want
    assert any(shown < min(3, len(h)) for (_, shown), (_, h, _, _) in zip(got, steps))  # some were shortened


@pytest.mark.parametrize("options", [{}, {"segment_mode": "joint"}, {"use_chat_template": False}])
def test_render_ids_many_equals_render_ids(renderer, options):
    texts = ["", "a single line", "two\nlines with <action>look</action>", "Observation: not provided"]
    r = PromptRenderer(renderer.tokenizer, **options)
    assert r.render_ids_many(texts) == [r.render_ids(t) for t in texts]
    assert r.render_ids_many([]) == []


@pytest.mark.parametrize("padded, direct", [(False, True), (True, True), (False, False)])
def test_encode_many_equals_the_tokenizer_call(renderer, padded, direct):
    """Batched encoding, direct through the fast backend or (when the backend has padding set, or with
    ``direct=False``) through the tokenizer's call, gives the ids and character offsets of Hugging Face's
    call on each text alone."""
    import copy

    rng = np.random.default_rng(7)
    texts = ["", "<|im_end|> special inside", "ünïcödé — dash", "\n\n  spaces  \t tabs"]
    texts += [_text(rng, int(rng.integers(1, 60))) for _ in range(20)]
    tokenizer = copy.deepcopy(renderer.tokenizer)
    if padded:
        tokenizer.backend_tokenizer.enable_padding(length=64)
    r = PromptRenderer(tokenizer)
    reference = copy.deepcopy(renderer.tokenizer)
    want = [reference(t, add_special_tokens=False, return_offsets_mapping=True) for t in texts]
    assert r.encode_many(texts, direct=direct) == [list(w["input_ids"]) for w in want]
    got = r.encode_many(texts, offsets=True, direct=direct)
    assert [list(ids) for ids, _ in got] == [list(w["input_ids"]) for w in want]
    assert [[tuple(o) for o in offs] for _, offs in got] == [[tuple(o) for o in w["offset_mapping"]] for w in want]
