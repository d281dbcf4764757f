"""Runtime-only benchmark bundles: compile here, run on a GPU box that has no TVM.

:func:`write_bundle` compiles each model x batch with TVM's stock pipeline and with the
hardware-aware one (and, for CUDA, both again with CUDA graphs), exports the libraries, and writes
everything a bare Python 3.12 + numpy machine needs to run them into one folder:

``manifest.json``
    The profile, TVM version and git commit (``commit``) the bundle was built from, and one
    entry per model x batch: inputs, parameters in the order ``main_transform_params`` takes
    them (with a SHA-256 of each value, so the runner can check that it rebuilt the same weights),
    FLOPs, bytes and the roofline bound on the profile, compile times, and one variant per library
    (extra named variants, ``--variant NAME:MODEL:KEY=VALUE,...``, carry their ``knobs``).
``<model>_b<batch>_<pipeline>[_graph].so[.xz]``, ``<model>_b<batch>_<variant>.so[.xz]``
    The exported libraries. CUDA builds keep CUDA *source* (compiled at load time, by NVRTC or
    nvcc), which is megabytes of text: stored xz-compressed unless ``compress=False``.
``<model>_b<batch>_report.json``
    The hardware-aware fusion report (every decision and group).
``tvm_runtime/tvm``, ``tvm_runtime/typing_extensions.py``, ``wheels/apache_tvm_ffi-*.whl`` (from :mod:`.runtime`)
    The installed ``tvm`` package without ``lib/libtvm_compiler.so`` (and without headers, sources
    and ``__pycache__``), a pure-Python dependency of tvm-ffi, and the tvm-ffi wheel(s).
``builders/tvm_fusion_hw/{errors.py,models/*.py}``
    The ONNX model builders, so the runner rebuilds the exact seeded weights with numpy + onnx.
``run.py``, ``runner_timing.py``, ``runner_report.py``
    ``runner.py`` beside this file and the two files it imports from its folder: loads, checks
    and times everything (``python run.py --out DIR``).
``cubin/<key>.bin.xz`` (from :mod:`.cubins`)
    CUDA binaries compiled here with nvcc, one per distinct CUDA source, for the runner to load
    where the GPU's arch matches (none with ``precompile=False`` or without nvcc).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import numbers
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Optional, Sequence

import numpy as np
import tvm
from onnx import numpy_helper
from tvm import relax

from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.hardware.profile import load_profile
from tvm_fusion_hw.hardware.target import target as hw_target
from tvm_fusion_hw.models import check_name
from tvm_fusion_hw.pipeline import fusion_pass, get_pipeline, pass_context, stock_pipeline
from tvm_fusion_hw.schedules.base.config_changes import config_changes

from .cubins import precompile_cuda
from .emulation import emulated_build, emulation_facts, main_launches, register_cap
from .libraries import cuda_source, export_library, file_stem
from .model_import import import_model, param_roles, tensor_spec
from .runtime import REPO, copy_builders, copy_runner, copy_tvm_runtime, fetch_tvm_ffi_wheels
from .variants import VariantSpec, emulation_knobs, parse_variants, pipeline_knobs, rule_config_changes

DEFAULT_MODELS = ("mobilenet_v2", "resnet50", "squeezenet1_1", "bert_encoder_layer", "relu_add_mul",
                  "eltwise5", "conv_relu_pool", "dw_pw", "layernorm_residual")
DEFAULT_BATCHES = (1, 32)
PIPELINES = ("stock", "hw")
#: Parameters with at most this many elements are written into the manifest verbatim.
_INLINE_MAX = 16


class _Progress:
    """One line per step on stderr, with seconds since the start."""

    def __init__(self, enabled: bool):
        self.enabled, self.start = enabled, time.time()

    def __call__(self, msg: str) -> None:
        if self.enabled:
            print(f"[{time.time() - self.start:7.1f}s] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- model facts
def _main_costs(mod, target, profile, knobs: Optional[Dict[str, object]] = None):
    """FLOPs, compulsory bytes and groups of ``main`` alone (weight transforms excluded), hw grouping
    (with the PolicyConfig ``knobs``)."""
    main_only = mod.clone()
    if "main_transform_params" in [g.name_hint for g in main_only.get_global_vars()]:
        del main_only["main_transform_params"]
    fuse = fusion_pass(profile, **{k: v for k, v in (knobs or {}).items() if k != "schedules"})
    with target:
        tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                                  relax.transform.FoldConstant(), fuse])(main_only)
    groups = fuse.report.groups
    return sum(g.flops for g in groups), sum(g.compulsory_bytes for g in groups), len(groups)


def _make_target(kind: str, profile: str):
    """The profile's CUDA target, or a plain llvm target (the profile then steers fusion only)."""
    if kind == "cuda":
        prof = load_profile(profile)
        if prof.tvm_kind != "cuda":  # the runner loads CUDA and llvm libraries only
            raise FusionHWError(f"bundle --target cuda needs an NVIDIA profile: '{prof.name}' is "
                                f"{prof.display_name} ({prof.tvm_kind}); the bundle's runner runs CUDA "
                                f"or llvm libraries (--target llvm builds this GPU's fusion for the CPU)")
        return hw_target(profile)
    if kind == "llvm":
        return tvm.target.Target({"kind": "llvm"})
    raise FusionHWError(f"bundle target must be one of cuda, llvm; got {kind!r}")


