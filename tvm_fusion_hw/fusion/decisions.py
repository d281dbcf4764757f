"""Decision records: every fuse or no-fuse, with the rule, the reason and the numbers behind it.

A :class:`FusionReport` is what the pass leaves behind for a user: the profile's budgets, every
decision in the order it was taken, and the final groups with their roofline figures. It prints
as a table (``str(report)``) and serialises to JSON (``report.to_json()``). After
:func:`tvm_fusion_hw.feedback.compile_with_feedback` it also lists the groups the measurements
split (:class:`SplitRecord`, before and after) and the loop's notes.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Dict, List, Union

Number = Union[int, float, str]


@dataclasses.dataclass
class Decision:
    """One fusion decision between a producer group and a consumer group."""

    #: "chain", "epilogue", "prologue", "reduction-epilogue", "complex-pair", "gemm-prologue", "depth",
    #: "feedback-split", "winograd" (fused: the convolution rewritten to Winograd)
    rule: str
    producer: str
    consumer: str
    fused: bool
    reason: str
    figures: Dict[str, Number] = dataclasses.field(default_factory=dict)
    #: kept apart because the fused kernel would not fit on chip (shared memory, registers,
    #: occupancy): staged fusion, the two run as kernels with one global round trip between them
    staged: bool = False
    #: the word the report prints for it where "FUSE"/"apart" would not say it (an algorithm choice)
    verdict: str = ""

    def line(self) -> str:
        verdict = self.verdict or ("FUSE " if self.fused else ("stage" if self.staged else "apart"))
        return f"{verdict} [{self.rule}] {self.producer} -> {self.consumer}: {self.reason}"


@dataclasses.dataclass
class GroupSummary:
    """A final group: its members and roofline figures on the profile."""

    name: str
    members: List[str]
    kinds: str
    flops: float
    compulsory_bytes: int
    intensity: float
    regime: str
    estimated_registers: int
    #: the PrimFunc the group becomes after FuseTIR (its kernel's name)
    kernel: str = ""
    #: binding names of its operators, as decisions' ``producer_ops``/``consumer_ops`` name them
    ops: List[str] = dataclasses.field(default_factory=list)

    def line(self) -> str:
        if self.regime == "symbolic":
            return (f"{self.name}: {len(self.members)} op(s) [{self.kinds}] symbolic shape: FLOPs and "
                    f"bytes unknown, ~{self.estimated_registers} regs/thread")
        return (
            f"{self.name}: {len(self.members)} op(s) [{self.kinds}] "
            f"{self.flops / 1e6:.2f} MFLOP, {self.compulsory_bytes / 1e6:.2f} MB, "
            f"{self.intensity:.2f} FLOP/B ({self.regime}), ~{self.estimated_registers} regs/thread"
        )


def _kernel_figures(fig: Dict[str, Number]) -> str:
    return (f"{fig.get('registers', '?')} regs, {fig.get('spill_bytes', 0)} B spilled, "
            f"occupancy {float(fig.get('occupancy', 0)):.0%}")


@dataclasses.dataclass
class SplitRecord:
    """A fused group the feedback loop measured, found wanting and split: before and after."""

    round: int  # the round whose build measured it
    function: str  # the fused function (its kernels are named after it)
    members: List[str]  # binding names of its operators
    reason: str  # what the measurement showed (spills, occupancy drop)
    before: Dict[str, Number]  # the fused kernel and its unfused parts, measured
    #: the groups its ops formed in the next round, measured there (empty: no round left)
    after: List[Dict[str, Number]] = dataclasses.field(default_factory=list)

    def line(self) -> str:
        b = self.before
        head = (f"round {self.round}: {self.function} ({len(self.members)} ops) {_kernel_figures(b)}; "
                f"parts {b.get('parts_registers', '?')} regs, occupancy {float(b.get('parts_occupancy', 0)):.0%}"
                f" -> {self.reason}")
        if not self.after:
            return head + "\n    after: not rebuilt (no round left)"
        pieces = "; ".join(f"{a['function']} ({a['ops']} ops) {_kernel_figures(a)}" for a in self.after)
        return f"{head}\n    after: {pieces}"


@dataclasses.dataclass
class FusionReport:
    """What HardwareAwareFuseOps decided for one module on one profile."""

    profile: str
    budgets: Dict[str, Number] = dataclasses.field(default_factory=dict)
    decisions: List[Decision] = dataclasses.field(default_factory=list)
    groups: List[GroupSummary] = dataclasses.field(default_factory=list)
    #: groups the register feedback split (tvm_fusion_hw.feedback), in the order it split them
    splits: List[SplitRecord] = dataclasses.field(default_factory=list)
    #: what the feedback loop measured with, or could not (empty: no feedback ran)
    feedback: List[str] = dataclasses.field(default_factory=list)

    def depth_cap_binds(self) -> int:
        """Merges the depth cap refused on this module (0: it does not bind here)."""
        return len([d for d in self.decisions if d.rule == "depth" and not d.fused])

    def all_budgets(self) -> Dict[str, Number]:
        """The profile's budgets, and whether the depth cap bound on the module compiled."""
        refused = self.depth_cap_binds()
        return {**self.budgets, "fusion depth cap binds on this module":
                f"yes, {refused} merge(s) refused" if refused else "no"}

    def fused(self) -> List[Decision]:
        return [d for d in self.decisions if d.fused]

    def refused(self) -> List[Decision]:
        return [d for d in self.decisions if not d.fused]

    def staged(self) -> List[Decision]:
        """Refusals for lack of room on chip: the two groups run staged, through global memory."""
        return [d for d in self.decisions if d.staged and not d.fused]

    def find(self, rule: str) -> List[Decision]:
        """Decisions taken by one rule."""
        return [d for d in self.decisions if d.rule == rule]

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "budgets": self.all_budgets()}

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        lines = [f"Hardware-aware fusion on {self.profile}"]
        lines += [f"  {k}: {v}" for k, v in self.all_budgets().items()]
        staged = len(self.staged())
        lines.append(f"Decisions ({len(self.fused())} fused, {len(self.refused())} kept apart"
                     + (f", {staged} of them staged: one global round trip where fusing does not fit" if staged
                        else "") + "):")
        lines += ["  " + d.line() for d in self.decisions]
        lines.append(f"Groups ({len(self.groups)}):")
        lines += ["  " + g.line() for g in self.groups]
        if self.feedback or self.splits:
            lines.append(f"Register feedback ({len(self.splits)} split(s)):")
            lines += ["  " + note for note in self.feedback]
            lines += ["  " + r.line() for r in self.splits]
        return "\n".join(lines)
