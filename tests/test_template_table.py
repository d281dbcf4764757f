"""Tests for bench/template_table.py and the bundle variant it reads (CPU only).

Checked:
- a bundle variant with ``schedules=false`` alone builds hw's kernels (the PrimFuncs ``main``
  calls after the whole pipeline have the same names) with other schedules: conv_relu_pool,
  whose conv+pool pair fuses because the policy asks the ConvPool template for its plan, and
  dw_pw (DepthwiseConv, ImplicitGemm);
- on a synthetic results.json: each kernel's row (us per call under both, dlight / template),
  the per-template sums and geometric means, kernels dlight schedules in both, kernels one
  profile lacks, a complete profile from a runner that kept "top" only;
- the labels of a real model (BERT's layer, batch 1) are explain_schedules' rules, for every
  kernel main calls;
- bad input ends with one line on stderr, status 2 and no file written: no results.json, no
  kernel profile, a failed profile, no schedules=false variant, a variant with other knobs, a
  crashed row, a profile that kept the top rows only.
"""

import json
from collections import Counter
from pathlib import Path

import pytest
import tvm_ffi
from tvm import relax, tirx

import tvm_fusion_hw as hw
from tvm_fusion_hw.bundle.model_import import import_model
from tvm_fusion_hw.bundle.variants import parse_variant, pipeline_knobs
from tvm_fusion_hw.pipeline import fused_module, kernel_names
from tvm_fusion_hw.schedule_report import explain_schedules
from script_loader import load_script

H200 = "nvidia-h200"
SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "template_table.py"


@pytest.fixture(scope="module")
def table():
    return load_script(SCRIPT, "template_table")


# ---- the variant keeps hw's kernels ---------------------------------------------------------------
def called_kernels(mod):
    """{name: PrimFunc} of the kernels ``main`` of a built module calls."""
    found = {}

    def visit(expr):
        if isinstance(expr, relax.Call):
            for gv in [expr.op, *expr.args]:
                if isinstance(gv, relax.GlobalVar) and isinstance(mod[gv], tirx.PrimFunc):
                    found[gv.name_hint] = mod[gv]

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


@pytest.mark.parametrize("model, fused", [("conv_relu_pool", "fused_conv2d_add_relu_max_pool2d"),
                                          ("dw_pw", "fused_conv2d1_add1")])
def test_dlight_variant_builds_hws_kernels_with_other_schedules(model, fused):
    target = hw.target(H200)
    mod = import_model(model, 1)[1]  # lifted, as the bundle compiles it
    # the conv direct (winograd=off), so that conv_relu_pool's conv -> pool pair is there to fuse
    variant = pipeline_knobs(parse_variant(f"{model}_dlight:{model}:schedules=false,winograd=off"))
    ours = called_kernels(hw.get_pipeline(target, winograd="off", build_kernels=False)(mod))
    dlight = called_kernels(hw.get_pipeline(target, build_kernels=False, **variant)(mod))
    assert sorted(ours) == sorted(dlight) and fused in ours
    assert not tvm_ffi.structural_equal(ours[fused], dlight[fused])  # a template's, then dlight's


# ---- a synthetic results.json --------------------------------------------------------------------
def profile(times, keep_all=True):
    """A runner kernel profile of {name: (calls, us per call)}."""
    rows = sorted(({"name": n, "calls": c, "us_per_call": u, "us": round(c * u, 3)}
                   for n, (c, u) in times.items()), key=lambda r: -r["us"])
    out = {"total_us": sum(r["us"] for r in rows), "calls": sum(r["calls"] for r in rows),
           "distinct": len(rows), "top": rows[:25]}
    if keep_all:
        out["all"] = rows
    return out


def results_json(*rows):
    return {"profile": H200, "bundle_commit": None, "system": {"gpu": "Test GPU", "date": "today"},
            "rows": list(rows)}


