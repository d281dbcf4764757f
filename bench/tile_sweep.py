#!/usr/bin/env python3
"""Time one GEMM kernel under several tiles on a GPU: how the ImplicitGemm cost model is checked
(``build --rule NAME``: another template's ranked tiles, e.g. Attention's).

Two halves, like the benchmark bundle:

``build`` (here, with TVM): for each case, the rule's best-ranked tiles plus tiles that differ
from the best in one choice (thread tile, K step, split K), each scheduled and built for CUDA, and
dlight's ``Matmul`` schedule of the same PrimFunc as the reference. A case is a zoo or corpus
kernel, ``model:batch:kernel``, or a plain matmul, ``gemm:M:N:K`` (``[M, K] x [K, N]``) or
``gemm:M:N:K:S`` (``S`` of them, batched). ``--configs`` builds, instead of the neighbours, each
named :data:`CONFIGS` form of ``GemmConfig``'s best tile (and its ``--top`` tiles): ``old`` is
the template before multi-stage ``cp.async`` (two buffers in static shared memory, K step
rolled), ``new`` today's defaults. Writes ``<out>/sweep.json`` (shapes, tiles, the model's
predicted times) and one library per schedule. Tiles are ranked and built under
``hw.pass_context`` (``cp.async`` where the GPU has it), as the plugin's builds are.
``--runtime`` makes ``<out>`` self-contained: the bundle's runtime-only TVM, tvm-ffi wheel and
runner beside the libraries, and their CUDA precompiled with nvcc (``cubin/``, TVM's flags), so
the GPU box needs neither TVM's compiler nor nvcc.

``run`` (on the GPU box, with a bundle's runtime-only TVM: ``--bundle`` the sweep folder itself
when it was built with ``--runtime``): random inputs, every library timed with ``time_evaluator``
(CUDA events around ``number`` back-to-back launches, the median of ``--repeat`` such
measurements), checked against the dlight reference; prints a line per schedule with its TFLOP/s
and writes ``sweep_results.json`` (again after each case, so a run cut short by a timeout keeps
the cases it timed) and ``sweep.md``.

    python bench/tile_sweep.py build --out .bundle/sweep resnet50:32:fused_conv2d16_add9_batch_norm7_relu7
    python3 bench/tile_sweep.py run --bundle .bundle --sweep .bundle/sweep --out results
    python bench/tile_sweep.py build --out .bundle_gemm_sweep --runtime --configs old new --top 0 \
        gemm:1024:1024:1024 gemm:2048:2048:2048 gemm:4096:4096:4096 gemm:6272:3072:768
    python3 .bundle_gemm_sweep/tile_sweep.py run --bundle .bundle_gemm_sweep --sweep .bundle_gemm_sweep --out results
"""

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

