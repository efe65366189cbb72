"""The committed results are what the commands compute from the committed run folders (a change to the statistics
that moved a published number would fail here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnostics import auroc, report, strata
from diagnostics.load import load

RESULTS = Path(__file__).resolve().parents[2] / "results"
RUN = RESULTS / "ocsd_smollm2_vllm_s2"


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def test_the_report_auroc_is_recomputed():
    stored = _read(RUN / "report" / "report.json")["auroc"]
    fresh = auroc.feedback_auroc(load(RUN), n_boot=1000, seed=0)
    assert fresh["n_steps"] == stored["n_steps"]
    for signal, values in stored["signals"].items():
        for key in ("auroc", "ci_low", "ci_high"):
            assert fresh["signals"][signal][key] == pytest.approx(values[key], abs=1e-9)


def _compared_runs(series: Path) -> list[Path]:
    """The OCSD and GRPO runs of a series, whose checkpoints the series' diagnosis pools (the baselines' runs beside
    them are left out, so that the population stays the two methods' three seeds)."""
    return sorted(run for method in ("ocsd", "grpo") for run in series.glob(f"{method}_qwen*_s?"))


def _same(fresh, stored, where: str = "") -> None:
    """``fresh`` holds every value of ``stored`` (floats to 1e-9; keys ``stored`` lacks are new and allowed)."""
    if isinstance(stored, dict):
        for key, value in stored.items():
            assert key in fresh, f"{where}.{key} is gone"
            _same(fresh[key], value, f"{where}.{key}")
    elif isinstance(stored, list):
        assert len(fresh) == len(stored), where
        for i, (a, b) in enumerate(zip(fresh, stored)):
            _same(a, b, f"{where}[{i}]")
    elif isinstance(stored, float):
        assert fresh == pytest.approx(stored, abs=1e-9, nan_ok=True), where
    else:
        assert fresh == stored, where


def test_the_whole_report_is_recomputed():
    """Every number of the committed ``report.json`` (AUROC, Delta AUROC under every setting, D per role, tail words
    and overlaps) is what :func:`diagnostics.report.diagnose` computes from the run folder today."""
    stored = _read(RUN / "report" / "report.json")
    fresh, _ = report.diagnose(load(RUN), n_boot=1000, seed=0, progress=False)
    for part in ("auroc", "robustness", "dratio"):
        _same(fresh[part], stored[part], part)
    for part in ("top", "overlap", "n_words", "n_types", "n_checkpoints"):
        _same(fresh["tails"][part], stored["tails"][part], f"tails.{part}")


@pytest.mark.parametrize("by", ["evidence_words", "next_action"])
def test_the_strata_are_recomputed(by, capsys):
    stored = _read(RESULTS / "strata" / RUN.name / f"strata_{by}.json")
    assert strata.main(["--run", str(RUN), "--by", by, "--json"]) == 0
    fresh = json.loads(capsys.readouterr().out)
    assert [s["stratum"] for s in fresh["strata"]] == [s["stratum"] for s in stored["strata"]]
    for part in ("within", "pooled"):
        for signal, values in stored[part].items():
            assert fresh[part][signal] == pytest.approx(values, abs=1e-9)
    for part, values in stored["delta"].items():
        assert fresh["delta"][part] == pytest.approx(values, abs=1e-9)


def test_the_diagnosis_along_training_is_recomputed():
    """The third series' windows of 4 steps (``results/paper_scale/by_step/series3.json``) from its run folders."""
    from diagnostics.by_step import by_step

    series = RESULTS / "paper_scale" / "valid_train_series3"
    stored = _read(RESULTS / "paper_scale" / "by_step" / "series3.json")
    fresh = by_step(load(_compared_runs(series)), width=4, n_boot=1000, seed=0)
    _same(json.loads(json.dumps(fresh)), stored)


BASELINES_AT_20 = [f"series3_{m}_{b}_steps1-20" for m in ("rlsd", "sdar", "opsd", "grpo_opsd")
                   for b in ("grpo", "ocsd")]  # each baseline's step-20 run paired by step with GRPO s1 and OCSD s1


@pytest.mark.parametrize("name", ["series3_ocsd_grpo", "series2_ocsd_grpo", "series2_ocsd_grpo_steps1-25",
                                  "series3_rerun", *BASELINES_AT_20])
def test_the_paired_training_steps_are_recomputed(name, capsys):
    """``results/paper_scale/paired_steps/NAME.json``: the command, rerun on the runs and steps it names."""
    from diagnostics import paired_steps

    stored = _read(RESULTS / "paper_scale" / "paired_steps" / f"{name}.json")
    root = RESULTS.parent
    argv = [x for a, b in stored["runs"] for x in ("--pair", str(root / a), str(root / b))]
    if "steps" in name:
        argv += ["--steps", name.rsplit("steps", 1)[1]]
    assert paired_steps.main(argv + ["--json", "--metric", stored["metric"], "--block", str(stored["block"]),
                                     "--n-boot", str(stored["n_boot"])]) == 0
    fresh = json.loads(capsys.readouterr().out)
    fresh["runs"] = stored["runs"]
    _same(fresh, stored)


