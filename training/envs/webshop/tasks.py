"""Where a WebShop run's tasks come from, and how they are played.

* ``data=generated``: a catalogue and goals generated from the seed into ``games_dir/webshop/seed<seed>/``
  (``catalogue.json``, ``train.json``, ``valid.json``) on first use and read back afterwards. Training
  goals target the even-numbered products, validation goals the odd-numbered ones; goal ``i`` depends only
  on the seed, the split and ``i``, so a larger ``n_*_games`` extends the files and a smaller one uses their
  first goals.
* ``data=<folder or file of real goals>``: the 100 real fixed WebShop instructions on a catalogue built
  around their targets (:mod:`training.envs.webshop.real`); an evaluation set (split ``test``), so it
  gives no training tasks.
* ``webshop_url=<server>``: a WebShop server (``web_agent_site``) over HTTP
  (:mod:`training.envs.webshop.http`); tasks are its fixed sessions (``fixed_<i>`` is goal ``i`` of the server's
  list), split as SDAR splits its goal list: validation plays goals 0 ... 499 (the first ``n_val_games``) and
  training samples every goal from 500 on (SDAR agent_system/environments/env_package/webshop/envs.py:141-144;
  ``n_train_games``, the number of generated goals, does not apply). How many goals the server holds is asked
  before the run (:func:`training.envs.webshop.http.count_sessions`, up to :data:`MAX_SERVER_GOALS`), which is
  also its health check. ``webshop_goals`` must say which goals the server holds:
  SDAR trains and validates on WebShop's synthetic goals (``human_goals: False``), while WebShop's own app
  serves the human instructions (:data:`WEBSHOP_GOALS`); the run records it.

With none of them the run stops, naming ``data``: generated tasks are never a silent fallback.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ocsd.cli import InputError
from training.envs.runtime import TaskLists
from training.envs.webshop.catalog import (Goal, generate_catalogue, generate_goal, goal_from_json, read_products,
                                           write_products)
from training.envs.webshop.env import LocalSession, WebshopBatchEnv
from training.envs.webshop.real import RealGoalsError, load_real_goals, real_catalogue
from training.envs.webshop.site import Shop

__all__ = ["TEST_GOALS", "WEBSHOP_GOALS", "WebshopDataError", "WebshopSource", "WebshopTask", "generated_tasks"]

TEST_GOALS = 500
"""SDAR's split of a goal list: validation plays goals 0 ... 499, training samples goals 500 onwards
(``range(500)`` and ``range(500, len(goals))``, SDAR agent_system/environments/env_package/webshop/envs.py:141-144);
on a server, sessions ``fixed_0`` ... ``fixed_499`` and ``fixed_500`` onwards."""

MAX_SERVER_GOALS = 10**6
"""The most goals a server is asked about (WebShop's human instructions number 12,087)."""

WEBSHOP_GOALS = ("synthetic", "human")
"""What ``webshop_goals`` may say a server's goals are. ``synthetic``: goals made from the products' attributes and
options, SDAR's protocol (``human_goals: False``, SDAR verl/trainer/config/ppo_trainer.yaml:316, handed to WebShop
by agent_system/environments/env_manager.py:675; the goals of .../web_agent_site/engine/goal.py:68-120). ``human``:
WebShop's crowd-written instructions, which WebShop's own app serves (.../web_agent_site/app.py:64 calls
``get_goals`` with its default ``human_goals=True``, engine/goal.py:16-18)."""

NO_GOALS = ("webshop_goals={value!r}: say which goals the WebShop server at {url} holds: webshop_goals=synthetic "
            "(SDAR's protocol: a server whose goals are WebShop's synthetic ones, human_goals=False, or the built-in "
            "`python -m training.envs.webshop serve`) or webshop_goals=human (WebShop's own web_agent_site app, "
            "which serves the human instructions)")

NO_DATA = ("data: no WebShop tasks named: set data=generated (a catalogue and goals generated into games_dir), "
           "data=DIR with the real goals file webshop_goals_fixed100.json (evaluation), or webshop_url=URL of a "
           "WebShop server")


class WebshopDataError(InputError):
    """Missing or unusable WebShop task data; the message names the setting, file or URL."""


@dataclass(frozen=True)
class WebshopTask:
    """One task: a goal on the built-in site, or a session of a WebShop server.

    Attributes
    ----------
    game : str
        Task identifier (``generated:train:12``, ``fixed_3``).
    split : str
    task_type : str
        Product category ("" for a server session: read from its instruction at reset).
    goal : Goal or None
        The goal on the built-in site; None for a server session.
    shop : Shop or None
        The built-in site's catalogue (not compared).
    url : str or None
        The server's URL for a server session.
    """


    game: str
    split: str
    task_type: str = ""
    goal: Goal | None = None
    shop: Shop | None = field(default=None, compare=False, repr=False)
    url: str | None = None


def _session(task: WebshopTask):
    """``make_session`` of :class:`WebshopBatchEnv`: the session of a task and its labels."""
    if task.goal is not None:
        return LocalSession(task.shop, task.goal), task.task_type, task.game, task.split
    from training.envs.webshop.http import HttpSession

    return HttpSession(task.url, task.game), task.task_type, task.game, task.split


def _goals_file(folder: Path, split: str, shop_products, seed: int, n: int, pool: np.ndarray) -> list[Goal]:
    path = folder / f"{split}.json"
    have = [goal_from_json(r) for r in json.loads(path.read_text())] if path.is_file() else []
    if len(have) >= n:
        return have[:n]
    order = np.random.default_rng([seed, len(split)]).permutation(pool)
    goals = have + [generate_goal(np.random.default_rng([seed, len(split), i]), shop_products[order[i % len(order)]])
                    for i in range(len(have), n)]
    path.write_text(json.dumps([g.to_json() for g in goals]) + "\n")
    return goals


def generated_tasks(folder: Path, seed: int, n_train: int, n_valid: int, *, train: bool = True,
                    valid: bool = True) -> tuple[Shop, list[Goal], list[Goal]]:
    """The generated catalogue and goals of ``seed`` in ``folder`` (written there on first use)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "catalogue.json"
    if path.is_file():
        products = read_products(path)
    else:
        products = generate_catalogue(seed)
        write_products(path, products)
    idx = np.arange(len(products))
    tr = _goals_file(folder, "train", products, seed, n_train, idx[0::2]) if train else []
    va = _goals_file(folder, "valid", products, seed, n_valid, idx[1::2]) if valid else []
    return Shop(products), tr, va


@dataclass
class WebshopSource(TaskLists):
    """Training and validation tasks of a run (the task-source object of the runtime).

    Attributes
    ----------
    train, valid : list of WebshopTask
    origin : str
        ``generated:<folder>``, ``real:<goals file>`` or ``server:<url>``.
    goals : str
        For a server, which goals it holds (:data:`WEBSHOP_GOALS`); else "".
    """

    train: list[WebshopTask]
    valid: list[WebshopTask]
    origin: str
    goals: str = ""
    data_error = WebshopDataError

    @classmethod
    def from_config(cls, cfg, *, train: bool = True, valid: bool = True, val_split: str | None = None,
                    n_valid: int | None = None) -> "WebshopSource":
        """The tasks ``cfg`` names (module docstring); prints where they come from to stderr.

        Raises
        ------
        WebshopDataError
            Naming ``data``, ``webshop_url`` or ``webshop_goals`` when no tasks are named, they cannot be read, the
            server cannot be reached or holds no goals for training.
        """
        n_val = n_valid or cfg.n_val_games
        if cfg.webshop_url:
            source = cls._from_server(cfg, train=train, valid=valid, n_val=n_val)
        elif cfg.data == "generated":
            folder = Path(cfg.games_dir) / "webshop" / f"seed{cfg.seed}"
            shop, tr, va = generated_tasks(folder, cfg.seed, cfg.n_train_games, n_val, train=train, valid=valid)
            source = cls([WebshopTask(f"generated:train:{i}", "train", g.category, g, shop) for i, g in enumerate(tr)],
                         [WebshopTask(f"generated:valid:{i}", "valid", g.category, g, shop) for i, g in enumerate(va)],
                         f"generated:{folder}")
        elif cfg.data:
            if train:
                raise WebshopDataError(f"data={cfg.data!r}: the real WebShop goals are an evaluation set (split "
                                       f"test); train with data=generated or webshop_url=URL")
            try:
                pairs = load_real_goals(Path(cfg.data))
            except RealGoalsError as exc:
                raise WebshopDataError(str(exc)) from None
            goals = [g for _, g in pairs]
            shop = Shop(real_catalogue(goals, cfg.seed))
            path = Path(cfg.data).expanduser()
            va = [WebshopTask(sid, "test", g.category, g, shop) for sid, g in pairs][:n_val]
            source = cls([], va if valid else [], f"real:{path}")
        else:
            raise WebshopDataError(NO_DATA)
        if cfg.task_types:
            kinds = {k.strip() for k in str(cfg.task_types).split(",")}
            source.train = [t for t in source.train if not t.task_type or t.task_type in kinds]
            source.valid = [t for t in source.valid if not t.task_type or t.task_type in kinds]
        print(source.announce(), file=sys.stderr)
        return source

    @classmethod
    def _from_server(cls, cfg, *, train: bool, valid: bool, n_val: int) -> "WebshopSource":
        """The fixed sessions of the server ``cfg.webshop_url`` in SDAR's split (module docstring)."""
        from training.envs.webshop.http import WebshopServerError, count_sessions

        url = str(cfg.webshop_url).rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise WebshopDataError(f"webshop_url={cfg.webshop_url!r}: must be an http:// or https:// URL")
        goals = getattr(cfg, "webshop_goals", None)
        if goals not in WEBSHOP_GOALS:
            raise WebshopDataError(NO_GOALS.format(value=goals, url=url))
        try:
            count = count_sessions(url, MAX_SERVER_GOALS if train else min(n_val, TEST_GOALS))
        except WebshopServerError as exc:
            raise WebshopDataError(str(exc)) from None
        if train and count <= TEST_GOALS:
            raise WebshopDataError(
                f"webshop_url={url}: the server holds {count} goals, none from fixed_{TEST_GOALS} on, where training "
                f"goals start (SDAR's split: goals 0-{TEST_GOALS - 1} validate); serve more goals, or evaluate "
                f"with python -m training.evaluate --env webshop")
        tr = [WebshopTask(f"fixed_{i}", "train", url=url) for i in range(TEST_GOALS, count)] if train else []
        va = [WebshopTask(f"fixed_{i}", "test", url=url) for i in range(min(n_val, TEST_GOALS, count))] if valid else []
        return cls(tr, va, f"server:{url}", goals)

    @property
    def real(self) -> bool:
        """Whether the tasks are WebShop's own instructions (real goals or a server)."""
        return not self.origin.startswith("generated:")

    def announce(self) -> str:
        """One line saying where the tasks come from and how many there are."""
        kind, where = self.origin.split(":", 1)
        what = {"generated": "generated WebShop catalogue and goals (data=generated) in",
                "real": "real WebShop goals on a catalogue built around their targets, from",
                "server": f"{self.goals} goals of the WebShop server at"}[kind]
        return f"tasks: {what} {where}: {len(self.train)} training, {len(self.valid)} validation"

    def describe(self) -> dict:
        """What run.json records about the tasks (and, for a server, which goals it holds)."""
        return {**super().describe(), **({"webshop_goals": self.goals} if self.goals else {})}

    @staticmethod
    def make_env(tasks: Sequence[WebshopTask], *, max_steps: int, workers: int = 0, seed: int = 0,
                 reuse: WebshopBatchEnv | None = None) -> WebshopBatchEnv:
        """A batched environment with one episode per task (in this process: a page costs microseconds on
        the built-in site; ``workers`` is accepted for the common interface). ``reuse`` is reloaded."""
        if reuse is not None and not reuse.closed:
            return reuse.reload(list(tasks), max_steps=max_steps, seed=seed)
        return WebshopBatchEnv(list(tasks), _session, max_steps=max_steps, seed=seed)
