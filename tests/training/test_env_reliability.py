"""Environments as the paper's protocol (SDAR's) has them, and their bad input as usage errors.

* Unusable task data or servers stop ``training.train``, ``training.collect`` and ``training.evaluate`` with one
  line naming the setting, file or URL and exit status 2, before the run folder exists; the environment servers
  refuse a port out of range or in use the same way.
* Search-QA: a data folder is searched where a setting says; validation questions come in a stratified order, so
  any prefix samples every data set; the paper config validates on all of them; SDAR's well-formedness rule and
  invalid-action penalty.
* WebShop: search finds what WebShop's index holds.
"""

from __future__ import annotations

import json
import socket
import types
from pathlib import Path

import pytest

from ocsd.environments import get_environment
from training.config import load_config, make_config

ROOT = Path(__file__).resolve().parents[2]
ALFWORLD = ROOT.parent / "shared" / "alfworld"
"""387 real ALFWorld trials (valid_seen, valid_train), when this checkout has them beside it."""
CONFIGS = ROOT / "training" / "configs"
GOALS_ROW = {"task": "i need a red mug, and price lower than 20.00 dollars \n[Search]\n", "session_idx": "fixed_0",
             "key": {"asin": "B000000001", "query": "mugs", "name": "Red Mug", "goal_options": []}}


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _questions(kind: str, n: int, split: str = "test") -> list[dict]:
    return [{"question": f"{kind} question {i}?", "golden_answers": [f"{kind} {i}"], "data_source": kind,
             "id": f"{split}{i}"} for i in range(n)]


@pytest.fixture(scope="module")
def qa_folder(tmp_path_factory) -> Path:
    """Search-R1's layout: train.parquet (NQ + HotpotQA) and test.parquet with the seven data sets, NQ first."""
    pd = pytest.importorskip("pandas")
    folder = tmp_path_factory.mktemp("searchr1")
    sizes = {"nq": 60, "triviaqa": 40, "popqa": 40, "hotpotqa": 30, "2wikimultihopqa": 30, "musique": 10,
             "bamboogle": 4}
    rows = [r for kind, n in sizes.items() for r in _questions(kind, n)]
    pd.DataFrame(rows).to_parquet(folder / "test.parquet")
    pd.DataFrame(_questions("nq", 5, "train") + _questions("hotpotqa", 5, "train")).to_parquet(folder / "train.parquet")
    return folder


def _one_error_line(err: str, *fragments: str) -> str:
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: "), err
    for fragment in fragments:
        assert fragment in last, (fragment, last)
    return last


# ------------------------------------------------------------------------------------------------------
# bad task data and servers: one line, exit 2, nothing written
# ------------------------------------------------------------------------------------------------------


