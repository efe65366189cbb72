"""``python -m training.envs.webshop {generate,serve,play}``: the offline WebShop from the command line.

* ``generate``: write the generated catalogue and goals of a seed into ``games_dir`` (as a run with
  ``data=generated`` would on first use) and print where.
* ``serve``: run the built-in WebShop server (WebShop's routes, :mod:`training.envs.webshop.server`) over
  the generated catalogue or the one built around the real goals (``--data DIR``), until interrupted; point
  ``webshop_url`` at it.
* ``play``: play the expert's demonstration of the first ``--tasks`` validation tasks, printing each
  step's action, labels and the final score (a check of the site and reward).
"""

from __future__ import annotations

import argparse
import sys
import types

from ocsd.cli import positive_int
from training.envs.webshop.tasks import WebshopDataError, WebshopSource


def _config(args) -> types.SimpleNamespace:
    return types.SimpleNamespace(webshop_url=None, data=args.data, games_dir=args.games_dir, seed=args.seed,
                                 n_train_games=args.n_train, n_val_games=args.n_val, task_types=None)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.envs.webshop", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("generate", "serve", "play"))
    p.add_argument("--data", default="generated", help="'generated' or a folder/file of real WebShop goals")
    p.add_argument("--games-dir", default="checkpoints/games", help="where generated tasks are kept")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-train", type=positive_int("--n-train"), default=200, help="generated training goals")
    p.add_argument("--n-val", type=positive_int("--n-val"), default=36, help="generated validation goals")
    p.add_argument("--port", type=int, default=3000, help="serve: port on 127.0.0.1")
    p.add_argument("--tasks", type=positive_int("--tasks"), default=3, help="play: tasks to play")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        source = WebshopSource.from_config(_config(args), train=args.data == "generated")
    except WebshopDataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.command == "generate":
        print(source.origin.split(":", 1)[1])
        return 0
    if args.command == "serve":
        from training.envs.webshop.server import serve

        shop = source.valid[0].shop
        print(f"WebShop at http://127.0.0.1:{args.port} (sessions fixed_0 ... fixed_{len(source.valid) - 1})",
              file=sys.stderr)
        serve(shop, [t.goal for t in source.valid], port=args.port)
        return 0
    from ocsd.environments.webshop import WEBSHOP
    from training.envs.runtime import print_expert_play
    from training.envs.webshop.runtime import demonstration

    print_expert_play(source, demonstration, args.tasks, max_steps=WEBSHOP.max_steps,
                      outcome=lambda r: f"score {r.score:.3f}  won {r.won}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
