"""``python -m training.evaluate --ckpt DIR [--tasks N] [--split valid_seen] [--data DIR] [--repeats K] [--json]``

Evaluates a checkpoint or base model with the paper's protocol: one episode per evaluation task, at
most the environment's step cap (ALFWorld: 50), sampled as SDAR validates (temperature 0.4, top-p 1.0:
the config's ``val_do_sample``, ``val_temperature``, ``val_top_p``, ``val_seed``; ``--greedy``,
``--temperature``, ``--top-p``, ``--sample-seed`` change them; greedy decoding takes no temperature or top-p and
records none), success per task type and overall. The task types are the run's ``task_types`` (a checkpoint's
``run.json``) unless ``--task-types`` (or ``task_types=``) names others or ``all``; which ones are played is
printed on stderr. Every task of the split is played (SDAR validates on a seeded sample of 128); ``--repeats K``
plays each task K times with different sampling seeds and reports the mean success with a percentile bootstrap
interval over tasks (:func:`diagnostics.runs.task_bootstrap`), so that two methods can be compared.
Prints a table, or one JSON object with ``--json``; ``--out`` writes ``eval.json`` next to the checkpoint
(``--out-file PATH``: to that ``.json`` file, or into that folder; not both). An existing file is replaced only
when it holds an earlier result of this command (a line on stderr says so); any other file, and any place inside a
checkpoint's ``replay/`` folder, is refused. Flags, the config and where the result goes are checked before the
evaluation starts.

Evaluation games: real games of ``--split`` from ``--data`` or ``$ALFWORLD_DATA`` (the ALFWorld release's
``valid_seen`` has 140 solvable games), or generated validation games in ``games_dir`` with
``--data generated`` (the first ``n_val_games`` of them unless ``--tasks N``; they have no splits, so ``--split``
is refused with them); with none of them the command stops.

The protocol is the environment's registry entry (:mod:`ocsd.environments`: step cap, splits, metric
names) and its runtime (evaluation tasks and metrics, :class:`training.envs.runtime.EnvironmentRuntime`);
ALFWorld is the one with a runtime.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ocsd.cli import InputError, UsageError, folder_problem, positive_int
from ocsd.environments import EnvironmentSpec, RuntimeNotImplemented, environment_names, get_environment
from training.collect import ALL_TASK_TYPES, build_config, resolve_model_source, task_types_note

CI_LEVEL = 0.95
"""Coverage of the bootstrap interval over tasks."""
BOOTSTRAP_SAMPLES = 10_000
"""Resamples of the bootstrap interval."""


@dataclass(frozen=True)
class EvalSampling:
    """How evaluation episodes are decoded (the config's ``val_*`` keys).

    Attributes
    ----------
    do_sample : bool
        Sample (False: greedy decoding; temperature and top-p are then unused).
    temperature, top_p : float
    seed : int
        Repeat ``r`` seeds torch's generator from ``numpy.random.default_rng([seed, r])``.
    """

    do_sample: bool = True
    temperature: float = 0.4
    top_p: float = 1.0
    seed: int = 0

    @classmethod
    def from_config(cls, cfg) -> "EvalSampling":
        """The sampling settings of a :class:`training.config.TrainConfig`."""
        return cls(cfg.val_do_sample, cfg.val_temperature, cfg.val_top_p, cfg.val_seed)

    def generation(self, cfg):
        """:class:`training.rollout.loop.GenerationSettings` for ``cfg``'s response length and batch."""
        from training.rollout.loop import GenerationSettings

        return GenerationSettings(max_new_tokens=cfg.max_response_length, temperature=self.temperature,
                                  top_p=self.top_p, do_sample=self.do_sample, batch=cfg.generation_batch)

    def torch_seed(self, repeat: int) -> int:
        """The torch seed of repeat ``repeat`` (distinct repeats, distinct streams)."""
        return int(np.random.default_rng([self.seed, repeat]).integers(2**31))

    def describe(self) -> dict:
        """The JSON fields of an evaluation result (``greedy`` is ``not do_sample``; greedy decoding uses no
        temperature or top-p, so they are None then)."""
        return {"greedy": not self.do_sample, "do_sample": self.do_sample,
                "temperature": self.temperature if self.do_sample else None,
                "top_p": self.top_p if self.do_sample else None, "sample_seed": self.seed}

    def __str__(self) -> str:
        if not self.do_sample:
            return "greedy"
        return f"sampled at temperature {self.temperature:g}, top-p {self.top_p:g}, seed {self.seed}"


def evaluation_episodes(policy, specs, sampling: EvalSampling, *, repeat: int = 0, step: int = 0,
                        desc: str = "evaluation") -> list:
    """One episode per task of ``specs``, decoded with ``sampling``, in the order of ``specs``.

    Parameters
    ----------
    policy : training.policy.Policy
        Its model, tokenizer, renderer, config and task source (``make_env``).
    specs : sequence of tasks
    sampling : EvalSampling
    repeat : int, default 0
        Which repeat this is (chooses the sampling seed).
    step : int, default 0
        The checkpoint's or training step (names the episodes, seeds the environments).
    desc : str
        Progress-bar label.
    """
    tasks = [{"uid": f"s{step}_t{i}_r{repeat}", "group_uid": f"s{step}_t{i}"} for i in range(len(specs))]
    with policy.gpu_share.step():  # no engine on the GPU starts while these episodes move memory
        return policy.play(specs, tasks, sampling.generation(policy.cfg), env_seed=step,
                           sample_seed=sampling.torch_seed(repeat), desc=desc)


def evaluate(runner, games, *, global_step: int, spec: EnvironmentSpec, runtime, sampling: EvalSampling | None = None,
             repeats: int = 1) -> dict:
    """``repeats`` episodes on every task of ``games.valid``; the runtime's metrics, the bootstrap interval
    over tasks and wall time.

    Parameters
    ----------
    runner : training.policy.Policy
        Plays the episodes (:func:`evaluation_episodes`).
    games : task source
        Its ``valid`` list holds the evaluation tasks.
    global_step : int
        The checkpoint's step (names the episodes).
    spec : EnvironmentSpec
        The environment; its evaluation protocol names the metrics the result must have.
    runtime : training.envs.runtime.EnvironmentRuntime
        The environment's runtime, whose ``metrics`` summarise the episodes (of all repeats).
    sampling : EvalSampling, optional
        Default: the runner's config's.
    repeats : int, default 1
        Episodes per task, repeat ``r`` with its own sampling seed.

    Returns
    -------
    dict
        The runtime's metrics over all ``tasks x repeats`` episodes, plus ``tasks``, ``repeats``,
        ``ci_low``, ``ci_high``, ``ci_level`` (the bootstrap interval of the mean success over tasks),
        ``time_s`` and ``episodes`` (:func:`task_outcomes`).

    Raises
    ------
    ValueError
        If the runtime's metrics lack one of the protocol's metric names.
    """
    from diagnostics.runs import task_bootstrap

    sampling = sampling or EvalSampling.from_config(runner.cfg)
    start = time.perf_counter()
    specs = list(games.valid)
    runs = [evaluation_episodes(runner, specs, sampling, repeat=r, step=global_step,
                                desc="evaluation" if repeats == 1 else f"evaluation {r + 1}/{repeats}")
            for r in range(repeats)]
    out = runtime.metrics([t for run in runs for t in run])
    missing = [m for m in spec.evaluation.metrics if m not in out]
    if missing:
        raise ValueError(f"environment {spec.name!r}: the runtime's metrics lack {missing}")
    won = np.array([[float(bool(t.won)) for t in run] for run in runs]).T  # (tasks, repeats)
    ci = task_bootstrap(won, n_boot=BOOTSTRAP_SAMPLES, level=CI_LEVEL, rng=sampling.seed)
    episodes = task_outcomes(runs)
    for name, (low, high) in type_intervals(episodes, seed=sampling.seed).items():
        if name in out.get("per_type", {}):
            out["per_type"][name].update(ci_low=low, ci_high=high)
    out.update(tasks=len(specs), repeats=repeats, ci_low=ci.low, ci_high=ci.high, ci_level=CI_LEVEL,
               time_s=time.perf_counter() - start, episodes=episodes)
    return out


def type_intervals(episodes: list[dict], *, seed: int = 0) -> dict[str, tuple[float, float]]:
    """The bootstrap interval of the success of each task type, resampling that type's tasks.

    Parameters
    ----------
    episodes : list of dict
        :func:`task_outcomes`: per task its ``task_type`` and the ``won`` flag of each repeat.
    seed : int, default 0
        Seed of the resampling (one generator per type, so a type's interval does not depend on the others).

    Returns
    -------
    dict
        ``{task_type: (low, high)}`` at :data:`CI_LEVEL`, types in sorted order.
    """
    from diagnostics.runs import task_bootstrap

    out = {}
    for name in sorted({e["task_type"] for e in episodes}):
        won = np.array([[float(w) for w in e["won"]] for e in episodes if e["task_type"] == name])
        ci = task_bootstrap(won, n_boot=BOOTSTRAP_SAMPLES, level=CI_LEVEL, rng=seed)
        out[name] = (ci.low, ci.high)
    return out


def task_outcomes(runs: list[list]) -> list[dict]:
    """Per task, in task order: its identifier, its type and whether each repeat's episode was won (the input of
    a paired comparison of two evaluations on the same tasks, :func:`diagnostics.runs.paired_task_difference`)."""
    return [{"task": str(eps[0].game or eps[0].task), "task_type": str(eps[0].task_type),
             "won": [bool(t.won) for t in eps]} for eps in zip(*runs)]


def format_table(result: dict) -> str:
    """Success per task type and overall as an aligned text table, with the sampling and the interval."""
    rows = [(name, row["n"], row["successes"], row["success_rate"], _interval(row))
            for name, row in result["per_type"].items()]
    rows.append(("overall", result["n"], result["successes"], result["success_rate"], _interval(result)))
    width = max(len("task type"), *(len(r[0]) for r in rows))
    sampling = EvalSampling(result["do_sample"], result["temperature"], result["top_p"], result["sample_seed"])
    lines = [f"{result['model']} (global step {result['global_step']}), {result['env']} {result['tasks_from']}, "
             f"{sampling}, at most {result['max_steps']} steps, {result['repeats']} episode(s) per task",
             f"{'task type':<{width}}  {'runs':>5}  {'won':>5}  {'success':>7}  {result['ci_level']:.0%} interval"]
    lines += [f"{name:<{width}}  {n:>5}  {won:>5}  {rate:>7.3f}  {ci}" for name, n, won, rate, ci in rows]
    lines.append(f"{result['ci_level']:.0%} bootstrap interval over {result['tasks']} tasks: "
                 f"[{result['ci_low']:.3f}, {result['ci_high']:.3f}]")
    return "\n".join(lines)


def _interval(row: dict) -> str:
    """``[low, high]`` of a result row, or "" for a row without one (results written before types had one)."""
    return f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]" if "ci_low" in row else ""