def _bad_inputs(tmp: Path, qa: Path) -> dict[str, tuple[list[str], tuple[str, ...]]]:
    goals = tmp / "webshop"
    goals.mkdir()
    (goals / "webshop_goals_fixed100.json").write_text(json.dumps([GOALS_ROW]))
    corrupt = tmp / "corrupt"
    corrupt.mkdir()
    (corrupt / "train.parquet").write_bytes(b"PAR1 this is not a parquet file")
    empty = tmp / "empty"
    empty.mkdir()
    qa_set = [f"data={qa}", "retrieval_corpus=wiki"]
    return {
        "searchqa: folder of another environment": (["env=searchqa", f"data={goals}", "retrieval_corpus=wiki"],
                                                    ("webshop_goals_fixed100.json: row 0: no question",)),
        "searchqa: folder without questions": (["env=searchqa", f"data={empty}", "retrieval_corpus=wiki"],
                                               ("no question files",)),
        "searchqa: corrupt parquet": (["env=searchqa", f"data={corrupt}", "retrieval_corpus=wiki"],
                                      ("train.parquet: cannot be read",)),
        "searchqa: unknown val_split": (["env=searchqa", *qa_set, "val_split=nqq"], ("val_split='nqq'",)),
        "searchqa: no retrieval named": (["env=searchqa", f"data={qa}"], ("retrieval_corpus=wiki", "retrieval_urls")),
        "searchqa: corpus and urls": (["env=searchqa", *qa_set, "retrieval_urls=http://127.0.0.1:9"],
                                      ("retrieval_corpus='wiki' and retrieval_urls",)),
        "searchqa: hotpotqa corpus without paragraphs": (["env=searchqa", f"data={qa}", "retrieval_corpus=hotpotqa"],
                                                         ("retrieval_corpus=hotpotqa", "'context' paragraphs")),
        "searchqa: dead retrieval_urls": (["env=searchqa", f"data={qa}", "retrieval_urls=http://127.0.0.1:9",
                                           "retrieval_timeout=2"], ("retrieval_urls: health check failed",
                                                                    "http://127.0.0.1:9/retrieve")),
        "searchqa: malformed retrieval_urls": (["env=searchqa", f"data={qa}", "retrieval_urls=ftp://x"],
                                               ("retrieval_urls: 'ftp://x' is not an http",)),
        "webshop: evaluation goals given to training": (["env=webshop", f"data={goals}"], ("evaluation set",)),
        "webshop: dead webshop_url": (["env=webshop", "webshop_url=http://127.0.0.1:9", "webshop_goals=synthetic"],
                                      ("webshop_url: cannot reach http://127.0.0.1:9/fixed_0",)),
        "webshop: malformed webshop_url": (["env=webshop", "webshop_url=ftp://x", "webshop_goals=synthetic"],
                                           ("webshop_url='ftp://x'",)),
        "webshop: goals of the server unsaid": (["env=webshop", "webshop_url=http://127.0.0.1:9"],
                                                ("webshop_goals=None", "webshop_goals=synthetic")),
        "alfworld: folder without games": (["env=alfworld", f"data={empty}"], ("no solvable .tw-pddl games",)),
        "alfworld: folder of another environment": (["env=alfworld", f"data={goals}"], ("no solvable .tw-pddl",)),
        "alfworld: unknown val_split (real games)": (["env=alfworld", f"data={ALFWORLD}", "train_split=valid_train",
                                                      "val_split=nope"], ("val_split='nope': no solvable",)),
    }


QUICK = ["model=tiny", "device=cpu", "progress=false", "max_steps=1", "max_response_length=4",
         "max_prompt_length=1024"]
"""Settings that keep a command that wrongly accepts its input to seconds."""
CASES = ["searchqa: folder of another environment", "searchqa: folder without questions", "searchqa: corrupt parquet",
         "searchqa: unknown val_split", "searchqa: no retrieval named", "searchqa: corpus and urls",
         "searchqa: hotpotqa corpus without paragraphs", "searchqa: dead retrieval_urls",
         "searchqa: malformed retrieval_urls", "webshop: evaluation goals given to training",
         "webshop: dead webshop_url", "webshop: malformed webshop_url", "webshop: goals of the server unsaid",
         "alfworld: folder without games", "alfworld: folder of another environment",
         "alfworld: unknown val_split (real games)"]


@pytest.mark.parametrize("case", CASES)
def test_train_refuses_bad_task_data_in_one_line_before_writing(case, tmp_path, qa_folder, capsys):
    from training.train import main as train_main

    if "real games" in case and not ALFWORLD.is_dir():
        pytest.skip("the real ALFWorld games (../shared/alfworld) are not available")
    overrides, fragments = _bad_inputs(tmp_path, qa_folder)[case]
    run = tmp_path / "run"
    rc = train_main([*overrides, *QUICK, f"run_dir={run}", f"games_dir={tmp_path / 'games'}", "total_steps=1",
                     "batch_size=1", "group_size=1", "test_freq=0"])
    _one_error_line(capsys.readouterr().err, *fragments)
    assert rc == 2 and not run.exists()


@pytest.mark.parametrize("case", ["searchqa: corrupt parquet", "searchqa: no retrieval named",
                                  "webshop: dead webshop_url", "alfworld: folder without games"])
