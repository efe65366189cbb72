"""TextWorld's PDDL engine for ALFWorld games: start, load and close one, with its fast-downward workarounds.

* :func:`make_engine` starts :class:`textworld.envs.pddl.PddlEnv` wrapped in alfworld's
  ``AlfredDemangler`` and ``AlfredInfos``; :func:`close_engine` closes it and keeps its private copy of
  the planner library for the next engine (unloading one crashes the process later).
* :func:`load_game` loads a game file, turning the engine's many error types into
  :class:`AlfworldDataError`.
* :func:`memoized_translation` reuses fast-downward's PDDL->SAS translation of identical problems
  within this process.
* :func:`fast_text_generation` makes TextWorld's text generation faster (each grammar template and
  each state query parsed once per process, contexts copied without deep copies); observations and
  admissible commands are unchanged. :func:`textworld_own_text_generation` undoes it for a block.

:mod:`training.envs.alfworld.game` plays games on it; :mod:`training.envs.alfworld.gen` plans generated
ones.
"""

from __future__ import annotations

import contextlib
import copy
import functools

from ocsd.cli import InputError

__all__ = ["FAST_PARTS", "AlfworldDataError", "close_engine", "fast_text_generation", "load_game", "make_engine",
           "memoized_translation", "textworld_own_text_generation"]


class AlfworldDataError(InputError):
    """A game file or data folder is missing, malformed or unplayable; the message names it (a usage error: one
    line, exit status 2)."""


@functools.lru_cache(maxsize=256)
def _translate(domain: str, problem: str, verbose: bool, optimize: bool):
    return _ORIGINAL_PDDL2SAS[0](domain, problem, verbose=verbose, optimize=optimize)


_ORIGINAL_PDDL2SAS: list = []


@contextlib.contextmanager
def memoized_translation():
    """Reuse fast-downward's PDDL->SAS translation of identical problems within this process.

    ``PddlState`` translates its problem twice on every load and reset (most of their cost); the
    result depends only on the domain and problem strings and is only read afterwards.
    """
    import fast_downward

    if not _ORIGINAL_PDDL2SAS:
        _ORIGINAL_PDDL2SAS.append(fast_downward.pddl2sas)
    original = fast_downward.pddl2sas

    def cached(domain, problem, verbose=False, optimize=False):
        return _translate(domain, problem, bool(verbose), bool(optimize))

    fast_downward.pddl2sas = cached
    try:
        yield
    finally:
        fast_downward.pddl2sas = original


@functools.lru_cache(maxsize=8192)
def _parsed_template(text: str, rule_name: str | None):
    return _ORIGINALS["templates"](text, rule_name=rule_name)


@functools.lru_cache(maxsize=8192)
def _conjunctive_query(expression: str):
    from textworld.logic import Rule

    return _ORIGINALS["queries"].__func__(Rule, expression)


_ORIGINALS: dict = {}
"""TextWorld's own functions, by the name of the part of :func:`fast_text_generation` that replaced them."""

_FAST: dict = {}
"""The functions :func:`fast_text_generation` put in their place, by part."""

FAST_PARTS = ("templates", "contexts", "queries")
"""The parts of :func:`fast_text_generation`, as :func:`textworld_own_text_generation` names them."""


