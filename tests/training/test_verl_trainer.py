"""The veRL trainer's overrides (:class:`training.verl.trainer.OCSDTrainer`) on verl's real store, and GRPO parity
with verl's own advantage functions.

The batch (:mod:`tests.training.verl_support`: real ALFWorld episodes, two tasks x two rollouts) is put into
TransferQueue (on a local Ray) as verl's agent-loop worker puts it, padded by verl's
``upsample_batch_to_divisible_size`` and reordered. A stub trainer (verl's ``__init__`` would start the FSDP and
rollout workers) holds a worker group whose ``compute_log_prob`` is a plain forward of the tiny model over the rows'
ids, written back as verl's engine writes ``log_probs``. verl's own ``_compute_old_log_prob`` then runs, then the
trainer's ``_compute_advantage``; the stored advantages must equal the single-device trainer's on the same batch.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

from tests.training.verl_support import agent_rows, episodes, single_device  # noqa: E402

STEP = 4


@pytest.fixture(scope="module")
def batch(alfworld_games, smollm2_tokenizer):
    return episodes(alfworld_games, smollm2_tokenizer)


@pytest.fixture(scope="module")
def store():
    import ray
    import transfer_queue as tq

    started = not ray.is_initialized()
    if started:  # logical CPUs: the store's controller and its two storage units take one each
        ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    tq.init()
    yield tq
    tq.close()
    if started:
        ray.shutdown()


class ForwardWorkerGroup:
    """The actor worker group's ``compute_log_prob`` contract on the store, computed by plain forwards of ``model``:
    reads the rows' ``prompts`` and ``responses``, writes ``log_probs`` over the whole sequence (position t holds
    log p(token t+1), as verl's engine returns them) and ``entropy``."""

    def __init__(self, model, dp_size: int):
        self.model, self._dispatch_info, self.metas = model, {"actor": list(range(dp_size))}, []
        self.loss_fn = None

    def set_loss_fn(self, loss_fn):  # verl's ActorRolloutRefWorker.set_loss_fn, ONE_TO_ALL
        self.loss_fn = loss_fn

    def compute_log_prob(self, meta):
        import transfer_queue as tq
        from tensordict import TensorDict

        from ocsd.replay.scoring import sequence_logprobs

        assert len(meta.keys) % len(self._dispatch_info["actor"]) == 0, "rows not divisible by the DP size"
        data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["prompts", "responses"])
        logp = []
        for p, r in zip(data["prompts"].unbind(0), data["responses"].unbind(0)):
            full = torch.zeros(len(p) + len(r))
            full[len(p) - 1: len(p) + len(r) - 1] = torch.from_numpy(sequence_logprobs(self.model, p.tolist(),
                                                                                       r.tolist()))
            logp.append(full)
        nested = torch.nested.as_nested_tensor(logp, layout=torch.jagged)
        tq.kv_batch_put(keys=meta.keys, partition_id=meta.partition_id,
                        fields=TensorDict({"log_probs": nested, "entropy": nested.clone()}, batch_size=len(logp)))
        self.metas.append(meta)
        return meta


