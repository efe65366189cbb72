"""The supervised warm start: templated expert reasons, demonstrations in the rollout's contexts, the SFT loss
and its optimisation, the run folder (resume, refusals), export, and loading in train, collect and evaluate."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ocsd.replay.prompts import parse_output
from ocsd.replay.scoring.reference import sequence_logprobs
from training.envs.alfworld.expert import expert_reasons, item_class, looked_at
from training.sft import main
from training.warm_start.sft import lr_at, sft_step

PLAN = ["go to drawer 9", "open drawer 9", "take cellphone 1 from drawer 9", "go to dresser 1",
        "put cellphone 1 in/on dresser 1"]


def test_expert_reasons_follow_the_plan():
    reasons = expert_reasons("put a cellphone in dresser", PLAN)
    assert reasons == [
        "The task needs a cellphone. I will look for one at drawer 9, so I go there.",
        "drawer 9 is closed. I open it to look inside.",
        "I see cellphone 1 at drawer 9. The task needs it, so I take it.",
        "I have the cellphone. I go to dresser 1 to put it there.",
        "I put cellphone 1 in/on dresser 1, which completes the task.",
    ]


def test_expert_reasons_of_two_objects_heating_and_light():
    two = expert_reasons("put two apple in fridge", ["go to countertop 1", "take apple 1 from countertop 1",
                                                    "go to fridge 1", "put apple 1 in/on fridge 1"])
    assert two[0].startswith("The task needs an apple.")
    assert two[-1].endswith("I still need another apple.")
    heat = expert_reasons("heat some egg and put it in countertop",
                          ["go to diningtable 1", "take egg 1 from diningtable 1", "go to microwave 1",
                           "heat egg 1 with microwave 1"])
    assert heat[2] == "I have the egg. It must be heated first, so I go to microwave 1."
    look = expert_reasons("look at pen under the desklamp", ["go to desk 1", "use desklamp 1"])
    assert look == ["I need light to look at the pen. There is a desklamp at desk 1, so I go there.",
                    "I turn on desklamp 1 to look at the pen in its light."]
    assert item_class("cellphone 12") == "cellphone" and looked_at("examine the book with the desklamp") == "book"


def test_lr_schedule_against_its_definition():
    total, peak = 40, 3e-4
    lrs = [lr_at(s, total, peak, 0.1) for s in range(1, total + 1)]
    assert lrs[:4] == pytest.approx([peak * k / 4 for k in (1, 2, 3, 4)])  # ceil(0.1 * 40) = 4 warm-up steps
    assert lrs[4:] == pytest.approx([peak * (total + 1 - s) / (total - 4) for s in range(5, total + 1)])
    assert lrs[4] == pytest.approx(peak) and lrs[-1] == pytest.approx(peak / 36)
    assert all(lr > 0 for lr in lrs) and lrs[-1] < lrs[-2]
    assert lr_at(1, 10, peak, 0.0) == pytest.approx(peak)


def _pairs(seed: int, n: int = 5) -> list[tuple[list[int], list[int]]]:
    rng = np.random.default_rng(seed)
    return [(rng.integers(3, 500, size=int(rng.integers(4, 30))).tolist(),
             rng.integers(3, 500, size=int(rng.integers(1, 9))).tolist()) for _ in range(n)]


def test_sft_loss_and_gradient_equal_the_whole_batch_reference(make_tiny_model):
    """Micro-batched, the loss is the mean response-token NLL and its gradient that of the whole batch."""
    pairs = _pairs(1)
    model = make_tiny_model(vocab_size=512, seed=2).train()
    ref_model = copy.deepcopy(model)
    loss, tokens = sft_step(model, pairs, micro_batch_tokens=40)  # several micro-batches
    assert tokens == sum(len(r) for _, r in pairs)
    with torch.enable_grad():
        ref = -torch.cat([torch.log_softmax(ref_model(torch.tensor([p + r])).logits[0, len(p) - 1:-1].float(), -1)
                          .gather(1, torch.tensor(r)[:, None])[:, 0] for p, r in pairs]).sum() / tokens
        ref.backward()
    expect = -sum(float(sequence_logprobs(ref_model, p, r).sum()) for p, r in pairs) / tokens
    assert loss == pytest.approx(float(ref.detach()), rel=1e-5) and loss == pytest.approx(expect, rel=1e-5)
    for (name, p), (_, q) in zip(model.named_parameters(), ref_model.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_one_sft_step_lowers_the_loss_on_a_fixed_batch(make_tiny_model):
    pairs = _pairs(3, n=8)
    model = make_tiny_model(vocab_size=512, seed=4).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    before, _ = sft_step(model, pairs, micro_batch_tokens=4096)
    optimizer.step()
    with torch.inference_mode():
        after, _ = sft_step(model, pairs, micro_batch_tokens=4096, grad=False)
    assert after < before - 1e-3


# ------------------------------------------------------------------------------------------------------
# a whole warm start on the tiny model and generated games
# ------------------------------------------------------------------------------------------------------


def _sft_args(tmp: Path, games: Path, *extra: str) -> list[str]:
    return [f"run_dir={tmp}", "model=tiny", "data=generated", f"games_dir={games}", "n_train_games=2",
            "n_val_games=1", "seed=0", "epochs=2", "batch_size=4", "save_freq=2", "max_prompt_length=1024",
            "history_length=1", "progress=false", *extra]


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory, alfworld_games, smollm2_tokenizer) -> Path:
    run = tmp_path_factory.mktemp("sft") / "run"
    assert main(_sft_args(run, alfworld_games, "max_updates=3")) == 0
    return run


def test_sft_run_folder_and_metrics(sft_run):
    info = json.loads((sft_run / "sft.json").read_text())
    assert info["demonstrations"]["train"]["games"] == 2 and info["made"]["steps"] == 3
    rows = [json.loads(line) for line in (sft_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and "val_loss" in rows[1] and "val_loss" in rows[2]
    assert all(np.isfinite(r["loss"]) and r["tokens"] > 0 for r in rows)
    actor = sft_run / "global_step_3" / "actor"
    assert (actor / "config.json").is_file() and (actor / "adapter" / "adapter_config.json").is_file()
    assert torch.load(actor / "trainer_state.pt", weights_only=False)["global_step"] == 3


def test_demonstrations_are_the_rollouts_contexts(sft_run, alfworld_games, smollm2_tokenizer, make_tiny_model):
    """Every demonstration's prompt is the rollout's prompt of that step (interaction text, history window,
    chat template), and its response is the well-formed expert answer; a real rollout of the same game
    starts from the same prompt ids."""
    import pandas as pd

    from ocsd.replay.prompts import PromptRenderer, interaction_text
    from training.envs.alfworld import AlfworldBatchEnv, AlfworldGame, spec_of_file
    from training.rollout.loop import GenerationSettings, rollout

    table = pd.read_parquet(sft_run / "demonstrations" / "train.parquet")
    renderer = PromptRenderer(smollm2_tokenizer)
    for game, steps in table.groupby("game", sort=False):
        steps = steps.sort_values("step")
        spec = spec_of_file(game)
        env = AlfworldGame(spec, max_steps=50)
        obs = env.reset()
        text, admissible, history = obs.text, obs.admissible, []
        for row in steps.itertuples():
            expected = renderer.render_ids(interaction_text(
                "alfworld", task=spec.task, step_idx=row.step, history=history, current_obs=text,
                admissible_actions=admissible, history_length=row.history_shown))
            assert row.history_shown == min(1, row.step)
            assert list(row.prompt_ids) == expected
            parsed = parse_output("alfworld", smollm2_tokenizer.decode(row.response_ids, skip_special_tokens=True))
            assert parsed.well_formed and parsed.action == row.action
            result = env.step(row.action)
            history.append((text, row.action))
            text, admissible = result.obs, result.admissible
        assert result.won
        env.close()
    first = table[table.step == 0].iloc[0]
    model = make_tiny_model(vocab_size=len(smollm2_tokenizer), seed=0)
    with AlfworldBatchEnv([spec_of_file(first.game)], max_steps=1) as env:
        traj = rollout(model, smollm2_tokenizer, renderer, env, [{"uid": "a", "group_uid": "a"}], env_name="alfworld",
                       history_length=1, max_prompt_length=1024, settings=GenerationSettings(max_new_tokens=2),
                       progress=False)[0]
    assert traj.steps[0].prompt_ids == list(first.prompt_ids)


def test_a_non_finite_step_names_the_demonstration_steps_that_cause_it(tmp_path, alfworld_games, smollm2_tokenizer):
    """A step whose gradient is not finite stops the run with the demonstration steps that are non-finite alone
    (here the one whose response holds a token with a poisoned embedding), before any optimizer step."""
    from training.config import load_config
    from training.warm_start.sft import SFTConfig, SFTRun

    cfg = load_config(None, _sft_args(tmp_path / "run", alfworld_games, "max_updates=2"), cls=SFTConfig)
    run = SFTRun(cfg)
    try:
        table = run.demos["train"]
        used = {t for col in (table.prompt_ids, table.response_ids) for ids in col for t in ids}
        token = next(t for t in range(1000, 49152) if t not in used)
        first = [int(i) for i in run.batches()[0]]  # the first step's rows
        row = first[1]
        response = list(table.response_ids.iloc[row])
        table.at[table.index[row], "response_ids"] = response[:2] + [token] + response[3:]  # only this row has it
        embeddings = run.model.get_input_embeddings().weight
        run.model.get_output_embeddings().weight = torch.nn.Parameter(embeddings.detach().clone(),
                                                                      requires_grad=False)  # untied
        with torch.no_grad():
            embeddings[token] = float("nan")
        assert run.non_finite_rows(range(len(table))).startswith(f"non-finite alone: 1 of {len(table)} rows: "
                                                                 f"row {row} (")
        with pytest.raises(FloatingPointError) as caught:
            run.fit()
    finally:
        run.lock.release()
    message = str(caught.value)
    assert "at SFT step 1" in message and "is kept" in message
    assert f"non-finite alone: 1 of {len(first)} rows: row {row} (" in message
    assert not list((tmp_path / "run").glob("global_step_*"))


def test_sft_resumes_and_refuses_other_settings(tmp_path, alfworld_games, smollm2_tokenizer, capsys):
    run = tmp_path / "run"
    assert main(_sft_args(run, alfworld_games, "max_updates=2")) == 0
    first = (run / "metrics.jsonl").read_text().splitlines()
    assert main(_sft_args(run, alfworld_games, "max_updates=3")) == 0
    assert "resuming" in capsys.readouterr().err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and (run / "metrics.jsonl").read_text().startswith("\n".join(first))
    assert main(_sft_args(run, alfworld_games, "lr=0.1")) == 2
    assert "lr: 0.0002 -> 0.1" in capsys.readouterr().err
    assert main(_sft_args(run, alfworld_games, "resume=false")) == 2
    assert "resume=false" in capsys.readouterr().err
    assert sorted(p.name for p in run.glob("global_step_*")) == ["global_step_2", "global_step_3"]


def test_warm_start_loads_in_train_collect_and_evaluate(sft_run, tmp_path, tiny_overrides, no_user_data, capsys):
    from training.collect import main as collect
    from training.evaluate import main as evaluate
    from training.policy import load_policy
    from training.config import make_config
    from training.train import main as train
    from ocsd.replay.models import load_model

    exported = tmp_path / "exported"
    assert main(["--export", str(sft_run), "--out", str(exported)]) == 0
    provenance = json.loads((exported / "warm_start.json").read_text())
    assert provenance["base_model"] == "tiny" and provenance["global_step"] == 3
    merged = load_model(sft_run / "global_step_3" / "actor")
    for warm in (sft_run, exported):  # the run's checkpoint and its exported adapter give the same weights
        _, model = load_policy(make_config({"model": "tiny", "warm_start": str(warm), "lora_rank": 0}))
        for (name, p), (_, q) in zip(model.state_dict().items(), merged.state_dict().items()):
            torch.testing.assert_close(p, q, rtol=1e-2, atol=1e-3, msg=name)  # bfloat16 adapter for the export
        assert all(p.requires_grad for p in model.parameters())  # full fine-tuning trains every merged weight
    assert train([*tiny_overrides, "model=tiny", f"warm_start={exported}", f"run_dir={tmp_path / 'rl'}",
                  "batch_size=1", "group_size=2", "total_steps=1", "test_freq=0", "lora_rank=4"]) == 0
    assert train([*tiny_overrides, "model=tiny", f"warm_start={exported}", f"run_dir={tmp_path / 'full'}",
                  "batch_size=1", "group_size=2", "total_steps=1", "test_freq=0", "lora_rank=0"]) == 0
    assert json.loads((tmp_path / "rl" / "run.json").read_text())["config"]["warm_start"] == str(exported)
    for source in (sft_run, exported):
        assert collect(["--model", str(source), "--tasks", "1", "--group", "2", "--out",
                        str(tmp_path / f"collect_{source.name}"), *tiny_overrides]) == 0
        assert evaluate(["--ckpt", str(source), "--tasks", "1", "--json", *tiny_overrides]) == 0
        report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert report["n"] == 1 and 0.0 <= report["well_formed_rate"] <= 1.0


def test_bad_warm_starts_are_named(tmp_path, sft_run, capsys):
    from training.config import ConfigError, make_config
    from training.warm_start import WarmStartError, export_adapter

    with pytest.raises(ConfigError, match="warm_start: .*no such folder"):
        make_config({"model": "tiny", "warm_start": str(tmp_path / "missing")})
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="warm_start: .*neither an exported adapter"):
        make_config({"model": "tiny", "warm_start": str(tmp_path / "empty")})
    with pytest.raises(ConfigError, match="an adapter of model 'smollm2', but model='tiny'"):
        make_config({"model": "tiny", "warm_start": str(SHIPPED)})
    full = tmp_path / "full" / "global_step_1" / "actor"
    full.mkdir(parents=True)
    with pytest.raises(WarmStartError, match="no adapter/"):
        export_adapter(full, tmp_path / "out", {})
    assert main(["--export", str(sft_run)]) == 2
    assert "--export needs --out" in capsys.readouterr().err


@pytest.mark.parametrize("override, message", [("epochs=0", "epochs=0: must be"), ("lr=-1", "lr=-1"),
                                               ("dtype=int8", "dtype='int8'"), ("env=nowhere", "env: unknown")])
def test_sft_config_errors_name_the_key(override, message, capsys):
    assert main(["model=tiny", "data=generated", override]) == 2
    assert message in capsys.readouterr().err


WARM_STARTS = Path(__file__).resolve().parents[2] / "training" / "warm_starts"
SHIPPED = WARM_STARTS / "smollm2-alfworld"
SHIPPED_BY_BASE = {"smollm2": SHIPPED, "qwen2.5-coder-0.5b": WARM_STARTS / "qwen2.5-coder-0.5b-alfworld"}


@pytest.mark.parametrize("base", sorted(SHIPPED_BY_BASE))
def test_shipped_warm_start_has_its_provenance(base):
    folder = SHIPPED_BY_BASE[base]
    info = json.loads((folder / "warm_start.json").read_text())
    assert info["base_model"] == base
    assert {"commit", "hardware", "command"} <= set(info["made"]) and info["made"]["commit"]
    assert info["config"]["expert"] == "search"  # demonstrations that search, as the policy must
    assert info["config"]["data"] == "generated" and info["config"]["seed"] == 1000
    assert (folder / "adapter_model.safetensors").stat().st_size < 10 * 2**20


@pytest.mark.parametrize("base", sorted(SHIPPED_BY_BASE))
def test_shipped_warm_start_writes_the_format(base, alfworld_games, no_user_data):
    """The base model with the shipped adapter merged answers the first steps of a generated game in the format
    and ends each turn with the chat template's end of turn."""
    from ocsd.replay.prompts import PromptRenderer
    from training.config import make_config, model_problem
    from training.envs.alfworld import AlfworldBatchEnv, load_games
    from training.policy import load_policy
    from training.rollout.loop import GenerationSettings, rollout

    if model_problem(base) is not None:
        pytest.skip(model_problem(base))
    tokenizer, model = load_policy(make_config({"model": base, "warm_start": str(SHIPPED_BY_BASE[base]),
                                                "lora_rank": 0}))
    game = load_games(alfworld_games, split="train")[0]
    with AlfworldBatchEnv([game], max_steps=2) as env:
        traj = rollout(model, tokenizer, PromptRenderer(tokenizer), env, [{"uid": "a", "group_uid": "a"}],
                       env_name="alfworld", history_length=2, max_prompt_length=2048,
                       settings=GenerationSettings(max_new_tokens=64, do_sample=False), progress=False)[0]
    assert len(traj.steps) == 2
    for step in traj.steps:
        assert step.well_formed, step.response_text
        assert step.response_text.startswith("<reason>") and step.action
        assert step.response_ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")  # the end of a turn
