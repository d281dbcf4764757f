"""The bundle runner's reports (copied beside run.py; see run.py): the machine's facts and
results.md, kernels.md and results.png from results.json's rows. Needs numpy; matplotlib for the
plot when importable. The plot shows speed-ups, not latencies: models' times span four decades,
and what a reader asks is how much faster the plugin is than each baseline that was measured.
"""

import platform  # noqa: E401
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

COLUMNS = [("stock", "stock"), ("hw", "hw"), ("stock_graph", "stock+graph"), ("hw_graph", "hw+graph"),
           ("eager", "eager"), ("compile", "compile"), ("compile_graphs", "compile+graphs")]


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


def knob_text(value):
    """A variant knob's value as --variant spells it: a list as ``A+B``, a shape as ``8x16``."""
    if isinstance(value, list):
        if value and all(isinstance(v, (int, float)) for v in value):
            return "x".join(str(v) for v in value)
        return "+".join(knob_text(v) for v in value)
    return str(value)


def variants_table(rows):
    """Lines of results.md's table of the bundle's extra variants (none: no lines)."""
    out = []
    for row in rows:
        hw_ms = row.get("times_s", {}).get("hw")
        for key, knobs in (row.get("knobs") or {}).items():
            t, acc, groups = row["times_s"].get(key), row["accuracy"].get(key), row.get("groups", {})
            text = ", ".join(f"{k}={knob_text(v)}" for k, v in knobs.items())
            ratio = f"{t / hw_ms:.2f}x" if t and hw_ms else "-"
            err = f"{acc['rel_l2']:.1e}" + ("" if acc["ok"] else " FAIL") if acc else "-"
            out.append(f"| {row['model']} | {row['batch']} | {key} | {text} | {groups.get('hw', '-')} / "
                       f"{groups.get(key, '-')} | {_ms(row, 'stock')} | {_ms(row, 'hw')} | {_ms(row, key)} | "
                       f"{ratio} | {err} |")
    if not out:
        return []
    return ["", "## Variants", "", "Extra libraries: the hw pipeline with other knobs (bundle --variant), "
            "checked against stock (against hw in a bundle built --no-stock). variant/hw = variant time / "
            "hw time (above 1: hw's grouping is faster).",
            "", "| model | batch | variant | knobs | groups of main (hw / variant) | stock | hw | variant "
            "| variant/hw | rel L2 vs reference |",
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


#: The speed-ups results.png shows: (legend, baseline column, the plugin's column), each the
#: baseline's median time over the plugin's. CUDA-graph columns are paired with each other.
SPEEDUPS = [("over stock TVM", "stock", "hw"),
            ("over stock TVM, both with CUDA graphs", "stock_graph", "hw_graph"),
            ("over torch.compile", "compile", "hw"),
            ("over torch.compile, both with CUDA graphs", "compile_graphs", "hw_graph")]


def _failed(row, key):
    """The error of ``key``'s system in ``row`` ("stock build": ... counts for stock), or ""."""
    errors = row.get("errors") or {}
    return next((str(v) for k, v in errors.items() if k.split()[0] == key), "")


def speedup_series(results):
    """(row labels, {legend: [speed-up or None per row]}, {row index: why a baseline is missing}).

    Rows are those where the plugin's build ran; a series is kept only where at least one row
    measured both of its columns, so the legend names nothing that was not measured."""
    rows = [r for r in results["rows"] if (r.get("times_s") or {}).get("hw")]
    labels = [f"{r['model'].replace('corpus:', '')} b{r['batch']}" for r in rows]
    series, missing = {}, {}
    for legend, base, ours in SPEEDUPS:
        values = []
        for row in rows:
            t = row["times_s"]
            values.append(t[base] / t[ours] if t.get(base) and t.get(ours) else None)
        if any(v is not None for v in values):
            series[legend] = values
    for i, row in enumerate(rows):
        why = [f"{base} failed: {_failed(row, base)[:48]}" for _, base, _ in SPEEDUPS[:1] if _failed(row, base)]
        if why:
            missing[i] = "; ".join(why)
    return labels, series, missing


def draw_plot(results):
    """The figure of results.png: per model x batch, the plugin's speed-up over each baseline
    that was measured (horizontal bars, log scale, 1x marked), or why there is none."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    labels, series, missing = speedup_series(results)
    height = 0.28 * max(len(labels), 1) * max(len(series), 1) + 1.6
    fig, ax = plt.subplots(figsize=(9, max(3.0, height)))
    band = 0.8 / max(len(series), 1)
    for k, (legend, values) in enumerate(series.items()):
        ys = [i + (k - (len(series) - 1) / 2) * band for i in range(len(labels))]
        shown = [(y, v) for y, v in zip(ys, values) if v is not None]
        bars = ax.barh([y for y, _ in shown], [v for _, v in shown], height=band, label=legend, left=0)
        for bar, (_, v) in zip(bars, shown):
            ax.annotate(f"{v:.3g}x", (v, bar.get_y() + bar.get_height() / 2), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize=6)
    for i, why in missing.items():
        ax.annotate(why, (1.0, i), xytext=(4, 0), textcoords="offset points", va="center", fontsize=6,
                    color="#a33")
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_ylim(len(labels) - 0.5, -0.5)  # first row on top
    ax.set_xscale("log")
    ax.axvline(1.0, color="#444", linewidth=0.8)
    values = [v for vs in series.values() for v in vs if v is not None] or [1.0]
    ax.set_xlim(min(min(values), 1.0) / 1.5, max(max(values), 1.0) * 2.5)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}x"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("speed-up of the hardware-aware build (baseline median latency / its median latency; "
                  "right of 1x: faster)", fontsize=8)
    sysinfo = results.get("system", {})
    ax.set_title(f"tvm_fusion_hw on {sysinfo.get('gpu') or sysinfo.get('device', '?')} "
                 f"({results.get('profile', '?')})" + ("" if series else ": no baseline measured"), fontsize=9)
    if series:
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def write_plot(results, path):
    """results.png (see :func:`draw_plot`), or a note why not."""
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel,unused-import  # noqa: F401
    except ImportError:
        return "matplotlib not importable: no results.png"
    fig = draw_plot(results)
    fig.savefig(path, dpi=120)
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    plt.close(fig)
    return ""
