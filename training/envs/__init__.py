"""Environment engines for agent rollouts: one subpackage per environment, and what they share.

:mod:`training.envs.alfworld`, :mod:`training.envs.webshop`, :mod:`training.envs.searchqa`
    The engines; each has a ``runtime`` module whose ``RUNTIME`` the environment registry
    (:mod:`ocsd.environments`) names, and a command (``python -m training.envs.<name>``).
:mod:`training.envs.runtime`, :mod:`training.envs.steps`, :mod:`training.envs.http_server`
    Shared by the engines: the runtime record, task lists and settings, the step records, and the HTTP server
    the local servers run on.

The engines do not import the trainer (:mod:`training.config`, the rollout): a task source reads the settings it
needs from whatever config object it is given.
"""
