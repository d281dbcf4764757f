"""``tvm-fusion-hw explain``: each figure checked against a fact found another way.

The plans are made once per session through the command line (its JSON, text and page), on small
zoo models: conv_relu_pool, whose conv + pool pair the H200 fuses and the MI300X stages (the fused
kernel would halve the occupancy of the conv's own GEMM tile there), and relu_add_mul, on which the H200 and the A100
take the same decisions, so that a difference is forced with a knob (max_depth=2).
"""

import argparse
import contextlib
import io
import json
import math
import os
import re
import struct
from pathlib import Path

import pytest
import tvm
from tir_checks import cuda_source
from tvm_fusion_hw.models import build

import tvm_fusion_hw as hw
from tvm_fusion_hw import pipeline
from tvm_fusion_hw.cli import main
from tvm_fusion_hw.explain import browser, explain
from tvm_fusion_hw.explain.html import render_html
from tvm_fusion_hw.explain.text import render_text
from tvm_fusion_hw.feedback import kernel_launches
from tvm_fusion_hw.feedback.kernel_resources import measure_cuda_source
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.hardware.profile import TARGETS_DIR_CANDIDATES
from tvm_fusion_hw.hardware.toolchain import have_nvcc
from tvm_fusion_hw.progress import Progress

PAIR = ("nvidia-h200", "amd-mi300x")


def run(*argv):
    """(exit status, stdout, stderr) of the command line, outside pytest's capture."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


class Run:
    """One explain run through the command line: its text, JSON and page."""

    def __init__(self, folder: Path, model: str, *args: str, width: int = 80):
        self.json_path, self.html_path = folder / "explain.json", folder / "explain.html"
        self.code, self.out, self.err = run("explain", model, *args, "--details", "--width", str(width),
                                            "--json", str(self.json_path), "--html", str(self.html_path))
        assert self.code == 0, self.err
        self.data = json.loads(self.json_path.read_text())
        self.html = self.html_path.read_text()
        self.model = model


@pytest.fixture(scope="session")
def conv_pool(tmp_path_factory):
    # the conv direct on both (winograd=off): Winograd would take it, and no conv -> pool pair is left
    return Run(tmp_path_factory.mktemp("conv_pool"), "conv_relu_pool", "--profile", PAIR[0], "--knob", "winograd=off",
               "--profile", PAIR[1], "--knob", "winograd=off")


@pytest.fixture(scope="session")
def same_and_forced(tmp_path_factory):
    """relu_add_mul on the H200, the A100, and the H200 again with max_depth=2."""
    return Run(tmp_path_factory.mktemp("same"), "relu_add_mul", "--profile", "nvidia-h200",
               "--profile", "nvidia-a100-80gb", "--profile", "nvidia-h200", "--knob", "max_depth=2", width=100)


def profile_json(name):
    folder = next(d for d in TARGETS_DIR_CANDIDATES if (d / f"{name}.json").exists())
    return json.loads((folder / f"{name}.json").read_text())


def conv(plan):
    """The plan's kernel that holds the convolution."""
    return next(k for k in plan["kernels"] if "conv2d" in k["ops"])


def module(name):
    return import_onnx(build(name, batch=1), name=name)


# ---- the plan against facts found another way -----------------------------------------------------
def test_one_row_per_kernel_the_fused_module_calls(conv_pool):
    mod = module("conv_relu_pool")
    for plan, name in zip(conv_pool.data["plans"], PAIR):
        tgt = hw.target(name)
        calls = pipeline.kernel_names(pipeline.fused_module(mod, tgt, hw.fusion_pass(tgt, winograd="off")))
        assert [k["kernel"] for k in plan["kernels"]] == calls
    # H200: conv+relu+pool as one kernel and the bias reshape; MI300X: the pool on its own
    assert [len(p["kernels"]) for p in conv_pool.data["plans"]] == [2, 3]


