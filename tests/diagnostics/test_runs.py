"""Seed aggregates and phase times of runs against independent references (statistics, numpy)."""

import math
import statistics

import numpy as np
import pytest

from diagnostics.runs import (VAL_OVERALL, VAL_PREFIX, PhaseTimes, SeedStats, last_validation, phase_times,
                              seed_stats, task_bootstrap, validation_stats)

PHASES = ("time/rollout", "time/old_logprob", "time/replay_scoring", "time/update")


@pytest.mark.parametrize("seed", range(5))
def test_seed_stats_match_statistics(seed):
    rng = np.random.default_rng(seed)
    values = rng.uniform(0, 1, size=int(rng.integers(2, 9))).tolist()
    s = seed_stats(values)
    assert s.n == len(values)
    assert s.mean == pytest.approx(statistics.mean(values), abs=1e-12)
    assert s.std == pytest.approx(statistics.stdev(values), abs=1e-12)  # sample std, ddof 1


def test_seed_stats_of_one_and_no_seed():
    one = seed_stats([0.25])
    assert (one.n, one.mean) == (1, 0.25) and math.isnan(one.std)
    none = SeedStats(())
    assert none.n == 0 and math.isnan(none.mean) and math.isnan(none.std)


def random_val_rows(rng, n_seeds, types=("pick", "look", "clean")):
    rows = []
    for _ in range(n_seeds):
        row = {"step": 10, VAL_OVERALL: float(rng.uniform())}
        row.update({VAL_PREFIX + t: float(rng.uniform()) for t in types if rng.uniform() < 0.8})
        rows.append(row)
    return rows


@pytest.mark.parametrize("seed", range(5))
def test_validation_stats_per_key(seed):
    rng = np.random.default_rng(seed)
    rows = random_val_rows(rng, int(rng.integers(1, 6)))
    rows[0][VAL_PREFIX + "heat"] = None  # a null value counts as missing
    stats = validation_stats(rows)
    keys = sorted({k for r in rows for k in r if k.startswith(VAL_PREFIX)})
    assert list(stats) == [*keys, VAL_OVERALL]
    for key in keys + [VAL_OVERALL]:
        values = [r[key] for r in rows if r.get(key) is not None]
        assert stats[key].values == tuple(values)
        if values:
            assert stats[key].mean == pytest.approx(statistics.mean(values), abs=1e-12)
        if len(values) > 1:
            assert stats[key].std == pytest.approx(statistics.stdev(values), abs=1e-12)
    assert stats[VAL_PREFIX + "heat"].n == 0


def test_last_validation_is_the_last_row_with_overall_success():
    rows = [{"step": 1, VAL_OVERALL: 0.1}, {"step": 2, VAL_OVERALL: 0.4, VAL_PREFIX + "pick": 1.0},
            {"step": 3, "reward_mean": 0.2}, {"step": 4, VAL_OVERALL: None}]
    assert last_validation(rows)["step"] == 2
    assert last_validation([{"step": 1}]) is None


def random_timing_rows(rng, n):
    rows = []
    for step in range(1, n + 1):
        row = {"step": step, "reward_mean": float(rng.normal())}
        for key in PHASES:
            u = rng.uniform()
            if u < 0.6:
                row[key] = float(rng.uniform(0.1, 3.0))
            elif u < 0.7:
                row[key] = None
        rows.append(row)
    rows.insert(int(rng.integers(0, n)), {"step": 0, "val/success_rate": 0.5})  # an untimed row
    return rows


@pytest.mark.parametrize("seed", range(5))
def test_phase_times_match_numpy(seed):
    rng = np.random.default_rng(seed)
    rows = random_timing_rows(rng, int(rng.integers(3, 20)))
    skip = int(rng.integers(0, 3))
    times = phase_times(rows, PHASES, skip_steps=skip)
    timed = [r for r in rows if any(k in r for k in PHASES)][skip:]
    table = np.array([[r.get(k) if r.get(k) is not None else 0.0 for k in PHASES] for r in timed], dtype=float)
    ref = table.mean(axis=0)
    assert list(times.seconds) == list(PHASES) and times.n_steps == len(timed)
    assert list(times.seconds.values()) == pytest.approx(ref, abs=1e-12)
    assert times.total == pytest.approx(ref.sum(), abs=1e-12)
    assert list(times.percent.values()) == pytest.approx(100 * ref / ref.sum(), abs=1e-10)
    assert sum(times.percent.values()) == pytest.approx(100.0)


