"""Rendering the views of many steps, with the interaction history shortened to a prompt-length limit.

:func:`render_views` renders all views of a step together. When one exceeds ``max_prompt_len``
(context ids, response excluded), the oldest history pair is dropped from *every* view and all are
rendered again, until all fit; the evidence is never shortened. ``history_kept`` and ``truncated``
record what happened. A step that does not fit even with no history raises :class:`PromptTooLong`.

:func:`render_steps` renders many steps: the template views of all steps are tokenised in one batched
call (the result equals :func:`render_views` step by step), and steps that cannot be rendered are
collected as reported skips (:class:`SkippedStep`). A view that raises anything but a
:class:`~ocsd.replay.views.ViewError`, or returns something that is not token ids, raises
:class:`~ocsd.replay.views.ViewRenderError` naming the view and the step.
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from ocsd.replay.prompts import PromptRenderer, SegmentationError
from ocsd.replay.views import (RenderedView, ReplayView, StepRecord, TemplateView, ViewError, ViewRenderError,
                               get_view)

__all__ = ["PromptTooLong", "RenderedStep", "SkippedStep", "render_steps", "render_views"]


class PromptTooLong(ViewError):
    """A step's views exceed the maximum prompt length even with no interaction history.

    Attributes
    ----------
    key : str
        The step's key.
    lengths : dict of str to int
        Prompt length of every view with no history.
    max_prompt_len : int
    """

    def __init__(self, key: str, lengths: dict[str, int], max_prompt_len: int) -> None:
        self.key, self.lengths, self.max_prompt_len = key, dict(lengths), max_prompt_len
        over = {n: v for n, v in lengths.items() if v > max_prompt_len}
        super().__init__(f"step {key or '<no key>'}: views {over} exceed max_prompt_len={max_prompt_len} "
                         "even with no interaction history")


@dataclass(frozen=True)
class RenderedStep:
    """All views of one step, rendered with the same (possibly shortened) history.

    Attributes
    ----------
    step : StepRecord
        The step as rendered (history shortened when ``truncated``).
    contexts : dict of str to list of int
        Prompt ids per view name.
    views : dict of str to RenderedView or None
        Segment structure per view (``None`` for views that only return ids).
    history_kept, history_total : int
        History pairs shown after / before truncation.
    """

    step: StepRecord
    contexts: dict[str, list[int]]
    views: dict[str, RenderedView | None]
    history_kept: int
    history_total: int

    @property
    def truncated(self) -> bool:
        return self.history_kept < self.history_total

    @property
    def response_ids(self) -> list[int]:
        return list(self.step.response_ids)

    def sequence(self, name: str) -> list[int]:
        """Context ids of view ``name`` followed by the response ids, shape (len_ctx + T,)."""
        return self.contexts[name] + list(self.step.response_ids)


def _resolve_views(views: Iterable[str | ReplayView]) -> list[ReplayView]:
    """View objects of names, specs or objects; their names must be unique."""
    resolved = [get_view(v) for v in views]
    names = [v.name for v in resolved]
    if len(set(names)) != len(names):
        raise ValueError(f"view names must be unique, got {names}")
    return resolved


def _token_ids(value: object) -> list[int] | None:
    """``value`` as a non-empty list of token ids (non-negative integers), or None if it is not one."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()  # a numpy array or a tensor
    if not isinstance(value, (list, tuple, range)) or not value:
        return None
    if not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) and i >= 0 for i in value):
        return None
    return [int(i) for i in value]


def _where(view: ReplayView, step: StepRecord) -> str:
    return f"view {getattr(view, 'name', type(view).__name__)!r} on step {step.key or step.step_idx}"


