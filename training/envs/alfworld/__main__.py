"""``python -m training.envs.alfworld {generate,play,list}``: ALFWorld games from the command line.

* ``generate``: solvable ``.tw-pddl`` games from the floor plans shipped with alfworld, in the release layout;
* ``play``: play a game file (the planner's walkthrough, or ``--actions``) and print the labelled transcript;
* ``list``: the solvable games of a data folder.

A bad flag (a negative ``--seed`` included), an ``--out`` that is a file, a game file that is a folder or not
text, a ``list --data`` folder without games: one ``error:`` line and exit status 2, before any work.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ocsd.cli import non_negative_int, output_folder, positive_int
from ocsd.environments.alfworld import ALFWORLD
import training.envs.alfworld as alfworld
from training.envs.alfworld import SHORT_TASK_TYPES, SPLITS, AlfworldDataError, generate_games, play, scan_games


def _task_types(text: str) -> tuple[str, ...]:
    """``--task-types``: comma-separated short task types, each known."""
    types = tuple(t.strip() for t in text.split(","))
    unknown = [t for t in types if t not in SHORT_TASK_TYPES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown task type(s) {unknown}; known: {','.join(SHORT_TASK_TYPES)}")
    return types


def _game_file(text: str) -> str:
    """``GAMEFILE``: not a folder, and text (a missing file is reported when it is read)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a folder; give a .tw-pddl game file")
    if path.is_file():
        try:
            path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError) as exc:
            raise argparse.ArgumentTypeError(f"game file {path} cannot be read as text ({type(exc).__name__})")
    return text


def _cmd_generate(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    specs = generate_games(args.out, args.n, seed=args.seed, split=args.split, task_types=args.task_types,
                           command_style=args.command_style)
    dt = time.perf_counter() - t0
    counts = {t: sum(s.task_type == t for s in specs) for t in SHORT_TASK_TYPES}
    print(f"wrote {len(specs)} games to {args.out}/json_2.1.1/{args.split} in {dt:.1f} s "
          f"({dt / len(specs):.2f} s/game): {counts}")
    return 0


def _cmd_play(args: argparse.Namespace) -> int:
    actions = None
    if args.actions is not None:
        actions = [a.strip() for a in args.actions.split(";") if a.strip()]
    first, results = play(args.gamefile, actions, max_steps=args.max_steps)
    print(first.text)
    print(f"[task_type={first.task_type}]")
    for r in results:
        print(f"> {r.action}")
        print(r.obs)
        print(f"  [operator={r.operator} admissible={r.action_admissible} "
              f"feedback={r.feedback_label} progress={r.progress_label} reward={r.reward:g} "
              f"done={r.done}]")
    print("won" if results and results[-1].won else "not won")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    scan = scan_games(args.data, split=args.split)
    if not args.split and not scan.specs and not scan.unsolvable:
        raise AlfworldDataError(f"--data: the folder {args.data or '$ALFWORLD_DATA'} holds no .tw-pddl game (expected "
                                f"json_2.1.1/<split>/<task>/<trial>/game.tw-pddl, or a flat folder of .tw-pddl "
                                f"files)")
    if args.split and not scan.specs and not scan.unsolvable:
        present = sorted({s.split for s in scan_games(args.data).specs})
        raise AlfworldDataError(f"--split {args.split!r}: the data folder {args.data or '$ALFWORLD_DATA'} has no "
                                f"game of that split; its splits are {present}")
    for s in scan.specs:
        print(f"{s.split}\t{s.task_type}\t{s.task}\t{s.path}")
    print(f"{len(scan.specs)} solvable games, {len(scan.unsolvable)} unsolvable skipped",
          file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.envs.alfworld",
                                     description=alfworld.__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="generate solvable .tw-pddl games")
    g.add_argument("--out", required=True, type=output_folder,
                   help="output folder (games go to OUT/json_2.1.1/SPLIT/...)")
    g.add_argument("--n", type=positive_int("--n"), default=200, help="number of games")
    g.add_argument("--seed", type=non_negative_int("--seed"), default=0, help="generator seed (>= 0)")
    g.add_argument("--split", default="train", choices=tuple(SPLITS), help="split to write")
    g.add_argument("--task-types", type=_task_types, default=None,
                   help="comma-separated subset of " + ",".join(SHORT_TASK_TYPES))
    g.add_argument("--command-style", default="put", choices=("put", "move"),
                   help="'put X in/on Y' as the release's games (default) or alfworld 0.4.2's 'move X to Y'")
    p = sub.add_parser("play", help="play a game file and print the labelled transcript")
    p.add_argument("gamefile", type=_game_file)
    p.add_argument("--actions", default=None, help='"a; b; ..." (default: the planner walkthrough)')
    p.add_argument("--max-steps", type=positive_int("--max-steps"), default=ALFWORLD.max_steps)
    ls = sub.add_parser("list", help="list the solvable games of a data folder")
    ls.add_argument("--data", default=None, help="data folder (default $ALFWORLD_DATA)")
    ls.add_argument("--split", default=None)
    args = parser.parse_args(argv)
    try:
        return {"generate": _cmd_generate, "play": _cmd_play, "list": _cmd_list}[args.cmd](args)
    except AlfworldDataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
