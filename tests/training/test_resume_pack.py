"""Resume packs: a LoRA run's checkpoint packed, unpacked into the run's records and resumed (real trainer,
generated games, a tiny model in bfloat16 so that the optimizer keeps float32 master weights)."""

from __future__ import annotations

import json
import shutil
import tarfile

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip("alfworld", reason="the ALFWorld engine (envs extra) is not installed")
pytest.importorskip("verl", reason="verl (verl extra) is not installed")

from training.config import make_config  # noqa: E402
from training.envs.alfworld.tasks import GameSource  # noqa: E402
from training.precision import MasterWeightAdamW  # noqa: E402
from training.resume_pack import (MOMENTS, PackError, compact_state, lora_update_norm, main, pack,  # noqa: E402
                                  pack_update_norm, read_pack_info, unpack)
from training.trainer import STATE_FILE, Trainer  # noqa: E402

LR = 1e-3
SETTINGS = dict(model="tiny", batch_size=1, group_size=2, max_steps=2, max_response_length=8, max_prompt_length=1024,
                save_freq=1, test_freq=0, progress=False, rho=0.5, micro_batch_tokens=4096, seed=3, kl_coef=0.0,
                lr=LR, lora_rank=4, lora_alpha=8, save_merged=False, dtype="bfloat16",
                method="opsd")  # a distillation loss: gradients where every group is flat (the tiny model never wins)


@pytest.fixture(scope="module")
def games(tmp_path_factory):
    folder = tmp_path_factory.mktemp("games")
    cfg = make_config(dict(data="generated", games_dir=str(folder), n_train_games=2, n_val_games=1, progress=False))
    return GameSource.from_config(cfg)


def _cfg(run_dir, total_steps):
    return make_config(dict(SETTINGS, run_dir=str(run_dir), total_steps=total_steps))


def _state(run_dir, step):
    return torch.load(run_dir / f"global_step_{step}" / "actor" / STATE_FILE, map_location="cpu", weights_only=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, games):
    """An uninterrupted two-step run, and a one-step run of the same settings."""
    root = tmp_path_factory.mktemp("runs")
    Trainer(_cfg(root / "whole", 2), games=games).fit()
    Trainer(_cfg(root / "part", 1), games=games).fit()
    return root


def test_pack_keeps_masters_and_rounds_only_the_moments(runs, tmp_path):
    run = tmp_path / "part"
    shutil.copytree(runs / "part", run)
    before = _state(run, 1)
    weights = run / "global_step_1" / "actor" / "adapter" / "adapter_model.safetensors"
    adapter, config = load_file(weights), weights.with_name("adapter_config.json").read_bytes()
    out = pack(run, tmp_path / "part.tar")
    info = read_pack_info(out)
    assert info["global_step"] == 1 and info["run"] == "part" and info["pack_bytes"] < info["actor_bytes"]
    # every master rounds to one adapter tensor: the pack holds the masters, not the adapter's weights
    assert len(info["adapter_from_masters"]) == len(adapter)
    with tarfile.open(out) as tar:
        assert "adapter/adapter_model.safetensors" not in tar.getnames()
    shutil.rmtree(run / "global_step_1" / "actor")
    assert (unpack(out, run) / "actor" / STATE_FILE).is_file()
    after = _state(run, 1)
    assert after["global_step"] == 1
    assert before["optimizer"]["masters"], "a bfloat16 model must have float32 masters"
    # LoRA's B moved (its A waits a step: B starts at zero), so some moments are rounded for real
    assert sum(bool(s["exp_avg_sq"].abs().sum() > 0) for s in before["optimizer"]["adamw"]["state"].values()) > 0
    for i, master in before["optimizer"]["masters"].items():
        assert master.dtype == torch.float32 and torch.equal(after["optimizer"]["masters"][i], master)
    for key, per_param in before["optimizer"]["adamw"]["state"].items():
        for name, value in per_param.items():
            got = after["optimizer"]["adamw"]["state"][key][name]
            if name in MOMENTS:
                assert got.dtype == torch.bfloat16 and torch.equal(got, value.to(torch.bfloat16))
            else:
                assert torch.equal(got, value)
    rebuilt = load_file(weights)
    assert rebuilt.keys() == adapter.keys() and all(torch.equal(rebuilt[k], adapter[k]) for k in adapter)
    assert all(rebuilt[k].dtype == adapter[k].dtype for k in adapter)
    assert weights.with_name("adapter_config.json").read_bytes() == config


def test_a_float32_adapter_has_no_masters_and_is_kept_as_saved(tmp_path, games):
    run = tmp_path / "fp32"
    Trainer(make_config(dict(SETTINGS, run_dir=str(run), total_steps=1, dtype="float32")), games=games).fit()
    weights = run / "global_step_1" / "actor" / "adapter" / "adapter_model.safetensors"
    saved = weights.read_bytes()
    out = pack(run, tmp_path / "fp32.tar")
    assert read_pack_info(out)["adapter_from_masters"] is None
    config = json.loads(weights.with_name("adapter_config.json").read_text())
    assert pack_update_norm(out) == lora_update_norm(load_file(weights), config) > 0  # from the weights as saved
    shutil.rmtree(run / "global_step_1" / "actor")
    unpack(out, run)
    assert weights.read_bytes() == saved


