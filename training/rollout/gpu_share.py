"""Processes that share one GPU: an engine starts while the others hold their memory still.

A vLLM engine measures the GPU's free memory around a profiling pass when it starts and sizes its KV
cache from the difference. Another process on the same GPU that frees or takes memory meanwhile (a run
sleeping or waking its engine, or emptying torch's cache, as every training step does) makes the
start-up fail ("Error in memory profiling") or leaves it no cache ("No available memory for the cache
blocks"). :class:`GpuShare` orders the two: work that moves memory (a training step, an evaluation's
episodes) holds the GPU's lock shared, an engine's start-up holds it exclusively, so a start-up waits
for the steps in flight to end and new steps wait for the start-up. A pending start-up keeps new
steps out (a gate taken before the shared lock), so three runs whose steps overlap cannot starve it.

The locks are kernel file locks (``fcntl.flock``) on two files named by the GPU's UUID in the system's
temporary folder: they are released when their process ends, however it ends. They order processes
that see the same temporary folder (one machine, one container); they are advisory, and a wait longer
than ``timeout`` goes on without the lock after a warning, so a hung process costs time, not the run.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Iterator

__all__ = ["GpuShare", "device_share"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 900.0  # seconds: longer than a training step of the paper's settings on one shared H200 (~110 s)


class GpuShare:
    """The lock of one GPU shared by processes: steps hold it shared, an engine's start-up exclusively.

    Parameters
    ----------
    key : str or None
        Names the GPU (its UUID); processes with the same key and ``directory`` order each other. None
        makes every method a no-op (a CPU, or sharing turned off).
    directory : str or Path, optional
        Where the lock files live (default: the system's temporary folder).
    timeout : float
        Seconds to wait for a lock before going on without it (with a warning).

    Notes
    -----
    Both context managers are re-entrant within a process: :meth:`step` inside a step is free, and
    :meth:`exclusive` inside a step lets the step's shared lock go, waits its turn like any start-up, and
    takes the shared lock back on leaving.
    """

    def __init__(self, key: str | None, directory: str | Path | None = None,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        self.key = key
        self.timeout = float(timeout)
        self._depth = 0  # nested step() calls holding the shared lock
        self._exclusive = 0
        self._shared = False  # this process holds the lock shared (for its outermost step)
        self._fds: dict[str, int] = {}
        if key is not None:
            folder = Path(directory if directory is not None else tempfile.gettempdir())
            safe = re.sub(r"[^A-Za-z0-9_.-]", "_", key)
            self._paths = {name: folder / f"ocsd-gpu-{safe}.{name}" for name in ("gate", "lock")}

    def _fd(self, name: str) -> int:
        if name not in self._fds:
            self._fds[name] = os.open(self._paths[name], os.O_RDWR | os.O_CREAT, 0o666)
        return self._fds[name]

    def _take(self, name: str, mode: int, what: str, max_pause: float = 0.5) -> bool:
        """Take lock ``name`` in ``mode`` (``fcntl.LOCK_SH`` or ``LOCK_EX``), trying again after pauses that
        double up to ``max_pause`` seconds, for up to the timeout; False (after a warning) when the wait ran out."""
        fd, end, pause = self._fd(name), time.monotonic() + self.timeout, 0.01
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= end:
                    log.warning("GPU %s: waited %.0f s for %s; going on without it (another process on the GPU "
                                "holds it: %s)", self.key, self.timeout, what, self._paths[name])
                    return False
                time.sleep(pause)
                pause = min(pause * 2, max_pause)

    def _release(self, name: str) -> None:
        fcntl.flock(self._fd(name), fcntl.LOCK_UN)

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Hold the GPU shared: work that frees or takes GPU memory (no engine starts meanwhile)."""
        if self.key is None or self._depth or self._exclusive:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        gated = self._take("gate", fcntl.LOCK_EX, "a start-up on it to end")
        try:
            held = self._take("lock", fcntl.LOCK_SH, "a start-up on it to end")
        finally:
            if gated:
                self._release("gate")
        self._depth, self._shared = 1, held
        try:
            yield
        finally:
            self._depth = 0
            if self._shared:
                self._release("lock")
            self._shared = False

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the GPU alone: an engine's start-up (the other processes' steps in flight end first)."""
        if self.key is None or self._exclusive:
            self._exclusive += 1
            try:
                yield
            finally:
                self._exclusive -= 1
            return
        if self._shared:  # this process's step holds the lock shared: let it go while waiting, so that two
            self._release("lock")  # steps starting engines at once cannot each wait for the other's shared lock
            self._shared = False
        # a start-up tries for the gate more often than a step does (every 20 ms), so that when the gate comes
        # free it usually goes to the start-up that has waited, not to a step that would make it wait a step more
        gated = self._take("gate", fcntl.LOCK_EX, "another start-up on it to end", max_pause=0.02)
        held = self._take("lock", fcntl.LOCK_EX, "the other processes' steps on it to end")
        self._exclusive = 1
        try:
            yield
        finally:
            self._exclusive = 0
            if self._depth:  # the step goes on, holding the lock shared again (converted: no other process can
                self._shared = self._take("lock", fcntl.LOCK_SH, "its step's shared lock")  # take it meanwhile)
            elif held:
                self._release("lock")
            if gated:
                self._release("gate")

    def close(self) -> None:
        """Close the lock files (releasing whatever this process holds)."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._depth = self._exclusive = 0
        self._shared = False


_SHARES: dict[str, GpuShare] = {}


def device_share(device) -> GpuShare:
    """The :class:`GpuShare` of the GPU behind torch ``device`` (one per process and GPU); a no-op share for
    a CPU or when ``OCSD_GPU_SHARE=0``."""
    import torch

    device = torch.device(device)
    if device.type != "cuda" or os.environ.get("OCSD_GPU_SHARE", "1") == "0":
        return GpuShare(None)
    index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", f"index{index}"))
    if uuid not in _SHARES:
        _SHARES[uuid] = GpuShare(uuid)
    return _SHARES[uuid]
