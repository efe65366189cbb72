"""ALFWorld: household tasks in the text engine of ALFRED (the registry's first, complete entry).

Interaction template: the paper's table "Interaction Prompt on ALFWorld", verbatim. The replay-scoring
tables (Full and Observation-Ablated) reproduce it but read "choose an admissible action for **the**
current step"; :data:`REPLAY_WORDING` is that change. Outputs are ``<reason>...</reason>`` then
``<action>...</action>``; the action is lower-cased.

Action schemas g(a), for the commands of the ALFWorld grammar in both the ``put {o} in/on {r}`` wording of
the released game files and the ``move {o} to {r}`` wording of alfworld 0.4:

=========================  ==========================================
command                    schema
=========================  ==========================================
go to {r}                  go to a receptacle
take {o} from {r}          take an item from a receptacle
put {o} in/on {r}          put an item in/on a receptacle
move {o} to {r}            move an item to a receptacle
put {o} into {outero}      put an item into a receptacle
put {outero} in {r}        put an item in a receptacle
open {r} / close {r}       open a receptacle / close a receptacle
use {o} / toggle {o}       use an item / toggle an item
heat/cool/clean {o} with   heat an item with a receptacle (cool, clean)
slice {co} with {ko}       slice an item with an item
examine {x}                examine a receptacle (stationary receptacle
                           types, :data:`ALFWORLD_RECEPTACLES`) or
                           examine an item (anything else)
look / inventory / help    unchanged (they carry no argument)
=========================  ==========================================

Matching is case-insensitive; an empty argument (``take  from countertop 1``) does not parse.

Role lexicon: the engine's command verbs ``go take put move open close toggle use heat cool clean examine
inventory look slice`` and their ``-s``/``-ing``/past-tense forms, plus ``pick``/``place``; the engine's
object and receptacle classes, lower-cased as the game prints them, their plurals and the parts of
compound class names (:func:`alfworld_vocabulary`).

Runtime: :data:`training.envs.alfworld.runtime.RUNTIME`. Step cap 50; evaluation on ``valid_seen`` and
``valid_unseen``, success rate overall and per task type (paper appendix "Evaluation Protocol").
"""

from __future__ import annotations

import re
from typing import Callable

from ocsd.environments.formats import TaggedOutput, action_history_fields
from ocsd.environments.labels import StepLabels
from ocsd.environments.lexicon import Lexicon, inflect, plural
from ocsd.environments.spec import EnvironmentSpec, EvaluationProtocol, register_environment

__all__ = ["ALFWORLD", "ALFWORLD_ACTIONS", "ALFWORLD_RECEPTACLES", "ALFWORLD_SKILLS", "OPERATORS", "REPLAY_WORDING",
           "TEMPLATE", "action_rule", "alfworld_vocabulary", "skill_text"]

TEMPLATE = (
    "You are an expert agent operating in the ALFRED Embodied Environment. "
    "Your task is to: {task_description}\n"
    "Prior to this step, you have already taken {step_count} step(s). Below are the most recent "
    "{history_length} observations and the corresponding actions you took: {action_history}\n"
    "You are now at step {current_step} and your current observation is: {current_observation}\n"
    "Your admissible actions of the current situation are: [{admissible_actions}].\n"
    "\n"
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process "
    "MUST be enclosed within <reason> </reason> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current "
    "step and present it within <action> </action> tags."
)
"""The paper's table "Interaction Prompt on ALFWorld"."""

REPLAY_WORDING = ("an admissible action for current step", "an admissible action for the current step")
"""(interaction wording, replay wording) of the paper's replay-scoring tables."""

ALFWORLD_RECEPTACLES = frozenset({
    "armchair", "bathtubbasin", "bed", "cabinet", "cart", "coffeemachine", "coffeetable", "countertop",
    "desk", "diningtable", "drawer", "dresser", "fridge", "garbagecan", "handtowelholder",
    "laundryhamper", "microwave", "ottoman", "paintinghanger", "safe", "shelf", "sidetable",
    "sinkbasin", "sofa", "stoveburner", "toaster", "toilet", "toiletpaperhanger", "towelholder",
    "tvstand",
})
"""Shown names (lower case, without the instance number) of ALFRED's stationary receptacle types:
the places an agent can ``go to``. Portable receptacles (bowl, box, cup, mug, pan, plate, pot) are
items."""

_ARG = r"(\S(?:.*\S)?)"  # a non-empty argument without surrounding whitespace


def _is_receptacle(name: str) -> bool:
    base = re.sub(r"\s+\d+$", "", name.strip())
    return base.replace(" ", "") in ALFWORLD_RECEPTACLES


