"""Processes sharing one GPU: an engine's start-up waits for the steps in flight and keeps new ones out.

Real processes and real kernel file locks; the key stands for a GPU's UUID, so nothing here needs a GPU.
"""

from __future__ import annotations

import fcntl
import logging
import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest

from training.rollout.gpu_share import GpuShare, device_share

CTX = mp.get_context("fork")
KEY = "GPU-test-uuid"


def _held(directory: Path, name: str, mode: int = fcntl.LOCK_EX) -> bool:
    """Whether another holder keeps lock file ``name`` from being taken in ``mode`` now."""
    fd = os.open(next(directory.glob(f"ocsd-gpu-*.{name}")), os.O_RDWR)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _wait_until(condition, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def _step(directory, seconds, events, name, ready=None):
    share = GpuShare(KEY, directory)
    with share.step():
        events.put((name, "in", time.monotonic()))
        if ready is not None:
            ready.set()
        time.sleep(seconds)
        events.put((name, "out", time.monotonic()))


def _start_up(directory, seconds, events, name):
    share = GpuShare(KEY, directory)
    with share.exclusive():
        events.put((name, "in", time.monotonic()))
        time.sleep(seconds)
        events.put((name, "out", time.monotonic()))


def _events(queue, n: int) -> dict[tuple[str, str], float]:
    return {(name, what): t for name, what, t in (queue.get(timeout=20) for _ in range(n))}


def _run(target, *args) -> mp.Process:
    process = CTX.Process(target=target, args=args)
    process.start()
    return process


def _join(*processes) -> None:
    for p in processes:
        p.join(20)
        assert p.exitcode == 0


def test_a_start_up_waits_for_the_steps_in_flight(tmp_path):
    events, ready = CTX.Queue(), CTX.Event()
    runner = _run(_step, tmp_path, 0.6, events, "step", ready)
    assert ready.wait(10)
    starter = _run(_start_up, tmp_path, 0.1, events, "start-up")
    _join(runner, starter)
    t = _events(events, 4)
    assert t[("start-up", "in")] >= t[("step", "out")]


def test_a_pending_start_up_keeps_new_steps_out(tmp_path):
    """Writer preference: a step that comes after a start-up began waiting runs after the start-up, even
    though a step is in flight (shared with it, the new step could otherwise start at once)."""
    events, ready = CTX.Queue(), CTX.Event()
    first = _run(_step, tmp_path, 0.8, events, "first", ready)
    assert ready.wait(10)
    starter = _run(_start_up, tmp_path, 0.3, events, "start-up")
    _wait_until(lambda: _held(tmp_path, "gate"))  # the start-up holds the gate and waits for the lock
    second = _run(_step, tmp_path, 0.0, events, "second")
    _join(first, starter, second)
    t = _events(events, 6)
    assert t[("first", "out")] <= t[("start-up", "in")] < t[("start-up", "out")] <= t[("second", "in")]


def test_steps_of_several_processes_run_together(tmp_path):
    events = CTX.Queue()
    runners = [_run(_step, tmp_path, 0.5, events, f"r{i}") for i in range(3)]
    _join(*runners)
    t = _events(events, 6)
    assert max(t[(f"r{i}", "in")] for i in range(3)) < min(t[(f"r{i}", "out")] for i in range(3))


def test_two_start_ups_run_one_after_the_other(tmp_path):
    events = CTX.Queue()
    a, b = _run(_start_up, tmp_path, 0.3, events, "a"), _run(_start_up, tmp_path, 0.3, events, "b")
    _join(a, b)
    t = _events(events, 4)
    first, second = sorted("ab", key=lambda n: t[(n, "in")])
    assert t[(first, "out")] <= t[(second, "in")]


def _step_starting_an_engine(directory, events, name, barrier):
    share = GpuShare(KEY, directory, timeout=30)
    with share.step():
        barrier.wait(10)  # both processes are in their steps, holding the lock shared
        with share.exclusive():
            events.put((name, "in", time.monotonic()))
            time.sleep(0.2)
            events.put((name, "out", time.monotonic()))
        with share.step():  # nested steps are free
            pass
        assert share._shared  # the step holds the lock shared again
    events.put((name, "done", time.monotonic()))


def test_engines_started_inside_steps_of_two_processes_do_not_deadlock(tmp_path):
    events, barrier = CTX.Queue(), CTX.Barrier(2)
    a = _run(_step_starting_an_engine, tmp_path, events, "a", barrier)
    b = _run(_step_starting_an_engine, tmp_path, events, "b", barrier)
    _join(a, b)
    t = _events(events, 6)
    first, second = sorted("ab", key=lambda n: t[(n, "in")])
    assert t[(first, "out")] <= t[(second, "in")]
    assert not _held(tmp_path, "lock") and not _held(tmp_path, "gate")


def _die_holding(directory, ready):
    share = GpuShare(KEY, directory)
    with share.exclusive():
        ready.set()
        os._exit(0)  # no release: the kernel drops the locks with the process


def test_a_holder_that_dies_releases_the_gpu(tmp_path):
    ready = CTX.Event()
    holder = _run(_die_holding, tmp_path, ready)
    assert ready.wait(10)
    holder.join(10)
    share = GpuShare(KEY, tmp_path, timeout=5)
    t0 = time.monotonic()
    with share.step():
        pass
    assert time.monotonic() - t0 < 2


def test_a_wait_past_the_timeout_goes_on_with_a_warning(tmp_path, caplog):
    events, ready = CTX.Queue(), CTX.Event()
    holder = _run(_step, tmp_path, 3.0, events, "holder", ready)
    assert ready.wait(10)
    share = GpuShare(KEY, tmp_path, timeout=0.3)
    with caplog.at_level(logging.WARNING, logger="training.rollout.gpu_share"):
        t0 = time.monotonic()
        with share.exclusive():
            waited = time.monotonic() - t0
    assert 0.3 <= waited < 2.5
    assert "going on without it" in caplog.text and KEY in caplog.text
    holder.join(20)
    share.close()


def test_without_a_key_nothing_is_locked(tmp_path):
    share = GpuShare(None, tmp_path)
    with share.step(), share.exclusive(), share.step():
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_cpu_or_the_setting_off_shares_nothing(monkeypatch):
    assert device_share("cpu").key is None
    monkeypatch.setenv("OCSD_GPU_SHARE", "0")
    assert device_share("cuda:0").key is None


def test_the_lock_files_name_the_gpu(tmp_path):
    share = GpuShare("GPU-1a2b/../x", tmp_path)
    with share.step():
        names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ocsd-gpu-GPU-1a2b_.._x.gate", "ocsd-gpu-GPU-1a2b_.._x.lock"]
    share.close()


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_one_share_per_gpu_and_process():
    assert device_share("cuda:0") is device_share("cuda")
    assert device_share("cuda:0").key


def test_a_training_step_holds_the_gpu_shared(tmp_path, monkeypatch):
    """The trainer holds its GPU's lock shared over each step (validation included) and lets it go between
    steps, so that another run's engine can start there; the tiny model on the CPU stands in for a GPU."""
    pytest.importorskip("alfworld", reason="the ALFWorld engine (envs extra) is not installed")
    from training import policy as policy_module
    from training.config import make_config
    from training.envs.alfworld.tasks import GameSource
    from training.trainer import Trainer

    locks = tmp_path / "locks"
    locks.mkdir()
    share = GpuShare(KEY, locks)
    monkeypatch.setattr(policy_module, "device_share", lambda device: share)
    cfg = make_config(dict(data="generated", games_dir=str(tmp_path / "games"), n_train_games=2, n_val_games=1,
                           model="tiny", run_dir=str(tmp_path / "run"), batch_size=1, group_size=2, max_steps=2,
                           max_response_length=8, max_prompt_length=1024, total_steps=2, save_freq=2, test_freq=1,
                           val_tasks=1, progress=False, micro_batch_tokens=4096, seed=3))
    trainer = Trainer(cfg, games=GameSource.from_config(cfg))
    seen = []
    real_step, real_validate = trainer.train_step, trainer.validate
    monkeypatch.setattr(trainer, "train_step", lambda step: seen.append(("step", _held(locks, "lock")))
                        or real_step(step))
    monkeypatch.setattr(trainer, "validate", lambda step: seen.append(("validate", _held(locks, "lock")))
                        or real_validate(step))
    trainer.fit()
    assert seen == [("step", True), ("validate", True)] * 2
    assert not _held(locks, "lock") and not _held(locks, "gate")
    assert not _held(locks, "lock", fcntl.LOCK_SH)  # nothing held shared after the run either
