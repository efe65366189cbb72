"""``benchmarks/verl_scaling.py`` without a GPU: the summary it stores, its commands (composed, not run) and its
refusals before anything is written."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.training.conftest import alfworld_games, policy_dir  # noqa: F401  (fixtures of the command test)

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "verl_scaling.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("verl_scaling_bench", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def rows(step_seconds, **phases):
    """metrics.jsonl rows of steps 1.. with ``time/step`` from ``step_seconds`` and constant phase times."""
    return [{"step": i + 1, "time/step": s, **phases} for i, s in enumerate(step_seconds)]


def test_summary_leaves_out_the_first_step_and_the_checkpoint(bench):
    got = bench.summarise(rows([90.0, 10.0, 14.0], **{"time/rollout": 4.0, "time/update": 2.0})
                          + [{"step": 4, "time/step": 13.0, "time/save_checkpoint": 3.0, "time/rollout": 7.0}])
    assert got["steps_averaged"] == 3
    assert got["time/step"] == pytest.approx((10 + 14 + 10) / 3)  # the last step's 3 s checkpoint left out
    assert got["time/rollout"] == pytest.approx(5.0) and got["time/update"] == pytest.approx(4 / 3)
    assert got["time/ref_logprob"] == 0.0  # a phase no step timed
    assert got["steps_per_s"] == pytest.approx(3 / 34)
    assert bench.summarise(rows([7.0]))["steps_averaged"] == 1  # one step: that one
    with pytest.raises(ValueError, match="time/step"):
        bench.summarise([{"step": 1}])


def test_a_failed_run_is_stored_without_a_summary(bench, tmp_path):
    args = bench.build_parser().parse_args(["--games", str(tmp_path)])
    config = bench.Configuration("verl", 2)
    failed = bench.result(config, args, rows=rows([5.0]), returncode=1, wall_s=9.0, card="2 x H100")
    assert "summary" not in failed and failed["returncode"] == 1 and failed["label"] == "verl_2gpu"
    done = bench.result(config, args, rows=rows([5.0, 4.0]), returncode=0, wall_s=9.0, card="2 x H100")
    assert done["summary"]["time/step"] == 4.0 and done["settings"]["batch_size"] == 16
    json.dumps(done)  # stored as JSON


def test_configurations_and_gpu_counts(bench):
    assert [c.label for c in bench.configurations((1, 2, 4))] == ["single_1gpu", "verl_1gpu", "verl_2gpu",
                                                                   "verl_4gpu"]
    assert [c.label for c in bench.configurations((2,), single=False)] == ["verl_2gpu"]
    assert bench.gpu_counts("1,2,4") == (1, 2, 4)
    for bad in ("2,1", "0,1", "1,1", "one"):
        with pytest.raises(Exception, match="--gpus"):
            bench.gpu_counts(bad)


def test_both_commands_carry_the_same_settings(bench, tmp_path, alfworld_games, policy_dir):
    """The verl command composes (dry run) and the single-device one loads, with the same batch and policy."""
    import yaml

    from tests.training.conftest import verl_dry_run
    from training.config import load_config

    pytest.importorskip("verl")
    args = bench.build_parser().parse_args(["--games", str(alfworld_games), "--model", str(policy_dir),
                                            "--train-games", "2", "--verl-arg", "trainer.logger=[console]",
                                            "--micro-batch-tokens", "4096", "--scoring-tokens", "12288"])
    verl = bench.command(bench.Configuration("verl", 4), args, tmp_path / "verl")
    assert verl[1:3] == ["-m", "training.verl.main"]
    out = verl_dry_run(*verl[3:], cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    config = yaml.safe_load(out.stdout)
    ocsd = config["ocsd"]
    assert (ocsd["batch_size"], ocsd["group_size"], ocsd["max_steps"], ocsd["max_response_length"]) == (16, 8, 12, 64)
    assert config["trainer"]["n_gpus_per_node"] == 4 and config["trainer"]["save_freq"] == 1000
    assert config["actor_rollout_ref"]["model"]["path"] == str(policy_dir)
    assert config["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"] == 0.3
    # the token budgets reach the keys verl's workers read (verl/workers/engine_workers.py:619-627, 551-552)
    roles = config["actor_rollout_ref"]
    assert roles["actor"]["ppo_max_token_len_per_gpu"] == 4096
    assert roles["rollout"]["log_prob_max_token_len_per_gpu"] == roles["ref"]["log_prob_max_token_len_per_gpu"] == 12288

    single = bench.command(bench.Configuration("single", 1), args, tmp_path / "single")
    assert single[1:3] == ["-m", "training.train"]
    assert "device=cuda" in single
    assert "rollout_engine=vllm" in single
    cfg = load_config(single[4], [*single[5:], "device=cpu", "rollout_engine=hf"])  # loaded on a CPU
    assert (cfg.batch_size, cfg.group_size, cfg.max_steps, cfg.max_response_length) == (16, 8, 12, 64)
    assert (cfg.model, cfg.total_steps, cfg.save_weights) == (str(policy_dir), 4, False)
    assert (cfg.lr, cfg.kl_coef, cfg.lora_rank) == (ocsd["lr"], ocsd["kl_coef"], ocsd["lora_rank"])
    assert (cfg.micro_batch_tokens, cfg.scoring_token_budget) == (4096, 12288)


def test_without_enough_gpus_nothing_runs(bench, tmp_path, capsys):
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= 64:
        pytest.skip("this machine has the GPUs")
    out = tmp_path / "out"
    assert bench.main(["--games", str(tmp_path), "--gpus", "1,64", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--gpus: the largest run needs 64 GPUs, this machine has" in err and "Traceback" not in err
    assert not out.exists()
    with pytest.raises(SystemExit) as stop:  # a bad --gpus is refused while parsing
        bench.main(["--games", str(tmp_path), "--gpus", "4,2"])
    assert stop.value.code == 2
    assert "must be increasing counts" in capsys.readouterr().err


def test_a_failed_runs_cause_is_the_first_exception_after_a_traceback(tmp_path):
    """vLLM's engine re-raises its worker's error as "initialization failed, see root cause above": the cause named
    is the worker's, not the last line's; an exception printed before any traceback is only the fallback. The
    benchmarks' failure line carries it."""
    from benchmarks import verl_backend as bench

    log = tmp_path / "verl.log"
    log.write_text(
        "(TaskRunner pid=1) WARNING: ValueError: a handled one, printed before anything failed\n"
        "(vLLMHttpServer pid=2) (Worker pid=3) ERROR [multiproc_executor.py] Traceback (most recent call last):\n"
        "(vLLMHttpServer pid=2) (Worker pid=3) ERROR [multiproc_executor.py]   File \"gpu_worker.py\", line 480\n"
        "(vLLMHttpServer pid=2) (Worker pid=3) ERROR [multiproc_executor.py] AssertionError: Error in memory "
        "profiling. Initial free memory 87.57 GiB, current free memory 111.74 GiB.\n"
        "RuntimeError: Worker failed with error 'Error in memory profiling'\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n")
    assert bench.failure_cause(log) == ("AssertionError: Error in memory profiling. Initial free memory 87.57 GiB, "
                                        "current free memory 111.74 GiB.")
    assert bench.failure_cause(log, limit=14) == "AssertionError"
    assert bench.failure_message("verl", 1, 0, log) == (
        f"verl: failed (exit 1, 0 steps: {bench.failure_cause(log)}); see {log}")
    log.write_text("step 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 21.00 GiB\n")
    assert bench.failure_cause(log) == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 21.00 GiB"
    log.write_text("step 1\nstep 2\n")
    assert bench.failure_cause(log) == "" and bench.failure_cause(tmp_path / "absent.log") == ""
    assert bench.failure_message("1 GPU", 2, 3, log) == f"1 GPU: failed (exit 2, 3 steps); see {log}"