def test_a_run_resumed_from_a_pack_continues_within_the_moments_rounding(runs, tmp_path, games):
    run = tmp_path / "part"
    shutil.copytree(runs / "part", run)
    out = pack(run, tmp_path / "part.tar")
    shutil.rmtree(run / "global_step_1" / "actor")  # what the records alone hold
    unpack(out, run)
    resumed = Trainer(_cfg(run, 2), games=games)
    assert resumed.start_step == 2
    resumed.fit()
    whole, got = _state(runs / "whole", 2)["optimizer"], _state(run, 2)["optimizer"]
    first = _state(runs / "whole", 1)["optimizer"]
    moved = max((whole["masters"][i] - first["masters"][i]).abs().max().item() for i in whole["masters"])
    assert moved > LR / 2  # step 2 moves the weights by about lr: the bound below is not met trivially
    # step 2's AdamW step reads moments rounded by at most 2**-9 relative: each master moves by at most
    # lr * |m/sqrt(v)| * (a few 2**-9) from where the uninterrupted run put it
    for i, master in whole["masters"].items():
        diff = (got["masters"][i] - master).abs().max().item()
        assert diff <= LR * 2 ** -6, (i, diff)


def test_compact_state_rounds_plain_adamw_and_master_weight_states():
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(5, 3, generator=gen)), torch.nn.Parameter(torch.randn(4, generator=gen))]
    low = [torch.nn.Parameter(p.detach().to(torch.bfloat16)) for p in params]
    for opt, ps in ((torch.optim.AdamW(params, lr=1e-2), params), (MasterWeightAdamW(low, lr=1e-2), low)):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=gen).to(p.dtype)
        opt.step()
        state = {"optimizer": opt.state_dict(), "global_step": 7}
        small = compact_state(state)
        inner = state["optimizer"].get("adamw", state["optimizer"])["state"]
        small_inner = small["optimizer"].get("adamw", small["optimizer"])["state"]
        for key in inner:
            for name in MOMENTS:
                assert small_inner[key][name].dtype == torch.bfloat16
                torch.testing.assert_close(small_inner[key][name].float(), inner[key][name], rtol=2 ** -8, atol=0)
            assert torch.equal(small_inner[key]["step"], inner[key]["step"])
            assert inner[key]["exp_avg"].dtype == torch.float32  # the input is not changed
        assert small["global_step"] == 7


def test_the_pack_reads_the_trainers_state_file():
    import training.resume_pack

    assert training.resume_pack.STATE_FILE == STATE_FILE


def test_a_half_written_checkpoint_is_passed_over_as_the_trainer_does(runs, tmp_path):
    run = tmp_path / "whole"
    shutil.copytree(runs / "whole", run)
    (run / "global_step_2" / "replay" / "meta.json").unlink()  # its replay/ was being written when the run stopped
    assert read_pack_info(pack(run, tmp_path / "whole.tar"))["global_step"] == 1
    with pytest.raises(PackError, match="global_step_2 has no actor/trainer_state.pt and replay/meta.json"):
        pack(run, tmp_path / "two.tar", step=2)


def test_refusals_name_the_folder_or_file(runs, tmp_path, capsys):
    with pytest.raises(PackError, match="global_step_9 has no actor/trainer_state.pt"):
        pack(runs / "part", tmp_path / "x.tar", step=9)
    out = pack(runs / "part", tmp_path / "part.tar")
    with pytest.raises(PackError, match="global_step_1: no such checkpoint folder"):
        unpack(out, tmp_path / "elsewhere")
    with pytest.raises(PackError, match="actor exists; --force replaces it"):
        unpack(out, runs / "part")
    (tmp_path / "junk.tar").write_bytes(b"not a tar")
    assert main(["show", str(tmp_path / "junk.tar")]) == 2
    assert "junk.tar: not a resume pack" in capsys.readouterr().err
    assert main(["show", str(out)]) == 0
    line = capsys.readouterr().out
    assert f"{out}: part step 1, AdamW moments in bfloat16" in line and len(line.splitlines()) == 1
    assert main(["show", str(out), "--json"]) == 0 and '"global_step": 1' in capsys.readouterr().out


def test_the_packs_update_norm_reads_the_float32_masters(runs, tmp_path):
    out = pack(runs / "part", tmp_path / "norm.tar")
    masters = _state(runs / "part", 1)["optimizer"]["masters"]
    keys = read_pack_info(out)["adapter_from_masters"]
    adapter = runs / "part" / "global_step_1" / "actor" / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    exact = lora_update_norm({key: masters[int(i)] for i, (key, _) in keys.items()}, config)
    assert exact > 0 and pack_update_norm(out) == exact
    # the saved bfloat16 adapter gives the same norm to its rounding
    assert lora_update_norm(load_file(adapter / "adapter_model.safetensors"), config) == pytest.approx(exact, rel=2e-2)


def test_show_names_a_pack_whose_adapter_config_is_gone(runs, tmp_path, capsys):
    whole = pack(runs / "part", tmp_path / "whole.tar")
    broken = tmp_path / "broken.tar"
    with tarfile.open(whole) as src, tarfile.open(broken, "w") as dst:
        for member in src.getmembers():
            if not member.name.endswith("adapter_config.json"):
                dst.addfile(member, src.extractfile(member))
    with pytest.raises(PackError, match="broken.tar: the adapter's update norm"):
        pack_update_norm(broken)
    assert main(["show", str(broken)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {broken}: ") and len(err.strip().splitlines()) == 1


def test_pack_command_prints_the_line_show_prints(runs, tmp_path, capsys):
    out = tmp_path / "cli.tar"
    assert main(["pack", str(runs / "part"), "--out", str(out)]) == 0
    packed = capsys.readouterr().out
    assert main(["show", str(out)]) == 0
    assert packed == capsys.readouterr().out and packed.startswith(f"{out}: part step 1, AdamW moments in ")
    assert packed.rstrip().endswith(f"||s B A||_F: {pack_update_norm(out):.4f}")
