"""Fig. 5 (AUROC under realized and swapped o_{k+1}) from swap.json files in the format of rescoring.swap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from figures import __main__ as figures_main
from figures import fig5_swap, paper
from tests.figures.runs import make_run
from tests.figures.test_figures import assert_png


def interval(auroc, half=0.05):
    """``{"auroc", "ci_low", "ci_high"}``; a missing AUROC (None) has no interval either."""
    if auroc is None:
        return {"auroc": None, "ci_low": None, "ci_high": None}
    return {"auroc": auroc, "ci_low": auroc - half, "ci_high": auroc + half}


def write_swap(run_dir, *, run="ocsd_s0", realized=0.71, swapped=0.52, steps=(10, 50), counts=(30, 20, 10),
               **extra) -> Path:
    """Write ``run_dir/swap/swap.json`` as ``python -m rescoring.swap`` does: the pooled AUROCs, one entry per
    checkpoint (realized falling, swapped rising by 0.01 a checkpoint) and the settings."""
    n_progress, n_no_progress, n_invalid = counts
    per_checkpoint = [{"global_step": g, "checkpoint": f"{run}/global_step_{g}",
                       "n_steps": n_progress + n_no_progress + n_invalid, "n_progress": n_progress,
                       "n_no_progress": n_no_progress, "n_invalid": n_invalid, "n_insufficient_donors": 0,
                       "realized": interval(realized - 0.01 * i if realized is not None else None),
                       "swapped": interval(swapped + 0.01 * i if swapped is not None else None),
                       "rescored_max_abs_diff": 1e-4} for i, g in enumerate(steps)]
    k = len(steps)
    data = {"realized": interval(realized), "swapped": interval(swapped),
            "n_steps": k * (n_progress + n_no_progress + n_invalid), "n_progress": k * n_progress,
            "n_no_progress": k * n_no_progress, "n_invalid": k * n_invalid, "n_trajectories": 12, "n_boot": 200,
            "ci": 0.95, "donors": 5, "per_category": 40, "seed": 0, "run": run, "model": "Qwen/Qwen3-4B",
            "checkpoints": list(steps), "per_checkpoint": per_checkpoint, "insufficient_donors": [],
            "orientation": "higher mean |e| predicts progress", **extra}
    if run is None:
        del data["run"]
    path = Path(run_dir) / "swap" / "swap.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def drawn(out) -> dict:
    return {g["label"]: g for g in json.loads((Path(out) / "fig5_swap.json").read_text())["groups"]}


def test_values_drawn_are_the_swap_files(tmp_path, capsys):
    write_swap(tmp_path / "a", run="ocsd_s0", realized=0.71, swapped=0.52)
    write_swap(tmp_path / "b", run=None, realized=0.64, swapped=0.49)  # no run name: the folder's
    out = tmp_path / "out"
    assert fig5_swap.main(["--run", str(tmp_path / "a"), "--run", str(tmp_path / "b"), "--out", str(out),
                           "--pdf"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert_png(out / "fig5_swap.png")
    assert (out / "fig5_swap.pdf").stat().st_size > 1000
    groups = drawn(out)
    assert list(groups) == ["ocsd_s0", "b"]
    for label, folder in (("ocsd_s0", "a"), ("b", "b")):
        source = json.loads((tmp_path / folder / "swap" / "swap.json").read_text())
        for condition in ("realized", "swapped"):
            assert groups[label][condition] == source[condition]
        assert (groups[label]["n_progress"], groups[label]["n_invalid"]) == (source["n_progress"], source["n_invalid"])
        assert groups[label]["kind"] == "run"

    write_swap(tmp_path / "a", run="ocsd_s0", realized=0.83, swapped=0.40)  # other data, other bars
    assert fig5_swap.main(["--run", str(tmp_path / "a"), "--out", str(out)]) == 0
    assert drawn(out)["ocsd_s0"]["realized"] == interval(0.83) and drawn(out)["ocsd_s0"]["swapped"] == interval(0.40)


def test_bars_and_caption(tmp_path, monkeypatch):
    """The bar heights are the AUROCs, the whiskers their intervals; a null AUROC has no bar and is named in the
    caption, which says what the figure is drawn from."""
    import matplotlib.figure

    from tests.figures.test_figures import bars

    captions, figures = [], []
    real = matplotlib.figure.Figure.savefig

    def spy(self, fname, *args, **kwargs):
        captions.extend(t.get_text() for t in self.texts if t.get_gid() == "caption")
        figures.append(self)
        return real(self, fname, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    write_swap(tmp_path / "a", run="ocsd_s0", realized=0.71, swapped=None, counts=(30, 20, 10))
    assert fig5_swap.main(["--run", str(tmp_path / "a"), "--out", str(tmp_path / "out")]) == 0
    ax = next(a for a in figures[0].axes if a.get_gid() == "auroc")
    patches = {p.get_gid(): p.get_height() for p in ax.patches if p.get_gid()}
    assert patches == {"ocsd_s0|realized": pytest.approx(0.71)}
    heights, lows, highs = bars(figures[0], "auroc")
    assert (lows, highs) == (pytest.approx([0.66]), pytest.approx([0.76]))
    assert {t.get_text() for t in ax.texts} == {"0.710", "n/a"}
    assert ax.get_ylim() == (0, 1) and 0.5 in [line.get_ydata()[0] for line in ax.get_lines()]
    assert drawn(tmp_path / "out")["ocsd_s0"]["swapped"] == interval(None)
    text = " ".join(captions[0].split())
    assert len(captions) == 1
    assert "ocsd_s0" in text and "checkpoints 10, 50" in text and "60 progress vs 20 invalid steps" in text
    assert "40 no-progress excluded" in text and "5 donors" in text
    assert "not drawn: ocsd_s0 swapped" in text


def test_per_checkpoint_groups(tmp_path):
    write_swap(tmp_path / "a", run="ocsd_s0", steps=(10, 50, 100))
    write_swap(tmp_path / "b", run="ocsd_s1", steps=(10, 150))
    out = tmp_path / "out"
    assert fig5_swap.main(["--run", str(tmp_path / "a"), "--run", str(tmp_path / "b"), "--per-checkpoint",
                           "--out", str(out)]) == 0
    assert_png(out / "fig5_swap.png")
    groups = drawn(out)
    assert list(groups) == ["ocsd_s0\nstep 10", "ocsd_s0\nstep 50", "ocsd_s0\nstep 100", "ocsd_s1\nstep 10",
                            "ocsd_s1\nstep 150"]
    source = json.loads((tmp_path / "a" / "swap" / "swap.json").read_text())
    for entry in source["per_checkpoint"]:
        group = groups[f"ocsd_s0\nstep {entry['global_step']}"]
        assert group["kind"] == "checkpoint" and group["global_step"] == entry["global_step"]
        assert (group["realized"], group["swapped"]) == (entry["realized"], entry["swapped"])
    assert json.loads((out / "fig5_swap.json").read_text())["per_checkpoint"] is True


def test_a_pooled_files_checkpoints_are_named_by_their_runs(tmp_path):
    """rescoring.swap_pool's file: its checkpoints drawn under the runs they came from, not "pooled (2 analyses)"."""
    a = json.loads(write_swap(tmp_path / "a", run="ocsd_s1", steps=(30,)).read_text())
    b = json.loads(write_swap(tmp_path / "b", run="grpo_s1", steps=(30, 40)).read_text())
    pooled = {**a, "run": "pooled (2 analyses)", "runs": ["ocsd_s1", "grpo_s1"], "checkpoints": [30, 40],
              "per_checkpoint": a["per_checkpoint"] + b["per_checkpoint"]}
    path = tmp_path / "pooled" / "swap.json"
    path.parent.mkdir()
    path.write_text(json.dumps(pooled))
    out = tmp_path / "out"
    assert fig5_swap.main(["--swap", str(path), "--per-checkpoint", "--out", str(out)]) == 0
    assert list(drawn(out)) == ["ocsd_s1\nstep 30", "grpo_s1\nstep 30", "grpo_s1\nstep 40"]
    assert fig5_swap.main(["--swap", str(path), "--out", str(out)]) == 0
    assert list(drawn(out)) == ["pooled (2 analyses)"]


