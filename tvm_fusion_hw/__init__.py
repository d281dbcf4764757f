"""tvm_fusion_hw: hardware-aware operator fusion for Apache TVM (Relax).

Typical use::

    import onnx, tvm, tvm_fusion_hw as hw
    from tvm.relax.frontend.onnx import from_onnx
    mod = from_onnx(onnx.load("mobilenet_v2.onnx"), keep_params_in_input=True)
    target = hw.target("nvidia-h200")
    pipeline = hw.get_pipeline(target)
    with hw.pass_context(target):  # cp.async where the GPU has it
        ex = tvm.compile(mod, target=target, relax_pipeline=pipeline)
    print(pipeline.fuse_pass.report)

or put ``hw.fusion_pass(target)`` where ``relax.transform.FuseOps()`` stood and
``hw.schedule_pass()`` where ``dlight.ApplyDefaultSchedule`` stood (and ``hw.SafePower()``
before ``LegalizeOps``: CUDA's fast math makes ``power`` of a negative base NaN).

Layers (each imports only those below it): ``hardware`` (profiles, targets, occupancy,
toolchains); ``fusion`` (the pass and its rules) and ``schedules`` (the TIR templates), which meet
only through the protocol in ``plans``; ``pipeline``; then ``feedback``, ``bundle``, the reports
and the CLI. ARCHITECTURE.md draws it.
"""

from .errors import FusionHWError
from .fusion.decisions import Decision, FusionReport
from .fusion.fuse_pass import HardwareAwareFuseOps, last_report
from .fusion.policy import FusionPolicy, PolicyConfig
from .hardware.profile import HardwareProfile, known_profiles, load_profile, load_profile_file
from .hardware.target import profile_of, target
from .pipeline import fusion_pass, get_pipeline, pass_context, schedule_pass, stock_pipeline
from .plans import KernelPlan, TemplatePlanners
from .safe_power import SafePower

__version__ = "0.1.0"

__all__ = [
    "Decision",
    "FusionHWError",
    "FusionPolicy",
    "FusionReport",
    "HardwareAwareFuseOps",
    "HardwareProfile",
    "KernelPlan",
    "PolicyConfig",
    "SafePower",
    "TemplatePlanners",
    "fusion_pass",
    "get_pipeline",
    "known_profiles",
    "last_report",
    "load_profile",
    "load_profile_file",
    "pass_context",
    "profile_of",
    "schedule_pass",
    "stock_pipeline",
    "target",
]
