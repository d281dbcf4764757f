"""Tests for schedules/base/unchecked.py: TVM's schedule primitives without their Python argument
checks while a template schedules.

CPU only. Checked: inside a block a primitive no longer raises the type checker's error on a wrong
argument, and after the outermost of nested blocks (or an exception in one) it does again; the
environment switch keeps the checks; and the templates schedule the same kernels either way
(ResNet-50's and MobileNetV2's at batch 1, every template that takes one).
"""

import pytest
import tvm_ffi
from tvm import s_tir, te

import tvm_fusion_hw as hw
from tvm_fusion_hw.schedules import default_rules
from tvm_fusion_hw.schedules.base.unchecked import unchecked_schedule_calls
from tir_checks import fused_funcs


def _copy():
    a = te.placeholder((8,), name="a")
    return te.create_prim_func([a, te.compute((8,), lambda i: a[i], name="b")])


def _checker_error(sch: s_tir.Schedule):
    """The message of the error a wrong argument type raises, or None if none is raised."""
    try:
        sch.get_sblock(3.5)  # a name is a str
    except Exception as error:  # pylint: disable=broad-except
        return str(error)
    return None


def _checked(message) -> bool:
    return message is not None and message.startswith('In "Schedule.get_sblock"')


def test_a_block_drops_the_checks_and_the_outermost_restores_them():
    sch = s_tir.Schedule(_copy())
    assert _checked(_checker_error(sch))
    with unchecked_schedule_calls():
        assert not _checked(_checker_error(sch))
        with unchecked_schedule_calls():
            assert not _checked(_checker_error(sch))
        assert not _checked(_checker_error(sch))  # the outer block still runs
    assert _checked(_checker_error(sch))
    with pytest.raises(KeyError):
        with unchecked_schedule_calls():
            raise KeyError("a failure inside the block")
    assert _checked(_checker_error(sch))


def test_the_environment_keeps_the_checks(monkeypatch):
    monkeypatch.setenv("TVM_FUSION_HW_CHECK_SCHEDULE_TYPES", "1")
    with unchecked_schedule_calls():
        assert _checked(_checker_error(s_tir.Schedule(_copy())))


@pytest.mark.parametrize("model", ["resnet50", "mobilenet_v2"])
def test_the_templates_schedule_the_same_kernels_either_way(model, monkeypatch):
    target = hw.target("nvidia-h200")
    funcs = fused_funcs(model, 1, target)

    def scheduled():
        out = {}
        with hw.pass_context(target), target:
            for name, func in funcs.items():
                for rule in default_rules():
                    sch = rule.apply(func, target, False)
                    if sch is not None:
                        out[name] = (type(rule).__name__, sch.mod["main"])
                        break
        return out

    unchecked = scheduled()
    monkeypatch.setenv("TVM_FUSION_HW_CHECK_SCHEDULE_TYPES", "1")
    checked = scheduled()
    assert len(unchecked) >= 10 and unchecked.keys() == checked.keys()
    for name, (rule, func) in checked.items():
        assert unchecked[name][0] == rule, name
        assert tvm_ffi.structural_equal(unchecked[name][1], func), name
