"""``python -m training.collect --model PATH_OR_CKPT --tasks N --group G [--out DIR] ...``

Runs the rollout, step selection and replay scoring of a model or checkpoint without updating it (the
trainer's own :mod:`training.pipeline`), and writes one checkpoint folder in the replay-score layout
(docs/replay-format.md)::

    OUT/run.json
    OUT/global_step_<N>/replay/{steps,tokens}.parquet, meta.json

``N`` is the checkpoint's training step (from its ``global_step_N`` folder name, else from
``actor/trainer_state.pt``), 0 for a base model (``smollm2``, ``tiny`` or a local Hugging Face
folder). Collecting several checkpoints of one run into the same ``--out`` gives a run folder that
every diagnostic reads. Views beyond Full and Observation-Ablated (a built-in name or a user's
``module:Class``, see :func:`ocsd.replay.views.load_view`) add ``logp_<name>`` columns.

Settings that shape the rollout (prompt and response lengths, history, step cap, sampling, task types) come
from the checkpoint's ``run.json`` when there is one, then ``--config``, then ``key=value`` overrides, then
the named flags; ``--task-types all`` plays every task type of a run trained on some. Which task types are
played is printed on stderr.

``--out`` has one writer (:class:`ocsd.records.RunLock`) and only ever holds collections of one base model in
one environment: a folder that is in use, holds a training run (or another command's run), holds files that
are not a run, or holds a collection of another base model (a checkpoint's is its run's ``model``) or
environment is refused with exit status 2 before any work.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ocsd.cli import InputError, UsageError, positive_int, same_place

BASE_MODELS = ("smollm2", "tiny")
ROLLOUT_KEYS = ("env", "reward_mode", "history_length", "max_prompt_length", "max_response_length", "max_steps",
                "temperature", "top_p", "invalid_action_penalty", "rho", "beta", "train_split", "val_split",
                "games_dir", "n_train_games", "n_val_games", "data", "task_types")
"""Keys taken from a checkpoint's ``run.json`` config (the rest are local choices: device, batching)."""
ALL_TASK_TYPES = "all"
"""The ``--task-types`` (and ``task_types=``) value of ``training.collect`` and ``training.evaluate`` that plays every
task type, whatever the run trained on."""
COLLECT_SOURCE = "training.collect"
"""The ``source`` of a collection's ``run.json`` and ``meta.json``: the folders a collection may add to."""
NO_DONOR_VIEWS = ("swap",)
"""Built-in views that need a donor observation per step, which a collection does not assign."""


# ----------------------------------------------------------------------------------------------
# what is being evaluated: base model or checkpoint
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSource:
    """A resolved ``--model``/``--ckpt`` argument.

    Attributes
    ----------
    spec : str
        As given on the command line.
    model : str
        What :class:`training.config.TrainConfig` loads: ``smollm2``, ``tiny`` or a local folder.
    global_step : int
        Training step of the checkpoint; 0 for a base model.
    checkpoint : Path or None
        The ``global_step_N`` folder, when the source is a trainer checkpoint.
    run_info : dict
        The run's ``run.json`` (empty when there is none).
    label : str
        A short name: the run name of a checkpoint, else the model name.
    warm_start : str or None
        An exported warm-start adapter merged into ``model`` (:mod:`training.warm_start`).
    """

    spec: str
    model: str
    global_step: int
    checkpoint: Path | None
    run_info: dict
    label: str
    warm_start: str | None = None


def _step_of(ckpt: Path, actor: Path, flag: str) -> int:
    name = ckpt.name
    if name.startswith("global_step_") and name[len("global_step_"):].isdigit():
        return int(name[len("global_step_"):])
    state = actor / "trainer_state.pt"
    if state.is_file():
        import torch

        try:
            return int(torch.load(state, map_location="cpu", weights_only=False)["global_step"])
        except Exception as exc:  # a damaged file: say which one
            raise UsageError(f"{flag}: cannot read the global step from {state} ({exc})") from None
    raise UsageError(f"{flag}: {ckpt} is not named global_step_<N> and {state} does not exist")


def _run_info(run_dir: Path) -> dict:
    """The run's ``run.json``; empty when there is none this suite can read (nothing is inherited then)."""
    from ocsd.records import RecordError, read_run_info

    try:
        return read_run_info(run_dir)
    except RecordError:
        return {}


