"""Line up the plans of several profiles: the same decision, the same kernel, and why they differ.

A decision is recognised on every profile by the first op of its producer and of its consumer
group (the labels grow as groups grow: ``conv2d+add -> relu`` is ``conv2d+...+relu (5 ops) ->
max_pool2d`` three merges later, but its first ops stay), not by its rule: a merge one profile
takes by the chain rule another refuses by the depth rule. Two decisions that came out
otherwise are explained by the test that flipped: each rule records the figure it tested and the
limit it tested it against (:data:`TESTS`), so the figure whose side of its limit changed between
the profiles is the one that made them differ. A kernel is the same on two profiles when it
computes exactly the same bindings.
"""

from __future__ import annotations

from collections.abc import Sequence

from tvm_fusion_hw.fusion.decisions import Decision

from .model import DecisionRow, KernelMatch, PlanView

#: (figure, limit, words, how a number reads): a rule passes when figure <= limit (the ridge
#: point: intensity below it is memory-bound). The limit is a figure of the decision, else the
#: plan's policy setting of that name.
TESTS: tuple[tuple[str, str, str, str], ...] = (
    ("occupancy_drop", "max_occupancy_drop", "occupancy drop", "percent"),
    ("fused_shared_bytes", "shared_bytes_per_block_limit", "shared memory per block", "KiB"),
    ("plan_registers_per_thread", "registers_per_thread_limit", "registers per thread (plan)", "count"),
    ("estimated_registers", "register_budget", "registers per thread (estimate) against the budget", "count"),
    ("intensity_flop_per_byte", "ridge_flop_per_byte", "arithmetic intensity against the ridge point", "flop/B"),
    ("break_even_ridge_flop_per_byte", "ridge_flop_per_byte",
     "break-even ridge of the fused and apart plans against the ridge point", "flop/B"),
    ("cost_fused_us", "cost_apart_us", "modelled time, fused against apart (us)", "count"),
    ("ops", "depth_cap", "ops against the depth cap", "count"),
)
#: the tests of an attention chain (``fusion/chain_rule.py``): its plan's fit and its grid in one wave
CHAIN_TESTS: tuple[tuple[str, str, str, str], ...] = (
    ("fused_shared_bytes", "shared_bytes_per_block_limit", "shared memory per block", "KiB"),
    ("plan_registers_per_thread", "registers_per_thread_limit", "registers per thread (plan)", "count"),
    ("plan_blocks", "blocks_per_wave", "the fused kernel's blocks against one wave of the GPU", "count"),
)


def first_op(label: str) -> str:
    """The first op of a group label (``conv2d+...+minimum (6 ops)`` -> ``conv2d``)."""
    return label.split(" (")[0].split("+")[0]


def _key(decision: Decision) -> tuple[str, str]:
    return first_op(decision.producer), first_op(decision.consumer)


def _keyed(decisions: Sequence[Decision]) -> dict[tuple, Decision]:
    """Decisions by (key, occurrence): the n-th decision with one key meets the n-th elsewhere."""
    seen: dict[tuple, int] = {}
    keyed = {}
    for decision in decisions:
        key = _key(decision)
        seen[key] = seen.get(key, -1) + 1
        keyed[key + (seen[key],)] = decision
    return keyed


def _number(value: float, unit: str) -> str:
    if unit == "percent":
        return f"{value:.0%}"
    if unit == "KiB":
        return f"{value / 1024:.1f} KiB"
    if unit == "flop/B":
        return f"{value:.2f} FLOP/B"
    return f"{value:g}"


def _figure(decision: Decision, plan: PlanView, name: str) -> float | None:
    value = decision.figures.get(name, plan.policy.get(name))
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _flipped(a: Decision, plan_a: PlanView, b: Decision, plan_b: PlanView) -> list[str]:
    """The tests that came out one way on ``a`` and the other on ``b``, in words."""
    out = []
    for figure, limit, words, unit in CHAIN_TESTS if a.figures.get("chain") else TESTS:
        values = [(_figure(d, p, figure), _figure(d, p, limit)) for d, p in ((a, plan_a), (b, plan_b))]
        if any(v is None or lim is None for v, lim in values):
            continue
        sides = [v <= lim for v, lim in values]
        if sides[0] != sides[1]:
            text = "; ".join(f"{p.label}: {_number(v, unit)} {'<=' if side else '>'} {_number(lim, unit)}"
                             for p, (v, lim), side in zip((plan_a, plan_b), values, sides))
            out.append(f"{words}: {text}")
    return out


def _changed_figures(a: Decision, b: Decision, limit: int = 3) -> list[str]:
    """Numeric figures the two decisions share whose values differ (by more than 1%)."""
    out = []
    for name, va in a.figures.items():
        vb = b.figures.get(name)
        if isinstance(va, bool) or not isinstance(va, (int, float)) or not isinstance(vb, (int, float)):
            continue
        if abs(va - vb) > 0.01 * max(abs(va), abs(vb), 1e-12):
            out.append(f"{name} {va:g} vs {vb:g}")
    return out[:limit]


def explain_difference(decisions: Sequence[Decision | None], plans: Sequence[PlanView]) -> str:
    """Why the profiles' versions of one decision differ from the first profile's, in words."""
    base = next((k for k, d in enumerate(decisions) if d is not None), 0)
    parts = []
    for k, decision in enumerate(decisions):
        if k == base:
            continue
        ref = decisions[base]
        if decision is None or ref is None:
            have = [p.label for p, d in zip(plans, decisions) if d is not None]
            parts.append(f"taken only on {', '.join(have)}: the groups it joins formed otherwise elsewhere")
            continue
        if (decision.fused, decision.staged) == (ref.fused, ref.staged):
            continue
        flipped = _flipped(ref, plans[base], decision, plans[k])
        if flipped:
            parts += flipped
        elif decision.figures.get("chain"):  # no plan on that target: the reason says why
            parts.append(f"{plans[k].label}: {decision.reason}")
        else:
            changed = _changed_figures(ref, decision)
            parts.append((f"figures that differ ({plans[base].label} vs {plans[k].label}): " + "; ".join(changed))
                         if changed else f"{plans[k].label}: {decision.reason}")
    return " | ".join(dict.fromkeys(parts))


def align_decisions(plans: Sequence[PlanView]) -> list[DecisionRow]:
    """Every decision of any plan, one row each, with each plan's version of it."""
    keyed = [_keyed(p.decisions) for p in plans]
    order: list[tuple] = []
    for table in keyed:
        order += [key for key in table if key not in order]
    rows = []
    for key in order:
        found = [table.get(key) for table in keyed]
        first = next(d for d in found if d is not None)
        verdicts = {(d.fused, d.staged) if d is not None else None for d in found}
        differs = len(verdicts) > 1
        rules = "/".join(dict.fromkeys(d.rule for d in found if d is not None))
        rows.append(DecisionRow(rules, first.producer, first.consumer, found, differs,
                                explain_difference(found, plans) if differs else ""))
    return rows


def align_kernels(plans: Sequence[PlanView]) -> list[KernelMatch]:
    """Every kernel of any plan by the bindings it computes, with each plan's kernel of exactly those."""
    tables = [{tuple(k.bindings): k for k in p.kernels} for p in plans]
    order: list[tuple] = []
    for table in tables:
        order += [key for key in table if key not in order]
    return [KernelMatch(key, [table.get(key) for table in tables]) for key in order]
