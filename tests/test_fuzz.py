"""Differential fuzzing of the plugin against stock TVM on random ONNX graphs (NNSmith-style).

Graphs come from :mod:`tvm_fusion_hw.models.fuzz` (element-wise and broadcast ops, reshape,
transpose, concat, slice, reductions, grouped/depthwise/strided/dilated/padded convs, pooling,
matmul and batched matmul, gemm, softmax, LayerNorm, BatchNorm; odd, prime and unit sizes, a
random batch). Properties:

(a) ``hw.get_pipeline(llvm, profile=P)`` compiles every graph, for a random shipped profile P;
(b) its outputs equal stock TVM's (``tvm.compile(mod, target="llvm")``) within fp32 tolerance, on
    inputs searched so that stock's outputs are finite (a difference is then a real bug);
(c) the GPU scheduling path (``hw.get_pipeline(target)`` with the plugin's templates, under
    ``hw.pass_context``) builds for CUDA (an NVIDIA profile, sm_80 to sm_90) and for ROCm (an AMD
    profile, gfx90a/gfx942) without a GPU, and no template fails on a kernel: the fallback to
    dlight (``TemplateFallbackWarning``) keeps the build alive but is the bug this test looks for.
    ``FUZZ_NVCC=1`` also compiles each template kernel's CUDA source with nvcc.

Each example also draws fusion knobs (``KNOB_SETS``). CI runs a fixed number of derandomized
examples (about 2 minutes of CPU for the file); ``FUZZ_EXAMPLES=500`` runs longer. A graph stock
TVM itself cannot import or build is not the plugin's bug: it is skipped (``reject``). Graphs that
once failed are ``fuzz.REGRESSIONS`` and run every time (``REGRESSION_NOTES`` says what each
found). ``python tests/test_fuzz.py 0 300`` runs seeds 0..299 through all three properties and
prints every failure (a campaign that does not stop at the first; :func:`shrink_program` then
removes steps while a failure stays); ``FUZZ_ONLY=llvm``, ``nvidia`` or ``amd`` runs one kind of
check, ``FUZZ_LARGE=1`` the GPU builds on larger graphs (as the GPU property draws them).
"""

from __future__ import annotations

import os
import re
import sys
import traceback
import warnings

import numpy as np
import onnx
import pytest
import tvm
from hypothesis import HealthCheck, event, given, reject, settings
from hypothesis import strategies as st
from tvm import relax

import tvm_fusion_hw as hw
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.guarded_schedule import TemplateFallbackWarning
from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.models import build, fuzz
from tvm_fusion_hw.schedules import PAIR_TEMPLATES, default_rules

LLVM = tvm.target.Target({"kind": "llvm"})
PROFILES = hw.known_profiles()
# first entries are what a failure shrinks to
CUDA_PROFILES = ["nvidia-h200"] + [p for p in PROFILES if p.startswith("nvidia") and p != "nvidia-h200"]
ROCM_PROFILES = ["amd-mi300x"] + [p for p in PROFILES if p.startswith("amd") and p != "amd-mi300x"]
#: fusion knobs (PolicyConfig fields) drawn with each example; the defaults first
KNOB_SETS = [{}, {}, {"pair_templates": tuple(PAIR_TEMPLATES)}, {"max_occupancy_drop": 0.99},
             {"pair_templates": tuple(PAIR_TEMPLATES), "max_occupancy_drop": 0.99},
             {"target_occupancy": 0.25}, {"max_depth": 2}, {"fuse_complex_pairs": False},
             {"injective_epilogues": False}]
TEMPLATES = {type(rule).__name__ for rule in default_rules()}
#: template failures already known (the fallback hands the kernel to dlight): text in the error
#: -> what it is. A template failure not listed here fails the GPU property. (The SE case,
#: "consumers of the cache-write stage that are not properly inlined" from ImplicitGemm on a conv
#: whose epilogue broadcasts its output, was here until 25dce20 kept such epilogues apart.)
KNOWN_TEMPLATE_FAILURES: dict = {}
RTOL = 1e-4
#: examples per property in CI; FUZZ_EXAMPLES overrides
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "0")) or None
FUZZ_SETTINGS = dict(deadline=None, derandomize=True, database=None, print_blob=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                            HealthCheck.filter_too_much])
_FALLBACK = re.compile(r"tvm_fusion_hw: (\S+): (\w+) failed at (\w+) \((.*)\); (.*) took it")


