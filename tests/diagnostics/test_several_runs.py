"""Every diagnostics command pools the runs named by a repeated ``--run`` (synthetic runs, test input only)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from synth import make_run  # noqa: E402

from diagnostics import auroc, dratio, report, robustness, strata, tails  # noqa: E402


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two runs of one length with different seeds and sizes, so each has its own step count."""
    root = tmp_path_factory.mktemp("runs")
    return (make_run(root / "a", [10, 20], n_traj=6, n_steps=10, seed=1),
            make_run(root / "b", [10, 20], n_traj=4, n_steps=10, seed=2))


def _json(capsys, main, args):
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _ckpts(*runs):
    return [x for r in runs for c in sorted(r.glob("global_step_*")) for x in ("--ckpt", str(c))]


def test_auroc_pools_every_run(two_runs, capsys):
    a, b = two_runs
    opts = ["--n-boot", "20"]
    one = [_json(capsys, auroc.main, ["--run", str(r), *opts]) for r in (a, b)]
    both = _json(capsys, auroc.main, ["--run", str(a), "--run", str(b), *opts])
    assert both["n_steps"] == one[0]["n_steps"] + one[1]["n_steps"]
    assert both["n_trajectories"] == one[0]["n_trajectories"] + one[1]["n_trajectories"]
    assert both == _json(capsys, auroc.main, [*_ckpts(a, b), *opts])


@pytest.mark.parametrize("main, extra", [(robustness.main, ["--n-boot", "20"]), (dratio.main, ["--n-boot", "20"]),
                                         (tails.main, []), (strata.main, ["--n-boot", "20"])])
def test_other_commands_pool_every_run(two_runs, capsys, tmp_path, main, extra):
    a, b = two_runs
    opts = [*extra]
    if main is tails.main:
        opts += ["--out", str(tmp_path / "tails")]
    both = _json(capsys, main, ["--run", str(a), "--run", str(b), *opts])
    assert both == _json(capsys, main, [*_ckpts(a, b), *opts])
    assert both != _json(capsys, main, ["--run", str(b), *opts])


def test_report_names_every_run(two_runs, capsys, tmp_path):
    a, b = two_runs
    assert report.main(["--run", str(a), "--run", str(b), "--n-boot", "20",
                        "--out", str(tmp_path / "rep")]) == 0
    capsys.readouterr()
    text = (tmp_path / "rep" / "report.md").read_text()
    assert f"Input: {a}, {b}; 4 checkpoint(s)" in text


def test_run_and_ckpt_together_refused(two_runs, capsys):
    a, b = two_runs
    assert auroc.main(["--run", str(a), "--ckpt", str(b / "global_step_10")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--run" in err and "--ckpt" in err