# (family, compiled pattern on the normalised lower-case command, schema builder)
_RULES: list[tuple[str, re.Pattern[str], Callable[[re.Match[str]], str]]] = [
    ("go", re.compile(rf"^go to {_ARG}$"), lambda m: "go to a receptacle"),
    ("take", re.compile(rf"^take {_ARG} from {_ARG}$"), lambda m: "take an item from a receptacle"),
    ("put", re.compile(rf"^put {_ARG} in/on {_ARG}$"), lambda m: "put an item in/on a receptacle"),
    ("put", re.compile(rf"^put {_ARG} into {_ARG}$"), lambda m: "put an item into a receptacle"),
    ("put", re.compile(rf"^put {_ARG} in {_ARG}$"), lambda m: "put an item in a receptacle"),
    ("put", re.compile(rf"^put {_ARG} on {_ARG}$"), lambda m: "put an item on a receptacle"),
    ("move", re.compile(rf"^move {_ARG} to {_ARG}$"), lambda m: "move an item to a receptacle"),
    ("open", re.compile(rf"^open {_ARG}$"), lambda m: "open a receptacle"),
    ("close", re.compile(rf"^close {_ARG}$"), lambda m: "close a receptacle"),
    ("toggle", re.compile(rf"^toggle {_ARG}$"), lambda m: "toggle an item"),
    ("use", re.compile(rf"^use {_ARG}$"), lambda m: "use an item"),
    ("heat", re.compile(rf"^heat {_ARG} with {_ARG}$"), lambda m: "heat an item with a receptacle"),
    ("cool", re.compile(rf"^cool {_ARG} with {_ARG}$"), lambda m: "cool an item with a receptacle"),
    ("clean", re.compile(rf"^clean {_ARG} with {_ARG}$"), lambda m: "clean an item with a receptacle"),
    ("slice", re.compile(rf"^slice {_ARG} with {_ARG}$"), lambda m: "slice an item with an item"),
    ("examine", re.compile(rf"^examine {_ARG}$"),
     lambda m: "examine a receptacle" if _is_receptacle(m.group(1)) else "examine an item"),
    ("look", re.compile(r"^look$"), lambda m: "look"),
    ("inventory", re.compile(r"^inventory$"), lambda m: "inventory"),
    ("help", re.compile(r"^help$"), lambda m: "help"),
]


def action_rule(action: str) -> tuple[str, str] | None:
    """(family, schema) of a normalised ALFWorld command, None when it is outside the grammar."""
    cmd = action.lower()
    for family, pattern, build in _RULES:
        m = pattern.match(cmd)
        if m:
            return family, build(m)
    return None


OPERATORS: tuple[str, ...] = (
    "go", "take", "put", "move", "open", "close", "toggle", "use",
    "heat", "cool", "clean", "examine", "inventory", "look", "slice",
)
"""Operators of the step records; an action whose first word is not one of them is ``other``."""

ALFWORLD_ACTIONS = inflect({
    "go": ("goes", "going", "went"), "take": ("takes", "taking", "took"), "put": ("puts", "putting"),
    "move": ("moves", "moving", "moved"), "open": ("opens", "opening"), "close": ("closes", "closing"),
    "toggle": ("toggles", "toggling"), "use": ("uses", "using", "used"), "heat": ("heats", "heating"),
    "cool": ("cools", "cooling"), "clean": ("cleans", "cleaning"), "examine": ("examines", "examining",
    "examined"), "inventory": (), "look": ("looks", "looking", "looked"), "slice": ("slices", "slicing"),
    "pick": ("picks", "picking", "picked"), "place": ("places", "placing", "placed"),
})
"""Action verbs of the role lexicon, every listed form."""

# Object and receptacle classes of the ALFWorld engine (alfworld.gen.constants OBJECTS and
# RECEPTACLES), written lower-case as the text game prints them. Used when alfworld is not installed.
_CLASSES = """
alarmclock apple armchair baseballbat basketball bathtub bathtubbasin bed blinds book boots bowl box
bread butterknife cabinet candle cart cd cellphone chair cloth coffeemachine countertop creditcard cup
curtains desk desklamp dishsponge drawer dresser egg floorlamp footstool fork fridge garbagecan
glassbottle handtowel handtowelholder houseplant kettle keychain knife ladle laptop laundryhamper
laundryhamperlid lettuce lightswitch microwave mirror mug newspaper ottoman painting paintinghanger pan
papertowel papertowelroll pen pencil peppershaker pillow plate plunger poster pot potato remotecontrol
safe saltshaker scrubbrush shelf showerdoor showerglass sink sinkbasin soapbar soapbottle sofa spatula
spoon spraybottle statue stoveburner stoveknob diningtable coffeetable sidetable teddybear television
tennisracket tissuebox toaster toilet toiletpaper toiletpaperhanger toiletpaperroll tomato towel
towelholder tvstand vase watch wateringcan window winebottle faucet
""".split()
# Parts of compound class names that read as entities on their own ("counter top" -> "counter").
_PARTS = """
alarm clock baseball bat basket ball bath tub basin butter cell phone coffee machine counter credit card
lamp dish sponge floor foot stool garbage glass bottle hand holder house plant key chain laundry hamper
lid light switch paper towel roll pepper shaker remote control salt scrub brush shower door soap bar
spray stove burner knob dining table side teddy bear tennis racket tissue toilet hanger tv stand
watering wine room sponge
""".split()


