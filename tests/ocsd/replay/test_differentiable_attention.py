"""``differentiable_attention``: a differentiated forward on CUDA runs without cuDNN's attention kernel (whose
backward gave NaN gradients for padded bfloat16 rows on an H100); other passes keep torch's choice of kernel."""

from __future__ import annotations

import torch

from ocsd.replay.scoring.cache import differentiable_attention


def _enabled():
    cuda = torch.backends.cuda
    return {"cudnn": cuda.cudnn_sdp_enabled(), "flash": cuda.flash_sdp_enabled(),
            "efficient": cuda.mem_efficient_sdp_enabled(), "math": cuda.math_sdp_enabled()}


def test_a_differentiated_cuda_forward_leaves_cudnn_out_and_restores_the_choice_after():
    before = _enabled()
    with torch.enable_grad(), differentiable_attention(torch.device("cuda")):
        inside = _enabled()
    assert inside == {"cudnn": False, "flash": True, "efficient": True, "math": True}
    assert _enabled() == before


def test_forward_only_and_cpu_passes_keep_torchs_choice():
    before = _enabled()
    with torch.inference_mode(), differentiable_attention(torch.device("cuda")):
        assert _enabled() == before
    with torch.enable_grad(), differentiable_attention("cpu"):
        assert _enabled() == before


def test_gradients_through_the_scorer_are_unchanged_on_cpu():
    """The scorer's differentiable path still matches a plain autograd reference (the context is a no-op here)."""
    from ocsd.replay.scoring import response_logprobs
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    pairs = [([1, 2, 3, 4, 5], [6, 7]), ([8, 9], [10, 11, 12])]
    logp, mask = response_logprobs(model, pairs, grad=True, padded=True)
    (-(logp * mask).sum()).backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    total = 0
    for prompt, response in pairs:
        ids = torch.tensor([prompt + response])
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
        total = total - torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None]).sum()
    total.backward()
    for a, p in zip(got, model.parameters()):
        torch.testing.assert_close(a, p.grad, rtol=1e-4, atol=1e-5)
