"""``python -m training.evaluate --ckpt DIR [--tasks N] [--split valid_seen] [--data DIR] [--json] [--out]``

Evaluates a checkpoint or base model with the paper's protocol: one greedy trajectory per evaluation
task, at most the environment's step cap (ALFWorld: 50), success per task type and overall. Prints a
table, or one JSON object with ``--json``; ``--out`` writes ``eval.json`` next to the checkpoint
(``--out-file PATH``: to that ``.json`` file, or into that folder). Flags, the config and where the
result goes are checked before the evaluation starts.

Evaluation games: real games of ``--split`` from ``--data`` or ``$ALFWORLD_DATA`` (the ALFWorld release's
``valid_seen`` has 140 solvable games), else generated validation games in ``games_dir``.

The protocol is the environment's registry entry (:mod:`ocsd.environments`: step cap, splits, metric
names) and its runtime (evaluation tasks and metrics, :class:`training.envs.runtime.EnvironmentRuntime`);
ALFWorld is the one with a runtime.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


from ocsd.cli import UsageError, positive_int
from ocsd.environments import EnvironmentSpec, RuntimeNotImplemented, environment_names, get_environment
from training.collect import build_config, resolve_model_source


def evaluate(runner, games, *, global_step: int, spec: EnvironmentSpec, runtime) -> dict:
    """Greedy episodes on every task of ``games.valid``; the runtime's metrics plus wall time.

    Parameters
    ----------
    runner : training.policy.Policy
        Collects the episodes (``runner.collect``).
    games : task source
        Its ``valid`` list holds the evaluation tasks.
    global_step : int
        The checkpoint's step (names the episodes).
    spec : EnvironmentSpec
        The environment; its evaluation protocol names the metrics the result must have.
    runtime : training.envs.runtime.EnvironmentRuntime
        The environment's runtime, whose ``metrics`` summarise the episodes.

    Raises
    ------
    ValueError
        If the runtime's metrics lack one of the protocol's metric names.
    """
    start = time.perf_counter()
    trajs = runner.collect(global_step, list(games.valid), train=False, desc="evaluation")
    out = runtime.metrics(trajs)
    missing = [m for m in spec.evaluation.metrics if m not in out]
    if missing:
        raise ValueError(f"environment {spec.name!r}: the runtime's metrics lack {missing}")
    out["time_s"] = time.perf_counter() - start
    return out


def format_table(result: dict) -> str:
    """Success per task type and overall as an aligned text table."""
    rows = [(name, row["n"], row["successes"], row["success_rate"]) for name, row in result["per_type"].items()]
    rows.append(("overall", result["n"], result["successes"], result["success_rate"]))
    width = max(len("task type"), *(len(r[0]) for r in rows))
    lines = [f"{result['model']} (global step {result['global_step']}), {result['env']} {result['tasks_from']}, "
             f"greedy, at most {result['max_steps']} steps",
             f"{'task type':<{width}}  {'tasks':>5}  {'won':>5}  {'success':>7}"]
    lines += [f"{name:<{width}}  {n:>5}  {won:>5}  {rate:>7.3f}" for name, n, won, rate in rows]
    return "\n".join(lines)


def _out_path(out: bool, out_file: str | None, checkpoint: Path | None) -> Path | None:
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
    """Why the result cannot be written to ``path`` (it is a folder, or a folder above it is a file), or None."""
    if path.is_dir():
        return f"{path} is a folder, not a file"
    for above in path.parents:
        if above.exists():
            return None if above.is_dir() else f"{above} is a file, not a folder"
    return None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.evaluate", description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt", required=True,
                   help="checkpoint (global_step_N or its actor/), run folder (last checkpoint), local Hugging "
                        "Face folder, 'smollm2' or 'tiny'")
    p.add_argument("--env", default="alfworld", choices=environment_names(), help="environment (default alfworld)")
    p.add_argument("--tasks", type=positive_int("--tasks"), default=None,
                   help="evaluate the first N tasks (default: all of the split; generated: n_val_games)")
    p.add_argument("--split", default=None, help="evaluation split (ALFWorld: valid_seen or valid_unseen)")
    p.add_argument("--data", help="real data folder (else $ALFWORLD_DATA, else generated games)")
    p.add_argument("--seed", type=int, default=None, help="seed (tiny model weights, generated games)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--out", action="store_true", help="write eval.json next to the checkpoint (global_step_N/)")
    p.add_argument("--out-file", help="write the JSON result to this file (or PATH/eval.json for a folder)")
    p.add_argument("--config", help="YAML config whose keys apply before the overrides")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (e.g. max_response_length=)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from training.config import ConfigError, parse_overrides

    try:
        spec = get_environment(args.env)
        try:
            runtime = spec.load_runtime()
        except RuntimeNotImplemented as exc:
            raise UsageError(f"--env: {exc}") from None
        splits = spec.evaluation.splits
        if args.split is not None and args.split not in splits:
            raise UsageError(f"--split: {args.split!r} is not one of {', '.join(splits)}")
        if args.data is not None and not Path(args.data).expanduser().is_dir():
            raise UsageError(f"--data: folder {args.data!r} does not exist")
        source = resolve_model_source(args.ckpt, flag="--ckpt")
        out = _out_path(args.out, args.out_file, source.checkpoint)
        problem = _out_problem(out) if out is not None else None
        if problem:
            raise UsageError(f"{'--out-file' if args.out_file else '--out'}: {problem}")
        overrides = parse_overrides(args.overrides)
        flags = dict(env=args.env, data=args.data, seed=args.seed, group_size=1,
                     max_steps=None if "max_steps" in overrides else spec.max_steps)
        if args.tasks is not None:
            flags["n_val_games"] = args.tasks
        cfg = build_config(source, config_path=args.config, overrides=args.overrides, flags=flags)
    except (UsageError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    try:
        games, origin = runtime.evaluation_tasks(cfg, args.split, args.tasks)
    except runtime.data_error as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not games.valid:
        print(f"error: no evaluation tasks found ({origin})", file=sys.stderr)
        return 2
    from training.policy import Policy

    runner = Policy(cfg, games)
    metrics = evaluate(runner, games, global_step=source.global_step, spec=spec, runtime=runtime)
    result = {"model": source.spec, "checkpoint": str(source.checkpoint) if source.checkpoint else None,
              "global_step": source.global_step, "env": cfg.env, "tasks_from": origin, "split": args.split,
              "max_steps": cfg.max_steps, "max_response_length": cfg.max_response_length, "greedy": True,
              **metrics}
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result) if args.json else format_table(result))
    if out is not None and not args.json:
        print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
