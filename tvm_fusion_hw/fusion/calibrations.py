"""Measured model errors of the pair templates: what :mod:`.pair_cost` weighs a pair's plans with.

Each entry comes from one run on an H200 (the layout prologues': an H100, against the H100
profile's model): every fused kernel of the pair template and the same pairs built apart, each
kernel's measured time per call against its template's modelled time, and memory-bound kernels of
that run for the fraction of DRAM bandwidth a streaming kernel reaches. The rows are what
``bench/pair_calibration.py`` prints for a run (the layout prologues': a run's kernels.md, read by
hand); their source names it.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Calibration:
    """A pair template's model against measurement: ``(measured us, modelled us)`` per kernel."""

    source: str
    fused: tuple[tuple[str, float, float], ...]  # the fused kernels
    #: the same pairs' kernels apart, summed (a streaming part may be left out: it is costed at its floor)
    apart: tuple[tuple[str, float, float], ...]
    #: (kernel, compulsory bytes, measured us, bandwidth B/s) of memory-bound kernels measured there
    streaming: tuple[tuple[str, float, float, float], ...]
    #: (kernel, measured us) of kernels too small for their bytes or FLOPs to show: what any kernel
    #: costs there (launch and tail); none measured: no such floor
    smallest: tuple[tuple[str, float], ...] = ()

    @property
    def k_fused(self) -> float:
        """Median measured / modelled time of the fused kernels."""
        return statistics.median(m / p for _, m, p in self.fused)

    @property
    def k_apart(self) -> float:
        """Median measured / modelled time of the unfused pairs."""
        return statistics.median(m / p for _, m, p in self.apart)

    @property
    def kernel_floor_s(self) -> float:
        """Median time of the smallest kernels: no kernel of that run took less."""
        return statistics.median(us for _, us in self.smallest) * 1e-6 if self.smallest else 0.0

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

_H200_PROLOGUE = ("bench/results/2026-12-04-h200-gemm-prologues/calibration.md (H200, measured per kernel) "
                  "against the templates' models at commit d05eb3b on the nvidia-h200 profile")

