"""Where the runs of a series stand between machines: records, checkpoints, resume packs and evaluations.

A series folder (e.g. ``results/paper_scale/valid_train_series3``) holds one folder per run with its records
(``run.json``, ``metrics.jsonl``, ``global_step_<N>/replay/`` without weights), each run's resume pack in
``packs/<NAME>.tar`` (:mod:`training.resume_pack`, the checkpoint the next machine resumes from) and evaluations
``eval_<NAME>_step<K>.json`` in any subfolder (``results/paper_scale_on_gpu.sh eval``). Per run this says the last
step recorded, the last complete checkpoint, the pack's step, the evaluated steps and the run-steps left to
``--target`` (one step for every run, and ``METHOD=N`` for a method's own: issue 36 asks 50 steps of OCSD and GRPO
and 20 of each baseline), and it names what is out of step: a pack older or newer than the records' last checkpoint
(repack, or copy the records), a pack of another run, records without a pack (the run cannot resume), an
evaluation of a step past the records' last checkpoint (its weights were lost: the run retrains that step).

:func:`collect` brings what a GPU machine sent back into the series: for each run, the newest ``<NAME>.tgz`` (the
run folder without weights) and ``<NAME>.actor.tgz.*`` (the parts of its last checkpoint's ``actor/``) of the
folders given, oldest first (``results/paper_scale_on_gpu.sh poll`` writes one folder per call), are unpacked into
``--runs`` (the runs with their weights, which ``rescoring.swap`` and ``rescoring.audit`` read), the records copied
into the series without weights, and the run packed into ``packs/<NAME>.tar`` where its weights are newer than the
pack there. Where the records reach past the pack (the machine was given back before a checkpoint's weights came,
or between two checkpoints), they are rolled back to the pack's step (:func:`roll_back`): the run retrains from
there. With ``--budget-mib`` the newer packs are measured as a push counts them (:mod:`training.push_size`: a
replaced pack of the 0.5B adds 78 MB) and replaced only while they fit, the runs that gained the most steps first;
the others keep their pack and are rolled back to it, their newer weights left in ``--runs``; ``--since REV``
takes the budget from what the commits since REV leave of the push's limit. A run's records never go back to fewer
steps: where the newest ``<NAME>.tgz`` holds fewer steps than an earlier folder's or than the series (a folder of an
earlier machine, or the folders out of order), nothing is collected and the file is named (:func:`behind`). Then
each run folder of the series is validated (``ocsd.records``). The evaluations the folders hold
(``eval_<NAME>_step<K>.json``, the newest of each name) go into ``eval_step<K>/`` of the series, or replace the file
of that name where the series has one; an evaluation of a step past the last checkpoint of its run's records (their
weights did not come back and the records were rolled back) is not filed, and is named where it stays. The audits
(``audit_<NAME>.tgz`` of ``results/paper_scale_on_gpu.sh audit``: one ``audit_<NAME>_step<K>/`` folder of
``rescoring.audit`` per checkpoint) are unpacked into the series, replacing a folder of the same name; their bytes
come off ``--budget-mib`` before the packs'. The GPU script's other outputs (``ladder_*.tgz``, ``*.warm.tgz``,
``verl_check.tgz``) are named and left where they are.

Commands::

    python -m training.campaign status SERIES [--target 50] [--target rlsd=20 ...] [--json]
    python -m training.campaign collect SERIES FOLDER [FOLDER ...] --runs DIR [--budget-mib MIB | --since REV]

Exit status 0 when every run is in step, 1 when a run has a problem (each named), 2 on bad input.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import tarfile
import tempfile
import warnings
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from ocsd.cli import UsageError, emit, entry_point, fmt, format_table
from ocsd.records import (EVALUATION_NAME, METRICS_FILE, RecordError, RunWriter, checkpoint_dirs, checkpoint_folders,
                          evaluation_files, read_metrics, read_run_info, validate_path)
from training.resumable import resumable_checkpoints
from training.push_size import DEFAULT_LIMIT_MIB, MIB, change_bytes, pending
from training.resume_pack import PackError, pack, read_pack_info

__all__ = ["RunStatus", "RolledBack", "run_status", "series_status", "sent_back", "behind", "sent_evaluations",
           "collect_evaluations", "sent_audits", "collect_audits", "collect", "roll_back", "main"]

RESERVE_MIB = 10.0
"""What ``collect --since`` keeps of a push's budget for the records and analyses still to commit (MiB)."""
PACKS = "packs"
"""The series' subfolder of resume packs, one ``<NAME>.tar`` per run."""
_AUDITS = "audit_*.tgz"
"""The audits of one ``results/paper_scale_on_gpu.sh audit`` job: an ``audit_<NAME>_step<K>/`` folder per checkpoint."""
OTHER_OUTPUTS = ("ladder_*.tgz", "*.warm.tgz", "verl_check.tgz")
"""What else the GPU script's jobs send back as ``.tgz``: no run's records, and not collected."""


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


