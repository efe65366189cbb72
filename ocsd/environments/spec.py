"""The environment registry: one :class:`EnvironmentSpec` per environment, looked up by name or alias.

Everything that differs between environments is a field of the spec: the interaction template and its
replay wording, the output parser, the action schemas g(a), the role lexicon, the feedback labels, the
step cap, the evaluation protocol, the privileged skill text of the baselines' teacher, and the
``runtime`` reference to the engine side. Code elsewhere never branches on an environment name; it
calls :func:`get_environment` and reads the spec.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ocsd.environments.formats import ParsedOutput
from ocsd.imports import import_reference
from ocsd.environments.labels import StepLabels
from ocsd.environments.lexicon import Lexicon

__all__ = ["COMMON_FIELDS", "ENVIRONMENTS", "EnvironmentSpec", "EvaluationProtocol", "FALLBACK_SCHEMA",
           "RuntimeNotImplemented", "environment_names", "get_environment", "normalise_action",
           "register_environment"]

FALLBACK_SCHEMA = "a future action"
"""Schema of an action that cannot be parsed (paper appendix: "a future action")."""

COMMON_FIELDS = frozenset({"task_description", "step_count", "history_length", "current_step",
                           "current_observation"})
"""Template fields every environment may use, filled by :func:`ocsd.replay.prompts.interaction_text`."""

REQUIRED_FIELDS = ("task_description", "step_count")
"""Template fields every environment must use."""

_WS = re.compile(r"\s+")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_RUNTIME = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_]\w*$")


class RuntimeNotImplemented(NotImplementedError):
    """A registered environment has no engine yet (its spec's ``runtime`` is None)."""


def normalise_action(action: object) -> str:
    """An action with whitespace runs collapsed and stripped; "" for a non-string."""
    if not isinstance(action, str):
        return ""
    return _WS.sub(" ", action).strip()


@dataclass(frozen=True)
class EvaluationProtocol:
    """How an environment's checkpoints are evaluated: one greedy trajectory per evaluation task.

    Attributes
    ----------
    splits : tuple of str
        Evaluation splits of the real data (ALFWorld ``valid_seen``, ``valid_unseen``).
    metrics : tuple of str
        Names of the reported metrics: keys the runtime's ``metrics(trajectories)`` result must have.
    """

    splits: tuple[str, ...]
    metrics: tuple[str, ...]

    def __post_init__(self) -> None:
        for name in ("splits", "metrics"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not value or not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"EvaluationProtocol.{name} must be a non-empty tuple of names, got {value!r}")
            if len(set(value)) != len(value):
                raise ValueError(f"EvaluationProtocol.{name} has duplicates: {value!r}")


@dataclass(frozen=True)
class EnvironmentSpec:
    """Everything environment-specific, for prompts, replay, diagnostics and training.

    Attributes
    ----------
    name : str
        Registry name (lower case, as in configs and ``meta.json``).
    display_name : str
        Name in tables and figures (``ALFWorld``, ``WebShop``, ``Search-QA``).
    template : str
        Interaction template (the paper's table, verbatim) with ``{field}`` placeholders: the
        :data:`COMMON_FIELDS` and those of ``template_fields``; ``{task_description}`` and
        ``{step_count}`` are required.
    template_fields : callable
        ``template_fields(shown, step_idx, current_obs, admissible_actions) -> dict`` of the fields that
        depend on the shown history (:mod:`ocsd.environments.formats`).
    output_parser : callable
        ``output_parser(text) -> (action, problems)``: the action of a model output ("" when none) and
        why its form is wrong (empty when well formed), e.g. a
        :class:`ocsd.environments.formats.TaggedOutput`. See :meth:`parse_output`.
    action_rule : callable
        ``action_rule(action) -> (family, schema)`` or None: the command family and the schema g(a) of
        a whitespace-normalised action, None when it does not parse. See :meth:`action_schema`.
    lexicon : callable
        Zero-argument factory of the role :class:`ocsd.environments.lexicon.Lexicon` (built on demand:
        only diagnostics need it, and it may read the engine's vocabulary when installed).
    max_steps : int
        Step cap: at most this many interaction steps per episode, in training and evaluation.
    invalid_action_penalty : float
        Default reward penalty of a step whose output is not well formed (a run's ``invalid_action_penalty``
        when its config sets none): SDAR's coefficient for the environment.
    evaluation : EvaluationProtocol
        Evaluation splits and reported metric names.
    aliases : tuple of str
        Other names :func:`get_environment` accepts (any letter case).
    replay_wording : (str, str) or None
        ``(interaction wording, replay wording)``: the last occurrence of the first in the filled
        template is replaced by the second in the replay views' prompt. None: the same text.
    default_history_length : int or None
        (observation, action) pairs shown by default; None shows all.
    labels : StepLabels
        Local-feedback label rules and the operators of the step records.
    skills : callable or None
        ``skills(task_type) -> str``: the privileged skill text of the baselines' teacher
        (:mod:`training.teachers`); None when none is written.
    task_types : tuple of str
        The environment's task types (success is reported per type; the ``task_types`` setting of a run
        chooses among them); empty when its tasks have none.
    runtime : str or None
        ``"module:attribute"`` naming the engine object of :mod:`training` (batched environments, task
        loading, evaluation tasks and metrics), imported only by :meth:`load_runtime`, so that
        :mod:`ocsd` never imports an engine. None while the engine is not implemented.
    """

    name: str
    display_name: str
    template: str
    template_fields: Callable[..., dict[str, str]]
    output_parser: Callable[[str], tuple[str, Sequence[str]]]
    action_rule: Callable[[str], tuple[str, str] | None]
    lexicon: Callable[[], Lexicon]
    max_steps: int
    evaluation: EvaluationProtocol
    aliases: tuple[str, ...] = ()
    replay_wording: tuple[str, str] | None = None
    default_history_length: int | None = None
    labels: StepLabels = field(default_factory=StepLabels)
    skills: Callable[[str], str] | None = None
    task_types: tuple[str, ...] = ()
    runtime: str | None = None
    invalid_action_penalty: float = 0.1

    def action_schema(self, action: object) -> str:
        """g(a): the natural-language schema of a future action, :data:`FALLBACK_SCHEMA` when it does not
        parse. Never raises: any input, including None and non-strings, yields a string."""
        parsed = self.action_rule(normalise_action(action))
        return FALLBACK_SCHEMA if parsed is None else parsed[1]

    def action_family(self, action: object) -> str:
        """Command family of an action (its verb, lower case), or ``"other"`` when it does not parse."""
        parsed = self.action_rule(normalise_action(action))
        return "other" if parsed is None else parsed[0].lower()

    def parse_output(self, text: object) -> ParsedOutput:
        """The action of a model output, whether it is well formed, and its family. Never raises."""
        if not isinstance(text, str):
            text = "" if text is None else str(text)
        action, problems = self.output_parser(text)
        if not action:
            return ParsedOutput("", False, "invalid", "; ".join(problems))
        return ParsedOutput(action, not problems, self.action_family(action), "; ".join(problems))

    def check_runtime(self) -> None:
        """Raise :class:`RuntimeNotImplemented` if the environment has no runtime yet (imports nothing)."""
        if self.runtime is None:
            ready = [s.name for s in ENVIRONMENTS.values() if s.runtime is not None]
            raise RuntimeNotImplemented(
                f"environment {self.name!r} ({self.display_name}) has no runtime: its engine is not implemented "
                f"yet; environments with one: {', '.join(ready) or 'none'}")

    def load_runtime(self) -> Any:
        """The engine object named by :attr:`runtime`, imported now.

        Raises
        ------
        RuntimeNotImplemented
            If the environment has no runtime yet.
        ImportError
            If the runtime's module cannot be imported (its engine is not installed).
        """
        self.check_runtime()
        return import_reference(self.runtime, what=f"environment {self.name!r}: runtime")


ENVIRONMENTS: dict[str, EnvironmentSpec] = {}
"""Registered environments by name, in registration order."""

_LOOKUP: dict[str, EnvironmentSpec] = {}


def _template_problem(spec: EnvironmentSpec) -> str:
    """Why the template and its fields do not fit together ("" when they do)."""
    try:
        parsed = list(string.Formatter().parse(spec.template))
    except ValueError as err:
        return f"template is not a format string ({err})"
    used = {f for _, f, _, _ in parsed if f is not None}
    if any(not f.isidentifier() for f in used):
        return f"template placeholders must be field names, got {sorted(used)}"
    try:
        fields = spec.template_fields((), 0, "", ())
    except Exception as err:  # a broken field builder is reported, not raised from the registry
        return f"template_fields((), 0, '', ()) raised {type(err).__name__}: {err}"
    if not isinstance(fields, dict):
        return "template_fields must return a dict of field values"
    missing = [f for f in REQUIRED_FIELDS if f not in used]
    unknown = sorted(used - COMMON_FIELDS - set(fields))
    unused = sorted(set(fields) - used)
    if missing:
        return f"template lacks the required field(s) {missing}"
    if unknown:
        return (f"template uses {unknown}, which neither the common fields {sorted(COMMON_FIELDS)} nor "
                f"template_fields provide")
    if unused:
        return f"template_fields provides {unused}, which the template never uses"
    return ""


def _problem(spec: EnvironmentSpec) -> str:
    """Why ``spec`` cannot be registered ("" when it can)."""
    if not isinstance(spec.display_name, str) or not spec.display_name.strip():
        return "display_name must be a non-empty string"
    for name in ("template_fields", "output_parser", "action_rule", "lexicon"):
        if not callable(getattr(spec, name)):
            return f"{name} must be callable"
    if spec.skills is not None and not callable(spec.skills):
        return "skills must be callable or None"
    if not isinstance(spec.template, str) or not spec.template:
        return "template must be a non-empty string"
    template = _template_problem(spec)
    if template:
        return template
    if spec.replay_wording is not None:
        pair = spec.replay_wording
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(p, str) and p for p in pair)):
            return f"replay_wording must be None or two non-empty strings, got {pair!r}"
        if pair[0] not in spec.template:
            return f"replay_wording: {pair[0]!r} does not occur in the template"
    if isinstance(spec.max_steps, bool) or not isinstance(spec.max_steps, int) or spec.max_steps < 1:
        return f"max_steps (the step cap) must be a positive integer, got {spec.max_steps!r}"
    penalty = spec.invalid_action_penalty
    if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not 0 <= penalty < float("inf"):
        return f"invalid_action_penalty must be a finite number >= 0, got {penalty!r}"
    length = spec.default_history_length
    if length is not None and (isinstance(length, bool) or not isinstance(length, int) or length < 0):
        return f"default_history_length must be None or an integer >= 0, got {length!r}"
    if not isinstance(spec.evaluation, EvaluationProtocol):
        return "evaluation must be an EvaluationProtocol"
    if not isinstance(spec.labels, StepLabels):
        return "labels must be a StepLabels"
    if spec.runtime is not None and not (isinstance(spec.runtime, str) and _RUNTIME.match(spec.runtime)):
        return f"runtime must be None or 'module.path:attribute', got {spec.runtime!r}"
    return ""


