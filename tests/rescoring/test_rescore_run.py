"""``rescoring.rescore_run``: a run's stored steps scored by another model, also one with another tokenizer."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from diagnostics import auroc
from diagnostics.load import DiagnosticsError, load
from ocsd.records import read_checkpoint, validate_path
from rescoring.rescore_run import END_OF_TURN, Retokenizer, main, rescore_run


@pytest.fixture(scope="module")
def smollm2_tok():
    from ocsd.replay.models import load_tokenizer

    return load_tokenizer("smollm2")


def test_the_runs_own_weights_give_its_stored_scores(frozen_run, tmp_path):
    """The identity check: same tokenizer, same weights (the update moved nothing) -> the stored log-probs."""
    out = tmp_path / "same"
    result = rescore_run(frozen_run, str(frozen_run / "global_step_1" / "actor"), out, progress=False)
    assert not result["retokenized"] and result["checkpoints"][0]["skipped"] == 0
    stored, fresh = read_checkpoint(frozen_run / "global_step_1"), read_checkpoint(out / "global_step_1")
    key = ["traj_uid", "step_idx", "token_idx"]
    a, b = stored.tokens.sort_values(key).reset_index(drop=True), fresh.tokens.sort_values(key).reset_index(drop=True)
    assert len(a) > 0
    pd.testing.assert_frame_equal(a[key + ["token_id", "token"]], b[key + ["token_id", "token"]])
    for view in ("student", "full", "ablated"):
        np.testing.assert_allclose(b[f"logp_{view}"], a[f"logp_{view}"], atol=2e-4)
    pd.testing.assert_frame_equal(stored.steps, fresh.steps)
    meta = json.loads((out / "global_step_1" / "replay" / "meta.json").read_text())
    assert meta["source"]["checkpoint"] == str(frozen_run / "global_step_1")
    assert meta["scorer"]["retokenized"] is False
    assert validate_path(out) == []


def test_another_tokenizer(frozen_run, qwen_scorer, smollm2_tok, tmp_path, capsys):
    folder, qwen = qwen_scorer
    out = tmp_path / "qwen"
    assert main(["--run", str(frozen_run), "--model", str(folder), "--out", str(out), "--no-progress",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["retokenized"] is True
    stored, fresh = read_checkpoint(frozen_run / "global_step_1"), read_checkpoint(out / "global_step_1")
    assert validate_path(out) == []
    # the same steps, the same labels; the scored ones carry the scorer's tokens
    pd.testing.assert_frame_equal(stored.steps.drop(columns=["scored", "n_tokens"]),
                                  fresh.steps.drop(columns=["scored", "n_tokens"]))
    scored = fresh.steps[fresh.steps["scored"]]
    assert len(scored) == int(stored.steps["scored"].sum()) and len(scored) > 0
    retok = Retokenizer(smollm2_tok, qwen)
    for (uid, k), rows in stored.tokens.groupby(["traj_uid", "step_idx"]):
        ids = rows.sort_values("token_idx")["token_id"].tolist()
        new = fresh.tokens[(fresh.tokens["traj_uid"] == uid) & (fresh.tokens["step_idx"] == k)]
        assert new.sort_values("token_idx")["token_id"].tolist() == retok(ids)
        assert int(scored.set_index(["traj_uid", "step_idx"]).loc[(uid, k), "n_tokens"]) == len(new)
    assert np.isfinite(fresh.tokens[["logp_student", "logp_full", "logp_ablated"]].to_numpy()).all()
    meta = json.loads((out / "global_step_1" / "replay" / "meta.json").read_text())
    assert meta["model"] == str(folder) and meta["scorer"]["retokenized"] is True
    # every diagnostic reads it unchanged
    res = auroc.feedback_auroc(load(out), n_boot=20, seed=0)
    assert set(res["signals"]) == {"ablated", "full", "residual"}


def test_the_end_of_a_response_becomes_the_scorers_end_of_turn(smollm2_tok, qwen_scorer):
    _, qwen = qwen_scorer
    retok = Retokenizer(smollm2_tok, qwen)
    body = smollm2_tok.encode("<action>go to fridge 1</action>", add_special_tokens=False)
    end = qwen.convert_tokens_to_ids(END_OF_TURN)
    text_ids = qwen.encode("<action>go to fridge 1</action>", add_special_tokens=False)
    for last in ("<|im_end|>", "<|im_start|>"):  # SmolLM2's converted tokenizer ended turns with <|im_start|>
        assert retok(body + [smollm2_tok.convert_tokens_to_ids(last)]) == text_ids + [end]
    assert retok(body) == text_ids  # cut by the length limit: no end
    assert Retokenizer(smollm2_tok, smollm2_tok)(body + [7]) == body + [7]


def test_refuses_to_write_over_the_run_or_another_folder(frozen_run, tmp_path):
    with pytest.raises(DiagnosticsError, match="the run itself"):
        rescore_run(frozen_run, "smollm2", frozen_run, progress=False)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(DiagnosticsError, match="is not a re-scored run"):
        rescore_run(frozen_run, "smollm2", other, progress=False)
    assert (other / "notes.txt").read_text() == "keep me"