@pytest.mark.parametrize("series", [2, 3])
@pytest.mark.parametrize("method", ["ocsd", "grpo"])
@pytest.mark.parametrize("part", ["step", "action", "rest"])
def test_the_credit_of_each_methods_runs_is_recomputed(series, method, part, capsys):
    """``results/paper_scale/credit/seriesN_METHOD[_PART].json``: ``diagnostics.credit --part PART`` on the method's
    runs of the series, every seed."""
    from diagnostics import credit

    folder = RESULTS / "paper_scale" / f"valid_train_series{series}"
    suffix = "" if part == "step" else f"_{part}"
    stored = _read(RESULTS / "paper_scale" / "credit" / f"series{series}_{method}{suffix}.json")
    argv = [x for run in sorted(folder.glob(f"{method}_qwen0.5b_s?")) for x in ("--run", str(run))]
    assert credit.main(argv + ["--part", part, "--json"]) == 0
    _same(json.loads(capsys.readouterr().out), stored)


def test_the_third_series_table_at_step_50_is_rebuilt(tmp_path, capsys):
    """``valid_train_series3/eval_step50/table_main.md``: ``figures.tables`` over the six OCSD and GRPO runs with
    their step-50 evaluations (``--evals --eval-step 50``), beside the paper's Qwen3-1.7B."""
    from figures import tables

    series = RESULTS / "paper_scale" / "valid_train_series3"
    argv = [a for run in _compared_runs(series) for a in ("--run", str(run))]
    assert tables.main(argv + ["--evals", str(series), "--eval-step", "50", "--paper-reference", "Qwen3-1.7B",
                               "--format", "md", "--out", str(tmp_path)]) == 0
    capsys.readouterr()

    def rows(path: Path) -> list[str]:
        return [line for line in path.read_text().splitlines() if line.startswith("|")]

    assert rows(tmp_path / "table_main.md") == rows(series / "eval_step50" / "table_main.md")
    assert len(rows(tmp_path / "table_main.md")) == 6


def test_the_third_series_table_of_each_runs_latest_evaluation_is_rebuilt(tmp_path, capsys):
    """``valid_train_series3/table_latest/table_main.md``: ``figures.tables`` over every run of the series with its
    latest evaluation (``--evals`` alone: OCSD and GRPO at 50, the baselines at 20, each row naming its step)."""
    from figures import tables

    series = RESULTS / "paper_scale" / "valid_train_series3"
    argv = [a for run in sorted(series.glob("*_qwen0.5b_s?")) for a in ("--run", str(run))]
    assert tables.main(argv + ["--evals", str(series), "--paper-reference", "Qwen3-1.7B", "--format", "md",
                               "--out", str(tmp_path)]) == 0
    capsys.readouterr()

    def rows(path: Path) -> list[str]:
        return [line for line in path.read_text().splitlines() if line.startswith("|")]

    fresh = rows(tmp_path / "table_main.md")
    assert fresh == rows(series / "table_latest" / "table_main.md")
    assert any(line.startswith("| OCSD (step 50) | 3 |") for line in fresh)
    assert any(line.startswith("| SDAR (step 20) | 1 |") for line in fresh)


@pytest.mark.parametrize("by", ["evidence_words", "next_action"])
def test_the_third_series_strata_are_recomputed(by, capsys):
    """``valid_train_series3/strata/strata_<by>.json``: ``diagnostics.strata`` over the series' six OCSD and GRPO
    runs."""
    series = RESULTS / "paper_scale" / "valid_train_series3"
    stored = _read(series / "strata" / f"strata_{by}.json")
    argv = [a for run in _compared_runs(series) for a in ("--run", str(run))]
    assert strata.main(argv + ["--by", by, "--json"]) == 0
    runs = [str(run.relative_to(RESULTS.parent)) for run in _compared_runs(series)]
    assert stored.pop("source").split(", ") == runs  # the folders it was computed from, as given
    _same(json.loads(capsys.readouterr().out), stored)


def _pooled_swaps() -> list[Path]:
    """The pooled observation swaps of the paper-scale series whose analyses all lie beside them, one folder per run
    (``rescoring.swap --out FOLDER/NAME``)."""
    found = []
    for path in sorted((RESULTS / "paper_scale").glob("*/swap*/pooled*/swap.json")):
        runs = _read(path)["runs"]
        if len(set(runs)) == len(runs) and all((path.parents[1] / r / "swap.json").is_file() for r in runs):
            found.append(path)
    return found


