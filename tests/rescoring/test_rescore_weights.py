"""``--model`` of the re-scoring commands: a Hugging Face folder or name as given, an exported warm start merged."""

import json
from pathlib import Path

import pytest

from diagnostics.load import DiagnosticsError
from rescoring.rescore import model_weights

ROOT = Path(__file__).resolve().parents[2]
WARM_START = ROOT / "training" / "warm_starts" / "smollm2-alfworld"


def test_a_folder_or_name_is_kept(tmp_path):
    assert model_weights("smollm2") == "smollm2"
    (tmp_path / "config.json").write_text("{}")
    assert model_weights(str(tmp_path)) == str(tmp_path)


def test_an_adapter_without_its_base_model_is_refused_by_name(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 8}))
    with pytest.raises(DiagnosticsError, match=f"--model: {tmp_path} is a LoRA adapter"):
        model_weights(str(tmp_path))


def test_the_shipped_warm_start_is_merged_into_its_base_model():
    from training.policy import initial_weights

    folder = Path(model_weights(str(WARM_START)))
    assert (folder / "config.json").is_file()
    assert folder == initial_weights("smollm2", warm_start=str(WARM_START))  # the one cached merge
