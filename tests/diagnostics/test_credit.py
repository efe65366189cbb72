"""diagnostics.credit: OCSD's token weights on valid and invalid steps, against the training rule itself
(ocsd.algorithm's functions), a loop over the same cluster draws, and the command's refusals."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from diagnostics import credit as cr
from diagnostics.load import DiagnosticsError, load
from ocsd.algorithm.advantages import ocsd_token_advantage
from ocsd.algorithm.signals import calibration_signal, observation_residual
from ocsd.records import read_replay
from synth import make_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Three checkpoints with non-zero advantages (valid steps carry the planted larger residual)."""
    return make_run(tmp_path_factory.mktemp("credit") / "synthetic", [10, 20, 30], n_traj=16, n_steps=10, seed=3,
                    advantage_sd=1.0)


@pytest.fixture(scope="module")
def data(run):
    return load(run, properties=cr.training_columns)


@pytest.mark.parametrize("beta", [0.5, 0.2, 1.0])
def test_each_steps_push_is_the_training_rules_advantage_minus_grpos(run, data, beta):
    """push_s = mean over the step's tokens of ocsd_token_advantage(A, q, selected, beta) - A, with q from
    ocsd.algorithm's residual and calibration signal; q_s and |q|_s are the means of that q and its size."""
    got = cr.step_credit(data, beta=beta)
    replay = read_replay([run], steps="selected", token_columns=["token_idx", "logp_full", "logp_ablated"])
    steps = replay.steps[replay.steps["feedback_label"].isin(cr.LABELS)]
    expect = []
    for row in steps.itertuples():
        tok = replay.tokens[(replay.tokens["global_step"] == row.global_step)
                            & (replay.tokens["traj_uid"] == row.traj_uid)
                            & (replay.tokens["step_idx"] == row.step_idx)].sort_values("token_idx")
        q = calibration_signal(observation_residual(torch.tensor(tok["logp_full"].to_numpy(np.float64)),
                                                    torch.tensor(tok["logp_ablated"].to_numpy(np.float64))))
        adv = torch.tensor([row.advantage], dtype=torch.float64)
        ocsd = ocsd_token_advantage(adv, q[None], torch.tensor([row.selected]), beta)
        expect.append((row.feedback_label, float(q.mean()), float(q.abs().mean()), float((ocsd - adv).mean()),
                       int((q.abs() >= cr.LARGE_Q).sum()), len(q)))
    expect = pd.DataFrame(expect, columns=["feedback_label", "q", "abs_q", "push", "n_large", "n_part"])
    assert len(got) == len(expect) and (got["advantage"] != 0).any() and (got["advantage"] == 0).any()
    assert list(got["feedback_label"]) == list(expect["feedback_label"])
    for column in ("q", "abs_q", "push", "n_large", "n_part"):
        np.testing.assert_allclose(got[column], expect[column], rtol=1e-6, atol=1e-7)
    assert (got["n_large"] > 0).any() and (got["n_large"] < got["n_part"]).any()


def test_a_step_outside_the_selection_gets_no_push(data):
    """With every step scored, OCSD's rule leaves the unselected ones at GRPO's advantage."""
    unselected = data.steps.assign(selected=False)
    got = cr.step_credit(type(data)(**{**data.__dict__, "steps": unselected}))
    assert (got["push"] == 0).all() and (got["q"] != 0).any()


@pytest.mark.parametrize("seed", [0, 7])
def test_means_and_intervals_are_a_loop_over_the_same_cluster_draws(data, seed):
    """Point estimates: the plain means per label; intervals: the percentiles of the means recomputed resample by
    resample from the trajectories each draw holds (the draws of iter_cluster_counts: chunks of 100 from one
    Generator)."""
    n_boot = 150
    result = cr.credit(data, n_boot=n_boot, seed=seed)
    table = cr.step_credit(data)
    codes, uniques = pd.factorize(table["cluster"])
    rng = np.random.default_rng(seed)
    draws = np.concatenate([rng.integers(0, len(uniques), size=(min(100, n_boot - start), len(uniques)))
                            for start in range(0, n_boot, 100)])
    rows_of = [np.flatnonzero(codes == c) for c in range(len(uniques))]
    def mean(rows, stat):  # the step mean, or for share_large the share over the tokens
        if stat == "share_large":
            return rows["n_large"].sum() / rows["n_part"].sum()
        return rows[stat].mean()

    for stat in ("q", "abs_q", "push", "share_large"):
        reps = {label: [] for label in cr.LABELS}
        for draw in draws:
            rows = table.iloc[np.concatenate([rows_of[c] for c in draw])]
            for label in cr.LABELS:
                reps[label].append(mean(rows[rows["feedback_label"] == label], stat))
        for label in cr.LABELS:
            part = result["labels"][label][stat]
            assert part["estimate"] == pytest.approx(mean(table[table["feedback_label"] == label], stat))
            assert [part["ci_low"], part["ci_high"]] == pytest.approx(np.percentile(reps[label], [2.5, 97.5]))
        diff = np.array(reps["invalid"]) - np.array(reps["valid"])
        assert [result["difference"][stat]["ci_low"], result["difference"][stat]["ci_high"]] == pytest.approx(
            np.percentile(diff, [2.5, 97.5]))
    for label in cr.LABELS:
        rows = table[table["feedback_label"] == label]
        assert result["labels"][label]["n"] == len(rows)
        assert result["labels"][label]["share_q_positive"] == pytest.approx((rows["q"] > 0).mean())
        assert result["labels"][label]["share_advantage_nonzero"] == pytest.approx((rows["advantage"] != 0).mean())


