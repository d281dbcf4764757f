"""Every schedule template's kernels of the corpus, built alone for compute-sanitizer on the GPU box.

Whole models under ``compute-sanitizer --tool racecheck`` take over a minute each; this builds the
distinct kernels the plugin's templates schedule (no dlight kernel) into a few libraries that a
runtime-only script runs once each. Here (TVM, nvcc, no GPU)::

    nice -n 5 python bench/sanitize_kernels.py --out .bundle_sanitize            # 43 models, batch 1
    nice -n 5 python bench/sanitize_kernels.py --out .bundle_sanitize --batches 1 32 --models resnet18 bert
    nice -n 5 python bench/sanitize_kernels.py --out .bundle_sanitize --batches 1 32 --rules WindowReduction

then, on the GPU box (Python 3.12 + numpy; the folder carries TVM's runtime and cubins)::

    compute-sanitizer --tool memcheck --error-exitcode 1 python3 .bundle_sanitize/run_kernels.py
    compute-sanitizer --tool racecheck --error-exitcode 1 python3 .bundle_sanitize/run_kernels.py
    # subsets: --rule ImplicitGemm RowReduction, --models resnet18, --limit 20; --list prints the plan

A form whose batch-32 kernel racecheck cannot finish runs as its batch-1 instance: ``--batches 1
--forms-of .bundle_san32/manifest.json k0002_... k0581_...`` applies each named kernel's tile (found
again by its form on its layer) to the same layer at batch 1: the same code a block, a 32 times
smaller grid.

Per model and batch, ``hw.get_pipeline(target, build_kernels=False)`` runs on the lifted module under
``hw.pass_context(target)`` as ``tvm.compile`` runs it (pair retries included); the kernels whose
rule in ``pipeline.schedule_pass.log.rules`` is one of the schedule pass's templates are kept,
deduplicated by ``tvm_ffi.structural_hash`` (names and ``global_symbol`` ignored, equality checked),
renamed ``kNNNN_<first name>``, grouped per template into libraries of ``--chunk`` kernels, built with
``tvm.compile`` under ``hw.pass_context(target)``, exported (``.so.xz``, ``bundle.libraries.export_library``) with
cubins precompiled by nvcc (:func:`tvm_fusion_hw.bundle.cubins.precompile_cuda`, the runner's cache
keys). ``manifest.json`` names each kernel's rule, source models (with the kernel's name there),
argument shapes and dtypes, library and device functions. ``--dry-run`` stops after deduplication.

The whole corpus at batch 1: 1222 distinct kernels (from 1673) in 9 libraries, 22 MiB (16.5 of it
TVM's runtime and the tvm-ffi wheel, about 4.6 KiB a kernel besides), 21 minutes on two shared
cores. Batch 32 has about 7% more (nearly all new: only weight transforms are shared with batch 1).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx

import tvm_fusion_hw as hw
from tvm_fusion_hw.bundle.cubins import precompile_cuda
from tvm_fusion_hw.bundle.runtime import copy_runner, copy_tvm_runtime, fetch_tvm_ffi_wheels
from tvm_fusion_hw.bundle.libraries import cuda_source, export_library
from tvm_fusion_hw.bundle.writer import source_commit
from tvm_fusion_hw.cli import parse_knob
from tvm_fusion_hw.errors import FusionHWError
from tvm_fusion_hw.frontend import import_onnx
from tvm_fusion_hw.guarded_schedule import TemplateFallbackWarning
from tvm_fusion_hw.models import build, corpus
from tvm_fusion_hw.pipeline import fused_module
from tvm_fusion_hw.schedules.base.limits import gpu_limits
from tvm_fusion_hw.schedules.rules import default_rules, opt_in_rules

DEVICE_SCRIPT = Path(__file__).with_name("sanitize_run_kernels.py")
#: Characters of a kernel's first name kept in its bundle name (``k0012_`` + this).
NAME_CHARS = 64
_START = time.time()


def log(msg: str) -> None:
    """One progress line on stderr, with seconds since the start."""
    print(f"[{time.time() - _START:7.1f}s] {msg}", file=sys.stderr, flush=True)


class Kernel:
    """One distinct scheduled PrimFunc (``global_symbol`` dropped) and where it came from."""

    def __init__(self, func: tirx.PrimFunc, rule: str, args: List[Dict[str, object]], plan: str = ""):
        self.func, self.rule, self.args, self.plan = func, rule, args, plan
        self.sources: List[Dict[str, object]] = []
        self.name = ""


def arg_specs(func: tirx.PrimFunc) -> Optional[List[Dict[str, object]]]:
    """Name, shape and dtype of each parameter; None unless all are compact static buffers."""
    specs = []
    for param in func.params:
        ty = param.ty
        if not hasattr(ty, "shape") or not all(isinstance(d, tirx.IntImm) for d in ty.shape):
            return None
        if len(ty.strides) or not (isinstance(ty.elem_offset, tirx.IntImm) and int(ty.elem_offset) == 0):
            return None
        specs.append({"name": param.name, "shape": [int(d) for d in ty.shape], "dtype": str(ty.dtype)})
    return specs


class KernelSet:
    """Distinct kernels, in the order first seen: structural hash, then structural equality."""

    def __init__(self):
        self.kernels: List[Kernel] = []
        self._by_hash: Dict[int, List[Kernel]] = {}
        self.excluded: List[Dict[str, object]] = []

    def add(self, name: str, rule: str, func: tirx.PrimFunc, model: str, batch: int, plan: str = "") -> bool:
        """Record kernel ``name`` of ``model`` at ``batch`` (``plan``: its tile in words); True if it is new."""
        key = func.without_attr("global_symbol")
        source = {"model": model, "batch": batch, "kernel": name}
        bucket = self._by_hash.setdefault(tvm_ffi.structural_hash(key), [])
        for kernel in bucket:
            if tvm_ffi.structural_equal(kernel.func, key):
                kernel.sources.append(source)
                return False
        args = arg_specs(key)
        if args is None:  # the corpus graphs are static: none expected
            self.excluded.append({**source, "rule": rule, "reason": "not all arguments are static compact buffers"})
            return False
        kernel = Kernel(key, rule, args, plan)
        kernel.sources.append(source)
        bucket.append(kernel)
        self.kernels.append(kernel)
        return True


def lifted_corpus_module(model: str, batch: int) -> tvm.IRModule:
    """Corpus ``model`` at ``batch`` imported with its weights as inputs and lifted, as the
    bundle compiles it."""
    return relax.transform.LiftTransformParams()(
        import_onnx(build(f"corpus:{model}", batch=batch), keep_params_in_input=True))


def template_kernels(model: str, batch: int, target: tvm.target.Target, only: Optional[Sequence[str]] = None,
                     knobs: Optional[Dict[str, object]] = None):
    """``({kernel: (rule, PrimFunc, plan)}`` of the template kernels (of the templates named ``only``, when
    given), ``stats)`` of one corpus model at ``batch``: the plugin's pipeline (with the PolicyConfig
    ``knobs``) run as ``tvm.compile`` runs it, read from its schedule log."""
    mod = lifted_corpus_module(model, batch)
    opt_in = [r for r in opt_in_rules() if only and type(r).__name__ in only]
    rules = {"schedules": default_rules() + opt_in} if opt_in else {}
    pipeline = hw.get_pipeline(target, build_kernels=False, **rules, **(knobs or {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TemplateFallbackWarning)
        with hw.pass_context(target), target:
            lowered = pipeline(mod)
    sched = pipeline.schedule_pass
    templates = {type(r).__name__ for r in sched.templates}
    rules = sched.log.rules
    prims = {gv.name_hint: f for gv, f in lowered.functions_items() if isinstance(f, tirx.PrimFunc)}
    picked = {n: (rules[n], f, sched.log.plans.get(n, "")) for n, f in prims.items()
              if rules.get(n) in templates and (not only or rules[n] in only)}
    by_rule: Dict[str, int] = {}
    for name in prims:
        by_rule[rules.get(name, "-")] = by_rule.get(rules.get(name, "-"), 0) + 1
    stats = {"kernels": len(prims), "template_kernels": len(picked),
             "dlight_kernels": sum(1 for n in prims if n in rules and rules[n] not in templates),
             "unscheduled": sorted(n for n in prims if n not in rules),
             "by_rule": dict(sorted(by_rule.items())), "fallbacks": len(sched.log.fallbacks)}
    return picked, stats


def collect(models: Sequence[str], batches: Sequence[int], target, only: Optional[Sequence[str]] = None,
            knobs: Optional[Dict[str, object]] = None) -> tuple:
    """The distinct template kernels (of the templates ``only``, when given) of ``models`` x
    ``batches`` and one row per model x batch."""
    kernels, rows = KernelSet(), []
    jobs = [(m, b) for m in models for b in batches]
    for done, (model, batch) in enumerate(jobs, 1):
        start = time.time()
        try:
            picked, stats = template_kernels(model, batch, target, only, knobs)
        except Exception as err:  # pylint: disable=broad-except
            lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
            rows.append({"model": model, "batch": batch, "error": f"{type(err).__name__}: {(lines or [''])[-1][:300]}"})
            log(f"[{done}/{len(jobs)}] {model} b{batch}: FAILED {rows[-1]['error']}")
            continue
        new = sum(kernels.add(n, rule, f, model, batch, plan) for n, (rule, f, plan) in picked.items())
        rows.append({"model": model, "batch": batch, **stats, "new_kernels": new,
                     "seconds": round(time.time() - start, 1)})
        log(f"[{done}/{len(jobs)}] {model} b{batch}: {stats['template_kernels']} template kernels ({new} new, "
            f"{len(kernels.kernels)} distinct so far), {stats['dlight_kernels']} on dlight, "
            f"{time.time() - start:.1f}s")
    return kernels, rows


def same_form_kernels(manifest_path: Path, names: Sequence[str], batch: int, target) -> tuple:
    """Each kernel ``names`` of another manifest, its tile (found again on the layer it came from,
    by its form) applied to the same layer at ``batch``: a batch-32 kernel that racecheck cannot
    finish, run on the batch-1 problem, whose blocks run the same code a block and whose grid is
    32 times smaller. The guard's check build is skipped (the libraries build them)."""
    other = json.loads(Path(manifest_path).read_text())["kernels"]
    missing = [n for n in names if n not in other]
    if missing:
        raise SystemExit(f"not in {manifest_path}: {', '.join(missing)}")
    rules = {type(r).__name__: r for r in default_rules() + opt_in_rules()}
    kernels, rows, fused = KernelSet(), [], {}

    def fused_funcs(model: str, at: int) -> Dict[str, tirx.PrimFunc]:
        if (model, at) not in fused:
            with hw.pass_context(target):
                mod = fused_module(lifted_corpus_module(model, at), target, hw.fusion_pass(target))
            fused[model, at] = {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}
        return fused[model, at]

    for name in names:
        entry = other[name]
        source, rule = entry["sources"][0], rules[entry["rule"]]
        model, kernel = source["model"], source["kernel"]
        original, func = fused_funcs(model, source["batch"]).get(kernel), fused_funcs(model, batch).get(kernel)
        tile = None if original is None else _tile_of_form(rule, original, target, entry["form"])
        with hw.pass_context(target), target:
            sch = None if tile is None or func is None else rule.schedule_tile(func, target, tile)
        if sch is None:
            reason = ("no such kernel" if original is None or func is None else
                      "no tile of that form" if tile is None else "the tile does not schedule")
            rows.append({"model": model, "batch": batch, "form_of": name, "error": reason})
            log(f"{name}: {model} b{batch} {kernel}: {reason}")
            continue
        plan = f"{schedule_form(entry['rule'], tile.summary())} (the batch-{source['batch']} tile)"
        kernels.add(kernel, entry["rule"], sch.mod["main"].with_attr("tirx.is_scheduled", True), model, batch, plan)
        rows.append({"model": model, "batch": batch, "form_of": name, "kernel": kernel})
        log(f"{name}: {model} b{batch} {kernel}: {plan}")
    return kernels, rows


