"""An :class:`~.model.Explanation` as one self-contained HTML page.

Everything is inline (CSS, the rooflines as SVG from :mod:`.roofline`, a few lines of script of
our own): the page fetches nothing and works opened from a file, on a machine without network.
It holds the summary, the decisions side by side with the differing ones marked (a switch shows
only those), the kernels aligned by the ops they compute, and per profile its roofline (stock's
kernels can be shown or hidden), its kernels, its decisions and stock's grouping.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable, Sequence

from . import units
from .model import Explanation, KernelMatch, PlanView
from .roofline import roofline_svg, unplotted

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.2em; margin-top: 1.6em; } h3 { font-size: 1.05em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; vertical-align: top; text-align: left;
         max-width: 36em; overflow-wrap: anywhere; }
th { background: #f2f2f2; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.differs td { background: #fff3cd; } td.FUSE { color: #1a7f37; font-weight: 600; }
td.stage { color: #b35900; font-weight: 600; } td.apart { color: #555; }
.small { font-size: 12px; color: #555; } .note { color: #8a5300; }
svg.roofline { background: #fff; border: 1px solid #ddd; }
svg .grid { stroke: #eee; } svg .frame { fill: none; stroke: #999; }
svg .roof { fill: none; stroke: #222; stroke-width: 2; } svg .ridge { stroke: #888; stroke-dasharray: 4 3; }
svg text { font: 11px system-ui, sans-serif; fill: #333; } svg .axis { font-size: 12px; }
svg .plugin { fill-opacity: 0.75; stroke: #fff; } svg .stock { fill: none; stroke: #555; stroke-width: 1.5; }
body.hide-stock svg .stock-points { display: none; }
body.only-differing tr.same { display: none; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; } figure { margin: 0; max-width: 642px; }
td.tile { font-size: 12px; max-width: 28em; }
"""

_SCRIPT = """
(function () {
  function bind(id, cls, invert) {
    var box = document.getElementById(id);
    if (!box) { return; }
    var apply = function () { document.body.classList.toggle(cls, invert ? !box.checked : box.checked); };
    box.addEventListener('change', apply);
    apply();
  }
  bind('show-stock', 'hide-stock', true);
  bind('only-differing', 'only-differing', false);
})();
"""


