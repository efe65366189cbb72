"""``python -m training.evaluate --ckpt DIR [--tasks N] [--split valid_seen] [--data DIR] [--json] [--out]``

Evaluates a checkpoint or base model with the paper's protocol: one greedy trajectory per evaluation
task, at most the environment's step cap (ALFWorld: 50), success per task type and overall. Prints a
table, or one JSON object with ``--json``; ``--out`` writes ``eval.json`` next to the checkpoint
(``--out-file PATH``: to that file, or into that folder).

Evaluation games: real games of ``--split`` from ``--data`` or ``$ALFWORLD_DATA`` (the ALFWorld release's
``valid_seen`` has 140 solvable games), else generated validation games in ``games_dir``.

Environments plug in through :data:`EVAL_PROTOCOLS` (step cap, task loader and metrics function by
environment name); ALFWorld is the one implemented.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from training.collect import UsageError, build_config, resolve_model_source

# ----------------------------------------------------------------------------------------------
# per-environment protocol registry
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalProtocol:
    """How one environment is evaluated.

    Attributes
    ----------
    env : str
        Environment name (a key of ``training.config.ENV_NAMES``).
    max_steps : int
        Interaction step cap per episode.
    splits : tuple of str
        Evaluation splits of the real data.
    load_tasks : callable
        ``load_tasks(cfg, split, n) -> (games, origin)``: a games object with ``make_env`` (as
        :class:`training.envs.games.GameSource`) whose ``valid`` list holds the evaluation tasks, and a
        description of where they came from.
    metrics : callable
        ``metrics(trajectories) -> dict`` with at least ``success_rate`` in [0, 1] and ``per_type``
        (``{type: {"n", "successes", "success_rate"}}``).
    """

    env: str
    max_steps: int
    splits: tuple[str, ...]
    load_tasks: Callable
    metrics: Callable[[Sequence], dict]


EVAL_PROTOCOLS: dict[str, EvalProtocol] = {}


def register_protocol(protocol: EvalProtocol) -> EvalProtocol:
    """Add an environment's evaluation protocol; names are unique."""
    if protocol.env in EVAL_PROTOCOLS:
        raise ValueError(f"evaluation protocol {protocol.env!r} is already registered")
    EVAL_PROTOCOLS[protocol.env] = protocol
    return protocol


def success_metrics(trajs: Sequence) -> dict:
    """Success overall and per task type of finished trajectories (``won``, ``task_type``, ``steps``).

    Returns
    -------
    dict
        ``n``, ``successes``, ``success_rate``, ``per_type`` {type: {n, successes, success_rate}},
        ``mean_steps`` and ``invalid_action_rate`` (steps without a well-formed action).
    """
    per_type: dict[str, dict] = {}
    for t in trajs:
        row = per_type.setdefault(t.task_type, {"n": 0, "successes": 0})
        row["n"] += 1
        row["successes"] += int(bool(t.won))
    for row in per_type.values():
        row["success_rate"] = row["successes"] / row["n"]
    n = len(trajs)
    steps = [s for t in trajs for s in t.steps]
    return {"n": n, "successes": sum(int(bool(t.won)) for t in trajs),
            "success_rate": sum(int(bool(t.won)) for t in trajs) / n if n else float("nan"),
            "per_type": dict(sorted(per_type.items())),
            "mean_steps": sum(len(t.steps) for t in trajs) / n if n else float("nan"),
            "invalid_action_rate": sum(not s.well_formed for s in steps) / len(steps) if steps else float("nan")}


def _alfworld_tasks(cfg, split: str | None, n: int | None):
    from training.envs.games import GameSource

    games = GameSource.from_config(cfg, train=False, val_split=split, n_valid=n)
    origin = f"{games.origin}:{split or cfg.val_split}" if cfg.data_root else f"{games.origin}:valid"
    return games, origin


register_protocol(EvalProtocol(env="alfworld", max_steps=50, splits=("valid_seen", "valid_unseen"),
                               load_tasks=_alfworld_tasks, metrics=success_metrics))


# ----------------------------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------------------------


def evaluate(runner, games, *, global_step: int, protocol: EvalProtocol) -> dict:
    """Greedy episodes on every task of ``games.valid``; the protocol's metrics plus wall time."""
    start = time.perf_counter()
    trajs = runner.collect(global_step, list(games.valid), train=False, desc="evaluation")
    out = protocol.metrics(trajs)
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
        return path if path.suffix == ".json" else path / "eval.json"
    if not out:
        return None
    if checkpoint is None:
        raise UsageError("--out writes eval.json next to a checkpoint (global_step_N), and this is a base model; "
                         "use --out-file PATH")
    return checkpoint / "eval.json"


def _parser() -> argparse.ArgumentParser:
    from training.config import ENV_NAMES

    from training.collect import _positive

    p = argparse.ArgumentParser(prog="python -m training.evaluate", description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt", required=True,
                   help="checkpoint (global_step_N or its actor/), run folder (last checkpoint), local Hugging "
                        "Face folder, 'smollm2' or 'tiny'")
    p.add_argument("--env", default="alfworld", choices=ENV_NAMES, help="environment (default alfworld)")
    p.add_argument("--tasks", type=_positive("--tasks"), default=None,
                   help="evaluate the first N tasks (default: all of the split; generated: n_val_games)")
    p.add_argument("--split", default=None, help="real-data split (ALFWorld: valid_seen or valid_unseen)")
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
        protocol = EVAL_PROTOCOLS.get(args.env)
        if protocol is None:
            raise UsageError(f"--env: no evaluation protocol for {args.env!r}; known: {', '.join(EVAL_PROTOCOLS)}")
        if args.split is not None and args.split not in protocol.splits:
            raise UsageError(f"--split: {args.split!r} is not one of {', '.join(protocol.splits)}")
        if args.data is not None and not Path(args.data).expanduser().is_dir():
            raise UsageError(f"--data: folder {args.data!r} does not exist")
        source = resolve_model_source(args.ckpt, flag="--ckpt")
        out = _out_path(args.out, args.out_file, source.checkpoint)
        if out is not None and out.parent.exists() and not out.parent.is_dir():
            raise UsageError(f"--out: {out.parent} is not a folder")
        overrides = parse_overrides(args.overrides)
        flags = dict(env=args.env, data=args.data, seed=args.seed, group_size=1,
                     max_steps=None if "max_steps" in overrides else protocol.max_steps)
        if args.tasks is not None:
            flags["n_val_games"] = args.tasks
        cfg = build_config(source, config_path=args.config, overrides=args.overrides, flags=flags)
    except (UsageError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from training.envs.alfworld import AlfworldDataError

    try:
        games, origin = protocol.load_tasks(cfg, args.split, args.tasks)
    except AlfworldDataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not games.valid:
        print(f"error: no evaluation tasks found ({origin})", file=sys.stderr)
        return 2
    from training.policy import Policy

    runner = Policy(cfg, games)
    metrics = evaluate(runner, games, global_step=source.global_step, protocol=protocol)
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