def _tile_of_form(rule, func: tirx.PrimFunc, target, form: str):
    """The first of ``rule``'s ranked tiles for ``func`` that, scheduled and checked as the
    pipeline does (under ``hw.pass_context``), has the form ``form``; None if none has."""
    def words(text: str) -> set:
        return set(re.findall(r"[\w.]+", text))

    with hw.pass_context(target), target:  # the config reads the context (cp.async)
        config, limits, name = rule.get_config(target), gpu_limits(target), type(rule).__name__
        sch = s_tir.Schedule(rule.prepare(func))
        matched = rule.match(sch, config, limits)
        if matched is None:
            return None
        problem, *blocks = matched
        for tile in rule.rank(problem, limits, config):
            if not words(schedule_form(name, tile.summary())) <= words(form):
                continue  # the check only adds to a tile's words (vector widths, cp.async)
            tried = rule.try_tile(sch, problem, tile, blocks, limits)
            if tried is not None and schedule_form(name, tried[1].summary()) == form:
                return tried[1]
    return None


def name_kernels(kernels: List[Kernel]) -> List[Kernel]:
    """Order by template (then first seen) and name each ``kNNNN_<its first name>``."""
    ordered = sorted(kernels, key=lambda k: k.rule)  # stable: first seen within a template
    for index, kernel in enumerate(ordered):
        kernel.name = f"k{index:04d}_{kernel.sources[0]['kernel'][:NAME_CHARS]}"
    return ordered