class StockFails(Exception):
    """Stock TVM cannot import, build or run the graph (or gives non-finite outputs): not ours."""


# ---------------------------------------------------------------------------------- harness
def _flatten(value):
    if hasattr(value, "numpy"):
        return [value.numpy()]
    return [array for item in value for array in _flatten(item)]


def _run(ex, feeds):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return _flatten(vm["main"](*[tvm.runtime.tensor(a) for a in feeds]))


def _import(model):
    return import_onnx(model, keep_params_in_input=False)


def stock_outputs(model, input_seed=0):
    """(feeds, stock outputs): inputs searched, shrinking their range, until stock's outputs are
    finite (NNSmith's input search); StockFails where stock cannot import or build the graph."""
    try:
        ex = tvm.compile(_import(model), target="llvm")
    except Exception as err:  # pylint: disable=broad-except
        raise StockFails(f"stock cannot build: {type(err).__name__}: {str(err).splitlines()[-1:]}") from err
    for scale in (1.0, 0.5, 0.1):
        feeds = list(fuzz.example_inputs(model, input_seed, scale).values())
        outs = _run(ex, feeds)
        if all(np.isfinite(o).all() for o in outs):
            return feeds, outs
    raise StockFails("stock outputs are not finite for any input range")


def check_llvm(model, profile, input_seed=0, knobs=None):
    """Properties (a) and (b) for one graph, one profile and fusion ``knobs``."""
    feeds, ref = stock_outputs(model, input_seed)
    pipeline = hw.get_pipeline(LLVM, profile=profile, **(knobs or {}))
    ex = tvm.compile(_import(model), target=LLVM, relax_pipeline=pipeline)
    ours = _run(ex, feeds)
    assert len(ours) == len(ref)
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert a.shape == b.shape, (i, a.shape, b.shape)
        scale = max(1.0, float(np.abs(b).max(initial=0.0)))
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=RTOL * scale, err_msg=f"output {i}, {profile}")


class TemplateFailure(AssertionError):
    """A template failed on a kernel (the fallback hid it from the build)."""


def build_gpu(model, profile, pipeline="plugin", knobs=None):
    """Property (c): build for ``profile``'s GPU the README's way. Returns the template failures
    the fallback mechanism reported, as ``(kernel, rule, stage, error)``.

    ``pipeline``: "plugin" (templates first), "dlight" (plugin's fusion, dlight's schedules) or
    "stock" (TVM's default pipeline), the last two to tell whose bug a failure is. ``FUZZ_NVCC=1``
    also compiles each template kernel's CUDA source with nvcc (``verify="device"``)."""
    target = hw.target(profile)
    verify = "device" if os.environ.get("FUZZ_NVCC") else "build"
    pipe = {"plugin": lambda: hw.get_pipeline(target, verify=verify, **(knobs or {})),
            "stock": lambda: hw.stock_pipeline(target),
            "dlight": lambda: hw.get_pipeline(target, schedules=False, **(knobs or {}))}[pipeline]()
    with warnings.catch_warnings(record=True) as caught, hw.pass_context(target):
        warnings.simplefilter("always")
        tvm.compile(_import(model), target=target, relax_pipeline=pipe)
    found = [_FALLBACK.search(str(w.message)) for w in caught if issubclass(w.category, TemplateFallbackWarning)]
    return [m.groups()[:4] for m in found if m and m.group(2) in TEMPLATES]


def _stock_imports(model):
    try:
        _import(model)
    except Exception as err:  # pylint: disable=broad-except
        raise StockFails(f"TVM cannot import: {err}") from err


