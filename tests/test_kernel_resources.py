"""Tests for tvm_fusion_hw.feedback.kernel_resources and its readers (ptxas, amdgpu_metadata,
kernel_launches): per-kernel registers, spills, shared memory, launch.

The parsers are checked on captured outputs (ptxas -v of CUDA 13.0 and of CUDA 12, the AMDGPU
metadata and the host LLVM IR of a TVM 0.27 gfx942 build); real builds of the rules'
micro-graphs (eltwise5, conv_relu_pool) are measured for sm_90 (H200) and gfx942 (MI300X).
Tests that compile with nvcc skip without it; ROCm builds skip without the ROCm toolchain.
"""

import dataclasses
import re
import struct
import warnings

import pytest
import tvm
from tvm.script import tirx as T

import tvm_fusion_hw as hw
from tvm_fusion_hw.feedback import amdgpu_metadata, kernel_launches, ptxas
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.feedback import kernel_resources as kres
from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.feedback.kernel_resources import KernelResources, measure, occupancy_of
from tvm_fusion_hw.models import build

NEED_NVCC = pytest.mark.skipif(not toolchain.have_nvcc(), reason="nvcc (CUDA toolkit) not found")
NEED_CUDA_COMPILER = pytest.mark.skipif(ptxas.cuda_compiler() is None, reason="neither nvcc nor NVRTC found")
#: The CUDA compilers usable here: nvcc, and NVRTC (TVM's default loader) where cuda-bindings works.
CUDA_COMPILERS = [c for c, ok in (("nvcc", toolchain.have_nvcc()), ("nvrtc", ptxas.have_nvrtc())) if ok] or ["nvcc"]
NEED_ROCM = pytest.mark.skipif(not toolchain.have_rocm_toolchain(),
                               reason="ROCm toolchain absent (lld-22, rocm-device-libs)")

# ---- captured outputs -------------------------------------------------------------------------
PTXAS_CUDA13 = """\
ptxas warning : Local memory used for function 'spill_kernel', size of stack frame: 408 bytes
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'smem_kernel' for 'sm_90'
ptxas info    : Function properties for smem_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 14 registers, used 1 barriers, 4096 bytes smem
ptxas info    : Compile time = 3.173 ms
ptxas info    : Compiling entry function 'spill_kernel' for 'sm_90'
ptxas info    : Function properties for spill_kernel
    408 bytes stack frame, 836 bytes spill stores, 672 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 408 bytes cumulative stack size
ptxas info    : Compile time = 18.694 ms
"""
# CUDA 12 style: cmem, no barrier count, and a non-entry function's properties in between.
PTXAS_CUDA12 = """\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for __internal_trig_reduction_slowpathd
    40 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'default_function_kernel' for 'sm_80'
ptxas info    : Function properties for default_function_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, 2048 bytes smem, 392 bytes cmem[0]
"""

AMDGPU_ASM = """\
\t.amdgcn_target "amdgcn-amd-amdhsa-hcc-gfx942"
\t.amdhsa_kernel fused_conv2d_add_relu_kernel
\t\t.amdhsa_group_segment_fixed_size 6912
\t.end_amdhsa_kernel
\t.amdgpu_metadata
---
amdhsa.kernels:
  - .agpr_count:     0
    .args:
      - .actual_access:  write_only
        .address_space:  global
        .name:           compute_intermediate
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
    .group_segment_fixed_size: 6912
    .kernarg_segment_align: 8
    .kernarg_segment_size: 32
    .language:       OpenCL C
    .language_version:
      - 2
      - 0
    .max_flat_workgroup_size: 256
    .name:           fused_conv2d_add_relu_kernel
    .private_segment_fixed_size: 0
    .sgpr_count:     22
    .sgpr_spill_count: 0
    .symbol:         fused_conv2d_add_relu_kernel.kd
    .uses_dynamic_stack: false
    .vgpr_count:     118
    .vgpr_spill_count: 0
    .wavefront_size: 64
  - .agpr_count:     4
    .args:
      - .name:           lv3
        .size:           8
    .group_segment_fixed_size: 0
    .max_flat_workgroup_size: 1024
    .name:           max_pool2d_kernel
    .private_segment_fixed_size: 96
    .sgpr_count:     14
    .sgpr_spill_count: 2
    .symbol:         max_pool2d_kernel.kd
    .vgpr_count:     132
    .vgpr_spill_count: 5
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa-hcc-gfx942
amdhsa.version:
  - 1
  - 2
...

\t.end_amdgpu_metadata
"""