def _evaluation_problems(files: dict[int, Path], checkpoint: int) -> list[str]:
    """The evaluation ``files`` (by step) of steps past the records' last checkpoint: their weights are in no pack
    (they did not come back and the records were rolled back, :func:`roll_back`), so the run retrains those steps
    and such a file evaluates a checkpoint the run will not have."""
    return [f"{path} evaluates step {step}, past the records' last checkpoint {checkpoint}: its weights are in no "
            f"pack, so the run retrains from {checkpoint}; move the file out of the series and evaluate the retrained "
            f"step {step}" for step, path in files.items() if step > checkpoint]


def _evaluation_files(series: Path) -> dict[str, Path]:
    """Per file name, the ``eval_<NAME>_step<K>.json`` file anywhere in ``series`` (the first by path where a name
    repeats; :func:`ocsd.records.evaluation_files`)."""
    return {path.name: path for steps in evaluation_files(series).values() for path in steps.values()}


def run_status(run_dir: str | Path, series: str | Path | None = None, *,
               evaluations: dict[str, dict[int, Path]] | None = None) -> RunStatus:
    """The status of the run folder ``run_dir`` in ``series`` (default: its parent folder); ``evaluations``:
    :func:`ocsd.records.evaluation_files` of the series when already read (it is read here otherwise).

    Raises
    ------
    RecordError
        The run's ``run.json`` or ``metrics.jsonl`` cannot be read.
    """
    run_dir = Path(run_dir)
    series = Path(series) if series is not None else run_dir.parent
    info = read_run_info(run_dir)
    recorded = _recorded(run_dir)
    checkpoint = _last_checkpoint(run_dir)
    pack, problems = _pack_problems(run_dir.name, series / PACKS / f"{run_dir.name}.tar", checkpoint, recorded)
    files = (evaluations if evaluations is not None else evaluation_files(series)).get(run_dir.name, {})
    problems += _evaluation_problems(files, checkpoint)
    return RunStatus(name=run_dir.name, method=str(info.get("method", "")), model=str(info.get("model", "")),
                     seed=int(info.get("seed", 0)), recorded=recorded, checkpoint=checkpoint, pack=pack,
                     evaluated=list(files), problems=problems)


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
    evaluations = evaluation_files(series)  # one walk of the series for every run
    return [run_status(run, series, evaluations=evaluations) for run in runs]


def _is_output(path: Path) -> bool:
    """Whether ``path`` is an output of a job (audits included) rather than a run's records."""
    return any(path.match(pattern) for pattern in (_AUDITS, *OTHER_OUTPUTS))


def _check_folders(folders: Sequence[str | Path]) -> list[Path]:
    paths = list(map(Path, folders))
    for folder in paths:
        if not folder.is_dir():
            raise UsageError(f"{folder}: not a folder")
    return paths


def _records_files(folder: Path) -> list[tuple[str, Path]]:
    """``(NAME, NAME.tgz)`` for each run folder sent back in ``folder`` (weights' parts and job outputs left out)."""
    return [(path.name[:-len(".tgz")], path) for path in sorted(folder.glob("*.tgz"))
            if not path.name.endswith(".actor.tgz") and not _is_output(path)]


def _recorded(run: Path) -> int:
    """The last step of a run folder's ``metrics.jsonl`` (0 without rows or without the file)."""
    return max((int(row["step"]) for row in read_metrics(run)), default=0)


