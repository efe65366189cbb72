"""One writer per run folder: ``<run>/.lock``, held for the life of a command that writes the folder.

The lock is a kernel file lock (``fcntl.flock``) on ``<run>/.lock``, so it is released when its
process ends, however it ends (exception, Ctrl-C, ``kill -9``). The file also says who holds it (pid,
host, command, start time), which is what a refused command reports. A lock file left by a process
that no longer runs (its pid is dead on this host) is stale: it is taken over and reported in one
line. The lock is advisory and needs a POSIX system.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

__all__ = ["LOCK_FILE", "LockInfo", "RunInUseError", "RunLock", "read_lock"]

LOCK_FILE = ".lock"


class RunInUseError(RuntimeError):
    """Another process writes the run folder; the message names the folder and the holder."""


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux), else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        return False
    return True


@dataclass(frozen=True)
class LockInfo:
    """Who holds (or held) a run folder's lock.

    Attributes
    ----------
    pid : int
    host : str
    command : str
        The holder's command line.
    started : str
        When the lock was taken (local time, ``YYYY-mm-dd HH:MM:SS``).
    process_start : str or None
        The holder's start time in clock ticks since boot (Linux), which tells a reused pid apart.
    """

    pid: int
    host: str
    command: str
    started: str
    process_start: str | None = None

    @classmethod
    def current(cls, command: str | None = None) -> "LockInfo":
        """This process, with ``command`` (default: its own command line)."""
        if command is None:
            command = " ".join(getattr(sys, "orig_argv", sys.argv))
        return cls(os.getpid(), socket.gethostname(), command, time.strftime("%Y-%m-%d %H:%M:%S"),
                   _process_start(os.getpid()))

    def running(self) -> bool | None:
        """Whether the holder still runs: True or False on this host, None for another host."""
        if self.host != socket.gethostname():
            return None
        if not _pid_alive(self.pid):
            return False
        start = _process_start(self.pid)
        return self.process_start is None or start is None or start == self.process_start

    def describe(self) -> str:
        """``pid 123 on host h since 2025-01-01 12:00:00 (python -m training.train ...)``."""
        return f"pid {self.pid} on host {self.host} since {self.started} ({self.command})"


def read_lock(run_dir: str | os.PathLike) -> LockInfo | None:
    """The holder recorded in ``<run_dir>/.lock``; None when there is no lock file or it is unreadable."""
    try:
        data = json.loads((Path(run_dir) / LOCK_FILE).read_text())
        return LockInfo(int(data["pid"]), str(data["host"]), str(data["command"]), str(data["started"]),
                        data.get("process_start"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _in_use(run_dir: Path, holder: LockInfo | None, where: str) -> RunInUseError:
    who = holder.describe() if holder else "another process (its lock file is unreadable)"
    return RunInUseError(f"{run_dir} is in use by {who}{where}; wait for it to end or use another folder")


class RunLock:
    """The lock of one run folder (a context manager; the folder is created if needed).

    Parameters
    ----------
    run_dir : path
    command : str, optional
        What the lock file records as the holder's command (default: this process's command line).
    report : callable, optional
        Receives the one-line report of a stale lock taken over (default: printed to stderr).

    Raises
    ------
    RunInUseError
        From :meth:`acquire`, when another process holds the lock.
    """

    def __init__(self, run_dir: str | os.PathLike, *, command: str | None = None,
                 report: Callable[[str], None] | None = None):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.command = command
        self.report = report or (lambda line: print(line, file=sys.stderr))
        self._fd: int | None = None
        self._owner = os.getpid()
        self.stale: LockInfo | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def _open_locked(self) -> int:
        """An open descriptor of the lock file that this process has locked (retried if the file was
        replaced between opening and locking)."""
        import fcntl

        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                time.sleep(0.05)  # the holder may be writing its record
                raise _in_use(self.run_dir, read_lock(self.run_dir), "") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)  # the previous holder removed the file after we opened it

    def acquire(self) -> "RunLock":
        """Take the lock, record this process in the file; a stale lock is taken over and reported."""
        if self.held:
            return self
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = self._open_locked()
        previous = read_lock(self.run_dir)  # a record nobody holds: left by a process that did not end cleanly
        running = previous.running() if previous is not None and previous.pid != os.getpid() else False
        if running is not False:  # a live pid without the kernel lock (a reused pid?), or another host
            os.close(fd)
            where = "" if running else (f" (on another host, so it cannot be checked from here; delete {self.path} "
                                        f"if no process there writes the folder)")
            raise _in_use(self.run_dir, previous, where)
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(asdict(LockInfo.current(self.command))) + "\n").encode(), 0)
        os.fsync(fd)
        self._fd, self._owner = fd, os.getpid()
        if previous is not None:
            self.stale = previous
            self.report(f"warning: {self.path}: taking over the stale lock of {previous.describe()}, "
                        f"which no longer runs")
        return self

    def release(self) -> None:
        """Remove the lock file and release the lock (idempotent)."""
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is None:
            return
        try:
            if self._owner == os.getpid():  # a forked child closes its copy and leaves the lock to its parent
                self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()