# Host code of a launch of max_pool2d_kernel (2 buffers, blockIdx.x = 196, threadIdx.x = 1024).
HOST_IR = """\
define internal i32 @max_pool2d(ptr %lv3, ptr %pool_max) {
entry:
  %stack_ffi_any = alloca [5 x %0], align 8
  %2 = getelementptr inbounds nuw i8, ptr %stack_ffi_any, i64 8, !dbg !108
  store ptr %lv3, ptr %2, align 8, !dbg !108
  %6 = getelementptr inbounds nuw i8, ptr %stack_ffi_any, i64 24, !dbg !108
  store ptr %pool_max, ptr %6, align 8, !dbg !108
  %7 = getelementptr inbounds nuw i8, ptr %stack_ffi_any, i64 32, !dbg !108
  store i32 1, ptr %7, align 8, !dbg !108
  %9 = getelementptr inbounds nuw i8, ptr %stack_ffi_any, i64 40, !dbg !108
  store i64 196, ptr %9, align 8, !dbg !108
  %12 = getelementptr inbounds nuw i8, ptr %stack_ffi_any, i64 56, !dbg !108
  store i64 1024, ptr %12, align 8, !dbg !108
  %13 = getelementptr inbounds nuw i8, ptr %stack_ffi_any, i64 64, !dbg !108
  %14 = load ptr, ptr @__TVMFFIFunctionCall, align 8, !dbg !108, !tbaa !45
  br i1 %17, label %call_end, label %common.ret, !dbg !108, !prof !17

call_end:                                         ; preds = %entry
  %18 = load ptr, ptr @.tvm_func.max_pool2d_kernel, align 8, !dbg !108
  %19 = tail call i32 %14(ptr %18, ptr nonnull %stack_ffi_any, i32 4, ptr nonnull %13), !dbg !108
  br label %common.ret, !dbg !108
}

define internal i32 @dyn(ptr %a, i64 %n) {
entry:
  %3 = getelementptr inbounds nuw i8, ptr %stack, i64 24, !dbg !1
  store i64 %n, ptr %3, align 8, !dbg !1
  %4 = getelementptr inbounds nuw i8, ptr %stack, i64 40, !dbg !1
  store i64 256, ptr %4, align 8, !dbg !1
  %5 = getelementptr inbounds nuw i8, ptr %stack, i64 56, !dbg !1
  store i64 2048, ptr %5, align 8, !dbg !1
  %8 = load ptr, ptr @.tvm_func.dyn_kernel, align 8, !dbg !1
  %9 = tail call i32 %7(ptr %8, ptr nonnull %stack, i32 4, ptr nonnull %6), !dbg !1
  ret i32 0
}
"""


def _function_info(name, nargs, tags):
    """A FunctionInfo entry as TVM 0.27 serializes it inside a device module."""
    def string(s):
        return struct.pack("<Q", len(s)) + s.encode()
    return (string(name) + string(name) + struct.pack("<Q", nargs) + b"\x03@\x01\x00" * nargs
            + struct.pack("<Q", len(tags)) + b"".join(string(t) for t in tags)
            + struct.pack("<Q", nargs) + b"\x00" * 4 * nargs)


