"""Where the runs of a series stand between machines: records, checkpoints, resume packs and evaluations.

A series folder (e.g. ``results/paper_scale/valid_train_series3``) holds one folder per run with its records
(``run.json``, ``metrics.jsonl``, ``global_step_<N>/replay/`` without weights), each run's resume pack in
``packs/<NAME>.tar`` (:mod:`training.resume_pack`, the checkpoint the next machine resumes from) and evaluations
``eval_<NAME>_step<K>.json`` in any subfolder (``results/paper_scale_on_gpu.sh eval``). Per run this says the last
step recorded, the last complete checkpoint, the pack's step, the evaluated steps and the run-steps left to
``--target``, and it names what is out of step: a pack older or newer than the records' last checkpoint (repack, or
copy the records), a pack of another run, records without a pack (the run cannot resume).

Command::

    python -m training.campaign SERIES [--target 50] [--json]

Exit status 0 when every run is in step, 1 when a run has a problem (each named), 2 on bad input.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from ocsd.cli import UsageError, emit, entry_point, format_table, positive_int
from ocsd.records import checkpoint_folders, read_metrics, read_run_info
from training.resume_pack import PackError, read_pack_info

__all__ = ["RunStatus", "run_status", "series_status", "main"]

PACKS = "packs"
"""The series' subfolder of resume packs, one ``<NAME>.tar`` per run."""
_EVAL = re.compile(r"eval_(?P<run>.+)_step(?P<step>\d+)\.json")


@dataclass(frozen=True)
class RunStatus:
    """Where one run of a series stands.

    Attributes
    ----------
    name, method, model : str
    seed : int
    recorded : int
        The last step in ``metrics.jsonl`` (0 without rows).
    checkpoint : int
        The last complete checkpoint of the records (0 without one).
    pack : int or None
        The step the run's resume pack holds (None without a pack).
    evaluated : list of int
        The steps with an evaluation file.
    problems : list of str
        What is out of step, each with what to do.
    """

    name: str
    method: str
    model: str
    seed: int
    recorded: int
    checkpoint: int
    pack: int | None
    evaluated: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def remaining(self, target: int) -> int:
        """Run-steps still to train to reach ``target`` from the pack (from the start without one)."""
        return max(0, target - (self.pack or 0))


def _pack_problems(name: str, pack_file: Path, checkpoint: int, recorded: int) -> tuple[int | None, list[str]]:
    """The pack's step and what is wrong between it and the records."""
    if not pack_file.exists():
        if checkpoint:
            return None, [f"records to checkpoint {checkpoint} but no pack {pack_file}: the run cannot resume; pack "
                          f"it from the unpacked run (python -m training.resume_pack pack RUN --out {pack_file})"]
        return None, []
    try:
        info = read_pack_info(pack_file)
    except PackError as exc:
        return None, [str(exc)]
    step, problems = int(info["global_step"]), []
    if info.get("run") != name:
        problems.append(f"{pack_file} holds the run {info.get('run')!r}, not {name!r}")
    if step < checkpoint:
        problems.append(f"{pack_file} holds step {step}, the records reach checkpoint {checkpoint}: repack from the "
                        f"unpacked run (python -m training.resume_pack pack RUN --out {pack_file})")
    elif step > checkpoint:
        problems.append(f"{pack_file} holds step {step}, the records stop at checkpoint {checkpoint} (step "
                        f"{recorded}): copy the run's records from the machine's folder")
    return step, problems


def run_status(run_dir: str | Path, series: str | Path | None = None) -> RunStatus:
    """The status of the run folder ``run_dir`` in ``series`` (default: its parent folder).

    Raises
    ------
    RecordError
        The run's ``run.json`` or ``metrics.jsonl`` cannot be read.
    """
    run_dir = Path(run_dir)
    series = Path(series) if series is not None else run_dir.parent
    info = read_run_info(run_dir)
    rows = read_metrics(run_dir)
    recorded = max((int(r["step"]) for r in rows), default=0)
    folders = checkpoint_folders(run_dir, warn=False)
    checkpoint = int(folders[-1].name.rsplit("_", 1)[1]) if folders else 0
    pack, problems = _pack_problems(run_dir.name, series / PACKS / f"{run_dir.name}.tar", checkpoint, recorded)
    evaluated = sorted({int(m.group("step")) for path in series.rglob("eval_*.json")
                        if (m := _EVAL.fullmatch(path.name)) and m.group("run") == run_dir.name})
    return RunStatus(name=run_dir.name, method=str(info.get("method", "")), model=str(info.get("model", "")),
                     seed=int(info.get("seed", 0)), recorded=recorded, checkpoint=checkpoint, pack=pack,
                     evaluated=evaluated, problems=problems)


def series_status(series: str | Path) -> list[RunStatus]:
    """The status of every run folder (a folder with a ``run.json``) of ``series``, by name.

    Raises
    ------
    UsageError
        ``series`` is not a folder, or holds no run folder.
    """
    series = Path(series)
    if not series.is_dir():
        raise UsageError(f"{series}: not a folder")
    runs = sorted(p for p in series.iterdir() if (p / "run.json").is_file())
    if not runs:
        raise UsageError(f"{series}: no run folder (a folder with a run.json) in it")
    return [run_status(run, series) for run in runs]


def _table(runs: list[RunStatus], target: int) -> str:
    rows = [[r.name, r.method, r.seed, r.recorded, r.checkpoint, "none" if r.pack is None else r.pack,
             ", ".join(map(str, r.evaluated)) or "-", r.remaining(target)] for r in runs]
    by_method: dict[str, int] = {}
    for r in runs:
        by_method[r.method] = by_method.get(r.method, 0) + r.remaining(target)
    left = ", ".join(f"{m} {n}" for m, n in by_method.items())
    lines = [format_table(["run", "method", "seed", "recorded", "checkpoint", "pack", "evaluated",
                           f"to {target}"], rows, title=f"{len(runs)} runs")]
    lines.append(f"run-steps to {target}: {sum(r.remaining(target) for r in runs)} ({left})")
    problems = [f"{r.name}: {p}" for r in runs for p in r.problems]
    lines.append("\n".join(["problems:", *problems]) if problems else "every pack holds its run's last checkpoint")
    return "\n".join(lines)


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.campaign", description=__doc__.split("\n")[0])
    parser.add_argument("series", help="a series folder: run folders, packs/NAME.tar, eval_NAME_stepK.json files")
    parser.add_argument("--target", type=positive_int("--target"), default=50,
                        help="the step every run is to reach (default 50)")
    parser.add_argument("--json", action="store_true", help="print one JSON object and nothing else on stdout")
    args = parser.parse_args(argv)
    runs = series_status(args.series)
    result = {"series": args.series, "target": args.target,
              "runs": [{**asdict(r), "remaining": r.remaining(args.target)} for r in runs]}
    emit(args.json, result, _table(runs, args.target))
    return 1 if any(r.problems for r in runs) else 0


main = entry_point(_main, "training.campaign")

if __name__ == "__main__":
    sys.exit(main())
