"""Figure commands on small run folders written with the real record writers."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from figures import __main__ as figures_main
from figures import fig2_diagnosis, fig4_dynamics, fig6_cost, tables
from diagnostics.runs import phase_times
from figures._common import load_runs, method_label

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    path = Path(path)
    assert path.exists() and path.stat().st_size > 1000, path
    assert path.read_bytes()[:8] == PNG_MAGIC


def bars(fig, gid):
    """Heights and error-bar (low, high) of the bar axes with this gid."""
    ax = next(a for a in fig.axes if a.get_gid() == gid)
    from matplotlib.container import BarContainer, ErrorbarContainer

    container = next(c for c in ax.containers if isinstance(c, BarContainer))
    heights = np.array([p.get_height() for p in container.patches])
    whiskers = next(c for c in ax.containers if isinstance(c, ErrorbarContainer))
    segments = whiskers.lines[2][0].get_segments()
    lows = np.array([min(s[:, 1]) for s in segments])
    highs = np.array([max(s[:, 1]) for s in segments])
    return heights, lows, highs


def metrics_frame(run):
    return pd.read_json(Path(run) / "metrics.jsonl", lines=True)


# -- Fig. 2 ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fig2_result(runs):
    return fig2_diagnosis.diagnose_run(runs["ocsd0"], n_boot=40, seed=3, progress=False)


def test_fig2_values_drawn_equal_diagnostics(runs, fig2_result):
    from diagnostics import auroc, dratio, robustness
    from diagnostics.load import load

    data = load([runs["ocsd0"]])  # the diagnostics called directly, independent of the figure module
    ref_auroc = auroc.feedback_auroc(data, n_boot=40, seed=3)["signals"]
    ref_rob = robustness.robustness(data, n_boot=40, seed=3)
    ref_d = dratio.dratio(data, n_boot=40, seed=3)["categories"]
    fig = fig2_diagnosis.draw(fig2_result)
    for gid, ref, key in (("auroc", ref_auroc, "auroc"), ("delta", ref_rob, "delta"), ("dratio", ref_d, "mean")):
        heights, lows, highs = bars(fig, gid)
        assert heights == pytest.approx([v[key] for v in ref.values()], abs=1e-12)
        assert lows == pytest.approx([v["ci_low"] for v in ref.values()], abs=1e-12)
        assert highs == pytest.approx([v["ci_high"] for v in ref.values()], abs=1e-12)
    clouds = [a.get_gid() for a in fig.axes if str(a.get_gid()).startswith("clouds:")]
    assert clouds == ["clouds:full+", "clouds:ablated+", "clouds:residual+", "clouds:residual-"]
    assert all(a.images for a in fig.axes if str(a.get_gid()).startswith("clouds:"))


def test_fig2_command_writes_png_and_values(runs, tmp_path, capsys):
    assert fig2_diagnosis.main(["--run", str(runs["ocsd0"]), "--out", str(tmp_path), "--n-boot", "30", "--pdf"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert_png(tmp_path / "fig2_diagnosis.png")
    assert (tmp_path / "fig2_diagnosis.pdf").stat().st_size > 1000
    values = json.loads((tmp_path / "fig2_diagnosis.json").read_text())
    assert set(values["auroc"]["signals"]) == {"ablated", "full", "residual"}
    assert set(values["robustness"]) == {"raw", "standard", "matched", "early", "middle", "late"}


def test_fig2_draws_a_diagnostics_report(runs, tmp_path):
    from diagnostics.load import load
    from diagnostics.report import build_report

    build_report(load([runs["ocsd0"]]), tmp_path / "diag", n_boot=30, progress=False)
    result = fig2_diagnosis.read_report(tmp_path / "diag")
    report = json.loads((tmp_path / "diag" / "report.json").read_text())
    heights, _, _ = bars(fig2_diagnosis.draw(result), "auroc")
    assert heights == pytest.approx([v["auroc"] for v in report["auroc"]["signals"].values()])
    assert fig2_diagnosis.main(["--report", str(tmp_path / "diag" / "report.json"), "--out", str(tmp_path)]) == 0
    assert_png(tmp_path / "fig2_diagnosis.png")


def test_fig2_skips_a_run_without_checkpoints(runs, tmp_path, capsys):
    assert fig2_diagnosis.main(["--run", str(runs["grpo0"]), "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "skipped" in err and "no complete checkpoint" in err
    assert not (tmp_path / "fig2_diagnosis.png").exists()


# -- Fig. 4 ---------------------------------------------------------------------------------------

def test_fig4_overlays_runs_with_method_labels(runs, tmp_path):
    dirs = [runs["ocsd0"], runs["ocsd1"], runs["grpo0"]]
    panels = fig4_dynamics.curves(load_runs(dirs))
    assert list(panels)[:7] == ["val/success_rate", *(f"val/success/{t}" for t in
                                                      ("pick", "look", "clean", "heat", "cool", "pick2"))]
    fig = fig4_dynamics.draw(panels)
    ax = next(a for a in fig.axes if a.get_gid() == "val/success_rate")
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"OCSD (seed 0)", "OCSD (seed 1)", "GRPO"}
    ref = metrics_frame(runs["grpo0"]).dropna(subset=["val/success_rate"])
    assert lines["GRPO"].get_xdata() == pytest.approx(ref["step"].to_numpy())
    assert lines["GRPO"].get_ydata() == pytest.approx(ref["val/success_rate"].to_numpy())
    ax = next(a for a in fig.axes if a.get_gid() == "reward_mean")
    ref = metrics_frame(runs["ocsd1"])
    assert {l.get_label(): l for l in ax.get_lines()}["OCSD (seed 1)"].get_ydata() == pytest.approx(ref["reward_mean"])
    assert fig4_dynamics.main([*(x for d in dirs for x in ("--run", str(d))), "--out", str(tmp_path)]) == 0
    assert_png(tmp_path / "fig4_dynamics.png")


def test_fig4_runs_of_one_method_share_a_colour_and_differ_in_line_style(runs):
    labels = [f"{m} (seed {k})" for m in ("OCSD", "GRPO", "RLSD") for k in range(4)] + ["SDAR", "OPSD"]
    styles = fig4_dynamics.line_styles(labels)
    assert len(set(styles.values())) == len(labels)  # fourteen runs, fourteen looks
    for method in ("OCSD", "GRPO", "RLSD"):
        assert len({styles[f"{method} (seed {k})"][0] for k in range(4)}) == 1
    assert len({styles[lab][0] for lab in ("OCSD (seed 0)", "GRPO (seed 0)", "RLSD (seed 0)", "SDAR", "OPSD")}) == 5
    fig = fig4_dynamics.draw(fig4_dynamics.curves(load_runs([runs["ocsd0"], runs["ocsd1"], runs["grpo0"]])))
    ax = next(a for a in fig.axes if a.get_gid() == "reward_mean")
    drawn = {line.get_label(): (line.get_color(), line.get_linestyle()) for line in ax.get_lines()}
    assert drawn["OCSD (seed 0)"][0] == drawn["OCSD (seed 1)"][0] != drawn["GRPO"][0]
    assert drawn["OCSD (seed 0)"][1] != drawn["OCSD (seed 1)"][1]


def test_fig4_a_paper_method_keeps_its_colour_whichever_runs_are_drawn():
    from figures.paper import PAPER_METHODS

    alone = fig4_dynamics.line_styles(["OCSD (seed 1)", "OPSD"])
    beside = fig4_dynamics.line_styles(["GRPO", "GRPO+OPSD", "OCSD (seed 1)", "OPSD", "RLSD", "SDAR", "mine"])
    assert alone["OCSD (seed 1)"] == beside["OCSD (seed 1)"] and alone["OPSD"] == beside["OPSD"]
    fixed = fig4_dynamics.FIXED_COLOURS
    assert set(fixed) == {name for name, method in PAPER_METHODS.items() if method}
    assert [beside[m][0] for m in fixed if m in beside] == [f"C{fixed.index(m)}" for m in fixed if m in beside]
    assert beside["mine"][0] == f"C{len(fixed)}"  # a label outside the paper's methods: the next colour


def test_fig4_paper_reference_draws_the_papers_final_success(runs, tmp_path, capsys):
    from figures.paper import main_results

    runs_info = load_runs([runs["ocsd0"], runs["grpo0"]])
    lines = fig4_dynamics.paper_lines(runs_info, "Qwen3-1.7B")
    assert lines["val/success_rate"] == {"OCSD": main_results("Qwen3-1.7B", "OCSD")["overall"].mean / 100,
                                         "GRPO": main_results("Qwen3-1.7B", "GRPO")["overall"].mean / 100}
    assert lines["val/success/cool"]["GRPO"] == main_results("Qwen3-1.7B", "GRPO")["cool"].mean / 100
    fig = fig4_dynamics.draw(fig4_dynamics.curves(runs_info), paper=lines, paper_model="Qwen3-1.7B")
    ax = next(a for a in fig.axes if a.get_gid() == "val/success/pick")
    drawn = {line.get_gid(): line.get_ydata()[0] for line in ax.get_lines() if str(line.get_gid()).startswith("paper")}
    assert drawn == {f"paper|{k}": v for k, v in lines["val/success/pick"].items()}
    assert fig4_dynamics.main(["--run", str(runs["ocsd0"]), "--out", str(tmp_path), "--paper-reference", "GPT"]) == 2
    assert "--paper-reference" in capsys.readouterr().err


def test_fig4_without_validation_rows_draws_training_only(no_val_run, tmp_path, capsys):
    panels = fig4_dynamics.curves(load_runs([no_val_run]))
    assert list(panels) == ["success_rate", "reward_mean"]
    assert fig4_dynamics.main(["--run", str(no_val_run), "--out", str(tmp_path), "--label", "mine"]) == 0
    assert "has no validation rows; training panels only" in capsys.readouterr().err
    assert_png(tmp_path / "fig4_dynamics.png")
    # the paper's final success is a validation number: without validation panels it is not drawn, and said so
    assert fig4_dynamics.main(["--run", str(no_val_run), "--out", str(tmp_path), "--paper-reference", "Qwen3-4B"]) == 0
    assert "no validation panel, so the paper's final success (--paper-reference) is not drawn" in \
        capsys.readouterr().err


def test_fig4_skips_a_run_without_metrics(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert fig4_dynamics.main(["--run", str(tmp_path / "empty"), "--out", str(tmp_path)]) == 1
    assert "skipped" in capsys.readouterr().err


# -- Fig. 6 ---------------------------------------------------------------------------------------

def test_fig6_bars_are_phase_means(runs, tmp_path, capsys):
    from tests.figures.runs import make_run

    teacher = make_run(tmp_path / "sdar", method="sdar", seed=2, teacher=True)
    dirs = [runs["ocsd0"], runs["grpo0"], teacher]
    times = {r.label: phase_times(r.metrics, list(fig6_cost.PHASES)) for r in load_runs(dirs)}
    fig = fig6_cost.draw(times)
    ax = next(a for a in fig.axes if a.get_gid() == "seconds")
    drawn = {p.get_gid(): p.get_height() for p in ax.patches}
    for label, run in zip(["OCSD", "GRPO", "SDAR"], dirs):
        ref = metrics_frame(run).reindex(columns=list(fig6_cost.PHASES)).fillna(0.0).mean()
        for key, value in ref.items():
            if value > 0:
                assert drawn[f"{label}|{key}"] == pytest.approx(value, rel=1e-12)
            else:
                assert drawn.get(f"{label}|{key}", 0.0) == 0.0
    assert fig6_cost.main([*(x for d in dirs for x in ("--run", str(d))), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    ref = metrics_frame(runs["ocsd0"]).reindex(columns=list(fig6_cost.PHASES)).fillna(0.0).mean()
    assert f"{100 * ref['time/replay_scoring'] / ref.sum():.2f}%" in out
    assert "| replay-scoring share of the total |" in out and "0.00%" in out  # GRPO does no replay scoring
    overhead = ref["time/replay_scoring"] / (ref.sum() - ref["time/replay_scoring"])
    assert f"| replay scoring over the other phases | {100 * overhead:.2f}%" in out
    assert "paper" not in out
    assert_png(tmp_path / "fig6_cost.png")


def test_fig6_paper_reference_adds_the_papers_runtime(runs, tmp_path, capsys):
    assert fig6_cost.main(["--run", str(runs["ocsd0"]), "--out", str(tmp_path), "--paper-reference"]) == 0
    text = (tmp_path / "fig6_cost.md").read_text()
    assert "paper (Qwen3-4B, 8 A100)" in text and "| 7.52 |" in text and "1.40%" in text and "| 0.12 |" in text


def test_fig6_skips_without_timings(tmp_path, capsys):
    from ocsd.records import RunWriter

    w = RunWriter(tmp_path / "untimed")
    w.write_run_json({"run": "untimed", "method": "grpo", "env": "alfworld", "model": "none", "seed": 0})
    w.append_metrics({"step": 1, "reward_mean": 0.1, "success_rate": 0.0})
    assert fig6_cost.main(["--run", str(tmp_path / "untimed"), "--out", str(tmp_path)]) == 1
    assert "time/<phase>" in capsys.readouterr().err


# -- Table 1 --------------------------------------------------------------------------------------

def last_val(run):
    return metrics_frame(run).dropna(subset=["val/success_rate"]).iloc[-1]


def test_table_mean_std_over_seeds(runs, tmp_path, capsys):
    dirs = [runs["ocsd0"], runs["ocsd1"], runs["grpo0"]]
    assert tables.main([*(x for d in dirs for x in ("--run", str(d))), "--out", str(tmp_path)]) == 0
    md = capsys.readouterr().out
    ocsd = pd.DataFrame([last_val(runs["ocsd0"]), last_val(runs["ocsd1"])])
    row = next(line for line in md.splitlines() if line.startswith("| OCSD |"))
    cells = [c.strip().strip("*") for c in row.strip("|").split("|")]
    assert cells[1] == "2"
    for col, key in zip(cells[2:], [f"val/success/{t}" for t in ("pick", "look", "clean", "heat", "cool", "pick2")]
                        + ["val/success_rate"]):
        assert col == f"{100 * ocsd[key].mean():.1f} ± {100 * ocsd[key].std(ddof=1):.1f}"
    grpo = next(line for line in md.splitlines() if line.startswith("| GRPO |"))
    assert f"{100 * last_val(runs['grpo0'])['val/success_rate']:.1f}" in grpo
    assert md.index("| GRPO |") < md.index("| OCSD |")  # the paper's row order
    tex = (tmp_path / "table_main.tex").read_text()
    assert r"\begin{tabular}" in tex and r"\textbf{" in tex and r"$_{\pm" in tex


def test_table_from_sweep_index(runs, no_val_run, tmp_path, capsys):
    index = [
        {"method": "ocsd", "seed": 0, "rho": 0.2, "beta": 0.5, "run_dir": str(runs["ocsd0"]), "status": "ok",
         "returncode": 0},
        {"method": "ocsd", "seed": 1, "rho": 0.2, "beta": 0.5, "run_dir": str(runs["ocsd1"]), "status": "ok",
         "returncode": 0},
        {"method": "grpo", "seed": 0, "rho": 0.2, "beta": 0.5, "run_dir": str(no_val_run), "status": "ok",
         "returncode": 0},
        {"method": "sdar", "seed": 0, "rho": 0.2, "beta": 0.5, "run_dir": "sdar_s0", "status": "failed",
         "returncode": 1},
    ]
    (tmp_path / "index.json").write_text(json.dumps(index))
    assert tables.main(["--index", str(tmp_path), "--out", str(tmp_path / "out"), "--format", "md"]) == 0
    captured = capsys.readouterr()
    assert "| OCSD | 2 |" in captured.out and "GRPO" not in captured.out
    assert "no validation row" in captured.err and "return code 1" in captured.err
    assert (tmp_path / "out" / "table_main.md").exists() and not (tmp_path / "out" / "table_main.tex").exists()


def _evaluation(rng, types, **extra) -> dict:
    per = {t: {"n": 4, "success_rate": float(rng.uniform(0, 1))} for t in types}
    return {"success_rate": float(rng.uniform(0, 1)), "per_type": per, "repeats": 2, **extra}


def test_table_takes_the_evaluation_of_the_last_checkpoint(tmp_path, capsys):
    """A run's global_step_N/eval.json of its last checkpoint replaces its validation row (also for a run without
    any); an evaluation of an earlier checkpoint is not used; a broken one is named."""
    from diagnostics.runs import evaluation_row
    from tests.figures.runs import make_run

    rng = np.random.default_rng(5)
    types = ("pick", "look", "clean", "heat", "cool", "pick2")
    with_val = make_run(tmp_path / "ocsd_s0", method="ocsd", seed=0)
    without_val = make_run(tmp_path / "ocsd_s1", method="ocsd", seed=1, val_every=None)
    earlier = make_run(tmp_path / "grpo_s0", method="grpo", seed=0)
    evals = {}
    for run, step in ((with_val, 12), (without_val, 12), (earlier, 6)):
        (run / f"global_step_{step}").mkdir()
        evals[run.name] = _evaluation(rng, types)
        (run / f"global_step_{step}" / "eval.json").write_text(json.dumps(evals[run.name]))
    (earlier / "global_step_12").mkdir()  # the last checkpoint, without an evaluation
    assert tables.main([*(x for d in (with_val, without_val, earlier) for x in ("--run", str(d))),
                        "--out", str(tmp_path / "out"), "--format", "md"]) == 0
    captured = capsys.readouterr()
    ocsd = next(line for line in captured.out.splitlines() if line.startswith("| OCSD |"))
    cells = [c.strip().strip("*") for c in ocsd.strip("|").split("|")]
    rows = [evaluation_row(evals["ocsd_s0"]), evaluation_row(evals["ocsd_s1"])]
    for col, key in zip(cells[2:], [f"val/success/{t}" for t in types] + ["val/success_rate"]):
        values = [r[key] for r in rows]
        assert col == f"{100 * np.mean(values):.1f} ± {100 * np.std(values, ddof=1):.1f}"
    grpo = next(line for line in captured.out.splitlines() if line.startswith("| GRPO |"))
    assert f"{100 * last_val(earlier)['val/success_rate']:.1f}" in grpo
    assert "ocsd_s0: global_step_12/eval.json" in captured.err and "grpo_s0: metrics.jsonl" in captured.err

    (with_val / "global_step_12" / "eval.json").write_text(json.dumps({"per_type": {}}))
    assert tables.main(["--run", str(with_val), "--out", str(tmp_path / "bad")]) == 2
    assert "global_step_12/eval.json" in capsys.readouterr().err


def test_table_takes_the_evaluations_kept_apart(tmp_path, capsys):
    """``--evals DIR``: each run's eval_<RUN>_step<K>.json under DIR (its latest, or step K with ``--eval-step``)
    replaces the validation rows; a run without one is left out and named, and the files used are named under the
    table. Rows evaluated at different steps name their step in the label; rows all of one step do not."""
    from diagnostics.runs import evaluation_row
    from tests.figures.runs import make_run

    rng = np.random.default_rng(11)
    types = ("pick", "look", "clean", "heat", "cool", "pick2")
    series = tmp_path / "series"
    ocsd = [make_run(series / f"ocsd_q_s{s}", method="ocsd", seed=s) for s in (1, 2)]
    grpo = make_run(series / "grpo_q_s1", method="grpo", seed=1)
    evals = {(run.name, step): _evaluation(rng, types) for run in ocsd for step in (26, 50)}
    evals[(grpo.name, 26)] = _evaluation(rng, types)
    for (name, step), result in evals.items():
        folder = series / f"eval_step{step}"
        folder.mkdir(exist_ok=True)
        (folder / f"eval_{name}_step{step}.json").write_text(json.dumps(result))
    (series / "eval_step50" / "eval_warm_start.json").write_text("{}")  # not an evaluation of a run: ignored
    argv = [x for run in (*ocsd, grpo) for x in ("--run", str(run))] + ["--evals", str(series), "--format", "md"]

    def overall(line_start: str, out: str) -> str:
        line = next(line for line in out.splitlines() if line.startswith(line_start))
        return [c.strip().strip("*") for c in line.strip("|").split("|")][-1]

    assert tables.main(argv + ["--out", str(tmp_path / "latest")]) == 0
    out = capsys.readouterr().out
    latest = [evaluation_row(evals[(run.name, 50)])["val/success_rate"] for run in ocsd]
    mean, std = 100 * np.mean(latest), 100 * np.std(latest, ddof=1)
    assert overall("| OCSD (step 50) |", out) == f"{mean:.1f} ± {std:.1f}"
    assert overall("| GRPO (step 26) |", out) == f"{100 * evals[(grpo.name, 26)]['success_rate']:.1f}"
    assert "eval_step50/eval_ocsd_q_s1_step50.json" in out and "eval_step26/eval_grpo_q_s1_step26.json" in out
    assert "(step 50)" in (tmp_path / "latest" / "table_main.md").read_text()

    assert tables.main(argv + ["--paper-reference", "Qwen3-1.7B", "--out", str(tmp_path / "paper")]) == 0
    out = capsys.readouterr().out  # the step suffix does not hide which of the paper's rows are ours
    assert "| paper, Qwen3-1.7B: OCSD |" in out and "| paper, Qwen3-1.7B: GRPO |" in out and "SDAR" not in out

    assert tables.main(argv + ["--eval-step", "26", "--out", str(tmp_path / "at26")]) == 0
    out = capsys.readouterr().out
    at26 = [evals[(run.name, 26)]["success_rate"] for run in ocsd]
    assert overall("| OCSD |", out) == f"{100 * np.mean(at26):.1f} ± {100 * np.std(at26, ddof=1):.1f}"

    assert tables.main(argv + ["--eval-step", "50", "--out", str(tmp_path / "at50")]) == 0
    captured = capsys.readouterr()
    assert "| GRPO |" not in captured.out
    assert "grpo_q_s1: no evaluation of step 50" in captured.out and "(it has 26)" in captured.out

    (series / "eval_step26" / f"eval_{ocsd[1].name}_step26.json").unlink()
    assert tables.main(argv + ["--out", str(tmp_path / "mixed")]) == 0
    out = capsys.readouterr().out
    assert "| OCSD (step 50) |" in out  # each seed's latest: still 50 for both
    (series / "eval_step50" / f"eval_{ocsd[1].name}_step50.json").rename(
        series / "eval_step26" / f"eval_{ocsd[1].name}_step26.json")
    assert tables.main(argv + ["--out", str(tmp_path / "seeds")]) == 0
    out = capsys.readouterr().out
    assert "| OCSD (steps 26, 50) |" in out and "| GRPO (step 26) |" in out


@pytest.mark.parametrize("extra, message", [
    (["--eval-step", "50"], "--eval-step needs --evals"),
    (["--evals", "missing"], "not a folder"),
    (["--evals", "."], "no evaluation there"),
    (["--evals", ".", "--eval-step", "0"], "--eval-step"),
])
def test_table_evaluations_bad_input_is_named(runs, tmp_path, monkeypatch, capsys, extra, message):
    monkeypatch.chdir(tmp_path)
    try:
        code = tables.main(["--run", str(runs["ocsd0"]), "--out", str(tmp_path / "out"), *extra])
    except SystemExit as refused:  # argparse's own refusal of a flag's value
        code = refused.code
    assert code == 2 and message in capsys.readouterr().err


def test_evaluation_row_keeps_the_environments_metrics():
    from diagnostics.runs import evaluation_row

    result = {"success_rate": 0.25, "score": 0.61, "n": 8, "greedy": False,
              "per_type": {"fashion": {"success_rate": 0.5}, "beauty": {"n": 0}}}
    assert evaluation_row(result, ("score", "success_rate")) == {
        "val/success_rate": 0.25, "val/success/fashion": 0.5, "val/score": 0.61}
    with pytest.raises(ValueError, match="success_rate"):
        evaluation_row({"score": 1.0})


def test_table_skips_without_validation_rows(no_val_run, tmp_path, capsys):
    assert tables.main(["--run", str(no_val_run), "--out", str(tmp_path)]) == 1
    assert "no run has a validation row" in capsys.readouterr().err


# -- python -m figures, bad input, no statistics code ----------------------------------------------

def test_all_figures_command(runs, no_val_run, tmp_path):
    out = tmp_path / "all"
    proc = subprocess.run([sys.executable, "-m", "figures", "--run", str(runs["ocsd0"]), "--run", str(runs["grpo0"]),
                           "--out", str(out), "--n-boot", "30"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for name in ("fig2_diagnosis_ocsd_s0", "fig4_dynamics", "fig6_cost"):
        assert_png(out / f"{name}.png")
    assert (out / "table_main.md").exists() and (out / "table_main.tex").exists()
    assert "skipped one run" in proc.stdout and "grpo_s0" in proc.stdout

    args = type("Args", (), {"out": tmp_path / "noval", "pdf": False, "dpi": 80, "n_boot": 10, "seed": 0,
                             "run": [str(no_val_run)], "index": None})()
    results = figures_main.build_all([no_val_run], args)
    assert results["tables"].startswith("skipped: no run has a validation row")
    assert results["fig2_diagnosis"].startswith("skipped:") and "no complete checkpoint" in results["fig2_diagnosis"]
    assert_png(results["fig4_dynamics"][0])


@pytest.mark.parametrize("module", ["figures", "figures.fig1_example", "figures.fig2_diagnosis",
                                    "figures.fig4_dynamics", "figures.fig6_cost", "figures.tables"])
def test_missing_run_folder_exits_2(module, tmp_path, capsys):
    import importlib

    main = importlib.import_module(module if module != "figures" else "figures.__main__").main
    assert main(["--run", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "does not exist" in err


def test_bad_input_has_no_traceback(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "metrics.jsonl").write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    for args in (["--run", str(tmp_path / "nope")], ["--run", str(tmp_path / "bad")]):
        proc = subprocess.run([sys.executable, "-m", "figures.fig4_dynamics", *args, "--out", str(tmp_path)],
                              cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 2
        assert proc.stderr.startswith("error:") and "Traceback" not in proc.stderr


def test_figures_contain_no_statistics_code():
    banned = {"scipy", "sklearn", "statsmodels"}
    for path in sorted((ROOT / "figures").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in banned for n in names), f"{path.name} imports {names}"
    code = ("import sys, figures.__main__, figures.fig4_dynamics, figures.fig6_cost, figures.tables; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'sklearn', 'diagnostics')))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # statistics of runs only, no estimators
    assert proc.stdout.strip() == "['diagnostics', 'diagnostics.runs']"


def test_table_with_the_papers_rows(runs, tmp_path, capsys):
    """--paper-reference adds the paper's rows of the methods in the table, with the paper's numbers, after
    ours and outside the ranking; a model the paper has not is refused by name."""
    from figures import paper

    argv = ["--run", str(runs["ocsd0"]), "--run", str(runs["grpo0"]), "--out", str(tmp_path)]
    assert tables.main([*argv, "--paper-reference", "Qwen3-4B"]) == 0
    md = capsys.readouterr().out
    lines = md.splitlines()
    ours = [i for i, line in enumerate(lines) if line.startswith(("| OCSD |", "| GRPO |"))]
    theirs = [i for i, line in enumerate(lines) if line.startswith("| paper, Qwen3-4B:")]
    assert [lines[i].split("|")[1].strip() for i in theirs] == ["paper, Qwen3-4B: GRPO", "paper, Qwen3-4B: OCSD"]
    assert max(ours) < min(theirs)
    ocsd = paper.main_results("Qwen3-4B", "OCSD")
    cells = [c.strip() for c in lines[theirs[1]].strip("|").split("|")]
    assert cells[1] == "paper" and "*" not in lines[theirs[1]]
    assert cells[2:] == [f"{ocsd[c].mean:.1f} ± {ocsd[c].std:.1f}"
                         for c in ("pick", "look", "clean", "heat", "cool", "pick2", "overall")]
    tex = (tmp_path / "table_main.tex").read_text()
    overall = ocsd["overall"]
    assert r"\textit{paper, Qwen3-4B: OCSD}" in tex and f"{overall.mean:.1f}$_{{\\pm {overall.std:.1f}}}$" in tex
    assert tables.main([*argv, "--paper-reference", "Qwen3-0.6B"]) == 2
    assert "--paper-reference: 'Qwen3-0.6B'" in capsys.readouterr().err


def test_ablation_table_holds_grpo_ocsd_and_the_ablations(runs, tmp_path, capsys):
    from figures import paper
    from tests.figures.runs import make_run

    ablation = [make_run(tmp_path / f"{m}_s{seed}", method=m, seed=seed)
                for m in ("ocsd_no_ablated", "ocsd_random_select") for seed in (0, 1)]
    argv = [x for d in [runs["ocsd0"], runs["grpo0"], *ablation] for x in ("--run", str(d))]
    assert tables.main([*argv, "--out", str(tmp_path), "--paper-reference", "Qwen3-1.7B"]) == 0
    text = (tmp_path / "table_ablation.md").read_text()
    assert "Note: WebShop left out: no WebShop run" in text
    md = [line for line in text.splitlines() if line.startswith("|")]
    rows = [line.split("|")[1].strip() for line in md[2:]]
    ours = [r for r in rows if not r.startswith("paper")]
    assert set(ours) == {method_label(m) for m in ("grpo", "ocsd", "ocsd_no_ablated", "ocsd_random_select")}
    seeds = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in md[2:]}
    assert seeds[method_label("ocsd_no_ablated")] == "2"
    theirs = [r for r in rows if r.startswith("paper")]
    assert theirs == [f"paper, Qwen3-4B: {name}" for name in ("GRPO", "w/o Ablated Teacher", "w/ Random Select",
                                                               "OCSD")]
    line = next(x for x in md if "w/ Random Select" in x)
    value = paper.ablation_results("w/ Random Select", detailed=True)["overall"]
    assert line.strip().strip("|").split("|")[-1].strip() == f"{value.mean:.1f} ± {value.std:.1f}"
    assert r"\label{tab:ablation}" in (tmp_path / "table_ablation.tex").read_text()
    # without an ablation run there is no ablation table
    assert tables.main(["--run", str(runs["ocsd0"]), "--out", str(tmp_path / "plain")]) == 0
    assert not (tmp_path / "plain" / "table_ablation.md").exists()


def test_fig6_modules_broken_axis_shows_every_phase(runs, tmp_path):
    """The paper's layout: each phase's bar is its mean seconds on both sides of the break, the break falls
    in the widest gap so the sub-second phase is inside the lower axis, and every bar's seconds are printed."""
    times = {r.label: phase_times(r.metrics, list(fig6_cost.PHASES)) for r in load_runs([runs["ocsd0"]])}
    times["OCSD"].seconds["time/advantage"] = 0.004  # a phase of milliseconds beside phases of seconds
    fig = fig6_cost.draw_modules(times)
    axes = {a.get_gid(): a for a in fig.axes if a.get_gid()}
    assert set(axes) == {"high", "low"}
    low_top, high_bottom = axes["low"].get_ylim()[1], axes["high"].get_ylim()[0]
    assert 0.004 < low_top < high_bottom < min(v for k, v in times["OCSD"].seconds.items() if k != "time/advantage"
                                                 and v > 0)
    for ax in axes.values():
        drawn = {p.get_gid(): p.get_height() for p in ax.patches}
        for key, value in times["OCSD"].seconds.items():
            if value > 0:
                assert drawn[f"OCSD|{key}"] == pytest.approx(value)
    texts = {t.get_text() for ax in axes.values() for t in ax.texts}
    assert {f"{v:.3g}" for v in times["OCSD"].seconds.values() if v > 0} <= texts
    assert fig6_cost.axis_break([1.0, 2.0, 5.0]) is None  # within a factor 20: one axis
    assert fig6_cost.axis_break([0.01, 0.02, 5.0, 80.0]) == pytest.approx((0.02 * 1.4, 5.0 * 0.8))


