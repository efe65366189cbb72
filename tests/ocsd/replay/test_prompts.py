"""Interaction prompts (golden tests against the paper's tables), output parsers, chat rendering."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocsd.environments import get_environment
from ocsd.environments.formats import format_memory
from ocsd.replay.prompts import PromptRenderer, interaction_text, parse_output

ALFWORLD_GOLDEN = (
    "You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: put a clean "
    "soapbar in countertop.\n"
    "Prior to this step, you have already taken 3 step(s). Below are the most recent 2 observations and "
    "the corresponding actions you took: \n"
    "[Observation 2: 'You arrive at countertop 1.', Action 2: 'take soapbar 1 from countertop 1']\n"
    "[Observation 3: 'You pick up the soapbar 1.', Action 3: 'go to sinkbasin 1']\n"
    "You are now at step 4 and your current observation is: You arrive at sinkbasin 1.\n"
    "Your admissible actions of the current situation are: ['clean soapbar 1 with sinkbasin 1'\n 'look'].\n"
    "\n"
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process MUST be "
    "enclosed within <reason> </reason> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current step and "
    "present it within <action> </action> tags."
)

HISTORY = [("You are in the middle of a room.", "go to countertop 1"),
           ("You arrive at countertop 1.", "take soapbar 1 from countertop 1"),
           ("You pick up the soapbar 1.", "go to sinkbasin 1")]


def _alfworld(**kw):
    args = dict(task="put a clean soapbar in countertop.", step_idx=3, history=HISTORY,
                current_obs="You arrive at sinkbasin 1.",
                admissible_actions=["clean soapbar 1 with sinkbasin 1", "look"], history_length=2)
    args.update(kw)
    return interaction_text("alfworld", **args)


def latex_table_text(paper: str, title: str) -> str:
    """Plain text of a prompt table of the paper (\\newline -> newline, \\texttt{x} -> x, escapes)."""
    start = paper.index(r"\textbf{" + title + "}")
    body = paper[start:].split(r"\hline", 2)[1]
    body = body.strip()
    body = body.removesuffix(r"\\").rstrip()
    body = body.replace("\\newline\n", "\n").replace("\\newline", "\n")
    body = re.sub(r"\\texttt\{((?:[^{}]|\\\{|\\\})*)\}", r"\1", body)
    return body.replace(r"\{", "{").replace(r"\}", "}").replace(r"\_", "_")


# -------------------------------------------------------------------------------------------- text

def test_alfworld_golden():
    assert _alfworld() == ALFWORLD_GOLDEN


@pytest.mark.parametrize("env,title,renames", [
    ("alfworld", "Interaction Prompt on ALFWorld", {}),
    ("webshop", "Interaction Prompt on WebShop", {"available_actions": "admissible_actions"}),
    ("searchqa", "Interaction Prompt on Search-QA", {}),
])
def test_templates_match_paper(shared_dir, env, title, renames):
    paper = (shared_dir / "paper" / "000_10c8ee70fc8ce85b.txt").read_text()
    text = latex_table_text(paper, title)
    for old, new in renames.items():
        text = text.replace("{" + old + "}", "{" + new + "}")
    assert get_environment(env).template == text


@pytest.mark.parametrize("title,replay", [("Interaction Prompt on ALFWorld", False),
                                          ("Prompt of Full Replay-Evidence Scoring on ALFWorld", True)])
def test_replay_wording_matches_paper(shared_dir, title, replay):
    paper = (shared_dir / "paper" / "000_10c8ee70fc8ce85b.txt").read_text()
    table = latex_table_text(paper, title).split("\n\nFuture evidence:")[0]
    fields = dict(task_description="T", step_count=0, history_length=0, action_history="",
                  current_step=1, current_observation="O", admissible_actions="'look'")
    got = interaction_text("alfworld", task="T", step_idx=0, history=[], current_obs="O",
                           admissible_actions=["look"], replay=replay)
    assert got == table.format(**fields)


def test_replay_wording_changes_one_phrase():
    for env in ("alfworld", "webshop"):
        kw = dict(task="t", step_idx=0, history=[], current_obs="o", admissible_actions=["look"])
        student, replay = interaction_text(env, **kw), interaction_text(env, replay=True, **kw)
        assert student.replace("for current step", "for the current step") == replay != student
    kw = dict(task="q", step_idx=0, history=[], current_obs="")
    assert interaction_text("searchqa", **kw) == interaction_text("searchqa", replay=True, **kw)


def test_history_window_and_counts():
    full = _alfworld(history_length=None)
    assert "most recent 3 observations" in full and "[Observation 1: 'You are in the middle" in full
    none = _alfworld(history_length=0)
    assert "most recent 0 observations" in none and "[Observation" not in none
    assert "already taken 3 step(s)" in none and "now at step 4" in none
    first = interaction_text("alfworld", task="t", step_idx=0, history=[], current_obs="o")
    assert "already taken 0 step(s)" in first and "now at step 1" in first
    with pytest.raises(ValueError, match="at most step_idx"):
        interaction_text("alfworld", task="t", step_idx=1, history=HISTORY, current_obs="o")


def test_webshop_fields():
    text = interaction_text("webshop", task="i need a red mug", step_idx=1,
                            history=[("WebShop [SEP] Instruction: [SEP] i need a red mug [SEP] Search",
                                      "search[red mug]")],
                            current_obs="[SEP] Back to Search [SEP] B0123ABCDE [SEP] Red Mug",
                            admissible_actions=["click[back to search]", "click[b0123abcde]"])
    assert "Your task is to: i need a red mug.\n" in text
    assert "current observation is: [SEP] Back to Search [SEP] B0123ABCDE [SEP] Red Mug.\n" in text
    assert "['click[back to search]'\n 'click[b0123abcde]']" in text
    assert "Action 1: 'search[red mug]'" in text


def test_searchqa_memory():
    history = [("", "<search>q1</search>"), ("r1", "<search>q2</search>")]
    memory = format_memory(history, "<information>r2</information>")
    assert memory == ("<search>q1</search>\n<information>r1</information>\n"
                      "<search>q2</search>\n<information>r2</information>")
    text = interaction_text("searchqa", task="Who?", step_idx=2, history=history, current_obs="r2")
    assert "Your question: Who?\n\nPrior to this step, you have already taken 2 step(s)." in text
    assert "History:\n<search>q1</search>\n<information>r1</information>\n<search>q2</search>" in text
    kept = interaction_text("searchqa", task="Who?", step_idx=2, history=history[1:], current_obs="r2")
    assert "q1" not in kept and "<search>q2</search>\n<information>r2</information>\n\nNow" in kept


# ---------------------------------------------------------------------------------------- parsing

@pytest.mark.parametrize("env,text,action,ok,kind", [
    ("alfworld", "<reason>need soap</reason><action>take soapbar 1 from countertop 1</action>",
     "take soapbar 1 from countertop 1", True, "take"),
    ("alfworld", "<reason>x</reason>\n<action>  Go To  CounterTop 1 </action>", "go to countertop 1", True, "go"),
    ("alfworld", "<action>look</action>", "look", False, "look"),
    ("alfworld", "<reason>x</reason><action>look</action><action>inventory</action>", "look", False, "look"),
    ("alfworld", "<action>look</action><reason>x</reason>", "look", False, "look"),
    ("alfworld", "<reason>x</reason><action></action>", "", False, "invalid"),
    ("alfworld", "<reason>x</reason> go to desk 1", "", False, "invalid"),
    ("alfworld", "<reason>x</reason><action>dance</action>", "dance", True, "other"),
    ("alfworld", "<reason>x</reason><action>look</action></action>", "look", False, "look"),
    ("webshop", "<reason>r</reason><action>search[Red Mug]</action>", "search[Red Mug]", True, "search"),
    ("webshop", "<reason>r</reason><action>click[b09kcmtnqp]</action>", "click[b09kcmtnqp]", True, "click"),
    ("searchqa", "<reason>r</reason><search> obama birth </search>", "<search>obama birth</search>", True, "search"),
    ("searchqa", "<reason>r</reason><answer>1961</answer>", "<answer>1961</answer>", True, "answer"),
    ("searchqa", "<reason>r</reason><search>a</search><answer>b</answer>", "<search>a</search>", False, "search"),
    ("searchqa", "<reason>r</reason><answer>b</answer><search>a</search>", "<answer>b</answer>", False, "answer"),
    ("searchqa", "<reason>r</reason>", "", False, "invalid"),
])
def test_parse_output(env, text, action, ok, kind):
    parsed = parse_output(env, text)
    assert (parsed.action, parsed.well_formed, parsed.kind) == (action, ok, kind)
    assert (parsed.problem == "") == ok


@settings(max_examples=200, deadline=None)
@given(text=st.one_of(st.none(), st.integers(), st.text(max_size=200),
                      st.lists(st.sampled_from(["<reason>", "</reason>", "<action>", "</action>", "<search>",
                                                "</search>", "<answer>", "</answer>", "look", " ", "\n", "x"]),
                               max_size=20).map("".join)))
def test_parse_output_never_raises(text):
    for env in ("alfworld", "webshop", "searchqa"):
        parsed = parse_output(env, text)
        assert isinstance(parsed.action, str) and isinstance(parsed.well_formed, bool)
        if parsed.well_formed:
            assert parsed.action and parsed.kind != "invalid"


# -------------------------------------------------------------------------------------- rendering

def _plain(tokenizer, text):
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                        add_generation_prompt=True, return_dict=False)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return list(ids)


def test_smollm2_render_ids(smollm2_tokenizer):
    renderer = PromptRenderer(smollm2_tokenizer)
    assert renderer.segment_mode == "joint" and not renderer.thinking_disabled
    assert "enable_thinking" not in renderer.chat_template_kwargs
    text = _alfworld()
    ids = renderer.render_ids(text)
    assert ids == _plain(smollm2_tokenizer, text)
    assert smollm2_tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
    separate = PromptRenderer(smollm2_tokenizer, segment_mode="separate")
    assert separate.render_ids(text) == ids


def test_qwen3_thinking_disabled(qwen3_tokenizer):
    renderer = PromptRenderer(qwen3_tokenizer)
    assert renderer.thinking_disabled and renderer.chat_template_kwargs["enable_thinking"] is False
    assert renderer.suffix_text == "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    text = _alfworld()
    assert renderer.render_ids(text) == qwen3_tokenizer.encode(renderer.chat_text(text), add_special_tokens=False)
    think = qwen3_tokenizer.convert_tokens_to_ids(["<think>", "</think>"])
    assert renderer.suffix_ids[-4] == think[0] and think[1] in renderer.suffix_ids
    on = PromptRenderer(qwen3_tokenizer, enable_thinking=True)
    assert not on.thinking_disabled and "<think>" not in on.suffix_text


def test_qwen_style_template(qwen_style_tokenizer):
    renderer = PromptRenderer(qwen_style_tokenizer)
    assert renderer.thinking_disabled
    assert renderer.suffix_text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    ids = renderer.render_ids("hello")
    think = qwen_style_tokenizer.convert_tokens_to_ids("</think>")
    assert think in ids and ids == _plain_kw(qwen_style_tokenizer, "hello")


def _plain_kw(tokenizer, text):
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                        add_generation_prompt=True, enable_thinking=False, return_dict=False)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def test_no_chat_template(smollm2_tokenizer):
    from ocsd.replay.models import load_tokenizer, smollm2_path

    tok = load_tokenizer(smollm2_path())
    tok.chat_template = None
    renderer = PromptRenderer(tok)
    assert not renderer.use_chat_template and renderer.prefix_text == renderer.suffix_text == ""
    assert renderer.render_ids("Look around.") == tok.encode("Look around.", add_special_tokens=True)
    with pytest.raises(ValueError, match="no chat_template"):
        PromptRenderer(tok, use_chat_template=True)


def test_bad_segment_mode(smollm2_tokenizer):
    with pytest.raises(ValueError, match="segment_mode"):
        PromptRenderer(smollm2_tokenizer, segment_mode="words")
