"""The command-line conventions every ``python -m`` command shares (``ocsd.cli``)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest

from ocsd.cli import SkipCommand, UsageError, emit, fmt, format_table, jsonable, positive_int, run_main, write_json
from ocsd.records import RecordError


def test_jsonable_plain_types_and_non_finite():
    value = {1: np.int64(3), "f": np.float32(0.5), "nan": math.nan, "inf": np.float64(np.inf), "b": np.bool_(True),
             "a": np.arange(3), "p": Path("x/y"), "t": (1, 2.5)}
    out = jsonable(value)
    assert out == {"1": 3, "f": 0.5, "nan": None, "inf": None, "b": True, "a": [0, 1, 2], "p": "x/y", "t": [1, 2.5]}
    json.dumps(out, allow_nan=False)
    assert type(out["1"]) is int and type(out["b"]) is bool


def test_write_json_writes_the_jsonable_value_with_a_final_newline(tmp_path):
    value = {"auroc": np.float64(0.61), "ci": np.array([0.5, np.nan]), "n": np.int32(7)}
    path = write_json(tmp_path / "result.json", value, indent=1)
    text = path.read_text()
    assert text.endswith("}\n") and text == json.dumps(jsonable(value), indent=1) + "\n"
    assert json.loads(text) == {"auroc": 0.61, "ci": [0.5, None], "n": 7}


@pytest.mark.parametrize("text, ok", [("1", 1), ("12", 12), ("0", None), ("-3", None), ("x", None)])
def test_positive_int_names_the_flag(text, ok):
    parse = positive_int("--tasks")
    if ok is not None:
        assert parse(text) == ok
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="--tasks"):
            parse(text)


def test_fmt_and_table():
    assert fmt(None) == fmt(math.nan) == "nan" and fmt(3) == "3" and fmt(0.12345) == "0.123"
    table = format_table(["name", "value"], [["a", 1.0], ["longer", 0.5]], title="T")
    lines = table.splitlines()
    assert lines[0] == "T" and lines[1].startswith("name") and len({len(l) for l in lines[1:]}) == 1


def test_emit_json_and_table(capsys):
    emit(True, {"x": np.float64(math.nan)}, "ignored")
    assert json.loads(capsys.readouterr().out) == {"x": None}
    emit(False, {}, "a table\n")
    assert capsys.readouterr().out == "a table\n"


@pytest.mark.parametrize("exc, code", [(UsageError("--flag: bad"), 2), (RecordError("meta.json: bad"), 2),
                                       (FileNotFoundError("nope"), 2), (SkipCommand("no data"), 1)])
def test_run_main_exit_codes(exc, code, capsys):
    def body(argv):
        raise exc

    assert run_main(body, [], prog="cmd") == code
    err = capsys.readouterr().err
    assert str(exc.args[0]) in err and "Traceback" not in err
    assert err.startswith("cmd: skipped: " if code == 1 else "error: ")


def test_run_main_extra_errors_and_success():
    class Custom(Exception):
        pass

    def raise_custom(argv):
        raise Custom("x")

    assert run_main(raise_custom, [], errors=(Custom,)) == 2
    assert run_main(lambda argv: 0, []) == 0
    with pytest.raises(Custom):
        run_main(raise_custom, [])


def test_folder_and_seed_types(tmp_path):
    from ocsd.cli import folder_problem, non_negative_int, output_folder

    (tmp_path / "f").write_text("")
    assert folder_problem(tmp_path) is None and folder_problem(tmp_path / "new" / "deeper") is None
    taken = f"{tmp_path / 'f'} is a file, not a folder"
    assert folder_problem(tmp_path / "f") == folder_problem(tmp_path / "f" / "x") == taken
    assert output_folder(str(tmp_path / "new")) == str(tmp_path / "new")
    with pytest.raises(argparse.ArgumentTypeError, match="is a file"):
        output_folder(str(tmp_path / "f" / "x"))
    seed = non_negative_int("--seed")
    assert seed("0") == 0 and seed(" 7 ") == 7
    for bad in ("-1", "1.5", "x", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="--seed must be an integer >= 0"):
            seed(bad)
    assert folder_problem("").startswith("empty")


def test_run_main_prints_warnings_as_one_line():
    import warnings

    assert run_main(lambda argv: 0, []) == 0
    assert warnings.formatwarning("few steps in run/global_step_1", UserWarning, "x.py", 3) == \
        "warning: few steps in run/global_step_1\n"


def test_output_into_a_reader_that_stops_early_ends_quietly():
    """A command whose reader closes the pipe (``| head -1``) exits 141 without a traceback."""
    import subprocess
    import sys

    code = ("import sys; from ocsd.cli import run_main\n"
            "def body(argv):\n"
            "    for i in range(200000):\n"
            "        print('line', i)\n"
            "    return 0\n"
            "sys.exit(run_main(body, []))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=Path(__file__).resolve().parents[2])
    assert proc.stdout.readline() == b"line 0\n"
    proc.stdout.close()  # the reader stops
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and "Traceback" not in err and "BrokenPipe" not in err