_NEW = {"async_stages": (2, 3, 4), "unroll_async_depth": True, "dynamic_shared_memory": True}
#: Named forms of the rule's ``GemmConfig`` (field changes) that ``--configs`` builds side by side.
CONFIGS = {
    # the template of bench/results/2026-11-30-h200-stop10: 2 cp.async buffers within 48 KiB of
    # static shared memory, the K step's loop rolled
    "old": {"async_stages": (2,), "unroll_async_depth": False, "dynamic_shared_memory": False},
    # 2-4 buffers, dynamic shared memory beyond 48 KiB, K step unrolled (opt-in until measured)
    "new": _NEW,
    "new-warp": {**_NEW, "warp_slow_lanes": (4,)},  # and 32 x 64 warp tiles of 4 x 8 lanes (ranked level)
    # and 8 x 16 thread tiles (128 x 256 blocks, one block an SM)
    "new-big": {**_NEW, "async_micro_shapes": ((8, 16), (16, 8)), "min_resident_blocks": 1},
    # thread tiles of 128 accumulators in 128-thread blocks (cuBLAS's 128 x 128 SIMT tile), ranked
    "wide": {"wide_micro_shapes": ((8, 16), (16, 8))},
    # the epilogue's bias and per-channel operands loaded once a thread, not once an output
    "staged-epilogue": {"stage_epilogue_operands": True},
    "wide-staged-epilogue": {"wide_micro_shapes": ((8, 16), (16, 8)), "stage_epilogue_operands": True},
    # cp.async K loops of one barrier a step, in the default and the 2-4-buffer forms
    "one-barrier": {"one_barrier_steps": True},
    "new-one-barrier": {**_NEW, "one_barrier_steps": True},
    # one of the new form's three changes at a time, to tell which of them wins where
    "stages": {**_NEW, "unroll_async_depth": False},  # 2-4 buffers, dynamic shared memory, rolled
    "stages-static": {**_NEW, "unroll_async_depth": False, "dynamic_shared_memory": False},
    "unrolled": {"async_stages": (2,), "unroll_async_depth": True, "dynamic_shared_memory": False},
    # today's defaults, and with the K-step slowdown that 2026-12-06-gemm-long-steps left off
    "default": {},
    "long-steps": {"long_step_slowdown": 0.3},
}
#: What a config's tile must be to stand for it (its best such tile is built, not its best
#: overall: warp tiles rank level with the tiles they change, and after them)
CONFIG_FORMS = {
    "new-warp": lambda t: t.warp_slow > 0,
    "new-big": lambda t: t.micro_rows * t.micro_cols > 64,
    "wide": lambda t: t.micro_rows * t.micro_cols > 64,
}


def _tiles_to_try(rule, func, target, top, tile_changes=()):
    """The rule's ``top`` tiles, then the best tile with one choice changed (and each of those
    with prefetch flipped), then the best tile with each of ``tile_changes`` (``{field: value}``,
    e.g. a code-generation choice the cost model does not rank), without repeats."""
    from tvm_fusion_hw.schedules.base.limits import gpu_limits  # pylint: disable=import-outside-toplevel

    with target:
        problem, best, _ = rule.schedule_best(func, target)
    ranked = rule.rank(problem, gpu_limits(target), rule.get_config(target))
    chosen, seen = [], set()

    def key(t):
        return (t.thread_rows, t.thread_cols, t.micro_rows, t.micro_cols, t.depth_step, t.split_k,
                t.vector_width, t.unroll_explicit, t.async_stages, t.prefetch)

    def same_but(t, **diff):
        return all(getattr(t, f) == getattr(best, f) for f in
                   ("thread_rows", "thread_cols", "micro_rows", "micro_cols", "depth_step", "split_k",
                    "prefetch") if f not in diff) and all(getattr(t, f) != v for f, v in diff.items())

    neighbours = [t for t in ranked if same_but(t, micro_rows=best.micro_rows, micro_cols=best.micro_cols)
                  or same_but(t, depth_step=best.depth_step) or same_but(t, split_k=best.split_k)
                  or same_but(t, thread_rows=best.thread_rows, thread_cols=best.thread_cols)
                  or same_but(t, prefetch=best.prefetch)]
    flipped = [t for n in neighbours for t in ranked if key(t)[:-1] == key(n)[:-1] and t.prefetch != n.prefetch]
    changed = [dataclasses.replace(best, **change) for change in tile_changes]
    for tile in [best] + ranked[:top] + neighbours + flipped + changed:
        if key(tile) not in seen:
            seen.add(key(tile))
            chosen.append(tile)
    return problem, chosen


