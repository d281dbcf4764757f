"""Tests for tvm_fusion_hw.hardware.toolchain: ROCm/CUDA tool lookup, and build smoke tests (CPU only)."""

import os

import pytest
import tvm
from tvm import relax

from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.feedback import ptxas
from tvm_fusion_hw.feedback.kernel_launches import CUDA_KINDS, ROCM_KINDS, device_modules
from tvm_fusion_hw.hardware import toolchain

CUDA_ARCHS = ["sm_80", "sm_89", "sm_90"]
ROCM_ARCHS = ["gfx90a", "gfx942"]
NEED_ROCM = "ROCm toolchain absent (lld-22, rocm-device-libs): run scripts/install-system-deps.sh"


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch):
    """Undo whatever configure_rocm writes to ROCM_PATH and PATH."""
    for key in ("ROCM_PATH", "PATH"):
        monkeypatch.setenv(key, os.environ.get(key, ""))
        if key == "ROCM_PATH" and not os.environ["ROCM_PATH"]:
            monkeypatch.delenv(key)


def _fake_rocm(tmp_path):
    bitcode = tmp_path / "amdgcn" / "bitcode"
    bitcode.mkdir(parents=True)
    (bitcode / "ocml.bc").write_bytes(b"")
    return str(tmp_path)


def test_rocm_path_prefers_env(monkeypatch, tmp_path):
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))
    assert toolchain.rocm_path() == str(tmp_path)


def test_rocm_path_default_needs_bitcode(monkeypatch, tmp_path):
    monkeypatch.delenv("ROCM_PATH", raising=False)
    empty, good = tmp_path / "empty", _fake_rocm(tmp_path)
    monkeypatch.setattr(toolchain, "_DEFAULT_ROCM_PATHS", (str(empty), good))
    assert toolchain.rocm_path() == good
    monkeypatch.setattr(toolchain, "_DEFAULT_ROCM_PATHS", (str(empty),))
    assert toolchain.rocm_path() is None


def test_configure_rocm_missing_bitcode_raises(monkeypatch, tmp_path):
    monkeypatch.delenv("ROCM_PATH", raising=False)
    monkeypatch.setattr(toolchain, "_DEFAULT_ROCM_PATHS", (str(tmp_path),))
    with pytest.raises(FusionHWError, match="install-system-deps.sh") as info:
        toolchain.configure_rocm()
    assert "\n" not in str(info.value)
    assert not toolchain.have_rocm_toolchain()


def test_configure_rocm_bad_env_path_raises(monkeypatch, tmp_path):
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))
    with pytest.raises(FusionHWError, match=f"ROCM_PATH={tmp_path}.*install-system-deps.sh"):
        toolchain.configure_rocm()


def test_configure_rocm_missing_lld_raises(monkeypatch, tmp_path):
    monkeypatch.setenv("ROCM_PATH", _fake_rocm(tmp_path))
    monkeypatch.setattr(toolchain, "_find_lld", lambda: None)
    with pytest.raises(FusionHWError, match="ld.lld.*install-system-deps.sh"):
        toolchain.configure_rocm()


def test_configure_rocm_old_lld_raises(monkeypatch, tmp_path):
    monkeypatch.setenv("ROCM_PATH", _fake_rocm(tmp_path))
    monkeypatch.setattr(toolchain, "_find_lld", lambda: "/usr/bin/ld.lld")
    monkeypatch.setattr(toolchain, "_lld_major", lambda lld: 14)
    with pytest.raises(FusionHWError, match="unknown abi version"):
        toolchain.configure_rocm()


@pytest.mark.skipif(not toolchain.have_rocm_toolchain(), reason=NEED_ROCM)
def test_configure_rocm_sets_env(monkeypatch):
    monkeypatch.delenv("ROCM_PATH", raising=False)
    path = toolchain.configure_rocm()
    assert os.environ["ROCM_PATH"] == path
    assert os.path.isdir(os.path.join(path, "amdgcn", "bitcode"))


def _fake_nvcc(bin_dir, executable=True):
    bin_dir.mkdir(parents=True, exist_ok=True)
    nvcc = bin_dir / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755 if executable else 0o644)
    return str(nvcc)


