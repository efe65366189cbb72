"""``results/paper_scale_on_gpu.sh bundle``: what a GPU machine needs travels in parts that join into the inputs,
prepared warm starts carry only their demonstrations, and a folder without them is refused before anything is made."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "results" / "paper_scale_on_gpu.sh"

pytestmark = pytest.mark.skipif(shutil.which("tar") is None or shutil.which("split") is None,
                                reason="needs tar and split")


@pytest.fixture()
def inputs(tmp_path):
    """Stand-in files in the places the bundle reads (their content is carried as it is)."""
    made = {}
    for name, files in {"stack": ["gpu_stack.tar.00", "SHA256SUMS"], "models": ["models.tar.00", "SHA256SUMS"],
                        "carry": ["site312.tar.xz"], "games/json_2.1.1/train/g": ["game.tw-pddl"],
                        "eval/json_2.1.1/valid_seen/g": ["game.tw-pddl"],
                        "sft_q/demonstrations": ["info.json", "train.parquet"], "sft_q": ["sft.json"]}.items():
        for f in files:
            path = tmp_path / name / f
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(f"{name}/{f}".encode() * 1000)
        made[name.split("/")[0]] = tmp_path / name.split("/")[0]
    return made


def _bundle(inputs, out, **extra):
    env = {"PATH": "/usr/bin:/bin", "STACK_PARTS": str(inputs["stack"]), "MODEL_PARTS": str(inputs["models"]),
           "CARRY": str(inputs["carry"]), "GAMES": str(inputs["games"]), "EVAL_DATA": str(inputs["eval"]),
           "PART_SIZE": "20K", **extra}
    return subprocess.run(["bash", str(SCRIPT), "bundle", str(out)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_bundle_parts_join_into_the_inputs(inputs, tmp_path):
    out = tmp_path / "parts"
    done = _bundle(inputs, out, DEMOS=str(inputs["sft_q"]))
    assert done.returncode == 0, done.stderr
    parts = sorted(out.glob("ps.*"))
    assert len(parts) > 1 and all(p.stat().st_size <= 20 * 1024 for p in parts)
    sums = subprocess.run(["sha256sum", "-c", "SUMS"], cwd=out, capture_output=True, text=True)
    assert sums.returncode == 0, sums.stdout
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts))) as tar:
        names = {m.name for m in tar.getmembers() if m.isfile()}
        assert tar.extractfile("demos/sft_q/demonstrations/info.json").read() == \
            (inputs["sft_q"] / "demonstrations" / "info.json").read_bytes()
    assert {"stack/gpu_stack.tar.00", "models/models.tar.00", "site/site312.tar.xz",
            "games/json_2.1.1/train/g/game.tw-pddl", "valid/json_2.1.1/valid_seen/g/game.tw-pddl"} <= names
    assert "demos/sft_q/sft.json" not in names  # only the demonstrations of a prepared warm start travel


def test_a_warm_start_folder_without_demonstrations_is_refused(inputs, tmp_path):
    out = tmp_path / "parts"
    done = _bundle(inputs, out, DEMOS=str(inputs["games"]))
    assert done.returncode == 2 and "has no demonstrations/info.json" in done.stderr
    assert not list(out.glob("ps.*"))


def test_usage_names_every_command():
    done = subprocess.run(["bash", str(SCRIPT), "banana"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    for command in ("prepare", "bundle", "carry_runs", "install", "code", "zeroshot", "sft", "eval", "run", "steps",
                    "ladder", "audit", "scaling", "verl_check", "poll"):
        assert command in done.stderr


def test_eval_job_takes_the_split_and_gpu_asked_for(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "DRY": "1", "GPUS": "4", "GPU": "3", "SPLIT": "valid_train"}
    done = subprocess.run(["bash", str(SCRIPT), "eval", "warm", "/tmp/warm/w"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("GPU 3: python3 -m training.evaluate --ckpt /tmp/warm/w ")
    assert "--split valid_train" in done.stdout and "eval_warm.json" in done.stdout


def test_a_job_after_another_starts_only_once_that_one_ended_well(tmp_path):
    """AFTER=JOB: the second job waits for the first one's exit status and, the first having failed, does not run;
    poll waits for both and prints each one's status."""
    env = {"PATH": "/usr/bin:/bin", "GPUS": "1", "JOBS": str(tmp_path / "jobs"), "OUT": str(tmp_path / "out"),
           "PYTHONPATH": "/nonexistent"}
    (tmp_path / "out").mkdir()

    def script(*args, **extra):
        return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env={**env, **extra}, capture_output=True,
                              text=True, timeout=120)

    first = script("eval", "first", "/nonexistent/ckpt")  # no training package here: ends with status 1 at once
    assert first.returncode == 0 and "started eval_first on GPU 0" in first.stdout, first.stderr
    second = script("eval", "second", "/nonexistent/ckpt", AFTER="eval_first")
    assert "started eval_second on GPU 0 after eval_first" in second.stdout, second.stderr
    polled = script("poll", "100")
    assert "== eval_first: 1" in polled.stdout and "== eval_second: 3" in polled.stdout, polled.stdout
    log = (tmp_path / "jobs" / "eval_second.log").read_text()
    assert "not started: eval_first ended with status 1" in log


