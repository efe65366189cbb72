"""Batched Search-QA episodes over retrieval servers.

Protocol (paper appendix "Evaluation Protocol" and "Local-Feedback Labels"; SDAR agent_system/environments/
env_package/search/):

* ``reset`` shows the question; the first observation is the question itself (SDAR .../search/envs.py:82),
  and there are no admissible actions (the template shows none).
* An action is ``<search>q</search>`` or ``<answer>x</answer>`` (the registry's parser keeps the tag; the
  bracket forms ``search[q]`` / ``answer[x]`` are read the same way). A search is sent to the episode's
  retrieval server and answered with its passages in ``<information>`` tags
  (:func:`training.envs.searchqa.client.format_information`). An answer ends the episode; its exact match
  with the gold answers is the episode's score and success (SDAR .../skyrl_gym/envs/search/env.py:49-61,
  envs.py:96: won when the final reward is 1; the trainer's reward is 10 * won).
* Anything else is malformed: it does not count as a search or an answer, the observation is empty (SDAR
  .../search/projection.py:72-74 gives no action, and its search returns nothing, env.py:71-76), and the
  step is ``invalid``. A search that finds nothing is ``invalid`` too (the "No search results found."
  template); a search that returns a passage not shown earlier in the episode is ``progress``, else
  ``no_progress``; a correct answer is ``progress``, a wrong one ``no_progress``.
* At most ``max_steps`` steps (4, the registry entry's; SDAR env.max_steps=4 in examples/grpo_trainer/
  run_search.sh): an episode that reaches the cap without an answer is lost with score 0.

Environment ``i`` of a batch searches server ``i mod n`` of the ``n`` retrieval URLs (SDAR .../search/
envs.py:54-67); the searches of one step run concurrently.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from ocsd.environments.searchqa import SEARCHQA, action_rule
from ocsd.environments.spec import normalise_action
from training.envs.searchqa.client import Hit, RetrievalClient, format_information
from training.envs.searchqa.data import SearchTask, exact_match
from training.envs.steps import Observation, StepResult

__all__ = ["SearchBatchEnv", "SearchEpisode", "parse_action"]

SEARCH_THREADS = 16
"""Searches of one step sent at once."""


def parse_action(action: str) -> tuple[str, str] | None:
    """``("search" | "answer", argument)`` of an action, None when it is malformed."""
    action = normalise_action(action)
    parsed = action_rule(action)
    if parsed is None:
        return None
    if action.startswith("<"):
        arg = action[action.index(">") + 1: action.rindex("</")]
    else:
        arg = action[action.index("[") + 1: -1]
    arg = arg.strip()
    return (parsed[0], arg) if arg else None


class SearchEpisode:
    """One environment: a question answered with searches of one retrieval server.

    Parameters
    ----------
    task : SearchTask
    client : RetrievalClient
    max_steps : int
    """

    def __init__(self, task: SearchTask, client: RetrievalClient, *, max_steps: int) -> None:
        self.task, self.client, self.max_steps = task, client, int(max_steps)
        self.done, self.steps = True, 0
        self.seen: set[str] = set()

    def reset(self) -> Observation:
        """Start the episode: the observation is the question."""
        self.done, self.steps, self.seen = False, 0, set()
        return Observation(task=self.task.question, task_type=self.task.task_type, text=self.task.question,
                           admissible=[], game=self.task.game, split=self.task.split)

    def query(self, action: str) -> str | None:
        """The search this action sends, None when it sends none (done, malformed or an answer)."""
        parsed = None if self.done else parse_action(action)
        return parsed[1] if parsed is not None and parsed[0] == "search" else None

    def step(self, action: str, hits: Sequence[Hit] | None = None) -> StepResult:
        """Take one action; ``hits`` are the passages of its search (:meth:`query`), found by the caller."""
        labels = SEARCHQA.labels
        if self.done:
            return StepResult.inactive(action, operator=labels.operator_of(action), step=self.steps)
        self.steps += 1
        parsed = parse_action(action)
        won, answered, progressed = False, False, False
        if parsed is None:
            obs = ""
        elif parsed[0] == "answer":
            answered = True
            won = exact_match(parsed[1], self.task.answers)
            progressed, obs = won, ""
        else:
            hits = list(hits or ())
            keys = [h.id or h.contents for h in hits]
            progressed = any(k not in self.seen for k in keys)
            self.seen.update(keys)
            obs = format_information(hits)
        truncated = not answered and self.steps >= self.max_steps
        self.done = answered or truncated
        accepted = parsed is not None
        return StepResult(action=action, obs=obs, reward=1.0 if won else 0.0, done=self.done, won=won,
                          admissible=[], feedback_label=labels.feedback_label(accepted, obs, progressed),
                          progress_label=labels.progress_label(accepted, obs, progressed),
                          operator=labels.operator_of(action), action_admissible=accepted, step=self.steps,
                          truncated=truncated, score=(1.0 if won else 0.0) if self.done else None)


class SearchBatchEnv:
    """A batch of Search-QA episodes stepped together.

    Parameters
    ----------
    tasks : sequence of SearchTask
        One per environment (the trainer repeats a task G times for G rollouts).
    urls : sequence of str
        Retrieval servers' ``/retrieve`` URLs; environment ``i`` uses ``urls[i % len(urls)]``.
    topk, timeout : int, float
        ``retrieval_topk`` and ``retrieval_timeout``.
    max_steps : int
    seed : int
        Environment ``i`` records ``seed + i`` in :attr:`seeds` (retrieval is deterministic).
    """

    num_workers = 0

    def __init__(self, tasks: Sequence[SearchTask], urls: Sequence[str], *, topk: int = 3, timeout: float = 30.0,
                 max_steps: int = SEARCHQA.max_steps, seed: int = 0) -> None:
        if not urls:
            raise ValueError("SearchBatchEnv needs at least one retrieval URL")
        self.clients = [RetrievalClient(u, topk=topk, timeout=timeout) for u in urls]
        self._pool = ThreadPoolExecutor(max_workers=SEARCH_THREADS, thread_name_prefix="searchqa-client")
        self._closed = False
        self._load(tasks, max_steps, seed)

    def _load(self, tasks: Sequence[SearchTask], max_steps: int, seed: int) -> None:
        tasks = list(tasks)
        if not tasks:
            raise ValueError("SearchBatchEnv needs at least one task")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.tasks, self.max_steps, self.seed = tasks, int(max_steps), int(seed)
        self.seeds: list[int] = []
        self.episodes = [SearchEpisode(t, self.clients[i % len(self.clients)], max_steps=self.max_steps)
                         for i, t in enumerate(tasks)]

    def __len__(self) -> int:
        return len(self.episodes)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _check(self) -> None:
        if self._closed:
            raise RuntimeError("SearchBatchEnv is closed")

    def reload(self, tasks: Sequence[SearchTask], *, max_steps: int | None = None, seed: int | None = None,
               wait: bool = True) -> "SearchBatchEnv":
        """Replace the tasks (same step cap and seed unless given); returns ``self``."""
        self._check()
        self._load(tasks, self.max_steps if max_steps is None else max_steps, self.seed if seed is None else seed)
        return self

    def reset(self, seed: int | None = None) -> list[Observation]:
        """Start new episodes in every environment."""
        self._check()
        if seed is not None:
            self.seed = int(seed)
        self.seeds = [self.seed + i for i in range(len(self.episodes))]
        return [e.reset() for e in self.episodes]

    def step(self, actions: Sequence[str]) -> list[StepResult]:
        """One action per environment (ignored, with an inactive result, by those that are done).

        Raises
        ------
        training.envs.searchqa.client.RetrievalError
            When a retrieval server fails (naming its URL).
        """
        self._check()
        actions = [str(a) for a in actions]
        if len(actions) != len(self.episodes):
            raise ValueError(f"step() got {len(actions)} actions for {len(self.episodes)} environments")
        queries = [e.query(a) for e, a in zip(self.episodes, actions)]
        futures = {i: self._pool.submit(self.episodes[i].client.search, q)
                   for i, q in enumerate(queries) if q is not None}
        hits = {i: f.result() for i, f in futures.items()}
        return [e.step(a, hits.get(i)) for i, (e, a) in enumerate(zip(self.episodes, actions))]

    def close(self) -> None:
        """Release the episodes and the client threads; safe to call twice (servers are not stopped)."""
        if not self._closed:
            self._closed = True
            self._pool.shutdown(wait=True)
            self.episodes = []

    def __enter__(self) -> "SearchBatchEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