def _compile(kernels: Sequence[Kernel], target):
    mod = tvm.IRModule({k.name: k.func.with_attr("global_symbol", k.name) for k in kernels})
    with hw.pass_context(target):
        return tvm.compile(mod, target=target)


def build_library(kernels: List[Kernel], target, errors: List[Dict[str, str]]):
    """One executable of ``kernels``; kernels that fail to build alone are dropped (into
    ``errors``). Returns ``(executable or None, kernels built)``."""
    try:
        return _compile(kernels, target), kernels
    except Exception:  # pylint: disable=broad-except
        kept = []
        for kernel in kernels:
            try:
                _compile([kernel], target)
                kept.append(kernel)
            except Exception as err:  # pylint: disable=broad-except
                errors.append({"kernel": kernel.name, "rule": kernel.rule, "error": str(err).strip()[-300:]})
                log(f"{kernel.name}: does not build: {errors[-1]['error'][-200:]}")
        return (_compile(kept, target) if kept else None), kept


def device_functions(code: str, name: str) -> List[str]:
    """The ``__global__`` functions of CUDA ``code`` that kernel ``name`` launches."""
    found = re.findall(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', code)
    return sorted({f for f in found if f.startswith(name + "_kernel")})


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def write_libraries(out: Path, kernels: List[Kernel], target, chunk: int, precompile: bool, manifest) -> None:
    """Build, export and precompile the libraries; fill the manifest's libraries and kernels."""
    rules = list(dict.fromkeys(k.rule for k in kernels))
    chunks = [(rule, i // chunk, group[i:i + chunk]) for rule in rules
              for group in [[k for k in kernels if k.rule == rule]] for i in range(0, len(group), chunk)]
    sources: Dict[str, str] = {}
    for done, (rule, part, group) in enumerate(chunks, 1):
        start = time.time()
        ex, built = build_library(group, target, manifest["build_errors"])
        if ex is None:
            continue
        stem = f"{rule}_{part:02d}"
        lib = {"name": stem, "rule": rule, **export_library(ex, out, stem, compress=True)}
        code = cuda_source(ex) or ""
        lib["cuda_source_sha256"] = hashlib.sha256(code.encode()).hexdigest()
        sources[lib["cuda_source_sha256"]] = code
        lib["kernels"] = [k.name for k in built]
        manifest["libraries"].append(lib)
        for kernel in built:
            manifest["kernels"][kernel.name].update(library=stem, device_functions=device_functions(code, kernel.name))
        log(f"[{done}/{len(chunks)}] {stem}: {len(built)} kernels built in {time.time() - start:.1f}s, "
            f"stored {lib['stored_bytes'] / 2**20:.2f} MiB")
    for err in manifest["build_errors"]:
        manifest["kernels"].pop(err["kernel"], None)
    if precompile and sources:
        manifest["cubins"] = precompile_cuda(out, sources, str(target.attrs["arch"]), log)


def write_bundle(out: Path, models: Sequence[str], batches: Sequence[int], profile: str = "nvidia-h200",
                 chunk: int = 200, precompile: bool = True, dry_run: bool = False,
                 python_versions: Sequence[str] = ("3.12",),
                 rules: Optional[Sequence[str]] = None, forms_of: Optional[Sequence[str]] = None,
                 knobs: Optional[Dict[str, object]] = None) -> Dict[str, object]:
    """Collect, build and write everything (see the module docstring); returns the manifest.
    ``rules``: only these templates' kernels (default: every template's). ``forms_of``: a manifest
    and kernel names in it, rebuilt at ``batches[0]`` by :func:`same_form_kernels` instead.
    ``knobs``: PolicyConfig fields for the fusion pass (a knob that is off by default, say)."""
    unknown = [m for m in models if m not in corpus.names()]
    if unknown:
        raise SystemExit(f"not corpus models: {', '.join(unknown)}; known: {', '.join(corpus.names())}")
    target = hw.target(profile)
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("*.so"), *out.glob("*.so.xz"), *out.glob("cubin/*"), out / "manifest.json"]:
        if stale.is_file():
            stale.unlink()
    if forms_of:
        kernels, rows = same_form_kernels(Path(forms_of[0]), forms_of[1:], batches[0], target)
    else:
        kernels, rows = collect(models, batches, target, rules, knobs)
    ordered = name_kernels(kernels.kernels)
    manifest = {
        "format": "sanitize-kernels/1", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "tvm_version": tvm.__version__, "commit": source_commit(), "profile": profile,
        "target_kind": "cuda", "target": str(target), "arch": str(target.attrs["arch"]),
        "models": rows, "batches": list(batches), "dry_run": dry_run, "knobs": dict(knobs or {}),
        "kernels": {k.name: {"rule": k.rule, "args": k.args, "sources": k.sources, "arg_bytes": _arg_bytes(k.args),
                             "plan": k.plan, "form": schedule_form(k.rule, k.plan)}
                    for k in ordered},
        "excluded": kernels.excluded, "build_errors": [], "libraries": [],
    }
    by_rule: Dict[str, int] = {}
    for kernel in ordered:
        by_rule[kernel.rule] = by_rule.get(kernel.rule, 0) + 1
    manifest["distinct_by_rule"] = by_rule
    log(f"{len(ordered)} distinct template kernels ({', '.join(f'{r} {n}' for r, n in by_rule.items())}) "
        f"from {sum(len(k.sources) for k in ordered)} in {len(rows)} model x batch")
    if not dry_run:
        copy_tvm_runtime(out / "tvm_runtime")
        wheels = fetch_tvm_ffi_wheels(out / "wheels", python_versions)
        copy_runner(out)  # run_kernels.py loads run.py (its TVM setup, CUDA compiler, library unpacking)
        shutil.copy2(DEVICE_SCRIPT, out / "run_kernels.py")
        manifest["runtime"] = {"tvm": "tvm_runtime", "wheels": [f"wheels/{w}" for w in wheels]}
        write_libraries(out, ordered, target, chunk, precompile, manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))  # compact: about 1 KiB a kernel
    manifest["bundle_bytes"] = _dir_bytes(out)  # the manifest included
    (out / "manifest.json").write_text(json.dumps(manifest))
    failed = [f"{r['model']} b{r['batch']}" for r in rows if "error" in r]
    log(f"{out}: {len(manifest['kernels'])} kernels in {len(manifest['libraries'])} libraries, "
        f"{manifest['bundle_bytes'] / 2**20:.1f} MiB"
        + (f"; models that failed: {', '.join(failed)}" if failed else ""))
    return manifest