def put_batch(tq, cfg, trajs, renderer, eos_token_id: int, *, dp_size: int, seed: int):
    """The batch in the store as the agent-loop worker writes it, padded by verl to a multiple of ``dp_size``
    (with at least two padding rows) and reordered."""
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    keys, fields, tags = [], [], []
    for key, out in agent_rows(cfg, trajs, renderer, global_step=STEP - 1):
        uid, session, _ = key.rsplit("_", 2)
        field = out.as_dict()
        field.update(uid=uid, session_id=int(session), global_steps=STEP)
        field["loss_mask"] = field["response_mask"]
        field["input_ids"] = torch.cat([field["prompts"], field["responses"]])
        field["position_ids"] = torch.arange(len(field["input_ids"]))
        keys.append(key)
        fields.append(field)
        tags.append({"status": "success", "prompt_len": len(field["prompts"]), "response_len": len(field["responses"]),
                     "seq_len": len(field["input_ids"]), "global_steps": STEP,
                     "min_global_steps": field["extra_fields"]["min_global_steps"],
                     "max_global_steps": field["extra_fields"]["max_global_steps"]})
    tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(fields), tags=tags)
    meta = upsample_batch_to_divisible_size(KVBatchMeta(keys=keys, tags=tags, partition_id="train"),
                                            dp_size * (len(keys) // dp_size + 2), eos_token_id)
    meta.reorder(list(np.random.default_rng(seed).permutation(len(meta)).tolist()))
    return meta


def verl_actor_section(cfg) -> dict:
    """verl's actor section as ``python -m training.verl.main`` composes it for ``cfg``, resolved."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from training.verl.main import register_defaults

    register_defaults()
    with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[2] / "training/verl/config"),
                               version_base="1.3"):
        composed = compose(config_name="ocsd_trainer")
    OmegaConf.update(composed, "ocsd", cfg.to_dict(), merge=True)
    return OmegaConf.to_container(composed.actor_rollout_ref.actor, resolve=True)


def stub_trainer(cfg, tokenizer, worker_group, run_dir, *, save_freq: int, actor: dict | None = None):
    """An :class:`OCSDTrainer` with what its overrides and verl's ``_compute_old_log_prob`` and
    ``_compute_metrics`` read (``actor``: verl's actor section, default the two keys they read)."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf
    from verl.trainer.ppo.metric_utils import RolloutMoELoadBalanceMetricsAccumulator

    from training.verl.trainer import OCSDTrainer, supported_method

    config = OmegaConf.create({
        "ocsd": cfg.to_dict(),
        "trainer": {"save_freq": save_freq, "default_local_dir": str(run_dir)},
        "algorithm": {"use_kl_in_reward": False},
        "actor_rollout_ref": {"model": {"path": "tiny-random"},
                              "rollout": {"temperature": 1.0, "calculate_log_probs": False},
                              "actor": actor or {"loss_agg_mode": "token-mean", "loss_scale_factor": None}}})
    trainer = OCSDTrainer.__new__(OCSDTrainer)  # verl's __init__ would start the workers
    trainer.config, trainer.ocsd = config, cfg
    trainer.ocsd_spec = supported_method(cfg.method, config.actor_rollout_ref.actor.get("policy_loss", {}).get(
        "loss_mode", "vanilla"))
    trainer.actor_rollout_wg, trainer.tokenizer = worker_group, tokenizer
    trainer.global_steps, trainer.total_training_steps, trainer.timing_raw, trainer.ocsd_row = STEP, 10, {}, {}
    # what verl's own _compute_metrics reads
    trainer.use_critic = False
    trainer._rollout_moe_lb_metrics_accumulator = RolloutMoELoadBalanceMetricsAccumulator(
        model_config=config.actor_rollout_ref.model)
    trainer.resource_pool_manager = SimpleNamespace(get_n_gpus=lambda: len(worker_group._dispatch_info["actor"]))
    return trainer


@pytest.mark.parametrize("method", ["ocsd", "grpo", "rlsd"])
def test_trainer_stores_the_single_device_advantages(batch, store, tiny_model, smollm2_tokenizer, tmp_path, method):
    from ocsd.records import read_replay, read_run_info, validate_path
    from training.verl.checkpoint import ReplayCheckpointCallback
    from training.verl.parity import batch_path, compare, read_kept_batch
    from training.verl.trainer import REPLAY_PARTITION, metrics_row

    cfg, trajs, renderer = batch
    cfg = replace(cfg, method=method, run_name=f"verl_{method}", keep_batch=True)
    ref = single_device(cfg, trajs, renderer, tiny_model, method, STEP)
    eos = smollm2_tokenizer.eos_token_id
    meta = put_batch(store, cfg, trajs, renderer, eos, dp_size=2, seed=1)
    group = ForwardWorkerGroup(tiny_model, dp_size=2)
    run = tmp_path / "run"
    trainer = stub_trainer(cfg, smollm2_tokenizer, group, run, save_freq=2)  # step 4: a checkpoint step
    metrics = {}
    meta = trainer._compute_old_log_prob(meta, metrics)  # verl's own pass
    stored = trainer._compute_advantage(meta, metrics)
    # verl's later phases (the actor update) read the fields the returned batch names, through this function
    from verl.utils.transferqueue_utils import kv_batch_meta2batch_meta

    assert stored.keys == meta.keys and set(meta.fields) | {"advantages", "returns"} <= set(stored.fields)
    assert {"advantages", "returns", "old_log_probs"} <= set(kv_batch_meta2batch_meta(stored).field_names)

    got = store.kv_batch_get(keys=meta.keys, partition_id="train", select_fields=["advantages", "returns",
                                                                                    "extra_fields"])
    adv = dict(zip(meta.keys, got["advantages"].unbind(0)))
    position = {(t.uid, k): i for i, (t, k) in enumerate((trajs[t], k) for t, k in ref.keys)}
    padding = [k for k, tag in zip(meta.keys, meta.tags) if tag.get("is_padding")]
    assert len(padding) >= 2 and len(meta) % 2 == 0 and all(float(adv[k].abs().sum()) == 0 for k in padding)
    for key, extra in zip(meta.keys, list(got["extra_fields"])):
        if key in padding:
            continue
        i = position[(extra["ocsd_traj_uid"], extra["ocsd_step"])]
        torch.testing.assert_close(adv[key], ref.expected[i, : len(ref.old[i])], atol=2e-4, rtol=1e-4)
    assert np.abs(ref.stats.advantages).max() > 0

    # the replay rows went to their own partition, padded to the DP size, and were cleared
    scoring = [m for m in group.metas if m.partition_id == REPLAY_PARTITION]
    assert scoring and all(len(m.keys) % 2 == 0 for m in scoring)
    assert store.kv_list(REPLAY_PARTITION).get(REPLAY_PARTITION, {}) == {}
    if method == "rlsd":
        assert trainer.timing_raw["ocsd_teacher_logprob"] > 0

    # a checkpoint step: both views scored and held, written by the callback where verl saved
    ReplayCheckpointCallback().on_save(trainer, STEP, str(run / f"global_step_{STEP}"))
    assert validate_path(run / f"global_step_{STEP}") == []
    replay = read_replay(run / f"global_step_{STEP}")
    assert read_run_info(run)["backend"] == "verl" and replay.metas[0]["backend"] == "verl"
    steps, tokens = replay.steps, replay.tokens
    assert len(steps) == len(ref.keys) and int(steps["selected"].sum()) == int(ref.stats.selected.sum())
    scored = steps[steps["scored"]]
    assert len(scored) == int(ref.stats.selected.sum()) and len(tokens) == int(scored["n_tokens"].sum())
    assert tokens[["logp_full", "logp_ablated"]].notna().all().all()
    assert (tokens["logp_full"] != tokens["logp_ablated"]).any()

    # the kept batch: verl's kept inputs give its advantages again; the single-device computation agrees
    report = compare(read_kept_batch(batch_path(run, STEP)), cfg, tiny_model, smollm2_tokenizer, methods=[])
    assert report["rows"] == len(ref.keys) and report["verl_recomputed"] == 0.0
    n_selected = int(ref.stats.selected.sum())
    assert report["selection"] == {"verl": n_selected, "single_device": n_selected, "both": n_selected}
    assert report["view_ids"] == {"compared": n_selected, "identical": n_selected}
    assert report["old_logp"]["tokens"] == sum(len(x) for x in ref.old) and report["old_logp"]["max_abs"] < 1e-4
    assert report["view_scores"]["full"]["max_abs"] < 1e-4 and report["view_scores"]["ablated"]["max_abs"] < 1e-4
    assert report["advantages"]["max_abs"] < 2e-4 and report["advantages"]["sign_agreement"] == 1.0

    timing = {"adv": 2.0, "ocsd_replay_scoring": 0.5, "gen": 7.0, "step": 12.0}
    ocsd_row = dict(trainer.ocsd_row)
    trainer._compute_metrics(meta, metrics, timing, STEP, 0)  # verl's metrics on the store, then the suite's row
    written = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(written) == 1 and written[0] == pytest.approx(metrics_row(ocsd_row, timing, metrics))
    row = written[0]
    assert row["step"] == STEP and row["time/rollout"] == 7.0 and row["time/advantage"] == pytest.approx(1.5)
    assert row["time/step"] == 12.0 and row["success_rate"] == pytest.approx(np.mean([t.won for t in trajs]))
    assert "actor/entropy" in row and "training/off_policy/trajectory_staleness/mean" in row  # verl's own
    assert not any(k.startswith("ocsd/") for k in row)


def test_every_method_runs_and_opsd_takes_no_other_policy_loss():
    from ocsd.algorithm.methods import METHODS
    from training.config import ConfigError
    from training.verl.trainer import supported_method

    for name in METHODS:
        assert supported_method(name).name == name
    assert supported_method("opsd", "ocsd_no_policy_gradient").name == "opsd"
    assert supported_method("sdar", "gspo").name == "sdar"
    with pytest.raises(ConfigError, match="actor_rollout_ref.actor.policy_loss.loss_mode='gspo'.*'opsd'"):
        supported_method("opsd", "gspo")
    with pytest.raises(ConfigError, match="ocsd.method='banana': unknown method"):
        supported_method("banana")


@pytest.mark.parametrize("method", ["sdar", "opsd", "grpo_opsd"])
def test_distilling_methods_store_the_teacher_and_give_the_actor_their_loss(batch, store, tiny_model,
                                                                            smollm2_tokenizer, tmp_path, method):
    """The teacher's log-probs are stored by row key as ``teacher_log_probs``, equal to the single-device trainer's;
    the workers get the method's loss, which on the stored rows, read as the actor update reads them, gives the
    single-device trainer's loss."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.utils.transferqueue_utils import kv_batch_meta2batch_meta

    from ocsd.algorithm.methods import get_method
    from ocsd.replay.scoring import response_logprobs
    from training.update import UpdateBatch, loss_actor_config, policy_loss
    from training.verl.losses import NO_POLICY_GRADIENT, TEACHER_FIELD, DistillationSettings, actor_loss
    from training.verl.parity import loss_settings

    cfg, trajs, renderer = batch
    cfg = replace(cfg, method=method, run_name=f"verl_{method}", sdar_coef=0.05, gate_beta=3.0, kl_coef=0.01)
    ref = single_device(cfg, trajs, renderer, tiny_model, method, STEP)
    meta = put_batch(store, cfg, trajs, renderer, smollm2_tokenizer.eos_token_id, dp_size=2, seed=2)
    group = ForwardWorkerGroup(tiny_model, dp_size=2)
    trainer = stub_trainer(cfg, smollm2_tokenizer, group, tmp_path / "run", save_freq=100,
                           actor=verl_actor_section(cfg))
    assert trainer.install_actor_loss()
    loss_fn = group.loss_fn
    assert loss_fn.func is actor_loss and loss_fn.keywords["settings"] == DistillationSettings(method, 0.05, 3.0)
    config = loss_fn.keywords["config"]
    assert config.policy_loss.loss_mode == (NO_POLICY_GRADIENT if method == "opsd" else "vanilla")
    assert (config.use_kl_loss, config.kl_loss_coef, config.loss_agg_mode) == (True, 0.01, cfg.loss_agg_mode)

    meta = trainer._compute_old_log_prob(meta, {})
    stored = trainer._compute_advantage(meta, {})
    assert TEACHER_FIELD in stored.fields and TEACHER_FIELD in kv_batch_meta2batch_meta(stored).field_names
    got = store.kv_batch_get(keys=meta.keys, partition_id="train", select_fields=[TEACHER_FIELD, "extra_fields"])
    position = {(t.uid, k): i for i, (t, k) in enumerate((trajs[t], k) for t, k in ref.keys)}
    real = []
    for key, tag, teacher, extra in zip(meta.keys, meta.tags, got[TEACHER_FIELD].unbind(0), list(got["extra_fields"])):
        if tag.get("is_padding"):
            assert float(teacher.abs().sum()) == 0
            continue
        i = position[(extra["ocsd_traj_uid"], extra["ocsd_step"])]
        torch.testing.assert_close(teacher, ref.inputs.logp_teacher[i, : len(ref.old[i])], atol=1e-4, rtol=1e-4)
        real.append((key, i))
    assert len(real) == len(ref.keys)

    # the installed loss on four stored rows (a micro-batch as the actor update reads it) against policy_loss on
    # the same inputs (the teacher's log-probs compared above)
    keys = [k for k, _ in real[:4]]
    fields = ["prompts", "responses", "response_mask", "old_log_probs", "advantages", TEACHER_FIELD]
    data = store.kv_batch_get(keys=keys, partition_id="train", select_fields=fields)
    data = TensorDict({**{f: data[f] for f in fields}, "ref_log_prob": data["old_log_probs"].clone()}, batch_size=4)
    lengths = [len(r) for r in data["responses"].unbind(0)]
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=sum(lengths), global_batch_size=4)
    prompts = [p.tolist() for p in data["prompts"].unbind(0)]
    responses = [r.tolist() for r in data["responses"].unbind(0)]
    with torch.no_grad():
        logp, mask = response_logprobs(tiny_model, list(zip(prompts, responses)), padded=True)
        sequences = [torch.cat([logp.new_zeros(len(p) - 1), logp[j, : len(r)], logp.new_zeros(1)])
                     for j, (p, r) in enumerate(zip(prompts, responses))]
        verl_loss, metrics = loss_fn(model_output={"log_probs": torch.nested.as_nested_tensor(
            sequences, layout=torch.jagged)}, data=data)

        def padded(values):
            out = torch.zeros(4, logp.shape[1])
            for j, v in enumerate(values):
                out[j, : len(v)] = v
            return out

        old = padded(data["old_log_probs"].unbind(0))
        rows_batch = UpdateBatch(prompts, responses, old, padded(data["advantages"].unbind(0)), mask, ref_logp=old,
                                 teacher_logp=padded(data[TEACHER_FIELD].unbind(0)))
        settings = loss_settings(cfg)
        actor_config = loss_actor_config(settings)
        actor_config.global_batch_info.update(dp_size=1, batch_num_tokens=sum(lengths), global_batch_size=4)
        ours, our_metrics = policy_loss(get_method(method), logp, rows_batch, [0, 1, 2, 3], settings, actor_config)
    assert float(verl_loss) == pytest.approx(float(ours), rel=1e-5, abs=1e-7)
    assert metrics["actor/distill_loss"].values[0] == pytest.approx(our_metrics["actor/distill_loss"], rel=1e-5)
    assert our_metrics["actor/distill_loss"] != 0 and ("actor/pg_loss" in our_metrics) == (method != "opsd")


@pytest.mark.parametrize("mode", ["sdar", "trajectory"])
def test_grpo_advantages_equal_verls(batch, mode):
    """``sdar``: every step sample scored and normalised over its task's samples, as verl's
    ``compute_grpo_outcome_advantage`` does with the task's uid as index (SDAR's runs). ``trajectory`` (no penalty):
    verl v1's ``compute_advantage_for_multi_trajectories`` on the agent loop's keys, the episode reward on each
    session's final output. One rollout of each task is marked won, so that both groups have spread."""
    from verl import DataProto
    from verl.trainer.ppo.core_algos import AdvantageEstimator, compute_grpo_outcome_advantage
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    from training.pipeline import step_keys, step_statistics

    cfg, trajs, renderer = batch
    trajs = [replace(t, won=i in (0, 3)) for i, t in enumerate(trajs)]  # one win in each group
    keys = step_keys(trajs)
    lengths = [len(trajs[t].steps[k].response_ids) for t, k in keys]
    mask = torch.zeros(len(keys), max(lengths), dtype=torch.bool)
    for i, n in enumerate(lengths):
        mask[i, :n] = True
    penalty = 0.1 if mode == "sdar" else 0.0
    stats = step_statistics(trajs, torch.zeros(mask.shape), mask, reward_mode=mode, invalid_penalty=penalty,
                            selection="top", rho=0.5, generator=np.random.default_rng(0))
    assert np.abs(stats.advantages).max() > 0
    last = torch.tensor(lengths) - 1
    if mode == "sdar":
        rewards = torch.zeros(mask.shape)
        rewards[torch.arange(len(keys)), last] = torch.as_tensor(stats.rewards, dtype=torch.float32)
        index = np.array([trajs[t].group_uid for t, _ in keys], dtype=object)
        adv, _ = compute_grpo_outcome_advantage(rewards, mask.float(), index, epsilon=1e-6)
    else:
        row_keys = [f"{trajs[t].group_uid}_{trajs[t].uid.rsplit('_r', 1)[1]}_{k}" for t, k in keys]
        rewards = torch.zeros(mask.shape)
        final = [k == len(trajs[t].steps) - 1 for t, k in keys]
        rewards[torch.arange(len(keys)), last] = torch.tensor(
            [10.0 * trajs[t].won if f else 0.0 for (t, _), f in zip(keys, final)])
        data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask.long()},
                                   non_tensors={"uid": np.array([trajs[t].group_uid for t, _ in keys], dtype=object)})
        adv = compute_advantage_for_multi_trajectories(data, row_keys, AdvantageEstimator.GRPO,
                                                       num_repeat=2).batch["advantages"]
    expected = torch.as_tensor(stats.advantages, dtype=torch.float32)[:, None].expand_as(adv) * mask
    torch.testing.assert_close(adv.float(), expected, atol=1e-5, rtol=1e-5)


