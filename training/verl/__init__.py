"""The veRL backend: OCSD and its baselines through verl 0.9.1's public extension points (never a fork).

Modules:

- :mod:`~training.verl.tasks`: the suite's tasks as rows of a verl data set, and back;
- :mod:`~training.verl.agent_loop`: :class:`~training.verl.agent_loop.EnvironmentAgentLoop`, a verl agent loop
  that plays one episode of any registered environment through verl's rollout server and returns one output
  per interaction step;
- :mod:`~training.verl.checkpoint`: the checkpoint callback that writes the replay-score records beside every
  verl checkpoint (``global_step_N/replay/``);
- :mod:`~training.verl.losses`: the distilling methods' loss in verl's actor (verl's PPO loss plus the gated
  distillation term on the teacher's log-probs), and the policy loss of OPSD, which has no policy-gradient term;
- :mod:`~training.verl.logprobs`: verl's per-token log-prob fallback (without flash-attn) as the same computation
  on blocks of rows, which the plugin installs;
- :mod:`~training.verl.parity`: the same kept batch through verl's and the single-device trainer's computation;
- :mod:`~training.verl.plugin`: the registration that the ``verl.plugins`` entry point (or
  ``VERL_USE_EXTERNAL_MODULES=training.verl.plugin``) loads in every process that imports verl.

Importing this package imports verl first (when it is installed): verl loads its plugins at import, and this
package's plugin imports the modules here, so they must not be half-imported when that happens (as they would be
if ``python -m training.verl.main`` imported verl only from inside one of them).
"""

try:
    import verl  # noqa: F401
except ImportError:  # the modules that need verl fail when imported, naming it
    pass
