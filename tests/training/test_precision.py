"""Float32 master weights for bfloat16 training: AdamW's steps below a bfloat16 weight's spacing are kept."""

from __future__ import annotations

import io
import math

import pytest
import torch

from ocsd.replay.models import tiny_model
from training.precision import MasterWeightAdamW, make_optimizer, optimized_parameters


def _backward(params, grads) -> None:
    """A backward pass that leaves exactly ``grads`` (bfloat16-representable) on ``params``."""
    sum(((p.float() * g).sum() for p, g in zip(params, grads))).backward()


def _bf16_grads(gen, shapes):
    return [torch.randn(*s, generator=gen).bfloat16().float() for s in shapes]


def test_plain_adamw_on_bfloat16_loses_small_steps_master_weights_keep_them():
    weight = torch.full((64,), 0.02).bfloat16().float()  # the three start from the same value
    lr, steps = 1e-6, 200  # the paper's full fine-tuning lr: an AdamW step is about lr in size
    plain = torch.nn.Parameter(weight.bfloat16())
    opt_plain = torch.optim.AdamW([plain], lr=lr, weight_decay=0.0)
    mixed = torch.nn.Parameter(weight.bfloat16())
    opt_mixed = MasterWeightAdamW([mixed], lr=lr, weight_decay=0.0)
    ref = torch.nn.Parameter(weight.clone())
    opt_ref = torch.optim.AdamW([ref], lr=lr, weight_decay=0.0)
    for _ in range(steps):
        for p, opt in ((plain, opt_plain), (mixed, opt_mixed), (ref, opt_ref)):
            opt.zero_grad()
            _backward([p], [torch.ones(64)])
            opt.step()
    assert torch.equal(plain.detach(), weight.bfloat16())  # each step of 1e-6 rounded away
    assert torch.equal(opt_mixed.masters[0].detach(), ref.detach())  # the float32 trajectory exactly
    assert torch.equal(mixed.detach(), ref.detach().bfloat16())
    assert not torch.equal(mixed.detach(), weight.bfloat16())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_masters_follow_float32_adamw_on_random_gradients(seed):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(5, 7), (7,), (3, 2, 4)]
    init = [torch.randn(*s, generator=gen) * 0.05 for s in shapes]
    low = [torch.nn.Parameter(w.bfloat16()) for w in init]
    ref = [torch.nn.Parameter(w.bfloat16().float()) for w in init]  # the same starting values
    settings = dict(lr=float(torch.rand(1, generator=gen)) * 1e-3, weight_decay=0.01)
    opt, opt_ref = MasterWeightAdamW(low, **settings), torch.optim.AdamW(ref, **settings)
    for _ in range(6):
        grads = _bf16_grads(gen, shapes)
        for params, o in ((low, opt), (ref, opt_ref)):
            o.zero_grad()
            _backward(params, grads)
            o.step()
    for master, r, p in zip(opt.masters, ref, low):
        torch.testing.assert_close(master.detach(), r.detach(), rtol=1e-6, atol=1e-9)
        assert p.dtype == torch.bfloat16 and torch.equal(p.detach(), master.detach().bfloat16())


def test_gradients_accumulate_in_float32():
    param = torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))
    opt = MasterWeightAdamW([param], lr=1e-3)
    big, small = torch.full((4,), 256.0), torch.full((4,), 1.0)  # 256 + 1 is not a bfloat16 number
    _backward([param], [big])
    _backward([param], [small])
    assert param.grad is None
    assert torch.equal(opt.masters[0].grad, torch.full((4,), 257.0))
    assert torch.equal(torch.tensor(257.0).bfloat16().float(), torch.tensor(256.0))  # what bf16 would keep


def test_clipping_acts_on_the_masters_gradients():
    param = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16))
    opt = MasterWeightAdamW([param], lr=1e-3)
    _backward([param], [torch.tensor([3.0, 4.0, 0.0])])
    norm = torch.nn.utils.clip_grad_norm_(optimized_parameters(opt), 1.0)
    assert math.isclose(float(norm), 5.0)
    torch.testing.assert_close(opt.masters[0].grad, torch.tensor([0.6, 0.8, 0.0]))