def _sent_step(path: Path, name: str) -> int:
    """The last step of ``NAME/metrics.jsonl`` in the run folder sent back as ``path`` (0 without rows), read as
    :func:`ocsd.records.read_metrics` reads a run's (a torn last line ignored).

    Raises
    ------
    UsageError
        ``path`` cannot be read, or its ``metrics.jsonl`` is not a run's metrics.
    """
    try:
        with tarfile.open(path, "r:gz") as tar, tempfile.TemporaryDirectory() as tmp:
            try:
                member = tar.extractfile(f"{name}/{METRICS_FILE}")
            except KeyError:
                member = None
            if member is None:
                return 0
            (Path(tmp) / METRICS_FILE).write_bytes(member.read())
            with warnings.catch_warnings():  # said again, naming the run's own file, once the run is copied in
                warnings.simplefilter("ignore")
                return _recorded(Path(tmp))
    except (tarfile.TarError, OSError, EOFError) as error:
        raise UsageError(f"{path}: cannot be unpacked ({error})") from None
    except RecordError as error:
        raise UsageError(f"{path}: {name}/{METRICS_FILE}: {error}") from None


def behind(series: str | Path, folders: Sequence[str | Path]) -> list[str]:
    """The run folders sent back in ``folders`` (oldest first) that would set a run back, one line each: the newest
    ``NAME.tgz`` (the one :func:`sent_back` takes) holds fewer steps than an earlier folder's, or than the series'
    records of the run (a poll folder of an earlier machine, or the folders named out of order). :func:`collect`
    refuses them before anything moves: a run's records never go back to fewer steps.

    Raises
    ------
    UsageError
        A folder is missing or a ``NAME.tgz`` cannot be read.
    """
    found: dict[str, list[tuple[Path, int]]] = {}
    for folder in _check_folders(folders):
        for name, path in _records_files(folder):
            found.setdefault(name, []).append((path, _sent_step(path, name)))
    lines = []
    for name, sent in sorted(found.items()):
        (newest, step), (most_path, most) = sent[-1], max(sent, key=lambda item: item[1])
        if most > step:
            lines.append(f"{newest}: records to step {step}, behind {most_path} (step {most}); name the folders "
                         f"oldest first, or leave the older one out")
        elif (recorded := _recorded(Path(series) / name)) > step:
            lines.append(f"{newest}: records to step {step}, behind the series' records of {name} (step "
                         f"{recorded}); a folder of an earlier machine? leave it out")
    return lines


def sent_back(folders: Sequence[str | Path]) -> dict[str, tuple[Path, list[Path]]]:
    """Per run name, its newest ``NAME.tgz`` and the parts of its newest ``NAME.actor.tgz.*`` (empty without any)
    in ``folders``, oldest first (a later folder's file replaces an earlier one's); the jobs' outputs
    (``audit_*.tgz`` and :data:`OTHER_OUTPUTS`) are not runs.

    Raises
    ------
    UsageError
        A folder is missing.
    """
    records: dict[str, Path] = {}
    actors: dict[str, list[Path]] = {}
    for folder in _check_folders(folders):
        for name, path in _records_files(folder):
            records[name] = path
        for first in sorted(folder.glob("*.actor.tgz.aa")):
            name = first.name[:-len(".actor.tgz.aa")]
            actors[name] = sorted(folder.glob(f"{name}.actor.tgz.*"))
    return {name: (path, actors.get(name, [])) for name, path in records.items()}


def _newest(folders: Sequence[str | Path], pattern: str) -> dict[str, Path]:
    """Per file name, the newest file matching ``pattern`` in ``folders`` (oldest first)."""
    found: dict[str, Path] = {}
    for folder in _check_folders(folders):
        for path in sorted(folder.glob(pattern)):
            found[path.name] = path
    return found


def sent_audits(folders: Sequence[str | Path]) -> dict[str, Path]:
    """Per file name, the newest ``audit_<NAME>.tgz`` in ``folders`` (oldest first)."""
    return _newest(folders, _AUDITS)


def _tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _same_tree(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    return files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in files)


