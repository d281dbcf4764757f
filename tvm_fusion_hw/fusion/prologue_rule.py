"""Light producers computed inside a contraction's operand loads: a GEMM prologue.

Stock FuseOps never fuses an element-wise op into the convolution or matmul that reads it (a
contraction only takes consumers), so a squeeze-and-excitation block's channel scale, ``x * s``
over the whole expanded tensor, runs as its own kernel: it writes ``x * s`` and the projecting
1x1 conv reads it back. :class:`GemmPrologueRule` merges such a producer into the contraction's
group where the contraction's schedule template plans a kernel that computes it inside its loads
(the policy's ``TemplatePlanners.prologues``), so that round trip is gone. The fused kernel pays
in its loads: every block that stages the operand recomputes the producer (a few instructions an
element), and a computed copy cannot be a ``cp.async`` copy, so the GEMM loses that prefetch
where the GPU has it. Which side wins follows the profile: the round trip costs bytes over the
profile's bandwidth, the lost prefetch and the extra work cost issue time on its SMs. Both plans
are costed as the complex-pair rule costs a pair (:mod:`.pair_cost`): the template's plan with the
prologue against its plan of the contraction alone plus the producer at its DRAM floor, each kernel
at least the least time a kernel took where the calibration measured one (a launch and its tail:
at batch 1 the producer's own kernel costs more than its bytes).

Copies that only move elements are prologues too (``layout_prologues``): attention's transposes
and reshapes around its batched matmuls, a squeeze, a slice. The loads read the copy's input
through the composed index (the template coalesces them along that buffer's contiguous axis), the
copy's kernel and its round trip go, and a copy that computes nothing keeps ``cp.async``; such a
pair is weighed with the copies' own measured calibration (``calibration_key(..., layout_prologue=
True)``), not the computed prologues'. A concatenation is declined by the template: choosing each
element among its inputs is a chain of compares the plan does not count. A producer that only
reshapes stays apart: TVM's ``RewriteDataflowReshape`` makes it a view of its input, so it has no
kernel and no round trip to save, and in the loads it only adds index arithmetic.
"""

from __future__ import annotations

from typing import Dict

from tvm.relax.analysis import has_reshape_pattern

from tvm_fusion_hw.plans import as_plan

from .decisions import Decision
from .graph import INJECTIVE
from .group_view import GroupView
from .memo import target_key
from .pair_cost import pair_cost
from .pair_rule import ComplexPairRule

#: the rule's name in decisions (and in the pipeline's refusals of kernels no template scheduled)
GEMM_PROLOGUE = "gemm-prologue"


class GemmPrologueRule:
    """Decides GEMM prologues for a :class:`~.policy.FusionPolicy`, with its complex-pair rule's
    profile, config, template planners and memo."""

    def __init__(self, pairs: ComplexPairRule):
        self.pairs = pairs

    def decide(self, producer: GroupView, consumer: GroupView, merged: GroupView, operand: int,
               figures: Dict[str, object]) -> Decision:
        """``producer`` (element-wise ops) computed in the loads of ``consumer``'s contraction,
        whose argument ``operand`` it makes (0: data or left matrix, 1: weights or right matrix)."""
        cfg, p, rule = self.pairs.config, self.pairs.profile, self.pairs
        anchor = consumer.anchor()
        kind = anchor.kind if anchor is not None else "?"
        figures.update({"producer_ops": list(producer.ops), "consumer_ops": list(consumer.ops),
                        "operand": operand})

        # a layout prologue moves elements (a transpose, a reshape, a slice): the loads read
        # through the composed index
        light = "layout" if any(info.pattern == INJECTIVE for info in producer.infos) else "element-wise"
        # one that only moves elements keeps cp.async and computes nothing: its own calibration
        moves_only = all(info.pattern == INJECTIVE for info in producer.infos)

        def decision(fused: bool, reason: str) -> Decision:
            return Decision(GEMM_PROLOGUE, producer.label, consumer.label, fused,
                            f"{light} -> {kind}: {reason}", figures)

        refusal = next((r for r in cfg.refused_pairs if (tuple(r.producer_ops), tuple(r.consumer_ops))
                        == (tuple(producer.ops), tuple(consumer.ops))), None)
        if refusal is not None:
            return decision(False, f"apart: {refusal.reason}")
        if not cfg.gemm_prologues:
            return decision(False, "GEMM prologues disabled (gemm_prologues=False): two kernels")
        if all(info.func is not None and has_reshape_pattern(info.func) for info in producer.infos):
            # RewriteDataflowReshape turns a lone reshape into a view: apart it costs nothing
            return decision(False, "apart: the producer only reshapes, and the build makes a lone reshape a view of "
                                   "its input (no kernel, no bytes moved); in the loads it would only add index "
                                   "arithmetic")
        if sum(1 for info in consumer.infos if info.is_complex) > 1:
            # an attention chain: its template (not the contraction's) schedules the group and
            # loads its operands itself; a prologue there would leave the kernel to dlight
            return decision(False, "the consumer is a chain of complex ops, whose template takes no prologue: "
                                   "two kernels")
        entry = rule.planners.prologues.get(kind)
        if entry is None:
            return decision(False, f"no schedule template computes a producer in a {kind}'s loads: two kernels")
        funcs = tuple(info.func for info in producer.infos)
        if anchor.func is None or any(f is None for f in funcs):
            return decision(False, "a part has no PrimFunc to plan from: two kernels")
        target = rule.gpu_target()
        plan = rule.memo.get(("prologue", entry, operand, target_key(target)), (*funcs, anchor.func),
                             lambda: as_plan(entry(funcs, anchor.func, operand, target)))
        if plan is None:
            return decision(False, f"the {kind}'s template cannot compute it in its loads on {target.kind.name}: "
                                   "two kernels")
        if plan.registers_per_thread > p.max_registers_per_thread:
            return decision(False, f"the {plan.template} template's plan needs more than "
                                   f"{p.max_registers_per_thread} regs/thread: two kernels")
        alone = rule.part_plan(consumer)
        round_trip = merged.cost.saved_bytes - producer.cost.saved_bytes - consumer.cost.saved_bytes
        figures.update({"figures_from": f"{plan.template} template's plan", "plan_summary": plan.summary,
                        "plan_time_us": round(plan.time_s * 1e6, 2), "round_trip_bytes": round_trip,
                        "alone_time_us": None if alone is None else round(alone.time_s * 1e6, 2)})
        saves = f"saves the producer's output round trip ({round_trip / 1e6:.2f} MB written and read back)"
        planned = f"the {plan.template} template's plan with the prologue ({plan.summary or plan.describe()})"
        cost = None if merged.cost.symbolic or not cfg.pair_cost or alone is None else pair_cost(
            p, plan, merged.cost.compulsory_bytes,
            [(None, producer.cost.flops, producer.cost.compulsory_bytes),
             (alone, consumer.cost.flops, consumer.cost.compulsory_bytes)], layout_prologue=moves_only)
        if cost is not None:  # the template's model was measured: weigh both plans' times
            figures.update(cost.figures())
            if not cost.fuses:
                return decision(False, f"apart: {cost.reason(p.ridge_point_flop_per_byte)}")
            return decision(True, f"one kernel, {planned}; {cost.reason(p.ridge_point_flop_per_byte)}")
        return decision(True, f"one kernel, {planned}; {saves}")
