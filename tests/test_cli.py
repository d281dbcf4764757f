"""The command line and the library answer bad input with one clear line, and write nothing."""

import json
import subprocess
import sys
from pathlib import Path

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
    """Exit status 2 and stderr one line, ``tvm-fusion-hw: error: ...``, holding ``fragments``."""
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("tvm-fusion-hw: error: "), err
    for fragment in fragments:
        assert fragment in err, err


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
    assert "[2/2]" not in err  # progress is drawn on a terminal only (tests/test_explain.py)
    assert lib.stat().st_size > 0


def test_compile_explains_schedules(capsys):
    code, out, _ = run_cli(capsys, "compile", "dw_pw", "--schedules", "--quiet")
    assert code == 0
    section = out.split("schedules (rule, tile, modelled time):")[1]
    assert "DepthwiseConv: " in section and "ImplicitGemm: " in section and " us" in section


def test_compile_takes_fusion_knobs(capsys):
    """conv_relu_pool's 3x3 conv: a Winograd decision by default, none with winograd=off."""
    code, out, _ = run_cli(capsys, "compile", "conv_relu_pool", "--quiet")
    assert code == 0 and "winograd" in out
    code, out, _ = run_cli(capsys, "compile", "conv_relu_pool", "--quiet", "--knob", "winograd=off")
    assert code == 0 and "winograd" not in out and "conv2d" in out


@pytest.mark.parametrize("word,fused", [("off", False), ("false", False), ("on", True), ("True", True)])
def test_a_switch_knob_takes_on_and_off(capsys, word, fused):
    """A bool knob written ``off`` is off (it was the text "off", which is true)."""
    code, out, _ = run_cli(capsys, "compile", "bert_encoder_layer", "--quiet", "--knob",
                           f"layout_prologues={word}")
    assert code == 0 and ("layout -> matmul: one kernel" in out) == fused


@pytest.mark.parametrize("knob,words", [("winograd", "--knob takes NAME=VALUE"),
                                        ("layout_prologues=maybe", "layout_prologues is a switch: on or off"),
                                        ("winograd=sometimes", "winograd must be one of auto, always, off"),
                                        ("no_such_knob=1", "no_such_knob")])
def test_bad_knob_is_one_line(capsys, knob, words):
    code, _, err = run_cli(capsys, "compile", "conv_relu_pool", "--quiet", "--knob", knob)
    assert_one_line_error(code, err, words)


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


