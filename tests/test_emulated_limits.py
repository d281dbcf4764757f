"""The emulation knobs of bundle variants (fusion_profile, limits, max_registers) and
bench/emulated_limits.py (plan, ncu CSV, report). CPU only; the ptxas checks need nvcc."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tvm_fusion_hw as hw
from tvm_fusion_hw.bundle.emulation import emulated_build, limits_profile, register_limit, source_bounds
from tvm_fusion_hw.bundle.variants import emulation_knobs, parse_variant, pipeline_knobs
from tvm_fusion_hw.bundle.writer import compile_entry
from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.hardware.profile import load_profile
from tvm_fusion_hw.hardware.target import profile_of
from tvm_fusion_hw.hardware.toolchain import nvcc_path
from tvm_fusion_hw.models import build
from tvm_fusion_hw.pipeline import fused_module, fusion_pass
from script_loader import load_script

REPO = Path(__file__).resolve().parent.parent
needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="ptxas -v needs nvcc")


def _bench():
    return load_script(REPO / "bench" / "emulated_limits.py", "emulated_limits")


def _build(tmp_path, batch, *variants):
    """dw_pw at ``batch``: hw and the variants, built for the H200 (no stock, no graphs)."""
    specs = [parse_variant(v) for v in variants]
    sources = {}
    entry = compile_entry(tmp_path, "dw_pw", batch, hw.target("nvidia-h200"), "nvidia-h200", ["hw"], False,
                          False, lambda _msg: None, sources, specs)
    assert not entry.get("build_errors"), entry.get("build_errors")
    variants = {v["name"]: v for v in entry["variants"]}
    return variants, sources


# ---- knobs ---------------------------------------------------------------------------------
def test_parse_emulation_knobs():
    spec = parse_variant("x:dw_pw:fusion_profile=nvidia-rtx-3060,limits=nvidia-rtx-3060,max_registers=40")
    assert emulation_knobs(spec) == {"fusion_profile": "nvidia-rtx-3060", "limits": "nvidia-rtx-3060",
                                     "max_registers": 40}
    assert not set(pipeline_knobs(spec)) & {"fusion_profile", "limits", "max_registers"}
    with pytest.raises(FusionHWError, match="only NVIDIA"):
        parse_variant("x:dw_pw:limits=amd-mi300x")
    with pytest.raises(FusionHWError, match="unknown hardware profile"):
        parse_variant("x:dw_pw:fusion_profile=nvidia-nope")
    with pytest.raises(FusionHWError, match="max_registers"):
        parse_variant("x:dw_pw:max_registers=300")


def test_limits_target_carries_p_limits_and_h200_arch():
    tgt, fusion, limits = emulated_build({"limits": "nvidia-rtx-3060"}, hw.target("nvidia-h200"), "nvidia-h200")
    p, home = load_profile("nvidia-rtx-3060"), load_profile("nvidia-h200")
    assert fusion == "nvidia-h200" and limits == p
    assert str(tgt.attrs["arch"]) == "sm_90"
    assert int(tgt.attrs["max_shared_memory_per_block"]) == p.shared_memory_bytes_per_block == 101376
    emulated = profile_of(tgt)  # what the schedule templates read
    assert emulated.max_threads_per_multiprocessor == 1536 and emulated.max_blocks_per_multiprocessor == 16
    assert emulated.dram_bytes_per_s == home.dram_bytes_per_s  # the GPU it runs on
    assert emulated.multiprocessor_count == home.multiprocessor_count
    # the H100's limits are the H200's: no emulation profile, the plain build
    assert limits_profile("nvidia-h200", "nvidia-h100-sxm") is home


def test_register_limit():
    home = load_profile("nvidia-h200")
    assert register_limit(home, 256, 4) == 64  # 65536 / 1024 threads
    assert register_limit(home, 128, 1) == 255
    assert register_limit(load_profile("nvidia-rtx-3060"), 256, 6) == 40  # 1536 threads: 42 -> 40


# ---- builds --------------------------------------------------------------------------------
@needs_nvcc
def test_limits_variant_shared_memory_and_register_cap(tmp_path):
    variants, sources = _build(tmp_path, 1, "lim:dw_pw:limits=nvidia-rtx-3060",
                               "cap:dw_pw:limits=nvidia-rtx-3060,max_registers=24")
    lim, cap = variants["lim"]["emulation"], variants["cap"]["emulation"]
    built = json.loads(lim["target"])
    assert built["max_shared_memory_per_block"] == 101376 and built["arch"] == "sm_90"
    assert lim["limits_profile"] == "nvidia-h200--limits-nvidia-rtx-3060"
    assert lim["feasible"] is True and lim["kernels"]
    for _name, (_regs, smem, threads, _spill) in lim["kernels"].items():
        assert smem <= 101376 and threads <= 1024
    # the cap is in the source (__maxnreg__) and ptxas honours it where the kernel wanted more
    kernel = "fused_conv2d1_add1_kernel"
    assert cap["bounds"][kernel] == "__maxnreg__(24)"
    assert lim["bounds"][kernel].startswith("__launch_bounds__")
    assert lim["kernels"][kernel][0] > 24 >= cap["kernels"][kernel][0]
    code = sources[variants["cap"]["cuda_source_sha256"]]
    assert source_bounds(code)[kernel] == "__maxnreg__(24)"
    assert variants["cap"]["launches"] == variants["lim"]["launches"] != []


def test_fusion_profile_gives_that_profiles_decisions(tmp_path):
    """dw_pw at batch 32: the Orin fuses depthwise -> pointwise, the H200 keeps them apart (and
    at batch 1 the RTX 3060 stages the pair where the H200 keeps it apart by the cost rule)."""
    variants, _ = _build(tmp_path, 32, "orin:dw_pw:fusion_profile=nvidia-jetson-agx-orin")
    mod = import_onnx(build("dw_pw", batch=32), name="dw_pw")

    def decisions(report):
        return [(d["fused"], d["reason"].split(":")[0], d["reason"].split(":")[1].strip())
                for d in report["decisions"] if d["reason"].startswith("depthwise_conv -> pointwise_conv")]

    expected = {}
    for name in ("nvidia-jetson-agx-orin", "nvidia-h200"):
        tgt = hw.target(name)
        fuse = fusion_pass(tgt)
        fused_module(mod, tgt, fuse)
        expected[name] = decisions(json.loads(fuse.report.to_json()))
    got = decisions(json.loads((tmp_path / variants["orin"]["report"]).read_text()))
    assert got == expected["nvidia-jetson-agx-orin"] != expected["nvidia-h200"]
    assert got[0][0] is True
    assert variants["orin"]["groups"] < len(variants["hw"]["launches"]) + 1
    assert len(variants["orin"]["launches"]) == len(variants["hw"]["launches"]) - 1  # one kernel fewer


# ---- bench/emulated_limits.py --------------------------------------------------------------
def test_plan_pairs_from_profile_differences():
    bench = _bench()
    result = bench.plan(json.loads(bench.DIFFERENCES.read_text()), ["corpus:mnasnet1_0"], [1],
                        list(bench.SHORT), max_variants=4)
    pairs = {(p["P"], p["Q"]): p for p in result["pairs"]}
    first = pairs[("nvidia-h200", "nvidia-rtx-4090")]
    assert first["P_variant"] == "hw" and first["Q_variant"] == "mnasnet1_0.f4090_lh200"
    assert first["kinds"] == ["depthwise -> pointwise"] and first["Q_fuses"] >= 1
    back = pairs[("nvidia-rtx-4090", "nvidia-h200")]
    assert (back["P_variant"], back["Q_variant"]) == ("mnasnet1_0.f4090_l4090", "mnasnet1_0.fh200_l4090")
    assert ("nvidia-h200", "nvidia-h100-sxm") not in pairs  # the same plan
    spec = [parse_variant(a) for a in bench.variant_args(result["variants"])]
    assert {s.name for s in spec} <= {f"mnasnet1_0.{n}" for n in ("f4090_lh200", "f4090_l4090", "fh200_l4090",
                                                                  "fh200_la100", "f4090_la100")}


def test_ncu_csv_segments_and_modelled_time():
    bench = _bench()
    csv_text = "\n".join([
        "==PROF== Connected to process 1",
        '"ID","Process ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum"',
        '"","","","byte","byte"',
        *[f'"{i}","1","{name}","{r}","{w}"' for i, (name, r, w) in enumerate([
            ("t_kernel", 5, 0),  # weight transform, before the first run
            *[("a_kernel", 100, 10), ("b_kernel", 1000, 0)] * 3,  # library 1: 3 runs
            ("t_kernel", 5, 0),
            *[("ab_kernel", 600, 10)] * 3,  # library 2
        ])]])
    stream = bench.read_ncu(csv_text)
    assert stream[1] == ("a_kernel", 110.0)
    got = bench.segment(stream, [("one", ["a_kernel", "b_kernel"]), ("two", ["ab_kernel"])], runs=3)
    assert got["one"]["bytes"] == 1110 and got["one"]["runs"] == 3
    assert got["two"]["bytes"] == 610 and got["two"]["runs"] == 3
    p = load_profile("nvidia-rtx-3060")
    report = {"groups": [{"kernel": "ab", "flops": 12.74e12 * 1e-3}]}  # 1 ms of FLOPs on the 3060
    assert bench.modelled_s({"ab_kernel": 360e9 * 2e-3}, report, p) == pytest.approx(2e-3)
    assert bench.modelled_s({"ab_kernel": 1.0}, report, p) == pytest.approx(1e-3)


def test_best_builds_answer_the_most_pairs():
    bench = _bench()
    # the first pair needs two builds of its own; three later pairs need one build each, and a
    # fourth needs two of theirs: with three builds, taking the first pair answers 1 + (one more);
    # leaving it answers four, and the pair that needs none
    needs = [{"a", "b"}, {"c"}, {"d"}, {"e"}, {"c", "d"}, set()]
    assert bench.best_builds(needs, ["a", "b", "c", "d", "e"], 3) == {"c", "d", "e"}
    # among sets answering as many pairs, the one whose pairs come first, then the smaller
    assert bench.best_builds([{"a"}, {"b"}], ["a", "b"], 1) == {"a"}
    assert bench.best_builds([set(), {"a", "b"}], ["a", "b"], 1) == set()


def test_best_builds_one_at_a_time_past_the_combination_limit(monkeypatch):
    bench = _bench()
    monkeypatch.setattr(bench, "_MAX_COMBINATIONS", 1)
    assert bench.best_builds([{"a", "b"}, {"c"}, {"c", "d"}], ["a", "b", "c", "d"], 2) == {"c", "d"}
    # a build added on the way that then answers no pair is dropped
    assert bench.best_builds([{"a", "b"}, {"c"}], ["a", "b", "c"], 2) == {"c"}
