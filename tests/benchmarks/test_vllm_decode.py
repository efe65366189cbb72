"""The parts of ``benchmarks/vllm_decode.py`` that run without a GPU: the weight packing that crosses to an
engine process, the prompts, the table and the argument checks."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest
import torch

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "vllm_decode.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("vllm_decode", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Model:
    def __init__(self):
        self.loaded = {}

    def load_weights(self, weights):
        self.loaded.update(weights)


def test_packed_weights_load_bit_for_bit(bench):
    gen = torch.Generator().manual_seed(0)
    weights = {"w": torch.randn(7, 5, generator=gen).bfloat16(), "b": torch.randn(3, generator=gen),
               "h": torch.randn(2, 3, 4, generator=gen).half().transpose(0, 2)}  # not contiguous
    packed = bench._pack(weights)
    assert all(isinstance(raw, bytes) for raw, _, _ in packed.values())
    model = _Model()
    runner = types.SimpleNamespace(get_model=lambda: model)
    bench._push(types.SimpleNamespace(model_runner=runner), packed)
    for name, tensor in weights.items():
        got = model.loaded[name]
        assert got.dtype == tensor.dtype and got.shape == tensor.shape
        assert torch.equal(got, tensor)
    plain = _Model()  # tensors handed over as they are (the engine in the trainer's process)
    bench._push(types.SimpleNamespace(model_runner=types.SimpleNamespace(get_model=lambda: plain)), weights)
    assert all(plain.loaded[name] is tensor for name, tensor in weights.items())


def test_prompts_are_seeded_and_sized(bench):
    a, b = bench.prompts(50, 1000, 3), bench.prompts(50, 1000, 3)
    assert a == b and bench.prompts(50, 1000, 4) != a
    assert all(700 <= len(p) <= 1300 for p in a)


def test_table_puts_modes_side_by_side(bench):
    def result(rate):
        return {"batches": {"64": {"new_tokens_per_s": rate, "ms_per_decode_step": 64 * 256 / rate}},
                "start_s": 1.0, "push_s": 0.1, "sleep_s": 0.2, "wake_s": 0.3, "push_changes_output": True,
                "push_back_restores": True}

    text = bench.table({"inproc": result(20000.0), "mp": result(10000.0)}, [64])
    assert "| batch 64: new tokens/s (ms a step) | 20,000 (0.82 ms) | 10,000 (1.64 ms) | 0.50 |" in text
    assert "| push_back_restores | True | True | |" in text


def test_unknown_mode_is_named(bench, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--modes", "inproc,remote"])
    assert exc.value.code == 2
    assert "--modes: unknown remote" in capsys.readouterr().err
