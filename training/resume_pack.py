"""A run's resumable checkpoint as one compact file, small enough to keep beside the run's records.

A LoRA checkpoint written with ``save_merged=false`` holds, in ``actor/``, the adapter, the tokenizer and
``trainer_state.pt``: AdamW's two moments and the float32 master weights of the adapter (:mod:`training.precision`)
and the global step. For the 0.5B policy at rank 8 that is 4.4M trainable parameters and about 61 MB. A pack keeps
what a resumed run reads and nothing it can rebuild:

- the trainer state with the masters unchanged (float32: the weights the run continues from are exact) and AdamW's
  ``exp_avg`` and ``exp_avg_sq`` rounded to bfloat16 (a relative change of at most 2**-9 in each; the optimizer
  casts them back to float32 when the run resumes);
- the adapter's config; its weights only where they are not the masters rounded to the adapter's type. Where
  each master equals exactly one adapter tensor once rounded (a bfloat16 policy: always, in practice), the pack
  keeps the key of each master instead and :func:`unpack` writes the adapter from the masters, tensor for tensor
  the one the run saved;
- ``pack.json``: the run's name, the step, the sizes, and those keys.

The tokenizer is left out: the trainer takes it from the model (``policy_tokenizer``). About 36 MB for the 0.5B
(44 MB where the adapter's weights must be kept).

A run resumed from an unpacked checkpoint continues from the same weights with moments that differ by that
rounding; its later steps are then those of a run whose optimizer state was perturbed by at most 2**-9 relative,
not bit for bit the uninterrupted run's. The exact state stays where the run wrote it; the pack is the copy that
survives the loss of that machine.

Command line::

    python -m training.resume_pack pack RUN_DIR --out FILE [--step N]
    python -m training.resume_pack unpack FILE RUN_DIR [--force]
    python -m training.resume_pack show FILE

``show`` also prints how far the run's weights have moved: the Frobenius norm of the weight change the adapter applies
(:func:`lora_update_norm`), from the float32 masters. A LoRA that starts at zero on top of the model it trains (the
base model, or a warm start merged into it) measures the whole distance from the run's start.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tarfile
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load, load_file, save_file

from training.resumable import STATE_FILE, resumable_checkpoints

__all__ = ["MOMENTS", "PackError", "compact_state", "lora_update_norm", "master_keys", "pack", "pack_update_norm",
           "unpack", "read_pack_info"]

#: AdamW's per-parameter moments, the state a pack rounds
MOMENTS = ("exp_avg", "exp_avg_sq")
INFO_FILE = "pack.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
FORMAT = 1


class PackError(RuntimeError):
    """A pack cannot be written or read back; the message names the file or folder."""


def compact_state(state: dict, dtype: torch.dtype = torch.bfloat16) -> dict:
    """A copy of a trainer state (``{"optimizer": ..., "global_step": ...}``) with AdamW's moments cast to ``dtype``.

    Master weights, step counters and every other entry are kept as they are.

    Parameters
    ----------
    state : dict
        What :meth:`training.trainer.Trainer.save_checkpoint` writes to ``trainer_state.pt``.
    dtype : torch.dtype, default bfloat16
        The moments' storage type.
    """
    out = dict(state)
    optimizer = dict(state["optimizer"])
    if "adamw" in optimizer:
        optimizer["adamw"] = dict(optimizer["adamw"])
        holder = optimizer["adamw"]
    else:
        holder = optimizer
    holder["state"] = {key: {name: (value.to(dtype) if name in MOMENTS and torch.is_tensor(value) else value)
                             for name, value in per_param.items()}
                       for key, per_param in holder["state"].items()}
    out["optimizer"] = optimizer
    return out


def _signature(tensor: torch.Tensor) -> tuple:
    """A tensor's dtype, shape and bytes: equal signatures, equal tensors."""
    return str(tensor.dtype), tuple(tensor.shape), tensor.contiguous().view(torch.uint8).numpy().tobytes()


