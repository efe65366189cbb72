"""Action schemas g(a): every command family, real commands, no argument leaks, the fallback."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocsd.environments import FALLBACK_SCHEMA, get_environment
from ocsd.environments.alfworld import ALFWORLD_RECEPTACLES
from ocsd.replay.schemas import action_family, action_schema

ALFWORLD_CASES = [
    ("take soapbar 1 from countertop 1", "take an item from a receptacle", "take"),
    ("go to countertop 1", "go to a receptacle", "go"),
    ("go to sinkbasin 2", "go to a receptacle", "go"),
    ("take keychain 3 from sofa 1", "take an item from a receptacle", "take"),
    ("take mug 1 from coffeemachine 1", "take an item from a receptacle", "take"),
    ("put soapbar 1 in/on countertop 1", "put an item in/on a receptacle", "put"),
    ("move soapbar 1 to countertop 1", "move an item to a receptacle", "move"),
    ("move apple 2 to fridge 1", "move an item to a receptacle", "move"),
    ("put pencil 1 into mug 2", "put an item into a receptacle", "put"),
    ("put mug 2 in shelf 1", "put an item in a receptacle", "put"),
    ("open fridge 1", "open a receptacle", "open"),
    ("open drawer 12", "open a receptacle", "open"),
    ("close cabinet 4", "close a receptacle", "close"),
    ("use desklamp 1", "use an item", "use"),
    ("toggle desklamp 1", "toggle an item", "toggle"),
    ("heat potato 1 with microwave 1", "heat an item with a receptacle", "heat"),
    ("cool apple 1 with fridge 1", "cool an item with a receptacle", "cool"),
    ("clean lettuce 1 with sinkbasin 1", "clean an item with a receptacle", "clean"),
    ("slice bread 1 with knife 1", "slice an item with an item", "slice"),
    ("slice tomato 2 with butterknife 1", "slice an item with an item", "slice"),
    ("examine alarmclock 1", "examine an item", "examine"),
    ("examine desk 1", "examine a receptacle", "examine"),
    ("examine sinkbasin 1", "examine a receptacle", "examine"),
    ("examine mug 1", "examine an item", "examine"),
    ("look", "look", "look"),
    ("inventory", "inventory", "inventory"),
    ("help", "help", "help"),
    ("  Take  SoapBar 1   from CounterTop 1 ", "take an item from a receptacle", "take"),
]

WEBSHOP_CASES = [
    ("search[long clip-in hair extension natural looking]", "search[a query]", "search"),
    ("Search[Barack Obama birth year]", "Search[a query]", "search"),
    ("search[noise cancelling cosycost usb microphone price lower than 50.00 dollars]", "search[a query]", "search"),
    ("click[b09kcmtnqp]", "click[a product]", "click"),
    ("click[B078GWRC1J]", "click[a product]", "click"),
    ("click[back to search]", "click[back to search]", "click"),
    ("click[Back to Search]", "click[back to search]", "click"),
    ("click[next >]", "click[next >]", "click"),
    ("click[< prev]", "click[< prev]", "click"),
    ("click[buy now]", "click[buy now]", "click"),
    ("click[description]", "click[description]", "click"),
    ("click[features]", "click[features]", "click"),
    ("click[reviews]", "click[reviews]", "click"),
    ("click[attributes]", "click[attributes]", "click"),
    ("click[black]", "click[an option]", "click"),
    ("click[x-large]", "click[an option]", "click"),
    ("click[pack of 2]", "click[an option]", "click"),
    ("click[multicolor]", "click[an option]", "click"),
]

SEARCHQA_CASES = [
    ("<search>Barack Obama birth year</search>", "<search>a query</search>", "search"),
    ("<search> VIVA Media AG new name 2004 </search>", "<search>a query</search>", "search"),
    ("<answer>1961</answer>", "<answer>an answer</answer>", "answer"),
    ("<answer>Gesellschaft mit beschränkter Haftung</answer>", "<answer>an answer</answer>", "answer"),
    ("Search[Barack Obama birth year]", "Search[a query]", "search"),
    ("search[who directed Alien]", "search[a query]", "search"),
    ("answer[Ridley Scott]", "answer[an answer]", "answer"),
]

GARBAGE = [None, 17, "", "   ", "dance wildly", "take from countertop 1", "go to", "open", "search[]",
           "click[]", "<search></search>", "<answer> </answer>", "<search>a</answer>", "think[hmm]",
           "<action>look</action>", "take soapbar 1", "\x00\x01", "🙂"]


def test_paper_examples():
    assert action_schema("alfworld", "take soapbar 1 from countertop 1") == "take an item from a receptacle"
    assert action_schema("webshop", "Search[Barack Obama birth year]") == "Search[a query]"
    assert action_schema("searchqa", "Search[Barack Obama birth year]") == "Search[a query]"
    assert FALLBACK_SCHEMA == "a future action"


@pytest.mark.parametrize("env,cases", [("alfworld", ALFWORLD_CASES), ("webshop", WEBSHOP_CASES),
                                       ("searchqa", SEARCHQA_CASES)])
def test_command_families(env, cases):
    for action, schema, family in cases:
        assert action_schema(env, action) == schema, action
        assert action_family(env, action) == family, action


@pytest.mark.parametrize("env", ["alfworld", "webshop", "searchqa"])
@pytest.mark.parametrize("action", GARBAGE)
def test_fallback(env, action):
    assert action_schema(env, action) == FALLBACK_SCHEMA
    assert action_family(env, action) == "other"


def test_every_alfworld_family_covered():
    families = {family for _, _, family in ALFWORLD_CASES}
    assert {"go", "take", "put", "move", "open", "close", "toggle", "use", "heat", "cool", "clean", "slice",
            "examine", "look", "inventory"} <= families


def test_env_aliases():
    assert get_environment("Search-QA").name == "searchqa" and get_environment("ALFWorld").name == "alfworld"
    with pytest.raises(ValueError, match="unknown environment"):
        get_environment("minecraft")
    with pytest.raises(ValueError, match="unknown environment"):
        action_schema("minecraft", "look")


_NAMES = st.sampled_from(["soapbar", "apple", "keychain", "desklamp", "mug", "butterknife", "cellphone",
                          "countertop", "sinkbasin", "fridge", "cabinet", "drawer", "sofa", "microwave"])
_NUMS = st.integers(1, 30)
_TEMPLATES = ["go to {r}", "take {o} from {r}", "put {o} in/on {r}", "move {o} to {r}", "put {o} into {r}",
              "open {r}", "close {r}", "use {o}", "heat {o} with {r}", "cool {o} with {r}",
              "clean {o} with {r}", "slice {o} with {r}", "examine {o}"]


@settings(max_examples=200, deadline=None)
@given(template=st.sampled_from(_TEMPLATES), o=_NAMES, on=_NUMS, r=_NAMES, rn=_NUMS)
def test_alfworld_schema_hides_arguments(template, o, on, r, rn):
    action = template.format(o=f"{o} {on}", r=f"{r} {rn}")
    schema = action_schema("alfworld", action)
    assert schema != FALLBACK_SCHEMA
    assert not re.search(r"\d", schema)
    words = set(schema.replace("/", " ").split())
    assert o not in words and r not in words
    assert schema.split()[0] == action.split()[0]  # the verb (coarse intent) is kept


@settings(max_examples=100, deadline=None)
@given(text=st.one_of(st.text(max_size=60), st.binary(max_size=20).map(lambda b: b.decode("latin-1"))))
def test_schema_never_raises(text):
    for env in ("alfworld", "webshop", "searchqa"):
        assert isinstance(action_schema(env, text), str)
        assert isinstance(action_family(env, text), str)


def test_receptacle_list_matches_alfworld():
    constants = pytest.importorskip("alfworld.gen.constants", reason="alfworld is not installed")
    movable = {"Bowl", "Box", "Cup", "Mug", "Pan", "Plate", "Pot"}
    stationary = {name.lower() for name in constants.RECEPTACLES if name not in movable}
    assert stationary == set(ALFWORLD_RECEPTACLES)


def _shown_name(pddl_id: str) -> str:
    name = pddl_id.split("_bar_")[0].lower()
    if "basin" in pddl_id.lower() and not name.endswith("basin"):
        name += "basin"
    return name


def test_real_alfworld_grammar(shared_dir):
    """Every command template of the real game files, filled with that game's objects and receptacles."""
    games = sorted((shared_dir / "alfworld" / "json_2.1.1").glob("*/*/*/game.tw-pddl"))
    if not games:
        pytest.skip("no ALFWorld game files under shared/alfworld")
    checked = 0
    for path in games[::25]:
        game = json.loads(path.read_text())
        templates = re.findall(r'template :: "([^"]*)"', game["grammar"])
        typed = re.findall(r"^\s*(\S+_bar_\S+) - (object|receptacle)\s*$", game["pddl_problem"], re.M)
        objects = [_shown_name(i) for i, t in typed if t == "object"]
        receptacles = [_shown_name(i) for i, t in typed if t == "receptacle"]
        assert objects and receptacles, path
        assert set(receptacles) <= ALFWORLD_RECEPTACLES, (path, set(receptacles) - ALFWORLD_RECEPTACLES)
        for template in templates:
            template = re.sub(r"\[\{r\.name[^]]*\]", "{r}", template)
            filled = re.sub(r"\{(o|co|ko|outero)\}", f"{objects[0]} 1", template)
            filled = re.sub(r"\{(r|outerr)\}", f"{receptacles[0]} 2", filled)
            schema = action_schema("alfworld", filled)
            assert schema != FALLBACK_SCHEMA, filled
            assert objects[0] not in schema.split() and "1" not in schema and "2" not in schema, filled
            if template == "examine {r}":
                assert schema == "examine a receptacle"
            checked += 1
    assert checked > 50


def test_real_webshop_commands(shared_dir):
    path = shared_dir / "webshop" / "webshop_goals_fixed100.json"
    if not path.is_file():
        pytest.skip("shared/webshop is not present")
    goals = json.loads(path.read_text())
    for goal in goals:
        query = goal["task"].split("\n")[0].strip()
        assert action_schema("webshop", f"search[{query}]") == "search[a query]"
        assert action_schema("webshop", f"click[{goal['key']['asin'].lower()}]") == "click[a product]"
        for option in goal["key"]["goal_options"]:
            assert action_schema("webshop", f"click[{option}]") == "click[an option]", option


def test_real_searchqa_commands(shared_dir):
    path = shared_dir / "searchqa" / "hotpotqa_distractor_sample100.jsonl"
    if not path.is_file():
        pytest.skip("shared/searchqa is not present")
    for line in path.read_text().splitlines():
        item = json.loads(line)
        assert action_schema("searchqa", f"<search>{item['question']}</search>") == "<search>a query</search>"
        assert action_schema("searchqa", f"<answer>{item['answer']}</answer>") == "<answer>an answer</answer>"