RESULT_KEYS = ("success_rate", "tasks_from", "global_step")
"""Keys every result of this command has: an existing ``--out``/``--out-file`` file without them is not one."""


def _out_path(out: bool, out_file: str | None, checkpoint: Path | None) -> Path | None:
    """Where the result goes: ``--out-file`` (a ``.json`` file, else ``eval.json`` in that folder), ``--out``
    (``eval.json`` next to the checkpoint) or None.

    Raises
    ------
    UsageError
        For ``--out`` with ``--out-file``, or ``--out`` of a base model.
    """
    if out and out_file:
        raise UsageError("--out and --out-file: name one place for the result (--out writes eval.json next to the "
                         "checkpoint, --out-file PATH writes to PATH)")
    if out_file:
        path = Path(out_file)
        return path if path.suffix == ".json" and not path.is_dir() else path / "eval.json"
    if not out:
        return None
    if checkpoint is None:
        raise UsageError("--out writes eval.json next to a checkpoint (global_step_N), and this is a base model; "
                         "use --out-file PATH")
    return checkpoint / "eval.json"


def _out_problem(path: Path) -> str | None:
    """Why the result cannot be written to ``path`` (it is a folder, a folder above it is a file, its folder cannot
    be written, it lies inside a checkpoint's ``replay/`` folder, or it is an existing file that is not an earlier
    result of this command), or None."""
    if path.is_dir():
        return f"{path} is a folder, not a file"
    replay = next((p for p in path.resolve().parents
                   if p.name == "replay" and p.parent.name.startswith("global_step_")), None)
    if replay is not None:
        return f"{path} lies inside the checkpoint's replay folder {replay}; write the result elsewhere"
    if path.is_file() and not is_evaluation_result(path):
        return (f"{path} exists and is not an evaluation result of this command (no {', '.join(RESULT_KEYS)}); "
                f"it is not replaced, choose another file")
    return folder_problem(path.parent, write=True)