def last_checkpoint(run_dir: Path, flag: str = "--model") -> Path:
    """The last checkpoint of a run folder with saved weights and complete replay records (``meta.json``);
    later ones without ``meta.json`` (a run stopped while writing them) are skipped with a warning. A run
    whose checkpoints have weights but no replay records at all gives its last one with weights.

    Raises
    ------
    UsageError
        Naming ``flag`` when no checkpoint has saved weights.
    """
    from ocsd.records import META_FILE, checkpoint_dirs, checkpoint_folders

    from training.policy import has_weights

    with_weights = [c for _, c in checkpoint_dirs(run_dir) if has_weights(c / "actor")]
    if not with_weights:
        raise UsageError(f"{flag}: {run_dir} is neither a checkpoint (global_step_<N>/actor/), a run folder with "
                         f"saved weights, nor a Hugging Face model folder (config.json)")
    has_records = set(checkpoint_folders(run_dir, warn=False))
    complete = [c for c in with_weights if c in has_records]
    if not complete:
        return with_weights[-1]
    for later in with_weights[with_weights.index(complete[-1]) + 1:]:
        print(f"warning: {flag}: skipping {later}, an incomplete checkpoint (no replay/{META_FILE}: the run "
              f"stopped while writing it); using {complete[-1].name}", file=sys.stderr)
    return complete[-1]


def resolve_model_source(spec: str, *, flag: str = "--model") -> ModelSource:
    """Resolve a base model name, a checkpoint (``global_step_N`` or its ``actor/``), a run folder (its
    last complete checkpoint with weights, :func:`last_checkpoint`; an SFT run's last checkpoint), an
    exported warm-start adapter (:mod:`training.warm_start`) or a Hugging Face folder.

    Raises
    ------
    UsageError
        Naming ``flag`` when ``spec`` is none of these.
    """
    from ocsd.replay.catalog import find_model

    if spec in BASE_MODELS or find_model(spec) is not None:
        return ModelSource(spec, spec, 0, None, {}, spec)
    path = Path(spec).expanduser()
    if not path.exists():
        raise UsageError(f"{flag}: {spec!r} is not 'tiny', a model of the offline catalogue (python -m "
                         f"ocsd.replay.catalog list) or an existing folder (no such path)")
    if not path.is_dir():
        raise UsageError(f"{flag}: {spec!r} is a file; expected a checkpoint or model folder")
    if (path / "adapter_config.json").is_file():
        from training.warm_start import WarmStartError, resolve_warm_start

        try:
            warm = resolve_warm_start(path)
        except WarmStartError as exc:
            raise UsageError(f"{flag}: {exc}") from None
        if not warm.base_model:
            raise UsageError(f"{flag}: {path} is a LoRA adapter without warm_start.json naming its base model "
                             f"(export it with python -m training.sft --export)")
        return ModelSource(spec, warm.base_model, 0, None, {}, path.name, warm_start=str(path))
    from training.policy import has_weights, merged_actor

    if (path / "actor").is_dir():
        ckpt, actor = path, path / "actor"
    elif path.name == "actor" and has_weights(path):
        ckpt, actor = path.parent, path
    elif (path / "config.json").is_file():
        state = path / "trainer_state.pt"
        step = _step_of(path, path, flag) if state.is_file() else 0
        return ModelSource(spec, str(path), step, None, {}, path.name)
    else:
        ckpt = last_checkpoint(path, flag)
        actor = ckpt / "actor"
    if has_weights(actor) and not (actor / "config.json").is_file():  # adapter only: merged on first use
        actor = merged_actor(actor, (_run_info(ckpt.parent).get("config") or {}))
    if not (actor / "config.json").is_file():
        raise UsageError(f"{flag}: {actor} has no config.json (the checkpoint was saved without weights: "
                         f"save_weights=false)")
    run_info = _run_info(ckpt.parent)
    label = str(run_info.get("run") or ckpt.parent.name)
    return ModelSource(spec, str(actor), _step_of(ckpt, actor, flag), ckpt, run_info, label)


def build_config(source: ModelSource, *, config_path: str | None, overrides: Sequence[str],
                 flags: dict[str, Any]):
    """The run settings: defaults < checkpoint's run.json (rollout keys) < --config < overrides < flags.

    The run's ``task_types`` are played unless the settings name others (``all``: every type, see
    :data:`ALL_TASK_TYPES`) or another environment. The model is never updated, so LoRA and the reference model
    are off and nothing resumes.
    """
    from training.config import make_config, parse_overrides, read_config_file

    values: dict[str, Any] = {}
    old = source.run_info.get("config") if isinstance(source.run_info.get("config"), dict) else {}
    for key in ROLLOUT_KEYS:
        if key in old and old[key] is not None:
            if (key in ("data", "games_dir") and old[key] != "generated"
                    and not Path(str(old[key])).expanduser().is_dir()):
                continue
            values[key] = old[key]
    told: dict[str, Any] = {}
    if config_path is not None:
        told.update(read_config_file(config_path))
    told.update(parse_overrides(overrides))
    told.update({k: v for k, v in flags.items() if v is not None})
    values.update(told)
    if "task_types" not in told and values.get("env", "alfworld") != old.get("env", "alfworld"):
        values.pop("task_types", None)  # the run's task types are another environment's
    if values.get("task_types") == ALL_TASK_TYPES:
        values["task_types"] = None
    values.update(model=source.model, warm_start=source.warm_start, lora_rank=0, kl_coef=0.0, resume=False)
    return make_config(values, source="command line")


