"""A template's search bounds changed for one build (schedules/base/config_changes.py) and the
bundle variants that use it (``--variant NAME:MODEL:RULE.FIELD=VALUE``)."""

import re

import pytest
from tvm import te

import tvm_fusion_hw as hw
from tvm_fusion_hw.bundle.variants import parse_variant, pipeline_knobs, rule_config_changes
from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.schedules.base.config_changes import config_changes
from tvm_fusion_hw.schedules.conv_pool.rule import ConvPool
from tvm_fusion_hw.schedules.gemm.rule import ImplicitGemm

H200 = "nvidia-h200"


def _long_k_matmul():
    """64 x 64 outputs over K = 8192: few blocks, so the tile model splits K."""
    a = te.placeholder((64, 8192), name="A")
    b = te.placeholder((8192, 64), name="B")
    k = te.reduce_axis((0, 8192), name="k")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return te.create_prim_func([a, b, c])


def test_changes_hold_within_the_block_for_the_named_rule_only():
    target = hw.target(H200)
    default = ImplicitGemm().get_config(target)
    with config_changes({"ImplicitGemm": {"max_split_k": 1, "long_step_slowdown": 0.3}}):
        changed = ImplicitGemm().get_config(target)
        assert (changed.max_split_k, changed.long_step_slowdown) == (1, 0.3)
        assert changed.async_copy == default.async_copy  # the target's part is kept
        assert ConvPool().get_config(target) == ConvPool().get_config(hw.target(H200))
        with config_changes({"ImplicitGemm": {"max_split_k": 2}}):  # nested: merged, inner wins
            inner = ImplicitGemm().get_config(target)
            assert (inner.max_split_k, inner.long_step_slowdown) == (2, 0.3)
        assert ImplicitGemm().get_config(target).max_split_k == 1
    assert ImplicitGemm().get_config(target) == default
    with pytest.raises(ZeroDivisionError), config_changes({"ImplicitGemm": {"max_split_k": 1}}):
        raise ZeroDivisionError
    assert ImplicitGemm().get_config(target) == default


def test_a_changed_bound_changes_the_plan():
    target = hw.target(H200)
    func = _long_k_matmul()
    with target:
        _, tile, _ = ImplicitGemm().schedule_best(func, target)
        assert tile.split_k > 1
        with config_changes({"ImplicitGemm": {"max_split_k": 1}}):
            _, unsplit, _ = ImplicitGemm().schedule_best(func, target)
    assert unsplit.split_k == 1


def test_an_unknown_field_is_named():
    with config_changes({"ImplicitGemm": {"no_such_bound": 1}}), \
            pytest.raises(FusionHWError, match="ImplicitGemm.no_such_bound: not a field of GemmConfig"):
        ImplicitGemm().get_config(hw.target(H200))


def test_variant_rule_knobs():
    spec = parse_variant("steps:corpus:resnet50:ImplicitGemm.long_step_slowdown=0.3,"
                         "ImplicitGemm.async_stages=2+3,ImplicitGemm.dynamic_shared_memory=on,max_depth=4")
    assert spec.knobs == {"ImplicitGemm.long_step_slowdown": 0.3, "ImplicitGemm.async_stages": [2, 3],
                          "ImplicitGemm.dynamic_shared_memory": True, "max_depth": 4}
    assert pipeline_knobs(spec) == {"max_depth": 4}
    assert rule_config_changes(spec) == {"ImplicitGemm": {"long_step_slowdown": 0.3, "async_stages": (2, 3),
                                                          "dynamic_shared_memory": True}}


def test_variant_shape_knobs():
    """Fields of shapes take ``AxB`` parts, also where their default is empty (wide thread tiles)."""
    spec = parse_variant("wide:corpus:deit_tiny:ImplicitGemm.wide_micro_shapes=8x16+16x8,"
                         "ImplicitGemm.thread_shapes=16x8,ImplicitGemm.prefetch_overhead_steps=8")
    assert rule_config_changes(spec) == {"ImplicitGemm": {"wide_micro_shapes": ((8, 16), (16, 8)),
                                                          "thread_shapes": ((16, 8),),
                                                          "prefetch_overhead_steps": 8}}
    with config_changes(rule_config_changes(spec)):
        config = ImplicitGemm().get_config(hw.target(H200))
    assert config.wide_micro_shapes == ((8, 16), (16, 8)) and config.thread_shapes == ((16, 8),)


@pytest.mark.parametrize("spec, message", [
    ("a:m:Gemm.max_split_k=1", "unknown schedule rule(s) Gemm"),
    ("a:m:ImplicitGemm.split=1", "ImplicitGemm.Config has no field 'split'"),
    ("a:m:ImplicitGemm.thread_shapes=16", "thread_shapes='16', expected shapes such as 8x16 joined by '+'"),
    ("a:m:ImplicitGemm.max_split_k=many", "max_split_k='many', expected int"),
    ("a:m:ImplicitGemm.async_stages=2+x", "expected ints joined by '+'"),
])
def test_bad_rule_knob_is_one_line_error(spec, message):
    with pytest.raises(FusionHWError, match=re.escape(message)) as err:
        parse_variant(spec)
    assert "\n" not in str(err.value)


def test_gemm_rankings_are_kept_per_config_until_the_caches_are_cleared(monkeypatch):
    """The GEMM ranking is remembered by problem, limits and config values: a changed bound is
    ranked anew, the same one is not, and ``schedules.clear_caches`` forgets them."""
    from tvm_fusion_hw import schedules
    from tvm_fusion_hw.schedules.base.limits import gpu_limits
    from tvm_fusion_hw.schedules.base.ranking_cache import RememberedRanking
    from tvm_fusion_hw.schedules.gemm import tiles as gemm_tiles

    target = hw.target(H200)
    limits = gpu_limits(target)
    problem = gemm_tiles.GemmProblem(1, 197, 768, 3072, 4, False, (False, False), (True, True))
    computed = []
    rank = gemm_tiles._rank  # pylint: disable=protected-access
    monkeypatch.setattr(gemm_tiles, "_RANKED", RememberedRanking(
        lambda *args: computed.append(1) or rank(*args), maxsize=16))
    config = ImplicitGemm().get_config(target)
    first = gemm_tiles.rank_tiles(problem, limits, config)
    assert gemm_tiles.rank_tiles(problem, limits, ImplicitGemm().get_config(target)) == first
    assert len(computed) == 1
    with config_changes({"ImplicitGemm": {"long_step_slowdown": 0.3}}):
        slowed = gemm_tiles.rank_tiles(problem, limits, ImplicitGemm().get_config(target))
    assert len(computed) == 2 and [t.time_s for t in slowed] != [t.time_s for t in first]
    schedules.clear_caches()
    assert gemm_tiles.rank_tiles(problem, limits, config) == first and len(computed) == 3
