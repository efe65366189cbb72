"""``python -m training.sweep --config CFG --methods grpo,ocsd --seeds 0,1,2 [--rho ..] [--beta ..] [--parallel N] [--out DIR] [key=value ...]``

Runs the grid methods x rho x beta x seeds of ``python -m training.train``, one run folder per cell::

    OUT/<method>_rho<rho>_beta<beta>_seed<seed>/   the cell's run folder (docs/replay-format.md layout)
    OUT/logs/<cell>.log                             the cell's stdout and stderr
    OUT/index.json                                  the list of cells, rewritten as cells finish

Every cell's config is checked before anything runs. Cells run one after another, or ``--parallel N``
at a time (each subprocess gets ``OMP_NUM_THREADS = cores // N`` unless set). A cell whose last
checkpoint (``global_step_<total_steps>/replay/meta.json``) exists is skipped, unless its ``run.json`` records
other settings than the cell's (then the sweep is refused, naming the cell and each ``key: old -> new``, before any
cell runs); an unfinished one resumes from its last checkpoint (the trainer's ``resume=true``). A failing cell is
recorded in ``index.json`` with its return code, and the others go on; the command exits 1 if any cell failed.

Every cell has its own folder: values that name the same cell (``--rho 0.2,0.20``) are refused. The
sweep folder has one writer (:class:`ocsd.records.RunLock`), and so has each cell's run folder. A ``--out`` that
holds a run itself (``run.json`` or ``global_step_<N>/``: a training run, not a sweep) is refused.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ocsd.cli import UsageError, folder_problem

INDEX_FILE = "index.json"
STATUSES = ("pending", "running", "done", "skipped", "failed", "interrupted")
"""Cell states in index.json; a cell's run folder is complete when status is ``done`` or ``skipped``."""


@dataclass
class Cell:
    """One grid cell: its coordinates, run folder and outcome."""

    method: str
    seed: int
    rho: float
    beta: float
    run_dir: str
    total_steps: int
    status: str = "pending"
    returncode: int | None = None
    seconds: float | None = None
    log: str = ""
    overrides: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    """The cell's resolved config (:meth:`training.config.TrainConfig.to_dict`)."""

    @property
    def name(self) -> str:
        return Path(self.run_dir).name

    def finished(self) -> bool:
        """The trainer always checkpoints the last step; its ``meta.json`` is written last."""
        return (Path(self.run_dir) / f"global_step_{self.total_steps}" / "replay" / "meta.json").is_file()

    def record(self) -> dict:
        return {"name": self.name, "method": self.method, "seed": self.seed, "rho": self.rho, "beta": self.beta,
                "run_dir": self.run_dir, "status": self.status, "returncode": self.returncode,
                "seconds": self.seconds, "log": self.log}


def cell_name(method: str, rho: float, beta: float, seed: int) -> str:
    """``<method>_rho<rho>_beta<beta>_seed<seed>`` with numbers in their shortest form (0.2, 0.25, 1)."""
    return f"{method}_rho{rho:g}_beta{beta:g}_seed{seed}"


# ----------------------------------------------------------------------------------------------
# flags
# ----------------------------------------------------------------------------------------------


def _split(flag: str, text: str | None) -> list[str]:
    if text is None:
        return []
    items = [t.strip() for t in text.split(",")]
    if not all(items):
        raise UsageError(f"{flag}: empty item in {text!r} (expected a comma-separated list)")
    if len(set(items)) != len(items):
        raise UsageError(f"{flag}: repeated item in {text!r}")
    return items


def _distinct(flag: str, items: Sequence[str], names: Sequence[str]) -> None:
    """Refuse two values that name the same cell folder (equal numbers such as 0.2 and 0.20, or numbers
    equal in the 6 significant digits of :func:`cell_name`): two cells would write one run folder."""
    seen: dict[str, str] = {}
    for item, name in zip(items, names):
        if name in seen:
            raise UsageError(f"{flag}: {seen[name]!r} and {item!r} name the same cell folder ({name}), "
                             f"so two cells would write one run; give each value once")
        seen[name] = item


def _numbers(flag: str, text: str | None) -> list[float]:
    """The numbers of a comma-separated flag, each naming its own cell; their range is the config's to
    check (:func:`plan_cells`)."""
    items, out = _split(flag, text), []
    for item in items:
        try:
            out.append(float(item))
        except ValueError:
            raise UsageError(f"{flag}: {item!r} is not a number") from None
    _distinct(flag, items, [f"{flag.lstrip('-')}{x:g}" for x in out])
    return out


def plan_cells(config: str, methods: Sequence[str], seeds: Sequence[int], rhos: Sequence[float],
               betas: Sequence[float], out: Path, overrides: Sequence[str]) -> list[Cell]:
    """Every cell of the grid with its config checked (raises ConfigError naming the cell)."""
    from training.config import ConfigError, load_config

    cells = []
    for method in methods:
        for rho in rhos:
            for beta in betas:
                for seed in seeds:
                    name = cell_name(method, rho, beta, seed)
                    run_dir = out / name
                    cell_overrides = [*overrides, f"method={method}", f"seed={seed}", f"rho={rho!r}",
                                      f"beta={beta!r}", f"run_dir={run_dir}", f"run_name={name}"]
                    try:
                        cfg = load_config(config, cell_overrides)
                    except ConfigError as exc:
                        raise ConfigError(f"cell {name}: {exc}") from None
                    cells.append(Cell(method, seed, rho, beta, str(run_dir), cfg.total_steps,
                                      log=str(out / "logs" / f"{name}.log"), overrides=cell_overrides,
                                      settings=cfg.to_dict()))
    return cells