def row(model, batch, hw_times, dlight_times, variant=None, knobs=None, **profile_kw):
    variant = variant or f"{model}_dlight"
    return {"model": model, "batch": batch, "times_s": {"hw": 1e-3, variant: 2e-3}, "errors": {},
            "knobs": {variant: knobs if knobs is not None else {"schedules": False}},
            "kernels": {"stock": profile({"s": (1, 1.0)}), "hw": profile(hw_times, **profile_kw),
                        variant: profile(dlight_times, **profile_kw)}}


LABELS = {"k_gemm_a": "ImplicitGemm", "k_gemm_b": "ImplicitGemm", "k_row": "RowReduction",
          "k_copy": "dlight Fallback"}
HW = {"k_gemm_a": (2, 10.0), "k_gemm_b": (1, 21.0), "k_row": (1, 5.0), "k_copy": (1, 3.0)}
DLIGHT = {"k_gemm_a": (2, 40.0), "k_gemm_b": (1, 21.0), "k_row": (1, 10.0), "k_copy": (1, 3.3)}


def test_kernel_rows_and_per_template_sums(table, tmp_path):
    out = tmp_path / "templates.md"
    asked = []

    def explainer(model, batch, prof):
        asked.append((model, batch, prof))
        return LABELS

    text = table.write_table(results_json(row("m", 1, HW, DLIGHT), row("m", 32, HW, DLIGHT)), out,
                             "results.json", explainer=explainer)
    assert out.read_text() == text and asked == [("m", 1, H200), ("m", 32, H200)]
    section = text.split("## m b1")[1].split("## m b32")[0]
    assert "hw 1.000 ms, m_dlight 2.000 ms" in section
    summary = ["| ImplicitGemm | 2 | 3 | 41.00 | 101.00 | 2.46x | 2.00x |",  # geomean of 4x and 1x
               "| RowReduction | 1 | 1 | 5.00 | 10.00 | 2.00x | 2.00x |",
               "| dlight in both (Fallback) | 1 | 1 | 3.00 | 3.30 | 1.10x | 1.10x |",
               "| all kernels | 4 | 5 | 49.00 | 114.30 | 2.33x | 1.72x |"]  # (4 * 1 * 2 * 1.1) ** 0.25
    assert [section.index(line) for line in summary] == sorted(section.index(line) for line in summary)
    kernels = ["| `k_gemm_b` | 1 | ImplicitGemm | 21.00 | 21.00 | 1.00x |",  # largest us first
               "| `k_gemm_a` | 2 | ImplicitGemm | 10.00 | 40.00 | 4.00x |",
               "| `k_row` | 1 | RowReduction | 5.00 | 10.00 | 2.00x |",
               "| `k_copy` | 1 | dlight in both (Fallback) | 3.00 | 3.30 | 1.10x |"]
    assert [section.index(line) for line in kernels] == sorted(section.index(line) for line in kernels)
    assert "one profile only" not in section and "the bundle's commit is not recorded" in text


def test_groups_that_differ_are_named_and_left_out_of_the_sums(table, tmp_path):
    hw_times = {**HW, "k_extra": (1, 7.0)}
    text = table.write_table(results_json(row("m", 1, hw_times, DLIGHT)), tmp_path / "t.md", "r.json",
                             explainer=lambda *_: {**LABELS, "k_extra": "VectorizedElementwise"})
    assert "**1 kernels are in one profile only** (the groups differ): `k_extra`" in text
    assert "| `k_extra` | 1 | VectorizedElementwise | 7.00 | - | - |" in text
    assert "| all kernels | 4 | 5 | 49.00 | 114.30 |" in text and "\n| VectorizedElementwise |" not in text


def test_a_complete_profile_without_all_and_unlabelled_kernels(table, tmp_path):
    text = table.write_table(results_json(row("m", 1, HW, DLIGHT, variant="other", keep_all=False)),
                             tmp_path / "t.md", "r.json", explainer=lambda *_: {})
    assert "against `other` (schedules=false" in text
    assert "| `k_row` | 1 | ? (not in this checkout's build) | 5.00 | 10.00 | 2.00x |" in text


def test_commit_note(table):
    assert table.commit_note("abc", "abc") is None
    assert "built at abc" in table.commit_note("abc", "def")
    assert "not recorded" in table.commit_note(None, "def")


