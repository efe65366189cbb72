"""``diagnostics.paired_steps``: the circular block bootstrap against a loop over the same draws, its exact moments
and scipy's bootstrap, the pairing of two runs' steps, the pooling, and the command's output and refusals."""

import json

import numpy as np
import pytest
from scipy import stats

from diagnostics import paired_steps as ps


def write_run(folder, rows):
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def loop_indices(n, block, n_boot, seed):
    """The resamples of :func:`ps.circular_block_indices` built one index at a time from the same draws."""
    k = -(-n // block)
    starts = np.random.default_rng(seed).integers(0, n, size=(n_boot, k))
    out = np.empty((n_boot, n), dtype=np.int64)
    for r in range(n_boot):
        drawn = []
        for j in range(k):
            for offset in range(block):
                drawn.append((starts[r, j] + offset) % n)
        out[r] = drawn[:n]
    return out


@pytest.mark.parametrize("n,block", [(1, 1), (7, 1), (7, 3), (12, 4), (13, 4), (9, 9)])
def test_indices_are_wrapped_blocks_of_uniform_starts(n, block):
    got = ps.circular_block_indices(n, block, n_boot=50, rng=np.random.default_rng(5))
    assert np.array_equal(got, loop_indices(n, block, 50, 5))


@pytest.mark.parametrize("n,block", [(0, 1), (5, 0), (5, 6)])
def test_indices_refuse_empty_series_and_blocks_outside_the_series(n, block):
    with pytest.raises(ValueError, match="must be"):
        ps.circular_block_indices(n, block, n_boot=10, rng=0)


@pytest.mark.parametrize("seed", range(3))
def test_one_block_over_the_whole_series_only_rotates_it(seed):
    x = np.random.default_rng(seed).normal(size=12)
    means = ps.block_bootstrap_means([x], 12, n_boot=200, rng=seed)
    assert np.allclose(means, x.mean())


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("block", [1, 3, 4])
def test_resampled_means_have_the_exact_circular_block_moments(seed, block):
    """With n = k * block, a resample's mean is the mean of k independent draws among the n circular block means:
    its expectation is the series' mean and its variance their variance over k."""
    rng = np.random.default_rng(100 + seed)
    n = 12
    x = rng.normal(size=n) + np.cumsum(rng.normal(size=n)) * 0.3  # autocorrelated, as training steps are
    blocks = np.array([x[(s + np.arange(block)) % n].mean() for s in range(n)])
    k = n // block
    means = ps.block_bootstrap_means([x], block, n_boot=200_000, rng=rng)
    se = np.sqrt(blocks.var() / k / means.size)
    assert abs(means.mean() - x.mean()) < 5 * se
    assert means.var() == pytest.approx(blocks.var() / k, rel=0.02)


@pytest.mark.parametrize("seed", range(3))
def test_blocks_of_one_give_scipys_percentile_bootstrap(seed):
    x = np.random.default_rng(seed).normal(size=30)
    result = ps.paired_steps([ps.StepPair(np.arange(30), x, np.zeros(30))], block=1, n_boot=40_000, seed=seed)
    ref = stats.bootstrap((x,), np.mean, n_resamples=40_000, method="percentile",
                          rng=np.random.default_rng(seed + 10)).confidence_interval
    sd = x.std(ddof=0) / np.sqrt(x.size)
    assert result["pooled"]["ci_low"] == pytest.approx(ref.low, abs=0.05 * sd)
    assert result["pooled"]["ci_high"] == pytest.approx(ref.high, abs=0.05 * sd)


def test_pooled_resamples_weigh_each_series_by_its_length():
    """Two constant series: every resample's pooled mean is their length-weighted mean."""
    means = ps.block_bootstrap_means([np.full(10, 1.0), np.full(30, 3.0)], 4, n_boot=100, rng=0)
    assert np.allclose(means, (10 * 1 + 30 * 3) / 40)


def test_blocks_widen_the_interval_of_an_autocorrelated_series():
    x = np.repeat(np.random.default_rng(0).normal(size=10), 4)  # runs of four equal steps
    pair = [ps.StepPair(np.arange(40), x, np.zeros(40))]
    width = {b: np.diff([ps.paired_steps(pair, block=b, n_boot=20_000)["pooled"][k] for k in ("ci_low", "ci_high")])
             for b in (1, 4)}
    assert width[4] > 1.5 * width[1]


def test_step_pair_keeps_shared_finite_steps_in_range_and_the_last_row_of_a_step():
    a = [{"step": 1, "m": 0.5}, {"step": 2, "m": 0.1}, {"step": 2, "m": 0.7}, {"step": 3, "m": float("nan")},
         {"step": 4, "m": 1}, {"step": 5, "m": 0.2}, {"step": 6}]
    b = [{"step": s, "m": 0.25} for s in range(0, 8)]
    pair = ps.step_pair(a, b, "m")
    assert pair.steps.tolist() == [1, 2, 4, 5]
    assert pair.a.tolist() == [0.5, 0.7, 1.0, 0.2]
    assert pair.difference == pytest.approx([0.25, 0.45, 0.75, -0.05])
    assert ps.step_pair(a, b, "m", first=2, last=4).steps.tolist() == [2, 4]


def test_step_pair_names_the_side_without_the_metric():
    with pytest.raises(ValueError, match="second run has no finite 'm'"):
        ps.step_pair([{"step": 1, "m": 1.0}], [{"step": 1, "n": 1.0}], "m")


def test_paired_steps_means_and_refusals():
    rng = np.random.default_rng(3)
    pairs = [ps.StepPair(np.arange(1, n + 1), rng.random(n), rng.random(n)) for n in (9, 5)]
    result = ps.paired_steps(pairs, block=2, n_boot=2000, seed=1)
    for got, pair in zip(result["pairs"], pairs):
        assert got["difference"] == pytest.approx(np.mean(pair.a - pair.b))
        assert (got["first"], got["last"], got["n"]) == (1, pair.steps.size, pair.steps.size)
        assert got["ci_low"] <= got["difference"] <= got["ci_high"]
    pooled = np.concatenate([p.a - p.b for p in pairs])
    assert result["pooled"]["difference"] == pytest.approx(pooled.mean())
    assert result["pooled"]["n"] == 14
    assert ps.paired_steps(pairs, block=2, n_boot=2000, seed=1) == result
    with pytest.raises(ValueError, match="pair 2 shares 5 step"):
        ps.paired_steps(pairs, block=6)
    with pytest.raises(ValueError, match="no pairs"):
        ps.paired_steps([])


@pytest.fixture
def runs(tmp_path):
    rng = np.random.default_rng(0)
    out = {}
    for series in ("s2", "s3"):
        for name in ("ocsd", "grpo"):
            rows = [{"step": s, "success_rate": float(rng.random()), "reward_mean": 1.0} for s in range(1, 11)]
            out[series, name] = write_run(tmp_path / series / name, rows)
    return out


def test_command_prints_a_line_a_pair_and_the_pooled_line(runs, capsys):
    a, b = runs["s3", "ocsd"], runs["s3", "grpo"]
    assert ps.main(["--pair", str(a), str(b), "--pair", str(runs["s2", "ocsd"]), str(runs["s2", "grpo"]),
                    "--n-boot", "500"]) == 0
    out = capsys.readouterr().out
    assert "ocsd - grpo" in out and "pooled" in out and "blocks of 4 steps" in out
    assert ps.main(["--pair", str(a), str(b), "--n-boot", "500", "--json", "--steps", "3-8"]) == 0
    result = json.loads(capsys.readouterr().out)
    ra = [json.loads(x) for x in (a / "metrics.jsonl").read_text().splitlines()]
    rb = [json.loads(x) for x in (b / "metrics.jsonl").read_text().splitlines()]
    expected = np.mean([x["success_rate"] - y["success_rate"] for x, y in zip(ra, rb) if 3 <= x["step"] <= 8])
    assert result["pooled"]["difference"] == pytest.approx(expected)
    assert result["pairs"][0]["n"] == 6 and result["metric"] == "success_rate"


def test_command_names_a_run_and_its_rerun_by_their_parent_folders(runs, capsys):
    assert ps.main(["--pair", str(runs["s3", "ocsd"]), str(runs["s2", "ocsd"]), "--n-boot", "100"]) == 0
    assert "s3/ocsd - s2/ocsd" in capsys.readouterr().out


@pytest.mark.parametrize("args,message", [
    (["--pair", "{missing}", "{b}"], "not a run folder"),
    (["--pair", "{a}", "{b}", "--metric", "loss"], "first run has no finite 'loss'"),
    (["--pair", "{a}", "{b}", "--steps", "1-3"], "3 shared step(s) with a finite 'success_rate' in --steps, fewer "
                                                "than --block 4"),
    (["--pair", "{a}", "{b}", "--ci", "1.5"], "--ci must be in (0, 1)"),
    (["--pair", "{empty}", "{b}"], "no metrics.jsonl rows"),
])
def test_command_refusals_name_the_flag_or_folder(runs, tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    names = {"a": runs["s3", "ocsd"], "b": runs["s3", "grpo"], "missing": tmp_path / "nowhere",
             "empty": tmp_path / "empty"}
    assert ps.main([x.format(**names) for x in args]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("text", ["5", "5-3", "a-b", "1-2-3"])
def test_command_refuses_a_malformed_step_range(runs, capsys, text):
    with pytest.raises(SystemExit):
        ps.main(["--pair", str(runs["s3", "ocsd"]), str(runs["s3", "grpo"]), "--steps", text])
    assert "--steps takes FIRST-LAST" in capsys.readouterr().err


def test_labels_name_parent_folders_only_for_a_run_and_its_rerun():
    assert ps.pair_labels("x/ocsd_s1", "x/grpo_s1") == ("ocsd_s1", "grpo_s1")
    assert ps.pair_labels("s3/ocsd_s1", "s2/ocsd_s1") == ("s3/ocsd_s1", "s2/ocsd_s1")