def out_problem(out: Path) -> str | None:
    """Why ``out`` cannot be a sweep folder: it holds a run of its own (``run.json`` or ``global_step_<N>/``, such
    as a training run), into which the sweep would write its cells, logs and index; None otherwise."""
    from ocsd.records import RUN_FILE, checkpoint_dirs

    found = ([RUN_FILE] if (out / RUN_FILE).exists() else []) + [c.name for _, c in checkpoint_dirs(out)][:3]
    if not found:
        return None
    return (f"{out} holds a run ({', '.join(found)}), not a sweep; a sweep writes its cells, logs/ and "
            f"{INDEX_FILE} into --out: use a new folder or an earlier sweep's")


def finished_with_other_settings(cell: Cell) -> str | None:
    """Why a finished cell cannot be skipped: its run folder's ``run.json`` records other settings than the cell's
    (``key: old -> new``, as the trainer names them), or cannot be read; None for an unfinished cell or one whose
    settings are the cell's."""
    from ocsd.records import RecordError, read_run_info

    if not cell.finished():
        return None
    try:
        info = read_run_info(cell.run_dir)
    except RecordError as exc:
        return f"cell {cell.name} is finished, but {exc}, so its settings are not known"
    from training.trainer import changed_settings

    previous = info.get("config") if isinstance(info.get("config"), dict) else {}
    changed = changed_settings(previous, cell.settings)
    if not changed:
        return None
    return (f"cell {cell.name} finished with other settings ({'; '.join(changed)}); it would be skipped as if it had "
            f"run these: use another --out, or its settings to keep it")


# ----------------------------------------------------------------------------------------------
# running
# ----------------------------------------------------------------------------------------------