def test_state_dict_round_trip_resumes_the_same_trajectory():
    gen = torch.Generator().manual_seed(3)
    init = torch.randn(16, generator=gen) * 0.02
    grads = [_bf16_grads(gen, [(16,)])[0] for _ in range(8)]

    def run(opt, param, gs):
        for g in gs:
            opt.zero_grad()
            _backward([param], [g])
            opt.step()

    whole = torch.nn.Parameter(init.bfloat16())
    opt_whole = MasterWeightAdamW([whole], lr=1e-5)
    run(opt_whole, whole, grads)
    first = torch.nn.Parameter(init.bfloat16())
    opt_first = MasterWeightAdamW([first], lr=1e-5)
    run(opt_first, first, grads[:4])
    buffer = io.BytesIO()
    torch.save({"optimizer": opt_first.state_dict()}, buffer)
    buffer.seek(0)
    resumed = torch.nn.Parameter(first.detach().clone())  # what the checkpoint's weights hold: rounded
    opt_resumed = MasterWeightAdamW([resumed], lr=1e-5)
    opt_resumed.load_state_dict(torch.load(buffer, weights_only=False)["optimizer"])
    run(opt_resumed, resumed, grads[4:])
    assert torch.equal(opt_resumed.masters[0].detach(), opt_whole.masters[0].detach())
    assert torch.equal(resumed.detach(), whole.detach())


def test_a_plain_adamw_state_of_an_older_checkpoint_loads():
    param = torch.nn.Parameter(torch.randn(8).bfloat16())
    old = torch.optim.AdamW([param], lr=1e-4)
    _backward([param], [torch.ones(8)])
    old.step()
    opt = MasterWeightAdamW([param], lr=1e-4)
    opt.load_state_dict(old.state_dict())
    assert opt.state[opt.masters[0]]["exp_avg"].dtype == torch.float32
    torch.testing.assert_close(opt.state[opt.masters[0]]["exp_avg"], old.state[param]["exp_avg"].float())


def test_a_master_of_another_shape_is_refused():
    opt = MasterWeightAdamW([torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16))], lr=1e-3)
    other = MasterWeightAdamW([torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))], lr=1e-3)
    with pytest.raises(ValueError, match=r"master weight 0 has shape \(4,\), the parameter \(3,\)"):
        opt.load_state_dict(other.state_dict())


def test_make_optimizer_picks_plain_adamw_for_float32_and_masters_otherwise():
    assert type(make_optimizer([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)) is torch.optim.AdamW
    f32, bf16 = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))
    opt = make_optimizer([f32, bf16], lr=1e-3)
    assert isinstance(opt, MasterWeightAdamW)
    assert opt.masters[0] is f32 and opt.masters[1] is not bf16  # float32 ones are stepped in place
    assert [t.dtype for t in optimized_parameters(opt)] == [torch.float32, torch.float32]


def test_ppo_update_of_a_bfloat16_lora_policy_moves_lora_a():
    """The paper-scale runs' setting (LoRA, lr 2e-5, bfloat16): LoRA's A matrices start at about 1/sqrt(width)
    and, stepped in bfloat16, would stay where they started."""
    pytest.importorskip("verl", reason="verl (verl extra) is not installed")
    from peft import LoraConfig, get_peft_model

    from ocsd.algorithm.methods import get_method
    from ocsd.replay.scoring import response_logprobs
    from training.update import LossSettings, UpdateBatch, ppo_update

    torch.manual_seed(0)
    model = get_peft_model(tiny_model(vocab_size=100, seed=0), LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"])).to(torch.bfloat16)
    lora_a = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_A" in n}
    pairs = [([1, 2, 3], [4, 5]), ([6, 7], [8, 9, 10])]
    old, mask = response_logprobs(model, pairs, padded=True)
    adv = torch.where(mask, torch.tensor([[1.0], [-1.0]]), torch.zeros(()))
    rows = UpdateBatch([p for p, _ in pairs], [r for _, r in pairs], old.float(), adv, mask)
    optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad], lr=2e-5, weight_decay=0.01)
    for _ in range(3):
        ppo_update(model, optimizer, get_method("grpo"), rows, LossSettings(kl_coef=0.0))
    moved = [n for n, p in model.named_parameters() if "lora_A" in n and not torch.equal(p.detach(), lora_a[n])]
    masters_moved = [m for m, (n, p) in zip(optimizer.masters, [(n, p) for n, p in model.named_parameters()
                                                                if p.requires_grad])
                     if "lora_A" in n and not torch.equal(m.detach(), lora_a[n].float())]
    assert masters_moved and len(masters_moved) == len(lora_a)
    assert all(p.dtype == torch.bfloat16 for n, p in model.named_parameters() if "lora_" in n)
    assert moved  # some of the accumulated steps already cross a bfloat16 spacing
