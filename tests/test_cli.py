"""The command line and the library answer bad input with one clear line, and write nothing."""

import json

import pytest

import tvm_fusion_hw as hw
from tvm_fusion_hw.cli import main
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.hardware.profile import TARGETS_DIR_CANDIDATES, known_profiles


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, *fragments):
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0]


def h200_json():
    path = next(d / "nvidia-h200.json" for d in TARGETS_DIR_CANDIDATES if (d / "nvidia-h200.json").exists())
    return json.loads(path.read_text())


def test_missing_onnx_file(capsys, tmp_path):
    out_lib = tmp_path / "lib.so"
    code, _, err = run_cli(capsys, "compile", str(tmp_path / "missing.onnx"), "--export", str(out_lib), "--quiet")
    assert_one_line_error(code, err, "ONNX file not found", "missing.onnx")
    assert not out_lib.exists() and list(tmp_path.iterdir()) == []


def test_file_that_is_not_onnx(capsys, tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_text("this is not a protobuf")
    code, _, err = run_cli(capsys, "compile", str(bad), "--quiet")
    assert_one_line_error(code, err, "is not an ONNX model", "model.onnx")


def test_unknown_target_lists_known_profiles(capsys):
    code, _, err = run_cli(capsys, "compile", "relu_add_mul", "--profile", "nvidia-gtx-480", "--quiet")
    assert_one_line_error(code, err, "unknown hardware profile 'nvidia-gtx-480'", *known_profiles())


def test_unknown_model_lists_the_zoo(capsys):
    code, _, err = run_cli(capsys, "compile", "alexnet", "--quiet")
    assert_one_line_error(code, err, "unknown model 'alexnet'", "mobilenet_v2")


def test_malformed_profile_names_the_field(capsys, tmp_path):
    data = h200_json()
    data["name"] = "broken-gpu"
    del data["dram_bytes_per_s"]
    path = tmp_path / "broken-gpu.json"
    path.write_text(json.dumps(data))
    code, _, err = run_cli(capsys, "compile", "relu_add_mul", "--profile", str(path), "--quiet")
    assert_one_line_error(code, err, "dram_bytes_per_s")


def test_user_profile_file_compiles_and_maps_back(capsys, tmp_path):
    data = h200_json()
    data["name"] = "my-lab-gpu"
    path = tmp_path / "my-lab-gpu.json"
    path.write_text(json.dumps(data))
    report = tmp_path / "out" / "report.json"
    code, out, _ = run_cli(capsys, "compile", "relu_add_mul", "--profile", str(path), "--quiet",
                           "--report-json", str(report))
    assert code == 0, out
    decisions = json.loads(report.read_text())
    assert decisions["profile"] == "my-lab-gpu" and decisions["decisions"]
    assert hw.profile_of(hw.target(str(path))).name == "my-lab-gpu"


def test_compile_prints_decisions_and_exports(capsys, tmp_path):
    lib = tmp_path / "eltwise5.so"
    code, out, err = run_cli(capsys, "compile", "eltwise5", "--export", str(lib))
    assert code == 0
    assert "Hardware-aware fusion on nvidia-h200" in out and "FUSE  [chain]" in out
    assert "[2/2] compile for nvidia-h200" in err
    assert lib.stat().st_size > 0


def test_compile_explains_schedules(capsys):
    code, out, _ = run_cli(capsys, "compile", "dw_pw", "--schedules", "--quiet")
    assert code == 0
    section = out.split("schedules (rule, tile, modelled time):")[1]
    assert "DepthwiseConv: " in section and "ImplicitGemm: " in section and " us" in section


def test_listing_commands(capsys):
    assert run_cli(capsys, "profiles")[1].count("\n") == len(known_profiles())
    assert "mobilenet_v2" in run_cli(capsys, "models")[1]


def test_library_errors_are_fusion_hw_errors(tmp_path):
    with pytest.raises(hw.FusionHWError, match="unknown hardware profile"):
        hw.target("nope")
    with pytest.raises(hw.FusionHWError, match="ONNX file not found"):
        import_onnx(tmp_path / "nope.onnx")
    import tvm

    with pytest.raises(hw.FusionHWError, match="carries no hardware profile"):
        hw.fusion_pass(tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    with pytest.raises(hw.FusionHWError, match="not supported"):
        hw.get_pipeline(tvm.target.Target({"kind": "vulkan"}), profile="nvidia-h200")
