"""The Search-QA engine: the built-in retrieval server over real HTTP on loopback, the client and its health
check, exact match, the episode protocol and labels, the question loaders, and the generated questions."""

from __future__ import annotations

import json
import socket
import types
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("bm25s")

from ocsd.environments import get_environment  # noqa: E402
from training.envs.searchqa.client import (Hit, RetrievalClient, RetrievalError, format_information,  # noqa: E402
                                           health_check, parse_urls)
from training.envs.searchqa.corpus import BM25Index, Passage, hotpotqa_passages  # noqa: E402
from training.envs.searchqa.data import (SearchDataError, SearchTask, exact_match, load_folder,  # noqa: E402
                                         normalize_answer)
from training.envs.searchqa.env import SearchBatchEnv, parse_action  # noqa: E402
from training.envs.searchqa.server import RetrievalServer  # noqa: E402

PASSAGES = [Passage("Kenya", "Kenya", "Kenya is a country in East Africa. Its capital is Nairobi."),
            Passage("Nairobi", "Nairobi", "Nairobi is the capital and largest city of Kenya."),
            Passage("Ghana", "Ghana", "Ghana, formerly the Gold Coast, has its capital at Accra."),
            Passage("Mount Kenya", "Mount Kenya", "Mount Kenya is the highest mountain in Kenya.")]
TASK = SearchTask("t:1", "valid", "factbook_capital", "What is the capital of Kenya?", ("Nairobi",),
                  queries=("capital of Kenya",))


@pytest.fixture(scope="module")
def server():
    with RetrievalServer(BM25Index(PASSAGES, name="small")) as srv:
        yield srv