def is_evaluation_result(path: Path) -> bool:
    """Whether ``path`` is a file holding a JSON object with every key of :data:`RESULT_KEYS` (a result of this
    command, which ``--out``/``--out-file`` may replace)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and all(key in data for key in RESULT_KEYS)


def task_count(tasks: int | None, cfg) -> int | None:
    """How many evaluation tasks to play: ``--tasks``, else ``n_val_games`` for generated tasks, else None (every
    task of the split)."""
    from training.config import GENERATED

    if tasks is not None:
        return tasks
    return cfg.n_val_games if cfg.data == GENERATED else None


def _unused_sampling_flags(args, cfg) -> list[str]:
    """The sampling flags given for a greedy evaluation, which would not be used (greedy decoding does not
    sample)."""
    if cfg.val_do_sample:
        return []
    return [flag for flag, value in (("--temperature", args.temperature), ("--top-p", args.top_p))
            if value is not None]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.evaluate", description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt", required=True,
                   help="checkpoint (global_step_N or its actor/), run folder (last checkpoint), local Hugging "
                        "Face folder, 'smollm2' or 'tiny'")
    p.add_argument("--env", default="alfworld", choices=environment_names(), help="environment (default alfworld)")
    p.add_argument("--tasks", type=positive_int("--tasks"), default=None,
                   help="evaluate the first N tasks (default: every task of the split; generated: n_val_games)")
    p.add_argument("--split", default=None,
                   help="evaluation split of real data (ALFWorld: valid_seen or valid_unseen; not with generated data)")
    p.add_argument("--data", help="real ALFWorld data folder (else $ALFWORLD_DATA), or 'generated' for generated "
                                  "validation games")
    p.add_argument("--repeats", type=positive_int("--repeats"), default=1,
                   help="episodes per task, each repeat with its own sampling seed (default 1: the paper's protocol)")
    p.add_argument("--greedy", action="store_true", help="greedy decoding instead of sampling (val_do_sample=false)")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature (val_temperature; SDAR 0.4)")
    p.add_argument("--top-p", type=float, default=None, help="nucleus sampling (val_top_p; SDAR 1.0)")
    p.add_argument("--sample-seed", type=int, default=None, help="seed of the sampling (val_seed)")
    p.add_argument("--seed", type=int, default=None, help="seed (tiny model weights, generated games)")
    p.add_argument("--task-types", default=None, metavar="TYPES",
                   help=f"comma-separated task types to play, or '{ALL_TASK_TYPES}' (default: the run's task_types)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--out", action="store_true", help="write eval.json next to the checkpoint (global_step_N/)")
    p.add_argument("--out-file", help="write the JSON result to this file (or PATH/eval.json for a folder); an "
                                      "existing file only if it is an earlier result; not with --out")
    p.add_argument("--config", help="YAML config whose keys apply before the overrides")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (e.g. max_response_length=)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from training.config import GENERATED, ConfigError, parse_overrides

    try:
        spec = get_environment(args.env)
        try:
            runtime = spec.load_runtime()
        except RuntimeNotImplemented as exc:
            raise UsageError(f"--env: {exc}") from None
        splits = spec.evaluation.splits
        if args.split is not None and args.split not in splits:
            raise UsageError(f"--split: {args.split!r} is not one of {', '.join(splits)}")
        if args.data not in (None, GENERATED) and not Path(args.data).expanduser().is_dir():
            raise UsageError(f"--data: folder {args.data!r} does not exist (or --data generated)")
        source = resolve_model_source(args.ckpt, flag="--ckpt")
        out = _out_path(args.out, args.out_file, source.checkpoint)
        problem = _out_problem(out) if out is not None else None
        if problem:
            raise UsageError(f"{'--out-file' if args.out_file else '--out'}: {problem}")
        overrides = parse_overrides(args.overrides)
        flags = dict(env=args.env, data=args.data, seed=args.seed, group_size=1,
                     max_steps=None if "max_steps" in overrides else spec.max_steps,
                     val_do_sample=False if args.greedy else None, val_temperature=args.temperature,
                     val_top_p=args.top_p, val_seed=args.sample_seed, task_types=args.task_types)
        if args.tasks is not None:
            flags["n_val_games"] = args.tasks
        cfg = build_config(source, config_path=args.config, overrides=args.overrides, flags=flags)
        if args.split is not None and cfg.data == GENERATED:
            raise UsageError(f"--split {args.split}: generated validation games have no splits (data=generated "
                             f"plays the generated validation games); leave --split out, or name real data with --data")
        unused = _unused_sampling_flags(args, cfg)
        if unused:
            greedy = "--greedy" if args.greedy else "val_do_sample=false"
            raise UsageError(f"{' and '.join(unused)}: unused with {greedy} (greedy decoding does not sample); "
                             f"leave {' and '.join(unused)} out, or sample without {greedy}")
    except (UsageError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    replaces = out is not None and out.is_file()  # an earlier result (any other file was refused above)
    try:
        games, origin = runtime.evaluation_tasks(cfg, args.split, task_count(args.tasks, cfg))
    except runtime.data_error as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not games.valid:
        print(f"error: no evaluation tasks found ({origin})", file=sys.stderr)
        return 2
    print(task_types_note(source, cfg), file=sys.stderr)
    from training.policy import Policy

    runner = Policy(cfg, games)
    sampling = EvalSampling.from_config(cfg)
    try:
        metrics = evaluate(runner, games, global_step=source.global_step, spec=spec, runtime=runtime,
                           sampling=sampling, repeats=args.repeats)
    except InputError as exc:  # met while playing (a server that stopped answering): nothing was written
        print(f"evaluation stopped: {exc}", file=sys.stderr)
        return 1
    finally:
        runner.close()
    result = {"model": source.spec, "checkpoint": str(source.checkpoint) if source.checkpoint else None,
              "global_step": source.global_step, "env": cfg.env, "tasks_from": origin, "split": args.split,
              "max_steps": cfg.max_steps, "max_response_length": cfg.max_response_length, "task_types": cfg.task_types,
              **sampling.describe(), **metrics}
    print(json.dumps(result) if args.json else format_table(result), flush=True)  # shown even if writing fails
    if out is not None:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(result, indent=2) + "\n")
        except OSError as exc:  # the folder changed during the evaluation (checked before it)
            print(f"error: {'--out-file' if args.out_file else '--out'}: cannot write {out} ({exc.strerror or exc}); "
                  f"the result is printed above", file=sys.stderr)
            return 1
        if replaces:
            print(f"replaced the earlier evaluation result in {out}", file=sys.stderr)
        if not args.json:
            print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
