"""Replay views: paper layout, trajectory boundaries, structural matching, truncation, the view API."""

from __future__ import annotations

import textwrap
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ocsd.replay.prompts import PromptRenderer, interaction_text
from ocsd.replay.render import PromptTooLong, render_steps, render_views
from ocsd.replay.views import (
    ABLATED_OBSERVATION, VIEWS, MissingEvidence, StepRecord, TemplateView, ViewError, evidence_pieces, load_view,
    step_records,
)

OBS = ["You are in the middle of a room. Looking quickly around you, you see a countertop 1, a sinkbasin 1.",
       "You arrive at countertop 1. On the countertop 1, you see a soapbar 1.",
       "You pick up the soapbar 1 from the countertop 1.",
       "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing.",
       "You clean the soapbar 1 using the sinkbasin 1.",
       "You arrive at countertop 1. On the countertop 1, you see nothing.",
       "You move the soapbar 1 to the countertop 1."]
ACTS = ["go to countertop 1", "take soapbar 1 from countertop 1", "go to sinkbasin 1",
        "clean soapbar 1 with sinkbasin 1", "go to countertop 1", "move soapbar 1 to countertop 1"]
TASK = "put a clean soapbar in countertop."


def _steps(history_length=2, observations=OBS):
    return step_records("alfworld", TASK, observations, ACTS, response_ids=[[10 + k, 20, 30] for k in range(6)],
                        admissible=[["look", "inventory"]] * 6, history_length=history_length, key_prefix="t0:")


def _user_text(rendered_view, renderer):
    text = rendered_view.text
    return text[len(renderer.prefix_text):len(text) - len(renderer.suffix_text)]


# ------------------------------------------------------------------------------------ paper layout

def test_full_and_ablated_match_paper_tables(shared_dir, smollm2_renderer):
    from tests.ocsd.replay.test_prompts import latex_table_text

    paper = (shared_dir / "paper" / "000_10c8ee70fc8ce85b.txt").read_text()
    step = _steps()[2]
    rendered = render_views(step, ["full", "ablated"], smollm2_renderer)
    fields = dict(task_description=TASK, step_count=2, history_length=2,
                  action_history=(f"\n[Observation 1: '{OBS[0]}', Action 1: '{ACTS[0]}']"
                                  f"\n[Observation 2: '{OBS[1]}', Action 2: '{ACTS[1]}']"),
                  current_step=3, current_observation=OBS[2], admissible_actions="'look'\n 'inventory'",
                  future_observation_1=OBS[3], future_action_schema="clean an item with a receptacle",
                  future_observation_2=OBS[4])
    for name, title in [("full", "Prompt of Full Replay-Evidence Scoring on ALFWorld"),
                        ("ablated", "Prompt of Observation-Ablated Replay-Evidence Scoring on ALFWorld")]:
        expected = latex_table_text(paper, title).format(**fields)
        assert _user_text(rendered.views[name], smollm2_renderer) == expected


def test_evidence_golden():
    step = _steps()[2]
    full = "".join(t for _, t in evidence_pieces(step))
    assert full == ("Future evidence:\nAfter current action:\nObservation: " + OBS[3] + "\n\n"
                    "Next action:clean an item with a receptacle\n\nAfter next action:\nObservation: " + OBS[4])
    ablated = "".join(t for _, t in evidence_pieces(step, ablate=True))
    assert ablated == ("Future evidence:\nAfter current action:\nObservation: not provided\n\n"
                       "Next action:clean an item with a receptacle\n\nAfter next action:\n"
                       "Observation: not provided")
    scaffold = "".join(t for _, t in evidence_pieces(step, ablate=True, schema=False))
    assert scaffold == ablated.replace("Next action:clean an item with a receptacle\n\n", "")
    swap = "".join(t for _, t in evidence_pieces(step, first_obs="Nothing happens."))
    assert swap == full.replace(OBS[3], "Nothing happens.")


# ------------------------------------------------------------------------------------- boundaries

def test_last_step_boundary():
    last = _steps()[5]
    assert last.future_obs == (OBS[6],) and last.future_actions == ()
    assert evidence_pieces(last) == [("fixed", "Future evidence:\nAfter current action:\n"),
                                     ("observation", "Observation: " + OBS[6])]
    assert evidence_pieces(last, ablate=True) == [("fixed", "Future evidence:\nAfter current action:\n"),
                                                  ("observation", ABLATED_OBSERVATION)]


def test_second_to_last_step_has_full_evidence():
    step = _steps()[4]
    assert step.future_obs == (OBS[5], OBS[6]) and step.future_actions == (ACTS[5],)
    kinds = [k for k, _ in evidence_pieces(step)]
    assert kinds == ["fixed", "observation", "schema", "fixed", "observation"]
    assert "Next action:move an item to a receptacle" in "".join(t for _, t in evidence_pieces(step))


