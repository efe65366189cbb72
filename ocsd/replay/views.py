"""Replay views: the contexts under which a student's step output is re-scored.

A view turns a :class:`StepRecord` (one interaction step with its future) into prompt token ids that
end exactly where the student's response ids begin. The scorer appends the response ids unchanged
(never re-tokenised from text) and reads their log-probabilities under every view.

Built-in views (registry :data:`VIEWS`, names usable on command lines)
----------------------------------------------------------------------
``student``        the interaction prompt itself (the rollout context).
``full``           E^F: interaction prompt (replay wording) + o_{k+1}, g(a_{k+1}), o_{k+2}.
``ablated``        E^A: as ``full`` with every observation field replaced by
                   ``Observation: not provided``.
``swap``           as ``full`` with o_{k+1} replaced by ``StepRecord.donor_obs``.
``one_obs``        one-observation horizon: only o_{k+1} (Full form).
``one_obs_ablated`` its Observation-Ablated twin.
``scaffold_only``  the ablated scaffold without the future-action schema: headings and
                   ``Observation: not provided`` fields only (pairs with ``ablated`` to measure
                   what the schema alone does).
``masked``         an Observation-Ablated twin of ``full`` that keeps each observation's length:
                   every word of an observation becomes ``_`` (audit it as ``--view full --twin
                   masked``: a residual whose two views show equally long evidence).

Evidence layout (paper tables "Prompt of Full/Observation-Ablated Replay-Evidence Scoring")
------------------------------------------------------------------------------------------
The replay prompt is the interaction text in its replay wording (:func:`ocsd.replay.prompts.interaction_text`
with ``replay=True``), a blank line, then::

    Future evidence:
    After current action:
    Observation: {o_{k+1}}

    Next action:{g(a_{k+1})}

    After next action:
    Observation: {o_{k+2}}

The paper's table has no space after ``Next action:``; it is reproduced as printed. WebShop and
Search-QA use the same evidence text with their own observations and schemas (:mod:`ocsd.replay.schemas`).
At a trajectory boundary (no a_{k+1}, or no o_{k+2} after it) the evidence stops after the first
observation field, in both views, with no future-action scaffold. A step without o_{k+1} has no
evidence: evidence views raise :class:`MissingEvidence` (environments should record the terminal
observation so that the last step can be scored).

Structural matching
-------------------
Every built-in view is a list of text segments (:class:`ocsd.replay.prompts.Segment`) whose ids concatenate
to the prompt ids. Full and Ablated share every segment except the ``observation`` segments (each
holds a whole ``Observation: ...`` field and the blank line after it). Segment boundaries always fall
after a newline and before a letter, or next to a chat special token, where byte-level BPE
pre-tokenisers (GPT-2, Llama-3, Qwen2) split anyway. In the renderer's default ``joint`` mode the
whole prompt is tokenised at once (the ids a model would naturally see) and tokens are assigned to
segments by character offsets; a token crossing a boundary raises
:class:`ocsd.replay.prompts.SegmentationError`, so shared segments carry identical ids in both views and the
two id sequences differ only inside observation spans. In ``separate`` mode each segment is
tokenised on its own, which guarantees the same for any tokenizer. Both are property-tested on
random trajectories with the SmolLM2 and Qwen3 tokenizers.

Rendering many steps, and shortening the history to a prompt-length limit, is :mod:`ocsd.replay.render`.

Writing a new view
------------------
Any object with a ``name`` and ``render(step, renderer) -> list[int]`` is a view. To reuse the
structure, subclass :class:`TemplateView` and return ``(kind, text)`` pieces from ``evidence``; see
docs/views-and-audit.md, "Writing your own view". Reference it as ``module:Class`` (or ``path/to/file.py:Class``)
with :func:`load_view`. A view that cannot render one step raises :class:`ViewError` (the step is skipped and
reported); any other exception from it, or a result that is not token ids, stops the command with a
:class:`ViewRenderError` naming the view and the step. A view that shows observations names its
Observation-Ablated twin (a built-in name or ``module:Class``) in an ``ablated_twin`` attribute;
``python -m rescoring.audit`` pairs the two (default ``ablated``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable, Protocol, Sequence, runtime_checkable

from ocsd.cli import InputError
from ocsd.environments import get_environment
from ocsd.imports import import_reference
from ocsd.replay.prompts import PromptRenderer, Segment, interaction_text
from ocsd.replay.schemas import action_schema

__all__ = [
    "ABLATED_OBSERVATION", "AblatedView", "FullView", "MASK_WORD", "MaskedView", "MissingEvidence",
    "OneObsAblatedView", "OneObsView", "RenderedView", "ReplayView", "ScaffoldOnlyView", "StepRecord", "StudentView",
    "SwapView", "TemplateView", "VIEWS", "ViewError", "ViewRenderError", "evidence_pieces", "get_view", "load_view",
    "masked_observation", "register_view", "step_records",
]

EVIDENCE_HEADER = "Future evidence:\nAfter current action:\n"
OBSERVATION_LABEL = "Observation: "
MASK_WORD = "_"
"""What each word of an observation becomes in the ``masked`` view."""
ABLATED_OBSERVATION = "Observation: not provided"
NEXT_ACTION_LABEL = "Next action:"
AFTER_NEXT_HEADER = "After next action:\n"
BLANK = "\n\n"


class ViewError(ValueError):
    """A step cannot be rendered under a view."""


class MissingEvidence(ViewError):
    """The step lacks what a view needs (no o_{k+1}, or no donor observation for ``swap``)."""


class ViewRenderError(InputError):
    """A view is broken: its ``render`` (``render_view``, ``evidence``) raised something other than a
    :class:`ViewError`, or returned something other than token ids (text pieces for ``evidence``).

    Unlike a :class:`ViewError`, which skips one step, it stops the command: the message names the view
    and the step, and commands report it in one line (exit status 2).
    """


@dataclass(frozen=True)
class StepRecord:
    """One interaction step with the future of its trajectory.

    Attributes
    ----------
    env : str
        A registered environment (:mod:`ocsd.environments`; aliases accepted, stored by its name).
    task : str
        Task description.
    step_idx : int
        k, 0-based position in the trajectory (the prompt's step count).
    history : tuple of (str, str)
        The (o_j, a_j) pairs shown in the rollout prompt, oldest first (at most ``step_idx``).
    current_obs : str
        o_k.
    admissible_actions : tuple of str
        Admissible actions at step k.
    response_ids : tuple of int
        The student's generated token ids at step k, shape (T,).
    future_obs : tuple of str
        o_{k+1}, o_{k+2}, ... as available.
    future_actions : tuple of str
        a_{k+1}, a_{k+2}, ... as available.
    donor_obs : str or None
        Replacement for o_{k+1} in the ``swap`` view.
    key : str
        Free identifier used in messages (e.g. ``"<traj_uid>:<step_idx>"``).
    """

    env: str
    task: str
    step_idx: int
    history: Sequence[tuple[str, str]]
    current_obs: str
    admissible_actions: Sequence[str]
    response_ids: Sequence[int]
    future_obs: Sequence[str]
    future_actions: Sequence[str]
    donor_obs: str | None = None
    key: str = ""

    def __post_init__(self) -> None:
        where = f"StepRecord {self.key!r}" if self.key else "StepRecord"
        set_ = object.__setattr__
        set_(self, "env", get_environment(self.env).name)
        if isinstance(self.step_idx, bool) or int(self.step_idx) != self.step_idx or self.step_idx < 0:
            raise ValueError(f"{where}: step_idx must be an integer >= 0, got {self.step_idx!r}")
        set_(self, "step_idx", int(self.step_idx))
        history = tuple(tuple(p) for p in self.history)
        if any(len(p) != 2 for p in history):
            raise ValueError(f"{where}: history items must be (observation, action) pairs")
        if len(history) > self.step_idx:
            raise ValueError(f"{where}: history has {len(history)} pairs but step_idx={self.step_idx}")
        set_(self, "history", tuple((str(o), str(a)) for o, a in history))
        for name in ("admissible_actions", "future_obs", "future_actions"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise ValueError(f"{where}: {name} must be a sequence of strings, not one string")
            set_(self, name, tuple(str(v) for v in value))
        ids = tuple(int(i) for i in self.response_ids)
        if any(i < 0 for i in ids):
            raise ValueError(f"{where}: response_ids must be non-negative token ids")
        set_(self, "response_ids", ids)

    def with_history(self, kept: int) -> "StepRecord":
        """The same step showing only its ``kept`` most recent history pairs (step count unchanged)."""
        if not 0 <= kept <= len(self.history):
            raise ValueError(f"kept must be in [0, {len(self.history)}], got {kept}")
        return replace(self, history=self.history[len(self.history) - kept:])


def step_records(env: str, task: str, observations: Sequence[str], actions: Sequence[str], *,
                 response_ids: Sequence[Sequence[int]], admissible: Sequence[Sequence[str]] | None = None,
                 history_length: int | None = None, key_prefix: str = "") -> list[StepRecord]:
    """Step records of one trajectory.

    Parameters
    ----------
    observations : sequence of str
        o_0, ..., o_K (o_K, the observation after the last action, may be missing: then the last
        step has no evidence).
    actions : sequence of str
        a_0, ..., a_{K-1}.
    response_ids : sequence of sequence of int
        Generated ids of each step, length K.
    admissible : sequence of sequence of str, optional
        Admissible actions of each step, length K.
    history_length : int or None
        Pairs shown in each step's prompt (``None``: all prior pairs).
    """
    n = len(actions)
    if len(observations) not in (n, n + 1):
        raise ValueError(f"got {len(observations)} observations for {n} actions; need {n} or {n + 1}")
    if len(response_ids) != n:
        raise ValueError(f"got {len(response_ids)} response_ids lists for {n} actions")
    if admissible is not None and len(admissible) != n:
        raise ValueError(f"got {len(admissible)} admissible-action lists for {n} actions")
    records = []
    for k in range(n):
        start = 0 if history_length is None else max(0, k - history_length)
        records.append(StepRecord(
            env=env, task=task, step_idx=k,
            history=list(zip(observations[start:k], actions[start:k])),
            current_obs=observations[k], admissible_actions=admissible[k] if admissible else (),
            response_ids=response_ids[k], future_obs=observations[k + 1:], future_actions=actions[k + 1:],
            key=f"{key_prefix}{k}"))
    return records


# ----------------------------------------------------------------------------------------------
# Views
# ----------------------------------------------------------------------------------------------

@runtime_checkable
class ReplayView(Protocol):
    """What the scoring and audit tools need from a view."""

    name: str

    def render(self, step: StepRecord, renderer: PromptRenderer) -> list[int]:
        """Prompt ids (chat-templated, ending where the response ids begin)."""
        ...


@dataclass(frozen=True)
class RenderedView:
    """A view rendered as segments; ``ids`` is the concatenation of the segments' ids."""

    name: str
    segments: tuple[Segment, ...]

    @property
    def ids(self) -> list[int]:
        return [i for s in self.segments for i in s.ids]

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments)

    def spans(self, kind: str) -> list[tuple[int, int]]:
        """Token index ranges ``[start, end)`` of the segments of ``kind``."""
        out, pos = [], 0
        for s in self.segments:
            if s.kind == kind:
                out.append((pos, pos + len(s.ids)))
            pos += len(s.ids)
        return out


