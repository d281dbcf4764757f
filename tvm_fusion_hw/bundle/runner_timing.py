"""The bundle runner's measurements (copied beside run.py; see run.py): the seeded inputs and
weights, one library loaded, checked and timed, its kernels timed one by one, and PyTorch.

Needs numpy; onnx (exact weights) and torch/torchvision (PyTorch columns; timm and transformers
for those corpus models) when importable. TVM is the bundle's runtime-only copy, handed in by
run.py. Run as a script (``runner_timing.py --warm ...``) it is a ``--torch-warm`` child: it
compiles one row's PyTorch model, untimed, so that inductor's on-disk caches hold it.
"""

import contextlib  # noqa: E401
import hashlib
import importlib.util
import json
import lzma
import math
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

TOP_KERNELS = 25  # kernels kernels.md lists per library (results.json keeps them all, in "all")
CORPUS_PREFIX = "corpus:"  # as tvm_fusion_hw.models names corpus models
#: PyTorch columns: key -> torch.compile's keyword arguments (None: eager, nothing to compile)
TORCH_MODES = {"eager": None, "compile": {}, "compile_graphs": {"mode": "reduce-overhead"}}
WARM_CALLS = 3  # calls a --torch-warm child makes per mode (compile, CUDA-graph warm-up and recording)


def log(msg):
    """One progress line on stderr."""
    print(f"[run {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build_model(bundle, entry):
    """The entry's ONNX model from the bundled builders (zoo or corpus), with its seeded weights."""
    if str(bundle / "builders") not in sys.path:
        sys.path.insert(0, str(bundle / "builders"))
    from tvm_fusion_hw.models import build  # pylint: disable=import-outside-toplevel
    return build(entry["model"], batch=entry["batch"], seed=entry["seed"])


def rebuild_weights(bundle, entry):
    """Parameter arrays in main_transform_params order: the bundled ONNX builders, else seeded random."""
    specs, note = entry["params"], "weights from the ONNX builders"
    try:
        from onnx import numpy_helper  # pylint: disable=import-outside-toplevel
        inits = {t.name: numpy_helper.to_array(t) for t in build_model(bundle, entry).graph.initializer}
    except Exception as err:  # pylint: disable=broad-except
        inits, note = {}, f"weights seeded random ({type(err).__name__}: {err})"
    rng, out, bad, drawn = np.random.default_rng(entry["seed"]), [], [], []
    for spec in specs:
        shape, dtype = tuple(spec["shape"]), spec["dtype"]
        arr = inits.get(spec.get("onnx_name", spec["name"]), inits.get(spec["name"]))
        if arr is not None:
            arr = np.ascontiguousarray(arr.astype(dtype, copy=False)).reshape(shape)
            if hashlib.sha256(arr.tobytes()).hexdigest() != spec["sha256"]:
                bad.append(spec["name"])
        elif "value" in spec:
            arr = np.asarray(spec["value"], dtype=dtype).reshape(shape)
        elif spec["role"] in ("bn_var", "bn_scale", "ln_scale"):  # positive, near 1
            drawn.append(spec["name"])
            arr = rng.uniform(0.8, 1.2, shape).astype(dtype)
        else:
            drawn.append(spec["name"])
            fan_in = int(np.prod(shape[1:])) if len(shape) > 2 else (shape[0] if len(shape) == 2 else 0)
            arr = rng.normal(0, math.sqrt(1.0 / fan_in) if fan_in else 0.05, shape).astype(dtype)
        out.append(arr)
    if not specs:
        note = "no weights"
    elif inits:
        note += f": {len(bad)} of {len(specs)} differ from the compiled weights (e.g. {bad[0]})" if bad else \
            f": all {len(specs)} match the compiled weights (SHA-256)"
        if drawn:  # pylint: disable=confusing-consecutive-elif
            note += f"; {len(drawn)} not found in the builders' model and drawn at random (e.g. {drawn[0]})"
    return out, note


def make_inputs(entry):
    """Seeded inputs in graph order, as the builders' example_inputs make them: floats N(0, 1);
    integers token ids in [3, 1000) and an ``attention_mask`` of ones (corpus.example_inputs),
    valid for every embedding table, so that PyTorch runs on the same inputs as TVM."""
    rng, out = np.random.default_rng(entry["input_seed"]), []
    for spec in entry["inputs"]:
        if spec["name"] == "attention_mask":
            out.append(np.ones(spec["shape"], dtype=spec["dtype"]))
        elif np.dtype(spec["dtype"]).kind in "iu":
            out.append(rng.integers(3, 1000, size=spec["shape"], dtype=spec["dtype"]))
        else:
            out.append(rng.standard_normal(spec["shape"], dtype=np.float32).astype(spec["dtype"]))
    return out


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


def onnxruntime_outputs(bundle, entry, inputs):
    """The model's outputs from onnxruntime on the CPU, with the same weights and inputs: a
    reference no one here wrote (and the only one where stock TVM cannot build the model)."""
    import onnxruntime  # pylint: disable=import-outside-toplevel
    model = build_model(bundle, entry)
    inits = {t.name for t in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in inits]
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in session.run(None, dict(zip(names, inputs)))]


