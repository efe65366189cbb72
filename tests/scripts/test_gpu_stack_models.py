"""``scripts/gpu_stack.sh models-install``: model parts carried by hand are checked before anything is converted."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_stack.sh"

pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in ("tar", "split", "sha256sum")),
                                reason="needs tar, split and sha256sum")


def _parts(tmp_path: Path, files: dict[str, bytes]) -> Path:
    """``files`` packed as ``models`` packs them: models/<name> in a tar cut into parts, with SHA256SUMS."""
    src = tmp_path / "src" / "models"
    src.mkdir(parents=True)
    for name, data in files.items():
        (src / name).write_bytes(data)
    parts = tmp_path / "parts"
    parts.mkdir()
    subprocess.run(f"tar -cf - -C {src.parent} models | split -b 300 -d -a 2 - {parts}/models.tar.", shell=True,
                   check=True)
    subprocess.run("sha256sum models.tar.* > SHA256SUMS", shell=True, cwd=parts, check=True)
    return parts


def _install(parts: Path, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), "models-install", str(parts), str(cache)], cwd=ROOT,
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "PY": sys.executable,
                                                                "PYTHONPATH": str(ROOT)})


def test_a_damaged_or_missing_part_is_refused_by_name(tmp_path):
    parts = _parts(tmp_path, {"smollm2.gguf": b"x" * 1000})
    damaged = parts / "models.tar.02"
    damaged.write_bytes(b"y" + damaged.read_bytes()[1:])
    done = _install(parts, tmp_path / "cache")
    assert done.returncode == 2 and "does not match SHA256SUMS" in done.stderr
    damaged.unlink()
    done = _install(parts, tmp_path / "cache")
    assert done.returncode == 2 and f"part {damaged} is missing" in done.stderr
    assert not (tmp_path / "cache" / "smollm2-135m-instruct").exists()


def _wheel() -> bytes:
    """A valid empty wheel standing in for gguf's (the real one is downloaded by ``models``)."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as whl:
        whl.writestr("gguf-0.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: gguf\nVersion: 0.0\n")
        whl.writestr("gguf-0.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                "Tag: py3-none-any\n")
        whl.writestr("gguf-0.0.dist-info/RECORD", "")
    return buf.getvalue()


def test_a_gguf_that_is_not_the_catalogues_is_refused(tmp_path):
    parts = _parts(tmp_path, {"smollm2.gguf": b"not the model" * 10, "gguf-0.0-py3-none-any.whl": _wheel()})
    done = _install(parts, tmp_path / "cache")
    assert done.returncode == 2
    assert "smollm2.gguf" in done.stderr and "expected 98,362,432" in done.stderr


def test_every_model_is_converted_and_each_failure_named(tmp_path):
    """The models convert side by side; one failing does not hide another's failure."""
    parts = _parts(tmp_path, {"smollm2.gguf": b"not the model" * 10, "qwen2.5-coder-0.5b.gguf": b"nor this" * 10,
                              "gguf-0.0-py3-none-any.whl": _wheel()})
    done = _install(parts, tmp_path / "cache")
    assert done.returncode == 2
    assert "not converted: qwen2.5-coder-0.5b.gguf smollm2.gguf" in done.stderr
    assert "expected 98,362,432" in done.stderr  # smollm2's own refusal, printed by its conversion