# ---- parsers ----------------------------------------------------------------------------------
def test_parse_ptxas_cuda13():
    got = ptxas.parse_ptxas(PTXAS_CUDA13)
    assert got["smem_kernel"] == {"arch": "sm_90", "registers": 14, "spill_store_bytes": 0,
                                  "spill_load_bytes": 0, "stack_frame_bytes": 0, "shared_bytes": 4096,
                                  "barriers": 1}
    assert got["spill_kernel"]["registers"] == 32
    assert (got["spill_kernel"]["spill_store_bytes"], got["spill_kernel"]["spill_load_bytes"],
            got["spill_kernel"]["stack_frame_bytes"]) == (836, 672, 408)


def test_parse_ptxas_cuda12_skips_non_entry_functions():
    got = ptxas.parse_ptxas(PTXAS_CUDA12)
    assert list(got) == ["default_function_kernel"]
    assert got["default_function_kernel"]["registers"] == 30
    assert got["default_function_kernel"]["shared_bytes"] == 2048
    assert got["default_function_kernel"]["stack_frame_bytes"] == 0


def test_parse_launch_bounds_and_names():
    src = ('extern "C" __global__ void __launch_bounds__(1024) k0(float* a);\n'
           'extern "C" __global__ void __launch_bounds__(1024) k0(float* a) {}\n'
           'extern "C" __global__ void __launch_bounds__(128, 2) k1(float* a) {}\n'
           'extern "C" __global__ void k2(float* a) {}\n')
    assert kres.parse_launch_bounds(src) == {"k0": 1024, "k1": 128}
    assert kres.cuda_kernel_names(src) == ["k0", "k1", "k2"]


def test_parse_amdgpu_metadata_skips_args():
    got = amdgpu_metadata.parse_amdgpu_metadata(AMDGPU_ASM)
    assert [k["name"] for k in got] == ["fused_conv2d_add_relu_kernel", "max_pool2d_kernel"]
    assert got[0] == {"target": "gfx942", "agpr_count": 0, "group_segment_fixed_size": 6912,
                      "max_flat_workgroup_size": 256, "name": "fused_conv2d_add_relu_kernel",
                      "private_segment_fixed_size": 0, "sgpr_count": 22, "sgpr_spill_count": 0,
                      "uses_dynamic_stack": "false", "vgpr_count": 118, "vgpr_spill_count": 0,
                      "wavefront_size": 64}
    pool = kres.measure_amdgpu_asm(AMDGPU_ASM)[1]
    assert (pool.registers, pool.accumulation_registers, pool.scalar_registers) == (132, 4, 14)
    assert (pool.spilled_registers, pool.spill_store_bytes, pool.stack_frame_bytes) == (7, 20, 96)
    assert pool.spills and pool.source == "amdgpu-metadata" and pool.arch == "gfx942"
    assert pool.threads_per_block is None and pool.max_threads_per_block == 1024


def test_parse_host_launches():
    got = kernel_launches.parse_host_launches(HOST_IR)
    assert got["max_pool2d_kernel"] == [None, None, 196, 1024]
    assert got["dyn_kernel"] == [None, None, 256, 2048]


def test_parse_launch_tags_and_launch():
    blob = (b"\x00" * 40 + b"cuda" + _function_info("max_pool2d_kernel", 2, ["blockIdx.x", "threadIdx.x"])
            + _function_info("dyn_kernel", 1, ["blockIdx.x", "threadIdx.x", "tirx.use_dyn_shared_memory"]))
    tags = kernel_launches.parse_launch_tags(blob, ["max_pool2d_kernel", "dyn_kernel", "absent"])
    assert tags == {"max_pool2d_kernel": ["blockIdx.x", "threadIdx.x"],
                    "dyn_kernel": ["blockIdx.x", "threadIdx.x", "tirx.use_dyn_shared_memory"]}
    calls = kernel_launches.parse_host_launches(HOST_IR)
    pool = kernel_launches._launch_of(tags["max_pool2d_kernel"], calls["max_pool2d_kernel"])
    assert (pool.threads_per_block, pool.grid_blocks, pool.dynamic_shared_bytes) == (1024, 196, 0)
    dyn = kernel_launches._launch_of(tags["dyn_kernel"], [None, 8, 256, 2048])
    assert (dyn.threads_per_block, dyn.grid_blocks, dyn.dynamic_shared_bytes) == (256, 8, 2048)
    unknown = kernel_launches._launch_of(["blockIdx.x", "threadIdx.x"], [None, None, 128])
    assert (unknown.grid_blocks, unknown.threads_per_block) == (None, 128)


