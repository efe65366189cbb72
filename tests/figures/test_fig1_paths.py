"""Fig. 1's page and values name the checkpoint relative to the run folder, never by a path of the machine that
drew them (the committed docs/demo/fig1_example.html included)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from diagnostics.example import token_example
from figures import fig1_example

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("given", ["run", "checkpoint", "replay"])
def test_page_and_values_name_the_checkpoint_relative_to_the_run(runs, tmp_path, given):
    run = shutil.copytree(runs["ocsd0"], tmp_path / "somewhere" / "run")
    chosen = json.loads(json.dumps(token_example(run).as_dict()))["checkpoint"]
    folder = {"run": run, "checkpoint": Path(chosen), "replay": Path(chosen) / "replay"}[given]
    out = tmp_path / "out"
    assert fig1_example.main(["--run", str(folder), "--out", str(out)]) == 0
    page = (out / "fig1_example.html").read_text(encoding="utf-8")
    values = json.loads((out / "fig1_example.json").read_text())
    assert values["checkpoint"] == Path(chosen).name and Path(chosen).name.startswith("global_step_")
    assert f"<b>checkpoint</b> {values['checkpoint']}</p>" in page
    for text in (page, json.dumps(values)):
        assert str(tmp_path) not in text and str(tmp_path.resolve()) not in text


def test_shown_checkpoint(tmp_path):
    run = tmp_path / "run"
    assert fig1_example.shown_checkpoint(str(run.resolve() / "global_step_4"), run) == "global_step_4"
    assert fig1_example.shown_checkpoint(str(run.resolve() / "sub" / "global_step_4"), run) == "sub/global_step_4"
    assert fig1_example.shown_checkpoint(str(run.resolve()), run) == "run"
    assert fig1_example.shown_checkpoint("/elsewhere/global_step_2", run) == "global_step_2"


@pytest.mark.parametrize("name", ["fig1_example.html", "fig1_example.json"])
def test_committed_demo_names_no_machine_path(name):
    text = (ROOT / "docs" / "demo" / name).read_text(encoding="utf-8")
    for machine in ("/work/", "/root/", "/home/", "/tmp/", str(ROOT)):
        assert machine not in text, f"docs/demo/{name} shows the path {machine}..."
