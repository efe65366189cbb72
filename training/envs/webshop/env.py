"""Batched WebShop episodes over a session: the built-in site (:class:`LocalSession`) or a WebShop server
over HTTP (:class:`training.envs.webshop.http.HttpSession`).

Protocol (paper appendix "Evaluation Protocol"; SDAR agent_system/environments/env_package/webshop/envs.py):

* An episode ends with a purchase (``click[buy now]``) or at the step cap (15, the registry entry's
  ``max_steps``). Its score (:attr:`StepResult.score`) is the purchase reward in [0, 1], 0 when it ends
  without a purchase; it is won when the score is 1 (SDAR .../webshop/envs.py:48).
* An action that is not available (malformed, a click on something that is not a clickable of the page,
  ``click[search]``, a search without a search bar) leaves the page unchanged and is answered
  "Nothing happens: <why>." before the page's text, a no-effect template of the feedback labels; it is
  labelled ``invalid``. An accepted action is ``progress`` when it reaches a page state (WebShop: a URL)
  not seen earlier in the episode, else ``no_progress`` (paper appendix "Local-Feedback Labels").
"""

from __future__ import annotations

from typing import Callable, Hashable, Protocol, Sequence

from ocsd.environments.webshop import WEBSHOP
from training.envs.steps import Observation, StepResult
from training.envs.webshop.catalog import Goal
from training.envs.webshop.real import category_of
from training.envs.webshop.site import (PageState, PageView, Shop, admissible_actions, agent_observation,
                                        parse_action, render, transition, why_unavailable)

__all__ = ["LocalSession", "Session", "WebshopBatchEnv", "WebshopEpisode"]

MALFORMED = "the action must be search[<query>] or click[<clickable>]"


class Session(Protocol):
    """One shopping session: ``start()`` opens the search page, ``go(verb, arg)`` takes an available action.

    Both return ``(instruction or None, view, key, score)``: the page as a :class:`PageView`, a hashable key
    of the page state, and the purchase reward once bought (else None)."""

    def start(self) -> tuple[str, PageView, Hashable, float | None]: ...

    def go(self, verb: str, arg: str) -> tuple[str, PageView, Hashable, float | None]: ...


class LocalSession:
    """A session on the built-in site for one goal."""

    def __init__(self, shop: Shop, goal: Goal) -> None:
        self.shop, self.goal = shop, goal
        self.state = PageState()

    def _show(self):
        reward = self.state.reward.total if self.state.reward is not None else None
        key = (self.state.kind, self.state.keywords, self.state.page, self.state.asin, self.state.options,
               self.state.tab)
        return self.goal.instruction, render(self.shop, self.state, self.goal.instruction), key, reward

    def start(self):
        self.state = PageState()
        return self._show()

    def go(self, verb: str, arg: str):
        self.state = transition(self.shop, self.state, verb, arg, self.goal)
        return self._show()


