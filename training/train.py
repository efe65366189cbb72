"""``python -m training.train --config training/configs/<name>.yaml [key=value ...]``

Trains a policy with one of the registered methods and writes a run folder in the replay-score
layout (docs/replay-format.md). ``--help-config`` lists every key with its default and meaning.

Exit status: 0 done, 1 the run stopped (its last checkpoint is kept), 2 a config error or a ``run_dir``
that is in use or holds something the run must not replace (nothing is written then), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys

from training.config import ConfigError, describe, load_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="YAML config (training/configs/*.yaml)")
    parser.add_argument("--help-config", action="store_true", help="list every config key and exit")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    args = parser.parse_args(argv)
    if args.help_config:
        print(describe())
        return 0
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    from ocsd.cli import folder_problem

    problem = folder_problem(cfg.run_dir, write=True)  # before any work: the tasks are loaded (or made) next
    if problem:
        print(f"error: run_dir={cfg.run_dir!r}: {problem}; nothing was written", file=sys.stderr)
        return 2
    from ocsd.cli import InputError
    from ocsd.environments import get_environment
    from ocsd.records import RunInUseError
    from ocsd.replay.models import ModelNotFoundError
    from training.trainer import RunFolderError, Trainer, TrainingError

    try:
        # the tasks first: unusable task data, a dead server or a bad setting is refused before run_dir is made
        games = get_environment(cfg.env).load_runtime().task_source(cfg)
        trainer = Trainer(cfg, games)
    except (RunInUseError, RunFolderError, ModelNotFoundError, InputError) as exc:  # raised before any step runs
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted before the first step", file=sys.stderr)
        return 130
    print(f"model: {cfg.model} on {cfg.device} in {cfg.dtype}", file=sys.stderr)  # dtype=auto's choice shows here
    if trainer.start_step > 1:
        print(f"resuming {cfg.run_dir} from step {trainer.start_step - 1}", file=sys.stderr)
    try:
        run_dir = trainer.fit()
    except (TrainingError, InputError) as exc:  # during the steps (a view that cannot render, ...): checkpoints kept
        print(f"training stopped: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"interrupted; the last complete checkpoint in {cfg.run_dir} is kept (resume=true continues)",
              file=sys.stderr)
        return 130
    print(f"run written to {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
