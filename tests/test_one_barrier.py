"""Tests for one barrier a K step in multi-stage ``cp.async`` loops (schedules/base/one_barrier.py).

CPU only, on the lowered TIR and the generated CUDA (and bench/gemm_model_check.py, which must not take a
one-barrier copy of a tile for the model's pick): a marked loop waits for its step's copies,
then one barrier, then issues the next copies and computes (two barriers unmarked); the wait
allows one copy group fewer in flight; the pipeline the kernels build with applies it, TVM's
default does not; a loop of another shape is left as it is; ptxas gives the same registers and
no spills. Whether it runs faster, and without races, is for the GPU (tile_sweep's
``one-barrier`` forms, compute-sanitizer).
"""

import dataclasses
import re

import pytest
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.script import tirx as T

import tvm_fusion_hw as hw
from tvm_fusion_hw.hardware import toolchain
from tvm_fusion_hw.kernel_build import lower
from tvm_fusion_hw.pipeline import fused_module
from tvm_fusion_hw.schedules.base import one_barrier
from tvm_fusion_hw.schedules.base.limits import gpu_limits
from tvm_fusion_hw.schedules.gemm import tiles as gemm_tiles
from tvm_fusion_hw.schedules.gemm.config import GemmConfig
from tvm_fusion_hw.schedules.gemm.rule import ImplicitGemm
from tir_checks import cuda_source, ptxas_kernels

H200 = "nvidia-h200"


@pytest.fixture(scope="module")
def matmul():
    """A batched matmul whose I, J and K no block or K step divides (predicated copies)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 200, 520), "float32"))
    w = relax.Var("w", relax.TensorType((520, 136), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.matmul(x, w)))
        bb.emit_func_output(out)
    funcs = fused_module(bb.get(), hw.target(H200), hw.fusion_pass(hw.target(H200)))
    (func,) = [f for f in funcs.functions.values() if isinstance(f, tirx.PrimFunc)]
    return func


def _tile(stages, shared_scope="shared", one=True):
    return gemm_tiles.GemmTile(thread_rows=16, thread_cols=16, micro_rows=4, micro_cols=4, depth_step=16, split_k=1,
                               prefetch=True, blocks=0, shared_bytes=0, registers_estimate=0,
                               blocks_per_multiprocessor=0, time_s=0.0, score=0.0, vector_width=1,
                               async_stages=stages, unroll_depth=True, shared_scope=shared_scope, one_barrier=one)


def _source(func, tile, pipeline=one_barrier.PIPELINE):
    target = hw.target(H200)
    with hw.pass_context(target), target:
        sch = ImplicitGemm().schedule_tile(func, target, tile)
    with tvm.transform.PassContext(opt_level=3), hw.pass_context(target), target:
        built = tvm.compile(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}),
                            target=target, tir_pipeline=pipeline)
    return cuda_source(built)


def _k_loop(source):
    """The body of the loop that commits copy groups: the pipeline's steady state."""
    for match in re.finditer(r"for \(int \w+ = 0; \w+ < \d+; \+\+\w+\) \{", source):
        depth, at = 1, match.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(source[at], 0)
            at += 1
        body = source[match.end():at - 1]
        if "commit_group" in body:  # the K loop: the prologue commits outside any int loop
            return body
    raise AssertionError("no loop commits cp.async groups")


@pytest.mark.parametrize("stages,scope", [(2, "shared"), (3, "shared"), (4, "shared.dyn")])
def test_a_marked_loop_waits_then_syncs_once_a_step(matmul, stages, scope):
    marked, unmarked = _k_loop(_source(matmul, _tile(stages, scope))), _k_loop(_source(matmul, _tile(stages, scope, False)))
    assert unmarked.count("__syncthreads()") == 2
    assert f"wait_group_{stages - 1}()" in unmarked
    assert marked.count("__syncthreads()") == 1
    # the wait for this step's copies (one group fewer in flight) and the barrier come first
    first = [line.strip() for line in marked.strip().splitlines()[:2]]
    assert first[0].endswith(f"wait_group_{stages - 2}();") and first[1] == "__syncthreads();"
    copy = re.search(r"ptx_cp_async_(?!wait|commit)", marked).start()
    assert marked.index("__syncthreads()") < copy < marked.index("commit_group")