def test_missing_final_observation():
    steps = _steps(observations=OBS[:-1])  # o_K not recorded
    assert "Next action" not in "".join(t for _, t in evidence_pieces(steps[4]))  # no o_{k+2}: boundary
    with pytest.raises(MissingEvidence):
        evidence_pieces(steps[5])
    with pytest.raises(MissingEvidence, match="donor_obs"):
        VIEWS["swap"]().evidence(steps[0])


def test_one_observation_views():
    step = _steps()[2]
    assert "Next action" not in "".join(t for _, t in evidence_pieces(step, horizon=1))
    with pytest.raises(ValueError, match="horizon"):
        evidence_pieces(step, horizon=3)


# --------------------------------------------------------------------------- structural matching

_TEXT = st.lists(st.sampled_from(list("ab Z1.,:;'\"[]{}<>/\\-_\n\t é日🙂")
                                 + ["<|im_end|>", "\n\n", "Observation: ", "Next action:", "  "]),
                 max_size=25).map("".join)
_ACTION = st.one_of(st.sampled_from(ACTS + ["look", "search[red mug]", "click[b09kcmtnqp]", "click[black]",
                                            "<search>who</search>", "<answer>x</answer>"]), _TEXT)


@st.composite
def _trajectories(draw):
    env = draw(st.sampled_from(["alfworld", "webshop", "searchqa"]))
    n = draw(st.integers(1, 6))
    observations = draw(st.lists(_TEXT, min_size=n, max_size=n + 1))
    actions = draw(st.lists(_ACTION, min_size=n, max_size=n))
    hl = draw(st.sampled_from([None, 0, 1, 2]))
    response = [draw(st.lists(st.integers(0, 49151), min_size=1, max_size=8)) for _ in range(n)]
    admissible = [draw(st.lists(_ACTION, max_size=3)) for _ in range(n)]
    records = step_records(env, draw(_TEXT), observations, actions, response_ids=response,
                           admissible=admissible, history_length=hl)
    step = records[draw(st.integers(0, n - 1))]
    if not step.future_obs:
        step = records[0] if records[0].future_obs else None
    return step


def check_matched(rendered, a, b, renderer):
    """Views ``a`` and ``b`` differ only inside observation segments; both end with the response."""
    va, vb = rendered.views[a], rendered.views[b]
    assert [s.kind for s in va.segments] == [s.kind for s in vb.segments]
    for sa, sb in zip(va.segments, vb.segments):
        if sa.kind != "observation":
            assert sa.ids == sb.ids and sa.text == sb.text
    assert rendered.contexts[a] == va.ids and rendered.contexts[b] == vb.ids

    def outside(view):
        ids, keep = view.ids, [True] * len(view.ids)
        for start, end in view.spans("observation"):
            keep[start:end] = [False] * (end - start)
        return [i for i, k in zip(ids, keep) if k]

    assert outside(va) == outside(vb)
    response = list(rendered.step.response_ids)
    for name in (a, b):
        seq = rendered.sequence(name)
        assert seq[len(seq) - len(response):] == response and seq[:len(rendered.contexts[name])] == rendered.contexts[name]
        if renderer.segment_mode == "joint":  # ids are the natural tokenisation of the whole prompt
            assert rendered.contexts[name] == renderer.canonical_ids(_user_text(rendered.views[name], renderer))


def _property(renderer):
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(step=_trajectories(), donor=_TEXT)
    def run(step, donor):
        if step is None:
            return
        from dataclasses import replace

        step = replace(step, donor_obs=donor)
        rendered = render_views(step, ["student", "full", "ablated", "swap", "one_obs", "one_obs_ablated",
                                       "scaffold_only", "masked"], renderer)
        check_matched(rendered, "full", "ablated", renderer)
        check_matched(rendered, "full", "masked", renderer)
        check_matched(rendered, "full", "swap", renderer)
        check_matched(rendered, "one_obs", "one_obs_ablated", renderer)
        assert rendered.contexts["student"] == renderer.render_ids(
            interaction_text(step.env, task=step.task, step_idx=step.step_idx, history=step.history,
                             current_obs=step.current_obs, admissible_actions=step.admissible_actions))
        full_obs = [s.text for s in rendered.views["full"].segments if s.kind == "observation"]
        abl_obs = [s.text for s in rendered.views["ablated"].segments if s.kind == "observation"]
        assert all(t.startswith("Observation: ") for t in full_obs)
        assert all(t.rstrip("\n") == ABLATED_OBSERVATION for t in abl_obs)
        masked_obs = [s.text for s in rendered.views["masked"].segments if s.kind == "observation"]
        assert [len(t.split()) for t in masked_obs] == [len(t.split()) for t in full_obs]  # as many words
        assert all(set(t.rstrip("\n")[len("Observation: "):].split()) <= {"_"} for t in masked_obs)
    run()


