#!/usr/bin/env python3
"""Check and time a tvm_fusion_hw bundle on a machine without TVM (copied into it as run.py).

Needs Python 3.12 (or whatever the bundle carries a tvm-ffi wheel for) and numpy; uses onnx (exact
weights), torch/torchvision (PyTorch columns) and matplotlib (plot) when importable.

    python run.py --out results [--models mobilenet_v2 ...] [--device cuda|cpu] [--repeat 20]
                  [--kernel-profile]

Per model x batch: rebuild the seeded weights, run ``main_transform_params`` once and ``main`` on
seeded inputs for every library, check each against stock, time ``main`` with the VM's
time_evaluator (median of repeats, warm-up excluded), then PyTorch eager / compile / compile with
CUDA graphs (fp32, TF32 off). Writes results.json (after every entry), results.md, results.png.
With --kernel-profile, after timing each library without CUDA graphs, times its kernels one by one
(see profile_kernels) into results.json and kernels.md.
"""

import argparse, atexit, ctypes, glob, hashlib, json, lzma, math, os, platform  # noqa: E401
import shutil, statistics, struct, subprocess, sys, tempfile, time, zipfile  # noqa: E401
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
COLUMNS = [("stock", "stock"), ("hw", "hw"), ("stock_graph", "stock+graph"), ("hw_graph", "hw+graph"),
           ("eager", "eager"), ("compile", "compile"), ("compile_graphs", "compile+graphs")]
# tvm/support/nvcc.py's nvcc flags, less the diagnostic ptxas -v
NVCC_FLAGS = ["-O3", *[f"-U__CUDA_NO_{t}_{w}__" for t in ("HALF", "BFLOAT16", "BFLOAT162")
                       for w in ("OPERATORS", "CONVERSIONS")], "--expt-relaxed-constexpr",
              "--expt-extended-lambda", "--use_fast_math", "--ptxas-options=--register-usage-level=10"]
TOP_KERNELS = 25  # kernels kernels.md lists per library (results.json keeps them all, in "all")


