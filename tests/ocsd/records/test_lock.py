"""One writer per run folder: :class:`ocsd.records.RunLock` against other objects, other processes,
killed holders and lock files left behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ocsd.records import LOCK_FILE, LockInfo, RunInUseError, RunLock, read_lock

HOLD = """
import sys, time
from ocsd.records import RunLock
lock = RunLock(sys.argv[1], command="the first run").acquire()
print("held", flush=True)
time.sleep(120)
"""


def _holder(run_dir: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[3])
    assert proc.stdout.readline().strip() == "held"
    return proc


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write_lock(run_dir: Path, **fields) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    info = {"pid": _dead_pid(), "host": socket.gethostname(), "command": "python -m training.train",
            "started": "2025-01-01 00:00:00", "process_start": None, **fields}
    (run_dir / LOCK_FILE).write_text(json.dumps(info))


def test_lock_records_the_holder_and_is_removed_on_release(tmp_path):
    run = tmp_path / "run"
    with RunLock(run, command="python -m training.train x=1") as lock:
        info = read_lock(run)
        assert lock.held and info.pid == os.getpid() and info.host == socket.gethostname()
        assert info.command == "python -m training.train x=1" and info.running()
    assert not (run / LOCK_FILE).exists() and not lock.held
    lock.release()  # idempotent


def test_second_writer_in_this_process_is_refused(tmp_path):
    with RunLock(tmp_path, command="first"):
        with pytest.raises(RunInUseError, match=rf"{tmp_path} is in use by pid {os.getpid()} .*\(first\)"):
            RunLock(tmp_path).acquire()
    RunLock(tmp_path).acquire().release()  # free again


def test_writer_in_another_process_is_refused_until_it_ends(tmp_path):
    proc = _holder(tmp_path)
    try:
        with pytest.raises(RunInUseError) as err:
            RunLock(tmp_path).acquire()
        assert f"pid {proc.pid} on host {socket.gethostname()}" in str(err.value)
        assert "(the first run)" in str(err.value) and "use another folder" in str(err.value)
    finally:
        proc.send_signal(signal.SIGKILL)  # like kill -9: the lock file stays behind
        proc.wait()
    reports = []
    with RunLock(tmp_path, report=reports.append) as lock:
        assert lock.stale is not None and lock.stale.pid == proc.pid
    assert len(reports) == 1 and "\n" not in reports[0]
    assert f"taking over the stale lock of pid {proc.pid}" in reports[0] and "no longer runs" in reports[0]


def test_a_lock_file_of_a_dead_process_is_stale(tmp_path, capsys):
    _write_lock(tmp_path)
    with RunLock(tmp_path) as lock:
        assert lock.stale is not None and read_lock(tmp_path).pid == os.getpid()
    assert "stale lock" in capsys.readouterr().err


def test_a_live_or_unverifiable_holder_is_not_taken_over(tmp_path):
    parent = os.getppid()  # alive, and not holding the kernel lock: refused all the same
    _write_lock(tmp_path, pid=parent)
    with pytest.raises(RunInUseError, match=f"pid {parent}"):
        RunLock(tmp_path).acquire()
    _write_lock(tmp_path, host="elsewhere.example")
    with pytest.raises(RunInUseError, match="on another host"):
        RunLock(tmp_path).acquire()
    assert read_lock(tmp_path).host == "elsewhere.example"  # left as it was


def test_a_reused_pid_is_told_apart_by_its_start_time(tmp_path):
    if not Path(f"/proc/{os.getpid()}/stat").exists():
        pytest.skip("needs /proc")
    _write_lock(tmp_path, pid=os.getppid(), process_start="1")  # alive, but started at another time
    with RunLock(tmp_path, report=lambda line: None) as lock:
        assert lock.stale.pid == os.getppid()


def test_lock_is_released_on_exceptions(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with RunLock(tmp_path):
            raise KeyboardInterrupt
    assert not (tmp_path / LOCK_FILE).exists()
    RunLock(tmp_path).acquire().release()


def test_lock_info_description():
    info = LockInfo(12, "h", "python -m training.train", "2025-01-01 00:00:00")
    assert info.describe() == "pid 12 on host h since 2025-01-01 00:00:00 (python -m training.train)"
    assert LockInfo.current().pid == os.getpid()
    assert read_lock(Path("/no/such/run")) is None


def test_a_lock_file_being_written_by_a_holder_still_refuses(tmp_path):
    """A holder between taking the kernel lock and writing its record: the record is unreadable."""
    import fcntl

    tmp_path.mkdir(exist_ok=True)
    fd = os.open(tmp_path / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        start = time.perf_counter()
        with pytest.raises(RunInUseError, match="another process \\(its lock file is unreadable\\)"):
            RunLock(tmp_path).acquire()
        assert time.perf_counter() - start < 5
    finally:
        os.close(fd)
