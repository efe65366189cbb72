"""``python -m training.envs.webshop {generate,serve,play}``: the offline WebShop from the command line.

* ``generate``: write the generated catalogue and goals of a seed into ``games_dir`` (as a run with
  ``data=generated`` would on first use) and print where.
* ``serve``: run the built-in WebShop server (WebShop's routes, :mod:`training.envs.webshop.server`) until
  interrupted; point ``webshop_url`` at it. Over the generated catalogue its goals are laid out in SDAR's split
  (:data:`training.envs.webshop.tasks.TEST_GOALS`): sessions ``fixed_0`` ... ``fixed_499`` hold 500 generated
  validation goals and ``fixed_500`` onwards the ``--n-train`` generated training goals, all synthetic
  (``webshop_goals=synthetic``). With ``--data DIR`` it serves the catalogue built around the real goals, whose
  instructions are WebShop's human ones (``webshop_goals=human``), as ``fixed_0`` ... ``fixed_99`` (evaluation only).
* ``play``: play the expert's demonstration of the first ``--tasks`` validation tasks, printing each
  step's action, labels and the final score (a check of the site and reward).

Bad input (a port out of range or in use, unusable task data) is one line ``error: ...`` and exit status 2, before
any work.
"""

from __future__ import annotations

import argparse
import sys
import types

from ocsd.cli import entry_point, positive_int


def _config(args, *, n_val: int | None = None) -> types.SimpleNamespace:
    return types.SimpleNamespace(webshop_url=None, webshop_goals=None, data=args.data, games_dir=args.games_dir,
                                 seed=args.seed, n_train_games=args.n_train, n_val_games=n_val or args.n_val,
                                 task_types=None)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.envs.webshop", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("generate", "serve", "play"))
    p.add_argument("--data", default="generated", help="'generated' or a folder/file of real WebShop goals")
    p.add_argument("--games-dir", default="checkpoints/games", help="where generated tasks are kept")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-train", type=positive_int("--n-train"), default=200,
                   help="generated training goals (serve: sessions fixed_500 onwards)")
    p.add_argument("--n-val", type=positive_int("--n-val"), default=36,
                   help="generated validation goals (serve: always 500, sessions fixed_0 ... fixed_499)")
    p.add_argument("--host", default="127.0.0.1", help="serve: address to listen on")
    p.add_argument("--port", type=int, default=3000, help="serve: port (0: any free port)")
    p.add_argument("--tasks", type=positive_int("--tasks"), default=3, help="play: tasks to play")
    return p


def _serve(args) -> int:
    from training.envs.http_server import serve_command
    from training.envs.webshop.server import server_handler
    from training.envs.webshop.tasks import TEST_GOALS, WebshopSource

    def build(address: str):
        generated = args.data == "generated"
        source = WebshopSource.from_config(_config(args, n_val=TEST_GOALS if generated else None), train=generated)
        goals = [t.goal for t in source.valid] + [t.goal for t in source.train]
        if generated:
            layout = (f"sessions fixed_0 ... fixed_{len(source.valid) - 1} hold the validation goals and "
                      f"fixed_{TEST_GOALS} ... fixed_{len(goals) - 1} the training goals (SDAR's split); "
                      f"webshop_goals=synthetic")
        else:
            layout = (f"sessions fixed_0 ... fixed_{len(goals) - 1} hold the real goals (evaluation); "
                      f"webshop_goals=human")
        return server_handler(source.valid[0].shop, goals), f"WebShop at {address}: {layout}"

    serve_command(args.host, args.port, build)
    return 0


def _main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    from training.envs.webshop.tasks import WebshopSource

    source = WebshopSource.from_config(_config(args), train=args.data == "generated")
    if args.command == "generate":
        print(source.origin.split(":", 1)[1])
        return 0
    from ocsd.environments.webshop import WEBSHOP
    from training.envs.runtime import print_expert_play
    from training.envs.webshop.runtime import demonstration

    print_expert_play(source, demonstration, args.tasks, max_steps=WEBSHOP.max_steps,
                      outcome=lambda r: f"score {r.score:.3f}  won {r.won}")
    return 0


main = entry_point(_main, "training.envs.webshop")

if __name__ == "__main__":
    sys.exit(main())