def test_matching_smollm2(smollm2_tokenizer):
    _property(PromptRenderer(smollm2_tokenizer))


def test_matching_smollm2_separate(smollm2_tokenizer):
    _property(PromptRenderer(smollm2_tokenizer, segment_mode="separate"))


def test_matching_qwen3(qwen3_tokenizer):
    _property(PromptRenderer(qwen3_tokenizer))


def test_matching_qwen_style(qwen_style_tokenizer):
    _property(PromptRenderer(qwen_style_tokenizer))


def test_scaffold_only_differs_by_schema(smollm2_renderer):
    step = _steps()[1]
    rendered = render_views(step, ["ablated", "scaffold_only"], smollm2_renderer)
    ablated = [s for s in rendered.views["ablated"].segments if s.kind != "schema"]
    assert [s.ids for s in ablated] == [s.ids for s in rendered.views["scaffold_only"].segments]


# ------------------------------------------------------------------------------------- truncation

def _long_step():
    observations = [f"Observation {k}: " + "the room is full of things. " * 12 for k in range(7)]
    return _steps(history_length=None, observations=observations)[4]


def test_truncation_drops_oldest_pairs_identically(smollm2_renderer):
    step = _long_step()
    views = ["student", "full", "ablated"]
    free = render_views(step, views, smollm2_renderer)
    assert not free.truncated and free.history_kept == free.history_total == 4
    limit = max(len(ids) for ids in free.contexts.values()) - 150
    cut = render_views(step, views, smollm2_renderer, max_prompt_len=limit)
    assert cut.truncated and 0 < cut.history_kept < 4
    assert all(len(ids) <= limit for ids in cut.contexts.values())
    assert cut.step.history == step.history[4 - cut.history_kept:]
    longer = render_views(step.with_history(cut.history_kept + 1), views, smollm2_renderer)
    assert max(len(ids) for ids in longer.contexts.values()) > limit  # kept is the most that fits
    for name in ("full", "ablated"):  # evidence untouched
        before = [s for s in free.views[name].segments if s.kind in ("fixed", "observation", "schema")]
        after = [s for s in cut.views[name].segments if s.kind in ("fixed", "observation", "schema")]
        assert before == after
    check_matched(cut, "full", "ablated", smollm2_renderer)
    assert "already taken 4 step(s)" in cut.views["student"].text


def test_prompt_too_long_is_reported(smollm2_renderer):
    step = _long_step()
    no_history = render_views(step.with_history(0), ["full"], smollm2_renderer)
    with pytest.raises(PromptTooLong) as info:
        render_views(step, ["student", "full"], smollm2_renderer, max_prompt_len=len(no_history.contexts["full"]) - 1)
    assert info.value.lengths["full"] == len(no_history.contexts["full"])
    steps = _steps()
    steps_plus = steps + [step]
    with pytest.warns(UserWarning, match="1 of 7 steps could not be rendered"):
        rendered, skipped = render_steps(steps_plus, ["full", "ablated"], smollm2_renderer,
                                         max_prompt_len=len(no_history.contexts["full"]) - 1)
    assert [i for i, _ in rendered] == list(range(6)) and [s.index for s in skipped] == [6]
    assert "max_prompt_len" in skipped[0].reason


def test_render_steps_equals_render_views_step_by_step(smollm2_renderer):
    """The batched rendering gives what rendering each step on its own gives, truncation and errors included."""

    class Overridden(TemplateView):  # renders on its own: render_view is not the template's
        name = "overridden"

        def render_view(self, step, renderer):
            return load_view("full").render_view(step, renderer)

    class IdsOnly:
        name = "ids_only"

        def render(self, step, renderer):
            return renderer.render_ids(f"Step {step.step_idx}.")

    long = _long_step()
    steps = _steps() + [long, _steps()[-1], long.with_history(1)]
    views = ["ablated", "full", "student", Overridden(), IdsOnly()]
    limit = max(len(ids) for ids in render_views(long, views, smollm2_renderer).contexts.values()) - 150
    for max_len in (None, limit, 60):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            rendered, skipped = render_steps(steps, views, smollm2_renderer, max_prompt_len=max_len)
        expected, reasons = [], []
        for i, step in enumerate(steps):
            try:
                expected.append((i, render_views(step, views, smollm2_renderer, max_len)))
            except ViewError as err:
                reasons.append((i, str(err)))
        assert [(s.index, s.reason) for s in skipped] == reasons
        assert [i for i, _ in rendered] == [i for i, _ in expected]
        for (_, got), (_, want) in zip(rendered, expected):
            assert got.contexts == want.contexts and got.views == want.views and got.step == want.step
            assert (got.history_kept, got.history_total) == (want.history_kept, want.history_total)
    assert any(r.truncated for _, r in render_steps(steps, views, smollm2_renderer, max_prompt_len=limit)[0])