def gemm_module(m: int, n: int, k: int, batch: int = 1):
    """A Relax module of one matmul, ``[batch,] M x K`` by ``K x N`` (float32)."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((batch, m, k) if batch > 1 else (m, k), "float32"))
    w = relax.Var("w", relax.TensorType((k, n), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.matmul(x, w)))
        bb.emit_func_output(out)
    return bb.get()


def _case_func(case: str, target, modules):
    """``(PrimFunc, file stem)`` of a case: ``model:batch:kernel`` or ``gemm:M:N:K[:S]``."""
    # pylint: disable=import-outside-toplevel
    import tvm_fusion_hw as hw
    from tvm_fusion_hw.frontend import import_onnx
    from tvm_fusion_hw.models import build as build_model
    from tvm_fusion_hw.pipeline import fused_module

    parts = case.split(":")
    if parts[0] == "gemm":
        if len(parts) not in (4, 5) or not all(p.isdigit() and int(p) > 0 for p in parts[1:]):
            raise SystemExit(f"case {case!r}: expected gemm:M:N:K or gemm:M:N:K:S")
        m, n, k, batch = (int(p) for p in parts[1:] + ["1"] * (5 - len(parts)))
        from tvm import tirx
        funcs = fused_module(gemm_module(m, n, k, batch), target)
        (func,) = [f for f in funcs.functions.values() if isinstance(f, tirx.PrimFunc)]
        return func, f"gemm_{m}x{n}x{k}" + (f"_s{batch}" if batch > 1 else "")
    model, batch, kernel = ":".join(parts[:-2]), parts[-2], parts[-1]  # corpus:NAME:batch:kernel too
    if (model, batch) not in modules:
        mod = import_onnx(build_model(model, batch=int(batch)), keep_params_in_input=True)
        modules[(model, batch)] = fused_module(mod, target, hw.fusion_pass(target))
    return modules[(model, batch)][kernel], case_stem(model, batch, kernel)


def case_stem(model: str, batch, kernel: str) -> str:
    """The file stem of a model's kernel: the model too, since two models' kernels share names
    (ResNet-50's and Inception-v3's Winograd ``matmul`` at batch 1 overwrote each other's libraries)."""
    from tvm_fusion_hw.bundle.libraries import file_stem  # pylint: disable=import-outside-toplevel
    return file_stem(f"{model}_{kernel}_b{batch}")


def _changed(config_name: str):
    """The context in which ImplicitGemm searches with :data:`CONFIGS`' ``config_name`` ("": the defaults)."""
    from tvm_fusion_hw.schedules.base.config_changes import config_changes  # pylint: disable=import-outside-toplevel

    return config_changes({"ImplicitGemm": CONFIGS[config_name] if config_name else {}})


def _configured_tiles(func, target, top: int, configs):
    """``(problem, [(config name, tile)])``: each named config's best tile and its ``top`` next,
    without repeats (a tile two configs share is built once, under the first name)."""
    # pylint: disable=import-outside-toplevel
    from tvm_fusion_hw.schedules.base.limits import gpu_limits
    from tvm_fusion_hw.schedules.gemm.rule import ImplicitGemm

    chosen, seen, problem, rule = [], set(), None, ImplicitGemm()
    for name in configs:
        with target, _changed(name):
            planned = rule.schedule_best(func, target)
            if planned is None:
                continue
            problem, best, _ = planned
            ranked = rule.rank(problem, gpu_limits(target), rule.get_config(target))
        form = CONFIG_FORMS.get(name)
        if form is not None:
            ranked = [t for t in ranked if form(t)]
            if not ranked:
                continue
            best = ranked[0]
        for tile in [best] + ranked[:top]:
            key = json.dumps(dataclasses.asdict(dataclasses.replace(tile, time_s=0.0, score=0.0)), sort_keys=True)
            if key not in seen:
                seen.add(key)
                chosen.append((name, tile))
    return problem, chosen


def build(out: Path, cases, top: int, profile: str, tile_changes=(), configs=(), runtime: bool = False,
          rule_name: str = "ImplicitGemm") -> None:
    """Build every case's schedules into ``out`` (with ``runtime``, also what the GPU box needs).
    ``rule_name``: another template's ranked tiles (its ``top`` best; no GEMM neighbours, no dlight
    reference: the first tile's output is the reference)."""
    # pylint: disable=import-outside-toplevel
    import tvm
    from tvm.s_tir import dlight as dl

    import tvm_fusion_hw as hw
    from tvm_fusion_hw.bundle.libraries import cuda_source
    from tvm_fusion_hw.schedules.base import one_barrier
    from tvm_fusion_hw.schedules.base.limits import gpu_limits
    from tvm_fusion_hw.schedules.gemm.rule import ImplicitGemm
    from tvm_fusion_hw.schedules.rules import rules_named

    target = hw.target(profile)
    out.mkdir(parents=True, exist_ok=True)
    gemm = rule_name == "ImplicitGemm"
    rule = ImplicitGemm() if gemm else rules_named([rule_name])[0]
    entries, modules, sources = [], {}, {}
    # every case's PrimFunc first: a misnamed kernel fails before minutes of builds
    funcs = [(case, *_case_func(case, target, modules)) for case in cases]
    stems = [stem for _, _, stem in funcs]
    if len(set(stems)) < len(stems):
        raise SystemExit(f"cases repeated: {', '.join(sorted({c for c, _, t in funcs if stems.count(t) > 1}))}")
    for case, func, stem in funcs:
        with hw.pass_context(target):  # ranks cp.async tiles as a build does
            if not gemm:
                with target:
                    problem = rule.schedule_best(func, target)[0]
                named = [("", t) for t in rule.rank(problem, gpu_limits(target), rule.get_config(target))[:top]]
            elif configs:
                problem, named = _configured_tiles(func, target, top, configs)
            else:
                problem, tiles = _tiles_to_try(rule, func, target, top, tile_changes)
                named = [("", tile) for tile in tiles]
        schedules = [("dlight", "", None, dl.gpu.Matmul().apply(func, target, False))] if gemm else []
        for i, (config, tile) in enumerate(named):
            with target, _changed(config):
                sch = rule.schedule_tile(func, target, tile)
            schedules.append((f"{config}{i}" if config else f"tile{i}", config, tile, sch))
        variants = []
        for name, config, tile, sch in schedules:
            if sch is None:
                continue
            lib = out / f"{stem}_{name}.so"
            try:
                with tvm.transform.PassContext(opt_level=3), hw.pass_context(target), target:
                    built = tvm.compile(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}),
                                        target=target, tir_pipeline=one_barrier.PIPELINE)
            except Exception as err:  # pylint: disable=broad-except
                # a hand-made tile (--tile-change) may not lower; the others still count
                print(f"skipped {lib.name}: {type(err).__name__}: {str(err).splitlines()[-1][:200]}", flush=True)
                continue
            built.export_library(str(lib))
            code = cuda_source(built)
            if code:
                sources[lib.name] = code
            variants.append({"name": name, "config": config, "file": lib.name,
                             "tile": dataclasses.asdict(tile) if tile is not None else None,
                             "summary": tile.summary() if tile is not None else "dlight",
                             # the runner's cache key: cubin/<key>.bin.xz with --runtime
                             "cubin_key": hashlib.sha256((str(target.attrs["arch"]) + code).encode()).hexdigest()
                             if code else None})
            print(f"built {lib.name}" + (f": {tile.summary()}" if tile is not None else ""), flush=True)
        entries.append({"case": case, "problem": dataclasses.asdict(problem), "flops": problem.flops,
                        "args": [[[int(d) for d in p.ty.shape], str(p.ty.dtype)] for p in func.params],
                        "variants": variants})
    sweep = {"profile": profile, "rule": rule_name, "configs": {name: CONFIGS[name] for name in configs}, "cases": entries}
    (out / "sweep.json").write_text(json.dumps(sweep, indent=1, default=list))
    if runtime:
        _write_runtime(out, sources, str(target.attrs["arch"]))


