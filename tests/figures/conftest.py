import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from runs import make_run  # noqa: E402


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """Three runs: OCSD with replay checkpoints (seeds 0, 1) and GRPO without (seed 0)."""
    root = tmp_path_factory.mktemp("runs")
    return {
        "ocsd0": make_run(root / "ocsd_s0", method="ocsd", seed=0, checkpoints=(4, 8, 12)),
        "ocsd1": make_run(root / "ocsd_s1", method="ocsd", seed=1),
        "grpo0": make_run(root / "grpo_s0", method="grpo", seed=0),
    }


@pytest.fixture
def no_val_run(tmp_path):
    """A run whose metrics have no validation rows and no checkpoints."""
    return make_run(tmp_path / "noval", method="grpo", val_every=None)
