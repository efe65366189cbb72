"""The environment registry: one :class:`EnvironmentSpec` per environment, as methods in the method registry.

A spec holds everything that differs between environments: the interaction template and its replay
wording, the output parser, the action schemas g(a) and families, the role lexicon, the local-feedback
label rules, the step cap, the evaluation protocol, the baselines' privileged skill text, and a
``"module:attribute"`` reference to the engine side in :mod:`training` (imported on demand by
:meth:`EnvironmentSpec.load_runtime`, so that :mod:`ocsd` never imports an engine). Code elsewhere looks
environments up with :func:`get_environment` and never branches on their names.

=========  ==========  =============================  ========  ============================  ===============
name       display     aliases                        step cap  evaluation                    runtime
=========  ==========  =============================  ========  ============================  ===============
alfworld   ALFWorld    alfred                         50        valid_seen, valid_unseen:     training.envs.
                                                                success rate per task type    alfworld.runtime
webshop    WebShop                                    15        test: score, success rate     training.envs.
                                                                per category                  webshop.runtime
searchqa   Search-QA   search-qa, search_qa, search   4         seven datasets: EM (ID, OOD,  training.envs.
                                                                average)                      searchqa.runtime
=========  ==========  =============================  ========  ============================  ===============

Registering an environment: write a module that builds its spec and calls :func:`register_environment`
(which checks names, aliases, template placeholders, the step cap, ...), and import it below.

Modules: :mod:`~ocsd.environments.spec` (the spec and the registry), :mod:`~ocsd.environments.formats`
(template fields and output parsing shared by entries), :mod:`~ocsd.environments.lexicon` (role lexicons),
:mod:`~ocsd.environments.labels` (feedback labels), and one module per entry.
"""

from ocsd.environments.spec import (ENVIRONMENTS, EnvironmentSpec, EvaluationProtocol, FALLBACK_SCHEMA,
                                    RuntimeNotImplemented, environment_names, get_environment,
                                    register_environment)
from ocsd.environments import alfworld, webshop, searchqa  # noqa: F401  (registers the entries, in this order)

__all__ = ["ENVIRONMENTS", "EnvironmentSpec", "EvaluationProtocol", "FALLBACK_SCHEMA", "RuntimeNotImplemented",
           "environment_names", "get_environment", "register_environment"]
