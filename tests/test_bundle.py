"""Tests for tvm_fusion_hw.bundle and its runner (CPU only).

An llvm bundle of two micro-graphs is run by the bundle's own run.py under an interpreter that
cannot import the installed tvm (``python -S`` with only numpy on PYTHONPATH), so the bundle's
runtime-only copy is what loads. A CUDA bundle is built (no GPU needed) to check its packaging.
"""

import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm

from tvm_fusion_hw.bundle import runtime, writer as bundle
from tvm_fusion_hw.bundle.libraries import cuda_source
from tvm_fusion_hw.bundle.model_import import import_model
from tvm_fusion_hw import stock_pipeline, target
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.bundle.variants import parse_variant, parse_variants, pipeline_knobs
from tvm_fusion_hw.errors import FusionHWError
from script_loader import load_script

PYVER = f"{sys.version_info.major}.{sys.version_info.minor}"
MODELS = ["relu_add_mul", "eltwise5"]  # with and without weights
SPLIT = "eltwise5_split:eltwise5:max_depth=1"  # an extra variant: every op its own kernel


def _write(out, **kwargs):
    try:
        return bundle.write_bundle(out, progress=False, python_versions=(PYVER,), **kwargs)
    except FusionHWError as err:
        if "could not get the apache-tvm-ffi" in str(err):
            pytest.skip(f"no tvm-ffi wheel (PyPI unreachable?): {err}")
        raise


@pytest.fixture(scope="module")
def llvm_bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle")
    manifest = _write(out, models=MODELS, batches=[1], target="llvm", variants=[SPLIT])
    return out, manifest