def task_types_note(source: ModelSource, cfg) -> str:
    """The one line saying which task types a collection or evaluation plays, and whether they are the run's."""
    from ocsd.environments import get_environment
    from training.envs.runtime import task_type_list

    kinds = task_type_list(cfg.task_types)
    if kinds is None:
        every = ", ".join(get_environment(cfg.env).task_types)
        return f"task types: all ({every})" if every else "task types: all"
    old = source.run_info.get("config") if isinstance(source.run_info.get("config"), dict) else {}
    whose = (f" (the run's task_types; --task-types {ALL_TASK_TYPES} plays every type)"
             if old.get("task_types") == cfg.task_types else "")
    return f"task types: {', '.join(kinds)}{whose}"


# ----------------------------------------------------------------------------------------------
# the policy without an optimizer
# ----------------------------------------------------------------------------------------------


def collection_games(cfg):
    """Training tasks only: unlike a training run, no validation tasks are loaded or generated."""
    from ocsd.environments import get_environment

    return get_environment(cfg.env).load_runtime().task_source(cfg, valid=False)


def resolve_views(names: Sequence[str]) -> list:
    """Record views (Full, Ablated) plus the named extra views, as view objects with unique names."""
    from ocsd.replay.views import load_view

    from ocsd.records import RECORDED_VIEWS

    out, seen = [], set()
    for name in [*RECORDED_VIEWS, *names]:
        if name == "student" or name in seen:
            continue
        if name in NO_DONOR_VIEWS:
            raise UsageError(f"--views: '{name}' needs a donor observation for every step, which a collection "
                             f"does not assign; use python -m rescoring.swap instead")
        try:
            view = load_view(name)
        except ValueError as exc:
            raise UsageError(f"--views: {exc}") from None
        if view.name in seen or view.name == "student":
            raise UsageError(f"--views: {name!r} is named {view.name!r}, which is already taken")
        seen.update({name, view.name})
        out.append(view)
    return out


def collect_replay(policy, *, global_step: int, views: Sequence, selection: str, model: str, method: str,
                   extra: dict) -> tuple[Path, dict]:
    """One collection through :mod:`training.pipeline` (rollouts, GRPO advantages, step NLL, selection at
    the config's rho, replay scoring), written to ``<run_dir>/global_step_<N>/replay``.

    Parameters
    ----------
    policy : training.policy.Policy
    global_step : int
        The checkpoint's training step: the step of the folder, of the rows and of the random generators.
    views : sequence of ReplayView
        Full, Observation-Ablated and any extra views (:func:`resolve_views`).
    selection : {"top", "random", "all"}
    model, method : str
        ``meta.json``'s model (as given) and method (``base`` for a base model).
    extra : dict
        Further ``meta.json`` keys (the phase timings are added after them).

    Returns
    -------
    folder : pathlib.Path
    summary : dict
        Counts of trajectories, steps, selected, scored and skipped steps, success rate and timings.
    """
    import numpy as np

    from ocsd.records import RunWriter, write_replay
    from training.pipeline import collect_batch, record_tables, replay_meta, score_selected

    cfg, timings = policy.cfg, {}
    trajs, stats = collect_batch(policy, global_step, selection=selection, rho=cfg.rho, timings=timings,
                                 desc="collect")
    scores = score_selected(policy, trajs, stats, views, timings, progress=cfg.progress)
    names = ["student", *(v.name for v in views)]
    steps_df, tokens_df = record_tables(trajs, stats, scores, names, global_step=global_step,
                                        tokenizer=policy.tokenizer)
    meta = replay_meta(cfg, global_step=global_step, model=model, method=method, views=names, selection=selection,
                       scores=scores, **extra, **timings)
    folder = write_replay(RunWriter(cfg.run_dir).replay_dir(global_step), steps_df, tokens_df, meta)
    summary = {"folder": str(folder), "global_step": global_step, "trajectories": len(trajs),
               "steps": len(stats.keys), "selected": len(stats.selected_keys), "scored": int(steps_df["scored"].sum()),
               "skipped": len(scores.skipped), "success_rate": float(np.mean([t.won for t in trajs])), **timings}
    return folder, summary


