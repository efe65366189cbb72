"""The layers of the suite (README "Layers", ``[tool.importlinter]`` in pyproject.toml) hold, and a wrong import
fails with the broken rule named."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ocsd", "diagnostics", "rescoring", "training", "figures")
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (the test extra)")


def lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` over the packages under ``root`` with the project's contracts."""
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=root,
                          env={"PYTHONPATH": str(root), "PATH": str(LINT.parent)}, capture_output=True, text=True)


def copy_sources(dest: Path) -> Path:
    """The suite's Python files (no data) under ``dest``."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=lambda d, names: [
            n for n in names if not (n.endswith(".py") or (Path(d) / n).is_dir()) or n == "__pycache__"])
    return dest


def test_contracts_name_every_package():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert set(config["root_packages"]) == set(PACKAGES)
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    named = {name.strip().split(".")[0] for layer in layers for name in layer.split("|")}
    assert named == set(PACKAGES)


def test_the_layers_hold():
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BROKEN" not in done.stdout


@pytest.mark.parametrize("module, line, rule, arrow", [
    ("diagnostics/auroc.py", "import figures.drawing", "Layers: each layer imports only the layers below it",
     "diagnostics.auroc -> figures.drawing"),
    ("ocsd/algorithm/signals.py", "import vllm", "The core (ocsd) never imports", "ocsd.algorithm.signals -> vllm"),
    ("diagnostics/stats.py", "import matplotlib", "Statistics (diagnostics) compute and return data",
     "diagnostics.stats -> matplotlib"),
])
def test_a_wrong_import_fails_with_its_rule_named(tmp_path, module, line, rule, arrow):
    root = copy_sources(tmp_path)
    path = root / module
    path.write_text(path.read_text() + f"\n{line}  # a wrong import\n")
    done = lint(root)
    assert done.returncode != 0
    out = " ".join(done.stdout.split())
    assert rule in out and "BROKEN" in out, done.stdout
    assert arrow in out, done.stdout