def test_phase_times_edge_cases():
    rows = [{"step": 1, "time/rollout": 1.0}, {"step": 2, "time/rollout": 3.0}]
    assert phase_times(rows, PHASES, skip_steps=2) is None
    assert phase_times([{"step": 1}], PHASES) is None
    zero = phase_times([{"step": 1, "time/update": 0.0}], PHASES)
    assert zero.total == 0 and all(math.isnan(v) for v in zero.percent.values())
    assert PhaseTimes({"time/rollout": 2.0, "time/update": 6.0}, 1).percent == {"time/rollout": 25.0,
                                                                                "time/update": 75.0}
    # the paper's overhead: 7.64 s over a shared pipeline of 7.64 / 0.014 s is 1.40%
    paper = PhaseTimes({"time/rollout": 7.64 / 0.014, "time/replay_scoring": 7.64}, 1)
    assert paper.overhead_percent("time/replay_scoring") == pytest.approx(1.40)
    assert math.isnan(PhaseTimes({"time/replay_scoring": 1.0}, 1).overhead_percent("time/replay_scoring"))
    with pytest.raises(ValueError, match="skip_steps"):
        phase_times(rows, PHASES, skip_steps=-1)
    with pytest.raises(ValueError, match="phases"):
        phase_times(rows, [])


def brute_force_bootstrap(outcomes, n_boot, level, seed):
    """Loops over tasks and resamples; the same task draws as task_bootstrap (a fresh generator)."""
    per_task = [sum(row) / len(row) for row in outcomes]
    picks = np.random.default_rng(seed).integers(0, len(outcomes), size=(n_boot, len(outcomes)))
    means = sorted(sum(per_task[i] for i in row) / len(row) for row in picks.tolist())
    cuts = statistics.quantiles(means, n=40, method="inclusive")  # 2.5% and 97.5% are the outer cuts
    assert level == 0.95
    return sum(per_task) / len(per_task), cuts[0], cuts[-1]


@pytest.mark.parametrize("seed", range(5))
def test_task_bootstrap_matches_brute_force(seed):
    rng = np.random.default_rng(100 + seed)
    n_tasks, repeats = int(rng.integers(1, 30)), int(rng.integers(1, 5))
    outcomes = (rng.uniform(size=(n_tasks, repeats)) < rng.uniform()).astype(float).tolist()
    n_boot = int(rng.integers(50, 400))
    ci = task_bootstrap(outcomes, n_boot=n_boot, level=0.95, rng=np.random.default_rng(seed))
    mean, low, high = brute_force_bootstrap(outcomes, n_boot, 0.95, seed)
    assert (ci.mean, ci.low, ci.high) == pytest.approx((mean, low, high), abs=1e-12)
    assert (ci.n_tasks, ci.repeats, ci.n_boot, ci.level) == (n_tasks, repeats, n_boot, 0.95)
    assert ci.low <= ci.high and 0.0 <= ci.low and ci.high <= 1.0


def test_task_bootstrap_invariances():
    rng = np.random.default_rng(7)
    outcomes = (rng.uniform(size=(40, 3)) < 0.4).astype(float)
    ci = task_bootstrap(outcomes, rng=3)
    assert ci.mean == pytest.approx(outcomes.mean()) and ci.low < ci.mean < ci.high
    assert task_bootstrap(outcomes, rng=3) == ci  # a seed gives the same interval
    wide = task_bootstrap(outcomes, level=0.99, rng=3)
    assert wide.low <= ci.low and wide.high >= ci.high
    shuffled = task_bootstrap(outcomes[:, ::-1], rng=3)  # the order of repeats does not matter
    assert (shuffled.mean, shuffled.low, shuffled.high) == pytest.approx((ci.mean, ci.low, ci.high))
    flat = task_bootstrap(np.ones((5, 2)), rng=0)
    assert (flat.mean, flat.low, flat.high) == (1.0, 1.0, 1.0)
    one = task_bootstrap([1.0, 0.0, 1.0, 1.0], rng=0)  # one repeat: a vector of task outcomes
    assert one.repeats == 1 and one.mean == 0.75


def test_task_bootstrap_degenerate_and_bad_inputs():
    with pytest.warns(UserWarning, match="no tasks"):
        empty = task_bootstrap(np.zeros((0, 3)))
    assert math.isnan(empty.mean) and math.isnan(empty.low) and math.isnan(empty.high)
    for kwargs, match in (({"outcomes": np.zeros((2, 2, 2))}, "shape"), ({"outcomes": [1.0, math.nan]}, "finite"),
                          ({"outcomes": [1.0], "n_boot": 0}, "n_boot"), ({"outcomes": [1.0], "level": 1.0}, "level")):
        with pytest.raises(ValueError, match=match):
            task_bootstrap(**kwargs)
