"""Merging subword tokens into word occurrences.

Rule (applied to the decoded text of one step's output, tokens in ``token_idx`` order):

1. The step's text is the concatenation of its token pieces (the ``token`` column).
2. A *structural tag* is its own word: ``<name>`` or ``</name>`` with ``name`` a letter followed
   by letters, digits, ``_`` or ``-`` (``<reason>``, ``</action>``, ``<search>``), and special
   tokens of the form ``<|name|>`` (``<|im_end|>``).
3. Every other word is a maximal run of non-whitespace characters that contains no structural tag;
   whitespace and tags are the only boundaries (punctuation stays attached: ``"1,"`` is one word).
4. A word's tokens are all tokens that contribute at least one character to it. A token spanning
   a boundary (``".</"``) belongs to both words; a token made only of whitespace belongs to none.
5. A word's signal is the unweighted mean of its tokens' signals.

Word *types* (for counting and lexicon look-up) are the lower-cased text with surrounding
punctuation removed; tags keep their brackets; a word made only of punctuation keeps its text.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

import numpy as np

__all__ = ["TAG_PATTERN", "WordSpans", "segment_words", "word_means", "word_type", "is_tag", "block_tokens"]

TAG_PATTERN = r"</?[A-Za-z][A-Za-z0-9_\-]*>|<\|[^|\s<>]*\|>"
_TAG_RE = re.compile(rf"^(?:{TAG_PATTERN})$")
_WORD_RE = re.compile(rf"{TAG_PATTERN}|(?:[^\s<]|<(?!/?[A-Za-z][A-Za-z0-9_\-]*>|\|[^|\s<>]*\|>))+")
_STRIP = string.punctuation + "\u201c\u201d\u2018\u2019\u2026"


@dataclass(frozen=True)
class WordSpans:
    """Word occurrences of a token table.

    Attributes
    ----------
    step : numpy.ndarray of shape (m,)
        Step id (as passed to :func:`segment_words`) of each word.
    first, last : numpy.ndarray of shape (m,)
        Inclusive range of token rows (positions in the input) that make up each word.
    text : list of str, length m
        The word's surface text.
    """

    step: np.ndarray
    first: np.ndarray
    last: np.ndarray
    text: list

    def __len__(self) -> int:
        return int(self.first.size)

    @property
    def n_tokens(self) -> np.ndarray:
        """Tokens per word, shape (m,)."""
        return self.last - self.first + 1


def _step_texts(tokens, step_ids, separator: str) -> tuple[list, np.ndarray]:
    """The token pieces as strings (a non-string as ""), ``separator`` after each step's last one, and the step ids as
    an array; refuses ids of the wrong length or a step whose tokens are not contiguous."""
    texts = [t if isinstance(t, str) else "" for t in tokens]
    step_ids = np.asarray(step_ids)
    if step_ids.shape != (len(texts),):
        raise ValueError(f"step_ids has shape {step_ids.shape}, expected ({len(texts)},)")
    if not texts:
        return texts, step_ids
    change = np.flatnonzero(step_ids[1:] != step_ids[:-1])
    if np.unique(step_ids).size != change.size + 1:
        raise ValueError("tokens of a step must be contiguous")
    for i in np.append(change, len(texts) - 1):
        texts[i] = texts[i] + separator
    return texts, step_ids


def segment_words(tokens, step_ids) -> WordSpans:
    """Split token pieces into word occurrences (rule in the module docstring).

    Parameters
    ----------
    tokens : sequence of str, length n
        Token pieces, grouped by step and in output order within each step.
    step_ids : array-like of int, shape (n,)
        Step id of each token; equal ids must be contiguous.

    Returns
    -------
    WordSpans
    """
    texts, step_ids = _step_texts(tokens, step_ids, "\n")  # the newline keeps words inside steps
    if not texts:
        empty = np.zeros(0, dtype=np.int64)
        return WordSpans(empty, empty, empty, [])
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    big = "".join(texts)
    spans = [(m.start(), m.end()) for m in _WORD_RE.finditer(big)]
    if not spans:
        empty = np.zeros(0, dtype=np.int64)
        return WordSpans(empty, empty, empty, [])
    arr = np.asarray(spans, dtype=np.int64)
    first = np.searchsorted(starts, arr[:, 0], side="right") - 1
    last = np.searchsorted(starts, arr[:, 1] - 1, side="right") - 1
    text = [big[a:b] for a, b in spans]
    return WordSpans(step_ids[first], first, last, text)


def word_means(values, spans: WordSpans) -> np.ndarray:
    """Mean of token values over each word's tokens.

    Parameters
    ----------
    values : array-like of shape (n,) or (n, k)
        Token-level values, aligned with the tokens given to :func:`segment_words`.
    spans : WordSpans

    Returns
    -------
    numpy.ndarray of shape (m,) or (m, k)
    """
    values = np.asarray(values, dtype=np.float64)
    flat = values.ndim == 1
    v = values[:, None] if flat else values
    csum = np.vstack([np.zeros((1, v.shape[1])), np.cumsum(v, axis=0)])
    out = (csum[spans.last + 1] - csum[spans.first]) / spans.n_tokens[:, None]
    return out[:, 0] if flat else out


def block_tokens(tokens, step_ids, tags) -> np.ndarray:
    """Which tokens write the content of a ``<tag>...</tag>`` block of their step.

    A block is an opening tag of one of ``tags`` and the next closing tag of the same name within one step (an
    unclosed block has no content). Its tokens run from the one that writes its first non-whitespace character to
    the one that writes its last; a token that writes a tag and content (``">go"``) is in, the tags alone are not.

    Parameters
    ----------
    tokens : sequence of str, length n
        Token pieces, grouped by step and in output order within each step.
    step_ids : array-like of int, shape (n,)
        Step id of each token; equal ids must be contiguous.
    tags : sequence of str
        Tag names (``("action",)``; ``("search", "answer")``).

    Returns
    -------
    numpy.ndarray of bool, shape (n,)
    """
    if any(not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]*", t) for t in tags):
        raise ValueError(f"tag names must be a letter followed by letters, digits, '_' or '-', got {list(tags)}")
    texts, _ = _step_texts(tokens, step_ids, "\x00")  # no block crosses the separator
    inside = np.zeros(len(texts), dtype=bool)
    if not texts or not tags:
        return inside
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    ends = np.cumsum(lengths)
    names = "|".join(re.escape(t) for t in tags)
    for match in re.finditer(rf"<({names})>([^\x00]*?)</\1>", "".join(texts)):
        content = match.group(2)
        if not content.strip():
            continue
        first = match.start(2) + len(content) - len(content.lstrip())
        last = match.end(2) - (len(content) - len(content.rstrip())) - 1  # the last content character
        inside[np.searchsorted(ends, first, side="right"):np.searchsorted(ends, last, side="right") + 1] = True
    return inside


def is_tag(text: str) -> bool:
    """Whether a word is a structural tag (``<reason>``, ``</action>``, ``<|im_end|>``)."""
    return bool(_TAG_RE.match(text))


def word_type(text: str) -> str:
    """Word type used for counting and lexicon look-up (see the module docstring)."""
    if is_tag(text):
        return text.lower()
    stripped = text.strip(_STRIP).lower()
    return stripped if stripped else text