def collect_audits(series: str | Path, folders: Sequence[str | Path]) -> tuple[list[str], int]:
    """Unpack the audits sent back in ``folders`` into ``series`` (module docstring).

    Every bundle is unpacked and checked before any folder of the series changes.

    Returns
    -------
    lines : list of str
        One per audit folder: copied, replaced or already there.
    added : int
        Bytes of the folders copied or replaced (what they add to a push, at most).

    Raises
    ------
    UsageError
        A bundle cannot be unpacked, or holds anything but ``audit_*/`` folders with an ``audit.json``.
    """
    series = Path(series)
    found = sent_audits(folders)
    if not found:
        return [], 0
    lines, added = [], 0
    with tempfile.TemporaryDirectory(dir=series, prefix=".audits.") as staging:
        unpacked: dict[str, Path] = {}
        for name, path in sorted(found.items()):
            into = Path(staging) / name
            _extract(path, into, str(path))
            held = sorted(into.iterdir())
            bad = [p.name for p in held if not (p.is_dir() and p.match("audit_*") and (p / "audit.json").is_file())]
            if not held or bad:
                raise UsageError(f"{path}: not a bundle of audits ("
                                 + (f"{bad[0]} is no audit_*/ folder with an audit.json)" if bad else "empty)"))
            unpacked.update({p.name: p for p in held})  # a folder in two bundles: the later bundle by name wins
        for name, folder in sorted(unpacked.items()):
            target = series / name
            if target.is_dir() and _same_tree(folder, target):
                lines.append(f"{name}: already in {series}")
                continue
            existed = target.exists()
            if existed:
                shutil.rmtree(target)
            shutil.move(str(folder), target)
            added += _tree_bytes(target)
            lines.append(f"{name}: {'replaced' if existed else 'copied'} into {series}")
    return lines, added


def _not_collected(folders: Sequence[str | Path]) -> list[str]:
    """A line for each of the jobs' other outputs (:data:`OTHER_OUTPUTS`), which stay where they are."""
    return [f"{path}: not collected (a job's output, not a run's records or audits: unpack it by hand)"
            for pattern in OTHER_OUTPUTS for path in _newest(folders, pattern).values()]


def _extract(stream: io.BufferedIOBase | Path, into: Path, what: str) -> None:
    """Unpack a gzipped tar (a file, or the stream of its concatenated parts) into ``into``, refusing paths that
    leave it."""
    try:
        with (tarfile.open(stream, "r:gz") if isinstance(stream, Path) else tarfile.open(fileobj=stream, mode="r|gz")) \
                as tar:
            tar.extractall(into, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise UsageError(f"{what}: cannot be unpacked ({type(exc).__name__}: {exc})") from None


class _Parts(io.RawIOBase):
    """The parts of a split file read one after the other as one stream."""

    def __init__(self, parts: Sequence[Path]):
        self._files = [open(p, "rb") for p in parts]

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._files:
            n = self._files[0].readinto(buffer)
            if n:
                return n
            self._files.pop(0).close()
        return 0

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files = []
        super().close()


def _unpack_run(name: str, records: Path, parts: Sequence[Path], runs: Path) -> Path:
    """``runs/NAME`` from the records and the actor's parts, unpacked beside it first so that a file that cannot be
    read leaves an earlier copy in place."""
    incoming = runs / f".{name}.incoming"
    if incoming.exists():
        shutil.rmtree(incoming)
    incoming.mkdir(parents=True)
    try:
        _extract(records, incoming, str(records))
        if parts:
            with io.BufferedReader(_Parts(parts)) as stream:
                _extract(stream, incoming, f"{parts[0].name[:-3]}.*")
        if not (incoming / name / "run.json").is_file():
            raise UsageError(f"{records}: holds no run folder {name}/ with a run.json")
        if (runs / name).exists():
            shutil.rmtree(runs / name)
        (incoming / name).rename(runs / name)
    finally:
        shutil.rmtree(incoming, ignore_errors=True)
    return runs / name


def sent_evaluations(folders: Sequence[str | Path]) -> dict[str, Path]:
    """Per file name, the newest ``eval_<NAME>_step<K>.json`` in ``folders`` (oldest first)."""
    return {name: path for name, path in _newest(folders, "eval_*.json").items() if EVALUATION_NAME.fullmatch(name)}


def _read_evaluation(path: Path, step: int) -> None:
    """Refuse a file that is not the evaluation of checkpoint ``step`` (``training.evaluate --json``)."""
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not an evaluation, it cannot be read as JSON ({exc})") from None
    if not isinstance(result, dict) or "success_rate" not in result:
        raise UsageError(f"{path}: not an evaluation (no success_rate)")
    if result.get("global_step") not in (None, step):
        raise UsageError(f"{path}: holds the evaluation of step {result['global_step']}, not of step {step}")


@dataclass(frozen=True)
class _Evaluation:
    """An evaluation file sent back: where it is, and the run and step its name gives."""

    path: Path
    run: str
    step: int


def _checked_evaluations(folders: Sequence[str | Path]) -> dict[str, _Evaluation]:
    """The evaluations sent back in ``folders`` (:func:`sent_evaluations`) by file name, each read first.

    Raises
    ------
    UsageError
        A file is not JSON, not an evaluation, or of another step than its name says.
    """
    found = {}
    for name, path in sent_evaluations(folders).items():
        parts = EVALUATION_NAME.fullmatch(name)
        found[name] = _Evaluation(path, parts["run"], int(parts["step"]))
        _read_evaluation(path, found[name].step)
    return found


def _last_checkpoint(run_dir: Path) -> int:
    """The last complete checkpoint of the records in ``run_dir`` (0 without one)."""
    complete = set(checkpoint_folders(run_dir, warn=False))
    return max((n for n, folder in checkpoint_dirs(run_dir) if folder in complete), default=0)


def _file_evaluations(series: Path, found: dict[str, _Evaluation]) -> list[str]:
    """Copy the evaluations ``found`` (:func:`_checked_evaluations`) into ``series``, but none of a step past the
    last checkpoint of its run's records there: their weights did not come back, so the run retrains that step and
    the file evaluates a checkpoint the series will not have (it stays where it was sent)."""
    held = _evaluation_files(series) if found else {}  # one walk of the series for every file
    lines = []
    for name, sent in sorted(found.items()):
        path, step, run = sent.path, sent.step, series / sent.run
        if (run / "run.json").is_file() and step > (last := _last_checkpoint(run)):
            lines.append(f"{name}: not filed: it evaluates step {step}, past the records' last checkpoint {last} "
                         f"(those weights did not come back, so the run retrains from {last}); it stays in "
                         f"{path.parent}")
            continue
        target = held.get(name, series / f"eval_step{step}" / name)
        if name in held and target.read_bytes() == path.read_bytes():
            lines.append(f"{name}: already in {target.parent}")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        lines.append(f"{name}: {'replaced' if name in held else 'copied'} into {target.parent}")
    return lines


def collect_evaluations(series: str | Path, folders: Sequence[str | Path]) -> list[str]:
    """Copy the evaluations sent back in ``folders`` into ``series`` (module docstring), except those of a step past
    the last checkpoint of their run's records there; one line per file.

    Raises
    ------
    UsageError
        A file is not JSON, not an evaluation, or of another step than its name says (nothing is copied then).
    """
    return _file_evaluations(Path(series), _checked_evaluations(folders))


@dataclass(frozen=True)
class RolledBack:
    """What :func:`roll_back` dropped: the steps of the checkpoint folders and of the ``metrics.jsonl`` rows past
    the step it rolled back to."""

    checkpoints: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.checkpoints or self.rows)