def test_occupancy_of():
    kr = KernelResources("k", registers=64, spill_store_bytes=0, spill_load_bytes=0, shared_bytes=0,
                         threads_per_block=256, source="ptxas")
    assert occupancy_of(kr, hw.load_profile("nvidia-h200")).occupancy == 0.5
    amd = dataclasses.replace(kr, registers=129, scalar_registers=20, source="amdgpu-metadata")
    assert occupancy_of(amd, hw.load_profile("amd-mi300x")).warps_per_multiprocessor == 12
    bound_only = dataclasses.replace(kr, threads_per_block=None, max_threads_per_block=1024)
    assert occupancy_of(bound_only, hw.load_profile("nvidia-h200")).blocks_per_multiprocessor == 1
    with pytest.raises(FusionHWError, match="threads per block unknown"):
        occupancy_of(dataclasses.replace(kr, threads_per_block=None), hw.load_profile("nvidia-h200"))


def test_nvcc_command_mirrors_tvm():
    cmd = ptxas.nvcc_command("nvcc", "sm_90a", "k.cu", "k.cubin")
    assert cmd[:5] == ["nvcc", "--cubin", "-O3", "-gencode", "arch=compute_90a,code=sm_90a"]
    assert "--use_fast_math" in cmd and "-w" in cmd
    options = next(c for c in cmd if c.startswith("--ptxas-options="))
    assert options.split("=", 1)[1].split(",")[:3] == ["-v", "--register-usage-level=10",
                                                     "--warn-on-local-memory-usage"]


# ---- nvcc: spills and local memory ------------------------------------------------------------
SPILL_CU = r"""
// __launch_bounds__(1024, 2): two 1024-thread blocks per SM leave 32 registers a thread, and 64
// accumulators live across the loop do not fit: ptxas spills them to local memory.
extern "C" __global__ void __launch_bounds__(1024, 2) spill_kernel(float* __restrict__ out,
                                                                   const float* __restrict__ in, int n) {
  float acc[64];
#pragma unroll
  for (int j = 0; j < 64; ++j) acc[j] = 0.f;
  for (int i = 0; i < n; ++i) {
    float x = in[i * 1024 + threadIdx.x];
#pragma unroll
    for (int j = 0; j < 64; ++j) acc[j] = acc[j] * x + in[i * 64 + j];
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 64; ++j) s += acc[j] * (j + 1);
  out[blockIdx.x * 1024 + threadIdx.x] = s;
}
// A local array indexed at run time lives in local memory (stack frame), whatever the registers.
extern "C" __global__ void __launch_bounds__(128) local_array_kernel(float* __restrict__ out,
    const float* __restrict__ in, const int* __restrict__ idx) {
  float buf[256];
  int t = blockIdx.x * 128 + threadIdx.x;
  for (int i = 0; i < 256; ++i) buf[i] = in[t * 256 + i];
  float acc = 0.f;
  for (int i = 0; i < 64; ++i) acc += buf[idx[(t + i) & 1023] & 255];
  out[t] = acc;
}
extern "C" __global__ void __launch_bounds__(256) smem_kernel(float* out, const float* in) {
  __shared__ float tile[1024];
  extern __shared__ float dyn[];
  tile[threadIdx.x] = in[threadIdx.x];
  dyn[threadIdx.x] = in[threadIdx.x + 1];
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) & 255] + dyn[(threadIdx.x + 3) & 255];
}
"""


