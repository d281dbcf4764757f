"""Tests for tvm_fusion_hw.hardware.profile: the shipped hardware profiles and the validator (CPU only)."""

import json

import pytest

import tvm_fusion_hw as hw
import tvm_fusion_hw.hardware.profile as profile_module
from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.hardware.profile import (NUMERIC_FIELDS, HardwareProfile, known_profiles, load_profile, load_profile_file, profile_from_dict)

EXPECTED_PROFILES = {
    "nvidia-h200",
    "nvidia-h100-sxm",
    "nvidia-a100-80gb",
    "nvidia-rtx-4090",
    "nvidia-rtx-3060",
    "nvidia-jetson-agx-orin",
    "amd-mi250x",
    "amd-mi300x",
}

PROFILES = sorted(known_profiles())


def _h200_dict():
    """A fresh, valid profile as a dict (the finished H200 example) to break in tests."""
    path = profile_module._targets_dir() / "nvidia-h200.json"  # pylint: disable=protected-access
    return json.loads(path.read_text(encoding="utf-8"))


def _write(tmp_path, data, name="broken.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


# ---- the shipped profiles ---------------------------------------------------------------------
def test_expected_profiles_are_shipped():
    assert EXPECTED_PROFILES <= set(PROFILES)


@pytest.mark.parametrize("name", PROFILES)
def test_profile_loads_and_validates(name):
    profile = load_profile(name)
    assert isinstance(profile, HardwareProfile)
    assert profile.name == name
    assert profile.tvm_kind in ("cuda", "rocm")
    assert profile.summary().startswith(profile.display_name)


@pytest.mark.parametrize("name", PROFILES)
def test_profile_cites_every_field(name):
    profile = load_profile(name)
    for field in list(NUMERIC_FIELDS) + ["memory_type"]:
        source = profile.sources.get(field)
        assert isinstance(source, str) and len(source.strip()) > 10, (name, field)
    assert not set(profile.sources) - set(NUMERIC_FIELDS) - {"memory_type"}, name


@pytest.mark.parametrize("name", PROFILES)
def test_ridge_point_is_sane(name):
    profile = load_profile(name)
    ridge = profile.ridge_point_flop_per_byte
    assert ridge == pytest.approx(profile.peak_fp32_flop_per_s / profile.dram_bytes_per_s)
    assert 1 < ridge < 100, (name, ridge)


@pytest.mark.parametrize("name", PROFILES)
def test_warp_size_matches_vendor(name):
    profile = load_profile(name)
    assert profile.warp_size == {"nvidia": 32, "amd": 64}[profile.vendor]
    assert profile.tvm_kind == {"nvidia": "cuda", "amd": "rocm"}[profile.vendor]


@pytest.mark.parametrize("name", PROFILES)
def test_derived_figures_are_consistent(name):
    p = load_profile(name)
    # Whole warps per SM/CU, and a block fits on one SM/CU.
    assert p.max_threads_per_multiprocessor % p.warp_size == 0
    assert p.max_threads_per_block <= p.max_threads_per_multiprocessor
    assert p.max_warps_per_multiprocessor * p.warp_size == p.max_threads_per_multiprocessor
    # One thread at its register maximum fits; the granularity divides the maximum's round-up.
    assert p.registers_per_multiprocessor == p.register_file_bytes_per_multiprocessor // 4
    assert p.max_registers_per_thread * p.warp_size <= p.registers_per_multiprocessor
    assert p.register_allocation_granularity <= p.max_registers_per_thread
    # Shared memory: reservation plus the per-block maximum fit in the SM/CU.
    assert (
        p.shared_memory_bytes_per_block + p.shared_memory_reserved_bytes_per_block
        <= p.shared_memory_bytes_per_multiprocessor
    )
    # Tensor/matrix FP16 is faster than vector FP32 everywhere we ship.
    assert p.peak_fp16_flop_per_s > p.peak_fp32_flop_per_s
    assert p.l2_cache_bytes >= 1 << 20


def test_known_architecture_limits():
    """Per-architecture facts that are easy to get wrong (see the sources in each profile)."""
    by_arch = {}
    for name in PROFILES:
        p = load_profile(name)
        arch = p.target.get("arch") or p.target.get("mcpu")
        by_arch.setdefault(arch, set()).add(
            (p.max_threads_per_multiprocessor, p.max_blocks_per_multiprocessor,
             p.shared_memory_bytes_per_multiprocessor, p.shared_memory_bytes_per_block)
        )
    kib = 1024
    expected = {
        "sm_80": (2048, 32, 164 * kib, 163 * kib),
        "sm_86": (1536, 16, 100 * kib, 99 * kib),
        "sm_87": (1536, 16, 164 * kib, 163 * kib),
        "sm_89": (1536, 24, 100 * kib, 99 * kib),
        "sm_90": (2048, 32, 228 * kib, 227 * kib),
        "gfx90a": (2048, 32, 64 * kib, 64 * kib),
        "gfx942": (2048, 32, 64 * kib, 64 * kib),
    }
    for arch, limits in by_arch.items():
        assert limits == {expected[arch]}, arch


# ---- lookup errors -----------------------------------------------------------------------------
def test_unknown_name_lists_known_profiles():
    with pytest.raises(FusionHWError) as info:
        load_profile("nope")
    message = str(info.value)
    assert "nope" in message
    assert "nvidia-h200" in message
    assert "amd-mi300x" in message
    assert "\n" not in message


def test_missing_file_is_reported(tmp_path):
    with pytest.raises(FusionHWError, match="not found"):
        load_profile_file(tmp_path / "absent.json")


# ---- malformed profiles ------------------------------------------------------------------------
def _error_for(tmp_path, data):
    with pytest.raises(FusionHWError) as info:
        load_profile_file(_write(tmp_path, data))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_valid_copy_loads_from_file(tmp_path):
    profile = load_profile_file(_write(tmp_path, _h200_dict(), "copy.json"))
    assert profile.name == "nvidia-h200"


def test_not_json(tmp_path):
    message = _error_for(tmp_path, "{ this is not json")
    assert "not valid JSON" in message
    assert "broken.json" in message


def test_not_an_object(tmp_path):
    assert "JSON object" in _error_for(tmp_path, "[1, 2, 3]")


def test_missing_numeric_field(tmp_path):
    data = _h200_dict()
    del data["l2_cache_bytes"]
    message = _error_for(tmp_path, data)
    assert "'l2_cache_bytes'" in message and "missing" in message


def test_missing_text_field(tmp_path):
    data = _h200_dict()
    del data["memory_type"]
    assert "'memory_type'" in _error_for(tmp_path, data)


def test_string_where_number_belongs(tmp_path):
    data = _h200_dict()
    data["dram_bytes_per_s"] = "4.8 TB/s"
    message = _error_for(tmp_path, data)
    assert "'dram_bytes_per_s'" in message and "number" in message


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("warp_size", 0, "positive"),
        ("multiprocessor_count", 132.5, "integer"),
        ("max_registers_per_thread", True, "number"),
        ("dram_bytes_per_s", -4.8e12, "positive"),
        ("l2_cache_bytes", -1, "positive"),
        ("peak_fp32_flop_per_s", float("inf"), "finite"),
        ("max_threads_per_block", float("nan"), "finite"),
    ],
)
def test_bad_numbers(tmp_path, field, value, words):
    data = _h200_dict()
    data[field] = value
    message = _error_for(tmp_path, data)
    assert f"'{field}'" in message and words in message