@pytest.mark.parametrize("path", _pooled_swaps(), ids=lambda p: f"{p.parents[2].name}/{p.parents[1].name}/"
                                                              f"{p.parent.name}")
def test_the_pooled_swaps_are_recomputed(path):
    """A pooled swap (``rescoring.swap_pool``) is what pooling the committed analyses beside it gives today."""
    from rescoring.swap_pool import pool_swaps, read_swap

    stored = _read(path)
    fresh, _ = pool_swaps([read_swap(path.parents[1] / r) for r in stored["runs"]], n_boot=stored["n_boot"],
                          ci=stored["ci"], seed=stored["seed"])
    for part in ("realized", "swapped", "drop"):
        _same(fresh[part], stored[part], part)
    assert (fresh["n_progress"], fresh["n_invalid"]) == (stored["n_progress"], stored["n_invalid"])


@pytest.mark.parametrize("path", sorted((RESULTS / "paper_scale").glob("*/audit_*pooled*/audit_pool.json")),
                         ids=lambda p: f"{p.parents[1].name}/{p.parent.name}")
def test_the_pooled_audits_are_recomputed(path):
    """A pooled audit (``rescoring.audit_pool``) is what pooling the committed audits it names gives today."""
    from rescoring.audit_pool import pool_audits

    stored = _read(path)
    folders = [RESULTS.parent / audit["folder"] for audit in stored["audits"]]
    fresh, _ = pool_audits(folders, n_boot=stored["n_boot"], ci=stored["ci"], seed=stored["seed"])
    for part in ("raw", "standard", "n_steps", "n_invalid", "n_trajectories", "checkpoints"):
        _same(fresh[part], stored[part], part)


LADDERS = sorted(p.parent for p in (RESULTS / "paper_scale").glob("*/ladder_*/ladder.json")
                 if "paired" in json.loads(p.read_text()))


@pytest.mark.parametrize("folder", LADDERS, ids=[p.name for p in LADDERS])
def test_the_ladders_are_recomputed_from_their_rescorings(folder):
    """A ladder that keeps its re-scorings (``ladder_*/<model>/<run>/``): each rung's feedback AUROC and every two
    rungs' paired contrasts are what the statistics compute from the committed scores."""
    from diagnostics import scorers

    stored = _read(folder / "ladder.json")
    root = RESULTS.parent
    steps = stored["ckpt_steps"]
    paths = {m: [root / f / f"global_step_{s}" for f in r["folders"].values() for s in steps]
             for m, r in stored["rungs"].items()}
    for model, rung in stored["rungs"].items():
        fresh = auroc.feedback_auroc(load(paths[model]), n_boot=stored["n_boot"], seed=stored["seed"])
        _same(json.loads(json.dumps(fresh)), rung["pooled"]["auroc"], f"{model}.auroc")
    for pair in stored["paired"]:
        fresh = scorers.scorer_contrasts(load(paths[pair["a"]]), load(paths[pair["b"]]), n_boot=stored["n_boot"],
                                         seed=stored["seed"])
        _same(json.loads(json.dumps(fresh)), {k: v for k, v in pair.items() if k not in ("a", "b")},
              f"{pair['a']} - {pair['b']}")


def test_the_baselines_comparisons_at_step_20_are_recomputed(capsys):
    """``valid_train_series3/eval_step20/compare.txt``: ``diagnostics.compare`` of RLSD's, SDAR's, OPSD's and
    GRPO+OPSD's step-20 evaluations against the warm start, seed 1's GRPO and OCSD at 26 and 50, and each other,
    block by block."""
    from diagnostics import compare

    paper_scale = RESULTS / "paper_scale"
    series = paper_scale / "valid_train_series3"
    at = {k: series / f"eval_step{k}" for k in (20, 26, 50)}
    others = [paper_scale / "eval_qwen0.5b_warm.json"] + [at[k] / f"eval_{m}_qwen0.5b_s1_step{k}.json"
                                                          for k in (26, 50) for m in ("grpo", "ocsd")]
    baselines = [at[20] / f"eval_{m}_qwen0.5b_s1_step20.json" for m in ("rlsd", "sdar", "opsd", "grpo_opsd")]
    # each baseline, in the order it was evaluated, against the others and then every baseline before it
    pairs = [(a, b) for i, a in enumerate(baselines) for b in others + baselines[:i]]
    stored = [block.strip() for block in (at[20] / "compare.txt").read_text().split("\n\n") if block.strip()]
    assert len(stored) == len(pairs)
    for (a, b), block in zip(pairs, stored):
        assert compare.main([str(a), str(b)]) == 0
        assert capsys.readouterr().out.strip() == block