def master_keys(adapter_file: Path, state: dict) -> dict[str, list] | None:
    """``{index: [key, dtype]}``: for each float32 master of ``state``, an adapter tensor it rounds to exactly, one
    tensor each, every tensor taken; None where there is no such pairing (the adapter's weights must then be kept).

    Masters that round to the same values (a LoRA ``B`` still at zero, say) may take each other's keys: the adapter
    written from the pairing is the same.
    """
    masters = state["optimizer"].get("masters") if isinstance(state["optimizer"], dict) else None
    tensors = load_file(adapter_file)
    if not masters or len(masters) != len(tensors):
        return None
    free: dict[tuple, list[str]] = {}
    for key, value in tensors.items():
        free.setdefault(_signature(value), []).append(key)
    dtypes = {value.dtype for value in tensors.values()}
    if len(dtypes) != 1:
        return None
    dtype = dtypes.pop()
    keys = {}
    for i, master in masters.items():
        same = free.get(_signature(master.to(dtype)))
        if not same:
            return None
        keys[str(i)] = [same.pop(), str(dtype).removeprefix("torch.")]
    return keys


def _checkpoint(run_dir: Path, step: int | None) -> tuple[int, Path]:
    """``(N, global_step_N)`` of ``run_dir``: the given step, or the last complete checkpoint whose ``actor/`` holds a
    trainer state (the one ``training.trainer.resume_point`` resumes from; a half-written one is passed over)."""
    found = resumable_checkpoints(run_dir)
    if step is not None:
        found = [(n, path) for n, path in found if n == step]
    if not found:
        which = f"global_step_{step}" if step is not None else "any checkpoint"
        raise PackError(f"{run_dir}: {which} has no actor/{STATE_FILE} and replay/meta.json (a complete checkpoint "
                        f"written with weights)")
    return found[-1]


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def pack(run_dir: str | os.PathLike, out: str | os.PathLike, *, step: int | None = None) -> Path:
    """Write the resumable state of ``run_dir``'s checkpoint ``step`` (default: the last one with weights) into
    the tar file ``out`` (written beside it and renamed into place).

    Raises
    ------
    PackError
        If the run has no such checkpoint, or its ``actor/`` has no LoRA adapter (a full fine-tuning checkpoint
        holds the model's weights, which a pack does not keep).
    """
    run_dir, out = Path(run_dir), Path(out)
    n, folder = _checkpoint(run_dir, step)
    actor = folder / "actor"
    adapter = actor / "adapter"
    if not (adapter / ADAPTER_CONFIG).is_file():
        raise PackError(f"{actor}: no adapter/{ADAPTER_CONFIG}; a pack keeps LoRA runs only (full weights are "
                        f"the model's size)")
    try:
        state = torch.load(actor / STATE_FILE, map_location="cpu", weights_only=False)
    except Exception as exc:  # any damage: say which file
        raise PackError(f"{actor / STATE_FILE}: cannot be read ({type(exc).__name__}: {exc})") from None
    buffer = io.BytesIO()
    torch.save(compact_state(state), buffer)
    before = sum(f.stat().st_size for f in actor.rglob("*") if f.is_file())
    keys = master_keys(adapter / ADAPTER_WEIGHTS, state) if (adapter / ADAPTER_WEIGHTS).is_file() else None
    files = sorted(p for p in adapter.iterdir() if p.is_file() and not (keys and p.name == ADAPTER_WEIGHTS))
    after = buffer.getbuffer().nbytes + sum(p.stat().st_size for p in files)
    info = {"format": FORMAT, "run": run_dir.name, "global_step": n, "moments": "bfloat16",
            "actor_bytes": before, "pack_bytes": after, "adapter_from_masters": keys}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with tarfile.open(tmp, "w") as tar:
        _add_bytes(tar, INFO_FILE, json.dumps(info, indent=1).encode())
        for path in files:
            tar.add(path, arcname=f"adapter/{path.name}")
        _add_bytes(tar, STATE_FILE, buffer.getvalue())
    os.replace(tmp, out)
    return out


