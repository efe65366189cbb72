"""The Fig. 4 command and ``python -m figures.tables`` on inputs that are not text (binary bytes, not UTF-8, a
folder where a file belongs): exit status 2 and one line naming the file, nothing written."""

from __future__ import annotations

import shutil

import pytest

from figures import fig4_dynamics, tables
from tests.helpers import exit_and_stderr

NOT_TEXT = b"\x89PNG\r\n\x1a\n\xff\xfe\x00binary"


def _to_folder(path):
    path.unlink()
    path.mkdir()


@pytest.fixture
def run(runs, tmp_path):
    return shutil.copytree(runs["ocsd0"], tmp_path / "run")


def _one_error_line(code, err, file, message):
    assert code == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"{file}" in lines[0] and message in lines[0], err
    assert lines[0].count(str(file)) == 1


@pytest.mark.parametrize("command", [fig4_dynamics.main, tables.main])
@pytest.mark.parametrize("name", ["run.json", "metrics.jsonl"])
@pytest.mark.parametrize("damage, message", [(lambda p: p.write_bytes(NOT_TEXT), "not UTF-8 text"),
                                             (_to_folder, "is a folder, not a file")])
def test_run_files_that_are_not_text(run, tmp_path, capsys, command, name, damage, message):
    damage(run / name)
    out = tmp_path / "out"
    code, err = exit_and_stderr(command, ["--run", str(run), "--out", str(out)], capsys)
    _one_error_line(code, err, run / name, message)
    assert not out.exists()


def test_tables_index_that_is_not_text(tmp_path, capsys):
    index = tmp_path / "sweep" / "index.json"
    index.parent.mkdir()
    index.write_bytes(NOT_TEXT)
    out = tmp_path / "out"
    for given in (index, index.parent):  # the file, or the sweep's folder holding it
        code, err = exit_and_stderr(tables.main, ["--index", str(given), "--out", str(out)], capsys)
        _one_error_line(code, err, index, "not UTF-8 text")
    assert not out.exists()


def test_tables_evaluation_that_is_not_text(run, tmp_path, capsys):
    evaluation = run / "global_step_12" / "eval.json"
    evaluation.write_bytes(NOT_TEXT)
    out = tmp_path / "out"
    code, err = exit_and_stderr(tables.main, ["--run", str(run), "--out", str(out)], capsys)
    _one_error_line(code, err, evaluation, "not UTF-8 text")
    assert not out.exists()
