"""The fusion rules, made relative to a hardware profile.

One class, :class:`FusionPolicy`, answers "may this producer group and this consumer group run as
one kernel on this GPU?" and says why (compare PyTorch Inductor's ``choices.py``: ``can_fuse`` in
one overridable class, thresholds in one config, a logged reason for every refusal). The rules,
from ../shared/fusion-rules.md:

1. Arithmetic intensity against the profile's ridge point: memory-bound chains fuse; compute-bound
   groups take an epilogue only within the register budget ("fuse cautiously").
2. Register pressure: a group's estimated registers per thread must stay within the budget that
   keeps :attr:`PolicyConfig.target_occupancy`; that budget also caps the fusion depth.
3. Shared memory: two complex ops (conv then pool, depthwise then pointwise) fuse only when a
   schedule template runs the pair, the fused kernel fits the profile's shared memory per block
   and registers per thread, and it keeps at least (1 - :attr:`PolicyConfig.max_occupancy_drop`) of
   the unfused kernels' occupancy; where the template's model was measured, the fused plan must
   also beat the two kernels apart on the profile's roofline (:mod:`.pair_cost`). The figures are the template's own plan where it gives one
   (:mod:`tvm_fusion_hw.plans`: threads, registers and shared memory per block, against the unfused
   parts as their templates plan them), else the policy's tile model (the intermediate tile in
   shared memory). A pair that does not fit is staged: two kernels, one global round trip. This
   rule lives in :mod:`.pair_rule`; :meth:`FusionPolicy.complex_pair` hands pairs to it. Attention's
   three complex ops (scores, softmax, ``. V``) are decided alike by :mod:`.chain_rule`, and an
   element-wise producer computed inside a contraction's operand loads by :mod:`.prologue_rule`.
4. Feedback: a group that measured badly when built (it spilled, or lost more than
   ``max_occupancy_drop`` of its parts' occupancy; see :mod:`tvm_fusion_hw.feedback`) is listed in
   :attr:`PolicyConfig.split_groups`, and no group may then hold more than half of its ops.

The register and tile figures here are estimates of what the schedule templates will do; a
template that plans is asked instead, so that the policy's reasons state the kernel's figures.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, Optional, Sequence, Tuple

import tvm

from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.hardware.occupancy import register_budget
from tvm_fusion_hw.hardware.profile import HardwareProfile
from tvm_fusion_hw.plans import NO_TEMPLATES, TemplatePlanners

from .analysis import CONTRACTIONS, ELEMENTWISE, PROJECTION, WINDOW_REDUCE, FuncInfo
from .chain_rule import AttentionChainRule
from .decisions import Decision
from .group_view import GroupView
from .memo import ExactIRMemo
from .pair_rule import ComplexPairRule
from .prologue_rule import GemmPrologueRule


@dataclasses.dataclass(frozen=True)
class GroupSplit:
    """A fused group that measured badly once built, and must be split (staged) next time.

    ``members`` are the binding names of the group's operators (tuple projections left out): the
    key that finds the same group again, the partition being deterministic for the same module.
    """

    members: Tuple[str, ...]
    #: the measurements behind the split, for the decision's reason
    reason: str = ""
    figures: Tuple[Tuple[str, object], ...] = ()

    @property
    def ops(self) -> int:
        return len(self.members)

    @property
    def most_ops(self) -> int:
        """Ops of this group one group may still hold: half, rounded up (5 ops: 3 + 2)."""
        return (self.ops + 1) // 2


@dataclasses.dataclass(frozen=True)
class PairRefusal:
    """A complex pair whose fused kernel its template could not schedule: keep the two apart.

    ``producer_ops`` and ``consumer_ops`` are the binding names of the two groups' operators as the
    pair's decision recorded them (``figures["producer_ops"]``, ``figures["consumer_ops"]``).
    """

    producer_ops: Tuple[str, ...]
    consumer_ops: Tuple[str, ...]
    reason: str = ""


#: ``PolicyConfig.winograd``: decide on the profile, rewrite every eligible convolution, or none
WINOGRAD_MODES = ("auto", "always", "off")
#: ``PolicyConfig.winograd_tile``: the output tiles whose matrices schedules/winograd/transforms.py has
WINOGRAD_TILES = (2, 4)


@dataclasses.dataclass(frozen=True)
class PolicyConfig:  # pylint: disable=too-many-instance-attributes
    """Thresholds and model constants of the rules. Every one is a keyword of the pass."""

    #: occupancy a kernel needs to hide memory latency; sets the register budget per thread
    target_occupancy: float = 0.5
    #: the rules file: a fusion that drops occupancy by more than this is split
    max_occupancy_drop: float = 0.20
    #: registers every kernel spends on indices, loop counters and pointers
    base_registers: int = 16
    #: registers one more fused element-wise op costs (an operand, a temporary, address math)
    registers_per_fused_op: int = 4
    #: per-thread accumulator and operand registers of a contraction template (4x4 tile + operands)
    contraction_tile_registers: int = 24
    #: per-thread registers of a reduction (partial result, index)
    reduction_tile_registers: int = 4
    #: threads per block of the kernels the policy models itself
    block_threads: int = 256
    #: the tile model of a complex pair whose template gives no plan: its block covers this many
    #: warps' worth of output pixels ...
    tile_warps: int = 2
    #: ... and, for a conv + pool, this many output channels
    pool_channel_tile: int = 32
    #: shared memory a contraction stages its operand tiles in ((64 + 64) x 16 floats)
    contraction_stage_bytes: int = 8192
    #: fuse complex pairs (conv+pool, depthwise+pointwise) at all
    fuse_complex_pairs: bool = True
    #: the complex pairs ("conv->window", "depthwise_conv->pointwise_conv") a schedule template
    #: runs as one kernel; None: the templates' own default (``TemplatePlanners.fused_by_default``).
    #: Other pairs stay apart.
    pair_templates: Optional[Tuple[str, ...]] = None
    #: weigh a pair that fits by both plans' modelled times on the profile (fusion/pair_cost.py,
    #: for templates whose model was measured); False fuses every pair that fits, e.g. to measure
    #: the fused kernel where the model says it loses
    pair_cost: bool = True
    #: compute element-wise producers of a contraction's operand inside its loads where its template
    #: plans it (fusion/prologue_rule.py: an SE block's scale in the projecting conv); stock never does
    gemm_prologues: bool = True
    #: GEMM prologues may also be injective producers (attention's transposes and reshapes, a
    #: squeeze, a slice), read through the composed index, and a split read only by matmuls is cut
    #: into slices (split_slices.py); measured in bench/results/2026-12-05-h200-layout-prologues/
    layout_prologues: bool = True
    #: compute 3x3 stride-1 convolutions by Winograd where the FLOPs it saves outweigh the bytes and
    #: kernels it adds on the profile ("auto"), always ("always", to measure it) or never ("off");
    #: the pipeline's WinogradConv2d pass reads it (tvm_fusion_hw/winograd_conv.py)
    winograd: str = "auto"
    #: Winograd's output tile, F(m x m, 3 x 3): 4 (a quarter of the direct FLOPs) or 2
    winograd_tile: int = 4
    #: let an epilogue take ops TVM annotates injective when the TIR shows them element-wise in
    #: the epilogue's value (inference batch_norm); stock FuseOps stops at them
    injective_epilogues: bool = True
    #: upper bound on ops per group (the stock PassContext key relax.FuseOps.max_depth also bounds it)
    max_depth: int = 256
    #: groups the register feedback (tvm_fusion_hw.feedback) measured and split: none may re-form
    split_groups: Tuple[GroupSplit, ...] = ()
    #: complex pairs whose fused kernel a template failed to schedule (the pipeline sets these
    #: and rebuilds): staged as two kernels
    refused_pairs: Tuple[PairRefusal, ...] = ()

    def __post_init__(self):
        if not 0 < self.target_occupancy <= 1:
            raise FusionHWError(f"target_occupancy must be in (0, 1], got {self.target_occupancy}")
        if not 0 <= self.max_occupancy_drop < 1:
            raise FusionHWError(f"max_occupancy_drop must be in [0, 1), got {self.max_occupancy_drop}")
        if self.max_depth < 1:
            raise FusionHWError(f"max_depth must be at least 1, got {self.max_depth}")
        if self.winograd not in WINOGRAD_MODES:
            raise FusionHWError(f"winograd must be one of {', '.join(WINOGRAD_MODES)}, got {self.winograd!r}")
        if self.winograd_tile not in WINOGRAD_TILES:
            raise FusionHWError(f"winograd_tile must be one of {WINOGRAD_TILES}, got {self.winograd_tile!r}")
        if any(not isinstance(g, GroupSplit) or g.ops < 2 for g in self.split_groups):
            raise FusionHWError("split_groups must hold GroupSplit entries of at least 2 ops")


class FusionPolicy:
    """The fusion rules on one hardware profile."""

    def __init__(self, profile: HardwareProfile, config: Optional[PolicyConfig] = None,
                 planners: TemplatePlanners = NO_TEMPLATES, memo: Optional[ExactIRMemo] = None):
        self.profile = profile
        self.config = config or PolicyConfig()
        self.planners = planners  # what the schedule templates plan (tvm_fusion_hw.plans)
        self.register_budget = register_budget(profile, self.config.target_occupancy)
        # rule 3; ``memo`` remembers the templates' plans for the same PrimFuncs (.memo)
        self.pairs = ComplexPairRule(profile, self.config, planners, self.estimate_registers, memo)
        self.chains = AttentionChainRule(self.pairs)  # rule 3 for attention's three complex ops
        self.prologues = GemmPrologueRule(self.pairs)  # element-wise producers in a contraction's loads
        self.depth_cap = min(
            self.config.max_depth,
            max(1, (self.register_budget - self.config.base_registers) // self.config.registers_per_fused_op),
        )

    # ---- estimates ------------------------------------------------------------------------
    def estimate_registers(self, infos: Sequence[FuncInfo]) -> int:
        """Registers per thread of ``infos`` fused: base + the anchor's tile + live values."""
        cfg = self.config
        tile = 0
        live = 0
        for info in infos:
            if info.kind == PROJECTION:
                continue
            if info.kind in CONTRACTIONS:
                tile = max(tile, cfg.contraction_tile_registers)
            elif info.kind != ELEMENTWISE:
                tile = max(tile, cfg.reduction_tile_registers)
            else:
                live += cfg.registers_per_fused_op * info.element_bytes // 4
        return cfg.base_registers + tile + live

    def budgets(self) -> Dict[str, object]:
        """The per-profile limits, for the report."""
        p = self.profile
        return {
            "profile": p.summary(),
            "ridge point (FLOP/B)": round(p.ridge_point_flop_per_byte, 2),
            "register budget (regs/thread at "
            f"{self.config.target_occupancy:.0%} occupancy)": self.register_budget,
            "fusion depth cap (ops)": self.depth_cap,
            "shared memory per block (B)": p.shared_memory_bytes_per_block,
        }

    # ---- rules ----------------------------------------------------------------------------
    def _figures(self, merged: GroupView) -> Dict[str, object]:
        return {
            "intensity_flop_per_byte": None if merged.cost.symbolic else round(merged.cost.intensity, 3),
            "ridge_flop_per_byte": round(self.profile.ridge_point_flop_per_byte, 3),
            "saved_bytes": merged.cost.saved_bytes,
            "estimated_registers": self.estimate_registers(merged.infos),
            "register_budget": self.register_budget,
            "ops": merged.cost.members,
            "depth_cap": self.depth_cap,
        }

    def _register_check(self, rule: str, producer: GroupView, consumer: GroupView, merged: GroupView,
                        why: str) -> Decision:
        """Shared by the chain, epilogue and prologue rules: depth cap, then register budget."""
        figures = self._figures(merged)
        regs = figures["estimated_registers"]
        if merged.cost.members > self.depth_cap:
            return Decision("depth", producer.label, consumer.label, False,
                            f"{merged.cost.members} ops exceed the depth cap {self.depth_cap} "
                            f"(register budget {self.register_budget}/thread)", figures)
        if regs > self.register_budget:
            return Decision(rule, producer.label, consumer.label, False,
                            f"~{regs} regs/thread exceed the budget {self.register_budget} that keeps "
                            f"{self.config.target_occupancy:.0%} occupancy: stage instead", figures)
        if merged.cost.symbolic:
            return Decision(rule, producer.label, consumer.label, True,
                            f"{why}; intensity unknown (a symbolic dimension), ~{regs} regs <= "
                            f"{self.register_budget}", figures)
        return Decision(rule, producer.label, consumer.label, True,
                        f"{why}; {merged.cost.intensity:.2f} FLOP/B vs ridge "
                        f"{self.profile.ridge_point_flop_per_byte:.1f} ({merged.cost.regime(self.profile)}), "
                        f"saves {merged.cost.saved_bytes / 1e6:.2f} MB, ~{regs} regs <= {self.register_budget}",
                        figures)

    def chain(self, producer: GroupView, consumer: GroupView, merged: GroupView) -> Decision:
        """Element-wise/injective producer into an element-wise/injective consumer."""
        return self._register_check("chain", producer, consumer, merged, "memory-bound chain")

    def prologue(self, producer: GroupView, consumer: GroupView, merged: GroupView) -> Decision:
        """Element-wise producer computed inside a reduction's loads."""
        return self._register_check("prologue", producer, consumer, merged,
                                    "element-wise prologue read inside the reduction")

    def scalar_operand(self, producer: GroupView, consumer: GroupView, merged: GroupView) -> Decision:
        """A scalar computed from constants (a clip bound): recomputed in the kernel that reads it."""
        return Decision("scalar-operand", producer.label, consumer.label, True,
                        "a scalar operand costs nothing to recompute in the consumer; "
                        "a launch of its own costs microseconds", self._figures(merged))

    def epilogue(self, producer: GroupView, consumer: GroupView, merged: GroupView) -> Decision:
        """Element-wise consumers applied to a complex op's outputs while still in registers."""
        anchor = producer.anchor()
        rule = "epilogue" if anchor is None or anchor.kind in CONTRACTIONS or anchor.kind == WINDOW_REDUCE \
            else "reduction-epilogue"
        widest = max((_widest_output_bytes(i) for i in consumer.infos), default=0)
        if anchor is not None and anchor.kind in CONTRACTIONS and anchor.output_bytes and \
                widest > anchor.output_bytes and not anchor.symbolic:
            # A squeeze-and-excitation scale: x * sigmoid(fc(pool(x))) writes every FC output
            # H x W times. A contraction template keeps one output per accumulator, so the
            # expanded epilogue cannot stay in registers (dlight's Matmul fails on it too).
            return Decision(rule, producer.label, consumer.label, False,
                            f"the epilogue writes {widest / anchor.output_bytes:.0f}x the {anchor.kind}'s "
                            f"outputs (a broadcast of them): it runs as its own kernel", self._figures(merged))
        narrowest = min((_widest_output_bytes(i) / i.element_bytes for i in consumer.infos
                         if i.element_bytes and i.output_bytes),  # a tuple's item writes nothing
                        default=0)
        if anchor is not None and anchor.kind in CONTRACTIONS and anchor.output_bytes and not anchor.symbolic \
                and narrowest < anchor.output_bytes / anchor.element_bytes:
            # TVM annotates a slice that keeps the indices (x[:, :, :1]) element-wise, but it reads
            # part of the output: a template's epilogue is inlined over every output element, so
            # it cannot take one that covers fewer (ImplicitGemm and dlight's Matmul both fail)
            return Decision(rule, producer.label, consumer.label, False,
                            f"the epilogue writes fewer elements than the {anchor.kind}'s outputs (a slice of "
                            f"them): it runs as its own kernel", self._figures(merged))
        if anchor is not None and anchor.reduction_extents and math.prod(anchor.reduction_extents) == 1:
            # A reduction over one element (a 1x1 conv of one input channel). No template takes
            # it, and dlight's Fallback (TVM 0.27) inlines a fused epilogue into both its init and
            # its update: the epilogue applied twice, a wrong result (tests/test_guarded_schedule.py).
            return Decision(rule, producer.label, consumer.label, False,
                            f"the {anchor.kind} reduces over one element, where dlight's Fallback would "
                            f"apply a fused epilogue twice: it runs as its own kernel", self._figures(merged))
        return self._register_check(rule, producer, consumer, merged,
                                    "epilogue applied in registers")

    def complex_pair(self, producer: GroupView, consumer: GroupView, merged: GroupView) -> Decision:
        """Two complex ops in one kernel, run by a schedule template that takes the pair (rule 3:
        :class:`~.pair_policy.ComplexPairRule` decides)."""
        return self.pairs.decide(producer, consumer, merged, self._figures(merged))

    def attention_chain(self, scores: GroupView, softmax: GroupView, output: GroupView,
                        producer: GroupView, merged: GroupView) -> Decision:
        """Attention's scores, softmax and ``. V`` in one kernel (rule 3 for three complex ops:
        :class:`~.chain_rule.AttentionChainRule` decides); ``producer`` is the first two merged."""
        return self.chains.decide(scores, softmax, output, producer, merged, self._figures(merged))

    def gemm_prologue(self, producer: GroupView, consumer: GroupView, merged: GroupView,
                      operand: int) -> Decision:
        """Element-wise ``producer`` computed inside the operand loads of ``consumer``'s contraction
        (its argument ``operand``): :class:`~.prologue_rule.GemmPrologueRule` decides."""
        return self.prologues.decide(producer, consumer, merged, operand, self._figures(merged))

    def feedback_split(self, producer: GroupView, consumer: GroupView, merged: GroupView,
                       op_names: Sequence[str]) -> Optional[Decision]:
        """Refuse a merge that puts more than half of a measured-and-split group's ops in one group.

        ``op_names`` are the binding names of the merged group's operators (no projections). Half,
        not only the last merge: the chain walk grows a group one producer at a time, so refusing
        just the merge that completed it would peel off one op and keep the pressure.
        """
        for split in self.config.split_groups:
            inside = sum(1 for name in op_names if name in split.members)
            if inside > split.most_ops:
                figures = {**dict(split.figures), "ops_of_split_group_here": inside,
                           "most_ops": split.most_ops}
                return Decision("feedback-split", producer.label, consumer.label, False,
                                f"{split.reason}; at most {split.most_ops} of its {split.ops} ops "
                                f"in one kernel, the rest staged through global memory", figures)
        return None

    # ---- what the complex-pair rule asks the templates (ComplexPairRule answers) ------------
    def pair_templates(self) -> Tuple[str, ...]:
        """Complex pairs a schedule template runs as one kernel (the knob, or the package's)."""
        return self.pairs.pair_templates()

    def gpu_target(self):
        """The profile's GPU target, as the schedule templates see it when they plan."""
        return self.pairs.gpu_target()


def _widest_output_bytes(info: FuncInfo) -> int:
    """Bytes of ``info``'s largest output tensor. ``output_bytes`` sums a tuple output, so
    batch_norm (data, mean, var) would look wider than the conv it follows; its outputs are the
    last PrimFunc parameters whose sizes add up to ``output_bytes``."""
    if info.func is None:
        return info.output_bytes
    sizes = []
    for param in info.func.params:
        if hasattr(param.ty, "shape") and hasattr(param.ty, "dtype"):
            dims = [int(d) if isinstance(d, tvm.tirx.IntImm) else 0 for d in param.ty.shape]
            sizes.append(math.prod(dims) * tvm.DataType(param.ty.dtype).bits // 8)
    total = 0
    for count, size in enumerate(reversed(sizes), 1):
        total += size
        if total == info.output_bytes:
            return max(sizes[-count:])
    return info.output_bytes