#: Measured model errors, keyed by the fused plan's template. DepthwisePointwise: the dw_pw
#: micro-graph (32x144x56x56 -> 24) and MobileNetV2's four pairs fused in that run, batch 1 and 32;
#: apart, the same pairs as DepthwiseConv + ImplicitGemm (the rows whose both kernels were listed).
#: Streaming: the depthwise kernels at batch 32 (input + output, 4.8 TB/s). ConvPool: VGG-11's five
#: pairs and conv_relu_pool, batch 1 and 32; apart, their convs as ImplicitGemm plans them (the
#: pools are streaming kernels, costed at their DRAM floor). Streaming: VGG-11's first two pools
#: at batch 32, built apart. ImplicitGemm (its plans with a GEMM prologue, fusion/prologue_rule.py):
#: the squeeze-and-excitation scales of EfficientNet-B0, MobileNetV3-L/S, RegNetY-400MF and GhostNet
#: in their projecting 1x1 convs, batch 1 and 32; apart, the same convs alone. Streaming: the scales
#: of 48 MB or more at batch 32, built apart (smaller ones stay in the 50 MB L2, or take a launch).
#: Smallest: each model's fastest scale at batch 1, built apart (per call, no CUDA graphs).
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
    "ImplicitGemm": Calibration(
        source=_H200_PROLOGUE,
        fused=(
            ("efficientnet_b0 b1 conv2d4", 4.58, 0.60), ("efficientnet_b0 b1 conv2d9", 4.52, 1.70),
            ("efficientnet_b0 b1 conv2d14", 6.36, 2.80), ("efficientnet_b0 b1 conv2d16", 5.44, 2.80),
            ("efficientnet_b0 b1 conv2d21", 7.38, 4.50), ("efficientnet_b0 b1 conv2d23", 7.26, 4.50),
            ("efficientnet_b0 b1 conv2d28", 13.72, 7.60), ("efficientnet_b0 b1 conv2d30", 13.88, 7.60),
            ("efficientnet_b0 b1 conv2d35", 10.29, 6.60), ("efficientnet_b0 b1 conv2d37", 8.77, 6.50),
            ("efficientnet_b0 b1 conv2d42", 10.25, 6.00), ("efficientnet_b0 b1 conv2d44", 11.60, 6.10),
            ("efficientnet_b0 b32 conv2d4", 32.19, 12.70), ("efficientnet_b0 b32 conv2d9", 28.82, 14.10),
            ("efficientnet_b0 b32 conv2d14", 49.27, 20.20), ("efficientnet_b0 b32 conv2d16", 21.80, 8.90),
            ("efficientnet_b0 b32 conv2d21", 32.53, 14.90), ("efficientnet_b0 b32 conv2d23", 21.99, 8.00),
            ("efficientnet_b0 b32 conv2d28", 38.10, 15.90), ("efficientnet_b0 b32 conv2d30", 36.23, 17.50),
            ("efficientnet_b0 b32 conv2d35", 49.38, 20.50), ("efficientnet_b0 b32 conv2d37", 33.80, 14.30),
            ("efficientnet_b0 b32 conv2d42", 44.40, 19.70), ("efficientnet_b0 b32 conv2d44", 71.61, 26.00),
            ("mobilenet_v3_large b1 conv2d12", 5.00, 1.70), ("mobilenet_v3_large b1 conv2d17", 4.95, 2.30),
            ("mobilenet_v3_large b1 conv2d31", 13.93, 7.60), ("mobilenet_v3_large b1 conv2d36", 10.28, 6.60),
            ("mobilenet_v3_large b1 conv2d38", 9.54, 6.50), ("mobilenet_v3_large b1 conv2d43", 9.89, 7.60),
            ("mobilenet_v3_large b32 conv2d12", 11.70, 5.20), ("mobilenet_v3_large b32 conv2d17", 18.26, 8.60),
            ("mobilenet_v3_large b32 conv2d31", 36.26, 17.50),
            ("mobilenet_v3_large b32 conv2d36", 49.65, 20.50),
            ("mobilenet_v3_large b32 conv2d38", 29.68, 12.40),
            ("mobilenet_v3_large b32 conv2d43", 36.82, 16.70), ("regnet_y_400mf b1 conv2d6", 4.78, 1.10),
            ("regnet_y_400mf b1 conv2d12", 5.34, 2.30), ("regnet_y_400mf b1 conv2d12", 5.47, 2.30),
            ("regnet_y_400mf b1 conv2d21", 6.81, 4.00), ("regnet_y_400mf b1 conv2d21", 7.08, 4.00),
            ("regnet_y_400mf b1 conv2d30", 10.09, 7.10), ("regnet_y_400mf b1 conv2d30", 10.11, 7.10),
            ("regnet_y_400mf b32 conv2d6", 25.21, 12.40), ("regnet_y_400mf b32 conv2d12", 23.99, 13.30),
            ("regnet_y_400mf b32 conv2d12", 25.91, 13.30), ("regnet_y_400mf b32 conv2d21", 32.94, 12.90),
            ("regnet_y_400mf b32 conv2d21", 33.15, 12.90), ("regnet_y_400mf b32 conv2d30", 38.55, 16.30),
            ("regnet_y_400mf b32 conv2d30", 38.72, 16.30), ("ghostnet_100 b1 conv2d16", 3.96, 1.70),
            ("ghostnet_100 b1 conv2d24", 4.55, 2.30), ("ghostnet_100 b1 conv2d42", 13.57, 7.60),
            ("ghostnet_100 b1 conv2d50", 8.78, 6.50), ("ghostnet_100 b1 conv2d52", 9.29, 6.40),
            ("ghostnet_100 b1 conv2d58", 11.36, 7.60), ("ghostnet_100 b32 conv2d16", 7.71, 3.20),
            ("ghostnet_100 b32 conv2d24", 10.28, 5.20), ("ghostnet_100 b32 conv2d42", 45.15, 11.30),
            ("ghostnet_100 b32 conv2d50", 62.24, 15.90), ("ghostnet_100 b32 conv2d52", 27.52, 9.70),
            ("ghostnet_100 b32 conv2d58", 33.46, 11.90), ("mobilenet_v3_small b1 conv2d4", 4.39, 0.40),
            ("mobilenet_v3_small b1 conv2d15", 4.38, 1.70), ("mobilenet_v3_small b1 conv2d20", 7.51, 4.50),
            ("mobilenet_v3_small b1 conv2d25", 4.61, 2.30), ("mobilenet_v3_small b1 conv2d30", 5.57, 2.80),
            ("mobilenet_v3_small b1 conv2d35", 7.71, 5.10), ("mobilenet_v3_small b1 conv2d40", 9.12, 5.90),
            ("mobilenet_v3_small b32 conv2d4", 5.69, 1.70), ("mobilenet_v3_small b32 conv2d15", 11.33, 2.30),
            ("mobilenet_v3_small b32 conv2d20", 17.75, 6.10), ("mobilenet_v3_small b32 conv2d25", 8.87, 3.00),
            ("mobilenet_v3_small b32 conv2d30", 12.32, 3.80), ("mobilenet_v3_small b32 conv2d35", 11.46, 5.10),
            ("mobilenet_v3_small b32 conv2d40", 22.25, 9.70),
        ),
        apart=(
            ("efficientnet_b0 b1 conv2d4", 4.54, 0.60), ("efficientnet_b0 b1 conv2d9", 4.58, 1.70),
            ("efficientnet_b0 b1 conv2d14", 5.68, 2.80), ("efficientnet_b0 b1 conv2d16", 4.52, 2.80),
            ("efficientnet_b0 b1 conv2d21", 5.92, 4.50), ("efficientnet_b0 b1 conv2d23", 7.14, 4.50),
            ("efficientnet_b0 b1 conv2d28", 10.20, 7.60), ("efficientnet_b0 b1 conv2d30", 10.42, 7.60),
            ("efficientnet_b0 b1 conv2d35", 10.40, 6.50), ("efficientnet_b0 b1 conv2d37", 8.98, 6.50),
            ("efficientnet_b0 b1 conv2d42", 9.11, 6.00), ("efficientnet_b0 b1 conv2d44", 10.56, 6.10),
            ("efficientnet_b0 b32 conv2d4", 30.98, 11.90), ("efficientnet_b0 b32 conv2d9", 24.60, 13.50),
            ("efficientnet_b0 b32 conv2d14", 43.14, 19.60), ("efficientnet_b0 b32 conv2d16", 21.90, 8.70),
            ("efficientnet_b0 b32 conv2d21", 31.88, 14.50), ("efficientnet_b0 b32 conv2d23", 18.48, 7.90),
            ("efficientnet_b0 b32 conv2d28", 31.98, 14.90), ("efficientnet_b0 b32 conv2d30", 34.76, 17.40),
            ("efficientnet_b0 b32 conv2d35", 52.32, 20.00), ("efficientnet_b0 b32 conv2d37", 33.44, 14.30),
            ("efficientnet_b0 b32 conv2d42", 42.93, 19.40), ("efficientnet_b0 b32 conv2d44", 66.73, 25.40),
            ("mobilenet_v3_large b1 conv2d12", 5.10, 1.70), ("mobilenet_v3_large b1 conv2d17", 4.95, 2.30),
            ("mobilenet_v3_large b1 conv2d31", 10.36, 7.60), ("mobilenet_v3_large b1 conv2d36", 10.30, 6.50),
            ("mobilenet_v3_large b1 conv2d38", 9.80, 6.40), ("mobilenet_v3_large b1 conv2d43", 9.75, 7.60),
            ("mobilenet_v3_large b32 conv2d12", 10.77, 5.10), ("mobilenet_v3_large b32 conv2d17", 16.79, 8.50),
            ("mobilenet_v3_large b32 conv2d31", 34.69, 17.40),
            ("mobilenet_v3_large b32 conv2d36", 52.30, 20.00),
            ("mobilenet_v3_large b32 conv2d38", 28.81, 12.00),
            ("mobilenet_v3_large b32 conv2d43", 32.69, 16.50), ("regnet_y_400mf b1 conv2d6", 4.59, 1.10),
            ("regnet_y_400mf b1 conv2d12", 5.14, 2.30), ("regnet_y_400mf b1 conv2d12", 5.18, 2.30),
            ("regnet_y_400mf b1 conv2d21", 6.61, 3.90), ("regnet_y_400mf b1 conv2d21", 7.03, 3.90),
            ("regnet_y_400mf b1 conv2d30", 10.24, 7.00), ("regnet_y_400mf b1 conv2d30", 9.62, 7.00),
            ("regnet_y_400mf b32 conv2d6", 24.13, 12.10), ("regnet_y_400mf b32 conv2d12", 23.78, 13.10),
            ("regnet_y_400mf b32 conv2d12", 26.63, 13.10), ("regnet_y_400mf b32 conv2d21", 32.87, 12.60),
            ("regnet_y_400mf b32 conv2d21", 33.63, 12.60), ("regnet_y_400mf b32 conv2d30", 42.31, 16.20),
            ("regnet_y_400mf b32 conv2d30", 42.87, 16.20), ("ghostnet_100 b1 conv2d16", 3.87, 1.70),
            ("ghostnet_100 b1 conv2d24", 4.79, 2.30), ("ghostnet_100 b1 conv2d42", 10.02, 7.60),
            ("ghostnet_100 b1 conv2d50", 8.82, 6.50), ("ghostnet_100 b1 conv2d52", 8.07, 6.40),
            ("ghostnet_100 b1 conv2d58", 9.49, 7.50), ("ghostnet_100 b32 conv2d16", 7.42, 3.10),
            ("ghostnet_100 b32 conv2d24", 9.86, 5.00), ("ghostnet_100 b32 conv2d42", 23.62, 11.00),
            ("ghostnet_100 b32 conv2d50", 31.76, 15.40), ("ghostnet_100 b32 conv2d52", 21.93, 9.60),
            ("ghostnet_100 b32 conv2d58", 30.66, 11.70), ("mobilenet_v3_small b1 conv2d4", 4.73, 0.40),
            ("mobilenet_v3_small b1 conv2d15", 4.36, 1.70), ("mobilenet_v3_small b1 conv2d20", 7.26, 4.50),
            ("mobilenet_v3_small b1 conv2d25", 4.55, 2.30), ("mobilenet_v3_small b1 conv2d30", 5.46, 2.80),
            ("mobilenet_v3_small b1 conv2d35", 6.23, 5.10), ("mobilenet_v3_small b1 conv2d40", 9.09, 5.90),
            ("mobilenet_v3_small b32 conv2d4", 5.41, 1.70), ("mobilenet_v3_small b32 conv2d15", 6.84, 2.10),
            ("mobilenet_v3_small b32 conv2d20", 14.75, 5.70), ("mobilenet_v3_small b32 conv2d25", 8.45, 2.90),
            ("mobilenet_v3_small b32 conv2d30", 10.22, 3.60), ("mobilenet_v3_small b32 conv2d35", 10.56, 5.10),
            ("mobilenet_v3_small b32 conv2d40", 21.53, 9.50),
        ),
        streaming=(
            ("efficientnet_b0 b32 multiply2", 102764544, 28.14, 4.8e12),
            ("efficientnet_b0 b32 multiply6", 77082624, 22.45, 4.8e12),
            ("efficientnet_b0 b32 multiply9", 115623936, 32.10, 4.8e12),
            ("efficientnet_b0 b32 multiply14", 48199680, 12.75, 4.8e12),
        ),
        smallest=(
            ("efficientnet_b0 b1 multiply27", 4.47), ("mobilenet_v3_large b1 multiply19", 4.82),
            ("regnet_y_400mf b1 multiply2", 4.59), ("ghostnet_100 b1 multiply10", 3.77),
            ("mobilenet_v3_small b1 multiply9", 4.44),
        ),
    ),
}


