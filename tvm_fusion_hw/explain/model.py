"""What ``tvm-fusion-hw explain`` knows about one model: plain records, rendered as text, HTML, JSON.

A :class:`PlanView` is one profile's plan: each kernel (:class:`KernelRow`) with the fusion pass's
roofline figures, the compiler's measurements and the schedule it got, every decision, and stock
FuseOps' kernels of the same model. An :class:`Explanation` holds the plans of every profile asked
for and how their decisions line up (:class:`DecisionRow`). The records carry numbers only; the
renderers decide how they read, so the JSON and the page cannot disagree.
"""

from __future__ import annotations

import dataclasses
import json

from tvm_fusion_hw.fusion.decisions import Decision
from tvm_fusion_hw.winograd_conv import WINOGRAD


@dataclasses.dataclass
class Measured:  # pylint: disable=too-many-instance-attributes
    """What the compiler allocated for a kernel's GPU functions (the worst of them where TVM
    split one PrimFunc into several): ptxas' report or the AMDGPU metadata."""

    registers: int
    spill_bytes: int  # spill stores + loads (AMD: 4 x spilled VGPRs, both ways)
    stack_frame_bytes: int
    shared_bytes: int  # per block
    threads_per_block: int | None
    occupancy: float | None  # resident warps / most warps an SM (CU) holds
    occupancy_limiter: str
    source: str  # "ptxas (nvcc)", "ptxas (nvrtc)", "amdgpu-metadata"
    gpu_functions: int = 1


@dataclasses.dataclass
class KernelRow:  # pylint: disable=too-many-instance-attributes
    """One kernel of the plugin's plan: a group of the fusion report, its schedule, its measurements."""

    kernel: str  # the PrimFunc after FuseTIR (GPU functions are named after it)
    group: str  # the group's label in the decisions
    ops: list[str]  # PrimFunc names of its ops
    bindings: list[str]  # binding names of its ops (the key that finds the same group elsewhere)
    kinds: str
    flops: float
    compulsory_bytes: int
    intensity: float
    regime: str  # "memory-bound", "compute-bound" or "symbolic"
    estimated_registers: int
    measured: Measured | None = None
    schedule_rule: str = ""  # the template or dlight rule that scheduled it
    tile: str = ""  # the template's tile in words
    fallbacks: list[str] = dataclasses.field(default_factory=list)
    modelled_s: float = 0.0  # the template's tile model, else the roofline bound
    modelled_from: str = "roofline bound"
    stock_kernels: list[str] = dataclasses.field(default_factory=list)  # stock's kernels of its ops

    @property
    def modelled_flop_per_s(self) -> float:
        return self.flops / self.modelled_s if self.modelled_s > 0 else 0.0


@dataclasses.dataclass
class StockRow:
    """One kernel of stock FuseOps' plan of the same model, placed on this profile's roofline."""

    kernel: str
    ops: list[str]
    bindings: list[str]
    flops: float
    compulsory_bytes: int
    intensity: float
    modelled_s: float  # its roofline bound on the profile (dlight's schedules have no tile model)

    @property
    def modelled_flop_per_s(self) -> float:
        return self.flops / self.modelled_s if self.modelled_s > 0 else 0.0