def test_zero_reserved_shared_memory_is_allowed(tmp_path):
    """AMD reserves no LDS per work-group: 0 is valid there, and only there."""
    data = _h200_dict()
    data["name"] = "h200-no-reserve"
    data["shared_memory_reserved_bytes_per_block"] = 0
    assert load_profile_file(_write(tmp_path, data)).shared_memory_reserved_bytes_per_block == 0
    data["shared_memory_reserved_bytes_per_block"] = -1024
    assert "'shared_memory_reserved_bytes_per_block'" in _error_for(tmp_path, data)


def test_missing_source(tmp_path):
    data = _h200_dict()
    del data["sources"]["peak_fp32_flop_per_s"]
    message = _error_for(tmp_path, data)
    assert "sources.peak_fp32_flop_per_s" in message


def test_missing_memory_type_source(tmp_path):
    data = _h200_dict()
    data["sources"]["memory_type"] = "   "
    assert "sources.memory_type" in _error_for(tmp_path, data)


def test_missing_sources_object(tmp_path):
    data = _h200_dict()
    del data["sources"]
    assert "'sources'" in _error_for(tmp_path, data)


def test_unknown_field(tmp_path):
    data = _h200_dict()
    data["l3_cache_bytes"] = 1
    assert "'l3_cache_bytes'" in _error_for(tmp_path, data)


def test_target_must_match_vendor(tmp_path):
    data = _h200_dict()
    data["target"] = {"kind": "rocm", "mcpu": "gfx942"}
    assert "'target'" in _error_for(tmp_path, data)


