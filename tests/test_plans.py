"""Tests for tvm_fusion_hw/plans.py: the protocol between the fusion policy and the schedule
templates (a pair template is a plain check or a planner; a plan is a KernelPlan or a rule's
tile). How the policy decides with the answers is tested in test_policy.py."""

from types import MappingProxyType, SimpleNamespace

import pytest

from tvm_fusion_hw.plans import (NO_TEMPLATES, KernelPlan, TemplatePlanners, as_plan, ask_pair_template,
                                 plans_with_target)


def test_ask_pair_template_tells_checks_from_planners():
    plan = KernelPlan("P", 128, 64, 1024)
    assert not plans_with_target(lambda producer, consumer: True)
    assert plans_with_target(lambda producer, consumer, target: None)
    assert plans_with_target(lambda producer, consumer, *, target=None: None)
    assert ask_pair_template(lambda p, c: True, None, None, "t") == (True, None, False)
    assert ask_pair_template(lambda p, c: 0, None, None, "t") == (False, None, False)
    assert ask_pair_template(lambda p, c: plan, None, None, "t") == (True, plan, True)
    assert ask_pair_template(lambda p, c, target: plan, None, None, "t") == (True, plan, True)
    assert ask_pair_template(lambda p, c, target: None, None, None, "t") == (False, None, True)
    assert ask_pair_template(lambda *args: len(args) == 3, None, None, "t") == (True, None, False)


def test_a_planner_is_asked_with_the_target():
    asked = []
    ask_pair_template(lambda p, c, target: asked.append((p, c, target)), "producer", "consumer", "t")
    ask_pair_template(lambda p, c: asked.append((p, c)), "producer", "consumer", "t")
    assert asked == [("producer", "consumer", "t"), ("producer", "consumer")]


@pytest.mark.parametrize("answer, expected", [
    (KernelPlan("P", 128, 64, 1024), KernelPlan("P", 128, 64, 1024)),
    (SimpleNamespace(threads=256, registers_estimate=32, shared_bytes=4096, blocks=392),
     KernelPlan("Tile", 256, 32, 4096, 392)),
    (SimpleNamespace(threads=64, registers_estimate=40, shared_bytes=0, summary=lambda: "4x4"),
     KernelPlan("Tile", 64, 40, 0, 0, "4x4")),
    (True, None),
    (False, None),
    (None, None),
    (SimpleNamespace(threads=256, shared_bytes=4096), None),  # no register estimate: no plan
])
def test_as_plan_takes_kernel_plans_and_rule_tiles(answer, expected):
    assert as_plan(answer, "Tile" if isinstance(answer, SimpleNamespace) else "") == expected


def test_template_planners_are_frozen_and_no_templates_is_empty():
    pairs = {"conv->window": lambda p, c: True}
    planners = TemplatePlanners(pairs=pairs, fused_by_default=["conv->window"])
    pairs["other"] = lambda p, c: True  # the caller's dict stays the caller's
    assert list(planners.pairs) == ["conv->window"] and isinstance(planners.pairs, MappingProxyType)
    assert planners.fused_by_default == ("conv->window",)
    with pytest.raises(TypeError):
        planners.pairs["x"] = None  # type: ignore[index]
    assert not NO_TEMPLATES.pairs and NO_TEMPLATES.fused_by_default == ()
    assert NO_TEMPLATES.kernel_plan(None, None) is None
