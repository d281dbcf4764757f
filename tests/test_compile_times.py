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
