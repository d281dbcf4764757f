#!/usr/bin/env python3
"""Run each kernel of a sanitize bundle once, for compute-sanitizer (copied into it as run_kernels.py).

Written by bench/sanitize_kernels.py beside ``manifest.json``, its libraries and cubins, TVM's
runtime and the bundle runner (``run.py``, whose TVM setup, CUDA compiler and library unpacking
this reuses). Needs Python 3.12 (the bundle's tvm-ffi wheel) and numpy; any tool::

    compute-sanitizer --tool memcheck --error-exitcode 1 python3 run_kernels.py [--rule ImplicitGemm]
    compute-sanitizer --tool racecheck --error-exitcode 1 python3 run_kernels.py [--models resnet18] [--limit 20]
    compute-sanitizer --tool racecheck --error-exitcode 1 python3 run_kernels.py --one-per-form
    python3 run_kernels.py --list                          # the selection, no GPU needed
    python3 run_kernels.py --summarize-log sanitizer.log   # its reports per kernel (a --log-file or tee)

Each kernel gets fresh arguments (floats standard normal, integers and booleans zero), is called
once through its host function (``module[name](*tensors)``) and synchronized; one line per
kernel, then a summary. Each library runs in a child process (``--no-isolate``: all in this one):
a kernel that raises is reported and the next one runs; one that kills its process or the CUDA
context (a sticky error) or outlives ``--kernel-timeout`` is reported and a new child goes on
after it. Sanitizer reports come out before the line of the kernel they belong to; with
compute-sanitizer's ``--log-file`` they can also be counted per kernel (``--summarize-log``).
Exit status 1 if any kernel failed.
"""

import argparse
import atexit
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def load_manifest(bundle):
    return json.loads((bundle / "manifest.json").read_text())


def select(manifest, args):
    """[(index, name, kernel entry)] in library order, after --rule, --models, --kernels,
    --one-per-form, --limit."""
    chosen = []
    for lib in manifest["libraries"]:
        for name in lib["kernels"]:
            kernel = manifest["kernels"][name]
            if args.rule and kernel["rule"] not in args.rule:
                continue
            if args.models and not {s["model"] for s in kernel["sources"]} & set(args.models):
                continue
            if args.kernels and name not in args.kernels:
                continue
            chosen.append(name)
    if args.one_per_form:  # the smallest kernel of each schedule form (older manifests: each kernel)
        smallest = {}
        for name in chosen:
            kernel = manifest["kernels"][name]
            form = kernel.get("form") or name
            if form not in smallest or kernel["arg_bytes"] < manifest["kernels"][smallest[form]]["arg_bytes"]:
                smallest[form] = name
        keep = set(smallest.values())
        chosen = [name for name in chosen if name in keep]
    chosen = chosen[:args.limit] if args.limit else chosen
    return [(i, name, manifest["kernels"][name]) for i, name in enumerate(chosen, 1)]


def origin(kernel):
    first = kernel["sources"][0]
    more = f" +{len(kernel['sources']) - 1}" if len(kernel["sources"]) > 1 else ""
    return f"{first['model']} b{first['batch']} {first['kernel']}{more}"


def line(index, total, name, kernel, status, detail=""):
    """The one line a kernel gets."""
    return f"[{index:4d}/{total}] {status:7s} {kernel['rule']:22s} {name}  ({origin(kernel)}){detail}"