def _pipelined_loop_syncs(func):
    """Barriers in the body of each innermost loop whose body commits ``cp.async`` groups (lowered
    TIR): the pipeline's steady state, not the loop around its prologue and drain."""
    def commits(loop):
        seq = loop.body.seq if isinstance(loop.body, tirx.SeqStmt) else [loop.body]
        return any(isinstance(s, tirx.AttrStmt) and s.attr_key == "async_commit_queue_scope" for s in seq)

    def walk(stmt, kind, found):
        tvm_ffi.structural_walk(stmt, [(kind, found.append)], order="post")
        return found

    pipelined = [loop for loop in walk(func.body, tirx.For, []) if commits(loop)]
    innermost = [loop for loop in pipelined
                 if not any(commits(inner) for inner in walk(loop.body, tirx.For, []))]
    return [sum("tvm_storage_sync" in e.script() for e in walk(loop.body, tirx.Evaluate, [])) for loop in innermost]


def test_the_kernel_lowering_applies_it_and_tvms_default_does_not(matmul):
    target = hw.target(H200)
    with hw.pass_context(target), target:
        sch = ImplicitGemm().schedule_tile(matmul, target, _tile(3))
        lowered = lower({"main": sch.mod["main"]}, target)
    (device,) = [f for funcs in lowered.devices.values() for f in funcs.values()]
    assert one_barrier.MARK not in device.script()
    assert _pipelined_loop_syncs(device) == [1]
    assert _k_loop(_source(matmul, _tile(3), pipeline="default")).count("__syncthreads()") == 2


def test_a_loop_of_another_shape_is_left_as_it_is():
    @T.prim_func(private=True)
    def func(a: T.Buffer((16,), "float32")):
        for i in T.serial(16, annotations={one_barrier.MARK: 1}):
            T.tvm_storage_sync("shared")
            a[i] = a[i] + T.float32(1)

    def loop_of(f):
        found = []
        tvm_ffi.structural_walk(f.body, [(tirx.For, found.append)], order="post")
        return found[0]

    rewritten = one_barrier.one_barrier_steps(func)
    assert one_barrier.MARK in loop_of(func).annotations and one_barrier.MARK not in loop_of(rewritten).annotations
    tvm.ir.assert_structural_equal(loop_of(rewritten).body, loop_of(func).body)


def test_one_barrier_is_opt_in_and_only_on_cp_async_tiles():
    target = hw.target(H200)
    limits = gpu_limits(target)
    problem = gemm_tiles.GemmProblem(1, 4096, 1024, 1024, 4, False, (False, True), (False, True))
    with hw.pass_context(target):
        config = ImplicitGemm().get_config(target)
    assert not GemmConfig().one_barrier_steps
    assert not any(t.one_barrier for t in gemm_tiles.rank_tiles(problem, limits, config))
    tiles = gemm_tiles.rank_tiles(problem, limits, dataclasses.replace(config, one_barrier_steps=True))
    assert any(t.one_barrier for t in tiles)
    assert all(t.one_barrier == (t.async_stages > 1) for t in tiles)
    assert "one barrier a step" in next(t for t in tiles if t.one_barrier).summary()


@pytest.mark.skipif(not toolchain.have_nvcc(), reason="nvcc not found")
def test_one_barrier_costs_no_registers_and_spills_nothing(matmul):
    kernels = [ptxas_kernels(_source(matmul, _tile(3, one=one))) for one in (False, True)]
    (before,), (after,) = (list(k.values()) for k in kernels)
    assert after.spill_store_bytes == 0 and after.spill_load_bytes == 0
    assert after.registers <= before.registers + 4


def test_the_model_check_never_picks_a_one_barrier_copy_of_a_tile():
    """A sweep's one-barrier form of a tile (the same choices otherwise, the same modelled time)
    is not what the ranking offers while the option is off: timed faster it is the fastest tile,
    never the model's pick."""
    from script_loader import BENCH, load_script  # pylint: disable=import-outside-toplevel

    check = load_script(BENCH / "gemm_model_check.py", "gemm_model_check")
    target = hw.target(H200)
    problem = gemm_tiles.GemmProblem(1, 4096, 1024, 1024, 4, False, (False, True), (False, True))
    with hw.pass_context(target):
        best = next(t for t in gemm_tiles.rank_tiles(problem, gpu_limits(target), ImplicitGemm().get_config(target))
                    if t.async_stages > 1)
    tile = dataclasses.asdict(best)
    # listed first: with equal modelled times, a check that took it as offered would pick it
    case = {"problem": dataclasses.asdict(problem), "variants": [{"name": "one-barrier1", "tile": {**tile, "one_barrier": True}, "us": 90.0},
                                             {"name": "default0", "tile": tile, "us": 100.0}]}
    fastest, pick = check.pick_against_fastest(case, H200)
    assert fastest[2]["name"] == "one-barrier1" and pick[2]["name"] == "default0"
