"""``python -m training.campaign``: where a series' runs stand, on the committed third series and on copies of one of
its runs put out of step on purpose; ``collect`` on what a machine sends back, made from a committed run and its
real pack."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from ocsd.cli import UsageError
from training.campaign import (RolledBack, Targets, behind, collect, main, parse_targets, roll_back, run_status,
                               sent_back, series_status)
from training.push_size import MIB, change_bytes
from training.resume_pack import read_pack_info

ROOT = Path(__file__).resolve().parents[2]
SERIES = ROOT / "results" / "paper_scale" / "valid_train_series3"
RUN = "grpo_qwen0.5b_s3"
OTHER = "ocsd_qwen0.5b_s3"
STEP = read_pack_info(SERIES / "packs" / f"{RUN}.tar")["global_step"]  # the committed pack's checkpoint


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


def test_an_evaluation_past_the_last_checkpoint_is_named(series):
    """Its weights were lost (the records rolled back to the pack): the run retrains that step, so the file
    evaluates a checkpoint the run will not have."""
    (series / "eval_step50").mkdir()
    for step in (STEP, STEP + 2):
        (series / "eval_step50" / f"eval_{RUN}_step{step}.json").write_text("{}")
    status = run_status(series / RUN)
    (problem,) = status.problems
    assert status.evaluated == [STEP, STEP + 2]
    assert f"eval_{RUN}_step{STEP + 2}.json" in problem and f"last checkpoint {STEP}" in problem
    assert "retrains" in problem


def test_the_command_exit_status_and_json(series, capsys):
    assert main(["status", str(series), "--target", str(STEP + 6), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (run,) = result["runs"]
    assert result["target"] == STEP + 6 and run["name"] == RUN and run["pack"] == STEP and run["remaining"] == 6
    assert run["target"] == STEP + 6 and result["targets"] == {}
    (series / "packs" / f"{RUN}.tar").unlink()
    assert main(["status", str(series)]) == 1
    out = capsys.readouterr().out
    assert "problems:" in out and "cannot resume" in out and "run-steps left: 50 (grpo 50 to 50)" in out


def test_a_method_has_its_own_target(series, capsys):
    """Issue 36 asks 50 steps of OCSD and GRPO and 20 of each baseline: ``--target rlsd=20`` beside the default."""
    assert main(["status", str(series), "--target", f"grpo={STEP + 4}", "--target", "rlsd=20", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (run,) = result["runs"]
    assert result["targets"] == {"grpo": STEP + 4, "rlsd": 20} and result["target"] == 50
    assert run["target"] == STEP + 4 and run["remaining"] == 4
    main(["status", str(series), "--target", "60", "--target", f"grpo={STEP + 4}"])
    assert f"run-steps left: 4 (grpo 4 to {STEP + 4})" in capsys.readouterr().out
    main(["status", str(series), "--target", f"grpo={STEP + 4}", "--target", "sdar=20"])
    assert f"run-steps left: 24 (grpo 4 to {STEP + 4}; sdar 20 to 20, no run yet)" in capsys.readouterr().out


@pytest.mark.parametrize("values, default, by_method", [
    (None, 50, {}), (["30"], 30, {}), (["rlsd=20", "sdar=20"], 50, {"rlsd": 20, "sdar": 20}),
    (["grpo_opsd=20", "40"], 40, {"grpo_opsd": 20}),
])
def test_targets_parse(values, default, by_method):
    targets = parse_targets(values)
    assert targets == Targets(default, by_method)
    assert targets.of("ocsd") == default and all(targets.of(m) == n for m, n in by_method.items())


@pytest.mark.parametrize("values, message", [
    (["0"], "'0'"), (["rlsd=0"], "'rlsd=0'"), (["rlsd="], "'rlsd='"), (["=20"], "'=20'"), (["a=b=3"], "'a=b=3'"),
    (["twenty"], "'twenty'"), (["rlsd=20", "rlsd=30"], "rlsd was given a step twice"), (["20", "30"], "20, 30"),
])
def test_a_bad_target_is_refused_naming_it(values, message):
    with pytest.raises(UsageError, match="--target") as refused:
        parse_targets(values)
    assert message in str(refused.value)


@pytest.mark.parametrize("make, message", [
    (lambda root: root / "missing", "not a folder"),
    (lambda root: root, "no run folder"),
])
def test_bad_input_exits_2_naming_it(tmp_path, make, message):
    done = subprocess.run([sys.executable, "-m", "training.campaign", "status", str(make(tmp_path))], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert main(["status", str(tmp_path), "--target", "0"]) == 2


def _tgz(out: Path, root: Path, member: str, exclude: str | None = None) -> Path:
    with tarfile.open(out, "w:gz") as tar:
        tar.add(root / member, arcname=member, filter=lambda info: None if exclude and exclude in info.name else info)
    return out


def _send(tmp_path: Path, folder: Path, *names: str) -> Path:
    """A machine's poll folder for the runs ``names``: ``NAME.tgz`` (records) and ``NAME.actor.tgz.*`` (its last
    checkpoint's actor/, from the committed pack, cut into parts), as ``results/paper_scale_on_gpu.sh poll`` writes
    them."""
    from training.resume_pack import unpack

    machine = tmp_path / "machine"
    folder.mkdir()
    for name in names:
        shutil.copytree(SERIES / name, machine / name)
        step = unpack(SERIES / "packs" / f"{name}.tar", machine / name).name.rsplit("_", 1)[1]
        _tgz(folder / f"{name}.tgz", machine, name, exclude="actor")
        whole = _tgz(tmp_path / "actor.tgz", machine, f"{name}/global_step_{step}/actor").read_bytes()
        size = len(whole) // 3 + 1
        for i, suffix in enumerate(("aa", "ab", "ac")):
            (folder / f"{name}.actor.tgz.{suffix}").write_bytes(whole[i * size:(i + 1) * size])
    return folder


@pytest.fixture
def sent(tmp_path):
    """A machine's poll folder for the run (:func:`_send`)."""
    return _send(tmp_path, tmp_path / "poll1", RUN)


