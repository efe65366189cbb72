"""Search-QA questions: the task record, exact match, and the loaders of real question files.

Real data (``data=<folder>``): every ``*.parquet``, ``*.jsonl`` and ``*.json`` file under the folder.

* Search-R1's preprocessed layout (``train.parquet`` / ``test.parquet``, and FlashRAG's per-data-set
  ``<name>/<split>.jsonl``): the question is ``question`` (else ``extra_info.question`` or
  ``env_kwargs.question``); the gold answers are ``golden_answers``, else ``reward_model.ground_truth``
  (``{"target": [...]}``, a list or a string; SDAR examples/data_preprocess/preprocess_search_r1_dataset.py:
  50-61 and skyrl_gym/envs/search/utils.py:94), else ``env_kwargs.ground_truth``; the data set is
  ``data_source`` (SDAR .../preprocess_search_r1_dataset.py:64), else the first folder or file name that
  names one of the seven (``nq``, ``hotpotqa``, ``triviaqa``, ``popqa``, ``2wikimultihopqa``/``2wiki``,
  ``musique``, ``bamboogle``).
* HotpotQA (the official JSON files, a list of objects, and the JSON Lines sample): ``question``,
  ``answer``, ``context`` (``[title, [sentences]]`` pairs, or ``{"title", "sentences"}`` objects), ``_id``
  or ``id``; the data set is ``hotpotqa`` and the paragraphs travel with the question (the distractor
  setting's retrieval corpus).

A file whose name holds ``train`` is a training file; every other file is an evaluation file (test, dev).
A row without a question or an answer, or whose data set cannot be told, stops the load with an error
naming the file, the row and the field.

Exact match: both sides lower-cased, punctuation removed, the articles a/an/the removed and whitespace
collapsed, in this order; the answer matches when it equals any gold answer (SDAR agent_system/
environments/env_package/search/third_party/skyrl_gym/envs/search/utils.py:22-49).
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ocsd.cli import InputError
from ocsd.environments.searchqa import DATASETS

__all__ = ["DATA_SET_NAMES", "SearchDataError", "SearchTask", "exact_match", "load_folder", "normalize_answer",
           "read_rows", "task_from_row"]

DATA_SET_NAMES = {"nq": "nq", "naturalquestions": "nq", "hotpotqa": "hotpotqa", "triviaqa": "triviaqa",
                  "popqa": "popqa", "2wikimultihopqa": "2wiki", "2wiki": "2wiki", "musique": "musique",
                  "bamboogle": "bamboogle"}
"""``data_source`` values and file-name prefixes -> the registry's data set names (:data:`DATASETS`)."""
_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


class SearchDataError(InputError):
    """Missing or unusable Search-QA data or retrieval set-up; the message names the file, field, setting or URL (a
    usage error: one line, exit status 2)."""


@dataclass(frozen=True)
class SearchTask:
    """One question.

    Attributes
    ----------
    game : str
        Question id (``nq:test:12``, a HotpotQA id, ``factbook:capital:ke``).
    split : str
        ``train``, ``test`` or (generated) ``valid``.
    task_type : str
        Its data set (``nq``, ...) or generated question family (``factbook_capital``, ...).
    question : str
    answers : tuple of str
        Gold answers; any one matches.
    context : tuple of (str, str)
        HotpotQA's paragraphs (title, text) of the question; empty otherwise.
    queries : tuple of str
        Generated questions: the searches that find the answer, in order (the expert's plan); empty otherwise.
    """

    game: str
    split: str
    task_type: str
    question: str
    answers: tuple[str, ...]
    context: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    queries: tuple[str, ...] = ()

    def to_json(self) -> dict:
        """A JSON object of the task (read back by :meth:`from_json`)."""
        return {"game": self.game, "split": self.split, "task_type": self.task_type, "question": self.question,
                "answers": list(self.answers), "queries": list(self.queries)}

    @classmethod
    def from_json(cls, row: dict) -> "SearchTask":
        """The task of a :meth:`to_json` object."""
        return cls(str(row["game"]), str(row["split"]), str(row["task_type"]), str(row["question"]),
                   tuple(str(a) for a in row["answers"]), queries=tuple(str(q) for q in row.get("queries", ())))


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles (a, an, the), single spaces (SDAR .../search/utils.py:22-36)."""
    text = "".join(ch for ch in str(text).lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, answers: Iterable[str]) -> bool:
    """Whether ``prediction`` equals any gold answer after :func:`normalize_answer`."""
    got = normalize_answer(prediction)
    return any(got == normalize_answer(a) for a in answers)


def _plain(value: Any) -> Any:
    """numpy arrays and scalars of a parquet row as Python lists and values."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return _plain(value.tolist())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def read_rows(path: Path) -> list[dict]:
    """The rows of a ``.parquet``, ``.jsonl`` or ``.json`` (a list of objects) file.

    Raises
    ------
    SearchDataError
        Naming the file (and line) that cannot be read.
    """
    try:
        if path.suffix == ".parquet":
            import pandas as pd

            return [_plain(r) for r in pd.read_parquet(path).to_dict(orient="records")]
        text = path.read_text(encoding="utf-8")
    except Exception as exc:  # pyarrow's and the OS's errors alike: name the file
        raise SearchDataError(f"{path}: cannot be read: {type(exc).__name__}: {exc}") from None
    if path.suffix == ".jsonl":
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise SearchDataError(f"{path}: line {n} is not JSON: {exc}") from None
    else:
        try:
            rows = json.loads(text)
        except ValueError as exc:
            raise SearchDataError(f"{path}: not JSON: {exc}") from None
        if not isinstance(rows, list):
            raise SearchDataError(f"{path}: must hold a JSON list of question objects")
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise SearchDataError(f"{path}: row {bad} is not a JSON object")
    return rows