def write_index(out: Path, cells: Sequence[Cell]) -> Path:
    """Write ``OUT/index.json`` (a JSON list of cell records) atomically."""
    path = out / INDEX_FILE
    tmp = path.with_name(f".{INDEX_FILE}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps([c.record() for c in cells], indent=2) + "\n")
    os.replace(tmp, path)
    return path


def read_index(out: str | os.PathLike) -> list[dict]:
    """The cell records of a sweep folder (for figure scripts); [] when there is no index yet."""
    path = Path(out) / INDEX_FILE
    if not path.is_file():
        return []
    try:
        records = json.loads(path.read_text())
    except json.JSONDecodeError:
        return []
    return records if isinstance(records, list) else []


def _command(config: str, cell: Cell) -> list[str]:
    return [sys.executable, "-m", "training.train", "--config", config, *cell.overrides]


def _env(parallel: int) -> dict[str, str]:
    env = dict(os.environ)
    if parallel > 1 and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // parallel))
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def cell_in_use(cell: Cell) -> str | None:
    """Why ``cell`` cannot start now: another process holds its run folder (say, a cell of an earlier sweep that
    still runs after that sweep was killed); None when the folder is free. The lock is taken and given back at
    once, as the cell's trainer would take it (a stale lock is taken over and reported, as the trainer would)."""
    from ocsd.records import RunInUseError, RunLock

    if not Path(cell.run_dir).is_dir():
        return None
    try:
        RunLock(cell.run_dir).acquire().release()
    except RunInUseError as exc:
        return str(exc)
    return None


def run_cells(config: str, cells: list[Cell], out: Path, *, parallel: int = 1, echo=print) -> list[Cell]:
    """Run the unfinished cells, at most ``parallel`` at a time; index.json is rewritten at every change.

    A cell whose run folder another process holds (:func:`cell_in_use`) is recorded as failed without being
    started, and its log, which that process may still be writing, is left as it is."""
    (out / "logs").mkdir(parents=True, exist_ok=True)
    before = {r.get("run_dir"): r for r in read_index(out) if isinstance(r, dict)}
    queue = []
    for cell in cells:
        if cell.finished():
            old = before.get(cell.run_dir, {})
            cell.status, cell.returncode, cell.seconds = "skipped", old.get("returncode"), old.get("seconds")
        else:
            queue.append(cell)
    write_index(out, cells)
    env = _env(parallel)
    running: dict[int, tuple[Cell, subprocess.Popen, float, object]] = {}
    try:
        while queue or running:
            while queue and len(running) < parallel:
                cell = queue.pop(0)
                busy = cell_in_use(cell)
                if busy is not None:
                    cell.status, cell.returncode, cell.seconds = "failed", None, None
                    write_index(out, cells)
                    echo(f"[failed] {cell.name}: not started, its run folder {busy} (its log {cell.log} is left "
                         f"as it is)")
                    continue
                log = open(cell.log, "w")
                log.write("$ " + " ".join(_command(config, cell)) + "\n")
                log.flush()
                proc = subprocess.Popen(_command(config, cell), stdout=log, stderr=subprocess.STDOUT, env=env)
                running[proc.pid] = (cell, proc, time.perf_counter(), log)
                cell.status = "running"
                write_index(out, cells)
                echo(f"[start] {cell.name} (pid {proc.pid})")
            time.sleep(0.2)
            for pid in [p for p, (_, proc, _, _) in running.items() if proc.poll() is not None]:
                cell, proc, start, log = running.pop(pid)
                log.close()
                cell.returncode, cell.seconds = proc.returncode, round(time.perf_counter() - start, 2)
                cell.status = "done" if proc.returncode == 0 else "failed"
                write_index(out, cells)
                echo(f"[{cell.status}] {cell.name} in {cell.seconds:.1f} s"
                     + ("" if proc.returncode == 0 else f" (return code {proc.returncode}; see {cell.log})"))
    except KeyboardInterrupt:
        for cell, proc, start, log in running.values():
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
            cell.status, cell.returncode = "interrupted", proc.returncode
        write_index(out, cells)
        raise
    return cells


def summary_table(cells: Sequence[Cell]) -> str:
    """One line per cell: name, status, return code, seconds."""
    width = max(len(c.name) for c in cells)
    lines = [f"{'cell':<{width}}  {'status':<11}  {'rc':>4}  {'seconds':>8}"]
    for c in cells:
        rc = "" if c.returncode is None else str(c.returncode)
        secs = "" if c.seconds is None else f"{c.seconds:.1f}"
        lines.append(f"{c.name:<{width}}  {c.status:<11}  {rc:>4}  {secs:>8}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="YAML config of every cell (training/configs/*.yaml)")
    p.add_argument("--methods", required=True, help="comma-separated methods (ocsd.algorithm.methods.METHODS)")
    p.add_argument("--seeds", default="0", help="comma-separated integer seeds (default 0)")
    p.add_argument("--rho", help="comma-separated selection ratios in (0, 1] (default: the config's)")
    p.add_argument("--beta", help="comma-separated modulation strengths in [0, 1] (default: the config's)")
    p.add_argument("--parallel", type=int, default=1, help="cells run at once (default 1)")
    p.add_argument("--out", help="sweep folder (default checkpoints/sweep_<config name>)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for every cell")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from ocsd.algorithm.methods import METHODS
    from training.config import ConfigError, load_config

    try:
        if not Path(args.config).is_file():
            raise UsageError(f"--config: no such file {args.config}")
        methods = _split("--methods", args.methods)
        unknown = [m for m in methods if m not in METHODS]
        if unknown:
            raise UsageError(f"--methods: unknown {unknown}; known: {', '.join(METHODS)}")
        seed_items = _split("--seeds", args.seeds)
        try:
            seeds = [int(s) for s in seed_items]
        except ValueError:
            raise UsageError(f"--seeds: {args.seeds!r} is not a comma-separated list of integers") from None
        _distinct("--seeds", seed_items, [f"seed{s}" for s in seeds])
        if not seeds:
            raise UsageError("--seeds: no seed given")
        if args.parallel < 1:
            raise UsageError(f"--parallel: must be >= 1, got {args.parallel}")
        reserved = sorted({o.split("=", 1)[0].strip() for o in args.overrides if "=" in o}
                          & {"method", "seed", "rho", "beta", "run_dir", "run_name"})
        if reserved:
            raise UsageError(f"override(s) {reserved} are set per cell; use --methods/--seeds/--rho/--beta/--out")
        base = load_config(args.config, args.overrides)
        rhos = _numbers("--rho", args.rho) or [base.rho]
        betas = _numbers("--beta", args.beta) or [base.beta]
        out = Path(args.out) if args.out else Path("checkpoints") / f"sweep_{Path(args.config).stem}"
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out: {out} exists and is not a folder")
        problem = folder_problem(out, write=True) or (out_problem(out) if out.is_dir() else None)
        if problem:
            raise UsageError(f"--out: {problem}")
        cells = plan_cells(args.config, methods, seeds, rhos, betas, out, args.overrides)
        for cell in cells:
            problem = finished_with_other_settings(cell)
            if problem:
                raise UsageError(f"--out: {problem}")
    except (UsageError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from ocsd.records import RunInUseError, RunLock

    try:
        lock = RunLock(out).acquire()  # one sweep per folder: its index and logs have one writer
    except RunInUseError as exc:
        print(f"error: --out: {exc}", file=sys.stderr)
        return 2
    print(f"{len(cells)} cell(s) in {out} ({sum(c.finished() for c in cells)} already finished)")
    try:
        run_cells(args.config, cells, out, parallel=args.parallel)
    except KeyboardInterrupt:
        print(f"interrupted; {out / INDEX_FILE} records the cells (re-run to resume)", file=sys.stderr)
        return 130
    finally:
        lock.release()
    print(summary_table(cells))
    print(f"index written to {out / INDEX_FILE}")
    return 1 if any(c.status == "failed" for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main())
