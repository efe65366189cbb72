"""Action schemas g(a): future actions rewritten as coarse natural-language scaffolds.

The Full and Observation-Ablated replay evidence show the action a_{k+1} that follows the scored step
only through its schema g(a_{k+1}) (paper appendix "Construction of Replay Evidence"). A schema keeps
the coarse intent and the syntactic shape of the action and replaces high-information arguments
(objects, receptacles, queries, answers, products) by their semantic role::

    take soapbar 1 from countertop 1   ->  take an item from a receptacle
    search[Barack Obama birth year]    ->  search[a query]
    <answer>1961</answer>              ->  <answer>an answer</answer>

Each environment's command families and schemas are its ``action_rule`` in the environment registry
(:mod:`ocsd.environments`; the tables are in the entry modules, e.g. :mod:`ocsd.environments.alfworld`).
An action that does not parse as a command of its environment maps to the fixed fallback
:data:`ocsd.environments.FALLBACK_SCHEMA` (``"a future action"``). Matching is tolerant of surrounding
and repeated whitespace. Schemas never raise on the action: any input, including ``None`` and
non-strings, yields a string.
"""

from __future__ import annotations

from ocsd.environments import get_environment

__all__ = ["action_family", "action_schema"]


def action_schema(env: str, action: object) -> str:
    """g(a): the natural-language schema of a future action.

    Parameters
    ----------
    env : str
        A registered environment's name or alias.
    action : str
        The executed action text, e.g. ``"take soapbar 1 from countertop 1"``,
        ``"click[b09kcmtnqp]"`` or ``"<search>Barack Obama birth year</search>"``.

    Returns
    -------
    str
        The schema, or :data:`ocsd.environments.FALLBACK_SCHEMA` when the action does not parse.

    Raises
    ------
    ValueError
        If ``env`` names no registered environment.
    """
    return get_environment(env).action_schema(action)


def action_family(env: str, action: object) -> str:
    """Command family of an action: its verb (``go``, ``take``, ``put``, ``move``, ... for ALFWorld;
    ``search``/``click`` for WebShop; ``search``/``answer`` for Search-QA), or ``"other"`` when the
    action does not parse."""
    return get_environment(env).action_family(action)
