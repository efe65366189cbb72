"""Functional roles of word occurrences: Format > Action > Entity/State > Reasoning > Other.

Each word occurrence gets exactly one role; the first rule that matches wins, in this order:

Format
    a structural tag (``<reason>``, ``</action>``, ``<|im_end|>``, see :mod:`diagnostics.words`);
    an output-template marker, i.e. a word ending in ``:`` whose stem is a template field
    (``Action:``, ``Reason:``, ``Observation:``, ``Thought:``, ``Answer:``, ``Step:``...); or a word
    made only of markup characters (``**``, ``###``, ``-``, ``` ``` ```, ``|``).
Action
    the word type is an action verb of the environment (ALFWorld: the engine's command verbs
    ``go take put move open close toggle use heat cool clean examine inventory look slice`` and
    their ``-s``/``-ing``/past-tense forms, plus ``pick``/``place``).
Entity/State
    the word type is an environment entity (ALFWorld: the engine's object and receptacle classes,
    lower-cased as the game prints them, their plurals, and the parts of compound class names),
    or a state word (``open``, ``closed``, ``clean``, ``dirty``, ``hot``, ``cold``, ``sliced``, ``on``,
    ``off``, ``empty``...); a number directly after an entity word is the instance index of that
    entity (``cabinet 1``); environments with argument tags (Search-QA: ``<search>``, ``<answer>``)
    count every remaining word inside those tags; environments with ``proper_nouns`` count
    capitalised words that do not start a sentence.
Reasoning
    the word type is a discourse connective (``because``, ``since``, ``however``, ``therefore``...).
Other
    everything else.

Word types are those of :func:`diagnostics.words.word_type`. Lexicons are registered per
environment name (``meta.json``'s ``env``); unknown environments use the generic lexicon (format
and reasoning rules only, no actions or entities) with a warning.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from diagnostics.words import is_tag, word_type

__all__ = ["ROLES", "Lexicon", "register_lexicon", "get_lexicon", "assign_roles", "alfworld_vocabulary"]

ROLES = ("Format", "Action", "Entity/State", "Reasoning", "Other")

TEMPLATE_FIELDS = frozenset({
    "action", "actions", "reason", "reasoning", "observation", "thought", "thoughts", "think", "answer",
    "search", "query", "step", "plan", "task", "response", "output", "final answer", "information",
})
_MARKUP_RE = re.compile(r"^[*#`>|\-_=~\[\](){}]+$")

CONNECTIVES = frozenset({
    "because", "since", "however", "therefore", "thus", "hence", "so", "but", "although", "though",
    "whereas", "while", "if", "then", "otherwise", "unless", "instead", "first", "firstly", "next",
    "finally", "also", "yet", "consequently", "moreover", "furthermore", "meanwhile", "after", "before",
    "once", "until", "besides", "nevertheless", "nonetheless", "accordingly", "whether", "either",
    "neither", "rather", "still", "secondly", "lastly", "afterwards", "given", "hmm", "wait",
})

STATE_WORDS = frozenset({
    "open", "opened", "closed", "clean", "cleaned", "dirty", "hot", "heated", "cold", "cool", "cooled",
    "sliced", "on", "off", "empty", "full", "toggled", "filled", "broken", "warm", "wet", "dry", "lit",
    "unlit", "inside", "holding", "carrying", "nothing", "locked", "unlocked",
})


def _inflect(verbs: dict[str, tuple[str, ...]]) -> frozenset:
    words = set()
    for base, forms in verbs.items():
        words.add(base)
        words.update(forms)
    return frozenset(words)


ALFWORLD_ACTIONS = _inflect({
    "go": ("goes", "going", "went"), "take": ("takes", "taking", "took"), "put": ("puts", "putting"),
    "move": ("moves", "moving", "moved"), "open": ("opens", "opening"), "close": ("closes", "closing"),
    "toggle": ("toggles", "toggling"), "use": ("uses", "using", "used"), "heat": ("heats", "heating"),
    "cool": ("cools", "cooling"), "clean": ("cleans", "cleaning"), "examine": ("examines", "examining",
    "examined"), "inventory": (), "look": ("looks", "looking", "looked"), "slice": ("slices", "slicing"),
    "pick": ("picks", "picking", "picked"), "place": ("places", "placing", "placed"),
})

# Object and receptacle classes of the ALFWorld engine (alfworld.gen.constants OBJECTS and
# RECEPTACLES), written lower-case as the text game prints them. Used when alfworld is not installed.
_ALFWORLD_CLASSES = """
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
_ALFWORLD_PARTS = """
alarm clock baseball bat basket ball bath tub basin butter cell phone coffee machine counter credit card
lamp dish sponge floor foot stool garbage glass bottle hand holder house plant key chain laundry hamper
lid light switch paper towel roll pepper shaker remote control salt scrub brush shower door soap bar
spray stove burner knob dining table side teddy bear tennis racket tissue toilet hanger tv stand
watering wine room sponge
""".split()