def corpus_torch_source(bundle):
    """The bundle's ``models/corpus/torch_source.py`` (the corpus' constructors), loaded by path:
    its package's ``__init__`` imports onnx, which the PyTorch columns do not need."""
    name = "tvm_fusion_hw_corpus_torch_source"
    if name not in sys.modules:
        path = Path(bundle) / "builders" / "tvm_fusion_hw" / "models" / "corpus" / "torch_source.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


def torch_model(entry, torch, bundle=None):
    """The same architecture in PyTorch (random weights: timing only). A corpus model is built by
    the bundle's torch_source exactly as export.py built the exported one; its inputs must be the
    ones the bundle feeds TVM (names, dtypes, shapes, order)."""
    nn, name, shapes = torch.nn, entry["model"], [i["shape"] for i in entry["inputs"]]
    if name.startswith(CORPUS_PREFIX):
        source, corpus_name = corpus_torch_source(bundle), name[len(CORPUS_PREFIX):]
        want = [(i["name"], i["dtype"], i["shape"][1:]) for i in source.input_specs(corpus_name)]
        have = [(i["name"], i["dtype"], list(i["shape"][1:])) for i in entry["inputs"]]
        if want != have:
            raise ValueError(f"the PyTorch model takes {want}, the bundle feeds {have}")
        return source.build(corpus_name)
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


def torch_setup(torch):
    """fp32 with TF32 off, in every process alike: the matmul settings are part of inductor's cache key."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def torch_callable(torch, model, key):
    """``model`` for PyTorch column ``key``: itself (eager) or torch.compile'd, dynamo reset first."""
    import torch._dynamo  # pylint: disable=import-outside-toplevel,redefined-outer-name
    torch._dynamo.reset()  # pylint: disable=protected-access
    return model if TORCH_MODES[key] is None else torch.compile(model, **TORCH_MODES[key])


def first_calls(torch, fn, xs, cuda, calls):
    """Time the first ``calls`` calls (compilation, CUDA-graph recording): {"s", FX graph cache hits, misses}."""
    from torch._dynamo.utils import counters  # pylint: disable=import-outside-toplevel
    before, start = dict(counters["inductor"]), time.perf_counter()
    for _ in range(calls):
        fn(*xs)
    if cuda:
        torch.cuda.synchronize()
    seconds = round(time.perf_counter() - start, 2)
    return {"s": seconds, **{key: counters["inductor"][f"fxgraph_cache_{key}"] - before.get(f"fxgraph_cache_{key}", 0)
                             for key in ("hit", "miss")}}


def bench_torch(entry, inputs, args, row):
    """PyTorch eager, torch.compile and torch.compile(mode='reduce-overhead') into ``row``; for the
    compiled ones, the first calls' seconds and FX graph cache hits in ``row["torch_compile"]``."""
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError:
        row["notes"].append("torch not importable: no PyTorch columns")
        return
    torch_setup(torch)
    cuda = args.device == "cuda"
    dev = "cuda" if cuda else "cpu"
    try:
        model = torch_model(entry, torch, Path(args.bundle).resolve()).eval().to(dev)
    except Exception as err:  # pylint: disable=broad-except
        row["errors"]["torch"] = f"{type(err).__name__}: {str(err)[:500]}"
        return
    xs = [torch.from_numpy(x).to(dev) for x in inputs]
    for key, compile_kwargs in TORCH_MODES.items():
        if key not in args.torch_modes:
            continue
        try:
            with torch.no_grad():
                fn = torch_callable(torch, model, key)
                if compile_kwargs is not None:
                    row.setdefault("torch_compile", {})[key] = first_calls(torch, fn, xs, cuda, WARM_CALLS)
                row["times_s"][key] = time_torch(fn, xs, torch, cuda, args)
            first = row.get("torch_compile", {}).get(key)
            log(f"{row['model']} b{row['batch']}: torch {key} {row['times_s'][key] * 1e3:.3f} ms" + (
                f"; first {WARM_CALLS} calls {first['s']} s, FX graph cache {first['hit']} hits {first['miss']} misses"
                if first else ""))
        except Exception as err:  # pylint: disable=broad-except
            row["errors"][key] = f"{type(err).__name__}: {str(err)[:500]}"


