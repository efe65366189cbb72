"""Search-QA: open-domain question answering with a search engine (template, parser, schemas, lexicon, labels).

Interaction template: the paper's table "Interaction Prompt on Search-QA", verbatim. Its history is the
memory context (:func:`ocsd.environments.formats.memory_fields`); it has no admissible actions and no
sentence that the replay wording changes. Outputs are ``<reason>...</reason>`` then exactly one
``<search>q</search>`` or ``<answer>x</answer>`` block, which is the action. An output is well formed when it
holds exactly one such block (no second one, no unmatched search or answer tag), whatever its ``<reason>``
blocks: SDAR's projection checks only the action tags (SDAR agent_system/environments/env_package/search/
projection.py:60-86), while ALFWorld's and WebShop's outputs also need their one ``<reason>`` block. The
invalid-action penalty is SDAR's Search-QA coefficient, 0.01 (:attr:`EnvironmentSpec.invalid_action_penalty`).

Action schemas g(a): ``<search>q</search>`` -> ``<search>a query</search>``, ``<answer>x</answer>`` ->
``<answer>an answer</answer>``; the bracket forms ``search[q]`` / ``answer[x]`` (any case of the verb) ->
``search[a query]`` / ``answer[an answer]``. An empty or nested argument does not parse.

Role lexicon: words inside ``<search>`` and ``<answer>`` are entities, as are capitalised words that do
not start a sentence.

Labels (paper appendix "Local-Feedback Labels", applied to searches and answers): a step is ``invalid``
when its action is malformed (the engine rejects it) or its search finds nothing (the engine answers
SDAR's "No search results found.", the one no-effect template here: retrieved passages are free text, so
the general templates such as "cannot" are not matched against them); ``progress`` when a search returns a
passage not shown earlier in the episode or the answer is correct, else ``no_progress``. The operator is
the action's family, ``search`` or ``answer``.

Task types are the seven datasets and the question families generated from the CIA World Factbook for the
offline default (:mod:`training.envs.searchqa.factbook`). Step cap 4; evaluation on the seven datasets (NQ
and HotpotQA in domain, the other five out of domain), Exact Match micro-averaged over the in-domain,
out-of-domain and all datasets (paper appendix "Evaluation Protocol"). The runtime is
:data:`training.envs.searchqa.runtime.RUNTIME`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ocsd.environments.formats import TaggedOutput, bracket_command, memory_fields
from ocsd.environments.labels import StepLabels
from ocsd.environments.lexicon import Lexicon, inflect
from ocsd.environments.spec import EnvironmentSpec, EvaluationProtocol, normalise_action, register_environment

__all__ = ["DATASETS", "GENERATED_FAMILIES", "IN_DOMAIN", "NO_RESULTS_TEMPLATE", "SEARCHQA", "TEMPLATE",
           "TaggedLabels", "action_rule"]

TEMPLATE = (
    "You are an expert agent tasked with answering the given question step-by-step.\n"
    "Your question: {task_description}\n"
    "\n"
    "Prior to this step, you have already taken {step_count} step(s). Below is the interaction "
    "history where <search> </search> wrapped your past search queries and <information> "
    "</information> wrapped the corresponding search results returned by the external search "
    "engine. History:\n"
    "{memory_context}\n"
    "\n"
    "Now it's your turn to respond for the current step.\n"
    "You should first conduct reasoning process. This process MUST be enclosed within "
    "<reason> </reason> tags.\n"
    "After completing your reasoning, choose only one of the following actions (do not perform "
    "both):\n"
    "(1) If you find you lack some knowledge, you can call a search engine to get more external "
    "information using format: <search> your query </search>.\n"
    "(2) If you have enough knowledge to answer the question confidently, provide your final "
    "answer within <answer> </answer> tags, without detailed illustrations. For example, "
    "<answer>Beijing</answer>."
)
"""The paper's table "Interaction Prompt on Search-QA"."""

