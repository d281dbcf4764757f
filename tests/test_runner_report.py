"""results.png: the plugin's speed-up over each measured baseline, on the committed H200 results."""

import json
from pathlib import Path

import pytest

from tvm_fusion_hw.bundle import runner_report

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"
ZOO = RESULTS / "2026-11-30-h200-stop10" / "zoo" / "results.json"
CORPUS = RESULTS / "2026-12-01-h200-corpus"


def load(path):
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    return json.loads(path.read_text())


def test_zoo_speedups_are_baseline_over_plugin():
    results = load(ZOO)
    labels, series, missing = runner_report.speedup_series(results)
    rows = [r for r in results["rows"] if r["times_s"].get("hw")]
    assert labels == [f"{r['model']} b{r['batch']}" for r in rows] and not missing
    assert list(series) == [legend for legend, _, _ in runner_report.SPEEDUPS]  # all four were measured
    t = rows[0]["times_s"]
    assert series["over stock TVM"][0] == pytest.approx(t["stock"] / t["hw"])
    assert series["over torch.compile, both with CUDA graphs"][0] == pytest.approx(t["compile_graphs"] / t["hw_graph"])


@pytest.mark.parametrize("part", ["b1_part1", "b32"])
def test_corpus_legend_names_only_what_was_measured(part):
    results = load(CORPUS / part / "results.json")
    labels, series, _ = runner_report.speedup_series(results)
    assert list(series) == ["over stock TVM"]  # no torch, no CUDA graphs in these runs
    measured = [r for r in results["rows"] if r.get("times_s", {}).get("hw")]
    assert len(labels) == len(measured) < len(results["rows"]) + 1
    pytest.importorskip("matplotlib")
    fig = runner_report.draw_plot(results)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["over stock TVM"]
    widths = [bar.get_width() for bar in ax.patches]
    assert widths == pytest.approx([r["times_s"]["stock"] / r["times_s"]["hw"] for r in measured])
    assert ax.get_xscale() == "log"


def test_rows_whose_stock_failed_say_so_and_draw_no_bar(tmp_path):
    results = load(CORPUS / "b32_stock_fails" / "results.json")
    labels, series, missing = runner_report.speedup_series(results)
    assert series == {} and sorted(missing) == list(range(len(labels)))
    assert all(why.startswith("stock failed: AssertionError") for why in missing.values())
    pytest.importorskip("matplotlib")
    fig = runner_report.draw_plot(results)
    assert fig.axes[0].get_legend() is None and not fig.axes[0].patches
    assert runner_report.write_plot(results, tmp_path / "results.png") == ""
    assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_variant_knobs_of_shapes_are_written_as_the_command_line_spells_them(tmp_path):
    """corpus-12's run: knobs that hold shapes (lists of lists) broke results.md after timing."""
    results = load(RESULTS / "2026-12-07-h100-corpus-12" / "res" / "e2e.json")
    lines = runner_report.variants_table(results["rows"])
    wide = [line for line in lines if "| deit_tiny_both |" in line]
    assert len(wide) == 1
    assert "ImplicitGemm.wide_micro_shapes=8x16+16x8, ImplicitGemm.prefetch_overhead_steps=8" in wide[0]
    assert runner_report.knob_text(["GemmPrologue", "ImplicitGemm"]) == "GemmPrologue+ImplicitGemm"