@dataclass(frozen=True)
class _Offer:
    """A run's newer pack, written aside: its step, the step of the pack it would replace, and what replacing it
    adds to a push (bytes; None where not measured)."""

    name: str
    file: Path
    step: int
    held: int | None
    cost: int | None


def _within(offers: Sequence[_Offer], budget: int | None) -> set[str]:
    """The runs whose packs are replaced: all without a budget; else the runs that gained the most steps first (then
    the cheaper), each where it still fits."""
    if budget is None:
        return {o.name for o in offers}
    taken, used = set(), 0
    for offer in sorted(offers, key=lambda o: (-(o.step - (o.held or 0)), o.cost, o.name)):
        if used + offer.cost <= budget:
            taken.add(offer.name)
            used += offer.cost
    return taken


def _mb(n: int) -> str:
    return f"{fmt(n / 1e6, 1)} MB"


def collect(series: str | Path, folders: Sequence[str | Path], runs: str | Path, *,
            budget: int | None = None) -> tuple[list[str], list[str]]:
    """Bring the runs sent back in ``folders`` into ``series`` (module docstring); returns what was done and the
    problems ``ocsd.records`` finds in the runs' folders of the series, one line each.

    Parameters
    ----------
    budget : int, optional
        Bytes a push may still take (:mod:`training.push_size`). The newer packs are then measured as git writes
        them (a replaced pack of the 0.5B: 78 MB) and replaced only while they fit, the runs that gained the most
        steps first; a run whose pack does not fit keeps its older pack, its records are rolled back to that pack's
        step and its newer weights stay in ``runs`` (a run that has no pack yet is then not brought into the series).
        The audits collected first take their bytes off it.

    Raises
    ------
    UsageError
        A folder is missing, the folders hold no run, audit or evaluation, ``series`` is not a folder, a run folder
        sent back would set its run back (:func:`behind`), a file cannot be unpacked, an evaluation file is not one
        (:func:`collect_evaluations`) or an audit bundle holds no audits (:func:`collect_audits`; these stop the
        collection before a run moves), or ``budget`` is negative.
    """
    series, runs = Path(series), Path(runs)
    if not series.is_dir():
        raise UsageError(f"{series}: not a folder")
    if budget is not None and budget < 0:
        raise UsageError(f"--budget-mib must be >= 0, got {budget / MIB:g}")
    sent = sent_back(folders)
    if not sent and not sent_audits(folders) and not sent_evaluations(folders):
        raise UsageError(f"nothing to collect in {', '.join(map(str, folders))}: no NAME.tgz (a run folder sent "
                         "back), audit_NAME.tgz or eval_NAME_stepK.json")
    if stale := behind(series, folders):  # a run's records never go back to fewer steps
        raise UsageError("nothing collected: " + "; ".join(stale))
    evaluations = _checked_evaluations(folders)  # a file that is no evaluation stops all before a run moves
    audits, audit_bytes = collect_audits(series, folders)
    if budget is not None:
        budget = max(budget - audit_bytes, 0)  # the audits are in the series already: the packs get what is left
    staged = {name: _unpack_run(name, records, parts, runs) for name, (records, parts) in sorted(sent.items())}
    lines, problems = [], []
    kept = {name: [n for n, _ in resumable_checkpoints(run)] for name, run in staged.items()}
    held = {name: _held(series / PACKS / f"{name}.tar") for name in staged}
    with tempfile.TemporaryDirectory(dir=runs, prefix=".packs.") if staged else nullcontext() as aside:
        offers = {name: offer for name, run in staged.items()
                  if (offer := _newer_pack(name, run, kept[name], held[name], series, Path(aside),
                                           measure=budget is not None))}
        taken = _within(list(offers.values()), budget)
        left = None if budget is None else budget - sum(offers[name].cost for name in taken)
        for name, run in staged.items():
            lines.append(_bring_in(name, run, kept[name], held[name], series, offers.get(name), name in taken, left))
            if (series / name).is_dir():
                problems += [f"{name}: {problem}" for problem in validate_path(series / name)]
    filed = _file_evaluations(series, evaluations)  # after the runs, whose records may have been rolled back
    return lines + filed + audits + _not_collected(folders), problems


