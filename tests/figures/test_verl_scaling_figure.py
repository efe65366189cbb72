"""``figures.verl_scaling``: the scaling table and figure from result files of ``benchmarks/verl_scaling.py``
(synthetic ones, written by the benchmark's own ``result``), and its refusals of files it cannot use."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from figures import verl_scaling

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "verl_scaling.py"
STEP_SECONDS = {("single", 1): 30.0, ("verl", 1): 60.0, ("verl", 2): 36.0, ("verl", 4): 24.0}


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("verl_scaling_bench_for_figure", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def write_results(bench, folder: Path, configs=STEP_SECONDS, returncode: int = 0) -> list[Path]:
    """One result file per configuration: three steps, the first slow, the others of the given step time."""
    folder.mkdir(parents=True, exist_ok=True)
    args = bench.build_parser().parse_args(["--games", str(folder)])
    paths = []
    for (backend, gpus), step in configs.items():
        rows = [{"step": i + 1, "time/step": step * (3 if i == 0 else 1), "time/rollout": step / 2,
                 "time/old_logprob": step / 10, "time/ref_logprob": step / 10, "time/replay_scoring": step / 20,
                 "time/update": step / 5} for i in range(3)]
        config = bench.Configuration(backend, gpus)
        got = bench.result(config, args, rows=rows, returncode=returncode, wall_s=100.0, card="4 x NVIDIA H100")
        paths.append(folder / f"{config.label}.json")
        paths[-1].write_text(json.dumps(got))
    return paths


def test_table_from_the_stored_results(bench, tmp_path):
    write_results(bench, tmp_path / "r")
    points = verl_scaling.load_points([tmp_path / "r"])  # a folder: its JSON files
    assert [p.label for p in points] == ["single-device, 1 GPU", "verl, 1 GPU", "verl, 2 GPUs", "verl, 4 GPUs"]
    lines = verl_scaling.scaling_table(points).splitlines()
    assert lines[0].startswith("| configuration | GPUs | rollout | old log-probs | reference | replay scoring |")
    single, verl1, verl2, verl4 = (line.split(" | ") for line in lines[2:])
    assert single[2:8] == ["15.00", "3.00", "3.00", "1.50", "6.00", "30.00"]  # the first step left out
    assert single[-3:] == ["1.00x", "-", "- |"]
    assert verl1[-3:] == ["0.50x", "1.00x", "100% |"]
    assert verl2[-3:] == ["0.83x", "1.67x", "83% |"]  # 60 / 36 = 1.67x on twice the GPUs
    assert verl4[-4:] == ["0.0417", "1.25x", "2.50x", "62% |"]


def test_command_writes_the_figure_and_table(bench, tmp_path, capsys):
    files = write_results(bench, tmp_path / "r")
    out = tmp_path / "figs"
    assert verl_scaling.main([*map(str, files), "--out", str(out), "--pdf"]) == 0
    assert (out / "verl_scaling.png").stat().st_size > 10_000 and (out / "verl_scaling.pdf").is_file()
    table = (out / "verl_scaling.md").read_text()
    assert table == verl_scaling.scaling_table(verl_scaling.load_points(files)) + "\n"
    assert "wrote" in capsys.readouterr().out


def test_verl_alone_has_no_single_device_column(bench, tmp_path):
    write_results(bench, tmp_path / "r", {("verl", 2): 30.0, ("verl", 4): 20.0})
    lines = verl_scaling.scaling_table(verl_scaling.load_points([tmp_path / "r"])).splitlines()
    assert lines[2].split(" | ")[-3:] == ["-", "1.00x", "100% |"] and lines[3].split(" | ")[-2:] == ["1.50x",
                                                                                                     "75% |"]


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(returncode=1), "its run failed (returncode 1)"),
    (lambda d: d["summary"].pop("time/update"), "time/update must be a number >= 0, got None"),
    (lambda d: d.update(gpus=0), "gpus must be a count >= 1, got 0"),
    (lambda d: d.update(backend="megatron"), "backend must be one of single, verl, got 'megatron'"),
    (lambda d: d.pop("summary"), "not a result of benchmarks/verl_scaling.py"),
])
def test_a_file_it_cannot_use_is_named(bench, tmp_path, capsys, change, message):
    path = write_results(bench, tmp_path / "r", {("verl", 2): 30.0})[0]
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    out = tmp_path / "figs"
    assert verl_scaling.main([str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(path) in err and message in err
    assert not (out / "verl_scaling.png").exists()


def test_refusals_of_the_inputs(bench, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert verl_scaling.main([str(tmp_path / "empty"), "--out", str(tmp_path / "figs")]) == 2
    assert "no input" in capsys.readouterr().err
    assert verl_scaling.main([str(tmp_path / "none.json"), "--out", str(tmp_path / "figs")]) == 2
    err = capsys.readouterr().err
    assert f"result file {tmp_path / 'none.json'} does not exist" in err
    first = write_results(bench, tmp_path / "a", {("verl", 2): 30.0})[0]
    second = write_results(bench, tmp_path / "b", {("verl", 2): 20.0})[0]
    assert verl_scaling.main([str(first), str(second), "--out", str(tmp_path / "figs")]) == 2
    assert "both hold verl, 2 GPUs" in capsys.readouterr().err


def test_table_names_the_configurations_that_ran_side_by_side(bench, tmp_path):
    paths = write_results(bench, tmp_path / "r")
    for path in paths[:3]:  # single, verl 1 and verl 2 at once, as --side-by-side runs them on four GPUs
        data = json.loads(path.read_text())
        data["alongside"] = [p.stem for p in paths[:3] if p != path]
        path.write_text(json.dumps(data))
    points = verl_scaling.load_points(paths)
    assert points[0].alongside == ("verl_1gpu", "verl_2gpu") and points[3].alongside == ()
    note = verl_scaling.scaling_table(points).splitlines()[-1]
    assert note == ("Ran at once on disjoint GPUs of the machine (sharing its CPUs, no GPU): single-device on 1 GPU, "
                    "verl on 1 GPU and verl on 2 GPUs.")
