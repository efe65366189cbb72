"""Multi-turn rollout: the policy acts through the interaction prompt in batched environments.

One sample per interaction step: the prompt ids the policy saw, the response ids it generated, the
parsed action, and the environment's answer with its local-feedback labels. Unparseable output is
an invalid action (sent to the environment as it is, which answers "Nothing happens."), never a crash.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from tqdm.auto import tqdm

from ocsd.replay.prompts import PromptRenderer, interaction_text, parse_output


@dataclass
class StepSample:
    """One interaction step of one trajectory."""

    step_idx: int
    obs: str  # o_k, the observation the policy acted on
    admissible: list[str]
    history: list[tuple[str, str]]  # every earlier (o_j, a_j) pair
    history_shown: int  # pairs actually in the prompt (after the window and length fitting)
    prompt_ids: list[int]
    response_ids: list[int]
    response_text: str
    action: str
    well_formed: bool
    obs_next: str = ""
    feedback_label: str = "ambiguous"
    progress_label: str = "no_progress"
    operator: str = "other"

    @property
    def shown_history(self) -> list[tuple[str, str]]:
        """The (o_j, a_j) pairs that were in the prompt: the last ``history_shown`` of ``history``."""
        return self.history[len(self.history) - self.history_shown:] if self.history_shown else []


@dataclass
class Trajectory:
    """One episode of one task."""

    uid: str
    group_uid: str
    task: str
    task_type: str
    game: str
    steps: list[StepSample] = field(default_factory=list)
    won: bool = False
    done: bool = False
    score: float | None = None  # the environment's task score at the end, where it has one (WebShop)

    @property
    def n_malformed(self) -> int:
        """Steps whose output had no well-formed action."""
        return sum(not s.well_formed for s in self.steps)


@dataclass(frozen=True)
class GenerationSettings:
    """Sampling settings of the rollout policy."""

    max_new_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    do_sample: bool = True
    batch: int = 64


def stop_ids(tokenizer) -> list[int]:
    """Token ids that end a response: EOS and the chat end-of-turn token when the vocabulary has one."""
    ids = []
    eos = tokenizer.eos_token_id
    ids += eos if isinstance(eos, list) else [eos] if eos is not None else []
    for special in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>"):
        tid = tokenizer.convert_tokens_to_ids(special)
        if isinstance(tid, int) and tid >= 0 and tid != tokenizer.unk_token_id and tid not in ids:
            ids.append(tid)
    return ids


def _trim(ids: list[int], stops: set[int], pad: int | None) -> list[int]:
    out = []
    for tid in ids:
        out.append(tid)
        if tid in stops:
            break
    while out and pad is not None and out[-1] == pad and pad not in stops:
        out.pop()
    return out or ids[:1]


@torch.inference_mode()
def generate(model, tokenizer, prompts: Sequence[list[int]], settings: GenerationSettings) -> list[list[int]]:
    """Sample one response per prompt (left-padded batches); responses end at the first stop token.

    Randomness comes from torch's global generator: seed it (``torch.manual_seed``) before a rollout
    for reproducible samples.
    """
    device = next(model.parameters()).device
    stops = stop_ids(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    out: list[list[int]] = []
    for start in range(0, len(prompts), settings.batch):
        chunk = prompts[start:start + settings.batch]
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for i, p in enumerate(chunk):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        kwargs = dict(do_sample=settings.do_sample, max_new_tokens=settings.max_new_tokens, eos_token_id=stops,
                      pad_token_id=pad)
        if settings.do_sample:
            kwargs.update(temperature=settings.temperature, top_p=settings.top_p, top_k=0)
        gen = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
        for row in gen[:, width:].tolist():
            out.append(_trim(row, set(stops), pad))
    return out


def fit_history(render: Callable[[int], list[int]], n_history: int, max_len: int) -> tuple[list[int], int]:
    """Render with the most history pairs (at most ``n_history``) whose prompt fits ``max_len`` tokens.

    ``render(h)`` renders the prompt showing the last ``h`` pairs. Returns the ids and ``h``; when
    even ``h = 0`` does not fit, the ``h = 0`` prompt is returned (the caller reports it).
    """
    for shown in range(n_history, -1, -1):
        ids = render(shown)
        if len(ids) <= max_len:
            return ids, shown
    return ids, 0


def _step_text(env_name: str, task: str, history: list[tuple[str, str]], obs: str, admissible: Sequence[str],
               shown: int) -> str:
    """The interaction text of a step showing the last ``shown`` history pairs."""
    return interaction_text(env_name, task=task, step_idx=len(history), history=history, current_obs=obs,
                            admissible_actions=list(admissible), history_length=shown)


def step_prompt(renderer: PromptRenderer, env_name: str, *, task: str, history: list[tuple[str, str]], obs: str,
                admissible: Sequence[str], history_length: int, max_prompt_length: int) -> tuple[list[int], int]:
    """The interaction prompt of one step, as token ids, and the history pairs it shows.

    The prompt shows the last ``history_length`` (o_j, a_j) pairs of ``history`` that fit
    ``max_prompt_length`` tokens (:func:`fit_history`). Rollouts and supervised demonstrations
    (:mod:`training.sft`) both build their contexts here, so a warm start is trained on the prompts
    it acts on.
    """
    def render(h: int) -> list[int]:
        return renderer.render_ids(_step_text(env_name, task, history, obs, admissible, h))

    return fit_history(render, min(history_length, len(history)), max_prompt_length)


def step_prompts(renderer: PromptRenderer, env_name: str, steps: Sequence[tuple[str, list, str, Sequence[str]]], *,
                 history_length: int, max_prompt_length: int) -> list[tuple[list[int], int]]:
    """:func:`step_prompt` of many steps, ``(task, history, obs, admissible)`` each, with one batched
    tokenizer call for the prompts that fit with their whole history window (the others are fitted one by
    one as :func:`step_prompt` fits them). Same ids and history counts as :func:`step_prompt`."""
    shown = [min(history_length, len(history)) for _, history, _, _ in steps]
    texts = [_step_text(env_name, *step, h) for step, h in zip(steps, shown)]
    out = []
    for (task, history, obs, admissible), ids, h in zip(steps, renderer.render_ids_many(texts), shown):
        if len(ids) > max_prompt_length:
            ids, h = step_prompt(renderer, env_name, task=task, history=history, obs=obs, admissible=admissible,
                                 history_length=history_length, max_prompt_length=max_prompt_length)
        out.append((ids, h))
    return out


Responder = Callable[[list[int], list[list[int]]], list[list[int]]]
"""``respond(active, prompts) -> responses``: token ids answering each prompt of the active environments."""

ROLLOUT_TIMINGS = ("time/rollout_generate", "time/rollout_env", "time/rollout_render")
"""Where a rollout's time goes: sampling responses, stepping the environments (reset included), and
rendering prompts and parsing responses."""


@contextmanager
def timed(timings: dict[str, float] | None, name: str):
    """Add the wall time of the block to ``timings[name]`` (nothing when ``timings`` is None)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        if timings is not None:
            timings[name] = timings.get(name, 0.0) + time.perf_counter() - start


