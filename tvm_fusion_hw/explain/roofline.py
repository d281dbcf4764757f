"""A profile's roofline as inline SVG: its two roofs and every kernel of a plan as a point.

Log-log: arithmetic intensity (FLOP per compulsory DRAM byte) across, FLOP/s up. The roofs are
the profile's DRAM bandwidth (``dram_bytes_per_s``, slope 1) and its FP32 peak
(``peak_fp32_flop_per_s``), meeting at the ridge point. A kernel sits at its intensity and its
*modelled* throughput (FLOPs over the template's modelled time, else over its roofline bound,
which puts it on the roof), its area its share of the plan's modelled time. Stock FuseOps'
kernels of the same model are hollow points at their roofline bound (dlight's schedules have no
model), drawn in their own group so the page can show or hide them. Kernels without FLOPs (data
movement) have no place on a log axis and are counted in the caption instead.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable

from . import units
from .model import PlanView

WIDTH, HEIGHT = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 96, 16, 30, 48
PLUGIN_COLOURS = {"memory-bound": "#1f77b4", "compute-bound": "#d62728"}
STOCK_COLOUR = "#555555"


def _decades(low: float, high: float) -> tuple[int, int]:
    return math.floor(math.log10(low)), math.ceil(math.log10(high))


class _Axes:
    """Maps (intensity, FLOP/s) to SVG pixels on decades that hold every point and both roofs."""

    def __init__(self, xs: Iterable[float], ys: Iterable[float], plan: PlanView):
        xs, ys = list(xs), list(ys)
        ridge, peak = plan.ridge_flop_per_byte, plan.peak_flop_per_s
        self.x0, self.x1 = _decades(min(xs + [ridge / 10]) / 2, max(xs + [ridge * 10]) * 2)
        low_roof = 10 ** self.x0 * plan.dram_bytes_per_s
        self.y0, self.y1 = _decades(min(ys + [low_roof]) / 2, peak * 2)

    def x(self, value: float) -> float:
        return LEFT + (math.log10(value) - self.x0) / (self.x1 - self.x0) * (WIDTH - LEFT - RIGHT)

    def y(self, value: float) -> float:
        return HEIGHT - BOTTOM - (math.log10(value) - self.y0) / (self.y1 - self.y0) * (HEIGHT - TOP - BOTTOM)


def _x_label(exponent: int) -> str:
    value = 10.0 ** exponent
    return f"{value:g}"


def _y_label(exponent: int) -> str:
    prefixes = {15: "P", 12: "T", 9: "G", 6: "M", 3: "k", 0: ""}
    base = max(e for e in prefixes if e <= exponent) if exponent >= 0 else 0
    return f"{10 ** (exponent - base):g} {prefixes[base]}FLOP/s"


def _frame(ax: _Axes) -> list[str]:
    out = []
    for e in range(ax.x0, ax.x1 + 1):
        x = ax.x(10.0 ** e)
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}"/>')
        out.append(f'<text class="tick" x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
                   f'{_x_label(e)}</text>')
    for e in range(ax.y0, ax.y1 + 1):
        y = ax.y(10.0 ** e)
        out.append(f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_y_label(e)}</text>')
    out.append(f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
               f'height="{HEIGHT - TOP - BOTTOM}"/>')
    out.append(f'<text class="axis" x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 10}" text-anchor="middle">'
               'arithmetic intensity (FLOP per compulsory DRAM byte)</text>')
    out.append(f'<text class="axis" transform="translate(14 {(TOP + HEIGHT - BOTTOM) / 2}) rotate(-90)" '
               'text-anchor="middle">modelled throughput (FLOP/s)</text>')
    return out


def _roofs(ax: _Axes, plan: PlanView) -> list[str]:
    ridge, peak, bw = plan.ridge_flop_per_byte, plan.peak_flop_per_s, plan.dram_bytes_per_s
    xa = 10.0 ** ax.x0
    xb = 10.0 ** ax.x1
    out = [(f'<polyline class="roof" points="{ax.x(xa):.1f},{ax.y(xa * bw):.1f} {ax.x(ridge):.1f},'
            f'{ax.y(peak):.1f} {ax.x(xb):.1f},{ax.y(peak):.1f}"/>'),
           (f'<line class="ridge" x1="{ax.x(ridge):.1f}" y1="{ax.y(peak):.1f}" x2="{ax.x(ridge):.1f}" '
            f'y2="{HEIGHT - BOTTOM}"/>'),
           (f'<text class="roof-label" x="{ax.x(xb) - 4:.1f}" y="{ax.y(peak) - 6:.1f}" text-anchor="end">'
            f'FP32 peak {units.rate(peak)}</text>'),
           (f'<text class="roof-label" x="{ax.x(ridge) + 4:.1f}" y="{HEIGHT - BOTTOM - 6}">'
            f'ridge {ridge:.3g} FLOP/B</text>')]
    mid = math.sqrt(xa * ridge)
    angle = -math.degrees(math.atan2(ax.y(xa * bw) - ax.y(ridge * bw), ax.x(ridge) - ax.x(xa)))
    out.append(f'<text class="roof-label" transform="translate({ax.x(mid):.1f} {ax.y(mid * bw) - 6:.1f}) '
               f'rotate({angle:.1f})" text-anchor="middle">DRAM {bw / 1e12:.3g} TB/s</text>')
    return out


def _radius(share: float) -> float:
    return 3.0 + 14.0 * math.sqrt(max(share, 0.0))


def roofline_svg(plan: PlanView) -> str:
    """The plan's roofline plot, one ``<svg>`` element (no scripts, no external references)."""
    plugin = [k for k in plan.kernels if k.flops > 0 and k.modelled_s > 0]
    stock = [k for k in plan.stock if k.flops > 0 and k.modelled_s > 0]
    total = plan.modelled_s() or 1.0
    stock_total = plan.stock_modelled_s() or 1.0
    ax = _Axes([k.intensity for k in plugin + stock], [k.modelled_flop_per_s for k in plugin + stock], plan)
    body = _frame(ax) + _roofs(ax, plan)
    body.append('<g class="stock-points">')
    for k in stock:
        share = k.modelled_s / stock_total
        tip = (f"stock {k.kernel}: {k.intensity:.3g} FLOP/B, {units.rate(k.modelled_flop_per_s)} at its roofline "
               f"bound {units.seconds(k.modelled_s)} ({share:.0%} of stock's)")
        body.append(f'<circle class="stock" cx="{ax.x(k.intensity):.1f}" cy="{ax.y(k.modelled_flop_per_s):.1f}" '
                    f'r="{_radius(share):.1f}"><title>{html.escape(tip)}</title></circle>')
    body.append('</g><g class="plugin-points">')
    for k in sorted(plugin, key=lambda k: -k.modelled_s):  # small points drawn over large ones
        share = k.modelled_s / total
        tip = (f"{k.kernel}: {k.intensity:.3g} FLOP/B, modelled {units.rate(k.modelled_flop_per_s)}, "
               f"{units.seconds(k.modelled_s)} ({k.modelled_from}), {share:.0%} of the modelled time")
        colour = PLUGIN_COLOURS.get(k.regime, "#2ca02c")
        body.append(f'<circle class="plugin" fill="{colour}" cx="{ax.x(k.intensity):.1f}" '
                    f'cy="{ax.y(k.modelled_flop_per_s):.1f}" r="{_radius(share):.1f}">'
                    f'<title>{html.escape(tip)}</title></circle>')
    body.append("</g>")
    body += _legend()
    title = f"Roofline of {plan.label}: kernels at their modelled throughput"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="roofline" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{html.escape(title)}">'
            f'<title>{html.escape(title)}</title>' + "".join(body) + "</svg>")


def _legend() -> list[str]:
    x, y = LEFT + 10, TOP + 14
    items = [(f'<circle cx="{x}" cy="{y}" r="5" fill="{PLUGIN_COLOURS["memory-bound"]}"/>', "memory-bound kernel"),
             (f'<circle cx="{x}" cy="{y + 16}" r="5" fill="{PLUGIN_COLOURS["compute-bound"]}"/>',
              "compute-bound kernel"),
             (f'<circle class="stock" cx="{x}" cy="{y + 32}" r="5"/>', "stock FuseOps kernel (roofline bound)")]
    out = ['<g class="legend">']
    for k, (mark, text) in enumerate(items):
        css = ' class="stock-points"' if k == 2 else ""
        out.append(f'<g{css}>{mark}<text x="{x + 10}" y="{y + 16 * k + 4}">{html.escape(text)}</text></g>')
    out.append("</g>")
    return out


def unplotted(plan: PlanView) -> list[str]:
    """Kernels of the plan with no FLOPs (or no modelled time): not on a log axis."""
    return [k.kernel for k in plan.kernels if not (k.flops > 0 and k.modelled_s > 0)]
