"""The depthwise -> pointwise kernels each profile fuses, built for its arch and measured by ptxas.

The fusion decisions rest on the DepthwisePointwise plan (threads, registers estimate, shared
memory); this builds every fused pair kernel a profile's default fusion makes (no GPU needed, nvcc
only) and prints ptxas' registers, spills and shared memory against the plan's, and the occupancy
those give on the profile::

    nice python bench/fused_pair_builds.py corpus:mobilenet_v2 32 nvidia-rtx-3060 nvidia-rtx-4090
"""

from __future__ import annotations

import sys
import warnings

import tvm
from tvm_fusion_hw.schedules import DepthwisePointwise

import tvm_fusion_hw as hw
from tvm_fusion_hw import models, pipeline
from tvm_fusion_hw.feedback.kernel_launches import CUDA_KINDS, device_modules
from tvm_fusion_hw.feedback.kernel_resources import measure_cuda_source
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.hardware.occupancy import occupancy
from tvm_fusion_hw.hardware.profile import load_profile


def cuda_source(executable) -> str:
    """The CUDA source of a built module (its device modules' sources, joined)."""
    return "\n".join(m.inspect_source("") for m in device_modules(executable, CUDA_KINDS))


def pair_builds(name: str, batch: int, profile_name: str) -> list[str]:
    """One line per fused pair kernel of ``name`` at ``batch`` on the profile."""
    mod = import_onnx(models.build(name, batch=batch), name=name)
    target, profile, rule = hw.target(profile_name), load_profile(profile_name), DepthwisePointwise()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fused = pipeline.fused_module(mod, target, hw.fusion_pass(target))
    kernels = {}
    for kernel in dict.fromkeys(pipeline.kernel_names(fused)):
        planned = rule.plan(fused[kernel], target)
        if planned is not None:
            sch = rule.apply(fused[kernel], target, False)
            kernels[kernel] = (planned[1], sch.mod["main"].with_attr("global_symbol", kernel))
    if not kernels:
        return [f"{profile_name} {name} b{batch}: no fused pair"]
    built = tvm.compile(tvm.IRModule({k: f for k, (_, f) in kernels.items()}), target=target)
    report = {k.name: k for k in measure_cuda_source(cuda_source(built), str(target.attrs["arch"]))}
    lines = []
    for kernel, (tile, _) in kernels.items():
        kr = report[f"{kernel}_kernel"]
        occ = occupancy(profile, tile.threads, kr.registers, kr.static_shared_bytes)
        lines.append(f"{profile_name} {name} b{batch} {kernel}: {tile.threads} threads, registers "
                     f"{kr.registers} (plan {tile.registers_estimate}), spills {kr.spill_store_bytes}/"
                     f"{kr.spill_load_bytes} B, shared {kr.static_shared_bytes} B (plan {tile.shared_bytes}), "
                     f"occupancy {occ.occupancy:.0%} (plan {tile.blocks_per_multiprocessor} blocks/SM)")
    return lines


def main() -> int:
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    name, batch = sys.argv[1], int(sys.argv[2])
    for profile in sys.argv[3:]:
        print("\n".join(pair_builds(name, batch, profile)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