def _held(pack_file: Path) -> int | None:
    """The step of the pack at ``pack_file`` (None without one)."""
    return read_pack_info(pack_file)["global_step"] if pack_file.exists() else None


def _newer_pack(name: str, run: Path, kept: list[int], held: int | None, series: Path, aside: Path, *,
                measure: bool) -> _Offer | None:
    """The pack of ``run``'s last checkpoint (``kept``: its resumable checkpoints), written into ``aside``, where it
    is newer than the series' pack of the run (at step ``held``; None otherwise); with ``measure``, what replacing
    the series' pack by it adds to a push."""
    if not kept or (held is not None and kept[-1] <= held):
        return None
    new = pack(run, aside / f"{name}.tar")
    cost = change_bytes(series / PACKS / f"{name}.tar" if held is not None else None, new) if measure else None
    return _Offer(name, new, kept[-1], held, cost)


def _bring_in(name: str, run: Path, kept: list[int], held: int | None, series: Path, offer: _Offer | None,
              fits: bool, left: int | None) -> str:
    """Copy ``run``'s records into the series, replace its pack (at step ``held``) by ``offer`` where there is one
    that ``fits``, roll the records back to the pack's step; returns the run's line (a run whose first pack does not
    fit stays out)."""
    pack_file = series / PACKS / f"{name}.tar"
    if offer and not fits and offer.held is None:
        return (f"{name}: not brought into the series: its first pack ({_mb(offer.cost)} of a push's diff) does not "
                f"fit the budget ({_mb(left)} left); the run and its weights stay in {run}")
    shutil.copytree(run, series / name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("actor", ".lock"))
    line = f"{name}: records to step {_recorded(run)} copied"
    if not kept:
        line += "; no weights came back"
    elif offer is None:
        line += f"; weights of step {kept[-1]}, the pack already holds step {held}"
    elif fits:
        pack_file.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(offer.file, pack_file)
        held = offer.step
        cost = "" if offer.cost is None else f" ({_mb(offer.cost)} of a push's diff)"
        line += f"; packed step {offer.step} into {pack_file}{cost}"
    else:
        line += (f"; the pack of step {offer.step} ({_mb(offer.cost)} of a push's diff) does not fit the budget "
                 f"({_mb(left)} left), so the pack keeps step {held} and the weights of step {offer.step} stay in "
                 f"{run}")
    if held is not None and (dropped := roll_back(series / name, held)):
        line += f"; {_rolled_back(dropped, held)}"
    return line