def _get(row: dict, *path: str) -> Any:
    for key in path:
        if not isinstance(row, dict) or key not in row:
            return None
        row = row[key]
    return row


def _answers(row: dict) -> Any:
    for value in (row.get("golden_answers"), _get(row, "reward_model", "ground_truth"),
                  _get(row, "env_kwargs", "ground_truth"), row.get("answer")):
        if isinstance(value, dict):
            value = value.get("target")
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list) and value and all(isinstance(a, (str, int, float)) for a in value):
            return tuple(str(a) for a in value)
    return None


def _context(row: dict, where: str) -> tuple[tuple[str, str], ...]:
    out = []
    for item in row.get("context") or ():
        if isinstance(item, dict):
            title, sentences = item.get("title"), item.get("sentences")
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            title, sentences = item
        else:
            title, sentences = None, None
        if not isinstance(title, str) or not isinstance(sentences, list):
            raise SearchDataError(f"{where}: field 'context' must hold [title, [sentences]] pairs")
        out.append((title, "".join(str(s) for s in sentences).strip()))
    return tuple(out)


def _data_set(path: Path, row: dict, root: Path) -> str | None:
    source = row.get("data_source")
    if isinstance(source, str) and source.strip():
        return DATA_SET_NAMES.get(re.sub(r"[^a-z0-9]", "", source.lower()))
    if "context" in row and "answer" in row:
        return "hotpotqa"
    parts = [*path.relative_to(root).parent.parts, path.stem] if path.is_relative_to(root) else [path.stem]
    for part in parts:
        key = re.sub(r"[^a-z0-9]", "", part.lower())
        for alias in sorted(DATA_SET_NAMES, key=len, reverse=True):
            if key.startswith(alias):
                return DATA_SET_NAMES[alias]
    return None


def task_from_row(row: dict, *, path: Path, index: int, split: str, root: Path) -> SearchTask:
    """The task of one row of a question file.

    Raises
    ------
    SearchDataError
        Naming the file, the row and the missing or unusable field.
    """
    where = f"{path}: row {index}"
    question = next((q for q in (row.get("question"), _get(row, "extra_info", "question"),
                                 _get(row, "env_kwargs", "question")) if isinstance(q, str) and q.strip()), None)
    if question is None:
        raise SearchDataError(f"{where}: no question (field 'question', 'extra_info.question' or "
                              f"'env_kwargs.question')")
    answers = _answers(row)
    if answers is None:
        raise SearchDataError(f"{where}: no gold answers (field 'golden_answers', 'reward_model.ground_truth' "
                              f"or 'answer')")
    kind = _data_set(path, row, root)
    if kind is None:
        raise SearchDataError(f"{where}: unknown data set: field 'data_source' is {row.get('data_source')!r} "
                              f"and no folder or file name names one of {', '.join(DATASETS)}")
    qid = row.get("_id", row.get("id", _get(row, "extra_info", "index")))
    game = f"{kind}:{split}:{qid if qid is not None else index}"
    return SearchTask(game, split, kind, " ".join(question.split()), answers, _context(row, where))


def load_folder(folder: Path) -> dict[str, list[SearchTask]]:
    """The questions of every question file under ``folder`` by split (``train``, ``test``), in file order.

    Raises
    ------
    SearchDataError
        Naming the folder when it holds no question file, or the file and field of a bad row.
    """
    root = Path(folder).expanduser()
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".parquet", ".jsonl", ".json"))
    if not files:
        raise SearchDataError(f"data={folder}: no question files (*.parquet, *.jsonl, *.json) in the folder")
    out: dict[str, list[SearchTask]] = {"train": [], "test": []}
    for path in files:
        split = "train" if "train" in path.stem.lower() else "test"
        out[split] += [task_from_row(r, path=path, index=i, split=split, root=root)
                       for i, r in enumerate(read_rows(path))]
    return out
