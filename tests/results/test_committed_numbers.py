"""The committed results are what the commands compute from the committed run folders (a change to the statistics
that moved a published number would fail here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnostics import auroc, strata
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
