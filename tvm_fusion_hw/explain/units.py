"""How explain's numbers read, in the terminal and on the page alike (one place, so they agree)."""

from __future__ import annotations

from .model import KernelRow, Measured


def flops(value: float) -> str:
    for scale, unit in ((1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} FLOP"


def nbytes(value: float) -> str:
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def seconds(value: float) -> str:
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} us"


def rate(value: float) -> str:
    for scale, unit in ((1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} FLOP/s"


def kib(value: float | None) -> str:
    return "-" if value is None else f"{value / 1024:.1f} KiB"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def registers(kernel: KernelRow) -> str:
    """``~48 estimated, 64 measured`` (the policy's estimate, ptxas' or the metadata's count)."""
    measured: Measured | None = kernel.measured
    return f"~{kernel.estimated_registers} estimated, " + (f"{measured.registers} measured" if measured
                                                            else "not measured")


def roofline(kernel: KernelRow, ridge: float) -> str:
    """FLOPs, bytes, intensity against the ridge point and the regime, in one phrase."""
    if kernel.regime == "symbolic":
        return "symbolic shape: FLOPs and bytes unknown"
    side = "<" if kernel.intensity < ridge else ">="
    return (f"{flops(kernel.flops)}, {nbytes(kernel.compulsory_bytes)}, {kernel.intensity:.3g} FLOP/B "
            f"{side} ridge {ridge:.3g}: {kernel.regime}")


def resources(kernel: KernelRow) -> str:
    """Registers, spills, shared memory and occupancy, as measured (or why not)."""
    m = kernel.measured
    if m is None:
        return f"registers {registers(kernel)}"
    spill = f"{m.spill_bytes} B spilled" + (f", {m.stack_frame_bytes} B stack" if m.stack_frame_bytes else "")
    occ = f"occupancy {percent(m.occupancy)}" + (f" ({m.occupancy_limiter})" if m.occupancy_limiter else "")
    split = f", {m.gpu_functions} GPU functions" if m.gpu_functions > 1 else ""
    return f"registers {registers(kernel)}, {spill}, {kib(m.shared_bytes)} shared, {occ}{split}"


def schedule(kernel: KernelRow) -> str:
    rule = kernel.schedule_rule or "no rule recorded"
    return rule + (f": {kernel.tile}" if kernel.tile else "")
