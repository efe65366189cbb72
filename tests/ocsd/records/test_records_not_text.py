"""``run.json`` and ``metrics.jsonl`` that cannot be read as text (binary bytes, not UTF-8, a folder in their
place) are one problem or one error naming the file, never a traceback."""

from __future__ import annotations

import pytest

from ocsd.records import RecordError, RunWriter, read_metrics, read_run_info
from ocsd.records.__main__ import main as records_main

NOT_TEXT = b"\x89PNG\r\n\x1a\n\xff\xfe\x00binary"


@pytest.fixture
def run(tmp_path):
    writer = RunWriter(tmp_path / "run")
    writer.write_run_json({"run": "r", "method": "ocsd"})
    writer.append_metrics({"step": 1, "loss": 0.5})
    (writer.run_dir / "global_step_1" / "replay").mkdir(parents=True)
    return writer.run_dir


def _replace_by_folder(path):
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("x")


@pytest.mark.parametrize("name", ["run.json", "metrics.jsonl"])
@pytest.mark.parametrize("damage, message", [
    (lambda p: p.write_bytes(NOT_TEXT), "not UTF-8 text"),
    (_replace_by_folder, "is a folder, not a file"),
])
def test_validate_names_the_file_that_is_not_text(run, capsys, name, damage, message):
    damage(run / name)
    assert records_main(["validate", str(run)]) == 1
    out, err = capsys.readouterr()
    assert any(line.startswith(f"{run / name}: {message}") for line in out.splitlines()) and err == ""


@pytest.mark.parametrize("damage, message", [
    (lambda p: p.write_bytes(NOT_TEXT), "not UTF-8 text"),
    (_replace_by_folder, "is a folder, not a file"),
])
def test_readers_raise_one_line_record_errors(run, damage, message):
    for name, reader in (("run.json", read_run_info), ("metrics.jsonl", read_metrics)):
        damage(run / name)
        with pytest.raises(RecordError) as err:
            reader(run)
        assert str(err.value).startswith(f"{run / name}: {message}") and "\n" not in str(err.value)


def test_records_are_read_as_utf8_whatever_the_locale(run):
    """Non-ASCII text in ``run.json`` and ``metrics.jsonl`` is UTF-8 whatever the locale's encoding (here ASCII)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (run / "run.json").write_text('{"schema_version": 1, "run": "café☕"}\n', encoding="utf-8")
    (run / "metrics.jsonl").write_text('{"step": 1, "note": "naïve"}\n', encoding="utf-8")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
           "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    code = ("import sys; from ocsd.records import read_metrics, read_run_info; "
            "print(read_run_info(sys.argv[1])['run'].encode('unicode_escape').decode(), "
            "read_metrics(sys.argv[1])[0]['note'].encode('unicode_escape').decode())")
    out = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["caf\\xe9\\u2615", "na\\xefve"]