DATASETS = ("nq", "hotpotqa", "triviaqa", "popqa", "2wiki", "musique", "bamboogle")
"""Evaluation datasets, in-domain first (NQ, HotpotQA)."""

GENERATED_FAMILIES = ("factbook_capital", "factbook_location_capital", "factbook_capital_country",
                      "factbook_former_capital")
"""Question families of the offline default (``data=generated``), in-domain first."""

IN_DOMAIN = frozenset({"nq", "hotpotqa", "factbook_capital", "factbook_location_capital"})
"""Task types evaluated as in-domain (paper appendix "Evaluation Protocol": NQ and HotpotQA); the others are
out of domain."""

NO_RESULTS_TEMPLATE = "no search results found"
"""The feedback of a search that found nothing (SDAR agent_system/environments/env_package/search/third_party/
skyrl_gym/tools/search.py:239), lower case."""

_TAGGED = re.compile(r"^<(search|answer)>(.*)</\1>$", re.DOTALL | re.IGNORECASE)


def action_rule(action: str) -> tuple[str, str] | None:
    """(family, schema) of a normalised Search-QA action, None when it is neither a search nor an answer."""
    m = _TAGGED.match(action)
    if m:
        tag = m.group(1).lower()
        if not m.group(2).strip() or "<" + tag + ">" in m.group(2).lower():
            return None
        return tag, f"<{tag}>a query</{tag}>" if tag == "search" else f"<{tag}>an answer</{tag}>"
    parsed = bracket_command(action)
    if parsed is None:
        return None
    verb, _ = parsed
    if verb.lower() == "search":
        return "search", f"{verb}[a query]"
    if verb.lower() == "answer":
        return "answer", f"{verb}[an answer]"
    return None


@dataclass(frozen=True)
class TaggedLabels(StepLabels):
    """Labels of ``<search>q</search>`` / ``<answer>x</answer>`` actions: the operator is the action's family."""

    def operator_of(self, action: str) -> str:
        """``<search>q</search>`` and ``search[q]`` -> ``"search"`` when it is an operator, else ``"other"``."""
        parsed = action_rule(normalise_action(action))
        family = parsed[0] if parsed else ""
        return family if family in self.operators else "other"


def lexicon() -> Lexicon:
    """The Search-QA role lexicon."""
    actions = inflect({"search": ("searches", "searching", "searched"), "answer": ("answers", "answering",
                       "answered"), "query": ("queries", "querying"), "look": ("looks", "looking"),
                       "find": ("finds", "finding", "found"), "retrieve": ("retrieves", "retrieving")})
    return Lexicon(env="searchqa", actions=actions, argument_tags=("search", "answer"), proper_nouns=True,
                   states=frozenset())


SEARCHQA = register_environment(EnvironmentSpec(
    name="searchqa",
    display_name="Search-QA",
    aliases=("search-qa", "search_qa", "search"),
    template=TEMPLATE,
    template_fields=memory_fields,
    default_history_length=None,
    # SDAR's projection judges only the action tags (agent_system/environments/env_package/search/projection.py:
    # 60-86): no <reason> rule
    output_parser=TaggedOutput(("search", "answer"), keep_tag=True, reason_required=False),
    action_rule=action_rule,
    lexicon=lexicon,
    labels=TaggedLabels(no_effect_templates=(NO_RESULTS_TEMPLATE,), operators=("search", "answer")),
    task_types=DATASETS + GENERATED_FAMILIES,
    max_steps=4,
    invalid_action_penalty=0.01,  # SDAR examples/sdar_trainer/run_search_qwen3.sh:55 (every SDAR Search-QA script)
    evaluation=EvaluationProtocol(splits=DATASETS, metrics=("em_id", "em_ood", "em_avg")),
    runtime="training.envs.searchqa.runtime:RUNTIME",
))
"""The Search-QA entry."""
