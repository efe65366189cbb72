"""Flags and inputs the figure commands check before any work, and the exit status when nothing is built."""

import importlib
import json
import shutil

import pytest

from figures import fig2_diagnosis, fig4_dynamics
from tests.helpers import exit_and_stderr

MODULES = ["figures", "figures.fig2_diagnosis", "figures.fig4_dynamics", "figures.fig6_cost", "figures.tables"]


def _main(module: str):
    return importlib.import_module(module if module != "figures" else "figures.__main__").main


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("where", ["file", "under_file"])
def test_out_naming_a_file_exits_2_before_work(runs, tmp_path, capsys, module, where):
    afile = tmp_path / "taken.png"
    afile.write_text("keep me")
    out = afile if where == "file" else afile / "figs"
    code, err = exit_and_stderr(_main(module), ["--run", str(runs["ocsd0"]), "--out", str(out)], capsys)
    assert code == 2 and "--out" in err and f"{afile} is a file" in err and "Traceback" not in err
    assert afile.read_text() == "keep me" and [p.name for p in tmp_path.iterdir()] == ["taken.png"]


BAD_NUMBERS = [(m, "--dpi", v) for m in MODULES[:4] for v in ("0", "-3")] + [
    (m, flag, v) for m in MODULES[:2] for flag, v in (("--seed", "-1"), ("--n-boot", "0"))]


@pytest.mark.parametrize("module, flag, value", BAD_NUMBERS)
def test_bad_numbers_exit_2_naming_the_flag(tmp_path, capsys, module, flag, value):
    code, err = exit_and_stderr(_main(module), ["--run", str(tmp_path / "missing"), flag, value, "--out", str(tmp_path)],
                      capsys)
    assert code == 2 and flag in err and "missing" not in err and "Traceback" not in err


def test_every_figure_skipped_exits_1(no_val_run, tmp_path, capsys):
    main = _main("figures")
    args = ["--run", str(no_val_run), "--out", str(tmp_path / "out"), "--only", "fig2_diagnosis", "--only", "tables"]
    assert main(args) == 1
    assert "figures: skipped: every figure was skipped" in capsys.readouterr().err
    assert main(["--run", str(no_val_run), "--out", str(tmp_path / "out"), "--only", "fig4_dynamics"]) == 0


def test_repeated_steps_are_named_when_drawn(no_val_run, tmp_path):
    rows = (no_val_run / "metrics.jsonl").read_text().splitlines()
    (no_val_run / "metrics.jsonl").write_text("\n".join(rows[:2] + rows[:2]) + "\n")  # two writers, steps 1 2 1 2
    with pytest.warns(UserWarning, match=r"metrics.jsonl: field 'step' repeats step\(s\) \[1, 2\]"):
        assert fig4_dynamics.main(["--run", str(no_val_run), "--out", str(tmp_path)]) == 0


def test_meta_of_the_wrong_type_is_refused(runs, tmp_path, capsys):
    run = shutil.copytree(runs["ocsd0"], tmp_path / "run")
    meta_path = run / "global_step_4" / "replay" / "meta.json"
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "views": "full"}))
    code, err = exit_and_stderr(fig2_diagnosis.main, ["--run", str(run), "--out", str(tmp_path / "out"), "--n-boot", "5"],
                      capsys)
    assert code == 2 and "key 'views'" in err and str(meta_path) in err and "Traceback" not in err


def test_a_run_named_twice_is_refused(runs, tmp_path, capsys):
    """``figures.tables --run R --run R`` reported n = 2 from one run."""
    from figures import tables

    run = runs["ocsd0"]
    assert tables.main(["--run", str(run), "--run", f"{run}/", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --run") and "named twice" in err and err.count("\n") == 1
