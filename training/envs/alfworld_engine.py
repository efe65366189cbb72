"""TextWorld's PDDL engine for ALFWorld games: start, load and close one, with its fast-downward workarounds.

* :func:`make_engine` starts :class:`textworld.envs.pddl.PddlEnv` wrapped in alfworld's
  ``AlfredDemangler`` and ``AlfredInfos``; :func:`close_engine` closes it and keeps its private copy of
  the planner library for the next engine (unloading one crashes the process later).
* :func:`load_game` loads a game file, turning the engine's many error types into
  :class:`AlfworldDataError`.
* :func:`memoized_translation` reuses fast-downward's PDDL->SAS translation of identical problems
  within this process.
* :func:`memoize_grammar_parses` makes TextWorld parse each text-grammar template once per process
  instead of on every step (about 3x faster steps; observations and admissible commands unchanged).

:mod:`training.envs.alfworld_game` plays games on it; :mod:`training.envs.alfworld_gen` plans generated
ones.
"""

from __future__ import annotations

import contextlib
import copy
import functools

__all__ = ["AlfworldDataError", "close_engine", "load_game", "make_engine", "memoize_grammar_parses",
           "memoized_translation"]


class AlfworldDataError(ValueError):
    """A game file or data folder is missing, malformed or unplayable; the message names it."""


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
    return _ORIGINAL_PARSE[0](text, rule_name=rule_name)


_ORIGINAL_PARSE: list = []


def memoize_grammar_parses() -> None:
    """Parse each text-grammar template once per process (idempotent).

    Every step, TextWorld's PDDL engine derives the text of each admissible command and of the feedback
    from grammar templates, and ``ContextSensitiveGrammar.derive`` parses its template string with TatSu
    each time (about two thirds of a step). The parse depends only on the string, so it is cached and
    each call receives a deep copy of the parsed symbols (derivation sets their contexts), exactly what a
    fresh parse would return. Traced parses (``TW_CSG_TRACE``) are not cached.
    """
    import textworld.envs.pddl.textgen as textgen

    if _ORIGINAL_PARSE:
        return
    _ORIGINAL_PARSE.append(textgen._parse_and_convert)

    def parse(text, rule_name=None, **kwargs):
        if kwargs.get("trace") or set(kwargs) - {"trace"} or not isinstance(text, str):
            return _ORIGINAL_PARSE[0](text, rule_name=rule_name, **kwargs)
        return copy.deepcopy(_parsed_template(text, rule_name))

    textgen._parse_and_convert = parse


# Planner libraries of closed engines, reused by new ones (see close_engine).
_FREE_LIBS: list = []


def make_engine(walkthrough: bool = False):
    import fast_downward
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs.pddl import PddlEnv

    memoize_grammar_parses()
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