def _write_runtime(out: Path, sources, arch: str) -> None:
    """The runtime-only TVM, the tvm-ffi wheel, the bundle's runner (``setup_tvm`` and its CUDA
    compile function) and this script into ``out``, a ``manifest.json`` naming them, and each
    library's CUDA precompiled there (``cubin/``)."""
    # pylint: disable=import-outside-toplevel
    import shutil

    from tvm_fusion_hw.bundle.cubins import precompile_cuda
    from tvm_fusion_hw.bundle.runtime import copy_runner, copy_tvm_runtime, fetch_tvm_ffi_wheels

    copy_tvm_runtime(out / "tvm_runtime")
    wheels = fetch_tvm_ffi_wheels(out / "wheels")
    copy_runner(out)
    shutil.copy2(__file__, out / "tile_sweep.py")
    cubins = precompile_cuda(out, sources, arch, lambda msg: print(msg, flush=True))
    manifest = {"runtime": {"tvm": "tvm_runtime", "wheels": [f"wheels/{w}" for w in wheels]}, "cubins": cubins}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{out}: self-contained sweep, {size / 2**20:.1f} MiB", flush=True)


def run(bundle: Path, sweep: Path, out: Path, repeat: int, once: bool = False) -> None:
    """Time every library of ``sweep`` with the runtime-only TVM of ``bundle``; ``once``: launch
    each one time, untimed, for a profiler (``ncu``) to see one launch of every variant."""
    bundle, sweep = bundle.resolve(), sweep.resolve()
    spec = importlib.util.spec_from_file_location("bundle_runner", bundle / "run.py")
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    manifest = json.loads((bundle / "manifest.json").read_text())
    tvm = runner.setup_tvm(bundle, manifest, "cuda", Path(tempfile.mkdtemp(prefix="tile_sweep_")))
    dev = tvm.cuda(0)
    arch = "sm_" + dev.compute_version.replace(".", "")
    compile_cuda, _ = runner.make_cuda_compiler(arch, "auto", bundle)
    tvm.register_global_func("tvm_callback_cuda_compile", compile_cuda, override=True)
    results = json.loads((sweep / "sweep.json").read_text())
    rng = np.random.default_rng(0)
    if not once:
        out.mkdir(parents=True, exist_ok=True)
    for done, case in enumerate(results["cases"]):
        if done and not once:  # the cases timed so far, in case the caller's timeout stops the rest
            (out / "sweep_results.json").write_text(json.dumps(results, indent=1))
        arrays = [rng.uniform(0.5, 1.5, shape).astype(dtype) for shape, dtype in case["args"]]
        reference = None
        for variant in case["variants"]:
            try:
                lib = tvm.runtime.load_module(str(sweep / variant["file"]))
                args = [tvm.runtime.tensor(a, dev) for a in arrays]
                lib["main"](*args)
                output = args[-1].numpy()
            except Exception as err:  # pylint: disable=broad-except
                # one schedule that does not load or launch (a dynamic shared memory size the
                # device refuses, say) is a row of its own; the others still run
                variant["error"] = f"{type(err).__name__}: {str(err).splitlines()[-1][:300]}"
                print(f"{case['case']:44s} {variant['name']:9s} FAILED {variant['error']}", flush=True)
                continue
            if reference is None:
                reference = output
            if once:
                print(f"{case['case']:44s} {variant['name']:9s} launched once", flush=True)
                continue
            variant["rel_err"] = float(np.linalg.norm(output - reference) / np.linalg.norm(reference))
            # on CUDA time_evaluator brackets its `number` launches with CUDA events (TVM's
            # profiling.timer.cuda); the median over `repeat` of them
            timer = lib.time_evaluator("main", dev, number=10, repeat=repeat, min_repeat_ms=20)
            variant["us"] = float(np.median(timer(*args).results)) * 1e6
            flops = case.get("flops") or 2 * np.prod([case["problem"][f] for f in ("batch", "rows", "cols", "depth")])
            variant["tflops"] = float(flops) / (variant["us"] * 1e-6) / 1e12
            tile = variant["tile"] or {}
            if tile and "thread_rows" not in tile:  # another template's tile: its own words
                print(f"{case['case']:44s} {variant['name']:9s} {variant['us']:9.1f} us {variant['tflops']:6.2f} TFLOP/s  "
                      f"err {variant['rel_err']:.1e}  {variant['summary']}", flush=True)
                continue
            desc = ("{thread_rows}x{thread_cols} threads, {micro_rows}x{micro_cols} per thread, "
                    "BK {depth_step}, split {split_k}, prefetch {prefetch}, model {time_s:.2e} s".format(**tile) if tile else "dlight")
            if tile and tile.get("vector_width", 1) > 1:
                desc += ", 128-bit shared reads"
            if tile and not tile.get("unroll_explicit", True):
                desc += ", unrolled by nvcc"
            if tile and tile.get("async_stages", 0) > 1:
                desc += f", cp.async {tile['async_stages']} stages"
            desc += _new_form_words(tile)
            print(f"{case['case']:44s} {variant['name']:9s} {variant['us']:9.1f} us {variant['tflops']:6.2f} TFLOP/s  "
                  f"err {variant['rel_err']:.1e}  {desc}", flush=True)
    if once:
        return
    (out / "sweep_results.json").write_text(json.dumps(results, indent=1))
    write_markdown(results, out / "sweep.md")