def _rolled_back(dropped: RolledBack, step: int) -> str:
    """What a roll-back to ``step`` did, said in one clause."""
    if dropped.checkpoints:
        return (f"the weights of checkpoint {dropped.checkpoints[-1]} are not in the pack, so the records were rolled "
                f"back to the pack's step {step} (the run retrains from there)")
    steps = dropped.rows
    which = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
    return (f"the records of {which}, past the last checkpoint, were rolled back to the pack's step {step} (the run "
            f"retrains them from there)")


def roll_back(run_dir: str | Path, step: int) -> RolledBack:
    """Drop the records of ``run_dir`` that lie past checkpoint ``step``: the ``metrics.jsonl`` rows and
    ``global_step_<K>`` folders with K > ``step``, as the trainer does when it resumes from ``step``, so that a run
    whose later weights were lost (or were never written: a machine given back between two checkpoints) does not
    keep two versions of the steps it retrains.

    Returns
    -------
    RolledBack
        The steps of the dropped checkpoint folders and metrics rows (false, and nothing dropped, when no record
        lies past ``step``).
    """
    run_dir = Path(run_dir)
    folders = [(n, folder) for n, folder in checkpoint_dirs(run_dir) if n > step]
    rows = sorted(int(r["step"]) for r in read_metrics(run_dir) if int(r["step"]) > step)
    if rows:
        RunWriter(run_dir).truncate_metrics(step)
    for _, folder in folders:
        shutil.rmtree(folder)
    return RolledBack([n for n, _ in folders], rows)


@dataclass(frozen=True)
class Targets:
    """The step each run is to reach: ``default`` for every method but those ``by_method`` names.

    Attributes
    ----------
    default : int
        The step of a method not named (``--target N``).
    by_method : dict of str to int
        A method's own step (``--target METHOD=N``); a method named with no run in the series counts all its steps
        as left.
    """

    default: int = 50
    by_method: dict[str, int] = field(default_factory=dict)

    def of(self, method: str) -> int:
        """The step a run of ``method`` is to reach."""
        return self.by_method.get(method, self.default)


def parse_targets(values: Sequence[str] | None, default: int = 50) -> Targets:
    """``--target`` values (``N``: every run; ``METHOD=N``: a method's own; repeated) as :class:`Targets`.

    Raises
    ------
    UsageError
        A value that is not ``N`` or ``METHOD=N`` with ``N`` a positive integer, or a step given twice for one method
        (or twice for every run); the message names ``--target`` and the value.
    """
    bare: list[int] = []
    by_method: dict[str, int] = {}
    for value in values or []:
        method, _, number = value.rpartition("=")
        if not number.isdigit() or int(number) < 1 or ("=" in value and not method.strip()) or "=" in method:
            raise UsageError(f"--target {value!r}: give a step N >= 1, or METHOD=N for one method (e.g. rlsd=20)")
        if not method:
            bare.append(int(number))
        elif method in by_method:
            raise UsageError(f"--target {value!r}: {method} was given a step twice")
        else:
            by_method[method] = int(number)
    if len(bare) > 1:
        raise UsageError(f"--target: one step for every run, got {', '.join(map(str, bare))}")
    return Targets(default=bare[0] if bare else default, by_method=by_method)


