"""``results/run_on_gpu.sh restore``: runs packed as the script packs them come back file for file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "results" / "run_on_gpu.sh"

pytestmark = pytest.mark.skipif(shutil.which("tar") is None or shutil.which("split") is None,
                                reason="needs tar and split")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_restore_joins_the_run_and_its_actor_parts(tmp_path):
    rng = np.random.default_rng(7)
    run = tmp_path / "made" / "ocsd_run_s3"
    for step in (1, 2):
        (run / f"global_step_{step}" / "replay").mkdir(parents=True)
        (run / f"global_step_{step}" / "replay" / "meta.json").write_text(f'{{"global_step": {step}}}')
    actor = run / "global_step_2" / "actor"
    (actor / "adapter").mkdir(parents=True)
    (actor / "adapter" / "adapter_model.safetensors").write_bytes(rng.bytes(50_000))
    (actor / "trainer_state.pt").write_bytes(rng.bytes(30_000))
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    back = tmp_path / "returned"
    back.mkdir()
    # packed as the script packs a run with SAVE_MERGED=0 (its parts made smaller, so that there are several)
    subprocess.run(["tar", "czf", str(back / "ocsd_run_s3.tgz"), "--exclude=actor", "ocsd_run_s3"],
                   cwd=run.parent, check=True)
    tar = subprocess.Popen(["tar", "czf", "-", "ocsd_run_s3/global_step_2/actor"], cwd=run.parent,
                           stdout=subprocess.PIPE)
    subprocess.run(["split", "-b", "20k", "-", str(back / "ocsd_run_s3.actor.tgz.")], stdin=tar.stdout, check=True)
    assert tar.wait() == 0 and len(list(back.glob("*.actor.tgz.*"))) >= 3
    runs = tmp_path / "runs"
    done = subprocess.run(["bash", str(SCRIPT), "restore", str(back)], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "RUNS_DIR": str(runs)})
    assert done.returncode == 0, done.stderr
    assert _files(runs / "ocsd_run_s3") == _files(run)