def test_the_scaling_benchmark_sees_every_gpu_or_the_one_named():
    env = {"PATH": "/usr/bin:/bin", "DRY": "1", "GPUS": "4", "STEPS": "3"}
    done = subprocess.run(["bash", str(SCRIPT), "scaling", "--gpus", "1,2"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("GPU all: VERL_USE_EXTERNAL_MODULES=training.verl.plugin python3 "
                                  "benchmarks/verl_scaling.py ")
    assert "--steps 3" in done.stdout and "--gpus 1,2" in done.stdout and "figures.verl_scaling" in done.stdout
    assert "--micro-batch-tokens 8192 --scoring-tokens 16384" in done.stdout  # the training runs' budgets
    one = subprocess.run(["bash", str(SCRIPT), "scaling", "--gpus", "1"], cwd=ROOT, env={**env, "GPU": "3"},
                         capture_output=True, text=True, timeout=60)
    assert one.returncode == 0 and one.stdout.startswith("GPU 3: "), one.stdout + one.stderr  # one GPU of several


def test_two_scaling_measurements_keep_apart_by_their_names():
    env = {"PATH": "/usr/bin:/bin", "DRY": "1", "GPUS": "4", "GPU": "3"}
    outs = []
    for name in (None, "verl_fused"):
        done = subprocess.run(["bash", str(SCRIPT), "scaling", "--gpus", "1", "--no-single"], cwd=ROOT,
                              env={**env, **({"SCALING_NAME": name} if name else {})}, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        outs.append(done.stdout)
    default, named = outs
    assert "--out /tmp/ps_jobs/out/verl_scaling --runs /tmp/scaling_runs/verl_scaling " in default
    assert "--out /tmp/ps_jobs/out/verl_fused --runs /tmp/scaling_runs/verl_fused " in named
    assert "figures.verl_scaling /tmp/ps_jobs/out/verl_fused --out /tmp/ps_jobs/out/verl_fused" in named
    assert "verl_scaling" not in named.replace("benchmarks/verl_scaling.py", "").replace("figures.verl_scaling", "")


def test_the_verl_check_runs_verl_then_its_parity_validation_and_report_on_one_gpu():
    env = {"PATH": "/usr/bin:/bin", "DRY": "1", "GPUS": "4", "GPU": "2", "MICRO": "4096"}
    done = subprocess.run(["bash", str(SCRIPT), "verl_check"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("GPU 2: export VERL_USE_EXTERNAL_MODULES=training.verl.plugin;")
    order = [out.index(part) for part in ("benchmarks/verl_backend.py", "training.verl.parity",
                                          "ocsd.records validate", "diagnostics.report", "verl_check.tgz")]
    assert order == sorted(order) and "--backends verl --gpus 1" in out and "--dtype float32" in out
    assert "--micro-batch-tokens 4096 --scoring-tokens 16384" in out


@pytest.mark.parametrize("games, expected", [
    (None, "data=/tmp/ps_assets/valid train_split=valid_train val_split=valid_seen"),
    ("real", "data=/tmp/ps_assets/valid train_split=valid_train val_split=valid_seen"),
    ("generated", "data=generated games_dir=/tmp/ps_assets/games n_train_games=64"),
])
def test_runs_and_step_timings_train_on_the_training_games_asked_for(games, expected):
    env = {"PATH": "/usr/bin:/bin", "DRY": "1", "GPUS": "2", "GPU": "1", **({"TRAIN_GAMES": games} if games else {})}
    for args in (["run", "r", "ocsd", "qwen2.5-coder-0.5b", "W", "1"], ["steps", "s", "qwen2.5-coder-0.5b"]):
        done = subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        assert expected in " ".join(done.stdout.split()), done.stdout
    assert "run_dir=/tmp/steptime/s " in done.stdout  # step timings stay out of the runs that poll packs


def test_unknown_training_games_are_refused_before_a_job_starts(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "GPUS": "1", "TRAIN_GAMES": "valid", "JOBS": str(tmp_path / "jobs")}
    done = subprocess.run(["bash", str(SCRIPT), "run", "r", "grpo", "m", "W", "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "TRAIN_GAMES must be real or generated, not 'valid'" in done.stderr
    assert not (tmp_path / "jobs").exists()


def _poll(tmp_path, *runs_named, outputs=1, started=("ocsd_a", "grpo_a"), **env_extra):
    """A run folder per name with checkpoints 2, 8, 10 and 12 (12 without its weights, as while it is written),
    ``outputs`` evaluation outputs, and what ``poll 1 RUN...`` brings back (a fresh $OUT at each call; the run
    folders and $JOBS are kept between calls). The runs in ``started`` were started on the machine from no
    checkpoint (as ``run`` records them); the others came in the bundle and were not started."""
    runs, out, jobs = tmp_path / "runs", tmp_path / "out", tmp_path / "jobs"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    (jobs / "out").mkdir(parents=True, exist_ok=True)
    (jobs / "weights").mkdir(exist_ok=True)
    for name in started:
        if not (jobs / "weights" / name).exists():
            (jobs / "weights" / name).write_text("\n")
    for i in range(outputs):
        (jobs / "out" / f"eval_{'x' if i == 0 else i}.json").write_text("{}")
    for name in ("ocsd_a", "grpo_a"):
        for step in (2, 8, 10, 12):
            if (runs / name / f"global_step_{step}").exists():
                continue
            (runs / name / f"global_step_{step}" / "replay").mkdir(parents=True)
            if step < 12:
                actor = runs / name / f"global_step_{step}" / "actor"
                actor.mkdir()
                (actor / "trainer_state.pt").write_bytes(f"{name}{step}".encode())
        if not (runs / name / "run.json").exists():  # as a run writes them: once, then as it goes on
            (runs / name / "run.json").write_text("{}")
            (runs / name / "metrics.jsonl").write_text("{}\n")
    env = {"PATH": "/usr/bin:/bin", "GPUS": "1", "JOBS": str(jobs), "OUT": str(out), "RUNS_DIR": str(runs),
           **env_extra}
    done = subprocess.run(["bash", str(SCRIPT), "poll", "1", *runs_named], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return out


def test_poll_without_runs_brings_outputs_every_run_folder_and_one_runs_newer_weights(tmp_path):
    out = _poll(tmp_path, WEIGHTS="0")
    assert sorted(p.name for p in out.iterdir()) == ["eval_x.json", "grpo_a.tgz", "ocsd_a.tgz"]
    with tarfile.open(out / "ocsd_a.tgz") as packed:
        names = packed.getnames()
    assert "ocsd_a/global_step_12/replay" in names and not [n for n in names if "/actor" in n]
    # the weights of one run ride along, each run's in turn, until every run's last ones have come back
    brought = []
    for _ in range(3):
        out = _poll(tmp_path)
        brought.append(sorted(p.name for p in out.iterdir() if ".actor." in p.name))
    assert brought == [["grpo_a.actor.tgz.aa"], ["ocsd_a.actor.tgz.aa"], []]
    with tarfile.open(tmp_path / "out" / "ocsd_a.tgz") as packed:
        assert not [n for n in packed.getnames() if "/actor" in n]
    # a newer checkpoint is due again
    actor = tmp_path / "runs" / "ocsd_a" / "global_step_12" / "actor"
    actor.mkdir()
    (actor / "trainer_state.pt").write_bytes(b"ocsd_a12")
    out = _poll(tmp_path)
    with tarfile.open(out / "ocsd_a.actor.tgz.aa") as packed:
        assert packed.getnames()[-1] == "ocsd_a/global_step_12/actor/trainer_state.pt"


def test_the_final_weights_of_a_run_that_ended_come_before_those_of_a_run_still_training(tmp_path):
    """A run that has ended has its last checkpoint for good, lost when the machine is given back; a running run's
    next poll brings newer weights anyway. grpo_a has waited longer (it sorts first), ocsd_a has ended."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "ocsd_a.rc").write_text("0\n")
    brought = [sorted(p.name for p in _poll(tmp_path).iterdir() if ".actor." in p.name) for _ in range(3)]
    assert brought == [["ocsd_a.actor.tgz.aa"], ["grpo_a.actor.tgz.aa"], []]


def test_weights_that_would_pass_a_calls_eight_files_are_left_for_a_poll_naming_the_run(tmp_path):
    out = _poll(tmp_path, outputs=7)  # 7 outputs and the folder of the run whose weights are due: 8 files already
    assert len(list(out.iterdir())) == 8 and not list(out.glob("*.actor.*")) and (out / "grpo_a.tgz").exists()
    for extra in (tmp_path / "jobs" / "out").glob("eval_[0-9]*.json"):
        extra.unlink()
    assert _poll(tmp_path).joinpath("grpo_a.actor.tgz.aa").exists()  # still due, so it comes with the next call


def test_a_run_started_from_carried_weights_does_not_send_them_back(tmp_path):
    runs, jobs = tmp_path / "runs", tmp_path / "jobs"
    (runs / "ocsd_a" / "global_step_6" / "actor").mkdir(parents=True)
    (runs / "ocsd_a" / "global_step_6" / "actor" / "trainer_state.pt").write_bytes(b"6")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "GPUS": "1", "GPU": "0", "JOBS": str(jobs), "RUNS_DIR": str(runs),
           "OUT": str(tmp_path)}
    done = subprocess.run(["bash", str(SCRIPT), "run", "ocsd_a", "ocsd", "m", "w", "1"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert "started ocsd_a on GPU 0" in done.stdout, done.stderr
    assert (jobs / "weights" / "ocsd_a").read_text().strip() == "global_step_6"


def test_weights_of_a_run_carried_in_but_not_started_never_ride_along(tmp_path):
    """A bundle carries every run of the series; those the machine does not train stay where they came from."""
    brought = [sorted(p.name for p in _poll(tmp_path, started=("ocsd_a",)).iterdir() if ".actor." in p.name)
               for _ in range(2)]
    assert brought == [["ocsd_a.actor.tgz.aa"], []]


def test_a_run_started_from_no_checkpoint_has_its_first_weights_brought(tmp_path):
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "GPUS": "1", "GPU": "0", "JOBS": str(tmp_path / "jobs"),
           "RUNS_DIR": str(tmp_path / "runs"), "OUT": str(tmp_path)}
    done = subprocess.run(["bash", str(SCRIPT), "run", "grpo_a", "grpo", "m", "w", "1"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert "started grpo_a on GPU 0" in done.stdout, done.stderr
    assert (tmp_path / "jobs" / "weights" / "grpo_a").read_text().strip() == ""
    out = _poll(tmp_path, started=())
    assert (out / "grpo_a.actor.tgz.aa").exists() and not (out / "ocsd_a.actor.tgz.aa").exists()


def test_poll_with_a_run_brings_only_its_folder_and_its_last_weights_in_step_order(tmp_path):
    """poll SECONDS RUN: the run's folder and the weights of its last checkpoint that has them, by step number
    (as text, global_step_8 sorts last), and of the other runs nothing: a call brings back 8 files."""
    out = _poll(tmp_path, "grpo_a", outputs=0)
    assert sorted(p.name for p in out.iterdir()) == ["grpo_a.actor.tgz.aa", "grpo_a.tgz"]
    with tarfile.open(out / "grpo_a.actor.tgz.aa") as packed:
        assert packed.getnames()[-1] == "grpo_a/global_step_10/actor/trainer_state.pt"


def test_poll_without_runs_brings_only_the_folders_of_runs_started_here(tmp_path):
    """A bundle carries every run of the series; a call's 8 files are not spent on the folders of those the machine
    does not train (six runs and one run's four weight parts would pass them)."""
    out = _poll(tmp_path, started=("ocsd_a",), WEIGHTS="0")
    assert sorted(p.name for p in out.iterdir()) == ["eval_x.json", "ocsd_a.tgz"]


def test_poll_with_a_run_brings_the_finished_evaluations_while_the_call_has_room(tmp_path):
    """poll SECONDS RUN: beside the run's folder and weights (two files here) the evaluations come, up to 8 files."""
    out = _poll(tmp_path, "grpo_a", outputs=8)
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 8 and {"grpo_a.tgz", "grpo_a.actor.tgz.aa"} <= set(names)
    assert sorted(n for n in names if not n.startswith("grpo_a.")) == [f"eval_{i}.json" for i in range(1, 7)]
    for extra in (tmp_path / "jobs" / "out").glob("eval_[0-9]*.json"):
        extra.unlink()
    (tmp_path / "jobs" / "out" / "eval_x.json").write_bytes(b"x" * 63_000_000)  # a file past the call's 62 MB
    assert sorted(p.name for p in _poll(tmp_path, "grpo_a", outputs=0).iterdir()) == ["grpo_a.actor.tgz.aa",
                                                                                      "grpo_a.tgz"]


def test_outputs_come_back_once_before_the_weights_then_only_where_room_is_left(tmp_path):
    """Six audit bundles come first; the due run's weights and folder fill the call, and the other run's folder
    waits. The next call, the bundles having come back, brings the other run's weights and folder and the bundles
    again as far as they fit; a bundle written anew is new again, and a poll naming a run brings it after that
    run's weights."""
    (tmp_path / "jobs" / "out").mkdir(parents=True)
    for i in range(6):
        (tmp_path / "jobs" / "out" / f"audit_{i}.tgz").write_bytes(bytes([i]) * 1000)
    audits = [f"audit_{i}.tgz" for i in range(6)]
    first = sorted(p.name for p in _poll(tmp_path, outputs=0).iterdir())
    assert first == sorted(audits + ["grpo_a.actor.tgz.aa", "grpo_a.tgz"])
    second = sorted(p.name for p in _poll(tmp_path, outputs=0).iterdir())
    assert second == sorted(audits + ["ocsd_a.actor.tgz.aa", "ocsd_a.tgz"])
    (tmp_path / "jobs" / "out" / "audit_5.tgz").write_bytes(b"new" * 1000)
    third = sorted(p.name for p in _poll(tmp_path, outputs=0).iterdir())
    assert third == sorted(audits + ["grpo_a.tgz", "ocsd_a.tgz"])  # no weights due: room for both folders
    named = sorted(p.name for p in _poll(tmp_path, "grpo_a", outputs=0).iterdir())
    assert named[:2] == ["audit_0.tgz", "audit_1.tgz"] and {"grpo_a.tgz", "grpo_a.actor.tgz.aa"} <= set(named)


def test_a_run_folder_comes_again_only_where_it_changed_or_the_call_has_room_left(tmp_path):
    """Without RUNs a folder that has not changed since it came back is not sent before the outputs sent before;
    a changed one is, where the call has room (the weights of a run carry its folder with them)."""
    assert sorted(p.name for p in _poll(tmp_path, WEIGHTS="0").iterdir()) == ["eval_x.json", "grpo_a.tgz",
                                                                               "ocsd_a.tgz"]
    with open(tmp_path / "runs" / "ocsd_a" / "metrics.jsonl", "a") as metrics:
        metrics.write("{}\n")  # a step more for ocsd_a only
    out = sorted(p.name for p in _poll(tmp_path, outputs=7, WEIGHTS="0").iterdir())  # 6 new outputs
    assert out == sorted([f"eval_{i}.json" for i in range(1, 7)] + ["ocsd_a.tgz", "eval_x.json"])
    with tarfile.open(tmp_path / "out" / "ocsd_a.tgz") as packed:
        assert packed.extractfile("ocsd_a/metrics.jsonl").read() == b"{}\n{}\n"


def test_the_audit_job_audits_each_checkpoint_named_into_one_bundle():
    """Each STEP its own rescoring.audit (on the GPU named, float32, without the swap), one bundle; a job without
    a STEP or with one that is no training step is refused. tests/rescoring/test_audit_pool.py runs the job."""
    env = {"PATH": "/usr/bin:/bin", "DRY": "1", "GPUS": "2", "GPU": "1"}
    args = ["audit", "masked_ocsd_s2", "ocsd_qwen0.5b_s2", "full", "masked"]
    done = subprocess.run(["bash", str(SCRIPT), *args, "48", "50"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("GPU 1: ")
    for step in (48, 50):
        assert (f"python3 -m rescoring.audit --run /tmp/runs/ocsd_qwen0.5b_s2 --ckpt-steps {step} --view full --twin "
                f"masked --device cuda --dtype float32 --no-swap --no-progress --out "
                f"/tmp/audit/audit_masked_ocsd_s2_step{step} ") in done.stdout
    assert "tar czf /tmp/ps_jobs/out/audit_masked_ocsd_s2.tgz" in done.stdout
    for extra, message in (([], "name at least one checkpoint STEP"), (["48", "x50"], "not 'x50'")):
        refused = subprocess.run(["bash", str(SCRIPT), *args, *extra], cwd=ROOT, env=env, capture_output=True,
                                 text=True, timeout=60)
        assert refused.returncode == 2 and message in refused.stderr


def test_the_ladder_job_scores_a_run_with_its_stored_scores_and_each_model_named():
    env = {"PATH": "/usr/bin:/bin", "DRY": "1", "GPUS": "2", "GPU": "0"}
    args = ["ladder", "q05", "results/paper_scale/run", "qwen2.5-coder-0.5b", "training/warm_starts/w"]
    done = subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("GPU 0: python3 -m rescoring.ladder --run results/paper_scale/run --model stored "
                                  "--model qwen2.5-coder-0.5b --model training/warm_starts/w --out /tmp/ladder/q05 ")
    assert "ladder_q05.tgz" in done.stdout
    refused = subprocess.run(["bash", str(SCRIPT), *args[:3]], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=60)
    assert refused.returncode == 2 and "name at least one scorer MODEL" in refused.stderr


def _stand_in_evaluate(tmp_path, outcomes):
    """A ``training.evaluate`` in ``tmp_path`` (the jobs' working folder) whose Nth start prints and ends as
    ``outcomes[N]`` says: a message and an exit status. It stands in for vLLM's start-up, which needs a GPU."""
    pkg = tmp_path / "training"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "evaluate.py").write_text(
        "import pathlib, sys\n"
        f"outcomes = {outcomes!r}\n"
        "count = pathlib.Path('tries.txt')\n"
        "n = int(count.read_text()) if count.exists() else 0\n"
        "count.write_text(str(n + 1))\n"
        "message, status = outcomes[min(n, len(outcomes) - 1)]\n"
        "print(message, file=sys.stderr)  # as a traceback is\n"
        "sys.exit(status)\n")
    return tmp_path / "tries.txt"


@pytest.mark.parametrize("outcomes, tries, status", [
    # vLLM's two start-up collisions are tried again; the job then ends with its own status
    ([("AssertionError: Error in memory profiling. Initial free memory 112.94 GiB", 1),
      ("ValueError: No available memory for the cache blocks. Try increasing", 1), ("done", 0)], 3, 0),
    # a third: the engine found its KV-cache share taken by the other job's memory
    ([("ValueError: To serve at least one request with the model's max seq len (2560), (0.03 GiB KV cache is needed, "
       "which is larger than the available KV cache memory (0.01 GiB)", 1), ("done", 0)], 2, 0),
    # any other failure is final
    ([("torch.OutOfMemoryError: CUDA out of memory", 1), ("done", 0)], 1, 1),
    # at most START_TRIES (3 here) tries
    ([("AssertionError: Error in memory profiling.", 1)], 3, 1),
])
def test_a_job_whose_vllm_start_up_collided_starts_again(tmp_path, outcomes, tries, status):
    counter = _stand_in_evaluate(tmp_path, outcomes)
    env = {"PATH": "/usr/bin:/bin", "GPUS": "1", "JOBS": str(tmp_path / "jobs"), "OUT": str(tmp_path / "out"),
           "START_TRIES": "3", "RETRY_DELAY": "0"}
    (tmp_path / "out").mkdir()

    def script(*args):
        return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)

    assert "started eval_x on GPU 0" in script("eval", "x", "/nonexistent/ckpt").stdout
    polled = script("poll", "100")
    assert f"== eval_x: {status}" in polled.stdout, polled.stdout
    assert counter.read_text() == str(tries)
    log = (tmp_path / "jobs" / "eval_x.log").read_text()
    assert log.count("vLLM's start-up collided") == tries - 1


def _kept_run(series: Path, name: str, step: int) -> None:
    """A run as the repository keeps it: its records (run.json, a checkpoint's replay/) and a resume pack of that
    checkpoint, made by training.resume_pack from a small LoRA state (bfloat16 adapter, float32 masters)."""
    import torch
    from safetensors.torch import save_file

    from training.resume_pack import pack

    run = series / name
    ckpt = run / f"global_step_{step}"
    (ckpt / "replay").mkdir(parents=True)
    (ckpt / "replay" / "meta.json").write_text("{}")
    (run / "run.json").write_text(json.dumps({"run": name}))
    gen = torch.Generator().manual_seed(step)
    masters = {0: torch.randn(8, 16, generator=gen), 1: torch.randn(16, 8, generator=gen)}
    (ckpt / "actor" / "adapter").mkdir(parents=True)
    (ckpt / "actor" / "adapter" / "adapter_config.json").write_text('{"r": 8}')
    save_file({"a.lora_A.weight": masters[0].to(torch.bfloat16), "a.lora_B.weight": masters[1].to(torch.bfloat16)},
              ckpt / "actor" / "adapter" / "adapter_model.safetensors", metadata={"format": "pt"})
    state = {i: {"step": torch.tensor(3.0), "exp_avg": m / 10, "exp_avg_sq": m ** 2} for i, m in masters.items()}
    torch.save({"optimizer": {"adamw": {"state": state, "param_groups": [{"params": [0, 1]}]}, "masters": masters},
                "global_step": step}, ckpt / "actor" / "trainer_state.pt")
    pack(run, series / "packs" / f"{name}.tar")
    shutil.rmtree(ckpt / "actor")  # the repository keeps the records without weights


def test_runs_kept_in_the_repository_travel_as_records_and_packs_and_unpack_where_they_ran(tmp_path):
    series = tmp_path / "series"
    _kept_run(series, "ocsd_a", 6)
    _kept_run(series, "grpo_a", 8)
    done = subprocess.run(["bash", str(SCRIPT), "carry_runs", str(series), str(tmp_path / "runs")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "2 runs into" in done.stdout
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        "grpo_a.pack.tar", "grpo_a.tgz", "ocsd_a.pack.tar", "ocsd_a.tgz"]
    there = tmp_path / "there"  # what install does with them: the records, then each pack into its run
    there.mkdir()
    for name, step in (("ocsd_a", 6), ("grpo_a", 8)):
        with tarfile.open(tmp_path / "runs" / f"{name}.tgz") as records:
            assert not [n for n in records.getnames() if "/actor" in n]
            records.extractall(there)
        unpacked = subprocess.run([sys.executable, "-m", "training.resume_pack", "unpack",
                                   str(tmp_path / "runs" / f"{name}.pack.tar"), str(there / name)], cwd=ROOT,
                                  capture_output=True, text=True, timeout=120)
        assert unpacked.returncode == 0, unpacked.stderr
        actor = there / name / f"global_step_{step}" / "actor"
        assert (actor / "trainer_state.pt").is_file() and (actor / "adapter" / "adapter_model.safetensors").is_file()
    script = SCRIPT.read_text()  # install runs the same command for every carried pack
    assert 'python3 -m training.resume_pack unpack "$f" "$RUNS_DIR/$(basename "$f" .pack.tar)"' in script


def test_a_pack_without_its_records_is_refused(tmp_path):
    series = tmp_path / "series"
    _kept_run(series, "ocsd_a", 6)
    shutil.rmtree(series / "ocsd_a")
    done = subprocess.run(["bash", str(SCRIPT), "carry_runs", str(series), str(tmp_path / "runs")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "ocsd_a.tar has no records in" in done.stderr


def _prepare(tmp_path, *args, venv=True):
    env = {"PATH": "/usr/bin:/bin", "VENV": str(tmp_path / "venv")}
    if venv:  # a virtual environment's python, as scripts/install.sh leaves it
        (tmp_path / "venv" / "bin").mkdir(parents=True, exist_ok=True)
        (tmp_path / "venv" / "bin" / "python").unlink(missing_ok=True)
        (tmp_path / "venv" / "bin" / "python").symlink_to(sys.executable)
    return subprocess.run(["bash", str(SCRIPT), "prepare", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_prepare_keeps_the_parts_a_workstation_still_has_and_carries_the_series_runs(tmp_path):
    prepared = tmp_path / "prepared"
    kept = {"stack/parts/SHA256SUMS": "stack", "models/SHA256SUMS": "models", "carry/site312.tar.xz": "site",
            "games/json_2.1.1/valid/g/game.tw-pddl": "game"}
    for path, text in kept.items():  # what an earlier prepare left (downloads are not repeated)
        (prepared / path).parent.mkdir(parents=True, exist_ok=True)
        (prepared / path).write_text(text)
    series = tmp_path / "series"
    _kept_run(series, "ocsd_a", 6)
    (prepared / "runs").mkdir()
    (prepared / "runs" / "stale.pack.tar").write_text("an earlier series")  # runs are always carried afresh
    done = _prepare(tmp_path, prepared, series)
    assert done.returncode == 0, done.stderr
    assert {path: (prepared / path).read_text() for path in kept} == kept
    assert sorted(p.name for p in (prepared / "runs").iterdir()) == ["ocsd_a.pack.tar", "ocsd_a.tgz"]
    assert f"STACK_PARTS={prepared}/stack/parts MODEL_PARTS={prepared}/models CARRY={prepared}/carry" in done.stdout
    assert f"RUNS={prepared}/runs" in done.stdout and "bundle OUT" in done.stdout


@pytest.mark.parametrize("venv, series, message", [
    (False, None, "venv/bin/python not found: bash scripts/install.sh first"),
    (True, "empty", "empty has no packs/ folder"),
])
def test_prepare_refuses_before_it_downloads_anything(tmp_path, venv, series, message):
    args = [tmp_path / "prepared"] + ([tmp_path / series] if series else [])
    done = _prepare(tmp_path, *args, venv=venv)
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "prepared").exists()


def _stand_in_run_steps(tmp_path):
    """``training.train`` and ``training.evaluate`` in ``tmp_path`` (the jobs' working folder) that log their
    arguments to ``calls.txt``; train writes the checkpoint of its ``total_steps`` (its trainer state) and, at its
    first start with total_steps=6, ends as a vLLM start-up collision does; evaluate writes its ``--out-file``.
    They stand in for the GPU runs, to follow the order of a job's parts."""
    pkg = tmp_path / "training"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    common = ("import pathlib, sys\n"
              "args = dict(a.split('=', 1) for a in sys.argv[1:] if '=' in a and not a.startswith('-'))\n"
              "calls = pathlib.Path('calls.txt')\n"
              "logged = calls.read_text() if calls.exists() else ''\n")
    (pkg / "train.py").write_text(
        common + "calls.write_text(logged + f\"train {args['total_steps']}\\n\")\n"
        "if args['total_steps'] == '6' and calls.read_text().count('train 6') == 1:\n"
        "    print('AssertionError: Error in memory profiling.', file=sys.stderr)\n"
        "    sys.exit(1)\n"
        "actor = pathlib.Path(args['run_dir']) / f\"global_step_{args['total_steps']}\" / 'actor'\n"
        "actor.mkdir(parents=True, exist_ok=True)\n"
        "(actor / 'trainer_state.pt').write_text('state')\n")
    (pkg / "evaluate.py").write_text(
        common + "ckpt = sys.argv[sys.argv.index('--ckpt') + 1]\n"
        "calls.write_text(logged + f'evaluate {ckpt}\\n')\n"
        "pathlib.Path(sys.argv[sys.argv.index('--out-file') + 1]).write_text('{}')\n")
    return tmp_path / "calls.txt"


def test_a_run_stops_at_eval_at_to_be_evaluated_then_trains_on(tmp_path):
    """EVAL_AT=K: one job trains to K, evaluates checkpoint K into eval_NAME_stepK.json, then trains on to STEPS on
    the same GPU; a start-up collision starts the job again without redoing the parts that are done."""
    calls = _stand_in_run_steps(tmp_path)
    runs, jobs = tmp_path / "runs", tmp_path / "jobs"
    env = {"PATH": "/usr/bin:/bin", "GPUS": "1", "JOBS": str(jobs), "OUT": str(tmp_path / "out"),
           "RUNS_DIR": str(runs), "START_TRIES": "3", "RETRY_DELAY": "0", "STEPS": "6", "EVAL_AT": "4",
           "SAVE_FREQ": "2"}
    (tmp_path / "out").mkdir()

    def script(*args, **extra):
        return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env={**env, **extra}, capture_output=True,
                              text=True, timeout=120)

    started = script("run", "r", "grpo", "m", "W", "1")
    assert "started r on GPU 0" in started.stdout, started.stderr
    polled = script("poll", "100", WEIGHTS="0")
    assert "== r: 0" in polled.stdout, polled.stdout
    assert calls.read_text().splitlines() == ["train 4", f"evaluate {runs}/r/global_step_4", "train 6", "train 6"]
    assert (jobs / "out" / "eval_r_step4.json").is_file() and (tmp_path / "out" / "eval_r_step4.json").is_file()
    again = script("run", "r", "grpo", "m", "W", "1", DRY="1")  # resumed past the stop: straight on to STEPS
    assert "resumes from global_step_6, past the stop" in again.stderr
    assert again.stdout.count("training.train") == 1 and "training.evaluate" not in again.stdout


@pytest.mark.parametrize("eval_at", ["0", "x", "6", "9"])
def test_an_eval_at_that_is_not_a_step_before_steps_is_refused(tmp_path, eval_at):
    env = {"PATH": "/usr/bin:/bin", "GPUS": "1", "JOBS": str(tmp_path / "jobs"), "STEPS": "6", "EVAL_AT": eval_at}
    done = subprocess.run(["bash", str(SCRIPT), "run", "r", "grpo", "m", "W", "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"EVAL_AT must be a training step before STEPS (6), not '{eval_at}'" in done.stderr
    assert not (tmp_path / "jobs").exists()


def _stand_in_slow_train(tmp_path, fail: str = "", pause: float = 1.0):
    """``training.train`` in ``tmp_path`` that logs ``start NAME`` and ``end NAME`` around a pause of ``pause``
    seconds into ``order.txt`` (the run ``fail`` ends with status 1), to follow which runs train at once on a GPU."""
    pkg = tmp_path / "training"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(
        "import pathlib, sys, time\n"
        "args = dict(a.split('=', 1) for a in sys.argv[1:] if '=' in a and not a.startswith('-'))\n"
        "name = args['run_name']\n"
        "with open('order.txt', 'a') as f: f.write(f'start {name}\\n')\n"
        f"time.sleep({pause})\n"
        "with open('order.txt', 'a') as f: f.write(f'end {name}\\n')\n"
        f"sys.exit(1 if name == {fail!r} else 0)\n")
    return tmp_path / "order.txt"


@pytest.mark.parametrize("fail", ["", "r1"])
def test_runs_on_a_gpu_past_runs_per_gpu_wait_their_turn_in_the_order_started(tmp_path, fail):
    """RUNS_PER_GPU=1: three runs started on one GPU train one after the other, each once the one before has ended,
    well or not (unlike AFTER, a failed run does not stop the next)."""
    order = _stand_in_slow_train(tmp_path, fail)
    env = {"PATH": "/usr/bin:/bin", "GPUS": "1", "GPU": "0", "JOBS": str(tmp_path / "jobs"),
           "OUT": str(tmp_path / "out"), "RUNS_DIR": str(tmp_path / "runs"), "RUNS_PER_GPU": "1", "TURN_POLL": "0.2",
           "START_TRIES": "1"}
    (tmp_path / "out").mkdir()

    def script(*args):
        return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)

    for name in ("r1", "r2", "r3"):
        started = script("run", name, "grpo", "m", "W", "1")
        assert f"started {name} on GPU 0 (runs: at most 1 at once there)" in started.stdout, started.stderr
    polled = script("poll", "100")
    assert "== r3: 0" in polled.stdout and f"== r1: {1 if fail else 0}" in polled.stdout, polled.stdout
    assert order.read_text().split("\n")[:-1] == ["start r1", "end r1", "start r2", "end r2", "start r3", "end r3"]
    assert "waiting for a turn on GPU 0: 2 runs started before it have not ended (at most 1 at once)" in (
        tmp_path / "jobs" / "r3.log").read_text()


def test_a_job_stopped_from_outside_neither_holds_its_turn_nor_its_followers_nor_the_polls(tmp_path):
    """A run killed with its process group writes no status: the run waiting for its turn starts, a job AFTER it is
    not started (it did not end well), and poll says it stopped rather than waiting on it until its deadline."""
    order = _stand_in_slow_train(tmp_path, pause=60.0)
    env = {"PATH": "/usr/bin:/bin", "GPUS": "1", "GPU": "0", "JOBS": str(tmp_path / "jobs"),
           "OUT": str(tmp_path / "out"), "RUNS_DIR": str(tmp_path / "runs"), "RUNS_PER_GPU": "1", "TURN_POLL": "0.2",
           "START_TRIES": "1"}
    (tmp_path / "out").mkdir()

    def script(*args, **extra):
        return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env={**env, **extra}, capture_output=True,
                              text=True, timeout=120)

    jobs = tmp_path / "jobs"
    assert "started r1" in script("run", "r1", "grpo", "m", "W", "1").stdout
    assert "started eval_e1" in script("eval", "e1", "/ckpt", AFTER="r1").stdout
    deadline = time.monotonic() + 30
    while "start r1" not in (order.read_text() if order.exists() else ""):
        assert time.monotonic() < deadline, (jobs / "r1.log").read_text()
        time.sleep(0.1)
    r1 = int((jobs / "r1.pid").read_text())
    assert "started r2" in script("run", "r2", "grpo", "m", "W", "1").stdout
    os.killpg(r1, signal.SIGKILL)  # its shell leads its own process group (setsid)
    while "start r2" not in order.read_text():
        assert time.monotonic() < deadline, (jobs / "r2.log").read_text()
        time.sleep(0.1)
    os.killpg(int((jobs / "r2.pid").read_text()), signal.SIGKILL)
    began = time.monotonic()
    polled = script("poll", "100")
    assert time.monotonic() - began < 60, "poll waited on stopped jobs"
    assert "== r1: stopped without a status" in polled.stdout and "== r2: stopped without a status" in polled.stdout
    assert "== eval_e1: 3" in polled.stdout and "not started: r1 ended with status none: stopped" in polled.stdout
    assert not (jobs / "r1.rc").exists()


@pytest.mark.parametrize("mib, cap", [("81559", "1"), ("143771", "3"), (None, None)])
def test_runs_per_gpu_follows_the_gpus_memory(tmp_path, mib, cap):
    """Without RUNS_PER_GPU: an H100's 80 GB take one run at a time, an H200's 141 GB three; without nvidia-smi
    (no GPU to ask) no limit. Evaluations and audits never wait for a turn."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if mib is not None:
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\necho {mib}\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DRY": "1", "GPUS": "1", "GPU": "0", "JOBS": str(tmp_path / "jobs")}
    run = subprocess.run(["bash", str(SCRIPT), "run", "r", "grpo", "m", "W", "1"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert (f"GPU 0 (runs: at most {cap} at once):" in run.stdout) if cap else ("at most" not in run.stdout)
    evaluation = subprocess.run(["bash", str(SCRIPT), "eval", "e", "/ckpt"], cwd=ROOT, env=env, capture_output=True,
                                text=True, timeout=60)
    assert "at most" not in evaluation.stdout and "turn" not in evaluation.stdout
