"""``python -m training.verl.main [ocsd=alfworld|webshop|searchqa] [key=value ...]``: OCSD and its baselines on verl.

Hydra composes verl's ``ppo_trainer`` config with ``training/verl/config/ocsd_trainer.yaml``: the trainer
:class:`training.verl.trainer.OCSDTrainer` (``trainer.v1.trainer_mode=ocsd_sync``), the agent loop
:class:`training.verl.agent_loop.EnvironmentAgentLoop` (``ocsd_env``), the replay records beside every checkpoint
(:class:`training.verl.checkpoint.ReplayCheckpointCallback`), and a top-level ``ocsd:`` section holding the suite's
settings (:class:`training.config.TrainConfig`; ``ocsd=webshop`` picks the paper's WebShop setting,
``ocsd.method=grpo`` a baseline). verl's keys that the paper fixes (batch, rollouts, lr, clip, KL, lengths, steps,
run folder) follow the section; ``actor_rollout_ref.model.path`` names the policy: a Hugging Face folder
(``config.json`` and its weights, checked before anything is written) or an installed catalogue model (``smollm2``,
replaced by its folder); unset, the section's ``model`` with its ``warm_start`` merged, written once into
``$OCSD_CACHE/merged/`` (:func:`training.policy.initial_weights`). The section's ``device`` must be ``cpu``,
``cuda`` or ``cuda:N``; verl places the models, and the section is given ``cpu``.

Before verl starts, the section is completed with the suite's defaults and checked, the method is checked against
what verl's actor can compute, and the task rows (:mod:`training.verl.tasks`) of the run's task source are written
to ``data.train_files`` and ``data.val_files``. Then verl's own launcher runs (``run_ppo`` with its v1 task
runner). ``--dry-run`` stops after these checks and prints the resolved config.

Runs on GPUs with vLLM and verl installed (``bash scripts/gpu_stack.sh`` with ``--verl``); ``scripts/verl/`` holds
the paper's launch commands.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from training.config import ConfigError, TrainConfig
from training.verl.agent_loop import ocsd_settings, task_source
from training.verl.tasks import write_task_rows
from training.verl.trainer import supported_method

__all__ = ["main", "prepare"]

DRY_RUN = "--dry-run"


def prepare(config: DictConfig) -> TrainConfig:
    """Complete and check the ``ocsd`` section, and write the task rows verl's data set reads.

    Returns
    -------
    TrainConfig
        The run's settings.

    Raises
    ------
    training.config.ConfigError
        The section names an unknown setting or an invalid value (``device`` included, although verl places the
        models), the method needs a loss verl's actor does not compute, or ``actor_rollout_ref.model.path`` is
        not a model folder with its config and weights, nor an installed catalogue model.
    ValueError
        The environment's task source cannot be built from the section's data settings.
    """
    device = config.ocsd.get("device") if "ocsd" in config else None
    why = section_device_problem(device)
    if why:
        raise ConfigError(f"ocsd.device={device!r}: {why}")
    with open_dict(config):  # verl places the models; the section's device is read by CPU-only Ray processes too
        config.ocsd.device = "cpu"
    settings = ocsd_settings(config)
    supported_method(settings.method)
    with open_dict(config):
        config.ocsd = OmegaConf.create(settings.to_dict())
    given = config.actor_rollout_ref.model.get("path")
    if given:
        folder = policy_folder(str(given))
        with open_dict(config):
            config.actor_rollout_ref.model.path = str(folder)
    else:  # the section's model, with its warm start merged
        from training.policy import initial_weights

        with open_dict(config):
            config.actor_rollout_ref.model.path = str(initial_weights(settings.model, settings.warm_start,
                                                                      seed=settings.seed))
    source = task_source(settings)
    for split, key in (("train", "train_files"), ("valid", "val_files")):
        path = Path(str(config.data[key]))
        tasks = getattr(source, split)
        if not tasks:
            raise ConfigError(f"ocsd: the {settings.env} task source has no {split} tasks (data={settings.data!r})")
        write_task_rows(path, settings.env, tasks, split=split)
    return settings


def section_device_problem(device: object) -> str | None:
    """Why ``device`` is not a device the ``ocsd`` section may name ('cpu', 'cuda' or 'cuda:N'); None if it is one.

    verl places the models, so the section's device is replaced by ``cpu`` (what its CPU-only Ray processes read);
    a value outside these forms is a mistake, never silently replaced. CUDA need not be visible: a dry run checks
    a GPU config on any machine.
    """
    if device is None or re.fullmatch(r"(cpu|cuda)(:\d+)?", str(device)):
        return None
    return "must be 'cpu', 'cuda' or 'cuda:N' (verl places the models; the section's device becomes 'cpu')"


def policy_folder(path: str) -> Path:
    """The local Hugging Face folder ``actor_rollout_ref.model.path`` names: a folder with ``config.json`` and its
    weights, or a catalogue name (:mod:`ocsd.replay.catalog`, e.g. ``smollm2``) resolved to its installed folder.
    Only headers are read (:func:`ocsd.replay.models.check_model_folder`).

    Raises
    ------
    training.config.ConfigError
        Naming the key and the missing, unreadable or corrupt file (nothing is downloaded).
    """
    from ocsd.replay.catalog import ModelNotFoundError
    from ocsd.replay.models import check_model_folder

    try:
        return check_model_folder(path)
    except ModelNotFoundError as err:
        raise ConfigError(f"actor_rollout_ref.model.path={path!r}: {err}") from None


def gpu_problem(config: DictConfig) -> str | None:
    """Why the GPUs the config asks for (``trainer.n_gpus_per_node``) are not there, or None."""
    import torch

    wanted = int(config.trainer.get("n_gpus_per_node", 1) or 1) if "trainer" in config else 1
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have >= wanted:
        return None
    return (f"verl needs GPUs: trainer.n_gpus_per_node={wanted}, this machine has {have}; on a CPU use "
            f"python -m training.train, or --dry-run to check the config")


def _run(config: DictConfig, dry_run: bool) -> None:
    missing = None if dry_run else gpu_problem(config)
    if missing:  # before any work: Ray would wait for a GPU forever
        print(f"training.verl.main: {missing}", file=sys.stderr)
        sys.exit(2)
    try:
        prepare(config)
    except ValueError as err:  # ConfigError and the task sources' data errors: a setting to change
        print(f"training.verl.main: {err}", file=sys.stderr)
        sys.exit(2)
    if dry_run:
        print(OmegaConf.to_yaml(config, resolve=True))
        return
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    run_ppo(config, task_runner_class=TaskRunnerV1)


def register_defaults() -> None:
    """Register every :class:`TrainConfig` setting with its default as the config ``ocsd_defaults`` (the base of
    the ``ocsd`` section), so that ``ocsd.<key>=value`` overrides any setting, not only those the preset lists."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="ocsd_defaults", node=TrainConfig().to_dict())


def main() -> None:
    """The command (see the module docstring); Hydra parses ``sys.argv``."""
    dry_run = DRY_RUN in sys.argv
    if dry_run:
        sys.argv.remove(DRY_RUN)
    register_defaults()

    @hydra.main(config_path="config", config_name="ocsd_trainer", version_base="1.3")
    def entry(config: DictConfig) -> None:
        _run(config, dry_run)

    entry()


if __name__ == "__main__":
    main()