def test_ridge_point_is_peak_over_bandwidth_from_the_profile_file(conv_pool):
    for plan, name in zip(conv_pool.data["plans"], PAIR):
        raw = profile_json(name)
        assert plan["ridge_flop_per_byte"] == pytest.approx(raw["peak_fp32_flop_per_s"] / raw["dram_bytes_per_s"])
        assert plan["peak_flop_per_s"] == raw["peak_fp32_flop_per_s"]
        for kernel in plan["kernels"]:
            below = kernel["intensity"] < plan["ridge_flop_per_byte"]
            assert kernel["regime"] == ("memory-bound" if below else "compute-bound")


def test_stock_grouping_is_stock_fuseops_and_covers_the_same_ops(conv_pool):
    mod = module("conv_relu_pool")
    for plan, name in zip(conv_pool.data["plans"], PAIR):
        assert [k["kernel"] for k in plan["stock"]] == pipeline.stock_groups(mod, hw.target(name))
        ours = sorted(b for k in plan["kernels"] for b in k["bindings"])
        stock = sorted(b for k in plan["stock"] for b in k["bindings"])
        assert ours == stock and len(set(ours)) == len(ours)
    h200 = conv(conv_pool.data["plans"][0])
    assert h200["ops"] == ["conv2d", "add", "relu", "max_pool2d"]
    assert h200["stock_kernels"] == ["fused_conv2d_add_relu", "max_pool2d"]  # stock cannot fuse the pair


@pytest.mark.skipif(not have_nvcc(), reason="needs nvcc for ptxas")
def test_measured_registers_are_those_of_a_build_of_our_own(conv_pool):
    """CUDA: ptxas on the CUDA source of our own build; ROCm: the AMDGPU metadata that our own
    build's code object declares."""
    mod = module("conv_relu_pool")
    for plan, name in zip(conv_pool.data["plans"], PAIR):
        tgt = hw.target(name)
        with hw.pass_context(tgt):
            ex = tvm.compile(mod, target=tgt, relax_pipeline=hw.get_pipeline(tgt, winograd="off"))
        if tgt.kind.name == "cuda":
            compiler = re.fullmatch(r"ptxas \((nvcc|nvrtc)\)", plan["measured_with"]).group(1)
            reports = {k.name: k for k in measure_cuda_source(cuda_source(ex), profile_json(name)["target"]["arch"],
                                                              compiler=compiler)}
        else:
            assert plan["measured_with"] == "amdgpu-metadata"
            (hip,) = kernel_launches.device_modules(ex, ["hip", "rocm"])
            asm = hip.inspect_source("asm")
            block = asm[asm.index(".amdgpu_metadata"):asm.index(".end_amdgpu_metadata")]
            reports = {}
            for entry in re.split(r"^  - ", block, flags=re.M)[1:]:  # a kernel's keys sit 4 spaces in
                named = re.search(r"^    \.name:\s+(\S+)", entry, re.M)
                if named is None:
                    continue  # amdhsa.version's list
                vgprs = re.search(r"^    \.vgpr_count:\s+(\d+)", entry, re.M)
                reports[named.group(1)] = argparse.Namespace(registers=int(vgprs.group(1)))
        for kernel in plan["kernels"]:
            ours = [r for n, r in reports.items() if re.fullmatch(rf"{kernel['kernel']}_kernel\w*", n)]
            assert ours, (kernel["kernel"], sorted(reports))
            assert kernel["measured"]["registers"] == max(r.registers for r in ours)
            assert 0 < kernel["measured"]["occupancy"] <= 1


def test_schedule_rule_and_tile_are_the_builds(conv_pool):
    h200, mi300x = conv_pool.data["plans"]
    assert conv(h200)["schedule_rule"] == "ConvPool" and "blocks" in conv(h200)["tile"]
    assert conv(mi300x)["schedule_rule"] == "ImplicitGemm"
    assert conv(h200)["modelled_from"] == "ConvPool tile model"
    rows = {k["kernel"]: k for k in mi300x["kernels"]}
    pool = rows["max_pool2d"]  # no template: dlight, at its roofline bound
    bound = max(pool["flops"] / mi300x["peak_flop_per_s"], pool["compulsory_bytes"] / mi300x["dram_bytes_per_s"])
    assert pool["modelled_from"] == "roofline bound" and pool["modelled_s"] == pytest.approx(bound)


