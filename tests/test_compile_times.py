"""bench/compile_times.py: rows of the compile-time table, a pipeline that fails included."""

from script_loader import BENCH, load_script

compile_times = load_script(BENCH / "compile_times.py", "compile_times")


def test_row_gives_medians_and_ratios():
    times = {"stock": {"wall": [2.0, 4.0, 3.0], "cpu": [2.0, 2.0, 2.0]},
             "hw": {"wall": [3.0, 3.3, 3.6], "cpu": [4.0, 5.0, 6.0]}}
    assert compile_times.row("m", 32, times) == \
        "| m | 32 | 3.00 | 3.30 | 1.10x | 2.00 | 5.00 | 2.50x | 3.00 / 3.30 / 3.60 |"


def test_a_pipeline_that_fails_is_a_row_not_a_crash():
    times = {"stock": {"wall": [], "cpu": [], "error": "AssertionError: cache-write stage"},
             "hw": {"wall": [1.5], "cpu": [1.75]}}
    assert compile_times.row("m", 32, times) == \
        "| m | 32 | fails | 1.50 | - | fails | 1.75 | - | stock: AssertionError: cache-write stage |"


def test_summary_is_the_geometric_mean_over_rows_both_build():
    def times(stock, hw):
        return {"stock": {"wall": [stock], "cpu": [stock]}, "hw": {"wall": [hw], "cpu": [hw]}}
    failing = {"stock": {"wall": [], "cpu": [], "error": "x"}, "hw": {"wall": [9.0], "cpu": [9.0]}}
    # ratios 2.0 and 0.5: geometric mean 1.0; the failing row (hw 9 s) is left out
    measured = [("a", 1, times(1.0, 2.0)), ("b", 32, times(4.0, 2.0)), ("c", 32, failing)]
    assert compile_times.summary(measured) == \
        "Geometric mean hw/stock wall over the 2 rows both build: 1.000x; highest 2.00x (a b1)."
    assert compile_times.summary([("c", 32, failing)]) == "No row that both pipelines build."
