"""The replay-score format: round trips, atomicity, and every documented error."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ocsd.records import (
    CHECKPOINT_COLUMN,
    STEP_COLUMNS,
    TOKEN_COLUMNS,
    IncompleteCheckpointError,
    RecordError,
    RunWriter,
    checkpoint_id,
    read_metrics,
    read_replay,
    read_run_info,
    validate_path,
    validate_replay,
    write_replay,
)

ROOT = Path(__file__).resolve().parents[3]


def make_tables(rng, global_step=3, n_traj=4):
    """Small valid steps/tokens tables with the first step of each trajectory scored."""
    steps, tokens = [], []
    for i in range(n_traj):
        k = int(rng.integers(1, 6))
        for s in range(k):
            n_tok = int(rng.integers(1, 5))
            scored = s == 0
            steps.append(dict(global_step=global_step, traj_uid=f"t{i}", group_uid=f"g{i // 2}", task_type="pick",
                              step_idx=s, num_steps=k, action="go to desk 1", operator="go",
                              obs_next=None if s == k - 1 else "You arrive at desk 1.",
                              feedback_label=["valid", "invalid", "ambiguous"][s % 3],
                              progress_label=["progress", "invalid", "no_progress"][s % 3], reward=float(i % 2),
                              advantage=float(rng.normal()), nll=float(rng.exponential()), selected=scored,
                              scored=scored, n_tokens=n_tok))
            if scored:
                for t in range(n_tok):
                    tokens.append(dict(global_step=global_step, traj_uid=f"t{i}", step_idx=s, token_idx=t,
                                       token_id=int(rng.integers(0, 1000)), token=" go",
                                       logp_student=-float(rng.exponential()), logp_full=-float(rng.exponential()),
                                       logp_ablated=-float(rng.exponential())))
    return pd.DataFrame(steps), pd.DataFrame(tokens)


def meta(step=3, **kw):
    base = dict(global_step=step, run="demo", model="tiny", env="alfworld", method="ocsd", rho=0.2, beta=0.5,
                views=["student", "full", "ablated"])
    return {**base, **kw}


@pytest.fixture
def ckpt(tmp_path):
    steps, tokens = make_tables(np.random.default_rng(0))
    folder = write_replay(tmp_path / "run" / "global_step_3" / "replay", steps, tokens, meta())
    return folder


def test_round_trip_types_and_values(ckpt):
    steps, tokens = make_tables(np.random.default_rng(0))
    data = read_replay(ckpt.parent)
    assert data.global_steps == [3]
    pd.testing.assert_frame_equal(data.steps[steps.columns].astype(object), steps.astype(object), check_dtype=False)
    np.testing.assert_allclose(data.tokens["logp_full"], tokens["logp_full"].astype(np.float32))
    schema = pq.read_schema(ckpt / "steps.parquet")
    for name, dtype in STEP_COLUMNS.items():
        assert schema.field(name).type == dtype
    schema = pq.read_schema(ckpt / "tokens.parquet")
    for name, dtype in TOKEN_COLUMNS.items():
        assert schema.field(name).type == dtype
    assert json.loads((ckpt / "meta.json").read_text())["schema_version"] == 1
    assert validate_replay(ckpt) == []
    assert not list(ckpt.glob(".*tmp*"))


def test_extra_views_and_selected_filter(tmp_path):
    steps, tokens = make_tables(np.random.default_rng(1))
    tokens["logp_swap"] = tokens["logp_full"] - 0.1
    folder = write_replay(tmp_path / "replay", steps, tokens, meta(views=["student", "full", "ablated", "swap"]))
    assert pq.read_schema(folder / "tokens.parquet").field("logp_swap").type == pa.float32()
    data = read_replay(folder, steps="selected")
    assert data.steps["selected"].all() and len(data.tokens) == len(tokens)
    assert set(map(tuple, data.tokens[["traj_uid", "step_idx"]].drop_duplicates().values)) == \
        set(map(tuple, data.steps[["traj_uid", "step_idx"]].values))
    with pytest.raises(ValueError, match="steps must be"):
        read_replay(folder, steps="some")


def test_run_folder_skips_incomplete_with_warning(tmp_path):
    run = RunWriter(tmp_path / "run")
    run.write_run_json({"run": "demo", "method": "ocsd"})
    for step in (1, 2, 3):
        steps, tokens = make_tables(np.random.default_rng(step), global_step=step)
        write_replay(run.replay_dir(step), steps, tokens, meta(step))
        run.append_metrics({"step": step, "reward_mean": 0.5})
    (run.replay_dir(2) / "meta.json").unlink()
    with pytest.warns(UserWarning, match="global_step_2"):
        data = read_replay(run.run_dir)
    assert data.global_steps == [1, 3]
    with pytest.raises(IncompleteCheckpointError, match=r"global_step_2.*meta.json is missing"):
        read_replay(run.checkpoint_dir(2))
    assert [r["step"] for r in read_metrics(run.run_dir)] == [1, 2, 3]
    run.truncate_metrics(1)
    assert [r["step"] for r in read_metrics(run.run_dir)] == [1]
    assert read_run_info(run.run_dir)["schema_version"] == 1
    assert any("global_step_2" in p for p in validate_path(run.run_dir))


def test_rewrite_marks_checkpoint_incomplete_until_done(ckpt, monkeypatch):
    steps, tokens = make_tables(np.random.default_rng(5))
    from ocsd.records import checkpoint

    def crash(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "atomic_write_bytes", crash)
    with pytest.raises(KeyboardInterrupt):
        write_replay(ckpt, steps, tokens, meta())
    assert not (ckpt / "meta.json").exists()  # readers refuse the half-rewritten checkpoint
    with pytest.raises(IncompleteCheckpointError):
        read_replay(ckpt)


def _corrupt(ckpt, tmp_path, name, fn):
    dst = tmp_path / f"bad_{name}"
    shutil.copytree(ckpt, dst)
    fn(dst)
    return dst


def _rewrite(path, mutate):
    table = pq.read_table(path)
    pq.write_table(mutate(table), path)


CORRUPTIONS = {
    "missing_column": (lambda d: _rewrite(d / "steps.parquet", lambda t: t.drop(["nll"])),
                       r"steps.parquet: missing column 'nll'"),
    "wrong_dtype": (lambda d: _rewrite(d / "tokens.parquet", lambda t: t.set_column(
        t.schema.get_field_index("step_idx"), "step_idx", t.column("step_idx").cast(pa.float64()))),
                    r"tokens.parquet: column 'step_idx' has type double, expected int32"),
    "unknown_version": (lambda d: (d / "meta.json").write_text(json.dumps({**meta(), "schema_version": 7})),
                        r"meta.json: unknown schema_version 7"),
    "orphan_tokens": (lambda d: _rewrite(d / "tokens.parquet", lambda t: t.set_column(
        t.schema.get_field_index("traj_uid"), "traj_uid", pa.array(["ghost"] * len(t)))),
                      r"tokens.parquet: \d+ token row\(s\) of \d+ step\(s\) have no step row"),
    "missing_meta": (lambda d: (d / "meta.json").unlink(), r"incomplete checkpoint, meta.json is missing"),
    "nan_logp": (lambda d: _rewrite(d / "tokens.parquet", lambda t: t.set_column(
        t.schema.get_field_index("logp_full"), "logp_full",
        pa.array([float("nan")] + [-1.0] * (len(t) - 1), pa.float32()))),
                 r"column 'logp_full' has 1 non-finite log-prob"),
    "bad_label": (lambda d: _rewrite(d / "steps.parquet", lambda t: t.set_column(
        t.schema.get_field_index("feedback_label"), "feedback_label", pa.array(["good"] * len(t)))),
                  r"column 'feedback_label' has values \['good'\]"),
    "scored_without_tokens": (lambda d: _rewrite(d / "tokens.parquet", lambda t: t.slice(0, 0)),
                              r"step\(s\) marked scored have no token rows"),
    "not_parquet": (lambda d: (d / "steps.parquet").write_bytes(b"garbage"), r"cannot be read as parquet"),
    "views_string": (lambda d: (d / "meta.json").write_text(json.dumps({**meta(), "views": "full"})),
                     r"meta.json: key 'views' is \"full\", expected a list of view names"),
    "global_step_string": (lambda d: (d / "meta.json").write_text(json.dumps({**meta(), "global_step": "one"})),
                           r"meta.json: key 'global_step' is \"one\", expected an integer >= 0"),
    "meta_not_text": (lambda d: (d / "meta.json").write_bytes(b"\xff\xfe\x00"), r"meta.json: not valid JSON"),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_corrupted_files_give_documented_errors(ckpt, tmp_path, name):
    fn, pattern = CORRUPTIONS[name]
    bad = _corrupt(ckpt, tmp_path, name, fn)
    problems = validate_replay(bad)
    assert any(__import__("re").search(pattern, p) for p in problems), problems
    with pytest.raises(RecordError, match=pattern):
        read_replay(bad)


def test_writer_refuses_invalid_tables_and_keeps_old_files(ckpt):
    steps, tokens = make_tables(np.random.default_rng(0))
    before = (ckpt / "steps.parquet").read_bytes()
    with pytest.raises(RecordError, match=r"missing column\(s\) \['nll'\]"):
        write_replay(ckpt, steps.drop(columns=["nll"]), tokens, meta())
    bad_tokens = tokens.assign(logp_full=np.inf)
    with pytest.raises(RecordError, match="non-finite"):
        write_replay(ckpt, steps, bad_tokens, meta())
    with pytest.raises(RecordError, match=r"missing key\(s\) \['views'\]"):
        write_replay(ckpt, steps, tokens, {k: v for k, v in meta().items() if k != "views"})
    assert (ckpt / "steps.parquet").read_bytes() == before and (ckpt / "meta.json").exists()


def test_metrics_torn_last_line_and_bad_rows(tmp_path):
    run = RunWriter(tmp_path)
    run.append_metrics({"step": 1, "time/step": 2.0})
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 2, "tim')
    with pytest.warns(UserWarning, match="torn"):
        assert [r["step"] for r in read_metrics(tmp_path)] == [1]
    with pytest.raises(RecordError, match="'step' key"):
        run.append_metrics({"reward_mean": 1.0})
    (tmp_path / "metrics.jsonl").write_text('{"x": 1}\n{"step": 2}\n')
    with pytest.raises(RecordError, match="line 1"):
        read_metrics(tmp_path)


def test_reader_errors_name_the_path(tmp_path):
    with pytest.raises(RecordError, match="no such file"):
        read_replay(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecordError, match="neither a checkpoint"):
        read_replay(tmp_path / "empty")


def test_cli_validate(ckpt, tmp_path):
    cmd = [sys.executable, "-m", "ocsd.records", "validate"]
    ok = subprocess.run(cmd + [str(ckpt.parent)], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0 and ok.stdout.strip() == "ok"
    bad = _corrupt(ckpt, tmp_path, "cli", CORRUPTIONS["missing_column"][0])
    out = subprocess.run(cmd + [str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 1 and "missing column 'nll'" in out.stdout and "Traceback" not in out.stderr


def test_cli_main_in_process(ckpt, tmp_path, capsys):
    from ocsd.records.__main__ import main

    assert main(["validate", str(ckpt.parent)]) == 0
    assert capsys.readouterr().out == "ok\n"
    with pytest.raises(SystemExit) as missing:  # a missing path is a usage error, before anything is validated
        main(["validate", str(ckpt.parent), str(tmp_path / "nope")])
    assert missing.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.strip().splitlines()[-1].endswith(
        f"{tmp_path / 'nope'}: no such file or folder")
    with pytest.raises(SystemExit) as exit_info:
        main(["check", str(ckpt)])
    assert exit_info.value.code == 2


def test_public_names_come_from_their_modules():
    import importlib
    import pkgutil

    import ocsd.records

    modules = [importlib.import_module(f"ocsd.records.{m.name}") for m in pkgutil.iter_modules(ocsd.records.__path__)
               if not m.name.startswith("_")]
    homes = {name: module for module in modules for name in getattr(module, "__all__", ())}
    for name in ocsd.records.__all__:
        assert getattr(ocsd.records, name) is getattr(homes[name], name), name
    assert ocsd.records.TOKEN_COLUMNS.keys() >= {f"logp_{v}" for v in ocsd.records.RECORDED_VIEWS}


def test_meta_json_converts_numpy_paths_and_non_finite_numbers(tmp_path):
    steps, tokens = make_tables(np.random.default_rng(0))
    extra = {"path": Path("a/b"), "n": np.int64(3), "flag": np.bool_(True), "lr": np.float32(0.5),
             "nan": float("nan"), "inf": np.float64("inf"), "pair": (1, np.float32(2.5))}
    folder = write_replay(tmp_path / "replay", steps, tokens, meta(extra=extra))
    written = json.loads((folder / "meta.json").read_text())["extra"]
    assert written == {"path": "a/b", "n": 3, "flag": True, "lr": 0.5, "nan": None, "inf": None, "pair": [1, 2.5]}


def test_run_info_must_be_an_object(tmp_path):
    from ocsd.records import read_run_info

    (tmp_path / "run.json").write_text("[]")
    with pytest.raises(RecordError, match="not a JSON object"):
        read_run_info(tmp_path)


def test_writer_refuses_meta_of_the_wrong_type(ckpt):
    steps, tokens = make_tables(np.random.default_rng(0))
    for bad, pattern in (({"views": "full"}, "key 'views'"), ({"global_step": "3"}, "key 'global_step'"),
                         ({"rho": "high"}, "key 'rho'")):
        with pytest.raises(RecordError, match=pattern):
            write_replay(ckpt, steps, tokens, meta(**bad))
    write_replay(ckpt, steps, tokens, meta(global_step=np.int64(3), rho=float("nan")))  # numpy and null are fine


def _two_runs(tmp_path):
    """Two runs whose checkpoints share the global step and every trajectory id."""
    folders = []
    for name, seed in (("a", 0), ("b", 1)):
        steps, tokens = make_tables(np.random.default_rng(seed), n_traj=4)
        folders.append(write_replay(tmp_path / name / "global_step_3" / "replay", steps, tokens, meta()))
    return folders


@pytest.mark.parametrize("selection", ["all", "selected"])
def test_pooled_checkpoints_with_the_same_ids_stay_apart(tmp_path, selection):
    folders = _two_runs(tmp_path)
    alone = [read_replay(f, steps=selection) for f in folders]
    pooled = read_replay([f.parent for f in folders], steps=selection)
    assert len(pooled.steps) == sum(len(a.steps) for a in alone)
    assert len(pooled.tokens) == sum(len(a.tokens) for a in alone)
    ids = [str(f.parent.resolve()) for f in folders]
    assert list(pooled.steps[CHECKPOINT_COLUMN].cat.categories) == ids
    for frame, parts in ((pooled.steps, [a.steps for a in alone]), (pooled.tokens, [a.tokens for a in alone])):
        assert frame[CHECKPOINT_COLUMN].astype(str).value_counts().to_dict() == {i: len(p) for i, p in zip(ids, parts)}
    assert checkpoint_id(folders[0]) == checkpoint_id(folders[0].parent) == ids[0]


def test_a_checkpoint_named_twice_is_read_once(tmp_path):
    folder = _two_runs(tmp_path)[0]
    once = read_replay(folder)
    with pytest.warns(UserWarning, match="named more than once"):
        twice = read_replay([folder, folder.parent, tmp_path / "a"])
    assert len(twice.steps) == len(once.steps) and len(twice.tokens) == len(once.tokens)
    assert twice.global_steps == [3]


def test_metrics_steps_must_be_integers_once_each_in_order(tmp_path):
    run = RunWriter(tmp_path)
    run.write_run_json({"run": "demo", "method": "ocsd"})
    steps, tokens = make_tables(np.random.default_rng(0), global_step=1)
    write_replay(run.replay_dir(1), steps, tokens, meta(1))
    for step in (1, 2, 1, 2):  # two writers in one folder
        run.append_metrics({"step": step, "reward_mean": 0.5})
    repeats = r"metrics.jsonl: field 'step' repeats step\(s\) \[1, 2\] \(lines \[1, 2, 3, 4\]\)"
    with pytest.warns(UserWarning, match=repeats):
        assert len(read_metrics(tmp_path)) == 4
    assert any("field 'step' repeats" in p for p in validate_path(tmp_path))
    (tmp_path / "metrics.jsonl").write_text('{"step": 2}\n{"step": 1}\n')
    assert any("field 'step' goes back from 2 to 1 at line 2" in p for p in validate_path(tmp_path))
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": "one"}\n{"step": 3}\n')
    with pytest.raises(RecordError, match="line 2: field 'step' is \"one\", expected an integer"):
        read_metrics(tmp_path)
    assert any("field 'step'" in p for p in validate_path(tmp_path))


def test_cli_validate_reports_meta_types_and_repeated_steps(ckpt, tmp_path, capsys):
    from ocsd.records.__main__ import main

    (ckpt / "meta.json").write_text(json.dumps({**meta(), "views": "full", "global_step": "one"}))
    (ckpt.parents[1] / "metrics.jsonl").write_text('{"step": 3}\n{"step": 3}\n')
    assert main(["validate", str(ckpt.parents[1])]) == 1
    out = capsys.readouterr().out
    assert "key 'views'" in out and "key 'global_step'" in out and "field 'step' repeats" in out


def _with_context(steps: pd.DataFrame) -> pd.DataFrame:
    return steps.assign(task="put a pen on the desk", obs="You are in the middle of a room.",
                        admissible=[["go to desk 1", "look"]] * len(steps),
                        history_shown=np.minimum(steps["step_idx"], 1).astype(np.int32))


def test_context_columns_round_trip_with_their_types(tmp_path):
    from ocsd.records import CONTEXT_COLUMNS

    steps, tokens = make_tables(np.random.default_rng(4))
    folder = write_replay(tmp_path / "global_step_3" / "replay", _with_context(steps), tokens, meta())
    schema = pq.read_schema(folder / "steps.parquet")
    for name, dtype in CONTEXT_COLUMNS.items():
        assert schema.field(name).type == dtype
    back = read_replay(folder.parent).steps
    assert list(back["admissible"].iloc[0]) == ["go to desk 1", "look"]
    assert validate_replay(folder) == []


@pytest.mark.parametrize("column, value, message", [
    ("history_shown", "one", "column 'history_shown' has type string, expected int32"),
    ("task", None, "column 'task' has 1 null value"),
])
def test_bad_context_columns_are_named(tmp_path, column, value, message):
    steps, tokens = make_tables(np.random.default_rng(5))
    folder = write_replay(tmp_path / "global_step_3" / "replay", _with_context(steps), tokens, meta())
    table = pq.read_table(folder / "steps.parquet")
    values = table.column(column).to_pylist()
    values = [value if i == 0 else (str(v) if isinstance(value, str) else v) for i, v in enumerate(values)]
    field = pa.field(column, pa.string() if isinstance(value, str) else table.schema.field(column).type)
    table = table.set_column(table.schema.get_field_index(column), field, pa.array(values, type=field.type))
    pq.write_table(table, folder / "steps.parquet")
    problems = validate_replay(folder)
    assert any(message in p for p in problems), problems


def test_validate_reports_a_torn_metrics_line_and_binary_files(ckpt, tmp_path):
    """Readers skip a torn last line with a warning; validation, which says whether a run is whole, reports it.
    A run.json or metrics.jsonl that is not text is one line naming the file, not a traceback."""
    run = ckpt.parent.parent
    RunWriter(run).write_run_json({"run": "r"})
    RunWriter(run).append_metrics({"step": 3})
    assert validate_path(run) == []
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 4, "ti')
    problems = validate_path(run)
    assert len(problems) == 1 and "torn last line" in problems[0] and "metrics.jsonl" in problems[0]
    (run / "metrics.jsonl").write_bytes(b"\xff\xfe\x00binary")
    (run / "run.json").write_bytes(b"\x89PNG\r\n")
    problems = validate_path(run)
    assert any(p.startswith(f"{run / 'run.json'}: not UTF-8 text") for p in problems)
    assert any(p.startswith(f"{run / 'metrics.jsonl'}: not UTF-8 text") for p in problems)
    with pytest.raises(RecordError, match="not UTF-8 text"):
        read_metrics(run)


def test_evaluation_files_by_run_and_step(tmp_path):
    """eval_<RUN>_step<K>.json at any depth, by run name (underscores and all) and step, steps in order; other
    eval_*.json names are not evaluations of a checkpoint; a file name found twice counts once, the first by path."""
    from ocsd.records import EVALUATION_NAME, evaluation_files

    for rel in ("eval_step50/eval_grpo_qwen0.5b_s1_step50.json", "eval_step26/eval_grpo_qwen0.5b_s1_step26.json",
                "eval_ocsd_opsd_x_s2_step8.json", "later/eval_step50/eval_grpo_qwen0.5b_s1_step50.json",
                "eval_qwen0.5b_warm.json", "eval_step50/compare.txt", "eval_a_stepX.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    found = evaluation_files(tmp_path)
    assert found == {"grpo_qwen0.5b_s1": {26: tmp_path / "eval_step26/eval_grpo_qwen0.5b_s1_step26.json",
                                          50: tmp_path / "eval_step50/eval_grpo_qwen0.5b_s1_step50.json"},
                     "ocsd_opsd_x_s2": {8: tmp_path / "eval_ocsd_opsd_x_s2_step8.json"}}
    assert list(found["grpo_qwen0.5b_s1"]) == [26, 50]
    assert EVALUATION_NAME.fullmatch("eval_a_step12.json")["run"] == "a"
    assert evaluation_files(tmp_path / "eval_step26") == {"grpo_qwen0.5b_s1": {
        26: tmp_path / "eval_step26/eval_grpo_qwen0.5b_s1_step26.json"}}
