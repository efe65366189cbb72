"""WebShop: shopping on a simulated e-commerce site (template, parser, schemas, lexicon, labels).

Interaction template: the paper's table "Interaction Prompt on WebShop", verbatim (its
``{available_actions}`` placeholder is named ``{admissible_actions}`` here, as in ALFWorld). The replay
wording is ALFWorld's change ("for **the** current step"). Outputs are ``<reason>...</reason>`` then
``<action>...</action>``; the action keeps its case.

Action schemas g(a): ``search[...]`` -> ``search[a query]``; ``click[...]`` by the kind of element
clicked: navigation buttons (``back to search``, ``next >``, ``< prev``), ``buy now`` and the item-page
tabs (``description``, ``features``, ``reviews``, ``attributes``) carry no entity and are kept verbatim
(:data:`WEBSHOP_FIXED_CLICKS`); a product id (ASIN, ten letters and digits such as ``b09kcmtnqp``) ->
``click[a product]``; any other clickable is a product option (size, colour, count) ->
``click[an option]``. The verb keeps its original case (``Search[...]`` -> ``Search[a query]``); an empty
argument (``search[]``) does not parse.

Labels: a step is ``invalid`` when the action is not available on the page (the engine answers
"Nothing happens: ..."), ``progress`` when it reaches a page state not seen earlier in the episode; the
operator is the verb before the bracket (``search``, ``click``).

Task types are WebShop's five product categories. Step cap 15; evaluation reports the environment's task
score (mean purchase reward in [0, 1]; tables show it in percent) and the success rate (score 1), overall
and per category (paper appendix "Evaluation Protocol"). The runtime is :data:`training.envs.webshop.runtime.RUNTIME`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ocsd.environments.formats import TaggedOutput, action_history_fields, bracket_command
from ocsd.environments.labels import StepLabels
from ocsd.environments.lexicon import CONNECTIVES, STATE_WORDS, Lexicon, inflect
from ocsd.environments.spec import EnvironmentSpec, EvaluationProtocol, normalise_action, register_environment

__all__ = ["CATEGORIES", "REPLAY_WORDING", "TEMPLATE", "WEBSHOP", "WEBSHOP_FIXED_CLICKS", "BracketLabels",
           "action_rule"]

TEMPLATE = (
    "You are an expert autonomous agent operating in the WebShop e-commerce environment.\n"
    "Your task is to: {task_description}.\n"
    "Prior to this step, you have already taken {step_count} step(s). Below are the most recent "
    "{history_length} observations and the corresponding actions you took: {action_history}\n"
    "You are now at step {current_step} and your current observation is: {current_observation}.\n"
    "Your admissible actions of the current situation are: [{admissible_actions}].\n"
    "\n"
    "Now it's your turn to take one action for the current step.\n"
    "You should first reason step-by-step about the current situation, then think carefully which "
    "admissible action best advances the shopping goal. This reasoning process MUST be enclosed "
    "within <reason> </reason> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current "
    "step and present it within <action> </action> tags."
)
"""The paper's table "Interaction Prompt on WebShop"."""

REPLAY_WORDING = ("an admissible action for current step", "an admissible action for the current step")
"""(interaction wording, replay wording): the same change as ALFWorld's."""

WEBSHOP_FIXED_CLICKS = frozenset({
    "back to search", "next >", "< prev", "buy now", "description", "features", "reviews", "attributes",
})
"""WebShop clickables that name a page control rather than an entity; kept verbatim in schemas."""

CATEGORIES = ("beauty", "electronics", "fashion", "food", "furniture")
"""WebShop's five product categories (Yao et al., 2022, section 3): the task types."""


@dataclass(frozen=True)
class BracketLabels(StepLabels):
    """Labels of ``verb[argument]`` actions: the operator is the verb before the bracket."""

    def operator_of(self, action: str) -> str:
        """``click[buy now]`` -> ``"click"`` when ``click`` is an operator, else ``"other"``."""
        parsed = bracket_command(normalise_action(action))
        verb = parsed[0].lower() if parsed else ""
        return verb if verb in self.operators else "other"


_ASIN = re.compile(r"^[a-z0-9]{10}$")


def action_rule(action: str) -> tuple[str, str] | None:
    """(family, schema) of a normalised WebShop command, None when it is neither a search nor a click."""
    parsed = bracket_command(action)
    if parsed is None:
        return None
    verb, arg = parsed
    if verb.lower() == "search":
        return "search", f"{verb}[a query]"
    if verb.lower() == "click":
        target = normalise_action(arg).lower()
        if target in WEBSHOP_FIXED_CLICKS:
            return "click", f"{verb}[{target}]"
        if _ASIN.match(target) and any(c.isdigit() for c in target):
            return "click", f"{verb}[a product]"
        return "click", f"{verb}[an option]"
    return None


def lexicon() -> Lexicon:
    """The WebShop role lexicon."""
    actions = inflect({"search": ("searches", "searching", "searched"), "click": ("clicks", "clicking",
                       "clicked"), "buy": ("buys", "buying", "bought"), "purchase": ("purchases", "purchasing"),
                       "select": ("selects", "selecting"), "choose": ("chooses", "choosing", "chose"),
                       "back": (), "prev": (), "next": ()})
    entities = frozenset("""product products item items price prices size sizes color colors colour colours
        option options result results page pages brand brands pack packs count quantity dollars dollar
        material style flavor flavors scent description features reviews attributes instruction
        """.split())
    states = STATE_WORDS | frozenset("available selected cheaper lower higher matching matched".split())
    return Lexicon(env="webshop", actions=actions, entities=entities, states=states,
                   connectives=CONNECTIVES - {"next"})


WEBSHOP = register_environment(EnvironmentSpec(
    name="webshop",
    display_name="WebShop",
    template=TEMPLATE,
    template_fields=action_history_fields,
    replay_wording=REPLAY_WORDING,
    default_history_length=2,
    output_parser=TaggedOutput(("action",)),
    action_rule=action_rule,
    lexicon=lexicon,
    labels=BracketLabels(operators=("search", "click")),
    task_types=CATEGORIES,
    max_steps=15,
    invalid_action_penalty=0.1,  # SDAR examples/sdar_trainer/run_webshop_qwen3.sh:59
    evaluation=EvaluationProtocol(splits=("test",), metrics=("score", "success_rate", "per_type")),
    runtime="training.envs.webshop.runtime:RUNTIME",
))
"""The WebShop entry."""