def _from_file(name: str, **lists: str) -> Calibration:
    """A calibration whose rows are too many to list here: ``calibration_data/<name>``, as the bench
    script that measured it writes it (its ``source`` names the run and the script). ``lists``: a
    row list read from another key of the file (``streaming="gemm_streaming"``), or none (``""``)."""
    data = json.loads((Path(__file__).parent / "calibration_data" / name).read_text(encoding="utf-8"))
    keys = {key: lists.get(key, key) for key in ("fused", "apart", "streaming", "smallest")}
    return Calibration(source=data["source"], **{field: tuple(tuple(row) for row in data[key]) if key else ()
                                                 for field, key in keys.items()})


#: The Winograd rule's (``winograd_conv.decide``), where "fused" is the plan that replaces and
#: "apart" the plan replaced: the Winograd GEMMs (batched matmuls) against their ImplicitGemm plans,
#: the direct 3x3 stride-1 convolutions against theirs; streaming: the data and output transforms at
#: batch 32; smallest: the transforms at batch 1. VGG-11, ResNet-18/50, DenseNet-121, AlexNet at
#: batch 1 and 32, and eleven more CNNs at batch 32 (bench/winograd_calibration.py).
CALIBRATIONS["WinogradConv2d"] = _from_file("winograd-h200.json")
#: Only the bandwidth a Winograd GEMM's bytes move at (its tile model's error is "fused" above): as
#: "streaming", the GEMMs of that run deep in the memory-bound region: at batch 1, two that stream
#: a 512-channel transformed filter (alpha^2 / 9 = 4 times the direct filter's bytes) and a
#: 3-channel layer's, which writes 21 times its input.
CALIBRATIONS["WinogradGemm"] = _from_file("winograd-h200.json", streaming="gemm_streaming", fused="", apart="",
                                          smallest="")