def _post(url: str, payload: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/retrieve"


# ---------------------------------------------------------------- server and client over HTTP


def test_server_speaks_search_r1_protocol(server):
    status, body = _post(server.url, {"queries": ["capital of Kenya", "Accra Ghana"], "topk": 2, "return_scores": True})
    assert status == 200 and len(body["result"]) == 2
    first = body["result"][0]
    assert len(first) == 2 and first[0]["score"] >= first[1]["score"] > 0
    assert first[0]["document"]["contents"].startswith('"') and "\n" in first[0]["document"]["contents"]
    assert body["result"][1][0]["document"]["id"] == "Ghana"
    # SDAR's own server reads one 'query'; without return_scores the documents come bare
    status, body = _post(server.url, {"query": "Gold Coast", "topk": 1})
    assert status == 200 and body["result"][0][0]["contents"].startswith('"Ghana"\n')


@pytest.mark.parametrize("payload, field", [({"topk": 3}, "queries"), ({"queries": "x"}, "queries"),
                                            ({"queries": ["x"], "topk": 0}, "topk"),
                                            ({"queries": ["x"], "return_scores": "yes"}, "return_scores")])
def test_server_rejects_bad_requests(server, payload, field):
    status, body = _post(server.url, payload)
    assert status == 400 and field in body["error"]


def test_client_search_and_unknown_words(server):
    client = RetrievalClient(server.url, topk=3)
    hits = client.search("capital of Kenya")
    assert hits and all(isinstance(h, Hit) for h in hits) and {h.id for h in hits} <= {p.id for p in PASSAGES}
    assert client.search("zzzz qqqq") == []  # no known word: nothing found


def test_health_check_names_the_dead_url(server):
    dead = _dead_url()
    assert set(health_check([server.url])) == {server.url}
    with pytest.raises(RetrievalError, match=f"health check failed: retrieval server {dead}: .*refused"):
        health_check([server.url, dead], timeout=2)
    with pytest.raises(RetrievalError, match="after 2 attempts"):
        RetrievalClient(dead, retries=2).search("x")


def test_parse_urls():
    assert parse_urls("http://a:8000, http://b:8001/retrieve/") == ("http://a:8000/retrieve", "http://b:8001/retrieve")
    for bad in ("", " , ", "ftp://x"):
        with pytest.raises(RetrievalError, match="retrieval_urls"):
            parse_urls(bad)


def test_information_format_is_sdars():
    obs = format_information([Hit('"Kenya"\nKenya is a country.'), Hit('"Nairobi"\nA city.')])
    assert obs.startswith("<information>") and obs.endswith("</information>")
    assert json.loads(obs[len("<information>"):-len("</information>")]) == {
        "result": 'Doc 1: "Kenya"\nKenya is a country.\nDoc 2: "Nairobi"\nA city.\n'}
    assert format_information([]) == '<information>{"result": "No search results found."}</information>'


# ---------------------------------------------------------------- exact match


@pytest.mark.parametrize("pred, gold, ok", [
    ("Nairobi", ["nairobi"], True), ("  The  Nairobi. ", ["Nairobi"], True), ("an apple", ["Apple"], True),
    ("U.S.A.", ["USA"], True), ("Nairobi city", ["Nairobi"], False), ("Paris", ["Lyon", "paris!"], True),
    ("", ["Nairobi"], False), ("theatre", ["atre"], False), ("A", ["a"], True)])
def test_exact_match(pred, gold, ok):
    assert exact_match(pred, gold) is ok


def test_normalize_answer():
    assert normalize_answer("The Lord of the Rings!") == "lord of rings"
    assert normalize_answer("São  Tomé") == "são tomé"


# ---------------------------------------------------------------- the episode protocol


def _env(server, tasks=(TASK,), max_steps=4):
    return SearchBatchEnv(list(tasks), [server.url], max_steps=max_steps)


def test_search_then_answer_wins(server):
    with _env(server) as env:
        first = env.reset()[0]
        assert first.text == TASK.question and first.admissible == [] and first.task_type == "factbook_capital"
        r = env.step(["<search>capital of Kenya</search>"])[0]
        assert r.obs.startswith("<information>") and "Nairobi" in r.obs and not r.done
        assert (r.feedback_label, r.progress_label, r.operator, r.score) == ("valid", "progress", "search", None)
        again = env.step(["<search>capital of Kenya</search>"])[0]
        assert (again.feedback_label, again.progress_label) == ("ambiguous", "no_progress")
        done = env.step(["<answer>the Nairobi</answer>"])[0]
        assert done.done and done.won and done.score == 1.0 and done.reward == 1.0 and done.progress_label == "progress"
        late = env.step(["<answer>x</answer>"])[0]
        assert not late.active


def test_wrong_answer_is_a_loss_with_no_progress(server):
    with _env(server) as env:
        env.reset()
        r = env.step(["answer[Mombasa]"])[0]
        assert r.done and not r.won and r.score == 0.0
        assert (r.feedback_label, r.progress_label, r.operator) == ("ambiguous", "no_progress", "answer")


def test_malformed_and_empty_searches_are_invalid(server):
    with _env(server, max_steps=3) as env:
        env.reset()
        bad = env.step(["I think it is Nairobi"])[0]
        assert (bad.obs, bad.action_admissible, bad.feedback_label, bad.progress_label) == ("", False, "invalid",
                                                                                            "invalid")
        empty = env.step(["<search>zzzz qqqq</search>"])[0]
        assert "No search results found." in empty.obs and empty.action_admissible
        assert (empty.feedback_label, empty.progress_label) == ("invalid", "invalid")
        capped = env.step(["<search></search>"])[0]  # an empty query does not parse: malformed
        assert capped.done and capped.truncated and not capped.won and capped.score == 0.0
        assert capped.feedback_label == "invalid"


def test_parse_action():
    assert parse_action("<search> a  b </search>") == ("search", "a b")
    assert parse_action("Answer[Nairobi]") == ("answer", "Nairobi")
    for bad in ("", "<search></search>", "search", "<action>x</action>", "<search>a<search>b</search>"):
        assert parse_action(bad) is None


def test_batch_round_robin_over_urls_and_reload(server):
    with RetrievalServer(BM25Index(PASSAGES[:2], name="other")) as other:
        env = SearchBatchEnv([TASK, TASK], [server.url, other.url])
        assert [e.client.url for e in env.episodes] == [server.url, other.url]
        env.reset(seed=5)
        assert env.seeds == [5, 6]
        results = env.step(["<search>Gold Coast Accra</search>", "<search>Gold Coast Accra</search>"])
        assert "Ghana" in results[0].obs and results[1].feedback_label == "invalid"  # 'other' has no Ghana
        env.reload([TASK])
        assert len(env) == 1 and env.reset()[0].game == "t:1"
        env.close()
        assert env.closed
        with pytest.raises(RuntimeError):
            env.reset()


def test_registry_labels_and_runtime():
    spec = get_environment("searchqa")
    assert spec.labels.operator_of("<search>x</search>") == "search" and spec.labels.operator_of("look") == "other"
    # retrieved passages are free text: the general no-effect words do not make a search invalid
    assert spec.labels.feedback_label(True, "<information>it cannot be seen</information>", True) == "valid"
    assert set(spec.evaluation.splits) <= set(spec.task_types) and "factbook_capital" in spec.task_types
    runtime = spec.load_runtime()
    assert runtime.data_error is SearchDataError and runtime.demonstration(TASK)[-1][0] == "<answer>Nairobi</answer>"


def test_metrics_micro_average():
    runtime = get_environment("searchqa").load_runtime()
    step = types.SimpleNamespace(well_formed=True, feedback_label="valid")
    trajs = [types.SimpleNamespace(task_type=k, won=w, steps=[step]) for k, w in
             [("nq", True), ("nq", False), ("hotpotqa", True), ("popqa", False), ("bamboogle", True),
              ("factbook_capital_country", False)]]
    m = runtime.metrics(trajs)
    assert m["em_id"] == pytest.approx(2 / 3) and m["em_ood"] == pytest.approx(1 / 3)
    assert m["em_avg"] == pytest.approx(0.5) == m["success_rate"] and m["per_type"]["nq"]["em"] == 0.5
    assert {"n", "mean_steps", "well_formed_rate", "invalid_action_rate"} <= set(m)


# ---------------------------------------------------------------- loaders


def _write_parquet(path: Path, rows: list[dict]) -> None:
    import pandas as pd

    pd.DataFrame(rows).to_parquet(path)


def test_load_search_r1_parquet_and_flashrag_jsonl(tmp_path):
    _write_parquet(tmp_path / "train.parquet", [
        {"question": "who wrote hamlet?", "golden_answers": ["Shakespeare"], "data_source": "nq"},
        {"question": "q2", "reward_model": {"ground_truth": {"target": ["a", "b"]}}, "data_source": "hotpotqa"}])
    _write_parquet(tmp_path / "test.parquet", [
        {"question": "q3", "golden_answers": ["c"], "data_source": "2wikimultihopqa"}])
    (tmp_path / "bamboogle").mkdir()
    (tmp_path / "bamboogle" / "test.jsonl").write_text(json.dumps({"id": "b1", "question": "q4",
                                                                   "golden_answers": ["d"]}) + "\n")
    out = load_folder(tmp_path)
    assert [(t.task_type, t.answers) for t in out["train"]] == [("nq", ("Shakespeare",)), ("hotpotqa", ("a", "b"))]
    assert [(t.task_type, t.game) for t in out["test"]] == [("bamboogle", "bamboogle:test:b1"),
                                                            ("2wiki", "2wiki:test:0")]


@pytest.mark.parametrize("name, text, message", [
    ("nq_test.jsonl", '{"question": "q"}\n', r"nq_test.jsonl: row 0: no gold answers \(field 'golden_answers'"),
    ("nq_test.jsonl", '{"golden_answers": ["a"]}\n', r"row 0: no question \(field 'question'"),
    ("data.jsonl", '{"question": "q", "golden_answers": ["a"]}\n', r"row 0: unknown data set: field 'data_source'"),
    ("nq_test.jsonl", '{"question": "q", "golden_answers": ["a"]}\n{oops\n', "nq_test.jsonl: line 2 is not JSON"),
    ("hotpot_dev.json", '{"not": "a list"}', "hotpot_dev.json: must hold a JSON list"),
    ("test.parquet", "not parquet", "test.parquet: cannot be read")])
def test_bad_files_name_file_and_field(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(SearchDataError, match=message):
        load_folder(tmp_path)


def test_hotpotqa_official_json_and_empty_folder(tmp_path):
    with pytest.raises(SearchDataError, match="no question files"):
        load_folder(tmp_path)
    (tmp_path / "hotpot_dev_distractor_v1.json").write_text(json.dumps([
        {"_id": "x1", "question": "Which is older?", "answer": "A", "type": "comparison",
         "context": [["A", ["A was founded in 1900.", " It is old."]], ["B", ["B was founded in 1950."]]]}]))
    task = load_folder(tmp_path)["test"][0]
    assert (task.game, task.task_type, task.answers) == ("hotpotqa:test:x1", "hotpotqa", ("A",))
    assert task.context == (("A", "A was founded in 1900. It is old."), ("B", "B was founded in 1950."))
    assert [p.id for p in hotpotqa_passages([task.context, task.context])] == ["A", "B"]
