"""Tests for bench/sanitize_kernels.py (the template kernels' bundle) and its device script.

Checked:
- the device script (bench/sanitize_run_kernels.py, the bundle's run_kernels.py) under an
  interpreter that cannot import the installed tvm, on a bundle of llvm kernels: one line per
  kernel, a kernel that raises, one that kills its process (a segfault) and one that hangs are
  reported by name and the kernels after them still run; --rule/--limit/--list; --no-isolate;
- --summarize-log attributes memcheck and racecheck reports to kernels;
- (slow) MobileNetV3-Small's bundle holds every kernel the schedule log gives a template and no
  kernel it gives dlight (read from an independent run of hw.get_pipeline, not from the
  script's deduplication), with each kernel's argument shapes; its libraries load on the CPU and
  implement every kernel;
- (slow) --forms-of: a batch-32 ImplicitGemm tile of MobileNetV3-Small applied to the same layer at
  batch 1 (whose own tile differs): the batch-1 arguments, the batch-32 form, and the unscheduled
  PrimFunc's results (LLVM, thread loops serial);
- (gpu) the same bundle's kernels run under compute-sanitizer memcheck with no error.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx
from tvm.script import tirx as T

import tvm_fusion_hw as hw
from tvm_fusion_hw.bundle import runtime
from tvm_fusion_hw.bundle.libraries import export_library
from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.pipeline import fused_module
from script_loader import BENCH, load_script

PYVER = f"{sys.version_info.major}.{sys.version_info.minor}"
MODEL = "mobilenet_v3_small"


def _script():
    module = load_script(BENCH / "sanitize_kernels.py", "sanitize_kernels")
    return module


def _numpy_only_env(tmp_path):
    """PYTHONPATH with numpy alone, for ``python -S``: the bundle's tvm is the only one."""
    site = tmp_path / "numpy_only"
    site.mkdir(exist_ok=True)
    src = Path(np.__file__).resolve().parent
    for name in (src.name, src.name + ".libs"):
        if (src.parent / name).exists() and not (site / name).exists():
            os.symlink(src.parent / name, site / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TVM_"))}
    env["PYTHONPATH"] = str(site)
    return env


# ---- the device script on llvm kernels ------------------------------------------------------------
@T.prim_func
def _ok(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = A[i] + T.float32(1)


@T.prim_func
def _gather(A: T.Buffer((4,), "float32"), idx: T.Buffer((4,), "int64"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = A[idx[i]]  # integer arguments are zeros: in bounds


@T.prim_func
def _crash(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    B[0] = A[T.Cast("int64", T.fabs(A[0]) * T.float32(1e12) + T.float32(1e12))]  # terabytes away


@T.prim_func
def _hang(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    B[0] = A[0]
    while B[0] > T.float32(-1e30):
        B[0] = B[0] * T.float32(0.5) + T.float32(1)


def _arg(name, shape, dtype="float32"):
    return {"name": name, "shape": shape, "dtype": dtype}


#: bundle name -> (PrimFunc, rule, arguments in the manifest); k0004's shape is wrong on purpose
CPU_KERNELS = {
    "k0000_ok": (_ok, "VectorizedElementwise", [_arg("A", [4]), _arg("B", [4])]),
    "k0001_gather": (_gather, "VectorizedElementwise", [_arg("A", [4]), _arg("idx", [4], "int64"), _arg("B", [4])]),
    "k0002_crash": (_crash, "ImplicitGemm", [_arg("A", [4]), _arg("B", [4])]),
    "k0003_hang": (_hang, "ImplicitGemm", [_arg("A", [4]), _arg("B", [4])]),
    "k0004_bad_shape": (_ok, "RowReduction", [_arg("A", [5]), _arg("B", [4])]),
    "k0005_after": (_ok, "RowReduction", [_arg("A", [4]), _arg("B", [4])]),
}


@pytest.fixture(scope="module")
def cpu_bundle(tmp_path_factory):
    """A bundle laid out as sanitize_kernels writes it, of llvm libraries (two, one per rule pair)."""
    out = tmp_path_factory.mktemp("sanitize_cpu")
    runtime.copy_tvm_runtime(out / "tvm_runtime")
    try:
        wheels = runtime.fetch_tvm_ffi_wheels(out / "wheels", (PYVER,))
    except FusionHWError as err:
        pytest.skip(f"no tvm-ffi wheel: {err}")
    runtime.copy_runner(out)
    shutil.copy2(BENCH / "sanitize_run_kernels.py", out / "run_kernels.py")
    manifest = {"format": "sanitize-kernels/1", "commit": "test", "target_kind": "llvm",
                "runtime": {"tvm": "tvm_runtime", "wheels": [f"wheels/{w}" for w in wheels]},
                "libraries": [], "kernels": {}}
    names = list(CPU_KERNELS)
    for part, group in enumerate([names[:2], names[2:]]):
        mod = tvm.IRModule({n: CPU_KERNELS[n][0].with_attr("global_symbol", n) for n in group})
        lib = tvm.tirx.build(mod, target=tvm.target.Target({"kind": "llvm"}))
        stem = f"lib_{part:02d}"
        manifest["libraries"].append({"name": stem, **export_library(lib, out, stem, compress=True), "kernels": group})
        for name in group:
            _, rule, args = CPU_KERNELS[name]
            manifest["kernels"][name] = {"rule": rule, "args": args, "library": stem,
                                         "sources": [{"model": "toy", "batch": 1, "kernel": name[6:]}]}
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def _run_device_script(bundle, tmp_path, *extra):
    cmd = [sys.executable, "-S", str(bundle / "run_kernels.py"), "--device", "cpu", *extra]
    return subprocess.run(cmd, env=_numpy_only_env(tmp_path), capture_output=True, text=True,
                          timeout=300, check=False)


def test_device_script_goes_on_past_failures(cpu_bundle, tmp_path):
    results = tmp_path / "results.json"
    done = _run_device_script(cpu_bundle, tmp_path, "--kernel-timeout", "4", "--results", str(results))
    out = done.stdout
    assert done.returncode == 1, done.stdout + done.stderr
    lines = {n: [ln for ln in out.splitlines() if f" {n} " in ln and ln.startswith("[")] for n in CPU_KERNELS}
    for name in ("k0000_ok", "k0001_gather", "k0005_after"):
        assert any(" ok " in ln for ln in lines[name]), out
    assert any("exited with status" in ln for ln in lines["k0002_crash"]), out
    assert any("no result after 4 s" in ln for ln in lines["k0003_hang"]), out
    assert any("FAILED" in ln and "ValueError" in ln for ln in lines["k0004_bad_shape"]), out
    assert "== 6 kernels run once" in out and "3 ok, 3 failed" in out
    saved = json.loads(results.read_text())
    assert sorted(saved["failed"]) == ["k0002_crash", "k0003_hang", "k0004_bad_shape"]
    assert [r["status"] for r in saved["results"]] == ["ok", "ok", "failed", "failed", "failed", "ok"]


def test_device_script_selects_and_runs_in_process(cpu_bundle, tmp_path):
    listed = _run_device_script(cpu_bundle, tmp_path, "--list", "--rule", "RowReduction", "VectorizedElementwise",
                                "--limit", "3")
    assert listed.returncode == 0 and "3 kernels selected" in listed.stdout
    assert [n for n in CPU_KERNELS if f" {n} " in listed.stdout] == ["k0000_ok", "k0001_gather", "k0004_bad_shape"]
    done = _run_device_script(cpu_bundle, tmp_path, "--no-isolate", "--kernels", "k0000_ok", "k0004_bad_shape",
                              "k0005_after")
    assert done.returncode == 1 and "2 ok, 1 failed" in done.stdout, done.stdout + done.stderr
    assert "FAILED" in next(ln for ln in done.stdout.splitlines() if " k0004_bad_shape " in ln)


def test_summarize_log(cpu_bundle, tmp_path):
    log = tmp_path / "sanitizer.log"
    log.write_text(textwrap.dedent("""\
        ========= COMPUTE-SANITIZER
        ========= Invalid __global__ read of size 4 bytes
        =========     at k0002_crash_kernel+0x2c60
        =========     by thread (0,0,0) in block (0,0,0)
        =========
        ========= Error: Race reported between Write access at k0003_hang_kernel+0x10
        =========     and Read access at k0003_hang_kernel+0x20 [4 hazards]
        ========= Warning: something the tool says about no kernel
        ========= ERROR SUMMARY: 2 errors
        """))
    done = _run_device_script(cpu_bundle, tmp_path, "--summarize-log", str(log))
    assert done.returncode == 1
    assert "2 report(s) on 2 kernel(s), 1 not attributed; ERROR SUMMARY: 2 errors" in done.stdout, done.stdout
    clean = tmp_path / "clean.log"
    clean.write_text("========= COMPUTE-SANITIZER\n"
                     "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n")
    assert _run_device_script(cpu_bundle, tmp_path, "--summarize-log", str(clean)).returncode == 0


# ---- a real model's bundle ------------------------------------------------------------------------
def _schedule_log(model, batch):
    """(rule of every kernel, template names, PrimFuncs) from the plugin's pipeline, run afresh."""
    target = hw.target("nvidia-h200")
    mod = _script().lifted_corpus_module(model, batch)
    pipeline = hw.get_pipeline(target, build_kernels=False)  # the scheduled PrimFuncs stay in the module
    with hw.pass_context(target):
        lowered = pipeline(mod)
    prims = {gv.name_hint: f for gv, f in lowered.functions_items() if isinstance(f, tirx.PrimFunc)}
    return pipeline.schedule_pass.log.rules, {type(r).__name__ for r in pipeline.schedule_pass.templates}, prims


_LOAD_ON_CPU = """
import json, sys, lzma, tvm
from pathlib import Path
blobs = []
def fake_cuda_loader(blob):  # no CUDA driver here: keep the CUDA part's bytes, load the host part
    blobs.append(bytes(blob))
    return tvm.tirx.build(tvm.IRModule({}), target=tvm.target.Target({"kind": "llvm"}))
tvm.register_global_func("ffi.Module.load_from_bytes.cuda", fake_cuda_loader, override=True)
out = Path(sys.argv[1]); manifest = json.loads((out / "manifest.json").read_text()); report = {}
for lib in manifest["libraries"]:
    so = out / lib["file"]
    so.write_bytes(lzma.open(out / lib["stored"]).read())
    mod = tvm.runtime.load_module(str(so))
    blob = blobs[-1]
    report[lib["name"]] = {k: [mod.implements_function(k), all(f.encode() in blob for f in
                                manifest["kernels"][k]["device_functions"])] for k in lib["kernels"]}
print(json.dumps(report))
"""


@pytest.mark.slow
def test_bundle_covers_the_template_kernels_of_a_model(tmp_path):
    """30-60 s: the plugin's pipeline twice on MobileNetV3-Small and a build of its kernels."""
    script = _script()
    try:
        manifest = script.write_bundle(tmp_path / "b", [MODEL], [1], precompile=False)
    except FusionHWError as err:
        pytest.skip(f"no tvm-ffi wheel: {err}")
    rules, templates, prims = _schedule_log(MODEL, 1)
    on_template = {n for n, r in rules.items() if r in templates}
    on_dlight = {n for n, r in rules.items() if r not in templates}
    assert on_template and on_dlight and set(prims) == set(rules)
    found = {}
    for name, kernel in manifest["kernels"].items():
        for source in kernel["sources"]:
            assert source["model"] == MODEL and source["batch"] == 1
            found[source["kernel"]] = (name, kernel)
    assert set(found) == on_template  # every template kernel, no dlight kernel
    assert not set(found) & on_dlight
    for original, (name, kernel) in found.items():
        assert kernel["rule"] == rules[original], original
        params = prims[original].params
        assert kernel["args"] == [{"name": p.name, "shape": [int(d) for d in p.ty.shape], "dtype": str(p.ty.dtype)}
                                  for p in params], original
        assert kernel["device_functions"] and kernel["library"].startswith(kernel["rule"])
    assert not manifest["build_errors"] and not manifest["excluded"]
    listed = [k for lib in manifest["libraries"] for k in lib["kernels"]]
    assert sorted(listed) == sorted(manifest["kernels"])
    done = subprocess.run([sys.executable, "-c", _LOAD_ON_CPU, str(tmp_path / "b")], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert {k: v for lib in loaded.values() for k, v in lib.items()} == {k: [True, True] for k in listed}


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("compute-sanitizer") is None or shutil.which("nvidia-smi") is None,
                    reason="needs an NVIDIA GPU and compute-sanitizer")
def test_model_kernels_pass_memcheck(tmp_path):
    script = _script()
    script.write_bundle(tmp_path / "b", [MODEL], [1], python_versions=(PYVER,))
    cmd = ["compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "1", sys.executable, "-S",
           str(tmp_path / "b" / "run_kernels.py")]
    done = subprocess.run(cmd, env=_numpy_only_env(tmp_path), capture_output=True, text=True, timeout=1800,
                          check=False)
    assert done.returncode == 0, done.stdout[-4000:]
    assert "0 failed" in done.stdout and "ERROR SUMMARY: 0 errors" in done.stdout


def test_schedule_form_drops_what_depends_on_the_problem_size():
    form = _script().schedule_form
    gemm = ("128x64 outputs a block (16x8 threads x 8x8 accumulators, 4-wide shared loads), BK 16, split K 1, "
            "prefetch by cp.async (2 shared buffers), 784 blocks, model 162.1 us")
    same_tile_other_grid = gemm.replace("784 blocks, model 162.1 us", "98 blocks, model 20.5 us")
    assert form("ImplicitGemm", gemm) == form("ImplicitGemm", same_tile_other_grid) == (
        "ImplicitGemm: 128x64 outputs a block (16x8 threads x 8x8 accumulators, 4-wide shared loads), BK 16, "
        "split K 1, prefetch by cp.async (2 shared buffers)")
    assert form("ImplicitGemm", gemm) != form("ImplicitGemm", gemm.replace("BK 16", "BK 32"))
    elementwise = "256 threads a block, 2 vector(s) a thread, 1568 blocks, 0.74 waves of resident threads"
    assert form("VectorizedElementwise", elementwise) == "VectorizedElementwise: 256 threads a block, 2 vector(s) a thread"


def test_one_per_form_keeps_the_smallest_kernel_of_each_form():
    module = load_script(BENCH / "sanitize_run_kernels.py", "run_kernels")
    kernels = {"k0": ("A: t1", 300), "k1": ("A: t1", 100), "k2": ("A: t2", 500), "k3": ("", 50), "k4": ("", 60)}
    manifest = {"libraries": [{"kernels": list(kernels)}],
                "kernels": {n: {"rule": "A", "form": f, "arg_bytes": b, "sources": []} for n, (f, b) in kernels.items()}}
    args = module.argparse.Namespace(rule=None, models=None, kernels=None, limit=None, one_per_form=True)
    # a kernel without a form (an older manifest) stands for itself
    assert [name for _, name, _ in module.select(manifest, args)] == ["k1", "k2", "k3", "k4"]


@pytest.mark.slow
def test_forms_of_runs_a_batch_32_tile_on_the_same_layer_at_batch_1(tmp_path):
    """40-80 s: a batch-32 ImplicitGemm kernel of MobileNetV3-Small whose batch-1 kernel has another
    tile, rebuilt at batch 1 with the batch-32 tile (how racecheck gets through the forms whose
    batch-32 kernels it cannot finish): the layer's batch-1 arguments, the batch-32 form, and the
    same results as the unscheduled batch-1 PrimFunc."""
    from tir_checks import assert_schedule_preserves_numerics  # pylint: disable=import-outside-toplevel

    script, target = _script(), hw.target("nvidia-h200")
    logs = {}
    for batch in (32, 1):
        mod = script.lifted_corpus_module(MODEL, batch)
        pipeline = hw.get_pipeline(target, build_kernels=False)
        with hw.pass_context(target):
            lowered = pipeline(mod)
        logs[batch] = (pipeline.schedule_pass.log, {gv.name_hint: f for gv, f in lowered.functions_items()},
                       {gv.name_hint: f for gv, f in fused_module(mod, target, hw.fusion_pass(target)).functions_items()})
    (log32, _, _), (log1, scheduled1, unscheduled1) = logs[32], logs[1]
    form = lambda log, name: script.schedule_form(log.rules[name], log.plans[name])  # noqa: E731
    differing = [n for n, r in log32.rules.items() if r == "ImplicitGemm" and log1.rules.get(n) == r
                 and form(log32, n) != form(log1, n)]
    assert differing, "every ImplicitGemm kernel has the same tile at batch 1 and 32"
    name = differing[0]
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"kernels": {"k0": {
        "rule": "ImplicitGemm", "form": form(log32, name), "sources": [{"model": MODEL, "batch": 32, "kernel": name}]}}}))

    kernels, rows = script.same_form_kernels(manifest, ["k0"], 1, target)
    assert rows == [{"model": MODEL, "batch": 1, "form_of": "k0", "kernel": name}]
    (kernel,) = kernels.kernels
    assert kernel.plan == f"{form(log32, name)} (the batch-32 tile)"
    assert kernel.args == [{"name": p.name, "shape": [int(d) for d in p.ty.shape], "dtype": str(p.ty.dtype)}
                           for p in unscheduled1[name].params]
    assert not tvm_ffi.structural_equal(kernel.func, scheduled1[name].without_attr("global_symbol"))
    assert_schedule_preserves_numerics(unscheduled1[name], type("Sch", (), {"mod": {"main": kernel.func}})(),
                                       reassociates=True)
    with pytest.raises(SystemExit, match="not in"):
        script.same_form_kernels(manifest, ["k9"], 1, target)


@pytest.mark.parametrize("knob, message", [("layout_prologues=maybe", "is a switch: on or off"),
                                           ("layout_prologues", "takes NAME=VALUE")])
def test_a_bad_knob_is_one_line_before_any_build(tmp_path, capsys, knob, message):
    with pytest.raises(SystemExit) as stop:
        _script().main(["--out", str(tmp_path / "b"), "--models", MODEL, "--knob", knob])
    assert stop.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