@pytest.mark.parametrize("compiler", CUDA_COMPILERS)
def test_spills_are_measured(compiler):
    if compiler == "nvcc" and not toolchain.have_nvcc():
        pytest.skip("nvcc (CUDA toolkit) not found")
    got = {k.name: k for k in kres.measure_cuda_source(SPILL_CU, "sm_90", compiler=compiler)}
    assert list(got) == ["spill_kernel", "local_array_kernel", "smem_kernel"]
    spill = got["spill_kernel"]
    assert spill.registers <= 32 and spill.spill_store_bytes > 0 and spill.spill_load_bytes > 0
    assert spill.spills and spill.threads_per_block == 1024 and spill.source == "ptxas"
    assert spill.compiler == compiler
    local = got["local_array_kernel"]
    assert local.stack_frame_bytes >= 1024 and local.spills
    smem = got["smem_kernel"]
    assert (smem.static_shared_bytes, smem.barriers, smem.spills) == (4096, 1, False)
    assert smem.dynamic_shared_bytes is None  # extern __shared__: size is a launch argument
    occ = occupancy_of(spill, hw.load_profile("nvidia-h200"))
    assert occ.blocks_per_multiprocessor == 2 and occ.occupancy == 1.0


@NEED_NVCC
def test_nvcc_errors_are_reported():
    with pytest.raises(FusionHWError, match="nvcc failed"):
        kres.measure_cuda_source("this is not CUDA", "sm_90")


# ---- real builds --------------------------------------------------------------------------------
MODELS = ("eltwise5", "conv_relu_pool")


def _build(model, profile):
    if hw.load_profile(profile).vendor == "amd":
        toolchain.configure_rocm()
    mod = import_onnx(build(model, batch=1))
    target = hw.target(profile)
    return tvm.compile(mod, target=target, relax_pipeline=hw.get_pipeline(target)), target


@pytest.fixture(scope="module")
def cuda_builds():
    return {m: _build(m, "nvidia-h200") for m in MODELS}


@pytest.fixture(scope="module")
def rocm_builds():
    return {m: _build(m, "amd-mi300x") for m in MODELS}


def _launched(ex):
    names = set()
    for host in kernel_launches._host_modules(ex):
        names |= set(kernel_launches.parse_host_launches(host.inspect_source("ll")))
    return {n for n in names if not n.startswith("__tvm")}  # __tvm_set_device is no kernel


@NEED_CUDA_COMPILER
@pytest.mark.parametrize("model", MODELS)
def test_measure_cuda_build(cuda_builds, model):
    ex, target = cuda_builds[model]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the nvcc-instead-of-NVRTC note
        kernels = measure(ex, target)
    (cuda,) = kernel_launches.device_modules(ex, ["cuda"])
    # every kernel of the module is measured, and every launched one
    assert [k.name for k in kernels] == kres.cuda_kernel_names(cuda.inspect_source("cuda"))
    assert _launched(ex) <= {k.name for k in kernels}
    profile = hw.load_profile("nvidia-h200")
    for k in kernels:
        assert 1 <= k.registers <= 255 and k.source == "ptxas" and k.arch == "sm_90"
        assert k.compiler == ptxas.cuda_compiler()
        assert k.threads_per_block and k.threads_per_block == k.max_threads_per_block
        assert k.grid_blocks and k.grid_blocks >= 1
        assert k.dynamic_shared_bytes == 0 and not k.spills
        assert 0 < occupancy_of(k, profile).occupancy <= 1


