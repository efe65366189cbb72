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
verl's policy-loss mode (every method runs; ``opsd``, without a policy-gradient term, gets
``actor_rollout_ref.actor.policy_loss.loss_mode=ocsd_no_policy_gradient``, :mod:`training.verl.losses`),
``trainer.n_gpus_per_node`` and ``trainer.nnodes`` must be counts >= 1, the run
folder must be writable and hold nothing but a verl run of the same settings (:func:`check_run_dir`: not a run of
``python -m training.train`` or of another command, nor unrelated files; ``ocsd.overwrite=true`` writes into it
anyway), and the task rows (:mod:`training.verl.tasks`) of the run's task source are written
to ``data.train_files`` and ``data.val_files``. Then verl's own launcher runs (``run_ppo`` with its v1 task
runner). ``--dry-run`` stops after these checks and prints the resolved config. An unknown key or preset is
refused in one line (exit 2) as well, from Hydra's own composition error (:func:`composition_problem`).

Runs on GPUs with vLLM and verl installed (``bash scripts/gpu_stack.sh`` with ``--verl``); ``scripts/verl/`` holds
the paper's launch commands.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from ocsd.cli import folder_problem
from ocsd.records import LOCK_FILE, METRICS_FILE, RUN_FILE
from training.config import DEVICE_FORM, ConfigError, TrainConfig
from training.verl.agent_loop import ocsd_settings, task_source
from training.verl.parity import BATCH_FOLDER
from training.verl.losses import policy_loss_mode
from training.verl.tasks import write_task_rows
from training.verl.trainer import supported_method

__all__ = ["check_run_dir", "composition_problem", "main", "prepare", "trainer_problem"]

DRY_RUN = "--dry-run"
VERL_RUN_ENTRIES = frozenset({"data", METRICS_FILE, RUN_FILE, LOCK_FILE, BATCH_FOLDER,
                              "latest_checkpointed_iteration.txt"})
"""What a verl run folder holds besides its ``global_step_N`` checkpoints (the task rows, the suite's records,
verl's pointer to the last checkpoint, the parity batches)."""


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
        models), ``actor_rollout_ref.actor.policy_loss.loss_mode`` names a policy loss for a method without a
        policy-gradient term, or ``actor_rollout_ref.model.path`` is not a model folder with its config and
        weights, nor an installed catalogue model.
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
    actor = config.actor_rollout_ref.actor
    given = actor.get("policy_loss", {}).get("loss_mode", "vanilla")
    spec = supported_method(settings.method, given)
    with open_dict(config):
        config.ocsd = OmegaConf.create(settings.to_dict())
        if not spec.policy_gradient:  # shown by --dry-run; the trainer's actor loss uses the same mode
            actor.policy_loss.loss_mode = policy_loss_mode(spec, given)
    check_run_dir(settings)
    for key in ("train_files", "val_files"):  # they may be moved out of the run folder
        problem = folder_problem(Path(str(config.data[key])).parent, write=True)
        if problem:
            raise ConfigError(f"data.{key}={config.data[key]}: {problem}")
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