def schedule_form(rule: str, plan: str) -> str:
    """The template and its tile without what depends on the problem's size (blocks, waves, the
    modelled time): kernels of one form run the same code a block, so racecheck, which looks for
    hazards on shared memory within a block, can take one of each (the device script's ``--one-per-form``)."""
    form = re.sub(r"(, )?(\d+ blocks|~?model [\d.e+-]+ (us|s)|[\d.e+-]+ waves of resident threads)", "", plan)
    return f"{rule}: {form}"


def _arg_bytes(args: Sequence[Dict[str, object]]) -> int:
    """Device memory the kernel's arguments take."""
    total = 0
    for arg in args:
        size = (tvm.DataType(arg["dtype"]).bits + 7) // 8
        for dim in arg["shape"]:
            size *= dim
        total += size
    return total


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse arguments and write the bundle; 1 if a kernel failed to build."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", default=".bundle_sanitize", help="output folder (ignored by git)")
    ap.add_argument("--models", nargs="+", help="corpus models (default: all)")
    ap.add_argument("--batches", nargs="+", type=int, default=[1])
    ap.add_argument("--profile", default="nvidia-h200")
    ap.add_argument("--chunk", type=int, default=200, help="kernels per library at most")
    ap.add_argument("--no-precompile", action="store_true", help="no cubins (the GPU box compiles)")
    ap.add_argument("--dry-run", action="store_true", help="collect and count only (manifest, no libraries)")
    ap.add_argument("--python", nargs="+", default=["3.12"], help="Python versions of the device's interpreter")
    ap.add_argument("--rules", nargs="+", help="only these templates' kernels (default: every template's); "
                    "an opt-in template named here is added to the pipeline's rules")
    ap.add_argument("--forms-of", nargs="+", metavar=("MANIFEST", "KERNEL"),
                    help="instead of the corpus' kernels: these kernels of another sanitize manifest, each "
                    "rebuilt with its form on its layer at the first of --batches (racecheck of a form whose "
                    "batch-32 kernel takes too long)")
    ap.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                    help="a PolicyConfig field for the fusion pass, as compile's --knob (repeatable)")
    args = ap.parse_args(argv)
    try:
        knobs = dict(parse_knob(k) for k in args.knob)
    except FusionHWError as err:
        ap.error(str(err))
    if args.forms_of is not None and len(args.forms_of) < 2:
        ap.error("--forms-of takes a manifest and at least one kernel name")
    known = [type(r).__name__ for r in default_rules() + opt_in_rules()]
    if args.rules and set(args.rules) - set(known):
        ap.error(f"unknown template(s) {', '.join(sorted(set(args.rules) - set(known)))}; known: {', '.join(known)}")
    manifest = write_bundle(Path(args.out), args.models or corpus.names(), args.batches, args.profile,
                            args.chunk, not args.no_precompile, args.dry_run, args.python, args.rules,
                            args.forms_of, knobs)
    print(f"{args.out}: {len(manifest['kernels'])} distinct template kernels, "
          f"{manifest['bundle_bytes'] / 2**20:.1f} MiB")
    return 1 if manifest["build_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
