"""bench/speed_table.py: the ratios and the roofline column of the corpus speed table, on rows
written here (no GPU)."""

from script_loader import BENCH, load_script

speed_table = load_script(BENCH / "speed_table.py", "speed_table")


def _row(model, stock, hw_graph, torch, roofline_s=None):
    row = {"model": f"corpus:{model}", "batch": 32,
           "times_s": {"stock": stock, "hw": hw_graph * 1.1, "hw_graph": hw_graph, "compile_graphs": torch}}
    if roofline_s is not None:
        row["roofline_s"] = roofline_s
    return row


def test_ratios_and_roofline_column():
    rows = {("a", 32): _row("a", 0.004, 0.002, 0.003, roofline_s=0.0005),
            ("b", 32): _row("b", None, 0.001, 0.0005)}
    text = speed_table.table(rows, {})
    line_a = next(l for l in text.splitlines() if l.startswith("| a |"))
    # stock 4 ms / 2 ms, torch 3 ms / 2 ms, bound 0.5 ms of 2 ms
    assert "| 2.00x | 1.50x | 25% |" in line_a
    line_b = next(l for l in text.splitlines() if l.startswith("| b |"))
    assert "- (stock fails) | 0.50x | - |" in line_b
    assert "geomean 2.00x over 1 rows" in text
    # at or ahead on 1 of 2 (1.5x and 0.5x), geomean sqrt(0.75)
    assert "geomean 0.87x over 2 rows, at or ahead on 1, min 0.50x" in text