@NEED_ROCM
@pytest.mark.parametrize("model", MODELS)
def test_measure_rocm_build(rocm_builds, model):
    ex, target = rocm_builds[model]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernels = measure(ex, target)
    (hip,) = kernel_launches.device_modules(ex, ["hip", "rocm"])
    declared = re.findall(r"^\s*\.amdhsa_kernel (\S+)", hip.inspect_source("asm"), re.M)
    assert [k.name for k in kernels] == declared
    assert _launched(ex) <= {k.name for k in kernels}
    profile = hw.load_profile("amd-mi300x")
    for k in kernels:
        assert 1 <= k.registers <= 512 and k.source == "amdgpu-metadata" and k.arch == "gfx942"
        assert k.threads_per_block and k.grid_blocks and k.scalar_registers >= 1
        assert 0 < occupancy_of(k, profile).occupancy <= 1
        # A code object compiled for fewer threads than launched is reported (TVM 0.27 without a
        # ROCm device compiles for at most 256).
        over = k.threads_per_block > k.max_threads_per_block
        assert over == any(k.name in str(w.message) for w in caught)


@NEED_CUDA_COMPILER
@pytest.mark.filterwarnings("ignore:TVM loads CUDA with NVRTC")
def test_dynamic_shared_memory_from_the_host():
    @T.prim_func
    def dyn(a: T.Buffer((4096,), "float32"), b: T.Buffer((4096,), "float32")):
        for bx in T.thread_binding(16, thread="blockIdx.x"):
            for tx in T.thread_binding(256, thread="threadIdx.x"):
                s = T.decl_buffer((256,), "float32", scope="shared.dyn")
                s[tx] = a[bx * 256 + tx]
                b[bx * 256 + tx] = s[255 - tx]

    target = hw.target("nvidia-h200")
    (k,) = measure(tvm.compile(tvm.IRModule({"main": dyn}), target=target), target)
    assert (k.static_shared_bytes, k.dynamic_shared_bytes, k.shared_bytes) == (0, 1024, 1024)
    assert (k.threads_per_block, k.grid_blocks, k.barriers) == (256, 16, 1)


def test_missing_compilers_warn_and_return_nothing(monkeypatch, cuda_builds):
    ex, target = cuda_builds["eltwise5"]
    monkeypatch.setattr(toolchain, "nvcc_path", lambda: None)
    monkeypatch.setattr(ptxas, "have_nvrtc", lambda: False)
    with pytest.warns(UserWarning, match="needs nvcc or NVRTC"):
        assert measure(ex, target) == []


@NEED_NVCC
def test_nvcc_instead_of_nvrtc_is_said(monkeypatch, cuda_builds):
    ex, target = cuda_builds["eltwise5"]
    monkeypatch.setattr(ptxas, "have_nvrtc", lambda: False)
    monkeypatch.delenv("TVM_CUDA_COMPILE_MODE", raising=False)
    with pytest.warns(UserWarning, match="TVM loads CUDA with NVRTC"):
        assert [k.compiler for k in measure(ex, target)] == ["nvcc"]
    monkeypatch.setenv("TVM_CUDA_COMPILE_MODE", "nvcc")  # TVM loads with nvcc: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [k.compiler for k in measure(ex, target)] == ["nvcc"]


@pytest.mark.skipif(not (ptxas.have_nvrtc() and toolchain.have_nvcc()), reason="needs NVRTC and nvcc")
def test_nvrtc_and_nvcc_measure_the_same_kernels(cuda_builds):
    ex, _ = cuda_builds["conv_relu_pool"]
    (cuda,) = kernel_launches.device_modules(ex, ["cuda"])
    source = cuda.inspect_source("cuda")
    by_nvrtc = kres.measure_cuda_source(source, "sm_90", compiler="nvrtc")
    by_nvcc = kres.measure_cuda_source(source, "sm_90", compiler="nvcc")
    assert [k.name for k in by_nvrtc] == [k.name for k in by_nvcc]
    assert {k.compiler for k in by_nvrtc} == {"nvrtc"} and {k.compiler for k in by_nvcc} == {"nvcc"}


def test_unsupported_target_kind():
    with pytest.raises(FusionHWError, match="no kernel measurements"):
        measure(None, tvm.target.Target({"kind": "llvm"}))