#: A GEMM prologue that only moves elements (prologue_rule.py's "layout" prologue: a transpose, a
#: reshape, a slice read through the composed index) is weighed with its own calibration: it keeps
#: ``cp.async`` and computes nothing, so the squeeze-and-excitation scales behind
#: ``CALIBRATIONS["ImplicitGemm"]`` (computed prologues, whose fused kernels ran 1.07x their plans'
#: error apart) overcharge it. Keyed by the template and this suffix (:func:`calibration_key`).
LAYOUT_PROLOGUE = "layout prologue"


def calibration_key(template: str, layout_prologue: bool = False) -> str:
    """The key of ``CALIBRATIONS`` a plan of ``template`` is weighed by."""
    return f"{template} {LAYOUT_PROLOGUE}" if layout_prologue else template


_H100_LAYOUT_PROLOGUE = (
    "bench/results/2026-12-07-h100-corpus-12/res/kernels.md (H100, measured per kernel, ViT-B/16 b32: "
    "hw against the pair_cost=false variant, whose only change is the two layout prologues a layer) "
    "against the templates' models at commit ed52ee9 on the nvidia-h100-sxm profile; smallest: "
    "CALIBRATIONS['ImplicitGemm']'s (a launch and its tail, on the H200: no kernel of this run is that small)")

#: ViT-B/16 at batch 32: the attention input's transpose in the qkv projection and the output's
#: transpose + reshape in the output projection, fused; apart, the same GEMMs alone (the copies
#: are streaming kernels, costed at their floor). Streaming: those two copies.
CALIBRATIONS[calibration_key("ImplicitGemm", layout_prologue=True)] = Calibration(
    source=_H100_LAYOUT_PROLOGUE,
    fused=(("vit_b_16 b32 transpose1 + matmul", 6744.79 / 12, 375.53),
           ("vit_b_16 b32 transpose5_reshape4 + matmul3", 2630.08 / 12, 125.94)),
    apart=(("vit_b_16 b32 matmul", 6779.80 / 12, 375.53),
           ("vit_b_16 b32 matmul3", 2651.98 / 12, 125.94)),
    streaming=(("vit_b_16 b32 transpose1", 38731776, 143.02 / 12, 3.35e12),
               ("vit_b_16 b32 transpose5_reshape4", 38731776, 142.15 / 12, 3.35e12)),
    smallest=CALIBRATIONS["ImplicitGemm"].smallest,
)
