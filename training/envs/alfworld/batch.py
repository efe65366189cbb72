"""Batched ALFWorld environments, in this process or spread over worker processes."""

from __future__ import annotations

import multiprocessing as mp
import traceback
from multiprocessing.connection import wait
from typing import Sequence

from ocsd.environments.alfworld import ALFWORLD
from training.envs.alfworld.game import AlfworldGame, GameSpec, Observation, StepResult


def _spread(n: int, parts: int) -> list[range]:
    """Exactly ``parts`` contiguous ranges covering ``range(n)``, nearly equal (some empty when n < parts)."""
    bounds = [round(i * n / parts) for i in range(parts + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(parts)]


def _chunks(n: int, parts: int) -> list[range]:
    """Split ``range(n)`` into ``parts`` contiguous, nearly equal ranges (empty ones dropped)."""
    return [r for r in _spread(n, max(1, min(parts, n))) if len(r)]


def _check_specs(specs: list) -> None:
    if not specs:
        raise ValueError("AlfworldBatchEnv needs at least one game spec")
    bad = [s for s in specs if not isinstance(s, GameSpec)]
    if bad:
        raise TypeError(f"specs_per_env must hold GameSpec objects, got {type(bad[0]).__name__}")


class _LocalGroup:
    """Games played in the calling process."""

    def __init__(self, specs: Sequence[GameSpec], max_steps: int) -> None:
        self.games: list[AlfworldGame] = []
        try:
            for spec in specs:
                self.games.append(AlfworldGame(spec, max_steps=max_steps))
        except BaseException:
            self.close()
            raise

    def reset(self) -> list[Observation]:
        return [g.reset() for g in self.games]

    def step(self, actions: Sequence[str]) -> list[StepResult]:
        return [g.step(a) for g, a in zip(self.games, actions)]

    def act(self, local: int, action: str) -> tuple[int, StepResult]:
        """Step game ``local`` alone; returns ``(local, result)``."""
        return local, self.games[local].step(action)

    def close(self) -> None:
        for g in self.games:
            g.close()
        self.games = []


def _worker(conn, specs: list[GameSpec], max_steps: int) -> None:
    group = None
    try:
        group = _LocalGroup(specs, max_steps)
        conn.send(("ok", None))
        while True:
            cmd, payload = conn.recv()
            if cmd == "load":  # new games, reset at once: their first observations go back
                group.close()
                group = _LocalGroup(*payload)
                conn.send(("ok", group.reset()))
            elif cmd == "reset":
                conn.send(("ok", group.reset()))
            elif cmd == "step":
                conn.send(("ok", group.step(payload)))
            elif cmd == "act":  # one game's action, answered alone
                conn.send(("ok", group.act(*payload)))
            elif cmd == "close":
                break
    except (EOFError, KeyboardInterrupt):
        pass
    except BaseException as exc:  # report to the parent, which raises it
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        except (BrokenPipeError, OSError):
            pass
    finally:
        if group is not None:
            group.close()
        conn.close()


class _RemoteGroup:
    """Games played in one worker process; ``send_*`` and ``recv`` overlap workers' work."""

    def __init__(self, ctx, specs: Sequence[GameSpec], max_steps: int) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, list(specs), max_steps), daemon=True)
        self.proc.start()
        child.close()

    def send(self, cmd: str, payload=None) -> None:
        self.conn.send((cmd, payload))

    def recv(self):
        try:
            status, payload = self.conn.recv()
        except EOFError:
            raise RuntimeError(f"ALFWorld worker process {self.proc.pid} exited "
                               f"(exit code {self.proc.exitcode})") from None
        if status == "error":
            raise RuntimeError(f"ALFWorld worker process {self.proc.pid} failed: {payload}")
        return payload

    def close(self) -> None:
        try:
            self.conn.send(("close", None))
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=5)
        self.conn.close()