def _isolated_env(tmp_path):
    """PYTHONPATH with numpy alone (linked), for ``python -S``: no site-packages, so no tvm."""
    site = tmp_path / "numpy_only"
    site.mkdir()
    src = Path(np.__file__).resolve().parent
    for name in (src.name, src.name + ".libs"):
        if (src.parent / name).exists():
            os.symlink(src.parent / name, site / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TVM_"))}
    env["PYTHONPATH"] = str(site)
    return env


def _run(bundle_dir, results, env, *extra):
    cmd = [sys.executable, "-S", str(bundle_dir / "run.py"), "--out", str(results), "--device", "cpu",
           "--repeat", "3", "--min-repeat-ms", "5", *extra]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_isolated_python_cannot_import_tvm(tmp_path):
    env = _isolated_env(tmp_path)
    done = subprocess.run([sys.executable, "-S", "-c", "import numpy\nimport tvm"], env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "No module named 'tvm'" in done.stderr


def test_bundle_layout(llvm_bundle):
    out, manifest = llvm_bundle
    tvm_dir = out / "tvm_runtime" / "tvm"
    assert (tvm_dir / "lib" / "libtvm_runtime.so").is_file()
    assert not (tvm_dir / "lib" / "libtvm_compiler.so").exists()
    assert not list(tvm_dir.rglob("__pycache__")) and not (tvm_dir / "3rdparty").exists()
    assert (out / "run.py").is_file() and (out / "builders" / "tvm_fusion_hw" / "models").is_dir()
    # the corpus' PyTorch constructors (the runner's PyTorch columns), not the exporter
    corpus_dir = out / "builders" / "tvm_fusion_hw" / "models" / "corpus"
    assert (corpus_dir / "torch_source.py").is_file() and not (corpus_dir / "export.py").exists()
    # the runner is run.py and the two files it imports from its folder, byte for byte the package's
    for name, src in runtime.runner_files().items():
        assert (out / name).read_bytes() == src.read_bytes(), name
    assert sorted(runtime.runner_files()) == ["run.py", "runner_report.py", "runner_timing.py"]
    assert [w for w in manifest["runtime"]["wheels"] if f"cp{PYVER.replace('.', '')}" in w]
    entries = {e["model"]: e for e in manifest["entries"]}
    assert set(entries) == set(MODELS) and not any("error" in e for e in entries.values())
    ram = entries["relu_add_mul"]
    assert [i["name"] for i in ram["inputs"]] == ["input", "skip"]
    assert [p["name"] for p in ram["params"]] == ["scale"] and entries["eltwise5"]["params"] == []
    assert {v["name"] for v in ram["variants"]} == {"stock", "hw"}  # no CUDA graphs on llvm
    assert ram["flops"] > 0 and ram["bytes"] > 0 and ram["roofline_s"] > 0
    assert json.loads((out / ram["report"]).read_text())["groups"]
    for variant in ram["variants"]:
        assert (out / variant["stored"]).is_file() and variant["stored"].endswith(".so.xz")


def test_runner_runtime_only(llvm_bundle, tmp_path):
    out, _ = llvm_bundle
    results = tmp_path / "results"
    done = _run(out, results, _isolated_env(tmp_path), "--kernel-profile")
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads((results / "results.json").read_text())
    system = res["system"]
    assert Path(system["tvm_path"]).resolve() == (out / "tvm_runtime" / "tvm").resolve()
    assert system["tvm_runtime_only"] and "tvm_compiler" not in system["tvm_libs"]
    rows = {r["model"]: r for r in res["rows"]}
    assert set(rows) == set(MODELS)
    for row in rows.values():
        assert set(row["times_s"]) >= {"stock", "hw"} and all(t > 0 for t in row["times_s"].values())
        assert row["accuracy"]["hw"]["ok"] and row["accuracy"]["hw"]["rel_l2"] <= 1e-4
        assert row["efficiency"]["hw"] > 0
    assert "seeded random" in rows["relu_add_mul"]["weights"]  # no onnx on the isolated path
    table = (results / "results.md").read_text()
    assert "| relu_add_mul | 1 |" in table and "hw/stock" in table
    # The extra variant is checked and timed, and listed in its own table.
    split = rows["eltwise5"]
    assert split["accuracy"]["eltwise5_split"]["ok"] and split["times_s"]["eltwise5_split"] > 0
    assert split["knobs"] == {"eltwise5_split": {"max_depth": 1}}
    assert "| eltwise5 | 1 | eltwise5_split | max_depth=1 | 1 / 5 |" in table
    # --kernel-profile: every library's kernels, counted per call, in results.json and kernels.md.
    prof = split["kernels"]
    assert set(prof) == {"stock", "hw", "eltwise5_split"}
    assert prof["hw"]["calls"] == 1 and prof["eltwise5_split"]["calls"] == 5
    assert sum(k["calls"] for k in prof["eltwise5_split"]["top"]) == 5
    for lib in prof.values():
        assert lib["total_us"] > 0 and lib["all"] == sorted(lib["all"], key=lambda k: -k["us"])
        assert all(not k["name"].startswith("vm.builtin") for k in lib["all"])
        # "all" holds every kernel (template_table.py compares them); "top" stays its prefix
        assert len(lib["all"]) == lib["distinct"] and lib["top"] == lib["all"][:len(lib["top"])]
        assert sum(k["calls"] for k in lib["all"]) == lib["calls"]
    # the commit the bundle was built from, for template_table.py to check its labels against
    assert res["bundle_commit"] == llvm_bundle[1]["commit"]
    if (bundle.REPO / ".git").exists():
        assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", llvm_bundle[1]["commit"])
    kernels = (results / "kernels.md").read_text()
    assert "## eltwise5 b1" in kernels and "### eltwise5_split: 5 kernel calls" in kernels


def test_runner_torch_only_without_torch(llvm_bundle, tmp_path):
    """--torch-only runs no TVM library; --torch-warm without torch is a log line, not a failure."""
    out, _ = llvm_bundle
    results = tmp_path / "results"
    done = _run(out, results, _isolated_env(tmp_path), "--torch-only", "--torch", "compile_graphs",
                "--torch-warm", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--torch-warm: torch not importable, no warm-up" in done.stderr
    for row in json.loads((results / "results.json").read_text())["rows"]:
        assert row["times_s"] == {} and not row["errors"] and "weights" not in row, row
        assert {"TVM libraries not run (--torch-only)", "torch not importable: no PyTorch columns"} <= set(row["notes"])


def test_runner_rebuilds_exact_weights(llvm_bundle, tmp_path):
    """With onnx importable, the runner rebuilds the compiled weights bit for bit."""
    pytest.importorskip("onnx")
    out, _ = llvm_bundle
    env = {k: v for k, v in os.environ.items() if not k.startswith("TVM_")}
    done = subprocess.run([sys.executable, str(out / "run.py"), "--out", str(tmp_path / "r"), "--device",
                           "cpu", "--models", "relu_add_mul", "--repeat", "2", "--min-repeat-ms", "1"],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads((tmp_path / "r" / "results.json").read_text())["rows"][0]
    assert "all 1 match the compiled weights" in row["weights"]


def test_runner_reports_a_broken_library_and_continues(llvm_bundle, tmp_path):
    out, manifest = llvm_bundle
    copy = tmp_path / "bundle"
    shutil.copytree(out, copy)
    broken = next(v for e in manifest["entries"] if e["model"] == "eltwise5" for v in e["variants"]
                  if v["name"] == "hw")
    with lzma.open(copy / broken["stored"], "wb") as dst:
        dst.write(b"not a shared library")
    results = tmp_path / "results"
    done = _run(copy, results, _isolated_env(tmp_path))
    assert done.returncode == 1
    rows = {r["model"]: r for r in json.loads((results / "results.json").read_text())["rows"]}
    assert "hw" in rows["eltwise5"]["errors"] and "stock" in rows["eltwise5"]["times_s"]
    assert rows["relu_add_mul"]["accuracy"]["hw"]["ok"]
    assert "eltwise5 b1 hw:" in (results / "results.md").read_text()


def test_extra_variant_in_manifest(llvm_bundle):
    out, manifest = llvm_bundle
    assert manifest["extra_variants"] == [{"name": "eltwise5_split", "model": "eltwise5",
                                           "knobs": {"max_depth": 1}}]
    entries = {e["model"]: e for e in manifest["entries"]}
    assert "eltwise5_split" not in {v["name"] for v in entries["relu_add_mul"]["variants"]}
    libs = {v["name"]: v for v in entries["eltwise5"]["variants"]}
    split, hw = libs["eltwise5_split"], libs["hw"]
    assert split["pipeline"] == "hw" and not split["cuda_graph"] and split["knobs"] == {"max_depth": 1}
    assert split["groups"] == 5 and entries["eltwise5"]["hw_groups"] == 1 and "knobs" not in hw
    assert (out / split["stored"]).is_file() and split["stored"] != hw["stored"]
    assert (out / entries["eltwise5"]["report"]).is_file() and "report" not in hw
    groups = json.loads((out / split["report"]).read_text())["groups"]
    assert len(groups) == 5 and split["report"] != entries["eltwise5"]["report"]


def test_parse_variant():
    spec = parse_variant("pair:dw_pw:pair_templates=conv->window+depthwise_conv->pointwise_conv,"
                         "fuse_complex_pairs=yes,max_occupancy_drop=0.3,max_depth=4,schedules=false")
    assert (spec.name, spec.model) == ("pair", "dw_pw")
    assert spec.knobs == {"pair_templates": ["conv->window", "depthwise_conv->pointwise_conv"],
                          "fuse_complex_pairs": True, "max_occupancy_drop": 0.3, "max_depth": 4,
                          "schedules": False}
    assert pipeline_knobs(spec)["pair_templates"] == ("conv->window", "depthwise_conv->pointwise_conv")
    assert parse_variant("a:m:pair_templates=none").knobs == {"pair_templates": None}
    assert parse_variant("a:m:pair_templates=").knobs == {"pair_templates": []}
    assert parse_variant("a:corpus:resnet18:max_depth=2").model == "corpus:resnet18"
    names = parse_variant("a:m:schedules=RowReduction+ConvPool")
    assert names.knobs == {"schedules": ["RowReduction", "ConvPool"]}
    assert [type(r).__name__ for r in pipeline_knobs(names)["schedules"]] == ["ConvPool", "RowReduction"]


@pytest.mark.parametrize("spec, message", [
    ("eltwise5:max_depth=1", "expected NAME:MODEL:KEY=VALUE"),
    ("a:eltwise5:", "expected NAME:MODEL:KEY=VALUE"),
    ("hw:eltwise5:max_depth=1", "name 'hw' must be"),
    ("a b:eltwise5:max_depth=1", "name 'a b' must be"),
    ("a:eltwise5:depth=1", "unknown knob 'depth'"),
    ("a:eltwise5:max_depth", "unknown knob 'max_depth' (or no '=')"),
    ("a:eltwise5:split_groups=x", "unknown knob 'split_groups'"),
    ("a:eltwise5:max_depth=deep", "max_depth='deep', expected int"),
    ("a:eltwise5:fuse_complex_pairs=maybe", "expected bool"),
    ("a:eltwise5:max_depth=0", "max_depth must be at least 1"),
    ("a:eltwise5:schedules=Gemm", "unknown schedule rule(s) Gemm; known: DepthwisePointwise"),
])
def test_bad_variant_is_one_line_error(spec, message):
    with pytest.raises(FusionHWError, match=re.escape(message)) as err:
        parse_variant(spec)
    assert "\n" not in str(err.value)


def test_variants_need_unique_names_and_bundled_models(tmp_path):
    with pytest.raises(FusionHWError, match="'a' given twice"):
        parse_variants(["a:eltwise5:max_depth=1", "a:eltwise5:max_depth=2"], ["eltwise5"])
    with pytest.raises(FusionHWError, match="model 'dw_pw' is not among the bundle's models"):
        bundle.bundle_main(["--out", str(tmp_path / "b"), "--models", "eltwise5", "--quiet",
                            "--variant", "a:dw_pw:max_depth=1"])
    assert not (tmp_path / "b").exists()  # rejected before anything is written


def test_no_stock_bundle_builds_hw_and_its_variants(tmp_path):
    """``--no-stock``: the hw library and the variants, no stock library (the runner then checks
    each against hw, its first library)."""
    assert bundle.bundle_main(["--out", str(tmp_path), "--models", "eltwise5", "--batches", "1", "--target", "llvm",
                               "--no-stock", "--quiet", "--variant", "split:eltwise5:max_depth=1"]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    (entry,) = manifest["entries"]
    assert [v["name"] for v in entry["variants"]] == ["hw", "split"]
    assert sorted(p.name for p in tmp_path.glob("*.so*")) == sorted(v["stored"] for v in entry["variants"])


def test_torch_only_bundle_compiles_nothing(tmp_path):
    """``--torch-only``: the runner's entries (inputs, weights, roofline) and no library."""
    assert bundle.bundle_main(["--out", str(tmp_path), "--models", "eltwise5", "--batches", "1", "4",
                               "--target", "llvm", "--torch-only", "--quiet"]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [(e["model"], e["batch"], e["variants"]) for e in manifest["entries"]] == [
        ("eltwise5", 1, []), ("eltwise5", 4, [])]
    assert [e["inputs"][0]["shape"][0] for e in manifest["entries"]] == [1, 4]
    assert all(e["flops"] > 0 and e["roofline_s"] > 0 for e in manifest["entries"])
    assert not list(tmp_path.glob("*.so*"))
    with pytest.raises(FusionHWError, match="--torch-only builds none"):
        bundle.bundle_main(["--out", str(tmp_path / "v"), "--models", "eltwise5", "--torch-only",
                            "--quiet", "--variant", "a:eltwise5:max_depth=1"])
    assert not (tmp_path / "v").exists()


def test_unknown_model_is_rejected(tmp_path):
    with pytest.raises(FusionHWError, match="unknown model 'nope'"):
        bundle.write_bundle(tmp_path, models=["nope"], progress=False)


@pytest.mark.skipif(not toolchain.have_nvcc(), reason="nvcc not installed")
def test_cuda_bundle_packaging(tmp_path):
    """A CUDA bundle keeps small compressed libraries and prebuilt binaries the runner finds."""
    manifest = _write(tmp_path, models=["relu_add_mul"], batches=[1], target="cuda")
    entry = manifest["entries"][0]
    assert {v["name"] for v in entry["variants"]} == {"stock", "hw", "stock_graph", "hw_graph"}
    assert all(v["stored_bytes"] < 100_000 for v in entry["variants"])
    assert manifest["cubins"]["count"] == len({v["cuda_source_sha256"] for v in entry["variants"]})
    runner = load_script(tmp_path / "run.py", "bundle_runner")
    # Rebuild the stock library's source (codegen is deterministic): the library embeds exactly
    # this text, which the runtime hands to tvm_callback_cuda_compile, and the bundle has its binary.
    _, mod, _, _ = import_model("relu_add_mul", 1)
    tgt = target("nvidia-h200")
    code = cuda_source(tvm.compile(mod, target=tgt, relax_pipeline=stock_pipeline(tgt)))
    stock = next(v for v in entry["variants"] if v["name"] == "stock")
    assert hashlib.sha256(code.encode()).hexdigest() == stock["cuda_source_sha256"]
    assert code.encode() in lzma.open(tmp_path / stock["stored"]).read()
    compile_cuda, info = runner.make_cuda_compiler("sm_90", "bundle", bundle=tmp_path)
    assert len(compile_cuda(code)) > 1000 and info["calls"][0].startswith("bundle")


def test_runner_files_stay_small():
    """The runner is split along its seams (issue 12: no file over ~450 lines)."""
    for name, src in runtime.runner_files().items():
        assert len(src.read_text().splitlines()) <= 450, name


def test_bundled_runner_loads_by_path_from_anywhere(llvm_bundle, tmp_path, monkeypatch):
    """bench/tile_sweep.py and cubins.py load run.py by path, from another working folder: it
    finds its siblings beside itself, not on sys.path."""
    out, _ = llvm_bundle
    monkeypatch.chdir(tmp_path)
    runner = load_script(out / "run.py", "bundle_runner")
    assert not any(name.startswith("runner_") for name in sys.modules)
    for name in ("setup_tvm", "make_cuda_compiler", "source_key", "main", "rebuild_weights", "write_markdown"):
        assert callable(getattr(runner, name)), name
    assert runner.source_key("sm_90", "x") == hashlib.sha256(b"sm_90x").hexdigest()
    assert runner.compare([np.ones(3)], [np.ones(3)]) == (0.0, 0.0)


@pytest.mark.parametrize("argv, message", [
    (["--profile", "amd-mi300x"], "bundle --target cuda needs an NVIDIA profile: 'amd-mi300x'"),
    (["--profile", "nope"], "unknown hardware profile 'nope'"),
    (["--batches", "0"], "batch sizes must be integers of at least 1, got 0"),
])
def test_bad_bundle_input_touches_nothing(tmp_path, argv, message):
    """Refused before the folder is made, and an earlier bundle there keeps its libraries."""
    with pytest.raises(FusionHWError, match=re.escape(message)):
        bundle.bundle_main(["--out", str(tmp_path / "new"), "--models", "eltwise5", "--quiet", *argv])
    assert not (tmp_path / "new").exists()
    old = tmp_path / "old"
    old.mkdir()
    (old / "eltwise5_b1_hw.so.xz").write_bytes(b"an earlier bundle's library")
    with pytest.raises(FusionHWError, match=re.escape(message)):
        bundle.bundle_main(["--out", str(old), "--models", "eltwise5", "--quiet", *argv])
    assert [p.name for p in old.iterdir()] == ["eltwise5_b1_hw.so.xz"]
