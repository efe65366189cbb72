"""OCSD's token advantages on verl rows equal the single-device trainer's on the same batch.

A batch of real ALFWorld episodes (two tasks x two rollouts, answered with admissible actions, some made
inadmissible) goes both ways:

* single-device: :func:`training.pipeline.step_statistics`, the views rendered and scored by
  :class:`ocsd.replay.scoring.ReplayScorer` (:func:`training.replay.score_steps`), :func:`token_inputs`, the method's
  :func:`token_advantages`, as :meth:`training.trainer.Trainer.train_step` does;
* veRL: each step as the agent loop's output (:func:`training.verl.agent_loop.step_outputs`, with its pre-rendered
  view ids), shuffled as verl reorders rows, regrouped by ids, its views scored by plain forwards of the view
  ids and the response (as the actor's ``compute_log_prob`` does), through :func:`batch_advantages`.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from tests.training.verl_support import agent_rows, episodes, single_device, teacher_context  # noqa: E402


@pytest.fixture(scope="module")
def batch(alfworld_games, smollm2_tokenizer):
    return episodes(alfworld_games, smollm2_tokenizer)


@pytest.mark.parametrize("method", ["ocsd", "grpo", "ocsd_random_select", "ocsd_no_ablated", "sdar"])
def test_verl_rows_give_the_single_device_advantages(batch, tiny_model, method):
    from ocsd.algorithm.methods import get_method
    from ocsd.replay.scoring import sequence_logprobs
    from training.verl.batch import StepRow, batch_advantages

    cfg, trajs, renderer = batch
    spec, step = get_method(method), 7
    ref = single_device(cfg, trajs, renderer, tiny_model, method, step)
    keys, old, stats, expected = ref.keys, ref.old, ref.stats, ref.expected

    # veRL: the agent loop's outputs, keyed as verl keys them, in a shuffled order
    rows = [StepRow(key, out.prompt_ids, out.response_ids, out.extra_fields)
            for key, out in agent_rows(cfg, trajs, renderer)]
    order = np.random.default_rng(0).permutation(len(rows))
    rows = [rows[i] for i in order]
    by_pair = {(r.extra["ocsd_traj_uid"], r.extra["ocsd_step"]): r.key for r in rows}
    old_by_key = {by_pair[(trajs[t].uid, k)]: old[i] for i, (t, k) in enumerate(keys)}
    asked = []

    def score(requests):
        asked.extend(requests)
        return {(r.key, r.view): sequence_logprobs(tiny_model, r.context_ids, r.response_ids) for r in requests}

    got = batch_advantages(rows, old_by_key, spec=spec, cfg=cfg, step=step, score=score,
                           teacher_context=teacher_context(renderer.tokenizer))

    assert [t.uid for t in got.trajs] == [t.uid for t in trajs]
    assert torch.equal(got.stats.selected, stats.selected) and np.allclose(got.stats.advantages, stats.advantages)
    assert np.abs(stats.advantages).max() > 0  # penalised steps: GRPO advantages are not all zero
    views = [r for r in asked if r.view != "teacher"]
    assert {r.view for r in views} == set(spec.replay_views)
    assert len(views) == len(spec.replay_views) * int(stats.selected.sum())
    assert sum(r.view == "teacher" for r in asked) == (len(keys) if spec.privileged_teacher else 0)
    for i, (t, k) in enumerate(keys):
        adv = got.advantages[by_pair[(trajs[t].uid, k)]]
        assert adv.shape == (len(old[i]),)
        torch.testing.assert_close(adv, expected[i, : len(old[i])], atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(got.token_adv[ref.mask], expected[ref.mask], atol=2e-4, rtol=1e-4)
    if spec.signal:  # the residual moved some advantages away from GRPO's
        assert not torch.allclose(expected[ref.mask], ref.inputs.adv[:, None].expand_as(expected)[ref.mask])


def test_rows_that_do_not_make_whole_trajectories_are_refused(batch):
    from training.verl.agent_loop import step_outputs
    from training.verl.batch import RowError, StepRow, trajectories_of_rows

    cfg, trajs, renderer = batch
    traj = max(trajs, key=lambda t: len(t.steps))
    outs = step_outputs(traj, env_name="alfworld", renderer=renderer, max_prompt_length=1024, invalid_penalty=0.1)
    rows = [StepRow(f"k{i}", o.prompt_ids, o.response_ids, o.extra_fields) for i, o in enumerate(outs)]
    with pytest.raises(RowError, match=r"expected 0\.\.\d+"):
        trajectories_of_rows(rows[1:])
    with pytest.raises(RowError, match="step 0 in rows 'k0' and 'again'"):
        trajectories_of_rows(rows + [StepRow("again", rows[0].prompt_ids, rows[0].response_ids, rows[0].extra)])
    with pytest.raises(RowError, match="lack 'ocsd_traj_uid'"):
        trajectories_of_rows([StepRow("bare", [1], [2], {})])


def test_parity_command_on_a_kept_batch(batch, tiny_model, smollm2_tokenizer, tmp_path, capsys):
    """``python -m training.verl.parity``: a batch kept as the verl trainer keeps it (rows in verl's order, old
    log-probs and view scores from the tiny model, one view score perturbed as a second implementation would round
    it) is recomputed exactly and compared with the single-device computation; bad input exits 2 naming it."""
    from dataclasses import replace

    from ocsd.algorithm.methods import get_method
    from ocsd.records import RunWriter
    from ocsd.replay.scoring import sequence_logprobs
    from training.verl.batch import StepRow, batch_advantages
    from training.verl.parity import KeptBatch, batch_path, keep_batch, main, read_kept_batch

    cfg, trajs, renderer = batch
    cfg = replace(cfg, method="ocsd")
    rows = [StepRow(key, out.prompt_ids, out.response_ids, out.extra_fields)
            for key, out in agent_rows(cfg, trajs, renderer)][::-1]
    old = {r.key: sequence_logprobs(tiny_model, r.prompt_ids, r.response_ids) for r in rows}
    scored = {}

    def score(requests):
        for r in requests:
            logp = sequence_logprobs(tiny_model, r.context_ids, r.response_ids)
            scored[(r.key, r.view)] = logp - 1e-3 * (r.view == "full")  # a rounding difference of 1e-3
        return {k: scored[k] for k in ((r.key, r.view) for r in requests)}

    got = batch_advantages(rows, old, spec=get_method("ocsd"), cfg=cfg, step=1, score=score, views=["ablated", "full"])
    run = tmp_path / "run"
    RunWriter(run).write_run_json({"run": "r", "model": "tiny", "config": cfg.to_dict(), "backend": "verl"})
    path = keep_batch(batch_path(run, 1), KeptBatch(1, ["ablated", "full"], rows, old, scored,
                                                    {k: v.numpy() for k, v in got.advantages.items()}))
    assert path == run / "batches" / "global_step_1.pt" and not list(path.parent.glob("*.tmp"))
    assert read_kept_batch(path).rows == rows
    weights = tmp_path / "weights"
    tiny_model.save_pretrained(weights)
    smollm2_tokenizer.save_pretrained(weights)

    assert main([str(run), "--weights", str(weights), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    n = int(got.stats.selected.sum())
    assert report["verl_recomputed"] == 0.0 and report["rows"] == len(rows)
    assert report["selection"] == {"verl": n, "single_device": n, "both": n}
    assert report["view_ids"] == {"compared": n, "identical": n}
    assert report["old_logp"]["max_abs"] < 1e-4 and report["view_scores"]["ablated"]["max_abs"] < 1e-4
    assert report["view_scores"]["full"]["max_abs"] == pytest.approx(1e-3, abs=1e-4)
    assert 0 < report["advantages"]["max_abs"] < 1e-2 and report["advantages"]["sign_agreement"] == 1.0
    assert main([str(run), "--weights", str(weights)]) == 0
    assert "view prompt ids of the steps selected by both" in capsys.readouterr().out

    # the first task group alone: its advantages are those of the whole batch
    assert main([str(run), "--weights", str(weights), "--groups", "1", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    first = sorted({r.extra["ocsd_group_uid"] for r in rows})[0]
    assert one["rows"] == sum(r.extra["ocsd_group_uid"] == first for r in rows) < len(rows)
    assert one["verl_recomputed"] == 0.0 and one["selection"]["both"] == one["selection"]["verl"] > 0
    assert one["advantages"]["tokens"] < report["advantages"]["tokens"]
    random_run = tmp_path / "random"
    RunWriter(random_run).write_run_json({"run": "r", "model": "tiny", "backend": "verl",
                                          "config": replace(cfg, method="ocsd_random_select").to_dict()})
    keep_batch(batch_path(random_run, 1), read_kept_batch(path))
    assert main([str(random_run), "--weights", str(weights), "--groups", "1"]) == 2
    assert "selects steps at random over the whole batch" in capsys.readouterr().err

    assert main([str(run), "--step", "3", "--weights", str(weights)]) == 2
    assert "global_step_3.pt: no kept batch; run verl with ocsd.keep_batch=true" in capsys.readouterr().err
    keep_batch(batch_path(run, 2), KeptBatch(2, [], rows[:1], {}, {}, {}))
    assert main([str(run), "--step", "2"]) == 2
    assert "weights of step 1: name them with --weights" in capsys.readouterr().err
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "run.json" in capsys.readouterr().err