def read_pack_info(path: str | os.PathLike) -> dict:
    """The ``pack.json`` of a pack file.

    Raises
    ------
    PackError
        Naming the file when it is not a pack (no ``pack.json``, another format) or cannot be read.
    """
    path = Path(path)
    try:
        with tarfile.open(path) as tar:
            info = json.loads(tar.extractfile(INFO_FILE).read())
    except (OSError, KeyError, tarfile.TarError, json.JSONDecodeError, AttributeError) as exc:
        raise PackError(f"{path}: not a resume pack ({type(exc).__name__}: {exc})") from None
    if info.get("format") != FORMAT:
        raise PackError(f"{path}: pack format {info.get('format')!r}, this version reads {FORMAT}")
    return info


def unpack(path: str | os.PathLike, run_dir: str | os.PathLike, *, force: bool = False) -> Path:
    """Write a pack's ``actor/`` into ``run_dir/global_step_N`` (N the pack's step) and return that folder.

    The checkpoint folder must be there (the run's records, committed or carried without weights); the actor is
    written beside it and renamed into place, so a failure leaves the folder as it was.

    Raises
    ------
    PackError
        If the pack cannot be read, the run has no folder for its step, or that folder already has an
        ``actor/`` (``force=True`` replaces it).
    """
    path, run_dir = Path(path), Path(run_dir)
    info = read_pack_info(path)
    folder = run_dir / f"global_step_{info['global_step']}"
    if not folder.is_dir():
        raise PackError(f"{folder}: no such checkpoint folder; unpack {path.name} into the folder of run "
                        f"{info['run']!r} that holds its records")
    actor = folder / "actor"
    if actor.exists() and not force:
        raise PackError(f"{actor} exists; --force replaces it")
    tmp = folder / ".actor.unpack"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            if member.name == INFO_FILE:
                continue
            if not member.isfile() or member.name.startswith("/") or ".." in Path(member.name).parts:
                shutil.rmtree(tmp)
                raise PackError(f"{path}: unexpected member {member.name!r}")
            target = tmp / member.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(member).read())
    if info.get("adapter_from_masters"):
        masters = torch.load(tmp / STATE_FILE, map_location="cpu", weights_only=False)["optimizer"]["masters"]
        save_file({key: masters[int(i)].to(getattr(torch, dtype)).contiguous()
                   for i, (key, dtype) in info["adapter_from_masters"].items()},
                  tmp / "adapter" / ADAPTER_WEIGHTS, metadata={"format": "pt"})
    shutil.rmtree(actor, ignore_errors=True)
    os.replace(tmp, actor)
    return folder


def lora_update_norm(tensors: Mapping[str, torch.Tensor], config: Mapping) -> float:
    """The Frobenius norm of the weight change a LoRA adapter applies to the model under it.

    Each adapted module's weight changes by ``s B A`` (``s = lora_alpha / r``, or ``lora_alpha / sqrt(r)`` with
    rsLoRA); the norm is ``sqrt(sum over modules of ||s B A||_F^2)``, what merging the adapter adds to the weights.

    Parameters
    ----------
    tensors : Mapping[str, torch.Tensor]
        The adapter's weights, keyed as in ``adapter_model.safetensors`` (``...lora_A.weight``, ``...lora_B.weight``).
    config : Mapping
        Its ``adapter_config.json``: ``r``, ``lora_alpha`` and ``use_rslora``.

    Raises
    ------
    ValueError
        If a ``lora_A`` has no ``lora_B`` (or the reverse), there are no LoRA tensors, or the config sets per-module
        ranks or alphas (``rank_pattern``, ``alpha_pattern``), which this norm does not read.
    """
    for field in ("rank_pattern", "alpha_pattern"):
        if config.get(field):
            raise ValueError(f"adapter_config.json: {field} is set; the norm takes one r and lora_alpha for all")
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    scale = alpha / (rank ** 0.5 if config.get("use_rslora") else rank)
    a_keys = sorted(k for k in tensors if ".lora_A." in k)
    b_keys = sorted(k for k in tensors if ".lora_B." in k)
    if not a_keys or [k.replace(".lora_A.", ".lora_B.") for k in a_keys] != b_keys:
        raise ValueError("the adapter's lora_A and lora_B tensors do not pair up, module for module")
    total = torch.zeros((), dtype=torch.float64)
    for key in a_keys:
        a = tensors[key].to(torch.float64)
        b = tensors[key.replace(".lora_A.", ".lora_B.")].to(torch.float64)
        total += (scale * (b @ a)).square().sum()
    return float(total.sqrt())