def log(msg):
    """One progress line on stderr."""
    print(f"[run {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


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


def rebuild_weights(bundle, entry):
    """Parameter arrays in main_transform_params order: the bundled ONNX builders, else seeded random."""
    specs, note = entry["params"], "weights from the ONNX builders"
    try:
        if str(bundle / "builders") not in sys.path:
            sys.path.insert(0, str(bundle / "builders"))
        from onnx import numpy_helper  # pylint: disable=import-outside-toplevel
        from tvm_fusion_hw.models import build  # pylint: disable=import-outside-toplevel
        inits = {t.name: numpy_helper.to_array(t) for t in build(entry["model"], batch=entry["batch"],
                                                                 seed=entry["seed"]).graph.initializer}
    except Exception as err:  # pylint: disable=broad-except
        inits, note = {}, f"weights seeded random ({type(err).__name__}: {err})"
    rng, out, bad = np.random.default_rng(entry["seed"]), [], []
    for spec in specs:
        shape, dtype = tuple(spec["shape"]), spec["dtype"]
        arr = inits.get(spec["name"])
        if arr is not None:
            arr = np.ascontiguousarray(arr.astype(dtype, copy=False)).reshape(shape)
            if hashlib.sha256(arr.tobytes()).hexdigest() != spec["sha256"]:
                bad.append(spec["name"])
        elif "value" in spec:
            arr = np.asarray(spec["value"], dtype=dtype).reshape(shape)
        elif spec["role"] in ("bn_var", "bn_scale", "ln_scale"):  # positive, near 1
            arr = rng.uniform(0.8, 1.2, shape).astype(dtype)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 2 else (shape[0] if len(shape) == 2 else 0)
            arr = rng.normal(0, math.sqrt(1.0 / fan_in) if fan_in else 0.05, shape).astype(dtype)
        out.append(arr)
    if not specs:
        note = "no weights"
    elif inits:
        note += f": {len(bad)} of {len(specs)} differ from the compiled weights (e.g. {bad[0]})" if bad else \
            f": all {len(specs)} match the compiled weights (SHA-256)"
    return out, note


def make_inputs(entry):
    """Seeded standard-normal inputs in graph order (as tvm_fusion_hw.models.example_inputs)."""
    rng = np.random.default_rng(entry["input_seed"])
    return [rng.standard_normal(i["shape"], dtype=np.float32).astype(i["dtype"]) for i in entry["inputs"]]


def library_path(bundle, variant, tmp):
    """The .so of a variant, unpacked from .so.xz into ``tmp`` when stored compressed."""
    plain = bundle / variant["file"]
    if plain.is_file():
        return plain
    target = tmp / variant["file"]
    with lzma.open(bundle / variant["stored"], "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return target


def to_numpy(value):
    """VM result (tensor or nested tuple) -> flat list of numpy arrays."""
    if hasattr(value, "numpy"):
        return [value.numpy()]
    return [a for v in value for a in to_numpy(v)]


def profile_kernels(tvm, vm, dev, feed, args):
    """Per-kernel time of ``main``: record each kernel call of one run (a VM instrument), then time
    every distinct kernel alone on the arguments of its first call (time_evaluator: CUDA events on
    a GPU). TVM 0.27 has no VM profiler (no ``profile=True``, no tvm.runtime.profiling).

    Returns {"total_us", "calls", "distinct", "all": [{"name", "us", "calls", "us_per_call"}],
    "top": the first TOP_KERNELS of "all"}, ``us`` summed over calls, largest first. "all" feeds
    per-kernel comparisons across libraries (bench/template_table.py); "top" is what kernels.md
    shows (and what results.json had before "all").
    """
    calls = {}  # symbol -> [function, arguments of its first call, number of calls]

    def instrument(func, symbol, before, _ret, *fargs):
        if before and callable(func) and not symbol.startswith("vm.builtin."):
            calls.setdefault(symbol, [func, fargs, 0])[2] += 1
        return 0  # VMInstrumentReturnKind.NO_OP

    vm.set_instrument(instrument)
    vm["main"](*feed)
    evaluator = tvm.get_global_func("runtime.RPCTimeEvaluator")
    repeat, min_ms = max(1, min(args.repeat, 5)), min(args.min_repeat_ms, 10)
    rows = []
    for symbol, (func, fargs, count) in calls.items():
        tvm.register_global_func("tvm_fusion_hw.profiled_kernel", func, override=True)
        timer = evaluator(None, "tvm_fusion_hw.profiled_kernel", dev.dlpack_device_type(), dev.index,
                          1, repeat, min_ms, 100, 0, 1, 0, "")
        per_call = statistics.median(struct.unpack(f"@{repeat}d", bytes(timer(*fargs)))) * 1e6
        rows.append({"name": symbol, "us": round(per_call * count, 3), "calls": count,
                     "us_per_call": round(per_call, 3)})
    rows.sort(key=lambda r: -r["us"])
    return {"total_us": round(sum(r["us"] for r in rows), 3), "calls": sum(r["calls"] for r in rows),
            "distinct": len(rows), "all": rows, "top": rows[:TOP_KERNELS]}


def run_variant(tvm, path, dev, weights, inputs, args, profile=False):
    """Load one library, transform the weights once, run main; return (outputs, median s, all s,
    kernels): with ``profile``, profile_kernels' result (or its error) after the timing, else None."""
    lib = tvm.runtime.load_module(str(path))
    vm = tvm.runtime.vm.VirtualMachine(lib, dev)
    params = []
    if weights:
        params = list(vm["main_transform_params"]([tvm.runtime.tensor(w, dev) for w in weights]))
    feed = [tvm.runtime.tensor(x, dev) for x in inputs] + params
    outputs = to_numpy(vm["main"](*feed))
    vm.save_function("main", "main_saved", *feed)
    timer = vm.time_evaluator("main_saved", dev, number=args.number, repeat=args.repeat,
                              min_repeat_ms=args.min_repeat_ms)
    res = timer()
    kernels = None
    if profile:
        try:
            kernels = profile_kernels(tvm, vm, dev, feed, args)
        except Exception as err:  # pylint: disable=broad-except
            kernels = {"error": f"{type(err).__name__}: {str(err)[-500:]}"}
    return outputs, float(res.median), [float(r) for r in res.results], kernels


def compare(ref, out):
    """(max abs error, relative L2 error) of ``out`` against ``ref`` over all outputs."""
    if len(ref) != len(out) or any(a.shape != b.shape for a, b in zip(ref, out)):
        return float("inf"), float("inf")
    diff = [np.abs(a.astype(np.float64) - b) for a, b in zip(ref, out)]
    num = math.sqrt(sum(float((d ** 2).sum()) for d in diff))
    den = math.sqrt(sum(float((a.astype(np.float64) ** 2).sum()) for a in ref))
    return max(float(d.max()) for d in diff), num / max(den, 1e-30)


def torch_model(entry, torch):
    """The same architecture in PyTorch (random weights: timing only)."""
    nn, name, shapes = torch.nn, entry["model"], [i["shape"] for i in entry["inputs"]]
    w4 = [p["shape"] for p in entry["params"] if len(p["shape"]) == 4]
    chan, last = shapes[0][1], shapes[0][-1]

    class Micro(nn.Module):  # pylint: disable=missing-class-docstring
        def __init__(self, f, weight=None, **mods):
            super().__init__()
            self.f, self.w = f, nn.Parameter(weight, requires_grad=False) if weight is not None else None
            for key, mod in mods.items():
                self.add_module(key, mod)

        def forward(self, *xs):  # pylint: disable=missing-function-docstring
            return self.f(self, *xs)

    if name in ("mobilenet_v2", "resnet50", "squeezenet1_1"):
        import torchvision  # pylint: disable=import-outside-toplevel
        return getattr(torchvision.models, name)(weights=None)
    if name == "bert_encoder_layer":
        return nn.TransformerEncoderLayer(768, 12, 3072, activation="gelu", batch_first=True,
                                          norm_first=False)
    if name == "relu_add_mul":
        scale = torch.rand(chan, *[1] * (len(shapes[0]) - 2)) + 0.5
        return Micro(lambda m, x, skip: (torch.relu(x) + skip) * m.w, scale)
    if name == "eltwise5":
        return Micro(lambda _, x, skip, gate: (lambda s: s * torch.sigmoid(s) * gate)(torch.relu(x) + skip))
    if name == "conv_relu_pool":
        return nn.Sequential(nn.Conv2d(chan, w4[0][0], 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2))
    if name == "dw_pw":
        return nn.Sequential(nn.Conv2d(chan, chan, 3, padding=1, groups=chan), nn.BatchNorm2d(chan),
                             nn.ReLU6(), nn.Conv2d(chan, w4[-1][0], 1))
    if name == "layernorm_residual":
        return Micro(lambda m, x, res: m.ln(x + m.w + res), torch.randn(last) * 0.02,
                     ln=nn.LayerNorm(last, eps=1e-12))
    raise KeyError(f"no PyTorch version of {name}")


def time_torch(fn, inputs, torch, cuda, args):
    """Median seconds per call (CUDA events on GPU); the first calls (compilation, capture) excluded."""
    def timed(number):
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
        start = time.perf_counter()
        for _ in range(number):
            fn(*inputs)
        if cuda:
            end.record()
            end.synchronize()
            return begin.elapsed_time(end) / 1e3 / number
        return (time.perf_counter() - start) / number

    timed(5)
    number = max(1, min(1000, math.ceil(args.min_repeat_ms / 1e3 / max(timed(1), 1e-6))))
    return statistics.median(timed(number) for _ in range(args.repeat))


def bench_torch(entry, inputs, args, row):
    """PyTorch eager, torch.compile and torch.compile(mode='reduce-overhead') into ``row``."""
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError:
        row["notes"].append("torch not importable: no PyTorch columns")
        return
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    cuda = args.device == "cuda"
    dev = "cuda" if cuda else "cpu"
    try:
        model = torch_model(entry, torch).eval().to(dev)
    except Exception as err:  # pylint: disable=broad-except
        row["errors"]["torch"] = f"{type(err).__name__}: {err}"
        return
    xs = [torch.from_numpy(x).to(dev) for x in inputs]
    modes = {"eager": lambda m: m, "compile": torch.compile,
             "compile_graphs": lambda m: torch.compile(m, mode="reduce-overhead")}
    for key, wrap in modes.items():
        if key not in args.torch_modes:
            continue
        try:
            import torch._dynamo  # pylint: disable=import-outside-toplevel,redefined-outer-name
            torch._dynamo.reset()  # pylint: disable=protected-access
            with torch.no_grad():
                row["times_s"][key] = time_torch(wrap(model), xs, torch, cuda, args)
            log(f"{row['model']} b{row['batch']}: torch {key} {row['times_s'][key] * 1e3:.3f} ms")
        except Exception as err:  # pylint: disable=broad-except
            row["errors"][key] = f"{type(err).__name__}: {str(err)[:500]}"


def bench_entry(tvm, bundle, entry, dev, args, tmp):
    """Everything for one model x batch; failures become row['errors'] and the rest continues."""
    row = {k: entry[k] for k in ("model", "batch", "flops", "bytes", "roofline_s")}
    row.update(times_s={}, all_times_s={}, errors={}, accuracy={}, notes=[])
    row["groups"] = {"hw": entry.get("hw_groups"), **{v["name"]: v["groups"] for v in entry["variants"]
                                                      if "groups" in v}}
    row["knobs"] = {v["name"]: v["knobs"] for v in entry["variants"] if "knobs" in v}
    weights, row["weights"] = rebuild_weights(bundle, entry)
    inputs = make_inputs(entry)
    ref = None
    for variant in entry["variants"]:
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
    if args.torch_modes:
        bench_torch(entry, inputs, args, row)
    bound = entry.get("roofline_s") or 0
    row["efficiency"] = {k: bound / t for k, t in row["times_s"].items() if t > 0}
    return row


def _cmd(cmd):
    """stdout of a command, or "" if it cannot run."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def system_info(tvm, dev, args):
    """Date, machine, GPU, driver, CUDA, library versions."""
    info = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(),
            "python": platform.python_version(), "numpy": np.__version__, "device": args.device,
            "tvm": getattr(tvm, "__version__", "?"), "tvm_path": str(Path(tvm.__file__).parent),
            "tvm_runtime_only": bool(tvm.base._RUNTIME_ONLY),  # pylint: disable=protected-access
            "tvm_libs": sorted(tvm.base._LOADED_LIBS)}  # pylint: disable=protected-access
    smi = _cmd(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    if smi:
        info["gpu"], info["driver"] = [s.strip() for s in smi.splitlines()[0].split(",")][:2]
        head = _cmd(["nvidia-smi"])
        info["cuda_driver_api"] = head.split("CUDA Version:")[1].split()[0] if "CUDA Version:" in head else ""
    nvcc = _cmd(["nvcc", "--version"])
    info["nvcc"] = nvcc.splitlines()[-1] if nvcc else ""
    if args.device == "cuda":
        info["tvm_device"] = f"{dev.device_name} (cc {dev.compute_version})"
    for mod in ("torch", "torchvision", "onnx", "matplotlib"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # pylint: disable=broad-except
            info[mod] = None
    info["torch_cuda"] = sys.modules["torch"].version.cuda if info["torch"] else None
    return info


def _ms(row, key):
    """A latency cell in ms ("err" where that system failed, "-" where it did not run)."""
    t = row["times_s"].get(key)
    return f"{t * 1e3:.3f}" if t else ("err" if key in row["errors"] else "-")


def write_markdown(results, path):
    """results.md: latency table, efficiency table, errors."""
    sysinfo = results["system"]
    lines = [f"# tvm_fusion_hw benchmark ({sysinfo.get('gpu') or sysinfo['device']}, {sysinfo['date']})", "",
             f"Profile {results['profile']}, TVM {sysinfo['tvm']}, torch {sysinfo.get('torch')}, "
             f"driver {sysinfo.get('driver', '-')}, CUDA {sysinfo.get('cuda_driver_api', '-')}. "
             f"Median latency in ms; fp32, TF32 off. hw/stock = stock time / hw time.", "",
             "| model | batch | " + " | ".join(c[1] for c in COLUMNS)
             + " | hw/stock | max error (rel L2, abs) |",
             "| --- | ---: | " + " | ".join("---:" for _ in COLUMNS) + " | ---: | ---: |"]
    for row in results["rows"]:
        t = row.get("times_s", {})
        speed = f"{t['stock'] / t['hw']:.2f}x" if t.get("stock") and t.get("hw") else "-"
        acc = row.get("accuracy", {})
        worst = max(acc.values(), key=lambda a: a["rel_l2"], default=None)
        err = "-" if worst is None else (f"{worst['rel_l2']:.1e}, {worst['max_abs']:.1e}"
                                         + ("" if all(a["ok"] for a in acc.values()) else " FAIL"))
        if "error" in row:
            cells, speed, err = ["err"] * len(COLUMNS), "-", row["error"][:60]
        else:
            cells = [_ms(row, k) for k, _ in COLUMNS]
        lines.append(f"| {row['model']} | {row['batch']} | " + " | ".join(cells) + f" | {speed} | {err} |")
    lines += ["", "Roofline efficiency (bound / measured) on the profile; bytes = sum over hw groups.", "",
              "| model | batch | GFLOP | MB | bound (us) | " + " | ".join(c[1] for c in COLUMNS) + " |",
              "| --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in COLUMNS) + " |"]
    for row in results["rows"]:
        if "error" in row:
            continue
        eff = [f"{row['efficiency'][k] * 100:.3g}%" if k in row["efficiency"] else "-" for k, _ in COLUMNS]
        lines.append(f"| {row['model']} | {row['batch']} | {row['flops'] / 1e9:.3f} | "
                     f"{row['bytes'] / 1e6:.1f} | {row['roofline_s'] * 1e6:.1f} | " + " | ".join(eff) + " |")
    lines += variants_table(results["rows"])
    problems = [f"- {r['model']} b{r['batch']} {k}: {v}" for r in results["rows"]
                for k, v in (r.get("errors") or {}).items()]
    problems += [f"- {r['model']} b{r['batch']}: {r['error']}" for r in results["rows"] if "error" in r]
    notes = sorted({n for r in results["rows"] for n in r.get("notes", [])})
    notes += [f"{r['model']} b{r['batch']}: {r['weights']}" for r in results["rows"] if r.get("weights")]
    lines += ["", "## Errors", ""] + (problems or ["none"]) + ["", "## Notes", ""] + [f"- {n}" for n in notes]
    path.write_text("\n".join(lines) + "\n")


def variants_table(rows):
    """Lines of results.md's table of the bundle's extra variants (none: no lines)."""
    out = []
    for row in rows:
        hw_ms = row.get("times_s", {}).get("hw")
        for key, knobs in (row.get("knobs") or {}).items():
            t, acc, groups = row["times_s"].get(key), row["accuracy"].get(key), row.get("groups", {})
            text = ", ".join(f"{k}={'+'.join(v) if isinstance(v, list) else v}" for k, v in knobs.items())
            ratio = f"{t / hw_ms:.2f}x" if t and hw_ms else "-"
            err = f"{acc['rel_l2']:.1e}" + ("" if acc["ok"] else " FAIL") if acc else "-"
            out.append(f"| {row['model']} | {row['batch']} | {key} | {text} | {groups.get('hw', '-')} / "
                       f"{groups.get(key, '-')} | {_ms(row, 'stock')} | {_ms(row, 'hw')} | {_ms(row, key)} | "
                       f"{ratio} | {err} |")
    if not out:
        return []
    return ["", "## Variants", "", "Extra libraries: the hw pipeline with other knobs (bundle --variant), "
            "checked against stock. variant/hw = variant time / hw time (above 1: hw's grouping is faster).",
            "", "| model | batch | variant | knobs | groups of main (hw / variant) | stock | hw | variant "
            "| variant/hw | rel L2 vs stock |",
            "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |", *out]


def write_kernels(results, path):
    """kernels.md: per model x batch and library, the kernels that take the time (--kernel-profile)."""
    sysinfo = results["system"]
    lines = [f"# Time per kernel ({sysinfo.get('gpu') or sysinfo['device']}, {sysinfo['date']})", "",
             "Each distinct kernel of one run of `main`, timed alone on the arguments it had there "
             "(time_evaluator median; CUDA events on a GPU). us = time per call x calls; share of the sum "
             "over all kernels. End-to-end minus the sum is the VM's and the launches' overhead, less what "
             "kernels timed alone gain from warm caches.", ""]
    for row in results["rows"]:
        kernels = row.get("kernels") or {}
        if kernels:
            lines += [f"## {row['model']} b{row['batch']}", ""]
        for key in sorted(kernels, key=lambda k: (k != "hw", k != "stock", k)):
            prof, e2e = kernels[key], row["times_s"].get(key)
            total, top = prof["total_us"], prof["top"]
            lines += [f"### {key}: {prof['calls']} kernel calls ({prof['distinct']} distinct), sum "
                      f"{total:.2f} us" + (f", end-to-end {e2e * 1e6:.2f} us" if e2e else ""), "",
                      "| kernel | calls | us | share |", "| --- | ---: | ---: | ---: |"]
            lines += [f"| `{k['name']}` | {k['calls']} | {k['us']:.2f} | {k['us'] / max(total, 1e-9):.1%} |"
                      for k in top]
            if prof["distinct"] > len(top):
                rest = total - sum(k["us"] for k in top)
                lines.append(f"| {prof['distinct'] - len(top)} other kernels | "
                             f"{prof['calls'] - sum(k['calls'] for k in top)} | {rest:.2f} | "
                             f"{rest / max(total, 1e-9):.1%} |")
            lines += [f"| sum | {prof['calls']} | {total:.2f} | 100% |", ""]
    path.write_text("\n".join(lines) + "\n")


def write_plot(results, path):
    """results.png: grouped bars (log ms) per model x batch, or a note why not."""
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    except ImportError:
        return "matplotlib not importable: no results.png"
    rows = [r for r in results["rows"] if r.get("times_s")]
    fig, ax = plt.subplots(figsize=(max(8, 1.2 * len(rows)), 5))
    width = 0.8 / len(COLUMNS)
    for i, (key, label) in enumerate(COLUMNS):
        vals = [r["times_s"].get(key, float("nan")) * 1e3 for r in rows]
        ax.bar([j + i * width for j in range(len(rows))], vals, width, label=label)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))])
    ax.set_xticklabels([f"{r['model']}\nb{r['batch']}" for r in rows], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("median latency (ms, log)")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return ""


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
    # The interpreter's own flags (-S, -I, ...) carry over, so the child sees the same packages.
    flags = sys.orig_argv[1:next((i for i, a in enumerate(sys.orig_argv) if a.endswith(".py")), 1)]
    cmd = [sys.executable, *flags, str(Path(__file__).resolve()), *keep, "--no-isolate", "--out", str(sub),
           "--models", entry["model"], "--batches", str(entry["batch"])]
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
    ap.add_argument("--torch", nargs="*", dest="torch_modes", default=["eager", "compile", "compile_graphs"],
                    help="PyTorch columns to time (none: --torch)")
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph libraries")
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
    start = time.time()
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