def _plural(word: str) -> str:
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    if word.endswith("fe"):
        return word[:-2] + "ves"
    if word.endswith("f"):
        return word[:-1] + "ves"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def alfworld_vocabulary() -> tuple[frozenset, str]:
    """ALFWorld entity words and where they came from (``"alfworld"`` or ``"built-in"``).

    Taken from ``alfworld.gen.constants`` (``OBJECTS``, ``RECEPTACLES``, sliced variants) when the
    package imports, otherwise from the built-in copy of that vocabulary. Plurals and the parts of
    compound names are added.
    """
    source = "built-in"
    classes = set(_ALFWORLD_CLASSES)
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
    words.update(_plural(w) for w in classes)
    words.update(_ALFWORLD_PARTS)
    words.update(_plural(w) for w in _ALFWORLD_PARTS)
    words.discard("can")  # "garbage can" -> keep the modal verb out
    return frozenset(words), source


@dataclass(frozen=True)
class Lexicon:
    """Word lists of one environment.

    Attributes
    ----------
    env : str
        Environment name as in ``meta.json``.
    actions : frozenset of str
        Action verbs (all inflected forms listed).
    entities : frozenset of str
        Entity words.
    states : frozenset of str
        State words.
    connectives : frozenset of str
        Reasoning connectives.
    argument_tags : tuple of str
        Tags whose enclosed words are Entity/State unless Format or Action.
    proper_nouns : bool
        Capitalised words that do not start a sentence are Entity/State.
    source : str
        Where the entity list came from.
    """

    env: str
    actions: frozenset = frozenset()
    entities: frozenset = frozenset()
    states: frozenset = STATE_WORDS
    connectives: frozenset = CONNECTIVES
    argument_tags: tuple = ()
    proper_nouns: bool = False
    source: str = "built-in"

    def __post_init__(self):
        for name in ("actions", "entities", "states", "connectives"):
            value = getattr(self, name)
            if not isinstance(value, frozenset) or not all(isinstance(w, str) and w == w.lower() for w in value):
                raise ValueError(f"Lexicon.{name} must be a frozenset of lower-case strings")


_REGISTRY: dict[str, Callable[[], Lexicon]] = {}


def register_lexicon(env: str) -> Callable:
    """Decorator registering a zero-argument factory returning the :class:`Lexicon` of ``env``."""
    def wrap(factory: Callable[[], Lexicon]) -> Callable[[], Lexicon]:
        _REGISTRY[env.lower()] = factory
        return factory
    return wrap


def get_lexicon(env: str | None) -> Lexicon:
    """The registered lexicon of ``env``; the generic one (with a warning) for unknown names."""
    key = (env or "").lower()
    if key in _REGISTRY:
        return _REGISTRY[key]()
    warnings.warn(f"no functional-role lexicon for env {env!r} (known: {sorted(_REGISTRY)}); "
                  f"using format and reasoning rules only", UserWarning, stacklevel=2)
    return Lexicon(env=str(env))


@register_lexicon("alfworld")
def _alfworld() -> Lexicon:
    entities, source = alfworld_vocabulary()
    return Lexicon(env="alfworld", actions=ALFWORLD_ACTIONS, entities=entities, source=source)