def load_runner(bundle):
    """The bundle's run.py as a module (it loads its runner_*.py from its own folder)."""
    spec = importlib.util.spec_from_file_location("tvm_fusion_hw_bundle_runner", bundle / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_args(tvm, kernel, dev, seed):
    """Fresh device tensors for every argument: floats standard normal, the rest zeros."""
    rng = np.random.default_rng(seed)
    tensors = []
    for arg in kernel["args"]:
        shape, dtype = tuple(arg["shape"]), arg["dtype"]
        if dtype.startswith("float"):
            arr = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
        else:
            arr = np.zeros(shape, dtype=dtype)
        tensors.append(tvm.runtime.tensor(arr, dev))
    return tensors


def context_alive(tvm, dev):
    """Whether the CUDA context still works after a kernel's error (a sticky error kills it)."""
    try:
        probe = tvm.runtime.tensor(np.zeros(1, "float32"), dev)
        dev.sync()
        return float(probe.numpy()[0]) == 0.0
    except Exception:  # pylint: disable=broad-except
        return False


def run_worker(args, bundle, manifest, plan):
    """Run ``plan`` (one library's kernels) here; status lines to ``args.status``. Returns 3 (the
    worker's exit status) when the CUDA context is lost after an error: the parent goes on after
    that kernel in a new process."""
    tmp = Path(tempfile.mkdtemp(prefix="tvm_sanitize_"))
    atexit.register(shutil.rmtree, tmp, True)
    runner = load_runner(bundle)
    tvm = runner.setup_tvm(bundle, manifest, args.device, tmp)
    dev = tvm.cuda(0) if args.device == "cuda" else tvm.cpu(0)
    if args.device == "cuda":
        arch = "sm_" + dev.compute_version.replace(".", "")
        compile_cuda, _ = runner.make_cuda_compiler(arch, args.cuda_compiler, bundle)
        tvm.register_global_func("tvm_callback_cuda_compile", compile_cuda, override=True)
    status = open(args.status, "a", encoding="utf-8") if args.status else None

    def note(**event):
        if status:
            status.write(json.dumps(event) + "\n")
            status.flush()

    libraries = {lib["name"]: lib for lib in manifest["libraries"]}
    by_lib = {}
    for index, name, kernel in plan["kernels"]:
        by_lib.setdefault(kernel["library"], []).append((index, name, kernel))
    total = plan["total"]
    for lib_name, todo in by_lib.items():
        try:
            module = tvm.runtime.load_module(str(runner.library_path(bundle, libraries[lib_name], tmp)))
        except Exception as err:  # pylint: disable=broad-except
            msg = f"loading {lib_name}: {type(err).__name__}: {str(err).strip()[-300:]}"
            for index, name, kernel in todo:
                print(line(index, total, name, kernel, "FAILED", f": {msg}"), flush=True)
                note(event="end", name=name, status="failed", error=msg)
            continue
        for index, name, kernel in todo:
            note(event="begin", name=name, time=time.time())
            try:
                tensors = make_args(tvm, kernel, dev, index)
                dev.sync()
                start = time.time()
                module[name](*tensors)
                dev.sync()
                ms = (time.time() - start) * 1e3
                del tensors
                print(line(index, total, name, kernel, "ok", f"  {ms:.2f} ms"), flush=True)
                note(event="end", name=name, status="ok", ms=round(ms, 3))
            except Exception as err:  # pylint: disable=broad-except
                msg = f"{type(err).__name__}: {' '.join(str(err).split())[-400:]}"
                print(line(index, total, name, kernel, "FAILED", f": {msg}"), flush=True)
                note(event="end", name=name, status="failed", error=msg)
                if not context_alive(tvm, dev):
                    print(f"CUDA context lost after {name}: the kernels after it need a new process", flush=True)
                    return 3
    return 0


def read_status(path):
    events = []
    if path.is_file():
        for text in path.read_text().splitlines():
            try:
                events.append(json.loads(text))
            except ValueError:
                pass  # a line cut short by a kill
    return events


def run_isolated(args, bundle, selection, tmp, save):
    """Each library's kernels in a child process; a child that dies or hangs costs its kernel only.
    ``save(results)`` after each library (a run cut short keeps what it did)."""
    results, total = {}, len(selection)
    flags = sys.orig_argv[1:next((i for i, a in enumerate(sys.orig_argv) if a.endswith(".py")), 1)]
    libs = list(dict.fromkeys(k["library"] for _, _, k in selection))
    for run_no, lib in enumerate(libs):
        todo = [s for s in selection if s[2]["library"] == lib]
        attempt = 0
        while todo:
            attempt += 1
            plan_file, status = tmp / f"plan_{run_no}_{attempt}.json", tmp / f"status_{run_no}_{attempt}.jsonl"
            plan_file.write_text(json.dumps({"total": total, "kernels": todo}))
            cmd = [sys.executable, *flags, str(Path(__file__).resolve()), "--bundle", str(bundle),
                   "--worker", str(plan_file), "--status", str(status), "--cuda-compiler", args.cuda_compiler,
                   "--device", args.device]
            proc = subprocess.Popen(cmd)  # pylint: disable=consider-using-with
            timed_out = None
            while proc.poll() is None:
                time.sleep(0.2)
                events = read_status(status)
                last = events[-1] if events else None
                if last and last["event"] == "begin" and time.time() - last["time"] > args.kernel_timeout:
                    timed_out = last["name"]
                    proc.kill()  # our own child, by its handle
                    proc.wait()
            events = read_status(status)
            ended = {e["name"]: e for e in events if e["event"] == "end"}
            begun = [e["name"] for e in events if e["event"] == "begin"]
            results.update(ended)
            lost = [n for n in begun if n not in ended]
            for index, name, kernel in todo:
                if name in lost:
                    why = (f"no result after {args.kernel_timeout:.0f} s (killed)" if name == timed_out else
                           f"its process exited with status {proc.returncode} while it ran")
                    results[name] = {"name": name, "status": "failed", "error": why}
                    print(line(index, total, name, kernel, "FAILED", f": {why}"), flush=True)
            rest = [s for s in todo if s[1] not in results]
            if rest and len(rest) == len(todo):  # nothing ran: the child cannot start
                why = f"the worker process exited with status {proc.returncode} before running a kernel"
                for index, name, kernel in rest:
                    results[name] = {"name": name, "status": "failed", "error": why}
                    print(line(index, total, name, kernel, "FAILED", f": {why}"), flush=True)
                rest = []
            todo = rest
        save(results)
    return results


def summarize_log(manifest, paths):
    """Count compute-sanitizer reports (``========= `` blocks) per kernel of the bundle, in the
    logs ``paths`` (``--log-file``, one per process with ``%p``, or the run's captured output)."""
    names = {int(m.group(1)): n for n in manifest["kernels"] for m in [re.match(r"k(\d+)_", n)] if m}
    per_kernel, unattributed, summaries, block = {}, 0, [], None

    def close(block):
        nonlocal unattributed
        if block is None:
            return
        found = {int(i) for i in re.findall(r"\bk(\d{4,})_\w*_kernel", "\n".join(block))}
        hits = [names[i] for i in found if i in names]
        for name in hits:
            per_kernel[name] = per_kernel.get(name, 0) + 1
        if not hits:
            unattributed += 1

    for path in paths:
        for text in Path(path).read_text(errors="replace").splitlines():
            if not text.startswith("========="):
                continue
            body = text[len("========="):]
            if re.match(r"\s*[A-Z ]*SUMMARY:", body):
                close(block)
                block = None
                summaries.append(body.strip())
            elif body.startswith("  ") and block is not None:
                block.append(body)
            elif body.strip() and not body.strip().startswith("COMPUTE-SANITIZER"):
                close(block)
                block = [body]
        close(block)
        block = None
    for name, count in sorted(per_kernel.items()):
        kernel = manifest["kernels"][name]
        print(f"{count:5d} report(s)  {kernel['rule']:22s} {name}  ({origin(kernel)})")
    print(f"{sum(per_kernel.values())} report(s) on {len(per_kernel)} kernel(s), {unattributed} not attributed; "
          + ("; ".join(summaries) or "no summary line found"))
    return 1 if per_kernel or unattributed else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", default=str(HERE), help="bundle folder (default: this file's)")
    ap.add_argument("--rule", nargs="+", help="only kernels of these templates")
    ap.add_argument("--models", nargs="+", help="only kernels found in these corpus models")
    ap.add_argument("--kernels", nargs="+", help="only these kernels (bundle names)")
    ap.add_argument("--one-per-form", action="store_true",
                    help="only the smallest kernel (argument bytes) of each schedule form: the template and its "
                         "tile without the grid (racecheck's hazards are within a block)")
    ap.add_argument("--limit", type=int, help="at most this many kernels (after the filters)")
    ap.add_argument("--list", action="store_true", help="print the selection and stop")
    ap.add_argument("--results", help="write every kernel's result to this JSON file")
    ap.add_argument("--kernel-timeout", type=float, default=300.0, help="seconds before a kernel's process is killed")
    ap.add_argument("--cuda-compiler", choices=("auto", "bundle", "nvrtc", "nvcc"), default="auto",
                    help="auto: the bundle's cubins, else NVRTC, else nvcc (run.py's compiler)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: only for a bundle of llvm libraries (the tests')")
    ap.add_argument("--isolate", dest="isolate", action="store_true", default=True,
                    help="each library in a child process (default)")
    ap.add_argument("--no-isolate", dest="isolate", action="store_false")
    ap.add_argument("--summarize-log", nargs="+", metavar="FILE",
                    help="count the reports of compute-sanitizer logs (--log-file, or the captured output) per kernel")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--status", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    bundle = Path(args.bundle).resolve()
    manifest = load_manifest(bundle)
    if args.summarize_log:
        return summarize_log(manifest, args.summarize_log)
    if args.worker:
        return run_worker(args, bundle, manifest, json.loads(Path(args.worker).read_text()))
    selection = select(manifest, args)
    total = len(selection)
    if args.list:
        for index, name, kernel in selection:
            print(line(index, total, name, kernel, "-", f"  {kernel['library']}"))
        print(f"{total} kernels selected")
        return 0
    print(f"{total} kernels from {bundle} (built from commit {manifest.get('commit')})", flush=True)
    start = time.time()

    def save(results):
        if args.results:
            failed = [n for _, n, _ in selection if n in results and results[n].get("status") != "ok"]
            Path(args.results).write_text(json.dumps(
                {"bundle": str(bundle), "commit": manifest.get("commit"), "selected": total,
                 "done": len(results), "failed": failed,
                 "results": [results.get(n, {"name": n, "status": "not run"}) for _, n, _ in selection]}, indent=1))

    if args.isolate:
        tmp = Path(tempfile.mkdtemp(prefix="tvm_sanitize_"))
        atexit.register(shutil.rmtree, tmp, True)
        results = run_isolated(args, bundle, selection, tmp, save)
    else:
        status = Path(tempfile.mkstemp(prefix="tvm_sanitize_", suffix=".jsonl")[1])
        atexit.register(status.unlink, True)
        args.status = str(status)
        run_worker(args, bundle, manifest, {"total": total, "kernels": selection})
        results = {e["name"]: e for e in read_status(status) if e["event"] == "end"}
    failed = [(i, n, k) for i, n, k in selection if results.get(n, {}).get("status") != "ok"]
    print(f"== {total} kernels run once in {time.time() - start:.0f} s: {total - len(failed)} ok, "
          f"{len(failed)} failed", flush=True)
    for index, name, kernel in failed:
        print(line(index, total, name, kernel, "FAILED", f": {results.get(name, {}).get('error', 'no result')}"))
    save({n: results.get(n, {"name": n, "status": "failed", "error": "no result"}) for _, n, _ in selection})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
