"""Words enriched in the tails of the checkpoint-centred signals (paper Fig. 2a).

Within each checkpoint, the token signals delta_F, delta_A and e are centred by their checkpoint
token means and merged into word occurrences (:mod:`diagnostics.words`). Tails, per checkpoint,
over that checkpoint's word occurrences:

* ``full+``      centred delta_F >= its 95th percentile
* ``ablated+``   centred delta_A >= its 95th percentile
* ``residual+``  centred e >= its 95th percentile
* ``residual-``  centred e <= its 5th percentile

(percentiles with numpy's linear interpolation; ``tail`` is adjustable). For each word type the
tail-hit rate is the fraction of its occurrences in the tail, computed per checkpoint and averaged
over the checkpoints where the type occurs with equal weight; ``count`` is its total number of
occurrences. Display size = ``rate * log(1 + count)``. Only types with a letter or digit are ranked
(punctuation-only words are left out of the clouds), and types rarer than ``min_count`` too.

Outputs: ``tails_top_words.csv`` with the top words of every tail and ``tails.json``, whose ``clouds`` hold
each tail's word-cloud sizes (its 100 largest); ``python -m figures.panels DIR/tails.json`` draws the clouds.

Command::

    python -m diagnostics.tails --run DIR [--out DIR] [--top 30] [--min-count 1] [--json]
"""

from __future__ import annotations

import sys
from itertools import combinations
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from diagnostics.load import DiagData, DiagnosticsError
from diagnostics.options import command_parser, load_args
from diagnostics.wordtable import word_table
from ocsd.cli import emit, entry_point, format_table, output_folder, positive_int, write_json
from ocsd.environments.lexicon import Lexicon

__all__ = ["TAILS", "tail_hits", "tail_rates", "jaccard", "tails", "cloud_frequencies", "cloud_file", "write_csv",
           "table", "main"]

TAILS = {"full+": ("full", "upper"), "ablated+": ("ablated", "upper"), "residual+": ("residual", "upper"),
         "residual-": ("residual", "lower")}
"""Tail name -> (centred word signal, side)."""


def tail_hits(values, ckpt, *, tail: float = 0.05, side: str = "upper") -> np.ndarray:
    """Whether each value is in its checkpoint's upper (or lower) ``tail`` fraction.

    Parameters
    ----------
    values : array-like of shape (n,)
    ckpt : array-like of int, shape (n,)
    tail : float, default 0.05
    side : {"upper", "lower"}

    Returns
    -------
    numpy.ndarray of bool, shape (n,)
    """
    if side not in ("upper", "lower"):
        raise ValueError(f"side must be 'upper' or 'lower', got {side!r}")
    if not 0 < tail < 1:
        raise ValueError(f"tail must be in (0, 1), got {tail}")
    values = np.asarray(values, dtype=np.float64)
    ckpt = np.asarray(ckpt)
    hits = np.zeros(values.size, dtype=bool)
    order = np.argsort(ckpt, kind="stable")
    bounds = np.flatnonzero(np.diff(ckpt[order])) + 1
    for block in np.split(order, bounds):  # one quantile per checkpoint
        if block.size == 0:
            continue
        v = values[block]
        if side == "upper":
            hits[block] = v >= np.quantile(v, 1 - tail)
        else:
            hits[block] = v <= np.quantile(v, tail)
    return hits


