"""Whether a complex pair's fused kernel beats its two kernels apart, on the profile's roofline.

A fused kernel that fits (shared memory, registers, occupancy: :mod:`.pair_rule`) can still lose:
it saves the intermediate's global round trip, but pays for it in work the unfused kernels do not
do (a depthwise output recomputed for every block of output channels, weights restaged per block,
phases serialised behind barriers). Which side wins depends on the profile: the round trip costs
bytes / bandwidth, the extra work FLOPs / peak, so a GPU short of bandwidth against its compute (a
high ridge point, peak / bandwidth) gains from the fusion where a GPU rich in bandwidth loses.

Both plans are costed from the templates' own plans on the profile::

    fused:  t_f = max(k_fused * compute_s(fused plan),   B_fused / (eta * BW), t_0)
    apart:  t_a = sum over the two parts of max(k_apart * time_s(part plan), B_part / (eta * BW), t_0)

``compute_s`` is the fused template's modelled time without its DRAM floor, ``time_s`` a part's
modelled time (its template's; the roofline bound for a part no template plans), ``B`` the
compulsory DRAM bytes of the fusion's own cost analysis (the two parts together move the
intermediate's round trip more than the fused kernel), ``BW`` the profile's DRAM bandwidth. The
``k`` are the templates' measured model errors, ``eta`` the fraction of the bandwidth a streaming
kernel reached and ``t_0`` the least time a kernel took (launch and tail; 0 where the run did not
measure it), measured on an H200 or an H100 (:mod:`.calibrations`, with their sources). The pair
fuses where ``t_f < t_a``. The decision states it as the ridge point against the break-even ridge:
the ridge (the profile's peak held, its bandwidth varied) at which the two plans' times meet.

Only templates with a measured model error are weighed: the rule needs ``k``, and a guess would
decide silently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tvm_fusion_hw.hardware.profile import HardwareProfile
from tvm_fusion_hw.plans import KernelPlan

from .calibrations import CALIBRATIONS, Calibration, calibration_key


@dataclasses.dataclass(frozen=True)
class PartCost:
    """One side of the comparison: a kernel's modelled time and its DRAM floor."""

    what: str  # "DepthwisePointwise plan", "roofline"
    modelled_s: float  # the model's time, corrected by the measured error
    floor_s: float  # compulsory bytes at the achieved bandwidth
    bytes: int
    kernel_floor_s: float = 0.0  # what any kernel took there (launch and tail)

    @property
    def time_s(self) -> float:
        return max(self.modelled_s, self.floor_s, self.kernel_floor_s)


@dataclasses.dataclass(frozen=True)
class PairCost:
    """Both plans of a pair on one profile, and the verdict."""

    fused: PartCost
    parts: tuple[PartCost, PartCost]
    calibration: Calibration
    recompute: int
    break_even_ridge: float | None  # None: the plans never meet (one side wins at any ridge)

    @property
    def apart_s(self) -> float:
        return sum(p.time_s for p in self.parts)

    @property
    def fuses(self) -> bool:
        return self.fused.time_s < self.apart_s

    def figures(self) -> dict[str, object]:
        cal = self.calibration
        return {
            "cost_fused_us": round(self.fused.time_s * 1e6, 2),
            "cost_apart_us": round(self.apart_s * 1e6, 2),
            "cost_fused_bytes": self.fused.bytes,
            "cost_apart_bytes": sum(p.bytes for p in self.parts),
            "cost_parts": " + ".join(f"{p.what} {p.time_s * 1e6:.2f} us" for p in self.parts),
            "recompute": self.recompute,
            "break_even_ridge_flop_per_byte": None if self.break_even_ridge is None
            else round(self.break_even_ridge, 1),
            "model_error_fused": round(cal.k_fused, 3),
            "model_error_apart": round(cal.k_apart, 3),
            "dram_efficiency": round(cal.dram_efficiency, 3),
            "kernel_floor_us": round(cal.kernel_floor_s * 1e6, 2),
            "calibration": cal.source,
        }

    def reason(self, ridge: float) -> str:
        """Which figure decided, in words: the ridge against the break-even, both plans' times."""
        f, apart = self.fused, self.apart_s
        redone = f", producer computed {self.recompute}x" if self.recompute > 1 else ""
        plans = (f"fused {f.time_s * 1e6:.1f} us ({f.bytes / 1e6:.2f} MB{redone}) vs apart {apart * 1e6:.1f} us "
                 f"({sum(p.bytes for p in self.parts) / 1e6:.2f} MB: "
                 + " + ".join(f"{p.what} {p.time_s * 1e6:.1f}" for p in self.parts) + ")")
        if self.break_even_ridge is None:
            side = "the round trip costs more than the fused kernel's extra work at any ridge" if self.fuses \
                else "the fused kernel's extra work costs more than the round trip at any ridge"
            return f"ridge {ridge:.1f} FLOP/B, no break-even: {side}; {plans}"
        side = ">=" if ridge >= self.break_even_ridge else "<"
        if self.fuses:
            return (f"ridge {ridge:.1f} FLOP/B {side} break-even {self.break_even_ridge:.1f}: the "
                    f"intermediate's round trip costs more than the fused kernel's extra work; {plans}")
        return (f"ridge {ridge:.1f} FLOP/B {side} break-even {self.break_even_ridge:.1f}: the fused "
                f"kernel's extra work costs more than the round trip it saves; {plans}")


