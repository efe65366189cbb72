"""Where ``python -m training.evaluate`` writes and what it plays: an output that is another command's file, two output
flags, a split of generated games, ``n_val_games`` of generated Search-QA questions; and settings of another
environment refused by the config (``training.train``). Tiny random model, generated games."""

from __future__ import annotations

import json

import pytest

from training.evaluate import main

pytestmark = pytest.mark.usefixtures("no_user_data")

META = {"schema_version": 1, "run": "r", "method": "ocsd", "rho": 0.5}
"""A checkpoint's ``replay/meta.json`` (the part that matters here: it is not an evaluation result)."""


def _one_line_error(err: str, start: str) -> None:
    assert err.startswith(start) and err.count("\n") == 1, err


def test_out_file_that_is_another_file_is_refused_and_kept(tmp_path, tiny_overrides, capsys):
    """E12: an existing JSON file that is not an evaluation result is not replaced (exit 2, before any work)."""
    other = tmp_path / "meta.json"
    other.write_text(json.dumps(META))
    assert main(["--ckpt", "tiny", "--tasks", "1", "--out-file", str(other), *tiny_overrides]) == 2
    captured = capsys.readouterr()
    _one_line_error(captured.err, f"error: --out-file: {other} exists and is not an evaluation result")
    assert json.loads(other.read_text()) == META and captured.out == ""


def test_out_file_inside_a_checkpoints_replay_folder_is_refused(tmp_path, tiny_overrides, capsys):
    """E12: a place inside a checkpoint's replay/ folder is refused, existing file or not."""
    replay = tmp_path / "run" / "global_step_2" / "replay"
    replay.mkdir(parents=True)
    (replay / "meta.json").write_text(json.dumps(META))
    for target in (replay / "meta.json", replay / "eval.json", replay):
        assert main(["--ckpt", "tiny", "--tasks", "1", "--out-file", str(target), *tiny_overrides]) == 2
        _one_line_error(capsys.readouterr().err, "error: --out-file:")
    assert sorted(p.name for p in replay.iterdir()) == ["meta.json"]
    assert json.loads((replay / "meta.json").read_text()) == META


def test_out_file_replaces_an_earlier_result_with_a_note(tmp_path, tiny_overrides, capsys):
    """E11: an earlier result is replaced, and a line on stderr says so."""
    target = tmp_path / "eval.json"
    assert main(["--ckpt", "tiny", "--tasks", "1", "--out-file", str(target), *tiny_overrides]) == 0
    assert "replaced" not in capsys.readouterr().err
    first = json.loads(target.read_text())
    assert main(["--ckpt", "tiny", "--tasks", "1", "--greedy", "--json", "--out-file", str(target),
                 *tiny_overrides]) == 0
    captured = capsys.readouterr()
    assert f"replaced the earlier evaluation result in {target}" in captured.err
    second = json.loads(target.read_text())
    assert (first["greedy"], second["greedy"]) == (False, True)
    assert json.loads(captured.out.strip().splitlines()[-1]) == second  # --json: stdout is the result alone


def test_out_and_out_file_together_are_refused(tmp_path, tiny_checkpoint, tiny_overrides, capsys):
    """E15: --out with --out-file is refused (it was ignored)."""
    target = tmp_path / "e15.json"
    assert main(["--ckpt", str(tiny_checkpoint), "--tasks", "1", "--out", "--out-file", str(target),
                 *tiny_overrides]) == 2
    _one_line_error(capsys.readouterr().err, "error: --out and --out-file: name one place for the result")
    assert not target.exists()


def test_split_with_generated_games_is_refused(tiny_overrides, capsys):
    """E09: generated validation games have no split; --split is refused rather than recorded."""
    assert main(["--ckpt", "tiny", "--data", "generated", "--split", "valid_unseen", "--json", *tiny_overrides]) == 2
    captured = capsys.readouterr()
    _one_line_error(captured.err, "error: --split valid_unseen: generated validation games have no splits")
    assert captured.out == ""


def test_generated_searchqa_plays_n_val_games(tmp_path, capsys):
    """E13: generated Search-QA questions: n_val_games of them unless --tasks (it played all of them)."""
    pytest.importorskip("bm25s")
    base = ["--ckpt", "tiny", "--env", "searchqa", "--data", "generated", "--json", f"games_dir={tmp_path}",
            "max_steps=1", "max_response_length=8", "max_prompt_length=1024", "progress=false"]
    assert main([*base, "n_val_games=2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (result["tasks"], result["n"], len(result["episodes"])) == (2, 2, 2)
    assert main([*base, "n_val_games=2", "--tasks", "3"]) == 0  # --tasks wins
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["tasks"] == 3


@pytest.mark.parametrize("setting,owner", [("webshop_url=http://127.0.0.1:9", "webshop"),
                                           ("webshop_goals=synthetic", "webshop"),
                                           ("retrieval_urls=http://127.0.0.1:9", "searchqa"),
                                           ("retrieval_corpus=hotpotqa", "searchqa"),
                                           ("retrieval_topk=5", "searchqa"),
                                           ("retrieval_timeout=2", "searchqa")])
def test_train_refuses_a_setting_of_another_environment(tmp_path, tiny_overrides, setting, owner, capsys):
    """T21, T22, N18: a setting of another environment is refused before any work (it was recorded as used)."""
    from training.train import main as train_main

    run = tmp_path / "run"
    assert train_main(["model=tiny", "env=alfworld", f"run_dir={run}", "total_steps=1", "batch_size=1", "group_size=2",
                       "test_freq=0", *tiny_overrides, setting]) == 2
    name = setting.split("=")[0]
    _one_line_error(capsys.readouterr().err, f"config error: {name}=")
    assert not run.exists()


def test_settings_of_the_environment_itself_and_defaults_are_accepted():
    from training.config import ConfigError, make_config

    assert make_config({"env": "alfworld", "retrieval_topk": 3, "retrieval_timeout": 30.0}).retrieval_topk == 3
    assert make_config({"env": "searchqa", "retrieval_topk": 5}).retrieval_topk == 5
    assert make_config({"env": "webshop", "webshop_goals": "human"}).webshop_goals == "human"
    with pytest.raises(ConfigError, match=r"^webshop_goals='human': a setting of env=webshop, unused with "
                                          r"env=searchqa; leave it out, or set env=webshop$"):
        make_config({"env": "searchqa", "webshop_goals": "human"})
