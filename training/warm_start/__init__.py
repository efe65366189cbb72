"""Warm starts: where a policy's initial weights come from when it does not start from the base model.

A warm start is made by ``python -m training.sft`` and named by the ``warm_start`` setting of
:class:`training.config.TrainConfig`, by ``training.collect --model`` and ``training.evaluate --ckpt``. It
is one of

* an SFT run folder, a checkpoint of it (``global_step_N``) or its ``actor/``: the trainer's ``actor/``
  layout, a Hugging Face folder holding the warm-started weights (LoRA merged);
* an **exported adapter** (``python -m training.sft --export``): a LoRA adapter of the base model
  (``adapter_config.json``, ``adapter_model.safetensors``) with ``warm_start.json`` naming the base
  model and how the adapter was made. It is merged into the base model when loaded.

This package resolves, merges and exports warm starts; :mod:`training.warm_start.demonstrations` plays the expert
demonstrations they are trained on, and :mod:`training.warm_start.sft` is the supervised run (``SFTConfig``,
``SFTRun``) that ``python -m training.sft`` drives. The shipped warm start is package data in
``training/warm_starts/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ocsd.cli import same_place

__all__ = ["EXPORT_FILES", "WARM_START_FILE", "WarmStart", "WarmStartError", "export_adapter", "export_problem",
           "merge_adapter", "recorded_model", "resolve_warm_start"]

WARM_START_FILE = "warm_start.json"
"""An exported adapter's provenance: base model, command, data, seed, commit, hardware, minutes."""
EXPORT_FILES = ("adapter_config.json", "adapter_model.safetensors", WARM_START_FILE)
"""The files of an exported adapter (:func:`export_adapter`): all an export folder may hold."""


class WarmStartError(ValueError):
    """A warm-start path is missing or is none of the accepted layouts; the message names it."""


@dataclass(frozen=True)
class WarmStart:
    """A resolved warm start.

    Attributes
    ----------
    path : Path
        As given.
    weights : Path or None
        A Hugging Face folder holding the warm-started weights (an SFT checkpoint's ``actor/``).
    adapter : Path or None
        A LoRA adapter folder to merge into the base model (an exported warm start).
    base_model : str or None
        The base model the warm start was trained on: an exported adapter's (``warm_start.json``), or the ``model``
        setting of the run a checkpoint belongs to (its ``sft.json`` or ``run.json``); None when nothing says.
    info : dict
        The exported adapter's ``warm_start.json`` (empty for a checkpoint).
    """

    path: Path
    weights: Path | None = None
    adapter: Path | None = None
    base_model: str | None = None
    info: dict = field(default_factory=dict)

    def model_problem(self, model: str) -> str | None:
        """Why this warm start cannot start a run of ``model`` (the ``model`` setting): it was trained on another
        base model, whose weights (a checkpoint) or shapes (an adapter) the run would take under ``model``'s
        name; None when it fits or its base model is not recorded."""
        if self.base_model is None or same_place(self.base_model, model):
            return None
        what = "an adapter" if self.adapter is not None else f"a checkpoint (weights {self.weights})"
        return (f"{self.path} is {what} of model {self.base_model!r}, but model={model!r}; set model="
                f"{self.base_model} or use a warm start of {model}")


def recorded_model(actor: Path) -> str | None:
    """The ``model`` setting of the run whose checkpoint's ``actor/`` this is: ``sft.json``'s config (a
    ``training.sft`` run) or ``run.json`` (a training run); None when the run folder records none."""
    run = actor.parent.parent
    for name, read in (("sft.json", lambda d: (d.get("config") or {}).get("model")),
                       ("run.json", lambda d: d.get("model") or (d.get("config") or {}).get("model"))):
        try:
            data = json.loads((run / name).read_text())
        except (OSError, ValueError):
            continue
        model = read(data) if isinstance(data, dict) else None
        if isinstance(model, str) and model:
            return model
    return None