def test_paper_reference_groups(tmp_path):
    write_swap(tmp_path / "a")
    out = tmp_path / "out"
    assert fig5_swap.main(["--swap", str(tmp_path / "a" / "swap" / "swap.json"), "--paper-reference",
                           "--out", str(out)]) == 0
    groups = drawn(out)
    assert list(groups) == ["ocsd_s0", "paper Qwen3-1.7B", "paper Qwen3-4B", "paper Qwen3-8B"]
    expected = {"Qwen3-1.7B": (0.803, 0.542), "Qwen3-4B": (0.668, 0.484), "Qwen3-8B": (0.664, 0.552)}
    for model, (realized, swapped) in expected.items():
        group = groups[f"paper {model}"]
        assert group["kind"] == "paper"
        assert (group["realized"]["auroc"], group["swapped"]["auroc"]) == (realized, swapped)
        assert (paper.SWAP_AUROC[model]["realized"].mean, paper.SWAP_AUROC[model]["swapped"].mean) == (realized,
                                                                                                       swapped)
        assert group["realized"]["ci_low"] is None and group["swapped"]["ci_high"] is None  # the paper prints none
    fig = fig5_swap.draw([*fig5_swap.groups([fig5_swap.read_swap(tmp_path / "a" / "swap")]),
                          *fig5_swap.paper_groups()])
    ax = fig.axes[0]
    hatched = {p.get_gid() for p in ax.patches if p.get_hatch()}
    assert hatched == {f"paper {m}|{c}" for m in expected for c in ("realized", "swapped")}
    assert any(line.get_gid() == "paper-separator" for line in ax.get_lines())
    from matplotlib.container import ErrorbarContainer

    assert sum(isinstance(c, ErrorbarContainer) for c in ax.containers) == 2  # whiskers: our two bars only


