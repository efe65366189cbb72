"""The offline Search-QA: questions, a BM25 retrieval server speaking Search-R1's protocol, and batched episodes.

:mod:`~training.envs.searchqa.data`, :mod:`~training.envs.searchqa.factbook`
    The task record, exact match and the loaders of real question files; questions generated from the CIA World
    Factbook.
:mod:`~training.envs.searchqa.corpus`, :mod:`~training.envs.searchqa.server`, :mod:`~training.envs.searchqa.client`
    Passages and their BM25 index, the built-in retrieval server, and the client of retrieval servers.
:mod:`~training.envs.searchqa.env`
    Batched Search-QA episodes over retrieval servers.
:mod:`~training.envs.searchqa.tasks`, :mod:`~training.envs.searchqa.runtime`
    Where a run's questions and retrieval come from (:class:`~training.envs.searchqa.tasks.SearchSource`), and the
    runtime the registry's ``searchqa`` entry names.

``python -m training.envs.searchqa {serve,generate,play,bench}``: :mod:`training.envs.searchqa.__main__`.
"""