def _part(plan: KernelPlan | None, flops: float, nbytes: int, profile: HardwareProfile,
          k: float, cal: Calibration, bandwidth: float) -> PartCost:
    floor = nbytes / (cal.dram_efficiency * bandwidth)
    if plan is None or plan.time_s <= 0:  # no template plans it: its roofline bound
        return PartCost("roofline", flops / profile.peak_fp32_flop_per_s, floor, nbytes, cal.kernel_floor_s)
    return PartCost(f"{plan.template} plan", k * plan.time_s, floor, nbytes, cal.kernel_floor_s)


def pair_cost(profile: HardwareProfile, fused_plan: KernelPlan, fused_bytes: int,
              parts: Sequence[tuple[KernelPlan | None, float, int]],
              layout_prologue: bool = False) -> PairCost | None:
    """Cost both plans of a pair; None when the fused plan's template has no measured model error
    (or gives no modelled time). ``parts`` are ``(plan or None, FLOPs, compulsory bytes)``;
    ``layout_prologue``: the fused plan reads a copy through its index, weighed by that calibration
    (:func:`~.calibrations.calibration_key`)."""
    cal = CALIBRATIONS.get(calibration_key(fused_plan.template, layout_prologue))
    work = fused_plan.compute_s or fused_plan.time_s
    if cal is None or work <= 0 or len(parts) != 2:
        return None
    def costs(bandwidth: float):
        fused = PartCost(f"{fused_plan.template} plan", cal.k_fused * work,
                         fused_bytes / (cal.dram_efficiency * bandwidth), fused_bytes, cal.kernel_floor_s)
        return fused, tuple(_part(p, fl, b, profile, cal.k_apart, cal, bandwidth) for p, fl, b in parts)

    fused, apart = costs(profile.dram_bytes_per_s)
    return PairCost(fused, apart, cal, fused_plan.recompute,
                    _break_even(profile, costs))


def _break_even(profile: HardwareProfile, costs) -> float | None:
    """The ridge (peak / bandwidth, the peak held) where fused and apart take the same time, by
    bisection on the bandwidth over four decades either side of the profile's; the modelled
    times are held (only the DRAM floors move). None where the sign never changes."""
    def gain(bandwidth: float) -> float:  # > 0: fusing wins
        fused, apart = costs(bandwidth)
        return sum(p.time_s for p in apart) - fused.time_s

    low, high = profile.dram_bytes_per_s * 1e-4, profile.dram_bytes_per_s * 1e4
    low_wins = gain(low) > 0
    if low_wins == (gain(high) > 0):
        return None
    for _ in range(100):
        mid = (low * high) ** 0.5
        low, high = (mid, high) if (gain(mid) > 0) == low_wins else (low, mid)
    return profile.peak_fp32_flop_per_s / ((low * high) ** 0.5)