# ----------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    from ocsd.algorithm.signals import SELECTION_MODES
    from ocsd.environments import environment_names

    p = argparse.ArgumentParser(prog="python -m training.collect", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True,
                   help="'smollm2', 'tiny', a checkpoint (global_step_N or its actor/), a run folder (last "
                        "checkpoint) or a local Hugging Face folder")
    p.add_argument("--env", default="alfworld", choices=environment_names(), help="environment (default alfworld)")
    p.add_argument("--tasks", type=positive_int("--tasks"), required=True, help="tasks B")
    p.add_argument("--group", type=positive_int("--group"), required=True, help="rollouts per task G")
    p.add_argument("--out", help="output run folder (default checkpoints/collect/<run or model name>)")
    p.add_argument("--rho", type=float, default=None, help="selection ratio in (0, 1] (default: run's, else 0.2)")
    p.add_argument("--selection", choices=SELECTION_MODES, default="top", help="step selection mode (default top)")
    p.add_argument("--views", default="full,ablated",
                   help="comma-separated views to score: built-in names or module:Class "
                        "(full and ablated are always scored)")
    p.add_argument("--seed", type=int, default=None, help="seed of task sampling, rollouts and selection")
    p.add_argument("--data", help="real ALFWorld data folder (else $ALFWORLD_DATA), or 'generated' for generated games")
    p.add_argument("--task-types", default=None, metavar="TYPES",
                   help=f"comma-separated task types to play, or '{ALL_TASK_TYPES}' (default: the run's task_types)")
    p.add_argument("--config", help="YAML config whose keys apply before the overrides")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="training config overrides")
    return p


def base_model(source: ModelSource) -> str:
    """The base model of what is collected: a checkpoint's run's ``model`` setting (its ``run.json`` or
    ``sft.json``; the run folder when it records none), else the model itself (``smollm2``, ``tiny``, a Hugging
    Face folder, or an exported adapter's base model)."""
    from training.warm_start import recorded_model

    if source.checkpoint is not None:
        return recorded_model(source.checkpoint / "actor") or str(source.checkpoint.parent.resolve())
    return source.model


def recorded_base_model(info: dict) -> str | None:
    """The base model a collection's ``run.json`` was made of (``base_model``; for a folder written before that
    key, its config's ``model``, a checkpoint's ``actor/`` standing for its run's model); None when unknown."""
    from training.warm_start import recorded_model

    if isinstance(info.get("base_model"), str):
        return info["base_model"]
    model = (info.get("config") or {}).get("model") if isinstance(info.get("config"), dict) else None
    if not isinstance(model, str) or not model:
        return None
    actor = Path(model)
    if actor.name == "actor" and actor.parent.name.startswith("global_step_"):
        return recorded_model(actor) or str(actor.parent.parent.resolve())
    return model


def check_out_folder(out: Path, global_step: int | None = None, *, model: str | None = None,
                     env: str | None = None) -> None:
    """Refuse an ``--out`` whose files a collection would replace, or whose collections it would join wrongly.

    A folder that does not exist, is empty or holds a ``training.collect`` run is fine (collections of
    several checkpoints share one folder), unless it already holds a collection of ``global_step``: that one is
    never replaced, or the earlier collection is of another base ``model`` (:func:`base_model`) or ``env``, which
    the diagnostics would then read as checkpoints of one run.

    Raises
    ------
    UsageError
        When ``out`` holds a run written by another command (a training run), an unreadable
        ``run.json``, files that are not a run, or a collection of another base model or environment.
    """
    from ocsd.records import LOCK_FILE, RUN_FILE, RecordError, read_run_info

    if not (out / RUN_FILE).exists():
        others = sorted(p.name for p in out.iterdir() if p.name != LOCK_FILE) if out.is_dir() else []
        if others:
            shown = ", ".join(others[:4]) + (", ..." if len(others) > 4 else "")
            raise UsageError(f"--out: {out} is not empty ({shown}) and holds no run (no {RUN_FILE}); "
                             f"use a new or empty folder")
        return
    try:
        info = read_run_info(out)
    except RecordError as exc:
        raise UsageError(f"--out: {exc}; use another folder") from None
    source = info.get("source")
    if source != COLLECT_SOURCE:
        what = f"a run written by {source}" if source else "a training run"
        raise UsageError(f"--out: {out} holds {what}; collecting into it would replace its {RUN_FILE} and replay "
                         f"files: use another --out (collections share one folder with each other only)")
    old_env = info.get("env", "alfworld")
    if env is not None and old_env != env:
        raise UsageError(f"--out: {out} holds a collection in environment {old_env!r}, not {env!r} ({RUN_FILE}); "
                         f"the diagnostics would read both as one run: use another --out")
    old_model = recorded_base_model(info)
    if model is not None and old_model is not None and not same_place(old_model, model):
        raise UsageError(f"--out: {out} holds a collection of base model {old_model!r}, not {model!r} ({RUN_FILE}); "
                         f"the diagnostics would read both as checkpoints of one run: use another --out")
    taken = out / f"global_step_{global_step}" if global_step is not None else None
    if taken is not None and taken.exists():
        raise UsageError(f"--out: {out} already holds a collection of global step {global_step} ({taken}); a "
                         f"collection never replaces another: use another --out")


