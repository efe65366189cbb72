"""``rescoring.score_cache``: scores kept by what they are the scores of, read back bit for bit, never stale."""

from __future__ import annotations

import numpy as np
import pytest

from rescoring.score_cache import ScoreCache, weights_fingerprint


def _items(rng: np.random.Generator, n: int = 5):
    contexts = [{"full": rng.integers(0, 1000, rng.integers(3, 40)).tolist(),
                 "ablated": rng.integers(0, 1000, rng.integers(3, 40)).tolist()} for _ in range(n)]
    responses = [rng.integers(0, 1000, rng.integers(1, 9)).tolist() for _ in range(n)]
    scores = [{view: rng.normal(size=len(r)).astype(np.float32) for view in c} for c, r in zip(contexts, responses)]
    return contexts, responses, scores


@pytest.fixture
def rng():
    return np.random.default_rng(np.random.SeedSequence().entropy)  # fresh inputs every run


def test_scores_come_back_bit_for_bit_in_the_views_order(rng, tmp_path):
    contexts, responses, scores = _items(rng)
    cache = ScoreCache(tmp_path / "c")
    key = cache.key(["w", "float32"], contexts, responses)
    assert cache.load(key, contexts) is None and cache.misses == 1
    cache.save(key, scores)
    back = cache.load(key, contexts)
    assert cache.hits == 1 and [list(b) for b in back] == [list(c) for c in contexts]
    for got, want in zip(back, scores):
        for view in want:
            assert got[view].dtype == np.float32 and np.array_equal(got[view], want[view])
    assert [p.name for p in (tmp_path / "c").iterdir()] == [f"{key}.npz"]  # nothing left beside it


def test_any_change_to_the_items_or_settings_is_another_key(rng):
    contexts, responses, _ = _items(rng)
    cache = ScoreCache("unused")
    key = cache.key(["w", "float32"], contexts, responses)
    assert cache.key(["w", "float32"], [dict(c) for c in contexts], [list(r) for r in responses]) == key
    one_id = [dict(c) for c in contexts]
    one_id[2] = {**one_id[2], "full": one_id[2]["full"][:-1] + [one_id[2]["full"][-1] + 1]}
    renamed = [dict(c) for c in contexts]
    renamed[0] = {"full": renamed[0]["full"], "masked": renamed[0]["ablated"]}
    moved = [dict(c) for c in contexts]  # the same ids, one token moved from a context to its response
    moved[1] = {**moved[1], "full": moved[1]["full"][:-1]}
    others = {cache.key(["w", "float32"], one_id, responses), cache.key(["w", "float32"], renamed, responses),
              cache.key(["w", "bfloat16"], contexts, responses), cache.key(["w2", "float32"], contexts, responses),
              cache.key(["w", "float32"], contexts[:-1], responses[:-1]),
              cache.key(["w", "float32"], moved, [responses[0], [contexts[1]["full"][-1], *responses[1]],
                                                   *responses[2:]])}
    assert key not in others and len(others) == 6


def test_a_torn_file_is_scored_again_and_replaced(rng, tmp_path):
    contexts, responses, scores = _items(rng)
    cache = ScoreCache(tmp_path)
    key = cache.key(["w"], contexts, responses)
    (tmp_path / f"{key}.npz").write_bytes(b"torn")
    assert cache.load(key, contexts) is None
    cache.save(key, scores)
    assert np.array_equal(cache.load(key, contexts)[0]["full"], scores[0]["full"])


def test_the_weights_fingerprint_follows_the_weight_files(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"a" * 10)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("not weights")
    first = weights_fingerprint(tmp_path)
    (tmp_path / "notes.txt").write_text("other notes")
    assert weights_fingerprint(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"b" * 11)
    assert weights_fingerprint(tmp_path) != first
    assert weights_fingerprint("no-such-model-name") == "no-such-model-name"