def test_a_residual_that_tracks_feedback_gives_valid_steps_the_larger_q(data):
    """The synthetic runs plant a larger residual on valid steps (feedback AUROC above 0.5): the difference
    invalid - valid of q is negative and resolved."""
    diff = cr.credit(data, n_boot=300)["difference"]["q"]
    assert diff["estimate"] < 0 and diff["ci_high"] < 0


def test_beta_zero_is_grpo(data):
    result = cr.credit(data, beta=0.0, n_boot=20)
    for part in (*result["labels"].values(), result["difference"]):
        assert part["push"]["estimate"] == 0 and part["push"]["ci_low"] == 0 and part["push"]["ci_high"] == 0


def test_a_missing_label_gives_nan_with_a_warning(tmp_path):
    run = make_run(tmp_path / "valid_only", [10], n_traj=6, labels=("valid", "ambiguous"), label_p=(0.8, 0.2),
                   advantage_sd=1.0)
    with pytest.warns(UserWarning, match="no invalid steps"):
        result = cr.credit(load(run, properties=cr.training_columns), n_boot=20)
    assert result["labels"]["invalid"]["n"] == 0 and np.isnan(result["labels"]["invalid"]["q"]["estimate"])
    assert np.isnan(result["difference"]["push"]["estimate"])
    assert np.isfinite(result["labels"]["valid"]["q"]["estimate"])


def test_steps_without_advantages_are_refused_by_name(data):
    with pytest.raises(DiagnosticsError, match="advantage"):
        cr.step_credit(type(data)(**{**data.__dict__, "steps": data.steps.drop(columns="advantage")}))
    with pytest.raises(DiagnosticsError, match="advantage"):
        cr.training_columns(pd.DataFrame({"selected": [True]}), "alfworld")