def alfworld_vocabulary() -> tuple[frozenset, str]:
    """ALFWorld entity words and where they came from (``"alfworld"`` or ``"built-in"``).

    Taken from ``alfworld.gen.constants`` (``OBJECTS``, ``RECEPTACLES``, sliced variants) when that
    package imports, otherwise from the built-in copy of that vocabulary. Plurals and the parts of
    compound names are added. The constants module is read only here, when a lexicon is built.
    """
    source = "built-in"
    classes = set(_CLASSES)
    try:
        from alfworld.gen import constants  # type: ignore

        names = set(getattr(constants, "OBJECTS", [])) | set(getattr(constants, "RECEPTACLES", []))
        names |= set(getattr(constants, "OBJECTS_WSLICED", []))
        if names:
            classes = {n.lower() for n in names}
            source = "alfworld"
    except Exception:  # not installed, or its import needs optional parts
        pass
    words = set(classes)
    words.update(plural(w) for w in classes)
    words.update(_PARTS)
    words.update(plural(w) for w in _PARTS)
    words.discard("can")  # "garbage can" -> keep the modal verb out
    return frozenset(words), source


def lexicon() -> Lexicon:
    """The ALFWorld role lexicon."""
    entities, source = alfworld_vocabulary()
    return Lexicon(env="alfworld", actions=ALFWORLD_ACTIONS, entities=entities, source=source)


_COMMON_SKILLS = (
    "- Objects are found on or in receptacles: go to a receptacle, open it if it is closed, and look at what it "
    "holds before taking anything.\n"
    "- You can carry one object at a time; take it with 'take <object> from <receptacle>' and place it with "
    "'move <object> to <receptacle>'.\n"
    "- Search the likely places first (countertops, cabinets, drawers, shelves, tables) and do not revisit a "
    "receptacle you have already searched.\n"
    "- Only admissible actions change the world; anything else answers 'Nothing happens.'"
)

ALFWORLD_SKILLS = {
    "pick": "Find the object, take it, go to the target receptacle and move it there.",
    "look": "Find the object and take it, then find a desklamp or floorlamp and use it while holding the object.",
    "clean": "Find the object and take it, go to a sinkbasin and clean it there, then move it to the target.",
    "heat": "Find the object and take it, go to the microwave and heat it there, then move it to the target.",
    "cool": "Find the object and take it, go to the fridge and cool it there, then move it to the target.",
    "pick2": "Two objects are needed: find, take and place the first one, then find the second and place it too.",
}
"""Procedure of each task type, written for the baselines' privileged teacher (never a game's answer)."""


def skill_text(task_type: str) -> str:
    """Privileged skill text of a task type: its procedure (when known) and the general rules."""
    specific = ALFWORLD_SKILLS.get(task_type, "")
    return f"Procedure for this task: {specific}\nGeneral rules:\n{_COMMON_SKILLS}" if specific else _COMMON_SKILLS


ALFWORLD = register_environment(EnvironmentSpec(
    name="alfworld",
    display_name="ALFWorld",
    aliases=("alfred",),
    template=TEMPLATE,
    template_fields=action_history_fields,
    replay_wording=REPLAY_WORDING,
    default_history_length=2,
    task_types=("pick", "look", "clean", "heat", "cool", "pick2"),
    output_parser=TaggedOutput(("action",), lower=True),
    action_rule=action_rule,
    lexicon=lexicon,
    labels=StepLabels(operators=OPERATORS),
    skills=skill_text,
    max_steps=50,
    invalid_action_penalty=0.1,  # SDAR examples/sdar_trainer/run_alfworld_qwen3.sh:59
    evaluation=EvaluationProtocol(splits=("valid_seen", "valid_unseen"), metrics=("success_rate", "per_type")),
    runtime="training.envs.alfworld.runtime:RUNTIME",
))
"""The ALFWorld entry."""