def _e(value) -> str:
    return html.escape(str(value))


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = (),
           row_classes: Sequence[str] = (), cell_classes=None) -> str:
    """A table of escaped cells (``rows`` hold text; ``numeric`` columns align right)."""
    out = ["<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        css = f' class="{row_classes[i]}"' if i < len(row_classes) and row_classes[i] else ""
        cells = []
        for j, cell in enumerate(row):
            classes = (["num"] if j in numeric else []) + ([cell_classes(j, cell)] if cell_classes else [])
            attr = f' class="{" ".join(c for c in classes if c)}"' if any(classes) else ""
            cells.append(f"<td{attr}>{_e(cell)}</td>")
        out.append(f"<tr{css}>" + "".join(cells) + "</tr>")
    return "".join(out) + "</tbody></table>"


def _summary(expl: Explanation) -> str:
    plans = expl.plans
    rows = [["GPU"] + [p.display_name for p in plans],
            ["peak FP32, DRAM"] + [f"{units.rate(p.peak_flop_per_s)}, {p.dram_bytes_per_s / 1e12:.3g} TB/s"
                                   for p in plans],
            ["ridge point (FLOP/B)"] + [f"{p.ridge_flop_per_byte:.3g}" for p in plans],
            ["kernels (stock's)"] + [f"{len(p.kernels)} ({len(p.stock)})" for p in plans],
            ["fused / kept apart / staged"] + [f"{len(p.fused())} / {len(p.apart())} / {len(p.staged())}"
                                               for p in plans],
            ["roofline bound (stock's)"] + [f"{units.seconds(p.roofline_s())} "
                                            f"({units.seconds(p.stock_modelled_s())})" for p in plans],
            ["modelled (tile models)"] + [units.seconds(p.modelled_s()) for p in plans],
            ["registers measured with"] + [p.measured_with or "not measured" for p in plans]]
    return _table([""] + [p.label for p in plans], rows)


def _verdict_class(column: int, cell: str) -> str:
    return cell if column >= 1 and cell in ("FUSE", "stage", "apart") else ""


def _decisions(expl: Explanation) -> str:
    differing = expl.differing()
    if len(expl.plans) < 2:
        head = ""
    elif differing:
        head = (f"<p><b>{len(differing)} of {len(expl.decisions)} decisions differ</b> (marked). "
                '<label><input type="checkbox" id="only-differing"> show only those</label></p>')
    else:
        head = f"<p><b>No difference</b>: the profiles take the same {len(expl.decisions)} decisions.</p>"
    rows = [["*" if r.differs else "", *r.verdicts, r.rule, f"{r.producer} -> {r.consumer}", r.why]
            for r in expl.decisions]
    classes = ["differs" if r.differs else "same" for r in expl.decisions]
    table = _table(["", *[p.label for p in expl.plans], "rule", "producer -> consumer", "what made them differ"],
                   rows, row_classes=classes, cell_classes=_verdict_class)
    return head + f'<div id="decisions">{table}</div>'


def _kernel_alignment(expl: Explanation) -> str:
    def cell(match: KernelMatch, k: int) -> str:
        kernel = match.kernels[k]
        if kernel is None:
            return "-"
        regs = kernel.measured.registers if kernel.measured else "?"
        return f"{kernel.kernel} ({kernel.schedule_rule or '?'}, {regs} regs)"

    def ops(match: KernelMatch) -> str:
        kernel = next(k for k in match.kernels if k is not None)
        return ", ".join(kernel.ops)

    rows = [[ops(m), *[cell(m, k) for k in range(len(expl.plans))]] for m in expl.kernels]
    return _table(["ops", *[p.label for p in expl.plans]], rows,
                  row_classes=["differs" if m.differs else "same" for m in expl.kernels])


def _rooflines(expl: Explanation) -> str:
    figures = []
    for plan in expl.plans:
        skipped = Counter(unplotted(plan))
        names = [n if c == 1 else f"{n} x{c}" for n, c in sorted(skipped.items())]
        names = ", ".join(names[:8]) + (f", and {len(names) - 8} more" if len(names) > 8 else "")
        note = f" Not plotted: {sum(skipped.values())} kernels with no FLOPs ({names})." if skipped else ""
        figures.append(f"<figure>{roofline_svg(plan)}<figcaption class=\"small\">{_e(plan.label)}: "
                       f"{_e(plan.display_name)}.{_e(note)}</figcaption></figure>")
    return ('<p class="small">Throughput is modelled, not measured: a kernel\'s FLOPs over its template\'s '
            "modelled time where the template has a tile model, else over its roofline bound (on the roof). "
            "Point area: its share of the plan's modelled time. Hollow: stock FuseOps' kernels of the same "
            "model at their roofline bound.</p>"
            f'<div class="plots">{"".join(figures)}</div>')


def _plan_section(plan: PlanView, index: int) -> str:
    rows = []
    for k in plan.kernels:
        m = k.measured
        rows.append([k.kernel, ", ".join(k.ops), units.flops(k.flops), units.nbytes(k.compulsory_bytes),
                     f"{k.intensity:.3g}", k.regime, str(k.estimated_registers), str(m.registers) if m else "-",
                     str(m.spill_bytes) if m else "-", units.kib(m.shared_bytes) if m else "-",
                     units.percent(m.occupancy) if m else "-", units.schedule(k),
                     f"{units.seconds(k.modelled_s)} ({k.modelled_from})", ", ".join(k.stock_kernels)])
    kernels = _table(["kernel", "ops", "FLOPs", "compulsory bytes", "FLOP/B", "regime", "regs est.", "regs",
                      "spill B", "shared", "occupancy", "schedule and tile", "modelled", "stock's kernels"],
                     rows, numeric=(2, 3, 4, 6, 7, 8, 9, 10))
    decisions = _table(["", "rule", "producer -> consumer", "reason"],
                       [[("FUSE" if d.fused else "stage" if d.staged else "apart"), d.rule,
                         f"{d.producer} -> {d.consumer}", d.reason] for d in plan.decisions],
                       cell_classes=lambda j, c: c if j == 0 else "")
    stock = _table(["stock kernel", "ops", "FLOPs", "bytes", "FLOP/B", "roofline bound"],
                   [[k.kernel, ", ".join(k.ops), units.flops(k.flops), units.nbytes(k.compulsory_bytes),
                     f"{k.intensity:.3g}", units.seconds(k.modelled_s)] for k in plan.stock], numeric=(2, 3, 4, 5))
    caption = f'<p class="small">Budgets: {_e(", ".join(f"{a}: {b}" for a, b in plan.budgets.items()))}.</p>'
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in plan.notes)
    return (f'<section id="plan-{index}"><h2>{_e(plan.label)}: {_e(plan.display_name)}</h2>'
            f"{caption}{notes}"
            f"<h3>Kernels</h3>{kernels}<h3>Decisions</h3>{decisions}"
            f"<h3>Stock FuseOps' kernels</h3>{stock}</section>")


def render_html(expl: Explanation) -> str:
    """The page, as one string."""
    title = f"tvm-fusion-hw explain: {expl.model}" + (f" (batch {expl.batch})" if expl.batch else "")
    parts: list[str] = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        (f"<p>Profiles: {_e(', '.join(p.label for p in expl.plans))}. "
         '<label><input type="checkbox" id="show-stock" checked> show stock FuseOps\' kernels on the '
         "rooflines</label></p>"),
        "<h2>Summary</h2>", _summary(expl),
        "<h2>Rooflines</h2>", _rooflines(expl),
        "<h2>Decisions</h2>", _decisions(expl),
        "<h2>Kernels by the ops they compute</h2>", _kernel_alignment(expl),
    ]
    parts += [_plan_section(plan, i) for i, plan in enumerate(expl.plans)]
    parts.append(f"<script>{_SCRIPT}</script></body></html>\n")
    return "".join(parts)
