"""Rollout engines on the CPU: the weights a vLLM engine receives, the Hugging Face engine, the completion
rule, and the settings. The vLLM engine itself runs in tests/training/test_engines_gpu.py (``-m gpu``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

from ocsd.replay.models import tiny_model  # noqa: E402
from training.config import ConfigError, make_config  # noqa: E402
from training.rollout.engines import (EngineError, HFEngine, finished_ids, load_merged, make_engine,  # noqa: E402
                                      merged_copy, merged_weights, merges_lora, response_token_count)
from training.rollout.loop import GenerationSettings, generate  # noqa: E402


def _lora(model, seed: int):
    from peft import LoraConfig, get_peft_model

    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, bias="none",
                                            target_modules=["q_proj", "v_proj", "down_proj"]))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # B starts at zero: give the adapters a real delta
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return peft


def test_merged_weights_of_a_plain_model_are_its_parameters():
    model = tiny_model(vocab_size=64, seed=0)
    weights = merged_weights(model)
    params = dict(model.named_parameters(remove_duplicate=False))
    assert weights.keys() == params.keys()
    assert all(weights[k] is not None and torch.equal(weights[k], params[k]) for k in params)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merged_weights_equal_peft_merge_and_unload(seed):
    """Out-of-place merging matches peft's own merge, name for name, and leaves the adapter model as it was."""
    import copy

    peft = _lora(tiny_model(vocab_size=64, seed=seed), seed)
    before = {k: v.clone() for k, v in peft.state_dict().items()}
    weights = merged_weights(peft)
    reference = dict(copy.deepcopy(peft).merge_and_unload().named_parameters(remove_duplicate=False))
    assert weights.keys() == reference.keys()
    for name, ref in reference.items():
        torch.testing.assert_close(weights[name], ref, rtol=1e-6, atol=1e-6, msg=name)
    moved = [n for n in reference if "q_proj" in n and not torch.equal(weights[n], dict(
        peft.get_base_model().named_parameters())[n.replace("q_proj.", "q_proj.base_layer.")])]
    assert moved, "the adapters' deltas are in the merged weights"
    assert all(torch.equal(before[k], v) for k, v in peft.state_dict().items())


def test_merged_weights_match_the_model_outputs():
    """A plain model loaded with the merged weights computes what the LoRA model computes."""
    peft = _lora(tiny_model(vocab_size=64, seed=4), 4)
    plain = tiny_model(vocab_size=64, seed=99)
    plain.load_state_dict(merged_weights(peft), strict=False)
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(plain(ids).logits, peft(input_ids=ids).logits, rtol=1e-4, atol=1e-5)


def test_hf_engine_samples_what_generate_samples():
    tokenizer = _smollm2_tokenizer()
    model = tiny_model(vocab_size=len(tokenizer), seed=1).eval()
    prompts = [[1, 2, 3, 4], [5, 6], [7, 8, 9]]
    settings = GenerationSettings(max_new_tokens=6, temperature=1.0, batch=2)
    engine = make_engine("hf", model, max_model_len=64, gpu_memory_utilization=0.3, enforce_eager=False, seed=0)
    assert isinstance(engine, HFEngine)
    got = engine.responder(tokenizer, settings, seed=11)([0, 1, 2], prompts)
    torch.manual_seed(11)
    assert got == generate(model, tokenizer, prompts, settings)
    again = engine.responder(tokenizer, settings, seed=11)([0, 1, 2], prompts)
    assert again == got


def _smollm2_tokenizer():
    from ocsd.replay.models import ModelNotFoundError, load_tokenizer

    try:
        return load_tokenizer("smollm2")
    except ModelNotFoundError as err:
        pytest.skip(f"SmolLM2's tokenizer is not available: {err}")


def test_only_a_float32_lora_model_may_be_replaced_by_a_merged_copy():
    assert not merges_lora(tiny_model(vocab_size=64, seed=0))
    peft = _lora(tiny_model(vocab_size=64, seed=0), 0)
    assert merges_lora(peft)
    assert not merges_lora(peft.to(torch.bfloat16))  # a merged bfloat16 weight would round a small update away