def _pipeline(name: str, tgt, profile: str, knobs: Optional[Dict[str, object]] = None, before_build=()):
    """``stock``: TVM's default pipeline; ``hw``: the same with HardwareAwareFuseOps (and ``knobs``,
    and ``before_build`` passes on its scheduled kernels)."""
    if name == "stock":
        return stock_pipeline(tgt)
    if name == "hw":
        return get_pipeline(tgt, profile=profile, before_build=before_build, **(knobs or {}))
    raise FusionHWError(f"unknown pipeline {name!r}; known: {', '.join(PIPELINES)}")


def compile_entry(out: Path, name: str, batch: int, tgt, profile, pipelines, cuda_graph: bool,
                  compress: bool, log, sources: Optional[Dict[str, str]] = None,
                  extra: Sequence[VariantSpec] = ()) -> Dict[str, object]:
    """Import, lift, compile and export one model x batch; return its manifest entry.

    ``extra`` variants are built like ``hw`` (no CUDA graphs) with their knobs. CUDA sources of
    the built libraries are added to ``sources`` (SHA-256 -> source).
    """
    model, mod, fparams, values = import_model(name, batch)
    file_name = file_stem(name)
    num_input = len(fparams) - len(values)
    roles = param_roles(model)
    # TVM's importer renames some initializers ("onnx::Conv_650" -> "Conv_650"): the runner finds
    # each weight by the name of the ONNX initializer holding the same bytes
    onnx_names = {hashlib.sha256(np.ascontiguousarray(numpy_helper.to_array(t)).tobytes()).hexdigest(): t.name
                  for t in model.graph.initializer}
    params = []
    for var, val in zip(fparams[num_input:], values):
        arr = val.numpy()
        digest = hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()
        spec = {**tensor_spec(var), "role": roles.get(var.name, ""), "sha256": digest,
                "onnx_name": onnx_names.get(digest, var.name)}
        if arr.size <= _INLINE_MAX:
            spec["value"] = arr.reshape(-1).tolist()
        params.append(spec)
    out_vars = [o.name for o in model.graph.output]
    entry = {"model": name, "batch": batch, "seed": 0, "input_seed": 0,
             "inputs": [tensor_spec(v) for v in fparams[:num_input]],
             "params": params, "outputs": out_vars,
             "positive_params": [p["name"] for p in params if p["role"] == "bn_var"],
             "compile_s": {}, "variants": []}
    graph_opts = [False, True] if cuda_graph and tgt.kind.name == "cuda" else [False]
    builds = [(pipe + ("_graph" if use_graph else ""), pipe, use_graph, None)
              for use_graph in graph_opts for pipe in pipelines]
    builds += [(spec.name, "hw", False, spec) for spec in extra]
    for key, pipe, use_graph, spec in builds:
        stem = f"{file_name}_b{batch}_{key}"
        start = time.time()
        knobs = pipeline_knobs(spec) if spec else None
        # fusion_profile / limits / max_registers (bundle.emulation): the variant's own target and
        # fusion profile, and a register cap on its scheduled kernels
        emu = emulation_knobs(spec) if spec else {}
        vtgt, vprofile, limits = emulated_build(emu, tgt, profile) if emu else (tgt, profile, None)
        changes = rule_config_changes(spec) if spec else {}  # RULE.FIELD knobs, for this build only
        # the plugin's builds take its PassContext options (cp.async on sm_80+), as a user's would;
        # stock TVM builds as it comes
        try:
            with tvm.transform.PassContext(config={"relax.backend.use_cuda_graph": use_graph}), \
                    (pass_context(vtgt) if pipe == "hw" else contextlib.nullcontext()), config_changes(changes):
                cap = register_cap(emu, profile, limits) if emu else None
                relax_pipeline = _pipeline(pipe, vtgt, vprofile, knobs, [cap] if cap is not None else [])
                ex = tvm.compile(mod, target=vtgt, relax_pipeline=relax_pipeline)
        except Exception as err:  # pylint: disable=broad-except
            # Stock TVM fails on some models (dlight's Matmul on SE at batch 32): the entry keeps
            # the libraries that built, and the runner compares them with onnxruntime.
            lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
            entry.setdefault("build_errors", {})[key] = f"{type(err).__name__}: {(lines or [''])[-1][:300]}"
            log(f"{name} b{batch}: {key} FAILED to build: {entry['build_errors'][key]}")
            continue
        entry["compile_s"][key] = round(time.time() - start, 3)
        variant = {"name": key, "pipeline": pipe, "cuda_graph": use_graph}
        if pipe == "hw" and not use_graph:
            report = relax_pipeline.fuse_pass.report
            report_file = f"{file_name}_b{batch}_report.json" if spec is None else f"{stem}_report.json"
            (out / report_file).write_text(report.to_json())
            if spec is None:
                entry["report"] = report_file
            else:  # groups of main, as hw_groups counts them
                with config_changes(changes):
                    variant.update(knobs=spec.knobs, report=report_file,
                                   groups=_main_costs(mod, vtgt, vprofile, knobs)[2])
        variant.update(export_library(ex, out, stem, compress))
        code = cuda_source(ex) if sources is not None else None
        variant["launches"] = main_launches(ex, code)  # kernel order of one main run (ncu CSVs)
        if emu:
            variant["emulation"] = emulation_facts(ex, vtgt, emu, relax_pipeline, limits, code, cap)
        if code is not None:
            variant["cuda_source_sha256"] = hashlib.sha256(code.encode()).hexdigest()
            sources[variant["cuda_source_sha256"]] = code
        entry["variants"].append(variant)
        log(f"{name} b{batch}: {key} compiled in {entry['compile_s'][key]:.1f}s, "
            f"{variant['so_bytes'] / 1e6:.2f} MB (stored {variant['stored_bytes'] / 1e6:.2f} MB)")
    flops, nbytes, ngroups = _main_costs(mod, tgt, profile)
    entry.update(flops=flops, bytes=nbytes, hw_groups=ngroups)
    return entry