def resolve_warm_start(path: str | Path) -> WarmStart:
    """Resolve an exported adapter folder, an SFT checkpoint (``global_step_N`` or its ``actor/``) or an SFT
    run folder (its last checkpoint with weights).

    Raises
    ------
    WarmStartError
        Naming the path when it does not exist or holds none of these.
    """
    p = Path(path).expanduser()
    if not p.is_dir():
        raise WarmStartError(f"{path}: no such folder")
    if (p / "adapter_config.json").is_file():
        info = {}
        if (p / WARM_START_FILE).is_file():
            try:
                info = json.loads((p / WARM_START_FILE).read_text())
            except (OSError, ValueError) as exc:
                raise WarmStartError(f"{p / WARM_START_FILE}: not a readable JSON file ({exc})") from None
        return WarmStart(p, adapter=p, base_model=info.get("base_model"), info=info)
    if p.name == "actor" and (p / "config.json").is_file():
        return WarmStart(p, weights=p, base_model=recorded_model(p))
    if (p / "actor" / "config.json").is_file():
        return WarmStart(p, weights=p / "actor", base_model=recorded_model(p / "actor"))
    from ocsd.records import checkpoint_dirs

    found = [ckpt for _, ckpt in checkpoint_dirs(p) if (ckpt / "actor" / "config.json").is_file()]
    if found:
        return WarmStart(p, weights=found[-1] / "actor", base_model=recorded_model(found[-1] / "actor"))
    raise WarmStartError(f"{path}: neither an exported adapter (adapter_config.json), a checkpoint with weights "
                         f"(global_step_N/actor/config.json) nor a run folder holding one")


def export_problem(out: str | Path) -> str | None:
    """Why :func:`export_adapter` must not write to ``out``: a non-empty folder that is not an earlier export (it
    holds files other than :data:`EXPORT_FILES`, or no ``warm_start.json``), such as a training run, whose commands
    would then take the folder for the adapter; None for a new or empty folder or an earlier export."""
    folder = Path(out).expanduser()
    if not folder.is_dir():
        return None
    from ocsd.records import LOCK_FILE

    names = sorted(p.name for p in folder.iterdir() if p.name != LOCK_FILE)
    if not names or (set(names) <= set(EXPORT_FILES) and WARM_START_FILE in names):
        return None
    others = [n for n in names if n not in EXPORT_FILES] or names
    shown = ", ".join(others[:4]) + (", ..." if len(others) > 4 else "")
    return (f"{folder} is not empty ({shown}) and holds no exported adapter ({WARM_START_FILE}); the adapter would "
            f"then stand in for what the folder holds: export to a new or empty folder")


def merge_adapter(model, adapter: Path):
    """``model`` with the LoRA adapter in ``adapter`` merged into its weights (a plain model again, every weight
    trainable as before: peft loads an adapter for inference and freezes the model under it)."""
    from peft import PeftModel

    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    for param in merged.parameters():
        param.requires_grad_(True)
    return merged


def export_adapter(actor: Path, out: Path, info: dict, *, dtype: str = "bfloat16") -> Path:
    """Write the LoRA adapter of an SFT checkpoint's ``actor/`` to ``out`` as an exported warm start.

    The adapter's tensors are stored in ``dtype`` (bfloat16 halves the file; they are cast back to the
    model's dtype when merged), ``adapter_config.json`` names ``info["base_model"]`` as its base, and
    ``info`` is written to ``warm_start.json``.

    Raises
    ------
    WarmStartError
        When ``actor`` has no ``adapter/`` (a full fine-tune: pass its checkpoint as the warm start instead).
    """
    import torch
    from safetensors.torch import load_file, save_file

    source = actor / "adapter"
    if not (source / "adapter_config.json").is_file():
        raise WarmStartError(f"{actor}: no adapter/ (the checkpoint is a full fine-tune; use it as the warm start "
                             f"directly)")
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((source / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = info.get("base_model")
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tensors = load_file(source / "adapter_model.safetensors")
    cast = getattr(torch, dtype)
    save_file({k: v.to(cast).contiguous() for k, v in tensors.items()}, out / "adapter_model.safetensors")
    (out / WARM_START_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return out