# ---- two profiles side by side ----------------------------------------------------------------------
def test_the_pair_fused_on_one_gpu_and_staged_on_the_other_is_marked(conv_pool):
    differing = [row for row in conv_pool.data["decisions"] if row["differs"]]
    assert len(differing) == 1
    row = differing[0]
    assert row["rule"] == "complex-pair" and row["verdicts"] == ["FUSE", "stage"]
    drops = [conv_pool.data["plans"][k]["decisions"][i]["figures"]["occupancy_drop"]
             for k, i in enumerate(row["decision_index"])]
    assert drops[0] <= 0.2 < drops[1]
    assert row["why"] == (f"occupancy drop: {PAIR[0]} (winograd=off): {drops[0]:.0%} <= 20%; "
                          f"{PAIR[1]} (winograd=off): {drops[1]:.0%} > 20%")
    assert "Where the profiles differ: 1 of 4 decisions" in conv_pool.out
    assert " ".join(row["why"].split()) in " ".join(conv_pool.out.split())  # wrapped to the width


def test_identical_decisions_say_no_difference_and_a_knob_forces_one(same_and_forced, tmp_path):
    plans = same_and_forced.data["plans"]
    assert [p["label"] for p in plans] == ["nvidia-h200", "nvidia-a100-80gb", "nvidia-h200 (max_depth=2)"]
    assert plans[2]["knobs"] == {"max_depth": 2} and plans[2]["policy"]["max_depth"] == 2
    differing = [r for r in same_and_forced.data["decisions"] if r["differs"]]
    assert [r["verdicts"] for r in differing] == [["FUSE", "FUSE", "apart"]]
    assert differing[0]["rule"] == "chain/depth"
    assert "ops against the depth cap" in differing[0]["why"] and "3 > 2" in differing[0]["why"]
    # the first two alone: the same plan, said so
    code, out, err = run("explain", "relu_add_mul", "--profile", "nvidia-h200", "--profile", "nvidia-a100-80gb",
                         "--json", str(tmp_path / "e.json"))
    assert code == 0, err
    assert "No difference: the profiles take the same 2 decisions." in out
    assert json.loads((tmp_path / "e.json").read_text())["differing_decisions"] == 0


def test_kernels_line_up_by_the_ops_they_compute(conv_pool):
    rows = conv_pool.data["kernels"]
    assert {tuple(r["kernels"]) for r in rows} == {
        ("fused_conv2d_add_relu_max_pool2d", None), ("reshape", "reshape"),
        (None, "fused_conv2d_add_relu"), (None, "max_pool2d")}


# ---- the terminal ---------------------------------------------------------------------------------
def test_text_is_a_summary_first_and_fits_the_width(conv_pool, same_and_forced):
    for result, width in ((conv_pool, 80), (same_and_forced, 100)):
        lines = result.out.splitlines()
        assert max(len(line) for line in lines) <= width
        assert lines[0].startswith(f"{result.model} (batch 1) on ")
    summary = conv_pool.out.split("Where the profiles differ")[0]
    for label, cells in (("kernels (stock's)", "2 (3)  3 (3)"), ("decisions fused", "3  2"),
                         ("kept apart", "1  2"), ("of them staged", "0  1")):
        pattern = re.escape(label) + r"\s+" + r"\s+".join(map(re.escape, cells.split("  ")))
        assert re.search(pattern, summary), label
    # details only when asked
    assert "Decisions side by side" in conv_pool.out and f"Kernels on {PAIR[1]}" in conv_pool.out


def test_without_details_the_text_stays_short(tmp_path):
    code, out, err = run("explain", "relu_add_mul", "--profile", "nvidia-h200", "--width", "80")
    assert code == 0, err
    assert "Kernels on" not in out and "--details" in out and len(out.splitlines()) < 25
    assert err == ""  # not a terminal: no progress bar