@pytest.mark.parametrize("seed", [0, 1])
def test_the_merged_copy_holds_the_merged_weights_and_leaves_the_lora_model_alone(seed):
    peft = _lora(tiny_model(vocab_size=64, seed=seed), seed)
    before = {k: v.clone() for k, v in peft.state_dict().items()}
    plain = merged_copy(peft)
    assert not hasattr(plain, "peft_config") and not any(p.requires_grad for p in plain.parameters())
    params = dict(plain.named_parameters(remove_duplicate=False))
    weights = merged_weights(peft)
    assert weights.keys() == params.keys()
    assert all(torch.equal(params[k], w) for k, w in weights.items())
    assert all(torch.equal(before[k], v) for k, v in peft.state_dict().items())
    assert all(p.requires_grad for n, p in peft.named_parameters() if "lora_" in n)
    with torch.no_grad():  # an update of the adapters reaches the copy through load_merged, exactly
        for name, p in peft.named_parameters():
            if "lora_A" in name:
                p.add_(0.1)
    assert any(not torch.equal(params[k], w) for k, w in merged_weights(peft).items())
    load_merged(plain, peft)
    assert all(torch.equal(params[k], w) for k, w in merged_weights(peft).items())


def test_generate_on_the_merged_copy_samples_what_the_lora_model_samples():
    """Same seed, same samples; the kept log-probs are the LoRA model's to float32 rounding."""
    from ocsd.replay.scoring import response_logprobs

    tokenizer = _smollm2_tokenizer()
    peft = _lora(tiny_model(vocab_size=len(tokenizer), seed=3), 3).eval()
    engine = HFEngine(merged_copy(peft))
    prompts = [[1, 2, 3, 4], [5, 6], [7, 8, 9], [10, 11, 12, 13, 14]]
    settings = GenerationSettings(max_new_tokens=8, temperature=1.0, batch=3)
    scores: dict = {}
    got = engine.scored_responder(tokenizer, settings, 11, scores)([0, 1, 2, 3], prompts)
    torch.manual_seed(11)
    assert got == generate(peft, tokenizer, prompts, settings)
    for (p, r), lp in scores.items():
        torch.testing.assert_close(lp, response_logprobs(peft, [(p, r)])[0].float(), rtol=0, atol=1e-5)


def _completion(ids, reason, stop_reason=None):
    return SimpleNamespace(token_ids=ids, finish_reason=reason, stop_reason=stop_reason)


@pytest.mark.parametrize("ids, reason, stop_reason, expected", [
    ([5, 6, 2], "stop", None, [5, 6, 2]),  # EOS kept as vLLM returns it
    ([5, 6], "stop", None, [5, 6, 2]),  # EOS left out: added back, as generate ends with it
    ([5, 6], "stop", 7, [5, 6, 7]),  # stopped on another stop token
    ([5, 6, 9], "length", None, [5, 6, 9]),  # cut at max_tokens: every token
    ([5, 2, 6], "length", None, [5, 2]),  # anything after a stop token is dropped
])
def test_finished_ids_end_like_generate(ids, reason, stop_reason, expected):
    assert finished_ids(_completion(ids, reason, stop_reason), [2, 7], pad=0) == expected


def test_response_token_count():
    steps = [SimpleNamespace(response_ids=[1] * n) for n in (3, 4)]
    assert response_token_count([SimpleNamespace(steps=steps), SimpleNamespace(steps=steps[:1])]) == 10


def test_unknown_engine_is_refused():
    with pytest.raises(EngineError, match="rollout_engine='sglang'"):
        make_engine("sglang", tiny_model(vocab_size=64, seed=0), max_model_len=64, gpu_memory_utilization=0.3,
                    enforce_eager=False, seed=0)


def test_vllm_engine_needs_cuda():
    from training.rollout.engines import VLLMEngine

    with pytest.raises(EngineError, match="needs device=cuda"):
        VLLMEngine(tiny_model(vocab_size=64, seed=0), max_model_len=64)


@pytest.mark.parametrize("overrides, message", [
    ({"rollout_engine": "sglang"}, "rollout_engine='sglang': must be one of hf, vllm"),
    ({"rollout_engine": "vllm", "device": "cpu"}, "rollout_engine='vllm': needs device=cuda"),
    ({"vllm_gpu_memory_utilization": 0.0}, "vllm_gpu_memory_utilization=0.0"),
    ({"vllm_gpu_memory_utilization": 1.5}, "vllm_gpu_memory_utilization=1.5"),
])
def test_engine_settings_are_checked(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_config({"data": "generated", **overrides})
