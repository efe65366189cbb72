"""``python -m training.sft [--config F] [key=value ...]``: a supervised warm start from expert demonstrations.

Agents are warm-started by behaviour cloning before RL. The demonstrations are an expert's winning plays
(ALFWorld: an expert that searches the receptacles for what the task needs, with a templated reason per step,
:mod:`training.envs.alfworld.search`; ``expert=walkthrough``: the planner's plan) played through the same
rollout as the policy's (:func:`training.rollout.loop.rollout` with the expert answering), so every context is
exactly the interaction prompt the policy acts on: same renderer, history window and prompt-length fitting. The
target is the response ``<reason>...</reason><action>...</action>`` and the end-of-turn token; the loss is
the mean negative log-likelihood of the response tokens (prompt tokens carry none). The settings and the run are
:mod:`training.warm_start.sft`; this module is the command.

The run folder (``run_dir``)::

    sft.json                    config, games, demonstration counts, and at the end how it was made
    demonstrations/             train.parquet, valid.parquet (the token ids) and info.json
    metrics.jsonl               one line per optimizer step (loss, lr, grad norm); held-out loss at saves
    global_step_N/actor/        the trainer's actor/ layout (LoRA merged, adapter/, trainer_state.pt)

``training.train warm_start=RUN_DIR``, ``training.collect --model RUN_DIR`` and ``training.evaluate --ckpt
RUN_DIR`` take the run's last checkpoint. ``python -m training.sft --export RUN_DIR --out DIR`` writes its
LoRA adapter (bfloat16) with ``warm_start.json`` (base model, command, data, seed, commit, hardware,
minutes): a warm start small enough to keep in a repository.

Exit status: 0 done, 1 the run stopped, 2 a config error or a ``run_dir`` it must not replace, 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from training.config import ConfigError, describe, load_config
from training.warm_start.demonstrations import DEMO_DIR, build_demonstrations
from training.warm_start.sft import SFT_FILE, SFTConfig, SFTRun

__all__ = ["export", "main", "prepare"]


def export(run_or_ckpt: str, out: str) -> Path:
    """Export the LoRA adapter of an SFT run's last checkpoint (or of a checkpoint) with its provenance.

    Raises
    ------
    training.warm_start.WarmStartError
        When the path is no SFT checkpoint, the checkpoint has no adapter, or ``out`` cannot take the adapter: a
        file, a folder that cannot be written, a folder inside the run (whose own commands would then take
        the run for an exported adapter), or a non-empty folder that is not an earlier export (a training run,
        whose commands would then take the adapter for the run: :func:`training.warm_start.export_problem`).
    """
    from ocsd.cli import folder_problem
    from ocsd.records import read_metrics
    from training.warm_start import WarmStartError, export_adapter, export_problem, resolve_warm_start

    warm = resolve_warm_start(run_or_ckpt)
    if warm.weights is None:
        raise WarmStartError(f"--export: {run_or_ckpt} is an exported adapter already")
    actor = warm.weights
    run = actor.parent.parent
    if not (run / SFT_FILE).is_file():
        raise WarmStartError(f"--export: {run} has no {SFT_FILE}: not a training.sft run")
    problem = folder_problem(out, write=True)
    if problem:
        raise WarmStartError(f"--out: {problem}")
    target = Path(out).expanduser().resolve()
    if target == run.resolve() or run.resolve() in target.parents:
        raise WarmStartError(f"--out: {out} is inside the run folder {run}, which would then read as an exported "
                             f"adapter to its own commands; export to a folder outside the run")
    problem = export_problem(out)
    if problem:
        raise WarmStartError(f"--out: {problem}")
    info = json.loads((run / SFT_FILE).read_text())
    metrics = read_metrics(run)
    step = int(actor.parent.name[len("global_step_"):])
    at_step = [m for m in metrics if m["step"] == step]
    provenance = {"base_model": info["config"]["model"], "global_step": step,
                  "val_loss": at_step[-1].get("val_loss") if at_step else None, **info}
    return export_adapter(actor, Path(out), provenance)


def prepare(cfg: SFTConfig) -> int:
    """Build (or find) the demonstrations of ``cfg`` and print their counts; the ``--prepare`` command."""
    from ocsd.records import RunLock
    from ocsd.replay.prompts import PromptRenderer
    from training.policy import policy_tokenizer

    tokenizer = policy_tokenizer(cfg.model)
    with RunLock(cfg.run_dir):
        tables = build_demonstrations(cfg, tokenizer, PromptRenderer(tokenizer))
    for split, table in tables.items():
        print(f"{split}: {table.game.nunique()} games, {len(table)} steps, "
              f"{int(table.response_ids.map(len).sum())} response tokens, "
              f"{int(table.prompt_ids.map(len).sum())} prompt tokens")
    print(f"demonstrations in {Path(cfg.run_dir) / DEMO_DIR}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.sft", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="YAML config (training/configs/sft_*.yaml)")
    parser.add_argument("--help-config", action="store_true", help="list every config key and exit")
    parser.add_argument("--export", metavar="RUN_OR_CKPT", help="export the run's LoRA adapter with its provenance")
    parser.add_argument("--out", help="folder --export writes to")
    parser.add_argument("--prepare", action="store_true",
                        help="only build the demonstrations in run_dir/demonstrations (no model is loaded; train "
                             "elsewhere, e.g. on a GPU machine without the environment engine, from that folder)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    args = parser.parse_args(argv)
    if args.help_config:
        print(describe(SFTConfig))
        return 0
    if args.out and not args.export:
        print("error: --out is where --export writes an adapter; without --export it has no use (a warm start "
              "is written to its run_dir=...): add --export RUN_OR_CKPT, or leave --out out", file=sys.stderr)
        return 2
    if args.export:
        from training.warm_start import WarmStartError

        if not args.out:
            print("error: --export needs --out DIR", file=sys.stderr)
            return 2
        try:
            print(f"warm start written to {export(args.export, args.out)}")
        except WarmStartError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        cfg = load_config(args.config, args.overrides, cls=SFTConfig)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    from ocsd.cli import folder_problem
    from ocsd.records import RunInUseError
    from ocsd.replay.models import ModelNotFoundError
    from training.trainer import RunFolderError

    problem = folder_problem(cfg.run_dir, write=True)
    if problem:
        print(f"error: run_dir={cfg.run_dir!r}: {problem}; nothing was written", file=sys.stderr)
        return 2
    try:
        if args.prepare:
            return prepare(cfg)
        run = SFTRun(cfg)
        if run.start:
            print(f"resuming {cfg.run_dir} from step {run.start}", file=sys.stderr)
        last = run.fit()
    except (RunInUseError, RunFolderError, ModelNotFoundError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except FloatingPointError as exc:
        print(f"training stopped: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"interrupted; the last checkpoint in {cfg.run_dir} is kept (resume=true continues)", file=sys.stderr)
        return 130
    print(f"warm start written to {last}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
