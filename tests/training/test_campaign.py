"""``python -m training.campaign``: where a series' runs stand, on the committed third series and on copies of one of
its runs put out of step on purpose."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from training.campaign import main, run_status, series_status

ROOT = Path(__file__).resolve().parents[2]
SERIES = ROOT / "results" / "paper_scale" / "valid_train_series3"
RUN = "grpo_qwen0.5b_s3"
OTHER = "ocsd_qwen0.5b_s3"


def _metrics_steps(run: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_every_committed_pack_holds_its_runs_last_checkpoint():
    """The third series' packs are replaced after every machine that moved a run (results/README.md): a pack left
    behind its records would resume the run from an older step."""
    runs = series_status(SERIES)
    assert len(runs) >= 6
    for run in runs:
        assert run.problems == [], run.problems
        assert run.pack == run.checkpoint and run.checkpoint <= run.recorded == max(_metrics_steps(SERIES / run.name))
        assert run.checkpoint == max(int(p.name.rsplit("_", 1)[1]) for p in (SERIES / run.name).glob("global_step_*"))


def test_the_evaluations_of_seed_1_are_found():
    status = {r.name: r for r in series_status(SERIES)}
    assert 26 in status["ocsd_qwen0.5b_s1"].evaluated and 26 in status["grpo_qwen0.5b_s1"].evaluated


@pytest.fixture
def series(tmp_path):
    """A series of one committed run (records and its real pack), to be put out of step."""
    shutil.copytree(SERIES / RUN, tmp_path / RUN)
    (tmp_path / "packs").mkdir()
    shutil.copy(SERIES / "packs" / f"{RUN}.tar", tmp_path / "packs" / f"{RUN}.tar")
    return tmp_path


def test_a_series_in_step(series):
    status = run_status(series / RUN)
    assert (status.method, status.seed, status.model) == ("grpo", 3, "qwen2.5-coder-0.5b")
    assert status.problems == [] and status.pack == status.checkpoint
    assert status.remaining(50) == 50 - status.pack and status.remaining(4) == 0


def test_a_pack_older_than_the_records_is_named(series):
    last = run_status(series / RUN).checkpoint
    shutil.copytree(series / RUN / f"global_step_{last}", series / RUN / f"global_step_{last + 2}")
    (problem,) = run_status(series / RUN).problems
    assert f"holds step {last}" in problem and f"checkpoint {last + 2}" in problem and "repack" in problem


def test_a_pack_newer_than_the_records_is_named(series):
    last = run_status(series / RUN).checkpoint
    shutil.rmtree(series / RUN / f"global_step_{last}")
    (problem,) = run_status(series / RUN).problems
    assert f"holds step {last}" in problem and "copy the run's records" in problem


def test_a_pack_of_another_run_is_named(series):
    shutil.copy(SERIES / "packs" / f"{OTHER}.tar", series / "packs" / f"{RUN}.tar")
    problems = run_status(series / RUN).problems
    assert any(repr(OTHER) in p and repr(RUN) in p for p in problems)


def test_records_without_a_pack_cannot_resume(series):
    (series / "packs" / f"{RUN}.tar").unlink()
    status = run_status(series / RUN)
    assert status.pack is None and status.remaining(50) == 50
    assert "cannot resume" in status.problems[0]


def test_a_file_that_is_not_a_pack_is_named(series):
    (series / "packs" / f"{RUN}.tar").write_text("not a tar file")
    (problem,) = run_status(series / RUN).problems
    assert f"{RUN}.tar" in problem and "not a resume pack" in problem


def test_evaluation_files_are_matched_by_run_name(series):
    (series / "eval_step8").mkdir()
    for name in (f"eval_{RUN}_step8.json", f"eval_{RUN}_step50.json", f"eval_{RUN}x_step4.json", f"{RUN}_step6.json"):
        (series / "eval_step8" / name).write_text("{}")
    assert run_status(series / RUN).evaluated == [8, 50]


def test_the_command_exit_status_and_json(series, capsys):
    assert main([str(series), "--target", "20", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (run,) = result["runs"]
    assert result["target"] == 20 and run["name"] == RUN and run["remaining"] == 20 - run["pack"]
    (series / "packs" / f"{RUN}.tar").unlink()
    assert main([str(series)]) == 1
    out = capsys.readouterr().out
    assert "problems:" in out and "cannot resume" in out and "run-steps to 50: 50 (grpo 50)" in out


@pytest.mark.parametrize("make, message", [
    (lambda root: root / "missing", "not a folder"),
    (lambda root: root, "no run folder"),
])
def test_bad_input_exits_2_naming_it(tmp_path, make, message):
    done = subprocess.run([sys.executable, "-m", "training.campaign", str(make(tmp_path))], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    with pytest.raises(SystemExit) as refused:
        main([str(tmp_path), "--target", "0"])
    assert refused.value.code == 2