def test_progress_draws_on_a_terminal_only():
    from rich.console import Console

    screen = io.StringIO()
    progress = Progress(total=2, console=Console(file=screen, force_terminal=True, width=100))
    with progress.stage("import relu_add_mul"):
        pass
    with progress.stage("compile"):
        pass
    assert "[1/2] import relu_add_mul done in" in screen.getvalue() and "[2/2] compile done in" in screen.getvalue()
    quiet = io.StringIO()
    progress = Progress(total=1, stream=quiet)
    with progress.stage("import"):
        pass
    assert quiet.getvalue() == ""


# ---- toolchains missing: a note, not a failure --------------------------------------------------------
def test_no_cuda_compiler_gives_a_note_and_no_registers(monkeypatch):
    from tvm_fusion_hw.feedback import kernel_resources

    monkeypatch.setattr(kernel_resources, "cuda_compiler", lambda: None)
    expl = explain(module("relu_add_mul"), ["nvidia-h200"], model="relu_add_mul")
    plan = expl.plans[0]
    assert plan.measured_with == "" and all(k.measured is None for k in plan.kernels)
    assert any("neither found" in note for note in plan.notes)
    assert re.search(r"registers measured\s+no\n", render_text(expl))


def test_no_rocm_toolchain_still_gives_the_plan(monkeypatch):
    from tvm_fusion_hw.explain import collect

    monkeypatch.setattr(collect, "have_rocm_toolchain", lambda: False)
    mod = module("relu_add_mul")
    plan = explain(mod, ["amd-mi300x"], model="relu_add_mul").plans[0]
    assert any(note.startswith("not built") for note in plan.notes)
    assert all(k.measured is None and k.schedule_rule for k in plan.kernels)
    tgt = hw.target("amd-mi300x")
    assert [k.kernel for k in plan.kernels] == pipeline.kernel_names(
        pipeline.fused_module(mod, tgt, hw.fusion_pass(tgt)))