# ---- bad input, issue 13 item 7: one line, exit status 2, nothing written ------------------------
def _onnx_model(node, opset, ir_version=None, out_shape=(1, 4), domains=()):
    """A one-node ONNX model of ``x`` (1 x 4, float) -> ``y`` at ``opset`` of ONNX's domain."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]
                              + [helper.make_opsetid(d, 1) for d in domains])
    if ir_version:
        model.ir_version = ir_version
    return model


def compile_bad(capsys, tmp_path, model_arg, *extra):
    """``compile`` with both outputs asked for in a folder not made yet: nothing may appear."""
    before = set(tmp_path.rglob("*"))
    code, _, err = run_cli(capsys, "compile", str(model_arg), "--report-json", str(tmp_path / "out" / "r.json"),
                           "--export", str(tmp_path / "out" / "lib.so"), *extra)
    assert set(tmp_path.rglob("*")) == before, "an output file or folder was left behind"
    return code, err


def test_truncated_onnx_file(capsys, tmp_path):
    from tvm_fusion_hw.models import build

    model = build("conv_relu_pool")
    data = model.SerializeToString()
    del model.opset_import[:]  # serialized after the graph: the file cut where the graph ends
    graph_end = model.SerializeToString()
    assert data.startswith(graph_end)
    for cut, words in ((len(data) // 2, "truncated, or not an ONNX protobuf"),
                       (len(graph_end), "must specify opset_import")):
        bad = tmp_path / f"cut{cut}.onnx"
        bad.write_bytes(data[:cut])
        code, err = compile_bad(capsys, tmp_path, bad)  # no --quiet: bad input ends before progress lines
        assert_one_line_error(code, err, str(bad), words)


@pytest.mark.parametrize("content, words", [
    (b"", "the file is empty"),
    (b'{"model": "json, not protobuf"}', "is not an ONNX model (truncated, or not an ONNX protobuf"),
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "is not an ONNX model"),
    (None, "is a directory, not an ONNX file"),
])
def test_file_that_is_not_onnx_writes_nothing(capsys, tmp_path, content, words):
    bad = tmp_path / "model.onnx"
    if content is None:
        bad.mkdir()
    else:
        bad.write_bytes(content)
    code, err = compile_bad(capsys, tmp_path, bad, "--quiet")
    assert_one_line_error(code, err, "model.onnx", words)


def test_onnx_opset_older_than_the_importer(capsys, tmp_path):
    """Opset 1's Reshape takes its shape as an attribute; TVM's importer has Reshape from opset 13
    only and would read the node as Reshape-13 (shape as a second input)."""
    import onnx
    from onnx import helper

    path = tmp_path / "old.onnx"
    onnx.save(_onnx_model(helper.make_node("Reshape", ["x"], ["y"], shape=[4, 1]), 1, ir_version=3,
                          out_shape=(4, 1)), path)
    code, err = compile_bad(capsys, tmp_path, path)
    assert_one_line_error(code, err, "old.onnx: node #0 is Reshape-1 (the model's opset 1)", "from opset 13",
                          "no attribute 'shape'", "convert the model to opset 13 or newer")
    # the same in the library; an opset-1 node that the importer reads as it means still imports
    with pytest.raises(hw.FusionHWError, match="Reshape-1"):
        import_onnx(path)
    relu = tmp_path / "relu1.onnx"
    onnx.save(_onnx_model(helper.make_node("Relu", ["x"], ["y"]), 1, ir_version=3), relu)
    assert "main" in [g.name_hint for g in import_onnx(relu).get_global_vars()]


def test_onnx_input_read_at_another_position(tmp_path):
    """Resize-10's second input is scales; the importer's Resize (opset 18) reads it as roi."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph([helper.make_node("Resize", ["x", "scales"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])],
                              [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")])
    path = tmp_path / "resize10.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)]), path)
    with pytest.raises(hw.FusionHWError, match=r"Resize-10 .* input 2 is 'roi', not 'scales'") as info:
        import_onnx(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("opset, domain, words", [
    (13, "com.example", "node #0 is com.example.Relu, of an operator domain TVM's importer does not read"),
    (99, "", "opset 99 of ONNX's domain is newer than onnx"),
])
def test_onnx_opset_or_domain_unknown(capsys, tmp_path, opset, domain, words):
    import onnx
    from onnx import helper

    path = tmp_path / "m.onnx"
    node = helper.make_node("Relu", ["x"], ["y"], domain=domain)
    onnx.save(_onnx_model(node, opset, domains=[domain] if domain else []), path)
    code, err = compile_bad(capsys, tmp_path, path)
    assert_one_line_error(code, err, words)


@pytest.mark.parametrize("field, value, words", [
    ("l2_cache_bytes", -5, "field 'l2_cache_bytes' must be positive, got -5"),
    ("dram_bytes_per_s", float("nan"), "field 'dram_bytes_per_s' must be a finite number"),
    ("target", {"kind": "cuda", "arch": "gfx942"}, "needs 'arch' naming an NVIDIA GPU architecture"),
    ("target", {"kind": "rocm", "mcpu": "gfx942"}, "must be an object with kind 'cuda' for vendor 'nvidia'"),
    ("target", {"kind": "cuda", "arch": "sm_90", "cores": 3}, "TVM rejects its target"),
])
def test_bad_profile_field_writes_nothing(capsys, tmp_path, field, value, words):
    data = h200_json()
    data["name"] = "bad-gpu"
    data[field] = value
    path = tmp_path / "bad-gpu.json"
    path.write_text(json.dumps(data))
    code, err = compile_bad(capsys, tmp_path, "relu_add_mul", "--profile", str(path))
    assert_one_line_error(code, err, words)


def test_rocm_profile_for_a_cuda_bundle(capsys, tmp_path):
    """The command line's CUDA target with a ROCm profile: a bundle (CUDA unless --target llvm)."""
    out = tmp_path / "bundle"
    code, _, err = run_cli(capsys, "bundle", "--profile", "amd-mi300x", "--out", str(out), "--quiet")
    assert_one_line_error(code, err, "bundle --target cuda needs an NVIDIA profile: 'amd-mi300x'")
    assert not out.exists()


@pytest.mark.parametrize("kind, profile, words", [
    ({"kind": "cuda", "arch": "sm_90"}, "amd-mi300x", "'amd-mi300x' is an AMD GPU (rocm), but the target is cuda"),
    ({"kind": "rocm", "mcpu": "gfx942"}, "nvidia-h200", "'nvidia-h200' is an NVIDIA GPU (cuda), but the target is rocm"),
    ("nvidia-h200", "amd-mi250x", "'amd-mi250x' is an AMD GPU (rocm), but the target is cuda"),
])
def test_library_refuses_a_profile_of_another_vendor(kind, profile, words):
    import tvm

    tgt = hw.target(kind) if isinstance(kind, str) else tvm.target.Target(kind)
    with pytest.raises(hw.FusionHWError) as info:
        hw.get_pipeline(tgt, profile=profile)
    assert words in str(info.value) and "\n" not in str(info.value)
    hw.get_pipeline(tvm.target.Target({"kind": "llvm"}), profile=profile)  # the CPU takes any GPU's decisions


@pytest.mark.parametrize("flags, words", [
    (lambda d: ["--export", str(d)], "is a directory; name a file in it"),
    (lambda d: ["--export", str(d / "lib.so" / "x.so")], "is not a directory"),
    (lambda d: ["--export", str(d / "a"), "--report-json", str(d / "a")], "name the same file"),
])
def test_unwritable_output_is_refused_before_compiling(capsys, tmp_path, flags, words):
    (tmp_path / "lib.so").write_text("a file, not a folder")
    code, _, err = run_cli(capsys, "compile", "relu_add_mul", "--quiet", *flags(tmp_path))
    assert_one_line_error(code, err, words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lib.so"]


def test_failed_write_leaves_no_output(tmp_path):
    """All outputs are written to temporary files first: when one fails, none (nor the folders
    made for them) is left."""
    from tvm_fusion_hw.cli import _write_atomically

    def fail(_tmp):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        _write_atomically([(tmp_path / "new" / "r.json", lambda tmp: Path(tmp).write_text("{}")),
                           (tmp_path / "new" / "deeper" / "lib.so", fail)])
    assert list(tmp_path.iterdir()) == []
    _write_atomically([(tmp_path / "new" / "r.json", lambda tmp: Path(tmp).write_text("{}"))])
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["r.json"]


def test_bad_input_from_the_shell_is_one_line(tmp_path):
    """The installed command, as a shell runs it: one stderr line, status 2, no traceback."""
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08\x07\x12\x05torch:")  # an ONNX header cut short
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "tvm_fusion_hw.cli", "compile", str(bad), "--report-json",
                           str(report)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if "Warning" not in line]  # TVM's own C++ log lines
    assert len(lines) == 1 and lines[0].startswith("tvm-fusion-hw: error: "), done.stderr
    assert "Traceback" not in done.stderr and not report.exists()