@dataclasses.dataclass
class PlanView:  # pylint: disable=too-many-instance-attributes
    """One profile's plan of the model."""

    label: str  # the column's name: the profile's, with knobs if any
    profile: str
    display_name: str
    peak_flop_per_s: float  # HardwareProfile.peak_fp32_flop_per_s
    dram_bytes_per_s: float
    ridge_flop_per_byte: float
    knobs: dict[str, object]
    budgets: dict[str, object]
    kernels: list[KernelRow]
    decisions: list[Decision]
    stock: list[StockRow]
    notes: list[str] = dataclasses.field(default_factory=list)  # what could not be measured, and why
    measured_with: str = ""  # "ptxas (nvcc)", ...; empty: nothing measured
    #: the fusion policy's scalar settings (PolicyConfig), the limits some decisions test against
    policy: dict[str, object] = dataclasses.field(default_factory=dict)

    def fusions(self) -> list[Decision]:
        """The fusion decisions (not the algorithm choices, :meth:`winograd`)."""
        return [d for d in self.decisions if d.rule != WINOGRAD]

    def fused(self) -> list[Decision]:
        return [d for d in self.fusions() if d.fused]

    def apart(self) -> list[Decision]:
        return [d for d in self.fusions() if not d.fused]

    def staged(self) -> list[Decision]:
        return [d for d in self.fusions() if d.staged and not d.fused]

    def winograd(self) -> list[Decision]:
        """The 3x3 convolutions the Winograd rule considered (fused: computed by Winograd)."""
        return [d for d in self.decisions if d.rule == WINOGRAD]

    def modelled_s(self) -> float:
        """The plan's modelled time: its templates' tile models, the roofline bound elsewhere."""
        return sum(k.modelled_s for k in self.kernels)

    def roofline_s(self) -> float:
        """The plan's roofline bound: each kernel's larger of compute and DRAM time, summed."""
        return sum(max(k.flops / self.peak_flop_per_s, k.compulsory_bytes / self.dram_bytes_per_s)
                   for k in self.kernels if k.regime != "symbolic")

    def stock_modelled_s(self) -> float:
        return sum(k.modelled_s for k in self.stock)


@dataclasses.dataclass
class DecisionRow:
    """One decision as each profile took it (None: that profile took no such decision)."""

    rule: str  # the rule that took it; several (chain/depth) where profiles took it by different rules
    producer: str  # the labels as the first profile that took it wrote them
    consumer: str
    decisions: list[Decision | None]
    differs: bool = False
    #: what made them differ: the figure whose test came out otherwise, per profile, in words
    why: str = ""

    @property
    def verdicts(self) -> list[str]:
        return [verdict(d) for d in self.decisions]


def verdict(decision: Decision | None) -> str:
    """``FUSE``, ``stage``, ``apart`` or ``-`` (not taken), as the report prints them."""
    if decision is None:
        return "-"
    return "FUSE" if decision.fused else ("stage" if decision.staged else "apart")


@dataclasses.dataclass
class KernelMatch:
    """The kernels of each profile that compute the same ops (None: no kernel with exactly them)."""

    bindings: tuple[str, ...]
    kernels: list[KernelRow | None]

    @property
    def differs(self) -> bool:
        return any(k is None for k in self.kernels)


@dataclasses.dataclass
class Explanation:
    """Every plan of one model, and how they compare."""

    model: str
    batch: int | None  # None: an ONNX file, whose shapes are its own
    plans: list[PlanView]
    decisions: list[DecisionRow] = dataclasses.field(default_factory=list)
    kernels: list[KernelMatch] = dataclasses.field(default_factory=list)

    def differing(self) -> list[DecisionRow]:
        return [row for row in self.decisions if row.differs]

    def to_dict(self) -> dict:
        """Everything, as JSON-ready data (decisions aligned by index into each plan's list)."""
        plans = [dataclasses.asdict(p) for p in self.plans]
        for plan, view in zip(plans, self.plans):
            plan["ridge_flop_per_byte"] = view.ridge_flop_per_byte
            plan["modelled_s"] = view.modelled_s()
            plan["roofline_s"] = view.roofline_s()
            plan["stock_modelled_s"] = view.stock_modelled_s()
        index = [{id(d): i for i, d in enumerate(p.decisions)} for p in self.plans]
        rows = [{"rule": r.rule, "producer": r.producer, "consumer": r.consumer, "verdicts": r.verdicts,
                 "differs": r.differs, "why": r.why,
                 "decision_index": [None if d is None else index[k][id(d)] for k, d in enumerate(r.decisions)]}
                for r in self.decisions]
        kernels = [{"bindings": list(m.bindings),
                    "kernels": [None if k is None else k.kernel for k in m.kernels]} for m in self.kernels]
        return {"model": self.model, "batch": self.batch, "profiles": [p.label for p in self.plans],
                "plans": plans, "decisions": rows, "kernels": kernels,
                "differing_decisions": len(self.differing())}

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)
