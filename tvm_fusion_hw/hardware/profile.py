"""Hardware profiles: what a GPU has, loaded offline from one JSON file per device.

A profile is the single source of hardware figures for every rule of the plugin. Each file lives
in ``targets/<name>.json``; every numeric field carries its unit in its name (``_bytes``,
``_per_s``, ``_flop_per_s``) and every figure cites its source in ``sources``. Nothing is queried
from a GPU at import time (compare tile-lang's ``carver/arch``): the build host usually has none.

The schema is :data:`NUMERIC_FIELDS` plus the text fields of :class:`HardwareProfile`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Mapping, Union

from tvm_fusion_hw.errors import FusionHWError

#: Every numeric field a profile must carry, with its meaning. "Multiprocessor" is an NVIDIA SM or
#: an AMD CU; "warp" is a warp (32) or a wavefront (64).
NUMERIC_FIELDS: Dict[str, str] = {
    "dram_bytes_per_s": "peak DRAM (HBM/GDDR/LPDDR) bandwidth, bytes per second",
    "peak_fp32_flop_per_s": "peak FP32 FLOP/s on the vector (non-tensor) units, FMA = 2 FLOP",
    "peak_fp16_flop_per_s": "peak dense FP16 FLOP/s on tensor/matrix cores, FMA = 2 FLOP",
    "multiprocessor_count": "number of SMs (NVIDIA) or CUs (AMD)",
    "register_file_bytes_per_multiprocessor": "32-bit register file per SM/CU, bytes",
    "max_registers_per_thread": "most 32-bit registers one thread (lane) may use",
    "register_allocation_granularity": "a thread's register count is rounded up to a multiple of this",
    "shared_memory_bytes_per_multiprocessor": "shared memory (LDS) per SM/CU usable by blocks, bytes",
    "shared_memory_bytes_per_block": "most shared memory one block may use (opt-in limit), bytes",
    "shared_memory_reserved_bytes_per_block": "shared memory the system reserves per resident block",
    "l2_cache_bytes": "last-level on-chip cache (L2), bytes",
    "warp_size": "threads per warp or wavefront",
    "max_threads_per_block": "most threads in one block (workgroup)",
    "max_threads_per_multiprocessor": "most resident threads per SM/CU",
    "max_blocks_per_multiprocessor": "most resident blocks per SM/CU",
}

#: Integer-valued fields (the rest are rates and may be fractional).
INTEGER_FIELDS = frozenset(NUMERIC_FIELDS) - {
    "dram_bytes_per_s",
    "peak_fp32_flop_per_s",
    "peak_fp16_flop_per_s",
}

#: Fields for which 0 is a valid figure (AMD documents no LDS reserved per work-group).
ZERO_ALLOWED_FIELDS = frozenset({"shared_memory_reserved_bytes_per_block"})

TEXT_FIELDS = ("name", "display_name", "vendor", "memory_type")
VENDORS = {"nvidia": "cuda", "amd": "rocm"}
VENDOR_NAMES = {"nvidia": "an NVIDIA", "amd": "an AMD"}
#: The target's architecture key per kind, and the form of its value (``sm_90``, ``gfx942``).
ARCH_KEYS = {"cuda": ("arch", re.compile(r"sm_\d+[af]?"), "sm_90"),
             "rocm": ("mcpu", re.compile(r"gfx[0-9a-f]+"), "gfx942")}

TARGETS_DIR_CANDIDATES = (
    Path(__file__).resolve().parent.parent / "targets",  # installed: package data
    Path(__file__).resolve().parent.parent.parent / "targets",  # source checkout
)


@dataclasses.dataclass(frozen=True)
class HardwareProfile:  # pylint: disable=too-many-instance-attributes
    """The figures of one GPU that the fusion rules read. Units are in the field names."""

    name: str
    display_name: str
    vendor: str
    memory_type: str
    target: Mapping[str, object]
    dram_bytes_per_s: float
    peak_fp32_flop_per_s: float
    peak_fp16_flop_per_s: float
    multiprocessor_count: int
    register_file_bytes_per_multiprocessor: int
    max_registers_per_thread: int
    register_allocation_granularity: int
    shared_memory_bytes_per_multiprocessor: int
    shared_memory_bytes_per_block: int
    shared_memory_reserved_bytes_per_block: int
    l2_cache_bytes: int
    warp_size: int
    max_threads_per_block: int
    max_threads_per_multiprocessor: int
    max_blocks_per_multiprocessor: int
    sources: Mapping[str, str]

    # ---- derived figures -------------------------------------------------------------------
    @property
    def ridge_point_flop_per_byte(self) -> float:
        """FP32 roofline ridge: below this arithmetic intensity a kernel is memory-bound."""
        return self.peak_fp32_flop_per_s / self.dram_bytes_per_s

    @property
    def registers_per_multiprocessor(self) -> int:
        """32-bit registers per SM/CU."""
        return self.register_file_bytes_per_multiprocessor // 4

    @property
    def max_warps_per_multiprocessor(self) -> int:
        """Most resident warps (wavefronts) per SM/CU."""
        return self.max_threads_per_multiprocessor // self.warp_size

    @property
    def tvm_kind(self) -> str:
        """The TVM target kind: ``cuda`` or ``rocm``."""
        return str(self.target["kind"])

    def summary(self) -> str:
        """One line for reports."""
        return (
            f"{self.display_name}: {self.dram_bytes_per_s / 1e12:.2f} TB/s, "
            f"{self.peak_fp32_flop_per_s / 1e12:.1f} FP32 TFLOP/s, ridge "
            f"{self.ridge_point_flop_per_byte:.1f} FLOP/B, {self.multiprocessor_count} "
            f"{'SMs' if self.vendor == 'nvidia' else 'CUs'}, "
            f"{self.shared_memory_bytes_per_block // 1024} KiB shared/block"
        )


def _targets_dir() -> Path:
    for candidate in TARGETS_DIR_CANDIDATES:
        if candidate.is_dir() and any(candidate.glob("*.json")):
            return candidate
    raise FusionHWError(
        "no hardware profiles found: looked in "
        + ", ".join(str(c) for c in TARGETS_DIR_CANDIDATES)
    )


def known_profiles() -> List[str]:
    """Names of the profiles shipped with the plugin, sorted."""
    return sorted(p.stem for p in _targets_dir().glob("*.json"))


def _check_number(path: Path, field: str, value: object) -> Union[int, float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FusionHWError(f"{path}: field '{field}' must be a number, got {value!r}")
    if not math.isfinite(value):  # JSON as Python reads it allows NaN and Infinity
        raise FusionHWError(f"{path}: field '{field}' must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and field not in ZERO_ALLOWED_FIELDS):
        raise FusionHWError(f"{path}: field '{field}' must be positive, got {value!r}")
    if field in INTEGER_FIELDS:
        if float(value) != int(value):
            raise FusionHWError(f"{path}: field '{field}' must be an integer, got {value!r}")
        return int(value)
    return float(value)


def profile_from_dict(data: Mapping[str, object], path: Union[str, Path] = "<dict>") -> HardwareProfile:
    """Validate a parsed profile and build a :class:`HardwareProfile`.

    Raises :class:`FusionHWError` naming the first missing or malformed field.
    """
    path = Path(path)
    if not isinstance(data, Mapping):
        raise FusionHWError(f"{path}: a profile must be a JSON object")
    values: Dict[str, object] = {}
    for field in TEXT_FIELDS:
        if not isinstance(data.get(field), str) or not data[field]:
            raise FusionHWError(f"{path}: field '{field}' is missing or not a non-empty string")
        values[field] = data[field]
    if values["vendor"] not in VENDORS:
        raise FusionHWError(f"{path}: field 'vendor' must be one of {sorted(VENDORS)}")
    target = data.get("target")
    if not isinstance(target, Mapping) or target.get("kind") != VENDORS[str(values["vendor"])]:
        raise FusionHWError(
            f"{path}: field 'target' must be an object with kind "
            f"'{VENDORS[str(values['vendor'])]}' for vendor '{values['vendor']}'"
        )
    arch_key, arch_form, example = ARCH_KEYS[str(target["kind"])]
    if not isinstance(target.get(arch_key), str) or not arch_form.fullmatch(target[arch_key]):
        raise FusionHWError(f"{path}: field 'target' needs '{arch_key}' naming "
                            f"{VENDOR_NAMES[values['vendor']]} GPU architecture (like '{example}') "
                            f"for kind '{target['kind']}', got {target.get(arch_key)!r}")
    values["target"] = dict(target)
    for field in NUMERIC_FIELDS:
        if field not in data:
            raise FusionHWError(f"{path}: field '{field}' is missing ({NUMERIC_FIELDS[field]})")
        values[field] = _check_number(path, field, data[field])
    sources = data.get("sources")
    if not isinstance(sources, Mapping):
        raise FusionHWError(f"{path}: field 'sources' is missing: every figure must cite its source")
    for field in list(NUMERIC_FIELDS) + ["memory_type"]:
        if not isinstance(sources.get(field), str) or not sources[field].strip():
            raise FusionHWError(f"{path}: field 'sources.{field}' is missing: cite where it comes from")
    values["sources"] = dict(sources)
    unknown = set(data) - set(values) - {"notes", "$comment"}
    if unknown:
        raise FusionHWError(f"{path}: unknown field '{sorted(unknown)[0]}'")
    if values["shared_memory_bytes_per_block"] > values["shared_memory_bytes_per_multiprocessor"]:
        raise FusionHWError(
            f"{path}: field 'shared_memory_bytes_per_block' exceeds shared_memory_bytes_per_multiprocessor"
        )
    return HardwareProfile(**values)  # type: ignore[arg-type]


#: Profiles loaded from user files, by name, so a Target tagged with their name maps back.
_USER_PROFILES: Dict[str, HardwareProfile] = {}


def registered_profile(name: str) -> Union[HardwareProfile, None]:
    """A profile loaded from a user file under ``name``, if any."""
    return _USER_PROFILES.get(name)


def load_profile_file(path: Union[str, Path]) -> HardwareProfile:
    """Load and validate one profile file (a user's file is remembered by its name)."""
    path = Path(path)
    if not path.is_file():
        raise FusionHWError(f"profile file not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise FusionHWError(f"{path}: not valid JSON ({err})") from None
    profile = profile_from_dict(data, path)
    if path.resolve().parent not in {c.resolve() for c in TARGETS_DIR_CANDIDATES}:
        if profile.name in known_profiles() and profile != load_profile(profile.name):
            # Targets name their profile: another "nvidia-h200" would change what every later
            # hw.target("nvidia-h200") in this process means.
            raise FusionHWError(f"{path}: named '{profile.name}' like a shipped profile, with other "
                                f"figures; give it a name of its own")
        _USER_PROFILES[profile.name] = profile
    return profile


@lru_cache(maxsize=None)
def load_profile(name: str) -> HardwareProfile:
    """Load a shipped profile by name (``"nvidia-h200"``) or a JSON file by path.

    An unknown name raises :class:`FusionHWError` listing the known ones.
    """
    if isinstance(name, HardwareProfile):
        return name
    if not isinstance(name, str):
        raise FusionHWError(f"a hardware profile name must be a string, got {type(name).__name__}")
    if name.endswith(".json") or "/" in name:
        return load_profile_file(name)
    path = _targets_dir() / f"{name}.json"
    if not path.is_file():
        raise FusionHWError(
            f"unknown hardware profile '{name}'; known: {', '.join(known_profiles())}"
        )
    profile = load_profile_file(path)
    if profile.name != name:
        raise FusionHWError(f"{path}: field 'name' is '{profile.name}', expected '{name}'")
    return profile
