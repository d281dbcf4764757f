"""Rule 3 of the fusion policy (:mod:`.policy` states the rules): two complex ops in one kernel.

:class:`ComplexPairRule` decides a conv + pool or depthwise + pointwise pair for a
:class:`~.policy.FusionPolicy`: on the schedule template's own plan of the fused kernel where the
template gives one (the policy's :class:`~tvm_fusion_hw.plans.TemplatePlanners`), else on the
policy's tile model of the intermediate in shared memory, each against the occupancy of the parts run apart. Every refusal says why, and
a staged pair what its global round trip costs. A planned pair that fits is then weighed by
:mod:`.pair_cost` where its template's model was measured: the fused plan's time against the two
parts' on the profile's roofline, so the pair fuses only where the round trip it saves costs more.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence, Tuple

from tvm import tirx

from tvm_fusion_hw.hardware.occupancy import Occupancy, occupancy
from tvm_fusion_hw.hardware.target import target as make_target
from tvm_fusion_hw.plans import KernelPlan, TemplatePlanners, ask_pair_template

from .analysis import (
    CONTRACTIONS,
    DEPTHWISE_CONV,
    POINTWISE_CONV,
    WINDOW_REDUCE,
    FuncInfo,
)
from .decisions import Decision
from .group_view import GroupView
from .memo import ExactIRMemo, target_key
from .pair_cost import pair_cost


class ComplexPairRule:
    """The complex-pair rule of one :class:`~.policy.FusionPolicy`: its profile, its config (a
    ``PolicyConfig``), what the schedule templates plan, and the policy's register estimate.

    The templates' answers (pair plans, part plans) are remembered in ``memo`` for the same
    PrimFuncs, target and PassContext (:mod:`.memo`): a part is in several pairs, and a pipeline
    that stages a pair asks again. A new memo when none is given."""

    def __init__(self, profile, config, planners: TemplatePlanners,
                 estimate_registers: Callable[[Sequence[FuncInfo]], int], memo: Optional[ExactIRMemo] = None):
        self.profile = profile
        self.config = config
        self.planners = planners
        self.estimate_registers = estimate_registers
        self.memo = ExactIRMemo() if memo is None else memo
        self._gpu_target = None

    def decide(self, producer: GroupView, consumer: GroupView, merged: GroupView,
               figures: Dict[str, object]) -> Decision:
        """Two complex ops in one kernel, run by a schedule template that takes the pair.

        A template that plans (an entry of ``planners.pairs``, see :mod:`tvm_fusion_hw.plans`) gives
        the fused kernel's threads, registers and shared memory per block: the fit and occupancy checks use
        those. A template that only checks (or a pair with no template yet) is judged on the
        policy's own tile model, the intermediate tile in shared memory. Either way a pair that
        does not fit stays two groups: staged, one global round trip between them. ``figures``
        are the policy's figures of the merged group; the decision adds its own.
        """
        cfg = self.config
        first, second = producer.anchor(), consumer.anchor()
        pair = f"{first.kind if first else '?'} -> {second.kind if second else '?'}"
        figures.update({"producer_ops": list(producer.ops), "consumer_ops": list(consumer.ops)})
        refusal = next((r for r in cfg.refused_pairs if (tuple(r.producer_ops), tuple(r.consumer_ops))
                        == (tuple(producer.ops), tuple(consumer.ops))), None)
        if refusal is not None:
            return Decision("complex-pair", producer.label, consumer.label, False,
                            f"{pair}: staged: {refusal.reason}: two kernels", figures, staged=True)
        if not cfg.fuse_complex_pairs:
            return Decision("complex-pair", producer.label, consumer.label, False,
                            f"{pair}: complex pairs disabled (fuse_complex_pairs=False)", figures)
        pair_key = None if first is None or second is None else \
            f"{first.kind}->{'window' if second.kind == WINDOW_REDUCE else second.kind}"
        takes, plan, planner = True, None, False
        if pair_key is not None and pair_key in self.pair_templates():
            takes, plan, planner = self._ask_template(pair_key, first, second)
        if plan is not None:
            return self._planned_pair(pair, plan, producer, consumer, merged, figures)
        if planner:  # a template that plans found no way to run this pair
            return Decision("complex-pair", producer.label, consumer.label, False,
                            f"{pair}: the {pair_key} template cannot run this pair (a pattern or shape "
                            f"outside its limits, or no tile fits the target): two kernels", figures)
        return self._modelled_pair(pair, pair_key, takes, producer, consumer, merged, figures)

    def _planned_pair(self, pair: str, plan, producer: GroupView, consumer: GroupView, merged: GroupView,
                      figures: Dict[str, object]) -> Decision:
        """The fit and occupancy checks on the template's own plan of the fused kernel.

        The unfused side is what would run instead: each part as the package's template for it
        plans it (the conv as ImplicitGemm does), else the policy's estimate (the pool, dlight's).
        """
        cfg, p = self.config, self.profile
        fused = occupancy(p, plan.threads_per_block, plan.registers_per_thread, plan.shared_bytes)
        part_plans = [self.part_plan(producer), self.part_plan(consumer)]
        parts = [self._part_occupancy(g, pl) for g, pl in zip((producer, consumer), part_plans)]
        baseline, source = min(parts, key=lambda part: part[0].warps_per_multiprocessor)
        # From whole warps, so that a drop of exactly the limit is not lost to rounding.
        drop = round(1 - fused.warps_per_multiprocessor / max(baseline.warps_per_multiprocessor, 1), 6)
        round_trip = self._round_trip_bytes(producer, consumer, merged)
        figures.update(plan_figures(plan, p, fused))
        figures.update({
            "unfused_occupancy": round(baseline.occupancy, 3),
            "unfused_occupancy_from": source,
            "occupancy_drop": round(drop, 3),
            "round_trip_bytes": round_trip,
        })
        planned = f"the {plan.template} template's plan ({plan.describe()})"
        staged = (f": two kernels, one global round trip of the intermediate "
                  f"({round_trip / 1e6:.2f} MB written and read back)")
        if plan.shared_bytes > p.shared_memory_bytes_per_block:
            return Decision("complex-pair", producer.label, consumer.label, False,
                            f"{pair}: staged: {planned} needs {plan.shared_bytes / 1024:.1f} KiB, more than "
                            f"{p.shared_memory_bytes_per_block / 1024:.0f} KiB shared memory per block{staged}",
                            figures, staged=True)
        if plan.registers_per_thread > p.max_registers_per_thread:
            return Decision("complex-pair", producer.label, consumer.label, False,
                            f"{pair}: staged: {planned} needs more than {p.max_registers_per_thread} "
                            f"regs/thread{staged}", figures, staged=True)
        if drop > cfg.max_occupancy_drop:
            return Decision("complex-pair", producer.label, consumer.label, False,
                            f"{pair}: staged: {planned}: occupancy {_warps(baseline, source)} -> "
                            f"{_warps(fused, 'fused')} drops {drop:.0%} > {cfg.max_occupancy_drop:.0%}{staged}",
                            figures, staged=True)
        fits = (f"{planned} fits {p.shared_memory_bytes_per_block / 1024:.0f} KiB shared/block; occupancy "
                f"{_warps(baseline, source)} -> {_warps(fused, 'fused')} (limit {cfg.max_occupancy_drop:.0%} drop)")
        cost = None if merged.cost.symbolic or not cfg.pair_cost else pair_cost(
            p, plan, merged.cost.compulsory_bytes,
            [(pl, g.cost.flops, g.cost.compulsory_bytes) for g, pl in zip((producer, consumer), part_plans)])
        if cost is not None:  # the template's model was measured: weigh both plans' times
            figures.update(cost.figures())
            ridge = p.ridge_point_flop_per_byte
            if not cost.fuses:
                return Decision("complex-pair", producer.label, consumer.label, False,
                                f"{pair}: apart: {fits}, but {cost.reason(ridge)}", figures)
            return Decision("complex-pair", producer.label, consumer.label, True,
                            f"{pair}: one kernel, {fits}; {cost.reason(ridge)}", figures)
        return Decision("complex-pair", producer.label, consumer.label, True,
                        f"{pair}: one kernel, {fits}; saves {merged.cost.saved_bytes / 1e6:.2f} MB", figures)

    def _modelled_pair(self, pair: str, pair_key: Optional[str], takes: bool, producer: GroupView,
                       consumer: GroupView, merged: GroupView, figures: Dict[str, object]) -> Decision:
        """The policy's own tile model: for a pair whose template gives no plan."""
        cfg, p = self.config, self.profile
        first, second = producer.anchor(), consumer.anchor()
        tile_bytes = self._intermediate_tile_bytes(first, second)
        if tile_bytes is None:
            return Decision("complex-pair", producer.label, consumer.label, False,
                            f"{pair}: no tile model keeps this intermediate on chip", figures)
        fused_smem = tile_bytes + self._stage_bytes(producer.infos + consumer.infos)
        fused_regs = self.estimate_registers(merged.infos)
        fused = occupancy(p, cfg.block_threads, fused_regs, fused_smem)
        apart = [self._occupancy_of(producer), self._occupancy_of(consumer)]
        baseline = min(apart, key=lambda o: o.occupancy)
        # From whole warps, so that a drop of exactly the limit is not lost to rounding.
        kept = fused.warps_per_multiprocessor / max(baseline.warps_per_multiprocessor, 1)
        drop = round(1 - kept, 6)
        round_trip = self._round_trip_bytes(producer, consumer, merged)
        figures.update({
            "figures_from": "policy tile model",
            "intermediate_tile_bytes": tile_bytes,
            "fused_shared_bytes": fused_smem,
            "shared_bytes_per_block_limit": p.shared_memory_bytes_per_block,
            "fused_occupancy": round(fused.occupancy, 3),
            "unfused_occupancy": round(baseline.occupancy, 3),
            "occupancy_drop": round(drop, 3),
            "round_trip_bytes": round_trip,
        })
        staged = (f" (policy tile model): two kernels, one global round trip of the intermediate "
                  f"({round_trip / 1e6:.2f} MB written and read back)")
        if fused_smem > p.shared_memory_bytes_per_block:
            return Decision("complex-pair", producer.label, consumer.label, False,
                            f"{pair}: staged: tile {fused_smem / 1024:.1f} KiB exceeds "
                            f"{p.shared_memory_bytes_per_block / 1024:.0f} KiB shared memory per block{staged}",
                            figures, staged=True)
        if drop > cfg.max_occupancy_drop:
            return Decision("complex-pair", producer.label, consumer.label, False,
                            f"{pair}: staged: occupancy {baseline} -> {fused} drops {drop:.0%} "
                            f"> {cfg.max_occupancy_drop:.0%}{staged}", figures, staged=True)
        if pair_key not in self.pair_templates():
            return Decision("complex-pair", producer.label, consumer.label, False,
                            f"{pair}: the {tile_bytes / 1024:.1f} KiB tile would fit and keep occupancy, "
                            f"but no schedule template runs {pair_key} as one kernel yet "
                            f"(dlight would stage it through global memory)", figures)
        if not takes:
            return Decision("complex-pair", producer.label, consumer.label, False,
                            f"{pair}: the {pair_key} template does not take this pair (a pattern or "
                            f"shape outside its limits)", figures)
        return Decision("complex-pair", producer.label, consumer.label, True,
                        f"{pair}: {tile_bytes / 1024:.1f} KiB tile in shared memory saves "
                        f"{merged.cost.saved_bytes / 1e6:.2f} MB; occupancy {baseline.occupancy:.0%} -> "
                        f"{fused.occupancy:.0%} (limit {cfg.max_occupancy_drop:.0%} drop; policy tile model)",
                        figures)

    # ---- the templates' answers, the parts run apart, the policy's tile model ---------------
    def pair_templates(self) -> Tuple[str, ...]:
        """Complex pairs a schedule template runs as one kernel (the knob, or the templates' default)."""
        if self.config.pair_templates is not None:
            return tuple(self.config.pair_templates)
        return self.planners.fused_by_default

    def gpu_target(self):
        """The profile's GPU target, as the schedule templates see it when they plan."""
        if self._gpu_target is None:
            self._gpu_target = make_target(self.profile)
        return self._gpu_target

    def _ask_template(self, pair_key: str, first: FuncInfo, second: FuncInfo):
        """``(takes, plan, planner)`` from the pair's entry in the policy's planners on the two
        unfused PrimFuncs (see :mod:`tvm_fusion_hw.plans`); ``(True, None, False)`` without one."""
        entry = self.planners.pairs.get(pair_key)
        if entry is None:
            return True, None, False
        if first.func is None or second.func is None:
            return False, None, False
        target = self.gpu_target()
        return self.memo.get(("pair", entry, target_key(target)), (first.func, second.func),
                             lambda: ask_pair_template(entry, first.func, second.func, target))

    def part_plan(self, group: GroupView) -> Optional[KernelPlan]:
        """The plan of the package's template that would schedule a pair's part's anchor alone, from
        its tile ranking (``planners.kernel_estimate``): the part's anchor is a figure to compare
        with, not a kernel that is built, and scheduling it only to check its tile cost a depthwise
        conv 50-100 ms."""
        anchor = group.anchor()
        if anchor is None:
            return None
        target, estimate = self.gpu_target(), self.planners.kernel_estimate
        if not isinstance(anchor.func, tirx.PrimFunc):
            return estimate(anchor.func, target)
        return self.memo.get(("kernel", estimate, target_key(target)), (anchor.func,),
                             lambda: estimate(anchor.func, target))

    def _part_occupancy(self, group: GroupView, plan: Optional[KernelPlan]) -> Tuple[Occupancy, str]:
        """A pair's part left as its own kernel: its template's ``plan``, else the policy's
        estimate; and which of the two it is."""
        if plan is None:
            return self._occupancy_of(group), "unfused, policy estimate"
        return (occupancy(self.profile, plan.threads_per_block, plan.registers_per_thread, plan.shared_bytes),
                f"unfused, {plan.template} plan")

    @staticmethod
    def _round_trip_bytes(producer: GroupView, consumer: GroupView, merged: GroupView) -> int:
        """Bytes of the intermediate written to and read back from global memory when staged."""
        return merged.cost.saved_bytes - producer.cost.saved_bytes - consumer.cost.saved_bytes

    def _tile_pixels(self) -> int:
        return self.config.tile_warps * self.profile.warp_size

    def _intermediate_tile_bytes(self, first: Optional[FuncInfo], second: Optional[FuncInfo]) -> Optional[int]:
        """Bytes of the producer's output one block of the fused template keeps on chip."""
        if first is None or second is None or first.kind not in CONTRACTIONS:
            return None
        if second.kind == WINDOW_REDUCE:
            # Every pooled pixel reads its window of conv outputs, for a tile of channels.
            window = 1
            for extent in second.reduction_extents:
                window *= extent
            return self._tile_pixels() * window * self.config.pool_channel_tile * first.element_bytes
        if first.kind == DEPTHWISE_CONV and second.kind == POINTWISE_CONV:
            # The pointwise conv reads every channel of each pixel: all channels stay on chip.
            channels = 1
            for extent in second.reduction_extents:
                channels *= extent
            return self._tile_pixels() * channels * first.element_bytes
        return None

    def _stage_bytes(self, infos: Sequence[FuncInfo]) -> int:
        return self.config.contraction_stage_bytes if any(
            i.kind in CONTRACTIONS and i.kind != DEPTHWISE_CONV for i in infos) else 0

    def _occupancy_of(self, group: GroupView) -> Occupancy:
        return occupancy(self.profile, self.config.block_threads,
                         self.estimate_registers(group.infos), self._stage_bytes(group.infos))


def plan_figures(plan: KernelPlan, profile, fused: Occupancy) -> Dict[str, object]:
    """A template's plan of a fused kernel, against the profile's per-block limits, as a
    decision's figures."""
    return {
        "figures_from": f"{plan.template} template's plan",
        "plan_threads_per_block": plan.threads_per_block,
        "plan_registers_per_thread": plan.registers_per_thread,
        "plan_shared_bytes": plan.shared_bytes,
        "plan_blocks": plan.blocks,
        "fused_shared_bytes": plan.shared_bytes,
        "shared_bytes_per_block_limit": profile.shared_memory_bytes_per_block,
        "registers_per_thread_limit": profile.max_registers_per_thread,
        "fused_occupancy": round(fused.occupancy, 3),
    }


def _warps(occ: Occupancy, what: str) -> str:
    """``50% (16 warps, limited by registers; unfused, ImplicitGemm plan)``."""
    return f"{occ.occupancy:.0%} ({occ.warps_per_multiprocessor} warps, limited by {occ.limiter}; {what})"