def test_command_prints_the_table_and_the_json(run, capsys):
    assert cr.main(["--run", str(run), "--n-boot", "50"]) == 0
    out = capsys.readouterr().out
    assert "OCSD's token weights on valid and invalid steps (beta 0.5)" in out
    assert [line.split()[0] for line in out.splitlines()[3:]] == ["valid", "invalid", "invalid"]
    assert cr.main(["--run", str(run), "--n-boot", "50", "--beta", "0.25", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["beta"] == 0.25 and result["n_boot"] == 50 and set(result["labels"]) == set(cr.LABELS)


@pytest.mark.parametrize("flag, value, message", [("--beta", "1.5", "--beta must be in [0, 1]"),
                                                  ("--beta", "-0.1", "--beta must be in [0, 1]"),
                                                  ("--beta", "nan", "--beta must be in [0, 1]"),
                                                  ("--large", "0", "--large must be in (0, 1]"),
                                                  ("--large", "1.2", "--large must be in (0, 1]")])
def test_command_refuses_a_flag_out_of_range(run, capsys, flag, value, message):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cr.main(["--run", str(run), flag, value]) == 2
    assert message in capsys.readouterr().err


# ---- the tokens of a step's action --------------------------------------------------------------------------------

def _blocks_by_scan(text: str, tags) -> list[tuple[int, int]]:
    """Inclusive character ranges of each closed block's content, first to last non-whitespace character, by a plain
    scan for the earliest opening tag and the next closing tag of its name."""
    out, pos = [], 0
    while True:
        found = [(text.find(f"<{t}>", pos), t) for t in tags]
        found = [(i, t) for i, t in found if i >= 0]
        if not found:
            return out
        start, tag = min(found)
        begin = start + len(tag) + 2
        end = text.find(f"</{tag}>", begin)
        if end < 0:  # unclosed: no content; a later tag may still open a block
            pos = start + 1
            continue
        content = [i for i in range(begin, end) if not text[i].isspace()]
        if content:
            out.append((content[0], content[-1]))
        pos = end + len(tag) + 3


@pytest.mark.parametrize("seed", range(6))
def test_block_tokens_are_the_tokens_that_write_a_blocks_content(seed):
    """Random outputs (tags of two names, blocks empty, unclosed or several, text around them) cut into random
    tokens: a token is in when its characters meet a block's content, found by a plain scan of each step."""
    from diagnostics.words import block_tokens

    rng = np.random.default_rng(seed)
    parts = ["<action>", "</action>", "<answer>", "</answer>", "<reason>", "</reason>", " go to", " cabinet 1", "  ",
             "\n", "x", ">", "<", "Nothing"]
    tokens, step_ids, expect = [], [], []
    for step in range(30):
        text = "".join(rng.choice(parts, size=rng.integers(0, 14)))
        cuts = np.sort(rng.choice(np.arange(1, max(len(text), 2)), size=min(len(text) // 3, 8), replace=False))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])] + ([""] if rng.random() < 0.3 else [])
        pieces = [p for p in pieces if p or rng.random() < 0.5] or [""]
        starts = np.cumsum([0] + [len(p) for p in pieces[:-1]])
        blocks = _blocks_by_scan("".join(pieces), ("action", "answer"))
        for piece, start in zip(pieces, starts):
            chars = range(start, start + len(piece))
            expect.append(any(a <= c <= b for a, b in blocks for c in chars))
            tokens.append(piece)
            step_ids.append(step)
    np.testing.assert_array_equal(block_tokens(tokens, step_ids, ("action", "answer")), expect)


def test_block_tokens_keep_blocks_inside_their_step_and_refuse_bad_input():
    from diagnostics.words import block_tokens

    tokens = ["<action>", " go", "</action>", "<action>", " open", "</action", ">"]
    assert block_tokens(tokens, [0, 0, 0, 1, 1, 2, 2], ("action",)).tolist() == [False, True, False, False, False,
                                                                                 False, False]
    assert not block_tokens(tokens, [0] * 7, ()).any()
    with pytest.raises(ValueError, match="contiguous"):
        block_tokens(["a", "b", "c"], [0, 1, 0], ("action",))
    with pytest.raises(ValueError, match="tag names"):
        block_tokens(["a"], [0], ("act ion",))


def test_the_action_part_of_a_synthetic_step_is_its_action_and_the_parts_add_up(data):
    """The synthetic outputs write ``<action> OP OBJ N from REC N2</action>`` as six content tokens; the step's
    means are the token-weighted means of its action's and the rest's."""
    mask = cr.part_mask(data, "action")
    per_step = np.bincount(data.tokens["step"].to_numpy(), weights=mask, minlength=len(data.steps))
    assert (per_step == 6).all()
    for step in (0, len(data.steps) - 1):
        words = "".join(data.tokens["token"][mask & (data.tokens["step"] == step)]).split()
        assert words[0] == data.steps["operator"][step] and words[3] == "from" and len(words) == 6
    whole, action, rest = (cr.step_credit(data, part=p) for p in cr.PARTS)
    n = whole["n_part"].to_numpy(float)
    np.testing.assert_array_equal(whole["n_large"], action["n_large"] + rest["n_large"])
    for stat in ("q", "abs_q", "push"):
        np.testing.assert_allclose(whole[stat], (action["n_part"] * action[stat] + rest["n_part"] * rest[stat]) / n,
                                   rtol=1e-9, atol=1e-12)


def test_steps_without_an_action_are_left_out_and_counted(data):
    dropped = data.tokens[~cr.part_mask(data, "action") | (data.tokens["step"] > 5)]
    result = cr.credit(type(data)(**{**data.__dict__, "tokens": dropped.reset_index(drop=True)}), part="action",
                       n_boot=20)
    labelled = data.steps["feedback_label"].isin(cr.LABELS).to_numpy()
    assert result["part"] == "action" and result["n_left_out"] == int(labelled[:6].sum())
    assert result["n_steps"] == int(labelled.sum()) - result["n_left_out"]


def test_the_action_tags_are_the_environments():
    assert cr.action_tags("alfworld") == ("action",)
    assert cr.action_tags("searchqa") == ("search", "answer")
    assert cr.action_tags("no-such-environment") == ("action",)