def masked_observation(observation: str) -> str:
    """An observation with each of its words replaced by :data:`MASK_WORD`: as many words, none of its content."""
    return " ".join(MASK_WORD for _ in observation.split())


def evidence_pieces(step: StepRecord, *, horizon: int = 2, ablate: bool = False, schema: bool = True,
                    first_obs: str | None = None, mask: bool = False) -> list[tuple[str, str]]:
    """``(kind, text)`` pieces of replay evidence.

    Parameters
    ----------
    horizon : {1, 2}
        Number of future observations shown (the paper uses 2).
    ablate : bool
        Replace every observation field by :data:`ABLATED_OBSERVATION`.
    mask : bool
        Replace every observation by :func:`masked_observation` of it (after the ``Observation: `` label).
    schema : bool
        Include the ``Next action:`` field (two-observation evidence only).
    first_obs : str, optional
        Replacement for o_{k+1} (the observation swap).

    Raises
    ------
    MissingEvidence
        If the step has no o_{k+1}.
    """
    if horizon not in (1, 2):
        raise ValueError(f"horizon must be 1 or 2, got {horizon}")
    if not step.future_obs:
        raise MissingEvidence(f"step {step.key or step.step_idx}: no observation after the current action")
    obs = list(step.future_obs[:2])
    if first_obs is not None:
        obs[0] = first_obs
    two = horizon == 2 and len(obs) == 2 and len(step.future_actions) >= 1

    def field(o: str) -> str:
        if ablate:
            return ABLATED_OBSERVATION
        return OBSERVATION_LABEL + (masked_observation(o) if mask else o)

    pieces = [("fixed", EVIDENCE_HEADER)]
    if not two:
        return pieces + [("observation", field(obs[0]))]
    pieces.append(("observation", field(obs[0]) + BLANK))
    if schema:
        pieces.append(("schema", NEXT_ACTION_LABEL + action_schema(step.env, step.future_actions[0]) + BLANK))
    return pieces + [("fixed", AFTER_NEXT_HEADER), ("observation", field(obs[1]))]


