"""What a 3x3 stride-1 convolution costs on a profile, direct and by Winograd: the two sides of the
Winograd rule (:mod:`.winograd_conv`).

Each kernel of either way is costed as the pipeline would run it::

    t = max(k * modelled_s, bytes / (eta * BW), t_0)

* direct: one kernel, the convolution as the tiled rules plan it (ImplicitGemm), ``k`` the
  measured model error of direct 3x3 convolutions;
* Winograd: the batched GEMM (ImplicitGemm's plan, ``k`` the Winograd GEMMs' error), the data
  transform and the output transform (no tile model: their bytes, at least ``t_0``), and the filter
  transform where it runs on every inference (a filter that is neither a constant nor lifted into
  ``main_transform_params``).

``modelled_s`` is the plan of the PrimFunc ``LegalizeOps`` makes of the op (the one the pipeline
schedules), asked through the planner the pipeline hands over; without a plan the kernel's FLOPs at
the profile's peak stand in. ``bytes`` are the kernel's parameters (each read or written once),
``BW`` the profile's DRAM bandwidth. ``k``, ``eta`` and ``t_0`` were measured on an H200 and hold
for every profile, as the pair rule's do (the profile moves the tile model, its peak and its
bandwidth): ``k`` and the transforms' ``eta`` (the fraction of the bandwidth they reached) and
``t_0`` (what a batch-1 transform took) in ``CALIBRATIONS["WinogradConv2d"]``; a GEMM's ``eta``
(the batched GEMM's, and the direct convolution's, an implicit GEMM) is what the Winograd GEMMs
bound by their bytes reached (``CALIBRATIONS["WinogradGemm"]``). That
is what decides small-batch layers with many channels: the GEMM streams the transformed filter,
4x the filter that the direct convolution reads, so where bandwidth is short against the FLOPs
saved the direct convolution wins.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Dict, Optional

import tvm
from tvm import relax, tirx

from .fusion.calibrations import CALIBRATIONS
from .hardware.profile import HardwareProfile
from .plans import KernelPlan
from .schedules.winograd.transforms import WinogradShape

#: the calibration the rule's figures come from, and the one whose memory-bound GEMMs give the
#: bandwidth a GEMM's bytes move at
CALIBRATION, GEMM_CALIBRATION = "WinogradConv2d", "WinogradGemm"
_FLOAT_BYTES = 4

KernelPlanner = Callable[[tirx.PrimFunc, tvm.target.Target], Optional[KernelPlan]]


@dataclasses.dataclass(frozen=True)
class KernelCost:
    """One kernel of one side: the time taken, and what set it."""

    modelled_s: float  # the tile model's time x its measured error (0: no tile model)
    bytes_s: float  # its bytes at the bandwidth a streaming kernel reaches
    floor_s: float  # the least a kernel took
    planned: bool  # whether a template planned it (else its FLOPs at the peak)

    @property
    def time_s(self) -> float:
        return max(self.modelled_s, self.bytes_s, self.floor_s)


@dataclasses.dataclass(frozen=True)
class WinogradCost:
    """Both ways of one convolution on one profile."""

    direct: KernelCost
    gemm: KernelCost
    transforms: Dict[str, KernelCost]  # "data", "output" and, when it runs per inference, "filter"

    @property
    def direct_s(self) -> float:
        return self.direct.time_s

    @property
    def winograd_s(self) -> float:
        return self.gemm.time_s + sum(t.time_s for t in self.transforms.values())

    @property
    def pays(self) -> bool:
        return self.winograd_s < self.direct_s

    def figures(self) -> Dict[str, object]:
        """The costs in microseconds, for the decision."""
        out = {"direct_us": _us(self.direct_s), "winograd_us": _us(self.winograd_s), "gemm_us": _us(self.gemm.time_s)}
        out.update({f"{name}_transform_us": _us(t.time_s) for name, t in self.transforms.items()})
        out["tile_model"] = self.direct.planned and self.gemm.planned
        return out

    def describe(self) -> str:
        """The comparison in words."""
        parts = " + ".join(f"{name} {t.time_s * 1e6:.1f}" for name, t in self.transforms.items())
        return (f"Winograd {self.winograd_s * 1e6:.1f} us (GEMM {self.gemm.time_s * 1e6:.1f} + {parts}) "
                f"vs direct {self.direct_s * 1e6:.1f} us"
                + ("" if self.direct.planned and self.gemm.planned else " (no tile model: FLOPs at peak)"))


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 2)


def _legalized(params: Dict[str, tuple], make: Callable[..., relax.Expr]) -> tirx.PrimFunc:
    """The PrimFunc ``LegalizeOps`` makes of ``make(*params)`` over float32 tensors of these shapes."""
    bb = relax.BlockBuilder()
    args = [relax.Var(name, relax.TensorType(shape, "float32")) for name, shape in params.items()]
    with bb.function("main", args):
        out = bb.emit(make(*args))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)]
    return func


def direct_func(shape: WinogradShape) -> tirx.PrimFunc:
    """The convolution as the pipeline would schedule it without Winograd."""
    return _legalized({"x": (shape.batch, shape.in_channels, shape.height, shape.width),
                       "w": (shape.out_channels, shape.in_channels, 3, 3)},
                      lambda x, w: relax.op.nn.conv2d(x, w, padding=shape.pad))


def gemm_func(shape: WinogradShape) -> tirx.PrimFunc:
    """The batched GEMM of the transformed filter and data, as the rewrite emits it."""
    a2 = shape.alpha ** 2
    return _legalized({"u": (a2, shape.out_channels, shape.in_channels), "v": (a2, shape.in_channels, shape.tiles)},
                      relax.op.matmul)


def _bytes(*shapes: tuple) -> int:
    return sum(math.prod(s) for s in shapes) * _FLOAT_BYTES


class WinogradCostModel:
    """Costs convolutions on ``profile`` with the tile model behind ``kernel_plan`` (None: none, the
    FLOPs at the peak); one cost per shape, remembered."""

    def __init__(self, profile: HardwareProfile, target: tvm.target.Target,
                 kernel_plan: Optional[KernelPlanner] = None):
        self.profile, self.target, self.kernel_plan = profile, target, kernel_plan
        self.calibration = CALIBRATIONS[CALIBRATION]
        self.gemm_efficiency = CALIBRATIONS[GEMM_CALIBRATION].dram_efficiency
        self._memo: Dict[tuple, WinogradCost] = {}

    def cost(self, shape: WinogradShape, filter_per_call: bool = False) -> WinogradCost:
        """Both ways of ``shape``; ``filter_per_call``: the filter transform runs on every inference."""
        key = (shape, filter_per_call)
        if key not in self._memo:
            self._memo[key] = self._cost(shape, filter_per_call)
        return self._memo[key]

    def _cost(self, shape: WinogradShape, filter_per_call: bool) -> WinogradCost:
        n, c, k, a2, p = shape.batch, shape.in_channels, shape.out_channels, shape.alpha ** 2, shape.tiles
        x, w = (n, c, shape.height, shape.width), (k, c, 3, 3)
        y, u, v, m = (n, k, shape.out_height, shape.out_width), (a2, k, c), (a2, c, p), (a2, k, p)
        cal = self.calibration
        direct = self._planned(direct_func(shape), shape.direct_flops(), _bytes(x, w, y), cal.k_apart)
        gemm = self._planned(gemm_func(shape), shape.gemm_flops(), _bytes(u, v, m), cal.k_fused)
        transforms = {"data": self._streaming(_bytes(x, v)), "output": self._streaming(_bytes(m, y))}
        if filter_per_call:
            transforms["filter"] = self._streaming(_bytes(w, u))
        return WinogradCost(direct, gemm, transforms)

    def _bytes_s(self, nbytes: int, efficiency: float) -> float:
        return nbytes / (efficiency * self.profile.dram_bytes_per_s)

    def _planned(self, func: tirx.PrimFunc, flops: int, nbytes: int, error: float) -> KernelCost:
        plan = None
        if self.kernel_plan is not None:
            try:
                plan = self.kernel_plan(func, self.target)
            except Exception:  # pylint: disable=broad-except
                plan = None  # a planner that fails costs the kernel at the peak, as one that declines
        if plan is not None and plan.time_s > 0:
            modelled, planned = error * plan.time_s, True
        else:
            modelled, planned = flops / self.profile.peak_fp32_flop_per_s, False
        return KernelCost(modelled, self._bytes_s(nbytes, self.gemm_efficiency),
                          self.calibration.kernel_floor_s, planned)

    def _streaming(self, nbytes: int) -> KernelCost:
        return KernelCost(0.0, self._bytes_s(nbytes, self.calibration.dram_efficiency),
                          self.calibration.kernel_floor_s, True)
