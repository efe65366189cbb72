"""The environment registry: lookup, every entry's template, and register_environment's checks."""

from __future__ import annotations

import dataclasses
import string
import subprocess
import sys
from pathlib import Path

import pytest

from ocsd.environments import (ENVIRONMENTS, EnvironmentSpec, EvaluationProtocol, RuntimeNotImplemented,
                               environment_names, get_environment, register_environment)
from ocsd.environments import spec as registry
from ocsd.environments.formats import ParsedOutput, TaggedOutput, action_history_fields, memory_fields
from ocsd.environments.lexicon import Lexicon
from ocsd.environments.spec import COMMON_FIELDS, REQUIRED_FIELDS
from ocsd.replay.prompts import interaction_text

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def scratch(monkeypatch):
    """The registry as it is, restored after the test."""
    monkeypatch.setattr(registry, "ENVIRONMENTS", dict(registry.ENVIRONMENTS))
    monkeypatch.setattr(registry, "_LOOKUP", dict(registry._LOOKUP))


def _spec(**kw) -> EnvironmentSpec:
    base = dict(name="toy", display_name="Toy", template="Task: {task_description} after {step_count}.{action_history}"
                "{admissible_actions}", template_fields=action_history_fields, output_parser=TaggedOutput(),
                action_rule=lambda a: ("go", "go somewhere") if a.startswith("go ") else None,
                lexicon=lambda: Lexicon(env="toy"), max_steps=3,
                evaluation=EvaluationProtocol(splits=("test",), metrics=("success_rate",)))
    base.update(kw)
    return EnvironmentSpec(**base)


def test_names_in_registration_order():
    assert environment_names() == ("alfworld", "webshop", "searchqa") == tuple(ENVIRONMENTS)


@pytest.mark.parametrize("alias,name", [("ALFWorld", "alfworld"), ("alfred", "alfworld"), (" WebShop ", "webshop"),
                                        ("Search-QA", "searchqa"), ("search_qa", "searchqa"), ("search", "searchqa")])
def test_lookup_by_name_or_alias(alias, name):
    assert get_environment(alias) is ENVIRONMENTS[name]


def test_unknown_name_lists_the_known():
    with pytest.raises(ValueError, match=r"unknown environment 'minecraft'; known: alfworld, webshop, searchqa"):
        get_environment("minecraft")


def test_paper_step_caps_and_display_names():
    assert {n: (s.display_name, s.max_steps) for n, s in ENVIRONMENTS.items()} == {
        "alfworld": ("ALFWorld", 50), "webshop": ("WebShop", 15), "searchqa": ("Search-QA", 4)}


@pytest.mark.parametrize("name", environment_names())
def test_template_placeholders(name):
    spec = get_environment(name)
    used = {f for _, f, _, _ in string.Formatter().parse(spec.template) if f is not None}
    provided = set(spec.template_fields((), 0, "", ()))
    assert set(REQUIRED_FIELDS) <= used and used <= COMMON_FIELDS | provided and provided <= used
    text = interaction_text(name, task="T", step_idx=1, history=[("o0", "a0")], current_obs="o1",
                            admissible_actions=["look"], replay=True)
    assert "{" not in text and "T" in text
    if spec.replay_wording is not None:
        assert spec.replay_wording[1] in text


def test_entries_without_engine_say_so():
    import dataclasses

    bare = dataclasses.replace(get_environment("searchqa"), runtime=None)  # an entry whose engine is not written
    with pytest.raises(RuntimeNotImplemented, match="environment 'searchqa' .* no runtime.*alfworld"):
        bare.load_runtime()
    assert get_environment("alfworld").runtime == "training.envs.alfworld.runtime:RUNTIME"
    assert get_environment("webshop").runtime == "training.envs.webshop.runtime:RUNTIME"
    assert get_environment("searchqa").runtime == "training.envs.searchqa.runtime:RUNTIME"


def test_spec_methods():
    spec = get_environment("alfworld")
    assert spec.action_schema("  Take  Mug 1 from desk 1 ") == "take an item from a receptacle"
    assert spec.action_family("dance") == "other" and spec.action_schema(None) == "a future action"
    assert spec.parse_output(None) == ParsedOutput("", False, "invalid", "0 <reason> blocks (need exactly 1); "
                                                   "no action block")
    assert spec.skills("pick").startswith("Procedure for this task:")
    assert get_environment("webshop").skills is None


