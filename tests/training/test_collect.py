"""``python -m training.collect``: replay records of a model without updating it (tiny random model,
generated ALFWorld games, real engine and scorer)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ocsd.cli import UsageError
from ocsd.records import read_replay, validate_replay
from training.collect import main, resolve_model_source

pytestmark = pytest.mark.usefixtures("no_user_data")

REPO = Path(__file__).resolve().parents[2]

USER_VIEW = '''
from ocsd.replay.views import TemplateView, evidence_pieces


class NextObsOnly(TemplateView):
    """Only o_{k+1} as evidence, no action schema."""

    name = "next_obs_only"

    def evidence(self, step):
        return evidence_pieces(step, horizon=1, schema=False)
'''


def _check_selection(steps: pd.DataFrame, rho: float) -> None:
    for uid, rows in steps.groupby("traj_uid"):
        k = int(rows["num_steps"].iloc[0])
        assert sorted(rows["step_idx"]) == list(range(k)), uid  # every step of the trajectory has a row
        assert rows["selected"].sum() / k == pytest.approx(math.ceil(rho * k) / k), uid


def test_base_model_collection_is_a_valid_checkpoint(tmp_path, tiny_overrides):
    out = tmp_path / "collect"
    rc = main(["--model", "tiny", "--tasks", "2", "--group", "2", "--out", str(out), "--rho", "0.5",
               "--seed", "0", *tiny_overrides])
    assert rc == 0
    ckpt = out / "global_step_0"
    assert validate_replay(ckpt) == []
    cli = subprocess.run([sys.executable, "-m", "ocsd.records", "validate", str(out)], cwd=REPO,
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    data = read_replay(ckpt)
    steps, meta = data.steps, data.metas[0]
    assert steps["traj_uid"].nunique() == 4 and steps["group_uid"].nunique() == 2
    assert (steps["global_step"] == 0).all() and meta["global_step"] == 0 and meta["method"] == "base"
    assert meta["views"] == ["student", "full", "ablated"] and meta["rho"] == 0.5
    _check_selection(steps, 0.5)
    assert (steps["scored"] == steps["selected"]).all()  # every selected step fits the prompt budget
    for _, group in steps.groupby("group_uid"):  # GRPO advantages are centred over a group's step samples (sdar)
        assert group["advantage"].sum() == pytest.approx(0.0, abs=1e-6)
    assert (steps["num_steps"] <= 2).all() and (steps["n_tokens"] <= 8).all()
    run = json.loads((out / "run.json").read_text())
    assert run["source"] == "training.collect" and run["config"]["lora_rank"] == 0


def test_checkpoint_collection_with_extra_views(tmp_path, tiny_checkpoint):
    view_file = tmp_path / "userview.py"
    view_file.write_text(USER_VIEW)
    out = tmp_path / "collect"
    # rollout settings (2 steps, 8 tokens, games folder) come from the checkpoint's run.json
    rc = main(["--model", str(tiny_checkpoint), "--tasks", "1", "--group", "3", "--out", str(out),
               "--selection", "random", "--views", f"one_obs,{view_file}:NextObsOnly", "progress=false"])
    assert rc == 0
    ckpt = out / "global_step_7"
    assert validate_replay(ckpt) == []
    data = read_replay(ckpt)
    meta, steps, tokens = data.metas[0], data.steps, data.tokens
    assert meta["global_step"] == 7 and meta["method"] == "ocsd" and meta["selection"] == "random"
    assert meta["views"] == ["student", "full", "ablated", "one_obs", "next_obs_only"]
    for view in meta["views"]:
        col = tokens[f"logp_{view}"]
        assert len(col) > 0 and col.notna().all() and (col <= 1e-4).all()
    _check_selection(steps, 0.5)  # rho from the checkpoint's run.json
    assert (steps["num_steps"] <= 2).all() and (steps["n_tokens"] <= 8).all()
    # the student column is the rollout's own log-prob, so it differs from the replay contexts
    assert not (tokens["logp_student"] == tokens["logp_full"]).all()


def test_model_sources(tmp_path, tiny_checkpoint):
    ckpt = resolve_model_source(str(tiny_checkpoint))
    assert ckpt.global_step == 7 and ckpt.model.endswith("actor") and ckpt.label == "tinyrun"
    assert resolve_model_source(str(tiny_checkpoint / "actor")).global_step == 7
    assert resolve_model_source(str(tiny_checkpoint.parent)).checkpoint == tiny_checkpoint  # run: last checkpoint
    assert resolve_model_source("tiny").global_step == 0
    renamed = tmp_path / "exported"
    renamed.symlink_to(tiny_checkpoint, target_is_directory=True)
    assert resolve_model_source(str(renamed)).global_step == 7  # from actor/trainer_state.pt
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="--model"):
        resolve_model_source(str(tmp_path / "empty"))
    for name, text in (("damaged", "{not json"), ("foreign", '{"run": "x"}')):  # nothing to inherit from
        (tmp_path / name / "global_step_7").mkdir(parents=True)
        (tmp_path / name / "global_step_7" / "actor").symlink_to(tiny_checkpoint / "actor", target_is_directory=True)
        (tmp_path / name / "run.json").write_text(text)
        source = resolve_model_source(str(tmp_path / name / "global_step_7"))
        assert source.run_info == {} and source.label == name and source.global_step == 7


@pytest.mark.parametrize("argv, message", [
    (["--model", "/no/such/checkpoint"], "--model: '/no/such/checkpoint'"),
    (["--model", "tiny", "--views", "swap"], "--views: 'swap' needs a donor"),
    (["--model", "tiny", "--views", "no_such_module:View"], "--views"),
    (["--model", "tiny", "--data", "/no/such/data"], "--data"),
    (["--model", "tiny", "batch_sizee=3"], "unknown key"),
    (["--model", "tiny", "temperature=0"], "temperature"),
    (["--model", "tiny", "--rho", "1.5"], "rho=1.5: must be in (0, 1]"),  # the config's rule and message
    (["--model", "tiny", "--rho", "0"], "rho=0.0: must be in (0, 1]"),
    (["--model", "tiny", "--rho", "nan"], "rho=nan: must be in (0, 1]"),
    (["--model", "tiny", "rollout_engine=vllm"], "rollout_engine='vllm': needs device=cuda"),
])
def test_flag_errors_exit_2_before_work(argv, message, capsys):
    assert main([*argv, "--tasks", "1", "--group", "2"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--rho", "x"], ["--selection", "best"], ["--tasks", "0"]])
def test_bad_values_are_usage_errors(argv, capsys):
    base = {"--tasks": "1", "--group": "2"}
    for flag, value in zip(argv[::2], argv[1::2]):
        base[flag] = value
    with pytest.raises(SystemExit) as exc:
        main(["--model", "tiny", *[x for kv in base.items() for x in kv]])
    assert exc.value.code == 2 and argv[0] in capsys.readouterr().err


def test_cli_error_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "training.collect", "--model", str(tmp_path / "missing"),
                           "--tasks", "1", "--group", "2"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "--model" in proc.stderr


def test_collections_of_several_checkpoints_share_one_folder(tmp_path, tiny_checkpoint, tiny_overrides):
    out = tmp_path / "collect"
    assert main(["--model", "tiny", "--tasks", "1", "--group", "2", "--out", str(out), *tiny_overrides]) == 0
    assert main(["--model", str(tiny_checkpoint), "--tasks", "1", "--group", "2", "--out", str(out),
                 "progress=false"]) == 0
    assert read_replay(out).global_steps == [0, 7] and not (out / ".lock").exists()
    # a second collection of a step the folder holds is refused: nothing of the first is replaced
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert main(["--model", "tiny", "--tasks", "1", "--group", "2", "--seed", "1", "--out", str(out),
                 *tiny_overrides]) == 2
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_collect_never_replaces_a_training_run(tmp_path, tiny_checkpoint, capsys):
    run = tiny_checkpoint.parent
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(["--model", str(tiny_checkpoint), "--tasks", "1", "--group", "2", "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"--out: {run} holds a training run; collecting into it would replace its run.json" in err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("content, message", [
    ({"notes.txt": "a user's file"}, "is not empty (notes.txt) and holds no run"),
    ({"run.json": "{not json"}, "not valid JSON"),
    ({"run.json": '{"schema_version": 1, "source": "elsewhere"}'}, "holds a run written by elsewhere"),
])
def test_collect_refuses_an_out_folder_it_does_not_own(tmp_path, content, message, capsys):
    out = tmp_path / "out"
    out.mkdir()
    for name, text in content.items():
        (out / name).write_text(text)
    assert main(["--model", "tiny", "--tasks", "1", "--group", "2", "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == sorted(content)


def test_collect_refuses_a_folder_in_use(tmp_path, capsys):
    from ocsd.records import RunLock

    out = tmp_path / "out"
    with RunLock(out, command="python -m training.collect (the first)"):
        assert main(["--model", "tiny", "--tasks", "1", "--group", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"error: {out} is in use by pid" in err and "(the first)" in err


@pytest.mark.parametrize("text, message", [("rho: [0.2\n", "is not valid YAML"), ("- 1\n", "is not a mapping")])
def test_a_malformed_config_is_one_line(tmp_path, text, message, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    assert main(["--model", "tiny", "--tasks", "1", "--group", "2", "--config", str(config),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"--config: {config} {message}" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    (["--out", ""], "--out: empty"),
    (["overwrite=true"], "overwrite=true: a collection never replaces another run"),
    (["games_dir=/dev/null"], "games_dir='/dev/null': /dev/null is a file"),
])
def test_out_and_games_folder_errors(tmp_path, argv, message, capsys):
    assert main(["--model", "tiny", "--tasks", "1", "--group", "2", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_run_gives_its_last_complete_checkpoint(tmp_path, tiny_checkpoint, capsys):
    run = tmp_path / "run"
    for step, complete in ((1, True), (2, True), (3, False)):  # step 3: killed while writing its replay
        (run / f"global_step_{step}" / "replay").mkdir(parents=True)
        (run / f"global_step_{step}" / "actor").symlink_to(tiny_checkpoint / "actor", target_is_directory=True)
        if complete:
            (run / f"global_step_{step}" / "replay" / "meta.json").write_text("{}")
    source = resolve_model_source(str(run))
    assert source.checkpoint == run / "global_step_2" and source.global_step == 2
    err = capsys.readouterr().err
    assert f"skipping {run / 'global_step_3'}, an incomplete checkpoint" in err and "using global_step_2" in err


BROKEN_VIEW = '''
from ocsd.replay.views import TemplateView


class Broken(TemplateView):
    """Evidence that is not (kind, text) pairs: the collection stops once it scores."""

    name = "broken"

    def evidence(self, step):
        return [42]
'''


def test_a_view_that_cannot_render_leaves_nothing_behind(tmp_path, tiny_overrides, capsys):
    """The view fails only when the collection scores, after its rollouts: one line naming the view, exit 2, and
    neither a run.json without a step nor the folder the collection made is left behind."""
    view_file = tmp_path / "broken.py"
    view_file.write_text(BROKEN_VIEW)
    out = tmp_path / "collect"
    rc = main(["--model", "tiny", "--tasks", "1", "--group", "2", "--out", str(out), "--seed", "0",
               "--views", f"{view_file}:Broken", *tiny_overrides])
    err = capsys.readouterr().err
    assert rc == 2 and "'broken'" in err.strip().splitlines()[-1] and "Traceback" not in err
    assert not out.exists()