def pack_update_norm(path: str | os.PathLike) -> float:
    """:func:`lora_update_norm` of a pack's adapter (a pack keeps LoRA runs only), from the float32 masters where the
    pack rebuilds the adapter from them, else from the adapter's weights as saved.

    Raises
    ------
    PackError
        Naming the file, if the pack, its adapter config, its adapter or its trainer state cannot be read.
    """
    path = Path(path)
    info = read_pack_info(path)
    try:
        with tarfile.open(path) as tar:
            config = json.loads(tar.extractfile(f"adapter/{ADAPTER_CONFIG}").read())
            if info.get("adapter_from_masters"):
                state = torch.load(io.BytesIO(tar.extractfile(STATE_FILE).read()), map_location="cpu",
                                   weights_only=False)
                masters = state["optimizer"]["masters"]
                tensors = {key: masters[int(i)] for i, (key, _) in info["adapter_from_masters"].items()}
            else:
                tensors = load(tar.extractfile(f"adapter/{ADAPTER_WEIGHTS}").read())
        return lora_update_norm(tensors, config)
    except (OSError, KeyError, ValueError, RuntimeError, tarfile.TarError) as exc:
        raise PackError(f"{path}: the adapter's update norm ({type(exc).__name__}: {exc})") from None


def _summary(path: Path, info: dict) -> str:
    """One line on what a pack holds."""
    rebuilt = info.get("adapter_from_masters")
    adapter = (f"the adapter's {len(rebuilt)} tensors rebuilt from the masters" if rebuilt
               else "the adapter's weights kept as saved")
    return (f"{path}: {info['run']} step {info['global_step']}, AdamW moments in {info['moments']}, "
            f"{info['pack_bytes'] / 1e6:.1f} MB (actor/ {info['actor_bytes'] / 1e6:.1f} MB); {adapter}; the weight "
            f"change the adapter applies, ||s B A||_F: {pack_update_norm(path):.4f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.resume_pack", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="a run's checkpoint into one file")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--out", type=Path, required=True, help="the pack file to write")
    p.add_argument("--step", type=int, default=None, help="the checkpoint (default: the last one with weights)")
    u = sub.add_parser("unpack", help="a pack's actor/ back into the run folder")
    u.add_argument("pack", type=Path)
    u.add_argument("run_dir", type=Path)
    u.add_argument("--force", action="store_true", help="replace an actor/ already there")
    s = sub.add_parser("show", help="what a pack holds")
    s.add_argument("pack", type=Path)
    s.add_argument("--json", action="store_true", help="its whole pack.json (with the adapter's tensor map)")
    args = parser.parse_args(argv)
    try:
        if args.command == "pack":
            out = pack(args.run_dir, args.out, step=args.step)
            print(_summary(out, read_pack_info(out)))
        elif args.command == "unpack":
            print(unpack(args.pack, args.run_dir, force=args.force) / "actor")
        elif args.json:
            print(json.dumps(read_pack_info(args.pack), indent=1))
        else:
            print(_summary(args.pack, read_pack_info(args.pack)))
    except PackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