def test_parity_command_compares_the_update_of_a_kept_sdar_batch(batch, store, tiny_model, smollm2_tokenizer,
                                                                  tmp_path, capsys):
    """``python -m training.verl.parity`` on the kept batch of an SDAR step: the stored advantages come back from
    the kept inputs, and the update's loss and gradient norm agree between both trainers for the named methods
    (the teacher's log-probs kept); an unknown method is refused in one line naming the flag."""
    from ocsd.algorithm.methods import METHODS
    from training.verl.checkpoint import ReplayCheckpointCallback
    from training.verl.parity import _print, main

    cfg, trajs, renderer = batch
    cfg = replace(cfg, method="sdar", run_name="verl_sdar", keep_batch=True, micro_batch_tokens=2048)
    meta = put_batch(store, cfg, trajs, renderer, smollm2_tokenizer.eos_token_id, dp_size=2, seed=3)
    run = tmp_path / "run"
    trainer = stub_trainer(cfg, smollm2_tokenizer, ForwardWorkerGroup(tiny_model, dp_size=2), run, save_freq=2)
    trainer._compute_advantage(trainer._compute_old_log_prob(meta, {}), {})
    ReplayCheckpointCallback().on_save(trainer, STEP, str(run / f"global_step_{STEP}"))
    weights = tmp_path / "weights"
    tiny_model.save_pretrained(weights)
    smollm2_tokenizer.save_pretrained(weights)

    args = [str(run), "--step", str(STEP), "--weights", str(weights), "--device", "cpu", "--groups", "1"]
    capsys.readouterr()
    assert main([*args, "--update-methods", "sdar", "banana"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == ("training.verl.parity: --update-methods: unknown method 'banana'; known: "
                                         f"{', '.join(METHODS)}\n")
    assert main([*args, "--update-methods", "sdar", "grpo_opsd", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["method"] == "sdar" and report["verl_recomputed"] == 0.0
    update = report["update"]
    assert update["splits"][0] == 2048 and len(update["splits"]) == 2 and set(update["methods"]) == {"sdar",
                                                                                                    "grpo_opsd"}
    for name, got in update["methods"].items():
        assert len(got["single_device"]) == len(got["verl"]) == 2, name
        assert got["loss_max_rel"] < 1e-5 and got["grad_norm_max_rel"] < 1e-5, (name, got)
        assert all(r["grad_norm"] > 0 and r["distill_loss"] != 0 for r in got["single_device"] + got["verl"])
    _print(report)  # the printed report names each method's sides and their largest difference
    printed = capsys.readouterr().out
    assert "the update (one mini-batch, micro-batches of 2048 and" in printed
    assert printed.count("largest relative difference: loss") == 2 and "grpo_opsd     verl" in printed
