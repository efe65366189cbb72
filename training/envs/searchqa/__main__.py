"""``python -m training.envs.searchqa {serve,generate,play,bench}``: the offline Search-QA from the command line.

* ``serve``: run the built-in BM25 retrieval server (Search-R1 protocol, ``POST /retrieve``) until
  interrupted, over the Wikipedia lead summaries (``--corpus wiki``) or the paragraphs of a HotpotQA file
  (``--corpus hotpotqa:<file>``); point ``retrieval_urls`` at it.
* ``generate``: write the generated questions of a seed into ``games_dir`` (as a run with
  ``data=generated`` does on first use) and print where and how many.
* ``play``: play the expert's demonstration of the first ``--tasks`` generated validation questions through
  the built-in server, printing each step's action, labels and the final exact match.
* ``bench``: time the index build and the search latency over HTTP (``--queries`` searches of generated
  questions' planned queries, one at a time).

Bad input (a port out of range or in use, an unreadable corpus) is one line ``error: ...`` and exit status 2, before
any work.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from pathlib import Path

from ocsd.cli import entry_point, positive_int
from training.envs.searchqa.data import SearchDataError


def _config(args) -> types.SimpleNamespace:
    return types.SimpleNamespace(data="generated", games_dir=args.games_dir, seed=args.seed, n_train_games=10**9,
                                 n_val_games=10**9, task_types=None, val_split=None, retrieval_urls=None,
                                 retrieval_corpus="wiki", retrieval_topk=args.topk, retrieval_timeout=30.0,
                                 progress=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.envs.searchqa", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("serve", "generate", "play", "bench"))
    p.add_argument("--corpus", default="wiki", help="serve: 'wiki' or 'hotpotqa:<file>' (JSON Lines or JSON)")
    p.add_argument("--host", default="127.0.0.1", help="serve: address to listen on")
    p.add_argument("--port", type=int, default=8000, help="serve: port (0: any free port)")
    p.add_argument("--topk", type=positive_int("--topk"), default=3, help="passages per search when a request names none")
    p.add_argument("--games-dir", default="checkpoints/games", help="where generated questions are kept")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tasks", type=positive_int("--tasks"), default=3, help="play: questions to play")
    p.add_argument("--queries", type=positive_int("--queries"), default=200, help="bench: searches to time")
    return p


def _index(corpus: str):
    from training.envs.searchqa.corpus import BM25Index, hotpotqa_passages, wiki_passages
    from training.envs.searchqa.data import load_folder, read_rows, task_from_row

    if corpus == "wiki":
        return BM25Index(wiki_passages(), name="wiki")
    if corpus.startswith("hotpotqa:"):
        path = Path(corpus.split(":", 1)[1]).expanduser()
        if path.is_dir():
            tasks = [t for split in load_folder(path).values() for t in split]
        elif path.is_file():
            tasks = [task_from_row(r, path=path, index=i, split="test", root=path.parent)
                     for i, r in enumerate(read_rows(path))]
        else:
            raise SearchDataError(f"--corpus: {path} does not exist")
        if not all(t.context for t in tasks):
            raise SearchDataError(f"--corpus: {path} has questions without HotpotQA 'context' paragraphs")
        return BM25Index(hotpotqa_passages(t.context for t in tasks), name="hotpotqa")
    raise SearchDataError(f"--corpus: {corpus!r} must be 'wiki' or 'hotpotqa:<file>'")


def _bench(source, n: int) -> None:
    from training.envs.searchqa.client import RetrievalClient
    from training.envs.searchqa.tasks import corpus_index

    index = corpus_index("wiki")
    client = RetrievalClient(source.retrieval_urls()[0], topk=source.topk)
    queries = [q for t in source.valid + source.train for q in t.queries][:n]
    seconds = []
    for q in queries:
        start = time.perf_counter()
        client.search(q)
        seconds.append(time.perf_counter() - start)
    print(f"index: {len(index):,} passages built in {index.build_seconds:.2f} s")
    print(f"search over HTTP: {len(seconds)} queries, median {1000 * statistics.median(seconds):.2f} ms, "
          f"p95 {1000 * sorted(seconds)[int(0.95 * (len(seconds) - 1))]:.2f} ms")


def _serve(args) -> int:
    from training.envs.http_server import serve_command
    from training.envs.searchqa.server import retrieval_handler

    def build(address: str):
        index = _index(args.corpus)
        return retrieval_handler(index, args.topk), (
            f"retrieval server over {index.name} ({len(index):,} passages, index built in "
            f"{index.build_seconds:.2f} s) at {address}/retrieve")

    serve_command(args.host, args.port, build)
    return 0


def _main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    from training.envs.searchqa.tasks import SearchSource

    source = SearchSource.from_config(_config(args))
    try:
        if args.command == "generate":
            print(source.origin.split(":", 1)[1])
        elif args.command == "bench":
            _bench(source, args.queries)
        else:
            _play(source, args.tasks)
    finally:
        source.close()
    return 0


def _play(source, n: int) -> None:
    from ocsd.environments.searchqa import SEARCHQA
    from training.envs.runtime import print_expert_play
    from training.envs.searchqa.runtime import demonstration

    print_expert_play(source, demonstration, n, max_steps=SEARCHQA.max_steps, width=70,
                      outcome=lambda r: f"exact match {r.score:.0f}  won {r.won}")


main = entry_point(_main, "training.envs.searchqa")

if __name__ == "__main__":
    sys.exit(main())