def fast_text_generation() -> None:
    """Make TextWorld's text generation fast without changing a word of it (idempotent, per process).

    Every step, the PDDL engine derives the text of the feedback and of each admissible command from the
    game's grammar, and three things take most of a step's time:

    * ``templates``: ``ContextSensitiveGrammar.derive`` parses its template string with TatSu on every call.
      The parse depends only on the string, so it is cached; each call receives a deep copy of the parsed
      symbols (derivation sets their contexts), exactly what a fresh parse returns. Traced parses
      (``TW_CSG_TRACE``) are not cached.
    * ``contexts``: ``copy_context`` deep-copies the context's ``variables`` (entity infos) and ``mapping``
      (placeholder to variable) for every symbol. Derivation only adds entries to these dicts, never changes
      the objects in them (ALFWorld's grammar evaluates attribute reads such as ``o.indefinite + ' ' + o.name``,
      and the entity infos it reads are the game's shared ones), so copies of the dicts suffice.
    * ``queries``: each admissible command's template and each conditional grammar rule asks the state which
      facts match a query such as ``receptacleatlocation(r:receptacle, lend:location)``, and TextWorld parses
      that constant string with TatSu again for every command at every step
      (``Rule.parse_conjunctive_query``). The parsed rule depends only on the string and is only read
      (``State.all_assignments``), so one parse per string is shared.

    Together 12.2x the steps per second of TextWorld's own and 11.7x faster game loading on 16 real
    valid_seen games, of which the query cache alone is 3.9x the steps per second
    (``benchmarks/alfworld_env.py``, a 2-core CPU); observations and admissible commands are tested identical over
    whole episodes of every task type (``tests/training/test_alfworld.py``).
    """
    import textworld.envs.pddl.textgen as textgen
    from textworld.logic import Rule

    if _ORIGINALS:
        return
    _ORIGINALS.update(templates=textgen._parse_and_convert, contexts=textgen.copy_context,
                      queries=Rule.__dict__["parse_conjunctive_query"])

    def parse(text, rule_name=None, **kwargs):
        if kwargs.get("trace") or set(kwargs) - {"trace"} or not isinstance(text, str):
            return _ORIGINALS["templates"](text, rule_name=rule_name, **kwargs)
        return copy.deepcopy(_parsed_template(text, rule_name))

    def copy_context(context):
        return {"state": context["state"], "facts": context["facts"], "variables": dict(context["variables"]),
                "mapping": dict(context["mapping"]), "entity_infos": context["entity_infos"]}

    def parse_conjunctive_query(cls, expr):
        if cls is not Rule or not isinstance(expr, str):
            return _ORIGINALS["queries"].__func__(cls, expr)
        return _conjunctive_query(expr)

    _FAST.update(templates=parse, contexts=copy_context, queries=classmethod(parse_conjunctive_query))
    for part, fn in _FAST.items():
        _install(part, fn)


def _install(part: str, fn) -> None:
    """Put ``fn`` where TextWorld looks up the function of ``part`` (one of :data:`FAST_PARTS`)."""
    import textworld.envs.pddl.textgen as textgen
    from textworld.logic import Rule

    if part == "templates":
        textgen._parse_and_convert = fn
    elif part == "contexts":
        textgen.copy_context = fn
    else:
        Rule.parse_conjunctive_query = fn


@contextlib.contextmanager
def textworld_own_text_generation(*, keep: tuple[str, ...] = ()):
    """TextWorld's own text generation in this process while the block runs, for tests and benchmarks.

    Parameters
    ----------
    keep : tuple of str
        Parts of :func:`fast_text_generation` (names in :data:`FAST_PARTS`) left in place.
    """
    unknown = set(keep) - set(FAST_PARTS)
    if unknown:
        raise ValueError(f"keep: unknown parts {sorted(unknown)}; the parts are {FAST_PARTS}")
    fast_text_generation()
    undone = [part for part in FAST_PARTS if part not in keep]
    for part in undone:
        _install(part, _ORIGINALS[part])
    try:
        yield
    finally:
        for part in undone:
            _install(part, _FAST[part])


# Planner libraries of closed engines, reused by new ones (see close_engine).
_FREE_LIBS: list = []


def make_engine(walkthrough: bool = False):
    import fast_downward
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs.pddl import PddlEnv

    fast_text_generation()
    extras = ["gamefile"] + (["walkthrough"] if walkthrough else [])
    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=extras)
    original = fast_downward.load_lib
    fast_downward.load_lib = lambda: _FREE_LIBS.pop() if _FREE_LIBS else original()
    try:
        return AlfredInfos(AlfredDemangler(PddlEnv(infos)))
    finally:
        fast_downward.load_lib = original


def close_engine(env) -> None:
    """Close an engine, free its planner state and keep its library copy for the next engine.

    Every engine loads a private 33 MB copy of fast-downward's library. Unloading a copy with
    ``fast_downward.close_lib`` (``dlclose``) makes the process crash later, when another copy is
    loaded or at interpreter exit (SIGSEGV); so closed engines hand their copy to new ones instead,
    and a process holds at most as many copies as it ever had engines open at once.
    """
    lib = getattr(env, "downward_lib", None)
    env.close()
    if lib is not None:
        lib.cleanup()
        _FREE_LIBS.append(lib)


def load_game(env, path, label: str | None = None) -> None:
    """Load a game file (or its JSON data, then ``label`` names it in errors)."""
    if label is not None:
        path_for_errors = label
    else:
        path_for_errors = path
    try:
        with memoized_translation():
            env.load(path)
    except KeyError as exc:
        raise AlfworldDataError(f"game file {path_for_errors} cannot be played: its goal is "
                                f"unreachable (planner KeyError {exc})") from None
    except Exception as exc:  # the PDDL parser and translator raise many types
        raise AlfworldDataError(f"game file {path_for_errors} failed to load in the PDDL engine: "
                                f"{type(exc).__name__}: {exc}") from None