def tail_rates(words: pd.DataFrame, *, tail: float = 0.05, min_count: int = 1) -> pd.DataFrame:
    """Per word type and tail: checkpoint-averaged tail-hit rate, count and display size.

    Parameters
    ----------
    words : pandas.DataFrame
        A centred :func:`diagnostics.wordtable.word_table` (columns ``ckpt, type, full, ablated,
        residual``).
    tail : float, default 0.05
    min_count : int, default 1

    Returns
    -------
    pandas.DataFrame
        Columns ``tail, word, rate, count, size``, sorted by tail then decreasing size.
    """
    ranked = words[words["type"].str.contains(r"[A-Za-z0-9]", regex=True)]
    frames = []
    for name, (signal, side) in TAILS.items():
        hit = tail_hits(words[signal].to_numpy(), words["ckpt"].to_numpy(), tail=tail, side=side)
        w = ranked.assign(hit=hit[ranked.index.to_numpy()] if len(ranked) else np.zeros(0, bool))
        per_ckpt = w.groupby(["type", "ckpt"], observed=True)["hit"].mean()
        rate = per_ckpt.groupby(level="type").mean()
        count = w.groupby("type").size()
        frame = pd.DataFrame({"rate": rate, "count": count.reindex(rate.index)})
        frame = frame[frame["count"] >= min_count]
        frame["size"] = frame["rate"] * np.log1p(frame["count"])
        frame = frame.rename_axis("word").reset_index()
        frame.insert(0, "tail", name)
        frames.append(frame.sort_values(["size", "count", "word"], ascending=[False, False, True]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["tail", "word", "rate", "count", "size"])


def jaccard(a, b) -> float:
    """|a & b| / |a | b| (nan for two empty sets)."""
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else float("nan")


def tails(data: DiagData, *, tail: float = 0.05, top: int = 30, min_count: int = 1,
          lexicon: Lexicon | None = None, words: pd.DataFrame | None = None) -> tuple[dict, pd.DataFrame]:
    """Tail-enriched words of every tail and the overlap of the top sets.

    Returns
    -------
    (dict, pandas.DataFrame)
        ``{"n_words", "n_types", "n_checkpoints", "top": {tail: [{"word", "rate", "count", "size"}]},
        "overlap": {"full+|ablated+": jaccard, ...}, "clouds": {tail: {word: size}}}`` (the clouds:
        :func:`cloud_frequencies`) and the full rate table (:func:`tail_rates`).
    """
    if top < 1:
        raise DiagnosticsError(f"--top must be >= 1, got {top}")
    words = words if words is not None else word_table(data, lexicon=lexicon, centre=True)
    if len(words) == 0:
        raise DiagnosticsError("no words in the selected steps")
    rates = tail_rates(words, tail=tail, min_count=min_count)
    top_sets = {}
    out = {"n_words": int(len(words)), "n_types": int(words["type"].nunique()), "n_checkpoints": data.n_checkpoints,
           "tail": tail, "top_k": top, "top": {}, "overlap": {}}
    for name in TAILS:
        t = rates[rates["tail"] == name].head(top)
        top_sets[name] = t["word"].tolist()
        out["top"][name] = t[["word", "rate", "count", "size"]].to_dict(orient="records")
    for a, b in combinations(TAILS, 2):
        out["overlap"][f"{a}|{b}"] = jaccard(top_sets[a], top_sets[b])
    out["clouds"] = cloud_frequencies(rates)
    return out, rates


def cloud_frequencies(rates: pd.DataFrame, *, top: int = 100) -> dict[str, dict[str, float]]:
    """The words of each tail's cloud: tail -> {word: size} for its ``top`` largest positive sizes.

    Parameters
    ----------
    rates : pandas.DataFrame
        :func:`tail_rates`.
    top : int, default 100

    Returns
    -------
    dict
        Tails without a word of positive size are left out.
    """
    out = {}
    for name in TAILS:
        t = rates[(rates["tail"] == name) & (rates["size"] > 0)].head(top)
        if not t.empty:
            out[name] = dict(zip(t["word"], t["size"].astype(float)))
    return out


def cloud_file(tail: str) -> str:
    """The file name of a tail's word cloud, ``cloud_<tail>.png`` (``+`` -> ``_plus``, ``-`` -> ``_minus``)."""
    return f"cloud_{tail.replace('+', '_plus').replace('-', '_minus')}.png"


def write_csv(rates: pd.DataFrame, out_dir, *, top: int = 30) -> Path:
    """Write ``tails_top_words.csv`` (tail, rank, word, rate, count, size)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t = rates.groupby("tail", sort=False).head(top).copy()
    t.insert(1, "rank", t.groupby("tail", sort=False).cumcount() + 1)
    path = out_dir / "tails_top_words.csv"
    t.to_csv(path, index=False, float_format="%.6g")
    return path


def table(result: dict, n: int = 15) -> str:
    """Plain-text rendering: the top words of each tail side by side, then the overlaps."""
    names = list(TAILS)
    rows = []
    for i in range(n):
        row = [str(i + 1)]
        for name in names:
            items = result["top"][name]
            row.append(f"{items[i]['word']} ({items[i]['rate']:.2f}, {items[i]['count']})" if i < len(items) else "")
        rows.append(row)
    text = format_table(["#", *names], rows, title=(
        f"Top words by tail_rate*log(1+count), {result['n_words']} word occurrences in "
        f"{result['n_checkpoints']} checkpoints (entries: word (rate, count))"))
    overlap = format_table(["top-set pair", "Jaccard"], [[k, v] for k, v in result["overlap"].items()],
                           title=f"Overlap of the top-{result['top_k']} sets")
    return text + "\n\n" + overlap


def _main(argv: Sequence[str] | None) -> int:
    parser = command_parser("diagnostics.tails", __doc__.split("\n")[0], bootstrap=False)
    parser.add_argument("--out", type=output_folder, default="diagnostics_out",
                        help="folder for tails.json and the CSV (diagnostics_out)")
    parser.add_argument("--top", type=positive_int("--top"), default=30,
                        help="top words per tail in the CSV/JSON and overlap (30)")
    parser.add_argument("--tail", type=float, default=0.05, help="tail fraction (0.05)")
    parser.add_argument("--min-count", type=int, default=1, help="rank only types with at least this many occurrences")
    args = parser.parse_args(argv)
    if not 0 < args.tail < 0.5:
        raise DiagnosticsError(f"--tail must be in (0, 0.5), got {args.tail}")
    data = load_args(args)
    result, rates = tails(data, tail=args.tail, top=args.top, min_count=args.min_count)
    result["files"] = {"csv": str(write_csv(rates, args.out, top=args.top)), "json": str(Path(args.out) / "tails.json")}
    write_json(result["files"]["json"], result)
    emit(args.json, result, table(result) + "\n\nwrote: " + ", ".join(result["files"].values())
         + f"\nword clouds: python -m figures.panels {result['files']['json']}")
    return 0


main = entry_point(_main, "diagnostics.tails")


if __name__ == "__main__":
    sys.exit(main())
