"""The weight change a LoRA adapter applies (``training.resume_pack.lora_update_norm``), against peft's own merge."""

from __future__ import annotations

import numpy as np
import pytest
import torch

peft = pytest.importorskip("peft")

from training.resume_pack import lora_update_norm  # noqa: E402


class _Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(6, 10, bias=False)
        self.down = torch.nn.Linear(10, 6, bias=False)

    def forward(self, x):
        return self.down(self.up(x))


@pytest.mark.parametrize("rslora", [False, True])
def test_the_norm_is_what_peft_adds_to_the_weights_when_it_merges(rslora):
    rng = np.random.default_rng(11)
    torch.manual_seed(int(rng.integers(1 << 31)))
    config = peft.LoraConfig(r=3, lora_alpha=float(rng.uniform(1, 16)), target_modules=["up", "down"],
                             use_rslora=rslora, init_lora_weights=False)
    base = _Two()
    before = {name: p.detach().clone() for name, p in base.named_parameters()}
    model = peft.get_peft_model(base, config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.from_numpy(rng.normal(size=tuple(p.shape))))
    tensors = {k: v.clone() for k, v in peft.get_peft_model_state_dict(model).items()}
    merged = dict(model.merge_and_unload().named_parameters())
    brute = sum(float((merged[n].detach() - before[n]).double().square().sum()) for n in before) ** 0.5
    got = lora_update_norm(tensors, config.to_dict())
    assert got == pytest.approx(brute, rel=1e-5)


def test_a_lora_b_at_zero_moves_nothing_and_bad_adapters_are_refused():
    a, b = torch.ones(2, 5), torch.zeros(4, 2)
    assert lora_update_norm({"m.lora_A.weight": a, "m.lora_B.weight": b}, {"r": 2, "lora_alpha": 4}) == 0.0
    with pytest.raises(ValueError, match="do not pair up"):
        lora_update_norm({"m.lora_A.weight": a, "n.lora_B.weight": b}, {"r": 2, "lora_alpha": 4})
    with pytest.raises(ValueError, match="rank_pattern"):
        lora_update_norm({"m.lora_A.weight": a, "m.lora_B.weight": b},
                         {"r": 2, "lora_alpha": 4, "rank_pattern": {"m": 4}})