def check_gpu(model, profile, knobs=None, known=True):
    """Property (c) for one GPU profile: the build does not raise, and no template fails on a
    kernel (except ``KNOWN_TEMPLATE_FAILURES`` while ``known``). StockFails where the build raises
    and stock TVM's own build fails as well (dlight's bugs, e.g. grouped conv1d on CUDA: a
    cross-thread reduction check)."""
    _stock_imports(model)
    try:
        failures = build_gpu(model, profile, knobs=knobs)
    except Exception:
        try:
            build_gpu(model, profile, "stock")
        except Exception as err:  # pylint: disable=broad-except
            raise StockFails(f"stock fails on {profile} too: {_first_line(err)}") from err
        raise
    new = [f for f in failures if not (known and any(k in f[3] for k in KNOWN_TEMPLATE_FAILURES))]
    if new:
        raise TemplateFailure(f"{profile}: " + "; ".join(f"{k}: {r} failed at {s} ({e})" for k, r, s, e in new))


def _first_line(err):
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    pick = next((ln for ln in lines if re.search(r"(Error|Check failed|error:)", ln)), lines[0] if lines else "")
    return (pick or type(err).__name__)[:300]


# ---------------------------------------------------------------------------------- regressions
#: what each of ``fuzz.REGRESSIONS`` found; ``xfail`` where it is not fixed yet
REGRESSION_NOTES = {
    "se_gate_epilogue": "ImplicitGemm raised (dlight's auto_inline_consumer_chain: 'consumers of the "
                        "cache-write stage that are not properly inlined') on conv+sigmoid+multiply; "
                        "fixed in 25dce20 (broadcasting epilogues stay apart)",
    "broadcast_epilogue": "the same assertion on conv+sub+clip+add where the add broadcasts the "
                          "conv's W=1 to 31; fixed in 25dce20",
    "conv_bn_relu_pool": "25dce20 refused every BatchNormalization epilogue ('writes 1x the conv's "
                         "outputs (a broadcast of them)': batch_norm's statistics counted as output); "
                         "fixed in fusion/policy.py (_widest_output_bytes)",
    "depthwise_conv1d_padded": "stock TVM fails (dlight asserts); the plugin builds it: keep it so",
    "grouped_conv2d_unpadded": "stock TVM fails: dlight's Reduction schedule of an unpadded grouped conv "
                               "fails in LowerCrossThreadReduction ('Cross-thread reduction requires all "
                               "the reduction-related loops to be the deepest'); GuardedSchedule now lowers "
                               "dlight's schedules alone and hands it to GeneralReduction",
    "grouped_conv1d_strided": "the same LowerCrossThreadReduction failure on a grouped conv1d (stock too), "
                              "handed on the same way",
    "matmul_slice_epilogue": "ImplicitGemm (and dlight's Matmul) raised 'consumers of the cache-write stage "
                             "that are not properly inlined' on matmul + strided_slice: TVM annotates a slice "
                             "that keeps the indices element-wise; such epilogues now stay apart "
                             "(fusion/policy.py)",
}
XFAIL: dict = {}  # none left: the two below failed in stock TVM too, until 2026-12-01


def _regression_params():
    for name, program in fuzz.REGRESSIONS.items():
        marks = [pytest.mark.xfail(strict=False, reason=XFAIL[name])] if name in XFAIL else []
        yield pytest.param(program, id=name, marks=marks)


def test_every_regression_has_a_note():
    assert set(fuzz.REGRESSIONS) == set(REGRESSION_NOTES) | set(XFAIL)


@pytest.mark.parametrize("program", list(_regression_params()))
def test_regression_graph(program):
    """Every property, strictly: the GPU builds raise nothing and no template fails on a kernel
    (known or not), and the llvm build equals stock's."""
    model = fuzz.build_model(program)
    for profile in ("nvidia-h200", "amd-mi300x"):
        assert build_gpu(model, profile) == []
    check_llvm(model, "nvidia-h200")