class AlfworldBatchEnv:
    """A batch of ALFWorld games stepped together.

    Parameters
    ----------
    specs_per_env : list of GameSpec
        One spec per environment; the trainer repeats a task G times for G rollouts.
    max_steps : int
        Step cap per episode (default: the registry's ALFWorld step cap, 50).
    num_workers : int
        0 plays every game in this process; N > 0 spreads them over N worker processes
        (``spawn``), which step in parallel.
    seed : int
        Base seed; episode ``e`` of environment ``i`` gets ``seed + i`` at the first reset (the
        ALFWorld engine itself is deterministic, so the seed only names the episode).

    Notes
    -----
    ``reset()`` returns one :class:`Observation` per environment; ``step(actions)`` takes one
    action per environment and returns one :class:`StepResult` each. An environment that is
    done ignores further actions and returns an inactive result (``active=False``).

    Environments can also be stepped one at a time without waiting: :meth:`submit` sends one
    environment's action and :meth:`collect` returns the results that have come back, so the caller
    works while the workers step (the pipelined rollout, :func:`training.rollout.loop.rollout`). A worker
    answers its games' actions in the order they were sent.
    """

    def __init__(self, specs_per_env: Sequence[GameSpec], *, max_steps: int = ALFWORLD.max_steps,
                 num_workers: int = 0, seed: int = 0) -> None:
        specs = list(specs_per_env)
        _check_specs(specs)
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.specs = specs
        self.max_steps = int(max_steps)
        self.num_workers = int(num_workers)
        self.seed = int(seed)
        self.seeds: list[int] = []
        self._closed = False
        self._pending = None  # (specs, max_steps, seed) of a reload the workers have not answered yet
        self._fresh = None  # first observations of games the workers loaded and reset
        self._in_flight: list[int] = []  # per worker: submitted actions not answered yet
        self._arrived: list[tuple[int, StepResult]] = []  # answered, not collected yet
        if num_workers == 0:
            self._ranges = [range(len(specs))]
            self._groups = [_LocalGroup(specs, self.max_steps)]
        else:
            ctx = mp.get_context("spawn")
            self._ranges = _chunks(len(specs), num_workers)
            self._groups = [_RemoteGroup(ctx, [specs[i] for i in r], self.max_steps)
                            for r in self._ranges]
            self._in_flight = [0] * len(self._groups)
            try:
                for g in self._groups:
                    g.recv()
            except BaseException:
                self.close()
                raise

    def __len__(self) -> int:
        return len(self.specs)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or a failure closed it)."""
        return self._closed

    def reload(self, specs_per_env: Sequence[GameSpec], *, max_steps: int | None = None,
               seed: int | None = None, wait: bool = True) -> "AlfworldBatchEnv":
        """Replace the games with new ones in the same worker processes (no new processes).

        Workers keep their imports, planner libraries and memoized translations, so a rollout that
        reuses the environment starts much faster than one that builds a new one. Each worker resets its
        new games at once; the next :meth:`reset` returns those first observations. Returns ``self``.

        Parameters
        ----------
        specs_per_env : list of GameSpec
            One spec per environment (any number).
        max_steps : int, optional
            New step cap (default: unchanged).
        seed : int, optional
            New base seed (default: unchanged).
        wait : bool, default True
            False returns as soon as the workers have their orders, so the games load while this
            process does other work (the trainer's update); the next call that needs the workers waits
            for them, and a ``reload`` of the same games, step cap and seed only waits.
        """
        self._check_idle("reload")
        specs = list(specs_per_env)
        _check_specs(specs)
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        target = (specs, self.max_steps if max_steps is None else int(max_steps),
                  self.seed if seed is None else int(seed))
        if self._pending is not None:
            same = self._pending == target
            self._finish_load()
            if same:
                return self
        self.specs, self.max_steps, self.seed = target
        self.seeds, self._fresh = [], None
        if self.num_workers == 0:
            self._groups[0].close()
            self._groups = [_LocalGroup(specs, self.max_steps)]
            self._ranges = [range(len(specs))]
            return self
        self._ranges = _spread(len(specs), len(self._groups))
        try:
            for g, r in zip(self._groups, self._ranges):
                g.send("load", ([specs[i] for i in r], self.max_steps))
        except BaseException:
            self.close()
            raise
        self._pending = target
        if wait:
            self._finish_load()
        return self

    def _finish_load(self) -> None:
        """Wait for the workers' answers to a :meth:`reload` (their games' first observations)."""
        try:
            fresh = self._gather()
        except BaseException:
            self.close()
            raise
        self._pending, self._fresh = None, fresh

    def _gather(self) -> list:
        """Every worker's answer, concatenated in environment order."""
        out: list = []
        for g in self._groups:
            out.extend(g.recv())
        return out

    def _check_idle(self, what: str) -> None:
        """Refuse ``what`` on a closed environment, or while submitted actions are not all collected."""
        if self._closed:
            raise RuntimeError("AlfworldBatchEnv is closed")
        if self.in_flight or self._arrived:
            raise RuntimeError(f"AlfworldBatchEnv.{what}: {self.in_flight + len(self._arrived)} submitted "
                               f"action(s) not collected yet; collect() them first")

    def _call(self, cmd: str, per_env: list | None = None) -> list:
        self._check_idle(cmd)
        if self._pending is not None:
            self._finish_load()
        if self.num_workers == 0:
            group = self._groups[0]
            return group.reset() if cmd == "reset" else group.step(per_env)
        for g, r in zip(self._groups, self._ranges):
            g.send(cmd, None if per_env is None else [per_env[i] for i in r])
        return self._gather()

    def reset(self, seed: int | None = None) -> list[Observation]:
        """Start new episodes in every environment.

        Parameters
        ----------
        seed : int, optional
            New base seed; environment ``i`` records ``seed + i`` in :attr:`seeds`.
        """
        self._check_idle("reset")
        if seed is not None:
            self.seed = int(seed)
        self.seeds = [self.seed + i for i in range(len(self.specs))]
        if self._pending is not None:
            self._finish_load()
        if self._fresh is not None:  # games just loaded and reset by the workers
            fresh, self._fresh = self._fresh, None
            return fresh
        return self._call("reset")

    def step(self, actions: Sequence[str]) -> list[StepResult]:
        """Execute one action per environment (ignored by environments that are done)."""
        actions = [str(a) for a in actions]
        if len(actions) != len(self.specs):
            raise ValueError(f"step() got {len(actions)} actions for {len(self.specs)} environments")
        return self._call("step", actions)

    @property
    def in_flight(self) -> int:
        """Submitted actions whose results have not arrived yet."""
        return sum(self._in_flight)

    def submit(self, index: int, action: str) -> None:
        """Send environment ``index`` one action without waiting for its result (:meth:`collect`).

        In this process (``num_workers=0``) the action is executed at once. An environment must not
        be sent a second action before the result of the first is collected.
        """
        if self._closed:
            raise RuntimeError("AlfworldBatchEnv is closed")
        if not 0 <= index < len(self.specs):
            raise IndexError(f"submit: environment {index} of {len(self.specs)}")
        if self._pending is not None:
            self._finish_load()
        g = next(k for k, r in enumerate(self._ranges) if index in r)
        local = index - self._ranges[g].start
        if self.num_workers == 0:
            self._arrived.append((index, self._groups[0].act(local, str(action))[1]))
            return
        try:
            self._groups[g].send("act", (local, str(action)))
        except BaseException:
            self.close()
            raise
        self._in_flight[g] += 1

    def collect(self, block: bool = True) -> list[tuple[int, StepResult]]:
        """``(index, result)`` of every submitted action answered so far, in no fixed order.

        Parameters
        ----------
        block : bool, default True
            Wait until at least one result is there (when any action is in flight); False returns at
            once, possibly with nothing.
        """
        out, self._arrived = self._arrived, []
        if self._closed or not self.in_flight:
            return out
        waiting = {self._groups[g].conn: g for g, n in enumerate(self._in_flight) if n}
        try:
            for conn in wait(list(waiting), timeout=None if block and not out else 0):
                g = waiting[conn]
                while self._in_flight[g] and conn.poll():
                    local, result = self._groups[g].recv()
                    self._in_flight[g] -= 1
                    out.append((self._ranges[g][local], result))
        except BaseException:
            self.close()
            raise
        return out

    def close(self) -> None:
        """Stop worker processes and release every engine; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for g in self._groups:
            g.close()
        self._groups = []

    def __enter__(self) -> "AlfworldBatchEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