def test_collect_brings_the_records_and_the_weights_into_the_series(sent, tmp_path):
    series = tmp_path / "series"
    series.mkdir()
    done, invalid = collect(series, [sent], tmp_path / "runs")
    assert invalid == [] and f"packed step {STEP}" in done[0]
    assert not list((series / RUN).rglob("actor"))
    for path in (SERIES / RUN).rglob("*"):
        if path.is_file():
            assert (series / RUN / path.relative_to(SERIES / RUN)).read_bytes() == path.read_bytes(), path
    assert (tmp_path / "runs" / RUN / f"global_step_{STEP}" / "actor").is_dir()
    (status,) = series_status(series)
    assert status.pack == status.checkpoint == STEP and status.problems == []
    again, _ = collect(series, [sent], tmp_path / "runs")  # the same weights again: the pack stays
    assert f"the pack already holds step {STEP}" in again[0]


def test_the_newest_folder_wins(sent, tmp_path):
    old = tmp_path / "poll0"
    old.mkdir()
    stale = tmp_path / "stale"
    shutil.copytree(SERIES / RUN, stale / RUN, ignore=shutil.ignore_patterns(f"global_step_{STEP}"))
    _tgz(old / f"{RUN}.tgz", stale, RUN)
    assert sent_back([old, sent])[RUN][0] == sent / f"{RUN}.tgz"
    assert sent_back([sent, old])[RUN] == (old / f"{RUN}.tgz", sorted(sent.glob(f"{RUN}.actor.tgz.*")))