def _roofline(entry: Dict[str, object], prof) -> None:
    """Add the roofline lower bound (seconds) on the profile to ``entry``."""
    entry["roofline_s"] = max(entry["flops"] / prof.peak_fp32_flop_per_s,
                              entry["bytes"] / prof.dram_bytes_per_s)


def source_commit() -> Optional[str]:
    """The plugin's git commit (``-dirty`` with uncommitted changes to tracked files), or None
    outside a git checkout: tables that re-derive facts from the source (which template took a
    kernel) check it against the commit the bundle was built from."""
    def _git(*args):
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                              timeout=30, check=False)
    try:
        head = _git("rev-parse", "HEAD")
        if head.returncode != 0:
            return None
        dirty = _git("diff", "--quiet", "HEAD").returncode != 0
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty else "")


def _dir_bytes(path: Path) -> int:
    """Total size of the files under ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def write_bundle(out_dir, models: Sequence[str] = DEFAULT_MODELS,
                 batches: Sequence[int] = DEFAULT_BATCHES, profile: str = "nvidia-h200",
                 pipelines: Sequence[str] = PIPELINES, cuda_graph: bool = True,
                 progress: bool = True, target: str = "cuda",
                 python_versions: Sequence[str] = ("3.12",), compress: bool = True,
                 precompile: bool = True, wheel_cache=None,
                 variants: Sequence[object] = ()) -> Dict[str, object]:
    """Compile ``models`` x ``batches`` and write a runtime-only bundle to ``out_dir``.

    Parameters
    ----------
    out_dir : str or Path
        Folder to write (created; files of an earlier bundle there are overwritten).
    models, batches : sequences
        What to compile (names from :func:`tvm_fusion_hw.models.list_models`, ``corpus:NAME`` or ``fuzz:NAME``).
    profile : str
        Hardware profile: the CUDA target for ``target="cuda"``; for ``"llvm"`` only the
        fusion decisions (and the roofline figures) come from it.
    pipelines : sequence of str
        ``"stock"`` (TVM's default) and/or ``"hw"`` (:func:`tvm_fusion_hw.get_pipeline`).
    cuda_graph : bool
        Also build every pipeline with ``relax.backend.use_cuda_graph`` (CUDA targets only).
    target : str
        ``"cuda"`` (for the GPU box) or ``"llvm"`` (to test the runner on this machine).
    python_versions : sequence of str
        Python versions to carry a tvm-ffi wheel for (the runner's interpreter must match one).
    compress : bool
        Store libraries as ``.so.xz`` (the runner unpacks them).
    precompile : bool
        For CUDA, also compile each distinct CUDA source with nvcc here (``cubin/``), so the GPU
        box needs no NVRTC/nvcc time (the runner falls back to compiling if the arch differs).
    variants : sequence of str or VariantSpec
        Extra libraries, ``NAME:MODEL:KEY=VALUE,...`` (see :mod:`tvm_fusion_hw.bundle.variants`):
        ``MODEL`` (one of ``models``) built by the hw pipeline with those knobs, at every batch.

    Returns
    -------
    manifest : dict
        What was written to ``manifest.json``. A model that fails to compile gets an entry with
        ``"error"`` and the others continue.
    """
    for name in models:
        check_name(name)
    bad = [p for p in pipelines if p not in PIPELINES]
    if bad:
        raise FusionHWError(f"unknown pipeline {bad[0]!r}; known: {', '.join(PIPELINES)}")
    extra = parse_variants(variants, models)
    if extra and "hw" not in pipelines:
        raise FusionHWError("--variant needs the hw pipeline (its reference is stock, its baseline hw)")
    bad_batch = [b for b in batches if isinstance(b, bool) or not isinstance(b, numbers.Integral) or b < 1]
    if bad_batch:
        raise FusionHWError(f"batch sizes must be integers of at least 1, got {bad_batch[0]!r}")
    prof = load_profile(profile)  # bad input is refused before anything is written or removed
    tgt = _make_target(target, profile)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise FusionHWError(f"bundle --out {out} is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("*.so"), *out.glob("*.so.xz"), *out.glob("*_report.json"), *out.glob("cubin/*")]:
        stale.unlink()  # an earlier bundle's libraries: the new manifest would not name them
    log = _Progress(progress)
    copy_tvm_runtime(out / "tvm_runtime")
    wheels = fetch_tvm_ffi_wheels(out / "wheels", python_versions, wheel_cache)
    copy_builders(out / "builders")
    copy_runner(out)
    log(f"runtime files written to {out} ({_dir_bytes(out) / 2**20:.1f} MiB)")
    manifest = {
        "format": 1, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "tvm_version": tvm.__version__,
        "host": f"{platform.node()} {platform.machine()} Python {platform.python_version()}",
        "commit": source_commit(),
        "profile": prof.name, "target_kind": target, "target": str(tgt),
        "peak_fp32_flop_per_s": prof.peak_fp32_flop_per_s, "dram_bytes_per_s": prof.dram_bytes_per_s,
        "runtime": {"tvm": "tvm_runtime", "wheels": [f"wheels/{w}" for w in wheels],
                    "builders": "builders"},
        "extra_variants": [v.to_json() for v in extra], "entries": [],
    }
    sources: Dict[str, str] = {}
    for name in models:
        for batch in batches:
            log(f"{name} b{batch}: compiling")
            try:
                entry = compile_entry(out, name, int(batch), tgt, profile, pipelines, cuda_graph,
                                      compress, log, sources, [v for v in extra if v.model == name])
                _roofline(entry, prof)
            except Exception as err:  # pylint: disable=broad-except
                entry = {"model": name, "batch": int(batch), "error": f"{type(err).__name__}: {err}"}
                log(f"{name} b{batch}: FAILED {entry['error'][:300]}")
            manifest["entries"].append(entry)
            (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    if precompile and target == "cuda" and sources:
        manifest["cubins"] = precompile_cuda(out, sources, str(tgt.attrs["arch"]), log)
    manifest["bundle_bytes"] = _dir_bytes(out)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    log(f"bundle complete: {out} {manifest['bundle_bytes'] / 2**20:.1f} MiB")
    return manifest


def bundle_main(argv: Optional[Sequence[str]] = None) -> int:
    """``tvm-fusion-hw bundle``: write a runtime-only benchmark bundle (see :func:`write_bundle`)."""
    parser = argparse.ArgumentParser(
        prog="tvm-fusion-hw bundle", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Compile models with the stock and hardware-aware pipelines and write a "
                    "runtime-only bundle; run it with '<out>/run.py --out DIR' where TVM is absent.")
    parser.add_argument("--out", default=".bundle", help="output folder (default: .bundle here)")
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), help="model names")
    parser.add_argument("--batches", nargs="+", type=int, default=list(DEFAULT_BATCHES), help="batch sizes")
    parser.add_argument("--profile", default="nvidia-h200", help="hardware profile name")
    parser.add_argument("--target", choices=("cuda", "llvm"), default="cuda",
                        help="llvm: a CPU bundle (profile used for fusion decisions only)")
    parser.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph variants")
    parser.add_argument("--python", nargs="+", default=["3.12"], dest="python_versions",
                        help="Python versions of the runner's interpreter (tvm-ffi wheels)")
    parser.add_argument("--no-compress", action="store_true", help="store plain .so files")
    parser.add_argument("--no-precompile", action="store_true",
                        help="do not build CUDA binaries here (the GPU box compiles them)")
    parser.add_argument("--variant", action="append", default=[], dest="variants", metavar="NAME:MODEL:KEY=VALUE,...",
                        help="also build MODEL with the hw pipeline and these knobs: PolicyConfig fields "
                             "(e.g. eltwise5_split:eltwise5:max_depth=1), schedules=RuleA+RuleB, the emulation "
                             "knobs fusion_profile=P, limits=P (P's per-block and per-SM limits on this GPU), "
                             "max_registers=N, or a template's search bound RULE.FIELD=VALUE (e.g. "
                             "ImplicitGemm.long_step_slowdown=0.3); see tvm_fusion_hw.bundle.variants; repeatable")
    parser.add_argument("--torch-only", action="store_true",
                        help="compile no library: the entries (inputs, weights, roofline) that the "
                             "runner's --torch-only times PyTorch on")
    parser.add_argument("--no-stock", action="store_true",
                        help="build no stock library: hw and its variants, checked against hw (a variant's "
                             "comparison, where stock's libraries and binaries would not fit a device call)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    if args.torch_only and args.variants:
        raise FusionHWError("--variant builds a library; --torch-only builds none")
    manifest = write_bundle(args.out, args.models, args.batches, profile=args.profile,
                            pipelines=() if args.torch_only else ("hw",) if args.no_stock else PIPELINES,
                            cuda_graph=not args.no_graph, progress=not args.quiet,
                            target=args.target, python_versions=args.python_versions,
                            compress=not args.no_compress, precompile=not args.no_precompile,
                            variants=args.variants)
    failed = [f"{e['model']} b{e['batch']}" for e in manifest["entries"] if "error" in e]
    print(f"{args.out}: {len(manifest['entries'])} entries, {manifest['bundle_bytes'] / 2**20:.1f} MiB"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(bundle_main())
    except FusionHWError as error:  # one line, as tvm-fusion-hw prints it
        print(f"tvm-fusion-hw: error: {error}", file=sys.stderr)
        sys.exit(2)
