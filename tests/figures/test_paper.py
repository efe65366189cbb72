"""The paper's numbers in figures/paper.py against the paper's LaTeX (when ../shared/paper is at hand) and
against each other (tables that repeat a number must agree)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from figures import paper
from ocsd.algorithm.methods import METHODS

PAPER = Path(__file__).resolve().parents[2].parent / "shared" / "paper" / "000_10c8ee70fc8ce85b.txt"
CELL = re.compile(r"\\meanstd\{([-\d.]+)\}\{([-\d.]+)\}|(?<![\w{])(-?\d+\.\d+)(?![\w}])")
MODEL = re.compile(r"\\textit\{(Qwen3-[\d.]+B)\}")
ROW_NAMES = {"Vanilla": "Vanilla", "GRPO+OPSD": "GRPO+OPSD", "GRPO": "GRPO", "OPSD": "OPSD", "RLSD": "RLSD",
             "SDAR": "SDAR", "OCSD (ours)": "OCSD", "w/o Ablated Teacher": "w/o Ablated Teacher",
             "w/ Random Selection": "w/ Random Select", "w/ Random Select": "w/ Random Select",
             "w/o Step Selection": "w/o Step Select", "w/o Step Select": "w/o Step Select",
             "w/o Sign Alignment": "w/o Sign Alignment"}
ROW = re.compile(r"(?:^|&)\s*(?:\\textbf\{|\\textit\{)?(" + "|".join(
    re.escape(n) for n in sorted(ROW_NAMES, key=len, reverse=True)) + r")", re.M)
TABLES = [  # label, the model of a table without model blocks, reader, columns
    ("tab:main_results", None, paper.main_results, paper.MAIN_COLUMNS),
    ("tab:searchqa", None, paper.searchqa_results, paper.SEARCHQA_COLUMNS),
    ("tab:search_qa_details", None, paper.searchqa_details, paper.SEARCHQA_DETAIL_COLUMNS),
    ("tab:ablation", "Qwen3-4B", lambda _, row: paper.ablation_results(row), paper.ABLATION_COLUMNS),
    ("tab:ablation_details", "Qwen3-4B", lambda _, row: paper.ablation_results(row, detailed=True),
     paper.MAIN_COLUMNS),
]


@pytest.fixture(scope="module")
def latex() -> str:
    if not PAPER.is_file():
        pytest.skip(f"the paper's source is not at {PAPER}")
    return PAPER.read_text()


def parse_table(text: str, label: str, model: str | None = None) -> dict:
    """{model: {row: [(mean, std or None), ...]}} of the table labelled ``label``, rows as the LaTeX prints them."""
    end = text.index(f"\\label{{{label}}}")
    block = text[text.rindex("\\begin{table", 0, end):end]
    body = "\n".join(line for line in block.splitlines() if not line.strip().startswith("%"))
    out = {}
    for row in body.split("\\\\"):
        found = MODEL.search(row)
        if found:
            model, row = found.group(1), row[found.end():]
        name = ROW.search(row)
        if model is None or name is None:
            continue
        values = [(float(m[1]), float(m[2])) if m[1] else (float(m[3]), None)
                  for m in CELL.finditer(row[name.end():])]
        if values:
            out.setdefault(model, {})[ROW_NAMES[name.group(1)]] = values
    return out


@pytest.mark.parametrize("label, model, reader, columns", TABLES, ids=[t[0] for t in TABLES])
def test_table_values_are_the_papers(latex, label, model, reader, columns):
    parsed = parse_table(latex, label, model)
    assert set(parsed) == ({model} if model else set(paper.MODELS))
    for name, rows in parsed.items():
        assert list(rows) == list(paper.ABLATION_METHODS if model else paper.PAPER_METHODS)
        for row, values in rows.items():
            got = reader(name, row)
            assert [(v.mean, v.std) for v in got.values()] == values and list(got) == list(columns)
            assert all(label in v.source and name in v.source and row in v.source for v in got.values())


def _flat(text: str) -> str:
    text = re.sub(r"\\(rho|beta)\b", r"\1", text.replace("\\%", "%").replace("$", ""))
    return " ".join(text.split())


@pytest.mark.parametrize("values", [paper.FEEDBACK_AUROC, *paper.SWAP_AUROC.values(), paper.RUNTIME,
                                    *paper.SENSITIVITY.values()])
def test_quoted_sentences_are_in_the_paper_with_these_numbers(latex, values):
    flat = _flat(latex)
    for value in values.values():
        quote = value.source.rsplit(": '", 1)[1].removesuffix("'")  # the sentence closes every source
        for part in quote.split(" ... "):
            assert _flat(part) in flat, part
        if not value.source.startswith("Table"):  # a value of a table is checked against the table
            assert re.search(rf"(?<![\d.]){value.mean:g}(?!\d)", quote) or f"{value.mean:.2f}" in quote, value


def test_scalars_follow_their_sentences():
    """Swap AUROCs in the sentence's model order, the overhead the sum of its parts, the sensitivity
    points at the settings the text names (GRPO's 70.6 at rho = 0 and beta = 0, OCSD's 82.8 at the default)."""
    assert [(v["realized"].mean, v["swapped"].mean) for v in paper.SWAP_AUROC.values()] == [
        (0.803, 0.542), (0.668, 0.484), (0.664, 0.552)]
    assert list(paper.SWAP_AUROC) == list(paper.MODELS)
    assert paper.RUNTIME["overhead_s"].mean == pytest.approx(
        paper.RUNTIME["replay_scoring_s"].mean + paper.RUNTIME["modulation_s"].mean)
    grpo, ocsd = paper.main_results("Qwen3-4B", "GRPO")["overall"], paper.main_results("Qwen3-4B", "OCSD")["overall"]
    for sweep, default in (("rho", 0.2), ("beta", 0.5)):
        assert paper.SENSITIVITY[sweep][0.0].mean == grpo.mean and paper.SENSITIVITY[sweep][default].mean == ocsd.mean
    assert paper.SENSITIVITY["rho"][1.0].mean == paper.ablation_results("w/o Step Select")["overall"].mean
    assert paper.SENSITIVITY["beta"][0.25].mean == paper.ablation_results("w/ Random Select")["overall"].mean


def test_tables_that_repeat_a_number_agree():
    """The ablation summary is its details' last three columns; the ablation tables' GRPO and OCSD rows are
    the main table's Qwen3-4B rows; the Search-QA summary's average is its details' average."""
    for row in paper.ABLATION_METHODS:
        details = paper.ablation_results(row, detailed=True)
        assert paper.ablation_results(row) == {
            col: paper.PaperValue(details[col].mean, details[col].std, paper.ablation_results(row)[col].source)
            for col in paper.ABLATION_COLUMNS}
    for row in ("GRPO", "OCSD"):
        main, details = paper.main_results("Qwen3-4B", row), paper.ablation_results(row, detailed=True)
        assert [(v.mean, v.std) for v in main.values()] == [(v.mean, v.std) for v in details.values()]
    for model in paper.MODELS:
        for method in paper.PAPER_METHODS:
            summary, details = paper.searchqa_results(model, method), paper.searchqa_details(model, method)
            assert (summary["avg"].mean, summary["avg"].std) == (details["avg"].mean, details["avg"].std)
            low, high = sorted((summary["id"].mean, summary["ood"].mean))
            assert low - 0.05 <= summary["avg"].mean <= high + 0.05, (model, method)


def test_method_names_are_registered():
    assert {m for m in paper.PAPER_METHODS.values() if m} | set(paper.ABLATION_METHODS.values()) <= set(METHODS)


def test_unknown_model_or_method_is_named():
    with pytest.raises(KeyError, match="Qwen3-0.6B.*Qwen3-1.7B"):
        paper.main_results("Qwen3-0.6B", "OCSD")
    with pytest.raises(KeyError, match="'ocsd'.*GRPO"):
        paper.searchqa_results("Qwen3-4B", "ocsd")
    with pytest.raises(KeyError, match="'w/o Everything'"):
        paper.ablation_results("w/o Everything")
