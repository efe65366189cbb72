import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from synth import make_checkpoint, make_run  # noqa: E402


@pytest.fixture(scope="session")
def synth_run(tmp_path_factory):
    """A synthetic 6-checkpoint run (steps 25..150) with a planted residual-label dependence."""
    return make_run(tmp_path_factory.mktemp("run") / "synthetic", [25, 50, 75, 100, 125, 150], n_traj=12,
                    n_steps=10, seed=0)


@pytest.fixture
def make_ckpt(tmp_path):
    def make(step=10, **kwargs):
        return make_checkpoint(tmp_path / "run", step, **kwargs).parent
    return make
