#!/usr/bin/env python3
"""Check and time a tvm_fusion_hw bundle on a machine without TVM (copied into it as run.py).

Needs Python 3.12 (or whatever the bundle carries a tvm-ffi wheel for) and numpy; uses onnx (exact
weights), torch/torchvision (PyTorch columns) and matplotlib (plot) when importable.

    python run.py --out results [--models mobilenet_v2 ...] [--device cuda|cpu] [--repeat 20]
                  [--kernel-profile] [--torch [eager compile compile_graphs]] [--torch-only]
                  [--torch-warm N]

Per model x batch: rebuild the seeded weights, run ``main_transform_params`` once and ``main`` on
seeded inputs for every library, check each against stock, time ``main`` with the VM's
time_evaluator (median of repeats, warm-up excluded), then PyTorch eager / compile / compile with
CUDA graphs (fp32, TF32 off). Writes results.json (after every entry), results.md, results.png.
With --kernel-profile, after timing each library without CUDA graphs, times its kernels one by one
(runner_timing.profile_kernels) into results.json and kernels.md.

PyTorch: a zoo model is written out in runner_timing.torch_model, a corpus model (corpus:NAME) is
built by the bundle's models/corpus/torch_source.py exactly as export.py built the exported one.
``--torch MODE...`` picks the columns (``--torch`` alone: none); ``--torch-only`` runs no TVM
library (the PyTorch columns of a bundle whose TVM numbers are in hand). Inductor takes 20-60 s a
model: ``--torch-warm N`` first compiles every selected row's model in N child processes at once
(no timing), with inductor's FX graph cache in the run's temp folder, so the compile before each
(sequential, unchanged) timing is a cache hit; a child that fails or hangs is a note of its row.

The runner is three files, side by side in the bundle: this one (arguments, the bundle's TVM and
CUDA compiler, the loop over model x batch), ``runner_timing.py`` (inputs, weights, running and
timing one library, its kernels, PyTorch and the --torch-warm children) and ``runner_report.py``
(system facts, results.md, kernels.md, results.png). It imports the other two by path from its own folder: the bundle is a
folder, not a package, and under ``python -I`` its folder is not on sys.path.
"""

import argparse  # noqa: E401
import atexit
import ctypes
import glob
import hashlib
import importlib.util
import json
import lzma
import os
import platform
import shutil  # noqa: E401
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# tvm/support/nvcc.py's nvcc flags, less the diagnostic ptxas -v
NVCC_FLAGS = ["-O3", *[f"-U__CUDA_NO_{t}_{w}__" for t in ("HALF", "BFLOAT16", "BFLOAT162")
                       for w in ("OPERATORS", "CONVERSIONS")], "--expt-relaxed-constexpr",
              "--expt-extended-lambda", "--use_fast_math", "--ptxas-options=--register-usage-level=10"]