def test_a_run_without_swap_file_is_skipped_with_the_command(tmp_path, capsys):
    (tmp_path / "bare").mkdir()
    write_swap(tmp_path / "a")
    assert fig5_swap.main(["--run", str(tmp_path / "bare"), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "skipped" in err and f"python -m rescoring.swap --run {tmp_path / 'bare'}" in err
    assert not (tmp_path / "out" / "fig5_swap.png").exists()
    assert fig5_swap.main(["--run", str(tmp_path / "bare"), "--run", str(tmp_path / "a"),
                           "--out", str(tmp_path / "out")]) == 0
    assert f"python -m rescoring.swap --run {tmp_path / 'bare'}" in capsys.readouterr().err
    assert list(drawn(tmp_path / "out")) == ["ocsd_s0"]


@pytest.mark.parametrize("content, key", [
    ("{not json", "not valid JSON"),
    (json.dumps({"realized": interval(0.7), "n_progress": 3, "n_invalid": 2}), "swapped is missing"),
    (json.dumps({"realized": {"auroc": 0.7, "ci_low": 0.6}, "swapped": interval(0.5), "n_progress": 3,
                 "n_invalid": 2}), "realized.ci_high is missing"),
    (json.dumps({"realized": interval(0.7), "swapped": interval(0.5), "n_invalid": 2}), "n_progress is missing"),
    (json.dumps({"realized": interval(0.7), "swapped": {"auroc": "high", "ci_low": 0, "ci_high": 1},
                 "n_progress": 3, "n_invalid": 2}), "swapped.auroc is 'high'"),
    (json.dumps({"realized": interval(0.7), "swapped": interval(0.5), "n_progress": 3, "n_invalid": 2,
                 "per_checkpoint": [{"realized": interval(0.7), "swapped": interval(0.5)}]}),
     "per_checkpoint[0].global_step is missing"),
])
def test_a_malformed_file_is_an_error_naming_it(tmp_path, capsys, content, key):
    path = tmp_path / "run" / "swap" / "swap.json"
    path.parent.mkdir(parents=True)
    path.write_text(content)
    assert fig5_swap.main(["--run", str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and str(path) in err and key in err


def test_missing_inputs_are_errors(tmp_path, capsys):
    assert fig5_swap.main(["--run", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert fig5_swap.main(["--swap", str(tmp_path / "none.json"), "--out", str(tmp_path)]) == 2
    assert "none.json does not exist" in capsys.readouterr().err
    assert fig5_swap.main(["--out", str(tmp_path)]) == 2
    assert "no input" in capsys.readouterr().err


def test_python_m_figures_builds_fig5_from_the_runs_swap_files(tmp_path, capsys):
    with_swap = make_run(tmp_path / "ocsd_s0", method="ocsd", seed=0)
    without = make_run(tmp_path / "grpo_s0", method="grpo", seed=0)
    write_swap(with_swap, run="ocsd_s0")
    out = tmp_path / "out"
    assert figures_main.main(["--run", str(with_swap), "--run", str(without), "--out", str(out),
                              "--only", "fig5_swap", "--paper-reference", "Qwen3-4B"]) == 0
    captured = capsys.readouterr()
    assert f"python -m rescoring.swap --run {without}" in captured.err
    assert_png(out / "fig5_swap.png")
    assert list(drawn(out)) == ["ocsd_s0", "paper Qwen3-1.7B", "paper Qwen3-4B", "paper Qwen3-8B"]

    args = type("Args", (), {"out": tmp_path / "none", "pdf": False, "dpi": 80, "run": [str(without)],
                             "index": None})()
    result = figures_main.build_all([without], args, ["fig5_swap"])["fig5_swap"]
    assert result.startswith("skipped:") and f"python -m rescoring.swap --run {without}" in result


def test_caption_names_left_out_steps_and_another_orientation(tmp_path):
    path = write_swap(tmp_path / "a", n_insufficient_donors=3, orientation="higher mean |e| predicts invalid")
    inputs = [fig5_swap.read_swap(path)]
    text = fig5_swap.caption(inputs, fig5_swap.groups(inputs))
    assert "3 step(s) without enough donors left out" in text and "higher mean |e| predicts invalid" in text
    plain = fig5_swap.caption([fig5_swap.read_swap(write_swap(tmp_path / "b"))], [])
    assert "donors left out" not in plain and "predicts" not in plain


@pytest.mark.parametrize("runs, slanted", [(("ocsd_s1", "grpo_s1"), False),
                                           (("ocsd_qwen0.5b_s1", "grpo_qwen0.5b_s1"), True)])
def test_run_names_too_long_to_stand_side_by_side_are_slanted(runs, slanted):
    nan = float("nan")
    made = [fig5_swap.Group(f"{run}\nstep 6", "checkpoint", *({"auroc": 0.6, "ci_low": nan, "ci_high": nan},) * 2,
                            source="swap.json")
            for run in runs]
    fig = fig5_swap.draw(made + fig5_swap.paper_groups())
    ticks = fig.axes[0].get_xticklabels()
    assert [t.get_text() for t in ticks][:2] == [g.label for g in made]
    assert {t.get_rotation() for t in ticks} == ({30.0} if slanted else {0.0})