# ---- real labels -----------------------------------------------------------------------------------
def test_labels_are_explain_schedules_rules(table, tmp_path):
    model, target = "bert_encoder_layer", hw.target(H200)
    mod = import_model(model, 1)[1]
    calls = Counter(kernel_names(fused_module(mod, target, hw.fusion_pass(target))))
    rules = {c.kernel: c.rule for c in explain_schedules(mod, target)}
    hw_times = {name: (n, 10.0) for name, n in calls.items()}
    res = tmp_path / "results.json"
    dlight_times = {name: (n, 20.0) for name, (n, _) in hw_times.items()}
    res.write_text(json.dumps(results_json(row(model, 1, hw_times, dlight_times))))
    out = tmp_path / "bench" / "templates.md"
    assert table.main([str(res), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| `layer_norm` | 2 | RowReduction | 10.00 | 20.00 | 2.00x |" in text
    # at batch 1 the softmax is inside the attention kernel
    assert "| `fused_matmul1_divide_softmax_matmul2` | 1 | Attention |" in text and "? (not in" not in text
    for name, rule in rules.items():
        shown = f"dlight in both ({rule[len('dlight '):]})" if rule.startswith("dlight ") else rule
        assert f"| `{name}` | {calls[name]} | {shown} |" in text
    assert f"| all kernels | {len(calls)} | {sum(calls.values())} |" in text


# ---- bad input -------------------------------------------------------------------------------------
def _crashed():
    ok = row("mobilenet_v2", 1, HW, DLIGHT)
    return results_json(ok, {"model": "mobilenet_v2", "batch": 32, "error": "child exited with -11"})


def _failed_profile():
    bad = row("mobilenet_v2", 1, HW, DLIGHT)
    del bad["kernels"]["mobilenet_v2_dlight"]
    bad["errors"]["mobilenet_v2_dlight kernels"] = "RuntimeError: boom"
    return results_json(bad)


def _unprofiled():
    bad = row("mobilenet_v2", 1, HW, DLIGHT)
    del bad["kernels"]
    return results_json(bad)


def _truncated():
    many = {f"k{i}": (1, 30.0 - i) for i in range(30)}
    return results_json(row("mobilenet_v2", 1, many, many, keep_all=False))


@pytest.mark.parametrize("results, extra, message", [
    (None, [], "no such file"),
    (_unprofiled(), [], "mobilenet_v2 b1: no kernel profile of hw (run the bundle with --kernel-profile)"),
    (_failed_profile(), [], "no kernel profile of mobilenet_v2_dlight (RuntimeError: boom)"),
    (results_json(row("resnet50", 1, HW, DLIGHT, knobs={"max_depth": 1}, variant="split")), [],
     "no row of results.json has a variant built with schedules=false alone"),
    (results_json(row("resnet50", 1, HW, DLIGHT, knobs={"max_depth": 1}, variant="split")),
     ["--models", "resnet50"], "resnet50 b1: no variant built with schedules=false alone"),
    (results_json(row("resnet50", 1, HW, DLIGHT, knobs={"schedules": False, "max_depth": 1})), [],
     "variant resnet50_dlight has knobs"),
    (_crashed(), [], "mobilenet_v2 b32: the runner failed (child exited with -11)"),
    (_truncated(), [], "hw's profile lists 25 of 30 kernels"),
    (results_json(row("resnet50", 1, HW, DLIGHT)), ["--models", "squeezenet1_1"],
     "results.json has no row for squeezenet1_1"),
], ids=["no-file", "unprofiled", "failed-profile", "no-variant", "no-variant-for-model", "other-knobs",
        "crashed-row", "top-only", "no-row"])
def test_bad_input_is_one_line_and_no_file(table, tmp_path, capsys, results, extra, message):
    res = tmp_path / "results.json"
    if results is not None:
        res.write_text(json.dumps(results))
    out = tmp_path / "templates.md"
    assert table.main([str(res), "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not out.exists()
