"""``python -m figures.panels``: the pictures of a diagnostics JSON, drawn from what the statistics wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from diagnostics import report, tails
from figures import panels
from tests.figures.test_figures import assert_png

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(runs):
    return runs["ocsd0"]


@pytest.fixture(scope="module")
def report_dir(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    assert report.main(["--run", str(run), "--out", str(out), "--n-boot", "30"]) == 0
    return out


def test_report_pictures_are_the_files_report_md_links(report_dir, tmp_path):
    written = panels.draw_file(report_dir / "report.json", tmp_path)
    names = {Path(p).name for p in written}
    links = {line.split("](")[1].rstrip(")") for line in (report_dir / "report.md").read_text().splitlines()
             if line.startswith("![")}
    assert names == links and len(names) >= 4
    for path in written:
        assert_png(Path(path))


def test_the_folder_of_a_report_draws_beside_it(report_dir):
    written = panels.draw_file(report_dir)
    assert {Path(p).parent for p in written} == {report_dir}


def test_the_report_credit_is_drawn_from_its_values(report_dir, tmp_path):
    panels.draw_file(report_dir / "report.json", tmp_path)
    drawn = json.loads((tmp_path / "credit_fig.json").read_text())
    stored = json.loads((report_dir / "report.json").read_text())["credit"]["labels"]
    for label, values in stored.items():
        assert drawn["the report's steps"]["push"][label]["value"] == pytest.approx(1e3 * values["push"]["estimate"])
        assert drawn["the report's steps"]["abs_q"][label]["low"] == pytest.approx(values["abs_q"]["ci_low"])


def test_tails_json_draws_its_clouds(run, tmp_path, capsys):
    assert tails.main(["--run", str(run), "--out", str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    written = panels.draw_file(tmp_path / "tails.json")
    assert [Path(p).name for p in written] == [tails.cloud_file(t) for t in result["clouds"]]


def test_a_report_without_clouds_draws_the_bars(report_dir, tmp_path):
    old = json.loads((report_dir / "report.json").read_text())
    del old["tails"]["clouds"], old["credit"]  # a report.json written before the clouds and the credit
    (tmp_path / "report.json").write_text(json.dumps(old))
    assert {Path(p).name for p in panels.draw_file(tmp_path / "report.json")} == {
        "auroc.png", "delta_auroc.png", "dratio.png"}


def test_other_json_is_refused_with_its_name(tmp_path):
    bad = tmp_path / "metrics.json"
    bad.write_text(json.dumps({"x": 1}))
    done = subprocess.run([sys.executable, "-m", "figures.panels", str(bad)], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert str(bad) in done.stderr and "diagnostics.report" in done.stderr
    missing = subprocess.run([sys.executable, "-m", "figures.panels", str(tmp_path / "nope.json")], cwd=ROOT,
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "nope.json does not exist" in missing.stderr