def _epilogues(name):
    target = hw.target("nvidia-h200")
    fuse = hw.fusion_pass(target)
    hw.pipeline.fused_module(_import(fuzz.build_model(fuzz.REGRESSIONS[name])), target, fuse)
    return [d for d in fuse.report.decisions if d.rule == "epilogue"]


def test_batchnorm_stays_a_conv_epilogue():
    """conv -> BatchNormalization fuses (BN's running statistics are no broadcast of the conv's
    outputs), while an SE gate's broadcast multiply stays out of the conv's kernel."""
    decisions = _epilogues("conv_bn_relu_pool")
    bn = [d for d in decisions if "batch_norm" in d.consumer]
    assert bn and all(d.fused for d in bn), [str(d) for d in decisions]
    decisions = _epilogues("se_gate_epilogue")
    gates = [d for d in decisions if d.consumer.startswith("multiply")]
    assert gates and not any(d.fused for d in gates), [str(d) for d in decisions]


# ---------------------------------------------------------------------------------- generator
def test_generated_graphs_are_valid_and_deterministic():
    ops = set()
    for name, program in fuzz.seed_programs(40):
        model = fuzz.build_model(program, name)
        onnx.checker.check_model(model, full_check=True)
        assert model.opset_import[0].version == 17
        assert fuzz.build_model(fuzz.Program.from_json(program.to_json()), name).SerializeToString() \
            == model.SerializeToString()
        assert all(np.prod([d.dim_value for d in vi.type.tensor_type.shape.dim]) <= fuzz.MAX_ELEMS
                   for vi in list(model.graph.output) + list(model.graph.input))
        ops |= {step[0] for step in program.steps}
    # 40 seeds reach most of the generator's operators
    assert len(ops) >= 20, sorted(ops)


def test_write_seed_models(tmp_path):
    paths = fuzz.write_seed_models(tmp_path, 3)
    assert len(paths) == len(fuzz.REGRESSIONS) + 3
    for path in paths:
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
        assert path.with_suffix(".json").is_file()


def test_seed_set_by_name():
    """``fuzz:NAME`` (what the GPU bundle builds) is the seed set's graph of that name."""
    for name, program in fuzz.seed_programs(3) + fuzz.seed_programs(2, large=True)[-1:]:
        assert build(f"fuzz:{name}").SerializeToString() == fuzz.build_model(program, name).SerializeToString()
    for bad, message in (("fuzz:fuzz_seedX", "unknown fuzz graph 'fuzz_seedX'"), ("fuzz:nope", "unknown fuzz")):
        with pytest.raises(FusionHWError, match=message):
            build(bad)
    with pytest.raises(FusionHWError, match="build it at batch 1"):
        build("fuzz:fuzz_seed0001", batch=2)


# ---------------------------------------------------------------------------------- properties
def _events(program):
    """Which operators the examples hold (``--hypothesis-show-statistics`` lists them)."""
    for op in sorted({step[0] for step in program.steps}):
        event(op)
    event(f"{len(program.steps) // 4 * 4}-{len(program.steps) // 4 * 4 + 3} steps")


@settings(max_examples=EXAMPLES or 70, **FUZZ_SETTINGS)
@given(program=fuzz.programs(), profile=st.sampled_from(PROFILES), knobs=st.sampled_from(KNOB_SETS),
       input_seed=st.integers(0, 3))
def test_llvm_pipeline_builds_and_matches_stock(program, profile, knobs, input_seed):
    _events(program)
    try:
        check_llvm(fuzz.build_model(program), profile, input_seed, knobs)
    except StockFails:
        reject()


@settings(max_examples=EXAMPLES or 60, **FUZZ_SETTINGS)
@given(program=fuzz.programs(large=True), cuda=st.sampled_from(CUDA_PROFILES), rocm=st.sampled_from(ROCM_PROFILES),
       knobs=st.sampled_from(KNOB_SETS))
