"""ReplayScorer and friends against the plain unbatched forward pass (sequence_logprobs)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from ocsd.replay.scoring import (
    ReplayScorer,
    ScoreItem,
    ScoringError,
    response_logprobs,
    score_views,
    sequence_logprobs,
)

TOL_FP32 = 1e-4


def random_items(rng: np.random.Generator, n: int, *, vocab: int = 49152, max_prompt: int = 80) -> list[ScoreItem]:
    """Steps with a shared prompt, 1-4 views with their own (possibly empty) evidence."""
    items = []
    for i in range(n):
        prompt = rng.integers(3, vocab, int(rng.integers(1, max_prompt))).tolist()
        response = rng.integers(3, vocab, int(rng.integers(1, 25))).tolist()
        nviews = int(rng.integers(1, 5))
        contexts = {}
        for v in range(nviews):
            evidence = rng.integers(3, vocab, int(rng.integers(0, 15))).tolist()
            contexts[f"v{v}"] = prompt + evidence
        items.append(ScoreItem(contexts, response, key=("traj", i)))
    return items


def max_err(model, items, results) -> float:
    err = 0.0
    for item, res in zip(items, results):
        assert list(res) == list(item.contexts)
        for view, ctx in item.contexts.items():
            ref = sequence_logprobs(model, ctx, item.response_ids)
            assert res[view].dtype == np.float32
            assert res[view].shape == (len(item.response_ids),)
            err = max(err, float(np.abs(res[view] - ref).max()))
    return err


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize(("seed", "budget"), [(0, 1), (1, 300), (2, 100_000)])
def test_scorer_matches_unbatched_reference(tiny_model, seed, budget, packed):
    items = random_items(np.random.default_rng(seed), 8)
    scorer = ReplayScorer(tiny_model, token_budget=budget, progress=False, min_prefix=1, packed=packed)
    assert scorer.packed is packed
    assert max_err(tiny_model, items, scorer.score(items)) < TOL_FP32


def test_packed_is_the_cuda_default_and_uses_the_output_head(tiny_model):
    assert ReplayScorer(tiny_model, progress=False).packed is False  # CPU: prefix cache
    scorer = ReplayScorer(tiny_model, progress=False, packed=True)
    assert scorer._parts is not None and scorer._parts[1] is tiny_model.get_output_embeddings()


def test_packed_rows_hold_a_tree_per_step(tiny_model, monkeypatch):
    """One forward per batch; each branch sees the prefix and itself, never another branch."""
    from ocsd.replay.scoring.planning import WIDTH_MULTIPLE

    calls = []
    decoder = tiny_model.get_decoder()
    original = decoder.forward

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(decoder, "forward", spy)
    prefix, a, b, response = [5, 6, 7], [8, 9], [10], [11, 12]
    item = ScoreItem({"a": prefix + a, "b": prefix + b}, response)
    ReplayScorer(tiny_model, progress=False, min_prefix=1, packed=True).score([item])
    assert len(calls) == 1
    pos, mask = calls[0]["position_ids"][0].tolist(), calls[0]["attention_mask"][0, 0]
    # [P P P | a a r0 | b r0 | pad ...]: branch positions restart after the prefix
    assert pos[:8] == [0, 1, 2, 3, 4, 5, 3, 4]
    assert calls[0]["input_ids"].shape[1] % WIDTH_MULTIPLE == 0
    assert mask[6, :3].all() and not mask[6, 3:6].any() and mask[6, 6]  # b's first token: prefix + itself
    assert mask[5, :6].all() and not mask[5, 6:].any()  # a's last token: prefix and branch a


def test_packed_without_a_plain_output_head(tiny_model, monkeypatch):
    """Models whose logits are not lm_head(hidden) (soft-capped, scaled) go through the full forward."""
    from ocsd.replay.scoring import scorer as scorer_module

    monkeypatch.setattr(scorer_module, "head_parts", lambda model: None)
    items = random_items(np.random.default_rng(11), 6)
    scorer = ReplayScorer(tiny_model, progress=False, min_prefix=1, packed=True)
    assert scorer._parts is None
    assert max_err(tiny_model, items, scorer.score(items)) < TOL_FP32


def test_soft_capped_models_have_no_head_parts(tiny_model):
    from ocsd.replay.scoring.checks import head_parts

    capped = copy.deepcopy(tiny_model)
    capped.config.final_logit_softcapping = 30.0
    assert head_parts(tiny_model) is not None and head_parts(capped) is None


def test_lora_wrapped_model_matches_reference(tiny_model):
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(copy.deepcopy(tiny_model), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                                             init_lora_weights=False))
    model.eval()
    scorer = ReplayScorer(model, progress=False, min_prefix=1, packed=True)
    assert scorer._parts is not None
    items = random_items(np.random.default_rng(12), 5)
    assert max_err(model, items, scorer.score(items)) < TOL_FP32


def test_without_prefix_sharing_matches_reference(tiny_model):
    items = random_items(np.random.default_rng(5), 8)
    scorer = ReplayScorer(tiny_model, progress=False, share_prefix=False, token_budget=500)
    assert max_err(tiny_model, items, scorer.score(items)) < TOL_FP32


def test_context_that_is_prefix_of_another_and_identical_views(tiny_model):
    rng = np.random.default_rng(3)
    prompt = rng.integers(3, 49152, 40).tolist()
    response = rng.integers(3, 49152, 7).tolist()
    items = [
        ScoreItem({"student": prompt, "full": prompt + [11, 12, 13]}, response),  # empty suffix for one view
        ScoreItem({"a": prompt, "b": list(prompt)}, response),  # identical contexts
        ScoreItem({"only": prompt[:1]}, response[:1]),  # one-token context and response
    ]
    res = ReplayScorer(tiny_model, progress=False, min_prefix=1).score(items)
    assert max_err(tiny_model, items, res) < TOL_FP32
    np.testing.assert_allclose(res[1]["a"], res[1]["b"], rtol=0, atol=1e-5)


def test_given_views_are_returned_unchanged_and_not_scored(tiny_model):
    rng = np.random.default_rng(4)
    prompt = rng.integers(3, 49152, 30).tolist()
    response = rng.integers(3, 49152, 6).tolist()
    student = rng.normal(size=6).astype(np.float64)
    item = ScoreItem(
        {"student": prompt, "full": prompt + [5, 6], "ablated": prompt + [7]},
        response,
        given={"student": student, "extra": np.ones(6)},
    )
    (res,) = ReplayScorer(tiny_model, progress=False).score([item])
    assert list(res) == ["student", "full", "ablated", "extra"]
    np.testing.assert_array_equal(res["student"], student.astype(np.float32))
    assert res["student"].dtype == np.float32
    np.testing.assert_array_equal(res["extra"], np.ones(6, dtype=np.float32))
    ref = sequence_logprobs(tiny_model, prompt + [5, 6], response)
    assert np.abs(res["full"] - ref).max() < TOL_FP32


def test_score_views_functional_form(tiny_model):
    items = random_items(np.random.default_rng(6), 3)
    res = score_views(tiny_model, items, progress=False)
    assert max_err(tiny_model, items, res) < TOL_FP32


def test_progress_bar_runs(tiny_model, capsys):
    items = random_items(np.random.default_rng(7), 2)
    ReplayScorer(tiny_model, progress=True).score(items)
    assert "replay scoring" in capsys.readouterr().err


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_close_to_half_precision_reference(tiny_model, dtype):
    model = copy.deepcopy(tiny_model).to(dtype)
    items = random_items(np.random.default_rng(8), 4)
    res = ReplayScorer(model, progress=False, min_prefix=1).score(items)
    # bf16 keeps ~3 significant digits (fp16 ~4); batching and the split prefix/continuation pass change the
    # rounding order, so agreement is to a few hundredths of a nat (docs/algorithm.md, 'Exactness').
    assert max_err(model, items, res) < 0.1


def test_public_names_come_from_their_modules():
    import ocsd.replay.scoring as scoring
    from ocsd.replay.scoring import planning, reference, scorer

    homes = {name: module for module in (planning, reference, scorer) for name in module.__all__}
    for name in scoring.__all__:
        assert getattr(scoring, name) is getattr(homes[name], name), name


def test_planning_shares_prefixes_and_batches_every_entry_once():
    from ocsd.replay.scoring.planning import cache_batches, packed_batches, packed_length, padded_width, plan_entries

    items = random_items(np.random.default_rng(13), 30)
    items[0] = ScoreItem(items[0].contexts, items[0].response_ids, given={"v0": np.zeros(len(items[0].response_ids))})
    entries = plan_entries(items, share_prefix=True, min_prefix=1)
    for entry in entries:
        for row in entry.rows:
            assert entry.prefix + row.suffix == list(items[row.item].contexts[row.view]) and row.suffix
            assert row.response == list(items[row.item].response_ids)
    planned = sorted((r.item, r.view) for e in entries for r in e.rows)
    assert planned == sorted((i, v) for i, it in enumerate(items) for v in it.contexts if not (it.given and v in it.given))
    for budget in (1, 300, 5000):
        cache = cache_batches(entries, budget)
        assert sorted(id(e) for b in cache for e in b) == sorted(map(id, entries))
        assert all(len({bool(e.prefix) for e in batch}) == 1 for batch in cache)
        packed = packed_batches(entries, budget)
        assert sorted(id(e) for b in packed for e in b) == sorted(map(id, entries))
        for batch in packed:
            assert len(batch) == 1 or len(batch) * padded_width(max(map(packed_length, batch))) <= budget


# ---------------------------------------------------------------------------- bad input


def test_empty_response_is_an_error(tiny_model):
    with pytest.raises(ScoringError, match=r"item 0 \(key='s0'\): empty response"):
        ReplayScorer(tiny_model, progress=False).score([ScoreItem({"full": [1, 2]}, [], key="s0")])


def test_empty_context_is_an_error(tiny_model):
    with pytest.raises(ScoringError, match="view 'full': empty context"):
        ReplayScorer(tiny_model, progress=False).score([ScoreItem({"full": []}, [3])])


def test_views_with_different_responses_are_an_error():
    with pytest.raises(ScoringError, match="must score the same tokens"):
        ScoreItem.from_views({"full": ([1, 2], [5, 6]), "ablated": ([1, 3], [5, 7])}, key=(2, 4))
    item = ScoreItem.from_views({"full": ([1, 2], [5, 6]), "ablated": ([1, 3], [5, 6])})
    assert item.response_ids == [5, 6] and item.contexts == {"full": [1, 2], "ablated": [1, 3]}


def test_given_of_wrong_length_is_an_error(tiny_model):
    item = ScoreItem({"full": [1, 2]}, [3, 4], key="k", given={"student": np.zeros(3)})
    with pytest.raises(ScoringError, match="view 'student' have length 3, the response has 2"):
        ReplayScorer(tiny_model, progress=False).score([item])


def test_too_long_names_the_step(tiny_model):
    items = [ScoreItem({"full": [1] * 10}, [2] * 5, key="ok"), ScoreItem({"full": [1] * 30}, [2] * 5, key=("t", 7))]
    with pytest.raises(ScoringError, match=r"item 1 \(key=\('t', 7\)\), view 'full'.*35 tokens exceeds.*32"):
        ReplayScorer(tiny_model, progress=False, max_length=32).score(items)
    default = ReplayScorer(tiny_model, progress=False)
    assert default.max_length == tiny_model.config.max_position_embeddings


def test_sliding_window_models_do_not_share_prefixes(make_tiny_model):
    model = make_tiny_model(vocab_size=64, seed=1)
    model.config.layer_types = ["sliding_attention", "full_attention"]
    assert ReplayScorer(model, progress=False).share_prefix is False
    with pytest.raises(ValueError, match="full-attention"):
        ReplayScorer(model, progress=False, share_prefix=True)
    with pytest.raises(ValueError, match="packed=True needs a full-attention"):
        ReplayScorer(model, progress=False, packed=True)


def test_sliding_window_caps_the_length(make_tiny_model):
    """Explicit 4-D masks replace a model's windowed masks: longer sequences are refused, shorter ones exact."""
    model = make_tiny_model(vocab_size=64, seed=1)
    model.config.layer_types = ["sliding_attention", "full_attention"]
    model.config.sliding_window = 12
    scorer = ReplayScorer(model, progress=False)
    assert scorer.max_length == 12
    short = ScoreItem({"a": [1, 2, 3, 4], "b": [1, 2, 5]}, [6, 7, 8], key="short")
    res = scorer.score([short])[0]
    for view, ctx in short.contexts.items():
        assert np.abs(res[view] - sequence_logprobs(model, ctx, short.response_ids)).max() < TOL_FP32
    with pytest.raises(ScoringError, match=r"key='long'.*exceeds the model's sliding window 12"):
        scorer.score([ScoreItem({"a": list(range(1, 11))}, [5, 6, 7], key="long")])
    with pytest.raises(ScoringError, match="sliding window 12"):
        response_logprobs(model, [(list(range(1, 11)), [5, 6, 7])])