class TemplateView:
    """Base of segment-structured views: the interaction text, then the pieces of :meth:`evidence`.

    Subclasses set ``name`` and override :meth:`evidence`; ``replay`` selects the replay-table
    wording of the interaction text. With no evidence the view is the interaction prompt alone.
    """

    name: str = ""
    replay: bool = True

    def evidence(self, step: StepRecord) -> list[tuple[str, str]]:
        """``(kind, text)`` pieces appended after the interaction text and a blank line."""
        return []

    def pieces(self, step: StepRecord) -> list[tuple[str, str]]:
        text = interaction_text(step.env, task=step.task, step_idx=step.step_idx, history=step.history,
                                current_obs=step.current_obs, admissible_actions=step.admissible_actions,
                                replay=self.replay)
        evidence = _text_pieces(self, step, self.evidence(step))
        if not evidence:
            return [("prompt", text)]
        return [("prompt", text + BLANK)] + evidence

    def render_view(self, step: StepRecord, renderer: PromptRenderer) -> RenderedView:
        return RenderedView(self.name, renderer.render_segments(self.pieces(step)))

    def render(self, step: StepRecord, renderer: PromptRenderer) -> list[int]:
        return self.render_view(step, renderer).ids

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _text_pieces(view: TemplateView, step: StepRecord, evidence: object) -> list[tuple[str, str]]:
    """``evidence`` as a list of ``(kind, text)`` pairs of strings; :class:`ViewRenderError` naming ``view`` and
    ``step`` if it is anything else."""
    where = f"view {view.name!r} on step {step.key or step.step_idx}"
    if evidence is None:
        return []
    if isinstance(evidence, (str, bytes)) or not isinstance(evidence, Iterable):
        raise ViewRenderError(f"{where}: evidence() returned a {type(evidence).__name__}; it must "
                              "return a list of (kind, text) pairs of strings")
    evidence = list(evidence)
    for piece in evidence:
        if not (isinstance(piece, (list, tuple)) and len(piece) == 2
                and isinstance(piece[0], str) and isinstance(piece[1], str)):
            raise ViewRenderError(f"{where}: evidence() returned the piece {piece!r:.80}; every piece "
                                  "must be a (kind, text) pair of strings")
    return [(kind, text) for kind, text in evidence]