def test_schedule_side_by_side_on_disjoint_gpus(bench):
    configs = bench.configurations((1, 2, 4))
    waves = bench.schedule(configs, 4, side_by_side=True)
    assert [[(c.label, d) for c, d in wave] for wave in waves] == [
        [("single_1gpu", (0,)), ("verl_1gpu", (1,)), ("verl_2gpu", (2, 3))], [("verl_4gpu", (0, 1, 2, 3))]]
    alone = bench.schedule(configs, 4)  # the default: one after another on GPUs 0..N-1
    assert [[(c.label, d) for c, d in wave] for wave in alone] == [
        [("single_1gpu", (0,))], [("verl_1gpu", (0,))], [("verl_2gpu", (0, 1))], [("verl_4gpu", (0, 1, 2, 3))]]
    two = bench.schedule(bench.configurations((1, 2)), 2, side_by_side=True)
    assert [[c.label for c, _ in wave] for wave in two] == [["single_1gpu", "verl_1gpu"], ["verl_2gpu"]]
    for wave in bench.schedule(bench.configurations((1, 2, 3, 5)), 8, side_by_side=True):  # no GPU twice
        used = [i for _, devices in wave for i in devices]
        assert len(used) == len(set(used)) and max(used) < 8
    with pytest.raises(ValueError, match="verl_4gpu needs 4 GPUs, 2 are available"):
        bench.schedule(configs, 2, side_by_side=True)