class WebshopEpisode:
    """One environment: a task's session stepped under the protocol of the module docstring.

    Parameters
    ----------
    session : Session
    task_type, game, split : str
        Reported in the :class:`Observation`.
    max_steps : int
        Step cap.
    """

    def __init__(self, session: Session, *, task_type: str, game: str, split: str, max_steps: int) -> None:
        self.session, self.task_type, self.game, self.split = session, task_type, game, split
        self.max_steps = int(max_steps)
        self.done = True

    def reset(self) -> Observation:
        """Open the search page of a new episode."""
        self.instruction, self.view, key, _ = self.session.start()
        self.seen = {key}
        self.steps, self.done = 0, False
        kind = self.task_type or category_of(self.instruction)  # a server session's category: from its text
        return Observation(task=self.instruction, task_type=kind, text=self.shown(),
                           admissible=admissible_actions(self.view), game=self.game, split=self.split)

    def shown(self) -> str:
        """The current page as the agent sees it."""
        return agent_observation(self.view, self.instruction)

    def step(self, action: str) -> StepResult:
        """Take one action (an inactive result once the episode is done)."""
        labels = WEBSHOP.labels
        if self.done:
            return StepResult.inactive(action, operator=labels.operator_of(action), step=self.steps)
        self.steps += 1
        parsed = parse_action(action)
        why = MALFORMED if parsed is None else why_unavailable(self.view, *parsed)
        score, progressed = None, False
        if why:
            obs = f"Nothing happens: {why}. [SEP] {self.shown()}"
        else:
            _, self.view, key, score = self.session.go(*parsed)
            progressed = key not in self.seen
            self.seen.add(key)
            obs = self.shown()
        bought = score is not None
        truncated = not bought and self.steps >= self.max_steps
        self.done = bought or truncated
        final = (float(score) if bought else 0.0) if self.done else None
        won = bought and final == 1.0  # success only at score 1 (SDAR .../env_package/webshop/envs.py:48)
        accepted = not why
        return StepResult(action=action, obs=obs, reward=1.0 if won else 0.0, done=self.done, won=won,
                          admissible=[] if bought else admissible_actions(self.view),
                          feedback_label=labels.feedback_label(accepted, obs, progressed),
                          progress_label=labels.progress_label(accepted, obs, progressed),
                          operator=labels.operator_of(action), action_admissible=accepted, step=self.steps,
                          truncated=truncated, score=final)


class WebshopBatchEnv:
    """A batch of WebShop episodes stepped together, in this process.

    Parameters
    ----------
    tasks : sequence
        One task per environment (the trainer repeats a task G times for G rollouts).
    make_session : callable
        ``make_session(task) -> (session, task_type, game, split)``.
    max_steps : int
        Step cap per episode.
    seed : int
        Base seed; environment ``i`` records ``seed + i`` in :attr:`seeds` (the site is deterministic).
    """

    num_workers = 0

    def __init__(self, tasks: Sequence, make_session: Callable, *, max_steps: int = WEBSHOP.max_steps,
                 seed: int = 0) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.make_session = make_session
        self._closed = False
        self._load(tasks, max_steps, seed)

    def _load(self, tasks: Sequence, max_steps: int, seed: int) -> None:
        tasks = list(tasks)
        if not tasks:
            raise ValueError("WebshopBatchEnv needs at least one task")
        self.tasks, self.max_steps, self.seed = tasks, int(max_steps), int(seed)
        self.seeds: list[int] = []
        self.episodes = []
        for task in tasks:
            session, task_type, game, split = self.make_session(task)
            self.episodes.append(WebshopEpisode(session, task_type=task_type, game=game, split=split,
                                                max_steps=self.max_steps))

    def __len__(self) -> int:
        return len(self.episodes)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def reload(self, tasks: Sequence, *, max_steps: int | None = None, seed: int | None = None,
               wait: bool = True) -> "WebshopBatchEnv":
        """Replace the tasks (same step cap and seed unless given); returns ``self``."""
        if self._closed:
            raise RuntimeError("WebshopBatchEnv is closed")
        self._load(tasks, self.max_steps if max_steps is None else max_steps, self.seed if seed is None else seed)
        return self

    def reset(self, seed: int | None = None) -> list[Observation]:
        """Start new episodes in every environment."""
        if self._closed:
            raise RuntimeError("WebshopBatchEnv is closed")
        if seed is not None:
            self.seed = int(seed)
        self.seeds = [self.seed + i for i in range(len(self.episodes))]
        return [e.reset() for e in self.episodes]

    def step(self, actions: Sequence[str]) -> list[StepResult]:
        """One action per environment (ignored, with an inactive result, by those that are done)."""
        if self._closed:
            raise RuntimeError("WebshopBatchEnv is closed")
        actions = [str(a) for a in actions]
        if len(actions) != len(self.episodes):
            raise ValueError(f"step() got {len(actions)} actions for {len(self.episodes)} environments")
        return [e.step(a) for e, a in zip(self.episodes, actions)]

    def close(self) -> None:
        """Release the sessions; safe to call twice."""
        self._closed = True
        self.episodes = []

    def __enter__(self) -> "WebshopBatchEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