def _plan(args):
    """The model source, output folder, views and config of a command line (nothing is written)."""
    from ocsd.cli import folder_problem

    if args.data not in (None, "generated") and not Path(args.data).expanduser().is_dir():
        raise UsageError(f"--data: folder {args.data!r} does not exist")
    source = resolve_model_source(args.model, flag="--model")
    out = Path(args.out) if args.out is not None else Path("checkpoints") / "collect" / source.label
    problem = folder_problem(args.out if args.out is not None else str(out), write=True)
    if problem:
        raise UsageError(f"--out: {problem}")
    views = resolve_views([v.strip() for v in args.views.split(",") if v.strip()])
    cfg = build_config(source, config_path=args.config, overrides=args.overrides, flags=dict(
        env=args.env, batch_size=args.tasks, group_size=args.group, rho=args.rho, seed=args.seed,
        data=args.data, task_types=args.task_types, run_dir=str(out), run_name=f"collect_{source.label}"))
    if cfg.overwrite:
        raise UsageError("overwrite=true: a collection never replaces another run; use another --out")
    return source, out, views, cfg


def _collect(args, source: ModelSource, out: Path, views, cfg, games, base: str) -> int:
    from ocsd.records import RunWriter

    start = time.perf_counter()
    print(task_types_note(source, cfg), file=sys.stderr)
    from training.policy import Policy

    policy = Policy(cfg, games)
    method = str(source.run_info.get("method", "base")) if source.checkpoint else "base"
    extra = {"source": COLLECT_SOURCE, "checkpoint": str(source.checkpoint) if source.checkpoint else None,
             "seed": cfg.seed, "tasks": cfg.batch_size, "group": cfg.group_size}
    first = not (out / "run.json").exists()  # a folder of several collections keeps its first run.json; each
    # checkpoint's meta.json names its own source checkpoint and seed
    try:
        folder, summary = collect_replay(policy, global_step=source.global_step, views=views,
                                         selection=args.selection, model=source.spec, method=method, extra=extra)
    finally:
        policy.close()
    if first:  # written once the step is: a collection that fails (a view that cannot render) leaves no run.json
        RunWriter(out).write_run_json({"run": cfg.run_name, "method": method, "env": cfg.env, "model": source.spec,
                                       "base_model": base, "seed": cfg.seed, "source": COLLECT_SOURCE,
                                       "config": cfg.to_dict(), "games": games.describe()})
    summary["time/total"] = time.perf_counter() - start
    print(f"collected {summary['trajectories']} trajectories, {summary['steps']} steps "
          f"({summary['selected']} selected, {summary['scored']} scored) at global step {source.global_step} "
          f"in {summary['time/total']:.1f} s -> {folder}")
    if summary["skipped"]:
        print(f"warning: {summary['skipped']} selected step(s) could not be rendered under every view; they are "
              f"written as unscored", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from ocsd.records import RunInUseError, RunLock
    from ocsd.replay.models import ModelNotFoundError
    from training.config import ConfigError

    try:
        source, out, views, cfg = _plan(args)
        base = base_model(source)
        if out.exists():  # a folder in use, or one a collection must not write, is refused before any work
            with RunLock(out):
                check_out_folder(out, source.global_step, model=base, env=cfg.env)
        games = collection_games(cfg)  # before the lock makes --out: unusable task data leaves no folder behind
        made = not out.exists()
        try:
            with RunLock(out):  # one writer: refused while another command writes the folder
                check_out_folder(out, source.global_step, model=base, env=cfg.env)
                return _collect(args, source, out, views, cfg, games, base)
        except BaseException:
            if made and out.is_dir() and not any(out.iterdir()):
                out.rmdir()  # a collection that failed leaves no empty folder it made behind
            raise
    except (UsageError, ConfigError, RunInUseError, ModelNotFoundError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