@register_lexicon("webshop")
def _webshop() -> Lexicon:
    actions = _inflect({"search": ("searches", "searching", "searched"), "click": ("clicks", "clicking",
                        "clicked"), "buy": ("buys", "buying", "bought"), "purchase": ("purchases", "purchasing"),
                        "select": ("selects", "selecting"), "choose": ("chooses", "choosing", "chose"),
                        "back": (), "prev": (), "next": ()})
    entities = frozenset("""product products item items price prices size sizes color colors colour colours
        option options result results page pages brand brands pack packs count quantity dollars dollar
        material style flavor flavors scent description features reviews attributes instruction
        """.split())
    states = STATE_WORDS | frozenset("available selected cheaper lower higher matching matched".split())
    connectives = CONNECTIVES - {"next"}
    return Lexicon(env="webshop", actions=actions, entities=entities, states=states, connectives=connectives)


@register_lexicon("searchqa")
def _searchqa() -> Lexicon:
    actions = _inflect({"search": ("searches", "searching", "searched"), "answer": ("answers", "answering",
                        "answered"), "query": ("queries", "querying"), "look": ("looks", "looking"),
                        "find": ("finds", "finding", "found"), "retrieve": ("retrieves", "retrieving")})
    return Lexicon(env="searchqa", actions=actions, argument_tags=("search", "answer"), proper_nouns=True,
                   states=frozenset())


def _type_role(wtype: str, surface: str, lex: Lexicon) -> int:
    if is_tag(surface):
        return 0
    stripped = surface.strip()
    if stripped.endswith(":") and stripped[:-1].strip("*#_`").lower() in TEMPLATE_FIELDS:
        return 0
    if _MARKUP_RE.match(stripped):
        return 0
    if wtype in lex.actions:
        return 1
    if wtype in lex.entities or wtype in lex.states:
        return 2
    if wtype in lex.connectives:
        return 3
    return 4


def assign_roles(words, steps, *, lexicon: Lexicon) -> np.ndarray:
    """Functional role index (into :data:`ROLES`) of each word occurrence.

    Parameters
    ----------
    words : sequence of str, length m
        Surface text of the word occurrences, in output order within each step.
    steps : array-like of shape (m,)
        Step id of each word (contiguous per step).
    lexicon : Lexicon
        Word lists of the environment.

    Returns
    -------
    numpy.ndarray of shape (m,), int8
        0 Format, 1 Action, 2 Entity/State, 3 Reasoning, 4 Other.
    """
    steps = np.asarray(steps)
    if steps.shape != (len(words),):
        raise ValueError(f"steps has shape {steps.shape}, expected ({len(words)},)")
    if len(words) == 0:
        return np.zeros(0, dtype=np.int8)
    codes, uniques = pd.factorize(pd.Series(list(words), dtype=object), sort=False)
    types = [word_type(u) for u in uniques]
    base = np.array([_type_role(t, u, lexicon) for t, u in zip(types, uniques)], dtype=np.int8)
    role = base[codes]
    new_step = np.ones(len(words), dtype=bool)
    new_step[1:] = steps[1:] != steps[:-1]
    # instance index after an entity word: "cabinet 1"
    is_number = np.array([t.isdigit() for t in types], dtype=bool)[codes]
    is_entity = np.array([t in lexicon.entities for t in types], dtype=bool)[codes] & (role == 2)
    prev_entity = np.zeros(len(words), dtype=bool)
    prev_entity[1:] = is_entity[:-1]
    role[(role == 4) & is_number & prev_entity & ~new_step] = 2
    if lexicon.argument_tags:
        opens = {f"<{t}>" for t in lexicon.argument_tags}
        closes = {f"</{t}>" for t in lexicon.argument_tags}
        u_open = np.array([t in opens for t in types])[codes].astype(np.int64)
        u_close = np.array([t in closes for t in types])[codes].astype(np.int64)
        step_codes = pd.factorize(pd.Series(steps))[0]
        depth = pd.Series(u_open - u_close).groupby(step_codes).cumsum().to_numpy()
        inside = (depth > 0) & (u_open == 0)
        role[inside & (role >= 3)] = 2
    if lexicon.proper_nouns:
        capital = np.array([u[:1].isupper() for u in uniques], dtype=bool)[codes]
        ends_sentence = np.array([u.rstrip()[-1:] in ".!?:" or is_tag(u) for u in uniques], dtype=bool)[codes]
        sentence_start = new_step.copy()
        sentence_start[1:] |= ends_sentence[:-1]
        role[capital & ~sentence_start & (role >= 3)] = 2
    return role