def _new_form_words(tile) -> str:
    """The choices of the multi-stage template a tile makes, in words."""
    if not tile:
        return ""
    words = [", K step unrolled" if tile.get("unroll_depth") else "",
             ", dynamic shared memory" if tile.get("shared_scope") == "shared.dyn" else "",
             f", warp tiles of {tile['warp_slow']}x{tile['warp_fast']} lanes" if tile.get("warp_slow") else ""]
    return "".join(words) + f", {tile['shared_bytes'] // 1024} KiB shared"


def write_markdown(results, path: Path) -> None:
    """One table per case: each schedule's tile, modelled and measured time."""
    if results.get("rule", "ImplicitGemm") != "ImplicitGemm":
        lines = [f"# {results['rule']} tile sweep", "", "Each kernel alone (time_evaluator median, warm L2); "
                 "rel err against the first tile.", "", "| case | tile | measured (us) | TFLOP/s | rel err |",
                 "| --- | --- | ---: | ---: | ---: |"]
        lines += [f"| {c['case']} | {v['summary']} | " + (f"{v['us']:.1f} | {v['tflops']:.2f} | {v['rel_err']:.1e} |"
                                                          if "us" in v else f"failed: {v.get('error', '?')} | | |")
                  for c in results["cases"] for v in c["variants"]]
        path.write_text("\n".join(lines) + "\n")
        return
    lines = ["# ImplicitGemm tile sweep", "",
             "Each kernel alone (time_evaluator median, warm L2). `model`: the cost model's time when "
             "the sweep was built. `dlight`: dlight's Matmul schedule of the same PrimFunc.", ""]
    for case in results["cases"]:
        p = case["problem"]
        lines += [f"## {case['case']}", "", f"S {p['batch']}, I {p['rows']}, J {p['cols']}, K {p['depth']}", "",
                  "| schedule | threads (I x J) | per thread | BK | split K | prefetch (registers or cp.async) | unrolled by | blocks "
                  "| shared (KiB) | model (us) | measured (us) | TFLOP/s | rel err vs dlight |",
                  "| --- | --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for v in sorted(case["variants"], key=lambda v: v.get("us", float("inf"))):
            t = v["tile"]
            if "us" not in v:
                lines.append(f"| {v['name']} | failed: {v.get('error', '?')} |")
                continue
            cells = (["dlight"] + ["-"] * 9 if t is None else
                     [v["name"], f"{t['thread_rows']}x{t['thread_cols']}" + (
                         f", warps {t['warp_slow']}x{t['warp_fast']}" if t.get("warp_slow") else ""),
                      f"{t['micro_rows']}x{t['micro_cols']}" + (", 128-bit reads" if t.get("vector_width", 1) > 1 else ""),
                      str(t["depth_step"]) + (" unrolled" if t.get("unroll_depth") else ""), str(t["split_k"]),
                      f"cp.async x{t['async_stages']}" if t.get("async_stages", 0) > 1
                      else "yes" if t.get("prefetch") else "no",
                      "TVM" if t.get("unroll_explicit", True) else "nvcc", str(t["blocks"]),
                      f"{t['shared_bytes'] / 1024:.0f}" + (" dyn" if t.get("shared_scope") == "shared.dyn" else ""),
                      f"{t['time_s'] * 1e6:.1f}"])
            lines.append("| " + " | ".join(cells + [f"{v['us']:.1f}", f"{v.get('tflops', 0):.2f}",
                                                    f"{v['rel_err']:.1e}"]) + " |")
        lines.append("")
    path.write_text("\n".join(lines))


def _tile_change(text: str):
    """``FIELD=VALUE[,FIELD=VALUE...]`` -> ``{field: value}``, for GemmTile's choice fields (ints
    and bools); the fields of one change apply together."""
    from tvm_fusion_hw.schedules.gemm.tiles import GemmTile  # pylint: disable=import-outside-toplevel

    types = {f.name: str(f.type) for f in dataclasses.fields(GemmTile) if str(f.type) in ("int", "bool", "str")}
    change = {}
    for item in text.split(","):
        field, _, value = item.partition("=")
        if field not in types or not value:
            raise SystemExit(f"--tile-change {text!r}: expected FIELD=VALUE[,FIELD=VALUE] with FIELD one of "
                             f"{', '.join(types)}")
        change[field] = (value.lower() in ("1", "true", "yes") if types[field] == "bool"
                         else value if types[field] == "str" else int(value))
    return change


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="schedule and build the tiles (needs TVM's compiler)")
    b.add_argument("cases", nargs="+", help="model:batch:kernel, or gemm:M:N:K[:S]")
    b.add_argument("--out", required=True, type=Path)
    b.add_argument("--top", type=int, default=4, help="best-ranked tiles to include")
    b.add_argument("--profile", default="nvidia-h200")
    b.add_argument("--tile-change", action="append", default=[], metavar="FIELD=VALUE",
                   help="also build the best tile with this GemmTile field changed "
                        "(e.g. unroll_explicit=false, depth_step=16); repeatable")
    b.add_argument("--configs", nargs="+", default=[], choices=sorted(CONFIGS),
                   help="build each named GemmConfig form's best (and --top) tiles instead of the neighbours")
    b.add_argument("--rule", default="ImplicitGemm",
                   help="the template whose ranked tiles to build (default ImplicitGemm; e.g. Attention)")
    b.add_argument("--runtime", action="store_true",
                   help="also write the runtime-only TVM, the runner and precompiled cubins into --out")
    r = sub.add_parser("run", help="time the built tiles on a GPU")
    r.add_argument("--bundle", required=True, type=Path, help="a benchmark bundle (its runtime-only TVM)")
    r.add_argument("--sweep", required=True, type=Path)
    r.add_argument("--out", required=True, type=Path)
    r.add_argument("--repeat", type=int, default=5)
    r.add_argument("--once", action="store_true",
                   help="launch each library once, untimed, and write nothing (under a profiler: ncu)")
    args = parser.parse_args(argv)
    if args.command == "build":
        build(args.out, args.cases, args.top, args.profile, [_tile_change(c) for c in args.tile_change],
              args.configs, args.runtime, args.rule)
    else:
        run(args.bundle, args.sweep, args.out, args.repeat, args.once)
    return 0


if __name__ == "__main__":
    sys.exit(main())