def _records_past_the_pack(tmp_path: Path, name: str, *, rows: int) -> Path:
    """A poll folder ``name`` holding the committed run's records (no weights) with a checkpoint STEP + 2 and
    ``rows`` metrics rows past STEP, as a machine given back before the weights of STEP + 2 came sends them."""
    machine = tmp_path / "machine"
    shutil.copytree(SERIES / RUN, machine / RUN)
    shutil.copytree(machine / RUN / f"global_step_{STEP}", machine / RUN / f"global_step_{STEP + 2}")
    metrics = [json.loads(line) for line in (machine / RUN / "metrics.jsonl").read_text().splitlines() if line.strip()]
    metrics += [{**metrics[-1], "step": STEP + k} for k in range(1, rows + 1)]
    (machine / RUN / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    folder = tmp_path / name
    folder.mkdir()
    _tgz(folder / f"{RUN}.tgz", machine, RUN)
    return folder


def test_records_past_a_checkpoint_whose_weights_were_lost_are_rolled_back(series, tmp_path):
    """The machine was given back before the weights of its last checkpoint came: the run resumes from the pack, so
    the series keeps its records only to the pack's step, as the trainer does when it resumes there."""
    folder = _records_past_the_pack(tmp_path, "poll_records_only", rows=3)
    done, invalid = collect(series, [folder], tmp_path / "runs")
    assert invalid == [] and "no weights came back" in done[0]
    assert f"checkpoint {STEP + 2} are not in the pack" in done[0]
    assert f"rolled back to the pack's step {STEP}" in done[0]
    assert _metrics_steps(series / RUN) == _metrics_steps(SERIES / RUN)
    assert not (series / RUN / f"global_step_{STEP + 2}").exists()
    status = run_status(series / RUN)
    assert status.problems == [] and status.pack == status.checkpoint == status.recorded == STEP
    assert not roll_back(series / RUN, STEP)  # nothing past the pack: nothing dropped


def test_an_evaluation_of_a_step_rolled_back_is_held_out_by_the_collection(series, tmp_path_factory, capsys):
    """The machine evaluated the run's last checkpoint, whose weights did not come back: the records are rolled back
    to the pack and the evaluation is not filed into the series (the run will retrain that step), but named where it
    stays; an evaluation of a checkpoint the records hold is filed beside it."""
    calls = tmp_path_factory.mktemp("calls")  # outside the series, as the machine's folders are
    folder = _records_past_the_pack(calls, "poll", rows=2)
    lost = folder / f"eval_{RUN}_step{STEP + 2}.json"
    lost.write_text(json.dumps({"success_rate": 0.9, "global_step": STEP + 2}))
    (folder / f"eval_{RUN}_step{STEP}.json").write_text(json.dumps({"success_rate": 0.8, "global_step": STEP}))
    assert main(["collect", str(series), str(folder), "--runs", str(calls / "runs")]) == 0
    out = capsys.readouterr().out
    assert f"rolled back to the pack's step {STEP}" in out
    assert (f"{lost.name}: not filed: it evaluates step {STEP + 2}, past the records' last checkpoint {STEP}"
            in out) and f"it stays in {folder}" in out
    assert lost.is_file() and not (series / f"eval_step{STEP + 2}").exists()
    assert (series / f"eval_step{STEP}" / f"eval_{RUN}_step{STEP}.json").is_file()
    assert run_status(series / RUN).problems == []

    shutil.copyfile(lost, series / lost.name)  # filed by hand: status still names it
    assert main(["status", str(series)]) == 1
    assert f"{lost.name} evaluates step {STEP + 2}, past the records' last checkpoint {STEP}" in capsys.readouterr().out


def test_collect_refuses_what_it_cannot_read(sent, tmp_path, capsys):
    series = tmp_path / "series"
    series.mkdir()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["collect", str(series), str(empty), "--runs", str(tmp_path / "runs")]) == 2
    assert "no NAME.tgz" in capsys.readouterr().err
    assert main(["collect", str(series), str(sent), "--runs", str(tmp_path / "runs")]) == 0
    capsys.readouterr()
    (sent / f"{RUN}.actor.tgz.ab").write_bytes(b"torn")
    assert main(["collect", str(series), str(sent), "--runs", str(tmp_path / "runs")]) == 2
    assert f"{RUN}.actor.tgz.*: cannot be unpacked" in capsys.readouterr().err
    assert (tmp_path / "runs" / RUN / f"global_step_{STEP}" / "actor").is_dir()  # the earlier copy stays
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [RUN]

    for part in sent.glob(f"{RUN}.actor.tgz.*"):
        part.unlink()  # the records alone
    (series / "packs" / f"{RUN}.tar").write_text("not a tar file")  # a damaged pack already in the series
    assert main(["collect", str(series), str(sent), "--runs", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and f"{RUN}.tar: not a resume pack" in err and "Traceback" not in err


def test_collect_files_the_evaluations_by_step(sent, tmp_path, capsys):
    """An evaluation sent back (a committed one) goes into eval_stepK/ of the series and counts as evaluated; the
    same file again changes nothing; a file that is no evaluation, or of another step, stops the collection."""
    series = tmp_path / "series"
    series.mkdir()
    committed = next((SERIES / "eval_step26").glob("eval_*_step26.json"))
    name = committed.name.replace(committed.name.split("_step")[0], f"eval_{RUN}")
    shutil.copyfile(committed, sent / name)
    done, _ = collect(series, [sent], tmp_path / "runs")
    assert done[-1] == f"{name}: copied into {series / 'eval_step26'}"
    assert (series / "eval_step26" / name).read_bytes() == committed.read_bytes()
    assert series_status(series)[0].evaluated == [26]
    again, _ = collect(series, [sent], tmp_path / "runs")
    assert again[-1] == f"{name}: already in {series / 'eval_step26'}"

    later = tmp_path / "poll9"
    later.mkdir()
    (later / f"eval_{RUN}_step50.json").write_text('{"success_rate": 0.9, "global_step": 48}')
    assert main(["collect", str(series), str(sent), str(later), "--runs", str(tmp_path / "runs")]) == 2
    assert "holds the evaluation of step 48, not of step 50" in capsys.readouterr().err
    (later / f"eval_{RUN}_step50.json").write_text('{"success_rate": 0.9')
    assert main(["collect", str(series), str(sent), str(later), "--runs", str(tmp_path / "runs")]) == 2
    assert f"eval_{RUN}_step50.json: not an evaluation, it cannot be read as JSON" in capsys.readouterr().err
    assert not (series / "eval_step50").exists()


def test_records_past_the_last_checkpoint_are_rolled_back(series, tmp_path):
    """A machine given back between two checkpoints: the records reach step K+1 with the last checkpoint at K. The
    trainer retrains K+1 when it resumes from K, so the series keeps the records only to K."""
    machine = tmp_path / "machine"
    shutil.copytree(SERIES / RUN, machine / RUN)
    rows = [json.loads(line) for line in (machine / RUN / "metrics.jsonl").read_text().splitlines() if line.strip()]
    (machine / RUN / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in
                                                         rows + [{**rows[-1], "step": STEP + 1}]))
    folder = tmp_path / "poll_between"
    folder.mkdir()
    _tgz(folder / f"{RUN}.tgz", machine, RUN)
    done, invalid = collect(series, [folder], tmp_path / "runs")
    assert invalid == [] and f"the records of step {STEP + 1}, past the last checkpoint, were rolled back" in done[0]
    assert _metrics_steps(series / RUN) == _metrics_steps(SERIES / RUN)
    assert run_status(series / RUN).recorded == STEP
    assert roll_back(series / RUN, STEP - 2) == RolledBack([STEP], [STEP - 1, STEP])


def _older_pack(path: Path, step: int, *, other_state: bool = False) -> None:
    """Rewrite the ``pack.json`` of the pack at ``path`` to say ``step`` (a pack left behind by the records); with
    ``other_state``, its trainer state replaced by random bytes of the same length, so that git cannot write the
    newer pack as a small delta of it (as with two real checkpoints)."""
    with tarfile.open(path) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(path, "w") as tar:
        for member, data in members:
            if member.name == "pack.json":
                data = json.dumps({**json.loads(data), "global_step": step}).encode()
                member.size = len(data)
            elif other_state and member.name.endswith(".pt"):
                data = np.random.default_rng(0).bytes(len(data))
            tar.addfile(member, io.BytesIO(data))


def test_a_pack_past_the_budget_is_not_replaced(series, sent, tmp_path, capsys):
    """With no budget left the series keeps its older pack, rolls the records back to it, and the newer weights stay
    in --runs; with room, the pack is replaced and its cost, as git writes it, is said."""
    _older_pack(series / "packs" / f"{RUN}.tar", STEP - 2)
    assert main(["collect", str(series), str(sent), "--runs", str(tmp_path / "runs"), "--budget-mib", "0"]) == 0
    out = capsys.readouterr().out
    assert f"the pack of step {STEP} (" in out and "does not fit the budget (0.0 MB left)" in out
    assert f"so the pack keeps step {STEP - 2}" in out
    status = run_status(series / RUN)
    assert status.problems == [] and status.pack == status.checkpoint == status.recorded == STEP - 2
    assert (tmp_path / "runs" / RUN / f"global_step_{STEP}" / "actor").is_dir()

    old = tmp_path / "old.tar"
    shutil.copyfile(series / "packs" / f"{RUN}.tar", old)
    done, invalid = collect(series, [sent], tmp_path / "runs", budget=300 * MIB)
    cost = change_bytes(old, series / "packs" / f"{RUN}.tar")
    assert invalid == [] and f"packed step {STEP} into" in done[0]
    assert f"({cost / 1e6:.1f} MB of a push's diff)" in done[0]
    assert run_status(series / RUN).pack == STEP


def test_the_budget_takes_the_runs_that_gained_most(tmp_path):
    """Two runs new to the series, room for one first pack: the run with more steps comes in, the other is left out
    of the series whole (records without a pack could not resume) with its weights in --runs."""
    series = tmp_path / "series"
    series.mkdir()
    folder = _send(tmp_path, tmp_path / "poll2", RUN, OTHER)
    steps = {name: read_pack_info(SERIES / "packs" / f"{name}.tar")["global_step"] for name in (RUN, OTHER)}
    first, second = sorted(steps, key=lambda n: (-steps[n], n))
    one = change_bytes(None, SERIES / "packs" / f"{first}.tar")
    done, invalid = collect(series, [folder], tmp_path / "runs", budget=int(one * 1.5))
    assert invalid == []
    assert [r.name for r in series_status(series)] == [first]
    assert any(line.startswith(f"{second}: not brought into the series: its first pack") for line in done)
    assert (tmp_path / "runs" / second / f"global_step_{steps[second]}" / "actor").is_dir()


def test_collect_since_takes_its_budget_from_the_push(series, sent, tmp_path, capsys):
    """--since REV: the budget is what the commits since REV and the changes not committed leave under --limit-mib,
    less --reserve-mib; here 40 - 0 - 10 MiB, short of a replaced pack, then the default 256 MiB, room for it."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    _older_pack(series / "packs" / f"{RUN}.tar", STEP - 2, other_state=True)
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "the series"]):
        subprocess.run(["git", *args], cwd=series, check=True, env=env, capture_output=True)
    runs = str(tmp_path / "runs")
    main(["collect", str(series), str(sent), "--runs", runs, "--since", "HEAD", "--limit-mib", "40"])
    out = capsys.readouterr().out
    assert f"push budget: {30 * MIB / 1e6:.1f} MB" in out and f"so the pack keeps step {STEP - 2}" in out
    assert main(["collect", str(series), str(sent), "--runs", runs, "--since", "HEAD"]) == 0
    out = capsys.readouterr().out
    assert f"packed step {STEP} into" in out and run_status(series / RUN).pack == STEP
    with pytest.raises(SystemExit) as refused:
        main(["collect", str(series), str(sent), "--runs", runs, "--since", "HEAD", "--budget-mib", "1"])
    assert refused.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def _audit_bundle(folder: Path, name: str, *audits: tuple[str, Path]) -> Path:
    """``audit_<name>.tgz`` in ``folder`` as the GPU script's audit job writes it: a folder per checkpoint."""
    folder.mkdir(exist_ok=True)
    with tarfile.open(folder / f"audit_{name}.tgz", "w:gz") as tar:
        for arcname, source in audits:
            tar.add(source, arcname=arcname)
    return folder / f"audit_{name}.tgz"


COMMITTED_AUDIT = SERIES / "audit_one_obs_ocsd_s3_step26"


def test_audits_come_into_the_series_and_take_their_bytes_off_the_budget(series, sent, tmp_path):
    """A committed audit sent back as a bundle lands in the series as it was; a budget that holds the newer pack
    alone no longer holds it beside the audits, which came first; the same bundle again changes nothing."""
    extra = tmp_path / "poll_audits"
    _audit_bundle(extra, "one_obs_x", ("audit_one_obs_x_step26", COMMITTED_AUDIT))
    audit_bytes = sum(p.stat().st_size for p in COMMITTED_AUDIT.iterdir())
    _older_pack(series / "packs" / f"{RUN}.tar", STEP - 2, other_state=True)
    twin = tmp_path / "twin"
    shutil.copytree(series, twin)
    old = tmp_path / "old.tar"
    shutil.copyfile(series / "packs" / f"{RUN}.tar", old)

    done, invalid = collect(series, [sent], tmp_path / "runs", budget=300 * MIB)
    assert invalid == [] and f"packed step {STEP} into" in done[0]
    cost = change_bytes(old, series / "packs" / f"{RUN}.tar")
    done, invalid = collect(twin, [sent, extra], tmp_path / "runs2", budget=cost + audit_bytes // 2)
    assert invalid == [] and f"audit_one_obs_x_step26: copied into {twin}" in done
    assert "does not fit the budget" in done[0] and run_status(twin / RUN).pack == STEP - 2
    landed = twin / "audit_one_obs_x_step26"
    assert sorted(p.name for p in landed.iterdir()) == sorted(p.name for p in COMMITTED_AUDIT.iterdir())
    assert all((landed / p.name).read_bytes() == p.read_bytes() for p in COMMITTED_AUDIT.iterdir())
    again, _ = collect(twin, [extra], tmp_path / "runs2")
    assert again == [f"audit_one_obs_x_step26: already in {twin}"]


def test_other_outputs_stay_and_a_bundle_without_audits_stops_the_collection(sent, tmp_path, capsys):
    """The ladder's and a warm start's bundles are no runs: named, not collected. A bundle named audit_* that holds
    no audit stops everything before a run is unpacked; only evaluations or audits are enough to collect."""
    series = tmp_path / "series"
    series.mkdir()
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "x.txt").write_text("not an audit")
    _audit_bundle(sent, "bad", ("notes", notes))
    assert main(["collect", str(series), str(sent), "--runs", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "audit_bad.tgz: not a bundle of audits (notes is no audit_*/ folder with an audit.json)" in err
    assert not (tmp_path / "runs").exists() and list(series.iterdir()) == []
    (sent / "audit_bad.tgz").unlink()
    for name in ("ladder_q05.tgz", "sft_q.warm.tgz"):
        _tgz(sent / name, tmp_path, "notes")
    done, invalid = collect(series, [sent], tmp_path / "runs")
    assert invalid == [] and sorted(sent_back([sent])) == [RUN]
    assert f"{sent / 'ladder_q05.tgz'}: not collected (a job's output, not a run's records or audits: unpack it by " \
           "hand)" in done
    assert any(line.startswith(f"{sent / 'sft_q.warm.tgz'}: not collected") for line in done)
    only = tmp_path / "only_audits"
    _audit_bundle(only, "one_obs_x", ("audit_one_obs_x_step26", COMMITTED_AUDIT))
    assert collect(series, [only], tmp_path / "runs")[0] == [f"audit_one_obs_x_step26: copied into {series}"]


def _stale(tmp_path: Path, folder: str, last: int) -> Path:
    """A poll folder of an earlier machine: the run's records only to step ``last`` (its checkpoints past it gone)."""
    machine = tmp_path / f"{folder}_machine"
    shutil.copytree(SERIES / RUN, machine / RUN)
    for checkpoint in (machine / RUN).glob("global_step_*"):
        if int(checkpoint.name.rsplit("_", 1)[1]) > last:
            shutil.rmtree(checkpoint)
    rows = [line for line in (machine / RUN / "metrics.jsonl").read_text().splitlines()
            if line.strip() and json.loads(line)["step"] <= last]
    (machine / RUN / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    (tmp_path / folder).mkdir()
    return _tgz(tmp_path / folder / f"{RUN}.tgz", machine, RUN).parent


def test_a_folder_that_would_set_a_run_back_stops_the_collection(series, sent, tmp_path, capsys):
    """An earlier machine's poll folder named after the newest one, or a folder behind the series' records, is
    refused by name before anything moves: the series keeps its records and --runs its weights."""
    old = _stale(tmp_path, "poll_earlier", STEP - 6)
    before = (series / RUN / "metrics.jsonl").read_bytes()
    with pytest.raises(UsageError, match=rf"{old.name}/{RUN}\.tgz: records to step {STEP - 6}, behind the series"):
        collect(series, [old], tmp_path / "runs")
    assert main(["collect", str(series), str(sent), str(old), "--runs", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert f"behind {sent / RUN}.tgz (step {_metrics_steps(SERIES / RUN)[-1]})" in err and "oldest first" in err
    assert (series / RUN / "metrics.jsonl").read_bytes() == before and not (tmp_path / "runs").exists()
    assert not list(series.glob("eval_step*"))
    done, invalid = collect(series, [old, sent], tmp_path / "runs")  # oldest first: the newest records win
    assert invalid == [] and (series / RUN / "metrics.jsonl").read_bytes() == before
    assert behind(series, [old, sent]) == [] and len(behind(tmp_path / "empty_series", [sent, old])) == 1


def test_a_torn_last_line_sent_back_reads_as_the_run_reads_it(series, tmp_path):
    """A machine given back mid-write sends records whose last line is torn: the check reads them as
    ocsd.records.read_metrics does (the torn line ignored), so the run is not called behind for it."""
    folder = _stale(tmp_path, "poll_torn", STEP)
    machine = tmp_path / "poll_torn_machine"
    with open(machine / RUN / "metrics.jsonl", "a") as metrics:
        metrics.write('{"step": 9')
    _tgz(folder / f"{RUN}.tgz", machine, RUN)
    assert behind(series, [folder]) == []
    (machine / RUN / "metrics.jsonl").write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    _tgz(folder / f"{RUN}.tgz", machine, RUN)
    with pytest.raises(UsageError, match=rf"{RUN}\.tgz: {RUN}/metrics.jsonl: "):
        behind(series, [folder])