VIEWS: dict[str, type] = {}
"""Registry of built-in views by name."""


def register_view(name: str) -> Callable[[type], type]:
    """Class decorator adding a view class to :data:`VIEWS` under ``name`` (sets ``cls.name``)."""
    def deco(cls: type) -> type:
        if name in VIEWS:
            raise ValueError(f"view {name!r} is already registered")
        cls.name = name
        VIEWS[name] = cls
        return cls
    return deco


@register_view("student")
class StudentView(TemplateView):
    """The rollout context: the interaction prompt in its interaction wording, no evidence."""

    replay = False


@register_view("full")
class FullView(TemplateView):
    """Full replay evidence E^F (actual observations)."""

    horizon = 2
    ablated_twin = "ablated"

    def evidence(self, step: StepRecord) -> list[tuple[str, str]]:
        return evidence_pieces(step, horizon=self.horizon)


@register_view("ablated")
class AblatedView(TemplateView):
    """Observation-Ablated replay evidence E^A (observation fields replaced by the fixed phrase)."""

    horizon = 2

    def evidence(self, step: StepRecord) -> list[tuple[str, str]]:
        return evidence_pieces(step, horizon=self.horizon, ablate=True)


@register_view("swap")
class SwapView(TemplateView):
    """Full evidence with o_{k+1} replaced by ``step.donor_obs``; everything else unchanged."""

    def evidence(self, step: StepRecord) -> list[tuple[str, str]]:
        if step.donor_obs is None:
            raise MissingEvidence(f"step {step.key or step.step_idx}: the swap view needs donor_obs")
        return evidence_pieces(step, first_obs=step.donor_obs)