def test_visible_devices_count_among_the_benchmarks_own(bench):
    assert bench.visible_devices((2, 3), None) == "2,3"
    assert bench.visible_devices((2, 3), "4,5,6,7") == "6,7"  # a benchmark started on GPUs 4-7
    assert bench.visible_devices((0,), " GPU-a1, GPU-b2 ") == "GPU-a1"


def test_a_wave_runs_its_configurations_at_once(bench, tmp_path, monkeypatch):
    """Two stand-in trainings that each wait for the other's start can only both finish when they run at the same
    time; each writes its metrics and the GPUs it saw, and the results name the configuration beside them. The
    first one started ends last: the other's wall time is taken at its own end, not when the first is done."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    script = (
        "import json, os, sys, time, pathlib\n"
        "run, label, other = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]\n"
        "barrier = pathlib.Path(sys.argv[4])\n"
        "(barrier / label).touch()\n"
        "deadline = time.time() + 60\n"
        "while not (barrier / other).exists():\n"
        "    if time.time() > deadline: sys.exit(7)\n"
        "    time.sleep(0.05)\n"
        "run.mkdir(parents=True)\n"
        "rows = [{'step': 1, 'time/step': 3.0}, {'step': 2, 'time/step': 2.0}]\n"
        "(run / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\\n' for r in rows))\n"
        "print('gpus', os.environ['CUDA_VISIBLE_DEVICES'])\n"
        "if label == 'single_1gpu':  # ends after the other has\n"
        "    while not (barrier / 'verl_done').exists(): time.sleep(0.05)\n"
        "    time.sleep(1.0)\n"
        "else:\n"
        "    (barrier / 'verl_done').touch()\n")
    labels = {"single_1gpu": "verl_1gpu", "verl_1gpu": "single_1gpu"}

    def stand_in(config, args, run_dir):
        return [sys.executable, "-c", script, str(run_dir), config.label, labels[config.label], str(barrier)]

    monkeypatch.setattr(bench, "command", stand_in)
    monkeypatch.setattr(bench, "POLL_S", 0.05)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    args = bench.build_parser().parse_args(["--games", str(tmp_path), "--runs", str(tmp_path / "runs")])
    wave = [(bench.Configuration("single", 1), (0,)), (bench.Configuration("verl", 1), (1,))]
    out = tmp_path / "out"
    out.mkdir()
    single, verl = bench.run_wave(wave, args, out, card="2 x test")
    assert single["returncode"] == verl["returncode"] == 0
    assert (single["devices"], single["alongside"]) == ([0], ["verl_1gpu"])
    assert (verl["devices"], verl["alongside"]) == ([1], ["single_1gpu"])
    assert single["summary"]["time/step"] == 2.0
    assert verl["wall_s"] < single["wall_s"]
    assert (out / "single_1gpu.log").read_text() == "gpus 6\n"
    assert (out / "verl_1gpu.log").read_text() == "gpus 7\n"
    assert json.loads((out / "verl_1gpu.json").read_text())["alongside"] == ["single_1gpu"]