def test_render_segments_many_equals_one_at_a_time(smollm2_renderer):
    from ocsd.replay.prompts import SegmentationError

    pieces = [[("prompt", "Hello there.\n\n"), ("observation", "Observation: a b c")], [("prompt", "x")], []]
    many = smollm2_renderer.render_segments_many(pieces)
    assert many == [smollm2_renderer.render_segments(p) for p in pieces]
    assert smollm2_renderer.render_segments_many([]) == []
    with pytest.raises(SegmentationError, match="prompt 1: token"):
        smollm2_renderer.render_segments_many([[("prompt", "ok")], [("prompt", "Obser"), ("fixed", "vation")]])


# ------------------------------------------------------------------------------------- view API

CUSTOM = textwrap.dedent('''
    from ocsd.replay.views import TemplateView, evidence_pieces

    class FirstObsOnly(TemplateView):
        """One observation, no header."""
        name = "first_obs_only"

        def evidence(self, step):
            return [("observation", "Observation: " + step.future_obs[0])]

    class NotAView:
        pass

    instance = FirstObsOnly()
''')


def test_load_view_builtins():
    for name in ("student", "full", "ablated", "swap", "one_obs", "scaffold_only"):
        assert load_view(name).name == name


def test_load_custom_view(tmp_path, monkeypatch, smollm2_renderer):
    (tmp_path / "my_views.py").write_text(CUSTOM)
    monkeypatch.syspath_prepend(str(tmp_path))
    view = load_view("my_views:FirstObsOnly")
    assert view.name == "first_obs_only" and load_view("my_views:instance").name == "first_obs_only"
    from_file = load_view(f"{tmp_path / 'my_views.py'}:FirstObsOnly")
    step = _steps()[0]
    rendered = render_views(step, ["student", view], smollm2_renderer)
    assert _user_text(rendered.views["first_obs_only"], smollm2_renderer).endswith("\n\nObservation: " + OBS[1])
    assert from_file.render(step, smollm2_renderer) == rendered.contexts["first_obs_only"]
    for bad, match in [("my_views:NotAView", "not a ReplayView"), ("my_views:Missing", "no attribute"),
                       ("no_such_module_xyz:View", "cannot import"), ("nonsense", "built-in name"),
                       ("/no/such/file.py:View", "does not exist")]:
        with pytest.raises(ValueError, match=match):
            load_view(bad)


def test_ids_only_view(smollm2_renderer):
    class Fixed:
        name = "fixed_ids"

        def render(self, step, renderer):
            return renderer.render_ids("Say something.")

    rendered = render_views(_steps()[0], [Fixed(), "full"], smollm2_renderer)
    assert rendered.views["fixed_ids"] is None
    assert rendered.contexts["fixed_ids"] == smollm2_renderer.render_ids("Say something.")
    with pytest.raises(ValueError, match="unique"):
        render_views(_steps()[0], ["full", "full"], smollm2_renderer)


def test_step_record_validation():
    good = dict(env="alfworld", task="t", step_idx=1, history=[("o", "a")], current_obs="o",
                admissible_actions=[], response_ids=[1], future_obs=["x"], future_actions=[])
    assert StepRecord(**good).history == (("o", "a"),)
    for change, match in [({"step_idx": 0}, "history has 1 pairs"), ({"step_idx": -1}, "step_idx"),
                          ({"response_ids": [-3]}, "non-negative"), ({"future_obs": "x"}, "sequence of strings"),
                          ({"env": "chess"}, "unknown environment"), ({"history": [("o",)]}, "pairs")]:
        with pytest.raises(ValueError, match=match):
            StepRecord(**{**good, **change})
    with pytest.raises(ValueError, match="observations"):
        step_records("alfworld", "t", ["a"], ["x", "y"], response_ids=[[1], [2]])


def test_template_view_subclass_contract(smollm2_renderer):
    class Empty(TemplateView):
        name = "empty"

    step = _steps()[0]
    assert Empty().render(step, smollm2_renderer) != load_view("student").render(step, smollm2_renderer)
    assert set(VIEWS) >= {"student", "full", "ablated", "swap", "one_obs", "one_obs_ablated", "scaffold_only",
                          "masked"}