def test_register_and_runtime(scratch):
    spec = register_environment(_spec(aliases=("Toy-Env",), runtime="json:dumps"))
    assert get_environment("toy-env") is spec and environment_names()[-1] == "toy"
    import json

    assert spec.load_runtime() is json.dumps
    assert interaction_text("toy", task="t", step_idx=0, history=[], current_obs="o",
                            admissible_actions=["go north"]) == "Task: t after 0.'go north'"
    assert spec.parse_output("<reason>r</reason><action>go north</action>").kind == "go"
    with pytest.raises(ImportError, match="runtime: cannot import module"):
        dataclasses.replace(spec, runtime="no_such_module_xyz:X").load_runtime()
    with pytest.raises(ImportError, match="has no attribute 'nope'"):
        dataclasses.replace(spec, runtime="json:nope").load_runtime()


@pytest.mark.parametrize("changes,message", [
    (dict(name="alfworld"), "already registered"),
    (dict(aliases=("ALFRED",)), r"already registered: \{'alfred': 'alfworld'\}"),
    (dict(aliases=("toy",)), "aliases repeat a name"),
    (dict(aliases=("",)), "aliases must be a tuple"),
    (dict(name="Toy"), "lower-case letters"),
    (dict(display_name=" "), "display_name"),
    (dict(template="{step_count}{action_history}{admissible_actions}"), r"lacks the required field\(s\) "
                                                                          r"\['task_description'\]"),
    (dict(template="{task_description}{step_count}{action_history}{admissible_actions}{weather}"),
     r"uses \['weather'\]"),
    (dict(template="{task_description}{step_count}{action_history}"), r"provides \['admissible_actions'\]"),
    (dict(template="{task_description}{step_count}{memory_context}", template_fields=action_history_fields),
     r"uses \['memory_context'\]"),
    (dict(template="{task_description}{step_count}{0}{memory_context}", template_fields=memory_fields),
     "placeholders must be field names"),
    (dict(template="{task_description", template_fields=memory_fields), "not a format string"),
    (dict(template_fields=lambda *a: 1 / 0), "raised ZeroDivisionError"),
    (dict(replay_wording=("for current step", "for the current step")), "does not occur in the template"),
    (dict(replay_wording=("Task",)), "two non-empty strings"),
    (dict(max_steps=0), "step cap"),
    (dict(max_steps=True), "step cap"),
    (dict(max_steps=2.5), "step cap"),
    (dict(default_history_length=-1), "default_history_length"),
    (dict(output_parser="action"), "output_parser must be callable"),
    (dict(lexicon=None), "lexicon must be callable"),
    (dict(skills="text"), "skills must be callable"),
    (dict(runtime="training.envs.alfworld.runtime"), "module.path:attribute"),
    (dict(runtime="a b:c"), "module.path:attribute"),
    (dict(evaluation=("valid",)), "EvaluationProtocol"),
    (dict(labels=None), "StepLabels"),
])
def test_register_validation(scratch, changes, message):
    before = dict(ENVIRONMENTS)
    with pytest.raises(ValueError, match=message):
        register_environment(_spec(**changes))
    assert registry.ENVIRONMENTS == before and "toy" not in registry._LOOKUP


def test_register_needs_a_spec():
    with pytest.raises(TypeError, match="EnvironmentSpec"):
        register_environment({"name": "toy"})


@pytest.mark.parametrize("kw,message", [(dict(splits=(), metrics=("em",)), "splits"),
                                        (dict(splits=("a", "a"), metrics=("em",)), "duplicates"),
                                        (dict(splits=("a",), metrics=["em"]), "metrics")])
def test_evaluation_protocol_validation(kw, message):
    with pytest.raises(ValueError, match=message):
        EvaluationProtocol(**kw)


def test_ocsd_never_imports_an_engine():
    code = ("import sys, ocsd.environments, ocsd.replay.views, ocsd.replay.render; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('training', 'alfworld', 'textworld')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