def _beside(name, names):
    """The functions ``names`` (space-separated) of ``name``.py in this file's folder."""
    spec = importlib.util.spec_from_file_location(f"tvm_fusion_hw_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [getattr(module, n) for n in names.split()]


(log, rebuild_weights, make_inputs, library_path, run_variant, compare, bench_torch, onnxruntime_outputs,
 warm_torch, TORCH_MODES) = _beside(
    "runner_timing", "log rebuild_weights make_inputs library_path run_variant compare bench_torch "
    "onnxruntime_outputs warm_torch TORCH_MODES")
system_info, write_markdown, write_kernels, write_plot = _beside(
    "runner_report", "system_info write_markdown write_kernels write_plot")


def setup_tvm(bundle, manifest, device, tmp):
    """Import the bundle's runtime-only TVM (never an installed one) and, for CUDA, its CUDA runtime."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheels = [w for w in manifest["runtime"]["wheels"] if f"-{tag}-" in Path(w).name]
    if not wheels:
        sys.exit(f"the bundle has tvm-ffi wheels {manifest['runtime']['wheels']}, none for "
                 f"Python {platform.python_version()}; run this with a matching Python")
    site = tmp / "site"
    with zipfile.ZipFile(bundle / wheels[0]) as whl:
        whl.extractall(site)
    sys.path[:0] = [str(bundle / manifest["runtime"]["tvm"]), str(site)]
    os.environ["TVM_USE_RUNTIME_LIB"] = "1"
    import tvm  # pylint: disable=import-outside-toplevel
    tvm_dir = Path(tvm.__file__).resolve().parent
    if bundle / manifest["runtime"]["tvm"] not in tvm_dir.parents:
        sys.exit(f"imported tvm from {tvm_dir}, not from the bundle")
    if device == "cuda":
        preload_cudart()
        ctypes.CDLL(str(tvm_dir / "lib" / "libtvm_runtime_cuda.so"), mode=ctypes.RTLD_GLOBAL)
    import tvm.runtime.vm  # pylint: disable=import-outside-toplevel,redefined-outer-name,unused-import
    return tvm


def preload_cudart():
    """Load libcudart.so.13 globally if the dynamic linker would not find it on its own."""
    homes = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    cands = [f"{h}/{d}/libcudart.so.13*" for h in homes if h for d in ("lib64", "lib")]
    cands += [f"{p}/nvidia/*/lib/libcudart.so.13*" for p in sys.path if p]
    for path in ["libcudart.so.13"] + [f for pat in cands for f in sorted(glob.glob(pat))]:
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return
        except OSError:
            continue


def cuda_root():
    """The CUDA toolkit folder ($CUDA_PATH, $CUDA_HOME, nvcc's, /usr/local/cuda) that has headers."""
    nvcc = shutil.which("nvcc")
    cands = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"),
             os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else None, "/usr/local/cuda"]
    return next((c for c in cands if c and os.path.isfile(f"{c}/include/cuda_runtime.h")), None)


def source_key(arch, code):
    """Cache key of one CUDA source compiled for one arch (also the bundle's cubin/ file names)."""
    return hashlib.sha256((arch + code).encode()).hexdigest()


def make_cuda_compiler(arch, mode="auto", bundle=None):
    """A ``tvm_callback_cuda_compile``: the bundle's prebuilt binary for this source and arch
    (``auto``), else TVM's own NVRTC path (cuda-bindings), else nvcc with TVM's flags.

    Returns ``(function, info)``. Binaries are cached by source hash: graph variants share source.
    """
    try:
        import cuda.bindings.nvrtc  # pylint: disable=import-outside-toplevel,unused-import
        have_nvrtc = True
    except ImportError:
        have_nvrtc = False
    order = {"auto": ["bundle"] + (["nvrtc"] if have_nvrtc else []) + ["nvcc"], "nvrtc": ["nvrtc"],
             "nvcc": ["nvcc"], "bundle": ["bundle"]}[mode]
    memo, used, root = {}, [], cuda_root()
    if "nvrtc" in order and root and not os.environ.get("CUDA_PATH"):
        os.environ["CUDA_PATH"] = root  # TVM's NVRTC path takes its headers from here

    def _nvcc(code):
        with tempfile.TemporaryDirectory(prefix="tvm_nvcc_") as work:
            Path(work, "k.cu").write_text(code)
            nvcc = os.path.join(root, "bin", "nvcc") if root else "nvcc"
            cmd = [nvcc, "--fatbin", "-arch", arch, *NVCC_FLAGS, "-o", f"{work}/k.fatbin", f"{work}/k.cu"]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode:
                raise RuntimeError(f"nvcc failed: {done.stderr[-2000:]}")
            return bytearray(Path(work, "k.fatbin").read_bytes())

    def compile_cuda(code):
        key = source_key(arch, code)
        if key in memo:
            return memo[key]
        errors, start = [], time.time()
        for how in order:
            try:
                if how == "bundle":
                    with lzma.open(Path(bundle) / "cubin" / f"{key}.bin.xz") as src:
                        out = bytearray(src.read())
                elif how == "nvrtc":
                    from tvm.support import nvcc  # pylint: disable=import-outside-toplevel
                    out = nvcc.compile_cuda(code, target_format="cubin", arch=arch, compiler="nvrtc")
                else:
                    out = _nvcc(code)
                used.append(f"{how} {time.time() - start:.1f}s")
                memo[key] = out
                return out
            except Exception as err:  # pylint: disable=broad-except
                errors.append(f"{how}: {str(err)[-1500:]}")
        raise RuntimeError("CUDA compile failed; " + " | ".join(errors))

    return compile_cuda, {"arch": arch, "order": order, "calls": used}


def bench_entry(tvm, bundle, entry, dev, args, tmp):
    """Everything for one model x batch; failures become row['errors'] and the rest continues."""
    row = {k: entry[k] for k in ("model", "batch", "flops", "bytes", "roofline_s")}
    row.update(times_s={}, all_times_s={}, errors={}, accuracy={}, notes=[])
    row["groups"] = {"hw": entry.get("hw_groups"), **{v["name"]: v["groups"] for v in entry["variants"]
                                                      if "groups" in v}}
    row["knobs"] = {v["name"]: v["knobs"] for v in entry["variants"] if "knobs" in v}
    inputs = make_inputs(entry)
    row["errors"].update({f"{k} build": v for k, v in entry.get("build_errors", {}).items()})
    ref, outputs = None, {}
    if args.torch_only:  # neither weights nor libraries: the ONNX rebuild alone takes seconds
        row["notes"].append("TVM libraries not run (--torch-only)")
    else:
        weights, row["weights"] = rebuild_weights(bundle, entry)
    for variant in [] if args.torch_only else entry["variants"]:
        key = variant["name"]
        if variant["cuda_graph"] and args.no_graph:
            continue
        profile = args.kernel_profile and not variant["cuda_graph"]
        try:
            outs, med, runs, kernels = run_variant(tvm, library_path(bundle, variant, tmp), dev, weights,
                                                   inputs, args, profile)
            row["times_s"][key], row["all_times_s"][key] = med, runs
            if kernels and "error" in kernels:
                row["errors"][f"{key} kernels"] = kernels["error"]
            elif kernels:
                row.setdefault("kernels", {})[key] = kernels
            outputs[key] = outs
            if key == "stock" or ref is None:
                ref, row["reference"] = outs, key
            max_abs, rel = compare(ref, outs)
            finite = all(np.isfinite(o).all() for o in outs)
            row["accuracy"][key] = {"max_abs": max_abs, "rel_l2": rel, "finite": finite,
                                    "ok": bool(finite and rel <= args.rtol)}
            log(f"{entry['model']} b{entry['batch']}: {key} {med * 1e3:.3f} ms, rel err {rel:.2e}")
        except Exception as err:  # pylint: disable=broad-except
            row["errors"][key] = f"{type(err).__name__}: {str(err)[-800:]}"
            log(f"{entry['model']} b{entry['batch']}: {key} FAILED {row['errors'][key][:200]}")
    if args.onnxruntime and outputs:
        try:
            ort = onnxruntime_outputs(bundle, entry, inputs)
            for key, outs in outputs.items():
                max_abs, rel = compare(ort, outs)
                row.setdefault("accuracy_onnxruntime", {})[key] = {
                    "max_abs": max_abs, "rel_l2": rel, "ok": bool(rel <= args.onnxruntime_rtol)}
            log(f"{entry['model']} b{entry['batch']}: against onnxruntime " + ", ".join(
                f"{k} {v['rel_l2']:.1e}" for k, v in row["accuracy_onnxruntime"].items()))
        except Exception as err:  # pylint: disable=broad-except
            row["errors"]["onnxruntime"] = f"{type(err).__name__}: {str(err)[-300:]}"
    if args.torch_modes:
        bench_torch(entry, inputs, args, row)
    bound = entry.get("roofline_s") or 0
    row["efficiency"] = {k: bound / t for k, t in row["times_s"].items() if t > 0}
    return row


def python_command():
    """This interpreter with its own flags (-S, -I, ...), so that a child sees the same packages."""
    return [sys.executable, *sys.orig_argv[1:next((i for i, a in enumerate(sys.orig_argv) if a.endswith(".py")), 1)]]


def bench_isolated(entry, argv, out):
    """One model x batch in a child process, so a crash (a segfault, a sticky CUDA error) costs
    that row only; the child's log lines are passed through."""
    keep, skip = [], False
    for arg in argv:  # drop the parent's selection and output folder
        if skip and not arg.startswith("--"):
            continue
        skip = arg in ("--models", "--batches", "--out")
        if not skip and arg != "--isolate":
            keep.append(arg)
    sub = out / "rows" / f"{entry['model']}_b{entry['batch']}"
    # the parent warmed the caches already (the child inherits TORCHINDUCTOR_CACHE_DIR)
    cmd = [*python_command(), str(Path(__file__).resolve()), *keep, "--no-isolate", "--torch-warm", "0",
           "--out", str(sub), "--models", entry["model"], "--batches", str(entry["batch"])]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    sys.stdout.write(done.stdout)
    try:
        return json.loads((sub / "results.json").read_text())["rows"][0]
    except (OSError, ValueError, IndexError, KeyError):
        tail = " | ".join(line for line in done.stdout.splitlines()[-6:] if line.strip())
        return {"model": entry["model"], "batch": entry["batch"],
                "error": f"child exited with {done.returncode}: {tail[-600:]}"}


def main(argv=None):
    """Parse arguments, run every selected entry, write results.{json,md,png}."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="results folder")
    ap.add_argument("--bundle", default=str(HERE), help="bundle folder (default: this file's)")
    ap.add_argument("--models", nargs="+", help="only these models")
    ap.add_argument("--batches", nargs="+", type=int, help="only these batch sizes")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--repeat", type=int, default=20, help="timed repeats (median reported)")
    ap.add_argument("--number", type=int, default=1, help="TVM runs per repeat (at least)")
    ap.add_argument("--min-repeat-ms", type=int, default=50, help="minimum duration of one repeat")
    ap.add_argument("--rtol", type=float, default=1e-4, help="max relative L2 error against stock")
    ap.add_argument("--torch", nargs="*", dest="torch_modes", default=list(TORCH_MODES), choices=list(TORCH_MODES),
                    metavar="MODE", help="PyTorch columns to time, of " + ", ".join(TORCH_MODES) +
                    " (compile_graphs: torch.compile(mode='reduce-overhead'), CUDA graphs; default all; "
                    "--torch alone: none)")
    ap.add_argument("--no-torch", dest="torch_modes", action="store_const", const=[],
                    help="no PyTorch columns (the same as --torch alone)")
    ap.add_argument("--torch-only", action="store_true",
                    help="time only the PyTorch columns: no TVM library, no weights rebuilt, no onnxruntime")
    ap.add_argument("--torch-warm", type=int, default=0, metavar="N",
                    help="before timing, compile the PyTorch models of all selected rows in N parallel child "
                    "processes (the compiled --torch modes, a few calls, untimed) so that the timed compile hits "
                    "inductor's FX graph cache (TORCHINDUCTOR_CACHE_DIR in the run's temp folder unless set); "
                    "a child that fails or times out becomes a note of its row")
    ap.add_argument("--torch-warm-timeout", type=float, default=600, metavar="S",
                    help="seconds one --torch-warm child may take (then its process group is killed)")
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph libraries")
    ap.add_argument("--onnxruntime", action="store_true",
                    help="also compare every library with onnxruntime on the CPU (needs onnx, onnxruntime)")
    ap.add_argument("--onnxruntime-rtol", type=float, default=1e-3,
                    help="max relative L2 error against onnxruntime (other kernels, other rounding)")
    ap.add_argument("--kernel-profile", action="store_true",
                    help="after timing, time each kernel of every library without CUDA graphs (kernels.md)")
    ap.add_argument("--cuda-compiler", choices=("auto", "bundle", "nvrtc", "nvcc"), default="auto",
                    help="auto: the bundle's prebuilt binaries, else NVRTC, else nvcc")
    ap.add_argument("--time-budget", type=float, help="seconds: start no new model x batch after this")
    ap.add_argument("--isolate", dest="isolate", action="store_true", default=True,
                    help="run each model x batch in a child process (default)")
    ap.add_argument("--no-isolate", dest="isolate", action="store_false")
    args = ap.parse_args(argv)
    bundle, out = Path(args.bundle).resolve(), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((bundle / "manifest.json").read_text())
    if (args.device == "cuda") != (manifest["target_kind"] == "cuda"):
        sys.exit(f"this bundle was compiled for {manifest['target_kind']}: use --device "
                 + ("cuda" if manifest["target_kind"] == "cuda" else "cpu"))
    tmp = Path(tempfile.mkdtemp(prefix="tvm_bundle_"))
    atexit.register(shutil.rmtree, tmp, True)
    warming = args.torch_warm > 0 and any(TORCH_MODES[k] is not None for k in args.torch_modes)
    if warming:  # before torch is imported (system_info): children, row processes included, inherit it
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp / "torchinductor"))
        os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")  # on by default in torch 2.11; forced
        os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    tvm = setup_tvm(bundle, manifest, args.device, tmp)
    dev = tvm.cuda(0) if args.device == "cuda" else tvm.cpu(0)
    results = {"bundle": str(bundle), "profile": manifest["profile"], "compiled_with": manifest["tvm_version"],
               "bundle_commit": manifest.get("commit"),
               "system": system_info(tvm, dev, args), "settings": vars(args), "rows": []}
    if args.device == "cuda":
        arch = "sm_" + dev.compute_version.replace(".", "")
        func, results["cuda_compile"] = make_cuda_compiler(arch, args.cuda_compiler, bundle)
        tvm.register_global_func("tvm_callback_cuda_compile", func, override=True)
    entries = [e for e in manifest["entries"] if (not args.models or e["model"] in args.models)
               and (not args.batches or e["batch"] in args.batches)]
    start = time.time()  # the warm-up counts against --time-budget
    warm = {}
    if warming and importlib.util.find_spec("torch") is None:
        log("--torch-warm: torch not importable, no warm-up")
    elif warming:
        results["torch_warm"] = {"children": args.torch_warm, "cache_dir": os.environ["TORCHINDUCTOR_CACHE_DIR"]}
        warm = warm_torch([e for e in entries if "error" not in e], args, bundle, python_command())
        results["torch_warm"]["s"] = round(time.time() - start, 1)
    for entry in entries:
        log(f"{entry['model']} b{entry['batch']}")
        if "error" in entry:
            row = {"model": entry["model"], "batch": entry["batch"], "error": "compile: " + entry["error"]}
        elif args.time_budget and time.time() - start > args.time_budget:
            row = {"model": entry["model"], "batch": entry["batch"], "error": "skipped: --time-budget spent"}
        elif args.isolate:
            row = bench_isolated(entry, argv if argv is not None else sys.argv[1:], out)
        else:
            try:
                row = bench_entry(tvm, bundle, entry, dev, args, tmp)
            except Exception as err:  # pylint: disable=broad-except
                row = {"model": entry["model"], "batch": entry["batch"],
                       "error": f"{type(err).__name__}: {err}"}
        done = warm.get((entry["model"], entry["batch"]))
        if done and "error" in done:
            row.setdefault("notes", []).append(f"{entry['model']} b{entry['batch']}: torch warm-up {done['error']}")
        elif done:
            row["torch_warm"] = done
        results["rows"].append(row)
        (out / "results.json").write_text(json.dumps(results, indent=1))
    note = write_plot(results, out / "results.png")
    if note:
        results["plot"] = note
        for row in results["rows"]:
            row.setdefault("notes", []).append(note)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    write_markdown(results, out / "results.md")
    if any(r.get("kernels") for r in results["rows"]):
        write_kernels(results, out / "kernels.md")
    log(f"wrote {out / 'results.md'}")
    tvm_keys = {v["name"] for e in entries for v in e.get("variants", [])}
    bad = [r for r in results["rows"] if "error" in r or tvm_keys & set(r.get("errors", {}))
           or not all(a["ok"] for a in r.get("accuracy", {}).values())]
    return 1 if bad else 0  # PyTorch failures are reported, not fatal


if __name__ == "__main__":
    sys.exit(main())
