#!/usr/bin/env python3
"""Time one GEMM kernel under several tiles on a GPU: how the ImplicitGemm cost model is checked.

Two halves, like the benchmark bundle:

``build`` (here, with TVM): for each ``model:batch:kernel`` case, the rule's best-ranked tiles
plus tiles that differ from the best in one choice (thread tile, K step, split K), each scheduled
and built for CUDA, and dlight's ``Matmul`` schedule of the same PrimFunc as the reference. Writes
``<out>/sweep.json`` (shapes, tiles, the model's predicted times) and one library per schedule.
Tiles are ranked and built under ``hw.pass_context`` (``cp.async`` where the GPU has it), as the
plugin's builds are.

``run`` (on the GPU box, with a bundle's runtime-only TVM): random inputs, every library timed with
``time_evaluator`` (median of repeats), checked against the dlight reference; prints a line per
schedule and writes ``sweep_results.json`` and ``sweep.md``.

    python bench/tile_sweep.py build --out .bundle/sweep resnet50:32:fused_conv2d16_add9_batch_norm7_relu7
    python3 bench/tile_sweep.py run --bundle .bundle --sweep .bundle/sweep --out results
"""

import argparse
import dataclasses
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import numpy as np


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


def build(out: Path, cases, top: int, profile: str, tile_changes=()) -> None:
    """Build every case's schedules into ``out``."""
    # pylint: disable=import-outside-toplevel
    import tvm
    from tvm.s_tir import dlight as dl

    import tvm_fusion_hw as hw
    from tvm_fusion_hw.frontend import import_onnx
    from tvm_fusion_hw.models import build as build_model
    from tvm_fusion_hw.pipeline import fused_module
    from tvm_fusion_hw.schedules.gemm.rule import ImplicitGemm

    target = hw.target(profile)
    out.mkdir(parents=True, exist_ok=True)
    rule, entries, modules = ImplicitGemm(), [], {}
    for case in cases:
        model, batch, kernel = case.split(":")
        if (model, batch) not in modules:
            mod = import_onnx(build_model(model, batch=int(batch)), keep_params_in_input=True)
            modules[(model, batch)] = fused_module(mod, target, hw.fusion_pass(target))
        func = modules[(model, batch)][kernel]
        with hw.pass_context(target):  # ranks cp.async tiles as a build does
            problem, tiles = _tiles_to_try(rule, func, target, top, tile_changes)
        schedules = [("dlight", None, dl.gpu.Matmul().apply(func, target, False))]
        schedules += [(f"tile{i}", tile, rule.schedule_tile(func, target, tile)) for i, tile in enumerate(tiles)]
        variants = []
        for name, tile, sch in schedules:
            if sch is None:
                continue
            lib = out / f"{kernel}_b{batch}_{name}.so"
            try:
                with tvm.transform.PassContext(opt_level=3), hw.pass_context(target), target:
                    built = tvm.compile(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}),
                                        target=target)
            except Exception as err:  # pylint: disable=broad-except
                # a hand-made tile (--tile-change) may not lower; the others still count
                print(f"skipped {lib.name}: {type(err).__name__}: {str(err).splitlines()[-1][:200]}", flush=True)
                continue
            built.export_library(str(lib))
            variants.append({"name": name, "file": lib.name,
                             "tile": dataclasses.asdict(tile) if tile is not None else None})
            print(f"built {lib.name}", flush=True)
        entries.append({"case": case, "problem": dataclasses.asdict(problem),
                        "args": [[[int(d) for d in p.ty.shape], str(p.ty.dtype)] for p in func.params],
                        "variants": variants})
    (out / "sweep.json").write_text(json.dumps({"profile": profile, "cases": entries}, indent=1))


