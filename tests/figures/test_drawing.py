"""The bar-chart helper, the word-cloud drawer and the report's separate panel PNGs."""

import math

import numpy as np
import pytest

from figures import fig2_diagnosis
from figures.drawing import add_caption, bar_chart, pyplot, save_figure, word_cloud, wrap_caption
from tests.figures.test_figures import assert_png, bars


def test_bar_chart_draws_values_and_intervals():
    plt = pyplot()
    fig, ax = plt.subplots()
    bar_chart(ax, ["a", "b", "c"], [0.6, None, 0.4], [0.5, None, 0.3], [0.7, None, 0.55], ylabel="AUROC",
              baseline=0.5, gid="panel")
    heights, lows, highs = bars(fig, "panel")
    assert heights == pytest.approx([0.6, 0.0, 0.4])
    assert lows == pytest.approx([0.5, 0.0, 0.3]) and highs == pytest.approx([0.7, 0.0, 0.55])
    assert ax.get_gid() == "panel" and ax.get_ylabel() == "AUROC"
    assert [t.get_text() for t in ax.texts] == ["n/a"]  # the missing value is marked, not hidden
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    plt.close(fig)


def test_wrap_caption_breaks_between_parts():
    rng = np.random.default_rng(3)
    parts = [f"RUN{i} (run_{'x' * int(rng.integers(3, 30))}, steps 1-10)" for i in range(12)]
    text = "runs: " + "; ".join(parts)
    wrapped = wrap_caption(text, 60)
    lines = wrapped.split("\n")
    assert len(lines) > 1 and all(len(line) <= 60 for line in lines)
    assert wrapped.replace(";\n", "; ") == text  # lines break only between parts: none is cut
    assert wrap_caption("short; text", 60) == "short; text"
    long = "word " * 30
    assert all(len(line) <= 20 for line in wrap_caption(long.strip(), 20).split("\n"))


def test_a_long_caption_does_not_widen_the_image(tmp_path):
    from PIL import Image

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    add_caption(fig, "runs: " + "; ".join(f"OCSD (seed {i}) (ocsd_smollm2_vllm_s{i}, steps 1-10)" for i in range(8)))
    path = save_figure(fig, tmp_path, "captioned", dpi=100)[0]
    plt.close(fig)
    width, height = Image.open(path).size
    assert width <= 4 * 100 * 1.1 and height > 3 * 100


def test_word_cloud_keeps_finite_positive_sizes():
    assert word_cloud({}) is None
    assert word_cloud({"a": 0.0, "b": -1.0, "c": math.nan, "d": None}) is None
    cloud = word_cloud({"mug": 2.0, "shelf": 1.0, "gone": 0.0, "bad": math.nan}, seed=1)
    assert {w for (w, _), *_ in cloud.layout_} == {"mug", "shelf"}
    again = word_cloud({"mug": 2.0, "shelf": 1.0}, seed=1)
    assert np.array_equal(cloud.to_array(), again.to_array())  # the seed fixes the layout
    assert cloud.to_array().shape == (260, 400, 3)


def small_report():
    entry = {"ci_low": 0.1, "ci_high": 0.3}
    return {
        "auroc": {"signals": {k: {"auroc": v, "ci_low": v - 0.1, "ci_high": v + 0.1}
                              for k, v in (("ablated", 0.55), ("full", 0.6), ("residual", 0.7))}},
        "robustness": {k: {"delta": 0.2, **entry, "n_steps": 10} for k in fig2_diagnosis.DELTA_LABELS},
        "dratio": {"categories": {"Format": {"mean": 0.05, "ci_low": 0.04, "ci_high": 0.06, "n_words": 3},
                                  "Entity/State": {"mean": None, "ci_low": None, "ci_high": None, "n_words": 0}}},
        "tails": {"top": {"full+": [{"word": "mug", "rate": 0.2, "count": 3, "size": 0.27}]}},
    }


def test_bar_panels_carry_the_report_values():
    report = small_report()
    panels = fig2_diagnosis.bar_panels(report)
    assert list(panels) == ["dratio", "auroc", "delta"]
    assert panels["auroc"].values == (0.55, 0.6, 0.7) and panels["auroc"].baseline == 0.5
    assert panels["delta"].labels == tuple(fig2_diagnosis.DELTA_LABELS.values())
    assert panels["dratio"].values == (0.05, None)


def test_write_panels_and_clouds(tmp_path):
    paths = fig2_diagnosis.write_panels(small_report(), tmp_path)
    assert sorted(paths) == ["auroc", "delta", "dratio"]
    for name in ("auroc.png", "delta_auroc.png", "dratio.png"):
        assert_png(tmp_path / name)
    clouds = fig2_diagnosis.write_clouds({"full+": {"mug": 1.0, "shelf": 0.5}, "residual-": {"x": 0.0}}, tmp_path)
    assert list(clouds) == ["full+"]  # a tail without a positive size is skipped
    assert_png(tmp_path / "cloud_full_plus.png")
    assert not (tmp_path / "cloud_residual_minus.png").exists()


def test_bar_chart_whiskers_span_an_interval_that_misses_the_value():
    plt = pyplot()
    fig, ax = plt.subplots()  # a percentile interval need not contain the estimate (few resamples)
    bar_chart(ax, ["a", "b"], [0.8, 0.2], [0.5, 0.3], [0.7, 0.4], gid="panel")
    heights, lows, highs = bars(fig, "panel")
    assert heights == pytest.approx([0.8, 0.2])
    assert lows == pytest.approx([0.5, 0.3]) and highs == pytest.approx([0.7, 0.4])
    plt.close(fig)


def test_panel_without_values_says_why_inside_the_axes():
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(3, 3))
    bar_chart(ax, ["Ablated", "Full", "Residual"], [None] * 3, [None] * 3, [None] * 3, baseline=0.5, gid="auroc",
              note="undefined: 0 valid and 8 invalid labelled steps")
    ax.set_ylim(0.38, None)  # as Fig. 2 does: a y range that excludes 0
    fig.canvas.draw()
    box = ax.get_window_extent()
    texts = {t.get_text(): t.get_window_extent() for t in ax.texts}
    assert "n/a" in texts and any(k.startswith("undefined: 0 valid") for k in (t.replace("\n", " ") for t in texts))
    for extent in texts.values():  # every label inside the panel: nothing drawn outside it, no blank area
        assert box.x0 <= extent.x0 and extent.x1 <= box.x1 and box.y0 <= extent.y0 and extent.y1 <= box.y1
    plt.close(fig)