def test_collect_refuses_bad_task_data_in_one_line_before_writing(case, tmp_path, qa_folder, capsys):
    from training.collect import main as collect_main

    overrides, fragments = _bad_inputs(tmp_path, qa_folder)[case]
    env = overrides[0].split("=", 1)[1]
    out = tmp_path / "collected"
    rc = collect_main(["--model", "tiny", "--env", env, "--tasks", "1", "--group", "1", "--out", str(out),
                       *overrides[1:], *QUICK, f"games_dir={tmp_path / 'games'}"])
    _one_error_line(capsys.readouterr().err, *fragments)
    assert rc == 2 and not out.exists()


@pytest.mark.parametrize("case", ["searchqa: unknown val_split", "searchqa: no retrieval named",
                                  "webshop: dead webshop_url", "webshop: goals of the server unsaid"])
def test_evaluate_refuses_bad_task_data_in_one_line_before_writing(case, tmp_path, qa_folder, capsys):
    from training.evaluate import main as evaluate_main

    overrides, fragments = _bad_inputs(tmp_path, qa_folder)[case]
    env = overrides[0].split("=", 1)[1]
    out = tmp_path / "eval" / "eval.json"
    rc = evaluate_main(["--ckpt", "tiny", "--env", env, "--tasks", "2", "--out-file", str(out), *overrides[1:],
                        *QUICK])
    _one_error_line(capsys.readouterr().err, *fragments)
    assert rc == 2 and not out.exists()


@pytest.fixture()
def busy_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_servers_refuse_a_port_out_of_range_or_in_use(busy_port, tmp_path, capsys):
    from training.envs.searchqa.__main__ import main as searchqa_main
    from training.envs.webshop.__main__ import main as webshop_main

    for main in (webshop_main, searchqa_main):
        for port in ("-1", "70000"):
            assert main(["serve", "--port", port, "--games-dir", str(tmp_path)]) == 2
            _one_error_line(capsys.readouterr().err, f"--port {port}: must be an integer from 0 to 65535")
        assert main(["serve", "--port", str(busy_port), "--games-dir", str(tmp_path)]) == 2
        _one_error_line(capsys.readouterr().err, f"--port {busy_port}: cannot listen on 127.0.0.1:{busy_port}")
    assert not (tmp_path / "webshop").exists()  # refused before the catalogue is generated


# ------------------------------------------------------------------------------------------------------
# Search-QA: retrieval named, stratified validation, the paper's validation, SDAR's output rule and penalty
# ------------------------------------------------------------------------------------------------------


def _qa_cfg(folder: Path, **kw):
    values = dict(env="searchqa", data=str(folder), retrieval_corpus="wiki", progress=False, n_train_games=10,
                  n_val_games=10**6)
    values.update(kw)
    return make_config(values)


def test_a_data_folder_is_searched_where_a_setting_says(qa_folder):
    from training.envs.searchqa.tasks import SearchSource, retrieval_choice

    source = SearchSource.from_config(_qa_cfg(qa_folder))
    assert source.corpus == "wiki" and source.describe()["retrieval"] == "builtin:wiki" and not source.urls
    assert "built-in Wikipedia lead summaries" in source.announce()
    assert retrieval_choice(None, None, "generated") == "wiki"  # generated questions: the corpus they come from
    assert retrieval_choice("http://a", None, str(qa_folder)) is None
    assert retrieval_choice(None, "hotpotqa", str(qa_folder)) == "hotpotqa"


def test_validation_questions_are_a_stratified_sample_of_every_data_set(qa_folder):
    from training.envs.searchqa.runtime import metrics
    from training.envs.searchqa.tasks import SearchSource

    source = SearchSource.from_config(_qa_cfg(qa_folder))
    assert len(source.valid) == 214  # every test question
    first = source.validation(107)  # half of them: half of every data set, within one
    counts = {kind: sum(t.task_type == kind for t in first) for kind in
              ("nq", "triviaqa", "popqa", "hotpotqa", "2wiki", "musique", "bamboogle")}
    assert counts == {"nq": 30, "triviaqa": 20, "popqa": 20, "hotpotqa": 15, "2wiki": 15, "musique": 5,
                      "bamboogle": 2}
    trajs = [types.SimpleNamespace(task_type=t.task_type, won=t.task_type == "nq", steps=[]) for t in first]
    out = metrics(trajs)
    assert out["em_id"] == pytest.approx(30 / 45) and out["em_ood"] == 0.0 and out["em_avg"] == pytest.approx(30 / 107)
    nq = [t.game for t in source.valid if t.task_type == "nq"]
    assert nq == [f"nq:test:test{i}" for i in range(60)]  # file order within a data set
    capped = SearchSource.from_config(_qa_cfg(qa_folder, n_val_games=7))
    assert len({t.task_type for t in capped.valid}) >= 5


