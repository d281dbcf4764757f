"""TVM targets that carry a hardware profile, and the way back from a target to its profile.

``target("nvidia-h200")`` is a plain ``tvm.target.Target`` (cuda with ``arch``, or rocm with
``mcpu``) whose limits come from the profile and whose ``tag`` is the profile's name, so any
pass that receives the target can find the profile again with :func:`profile_of`.
"""

from __future__ import annotations

from typing import Union

import tvm

from tvm_fusion_hw.errors import FusionHWError

from .profile import VENDOR_NAMES, HardwareProfile, known_profiles, load_profile, registered_profile

#: tvm/src/target/llvm/codegen_amdgpu.cc: the work-group size limit assumed with no GPU to query
ROCM_CODEGEN_MAX_THREADS = 256


def target(name: Union[str, HardwareProfile], host: Union[str, dict, None] = None) -> tvm.target.Target:
    """A TVM Target for a shipped profile name (or a profile), carrying that profile.

    Parameters
    ----------
    name : str or HardwareProfile
        ``"nvidia-h200"``, ``"amd-mi300x"``, ... (see :func:`tvm_fusion_hw.known_profiles`).
    host : str or dict, optional
        The host target; TVM's default (llvm) when omitted.
    """
    profile = load_profile(name) if not isinstance(name, HardwareProfile) else name
    config = dict(profile.target)
    config.update(
        tag=profile.name,
        max_shared_memory_per_block=profile.shared_memory_bytes_per_block,
        max_threads_per_block=profile.max_threads_per_block,
        max_num_threads=profile.max_threads_per_block,
        thread_warp_size=profile.warp_size,
    )
    if profile.tvm_kind == "rocm":
        # Without an AMD GPU present, TVM's AMDGPU codegen compiles every kernel for at most 256
        # work-items ("Cannot get maximum number of threads for AMD codegen"): schedules must not
        # launch more, whatever the hardware allows.
        config["max_threads_per_block"] = config["max_num_threads"] = min(
            profile.max_threads_per_block, ROCM_CODEGEN_MAX_THREADS)
    if profile.tvm_kind == "cuda":  # the rocm target kind has no such options
        config["registers_per_block"] = profile.registers_per_multiprocessor
        config["l2_cache_size_bytes"] = profile.l2_cache_bytes
    if host is not None:
        config["host"] = host if isinstance(host, dict) else {"kind": host}
    try:
        return tvm.target.Target(config)
    except Exception as err:  # pylint: disable=broad-except
        first = (str(err).strip().splitlines() or [type(err).__name__])[-1].split(". ")[0]
        raise FusionHWError(f"profile '{profile.name}': TVM rejects its target {dict(profile.target)}"
                            f"{f' with host {host!r}' if host is not None else ''}: {first}") from None


def check_target_profile(tgt: tvm.target.Target, profile: HardwareProfile) -> None:
    """Refuse a GPU target of another kind than ``profile``'s GPU (a ROCm profile with a CUDA
    target, or the reverse): its kernels would be built for one vendor with the other's limits
    (warp 32 against wavefront 64, shared memory, registers). An llvm target takes any profile
    (the GPU's fusion decisions, built for the CPU)."""
    kind = tgt.kind.name
    if kind in ("cuda", "rocm") and kind != profile.tvm_kind:
        raise FusionHWError(
            f"profile '{profile.name}' is {VENDOR_NAMES[profile.vendor]} GPU "
            f"({profile.tvm_kind}), but the target is {kind}: use a {kind} profile "
            f"({', '.join(n for n in known_profiles() if load_profile(n).tvm_kind == kind)}), "
            f"or the profile's own target, tvm_fusion_hw.target('{profile.name}')")


def profile_of(tgt: tvm.target.Target) -> HardwareProfile:
    """The profile a target made by :func:`target` carries (through its tag)."""
    tag = str(tgt.tag) if tgt.tag else ""
    if registered_profile(tag) is not None:
        return registered_profile(tag)
    if tag not in known_profiles():
        raise FusionHWError(
            f"target {tgt.kind.name} carries no hardware profile (tag '{tag}'); make it with "
            f"tvm_fusion_hw.hardware.target(name), name one of: {', '.join(known_profiles())}"
        )
    return load_profile(tag)


def resolve_profile(spec: Union[tvm.target.Target, HardwareProfile, str]) -> HardwareProfile:
    """Accept a Target, a profile or a profile name (or JSON path) and return the profile."""
    if isinstance(spec, HardwareProfile):
        return spec
    if isinstance(spec, tvm.target.Target):
        return profile_of(spec)
    if isinstance(spec, str):
        return load_profile(spec)
    raise FusionHWError(
        f"expected a tvm.target.Target, a HardwareProfile or a profile name, got {type(spec).__name__}"
    )
