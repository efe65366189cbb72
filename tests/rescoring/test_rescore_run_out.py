"""``rescoring.rescore_run --out``: a folder holding another run's or another scorer's re-scoring is refused, and so
are checkpoints already re-scored there; missing ones may be added."""

from __future__ import annotations

import hashlib
import json

from rescoring.rescore_run import main


def _files(folder):
    return {str(p.relative_to(folder)): hashlib.md5(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_out_of_another_scorer_or_run_is_refused_and_kept(frozen_run, tmp_path, capsys):
    actor = str(frozen_run / "global_step_1" / "actor")
    out = tmp_path / "rescored"
    assert main(["--run", str(frozen_run), "--model", actor, "--out", str(out), "--ckpt-steps", "1",
                 "--no-progress", "--json"]) == 0
    capsys.readouterr()
    before = _files(out)

    def refused(*args):
        assert main([*args, "--out", str(out), "--no-progress", "--json"]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
        assert _files(out) == before
        return captured.err

    err = refused("--run", str(frozen_run), "--model", "smollm2")
    assert f"by {actor}" in err and "by smollm2" in err
    other_run = tmp_path / "another_run"
    err = refused("--run", str(other_run), "--model", actor)
    assert str(frozen_run) in err and str(other_run) in err
    err = refused("--run", str(frozen_run), "--model", actor, "--ckpt-steps", "1")
    assert "global_step_1" in err and "--ckpt-steps" in err

    # the same scorer and run may add a checkpoint it lacks; the one already there is left as it was
    assert main(["--run", str(frozen_run), "--model", actor, "--out", str(out), "--ckpt-steps", "2",
                 "--no-progress", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoints"][0]["global_step"] == 2
    after = _files(out)
    assert {k: v for k, v in after.items() if k.startswith("global_step_1")} == \
           {k: v for k, v in before.items() if k.startswith("global_step_1")}
    assert any(k.startswith("global_step_2/replay/meta.json") for k in after)
