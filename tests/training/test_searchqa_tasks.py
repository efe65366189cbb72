"""Search-QA task sources: the generated questions (retrievable, deterministic, written once), the real
HotpotQA sample searched over its own paragraphs, and the retrieval set-up a config names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("bm25s")

from training.config import make_config  # noqa: E402
from training.envs.searchqa.data import SearchDataError  # noqa: E402
from training.envs.searchqa.factbook import (FAMILIES, IN_DOMAIN_FAMILIES, OUT_OF_DOMAIN_FAMILIES,  # noqa: E402
                                             generate, retrievable)
from training.envs.searchqa.runtime import demonstration, evaluation_tasks  # noqa: E402
from training.envs.searchqa.tasks import SearchSource, corpus_index  # noqa: E402

SHARED = Path(__file__).resolve().parents[3] / "shared" / "searchqa"
SAMPLE = SHARED / "hotpotqa_distractor_sample100.jsonl"


@pytest.fixture(scope="module")
def wiki():
    return corpus_index("wiki")


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("searchqa_games")


def _cfg(games: Path, **kw):
    values = dict(env="searchqa", data="generated", games_dir=str(games), n_train_games=20, n_val_games=8,
                  progress=False, max_steps=4)
    values.update(kw)
    return make_config(values)


def test_wiki_corpus_is_the_packaged_summaries(wiki):
    assert len(wiki) == 10033 and wiki.build_seconds < 30
    titles = {p.title for p, _ in wiki.search(["capital of Kenya"], 3)[0]}
    assert "Kenya" in titles


def test_generated_questions_are_retrievable_split_and_deterministic(wiki):
    train, valid = generate(7, wiki)
    assert len(train) > 100 and len(valid) > 50
    assert {t.task_type for t in train} == set(IN_DOMAIN_FAMILIES)
    assert {t.task_type for t in valid} == set(FAMILIES)
    assert {t.split for t in train} == {"train"} and {t.split for t in valid} == {"valid"}
    train_countries = {t.game.rsplit(":", 1)[1] for t in train}
    assert not train_countries & {t.game.rsplit(":", 1)[1] for t in valid}  # countries held out
    assert [t.task_type for t in valid[:4]] == list(FAMILIES[:3]) + [valid[3].task_type]  # families interleaved
    for task in valid:
        hops = [*(t for t in task.queries[:-1]), task.queries[-1]]
        assert retrievable(wiki, hops[-1], task.answers)
        assert task.answers[0] not in task.question
    two_hop = [t for t in valid if len(t.queries) == 2]
    assert two_hop and all(t.task_type in ("factbook_location_capital", "factbook_former_capital") for t in two_hop)
    assert generate(7, wiki) == (train, valid)
    assert generate(8, wiki)[1] != valid
    assert set(OUT_OF_DOMAIN_FAMILIES).isdisjoint(IN_DOMAIN_FAMILIES)


def test_generated_source_writes_once_and_plays_expert(games, wiki):
    cfg = _cfg(games)
    source = SearchSource.from_config(cfg)
    folder = games / "searchqa" / "seed0"
    assert source.origin == f"generated:{folder}" and not source.real
    assert len(source.train) == 20 and len(source.valid) == 8
    stamp = (folder / "valid.jsonl").stat().st_mtime_ns
    meta = json.loads((folder / "meta.json").read_text())
    again = SearchSource.from_config(_cfg(games, n_val_games=3))
    assert (folder / "valid.jsonl").stat().st_mtime_ns == stamp and again.valid == source.valid[:3]
    assert meta["n_valid"] >= 8 and meta["seed"] == 0
    try:
        env = source.make_env(source.valid[:4], max_steps=4)
        env.reset()
        plays = [demonstration(t) for t in source.valid[:4]]
        final = {}
        for k in range(max(len(p) for p in plays)):
            results = env.step([p[k][0] if k < len(p) else "" for p in plays])
            assert all(r.feedback_label == "valid" for r, p in zip(results, plays) if k < len(p))
            final.update({i: r for i, r in enumerate(results) if r.active and r.done})
        assert len(final) == 4 and all(r.won and r.score == 1.0 for r in final.values())
        env.close()
        assert source.server is not None and not source.server.closed
        with source.make_env(source.valid[:1], max_steps=50) as capped:  # config default 50: the entry's cap 4
            assert capped.max_steps == 4
    finally:
        source.close()
    assert source.server.closed


def test_task_types_filter(games):
    source = SearchSource.from_config(_cfg(games, task_types="factbook_former_capital"))
    assert source.valid and {t.task_type for t in source.valid} == {"factbook_former_capital"}
    assert source.train == []  # an out-of-domain family has no training questions


def test_config_errors_name_data_and_dead_url(games, tmp_path):
    with pytest.raises(SearchDataError, match="data: no Search-QA questions named"):
        SearchSource.from_config(_cfg(games, data=None))
    with pytest.raises(SearchDataError, match=r"retrieval_urls: health check failed: retrieval server "
                                              r"http://127.0.0.1:9/retrieve"):
        SearchSource.from_config(_cfg(games, retrieval_urls="http://127.0.0.1:9", retrieval_timeout=2.0))
    (tmp_path / "nq_test.jsonl").write_text(json.dumps({"question": "q", "golden_answers": ["a"]}) + "\n")
    with pytest.raises(SearchDataError, match="no training questions"):
        SearchSource.from_config(_cfg(games, data=str(tmp_path), retrieval_corpus="wiki"))


def test_external_url_is_used_after_its_health_check(games):
    from training.envs.searchqa.server import RetrievalServer

    with RetrievalServer(corpus_index("wiki")) as server:
        source = SearchSource.from_config(_cfg(games, retrieval_urls=f"{server.url},{server.url[:-9]}"))
        assert source.urls == (server.url, server.url) and source.retrieval_urls() == source.urls
        assert source.describe()["retrieval"] == [server.url, server.url]


@pytest.mark.skipif(not SAMPLE.is_file(), reason="../shared/searchqa (real HotpotQA sample) is not available")
def test_real_hotpotqa_sample_over_its_own_paragraphs(games):
    cfg = _cfg(games, data=str(SHARED), val_split="hotpotqa", retrieval_corpus="hotpotqa")
    source, origin = evaluation_tasks(cfg, "hotpotqa", None)
    try:
        assert origin == f"real:{SHARED}:hotpotqa" and len(source.valid) == 100 and source.real
        assert source.corpus.startswith("hotpotqa:") and {t.task_type for t in source.valid} == {"hotpotqa"}
        env = source.make_env(source.valid, max_steps=4)
        env.reset()
        results = env.step([f"<search>{t.question}</search>" for t in source.valid])
        found = sum(any(a in r.obs for a in t.answers) for r, t in zip(results, source.valid))
        assert found >= 50  # BM25 over the ~1,000 paragraphs finds the answer text for most questions
        final = env.step([f"<answer>{t.answers[0]}</answer>" for t in source.valid])
        assert all(r.won for r in final)
        env.close()
    finally:
        source.close()