# ---------------------------------------------------------------------------- response_logprobs


def random_pairs(rng, n):
    return [
        (rng.integers(3, 49152, int(rng.integers(1, 60))).tolist(), rng.integers(3, 49152, int(rng.integers(1, 20))).tolist())
        for _ in range(n)
    ]


def test_response_logprobs_list_and_padded(tiny_model):
    pairs = random_pairs(np.random.default_rng(9), 9)
    listed = response_logprobs(tiny_model, pairs, token_budget=150)
    padded, mask = response_logprobs(tiny_model, pairs, padded=True)
    assert padded.dtype == torch.float32 and mask.dtype == torch.bool
    assert padded.shape == (9, max(len(r) for _, r in pairs))
    for i, (prompt, response) in enumerate(pairs):
        ref = sequence_logprobs(tiny_model, prompt, response)
        assert listed[i].shape == (len(response),)
        assert np.abs(listed[i].numpy() - ref).max() < TOL_FP32
        assert int(mask[i].sum()) == len(response)
        assert np.abs(padded[i, : len(response)].numpy() - ref).max() < TOL_FP32
        assert torch.all(padded[i, len(response) :] == 0)


def test_response_logprobs_gradients_match_unbatched(make_tiny_model):
    model = make_tiny_model(vocab_size=128, seed=2)
    rng = np.random.default_rng(10)
    pairs = [(rng.integers(0, 128, int(rng.integers(2, 30))).tolist(), rng.integers(0, 128, int(rng.integers(1, 9))).tolist()) for _ in range(5)]
    weights = [torch.tensor(rng.normal(size=len(r)), dtype=torch.float32) for _, r in pairs]

    model.zero_grad()
    lps = response_logprobs(model, pairs, grad=True, token_budget=60)
    assert all(lp.requires_grad for lp in lps)
    sum((w * lp).sum() for w, lp in zip(weights, lps)).backward()
    batched = {n: p.grad.clone() for n, p in model.named_parameters()}

    model.zero_grad()
    for (prompt, response), w in zip(pairs, weights):
        ids = torch.tensor([prompt + response])
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt) :, None])[:, 0]
        (w * lp).sum().backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(batched[name], param.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_padded_positions_always_have_a_key_to_attend(make_tiny_model, monkeypatch):
    """Fully masked query rows make SDPA's CUDA backward return NaN gradients; none may reach the model."""
    model = make_tiny_model(vocab_size=64, seed=4)
    masks = []
    original = model.forward

    def spy(*args, **kwargs):
        masks.append(kwargs.get("attention_mask"))
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "forward", spy)
    pairs = [([1, 2, 3, 4, 5, 6, 7, 8], [9, 10]), ([3], [4, 5, 6, 7])]  # ragged: the second row is left-padded
    response_logprobs(model, pairs, grad=True)
    assert masks and all(m.dim() == 4 for m in masks)
    for m in masks:
        assert m.any(dim=-1).all(), "a query position attends to no key"


def test_response_logprobs_errors(tiny_model):
    with pytest.raises(ScoringError, match="item 1.*empty response"):
        response_logprobs(tiny_model, [([1], [2]), ([1], [])])
    with pytest.raises(ScoringError, match="item 0.*exceeds"):
        response_logprobs(tiny_model, [([1] * 20, [2])], max_length=10)


# ---------------------------------------------------------------------------- vLLM pieces


# ---------------------------------------------------------------------------- the real model


@pytest.mark.slow
def test_smollm2_matches_reference():
    from ocsd.replay.models import ModelNotFoundError, load_model

    try:
        model = load_model("smollm2")
    except ModelNotFoundError as err:
        pytest.skip(f"SmolLM2 is not available: {err}")
    rng = np.random.default_rng(12)
    items = []
    for i in range(2):
        prompt = rng.integers(3, 49152, 64).tolist()
        response = rng.integers(3, 49152, 12).tolist()
        items.append(ScoreItem({"full": prompt + rng.integers(3, 49152, 15).tolist(), "ablated": prompt + [28]}, response, key=i))
    res = ReplayScorer(model, progress=False).score(items)
    assert max_err(model, items, res) < TOL_FP32
