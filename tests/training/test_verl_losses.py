"""The distilling methods' loss in verl's actor (:mod:`training.verl.losses`) against the single-device update.

Fresh random batches (prompt and response ids, old log-probs away from the current ones so that PPO clips, GRPO-like
advantages, teacher log-probs) go through :func:`training.verl.parity.update_parity`: the single-device trainer's
``policy_loss`` summed over ``ppo_update``'s micro-batches and ``ppo_update``'s gradient norm, against the loss the
verl trainer gives the actor on micro-batches made by verl's own ``prepare_micro_batches``, with several micro-batch
sizes on each side. A tiny random model (vocabulary 256) keeps it to seconds.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

VOCAB = 256


@pytest.fixture(scope="module")
def model():
    from ocsd.replay.models import tiny_model

    return tiny_model(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, seed=5)


def random_batch(seed: int, n: int = 10):
    """A kept batch of ``n`` random rows (keys ``row0``...), with the teacher's log-probs among its scores."""
    from training.verl.batch import StepRow
    from training.verl.parity import KeptBatch

    rng = np.random.default_rng(seed)
    rows, old, adv, scores = [], {}, {}, {}
    for i in range(n):
        prompt = rng.integers(0, VOCAB, int(rng.integers(3, 20))).tolist()
        response = rng.integers(0, VOCAB, int(rng.integers(1, 12))).tolist()
        key = f"row{i}"
        rows.append(StepRow(key, prompt, response, {}))
        old[key] = rng.normal(-5.5, 0.4, len(response)).astype(np.float32)
        adv[key] = np.full(len(response), rng.normal(), np.float32)
        scores[(key, "teacher")] = rng.normal(-5.0, 1.5, len(response)).astype(np.float32)
    return KeptBatch(1, ["teacher"], rows, old, scores, adv)


def config(**overrides):
    from training.config import make_config

    return make_config(dict(kl_coef=0.01, sdar_coef=0.05, gate_beta=5.0, **overrides))


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_verl_loss_gives_the_single_device_loss_and_gradient(model, seed, loss_agg_mode):
    from training.verl.parity import update_batch, update_parity

    rows = update_batch(random_batch(seed))
    longest = max(len(p) + len(r) for p, r in zip(rows.prompt_ids, rows.response_ids))
    splits = (4096, longest + 12, longest)  # one micro-batch, then smaller ones
    report = update_parity(rows, config(loss_agg_mode=loss_agg_mode), model, ["sdar", "opsd", "grpo_opsd", "grpo"],
                           splits=splits)
    for name, got in report.items():
        runs = got["single_device"] + got["verl"]
        assert len(runs) == 6 and all(r["grad_norm"] > 0 for r in runs), name
        assert got["loss_max_rel"] < 1e-5 and got["grad_norm_max_rel"] < 1e-5, (name, got)
        # the splits really differ: one micro-batch, then several on each side
        assert got["single_device"][0]["micro_batches"] == 1 == got["verl"][0]["micro_batches"]
        assert min(r["micro_batches"] for r in got["verl"][1:]) > 1
        assert min(r["micro_batches"] for r in got["single_device"][1:]) > 1
        if name != "grpo":
            distill = [r["distill_loss"] for r in runs]
            assert max(distill) - min(distill) < 1e-5 * max(abs(d) for d in distill)
    # the three methods differ as their losses say: no policy-gradient term in OPSD, no gate in GRPO+OPSD
    losses = {name: got["verl"][0]["loss"] for name, got in report.items()}
    assert len({round(v, 6) for v in losses.values()}) == 4
    assert report["sdar"]["verl"][0]["distill_loss"] == pytest.approx(report["opsd"]["verl"][0]["distill_loss"])
    assert report["grpo_opsd"]["verl"][0]["distill_loss"] != pytest.approx(report["sdar"]["verl"][0]["distill_loss"])


def test_opsd_has_no_policy_gradient_term(model):
    """Other advantages leave OPSD's loss and gradient as they were, and change SDAR's."""
    from training.verl.parity import update_batch, update_parity

    rows = update_batch(random_batch(3))
    flipped = replace(rows, advantages=-3.0 * rows.advantages)
    cfg = config()
    before = update_parity(rows, cfg, model, ["opsd", "sdar"])
    after = update_parity(flipped, cfg, model, ["opsd", "sdar"])
    assert after["opsd"]["verl"][0]["loss"] == pytest.approx(before["opsd"]["verl"][0]["loss"], rel=1e-6)
    assert after["opsd"]["verl"][0]["grad_norm"] == pytest.approx(before["opsd"]["verl"][0]["grad_norm"], rel=1e-6)
    assert after["sdar"]["verl"][0]["loss"] != pytest.approx(before["sdar"]["verl"][0]["loss"], rel=1e-3)


def test_the_loss_needs_the_teacher_field(model):
    """A batch without ``teacher_log_probs`` is named, not read as zeros."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    from training.verl.losses import DistillationSettings, actor_loss_fn
    from training.verl.parity import loss_settings, verl_actor_config

    loss_fn = actor_loss_fn(verl_actor_config(loss_settings(config())), DistillationSettings("sdar"))

    def nested(rows):
        return torch.nested.as_nested_tensor(rows, layout=torch.jagged)

    data = TensorDict({"prompts": nested([torch.tensor([1, 2, 3])]), "responses": nested([torch.tensor([4, 5])]),
                       "response_mask": nested([torch.ones(2, dtype=torch.int64)]),
                       "old_log_probs": nested([torch.zeros(2)]), "advantages": nested([torch.ones(2)]),
                       "ref_log_prob": nested([torch.zeros(2)])}, batch_size=1)
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=2, global_batch_size=1)
    logp = nested([torch.full((5,), -1.0, requires_grad=True)])
    with pytest.raises(KeyError, match="teacher_log_probs.*'sdar'"):
        loss_fn(model_output={"log_probs": logp}, data=data)


def test_policy_loss_modes_and_settings():
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    from ocsd.algorithm.methods import get_method
    from training.verl.losses import (NO_POLICY_GRADIENT, DistillationSettings, distillation_settings,
                                      no_policy_gradient, policy_loss_mode)

    assert get_policy_loss_fn(NO_POLICY_GRADIENT) is no_policy_gradient
    zero, metrics = no_policy_gradient(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), torch.ones(2, 3))
    assert float(zero) == 0.0 and metrics == {}
    assert policy_loss_mode(get_method("opsd"), "vanilla") == NO_POLICY_GRADIENT
    assert policy_loss_mode(get_method("sdar"), "gspo") == "gspo"
    with pytest.raises(ValueError, match="loss_mode='gspo': method 'opsd' has no policy-gradient term"):
        policy_loss_mode(get_method("opsd"), "gspo")
    assert distillation_settings(config(method="grpo")) is None
    assert distillation_settings(config(method="sdar")) == DistillationSettings("sdar", 0.05, 5.0)
    with pytest.raises(ValueError, match="'ocsd' has no distillation term"):
        DistillationSettings("ocsd")
    with pytest.raises(ValueError, match="gate_beta=-1"):
        DistillationSettings("sdar", gate_beta=-1)