def test_nvcc_path_tries_path_then_the_cuda_homes(monkeypatch, tmp_path):
    """``PATH`` first, then ``<home>/bin/nvcc`` for $CUDA_HOME, $CUDA_PATH and /usr/local/cuda in
    that order; a file there that cannot be run does not count."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    default, cuda_path, cuda_home = tmp_path / "default", tmp_path / "cuda_path", tmp_path / "cuda_home"
    monkeypatch.setattr(toolchain, "_CUDA_HOMES", (str(default),))
    assert toolchain.nvcc_path() is None and not toolchain.have_nvcc()
    found = _fake_nvcc(default / "bin")
    assert toolchain.nvcc_path() == found and toolchain.have_nvcc()
    monkeypatch.setenv("CUDA_PATH", str(cuda_path))
    _fake_nvcc(cuda_path / "bin", executable=False)
    assert toolchain.nvcc_path() == found
    found = _fake_nvcc(cuda_path / "bin")
    assert toolchain.nvcc_path() == found
    monkeypatch.setenv("CUDA_HOME", str(cuda_home))
    found = _fake_nvcc(cuda_home / "bin")
    assert toolchain.nvcc_path() == found
    monkeypatch.setenv("PATH", str(tmp_path / "on_path"))
    found = _fake_nvcc(tmp_path / "on_path")
    assert toolchain.nvcc_path() == found


def test_nvcc_path_none_when_absent(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(toolchain, "_CUDA_HOMES", ())
    assert toolchain.nvcc_path() is None
    assert not toolchain.have_nvcc()


# --- build smoke tests: a tiny conv2d + relu + add module through the default pipeline ---------


def _tiny_module():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 16, 16), "float32"))
    w = relax.Var("w", relax.TensorType((8, 8, 3, 3), "float32"))
    y = relax.Var("y", relax.TensorType((1, 8, 16, 16), "float32"))
    with bb.function("main", [x, w, y]):
        with bb.dataflow():
            conv = bb.emit(relax.op.nn.conv2d(x, w, padding=1))
            out = bb.emit_output(relax.op.add(relax.op.nn.relu(conv), y))
        bb.emit_func_output(out)
    return bb.get()


def _build(target_dict):
    target = tvm.target.Target(target_dict)
    return tvm.compile(_tiny_module(), target=target, relax_pipeline=relax.get_default_pipeline(target))


@pytest.mark.parametrize("arch", CUDA_ARCHS)
def test_cuda_build(arch):
    # No toolchain needed: the module keeps CUDA source, compiled at load time on the GPU box.
    (cuda,) = device_modules(_build({"kind": "cuda", "arch": arch}), CUDA_KINDS)
    assert "fused_conv2d_relu_add" in cuda.inspect_source("")


@pytest.mark.skipif(not toolchain.have_nvcc(), reason="nvcc not found (CUDA toolkit absent)")
def test_cuda_source_through_ptxas():
    """The toolchain's nvcc compiles TVM's CUDA source; ptxas reports every kernel of it."""
    (cuda,) = device_modules(_build({"kind": "cuda", "arch": "sm_90"}), CUDA_KINDS)
    source = cuda.inspect_source("")
    report = ptxas.parse_ptxas(ptxas.ptxas_report(source, "sm_90"))
    kernels = [name for name in report if name.startswith("fused_conv2d_relu_add")]
    assert kernels and all(name in source for name in report), sorted(report)
    assert all(report[k]["arch"] == "sm_90" and report[k]["registers"] > 0 for k in kernels), report


@pytest.mark.skipif(not toolchain.have_rocm_toolchain(), reason=NEED_ROCM)
@pytest.mark.parametrize("mcpu", ROCM_ARCHS)
def test_rocm_build(mcpu):
    toolchain.configure_rocm()
    (hip,) = device_modules(_build({"kind": "rocm", "mcpu": mcpu}), ROCM_KINDS)
    asm = hip.inspect_source("asm")
    assert mcpu in asm and ".vgpr_count" in asm