def rollout(
    model,
    tokenizer,
    renderer: PromptRenderer,
    env,
    tasks: Sequence[dict],
    *,
    env_name: str,
    history_length: int,
    max_prompt_length: int,
    settings: GenerationSettings,
    progress: bool = True,
    desc: str = "rollout",
    respond: Responder | None = None,
    timings: dict[str, float] | None = None,
) -> list[Trajectory]:
    """Play every environment of ``env`` to the end (win, loss or step cap).

    Parameters
    ----------
    model, tokenizer
        The policy.
    renderer : PromptRenderer
        Chat rendering of the interaction prompt.
    env
        A batched environment (``reset() -> observations``, ``step(actions) -> results``), one entry
        per trajectory.
    tasks : sequence of dict
        Per environment: ``uid``, ``group_uid`` (G rollouts of a task share it).
    env_name : str
        Environment name for the prompt template and output parser.
    history_length, max_prompt_length : int
        History window, and the prompt-length cap enforced by dropping older history pairs.
    settings : GenerationSettings
    respond : callable, optional
        ``respond(active, prompts) -> response ids``: what answers the prompts of the environments
        ``active`` (indices into ``tasks``) instead of sampling from ``model`` (an expert's
        demonstrations, :mod:`training.sft`, or a rollout engine, :mod:`training.engines`); each response
        should end with a stop token.
    timings : dict, optional
        Seconds added to each key of :data:`ROLLOUT_TIMINGS`.
    """
    with timed(timings, "time/rollout_env"):
        observations = env.reset()
    trajs = [Trajectory(uid=t["uid"], group_uid=t["group_uid"], task=o.task, task_type=o.task_type, game=o.game)
             for t, o in zip(tasks, observations)]
    current = [(o.text, list(o.admissible)) for o in observations]
    bar = tqdm(desc=desc, unit="step", disable=not progress, leave=False)
    while True:
        active = [i for i, t in enumerate(trajs) if not t.done]
        if not active:
            break
        with timed(timings, "time/rollout_render"):
            histories = [[(s.obs, s.action) for s in trajs[i].steps] for i in active]
            fitted = step_prompts(renderer, env_name, [(trajs[i].task, history, *current[i])
                                                       for i, history in zip(active, histories)],
                                  history_length=history_length, max_prompt_length=max_prompt_length)
            prompts, shown = [ids for ids, _ in fitted], [h for _, h in fitted]
        with timed(timings, "time/rollout_generate"):
            if respond is None:
                responses = generate(model, tokenizer, prompts, settings)
            else:
                responses = respond(active, prompts)
        actions, samples = [], {}
        with timed(timings, "time/rollout_render"):
            texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
            for j, i in enumerate(active):
                text = texts[j]
                parsed = parse_output(env_name, text)
                action = parsed.action if parsed.action else text.strip()[:200]
                traj, (obs, admissible) = trajs[i], current[i]
                samples[i] = StepSample(
                    step_idx=len(traj.steps), obs=obs, admissible=admissible,
                    history=histories[j], history_shown=shown[j], prompt_ids=prompts[j],
                    response_ids=responses[j], response_text=text, action=action, well_formed=parsed.well_formed)
                actions.append(action)
        full_actions = [""] * len(trajs)
        for j, i in enumerate(active):
            full_actions[i] = actions[j]
        with timed(timings, "time/rollout_env"):
            results = env.step(full_actions)
        for i in active:
            res, sample, traj = results[i], samples[i], trajs[i]
            sample.obs_next = res.obs
            sample.feedback_label = res.feedback_label
            sample.progress_label = res.progress_label
            sample.operator = res.operator
            traj.steps.append(sample)
            traj.won = traj.won or bool(res.won)
            if res.score is not None:
                traj.score = float(res.score)
            traj.done = bool(res.done)
            current[i] = (res.obs, list(res.admissible))
        bar.update(len(active))
    bar.close()
    return trajs
