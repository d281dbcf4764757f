"""tvm_fusion_hw: hardware-aware operator fusion for Apache TVM (Relax).

Typical use::

    import onnx, tvm, tvm_fusion_hw as hw
    from tvm.relax.frontend.onnx import from_onnx
    mod = from_onnx(onnx.load("mobilenet_v2.onnx"), keep_params_in_input=True)
    target = hw.target("nvidia-h200")
    with hw.pass_context(target):  # cp.async where the GPU has it
        ex = tvm.compile(mod, target=target, relax_pipeline=hw.get_pipeline(target))
    print(hw.last_report())

or put ``hw.HardwareAwareFuseOps(target)`` where ``relax.transform.FuseOps()`` stood.
"""

from .decisions import Decision, FusionReport
from .errors import FusionHWError
from .fuse_pass import HardwareAwareFuseOps, last_report
from .pipeline import get_pipeline, pass_context, stock_pipeline
from .policy import FusionPolicy, PolicyConfig
from .profile import HardwareProfile, known_profiles, load_profile, load_profile_file
from .target import profile_of, target

__version__ = "0.1.0"

__all__ = [
    "Decision",
    "FusionHWError",
    "FusionPolicy",
    "FusionReport",
    "HardwareAwareFuseOps",
    "HardwareProfile",
    "PolicyConfig",
    "get_pipeline",
    "known_profiles",
    "last_report",
    "load_profile",
    "load_profile_file",
    "pass_context",
    "profile_of",
    "stock_pipeline",
    "target",
]