def test_gpu_scheduling_path_builds(program, cuda, rocm, knobs):
    _events(program)
    model = fuzz.build_model(program)
    try:
        check_gpu(model, cuda, knobs)
        check_gpu(model, rocm, knobs)
    except StockFails:
        reject()


# ---------------------------------------------------------------------------------- campaign
def _without_step(program, index):
    """``program`` with step ``index`` removed, later reads of its value redirected to the value
    it read first; None where that no longer applies."""
    graph = fuzz.FuzzGraph(program.seed, program.inputs)
    made = []
    for step in program.steps:
        before = len(graph.values)
        graph.apply(step)
        made.append((before, len(graph.values)))
    start, end = made[index]
    op, args, _ = program.steps[index]
    steps = []
    for i, (sop, sargs, sparams) in enumerate(program.steps):
        if i == index:
            continue
        new_args = []
        for v in sargs:
            if start <= v < end:
                if op == "expose" or not args or v != end - 1:
                    return None
                v = args[0]
            new_args.append(v - (end - start) if v >= end else v)
        steps.append([sop, new_args, sparams])
    candidate = fuzz.Program(program.seed, program.inputs, steps)
    try:
        fuzz.build_model(candidate)
    except ValueError:
        return None
    return candidate if steps else None


def shrink_program(program, fails):
    """Remove steps one at a time while ``fails(program)`` stays true (a greedy delta debugger for
    failures found outside hypothesis)."""
    changed = True
    while changed:
        changed = False
        for index in reversed(range(len(program.steps))):
            candidate = _without_step(program, index)
            if candidate is not None and fails(candidate):
                program, changed = candidate, True
                break
    return program


def campaign(first: int, last: int, max_steps: int = fuzz.MAX_STEPS):
    """Seeds ``first .. last-1`` through all three properties (a profile and knobs per seed);
    print every failure instead of stopping at the first, and for a GPU failure whether the
    plugin's fusion with dlight's schedules builds."""
    failures = 0
    for seed in range(first, last):
        large = bool(os.environ.get("FUZZ_LARGE"))  # larger graphs, compiled only (no llvm check)
        program = fuzz.generate(fuzz.RandomChooser(seed), max_steps, large)
        model = fuzz.build_model(program)
        knobs = KNOB_SETS[seed % len(KNOB_SETS)]
        checks = [("llvm " + PROFILES[seed % len(PROFILES)], lambda p: check_llvm(model, p, seed, knobs))]
        checks += [(p, lambda p: check_gpu(model, p, knobs, known=False)) for p in
                   (CUDA_PROFILES[seed % len(CUDA_PROFILES)], ROCM_PROFILES[seed % len(ROCM_PROFILES)])]
        only = os.environ.get("FUZZ_ONLY")  # "llvm", "nvidia" or "amd": one kind of check
        checks = [c for c in checks if (not only or c[0].startswith(only)) and not (large and c[0].startswith("llvm"))]
        for what, check in checks:
            try:
                check(what.split()[-1])
            except StockFails as err:
                print(f"seed {seed} {what}: stock fails: {err}", flush=True)
            except Exception as err:  # pylint: disable=broad-except
                failures += 1
                note = ""
                if not what.startswith("llvm") and not isinstance(err, TemplateFailure):
                    try:
                        build_gpu(model, what, "dlight", knobs)
                        note = " [plugin fusion + dlight builds: a template bug]"
                    except Exception as err2:  # pylint: disable=broad-except
                        note = f" [plugin fusion + dlight fails too: {_first_line(err2)}]"
                frames = [l.strip() for l in traceback.format_exc().splitlines() if l.startswith('  File "/')]
                print(f"seed {seed} {what} knobs={knobs} FAILED{note}: {program}\n    {type(err).__name__}: "
                      f"{_first_line(err)}\n    " + "\n    ".join(frames[-4:]), flush=True)
    print(f"{failures} failures in seeds {first}..{last - 1}")


if __name__ == "__main__":
    campaign(int(sys.argv[1]), int(sys.argv[2]), *(int(a) for a in sys.argv[3:]))