def test_every_figure_says_what_it_is_drawn_from(runs, tmp_path, monkeypatch):
    """Each figure carries one caption line naming its runs (and their steps) or its report's counts."""
    import matplotlib.figure

    captions = {}
    real = matplotlib.figure.Figure.savefig

    def spy(self, fname, *args, **kwargs):
        captions[Path(fname).stem] = [t.get_text() for t in self.texts if t.get_gid() == "caption"]
        return real(self, fname, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    fig4_dynamics.main(["--run", str(runs["ocsd0"]), "--run", str(runs["grpo0"]), "--out", str(tmp_path)])
    fig6_cost.main(["--run", str(runs["ocsd0"]), "--out", str(tmp_path)])
    steps = metrics_frame(runs["ocsd0"])["step"].tolist()
    for name in ("fig4_dynamics", "fig6_cost", "fig6_cost_modules"):
        assert len(captions[name]) == 1, name
        assert f"({runs['ocsd0'].name}, steps {min(steps)}-{max(steps)})" in captions[name][0]
    assert runs["grpo0"].name in captions["fig4_dynamics"][0]


def test_fig2_marks_the_papers_aurocs(fig2_result):
    """With the paper reference, panel (c) carries the paper's AUROC of each signal at that signal's bar."""
    from figures.paper import FEEDBACK_AUROC

    ax = next(a for a in fig2_diagnosis.draw(fig2_result, paper=True).axes if a.get_gid() == "auroc")
    line = next(artist for artist in ax.lines if artist.get_gid() == "paper")
    signals = list(fig2_result["auroc"]["signals"])
    assert list(line.get_ydata()) == [FEEDBACK_AUROC[s].mean for s in signals if s in FEEDBACK_AUROC]
    assert list(line.get_xdata()) == [i for i, s in enumerate(signals) if s in FEEDBACK_AUROC]
    low, high = ax.get_ylim()  # every diamond inside the axis, whatever our bars' range
    assert all(low < y < high for y in line.get_ydata())
    plain = next(a for a in fig2_diagnosis.draw(fig2_result).axes if a.get_gid() == "auroc")
    assert not any(artist.get_gid() == "paper" for artist in plain.lines)


def _md_rows(text: str) -> dict[str, list[str]]:
    """Row label -> cells of a Markdown table (header and rule left out)."""
    lines = [line for line in text.splitlines() if line.startswith("|")][2:]
    return {cells[0]: cells[1:] for cells in ([c.strip().strip("*") for c in line.strip("|").split("|")]
                                              for line in lines)}


def test_tables_of_the_three_benchmarks(tmp_path, capsys):
    """ALFWorld and WebShop runs share the main table (WebShop's score and success beside ALFWorld's columns; a
    method without a WebShop run has '-' there); Search-QA runs make the ID/OOD/Avg table and the per-data-set
    table, each cell the mean ± std of the runs' last validation rows; the paper's rows come from its tables."""
    from figures import paper
    from tests.figures.runs import make_run

    dirs = {(env, m, s): make_run(tmp_path / f"{env}_{m}_s{s}", method=m, seed=s, env=env)
            for env in ("alfworld", "webshop", "searchqa") for m in ("grpo", "ocsd") for s in (0, 1)}
    dirs.pop(("webshop", "grpo", 0)), dirs.pop(("webshop", "grpo", 1))
    argv = [x for d in dirs.values() for x in ("--run", str(d))]
    assert tables.main([*argv, "--out", str(tmp_path / "out"), "--paper-reference", "Qwen3-8B"]) == 0
    capsys.readouterr()
    out = tmp_path / "out"
    main = _md_rows((out / "table_main.md").read_text())
    header = (out / "table_main.md").read_text().splitlines()[0]
    assert header.endswith("| Overall | WebShop Score | WebShop Succ. |")
    vals = {key: last_val(d) for key, d in dirs.items()}
    score = [vals[("webshop", "ocsd", s)]["val/score"] for s in (0, 1)]
    assert main["OCSD"][-2] == f"{100 * np.mean(score):.1f} ± {100 * np.std(score, ddof=1):.1f}"
    assert main["GRPO"][-2:] == ["-", "-"] and main["GRPO"][0] == "2"
    ours = paper.main_results("Qwen3-8B", "OCSD")
    assert main["paper, Qwen3-8B: OCSD"][-2:] == [f"{ours[c].mean:.1f} ± {ours[c].std:.1f}"
                                                   for c in ("webshop_score", "webshop_success")]
    search = _md_rows((out / "table_searchqa.md").read_text())
    em = [vals[("searchqa", "grpo", s)]["val/em_ood"] for s in (0, 1)]
    assert search["GRPO"][2] == f"{100 * np.mean(em):.1f} ± {100 * np.std(em, ddof=1):.1f}"
    ref = paper.searchqa_results("Qwen3-8B", "GRPO")
    assert search["paper, Qwen3-8B: GRPO"][1:] == [f"{ref[c].mean:.1f} ± {ref[c].std:.1f}" for c in ("id", "ood", "avg")]
    details = (out / "table_searchqa_details.md").read_text()
    assert details.splitlines()[0] == ("| Method | n | NQ | HotpotQA | TriviaQA | PopQA | 2Wiki | MuSiQue | Bamboogle "
                                       "| Avg. |")
    musique = [vals[("searchqa", "ocsd", s)]["val/success/musique"] for s in (0, 1)]
    assert _md_rows(details)["OCSD"][6] == f"{100 * np.mean(musique):.1f} ± {100 * np.std(musique, ddof=1):.1f}"
    assert r"\label{tab:search_qa_details}" in (out / "table_searchqa_details.tex").read_text()
    assert "Search-QA" not in (out / "table_main.tex").read_text()


def test_main_table_names_the_runs_it_leaves_out(runs, tmp_path):
    """A run without an evaluation or a validation row is named under the table, not only on stderr."""
    from tests.figures.runs import make_run

    bare = make_run(tmp_path / "sdar_s2", method="sdar", seed=2, val_every=None)
    argv = ["--run", str(runs["ocsd0"]), "--run", str(bare), "--out", str(tmp_path / "out"), "--format", "md"]
    assert tables.main(argv) == 0
    text = (tmp_path / "out" / "table_main.md").read_text()
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("|")][2:]
    assert rows == [method_label("ocsd")]
    assert (f"Note: Left out {bare}: no evaluation of its last checkpoint (eval.json) and no validation row "
            f"(val/success_rate) in metrics.jsonl.") in text


def test_tables_leave_out_environments_without_runs(tmp_path, capsys):
    """Search-QA runs alone make only the Search-QA tables; WebShop runs alone make a main table of WebShop's
    columns with a note that ALFWorld was left out."""
    from tests.figures.runs import make_run

    search = make_run(tmp_path / "sq", env="searchqa")
    assert tables.main(["--run", str(search), "--out", str(tmp_path / "a")]) == 0
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "table_searchqa.md", "table_searchqa.tex", "table_searchqa_details.md", "table_searchqa_details.tex"]
    shop = make_run(tmp_path / "ws", env="webshop")
    assert tables.main(["--run", str(shop), "--out", str(tmp_path / "b"), "--format", "md"]) == 0
    text = (tmp_path / "b" / "table_main.md").read_text()
    assert text.splitlines()[0] == "| Method | n | WebShop Score | WebShop Succ. |"
    assert "Note: ALFWorld left out: no ALFWorld run with an evaluation or a validation row." in text
    assert "ALFWorld left out" in capsys.readouterr().err
