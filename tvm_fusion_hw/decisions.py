"""Decision records: every fuse or no-fuse, with the rule, the reason and the numbers behind it.

A :class:`FusionReport` is what the pass leaves behind for a user: the profile's budgets, every
decision in the order it was taken, and the final groups with their roofline figures. It prints
as a table (``str(report)``) and serialises to JSON (``report.to_json()``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Dict, List, Union

Number = Union[int, float, str]


@dataclasses.dataclass
class Decision:
    """One fusion decision between a producer group and a consumer group."""

    rule: str  # "chain", "epilogue", "prologue", "reduction-epilogue", "complex-pair", "depth"
    producer: str
    consumer: str
    fused: bool
    reason: str
    figures: Dict[str, Number] = dataclasses.field(default_factory=dict)

    def line(self) -> str:
        verdict = "FUSE " if self.fused else "apart"
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

    def line(self) -> str:
        return (
            f"{self.name}: {len(self.members)} op(s) [{self.kinds}] "
            f"{self.flops / 1e6:.2f} MFLOP, {self.compulsory_bytes / 1e6:.2f} MB, "
            f"{self.intensity:.2f} FLOP/B ({self.regime}), ~{self.estimated_registers} regs/thread"
        )


@dataclasses.dataclass
class FusionReport:
    """What HardwareAwareFuseOps decided for one module on one profile."""

    profile: str
    budgets: Dict[str, Number] = dataclasses.field(default_factory=dict)
    decisions: List[Decision] = dataclasses.field(default_factory=list)
    groups: List[GroupSummary] = dataclasses.field(default_factory=list)

    def fused(self) -> List[Decision]:
        return [d for d in self.decisions if d.fused]

    def refused(self) -> List[Decision]:
        return [d for d in self.decisions if not d.fused]

    def find(self, rule: str) -> List[Decision]:
        """Decisions taken by one rule."""
        return [d for d in self.decisions if d.rule == rule]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        lines = [f"Hardware-aware fusion on {self.profile}"]
        lines += [f"  {k}: {v}" for k, v in self.budgets.items()]
        lines.append(f"Decisions ({len(self.fused())} fused, {len(self.refused())} kept apart):")
        lines += ["  " + d.line() for d in self.decisions]
        lines.append(f"Groups ({len(self.groups)}):")
        lines += ["  " + g.line() for g in self.groups]
        return "\n".join(lines)
