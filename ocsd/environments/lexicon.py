"""Role lexicons: the word lists that give word occurrences their functional role.

Each environment entry builds its :class:`Lexicon` on demand (:attr:`ocsd.environments.EnvironmentSpec.lexicon`);
:mod:`diagnostics.roles` applies it. The state words and reasoning connectives below are the shared
defaults; :func:`inflect` and :func:`plural` help entries list every form of a word.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CONNECTIVES", "Lexicon", "STATE_WORDS", "inflect", "plural"]

CONNECTIVES = frozenset({
    "because", "since", "however", "therefore", "thus", "hence", "so", "but", "although", "though",
    "whereas", "while", "if", "then", "otherwise", "unless", "instead", "first", "firstly", "next",
    "finally", "also", "yet", "consequently", "moreover", "furthermore", "meanwhile", "after", "before",
    "once", "until", "besides", "nevertheless", "nonetheless", "accordingly", "whether", "either",
    "neither", "rather", "still", "secondly", "lastly", "afterwards", "given", "hmm", "wait",
})
"""Discourse connectives: the Reasoning role."""

STATE_WORDS = frozenset({
    "open", "opened", "closed", "clean", "cleaned", "dirty", "hot", "heated", "cold", "cool", "cooled",
    "sliced", "on", "off", "empty", "full", "toggled", "filled", "broken", "warm", "wet", "dry", "lit",
    "unlit", "inside", "holding", "carrying", "nothing", "locked", "unlocked",
})
"""State words: with entities, the Entity/State role."""


def inflect(verbs: dict[str, tuple[str, ...]]) -> frozenset:
    """Every base verb and its listed forms, e.g. ``{"go": ("goes", "going", "went")}``."""
    words = set()
    for base, forms in verbs.items():
        words.add(base)
        words.update(forms)
    return frozenset(words)


def plural(word: str) -> str:
    """English plural of a noun (``box`` -> ``boxes``, ``knife`` -> ``knives``, ``cherry`` -> ``cherries``)."""
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    if word.endswith("fe"):
        return word[:-2] + "ves"
    if word.endswith("f"):
        return word[:-1] + "ves"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


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
