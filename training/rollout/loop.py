"""Multi-turn rollout: the policy acts through the interaction prompt in batched environments.

One sample per interaction step: the prompt ids the policy saw, the response ids it generated, the
parsed action, and the environment's answer with its local-feedback labels. Unparseable output is
an invalid action (sent to the environment as it is, which answers "Nothing happens."), never a crash.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

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
    """Token ids that end a response: EOS, the chat end-of-turn token, and ChatML's start-of-turn token (a model that
    opens a new turn has ended its own), those the vocabulary has. The first is the one a response should end with
    (the EOS token, ``<|im_end|>`` for the offline catalogue's ChatML models). The shipped SmolLM2 warm start was
    trained when SmolLM2's converted tokenizer declared ``<|im_start|>`` as its EOS token, so its responses end with
    ``<|im_start|>``; they still stop there."""
    ids = []
    eos = tokenizer.eos_token_id
    ids += eos if isinstance(eos, list) else [eos] if eos is not None else []
    for special in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|im_start|>"):
        tid = tokenizer.convert_tokens_to_ids(special)
        if isinstance(tid, int) and tid >= 0 and tid != tokenizer.unk_token_id and tid not in ids:
            ids.append(tid)
    return ids


def trim_response(ids: list[int], stops: set[int], pad: int | None) -> list[int]:
    """Response ids cut after the first stop token, trailing pad ids (that are not stop ids) dropped; the first id
    alone when nothing is left (a response is never empty)."""
    out = []
    for tid in ids:
        out.append(tid)
        if tid in stops:
            break
    while out and pad is not None and out[-1] == pad and pad not in stops:
        out.pop()
    return out or ids[:1]


def sampled_logprobs(logits: Sequence[torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """Float32 log-probs ``(B, T)`` of the sampled ``tokens`` ``(B, T)`` under the raw ``logits`` of each
    decoding step (``T`` tensors ``(B, V)``, before temperature and top-p: the policy's own distribution, which
    the update's log-probs are)."""
    cols = [torch.log_softmax(step.float(), dim=-1).gather(-1, tokens[:, t:t + 1].to(step.device))
            for t, step in enumerate(logits)]
    return torch.cat(cols, dim=1).cpu() if cols else torch.zeros(tokens.shape, dtype=torch.float32)


@torch.inference_mode()
def generate(model, tokenizer, prompts: Sequence[list[int]], settings: GenerationSettings, *,
             logprobs: list[torch.Tensor] | None = None) -> list[list[int]]:
    """Sample one response per prompt (left-padded batches); responses end at the first stop token.

    Randomness comes from torch's global generator: seed it (``torch.manual_seed``) before a rollout
    for reproducible samples. Given a list ``logprobs``, the float32 log-prob of each response token under the
    model's raw logits (:func:`sampled_logprobs`) is appended to it, a tensor per response in prompt order; the
    logits of a batch are held until it ends (``settings.batch`` x ``max_new_tokens`` x vocabulary floats).
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
        if logprobs is not None:
            kwargs.update(output_logits=True, return_dict_in_generate=True)
        gen = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
        new = (gen.sequences if logprobs is not None else gen)[:, width:]
        scores = sampled_logprobs(gen.logits, new) if logprobs is not None else None
        for r, row in enumerate(new.tolist()):
            out.append(trim_response(row, set(stops), pad))
            if scores is not None:
                logprobs.append(scores[r, :len(out[-1])].clone())
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


class ResponseStream(Protocol):
    """Responses generated while the caller does other work (the pipelined rollout).

    ``submit(key, prompt)`` hands over one prompt; ``poll()`` advances generation a little and returns
    the ``(key, response ids)`` that finished; ``pending()`` counts the prompts not returned yet;
    ``close()`` drops those (a rollout that stops early leaves nothing behind).
    """

    def submit(self, key: int, prompt: list[int]) -> None: ...

    def pending(self) -> int: ...

    def poll(self) -> list[tuple[int, list[int]]]: ...

    def close(self) -> None: ...


class BatchStream:
    """A :data:`Responder` as a :class:`ResponseStream`: each ``poll`` answers every prompt submitted since
    the last one in one ``respond(keys, prompts)`` call."""

    def __init__(self, respond: "Responder") -> None:
        self.respond = respond
        self._queue: list[tuple[int, list[int]]] = []

    def submit(self, key: int, prompt: list[int]) -> None:
        self._queue.append((key, prompt))

    def pending(self) -> int:
        return len(self._queue)

    def poll(self) -> list[tuple[int, list[int]]]:
        queue, self._queue = self._queue, []
        if not queue:
            return []
        keys = [k for k, _ in queue]
        return list(zip(keys, self.respond(keys, [p for _, p in queue])))

    def close(self) -> None:
        self._queue = []


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


def _sample(env_name: str, traj: Trajectory, state: tuple[str, list[str]], history: list[tuple[str, str]],
            shown: int, prompt: list[int], response: list[int], text: str) -> StepSample:
    """The step ``traj`` takes by answering ``prompt`` with ``response`` (decoded as ``text``)."""
    parsed = parse_output(env_name, text)
    action = parsed.action if parsed.action else text.strip()[:200]
    obs, admissible = state
    return StepSample(step_idx=len(traj.steps), obs=obs, admissible=admissible, history=history,
                      history_shown=shown, prompt_ids=prompt, response_ids=response, response_text=text,
                      action=action, well_formed=parsed.well_formed)


def _record(traj: Trajectory, sample: StepSample, res) -> tuple[str, list[str]]:
    """Add ``sample`` with the environment's answer ``res`` to ``traj``; returns the next (o, admissible)."""
    sample.obs_next = res.obs
    sample.feedback_label = res.feedback_label
    sample.progress_label = res.progress_label
    sample.operator = res.operator
    traj.steps.append(sample)
    traj.won = traj.won or bool(res.won)
    if res.score is not None:
        traj.score = float(res.score)
    traj.done = bool(res.done)
    return res.obs, list(res.admissible)


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
    stream: ResponseStream | None = None,
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
        demonstrations, :mod:`training.sft`, or a rollout engine, :mod:`training.rollout.engines`); each response
        should end with a stop token.
    stream : ResponseStream, optional
        Play the episodes pipelined instead of turn by turn, where ``env`` can step environments one
        at a time (``submit``/``collect``, :class:`training.envs.alfworld.batch.AlfworldBatchEnv`): each
        finished response goes to its environment at once, and each environment's next prompt goes to
        ``stream`` as soon as its answer is back, so generation, environments and rendering overlap.
        Keyed by environment index; ``respond`` is then not used. Each episode gets the steps it
        would get turn by turn from a responder that answers each prompt alone.
    timings : dict, optional
        Seconds added to each key of :data:`ROLLOUT_TIMINGS`. Pipelined, ``time/rollout_env`` counts
        only the waits for environments while nothing is being generated.
    """
    with timed(timings, "time/rollout_env"):
        observations = env.reset()
    trajs = [Trajectory(uid=t["uid"], group_uid=t["group_uid"], task=o.task, task_type=o.task_type, game=o.game)
             for t, o in zip(tasks, observations)]
    current = [(o.text, list(o.admissible)) for o in observations]
    bar = tqdm(desc=desc, unit="step", disable=not progress, leave=False)
    try:
        if stream is not None and hasattr(env, "submit"):
            _play_pipelined(tokenizer, renderer, env, trajs, current, stream, env_name=env_name,
                            history_length=history_length, max_prompt_length=max_prompt_length, bar=bar,
                            timings=timings)
        else:
            _play_turns(model, tokenizer, renderer, env, trajs, current, env_name=env_name,
                        history_length=history_length, max_prompt_length=max_prompt_length, settings=settings,
                        respond=respond, bar=bar, timings=timings)
    finally:
        bar.close()
        if stream is not None:
            stream.close()
    return trajs


def _prompts(renderer, env_name, trajs, current, indices, *, history_length, max_prompt_length):
    """Histories, prompt ids and shown-history counts of the environments ``indices``."""
    histories = [[(s.obs, s.action) for s in trajs[i].steps] for i in indices]
    fitted = step_prompts(renderer, env_name, [(trajs[i].task, history, *current[i])
                                               for i, history in zip(indices, histories)],
                          history_length=history_length, max_prompt_length=max_prompt_length)
    return histories, [ids for ids, _ in fitted], [h for _, h in fitted]


def _play_turns(model, tokenizer, renderer, env, trajs, current, *, env_name, history_length, max_prompt_length,
                settings, respond, bar, timings) -> None:
    """Every active environment acts once a turn: render all, generate all, step all."""
    while True:
        active = [i for i, t in enumerate(trajs) if not t.done]
        if not active:
            break
        with timed(timings, "time/rollout_render"):
            histories, prompts, shown = _prompts(renderer, env_name, trajs, current, active,
                                                 history_length=history_length, max_prompt_length=max_prompt_length)
        with timed(timings, "time/rollout_generate"):
            if respond is None:
                responses = generate(model, tokenizer, prompts, settings)
            else:
                responses = respond(active, prompts)
        with timed(timings, "time/rollout_render"):
            texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
            samples = {i: _sample(env_name, trajs[i], current[i], histories[j], shown[j], prompts[j], responses[j],
                                  texts[j]) for j, i in enumerate(active)}
        full_actions = [""] * len(trajs)
        for i in active:
            full_actions[i] = samples[i].action
        with timed(timings, "time/rollout_env"):
            results = env.step(full_actions)
        for i in active:
            current[i] = _record(trajs[i], samples[i], results[i])
        bar.update(len(active))


def _play_pipelined(tokenizer, renderer, env, trajs, current, stream: ResponseStream, *, env_name, history_length,
                    max_prompt_length, bar, timings) -> None:
    """Each environment on its own: its prompt goes to ``stream``, its response to ``env`` at once."""
    ready = [i for i, t in enumerate(trajs) if not t.done]  # environments waiting for a prompt
    asked: dict[int, tuple] = {}  # environment -> (history, shown, prompt) of its prompt in the stream
    acting: dict[int, StepSample] = {}  # environment -> the step whose action it is playing
    while ready or asked or acting:
        if ready:
            with timed(timings, "time/rollout_render"):
                histories, prompts, shown = _prompts(renderer, env_name, trajs, current, ready,
                                                     history_length=history_length,
                                                     max_prompt_length=max_prompt_length)
            for i, history, prompt, h in zip(ready, histories, prompts, shown):
                asked[i] = (history, h, prompt)
                stream.submit(i, prompt)
            ready = []
        if stream.pending():
            with timed(timings, "time/rollout_generate"):
                finished = stream.poll()
            if finished:
                with timed(timings, "time/rollout_render"):
                    texts = tokenizer.batch_decode([r for _, r in finished], skip_special_tokens=True)
                    for (i, response), text in zip(finished, texts):
                        history, h, prompt = asked.pop(i)
                        acting[i] = _sample(env_name, trajs[i], current[i], history, h, prompt, list(response),
                                            text)
                with timed(timings, "time/rollout_env"):
                    for i, _ in finished:
                        env.submit(i, acting[i].action)
        if acting:
            with timed(timings, "time/rollout_env"):
                results = env.collect(block=not stream.pending() and not ready)
            for i, res in results:
                current[i] = _record(trajs[i], acting.pop(i), res)
                if not trajs[i].done:
                    ready.append(i)
            bar.update(len(results))
