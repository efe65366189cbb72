"""``old_logprobs=rollout``: the Hugging Face engine keeps the log-probs of the tokens it sampled, under the raw
logits that sampled them, and the policy takes them as the old policy's until its weights change. Checked against
an independent forward pass over each (prompt, response) pair (``response_logprobs``) on a tiny random model."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from ocsd.replay.models import ModelNotFoundError, load_tokenizer, tiny_model  # noqa: E402
from ocsd.replay.scoring import padded_rows, response_logprobs  # noqa: E402
from training.config import ConfigError, make_config  # noqa: E402
from training.rollout.engines import HFEngine  # noqa: E402
from training.rollout.loop import GenerationSettings, generate, sampled_logprobs  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    try:
        return load_tokenizer("smollm2")
    except ModelNotFoundError as err:
        pytest.skip(f"SmolLM2's tokenizer is not available: {err}")


def _prompts(seed: int, n: int, vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)  # prompts of several lengths: left padding in every batch
    return [torch.randint(3, vocab, (int(torch.randint(3, 20, (1,), generator=gen)),), generator=gen).tolist()
            for _ in range(n)]


def test_sampled_logprobs_gather_the_log_softmax_of_each_steps_raw_logits():
    gen = torch.Generator().manual_seed(0)
    logits = [torch.randn(3, 11, generator=gen) for _ in range(4)]
    tokens = torch.randint(0, 11, (3, 4), generator=gen)
    want = torch.tensor([[torch.log_softmax(logits[t][b], -1)[tokens[b, t]].item() for t in range(4)]
                         for b in range(3)])
    torch.testing.assert_close(sampled_logprobs(logits, tokens), want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("seed, temperature, top_p", [(0, 1.0, 1.0), (1, 0.7, 1.0), (2, 0.7, 0.9)])
def test_generated_logprobs_are_the_policys_on_the_sampled_tokens(tokenizer, seed, temperature, top_p):
    """Whatever the sampling's temperature and top-p, the kept log-probs are the model's own (temperature 1, the
    whole vocabulary), equal to a forward pass over prompt and response; asking for them changes no sample."""
    model = tiny_model(vocab_size=len(tokenizer), seed=seed).eval()
    prompts = _prompts(seed, 5, len(tokenizer))
    settings = GenerationSettings(max_new_tokens=12, temperature=temperature, top_p=top_p, batch=3)
    torch.manual_seed(seed)
    plain = generate(model, tokenizer, prompts, settings)
    kept: list[torch.Tensor] = []
    torch.manual_seed(seed)
    responses = generate(model, tokenizer, prompts, settings, logprobs=kept)
    assert responses == plain
    assert [len(lp) for lp in kept] == [len(r) for r in responses]
    want = response_logprobs(model, list(zip(prompts, responses)))
    for got, ref in zip(kept, want):
        torch.testing.assert_close(got, ref.float().cpu(), rtol=0, atol=1e-4)


def test_the_scored_responder_keeps_each_pairs_logprobs_and_samples_as_the_plain_one(tokenizer):
    model = tiny_model(vocab_size=len(tokenizer), seed=5).eval()
    engine = HFEngine(model)
    prompts = _prompts(5, 4, len(tokenizer))
    settings = GenerationSettings(max_new_tokens=8, batch=4)
    scores: dict = {}
    responses = engine.scored_responder(tokenizer, settings, 9, scores)([0, 1, 2, 3], prompts)
    assert responses == engine.responder(tokenizer, settings, 9)([0, 1, 2, 3], prompts)
    assert set(scores) == {(tuple(p), tuple(r)) for p, r in zip(prompts, responses)}
    for (p, r), lp in scores.items():
        torch.testing.assert_close(lp, response_logprobs(model, [(p, r)])[0].float(), rtol=0, atol=1e-4)


def test_padded_rows_pad_with_zeros_and_mask_what_is_a_row():
    rows = [torch.tensor([1.0, 2.0]), torch.tensor([3.0]), torch.tensor([])]
    out, mask = padded_rows(rows)
    assert out.tolist() == [[1.0, 2.0], [3.0, 0.0], [0.0, 0.0]]
    assert mask.tolist() == [[True, True], [True, False], [False, False]]
    grad = torch.tensor([1.0, 2.0], requires_grad=True)
    padded, _ = padded_rows([grad * 2])
    padded.sum().backward()
    assert grad.grad.tolist() == [2.0, 2.0]  # a differentiable row stays differentiable


def test_the_policy_takes_the_rollouts_logprobs_until_its_weights_change(tmp_path, monkeypatch):
    pytest.importorskip("alfworld", reason="the ALFWorld engine (envs extra) is not installed")
    from training import policy as policy_module
    from training.envs.alfworld.tasks import GameSource
    from training.pipeline import step_tasks
    from training.policy import Policy

    cfg = make_config(dict(model="tiny", data="generated", games_dir=str(tmp_path / "games"), n_train_games=2,
                           n_val_games=1, batch_size=1, group_size=2, max_steps=2, max_response_length=8,
                           max_prompt_length=1024, temperature=0.7, lora_rank=4, old_logprobs="rollout",
                           progress=False, seed=3))
    policy = Policy(cfg, GameSource.from_config(cfg))
    try:
        trajs = policy.collect(1, step_tasks(policy, 1))
    finally:
        policy.close()
    pairs = [(s.prompt_ids, s.response_ids) for t in trajs for s in t.steps]
    assert len(pairs) >= 2
    want, want_mask = response_logprobs(policy.model, pairs, padded=True)

    def no_forward(*args, **kwargs):
        raise AssertionError("the rollout's log-probs were at hand: no forward pass should run")

    with monkeypatch.context() as patch:
        patch.setattr(policy_module, "response_logprobs", no_forward)
        got, mask = policy.logprobs(pairs)
    assert torch.equal(mask, want_mask.cpu())
    torch.testing.assert_close(got, want.float().cpu(), rtol=0, atol=1e-4)
    # a pair the rollout did not sample (a teacher's prompt, say): every pair is scored by a forward pass, on the
    # policy's merged copy (a LoRA model in float32), which is the LoRA model to float32 rounding
    assert policy.inference_model is not policy.model
    other = [(p[1:], r) for p, r in pairs]
    torch.testing.assert_close(policy.logprobs(other)[0],
                               response_logprobs(policy.inference_model, other, padded=True)[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(policy.logprobs(other)[0], response_logprobs(policy.model, other, padded=True)[0],
                               rtol=0, atol=1e-5)
    # after an update the kept log-probs are the old weights': a forward pass under the new ones replaces them
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.05)
    policy.weights_updated()
    new = response_logprobs(policy.model, pairs, padded=True)[0]
    assert (new - want).abs().max() > 1e-3
    torch.testing.assert_close(policy.logprobs(pairs)[0], new.float().cpu(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("settings, message", [
    (dict(old_logprobs="cached"), "old_logprobs='cached': must be one of recompute, rollout"),
    (dict(old_logprobs="rollout", rollout_engine="vllm"), "only with rollout_engine=hf, not vllm"),
])
def test_old_logprobs_settings_that_cannot_work_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_config(settings)