def register_environment(spec: EnvironmentSpec) -> EnvironmentSpec:
    """Add an environment to the registry after checking it.

    Names and aliases are unique (any letter case); the template's placeholders are the common fields
    and those of ``template_fields``, each used; the step cap is a positive integer; ``runtime`` is None
    or ``"module:attribute"``.

    Raises
    ------
    ValueError
        Naming the environment and what is wrong.
    TypeError
        If ``spec`` is not an :class:`EnvironmentSpec`.
    """
    if not isinstance(spec, EnvironmentSpec):
        raise TypeError(f"register_environment needs an EnvironmentSpec, got {type(spec).__name__}")
    if not isinstance(spec.name, str) or not _NAME.match(spec.name):
        raise ValueError(f"environment name must be lower-case letters, digits and '_', got {spec.name!r}")
    if not isinstance(spec.aliases, tuple) or not all(isinstance(a, str) and a.strip() for a in spec.aliases):
        raise ValueError(f"environment {spec.name!r}: aliases must be a tuple of non-empty strings")
    keys = [spec.name] + [a.strip().lower() for a in spec.aliases]
    if len(set(keys)) != len(keys):
        raise ValueError(f"environment {spec.name!r}: aliases repeat a name: {keys}")
    taken = [k for k in keys if k in _LOOKUP]
    if taken:
        owners = {k: _LOOKUP[k].name for k in taken}
        raise ValueError(f"environment {spec.name!r}: name or alias already registered: {owners}")
    problem = _problem(spec)
    if problem:
        raise ValueError(f"environment {spec.name!r}: {problem}")
    ENVIRONMENTS[spec.name] = spec
    _LOOKUP.update(dict.fromkeys(keys, spec))
    return spec


def get_environment(name: str) -> EnvironmentSpec:
    """The spec registered under ``name`` or one of its aliases (any letter case, surrounding spaces ignored).

    Raises
    ------
    ValueError
        If ``name`` names no registered environment; the message lists the known names.
    """
    spec = _LOOKUP.get(str(name).strip().lower())
    if spec is None:
        raise ValueError(f"unknown environment {name!r}; known: {', '.join(ENVIRONMENTS)}")
    return spec


def environment_names() -> tuple[str, ...]:
    """Names of the registered environments, in registration order (aliases excluded)."""
    return tuple(ENVIRONMENTS)