def check_run_dir(settings: TrainConfig) -> None:
    """Refuse an ``ocsd.run_dir`` that cannot be written, or whose contents the run would mix with its own.

    The folder may be missing, empty, or hold a verl run of the same settings (which verl resumes); with
    ``ocsd.overwrite=true`` any writable folder is accepted. What a folder holds is decided as the single-device
    trainer decides it (:func:`training.trainer.check_run_folder`): its ``run.json``, whose ``backend`` says
    ``verl`` for a run of this command, and the same settings compared by :func:`training.trainer.changed_settings`.

    Raises
    ------
    training.config.ConfigError
        Naming ``ocsd.run_dir`` and what it holds: a folder that cannot be written, a run of
        ``python -m training.train`` or of another command, a verl run with other settings, or files that are
        not a run.
    """
    from training.trainer import RunFolderError, previous_run, changed_settings

    run_dir = Path(settings.run_dir).expanduser()
    problem = folder_problem(run_dir, write=True)
    if problem:
        raise ConfigError(f"ocsd.run_dir={settings.run_dir}: {problem}")
    if settings.overwrite or not run_dir.is_dir():
        return
    try:
        info = previous_run(run_dir)
    except RunFolderError as err:
        raise ConfigError(f"ocsd.{err}") from None
    if info is not None and info.get("backend") != "verl":
        raise ConfigError(f"ocsd.run_dir: {run_dir} holds a run of python -m training.train, not a verl run; use "
                          f"another ocsd.run_dir (ocsd.overwrite=true writes into it)")
    if info is not None:
        previous = info.get("config") if isinstance(info.get("config"), dict) else {}
        changed = changed_settings(previous, settings.to_dict())
        if changed:
            raise ConfigError(f"ocsd.run_dir: {run_dir} holds a verl run with other settings ({'; '.join(changed)}); "
                              f"use another ocsd.run_dir to keep it, or its settings to resume it")
        return
    others = sorted(p.name for p in run_dir.iterdir()
                    if p.name not in VERL_RUN_ENTRIES and not p.name.startswith("global_step_"))
    if others:
        shown = ", ".join(others[:4]) + (", ..." if len(others) > 4 else "")
        raise ConfigError(f"ocsd.run_dir: {run_dir} is not empty ({shown}) and holds no run (no {RUN_FILE}); use "
                          f"a new or empty ocsd.run_dir (ocsd.overwrite=true writes into it)")


def trainer_problem(config: DictConfig) -> str | None:
    """Why ``trainer.n_gpus_per_node`` or ``trainer.nnodes`` is not a count >= 1, or None."""
    trainer = config.get("trainer") or {}
    for key in ("n_gpus_per_node", "nnodes"):
        value = trainer.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"trainer.{key}={value!r}: must be an integer >= 1"
    return None


def composition_problem(err: Exception) -> str:
    """Hydra's composition error (an unknown key, preset or override syntax) as one line: its message without
    the config search path, the options it lists joined by commas, and its cause's first line."""
    parts: list[str] = []
    options: list[str] = []
    for line in str(err).splitlines():
        if line.startswith("Config search path") or line.startswith("See https://"):
            break
        if line.startswith("\t"):
            options.append(line.strip())
        elif line.strip():
            parts.append(line.strip().rstrip(":."))
    text = ". ".join(parts)
    if options:
        text += ": " + ", ".join(options)
    cause = str(err.__cause__ or "").strip().splitlines()
    if cause:
        text += f" ({cause[0].strip()})"
    return text


def _check_composition(overrides: list[str]) -> str | None:
    """Compose the config with ``overrides`` as the command will; Hydra's error as one line, or None."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(Path(__file__).parent / "config"), version_base="1.3"):
            compose(config_name="ocsd_trainer", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        return composition_problem(err)
    return None


def section_device_problem(device: object) -> str | None:
    """Why ``device`` is not a device the ``ocsd`` section may name ('cpu', 'cuda' or 'cuda:N'); None if it is one.

    verl places the models, so the section's device is replaced by ``cpu`` (what its CPU-only Ray processes read);
    a value outside these forms is a mistake, never silently replaced. CUDA need not be visible: a dry run checks
    a GPU config on any machine.
    """
    if device is None or DEVICE_FORM.fullmatch(str(device)):
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

    wanted = int(config.trainer.get("n_gpus_per_node", 1)) if "trainer" in config else 1  # >= 1: trainer_problem
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have >= wanted:
        return None
    return (f"verl needs GPUs: trainer.n_gpus_per_node={wanted}, this machine has {have}; on a CPU use "
            f"python -m training.train, or --dry-run to check the config")


def _run(config: DictConfig, dry_run: bool) -> None:
    missing = trainer_problem(config) or (None if dry_run else gpu_problem(config))
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
    overrides = sys.argv[1:]
    if not any(arg.startswith("-") for arg in overrides):  # Hydra's own flags (--help, --cfg, -m): its messages
        problem = _check_composition(overrides)
        if problem:
            print(f"training.verl.main: {problem}", file=sys.stderr)
            sys.exit(2)

    @hydra.main(config_path="config", config_name="ocsd_trainer", version_base="1.3")
    def entry(config: DictConfig) -> None:
        _run(config, dry_run)

    entry()


if __name__ == "__main__":
    main()
