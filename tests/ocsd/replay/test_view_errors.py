"""A broken view (its ``render`` raises, or returns something that is not token ids; its ``evidence`` returns
something that is not text) is one :class:`ViewRenderError` naming the view and the step, never a traceback from
deep inside the renderer; a :class:`ViewError` still skips its step."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ocsd.cli import InputError
from ocsd.replay.render import render_steps, render_views
from ocsd.replay.views import MissingEvidence, TemplateView, ViewRenderError, step_records

OBS = ["You are in the middle of a room.", "You arrive at countertop 1.", "You pick up the soapbar 1.",
       "You arrive at sinkbasin 1."]
ACTS = ["go to countertop 1", "take soapbar 1 from countertop 1", "go to sinkbasin 1"]


def _steps():
    return step_records("alfworld", "put a clean soapbar in countertop.", OBS, ACTS,
                        response_ids=[[10, 20], [11, 20], [12, 20]], key_prefix="t0:")


class Returns:
    """An ids-only view whose ``render`` returns ``value``."""

    def __init__(self, value):
        self.name, self.value = "returns_view", value

    def render(self, step, renderer):
        return self.value


class Raises:
    name = "raising_view"

    def render(self, step, renderer):
        return {}["missing"]


class TextEvidence(TemplateView):
    name = "text_evidence"

    def evidence(self, step):
        return "Observation: " + step.future_obs[0]


class NumberPiece(TemplateView):
    name = "number_piece"

    def evidence(self, step):
        return [("observation", len(step.future_obs))]


class EvidenceRaises(TemplateView):
    name = "evidence_raises"

    def evidence(self, step):
        raise RuntimeError("my view is not finished\nsecond line")


class Skips(TemplateView):
    name = "skips"

    def evidence(self, step):
        raise MissingEvidence(f"step {step.key}: nothing to show")


@pytest.mark.parametrize("value, shown", [
    ("the prompt as text", "returned a str"), (None, "returned a NoneType"), (["a", "b"], "returned a list"),
    ([1.5, 2.0], "returned a list"), ([], "returned a list"), ([3, -1], "returned a list"), (7, "returned a int"),
])
def test_render_returning_no_token_ids_names_the_view(smollm2_renderer, value, shown):
    for render in (render_steps, render_views):
        with pytest.raises(ViewRenderError) as err:
            render(_steps() if render is render_steps else _steps()[0], [Returns(value), "full"], smollm2_renderer)
        message = str(err.value)
        assert "view 'returns_view' on step t0:0" in message and shown in message and "\n" not in message


def test_render_returning_ids_in_any_integer_sequence_is_accepted(smollm2_renderer):
    ids = smollm2_renderer.render_ids("Say something.")
    for value in (ids, tuple(ids), np.asarray(ids), [np.int64(i) for i in ids]):
        rendered, skipped = render_steps(_steps(), [Returns(value), "full"], smollm2_renderer)
        assert not skipped and rendered[0][1].contexts["returns_view"] == ids


@pytest.mark.parametrize("view, shown", [
    (Raises(), "view 'raising_view' on step t0:0: rendering raised KeyError: 'missing'"),
    (TextEvidence(), "view 'text_evidence' on step t0:0: evidence() returned a str"),
    (NumberPiece(), "view 'number_piece' on step t0:0: evidence() returned the piece ('observation', 3)"),
    (EvidenceRaises(), "view 'evidence_raises' on step t0:0: rendering raised RuntimeError: my view is not finished"),
])
def test_a_raising_view_or_non_text_evidence_names_the_view(smollm2_renderer, view, shown):
    for render, steps in ((render_steps, _steps()), (render_views, _steps()[0])):
        with pytest.raises(ViewRenderError) as err:
            render(steps, ["full", view], smollm2_renderer)
        assert shown in str(err.value) and "\n" not in str(err.value)
        assert isinstance(err.value, InputError)  # commands report it in one line, exit status 2


def test_view_error_still_skips_the_step(smollm2_renderer):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rendered, skipped = render_steps(_steps(), ["full", Skips()], smollm2_renderer)
    assert not rendered and [s.reason for s in skipped] == [f"step t0:{k}: nothing to show" for k in range(3)]


def test_evidence_may_be_any_iterable_of_text_pairs(smollm2_renderer):
    class AsList(TemplateView):
        name = "as_list"

        def evidence(self, step):
            return [("fixed", "Next:\n"), ("observation", "Observation: " + step.future_obs[0])]

    class AsGenerator(AsList):
        name = "as_generator"

        def evidence(self, step):
            yield from super().evidence(step)

    rendered = render_views(_steps()[0], [AsList(), AsGenerator()], smollm2_renderer)
    assert rendered.contexts["as_list"] == rendered.contexts["as_generator"]