@register_view("one_obs")
class OneObsView(FullView):
    """One-observation horizon: only o_{k+1}, no future-action schema."""

    horizon = 1
    ablated_twin = "one_obs_ablated"


@register_view("one_obs_ablated")
class OneObsAblatedView(AblatedView):
    """Observation-Ablated twin of ``one_obs``."""

    horizon = 1


@register_view("scaffold_only")
class ScaffoldOnlyView(TemplateView):
    """The ablated evidence without the ``Next action:`` schema field (audited against ``ablated``, it measures
    what the schema alone does)."""

    ablated_twin = "ablated"

    def evidence(self, step: StepRecord) -> list[tuple[str, str]]:
        return evidence_pieces(step, ablate=True, schema=False)


@register_view("masked")
class MaskedView(TemplateView):
    """Observation-Ablated twin of ``full`` that keeps the evidence's length: each observation's words become
    ``_``. Paired with ``full`` its residual compares evidence of equal length, unlike ``ablated``'s fixed
    ``Observation: not provided``."""

    horizon = 2

    def evidence(self, step: StepRecord) -> list[tuple[str, str]]:
        return evidence_pieces(step, horizon=self.horizon, mask=True)


def load_view(spec: str) -> ReplayView:
    """A view from a built-in name (:data:`VIEWS`) or ``module:Class`` / ``path/file.py:Class``.

    A class is instantiated without arguments; a module-level instance is used as is.

    Raises
    ------
    ValueError
        If the spec names nothing, its module cannot be imported (a syntax error or an exception while
        importing it included), the class needs arguments, or the object is not a view (no ``name`` or
        ``render``); the message names the spec.
    """
    if spec in VIEWS:
        return VIEWS[spec]()
    if ":" not in str(spec):
        raise ValueError(f"view {spec!r}: use a built-in name {sorted(VIEWS)} or 'module:Class'")
    try:
        obj = import_reference(spec, what=f"view {spec!r}")
    except ImportError as err:
        raise ValueError(str(err)) from None
    if isinstance(obj, type):
        try:
            view = obj()
        except Exception as err:  # noqa: BLE001 - a user's class: one line naming it
            raise ValueError(f"view {spec!r}: {obj.__name__}() failed ({type(err).__name__}: {err}); a view class "
                             f"must be constructible without arguments") from None
    else:
        view = obj
    if not isinstance(getattr(view, "name", None), str) or not view.name or not callable(getattr(view, "render", None)):
        raise ValueError(f"view {spec!r} is not a ReplayView: it needs a non-empty str 'name' and a "
                         "'render(step, renderer) -> list[int]' method")
    return view


def get_view(view: str | ReplayView) -> ReplayView:
    """Return ``view`` itself if it is a view object, else :func:`load_view` of it."""
    return load_view(view) if isinstance(view, str) else view