def test_paper_config_validates_on_every_question_of_the_seven_data_sets():
    cfg = load_config(CONFIGS / "searchqa_paper.yaml", ["device=cpu", "data=generated"])
    assert cfg.val_tasks >= 51713 and cfg.n_val_games >= 51713  # Search-R1's test.parquet, all seven
    assert cfg.test_freq == cfg.total_steps == 150  # played once, after the last step, as SDAR
    assert set(get_environment("searchqa").evaluation.metrics) == {"em_id", "em_ood", "em_avg"}


def test_search_outputs_are_judged_by_their_action_tags_as_sdar():
    qa, alf = get_environment("searchqa"), get_environment("alfworld")
    for text in ("<search>capital of kenya</search>", "I think.<search>capital of kenya</search>",
                 "<reason>a</reason><reason>b</reason><search>capital of kenya</search>",
                 "<search>capital of kenya</search><reason>after</reason>"):
        parsed = qa.parse_output(text)
        assert parsed.well_formed and parsed.action == "<search>capital of kenya</search>", text
    for text in ("<reason>r</reason><search>a</search><answer>b</answer>",
                 "<reason>r</reason><search>a</search> <search>b</search>",
                 "<reason>r</reason><search>a<search>b</search>", "<reason>r</reason>"):
        assert not qa.parse_output(text).well_formed, text
    assert not alf.parse_output("<action>look</action>").well_formed  # ALFWorld's outputs still need their reason


def test_invalid_action_penalty_defaults_to_sdars_per_environment():
    assert make_config({"env": "searchqa"}).invalid_action_penalty == 0.01
    assert make_config({"env": "webshop"}).invalid_action_penalty == 0.1
    assert make_config({}).invalid_action_penalty == 0.1
    assert make_config({"env": "searchqa", "invalid_action_penalty": 0.3}).invalid_action_penalty == 0.3
    assert load_config(CONFIGS / "searchqa_paper.yaml", ["device=cpu", "data=generated"]).invalid_action_penalty == 0.01


# ------------------------------------------------------------------------------------------------------
# WebShop: the search index, the paper config's goals
# ------------------------------------------------------------------------------------------------------


def test_search_finds_what_webshops_index_holds():
    from training.envs.webshop.catalog import Product
    from training.envs.webshop.site import Shop

    product = Product(asin="B0000000AA", title="Zeta Teapot", category="furniture", query="kettlesandpots",
                      product_category="Kitchen", price=30.0, attributes=("hiddenattr",),
                      options=(("color", ("blue", "ochre")),), description="A sturdy porcelainish vessel.",
                      bullets=("Firstbullet point", "Secondbullet point"))
    other = Product(asin="B0000000BB", title="Alpha Mug", category="furniture", query="mugs", product_category="K",
                    price=10.0, attributes=(), options=(), description="A mug.", bullets=("Holds coffee",))
    shop = Shop([product, other])
    for found in ("teapot", "porcelainish", "firstbullet", "ochre", "color"):  # title, description, bullet 1, options
        assert [p.asin for p in shop.search([found])] == ["B0000000AA"], found
    for hidden in ("kettlesandpots", "hiddenattr", "secondbullet"):  # product type, attributes, later bullets
        assert shop.search([hidden]) == [], hidden


def test_paper_config_says_its_server_holds_synthetic_goals():
    cfg = load_config(CONFIGS / "webshop_paper.yaml", ["device=cpu", "data=generated"])
    assert cfg.webshop_goals == "synthetic" and cfg.val_tasks == cfg.n_val_games == 500
