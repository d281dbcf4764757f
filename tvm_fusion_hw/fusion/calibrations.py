"""Measured model errors of the pair templates: what :mod:`.pair_cost` weighs a pair's plans with.

Each entry comes from one run on an H200: every fused kernel of the pair template and the same
pairs built apart, each kernel's measured time per call against its template's modelled time, and
memory-bound kernels of that run for the fraction of DRAM bandwidth a streaming kernel reaches.
The rows are what ``bench/pair_calibration.py`` prints for a run; their source names it.
"""

from __future__ import annotations

import dataclasses
import statistics


@dataclasses.dataclass(frozen=True)
class Calibration:
    """A pair template's model against measurement: ``(measured us, modelled us)`` per kernel."""

    source: str
    fused: tuple[tuple[str, float, float], ...]  # the fused kernels
    #: the same pairs' kernels apart, summed (a streaming part may be left out: it is costed at its floor)
    apart: tuple[tuple[str, float, float], ...]
    #: (kernel, compulsory bytes, measured us, bandwidth B/s) of memory-bound kernels measured there
    streaming: tuple[tuple[str, float, float, float], ...]

    @property
    def k_fused(self) -> float:
        """Median measured / modelled time of the fused kernels."""
        return statistics.median(m / p for _, m, p in self.fused)

    @property
    def k_apart(self) -> float:
        """Median measured / modelled time of the unfused pairs."""
        return statistics.median(m / p for _, m, p in self.apart)

    @property
    def dram_efficiency(self) -> float:
        """Median fraction of the DRAM bandwidth the streaming kernels reached."""
        return statistics.median(b / (us * 1e-6) / bw for _, b, us, bw in self.streaming)


_H200_DW_PW = ("bench/results/2026-11-30-h200-dw-pw/kernels.md (H200, measured per kernel) against "
               "the templates' models at commit 36d7c83 on the nvidia-h200 profile; the apart rows' "
               "ImplicitGemm halves remodelled at 03cd47f (the GEMM model's partial last wave), whose "
               "tiles for dw_pw b32's and MobileNetV2 b32's pointwise convs differ from the ones measured")

_H200_CONV_POOL = ("bench/results/2026-12-02-h200-corpus-6/conv_pool_calibration.md (H200, measured per "
                   "kernel, out_emu and out_cases) against the templates' models at commit c784f42 on the "
                   "nvidia-h200 profile; VGG-11 b1 conv2d5 remodelled at 03cd47f (its tile now splits K 8 "
                   "and prefetches, the one measured split K 4 without)")

#: Measured model errors, keyed by the fused plan's template. DepthwisePointwise: the dw_pw
#: micro-graph (32x144x56x56 -> 24) and MobileNetV2's four pairs fused in that run, batch 1 and 32;
#: apart, the same pairs as DepthwiseConv + ImplicitGemm (the rows whose both kernels were listed).
#: Streaming: the depthwise kernels at batch 32 (input + output, 4.8 TB/s). ConvPool: VGG-11's five
#: pairs and conv_relu_pool, batch 1 and 32; apart, their convs as ImplicitGemm plans them (the
#: pools are streaming kernels, costed at their DRAM floor). Streaming: VGG-11's first two pools
#: at batch 32, built apart.
CALIBRATIONS: dict[str, Calibration] = {
    "DepthwisePointwise": Calibration(
        source=_H200_DW_PW,
        fused=(
            ("dw_pw b32", 119.73, 43.7), ("dw_pw b1", 10.83, 6.5),
            ("mobilenet_v2 b32 conv2d1+conv2d2", 99.14, 34.9),
            ("mobilenet_v2 b32 conv2d4+conv2d5", 221.32, 41.6),
            ("mobilenet_v2 b32 conv2d9+conv2d10", 102.49, 23.2),
            ("mobilenet_v2 b32 conv2d14+conv2d15", 57.74, 17.1),
            ("mobilenet_v2 b1 conv2d1+conv2d2", 7.45, 4.7),
            ("mobilenet_v2 b1 conv2d4+conv2d5", 12.03, 5.7),
            ("mobilenet_v2 b1 conv2d9+conv2d10", 19.29, 8.4),
            ("mobilenet_v2 b1 conv2d14+conv2d15", 19.39, 8.7),
        ),
        apart=(
            ("dw_pw b32", 36.01 + 37.60, 52.2), ("dw_pw b1", 3.88 + 5.46, 7.0),
            ("mobilenet_v2 b32 conv2d1 + conv2d2", 35.07 + 31.82, 41.6),
            ("mobilenet_v2 b32 conv2d4 + conv2d5", 60.37 + 26.88, 67.8),
        ),
        streaming=(
            ("dw_pw b32 depthwise", 4.0 * 32 * 144 * 56 * 56 * 2, 36.01, 4.8e12),
            ("mobilenet_v2 b32 conv2d4", 4.0 * 32 * 96 * (112 * 112 + 56 * 56), 60.37, 4.8e12),
        ),
    ),
    "ConvPool": Calibration(
        source=_H200_CONV_POOL,
        fused=(
            ("vgg11_bn b1 conv2d+pool", 8.59, 6.40), ("vgg11_bn b1 conv2d1+pool1", 54.83, 37.40),
            ("vgg11_bn b1 conv2d3+pool2", 120.58, 82.20), ("vgg11_bn b1 conv2d5+pool3", 254.08, 96.50),
            ("vgg11_bn b1 conv2d6+pool4", 460.33, 52.90),
            ("vgg11_bn b32 conv2d+pool", 209.04, 100.20), ("vgg11_bn b32 conv2d1+pool1", 1376.79, 1028.70),
            ("vgg11_bn b32 conv2d3+pool2", 3144.67, 2184.30), ("vgg11_bn b32 conv2d5+pool3", 3207.33, 2243.00),
            ("vgg11_bn b32 conv2d6+pool4", 1379.13, 673.60),
            ("conv_relu_pool b1", 37.52, 22.10), ("conv_relu_pool b32", 680.04, 515.80),
        ),
        apart=(
            ("vgg11_bn b1 conv2d", 9.58, 3.40), ("vgg11_bn b1 conv2d1", 75.40, 32.40),
            ("vgg11_bn b1 conv2d3", 165.10, 68.40), ("vgg11_bn b1 conv2d5", 199.88, 82.60),
            ("vgg11_bn b1 conv2d6", 61.18, 25.40),
            ("vgg11_bn b32 conv2d", 184.01, 108.70), ("vgg11_bn b32 conv2d1", 1674.37, 977.90),
            ("vgg11_bn b32 conv2d3", 3187.41, 1955.70), ("vgg11_bn b32 conv2d5", 3166.56, 1955.70),
            ("vgg11_bn b32 conv2d6", 810.08, 495.90),
            ("conv_relu_pool b1 conv2d", 42.34, 17.10), ("conv_relu_pool b32 conv2d", 861.59, 495.90),
        ),
        streaming=(
            ("vgg11_bn b32 max_pool2d", 4.0 * 32 * 64 * (224 * 224 + 112 * 112), 118.46, 4.8e12),
            ("vgg11_bn b32 max_pool2d1", 4.0 * 32 * 128 * (112 * 112 + 56 * 56), 60.85, 4.8e12),
        ),
    ),
}
