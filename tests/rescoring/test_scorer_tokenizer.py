"""``rescoring.swap`` and ``rescoring.audit`` refuse a ``--model`` whose tokenizer is not the one of the run's stored
token ids (they point to ``rescoring.rescore_run``, which converts them), before any model loads."""

from __future__ import annotations

import json

import pytest

from diagnostics.load import DiagnosticsError
from rescoring import audit as audit_mod
from rescoring import swap as swap_mod
from rescoring.rescore import check_scorer_tokenizer


@pytest.mark.parametrize("main, extra", [(swap_mod.main, []), (audit_mod.main, ["--view", "one_obs"])])
def test_a_scorer_with_another_tokenizer_is_refused(frozen_run, qwen_scorer, tmp_path, capsys, main, extra):
    folder, _ = qwen_scorer
    out = tmp_path / "out"
    assert main(["--run", str(frozen_run), "--model", str(folder), "--out", str(out), "--no-progress",
                 "--n-boot", "20", "--ckpt-steps", "1", *extra]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == "" and len(err.splitlines()) == 1
    assert "--model" in err and str(folder) in err and "python -m rescoring.rescore_run" in err
    assert not out.exists()


def test_the_same_tokenizer_and_a_re_scored_run_pass(frozen_run, qwen_scorer, tmp_path):
    folder, _ = qwen_scorer
    check_scorer_tokenizer(frozen_run, str(frozen_run / "global_step_1" / "actor"))  # the run's own tokenizer
    check_scorer_tokenizer(frozen_run, None)  # each checkpoint's own weights
    # a run re-scored by the Qwen-vocabulary model stores that model's ids: it is the one that matches now
    rescored = tmp_path / "rescored"
    rescored.mkdir()
    info = json.loads((frozen_run / "run.json").read_text())
    (rescored / "run.json").write_text(json.dumps({**info, "rescored_from": str(frozen_run), "scorer": str(folder)}))
    check_scorer_tokenizer(rescored, str(folder))
    with pytest.raises(DiagnosticsError, match="rescore_run"):
        check_scorer_tokenizer(rescored, str(frozen_run / "global_step_1" / "actor"))