def test_block_shared_memory_cannot_exceed_sm(tmp_path):
    data = _h200_dict()
    data["shared_memory_bytes_per_block"] = data["shared_memory_bytes_per_multiprocessor"] + 1
    assert "'shared_memory_bytes_per_block'" in _error_for(tmp_path, data)


def test_name_must_match_file_stem(tmp_path, monkeypatch):
    data = _h200_dict()
    data["name"] = "something-else"
    targets = tmp_path / "targets"
    targets.mkdir()
    _write(targets, data, "nvidia-h200.json")
    monkeypatch.setattr(profile_module, "TARGETS_DIR_CANDIDATES", (targets,))
    load_profile.cache_clear()
    try:
        with pytest.raises(FusionHWError, match="'name'"):
            load_profile("nvidia-h200")
    finally:
        load_profile.cache_clear()


def test_profile_from_dict_accepts_notes():
    data = _h200_dict()
    data["notes"] = "free text"
    assert profile_from_dict(data).name == "nvidia-h200"


def test_nan_as_json_writes_it(tmp_path):
    """Python's JSON reader takes NaN and Infinity literally: they are refused like other bad figures."""
    text = json.dumps(_h200_dict()).replace('"dram_bytes_per_s": 4800000000000.0', '"dram_bytes_per_s": NaN')
    assert "NaN" in text
    assert "'dram_bytes_per_s' must be a finite number" in _error_for(tmp_path, text)


@pytest.mark.parametrize("target, words", [
    ({"kind": "cuda", "arch": "gfx942"}, "needs 'arch' naming an NVIDIA GPU architecture (like 'sm_90')"),
    ({"kind": "cuda", "arch": 90}, "got 90"),
    ({"kind": "cuda"}, "got None"),
])
def test_target_arch_must_be_the_vendors(tmp_path, target, words):
    data = _h200_dict()
    data["target"] = target
    assert words in _error_for(tmp_path, data)


def test_amd_profile_needs_a_gfx_mcpu(tmp_path):
    data = _h200_dict()
    data.update(vendor="amd", target={"kind": "rocm", "mcpu": "sm_90"})
    assert "needs 'mcpu' naming an AMD GPU architecture (like 'gfx942')" in _error_for(tmp_path, data)


# ---- targets and profiles together ------------------------------------------------------------
@pytest.mark.parametrize("kind, name", [("cuda", "amd-mi300x"), ("rocm", "nvidia-h200"), ("cuda", "amd-mi250x")])
def test_gpu_target_of_another_vendor_is_refused(kind, name):
    import tvm

    from tvm_fusion_hw.hardware.target import check_target_profile

    config = {"kind": kind, "arch": "sm_90"} if kind == "cuda" else {"kind": kind, "mcpu": "gfx942"}
    with pytest.raises(FusionHWError) as info:
        check_target_profile(tvm.target.Target(config), load_profile(name))
    message = str(info.value)
    assert f"profile '{name}'" in message and f"the target is {kind}" in message and "\n" not in message
    check_target_profile(tvm.target.Target({"kind": "llvm"}), load_profile(name))  # any GPU's decisions
    own = "nvidia-h200" if kind == "cuda" else "amd-mi300x"
    check_target_profile(tvm.target.Target(config), load_profile(own))


def test_target_tvm_rejects_is_one_line(tmp_path):
    from tvm_fusion_hw.hardware.target import target

    data = _h200_dict()
    data["name"] = "bad-gpu"  # a user file is remembered by its name: never shadow a shipped one
    data["target"] = {"kind": "cuda", "arch": "sm_90", "cores": 3}
    with pytest.raises(FusionHWError) as info:
        target(load_profile_file(_write(tmp_path, data)))
    assert "TVM rejects its target" in str(info.value) and "'cores'" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_file_may_not_shadow_a_shipped_profile(tmp_path):
    """A user's copy with the shipped name and other figures would change what every later
    hw.target("nvidia-h200") means (targets name their profile): refused. An identical copy loads."""
    assert load_profile_file(_write(tmp_path, _h200_dict(), "same.json")) == load_profile("nvidia-h200")
    data = _h200_dict()
    data["l2_cache_bytes"] = data["l2_cache_bytes"] // 2
    with pytest.raises(FusionHWError, match="named 'nvidia-h200' like a shipped profile"):
        load_profile_file(_write(tmp_path, data, "other.json"))
    assert hw.profile_of(hw.target("nvidia-h200")) == load_profile("nvidia-h200")
