"""Log-probs already computed by a re-scoring, kept by what they are the scores of.

A re-scoring of a 0.5B checkpoint takes 30-60 minutes on a 2-core CPU, and the statistics after it take seconds:
a command that stops after scoring (an error in its battery, a lost terminal, Ctrl-C between checkpoints) should
not have to score again. :class:`ScoreCache` keeps the result of each :meth:`rescoring.rescore.Rescorer.score` call
in a folder, under a digest of everything the scores depend on:

* the weights (the folder's weight and config files: names, sizes and modification times),
* the precision, the device type and the scorer's token budget (they change the batches and the last bits), and
* every item's view names, context token ids and response token ids, in order.

A call whose digest is there reads the scores back (the same float32 arrays); any change to a view's rendering,
the steps, the weights or the settings gives another digest, so stale scores are never reused.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

__all__ = ["SCORES_FOLDER", "ScoreCache", "weights_fingerprint"]

SCORES_FOLDER = ".scores"
"""Where ``rescoring.audit`` and ``rescoring.swap`` keep the scores in their ``--out`` folder until their results are
written (then it is removed)."""

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".json", ".pt", ".gguf")


def weights_fingerprint(weights: str | os.PathLike) -> str:
    """``weights`` with the name, size and modification time of each weight or config file of its folder.

    Parameters
    ----------
    weights : str or path-like
        A model folder, or a name the model catalogue resolves (its folder is used where it is installed).
    """
    folder = Path(weights)
    if not folder.is_dir():
        from ocsd.replay.models import ModelNotFoundError, resolve_model

        try:
            folder = Path(resolve_model(str(weights)))
        except ModelNotFoundError:  # a name that resolves to nothing is fingerprinted by itself
            return str(weights)
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in _WEIGHT_SUFFIXES)
    return str(weights) + "".join(f"|{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)


def _digest(settings: Sequence[str], contexts: Sequence[Mapping[str, Sequence[int]]],
            responses: Sequence[Sequence[int]]) -> str:
    h = hashlib.sha256()
    for part in settings:
        h.update(part.encode() + b"\0")
    for ctx, resp in zip(contexts, responses, strict=True):
        for view, ids in ctx.items():
            h.update(view.encode() + b"\0")
            h.update(np.asarray(ids, dtype=np.int64).tobytes() + b"\1")
        h.update(b"\2" + np.asarray(resp, dtype=np.int64).tobytes() + b"\3")
    return h.hexdigest()


class ScoreCache:
    """A folder of scores, one ``<digest>.npz`` per scoring call (module docstring).

    Parameters
    ----------
    folder : str or path-like
        Created on the first write.
    """

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.hits = 0
        self.misses = 0

    def key(self, settings: Sequence[str], contexts: Sequence[Mapping[str, Sequence[int]]],
            responses: Sequence[Sequence[int]]) -> str:
        """The digest of a call: ``settings`` (weights fingerprint, dtype, device, ...) and its items."""
        return _digest(settings, contexts, responses)

    def load(self, key: str, contexts: Sequence[Mapping[str, Sequence[int]]]) -> list[dict[str, np.ndarray]] | None:
        """The scores kept under ``key``, one dict per item in the views' order of ``contexts``; None when absent or
        unreadable (the call then scores again and replaces the file)."""
        path = self.folder / f"{key}.npz"
        if not path.is_file():
            self.misses += 1
            return None
        try:
            with np.load(path) as kept:
                scores = [{view: kept[f"{i}/{view}"] for view in ctx} for i, ctx in enumerate(contexts)]
        except (OSError, ValueError, KeyError):
            self.misses += 1
            return None
        self.hits += 1
        return scores

    def save(self, key: str, scores: Sequence[Mapping[str, np.ndarray]]) -> Path:
        """Keep ``scores`` under ``key`` (written beside, then renamed: a stop while writing leaves no torn file)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        arrays = {f"{i}/{view}": np.asarray(values) for i, item in enumerate(scores) for view, values in item.items()}
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
            path = self.folder / f"{key}.npz"
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path