def run(bundle: Path, sweep: Path, out: Path, repeat: int) -> None:
    """Time every library of ``sweep`` with the runtime-only TVM of ``bundle``."""
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
    for case in results["cases"]:
        arrays = [rng.uniform(0.5, 1.5, shape).astype(dtype) for shape, dtype in case["args"]]
        reference = None
        for variant in case["variants"]:
            lib = tvm.runtime.load_module(str(sweep / variant["file"]))
            func = lib["main"]
            args = [tvm.runtime.tensor(a, dev) for a in arrays]
            func(*args)
            output = args[-1].numpy()
            if reference is None:
                reference = output
            variant["rel_err"] = float(np.linalg.norm(output - reference) / np.linalg.norm(reference))
            timer = lib.time_evaluator("main", dev, number=10, repeat=repeat, min_repeat_ms=20)
            variant["us"] = float(np.median(timer(*args).results)) * 1e6
            tile = variant["tile"] or {}
            desc = ("{thread_rows}x{thread_cols} threads, {micro_rows}x{micro_cols} per thread, "
                    "BK {depth_step}, split {split_k}, prefetch {prefetch}, model {time_s:.2e} s".format(**tile) if tile else "dlight")
            if tile and tile.get("vector_width", 1) > 1:
                desc += ", 128-bit shared reads"
            if tile and not tile.get("unroll_explicit", True):
                desc += ", unrolled by nvcc"
            if tile and tile.get("async_stages", 0) > 1:
                desc += f", cp.async {tile['async_stages']} stages"
            print(f"{case['case']:60s} {variant['name']:7s} {variant['us']:9.1f} us  err {variant['rel_err']:.1e}  {desc}",
                  flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep_results.json").write_text(json.dumps(results, indent=1))
    write_markdown(results, out / "sweep.md")


def write_markdown(results, path: Path) -> None:
    """One table per case: each schedule's tile, modelled and measured time."""
    lines = ["# ImplicitGemm tile sweep", "",
             "Each kernel alone (time_evaluator median, warm L2). `model`: the cost model's time when "
             "the sweep was built. `dlight`: dlight's Matmul schedule of the same PrimFunc.", ""]
    for case in results["cases"]:
        p = case["problem"]
        lines += [f"## {case['case']}", "", f"S {p['batch']}, I {p['rows']}, J {p['cols']}, K {p['depth']}", "",
                  "| schedule | threads (I x J) | per thread | BK | split K | prefetch (registers or cp.async) | unrolled by | blocks "
                  "| model (us) | measured (us) | rel err vs dlight |",
                  "| --- | --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |"]
        for v in sorted(case["variants"], key=lambda v: v.get("us", float("inf"))):
            t = v["tile"]
            cells = (["dlight"] + ["-"] * 8 if t is None else
                     [v["name"], f"{t['thread_rows']}x{t['thread_cols']}",
                      f"{t['micro_rows']}x{t['micro_cols']}" + (", 128-bit reads" if t.get("vector_width", 1) > 1 else ""),
                      str(t["depth_step"]), str(t["split_k"]),
                      f"cp.async x{t['async_stages']}" if t.get("async_stages", 0) > 1
                      else "yes" if t.get("prefetch") else "no",
                      "TVM" if t.get("unroll_explicit", True) else "nvcc", str(t["blocks"]),
                      f"{t['time_s'] * 1e6:.1f}"])
            lines.append("| " + " | ".join(cells + [f"{v['us']:.1f}", f"{v['rel_err']:.1e}"]) + " |")
        lines.append("")
    path.write_text("\n".join(lines))


def _tile_change(text: str):
    """``FIELD=VALUE[,FIELD=VALUE...]`` -> ``{field: value}``, for GemmTile's choice fields (ints
    and bools); the fields of one change apply together."""
    from tvm_fusion_hw.schedules.gemm.tiles import GemmTile  # pylint: disable=import-outside-toplevel

    types = {f.name: str(f.type) for f in dataclasses.fields(GemmTile) if str(f.type) in ("int", "bool")}
    change = {}
    for item in text.split(","):
        field, _, value = item.partition("=")
        if field not in types or not value:
            raise SystemExit(f"--tile-change {text!r}: expected FIELD=VALUE[,FIELD=VALUE] with FIELD one of "
                             f"{', '.join(types)}")
        change[field] = value.lower() in ("1", "true", "yes") if types[field] == "bool" else int(value)
    return change


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="schedule and build the tiles (needs TVM's compiler)")
    b.add_argument("cases", nargs="+", help="model:batch:kernel")
    b.add_argument("--out", required=True, type=Path)
    b.add_argument("--top", type=int, default=4, help="best-ranked tiles to include")
    b.add_argument("--profile", default="nvidia-h200")
    b.add_argument("--tile-change", action="append", default=[], metavar="FIELD=VALUE",
                   help="also build the best tile with this GemmTile field changed "
                        "(e.g. unroll_explicit=false, depth_step=16); repeatable")
    r = sub.add_parser("run", help="time the built tiles on a GPU")
    r.add_argument("--bundle", required=True, type=Path, help="a benchmark bundle (its runtime-only TVM)")
    r.add_argument("--sweep", required=True, type=Path)
    r.add_argument("--out", required=True, type=Path)
    r.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    if args.command == "build":
        build(args.out, args.cases, args.top, args.profile, [_tile_change(c) for c in args.tile_change])
    else:
        run(args.bundle, args.sweep, args.out, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
