"""``benchmarks/render_views.py`` end to end on a few real ALFWorld episodes: both tokenisations agree."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("alfworld", reason="alfworld==0.4.2 is not installed (pip install -e .[envs])")

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "render_views.py"


def test_render_views_benchmark_runs_and_checks(tmp_path, capsys, smollm2_tokenizer):
    spec = importlib.util.spec_from_file_location("render_views", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--episodes", "3", "--steps", "10", "--repeats", "1", "--games", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "same ids and offsets both ways: True" in out and "| batched tokenisation of the views |" in out


def test_bad_flags_are_named(capsys):
    spec = importlib.util.spec_from_file_location("render_views", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exc:
        module.main(["--steps", "0"])
    assert exc.value.code == 2 and "--steps must be >= 1" in capsys.readouterr().err
