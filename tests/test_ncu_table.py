"""bench/ncu_table.py: ncu's raw CSV page into a table of where each launch's time goes."""

import json

from script_loader import BENCH, load_script

ncu_table = load_script(BENCH / "ncu_table.py", "ncu_table")

RAW = "\n".join([
    '==PROF== Connected to process 1 (python3)',
    '"ID","Kernel Name","gpu__time_duration.sum","sm__warps_active.avg.pct_of_peak_sustained_active",'
    '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio"',
    '"","","nsecond","%","","","",""',
    '"0","main_kernel","1,500","40.5","0.25","1.75","0.5","0.1"',
    '"1","main_kernel_1","2000","12","0","0.3","0","0.9"',
])


def test_raw_page_launches_skip_prof_lines_and_units():
    launches = ncu_table.read_raw(RAW)
    assert [l["Kernel Name"] for l in launches] == ["main_kernel", "main_kernel_1"]
    assert launches[0]["gpu__time_duration.sum"] == "1,500"


def test_stalls_are_the_largest_three_nonzero():
    first, second = ncu_table.read_raw(RAW)
    assert ncu_table.stalls(first) == [("short_scoreboard", 1.75), ("wait", 0.5), ("barrier", 0.25)]
    assert ncu_table.stalls(second) == [("math_pipe_throttle", 0.9), ("short_scoreboard", 0.3)]


def test_table_rows_convert_units_and_mark_missing_metrics():
    lines = ncu_table.table(ncu_table.read_raw(RAW), ["a", "b"]).splitlines()
    assert lines[2].startswith("| a | 1.5 | - | - | 40.5 | - | - | - | short_scoreboard 1.75, wait 0.50")
    assert lines[3].startswith("| b | 2 | - | - | 12 | ")


def test_sweep_names_count_a_split_k_sum(tmp_path):
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"cases": [{"case": "gemm:1:2:3", "variants": [
        {"name": "dlight", "summary": "dlight", "tile": None},
        {"name": "t0", "summary": "64x64", "tile": {"split_k": 4}}]}]}))
    assert ncu_table.sweep_names(sweep) == ["gemm:1:2:3 dlight: dlight", "gemm:1:2:3 t0: 64x64",
                                            "gemm:1:2:3 t0: its split-K sum"]


def test_ffma_share_and_clock_are_derived_where_collected():
    raw = "\n".join([
        '"ID","Kernel Name","smsp__inst_executed.sum","smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",'
        '"sm__cycles_elapsed.avg.per_second"',
        '"0","main_kernel","1000","25600","1,755,000,000"',
        '"1","main_kernel_1","0","0","1e9"',
    ])
    lines = ncu_table.table(ncu_table.read_raw(raw), ["a", "b"]).splitlines()
    assert "| FFMA % of issued | SM GHz |" in lines[0]
    # 25600 thread FFMAs are 800 warp FFMAs of 1000 issued; a launch that issued nothing has no share
    assert lines[2].endswith("| 80 | 1.755 | - |")
    assert lines[3].endswith("| - | 1 | - |")


def test_the_first_launches_of_a_sweep_cut_by_launch_count_are_named(tmp_path, capsys):
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"cases": [{"case": "gemm:1:2:3", "variants": [
        {"name": "dlight", "summary": "dlight", "tile": None},
        {"name": "t0", "summary": "64x64", "tile": {"split_k": 1}},
        {"name": "t1", "summary": "32x32", "tile": {"split_k": 1}}]}]}))
    csv_file = tmp_path / "ncu.csv"
    csv_file.write_text(RAW)
    out = tmp_path / "ncu.md"
    assert ncu_table.main([str(csv_file), "--sweep", str(sweep), "--first", "--out", str(out)]) == 0
    assert [l.split(" |")[0] for l in out.read_text().splitlines()[2:]] == [
        "| gemm:1:2:3 dlight: dlight", "| gemm:1:2:3 t0: 64x64"]
    # without --first the count does not match: launches keep ncu's kernel names
    assert ncu_table.main([str(csv_file), "--sweep", str(sweep), "--out", str(out)]) == 0
    assert "| main_kernel |" in out.read_text()