def _table(runs: list[RunStatus], targets: Targets) -> str:
    rows = [[r.name, r.method, r.seed, r.recorded, r.checkpoint, "none" if r.pack is None else r.pack,
             ", ".join(map(str, r.evaluated)) or "-", targets.of(r.method), r.remaining(targets.of(r.method))]
            for r in runs]
    by_method: dict[str, int] = {}
    for r in runs:
        by_method[r.method] = by_method.get(r.method, 0) + r.remaining(targets.of(r.method))
    not_started = {m: n for m, n in targets.by_method.items() if m not in by_method}
    left = "; ".join([f"{m} {n} to {targets.of(m)}" for m, n in by_method.items()]
                     + [f"{m} {n} to {n}, no run yet" for m, n in not_started.items()])
    lines = [format_table(["run", "method", "seed", "recorded", "checkpoint", "pack", "evaluated", "target",
                           "left"], rows, title=f"{len(runs)} runs")]
    lines.append(f"run-steps left: {sum(by_method.values()) + sum(not_started.values())} ({left})")
    problems = [f"{r.name}: {p}" for r in runs for p in r.problems]
    lines.append("\n".join(["problems:", *problems]) if problems else "every pack holds its run's last checkpoint")
    return "\n".join(lines)


def _budget(args: argparse.Namespace) -> int | None:
    """The bytes collect may add to the push: ``--budget-mib``, or what ``--since`` leaves under ``--limit-mib``
    less ``--reserve-mib`` (at least 0); None without either."""
    if args.since is None:
        return None if args.budget_mib is None else int(args.budget_mib * MIB)
    if args.limit_mib <= 0 or args.reserve_mib < 0:
        raise UsageError("--limit-mib must be > 0 and --reserve-mib >= 0")
    left = pending(args.since, Path(args.series), limit_mib=args.limit_mib).left - int(args.reserve_mib * MIB)
    print(f"push budget: {max(left, 0) / 1e6:.1f} MB (what the commits since {args.since} and the changes not "
          f"committed leave under {args.limit_mib:g} MiB, less {args.reserve_mib:g} MiB)")
    return max(left, 0)


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.campaign", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="where every run of a series stands")
    status.add_argument("series", help="a series folder: run folders, packs/NAME.tar, eval_NAME_stepK.json files")
    target_help = ("the step every run is to reach (N, default 50), or one method's (METHOD=N, e.g. rlsd=20); "
                   "repeat for several methods")
    status.add_argument("--target", action="append", metavar="[METHOD=]N", help=target_help)
    status.add_argument("--json", action="store_true", help="print one JSON object and nothing else on stdout")
    take = sub.add_parser("collect", help="what a machine sent back into a series (records, packs)")
    take.add_argument("series", help="the series folder")
    take.add_argument("folders", nargs="+", metavar="FOLDER",
                      help="folders of NAME.tgz, NAME.actor.tgz.*, eval_NAME_stepK.json and audit_NAME.tgz as "
                           "poll wrote them, oldest first")
    take.add_argument("--runs", required=True, metavar="DIR",
                      help="where the runs are unpacked with their weights (kept for rescoring)")
    take.add_argument("--target", action="append", metavar="[METHOD=]N",
                      help="for the status printed after: " + target_help)
    budget = take.add_mutually_exclusive_group()
    budget.add_argument("--budget-mib", type=float, default=None, metavar="MIB",
                        help="what a push may still take: newer packs replace the older only while they fit, the "
                             "runs that gained the most steps first")
    budget.add_argument("--since", metavar="REV",
                        help="the budget is what python -m training.push_size --since REV leaves under --limit-mib, "
                             "less --reserve-mib")
    take.add_argument("--limit-mib", type=float, default=DEFAULT_LIMIT_MIB,
                      help=f"with --since: the limit on a push's diffs (default {DEFAULT_LIMIT_MIB:g})")
    take.add_argument("--reserve-mib", type=float, default=RESERVE_MIB,
                      help=f"with --since: kept for the records and analyses still to commit (default {RESERVE_MIB:g})")
    args = parser.parse_args(argv)
    args.json = getattr(args, "json", False)
    targets = parse_targets(args.target)
    invalid: list[str] = []
    if args.command == "collect":
        done, invalid = collect(args.series, args.folders, args.runs, budget=_budget(args))
        print("\n".join(done + [f"invalid records: {p}" for p in invalid]))
    runs = series_status(args.series)
    result = {"series": args.series, "target": targets.default, "targets": targets.by_method,
              "runs": [{**asdict(r), "target": targets.of(r.method), "remaining": r.remaining(targets.of(r.method))}
                       for r in runs]}
    emit(args.json, result, _table(runs, targets))
    return 1 if invalid or any(r.problems for r in runs) else 0


main = entry_point(_main, "training.campaign", errors=(PackError,))

if __name__ == "__main__":
    sys.exit(main())