# ---- the page -----------------------------------------------------------------------------------
def test_page_is_self_contained(conv_pool):
    page = conv_pool.html
    assert re.findall(r"https?://[^\s\"'<>]+", page) == ["http://www.w3.org/2000/svg"] * 2  # namespaces only
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|@import|url\(", page)
    assert page.count('<svg xmlns="http://www.w3.org/2000/svg" class="roofline"') == 2
    assert render_html(explain(module("relu_add_mul"), ["nvidia-h200"], model="relu_add_mul")).count("<svg") == 1


def test_page_in_a_headless_browser(conv_pool, tmp_path):
    if browser.find_browser() is None:
        pytest.skip("no headless browser: apt-get install chromium (scripts/install-system-deps.sh)")
    with browser.HeadlessPage(width=1280, height=900) as page:
        url = page.load(conv_pool.html_path)
        assert page.errors == []
        assert page.requests == [url]  # the page itself and nothing else
        assert page.evaluate("document.querySelectorAll('svg.roofline').length") == 2
        plotted = [sum(1 for k in p[key] if k["flops"] > 0) for p in conv_pool.data["plans"] for key in ("kernels", "stock")]
        assert page.evaluate("[...document.querySelectorAll('svg.roofline')].map(s => "
                             "[s.querySelectorAll('circle.plugin').length, "
                             "s.querySelectorAll('.stock-points circle.stock').length - 1])") == [plotted[:2], plotted[2:]]
        assert page.evaluate("document.querySelectorAll('table').length") == 3 + 3 * 2
        assert page.evaluate("[...document.querySelectorAll('#decisions tr.differs td')].map(t => t.textContent)"
                             ).count("stage") == 1
        drawn = "[...document.querySelectorAll('circle.stock')].filter(c => c.getClientRects().length).length"
        assert page.evaluate(drawn) == sum(plotted[1::2]) + 2  # a hollow mark in each legend
        page.evaluate("document.getElementById('show-stock').click()")
        assert page.evaluate(drawn) == 0  # the switch hides stock's kernels
        shot = page.screenshot(tmp_path / "explain.png", max_height=1400)
    head = shot.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (1280, 1400)


# ---- bad input: one line, exit status 2, nothing written ---------------------------------------------
@pytest.mark.parametrize("args, words", [
    (["alexnet", "--profile", "nvidia-h200"], "unknown model 'alexnet'"),
    (["corpus:nope"], "unknown corpus model 'corpus:nope'"),
    (["relu_add_mul", "--batch", "0"], "--batch must be at least 1"),
    (["relu_add_mul", "--profile", "nvidia-gtx-480"], "unknown hardware profile 'nvidia-gtx-480'"),
    (["relu_add_mul", "--profile", "nvidia-h200", "--knob", "max_dept=2"], "unknown knob 'max_dept'"),
    (["relu_add_mul", "--knob", "max_depth=2"], "give NAME=VALUE after the --profile"),
    (["relu_add_mul", "--profile", "nvidia-h200", "--knob", "pair_cost=sometimes"], "pair_cost is a switch"),
    (["relu_add_mul", "--profile", "nvidia-h200", "--profile", "nvidia-h200"], "asked for twice"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, words):
    code, _, err = run("explain", *args, "--json", str(tmp_path / "out" / "e.json"),
                         "--html", str(tmp_path / "out" / "e.html"))
    assert code == 2 and err.count("\n") == 1 and err.startswith("tvm-fusion-hw: error: "), err
    assert words in err
    assert list(tmp_path.iterdir()) == []


def test_an_onnx_file_has_its_own_shapes(tmp_path):
    import onnx

    model = build("relu_add_mul", batch=2)
    onnx.save(model, tmp_path / "m.onnx")
    code, out, err = run("explain", str(tmp_path / "m.onnx"), "--json", str(tmp_path / "e.json"))
    assert code == 0, err
    # the title (wrapped to the width where the path is long, as under pytest-xdist): no batch of ours
    assert " ".join(out.split()).startswith(f"{tmp_path / 'm.onnx'} on nvidia-h200 ")
    assert "(batch" not in out.split("nvidia-h200")[0]
    plan = json.loads((tmp_path / "e.json").read_text())["plans"][0]
    # one kernel, which reads every input and weight of the file once and writes its output
    tensors = [[d.dim_value for d in v.type.tensor_type.shape.dim] for v in [*model.graph.input, *model.graph.output]]
    tensors += [list(t.dims) for t in model.graph.initializer]
    assert [k["kernel"] for k in plan["kernels"]] == ["fused_relu_add_multiply"]
    assert plan["kernels"][0]["compulsory_bytes"] == sum(4 * math.prod(dims) for dims in tensors)


def test_bad_onnx_and_unwritable_outputs(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_text("not a protobuf")
    blocker = tmp_path / "file"
    blocker.write_text("")
    for args, words in (([str(bad)], "is not an ONNX model"),
                        (["relu_add_mul", "--html", str(blocker / "e.html")], "is not a directory"),
                        (["relu_add_mul", "--html", str(tmp_path)], "is a directory"),
                        (["relu_add_mul", "--html", str(tmp_path / "x"), "--json", str(tmp_path / "x")],
                         "name the same file")):
        before = sorted(tmp_path.rglob("*"))
        code, _, err = run("explain", *args)
        assert code == 2 and err.count("\n") == 1 and words in err, err
        assert sorted(tmp_path.rglob("*")) == before


def test_tvm_native_log_becomes_one_note(monkeypatch, tmp_path):
    from tvm_fusion_hw.explain.native_log import native_log_to

    with open(tmp_path / "stderr", "w+") as stream:
        monkeypatch.setattr("sys.stderr", stream)
        notes = []
        with native_log_to(notes, "amd-mi250x"):
            for _ in range(2):
                os.write(stream.fileno(), b"[19:38:02] /project/src/x.cc:96: Warning: Unable to detect\n")
        stream.write("after\n")
        stream.flush()
        assert (tmp_path / "stderr").read_text() == "after\n"  # the log went to the note, fd 2 came back
    assert notes == ["TVM logged 2 lines while building for amd-mi250x: Warning: Unable to detect (x2)"]