def warm_torch(entries, args, bundle, python):
    """``--torch-warm N``: compile the PyTorch models of ``entries`` in N child processes at once
    (this file run as ``--warm``; the compiled modes of ``args.torch_modes``, a few calls, no
    timing) so that inductor's on-disk caches (TORCHINDUCTOR_CACHE_DIR, set by run.py) hold them
    when the sequential timing compiles again. ``python`` is the interpreter with its flags.

    Returns {(model, batch): the child's {mode: first_calls result}, or {"error": why}}: a child
    that fails or runs past ``args.torch_warm_timeout`` (its process group is killed) costs its
    row's warm-up only.
    """
    modes = [k for k in args.torch_modes if TORCH_MODES[k] is not None]
    if not (args.torch_warm and modes and entries):
        return {}
    # inductor's compile workers share the cores among the children (not part of its cache key)
    env = dict(os.environ)
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(max(1, (os.cpu_count() or 2) // args.torch_warm)))

    def one(entry):
        cmd = [*python, str(Path(__file__).resolve()), "--warm", str(bundle), entry["model"],
               str(entry["batch"]), args.device, *modes]
        start = time.time()
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                    start_new_session=True)  # its own group: a timeout kills its workers too
            try:
                out, _ = proc.communicate(timeout=args.torch_warm_timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                return {"error": f"timed out after {args.torch_warm_timeout:.0f} s"}
            done = [line[5:] for line in out.splitlines() if line.startswith("WARM ")]
            if proc.returncode or not done:
                tail = " | ".join(line for line in out.splitlines()[-4:] if line.strip())
                return {"error": f"exited with {proc.returncode}: {tail[-400:]}"}
            return {**json.loads(done[-1]), "wall_s": round(time.time() - start, 1)}
        except Exception as err:  # pylint: disable=broad-except
            return {"error": f"{type(err).__name__}: {str(err)[:300]}"}

    log(f"torch warm-up: {len(entries)} rows, {args.torch_warm} at a time, modes {' '.join(modes)}")
    with ThreadPoolExecutor(args.torch_warm) as pool:
        results = dict(zip([(e["model"], e["batch"]) for e in entries], pool.map(one, entries)))
    for (model, batch), res in results.items():
        log(f"{model} b{batch}: torch warm-up " + (f"FAILED: {res['error']}" if "error" in res else str(res)))
    return results


def warm_main(argv):
    """A --torch-warm child: ``--warm BUNDLE MODEL BATCH DEVICE MODE...``; prints ``WARM {json}``."""
    bundle, model_name, batch, device, modes = Path(argv[1]), argv[2], int(argv[3]), argv[4], argv[5:]
    manifest = json.loads((bundle / "manifest.json").read_text())
    entry = next(e for e in manifest["entries"] if e["model"] == model_name and e["batch"] == batch)
    import torch  # pylint: disable=import-outside-toplevel
    import torch._inductor.config  # pylint: disable=import-outside-toplevel
    # Keep no best-config choices made here (N children share the GPU): the timed process makes
    # its own. Not part of the FX graph cache key, so compiled graphs still hit.
    torch._inductor.config.autotune_local_cache = False  # pylint: disable=protected-access
    torch_setup(torch)
    cuda = device == "cuda"
    model = torch_model(entry, torch, bundle).eval().to("cuda" if cuda else "cpu")
    xs = [torch.from_numpy(x).to("cuda" if cuda else "cpu") for x in make_inputs(entry)]
    out = {}
    with torch.no_grad():
        for key in modes:
            out[key] = first_calls(torch, torch_callable(torch, model, key), xs, cuda, WARM_CALLS)
    print("WARM " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--warm"]:
    sys.exit(warm_main(sys.argv[1:]))
