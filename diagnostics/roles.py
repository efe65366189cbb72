"""Functional roles of word occurrences: Format > Action > Entity/State > Reasoning > Other.

Each word occurrence gets exactly one role; the first rule that matches wins, in this order:

Format
    a structural tag (``<reason>``, ``</action>``, ``<|im_end|>``, see :mod:`diagnostics.words`);
    an output-template marker, i.e. a word ending in ``:`` whose stem is a template field
    (``Action:``, ``Reason:``, ``Observation:``, ``Thought:``, ``Answer:``, ``Step:``...); or a word
    made only of markup characters (``**``, ``###``, ``-``, ``` ``` ```, ``|``).
Action
    the word type is an action verb of the environment (ALFWorld, :mod:`ocsd.environments.alfworld`:
    the engine's command verbs ``go take put move open close toggle use heat cool clean examine
    inventory look slice`` and their ``-s``/``-ing``/past-tense forms, plus ``pick``/``place``).
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

Word types are those of :func:`diagnostics.words.word_type`. The word lists are the environment's
role lexicon (:class:`ocsd.environments.lexicon.Lexicon`, built by its registry entry) chosen by
``meta.json``'s ``env``; unknown environments use the generic lexicon (format and reasoning rules
only, no actions or entities) with a warning.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pandas as pd

from diagnostics.words import is_tag, word_type
from ocsd.environments import environment_names, get_environment
from ocsd.environments.lexicon import Lexicon

__all__ = ["ROLES", "get_lexicon", "assign_roles"]

ROLES = ("Format", "Action", "Entity/State", "Reasoning", "Other")

TEMPLATE_FIELDS = frozenset({
    "action", "actions", "reason", "reasoning", "observation", "thought", "thoughts", "think", "answer",
    "search", "query", "step", "plan", "task", "response", "output", "final answer", "information",
})
_MARKUP_RE = re.compile(r"^[*#`>|\-_=~\[\](){}]+$")


def get_lexicon(env: str | None) -> Lexicon:
    """The role lexicon of a registered environment (name or alias, as ``meta.json``'s ``env``); the
    generic one (format and reasoning rules only), with a warning, for an unknown name."""
    try:
        spec = get_environment(env or "")
    except ValueError:
        warnings.warn(f"no functional-role lexicon for env {env!r} (known: {sorted(environment_names())}); "
                      f"using format and reasoning rules only", UserWarning, stacklevel=2)
        return Lexicon(env=str(env))
    return spec.lexicon()


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