def _call_view(view: ReplayView, step: StepRecord, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` of a view: a :class:`ViewError` passes (the step is skipped); anything else it raises becomes a
    :class:`ViewRenderError` naming the view and the step."""
    try:
        return call(*args)
    except (ViewError, ViewRenderError):
        raise
    except Exception as err:  # noqa: BLE001 - a user's view: one line naming it
        message = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ViewRenderError(f"{_where(view, step)}: rendering raised {type(err).__name__}"
                              f"{': ' + message if message else ''}") from err


def _render_one(view: ReplayView, step: StepRecord, renderer: PromptRenderer) -> tuple[list[int], RenderedView | None]:
    """Prompt ids of ``step`` under ``view`` and its segments (``None`` for a view that returns ids only).

    Raises
    ------
    ViewError
        If the view cannot render this step.
    ViewRenderError
        If the view raised anything else, or returned something that is not token ids.
    """
    render_view = getattr(view, "render_view", None)
    if callable(render_view):
        rendered = _call_view(view, step, render_view, step, renderer)
        if not isinstance(rendered, RenderedView):
            raise ViewRenderError(f"{_where(view, step)}: render_view returned a {type(rendered).__name__}, not a "
                                  "RenderedView")
        return rendered.ids, rendered
    result = _call_view(view, step, view.render, step, renderer)
    ids = _token_ids(result)
    if ids is None:
        shown = f"a {type(result).__name__}"
        if isinstance(result, (str, bytes)):
            shown += f" ({result[:40]!r}{'...' if len(result) > 40 else ''})"
        raise ViewRenderError(f"{_where(view, step)}: render returned {shown}; it must return the prompt's token "
                              "ids, a non-empty list of non-negative int (renderer.render_ids(text) gives them)")
    return ids, None


def render_views(step: StepRecord, views: Iterable[str | ReplayView], renderer: PromptRenderer,
                 max_prompt_len: int | None = None) -> RenderedStep:
    """Render every view of a step, shortening the history identically in all views when needed.

    Parameters
    ----------
    step : StepRecord
    views : iterable of view names or objects
    renderer : PromptRenderer
    max_prompt_len : int, optional
        Maximum context length (response excluded). ``None``: no limit.

    Raises
    ------
    PromptTooLong
        If some view exceeds ``max_prompt_len`` with no history.
    MissingEvidence
        If a view lacks what it needs.
    ViewRenderError
        If a view raises anything else, or returns something that is not token ids.
    """
    resolved = _resolve_views(views)
    if max_prompt_len is not None and max_prompt_len <= 0:
        raise ValueError(f"max_prompt_len must be positive, got {max_prompt_len}")
    total = len(step.history)
    lengths: dict[str, int] = {}
    for kept in range(total, -1, -1):
        current = step if kept == total else step.with_history(kept)
        out = {v.name: _render_one(v, current, renderer) for v in resolved}
        lengths = {n: len(ids) for n, (ids, _) in out.items()}
        if max_prompt_len is None or max(lengths.values(), default=0) <= max_prompt_len:
            return RenderedStep(current, {n: ids for n, (ids, _) in out.items()},
                                {n: rv for n, (_, rv) in out.items()}, kept, total)
    raise PromptTooLong(step.key, lengths, max_prompt_len)


def _batchable(view: ReplayView) -> bool:
    """A :class:`TemplateView` that renders through :meth:`TemplateView.pieces` unchanged."""
    cls = type(view)
    return (isinstance(view, TemplateView) and cls.render_view is TemplateView.render_view
            and cls.render is TemplateView.render)


def _render_batched(steps: Sequence[StepRecord], views: list[ReplayView], renderer: PromptRenderer
                    ) -> dict[int, dict[str, tuple[list[int], RenderedView | None]] | ViewError]:
    """Every step with its whole history under every view, the template views tokenised in one call.

    Returns, per step index, ``{view: (ids, rendered)}`` or the :class:`ViewError` a view raised; the
    result equals :func:`_render_one` view by view.
    """
    out: dict[int, dict[str, tuple[list[int], RenderedView | None]] | ViewError] = {}
    jobs: list[tuple[int, TemplateView]] = []
    pieces: list[list[tuple[str, str]]] = []
    for i, step in enumerate(steps):
        views_of_step: dict[str, tuple[list[int], RenderedView | None]] = {}
        try:
            for view in views:
                if _batchable(view):
                    pieces.append(_call_view(view, step, view.pieces, step))
                    jobs.append((i, view))
                    views_of_step[view.name] = ([], None)  # filled below, in view order
                else:
                    views_of_step[view.name] = _render_one(view, step, renderer)
        except ViewError as err:
            out[i] = err
            continue
        out[i] = views_of_step
    try:
        segments = renderer.render_segments_many(pieces)
    except SegmentationError:
        return {}  # every step goes through render_views, which names the failing one
    for (i, view), segs in zip(jobs, segments):
        entry = out[i]
        if isinstance(entry, dict):
            rendered = RenderedView(view.name, segs)
            entry[view.name] = (rendered.ids, rendered)
    return out


@dataclass(frozen=True)
class SkippedStep:
    """A step that could not be rendered: its position in the input, key and reason."""

    index: int
    key: str
    reason: str


def render_steps(steps: Sequence[StepRecord], views: Iterable[str | ReplayView], renderer: PromptRenderer,
                 max_prompt_len: int | None = None, *, progress: bool = False
                 ) -> tuple[list[tuple[int, RenderedStep]], list[SkippedStep]]:
    """Render many steps; steps that raise :class:`ViewError` are reported, not dropped silently.

    Returns
    -------
    rendered : list of (index, RenderedStep)
    skipped : list of SkippedStep
        Also announced with one ``UserWarning`` giving the count and the first reasons.

    Raises
    ------
    ViewRenderError
        If a view raises anything but a :class:`ViewError`, or returns something that is not token ids.
    """
    resolved = _resolve_views(views)
    first = _render_batched(steps, resolved, renderer)
    rendered, skipped = [], []
    iterator: Iterable[tuple[int, StepRecord]] = enumerate(steps)
    if progress:
        from tqdm.auto import tqdm
        iterator = tqdm(iterator, total=len(steps), desc="render views")
    for i, step in iterator:
        out = first.get(i)
        if isinstance(out, ViewError):
            skipped.append(SkippedStep(i, step.key, str(out)))
            continue
        if out is not None and (max_prompt_len is None or max(len(ids) for ids, _ in out.values()) <= max_prompt_len):
            rendered.append((i, RenderedStep(step, {n: ids for n, (ids, _) in out.items()},
                                             {n: rv for n, (_, rv) in out.items()}, len(step.history),
                                             len(step.history))))
            continue
        try:  # a view the batch could not render, or a prompt to shorten: one step at a time
            rendered.append((i, render_views(step, resolved, renderer, max_prompt_len)))
        except ViewError as err:
            skipped.append(SkippedStep(i, step.key, str(err)))
    if skipped:
        first = "; ".join(s.reason for s in skipped[:3])
        warnings.warn(f"{len(skipped)} of {len(steps)} steps could not be rendered: {first}", stacklevel=2)
    return rendered, skipped
